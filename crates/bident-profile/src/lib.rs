//! bident-profile: the cost table (paper 3.1).
//!
//! For each PU of a SoC in turn, on a thread pinned to the PU's cores: compile every extracted
//! fused op, then time rounds in which each op runs once, and keep medians (see [`profile`]).
//! An op a PU cannot compile or run gets no entry there, with the backend's reason kept.
//!
//! Owns the `CostTable` artifact. Written against `bident_backend::Backend` only: which backend
//! measures is the caller's choice. Must not: decide mappings (that is bident-search).

pub mod cache;
pub mod coexec;
pub mod contention;
pub mod portable;
pub mod power;
pub mod simulate;

use bident_artifact::{Artifact, ContentHash};
use bident_backend::{Backend, BackendError, Executable, PuSpec, SocSpec};
use bident_ir::{BackendLayer, Extractor, FusedGraph, OpId, TensorId};
use bident_tensor::HostTensor;
use serde::{Deserialize, Serialize};

/// Where a power figure comes from. `Measured` is the package's average power (RAPL) while the
/// PU's ops were being timed; `Declared` is the SoC spec's figure; `Simulated` a virtual SoC's
/// model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerSource {
    /// Declared in the SoC spec, not measured.
    Declared,
    Measured,
    Simulated,
}

/// Cross-PU contention (paper 3.2.2): `sf[i][j]` is the slowdown factor of an op on PU i while
/// PU j runs another op at the same time (1 = no interference; the diagonal is 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// Indexed like `CostTable::soc.pus`, both ways.
    pub sf: Vec<Vec<f64>>,
    pub source: ContentionSource,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentionSource {
    /// Barrier-synchronised co-runs on this machine: each probe op timed alone and while another
    /// PU runs its own copy; `sf` is the median over probes of (co-run median / solo median).
    Measured {
        probes: Vec<String>,
        runs: u32,
        /// `by_probe[p][i][j]`: the factor probe p gave (`sf` is the median over probes).
        by_probe: Vec<Vec<Vec<f64>>>,
    },
    /// A virtual SoC's model.
    Simulated,
}

/// Profiled cost of one fused op on one PU. Times in microseconds: medians of `runs` runs, with
/// p10/p90 in `p10_us`/`p90_us` (ordered h2d, dispatch, exec, d2h).
///
/// What each part means on an OpenVINO CPU PU (unified memory, no copies to a device):
/// - `h2d_us`: wrapping the host input buffers as tensors and setting them on the request;
/// - `exec_us`: the backend's own per-layer times for the infer call (PERF_COUNT), summed;
/// - `dispatch_us`: the rest of the synchronous infer call (submission, scheduling, layout
///   reorders the backend does not attribute to a layer); where a backend gives no per-layer
///   times, 0, and `exec_us` is the whole call;
/// - `d2h_us`: reading each output's shape and copying its bytes back into host memory.
///
/// The paper's node weight w(O, P) is [`Cost::weight_us`], dispatch plus execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub h2d_us: f64,
    pub dispatch_us: f64,
    pub exec_us: f64,
    pub d2h_us: f64,
    pub p10_us: [f64; 4],
    pub p90_us: [f64; 4],
    pub runs: u32,
    pub power_w: f64,
    pub power: PowerSource,
    /// With `--fixed-runs` only: where the adaptive stop would have ended, for validating it.
    pub stop_check: Option<StopCheck>,
}

/// The adaptive stopping rule replayed on a fixed-count measurement: the rule sees the runs in
/// the order they were made and stops at the first count where it would have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StopCheck {
    /// Runs the adaptive stop would have made (all of them if it never stopped).
    pub runs: u32,
    /// Median of dispatch + execution over those runs, µs.
    pub median_us: f64,
    /// Median of dispatch + execution over all runs, µs.
    pub full_median_us: f64,
}

