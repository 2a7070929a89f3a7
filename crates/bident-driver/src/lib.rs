//! bident-driver: bident as a library. It owns the one list of stages in order
//! ([`Driver::pipeline`]), the artifact folder ([`Folder`]), refine, fallback re-planning, the
//! profile cache, backend installation, the registry of swappable passes ([`Passes`]), and a
//! folder's plan written into its source model for viewers ([`annotate()`]).
//!
//! Callers (xtask's commands, the eval, the tests, a user's own program) give typed options and
//! a callback for [`Event`]s; the driver does no printing. A pass from outside bident implements
//! [`bident_search::MappingSearch`] or [`bident_partition::PartitionPass`] and is named to
//! [`Passes`]; every plan it makes is built and checked by bident's evaluator.
//!
//! Must not: parse command lines or print.

mod annotate;
mod concurrent;
mod folder;
mod imports;
mod passes;
mod refine;
mod serving;
mod soc;
mod stages;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bident_backend::fault::FaultSpec;
use bident_backend::soc::Precisions;
use bident_profile::CostTable;
use bident_runtime::RunConfig;
use bident_search::{Constraints, Mode, Objective, Plan};

pub use annotate::{Annotation, annotate};
pub use concurrent::{ConcurrentOutcome, SecondModel, pair_plan};
pub use folder::{Folder, Lock, Planned};
pub use imports::read_plan;
pub use passes::Passes;
pub use refine::{Refined, Remeasure};
pub use serving::{Served, TablePlanner};
pub use soc::{BackendName, Soc, load_backends};
pub use stages::{Outcome, Prepared, RunContext, StageSeconds, independent_pus};

/// Where a model comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// A file on disk (ONNX, or an OpenVINO IR `.xml`).
    File(PathBuf),
    /// A model the project builds itself (`bident_zoo`), written under the target folder first.
    Zoo(String),
}

impl Model {
    /// `zoo:NAME` or a path.
    pub fn parse(spec: &str) -> Model {
        match spec.strip_prefix("zoo:") {
            Some(name) => Model::Zoo(name.to_string()),
            None => Model::File(PathBuf::from(spec)),
        }
    }
}

/// How ONNX nodes are grouped into fused ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FusionSource {
    /// bident's fusion rules.
    #[default]
    Rules,
    /// As the backend fuses the whole model on the first PU of the `local` SoC.
    Backend,
}

/// The import stage's options.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSpec {
    pub model: Model,
    /// Pinned input shapes.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Pinned input values.
    pub input_values: BTreeMap<String, Vec<f64>>,
    pub fusion: FusionSource,
}

impl ImportSpec {
    pub fn new(model: Model) -> Self {
        Self { model, input_shapes: BTreeMap::new(), input_values: BTreeMap::new(), fusion: FusionSource::Rules }
    }
}

/// The SoC to plan for: a preset (measured or virtual) or a spec file, over these backends.
#[derive(Clone, Debug, PartialEq)]
pub struct SocChoice {
    pub spec: String,
    /// The backends PUs may use, the first being the default one.
    pub backends: Vec<BackendName>,
    pub precisions: Precisions,
}

impl SocChoice {
    /// A preset or file with both backends and default precisions.
    pub fn named(spec: &str) -> Self {
        Self {
            spec: spec.to_string(),
            backends: vec![BackendName::OpenVino, BackendName::OnnxRuntime],
            precisions: Precisions::Default,
        }
    }
}

/// How the profile stage measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measuring {
    /// Timed runs per (op, PU): the cap when adaptive.
    pub runs: u32,
    /// Stop once an op's median is known within 3% (95% confidence).
    pub adaptive: bool,
    /// Reuse the profile cache (under the target folder).
    pub cache: bool,
}

impl Default for Measuring {
    fn default() -> Self {
        Self { runs: bident_profile::ProfileConfig::default().runs, adaptive: true, cache: true }
    }
}

/// What the search optimises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Goal {
    #[default]
    Latency,
    Energy,
    /// The latency/energy front; the fastest point becomes the plan.
    Pareto,
}

