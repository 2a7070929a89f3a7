//! The pipeline and its stage subcommands.
//!
//! Stage order lives in [`run_stages`]; each stage reads its inputs, runs the crate's entry
//! function, runs the verifier, and writes its artifact (`.bin` + `.yaml`) into the output
//! folder. A failing stage removes its own stale artifact first, so nothing that looks valid is
//! left behind.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bident_artifact::{self as artifact, Artifact, ContentHash, Stamped};
use bident_backend::fault::{FaultSpec, FaultyBackend};
use bident_backend::soc::Precisions;
use bident_backend::{Backend, Backends, SocSpec, onnxruntime::OnnxRuntime, openvino::OpenVino};
use bident_ir::{FusedGraph, OpId};
use bident_partition::PhasedGraph;
use bident_profile::simulate::VirtualSoc;
use bident_profile::{CostTable, ProfileConfig};
use bident_runtime::{Grouping, RunConfig, RunReport};
use bident_search::{Mode, Objective, Plan, SearchConfig};
use clap::Args;

const FUSED: &str = "fused-graph.bin";
const PHASED: &str = "phased-graph.bin";
pub(crate) const COSTS: &str = "cost-table.bin";
const PLAN: &str = "plan.bin";
const REPORT: &str = "run-report.bin";

#[derive(Args, Clone)]
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
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// How ONNX nodes are grouped into fused ops: `rules` (bident's fusion rules) or `backend`
    /// (as the backend fuses the whole model on the first PU of the `local` SoC, read from its
    /// profile; the artifact records how far the two agree).
    #[arg(long, default_value = "rules", value_parser = ["rules", "backend"])]
    pub fusion: String,
}

#[derive(Args, Clone)]
pub struct DirArgs {
    /// Folder holding the previous stage's artifacts.
    pub dir: PathBuf,
}

#[derive(Args, Clone)]
pub struct SocArgs {
    /// SoC: a preset, `local` (every device of every backend, whole, in f32 and at its default
    /// precision), `cores` (one pinned single-threaded PU per CPU core and backend), `all`
    /// (both) or `lunar-lake` (virtual: the paper's CPU + GPU + NPU as an analytic model,
    /// every figure simulated, nothing runs), or a spec file `FILE.toml` (`cargo xtask soc
    /// NAME` prints a preset as one). PUs that share cores never run at once.
    #[arg(long, default_value = "local")]
    pub soc: String,
    /// The backends PUs may use, the first being the default one (presets name its PUs
    /// without a tag; `CPU.ort` is ONNX Runtime's CPU beside OpenVINO's `CPU`).
    #[arg(long, value_delimiter = ',', default_value = "openvino,onnxruntime", value_parser = ["openvino", "onnxruntime"])]
    pub backends: Vec<String>,
    /// `default`: presets offer each CPU at its default precision beside exact f32 (`CPU.bf16`
    /// where OpenVINO computes in bf16); `exact`: f32 only (a spec file's PUs must ask for f32).
    #[arg(long, default_value = "default", value_parser = ["default", "exact"])]
    pub precision: String,
}

impl SocArgs {
    /// `--soc NAME` with the default backends and precisions.
    pub fn named(soc: &str) -> Self {
        Self {
            soc: soc.to_string(),
            backends: vec!["openvino".into(), "onnxruntime".into()],
            precision: "default".into(),
        }
    }

    fn precisions(&self) -> Precisions {
        if self.precision == "exact" { Precisions::Exact } else { Precisions::Default }
    }
}

#[derive(Args, Clone)]
pub struct ProfileArgs {
    pub dir: PathBuf,
    #[command(flatten)]
    pub soc: SocArgs,
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

/// What the search optimises and may use.
#[derive(Args, Clone)]
pub struct PlanArgs {
    /// latency, energy, or pareto (the latency/energy front: every point is printed and written
    /// to pareto.yaml, the fastest becomes the plan)
    #[arg(long, default_value = "latency", value_parser = ["latency", "energy", "pareto"])]
    pub objective: String,
    /// sequential (one op at a time) or parallel (the branches of a phase at once on different
    /// PUs, with contention)
    #[arg(long, default_value = "sequential", value_parser = ["sequential", "parallel"])]
    pub mode: String,
    /// Run an op (index or name) on a PU (repeatable).
    #[arg(long, value_name = "OP=PU")]
    pub pin: Vec<String>,
    /// Keep an op off a PU (repeatable).
    #[arg(long, value_name = "OP=PU")]
    pub forbid: Vec<String>,
    /// Use no op on this PU (repeatable).
    #[arg(long, value_name = "PU")]
    pub exclude_pu: Vec<String>,
}

impl PlanArgs {
    fn pareto(&self) -> bool {
        self.objective == "pareto"
    }

    fn config(&self) -> Result<SearchConfig> {
        let pairs = |flag: &str, items: &[String]| -> Result<Vec<(String, String)>> {
            items
                .iter()
                .map(|i| {
                    let (op, pu) = i.split_once('=').with_context(|| format!("--{flag} {i}: expected OP=PU"))?;
                    Ok((op.to_string(), pu.to_string()))
                })
                .collect()
        };
        Ok(SearchConfig {
            objective: if self.objective == "energy" { Objective::Energy } else { Objective::Latency },
            mode: if self.mode == "parallel" { Mode::Parallel } else { Mode::Sequential },
            constraints: bident_search::Constraints {
                pin: pairs("pin", &self.pin)?,
                forbid: pairs("forbid", &self.forbid)?,
                exclude: self.exclude_pu.clone(),
            },
        })
    }
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
pub struct RunOpts {
    /// Measured inferences (after warm-up).
    #[arg(long, default_value_t = RunConfig::default().runs, value_parser = at_least_one())]
    pub runs: u32,
    /// When a PU fails to compile or run an op, plan again without that PU and run that plan.
    #[arg(long)]
    pub fallback: bool,
    /// Make one PU fail on purpose: PU:compile, PU:run[@N] (after N good runs) or PU:hang[@N].
    #[arg(long, value_name = "PU:FAULT")]
    pub inject_fault: Option<FaultSpec>,
    /// Seconds an inference may go without any op finishing before it is abandoned.
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
    fn config(&self) -> RunConfig {
        RunConfig {
            runs: self.runs,
            op_timeout: std::time::Duration::from_secs(self.timeout),
            grouping: if self.op_by_op { Grouping::PerOp } else { Grouping::Merged },
            whole_on: self.measure_whole.clone(),
            ..Default::default()
        }
    }

    /// Options that name a PU must name one of the SoC's: an injected fault on a PU the SoC
    /// does not have would inject nothing.
    fn check(&self, soc: &SocSpec) -> Result<()> {
        let known = || soc.pus.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ");
        if let Some(f) = &self.inject_fault
            && soc.pu(&f.pu).is_none()
        {
            bail!("--inject-fault: SoC `{}` has no PU `{}` (it has {})", soc.name, f.pu, known());
        }
        if let Some(pu) = self.measure_whole.iter().find(|pu| soc.pu(pu).is_none()) {
            bail!("--measure-whole: SoC `{}` has no PU `{pu}` (it has {})", soc.name, known());
        }
        Ok(())
    }

    /// The backend the run uses: `be`, with the injected fault if any.
    fn backend(&self, be: Arc<Backends>) -> Arc<dyn Backend> {
        match &self.inject_fault {
            Some(f) => {
                eprintln!("run: injecting a fault: PU `{}` {:?}", f.pu, f.fault);
                Arc::new(FaultyBackend::new(be, f.clone()))
            }
            None => be,
        }
    }
}

#[derive(Args)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub import: ImportArgs,
    #[command(flatten)]
    pub soc: SocArgs,
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Timed runs per (op, PU): the cap (the paper's 200) unless --fixed-runs.
    #[arg(long, default_value_t = ProfileConfig::default().runs, value_parser = at_least_one())]
    pub profile_runs: u32,
    /// Time every (op, PU) exactly --profile-runs times (no adaptive stop).
    #[arg(long)]
    pub fixed_runs: bool,
    /// Measure every (op, PU) again instead of reusing the profile cache (target/bident/cache).
    #[arg(long)]
    pub no_cache: bool,
    #[command(flatten)]
    pub run: RunOpts,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// A second model to run at the same time (concurrent search over both streams; the plan
    /// goes to --out, default target/bident/pairs/<A>+<B>/, each model's stages to
    /// <out>/<model>/, default target/bident/<model>/).
    #[arg(long, value_name = "MODEL2")]
    pub with: Option<String>,
    /// With --with: pin an input's shape of the second model, NAME=D,D,... (repeatable;
    /// --input-shape is the first model's).
    #[arg(long = "with-input-shape", value_name = "NAME=D,D,...", requires = "with")]
    pub with_input_shape: Vec<String>,
    /// With --with: pin an input's value of the second model, NAME=V,V,... (repeatable).
    #[arg(long = "with-input-value", value_name = "NAME=V,V,...", requires = "with")]
    pub with_input_value: Vec<String>,
    /// With --with: advance both models in lockstep (the paper's aligned mode, for the same
    /// model twice) instead of the joint (i, j) search.
    #[arg(long, requires = "with")]
    pub aligned: bool,
}

/// Counts that mean "how many times": zero would silently do something else.
pub fn at_least_one() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..)
}

