//! Speed of the sequential search (paper 3.4: sub-millisecond for practical sizes; the largest
//! model it quotes, pi0.5, has ~4,600 fused ops on 3 PUs).
//!
//! `cargo bench -p bident-search`

use bident_search::{Chain, Objective};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// A deterministic chain of `n` ops on `k` PUs (the last PU an accelerator), every 17th op
/// unsupported on it, as the paper's NPU lacks some ops.
fn chain(n: usize, k: usize) -> Chain {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut r = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let w = (0..n).map(|i| (0..k).map(|j| (j + 1 < k || i % 17 != 0).then(|| 5.0 + 100.0 * r())).collect()).collect();
    let h2d = (0..n).map(|_| (0..k).map(|_| 10.0 * r()).collect()).collect();
    let d2h = (0..n).map(|_| (0..k).map(|_| 10.0 * r()).collect()).collect();
    let power = (0..n).map(|_| (0..k).map(|j| 5.0 + 5.0 * j as f64).collect()).collect();
    Chain { w, h2d, d2h, power, accelerator: (0..k).map(|j| j + 1 == k).collect() }
}

fn dp(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequential_dp");
    for (n, k) in [(100, 3), (500, 3), (4600, 3)] {
        let ch = chain(n, k);
        g.bench_with_input(BenchmarkId::new(format!("k{k}"), n), &ch, |b, ch| b.iter(|| ch.dp(Objective::Latency)));
    }
    g.finish();
}

criterion_group!(benches, dp);
criterion_main!(benches);
