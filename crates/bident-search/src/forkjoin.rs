//! The sequential search's DP: the paper's eq. (1) over the phased order, made exact for the
//! evaluator's sequential objective across forks and joins.
//!
//! Eq. (1) prices a transfer between neighbours in the order. The evaluator charges an op's H2D
//! once when any producer sits elsewhere (or it reads a graph input), and its D2H once when any
//! consumer does (or it writes a graph output). The two agree on an op whose one producer is the
//! op before it and whose one consumer is the op after it. They also agree, here, on a *block*:
//! a phase of several branches, each a chain, whose heads all read the op before the phase
//! (the fork) and whose ends all feed the op after it (the join), both in phases of one branch.
//! For every PU of the fork and of the join, the block is solved as a chain through its branches
//! in order (a head saves with the end before it), in up to four cases: the heads all on the
//! fork's PU or not (whether the fork pays its D2H), the ends all on the join's or not (whether
//! the join pays its H2D). Paying where it may not be due and taking the least case is exact.
//! The free case runs first for every pair of PUs, side by side in lanes; a case that keeps
//! heads or ends home runs only where what it saves could beat the best so far.
//!
//! Every other op is priced as eq. (1) prices it and marked inexact: the climb that follows
//! starts there and around it. Where no op is inexact the DP's optimum is the search's.

use crate::Objective;
use crate::problem::Problem;

/// How the DP prices an op's H2D (from its producers) or D2H (to its consumers).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Link {
    /// No producer (consumer): only a graph input (output) makes it pay.
    Alone,
    /// Its one producer (consumer) is the op before (after) it in the order.
    Order,
    /// A block's head (end): its one producer (consumer) is the fork (join), priced in the block.
    Block,
    /// A block's fork (join): its consumers (producers) are the heads (ends), priced in the block.
    Fan,
    /// Anything else: priced as eq. (1) would, as if `Order`; not exact.
    Approx,
}

/// A phase the DP solves as a block (module docs).
struct Block {
    phase: usize,
    fork: usize,
    join: usize,
}

/// A block's ops in order and whether each heads or ends its branch, and the scratch of its
/// columns; kept between blocks. Its steps ([`Dp::steps`] per op, by the PU it runs on, then
/// the one before: `(at * k + j) * k + q`) sit in the solve's arena, one run per block.
#[derive(Default)]
struct Table {
    ops: Vec<usize>,
    head: Vec<bool>,
    end: Vec<bool>,
    col: Vec<f64>,
    next: Vec<f64>,
    scratch: Vec<f64>,
    /// [`Dp::block_lanes`]: its lanes, their costs, and its scratch (columns lane by lane
    /// per PU).
    lanes: Vec<Lane>,
    costs: Vec<f64>,
    cur: Vec<f64>,
    new: Vec<f64>,
}

/// A block's PUs of its fork and join and its case (an index into [`CASES`]).
#[derive(Clone, Copy)]
struct Lane {
    f: usize,
    g: usize,
    case: usize,
}

/// The DP's forward pass over the order ([`Dp::solve`]): the columns, the pointers back, and
/// the blocks' steps and scratch.
struct Pass {
    /// Per op and PU: the PU of the op before it in the order (of the fork for a join).
    back: Vec<u32>,
    /// Per block, per (fork PU, join PU): the case taken.
    cases: Vec<u8>,
    /// The column of the last op so far, and the next one's.
    col: Vec<f64>,
    next: Vec<f64>,
    t: Table,
    /// The blocks' steps, one run each, from where `starts` says.
    arena: Vec<f64>,
    starts: Vec<usize>,
    steps: Vec<f64>,
    /// Per (fork PU, join PU): a block's cost with heads and ends anywhere.
    free: Vec<f64>,
}

impl Pass {
    fn new(dp: &Dp) -> Self {
        let (n, k) = (dp.p.ops(), dp.k);
        Pass {
            back: vec![0u32; n * k],
            cases: vec![0u8; dp.blocks.len() * k * k],
            col: vec![f64::INFINITY; k],
            next: vec![f64::INFINITY; k],
            t: Table::default(),
            arena: vec![],
            starts: vec![0; dp.blocks.len()],
            steps: vec![0.0; k * k],
            free: vec![],
        }
    }
}

