//! The refine rule: which runs of a plan the cost table prices from pairs rather than from a
//! measurement of the run whole. The driver's refine measures them before a plan runs, and a
//! server's re-plan before it swaps one in; both search again on the grown table, for at most
//! [`REFINE_ROUNDS`] rounds.

use bident_ir::OpId;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;

use crate::Plan;

/// Rounds of measuring a plan's segments and searching again, at most.
pub const REFINE_ROUNDS: usize = 4;

/// The plan's segments of three or more ops and each PU's whole-model run, where the table has
/// no measurement of them yet: (ops in execution order, PU index).
pub fn segments_to_measure(plan: &Plan, costs: &CostTable, phased: &PhasedGraph) -> Vec<(Vec<OpId>, usize)> {
    let measured = |ops: &[OpId], pu: usize| costs.segments.iter().any(|s| s.ops == ops && s.per_pu[pu].is_some());
    let whole = whole_model_runs(costs, phased);
    let mut wanted: Vec<(Vec<OpId>, usize)> = plan
        .segments()
        .into_iter()
        .filter_map(|(ops, pu)| costs.soc.pus.iter().position(|p| p.name == pu).map(|j| (ops, j)))
        .chain(whole)
        .filter(|(ops, j)| ops.len() >= 3 && !measured(ops, *j))
        .collect();
    wanted.sort();
    wanted.dedup();
    wanted
}

/// The whole model as one run on every PU that can run all of its ops, and on every
/// whole-model configuration (`PuSpec::whole_only`: measured whole only):
/// (execution order, PU).
pub fn whole_model_runs(costs: &CostTable, phased: &PhasedGraph) -> Vec<(Vec<OpId>, usize)> {
    let order = phased.order();
    (0..costs.soc.pus.len())
        .filter(|&j| costs.soc.pus[j].whole_only || order.iter().all(|&o| costs.cost(o, j).is_some()))
        .map(|j| (order.clone(), j))
        .collect()
}
