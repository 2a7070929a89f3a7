//! Hill climbing on one wide parallel phase (more than [`WIDE_PHASE`] branches) with moves
//! priced incrementally: a move touches one branch, so only that branch's ops, the loads of the
//! PUs they leave and join, and the ops outside the phase they exchange data with are priced
//! again, not the whole phase.
//!
//! The phase's span is priced by its bound under the evaluator's list scheduling: no PU finishes
//! before it has run its load, no two PUs sharing hardware before both have, and no branch
//! before its ops one after another. With many more branches than PUs the list schedule is within one
//! op of that bound. Energy is exact (a sum over the ops). Where a move changes whether another
//! branch shares a PU, every branch's contention factor is priced again (rare: a PU gaining its
//! first or second branch, or losing it). The climb's result is kept only when the evaluator
//! says the whole plan got better.

use std::collections::BTreeMap;

use crate::{Objective, Problem, Schedule};

/// Phases of more branches than this (and more than [`EXACT_MOVES_LIMIT`] ops) are climbed by
/// [`Problem::climb_wide`] under a parallel schedule, instead of by moves each simulating the
/// whole phase again.
pub const WIDE_PHASE: usize = 16;

/// Phases of at most this many ops are climbed by moves under the evaluator (each simulating
/// the phase again) however many branches they have: there the list schedule can be well above
/// the loads' bound (PUs sharing hardware), and such moves are still affordable.
pub const EXACT_MOVES_LIMIT: usize = 512;

/// The weight of the loads' spread in a wide phase's latency price.
const TIE_BREAK: f64 = 0.01;

/// A wide phase's priced state under one assignment.
struct Priced {
    /// Per op of the phase (by position in `ops`): its duration.
    dur: Vec<f64>,
    /// Per branch: its ops one after another, and how many of its ops sit on each PU.
    len: Vec<f64>,
    uses: Vec<Vec<u32>>,
    /// Per PU: how many branches use it, the time its ops take, their energy.
    users: Vec<usize>,
    load: Vec<f64>,
    energy: Vec<f64>,
    /// Branch lengths as a multiset (bits of the non-negative length -> count).
    lens: BTreeMap<u64, usize>,
}

impl Priced {
    /// The longest branch.
    fn longest(&self) -> f64 {
        self.lens.keys().next_back().map_or(0.0, |&b| f64::from_bits(b))
    }
}

/// Branches per PU after one branch's ops per PU went from `was` to `is`.
fn recount(users: &mut [usize], was: &[u32], is: &[u32]) {
    for ((n, &a), &b) in users.iter_mut().zip(was).zip(is) {
        *n = *n - (a > 0) as usize + (b > 0) as usize;
    }
}

impl Problem {
    /// Whether phase `pi` is climbed by [`Problem::climb_wide`] under a parallel schedule.
    pub(crate) fn is_wide(&self, pi: usize) -> bool {
        self.phases[pi].len() > WIDE_PHASE
            && self.segment_cost.is_empty()
            && self.phases[pi].iter().map(Vec::len).sum::<usize>() > EXACT_MOVES_LIMIT
    }

    /// The contention factor of an op of branch `b` on PU `j`: the worst SF against a PU some
    /// other branch uses (`users` counts branch `b` where `uses_b` says it uses a PU).
    fn wide_factor(&self, users: &[usize], uses_b: &[u32], j: usize) -> f64 {
        (0..self.pus())
            .filter(|&o| o != j && !self.exclusive[j][o])
            .filter(|&o| users[o] > (uses_b[o] > 0) as usize)
            .map(|o| self.sf[j][o])
            .fold(1.0, f64::max)
    }

    /// Branch `b`'s ops' durations under `assign`, as the evaluator's `run_phase` computes them
    /// (transfers, saving, contention), given how many branches use each PU.
    fn wide_branch(&self, assign: &[usize], branch: &[usize], users: &[usize], uses_b: &[u32], dur: &mut [f64]) {
        for (d, &c) in dur.iter_mut().zip(branch) {
            let j = assign[c];
            let w = self.w[c][j].unwrap_or(f64::INFINITY);
            let (i, o) = self.transfers(assign, c);
            let f = self.wide_factor(users, uses_b, j);
            *d = i + (w - self.saved(assign, c, Schedule::Parallel)) * f + o;
        }
    }

