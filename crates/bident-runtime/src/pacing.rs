//! When a measuring block runs: in turns of a few inferences, after a warm-up, once the
//! process's other threads went idle and every core is in its fast state.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::RuntimeError;
#[cfg(doc)]
use crate::compare::undecided;

/// Inferences of the plan, then of each baseline, in one turn of the measurement.
pub(crate) const BLOCK: u32 = 5;

/// After the configured runs, turns go on while the blocks do not yet tell some alternative's
/// median from the plan's ([`undecided`]), up to this many times the configured turns in all,
/// and none starts once the run has measured for [`MORE_TURNS_UNTIL`]. By medians of twelve
/// blocks an alternative as fast as the plan beats it by chance (pi0.5 whole on core 0, ratios
/// 0.74-1.34 over its ten blocks, 12% ahead by medians, not beyond the noise); more blocks
/// narrow that chance.
pub(crate) const MORE_TURNS: u32 = 4;
pub(crate) const MORE_TURNS_UNTIL: Duration = Duration::from_secs(60);

/// The shortest warm-up before a block's measured inferences ([`warm_up`]).
const WARM: Duration = Duration::from_millis(5);

/// Run `run` at least `runs` times and for at least [`WARM`]: a block's first inferences after
/// its session's threads went idle run slower than in a steady stream, which the profile times.
/// For a model of a few µs three runs warm nothing (KAN INT8 whole on one pinned core, in blocks
/// after 20 ms idle: 21.6-22.1 µs a run after three runs of warm-up, 19.2-20.2 after 2 ms,
/// 19.7-20.0 back to back), and for one of ~50-200 µs 2 ms is not enough: the medians of five
/// runs after 20 ms idle, in 30 blocks per warm-up on `core0` taking turns, were 2-7% above back
/// to back after 2 ms (LaViSH 183.4 µs against 171.1, silero-vad-sr 55.5 against 52.4, Mamba 156.2
/// against 153.9, KAN INT8 26.3 against 25.9) and within 1% of it after 5, 10 and 20 ms.
pub(crate) fn warm_up(runs: u32, mut run: impl FnMut() -> Result<(), RuntimeError>) -> Result<(), RuntimeError> {
    let t0 = Instant::now();
    let mut done = 0;
    while done < runs || t0.elapsed() < WARM {
        run()?;
        done += 1;
    }
    Ok(())
}

/// The pause before each session's block in a measurement turn, at least ([`let_threads_settle`]).
const SETTLE: Duration = Duration::from_millis(20);

/// How long a measuring block waits for every core's fast state ([`bident_backend::speed`]) at
/// most, and all blocks of one run together, with the blocks measured again ([`FastState`]),
/// beyond the time the blocks kept took.
const SPEED_WAIT: Duration = Duration::from_millis(200);
const SPEED_BUDGET: Duration = Duration::from_secs(5);

/// Measuring blocks in the machine's fast state ([`bident_backend::speed`]): each starts once
/// every core is in it, and one that a core left during it is measured again, within a budget
/// for the whole run (waiting, and the blocks measured again: [`SPEED_BUDGET`] and the time of
/// the blocks kept). On this VM a core is slow
/// (1.4-1.6x) much of the time, in stretches from milliseconds to minutes; a block in a slow
/// state compares two sessions under two machines. KAN INT8 whole, called directly on a thread
/// pinned to core 1, in 120 blocks 0.3 s apart: p10 / median / p90 of the block medians 31.5 / 43.1 / 67.1
/// µs over all blocks, 31.4 / 32.1 / 33.6 µs over those with every core fast before and after.
pub(crate) struct FastState {
    budget: Cell<Duration>,
    /// Blocks kept, and how many of those were not in the fast state throughout.
    pub blocks: Cell<u32>,
    pub slow_blocks: Cell<u32>,
    /// The wait before the current block ran out.
    slow_start: Cell<bool>,
    /// Whether the last block kept was a slow one.
    pub last_slow: Cell<bool>,
}

impl FastState {
    fn new() -> Self {
        Self {
            budget: Cell::new(SPEED_BUDGET),
            blocks: Cell::new(0),
            slow_blocks: Cell::new(0),
            slow_start: Cell::new(false),
            last_slow: Cell::new(false),
        }
    }

