//! Polling instead of sleeping: how long a thread polls before it sleeps, one step of polling,
//! and the process-wide back-off after a yield that lost the core.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bident_backend::SocSpec;

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
pub(super) fn spin_for(soc: &SocSpec, used: &[bool], exclusive: &[Vec<bool>]) -> Duration {
    let n = soc.pus.len();
    let pinned = (0..n).filter(|&i| used[i]).all(|i| !soc.pus[i].cores.is_empty());
    let apart = (0..n).all(|i| !used[i] || (0..n).all(|j| !used[j] || !exclusive[i][j]));
    if pinned && apart { SPIN } else { Duration::ZERO }
}
pub(super) const IDLE_SPIN: Duration = Duration::from_micros(500);

/// One step of polling: up to 16 looks at `waiting` with a pause between them (~1 µs in all),
/// then, if it still waits, the CPU yielded, so that a thread sharing the core runs. Yielding at
/// every look (a system call) made each hand-off ~0.2 µs later to be seen here. A yield that
/// gave the core away for a time slice stops all polling in the process for a while
/// ([`yield_core`]).
pub(super) fn pause(mut waiting: impl FnMut() -> bool) {
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
pub(super) fn yield_briefly() -> bool {
    let t = Instant::now();
    std::thread::yield_now();
    t.elapsed() <= CONTENDED
}

/// Whether a thread may poll now: not while backing off from a contended yield ([`yield_core`]).
pub(super) fn polling_allowed() -> bool {
    now_us() >= POLL_AGAIN_AT.load(Ordering::Relaxed)
}
