//! bident-runtime: executes plans on real PUs, checks their outputs against the whole model run
//! monolithically, and measures both beside the baseline a user would otherwise pick.
//!
//! [`Program`] is what a plan asks for (tasks, per-PU order, tensor slots), checked before
//! anything is compiled; [`Session`] is a program loaded on its PUs (one pinned worker per PU,
//! every sub-model compiled at load) that runs inferences as dataflow; [`run`] and
//! [`run_concurrent`] measure a plan and write the [`RunReport`]; `trace` draws what ran where.
//!
//! Owns the `RunReport` artifact. Written against `bident_backend::Backend` only.

pub mod drift;
pub mod program;
pub mod serve;
pub mod session;
pub mod trace;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bident_artifact::{Artifact, ContentHash};
use bident_backend::{Backend, BackendError, DType, PuSpec, SocSpec};
use bident_ir::{Extractor, FusedGraph, TensorId};
use bident_search::Plan;
use bident_search::concurrent::ConcurrentPlan;
use bident_tensor::HostTensor;
use serde::{Deserialize, Serialize};

pub use program::{Grouping, Program, Task};
pub use serve::{MOVE_MARGIN, Outcome, Planner, ServeConfig, Server, Switch, Via, worth_moving};
pub use session::{Inference, Session, Span};

#[derive(Clone, Debug, Serialize)]
pub struct RunConfig {
    /// Inferences before each block's measured ones, at least: a block warms for at least `WARM`.
    pub warmup: u32,
    /// Measured inferences of the plan and of each alternative, at least: more where the blocks
    /// do not yet tell an alternative from the plan (`MORE_TURNS`).
    pub runs: u32,
    /// Seed of the random model inputs.
    pub seed: u64,
    /// How long an inference may go without any op finishing before it is abandoned.
    pub op_timeout: Duration,
    /// Each op compiled alone, or runs of ops on one PU compiled together.
    pub grouping: Grouping,
    /// PUs of the SoC to also run every model whole on, timed in the same run as the plan
    /// ([`RunReport::measured_whole`]).
    pub whole_on: Vec<String>,
    /// Measure the engines' defaults with f32 requested (`--precision exact`: the plan may only
    /// compute in f32, so the baseline a user would pick computes in f32 too).
    pub exact_defaults: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            warmup: 3,
            runs: 20,
            seed: 0,
            op_timeout: Duration::from_secs(60),
            grouping: Grouping::Merged,
            whole_on: vec![],
            exact_defaults: false,
        }
    }
}

/// One task of the plan (an op, or a run of ops compiled together): when it was predicted to
/// run and when it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTiming {
    /// Index into `RunReport::models`.
    pub model: u32,
    /// The fused ops it ran, in graph order.
    pub ops: Vec<u32>,
    pub name: String,
    pub pu: String,
    pub predicted_start_us: f64,
    pub predicted_finish_us: f64,
    /// In the run whose latency was the median.
    pub measured_start_us: f64,
    pub measured_finish_us: f64,
    /// The task's own time (its backend call), median over runs.
    pub measured_us: f64,
}

impl OpTiming {
    pub fn predicted_us(&self) -> f64 {
        self.predicted_finish_us - self.predicted_start_us
    }
}

/// What a run measured, beside what the plan predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// One model, or two for a concurrent plan.
    pub models: Vec<String>,
    pub soc: String,
    pub pus: Vec<String>,
    /// The backend that ran each PU (indexed like `pus`), e.g. `onnxruntime`.
    pub pu_backends: Vec<String>,
    /// Always false: a run is a measurement. Kept so every report states it.
    pub simulated: bool,
    pub measured_on: String,
    pub backend: String,
    /// `sequential`, `parallel` or `concurrent`: how the plan ran.
    pub schedule: String,
    pub warmup: u32,
    /// Measured inferences of the plan ([`RunConfig::runs`] or more).
    pub runs: u32,
    /// Compiling every sub-model at load (ms), apart from inference.
    pub compile_ms: f64,
    pub predicted_us: f64,
    /// End-to-end latency of one inference through the plan: median, p10, p90.
    pub measured_us: f64,
    pub measured_p10_us: f64,
    pub measured_p90_us: f64,
    /// |measured - predicted| / measured.
    pub prediction_error: f64,
    /// The spread of the prediction error over the measured blocks (each block's median
    /// against the prediction): p10, median, p90.
    pub prediction_error_blocks: [f64; 3],
    /// [`RunReport::prediction_error_blocks`] over only the plan's blocks that ran with every
    /// core in its fast state throughout, the state the profile prices in
    /// ([`bident_backend::speed`]), and how many those were; None where fewer than
    /// [`FAST_BLOCKS_MIN`] were. The gap to the spread over every block is the machine's slow
    /// states, not the cost model.
    pub prediction_error_fast: Option<([f64; 3], u32)>,
    /// measured / the fastest of every other candidate measured in the same run (each PU whole,
    /// each backend's defaults) - 1, at least 0: how much faster the best alternative was.
    pub regret: f64,
    /// That fastest alternative, in words.
    pub fastest_candidate: String,
    /// [`RunReport::regret`] against only the alternatives faster than the plan beyond the
    /// noise between the blocks they took turns in ([`consistently_faster`], no margin): by
    /// medians alone the fastest of several alternatives as fast as the plan beats it by chance
    /// (the winner's curse), which `regret` counts.
    pub regret_beyond_noise: f64,
    /// The fastest of those alternatives, in words; None where none was.
    pub clearly_faster: Option<String>,
    /// Per model, the PU whose whole-model run is the reference and the single-PU baseline.
    pub best_single_pu: Vec<String>,
    /// Median latency of each whole model compiled on its best single PU, summed (one model
    /// after the other: the paper's baseline).
    pub measured_best_single_pu_us: f64,
    /// What a user would run instead: of [`RunReport::backend_defaults`], the faster one.
    pub backend_default: String,
    pub measured_backend_default_us: f64,
    /// Every backend's own whole-model defaults (the device of each model's reference PU, every
    /// core, not pinned, the engine's default precision), measured in the same run.
    pub backend_defaults: Vec<BackendDefault>,
    /// The models whole on each PU of [`RunConfig::whole_on`], measured in the same run.
    pub measured_whole: Vec<WholeRun>,
    /// Measuring blocks, the plan's and every alternative's, and how many of them ran with a
    /// core in a slow state, before or after them (the budget for waiting and measuring again
    /// ran out, [`bident_backend::speed`]).
    pub blocks: u32,
    pub slow_blocks: u32,
    /// Executor overhead per task (µs; median over runs): from the moment a task could start
    /// (inputs produced, PU free) to its start.
    pub overhead_us_per_op: f64,
    /// Largest absolute difference between the plan's outputs and the monolithic run's, over
    /// all runs (each run is checked within tolerance; a mismatch fails the run).
    pub max_abs_err: f64,
    /// The tolerance every run was checked with, in words (looser where the plan has ops on a
    /// reduced-precision PU).
    pub tolerance: String,
    pub ops: Vec<OpTiming>,
}

/// The models whole on one PU of the SoC ([`RunConfig::whole_on`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WholeRun {
    pub pu: String,
    /// Median latency (the models one after the other); None where the PU refused a model.
    pub measured_us: Option<f64>,
    pub refused: Option<String>,
    /// Not measured apart, being the same run as another measured beside it (`the plan`, `the
    /// reference`, or a backend's defaults, by backend name): its figure is that one's.
    pub same_as: Option<String>,
    /// Each block it took turns with the plan in, its median over the plan's, in turn order
    /// (empty where it is the plan, or was not measured).
    #[serde(default)]
    pub block_ratios: Vec<f64>,
}

