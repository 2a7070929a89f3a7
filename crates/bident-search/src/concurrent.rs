//! Two models at once (paper 3.3.3): each model runs its ops one at a time in its phased order,
//! and the search interleaves the two streams across the PUs.
//!
//! A plan is a sequence of steps; a step advances model A, model B, or both (the joint (i, j)
//! mode's three transitions; the aligned mode, for the same model twice, only advances both in
//! lockstep). The search prices a step (the paper's lockstep model):
//! - one op: its cost on its PU;
//! - two ops on different PUs: the longer of the two, each slowed by the contention factor of
//!   its PU against the other's;
//! - two ops on one PU: the co-execution costs (measured or modelled, [`CoCost`]), the step
//!   lasting until both finished.
//!
//! Transfers follow the paper's chain rule per stream: the state holds where each stream's last
//! op ran, so a stream that changes PU pays H2D into an accelerator and D2H out of one. Energy is
//! each op's time at its PU's power (two ops sharing a PU: the step's time at that PU's power).
//! The plan's reported figures come from [`evaluate`], a simulation of how the runtime runs it
//! (per-PU queues, streams otherwise independent, an op's execution slowed by SF for as long as
//! the other stream runs an op on another PU),
//! which is also what picks between the
//! search's plan and the whole-stream candidates.
//!
//! Segments (see `Plan::segments`): a stream's op right after its previous one on the same PU,
//! with nothing of the other stream run there between, is compiled together with it by the
//! runtime and costs the measured pair saving less; the state holds for each stream whether
//! that is still so ("fresh"). The state space is a DAG in (i, j), so the optimum comes from
//! dynamic programming over it: O(N_A N_B 4 K^2 (2K + K^2)) at worst, pruned exactly by a
//! lower bound on what each state still has to pay against a greedy incumbent, and by
//! dominance between the states of one (i, j).

use bident_artifact::{Artifact, ContentHash};
use serde::{Deserialize, Serialize};

use crate::{Chain, Objective, Problem, SearchError};

/// What two ops cost when they share one PU: `(co_a, co_b)` µs for A's op `i` and B's op `j` on
/// PU `pu`, each the op's time while the other runs.
pub trait CoCost {
    fn same_pu(&self, i: usize, j: usize, pu: usize, solo: (f64, f64)) -> (f64, f64);

    /// Whether `same_pu` never falls when either solo time rises. The search's pruning bound
    /// then prices two ops on one PU at their least solo times; otherwise at their transfers
    /// alone (still exact, but it prunes less).
    fn monotone(&self) -> bool {
        false
    }

    /// The most either co-run time rises per µs that either solo time does, where known. With
    /// [`CoCost::monotone`], it lets the search skip a state that a twin reached for less than
    /// the most their continuations can differ by.
    fn slope(&self) -> Option<f64> {
        None
    }
}

/// Time slicing: an op sharing a PU waits for the shorter of the two (`co(x | y) = t_x +
/// min(t_x, t_y)`), the form the fitted model takes on the measured CPU PUs; what a virtual SoC
/// uses (simulated).
pub struct TimeSlicing;

impl CoCost for TimeSlicing {
    fn same_pu(&self, _: usize, _: usize, _: usize, (a, b): (f64, f64)) -> (f64, f64) {
        (a + a.min(b), b + a.min(b))
    }

    fn monotone(&self) -> bool {
        true
    }

    /// `t_x + min(t_x, t_y)` rises by 2 per µs of `t_x`, 1 per µs of `t_y`.
    fn slope(&self) -> Option<f64> {
        Some(2.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrentMode {
    /// The same model twice, both streams advancing together.
    Aligned,
    /// Each stream advances on its own or together with the other.
    Joint,
}

/// One step of a search path: `(stream position, PU)` of A's op and of B's op, when they run.
pub type PathStep = (Option<(usize, usize)>, Option<(usize, usize)>);

/// The most states the joint search indexes (4 bytes each where it reaches them).
const MAX_STATES: usize = 100_000_000;

/// One step of a concurrent plan: the op of A and/or of B it runs, with their PUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentStep {
    /// `(op id in A, PU)`.
    pub a: Option<(u32, String)>,
    pub b: Option<(u32, String)>,
    pub start_us: f64,
    pub duration_us: f64,
}

/// A concurrent plan of two models on one SoC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentPlan {
    pub models: [(String, ContentHash); 2],
    pub soc: String,
    pub simulated: bool,
    pub pus: Vec<String>,
    pub mode: ConcurrentMode,
    pub objective: Objective,
    /// Where same-PU co-execution costs came from.
    pub co_costs: String,
    pub steps: Vec<ConcurrentStep>,
    pub predicted_us: f64,
    pub predicted_energy_uj: f64,
    /// The paper's baseline: A then B, each on its own best single PU (latency), and its energy.
    pub baseline_us: f64,
    pub baseline_energy_uj: f64,
    pub baseline: [String; 2],
    pub speedup: f64,
}

impl Artifact for ConcurrentPlan {
    const KIND: &'static str = "concurrent-plan";
    const SCHEMA_VERSION: u32 = 2;
}

/// Search the best interleaving of `a` and `b` on `k` PUs with contention `sf` (an infinite
/// factor: the two PUs share hardware and never run at once, [`Problem::interference`]) and
/// same-PU costs `co`. Returns the steps as (op of A, op of B) with PUs, and the objective value.
///
/// Exact, and pruned: a cost-to-go bounds what any state still has to pay, a greedy walk that
/// follows the bound gives an incumbent, and the DP skips every state whose cost so far plus
/// its bound exceeds the incumbent, and (where `co` is monotone) every state that a twin (the
/// same ops done, other last PUs or freshness) reached for less than the most their
/// continuations can differ by (`Joint::gaps`; with no slope for `co`, or for energy, a
/// fresher twin on the same PUs for no more). The bound is consistent (no step costs less than
/// the bound falls along it), so no state of an optimal path is skipped unless a twin as good
/// is kept: the plan's objective is the whole DP's optimum (between equal optima it may pick
/// another).
pub fn search(
    a: &Chain,
    b: &Chain,
    sf: &[Vec<f64>],
    co: &dyn CoCost,
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<Vec<PathStep>, SearchError> {
    let dp = Joint::new(a, b, sf, co, mode, obj)?;
    let h = CostToGo::new(&dp);
    let incumbent = dp.greedy(&h);
    Ok(dp.run(Some((&h, incumbent)))?.0)
}

/// The joint DP over states (i, j, last_a, last_b, fresh_a, fresh_b): i ops of A and j of B
/// done; last = k means "not started" (inputs on the host); fresh: no op of the other stream
/// ran on that stream's last PU since (so its next op there is compiled together with its last
/// one, as the runtime does).
struct Joint<'a> {
    step: Stepper<'a>,
    na: usize,
    nb: usize,
    k: usize,
    solo_allowed: bool,
}

/// One op's parts per PU (`None` where it cannot run), for each last PU and freshness of its
/// stream (`last * 2 + fresh`).
type OpParts = Vec<Vec<Option<(f64, f64)>>>;

/// A state: (i, j, last_a, last_b, fresh_a, fresh_b).
type State = (usize, usize, usize, usize, bool, bool);

impl<'a> Joint<'a> {
    fn new(
        a: &'a Chain,
        b: &'a Chain,
        sf: &'a [Vec<f64>],
        co: &'a dyn CoCost,
        mode: ConcurrentMode,
        obj: Objective,
    ) -> Result<Self, SearchError> {
        let (na, nb, k) = (a.len(), b.len(), a.pus());
        if mode == ConcurrentMode::Aligned && na != nb {
            return Err(SearchError::Check("aligned mode needs two streams of the same length".into()));
        }
        let states = (na + 1) * (nb + 1) * (k + 1) * (k + 1) * 4;
        if states > MAX_STATES {
            return Err(SearchError::TooLarge { a: na, b: nb, pus: k, states, max: MAX_STATES });
        }
        let step = Stepper::new(a, b, sf, co, obj);
        Ok(Joint { step, na, nb, k, solo_allowed: mode == ConcurrentMode::Joint })
    }

