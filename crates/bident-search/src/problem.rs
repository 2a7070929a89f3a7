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

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use serde::{Deserialize, Serialize};

use crate::Objective;
use crate::measured::{MeasuredRuns, OpCosts};

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
        let w: Vec<Vec<Option<f64>>> =
            (0..n).map(|i| (0..k).map(|j| t.cost(i as u32, j).map(|c| weight(c, j))).collect()).collect();
        let mut saving = vec![vec![0.0; k]; n];
        let mut segment_cost = std::collections::HashMap::new();
        for seg in &t.segments {
            let ops: Vec<usize> = seg.ops.iter().map(|&o| o as usize).collect();
            // only runs of neighbours in this order count
            if ops.iter().any(|&o| o >= n) || ops.windows(2).any(|p| prev[p[1]] != Some(p[0])) {
                continue;
            }
            for (j, cost) in seg.per_pu.iter().enumerate().take(k) {
                let Some(cost) = cost else { continue };
                if let [a, b] = ops[..] {
                    if let (Some(wa), Some(wb)) = (w[a][j], w[b][j]) {
                        saving[b][j] = (wa + wb - weight(cost, j)).clamp(0.0, wb);
                    }
                } else if let (Some(&first), Some(&last)) = (ops.first(), ops.last()) {
                    segment_cost.insert((first, last, j), weight(cost, j));
                }
            }
        }
        let power = field(|c| c.power_w);
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

    /// Contention factors of a phase's ops under a parallel schedule, into `out` (by position in
    /// the phase, branch after branch): the largest SF of the op's PU against the PUs of the
    /// other branches. `used` and `users` are scratch.
    fn factors_into(
        &self,
        assign: &[usize],
        phase: &[Vec<usize>],
        out: &mut Vec<f64>,
        used: &mut Vec<bool>,
        users: &mut Vec<usize>,
    ) {
        let k = self.pus();
        used.clear();
        used.resize(phase.len() * k, false);
        // how many branches use each PU: another branch uses PU o when more than this one does
        users.clear();
        users.resize(k, 0);
        for (ops, u) in phase.iter().zip(used.chunks_mut(k)) {
            for &o in ops {
                let j = assign[o];
                if !u[j] {
                    u[j] = true;
                    users[j] += 1;
                }
            }
        }
        out.clear();
        for (ops, u) in phase.iter().zip(used.chunks(k)) {
            for &o in ops {
                // the worst SF of the op's PU against a PU another branch uses
                let j = assign[o];
                let (sf, shares) = (&self.sf[j], &self.exclusive[j]);
                let mut worst = 1.0f64;
                for q in 0..k {
                    if q != j && !shares[q] && users[q] > u[q] as usize {
                        worst = worst.max(sf[q]);
                    }
                }
                out.push(worst);
            }
        }
    }

    /// Run phase `pi` from time `at`; returns its end and energy, and fills `tl` when given.
    /// `eff`: the ops' costs in their runs where some runs were measured whole
    /// ([`Problem::effective`]). None if an op sits on a PU that cannot run it.
    fn run_phase(
        &self,
        assign: &[usize],
        pi: usize,
        at: f64,
        schedule: Schedule,
        eff: Option<&[f64]>,
        mut tl: Option<&mut Timeline>,
    ) -> Option<(f64, f64)> {
        let phase = &self.phases[pi];
        let parallel = schedule == Schedule::Parallel && phase.len() > 1;
        // the buffers are reused: the searches simulate phases millions of times
        let mut guard = SCRATCH.with(|s| s.take());
        let PhaseScratch { factors, used, users, duration, .. } = &mut guard;
        if parallel {
            self.factors_into(assign, phase, factors, used, users);
        }
        let mut energy = 0.0;
        duration.clear();
        for &c in phase.iter().flatten() {
            let j = assign[c];
            let Some(w) = self.w[c][j] else {
                SCRATCH.with(|s| s.replace(guard));
                return None;
            };
            let (i, o) = self.transfers(assign, c);
            let f = if parallel { factors[duration.len()] } else { 1.0 };
            let s = match eff {
                Some(e) => w - e[c],
                None => self.saved(assign, c, schedule),
            };
            if let Some(tl) = tl.as_deref_mut() {
                tl.transfer_in[c] = i;
                tl.transfer_out[c] = o;
                tl.factor[c] = f;
                tl.saved[c] = s;
            }
            let dur = i + (w - s) * f + o;
            energy += dur * self.power[c][j];
            duration.push(dur);
        }
        let result = self.schedule_phase(assign, pi, at, parallel, energy, &mut guard, tl);
        SCRATCH.with(|s| s.replace(guard));
        Some(result)
    }

    /// The timing half of [`Problem::run_phase`]: the phase's ops, whose durations are in
    /// `scratch.duration` (branch after branch), one after another or list-scheduled; returns the
    /// phase's end and `energy`.
    #[allow(clippy::too_many_arguments)]
    fn schedule_phase(
        &self,
        assign: &[usize],
        pi: usize,
        at: f64,
        parallel: bool,
        energy: f64,
        scratch: &mut PhaseScratch,
        mut tl: Option<&mut Timeline>,
    ) -> (f64, f64) {
        let phase = &self.phases[pi];
        if !parallel {
            let mut now = at;
            for (&c, &dur) in phase.iter().flatten().zip(scratch.duration.iter()) {
                if let Some(tl) = tl.as_deref_mut() {
                    tl.start[c] = now;
                    tl.finish[c] = now + dur;
                }
                now += dur;
            }
            return (now, energy);
        }
        // list scheduling from the barrier: the branch head that can start first goes first
        // (the lowest branch among equals), once its PU and every PU sharing its hardware are
        // free; where each branch's durations start in `duration`:
        scratch.first.clear();
        scratch.first.extend(phase.iter().scan(0, |acc, ops| {
            let at = *acc;
            *acc += ops.len();
            Some(at)
        }));
        let end = if phase.len() <= Self::SCAN_BRANCHES {
            self.scan_schedule(assign, phase, at, scratch, tl)
        } else {
            self.heap_schedule(assign, phase, at, scratch, tl)
        };
        (end, energy)
    }

    /// [`Problem::schedule_phase`]'s list scheduling for a phase of many branches: per PU the
    /// heads waiting on it; those ready by the time it is free all start then (the lowest branch
    /// first), the rest in order of readiness; O(ops log branches). Returns the phase's end.
    fn heap_schedule(
        &self,
        assign: &[usize],
        phase: &[Vec<usize>],
        at: f64,
        scratch: &mut PhaseScratch,
        mut tl: Option<&mut Timeline>,
    ) -> f64 {
        let k = self.pus();
        let key = |t: f64| Reverse(t.to_bits());
        let PhaseScratch { duration, first, next, pu_free, waiting, ready_by, .. } = scratch;
        next.clear();
        next.resize(phase.len(), 0);
        pu_free.clear();
        pu_free.resize(k, at);
        // (ready, branch) of heads not yet ready when their PU is free; branches ready by then
        waiting.resize_with(k, BinaryHeap::new);
        ready_by.resize_with(k, BinaryHeap::new);
        waiting.iter_mut().for_each(BinaryHeap::clear);
        ready_by.iter_mut().for_each(BinaryHeap::clear);
        for (b, ops) in phase.iter().enumerate() {
            if let Some(&c) = ops.first() {
                waiting[assign[c]].push((key(at), Reverse(b)));
            }
        }
        let mut end = at;
        loop {
            let mut pick: Option<(f64, usize)> = None;
            for j in 0..k {
                let f = self.free_at(pu_free, j, at);
                while let Some(&(Reverse(t), Reverse(b))) = waiting[j].peek() {
                    if f64::from_bits(t) > f {
                        break;
                    }
                    waiting[j].pop();
                    ready_by[j].push(Reverse(b));
                }
                let cand = match ready_by[j].peek() {
                    Some(&Reverse(b)) => Some((f, b)),
                    None => waiting[j].peek().map(|&(Reverse(t), Reverse(b))| (f64::from_bits(t), b)),
                };
                if let Some(c) = cand
                    && pick.is_none_or(|p| c.0.total_cmp(&p.0).then(c.1.cmp(&p.1)).is_lt())
                {
                    pick = Some(c);
                }
            }
            let Some((start, b)) = pick else { break };
            let c = phase[b][next[b]];
            let j = assign[c];
            if ready_by[j].peek() == Some(&Reverse(b)) {
                ready_by[j].pop();
            } else {
                waiting[j].pop();
            }
            let finish = start + duration[first[b] + next[b]];
            if let Some(tl) = tl.as_deref_mut() {
                tl.start[c] = start;
                tl.finish[c] = finish;
            }
            pu_free[j] = finish;
            end = end.max(finish);
            next[b] += 1;
            if let Some(&c2) = phase[b].get(next[b]) {
                waiting[assign[c2]].push((key(finish), Reverse(b)));
            }
        }
        end
    }

    /// When PU `j` is free in a phase that began at `at`: once it and every PU sharing its
    /// hardware have finished (`pu_free` per PU).
    fn free_at(&self, pu_free: &[f64], j: usize, at: f64) -> f64 {
        pu_free.iter().enumerate().filter(|&(o, _)| o == j || self.exclusive[j][o]).map(|(_, &t)| t).fold(at, f64::max)
    }

    /// Phases of at most this many branches are list-scheduled by scanning the branch heads at
    /// every step (O(ops x branches), no heaps), the rest with a heap per PU.
    const SCAN_BRANCHES: usize = 16;

    /// [`Problem::schedule_phase`]'s list scheduling for a phase of few branches: at every step
    /// the head that can start first (once its branch and its PU, and every PU sharing its
    /// hardware, are free) starts, the lowest branch among equals; returns the phase's end. The
    /// same rule as the heaps', so the same timeline.
    fn scan_schedule(
        &self,
        assign: &[usize],
        phase: &[Vec<usize>],
        at: f64,
        scratch: &mut PhaseScratch,
        mut tl: Option<&mut Timeline>,
    ) -> f64 {
        let k = self.pus();
        let PhaseScratch { duration, first, next, pu_free, ready, free, .. } = scratch;
        next.clear();
        next.resize(phase.len(), 0);
        ready.clear();
        ready.resize(phase.len(), at);
        pu_free.clear();
        pu_free.resize(k, at);
        // when each PU is free ([`Problem::free_at`]), kept as ops finish: an op on PU j changes
        // it for j and the PUs sharing j's hardware only
        free.clear();
        free.resize(k, at);
        let shared = self.exclusive.iter().flatten().any(|&x| x);
        let mut end = at;
        loop {
            let mut pick: Option<(f64, usize)> = None;
            for (b, ops) in phase.iter().enumerate() {
                let Some(&c) = ops.get(next[b]) else { continue };
                let f = free[assign[c]];
                let start = if ready[b] > f { ready[b] } else { f };
                if pick.is_none_or(|p| start.total_cmp(&p.0).is_lt()) {
                    pick = Some((start, b));
                }
            }
            let Some((start, b)) = pick else { break };
            let c = phase[b][next[b]];
            let finish = start + duration[first[b] + next[b]];
            if let Some(tl) = tl.as_deref_mut() {
                tl.start[c] = start;
                tl.finish[c] = finish;
            }
            let j = assign[c];
            pu_free[j] = finish;
            if shared {
                for (o, f) in free.iter_mut().enumerate() {
                    if o == j || self.exclusive[o][j] {
                        *f = self.free_at(pu_free, o, at);
                    }
                }
            } else {
                // nothing shares `j`: it is free once its op finishes (never before `at`)
                free[j] = at.max(finish);
            }
            ready[b] = finish;
            end = end.max(finish);
            next[b] += 1;
        }
        end
    }

    /// Simulate `assign` under `schedule`; None if some op sits on a PU that cannot run it.
    pub fn evaluate(&self, assign: &[usize], schedule: Schedule) -> Option<Timeline> {
        let n = self.ops();
        let mut tl = Timeline {
            start: vec![0.0; n],
            finish: vec![0.0; n],
            transfer_in: vec![0.0; n],
            transfer_out: vec![0.0; n],
            factor: vec![1.0; n],
            saved: vec![0.0; n],
            latency_us: 0.0,
            energy_uj: 0.0,
        };
        let eff = if self.segment_cost.is_empty() { None } else { Some(self.effective(assign, schedule)?) };
        let mut now = 0.0;
        for pi in 0..self.phases.len() {
            let (end, energy) = self.run_phase(assign, pi, now, schedule, eff.as_deref(), Some(&mut tl))?;
            now = end;
            tl.energy_uj += energy;
        }
        tl.latency_us = now + self.launch_of(assign.iter().copied());
        Some(tl)
    }

    /// What an inference on `pus` costs the runtime beyond its ops: the largest of their
    /// [`Problem::launch`] (their workers are woken and answer at once). Latency only: the
    /// energy figures are the ops'.
    pub fn launch_of(&self, pus: impl IntoIterator<Item = usize>) -> f64 {
        // nothing to look up where nothing was measured (the virtual SoC; the search's hot path)
        if self.launch.iter().all(|&l| l == 0.0) {
            return 0.0;
        }
        pus.into_iter().map(|j| self.launch.get(j).copied().unwrap_or(0.0)).fold(0.0, f64::max)
    }

    /// The model whole on PU `j`, one op after another: the one rule for "a model on a single
    /// PU" (a plan's baselines and the concurrent serial baseline both read it). No data crosses
    /// PUs, so an accelerator pays H2D only where an op reads a graph input and D2H only where
    /// one writes a graph output. None if PU `j` cannot run some op.
    pub fn whole_on(&self, j: usize) -> Option<Timeline> {
        self.evaluate(&vec![j; self.ops()], Schedule::Sequential)
    }

    /// The contention matrix as the concurrent search reads it: `sf`, with an infinite factor
    /// where two PUs never run at once (`exclusive`).
    pub fn interference(&self) -> Vec<Vec<f64>> {
        self.sf
            .iter()
            .zip(&self.exclusive)
            .map(|(row, ex)| row.iter().zip(ex).map(|(&f, &x)| if x { f64::INFINITY } else { f }).collect())
            .collect()
    }

    /// The objective of one phase run alone (its span, or its energy; infinite if an op sits
    /// where it cannot run). Phases run one after another, so a plan's objective is the sum of
    /// its phases': a move is priced from the phases it touches.
    pub fn phase_objective(&self, assign: &[usize], pi: usize, schedule: Schedule, obj: Objective) -> f64 {
        let eff = if self.segment_cost.is_empty() { None } else { self.effective(assign, schedule) };
        if eff.is_none() && !self.segment_cost.is_empty() {
            return f64::INFINITY;
        }
        match self.run_phase(assign, pi, 0.0, schedule, eff.as_deref(), None) {
            Some((span, energy)) => match obj {
                Objective::Latency => span,
                Objective::Energy => energy,
            },
            None => f64::INFINITY,
        }
    }

    /// The objective of `assign` run sequentially (infinite if an op sits where it cannot run):
    /// the sum of the ops' shares, without building a timeline.
    pub fn sequential_objective(&self, assign: &[usize], obj: Objective) -> f64 {
        if !self.segment_cost.is_empty() {
            return self.full_objective(assign, Schedule::Sequential, obj);
        }
        (0..self.ops()).map(|c| self.contribution(assign, c, Schedule::Sequential, obj)).sum()
    }

    /// [`Problem::sequential_objective`] of every op on PU `j`, read straight from the costs: no
    /// op pays a transfer but from or to the host, and every op but the first saves with the op
    /// before it. The same sums in the same order, so the same figure.
    pub(crate) fn single_objective(&self, j: usize, obj: Objective) -> f64 {
        if !self.segment_cost.is_empty() {
            return self.sequential_objective(&vec![j; self.ops()], obj);
        }
        (0..self.ops())
            .map(|c| {
                let Some(w) = self.w[c][j] else { return f64::INFINITY };
                let accel = self.accelerator[j];
                let i = if accel && self.from_host[c] { self.h2d[c][j] } else { 0.0 };
                let o = if accel && self.to_host[c] { self.d2h[c][j] } else { 0.0 };
                let s = if self.prev[c].is_some() { self.saving[c][j] } else { 0.0 };
                let d = i + w - s + o;
                match obj {
                    Objective::Latency => d,
                    Objective::Energy => d * self.power[c][j],
                }
            })
            .sum()
    }

    /// The objective from a full evaluation (infinite if infeasible).
    fn full_objective(&self, assign: &[usize], schedule: Schedule, obj: Objective) -> f64 {
        self.evaluate(assign, schedule).map_or(f64::INFINITY, |t| t.objective(obj))
    }

    /// One op's share of the objective where it runs alone (a sequential schedule, or a phase of
    /// one branch): its transfers and execution less its saving, as time or energy.
    pub(crate) fn contribution(&self, assign: &[usize], c: usize, schedule: Schedule, obj: Objective) -> f64 {
        let j = assign[c];
        let Some(w) = self.w[c][j] else { return f64::INFINITY };
        let (i, o) = self.transfers(assign, c);
        let d = i + w - self.saved(assign, c, schedule) + o;
        match obj {
            Objective::Latency => d,
            Objective::Energy => d * self.power[c][j],
        }
    }

    /// The largest contention factor (at least 1).
    fn worst_factor(&self) -> f64 {
        self.sf.iter().flatten().copied().filter(|f| f.is_finite()).fold(1.0, f64::max)
    }

    /// How long op `c` runs under `assign` and a parallel schedule with no contention: its
    /// transfers and execution less its saving (infinite where its PU cannot run it). No factor
    /// makes it shorter, unless its saving exceeds its weight: that part is scaled by
    /// `worst_factor`, the largest factor there is.
    fn bare(&self, assign: &[usize], c: usize, worst_factor: f64) -> f64 {
        let Some(w) = self.w[c][assign[c]] else { return f64::INFINITY };
        let (i, o) = self.transfers(assign, c);
        let e = w - self.saved(assign, c, Schedule::Parallel);
        i + if e < 0.0 { e * worst_factor } else { e } + o
    }

    /// The least phase `pi` of several branches can cost under `assign` and a parallel
    /// schedule (see [`Spans`]): its longest branch or busiest PU (with the busiest PU sharing
    /// its hardware), every op at its [`Problem::bare`] duration, or their energy. `loads` is
    /// scratch.
    fn phase_floor(&self, assign: &[usize], pi: usize, obj: Objective, worst_factor: f64, loads: &mut Vec<f64>) -> f64 {
        let k = self.pus();
        loads.clear();
        loads.resize(k, 0.0);
        let (mut longest, mut energy) = (0.0f64, 0.0);
        for ops in &self.phases[pi] {
            let mut sum = 0.0;
            for &x in ops {
                let (d, j) = (self.bare(assign, x, worst_factor), assign[x]);
                sum += d;
                loads[j] += d;
                energy += d * self.power[x][j];
            }
            longest = longest.max(sum);
        }
        match obj {
            Objective::Energy => energy,
            Objective::Latency => longest.max(self.busiest(loads)),
        }
    }

    /// The longest a set of PUs with these loads must take: a PU's load, with the largest load
    /// of a PU sharing its hardware (the two never run at once).
    fn busiest(&self, loads: &[f64]) -> f64 {
        // plain loops: the parallel climb's bounds call this a million times
        let mut busiest = 0.0f64;
        for (j, (&load, shares)) in loads.iter().zip(&self.exclusive).enumerate() {
            let mut beside = 0.0f64;
            for (o, (&other, &shared)) in loads.iter().zip(shares).enumerate() {
                if shared && o != j {
                    beside = beside.max(other);
                }
            }
            busiest = busiest.max(load + beside);
        }
        busiest
    }

    /// An op's neighbours: its producers, its consumers and its neighbours in the order.
    pub(crate) fn neighbours(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        self.preds[c].iter().copied().chain(self.succs[c].iter().copied()).chain(self.prev[c]).chain(self.next[c])
    }

    /// The least share op `c` can have on PU `j`: its cost less the most it can save there, as
    /// time or energy (infinite where `j` cannot run it). Contention and transfers only add.
    pub(crate) fn floor(&self, c: usize, j: usize, obj: Objective) -> f64 {
        let Some(w) = self.w[c][j] else { return f64::INFINITY };
        let d = w - self.saving[c][j];
        match obj {
            Objective::Latency => d,
            Objective::Energy => d * self.power[c][j],
        }
    }

    /// What the PUs of `ops` can change, once each: `share(x)` for every op among the ops and
    /// their producers, consumers and next ops that runs alone (a sequential schedule, or a
    /// phase of one branch), `phase(pi)` for every parallel phase among them.
    fn local_parts(
        &self,
        ops: &[usize],
        schedule: Schedule,
        mut share: impl FnMut(usize),
        mut phase: impl FnMut(usize),
    ) {
        let mut seen: Vec<usize> = Vec::with_capacity(8);
        self.parts_into(ops, &mut seen);
        let mut phases: Vec<usize> = Vec::with_capacity(4);
        for x in seen {
            let pi = self.place[x].0;
            if schedule == Schedule::Parallel && self.phases[pi].len() > 1 {
                if !phases.contains(&pi) {
                    phases.push(pi);
                    phase(pi);
                }
            } else {
                share(x);
            }
        }
    }

    /// The ops whose shares the PUs of `ops` can change, into `out` (cleared first), once each
    /// and in a fixed order: each op, then its producers, consumers and next op.
    fn parts_into(&self, ops: &[usize], out: &mut Vec<usize>) {
        out.clear();
        let mut add = |x: usize| {
            if !out.contains(&x) {
                out.push(x);
            }
        };
        for &c in ops {
            add(c);
            self.preds[c].iter().for_each(|&x| add(x));
            self.succs[c].iter().for_each(|&x| add(x));
            if let Some(x) = self.next[c] {
                add(x);
            }
        }
    }

    /// The part of the objective that the PUs of `ops` can change: the shares of the ops and
    /// their neighbours in sequentially run phases, and the whole of every parallel phase
    /// involved.
    pub(crate) fn local_objective(&self, assign: &[usize], ops: &[usize], schedule: Schedule, obj: Objective) -> f64 {
        if !self.segment_cost.is_empty() {
            return self.local_measured(assign, ops, schedule, obj);
        }
        let (mut shares, mut spans) = (0.0, 0.0);
        self.local_parts(
            ops,
            schedule,
            |x| shares += self.contribution(assign, x, schedule, obj),
            |pi| spans += self.phase_objective(assign, pi, schedule, obj),
        );
        shares + spans
    }

    /// The part of the objective op `c`'s PU can change (as [`Problem::local_objective`] for one
    /// op, without allocating: in a DAG an op's predecessors and successors are distinct).
    fn local_single(&self, assign: &[usize], c: usize, schedule: Schedule, obj: Objective) -> f64 {
        if !self.segment_cost.is_empty() {
            return self.local_measured(assign, &[c], schedule, obj);
        }
        let parallel = |x: usize| schedule == Schedule::Parallel && self.phases[self.place[x].0].len() > 1;
        let mut total = 0.0;
        let mut phases = [usize::MAX; 8];
        let mut n_phases = 0;
        // the op after c in its branch, unless it is also a consumer (counted once)
        let next = self.next[c].filter(|x| !self.succs[c].contains(x));
        for &x in std::iter::once(&c).chain(&self.preds[c]).chain(&self.succs[c]).chain(&next) {
            if !parallel(x) {
                total += self.contribution(assign, x, schedule, obj);
                continue;
            }
            let pi = self.place[x].0;
            if phases[..n_phases].contains(&pi) {
                continue;
            }
            if n_phases == phases.len() {
                // unusually many parallel phases around one op: take the general path
                return self.local_objective(assign, &[c], schedule, obj);
            }
            phases[n_phases] = pi;
            n_phases += 1;
        }
        total + phases[..n_phases].iter().map(|&pi| self.phase_objective(assign, pi, schedule, obj)).sum::<f64>()
    }

    /// [`Problem::local_objective`] where runs were measured whole ([`MeasuredRuns`]). There an
    /// op's cost reads its whole run, so moving `ops` can change the cost of every op of the runs
    /// around them: from each moved op back to the nearest run boundary no moved op touches (its
    /// ops and the op before it stay where they are and stay apart) and on to the next one, a
    /// stretch whose runs may split or merge but whose ends stay put ([`Stretches`]). The part of
    /// the objective made by those stretches' runs, the moved ops' producers and consumers (their
    /// transfers) and every parallel phase among them, and the launch cost: the change a move
    /// makes is the change a full evaluation finds, for the price of the stretches, not of the
    /// plan.
    fn local_measured(&self, assign: &[usize], ops: &[usize], schedule: Schedule, obj: Objective) -> f64 {
        self.stretches(assign, ops, schedule).price(self, assign, obj)
    }

    /// The stretches a move of `ops` can change ([`Problem::local_measured`]), walked once for
    /// every choice of PUs for them.
    fn stretches<'a>(&self, assign: &[usize], ops: &'a [usize], schedule: Schedule) -> Stretches<'a> {
        let m = &self.segment_cost;
        let order = m.order();
        let n = order.len();
        let seq = schedule == Schedule::Sequential;
        // a move of many ops (a long branch) looks them up in a mask
        let mask = (ops.len() > 16).then(|| {
            let mut mask = vec![false; n];
            ops.iter().for_each(|&c| mask[c] = true);
            mask
        });
        let moved = |x: usize| mask.as_ref().map_or_else(|| ops.contains(&x), |m| m[x]);
        // whether the op at position `k` of the order joins the one before it, and whether the
        // boundary before it is one every choice for `ops` leaves where it is
        let joins = |k: usize| {
            let x = order[k];
            assign[x] == assign[order[k - 1]] && (seq || self.joins_in_parallel[x])
        };
        let fixed = |k: usize| k == 0 || (!joins(k) && !moved(order[k]) && !moved(order[k - 1]));
        let mut pieces = Vec::new();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for &c in ops {
            let at = m.position(c);
            if spans.iter().any(|&(from, to)| (from..to).contains(&at)) {
                continue;
            }
            let mut start = at;
            while !fixed(start) {
                start -= 1;
            }
            let mut k = start;
            loop {
                let from = k;
                k += 1;
                if !moved(order[from]) {
                    // the ops that stay, as far as they run together
                    while k < n && !moved(order[k]) && joins(k) {
                        k += 1;
                    }
                }
                pieces.push(Some((from, k)));
                if k == n || fixed(k) {
                    break;
                }
            }
            pieces.push(None);
            spans.push((start, k));
        }
        // the PUs the ops that stay use, for the launch cost (where one was measured)
        let mut used = vec![];
        if self.launch.iter().any(|&l| l != 0.0) {
            used = vec![0usize; self.pus()];
            match &mask {
                Some(m) => (0..n).filter(|&c| !m[c]).for_each(|c| used[assign[c]] += 1),
                None => {
                    assign.iter().for_each(|&j| used[j] += 1);
                    // each moved op once
                    let first = |i: usize| !ops[..i].contains(&ops[i]);
                    (0..ops.len()).filter(|&i| first(i)).for_each(|i| used[assign[ops[i]]] -= 1);
                }
            }
        }
        Stretches { ops, schedule, pieces, used }
    }

    /// Prices the runs of `ops` (neighbours in the order, the first starting a run: the whole
    /// order, or a branch of a parallel phase under a parallel schedule) into `eff`, each op at
    /// its cost in its run ([`Problem::effective`]); false if an op sits where it cannot run.
    fn price_runs(&self, assign: &[usize], schedule: Schedule, ops: &[usize], eff: &mut [f64]) -> bool {
        let mut k = 0;
        while k < ops.len() {
            let mut end = k + 1;
            while end < ops.len() && self.joins(assign, ops[end], schedule) {
                end += 1;
            }
            let (run, pu) = (&ops[k..end], assign[ops[k]]);
            for &c in run {
                let Some(w) = self.w[c][pu] else { return false };
                eff[c] = w - self.saved(assign, c, schedule);
            }
            self.segment_cost.price(run, pu, eff);
            k = end;
        }
        true
    }

    /// Move op `c` to the PU that most lowers the objective; true if it moved. Where `cache` is
    /// given (a parallel climb's), the price before comes from its kept spans and a move is
    /// priced only where its bound says it might win ([`Spans::price`]).
    fn best_single_move(
        &self,
        assign: &mut [usize],
        c: usize,
        schedule: Schedule,
        obj: Objective,
        cache: Option<&Spans>,
    ) -> bool {
        let cur = assign[c];
        // where runs were measured whole, the stretches around `c` are walked once for every PU
        let one = [c];
        let stretches = (!self.segment_cost.is_empty()).then(|| self.stretches(assign, &one, schedule));
        let local = |assign: &[usize]| match &stretches {
            Some(st) => st.price(self, assign, obj),
            None => self.local_single(assign, c, schedule, obj),
        };
        let before = match cache {
            Some(s) => s.prepare(self, assign, &[c], obj),
            None => local(assign),
        };
        let tolerance = 1e-9 * before.abs().max(1.0);
        let mut best = (0.0, cur);
        for j in (0..self.pus()).filter(|&j| j != cur && self.w[c][j].is_some()) {
            assign[c] = j;
            let after = match cache {
                Some(s) => s.price(self, assign, obj, before + best.0 - tolerance),
                None => Some(local(assign)),
            };
            let Some(after) = after else { continue };
            let delta = after - before;
            if delta < best.0 - tolerance {
                best = (delta, j);
            }
        }
        assign[c] = best.1;
        best.1 != cur
    }

    /// Move `ops` to the PU among `choices` that most lowers the objective (each choice gives
    /// every op's new PU); true if they moved. Where `cache` is given (a parallel climb's), the
    /// price before comes from its kept spans and a choice is priced only where its bound says
    /// it might win ([`Spans::price`]).
    fn best_move(
        &self,
        assign: &mut [usize],
        ops: &[usize],
        choices: &[Vec<usize>],
        (schedule, obj): (Schedule, Objective),
        cache: Option<&Spans>,
    ) -> bool {
        // where the ops are now (on the stack for the moves of a few ops, as most are)
        let mut few = [0usize; 16];
        let many: Vec<usize>;
        let current: &[usize] = if ops.len() <= few.len() {
            ops.iter().zip(&mut few).for_each(|(&c, j)| *j = assign[c]);
            &few[..ops.len()]
        } else {
            many = ops.iter().map(|&c| assign[c]).collect();
            &many
        };
        let stretches = (!self.segment_cost.is_empty()).then(|| self.stretches(assign, ops, schedule));
        let local = |assign: &[usize]| match &stretches {
            Some(st) => st.price(self, assign, obj),
            None => self.local_objective(assign, ops, schedule, obj),
        };
        let before = match cache {
            Some(s) => s.prepare(self, assign, ops, obj),
            None => local(assign),
        };
        let tolerance = 1e-9 * before.abs().max(1.0);
        let mut best: Option<(f64, &[usize])> = None;
        for choice in choices {
            if choice[..] == *current || ops.iter().zip(choice).any(|(&c, &j)| self.w[c][j].is_none()) {
                continue;
            }
            ops.iter().zip(choice).for_each(|(&c, &j)| assign[c] = j);
            let threshold = before + best.map_or(0.0, |b| b.0) - tolerance;
            let after = match cache {
                Some(s) => s.price(self, assign, obj, threshold),
                None => Some(local(assign)),
            };
            let Some(after) = after else { continue };
            let delta = after - before;
            if delta < best.map_or(0.0, |b| b.0) - tolerance {
                best = Some((delta, choice));
            }
        }
        let chosen = best.map_or(current, |b| b.1);
        ops.iter().zip(chosen).for_each(|(&c, &j)| assign[c] = j);
        best.is_some()
    }

    /// Under a parallel schedule, phases of several branches with at most this many assignments
    /// (of their ops to PUs that can run them) are solved exactly: 3^10, so a phase of ten ops
    /// on three PUs (ViT's Q/K/V branches) is. Each assignment costs one local evaluation of the
    /// phase and its neighbours, a few microseconds.
    pub const EXACT_PHASE_LIMIT: usize = 59_049;

    /// The limit under a sequential schedule (there a phase's ops add up, and the DP and block
    /// moves see most of it), and where measured runs make every local evaluation price the
    /// runs around the phase, which can be as long as the plan ([`Problem::local_measured`]).
    const EXACT_PHASE_LIMIT_SMALL: usize = 4096;

    /// Solve a phase of several branches exactly (every assignment of its ops, the rest fixed)
    /// when it is small enough; true if its ops moved.
    fn exact_phase(&self, assign: &mut [usize], pi: usize, schedule: Schedule, obj: Objective) -> bool {
        let phase = &self.phases[pi];
        if phase.len() < 2 {
            return false;
        }
        let limit = if schedule == Schedule::Parallel && self.segment_cost.is_empty() {
            Self::EXACT_PHASE_LIMIT
        } else {
            Self::EXACT_PHASE_LIMIT_SMALL
        };
        // counted before anything is gathered: most phases of a large graph are over the limit
        let count = phase.iter().flatten().try_fold(1usize, |acc, &c| {
            acc.checked_mul(self.w[c].iter().filter(|w| w.is_some()).count()).filter(|&n| n <= limit)
        });
        if count.is_none() {
            return false;
        }
        let ops: Vec<usize> = phase.iter().flatten().copied().collect();
        let options: Vec<Vec<usize>> =
            ops.iter().map(|&c| (0..self.pus()).filter(|&j| self.w[c][j].is_some()).collect()).collect();
        let current: Vec<usize> = ops.iter().map(|&c| assign[c]).collect();
        let stretches = (!self.segment_cost.is_empty()).then(|| self.stretches(assign, &ops, schedule));
        let local = |assign: &[usize]| match &stretches {
            Some(st) => st.price(self, assign, obj),
            None => self.local_objective(assign, &ops, schedule, obj),
        };
        let before = local(assign);
        let tolerance = 1e-9 * before.abs().max(1.0);
        let mut best: Option<(f64, Vec<usize>)> = None;
        if schedule == Schedule::Parallel && self.segment_cost.is_empty() {
            // the same assignments in the same order, but whole subtrees that cannot win are skipped
            let mut search = Bounded::new(self, assign, pi, &ops, &options, obj);
            // the ops with one option are on it (the rest of the search moves the others)
            for (i, &c) in ops.iter().enumerate().filter(|&(i, _)| options[i].len() == 1) {
                search.take(assign, i, c, 0);
            }
            let depth = search.movable.len();
            search.run(assign, depth, &current, before, tolerance, &mut best);
            let chosen = best.as_ref().map_or(&current, |b| &b.1);
            ops.iter().zip(chosen).for_each(|(&c, &j)| assign[c] = j);
            return best.is_some();
        }
        // an odometer over each op's options, without materialising the assignments
        let mut digit = vec![0usize; ops.len()];
        loop {
            for ((&c, o), &d) in ops.iter().zip(&options).zip(&digit) {
                assign[c] = o[d];
            }
            if ops.iter().zip(&current).any(|(&c, &j)| assign[c] != j) {
                let delta = local(assign) - before;
                if delta < best.as_ref().map_or(0.0, |b| b.0) - tolerance {
                    best = Some((delta, ops.iter().map(|&c| assign[c]).collect()));
                }
            }
            let Some(i) = (0..ops.len()).find(|&i| digit[i] + 1 < options[i].len()) else { break };
            digit[i] += 1;
            digit[..i].iter_mut().for_each(|d| *d = 0);
        }
        let chosen = best.as_ref().map_or(&current, |b| &b.1);
        ops.iter().zip(chosen).for_each(|(&c, &j)| assign[c] = j);
        best.is_some()
    }

    /// Longest run of neighbours in the execution order that `Problem::block_moves` moves.
    pub const MAX_BLOCK: usize = 4;

    /// One pass of block moves: every run of 2..=[`Problem::MAX_BLOCK`] neighbours in the
    /// execution order, starting at a position of `starts` (ascending; every position where
    /// None), that `wanted` (given its position in the order) asks for goes, as a
    /// whole, to the PU that most lowers the objective. A single move cannot leave a run
    /// compiled together, or a group that shares its transfers, without losing the saving on
    /// both sides first; the run together can. Calls `moved` with every run that moved (which
    /// may make more ops hot); returns how many did.
    #[allow(clippy::too_many_arguments)]
    fn block_moves(
        &self,
        assign: &mut [usize],
        order: &[usize],
        starts: Option<&[usize]>,
        wanted: &mut dyn FnMut(usize, &[usize]) -> bool,
        schedule: Schedule,
        obj: Objective,
        mut slack: Option<&mut Slack>,
        cache: Option<&Spans>,
        moved: &mut dyn FnMut(&[usize]),
    ) -> usize {
        let choices: Vec<Vec<Vec<usize>>> =
            (0..=Self::MAX_BLOCK).map(|len| (0..self.pus()).map(|j| vec![j; len]).collect()).collect();
        let mut count = 0;
        let every: Box<dyn Iterator<Item = usize>> = match starts {
            Some(starts) => Box::new(starts.iter().copied()),
            None => Box::new(0..order.len()),
        };
        for k in every {
            for len in 2..=Self::MAX_BLOCK.min(order.len() - k) {
                let run = &order[k..k + len];
                if (schedule == Schedule::Parallel && !self.held_together(run)) || !wanted(k, run) {
                    continue;
                }
                let better = match slack.as_mut() {
                    Some(s) => s.may_improve(self, assign, run) && s.best_move(self, assign, run),
                    None => self.best_move(assign, run, &choices[len], (schedule, obj), cache),
                };
                if better {
                    count += 1;
                    moved(run);
                }
            }
        }
        count
    }

    /// Whether a run of neighbours in the order is one a parallel schedule keeps together: each
    /// op joins the one before it (same branch, or phases of one branch) or reads it. Two
    /// branches' ops are never compiled together there, and moving them as one is the branch
    /// moves' work.
    fn held_together(&self, run: &[usize]) -> bool {
        run.windows(2).all(|w| self.joins_in_parallel[w[1]] || self.succs[w[0]].contains(&w[1]))
    }

    /// Sequential hill climbing on a worklist: small phases of several branches solved exactly,
    /// then single-op moves, then block moves; every move queues the ops within two links of it
    /// again. The worklist starts with every op, or, from the optimum of the DP on the phased
    /// order ([`Problem::sequential_dp`]), with the ops it marks `inexact` and their neighbours:
    /// elsewhere the DP priced each op as the evaluator does, so a move of ops whose shares it
    /// priced so cannot beat its optimum.
    pub(crate) fn climb_sequential(&self, assign: &mut [usize], obj: Objective, inexact: Option<&[bool]>) -> usize {
        let order: Vec<usize> = self.order().collect();
        let n = order.len();
        let mut queued = vec![false; n];
        // ops queued since the last pass of block moves: only runs holding one are tried (from
        // the DP's optimum, a run whose ops and neighbours it priced exactly cannot improve
        // on it: there its figure is the evaluator's, which it minimised)
        let mut hot = vec![false; n];
        let mut queue = std::collections::VecDeque::new();
        let nbrs = |x: usize| self.neighbours(x);
        // queue every op within two links of `c`: a move's price reads the shares of the op and
        // its neighbours, and each share reads that op's neighbours' PUs (transfers, savings), so
        // those are exactly the ops whose best move a move of `c` can change
        let around =
            |c: usize, queue: &mut std::collections::VecDeque<usize>, queued: &mut [bool], hot: &mut [bool]| {
                let mut touch = |x: usize| {
                    hot[x] = true;
                    if !queued[x] {
                        queued[x] = true;
                        queue.push_back(x);
                    }
                };
                touch(c);
                for x in nbrs(c) {
                    touch(x);
                    nbrs(x).for_each(&mut touch);
                }
            };
        // where every op's share is its own (no measured runs), most moves are ruled out
        // without pricing them
        let mut slack = self.segment_cost.is_empty().then(|| Slack::new(self, obj));
        let mut start = vec![inexact.is_none(); n];
        for c in order.iter().copied().filter(|&c| inexact.is_some_and(|x| x[c])) {
            start[c] = true;
            nbrs(c).for_each(|x| start[x] = true);
        }
        for &c in order.iter().filter(|&&c| start[c]) {
            hot[c] = true;
            queued[c] = true;
            queue.push_back(c);
        }
        let mut moves = 0;
        // from the DP, a phase none of whose ops starts the worklist is already the best for
        // the rest as it is (there the DP priced as the evaluator does)
        let phases = (0..self.phases.len())
            .filter(|&pi| inexact.is_none() || self.phases[pi].iter().flatten().any(|&c| start[c]));
        for pi in phases {
            if self.exact_phase(assign, pi, Schedule::Sequential, obj) {
                moves += 1;
                if let Some(s) = slack.as_mut() {
                    s.refresh(self, &self.phases[pi].concat());
                }
                for &c in self.phases[pi].iter().flatten() {
                    around(c, &mut queue, &mut queued, &mut hot);
                }
            }
        }
        // every move strictly lowers the objective, so this ends; the cap guards against float noise
        let cap = 20 * n;
        loop {
            while let Some(c) = queue.pop_front() {
                queued[c] = false;
                let better = match slack.as_mut() {
                    Some(s) => s.may_improve(self, assign, &[c]) && s.best_move(self, assign, &[c]),
                    None => self.best_single_move(assign, c, Schedule::Sequential, obj, None),
                };
                if better {
                    moves += 1;
                    if moves > cap {
                        return moves;
                    }
                    around(c, &mut queue, &mut queued, &mut hot);
                }
            }
            // no single move helps: try runs of neighbours, and single moves again around any
            // that moved
            let was_hot = std::mem::replace(&mut hot, vec![false; n]);
            // the runs that hold a hot op start at most `MAX_BLOCK - 1` before it
            let mut near_hot = vec![false; n];
            for (at, _) in order.iter().enumerate().filter(|&(_, &c)| was_hot[c]) {
                near_hot[at.saturating_sub(Self::MAX_BLOCK - 1)..=at].fill(true);
            }
            let starts: Vec<usize> = (0..n).filter(|&at| near_hot[at]).collect();
            let blocks = self.block_moves(
                assign,
                &order,
                Some(&starts),
                &mut |_, run| run.iter().any(|&c| was_hot[c]),
                Schedule::Sequential,
                obj,
                slack.as_mut(),
                None,
                &mut |run| run.iter().for_each(|&c| around(c, &mut queue, &mut queued, &mut hot)),
            );
            moves += blocks;
            if moves > cap {
                return moves;
            }
            if blocks == 0 && self.segment_cost.is_empty() {
                // every op a move could have made movable was queued (`around`): a local optimum
                return moves;
            }
            if blocks == 0 {
                // a run measured whole prices its ops from the whole run, which reaches past two
                // links: one sweep of every op and every run confirms the local optimum, or
                // starts the climb again where it is not
                for &c in &order {
                    if self.best_single_move(assign, c, Schedule::Sequential, obj, None) {
                        moves += 1;
                        around(c, &mut queue, &mut queued, &mut hot);
                    }
                }
                if queue.is_empty() {
                    let blocks = self.block_moves(
                        assign,
                        &order,
                        None,
                        &mut |_, _| true,
                        Schedule::Sequential,
                        obj,
                        None,
                        None,
                        &mut |run| run.iter().for_each(|&c| around(c, &mut queue, &mut queued, &mut hot)),
                    );
                    moves += blocks;
                    if blocks == 0 || moves > cap {
                        return moves;
                    }
                }
            }
        }
    }

    /// Hill climbing under the evaluator: each op in turn goes to the PU that most lowers the
    /// objective, then each run of 2..=[`Problem::MAX_BLOCK`] neighbours in the execution order
    /// as a whole; small phases of several branches are first solved exactly, and under a
    /// parallel schedule each branch of a parallel phase may also move to one PU as a whole
    /// (single moves cannot swap two branches' PUs). Until nothing moves. Every move strictly
    /// lowers the objective, so the plan never gets worse. Returns the moves made.
    pub fn improve(&self, assign: &mut [usize], schedule: Schedule, obj: Objective) -> usize {
        if schedule == Schedule::Sequential {
            // no parallel phase to price: no memo to build
            return self.climb_sequential(assign, obj, None);
        }
        self.improve_with(assign, schedule, obj, true, false, &PhaseMemo::new(self))
    }

    /// [`Problem::improve`] under a parallel schedule from the DP's optimum on each branch, or
    /// from a sequential local optimum (where no single or block move helps, as
    /// [`crate::sequential_mapping`] leaves it), with the same moves. There a move is priced as
    /// the DP or the sequential climb priced it unless an op among its parts is one of
    /// `Problem::priced_otherwise`, so the first pass tries only the ops within two links of
    /// those, and of the moves made during it.
    pub fn improve_parallel_from_dp(&self, assign: &mut [usize], obj: Objective) -> usize {
        self.improve_parallel_with(assign, obj, &PhaseMemo::new(self))
    }

    /// [`Problem::improve_parallel_from_dp`] with phases' prices kept in `memo` (which climbs
    /// of one problem may share).
    pub(crate) fn improve_parallel_with(&self, assign: &mut [usize], obj: Objective, memo: &PhaseMemo) -> usize {
        self.improve_with(assign, Schedule::Parallel, obj, true, true, memo)
    }

    /// Per op, whether a parallel climb from a DP's optimum ([`Problem::improve_parallel_from_dp`])
    /// may price its moves otherwise than the DP or a sequential climb did: ops within two links
    /// of an op that runs in a phase of several branches, cannot join its predecessor under a
    /// parallel schedule, is the first or last of its branch (the branch's DP priced its
    /// transfers from and to the host), or whose producers, consumers, graph inputs or outputs
    /// are not its neighbours' in the order (eq. 1 prices those by the order).
    pub(crate) fn priced_otherwise(&self) -> Vec<bool> {
        let mut out = vec![false; self.ops()];
        for phase in &self.phases {
            for b in phase {
                for (k, &c) in b.iter().enumerate() {
                    let chained = self.preds[c].iter().copied().eq(self.prev[c])
                        && self.succs[c].iter().copied().eq(self.next[c])
                        && !self.from_host[c]
                        && !self.to_host[c];
                    let joins = self.prev[c].is_none() || self.joins_in_parallel[c];
                    if phase.len() > 1 || k == 0 || k + 1 == b.len() || !chained || !joins {
                        out[c] = true;
                        for x in self.neighbours(c) {
                            out[x] = true;
                            self.neighbours(x).for_each(|y| out[y] = true);
                        }
                    }
                }
            }
        }
        out
    }

    /// [`Problem::improve`] under a parallel schedule; `keep`: whether the climb keeps its phases' spans and
    /// bounds ([`Spans`]) between moves, and skips the trials no move since can have changed,
    /// which must change nothing but the time it takes;
    /// `from_dp`: [`Problem::improve_parallel_from_dp`]'s first pass (with the same moves).
    fn improve_with(
        &self,
        assign: &mut [usize],
        schedule: Schedule,
        obj: Objective,
        keep: bool,
        from_dp: bool,
        memo: &PhaseMemo,
    ) -> usize {
        /// Graphs from this many ops report the climb's passes.
        const PROGRESS_FROM: usize = 1000;
        debug_assert_eq!(schedule, Schedule::Parallel, "a sequential climb is `climb_sequential`'s");
        const MAX_PASSES: usize = 20;
        let k = self.pus();
        let order: Vec<usize> = self.order().collect();
        // wide phases are climbed with moves priced locally (`wide`); their ops are left out of
        // the moves below, each of which would simulate the whole phase again
        let wide: Vec<bool> = (0..self.phases.len()).map(|pi| self.is_wide(pi)).collect();
        let in_wide = |c: usize| wide[self.place[c].0];
        let branches: Vec<&Vec<usize>> = self
            .phases
            .iter()
            .enumerate()
            .filter(|(pi, ph)| ph.len() > 1 && !wide[*pi])
            .flat_map(|(_, ph)| ph)
            .collect();
        // large exact phases are the costly part: a phase is solved again only when an op it
        // depends on moved. Its local objective reads its ops, their producers, consumers and
        // order neighbours, theirs in turn (their transfers and savings), and whole parallel
        // phases among them: all within two links (dataflow or order) between phases
        let np = self.phases.len();
        let mut linked: Vec<Vec<usize>> = vec![vec![]; np];
        for c in 0..self.ops() {
            let near = self.preds[c].iter().chain(&self.succs[c]).chain(&self.prev[c]).chain(&self.next[c]);
            for &x in near {
                let (a, b) = (self.place[c].0, self.place[x].0);
                if a != b && !linked[a].contains(&b) {
                    linked[a].push(b);
                }
            }
        }
        let mut dirty = vec![true; np];
        // where measured runs make an op's price depend on its whole run, every op is tried in
        // every pass
        let local = self.segment_cost.is_empty();
        // from a DP's optimum, the first pass tries the ops priced otherwise there, and those a
        // move during it brings within two links: in effect every op, with the same moves
        let narrowed = from_dp && local;
        // the ops whose moves a move since the pass began may have changed the price of (every
        // op at first): the next pass tries those only
        let mut hot = if narrowed { self.priced_otherwise() } else { vec![true; self.ops()] };
        let nbrs = |x: usize| self.neighbours(x);
        let parallel_phase = |pi: usize| self.phases[pi].len() > 1;
        // a move of `c` changes the shares of `c` and its neighbours and the spans of the parallel
        // phases among them; a price reads the shares of an op and its neighbours and the spans
        // of the parallel phases among them, and a share reads its op's neighbours, a span its
        // phase's ops and their neighbours: so the ops within two links of `c`, and those of
        // each such phase and their neighbours
        // (the phases are marked `touched` and their ops made hot once per pass, before it tries
        // its ops)
        let mut touched = vec![false; np];
        // the spans and bounds of the phases at the current assignment, for the prices before
        // moves and to rule out moves without simulating them (where measured runs make an op's
        // price read its whole run, none are kept)
        let spans = Spans::new(self, memo);
        let cache = (keep && self.segment_cost.is_empty()).then_some(&spans);
        // a trial (a single, branch or block move tried) made since the last move that can
        // change its price found nothing then and would find nothing now, so it is skipped:
        // `clock` counts moves, `moved_near` keeps per op the last move within two links of it,
        // `phase_moved` per parallel phase the last move among its ops and their neighbours
        // (that changes its span, which its ops' and their neighbours' prices read). Only where
        // prices are local and kept, so that the climb without them checks the same moves.
        let skip = keep && local;
        let clock = Cell::new(1usize);
        let moved_near = vec![Cell::new(1usize); self.ops()];
        let phase_moved = vec![Cell::new(0usize); np];
        let due = |x: usize, tried_at: usize| {
            let moved_since = |pi: usize| phase_moved[pi].get() > tried_at;
            !skip
                || moved_near[x].get() > tried_at
                || moved_since(self.place[x].0)
                || nbrs(x).any(|y| moved_since(self.place[y].0))
        };
        let mut single_tried = vec![0usize; self.ops()];
        let mut branch_tried = vec![0usize; branches.len()];
        let mut block_tried = vec![0usize; order.len() * (Self::MAX_BLOCK + 1)];
        let mark = |c: usize, dirty: &mut [bool], hot: &mut [bool], touched: &mut [bool]| {
            clock.set(clock.get() + 1);
            let now = clock.get();
            // a phase's span reads its ops' PUs and those of their producers, consumers and
            // previous ops
            spans.forget(self, c);
            let q = self.place[c].0;
            dirty[q] = true;
            for &q1 in &linked[q] {
                dirty[q1] = true;
                linked[q1].iter().for_each(|&q2| dirty[q2] = true);
            }
            hot[c] = true;
            moved_near[c].set(now);
            for x in nbrs(c) {
                hot[x] = true;
                moved_near[x].set(now);
                nbrs(x).for_each(|y| {
                    hot[y] = true;
                    moved_near[y].set(now);
                });
            }
            for x in std::iter::once(c).chain(nbrs(c)) {
                let pi = self.place[x].0;
                if parallel_phase(pi) {
                    touched[pi] = true;
                    phase_moved[pi].set(now);
                }
            }
        };
        let mut moves = 0;
        // graphs large enough to take a while report each pass
        let report = self.ops() >= PROGRESS_FROM;
        let total = np + order.len();
        for pass in 0..MAX_PASSES {
            let what = format!("hill climbing, pass {} (at most {MAX_PASSES})", pass + 1);
            let mut moved = 0;
            for pi in 0..np {
                if report && pi % 64 == 0 {
                    self.progress.report(&what, pi, total);
                }
                if std::mem::take(&mut dirty[pi]) && self.exact_phase(assign, pi, schedule, obj) {
                    moved += 1;
                    self.phases[pi].iter().flatten().for_each(|&c| mark(c, &mut dirty, &mut hot, &mut touched));
                    // optimal for the rest as it is now
                    dirty[pi] = false;
                } else if wide[pi] && self.climb_wide(assign, pi, obj) > 0 {
                    moved += 1;
                    self.phases[pi].iter().flatten().for_each(|&c| mark(c, &mut dirty, &mut hot, &mut touched));
                    dirty[pi] = false;
                }
            }
            // the ops to try this pass; moves from here on mark the next pass's
            for pi in (0..np).filter(|&pi| std::mem::take(&mut touched[pi])) {
                for &o in self.phases[pi].iter().flatten() {
                    hot[o] = true;
                    nbrs(o).for_each(|y| hot[y] = true);
                }
            }
            let mut was_hot = std::mem::replace(&mut hot, vec![!local; self.ops()]);
            was_hot.iter_mut().enumerate().for_each(|(c, h)| *h &= !in_wide(c));
            let trying = Cell::from_mut(&mut was_hot[..]).as_slice_of_cells();
            // the narrowed first pass also tries, later in it, the ops a move brings within two
            // links (as the pass of every op would)
            let widen = |c: usize| {
                if narrowed && pass == 0 {
                    let mut try_too = |x: usize| trying[x].set(trying[x].get() || !in_wide(x));
                    try_too(c);
                    for x in nbrs(c) {
                        try_too(x);
                        nbrs(x).for_each(&mut try_too);
                    }
                }
            };
            for (i, &c) in order.iter().enumerate() {
                if !trying[c].get() || !due(c, single_tried[c]) {
                    continue;
                }
                if report && i % 256 == 0 {
                    self.progress.report(&what, np + i, total);
                }
                single_tried[c] = clock.get();
                if self.best_single_move(assign, c, schedule, obj, cache) {
                    moved += 1;
                    mark(c, &mut dirty, &mut hot, &mut touched);
                    widen(c);
                }
            }
            if report {
                self.progress.report(&what, total, total);
            }
            for (bi, b) in branches.iter().enumerate() {
                if !b.iter().any(|&c| trying[c].get()) || !b.iter().any(|&c| due(c, branch_tried[bi])) {
                    continue;
                }
                branch_tried[bi] = clock.get();
                let choices: Vec<Vec<usize>> = (0..k).map(|j| vec![j; b.len()]).collect();
                if self.best_move(assign, b, &choices, (schedule, obj), cache) {
                    moved += 1;
                    b.iter().for_each(|&c| {
                        mark(c, &mut dirty, &mut hot, &mut touched);
                        widen(c);
                    });
                }
            }
            // runs wholly inside a wide phase are its climb's (no op of one is hot)
            let mut wanted = |at: usize, run: &[usize]| {
                let slot = &mut block_tried[at * (Self::MAX_BLOCK + 1) + run.len()];
                let go = run.iter().any(|&c| trying[c].get()) && run.iter().any(|&c| due(c, *slot));
                if go {
                    *slot = clock.get();
                }
                go
            };
            moved += self.block_moves(assign, &order, None, &mut wanted, schedule, obj, None, cache, &mut |run| {
                run.iter().for_each(|&c| {
                    mark(c, &mut dirty, &mut hot, &mut touched);
                    widen(c);
                })
            });
            moves += moved;
            if moved == 0 {
                break;
            }
        }
        moves
    }
}

