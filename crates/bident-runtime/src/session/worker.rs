//! The threads behind a session: a worker pinned to each PU, owning the executables compiled
//! for it, and a program on the calling thread (`Inline`) with the watchdog that cancels it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bident_backend::{Canceller, Executable, PuSpec};

use super::dataflow::Flight;
use super::lock;
use super::poll::{polling_allowed, yield_briefly};
use crate::RuntimeError;

/// A task's compiled sub-model, and where its ports sit in the task's input / output order.
pub(super) struct Compiled {
    pub(super) exe: Box<dyn Executable>,
    /// `feed[i]`: the task input fed to the executable's input `i`.
    pub(super) feed: Vec<usize>,
    /// `take[j]`: the executable output that is the task's output `j`.
    pub(super) take: Vec<usize>,
}

pub(super) type Job = Box<dyn FnOnce(&mut HashMap<usize, Compiled>) + Send>;

/// A thread pinned to one PU, owning the executables compiled for it.
pub(super) struct Worker {
    pub(super) pu: String,
    pub(super) tx: Mutex<Option<mpsc::Sender<Job>>>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// Set when a job outlived its timeout: the thread is abandoned, never joined.
    pub(super) hung: AtomicBool,
}

impl Worker {
    /// `idle_spin`: how long the worker polls for its next job before it sleeps.
    pub(super) fn spawn(pu: &PuSpec, idle_spin: Duration) -> Result<Self, RuntimeError> {
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

    pub(super) fn post(&self, job: Job) -> Result<(), RuntimeError> {
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

/// A program on one unpinned PU, run on the calling thread ([`inline_pu`](super::inline_pu)):
/// its executables (compiled on a worker, then handed over) and a watchdog thread that cancels a
/// run making no progress for the timeout.
pub(super) struct Inline {
    pub(super) pu: usize,
    pub(super) exes: Mutex<HashMap<usize, Compiled>>,
    pub(super) watch: Arc<Watch>,
    pub(super) watchdog: Option<std::thread::JoinHandle<()>>,
}

/// What the watchdog of an [`Inline`] program looks at.
pub(super) struct Watch {
    /// The inference running now.
    pub(super) flight: Mutex<Option<Arc<Flight>>>,
    pub(super) cancel: Vec<Canceller>,
    /// The tasks that were running when the watchdog cancelled them.
    pub(super) fired: Mutex<Option<Vec<usize>>>,
    /// Set when the session goes: the watchdog ends.
    gone: Mutex<bool>,
    pub(super) cv: Condvar,
}

impl Inline {
    /// `cancel`: a canceller of each of `exes`.
    pub(super) fn new(
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
