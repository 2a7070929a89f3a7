//! A loaded program: one worker thread per PU (pinned to the PU's cores), every task compiled
//! on its worker at load, and inferences run as dataflow: each worker runs its PU's queue in
//! order, each task as soon as its inputs are there. Tensors are handed between workers as
//! shared references, never copied.
//!
//! Nothing waits forever: a watchdog stops an inference when no task has finished for the
//! timeout, and a worker's failure stops the others at their next task. After a timeout the
//! session is unusable (the hung worker is abandoned, never joined) and says why.
//!
//! A program on one unpinned PU whose executables can be stopped from another thread
//! ([`Executable::canceller`]) runs on the calling thread instead (`Inline`): no thread hop,
//! which on this VM cost ~15-35 µs an inference, the caller's and the worker's wake-ups; its
//! watchdog stops a run by cancelling it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[cfg(doc)]
use bident_backend::Executable;
use bident_backend::{Backend, BackendError, Canceller, HostTensor, PuSpec, SocSpec};

use crate::RuntimeError;
use crate::program::{Built, Program};

mod dataflow;
mod hardware;
mod poll;
mod worker;

use dataflow::{Failure, Flight, Slots, run_queue};
use hardware::Hardware;
use poll::{IDLE_SPIN, pause, polling_allowed, spin_for};
use worker::{Compiled, Inline, Worker};

/// A poisoned lock only means another thread panicked while holding it; the data (tensor
/// slots, a sender) stays consistent, so go on.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// When one task of an inference ran (µs from the inference's start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub task: usize,
    /// When its last input was produced (the inference's start for graph inputs).
    pub ready_us: f64,
    pub start_us: f64,
    pub finish_us: f64,
}

/// One inference's outputs and timeline.
#[derive(Clone, Debug)]
pub struct Inference {
    /// Per stream, its model's outputs in graph order.
    pub outputs: Vec<Vec<Arc<HostTensor>>>,
    /// One per task, in task order.
    pub spans: Vec<Span>,
    pub total_us: f64,
}

impl Inference {
    /// Executor overhead per task (µs): the time from the moment a task could start (inputs
    /// produced and its PU free) to its start, averaged over tasks. Everything the runtime adds
    /// beyond the backend's own infer calls, hand-offs between threads included.
    pub fn overhead_us_per_task(&self, program: &Program) -> f64 {
        let mut free = vec![0.0f64; program.queues.len()];
        let mut sum = 0.0;
        for q in &program.queues {
            for &t in q {
                let s = &self.spans[t];
                let pu = program.tasks[t].pu;
                sum += (s.start_us - s.ready_us.max(free[pu])).max(0.0);
                free[pu] = s.finish_us;
            }
        }
        sum / self.spans.len().max(1) as f64
    }
}

/// A program compiled on its PUs, ready to run inferences. `Send + Sync`: inferences from
/// several threads take turns (an inference uses every PU of the program).
pub struct Session {
    program: Arc<Program>,
    pus: Vec<PuSpec>,
    workers: Vec<Option<Worker>>,
    hardware: Arc<Hardware>,
    /// How long workers poll before sleeping ([`spin_for`]).
    spin: Duration,
    /// Whether some core this process may run on has no PU of the program pinned to it: the
    /// caller then polls there (a caller polling beside pinned workers on every core took one's
    /// core for a scheduler tick now and then: a 150 µs plan measured 3.7 ms).
    free_core: bool,
    /// The cores the program's PUs are pinned to: a caller found on one of them moves to a free
    /// core first, where there is one ([`bident_backend::step_off`]).
    busy: Vec<usize>,
    /// Per core, the PU of the program pinned to it (where the caller and workers poll, no two
    /// share a core).
    pu_of_core: Arc<Vec<Option<usize>>>,
    /// Set where the program runs on the calling thread ([`Inline`]).
    inline: Option<Inline>,
    timeout: Duration,
    turn: Mutex<()>,
    /// Why the session can no longer run (a worker hung), once it cannot.
    broken: Mutex<Option<String>>,
    compile_ms: f64,
}

