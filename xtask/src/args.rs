//! The pipeline's and stages' command-line arguments, and their translation into the driver's
//! typed options (checked before anything is touched).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bident_backend::fault::FaultSpec;
use bident_backend::soc::Precisions;
use bident_driver::{
    BackendName, FusionSource, Goal, ImportSpec, Measuring, Model, Options, PlanOptions, RunOptions, SecondModel,
    SocChoice,
};
use bident_profile::ProfileConfig;
use bident_runtime::{Grouping, RunConfig, ServeConfig};
use bident_search::Mode;
use clap::{Args, ValueEnum};

#[derive(Args, Clone)]
#[command(next_help_heading = "Model input")]
pub struct ImportArgs {
    /// ONNX model file, or `zoo:NAME` for a model the project builds (default: zoo:example).
    pub model: Option<String>,
    /// Pin an input's shape: NAME=D,D,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=D,D,...")]
    pub input_shape: Vec<String>,
    /// Pin an input's value: NAME=V,V,... (repeatable). bident then treats it as a constant
    /// (shape parameters, an If on a sample rate) and feeds that value at run time.
    #[arg(long = "input-value", value_name = "NAME=V,V,...")]
    pub input_value: Vec<String>,
    /// Output folder (default: target/bident/<model-name>/).
    #[arg(long, help_heading = "Output")]
    pub out: Option<PathBuf>,
    /// How ONNX nodes are grouped into fused ops: `rules` (bident's fusion rules) or `backend`
    /// (as the SoC's first backend fuses the whole model on its first `local` PU, read from its
    /// profile; the artifact records how far the two agree).
    #[arg(long, value_enum, default_value_t = Fusion::Rules)]
    pub fusion: Fusion,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Fusion {
    Rules,
    Backend,
}

impl Fusion {
    pub fn source(self) -> FusionSource {
        match self {
            Fusion::Rules => FusionSource::Rules,
            Fusion::Backend => FusionSource::Backend,
        }
    }
}

impl ImportArgs {
    pub fn spec(&self) -> Result<ImportSpec> {
        Ok(ImportSpec {
            model: Model::parse(self.model.as_deref().unwrap_or("zoo:example")),
            input_shapes: parse_shapes(&self.input_shape)?,
            input_values: parse_values(&self.input_value)?,
            fusion: self.fusion.source(),
        })
    }
}

#[derive(Args, Clone)]
#[command(next_help_heading = "SoC and PUs")]
pub struct SocArgs {
    /// SoC: a preset, `local` (each backend's device whole and not pinned, in f32, and OpenVINO's
    /// CPU at its default precision where that is not f32; beside them, run whole only, each
    /// engine on 1, 2, 4, ... pinned threads in each precision), `cores` (`local`, and one pinned
    /// single-threaded f32 PU per CPU core and backend), `all` (`cores`, and each core at the
    /// default precision), `cores-mixed` (the first core on OpenVINO, the second on ONNX
    /// Runtime) or `lunar-lake` (virtual: the paper's CPU + GPU + NPU as an analytic model,
    /// every figure simulated, nothing runs), or a spec file `FILE.toml` (`cargo xtask soc
    /// NAME` prints a preset as one). PUs that share cores never run at once.
    #[arg(long, default_value = "local")]
    pub soc: String,
    /// The backends PUs may use, the first being the default one (presets name its PUs
    /// without a tag; `CPU.ort` is ONNX Runtime's CPU beside OpenVINO's `CPU`).
    #[arg(
        long = "backend",
        visible_alias = "backends",
        value_name = "BACKEND,...",
        value_delimiter = ',',
        default_value = "openvino,onnxruntime",
        value_parser = ["openvino", "onnxruntime"]
    )]
    pub backends: Vec<String>,
    /// `default`: presets offer each CPU at its default precision beside exact f32 (`CPU.bf16`
    /// where OpenVINO computes in bf16); `exact`: f32 only (a spec file's PUs must ask for f32).
    #[arg(long, value_enum, default_value_t = Precision::Default)]
    pub precision: Precision,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Precision {
    Default,
    Exact,
}