    fn wide_price(&self, assign: &[usize], pi: usize) -> Priced {
        let (k, phase) = (self.pus(), &self.phases[pi]);
        let uses: Vec<Vec<u32>> = phase
            .iter()
            .map(|b| {
                let mut u = vec![0u32; k];
                b.iter().for_each(|&c| u[assign[c]] += 1);
                u
            })
            .collect();
        let mut users = vec![0usize; k];
        uses.iter().for_each(|u| u.iter().zip(&mut users).for_each(|(&x, n)| *n += (x > 0) as usize));
        let mut p = Priced {
            dur: vec![0.0; phase.iter().map(Vec::len).sum()],
            len: vec![0.0; phase.len()],
            uses,
            users,
            load: vec![0.0; k],
            energy: vec![0.0; k],
            lens: BTreeMap::new(),
        };
        let mut at = 0;
        for (bi, b) in phase.iter().enumerate() {
            let dur = &mut p.dur[at..at + b.len()];
            self.wide_branch(assign, b, &p.users, &p.uses[bi], dur);
            for (&c, &d) in b.iter().zip(dur.iter()) {
                p.load[assign[c]] += d;
                p.energy[assign[c]] += d * self.power[c][assign[c]];
            }
            p.len[bi] = dur.iter().sum();
            *p.lens.entry(p.len[bi].to_bits()).or_insert(0) += 1;
            at += b.len();
        }
        p
    }

    /// The phase's surrogate objective from per-PU loads and energies and its longest branch.
    fn wide_value(&self, load: &[f64], energy: &[f64], longest: f64, obj: Objective) -> f64 {
        match obj {
            Objective::Energy => energy.iter().sum(),
            Objective::Latency => {
                // two PUs sharing hardware run one after the other: their loads add up
                let k = self.pus();
                let pairs = (0..k).flat_map(|j| (j + 1..k).map(move |o| (j, o)));
                let shared = pairs.filter(|&(j, o)| self.exclusive[j][o]).map(|(j, o)| load[j] + load[o]);
                let span = load.iter().copied().chain(shared).fold(longest, f64::max);
                // where two PUs tie for the span no single move lowers it: a little of the
                // loads' spread breaks the tie towards balance
                span + TIE_BREAK * load.iter().map(|l| l * l).sum::<f64>().sqrt()
            }
        }
    }

    /// What the ops outside phase `pi` exchanging data with `branch` contribute (their
    /// transfers change with its PUs); None if one sits in another phase of several branches
    /// (then the branch is left alone: its price is not local).
    // in the climb's loop over candidates: kept inlined there, as when it was written inline
    #[inline(always)]
    fn wide_outside(&self, assign: &[usize], pi: usize, branch: &[usize], obj: Objective) -> Option<f64> {
        let mut total = 0.0;
        for &c in branch {
            for &x in self.preds[c].iter().chain(&self.succs[c]) {
                let px = self.place[x].0;
                if px == pi {
                    continue;
                }
                if self.phases[px].len() > 1 {
                    return None;
                }
                total += self.contribution(assign, x, Schedule::Parallel, obj);
            }
        }
        Some(total)
    }

