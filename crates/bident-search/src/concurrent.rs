//! Two models at once (paper 3.3.3): each model runs its ops one at a time in its phased order,
//! and the search interleaves the two streams across the PUs.
//!
//! A plan is a sequence of steps; a step advances model A, model B, or both (the joint (i, j)
//! mode's three transitions; the aligned mode, for the same model twice, only advances both in
//! lockstep). The search prices a step (the paper's lockstep model):
//! - one op: its cost on its PU;
//! - two ops on different PUs: the longer of the two, each slowed by the contention factor of
//!   its PU against the other's;
//! - two ops on one PU: the co-execution costs (measured or modelled, [`CoCost`]), the step
//!   lasting until both finished.
//!
//! Transfers follow the paper's chain rule per stream: the state holds where each stream's last
//! op ran, so a stream that changes PU pays H2D into an accelerator and D2H out of one. Energy is
//! each op's time at its PU's power (two ops sharing a PU: the step's time at that PU's power).
//! The plan's reported figures come from [`evaluate`], a simulation of how the runtime runs it
//! (per-PU queues, streams otherwise independent, an op's execution slowed by SF for as long as
//! the other stream runs an op on another PU),
//! which is also what picks between the
//! search's plan and the whole-stream candidates.
//!
//! Segments (see `Plan::segments`): a stream's op right after its previous one on the same PU,
//! with nothing of the other stream run there between, is compiled together with it by the
//! runtime and costs the measured pair saving less; the state holds for each stream whether
//! that is still so ("fresh"). The state space is a DAG in (i, j), so the optimum comes from
//! dynamic programming over it: O(N_A N_B 4 K^2 (2K + K^2)) at worst, pruned exactly by a
//! lower bound on what each state still has to pay against a greedy incumbent, and by
//! dominance between the states of one (i, j).
//!
//! [`evaluate`]: fn@evaluate

mod evaluate;
mod joint;
mod stepper;

use bident_artifact::{Artifact, ContentHash};
use serde::{Deserialize, Serialize};

use crate::{Chain, Objective, Problem, SearchError};
pub use evaluate::{Evaluation, evaluate};
use joint::{CostToGo, Joint};

/// What two ops cost when they share one PU: `(co_a, co_b)` µs for A's op `i` and B's op `j` on
/// PU `pu`, each the op's time while the other runs.
pub trait CoCost {
    fn same_pu(&self, i: usize, j: usize, pu: usize, solo: (f64, f64)) -> (f64, f64);

    /// Whether `same_pu` never falls when either solo time rises. The search's pruning bound
    /// then prices two ops on one PU at their least solo times; otherwise at their transfers
    /// alone (still exact, but it prunes less).
    fn monotone(&self) -> bool {
        false
    }

    /// The most either co-run time rises per µs that either solo time does, where known. With
    /// [`CoCost::monotone`], it lets the search skip a state that a twin reached for less than
    /// the most their continuations can differ by.
    fn slope(&self) -> Option<f64> {
        None
    }
}

/// Time slicing: an op sharing a PU waits for the shorter of the two (`co(x | y) = t_x +
/// min(t_x, t_y)`), the form the fitted model takes on the measured CPU PUs; what a virtual SoC
/// uses (simulated).
pub struct TimeSlicing;

impl CoCost for TimeSlicing {
    fn same_pu(&self, _: usize, _: usize, _: usize, (a, b): (f64, f64)) -> (f64, f64) {
        (a + a.min(b), b + a.min(b))
    }

    fn monotone(&self) -> bool {
        true
    }