/// What the DP found.
pub(crate) struct SequentialDp {
    pub(crate) assign: Vec<usize>,
    /// Its objective as the DP priced it.
    pub(crate) value: f64,
    /// Per op, whether the DP priced its transfers otherwise than the evaluator does.
    pub(crate) inexact: Vec<bool>,
}

/// The DP's view of one problem: the links of every op and the blocks.
struct Dp<'a> {
    p: &'a Problem,
    k: usize,
    into: Vec<Link>,
    out: Vec<Link>,
    blocks: Vec<Block>,
    /// Per phase, its block's index.
    block_of: Vec<Option<usize>>,
    /// Per op and PU (`c * k + j`), as the objective counts them: [`Dp::own`]; the op's H2D
    /// when it is due only for a graph input (its producers on its PU) and when due anyway;
    /// the same for its D2H; its saving. Read once from the problem's rows, so that the DP's
    /// passes read flat arrays.
    own: Vec<f64>,
    h2d: Vec<(f64, f64)>,
    d2h: Vec<(f64, f64)>,
    save: Vec<f64>,
}

/// Cases of a block: the heads all on the fork's PU (true) or anywhere; the same for the ends.
const CASES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

impl<'a> Dp<'a> {
    fn new(p: &'a Problem, obj: Objective) -> Self {
        let n = p.ops();
        let link = |others: &[usize], neighbour: Option<usize>| match others {
            [] => Link::Alone,
            [x] if Some(*x) == neighbour => Link::Order,
            _ => Link::Approx,
        };
        let mut into: Vec<Link> = (0..n).map(|c| link(&p.preds[c], p.prev[c])).collect();
        let mut out: Vec<Link> = (0..n).map(|c| link(&p.succs[c], p.next[c])).collect();
        let mut blocks = vec![];
        let mut block_of = vec![None; p.phases.len()];
        let inner = p.phases.len().saturating_sub(2);
        for (pi, slot) in block_of.iter_mut().enumerate().skip(1).take(inner) {
            let Some((fork, join)) = Self::block(p, pi) else { continue };
            // (a fork and a join sit in phases of one branch, which are no blocks: no op takes
            // two roles of one side)
            out[fork] = Link::Fan;
            into[join] = Link::Fan;
            for b in &p.phases[pi] {
                into[b[0]] = Link::Block;
                out[b[b.len() - 1]] = Link::Block;
            }
            *slot = Some(blocks.len());
            blocks.push(Block { phase: pi, fork, join });
        }
        let k = p.pus();
        let mut dp = Dp { p, k, into, out, blocks, block_of, own: vec![], h2d: vec![], d2h: vec![], save: vec![] };
        dp.own.reserve(n * k);
        dp.h2d.reserve(n * k);
        dp.d2h.reserve(n * k);
        dp.save.reserve(n * k);
        for c in 0..n {
            let (w, h2d, d2h, saving, power) = (&p.w[c], &p.h2d[c], &p.d2h[c], &p.saving[c], &p.power[c]);
            let (from_host, to_host) = (p.from_host[c], p.to_host[c]);
            // an op after which nothing runs pays for its consumers itself (none in a valid order)
            let (alone_in, alone_out) = (dp.into[c] == Link::Alone, dp.out[c] == Link::Alone);
            let last = matches!(dp.out[c], Link::Order | Link::Approx) && p.next[c].is_none();
            for j in 0..k {
                let at = |us: f64| match obj {
                    Objective::Latency => us,
                    Objective::Energy => us * power[j],
                };
                let (h, d) = if p.accelerator[j] { (at(h2d[j]), at(d2h[j])) } else { (0.0, 0.0) };
                let h = (if from_host { h } else { 0.0 }, h);
                let d = (if to_host { d } else { 0.0 }, d);
                let own = w[j].map_or(f64::INFINITY, |w| {
                    let mut cost = at(w);
                    if alone_in {
                        cost += h.0;
                    }
                    if alone_out {
                        cost += d.0;
                    } else if last {
                        cost += d.1;
                    }
                    cost
                });
                dp.own.push(own);
                dp.h2d.push(h);
                dp.d2h.push(d);
                dp.save.push(at(saving[j]));
            }
        }
        dp
    }

