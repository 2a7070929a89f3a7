//! The machine's speed state, as a measurement sees it: a fixed computation (multiply-adds
//! over 256 floats, no memory traffic, no engine) timed on a core, against the fastest this
//! process has seen it there.
//!
//! On a shared VM a core has slow states (1.4-1.6x, lasting from milliseconds to minutes) that
//! hit every computation on it alike. In an exploratory loop of 200 blocks 0.5-0.7 s apart on
//! one core, each block's median of this probe tracked a whole model's (correlation 0.72-0.90,
//! three zoo models, both engines); over the blocks with the probe within 6% of its fastest
//! before and after, the models' block medians spread 1.09-1.22x (p90 / p10), against 1.9-2.2x
//! over all. So the profile's rounds and the runtime's measuring blocks start once the cores
//! they use are in their fast state ([`await_fast`]), waiting within a budget.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A core is in its fast state while the probe takes at most this times its fastest there.
const FAST: f64 = 1.06;

/// Timed runs of the fixed computation per probe (its median counts), and its passes.
const RUNS: usize = 8;
const PASSES: usize = 25;

/// The fastest probe seen per CPU in this process, µs.
static FASTEST: Mutex<Vec<f64>> = Mutex::new(Vec::new());

/// What every probe's slowness is multiplied by ([`pretend_slowness`]), as `f64` bits.
static PRETEND: AtomicU64 = AtomicU64::new(1.0f64.to_bits());

/// For tests: every probe of this process from now on reads `factor` times slower than it
/// measured (1 measures as it is), so that a test can hold the machine in a slow state.
#[doc(hidden)]
pub fn pretend_slowness(factor: f64) {
    PRETEND.store(factor.to_bits(), Ordering::Relaxed);
}

/// The fixed computation once, `passes` passes over 256 floats (25 take ~20 µs here), µs.
pub fn fixed_computation_us(passes: usize) -> f64 {
    let t = Instant::now();
    let mut a = [1.0f32; 256];
    for k in 0..passes {
        for (i, x) in a.iter_mut().enumerate() {
            *x = x.mul_add(0.999, (i + k) as f32 * 1e-6);
        }
    }
    std::hint::black_box(&a);
    t.elapsed().as_secs_f64() * 1e6
}

/// The probe on the calling thread: the median of [`RUNS`] runs of the fixed computation, µs.
fn probe_us() -> f64 {
    let mut t: Vec<f64> = (0..RUNS).map(|_| fixed_computation_us(PASSES)).collect();
    bident_stats::quantile(&mut t, 0.5)
}

/// The probe on the calling thread, over the fastest seen on the CPU it ran on: at least 1.
/// None where that CPU cannot be told or the clock gave no usable time.
fn slowness_here() -> Option<f64> {
    let us = probe_us();
    let cpu = crate::current_cpu()?;
    if !(us.is_finite() && us > 0.0) {
        return None;
    }
    let mut fastest = FASTEST.lock().unwrap_or_else(|e| e.into_inner());
    if fastest.len() <= cpu {
        fastest.resize(cpu + 1, f64::INFINITY);
    }
    fastest[cpu] = fastest[cpu].min(us);
    Some(us / fastest[cpu] * f64::from_bits(PRETEND.load(Ordering::Relaxed)))
}

/// [`slowness_here`] on a thread pinned to CPU `cpu`; None where it cannot be pinned.
fn slowness(cpu: usize) -> Option<f64> {
    std::thread::scope(|s| {
        s.spawn(|| crate::pin_current_thread("speed-probe", &[cpu]).ok().and_then(|()| slowness_here()))
            .join()
            .ok()
            .flatten()
    })
}

/// How a wait for the fast state ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Waited {
    /// The slowest core's probe over its fastest when the wait ended (1 = as fast as seen).
    pub slowness: f64,
    /// Time spent waiting.
    pub waited: Duration,
}

impl Waited {
    pub fn fast(&self) -> bool {
        self.slowness <= FAST
    }
}