impl Session {
    /// Start a worker for every PU the program uses and compile every task on it. A task that
    /// does not compile is an error naming it and its PU.
    pub fn load(
        (program, bytes): Built,
        soc: &SocSpec,
        backend: Arc<dyn Backend>,
        timeout: Duration,
    ) -> Result<Self, RuntimeError> {
        let used: Vec<bool> = program.queues.iter().map(|q| !q.is_empty()).collect();
        let exclusive = soc.exclusive();
        let spin = spin_for(soc, &used, &exclusive);
        let idle_spin = if spin.is_zero() { Duration::ZERO } else { IDLE_SPIN };
        let mut workers: Vec<Option<Worker>> = (0..soc.pus.len()).map(|_| None).collect();
        for (pu, q) in program.queues.iter().enumerate() {
            if !q.is_empty() {
                workers[pu] = Some(Worker::spawn(&soc.pus[pu], idle_spin)?);
            }
        }
        let t0 = Instant::now();
        compile_tasks(&workers, (&program, bytes), soc, &backend, timeout)?;
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let inline =
            inline_pu(&program, soc).map(|pu| Self::hand_over(&mut workers, pu, timeout)).transpose()?.flatten();
        let mut busy: Vec<usize> =
            (0..soc.pus.len()).filter(|&i| used[i]).flat_map(|i| soc.pus[i].cores.clone()).collect();
        busy.sort_unstable();
        busy.dedup();
        let free_core = bident_backend::allowed_cpus().iter().any(|c| !busy.contains(c));
        let mut pu_of_core = vec![None; busy.last().map_or(0, |c| c + 1)];
        for pu in (0..soc.pus.len()).filter(|&i| used[i]) {
            for &c in &soc.pus[pu].cores {
                pu_of_core[c] = Some(pu);
            }
        }
        Ok(Self {
            busy,
            free_core,
            pu_of_core: Arc::new(pu_of_core),
            inline,
            spin,
            hardware: Arc::new(Hardware::new(soc, &used, &exclusive)),
            program: Arc::new(program),
            pus: soc.pus.clone(),
            workers,
            timeout,
            turn: Mutex::new(()),
            broken: Mutex::new(None),
            compile_ms,
        })
    }

    /// The executables of PU `pu`'s worker, handed to an [`Inline`] program and the worker
    /// stopped, where every one of them can be cancelled; None (the worker kept) where not.
    fn hand_over(workers: &mut [Option<Worker>], pu: usize, timeout: Duration) -> Result<Option<Inline>, RuntimeError> {
        let Some(w) = &workers[pu] else { return Ok(None) };
        let (tx, rx) = mpsc::channel();
        w.post(Box::new(move |exes| {
            let cancel: Option<Vec<Canceller>> = exes.values().map(|c| c.exe.canceller()).collect();
            let _ = tx.send(cancel.map(|cancel| (std::mem::take(exes), cancel)));
        }))?;
        let lost = || RuntimeError::Worker { pu: w.pu.clone(), why: "its thread has stopped".into() };
        let Some(handed) = rx.recv_timeout(timeout).map_err(|_| lost())? else { return Ok(None) };
        workers[pu] = None;
        Inline::new(pu, handed, timeout).map(Some)
    }