/// One backend's whole-model defaults, as a baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendDefault {
    pub backend: String,
    /// e.g. `openvino CPU defaults (f32 on this CPU), not pinned`.
    pub description: String,
    /// The precision the device computes in at its defaults, as the backend reports it.
    pub precision: Option<String>,
    /// Median latency of the whole model(s); None where the backend refused a model.
    pub measured_us: Option<f64>,
    /// Why the backend could not run a model whole at its defaults.
    pub refused: Option<String>,
    /// Largest absolute difference of its outputs from the f32 reference's (the whole model
    /// on the exact reference PU): what the engine's default precision costs.
    pub max_abs_err: Option<f64>,
    /// The plan is this default: the whole model on a PU of the same configuration
    /// ([`PuSpec::same_configuration`]), so the two are one measurement, not two.
    pub is_plan: bool,
    /// As [`WholeRun::block_ratios`].
    #[serde(default)]
    pub block_ratios: Vec<f64>,
}

impl BackendDefault {
    /// Whether it computes in the reduced precision `p` (never for None).
    fn computes_in(&self, p: Option<DType>) -> bool {
        p.is_some_and(|p| self.precision.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(p.name())))
    }
}

/// Whether a baseline measured faster than the plan by more than `margin` beyond the noise
/// between blocks, from its [`WholeRun::block_ratios`]: from five blocks, Wilcoxon's signed-rank
/// test of the log ratios against `ln(1 - margin)` (one-sided, p at most 0.035: at six blocks one
/// block may go the other way if it is the closest); below five, every block faster by the
/// margin. By medians alone the fastest of several baselines each as fast as the plan beats it
/// by chance (the winner's curse); ranks keep one odd block from hiding a lead, or making one.
/// Equal distances are ranked in block order; beyond 1,000 blocks the first 1,000 count.
pub fn consistently_faster(block_ratios: &[f64], margin: f64) -> bool {
    /// Largest one-sided p-value that counts.
    const ALPHA: f64 = 0.035;
    /// 2^n stays a finite f64 up to n = 1,023.
    const MOST_BLOCKS: usize = 1000;
    let block_ratios = &block_ratios[..block_ratios.len().min(MOST_BLOCKS)];
    let n = block_ratios.len();
    if n == 0 || block_ratios.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return false;
    }
    let limit = (1.0 - margin).ln();
    // d > 0 where the baseline was not faster by the margin
    let d: Vec<f64> = block_ratios.iter().map(|r| r.ln() - limit).collect();
    if n < 5 {
        return d.iter().all(|&x| x < 0.0);
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| d[a].abs().total_cmp(&d[b].abs()));
    // the rank sum of the blocks that went the plan's way
    let against: usize = order.iter().enumerate().filter(|&(_, &i)| d[i] >= 0.0).map(|(rank, _)| rank + 1).sum();
    // under no difference every sign is a coin: how many of the 2^n sign patterns have a rank
    // sum against of at most this one
    let most = n * (n + 1) / 2;
    let mut ways = vec![0f64; most + 1];
    ways[0] = 1.0;
    for rank in 1..=n {
        for sum in (rank..=most).rev() {
            ways[sum] += ways[sum - rank];
        }
    }
    let p = ways[..=against].iter().sum::<f64>() / 2f64.powi(n as i32);
    p <= ALPHA
}

/// Whether the blocks do not yet tell an alternative's median from the plan's: the confidence
/// interval of the median of `block_ratios` ([`bident_stats::median_ci`], 95%) holds 1 and is
/// wider than [`DECIDED_WITHIN`] either side. Fewer than five blocks never decide.
fn undecided(block_ratios: &[f64]) -> bool {
    if block_ratios.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return false;
    }
    let mut s = block_ratios.to_vec();
    s.sort_by(f64::total_cmp);
    match bident_stats::median_ci(&s) {
        Some((lo, hi)) if s.len() >= 5 => {
            lo <= 1.0 && hi >= 1.0 && hi / lo > (1.0 + DECIDED_WITHIN) / (1.0 - DECIDED_WITHIN)
        }
        _ => true,
    }
}

/// Each of `theirs` over the plan's block median beside it.
fn over(theirs: &[f64], plan: &[f64]) -> Vec<f64> {
    theirs.iter().zip(plan).map(|(t, p)| t / p).collect()
}

/// How close to the plan's the median of an alternative's block ratios must be known to be
/// decided ([`undecided`]).
const DECIDED_WITHIN: f64 = 0.05;

/// A plan's regret against the alternatives measured beside it ([`RunReport::regret`],
/// [`RunReport::regret_beyond_noise`]).
#[derive(Debug)]
struct Regret {
    regret: f64,
    fastest: String,
    beyond_noise: f64,
    clearly_faster: Option<String>,
}

impl Regret {
    /// `candidates`: each alternative in words, its median (µs) and its blocks' medians over
    /// the plan's; `measured_us`: the plan's median.
    fn of(measured_us: f64, candidates: &[(String, f64, &[f64])]) -> Self {
        let fastest_of = |c: &mut dyn Iterator<Item = &(String, f64, &[f64])>| {
            c.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(what, us, _)| (what.clone(), (measured_us / us - 1.0).max(0.0)))
        };
        let (fastest, regret) = fastest_of(&mut candidates.iter())
            .unwrap_or_else(|| ("nothing else: every candidate is the plan".into(), 0.0));
        let clearly = fastest_of(&mut candidates.iter().filter(|c| consistently_faster(c.2, 0.0)));
        Regret {
            regret,
            fastest,
            beyond_noise: clearly.as_ref().map_or(0.0, |c| c.1),
            clearly_faster: clearly.map(|c| c.0),
        }
    }
}

/// In how many of `block_ratios` the baseline was faster than the plan.
pub fn faster_blocks(block_ratios: &[f64]) -> usize {
    block_ratios.iter().filter(|&&r| r < 1.0).count()
}

impl Artifact for RunReport {
    const KIND: &'static str = "run-report";
    const SCHEMA_VERSION: u32 = 10;
}

