//! The mapping problem of one model on one SoC, and the plan evaluator.
//!
//! The evaluator is a discrete-event simulation of an assignment (op -> PU) under a schedule,
//! and every cost bident reports comes from it:
//! - transfers follow the paper's rule on every producer -> consumer edge: an op on an
//!   accelerator pays its H2D once when any input comes from another PU or from the host (a graph
//!   input), and its D2H once when any consumer sits on another PU or an output goes to the host;
//! - each PU runs one op at a time;
//! - `Sequential`: the ops run one after another in the phased order (the paper's eq. 1 on a
//!   chain; on a DAG the transfers are charged per edge, not between neighbours in the order);
//! - `Parallel`: phases run one after another with a barrier between them; inside a phase the
//!   branches run at once, each branch in order, ops of two branches on one PU one after the
//!   other (the earliest-ready op starts first); an op whose phase has other branches on other
//!   PUs is slowed by the largest contention factor SF(its PU, their PU) (paper 3.3.2);
//! - energy: every op's transfer and execution time at the power of its PU;
//! - segments (bident's extension of the paper's model, which prices every op alone): the
//!   runtime compiles every maximal run of neighbours in the execution order that share a PU as
//!   one sub-model (under a parallel schedule only neighbours that overlap nothing else: same
//!   branch, or both in phases of one branch). An op in a run costs its weight less the measured
//!   saving of compiling it with its predecessor (pairs in `CostTable::segments`); where the
//!   whole run was measured (a longer entry there), or it holds at least half of the longest run
//!   measured on its PU, its ops share that measurement by their weights ([`MeasuredRuns`]).
//!
//! This file holds the problem, its bounds and its exhaustive optimum; the evaluator is
//! `evaluate`'s, the objective in parts `objective`'s (and `stretches`' where runs were measured
//! whole), the moves `moves`' and `exact`'s, the climbs `climb`'s and `parallel_climb`'s, and
//! what the climbs keep between moves `slack`'s and `memo`'s.

mod climb;
mod evaluate;
mod exact;
mod memo;
mod moves;
mod objective;
mod parallel_climb;
mod slack;
mod stretches;

use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

use crate::Objective;
use crate::measured::{MeasuredRuns, OpCosts};
pub(crate) use memo::PhaseMemo;

/// How a plan's ops are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    Sequential,
    Parallel,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Sequential => "sequential",
            Schedule::Parallel => "parallel",
        }
    }
}

/// Everything the evaluator and the searches read, indexed by op id.
#[derive(Clone, Debug)]
pub struct Problem {
    /// `w[op][pu]`: dispatch + execution, None where the PU cannot run the op.
    pub w: Vec<Vec<Option<f64>>>,
    pub h2d: Vec<Vec<f64>>,
    pub d2h: Vec<Vec<f64>>,
    pub power: Vec<Vec<f64>>,
    pub accelerator: Vec<bool>,
    pub preds: Vec<Vec<usize>>,
    pub succs: Vec<Vec<usize>>,
    pub from_host: Vec<bool>,
    pub to_host: Vec<bool>,
    /// `sf[i][j]`: slowdown of PU i while PU j is busy.
    pub sf: Vec<Vec<f64>>,
    /// `exclusive[i][j]`: PUs i and j share hardware (cores) and never run at once: an op on
    /// one starts only when the other is idle, and neither slows the other.
    pub exclusive: Vec<Vec<bool>>,
    /// Phase -> branch -> ops, as partitioned.
    pub phases: Vec<Vec<Vec<usize>>>,
    /// `(phase, branch)` of every op.
    pub place: Vec<(usize, usize)>,
    /// The op before / after each op in the execution order.
    pub prev: Vec<Option<usize>>,
    pub next: Vec<Option<usize>>,
    /// Whether an op may be compiled with `prev` under a parallel schedule (same branch, or
    /// both in single-branch phases); under a sequential one it always may.
    pub joins_in_parallel: Vec<bool>,
    /// `saving[op][pu]`: what the op costs less when `prev[op]` runs right before it on that PU
    /// (compiled together), in [0, w].
    pub saving: Vec<Vec<f64>>,
    /// Measured runs of three or more ops: `(first op, last op, pu)` -> cost of the run.
    pub segment_cost: MeasuredRuns,
    /// `launch[pu]`: what an inference costs the runtime beyond its ops where it uses that PU
    /// (µs; 0 where not measured); a mapping's latency adds the largest of its PUs' once.
    pub launch: Vec<f64>,
    /// Where long searches on this problem report their progress.
    pub progress: crate::ProgressHook,
}