    /// Before a block (or a model's part of one): wait for every core's fast state.
    pub(crate) fn before(&self) {
        let mut budget = self.budget.get();
        let w = bident_backend::speed::await_fast(&[], SPEED_WAIT, &mut budget);
        self.budget.set(budget);
        self.slow_start.set(self.slow_start.get() || w.is_some_and(|w| !w.fast()));
    }

    /// After a block that took `took`: whether to measure it again (a core left its fast state
    /// and the budget still holds the block's time, which is taken from it). A block kept is
    /// counted, as slow where it was.
    pub(crate) fn again(&self, took: Duration) -> bool {
        let mut budget = self.budget.get();
        let slow = bident_backend::speed::await_fast(&[], Duration::ZERO, &mut budget).is_some_and(|w| !w.fast());
        if slow && budget > took {
            self.budget.set(budget - took);
            self.slow_start.set(false);
            return true;
        }
        // a run may wait as long as it measured, beyond the fixed budget: a third-party model's
        // turn of blocks takes ~0.5 s, and 5 s ran out half-way (the OCR detector's run kept 47
        // of 60 blocks in a slow state)
        self.budget.set(budget + took);
        self.blocks.set(self.blocks.get() + 1);
        self.last_slow.set(slow || self.slow_start.get());
        self.slow_blocks.set(self.slow_blocks.get() + u32::from(self.last_slow.get()));
        self.slow_start.set(false);
        false
    }
}

/// How long [`let_threads_settle`] waits beyond [`SETTLE`] for the process's other threads to stop.
const SETTLE_MAX: Duration = Duration::from_millis(300);

/// Before a session's block: [`SETTLE`], then until no other thread of this process runs, for
/// at most [`SETTLE_MAX`]. ONNX Runtime's default pool spins on for 40 to 60 ms after its last
/// inference (measured here); the block after it ran beside that spinning thread (a ResNet on
/// one pinned core, 495 µs alone, measured 3,950 µs right after ONNX Runtime's default). Where
/// a wait runs out (some thread of the process runs throughout: tests beside each other),
/// `waits` is cleared and later settles only pause.
fn let_threads_settle(waits: &Cell<bool>) {
    std::thread::sleep(SETTLE);
    let until = Instant::now() + SETTLE_MAX;
    while waits.get() {
        match bident_backend::other_threads_running() {
            None | Some(0) => return,
            Some(_) if Instant::now() >= until => waits.set(false),
            Some(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// What paces the blocks of one measurement. Before each session's block, the previous
/// session's threads go idle: its workers poll a little after each inference and a
/// multi-threaded engine's pool spins for a while (after 1 ms, ONNX Runtime's default on both
/// cores was measured at ~100 or ~140 µs on the example depending on whose block came before;
/// after 20 ms, at ~140 µs beside the same configuration's ~145; its pool spins on for up to
/// 60 ms, see [`let_threads_settle`]); and every core goes to its fast state, a block it did not
/// last through measured again ([`FastState`]).
pub(crate) struct Pace {
    waits: Cell<bool>,
    pub speed: FastState,
}

impl Pace {
    pub(crate) fn new() -> Self {
        Self { waits: Cell::new(true), speed: FastState::new() }
    }

    /// Before a session's block (or a model's part of one).
    pub(crate) fn settle(&self) {
        let_threads_settle(&self.waits);
        self.speed.before();
    }
}

#[cfg(test)]
mod tests {
    use super::{WARM, warm_up};

    /// A warm-up runs its runs and lasts its time, whichever is longer, and stops at an error.
    #[test]
    fn a_warm_up_lasts_its_runs_and_its_time() {
        for (runs, each) in [(3, std::time::Duration::ZERO), (3, WARM)] {
            let (t0, mut done) = (std::time::Instant::now(), 0);
            warm_up(runs, || {
                std::thread::sleep(each);
                done += 1;
                Ok(())
            })
            .expect("no error");
            assert!(done >= runs && t0.elapsed() >= WARM, "{done} runs in {:?}", t0.elapsed());
            // no more runs than it takes to pass both marks
            assert!(each.is_zero() || done == runs, "{done} runs of {each:?}");
        }
        let mut done = 0;
        let failed = warm_up(3, || {
            done += 1;
            Err(super::RuntimeError::Program("no".into()))
        });
        assert!(failed.is_err() && done == 1);
    }
}
