//! The timing loop of one PU: compile a batch of units, run them in rounds on a thread pinned to
//! the PU's cores, and summarise each unit's runs as a [`Cost`].

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use bident_backend::{Backend, BackendError, Canceller, Executable, PuSpec, deadline};
use bident_tensor::HostTensor;

use crate::measure::{Entry, Timed};
use crate::*;

/// How long a measured round waits for the PU's cores' fast state ([`crate::speed`]), at most,
/// and all rounds of one PU's measurement together.
const SPEED_WAIT: Duration = Duration::from_millis(200);
const SPEED_BUDGET: Duration = Duration::from_secs(2);
const SPEED_EVERY: Duration = Duration::from_millis(20);

/// How often the timing loop reports its progress, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Profiled runs per op that split its inference call into dispatch and execution.
const SPLIT_RUNS: usize = 5;

/// Units compiled and timed at once on a PU, at most: what bounds the profile's memory. On a
/// 195-op CRNN (389 units per PU) the peak was 1.82 GB with every unit at once, 1.32 GB in
/// batches of 64, 1.12 GB in batches of 16 (and the profile took 201, 136 and 114 s).
pub const BATCH: usize = 16;

/// The units one PU times together: their models, inputs and names, and whether each one's
/// call is split into dispatch and execution (ops are; a run of ops compiled together is not:
/// compiling it profiled too took a third of a profile's time, for a split nothing reads).
pub(crate) struct Batch<'a> {
    pub models: &'a [&'a [u8]],
    pub inputs: &'a [&'a [HostTensor]],
    pub what: &'a [&'a str],
    pub split: &'a [bool],
}

/// One PU's measurement across its batches: progress over all of them, the budget of waits for
/// the cores' fast state, and the rounds that ran in a slow state.
pub(crate) struct Clock {
    /// Units to measure on the PU, and measured so far.
    total: usize,
    done: usize,
    budget: Duration,
    slow: usize,
    rounds: usize,
}

impl Clock {
    pub fn new(total: usize) -> Self {
        Self { total, done: 0, budget: SPEED_BUDGET, slow: 0, rounds: 0 }
    }

    /// Say how many measured rounds ran in a slow state of the PU's cores, if any did.
    pub fn say_slow(&self, pu: &str, progress: &mut dyn FnMut(Progress)) {
        if self.slow > 0 {
            let note = format!(
                "measured in a slow state of its cores {} times (the wait for their fast state ran out; see \
                 bident_profile::speed)",
                self.slow
            );
            progress(Progress { pu, phase: "slow", done: self.slow, total: self.rounds, note: Some(note) });
        }
    }
}

/// What the timing thread tells the caller: units done, in halves (a unit is half compiled,
/// half timed).
type Said = usize;

/// One PU's column of the table for one batch: a cost, or the backend's reason, per unit, and
/// how many measured rounds ran in a slow state of the PU's cores (the wait for their fast state
/// ran out); `Err` when the PU itself cannot be used.
pub(crate) fn profile_pu(
    backend: &dyn Backend,
    pu: &PuSpec,
    batch: Batch,
    cfg: &ProfileConfig,
    clock: &mut Clock,
    progress: &mut dyn FnMut(Progress),
) -> Result<Result<Timed, String>, ProfileError> {
    let (tx, rx) = std::sync::mpsc::channel::<Said>();
    let mut budget = clock.budget;
    let (n, total) = (batch.models.len(), clock.total);
    let worker = std::thread::scope(|s| {
        let worker = s.spawn(|| -> Result<Timed, BackendError> {
            bident_backend::pin_current_thread(&pu.name, &pu.cores)?;
            let mut timer = Timer::compile(backend, pu, &batch, &tx);
            let slow = timer.rounds(batch.inputs, pu, cfg, &mut budget, &tx);
            let measured_w = timer.power.take().and_then(|(rapl, start)| rapl.watts_since(&start?));
            drop(tx);
            Ok((timer.costs(cfg, pu, measured_w), slow))
        });
        for halves in rx {
            let done = clock.done + halves / 2;
            progress(Progress { pu: &pu.name, phase: "measuring", done, total, note: None });
        }
        worker.join()
    });
    clock.done += n;
    clock.budget = budget;
    clock.rounds += cfg.runs.max(1) as usize;
    match worker {
        Ok(Ok((costs, slow))) => {
            clock.slow += slow;
            Ok(Ok((costs, slow)))
        }
        Ok(Err(e)) => Ok(Err(e.to_string())),
        Err(_) => Err(ProfileError::Worker(pu.name.clone())),
    }
}

