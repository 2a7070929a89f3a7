//! The mapping searches behind [`crate::search`]: the DP then hill climbing, sequential and
//! parallel, and the exhaustive optimum on small instances.

use crate::problem::PhaseMemo;
use crate::{Mode, Objective, Problem, Schedule, SearchConfig};

/// A mapping: an assignment (PU index by op id), how it runs, and the search's own estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub assign: Vec<usize>,
    pub schedule: Schedule,
    pub estimate: f64,
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
