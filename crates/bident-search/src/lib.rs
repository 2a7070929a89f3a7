//! bident-search: the operator-to-PU mapping (paper 3.2-3.4) and the single-PU baselines.
//!
//! - [`chain`]: the paper's execution graph on a chain (eq. 1), by DP and by Dijkstra;
//! - [`problem`]: the mapping problem on the DAG and the plan evaluator, a discrete-event
//!   simulation whose figures are the ones every plan reports;
//! - `search`: sequential mode = the DP on the phased order, then hill climbing under the
//!   evaluator (the DP is exact on chains; on a DAG transfers follow edges, not the order) with
//!   single-op moves and block moves (runs of neighbours in the order moved to one PU together,
//!   which escape where moving one op alone loses a saving or a transfer on both sides);
//!   parallel mode = the paper's per-branch DP, then hill climbing under the parallel evaluator
//!   (which charges two branches on one PU as serial and applies contention; phases of up to
//!   [`Problem::EXACT_PHASE_LIMIT`] assignments solved exactly, the branches of the others also
//!   moved in combinations; on mid-size graphs climbed again from other starts and seeded
//!   kicks), never returning a plan worse than the best sequential one;
//! - instances of at most [`Problem::EXHAUSTIVE_LIMIT`] assignments are also solved by exhaustive
//!   search, so their plans are optimal under the evaluator;
//! - [`mod@diff`]: the ops that moved between two plans of one graph, and the table `plan-diff`
//!   prints.
//! - `refine`: which runs of a plan the table prices from pairs ([`segments_to_measure`]), to
//!   be measured whole before the plan is trusted (by the driver's refine and a server's
//!   re-plan).
//!
//! Owns the `Plan` artifact and `check_plan`. Architecture invariant: no I/O and no backend.
pub mod chain;
pub mod concurrent;
mod constraints;
pub mod diff;
mod forkjoin;
mod mapping;
pub mod measured;
pub mod pass;
mod plan;
pub mod problem;
mod refine;
mod wide;

use bident_ir::OpId;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

pub use chain::Chain;
pub use constraints::Constraints;
pub use diff::{Move, PlanDiff, diff};
pub use mapping::{Mapping, best_mapping, heuristic_mapping, parallel_mapping, sequential_mapping};
pub use measured::{MeasuredRuns, OpCosts};
pub use pass::{MappingSearch, Placement, plan_from_placement, search_by};
pub(crate) use plan::build_plan;
pub use plan::{Baseline, Plan, Reason, Step, check_figures, check_plan};
pub use problem::{OrderLinks, Problem, Schedule, Timeline};
pub use refine::{REFINE_ROUNDS, segments_to_measure, whole_model_runs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Microseconds.
    Latency,
    /// Microjoules (µs × W).
    Energy,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::Latency => "latency",
            Objective::Energy => "energy",
        }
    }
}

/// What the search may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One op at a time.
    Sequential,
    /// The branches of a phase at the same time on different PUs.
    Parallel,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Parallel => "parallel",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SearchConfig {
    pub objective: Objective,
    pub mode: Mode,
    pub constraints: Constraints,
    /// Told how long work goes (the parallel hill climbing on large graphs).
    #[serde(skip)]
    pub progress: ProgressHook,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            objective: Objective::Latency,
            mode: Mode::Sequential,
            constraints: Constraints::default(),
            progress: ProgressHook::default(),
        }
    }
}

/// Where a search reports long work: `(what, done, total)`, called on the searching thread.
/// The default reports nowhere.
#[derive(Clone, Default)]
pub struct ProgressHook(Option<std::sync::Arc<ProgressFn>>);

/// A progress report's receiver: `(what, done, total)`.
pub type ProgressFn = dyn Fn(&str, usize, usize) + Send + Sync;

impl ProgressHook {
    pub fn new(f: impl Fn(&str, usize, usize) + Send + Sync + 'static) -> Self {
        Self(Some(std::sync::Arc::new(f)))
    }

    pub fn report(&self, what: &str, done: usize, total: usize) {
        if let Some(f) = &self.0 {
            f(what, done, total);
        }
    }
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "ProgressHook(set)" } else { "ProgressHook(none)" })
    }
}

