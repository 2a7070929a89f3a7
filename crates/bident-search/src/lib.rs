//! bident-search: the sequential execution graph and its shortest path (paper 3.2.1, 3.3.1,
//! 3.3.4), plus the single-PU baselines.
//!
//! Ops are taken in the phased graph's execution order. Node weight w(O_i, P_j) is the profiled
//! dispatch+execution time; a change of PU between consecutive ops pays H2D of the next op when
//! it enters an accelerator and D2H of the previous op when it leaves one (eq. 1). The first op
//! pays its H2D and the last its D2H. Under the energy objective every term is multiplied by
//! the power of the PU that spends it.
//!
//! Owns the `Plan` artifact and `check_plan`. Architecture invariant: no I/O and no backend.

use std::collections::BTreeMap;

use bident_artifact::{Artifact, ContentHash};
use bident_ir::OpId;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Sequential,
}

#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub objective: Objective,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self { objective: Objective::Latency }
    }
}

/// One op of the plan, in execution order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub op: OpId,
    pub name: String,
    pub kind: String,
    pub pu: String,
    /// Profiled dispatch+execution time on that PU (µs).
    pub exec_us: f64,
    /// Transfer time charged before this op (µs): H2D/D2H on a PU change, H2D for the first op.
    pub transfer_us: f64,
}

/// Every op on one PU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub pu: String,
    /// None when some op has no cost entry on this PU.
    pub predicted_us: Option<f64>,
    pub predicted_energy_uj: Option<f64>,
    pub unsupported_ops: u32,
}

/// An operator-to-PU mapping with its predicted cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub model: String,
    /// Payload hash of the fused graph the plan is for.
    pub graph: ContentHash,
    pub soc: String,
    pub simulated: bool,
    pub pus: Vec<String>,
    pub mode: Mode,
    pub objective: Objective,
    pub steps: Vec<Step>,
    pub predicted_us: f64,
    pub predicted_energy_uj: f64,
    /// Ops per PU.
    pub ops_per_pu: BTreeMap<String, u32>,
    pub baselines: Vec<Baseline>,
    /// The single PU with the lowest predicted latency.
    pub best_single_pu: Option<String>,
    pub best_single_pu_us: Option<f64>,
}

impl Artifact for Plan {
    const KIND: &'static str = "plan";
    const SCHEMA_VERSION: u32 = 1;
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
}

/// Costs along an execution order, ready for the DP and the evaluator.
#[derive(Debug)]
pub struct Chain {
    /// `w[i][j]`: None where op i has no entry on PU j.
    pub w: Vec<Vec<Option<f64>>>,
    pub h2d: Vec<Vec<f64>>,
    pub d2h: Vec<Vec<f64>>,
    pub power: Vec<Vec<f64>>,
    pub accelerator: Vec<bool>,
}

impl Chain {
    pub fn new(order: &[OpId], t: &CostTable) -> Self {
        let k = t.soc.pus.len();
        let row = |op: OpId, f: &dyn Fn(&bident_profile::Cost) -> f64| {
            (0..k).map(|j| t.cost(op, j).map(f)).collect::<Vec<_>>()
        };
        Self {
            w: order.iter().map(|&o| row(o, &|c| c.weight_us())).collect(),
            h2d: order.iter().map(|&o| row(o, &|c| c.h2d_us).into_iter().map(|v| v.unwrap_or(0.0)).collect()).collect(),
            d2h: order.iter().map(|&o| row(o, &|c| c.d2h_us).into_iter().map(|v| v.unwrap_or(0.0)).collect()).collect(),
            power: order
                .iter()
                .map(|&o| row(o, &|c| c.power_w).into_iter().map(|v| v.unwrap_or(0.0)).collect())
                .collect(),
            accelerator: t.soc.pus.iter().map(|p| p.kind.is_accelerator()).collect(),
        }
    }

    fn pus(&self) -> usize {
        self.accelerator.len()
    }