/// Cargo's target folder (where the OpenVINO runtime is installed).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| crate::root().join("target"))
}

/// The OpenVINO backend, installing the pinned runtime first if needed.
pub fn backend() -> Result<Arc<OpenVino>> {
    let lib = bident_backend::openvino::install::ensure(&target_dir(), &mut |line| eprintln!("{line}"))?;
    Ok(Arc::new(OpenVino::load(&lib)?))
}

/// ONNX Runtime, installing its pinned runtime first if needed.
pub fn onnxruntime() -> Result<Arc<OnnxRuntime>> {
    let lib = bident_backend::onnxruntime::install::ensure(&target_dir(), &mut |line| eprintln!("{line}"))?;
    Ok(Arc::new(OnnxRuntime::load(&lib)?))
}

/// The backends `named` (`openvino`, `onnxruntime`) behind one dispatcher, the first being the
/// default one, each installed first if needed.
pub fn backends<'a>(named: impl IntoIterator<Item = &'a str>) -> Result<Arc<Backends>> {
    let mut members: Vec<Arc<dyn Backend>> = vec![];
    for name in named {
        members.push(backend_named(name)?);
    }
    if members.is_empty() {
        bail!("--backends names no backend");
    }
    Ok(Arc::new(Backends::new(members)))
}

/// One backend alone, by name (`openvino` or `onnxruntime`).
pub fn backend_named(name: &str) -> Result<Arc<dyn Backend>> {
    Ok(match name {
        "openvino" => backend()?,
        "onnxruntime" => onnxruntime()?,
        other => bail!("no backend `{other}` (this build has: {})", bident_backend::built_in().join(", ")),
    })
}

/// A SoC to plan for: real PUs that are measured (and run the plan), or a virtual SoC whose
/// costs are simulated (nothing runs, no backend needed).
pub enum Soc {
    Measured(SocSpec, Arc<Backends>),
    Virtual(VirtualSoc),
}

impl Soc {
    pub fn pu_names(&self) -> Vec<&str> {
        let spec = match self {
            Soc::Measured(s, _) => s,
            Soc::Virtual(v) => &v.spec,
        };
        spec.pus.iter().map(|p| p.name.as_str()).collect()
    }

    /// `--soc`: a virtual preset, a measured preset or a spec file, over `--backends` and
    /// `--precision`.
    pub fn load(a: &SocArgs) -> Result<Soc> {
        let spec = a.soc.as_str();
        if let Some(v) = VirtualSoc::preset(spec) {
            return Ok(Soc::Virtual(v));
        }
        let mut named: Vec<&str> = vec![];
        for b in &a.backends {
            if named.contains(&b.as_str()) {
                bail!("--backends names `{b}` twice");
            }
            named.push(b);
        }
        let be = backends(named)?;
        match SocSpec::load(spec, be.as_ref(), a.precisions()) {
            Ok(soc) => Ok(Soc::Measured(soc, be)),
            Err(bident_backend::SocError::UnknownPreset(p)) => bail!(
                "unknown SoC `{p}` (measured: {}; virtual: {}; or a spec file .toml)",
                bident_backend::soc::PRESETS.join(", "),
                bident_profile::simulate::PRESETS.join(", ")
            ),
            Err(e) => Err(e.into()),
        }
    }
}

fn write<A: Artifact>(dir: &Path, file: &str, value: &A, inputs: ContentHash) -> Result<ContentHash> {
    let h = artifact::write(&dir.join(file), value, inputs)?;
    Ok(h.payload_hash)
}

fn read<A: Artifact>(dir: &Path, file: &str) -> Result<Stamped<A>> {
    let p = dir.join(file);
    if !p.exists() {
        bail!("{} does not exist: run the stage that writes it first", p.display());
    }
    Ok(artifact::read(&p)?)
}

/// Resolve the MODEL argument to a file on disk (zoo models are written out first).
fn model_path(import: &ImportArgs) -> Result<(PathBuf, String)> {
    let spec = import.model.clone().unwrap_or_else(|| "zoo:example".into());
    if let Some(name) = spec.strip_prefix("zoo:") {
        let bytes = bident_zoo::build_bytes(name, 0)
            .with_context(|| format!("no zoo model `{name}` (try `cargo xtask zoo`)"))?;
        let dir = crate::root().join("target/bident/zoo");
        let path = dir.join(format!("{name}.onnx"));
        write_replacing(&path, &bytes)?;
        return Ok((path, name.to_string()));
    }
    let path = PathBuf::from(&spec);
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    Ok((path, stem))
}

/// Write a file by renaming a complete temporary one over it: a reader running at the same
/// time (two pipelines on one zoo model) sees the old file or the new one, never half of one.
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| tmp.display().to_string())?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())
}

/// An exclusive lock on an output folder, held while a command writes there: two runs on one
/// folder would leave one model's fused graph beside another's plan.
pub struct OutLock(#[allow(dead_code)] std::fs::File);

pub fn lock_out(dir: &Path) -> Result<OutLock> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    lock_existing(dir)
}

/// [`lock_out`] for a stage that reads the folder's artifacts: the folder must exist.
fn lock_existing(dir: &Path) -> Result<OutLock> {
    if !dir.is_dir() {
        bail!("{}: no such folder: run `cargo xtask import MODEL --out {}` first", dir.display(), dir.display());
    }
    let path = dir.join(".lock");
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| path.display().to_string())?;
    match f.try_lock() {
        Ok(()) => Ok(OutLock(f)),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "{}: another bident command is writing this folder; wait for it to finish or give another --out",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(anyhow::Error::new(e).context(path.display().to_string())),
    }
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

fn out_dir(import: &ImportArgs, name: &str) -> PathBuf {
    import.out.clone().unwrap_or_else(|| crate::root().join("target/bident").join(name))
}

fn clear(dir: &Path, files: &[&str]) -> Result<()> {
    for f in files {
        artifact::remove(&dir.join(f))?;
    }
    Ok(())
}

/// The import options the flags say (checked before anything is written).
fn import_options(a: &ImportArgs) -> Result<bident_ir::ImportOptions> {
    Ok(bident_ir::ImportOptions {
        input_shapes: parse_shapes(&a.input_shape)?,
        input_literals: parse_values(&a.input_value)?,
        ..Default::default()
    })
}

/// Stage 1, as a command: lock the output folder, import.
pub fn import_cmd(a: ImportArgs) -> Result<(PathBuf, FusedGraph, ContentHash)> {
    let (path, name) = model_path(&a)?;
    let dir = out_dir(&a, &name);
    let opts = import_options(&a)?;
    let _lock = lock_out(&dir)?;
    let (g, h) = import_stage(&a, &path, &dir, opts)?;
    Ok((dir, g, h))
}

/// Stage 1.
fn import_stage(
    a: &ImportArgs,
    path: &Path,
    dir: &Path,
    mut opts: bident_ir::ImportOptions,
) -> Result<(FusedGraph, ContentHash)> {
    clear(dir, &[FUSED, PHASED, COSTS, PLAN, REPORT])?;
    let g = if a.fusion == "backend" {
        import_backend_fused(path, &mut opts, backend()?.as_ref())?
    } else {
        bident_ir::import(path, &opts)?
    };
    bident_ir::verify(&g)?;
    let inputs = ContentHash::of_parts(&[&g.source.hash.0, &opts.hash_bytes()]);
    let h = write(dir, FUSED, &g, inputs)?;
    eprintln!(
        "import: {} -> {} fused ops by {} ({} ONNX nodes, {} folded) -> {}",
        path.display(),
        g.ops.len(),
        g.fusion.source,
        g.source.nodes,
        g.source.folded_nodes,
        dir.join(FUSED).display()
    );
    if let Some(b) = &g.fusion.backend {
        eprintln!(
            "fusion: backend on {} gives {} ops, rules {}; {} groups identical (agreement {:.2}){}",
            b.pu,
            b.ops,
            g.fusion.rule_ops,
            b.identical,
            b.agreement,
            if b.split > 0 { format!("; {} non-convex groups split", b.split) } else { String::new() }
        );
    }
    Ok((g, h))
}

/// Import with backend-true fusion: import, profile the lowered model whole on the first PU of
/// the `local` SoC, import again grouped as the backend fused it (`opts.fusion` is set).
pub fn import_backend_fused(path: &Path, opts: &mut bident_ir::ImportOptions, be: &dyn Backend) -> Result<FusedGraph> {
    let g = bident_ir::import(path, opts)?;
    let pu = SocSpec::preset("local", be)?.pus.remove(0);
    let layers = bident_profile::backend_layers(be, &g, &pu)?;
    opts.fusion = bident_ir::Fusion::Backend { pu: pu.name.clone(), layers };
    Ok(bident_ir::import(path, opts)?)
}

fn read_fused(dir: &Path) -> Result<(FusedGraph, ContentHash)> {
    let s = read::<FusedGraph>(dir, FUSED)?;
    bident_ir::verify(&s.value)?;
    Ok((s.value, s.header.payload_hash))
}

/// Stage 2.
fn partition_stage(dir: &Path, g: &FusedGraph, gh: ContentHash) -> Result<(PhasedGraph, ContentHash)> {
    clear(dir, &[PHASED, PLAN, REPORT])?;
    let p = bident_partition::partition(g)?;
    let h = write(dir, PHASED, &p, gh)?;
    eprintln!("partition: {} phases, {} with parallel branches", p.phases.len(), p.parallel_phases());
    Ok((p, h))
}