/// The one rule of which neighbours in the execution order compile together under a parallel
/// schedule (under a sequential one any do): an op at (phase, branch) `after` joins the op
/// before it at `before` when both are in one branch of one phase, or in two phases of one
/// branch each (`one_branch`), so that the run overlaps nothing else. [`Plan::joins_previous`]
/// (the plan's segments, the runtime's tasks) and the evaluator's runs ([`OrderLinks`]) use it.
pub fn joins_in_parallel(before: (usize, usize), after: (usize, usize), one_branch: impl Fn(usize) -> bool) -> bool {
    before == after || (one_branch(before.0) && one_branch(after.0))
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("cost table is for `{table}` (graph {table_graph}), phased graph for `{phased}` (graph {phased_graph})")]
    Mismatch { table: String, table_graph: String, phased: String, phased_graph: String },
    #[error("op {op} `{name}` has no cost entry on any PU")]
    NoPu { op: OpId, name: String },
    #[error("the graph has no ops")]
    Empty,
    #[error("plan check failed: {0}")]
    Check(String),
    #[error("constraint: {0}")]
    Constraint(String),
    /// The joint search of two models would need more states than it holds in memory.
    #[error("{a} x {b} ops on {pus} PUs is {states} joint search states, above the {max} the search holds in memory")]
    TooLarge { a: usize, b: usize, pus: usize, states: usize, max: usize },
}

/// The search's seam: a cost table and a phased graph must describe the same fused graph, and
/// the table must be whole ([`CostTable::check_whole`]) whichever way it came (a file, a
/// profile in memory, a refine's or a server's re-pricing).
pub(crate) fn same_graph(phased: &PhasedGraph, costs: &CostTable) -> Result<(), SearchError> {
    if phased.graph == costs.graph && phased.op_count as usize == costs.ops.len() {
        return costs.check_whole().map_err(|e| SearchError::Check(e.to_string()));
    }
    Err(SearchError::Mismatch {
        table: costs.model.clone(),
        table_graph: costs.graph.short(),
        phased: phased.model.clone(),
        phased_graph: phased.graph.short(),
    })
}

/// Find the best mapping for `cfg.mode` and `cfg.objective`, with the single-PU baselines.
pub fn search(phased: &PhasedGraph, costs: &CostTable, cfg: &SearchConfig) -> Result<Plan, SearchError> {
    search_with(&pass::Bident, phased, costs, cfg, &|_| {})
}

/// [`search`] with the problem the search sees adjusted by `adjust` (the plan's figures still
/// come from the unadjusted problem).
pub(crate) fn search_with(
    search: &dyn MappingSearch,
    phased: &PhasedGraph,
    costs: &CostTable,
    cfg: &SearchConfig,
    adjust: &dyn Fn(&mut Problem),
) -> Result<Plan, SearchError> {
    same_graph(phased, costs)?;
    if phased.op_count == 0 {
        return Err(SearchError::Empty);
    }
    let full = Problem::new(phased, costs);
    if let Some(op) = (0..full.ops()).find(|&i| full.w[i].iter().all(Option::is_none)) {
        return Err(SearchError::NoPu { op: op as OpId, name: costs.ops[op].name.clone() });
    }
    let mut p = full.clone();
    let pinned = cfg.constraints.apply(&mut p, costs)?;
    let constrained = p.clone();
    adjust(&mut p);
    p.progress = cfg.progress.clone();
    let mut best = search.map(&p, cfg).ok_or(SearchError::Empty)?;
    pass::check_mapping(search.name(), &p, &best)?;
    let mut bound = constrained.lower_bound(best.schedule);
    // the whole model on a whole-only PU, where it beats the plan on the others
    let mut open = full.clone();
    adjust(&mut open);
    let value = |q: &Problem, m: &Mapping| q.evaluate(&m.assign, m.schedule).map(|t| t.objective(cfg.objective));
    let mut best_value = value(&p, &best).unwrap_or(f64::INFINITY);
    for (j, tl) in whole_only(&full, &cfg.constraints, costs) {
        bound = (bound.0.min(tl.latency_us), bound.1.min(tl.energy_uj));
        let whole = Mapping { assign: vec![j; full.ops()], schedule: Schedule::Sequential, estimate: 0.0 };
        if let Some(v) = value(&open, &whole).filter(|&v| v < best_value) {
            (best, best_value) = (Mapping { estimate: v, ..whole }, v);
        }
    }
    let plan = build_plan(&full, phased, costs, best, cfg, &pinned, search.name())?;
    checked(with_bound(plan, bound), phased, costs)
}