    /// Transfer before op `i` on PU `j` when op `i-1` ran on `k`, as (time on j, time on k).
    fn transfer(&self, i: usize, k: usize, j: usize) -> (f64, f64) {
        if k == j {
            return (0.0, 0.0);
        }
        let into = if self.accelerator[j] { self.h2d[i][j] } else { 0.0 };
        let out = if self.accelerator[k] { self.d2h[i - 1][k] } else { 0.0 };
        (into, out)
    }

    fn weight(&self, obj: Objective, i: usize, pu: usize, us: f64) -> f64 {
        match obj {
            Objective::Latency => us,
            Objective::Energy => us * self.power[i][pu],
        }
    }

    /// Objective value of a full assignment (None if some op is unsupported where placed).
    pub fn evaluate(&self, assign: &[usize], obj: Objective) -> Option<f64> {
        let n = assign.len();
        if n == 0 {
            return Some(0.0);
        }
        let mut total = self.weight(obj, 0, assign[0], self.h2d[0][assign[0]]);
        for i in 0..n {
            let j = assign[i];
            total += self.weight(obj, i, j, self.w[i][j]?);
            if i > 0 {
                let k = assign[i - 1];
                let (into, out) = self.transfer(i, k, j);
                total += self.weight(obj, i, j, into) + self.weight(obj, i - 1, k, out);
            }
        }
        let last = assign[n - 1];
        Some(total + self.weight(obj, n - 1, last, self.d2h[n - 1][last]))
    }

    /// Eq. (1): O(N K^2) dynamic programming over the chain. None if some op runs nowhere.
    pub fn dp(&self, obj: Objective) -> Option<(Vec<usize>, f64)> {
        let (n, k) = (self.w.len(), self.pus());
        if n == 0 {
            return Some((vec![], 0.0));
        }
        let inf = f64::INFINITY;
        let mut cost = vec![vec![inf; k]; n];
        let mut from = vec![vec![usize::MAX; k]; n];
        for (j, c) in cost[0].iter_mut().enumerate() {
            if let Some(w) = self.w[0][j] {
                *c = self.weight(obj, 0, j, self.h2d[0][j]) + self.weight(obj, 0, j, w);
            }
        }
        for i in 1..n {
            for j in 0..k {
                let Some(w) = self.w[i][j] else { continue };
                for p in 0..k {
                    if cost[i - 1][p] == inf {
                        continue;
                    }
                    let (into, out) = self.transfer(i, p, j);
                    let c = cost[i - 1][p]
                        + self.weight(obj, i, j, into)
                        + self.weight(obj, i - 1, p, out)
                        + self.weight(obj, i, j, w);
                    if c < cost[i][j] {
                        cost[i][j] = c;
                        from[i][j] = p;
                    }
                }
            }
        }
        let (mut j, best) = (0..k)
            .map(|j| (j, cost[n - 1][j] + self.weight(obj, n - 1, j, self.d2h[n - 1][j])))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        if best == inf {
            return None;
        }
        let mut assign = vec![0; n];
        for i in (0..n).rev() {
            assign[i] = j;
            j = from[i][j];
        }
        Some((assign, best))
    }
}

/// Find the optimal sequential mapping and the single-PU baselines.
pub fn search(phased: &PhasedGraph, costs: &CostTable, cfg: &SearchConfig) -> Result<Plan, SearchError> {
    if phased.graph != costs.graph {
        return Err(SearchError::Mismatch {
            table: costs.model.clone(),
            table_graph: costs.graph.short(),
            phased: phased.model.clone(),
            phased_graph: phased.graph.short(),
        });
    }
    let order = phased.order();
    if order.is_empty() {
        return Err(SearchError::Empty);
    }
    let chain = Chain::new(&order, costs);
    for (i, row) in chain.w.iter().enumerate() {
        if row.iter().all(Option::is_none) {
            return Err(SearchError::NoPu { op: order[i], name: costs.ops[order[i] as usize].name.clone() });
        }
    }
    let (assign, _) = chain.dp(cfg.objective).ok_or(SearchError::Empty)?;
    let plan = build_plan(phased, costs, &chain, &order, &assign, cfg.objective);
    check_plan(&plan, phased, costs)?;
    Ok(plan)
}