    /// Climb wide phase `pi` under a parallel schedule (the rest as in `assign`): every branch
    /// in turn moves whole to one PU, or one of its ops to another PU, where that lowers the
    /// phase's price; until nothing moves. Kept only if the evaluator's objective drops; returns
    /// the moves kept.
    pub(crate) fn climb_wide(&self, assign: &mut [usize], pi: usize, obj: Objective) -> usize {
        const MAX_PASSES: usize = 50;
        let phase = &self.phases[pi];
        let full = |a: &[usize]| self.evaluate(a, Schedule::Parallel).map_or(f64::INFINITY, |t| t.objective(obj));
        let before_all = full(assign);
        let start: Vec<usize> = phase.iter().flatten().map(|&c| assign[c]).collect();
        // from one PU, a branch moved alone to another slows every other by contention and no
        // single move pays: the climb starts from the branches spread over the PUs where that
        // is cheaper
        let mut moves = 0;
        if let Some(spread) = self.wide_spread(assign, pi, obj)
            && self.wide_total(&spread, pi, obj) < self.wide_total(assign, pi, obj) * (1.0 - 1e-9)
        {
            assign.copy_from_slice(&spread);
            moves += 1;
        }
        let mut climb = WideClimb::new(self, assign, pi, obj);
        for _ in 0..MAX_PASSES {
            let mut moved = 0;
            for bi in 0..phase.len() {
                if climb.branch_move(assign, bi) {
                    moved += 1;
                }
            }
            moves += moved;
            if moved == 0 {
                break;
            }
        }
        if moves > 0 && full(assign) >= before_all * (1.0 - 1e-12) {
            // the price's bound and the list schedule disagree here: keep the plan as it was
            phase.iter().flatten().zip(&start).for_each(|(&c, &j)| assign[c] = j);
            return 0;
        }
        moves
    }
}

impl Problem {
    /// The price a wide phase's climb lowers ([`Problem::wide_value`]) with what the ops outside
    /// the phase exchanging data with it contribute, each once.
    fn wide_total(&self, assign: &[usize], pi: usize, obj: Objective) -> f64 {
        let st = self.wide_price(assign, pi);
        let mut outside: Vec<usize> = self.phases[pi]
            .iter()
            .flatten()
            .flat_map(|&c| self.preds[c].iter().chain(&self.succs[c]).copied())
            .filter(|&x| self.place[x].0 != pi)
            .collect();
        outside.sort_unstable();
        outside.dedup();
        let shares: f64 = outside.iter().map(|&x| self.contribution(assign, x, Schedule::Parallel, obj)).sum();
        self.wide_value(&st.load, &st.energy, st.longest(), obj) + shares
    }

    /// `assign` with wide phase `pi`'s branches spread over the PUs for latency: each whole on
    /// one PU, the longest first, where the PUs' loads grow least (every PU priced as if the
    /// others were busy: the factors a spread plan pays); None for energy. Branches the climb
    /// leaves alone (see [`Problem::wide_outside`]) or that run whole nowhere stay.
    fn wide_spread(&self, assign: &[usize], pi: usize, obj: Objective) -> Option<Vec<usize>> {
        if obj != Objective::Latency {
            return None;
        }
        let k = self.pus();
        let busy = vec![2usize; k];
        let mut spread = assign.to_vec();
        let mut loads = vec![0.0; k];
        let mut dur = vec![];
        // per branch that moves: its length whole on each PU (infinite where it cannot run)
        let mut whole: Vec<(usize, Vec<f64>)> = vec![];
        for (bi, b) in self.phases[pi].iter().enumerate() {
            let mut lens = vec![f64::INFINITY; k];
            let local = self.wide_outside(assign, pi, b, obj).is_some();
            for (j, len) in lens.iter_mut().enumerate().filter(|_| local) {
                if b.iter().any(|&c| self.w[c][j].is_none()) {
                    continue;
                }
                b.iter().for_each(|&c| spread[c] = j);
                let mut uses = vec![0u32; k];
                uses[j] = b.len() as u32;
                dur.resize(b.len(), 0.0);
                self.wide_branch(&spread, b, &busy, &uses, &mut dur);
                *len = dur.iter().sum();
            }
            b.iter().for_each(|&c| spread[c] = assign[c]);
            if lens.iter().all(|l| l.is_infinite()) {
                let uses = self.branch_uses(assign, b);
                dur.resize(b.len(), 0.0);
                self.wide_branch(assign, b, &busy, &uses, &mut dur);
                b.iter().zip(&dur).for_each(|(&c, &d)| loads[assign[c]] += d);
            } else {
                whole.push((bi, lens));
            }
        }
        let least = |lens: &[f64]| lens.iter().copied().fold(f64::INFINITY, f64::min);
        whole.sort_by(|a, b| least(&b.1).total_cmp(&least(&a.1)).then(a.0.cmp(&b.0)));
        for (bi, lens) in whole {
            let after = |j: usize, loads: &mut [f64]| {
                loads[j] += lens[j];
                let v = self.busiest(loads);
                loads[j] -= lens[j];
                (v, lens[j])
            };
            let finite = (0..k).filter(|&j| lens[j].is_finite());
            let j = finite.min_by(|&a, &b| {
                after(a, &mut loads).partial_cmp(&after(b, &mut loads)).unwrap_or(std::cmp::Ordering::Equal)
            })?;
            loads[j] += lens[j];
            self.phases[pi][bi].iter().for_each(|&c| spread[c] = j);
        }
        Some(spread)
    }

