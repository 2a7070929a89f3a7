//! Shared harness for the workspace-level integration tests. Test cases are files under
//! `tests/data/<area>/`; the test bodies only call this harness.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bident_backend::onnxruntime::OnnxRuntime;
use bident_backend::openvino::OpenVino;
use bident_ir::FusedGraph;
use serde::{Deserialize, Serialize};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Cargo's target folder, where the engines are installed.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// The OpenVINO backend, installing the pinned runtime into `target/` on first use.
pub fn backend() -> Arc<OpenVino> {
    static BE: OnceLock<Arc<OpenVino>> = OnceLock::new();
    BE.get_or_init(|| {
        let lib = bident_backend::openvino::install::ensure(&target_dir(), &mut |l| eprintln!("{l}"))
            .expect("the OpenVINO runtime is needed by these tests");
        Arc::new(OpenVino::load(&lib).expect("loading OpenVINO"))
    })
    .clone()
}

/// The `cores` SoC's pinned single-core PUs under `be`, without `local`'s whole-CPU PUs and the
/// whole-model configurations: two alike PUs, for tests of what the search and the runtime make
/// of several real PUs.
pub fn pinned_cores(be: &dyn bident_backend::Backend) -> bident_backend::SocSpec {
    let mut soc = op_by_op(bident_backend::SocSpec::preset("cores", be).expect("cores"));
    soc.pus.retain(|p| !p.cores.is_empty());
    soc
}

/// `soc` without its whole-model configurations (`PuSpec::whole_only`): the PUs measured and
/// placed op by op.
pub fn op_by_op(mut soc: bident_backend::SocSpec) -> bident_backend::SocSpec {
    soc.pus.retain(|p| !p.whole_only);
    soc
}

/// The ONNX Runtime backend, installing the pinned runtime into `target/` on first use.
pub fn onnxruntime() -> Arc<OnnxRuntime> {
    static BE: OnceLock<Arc<OnnxRuntime>> = OnceLock::new();
    BE.get_or_init(|| {
        let lib = bident_backend::onnxruntime::install::ensure(&target_dir(), &mut |l| eprintln!("{l}"))
            .expect("the ONNX Runtime library is needed by these tests");
        Arc::new(OnnxRuntime::load(&lib).expect("loading ONNX Runtime"))
    })
    .clone()
}

/// OpenVINO (the default) and ONNX Runtime behind one dispatcher.
pub fn both_backends() -> Arc<bident_backend::Backends> {
    static BE: OnceLock<Arc<bident_backend::Backends>> = OnceLock::new();
    BE.get_or_init(|| Arc::new(bident_backend::Backends::new(vec![backend(), onnxruntime()]))).clone()
}

/// A model case: `tests/data/<area>/<name>.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCase {
    /// `zoo:NAME` or a path relative to the case file.
    pub model: String,
    #[serde(default)]
    pub input_shape: BTreeMap<String, Vec<u64>>,
    /// `rules` (default) or `backend`: group as OpenVINO's CPU plugin fuses the whole model.
    #[serde(default)]
    pub fusion: Option<String>,
}

/// All cases of an area, sorted by name.
pub fn cases(area: &str) -> Vec<(String, PathBuf)> {
    let dir = root().join("tests/data").join(area);
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| (p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(), p))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no cases in {}", dir.display());
    out
}

pub fn read_case<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Import the case's model (for backend fusion: import, profile the lowered model on the
/// `local` SoC's first PU, import again with its layers).
pub fn import(case: &ModelCase, case_path: &Path) -> FusedGraph {
    let mut opts = bident_ir::ImportOptions { input_shapes: case.input_shape.clone(), ..Default::default() };
    let run = |opts: &bident_ir::ImportOptions| {
        let g = match case.model.strip_prefix("zoo:") {
            Some(name) => {
                let bytes = bident_zoo::build_bytes(name, 0).unwrap_or_else(|| panic!("no zoo model {name}"));
                bident_ir::import_bytes(&bytes, &format!("{name}.onnx"), None, opts)
            }
            None => bident_ir::import(&case_path.parent().unwrap_or(Path::new(".")).join(&case.model), opts),
        };
        g.unwrap_or_else(|e| panic!("{}: {e}", case_path.display()))
    };
    let mut g = run(&opts);
    match case.fusion.as_deref() {
        None | Some("rules") => {}
        Some("backend") => {
            let be = backend();
            let pu = bident_backend::SocSpec::preset("local", be.as_ref()).expect("local SoC").pus.remove(0);
            let layers = bident_profile::backend_layers(be.as_ref(), &g, &pu).expect("whole-model profile");
            opts.fusion = bident_ir::Fusion::Backend { pu: pu.name, layers };
            g = run(&opts);
        }
        Some(other) => panic!("{}: unknown fusion `{other}`", case_path.display()),
    }
    bident_ir::verify(&g).expect("verifier");
    g
}

