//! The evaluator of a concurrent plan: an event-driven simulation of how the runtime runs it.

use super::stepper::Stepper;
use super::{CoCost, PathStep};
use crate::{Chain, Objective};

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
    let step = Stepper::new(a, b, sf, co, Objective::Latency);
    // pass 1: each op's (position, PU, last PU, fresh), per step
    let (ctx, (la, lb)) = placed(steps, a.pus());
    // pass 2: per stream, each op's execution: its pair price, or its share of a run measured
    // whole ([`MeasuredRuns::price`])
    let work = [works(&step, &ctx, 0, a)?, works(&step, &ctx, 1, b)?];
    // pass 3: as the runtime runs it: each PU runs its ops in step order (A's before B's within
    // a step) one at a time, each stream its ops in order, the streams otherwise independent.
    // Event by event: an op first pays its transfers, then its execution progresses at rate
    // 1 / SF(its PU, the other's) while the other stream has an op running on another PU and at
    // rate 1 otherwise, so an op that starts mid-way through the other's slows it from then on
    let mut tasks = vec![];
    for (s, (ca, cb)) in ctx.iter().enumerate() {
        for (stream, c) in [(0, ca), (1, cb)] {
            if let Some((i, x, last, fresh)) = *c {
                let (t, _) = step.parts(stream, i, x, last, fresh)?;
                tasks.push(Task { step: s, stream, i, x, t, w: work[stream][i] });
            }
        }
    }
    let Ran { timing, stream_free, energy } = simulate(&tasks, [a, b], sf, steps.len())?;
    let tail_t = step.exit(a, a.len(), la) + step.exit(b, b.len(), lb);
    let energy_step = Stepper { obj: Objective::Energy, ..step };
    let tail_e = energy_step.exit(a, a.len(), la) + energy_step.exit(b, b.len(), lb);
    Some(Evaluation { timing, latency_us: stream_free[0].max(stream_free[1]) + tail_t, energy_uj: energy + tail_e })
}

/// Where an op of a stream runs: (position in its stream, PU, the stream's last PU, fresh).
type Placed = (usize, usize, usize, bool);

/// Where a step's ops of A and of B run.
type StepOps = (Option<Placed>, Option<Placed>);

/// Pass 1 of [`evaluate`]: per step, where its ops run ([`Placed`]); and each stream's last PU
/// at the end (`k`, the host, where it ran nothing).
fn placed(steps: &[PathStep], k: usize) -> (Vec<StepOps>, (usize, usize)) {
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
    (ctx, (la, lb))
}

/// Pass 2 of [`evaluate`]: per op of `stream` (on `ch`), its execution: its pair price, or its
/// share of a run measured whole ([`MeasuredRuns::price`]). None where an op cannot run where
/// placed.
///
/// [`MeasuredRuns::price`]: crate::MeasuredRuns::price
fn works(step: &Stepper, ctx: &[StepOps], stream: usize, ch: &Chain) -> Option<Vec<f64>> {
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
}

/// An op as pass 3 of [`evaluate`] runs it: its step, stream, position and PU, its transfers
/// (µs) and its execution (µs of work).
struct Task {
    step: usize,
    stream: usize,
    i: usize,
    x: usize,
    t: f64,
    w: f64,
}

/// What pass 3 of [`evaluate`] found: per step its (start, duration), when each stream
/// finished, and the energy of the ops.
struct Ran {
    timing: Vec<(f64, f64)>,
    stream_free: [f64; 2],
    energy: f64,
}

/// Pass 3 of [`evaluate`]: `tasks` (in step order) as the runtime runs them, event by event.
fn simulate(tasks: &[Task], chains: [&Chain; 2], sf: &[Vec<f64>], steps: usize) -> Option<Ran> {
    let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); chains[0].pus()];
    for (n, task) in tasks.iter().enumerate() {
        queues[task.x].push_back(n);
    }
    let mut next = [0usize; 2];
    // per stream, the op it runs: (task, start, transfer time left, execution work left)
    let mut running: [Option<(usize, f64, f64, f64)>; 2] = [None, None];
    let mut stream_free = [0.0f64; 2];
    let mut span = vec![(f64::INFINITY, 0.0f64); steps];
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
    let timing: Vec<(f64, f64)> =
        span.iter().map(|&(s, f)| if s.is_finite() { (s, f - s) } else { (0.0, 0.0) }).collect();
    Some(Ran { timing, stream_free, energy })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrent::TimeSlicing;

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
}