    /// Phase `pi` as a block: (fork, join) where its branches are chains from the last op of
    /// the phase before to the first of the phase after, both phases of one branch.
    fn block(p: &Problem, pi: usize) -> Option<(usize, usize)> {
        let phase = &p.phases[pi];
        let (before, after) = (&p.phases[pi - 1], &p.phases[pi + 1]);
        if phase.len() < 2 || before.len() != 1 || after.len() != 1 {
            return None;
        }
        let (fork, join) = (*before[0].last()?, *after[0].first()?);
        let heads = phase.iter().map(|b| b.first().copied()).collect::<Option<Vec<usize>>>()?;
        let ends = phase.iter().map(|b| b.last().copied()).collect::<Option<Vec<usize>>>()?;
        let same = |a: &[usize], b: &[usize]| a.len() == b.len() && a.iter().all(|x| b.contains(x));
        if !same(&p.succs[fork], &heads) || !same(&p.preds[join], &ends) {
            return None;
        }
        let chain = phase.iter().all(|b| {
            p.preds[b[0]] == [fork]
                && p.succs[b[b.len() - 1]] == [join]
                && b.windows(2).all(|w| p.succs[w[0]] == [w[1]] && p.preds[w[1]] == [w[0]])
        });
        chain.then_some((fork, join))
    }

    /// Op `c`'s H2D on PU `j`: due only for a graph input (`false`), or due anyway.
    fn h2d(&self, c: usize, j: usize, due: bool) -> f64 {
        let (home, away) = self.h2d[c * self.k + j];
        if due { away } else { home }
    }

    /// Op `c`'s D2H on PU `j`: due only for a graph output (`false`), or due anyway.
    fn d2h(&self, c: usize, j: usize, due: bool) -> f64 {
        let (home, away) = self.d2h[c * self.k + j];
        if due { away } else { home }
    }

    /// What op `c` costs on PU `j` beyond what links it to its neighbours: its weight, and the
    /// transfers only a graph input or output makes it pay. Infinite where `j` cannot run it.
    fn own(&self, c: usize, j: usize) -> f64 {
        self.own[c * self.k + j]
    }

    /// What op `c` on each PU `j` adds after op `x`, the op before it in the order, on each PU
    /// `q`, into `steps[q * k + j]`: its saving, its H2D and `x`'s D2H where they go by the
    /// order.
    fn steps(&self, x: usize, c: usize, steps: &mut [f64]) {
        let k = self.k;
        let into = matches!(self.into[c], Link::Order | Link::Approx);
        let out = matches!(self.out[x], Link::Order | Link::Approx);
        // x's D2H by x's PU, then c's H2D and saving by c's PU
        for q in 0..k {
            let (home, away) = if out { self.d2h[x * k + q] } else { (0.0, 0.0) };
            let row = &mut steps[q * k..(q + 1) * k];
            row.fill(away);
            row[q] = home;
        }
        for j in 0..k {
            let (home, away) = if into { self.h2d[c * k + j] } else { (0.0, 0.0) };
            let saving = self.save[c * k + j];
            for q in 0..k {
                steps[q * k + j] += if q == j { home - saving } else { away };
            }
        }
    }

    /// Op `c`'s column after the column `from` of op `x` before it: the least cost per PU, and
    /// per PU the PU before (into `back`). `steps` is scratch.
    fn column(&self, x: usize, from: &[f64], c: usize, to: &mut [f64], back: &mut [u32], steps: &mut [f64]) {
        let k = self.k;
        self.steps(x, c, steps);
        for j in 0..k {
            to[j] = f64::INFINITY;
            let own = self.own(c, j);
            if own == f64::INFINITY {
                continue;
            }
            let (mut best, mut arg) = (f64::INFINITY, 0);
            for (q, &f) in from.iter().enumerate() {
                let v = f + steps[q * k + j];
                if v < best {
                    (best, arg) = (v, q);
                }
            }
            to[j] = best + own;
            back[j] = arg as u32;
        }
    }