    fn idx(&self, (i, j, la, lb, fa, fb): State) -> usize {
        let kk = self.k + 1;
        ((((i * (self.nb + 1) + j) * kk + la) * kk + lb) * 2 + usize::from(fa)) * 2 + usize::from(fb)
    }

    fn decode(&self, s: usize) -> State {
        let kk = self.k + 1;
        let (fb, fa, s) = (s % 2 == 1, (s / 2) % 2 == 1, s / 4);
        let (lb, la, s) = (s % kk, (s / kk) % kk, s / kk / kk);
        (s / (self.nb + 1), s % (self.nb + 1), la, lb, fa, fb)
    }

    /// Each move out of state `s` and what it costs: A's op alone, B's alone, or both at once.
    /// `pa[x]` are A's parts on PU x after its last op and freshness; `pb[y]` B's.
    #[inline(always)]
    fn moves(&self, s: State, pa: &[Option<(f64, f64)>], pb: &[Option<(f64, f64)>], mut f: impl FnMut(State, f64)) {
        let (i, j, la, lb, fa, fb) = s;
        let step = &self.step;
        if self.solo_allowed && i < self.na {
            for (x, p) in pa.iter().enumerate() {
                if let Some((t, w)) = *p {
                    f((i + 1, j, x, lb, true, fb && lb != x), step.solo(0, i, x, t + w));
                }
            }
        }
        if self.solo_allowed && j < self.nb {
            for (y, p) in pb.iter().enumerate() {
                if let Some((t, w)) = *p {
                    f((i, j + 1, la, y, fa && la != y, true), step.solo(1, j, y, t + w));
                }
            }
        }
        if i < self.na && j < self.nb {
            for (x, a) in pa.iter().enumerate() {
                let Some(a) = *a else { continue };
                for (y, &fresh_b) in pb.iter().enumerate() {
                    // on one PU, B's op runs after A's: it cannot join B's last
                    let b = if x == y { step.parts(1, j, y, lb, false) } else { fresh_b };
                    let Some(b) = b else { continue };
                    f((i + 1, j + 1, x, y, x != y, true), step.pair(i, j, x, y, a, b));
                }
            }
        }
    }

    /// What ends the plan in state `s`: each stream's last output back to the host.
    fn tail(&self, (_, _, la, lb, _, _): State) -> f64 {
        self.step.exit(self.step.a, self.na, la) + self.step.exit(self.step.b, self.nb, lb)
    }

    /// The parts of each stream's next op in state `s`, per PU.
    fn parts_of(&self, (i, j, la, lb, fa, fb): State, pa: &mut [Option<(f64, f64)>], pb: &mut [Option<(f64, f64)>]) {
        for x in 0..self.k {
            pa[x] = if i < self.na { self.step.parts(0, i, x, la, fa) } else { None };
            pb[x] = if j < self.nb { self.step.parts(1, j, x, lb, fb) } else { None };
        }
    }

    /// The objective the DP gives `steps`, the exit included (infinite where one cannot run).
    #[cfg(test)]
    fn value(&self, steps: &[PathStep]) -> f64 {
        let (mut s, mut total) = ((0, 0, self.k, self.k, true, true), 0.0);
        let (mut pa, mut pb) = (vec![None; self.k], vec![None; self.k]);
        for &(sa, sb) in steps {
            self.parts_of(s, &mut pa, &mut pb);
            let mut found = None;
            self.moves(s, &pa, &pb, |t, c| {
                let (i, j) = (s.0 + usize::from(sa.is_some()), s.1 + usize::from(sb.is_some()));
                if (t.0, t.1) == (i, j) && sa.is_none_or(|a| a.1 == t.2) && sb.is_none_or(|b| b.1 == t.3) {
                    found = Some((t, c));
                }
            });
            let Some((t, c)) = found else { return f64::INFINITY };
            (s, total) = (t, total + c);
        }
        total + self.tail(s)
    }

    /// One path to the end: from the start, each move the one whose cost plus the bound after it
    /// is least. Its objective, the exit included (infinite when it finds no way, which the
    /// bound rules out where the DP finds one).
    fn greedy(&self, h: &CostToGo) -> f64 {
        let (mut s, mut total) = ((0, 0, self.k, self.k, true, true), 0.0);
        let (mut pa, mut pb) = (vec![None; self.k], vec![None; self.k]);
        while s.0 < self.na || s.1 < self.nb {
            self.parts_of(s, &mut pa, &mut pb);
            let mut best: Option<(State, f64, f64)> = None;
            self.moves(s, &pa, &pb, |t, c| {
                let f = c + h.at(t.0, t.1);
                if best.is_none_or(|b| f < b.2) {
                    best = Some((t, c, f));
                }
            });
            let Some((t, c, _)) = best else { return f64::INFINITY };
            (s, total) = (t, total + c);
        }
        total + self.tail(s)
    }

    /// For one stream whose next op is `i` (`i` = its length: none left), between two states
    /// of a cell alike but for that stream's last PU and freshness (`last * 2 + fresh`): at
    /// `[s * 2 (k + 1) + o]`, how much more than from state `o` any continuation can cost from
    /// state `s`. The states differ only in what the stream's next op pays (its transfers, and
    /// its saving where it joins its last op; everything after it is alike), or in the
    /// stream's exit when it is done. The op pays from `s` at most its transfers there and no
    /// saving; from `o` at least its transfers there and its saving where `o` is fresh on that
    /// PU; and a step's objective rises by at most 1 per µs of transfer and [`Joint::rise`] per
    /// µs of execution. A fresher state on the same PU costs no more where `co` is monotone
    /// (gap 0). Infinite where no bound is known: the energy objective (a step on one PU is
    /// priced at the other stream's op's power), or a `co` without a slope.
    fn gaps(&self, stream: usize, i: usize) -> Vec<f64> {
        let (k, m) = (self.k, 2 * (self.k + 1));
        let step = &self.step;
        let (ch, n) = if stream == 0 { (step.a, self.na) } else { (step.b, self.nb) };
        let monotone = step.co.monotone();
        let slope = step.co.slope().filter(|_| monotone && step.obj == Objective::Latency);
        let mut gaps = vec![f64::INFINITY; m * m];
        for (x, gap) in gaps.iter_mut().enumerate() {
            let ((ls, fs), (lo, fo)) = ((x / m / 2, (x / m) % 2 == 1), ((x % m) / 2, x % 2 == 1));
            *gap = if monotone && ls == lo && fs >= fo {
                0.0
            } else if let Some(slope) = slope {
                if i == n {
                    step.exit(ch, n, ls) - step.exit(ch, n, lo)
                } else {
                    (0..k)
                        .filter_map(|y| {
                            let (ts, _) = step.raw(stream, i, y, ls)?;
                            let (to, _) = step.raw(stream, i, y, lo)?;
                            let saved = if fo && lo == y && i > 0 { ch.saving_at(i, y) } else { 0.0 };
                            Some((ts - to).max(0.0) + self.rise(y, slope) * saved)
                        })
                        .fold(0.0, f64::max)
                }
            } else {
                f64::INFINITY
            };
        }
        gaps
    }

    /// The most a step's latency rises per µs that the execution of an op on PU `x` does: 1
    /// alone, or beside an op on a PU it shares hardware with; its contention factor beside
    /// one on another PU; `co_slope` beside one on the same PU.
    fn rise(&self, x: usize, co_slope: f64) -> f64 {
        (0..self.k)
            .filter(|&o| o != x)
            .map(|o| self.step.sf[x][o])
            .filter(|f| f.is_finite())
            .fold(co_slope.max(1.0), f64::max)
    }

