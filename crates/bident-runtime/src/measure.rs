//! Measuring a plan: its session and every alternative take turns in blocks, with the same
//! inputs, its outputs checked in every block; the figures become the `RunReport`.

use std::sync::Arc;
use std::time::Instant;

use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_search::Plan;
use bident_search::concurrent::ConcurrentPlan;
use bident_tensor::HostTensor;

use crate::baselines::{Alternatives, reference_pu, whole_default};
use crate::compare::{Regret, fast_spread, over, spread, undecided};
use crate::outputs::{Expected, check_outputs, reduced_precision};
use crate::pacing::{BLOCK, MORE_TURNS, MORE_TURNS_UNTIL, Pace, warm_up};
use crate::report::fastest;
use crate::whole::model_inputs;
use crate::{BackendDefault, OpTiming, Program, RunConfig, RunReport, RuntimeError, Session, Span, WholeRun};

/// Measure a single model's plan: load it (every sub-model compiled on its PU's worker), run it
/// `cfg.runs` times after `cfg.warmup`, and beside it, with the same inputs in the same run, the
/// whole model on the plan's best single PU (the reference the outputs are checked against,
/// in every block) and with the backend's defaults on the whole device.
pub fn run(
    g: &FusedGraph,
    plan: &Plan,
    soc: &SocSpec,
    backend: Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<RunReport, RuntimeError> {
    let best = reference_pu(plan, soc).ok_or(RuntimeError::NoBaseline)?;
    let built = Program::from_plan(g, plan, soc, cfg.grouping)?;
    let is_default = whole_default(g, &built.0, soc, backend.as_ref(), cfg)?;
    let session = Session::load(built, soc, backend.clone(), cfg.op_timeout)?;
    measure(&Bench { graphs: &[g], soc, backend, cfg }, &session, &[best], is_default.as_deref())
}

/// What a plan's tasks take inside a session of the plan ([`task_times`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskTimes {
    /// Per task of the plan's program: its ops, its PU (index into the SoC) and the median of
    /// its own time (its backend call: inputs set, inference, outputs copied) over the measured
    /// inferences, µs.
    pub tasks: Vec<(Vec<u32>, usize, f64)>,
    /// The median inference, µs.
    pub total_us: f64,
}

/// Each task of `plan` timed where the run times it: inside a session of the plan (every task
/// on its PU's worker, the inference's other tasks, on other engines' threads, between two of
/// its calls), in the run's blocks (the process's threads settled, the cores in their fast
/// state, a warm-up of `cfg.warmup` runs and at least 5 ms, a block measured again where a core
/// left its fast state), `cfg.runs` inferences in all. Refine prices a plan's segments from
/// it: timed back to back alone, a segment of the silero VAD on `CPU.bf16` took 48-50 µs and
/// 85-151 µs in the plan's session, after ONNX Runtime's segment of the same inference.
pub fn task_times(
    g: &FusedGraph,
    plan: &Plan,
    soc: &SocSpec,
    backend: Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<TaskTimes, RuntimeError> {
    let session = Session::load(Program::from_plan(g, plan, soc, cfg.grouping)?, soc, backend, cfg.op_timeout)?;
    let inputs = vec![model_inputs(g, cfg.seed)];
    let tasks = session.program().tasks.len();
    let (mut own, mut totals) = (vec![vec![]; tasks], vec![]);
    let (pace, runs) = (Pace::new(), cfg.runs.max(1));
    let mut done = 0;
    while done < runs {
        let block = BLOCK.min(runs - done);
        let kept = loop {
            pace.settle();
            let t0 = Instant::now();
            warm_up(cfg.warmup, || session.run(&inputs).map(drop))?;
            let kept = (0..block).map(|_| session.run(&inputs)).collect::<Result<Vec<_>, _>>()?;
            if !pace.speed.again(t0.elapsed()) {
                break kept;
            }
        };
        for inf in kept {
            totals.push(inf.total_us);
            for s in &inf.spans {
                own[s.task].push(s.finish_us - s.start_us);
            }
        }
        done += block;
    }
    let q = bident_stats::quantile;
    Ok(TaskTimes {
        tasks: session
            .program()
            .tasks
            .iter()
            .zip(own)
            .map(|(t, mut us)| (t.ops.clone(), t.pu, q(&mut us, 0.5)))
            .collect(),
        total_us: q(&mut totals, 0.5),
    })
}

/// Measure a two-model concurrent plan the same way; the baseline is the paper's: each whole
/// model on its own best single PU, one after the other.
pub fn run_concurrent(
    (ga, gb): (&FusedGraph, &FusedGraph),
    plan: &ConcurrentPlan,
    soc: &SocSpec,
    backend: Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<RunReport, RuntimeError> {
    let built = Program::from_concurrent((ga, gb), plan, soc, cfg.grouping)?;
    let session = Session::load(built, soc, backend.clone(), cfg.op_timeout)?;
    measure(&Bench { graphs: &[ga, gb], soc, backend, cfg }, &session, &plan.baseline, None)
}

/// What every step of a measurement reads: the models (one, or two for a concurrent plan), the
/// SoC, the backend and the run's configuration.
pub(crate) struct Bench<'a> {
    pub graphs: &'a [&'a FusedGraph],
    pub soc: &'a SocSpec,
    pub backend: Arc<dyn Backend>,
    pub cfg: &'a RunConfig,
}

