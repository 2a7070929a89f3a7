//! The objective in parts: one phase run alone, one op's share, the floors no contention or
//! transfer goes below, and the part of the objective a move can change.

use super::{Problem, Schedule};
use crate::Objective;

impl Problem {
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
    pub(super) fn full_objective(&self, assign: &[usize], schedule: Schedule, obj: Objective) -> f64 {
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
    pub(super) fn worst_factor(&self) -> f64 {
        self.sf.iter().flatten().copied().filter(|f| f.is_finite()).fold(1.0, f64::max)
    }

    /// How long op `c` runs under `assign` and a parallel schedule with no contention: its
    /// transfers and execution less its saving (infinite where its PU cannot run it). No factor
    /// makes it shorter, unless its saving exceeds its weight: that part is scaled by
    /// `worst_factor`, the largest factor there is.
    pub(super) fn bare(&self, assign: &[usize], c: usize, worst_factor: f64) -> f64 {
        let Some(w) = self.w[c][assign[c]] else { return f64::INFINITY };
        let (i, o) = self.transfers(assign, c);
        let e = w - self.saved(assign, c, Schedule::Parallel);
        i + if e < 0.0 { e * worst_factor } else { e } + o
    }

    /// The least phase `pi` of several branches can cost under `assign` and a parallel
    /// schedule (see [`Spans`]): its longest branch or busiest PU (with the busiest PU sharing
    /// its hardware), every op at its [`Problem::bare`] duration, or their energy. `loads` is
    /// scratch.
    ///
    /// [`Spans`]: super::memo::Spans
    pub(super) fn phase_floor(
        &self,
        assign: &[usize],
        pi: usize,
        obj: Objective,
        worst_factor: f64,
        loads: &mut Vec<f64>,
    ) -> f64 {
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
    pub(crate) fn busiest(&self, loads: &[f64]) -> f64 {
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
    pub(super) fn local_parts(
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
    pub(super) fn parts_into(&self, ops: &[usize], out: &mut Vec<usize>) {
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
    pub(super) fn local_single(&self, assign: &[usize], c: usize, schedule: Schedule, obj: Objective) -> f64 {
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
}
