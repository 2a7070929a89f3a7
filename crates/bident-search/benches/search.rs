//! Speed of the searches (paper 3.4: sub-millisecond sequential search for practical sizes; its
//! largest model, pi0.5, has ~4,600 fused ops on 3 PUs).
//!
//! `cargo bench -p bident-search`; the figures are for the machine it runs on.

use bident_search::{Chain, MeasuredRuns, Mode, Objective, OpCosts, Problem, SearchConfig, best_mapping};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

mod shapes;

use shapes::{problem, rows};

/// A chain of `n` ops on `k` PUs with [`rows`] costs.
fn chain(n: usize, k: usize) -> Chain {
    let (w, h2d, d2h, power) = rows(n, k);
    Chain::new(w, h2d, d2h, power, (0..k).map(|j| j > 0).collect())
}

/// A multi-stage pipeline of `n` ops on `k` PUs: chains of 20 ops alternating with phases of
/// `width` parallel branches of 3 ops (attention heads), each branch fed by the previous phase.
fn pipeline(n: usize, k: usize, width: usize) -> Problem {
    pipeline_with_skips(n, k, width, 0)
}

/// [`pipeline`] where every `skip`-th op of a chain (0: none) also reads the op two before it,
/// as a residual connection does: dataflow the order does not follow.
fn pipeline_with_skips(n: usize, k: usize, width: usize, skip: usize) -> Problem {
    let mut phases: Vec<Vec<Vec<usize>>> = vec![];
    let mut next = 0;
    while next < n {
        let shape: Vec<usize> = if phases.len().is_multiple_of(2) { vec![20] } else { vec![3; width] };
        let phase: Vec<Vec<usize>> = shape
            .into_iter()
            .map(|len| {
                let b: Vec<usize> = (next..(next + len).min(n)).collect();
                next += b.len();
                b
            })
            .filter(|b| !b.is_empty())
            .collect();
        phases.push(phase);
    }
    let mut preds = vec![vec![]; n];
    let mut succs = vec![vec![]; n];
    for (pi, phase) in phases.iter().enumerate() {
        for b in phase {
            for w in b.windows(2) {
                preds[w[1]].push(w[0]);
                succs[w[0]].push(w[1]);
            }
            if skip > 0 && phase.len() == 1 {
                for w in b.windows(3).step_by(skip) {
                    preds[w[2]].push(w[0]);
                    succs[w[0]].push(w[2]);
                }
            }
            if pi > 0 {
                for prev in &phases[pi - 1] {
                    let p = prev[prev.len() - 1];
                    preds[b[0]].push(p);
                    succs[p].push(b[0]);
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
    from_host[0] = true;
    let mut to_host = vec![false; n];
    to_host[n - 1] = true;
    problem(k, phases, place, (preds, succs), (from_host, to_host))
}

/// [`pipeline`] as refine leaves it: runs measured whole, the whole model on every PU that runs
/// it all (at half its ops' weights) and on every PU five runs of 15 ops (at 0.6 of theirs), so
/// the search prices plans by the evaluator rather than its fast paths.
fn measured(n: usize, k: usize) -> Problem {
    let mut p = pipeline(n, k, 4);
    let order: Vec<usize> = p.order().collect();
    let mut runs = std::collections::HashMap::new();
    for j in 0..k {
        let weight = |ops: &[usize]| ops.iter().map(|&c| p.w[c][j].unwrap_or(0.0)).sum::<f64>();
        runs.insert((order[0], order[n - 1], j), 0.5 * weight(&order));
        // between the ops the accelerator lacks (every 17th)
        for m in (0..n / 17).step_by(6) {
            let run = &order[17 * m + 1..(17 * m + 16).min(n)];
            runs.insert((run[0], run[run.len() - 1], j), 0.6 * weight(run));
        }
    }
    p.segment_cost = MeasuredRuns::new(runs, OpCosts { w: &p.w, saving: &p.saving, power: &p.power, next: &p.next });
    p
}

/// The floor of the paper's DP: a straight eq. (1) over flat arrays (latency, no savings), the
/// least work any DP kernel does. Returns the assignment and its cost.
fn plain_dp(k: usize, w: &[f64], into: &[f64], out: &[f64]) -> (Vec<usize>, f64) {
    let n = w.len() / k;
    let mut cost = vec![f64::INFINITY; n * k];
    let mut from = vec![0u32; n * k];
    for j in 0..k {
        cost[j] = into[j] + w[j];
    }
    for i in 1..n {
        for j in 0..k {
            let (mut best, mut arg) = (f64::INFINITY, 0);
            for p in 0..k {
                let hop = if p == j { 0.0 } else { into[i * k + j] + out[(i - 1) * k + p] };
                let c = cost[(i - 1) * k + p] + hop;
                if c < best {
                    best = c;
                    arg = p as u32;
                }
            }
            cost[i * k + j] = best + w[i * k + j];
            from[i * k + j] = arg;
        }
    }
    let (mut j, best) = (0..k)
        .map(|j| (j, cost[(n - 1) * k + j] + out[(n - 1) * k + j]))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("k > 0");
    let mut assign = vec![0; n];
    for i in (0..n).rev() {
        assign[i] = j;
        j = from[i * k + j] as usize;
    }
    (assign, best)
}

fn dp(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequential_dp");
    for (n, k) in [(100, 3), (500, 3), (4600, 3)] {
        let ch = chain(n, k);
        g.bench_with_input(BenchmarkId::new(format!("k{k}"), n), &ch, |b, ch| b.iter(|| ch.dp(Objective::Latency)));
    }
    // the same chain of 4,600 ops in flat arrays for the plain kernel: the floor
    let (n, k) = (4600, 3);
    let (w, h2d, d2h, _) = rows(n, k);
    let accel = |j: usize| j > 0;
    let flat_w: Vec<f64> = w.iter().flatten().map(|w| w.unwrap_or(f64::INFINITY)).collect();
    let on_accel = |v: &[Vec<f64>]| -> Vec<f64> {
        v.iter().flat_map(|r| r.iter().enumerate().map(|(j, &t)| if accel(j) { t } else { 0.0 })).collect()
    };
    let (into, out) = (on_accel(&h2d), on_accel(&d2h));
    let ch = chain(n, k);
    let (_, floor) = plain_dp(k, &flat_w, &into, &out);
    let (_, ours) = ch.dp(Objective::Latency).expect("the chain runs");
    assert!((floor - ours).abs() <= 1e-9 * floor, "the floor kernel solves the same chain: {floor} vs {ours}");
    g.bench_function(BenchmarkId::new(format!("plain_kernel_floor_k{k}"), n), |b| {
        b.iter(|| plain_dp(k, &flat_w, &into, &out))
    });
    g.finish();
}

/// One phase of `width` parallel branches of 3 ops (a wide model), each branch reading a graph
/// input and writing a graph output.
fn wide(width: usize, k: usize) -> Problem {
    let n = 3 * width;
    let phases: Vec<Vec<Vec<usize>>> = vec![(0..width).map(|b| (3 * b..3 * b + 3).collect()).collect()];
    let mut preds = vec![vec![]; n];
    let mut succs = vec![vec![]; n];
    let mut place = vec![(0, 0); n];
    let (mut from_host, mut to_host) = (vec![false; n], vec![false; n]);
    for (bi, b) in phases[0].iter().enumerate() {
        for w in b.windows(2) {
            preds[w[1]].push(w[0]);
            succs[w[0]].push(w[1]);
        }
        b.iter().for_each(|&o| place[o] = (0, bi));
        from_host[b[0]] = true;
        to_host[b[2]] = true;
    }
    problem(k, phases, place, (preds, succs), (from_host, to_host))
}

fn wide_phases(c: &mut Criterion) {
    let mut g = c.benchmark_group("wide_phase");
    g.sample_size(10);
    let widths: Vec<usize> = match std::env::var("BIDENT_WIDE") {
        Ok(v) => v.split(',').filter_map(|w| w.trim().parse().ok()).collect(),
        Err(_) => vec![200, 1000, 5000],
    };
    let cfg = SearchConfig { objective: Objective::Latency, mode: Mode::Parallel, ..Default::default() };
    for width in widths {
        // branches reading graph inputs and writing graph outputs, and between one fork and one
        // join, as a model's are
        // (attention: `width` heads over blocks of 12, each block 46 ops; nested: `width` inner
        // branches, 3 in each of `width / 3` outer ones)
        let shapes = [
            ("parallel_k3_branches", wide(width, 3)),
            ("parallel_k3_fork_join", shapes::fork_join(width, 3)),
            ("parallel_k3_attention", shapes::attention(width / 12 * 46, 12, 3)),
            ("parallel_k3_nested", shapes::nested(width / 3, 3, 3)),
        ];
        for (name, p) in shapes {
            g.bench_with_input(BenchmarkId::new(name, width), &p, |b, p| b.iter(|| best_mapping(p, &cfg)));
        }
    }
    g.finish();
}

/// Real models' shapes at pi0.5's 4,600 ops on 3 PUs, searched in parallel mode: one fork and
/// one join around 1,533 branches, transformer blocks of 12 attention heads with residuals, and
/// 460 fork-joins of 3 branches nested in one.
fn real_shapes(c: &mut Criterion) {
    let mut g = c.benchmark_group("real_shapes");
    g.sample_size(10);
    let cfg = SearchConfig { objective: Objective::Latency, mode: Mode::Parallel, ..Default::default() };
    let shapes = [
        ("parallel_k3_fork_join", shapes::fork_join(1533, 3)),
        ("parallel_k3_attention", shapes::attention(4600, 12, 3)),
        ("parallel_k3_nested", shapes::nested(460, 3, 3)),
    ];
    for (name, p) in shapes {
        g.bench_with_input(BenchmarkId::new(name, p.ops()), &p, |b, p| b.iter(|| best_mapping(p, &cfg)));
    }
    g.finish();
}

fn searches(c: &mut Criterion) {
    let mut g = c.benchmark_group("search");
    g.sample_size(10);
    for (n, k) in [(500, 3), (4600, 3)] {
        let p = pipeline(n, k, 4);
        for mode in [Mode::Sequential, Mode::Parallel] {
            let cfg = SearchConfig { objective: Objective::Latency, mode, ..Default::default() };
            g.bench_with_input(BenchmarkId::new(format!("{}_k{k}", mode.name()), n), &p, |b, p| {
                b.iter(|| best_mapping(p, &cfg))
            });
        }
    }
    // residual connections in the chains: ops the sequential DP cannot price exactly
    let p = pipeline_with_skips(4600, 3, 4, 5);
    let cfg = SearchConfig { objective: Objective::Latency, mode: Mode::Sequential, ..Default::default() };
    g.bench_with_input(BenchmarkId::new("sequential_k3_residual", 4600), &p, |b, p| b.iter(|| best_mapping(p, &cfg)));
    // runs measured whole, as after refine: every plan priced by the evaluator
    let p = measured(500, 3);
    for mode in [Mode::Sequential, Mode::Parallel] {
        let cfg = SearchConfig { objective: Objective::Latency, mode, ..Default::default() };
        g.bench_with_input(BenchmarkId::new(format!("{}_k3_measured_runs", mode.name()), 500), &p, |b, p| {
            b.iter(|| best_mapping(p, &cfg))
        });
    }
    // phases of three branches of 3 ops: 3^9 assignments each, solved exactly (as ViT's Q/K/V)
    let p = pipeline(500, 3, 3);
    for mode in [Mode::Sequential, Mode::Parallel] {
        let cfg = SearchConfig { objective: Objective::Latency, mode, ..Default::default() };
        g.bench_with_input(BenchmarkId::new(format!("{}_k3_exact_phases", mode.name()), 500), &p, |b, p| {
            b.iter(|| best_mapping(p, &cfg))
        });
    }
    g.finish();
}

fn concurrent(c: &mut Criterion) {
    use bident_search::concurrent::{ConcurrentMode, TimeSlicing, search};
    let mut g = c.benchmark_group("concurrent_joint");
    g.sample_size(10);
    for (n, k) in [(100, 3), (500, 3)] {
        let (a, b) = (chain(n, k), chain(n, k));
        let sf = vec![vec![1.05; k]; k];
        g.bench_with_input(BenchmarkId::new(format!("k{k}"), n), &(a, b), |bench, (a, b)| {
            bench.iter(|| search(a, b, &sf, &TimeSlicing, ConcurrentMode::Joint, Objective::Latency))
        });
    }
    g.finish();
}

criterion_group!(benches, dp, searches, concurrent, real_shapes, wide_phases);
criterion_main!(benches);