impl Goal {
    fn objective(self) -> Objective {
        match self {
            Goal::Energy => Objective::Energy,
            Goal::Latency | Goal::Pareto => Objective::Latency,
        }
    }
}

/// The plan's options: what is optimised, which passes run, what constrains the placement.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOptions {
    pub goal: Goal,
    pub mode: Mode,
    pub constraints: Constraints,
    /// The partition pass, by name in [`Passes`].
    pub partition: String,
    /// The mapping search, by name in [`Passes`].
    pub search: String,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            goal: Goal::Latency,
            mode: Mode::Sequential,
            constraints: Constraints::default(),
            partition: "phases".into(),
            search: "bident".into(),
        }
    }
}

impl PlanOptions {
    pub fn search_config(&self) -> bident_search::SearchConfig {
        bident_search::SearchConfig {
            objective: self.goal.objective(),
            mode: self.mode,
            constraints: self.constraints.clone(),
            ..Default::default()
        }
    }
}

/// The run stage's options.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub config: RunConfig,
    /// When a PU fails, plan again without it and run that plan.
    pub fallback: bool,
    /// Make one PU fail on purpose.
    pub fault: Option<FaultSpec>,
}

/// Everything one pipeline run needs.
#[derive(Clone, Debug)]
pub struct Options {
    pub import: ImportSpec,
    /// The artifact folder (default `<target>/bident/<model name>/`).
    pub out: Option<PathBuf>,
    pub soc: SocChoice,
    pub measuring: Measuring,
    pub plan: PlanOptions,
    pub run: RunOptions,
}

impl Options {
    /// The defaults for `model` on the SoC `soc`.
    pub fn new(model: Model, soc: &str) -> Self {
        Self {
            import: ImportSpec::new(model),
            out: None,
            soc: SocChoice::named(soc),
            measuring: Measuring::default(),
            plan: PlanOptions::default(),
            run: RunOptions::default(),
        }
    }
}

/// A pipeline stage, as events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Import,
    Fusion,
    Partition,
    Profile,
    Contention,
    Search,
    Refine,
    Run,
    Concurrent,
    Install,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Import => "import",
            Stage::Fusion => "fusion",
            Stage::Partition => "partition",
            Stage::Profile => "profile",
            Stage::Contention => "contention",
            Stage::Search => "search",
            Stage::Refine => "refine",
            Stage::Run => "run",
            Stage::Concurrent => "concurrent",
            Stage::Install => "install",
        }
    }
}