/// Per op, how far its share of a sequential objective is above its floor (its cost less the
/// most it can save on its PU): the transfers it pays and the saving it misses. Moving `run` to
/// PU `j` changes only the shares of `run` and its neighbours, so it lowers the objective by at
/// most their excess less what the floors of `run` rise: a move that cannot win is ruled out
/// without pricing it. Valid while every op's share is its own (no measured runs).
pub(crate) struct Slack {
    /// Per op, its share of the objective ([`Problem::contribution`]) under the current
    /// assignment: a move's price before it.
    share: Vec<f64>,
    excess: Vec<f64>,
    /// Per op, the most its floor falls on another PU.
    gain: Vec<f64>,
    /// Per op, whether its share, excess and gain hold at the current assignment (each is
    /// worked out when first read: a climb from the DP reads few).
    known: Vec<bool>,
    /// Per op, the excess of its neighbours (an op counted once per link), and `near_on[c * pus
    /// + j]` the part of it on PU `j`; and whether they hold.
    near: Vec<f64>,
    near_on: Vec<f64>,
    near_known: Vec<bool>,
    /// `floor[c * pus + j]`: [`Problem::floor`], kept flat; per op whether its row is there.
    floor: Vec<f64>,
    floor_known: Vec<bool>,
    obj: Objective,
    /// Scratch: the ops whose shares a move can change ([`Slack::best_move`]).
    parts: Vec<usize>,
}

