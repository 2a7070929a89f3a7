//! One inference in flight: the tensor slots every queue reads and fills, and a PU's queue
//! run as dataflow, each task once its inputs are there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bident_backend::{BackendError, HostTensor};

use super::hardware::Hardware;
use super::poll::{pause, polling_allowed};
use super::worker::Compiled;
use super::{Span, lock};
use crate::program::{Program, Task};

pub(super) struct Slots {
    pub(super) values: Vec<Option<(Arc<HostTensor>, Instant)>>,
    /// Tasks finished so far (the watchdog's measure of progress).
    pub(super) done: usize,
    /// Per PU: the task running now.
    pub(super) running: Vec<Option<usize>>,
    /// Workers asleep on the flight's condition variable, waiting for inputs: a task's outputs
    /// wake them only where there are any (`notify_all` is a system call even with no one to
    /// wake, on every task's critical path).
    pub(super) sleepers: usize,
    /// What each worker's queue gave back (beside the outputs: the last queue's end then moves
    /// no other cache line between cores).
    pub(super) answers: Vec<Result<Vec<Span>, Failure>>,
    /// The core the caller sleeps on (on the flight's condition variable), while it does: the
    /// worker of the last queue wakes it, and so does the worker pinned there as its queue ends,
    /// so that it polls there for the end instead (off the critical path: another PU's op runs).
    pub(super) caller_asleep: Option<usize>,
    pub(super) stop: bool,
}

pub(super) struct Flight {
    pub(super) slots: Mutex<Slots>,
    pub(super) cv: Condvar,
    /// Tasks published so far and whether to stop, readable without the lock (for spinning).
    pub(super) progress: AtomicUsize,
    pub(super) stopping: AtomicBool,
    pub(super) t0: Instant,
    /// Queues still running; the worker that finishes the last one wakes the caller, so that
    /// the caller, asleep where no core is free for it, is not woken beside a running op by
    /// every other queue's end (measured on `cores-mixed`: the second op, ONNX Runtime, took
    /// 19.2 µs in the session against 9.6 µs called directly).
    pub(super) left: AtomicUsize,
    /// Per PU: its queue has finished (the caller may poll on its cores).
    pub(super) finished: Vec<AtomicBool>,
}

/// A task's failure, reported by its worker.
pub(super) enum Failure {
    Task(usize, BackendError),
    Output(usize, String),
    /// Stopped because another worker failed or the watchdog fired.
    Stopped,
    /// The worker of this PU panicked (a bug): the inference stops.
    Panicked(usize),
}

/// Runs on PU `pu`'s worker, or on the caller: its queue in order, each task once its inputs are
/// there and the PU's hardware is free.
pub(super) fn run_queue(
    exes: &mut HashMap<usize, Compiled>,
    p: &Program,
    pu: usize,
    flight: &Flight,
    hw: &Hardware,
    spin: Duration,
) -> Result<Vec<Span>, Failure> {
    let mut spans = Vec::with_capacity(p.queues[pu].len());
    let us = |t: Instant| t.duration_since(flight.t0).as_secs_f64() * 1e6;
    for &t in &p.queues[pu] {
        let task = &p.tasks[t];
        let (inputs, ready) = await_inputs(flight, task, t, pu, spin)?;
        let c = exes.get_mut(&t).ok_or(Failure::Output(t, "not compiled".into()))?;
        let refs: Vec<&HostTensor> = c.feed.iter().map(|&i| inputs[i].as_ref()).collect();
        let held = hw.take(pu);
        let start = Instant::now();
        let result = c.exe.run(&refs);
        let finish = Instant::now();
        drop(held);
        let fail = |f: Failure| {
            let mut st = lock(&flight.slots);
            st.stop = true;
            flight.stopping.store(true, Ordering::Release);
            st.running[pu] = None;
            flight.cv.notify_all();
            Err(f)
        };
        let mut produced: Vec<Option<HostTensor>> = match result {
            Ok(o) => o.into_iter().map(Some).collect(),
            Err(e) => return fail(Failure::Task(t, e)),
        };
        let mut outs = Vec::with_capacity(task.outputs.len());
        for (j, &k) in c.take.iter().enumerate() {
            let Some(o) = produced.get_mut(k).and_then(Option::take) else {
                return fail(Failure::Output(t, format!("the backend gave {} outputs", produced.len())));
            };
            let (dtype, shape) = &task.output_types[j];
            if o.dtype != *dtype || o.shape != *shape {
                let why =
                    format!("`{}` is {}{:?}, bident inferred {dtype}{shape:?}", task.output_names[j], o.dtype, o.shape);
                return fail(Failure::Output(t, why));
            }
            outs.push(Arc::new(o));
        }
        let sleepers = {
            let mut st = lock(&flight.slots);
            for (&slot, o) in task.outputs.iter().zip(outs) {
                st.values[slot] = Some((o, finish));
            }
            st.done += 1;
            st.running[pu] = None;
            flight.progress.fetch_add(1, Ordering::Release);
            st.sleepers
        };
        if sleepers > 0 {
            flight.cv.notify_all();
        }
        spans.push(Span { task: t, ready_us: us(ready), start_us: us(start), finish_us: us(finish) });
    }
    Ok(spans)
}

/// Wait for task `t`'s inputs (polling for `spin`, then asleep), and mark it running on PU
/// `pu`: its inputs, and when the last of them was produced; stopped where the inference stops.
fn await_inputs(
    flight: &Flight,
    task: &Task,
    t: usize,
    pu: usize,
    spin: Duration,
) -> Result<(Vec<Arc<HostTensor>>, Instant), Failure> {
    let spin_until = Instant::now() + spin;
    let mut st = lock(&flight.slots);
    loop {
        if st.stop {
            return Err(Failure::Stopped);
        }
        let got: Option<Vec<_>> = task.inputs.iter().map(|&i| st.values[i].clone()).collect();
        if let Some(got) = got {
            st.running[pu] = Some(t);
            let ready = got.iter().map(|v| v.1).max().unwrap_or(flight.t0);
            return Ok((got.into_iter().map(|v| v.0).collect::<Vec<_>>(), ready));
        }
        if Instant::now() < spin_until && polling_allowed() {
            // spin until another task is published, then look again
            let seen = flight.progress.load(Ordering::Acquire);
            drop(st);
            let waiting =
                || flight.progress.load(Ordering::Acquire) == seen && !flight.stopping.load(Ordering::Acquire);
            while waiting() && Instant::now() < spin_until && polling_allowed() {
                pause(waiting);
            }
            st = lock(&flight.slots);
        } else {
            st.sleepers += 1;
            st = flight.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            st.sleepers -= 1;
        }
    }
}