pub fn partition_cmd(a: DirArgs) -> Result<()> {
    let _lock = lock_existing(&a.dir)?;
    let (g, gh) = read_fused(&a.dir)?;
    partition_stage(&a.dir, &g, gh).map(|_| ())
}

/// Stage 3.
/// How the profile stage measures: the run cap, the adaptive stop, the cache.
#[derive(Clone, Copy)]
pub struct Measuring {
    pub runs: u32,
    pub fixed_runs: bool,
    pub no_cache: bool,
}

/// `pairs`: neighbours in the execution order to measure compiled together as well (the runtime merges
/// them when a plan puts both on one PU).
fn profile_stage(
    dir: &Path,
    g: &FusedGraph,
    gh: ContentHash,
    soc: &Soc,
    m: Measuring,
    pairs: Vec<(OpId, OpId)>,
) -> Result<(CostTable, ContentHash)> {
    clear(dir, &[COSTS, PLAN, REPORT])?;
    let (soc, be) = match soc {
        Soc::Measured(spec, be) => (spec, be),
        Soc::Virtual(v) => {
            let table = bident_profile::simulate::simulate(g, v)?;
            let h = write(dir, COSTS, &table, bident_profile::simulate::input_hash(gh, v))?;
            eprintln!(
                "profile: {} ops x {} PUs SIMULATED on virtual SoC {} (analytic model; nothing was measured)",
                table.ops.len(),
                v.spec.pus.len(),
                v.spec.name
            );
            print_profile_summary(&table);
            return Ok((table, h));
        }
    };
    let be = be.as_ref();
    let cfg = ProfileConfig {
        runs: m.runs,
        adaptive: !m.fixed_runs,
        segments: pairs.into_iter().map(|(a, b)| vec![a, b]).collect(),
        ..Default::default()
    };
    let cache = (!m.no_cache).then(|| bident_profile::cache::CostCache::new(target_dir().join("bident/cache/costs")));
    let tty = std::io::stderr().is_terminal();
    let mut last = std::time::Instant::now();
    let t0 = std::time::Instant::now();
    // ETA within the current phase of the current PU, from its own pace so far
    let mut phase_start = (String::new(), std::time::Instant::now());
    let table = bident_profile::profile(g, soc, be, &cfg, cache.as_ref(), &mut |p| {
        if p.phase == "cached" {
            eprintln!("profile: {}: {} of {} ops from the profile cache", p.pu, p.done, p.total);
            return;
        }
        let key = format!("{} {}", p.pu, p.phase);
        if phase_start.0 != key {
            phase_start = (key, std::time::Instant::now());
        }
        let spent = phase_start.1.elapsed().as_secs_f64();
        let eta = if p.done > 0 && p.done < p.total {
            format!(", at most {:.0} s left", spent / p.done as f64 * (p.total - p.done) as f64)
        } else {
            String::new()
        };
        let width = 20;
        let filled = (p.done * width).checked_div(p.total).unwrap_or(width).min(width);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width - filled));
        let line = format!("profile: {} {} [{bar}] {}/{}{eta}", p.pu, p.phase, p.done, p.total);
        if tty {
            eprint!("\r{line:<90}");
        } else if last.elapsed().as_secs() >= 5 {
            eprintln!("{line}");
            last = std::time::Instant::now();
        }
    })?;
    if tty {
        eprintln!();
    }
    let mut table = table;
    if independent_pus(soc) {
        table.contention = Some(measure_contention(soc, be)?);
    }
    let h = write(dir, COSTS, &table, bident_profile::input_hash(gh, soc, &cfg))?;
    let failed: usize = table.ops.iter().map(|o| o.failures.len()).sum();
    let entries: Vec<u32> = table.ops.iter().flat_map(|o| o.per_pu.iter().flatten().map(|c| c.runs)).collect();
    let mean_runs = entries.iter().sum::<u32>() as f64 / entries.len().max(1) as f64;
    eprintln!(
        "profile: {} ops x {} PUs in {:.1} s on {} ({}), {failed} (op, PU) pairs without an entry; \
         {mean_runs:.0} timed runs per entry on average ({})",
        table.ops.len(),
        soc.pus.len(),
        t0.elapsed().as_secs_f64(),
        table.measured_on,
        if table.simulated { "simulated" } else { "measured" },
        if cfg.adaptive {
            format!("stopped within {:.0}% at 95% confidence, cap {}", cfg.rel_ci * 100.0, cfg.runs)
        } else {
            "fixed".to_string()
        }
    );
    print_profile_summary(&table);
    print_merged(&table);
    print_stop_check(&table, &cfg);
    Ok((table, h))
}

/// What compiling neighbours together saves, measured.
fn print_merged(t: &CostTable) {
    if t.segments.is_empty() {
        return;
    }
    for (j, pu) in t.soc.pus.iter().map(|p| &p.name).enumerate() {
        let io = if t.io_every_call.get(j) == Some(&true) { 1.0 } else { 0.0 };
        let mut saved: Vec<f64> = t
            .segments
            .iter()
            .filter_map(|m| {
                let [first, second] = m.ops[..] else { return None };
                let (a, b, ab) = (t.cost(first, j)?, t.cost(second, j)?, m.per_pu[j].as_ref()?);
                let call = |c: &bident_profile::Cost| c.weight_us() + io * (c.h2d_us + c.d2h_us);
                Some(call(a) + call(b) - call(ab))
            })
            .collect();
        let total: f64 = saved.iter().sum();
        eprintln!(
            "profile: {pu}: {} pairs of neighbours compiled together save {:.1} µs each (median; {total:.0} µs in all)",
            saved.len(),
            bident_profile::quantile(&mut saved, 0.5)
        );
    }
}

/// Representative ops for the contention co-runs: compute-bound (MatMul, Conv) and
/// memory-bound (a 2 MB-per-operand Add), in f32 like the measured PUs.
const CONTENTION_PROBES: &[(&str, u64)] = &[("matmul", 256), ("conv", 32), ("add", 512)];

/// Whether some two PUs of `soc` may run at once (so their contention is worth measuring).
pub(crate) fn independent_pus(soc: &SocSpec) -> bool {
    let x = soc.exclusive();
    (0..x.len()).any(|i| (0..x.len()).any(|j| i != j && !x[i][j]))
}

