//! The parallel hill climb: passes of exact phases, wide phases, single, branch and block moves
//! under the parallel evaluator, each pass trying only what a move since can have changed.

use std::cell::Cell;

use super::memo::{PhaseMemo, Spans};
use super::moves::BlockPass;
use super::{Problem, Schedule};
use crate::Objective;

impl Problem {
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
                    }
                }
            }
        }
        // and the ops within two links of those, each reached once (a fork's consumers are all
        // within two links of each other)
        let mut ring: Vec<usize> = (0..self.ops()).filter(|&c| out[c]).collect();
        for _ in 0..2 {
            let mut next = vec![];
            for &x in &ring {
                for y in self.neighbours(x) {
                    if !out[y] {
                        out[y] = true;
                        next.push(y);
                    }
                }
            }
            ring = next;
        }
        out
    }

    /// [`Problem::improve`] under a parallel schedule; `keep`: whether the climb keeps its phases' spans and
    /// bounds ([`Spans`]) between moves, and skips the trials no move since can have changed,
    /// which must change nothing but the time it takes;
    /// `from_dp`: [`Problem::improve_parallel_from_dp`]'s first pass (with the same moves).
    pub(super) fn improve_with(
        &self,
        assign: &mut [usize],
        schedule: Schedule,
        obj: Objective,
        keep: bool,
        from_dp: bool,
        memo: &PhaseMemo,
    ) -> usize {
        debug_assert_eq!(schedule, Schedule::Parallel, "a sequential climb is `climb_sequential`'s");
        let climb = ParallelClimb::new(self, (schedule, obj), keep, from_dp, memo);
        let marks = Marks {
            dirty: vec![true; self.phases.len()],
            // the ops whose moves a move since the pass began may have changed the price of
            // (every op at first): the next pass tries those only
            hot: if climb.narrowed { self.priced_otherwise() } else { vec![true; self.ops()] },
            touched: vec![false; self.phases.len()],
        };
        climb.run(assign, marks)
    }

    /// [`Problem::improve_parallel_with`] from a local optimum of it where `kicked` were then
    /// moved: only what their moves can have changed is tried at first (as after a move of
    /// the climb's own).
    pub(crate) fn improve_parallel_after(
        &self,
        assign: &mut [usize],
        obj: Objective,
        memo: &PhaseMemo,
        kicked: &[usize],
    ) -> usize {
        let climb = ParallelClimb::new(self, (Schedule::Parallel, obj), true, false, memo);
        let (np, n) = (self.phases.len(), self.ops());
        let mut marks = Marks { dirty: vec![false; np], hot: vec![false; n], touched: vec![false; np] };
        climb.mark_all(kicked, &mut marks);
        climb.run(assign, marks)
    }
}

/// A phase's branches are moved in every combination of each kept or whole on one PU where
/// there are at most this many combinations, else two at a time
/// ([`ParallelClimb::combination_moves`]).
const BRANCH_COMBINATIONS: usize = 1024;

/// Every combination of `branches` each as `assign` has it or whole on one PU: per combination,
/// the PUs of the branches' ops one after another.
fn combinations(p: &Problem, assign: &[usize], branches: &[&[usize]]) -> Vec<Vec<usize>> {
    let ways = p.pus() + 1;
    let total = ways.pow(branches.len() as u32);
    (0..total)
        .map(|code| {
            let mut digits = code;
            let mut out = Vec::with_capacity(branches.iter().map(|b| b.len()).sum());
            for b in branches {
                let d = digits % ways;
                digits /= ways;
                out.extend(b.iter().map(|&c| if d == 0 { assign[c] } else { d - 1 }));
            }
            out
        })
        .collect()
}