/// Replay the adaptive rule on `w` (dispatch + execution per run, in run order).
pub fn replay_stop(w: &[f64], cfg: &ProfileConfig) -> StopCheck {
    let median = |xs: &[f64]| {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let first = (cfg.min_runs.max(3) as usize).min(w.len());
    let stop = (first..=w.len())
        .find(|&k| {
            let mut v = w[..k].to_vec();
            v.sort_by(f64::total_cmp);
            median_rel_ci(&v) <= cfg.rel_ci
        })
        .unwrap_or(w.len());
    StopCheck { runs: stop as u32, median_us: median(&w[..stop]), full_median_us: median(w) }
}

impl Cost {
    /// w(O, P): what running the op on its PU costs, dispatch and execution.
    pub fn weight_us(&self) -> f64 {
        self.dispatch_us + self.exec_us
    }
}

/// A run of neighbours in the execution order compiled and run as one sub-model, per PU (None
/// where it was not measured or failed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentCost {
    pub ops: Vec<OpId>,
    pub per_pu: Vec<Option<Cost>>,
}

/// One op's row of the table: a cost per PU (None where it failed, with the reason).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpCosts {
    pub op: OpId,
    pub name: String,
    pub kind: String,
    /// Indexed like `CostTable::soc.pus`.
    pub per_pu: Vec<Option<Cost>>,
    /// `(pu, reason)` for each PU without an entry.
    pub failures: Vec<(String, String)>,
}

impl OpCosts {
    /// Op `op`'s row from its result on each PU of `soc` (in order): a cost, or why the PU has
    /// none. An op no PU can run is an error naming it and every PU's reason.
    pub fn from_results(
        g: &FusedGraph,
        op: OpId,
        soc: &SocSpec,
        results: impl Iterator<Item = Result<Cost, String>>,
    ) -> Result<OpCosts, ProfileError> {
        let o = &g.ops[op as usize];
        let mut per_pu = vec![];
        let mut failures = vec![];
        for (pu, r) in soc.pus.iter().zip(results) {
            match r {
                Ok(c) => per_pu.push(Some(c)),
                Err(reason) => {
                    per_pu.push(None);
                    failures.push((pu.name.clone(), reason));
                }
            }
        }
        if per_pu.iter().all(Option::is_none) {
            return Err(ProfileError::NoPu {
                op,
                name: o.name.clone(),
                kind: o.kind.clone(),
                soc: soc.name.clone(),
                reasons: failures.iter().map(|(p, r)| format!("{p}: {r}")).collect::<Vec<_>>().join("; "),
            });
        }
        Ok(OpCosts { op, name: o.name.clone(), kind: o.kind.clone(), per_pu, failures })
    }
}

/// The cost table of one model on one SoC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostTable {
    pub model: String,
    /// Payload hash of the fused graph profiled.
    pub graph: ContentHash,
    pub soc: SocSpec,
    /// True when the costs come from a model of a SoC rather than measurement.
    pub simulated: bool,
    /// Backend names and versions that measured, one per distinct backend of the PUs
    /// (`openvino 2026.4.1 + onnxruntime 1.32.0`).
    pub backend: String,
    /// The machine the figures were measured on.
    pub measured_on: String,
    pub warmup: u32,
    /// Per PU (indexed like `soc.pus`): what h2d, dispatch, exec and d2h stand for there.
    pub components: Vec<String>,
    /// Per PU: true where every op call pays its H2D and D2H, because the runtime hands each op
    /// host tensors (bident's runtime on real PUs); false where tensors stay on the PU between
    /// its ops and transfers are paid only where data crosses PUs (the paper's model; the
    /// virtual SoC).
    pub io_every_call: Vec<bool>,
    /// Runs of consecutive ops (in the execution order) measured compiled as one sub-model (the
    /// backend fuses across them and keeps its own layout between them): pairs of neighbours on
    /// every PU, and the longer segments of plans on the PU the plan puts them on.
    pub segments: Vec<SegmentCost>,
    /// Cross-PU slowdown factors, when measured or modelled.
    pub contention: Option<Contention>,
    pub ops: Vec<OpCosts>,
}

