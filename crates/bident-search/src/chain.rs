//! The paper's execution graph for a chain of ops (eq. 1): node weights w(O_i, P_j), and on a
//! change of PU between consecutive ops the H2D of the next op when it enters an accelerator and
//! the D2H of the previous op when it leaves one; the first op pays its H2D and the last its D2H
//! when they run on an accelerator (the host is the CPU's own memory). Solved by dynamic
//! programming in O(N K^2) and, equivalently, by Dijkstra on the explicit graph.
//!
//! bident's extension: when op i runs right after op i-1 on the same PU, the runtime compiles
//! them together and op i costs `saving(i, j)` less (measured; at most its own weight, so every
//! edge of the execution graph stays non-negative).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Objective;
use crate::measured::{MeasuredRuns, OpCosts};

/// Costs along an execution order, ready for the DP and the evaluator; stored flat, op-major
/// (op i's entry for PU j at `i * k + j`).
#[derive(Debug)]
pub struct Chain {
    k: usize,
    w: Vec<Option<f64>>,
    /// The DP kernel's flat views: `w` with +inf where unsupported, the H2D an op pays entering
    /// an accelerator and the D2H it pays leaving one (0 on the host).
    w_flat: Vec<f64>,
    into_flat: Vec<f64>,
    out_flat: Vec<f64>,
    power: Vec<f64>,
    /// What op i saves on PU j when op i-1 ran there too (0 for the first op).
    saving: Vec<f64>,
    /// Runs measured whole, by position.
    runs: MeasuredRuns,
    pub accelerator: Vec<bool>,
}

impl Chain {
    /// From rows per op (`w[i][j]`: None where op i has no entry on PU j).
    pub fn new(
        w: Vec<Vec<Option<f64>>>,
        h2d: Vec<Vec<f64>>,
        d2h: Vec<Vec<f64>>,
        power: Vec<Vec<f64>>,
        accelerator: Vec<bool>,
    ) -> Self {
        Self::from_flat(
            accelerator.len(),
            w.into_iter().flatten().collect(),
            h2d.into_iter().flatten().collect(),
            d2h.into_iter().flatten().collect(),
            power.into_iter().flatten().collect(),
            accelerator,
        )
    }

    /// From flat op-major arrays of `n * k` entries.
    pub(crate) fn from_flat(
        k: usize,
        w: Vec<Option<f64>>,
        h2d: Vec<f64>,
        d2h: Vec<f64>,
        power: Vec<f64>,
        accelerator: Vec<bool>,
    ) -> Self {
        let saving = vec![0.0; w.len()];
        let w_flat = w.iter().map(|w| w.unwrap_or(f64::INFINITY)).collect();
        let on_accel = |mut v: Vec<f64>| -> Vec<f64> {
            v.iter_mut().enumerate().filter(|(x, _)| !accelerator[x % k]).for_each(|(_, t)| *t = 0.0);
            v
        };
        let (into_flat, out_flat) = (on_accel(h2d), on_accel(d2h));
        Chain { k, w, w_flat, into_flat, out_flat, power, saving, runs: Default::default(), accelerator }
    }

    /// The same chain knowing what some runs of consecutive positions cost measured whole
    /// (`(first, last, pu)`); only the concurrent evaluator prices them.
    pub(crate) fn with_runs(mut self, runs: std::collections::HashMap<(usize, usize, usize), f64>) -> Self {
        let rows = |v: &[f64]| -> Vec<Vec<f64>> { v.chunks(self.k.max(1)).map(<[_]>::to_vec).collect() };
        let w: Vec<Vec<Option<f64>>> = self.w.chunks(self.k.max(1)).map(<[_]>::to_vec).collect();
        let next: Vec<Option<usize>> = (0..w.len()).map(|p| (p + 1 < w.len()).then_some(p + 1)).collect();
        let (saving, power) = (rows(&self.saving), rows(&self.power));
        self.runs = MeasuredRuns::new(runs, OpCosts { w: &w, saving: &saving, power: &power, next: &next });
        self
    }

    /// The runs measured whole, by position ([`MeasuredRuns::price`] prices a stream's runs).
    pub(crate) fn runs(&self) -> &MeasuredRuns {
        &self.runs
    }