/// A readable, stable summary of a fused graph for snapshots.
#[derive(Serialize)]
pub struct GraphSummary {
    pub fusion: String,
    pub source_nodes: usize,
    pub folded_nodes: usize,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub ops: Vec<String>,
    pub phases: Vec<Vec<Vec<u32>>>,
}

fn tensor_line(g: &FusedGraph, t: u32) -> String {
    let t = g.tensor(t);
    format!("{}: {}{:?}", t.name, t.dtype, t.shape)
}

pub fn summary(g: &FusedGraph, p: &bident_partition::PhasedGraph) -> GraphSummary {
    let fusion = match &g.fusion.backend {
        Some(b) => format!(
            "backend on {}: {} ops ({} layers; {} unresolved; {} split); rules {} ops; {} identical",
            b.pu,
            b.ops,
            b.layers,
            b.unresolved.len(),
            b.split,
            g.fusion.rule_ops,
            b.identical
        ),
        None => format!("rules: {} ops", g.fusion.rule_ops),
    };
    GraphSummary {
        fusion,
        source_nodes: g.source.nodes,
        folded_nodes: g.source.folded_nodes,
        inputs: g.inputs.iter().map(|&t| tensor_line(g, t)).collect(),
        outputs: g.outputs.iter().map(|&t| tensor_line(g, t)).collect(),
        ops: g
            .ops
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let shapes: Vec<String> = o.outputs.iter().map(|&t| format!("{:?}", g.tensor(t).shape)).collect();
                let w = &o.work;
                format!(
                    "{i}: {} -> {} [{} {} {} flops, {}+{} B in, {} B out]",
                    o.kind,
                    shapes.join(", "),
                    w.class.name(),
                    w.dtype,
                    w.flops,
                    w.bytes_in,
                    w.weight_bytes,
                    w.bytes_out
                )
            })
            .collect(),
        phases: p.phases.iter().map(|ph| ph.branches.iter().map(|b| b.ops.clone()).collect()).collect(),
    }
}

/// An import case (`tests/data/import/NAME.yaml`), imported and partitioned.
pub fn model(name: &str) -> (FusedGraph, bident_partition::PhasedGraph) {
    let path = root().join(format!("tests/data/import/{name}.yaml"));
    let case: ModelCase = read_case(&path);
    let g = import(&case, &path);
    let phased = bident_partition::partition(&g).expect("partition");
    (g, phased)
}

/// A plan on the `cores` SoC placing op `i` on PU `pu_of(i)` (by pinning; the costs are
/// uniform placeholders, nothing is profiled).
pub fn plan_on_cores(
    g: &FusedGraph,
    phased: &bident_partition::PhasedGraph,
    pu_of: impl Fn(usize) -> usize,
) -> (bident_backend::SocSpec, bident_search::Plan) {
    let soc = pinned_cores(backend().as_ref());
    let plan = plan_on(g, phased, &soc, bident_search::Mode::Sequential, pu_of);
    (soc, plan)
}

/// A plan on `soc` in `mode` placing op `i` on PU `pu_of(i)` (by pinning; the costs are
/// uniform placeholders, nothing is profiled).
pub fn plan_on(
    g: &FusedGraph,
    phased: &bident_partition::PhasedGraph,
    soc: &bident_backend::SocSpec,
    mode: bident_search::Mode,
    pu_of: impl Fn(usize) -> usize,
) -> bident_search::Plan {
    use bident_profile::{Cost, CostTable, OpCosts, PowerSource};
    let k = soc.pus.len();
    let cost = Cost {
        h2d_us: 1.0,
        dispatch_us: 1.0,
        exec_us: 10.0,
        d2h_us: 1.0,
        p10_us: [1.0, 1.0, 10.0, 1.0],
        p90_us: [1.0, 1.0, 10.0, 1.0],
        runs: 1,
        power_w: 1.0,
        power: PowerSource::Declared,
        stop_check: None,
    };
    let costs = CostTable {
        model: g.name.clone(),
        graph: g.content_hash().expect("hash"),
        soc: soc.clone(),
        simulated: false,
        backend: "placeholder".into(),
        measured_on: "nowhere (placeholder costs)".into(),
        warmup: 0,
        components: vec!["placeholder".into(); k],
        io_every_call: vec![true; k],
        launch_us: vec![],
        segments: vec![],
        contention: None,
        ops: g
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| OpCosts {
                op: i as u32,
                name: op.name.clone(),
                kind: op.kind.clone(),
                per_pu: vec![Some(cost.clone()); k],
                failures: vec![],
            })
            .collect(),
    };
    let pin = g.ops.iter().enumerate().map(|(i, op)| (op.name.clone(), soc.pus[pu_of(i) % k].name.clone())).collect();
    let cfg = bident_search::SearchConfig {
        constraints: bident_search::Constraints { pin, ..Default::default() },
        mode,
        ..Default::default()
    };
    bident_search::search(phased, &costs, &cfg).expect("search")
}