impl RunReport {
    pub fn measured_speedup(&self) -> f64 {
        self.measured_best_single_pu_us / self.measured_us
    }
    /// Over the fastest of every backend's whole-model defaults.
    pub fn speedup_vs_best_default(&self) -> f64 {
        self.measured_backend_default_us / self.measured_us
    }
    /// [`RunReport::prediction_error_fast`] where the run had enough fast blocks, else
    /// [`RunReport::prediction_error_blocks`]: the cost model's error as near the machine's fast
    /// state as this run can tell.
    pub fn prediction_error_fast_or_all(&self) -> [f64; 3] {
        self.prediction_error_fast.map_or(self.prediction_error_blocks, |(e, _)| e)
    }
    /// Whether the plan is the whole model on its reference PU (then that baseline is the
    /// plan's own measurement).
    pub fn plan_is_reference(&self) -> bool {
        match (&self.ops[..], &self.best_single_pu[..]) {
            ([t], [pu]) => t.pu == *pu && self.models.len() == 1,
            _ => false,
        }
    }
    /// The fastest of [`RunReport::backend_defaults`] (the one `backend_default` describes).
    pub fn best_default(&self) -> Option<&BackendDefault> {
        fastest(&self.backend_defaults).map(|(d, _)| d)
    }
    /// How pictures and listings name PU `i`: its name, with its backend where the PUs have
    /// more than one (`core1 (onnxruntime)`).
    pub fn pu_label(&self, i: usize) -> String {
        let name = self.pus.get(i).map_or("?", String::as_str);
        let mixed = self.pu_backends.iter().any(|b| Some(b) != self.pu_backends.first());
        match self.pu_backends.get(i) {
            Some(b) if mixed => format!("{name} ({b})"),
            _ => name.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("plan is for graph {plan} but the fused graph is {graph}; rerun the search")]
    Mismatch { plan: String, graph: String },
    #[error("plan maps {what} to PU `{pu}`, which SoC `{soc}` does not have")]
    UnknownPu { what: String, pu: String, soc: String },
    #[error("the plan cannot be executed: {0}")]
    Program(String),
    #[error("{what} `{name}` on PU `{pu}`")]
    Op {
        what: String,
        name: String,
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("{what} on PU `{pu}`")]
    Load {
        what: String,
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("PU `{pu}`: worker {why}")]
    Worker { pu: String, why: String },
    #[error("inference abandoned: {0}")]
    Timeout(String),
    #[error("the session stopped after an earlier fault ({0}); load it again")]
    Broken(String),
    #[error("inputs: {0}")]
    Inputs(String),
    #[error("plan has no best single PU (every PU lacks some op)")]
    NoBaseline,
    #[error("outputs differ from the monolithic run: {0}")]
    Outputs(String),
    #[error("{what} `{name}`: {why}")]
    OpOutput { what: String, name: String, why: String },
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
}

impl RuntimeError {
    /// The PU a fault is on, when it is one PU's (for re-planning without it).
    pub fn faulty_pu(&self) -> Option<&str> {
        match self {
            RuntimeError::Op { pu, .. } | RuntimeError::Load { pu, .. } => Some(pu),
            RuntimeError::Worker { pu, .. } if pu != "?" => Some(pu),
            _ => None,
        }
    }
}

/// Run every fused op of `g` on its own, in graph order, on one PU on the calling thread: each
/// extracted, compiled and run once, fed by the ops before it. `inputs` are in the order of
/// `g.inputs`. The check that the fused ops compose back into the whole model (tests, the
/// conformance run); an op whose output type differs from the inferred one is an error.
pub fn run_op_by_op(
    g: &FusedGraph,
    backend: &dyn Backend,
    pu: &PuSpec,
    inputs: Vec<HostTensor>,
) -> Result<Vec<HostTensor>, RuntimeError> {
    let ex = Extractor::new(g)?;
    let mut env: HashMap<TensorId, HostTensor> = g.inputs.iter().copied().zip(inputs).collect();
    // one session per op, each run once: none may keep a core spinning for the next
    let pu = &backend.quiet(pu);
    for (i, op) in g.ops.iter().enumerate() {
        let fail = |source| RuntimeError::Op {
            what: format!("op {i}"),
            name: op.name.clone(),
            pu: pu.name.clone(),
            source: Box::new(source),
        };
        let mut exe = backend.compile(&ex.extract(i as u32)?, pu).map_err(fail)?;
        let ins: Vec<&HostTensor> = op.inputs.iter().map(|t| &env[t]).collect();
        let said = format!("op {i} `{}`", op.name);
        let outs = bident_backend::deadline::guard_exe(exe.as_mut(), &pu.name, &said, |e| e.run(&ins)).map_err(fail)?;
        for (&t, o) in op.outputs.iter().zip(outs) {
            let want = g.tensor(t);
            if o.shape != want.shape || o.dtype != want.dtype {
                return Err(RuntimeError::OpOutput {
                    what: format!("op {i}"),
                    name: op.kind.clone(),
                    why: format!(
                        "the backend gives {}{:?} for `{}`, bident inferred {}{:?}",
                        o.dtype, o.shape, want.name, want.dtype, want.shape
                    ),
                });
            }
            env.insert(t, o);
        }
    }
    Ok(g.outputs.iter().map(|t| env[t].clone()).collect())
}

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
    measure(&[g], &session, &[best], soc, backend, cfg, is_default.as_deref())
}

/// The backend whose whole-model default the program is, if it is one: a single task of the
/// whole model on a PU of the default's configuration.
fn whole_default(
    g: &FusedGraph,
    program: &Program,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &RunConfig,
) -> Result<Option<String>, RuntimeError> {
    let [task] = &program.tasks[..] else { return Ok(None) };
    if task.ops.len() != g.ops.len() {
        return Ok(None);
    }
    let pu = &soc.pus[task.pu];
    Ok(is_default_configuration(pu, backend, cfg)?.then(|| pu.backend.clone()))
}

/// Whether compiling for `pu` is compiling with its backend's whole-model defaults.
fn is_default_configuration(pu: &PuSpec, backend: &dyn Backend, cfg: &RunConfig) -> Result<bool, RuntimeError> {
    let devices = backend.devices_of(&pu.backend).map_err(|e| RuntimeError::Program(e.to_string()))?;
    let Some(d) = devices.iter().find(|d| d.kind == pu.kind && d.name == pu.device) else { return Ok(false) };
    Ok(pu.same_configuration(&default_spec(pu, &pu.backend, cfg), d.precision.as_deref()))
}

/// The PU backend `b`'s whole-model default compiles for, on the device of `of`: no
/// properties, not pinned; f32 requested where the run compares in exact precision.
pub fn default_spec(of: &PuSpec, b: &str, cfg: &RunConfig) -> PuSpec {
    let mut spec = PuSpec::backend_default(&PuSpec { backend: b.to_string(), ..of.clone() });
    if cfg.exact_defaults && of.kind == bident_backend::PuKind::Cpu {
        spec.properties.insert(bident_backend::soc::PRECISION_KEY.into(), "f32".into());
    }
    spec
}

/// Inferences of the plan, then of each baseline, in one turn of the measurement.
const BLOCK: u32 = 5;

/// After the configured runs, turns go on while the blocks do not yet tell some alternative's
/// median from the plan's ([`undecided`]), up to this many times the configured turns in all,
/// and none starts once the run has measured for [`MORE_TURNS_UNTIL`]. By medians of twelve
/// blocks an alternative as fast as the plan beats it by chance (pi0.5 whole on core 0, ratios
/// 0.74-1.34 over its ten blocks, 12% ahead by medians, not beyond the noise); more blocks
/// narrow that chance.
const MORE_TURNS: u32 = 4;
const MORE_TURNS_UNTIL: Duration = Duration::from_secs(60);

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
fn warm_up(runs: u32, mut run: impl FnMut() -> Result<(), RuntimeError>) -> Result<(), RuntimeError> {
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
struct FastState {
    budget: Cell<Duration>,
    /// Blocks kept, and how many of those were not in the fast state throughout.
    blocks: Cell<u32>,
    slow_blocks: Cell<u32>,
    /// The wait before the current block ran out.
    slow_start: Cell<bool>,
    /// Whether the last block kept was a slow one.
    last_slow: Cell<bool>,
}

/// Fewest fast blocks of the plan that [`RunReport::prediction_error_fast`] is given for.
pub const FAST_BLOCKS_MIN: u32 = 3;

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
    fn before(&self) {
        let mut budget = self.budget.get();
        let w = bident_backend::speed::await_fast(&[], SPEED_WAIT, &mut budget);
        self.budget.set(budget);
        self.slow_start.set(self.slow_start.get() || w.is_some_and(|w| !w.fast()));
    }

    /// After a block that took `took`: whether to measure it again (a core left its fast state
    /// and the budget still holds the block's time, which is taken from it). A block kept is
    /// counted, as slow where it was.
    fn again(&self, took: Duration) -> bool {
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

/// The PU the whole model runs on as reference and baseline: the plan's best single PU, unless
/// the plan excludes it (a fallback plan), then the best single PU it allows.
/// Among exact (f32) PUs where the SoC has one: a reduced-precision PU is no reference.
pub fn reference_pu(plan: &Plan, soc: &SocSpec) -> Option<String> {
    let any_exact = soc.pus.iter().any(PuSpec::is_exact);
    let allowed = |pu: &str| {
        !plan.constraints.exclude.iter().any(|e| e == pu) && (!any_exact || soc.pu(pu).is_some_and(PuSpec::is_exact))
    };
    match &plan.best_single_pu {
        Some(b) if allowed(b) => Some(b.clone()),
        _ => plan
            .baselines
            .iter()
            .filter(|b| allowed(&b.pu))
            .filter_map(|b| b.predicted_us.map(|t| (t, &b.pu)))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, pu)| pu.clone()),
    }
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
    measure(&[ga, gb], &session, &plan.baseline, soc, backend, cfg, None)
}

