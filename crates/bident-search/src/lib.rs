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
//!   [`Problem::EXACT_PHASE_LIMIT`] assignments solved exactly), never returning a plan worse
//!   than the best sequential one;
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
pub mod diff;
mod forkjoin;
pub mod measured;
pub mod pass;
pub mod problem;
mod refine;
mod wide;

use std::collections::BTreeMap;

use bident_artifact::{Artifact, ContentHash};
use bident_ir::OpId;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

pub use chain::Chain;
pub use diff::{Move, PlanDiff, diff};
pub use measured::{MeasuredRuns, OpCosts};
pub use pass::{MappingSearch, Placement, plan_from_placement, search_by};
use problem::PhaseMemo;
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

/// Placement constraints. Ops are named by index or by name, PUs by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// `(op, pu)`: the op runs on this PU.
    pub pin: Vec<(String, String)>,
    /// `(op, pu)`: the op does not run on this PU.
    pub forbid: Vec<(String, String)>,
    /// PUs no op may use.
    pub exclude: Vec<String>,
    /// PUs that may run the whole model but no part of it: cut into sub-models, their reduced
    /// precision gave outputs beyond the tolerance (OpenVINO's bf16 on MiniLM's attention). The
    /// search weighs the whole model on each against its best plan on the other PUs.
    #[serde(default)]
    pub whole_only: Vec<String>,
    /// Every op on this PU: the model whole there, because a measured run gave way to it (not a
    /// user's pin: a later run or a serving session may plan away from it again).
    #[serde(default)]
    pub whole: Option<String>,
}