/// One unit's executables: the plain one that is timed, and a profiled one that only splits its
/// time into dispatch and execution.
struct Compiled {
    exe: Result<Box<dyn Executable>, String>,
    profiled: Option<Box<dyn Executable>>,
    /// `<what> on PU <pu>`, for a call that runs out of time; made once, not per call: the timing
    /// loop between two runs stays as it was.
    said: Arc<str>,
    cancel: Option<Canceller>,
    profiled_cancel: Option<Canceller>,
}

/// One unit's measured runs.
#[derive(Default)]
struct Runs {
    /// [h2d, infer, d2h] per measured run, µs.
    samples: [Vec<f64>; 3],
    /// Execution's share of a profiled run's inference call.
    split: Vec<f64>,
    failed: Option<String>,
    /// The adaptive stop was reached.
    done: bool,
}

/// The batch of one PU, compiled, and its runs so far.
struct Timer {
    units: Vec<(Compiled, Runs)>,
    /// The energy counter and its reading at the first measured round.
    power: Option<(power::Rapl, Option<power::Reading>)>,
}

impl Timer {
    /// Compile every unit of `batch` on `pu`: the timed executable plain (a backend's per-layer
    /// profiling may slow a run down, ONNX Runtime's writes a file per run), and, where its call
    /// is split, the profiled one quiet (its pool must not spin beside the timed runs).
    fn compile(backend: &dyn Backend, pu: &PuSpec, batch: &Batch, tx: &Sender<Said>) -> Self {
        let quiet = backend.quiet(pu);
        let cancel = |e: Option<&dyn Executable>| e.and_then(|e| e.canceller());
        let units = batch
            .models
            .iter()
            .zip(batch.what)
            .zip(batch.split)
            .enumerate()
            .map(|(i, ((m, what), &split))| {
                let _ = tx.send(i);
                let exe = backend.compile(m, pu).map_err(|e| e.to_string());
                let profiled = (split && exe.is_ok()).then(|| backend.compile_profiled(m, &quiet).ok()).flatten();
                let compiled = Compiled {
                    cancel: cancel(exe.as_deref().ok()),
                    profiled_cancel: cancel(profiled.as_deref()),
                    said: format!("{what} on PU `{}`", pu.name).into(),
                    exe,
                    profiled,
                };
                (compiled, Runs::default())
            })
            .collect();
        Self { units, power: power::Rapl::open().map(|r| (r, None)) }
    }

    /// Run `warmup + runs` rounds, each every unit once, until every unit stopped, the waits for
    /// the cores' fast state drawn from `budget`; the number of measured rounds that ran in a
    /// slow state of the PU's cores.
    fn rounds(
        &mut self,
        inputs: &[&[HostTensor]],
        pu: &PuSpec,
        cfg: &ProfileConfig,
        budget: &mut Duration,
        tx: &Sender<Said>,
    ) -> usize {
        let (rounds, n) = (cfg.warmup + cfg.runs.max(1), self.units.len());
        let (mut slow, mut last_probe, mut last_progress) = (0, None, None);
        for r in 0..rounds {
            // progress at most every PROGRESS_EVERY: each message wakes the thread that draws
            // it, which the scheduler may put on this core between two timed runs
            if last_progress.is_none_or(|t: Instant| t.elapsed() >= PROGRESS_EVERY) {
                let _ = tx.send(n + n * r as usize / rounds as usize);
                last_progress = Some(Instant::now());
            }
            let measured = r >= cfg.warmup;
            // measured rounds start in the PU's cores' fast state, probed from this thread (it
            // must not sleep before its runs) at most every SPEED_EVERY: a probe before every
            // round of one whole model (~50 µs) put it 5-10% higher
            if cfg.fast_state && measured && last_probe.is_none_or(|t: Instant| t.elapsed() >= SPEED_EVERY) {
                let w = crate::speed::await_fast_on(&pu.cores, SPEED_WAIT, budget);
                slow += usize::from(w.is_some_and(|w| !w.fast()));
                last_probe = Some(Instant::now());
            }
            if r == cfg.warmup
                && let Some((rapl, start)) = &mut self.power
            {
                *start = rapl.start();
            }
            for ((unit, runs), inputs) in self.units.iter_mut().zip(inputs) {
                run_once(unit, runs, inputs, measured, cfg);
            }
            if measured && self.units.iter().all(|(c, r)| r.done || r.failed.is_some() || c.exe.is_err()) {
                break;
            }
        }
        let _ = tx.send(2 * n);
        slow
    }