    /// The DP and its plan's objective. With `prune`, it skips the states that its bound and
    /// incumbent rule out, and every state that a twin in its cell, itself expanded, reached for
    /// at least the most their continuations can differ by less ([`Joint::gaps`]): the states
    /// of a cell are expanded cheapest first. Without, it is the whole DP.
    fn run(&self, prune: Option<(&CostToGo, f64)>) -> Result<(Vec<PathStep>, f64), SearchError> {
        let (na, nb, k) = (self.na, self.nb, self.k);
        let kk = k + 1;
        // states that could still beat the incumbent; the slack absorbs rounding in the sums
        let limit = prune.map_or(f64::INFINITY, |(_, ub)| ub + 1e-9 * ub.abs());
        let bound = |i: usize, j: usize| prune.map_or(0.0, |(h, _)| h.at(i, j));
        // per state of a stream (its last PU and freshness), how much more than from each other
        // one its continuation can cost ([`Joint::gaps`]): a state that a twin in its cell
        // reached for at least that much less is skipped
        let gaps_b: Option<Vec<Vec<f64>>> = prune.map(|_| (0..=nb).map(|j| self.gaps(1, j)).collect());
        let m = 2 * kk;
        // costs of two rows of states at a time (moves reach the row or the next); where each
        // state came from, for all: 1 + which cell before it (the one before in its row, above
        // it, above and before) * states per cell + its state there, so two bytes a state
        // (zeroed memory: pages no state reaches are never touched)
        let cells = kk * kk * 4;
        if 3 * cells >= usize::from(u16::MAX) {
            return Err(SearchError::Check(format!("{k} PUs are too many for the joint search")));
        }
        let row_len = (nb + 1) * cells;
        let (mut cur, mut next) = (vec![f64::INFINITY; row_len], vec![f64::INFINITY; row_len]);
        let mut from: Vec<u16> = vec![0; (na + 1) * row_len];
        // per row i, the range of j holding a reached state
        let mut rows: Vec<(usize, usize)> = vec![(usize::MAX, 0); na + 1];
        let start = (0, 0, k, k, true, true);
        cur[self.idx(start)] = 0.0;
        rows[0] = (0, 0);
        // each stream's parts of its op `i`, per last PU and freshness (`last * 2 + fresh`): B's
        // for every op, A's for the row's
        let parts = |stream: usize, i: usize| -> OpParts {
            (0..m).map(|n| (0..k).map(|x| self.step.parts(stream, i, x, n / 2, n % 2 == 1)).collect()).collect()
        };
        let pb: Vec<OpParts> = (0..nb).map(|j| parts(1, j)).chain([vec![vec![None; k]; m]]).collect();
        // a state's place in its cell, `((la * kk + lb) * 2 + fa) * 2 + fb`, decoded:
        // (la, lb, fa, fb, la * 2 + fa, lb * 2 + fb)
        let decode: Vec<(usize, usize, bool, bool, usize, usize)> = (0..m * m)
            .map(|t| {
                let (la, lb, fa, fb) = (t / (4 * kk), (t / 4) % kk, (t / 2) % 2 == 1, t % 2 == 1);
                (la, lb, fa, fb, la * 2 + usize::from(fa), lb * 2 + usize::from(fb))
            })
            .collect();
        // a cell's states that may still win, cheapest first, and those expanded: (cost, A's
        // state, B's state)
        let mut alive: Vec<u64> = Vec::with_capacity(m * m);
        let mask = (m * m).next_power_of_two() as u64 - 1;
        let mut kept: Vec<(f64, usize, usize)> = Vec::with_capacity(m * m);
        for i in 0..=na {
            let gaps_a = prune.map(|_| self.gaps(0, i));
            let pa = if i < na { parts(0, i) } else { vec![vec![None; k]; m] };
            // B's moves alone extend the row as it goes
            let mut j = rows[i].0;
            while j <= rows[i].1.min(nb) {
                let here = bound(i, j);
                let cell = j * kk * kk * 4;
                alive.clear();
                for (t, &c0) in cur[cell..cell + m * m].iter().enumerate() {
                    if c0 != f64::INFINITY && c0 + here <= limit {
                        // costs are not negative, so their bits order them; the lowest hold
                        // the state (any order is sound, cheapest first skips the most)
                        alive.push(c0.to_bits() & !mask | t as u64);
                    }
                }
                if alive.is_empty() {
                    j += 1;
                    continue;
                }
                alive.sort_unstable();
                // the cells a move reaches, by (i' - i) * 2 + j' - j: their offsets in their
                // rows and their bounds
                let cell_of = |j: usize| j * kk * kk * 4;
                let ahead = [0, cell_of(j + 1), cell_of(j), cell_of(j + 1)];
                let bounds = [
                    0.0,
                    bound(i, (j + 1).min(nb)),
                    bound((i + 1).min(na), j),
                    bound((i + 1).min(na), (j + 1).min(nb)),
                ];
                let pb = &pb[j];
                kept.clear();
                for &key in &alive {
                    let t = (key & mask) as usize;
                    let c0 = cur[cell + t];
                    let (la, lb, fa, fb, sa, sb) = decode[t];
                    if let (Some(ga), Some(gb)) = (&gaps_a, &gaps_b) {
                        let gb = &gb[j];
                        if kept.iter().any(|&(c, ka, kb)| c + ga[ka * m + sa] + gb[kb * m + sb] <= c0) {
                            continue;
                        }
                        kept.push((c0, sa, sb));
                    }
                    let s = (i, j, la, lb, fa, fb);
                    let src = t;
                    self.moves(s, &pa[sa], &pb[sb], |t, c| {
                        let c = c0 + c;
                        // the target's cell: (i, j + 1), (i + 1, j) or (i + 1, j + 1)
                        let d = (t.0 - i) * 2 + t.1 - j;
                        let ti = ahead[d] + (t.2 * kk + t.3) * 4 + usize::from(t.4) * 2 + usize::from(t.5);
                        let slot = if t.0 == i { &mut cur[ti] } else { &mut next[ti] };
                        if c < *slot && c + bounds[d] <= limit {
                            *slot = c;
                            from[t.0 * row_len + ti] = (1 + (d - 1) * cells + src) as u16;
                            let r = &mut rows[t.0];
                            *r = (r.0.min(t.1), r.1.max(t.1));
                        }
                    });
                }
                j += 1;
            }
            if i < na {
                // row i's buffer holds the next row after it, cleared where row i reached
                let (lo, hi) = rows[i];
                if lo <= hi {
                    cur[lo * kk * kk * 4..(hi.min(nb) + 1) * kk * kk * 4].fill(f64::INFINITY);
                }
                std::mem::swap(&mut cur, &mut next);
            }
        }
        // the end: both done, each stream's last output back to the host (`cur` is row na)
        let (mut end, mut best) = (usize::MAX, f64::INFINITY);
        for la in 0..kk {
            for lb in 0..kk {
                for f in 0..4 {
                    let s = (na, nb, la, lb, f / 2 == 1, f % 2 == 1);
                    let c = cur[self.idx(s) - na * row_len] + self.tail(s);
                    if c < best {
                        (end, best) = (self.idx(s), c);
                    }
                }
            }
        }
        if end == usize::MAX {
            return Err(SearchError::Check("no concurrent schedule: an op runs on no PU".into()));
        }
        // walk back
        let (start, mut s, mut steps) = (self.idx(start), end, vec![]);
        while s != start {
            let (i, j, ..) = self.decode(s);
            let code = usize::from(from[s]) - 1;
            let (d, t) = (code / cells + 1, code % cells);
            let p = (i - d / 2) * row_len + (j - d % 2) * cells + t;
            let ((i, j, la, lb, ..), (pi, pj, ..)) = (self.decode(s), self.decode(p));
            steps.push(((i > pi).then_some((pi, la)), (j > pj).then_some((pj, lb))));
            s = p;
        }
        steps.reverse();
        Ok((steps, best))
    }
}

/// A lower bound on what is left from each (i, j) to the end, whatever PUs the streams last ran
/// on and however fresh they are: the DP over (i, j) alone, each move at the least it costs from
/// any such state (each op at its smallest transfers and execution on each PU, the PUs chosen
/// freely). It is a relaxation solved exactly, so it is consistent: no move costs less than
/// the bound falls along it.
struct CostToGo {
    nb: usize,
    /// At `i * (nb + 1) + j`.
    h: Vec<f64>,
}

impl CostToGo {
    fn new(dp: &Joint) -> Self {
        let (na, nb, k, step) = (dp.na, dp.nb, dp.k, &dp.step);
        // per stream, op and PU: the least transfers and the least execution over every last PU
        // and freshness (a pair's cost never falls when these rise, where `co` says so)
        let least = |stream: usize, n: usize| -> Vec<Option<(f64, f64)>> {
            (0..n * k)
                .map(|c| {
                    let (i, x) = (c / k, c % k);
                    (0..=k).flat_map(|last| [false, true].map(|f| step.parts(stream, i, x, last, f))).fold(
                        None,
                        |m: Option<(f64, f64)>, p| match (m, p) {
                            (Some(m), Some(p)) => Some((m.0.min(p.0), m.1.min(p.1))),
                            (m, p) => m.or(p),
                        },
                    )
                })
                .collect()
        };
        let (la, lb) = (least(0, na), least(1, nb));
        let solo = |stream: usize, i: usize, parts: &[Option<(f64, f64)>]| {
            (0..k)
                .filter_map(|x| parts[i * k + x].map(|(t, w)| step.solo(stream, i, x, t + w)))
                .fold(f64::INFINITY, f64::min)
        };
        let solo_a: Vec<f64> = (0..na).map(|i| solo(0, i, &la)).collect();
        let solo_b: Vec<f64> = (0..nb).map(|j| solo(1, j, &lb)).collect();
        let monotone = step.co.monotone();
        let latency = step.obj == Objective::Latency;
        // per stream, op, its PU x and the other's PU y (apart): the op's part of the step at its
        // least parts, as `Stepper::pair` prices it (its duration, slowed by SF unless the two
        // PUs share hardware; or its energy), at `(x * k + y) * n + i`: a row of A's op sweeps
        // B's ops on one pair of PUs
        let beside = |stream: usize, n: usize, least: &[Option<(f64, f64)>]| -> Vec<f64> {
            let ch = if stream == 0 { step.a } else { step.b };
            (0..k * k * n)
                .map(|c| {
                    let (x, y, i) = (c / (k * n), (c / n) % k, c % n);
                    let Some((t, w)) = least[i * k + x] else { return f64::INFINITY };
                    let shared = if stream == 0 { step.sf[x][y] } else { step.sf[y][x] }.is_infinite();
                    let d = t + if shared { w } else { w * step.sf[x][y] };
                    if latency { d } else { d * ch.power(i, x) }
                })
                .collect()
        };
        let (ba, bb) = (beside(0, na, &la), beside(1, nb, &lb));
        let w = nb + 1;
        let mut h = vec![f64::INFINITY; (na + 1) * w];
        h[na * w + nb] = 0.0;
        // the least a step of both streams costs, for A's op i and each of B's ops
        let mut pairs = vec![f64::INFINITY; nb];
        for i in (0..=na).rev() {
            pairs.fill(f64::INFINITY);
            for x in 0..if i < na { k } else { 0 } {
                let Some(a) = la[i * k + x] else { continue };
                for y in 0..k {
                    if x == y {
                        for (j, m) in pairs.iter_mut().enumerate() {
                            let Some(b) = lb[j * k + y] else { continue };
                            let c = if monotone {
                                step.pair(i, j, x, y, a, b)
                            } else {
                                // a cost model that may fall as solo times rise: only the transfers hold
                                step.on_one_pu(i, x, a.0.max(b.0))
                            };
                            *m = m.min(c);
                        }
                        continue;
                    }
                    let da = ba[(x * k + y) * na + i];
                    let db = &bb[(y * k + x) * nb..(y * k + x + 1) * nb];
                    if latency && step.sf[x][y].is_finite() {
                        pairs.iter_mut().zip(db).for_each(|(m, &db)| *m = m.min(da.max(db)));
                    } else {
                        pairs.iter_mut().zip(db).for_each(|(m, &db)| *m = m.min(da + db));
                    }
                }
            }
            for j in (0..=nb).rev() {
                let mut v = h[i * w + j];
                if dp.solo_allowed && i < na {
                    v = v.min(solo_a[i] + h[(i + 1) * w + j]);
                }
                if dp.solo_allowed && j < nb {
                    v = v.min(solo_b[j] + h[i * w + j + 1]);
                }
                if i < na && j < nb {
                    v = v.min(pairs[j] + h[(i + 1) * w + j + 1]);
                }
                h[i * w + j] = v;
            }
        }
        CostToGo { nb, h }
    }