/// What the parallel climb keeps for its whole run ([`Problem::improve_with`]); what moves change
/// is in [`Marks`] and [`Tried`], or in cells.
struct ParallelClimb<'a> {
    p: &'a Problem,
    schedule: Schedule,
    obj: Objective,
    order: Vec<usize>,
    /// Wide phases are climbed with moves priced locally (`wide`); their ops are left out of the
    /// moves below, each of which would simulate the whole phase again.
    wide: Vec<bool>,
    branches: Vec<&'a Vec<usize>>,
    /// Large exact phases are the costly part: a phase is solved again only when an op it
    /// depends on moved. Its local objective reads its ops, their producers, consumers and
    /// order neighbours, theirs in turn (their transfers and savings), and whole parallel
    /// phases among them: all within two links (dataflow or order) between phases.
    linked: Vec<Vec<usize>>,
    /// Where measured runs make an op's price depend on its whole run, every op is tried in
    /// every pass.
    local: bool,
    /// From a DP's optimum, the first pass tries the ops priced otherwise there, and those a
    /// move during it brings within two links: in effect every op, with the same moves.
    narrowed: bool,
    /// The spans and bounds of the phases at the current assignment, for the prices before
    /// moves and to rule out moves without simulating them (where measured runs make an op's
    /// price read its whole run, none are kept).
    spans: Spans<'a>,
    keep: bool,
    /// A trial (a single, branch or block move tried) made since the last move that can
    /// change its price found nothing then and would find nothing now, so it is skipped:
    /// `clock` counts moves, `moved_near` keeps per op the last move within two links of it,
    /// `phase_moved` per parallel phase the last move among its ops and their neighbours
    /// (that changes its span, which its ops' and their neighbours' prices read). Only where
    /// prices are local and kept, so that the climb without them checks the same moves.
    skip: bool,
    clock: Cell<usize>,
    moved_near: Vec<Cell<usize>>,
    phase_moved: Vec<Cell<usize>>,
}

/// What moves mark for the climb: per phase whether to solve it exactly again (`dirty`), per
/// op whether to try it in the next pass (`hot`), and the parallel phases a move touched.
///
/// A move of `c` changes the shares of `c` and its neighbours and the spans of the parallel
/// phases among them; a price reads the shares of an op and its neighbours and the spans
/// of the parallel phases among them, and a share reads its op's neighbours, a span its
/// phase's ops and their neighbours: so the ops within two links of `c`, and those of
/// each such phase and their neighbours
/// (the phases are marked `touched` and their ops made hot once per pass, before it tries
/// its ops).
struct Marks {
    dirty: Vec<bool>,
    hot: Vec<bool>,
    touched: Vec<bool>,
}

/// When each trial was last made (the climb's clock then): per op its single move, per branch
/// its move, per run of neighbours (at its start and length) its block move.
struct Tried {
    single: Vec<usize>,
    branch: Vec<usize>,
    block: Vec<usize>,
}

/// One pass of the climb: its number, what it reports, and per op whether it tries it.
struct Pass<'t> {
    number: usize,
    what: String,
    report: bool,
    trying: &'t [Cell<bool>],
}

impl<'a> ParallelClimb<'a> {
    fn new(
        p: &'a Problem,
        (schedule, obj): (Schedule, Objective),
        keep: bool,
        from_dp: bool,
        memo: &'a PhaseMemo,
    ) -> Self {
        let wide: Vec<bool> = (0..p.phases.len()).map(|pi| p.is_wide(pi)).collect();
        let branches: Vec<&Vec<usize>> =
            p.phases.iter().enumerate().filter(|(pi, ph)| ph.len() > 1 && !wide[*pi]).flat_map(|(_, ph)| ph).collect();
        let np = p.phases.len();
        let mut linked: Vec<Vec<usize>> = vec![vec![]; np];
        for c in 0..p.ops() {
            let near = p.preds[c].iter().chain(&p.succs[c]).chain(&p.prev[c]).chain(&p.next[c]);
            for &x in near {
                let (a, b) = (p.place[c].0, p.place[x].0);
                if a != b && !linked[a].contains(&b) {
                    linked[a].push(b);
                }
            }
        }
        let local = p.segment_cost.is_empty();
        ParallelClimb {
            p,
            schedule,
            obj,
            order: p.order().collect(),
            wide,
            branches,
            linked,
            local,
            narrowed: from_dp && local,
            spans: Spans::new(p, memo),
            keep,
            skip: keep && local,
            clock: Cell::new(1usize),
            moved_near: vec![Cell::new(1usize); p.ops()],
            phase_moved: vec![Cell::new(0usize); np],
        }
    }