fn build_plan(
    phased: &PhasedGraph,
    costs: &CostTable,
    chain: &Chain,
    order: &[OpId],
    assign: &[usize],
    objective: Objective,
) -> Plan {
    let pus: Vec<String> = costs.soc.pus.iter().map(|p| p.name.clone()).collect();
    let steps = order
        .iter()
        .enumerate()
        .map(|(i, &op)| {
            let j = assign[i];
            let transfer_us = if i == 0 {
                chain.h2d[0][j]
            } else {
                let (a, b) = chain.transfer(i, assign[i - 1], j);
                a + b
            };
            Step {
                op,
                name: costs.ops[op as usize].name.clone(),
                kind: costs.ops[op as usize].kind.clone(),
                pu: pus[j].clone(),
                exec_us: chain.w[i][j].unwrap_or(f64::NAN),
                transfer_us,
            }
        })
        .collect();
    let mut ops_per_pu = BTreeMap::new();
    for &j in assign {
        *ops_per_pu.entry(pus[j].clone()).or_insert(0) += 1;
    }
    let baselines: Vec<Baseline> = (0..pus.len())
        .map(|j| {
            let single = vec![j; order.len()];
            Baseline {
                pu: pus[j].clone(),
                predicted_us: chain.evaluate(&single, Objective::Latency),
                predicted_energy_uj: chain.evaluate(&single, Objective::Energy),
                unsupported_ops: chain.w.iter().filter(|r| r[j].is_none()).count() as u32,
            }
        })
        .collect();
    let best = baselines.iter().filter_map(|b| b.predicted_us.map(|us| (b, us))).min_by(|a, b| a.1.total_cmp(&b.1));
    Plan {
        model: phased.model.clone(),
        graph: phased.graph,
        soc: costs.soc.name.clone(),
        simulated: costs.simulated,
        pus,
        mode: Mode::Sequential,
        objective,
        steps,
        predicted_us: chain.evaluate(assign, Objective::Latency).unwrap_or(f64::NAN),
        predicted_energy_uj: chain.evaluate(assign, Objective::Energy).unwrap_or(f64::NAN),
        ops_per_pu,
        best_single_pu: best.map(|(b, _)| b.pu.clone()),
        best_single_pu_us: best.map(|(_, us)| us),
        baselines,
    }
}