    fn at(&self, i: usize, j: usize) -> f64 {
        self.h[i * (self.nb + 1) + j]
    }
}

/// Step costs (one place, used by the search and the evaluator).
struct Stepper<'a> {
    a: &'a Chain,
    b: &'a Chain,
    sf: &'a [Vec<f64>],
    co: &'a dyn CoCost,
    obj: Objective,
    /// Per stream, `(transfers, execution)` of op i on PU x after the stream's last op ran on
    /// `last` (k: the host), at `(i * (k + 1) + last) * k + x`; None where x cannot run op i.
    parts: [Vec<Option<(f64, f64)>>; 2],
}

impl<'a> Stepper<'a> {
    fn new(a: &'a Chain, b: &'a Chain, sf: &'a [Vec<f64>], co: &'a dyn CoCost, obj: Objective) -> Self {
        let table = |ch: &Chain| {
            let k = ch.pus();
            let mut v = Vec::with_capacity(ch.len() * (k + 1) * k);
            for i in 0..ch.len() {
                for last in 0..=k {
                    for x in 0..k {
                        v.push(ch.w(i, x).map(|w| {
                            // the previous op's D2H is charged with this one
                            let into = if last != x && ch.accelerator[x] { ch.h2d(i, x) } else { 0.0 };
                            let out = if i > 0 && last < k && last != x && ch.accelerator[last] {
                                ch.d2h(i - 1, last)
                            } else {
                                0.0
                            };
                            (into + out, w)
                        }));
                    }
                }
            }
            v
        };
        Stepper { a, b, sf, co, obj, parts: [table(a), table(b)] }
    }

    /// Op i of a stream on PU x after the stream's last op ran on `last`; `fresh`: nothing of
    /// the other stream ran on `last` since, so on the same PU the two are compiled together
    /// and the op costs its measured saving less.
    #[inline]
    fn parts(&self, stream: usize, i: usize, x: usize, last: usize, fresh: bool) -> Option<(f64, f64)> {
        let k = self.a.pus();
        let ch = if stream == 0 { self.a } else { self.b };
        self.parts[stream][(i * (k + 1) + last) * k + x]
            .map(|(t, w)| (t, if fresh && last == x && i > 0 { w - ch.saving_at(i, x) } else { w }))
    }