/// `x` with three significant digits (at least), so the last bits of a sum do not churn a
/// snapshot line.
pub fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    if s.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') { "0".into() } else { s }
}

/// Why one op of a plan sits on its PU, derived from the cost table and the evaluator: best
/// alone, the only PU, pinned, or else what moving it alone to the PU best for it alone would
/// cost the plan, and which part of the plan that cost comes from (transfers, the savings of
/// ops compiled together, or the overlap of branches).
fn why(p: &bident_search::Problem, plan: &bident_search::Plan, assign: &[usize], c: usize) -> String {
    use bident_search::{Objective, Reason};
    let unit = if plan.objective == Objective::Latency { "µs" } else { "µJ" };
    let alone = |k: usize| p.w[c][k].map(|w| if plan.objective == Objective::Latency { w } else { w * p.power[c][k] });
    let step = &plan.steps.iter().find(|s| s.op as usize == c).expect("every op has a step");
    if step.reason == Reason::Pinned {
        return "pinned".into();
    }
    let runs_on: Vec<usize> = (0..p.pus()).filter(|&k| p.w[c][k].is_some()).collect();
    if runs_on.len() == 1 {
        return "the only PU that runs it".into();
    }
    let alone = |k: usize| alone(k).unwrap_or(f64::INFINITY);
    let best = runs_on.iter().copied().min_by(|&a, &b| alone(a).total_cmp(&alone(b))).expect("a PU");
    if alone(assign[c]) <= alone(best) {
        return if plan.objective == Objective::Latency { "fastest alone".into() } else { "least energy alone".into() };
    }
    let latency = plan.objective == Objective::Latency;
    // (transfers, what compiling together saved, execution) of a timeline, as the objective
    let parts = |t: &bident_search::Timeline, a: &[usize]| {
        let mut acc = (0.0, 0.0, 0.0);
        for (x, &j) in a.iter().enumerate() {
            let k = if latency { 1.0 } else { p.power[x][j] };
            acc.0 += (t.transfer_in[x] + t.transfer_out[x]) * k;
            acc.1 += t.saved[x] * t.factor[x] * k;
            acc.2 += (p.w[x][j].unwrap_or(0.0) - t.saved[x]) * t.factor[x] * k;
        }
        acc
    };
    let mut moved = assign.to_vec();
    moved[c] = best;
    let eval = |a: &[usize]| p.evaluate(a, plan.schedule).expect("the plan's PUs run its ops");
    let (before, after) = (eval(assign), eval(&moved));
    let (b, a) = (parts(&before, assign), parts(&after, &moved));
    let delta = after.objective(plan.objective) - before.objective(plan.objective);
    let d_transfers = a.0 - b.0;
    let d_savings = b.1 - a.1;
    // what is left of the change under a parallel schedule: branches no longer overlapping
    let d_overlap = delta - d_transfers - (a.2 - b.2);
    let to = &plan.pus[best];
    if delta.abs() <= 1e-9 * before.objective(plan.objective).abs().max(1.0) {
        return format!("a tie with {to}");
    }
    if delta < 0.0 {
        return format!("not locally optimal: {} {unit} less on {to}", sig(-delta));
    }
    let parts = [
        (d_transfers, "avoids transfers"),
        (d_savings, "joins its neighbours"),
        (d_overlap, "overlaps other branches"),
    ];
    let (_, label) = parts.iter().copied().fold((f64::NEG_INFINITY, "?"), |a, b| if b.0 > a.0 { b } else { a });
    format!("{label}: {} {unit} more on {to}", sig(delta))
}