impl SocArgs {
    pub fn choice(&self) -> Result<SocChoice> {
        Ok(SocChoice {
            spec: self.soc.clone(),
            backends: self.backends.iter().map(|b| BackendName::parse(b)).collect::<Result<_, _>>()?,
            precisions: match self.precision {
                Precision::Default => Precisions::Default,
                Precision::Exact => Precisions::Exact,
            },
        })
    }
}

/// How the profile stage measures.
/// The help headings of the flags a virtual SoC ignores: nothing is measured or run on it.
pub const MEASURING: &str = "Measuring";
pub const RUNNING: &str = "Running and faults";

#[derive(Args, Clone)]
#[command(next_help_heading = MEASURING)]
pub struct MeasureArgs {
    /// Timed runs per (op, PU): the cap (the paper's 200) unless --fixed-runs.
    #[arg(long, default_value_t = ProfileConfig::default().runs, value_parser = at_least_one())]
    pub profile_runs: u32,
    /// Time every (op, PU) exactly --profile-runs times instead of stopping once its median is
    /// known within 3% (95% confidence).
    #[arg(long)]
    pub fixed_runs: bool,
    /// Measure every (op, PU) again instead of reusing the profile cache (target/bident/cache).
    #[arg(long)]
    pub no_cache: bool,
}

impl MeasureArgs {
    pub fn measuring(&self) -> Measuring {
        Measuring { runs: self.profile_runs, adaptive: !self.fixed_runs, cache: !self.no_cache }
    }
}

#[derive(Args, Clone)]
pub struct ProfileArgs {
    pub dir: PathBuf,
    #[command(flatten)]
    pub soc: SocArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Seconds any one measuring call may take before it is cancelled.
    #[arg(long, default_value_t = RunConfig::default().op_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
}