    /// Block `bi`'s ops into `t` (cleared first), and, where `arena` is given, their steps
    /// appended to it.
    fn table(&self, bi: usize, t: &mut Table, mut arena: Option<&mut Vec<f64>>) {
        let (p, k) = (self.p, self.k);
        let Block { phase, fork, .. } = self.blocks[bi];
        let Table { ops, head, end, col, next, scratch, .. } = t;
        scratch.resize(k * k, 0.0);
        ops.clear();
        head.clear();
        end.clear();
        let mut x = fork;
        for b in &p.phases[phase] {
            for (i, &c) in b.iter().enumerate() {
                if let Some(arena) = arena.as_deref_mut() {
                    self.steps(x, c, scratch);
                    let at = arena.len();
                    arena.resize(at + k * k, 0.0);
                    for (q, row) in scratch.chunks_exact(k).enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            arena[at + j * k + q] = v;
                        }
                    }
                }
                ops.push(c);
                head.push(i == 0);
                end.push(i + 1 == b.len());
                x = c;
            }
        }
        col.resize(k, f64::INFINITY);
        next.resize(k, f64::INFINITY);
    }

    /// Block `bi` (its [`Dp::table`] `t` and steps `step`) with its fork on PU `f` and its join
    /// on `g`, in case
    /// `(heads_home, ends_home)`: its ops, the fork's D2H and the join's H2D and saving (module
    /// docs). Fills `back` (per op of the phase, in order, per PU: the PU before);
    /// returns the cost and the PU of the phase's last op.
    fn block_cost(
        &self,
        bi: usize,
        (t, step): (&mut Table, &[f64]),
        (f, g): (usize, usize),
        (heads_home, ends_home): (bool, bool),
        back: &mut [u32],
    ) -> (f64, usize) {
        let k = self.k;
        let Table { ops, head, end, col, next, .. } = t;
        col.fill(f64::INFINITY);
        col[f] = 0.0;
        for at in 0..ops.len() {
            let (head, end, c) = (head[at], end[at], ops[at]);
            let own = &self.own[c * k..(c + 1) * k];
            for (j, (to, steps)) in next.iter_mut().zip(step[at * k * k..(at + 1) * k * k].chunks_exact(k)).enumerate()
            {
                let extra = self.with_ends(own[j], c, j, (head, end), (f, g), (heads_home, ends_home));
                let (mut best, mut arg) = (f64::INFINITY, 0);
                for (q, (&c, &s)) in col.iter().zip(steps).enumerate() {
                    let v = c + s;
                    if v < best {
                        (best, arg) = (v, q);
                    }
                }
                *to = best + extra;
                back[at * k + j] = arg as u32;
            }
            std::mem::swap(col, next);
        }
        self.close(bi, col, (f, g), (heads_home, ends_home))
    }

    /// `v` plus what op `c` of a block pays on PU `j` as a branch's head (its H2D from the
    /// fork on `f`) and end (its D2H to the join on `g`), in case `(heads_home, ends_home)`:
    /// infinite off the fork's (join's) PU where the case keeps them there.
    fn with_ends(
        &self,
        mut v: f64,
        c: usize,
        j: usize,
        (head, end): (bool, bool),
        (f, g): (usize, usize),
        (heads_home, ends_home): (bool, bool),
    ) -> f64 {
        let edge = |(home, away): (f64, f64), on: bool, kept: bool| {
            if on {
                home
            } else if kept {
                f64::INFINITY
            } else {
                away
            }
        };
        if head {
            v += edge(self.h2d[c * self.k + j], j == f, heads_home);
        }
        if end {
            v += edge(self.d2h[c * self.k + j], j == g, ends_home);
        }
        v
    }

    /// A block's cost from the column of its phase's last op: the join's saving after it, the
    /// join's H2D and the fork's D2H (module docs); and the last op's PU.
    fn close(
        &self,
        bi: usize,
        col: &[f64],
        (f, g): (usize, usize),
        (heads_home, ends_home): (bool, bool),
    ) -> (f64, usize) {
        let Block { fork, join, .. } = self.blocks[bi];
        let (mut best, mut last) = (f64::INFINITY, 0);
        for (q, &v) in col.iter().enumerate() {
            let v = if q == g { v - self.save[join * self.k + g] } else { v };
            if v < best {
                (best, last) = (v, q);
            }
        }
        best += self.h2d(join, g, !ends_home);
        best += self.d2h(fork, f, !heads_home);
        (best, last)
    }

    /// Block `bi` (its [`Dp::table`] `t` and steps `step`) in each lane of `t.lanes` (a PU of its fork and of
    /// its join, and a case), all at once: [`Dp::block_cost`] per lane into `t.costs`, the
    /// lanes side by side so that the columns' minima vectorise.
    fn block_lanes(&self, bi: usize, t: &mut Table, step: &[f64]) {
        let k = self.k;
        let Table { ops, head, end, lanes, costs, cur, new, .. } = t;
        // lanes in groups of `W`, the last padded with lanes that stay infinite
        const W: usize = 4;
        let m = lanes.len().div_ceil(W) * W;
        cur.clear();
        cur.resize(k * m, f64::INFINITY);
        for (l, lane) in lanes.iter().enumerate() {
            cur[lane.f * m + l] = 0.0;
        }
        new.clear();
        new.resize(k * m, f64::INFINITY);
        for at in 0..ops.len() {
            for j in 0..k {
                let steps = &step[(at * k + j) * k..(at * k + j + 1) * k];
                let c = ops[at];
                let own = self.own[c * k + j];
                let plain = !head[at] && !end[at];
                let add = if plain { own } else { 0.0 };
                // the least over the PU before, a group of lanes at a time in registers
                let to = &mut new[j * m..(j + 1) * m];
                for (g, to) in to.chunks_exact_mut(W).enumerate() {
                    let mut b = [f64::INFINITY; W];
                    for (q, &s) in steps.iter().enumerate() {
                        let from = &cur[q * m + g * W..q * m + (g + 1) * W];
                        for (b, &c) in b.iter_mut().zip(from) {
                            let v = c + s;
                            *b = if v < *b { v } else { *b };
                        }
                    }
                    to.iter_mut().zip(b).for_each(|(to, b)| *to = b + add);
                }
                if plain {
                    continue;
                }
                // a head's H2D and an end's D2H depend on the lane's fork and join
                for (to, lane) in to.iter_mut().zip(lanes.iter()) {
                    *to += self.with_ends(own, c, j, (head[at], end[at]), (lane.f, lane.g), CASES[lane.case]);
                }
            }
            std::mem::swap(cur, new);
        }
        costs.clear();
        let mut col = vec![0.0; k];
        for (l, lane) in lanes.iter().enumerate() {
            col.iter_mut().enumerate().for_each(|(q, v)| *v = cur[q * m + l]);
            costs.push(self.close(bi, &col, (lane.f, lane.g), CASES[lane.case]).0);
        }
    }

    fn solve(&self) -> Option<SequentialDp> {
        let p = self.p;
        let mut s = Pass::new(self);
        let mut last: Option<usize> = None;
        let mut pi = 0;
        while pi < p.phases.len() {
            if let Some(bi) = self.block_of[pi] {
                self.through_block(bi, &mut s);
                last = Some(self.blocks[bi].join);
                // the join's phase goes on after its first op
                for &c in &p.phases[pi + 1][0][1..] {
                    self.advance(last, c, &s.col, &mut s.next, &mut s.back, &mut s.steps);
                    std::mem::swap(&mut s.col, &mut s.next);
                    last = Some(c);
                }
                pi += 2;
                continue;
            }
            for &c in p.phases[pi].iter().flatten() {
                self.advance(last, c, &s.col, &mut s.next, &mut s.back, &mut s.steps);
                std::mem::swap(&mut s.col, &mut s.next);
                last = Some(c);
            }
            pi += 1;
        }
        let last = last?;
        let (j, value) = s.col.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1))?;
        if value == f64::INFINITY {
            return None;
        }
        let assign = self.walk_back(&mut s, last, j)?;
        let inexact = (0..p.ops()).map(|c| self.into[c] == Link::Approx || self.out[c] == Link::Approx).collect();
        Some(SequentialDp { assign, value, inexact })
    }

    /// The join's column from the fork's through block `bi` (into `s.col`): first where the
    /// heads and ends go anywhere (every fork and join pay their transfers), per join PU; then
    /// the cases that keep the heads on the fork's PU or the ends on the join's, where what they
    /// save (the fork's D2H, the join's H2D) might beat the best.
    fn through_block(&self, bi: usize, s: &mut Pass) {
        let (p, k) = (self.p, self.k);
        let Block { fork, join, .. } = self.blocks[bi];
        s.starts[bi] = s.arena.len();
        self.table(bi, &mut s.t, Some(&mut s.arena));
        let step = &s.arena[s.starts[bi]..];
        let t = &mut s.t;
        t.lanes.clear();
        for g in 0..k {
            t.lanes.extend((0..k).filter(|&f| s.col[f] < f64::INFINITY).map(|f| Lane { f, g, case: 0 }));
        }
        self.block_lanes(bi, t, step);
        s.next.fill(f64::INFINITY);
        s.free.clear();
        s.free.resize(k * k, f64::INFINITY);
        for (lane, &cost) in t.lanes.iter().zip(&t.costs) {
            s.free[lane.f * k + lane.g] = cost;
            let v = s.col[lane.f] + cost;
            if v < s.next[lane.g] {
                s.next[lane.g] = v;
                s.back[join * k + lane.g] = lane.f as u32;
                s.cases[(bi * k + lane.f) * k + lane.g] = 0;
            }
        }
        t.lanes.clear();
        for g in 0..k {
            for f in (0..k).filter(|&f| s.free[f * k + g] < f64::INFINITY) {
                for (ci, &(heads_home, ends_home)) in CASES.iter().enumerate().skip(1) {
                    // a case on a host PU pays what the free case pays
                    if (heads_home && !p.accelerator[f]) || (ends_home && !p.accelerator[g]) {
                        continue;
                    }
                    let mut saved = 0.0;
                    if heads_home {
                        saved += self.d2h(fork, f, true) - self.d2h(fork, f, false);
                    }
                    if ends_home {
                        saved += self.h2d(join, g, true) - self.h2d(join, g, false);
                    }
                    if s.col[f] + s.free[f * k + g] - saved < s.next[g] {
                        t.lanes.push(Lane { f, g, case: ci });
                    }
                }
            }
        }
        self.block_lanes(bi, t, step);
        for (lane, &cost) in t.lanes.iter().zip(&t.costs) {
            let v = s.col[lane.f] + cost;
            if v < s.next[lane.g] {
                s.next[lane.g] = v;
                s.back[join * k + lane.g] = lane.f as u32;
                s.cases[(bi * k + lane.f) * k + lane.g] = lane.case as u8;
            }
        }
        for (g, v) in s.next.iter_mut().enumerate() {
            *v += self.own(join, g);
        }
        std::mem::swap(&mut s.col, &mut s.next);
    }

    /// The assignment from the forward pass `s`, walking back from op `last` on PU `j`: through
    /// a block, its ops solved again in the case taken for its fork's and join's PUs.
    fn walk_back(&self, s: &mut Pass, last: usize, mut j: usize) -> Option<Vec<usize>> {
        let (p, k) = (self.p, self.k);
        let mut assign = vec![0; p.ops()];
        let mut c = Some(last);
        while let Some(op) = c {
            assign[op] = j;
            let from = s.back[op * k + j] as usize;
            let block = self.into[op] == Link::Fan;
            if !block {
                j = from;
                c = p.prev[op];
                continue;
            }
            // the join's phase follows its block's
            let bi = self.block_of[p.place[op].0 - 1]?;
            let (f, g) = (from, j);
            let case = CASES[s.cases[(bi * k + f) * k + g] as usize];
            self.table(bi, &mut s.t, None);
            let mut inner = vec![0u32; s.t.ops.len() * k];
            let (_, mut q) = self.block_cost(bi, (&mut s.t, &s.arena[s.starts[bi]..]), (f, g), case, &mut inner);
            for (at, &x) in s.t.ops.iter().enumerate().rev() {
                assign[x] = q;
                q = inner[at * k + q] as usize;
            }
            j = f;
            c = Some(self.blocks[bi].fork);
        }
        Some(assign)
    }

    /// Op `c`'s column after op `last`'s (none: `c` is the first op).
    fn advance(
        &self,
        last: Option<usize>,
        c: usize,
        col: &[f64],
        next: &mut [f64],
        back: &mut [u32],
        steps: &mut [f64],
    ) {
        let k = self.k;
        match last {
            Some(x) => self.column(x, col, c, next, &mut back[c * k..(c + 1) * k], steps),
            None => {
                for (j, v) in next.iter_mut().enumerate() {
                    // nothing before it: a producer, were there one, would be elsewhere
                    let entry = if self.into[c] == Link::Alone { 0.0 } else { self.h2d(c, j, true) };
                    *v = self.own(c, j) + entry;
                }
            }
        }
    }
}