/// Measure a loaded plan: load its alternatives, find the outputs its are checked against, take
/// turns, and report. `best`: each model's reference PU; `plan_is_default`: the backend whose
/// whole-model default the plan is, if it is one.
fn measure(
    bench: &Bench,
    session: &Session,
    best: &[String],
    plan_is_default: Option<&str>,
) -> Result<RunReport, RuntimeError> {
    let (graphs, soc, cfg) = (bench.graphs, bench.soc, bench.cfg);
    let program = session.program();
    // the PU the plan runs the whole (single) model on, if it does: what is measured beside it
    // on that PU is the plan again, not an alternative to it
    let plan_whole_on = match &program.tasks[..] {
        [t] if graphs.len() == 1 && t.ops.len() == graphs[0].ops.len() => Some(soc.pus[t.pu].name.as_str()),
        _ => None,
    };
    // the reference session still gives the outputs every run is checked against
    let reference_is_plan = plan_whole_on.is_some() && plan_whole_on == best.first().map(String::as_str);
    let alternatives = Alternatives::load(bench, best, plan_whole_on, plan_is_default)?;
    let inputs: Vec<Vec<Arc<HostTensor>>> =
        graphs.iter().enumerate().map(|(m, g)| model_inputs(g, cfg.seed.wrapping_add(1000 * m as u64))).collect();
    let reduced = reduced_precision(soc, program);
    let expected = Expected::of(bench, program, &alternatives, &inputs, reduced)?;
    let measurement = Measurement { bench, session, best, reference_is_plan, alternatives, inputs, expected };
    let measured = measurement.take_turns()?;
    measurement.report(measured)
}

/// A plan's session and its alternatives, loaded, with the inputs they all run on and the
/// outputs the plan's are checked against.
struct Measurement<'a> {
    bench: &'a Bench<'a>,
    session: &'a Session,
    /// Each model's reference PU.
    best: &'a [String],
    /// The plan is the whole model on its reference PU: the reference is not measured apart.
    reference_is_plan: bool,
    alternatives: Alternatives<'a>,
    inputs: Vec<Vec<Arc<HostTensor>>>,
    expected: Expected,
}

/// What the plan's blocks measured.
struct PlanTimes {
    /// Each measured inference's latency, and its executor overhead per task.
    totals: Vec<f64>,
    overheads: Vec<f64>,
    /// Per task, its own time in each measured inference.
    task_us: Vec<Vec<f64>>,
    /// Each measured inference of the plan: its time and a copy of its timeline.
    kept: Vec<(f64, Vec<Span>)>,
    block_medians: Vec<f64>,
    /// Of the plan's blocks (`block_medians`), those kept in the fast state throughout.
    fast_blocks: Vec<bool>,
    /// Over every checked output.
    max_abs_err: f64,
    /// Whether some output needed its allowance ([`Expected::allowance`]).
    needed_allowance: bool,
}