impl Slack {
    fn new(p: &Problem, obj: Objective) -> Self {
        let (n, k) = (p.ops(), p.pus());
        Slack {
            share: vec![0.0; n],
            excess: vec![0.0; n],
            gain: vec![0.0; n],
            known: vec![false; n],
            near: vec![0.0; n],
            near_on: vec![0.0; n * k],
            near_known: vec![false; n],
            floor: vec![0.0; n * k],
            floor_known: vec![false; n],
            obj,
            parts: Vec::with_capacity(16),
        }
    }

    /// Op `c`'s floor on PU `j`.
    fn floor(&mut self, p: &Problem, c: usize, j: usize) -> f64 {
        let k = p.pus();
        if !self.floor_known[c] {
            for (j, f) in self.floor[c * k..(c + 1) * k].iter_mut().enumerate() {
                *f = p.floor(c, j, self.obj);
            }
            self.floor_known[c] = true;
        }
        self.floor[c * k + j]
    }

    /// Op `c`'s share, excess over its floor and gain, from `assign`, where not known.
    fn op(&mut self, p: &Problem, assign: &[usize], c: usize) {
        if self.known[c] {
            return;
        }
        self.share[c] = p.contribution(assign, c, Schedule::Sequential, self.obj);
        let at = self.floor(p, c, assign[c]);
        self.excess[c] = (self.share[c] - at).max(0.0);
        self.gain[c] = (0..p.pus()).map(|j| at - self.floor(p, c, j)).fold(0.0, f64::max);
        self.known[c] = true;
    }