impl Constraints {
    /// What can be checked without the graph (before a pipeline touches its folder): every PU
    /// named is one of `pus`, and no op is pinned twice under one name. Ops are checked by the
    /// search.
    pub fn check_names(&self, pus: &[&str]) -> Result<(), SearchError> {
        let named = self
            .pin
            .iter()
            .chain(&self.forbid)
            .map(|(_, pu)| pu)
            .chain(&self.exclude)
            .chain(&self.whole_only)
            .chain(&self.whole);
        if let Some(pu) = named.into_iter().find(|pu| !pus.contains(&pu.as_str())) {
            return Err(SearchError::Constraint(format!("no PU named `{pu}` (the SoC has {})", pus.join(", "))));
        }
        for (k, (op, pu)) in self.pin.iter().enumerate() {
            if let Some((_, other)) = self.pin[..k].iter().find(|(o, p)| o == op && p != pu) {
                return Err(SearchError::Constraint(format!("op `{op}` is pinned twice, to {other} and to {pu}")));
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.pin.is_empty()
            && self.forbid.is_empty()
            && self.exclude.is_empty()
            && self.whole_only.is_empty()
            && self.whole.is_none()
    }

    /// Remove from `p` every (op, PU) the constraints rule out; returns the pinned ops.
    fn apply(&self, p: &mut Problem, costs: &CostTable) -> Result<Vec<bool>, SearchError> {
        let bad = |m: String| SearchError::Constraint(m);
        let n = p.ops();
        let op = |s: &str| -> Result<usize, SearchError> {
            let c = bident_ir::resolve_op(costs.ops.iter().map(|o| o.name.as_str()), s).map_err(bad)?;
            if c < n { Ok(c) } else { Err(bad(format!("op {c} is out of range: the graph has {n} ops"))) }
        };
        let pu = |s: &str| {
            costs.soc.pus.iter().position(|q| q.name == s).ok_or_else(|| {
                let known: Vec<&str> = costs.soc.pus.iter().map(|q| q.name.as_str()).collect();
                bad(format!("no PU named `{s}` (the SoC has {})", known.join(", ")))
            })
        };
        let mut why: Vec<Vec<String>> = vec![vec![]; p.ops()];
        for name in &self.exclude {
            let j = pu(name)?;
            for (c, row) in p.w.iter_mut().enumerate() {
                if row[j].take().is_some() {
                    why[c].push(format!("{name} is excluded"));
                }
            }
        }
        // a whole-only PU stays open where the whole model is placed on it
        for name in self.whole_only.iter().filter(|&pu| self.whole.as_ref() != Some(pu)) {
            let j = pu(name)?;
            for (c, row) in p.w.iter_mut().enumerate() {
                if row[j].take().is_some() {
                    why[c].push(format!("{name} may run only the whole model"));
                }
            }
        }
        for (o, name) in &self.forbid {
            let (c, j) = (op(o)?, pu(name)?);
            if p.w[c][j].take().is_some() {
                why[c].push(format!("{name} is forbidden"));
            }
        }
        let mut pinned = vec![false; p.ops()];
        let mut pinned_to: Vec<Option<&str>> = vec![None; p.ops()];
        // the user's pins, then every op on the PU a run gave way to
        let mut pins: Vec<(usize, &str)> =
            self.pin.iter().map(|(o, name)| Ok((op(o)?, name.as_str()))).collect::<Result<_, _>>()?;
        if let Some(name) = &self.whole {
            pins.extend((0..n).map(|c| (c, name.as_str())));
        }
        for (c, name) in pins {
            let j = pu(name)?;
            match pinned_to[c].replace(name) {
                Some(first) if first != name => {
                    return Err(bad(format!(
                        "op {c} `{}` is pinned twice, to {first} and to {name}",
                        costs.ops[c].name
                    )));
                }
                _ => {}
            }
            let reason = match (p.w[c][j], costs.cost(c as OpId, j)) {
                (Some(_), _) => None,
                (None, None) => Some(format!("{name} cannot run it")),
                (None, Some(_)) => Some(format!("{name} is excluded or forbidden for it")),
            };
            if let Some(r) = reason {
                return Err(bad(format!("op {c} `{}` is pinned to {name}, but {r}", costs.ops[c].name)));
            }
            for (k, w) in p.w[c].iter_mut().enumerate() {
                if k != j {
                    *w = None;
                }
            }
            pinned[c] = true;
        }
        if let Some(c) = (0..p.ops()).find(|&c| p.w[c].iter().all(Option::is_none)) {
            return Err(bad(format!(
                "op {c} `{}` can run on no PU under the constraints ({})",
                costs.ops[c].name,
                why[c].join(", ")
            )));
        }
        Ok(pinned)
    }
}

/// Why an op sits on its PU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// No other PU can run it.
    OnlySupported,
    /// Its PU is the best for the op alone (fastest, or least energy under the energy objective).
    BestAlone,
    /// Another PU is better for the op alone, but moving it would cost more in transfers.
    AvoidsTransfer,
    /// Another PU is better for the op alone; here it overlaps work of other branches.
    Overlaps,
    /// Another PU is better for the op alone; here it is compiled together with the op before
    /// it, which saves more.
    JoinsPrevious,
    /// The user pinned it there.
    Pinned,
}

impl Reason {
    /// As it is written in a plan (`best-alone`, `joins-previous`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reason::OnlySupported => "only-supported",
            Reason::BestAlone => "best-alone",
            Reason::AvoidsTransfer => "avoids-transfer",
            Reason::Overlaps => "overlaps",
            Reason::JoinsPrevious => "joins-previous",
            Reason::Pinned => "pinned",
        }
    }

    /// What it means, in one line (`cargo xtask explain` prints it beside the placements).
    pub fn meaning(self) -> &'static str {
        match self {
            Reason::OnlySupported => "no other PU can run the op",
            Reason::BestAlone => "the op's best PU by itself (fastest, or least energy under the energy objective)",
            Reason::AvoidsTransfer => {
                "another PU is better for the op alone, but moving it there costs more in transfers"
            }
            Reason::Overlaps => "another PU is better for the op alone; here it runs beside another branch",
            Reason::JoinsPrevious => {
                "another PU is better for the op alone; here it compiles together with the op before it, which saves more"
            }
            Reason::Pinned => "a --pin put it there",
        }
    }

    /// Every reason, in the order the docs list them.
    pub const ALL: [Reason; 6] = [
        Reason::BestAlone,
        Reason::JoinsPrevious,
        Reason::AvoidsTransfer,
        Reason::Overlaps,
        Reason::OnlySupported,
        Reason::Pinned,
    ];
}

