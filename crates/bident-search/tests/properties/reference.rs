//! The references the heuristics are checked against where exhaustive search is out of reach:
//! an iterated local search under the evaluator ([`reference`]), and the evaluator's list
//! scheduling as first written ([`reference_starts`]).

use bident_search::{Objective, Problem, Schedule};

use crate::instances::rng;

/// How hard [`reference`] searches: kicks per start, random starts, longest run moved as one.
#[derive(Clone, Copy)]
pub struct Budget {
    pub kicks: usize,
    pub random_starts: usize,
    pub max_block: usize,
}

/// The reference for the heuristics: an iterated local search under the evaluator. Every
/// start (`starts`, each single PU that runs every op, `random_starts` random mappings) is
/// descended by moves of single ops, of runs of 2-`max_block` neighbours in the order and
/// (parallel) of whole branches to one PU; the best is then kicked `kicks` times (a random run of
/// 3-12 neighbours reassigned at random, descended again, kept when better). Returns the best
/// value under `schedule`, by construction never above a start's. A move is priced from the
/// phases it touches (those of its ops, their producers and consumers, and the op after each:
/// nothing else's cost depends on its ops' PUs), a descent retries only the moves touching a
/// phase that changed, and every descent's result is checked against the evaluator.
pub fn reference(
    p: &Problem,
    schedule: Schedule,
    obj: Objective,
    starts: &[Vec<usize>],
    budget: Budget,
    seed: u64,
) -> f64 {
    let Budget { kicks, random_starts, max_block } = budget;
    let mut r = rng(seed);
    let (n, k) = (p.ops(), p.pus());
    let order: Vec<usize> = p.order().collect();
    let moves = Moves::new(p, (schedule, obj), &order, max_block);
    let runs_on = |c: usize, j: usize| p.w[c][j].is_some();
    let random_pu = |c: usize, r: &mut dyn FnMut() -> f64| loop {
        let j = ((r() * k as f64) as usize).min(k - 1);
        if runs_on(c, j) {
            break j;
        }
    };
    let mut all_starts: Vec<Vec<usize>> = starts.to_vec();
    all_starts.extend((0..k).filter(|&j| (0..n).all(|c| runs_on(c, j))).map(|j| vec![j; n]));
    for _ in 0..random_starts {
        all_starts.push((0..n).map(|c| random_pu(c, &mut r)).collect());
    }
    let groups = moves.groups.len();
    let (mut a, mut v) = (vec![], f64::INFINITY);
    for mut s in all_starts {
        let mut sv = moves.value(&s);
        // every move, from a random one on, so that starts descend differently
        let from = (r() * groups as f64) as usize;
        moves.descend(&mut s, &mut sv, (from..groups).chain(0..from).collect());
        if sv < v {
            (a, v) = (s, sv);
        }
    }
    for _ in 0..kicks {
        let len = 3 + (r() * 10.0) as usize;
        let at = (r() * n.saturating_sub(len) as f64) as usize;
        let kicked = &order[at..(at + len).min(n)];
        let mut b = a.clone();
        kicked.iter().for_each(|&c| b[c] = random_pu(c, &mut r));
        let mut bv = moves.value(&b);
        let near = phases_near(p, kicked.iter().copied());
        moves.descend(&mut b, &mut bv, near.iter().flat_map(|&pi| moves.by_phase[pi].iter().copied()).collect());
        if bv < v {
            (a, v) = (b, bv);
        }
    }
    v
}

/// The moves of [`reference`]'s descents: groups of ops each moved to one PU as a whole, and the
/// phases each move touches.
struct Moves<'a> {
    p: &'a Problem,
    schedule: Schedule,
    obj: Objective,
    /// Single ops, runs of neighbours in the order, and (parallel) whole branches.
    groups: Vec<Vec<usize>>,
    /// Per group, the phases whose price its move changes ([`phases_near`]).
    touched: Vec<Vec<usize>>,
    /// Per phase, the groups touching it.
    by_phase: Vec<Vec<usize>>,
}

impl<'a> Moves<'a> {
    fn new(p: &'a Problem, (schedule, obj): (Schedule, Objective), order: &[usize], max_block: usize) -> Self {
        let mut groups: Vec<Vec<usize>> = order.iter().map(|&c| vec![c]).collect();
        for len in 2..=max_block {
            groups.extend(order.windows(len).map(<[usize]>::to_vec));
        }
        if schedule == Schedule::Parallel {
            groups.extend(p.phases.iter().filter(|ph| ph.len() > 1).flatten().cloned());
        }
        let touched: Vec<Vec<usize>> = groups.iter().map(|g| phases_near(p, g.iter().copied())).collect();
        let mut by_phase: Vec<Vec<usize>> = vec![vec![]; p.phases.len()];
        for (gi, t) in touched.iter().enumerate() {
            t.iter().for_each(|&pi| by_phase[pi].push(gi));
        }
        Moves { p, schedule, obj, groups, touched, by_phase }
    }

