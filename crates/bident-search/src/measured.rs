//! Runs of neighbours measured whole, as the evaluator prices them.
//!
//! A run of three or more ops on one PU is priced from its pairs (each op's weight less what it
//! saves with its predecessor) until it is measured whole. Pairs can be far off: on OpenVINO's
//! CPU plugin in bf16 every op of pi0.5 alone costs about 150 µs, nearly all of it the call, so
//! every pair saves its second op whole and pairs priced a run of 480 ops at 46 µs; measured
//! whole it took 1,303. A run measured whole costs what was measured, spread over its ops by
//! their weights; a run that was not, but holds at least half of the longest run measured on
//! its PU over some of its ops, prices those ops at their shares of that measurement too, so
//! moving a cut by an op does not bring the pairs' figure back.

use std::collections::HashMap;

/// One run measured whole on `pu`: its ops in order, their weights there and their sum.
#[derive(Clone, Debug)]
struct Run {
    ops: Vec<usize>,
    pu: usize,
    cost: f64,
    weights: Vec<f64>,
    weight: f64,
}

impl Run {
    /// The share of the cost of the op at `k` in the run.
    fn share(&self, k: usize) -> f64 {
        share(self.cost, self.weights[k], self.weight, self.ops.len())
    }
}

/// The runs of three or more neighbours in the execution order measured whole: `(first op,
/// last op, pu)` -> cost (µs), and for every (op, PU) the longest of them holding the op.
#[derive(Clone, Debug, Default)]
pub struct MeasuredRuns {
    cost: HashMap<(usize, usize, usize), f64>,
    runs: Vec<Run>,
    /// The runs of `cost` that are runs: key -> index into `runs`.
    index: HashMap<(usize, usize, usize), u32>,
    /// `longest[op * pus + pu]`: index into `runs`.
    longest: Vec<Option<u32>>,
    pus: usize,
}

impl MeasuredRuns {
    /// From the measured costs, the ops' weights (`w[op][pu]`) and the execution order's links
    /// (`next[op]`). An entry whose ops are not neighbours in the order, or that holds an op its
    /// PU cannot run, prices nothing.
    pub fn new(cost: HashMap<(usize, usize, usize), f64>, w: &[Vec<Option<f64>>], next: &[Option<usize>]) -> Self {
        let pus = w.first().map_or(0, Vec::len);
        let mut keys: Vec<_> = cost.iter().map(|(&k, &t)| (k, t)).collect();
        // the index does not depend on the map's order
        keys.sort_by_key(|a| a.0);
        let (mut runs, mut index) = (vec![], HashMap::new());
        for ((first, last, pu), t) in keys {
            let mut ops = vec![first];
            while let Some(&c) = ops.last().filter(|&&c| c != last && ops.len() <= next.len()) {
                match next.get(c).copied().flatten() {
                    Some(x) => ops.push(x),
                    None => break,
                }
            }
            let weights: Option<Vec<f64>> =
                ops.iter().map(|&c| w.get(c).and_then(|r| r.get(pu).copied().flatten())).collect();
            if let (true, Some(weights)) = (ops.last() == Some(&last) && ops.len() >= 3, weights) {
                index.insert((first, last, pu), runs.len() as u32);
                let weight = weights.iter().sum();
                runs.push(Run { ops, pu, cost: t, weights, weight });
            }
        }
        let mut longest: Vec<Option<u32>> = vec![None; w.len() * pus];
        for (i, r) in runs.iter().enumerate() {
            for &c in &r.ops {
                let slot = &mut longest[c * pus + r.pu];
                if slot.is_none_or(|s| runs[s as usize].ops.len() < r.ops.len()) {
                    *slot = Some(i as u32);
                }
            }
        }
        MeasuredRuns { cost, runs, index, longest, pus }
    }

    pub fn is_empty(&self) -> bool {
        self.cost.is_empty()
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// What the run `first..=last` on `pu` cost measured whole, if it was.
    pub fn get(&self, first: usize, last: usize, pu: usize) -> Option<f64> {
        self.cost.get(&(first, last, pu)).copied()
    }

    /// Every entry: `((first op, last op, pu), cost)`.
    pub fn iter(&self) -> impl Iterator<Item = ((usize, usize, usize), f64)> + '_ {
        self.cost.iter().map(|(&k, &t)| (k, t))
    }

