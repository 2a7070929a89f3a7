//! The moves a climb tries: one op, or a few ops together, to the PU that most lowers the
//! objective, and passes of block moves over runs of neighbours in the order.

use super::memo::Spans;
use super::slack::Slack;
use super::{Problem, Schedule};
use crate::Objective;

/// A pass of block moves ([`Problem::block_moves`]): where its runs start and how their moves
/// are priced.
#[derive(Clone, Copy)]
pub(super) struct BlockPass<'a> {
    /// The execution order.
    pub(super) order: &'a [usize],
    /// The positions in `order` runs start at (ascending); every position where None.
    pub(super) starts: Option<&'a [usize]>,
    pub(super) schedule: Schedule,
    pub(super) obj: Objective,
    /// A parallel climb's kept spans, which price a move only where its bound says it might win
    /// ([`Spans::price`]).
    pub(super) cache: Option<&'a Spans<'a>>,
}

impl Problem {
    /// Move op `c` to the PU that most lowers the objective; true if it moved. Where `cache` is
    /// given (a parallel climb's), the price before comes from its kept spans and a move is
    /// priced only where its bound says it might win ([`Spans::price`]).
    pub(super) fn best_single_move(
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
    pub(super) fn best_move(
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

    /// Longest run of neighbours in the execution order that `Problem::block_moves` moves.
    pub const MAX_BLOCK: usize = 4;

    /// One pass of block moves: every run of 2..=[`Problem::MAX_BLOCK`] neighbours in the
    /// execution order, starting at a position of `pass.starts`, that `wanted` (given its
    /// position in the order) asks for goes, as a whole, to the PU that most lowers the
    /// objective. A single move cannot leave a run compiled together, or a group that shares
    /// its transfers, without losing the saving on both sides first; the run together can.
    /// Calls `moved` with every run that moved (which may make more ops hot); returns how many
    /// did.
    pub(super) fn block_moves(
        &self,
        assign: &mut [usize],
        pass: &BlockPass<'_>,
        mut slack: Option<&mut Slack>,
        wanted: &mut dyn FnMut(usize, &[usize]) -> bool,
        moved: &mut dyn FnMut(&[usize]),
    ) -> usize {
        let BlockPass { order, starts, schedule, obj, cache } = *pass;
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
}