/// Check a plan against its inputs: every op mapped once in the phased order, each to a PU
/// that has a cost entry for it, and the predicted cost equal to the evaluator's.
pub fn check_plan(plan: &Plan, phased: &PhasedGraph, costs: &CostTable) -> Result<(), SearchError> {
    let bad = |m: String| Err(SearchError::Check(m));
    let order = phased.order();
    let got: Vec<OpId> = plan.steps.iter().map(|s| s.op).collect();
    if got != order {
        return bad("steps are not the phased graph's ops in its execution order".into());
    }
    let mut assign = Vec::with_capacity(order.len());
    for s in &plan.steps {
        let Some(j) = costs.soc.pus.iter().position(|p| p.name == s.pu) else {
            return bad(format!("op {} `{}` is mapped to unknown PU `{}`", s.op, s.name, s.pu));
        };
        if costs.cost(s.op, j).is_none() {
            return bad(format!("op {} `{}` is mapped to PU `{}`, which has no cost entry for it", s.op, s.name, s.pu));
        }
        assign.push(j);
    }
    let chain = Chain::new(&order, costs);
    let eval = chain.evaluate(&assign, Objective::Latency).unwrap_or(f64::NAN);
    if (eval - plan.predicted_us).abs() > 1e-6 * eval.abs().max(1.0) {
        return bad(format!("predicted {} µs but the evaluator gives {eval} µs", plan.predicted_us));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chain(w: Vec<Vec<Option<f64>>>, h2d: Vec<Vec<f64>>, d2h: Vec<Vec<f64>>, accel: Vec<bool>) -> Chain {
        let power = w.iter().map(|r| (0..r.len()).map(|j| 1.0 + j as f64).collect()).collect();
        Chain { w, h2d, d2h, power, accelerator: accel }
    }

    fn brute(c: &Chain, obj: Objective) -> Option<f64> {
        let (n, k) = (c.w.len(), c.pus());
        let mut best: Option<f64> = None;
        for code in 0..k.pow(n as u32) {
            let assign: Vec<usize> = (0..n).map(|i| code / k.pow(i as u32) % k).collect();
            if let Some(v) = c.evaluate(&assign, obj) {
                best = Some(best.map_or(v, |b: f64| b.min(v)));
            }
        }
        best
    }

    fn instance() -> impl Strategy<Value = Chain> {
        (1usize..=6, 1usize..=3).prop_flat_map(|(n, k)| {
            (
                proptest::collection::vec(
                    proptest::collection::vec(proptest::option::weighted(0.85, 1.0f64..100.0), k),
                    n,
                ),
                proptest::collection::vec(proptest::collection::vec(0.0f64..30.0, k), n),
                proptest::collection::vec(proptest::collection::vec(0.0f64..30.0, k), n),
                proptest::collection::vec(any::<bool>(), k),
            )
                .prop_map(|(w, h, d, a)| chain(w, h, d, a))
        })
    }

    proptest! {
        #[test]
        fn dp_equals_brute_force(c in instance()) {
            for obj in [Objective::Latency, Objective::Energy] {
                let dp = c.dp(obj);
                let bf = brute(&c, obj);
                match (dp, bf) {
                    (Some((assign, v)), Some(b)) => {
                        prop_assert!((v - b).abs() <= 1e-9 * b.max(1.0), "dp {v} brute {b}");
                        let e = c.evaluate(&assign, obj).expect("dp assignment is feasible");
                        prop_assert!((e - v).abs() <= 1e-9 * v.max(1.0));
                    }
                    (None, None) => {}
                    (d, b) => prop_assert!(false, "dp {d:?} vs brute {b:?}"),
                }
            }
        }
    }

    #[test]
    fn transfers_follow_the_paper() {
        // CPU(0) -> NPU(1): H2D of the NPU op; NPU -> CPU: D2H of the NPU op; CPU -> CPU free.
        let c = chain(
            vec![vec![Some(10.0), Some(1.0)], vec![Some(10.0), Some(1.0)]],
            vec![vec![2.0, 3.0], vec![5.0, 7.0]],
            vec![vec![11.0, 13.0], vec![17.0, 19.0]],
            vec![false, true],
        );
        assert_eq!(c.evaluate(&[0, 1], Objective::Latency), Some(2.0 + 10.0 + 7.0 + 1.0 + 19.0));
        assert_eq!(c.evaluate(&[1, 0], Objective::Latency), Some(3.0 + 1.0 + 13.0 + 10.0 + 17.0));
        assert_eq!(c.evaluate(&[0, 0], Objective::Latency), Some(2.0 + 10.0 + 10.0 + 17.0));
    }

    #[test]
    fn accelerator_to_accelerator_pays_both_ways() {
        // GPU(0) -> NPU(1): D2H of the GPU op and H2D of the NPU op; CPU(2) -> CPU is not here.
        let c = chain(
            vec![vec![Some(4.0), Some(6.0), Some(9.0)], vec![Some(8.0), Some(3.0), Some(9.0)]],
            vec![vec![1.0, 2.0, 0.5], vec![5.0, 7.0, 0.5]],
            vec![vec![11.0, 13.0, 0.5], vec![17.0, 19.0, 0.5]],
            vec![true, true, false],
        );
        assert_eq!(c.evaluate(&[0, 1], Objective::Latency), Some(1.0 + 4.0 + (11.0 + 7.0) + 3.0 + 19.0));
        // energy: each term at the power of the PU that spends it (power j+1 in this fixture)
        assert_eq!(
            c.evaluate(&[0, 1], Objective::Energy),
            Some(1.0 * 1.0 + 4.0 * 1.0 + 11.0 * 1.0 + 7.0 * 2.0 + 3.0 * 2.0 + 19.0 * 2.0)
        );
        let (assign, v) = c.dp(Objective::Latency).unwrap();
        assert_eq!(c.evaluate(&assign, Objective::Latency), Some(v));
    }
}