/// An error and its causes on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// The model's inputs: pinned values as imported, else seeded random tensors.
pub fn model_inputs(g: &FusedGraph, seed: u64) -> Vec<Arc<HostTensor>> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = g.tensor(t);
            Arc::new(match g.input_values.get(&t.name) {
                Some(v) => v.to_host(),
                None => HostTensor::seeded(t.dtype, t.shape.clone(), seed.wrapping_add(k as u64)),
            })
        })
        .collect()
}

/// What an inference through a [`Session`] costs beyond its backend calls where the program
/// uses PU `pu` alone (µs): handing the worker its job and the inputs, waking it, collecting its
/// outputs. Measured on `g` (a one-op probe) in `blocks` blocks of `BLOCK` runs, each after
/// the session's threads went idle and a `warm_up`: the median of each run's time less its
/// one task's (the backend call). A plan's prediction adds it once per inference (the search
/// reads it from the cost table).
///
/// The task's own time is not compared with calls of the model compiled apart: on a thread of
/// its own, started for the purpose, those ran slower than the worker's, and OpenVINO's pinned
/// PUs were priced at 0-2 µs where a session added 4-5 µs around the KAN INT8's one task.
pub fn launch_us(
    g: &FusedGraph,
    soc: &SocSpec,
    pu: usize,
    backend: Arc<dyn Backend>,
    blocks: usize,
) -> Result<f64, RuntimeError> {
    let spec = soc.pus.get(pu).ok_or_else(|| RuntimeError::Program(format!("no PU {pu} in `{}`", soc.name)))?;
    let session = whole(g, spec, &soc.name, &backend, &RunConfig::default())?;
    let inputs = model_inputs(g, 0);
    let mut beyond = vec![];
    // longer than a worker polls for its next job
    let idle = || std::thread::sleep(Duration::from_millis(1));
    let run = || session.run(std::slice::from_ref(&inputs));
    for _ in 0..blocks {
        idle();
        warm_up(RunConfig::default().warmup, || run().map(drop))?;
        for _ in 0..BLOCK {
            let inf = run()?;
            let ops: f64 = inf.spans.iter().map(|s| s.finish_us - s.start_us).sum();
            beyond.push((inf.total_us - ops).max(0.0));
        }
    }
    Ok(bident_stats::quantile(&mut beyond, 0.5))
}