    /// Passes from `marks` until none moves (at most `MAX_PASSES`); returns the moves made.
    fn run(&self, assign: &mut [usize], mut marks: Marks) -> usize {
        /// Graphs from this many ops report the climb's passes.
        const PROGRESS_FROM: usize = 1000;
        const MAX_PASSES: usize = 20;
        let p = self.p;
        let mut tried = Tried {
            single: vec![0usize; p.ops()],
            branch: vec![0usize; self.branches.len()],
            block: vec![0usize; self.order.len() * (Problem::MAX_BLOCK + 1)],
        };
        let mut moves = 0;
        // graphs large enough to take a while report each pass
        let report = p.ops() >= PROGRESS_FROM;
        for pass in 0..MAX_PASSES {
            let what = format!("hill climbing, pass {} (at most {MAX_PASSES})", pass + 1);
            let mut moved = self.phases(assign, &what, report, &mut marks);
            let mut trying = self.trying(&mut marks);
            let pass = Pass { number: pass, what, report, trying: Cell::from_mut(&mut trying[..]).as_slice_of_cells() };
            moved += self.singles(assign, &pass, &mut marks, &mut tried.single);
            moved += self.branch_moves(assign, &pass, &mut marks, &mut tried.branch);
            moved += self.combination_moves(assign, &pass, &mut marks);
            moved += self.blocks(assign, &pass, &mut marks, &mut tried.block);
            moves += moved;
            if moved == 0 {
                break;
            }
        }
        moves
    }