    /// Op i of a stream on PU x after its last op ran on `last`, without any saving.
    #[inline]
    fn raw(&self, stream: usize, i: usize, x: usize, last: usize) -> Option<(f64, f64)> {
        self.parts[stream][(i * (self.a.pus() + 1) + last) * self.a.pus() + x]
    }

    fn exit(&self, ch: &Chain, n: usize, last: usize) -> f64 {
        if n == 0 || last >= ch.pus() || !ch.accelerator[last] {
            return 0.0;
        }
        let d = ch.d2h(n - 1, last);
        match self.obj {
            Objective::Latency => d,
            Objective::Energy => d * ch.power(n - 1, last),
        }
    }

    /// The objective of A's op i on x and B's op j on y at once, given their parts.
    #[inline(always)]
    fn pair(&self, i: usize, j: usize, x: usize, y: usize, (ta, wa): (f64, f64), (tb, wb): (f64, f64)) -> f64 {
        let latency = self.obj == Objective::Latency;
        if x == y {
            let (ca, cb) = self.co.same_pu(i, j, x, (wa, wb));
            self.on_one_pu(i, x, (ta + ca).max(tb + cb))
        } else if self.sf[x][y].is_infinite() {
            // PUs that share hardware: one op after the other
            let (da, db) = (ta + wa, tb + wb);
            if latency { da + db } else { da * self.a.power(i, x) + db * self.b.power(j, y) }
        } else {
            let (da, db) = (ta + wa * self.sf[x][y], tb + wb * self.sf[y][x]);
            if latency { da.max(db) } else { da * self.a.power(i, x) + db * self.b.power(j, y) }
        }
    }

    /// The objective of two ops sharing PU x for `span` µs (A's op i's power).
    #[inline]
    fn on_one_pu(&self, i: usize, x: usize, span: f64) -> f64 {
        if self.obj == Objective::Latency { span } else { span * self.a.power(i, x) }
    }

    /// The objective of one stream's op `i` alone on `x`, taking `us`.
    #[inline]
    fn solo(&self, stream: usize, i: usize, x: usize, us: f64) -> f64 {
        let ch = if stream == 0 { self.a } else { self.b };
        if self.obj == Objective::Latency { us } else { us * ch.power(i, x) }
    }
}

/// What the concurrent evaluator found.
pub struct Evaluation {
    /// Per step: (start, duration), µs.
    pub timing: Vec<(f64, f64)>,
    pub latency_us: f64,
    pub energy_uj: f64,
}

/// The evaluator of a concurrent plan, the streams' final D2H included: an event-driven
/// simulation of the runtime (each PU runs its ops in step order one at a time, each stream its
/// ops in order, the streams otherwise independent; an op's execution progresses at rate
/// 1 / SF(its PU, the other's) while the other stream has an op running on another PU, whether
/// that op started before it or mid-way, and at rate 1 otherwise; transfers are not slowed; an
/// op waits while the other stream runs on a PU it shares hardware with, SF infinite). Each op
/// is priced after its stream's last op and its freshness (as the search does); where a
/// stream's run of ops compiled together was measured whole, or holds at least half of a run
/// measured whole, its ops' execution is their share of that measurement
/// ([`crate::MeasuredRuns`]). None if an op cannot run where placed.
pub fn evaluate(a: &Chain, b: &Chain, sf: &[Vec<f64>], co: &dyn CoCost, steps: &[PathStep]) -> Option<Evaluation> {
    let k = a.pus();
    let step = Stepper::new(a, b, sf, co, Objective::Latency);
    // pass 1: each op's (position, PU, last PU, fresh), per step
    let (mut la, mut lb) = (k, k);
    let (mut fa, mut fb) = (true, true);
    let mut ctx = Vec::with_capacity(steps.len());
    for &(sa, sb) in steps {
        let same = matches!((sa, sb), (Some((_, x)), Some((_, y))) if x == y);
        ctx.push((sa.map(|(i, x)| (i, x, la, fa)), sb.map(|(j, y)| (j, y, lb, fb && !same))));
        match (sa, sb) {
            (Some((_, x)), Some((_, y))) => (fa, fb) = (x != y, true),
            (Some((_, x)), None) => (fa, fb) = (true, fb && lb != x),
            (None, Some((_, y))) => (fa, fb) = (fa && la != y, true),
            (None, None) => {}
        }
        if let Some((_, x)) = sa {
            la = x;
        }
        if let Some((_, y)) = sb {
            lb = y;
        }
    }
    // pass 2: per stream, each op's execution: its pair price, or its share of a run measured
    // whole ([`MeasuredRuns::price`])
    let works = |stream: usize, ch: &Chain| -> Option<Vec<f64>> {
        let ops: Vec<(usize, usize, usize, bool)> =
            ctx.iter().filter_map(|c| if stream == 0 { c.0 } else { c.1 }).collect();
        let mut work = vec![0.0; ch.len()];
        for o in &ops {
            work[o.0] = step.parts(stream, o.0, o.1, o.2, o.3)?.1;
        }
        let mut r = 0;
        while r < ops.len() {
            let joins = |o: &(usize, usize, usize, bool)| o.3 && o.2 == o.1 && o.0 > 0;
            let mut end = r + 1;
            while end < ops.len() && joins(&ops[end]) && ops[end].1 == ops[r].1 {
                end += 1;
            }
            let run: Vec<usize> = ops[r..end].iter().map(|o| o.0).collect();
            ch.runs().price(&run, ops[r].1, &mut work);
            r = end;
        }
        Some(work)
    };
    let work = [works(0, a)?, works(1, b)?];
    // pass 3: as the runtime runs it: each PU runs its ops in step order (A's before B's within
    // a step) one at a time, each stream its ops in order, the streams otherwise independent.
    // Event by event: an op first pays its transfers, then its execution progresses at rate
    // 1 / SF(its PU, the other's) while the other stream has an op running on another PU and at
    // rate 1 otherwise, so an op that starts mid-way through the other's slows it from then on
    struct Task {
        step: usize,
        stream: usize,
        i: usize,
        x: usize,
        t: f64,
        w: f64,
    }
    let mut tasks = vec![];
    for (s, (ca, cb)) in ctx.iter().enumerate() {
        for (stream, c) in [(0, ca), (1, cb)] {
            if let Some((i, x, last, fresh)) = *c {
                let (t, _) = step.parts(stream, i, x, last, fresh)?;
                tasks.push(Task { step: s, stream, i, x, t, w: work[stream][i] });
            }
        }
    }
    let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); k];
    for (n, task) in tasks.iter().enumerate() {
        queues[task.x].push_back(n);
    }
    let chains = [a, b];
    let mut next = [0usize; 2];
    // per stream, the op it runs: (task, start, transfer time left, execution work left)
    let mut running: [Option<(usize, f64, f64, f64)>; 2] = [None, None];
    let mut stream_free = [0.0f64; 2];
    let mut span = vec![(f64::INFINITY, 0.0f64); steps.len()];
    let mut energy = 0.0;
    let mut now = 0.0f64;
    let mut done = 0;
    while done < tasks.len() {
        // start what can start now: the stream is idle and its next op heads its PU's queue
        // (a PU's queue head runs alone there, so a head whose PU is busy cannot be this op)
        for stream in 0..2 {
            if running[stream].is_some() {
                continue;
            }
            let head = queues.iter().filter_map(|q| q.front().copied()).find(|&n| {
                let task = &tasks[n];
                task.stream == stream
                    && task.i == next[stream]
                    && running[1 - stream]
                        .is_none_or(|r| tasks[r.0].x != task.x && sf[task.x][tasks[r.0].x].is_finite())
            });
            if let Some(n) = head {
                queues[tasks[n].x].pop_front();
                running[stream] = Some((n, now, tasks[n].t, tasks[n].w));
            }
        }
        // each running op's rate of execution until the next event
        let rate = |stream: usize, running: &[Option<(usize, f64, f64, f64)>; 2]| {
            let x = tasks[running[stream].map_or(0, |r| r.0)].x;
            match running[1 - stream] {
                Some((o, ..)) if tasks[o].x != x => 1.0 / sf[x][tasks[o].x],
                _ => 1.0,
            }
        };
        // the next event: an op's transfers end, or its execution does
        let until =
            |stream: usize| running[stream].map(|(_, _, t, w)| if t > 0.0 { t } else { w / rate(stream, &running) });
        let (first, dt) = (0..2).filter_map(|s| until(s).map(|d| (s, d))).min_by(|p, q| p.1.total_cmp(&q.1))?;
        let rates = [0, 1].map(|s| if running[s].is_some() { rate(s, &running) } else { 1.0 });
        now += dt;
        for stream in 0..2 {
            let Some((n, start, t, w)) = running[stream] else { continue };
            let (t, w) = if t > 0.0 {
                (if stream == first { 0.0 } else { (t - dt).max(0.0) }, w)
            } else {
                (0.0, if stream == first { 0.0 } else { (w - dt * rates[stream]).max(0.0) })
            };
            // float noise must not leave a sliver of work for a separate event
            let finished = t == 0.0 && w <= 1e-12 * tasks[n].w.max(1.0);
            if !finished {
                running[stream] = Some((n, start, t, w));
                continue;
            }
            let task = &tasks[n];
            energy += (now - start) * chains[stream].power(task.i, task.x);
            next[stream] += 1;
            stream_free[stream] = now;
            running[stream] = None;
            done += 1;
            let sp = &mut span[task.step];
            *sp = (sp.0.min(start), sp.1.max(now));
        }
    }
    let timing = span.iter().map(|&(s, f)| if s.is_finite() { (s, f - s) } else { (0.0, 0.0) }).collect();
    let tail_t = step.exit(a, a.len(), la) + step.exit(b, b.len(), lb);
    let energy_step = Stepper { obj: Objective::Energy, ..step };
    let tail_e = energy_step.exit(a, a.len(), la) + energy_step.exit(b, b.len(), lb);
    Some(Evaluation { timing, latency_us: stream_free[0].max(stream_free[1]) + tail_t, energy_uj: energy + tail_e })
}

