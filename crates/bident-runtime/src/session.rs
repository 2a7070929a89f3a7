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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bident_backend::{Backend, BackendError, Canceller, Executable, HostTensor, PuSpec, SocSpec};

use crate::RuntimeError;
use crate::program::{Built, Program};

/// A task's compiled sub-model, and where its ports sit in the task's input / output order.
struct Compiled {
    exe: Box<dyn Executable>,
    /// `feed[i]`: the task input fed to the executable's input `i`.
    feed: Vec<usize>,
    /// `take[j]`: the executable output that is the task's output `j`.
    take: Vec<usize>,
}

type Job = Box<dyn FnOnce(&mut HashMap<usize, Compiled>) + Send>;

/// A thread pinned to one PU, owning the executables compiled for it.
struct Worker {
    pu: String,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// Set when a job outlived its timeout: the thread is abandoned, never joined.
    hung: AtomicBool,
}

impl Worker {
    /// `idle_spin`: how long the worker polls for its next job before it sleeps.
    fn spawn(pu: &PuSpec, idle_spin: Duration) -> Result<Self, RuntimeError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let spec = pu.clone();
        let lost = || RuntimeError::Worker { pu: pu.name.clone(), why: "could not start".into() };
        let handle = std::thread::Builder::new()
            .name(format!("pu-{}", pu.name))
            .spawn(move || {
                let pinned = bident_backend::pin_current_thread(&spec.name, &spec.cores);
                let ok = pinned.is_ok();
                let _ = ready_tx.send(pinned);
                if !ok {
                    return;
                }
                let mut exes = HashMap::new();
                let mut idle_since = Instant::now();
                let mut spinning = true;
                loop {
                    // spin a little before sleeping: back-to-back inferences then start at once
                    let job = match rx.try_recv() {
                        Ok(job) => job,
                        Err(mpsc::TryRecvError::Empty)
                            if spinning && idle_since.elapsed() < idle_spin && polling_allowed() =>
                        {
                            // yield: another thread pinned here (another session's worker) runs.
                            // A yield that lost the core for a time slice ends this worker's spin
                            // only, with no back-off for the process ([`yield_core`]): it is
                            // mostly the caller's own work between inferences (a run's baselines)
                            spinning = yield_briefly();
                            continue;
                        }
                        Err(mpsc::TryRecvError::Empty) => match rx.recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        },
                        Err(mpsc::TryRecvError::Disconnected) => return,
                    };
                    job(&mut exes);
                    idle_since = Instant::now();
                    spinning = true;
                }
            })
            .map_err(|_| lost())?;
        match ready_rx.recv() {
            Ok(Ok(())) => {
                Ok(Self { pu: pu.name.clone(), tx: Mutex::new(Some(tx)), handle: Some(handle), hung: false.into() })
            }
            Ok(Err(e)) => Err(RuntimeError::Load { what: "pinning".into(), pu: pu.name.clone(), source: Box::new(e) }),
            Err(_) => Err(lost()),
        }
    }

    fn post(&self, job: Job) -> Result<(), RuntimeError> {
        let lost = || RuntimeError::Worker { pu: self.pu.clone(), why: "its thread has stopped".into() };
        let tx = lock(&self.tx);
        tx.as_ref().ok_or_else(lost)?.send(job).map_err(|_| lost())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        lock(&self.tx).take();
        if let Some(h) = self.handle.take()
            && !self.hung.load(Ordering::Relaxed)
        {
            let _ = h.join();
        }
    }
}

/// A program on one unpinned PU, run on the calling thread ([`inline_pu`]): its executables
/// (compiled on a worker, then handed over) and a watchdog thread that cancels a run making no
/// progress for the timeout.
struct Inline {
    pu: usize,
    exes: Mutex<HashMap<usize, Compiled>>,
    watch: Arc<Watch>,
    watchdog: Option<std::thread::JoinHandle<()>>,
}

/// What the watchdog of an [`Inline`] program looks at.
struct Watch {
    /// The inference running now.
    flight: Mutex<Option<Arc<Flight>>>,
    cancel: Vec<Canceller>,
    /// The tasks that were running when the watchdog cancelled them.
    fired: Mutex<Option<Vec<usize>>>,
    /// Set when the session goes: the watchdog ends.
    gone: Mutex<bool>,
    cv: Condvar,
}