/// Each op's neighbours in the execution order (phase by phase, branch by branch), and whether
/// it may join its predecessor's run under a parallel schedule ([`crate::joins_in_parallel`]).
pub struct OrderLinks {
    pub prev: Vec<Option<usize>>,
    pub next: Vec<Option<usize>>,
    pub joins_in_parallel: Vec<bool>,
}

impl OrderLinks {
    pub fn new(phases: &[Vec<Vec<usize>>], place: &[(usize, usize)]) -> Self {
        let n = place.len();
        let mut links = OrderLinks { prev: vec![None; n], next: vec![None; n], joins_in_parallel: vec![false; n] };
        let order: Vec<usize> = phases.iter().flatten().flatten().copied().collect();
        for w in order.windows(2) {
            let (a, b) = (w[0], w[1]);
            links.prev[b] = Some(a);
            links.next[a] = Some(b);
            links.joins_in_parallel[b] = crate::joins_in_parallel(place[a], place[b], |ph| phases[ph].len() == 1);
        }
        links
    }
}

/// What the evaluator found: per op (by id) its timing, and the totals.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub start: Vec<f64>,
    pub finish: Vec<f64>,
    pub transfer_in: Vec<f64>,
    pub transfer_out: Vec<f64>,
    /// Contention factor applied to the op's execution (1 when nothing overlaps it).
    pub factor: Vec<f64>,
    /// What running right after the op before it on its PU saved (µs, before contention).
    pub saved: Vec<f64>,
    pub latency_us: f64,
    pub energy_uj: f64,
}

impl Timeline {
    pub fn objective(&self, obj: Objective) -> f64 {
        match obj {
            Objective::Latency => self.latency_us,
            Objective::Energy => self.energy_uj,
        }
    }
}

/// The whole-only PUs of `t`'s SoC (`PuSpec::whole_only`) whose whole run
/// along `order` was measured: `(PU, that run's cost)`, the latest where it was measured twice.
fn whole_runs<'a>(t: &'a CostTable, order: &'a [usize]) -> impl Iterator<Item = (usize, &'a bident_profile::Cost)> {
    let whole = move |ops: &[u32]| ops.len() == order.len() && ops.iter().zip(order).all(|(&a, &b)| a as usize == b);
    t.soc.pus.iter().enumerate().filter(|(_, pu)| pu.whole_only).filter_map(move |(j, _)| {
        let run = t.segments.iter().rev().filter(|s| whole(&s.ops)).find_map(|s| s.per_pu.get(j)?.as_ref());
        // a one-op model's whole run is its op's entry
        let one = || if let [op] = order { t.cost(*op as u32, j) } else { None };
        run.or_else(one).map(|c| (j, c))
    })
}

/// Give whole-only PU `j` its ops' weights and power from its whole run (`cost` µs at `power_w`):
/// shares of the run by each op's weight on the PUs of its backend that were measured op by op
/// (on any PU where those have none; even shares where no PU has all), so the whole model there
/// costs what was measured and no part of it is priced (a whole-only PU runs no part).
fn spread_whole_run(
    w: &mut [Vec<Option<f64>>],
    power: &mut [Vec<f64>],
    j: usize,
    cost: f64,
    power_w: f64,
    t: &CostTable,
) {
    let backend = &t.soc.pus[j].backend;
    let measured: Vec<usize> = (0..t.soc.pus.len()).filter(|&k| !t.soc.pus[k].whole_only).collect();
    let same: Vec<usize> = measured.iter().copied().filter(|&k| &t.soc.pus[k].backend == backend).collect();
    let of = |row: &[Option<f64>], pus: &[usize]| pus.iter().filter_map(|&k| row[k]).reduce(f64::min);
    let reference: Option<Vec<f64>> =
        [same, measured].iter().find_map(|pus| w.iter().map(|row| of(row, pus)).collect::<Option<Vec<f64>>>());
    let reference = reference.unwrap_or_else(|| vec![1.0; w.len()]);
    let sum: f64 = reference.iter().sum();
    for (i, row) in w.iter_mut().enumerate() {
        let share = if sum > 0.0 { reference[i] / sum } else { 1.0 / reference.len() as f64 };
        row[j] = Some(cost * share);
        power[i][j] = power_w;
    }
}

