//! The `RunReport` artifact: what a run measured beside what the plan predicted, the baselines
//! measured in the same run, and the configuration it ran with.

use std::time::Duration;

use bident_artifact::{Artifact, ContentHash};
use bident_backend::DType;
use serde::{Deserialize, Serialize};

use crate::program::Grouping;
#[cfg(doc)]
use crate::{FAST_BLOCKS_MIN, consistently_faster};
#[cfg(doc)]
use bident_backend::PuSpec;

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
    /// The PU's configuration in words ([`bident_backend::PuSpec::configuration`]).
    #[serde(default)]
    pub configuration: String,
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
    pub(crate) fn computes_in(&self, p: Option<DType>) -> bool {
        p.is_some_and(|p| self.precision.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(p.name())))
    }
}

impl Artifact for RunReport {
    const KIND: &'static str = "run-report";
    const SCHEMA_VERSION: u32 = 11;
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
    /// The tuned baseline: the fastest whole-model configuration measured in this run (every
    /// backend's defaults, the models whole on each PU measured beside the plan, the plan itself
    /// where it is one of them), what a careful user finds by hand: in words, and its median.
    pub fn tuned(&self) -> Option<(String, f64)> {
        let defaults = self.backend_defaults.iter().filter_map(|d| Some((d.description.clone(), d.measured_us?)));
        let wholes = self.measured_whole.iter().filter_map(|w| {
            let how = if w.configuration.is_empty() { String::new() } else { format!(" ({})", w.configuration) };
            Some((format!("the whole model on `{}`{how}", w.pu), w.measured_us?))
        });
        defaults.chain(wholes).min_by(|a, b| a.1.total_cmp(&b.1))
    }
    /// Over the tuned baseline ([`RunReport::tuned`]); 1 where nothing was measured whole.
    pub fn speedup_vs_tuned(&self) -> f64 {
        self.tuned().map_or(1.0, |(_, us)| us / self.measured_us)
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

/// The measured default with the lowest latency, and that latency.
pub(crate) fn fastest(defaults: &[BackendDefault]) -> Option<(&BackendDefault, f64)> {
    defaults.iter().filter_map(|d| d.measured_us.map(|us| (d, us))).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Input hash of a run report: the plan it executed.
pub fn input_hash(plan_hash: ContentHash, cfg: &RunConfig) -> Result<ContentHash, bident_artifact::ArtifactError> {
    ContentHash::of_value(&(plan_hash, cfg))
}