impl PlanTimes {
    fn new(tasks: usize) -> Self {
        Self {
            totals: vec![],
            overheads: vec![],
            task_us: vec![vec![]; tasks],
            kept: vec![],
            block_medians: vec![],
            fast_blocks: vec![],
            max_abs_err: 0.0,
            needed_allowance: false,
        }
    }

    /// Check one inference's outputs (per model) against the expected ones.
    fn check(
        &mut self,
        graphs: &[&FusedGraph],
        outputs: &[Vec<Arc<HostTensor>>],
        expected: &Expected,
    ) -> Result<(), RuntimeError> {
        for (m, g) in graphs.iter().enumerate() {
            let allowance = expected.allowance[m].as_deref();
            let (err, loose) = check_outputs(g, &outputs[m], &expected.wants[m], expected.reduced, allowance)?;
            self.max_abs_err = self.max_abs_err.max(err);
            self.needed_allowance |= loose;
        }
        Ok(())
    }

    /// Keep a block's runs, each as (total, overhead per task, spans); `slow`: whether it was
    /// not in the fast state throughout.
    fn keep(&mut self, block_runs: Vec<(f64, f64, Vec<Span>)>, slow: bool) {
        let mut this_block = vec![];
        for (total, overhead, spans) in block_runs {
            self.totals.push(total);
            this_block.push(total);
            self.overheads.push(overhead);
            for s in &spans {
                self.task_us[s.task].push(s.finish_us - s.start_us);
            }
            self.kept.push((total, spans));
        }
        self.block_medians.push(bident_stats::quantile(&mut this_block, 0.5));
        self.fast_blocks.push(!slow);
    }
}

/// What an alternative's blocks measured: every inference's latency, and each block's median,
/// in the order of the plan's blocks.
#[derive(Clone, Default)]
struct Times {
    us: Vec<f64>,
    blocks: Vec<f64>,
}

/// Everything the turns measured.
struct Measured {
    plan: PlanTimes,
    /// The reference, each backend default and each whole-model run (as [`Alternatives`]).
    mono: Times,
    defaults: Vec<Times>,
    wholes: Vec<Times>,
    /// Measured inferences of the plan.
    runs: u32,
    /// Blocks kept, and how many of those were not in the fast state throughout.
    blocks: u32,
    slow_blocks: u32,
}