impl Inline {
    /// `cancel`: a canceller of each of `exes`.
    fn new(
        pu: usize,
        (exes, cancel): (HashMap<usize, Compiled>, Vec<Canceller>),
        timeout: Duration,
    ) -> Result<Self, RuntimeError> {
        let watch = Arc::new(Watch {
            flight: Mutex::new(None),
            cancel,
            fired: Mutex::new(None),
            gone: Mutex::new(false),
            cv: Condvar::new(),
        });
        let w = watch.clone();
        let watchdog = std::thread::Builder::new()
            .name("bident-watchdog".into())
            .spawn(move || w.watch(timeout))
            .map_err(|e| RuntimeError::Worker { pu: "?".into(), why: format!("cannot start a watchdog: {e}") })?;
        Ok(Inline { pu, exes: Mutex::new(exes), watch, watchdog: Some(watchdog) })
    }
}

impl Watch {
    /// Look every quarter of the timeout (at most every 250 ms): an inference whose tasks made no
    /// progress for the timeout has its runs cancelled, once.
    fn watch(&self, timeout: Duration) {
        let tick = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(250));
        // (the inference, its tasks finished, since when)
        let mut seen: Option<(Arc<Flight>, usize, Instant)> = None;
        let mut gone = lock(&self.gone);
        loop {
            gone = self.cv.wait_timeout(gone, tick).unwrap_or_else(|e| e.into_inner()).0;
            if *gone {
                return;
            }
            // held while it decides: the caller clears the inference under it, then reads `fired`
            let current = lock(&self.flight);
            let Some(flight) = current.as_ref() else {
                seen = None;
                continue;
            };
            let done = flight.progress.load(Ordering::Acquire);
            match &seen {
                Some((f, d, since)) if Arc::ptr_eq(f, flight) && *d == done => {
                    if since.elapsed() >= timeout && lock(&self.fired).is_none() {
                        let running = lock(&flight.slots).running.iter().flatten().copied().collect();
                        *lock(&self.fired) = Some(running);
                        self.cancel.iter().for_each(|c| c());
                    }
                }
                _ => seen = Some((flight.clone(), done, Instant::now())),
            }
        }
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        *lock(&self.watch.gone) = true;
        self.watch.cv.notify_all();
        if let Some(h) = self.watchdog.take() {
            let _ = h.join();
        }
    }
}

/// The hardware PUs share: a lock per CPU core (an unpinned CPU PU takes every core this
/// process may run on) and per other device, taken by a PU's worker around each backend call,
/// in index order, so that PUs sharing hardware never run at once ([`SocSpec::exclusive`]).
/// Empty when no two PUs the program uses share hardware: then nothing is locked.
struct Hardware {
    locks: Vec<Mutex<()>>,
    /// Per PU, the locks it takes, ascending.
    of_pu: Vec<Vec<usize>>,
}

impl Hardware {
    fn new(soc: &SocSpec, used: &[bool], exclusive: &[Vec<bool>]) -> Self {
        let n = soc.pus.len();
        let shares = (0..n).any(|i| used[i] && (0..n).any(|j| used[j] && exclusive[i][j]));
        if !shares {
            return Self { locks: vec![], of_pu: vec![vec![]; n] };
        }
        let all = bident_backend::allowed_cpus();
        let mut keys: Vec<String> = vec![];
        let of_pu = soc
            .pus
            .iter()
            .map(|pu| {
                let mine: Vec<String> = match pu.kind {
                    bident_backend::PuKind::Cpu => {
                        let cores = if pu.cores.is_empty() { &all } else { &pu.cores };
                        cores.iter().map(|c| format!("core {c}")).collect()
                    }
                    kind => vec![format!("{} {}", kind.name(), pu.device)],
                };
                let mut idx: Vec<usize> = mine
                    .into_iter()
                    .map(|k| match keys.iter().position(|x| *x == k) {
                        Some(i) => i,
                        None => {
                            keys.push(k);
                            keys.len() - 1
                        }
                    })
                    .collect();
                idx.sort_unstable();
                idx.dedup();
                idx
            })
            .collect();
        Self { locks: keys.iter().map(|_| Mutex::new(())).collect(), of_pu }
    }

    /// Hold PU `pu`'s hardware until the guards drop.
    fn take(&self, pu: usize) -> Vec<MutexGuard<'_, ()>> {
        self.of_pu[pu].iter().map(|&i| lock(&self.locks[i])).collect()
    }
}

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