    /// The evaluator's objective of `a`.
    fn value(&self, a: &[usize]) -> f64 {
        self.p.evaluate(a, self.schedule).map_or(f64::INFINITY, |t| t.objective(self.obj))
    }

    /// The best move of group `gi`, made, `v` kept up to date; whether it improved.
    fn try_group(&self, a: &mut [usize], v: &mut f64, gi: usize) -> bool {
        let (p, g) = (self.p, &self.groups[gi]);
        let old: Vec<usize> = g.iter().map(|&c| a[c]).collect();
        let sum = |a: &[usize]| {
            self.touched[gi].iter().map(|&pi| p.phase_objective(a, pi, self.schedule, self.obj)).sum::<f64>()
        };
        let before = sum(a);
        let mut best = (-1e-12 * v.abs().max(1.0), None);
        for j in (0..p.pus()).filter(|&j| g.iter().all(|&c| p.w[c][j].is_some()) && !old.iter().all(|&o| o == j)) {
            g.iter().for_each(|&c| a[c] = j);
            let d = sum(a) - before;
            if d < best.0 {
                best = (d, Some(j));
            }
        }
        match best {
            (d, Some(j)) => {
                g.iter().for_each(|&c| a[c] = j);
                *v += d;
                true
            }
            (_, None) => {
                g.iter().zip(&old).for_each(|(&c, &o)| a[c] = o);
                false
            }
        }
    }

    /// Descend from `a` (at `v`) trying the groups `first`, then those touching a phase a move
    /// changed, until none improves; `v` checked against the evaluator and set to its figure.
    fn descend(&self, a: &mut [usize], v: &mut f64, first: Vec<usize>) {
        let mut queued = vec![false; self.groups.len()];
        let mut queue = std::collections::VecDeque::new();
        for gi in first {
            if !std::mem::replace(&mut queued[gi], true) {
                queue.push_back(gi);
            }
        }
        while let Some(gi) = queue.pop_front() {
            queued[gi] = false;
            if self.try_group(a, v, gi) {
                for &g2 in self.touched[gi].iter().flat_map(|&pi| &self.by_phase[pi]) {
                    if !std::mem::replace(&mut queued[g2], true) {
                        queue.push_back(g2);
                    }
                }
            }
        }
        let exact = self.value(a);
        assert!((exact - *v).abs() <= 1e-7 * exact.abs().max(1.0), "priced {v}, the evaluator says {exact}");
        *v = exact;
    }
}

/// The phases whose price a move of `ops` changes: those of the ops, their producers and
/// consumers, and the op after each.
fn phases_near(p: &Problem, ops: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut t: Vec<usize> = vec![];
    for c in ops {
        for &x in std::iter::once(&c).chain(&p.preds[c]).chain(&p.succs[c]).chain(&p.next[c]) {
            if !t.contains(&p.place[x].0) {
                t.push(p.place[x].0);
            }
        }
    }
    t
}

/// The evaluator's list scheduling of a parallel phase, as first written (the earliest start
/// first, the lowest branch among equals, scanning every branch head per op): its starts from
/// the timeline's own durations.
pub fn reference_starts(p: &Problem, assign: &[usize], tl: &bident_search::Timeline) -> Vec<f64> {
    let mut start = tl.start.clone();
    let mut at = 0.0;
    for phase in &p.phases {
        let dur = |c: usize| {
            tl.transfer_in[c] + (p.w[c][assign[c]].expect("feasible") - tl.saved[c]) * tl.factor[c] + tl.transfer_out[c]
        };
        if phase.len() == 1 {
            for &c in &phase[0] {
                start[c] = at;
                at += dur(c);
            }
            continue;
        }
        let mut next = vec![0usize; phase.len()];
        let mut ready = vec![at; phase.len()];
        let mut pu_free = vec![at; p.pus()];
        let free = |pu_free: &[f64], j: usize| {
            (0..p.pus()).filter(|&o| o == j || p.exclusive[j][o]).map(|o| pu_free[o]).fold(at, f64::max)
        };
        let mut end = at;
        loop {
            let pick = (0..phase.len())
                .filter(|&b| next[b] < phase[b].len())
                .map(|b| (b, ready[b].max(free(&pu_free, assign[phase[b][next[b]]]))))
                .min_by(|x, y| x.1.total_cmp(&y.1));
            let Some((b, s)) = pick else { break };
            let c = phase[b][next[b]];
            start[c] = s;
            ready[b] = s + dur(c);
            pu_free[assign[c]] = s + dur(c);
            end = f64::max(end, s + dur(c));
            next[b] += 1;
        }
        at = end;
    }
    start
}