impl Problem {
    pub fn new(phased: &PhasedGraph, t: &CostTable) -> Self {
        let (n, k) = (phased.op_count as usize, t.soc.pus.len());
        let field = |f: fn(&bident_profile::Cost) -> f64| -> Vec<Vec<f64>> {
            (0..n).map(|i| (0..k).map(|j| t.cost(i as u32, j).map_or(0.0, f)).collect()).collect()
        };
        let mut preds = vec![vec![]; n];
        let mut succs = vec![vec![]; n];
        for &(p, c) in &phased.edges {
            preds[c as usize].push(p as usize);
            succs[p as usize].push(c as usize);
        }
        let mut place = vec![(0, 0); n];
        let phases: Vec<Vec<Vec<usize>>> = phased
            .phases
            .iter()
            .map(|ph| ph.branches.iter().map(|b| b.ops.iter().map(|&o| o as usize).collect()).collect())
            .collect();
        for (pi, ph) in phases.iter().enumerate() {
            for (bi, b) in ph.iter().enumerate() {
                for &o in b {
                    place[o] = (pi, bi);
                }
            }
        }
        let OrderLinks { prev, next, joins_in_parallel } = OrderLinks::new(&phases, &place);
        let every = |j: usize| t.io_every_call.get(j).copied().unwrap_or(false);
        // where every call pays its transfers, they are part of the op's own cost
        let weight =
            |c: &bident_profile::Cost, j: usize| c.weight_us() + if every(j) { c.h2d_us + c.d2h_us } else { 0.0 };
        let mut w: Vec<Vec<Option<f64>>> =
            (0..n).map(|i| (0..k).map(|j| t.cost(i as u32, j).map(|c| weight(c, j))).collect()).collect();
        let mut power = field(|c| c.power_w);
        let order: Vec<usize> = phases.iter().flatten().flatten().copied().collect();
        for (j, whole) in whole_runs(t, &order) {
            spread_whole_run(&mut w, &mut power, j, weight(whole, j), whole.power_w, t);
        }
        let mut saving = vec![vec![0.0; k]; n];
        let mut segment_cost = std::collections::HashMap::new();
        for seg in &t.segments {
            let ops: Vec<usize> = seg.ops.iter().map(|&o| o as usize).collect();
            // only runs of neighbours in this order count
            if ops.iter().any(|&o| o >= n) || ops.windows(2).any(|p| prev[p[1]] != Some(p[0])) {
                continue;
            }
            for (j, cost) in seg.per_pu.iter().enumerate().take(k) {
                // a whole-only PU's whole run is in its weights already ([`spread_whole_run`])
                let Some(cost) = cost.as_ref().filter(|_| !t.soc.pus[j].whole_only) else { continue };
                if let [a, b] = ops[..] {
                    if let (Some(wa), Some(wb)) = (w[a][j], w[b][j]) {
                        saving[b][j] = (wa + wb - weight(cost, j)).clamp(0.0, wb);
                    }
                } else if let (Some(&first), Some(&last)) = (ops.first(), ops.last()) {
                    segment_cost.insert((first, last, j), weight(cost, j));
                }
            }
        }
        let segment_cost =
            MeasuredRuns::new(segment_cost, OpCosts { w: &w, saving: &saving, power: &power, next: &next });
        let flag = |ops: &[u32]| {
            let mut v = vec![false; n];
            for &o in ops {
                v[o as usize] = true;
            }
            v
        };
        Problem {
            w,
            h2d: field(|c| c.h2d_us),
            d2h: field(|c| c.d2h_us),
            power,
            accelerator: t.soc.pus.iter().enumerate().map(|(j, p)| p.kind.is_accelerator() && !every(j)).collect(),
            preds,
            succs,
            from_host: flag(&phased.reads_input),
            to_host: flag(&phased.writes_output),
            sf: t.contention.as_ref().map_or_else(|| vec![vec![1.0; k]; k], |c| c.sf.clone()),
            exclusive: t.soc.exclusive(),
            phases,
            place,
            prev,
            next,
            joins_in_parallel,
            saving,
            segment_cost,
            launch: (0..k).map(|j| t.launch_us.get(j).copied().unwrap_or(0.0)).collect(),
            progress: crate::ProgressHook::default(),
        }
    }

