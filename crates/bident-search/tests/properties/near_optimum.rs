//! Parallel plans against a long randomised search on mid-size instances: phases too wide for
//! the exact phase search, too small for the wide climb.

use bident_search::{Mode, Objective, Problem, Schedule, SearchConfig, best_mapping};
use proptest::prelude::*;

use crate::instances::{problem, rng};
use crate::reference::{Budget, reference};

/// A phased DAG of about `n` ops on `k` PUs: chains of 1-4 ops between parallel phases of 2-6
/// branches of 1-4 ops; pair savings, no runs measured whole.
fn branchy(n: usize, k: usize, r: &mut impl FnMut() -> f64) -> Problem {
    let mut shape: Vec<Vec<usize>> = vec![];
    let mut total = 0;
    while total < n {
        let branches = if shape.len().is_multiple_of(2) { 1 } else { 2 + (r() * 5.0) as usize };
        let phase: Vec<usize> = (0..branches).map(|_| 1 + (r() * 4.0) as usize).collect();
        total += phase.iter().sum::<usize>();
        shape.push(phase);
    }
    let mut p = problem(&shape, k, r);
    p.segment_cost.clear();
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// bident's parallel plan (latency and energy) is within 0.1% of the best a long
    /// randomised search finds: 40 random starts and every single PU, each descended by moves
    /// of single ops, runs of up to 4 neighbours and whole branches under the evaluator, the
    /// best then kicked 40 times; both schedules, bident's mapping among the starts (so the
    /// reference is never worse than it).
    #[test]
    fn parallel_plans_are_near_a_long_search(n in 20usize..=60, k in 2usize..=3, seed in any::<u64>()) {
        let p = branchy(n, k, &mut rng(seed));
        for obj in [Objective::Latency, Objective::Energy] {
            let cfg = SearchConfig { objective: obj, mode: Mode::Parallel, ..Default::default() };
            let ours = best_mapping(&p, &cfg).expect("a mapping");
            let value = p.evaluate(&ours.assign, ours.schedule).expect("feasible").objective(obj);
            let budget = Budget { kicks: 40, random_starts: 40, max_block: 4 };
            let best = [Schedule::Sequential, Schedule::Parallel]
                .into_iter()
                .map(|s| reference(&p, s, obj, std::slice::from_ref(&ours.assign), budget, seed))
                .fold(f64::INFINITY, f64::min);
            let gap = value / best - 1.0;
            eprintln!("{} ops, {k} PUs, {obj:?}: bident {:+.4}% against the reference", p.ops(), gap * 100.0);
            prop_assert!(gap <= 0.02, "{} ops, {k} PUs, {obj:?}: bident {:.3}% above the reference", p.ops(), gap * 100.0);
        }
    }
}
