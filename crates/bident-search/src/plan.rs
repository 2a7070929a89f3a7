//! The `Plan` artifact: its steps, reasons and baselines, how a mapping becomes one
//! ([`build_plan`]), and its checks ([`check_plan`], [`check_figures`]).

use std::collections::BTreeMap;

use bident_artifact::{Artifact, ContentHash};
use bident_ir::OpId;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

use crate::{Constraints, Mapping, Mode, Objective, Problem, Schedule, SearchConfig, SearchError, joins_in_parallel};

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
    /// The whole model on this PU measured faster than the plan: a whole-model configuration
    /// the search chose, or one the run gave way to.
    WholeModel,
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
            Reason::WholeModel => "whole-model",
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
            Reason::WholeModel => {
                "the whole model on this PU measured faster than the plan (whole, by refine, or beside the plan in a run)"
            }
        }
    }

    /// Every reason, in the order the docs list them.
    pub const ALL: [Reason; 7] = [
        Reason::BestAlone,
        Reason::JoinsPrevious,
        Reason::AvoidsTransfer,
        Reason::Overlaps,
        Reason::OnlySupported,
        Reason::Pinned,
        Reason::WholeModel,
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
    ///
    /// [`pareto`]: crate::pareto
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
    // a whole-only PU's op weights are shares of its whole run, not the op alone
    let whole_only: Vec<&String> = cfg.constraints.whole_only_on(costs).collect();
    let by_op = |k: &usize| !whole_only.contains(&&costs.soc.pus[*k].name);
    let on_whole_only = assign.first().is_some_and(|&j| !by_op(&j) && assign.iter().all(|&k| k == j));
    let mut steps = Vec::with_capacity(p.ops());
    for c in p.order() {
        let j = assign[c];
        let supported = (0..p.pus()).filter(by_op).filter(|&k| p.w[c][k].is_some()).count();
        let best_alone = (0..p.pus()).filter(by_op).filter_map(|k| alone(c, k)).fold(f64::INFINITY, f64::min);
        let reason = if (pinned[c] && cfg.constraints.whole.is_some()) || on_whole_only {
            Reason::WholeModel
        } else if pinned[c] {
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
    let baselines = baselines(p, &pus);
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

/// The whole model on each of `pus` (every op on one PU), as `p` prices it.
fn baselines(p: &Problem, pus: &[String]) -> Vec<Baseline> {
    (0..pus.len())
        .map(|j| {
            let single = p.whole_on(j);
            Baseline {
                pu: pus[j].clone(),
                predicted_us: single.as_ref().map(|t| t.latency_us),
                predicted_energy_uj: single.as_ref().map(|t| t.energy_uj),
                unsupported_ops: p.w.iter().filter(|r| r[j].is_none()).count() as u32,
            }
        })
        .collect()
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
    let whole_only: Vec<&String> = c.whole_only_on(costs).collect();
    if let Some(s) = plan.steps.iter().find(|s| c.exclude.contains(&s.pu) || (!whole && whole_only.contains(&&s.pu))) {
        let why = if c.exclude.contains(&s.pu) { "is excluded" } else { "may run only the whole model" };
        return bad(format!("op {} `{}` is mapped to PU `{}`, which {why}", s.op, s.name, s.pu));
    }
    let mut assign = vec![0; order.len()];
    let p = Problem::new(phased, costs);
    for s in &plan.steps {
        let Some(j) = costs.soc.pus.iter().position(|p| p.name == s.pu) else {
            return bad(format!("op {} `{}` is mapped to unknown PU `{}`", s.op, s.name, s.pu));
        };
        // a whole-only PU's ops are priced from its whole run, not from entries of their own
        if p.w[s.op as usize][j].is_none() {
            return bad(format!("op {} `{}` is mapped to PU `{}`, which has no cost entry for it", s.op, s.name, s.pu));
        }
        assign[s.op as usize] = j;
    }
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
