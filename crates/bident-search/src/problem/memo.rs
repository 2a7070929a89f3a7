//! What a parallel climb keeps between moves: its phases' spans and bounds at the current
//! assignment ([`Spans`]), and the phases' objectives by what they read, for a whole search
//! ([`PhaseMemo`]).

use std::cell::Cell;
use std::collections::HashMap;

use super::{Problem, Schedule};
use crate::Objective;

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
    pub(super) fn new(p: &Problem, memo: &'m PhaseMemo) -> Self {
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
    pub(super) fn forget(&self, p: &Problem, c: usize) {
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
    pub(super) fn prepare(&self, p: &Problem, assign: &[usize], ops: &[usize], obj: Objective) -> f64 {
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
    pub(super) fn price(&self, p: &Problem, assign: &[usize], obj: Objective, threshold: f64) -> Option<f64> {
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