    /// How many of `branch`'s ops sit on each PU under `assign`.
    fn branch_uses(&self, assign: &[usize], branch: &[usize]) -> Vec<u32> {
        let mut uses = vec![0u32; self.pus()];
        branch.iter().for_each(|&c| uses[assign[c]] += 1);
        uses
    }
}

/// One climb of a wide phase ([`Problem::climb_wide`]): the phase's priced state and its price,
/// and the scratch of the moves it prices.
struct WideClimb<'a> {
    p: &'a Problem,
    pi: usize,
    obj: Objective,
    /// Per branch, where its ops' durations start in `st.dur`.
    offsets: Vec<usize>,
    st: Priced,
    value: f64,
    dur: Vec<f64>,
    uses_new: Vec<u32>,
}

/// The phase without one branch (the one a move would move): the PUs' loads and energies, the
/// longest other branch, and what the ops outside the phase exchanging data with the branch
/// contribute now ([`Problem::wide_outside`]).
struct Without {
    load: Vec<f64>,
    energy: Vec<f64>,
    longest: f64,
    outside: f64,
}

impl<'a> WideClimb<'a> {
    fn new(p: &'a Problem, assign: &[usize], pi: usize, obj: Objective) -> Self {
        let offsets: Vec<usize> = p.phases[pi]
            .iter()
            .scan(0, |at, b| {
                let o = *at;
                *at += b.len();
                Some(o)
            })
            .collect();
        let st = p.wide_price(assign, pi);
        let value = p.wide_value(&st.load, &st.energy, st.longest(), obj);
        WideClimb { p, pi, obj, offsets, st, value, dur: vec![], uses_new: vec![0; p.pus()] }
    }

    /// Move branch `bi` whole to one PU, or one of its ops to another PU, where that most lowers
    /// the phase's price; true if it moved. A branch some of whose outside neighbours sit in
    /// another phase of several branches stays.
    fn branch_move(&mut self, assign: &mut [usize], bi: usize) -> bool {
        let p = self.p;
        let b = &p.phases[self.pi][bi];
        let Some(outside) = p.wide_outside(assign, self.pi, b, self.obj) else { return false };
        let current: Vec<usize> = b.iter().map(|&c| assign[c]).collect();
        let without = self.without(bi, &current, outside);
        let best = self.best_candidate(assign, bi, &current, &without);
        let chosen = best.as_ref().unwrap_or(&current);
        b.iter().zip(chosen).for_each(|(&c, &j)| assign[c] = j);
        let Some(chosen) = best else { return false };
        self.moved(assign, bi, &chosen, without);
        self.value = p.wide_value(&self.st.load, &self.st.energy, self.st.longest(), self.obj);
        true
    }

    /// The phase without branch `bi` (now on `current`), whose outside neighbours contribute
    /// `outside`.
    fn without(&self, bi: usize, current: &[usize], outside: f64) -> Without {
        let (p, st) = (self.p, &self.st);
        let b = &p.phases[self.pi][bi];
        let old_dur = &st.dur[self.offsets[bi]..self.offsets[bi] + b.len()];
        let mut load = st.load.clone();
        let mut energy = st.energy.clone();
        for ((&c, &d), &j) in b.iter().zip(old_dur).zip(current) {
            load[j] -= d;
            energy[j] -= d * p.power[c][j];
        }
        let key = st.len[bi].to_bits();
        let longest = match st.lens.iter().next_back() {
            Some((&top, &n)) if top != key || n > 1 => f64::from_bits(top),
            _ => st.lens.range(..key).next_back().map_or(0.0, |(&b, _)| f64::from_bits(b)),
        };
        Without { load, energy, longest, outside }
    }