/// A session running model `g` whole on `pu` (alone in a one-PU SoC).
fn whole(
    g: &FusedGraph,
    pu: &PuSpec,
    soc: &str,
    be: &Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<Session, RuntimeError> {
    let one = SocSpec { name: soc.into(), backend: pu.backend.clone(), simulated: false, pus: vec![pu.clone()] };
    Session::load(Program::whole(g, &one, 0, g.reference_model()?)?, &one, be.clone(), cfg.op_timeout).map_err(|e| {
        match e {
            RuntimeError::Op { pu, source, .. } => {
                RuntimeError::Load { what: format!("whole model `{}`", g.name), pu, source }
            }
            e => e,
        }
    })
}

/// The measured default with the lowest latency, and that latency.
fn fastest(defaults: &[BackendDefault]) -> Option<(&BackendDefault, f64)> {
    defaults.iter().filter_map(|d| d.measured_us.map(|us| (d, us))).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Backend `b`'s whole-model defaults for each of `graphs`, on the device of its reference PU:
/// the baseline's description and its sessions (none, and why, where `b` has no such device
/// or refuses a model; none where the plan is this default, `is_plan`).
fn backend_default(
    graphs: &[&FusedGraph],
    refs: &[&PuSpec],
    b: &str,
    backend: &Arc<dyn Backend>,
    cfg: &RunConfig,
    is_plan: bool,
) -> Result<(BackendDefault, Vec<Session>), RuntimeError> {
    let devices = backend.devices_of(b).map_err(|e| RuntimeError::Program(e.to_string()))?;
    let (mut sessions, mut names, mut precision, mut refused) = (vec![], vec![], None, None);
    for (g, pu) in graphs.iter().zip(refs) {
        let Some(d) = devices.iter().find(|d| d.kind == pu.kind && d.name == pu.device) else {
            refused = Some(format!("no device `{}`", pu.device));
            break;
        };
        precision = if cfg.exact_defaults { Some("f32".into()) } else { d.precision.clone() };
        names.push(d.name.clone());
        if is_plan {
            continue;
        }
        match whole(g, &default_spec(pu, b, cfg), "backend-default", backend, cfg) {
            Ok(s) => sessions.push(s),
            Err(e) => {
                refused = Some(e.to_string());
                sessions.clear();
                break;
            }
        }
    }
    names.dedup();
    let at = match precision.as_deref() {
        _ if cfg.exact_defaults => "f32 requested: --precision exact".to_string(),
        Some(p) => format!("{p} on this machine"),
        None => "precision not reported".to_string(),
    };
    let description = format!("{b} {} defaults ({at}), not pinned", names.join(" + "));
    let d = BackendDefault {
        backend: b.to_string(),
        description,
        precision,
        measured_us: None,
        is_plan: is_plan && refused.is_none(),
        refused,
        max_abs_err: None,
        block_ratios: vec![],
    };
    Ok((d, sessions))
}

fn measure(
    graphs: &[&FusedGraph],
    session: &Session,
    best: &[String],
    soc: &SocSpec,
    backend: Arc<dyn Backend>,
    cfg: &RunConfig,
    plan_is_default: Option<&str>,
) -> Result<RunReport, RuntimeError> {
    let program = session.program();
    // the PU the plan runs the whole (single) model on, if it does: what is measured beside it
    // on that PU is the plan again, not an alternative to it
    let plan_whole_on = match &program.tasks[..] {
        [t] if graphs.len() == 1 && t.ops.len() == graphs[0].ops.len() => Some(soc.pus[t.pu].name.as_str()),
        _ => None,
    };
    // the reference session still gives the outputs every run is checked against
    let reference_is_plan = plan_whole_on.is_some() && plan_whole_on == best.first().map(String::as_str);
    let mut mono = vec![];
    let mut refs: Vec<&PuSpec> = vec![];
    for (g, best) in graphs.iter().zip(best) {
        let pu = soc.pus.iter().find(|p| &p.name == best).ok_or_else(|| RuntimeError::UnknownPu {
            what: "the whole model".into(),
            pu: best.clone(),
            soc: soc.name.clone(),
        })?;
        mono.push(whole(g, pu, &soc.name, &backend, cfg)?);
        refs.push(pu);
    }
    // every backend's own defaults on the reference PUs' devices; one that refuses a model
    // is reported, not measured
    let mut defaults: Vec<(BackendDefault, Vec<Session>)> = vec![];
    for b in backend.backends() {
        let (d, sessions) = backend_default(graphs, &refs, &b, &backend, cfg, plan_is_default == Some(b.as_str()))?;
        defaults.push((d, sessions));
    }
    let mut wholes: Vec<(WholeRun, Vec<Session>)> = vec![];
    for name in &cfg.whole_on {
        let pu = soc.pu(name).ok_or_else(|| RuntimeError::UnknownPu {
            what: "a whole-model run".into(),
            pu: name.clone(),
            soc: soc.name.clone(),
        })?;
        let run = WholeRun { pu: name.clone(), measured_us: None, refused: None, same_as: None, block_ratios: vec![] };
        // a run measured beside it anyway is not measured twice (two sessions of one
        // configuration differ only by noise)
        let same_as = match plan_whole_on {
            Some(pu) if pu == name => Some("the plan".to_string()),
            _ if best.len() == 1 && best[0] == *name => Some("the reference".to_string()),
            _ if graphs.len() == 1 && is_default_configuration(pu, backend.as_ref(), cfg)? => Some(pu.backend.clone()),
            _ => None,
        };
        if same_as.is_some() {
            wholes.push((WholeRun { same_as, ..run }, vec![]));
            continue;
        }
        let sessions: Result<Vec<Session>, RuntimeError> =
            graphs.iter().map(|g| whole(g, pu, &soc.name, &backend, cfg)).collect();
        wholes.push(match sessions {
            Ok(s) => (run, s),
            Err(e) => (WholeRun { refused: Some(e.to_string()), ..run }, vec![]),
        });
    }
    if defaults.iter().all(|(d, _)| d.refused.is_some()) {
        let why: Vec<String> =
            defaults.iter().map(|(d, _)| format!("{}: {}", d.backend, d.refused.as_deref().unwrap_or("?"))).collect();
        return Err(RuntimeError::Program(format!(
            "no backend runs the whole model at its defaults ({})",
            why.join("; ")
        )));
    }
    let inputs: Vec<Vec<Arc<HostTensor>>> =
        graphs.iter().enumerate().map(|(m, g)| model_inputs(g, cfg.seed.wrapping_add(1000 * m as u64))).collect();

    // the plan, the whole model and the backend's defaults take turns in blocks of a few
    // inferences: close enough in time to see the same machine, far enough apart that one
    // does not run with the other's threads or caches still warm
    let runs = cfg.runs.max(1);
    let mut totals = vec![];
    let mut overheads = vec![];
    let mut task_us: Vec<Vec<f64>> = vec![vec![]; program.tasks.len()];
    // each measured inference of the plan: its time and a copy of its timeline
    let mut kept: Vec<(f64, Vec<Span>)> = vec![];
    let mut block_medians: Vec<f64> = vec![];
    // of the plan's blocks (`block_medians`), those kept in the fast state throughout
    let mut fast_blocks: Vec<bool> = vec![];
    let mut mono_us = vec![];
    let mut default_us: Vec<Vec<f64>> = vec![vec![]; defaults.len()];
    let mut whole_us: Vec<Vec<f64>> = vec![vec![]; wholes.len()];
    // each baseline's block medians, in the order of the plan's (`block_medians`)
    let (mut mono_blocks, mut default_blocks, mut whole_blocks) =
        (vec![], vec![vec![]; defaults.len()], vec![vec![]; wholes.len()]);
    let mut max_abs_err = 0.0f64;
    let reduced = reduced_precision(soc, program);
    // how far each engine's default is from the f32 reference, with the same inputs: where the
    // plan computes in a reduced precision, it may be as far from f32 as the engine's own
    // default at that precision (what a user would run instead), not further; a plan that is
    // an engine's default gives that engine's own outputs (in f32 too: engines round apart)
    let mut wants = vec![];
    // per model and output: how far the other engines' exact whole-model outputs are from the
    // reference, and those of each exact PU the plan uses (engines round apart even in f32, one
    // engine on one core and on two does too, and a model that quantises its activations, as
    // BitNet and the INT8 zoo do, turns that into whole steps): a plan may be that far from it
    // too (the INT8 ViT's outputs moved by one step, 0.144, between OpenVINO on one core and on
    // both, so a plan running on both failed against the one-core reference)
    let used: Vec<&str> =
        program.queues.iter().zip(&soc.pus).filter(|(q, _)| !q.is_empty()).map(|(_, p)| p.name.as_str()).collect();
    let mut engines_apart: Vec<Option<Vec<f64>>> = vec![];
    for (m, g) in graphs.iter().enumerate() {
        // the reference outputs are exact: a baseline PU in a reduced precision (a concurrent
        // plan's best single PU may be one) leaves them to an exact PU of the SoC
        let (exact, reference_pu) = match soc.pus.iter().find(|p| p.is_exact()) {
            Some(pu) if !refs[m].is_exact() => (Some(whole(g, pu, &soc.name, &backend, cfg)?), pu),
            _ => (None, refs[m]),
        };
        let reference = exact.as_ref().unwrap_or(&mono[m]);
        let want = reference.run(std::slice::from_ref(&inputs[m]))?.outputs.swap_remove(0);
        let mut apart: Option<Vec<f64>> = None;
        let mut seen = vec![reference_pu.backend.as_str()];
        for pu in soc.pus.iter().filter(|p| p.is_exact() && p.name != reference_pu.name) {
            // the first PU of another engine is needed; one the plan uses counts where it can
            // run the whole model
            let needed = !seen.contains(&pu.backend.as_str());
            if !needed && !used.contains(&pu.name.as_str()) {
                continue;
            }
            seen.push(pu.backend.as_str());
            // a whole-model session on that PU loaded beside the plan already is reused
            let loaded = wholes.iter().find(|(w, s)| w.pu == pu.name && s.len() == graphs.len()).map(|(_, s)| &s[m]);
            let fresh;
            let session = match loaded {
                Some(s) => s,
                None => match whole(g, pu, &soc.name, &backend, cfg) {
                    Ok(s) => {
                        fresh = s;
                        &fresh
                    }
                    Err(_) if !needed => continue,
                    Err(e) => return Err(e),
                },
            };
            let got = session.run(std::slice::from_ref(&inputs[m]))?.outputs.swap_remove(0);
            let e = output_errors(g, &got, &want)?;
            apart = Some(match apart {
                Some(a) => a.iter().zip(&e).map(|(x, y)| x.max(*y)).collect(),
                None => e,
            });
        }
        engines_apart.push(apart);
        wants.push(want);
    }
    let mut default_errs: Vec<Option<Vec<Vec<f64>>>> = vec![];
    for (_, sessions) in &defaults {
        let mut per_model = vec![];
        for (m, s) in sessions.iter().enumerate() {
            let got = s.run(std::slice::from_ref(&inputs[m]))?.outputs.swap_remove(0);
            per_model.push(output_errors(graphs[m], &got, &wants[m])?);
        }
        default_errs.push((!sessions.is_empty()).then_some(per_model));
    }
    let allowance: Option<Vec<Vec<f64>>> =
        defaults.iter().zip(&default_errs).filter(|((d, _), _)| d.is_plan || d.computes_in(reduced)).find_map(
            |((d, _), e)| match e {
                // the plan is that default: its outputs are the engine's own, at its precision
                None if d.is_plan => Some(graphs.iter().map(|g| vec![f64::INFINITY; g.outputs.len()]).collect()),
                e => e.clone(),
            },
        );
    // each output's allowance: the engine default's at the plan's precision, or the engines'
    // distance from each other, whichever is larger
    let allowance: Vec<Option<Vec<f64>>> = engines_apart
        .iter()
        .enumerate()
        .map(|(m, apart)| match (allowance.as_ref().map(|a| &a[m]), apart) {
            (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| x.max(*y)).collect()),
            (a, b) => a.or(b.as_ref()).cloned(),
        })
        .collect();
    let mut needed_allowance = false;
    let mut done = 0;
    // let the previous session's threads go idle before the next session's block: its workers
    // poll a little after each inference and a multi-threaded engine's pool spins for a while
    // (after 1 ms, ONNX Runtime's default on both cores was measured at ~100 or ~140 µs on the
    // example depending on whose block came before; after 20 ms, at ~140 µs beside the same
    // configuration's ~145; its pool spins on for up to 60 ms, see [`let_threads_settle`])
    let waits = Cell::new(true);
    // and until every core is in its fast state; a block it did not last through is measured
    // again ([`FastState`])
    let speed = FastState::new();
    let settle = || {
        let_threads_settle(&waits);
        speed.before();
    };
    let mut turn = 0;
    let (turns, started) = (runs.div_ceil(BLOCK), Instant::now());
    loop {
        if done >= runs {
            let open = std::iter::once(&mono_blocks)
                .chain(&default_blocks)
                .chain(&whole_blocks)
                .any(|b| !b.is_empty() && undecided(&over(b, &block_medians)));
            if !open || turn >= MORE_TURNS * turns || started.elapsed() >= MORE_TURNS_UNTIL {
                break;
            }
        }
        let block = if done < runs { BLOCK.min(runs - done) } else { BLOCK };
        let mut plan_block = || -> Result<(), RuntimeError> {
            loop {
                settle();
                let t0 = Instant::now();
                let mut check = |outputs: &[Vec<Arc<HostTensor>>]| -> Result<(), RuntimeError> {
                    for (m, g) in graphs.iter().enumerate() {
                        let (err, loose) = check_outputs(g, &outputs[m], &wants[m], reduced, allowance[m].as_deref())?;
                        max_abs_err = max_abs_err.max(err);
                        needed_allowance |= loose;
                    }
                    Ok(())
                };
                // the outputs of the block's first run and of its last are checked; the warm-up
                // and the timed runs between are let go as they end, as a baseline's are (the
                // warm-up, at least 5 ms, reaches the same steady state). Checked between the
                // timed runs, LLaMA whole on one core under ONNX Runtime measured 5-10% slower as
                // the plan than the same configuration beside it as a baseline, whichever it was,
                // and a run gave way five to seven times between the two; checked after the block
                // (each run's outputs held until then), 4-9%; let go unchecked, within the noise
                // (stop 51). Kept to the end of the measurement, 2-11% (memory held makes each
                // run allocate afresh: the likely cause, not proven)
                check(&session.run(&inputs)?.outputs)?;
                warm_up(cfg.warmup, || session.run(&inputs).map(drop))?;
                // (total, overhead per task, spans) per run
                let mut block_runs = Vec::with_capacity(block as usize);
                let mut last = None;
                for k in 0..block {
                    let inf = session.run(&inputs)?;
                    block_runs.push((inf.total_us, inf.overhead_us_per_task(program), inf.spans));
                    if k + 1 == block {
                        last = Some(inf.outputs);
                    }
                }
                if let Some(outputs) = last {
                    check(&outputs)?;
                }
                if speed.again(t0.elapsed()) {
                    continue;
                }
                let mut this_block = vec![];
                for (total, overhead, spans) in block_runs {
                    totals.push(total);
                    this_block.push(total);
                    overheads.push(overhead);
                    for s in &spans {
                        task_us[s.task].push(s.finish_us - s.start_us);
                    }
                    kept.push((total, spans));
                }
                block_medians.push(bident_stats::quantile(&mut this_block, 0.5));
                fast_blocks.push(!speed.last_slow.get());
                return Ok(());
            }
        };
        // the plan goes first in even turns and last in odd ones: no session always follows
        // the same one
        if turn % 2 == 0 {
            plan_block()?;
        }
        let baselines = std::iter::once((&mono, (&mut mono_us, &mut mono_blocks)))
            .filter(|_| !reference_is_plan)
            .chain(defaults.iter().map(|d| &d.1).zip(default_us.iter_mut().zip(default_blocks.iter_mut())))
            .chain(wholes.iter().map(|w| &w.1).zip(whole_us.iter_mut().zip(whole_blocks.iter_mut())))
            .filter(|(s, _)| !s.is_empty());
        for (baseline, (times, blocks)) in baselines {
            let mut sums = loop {
                let t0 = Instant::now();
                let mut sums = vec![0.0; block as usize];
                for (m, s) in baseline.iter().enumerate() {
                    settle();
                    let run = || s.run(std::slice::from_ref(&inputs[m]));
                    warm_up(cfg.warmup, || run().map(drop))?;
                    for sum in sums.iter_mut() {
                        *sum += run()?.total_us;
                    }
                }
                if !speed.again(t0.elapsed()) {
                    break sums;
                }
            };
            times.extend_from_slice(&sums);
            blocks.push(bident_stats::quantile(&mut sums, 0.5));
        }
        if turn % 2 == 1 {
            plan_block()?;
        }
        turn += 1;
        done += block;
    }
    let q = bident_stats::quantile;
    let measured_us = q(&mut totals.clone(), 0.5);
    let ratios = |theirs: &[f64]| over(theirs, &block_medians);
    let mono_ratios = if reference_is_plan { vec![] } else { ratios(&mono_blocks) };
    let backend_defaults: Vec<BackendDefault> = defaults
        .into_iter()
        .zip(default_us.iter_mut().zip(&default_blocks))
        .zip(default_errs)
        .map(|(((d, s), (us, blocks)), errs)| {
            let worst = |e: Vec<Vec<f64>>| e.into_iter().flatten().fold(0.0, f64::max);
            if d.is_plan {
                // one measurement: the plan's own
                BackendDefault { measured_us: Some(measured_us), max_abs_err: Some(max_abs_err), ..d }
            } else {
                BackendDefault {
                    measured_us: (!s.is_empty()).then(|| q(us, 0.5)),
                    max_abs_err: errs.map(worst),
                    block_ratios: ratios(blocks),
                    ..d
                }
            }
        })
        .collect();
    let measured_best_single_pu_us = if reference_is_plan { measured_us } else { q(&mut mono_us, 0.5) };
    let measured_whole: Vec<WholeRun> = wholes
        .into_iter()
        .zip(whole_us.iter_mut().zip(&whole_blocks))
        .map(|((w, s), (us, blocks))| {
            let default = |b: &str| backend_defaults.iter().find(|d| d.backend == b);
            let (measured_us, block_ratios) = match w.same_as.as_deref() {
                Some("the plan") => (Some(measured_us), vec![]),
                Some("the reference") => (Some(measured_best_single_pu_us), mono_ratios.clone()),
                Some(b) => {
                    (default(b).and_then(|d| d.measured_us), default(b).map_or(vec![], |d| d.block_ratios.clone()))
                }
                None => ((!s.is_empty()).then(|| q(us, 0.5)), ratios(blocks)),
            };
            WholeRun { measured_us, block_ratios, ..w }
        })
        .collect();
    let (fast, measured_backend_default_us) =
        fastest(&backend_defaults).ok_or_else(|| RuntimeError::Program("no backend default was measured".into()))?;
    let backend_default = fast.description.clone();
    let engine = backend_defaults.iter().find(|d| needed_allowance && (d.is_plan || d.computes_in(reduced)));
    let mut tolerance = tolerance_words(reduced, engine);
    let apart = engines_apart.iter().flatten().flatten().fold(f64::NAN, |a, &b| a.max(b));
    if needed_allowance && apart.is_finite() {
        tolerance.push_str(&format!(
            ", or no further from it than the engines' and the plan's PUs' exact whole-model runs are from it (max abs \
             {apart:.3e})"
        ));
    }
    // the alternatives to the plan, each measured once, the plan itself left out: in words,
    // the median and the ratios of its blocks to the plan's
    let reference = (!reference_is_plan).then(|| {
        (format!("the whole model on {}", best.join(" then ")), measured_best_single_pu_us, mono_ratios.as_slice())
    });
    let candidates: Vec<(String, f64, &[f64])> =
        reference
            .into_iter()
            .chain(
                backend_defaults
                    .iter()
                    .filter(|d| !d.is_plan)
                    .filter_map(|d| Some((d.description.clone(), d.measured_us?, d.block_ratios.as_slice()))),
            )
            .chain(measured_whole.iter().filter(|w| w.same_as.is_none()).filter_map(|w| {
                Some((format!("the whole model on {}", w.pu), w.measured_us?, w.block_ratios.as_slice()))
            }))
            .collect();
    let regret = Regret::of(measured_us, &candidates);
    let block_errors: Vec<f64> = block_medians.iter().map(|&m| (m - program.predicted_us).abs() / m).collect();
    let prediction_error_fast = fast_spread(&block_errors, &fast_blocks);
    let typical = kept
        .iter()
        .min_by(|a, b| (a.0 - measured_us).abs().total_cmp(&(b.0 - measured_us).abs()))
        .ok_or(RuntimeError::Program("no runs".into()))?;
    Ok(RunReport {
        models: graphs.iter().map(|g| g.name.clone()).collect(),
        soc: soc.name.clone(),
        pus: soc.pus.iter().map(|p| p.name.clone()).collect(),
        pu_backends: soc.pus.iter().map(|p| p.backend.clone()).collect(),
        simulated: false,
        measured_on: bident_backend::host_description(),
        backend: bident_backend::describe(backend.as_ref(), soc)
            .map_err(|(pu, e)| RuntimeError::Program(format!("PU `{pu}`: {e}")))?,
        schedule: program.schedule.clone(),
        warmup: cfg.warmup,
        runs: done,
        compile_ms: session.compile_ms(),
        predicted_us: program.predicted_us,
        measured_us,
        measured_p10_us: q(&mut totals.clone(), 0.1),
        measured_p90_us: q(&mut totals, 0.9),
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
        blocks: speed.blocks.get(),
        slow_blocks: speed.slow_blocks.get(),
        overhead_us_per_op: q(&mut overheads, 0.5),
        max_abs_err,
        tolerance,
        ops: program
            .tasks
            .iter()
            .zip(task_us)
            .zip(&typical.1)
            .map(|((t, mut us), s)| OpTiming {
                model: t.stream as u32,
                ops: t.ops.clone(),
                name: t.name.clone(),
                pu: soc.pus[t.pu].name.clone(),
                predicted_start_us: t.predicted.0,
                predicted_finish_us: t.predicted.1,
                measured_start_us: s.start_us,
                measured_finish_us: s.finish_us,
                measured_us: q(&mut us, 0.5),
            })
            .collect(),
    })
}

/// The coarsest precision below f32 that a PU the program uses computes in: bf16, or f16 (also
/// for a PU that leaves the precision to its device); None where every PU used is exact.
fn reduced_precision(soc: &SocSpec, program: &Program) -> Option<DType> {
    let used = program.queues.iter().enumerate().filter(|(_, q)| !q.is_empty()).map(|(j, _)| &soc.pus[j]);
    coarsest(used)
}

/// The coarsest precision below f32 of `pus`.
fn coarsest<'a>(pus: impl Iterator<Item = &'a PuSpec>) -> Option<DType> {
    pus.filter(|p| !p.is_exact())
        .map(|p| match p.precision() {
            Some(x) if x.eq_ignore_ascii_case("bf16") => DType::Bf16,
            _ => DType::F16,
        })
        .max_by_key(|d| matches!(d, DType::Bf16))
}