    /// Every op of every run with the share of the run's cost its weight gives it (`(op, pu,
    /// µs)`): the least an op priced from that run can cost on that PU.
    pub fn shares(&self) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        self.runs.iter().flat_map(|r| r.ops.iter().enumerate().map(move |(k, &c)| (c, r.pu, r.share(k))))
    }

    /// Prices the ops of `run` (neighbours in the order, all on `pu`) into `eff` where the run
    /// was measured whole, or where some of its ops hold at least half of the longest run
    /// measured on `pu` over them ([module docs](self)); the other ops keep what `eff` holds
    /// (their pair prices).
    pub fn price(&self, run: &[usize], pu: usize, eff: &mut [f64]) {
        let (Some(&first), Some(&last)) = (run.first(), run.last()) else { return };
        if run.len() < 3 {
            return;
        }
        if let Some(&i) = self.index.get(&(first, last, pu)) {
            let r = &self.runs[i as usize];
            run.iter().enumerate().for_each(|(k, &c)| eff[c] = r.share(k));
            return;
        }
        // the longest block of neighbours in the run priced by one measured run
        let of = |c: usize| self.longest.get(c * self.pus + pu).copied().flatten();
        let (mut best, mut at, mut held) = ((0, 0, None), 0, of(first));
        for k in 1..=run.len() {
            let here = run.get(k).and_then(|&c| of(c));
            if k == run.len() || here != held {
                if held.is_some() && k - at > best.1 - best.0 {
                    best = (at, k, held);
                }
                (at, held) = (k, here);
            }
        }
        let block = &run[best.0..best.1];
        let Some(r) = best.2.map(|i| &self.runs[i as usize]) else { return };
        if block.len() < 3 || 2 * block.len() < r.ops.len() {
            return;
        }
        // the block's ops are neighbours in the order, so they follow one another in `r` too
        let Some(from) = r.ops.iter().position(|&c| c == block[0]) else { return };
        block.iter().enumerate().for_each(|(k, &c)| eff[c] = r.share(from + k));
    }
}

/// Op `c`'s share of a run's measured cost `t`: by its weight `wc` of the run's `total`, or
/// evenly over its `n` ops where the weights sum to nothing.
fn share(t: f64, wc: f64, total: f64, n: usize) -> f64 {
    if total > 0.0 { t * wc / total } else { t / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` ops in a chain on two PUs, every op 10 µs on each.
    fn chain(n: usize) -> (Vec<Vec<Option<f64>>>, Vec<Option<usize>>) {
        (vec![vec![Some(10.0), Some(10.0)]; n], (0..n).map(|c| (c + 1 < n).then_some(c + 1)).collect())
    }

    /// What `run` costs on `pu` where every op's pair price is 1 µs.
    fn priced(m: &MeasuredRuns, run: &[usize], pu: usize) -> f64 {
        let mut eff = vec![1.0; 7];
        m.price(run, pu, &mut eff);
        run.iter().map(|&c| eff[c]).sum()
    }

    #[test]
    fn a_run_near_a_measured_one_is_priced_from_it() {
        let (w, next) = chain(6);
        let m = MeasuredRuns::new(HashMap::from([((0, 5, 0), 120.0), ((1, 3, 1), 6.0)]), &w, &next);
        // the run itself, and the run less an op at either end: its shares of 120
        assert_eq!(priced(&m, &[0, 1, 2, 3, 4, 5], 0), 120.0);
        assert_eq!(priced(&m, &[1, 2, 3, 4, 5], 0), 100.0);
        assert_eq!(priced(&m, &[0, 1, 2, 3, 4], 0), 100.0);
        // three ops hold half of the six measured
        assert_eq!(priced(&m, &[3, 4, 5], 0), 60.0);
        // on the other PU only ops 1..=3 were measured: a run holding them prices them from it
        // (2 µs each) and keeps its pair prices for the rest (1 µs each here)
        assert_eq!(priced(&m, &[0, 1, 2, 3, 4], 1), 8.0);
        assert_eq!(priced(&m, &[1, 2, 3], 1), 6.0);
        // too short a run, or too little of a measured run: pairs
        assert_eq!(priced(&m, &[2, 3], 1), 2.0);
        assert_eq!(priced(&m, &[0, 1], 0), 2.0);
        let (w, next) = chain(7);
        let wide = MeasuredRuns::new(HashMap::from([((0, 6, 0), 140.0)]), &w, &next);
        assert_eq!(priced(&wide, &[0, 1, 2, 3], 0), 80.0);
        assert_eq!(priced(&wide, &[0, 1, 2], 0), 3.0, "3 of 7 ops");
    }

    #[test]
    fn entries_that_are_not_runs_price_nothing() {
        let (mut w, next) = chain(6);
        w[4][1] = None;
        // not neighbours in the order (5 comes after 0 only through 1..4), and an op PU 1 cannot run
        let m = MeasuredRuns::new(HashMap::from([((5, 0, 0), 50.0), ((2, 5, 1), 40.0)]), &w, &next);
        assert_eq!(m.shares().count(), 0);
        assert_eq!(m.get(5, 0, 0), Some(50.0));
        assert_eq!(priced(&m, &[1, 2, 3, 4, 5], 0), 5.0);
    }

    #[test]
    fn shares_follow_the_weights() {
        let (mut w, next) = chain(6);
        w[0][0] = Some(30.0);
        let m = MeasuredRuns::new(HashMap::from([((0, 2, 0), 10.0)]), &w, &next);
        assert_eq!(m.shares().collect::<Vec<_>>(), vec![(0, 0, 6.0), (1, 0, 2.0), (2, 0, 2.0)]);
    }
}