    /// Of branch `bi` whole on each PU and each of its ops alone on each other PU, the one that
    /// most lowers the phase's price with its outside neighbours'; None where none does.
    /// Leaves `assign` at the last one tried.
    fn best_candidate(
        &mut self,
        assign: &mut [usize],
        bi: usize,
        current: &[usize],
        without: &Without,
    ) -> Option<Vec<usize>> {
        let (p, k) = (self.p, self.p.pus());
        let b = &p.phases[self.pi][bi];
        let mut candidates: Vec<Vec<usize>> = (0..k).map(|j| vec![j; b.len()]).collect();
        for i in 0..b.len() {
            for j in (0..k).filter(|&j| j != current[i]) {
                let mut c = current.to_vec();
                c[i] = j;
                candidates.push(c);
            }
        }
        let tolerance = 1e-9 * self.value.abs().max(1.0);
        let mut best: Option<(f64, Vec<usize>)> = None;
        for cand in candidates {
            if cand == current || b.iter().zip(&cand).any(|(&c, &j)| p.w[c][j].is_none()) {
                continue;
            }
            b.iter().zip(&cand).for_each(|(&c, &j)| assign[c] = j);
            let v = self.price(assign, bi, &cand, without);
            let outside = p.wide_outside(assign, self.pi, b, self.obj).unwrap_or(f64::INFINITY);
            let delta = (v - self.value) + (outside - without.outside);
            if delta < best.as_ref().map_or(0.0, |x| x.0) - tolerance {
                best = Some((delta, cand));
            }
        }
        best.map(|(_, cand)| cand)
    }

    /// Count into `uses_new` how many of branch `bi`'s ops sit on each PU under `pus`; whether
    /// that changes another branch's view of who shares a PU (then every factor changes).
    // (in the loop over candidates, as `wide_outside`)
    #[inline(always)]
    fn recount_flips(&mut self, bi: usize, pus: &[usize]) -> bool {
        self.uses_new.iter_mut().for_each(|u| *u = 0);
        pus.iter().for_each(|&j| self.uses_new[j] += 1);
        let st = &self.st;
        st.uses[bi].iter().zip(&self.uses_new).zip(&st.users).any(|((&was, &is), &users)| {
            let (was, is) = (was > 0, is > 0);
            was != is && users - was as usize <= 1
        })
    }

    /// The phase's price with branch `bi` on `cand` (as `assign` has it).
    fn price(&mut self, assign: &[usize], bi: usize, cand: &[usize], without: &Without) -> f64 {
        let p = self.p;
        let b = &p.phases[self.pi][bi];
        if self.recount_flips(bi, cand) {
            let q = p.wide_price(assign, self.pi);
            return p.wide_value(&q.load, &q.energy, q.longest(), self.obj);
        }
        let mut users = self.st.users.clone();
        recount(&mut users, &self.st.uses[bi], &self.uses_new);
        self.dur.resize(b.len(), 0.0);
        p.wide_branch(assign, b, &users, &self.uses_new, &mut self.dur);
        let (mut l, mut e) = (without.load.clone(), without.energy.clone());
        for ((&c, &d), &j) in b.iter().zip(&self.dur).zip(cand) {
            l[j] += d;
            e[j] += d * p.power[c][j];
        }
        p.wide_value(&l, &e, without.longest.max(self.dur.iter().sum()), self.obj)
    }

