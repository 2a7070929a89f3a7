//! The search seam: a mapping search is anything that maps a [`Problem`] to a [`Mapping`].
//!
//! bident's own search ([`Bident`]) and the paper's per-op greedy baseline ([`Greedy`]) are two
//! implementations; a search written elsewhere implements [`MappingSearch`] and is named to the
//! driver's registry. Whatever the search, [`search_by`] applies the constraints first, checks
//! its mapping, and builds the plan from the evaluator, so every plan's figures mean the same.
//! A mapping that comes from outside as data (a placement written by another tool) goes through
//! [`plan_from_placement`], which prices and checks it the same way.

use std::collections::BTreeMap;

use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

use crate::{Mapping, Objective, Plan, Problem, Schedule, SearchConfig, SearchError};

/// A mapping search, selectable by name (`--search NAME`).
pub trait MappingSearch: Send + Sync {
    /// The name it is selected by; recorded in every plan it makes.
    fn name(&self) -> &str;
    /// One line saying what it does.
    fn about(&self) -> &str;
    /// A mapping of every op of `p` to a PU that can run it (`p.w[op][pu]` is `Some`; the
    /// constraints are already applied to `p`), under a schedule `cfg.mode` allows, or None when
    /// it finds none.
    fn map(&self, p: &Problem, cfg: &SearchConfig) -> Option<Mapping>;
}

/// bident's search: the DP and hill climbing (sequential), the per-branch DP and phase moves
/// (parallel), exhaustive on small instances.
pub struct Bident;

impl MappingSearch for Bident {
    fn name(&self) -> &str {
        "bident"
    }
    fn about(&self) -> &str {
        "DP on the phased order + hill climbing with block moves (parallel: per-branch DP + phase moves); exact on small instances"
    }
    fn map(&self, p: &Problem, cfg: &SearchConfig) -> Option<Mapping> {
        crate::best_mapping(p, cfg)
    }
}

/// The paper's greedy baseline: every op on the PU that is best for it alone, ignoring
/// transfers, savings and contention.
pub struct Greedy;

impl MappingSearch for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn about(&self) -> &str {
        "every op on its best PU alone (the paper's per-op baseline; transfers and fusion ignored)"
    }
    fn map(&self, p: &Problem, cfg: &SearchConfig) -> Option<Mapping> {
        let alone = |c: usize, j: usize| {
            p.w[c][j].map(|w| match cfg.objective {
                Objective::Latency => w,
                Objective::Energy => w * p.power[c][j],
            })
        };
        let assign = (0..p.ops())
            .map(|c| {
                (0..p.pus()).filter_map(|j| Some((j, alone(c, j)?))).min_by(|a, b| a.1.total_cmp(&b.1)).map(|(j, _)| j)
            })
            .collect::<Option<Vec<usize>>>()?;
        let estimate = (0..p.ops()).filter_map(|c| alone(c, assign[c])).sum();
        let schedule = match cfg.mode {
            crate::Mode::Sequential => Schedule::Sequential,
            crate::Mode::Parallel => Schedule::Parallel,
        };
        Some(Mapping { assign, schedule, estimate })
    }
}

/// The searches bident ships, the default first.
pub fn builtin() -> Vec<Box<dyn MappingSearch>> {
    vec![Box::new(Bident), Box::new(Greedy)]
}

/// Run `search` on the mapping problem of `phased` and `costs` under `cfg` and build the
/// checked plan.
pub fn search_by(
    search: &dyn MappingSearch,
    phased: &PhasedGraph,
    costs: &CostTable,
    cfg: &SearchConfig,
) -> Result<Plan, SearchError> {
    crate::search_with(search, phased, costs, cfg, &|_| {})
}

/// A mapping a search returned must be one the problem allows: every op on a PU that can run
/// it, under a schedule that exists.
pub(crate) fn check_mapping(search: &str, p: &Problem, m: &Mapping) -> Result<(), SearchError> {
    let bad = |why: String| Err(SearchError::Check(format!("search `{search}` returned {why}")));
    if m.assign.len() != p.ops() {
        return bad(format!("{} PUs for {} ops", m.assign.len(), p.ops()));
    }
    if let Some((c, &j)) = m.assign.iter().enumerate().find(|&(c, &j)| p.w[c].get(j).is_none_or(Option::is_none)) {
        return bad(format!("op {c} on PU index {j}, which cannot run it or is ruled out"));
    }
    if !m.estimate.is_finite() {
        return bad(format!("a non-finite estimate {}", m.estimate));
    }
    Ok(())
}

/// A placement written by another tool: each op (by name or index) on a PU (by name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// `sequential` (default) or `parallel`: how the plan runs.
    #[serde(default = "sequential")]
    pub schedule: Schedule,
    /// What the figures are judged by (default latency).
    #[serde(default = "latency")]
    pub objective: Objective,
    /// Op name or index -> PU name; every op exactly once.
    pub placement: BTreeMap<String, String>,
}

fn sequential() -> Schedule {
    Schedule::Sequential
}

fn latency() -> Objective {
    Objective::Latency
}

/// The checked plan of a placement: every op named once and placed on a PU that can run it;
/// every figure from the evaluator, as for a searched plan.
pub fn plan_from_placement(phased: &PhasedGraph, costs: &CostTable, placed: &Placement) -> Result<Plan, SearchError> {
    crate::same_graph(phased, costs)?;
    let p = Problem::new(phased, costs);
    let bad = |m: String| SearchError::Check(format!("placement: {m}"));
    let mut assign: Vec<Option<usize>> = vec![None; p.ops()];
    for (op, pu) in &placed.placement {
        let c = bident_ir::resolve_op(costs.ops.iter().map(|o| o.name.as_str()), op).map_err(bad)?;
        if c >= p.ops() {
            return Err(bad(format!("op {c} is out of range: the graph has {} ops", p.ops())));
        }
        let j = costs.soc.pus.iter().position(|q| q.name == *pu).ok_or_else(|| {
            let known: Vec<&str> = costs.soc.pus.iter().map(|q| q.name.as_str()).collect();
            bad(format!("no PU named `{pu}` (the SoC has {})", known.join(", ")))
        })?;
        if assign[c].replace(j).is_some() {
            return Err(bad(format!("op {c} `{}` is placed twice", costs.ops[c].name)));
        }
        if p.w[c][j].is_none() {
            return Err(bad(format!("op {c} `{}` is placed on {pu}, which cannot run it", costs.ops[c].name)));
        }
    }
    let assign = assign
        .into_iter()
        .enumerate()
        .map(|(c, j)| j.ok_or_else(|| bad(format!("op {c} `{}` is not placed", costs.ops[c].name))))
        .collect::<Result<Vec<usize>, _>>()?;
    let mode = match placed.schedule {
        Schedule::Sequential => crate::Mode::Sequential,
        Schedule::Parallel => crate::Mode::Parallel,
    };
    let cfg = SearchConfig { objective: placed.objective, mode, ..Default::default() };
    let estimate = p.evaluate(&assign, placed.schedule).ok_or(SearchError::Empty)?.objective(placed.objective);
    let mapping = Mapping { assign, schedule: placed.schedule, estimate };
    let bound = p.lower_bound(placed.schedule);
    let plan = crate::build_plan(&p, phased, costs, mapping, &cfg, &vec![false; p.ops()], "placement")?;
    crate::checked(crate::with_bound(plan, bound), phased, costs)
}
