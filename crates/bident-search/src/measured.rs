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

/// One run measured whole on `pu`: its ops in order, their weights there and their sum; where
/// it starts in the order, and the sums of its ops' weights, of their weights times their power
/// and of their power before each op (for [`Run::shares_of`]).
#[derive(Clone, Debug)]
struct Run {
    ops: Vec<usize>,
    pu: usize,
    cost: f64,
    weights: Vec<f64>,
    weight: f64,
    at: usize,
    sums: Vec<[f64; 3]>,
}

impl Run {
    /// The share of the cost of the op at `k` in the run.
    fn share(&self, k: usize) -> f64 {
        share(self.cost, self.weights[k], self.weight, self.ops.len())
    }

    /// The shares of the ops at `from..to` in the run, as time and as energy.
    fn shares_of(&self, from: usize, to: usize) -> (f64, f64) {
        let d = |i: usize| self.sums[to][i] - self.sums[from][i];
        if self.weight > 0.0 {
            (self.cost * d(0) / self.weight, self.cost * d(1) / self.weight)
        } else {
            let each = self.cost / self.ops.len() as f64;
            (each * (to - from) as f64, each * d(2))
        }
    }
}

/// Per PU, along the execution order: the sums of the ops' pair prices (weight less saving) as
/// time and as energy, and the count of ops the PU cannot run, before each position; the
/// stretches of neighbours whose longest run measured on it is the same (`(first position,
/// end position, run)`, in order); each op's saving and power there.
#[derive(Clone, Debug, Default)]
struct Along {
    pairs: Vec<[f64; 2]>,
    missing: Vec<u32>,
    stretches: Vec<(usize, usize, u32)>,
    saving: Vec<f64>,
    power: Vec<f64>,
}

/// The runs of three or more neighbours in the execution order measured whole: `(first op,
/// last op, pu)` -> cost (µs), and for every (op, PU) the longest of them holding the op; and
/// per PU the sums along the order that price a whole run at once (`MeasuredRuns::run_cost`).
#[derive(Clone, Debug, Default)]
pub struct MeasuredRuns {
    cost: HashMap<(usize, usize, usize), f64>,
    runs: Vec<Run>,
    /// The runs of `cost` that are runs: key -> index into `runs`.
    index: HashMap<(usize, usize, usize), u32>,
    /// `longest[op * pus + pu]`: index into `runs`.
    longest: Vec<Option<u32>>,
    pus: usize,
    /// The execution order, each op's position in it, and per PU the sums along it.
    order: Vec<usize>,
    position: Vec<usize>,
    along: Vec<Along>,
}

/// What the ops cost where they run alone or in pairs, as [`MeasuredRuns::new`] reads them:
/// per op and PU its weight (None where the PU cannot run it), what it saves after its
/// predecessor in the order, and its power; per op the next in the order.
#[derive(Clone, Copy, Debug)]
pub struct OpCosts<'a> {
    pub w: &'a [Vec<Option<f64>>],
    pub saving: &'a [Vec<f64>],
    pub power: &'a [Vec<f64>],
    pub next: &'a [Option<usize>],
}

impl MeasuredRuns {
    /// From the measured costs and the ops' own ([`OpCosts`]). An entry whose ops are not
    /// neighbours in the order, or that holds an op its PU cannot run, prices nothing.
    pub fn new(cost: HashMap<(usize, usize, usize), f64>, op_costs: OpCosts<'_>) -> Self {
        let OpCosts { w, next, .. } = op_costs;
        let pus = w.first().map_or(0, Vec::len);
        let (order, position) = order_of(next);
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
                let power = |c: usize| op_costs.power.get(c).and_then(|r| r.get(pu)).copied().unwrap_or(0.0);
                let sums = std::iter::once([0.0; 3])
                    .chain(ops.iter().zip(&weights).scan([0.0; 3], |acc, (&c, &wc)| {
                        *acc = [acc[0] + wc, acc[1] + wc * power(c), acc[2] + power(c)];
                        Some(*acc)
                    }))
                    .collect();
                let at = position.get(first).copied().unwrap_or(0);
                runs.push(Run { ops, pu, cost: t, weights, weight, at, sums });
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
        let along = (0..pus).map(|pu| Along::new(pu, &order, &longest, pus, op_costs)).collect();
        MeasuredRuns { cost, runs, index, longest, pus, order, position, along }
    }

