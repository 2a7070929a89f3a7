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
//! dynamic programming over it: O(N_A N_B 4 K^2 (2K + K^2)).

use bident_artifact::{Artifact, ContentHash};
use serde::{Deserialize, Serialize};

use crate::{Chain, Objective, Problem, SearchError};

/// What two ops cost when they share one PU: `(co_a, co_b)` µs for A's op `i` and B's op `j` on
/// PU `pu`, each the op's time while the other runs.
pub trait CoCost {
    fn same_pu(&self, i: usize, j: usize, pu: usize, solo: (f64, f64)) -> (f64, f64);
}

/// Time slicing: an op sharing a PU waits for the shorter of the two (`co(x | y) = t_x +
/// min(t_x, t_y)`), the form the fitted model takes on the measured CPU PUs; what a virtual SoC
/// uses (simulated).
pub struct TimeSlicing;

impl CoCost for TimeSlicing {
    fn same_pu(&self, _: usize, _: usize, _: usize, (a, b): (f64, f64)) -> (f64, f64) {
        (a + a.min(b), b + a.min(b))
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

/// Per PU: (transfers, execution) of a stream's next op there, None where it cannot run.
type PerPu = Vec<Option<(f64, f64)>>;

/// The most states the joint search keeps (12 bytes each).
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
pub fn search(
    a: &Chain,
    b: &Chain,
    sf: &[Vec<f64>],
    co: &dyn CoCost,
    mode: ConcurrentMode,
    obj: Objective,
) -> Result<Vec<PathStep>, SearchError> {
    let (na, nb, k) = (a.len(), b.len(), a.pus());
    if mode == ConcurrentMode::Aligned && na != nb {
        return Err(SearchError::Check("aligned mode needs two streams of the same length".into()));
    }
    // state (i, j, last_a, last_b, fresh_a, fresh_b); last = k means "not started" (inputs on
    // the host); fresh: no op of the other stream ran on that stream's last PU since (so its
    // next op there is compiled together with its last one, as the runtime does)
    let kk = k + 1;
    let idx = |i: usize, j: usize, la: usize, lb: usize, fa: usize, fb: usize| {
        ((((i * (nb + 1) + j) * kk + la) * kk + lb) * 2 + fa) * 2 + fb
    };
    let states = (na + 1) * (nb + 1) * kk * kk * 4;
    if states > MAX_STATES {
        return Err(SearchError::TooLarge { a: na, b: nb, pus: k, states, max: MAX_STATES });
    }
    let mut cost = vec![f64::INFINITY; states];
    let mut from: Vec<u32> = vec![u32::MAX; states];
    let start = idx(0, 0, k, k, 1, 1);
    cost[start] = 0.0;
    let step = Stepper::new(a, b, sf, co, obj);
    let solo_allowed = mode == ConcurrentMode::Joint;
    let objective = |(t, e): (f64, f64)| if obj == Objective::Latency { t } else { e };
    // each stream's parts for the current op, per PU and freshness (hoisted out of the loops)
    let mut pa: Vec<Option<(f64, f64)>> = vec![None; k];
    let mut pb: Vec<[PerPu; 2]> = vec![[vec![None; k], vec![None; k]]; kk];
    for i in 0..=na {
        for j in 0..=nb {
            if j < nb {
                for (lb, rows) in pb.iter_mut().enumerate() {
                    for (fb, row) in rows.iter_mut().enumerate() {
                        for (y, v) in row.iter_mut().enumerate() {
                            *v = step.parts(1, j, y, lb, fb == 1);
                        }
                    }
                }
            }
            for la in 0..kk {
                for fa in 0..2 {
                    if i < na {
                        for (x, v) in pa.iter_mut().enumerate() {
                            *v = step.parts(0, i, x, la, fa == 1);
                        }
                    }
                    for (lb, pb_lb) in pb.iter().enumerate() {
                        for (fb, pb_f) in pb_lb.iter().enumerate() {
                            let s = idx(i, j, la, lb, fa, fb);
                            let c0 = cost[s];
                            if c0 == f64::INFINITY {
                                continue;
                            }
                            let mut relax = |t: usize, c: f64| {
                                if c < cost[t] {
                                    cost[t] = c;
                                    from[t] = s as u32;
                                }
                            };
                            if solo_allowed && i < na {
                                for (x, p) in pa.iter().enumerate() {
                                    if let Some((t, w)) = *p {
                                        let fb2 = usize::from(fb == 1 && lb != x);
                                        relax(idx(i + 1, j, x, lb, 1, fb2), c0 + objective(step.solo(0, i, x, t + w)));
                                    }
                                }
                            }
                            if solo_allowed && j < nb {
                                for (y, p) in pb_f.iter().enumerate() {
                                    if let Some((t, w)) = *p {
                                        let fa2 = usize::from(fa == 1 && la != y);
                                        relax(idx(i, j + 1, la, y, fa2, 1), c0 + objective(step.solo(1, j, y, t + w)));
                                    }
                                }
                            }
                            if i < na && j < nb {
                                for (x, a) in pa.iter().enumerate() {
                                    let Some(a) = *a else { continue };
                                    for (y, &fresh_b) in pb_f.iter().enumerate() {
                                        // on one PU, B's op runs after A's: it cannot join B's last
                                        let b = if x == y { step.parts(1, j, y, lb, false) } else { fresh_b };
                                        let Some(b) = b else { continue };
                                        let t = idx(i + 1, j + 1, x, y, usize::from(x != y), 1);
                                        relax(t, c0 + objective(step.pair(i, j, x, y, a, b)));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // the end: both done, each stream's last output back to the host
    let (mut end, mut best) = (usize::MAX, f64::INFINITY);
    for la in 0..kk {
        for lb in 0..kk {
            for f in 0..4 {
                let s = idx(na, nb, la, lb, f / 2, f % 2);
                let tail = step.exit(a, na, la) + step.exit(b, nb, lb);
                if cost[s] + tail < best {
                    (end, best) = (s, cost[s] + tail);
                }
            }
        }
    }
    if end == usize::MAX {
        return Err(SearchError::Check("no concurrent schedule: an op runs on no PU".into()));
    }
    // walk back
    let decode = |s: usize| {
        let s = s / 4;
        let lb = s % kk;
        let la = (s / kk) % kk;
        let j = (s / kk / kk) % (nb + 1);
        let i = s / kk / kk / (nb + 1);
        (i, j, la, lb)
    };
    let mut steps = vec![];
    let mut s = end;
    while s != start {
        let p = from[s] as usize;
        let ((i, j, la, lb), (pi, pj, _, _)) = (decode(s), decode(p));
        steps.push(((i > pi).then_some((pi, la)), (j > pj).then_some((pj, lb))));
        s = p;
    }
    steps.reverse();
    Ok(steps)
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
    fn parts(&self, stream: usize, i: usize, x: usize, last: usize, fresh: bool) -> Option<(f64, f64)> {
        let k = self.a.pus();
        let ch = if stream == 0 { self.a } else { self.b };
        self.parts[stream][(i * (k + 1) + last) * k + x]
            .map(|(t, w)| (t, if fresh && last == x && i > 0 { w - ch.saving_at(i, x) } else { w }))
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

    /// (latency, energy) of A's op i on x and B's op j on y at once, given their parts.
    fn pair(&self, i: usize, j: usize, x: usize, y: usize, (ta, wa): (f64, f64), (tb, wb): (f64, f64)) -> (f64, f64) {
        if x == y {
            let (ca, cb) = self.co.same_pu(i, j, x, (wa, wb));
            let span = (ta + ca).max(tb + cb);
            (span, span * self.a.power(i, x))
        } else if self.sf[x][y].is_infinite() {
            // PUs that share hardware: one op after the other
            let (da, db) = (ta + wa, tb + wb);
            (da + db, da * self.a.power(i, x) + db * self.b.power(j, y))
        } else {
            let (da, db) = (ta + wa * self.sf[x][y], tb + wb * self.sf[y][x]);
            (da.max(db), da * self.a.power(i, x) + db * self.b.power(j, y))
        }
    }

    /// (latency, energy) of one stream's op `i` alone on `x`, taking `us`.
    fn solo(&self, stream: usize, i: usize, x: usize, us: f64) -> (f64, f64) {
        let ch = if stream == 0 { self.a } else { self.b };
        (us, us * ch.power(i, x))
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
/// op waits while the other stream runs on a PU it shares hardware with, SF infinite). Each op is priced after its stream's last op and its freshness (as the search does);
/// where a stream's run of ops compiled together was measured whole, its ops' execution is
/// scaled to that measurement. None if an op cannot run where placed.
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
    // pass 2: per stream, the scale of each op's execution from runs measured whole
    let scales = |stream: usize, ch: &Chain| -> Option<Vec<f64>> {
        let ops: Vec<(usize, usize, usize, bool)> =
            ctx.iter().filter_map(|c| if stream == 0 { c.0 } else { c.1 }).collect();
        let mut scale = vec![1.0; ch.len()];
        let mut r = 0;
        while r < ops.len() {
            let joins = |o: &(usize, usize, usize, bool)| o.3 && o.2 == o.1 && o.0 > 0;
            let mut end = r + 1;
            while end < ops.len() && joins(&ops[end]) && ops[end].1 == ops[r].1 {
                end += 1;
            }
            let (first, last, x) = (ops[r].0, ops[end - 1].0, ops[r].1);
            if end - r >= 3
                && let Some(t) = ch.run_cost(first, last, x)
            {
                let approx: f64 = ops[r..end]
                    .iter()
                    .map(|o| step.parts(stream, o.0, o.1, o.2, o.3).map(|p| p.1))
                    .sum::<Option<f64>>()?;
                if approx > 0.0 {
                    ops[r..end].iter().for_each(|o| scale[o.0] = t / approx);
                }
            }
            r = end;
        }
        Some(scale)
    };
    let scale = [scales(0, a)?, scales(1, b)?];
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
                let (t, w) = step.parts(stream, i, x, last, fresh)?;
                tasks.push(Task { step: s, stream, i, x, t, w: w * scale[stream][i] });
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
            components: vec![],
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
