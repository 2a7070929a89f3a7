//! The searches against the evaluator and against exhaustive search, on random phased DAGs
//! shaped like the partitioner's output (phases of 1-3 branches, branches of 1-3 ops, each
//! branch's head fed by a tail of the previous phase).

use bident_search::{
    MeasuredRuns, Mode, Objective, OpCosts, OrderLinks, Problem, Schedule, SearchConfig, best_mapping,
    heuristic_mapping,
};
use proptest::prelude::*;

/// A random instance: `shape[phase][branch]` = ops in that branch; costs from `r`.
fn problem(shape: &[Vec<usize>], k: usize, r: &mut impl FnMut() -> f64) -> Problem {
    let mut phases: Vec<Vec<Vec<usize>>> = vec![];
    let mut n = 0;
    for branches in shape {
        phases.push(
            branches
                .iter()
                .map(|&len| {
                    let ops: Vec<usize> = (n..n + len).collect();
                    n += len;
                    ops
                })
                .collect(),
        );
    }
    let mut preds = vec![vec![]; n];
    let mut succs = vec![vec![]; n];
    let mut edge = |p: usize, c: usize| {
        preds[c].push(p);
        succs[p].push(c);
    };
    for (pi, phase) in phases.iter().enumerate() {
        for b in phase {
            for w in b.windows(2) {
                edge(w[0], w[1]);
            }
            if pi > 0 {
                // fed by every branch tail of the previous phase (a join), as the partitioner cuts
                for prev in &phases[pi - 1] {
                    edge(*prev.last().expect("non-empty"), b[0]);
                }
            }
        }
    }
    let mut place = vec![(0, 0); n];
    for (pi, phase) in phases.iter().enumerate() {
        for (bi, b) in phase.iter().enumerate() {
            for &o in b {
                place[o] = (pi, bi);
            }
        }
    }
    let mut from_host = vec![false; n];
    phases[0].iter().for_each(|b| from_host[b[0]] = true);
    let mut to_host = vec![false; n];
    phases.last().expect("a phase").iter().for_each(|b| to_host[*b.last().expect("op")] = true);
    // op 0 runs everywhere, others are unsupported on the last PU 15% of the time
    let w: Vec<Vec<Option<f64>>> = (0..n)
        .map(|i| {
            (0..k)
                .map(|j| {
                    let supported = i == 0 || k == 1 || j + 1 < k || r() > 0.15;
                    let v = 1.0 + 99.0 * r();
                    supported.then_some(v)
                })
                .collect()
        })
        .collect();
    let sf = (0..k).map(|i| (0..k).map(|j| if i == j { 1.0 } else { 1.0 + 0.3 * r() }).collect()).collect();
    let OrderLinks { prev, next, joins_in_parallel } = OrderLinks::new(&phases, &place);
    let order: Vec<usize> = phases.iter().flatten().flatten().copied().collect();
    // merge savings on about half the (op, PU) entries after a branch neighbour, at most w
    let saving = (0..n)
        .map(|c| {
            (0..k)
                .map(|j| match (prev[c], w[c][j]) {
                    (Some(_), Some(wc)) if r() < 0.5 => wc * r(),
                    _ => 0.0,
                })
                .collect()
        })
        .collect();
    // a few runs of three or four neighbours measured whole, on a random PU
    let mut segment_cost = std::collections::HashMap::new();
    for start in 0..n.saturating_sub(2) {
        if r() < 0.3 {
            let len = if r() < 0.5 { 3 } else { 4 };
            if start + len <= n {
                let j = ((r() * k as f64) as usize).min(k - 1);
                segment_cost.insert((order[start], order[start + len - 1], j), 10.0 + 150.0 * r());
            }
        }
    }
    let mut p = Problem {
        w,
        h2d: (0..n).map(|_| (0..k).map(|_| 20.0 * r()).collect()).collect(),
        d2h: (0..n).map(|_| (0..k).map(|_| 20.0 * r()).collect()).collect(),
        power: (0..n).map(|_| (0..k).map(|j| 4.0 + 6.0 * j as f64 * r()).collect()).collect(),
        accelerator: (0..k).map(|j| j > 0).collect(),
        preds,
        succs,
        from_host,
        to_host,
        sf,
        // some pairs of PUs share hardware (a quarter of them)
        exclusive: {
            let pairs: Vec<(usize, usize)> = (0..k).flat_map(|i| (i + 1..k).map(move |j| (i, j))).collect();
            let mut x = vec![vec![false; k]; k];
            for (i, j) in pairs {
                let e = r() < 0.25;
                (x[i][j], x[j][i]) = (e, e);
            }
            x
        },
        phases,
        place,
        prev,
        next,
        joins_in_parallel,
        saving,
        segment_cost: Default::default(),
        launch: vec![],
        progress: Default::default(),
    };
    p.segment_cost =
        MeasuredRuns::new(segment_cost, OpCosts { w: &p.w, saving: &p.saving, power: &p.power, next: &p.next });
    p
}

fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The best objective over every assignment under `schedules` (exhaustive).
fn exhaustive(p: &Problem, obj: Objective, schedules: &[Schedule]) -> f64 {
    let (n, k) = (p.ops(), p.pus());
    let mut best = f64::INFINITY;
    for code in 0..k.pow(n as u32) {
        let assign: Vec<usize> = (0..n).map(|i| code / k.pow(i as u32) % k).collect();
        for &s in schedules {
            if let Some(t) = p.evaluate(&assign, s) {
                best = best.min(t.objective(obj));
            }
        }
    }
    best
}

fn value(p: &Problem, cfg: &SearchConfig) -> f64 {
    let m = best_mapping(p, cfg).expect("a mapping");
    p.evaluate(&m.assign, m.schedule).expect("feasible").objective(cfg.objective)
}

fn shapes() -> impl Strategy<Value = (Vec<Vec<usize>>, usize, u64)> {
    (proptest::collection::vec(proptest::collection::vec(1usize..=3, 1..=3), 1..=3), 1usize..=3, any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// On a chain the evaluator's sequential figure is the paper's eq. (1) (with pair savings;
    /// runs measured whole are the evaluator's alone), and the sequential search is optimal.
    #[test]
    fn chains_are_exact(len in 1usize..=6, k in 1usize..=3, seed in any::<u64>()) {
        let p = problem(&[vec![len]], k, &mut rng(seed));
        let pairs_only = Problem { segment_cost: Default::default(), ..p.clone() };
        let order: Vec<usize> = p.order().collect();
        for obj in [Objective::Latency, Objective::Energy] {
            let m = best_mapping(&pairs_only, &SearchConfig { objective: obj, mode: Mode::Sequential, ..Default::default() }).expect("mapping");
            let eq1 = pairs_only.chain(&order).evaluate(&m.assign, obj).expect("feasible");
            let eval = pairs_only.evaluate(&m.assign, Schedule::Sequential).expect("feasible").objective(obj);
            prop_assert!((eq1 - eval).abs() <= 1e-9 * eq1.max(1.0), "eq. 1 {eq1} vs evaluator {eval}");
            let m = best_mapping(&p, &SearchConfig { objective: obj, mode: Mode::Sequential, ..Default::default() }).expect("mapping");
            let eval = p.evaluate(&m.assign, Schedule::Sequential).expect("feasible").objective(obj);
            let best = exhaustive(&p, obj, &[Schedule::Sequential]);
            prop_assert!((eval - best).abs() <= 1e-9 * best.max(1.0), "search {eval} vs optimum {best}");
        }
    }

    /// parallel <= sequential <= best single PU, under the evaluator, for both objectives.
    #[test]
    fn modes_are_ordered((shape, k, seed) in shapes()) {
        let p = problem(&shape, k, &mut rng(seed));
        for obj in [Objective::Latency, Objective::Energy] {
            let seq = value(&p, &SearchConfig { objective: obj, mode: Mode::Sequential, ..Default::default() });
            let par = value(&p, &SearchConfig { objective: obj, mode: Mode::Parallel, ..Default::default() });
            let single = (0..k)
                .filter_map(|j| p.evaluate(&vec![j; p.ops()], Schedule::Sequential))
                .map(|t| t.objective(obj))
                .fold(f64::INFINITY, f64::min);
            prop_assert!(par <= seq * (1.0 + 1e-9), "parallel {par} > sequential {seq}");
            prop_assert!(seq <= single * (1.0 + 1e-9), "sequential {seq} > best single PU {single}");
        }
    }
}

/// The gap of each mode's heuristic to the exhaustive optimum on 300 random instances: never
/// negative (the optimum is a bound), the lower bound never above the optimum, the product
/// search (which solves instances this small exhaustively) exact, and the heuristic's worst gap
/// printed (`cargo test -p bident-search -- --nocapture`).
#[test]
fn gap_to_the_optimum() {
    let mut worst = [(0.0f64, 0u64); 4];
    for seed in 0..300u64 {
        let mut r = rng(seed + 1);
        let phases = 1 + (r() * 3.0) as usize;
        let shape: Vec<Vec<usize>> =
            (0..phases).map(|_| (0..1 + (r() * 3.0) as usize).map(|_| 1 + (r() * 2.0) as usize).collect()).collect();
        if shape.iter().flatten().sum::<usize>() > 7 {
            continue;
        }
        let p = problem(&shape, 3, &mut r);
        for (m, (mode, obj)) in [
            (Mode::Sequential, Objective::Latency),
            (Mode::Sequential, Objective::Energy),
            (Mode::Parallel, Objective::Latency),
            (Mode::Parallel, Objective::Energy),
        ]
        .into_iter()
        .enumerate()
        {
            let schedules: &[Schedule] = match mode {
                Mode::Sequential => &[Schedule::Sequential],
                Mode::Parallel => &[Schedule::Sequential, Schedule::Parallel],
            };
            let best = exhaustive(&p, obj, schedules);
            let (lb_us, lb_uj) = p.lower_bound(*schedules.last().expect("a schedule"));
            let lb = if obj == Objective::Latency { lb_us } else { lb_uj };
            assert!(lb <= best * (1.0 + 1e-9), "seed {seed}: lower bound {lb} above the optimum {best}");
            let cfg = SearchConfig { objective: obj, mode, ..Default::default() };
            let found = heuristic_mapping(&p, &cfg).expect("a mapping");
            let got = p.evaluate(&found.assign, found.schedule).expect("feasible").objective(obj);
            let gap = got / best - 1.0;
            let exact = value(&p, &cfg);
            assert!((exact - best).abs() <= 1e-9 * best.max(1.0), "seed {seed}: small instances are solved exactly");
            assert!(gap >= -1e-9, "seed {seed}: {mode:?}/{obj:?} beat the exhaustive optimum");
            if gap > worst[m].0 {
                worst[m] = (gap, seed);
            }
        }
    }
    for (m, name) in
        ["sequential latency", "sequential energy", "parallel latency", "parallel energy"].iter().enumerate()
    {
        eprintln!("worst gap, {name}: {:.2}% (seed {})", worst[m].0 * 100.0, worst[m].1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Two streams: the search's plan runs every op of both streams exactly once, in order; the
    /// latency plan (the search's or a whole-stream candidate, as the evaluator decides) is never
    /// slower than running them one after the other on their best single PUs, with runs priced
    /// from pair savings and with runs measured whole. (Energy has no such bound: running at
    /// once costs contention, and the paper too reports pairs that use more energy.)
    #[test]
    fn concurrent_joint_beats_the_serial_baseline(na in 1usize..=5, nb in 1usize..=5, k in 1usize..=3, seed in any::<u64>()) {
        use bident_search::concurrent::{self, ConcurrentMode, TimeSlicing};
        let mut r = rng(seed);
        let (pa, pb) = (problem(&[vec![na]], k, &mut r), problem(&[vec![nb]], k, &mut r));
        let chain = |p: &Problem| p.chain(&p.order().collect::<Vec<_>>());
        let pairs_only = |p: &Problem| Problem { segment_cost: Default::default(), ..p.clone() };
        let (ca, cb) = (chain(&pairs_only(&pa)), chain(&pairs_only(&pb)));
        for obj in [Objective::Latency, Objective::Energy] {
            let steps = concurrent::search(&ca, &cb, &pa.interference(), &TimeSlicing, ConcurrentMode::Joint, obj).expect("search");
            let a_ops: Vec<usize> = steps.iter().filter_map(|s| s.0.map(|x| x.0)).collect();
            let b_ops: Vec<usize> = steps.iter().filter_map(|s| s.1.map(|x| x.0)).collect();
            prop_assert_eq!(a_ops, (0..na).collect::<Vec<_>>());
            prop_assert_eq!(b_ops, (0..nb).collect::<Vec<_>>());
            prop_assert!(concurrent::evaluate(&ca, &cb, &pa.interference(), &TimeSlicing, &steps).is_some());
            if obj == Objective::Energy {
                continue;
            }
            for (pa, pb) in [(pairs_only(&pa), pairs_only(&pb)), (pa.clone(), pb.clone())] {
                let (ca, cb) = (chain(&pa), chain(&pb));
                let (_, best) = concurrent::best_steps(&ca, &cb, &pa.interference(), &TimeSlicing, ConcurrentMode::Joint, obj).expect("plan");
                let base = concurrent::serial_baseline(&pa, &pb).expect("baseline");
                prop_assert!(best.latency_us <= base.latency_us * (1.0 + 1e-9), "{} vs serial baseline {}", best.latency_us, base.latency_us);
            }
        }
    }
}

proptest! {
    /// The allocation-free sequential objective is the evaluator's.
    #[test]
    fn sequential_objective_is_the_evaluators((shape, k, seed) in shapes()) {
        let p = problem(&shape, k, &mut rng(seed));
        let assign: Vec<usize> = (0..p.ops()).map(|c| (0..k).find(|&j| p.w[c][j].is_some()).expect("a PU")).collect();
        for obj in [Objective::Latency, Objective::Energy] {
            let t = p.evaluate(&assign, Schedule::Sequential).expect("feasible").objective(obj);
            let fast = p.sequential_objective(&assign, obj);
            prop_assert!((t - fast).abs() <= 1e-9 * t.max(1.0), "{t} vs {fast}");
        }
    }
}

/// A chain of `n` ops on two host-memory PUs, all on PU 0 to start with, where moving the run
/// `block` (2 or 3 neighbours) to PU 1 together is the only move that helps: each of its ops
/// costs 1-2 µs more there, and moving it alone would also lose its own and its successor's
/// saving on PU 0 (1-2 µs each), but the run compiled together on PU 1 saves more than all of
/// that. Every other op costs 1000 µs more on PU 1.
fn block_instance(n: usize, block: std::ops::Range<usize>, r: &mut impl FnMut() -> f64) -> Problem {
    let mut p = problem(&[vec![n]], 2, r);
    p.segment_cost.clear();
    p.accelerator = vec![false, false];
    p.sf = vec![vec![1.0; 2]; 2];
    p.power = vec![vec![1.0; 2]; n];
    let inside = |c: usize| block.contains(&c);
    let mut lost = 0.0;
    for c in 0..n {
        let base = 50.0 + 50.0 * r();
        let extra = if inside(c) { 1.0 + r() } else { 1000.0 };
        p.w[c] = vec![Some(base), Some(base + extra)];
        p.saving[c] = vec![if c > 0 { 1.0 + r() } else { 0.0 }, 0.0];
        if inside(c) {
            lost += extra + p.saving[c][0];
        }
    }
    if block.end < n {
        lost += p.saving[block.end][0];
    }
    let gain = lost / (block.len() - 1) as f64 + 5.0;
    for c in block.start + 1..block.end {
        p.saving[c][1] = gain;
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Where no single move helps and a run of neighbours moved together does, the local
    /// improvement finds the optimum (exhaustive search).
    #[test]
    fn block_moves_find_what_single_moves_cannot(n in 4usize..=8, len in 2usize..=3, at in 0usize..8, seed in any::<u64>()) {
        let start = at.min(n - len);
        let p = block_instance(n, start..start + len, &mut rng(seed));
        let obj = Objective::Latency;
        let value = |a: &[usize]| p.evaluate(a, Schedule::Sequential).expect("feasible").latency_us;
        let mut assign = vec![0; n];
        let before = value(&assign);
        for c in 0..n {
            let mut moved = assign.clone();
            moved[c] = 1;
            prop_assert!(value(&moved) > before, "moving op {c} alone helps");
        }
        let best = exhaustive(&p, obj, &[Schedule::Sequential]);
        prop_assert!(best < before * (1.0 - 1e-6), "the block move helps");
        p.improve(&mut assign, Schedule::Sequential, obj);
        let got = value(&assign);
        prop_assert!((got - best).abs() <= 1e-9 * best, "improved to {got}, optimum {best}");
        let expected: Vec<usize> = (0..n).map(|c| usize::from((start..start + len).contains(&c))).collect();
        prop_assert_eq!(assign, expected);
    }

    /// The heuristic searches end where no single op and no run of 2..=MAX_BLOCK neighbours in
    /// the execution order moved to one PU improves the plan, under its schedule (under a
    /// parallel one, runs it keeps together: each op joining or reading the one before it; two
    /// branches move together by branch moves and exact phases).
    #[test]
    fn searches_end_at_a_block_local_optimum((shape, k, seed) in shapes()) {
        let p = problem(&shape, k, &mut rng(seed));
        let order: Vec<usize> = p.order().collect();
        for (mode, obj) in [(Mode::Sequential, Objective::Latency), (Mode::Parallel, Objective::Latency), (Mode::Parallel, Objective::Energy)] {
            let m = heuristic_mapping(&p, &SearchConfig { objective: obj, mode, ..Default::default() }).expect("a mapping");
            let value = |a: &[usize]| p.evaluate(a, m.schedule).map_or(f64::INFINITY, |t| t.objective(obj));
            let got = value(&m.assign);
            for start in 0..order.len() {
                for len in 1..=Problem::MAX_BLOCK.min(order.len() - start) {
                    let run = &order[start..start + len];
                    let together = run.windows(2).all(|w| p.joins_in_parallel[w[1]] || p.succs[w[0]].contains(&w[1]));
                    if m.schedule == Schedule::Parallel && !together {
                        continue;
                    }
                    for j in 0..k {
                        let mut moved = m.assign.clone();
                        order[start..start + len].iter().for_each(|&c| moved[c] = j);
                        let v = value(&moved);
                        prop_assert!(v >= got * (1.0 - 1e-7), "{mode:?}/{obj:?}: moving ops {:?} to PU {j} gives {v} < {got}", &order[start..start + len]);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// A parallel phase of 8-10 ops on three PUs (above the former 4,096-assignment limit, as
    /// ViT's Q/K/V phases are) is solved exactly: when the parallel search returns a parallel
    /// plan, no other assignment of that phase's ops, the rest as planned, is better.
    #[test]
    fn wide_parallel_phases_are_exact(
        branches in proptest::collection::vec(2usize..=4, 3),
        head in 1usize..=2,
        tail in 1usize..=2,
        seed in any::<u64>(),
    ) {
        let total: usize = branches.iter().sum();
        prop_assume!((8..=10).contains(&total));
        let mut p = problem(&[vec![head], branches, vec![tail]], 3, &mut rng(seed));
        p.segment_cost.clear();
        let wide: Vec<usize> = p.phases[1].iter().flatten().copied().collect();
        for obj in [Objective::Latency, Objective::Energy] {
            let m = heuristic_mapping(&p, &SearchConfig { objective: obj, mode: Mode::Parallel, ..Default::default() }).expect("a mapping");
            if m.schedule != Schedule::Parallel {
                continue;
            }
            let got = p.evaluate(&m.assign, Schedule::Parallel).expect("feasible").objective(obj);
            let mut assign = m.assign.clone();
            for code in 0..3usize.pow(wide.len() as u32) {
                for (i, &c) in wide.iter().enumerate() {
                    assign[c] = code / 3usize.pow(i as u32) % 3;
                }
                if let Some(t) = p.evaluate(&assign, Schedule::Parallel) {
                    let v = t.objective(obj);
                    prop_assert!(v >= got * (1.0 - 1e-9), "{obj:?}: phase assignment {:?} gives {v} < {got}", wide.iter().map(|&c| assign[c]).collect::<Vec<_>>());
                }
            }
        }
    }
}

/// Two branches of one phase on two PUs: at once, slowed by their contention factor, where the
/// PUs are independent; one after the other, unslowed, where they share hardware. The
/// concurrent evaluator does the same for two streams.
#[test]
fn exclusive_pus_never_overlap() {
    use bident_search::concurrent::{self, TimeSlicing};
    let mut r = rng(7);
    let mut p = problem(&[vec![1, 1]], 2, &mut r);
    p.w = vec![vec![Some(10.0); 2]; 2];
    p.h2d = vec![vec![0.0; 2]; 2];
    p.d2h = vec![vec![0.0; 2]; 2];
    p.accelerator = vec![false; 2];
    p.saving = vec![vec![0.0; 2]; 2];
    p.segment_cost.clear();
    p.sf = vec![vec![1.0, 1.5], vec![1.5, 1.0]];
    p.exclusive = vec![vec![false; 2]; 2];
    let split = [0, 1];
    let tl = p.evaluate(&split, Schedule::Parallel).expect("runs");
    assert_eq!((tl.latency_us, tl.factor[0]), (15.0, 1.5));
    p.exclusive = vec![vec![false, true], vec![true, false]];
    let tl = p.evaluate(&split, Schedule::Parallel).expect("runs");
    assert_eq!((tl.latency_us, tl.factor.clone()), (20.0, vec![1.0, 1.0]));
    assert!(tl.start[0] >= tl.finish[1] || tl.start[1] >= tl.finish[0], "{tl:?}");
    assert!(p.interference()[0][1].is_infinite() && p.interference()[0][0] == 1.0);

    let ca = p.chain(&[0]);
    let cb = p.chain(&[1]);
    let both = [(Some((0, 0)), Some((0, 1)))];
    let sf = vec![vec![1.0, 1.5], vec![1.5, 1.0]];
    let e = concurrent::evaluate(&ca, &cb, &sf, &TimeSlicing, &both).expect("runs");
    assert_eq!(e.latency_us, 15.0);
    let e = concurrent::evaluate(&ca, &cb, &p.interference(), &TimeSlicing, &both).expect("runs");
    assert_eq!(e.latency_us, 20.0);
}

/// A mid-size instance (`n` ops or a few more, three PUs) where exhaustive search is out of
/// reach: a chain, or a phased DAG of phases of 1-3 branches of 1-4 ops; pair savings, no runs
/// measured whole.
fn mid_size(n: usize, chain: bool, r: &mut impl FnMut() -> f64) -> Problem {
    let shape: Vec<Vec<usize>> = if chain {
        vec![vec![n]]
    } else {
        let mut shape = vec![];
        let mut total = 0;
        while total < n {
            let phase: Vec<usize> = (0..1 + (r() * 3.0) as usize).map(|_| 1 + (r() * 4.0) as usize).collect();
            total += phase.iter().sum::<usize>();
            shape.push(phase);
        }
        shape
    };
    let mut p = problem(&shape, 3, r);
    p.segment_cost.clear();
    p
}

/// How hard [`reference`] searches: kicks per start, random starts, longest run moved as one.
#[derive(Clone, Copy)]
struct Budget {
    kicks: usize,
    random_starts: usize,
    max_block: usize,
}

/// The reference for the heuristics: an iterated local search under the evaluator. Every
/// start (`starts`, each single PU that runs every op, `random_starts` random mappings) is
/// descended by moves of single ops, of runs of 2-`max_block` neighbours in the order and
/// (parallel) of whole branches to one PU; the best is then kicked `kicks` times (a random run of
/// 3-12 neighbours reassigned at random, descended again, kept when better). Returns the best
/// value under `schedule`, by construction never above a start's. A move is priced from the
/// phases it touches (those of its ops, their producers and consumers, and the op after each:
/// nothing else's cost depends on its ops' PUs), a descent retries only the moves touching a
/// phase that changed, and every descent's result is checked against the evaluator.
fn reference(p: &Problem, schedule: Schedule, obj: Objective, starts: &[Vec<usize>], budget: Budget, seed: u64) -> f64 {
    let Budget { kicks, random_starts, max_block } = budget;
    let mut r = rng(seed);
    let (n, k) = (p.ops(), p.pus());
    let order: Vec<usize> = p.order().collect();
    let value = |a: &[usize]| p.evaluate(a, schedule).map_or(f64::INFINITY, |t| t.objective(obj));
    let runs_on = |c: usize, j: usize| p.w[c][j].is_some();
    let mut groups: Vec<Vec<usize>> = order.iter().map(|&c| vec![c]).collect();
    for len in 2..=max_block {
        groups.extend(order.windows(len).map(<[usize]>::to_vec));
    }
    if schedule == Schedule::Parallel {
        groups.extend(p.phases.iter().filter(|ph| ph.len() > 1).flatten().cloned());
    }
    let phases_near = |ops: &mut dyn Iterator<Item = usize>| {
        let mut t: Vec<usize> = vec![];
        for c in ops {
            for &x in std::iter::once(&c).chain(&p.preds[c]).chain(&p.succs[c]).chain(&p.next[c]) {
                if !t.contains(&p.place[x].0) {
                    t.push(p.place[x].0);
                }
            }
        }
        t
    };
    let touched: Vec<Vec<usize>> = groups.iter().map(|g| phases_near(&mut g.iter().copied())).collect();
    let mut by_phase: Vec<Vec<usize>> = vec![vec![]; p.phases.len()];
    for (gi, t) in touched.iter().enumerate() {
        t.iter().for_each(|&pi| by_phase[pi].push(gi));
    }
    // the best move of group `gi`, made; whether it improved
    let try_group = |a: &mut [usize], v: &mut f64, gi: usize| -> bool {
        let g = &groups[gi];
        let old: Vec<usize> = g.iter().map(|&c| a[c]).collect();
        let sum = |a: &[usize]| touched[gi].iter().map(|&pi| p.phase_objective(a, pi, schedule, obj)).sum::<f64>();
        let before = sum(a);
        let mut best = (-1e-12 * v.abs().max(1.0), None);
        for j in (0..k).filter(|&j| g.iter().all(|&c| runs_on(c, j)) && !old.iter().all(|&o| o == j)) {
            g.iter().for_each(|&c| a[c] = j);
            let d = sum(a) - before;
            if d < best.0 {
                best = (d, Some(j));
            }
        }
        match best {
            (d, Some(j)) => {
                g.iter().for_each(|&c| a[c] = j);
                *v += d;
                true
            }
            (_, None) => {
                g.iter().zip(&old).for_each(|(&c, &o)| a[c] = o);
                false
            }
        }
    };
    let descend = |a: &mut [usize], v: &mut f64, first: Vec<usize>| {
        let mut queued = vec![false; groups.len()];
        let mut queue = std::collections::VecDeque::new();
        for gi in first {
            if !std::mem::replace(&mut queued[gi], true) {
                queue.push_back(gi);
            }
        }
        while let Some(gi) = queue.pop_front() {
            queued[gi] = false;
            if try_group(a, v, gi) {
                for &g2 in touched[gi].iter().flat_map(|&pi| &by_phase[pi]) {
                    if !std::mem::replace(&mut queued[g2], true) {
                        queue.push_back(g2);
                    }
                }
            }
        }
        let exact = value(a);
        assert!((exact - *v).abs() <= 1e-7 * exact.abs().max(1.0), "priced {v}, the evaluator says {exact}");
        *v = exact;
    };
    let random_pu = |c: usize, r: &mut dyn FnMut() -> f64| loop {
        let j = ((r() * k as f64) as usize).min(k - 1);
        if runs_on(c, j) {
            break j;
        }
    };
    let mut all_starts: Vec<Vec<usize>> = starts.to_vec();
    all_starts.extend((0..k).filter(|&j| (0..n).all(|c| runs_on(c, j))).map(|j| vec![j; n]));
    for _ in 0..random_starts {
        all_starts.push((0..n).map(|c| random_pu(c, &mut r)).collect());
    }
    let (mut a, mut v) = (vec![], f64::INFINITY);
    for mut s in all_starts {
        let mut sv = value(&s);
        // every move, from a random one on, so that starts descend differently
        let from = (r() * groups.len() as f64) as usize;
        descend(&mut s, &mut sv, (from..groups.len()).chain(0..from).collect());
        if sv < v {
            (a, v) = (s, sv);
        }
    }
    for _ in 0..kicks {
        let len = 3 + (r() * 10.0) as usize;
        let at = (r() * n.saturating_sub(len) as f64) as usize;
        let kicked = &order[at..(at + len).min(n)];
        let mut b = a.clone();
        kicked.iter().for_each(|&c| b[c] = random_pu(c, &mut r));
        let mut bv = value(&b);
        let near = phases_near(&mut kicked.iter().copied());
        descend(&mut b, &mut bv, near.iter().flat_map(|&pi| by_phase[pi].iter().copied()).collect());
        if bv < v {
            (a, v) = (b, bv);
        }
    }
    v
}

/// Above the exhaustive limit (40-200 ops on three PUs: 3^40 assignments and up), bident's
/// sequential (latency and energy) and parallel (latency) searches and greedy against a
/// stronger reference: on chains the DP's optimum (exact there, with pair savings), on DAGs the
/// iterated local search above, started from bident's and greedy's mappings (so by construction
/// never worse than either: asserted, as a check on the reference). Asserted: bident exact on
/// chains, within 1% of the reference on every DAG sequentially and within 4% in parallel
/// (where the per-branch DP and phase moves end 2-3.5% above it on three of twelve); bident
/// never worse than greedy (a comparison, not a construction: greedy ignores transfers and ends
/// 20-50% above the reference here); the lower bound below every reference. Gaps and medians
/// are printed (`-- --nocapture`). Parallel runs on the DAGs of at most 100 ops (instances
/// 12-17 are for it alone): a parallel move is priced by a list schedule of its phases.
#[test]
fn heuristics_above_the_exhaustive_limit() {
    use bident_search::pass::{Bident, Greedy, MappingSearch};
    let kinds = [
        (Mode::Sequential, Objective::Latency),
        (Mode::Sequential, Objective::Energy),
        (Mode::Parallel, Objective::Latency),
    ];
    let mut gaps: Vec<(Mode, Objective, f64, f64)> = vec![];
    for seed in 0..18u64 {
        let mut r = rng(1000 + seed);
        let chain = seed < 12 && seed % 4 == 3;
        let n = 40 + (r() * if seed < 12 { 161.0 } else { 61.0 }) as usize;
        let p = mid_size(n, chain, &mut r);
        assert!(!p.small_enough_for_exhaustive());
        let what = format!("seed {seed} ({} ops, {})", p.ops(), if chain { "chain" } else { "DAG" });
        for (mode, obj) in kinds {
            let wanted = match mode {
                Mode::Sequential => seed < 12,
                Mode::Parallel => !chain && p.ops() <= 100,
            };
            if !wanted {
                continue;
            }
            let cfg = SearchConfig { objective: obj, mode, ..Default::default() };
            let value =
                |m: &bident_search::Mapping| p.evaluate(&m.assign, m.schedule).expect("feasible").objective(obj);
            let (ours, greedy) =
                (Bident.map(&p, &cfg).expect("bident maps"), Greedy.map(&p, &cfg).expect("greedy maps"));
            let best = if chain {
                let order: Vec<usize> = p.order().collect();
                p.chain(&order).dp(obj).expect("the DP").1
            } else {
                let starts = [ours.assign.clone(), greedy.assign.clone()];
                let schedules: &[Schedule] = match mode {
                    Mode::Sequential => &[Schedule::Sequential],
                    Mode::Parallel => &[Schedule::Sequential, Schedule::Parallel],
                };
                // in parallel, kicks find what descending from bident's mapping cannot
                let budget = |s| Budget {
                    kicks: if s == Schedule::Parallel { 100 } else { 30 },
                    random_starts: 0,
                    max_block: 8,
                };
                let best = schedules
                    .iter()
                    .map(|&s| reference(&p, s, obj, &starts, budget(s), seed))
                    .fold(f64::INFINITY, f64::min);
                assert!(
                    best <= value(&ours).min(value(&greedy)) * (1.0 + 1e-9),
                    "{what}: the reference lost its starts"
                );
                best
            };
            let (lb_us, lb_uj) =
                p.lower_bound(if mode == Mode::Parallel { Schedule::Parallel } else { Schedule::Sequential });
            let lb = if obj == Objective::Latency { lb_us } else { lb_uj };
            assert!(lb <= best * (1.0 + 1e-9), "{what}: lower bound {lb} above {best}");
            let (gap, greedy_gap) = (value(&ours) / best - 1.0, value(&greedy) / best - 1.0);
            eprintln!("{what} {mode:?}/{obj:?}: bident {:+.3}%, greedy {:+.1}%", gap * 100.0, greedy_gap * 100.0);
            let bound = match (chain, mode) {
                (true, _) => 1e-9,
                (false, Mode::Sequential) => 0.01,
                (false, Mode::Parallel) => 0.04,
            };
            assert!(gap <= bound, "{what} {mode:?}/{obj:?}: bident {:.2}% above the reference", gap * 100.0);
            assert!(gap <= greedy_gap + 1e-9, "{what} {mode:?}/{obj:?}: greedy beat bident");
            gaps.push((mode, obj, gap, greedy_gap));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (mode, obj) in kinds {
        let of = |pick: fn(&(Mode, Objective, f64, f64)) -> f64| -> Vec<f64> {
            gaps.iter().filter(|g| (g.0, g.1) == (mode, obj)).map(pick).collect()
        };
        let (ours, greedy) = (of(|g| g.2), of(|g| g.3));
        eprintln!(
            "{mode:?}/{obj:?} on {} instances: bident median gap {:.3}%, worst {:.3}%; greedy median {:.1}%",
            ours.len(),
            median(ours.clone()) * 100.0,
            ours.iter().copied().fold(0.0, f64::max) * 100.0,
            median(greedy) * 100.0
        );
    }
}

/// The evaluator's list scheduling of a parallel phase, as first written (the earliest start
/// first, the lowest branch among equals, scanning every branch head per op): its starts from
/// the timeline's own durations.
fn reference_starts(p: &Problem, assign: &[usize], tl: &bident_search::Timeline) -> Vec<f64> {
    let mut start = tl.start.clone();
    let mut at = 0.0;
    for phase in &p.phases {
        let dur = |c: usize| {
            tl.transfer_in[c] + (p.w[c][assign[c]].expect("feasible") - tl.saved[c]) * tl.factor[c] + tl.transfer_out[c]
        };
        if phase.len() == 1 {
            for &c in &phase[0] {
                start[c] = at;
                at += dur(c);
            }
            continue;
        }
        let mut next = vec![0usize; phase.len()];
        let mut ready = vec![at; phase.len()];
        let mut pu_free = vec![at; p.pus()];
        let free = |pu_free: &[f64], j: usize| {
            (0..p.pus()).filter(|&o| o == j || p.exclusive[j][o]).map(|o| pu_free[o]).fold(at, f64::max)
        };
        let mut end = at;
        loop {
            let pick = (0..phase.len())
                .filter(|&b| next[b] < phase[b].len())
                .map(|b| (b, ready[b].max(free(&pu_free, assign[phase[b][next[b]]]))))
                .min_by(|x, y| x.1.total_cmp(&y.1));
            let Some((b, s)) = pick else { break };
            let c = phase[b][next[b]];
            start[c] = s;
            ready[b] = s + dur(c);
            pu_free[assign[c]] = s + dur(c);
            end = f64::max(end, s + dur(c));
            next[b] += 1;
        }
        at = end;
    }
    start
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The evaluator's per-PU queues schedule a phase as the plain scan over every branch
    /// does, op for op (wide phases, shared hardware, ties between branches included).
    #[test]
    fn list_scheduling_is_the_plain_scan(
        // up to 24 branches: phases scanned (up to 16) and queued (above)
        shape in proptest::collection::vec(proptest::collection::vec(1usize..=4, 1..=24), 1..=3),
        k in 1usize..=4,
        seed in any::<u64>(),
        ties in any::<bool>(),
    ) {
        let mut r = rng(seed);
        let mut p = problem(&shape, k, &mut r);
        p.segment_cost.clear();
        if ties {
            // equal costs everywhere: many heads ready at once
            p.w.iter_mut().flatten().for_each(|w| *w = w.map(|_| 10.0));
            p.h2d.iter_mut().flatten().for_each(|t| *t = 1.0);
            p.d2h.iter_mut().flatten().for_each(|t| *t = 1.0);
            // a saving stays within its op's weight
            p.saving.iter_mut().flatten().for_each(|s| *s = s.min(10.0));
        }
        let assign: Vec<usize> =
            (0..p.ops()).map(|c| (0..k).filter(|&j| p.w[c][j].is_some()).nth((r() * 7.0) as usize % k).unwrap_or(0)).collect();
        prop_assume!((0..p.ops()).all(|c| p.w[c][assign[c]].is_some()));
        let tl = p.evaluate(&assign, Schedule::Parallel).expect("feasible");
        let want = reference_starts(&p, &assign, &tl);
        prop_assert_eq!(&tl.start, &want);
    }
}

/// Wide phases (more than 16 branches and 512 ops, climbed with locally priced moves): the
/// parallel search stays within 7% of an iterated local search under the evaluator started from
/// its own plan (single moves and pairs of neighbours, whole branches, a few random kicks; on
/// seeds 0-3 the gaps were 4.1%, 0.0%, 0.3% and 6.3% in latency, none in energy), and its
/// estimate is the evaluator's figure for the per-branch optimum, never below the plan it
/// returns. The two worst seeds are kept (each costs the reference tens of seconds).
#[test]
fn wide_phases_stay_near_the_reference() {
    let mut worst: f64 = 0.0;
    for seed in [0u64, 3] {
        let mut r = rng(7000 + seed);
        // above `wide::EXACT_MOVES_LIMIT` ops: the locally priced climb
        let width = 260 + (r() * 40.0) as usize;
        let branches: Vec<usize> = (0..width).map(|_| 1 + (r() * 3.0) as usize).collect();
        let mut p = problem(&[vec![2], branches, vec![2]], 3, &mut r);
        p.segment_cost.clear();
        for obj in [Objective::Latency, Objective::Energy] {
            let cfg = SearchConfig { objective: obj, mode: Mode::Parallel, ..Default::default() };
            let ours = heuristic_mapping(&p, &cfg).expect("a mapping");
            let value = p.evaluate(&ours.assign, ours.schedule).expect("feasible").objective(obj);
            let per_branch = bident_search::parallel_mapping(&p, obj).expect("a mapping");
            let got = p.evaluate(&per_branch.assign, per_branch.schedule).expect("feasible").objective(obj);
            assert!(
                per_branch.estimate >= got * (1.0 - 1e-9),
                "seed {seed}: estimate {} below its plan {got}",
                per_branch.estimate
            );
            let budget = Budget { kicks: 3, random_starts: 0, max_block: 2 };
            let best = [Schedule::Sequential, Schedule::Parallel]
                .iter()
                .map(|&s| reference(&p, s, obj, std::slice::from_ref(&ours.assign), budget, seed))
                .fold(f64::INFINITY, f64::min);
            let gap = value / best - 1.0;
            eprintln!("seed {seed} ({width} branches) {obj:?}: bident {:+.3}% against the reference", gap * 100.0);
            assert!(gap <= 0.07, "seed {seed} {obj:?}: bident {:.2}% above the reference", gap * 100.0);
            worst = worst.max(gap);
        }
    }
    eprintln!("wide phases: worst gap {:.3}%", worst * 100.0);
}