    /// The priced state after branch `bi` moved to `chosen` (as `assign` has it), from the
    /// phase `without` it.
    fn moved(&mut self, assign: &[usize], bi: usize, chosen: &[usize], without: Without) {
        let p = self.p;
        let b = &p.phases[self.pi][bi];
        if self.recount_flips(bi, chosen) {
            self.st = p.wide_price(assign, self.pi);
            return;
        }
        // only branch b changed: its durations, its length, its PUs' loads
        let Without { mut load, mut energy, .. } = without;
        let st = &mut self.st;
        recount(&mut st.users, &st.uses[bi], &self.uses_new);
        st.uses[bi].copy_from_slice(&self.uses_new);
        let slot = &mut st.dur[self.offsets[bi]..self.offsets[bi] + b.len()];
        p.wide_branch(assign, b, &st.users, &st.uses[bi], slot);
        for ((&c, &d), &j) in b.iter().zip(slot.iter()).zip(chosen) {
            load[j] += d;
            energy[j] += d * p.power[c][j];
        }
        (st.load, st.energy) = (load, energy);
        let key = st.len[bi].to_bits();
        match st.lens.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                st.lens.remove(&key);
            }
        }
        st.len[bi] = slot.iter().sum();
        *st.lens.entry(st.len[bi].to_bits()).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use crate::{Mode, OrderLinks, Problem, SearchConfig, best_mapping};

    /// One fork, `width` branches of 6 ops costing 10 µs on each of 3 PUs, one join; a PU slows
    /// by 1.1 while another runs a branch, and nothing pays a transfer.
    fn fork_join(width: usize) -> Problem {
        let n = 2 + 6 * width;
        let mut phases = vec![vec![vec![0]]];
        phases.push((0..width).map(|b| (1 + 6 * b..7 + 6 * b).collect()).collect());
        phases.push(vec![vec![n - 1]]);
        let (mut preds, mut succs) = (vec![vec![]; n], vec![vec![]; n]);
        let mut link = |a: usize, b: usize| {
            preds[b].push(a);
            succs[a].push(b);
        };
        for b in &phases[1] {
            link(0, b[0]);
            b.windows(2).for_each(|w| link(w[0], w[1]));
            link(b[5], n - 1);
        }
        let mut place = vec![(0, 0); n];
        for (pi, phase) in phases.iter().enumerate() {
            for (bi, b) in phase.iter().enumerate() {
                b.iter().for_each(|&c| place[c] = (pi, bi));
            }
        }
        let links = OrderLinks::new(&phases, &place);
        Problem {
            w: vec![vec![Some(10.0); 3]; n],
            h2d: vec![vec![0.0; 3]; n],
            d2h: vec![vec![0.0; 3]; n],
            power: vec![vec![1.0; 3]; n],
            accelerator: vec![false, true, true],
            preds,
            succs,
            from_host: (0..n).map(|c| c == 0).collect(),
            to_host: (0..n).map(|c| c == n - 1).collect(),
            sf: (0..3).map(|i| (0..3).map(|j| if i == j { 1.0 } else { 1.1 }).collect()).collect(),
            exclusive: vec![vec![false; 3]; 3],
            phases,
            place,
            prev: links.prev,
            next: links.next,
            joins_in_parallel: links.joins_in_parallel,
            saving: vec![vec![0.0; 3]; n],
            segment_cost: Default::default(),
            launch: vec![],
            progress: Default::default(),
        }
    }

    /// From every branch on one PU (each branch's own optimum, as the per-branch DP ties), a
    /// branch moved alone to another PU slows all the others: the wide climb spreads the
    /// branches first, and the plan is close to a third of the single PU's.
    #[test]
    fn a_wide_phase_on_one_pu_is_spread() {
        let p = fork_join(120);
        assert!(p.is_wide(1));
        let cfg = SearchConfig { mode: Mode::Parallel, ..Default::default() };
        let m = best_mapping(&p, &cfg).expect("every op runs somewhere");
        let plan = p.evaluate(&m.assign, m.schedule).expect("runs").latency_us;
        let single = p.whole_on(0).expect("runs").latency_us;
        let third = 20.0 + 120.0 * 60.0 * 1.1 / 3.0;
        assert!(plan <= third * 1.01, "plan {plan} µs, single PU {single} µs, spread {third} µs");
    }
}