/// The tolerance a run was checked with, in words; `engine`: the default at the plan's reduced
/// precision whose own distance from f32 some output needed.
fn tolerance_words(reduced: Option<DType>, engine: Option<&BackendDefault>) -> String {
    let (rtol, atol) = tolerance(DType::F32, reduced);
    let why = match reduced {
        Some(d) => format!("some ops run in {d}"),
        None => "every op runs in f32".into(),
    };
    let within =
        format!("float outputs within {atol:e} x max|output| + {rtol:e} x |expected| of the f32 whole model ({why})");
    match engine {
        Some(d) if d.is_plan => format!(
            "{within}, or, since the plan is {}, the engine's own outputs (max abs error {:.3e})",
            d.description,
            d.max_abs_err.unwrap_or(f64::NAN)
        ),
        Some(d) => format!(
            "{within}, or no further from it than {} (max abs error {:.3e})",
            d.description,
            d.max_abs_err.unwrap_or(f64::NAN)
        ),
        None => within,
    }
}

/// How close the plan's outputs must be to the monolithic run's: `|got - want| <= atol + rtol
/// |want|`, with `atol` relative to the output's largest magnitude (fusion reorders float sums).
/// Float outputs of a plan that computes some ops in a reduced precision (`reduced`: the
/// coarsest of its PUs, bf16 or f16) get that precision's tolerance.
fn tolerance(dtype: DType, reduced: Option<DType>) -> (f64, f64) {
    match (dtype, reduced) {
        (DType::F32 | DType::F64, Some(DType::Bf16)) | (DType::Bf16, _) => (5e-2, 2e-2),
        (DType::F32 | DType::F64, Some(_)) | (DType::F16, _) => (2e-2, 1e-2),
        (DType::F32 | DType::F64, None) => (1e-3, 1e-4),
        // quantized outputs may round one step apart
        (DType::I8 | DType::U8, _) => (0.0, 1.0),
        _ => (0.0, 0.0),
    }
}