/// The measured SF matrix of `soc` (paper 3.2.2), printed as a table; `excl` marks PUs that
/// share hardware and never run at once.
pub(crate) fn measure_contention(soc: &SocSpec, be: &dyn Backend) -> Result<bident_profile::Contention> {
    let probes = CONTENTION_PROBES
        .iter()
        .map(|&(op, n)| {
            let model = bident_zoo::probe(op, bident_tensor::DType::F32, n).context("contention probe")?;
            Ok(bident_profile::contention::Probe {
                name: format!("{op}-f32-{n}"),
                onnx: prost::Message::encode_to_vec(&model),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let t0 = std::time::Instant::now();
    let c = bident_profile::contention::measure(be, soc, &probes, Default::default())?;
    eprintln!(
        "contention: SF(row PU | column PU busy), measured in {:.1} s with co-runs of {}:",
        t0.elapsed().as_secs_f64(),
        probes.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    eprintln!("  {:>25} {}", "", soc.pus.iter().map(|p| format!("{:>8}", p.name)).collect::<String>());
    let exclusive = soc.exclusive();
    let row = |label: &str, pu: &str, i: usize, sf: &[f64]| {
        let cells: String = sf
            .iter()
            .enumerate()
            .map(|(j, v)| if exclusive[i][j] { format!("{:>8}", "excl") } else { format!("{v:>8.2}") })
            .collect();
        eprintln!("  {label:>16} {pu:>8} {cells}");
    };
    for (i, pu) in soc.pus.iter().enumerate() {
        row("median", &pu.name, i, &c.sf[i]);
        if let bident_profile::ContentionSource::Measured { by_probe, .. } = &c.source {
            for (probe, m) in probes.iter().zip(by_probe) {
                row(&probe.name, "", i, &m[i]);
            }
        }
    }
    Ok(c)
}

/// With `--fixed-runs`: how the adaptive stop would have done on the same runs.
fn print_stop_check(table: &CostTable, cfg: &ProfileConfig) {
    let checks: Vec<(u32, &bident_profile::StopCheck)> = table
        .ops
        .iter()
        .flat_map(|o| o.per_pu.iter().flatten())
        .filter_map(|c| c.stop_check.as_ref().map(|s| (c.runs, s)))
        .collect();
    if checks.is_empty() {
        return;
    }
    let (all, stopped): (u32, u32) = checks.iter().fold((0, 0), |(a, s), (runs, c)| (a + runs, s + c.runs));
    // the fixed protocol's cost includes the warm-up runs the adaptive one makes too
    let warm = cfg.warmup * checks.len() as u32;
    let mut dev: Vec<f64> = checks.iter().map(|(_, c)| (c.median_us / c.full_median_us - 1.0).abs() * 100.0).collect();
    dev.sort_by(f64::total_cmp);
    let within = dev.iter().filter(|&&d| d <= cfg.rel_ci * 100.0).count();
    eprintln!(
        "profile: adaptive-stop check on these {} entries: {stopped} of {all} timed runs ({:.1}x fewer; {:.1}x \
         counting the {} warm-up runs); its medians vs the full ones: median {:.2}%, p90 {:.2}%, max {:.2}% off, \
         {within} of {} within {:.0}%",
        checks.len(),
        all as f64 / stopped.max(1) as f64,
        (all + warm) as f64 / (stopped + warm).max(1) as f64,
        cfg.warmup,
        dev[dev.len() / 2],
        dev[(dev.len() - 1) * 9 / 10],
        dev[dev.len() - 1],
        dev.len(),
        cfg.rel_ci * 100.0
    );
}

/// The slowest ops (by their best PU) and, per PU, the ops it cannot run.
fn print_profile_summary(table: &CostTable) {
    let best = |o: &bident_profile::OpCosts| {
        o.per_pu.iter().flatten().map(bident_profile::Cost::weight_us).fold(f64::INFINITY, f64::min)
    };
    let mut slow: Vec<&bident_profile::OpCosts> = table.ops.iter().collect();
    slow.sort_by(|a, b| best(b).total_cmp(&best(a)));
    let total: f64 = table.ops.iter().map(best).sum();
    eprintln!("profile: slowest ops (dispatch + execution on their best PU, share of the sum {total:.0} us):");
    for o in slow.iter().take(5) {
        let w = best(o);
        eprintln!("  op {:>4} {:<40} {:>9.1} us {:>5.1}%", o.op, truncate(&o.kind, 40), w, 100.0 * w / total);
    }
    for (j, pu) in table.soc.pus.iter().enumerate() {
        let missing: Vec<&str> =
            table.ops.iter().filter(|o| o.per_pu.get(j).is_none_or(Option::is_none)).map(|o| o.kind.as_str()).collect();
        if !missing.is_empty() {
            eprintln!("profile: {} cannot run {} ops: {}", pu.name, missing.len(), truncate(&missing.join(", "), 100));
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

pub fn profile_cmd(a: ProfileArgs) -> Result<()> {
    let soc = Soc::load(&a.soc)?;
    let _lock = lock_existing(&a.dir)?;
    let (g, gh) = read_fused(&a.dir)?;
    let m = Measuring { runs: a.profile_runs, fixed_runs: a.fixed_runs, no_cache: a.no_cache };
    let phased = read::<PhasedGraph>(&a.dir, PHASED)?;
    bident_partition::verify(&g, &phased.value).with_context(|| a.dir.join(PHASED).display().to_string())?;
    profile_stage(&a.dir, &g, gh, &soc, m, phased.value.neighbours()).map(|_| ())
}

/// Stage 4.
/// The latency/energy front as a table, and as `pareto.yaml` beside the plan.
fn print_front(dir: &Path, front: &[Plan]) -> Result<()> {
    eprintln!("search: latency/energy front, {} points (latency weight, µs, µJ, ops per PU):", front.len());
    let mut yaml = String::from("# latency/energy front: plans minimising weight*latency + (1-weight)*energy\n");
    for p in front {
        let mix: Vec<String> = p.ops_per_pu.iter().map(|(pu, n)| format!("{n} on {pu}")).collect();
        let w = p.blend.unwrap_or(f64::NAN);
        eprintln!("  {w:>4.1} {:>12.1} {:>12.1}  {}", p.predicted_us, p.predicted_energy_uj, mix.join(", "));
        yaml.push_str(&format!(
            "- {{latency_weight: {w}, predicted_us: {}, predicted_energy_uj: {}, ops_per_pu: \"{}\"}}\n",
            p.predicted_us,
            p.predicted_energy_uj,
            mix.join(", ")
        ));
    }
    std::fs::write(dir.join("pareto.yaml"), yaml).with_context(|| dir.join("pareto.yaml").display().to_string())?;
    Ok(())
}

fn search_stage(
    dir: &Path,
    phased: (&PhasedGraph, ContentHash),
    costs: (&CostTable, ContentHash),
    cfg: &SearchConfig,
    pareto: bool,
) -> Result<(Plan, ContentHash)> {
    clear(dir, &[PLAN, REPORT])?;
    let t0 = std::time::Instant::now();
    let plan = if pareto {
        let front = bident_search::pareto(phased.0, costs.0, cfg)?;
        print_front(dir, &front)?;
        front.into_iter().next().context("an empty latency/energy front")?
    } else {
        bident_search::search(phased.0, costs.0, cfg)?
    };
    let took = t0.elapsed();
    let h = write(dir, PLAN, &plan, plan_inputs(phased.1, costs.1, cfg))?;
    eprintln!(
        "search: {} mode ({} schedule), {} objective in {:.1} ms: predicted {:.1} µs (the search's own estimate {:.1}) \
         vs best single PU {} {:.1} µs",
        cfg.mode.name(),
        plan.schedule.name(),
        if pareto { "pareto" } else { cfg.objective.name() },
        took.as_secs_f64() * 1e3,
        plan.predicted_us,
        plan.search_estimate,
        plan.best_single_pu.as_deref().unwrap_or("-"),
        plan.best_single_pu_us.unwrap_or(f64::NAN)
    );
    Ok((plan, h))
}

fn plan_inputs(phased: ContentHash, costs: ContentHash, cfg: &SearchConfig) -> ContentHash {
    let constraints = format!("{:?}", cfg.constraints);
    ContentHash::of_parts(&[
        &phased.0,
        &costs.0,
        cfg.objective.name().as_bytes(),
        cfg.mode.name().as_bytes(),
        constraints.as_bytes(),
    ])
}

pub fn search_cmd(a: SearchArgs) -> Result<()> {
    let cfg = a.plan.config()?;
    let _lock = lock_existing(&a.dir)?;
    let p = read::<PhasedGraph>(&a.dir, PHASED)?;
    let c = read::<CostTable>(&a.dir, COSTS)?;
    let (g, _) = read_fused(&a.dir)?;
    bident_partition::verify(&g, &p.value).with_context(|| a.dir.join(PHASED).display().to_string())?;
    c.value.check(&g).with_context(|| a.dir.join(COSTS).display().to_string())?;
    search_stage(&a.dir, (&p.value, p.header.payload_hash), (&c.value, c.header.payload_hash), &cfg, a.plan.pareto())
        .map(|_| ())
}

/// Between search and run, on real PUs: measure the plan's segments of three or more ops whole
/// (the search priced them from pairs), and every PU running the whole model (the single-PU
/// baselines), add them to the cost table and search again, until the plan's segments are all
/// measured (at most a few rounds).
#[allow(clippy::too_many_arguments)]
fn refine_stage(
    dir: &Path,
    g: &FusedGraph,
    phased: (&PhasedGraph, ContentHash),
    (mut costs, mut ch): (CostTable, ContentHash),
    (mut plan, mut plan_h): (Plan, ContentHash),
    cfg: &SearchConfig,
    (soc, be): (&SocSpec, &dyn Backend),
    m: Measuring,
) -> Result<(CostTable, ContentHash, Plan, ContentHash)> {
    let pcfg = ProfileConfig { runs: m.runs, adaptive: !m.fixed_runs, ..Default::default() };
    let cache = (!m.no_cache).then(|| bident_profile::cache::CostCache::new(target_dir().join("bident/cache/costs")));
    for _ in 0..REFINE_ROUNDS {
        let wanted = segments_to_measure(&plan, &costs, phased.0);
        if wanted.is_empty() {
            break;
        }
        let t0 = std::time::Instant::now();
        let found = bident_profile::measure_segments(g, soc, be, &pcfg, cache.as_ref(), &wanted, &mut |_| {})?;
        let before = plan.predicted_us;
        let summary: Vec<String> = found
            .iter()
            .zip(&wanted)
            .map(|(s, (ops, j))| {
                let got = s.per_pu[*j]
                    .as_ref()
                    .map_or("failed".to_string(), |c| format!("{:.1} µs", c.weight_us() + c.h2d_us + c.d2h_us));
                format!("ops {}..{} on {}: {got}", ops[0], ops[ops.len() - 1], soc.pus[*j].name)
            })
            .collect();
        costs.segments.extend(found);
        ch = write(dir, COSTS, &costs, artifact::read::<CostTable>(&dir.join(COSTS))?.header.input_hash)?;
        (plan, plan_h) = search_stage(dir, phased, (&costs, ch), cfg, false)?;
        eprintln!(
            "refine: measured the plan's segments whole in {:.1} s ({}); the plan predicted {before:.1} µs from pairs, \
             the new plan {:.1} µs",
            t0.elapsed().as_secs_f64(),
            summary.join("; "),
            plan.predicted_us
        );
    }
    Ok((costs, ch, plan, plan_h))
}

/// Rounds of measuring a plan's segments and searching again, at most.
pub(crate) const REFINE_ROUNDS: usize = 4;

/// The plan's segments of three or more ops and each PU's whole-model run, where the table has
/// no measurement of them yet: (ops in execution order, PU index).
pub(crate) fn segments_to_measure(plan: &Plan, costs: &CostTable, phased: &PhasedGraph) -> Vec<(Vec<OpId>, usize)> {
    let measured = |ops: &[OpId], pu: usize| costs.segments.iter().any(|s| s.ops == ops && s.per_pu[pu].is_some());
    let whole = whole_model_runs(costs, phased);
    let mut wanted: Vec<(Vec<OpId>, usize)> = plan
        .segments()
        .into_iter()
        .filter_map(|(ops, pu)| costs.soc.pus.iter().position(|p| p.name == pu).map(|j| (ops, j)))
        .chain(whole)
        .filter(|(ops, j)| ops.len() >= 3 && !measured(ops, *j))
        .collect();
    wanted.sort();
    wanted.dedup();
    wanted
}

/// The whole model as one run on every PU that can run all of its ops: (execution order, PU).
fn whole_model_runs(costs: &CostTable, phased: &PhasedGraph) -> Vec<(Vec<OpId>, usize)> {
    let order = phased.order();
    (0..costs.soc.pus.len())
        .filter(|&j| order.iter().all(|&o| costs.cost(o, j).is_some()))
        .map(|j| (order.clone(), j))
        .collect()
}

/// Stage 5. With `--fallback`, a PU that fails is excluded and the plan searched again
/// (`replan`) until a plan runs or no PU is left to drop.
fn run_stage(
    dir: &Path,
    g: &FusedGraph,
    mut plan: (Plan, ContentHash),
    soc: &SocSpec,
    be: Arc<Backends>,
    opts: &RunOpts,
    replan: &mut dyn FnMut(&bident_search::Constraints) -> Result<(Plan, ContentHash)>,
) -> Result<(Plan, RunReport)> {
    let be = opts.backend(be);
    let cfg = opts.config();
    // the engines' whole-model PUs a slower plan already gave way to
    let mut tried: Vec<String> = vec![];
    // the best measured so far among the plans that gave way: (speedup, its constraints, report)
    let mut best: Option<(f64, bident_search::Constraints, RunReport)> = None;
    loop {
        artifact::remove(&dir.join(REPORT))?;
        let err = match bident_runtime::run(g, &plan.0, soc, be.clone(), &cfg) {
            Ok(report) => {
                // a plan that measured slower than an engine's own defaults beside it gives way
                // to that engine's PU running the whole model, when the SoC has it and no pin
                // says otherwise
                if report.speedup_vs_best_default() < 1.0
                    && (plan.0.constraints.pin.is_empty() || !tried.is_empty())
                    && let Some(pu) = default_pu(soc, &report, &plan.0).filter(|pu| !tried.contains(pu))
                {
                    eprintln!(
                        "run: the plan measured {:.1} µs, slower than {} at {:.1} µs beside it; planning the whole \
                         model on `{pu}` (that engine at its defaults) instead",
                        report.measured_us, report.backend_default, report.measured_backend_default_us
                    );
                    let mut c = plan.0.constraints.clone();
                    c.pin = g.ops.iter().map(|op| (op.name.clone(), pu.clone())).collect();
                    let speedup = report.speedup_vs_best_default();
                    if best.as_ref().is_none_or(|b| speedup > b.0) {
                        best = Some((speedup, plan.0.constraints.clone(), report));
                    }
                    plan = replan(&c)?;
                    tried.push(pu);
                    continue;
                }
                // an engine's PU that measured no better than a plan before it gives the plan back
                // (the search is deterministic: planning again writes the same plan)
                let mut report = report;
                if let Some((speedup, c, earlier)) = best.take()
                    && speedup > report.speedup_vs_best_default()
                {
                    eprintln!(
                        "run: the whole model on `{}` measured {:.2}x of the best default, the plan before it {speedup:.2}x: \
                         keeping that plan",
                        tried.last().map_or("?", String::as_str),
                        report.speedup_vs_best_default()
                    );
                    plan = replan(&c)?;
                    report = earlier;
                }
                write(dir, REPORT, &report, bident_runtime::input_hash(plan.1, &cfg))?;
                write_pictures(dir, &report)?;
                return Ok((plan.0, report));
            }
            Err(e) => e,
        };
        let Some(pu) = err.faulty_pu().map(str::to_string) else { return Err(err.into()) };
        if !opts.fallback {
            return Err(
                anyhow::Error::new(err).context(format!("run: rerun with --fallback to plan without PU `{pu}`"))
            );
        }
        eprintln!(
            "run: {}; --fallback: planning again without PU `{pu}`",
            anyhow::Error::new(err).chain().map(|e| e.to_string()).collect::<Vec<_>>().join(": ")
        );
        let mut c = plan.0.constraints.clone();
        let pins = c.pin.len();
        c.pin.retain(|(_, p)| *p != pu);
        if c.pin.len() < pins {
            eprintln!("run: dropping {} --pin to `{pu}`", pins - c.pin.len());
        }
        c.exclude.push(pu);
        if c.exclude.len() >= soc.pus.len() {
            bail!("run: every PU of `{}` has failed; nothing left to plan on", soc.name);
        }
        plan = replan(&c)?;
    }
}

/// The PU of `soc` that is the fastest backend default of `report`: that backend's device,
/// whole (not pinned), asking for nothing but the device's default precision; None when the SoC
/// has no such PU, the plan excludes it or already runs everything on it.
fn default_pu(soc: &SocSpec, report: &RunReport, plan: &Plan) -> Option<String> {
    let d = report.best_default()?;
    let reference = soc.pu(report.best_single_pu.first()?)?;
    let pu = soc.pus.iter().find(|p| {
        p.backend == d.backend
            && p.kind == reference.kind
            && p.device == reference.device
            && p.cores.is_empty()
            && p.properties.iter().all(|(k, v)| {
                k == bident_backend::soc::PRECISION_KEY
                    && d.precision.as_ref().is_some_and(|dp| dp.eq_ignore_ascii_case(v))
            })
    })?;
    let excluded = plan.constraints.exclude.contains(&pu.name);
    let already = plan.ops_per_pu.len() == 1 && plan.ops_per_pu.contains_key(&pu.name);
    (!excluded && !already).then(|| pu.name.clone())
}

/// What ran where, next to the run report: `trace.json` (Chrome trace, opens in Perfetto) and
/// `gantt.svg`.
fn write_pictures(dir: &Path, r: &RunReport) -> Result<()> {
    for (file, text) in
        [("trace.json", bident_runtime::trace::chrome_trace(r)), ("gantt.svg", bident_runtime::trace::gantt_svg(r))]
    {
        std::fs::write(dir.join(file), text).with_context(|| dir.join(file).display().to_string())?;
    }
    eprintln!("run: what ran where -> {} and {}", dir.join("gantt.svg").display(), dir.join("trace.json").display());
    Ok(())
}

pub fn run_cmd(a: RunArgs) -> Result<()> {
    let _lock = lock_existing(&a.dir)?;
    let (g, _) = read_fused(&a.dir)?;
    let plan = read::<Plan>(&a.dir, PLAN)?;
    let costs = read::<CostTable>(&a.dir, COSTS)?;
    let phased = read::<PhasedGraph>(&a.dir, PHASED)?;
    bident_partition::verify(&g, &phased.value).with_context(|| a.dir.join(PHASED).display().to_string())?;
    costs.value.check(&g).with_context(|| a.dir.join(COSTS).display().to_string())?;
    // the plan must come from exactly these phases and costs
    let cfg = SearchConfig {
        objective: plan.value.objective,
        mode: plan.value.mode,
        constraints: plan.value.constraints.clone(),
    };
    let expected = plan_inputs(phased.header.payload_hash, costs.header.payload_hash, &cfg);
    artifact::expect_inputs(&a.dir.join(PLAN), &plan.header, expected)?;
    bident_search::check_plan(&plan.value, &phased.value, &costs.value)
        .with_context(|| a.dir.join(PLAN).display().to_string())?;
    a.run.check(&costs.value.soc)?;
    if costs.value.simulated {
        bail!(
            "{}: the plan is for virtual SoC `{}` (simulated costs): there are no such PUs to run it on",
            a.dir.display(),
            costs.value.soc.name
        );
    }
    let be = backends(costs.value.soc.pus.iter().map(|p| p.backend.as_str()))?;
    let mut replan = |c: &bident_search::Constraints| {
        let cfg = SearchConfig { constraints: c.clone(), ..cfg.clone() };
        search_stage(
            &a.dir,
            (&phased.value, phased.header.payload_hash),
            (&costs.value, costs.header.payload_hash),
            &cfg,
            false,
        )
    };
    let (plan, r) =
        run_stage(&a.dir, &g, (plan.value, plan.header.payload_hash), &costs.value.soc, be, &a.run, &mut replan)?;
    print_summary(&g, &plan, Some(&r));
    Ok(())
}

/// All stages in order. On a virtual SoC the run stage is skipped (there is nothing to run on).
pub fn run_stages(a: &PipelineArgs) -> Result<(FusedGraph, Plan, Option<RunReport>)> {
    // every option is checked before the output folder is touched
    let (path, name) = model_path(&a.import)?;
    let dir = out_dir(&a.import, &name);
    let opts = import_options(&a.import)?;
    let soc = Soc::load(&a.soc)?;
    let cfg = a.plan.config()?;
    cfg.constraints.check_names(&soc.pu_names())?;
    match &soc {
        Soc::Measured(spec, _) => a.run.check(spec)?,
        Soc::Virtual(v) if a.run.inject_fault.is_some() => {
            bail!("--inject-fault: `{}` is a virtual SoC; nothing runs on it", v.spec.name)
        }
        Soc::Virtual(_) => {}
    }
    let _lock = lock_out(&dir)?;
    let (g, gh) = import_stage(&a.import, &path, &dir, opts)?;
    let (phased, ph) = partition_stage(&dir, &g, gh)?;
    let m = Measuring { runs: a.profile_runs, fixed_runs: a.fixed_runs, no_cache: a.no_cache };
    let (costs, ch) = profile_stage(&dir, &g, gh, &soc, m, phased.neighbours())?;
    let (mut plan, mut plan_h) = search_stage(&dir, (&phased, ph), (&costs, ch), &cfg, a.plan.pareto())?;
    let (mut costs, mut ch) = (costs, ch);
    match soc {
        Soc::Measured(spec, be) => {
            if !a.plan.pareto() {
                (costs, ch, plan, plan_h) =
                    refine_stage(&dir, &g, (&phased, ph), (costs, ch), (plan, plan_h), &cfg, (&spec, be.as_ref()), m)?;
            }
            let mut replan = |c: &bident_search::Constraints| {
                let cfg = SearchConfig { constraints: c.clone(), ..cfg.clone() };
                search_stage(&dir, (&phased, ph), (&costs, ch), &cfg, false)
            };
            let (plan, report) = run_stage(&dir, &g, (plan, plan_h), &spec, be, &a.run, &mut replan)?;
            Ok((g, plan, Some(report)))
        }
        Soc::Virtual(v) => {
            eprintln!("run: skipped: `{}` is a virtual SoC, its plan is simulated only", v.spec.name);
            Ok((g, plan, None))
        }
    }
}

/// Two models at once: import, partition and profile both, measure (or, on a virtual SoC,
/// model) their same-PU co-execution costs, and search the concurrent plan.
fn concurrent_pipeline(a: &PipelineArgs, model_b: &str) -> Result<()> {
    use bident_search::concurrent::{self, ConcurrentMode, ConcurrentPlan, Measured, TimeSlicing};
    let cfg = a.plan.config()?;
    anyhow::ensure!(
        cfg.mode == Mode::Sequential && cfg.constraints.is_empty(),
        "--with plans each model's ops one at a time, without constraints: drop --mode parallel, --pin, --forbid \
         and --exclude-pu"
    );
    let soc = Soc::load(&a.soc)?;
    if let Soc::Measured(spec, _) = &soc {
        a.run.check(spec)?;
    }
    let m = Measuring { runs: a.profile_runs, fixed_runs: a.fixed_runs, no_cache: a.no_cache };
    // each model's stages in <out>/<model>/ (default target/bident/<model>/), each with its own
    // input flags
    let second = ImportArgs {
        model: Some(model_b.to_string()),
        input_shape: a.with_input_shape.clone(),
        input_value: a.with_input_value.clone(),
        ..a.import.clone()
    };
    let mut models = vec![];
    for import in [a.import.clone(), second] {
        let (path, name) = model_path(&import)?;
        let dir = match &a.import.out {
            Some(out) => out.join(&name),
            None => out_dir(&ImportArgs { out: None, ..import.clone() }, &name),
        };
        let opts = import_options(&import)?;
        models.push((import, path, dir, opts));
    }
    let pair_dir = |na: &str, nb: &str| match &a.import.out {
        Some(out) => out.clone(),
        None => target_dir().join("bident/pairs").join(format!("{na}+{nb}")),
    };
    let mut stages = vec![];
    for (import, path, dir, opts) in models {
        let _lock = lock_out(&dir)?;
        let (g, gh) = import_stage(&import, &path, &dir, opts)?;
        let (phased, _) = partition_stage(&dir, &g, gh)?;
        let (mut costs, _) = profile_stage(&dir, &g, gh, &soc, m, phased.neighbours())?;
        if let Soc::Measured(spec, be) = &soc {
            // each model whole on each PU: what running it on a PU of its own costs
            let wanted = whole_model_runs(&costs, &phased);
            let pcfg = ProfileConfig { runs: m.runs, adaptive: !m.fixed_runs, ..Default::default() };
            let cache =
                (!m.no_cache).then(|| bident_profile::cache::CostCache::new(target_dir().join("bident/cache/costs")));
            let found =
                bident_profile::measure_segments(&g, spec, be.as_ref(), &pcfg, cache.as_ref(), &wanted, &mut |_| {})?;
            costs.segments.extend(found);
            write(&dir, COSTS, &costs, artifact::read::<CostTable>(&dir.join(COSTS))?.header.input_hash)?;
        }
        stages.push((g, phased, costs));
    }
    let [(ga, pa, ca), (gb, pb, cb)] = <[_; 2]>::try_from(stages).map_err(|_| anyhow::anyhow!("two models"))?;
    let dir = pair_dir(&ga.name, &gb.name);
    let _lock = lock_out(&dir)?;
    let file = "concurrent-plan.bin";
    clear(&dir, &[file, REPORT])?;
    let mode = if a.aligned { ConcurrentMode::Aligned } else { ConcurrentMode::Joint };
    let order = |p: &PhasedGraph| p.order().into_iter().map(|o| o as usize).collect::<Vec<_>>();
    let coexec;
    let (co, label): (Box<dyn concurrent::CoCost>, String) = match &soc {
        Soc::Virtual(v) => (Box::new(TimeSlicing), format!("simulated: time slicing on virtual SoC {}", v.spec.name)),
        Soc::Measured(spec, be) => {
            let cfg = bident_profile::coexec::CoExecConfig::default();
            coexec = bident_profile::coexec::measure(be.as_ref(), spec, (&ga, &gb), cfg, &mut |_| {})?;
            write(
                &dir,
                "coexec-table.bin",
                &coexec,
                ContentHash::of_parts(&[&ga.content_hash()?.0, &gb.content_hash()?.0]),
            )?;
            let label = format!(
                "measured on {}: {} pairs per PU ({}), fitted model for the rest",
                coexec.measured_on,
                coexec.pairs.first().map_or(0, Vec::len),
                if coexec.complete.iter().all(|&c| c) { "all of them" } else { "a sample" }
            );
            (Box::new(Measured::new(&coexec, order(&pa), order(&pb))), label)
        }
    };
    let t0 = std::time::Instant::now();
    let plan: ConcurrentPlan = concurrent::plan((&pa, &ca), (&pb, &cb), (co.as_ref(), &label), mode, cfg.objective)?;
    let took = t0.elapsed();
    let plan_h = write(
        &dir,
        file,
        &plan,
        ContentHash::of_parts(&[&ca.graph.0, &cb.graph.0, format!("{mode:?}{cfg:?}").as_bytes()]),
    )?;
    let on = |pu: &str, side: fn(&bident_search::concurrent::ConcurrentStep) -> Option<&(u32, String)>| {
        plan.steps.iter().filter(|s| side(s).is_some_and(|(_, p)| p == pu)).count()
    };
    let both = plan.steps.iter().filter(|s| s.a.is_some() && s.b.is_some()).count();
    let label = if plan.simulated { "simulated" } else { "measured" };
    println!(
        "models     {} ({} ops) + {} ({} ops), concurrent ({:?})",
        ga.name,
        ga.ops.len(),
        gb.name,
        gb.ops.len(),
        mode
    );
    println!("soc        {} [{label}], PUs: {}", plan.soc, plan.pus.join(", "));
    println!("co-costs   {}", plan.co_costs);
    for pu in &plan.pus {
        println!(
            "  {pu:<8} {} ops of {}, {} ops of {}",
            on(pu, |s| s.a.as_ref()),
            ga.name,
            on(pu, |s| s.b.as_ref()),
            gb.name
        );
    }
    println!(
        "predicted  {:.1} µs ({} steps, {both} running both models; search {:.1} ms)   baseline {:.1} µs ({} on {}, then {} \
         on {})   speedup {:.2}x",
        plan.predicted_us,
        plan.steps.len(),
        took.as_secs_f64() * 1e3,
        plan.baseline_us,
        ga.name,
        plan.baseline[0],
        gb.name,
        plan.baseline[1],
        plan.speedup
    );
    eprintln!("concurrent: plan -> {}", dir.join(file).display());
    let report = match soc {
        Soc::Virtual(v) => {
            println!("measured   nothing: {} is a virtual SoC; every figure above is simulated", v.spec.name);
            None
        }
        Soc::Measured(spec, be) => {
            anyhow::ensure!(
                !a.run.fallback,
                "--fallback is not available with --with: a concurrent plan cannot exclude a PU yet"
            );
            let cfg = a.run.config();
            let r = bident_runtime::run_concurrent((&ga, &gb), &plan, &spec, a.run.backend(be), &cfg)?;
            let h = bident_runtime::input_hash(plan_h, &cfg);
            write(&dir, REPORT, &r, h)?;
            write_pictures(&dir, &r)?;
            print_measured(&r);
            Some(r)
        }
    };
    if a.json {
        let mut j = serde_json::json!({
            "models": [ga.name, gb.name],
            "soc": plan.soc,
            "simulated": plan.simulated,
            "pus": plan.pus,
            "mode": "concurrent",
            "concurrent_mode": format!("{mode:?}").to_lowercase(),
            "objective": plan.objective.name(),
            "fused_ops": [ga.ops.len(), gb.ops.len()],
            "predicted_us": plan.predicted_us,
            "predicted_energy_mj": plan.predicted_energy_uj / 1000.0,
            "baseline_us": plan.baseline_us,
            "predicted_speedup": plan.speedup,
        });
        if let (Some(r), Some(o)) = (&report, j.as_object_mut()) {
            o.extend(measured_json(r));
        }
        println!("{j}");
    }
    Ok(())
}

pub fn pipeline(a: PipelineArgs) -> Result<()> {
    if let Some(b) = a.with.clone() {
        return concurrent_pipeline(&a, &b);
    }
    let (g, plan, report) = run_stages(&a)?;
    print_summary(&g, &plan, report.as_ref());
    if a.json {
        let best_us = plan.best_single_pu_us.unwrap_or(f64::NAN);
        let mut j = serde_json::json!({
            "model": g.name,
            "soc": plan.soc,
            "simulated": plan.simulated,
            "pus": plan.pus,
            "mode": plan.mode.name(),
            "schedule": plan.schedule.name(),
            "objective": plan.objective.name(),
            "fused_ops": g.ops.len(),
            "predicted_us": plan.predicted_us,
            // energy = sum of time x power of the spending PU (declared unless measured)
            "predicted_energy_mj": plan.predicted_energy_uj / 1000.0,
            "best_single_pu": plan.best_single_pu,
            "best_single_pu_us": best_us,
            "predicted_speedup": best_us / plan.predicted_us,
            "lower_bound_us": plan.lower_bound_us,
            "latency_weight": plan.blend,
            "gap": plan.gap,
        });
        // a virtual SoC's plan has no measured fields at all
        if let (Some(r), Some(o)) = (&report, j.as_object_mut()) {
            o.extend(measured_json(r));
        }
        println!("{j}");
    }
    Ok(())
}

fn print_summary(g: &FusedGraph, plan: &Plan, r: Option<&RunReport>) {
    let precision = |pu: &str| plan.pus.iter().position(|p| p == pu).and_then(|i| plan.pu_precisions.get(i));
    let mix: Vec<String> = plan
        .ops_per_pu
        .iter()
        .map(|(pu, n)| match precision(pu) {
            Some(p) => format!("{n} on {pu} ({p})"),
            None => format!("{n} on {pu}"),
        })
        .collect();
    let label = if plan.simulated { "simulated" } else { "measured" };
    println!("model      {} ({} fused ops from {} ONNX nodes)", g.name, g.ops.len(), g.source.nodes);
    println!("soc        {} [{}], PUs: {}", plan.soc, label, plan.pus.join(", "));
    let objective = match plan.blend {
        Some(w) => format!("the front's fastest point, latency weight {w}"),
        None => format!("{} objective", plan.objective.name()),
    };
    println!(
        "plan       {} mode, {} schedule ({objective}): {}",
        plan.mode.name(),
        plan.schedule.name(),
        mix.join(", ")
    );
    println!(
        "bound      no mapping beats {:.1} µs / {:.1} µJ under this schedule; the plan is {:.1}% above it ({})",
        plan.lower_bound_us,
        plan.lower_bound_energy_uj,
        plan.gap * 100.0,
        plan.objective.name()
    );
    println!(
        "predicted  {:.1} µs   best single PU {} {:.1} µs   speedup {:.2}x",
        plan.predicted_us,
        plan.best_single_pu.as_deref().unwrap_or("-"),
        plan.best_single_pu_us.unwrap_or(f64::NAN),
        plan.best_single_pu_us.unwrap_or(f64::NAN) / plan.predicted_us
    );
    let Some(r) = r else {
        println!("measured   nothing: {} is a virtual SoC; every figure above is simulated", plan.soc);
        return;
    };
    print_measured(r);
}

/// The measured lines of a summary (single or concurrent plan).
fn print_measured(r: &RunReport) {
    println!(
        "measured   {:.1} µs (p10 {:.1}, p90 {:.1}; {} runs)   predicted {:.1} µs: prediction error {:.1}%   [{}]",
        r.measured_us,
        r.measured_p10_us,
        r.measured_p90_us,
        r.runs,
        r.predicted_us,
        r.prediction_error * 100.0,
        r.measured_on
    );
    println!(
        "baselines  whole model on {} {:.1} µs (speedup {:.2}x)",
        r.best_single_pu.join(" then "),
        r.measured_best_single_pu_us,
        r.measured_speedup(),
    );
    for d in &r.backend_defaults {
        let best = if r.best_default() == Some(d) { "  <- the best default" } else { "" };
        match (d.measured_us, &d.refused) {
            (Some(us), _) => {
                println!("           {} {us:.1} µs (speedup {:.2}x){best}", d.description, us / r.measured_us)
            }
            (None, why) => println!("           {}: not measured ({})", d.description, why.as_deref().unwrap_or("?")),
        }
    }
    println!("speedup    {:.2}x over the best backend default ({})", r.speedup_vs_best_default(), r.backend_default);
    let ops: usize = r.ops.iter().map(|t| t.ops.len()).sum();
    println!(
        "runtime    {ops} ops as {} sub-models, compiled in {:.0} ms (not in the latency); executor overhead {:.2} µs \
         per sub-model",
        r.ops.len(),
        r.compile_ms,
        r.overhead_us_per_op
    );
    println!(
        "outputs    every run checked against the whole model: max abs error {:.3e}; {}",
        r.max_abs_err, r.tolerance
    );
    if r.pu_backends.iter().any(|b| Some(b) != r.pu_backends.first()) {
        let labels: Vec<String> = (0..r.pus.len()).map(|i| r.pu_label(i)).collect();
        println!("backends   {} ({})", labels.join(", "), r.backend);
    }
}

/// The measured fields of the pipeline's JSON line.
fn measured_json(r: &RunReport) -> serde_json::Map<String, serde_json::Value> {
    let j = serde_json::json!({
        "measured_us": r.measured_us,
        "prediction_error": r.prediction_error,
        "measured_best_single_pu_us": r.measured_best_single_pu_us,
        "measured_speedup": r.measured_speedup(),
        "measured_backend_default_us": r.measured_backend_default_us,
        // the faster default, kept under its first name
        "speedup_vs_backend_default": r.speedup_vs_best_default(),
        "measured_backend_defaults": r
            .backend_defaults
            .iter()
            .map(|d| (d.backend.clone(), serde_json::json!(d.measured_us)))
            .collect::<serde_json::Map<_, _>>(),
        "backend_default_precisions": r
            .backend_defaults
            .iter()
            .map(|d| (d.backend.clone(), serde_json::json!(d.precision)))
            .collect::<serde_json::Map<_, _>>(),
        "speedup_vs_best_default": r.speedup_vs_best_default(),
        "measured_whole": r
            .measured_whole
            .iter()
            .map(|w| (w.pu.clone(), serde_json::json!(w.measured_us)))
            .collect::<serde_json::Map<_, _>>(),
        "overhead_us_per_op": r.overhead_us_per_op,
        "compile_ms": r.compile_ms,
        "max_abs_err": r.max_abs_err,
        "tolerance": r.tolerance,
        "measured_on": r.measured_on,
    });
    match j {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

#[derive(Args, Clone)]
pub struct ExtractArgs {
    /// Folder holding the import stage's artifacts.
    pub dir: PathBuf,
    /// The fused op: its index or its name (see fused-graph.yaml).
    #[arg(long, required_unless_present = "lowered")]
    pub op: Option<String>,
    /// Write the whole lowered model (inputs pinned, constants folded) instead.
    #[arg(long, conflicts_with = "op")]
    pub lowered: bool,
    /// Output file.
    #[arg(short, long)]
    pub out: PathBuf,
}

pub fn extract(a: ExtractArgs) -> Result<()> {
    let (g, _) = read_fused(&a.dir)?;
    let bytes = match &a.op {
        None => g.lowered_model()?,
        Some(op) => {
            let id = match op.parse::<usize>() {
                Ok(i) if i < g.ops.len() => i,
                Ok(i) => bail!("op {i} out of range: the graph has {} ops", g.ops.len()),
                Err(_) => g
                    .ops
                    .iter()
                    .position(|o| o.name == *op)
                    .with_context(|| format!("no fused op named `{op}` in {}", a.dir.display()))?,
            };
            eprintln!("extract: op {id} `{}` ({})", g.ops[id].name, g.ops[id].kind);
            bident_ir::Extractor::new(&g)?.extract(id as OpId)?
        }
    };
    std::fs::write(&a.out, &bytes).with_context(|| a.out.display().to_string())?;
    eprintln!("extract: {} bytes -> {}", bytes.len(), a.out.display());
    Ok(())
}

#[derive(Args)]
pub struct CoexecArgs {
    /// Folders of the two imported models (A and B; may be the same).
    pub a: PathBuf,
    pub b: PathBuf,
    #[command(flatten)]
    pub soc: SocArgs,
    /// Measure every (A op, B op) pair up to this many per PU, else a seeded sample of this
    /// many, with a fitted model (and its cross-validated error) for the rest.
    #[arg(long, default_value_t = bident_profile::coexec::CoExecConfig::default().max_pairs)]
    pub max_pairs: usize,
    /// Output folder (default: target/bident/pairs/<A>+<B>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn coexec(a: CoexecArgs) -> Result<()> {
    let (ga, ha) = read_fused(&a.a)?;
    let (gb, hb) = read_fused(&a.b)?;
    let Soc::Measured(soc, be) = Soc::load(&a.soc)? else {
        bail!("co-execution costs are measured: `{}` is a virtual SoC", a.soc.soc);
    };
    let cfg = bident_profile::coexec::CoExecConfig { max_pairs: a.max_pairs, ..Default::default() };
    let dir =
        a.out.clone().unwrap_or_else(|| target_dir().join("bident/pairs").join(format!("{}+{}", ga.name, gb.name)));
    let file = "coexec-table.bin";
    clear(&dir, &[file])?;
    let tty = std::io::stderr().is_terminal();
    let t0 = std::time::Instant::now();
    let table = bident_profile::coexec::measure(be.as_ref(), &soc, (&ga, &gb), cfg, &mut |p| {
        if tty {
            eprint!("\rcoexec: {} pair {}/{}   ", p.pu, p.done, p.total);
        }
    })?;
    if tty {
        eprintln!();
    }
    write(&dir, file, &table, bident_profile::coexec::input_hash(ha, hb, &soc, &cfg))?;
    eprintln!(
        "coexec: {} x {} ops of `{}` and `{}` on {} in {:.1} s ({}) -> {}",
        ga.ops.len(),
        gb.ops.len(),
        ga.name,
        gb.name,
        soc.name,
        t0.elapsed().as_secs_f64(),
        table.measured_on,
        dir.join(file).display()
    );
    for (j, pu) in soc.pus.iter().enumerate() {
        let pairs = &table.pairs[j];
        let mut slow: Vec<f64> =
            pairs.iter().flat_map(|p| [p.co_a_us / p.solo_a_us, p.co_b_us / p.solo_b_us]).collect();
        let med = bident_profile::quantile(&mut slow, 0.5);
        let fit = match &table.fit[j] {
            Some(f) => format!(
                "fit co(x|y) = {:.2} t_x + {:.2} t_y + {:.2} min(t_x, t_y) + {:.1} µs, cross-validated error \
                 median {:.1}%, p90 {:.1}%",
                f.a,
                f.b,
                f.c,
                f.d,
                f.cv_median_rel_err * 100.0,
                f.cv_p90_rel_err * 100.0
            ),
            None => "too few pairs to fit".into(),
        };
        eprintln!(
            "coexec: {}: {} pairs measured ({}), median slowdown sharing the PU {med:.2}x; {fit}",
            pu.name,
            pairs.len(),
            if table.complete[j] { "all of them" } else { "a sample" }
        );
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum CostsCmd {
    /// Write DIR's cost table as FILE (`.json`: every field; `.csv`: a row per (op, PU), the
    /// metadata as `# key: value` lines).
    Export { dir: PathBuf, file: PathBuf },
    /// Read FILE (an export) as DIR's cost table, after checking it is for DIR's fused graph.
    Import { file: PathBuf, dir: PathBuf },
}

pub fn costs(cmd: CostsCmd) -> Result<()> {
    use bident_profile::portable::{self, Format};
    let format = |f: &Path| Format::of_path(f).with_context(|| format!("{}: give a .json or .csv file", f.display()));
    match cmd {
        CostsCmd::Export { dir, file } => {
            let t = read::<CostTable>(&dir, COSTS)?.value;
            std::fs::write(&file, portable::export(&t, format(&file)?)?).with_context(|| file.display().to_string())?;
            eprintln!(
                "costs: {} ops x {} PUs ({}) -> {}",
                t.ops.len(),
                t.soc.pus.len(),
                if t.simulated { "simulated" } else { "measured" },
                file.display()
            );
        }
        CostsCmd::Import { file, dir } => {
            let fmt = format(&file)?;
            let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
            let t = portable::import(&text, fmt, &file.display().to_string())?;
            let _lock = lock_existing(&dir)?;
            let (g, gh) = read_fused(&dir)?;
            t.check(&g).with_context(|| file.display().to_string())?;
            clear(&dir, &[COSTS, PLAN, REPORT])?;
            write(&dir, COSTS, &t, ContentHash::of_parts(&[&gh.0, text.as_bytes()]))?;
            eprintln!(
                "costs: {} -> {} ({} ops x {} PUs, {} on {})",
                file.display(),
                dir.join(COSTS).display(),
                t.ops.len(),
                t.soc.pus.len(),
                if t.simulated { "simulated" } else { "measured" },
                t.measured_on
            );
        }
    }
    Ok(())
}

/// Print a SoC (preset or file), checked against this machine, in the spec file format.
pub fn soc(spec: &str) -> Result<()> {
    match Soc::load(&SocArgs::named(spec))? {
        Soc::Measured(soc, _) => print!("{}", soc.to_toml()),
        Soc::Virtual(v) => {
            println!("# VIRTUAL SoC: costs come from an analytic model (simulated), calibrated to {}", v.calibration);
            print!("{}", v.spec.to_toml());
            for (pu, model) in v.spec.pus.iter().zip(&v.pus) {
                println!("\n# model of `{}` (simulated)", pu.name);
                for line in toml::to_string(model)?.lines() {
                    println!("# {line}");
                }
            }
            println!("\n# contention: sf[i][j] = slowdown of PU i while PU j is busy (simulated)");
            for (pu, row) in v.spec.pus.iter().zip(&v.contention) {
                println!("# {:<6} {row:?}", pu.name);
            }
        }
    }
    Ok(())
}

pub fn plan_diff(a: &Path, b: &Path) -> Result<()> {
    let read_plan = |f: &Path| -> Result<Plan> {
        let bytes = artifact::read_bytes(f)?;
        let plan = artifact::decode::<Plan>(f, &bytes)?.value;
        bident_search::check_figures(&plan).with_context(|| f.display().to_string())?;
        Ok(plan)
    };
    let (pa, pb) = (read_plan(a)?, read_plan(b)?);
    let d = bident_search::diff(&pa, &pb)?;
    let label = |p: &Plan| format!("{} {} / {}", p.mode.name(), p.objective.name(), p.soc);
    println!("plan-diff  {} ({}) -> {} ({}), model {}", a.display(), label(&pa), b.display(), label(&pb), pa.model);
    println!(
        "{:>5}  {:<28} {:<26} {:>6} -> {:<6} {:>10} {:>10}",
        "op", "name", "kind", "from", "to", "µs before", "µs after"
    );
    for m in &d.moves {
        println!(
            "{:>5}  {:<28} {:<26} {:>6} -> {:<6} {:>10.1} {:>10.1}",
            m.op,
            truncate(&m.name, 28),
            truncate(&m.kind, 26),
            m.from,
            m.to,
            m.before_us,
            m.after_us
        );
    }
    let pct = |(x, y): (f64, f64)| (y / x - 1.0) * 100.0;
    println!(
        "{} of {} ops moved; predicted {:.1} -> {:.1} µs ({:+.1}%), {:.1} -> {:.1} µJ ({:+.1}%); schedule {} -> {}",
        d.moves.len(),
        pa.steps.len(),
        d.predicted_us.0,
        d.predicted_us.1,
        pct(d.predicted_us),
        d.predicted_energy_uj.0,
        d.predicted_energy_uj.1,
        pct(d.predicted_energy_uj),
        d.schedule.0.name(),
        d.schedule.1.name()
    );
    Ok(())
}

pub fn show(file: &Path) -> Result<()> {
    let bytes = artifact::read_bytes(file)?;
    let (header, _) = artifact::read_header(file, &bytes)?;
    let yaml = match header.kind.as_str() {
        FusedGraph::KIND => twin::<FusedGraph>(file, &bytes)?,
        PhasedGraph::KIND => twin::<PhasedGraph>(file, &bytes)?,
        bident_profile::coexec::CoExecTable::KIND => twin::<bident_profile::coexec::CoExecTable>(file, &bytes)?,
        bident_search::concurrent::ConcurrentPlan::KIND => {
            twin::<bident_search::concurrent::ConcurrentPlan>(file, &bytes)?
        }
        CostTable::KIND => twin::<CostTable>(file, &bytes)?,
        Plan::KIND => twin::<Plan>(file, &bytes)?,
        RunReport::KIND => twin::<RunReport>(file, &bytes)?,
        k => bail!("{}: unknown artifact kind `{k}`", file.display()),
    };
    print!("{yaml}");
    Ok(())
}

fn twin<A: Artifact>(file: &Path, bytes: &[u8]) -> Result<String> {
    let s = artifact::decode::<A>(file, bytes)?;
    Ok(artifact::to_yaml(&s.header, &s.value)?)
}

pub fn zoo(name: Option<&str>, out: &Path, seed: u64, external_data: bool) -> Result<()> {
    let Some(name) = name else {
        for (n, what) in bident_zoo::MODELS {
            println!("{n:<22} {what}");
        }
        println!("\nthe paper's families, as <family>-<tiny|full>-<fp32|fp16|int8> (full size below):");
        for (n, what) in bident_zoo::families::FAMILIES {
            println!("{n:<22} {what}");
        }
        return Ok(());
    };
    let mut model = bident_zoo::build(name, seed)
        .with_context(|| format!("no zoo model `{name}` (list them with `cargo xtask zoo`)"))?;
    std::fs::create_dir_all(out)?;
    if external_data {
        let weights = format!("{name}.weights");
        let blob = bident_zoo::externalize(&mut model, &weights);
        std::fs::write(out.join(&weights), blob)?;
    }
    let path = out.join(format!("{name}.onnx"));
    std::fs::write(&path, prost::Message::encode_to_vec(&model))?;
    println!("{}", path.display());
    Ok(())
}