/// Plans besides the search's: each stream whole on one PU, both at once (every PU pair) or
/// one after the other. The search prices runs from pair savings; these are the plans where
/// runs measured whole matter most, and the evaluator decides.
fn candidates(na: usize, nb: usize, k: usize, mode: ConcurrentMode) -> Vec<Vec<PathStep>> {
    let mut out = vec![];
    for x in 0..k {
        for y in 0..k {
            let together: Vec<PathStep> =
                (0..na.max(nb)).map(|t| ((t < na).then_some((t, x)), (t < nb).then_some((t, y)))).collect();
            out.push(together);
            if mode == ConcurrentMode::Joint {
                let serial: Vec<PathStep> =
                    (0..na).map(|i| (Some((i, x)), None)).chain((0..nb).map(|j| (None, Some((j, y))))).collect();
                out.push(serial);
            }
        }
    }
    out
}

/// The best plan for `obj`: the search proposes, beside each stream whole on one PU (at once
/// or one after the other); the evaluator decides.
pub fn best_steps(
    a: &Chain,
    b: &Chain,
    sf: &[Vec<f64>],
    co: &dyn CoCost,
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<(Vec<PathStep>, Evaluation), SearchError> {
    let value = |e: &Evaluation| if obj == Objective::Latency { e.latency_us } else { e.energy_uj };
    let mut best: Option<(Vec<PathStep>, Evaluation)> = None;
    for steps in std::iter::once(search(a, b, sf, co, mode, obj)?).chain(candidates(a.len(), b.len(), a.pus(), mode)) {
        if let Some(e) = evaluate(a, b, sf, co, &steps)
            && best.as_ref().is_none_or(|b| value(&e) < value(&b.1))
        {
            best = Some((steps, e));
        }
    }
    best.ok_or_else(|| SearchError::Check("the plan cannot run".into()))
}

/// The paper's baseline: A then B, each alone and whole on its own best single PU (latency).
pub struct SerialBaseline {
    /// A's PU and B's PU.
    pub pus: [usize; 2],
    pub latency_us: f64,
    pub energy_uj: f64,
}

/// The serial baseline of two models, each priced by [`Problem::whole_on`]: the same figure as
/// a plan's best single PU (`Plan::best_single_pu_us`), so a model has one single-PU cost.
pub fn serial_baseline(a: &Problem, b: &Problem) -> Result<SerialBaseline, SearchError> {
    let alone = |p: &Problem| {
        (0..p.pus())
            .filter_map(|x| p.whole_on(x).map(|t| (x, t)))
            .min_by(|p, q| p.1.latency_us.total_cmp(&q.1.latency_us))
            .ok_or(SearchError::Empty)
    };
    let ((x, ta), (y, tb)) = (alone(a)?, alone(b)?);
    Ok(SerialBaseline {
        pus: [x, y],
        latency_us: ta.latency_us + tb.latency_us,
        energy_uj: ta.energy_uj + tb.energy_uj,
    })
}

/// The concurrent plan of two models profiled on one SoC.
pub fn plan(
    a: (&crate::PhasedGraph, &crate::CostTable),
    b: (&crate::PhasedGraph, &crate::CostTable),
    co: (&dyn CoCost, &str),
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<ConcurrentPlan, SearchError> {
    let (ta, tb) = (a.1, b.1);
    if ta.soc != tb.soc {
        return Err(SearchError::Check(format!(
            "the cost tables are for different SoCs (`{}` and `{}`)",
            ta.soc.name, tb.soc.name
        )));
    }
    for (phased, t) in [a, b] {
        crate::same_graph(phased, t)?;
    }
    let stream = |(phased, t): (&crate::PhasedGraph, &crate::CostTable)| {
        let p = Problem::new(phased, t);
        let order: Vec<usize> = p.order().collect();
        (p.chain(&order), order, p)
    };
    let ((ca, order_a, pa), (cb, order_b, pb)) = (stream(a), stream(b));
    let (steps, Evaluation { timing, latency_us: latency, energy_uj: energy }) =
        best_steps(&ca, &cb, &pa.interference(), co.0, mode, obj)?;
    // both models run as one inference of one session: its launch is paid once
    let latency = latency + pa.launch_of(steps.iter().flat_map(|&(sa, sb)| sa.into_iter().chain(sb).map(|s| s.1)));
    let pus: Vec<String> = ta.soc.pus.iter().map(|p| p.name.clone()).collect();
    let base = serial_baseline(&pa, &pb)?;
    let [ja, jb] = base.pus;
    // verifier: every op of each stream once, in its phased order
    for (stream, order) in [&order_a, &order_b].into_iter().enumerate() {
        let ran: Vec<usize> =
            steps.iter().filter_map(|s| if stream == 0 { s.0 } else { s.1 }).map(|(i, _)| i).collect();
        if ran != (0..order.len()).collect::<Vec<_>>() {
            return Err(SearchError::Check(format!("stream {stream} does not run each of its ops once, in order")));
        }
    }
    Ok(ConcurrentPlan {
        models: [(ta.model.clone(), ta.graph), (tb.model.clone(), tb.graph)],
        soc: ta.soc.name.clone(),
        simulated: ta.simulated || tb.simulated,
        mode,
        objective: obj,
        co_costs: co.1.to_string(),
        steps: steps
            .iter()
            .zip(&timing)
            .map(|(&(sa, sb), &(start, dur))| ConcurrentStep {
                a: sa.map(|(i, x)| (order_a[i] as u32, pus[x].clone())),
                b: sb.map(|(j, y)| (order_b[j] as u32, pus[y].clone())),
                start_us: start,
                duration_us: dur,
            })
            .collect(),
        predicted_us: latency,
        predicted_energy_uj: energy,
        baseline_us: base.latency_us,
        baseline_energy_uj: base.energy_uj,
        baseline: [pus[ja].clone(), pus[jb].clone()],
        speedup: base.latency_us / latency,
        pus,
    })
}

/// Same-PU costs from a measured co-execution table: a measured pair's co-run times where the
/// table has the pair, else the PU's fitted model, else time slicing. `order_a`/`order_b` map
/// a stream position to its op id.
pub struct Measured<'a> {
    pub table: &'a bident_profile::coexec::CoExecTable,
    pub order_a: Vec<usize>,
    pub order_b: Vec<usize>,
    /// `(pu, a, b)` -> (co_a, co_b).
    pairs: std::collections::HashMap<(usize, u32, u32), (f64, f64)>,
}

impl<'a> Measured<'a> {
    pub fn new(table: &'a bident_profile::coexec::CoExecTable, order_a: Vec<usize>, order_b: Vec<usize>) -> Self {
        let pairs = table
            .pairs
            .iter()
            .enumerate()
            .flat_map(|(pu, ps)| ps.iter().map(move |p| ((pu, p.a, p.b), (p.co_a_us, p.co_b_us))))
            .collect();
        Measured { table, order_a, order_b, pairs }
    }
}

impl CoCost for Measured<'_> {
    fn same_pu(&self, i: usize, j: usize, pu: usize, solo: (f64, f64)) -> (f64, f64) {
        let (a, b) = (self.order_a[i] as u32, self.order_b[j] as u32);
        if let Some(&c) = self.pairs.get(&(pu, a, b)) {
            return c;
        }
        match self.table.fit.get(pu).and_then(Option::as_ref) {
            Some(f) => (f.predict(solo.0, solo.1), f.predict(solo.1, solo.0)),
            None => TimeSlicing.same_pu(i, j, pu, solo),
        }
    }

    /// A measured pair's cost does not depend on the solo times; a fitted model
    /// `max(a t_x + b t_y + c min(t_x, t_y) + d, t_x)` never falls when its slopes `a`, `a + c`,
    /// `b` and `b + c` are non-negative (`monotone_fit`).
    fn monotone(&self) -> bool {
        self.table.fit.iter().flatten().all(monotone_fit)
    }

    /// A measured pair's times are constants; a fit rises by at most `a + max(c, 0)` per µs of
    /// `t_x`, `b + max(c, 0)` per µs of `t_y`, or 1 (where `t_x` is the larger term); time
    /// slicing by 2.
    fn slope(&self) -> Option<f64> {
        let fit = |f: &bident_profile::coexec::CoExecFit| (f.a.max(f.b) + f.c.max(0.0)).max(1.0);
        Some(self.table.fit.iter().flatten().map(fit).fold(2.0, f64::max))
    }
}