    /// Each unit's cost from its runs, or why it has none.
    fn costs(self, cfg: &ProfileConfig, pu: &PuSpec, measured_w: Option<f64>) -> Vec<Entry> {
        self.units.into_iter().map(|(unit, runs)| cost(unit, runs, cfg, pu, measured_w)).collect()
    }
}

/// One round of one unit: a profiled run while its split needs one (measured rounds only), then
/// the timed run; every call bounded by the process's limit (`--timeout`), cancelled past it.
fn run_once(unit: &mut Compiled, runs: &mut Runs, inputs: &[HostTensor], measured: bool, cfg: &ProfileConfig) {
    let Ok(exe) = unit.exe.as_mut() else { return };
    if runs.failed.is_some() || runs.done {
        return;
    }
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    if measured
        && runs.split.len() < SPLIT_RUNS
        && let Some(p) = unit.profiled.as_mut()
        && let Ok(Ok((_, t))) = deadline::guard(&unit.said, unit.profiled_cancel.as_ref(), || p.run_timed(&refs))
        && let Ok(layers) = p.layers()
    {
        let infer = t.infer.as_secs_f64();
        let exec: f64 = layers.iter().map(|l| l.real_time.as_secs_f64()).sum();
        if infer > 0.0 && exec > 0.0 {
            runs.split.push((exec / infer).min(1.0));
        }
    }
    match deadline::guard(&unit.said, unit.cancel.as_ref(), || exe.run_timed(&refs)).map_err(|e| e.to_string()) {
        Ok(Ok((_, t))) if measured => {
            let s = &mut runs.samples;
            s[0].push(t.h2d.as_secs_f64() * 1e6);
            s[1].push(t.infer.as_secs_f64() * 1e6);
            s[2].push(t.d2h.as_secs_f64() * 1e6);
            if cfg.adaptive && s[1].len() as u32 >= cfg.min_runs.max(3) {
                let mut w = s[1].clone();
                w.sort_by(f64::total_cmp);
                runs.done = median_rel_ci(&w) <= cfg.rel_ci;
            }
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => runs.failed = Some(e.to_string()),
        Err(e) => runs.failed = Some(e),
    }
}

/// A unit's cost: medians and p10/p90 of each component over its measured runs, the inference
/// call split into dispatch and execution by the profiled runs' median share (without a
/// profile the whole call counts as execution).
fn cost(unit: Compiled, runs: Runs, cfg: &ProfileConfig, pu: &PuSpec, measured_w: Option<f64>) -> Entry {
    unit.exe?;
    if let Some(e) = runs.failed {
        return Err(e);
    }
    let Runs { samples: [h2d, infer, d2h], mut split, .. } = runs;
    let share = if split.is_empty() { 1.0 } else { quantile(&mut split, 0.5) };
    let dispatch = infer.iter().map(|t| t * (1.0 - share)).collect();
    let exec = infer.iter().map(|t| t * share).collect();
    let mut parts = [h2d, dispatch, exec, d2h];
    let runs = parts[2].len() as u32;
    let stop_check = (!cfg.adaptive).then(|| replay_stop(&infer, cfg));
    let mut q = |k: usize, p: f64| quantile(&mut parts[k], p);
    let median = [q(0, 0.5), q(1, 0.5), q(2, 0.5), q(3, 0.5)];
    Ok(Cost {
        h2d_us: median[0],
        dispatch_us: median[1],
        exec_us: median[2],
        d2h_us: median[3],
        p10_us: [q(0, 0.1), q(1, 0.1), q(2, 0.1), q(3, 0.1)],
        p90_us: [q(0, 0.9), q(1, 0.9), q(2, 0.9), q(3, 0.9)],
        runs,
        power_w: measured_w.unwrap_or(pu.declared_power_w),
        power: if measured_w.is_some() { PowerSource::Measured } else { PowerSource::Declared },
        stop_check,
    })
}