    /// The same chain where op i saves `saving[i * k + j]` on PU j after op i-1 on j, clamped to
    /// `[0, w(i, j)]` (flat, op-major; the first op's entries are ignored).
    pub fn with_savings(mut self, saving: Vec<f64>) -> Self {
        for (x, ((slot, s), w)) in self.saving.iter_mut().zip(saving).zip(&self.w).enumerate() {
            *slot = if x < self.k { 0.0 } else { w.map_or(0.0, |w| s.clamp(0.0, w)) };
        }
        self
    }

    /// What op i saves on PU j when op i-1 ran just before it there (compiled together).
    pub(crate) fn saving_at(&self, i: usize, j: usize) -> f64 {
        self.saving[i * self.k + j]
    }

    /// What op i saves on PU j after op i-1 ran on PU `p`.
    fn joined(&self, i: usize, p: usize, j: usize) -> f64 {
        if p == j { self.saving[i * self.k + j] } else { 0.0 }
    }

    /// Ops in the chain.
    pub fn len(&self) -> usize {
        self.w.len().checked_div(self.k).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pus(&self) -> usize {
        self.k
    }

    pub fn w(&self, i: usize, j: usize) -> Option<f64> {
        self.w[i * self.k + j]
    }

    /// H2D of op `i` on PU `j` (0 on the host, which reads its own memory).
    pub fn h2d(&self, i: usize, j: usize) -> f64 {
        self.into_flat[i * self.k + j]
    }

    /// D2H of op `i` on PU `j` (0 on the host).
    pub fn d2h(&self, i: usize, j: usize) -> f64 {
        self.out_flat[i * self.k + j]
    }

    pub fn power(&self, i: usize, j: usize) -> f64 {
        self.power[i * self.k + j]
    }

    /// H2D of op `i` reading from the host on PU `j`.
    fn entry(&self, i: usize, j: usize) -> f64 {
        if self.accelerator[j] { self.h2d(i, j) } else { 0.0 }
    }

    /// D2H of op `i` writing to the host from PU `j`.
    fn exit(&self, i: usize, j: usize) -> f64 {
        if self.accelerator[j] { self.d2h(i, j) } else { 0.0 }
    }

    /// Transfer before op `i` on PU `j` when op `i-1` ran on `k`, as (time on j, time on k).
    pub(crate) fn transfer(&self, i: usize, k: usize, j: usize) -> (f64, f64) {
        if k == j {
            return (0.0, 0.0);
        }
        let into = if self.accelerator[j] { self.h2d(i, j) } else { 0.0 };
        let out = if self.accelerator[k] { self.d2h(i - 1, k) } else { 0.0 };
        (into, out)
    }

    fn weight(&self, obj: Objective, i: usize, pu: usize, us: f64) -> f64 {
        match obj {
            Objective::Latency => us,
            Objective::Energy => us * self.power(i, pu),
        }
    }

    /// Objective value of a full assignment (None if some op is unsupported where placed).
    pub fn evaluate(&self, assign: &[usize], obj: Objective) -> Option<f64> {
        self.evaluate_scaled(assign, obj, &|_| 1.0)
    }

    /// As [`Chain::evaluate`], op i's execution scaled by `factor(i)` (contention).
    pub fn evaluate_scaled(&self, assign: &[usize], obj: Objective, factor: &dyn Fn(usize) -> f64) -> Option<f64> {
        let n = assign.len();
        if n == 0 {
            return Some(0.0);
        }
        let mut total = self.weight(obj, 0, assign[0], self.entry(0, assign[0]));
        for i in 0..n {
            let j = assign[i];
            total += self.weight(obj, i, j, self.w(i, j)? * factor(i));
            if i > 0 {
                let k = assign[i - 1];
                let (into, out) = self.transfer(i, k, j);
                total += self.weight(obj, i, j, into) + self.weight(obj, i - 1, k, out)
                    - self.weight(obj, i, j, self.joined(i, k, j) * factor(i));
            }
        }
        let last = assign[n - 1];
        Some(total + self.weight(obj, n - 1, last, self.exit(n - 1, last)))
    }

    /// Eq. (1): O(N K^2) dynamic programming over the chain. None if some op runs nowhere.
    pub fn dp(&self, obj: Objective) -> Option<(Vec<usize>, f64)> {
        match obj {
            Objective::Latency => self.dp_kernel::<false>(),
            Objective::Energy => self.dp_kernel::<true>(),
        }
    }

    /// The DP's forward pass over the flat cost arrays (no Option per cell, one allocation per
    /// call), then the walk back. `ENERGY`: every term at its PU's power. Sums in the same order
    /// as [`Chain::evaluate`]'s terms, so equal costs tie the same way whatever the layout.
    fn dp_kernel<const ENERGY: bool>(&self) -> Option<(Vec<usize>, f64)> {
        let (n, k) = (self.len(), self.pus());
        if n == 0 {
            return Some((vec![], 0.0));
        }
        let inf = f64::INFINITY;
        let scale = |x: usize, us: f64| if ENERGY { us * self.power[x] } else { us };
        // flat, op-major: (i, j) at i * k + j
        let mut cost = vec![inf; n * k];
        let mut from = vec![u32::MAX; n * k];
        for (j, c) in cost[..k].iter_mut().enumerate() {
            if self.w[j].is_some() {
                *c = scale(j, self.into_flat[j]) + scale(j, self.w_flat[j]);
            }
        }
        for i in 1..n {
            let (done, rest) = cost.split_at_mut(i * k);
            let prev = &done[(i - 1) * k..];
            let here = &mut rest[..k];
            let from = &mut from[i * k..(i + 1) * k];
            let base = i * k;
            for j in 0..k {
                let x = base + j;
                // unsupported: +inf, which no candidate beats
                let stay = scale(x, self.w_flat[x]);
                let into = scale(x, self.into_flat[x]);
                let join = scale(x, self.saving[x]);
                let (mut best, mut arg) = (inf, u32::MAX);
                for (p, &before) in prev.iter().enumerate() {
                    let c = if p == j {
                        before + stay - join
                    } else {
                        before + into + scale(base - k + p, self.out_flat[base - k + p]) + stay - 0.0
                    };
                    if c < best {
                        best = c;
                        arg = p as u32;
                    }
                }
                here[j] = best;
                from[j] = arg;
            }
        }
        let last = (n - 1) * k;
        let (mut j, best) = (0..k)
            .map(|j| (j, cost[last + j] + scale(last + j, self.out_flat[last + j])))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        if best == inf || best.is_nan() {
            return None;
        }
        let mut assign = vec![0; n];
        for i in (0..n).rev() {
            assign[i] = j;
            j = from[i * k + j] as usize;
        }
        Some((assign, best))
    }

    /// The same optimum by Dijkstra on the explicit execution graph (source, a node per
    /// (op, PU), sink; edge weights as in [`Chain::dp`]). O(N K^2 log(N K)).
    pub fn dijkstra(&self, obj: Objective) -> Option<(Vec<usize>, f64)> {
        let (n, k) = (self.len(), self.pus());
        if n == 0 {
            return Some((vec![], 0.0));
        }
        // node id: i * k + j; the sink is n * k
        let sink = n * k;
        let mut dist = vec![f64::INFINITY; n * k + 1];
        let mut from = vec![usize::MAX; n * k + 1];
        let mut heap = BinaryHeap::new();
        let key = |d: f64| Reverse(d.to_bits());
        for (j, d) in dist.iter_mut().enumerate().take(k) {
            if let Some(w) = self.w(0, j) {
                *d = self.weight(obj, 0, j, self.entry(0, j)) + self.weight(obj, 0, j, w);
                heap.push((key(*d), j));
            }
        }
        while let Some((Reverse(bits), u)) = heap.pop() {
            let d = f64::from_bits(bits);
            if d > dist[u] {
                continue;
            }
            if u == sink {
                break;
            }
            let (i, p) = (u / k, u % k);
            let mut relax = |v: usize, c: f64, heap: &mut BinaryHeap<(Reverse<u64>, usize)>| {
                if c < dist[v] {
                    dist[v] = c;
                    from[v] = u;
                    heap.push((key(c), v));
                }
            };
            if i + 1 == n {
                relax(sink, d + self.weight(obj, i, p, self.exit(i, p)), &mut heap);
                continue;
            }
            for j in 0..k {
                let Some(w) = self.w(i + 1, j) else { continue };
                let (into, out) = self.transfer(i + 1, p, j);
                let c = d
                    + self.weight(obj, i + 1, j, into)
                    + self.weight(obj, i, p, out)
                    + self.weight(obj, i + 1, j, w - self.joined(i + 1, p, j));
                relax((i + 1) * k + j, c, &mut heap);
            }
        }
        if dist[sink] == f64::INFINITY {
            return None;
        }
        let mut assign = vec![0; n];
        let mut u = from[sink];
        for i in (0..n).rev() {
            assign[i] = u % k;
            u = from[u];
        }
        Some((assign, dist[sink]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chain(w: Vec<Vec<Option<f64>>>, h2d: Vec<Vec<f64>>, d2h: Vec<Vec<f64>>, accel: Vec<bool>) -> Chain {
        let power = w.iter().map(|r| (0..r.len()).map(|j| 1.0 + j as f64).collect()).collect();
        Chain::new(w, h2d, d2h, power, accel)
    }

    fn brute(c: &Chain, obj: Objective) -> Option<f64> {
        let (n, k) = (c.len(), c.pus());
        let mut best: Option<f64> = None;
        for code in 0..k.pow(n as u32) {
            let assign: Vec<usize> = (0..n).map(|i| code / k.pow(i as u32) % k).collect();
            if let Some(v) = c.evaluate(&assign, obj) {
                best = Some(best.map_or(v, |b: f64| b.min(v)));
            }
        }
        best
    }

    /// Chains of `ops` ops on `pus` PUs, each op supported on a PU with probability `supported`.
    fn chains(
        ops: std::ops::RangeInclusive<usize>,
        pus: std::ops::RangeInclusive<usize>,
        supported: f64,
    ) -> impl Strategy<Value = Chain> {
        (ops, pus).prop_flat_map(move |(n, k)| {
            (
                proptest::collection::vec(
                    proptest::collection::vec(proptest::option::weighted(supported, 1.0f64..100.0), k),
                    n,
                ),
                proptest::collection::vec(proptest::collection::vec(0.0f64..30.0, k), n),
                proptest::collection::vec(proptest::collection::vec(0.0f64..30.0, k), n),
                proptest::collection::vec(any::<bool>(), k),
                proptest::collection::vec(0.0f64..60.0, n * k),
            )
                .prop_map(|(w, h, d, a, s)| chain(w, h, d, a).with_savings(s))
        })
    }

    fn instance() -> impl Strategy<Value = Chain> {
        chains(1..=6, 1..=3, 0.85)
    }

    proptest! {
        #[test]
        fn dp_and_dijkstra_equal_brute_force(c in instance()) {
            for obj in [Objective::Latency, Objective::Energy] {
                let dp = c.dp(obj);
                let bf = brute(&c, obj);
                let dj = c.dijkstra(obj);
                prop_assert_eq!(dp.as_ref().map(|d| d.1.to_bits()).is_some(), dj.is_some());
                if let (Some((_, a)), Some((assign, b))) = (&dp, &dj) {
                    prop_assert!((a - b).abs() <= 1e-9 * a.max(1.0), "dp {a} dijkstra {b}");
                    let e = c.evaluate(assign, obj).expect("dijkstra assignment is feasible");
                    prop_assert!((e - b).abs() <= 1e-9 * b.max(1.0));
                }
                match (dp, bf) {
                    (Some((assign, v)), Some(b)) => {
                        prop_assert!((v - b).abs() <= 1e-9 * b.max(1.0), "dp {v} brute {b}");
                        let e = c.evaluate(&assign, obj).expect("dp assignment is feasible");
                        prop_assert!((e - v).abs() <= 1e-9 * v.max(1.0));
                    }
                    (None, None) => {}
                    (d, b) => prop_assert!(false, "dp {d:?} vs brute {b:?}"),
                }
            }
        }
    }

    fn long_instance() -> impl Strategy<Value = Chain> {
        chains(50..=400, 2..=4, 0.9)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The flat DP kernel on long chains: the optimum of the explicit graph (Dijkstra, which
        /// shares none of its code), and its assignment costs what it says.
        #[test]
        fn dp_kernel_equals_dijkstra_on_long_chains(c in long_instance()) {
            for obj in [Objective::Latency, Objective::Energy] {
                match (c.dp(obj), c.dijkstra(obj)) {
                    (Some((assign, a)), Some((_, b))) => {
                        prop_assert!((a - b).abs() <= 1e-9 * a.max(1.0), "dp {a} dijkstra {b}");
                        let e = c.evaluate(&assign, obj).expect("dp assignment is feasible");
                        prop_assert!((e - a).abs() <= 1e-9 * a.max(1.0));
                    }
                    (None, None) => {}
                    (d, j) => prop_assert!(false, "dp {:?} vs dijkstra {:?}", d.map(|d| d.1), j.map(|j| j.1)),
                }
            }
        }
    }

    #[test]
    fn a_saving_applies_only_on_the_same_pu_and_never_below_zero() {
        let c = chain(
            vec![vec![Some(10.0), Some(10.0)], vec![Some(10.0), Some(4.0)]],
            vec![vec![0.0; 2]; 2],
            vec![vec![0.0; 2]; 2],
            vec![false, false],
        )
        .with_savings(vec![99.0, 99.0, 3.0, 99.0]);
        assert_eq!(c.evaluate(&[0, 0], Objective::Latency), Some(10.0 + 10.0 - 3.0));
        assert_eq!(c.evaluate(&[0, 1], Objective::Latency), Some(10.0 + 4.0));
        // clamped to the op's own weight
        assert_eq!(c.evaluate(&[1, 1], Objective::Latency), Some(10.0));
        assert_eq!(c.dp(Objective::Latency).map(|d| d.0), Some(vec![1, 1]));
    }

    #[test]
    fn transfers_follow_the_paper() {
        // CPU(0) -> NPU(1): H2D of the NPU op; NPU -> CPU: D2H of the NPU op; CPU -> CPU free.
        let c = chain(
            vec![vec![Some(10.0), Some(1.0)], vec![Some(10.0), Some(1.0)]],
            vec![vec![2.0, 3.0], vec![5.0, 7.0]],
            vec![vec![11.0, 13.0], vec![17.0, 19.0]],
            vec![false, true],
        );
        // the CPU reads and writes the host's memory: no entry or exit transfer there
        assert_eq!(c.evaluate(&[0, 1], Objective::Latency), Some(10.0 + 7.0 + 1.0 + 19.0));
        assert_eq!(c.evaluate(&[1, 0], Objective::Latency), Some(3.0 + 1.0 + 13.0 + 10.0));
        assert_eq!(c.evaluate(&[0, 0], Objective::Latency), Some(10.0 + 10.0));
    }

    #[test]
    fn accelerator_to_accelerator_pays_both_ways() {
        // GPU(0) -> NPU(1): D2H of the GPU op and H2D of the NPU op.
        let c = chain(
            vec![vec![Some(4.0), Some(6.0), Some(9.0)], vec![Some(8.0), Some(3.0), Some(9.0)]],
            vec![vec![1.0, 2.0, 0.5], vec![5.0, 7.0, 0.5]],
            vec![vec![11.0, 13.0, 0.5], vec![17.0, 19.0, 0.5]],
            vec![true, true, false],
        );
        assert_eq!(c.evaluate(&[0, 1], Objective::Latency), Some(1.0 + 4.0 + (11.0 + 7.0) + 3.0 + 19.0));
        // energy: each term at the power of the PU that spends it (power j+1 in this fixture)
        assert_eq!(
            c.evaluate(&[0, 1], Objective::Energy),
            Some(1.0 * 1.0 + 4.0 * 1.0 + 11.0 * 1.0 + 7.0 * 2.0 + 3.0 * 2.0 + 19.0 * 2.0)
        );
        let (assign, v) = c.dp(Objective::Latency).unwrap();
        assert_eq!(c.evaluate(&assign, Objective::Latency), Some(v));
    }
}