    fn excess(&mut self, p: &Problem, assign: &[usize], c: usize) -> f64 {
        self.op(p, assign, c);
        self.excess[c]
    }

    /// `near` and `near_on` of op `c` from its neighbours' excess, where not known.
    fn near(&mut self, p: &Problem, assign: &[usize], c: usize) {
        if self.near_known[c] {
            return;
        }
        let k = p.pus();
        self.near_on[c * k..(c + 1) * k].fill(0.0);
        for x in p.neighbours(c) {
            let e = self.excess(p, assign, x);
            self.near_on[c * k + assign[x]] += e;
        }
        self.near[c] = self.near_on[c * k..(c + 1) * k].iter().sum();
        self.near_known[c] = true;
    }

    /// The transfers op `c` of `run` pays on PU `j` whatever the rest of `run` does: from and to
    /// the host, and to neighbours outside `run` on other PUs.
    fn forced(&self, p: &Problem, assign: &[usize], run: &[usize], c: usize, j: usize) -> f64 {
        if !p.accelerator[j] {
            return 0.0;
        }
        let apart = |x: &usize| assign[*x] != j && !run.contains(x);
        let into = if p.from_host[c] || p.preds[c].iter().any(apart) { p.h2d[c][j] } else { 0.0 };
        let out = if p.to_host[c] || p.succs[c].iter().any(apart) { p.d2h[c][j] } else { 0.0 };
        match self.obj {
            Objective::Latency => into + out,
            Objective::Energy => (into + out) * p.power[c][j],
        }
    }