    /// The kept spans and bounds moves are priced with, where they are kept.
    fn cache(&self) -> Option<&Spans<'a>> {
        (self.keep && self.p.segment_cost.is_empty()).then_some(&self.spans)
    }

    fn in_wide(&self, c: usize) -> bool {
        self.wide[self.p.place[c].0]
    }

    /// Whether a trial of op `x` last made at `tried_at` may find a move now.
    fn due(&self, x: usize, tried_at: usize) -> bool {
        let moved_since = |pi: usize| self.phase_moved[pi].get() > tried_at;
        !self.skip
            || self.moved_near[x].get() > tried_at
            || moved_since(self.p.place[x].0)
            || self.p.neighbours(x).any(|y| moved_since(self.p.place[y].0))
    }

    /// Op `c` moved: a tick of the clock, the kept spans around it forgotten, and what it can
    /// change marked ([`Marks`]).
    fn mark(&self, c: usize, m: &mut Marks) {
        let p = self.p;
        self.clock.set(self.clock.get() + 1);
        let now = self.clock.get();
        // a phase's span reads its ops' PUs and those of their producers, consumers and
        // previous ops
        self.spans.forget(p, c);
        let q = p.place[c].0;
        m.dirty[q] = true;
        for &q1 in &self.linked[q] {
            m.dirty[q1] = true;
            self.linked[q1].iter().for_each(|&q2| m.dirty[q2] = true);
        }
        m.hot[c] = true;
        self.moved_near[c].set(now);
        for x in p.neighbours(c) {
            m.hot[x] = true;
            self.moved_near[x].set(now);
            p.neighbours(x).for_each(|y| {
                m.hot[y] = true;
                self.moved_near[y].set(now);
            });
        }
        for x in std::iter::once(c).chain(p.neighbours(c)) {
            let pi = p.place[x].0;
            if p.phases[pi].len() > 1 {
                m.touched[pi] = true;
                self.phase_moved[pi].set(now);
            }
        }
    }

    /// Every op of `ops` moved (a phase solved or climbed as a whole): as [`ParallelClimb::mark`]
    /// of each in turn, with each op within two links visited once however many of `ops` it
    /// is near (a fork's consumers are all near it).
    fn mark_all(&self, ops: &[usize], m: &mut Marks) {
        let p = self.p;
        self.clock.set(self.clock.get() + 1);
        let now = self.clock.get();
        let mut phases: Vec<usize> = vec![];
        for &c in ops {
            self.spans.forget(p, c);
            if !phases.contains(&p.place[c].0) {
                phases.push(p.place[c].0);
            }
        }
        for q in phases {
            m.dirty[q] = true;
            for &q1 in &self.linked[q] {
                m.dirty[q1] = true;
                self.linked[q1].iter().for_each(|&q2| m.dirty[q2] = true);
            }
        }
        // two rings around the ops, each op reached once (its clock then `now`)
        let mut ring: Vec<usize> = ops.to_vec();
        ring.iter().for_each(|&c| self.moved_near[c].set(now));
        for _ in 0..2 {
            let mut next = vec![];
            for &x in &ring {
                for y in p.neighbours(x) {
                    if self.moved_near[y].get() != now {
                        self.moved_near[y].set(now);
                        next.push(y);
                    }
                }
            }
            ring.iter().for_each(|&x| m.hot[x] = true);
            ring = next;
        }
        ring.iter().for_each(|&x| m.hot[x] = true);
        for &c in ops {
            for x in std::iter::once(c).chain(p.neighbours(c)) {
                let pi = p.place[x].0;
                if p.phases[pi].len() > 1 {
                    m.touched[pi] = true;
                    self.phase_moved[pi].set(now);
                }
            }
        }
    }

    /// The narrowed first pass also tries, later in it, the ops a move of `c` brings within two
    /// links (as the pass of every op would).
    fn widen(&self, pass: &Pass, c: usize) {
        if self.narrowed && pass.number == 0 {
            let mut try_too = |x: usize| pass.trying[x].set(pass.trying[x].get() || !self.in_wide(x));
            try_too(c);
            for x in self.p.neighbours(c) {
                try_too(x);
                self.p.neighbours(x).for_each(&mut try_too);
            }
        }
    }

    /// A pass's phases: each dirty one small enough solved exactly, each wide one climbed.
    /// Returns how many moved.
    fn phases(&self, assign: &mut [usize], what: &str, report: bool, m: &mut Marks) -> usize {
        let p = self.p;
        let np = p.phases.len();
        let total = np + self.order.len();
        let mut moved = 0;
        for pi in 0..np {
            if report && pi % 64 == 0 {
                p.progress.report(what, pi, total);
            }
            if std::mem::take(&mut m.dirty[pi]) && p.exact_phase(assign, pi, self.schedule, self.obj) {
                moved += 1;
                self.mark_all(&p.phases[pi].concat(), m);
                // optimal for the rest as it is now
                m.dirty[pi] = false;
            } else if self.wide[pi] && p.climb_wide(assign, pi, self.obj) > 0 {
                moved += 1;
                self.mark_all(&p.phases[pi].concat(), m);
                m.dirty[pi] = false;
            }
        }
        moved
    }

    /// The ops to try this pass, outside wide phases (moves from here on mark the next pass's):
    /// the hot ones, and those of each phase touched and their neighbours.
    fn trying(&self, m: &mut Marks) -> Vec<bool> {
        let p = self.p;
        for pi in (0..p.phases.len()).filter(|&pi| std::mem::take(&mut m.touched[pi])) {
            for &o in p.phases[pi].iter().flatten() {
                m.hot[o] = true;
                p.neighbours(o).for_each(|y| m.hot[y] = true);
            }
        }
        let mut was_hot = std::mem::replace(&mut m.hot, vec![!self.local; p.ops()]);
        was_hot.iter_mut().enumerate().for_each(|(c, h)| *h &= !self.in_wide(c));
        was_hot
    }

    /// A pass's single moves, in the order. Returns how many moved.
    fn singles(&self, assign: &mut [usize], pass: &Pass, m: &mut Marks, tried: &mut [usize]) -> usize {
        let p = self.p;
        let total = p.phases.len() + self.order.len();
        let mut moved = 0;
        for (i, &c) in self.order.iter().enumerate() {
            if !pass.trying[c].get() || !self.due(c, tried[c]) {
                continue;
            }
            if pass.report && i % 256 == 0 {
                p.progress.report(&pass.what, p.phases.len() + i, total);
            }
            tried[c] = self.clock.get();
            if p.best_single_move(assign, c, self.schedule, self.obj, self.cache()) {
                moved += 1;
                self.mark(c, m);
                self.widen(pass, c);
            }
        }
        if pass.report {
            p.progress.report(&pass.what, total, total);
        }
        moved
    }

    /// A pass's branch moves: each branch of a parallel phase (not wide) to one PU as a whole.
    /// Returns how many moved.
    fn branch_moves(&self, assign: &mut [usize], pass: &Pass, m: &mut Marks, tried: &mut [usize]) -> usize {
        let k = self.p.pus();
        let mut moved = 0;
        for (bi, b) in self.branches.iter().enumerate() {
            if !b.iter().any(|&c| pass.trying[c].get()) || !b.iter().any(|&c| self.due(c, tried[bi])) {
                continue;
            }
            tried[bi] = self.clock.get();
            let choices: Vec<Vec<usize>> = (0..k).map(|j| vec![j; b.len()]).collect();
            if self.p.best_move(assign, b, &choices, (self.schedule, self.obj), self.cache()) {
                moved += 1;
                b.iter().for_each(|&c| {
                    self.mark(c, m);
                    self.widen(pass, c);
                });
            }
        }
        moved
    }

    /// A pass's branch combinations (on graphs of at most [`crate::mapping::RESTART_LIMIT`]
    /// ops): in each phase the exact search leaves to the climb
    /// ([`Problem::hard_phase`]) with one of its ops to try this pass, every combination of its branches each kept as it is or moved
    /// whole to one PU, where there are at most [`BRANCH_COMBINATIONS`]; else every two branches
    /// so. Balancing a phase often takes branches trading places, which no move of one branch
    /// makes (the first half of the trade makes the phase longer). Returns how many moved.
    fn combination_moves(&self, assign: &mut [usize], pass: &Pass, m: &mut Marks) -> usize {
        let p = self.p;
        let mut moved = 0;
        if p.ops() > crate::mapping::RESTART_LIMIT {
            // hundreds of combinations in every phase of a large graph cost more than they find
            return 0;
        }
        for pi in (0..p.phases.len()).filter(|&pi| p.hard_phase(pi)) {
            let phase = &p.phases[pi];
            let ways = p.pus() + 1;
            let groups: Vec<Vec<usize>> = match ways.checked_pow(phase.len() as u32) {
                Some(n) if n <= BRANCH_COMBINATIONS => vec![(0..phase.len()).collect()],
                _ => (0..phase.len()).flat_map(|a| (a + 1..phase.len()).map(move |b| vec![a, b])).collect(),
            };
            for group in groups {
                let ops: Vec<usize> = group.iter().flat_map(|&b| phase[b].iter().copied()).collect();
                if !ops.iter().any(|&c| pass.trying[c].get()) {
                    continue;
                }
                let choices = combinations(p, assign, &group.iter().map(|&b| &phase[b][..]).collect::<Vec<_>>());
                if p.best_move(assign, &ops, &choices, (self.schedule, self.obj), self.cache()) {
                    moved += 1;
                    ops.iter().for_each(|&c| {
                        self.mark(c, m);
                        self.widen(pass, c);
                    });
                }
            }
        }
        moved
    }

    /// A pass's block moves. Returns how many moved.
    fn blocks(&self, assign: &mut [usize], pass: &Pass, m: &mut Marks, tried: &mut [usize]) -> usize {
        // runs wholly inside a wide phase are its climb's (no op of one is hot)
        let mut wanted = |at: usize, run: &[usize]| {
            let slot = &mut tried[at * (Problem::MAX_BLOCK + 1) + run.len()];
            let go = run.iter().any(|&c| pass.trying[c].get()) && run.iter().any(|&c| self.due(c, *slot));
            if go {
                *slot = self.clock.get();
            }
            go
        };
        let blocks =
            BlockPass { order: &self.order, starts: None, schedule: self.schedule, obj: self.obj, cache: self.cache() };
        self.p.block_moves(assign, &blocks, None, &mut wanted, &mut |run| {
            run.iter().for_each(|&c| {
                self.mark(c, m);
                self.widen(pass, c);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::tests::{multi_phase, xorshift};

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
                let by_branch = crate::mapping::branch_dp(&p, obj).expect("every op runs somewhere");
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