    /// Whether inferences run on the calling thread (`Inline`).
    pub fn on_caller(&self) -> bool {
        self.inline.is_some()
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Time spent compiling every task at load (ms).
    pub fn compile_ms(&self) -> f64 {
        self.compile_ms
    }

    /// One inference: `inputs[s]` are stream `s`'s model inputs in graph order.
    pub fn run(&self, inputs: &[Vec<Arc<HostTensor>>]) -> Result<Inference, RuntimeError> {
        let _turn = lock(&self.turn);
        if let Some(why) = lock(&self.broken).clone() {
            return Err(RuntimeError::Broken(why));
        }
        let flight = self.take_off(inputs)?;
        self.post_queues(&flight)?;
        // a program on the calling thread (it has no workers)
        let mine = self.run_inline(&flight)?;
        self.await_queues(&flight)?;
        self.land(&flight, mine)
    }

    /// The workers of the PUs the program uses.
    fn workers(&self) -> impl Iterator<Item = (usize, &Worker)> {
        self.workers.iter().enumerate().filter_map(|(pu, w)| Some((pu, w.as_ref()?)))
    }

    /// An inference about to start: `inputs` checked and in their slots, the clock started.
    fn take_off(&self, inputs: &[Vec<Arc<HostTensor>>]) -> Result<Arc<Flight>, RuntimeError> {
        let p = &self.program;
        if inputs.len() != p.streams.len() {
            return Err(RuntimeError::Inputs(format!("{} input sets for {} models", inputs.len(), p.streams.len())));
        }
        let t0 = Instant::now();
        // a caller on a worker's core shares it with the worker: every hand-off is then a
        // context switch there (LLaMA INT8 whole on `core0.ort`: 115.5 µs a run with the caller
        // on core 0, 103.0 with it on core 1; unpinned, the scheduler kept it on core 0 in 95-100%
        // of runs, whichever core the worker had)
        if self.free_core {
            bident_backend::step_off(&self.busy);
        }
        let mut values = vec![None; p.slots];
        for (s, given) in p.streams.iter().zip(inputs) {
            if s.inputs.len() != given.len() {
                return Err(RuntimeError::Inputs(format!(
                    "`{}` takes {} inputs, {} given",
                    s.model,
                    s.inputs.len(),
                    given.len()
                )));
            }
            for (&slot, t) in s.inputs.iter().zip(given) {
                values[slot] = Some((t.clone(), t0));
            }
        }
        Ok(Arc::new(Flight {
            slots: Mutex::new(Slots {
                values,
                done: 0,
                running: vec![None; self.pus.len()],
                sleepers: 0,
                answers: Vec::with_capacity(self.pus.len()),
                caller_asleep: None,
                stop: false,
            }),
            cv: Condvar::new(),
            progress: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            t0,
            left: AtomicUsize::new(self.workers().count()),
            finished: (0..self.pus.len()).map(|_| AtomicBool::new(false)).collect(),
        }))
    }

    /// Hand every worker its queue of the inference; each gives back its answer and wakes the
    /// caller where it must.
    fn post_queues(&self, flight: &Arc<Flight>) -> Result<(), RuntimeError> {
        for (pu, w) in self.workers() {
            let (program, flight, hw, spin, pu_of_core) =
                (self.program.clone(), flight.clone(), self.hardware.clone(), self.spin, self.pu_of_core.clone());
            w.post(Box::new(move |exes| {
                let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_queue(exes, &program, pu, &flight, &hw, spin)
                }))
                .unwrap_or(Err(Failure::Panicked(pu)));
                flight.finished[pu].store(true, Ordering::SeqCst);
                let mut st = lock(&flight.slots);
                let panicked = matches!(answer, Err(Failure::Panicked(_)));
                if panicked {
                    // its outputs will never come: stop the others
                    st.stop = true;
                    flight.stopping.store(true, Ordering::Release);
                }
                st.answers.push(answer);
                let last = flight.left.fetch_sub(1, Ordering::AcqRel) == 1;
                let wake = panicked
                    || st.caller_asleep.is_some_and(|c| last || pu_of_core.get(c).copied().flatten() == Some(pu));
                drop(st);
                if wake {
                    flight.cv.notify_all();
                }
            }))?;
        }
        Ok(())
    }

    /// Run the program's queue on the calling thread where it runs there ([`Inline`]): its
    /// answer, or the timeout where the watchdog cancelled it.
    fn run_inline(&self, flight: &Arc<Flight>) -> Result<Option<Result<Vec<Span>, Failure>>, RuntimeError> {
        let Some(inline) = &self.inline else { return Ok(None) };
        *lock(&inline.watch.flight) = Some(flight.clone());
        let answer = run_queue(&mut lock(&inline.exes), &self.program, inline.pu, flight, &self.hardware, self.spin);
        *lock(&inline.watch.flight) = None;
        if let Some(hung) = lock(&inline.watch.fired).take() {
            return Err(self.hang(&hung));
        }
        Ok(Some(answer))
    }

    /// Wait until every worker has answered; a timeout where no task finished for as long.
    fn await_queues(&self, flight: &Flight) -> Result<(), RuntimeError> {
        let mut seen_done = 0;
        let spin_until = Instant::now() + self.spin;
        // the caller polls for the end (waking it costs several µs) while it is on a core no PU
        // of the program still needs: a free core, or one whose PU's queue has finished;
        // elsewhere it sleeps, and the worker of the core it sleeps on wakes it to poll there
        // once that worker's queue ends
        let may_poll = |flight: &Flight| {
            Instant::now() < spin_until
                && polling_allowed()
                && bident_backend::current_cpu().is_some_and(|c| match self.pu_of_core.get(c).copied().flatten() {
                    None => self.free_core,
                    Some(pu) => flight.finished[pu].load(Ordering::SeqCst),
                })
        };
        // every worker's answer is in once `left` is 0
        while flight.left.load(Ordering::Acquire) != 0 {
            if may_poll(flight) {
                pause(|| flight.left.load(Ordering::Acquire) != 0);
                continue;
            }
            let mut st = lock(&flight.slots);
            st.caller_asleep = Some(bident_backend::current_cpu().unwrap_or(usize::MAX));
            // checked under the lock a worker takes to end its queue: no wake-up is lost
            let mut timed_out = false;
            while flight.left.load(Ordering::Acquire) != 0 && !may_poll(flight) && !timed_out {
                let (g, w) = flight.cv.wait_timeout(st, self.timeout).unwrap_or_else(|e| e.into_inner());
                st = g;
                timed_out = w.timed_out();
            }
            st.caller_asleep = None;
            if !timed_out {
                continue;
            }
            // watchdog: some task must finish within the timeout
            if st.done > seen_done {
                seen_done = st.done;
                continue;
            }
            st.stop = true;
            flight.stopping.store(true, Ordering::Release);
            flight.cv.notify_all();
            let hung: Vec<usize> = st.running.iter().flatten().copied().collect();
            drop(st);
            return Err(self.hang(&hung));
        }
        Ok(())
    }

    /// The inference once every queue answered (`mine`: the calling thread's): its outputs and
    /// timeline, or the first failure.
    fn land(&self, flight: &Flight, mine: Option<Result<Vec<Span>, Failure>>) -> Result<Inference, RuntimeError> {
        let p = &self.program;
        let mut spans = vec![];
        let mut failure = None;
        let mut st = lock(&flight.slots);
        for answer in mine.into_iter().chain(std::mem::take(&mut st.answers)) {
            match answer {
                Ok(s) => spans.extend(s),
                Err(Failure::Stopped) => {}
                Err(f) => {
                    failure.get_or_insert(f);
                }
            }
        }
        if let Some(f) = failure {
            return Err(match f {
                Failure::Task(t, e) => self.op_error(t, e),
                Failure::Output(t, why) => {
                    let task = &p.tasks[t];
                    RuntimeError::OpOutput { what: task.label(), name: task.name.clone(), why }
                }
                Failure::Stopped => RuntimeError::Program("stopped without a cause".into()),
                Failure::Panicked(pu) => {
                    RuntimeError::Worker { pu: self.pus[pu].name.clone(), why: "it panicked mid-inference".into() }
                }
            });
        }
        let total_us = flight.t0.elapsed().as_secs_f64() * 1e6;
        spans.sort_by_key(|s| s.task);
        let outputs = p
            .streams
            .iter()
            .map(|s| s.outputs.iter().map(|&o| st.values[o].as_ref().map(|v| v.0.clone())).collect::<Option<Vec<_>>>())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| RuntimeError::Program("an output was not produced".into()))?;
        Ok(Inference { outputs, spans, total_us })
    }

    fn op_error(&self, t: usize, e: BackendError) -> RuntimeError {
        let task = &self.program.tasks[t];
        RuntimeError::Op {
            what: task.label(),
            name: task.name.clone(),
            pu: self.pus[task.pu].name.clone(),
            source: Box::new(e),
        }
    }

    /// Abandon the workers running `hung` tasks and break the session.
    fn hang(&self, hung: &[usize]) -> RuntimeError {
        let what: Vec<String> = hung
            .iter()
            .map(|&t| {
                let task = &self.program.tasks[t];
                if let Some(w) = &self.workers[task.pu] {
                    w.hung.store(true, Ordering::Relaxed);
                }
                format!("{} `{}` on PU `{}`", task.label(), task.name, self.pus[task.pu].name)
            })
            .collect();
        let why = format!(
            "no task finished for {} s; still running: {}",
            self.timeout.as_secs_f64(),
            if what.is_empty() { "nothing".into() } else { what.join(", ") }
        );
        *lock(&self.broken) = Some(why.clone());
        RuntimeError::Timeout(why)
    }
}

