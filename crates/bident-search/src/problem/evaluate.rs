//! The plan evaluator: a phase's contention factors, its ops run one after another or
//! list-scheduled across its branches, and the whole plan's timeline.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Problem, Schedule, Timeline};

/// A phase being timed ([`Problem::schedule_phase`]): which, from when, and whether its
/// branches are list-scheduled (under a parallel schedule, where it has several).
#[derive(Clone, Copy)]
struct PhaseAt {
    pi: usize,
    at: f64,
    parallel: bool,
}

impl Problem {
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
    pub(super) fn run_phase(
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
        let end = self.schedule_phase(assign, &PhaseAt { pi, at, parallel }, &mut guard, tl);
        SCRATCH.with(|s| s.replace(guard));
        Some((end, energy))
    }

    /// The timing half of [`Problem::run_phase`]: the phase's ops, whose durations are in
    /// `scratch.duration` (branch after branch), one after another or list-scheduled; returns the
    /// phase's end.
    fn schedule_phase(
        &self,
        assign: &[usize],
        run: &PhaseAt,
        scratch: &mut PhaseScratch,
        mut tl: Option<&mut Timeline>,
    ) -> f64 {
        let PhaseAt { pi, at, parallel } = *run;
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
            return now;
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
        if phase.len() <= Self::SCAN_BRANCHES {
            self.scan_schedule(assign, phase, at, scratch, tl)
        } else {
            self.heap_schedule(assign, phase, at, scratch, tl)
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::OrderLinks;

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
}