/// One op of the plan, in execution order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub op: OpId,
    pub name: String,
    pub kind: String,
    pub pu: String,
    pub phase: u32,
    pub branch: u32,
    /// Predicted start and finish (µs from the start of the inference).
    pub start_us: f64,
    pub finish_us: f64,
    /// Dispatch + execution on its PU, contention and saving included (µs).
    pub exec_us: f64,
    /// What running right after the op before it on its PU (compiled together) saved (µs).
    pub saved_us: f64,
    /// The contention factor in `exec_us` (1 when nothing overlaps the op).
    pub contention: f64,
    /// H2D paid before the op and D2H after it (µs).
    pub transfer_in_us: f64,
    pub transfer_out_us: f64,
    /// Dispatch + execution on every PU (indexed like `Plan::pus`; None where unsupported).
    pub cost_us: Vec<Option<f64>>,
    pub reason: Reason,
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
    /// Per PU (like `pus`): the precision it computes in as its spec asks and its backend read
    /// back when it compiled (`f32`, `bf16`, ...), `default` where the device picks.
    pub pu_precisions: Vec<String>,
    /// What the search was allowed to use, and how the chosen plan runs (a parallel search may
    /// find that running one op at a time is best).
    pub mode: Mode,
    pub schedule: Schedule,
    pub objective: Objective,
    /// The mapping search that made it (`--search`; `placement` for one imported as a bare
    /// op-to-PU map).
    pub search: String,
    /// The placement constraints the plan obeys (baselines ignore them).
    pub constraints: Constraints,
    /// For a point of the latency/energy front ([`pareto`]): the weight of latency in the blend
    /// it minimised (1: latency only, 0: energy only).
    pub blend: Option<f64>,
    pub steps: Vec<Step>,
    /// The evaluator's figures for this plan.
    pub predicted_us: f64,
    pub predicted_energy_uj: f64,
    /// The search's own estimate of its objective before the evaluator (the paper's eq. 1 for
    /// the DP; the per-branch optimum as the parallel evaluator runs it, for the per-branch search).
    pub search_estimate: f64,
    /// Lower bounds no mapping can beat under the plan's schedule and constraints
    /// ([`Problem::lower_bound`]), and how far the plan is above them (0.1 = 10%).
    pub lower_bound_us: f64,
    pub lower_bound_energy_uj: f64,
    pub gap: f64,
    /// Ops per PU.
    pub ops_per_pu: BTreeMap<String, u32>,
    pub baselines: Vec<Baseline>,
    /// The single PU with the lowest predicted latency.
    pub best_single_pu: Option<String>,
    pub best_single_pu_us: Option<f64>,
}

/// The one rule of which neighbours in the execution order compile together under a parallel
/// schedule (under a sequential one any do): an op at (phase, branch) `after` joins the op
/// before it at `before` when both are in one branch of one phase, or in two phases of one
/// branch each (`one_branch`), so that the run overlaps nothing else. [`Plan::joins_previous`]
/// (the plan's segments, the runtime's tasks) and the evaluator's runs ([`OrderLinks`]) use it.
pub fn joins_in_parallel(before: (usize, usize), after: (usize, usize), one_branch: impl Fn(usize) -> bool) -> bool {
    before == after || (one_branch(before.0) && one_branch(after.0))
}

