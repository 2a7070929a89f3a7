//! Random instances: phased DAGs shaped like the partitioner's output (phases of branches, each
//! branch's head fed by every tail of the previous phase), their costs drawn from a seeded
//! generator.

use bident_search::{MeasuredRuns, OpCosts, OrderLinks, Problem};

/// A random instance: `shape[phase][branch]` = ops in that branch; costs from `r`.
pub fn problem(shape: &[Vec<usize>], k: usize, r: &mut impl FnMut() -> f64) -> Problem {
    let phases = phases_of(shape);
    let n = phases.iter().flatten().map(Vec::len).sum();
    let (preds, succs) = edges(&phases, n);
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
    let w = weights(n, k, r);
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
    let segment_cost = measured_runs(&order, k, r);
    // (the fields in this order: the costs are drawn from `r` in it)
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
        exclusive: shared_hardware(k, r),
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

/// The phases of `shape`, their ops numbered in order.
fn phases_of(shape: &[Vec<usize>]) -> Vec<Vec<Vec<usize>>> {
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
    phases
}

/// Producers and consumers of the `n` ops of `phases`: each branch a chain, its head fed by
/// every branch tail of the previous phase (a join), as the partitioner cuts.
fn edges(phases: &[Vec<Vec<usize>>], n: usize) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
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
                for prev in &phases[pi - 1] {
                    edge(*prev.last().expect("non-empty"), b[0]);
                }
            }
        }
    }
    (preds, succs)
}

/// The ops' costs per PU: op 0 runs everywhere, others are unsupported on the last PU 15% of
/// the time.
fn weights(n: usize, k: usize, r: &mut impl FnMut() -> f64) -> Vec<Vec<Option<f64>>> {
    (0..n)
        .map(|i| {
            (0..k)
                .map(|j| {
                    let supported = i == 0 || k == 1 || j + 1 < k || r() > 0.15;
                    let v = 1.0 + 99.0 * r();
                    supported.then_some(v)
                })
                .collect()
        })
        .collect()
}

/// A few runs of three or four neighbours in `order` measured whole, on a random PU.
fn measured_runs(
    order: &[usize],
    k: usize,
    r: &mut impl FnMut() -> f64,
) -> std::collections::HashMap<(usize, usize, usize), f64> {
    let n = order.len();
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
    segment_cost
}

/// Which pairs of the `k` PUs share hardware (a quarter of them).
fn shared_hardware(k: usize, r: &mut impl FnMut() -> f64) -> Vec<Vec<bool>> {
    let pairs: Vec<(usize, usize)> = (0..k).flat_map(|i| (i + 1..k).map(move |j| (i, j))).collect();
    let mut x = vec![vec![false; k]; k];
    for (i, j) in pairs {
        let e = r() < 0.25;
        (x[i][j], x[j][i]) = (e, e);
    }
    x
}

pub fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A mid-size instance (`n` ops or a few more, three PUs) where exhaustive search is out of
/// reach: a chain, or a phased DAG of phases of 1-3 branches of 1-4 ops; pair savings, no runs
/// measured whole.
pub fn mid_size(n: usize, chain: bool, r: &mut impl FnMut() -> f64) -> Problem {
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