    /// Move every op of `run` to the PU that most lowers the sequential objective, as
    /// [`Problem::best_move`] does with one PU for the whole run (the same prices, summed in the
    /// same order, so the same choice), but with the price before taken from the cached shares;
    /// true if it moved, and then the caches follow.
    fn best_move(&mut self, p: &Problem, assign: &mut [usize], run: &[usize]) -> bool {
        // the shares a move of `run` can change, as `Problem::local_parts` sums them
        p.parts_into(run, &mut self.parts);
        let mut before = 0.0;
        for i in 0..self.parts.len() {
            let x = self.parts[i];
            self.op(p, assign, x);
            before += self.share[x];
        }
        let mut current = [0; Problem::MAX_BLOCK];
        let current = &mut current[..run.len()];
        run.iter().zip(current.iter_mut()).for_each(|(&c, j)| *j = assign[c]);
        let mut best: Option<(f64, usize)> = None;
        for j in 0..p.pus() {
            if run.iter().all(|&c| assign[c] == j) || run.iter().any(|&c| p.w[c][j].is_none()) {
                continue;
            }
            run.iter().for_each(|&c| assign[c] = j);
            let mut after = 0.0;
            for &x in &self.parts {
                after += p.contribution(assign, x, Schedule::Sequential, self.obj);
            }
            let delta = after - before;
            if delta < best.map_or(0.0, |b| b.0) - 1e-9 * before.abs().max(1.0) {
                best = Some((delta, j));
            }
            run.iter().zip(current.iter()).for_each(|(&c, &j)| assign[c] = j);
        }
        let Some((_, j)) = best else { return false };
        run.iter().for_each(|&c| assign[c] = j);
        self.refresh(p, run);
        true
    }

    /// Whether moving every op of `run` to one PU might lower the objective (false: no PU can).
    /// On PU `j`, an op of `run` costs at least its floor there and the transfers it cannot
    /// avoid; a neighbour's share falls only where it is on `j` too (it no longer pays a
    /// transfer to `run`, or it joins it).
    fn may_improve(&mut self, p: &Problem, assign: &[usize], run: &[usize]) -> bool {
        let k = p.pus();
        let (mut own, mut gains) = (0.0, false);
        for &c in run {
            own += self.excess(p, assign, c);
            gains |= self.gain[c] > 0.0;
            self.near(p, assign, c);
        }
        // all the excess the move could remove (a neighbour counted twice only weakens it)
        let budget = own + run.iter().map(|&c| self.near[c]).sum::<f64>();
        // no PU lowers a floor and nothing around pays a transfer or misses a saving
        if budget <= 0.0 && !gains {
            return false;
        }
        for j in (0..k).filter(|&j| run.iter().any(|&c| assign[c] != j)) {
            let mut rise = 0.0;
            for &c in run {
                rise += self.floor(p, c, j) - self.floor(p, c, assign[c]);
            }
            if rise >= budget {
                continue;
            }
            // neighbours on `j`, an op of `run` among them counted too: a cheap test first
            let near: f64 = run.iter().map(|&c| self.near_on[c * k + j]).sum();
            if rise >= own + near {
                continue;
            }
            let forced: f64 = run.iter().map(|&c| self.forced(p, assign, run, c, j)).sum();
            if rise + forced >= own + near {
                continue;
            }
            // then without the ops of `run`
            let mut near = 0.0;
            for x in run.iter().flat_map(|&c| p.neighbours(c)) {
                if assign[x] == j && !run.contains(&x) {
                    near += self.excess(p, assign, x);
                }
            }
            if rise + forced < own + near {
                return true;
            }
        }
        false
    }