/// Whether a fitted co-run model never falls as either solo time rises: its slopes `a`, `a + c`,
/// `b` and `b + c` non-negative, and every coefficient finite (a degenerate fit's infinite
/// slope bounds nothing, and would make [`CoCost::slope`]'s gaps NaN).
fn monotone_fit(f: &bident_profile::coexec::CoExecFit) -> bool {
    [f.a, f.b, f.c, f.d].iter().all(|x| x.is_finite())
        && f.a >= 0.0
        && f.b >= 0.0
        && f.a + f.c >= 0.0
        && f.b + f.c >= 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fit is monotone only with non-negative slopes and finite coefficients: an infinite or
    /// NaN one turns off the pruning that relies on it.
    #[test]
    fn only_finite_rising_fits_are_monotone() {
        let fit = |a: f64, b: f64, c: f64, d: f64| bident_profile::coexec::CoExecFit {
            a,
            b,
            c,
            d,
            cv_median_rel_err: 0.0,
            cv_p90_rel_err: 0.0,
        };
        assert!(monotone_fit(&fit(1.0, 1.0, 0.0, 0.0)));
        assert!(monotone_fit(&fit(1.0, 0.5, -0.5, 3.0)));
        assert!(!monotone_fit(&fit(1.0, 0.5, -0.6, 0.0)));
        assert!(!monotone_fit(&fit(f64::INFINITY, 1.0, 0.0, 0.0)));
        assert!(!monotone_fit(&fit(1.0, 1.0, 0.0, f64::NAN)));
    }

    /// A chain on three host-memory PUs (no transfers), each op costing `w[i]` everywhere, at
    /// `power` W.
    fn chain(w: &[f64], power: f64) -> Chain {
        let n = w.len();
        Chain::new(
            w.iter().map(|&w| vec![Some(w); 3]).collect(),
            vec![vec![0.0; 3]; n],
            vec![vec![0.0; 3]; n],
            vec![vec![power; 3]; n],
            vec![false; 3],
        )
    }

    /// A's op (10 µs on PU 0) runs from 0; B runs 3 µs on PU 2 (which contends with nothing),
    /// then an op of 4 µs on PU 1 that starts mid-way through A's. From 3 on, A progresses at
    /// 1/1.5 and B at 1/2: B's op ends at 3 + 4 * 2 = 11, when A has 7 - 8/1.5 = 5/3 µs of work
    /// left, which it finishes alone at 11 + 5/3 = 38/3. (Slowing an op only for an op already
    /// running when it starts left A at 10 µs.)
    #[test]
    fn an_op_starting_mid_way_slows_the_other_from_then_on() {
        let (a, b) = (chain(&[10.0], 1.0), chain(&[3.0, 4.0], 2.0));
        let mut sf = vec![vec![1.0; 3]; 3];
        sf[0][1] = 1.5;
        sf[1][0] = 2.0;
        let steps: Vec<PathStep> = vec![(Some((0, 0)), Some((0, 2))), (None, Some((1, 1)))];
        let e = evaluate(&a, &b, &sf, &TimeSlicing, &steps).expect("runs");
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(e.latency_us, 38.0 / 3.0), "{}", e.latency_us);
        assert!(close(e.timing[0].0, 0.0) && close(e.timing[0].1, 38.0 / 3.0), "{:?}", e.timing);
        assert!(close(e.timing[1].0, 3.0) && close(e.timing[1].1, 8.0), "{:?}", e.timing);
        // A's 38/3 µs at 1 W, B's 3 + 8 µs at 2 W
        assert!(close(e.energy_uj, 38.0 / 3.0 + 22.0), "{}", e.energy_uj);
    }

    /// Ops on PUs that do not contend, or one after the other, keep their own times.
    #[test]
    fn ops_that_do_not_overlap_on_contending_pus_are_not_slowed() {
        let (a, b) = (chain(&[10.0], 1.0), chain(&[4.0], 1.0));
        let mut sf = vec![vec![1.0; 3]; 3];
        sf[0][1] = 3.0;
        sf[1][0] = 3.0;
        // both on PU 0: the PU runs them one after the other
        let e = evaluate(&a, &b, &sf, &TimeSlicing, &[(Some((0, 0)), Some((0, 0)))]).expect("runs");
        assert_eq!(e.latency_us, 14.0);
        // PU 0 and PU 2: no contention between them
        let e = evaluate(&a, &b, &sf, &TimeSlicing, &[(Some((0, 0)), Some((0, 2)))]).expect("runs");
        assert_eq!(e.latency_us, 10.0);
        // PU 0 and PU 1 at once: B's 4 µs of work take 12; A does 4 µs of work meanwhile and
        // its last 6 alone
        let e = evaluate(&a, &b, &sf, &TimeSlicing, &[(Some((0, 0)), Some((0, 1)))]).expect("runs");
        assert!((e.latency_us - 18.0).abs() < 1e-9, "{}", e.latency_us);
    }

    /// A cost model that may fall as solo times rise, and that prices some co-runs below solo.
    struct Odd;

    impl CoCost for Odd {
        fn same_pu(&self, i: usize, j: usize, _: usize, (a, b): (f64, f64)) -> (f64, f64) {
            if (i + j).is_multiple_of(3) { (20.0 - a.min(20.0), 20.0 - b.min(20.0)) } else { (a + b, b + a) }
        }
    }

    /// The pruned search finds the whole DP's optimum: 5,000 random pairs of streams with
    /// transfers, savings, PUs that cannot run some ops, contention factors below and above 1
    /// and infinite ones, for both cost models (one not monotone: with the twins' dominance on
    /// for it, case 1487 finds 50 against the optimum 44), objectives and modes.
    #[test]
    fn pruning_keeps_the_whole_dps_plan() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut r = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut pruned_some = false;
        for case in 0..5000 {
            let k = 1 + case % 3;
            let (na, nb) = (1 + (r() * 9.0) as usize, 1 + (r() * 9.0) as usize);
            let mut stream = |n: usize| {
                // coarse costs make ties likely
                let w = (0..n)
                    .map(|i| {
                        (0..k)
                            .map(|x| (x == 0 || (i + x) % 4 != 0).then(|| (1.0 + (r() * 6.0).floor()) * 5.0))
                            .collect()
                    })
                    .collect();
                let t = |r: &mut dyn FnMut() -> f64| {
                    (0..n).map(|_| (0..k).map(|_| (r() * 3.0).floor()).collect()).collect()
                };
                let (h2d, d2h) = (t(&mut r), t(&mut r));
                let power = (0..n).map(|_| (0..k).map(|x| 2.0 + x as f64).collect()).collect();
                let saving = (0..n * k).map(|_| 5.0 * (r() * 4.0).floor()).collect();
                Chain::new(w, h2d, d2h, power, (0..k).map(|x| x > 0).collect()).with_savings(saving)
            };
            let (a, b) = (stream(na), stream(nb));
            let sf: Vec<Vec<f64>> =
                (0..k)
                    .map(|x| {
                        (0..k)
                            .map(|y| {
                                if x != y && (x + y) % 3 == 0 { f64::INFINITY } else { 0.8 + 0.1 * (r() * 6.0).floor() }
                            })
                            .collect()
                    })
                    .collect();
            for (co, obj, mode) in [
                (&TimeSlicing as &dyn CoCost, Objective::Latency, ConcurrentMode::Joint),
                (&Odd, Objective::Latency, ConcurrentMode::Joint),
                (&TimeSlicing, Objective::Energy, ConcurrentMode::Joint),
                (&Odd, Objective::Energy, ConcurrentMode::Joint),
                (&TimeSlicing, Objective::Latency, ConcurrentMode::Aligned),
            ] {
                if mode == ConcurrentMode::Aligned && na != nb {
                    continue;
                }
                let dp = Joint::new(&a, &b, &sf, co, mode, obj).expect("small");
                let (_, whole) = dp.run(None).expect("plan");
                let h = CostToGo::new(&dp);
                let ub = dp.greedy(&h);
                assert!(
                    h.at(0, 0) <= whole * (1.0 + 1e-12) && whole <= ub * (1.0 + 1e-12),
                    "case {case}: {} {whole} {ub}",
                    h.at(0, 0)
                );
                let (steps, pruned) = dp.run(Some((&h, ub))).expect("plan");
                let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(1.0);
                assert!(close(pruned, whole), "case {case}, {obj:?}, {mode:?}: {pruned} against {whole}");
                assert!(close(dp.value(&steps), pruned), "case {case}: the plan is not the value found");
                pruned_some |= ub > h.at(0, 0);
            }
        }
        assert!(pruned_some, "the bound never applied");
    }

    /// A fork whose two branches both write graph outputs, and whose second op also reads a graph
    /// input: on the NPU (an accelerator) the model pays H2D on ops 0 and 1 and D2H on ops 1 and
    /// 2, not only on the first and last op.
    fn forked() -> (crate::PhasedGraph, crate::CostTable) {
        use bident_artifact::ContentHash;
        use bident_backend::{PuKind, PuSpec, SocSpec};
        use bident_partition::{Branch, Phase, PhasedGraph};
        use bident_profile::{Cost, CostTable, OpCosts, PowerSource};
        let graph = ContentHash([7; 32]);
        let branch = |ops: &[u32]| Branch { ops: ops.to_vec() };
        let phased = PhasedGraph {
            model: "forked".into(),
            graph,
            op_count: 3,
            phases: vec![Phase { branches: vec![branch(&[0])] }, Phase { branches: vec![branch(&[1]), branch(&[2])] }],
            edges: vec![(0, 1), (0, 2)],
            reads_input: vec![0, 1],
            writes_output: vec![1, 2],
        };
        let pu = |name: &str, kind| PuSpec {
            name: name.into(),
            backend: "none".into(),
            kind,
            device: name.to_uppercase(),
            properties: Default::default(),
            cores: vec![],
            declared_power_w: 1.0,
        };
        let cost = |exec: f64, h2d: f64, d2h: f64, power: f64| Cost {
            h2d_us: h2d,
            dispatch_us: 0.0,
            exec_us: exec,
            d2h_us: d2h,
            p10_us: [h2d, 0.0, exec, d2h],
            p90_us: [h2d, 0.0, exec, d2h],
            runs: 1,
            power_w: power,
            power: PowerSource::Declared,
            stop_check: None,
        };
        let costs = CostTable {
            model: "forked".into(),
            graph,
            soc: SocSpec {
                name: "two".into(),
                backend: "none".into(),
                simulated: true,
                pus: vec![pu("cpu", PuKind::Cpu), pu("npu", PuKind::Npu)],
            },
            simulated: true,
            backend: "none".into(),
            measured_on: "nowhere".into(),
            warmup: 0,
            components: vec!["none".into(); 2],
            io_every_call: vec![false; 2],
            launch_us: vec![],
            segments: vec![],
            contention: None,
            ops: (0..3)
                .map(|i| OpCosts {
                    op: i,
                    name: format!("op{i}"),
                    kind: "Conv".into(),
                    per_pu: vec![Some(cost(100.0, 0.0, 0.0, 10.0)), Some(cost(10.0, 2.0, 3.0, 4.0))],
                    failures: vec![],
                })
                .collect(),
        };
        (phased, costs)
    }

    /// One rule for "a model whole on one PU": a plan's best single PU and the concurrent serial
    /// baseline give the same figure, with the NPU paying its transfers at every graph input and
    /// output (3 x 10 µs + 2 x 2 µs H2D + 2 x 3 µs D2H = 40 µs, at 4 W).
    #[test]
    fn one_single_pu_cost_per_model() {
        let (phased, costs) = forked();
        let plan = crate::search(&phased, &costs, &crate::SearchConfig::default()).expect("plan");
        assert_eq!(plan.best_single_pu.as_deref(), Some("npu"));
        assert_eq!(plan.best_single_pu_us, Some(40.0));
        let npu = plan.baselines.iter().find(|b| b.pu == "npu").expect("npu baseline");
        assert_eq!(npu.predicted_energy_uj, Some(160.0));
        let both = super::plan(
            (&phased, &costs),
            (&phased, &costs),
            (&TimeSlicing, "time slicing"),
            ConcurrentMode::Joint,
            Objective::Latency,
        )
        .expect("concurrent plan");
        assert_eq!(both.baseline, ["npu".to_string(), "npu".to_string()]);
        assert_eq!(both.baseline_us, 2.0 * 40.0);
        assert_eq!(both.baseline_energy_uj, 2.0 * 160.0);
    }
}