/// A cost entry as a synthetic table writes it: `exec` µs of execution with `h2d`/`d2h` µs of
/// transfers, one run, no dispatch, no spread, at a declared `power` W.
pub fn declared_cost(exec: f64, h2d: f64, d2h: f64, power: f64) -> bident_profile::Cost {
    bident_profile::Cost {
        h2d_us: h2d,
        dispatch_us: 0.0,
        exec_us: exec,
        d2h_us: d2h,
        p10_us: [h2d, 0.0, exec, d2h],
        p90_us: [h2d, 0.0, exec, d2h],
        runs: 1,
        power_w: power,
        power: bident_profile::PowerSource::Declared,
        stop_check: None,
    }
}

/// A plan, one line per op in execution order (`op name kind -> PU (why)`), under a line of
/// rounded totals: what a change in the search moves shows as a few changed lines.
pub fn placement(
    plan: &bident_search::Plan,
    phased: &bident_partition::PhasedGraph,
    costs: &bident_profile::CostTable,
) -> String {
    use std::fmt::Write;
    let p = bident_search::Problem::new(phased, costs);
    let mut assign = vec![0; p.ops()];
    for s in &plan.steps {
        assign[s.op as usize] = plan.pus.iter().position(|q| *q == s.pu).expect("a PU of the plan");
    }
    let per_pu: Vec<String> = plan.ops_per_pu.iter().map(|(pu, n)| format!("{pu} {n}")).collect();
    let mut out = format!(
        "{} {} ({} schedule): {} µs, {} µJ; ops {}; best single PU {} {} µs\n",
        plan.mode.name(),
        plan.objective.name(),
        plan.schedule.name(),
        sig(plan.predicted_us),
        sig(plan.predicted_energy_uj),
        per_pu.join(", "),
        plan.best_single_pu.as_deref().unwrap_or("none"),
        plan.best_single_pu_us.map_or("-".into(), sig),
    );
    let name_w = plan.steps.iter().map(|s| s.name.chars().count()).max().unwrap_or(0);
    let kind_w = plan.steps.iter().map(|s| s.kind.chars().count()).max().unwrap_or(0);
    for s in &plan.steps {
        let _ = writeln!(
            out,
            "{:>4} {:<name_w$} {:<kind_w$} -> {} ({})",
            s.op,
            s.name,
            s.kind,
            s.pu,
            why(&p, plan, &assign, s.op as usize)
        );
    }
    out
}

/// Hold the pinned cores for one test of this binary at a time: tests of one binary run at
/// once, and a test that measures (a server judging drift from its timings, a soak) slows the
/// other's PUs as much as the fault it injects.
pub fn cores_to_myself() -> std::sync::MutexGuard<'static, ()> {
    static CORES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CORES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `inner` with every executable it compiles, plain or profiled, handed to `wrap` with its PU:
/// how a test counts executables or changes how they run, on the engine otherwise as it is.
/// `note` goes into the version (so a profile cache never mixes its figures with the engine's).
pub struct Wrapping<F> {
    pub inner: Arc<dyn bident_backend::Backend>,
    pub note: String,
    pub wrap: F,
}

type Exe = Box<dyn bident_backend::Executable>;

impl<F> bident_backend::Backend for Wrapping<F>
where
    F: Fn(Exe, &bident_backend::PuSpec) -> Exe + Send + Sync,
{
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn version(&self) -> String {
        match self.note.as_str() {
            "" => self.inner.version(),
            note => format!("{} ({note})", self.inner.version()),
        }
    }
    fn devices(&self) -> Result<Vec<bident_backend::DeviceInfo>, bident_backend::BackendError> {
        self.inner.devices()
    }
    fn compile(&self, onnx: &[u8], pu: &bident_backend::PuSpec) -> Result<Exe, bident_backend::BackendError> {
        Ok((self.wrap)(self.inner.compile(onnx, pu)?, pu))
    }
    fn compile_profiled(&self, onnx: &[u8], pu: &bident_backend::PuSpec) -> Result<Exe, bident_backend::BackendError> {
        Ok((self.wrap)(self.inner.compile_profiled(onnx, pu)?, pu))
    }
    fn timing_meaning(&self, pu: &bident_backend::PuSpec) -> String {
        self.inner.timing_meaning(pu)
    }
    fn quiet(&self, pu: &bident_backend::PuSpec) -> bident_backend::PuSpec {
        self.inner.quiet(pu)
    }
}