/// A plan's outputs against the whole model's on an exact PU (`want`), within the tolerance of
/// the coarsest precision the plan's PUs compute in: the largest absolute difference, or the
/// first output out of tolerance. What a caller serving a plan checks its answers with.
pub fn check_plan_outputs(
    g: &FusedGraph,
    plan: &Plan,
    soc: &SocSpec,
    got: &[Arc<HostTensor>],
    want: &[Arc<HostTensor>],
) -> Result<f64, RuntimeError> {
    let used = soc.pus.iter().filter(|p| plan.ops_per_pu.get(&p.name).is_some_and(|&n| n > 0));
    Ok(check_outputs(g, got, want, coarsest(used), None)?.0)
}

/// Each output's largest absolute difference from the reference's (in graph order).
fn output_errors(g: &FusedGraph, got: &[Arc<HostTensor>], want: &[Arc<HostTensor>]) -> Result<Vec<f64>, RuntimeError> {
    if got.len() != want.len() {
        return Err(RuntimeError::Outputs(format!("{} outputs where the model has {}", got.len(), want.len())));
    }
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(k, (a, b))| {
            a.max_abs_diff(b)
                .map_err(|e| RuntimeError::Outputs(format!("`{}` of `{}`: {e}", g.tensor(g.outputs[k]).name, g.name)))
        })
        .collect()
}

/// p10, median and p90 of per-block figures.
fn spread(mut v: Vec<f64>) -> [f64; 3] {
    let q = bident_stats::quantile;
    [q(&mut v, 0.1), q(&mut v, 0.5), q(&mut v, 0.9)]
}

/// [`spread`] of the blocks flagged fast (`fast[k]` for `per_block[k]`), and how many those
/// were; None where fewer than [`FAST_BLOCKS_MIN`].
fn fast_spread(per_block: &[f64], fast: &[bool]) -> Option<([f64; 3], u32)> {
    let kept: Vec<f64> = per_block.iter().zip(fast).filter(|&(_, &f)| f).map(|(&e, _)| e).collect();
    let n = kept.len() as u32;
    (n >= FAST_BLOCKS_MIN).then(|| (spread(kept), n))
}

/// Check a run's outputs against the monolithic run's (in graph order): the largest absolute
/// difference, and whether an output needed its allowance; the first output out of tolerance
/// is an error. `allowance[k]`: how far output `k` of the engine's own default at the plan's
/// reduced precision is from the reference.
fn check_outputs(
    g: &FusedGraph,
    got: &[Arc<HostTensor>],
    want: &[Arc<HostTensor>],
    reduced: Option<DType>,
    allowance: Option<&[f64]>,
) -> Result<(f64, bool), RuntimeError> {
    let errors = output_errors(g, got, want)?;
    let (mut worst, mut loose) = (0.0f64, false);
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let allowed = allowance.and_then(|e| e.get(k).copied());
        loose |= check_output(a, b, errors[k], reduced, allowed).map_err(|why| {
            RuntimeError::Outputs(format!("`{}` of `{}`: {why}", g.name, g.tensor(g.outputs[k]).name))
        })?;
        worst = worst.max(errors[k]);
    }
    Ok((worst, loose))
}

/// One output `a` against the reference `b` (`err`: their largest absolute difference): within
/// the precision's tolerance, or (a float output) no further from `b` than its allowance
/// (`allowed`: the engine's own default at the plan's reduced precision, or the engines' exact
/// runs from each other), with the precision's absolute tolerance as slack. Whether it needed
/// the allowance; the mismatch otherwise.
fn check_output(
    a: &HostTensor,
    b: &HostTensor,
    err: f64,
    reduced: Option<DType>,
    allowed: Option<f64>,
) -> Result<bool, String> {
    let scale = (0..b.numel()).map(|i| b.get_f64(i).abs()).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let (rtol, atol) = tolerance(b.dtype, reduced);
    let atol = if b.dtype.is_float() { atol * scale } else { atol };
    match (a.mismatch(b, rtol, atol), allowed) {
        (None, _) => Ok(false),
        (Some(_), Some(engine)) if b.dtype.is_float() && err <= engine + atol => Ok(true),
        (Some(why), _) => Err(why),
    }
}

