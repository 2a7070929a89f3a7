//! One bound on every measured engine call: profiling, refining, baselines, co-execution and
//! serving's re-plans all run their calls through [`guard`], so a model that never finishes (a
//! `Loop` with a trip count of 10^12) stops the command instead of hanging it.
//!
//! A call past the process's limit ([`set_limit`], the CLI's `--timeout`) is cancelled through
//! its executable's [`Canceller`] and reported as [`TimedOut`]. An engine may not stop: OpenVINO
//! checks for cancellation between nodes only, so one `Loop` node runs on. A call still running
//! a grace period after its cancel cannot be stopped inside this process; the stuck handler
//! ([`on_stuck`]) then runs with a one-line message, and by default prints it and exits, as
//! `timeout(1)` would: a library cannot unwind a thread stuck in native code.
//!
//! One watchdog thread serves every guard; arming and disarming a guard take a lock, outside
//! whatever the call times itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::Canceller;

/// The limit of one call unless set: the CLI's `--timeout` default.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(60);

static LIMIT_MS: AtomicU64 = AtomicU64::new(60_000);
static STUCK: Mutex<Option<fn(&str)>> = Mutex::new(None);

/// Bound every guarded call of this process by `limit` (at least 1 ms).
pub fn set_limit(limit: Duration) {
    LIMIT_MS.store((limit.as_millis() as u64).max(1), Ordering::Relaxed);
}

/// The bound of one guarded call.
pub fn limit() -> Duration {
    Duration::from_millis(LIMIT_MS.load(Ordering::Relaxed))
}

/// What runs when a cancelled call does not stop (the message says which and why): by default
/// the message goes to stderr and the process exits with status 124.
pub fn on_stuck(handler: fn(&str)) {
    *STUCK.lock().unwrap_or_else(|e| e.into_inner()) = Some(handler);
}

/// A call ran past the limit and was cancelled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what} ran past the {secs} s limit {CANCELLED}")]
pub struct TimedOut {
    pub what: String,
    pub secs: f64,
}

const CANCELLED: &str = "(--timeout) and was cancelled";

/// Whether a failure's reason (a [`TimedOut`] as text, perhaps inside another message) says a
/// call ran out of time: a fact about the limit, not the op, so never cached as the op's.
pub fn is_timed_out(reason: &str) -> bool {
    reason.contains(CANCELLED)
}

struct Armed {
    what: Arc<str>,
    started: Instant,
    limit: Duration,
    cancel: Option<Canceller>,
    cancelled_at: Option<Instant>,
}

struct Watchdog {
    armed: Mutex<BTreeMap<u64, Armed>>,
    next: AtomicU64,
}

fn watchdog() -> &'static Arc<Watchdog> {
    static W: OnceLock<Arc<Watchdog>> = OnceLock::new();
    W.get_or_init(|| {
        let w = Arc::new(Watchdog { armed: Mutex::new(BTreeMap::new()), next: AtomicU64::new(0) });
        let seen = w.clone();
        // if the thread cannot start, guards still run their calls, unbounded
        let _ = std::thread::Builder::new().name("bident-deadline".into()).spawn(move || seen.watch());
        w
    })
}

impl Watchdog {
    fn watch(&self) {
        loop {
            let tick = (limit() / 8).clamp(Duration::from_millis(5), Duration::from_millis(250));
            std::thread::sleep(tick);
            let (mut stuck, mut cancel) = (None, vec![]);
            {
                let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
                for a in armed.values_mut() {
                    match a.cancelled_at {
                        None if a.started.elapsed() >= a.limit => {
                            a.cancelled_at = Some(Instant::now());
                            cancel.extend(a.cancel.clone());
                        }
                        Some(at) if at.elapsed() >= grace(a.limit) => {
                            stuck = Some(format!(
                                "{} ran past the {} s limit (--timeout) and did not stop when cancelled \
                                 (the engine cannot interrupt it)",
                                a.what,
                                a.limit.as_secs_f64()
                            ));
                        }
                        _ => {}
                    }
                }
            }
            // called with no lock held: a canceller may take the engine's own locks
            cancel.iter().for_each(|c| c());
            if let Some(message) = stuck {
                let handler = *STUCK.lock().unwrap_or_else(|e| e.into_inner());
                match handler {
                    Some(h) => h(&message),
                    None => {
                        eprintln!("error: {message}");
                        std::process::exit(124);
                    }
                }
            }
        }
    }
}