impl Plan {
    /// Whether step `k` may be compiled together with step `k - 1` (when both are on one PU):
    /// in a sequential plan always, in a parallel one within a branch or between phases of one
    /// branch each. The rule of the evaluator's runs (`Problem`) and of the runtime's tasks.
    pub fn joins_previous(&self, k: usize) -> bool {
        let (Some(before), Some(step)) = (k.checked_sub(1).and_then(|b| self.steps.get(b)), self.steps.get(k)) else {
            return false;
        };
        if self.schedule == Schedule::Sequential {
            return true;
        }
        let one_branch = |phase: usize| {
            let mut branches = self.steps.iter().filter(|s| s.phase as usize == phase).map(|s| s.branch);
            let first = branches.next();
            branches.all(|b| Some(b) == first)
        };
        let at = |s: &Step| (s.phase as usize, s.branch as usize);
        joins_in_parallel(at(before), at(step), one_branch)
    }

    /// The plan's segments: maximal runs of steps on one PU that join (see
    /// [`Plan::joins_previous`]), as (ops, PU).
    pub fn segments(&self) -> Vec<(Vec<OpId>, String)> {
        let mut out: Vec<(Vec<OpId>, String)> = vec![];
        for (k, s) in self.steps.iter().enumerate() {
            match out.last_mut() {
                Some((ops, pu)) if *pu == s.pu && self.joins_previous(k) => ops.push(s.op),
                _ => out.push((vec![s.op], s.pu.clone())),
            }
        }
        out
    }
}

impl Plan {
    /// The plan's input hash: the payload hashes of the phased graph and cost table it was made
    /// from, and what the search was asked (objective, mode, constraints, search, blend), in
    /// their canonical bytes.
    pub fn input_hash(
        &self,
        phased: ContentHash,
        costs: ContentHash,
    ) -> Result<ContentHash, bident_artifact::ArtifactError> {
        ContentHash::of_value(&(phased, costs, self.objective, self.mode, &self.constraints, &self.search, self.blend))
    }
}