    /// What the run of the ops at positions `from..=to` of the execution order costs on `pu`
    /// (every op but the first joining the one before it), as time and as energy: what
    /// [`MeasuredRuns::price`] gives its ops, summed, without visiting them (the sums along the
    /// order, and the stretches that meet the run). None where `pu` cannot run one of them.
    pub(crate) fn run_cost(&self, from: usize, to: usize, pu: usize) -> Option<(f64, f64)> {
        let a = self.along.get(pu)?;
        if to < from || to >= self.order.len() || a.missing[to + 1] != a.missing[from] {
            return None;
        }
        // the first op pays its weight: it saves nothing
        let pairs = |lo: usize, hi: usize| {
            let first = if lo == from { [a.saving[lo], a.saving[lo] * a.power[lo]] } else { [0.0; 2] };
            [a.pairs[hi + 1][0] - a.pairs[lo][0] + first[0], a.pairs[hi + 1][1] - a.pairs[lo][1] + first[1]]
        };
        let [us, uj] = pairs(from, to);
        if to - from < 2 {
            return Some((us, uj));
        }
        if let Some(&i) = self.index.get(&(self.order[from], self.order[to], pu)) {
            let r = &self.runs[i as usize];
            return Some(r.shares_of(0, r.ops.len()));
        }
        // the longest block of the run priced by one measured run (the first among equals)
        let start = a.stretches.partition_point(|&(_, end, _)| end <= from);
        let mut best: Option<(usize, usize, u32)> = None;
        for &(s, e, r) in a.stretches[start..].iter().take_while(|&&(s, _, _)| s <= to) {
            let (lo, hi) = (s.max(from), e.min(to + 1));
            if best.is_none_or(|(bl, bh, _)| hi - lo > bh - bl) {
                best = Some((lo, hi, r));
            }
        }
        let Some((lo, hi, r)) = best else { return Some((us, uj)) };
        let r = &self.runs[r as usize];
        if hi - lo < 3 || 2 * (hi - lo) < r.ops.len() {
            return Some((us, uj));
        }
        let [bus, buj] = pairs(lo, hi - 1);
        let (sus, suj) = r.shares_of(lo - r.at, hi - r.at);
        Some((us - bus + sus, uj - buj + suj))
    }

    /// Op `c`'s position in the execution order.
    pub(crate) fn position(&self, c: usize) -> usize {
        self.position[c]
    }