impl Measurement<'_> {
    /// The plan, the whole model and the backend's defaults take turns in blocks of a few
    /// inferences: close enough in time to see the same machine, far enough apart that one
    /// does not run with the other's threads or caches still warm.
    fn take_turns(&self) -> Result<Measured, RuntimeError> {
        let runs = self.bench.cfg.runs.max(1);
        let mut m = Measured {
            plan: PlanTimes::new(self.session.program().tasks.len()),
            mono: Times::default(),
            defaults: vec![Times::default(); self.alternatives.defaults.len()],
            wholes: vec![Times::default(); self.alternatives.wholes.len()],
            runs: 0,
            blocks: 0,
            slow_blocks: 0,
        };
        let pace = Pace::new();
        let mut turn = 0;
        let (turns, started) = (runs.div_ceil(BLOCK), Instant::now());
        loop {
            if m.runs >= runs {
                let open = std::iter::once(&m.mono)
                    .chain(&m.defaults)
                    .chain(&m.wholes)
                    .any(|t| !t.blocks.is_empty() && undecided(&over(&t.blocks, &m.plan.block_medians)));
                if !open || turn >= MORE_TURNS * turns || started.elapsed() >= MORE_TURNS_UNTIL {
                    break;
                }
            }
            let block = if m.runs < runs { BLOCK.min(runs - m.runs) } else { BLOCK };
            // the plan goes first in even turns and last in odd ones: no session always follows
            // the same one
            if turn % 2 == 0 {
                self.plan_block(&pace, block, &mut m.plan)?;
            }
            self.baseline_blocks(&pace, block, &mut m)?;
            if turn % 2 == 1 {
                self.plan_block(&pace, block, &mut m.plan)?;
            }
            turn += 1;
            m.runs += block;
        }
        (m.blocks, m.slow_blocks) = (pace.speed.blocks.get(), pace.speed.slow_blocks.get());
        Ok(m)
    }

    /// One block of the plan, measured again where a core left its fast state.
    fn plan_block(&self, pace: &Pace, block: u32, plan: &mut PlanTimes) -> Result<(), RuntimeError> {
        let (session, inputs, graphs) = (self.session, &self.inputs, self.bench.graphs);
        loop {
            pace.settle();
            let t0 = Instant::now();
            // the outputs of the block's first run and of its last are checked; the warm-up
            // and the timed runs between are let go as they end, as a baseline's are (the
            // warm-up, at least 5 ms, reaches the same steady state). Checked between the
            // timed runs, LLaMA whole on one core under ONNX Runtime measured 5-10% slower as
            // the plan than the same configuration beside it as a baseline, whichever it was,
            // and a run gave way five to seven times between the two; checked after the block
            // (each run's outputs held until then), 4-9%; let go unchecked, within the noise
            // (stop 51). Kept to the end of the measurement, 2-11% (memory held makes each
            // run allocate afresh: the likely cause, not proven)
            plan.check(graphs, &session.run(inputs)?.outputs, &self.expected)?;
            warm_up(self.bench.cfg.warmup, || session.run(inputs).map(drop))?;
            // (total, overhead per task, spans) per run
            let mut block_runs = Vec::with_capacity(block as usize);
            let mut last = None;
            for k in 0..block {
                let inf = session.run(inputs)?;
                block_runs.push((inf.total_us, inf.overhead_us_per_task(session.program()), inf.spans));
                if k + 1 == block {
                    last = Some(inf.outputs);
                }
            }
            if let Some(outputs) = last {
                plan.check(graphs, &outputs, &self.expected)?;
            }
            if pace.speed.again(t0.elapsed()) {
                continue;
            }
            plan.keep(block_runs, pace.speed.last_slow.get());
            return Ok(());
        }
    }

    /// One block of each alternative that has sessions: the reference (unless it is the plan),
    /// each backend's defaults, each whole-model run.
    fn baseline_blocks(&self, pace: &Pace, block: u32, m: &mut Measured) -> Result<(), RuntimeError> {
        let alternatives = &self.alternatives;
        let baselines = std::iter::once((&alternatives.mono, &mut m.mono))
            .filter(|_| !self.reference_is_plan)
            .chain(alternatives.defaults.iter().map(|d| &d.1).zip(m.defaults.iter_mut()))
            .chain(alternatives.wholes.iter().map(|w| &w.1).zip(m.wholes.iter_mut()))
            .filter(|(s, _)| !s.is_empty());
        for (sessions, times) in baselines {
            self.baseline_block(pace, block, sessions, times)?;
        }
        Ok(())
    }

    /// One block of an alternative (its models one after the other, each warmed up), measured
    /// again where a core left its fast state.
    fn baseline_block(
        &self,
        pace: &Pace,
        block: u32,
        sessions: &[Session],
        times: &mut Times,
    ) -> Result<(), RuntimeError> {
        let mut sums = loop {
            let t0 = Instant::now();
            let mut sums = vec![0.0; block as usize];
            for (m, s) in sessions.iter().enumerate() {
                pace.settle();
                let run = || s.run(std::slice::from_ref(&self.inputs[m]));
                warm_up(self.bench.cfg.warmup, || run().map(drop))?;
                for sum in sums.iter_mut() {
                    *sum += run()?.total_us;
                }
            }
            if !pace.speed.again(t0.elapsed()) {
                break sums;
            }
        };
        times.us.extend_from_slice(&sums);
        times.blocks.push(bident_stats::quantile(&mut sums, 0.5));
        Ok(())
    }

    /// The report of what the turns measured.
    fn report(self, mut m: Measured) -> Result<RunReport, RuntimeError> {
        let Measurement { bench, session, best, reference_is_plan, alternatives, expected, .. } = self;
        let (soc, program) = (bench.soc, session.program());
        let q = bident_stats::quantile;
        let measured_us = q(&mut m.plan.totals.clone(), 0.5);
        let anchors = Anchors {
            plan_us: measured_us,
            plan_blocks: &m.plan.block_medians,
            plan_max_abs_err: m.plan.max_abs_err,
            reference_us: if reference_is_plan { measured_us } else { q(&mut m.mono.us, 0.5) },
            reference_ratios: if reference_is_plan { vec![] } else { over(&m.mono.blocks, &m.plan.block_medians) },
        };
        let backend_defaults = anchors.defaults(alternatives.defaults, &mut m.defaults, &expected.default_errs);
        let measured_whole = anchors.wholes(alternatives.wholes, &mut m.wholes, &backend_defaults);
        let (fast, measured_backend_default_us) = fastest(&backend_defaults)
            .ok_or_else(|| RuntimeError::Program("no backend default was measured".into()))?;
        let backend_default = fast.description.clone();
        let tolerance = expected.tolerance_said(&backend_defaults, m.plan.needed_allowance);
        let reference = (!reference_is_plan).then(|| format!("the whole model on {}", best.join(" then ")));
        let regret = anchors.regret(reference, &backend_defaults, &measured_whole);
        let block_errors: Vec<f64> =
            m.plan.block_medians.iter().map(|&b| (b - program.predicted_us).abs() / b).collect();
        let prediction_error_fast = fast_spread(&block_errors, &m.plan.fast_blocks);
        let typical = m
            .plan
            .kept
            .iter()
            .min_by(|a, b| (a.0 - measured_us).abs().total_cmp(&(b.0 - measured_us).abs()))
            .ok_or(RuntimeError::Program("no runs".into()))?;
        let measured_best_single_pu_us = anchors.reference_us;
        Ok(RunReport {
            models: bench.graphs.iter().map(|g| g.name.clone()).collect(),
            soc: soc.name.clone(),
            pus: soc.pus.iter().map(|p| p.name.clone()).collect(),
            pu_backends: soc.pus.iter().map(|p| p.backend.clone()).collect(),
            simulated: false,
            measured_on: bident_backend::host_description(),
            backend: bident_backend::describe(bench.backend.as_ref(), soc)
                .map_err(|(pu, e)| RuntimeError::Program(format!("PU `{pu}`: {e}")))?,
            schedule: program.schedule.clone(),
            warmup: bench.cfg.warmup,
            runs: m.runs,
            compile_ms: session.compile_ms(),
            predicted_us: program.predicted_us,
            measured_us,
            measured_p10_us: q(&mut m.plan.totals.clone(), 0.1),
            measured_p90_us: q(&mut m.plan.totals.clone(), 0.9),
            prediction_error: (measured_us - program.predicted_us).abs() / measured_us,
            prediction_error_blocks: spread(block_errors),
            prediction_error_fast,
            regret: regret.regret,
            fastest_candidate: regret.fastest,
            regret_beyond_noise: regret.beyond_noise,
            clearly_faster: regret.clearly_faster,
            best_single_pu: best.to_vec(),
            measured_best_single_pu_us,
            backend_default,
            measured_backend_default_us,
            backend_defaults,
            measured_whole,
            blocks: m.blocks,
            slow_blocks: m.slow_blocks,
            overhead_us_per_op: q(&mut m.plan.overheads, 0.5),
            max_abs_err: m.plan.max_abs_err,
            tolerance,
            ops: op_timings(program, soc, std::mem::take(&mut m.plan.task_us), &typical.1),
        })
    }
}