    /// After `moved` moved: forget the excess of every op whose share it can change, and the
    /// sums of their neighbours.
    fn refresh(&mut self, p: &Problem, moved: &[usize]) {
        for &c in moved {
            for x in std::iter::once(c).chain(p.neighbours(c)) {
                self.known[x] = false;
                self.near_known[x] = false;
                p.neighbours(x).for_each(|y| self.near_known[y] = false);
            }
        }
    }
}

/// What a parallel climb keeps of its phases at its current assignment, so that a move's price
/// before it reads them instead of simulating the phases again, and a move that cannot win is
/// ruled out without simulating them at all. Whoever moves an op forgets the phases around it
/// ([`Spans::forget`]).
pub(crate) struct Spans<'m> {
    /// Per phase its objective ([`Problem::phase_objective`]) where known, NaN where not.
    spans: Vec<Cell<f64>>,
    /// The phases' objectives by what they read, kept for the whole search.
    memo: &'m PhaseMemo,
    /// Per phase whether `floors` holds it at the current assignment.
    known: Vec<Cell<bool>>,
    /// Per op of a phase of one branch its share of the objective
    /// ([`Problem::contribution`]) at the current assignment where known, NaN where not.
    shares: Vec<Cell<f64>>,
    floors: std::cell::RefCell<Floors>,
}

/// Per parallel phase, what its objective is at least: every op lasts at least its duration
/// with no contention (factors are at least 1), a branch runs its ops one after another and a
/// PU one op at a time, never beside a PU sharing its hardware; so a phase's span is at least
/// its longest branch and a PU's load (with the largest load of one sharing it), and its energy
/// at least each op's duration at its PU's power. Kept per op and summed per branch and PU, so
/// that a move changes a few sums ([`Spans::price`]).
struct Floors {
    /// Per op of a parallel phase: its duration with no contention ([`Problem::bare`]) and its
    /// PU, when its phase was last summed.
    duration: Vec<f64>,
    on: Vec<usize>,
    /// Per phase where its branches' sums start in `branch`.
    first_branch: Vec<usize>,
    branch: Vec<f64>,
    /// `load[pi * pus + j]`: the durations of phase `pi`'s ops on PU `j`; per phase its energy.
    load: Vec<f64>,
    energy: Vec<f64>,
    /// The largest contention factor of the problem (at least 1): what an op whose saving
    /// exceeds its weight can be scaled by ([`Problem::worst_factor`]).
    worst_factor: f64,
    /// Scratch of a move's price: the ops whose shares it changes, the new durations of those in
    /// parallel phases, the phases among them, a phase's branch sums and loads.
    parts: Vec<usize>,
    changed: Vec<(usize, f64)>,
    phases: Vec<usize>,
    sums: Vec<f64>,
    loads: Vec<f64>,
}

impl<'m> Spans<'m> {
    fn new(p: &Problem, memo: &'m PhaseMemo) -> Self {
        let np = p.phases.len();
        let mut first_branch = Vec::with_capacity(np);
        let mut branches = 0;
        for ph in &p.phases {
            first_branch.push(branches);
            branches += ph.len();
        }
        let worst_factor = p.worst_factor();
        Spans {
            spans: (0..np).map(|_| Cell::new(f64::NAN)).collect(),
            memo,
            known: (0..np).map(|_| Cell::new(false)).collect(),
            shares: (0..p.ops()).map(|_| Cell::new(f64::NAN)).collect(),
            floors: std::cell::RefCell::new(Floors {
                duration: vec![0.0; p.ops()],
                on: vec![0; p.ops()],
                first_branch,
                branch: vec![0.0; branches],
                load: vec![0.0; np * p.pus()],
                energy: vec![0.0; np],
                worst_factor,
                parts: Vec::with_capacity(16),
                changed: Vec::with_capacity(16),
                phases: Vec::with_capacity(4),
                sums: vec![],
                loads: vec![0.0; p.pus()],
            }),
        }
    }

    /// Phase `pi`'s objective under a parallel schedule ([`Problem::phase_objective`]) at
    /// `assign`, the current assignment: kept where known.
    fn span(&self, p: &Problem, assign: &[usize], pi: usize, obj: Objective) -> f64 {
        let known = self.spans[pi].get();
        if !known.is_nan() {
            return known;
        }
        let v = self.memo.phase_objective(p, assign, pi, obj);
        self.spans[pi].set(v);
        v
    }

    /// Op `c` moved: forget the phases that read its PU (its phase, and those of its producers,
    /// consumers and next op), and the shares that read it (its own and those of its
    /// neighbours).
    fn forget(&self, p: &Problem, c: usize) {
        for x in std::iter::once(c).chain(p.neighbours(c)) {
            let pi = p.place[x].0;
            self.spans[pi].set(f64::NAN);
            self.known[pi].set(false);
            self.shares[x].set(f64::NAN);
        }
    }

    /// Op `x`'s share of the objective ([`Problem::contribution`]) at `assign`, the current
    /// assignment: kept where known.
    fn share(&self, p: &Problem, assign: &[usize], x: usize, obj: Objective) -> f64 {
        let known = self.shares[x].get();
        if !known.is_nan() {
            return known;
        }
        let v = p.contribution(assign, x, Schedule::Parallel, obj);
        self.shares[x].set(v);
        v
    }

    /// Gather what a move of `ops` can change, and sum the parallel phases among it at `assign`,
    /// the current assignment, where not known: [`Spans::price`] prices the move from them.
    /// Returns the local objective before the move ([`Problem::local_objective`], in the same
    /// sum), its parallel phases' spans kept.
    fn prepare(&self, p: &Problem, assign: &[usize], ops: &[usize], obj: Objective) -> f64 {
        let mut f = self.floors.borrow_mut();
        let f = &mut *f;
        p.parts_into(ops, &mut f.parts);
        let k = p.pus();
        // the price before the move, as `local_objective` sums it
        let (mut shares, mut spans) = (0.0, 0.0);
        f.phases.clear();
        for i in 0..f.parts.len() {
            let x = f.parts[i];
            let pi = p.place[x].0;
            if p.phases[pi].len() < 2 {
                shares += self.share(p, assign, x, obj);
                continue;
            }
            if !f.phases.contains(&pi) {
                f.phases.push(pi);
                spans += self.span(p, assign, pi, obj);
            }
            if self.known[pi].get() {
                continue;
            }
            let (first, worst) = (f.first_branch[pi], f.worst_factor);
            f.load[pi * k..(pi + 1) * k].fill(0.0);
            f.energy[pi] = 0.0;
            for (b, ops) in p.phases[pi].iter().enumerate() {
                let mut sum = 0.0;
                for &x in ops {
                    let (d, j) = (p.bare(assign, x, worst), assign[x]);
                    f.duration[x] = d;
                    f.on[x] = j;
                    sum += d;
                    f.load[pi * k + j] += d;
                    f.energy[pi] += d * p.power[x][j];
                }
                f.branch[first + b] = sum;
            }
            self.known[pi].set(true);
        }
        shares + spans
    }

    /// The local objective of a parallel schedule ([`Problem::local_objective`]) after moving
    /// the ops of the last [`Spans::prepare`] to where `assign` now has them, where it might be
    /// below `threshold`; None where even its bound does not: the shares of the ops run alone
    /// (exact) and the least each parallel phase among them can cost. Summed as
    /// `local_objective` sums, so the same figure.
    fn price(&self, p: &Problem, assign: &[usize], obj: Objective, threshold: f64) -> Option<f64> {
        let mut f = self.floors.borrow_mut();
        let f = &mut *f;
        // rounding in the bounds' sums must not rule out what the exact price would take
        let beyond = |bound: f64| bound - 1e-11 * threshold.abs().max(1.0) >= threshold;
        // first the shares' floors (an op's share is at least its cost less the most it can
        // save), which rule out most moves to a slower PU without their transfers
        let mut floors = 0.0;
        f.changed.clear();
        f.phases.clear();
        for &x in &f.parts {
            let pi = p.place[x].0;
            if p.phases[pi].len() < 2 {
                floors += p.floor(x, assign[x], obj);
            } else {
                f.changed.push((x, p.bare(assign, x, f.worst_factor)));
                if !f.phases.contains(&pi) {
                    f.phases.push(pi);
                }
            }
        }
        let k = p.pus();
        let mut least = 0.0;
        for &pi in &f.phases {
            let here = f.changed.iter().filter(|&&(x, _)| p.place[x].0 == pi);
            least += match obj {
                Objective::Energy => here.fold(f.energy[pi], |e, &(x, d)| {
                    e + d * p.power[x][assign[x]] - f.duration[x] * p.power[x][f.on[x]]
                }),
                Objective::Latency => {
                    let first = f.first_branch[pi];
                    f.sums.clear();
                    f.sums.extend_from_slice(&f.branch[first..first + p.phases[pi].len()]);
                    f.loads.copy_from_slice(&f.load[pi * k..(pi + 1) * k]);
                    for &(x, d) in here {
                        f.sums[p.place[x].1] += d - f.duration[x];
                        f.loads[f.on[x]] -= f.duration[x];
                        f.loads[assign[x]] += d;
                    }
                    f.sums.iter().copied().fold(0.0, f64::max).max(p.busiest(&f.loads))
                }
            };
        }
        if beyond(floors + least) {
            return None;
        }
        let mut shares = 0.0;
        for &x in &f.parts {
            if p.phases[p.place[x].0].len() < 2 {
                shares += p.contribution(assign, x, Schedule::Parallel, obj);
            }
        }
        if f.phases.is_empty() {
            return Some(shares);
        }
        if beyond(shares + least) {
            return None;
        }
        let mut spans = 0.0;
        for &pi in &f.phases {
            spans += self.memo.phase_objective(p, assign, pi, obj);
        }
        Some(shares + spans)
    }
}

/// The objectives of parallel phases by the PUs they read, kept for a whole search: a climb
/// prices the same phase under the same local assignment again and again (a move tried in one
/// pass and again in the next, a block move that starts where a single move ended, the second
/// climb of a parallel search over the first's ground). Where measured runs make prices whole
/// evaluations nothing is kept (no [`Spans`] are).
pub(crate) struct PhaseMemo {
    /// Per phase the ops whose PUs its simulation reads ([`Problem::run_phase`]): its ops (their
    /// costs, contention and schedule), their producers and consumers (transfers) and the ops
    /// before them (savings). Empty where their PUs do not fit the key.
    reads: Vec<Vec<usize>>,
    /// Bits per PU in a key.
    bits: u32,
    known: std::cell::RefCell<PhaseValues>,
}

/// (phase, its reads' PUs packed) -> (span, energy).
type PhaseValues = HashMap<(usize, u128), (f64, f64), foldhash::fast::FixedState>;

impl PhaseMemo {
    /// Entries kept at most; past it the memo starts again (48 bytes an entry).
    const LIMIT: usize = 1 << 18;

    pub(crate) fn new(p: &Problem) -> Self {
        let bits = usize::BITS - p.pus().saturating_sub(1).leading_zeros();
        let bits = bits.max(1);
        let reads = p
            .phases
            .iter()
            .map(|phase| {
                let mut reads: Vec<usize> = vec![];
                if phase.len() < 2 {
                    return reads;
                }
                let fits = (u128::BITS / bits) as usize;
                for &c in phase.iter().flatten() {
                    for x in std::iter::once(c)
                        .chain(p.preds[c].iter().copied())
                        .chain(p.succs[c].iter().copied())
                        .chain(p.prev[c])
                    {
                        if !reads.contains(&x) {
                            if reads.len() == fits {
                                // too many to key (and a wide phase's would take long to gather)
                                return vec![];
                            }
                            reads.push(x);
                        }
                    }
                }
                reads
            })
            .collect();
        PhaseMemo { reads, bits, known: Default::default() }
    }