/// Every task compiled on its PU's worker, all workers at once, each worker its own tasks in
/// queue order; the first task that does not compile is an error naming it and its PU.
fn compile_tasks(
    workers: &[Option<Worker>],
    (program, bytes): (&Program, Vec<Vec<u8>>),
    soc: &SocSpec,
    backend: &Arc<dyn Backend>,
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let (tx, rx) = mpsc::channel();
    let mut bytes: Vec<Option<Vec<u8>>> = bytes.into_iter().map(Some).collect();
    for (pu, q) in program.queues.iter().enumerate() {
        let Some(w) = &workers[pu] else { continue };
        // (task, ONNX bytes, its input names, its output names)
        let jobs: Vec<(usize, Vec<u8>, [Vec<String>; 2])> = q
            .iter()
            .map(|&t| {
                let task = &program.tasks[t];
                (t, bytes[t].take().unwrap_or_default(), [task.input_names.clone(), task.output_names.clone()])
            })
            .collect();
        // a task that runs beside others gets the PU's quiet configuration (no pool spinning
        // on after its run while the next task runs); a program of one task, as configured
        let spec = if program.tasks.len() > 1 { backend.quiet(&soc.pus[pu]) } else { soc.pus[pu].clone() };
        let (be, tx) = (backend.clone(), tx.clone());
        w.post(Box::new(move |exes| {
            for (t, onnx, [ins, outs]) in jobs {
                let r = be.compile(&onnx, &spec).and_then(|exe| {
                    let feed = ports(exe.inputs().iter().map(|p| p.name.as_str()), &ins, &spec.name, "input")?;
                    let take = ports(outs.iter().map(String::as_str), &exe_names(exe.outputs()), &spec.name, "output")?;
                    exes.insert(t, Compiled { exe, feed, take });
                    Ok(())
                });
                let failed = r.is_err();
                let _ = tx.send((t, r));
                if failed {
                    return;
                }
            }
        }))?;
    }
    drop(tx);
    let mut left: usize = program.tasks.len();
    while left > 0 {
        let (t, r) = rx.recv_timeout(timeout).map_err(|_| RuntimeError::Worker {
            pu: "?".into(),
            why: format!("compiling took over {} s", timeout.as_secs()),
        })?;
        let task = &program.tasks[t];
        r.map_err(|e| RuntimeError::Op {
            what: task.label(),
            name: task.name.clone(),
            pu: soc.pus[task.pu].name.clone(),
            source: Box::new(e),
        })?;
        left -= 1;
    }
    Ok(())
}