/// Input hash of a run report: the plan it executed.
pub fn input_hash(plan_hash: ContentHash, cfg: &RunConfig) -> Result<ContentHash, bident_artifact::ArtifactError> {
    ContentHash::of_value(&(plan_hash, cfg))
}

#[cfg(test)]
mod tests {
    use bident_tensor::{DType, HostTensor};

    use super::{Regret, WARM, check_output, consistently_faster, fast_spread, undecided, warm_up};

    /// The prediction error over the fast blocks takes only those, and only where there are
    /// enough of them.
    #[test]
    fn the_fast_blocks_spread_takes_only_fast_blocks() {
        let errors = [0.5, 0.01, 0.9, 0.02, 0.03, 0.7];
        let fast = [false, true, false, true, true, false];
        let (spread, n) = fast_spread(&errors, &fast).expect("three fast blocks");
        assert_eq!(n, 3);
        assert!(spread.iter().all(|&e| (0.01..=0.03).contains(&e)), "{spread:?}");
        assert_eq!(spread[1], 0.02);
        // two fast blocks are too few, none even more so
        assert_eq!(fast_spread(&errors, &[false, true, false, true, false, false]), None);
        assert_eq!(fast_spread(&[], &[]), None);
    }

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

    /// A lead counts where it stands clear of the spread between blocks, never from no blocks.
    #[test]
    fn a_lead_counts_beyond_the_noise_between_blocks() {
        let cases: &[(&[f64], bool)] = &[
            (&[], false),
            (&[0.5], true),
            (&[0.99], false),
            (&[0.5, 1.1], false),
            (&[0.9, 0.9, 0.9, 0.9], true),
            // faster in every block, but by less than the margin
            (&[0.99, 0.985, 0.99, 0.995, 0.99], false),
            (&[0.9, 0.8, 0.85, 0.9, 0.95], true),
            // 5 of 6 faster by a third, the other block the closest call: a lead
            (&[0.6, 0.65, 0.7, 0.6, 0.62, 0.99], true),
            // 5 of 6, but the other block the furthest off: not
            (&[0.9, 0.92, 0.95, 0.9, 0.93, 1.3], false),
            // as fast as the plan, give or take 13%
            (&[0.87, 1.1, 0.9, 1.05, 0.95, 1.13], false),
            // 9 of 10
            (&[0.8, 0.85, 0.9, 0.8, 0.82, 0.84, 0.9, 0.86, 0.88, 1.05], true),
            (&[0.9, f64::NAN, 0.9], false),
        ];
        for (ratios, want) in cases {
            assert_eq!(consistently_faster(ratios, 0.02), *want, "{ratios:?}");
        }
    }

    /// Turns go on while an alternative's median could still be either side of the plan's by
    /// more than 5%; they stop where it is clearly one side, or known to be within 5%.
    #[test]
    fn blocks_decide_once_the_median_is_known() {
        let three_of_four = |times: usize| [0.9, 0.9, 0.9, 1.1].repeat(times);
        let cases: &[(&[f64], bool)] = &[
            (&[], true),
            // four blocks never decide
            (&[0.5, 0.5, 0.5, 0.5], true),
            (&[0.8, 0.82, 0.8, 0.81, 0.8], false),
            (&[1.2, 1.3, 1.25, 1.2, 1.3, 1.2], false),
            // as fast as the plan, give or take 3%
            (&[0.98, 1.01, 0.99, 1.02, 1.0, 0.97], false),
            // give or take 20%
            (&[0.7, 1.2, 0.8, 1.1, 0.75, 1.15], true),
            // three blocks in four faster: not known from eight blocks, known from forty
            (&three_of_four(2), true),
            (&three_of_four(10), false),
            (&[0.9, f64::NAN, 0.9, 0.9, 0.9], false),
        ];
        for (ratios, want) in cases {
            assert_eq!(undecided(ratios), *want, "{ratios:?}");
        }
    }

    /// Regret by medians counts the fastest alternative; beyond the noise, only the fastest of
    /// those whose blocks agree it was faster.
    #[test]
    fn regret_beyond_the_noise_counts_only_clear_leads() {
        let noisy: &[f64] = &[0.7, 1.2, 0.8, 1.1, 0.75, 1.15];
        let clear: &[f64] = &[0.9, 0.92, 0.91, 0.93, 0.9, 0.92];
        let slower: &[f64] = &[1.2, 1.3, 1.25, 1.2, 1.3, 1.2];
        let c = |what: &str, us: f64, r: &'static [f64]| (what.to_string(), us, r);
        let clear_regret = 100.0 / 90.9 - 1.0;
        // (candidates, regret, fastest, beyond the noise, clearly faster), the plan at 100 µs
        type Case<'a> = (Vec<(String, f64, &'a [f64])>, f64, &'a str, f64, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (vec![], 0.0, "nothing else: every candidate is the plan", 0.0, None),
            (vec![c("slower", 125.0, slower)], 0.0, "slower", 0.0, None),
            // the fastest median by chance: regret, none beyond the noise
            (vec![c("noisy", 80.0, noisy), c("slower", 125.0, slower)], 0.25, "noisy", 0.0, None),
            // a clear lead behind a noisy one: counted against the clear one
            (vec![c("noisy", 80.0, noisy), c("clear", 90.9, clear)], 0.25, "noisy", clear_regret, Some("clear")),
            (vec![c("clear", 90.9, clear)], clear_regret, "clear", clear_regret, Some("clear")),
        ];
        for (candidates, regret, fastest, beyond, clearly) in cases {
            let r = Regret::of(100.0, &candidates);
            assert!((r.regret - regret).abs() < 1e-12, "{candidates:?}: regret {}", r.regret);
            assert_eq!(r.fastest, fastest);
            assert!((r.beyond_noise - beyond).abs() < 1e-12, "{candidates:?}: beyond {}", r.beyond_noise);
            assert_eq!(r.clearly_faster.as_deref(), clearly);
        }
    }

    fn f32s(v: &[f32]) -> HostTensor {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        HostTensor::new("t", DType::F32, vec![v.len() as u64], bytes).expect("tensor")
    }

    /// A plan may be as far from the f32 reference as its allowance (the engine's own default at
    /// the plan's reduced precision, or the engines' exact runs from each other) plus the
    /// precision's absolute slack, not further.
    #[test]
    fn reduced_precision_is_held_to_the_engines_own_default() {
        let want = f32s(&[0.38, 0.5, 0.12]);
        let close = f32s(&[0.381, 0.5, 0.12]);
        let far = f32s(&[0.015, 0.5, 0.12]);
        let err = |a: &HostTensor| a.max_abs_diff(&want).expect("diff");
        let bf16 = Some(DType::Bf16);
        assert_eq!(check_output(&close, &want, err(&close), bf16, None), Ok(false));
        assert!(check_output(&far, &want, err(&far), bf16, None).is_err());
        // the default at bf16 is as far off: the plan may be too
        assert_eq!(check_output(&far, &want, err(&far), bf16, Some(0.36)), Ok(true));
        // but not further than the default plus the slack (0.365 > 0.3 + 2e-2 x max|output| 1.0)
        assert!(check_output(&far, &want, err(&far), bf16, Some(0.3)).is_err());
        // a plan all in f32 is held to f32's tolerance without an allowance (the caller gives
        // one only where the engines' own exact runs are that far apart)
        assert!(check_output(&far, &want, err(&far), None, None).is_err());
        assert_eq!(check_output(&far, &want, err(&far), None, Some(0.37)), Ok(true));
        // f32's slack is smaller: 0.365 > 0.36 + 1e-4 x max|output| 1.0
        assert!(check_output(&far, &want, err(&far), None, Some(0.36)).is_err());
    }
}