    /// Whether `c` joins its predecessor's run under `assign` and `schedule`.
    fn joins(&self, assign: &[usize], c: usize, schedule: Schedule) -> bool {
        self.prev[c]
            .is_some_and(|p| assign[p] == assign[c] && (schedule == Schedule::Sequential || self.joins_in_parallel[c]))
    }

    /// Per op, its cost in its run (µs, before contention), where some runs were measured whole:
    /// weight less saving, or its share of a measured run ([`MeasuredRuns`]). None if an op
    /// sits where it cannot run.
    fn effective(&self, assign: &[usize], schedule: Schedule) -> Option<Vec<f64>> {
        let mut eff = vec![0.0; self.ops()];
        let order: Vec<usize> = self.order().collect();
        self.price_runs(assign, schedule, &order, &mut eff).then_some(eff)
    }

    /// What op `c` saves under `assign` and `schedule` by running right after its predecessor
    /// on its PU (compiled together).
    pub fn saved(&self, assign: &[usize], c: usize, schedule: Schedule) -> f64 {
        if self.joins(assign, c, schedule) { self.saving[c][assign[c]] } else { 0.0 }
    }

    pub fn ops(&self) -> usize {
        self.w.len()
    }

    pub fn pus(&self) -> usize {
        self.accelerator.len()
    }