impl Problem {
    /// The DP on the phased order, exact across forks and joins (module docs); None if some op
    /// runs nowhere. Without measured runs only (they make an op's cost depend on its whole run).
    pub(crate) fn sequential_dp(&self, obj: Objective) -> Option<SequentialDp> {
        debug_assert!(self.segment_cost.is_empty());
        Dp::new(self, obj).solve()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::tests::{multi_phase, xorshift};

    /// Where the DP marks no op inexact, its figure is the evaluator's for the assignment it
    /// returns, and no assignment beats it (exhaustive search on instances of at most 3^11
    /// assignments); where it marks some, they are exactly the ops whose dataflow neither the
    /// order nor a block explains. A whole model on one PU is priced as the evaluator prices it
    /// ([`Problem::single_objective`]). Random multi-phase problems ([`multi_phase`]); latency
    /// and energy.
    #[test]
    fn the_dp_is_exact_where_it_says_so() {
        let mut r = xorshift();
        let (mut exact, mut blocks, mut searched) = (0, 0, 0);
        for case in 0..400 {
            let p = multi_phase(&mut r, case, if case % 2 == 0 { 2.0 } else { 6.0 }, 2.0);
            let (n, k) = (p.ops(), p.pus());
            let dp = Dp::new(&p, Objective::Latency);
            // an op is inexact unless its producers and consumers are its neighbours in the
            // order or it has a role in a block
            for c in 0..n {
                let in_block = |x: usize| dp.block_of[p.place[x].0].is_some();
                let fork = dp.blocks.iter().any(|b| b.fork == c);
                let join = dp.blocks.iter().any(|b| b.join == c);
                let explained_in = p.preds[c].is_empty() || p.preds[c] == p.prev[c].as_slice() || in_block(c) || join;
                let explained_out = p.succs[c].is_empty() || p.succs[c] == p.next[c].as_slice() || in_block(c) || fork;
                let inexact = dp.into[c] == Link::Approx || dp.out[c] == Link::Approx;
                assert_eq!(inexact, !(explained_in && explained_out), "case {case}: op {c}");
            }
            for obj in [Objective::Latency, Objective::Energy] {
                for j in 0..k {
                    let (fast, full) = (p.single_objective(j, obj), p.sequential_objective(&vec![j; n], obj));
                    assert!(
                        fast == full || (fast.is_infinite() && full.is_infinite()),
                        "case {case}: PU {j}: {fast} vs {full}"
                    );
                }
                let found = p.sequential_dp(obj).expect("every op runs somewhere");
                if found.inexact.contains(&true) {
                    continue;
                }
                exact += 1;
                blocks += Dp::new(&p, obj).blocks.len();
                let v = p.sequential_objective(&found.assign, obj);
                assert!(
                    (v - found.value).abs() <= 1e-9 * v.max(1.0),
                    "case {case}, {obj:?}: DP {} vs evaluator {v}",
                    found.value
                );
                if (k as f64).powi(n as i32) > 177_147.0 {
                    continue;
                }
                searched += 1;
                let mut best = f64::INFINITY;
                for code in 0..k.pow(n as u32) {
                    let assign: Vec<usize> = (0..n).map(|i| code / k.pow(i as u32) % k).collect();
                    best = best.min(p.sequential_objective(&assign, obj));
                }
                assert!(v <= best * (1.0 + 1e-9), "case {case}, {obj:?}: DP {v} above the optimum {best}");
            }
        }
        assert!(
            exact > 100 && blocks > 100 && searched > 50,
            "exact {exact}, blocks {blocks}, searched {searched}: too few"
        );
    }
}