impl Artifact for Plan {
    const KIND: &'static str = "plan";
    const SCHEMA_VERSION: u32 = 8;
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

/// A mapping: an assignment (PU index by op id), how it runs, and the search's own estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub assign: Vec<usize>,
    pub schedule: Schedule,
    pub estimate: f64,
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
    c.whole_only
        .iter()
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

/// The best mapping of `p` for `cfg` (None if some op runs nowhere): the heuristic search, or
/// the exhaustive optimum on small instances.
pub fn best_mapping(p: &Problem, cfg: &SearchConfig) -> Option<Mapping> {
    heuristic_mapping(p, cfg).map(|m| exact_if_small(p, cfg, m))
}

/// The searches without the exhaustive step (what large instances get).
pub fn heuristic_mapping(p: &Problem, cfg: &SearchConfig) -> Option<Mapping> {
    let obj = cfg.objective;
    let sequential = sequential_mapping(p, obj)?;
    Some(match cfg.mode {
        Mode::Sequential => sequential,
        Mode::Parallel => {
            let value = |m: &Mapping| p.evaluate(&m.assign, m.schedule).map_or(f64::INFINITY, |t| t.objective(obj));
            // both climbs price phases from one memo: the second covers much of the first's ground
            let memo = PhaseMemo::new(p);
            let mut candidates = vec![parallel_mapping_with(p, obj, &memo)?];
            // the sequential plan's mapping, allowed to overlap and improved from there
            let mut overlapped = sequential.assign.clone();
            p.improve_parallel_with(&mut overlapped, obj, &memo);
            candidates.push(Mapping {
                assign: overlapped,
                schedule: Schedule::Parallel,
                estimate: sequential.estimate,
            });
            candidates.push(sequential);
            candidates.into_iter().min_by(|a, b| value(a).total_cmp(&value(b)))?
        }
    })
}

/// On a small instance, the exhaustive optimum replaces the heuristic's mapping when better.
fn exact_if_small(p: &Problem, cfg: &SearchConfig, found: Mapping) -> Mapping {
    if !p.small_enough_for_exhaustive() {
        return found;
    }
    let obj = cfg.objective;
    let schedules: &[Schedule] = match cfg.mode {
        Mode::Sequential => &[Schedule::Sequential],
        Mode::Parallel => &[Schedule::Sequential, Schedule::Parallel],
    };
    let value = |a: &[usize], s: Schedule| p.evaluate(a, s).map_or(f64::INFINITY, |t| t.objective(obj));
    let mut best = (value(&found.assign, found.schedule), found);
    for &s in schedules {
        if let Some((assign, v)) = p.exhaustive(s, obj)
            && v < best.0 * (1.0 - 1e-12)
        {
            best = (v, Mapping { assign, schedule: s, estimate: best.1.estimate });
        }
    }
    best.1
}

/// The DP on the phased order, then hill climbing under the sequential evaluator; a single-PU
/// mapping that beats the result is improved the same way and taken instead. Without measured
/// runs the DP is exact across forks and joins (`Problem::sequential_dp`) and the climb
/// starts only where it was not (none: the DP's optimum is the search's); with them it is
/// eq. (1) on the order and the climb starts everywhere.
pub fn sequential_mapping(p: &Problem, obj: Objective) -> Option<Mapping> {
    let (mut best, estimate, inexact) = if p.segment_cost.is_empty() {
        let dp = p.sequential_dp(obj)?;
        (dp.assign, dp.value, Some(dp.inexact))
    } else {
        let order: Vec<usize> = p.order().collect();
        let (in_order, estimate) = p.chain(&order).dp(obj)?;
        let mut dp = vec![0; p.ops()];
        for (&op, &j) in order.iter().zip(&in_order) {
            dp[op] = j;
        }
        (dp, estimate, None)
    };
    if inexact.as_ref().is_some_and(|x| !x.contains(&true)) {
        return Some(Mapping { assign: best, schedule: Schedule::Sequential, estimate });
    }
    // the climb only lowers the evaluator's figure of the DP's mapping, which is at most the
    // DP's figure and every transfer of the ops it priced otherwise: a single PU above that
    // cannot win
    let ceiling = inexact.as_ref().map(|inexact| {
        let transfers = |c: usize| {
            let j = best[c];
            let t = if p.accelerator[j] { p.h2d[c][j] + p.d2h[c][j] } else { 0.0 };
            if obj == Objective::Energy { t * p.power[c][j] } else { t }
        };
        let ceiling = estimate + (0..p.ops()).filter(|&c| inexact[c]).map(transfers).sum::<f64>();
        ceiling + 1e-9 * ceiling.abs().max(1.0)
    });
    p.climb_sequential(&mut best, obj, inexact.as_deref());
    let value = |a: &[usize]| p.sequential_objective(a, obj);
    let mut best_value = None;
    for j in (0..p.pus()).filter(|&j| (0..p.ops()).all(|c| p.w[c][j].is_some())) {
        let single = p.single_objective(j, obj);
        if ceiling.is_some_and(|ceiling| single > ceiling) {
            continue;
        }
        if single < *best_value.get_or_insert_with(|| value(&best)) {
            let mut improved = vec![j; p.ops()];
            p.improve(&mut improved, Schedule::Sequential, obj);
            best_value = Some(value(&improved));
            best = improved;
        }
    }
    Some(Mapping { assign: best, schedule: Schedule::Sequential, estimate })
}

/// The paper's parallel search: the DP on every branch on its own, priced by the parallel
/// evaluator; then hill climbing under it.
pub fn parallel_mapping(p: &Problem, obj: Objective) -> Option<Mapping> {
    parallel_mapping_with(p, obj, &PhaseMemo::new(p))
}

/// [`parallel_mapping`] with phases' prices kept in `memo`.
fn parallel_mapping_with(p: &Problem, obj: Objective, memo: &PhaseMemo) -> Option<Mapping> {
    let mut assign = branch_dp(p, obj)?;
    // the estimate: the per-branch optimum run as the evaluator runs it (branches sharing a
    // PU one after the other, contention), not the slowest branch alone, which a phase of many
    // branches on few PUs exceeds by its width
    let estimate = p.evaluate(&assign, Schedule::Parallel)?.objective(obj);
    p.improve_parallel_with(&mut assign, obj, memo);
    Some(Mapping { assign, schedule: Schedule::Parallel, estimate })
}

/// The DP's optimum on every branch on its own (None if some op runs nowhere).
pub(crate) fn branch_dp(p: &Problem, obj: Objective) -> Option<Vec<usize>> {
    let mut assign = vec![0; p.ops()];
    for b in p.phases.iter().flatten() {
        let (branch_assign, _) = p.chain(b).dp(obj)?;
        for (&op, &j) in b.iter().zip(&branch_assign) {
            assign[op] = j;
        }
    }
    Some(assign)
}

pub(crate) fn build_plan(
    p: &Problem,
    phased: &PhasedGraph,
    costs: &CostTable,
    best: Mapping,
    cfg: &SearchConfig,
    pinned: &[bool],
    search: &str,
) -> Result<Plan, SearchError> {
    let pus: Vec<String> = costs.soc.pus.iter().map(|pu| pu.name.clone()).collect();
    let pu_precisions = precisions(costs);
    let assign = &best.assign;
    let tl = p.evaluate(assign, best.schedule).ok_or(SearchError::Empty)?;
    let alone = |c: usize, j: usize| {
        p.w[c][j].map(|w| match cfg.objective {
            Objective::Latency => w,
            Objective::Energy => w * p.power[c][j],
        })
    };
    let mut steps = Vec::with_capacity(p.ops());
    for c in p.order() {
        let j = assign[c];
        let supported = (0..p.pus()).filter(|&k| p.w[c][k].is_some()).count();
        let best_alone = (0..p.pus()).filter_map(|k| alone(c, k)).fold(f64::INFINITY, f64::min);
        let reason = if pinned[c] {
            Reason::Pinned
        } else if supported == 1 {
            Reason::OnlySupported
        } else if alone(c, j).is_some_and(|v| v <= best_alone) {
            Reason::BestAlone
        } else if best.schedule == Schedule::Parallel && p.phases[p.place[c].0].len() > 1 {
            Reason::Overlaps
        } else if tl.saved[c] > 0.0 {
            Reason::JoinsPrevious
        } else {
            Reason::AvoidsTransfer
        };
        let (phase, branch) = p.place[c];
        steps.push(Step {
            op: c as OpId,
            name: costs.ops[c].name.clone(),
            kind: costs.ops[c].kind.clone(),
            pu: pus[j].clone(),
            phase: phase as u32,
            branch: branch as u32,
            start_us: tl.start[c],
            finish_us: tl.finish[c],
            exec_us: (p.w[c][j].unwrap_or(f64::NAN) - tl.saved[c]) * tl.factor[c],
            saved_us: tl.saved[c],
            contention: tl.factor[c],
            transfer_in_us: tl.transfer_in[c],
            transfer_out_us: tl.transfer_out[c],
            cost_us: p.w[c].clone(),
            reason,
        });
    }
    let mut ops_per_pu = BTreeMap::new();
    for &j in assign {
        *ops_per_pu.entry(pus[j].clone()).or_insert(0) += 1;
    }
    let baselines: Vec<Baseline> = (0..pus.len())
        .map(|j| {
            let single = p.whole_on(j);
            Baseline {
                pu: pus[j].clone(),
                predicted_us: single.as_ref().map(|t| t.latency_us),
                predicted_energy_uj: single.as_ref().map(|t| t.energy_uj),
                unsupported_ops: p.w.iter().filter(|r| r[j].is_none()).count() as u32,
            }
        })
        .collect();
    let single_best =
        baselines.iter().filter_map(|b| b.predicted_us.map(|us| (b, us))).min_by(|a, b| a.1.total_cmp(&b.1));
    Ok(Plan {
        model: phased.model.clone(),
        graph: phased.graph,
        soc: costs.soc.name.clone(),
        simulated: costs.simulated,
        pus,
        pu_precisions,
        mode: cfg.mode,
        schedule: best.schedule,
        objective: cfg.objective,
        search: search.to_string(),
        constraints: cfg.constraints.clone(),
        blend: None,
        steps,
        predicted_us: tl.latency_us,
        predicted_energy_uj: tl.energy_uj,
        search_estimate: best.estimate,
        lower_bound_us: 0.0,
        lower_bound_energy_uj: 0.0,
        gap: 0.0,
        ops_per_pu,
        best_single_pu: single_best.map(|(b, _)| b.pu.clone()),
        best_single_pu_us: single_best.map(|(_, us)| us),
        baselines,
    })
}

/// The precision of each PU of the cost table's SoC, as a plan records it.
fn precisions(costs: &CostTable) -> Vec<String> {
    costs.soc.pus.iter().map(|p| p.precision().unwrap_or("default").to_ascii_lowercase()).collect()
}

/// Check a plan against its inputs: every op mapped once in the phased order, each to a PU
/// that has a cost entry for it, and the predicted figures and timings equal to the evaluator's.
pub fn check_plan(plan: &Plan, phased: &PhasedGraph, costs: &CostTable) -> Result<(), SearchError> {
    let bad = |m: String| Err(SearchError::Check(m));
    check_figures(plan)?;
    // the plan's SoC fields are copies of the cost table's, whose spec the plan's input hash
    // covers: an edited copy would label figures with the wrong SoC or the wrong provenance
    let pus: Vec<&str> = costs.soc.pus.iter().map(|p| p.name.as_str()).collect();
    if plan.soc != costs.soc.name
        || plan.simulated != costs.simulated
        || plan.pus != pus
        || plan.pu_precisions != precisions(costs)
    {
        return bad(format!(
            "the plan says SoC `{}` ({}, PUs {} in {}) but its cost table is for `{}` ({}, PUs {} in {})",
            plan.soc,
            if plan.simulated { "simulated" } else { "measured" },
            plan.pus.join(", "),
            plan.pu_precisions.join(", "),
            costs.soc.name,
            if costs.simulated { "simulated" } else { "measured" },
            pus.join(", "),
            precisions(costs).join(", ")
        ));
    }
    if plan.graph != costs.graph {
        return bad(format!(
            "the plan is for graph {}, its cost table for {}",
            plan.graph.short(),
            costs.graph.short()
        ));
    }
    let order = phased.order();
    let got: Vec<OpId> = plan.steps.iter().map(|s| s.op).collect();
    if got != order {
        return bad("steps are not the phased graph's ops in its execution order".into());
    }
    let mut counted = BTreeMap::new();
    for s in &plan.steps {
        *counted.entry(s.pu.clone()).or_insert(0) += 1;
    }
    if counted != plan.ops_per_pu {
        return bad(format!("`ops_per_pu` says {:?}, the steps {counted:?}", plan.ops_per_pu));
    }
    let c = &plan.constraints;
    let whole = plan.steps.windows(2).all(|w| w[0].pu == w[1].pu);
    if let Some(s) = plan.steps.iter().find(|s| c.exclude.contains(&s.pu) || (!whole && c.whole_only.contains(&s.pu))) {
        let why = if c.exclude.contains(&s.pu) { "is excluded" } else { "may run only the whole model" };
        return bad(format!("op {} `{}` is mapped to PU `{}`, which {why}", s.op, s.name, s.pu));
    }
    let mut assign = vec![0; order.len()];
    for s in &plan.steps {
        let Some(j) = costs.soc.pus.iter().position(|p| p.name == s.pu) else {
            return bad(format!("op {} `{}` is mapped to unknown PU `{}`", s.op, s.name, s.pu));
        };
        if costs.cost(s.op, j).is_none() {
            return bad(format!("op {} `{}` is mapped to PU `{}`, which has no cost entry for it", s.op, s.name, s.pu));
        }
        assign[s.op as usize] = j;
    }
    let p = Problem::new(phased, costs);
    let Some(tl) = p.evaluate(&assign, plan.schedule) else {
        return bad("the evaluator cannot run the plan".into());
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0);
    if !close(tl.latency_us, plan.predicted_us) || !close(tl.energy_uj, plan.predicted_energy_uj) {
        return bad(format!(
            "predicted {} µs / {} µJ but the evaluator gives {} µs / {} µJ",
            plan.predicted_us, plan.predicted_energy_uj, tl.latency_us, tl.energy_uj
        ));
    }
    for s in &plan.steps {
        let c = s.op as usize;
        if !close(s.start_us, tl.start[c]) || !close(s.finish_us, tl.finish[c]) {
            return bad(format!("op {} `{}`: its start or finish differs from the evaluator's", s.op, s.name));
        }
    }
    Ok(())
}

/// Largest figure (µs or µJ) a plan may hold: an hour. Anything above is a corrupt or hostile
/// file, and would make sums overflow and pictures loop.
const MAX_FIGURE: f64 = 3.6e9;

/// Every figure of the plan finite and in range, whatever the evaluator would say: the first
/// thing checked on a plan read from disk.
pub fn check_figures(plan: &Plan) -> Result<(), SearchError> {
    // times, energies and factors are never negative; a step's saving may be (running after
    // the op before it cost more), and the gap only by rounding
    let ok = |v: f64| v.is_finite() && (0.0..=MAX_FIGURE).contains(&v);
    let rule = format!("figures are finite, non-negative and under {MAX_FIGURE:e}");
    let named = [
        ("predicted_us", plan.predicted_us),
        ("predicted_energy_uj", plan.predicted_energy_uj),
        ("search_estimate", plan.search_estimate),
        ("lower_bound_us", plan.lower_bound_us),
        ("lower_bound_energy_uj", plan.lower_bound_energy_uj),
        ("gap", if plan.gap >= -1e-6 { plan.gap.max(0.0) } else { plan.gap }),
        ("best_single_pu_us", plan.best_single_pu_us.unwrap_or(0.0)),
        ("blend", plan.blend.unwrap_or(0.0)),
    ];
    if let Some((k, v)) = named.iter().find(|(_, v)| !ok(*v)) {
        return Err(SearchError::Check(format!("`{k}` is {v:e}: {rule}")));
    }
    for s in &plan.steps {
        let figures = [
            ("start_us", s.start_us),
            ("finish_us", s.finish_us),
            ("exec_us", s.exec_us),
            ("saved_us", s.saved_us.abs()),
            ("contention", s.contention),
            ("transfer_in_us", s.transfer_in_us),
            ("transfer_out_us", s.transfer_out_us),
        ]
        .into_iter()
        .chain(s.cost_us.iter().flatten().map(|&c| ("cost_us", c)));
        if let Some((k, v)) = figures.into_iter().find(|&(_, v)| !ok(v)) {
            return Err(SearchError::Check(format!("op {} `{}`: `{k}` is {v:e}: {rule}", s.op, s.name)));
        }
    }
    for b in &plan.baselines {
        if let Some(v) = [b.predicted_us, b.predicted_energy_uj].into_iter().flatten().find(|&v| !ok(v)) {
            return Err(SearchError::Check(format!("baseline on `{}` is {v:e}: {rule}", b.pu)));
        }
    }
    Ok(())
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