/// The whole-only PUs of `c` the whole model may run on under the rest of `c` (its pins,
/// forbids and exclusions; none where `c` places the model whole already), each with the
/// whole model's timeline there.
fn whole_only(full: &Problem, c: &Constraints, costs: &CostTable) -> Vec<(usize, Timeline)> {
    if c.whole.is_some() {
        return vec![];
    }
    c.whole_only_on(costs)
        .filter(|&pu| {
            let on_it = Constraints { whole: Some(pu.clone()), ..c.clone() };
            on_it.apply(&mut full.clone(), costs).is_ok()
        })
        .filter_map(|pu| {
            let j = costs.soc.pus.iter().position(|q| &q.name == pu)?;
            Some((j, full.whole_on(j)?))
        })
        .collect()
}

/// `plan` with the lower bounds of its problem and its gap to them.
pub(crate) fn with_bound(mut plan: Plan, (lb_us, lb_uj): (f64, f64)) -> Plan {
    plan.lower_bound_us = lb_us;
    plan.lower_bound_energy_uj = lb_uj;
    plan.gap = match plan.objective {
        Objective::Latency => plan.predicted_us / lb_us - 1.0,
        Objective::Energy => plan.predicted_energy_uj / lb_uj - 1.0,
    };
    plan
}

pub(crate) fn checked(plan: Plan, phased: &PhasedGraph, costs: &CostTable) -> Result<Plan, SearchError> {
    check_plan(&plan, phased, costs)?;
    Ok(plan)
}

/// The latency/energy front: plans minimising blends of the two objectives (latency weight
/// 0, 0.1, ..., 1, the energy side scaled by the mean power), dominated plans dropped, sorted by
/// latency. A blend of two sums is one sum, so each is the energy search with every op's power
/// replaced by `weight * mean power + (1 - weight) * power`.
pub fn pareto(phased: &PhasedGraph, costs: &CostTable, cfg: &SearchConfig) -> Result<Vec<Plan>, SearchError> {
    let mut front: Vec<Plan> = vec![];
    for step in 0..=10 {
        let weight = step as f64 / 10.0;
        let blended = SearchConfig { objective: Objective::Energy, ..cfg.clone() };
        let plan = search_with(&pass::Bident, phased, costs, &blended, &|p: &mut Problem| {
            let n = p.power.iter().flatten().count().max(1) as f64;
            let mean = p.power.iter().flatten().sum::<f64>() / n;
            p.power.iter_mut().flatten().for_each(|w| *w = weight * mean + (1.0 - weight) * *w);
        })?;
        let plan = Plan { blend: Some(weight), ..plan };
        let dominated = |a: &Plan, b: &Plan| {
            a.predicted_us <= b.predicted_us
                && a.predicted_energy_uj <= b.predicted_energy_uj
                && (a.predicted_us < b.predicted_us || a.predicted_energy_uj < b.predicted_energy_uj)
        };
        let same =
            |a: &Plan, b: &Plan| a.predicted_us == b.predicted_us && a.predicted_energy_uj == b.predicted_energy_uj;
        if front.iter().any(|f| dominated(f, &plan) || same(f, &plan)) {
            continue;
        }
        front.retain(|f| !dominated(&plan, f));
        front.push(plan);
    }
    front.sort_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us));
    Ok(front)
}

#[cfg(test)]
mod tests {
    /// Neighbours join in one branch of a phase and across phases of one branch each, not
    /// across the branches of a phase that has several (the run would overlap them).
    #[test]
    fn neighbours_join_where_their_run_overlaps_nothing() {
        // phase 0 one branch, phase 1 two, phase 2 one
        let one_branch = |phase: usize| phase != 1;
        assert!(super::joins_in_parallel((1, 0), (1, 0), one_branch));
        assert!(!super::joins_in_parallel((1, 0), (1, 1), one_branch));
        assert!(super::joins_in_parallel((0, 0), (2, 0), one_branch));
        assert!(!super::joins_in_parallel((0, 0), (1, 0), one_branch));
        assert!(!super::joins_in_parallel((1, 1), (2, 0), one_branch));
    }
}