    /// [`Problem::phase_objective`] of parallel phase `pi` at `assign` (no measured runs),
    /// simulated once per assignment of what it reads.
    fn phase_objective(&self, p: &Problem, assign: &[usize], pi: usize, obj: Objective) -> f64 {
        let pick = |(span, energy): (f64, f64)| match obj {
            Objective::Latency => span,
            Objective::Energy => energy,
        };
        let simulate =
            || p.run_phase(assign, pi, 0.0, Schedule::Parallel, None, None).unwrap_or((f64::INFINITY, f64::INFINITY));
        let reads = &self.reads[pi];
        if reads.is_empty() {
            return pick(simulate());
        }
        let key = reads.iter().fold(0u128, |key, &x| key << self.bits | assign[x] as u128);
        let mut known = self.known.borrow_mut();
        if let Some(&v) = known.get(&(pi, key)) {
            return pick(v);
        }
        let v = simulate();
        if known.len() >= Self::LIMIT {
            known.clear();
        }
        known.insert((pi, key), v);
        pick(v)
    }
}

/// What [`Problem::run_phase`] computes into, kept per thread between calls.
#[derive(Default)]
struct PhaseScratch {
    factors: Vec<f64>,
    used: Vec<bool>,
    users: Vec<usize>,
    duration: Vec<f64>,
    first: Vec<usize>,
    next: Vec<usize>,
    pu_free: Vec<f64>,
    /// Per branch when its next op can start, and per PU when it is free ([`Problem::scan_schedule`]).
    ready: Vec<f64>,
    free: Vec<f64>,
    /// Per PU: (ready, branch) of heads not yet ready when it is free; branches ready by then.
    waiting: Vec<BinaryHeap<(Reverse<u64>, Reverse<usize>)>>,
    ready_by: Vec<BinaryHeap<Reverse<usize>>>,
}

thread_local! {
    static SCRATCH: Cell<PhaseScratch> = Cell::new(PhaseScratch::default());
    static RUN_SCRATCH: Cell<RunScratch> = Cell::new(RunScratch::default());
}

/// The stretches of the order a move of `ops` can change where runs were measured whole
/// ([`Problem::local_measured`]): each as its pieces, a moved op or the longest runs of
/// neighbours that stay (no choice for `ops` splits or joins them inside), found once for every
/// choice of PUs for `ops`; and per PU how many of the ops that stay run there (for the launch
/// cost; empty where none was measured).
pub(crate) struct Stretches<'a> {
    ops: &'a [usize],
    schedule: Schedule,
    /// `(first position, end position)` of a piece; None ends a stretch.
    pieces: Vec<Option<(usize, usize)>>,
    used: Vec<usize>,
}

impl Stretches<'_> {
    /// What the stretches, the transfers of the moved ops and their producers and consumers, the
    /// parallel phases among them and the launch cost come to with `ops` where `assign` has them
    /// ([`Problem::local_measured`]).
    pub(crate) fn price(&self, p: &Problem, assign: &[usize], obj: Objective) -> f64 {
        let mut scratch = RUN_SCRATCH.with(|s| s.take());
        let total = self.price_with(p, assign, obj, &mut scratch);
        RUN_SCRATCH.with(|s| s.replace(scratch));
        total
    }

    fn price_with(&self, p: &Problem, assign: &[usize], obj: Objective, s: &mut RunScratch) -> f64 {
        let now = s.next_stamp(p.ops());
        let (m, ops, schedule) = (&p.segment_cost, self.ops, self.schedule);
        let order = m.order();
        let seq = schedule == Schedule::Sequential;
        let parallel = |x: usize| !seq && p.phases[p.place[x].0].len() > 1;
        let mut total = 0.0;
        s.phases.clear();
        // the runs the pieces make, each priced whole ([`MeasuredRuns::run_cost`]); a run of a
        // parallel phase stays within its branch, and the phase is priced whole below
        let mut run: Option<(usize, usize, usize)> = None;
        for piece in self.pieces.iter().chain([&None]) {
            if let (Some((from, to)), Some((first, end, pu))) = (piece, run) {
                let x = order[*from];
                if end == *from && assign[x] == pu && (seq || p.joins_in_parallel[x]) {
                    run = Some((first, *to, pu));
                    continue;
                }
            }
            if let Some((first, end, pu)) = run.take() {
                let x = order[first];
                if parallel(x) {
                    if !s.phases.contains(&p.place[x].0) {
                        s.phases.push(p.place[x].0);
                    }
                } else {
                    let Some((us, uj)) = m.run_cost(first, end - 1, pu) else { return f64::INFINITY };
                    total += match obj {
                        Objective::Latency => us,
                        Objective::Energy => uj,
                    };
                }
            }
            run = piece.map(|(from, to)| (from, to, assign[order[from]]));
        }
        // the transfers a move changes: the moved ops' and their producers' and consumers' (the
        // cost in its run of one outside the stretches is the same under every assignment of
        // `ops`, and left out)
        let parts = ops
            .iter()
            .flat_map(|&c| std::iter::once(c).chain(p.preds[c].iter().copied()).chain(p.succs[c].iter().copied()));
        for x in parts {
            if s.counted[x] == now {
                continue;
            }
            s.counted[x] = now;
            let j = assign[x];
            if p.w[x][j].is_none() {
                return f64::INFINITY;
            }
            if parallel(x) {
                let pi = p.place[x].0;
                if !s.phases.contains(&pi) {
                    s.phases.push(pi);
                }
                continue;
            }
            let (i, o) = p.transfers(assign, x);
            total += match obj {
                Objective::Latency => i + o,
                Objective::Energy => (i + o) * p.power[x][j],
            };
        }
        for &pi in &s.phases {
            // a parallel phase's runs stay within its branches
            if !p.phases[pi].iter().all(|b| p.price_runs(assign, schedule, b, &mut s.eff)) {
                return f64::INFINITY;
            }
            total += match p.run_phase(assign, pi, 0.0, schedule, Some(&s.eff), None) {
                Some((span, energy)) => match obj {
                    Objective::Latency => span,
                    Objective::Energy => energy,
                },
                None => return f64::INFINITY,
            };
        }
        if obj == Objective::Latency && !self.used.is_empty() {
            let on = |j: usize| self.used[j] > 0 || ops.iter().any(|&c| assign[c] == j);
            total +=
                (0..p.pus()).filter(|&j| on(j)).map(|j| p.launch.get(j).copied().unwrap_or(0.0)).fold(0.0, f64::max);
        }
        total
    }
}

/// Buffers of [`Stretches::price`], reused between calls: per op its cost in its run (in the
/// parallel phases priced) and the call that last counted its transfers (a stamp, so nothing
/// is cleared per call); the parallel phases met.
#[derive(Default)]
struct RunScratch {
    eff: Vec<f64>,
    counted: Vec<u32>,
    stamp: u32,
    phases: Vec<usize>,
}

impl RunScratch {
    /// A stamp no op carries yet, for a problem of `n` ops.
    fn next_stamp(&mut self, n: usize) -> u32 {
        if self.eff.len() != n || self.stamp == u32::MAX {
            (self.eff, self.counted, self.stamp) = (vec![0.0; n], vec![0; n], 0);
        }
        self.stamp += 1;
        self.stamp
    }
}

/// [`Problem::exact_phase`] under a parallel schedule as a depth-first search over the phase's
/// ops (the last op outermost, so assignments come in the odometer's order and the same one
/// wins), skipping every subtree whose lower bound cannot beat the best found: each op costs at
/// least its cost less its saving (contention factors are at least 1, transfers at least 0), a
/// branch runs its ops one after another, a PU one op at a time and never beside a PU sharing its
/// hardware (so a phase lasts at least a PU's load and the largest load of one sharing it); the
/// local objective's other shares and phases, which the phase's ops do not take below their
/// floors, are at least those floors.
struct Bounded<'a> {
    p: &'a Problem,
    obj: Objective,
    ops: &'a [usize],
    options: &'a [Vec<usize>],
    /// `floor[i][d]`: the least op `ops[i]` costs on its option `d` (time, or energy).
    floor: Vec<Vec<f64>>,
    /// Per op, its least floor over its options, and its branch in the phase.
    least: Vec<f64>,
    /// The ops with more than one option (by index in `ops`): the others stay where they are,
    /// as in the odometer, and the depth of the search is these.
    movable: Vec<usize>,
    branch: Vec<usize>,
    /// What the rest of the local objective costs at least.
    fixed: f64,
    /// The state of the search: per branch the floors of its assigned ops and the least of its
    /// unassigned ones; per PU the floors of the ops assigned to it.
    assigned: Vec<f64>,
    left: Vec<f64>,
    on_pu: Vec<f64>,
    /// [`Problem::worst_factor`], and scratch for [`Problem::phase_floor`].
    worst_factor: f64,
    loads: Vec<f64>,
}

impl<'a> Bounded<'a> {
    fn new(
        p: &'a Problem,
        assign: &[usize],
        pi: usize,
        ops: &'a [usize],
        options: &'a [Vec<usize>],
        obj: Objective,
    ) -> Self {
        let floor_of = |c: usize, j: usize| p.floor(c, j, obj);
        let floor: Vec<Vec<f64>> =
            ops.iter().zip(options).map(|(&c, o)| o.iter().map(|&j| floor_of(c, j)).collect()).collect();
        let least: Vec<f64> = floor.iter().map(|f| f.iter().copied().fold(f64::INFINITY, f64::min)).collect();
        let mut branch = vec![0; ops.len()];
        let mut k = 0;
        for (b, ops) in p.phases[pi].iter().enumerate() {
            for _ in ops {
                branch[k] = b;
                k += 1;
            }
        }
        // the local objective's other parts (`local_parts`): the shares of ops in phases of one
        // branch, and the other parallel phases, at their floors
        let mut fixed = 0.0;
        let mut phases: Vec<usize> = vec![];
        p.local_parts(
            ops,
            Schedule::Parallel,
            |x| fixed += floor_of(x, assign[x]),
            |q| {
                if q != pi {
                    phases.push(q)
                }
            },
        );
        for q in phases {
            let floors = p.phases[q].iter().map(|b| b.iter().map(|&x| floor_of(x, assign[x])).sum::<f64>());
            fixed += match obj {
                // a phase lasts at least its longest branch
                Objective::Latency => floors.fold(0.0, f64::max),
                Objective::Energy => floors.sum(),
            };
        }
        let branches = p.phases[pi].len();
        let mut left = vec![0.0; branches];
        for (i, &l) in least.iter().enumerate() {
            left[branch[i]] += l;
        }
        let movable = (0..ops.len()).filter(|&i| options[i].len() > 1).collect();
        Bounded {
            movable,
            p,
            obj,
            ops,
            options,
            floor,
            least,
            branch,
            fixed,
            assigned: vec![0.0; branches],
            left,
            on_pu: vec![0.0; p.pus()],
            worst_factor: p.worst_factor(),
            loads: vec![],
        }
    }

    /// The least the local objective can be with the ops assigned so far as they are now.
    fn bound(&self) -> f64 {
        match self.obj {
            Objective::Energy => self.fixed + self.assigned.iter().chain(&self.left).sum::<f64>(),
            Objective::Latency => {
                let branch = self.assigned.iter().zip(&self.left).map(|(a, l)| a + l).fold(0.0, f64::max);
                // a PU's ops never overlap each other, nor those of a PU sharing its hardware
                self.fixed + branch.max(self.p.busiest(&self.on_pu))
            }
        }
    }

    /// The least the local objective can be with every op assigned: the shares of ops run
    /// alone, and each parallel phase at its [`Problem::phase_floor`].
    fn complete_bound(&mut self, assign: &[usize]) -> f64 {
        let (p, obj, worst, loads) = (self.p, self.obj, self.worst_factor, &mut self.loads);
        let (mut shares, mut phases) = (0.0, 0.0);
        p.local_parts(
            self.ops,
            Schedule::Parallel,
            |x| shares += p.contribution(assign, x, Schedule::Parallel, obj),
            |pi| phases += p.phase_floor(assign, pi, obj, worst, loads),
        );
        shares + phases
    }

    /// Put op `ops[i]` on its option `d` for good (an op with one option).
    fn take(&mut self, assign: &mut [usize], i: usize, c: usize, d: usize) {
        let (b, j, f) = (self.branch[i], self.options[i][d], self.floor[i][d]);
        assign[c] = j;
        self.left[b] -= self.least[i];
        self.assigned[b] += f;
        self.on_pu[j] += f;
    }

