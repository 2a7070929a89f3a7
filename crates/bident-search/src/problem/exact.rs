//! Small phases of several branches solved exactly: every assignment of their ops, by an odometer
//! or, under a parallel schedule, by a depth-first search that skips what its bound rules out.

use super::{Problem, Schedule};
use crate::Objective;

impl Problem {
    /// Under a parallel schedule, phases of several branches with at most this many assignments
    /// (of their ops to PUs that can run them) are solved exactly: 3^10, so a phase of ten ops
    /// on three PUs (ViT's Q/K/V branches) is. Each assignment costs one local evaluation of the
    /// phase and its neighbours, a few microseconds.
    pub const EXACT_PHASE_LIMIT: usize = 59_049;

    /// The limit under a sequential schedule (there a phase's ops add up, and the DP and block
    /// moves see most of it), and where measured runs make every local evaluation price the
    /// runs around the phase, which can be as long as the plan ([`Problem::local_measured`]).
    const EXACT_PHASE_LIMIT_SMALL: usize = 4096;

    /// Whether phase `pi` has several branches and more assignments than a parallel climb
    /// solves exactly ([`Problem::exact_phase`]), and is not climbed as a wide phase.
    pub(crate) fn hard_phase(&self, pi: usize) -> bool {
        let phase = &self.phases[pi];
        let limit = if self.segment_cost.is_empty() { Self::EXACT_PHASE_LIMIT } else { Self::EXACT_PHASE_LIMIT_SMALL };
        let fits = phase.iter().flatten().try_fold(1usize, |acc, &c| {
            acc.checked_mul(self.w[c].iter().filter(|w| w.is_some()).count()).filter(|&n| n <= limit)
        });
        phase.len() > 1 && fits.is_none() && !self.is_wide(pi)
    }

    /// Solve a phase of several branches exactly (every assignment of its ops, the rest fixed)
    /// when it is small enough; true if its ops moved.
    pub(super) fn exact_phase(&self, assign: &mut [usize], pi: usize, schedule: Schedule, obj: Objective) -> bool {
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
