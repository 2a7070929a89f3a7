//! Hill climbing under the evaluator: [`Problem::improve`], and the sequential climb on a
//! worklist (the parallel climb is `parallel_climb`'s).

use std::collections::VecDeque;

use super::memo::PhaseMemo;
use super::moves::BlockPass;
use super::slack::Slack;
use super::{Problem, Schedule};
use crate::Objective;

impl Problem {
    /// Sequential hill climbing on a worklist: small phases of several branches solved exactly,
    /// then single-op moves, then block moves; every move queues the ops within two links of it
    /// again. The worklist starts with every op, or, from the optimum of the DP on the phased
    /// order ([`Problem::sequential_dp`]), with the ops it marks `inexact` and their neighbours:
    /// elsewhere the DP priced each op as the evaluator does, so a move of ops whose shares it
    /// priced so cannot beat its optimum.
    pub(crate) fn climb_sequential(&self, assign: &mut [usize], obj: Objective, inexact: Option<&[bool]>) -> usize {
        let order: Vec<usize> = self.order().collect();
        let n = order.len();
        let (mut work, start) = Worklist::start(self, &order, inexact);
        // where every op's share is its own (no measured runs), most moves are ruled out
        // without pricing them
        let mut slack = self.segment_cost.is_empty().then(|| Slack::new(self, obj));
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
                    work.around(self, c);
                }
            }
        }
        // every move strictly lowers the objective, so this ends; the cap guards against float noise
        let cap = 20 * n;
        loop {
            while let Some(c) = work.queue.pop_front() {
                work.queued[c] = false;
                let better = match slack.as_mut() {
                    Some(s) => s.may_improve(self, assign, &[c]) && s.best_move(self, assign, &[c]),
                    None => self.best_single_move(assign, c, Schedule::Sequential, obj, None),
                };
                if better {
                    moves += 1;
                    if moves > cap {
                        return moves;
                    }
                    work.around(self, c);
                }
            }
            // no single move helps: try runs of neighbours, and single moves again around any
            // that moved
            let blocks = self.hot_blocks(assign, &order, obj, slack.as_mut(), &mut work);
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
                        work.around(self, c);
                    }
                }
                if work.queue.is_empty() {
                    let pass =
                        BlockPass { order: &order, starts: None, schedule: Schedule::Sequential, obj, cache: None };
                    let blocks = self.block_moves(assign, &pass, None, &mut |_, _| true, &mut |run| {
                        run.iter().for_each(|&c| work.around(self, c))
                    });
                    moves += blocks;
                    if blocks == 0 || moves > cap {
                        return moves;
                    }
                }
            }
        }
    }

    /// The sequential climb's pass of block moves: the runs that hold an op queued since the
    /// last pass (`work.hot`, cleared for the next), each op around a run that moved queued
    /// again. Returns how many moved.
    fn hot_blocks(
        &self,
        assign: &mut [usize],
        order: &[usize],
        obj: Objective,
        slack: Option<&mut Slack>,
        work: &mut Worklist,
    ) -> usize {
        let n = order.len();
        let was_hot = std::mem::replace(&mut work.hot, vec![false; n]);
        // the runs that hold a hot op start at most `MAX_BLOCK - 1` before it
        let mut near_hot = vec![false; n];
        for (at, _) in order.iter().enumerate().filter(|&(_, &c)| was_hot[c]) {
            near_hot[at.saturating_sub(Self::MAX_BLOCK - 1)..=at].fill(true);
        }
        let starts: Vec<usize> = (0..n).filter(|&at| near_hot[at]).collect();
        let pass = BlockPass { order, starts: Some(&starts), schedule: Schedule::Sequential, obj, cache: None };
        self.block_moves(assign, &pass, slack, &mut |_, run| run.iter().any(|&c| was_hot[c]), &mut |run| {
            run.iter().for_each(|&c| work.around(self, c))
        })
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
}

/// The sequential climb's worklist: the ops whose best move a move may have changed, each
/// queued once, and those queued since the last pass of block moves (`hot`): only runs holding
/// one are tried (from the DP's optimum, a run whose ops and neighbours it priced exactly cannot
/// improve on it: there its figure is the evaluator's, which it minimised).
struct Worklist {
    queue: VecDeque<usize>,
    queued: Vec<bool>,
    hot: Vec<bool>,
}

impl Worklist {
    /// The worklist a climb over `order` starts with: every op, or the ops `inexact` marks and
    /// their neighbours; and per op whether it is among them.
    fn start(p: &Problem, order: &[usize], inexact: Option<&[bool]>) -> (Self, Vec<bool>) {
        let n = order.len();
        let mut work = Worklist { queue: VecDeque::new(), queued: vec![false; n], hot: vec![false; n] };
        let mut start = vec![inexact.is_none(); n];
        for c in order.iter().copied().filter(|&c| inexact.is_some_and(|x| x[c])) {
            start[c] = true;
            p.neighbours(c).for_each(|x| start[x] = true);
        }
        for &c in order.iter().filter(|&&c| start[c]) {
            work.hot[c] = true;
            work.queued[c] = true;
            work.queue.push_back(c);
        }
        (work, start)
    }

    /// Queue every op within two links of `c`: a move's price reads the shares of the op and
    /// its neighbours, and each share reads that op's neighbours' PUs (transfers, savings), so
    /// those are exactly the ops whose best move a move of `c` can change.
    fn around(&mut self, p: &Problem, c: usize) {
        let mut touch = |x: usize| {
            self.hot[x] = true;
            if !self.queued[x] {
                self.queued[x] = true;
                self.queue.push_back(x);
            }
        };
        touch(c);
        for x in p.neighbours(c) {
            touch(x);
            p.neighbours(x).for_each(&mut touch);
        }
    }
}