    /// Lower bounds of any mapping under `schedule`: (latency µs, energy µJ). Every op costs at
    /// least its cheapest entry (transfers and contention only add); a sequential run is the sum
    /// of those; a parallel phase lasts at least its longest branch and its total work spread
    /// over all PUs. Measured contention factors below 1 (noise) scale the bound down.
    pub fn lower_bound(&self, schedule: Schedule) -> (f64, f64) {
        // an op costs at least its cheapest entry less the most it can save there, or its share
        // of a measured run it may be part of
        let n = self.ops();
        let least_on = |c: usize, j: usize| self.w[c][j].map(|w| w - self.saving[c][j]);
        let mut floor_us: Vec<f64> =
            (0..n).map(|c| (0..self.pus()).filter_map(|j| least_on(c, j)).fold(f64::INFINITY, f64::min)).collect();
        let mut floor_uj: Vec<f64> = (0..n)
            .map(|c| {
                (0..self.pus())
                    .filter_map(|j| least_on(c, j).map(|w| w * self.power[c][j]))
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        for (c, j, share) in self.segment_cost.shares() {
            floor_us[c] = floor_us[c].min(share);
            floor_uj[c] = floor_uj[c].min(share * self.power[c][j]);
        }
        let least = |c: usize| floor_us[c];
        let energy = floor_uj.iter().sum::<f64>();
        let floor = self.sf.iter().flatten().copied().fold(1.0, f64::min);
        let latency = match schedule {
            Schedule::Sequential => (0..self.ops()).map(least).sum::<f64>(),
            Schedule::Parallel => self
                .phases
                .iter()
                .map(|phase| {
                    let longest = phase.iter().map(|b| b.iter().map(|&c| least(c)).sum::<f64>()).fold(0.0, f64::max);
                    let work = phase.iter().flatten().map(|&c| least(c)).sum::<f64>();
                    longest.max(work / self.pus() as f64)
                })
                .sum::<f64>(),
        };
        // every mapping uses some PU, and pays at least the least launch cost
        let launch = self.launch.iter().copied().fold(f64::INFINITY, f64::min);
        (latency * floor + if launch.is_finite() { launch } else { 0.0 }, energy * floor)
    }

    /// The number of assignments, K^N (None when it overflows).
    fn assignments(&self) -> Option<usize> {
        (0..self.ops()).try_fold(1usize, |acc, _| acc.checked_mul(self.pus()))
    }

    /// True when [`Problem::exhaustive`] would search.
    pub fn small_enough_for_exhaustive(&self) -> bool {
        self.assignments().is_some_and(|c| c <= Self::EXHAUSTIVE_LIMIT)
    }

    /// Instances with at most this many assignments are also solved exhaustively.
    pub const EXHAUSTIVE_LIMIT: usize = 1 << 17;

    /// The optimum over every assignment under `schedule`, when there are at most
    /// [`Problem::EXHAUSTIVE_LIMIT`] of them: (assignment, objective value).
    pub fn exhaustive(&self, schedule: Schedule, obj: Objective) -> Option<(Vec<usize>, f64)> {
        let count = self.assignments().filter(|&c| c <= Self::EXHAUSTIVE_LIMIT)?;
        let (n, k) = (self.ops(), self.pus());
        let mut assign = vec![0usize; n];
        let mut best: Option<(Vec<usize>, f64)> = None;
        for _ in 0..count {
            if let Some(t) = self.evaluate(&assign, schedule) {
                let v = t.objective(obj);
                if best.as_ref().is_none_or(|b| v < b.1) {
                    best = Some((assign.clone(), v));
                }
            }
            // next assignment, as a base-k counter
            for a in assign.iter_mut() {
                *a += 1;
                if *a < k {
                    break;
                }
                *a = 0;
            }
        }
        best
    }

    /// The paper's chain over `ops` (in that order), for the DP, with the pair savings between
    /// neighbours and the runs measured whole (by position).
    pub fn chain(&self, ops: &[usize]) -> crate::Chain {
        if self.segment_cost.is_empty() {
            return self.chain_pairs(ops);
        }
        let mut pos = vec![None; self.ops()];
        ops.iter().enumerate().for_each(|(p, &o)| pos[o] = Some(p));
        let runs = self
            .segment_cost
            .iter()
            .filter_map(|((first, last, j), t)| {
                let (p0, p1) = (pos[first]?, pos[last]?);
                // the positions between must be the run's neighbours in order
                (p0 < p1 && (p0..p1).all(|p| self.next[ops[p]] == Some(ops[p + 1]))).then_some(((p0, p1, j), t))
            })
            .collect();
        self.chain_pairs(ops).with_runs(runs)
    }

    fn chain_pairs(&self, ops: &[usize]) -> crate::Chain {
        let len = ops.len() * self.pus();
        let (mut w, mut h2d, mut d2h, mut power, mut saving) = (
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
        );
        for (i, &o) in ops.iter().enumerate() {
            w.extend_from_slice(&self.w[o]);
            h2d.extend_from_slice(&self.h2d[o]);
            d2h.extend_from_slice(&self.d2h[o]);
            power.extend_from_slice(&self.power[o]);
            if i > 0 && self.prev[o] == Some(ops[i - 1]) {
                saving.extend_from_slice(&self.saving[o]);
            } else {
                saving.extend(std::iter::repeat_n(0.0, self.pus()));
            }
        }
        crate::Chain::from_flat(self.pus(), w, h2d, d2h, power, self.accelerator.clone()).with_savings(saving)
    }

    /// The phased execution order.
    pub fn order(&self) -> impl Iterator<Item = usize> + '_ {
        self.phases.iter().flatten().flatten().copied()
    }

    /// (H2D, D2H) op `c` pays under `assign` (module docs).
    pub fn transfers(&self, assign: &[usize], c: usize) -> (f64, f64) {
        let j = assign[c];
        if !self.accelerator[j] {
            return (0.0, 0.0);
        }
        let into = self.from_host[c] || self.preds[c].iter().any(|&p| assign[p] != j);
        let out = self.to_host[c] || self.succs[c].iter().any(|&s| assign[s] != j);
        (if into { self.h2d[c][j] } else { 0.0 }, if out { self.d2h[c][j] } else { 0.0 })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A random multi-phase problem: single-branch phases of 1 to `chain` ops between parallel
    /// ones of 2-5 branches of 1 to `branch` ops, every branch head reading every tail before
    /// it, some chain ops reading the op two before too and some reading or writing the graph's
    /// inputs or outputs, with transfers, pair savings, contention, PUs that cannot run some ops
    /// and, in a third of the cases, two PUs sharing hardware.
    pub(crate) fn multi_phase(r: &mut dyn FnMut() -> f64, case: usize, chain: f64, branch: f64) -> Problem {
        let k = 2 + (r() * 3.0) as usize;
        let mut phases: Vec<Vec<Vec<usize>>> = vec![];
        let mut n = 0;
        for pi in 0..2 + (r() * 8.0) as usize {
            let branches = if pi % 2 == 0 { 1 } else { 2 + (r() * 4.0) as usize };
            let phase: Vec<Vec<usize>> = (0..branches)
                .map(|_| {
                    let len = 1 + (r() * if branches == 1 { chain } else { branch }) as usize;
                    n += len;
                    (n - len..n).collect()
                })
                .collect();
            phases.push(phase);
        }
        let (mut preds, mut succs) = (vec![vec![]; n], vec![vec![]; n]);
        let mut place = vec![(0, 0); n];
        for (pi, phase) in phases.iter().enumerate() {
            for (bi, b) in phase.iter().enumerate() {
                b.iter().for_each(|&c| place[c] = (pi, bi));
                for w in b.windows(2) {
                    preds[w[1]].push(w[0]);
                    succs[w[0]].push(w[1]);
                }
                for prev in phases[..pi].last().into_iter().flatten() {
                    let t = prev[prev.len() - 1];
                    preds[b[0]].push(t);
                    succs[t].push(b[0]);
                }
                // now and then a chain's op also reads the op two before it
                for s in b.windows(3).filter(|_| phase.len() == 1 && r() < 0.05) {
                    preds[s[2]].push(s[0]);
                    succs[s[0]].push(s[2]);
                }
            }
        }
        let (mut w, mut saving) = (vec![vec![None; k]; n], vec![vec![0.0; k]; n]);
        for c in 0..n {
            for j in 0..k {
                if j == 0 || r() > 0.15 {
                    let t = 1.0 + 50.0 * r();
                    w[c][j] = Some(t);
                    saving[c][j] = t * r() * r();
                }
            }
        }
        let mut exclusive = vec![vec![false; k]; k];
        if case.is_multiple_of(3) {
            exclusive[0][1] = true;
            exclusive[1][0] = true;
        }
        let links = OrderLinks::new(&phases, &place);
        // the first op reads the graph's input and the last writes its output; now and then
        // another op does too
        let (from_host, to_host): (Vec<bool>, Vec<bool>) =
            (0..n).map(|c| (c == 0 || r() < 0.02, c == n - 1 || r() < 0.02)).unzip();
        Problem {
            h2d: (0..n).map(|_| (0..k).map(|_| 8.0 * r()).collect()).collect(),
            d2h: (0..n).map(|_| (0..k).map(|_| 8.0 * r()).collect()).collect(),
            power: (0..n).map(|_| (0..k).map(|_| 1.0 + 9.0 * r()).collect()).collect(),
            w,
            accelerator: (0..k).map(|j| j > 0).collect(),
            preds,
            succs,
            from_host,
            to_host,
            sf: (0..k).map(|i| (0..k).map(|j| if i == j { 1.0 } else { 1.0 + 0.6 * r() }).collect()).collect(),
            exclusive,
            phases,
            place,
            prev: links.prev,
            next: links.next,
            joins_in_parallel: links.joins_in_parallel,
            saving,
            segment_cost: Default::default(),
            launch: vec![],
            progress: Default::default(),
        }
    }

    pub(crate) fn xorshift() -> impl FnMut() -> f64 {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        }
    }
}
