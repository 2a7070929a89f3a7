//! The joint search's dynamic programme over both streams' states, and the cost-to-go bound
//! that prunes it.

use super::stepper::Stepper;
use super::{CoCost, ConcurrentMode, MAX_STATES, PathStep};
use crate::{Chain, Objective, SearchError};

/// The joint DP over states (i, j, last_a, last_b, fresh_a, fresh_b): i ops of A and j of B
/// done; last = k means "not started" (inputs on the host); fresh: no op of the other stream
/// ran on that stream's last PU since (so its next op there is compiled together with its last
/// one, as the runtime does).
pub(super) struct Joint<'a> {
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
    pub(super) fn new(
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
    pub(super) fn greedy(&self, h: &CostToGo) -> f64 {
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
    pub(super) fn run(&self, prune: Option<(&CostToGo, f64)>) -> Result<(Vec<PathStep>, f64), SearchError> {
        let (na, nb, k) = (self.na, self.nb, self.k);
        let kk = k + 1;
        let sweep = Sweep::new(self, prune)?;
        let (m, row_len) = (sweep.m, sweep.row_len);
        let mut tab = Table {
            cur: vec![f64::INFINITY; row_len],
            next: vec![f64::INFINITY; row_len],
            from: vec![0; (na + 1) * row_len],
            rows: vec![(usize::MAX, 0); na + 1],
            alive: Vec::with_capacity(m * m),
            kept: Vec::with_capacity(m * m),
        };
        let start = (0, 0, k, k, true, true);
        tab.cur[self.idx(start)] = 0.0;
        tab.rows[0] = (0, 0);
        for i in 0..=na {
            let gaps_a = prune.map(|_| self.gaps(0, i));
            let pa = if i < na { self.op_parts(0, i) } else { vec![vec![None; k]; m] };
            let row = Row { i, gaps_a, pa };
            // B's moves alone extend the row as it goes
            let mut j = tab.rows[i].0;
            while j <= tab.rows[i].1.min(nb) {
                self.expand(&sweep, &mut tab, &row, j);
                j += 1;
            }
            if i < na {
                // row i's buffer holds the next row after it, cleared where row i reached
                let (lo, hi) = tab.rows[i];
                if lo <= hi {
                    tab.cur[lo * kk * kk * 4..(hi.min(nb) + 1) * kk * kk * 4].fill(f64::INFINITY);
                }
                std::mem::swap(&mut tab.cur, &mut tab.next);
            }
        }
        // the end: both done, each stream's last output back to the host (`cur` is row na)
        let (end, best) = self.end(&tab.cur, row_len)?;
        Ok((self.walk_back(&tab.from, self.idx(start), end, &sweep), best))
    }

    /// Each stream's parts of its op `i`, per last PU and freshness (`last * 2 + fresh`): B's
    /// for every op, A's for the row's.
    fn op_parts(&self, stream: usize, i: usize) -> OpParts {
        let (k, m) = (self.k, 2 * (self.k + 1));
        (0..m).map(|n| (0..k).map(|x| self.step.parts(stream, i, x, n / 2, n % 2 == 1)).collect()).collect()
    }

    /// Expand the states of cell (`row.i`, `j`) that may still win, cheapest first: each move
    /// out of them kept where it reaches its target for less than before, and within bound.
    fn expand(&self, sweep: &Sweep, tab: &mut Table, row: &Row, j: usize) {
        let (na, nb, kk) = (self.na, self.nb, self.k + 1);
        let (i, m, cells, row_len, mask, limit) = (row.i, sweep.m, sweep.cells, sweep.row_len, sweep.mask, sweep.limit);
        let (gaps_a, gaps_b, pa) = (&row.gaps_a, &sweep.gaps_b, &row.pa);
        let Table { cur, next, from, rows, alive, kept } = tab;
        let here = sweep.bound(i, j);
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
            return;
        }
        alive.sort_unstable();
        // the cells a move reaches, by (i' - i) * 2 + j' - j: their offsets in their
        // rows and their bounds
        let cell_of = |j: usize| j * kk * kk * 4;
        let ahead = [0, cell_of(j + 1), cell_of(j), cell_of(j + 1)];
        let bounds = [
            0.0,
            sweep.bound(i, (j + 1).min(nb)),
            sweep.bound((i + 1).min(na), j),
            sweep.bound((i + 1).min(na), (j + 1).min(nb)),
        ];
        let pb = &sweep.pb[j];
        kept.clear();
        for &key in alive.iter() {
            let t = (key & mask) as usize;
            let c0 = cur[cell + t];
            let (la, lb, fa, fb, sa, sb) = sweep.decode[t];
            if let (Some(ga), Some(gb)) = (gaps_a, gaps_b) {
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
    }

    /// The cheapest end state, both streams done, with each stream's last output back to the
    /// host (`cur`: row na's costs): its index and the plan's objective.
    fn end(&self, cur: &[f64], row_len: usize) -> Result<(usize, f64), SearchError> {
        let (na, nb, kk) = (self.na, self.nb, self.k + 1);
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
        Ok((end, best))
    }

    /// The path from state `start` to state `end` (their indices), walked back by where each
    /// state came from.
    fn walk_back(&self, from: &[u16], start: usize, end: usize, sweep: &Sweep) -> Vec<PathStep> {
        let (cells, row_len) = (sweep.cells, sweep.row_len);
        let (mut s, mut steps) = (end, vec![]);
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
        steps
    }
}

/// What one [`Joint::run`] reads besides its states, worked out once: its pruning, B's parts
/// and gaps for every op, and a state's place in its cell decoded.
struct Sweep<'h> {
    prune: Option<(&'h CostToGo, f64)>,
    /// States that could still beat the incumbent; the slack absorbs rounding in the sums.
    limit: f64,
    /// Per state of a stream (its last PU and freshness), how much more than from each other
    /// one its continuation can cost ([`Joint::gaps`]): a state that a twin in its cell
    /// reached for at least that much less is skipped. B's, for each of its ops.
    gaps_b: Option<Vec<Vec<f64>>>,
    /// A stream's states in a cell (`last * 2 + fresh`), the cell's states (`cells`), and a
    /// row's.
    m: usize,
    cells: usize,
    row_len: usize,
    /// B's parts of each of its ops ([`Joint::op_parts`]), and none past its last.
    pb: Vec<OpParts>,
    /// A state's place in its cell, `((la * kk + lb) * 2 + fa) * 2 + fb`, decoded:
    /// (la, lb, fa, fb, la * 2 + fa, lb * 2 + fb).
    decode: Vec<(usize, usize, bool, bool, usize, usize)>,
    /// The low bits of a key of [`Table::alive`], which hold its state.
    mask: u64,
}

impl<'h> Sweep<'h> {
    fn new(dp: &Joint, prune: Option<(&'h CostToGo, f64)>) -> Result<Self, SearchError> {
        let (nb, k) = (dp.nb, dp.k);
        let kk = k + 1;
        let limit = prune.map_or(f64::INFINITY, |(_, ub)| ub + 1e-9 * ub.abs());
        let gaps_b: Option<Vec<Vec<f64>>> = prune.map(|_| (0..=nb).map(|j| dp.gaps(1, j)).collect());
        let m = 2 * kk;
        // where each state came from takes two bytes ([`Table::from`])
        let cells = kk * kk * 4;
        if 3 * cells >= usize::from(u16::MAX) {
            return Err(SearchError::Check(format!("{k} PUs are too many for the joint search")));
        }
        let pb: Vec<OpParts> = (0..nb).map(|j| dp.op_parts(1, j)).chain([vec![vec![None; k]; m]]).collect();
        let decode: Vec<(usize, usize, bool, bool, usize, usize)> = (0..m * m)
            .map(|t| {
                let (la, lb, fa, fb) = (t / (4 * kk), (t / 4) % kk, (t / 2) % 2 == 1, t % 2 == 1);
                (la, lb, fa, fb, la * 2 + usize::from(fa), lb * 2 + usize::from(fb))
            })
            .collect();
        let mask = (m * m).next_power_of_two() as u64 - 1;
        Ok(Sweep { prune, limit, gaps_b, m, cells, row_len: (nb + 1) * cells, pb, decode, mask })
    }

    /// What is left from (i, j) at least (0 without pruning).
    fn bound(&self, i: usize, j: usize) -> f64 {
        self.prune.map_or(0.0, |(h, _)| h.at(i, j))
    }
}

/// The states of [`Joint::run`]: the costs of two rows of states at a time (moves reach the row
/// or the next), where each state came from, and scratch for a cell's states.
struct Table {
    cur: Vec<f64>,
    next: Vec<f64>,
    /// Where each state came from, for all: 1 + which cell before it (the one before in its row,
    /// above it, above and before) * states per cell + its state there, so two bytes a state
    /// (zeroed memory: pages no state reaches are never touched).
    from: Vec<u16>,
    /// Per row i, the range of j holding a reached state.
    rows: Vec<(usize, usize)>,
    /// A cell's states that may still win, cheapest first, and those expanded: (cost, A's
    /// state, B's state).
    alive: Vec<u64>,
    kept: Vec<(f64, usize, usize)>,
}

/// Row i of [`Joint::run`]: A's gaps ([`Joint::gaps`]) and parts ([`Joint::op_parts`]) of its
/// op i.
struct Row {
    i: usize,
    gaps_a: Option<Vec<f64>>,
    pa: OpParts,
}

/// A lower bound on what is left from each (i, j) to the end, whatever PUs the streams last ran
/// on and however fresh they are: the DP over (i, j) alone, each move at the least it costs from
/// any such state (each op at its smallest transfers and execution on each PU, the PUs chosen
/// freely). It is a relaxation solved exactly, so it is consistent: no move costs less than
/// the bound falls along it.
pub(super) struct CostToGo {
    nb: usize,
    /// At `i * (nb + 1) + j`.
    h: Vec<f64>,
}

impl CostToGo {
    pub(super) fn new(dp: &Joint) -> Self {
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

    pub(super) fn at(&self, i: usize, j: usize) -> f64 {
        self.h[i * (self.nb + 1) + j]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrent::TimeSlicing;

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
}