/// How long a cancelled call may take to stop.
fn grace(limit: Duration) -> Duration {
    limit.clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// Run `call` bounded by [`limit`]: past it, `cancel` (the executable's) is called and the
/// result is [`TimedOut`] whatever the call returned. `what` names the call in the message
/// ("op 3 `loop` on PU `CPU`"); made once per unit, it costs a reference count per call.
pub fn guard<T>(what: &Arc<str>, cancel: Option<&Canceller>, call: impl FnOnce() -> T) -> Result<T, TimedOut> {
    let w = watchdog();
    let id = w.next.fetch_add(1, Ordering::Relaxed);
    let limit = limit();
    let armed =
        Armed { what: what.clone(), started: Instant::now(), limit, cancel: cancel.cloned(), cancelled_at: None };
    w.armed.lock().unwrap_or_else(|e| e.into_inner()).insert(id, armed);
    let out = call();
    let armed = w.armed.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    match armed {
        Some(a) if a.cancelled_at.is_some() => Err(TimedOut { what: a.what.to_string(), secs: limit.as_secs_f64() }),
        _ => Ok(out),
    }
}

/// [`guard`] on one call of `exe` on PU `pu`, its own canceller armed; past the limit the call's
/// result is a [`crate::BackendError::Run`] saying so.
pub fn guard_exe<E: crate::Executable + ?Sized, T>(
    exe: &mut E,
    pu: &str,
    what: &str,
    call: impl FnOnce(&mut E) -> Result<T, crate::BackendError>,
) -> Result<T, crate::BackendError> {
    let cancel = exe.canceller();
    let said: Arc<str> = format!("{what} on PU `{pu}`").into();
    guard(&said, cancel.as_ref(), || call(exe)).unwrap_or_else(|t| {
        Err(crate::BackendError::Run { pu: pu.to_string(), what: what.to_string(), reason: t.to_string() })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// One test for the process-wide limit: tests run in parallel.
    #[test]
    fn a_call_past_the_limit_is_cancelled_and_reported() {
        set_limit(Duration::from_millis(50));
        assert_eq!(guard(&"quick".into(), None, || 7), Ok(7));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let cancel: Canceller = Arc::new(move || flag.store(true, Ordering::Relaxed));
        // an engine that honours its cancel: it spins until told to stop, so returning at all
        // is the cancel's doing
        let r = guard(&"op 3 `loop` on PU `CPU`".into(), Some(&cancel), || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            "finished anyway"
        });
        let e = r.unwrap_err();
        assert_eq!(e.what, "op 3 `loop` on PU `CPU`");
        assert!(e.to_string().contains("ran past the 0.05 s limit"), "{e}");
        assert!(is_timed_out(&format!("PU `CPU`: {e}")));

        // an engine that ignores its cancel: the stuck handler hears of it, once the grace
        // period has passed (it would exit the process by default)
        static STUCK_SAID: Mutex<Option<String>> = Mutex::new(None);
        on_stuck(|m| *STUCK_SAID.lock().unwrap() = Some(m.to_string()));
        let r = guard(&"op 4 `forever` on PU `CPU`".into(), None, || {
            while STUCK_SAID.lock().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        assert!(r.is_err());
        let said = STUCK_SAID.lock().unwrap().clone().unwrap();
        assert!(said.starts_with("op 4 `forever` on PU `CPU` ran past the 0.05 s limit"), "{said}");
        assert!(said.contains("did not stop when cancelled"), "{said}");
        set_limit(DEFAULT_LIMIT);
    }
}