/// Each task's timing: predicted, in the typical run (`typical`: the run whose latency was
/// nearest the median) and its own time's median over runs (`task_us`).
fn op_timings(program: &Program, soc: &SocSpec, task_us: Vec<Vec<f64>>, typical: &[Span]) -> Vec<OpTiming> {
    program
        .tasks
        .iter()
        .zip(task_us)
        .zip(typical)
        .map(|((t, mut us), s)| OpTiming {
            model: t.stream as u32,
            ops: t.ops.clone(),
            name: t.name.clone(),
            pu: soc.pus[t.pu].name.clone(),
            predicted_start_us: t.predicted.0,
            predicted_finish_us: t.predicted.1,
            measured_start_us: s.start_us,
            measured_finish_us: s.finish_us,
            measured_us: bident_stats::quantile(&mut us, 0.5),
        })
        .collect()
}

/// What every alternative's figures are read against: the plan's median, block medians and
/// output error, and the reference's median and block ratios (the plan's own where the plan is
/// the reference).
struct Anchors<'a> {
    plan_us: f64,
    plan_blocks: &'a [f64],
    plan_max_abs_err: f64,
    reference_us: f64,
    reference_ratios: Vec<f64>,
}

impl Anchors<'_> {
    /// Each of `theirs` over the plan's block median beside it.
    fn ratios(&self, theirs: &[f64]) -> Vec<f64> {
        over(theirs, self.plan_blocks)
    }

    /// Every backend default with its figures; `errs`: each one's output errors per model
    /// ([`Expected::default_errs`]).
    fn defaults(
        &self,
        defaults: Vec<(BackendDefault, Vec<Session>)>,
        times: &mut [Times],
        errs: &[Option<Vec<Vec<f64>>>],
    ) -> Vec<BackendDefault> {
        let q = bident_stats::quantile;
        defaults
            .into_iter()
            .zip(times)
            .zip(errs)
            .map(|(((d, s), t), errs)| {
                let worst = |e: &Vec<Vec<f64>>| e.iter().flatten().fold(0.0, |a: f64, &b| a.max(b));
                if d.is_plan {
                    // one measurement: the plan's own
                    BackendDefault { measured_us: Some(self.plan_us), max_abs_err: Some(self.plan_max_abs_err), ..d }
                } else {
                    BackendDefault {
                        measured_us: (!s.is_empty()).then(|| q(&mut t.us, 0.5)),
                        max_abs_err: errs.as_ref().map(worst),
                        block_ratios: self.ratios(&t.blocks),
                        ..d
                    }
                }
            })
            .collect()
    }

    /// Every whole-model run with its figures: its own, or those of the run it is the same as.
    fn wholes(
        &self,
        wholes: Vec<(WholeRun, Vec<Session>)>,
        times: &mut [Times],
        defaults: &[BackendDefault],
    ) -> Vec<WholeRun> {
        wholes
            .into_iter()
            .zip(times)
            .map(|((w, s), t)| {
                let default = |b: &str| defaults.iter().find(|d| d.backend == b);
                let (measured_us, block_ratios) = match w.same_as.as_deref() {
                    Some("the plan") => (Some(self.plan_us), vec![]),
                    Some("the reference") => (Some(self.reference_us), self.reference_ratios.clone()),
                    Some(b) => {
                        (default(b).and_then(|d| d.measured_us), default(b).map_or(vec![], |d| d.block_ratios.clone()))
                    }
                    None => ((!s.is_empty()).then(|| bident_stats::quantile(&mut t.us, 0.5)), self.ratios(&t.blocks)),
                };
                WholeRun { measured_us, block_ratios, ..w }
            })
            .collect()
    }

    /// The plan's regret against the alternatives, each measured once, the plan itself left out:
    /// `reference` (in words, None where it is the plan), the backend defaults and the
    /// whole-model runs.
    fn regret(&self, reference: Option<String>, defaults: &[BackendDefault], wholes: &[WholeRun]) -> Regret {
        let candidates: Vec<(String, f64, &[f64])> = reference
            .map(|r| (r, self.reference_us, self.reference_ratios.as_slice()))
            .into_iter()
            .chain(
                defaults
                    .iter()
                    .filter(|d| !d.is_plan)
                    .filter_map(|d| Some((d.description.clone(), d.measured_us?, d.block_ratios.as_slice()))),
            )
            .chain(wholes.iter().filter(|w| w.same_as.is_none()).filter_map(|w| {
                Some((format!("the whole model on {}", w.pu), w.measured_us?, w.block_ratios.as_slice()))
            }))
            .collect();
        Regret::of(self.plan_us, &candidates)
    }
}
