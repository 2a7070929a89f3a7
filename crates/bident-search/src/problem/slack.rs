//! What a sequential climb keeps per op to rule out moves that cannot win without pricing them.

use super::{Problem, Schedule};
use crate::Objective;

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
    pub(super) fn new(p: &Problem, obj: Objective) -> Self {
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
    pub(super) fn best_move(&mut self, p: &Problem, assign: &mut [usize], run: &[usize]) -> bool {
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
    pub(super) fn may_improve(&mut self, p: &Problem, assign: &[usize], run: &[usize]) -> bool {
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
    pub(super) fn refresh(&mut self, p: &Problem, moved: &[usize]) {
        for &c in moved {
            for x in std::iter::once(c).chain(p.neighbours(c)) {
                self.known[x] = false;
                self.near_known[x] = false;
                p.neighbours(x).for_each(|y| self.near_known[y] = false);
            }
        }
    }
}