/// What the search optimises and may use.
#[derive(Args, Clone)]
#[command(next_help_heading = "Planning")]
pub struct PlanArgs {
    /// latency, energy, or pareto (the latency/energy front: every point is printed and written
    /// to pareto.yaml, the fastest becomes the plan)
    #[arg(long, value_enum, default_value_t = Objective::Latency)]
    pub objective: Objective,
    /// sequential (one op at a time) or parallel (the branches of a phase at once on different
    /// PUs, with contention)
    #[arg(long, value_enum, default_value_t = SearchMode::Sequential)]
    pub mode: SearchMode,
    /// The mapping search, by name (`cargo xtask passes` lists them).
    #[arg(long, default_value = "bident")]
    pub search: String,
    /// Run an op (its name, or #N for op N) on a PU (repeatable).
    #[arg(long, value_name = "OP=PU")]
    pub pin: Vec<String>,
    /// Keep an op off a PU (repeatable).
    #[arg(long, value_name = "OP=PU")]
    pub forbid: Vec<String>,
    /// Use no op on this PU (repeatable).
    #[arg(long, value_name = "PU")]
    pub exclude_pu: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Objective {
    Latency,
    Energy,
    Pareto,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SearchMode {
    Sequential,
    Parallel,
}

impl PlanArgs {
    /// The plan options, with the partition pass `partition`.
    pub fn options(&self, partition: &str) -> Result<PlanOptions> {
        let pairs = |flag: &str, items: &[String]| -> Result<Vec<(String, String)>> {
            items
                .iter()
                .map(|i| {
                    let (op, pu) = i.split_once('=').with_context(|| format!("--{flag} {i}: expected OP=PU"))?;
                    Ok((op.to_string(), pu.to_string()))
                })
                .collect()
        };
        Ok(PlanOptions {
            goal: match self.objective {
                Objective::Latency => Goal::Latency,
                Objective::Energy => Goal::Energy,
                Objective::Pareto => Goal::Pareto,
            },
            mode: match self.mode {
                SearchMode::Sequential => Mode::Sequential,
                SearchMode::Parallel => Mode::Parallel,
            },
            constraints: bident_search::Constraints {
                pin: pairs("pin", &self.pin)?,
                forbid: pairs("forbid", &self.forbid)?,
                exclude: self.exclude_pu.clone(),
                ..Default::default()
            },
            partition: partition.to_string(),
            search: self.search.clone(),
        })
    }
}

#[derive(Args, Clone)]
pub struct PartitionArgs {
    pub dir: PathBuf,
    /// The partition pass, by name (`cargo xtask passes` lists them).
    #[arg(long, default_value = "phases")]
    pub partition: String,
}

#[derive(Args, Clone)]
pub struct SearchArgs {
    pub dir: PathBuf,
    #[command(flatten)]
    pub plan: PlanArgs,
}

#[derive(Args, Clone)]
pub struct RunArgs {
    pub dir: PathBuf,
    #[command(flatten)]
    pub run: RunOpts,
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    pub dir: PathBuf,
    /// Inferences to serve.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub inferences: u64,
    /// Inferences per drift window.
    #[arg(long, default_value_t = ServeConfig::default().window as u64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub window: u64,
    /// A PU drifts when its measured/predicted ratio is this many times its calibrated one...
    #[arg(long, default_value_t = ServeConfig::default().threshold)]
    pub threshold: f64,
    /// ...for this many windows in a row.
    #[arg(long, default_value_t = ServeConfig::default().sustain as u64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub sustain: u64,
    /// Milliseconds between re-checks of a PU a drift made the plan leave (0: never). Off by
    /// default: where the PUs share CPU cores, the re-checks slow the inferences beside them.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub recheck_ms: u64,
    /// Make one PU fail or slow down on purpose (as for `run`), e.g. core0:slow=4@100, or
    /// core0:slow=4@100-400 to recover at its 400th run.
    #[arg(long, value_name = "PU:FAULT")]
    pub inject_fault: Option<FaultSpec>,
    /// Seconds an inference may go without any op finishing, and any one measuring call of a
    /// re-plan may take, before it is cancelled.
    #[arg(long, default_value_t = ServeConfig::default().op_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
}

impl ServeArgs {
    pub fn config(&self) -> Result<ServeConfig> {
        anyhow::ensure!(
            self.threshold.is_finite() && self.threshold > 1.0,
            "--threshold must be above 1, not {}",
            self.threshold
        );
        Ok(ServeConfig {
            window: self.window as usize,
            threshold: self.threshold,
            sustain: self.sustain as usize,
            recheck: (self.recheck_ms > 0).then(|| std::time::Duration::from_millis(self.recheck_ms)),
            op_timeout: std::time::Duration::from_secs(self.timeout),
            ..Default::default()
        })
    }
}

#[derive(Args, Clone)]
#[command(next_help_heading = RUNNING)]
pub struct RunOpts {
    /// Measured inferences (after warm-up), at least: up to four times as many where the blocks
    /// do not yet tell an alternative measured beside the plan from it.
    #[arg(long, default_value_t = RunConfig::default().runs, value_parser = at_least_one())]
    pub runs: u32,
    /// When a PU fails to compile or run an op, plan again without that PU and run that plan.
    #[arg(long)]
    pub fallback: bool,
    /// Make one PU fail on purpose: PU:compile, PU:run[@N] (after N good runs), PU:hang[@N] or
    /// PU:slow=F[@N[-M]] (F times slower after N runs, until run M).
    #[arg(long, value_name = "PU:FAULT")]
    pub inject_fault: Option<FaultSpec>,
    /// Seconds an inference may go without any op finishing before it is abandoned, and any one
    /// measuring call (profile, refine, baselines) may take before it is cancelled.
    #[arg(long, default_value_t = RunConfig::default().op_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Compile and run every op alone. By default each run of branch neighbours the plan puts
    /// on one PU is compiled as one sub-model (the backend fuses across them; the profile
    /// measured what that saves and the plan counts on it).
    #[arg(long)]
    pub op_by_op: bool,
    /// Also run the model whole on this PU, timed in the same run as the plan (repeatable).
    #[arg(long = "measure-whole", value_name = "PU")]
    pub measure_whole: Vec<String>,
}

impl RunOpts {
    pub fn options(&self) -> RunOptions {
        RunOptions {
            config: RunConfig {
                runs: self.runs,
                op_timeout: std::time::Duration::from_secs(self.timeout),
                grouping: if self.op_by_op { Grouping::PerOp } else { Grouping::Merged },
                whole_on: self.measure_whole.clone(),
                ..Default::default()
            },
            fallback: self.fallback,
            fault: self.inject_fault.clone(),
        }
    }
}

#[derive(Args)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub import: ImportArgs,
    #[command(flatten)]
    pub soc: SocArgs,
    /// The partition pass, by name (`cargo xtask passes` lists them).
    #[arg(long, default_value = "phases", help_heading = "Planning")]
    pub partition: String,
    #[command(flatten)]
    pub plan: PlanArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    #[command(flatten)]
    pub run: RunOpts,
    /// Print one JSON object as the last line of stdout.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// A second model to run at the same time (concurrent search over both streams; the plan
    /// goes to --out, default target/bident/pairs/<A>+<B>/, each model's stages to
    /// <out>/<model>/, default target/bident/<model>/).
    #[arg(long, value_name = "MODEL2", help_heading = "A second model at once")]
    pub with: Option<String>,
    /// With --with: pin an input's shape of the second model, NAME=D,D,... (repeatable;
    /// --input-shape is the first model's).
    #[arg(
        long = "with-input-shape",
        value_name = "NAME=D,D,...",
        requires = "with",
        help_heading = "A second model at once"
    )]
    pub with_input_shape: Vec<String>,
    /// With --with: pin an input's value of the second model, NAME=V,V,... (repeatable).
    #[arg(
        long = "with-input-value",
        value_name = "NAME=V,V,...",
        requires = "with",
        help_heading = "A second model at once"
    )]
    pub with_input_value: Vec<String>,
    /// With --with: advance both models in lockstep (the paper's aligned mode, for the same
    /// model twice) instead of the joint (i, j) search.
    #[arg(long, requires = "with", help_heading = "A second model at once")]
    pub aligned: bool,
    /// The flags under [`MEASURING`] and [`RUNNING`] given on the command line (not defaults),
    /// refused on a virtual SoC.
    #[arg(skip)]
    pub measuring_given: Vec<String>,
}