/// The PU whose queue the calling thread runs ([`Inline`]): a program's only PU, where that PU
/// is not pinned. Running the first queue of any program whose PUs are pinned apart on the
/// caller, moved onto that PU's core, halved the single-tensor hand-off between engines (6 to
/// 3-4 µs more than direct calls), but the `cores` eval's whole-model runs on one core then
/// spread twice as wide (p90 / p10 of a plan's runs 1.3-2.7, against 1.1-1.5 on a pinned
/// worker), in two runs; pinning the caller instead cost ~1 µs an inference, and OpenVINO's
/// calls took ~0.9 µs longer on a pinned thread.
fn inline_pu(program: &Program, soc: &SocSpec) -> Option<usize> {
    let mut used = program.queues.iter().enumerate().filter(|(_, q)| !q.is_empty()).map(|(pu, _)| pu);
    match (used.next(), used.next()) {
        (Some(pu), None) if soc.pus[pu].cores.is_empty() => Some(pu),
        _ => None,
    }
}

fn exe_names(ports: &[bident_backend::PortInfo]) -> Vec<String> {
    ports.iter().map(|p| p.name.clone()).collect()
}

/// For each of `wanted`'s names, its position in `have`: by name where every name is found,
/// else by position when the counts agree (a backend may rename ports).
fn ports<'a>(
    wanted: impl Iterator<Item = &'a str>,
    have: &[String],
    pu: &str,
    what: &str,
) -> Result<Vec<usize>, BackendError> {
    let wanted: Vec<&str> = wanted.collect();
    let by_name: Option<Vec<usize>> = wanted.iter().map(|w| have.iter().position(|h| h == w)).collect();
    match by_name {
        Some(v) => Ok(v),
        None if wanted.len() == have.len() => Ok((0..wanted.len()).collect()),
        None => Err(BackendError::Compile {
            pu: pu.into(),
            reason: format!("the compiled model has {} {what}s, the task {}", have.len(), wanted.len()),
        }),
    }
}