    /// `t_x + min(t_x, t_y)` rises by 2 per µs of `t_x`, 1 per µs of `t_y`.
    fn slope(&self) -> Option<f64> {
        Some(2.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrentMode {
    /// The same model twice, both streams advancing together.
    Aligned,
    /// Each stream advances on its own or together with the other.
    Joint,
}

/// One step of a search path: `(stream position, PU)` of A's op and of B's op, when they run.
pub type PathStep = (Option<(usize, usize)>, Option<(usize, usize)>);

/// The most states the joint search indexes (4 bytes each where it reaches them).
const MAX_STATES: usize = 100_000_000;

/// One step of a concurrent plan: the op of A and/or of B it runs, with their PUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentStep {
    /// `(op id in A, PU)`.
    pub a: Option<(u32, String)>,
    pub b: Option<(u32, String)>,
    pub start_us: f64,
    pub duration_us: f64,
}

/// A concurrent plan of two models on one SoC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentPlan {
    pub models: [(String, ContentHash); 2],
    pub soc: String,
    pub simulated: bool,
    pub pus: Vec<String>,
    pub mode: ConcurrentMode,
    pub objective: Objective,
    /// Where same-PU co-execution costs came from.
    pub co_costs: String,
    pub steps: Vec<ConcurrentStep>,
    pub predicted_us: f64,
    pub predicted_energy_uj: f64,
    /// The paper's baseline: A then B, each on its own best single PU (latency), and its energy.
    pub baseline_us: f64,
    pub baseline_energy_uj: f64,
    pub baseline: [String; 2],
    pub speedup: f64,
}

impl Artifact for ConcurrentPlan {
    const KIND: &'static str = "concurrent-plan";
    const SCHEMA_VERSION: u32 = 2;
}

/// Search the best interleaving of `a` and `b` on `k` PUs with contention `sf` (an infinite
/// factor: the two PUs share hardware and never run at once, [`Problem::interference`]) and
/// same-PU costs `co`. Returns the steps as (op of A, op of B) with PUs, and the objective value.
///
/// Exact, and pruned: a cost-to-go bounds what any state still has to pay, a greedy walk that
/// follows the bound gives an incumbent, and the DP skips every state whose cost so far plus
/// its bound exceeds the incumbent, and (where `co` is monotone) every state that a twin (the
/// same ops done, other last PUs or freshness) reached for less than the most their
/// continuations can differ by (`Joint::gaps`; with no slope for `co`, or for energy, a
/// fresher twin on the same PUs for no more). The bound is consistent (no step costs less than
/// the bound falls along it), so no state of an optimal path is skipped unless a twin as good
/// is kept: the plan's objective is the whole DP's optimum (between equal optima it may pick
/// another).
pub fn search(
    a: &Chain,
    b: &Chain,
    sf: &[Vec<f64>],
    co: &dyn CoCost,
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<Vec<PathStep>, SearchError> {
    let dp = Joint::new(a, b, sf, co, mode, obj)?;
    let h = CostToGo::new(&dp);
    let incumbent = dp.greedy(&h);
    Ok(dp.run(Some((&h, incumbent)))?.0)
}

/// Plans besides the search's: each stream whole on one PU, both at once (every PU pair) or
/// one after the other. The search prices runs from pair savings; these are the plans where
/// runs measured whole matter most, and the evaluator decides.
fn candidates(na: usize, nb: usize, k: usize, mode: ConcurrentMode) -> Vec<Vec<PathStep>> {
    let mut out = vec![];
    for x in 0..k {
        for y in 0..k {
            let together: Vec<PathStep> =
                (0..na.max(nb)).map(|t| ((t < na).then_some((t, x)), (t < nb).then_some((t, y)))).collect();
            out.push(together);
            if mode == ConcurrentMode::Joint {
                let serial: Vec<PathStep> =
                    (0..na).map(|i| (Some((i, x)), None)).chain((0..nb).map(|j| (None, Some((j, y))))).collect();
                out.push(serial);
            }
        }
    }
    out
}

/// The best plan for `obj`: the search proposes, beside each stream whole on one PU (at once
/// or one after the other); the evaluator decides.
pub fn best_steps(
    a: &Chain,
    b: &Chain,
    sf: &[Vec<f64>],
    co: &dyn CoCost,
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<(Vec<PathStep>, Evaluation), SearchError> {
    let value = |e: &Evaluation| if obj == Objective::Latency { e.latency_us } else { e.energy_uj };
    let mut best: Option<(Vec<PathStep>, Evaluation)> = None;
    for steps in std::iter::once(search(a, b, sf, co, mode, obj)?).chain(candidates(a.len(), b.len(), a.pus(), mode)) {
        if let Some(e) = evaluate(a, b, sf, co, &steps)
            && best.as_ref().is_none_or(|b| value(&e) < value(&b.1))
        {
            best = Some((steps, e));
        }
    }
    best.ok_or_else(|| SearchError::Check("the plan cannot run".into()))
}

/// The paper's baseline: A then B, each alone and whole on its own best single PU (latency).
pub struct SerialBaseline {
    /// A's PU and B's PU.
    pub pus: [usize; 2],
    pub latency_us: f64,
    pub energy_uj: f64,
}

/// The serial baseline of two models, each priced by [`Problem::whole_on`]: the same figure as
/// a plan's best single PU (`Plan::best_single_pu_us`), so a model has one single-PU cost.
pub fn serial_baseline(a: &Problem, b: &Problem) -> Result<SerialBaseline, SearchError> {
    let alone = |p: &Problem| {
        (0..p.pus())
            .filter_map(|x| p.whole_on(x).map(|t| (x, t)))
            .min_by(|p, q| p.1.latency_us.total_cmp(&q.1.latency_us))
            .ok_or(SearchError::Empty)
    };
    let ((x, ta), (y, tb)) = (alone(a)?, alone(b)?);
    Ok(SerialBaseline {
        pus: [x, y],
        latency_us: ta.latency_us + tb.latency_us,
        energy_uj: ta.energy_uj + tb.energy_uj,
    })
}

/// The concurrent plan of two models profiled on one SoC.
pub fn plan(
    a: (&crate::PhasedGraph, &crate::CostTable),
    b: (&crate::PhasedGraph, &crate::CostTable),
    co: (&dyn CoCost, &str),
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<ConcurrentPlan, SearchError> {
    let (ta, tb) = (a.1, b.1);
    if ta.soc != tb.soc {
        return Err(SearchError::Check(format!(
            "the cost tables are for different SoCs (`{}` and `{}`)",
            ta.soc.name, tb.soc.name
        )));
    }
    for (phased, t) in [a, b] {
        crate::same_graph(phased, t)?;
    }
    let stream = |(phased, t): (&crate::PhasedGraph, &crate::CostTable)| {
        let p = Problem::new(phased, t);
        let order: Vec<usize> = p.order().collect();
        (p.chain(&order), order, p)
    };
    let ((ca, order_a, pa), (cb, order_b, pb)) = (stream(a), stream(b));
    let (steps, Evaluation { timing, latency_us: latency, energy_uj: energy }) =
        best_steps(&ca, &cb, &pa.interference(), co.0, mode, obj)?;
    // both models run as one inference of one session: its launch is paid once
    let latency = latency + pa.launch_of(steps.iter().flat_map(|&(sa, sb)| sa.into_iter().chain(sb).map(|s| s.1)));
    let pus: Vec<String> = ta.soc.pus.iter().map(|p| p.name.clone()).collect();
    let base = serial_baseline(&pa, &pb)?;
    let [ja, jb] = base.pus;
    // verifier: every op of each stream once, in its phased order
    for (stream, order) in [&order_a, &order_b].into_iter().enumerate() {
        let ran: Vec<usize> =
            steps.iter().filter_map(|s| if stream == 0 { s.0 } else { s.1 }).map(|(i, _)| i).collect();
        if ran != (0..order.len()).collect::<Vec<_>>() {
            return Err(SearchError::Check(format!("stream {stream} does not run each of its ops once, in order")));
        }
    }
    Ok(ConcurrentPlan {
        models: [(ta.model.clone(), ta.graph), (tb.model.clone(), tb.graph)],
        soc: ta.soc.name.clone(),
        simulated: ta.simulated || tb.simulated,
        mode,
        objective: obj,
        co_costs: co.1.to_string(),
        steps: steps
            .iter()
            .zip(&timing)
            .map(|(&(sa, sb), &(start, dur))| ConcurrentStep {
                a: sa.map(|(i, x)| (order_a[i] as u32, pus[x].clone())),
                b: sb.map(|(j, y)| (order_b[j] as u32, pus[y].clone())),
                start_us: start,
                duration_us: dur,
            })
            .collect(),
        predicted_us: latency,
        predicted_energy_uj: energy,
        baseline_us: base.latency_us,
        baseline_energy_uj: base.energy_uj,
        baseline: [pus[ja].clone(), pus[jb].clone()],
        speedup: base.latency_us / latency,
        pus,
    })
}

/// Same-PU costs from a measured co-execution table: a measured pair's co-run times where the
/// table has the pair, else the PU's fitted model, else time slicing. `order_a`/`order_b` map
/// a stream position to its op id.
pub struct Measured<'a> {
    pub table: &'a bident_profile::coexec::CoExecTable,
    pub order_a: Vec<usize>,
    pub order_b: Vec<usize>,
    /// `(pu, a, b)` -> (co_a, co_b).
    pairs: std::collections::HashMap<(usize, u32, u32), (f64, f64)>,
}

impl<'a> Measured<'a> {
    pub fn new(table: &'a bident_profile::coexec::CoExecTable, order_a: Vec<usize>, order_b: Vec<usize>) -> Self {
        let pairs = table
            .pairs
            .iter()
            .enumerate()
            .flat_map(|(pu, ps)| ps.iter().map(move |p| ((pu, p.a, p.b), (p.co_a_us, p.co_b_us))))
            .collect();
        Measured { table, order_a, order_b, pairs }
    }
}

impl CoCost for Measured<'_> {
    fn same_pu(&self, i: usize, j: usize, pu: usize, solo: (f64, f64)) -> (f64, f64) {
        let (a, b) = (self.order_a[i] as u32, self.order_b[j] as u32);
        if let Some(&c) = self.pairs.get(&(pu, a, b)) {
            return c;
        }
        match self.table.fit.get(pu).and_then(Option::as_ref) {
            Some(f) => (f.predict(solo.0, solo.1), f.predict(solo.1, solo.0)),
            None => TimeSlicing.same_pu(i, j, pu, solo),
        }
    }

    /// A measured pair's cost does not depend on the solo times; a fitted model
    /// `max(a t_x + b t_y + c min(t_x, t_y) + d, t_x)` never falls when its slopes `a`, `a + c`,
    /// `b` and `b + c` are non-negative (`monotone_fit`).
    fn monotone(&self) -> bool {
        self.table.fit.iter().flatten().all(monotone_fit)
    }

    /// A measured pair's times are constants; a fit rises by at most `a + max(c, 0)` per µs of
    /// `t_x`, `b + max(c, 0)` per µs of `t_y`, or 1 (where `t_x` is the larger term); time
    /// slicing by 2.
    fn slope(&self) -> Option<f64> {
        let fit = |f: &bident_profile::coexec::CoExecFit| (f.a.max(f.b) + f.c.max(0.0)).max(1.0);
        Some(self.table.fit.iter().flatten().map(fit).fold(2.0, f64::max))
    }
}

/// Whether a fitted co-run model never falls as either solo time rises: its slopes `a`, `a + c`,
/// `b` and `b + c` non-negative, and every coefficient finite (a degenerate fit's infinite
/// slope bounds nothing, and would make [`CoCost::slope`]'s gaps NaN).
fn monotone_fit(f: &bident_profile::coexec::CoExecFit) -> bool {
    [f.a, f.b, f.c, f.d].iter().all(|x| x.is_finite())
        && f.a >= 0.0
        && f.b >= 0.0
        && f.a + f.c >= 0.0
        && f.b + f.c >= 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fit is monotone only with non-negative slopes and finite coefficients: an infinite or
    /// NaN one turns off the pruning that relies on it.
    #[test]
    fn only_finite_rising_fits_are_monotone() {
        let fit = |a: f64, b: f64, c: f64, d: f64| bident_profile::coexec::CoExecFit {
            a,
            b,
            c,
            d,
            cv_median_rel_err: 0.0,
            cv_p90_rel_err: 0.0,
        };
        assert!(monotone_fit(&fit(1.0, 1.0, 0.0, 0.0)));
        assert!(monotone_fit(&fit(1.0, 0.5, -0.5, 3.0)));
        assert!(!monotone_fit(&fit(1.0, 0.5, -0.6, 0.0)));
        assert!(!monotone_fit(&fit(f64::INFINITY, 1.0, 0.0, 0.0)));
        assert!(!monotone_fit(&fit(1.0, 1.0, 0.0, f64::NAN)));
    }

    /// A fork whose two branches both write graph outputs, and whose second op also reads a graph
    /// input: on the NPU (an accelerator) the model pays H2D on ops 0 and 1 and D2H on ops 1 and
    /// 2, not only on the first and last op.
    fn forked() -> (crate::PhasedGraph, crate::CostTable) {
        use bident_artifact::ContentHash;
        use bident_backend::{PuKind, PuSpec, SocSpec};
        use bident_partition::{Branch, Phase, PhasedGraph};
        use bident_profile::{Cost, CostTable, OpCosts, PowerSource};
        let graph = ContentHash([7; 32]);
        let branch = |ops: &[u32]| Branch { ops: ops.to_vec() };
        let phased = PhasedGraph {
            model: "forked".into(),
            graph,
            op_count: 3,
            phases: vec![Phase { branches: vec![branch(&[0])] }, Phase { branches: vec![branch(&[1]), branch(&[2])] }],
            edges: vec![(0, 1), (0, 2)],
            reads_input: vec![0, 1],
            writes_output: vec![1, 2],
        };
        let pu = |name: &str, kind| PuSpec {
            name: name.into(),
            backend: "none".into(),
            kind,
            device: name.to_uppercase(),
            properties: Default::default(),
            cores: vec![],
            declared_power_w: 1.0,
            whole_only: false,
        };
        let cost = |exec: f64, h2d: f64, d2h: f64, power: f64| Cost {
            h2d_us: h2d,
            dispatch_us: 0.0,
            exec_us: exec,
            d2h_us: d2h,
            p10_us: [h2d, 0.0, exec, d2h],
            p90_us: [h2d, 0.0, exec, d2h],
            runs: 1,
            power_w: power,
            power: PowerSource::Declared,
            stop_check: None,
        };
        let costs = CostTable {
            model: "forked".into(),
            graph,
            soc: SocSpec {
                name: "two".into(),
                backend: "none".into(),
                simulated: true,
                pus: vec![pu("cpu", PuKind::Cpu), pu("npu", PuKind::Npu)],
            },
            simulated: true,
            backend: "none".into(),
            measured_on: "nowhere".into(),
            warmup: 0,
            components: vec!["none".into(); 2],
            io_every_call: vec![false; 2],
            launch_us: vec![],
            segments: vec![],
            contention: None,
            ops: (0..3)
                .map(|i| OpCosts {
                    op: i,
                    name: format!("op{i}"),
                    kind: "Conv".into(),
                    per_pu: vec![Some(cost(100.0, 0.0, 0.0, 10.0)), Some(cost(10.0, 2.0, 3.0, 4.0))],
                    failures: vec![],
                })
                .collect(),
        };
        (phased, costs)
    }

    /// One rule for "a model whole on one PU": a plan's best single PU and the concurrent serial
    /// baseline give the same figure, with the NPU paying its transfers at every graph input and
    /// output (3 x 10 µs + 2 x 2 µs H2D + 2 x 3 µs D2H = 40 µs, at 4 W).
    #[test]
    fn one_single_pu_cost_per_model() {
        let (phased, costs) = forked();
        let plan = crate::search(&phased, &costs, &crate::SearchConfig::default()).expect("plan");
        assert_eq!(plan.best_single_pu.as_deref(), Some("npu"));
        assert_eq!(plan.best_single_pu_us, Some(40.0));
        let npu = plan.baselines.iter().find(|b| b.pu == "npu").expect("npu baseline");
        assert_eq!(npu.predicted_energy_uj, Some(160.0));
        let both = super::plan(
            (&phased, &costs),
            (&phased, &costs),
            (&TimeSlicing, "time slicing"),
            ConcurrentMode::Joint,
            Objective::Latency,
        )
        .expect("concurrent plan");
        assert_eq!(both.baseline, ["npu".to_string(), "npu".to_string()]);
        assert_eq!(both.baseline_us, 2.0 * 40.0);
        assert_eq!(both.baseline_energy_uj, 2.0 * 160.0);
    }
}