struct Slots {
    values: Vec<Option<(Arc<HostTensor>, Instant)>>,
    /// Tasks finished so far (the watchdog's measure of progress).
    done: usize,
    /// Per PU: the task running now.
    running: Vec<Option<usize>>,
    /// Workers asleep on the flight's condition variable, waiting for inputs: a task's outputs
    /// wake them only where there are any (`notify_all` is a system call even with no one to
    /// wake, on every task's critical path).
    sleepers: usize,
    /// What each worker's queue gave back (beside the outputs: the last queue's end then moves
    /// no other cache line between cores).
    answers: Vec<Result<Vec<Span>, Failure>>,
    /// The core the caller sleeps on (on the flight's condition variable), while it does: the
    /// worker of the last queue wakes it, and so does the worker pinned there as its queue ends,
    /// so that it polls there for the end instead (off the critical path: another PU's op runs).
    caller_asleep: Option<usize>,
    stop: bool,
}

struct Flight {
    slots: Mutex<Slots>,
    cv: Condvar,
    /// Tasks published so far and whether to stop, readable without the lock (for spinning).
    progress: AtomicUsize,
    stopping: AtomicBool,
    t0: Instant,
    /// Queues still running; the worker that finishes the last one wakes the caller, so that
    /// the caller, asleep where no core is free for it, is not woken beside a running op by
    /// every other queue's end (measured on `cores-mixed`: the second op, ONNX Runtime, took
    /// 19.2 µs in the session against 9.6 µs called directly).
    left: AtomicUsize,
    /// Per PU: its queue has finished (the caller may poll on its cores).
    finished: Vec<AtomicBool>,
}

/// How long a thread polls (yielding the CPU between polls) before it sleeps: a worker for its
/// inputs or its next job, the caller for the workers' answers. Waking a sleeping thread costs
/// tens of µs on a VM whose idle vCPU halts (measured here: the first op of an inference
/// started ~50 µs late, the caller saw the end ~40 µs late); a hand-off caught while polling
/// costs about one. Polling yields so that a thread sharing the core (the caller is not
/// pinned; another session's worker may be pinned there) is never starved for a time slice.
const SPIN: Duration = Duration::from_millis(5);

/// How long the caller and the workers poll before they sleep: [`SPIN`] where every PU the
/// program uses is pinned to cores of its own, none where one runs on every core or two share
/// a core. A polling thread takes the core from whoever needs it there: beside a multi-threaded
/// engine on 2 cores it stalled ONNX Runtime's default inference from ~150 µs to ~4 ms (a
/// scheduler tick) now and then, and a worker polling for its inputs on the core its producer
/// ran on stalled plans the same way.
fn spin_for(soc: &SocSpec, used: &[bool], exclusive: &[Vec<bool>]) -> Duration {
    let n = soc.pus.len();
    let pinned = (0..n).filter(|&i| used[i]).all(|i| !soc.pus[i].cores.is_empty());
    let apart = (0..n).all(|i| !used[i] || (0..n).all(|j| !used[j] || !exclusive[i][j]));
    if pinned && apart { SPIN } else { Duration::ZERO }
}
const IDLE_SPIN: Duration = Duration::from_micros(500);

/// One step of polling: up to 16 looks at `waiting` with a pause between them (~1 µs in all),
/// then, if it still waits, the CPU yielded, so that a thread sharing the core runs. Yielding at
/// every look (a system call) made each hand-off ~0.2 µs later to be seen here. A yield that
/// gave the core away for a time slice stops all polling in the process for a while
/// ([`yield_core`]).
fn pause(mut waiting: impl FnMut() -> bool) {
    for _ in 0..16 {
        if !waiting() {
            return;
        }
        std::hint::spin_loop();
    }
    yield_core();
}

/// A yield that returns later than this ran another thread on the core for a time slice:
/// something else wants the core (a yield where nothing does returns in ~1 µs here, one
/// across a hiccup of the VM in up to ~0.4 ms; a busy thread's slice lasts a few ms).
const CONTENDED: Duration = Duration::from_micros(500);

/// How long no thread of the process polls after a contended yield, at first; doubled each
/// time the contention is back within as long again after polling resumed, up to
/// [`MOST_BACK_OFF`]. Polling resumes quickly after a short contention and stays off beside a
/// busy process. In a quiet pipeline run (`--soc cores`, 60 runs), threads of the process
/// itself contended 2-4 times (yields of 0.6-4.2 ms).
const LEAST_BACK_OFF: Duration = Duration::from_millis(5);
const MOST_BACK_OFF: Duration = Duration::from_secs(1);