/// Probe each of `cores` (every allowed CPU where empty: an unpinned PU runs anywhere), each on
/// a thread pinned there, until all are in their fast state or `most` has passed, probing again
/// at once. Spends the time waited from `budget`, and only probes once where `budget` is spent.
/// None where no core can be probed. For a thread about to measure on its own cores
/// [`await_fast_here`]: one that waits for a probe thread sleeps, and a run after a sleep is
/// slower (waking costs 20-26 µs a run on this VM).
pub fn await_fast(cores: &[usize], most: Duration, budget: &mut Duration) -> Option<Waited> {
    let cpus = if cores.is_empty() { crate::allowed_cpus() } else { cores.to_vec() };
    wait(most, budget, || cpus.iter().filter_map(|&c| slowness(c)).reduce(f64::max))
}

/// [`await_fast`] on the calling thread, for the CPU it runs on.
pub fn await_fast_here(most: Duration, budget: &mut Duration) -> Option<Waited> {
    wait(most, budget, slowness_here)
}

/// [`await_fast`] for a thread about to measure on `cores` (every allowed CPU where empty): the
/// CPU it runs on probed on it, each other core on a thread pinned there at the same time, the
/// calling thread polling for their results rather than sleeping ([`await_fast_here`] where it
/// is the only core). A PU on two cores measures slow when either is slow, and the runtime's
/// blocks wait for every core.
pub fn await_fast_on(cores: &[usize], most: Duration, budget: &mut Duration) -> Option<Waited> {
    let cpus = if cores.is_empty() { crate::allowed_cpus() } else { cores.to_vec() };
    let here = crate::current_cpu();
    let others: Vec<usize> = cpus.into_iter().filter(|&c| Some(c) != here).collect();
    if others.is_empty() {
        return await_fast_here(most, budget);
    }
    wait(most, budget, || {
        let left = AtomicUsize::new(others.len());
        std::thread::scope(|s| {
            let probes: Vec<_> = others
                .iter()
                .map(|&c| {
                    let left = &left;
                    s.spawn(move || {
                        let r = crate::pin_current_thread("speed-probe", &[c]).ok().and_then(|()| slowness_here());
                        left.fetch_sub(1, Ordering::AcqRel);
                        r
                    })
                })
                .collect();
            let mine = slowness_here();
            while left.load(Ordering::Acquire) > 0 {
                std::hint::spin_loop();
            }
            let theirs: Vec<Option<f64>> = probes.into_iter().map(|p| p.join().ok().flatten()).collect();
            mine.into_iter().chain(theirs.into_iter().flatten()).reduce(f64::max)
        })
    })
}

fn wait(most: Duration, budget: &mut Duration, mut probe: impl FnMut() -> Option<f64>) -> Option<Waited> {
    let t0 = Instant::now();
    let limit = most.min(*budget);
    loop {
        let worst = probe()?;
        if worst <= FAST || t0.elapsed() >= limit {
            let waited = t0.elapsed().min(limit);
            *budget = budget.saturating_sub(waited);
            return Some(Waited { slowness: worst, waited });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_takes_microseconds_and_a_core_is_never_faster_than_its_fastest() {
        let us = probe_us();
        assert!(us > 0.0 && us < 100_000.0, "{us}");
        let cpu = crate::allowed_cpus()[0];
        let s = slowness(cpu).expect("a probe on an allowed CPU");
        assert!(s >= 1.0, "{s}");
        let here = await_fast_here(Duration::ZERO, &mut Duration::from_secs(0)).expect("a probe here");
        assert!(here.slowness >= 1.0, "{here:?}");
        // every allowed core, the calling thread's among them
        let all = await_fast_on(&[], Duration::ZERO, &mut Duration::from_secs(0)).expect("probes on every core");
        assert!(all.slowness >= 1.0, "{all:?}");
    }

    #[test]
    fn a_spent_budget_probes_once_and_waits_for_nothing() {
        let mut budget = Duration::ZERO;
        let w = await_fast(&[], Duration::from_secs(5), &mut budget).expect("probed");
        assert_eq!(w.waited, Duration::ZERO);
        assert!(w.slowness >= 1.0);
    }

    #[test]
    fn waiting_is_taken_from_the_budget_and_never_beyond_it() {
        let mut budget = Duration::from_millis(30);
        let w = await_fast(&[], Duration::from_secs(5), &mut budget).expect("probed");
        assert!(w.waited <= Duration::from_millis(30));
        assert_eq!(budget, Duration::from_millis(30) - w.waited);
    }
}