impl PipelineArgs {
    pub fn options(&self) -> Result<Options> {
        Ok(Options {
            import: self.import.spec()?,
            out: self.import.out.clone(),
            soc: self.soc.choice()?,
            measuring: self.measure.measuring(),
            plan: self.plan.options(&self.partition)?,
            run: self.run.options(),
        })
    }

    /// The second model of `--with`, if any.
    pub fn second(&self) -> Result<Option<SecondModel>> {
        let Some(model) = &self.with else { return Ok(None) };
        Ok(Some(SecondModel {
            import: ImportSpec {
                model: Model::parse(model),
                input_shapes: parse_shapes(&self.with_input_shape)?,
                input_values: parse_values(&self.with_input_value)?,
                ..self.import.spec()?
            },
            aligned: self.aligned,
        }))
    }
}

/// Counts that mean "how many times": zero would silently do something else.
pub fn at_least_one() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..)
}

fn parse_shapes(items: &[String]) -> Result<BTreeMap<String, Vec<u64>>> {
    parse_named_lists(items, "--input-shape", "NAME=D,D,...", "dims must be positive integers", |d| {
        d.parse::<u64>().ok().filter(|&v| v > 0)
    })
}

fn parse_values(items: &[String]) -> Result<BTreeMap<String, Vec<f64>>> {
    parse_named_lists(items, "--input-value", "NAME=V,V,...", "values must be finite numbers", |v| {
        v.parse::<f64>().ok().filter(|v| v.is_finite())
    })
}

/// `NAME=a,b,...` items of a repeatable flag, each element read by `item`.
fn parse_named_lists<T>(
    items: &[String],
    flag: &str,
    form: &str,
    rule: &str,
    item: impl Fn(&str) -> Option<T>,
) -> Result<BTreeMap<String, Vec<T>>> {
    let mut out = BTreeMap::new();
    for it in items {
        let (name, list) = it.split_once('=').with_context(|| format!("{flag} `{it}`: expected {form}"))?;
        let list = list
            .split(',')
            .map(|x| item(x.trim()))
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("{flag} `{it}`: {rule}"))?;
        if out.insert(name.to_string(), list).is_some() {
            bail!("{flag} `{name}` is given twice; give each input once");
        }
    }
    Ok(out)
}