impl Artifact for CostTable {
    const KIND: &'static str = "cost-table";
    const SCHEMA_VERSION: u32 = 7;
}

impl CostTable {
    pub fn cost(&self, op: OpId, pu: usize) -> Option<&Cost> {
        self.ops.get(op as usize).and_then(|o| o.per_pu.get(pu)).and_then(Option::as_ref)
    }

    /// PU `pu`'s figures (every op's and segment's time and its spread) as if it ran `factor`
    /// times slower, as a serving session measured it drift; energy follows through time.
    pub fn scale_pu(&mut self, pu: usize, factor: f64) {
        let scale = |c: &mut Cost| {
            for t in [&mut c.h2d_us, &mut c.dispatch_us, &mut c.exec_us, &mut c.d2h_us] {
                *t *= factor;
            }
            for t in c.p10_us.iter_mut().chain(c.p90_us.iter_mut()) {
                *t *= factor;
            }
        };
        let rows = self.ops.iter_mut().map(|o| &mut o.per_pu).chain(self.segments.iter_mut().map(|s| &mut s.per_pu));
        for row in rows {
            if let Some(Some(c)) = row.get_mut(pu) {
                scale(c);
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfileConfig {
    pub warmup: u32,
    /// Measured runs per (op, PU): the cap when `adaptive`, else exactly this many.
    pub runs: u32,
    /// Stop measuring an op once the 95% confidence interval of its median (dispatch +
    /// execution) is within `rel_ci` of the median, after at least `min_runs` runs.
    pub adaptive: bool,
    pub min_runs: u32,
    pub rel_ci: f64,
    /// Seed of the random op inputs.
    pub seed: u64,
    /// Runs of ops (neighbours in the execution order, usually pairs) also measured compiled
    /// together on every PU, as the runtime runs them when a plan puts them on one PU
    /// (`CostTable::segments`).
    pub segments: Vec<Vec<OpId>>,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        // the paper's protocol: 20 warm-up and at most 200 measured runs. The 40-run minimum is
        // measured (`--fixed-runs` replays the rule): with a minimum of 10 or 20 the interval
        // closes on a lucky streak and up to a third of the medians land >3% off the 200-run
        // median; with 40 all of them were within 3% on the example on `cores`.
        Self { warmup: 20, runs: 200, adaptive: true, min_runs: 40, rel_ci: 0.03, seed: 0, segments: vec![] }
    }
}

/// Half-width of the distribution-free 95% confidence interval of the median of `sorted`
/// (order statistics n/2 -+ 0.98 sqrt(n)), relative to the median.
pub fn median_rel_ci(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n < 3 {
        return f64::INFINITY;
    }
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    let median = sorted[n / 2];
    if median <= 0.0 {
        return if sorted[hi] <= sorted[lo] { 0.0 } else { f64::INFINITY };
    }
    (sorted[hi] - sorted[lo]) / 2.0 / median
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
    #[error("op {op} `{name}` ({kind}) runs on no PU of SoC `{soc}`: {reasons}")]
    NoPu { op: OpId, name: String, kind: String, soc: String, reasons: String },
    #[error("SoC `{soc}`, PU `{pu}`: {source}")]
    WrongBackend { soc: String, pu: String, source: Box<BackendError> },
    #[error("a profiling thread for PU `{0}` panicked")]
    Worker(String),
    #[error("{origin}: {reason}")]
    Portable { origin: String, reason: String },
    #[error("the cost table of `{model}` does not fit: {reason}")]
    Mismatch { model: String, reason: String },
    #[error("measuring contention on PU `{pu}`")]
    Contention { pu: String, source: BackendError },
    #[error("profiling the whole model on reference PU `{pu}`")]
    Reference { pu: String, source: BackendError },
}

/// The backend's own grouping of `g`'s lowered model: compile it whole on `pu` with per-layer
/// profiling, run it once, and return the layers with the nodes fused into each (the input of
/// backend-true fusion, `bident_ir::Fusion::Backend`).
pub fn backend_layers(backend: &dyn Backend, g: &FusedGraph, pu: &PuSpec) -> Result<Vec<BackendLayer>, ProfileError> {
    let fail = |source| ProfileError::Reference { pu: pu.name.clone(), source };
    let mut exe = backend.compile_profiled(&g.lowered_model()?, pu).map_err(fail)?;
    let inputs = g.example_inputs(0);
    let named: Vec<(&str, &HostTensor)> = g.inputs.iter().map(|&t| g.tensor(t).name.as_str()).zip(&inputs).collect();
    let fed = bident_backend::feed_order(exe.inputs(), &named).ok_or_else(|| {
        fail(BackendError::BadInput {
            pu: pu.name.clone(),
            index: 0,
            name: exe.inputs().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            reason: format!("the compiled model's inputs do not match the graph's {}", inputs.len()),
        })
    })?;
    exe.run(&fed).map_err(fail)?;
    Ok(exe
        .layers()
        .map_err(fail)?
        .into_iter()
        .map(|l| BackendLayer { name: l.name, layer_type: l.layer_type, fused: l.fused })
        .collect())
}

/// Progress of a profiling run, for the caller to display.
pub struct Progress<'a> {
    pub pu: &'a str,
    /// What is happening: `compiling` or `timing`.
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
}

/// Profile every op of `g` on every PU of `soc`.
///
/// Protocol, per PU in turn (never two PUs at once, so they do not disturb each other): on a
/// thread pinned to the PU's cores, compile every op, then run `warmup + runs` rounds, each
/// round executing every op once in the graph's order with seeded inputs. Timing ops in rounds
/// rather than each op back to back keeps caches and the backend's threads in the state the
/// runtime meets them in.
///
/// With a `cache`, an (op, PU) pair measured before under the same conditions (see
/// [`cache::CostCache::key`]) is taken from it and not measured; what is measured is stored.
pub fn profile(
    g: &FusedGraph,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &ProfileConfig,
    cache: Option<&cache::CostCache>,
    progress: &mut dyn FnMut(Progress),
) -> Result<CostTable, ProfileError> {
    let described = describe(backend, soc)?;
    // the units timed: every op, then every segment compiled together, on every PU
    let ex = Extractor::new(g)?;
    let mut units: Vec<Unit> = Vec::with_capacity(g.ops.len() + cfg.segments.len());
    for (i, op) in g.ops.iter().enumerate() {
        units.push(Unit { model: ex.extract(i as OpId)?, inputs: seeded_inputs(g, &op.inputs, cfg.seed, i) });
    }
    for (k, ops) in cfg.segments.iter().enumerate() {
        let (model, ins, _) = ex.extract_group(ops)?;
        units.push(Unit { model, inputs: seeded_inputs(g, &ins, cfg.seed, g.ops.len() + k) });
    }
    let mut columns = measure_units(backend, soc, &units, &|_, _| true, cfg, cache, progress)?;
    let mut take = |i: usize| -> Vec<Result<Cost, String>> {
        columns.iter_mut().map(|col| col[i].take().unwrap_or_else(|| Err("not measured".into()))).collect()
    };
    let mut ops = Vec::with_capacity(g.ops.len());
    for i in 0..g.ops.len() {
        ops.push(OpCosts::from_results(g, i as OpId, soc, take(i).into_iter())?);
    }
    let segments = cfg
        .segments
        .iter()
        .enumerate()
        .map(|(k, ops)| SegmentCost {
            ops: ops.clone(),
            per_pu: take(g.ops.len() + k).into_iter().map(Result::ok).collect(),
        })
        .collect();
    Ok(CostTable {
        model: g.name.clone(),
        graph: g.content_hash()?,
        soc: soc.clone(),
        simulated: soc.simulated,
        backend: described,
        measured_on: host_description(),
        warmup: cfg.warmup,
        io_every_call: vec![true; soc.pus.len()],
        segments,
        components: soc
            .pus
            .iter()
            .map(|pu| {
                format!(
                    "{}; dispatch = infer minus the sum of the backend's per-layer times (PERF_COUNT), exec = \
                     that sum (where the backend gives no layer times: dispatch 0, exec = infer)",
                    backend.timing_meaning(pu)
                )
            })
            .collect(),
        contention: None,
        ops,
    })
}

/// What measured (or runs) `soc`'s PUs: each distinct backend's name and version in the order of
/// the PUs, e.g. `openvino 2026.4.1 + onnxruntime 1.32.0`; a PU naming a backend that `backend`
/// does not have is an error.
pub fn describe(backend: &dyn Backend, soc: &SocSpec) -> Result<String, ProfileError> {
    let mut ids: Vec<String> = vec![];
    for pu in &soc.pus {
        let id = backend.backend_id(&pu.backend).map_err(|source| ProfileError::WrongBackend {
            soc: soc.name.clone(),
            pu: pu.name.clone(),
            source: Box::new(source),
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids.join(" + "))
}

/// A sub-model to time and the inputs to time it with.
struct Unit {
    model: Vec<u8>,
    inputs: Vec<HostTensor>,
}

fn seeded_inputs(g: &FusedGraph, ins: &[TensorId], seed: u64, unit: usize) -> Vec<HostTensor> {
    ins.iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = g.tensor(t);
            HostTensor::seeded(t.dtype, t.shape.clone(), seed ^ ((unit as u64) << 16) ^ k as u64)
        })
        .collect()
}

/// One PU's results per unit: a cost or why not, None where not asked.
type Column = Vec<Option<Result<Cost, String>>>;

/// Time `units` on the PUs of `soc` (`on(unit, pu)`: whether to), PU by PU, through the cache:
/// `columns[pu][unit]`, None where not asked.
fn measure_units(
    backend: &dyn Backend,
    soc: &SocSpec,
    units: &[Unit],
    on: &dyn Fn(usize, usize) -> bool,
    cfg: &ProfileConfig,
    cache: Option<&cache::CostCache>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Column>, ProfileError> {
    let machine = host_description();
    let mut columns = Vec::with_capacity(soc.pus.len());
    for (j, pu) in soc.pus.iter().enumerate() {
        // the PU's own backend: adding a backend to a SoC keeps the other PUs' cached costs
        let backend_id = backend.backend_id(&pu.backend).map_err(|source| ProfileError::WrongBackend {
            soc: soc.name.clone(),
            pu: pu.name.clone(),
            source: Box::new(source),
        })?;
        let asked: Vec<usize> = (0..units.len()).filter(|&i| on(i, j)).collect();
        let key = |i: usize| cache::CostCache::key(&units[i].model, &units[i].inputs, pu, &backend_id, &machine, cfg);
        let mut column: Column = vec![None; units.len()];
        if let Some(c) = cache {
            for &i in &asked {
                column[i] = key(i).and_then(|k| c.get(k));
            }
        }
        let todo: Vec<usize> = asked.iter().copied().filter(|&i| column[i].is_none()).collect();
        if cache.is_some() {
            progress(Progress { pu: &pu.name, phase: "cached", done: asked.len() - todo.len(), total: asked.len() });
        }
        if !todo.is_empty() {
            let models: Vec<&[u8]> = todo.iter().map(|&i| units[i].model.as_slice()).collect();
            let inputs: Vec<&[HostTensor]> = todo.iter().map(|&i| units[i].inputs.as_slice()).collect();
            match profile_pu(backend, pu, &models, &inputs, cfg, progress)? {
                Ok(measured) => {
                    for (&i, r) in todo.iter().zip(measured) {
                        if let (Some(c), Some(k)) = (cache, key(i)) {
                            c.put(k, &r);
                        }
                        column[i] = Some(r);
                    }
                }
                // the PU itself is unusable (e.g. cannot pin): every unit fails there with that
                // reason, and nothing is cached
                Err(reason) => todo.iter().for_each(|&i| column[i] = Some(Err(reason.clone()))),
            }
        }
        columns.push(column);
    }
    Ok(columns)
}

/// Measure runs of ops compiled together, each on one PU (`wanted`: ops in execution order,
/// PU index), under the profile's protocol and cache: what a plan's segments really cost.
pub fn measure_segments(
    g: &FusedGraph,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &ProfileConfig,
    cache: Option<&cache::CostCache>,
    wanted: &[(Vec<OpId>, usize)],
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<SegmentCost>, ProfileError> {
    let ex = Extractor::new(g)?;
    let mut units = Vec::with_capacity(wanted.len());
    for (k, (ops, _)) in wanted.iter().enumerate() {
        let (model, ins, _) = ex.extract_group(ops)?;
        units.push(Unit { model, inputs: seeded_inputs(g, &ins, cfg.seed, g.ops.len() + k) });
    }
    let columns = measure_units(backend, soc, &units, &|i, j| wanted[i].1 == j, cfg, cache, progress)?;
    Ok(wanted
        .iter()
        .enumerate()
        .map(|(k, (ops, _))| SegmentCost {
            ops: ops.clone(),
            per_pu: columns.iter().map(|col| col[k].clone().and_then(Result::ok)).collect(),
        })
        .collect())
}

/// Profiled runs per op that split its inference call into dispatch and execution.
const SPLIT_RUNS: usize = 5;

/// One PU's column of the table: a cost, or the backend's reason, per op; `Err` when the PU
/// itself cannot be used.
fn profile_pu(
    backend: &dyn Backend,
    pu: &PuSpec,
    models: &[&[u8]],
    inputs: &[&[HostTensor]],
    cfg: &ProfileConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<Result<Vec<Result<Cost, String>>, String>, ProfileError> {
    let (tx, rx) = std::sync::mpsc::channel::<(&'static str, usize, usize)>();
    std::thread::scope(|s| {
        let worker = s.spawn(move || -> Result<Vec<Result<Cost, String>>, BackendError> {
            bident_backend::pin_current_thread(&pu.name, &pu.cores)?;
            let n = models.len();
            // timed: the plain executable (a backend's per-layer profiling may slow a run down,
            // ONNX Runtime's writes a file per run); the profiled one only splits the time into
            // dispatch and execution, from a few runs of its own
            let mut exes: Vec<Result<Box<dyn Executable>, String>> = Vec::with_capacity(n);
            let mut profiled: Vec<Option<Box<dyn Executable>>> = Vec::with_capacity(n);
            for (i, m) in models.iter().enumerate() {
                let _ = tx.send(("compiling", i, n));
                exes.push(backend.compile(m, pu).map_err(|e| e.to_string()));
                profiled.push(exes[i].is_ok().then(|| backend.compile_profiled(m, pu).ok()).flatten());
            }
            let cap = cfg.runs.max(1);
            let rounds = cfg.warmup + cap;
            let rapl = power::Rapl::open();
            let mut energy = None;
            // samples[i] = [h2d, infer, d2h] per measured run; split[i]: execution's share of a
            // profiled run's inference call
            let mut samples: Vec<[Vec<f64>; 3]> = vec![Default::default(); n];
            let mut split: Vec<Vec<f64>> = vec![vec![]; n];
            let mut failed: Vec<Option<String>> = vec![None; n];
            let mut done = vec![false; n];
            for r in 0..rounds {
                let _ = tx.send(("timing", r as usize, rounds as usize));
                if r == cfg.warmup {
                    energy = rapl.as_ref().and_then(power::Rapl::start);
                }
                for i in 0..n {
                    let Ok(exe) = exes[i].as_mut() else { continue };
                    if failed[i].is_some() || done[i] {
                        continue;
                    }
                    let refs: Vec<&HostTensor> = inputs[i].iter().collect();
                    if r >= cfg.warmup
                        && split[i].len() < SPLIT_RUNS
                        && let Some(p) = profiled[i].as_mut()
                        && let Ok((_, t)) = p.run_timed(&refs)
                        && let Ok(layers) = p.layers()
                    {
                        let infer = t.infer.as_secs_f64();
                        let exec: f64 = layers.iter().map(|l| l.real_time.as_secs_f64()).sum();
                        if infer > 0.0 && exec > 0.0 {
                            split[i].push((exec / infer).min(1.0));
                        }
                    }
                    match exe.run_timed(&refs) {
                        Ok((_, t)) if r >= cfg.warmup => {
                            let s = &mut samples[i];
                            s[0].push(t.h2d.as_secs_f64() * 1e6);
                            s[1].push(t.infer.as_secs_f64() * 1e6);
                            s[2].push(t.d2h.as_secs_f64() * 1e6);
                            if cfg.adaptive && s[1].len() as u32 >= cfg.min_runs.max(3) {
                                let mut w = s[1].clone();
                                w.sort_by(f64::total_cmp);
                                done[i] = median_rel_ci(&w) <= cfg.rel_ci;
                            }
                        }
                        Ok(_) => {}
                        Err(e) => failed[i] = Some(e.to_string()),
                    }
                }
                if r >= cfg.warmup
                    && done.iter().zip(&failed).zip(&exes).all(|((d, f), e)| *d || f.is_some() || e.is_err())
                {
                    break;
                }
            }
            let _ = tx.send(("timing", rounds as usize, rounds as usize));
            let measured_w = rapl.as_ref().zip(energy.as_ref()).and_then(|(r, e)| r.watts_since(e));
            Ok(exes
                .into_iter()
                .zip(samples)
                .zip(split)
                .zip(failed)
                .map(|(((exe, [h2d, infer, d2h]), mut split), failed)| {
                    exe?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    // without a profile the whole call counts as execution
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
                })
                .collect())
        });
        for (phase, done, total) in rx {
            progress(Progress { pu: &pu.name, phase, done, total });
        }
        match worker.join() {
            Ok(col) => Ok(col.map_err(|e| e.to_string())),
            Err(_) => Err(ProfileError::Worker(pu.name.clone())),
        }
    })
}

/// Quantile by nearest rank (sorts in place); 0 for an empty sample.
pub fn quantile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let k = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[k]
}

/// `<cpu model>, <n> cores` of this machine, for labelling measurements.
pub fn host_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}

/// Input hash of a cost table: the fused graph, the SoC and the protocol.
pub fn input_hash(
    graph: ContentHash,
    soc: &SocSpec,
    cfg: &ProfileConfig,
) -> Result<ContentHash, bident_artifact::ArtifactError> {
    ContentHash::of_value(&(graph, soc, cfg))
}

#[cfg(test)]
mod tests {
    use super::{median_rel_ci, quantile};

    /// The interval narrows as samples agree and as they accumulate.
    #[test]
    fn median_confidence_interval() {
        assert_eq!(median_rel_ci(&[1.0, 1.0]), f64::INFINITY);
        assert_eq!(median_rel_ci(&[5.0; 10]), 0.0);
        let spread: Vec<f64> = (0..10).map(|i| 100.0 + i as f64).collect();
        let wide = median_rel_ci(&spread);
        assert!(wide > 0.03 && wide < 0.05, "{wide}");
        let many: Vec<f64> = (0..200).map(|i| 100.0 + (i % 10) as f64).collect::<Vec<_>>();
        let mut many = many;
        many.sort_by(f64::total_cmp);
        assert!(median_rel_ci(&many) < wide);
    }

    /// Steady samples stop at the minimum; a noisy start keeps the rule going.
    #[test]
    fn stop_replay() {
        let cfg = super::ProfileConfig::default();
        let steady = vec![100.0; 200];
        let s = super::replay_stop(&steady, &cfg);
        assert_eq!((s.runs, s.median_us, s.full_median_us), (cfg.min_runs, 100.0, 100.0));
        let noisy: Vec<f64> = (0..200).map(|i| if i < 40 { 100.0 + (i % 7) as f64 * 10.0 } else { 100.0 }).collect();
        let s = super::replay_stop(&noisy, &cfg);
        assert!(s.runs > cfg.min_runs && s.runs <= 200, "{}", s.runs);
        assert_eq!(s.full_median_us, 100.0);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }
}
