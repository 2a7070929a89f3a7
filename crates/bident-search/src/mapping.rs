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
            let best = candidates.into_iter().min_by(|a, b| value(a).total_cmp(&value(b)))?;
            restarts(p, obj, &memo, best)
        }
    })
}

/// Graphs of at most this many ops with a phase the exact search leaves to the climb (see
/// [`Problem::hard_phase`]) are climbed again from other starts and kicks ([`restarts`]).
pub const RESTART_LIMIT: usize = 200;

/// How many kicks [`restarts`] makes for each phase the exact search leaves to the climb.
const KICKS_PER_PHASE: usize = 20;

/// The parallel climb's local optima depend on where it starts. On graphs of at most
/// [`RESTART_LIMIT`] ops with phases of several branches the exact search leaves to it, it
/// also starts from every single PU that runs every op and from `best` with each phase moved
/// whole to the PU that runs it best alone, then from kicks: some ops of such a phase
/// reassigned at random (seeded, so a search is repeatable), climbed again from there. The
/// best under the evaluator is kept (`best` itself when none beats it).
fn restarts(p: &Problem, obj: Objective, memo: &PhaseMemo, best: Mapping) -> Mapping {
    let hard: Vec<usize> = (0..p.phases.len()).filter(|&pi| p.hard_phase(pi)).collect();
    if p.ops() > RESTART_LIMIT || hard.is_empty() {
        return best;
    }
    let value = |a: &[usize], s: Schedule| p.evaluate(a, s).map_or(f64::INFINITY, |t| t.objective(obj));
    let mut starts: Vec<Vec<usize>> =
        (0..p.pus()).filter(|&j| (0..p.ops()).all(|c| p.w[c][j].is_some())).map(|j| vec![j; p.ops()]).collect();
    let mut by_phase = best.assign.clone();
    for pi in 0..p.phases.len() {
        let ops: Vec<usize> = p.phases[pi].concat();
        let on = |j: usize| {
            let mut a = by_phase.clone();
            ops.iter().for_each(|&c| a[c] = j);
            p.phase_objective(&a, pi, Schedule::Parallel, obj)
        };
        let runs = (0..p.pus()).filter(|&j| ops.iter().all(|&c| p.w[c][j].is_some()));
        if let Some(j) = runs.min_by(|&a, &b| on(a).total_cmp(&on(b))) {
            ops.iter().for_each(|&c| by_phase[c] = j);
        }
    }
    starts.push(by_phase);
    let mut best_value = value(&best.assign, best.schedule);
    let mut best = best;
    let mut keep = |a: Vec<usize>, best: &mut Mapping| {
        let v = value(&a, Schedule::Parallel);
        if v < best_value * (1.0 - 1e-12) {
            best_value = v;
            *best = Mapping { assign: a, schedule: Schedule::Parallel, estimate: best.estimate };
        }
    };
    for mut start in starts {
        p.improve_parallel_with(&mut start, obj, memo);
        keep(start, &mut best);
    }
    // an iterated local search, each kick from the last result no worse than the one before
    let mut r = xorshift(0x9E37_79B9_7F4A_7C15 ^ p.ops() as u64);
    let mut current = best.assign.clone();
    for kick in 0..KICKS_PER_PHASE * hard.len() {
        let ops = p.phases[hard[kick % hard.len()]].concat();
        let mut kicked: Vec<usize> = ops.iter().copied().filter(|_| r() < 0.5).collect();
        if kicked.is_empty() {
            kicked.push(ops[((r() * ops.len() as f64) as usize).min(ops.len() - 1)]);
        }
        let mut a = current.clone();
        for &c in &kicked {
            a[c] = random_pu(p, c, &mut r).unwrap_or(a[c]);
        }
        p.improve_parallel_after(&mut a, obj, memo, &kicked);
        if value(&a, Schedule::Parallel) <= value(&current, Schedule::Parallel) * (1.0 + 1e-12) {
            current.clone_from(&a);
        }
        keep(a, &mut best);
    }
    best
}

/// A PU op `c` runs on, drawn from `r` (None where it runs nowhere).
fn random_pu(p: &Problem, c: usize, r: &mut impl FnMut() -> f64) -> Option<usize> {
    let options: Vec<usize> = (0..p.pus()).filter(|&j| p.w[c][j].is_some()).collect();
    options.get(((r() * options.len() as f64) as usize).min(options.len().saturating_sub(1))).copied()
}

/// A seeded xorshift generator of numbers in [0, 1).
fn xorshift(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed.max(1);
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
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