/// When polling may start again (µs since [`epoch`]), and the back-off that set it (µs). Two
/// threads finding contention at once may each set them; either's back-off serves.
static POLL_AGAIN_AT: AtomicU64 = AtomicU64::new(0);
static BACK_OFF_US: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

/// Yield the core; where that ran another thread for longer than [`CONTENDED`], stop polling
/// for a while ([`polling_allowed`]). A thread that polls with yields beside a busy one
/// (another process's, on a shared machine) hands it the core for its whole time slice at
/// every yield: a one-op session on a pinned PU measured ~3,900 µs an inference beside two
/// busy threads (~2 µs alone), the scheduler's tick; a thread asleep is woken ahead of a busy
/// one instead, at the cost of the wake-up (tens of µs on this VM).
fn yield_core() {
    if !yield_briefly() {
        let now = now_us();
        let (again, last) = (POLL_AGAIN_AT.load(Ordering::Relaxed), BACK_OFF_US.load(Ordering::Relaxed));
        let least = LEAST_BACK_OFF.as_micros() as u64;
        let back_off =
            if last > 0 && now < again + last { (2 * last).min(MOST_BACK_OFF.as_micros() as u64) } else { least };
        BACK_OFF_US.store(back_off, Ordering::Relaxed);
        POLL_AGAIN_AT.store(now + back_off, Ordering::Relaxed);
    }
}

/// Yield the core; whether it came back within [`CONTENDED`].
fn yield_briefly() -> bool {
    let t = Instant::now();
    std::thread::yield_now();
    t.elapsed() <= CONTENDED
}

/// Whether a thread may poll now: not while backing off from a contended yield ([`yield_core`]).
fn polling_allowed() -> bool {
    now_us() >= POLL_AGAIN_AT.load(Ordering::Relaxed)
}

/// A task's failure, reported by its worker.
enum Failure {
    Task(usize, BackendError),
    Output(usize, String),
    /// Stopped because another worker failed or the watchdog fired.
    Stopped,
    /// The worker of this PU panicked (a bug): the inference stops.
    Panicked(usize),
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
        // every worker compiles its own tasks, all workers at once
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
                        let take =
                            ports(outs.iter().map(String::as_str), &exe_names(exe.outputs()), &spec.name, "output")?;
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
        let workers = || self.workers.iter().enumerate().filter_map(|(pu, w)| Some((pu, w.as_ref()?)));
        let flight = Arc::new(Flight {
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
            left: AtomicUsize::new(workers().count()),
            finished: (0..self.pus.len()).map(|_| AtomicBool::new(false)).collect(),
        });
        for (pu, w) in workers() {
            let (program, flight, hw, spin, pu_of_core) =
                (p.clone(), flight.clone(), self.hardware.clone(), self.spin, self.pu_of_core.clone());
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
        // a program on the calling thread (it has no workers)
        let mut mine = None;
        if let Some(inline) = &self.inline {
            *lock(&inline.watch.flight) = Some(flight.clone());
            let answer = run_queue(&mut lock(&inline.exes), p, inline.pu, &flight, &self.hardware, self.spin);
            *lock(&inline.watch.flight) = None;
            if let Some(hung) = lock(&inline.watch.fired).take() {
                return Err(self.hang(&hung));
            }
            mine = Some(answer);
        }
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
            if may_poll(&flight) {
                pause(|| flight.left.load(Ordering::Acquire) != 0);
                continue;
            }
            let mut st = lock(&flight.slots);
            st.caller_asleep = Some(bident_backend::current_cpu().unwrap_or(usize::MAX));
            // checked under the lock a worker takes to end its queue: no wake-up is lost
            let mut timed_out = false;
            while flight.left.load(Ordering::Acquire) != 0 && !may_poll(&flight) && !timed_out {
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
        let total_us = t0.elapsed().as_secs_f64() * 1e6;
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

/// Runs on PU `pu`'s worker, or on the caller: its queue in order, each task once its inputs are
/// there and the PU's hardware is free.
fn run_queue(
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
        let spin_until = Instant::now() + spin;
        let (inputs, ready) = {
            let mut st = lock(&flight.slots);
            loop {
                if st.stop {
                    return Err(Failure::Stopped);
                }
                let got: Option<Vec<_>> = task.inputs.iter().map(|&i| st.values[i].clone()).collect();
                if let Some(got) = got {
                    st.running[pu] = Some(t);
                    let ready = got.iter().map(|v| v.1).max().unwrap_or(flight.t0);
                    break (got.into_iter().map(|v| v.0).collect::<Vec<_>>(), ready);
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
        };
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