    /// Assign the movable ops `..n` (the last first), every option in turn, keeping in `best`
    /// the first assignment that beats `before` (and the best before it) by more than
    /// `tolerance`. The ops with one option must be on it.
    fn run(
        &mut self,
        assign: &mut [usize],
        n: usize,
        current: &[usize],
        before: f64,
        tolerance: f64,
        best: &mut Option<(f64, Vec<usize>)>,
    ) {
        let Some(m) = n.checked_sub(1) else {
            if self.ops.iter().zip(current).any(|(&c, &j)| assign[c] != j) {
                // simulated only where the bound with every op's transfers and savings known
                // might beat the best so far
                let threshold = before + best.as_ref().map_or(0.0, |b| b.0) - tolerance;
                if self.complete_bound(assign) - 1e-11 * threshold.abs().max(1.0) >= threshold {
                    return;
                }
                let delta = self.p.local_objective(assign, self.ops, Schedule::Parallel, self.obj) - before;
                if delta < best.as_ref().map_or(0.0, |b| b.0) - tolerance {
                    *best = Some((delta, self.ops.iter().map(|&c| assign[c]).collect()));
                }
            }
            return;
        };
        let i = self.movable[m];
        let (c, b) = (self.ops[i], self.branch[i]);
        // rounding in the bound's sums must not prune what the exact price would take
        let slack = 1e-11 * before.abs().max(1.0);
        self.left[b] -= self.least[i];
        for d in 0..self.options[i].len() {
            let j = self.options[i][d];
            let f = self.floor[i][d];
            assign[c] = j;
            self.assigned[b] += f;
            self.on_pu[j] += f;
            let threshold = before + best.as_ref().map_or(0.0, |b| b.0) - tolerance;
            if self.bound() - slack < threshold {
                self.run(assign, m, current, before, tolerance, best);
            }
            self.assigned[b] -= f;
            self.on_pu[j] -= f;
        }
        self.left[b] += self.least[i];
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The scan and the heaps schedule every phase alike: the same start and finish for every
    /// op, on random phases of 2 to 16 branches whose durations tie often (whole numbers), with
    /// and without PUs that share hardware.
    #[test]
    fn scan_and_heaps_schedule_alike() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut r = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % m) as usize
        };
        for case in 0..500 {
            let k = 1 + r(4);
            let branches = 2 + r(15);
            let mut phase = vec![];
            let mut n = 0;
            for _ in 0..branches {
                let len = 1 + r(4);
                phase.push((n..n + len).collect::<Vec<usize>>());
                n += len;
            }
            let assign: Vec<usize> = (0..n).map(|_| r(k as u64)).collect();
            let mut exclusive = vec![vec![false; k]; k];
            if k > 1 && case % 2 == 0 {
                exclusive[0][1] = true;
                exclusive[1][0] = true;
            }
            let place: Vec<(usize, usize)> =
                (0..n).map(|c| (0, phase.iter().position(|b| b.contains(&c)).unwrap_or(0))).collect();
            let links = OrderLinks::new(std::slice::from_ref(&phase), &place);
            let p = Problem {
                w: vec![vec![Some(1.0); k]; n],
                h2d: vec![vec![0.0; k]; n],
                d2h: vec![vec![0.0; k]; n],
                power: vec![vec![1.0; k]; n],
                accelerator: vec![false; k],
                preds: vec![vec![]; n],
                succs: vec![vec![]; n],
                from_host: vec![false; n],
                to_host: vec![false; n],
                sf: vec![vec![1.0; k]; k],
                exclusive,
                phases: vec![phase.clone()],
                place,
                prev: links.prev,
                next: links.next,
                joins_in_parallel: links.joins_in_parallel,
                saving: vec![vec![0.0; k]; n],
                segment_cost: Default::default(),
                launch: vec![],
                progress: Default::default(),
            };
            let mut scratch = PhaseScratch {
                duration: (0..n).map(|_| (1 + r(5)) as f64).collect(),
                first: phase.iter().scan(0, |acc, b| Some(std::mem::replace(acc, *acc + b.len()))).collect(),
                ..Default::default()
            };
            let timeline = || Timeline {
                start: vec![f64::NAN; n],
                finish: vec![f64::NAN; n],
                transfer_in: vec![0.0; n],
                transfer_out: vec![0.0; n],
                factor: vec![1.0; n],
                saved: vec![0.0; n],
                latency_us: 0.0,
                energy_uj: 0.0,
            };
            let (mut by_scan, mut by_heaps) = (timeline(), timeline());
            let scan = p.scan_schedule(&assign, &phase, 2.0, &mut scratch, Some(&mut by_scan));
            let heaps = p.heap_schedule(&assign, &phase, 2.0, &mut scratch, Some(&mut by_heaps));
            assert_eq!(scan.to_bits(), heaps.to_bits(), "case {case}: ends {scan} and {heaps}");
            assert!(by_scan.start.iter().all(|t| !t.is_nan()), "case {case}: the scan left an op out");
            assert_eq!(by_scan, by_heaps, "case {case}: {phase:?} on {assign:?}");
        }
    }

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

    /// Where runs were measured whole, a move's local price changes by what the full evaluation's
    /// does, whether its stretches are walked before and after it or once ([`Stretches`]): moves of one op, of blocks of 2-4 neighbours in the order and of a phase's ops, to
    /// PUs that can and cannot run them, on random multi-phase problems ([`multi_phase`]) with
    /// the whole order measured on the PU that runs every op, and every branch of 3 ops or more, up to twelve
    /// runs of 3-12 neighbours measured on random PUs, and launch costs; plans starting whole on that PU (one long run)
    /// or scattered; both schedules and objectives.
    #[test]
    fn measured_runs_are_priced_locally_as_the_evaluator_prices_them() {
        let mut r = xorshift();
        let pick = |r: &mut dyn FnMut() -> f64, n: usize| ((r() * n as f64) as usize).min(n - 1);
        let (mut checked, mut priced_from_runs) = (0, 0);
        for case in 0..300 {
            let mut p = multi_phase(&mut r, case, 12.0, 4.0);
            let (n, k) = (p.ops(), p.pus());
            let order: Vec<usize> = p.order().collect();
            let weight = |ops: &[usize], j: usize| ops.iter().map(|&c| p.w[c][j].unwrap_or(0.0)).sum::<f64>();
            let mut runs = std::collections::HashMap::from([((order[0], order[n - 1], 0), 0.4 * weight(&order, 0))]);
            for _ in 0..pick(&mut r, 13) {
                let (len, at, j) = (3 + pick(&mut r, 10), pick(&mut r, n), pick(&mut r, k));
                if at + len <= n {
                    runs.insert((order[at], order[at + len - 1], j), (0.2 + r()) * weight(&order[at..at + len], j));
                }
            }
            // every branch of three or more ops on that PU too (runs under a parallel schedule)
            for b in p.phases.iter().flatten().filter(|b| b.len() >= 3) {
                runs.insert((b[0], b[b.len() - 1], 0), (0.2 + r()) * weight(b, 0));
            }
            let costs = OpCosts { w: &p.w, saving: &p.saving, power: &p.power, next: &p.next };
            p.segment_cost = MeasuredRuns::new(runs, costs);
            p.launch = (0..k).map(|_| 5.0 * r()).collect();
            for schedule in [Schedule::Sequential, Schedule::Parallel] {
                for obj in [Objective::Latency, Objective::Energy] {
                    let scattered = r() < 0.5;
                    let mut assign: Vec<usize> =
                        (0..n).map(|c| if scattered && p.w[c][1].is_some() && r() < 0.2 { 1 } else { 0 }).collect();
                    for _ in 0..20 {
                        let ops: Vec<usize> = match pick(&mut r, 3) {
                            0 => vec![order[pick(&mut r, n)]],
                            1 => {
                                let at = pick(&mut r, n);
                                order[at..(at + 2 + pick(&mut r, 3)).min(n)].to_vec()
                            }
                            _ => p.phases[pick(&mut r, p.phases.len())].concat(),
                        };
                        let full = |a: &[usize]| p.full_objective(a, schedule, obj);
                        let (full_before, before) = (full(&assign), p.local_objective(&assign, &ops, schedule, obj));
                        // the stretches walked once, before the move, price it too
                        let kept = assign.clone();
                        let stretches = p.stretches(&kept, &ops, schedule);
                        let to = pick(&mut r, k);
                        ops.iter().for_each(|&c| assign[c] = if r() < 0.7 { to } else { pick(&mut r, k) });
                        let (full_after, after) = (full(&assign), p.local_objective(&assign, &ops, schedule, obj));
                        let walked_once = stretches.price(&p, &assign, obj) - stretches.price(&p, &kept, obj);
                        let moved = format!("case {case}, {schedule:?}, {obj:?}: {ops:?} from {kept:?} to {assign:?}");
                        assert_eq!(full_after.is_finite(), after.is_finite(), "{moved}");
                        assert_eq!(full_after.is_finite(), walked_once.is_finite(), "{moved}");
                        if !full_after.is_finite() {
                            assign = kept;
                            continue;
                        }
                        let (local, whole) = (after - before, full_after - full_before);
                        let close = |a: f64| (a - whole).abs() <= 1e-9 * full_before.max(1.0);
                        assert!(close(local) && close(walked_once), "{moved}: {local}, {walked_once} against {whole}");
                        checked += 1;
                        // whether some op of the plan is priced from a run measured whole
                        let eff = p.effective(&assign, schedule).expect("feasible");
                        let pairs = |c: usize| p.w[c][assign[c]].map(|w| w - p.saved(&assign, c, schedule));
                        priced_from_runs += (0..n).any(|c| pairs(c) != Some(eff[c])) as usize;
                        if r() < 0.7 {
                            assign = kept;
                        }
                    }
                }
            }
        }
        assert!(
            checked > 10_000 && priced_from_runs * 2 > checked,
            "{checked} moves, {priced_from_runs} priced from runs measured whole: the cases test too little"
        );
    }

    /// A parallel climb that keeps its phases' spans and bounds between moves ([`Spans`]),
    /// prices phases from a memo its problem's climbs share ([`PhaseMemo`]), and skips trials no
    /// move since can have changed makes the same moves as one that tries and simulates every
    /// move afresh: the bound rules out only moves that could not win, and a
    /// skipped trial would find nothing again. Random multi-phase problems ([`multi_phase`]),
    /// half with branches of up to 8 ops (whose ops are farther apart than two links);
    /// latency and energy.
    #[test]
    fn kept_bounds_change_no_move() {
        let mut r = xorshift();
        let mut moved = 0;
        for case in 0..100 {
            // long branches put ops of one phase beyond two links of each other
            let p = multi_phase(&mut r, case, 3.0, if case % 2 == 0 { 3.0 } else { 8.0 });
            let (n, k) = (p.ops(), p.pus());
            let start: Vec<usize> = (0..n)
                .map(|c| (0..k).filter(|&j| p.w[c][j].is_some()).nth((r() * 3.0) as usize).unwrap_or(0))
                .collect();
            // one memo for every kept climb of the problem, as a search's climbs share one
            let memo = PhaseMemo::new(&p);
            for obj in [Objective::Latency, Objective::Energy] {
                let (mut kept, mut afresh) = (start.clone(), start.clone());
                let a = p.improve_with(&mut kept, Schedule::Parallel, obj, true, false, &memo);
                let b = p.improve_with(&mut afresh, Schedule::Parallel, obj, false, false, &PhaseMemo::new(&p));
                assert_eq!((a, &kept), (b, &afresh), "case {case}, {obj:?}: the kept bounds changed the climb");
                moved += a;
            }
        }
        assert!(moved > 1000, "the climbs moved {moved} times: the cases test too little");
    }

    /// A parallel climb from the DP's optimum on each branch, or from a sequential local
    /// optimum, whose first pass tries only the ops priced otherwise there
    /// ([`Problem::improve_parallel_from_dp`]), makes the same moves as one whose first pass
    /// tries every op. Random multi-phase problems with chains of up to 40 ops between the
    /// parallel phases ([`multi_phase`]); latency and energy.
    #[test]
    fn a_climb_from_a_dp_tries_fewer_ops_for_the_same_moves() {
        let mut r = xorshift();
        let (mut moved, mut left_out, mut ops) = (0, 0, 0);
        for case in 0..200 {
            let p = multi_phase(&mut r, case, 40.0, 3.0);
            left_out += p.priced_otherwise().iter().filter(|&&h| !h).count();
            ops += p.ops();
            for obj in [Objective::Latency, Objective::Energy] {
                let by_branch = crate::branch_dp(&p, obj).expect("every op runs somewhere");
                let sequential = crate::sequential_mapping(&p, obj).expect("every op runs somewhere").assign;
                let memo = PhaseMemo::new(&p);
                for start in [by_branch, sequential] {
                    let (mut narrowed, mut every) = (start.clone(), start);
                    let a = p.improve_with(&mut narrowed, Schedule::Parallel, obj, true, true, &memo);
                    let b = p.improve_with(&mut every, Schedule::Parallel, obj, true, false, &memo);
                    assert_eq!(
                        (a, &narrowed),
                        (b, &every),
                        "case {case}, {obj:?}: the narrowed pass changed the climb"
                    );
                    moved += a;
                }
            }
        }
        assert!(
            moved > 500 && left_out * 5 > ops,
            "moved {moved}, left out {left_out} of {ops} ops: the cases test too little"
        );
    }
}