/// What the driver reports while it works.
pub enum Event<'a> {
    /// One line of what a stage did or decided.
    Note { stage: Stage, text: String },
    /// Long work under way: `done` of `total` steps of `what`.
    Progress { stage: Stage, what: String, done: usize, total: usize },
    /// A cost table was measured or simulated, under this configuration.
    Profiled { table: &'a CostTable, cfg: &'a bident_profile::ProfileConfig },
    /// The SoC's contention matrix was measured with these probes.
    Contention { soc: &'a bident_backend::SocSpec, contention: &'a bident_profile::Contention, probes: &'a [String] },
    /// The latency/energy front, fastest first.
    Front(&'a [Plan]),
    /// A plan was searched, in this many milliseconds.
    Searched { plan: &'a Plan, ms: f64 },
}

/// The driver's errors: each stage's, or an option that cannot be honoured. Stage errors are
/// boxed: they are large, and every driver call returns this type.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Ir(Box<bident_ir::IrError>),
    #[error(transparent)]
    Partition(Box<bident_partition::PartitionError>),
    #[error(transparent)]
    Profile(Box<bident_profile::ProfileError>),
    #[error(transparent)]
    Search(Box<bident_search::SearchError>),
    #[error(transparent)]
    Runtime(Box<bident_runtime::RuntimeError>),
    #[error(transparent)]
    Backend(Box<bident_backend::BackendError>),
    #[error(transparent)]
    Soc(Box<bident_backend::SocError>),
    #[error(transparent)]
    Artifact(Box<bident_artifact::ArtifactError>),
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An option, or a combination of them, that cannot be honoured.
    #[error("{0}")]
    Invalid(String),
    /// `source`, while doing `what`.
    #[error("{what}")]
    In {
        what: String,
        #[source]
        source: Box<DriverError>,
    },
}

macro_rules! boxed_from {
    ($($variant:ident: $ty:ty),* $(,)?) => {$(
        impl From<$ty> for DriverError {
            fn from(e: $ty) -> Self {
                DriverError::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    Ir: bident_ir::IrError,
    Partition: bident_partition::PartitionError,
    Profile: bident_profile::ProfileError,
    Search: bident_search::SearchError,
    Runtime: bident_runtime::RuntimeError,
    Backend: bident_backend::BackendError,
    Soc: bident_backend::SocError,
    Artifact: bident_artifact::ArtifactError,
);

impl DriverError {
    /// This error, said to have happened while doing `what`.
    pub fn context(self, what: impl Into<String>) -> Self {
        DriverError::In { what: what.into(), source: Box::new(self) }
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DriverError + '_ {
        move |source| DriverError::Io { path: path.to_path_buf(), source }
    }
}

pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// bident, set up: where it keeps its installs, caches and default outputs, its passes, and
/// who hears its events.
pub struct Driver<'a> {
    /// Cargo's target folder: the backends' installs, `bident/cache`, `bident/zoo` and the
    /// default artifact folders live under it.
    pub target: PathBuf,
    pub passes: Passes,
    events: &'a dyn Fn(Event<'_>),
}

impl<'a> Driver<'a> {
    pub fn new(target: impl Into<PathBuf>, passes: Passes, events: &'a dyn Fn(Event<'_>)) -> Self {
        Self { target: target.into(), passes, events }
    }

    fn note(&self, stage: Stage, text: impl Into<String>) {
        (self.events)(Event::Note { stage, text: text.into() });
    }

    fn emit(&self, e: Event<'_>) {
        (self.events)(e);
    }

    /// The profile cache, unless `m` turns it off.
    fn cache(&self, m: Measuring) -> Option<bident_profile::cache::CostCache> {
        m.cache.then(|| bident_profile::cache::CostCache::new(self.target.join("bident/cache/costs")))
    }

    /// The model file `spec` names, with the name its artifacts go under (zoo models are
    /// written out first, by renaming a complete file into place).
    pub fn model_path(&self, spec: &Model) -> Result<(PathBuf, String)> {
        match spec {
            Model::Zoo(name) => {
                let t0 = std::time::Instant::now();
                let bytes = bident_zoo::build_bytes(name, 0)
                    .ok_or_else(|| DriverError::Invalid(format!("no zoo model `{name}` (try `cargo xtask zoo`)")))?;
                let path = self.target.join("bident/zoo").join(format!("{name}.onnx"));
                folder::write_replacing(&path, &bytes)?;
                // said of the large ones only (the paper-size models take seconds), by size: a
                // line that came and went with the machine's load would change the output
                let secs = t0.elapsed().as_secs_f64();
                if bytes.len() >= 10_000_000 {
                    self.note(
                        Stage::Import,
                        format!("zoo model `{name}` built ({:.1} MB) in {secs:.2} s", bytes.len() as f64 / 1e6),
                    );
                }
                Ok((path, name.clone()))
            }
            Model::File(path) => {
                // a folder's name: `...onnx`'s stem is `..`
                let stem = folder_name(&path.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default());
                Ok((path.clone(), stem))
            }
        }
    }

    /// The artifact folder of a model named `name` when no `--out` is given: always one folder
    /// inside `target/bident/` ([`folder_name`]).
    pub fn default_out(&self, name: &str) -> PathBuf {
        self.target.join("bident").join(folder_name(name))
    }
}

/// A name made safe as one folder's name: every character but ASCII letters, digits, `_`, `-`,
/// `+` and `.` becomes `_`, and leading dots go (so `..`, `.` and `...onnx`'s stem `..` name no
/// folder above); `model` where nothing is left.
pub fn folder_name(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "_-+.".contains(c) { c } else { '_' }).collect();
    let safe = safe.trim_start_matches('.');
    if safe.is_empty() { "model".into() } else { safe.chars().take(128).collect() }
}