    /// The execution order, as the links given to [`MeasuredRuns::new`] make it.
    pub(crate) fn order(&self) -> &[usize] {
        &self.order
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

/// The execution order the links give (from the op no other op leads to), and each op's
/// position in it (ops the walk does not reach come last, in their numbering).
fn order_of(next: &[Option<usize>]) -> (Vec<usize>, Vec<usize>) {
    let n = next.len();
    let mut led = vec![false; n];
    next.iter().flatten().filter(|&&x| x < n).for_each(|&x| led[x] = true);
    let mut order = Vec::with_capacity(n);
    let mut position = vec![usize::MAX; n];
    let mut at = (0..n).find(|&c| !led[c]);
    while let Some(c) = at.filter(|&c| position[c] == usize::MAX) {
        position[c] = order.len();
        order.push(c);
        at = next[c].filter(|&x| x < n);
    }
    for (c, at) in position.iter_mut().enumerate() {
        if *at == usize::MAX {
            *at = order.len();
            order.push(c);
        }
    }
    (order, position)
}

impl Along {
    fn new(pu: usize, order: &[usize], longest: &[Option<u32>], pus: usize, op_costs: OpCosts<'_>) -> Self {
        let get = |v: &[Vec<f64>], c: usize| v.get(c).and_then(|r| r.get(pu)).copied().unwrap_or(0.0);
        let mut a = Along {
            pairs: vec![[0.0; 2]],
            missing: vec![0],
            saving: order.iter().map(|&c| get(op_costs.saving, c)).collect(),
            power: order.iter().map(|&c| get(op_costs.power, c)).collect(),
            stretches: vec![],
        };
        for (k, &c) in order.iter().enumerate() {
            let w = op_costs.w.get(c).and_then(|r| r.get(pu)).copied().flatten();
            let pair = w.map_or(0.0, |w| w - a.saving[k]);
            let last = a.pairs[k];
            a.pairs.push([last[0] + pair, last[1] + pair * a.power[k]]);
            a.missing.push(a.missing[k] + w.is_none() as u32);
            let held = longest.get(c * pus + pu).copied().flatten();
            match (a.stretches.last_mut(), held) {
                (Some((_, end, r)), Some(h)) if *end == k && *r == h => *end = k + 1,
                (_, Some(h)) => a.stretches.push((k, k + 1, h)),
                _ => {}
            }
        }
        a
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

    /// The runs measured on that chain, nothing saved in pairs, 1 W everywhere.
    fn runs(cost: HashMap<(usize, usize, usize), f64>, w: &[Vec<Option<f64>>], next: &[Option<usize>]) -> MeasuredRuns {
        let (saving, power) = (vec![vec![0.0; 2]; w.len()], vec![vec![1.0; 2]; w.len()]);
        MeasuredRuns::new(cost, OpCosts { w, saving: &saving, power: &power, next })
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
        let m = runs(HashMap::from([((0, 5, 0), 120.0), ((1, 3, 1), 6.0)]), &w, &next);
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
        let wide = runs(HashMap::from([((0, 6, 0), 140.0)]), &w, &next);
        assert_eq!(priced(&wide, &[0, 1, 2, 3], 0), 80.0);
        assert_eq!(priced(&wide, &[0, 1, 2], 0), 3.0, "3 of 7 ops");
    }

    /// [`MeasuredRuns::run_cost`] of every run on a chain of 12 ops is the sum of what
    /// [`MeasuredRuns::price`] gives its ops, as time and as energy: runs measured whole, near
    /// one, holding parts of two, and on a PU that cannot run an op; random weights, savings and
    /// powers.
    #[test]
    fn a_run_costs_what_its_ops_are_priced() {
        let mut r = crate::problem::tests::xorshift();
        let n = 12;
        let mut w: Vec<Vec<Option<f64>>> = (0..n).map(|_| vec![Some(1.0 + 9.0 * r()), Some(1.0 + 9.0 * r())]).collect();
        w[9][1] = None;
        let saving: Vec<Vec<f64>> = w.iter().map(|row| row.iter().map(|w| w.unwrap_or(0.0) * r()).collect()).collect();
        let power: Vec<Vec<f64>> = (0..n).map(|_| vec![1.0 + r(), 1.0 + r()]).collect();
        let next: Vec<Option<usize>> = (0..n).map(|c| (c + 1 < n).then_some(c + 1)).collect();
        let cost = HashMap::from([((0, 7, 0), 30.0), ((5, 11, 0), 25.0), ((2, 6, 1), 12.0), ((1, 3, 1), 4.0)]);
        let m = MeasuredRuns::new(cost, OpCosts { w: &w, saving: &saving, power: &power, next: &next });
        let mut checked = 0;
        for pu in 0..2 {
            for from in 0..n {
                for to in from..n {
                    let run: Vec<usize> = (from..=to).collect();
                    let feasible = run.iter().all(|&c| w[c][pu].is_some());
                    let mut eff = vec![0.0; n];
                    for &c in &run {
                        eff[c] = w[c][pu].unwrap_or(0.0) - if c > from { saving[c][pu] } else { 0.0 };
                    }
                    m.price(&run, pu, &mut eff);
                    let us: f64 = run.iter().map(|&c| eff[c]).sum();
                    let uj: f64 = run.iter().map(|&c| eff[c] * power[c][pu]).sum();
                    match m.run_cost(from, to, pu) {
                        Some((a, b)) => {
                            assert!(feasible, "{from}..={to} on {pu}: priced, but an op cannot run there");
                            assert!(
                                (a - us).abs() < 1e-9 && (b - uj).abs() < 1e-9,
                                "{from}..={to} on {pu}: {a}, {b} against {us}, {uj}"
                            );
                            checked += 1;
                        }
                        None => assert!(!feasible, "{from}..={to} on {pu}: not priced"),
                    }
                }
            }
        }
        // every run of the 12 ops on PU 0; on PU 1 those within ops 0-8 or 10-11
        assert_eq!(checked, 78 + 45 + 3);
    }

    #[test]
    fn entries_that_are_not_runs_price_nothing() {
        let (mut w, next) = chain(6);
        w[4][1] = None;
        // not neighbours in the order (5 comes after 0 only through 1..4), and an op PU 1 cannot run
        let m = runs(HashMap::from([((5, 0, 0), 50.0), ((2, 5, 1), 40.0)]), &w, &next);
        assert_eq!(m.shares().count(), 0);
        assert_eq!(m.get(5, 0, 0), Some(50.0));
        assert_eq!(priced(&m, &[1, 2, 3, 4, 5], 0), 5.0);
    }

    #[test]
    fn shares_follow_the_weights() {
        let (mut w, next) = chain(6);
        w[0][0] = Some(30.0);
        let m = runs(HashMap::from([((0, 2, 0), 10.0)]), &w, &next);
        assert_eq!(m.shares().collect::<Vec<_>>(), vec![(0, 0, 6.0), (1, 0, 2.0), (2, 0, 2.0)]);
    }
}
