//! bident-runtime: executes a plan on real PUs, checks its outputs against the whole model run
//! monolithically, and measures both.
//!
//! One worker thread per PU, pinned to the PU's cores; every sub-model is compiled on its
//! worker before the first inference (compile time is reported apart). Ops run in plan order;
//! tensors are handed between workers by reference counting, not copied.
//!
//! Owns the `RunReport` artifact. Written against `bident_backend::Backend` only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bident_artifact::{Artifact, ContentHash};
use bident_backend::{Backend, BackendError, Executable, PuSpec, SocSpec};
use bident_ir::{Extractor, FusedGraph, TensorId};
use bident_search::Plan;
use bident_tensor::HostTensor;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub warmup: u32,
    pub runs: u32,
    /// Seed of the random model inputs.
    pub seed: u64,
    /// How long one op may take before the run is abandoned.
    pub op_timeout: Duration,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self { warmup: 3, runs: 20, seed: 0, op_timeout: Duration::from_secs(60) }
    }
}

/// Measured time of one op in the plan (median over runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTiming {
    pub op: u32,
    pub pu: String,
    pub predicted_us: f64,
    pub measured_us: f64,
}

/// What a run measured, beside what the plan predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub model: String,
    pub soc: String,
    /// Always false here: a run is a measurement. Kept so every report states it.
    pub simulated: bool,
    pub measured_on: String,
    pub backend: String,
    pub runs: u32,
    pub compile_ms: f64,
    pub predicted_us: f64,
    /// Median end-to-end latency of the plan.
    pub measured_us: f64,
    pub measured_p10_us: f64,
    pub measured_p90_us: f64,
    pub best_single_pu: String,
    /// Median latency of the whole (reference) model compiled on the best single PU.
    pub measured_best_single_pu_us: f64,
    /// Largest absolute difference between the plan's outputs and the monolithic run's.
    pub max_abs_err: f64,
    pub ops: Vec<OpTiming>,
}

impl Artifact for RunReport {
    const KIND: &'static str = "run-report";
    const SCHEMA_VERSION: u32 = 1;
}

impl RunReport {
    pub fn measured_speedup(&self) -> f64 {
        self.measured_best_single_pu_us / self.measured_us
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("plan is for graph {plan} but the fused graph is {graph}; rerun the search")]
    Mismatch { plan: String, graph: String },
    #[error("plan maps op {op} to PU `{pu}`, which SoC `{soc}` does not have")]
    UnknownPu { op: u32, pu: String, soc: String },
    #[error("op {op} `{name}` on PU `{pu}`")]
    Op {
        op: u32,
        name: String,
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("whole model on PU `{pu}`")]
    Monolithic {
        pu: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("PU `{pu}`: worker stopped or timed out after {secs} s")]
    Worker { pu: String, secs: u64 },
    #[error("plan has no best single PU (every PU lacks some op)")]
    NoBaseline,
    #[error("outputs differ from the monolithic run: {0}")]
    Outputs(String),
    #[error("op {op} `{name}`: the backend gives {got} for `{tensor}`, bident inferred {want}")]
    OpOutput { op: u32, name: String, tensor: String, got: String, want: String },
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
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
    for (i, op) in g.ops.iter().enumerate() {
        let fail = |source| RuntimeError::Op {
            op: i as u32,
            name: op.name.clone(),
            pu: pu.name.clone(),
            source: Box::new(source),
        };
        let mut exe = backend.compile(&ex.extract(i as u32)?, pu).map_err(fail)?;
        let ins: Vec<&HostTensor> = op.inputs.iter().map(|t| &env[t]).collect();
        let outs = exe.run(&ins).map_err(fail)?;
        for (&t, o) in op.outputs.iter().zip(outs) {
            let want = g.tensor(t);
            if o.shape != want.shape || o.dtype != want.dtype {
                return Err(RuntimeError::OpOutput {
                    op: i as u32,
                    name: op.kind.clone(),
                    tensor: want.name.clone(),
                    got: format!("{}{:?}", o.dtype, o.shape),
                    want: format!("{}{:?}", want.dtype, want.shape),
                });
            }
            env.insert(t, o);
        }
    }
    Ok(g.outputs.iter().map(|t| env[t].clone()).collect())
}

type Job = Box<dyn FnOnce(&mut HashMap<u32, Box<dyn Executable>>) + Send>;

/// A thread pinned to one PU, owning the executables compiled for it.
struct Worker {
    pu: String,
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// Set when a job outlived its timeout: the thread is abandoned, never joined.
    hung: std::cell::Cell<bool>,
}

impl Worker {
    fn spawn(pu: &PuSpec) -> Result<Self, RuntimeError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let spec = pu.clone();
        let handle = std::thread::Builder::new()
            .name(format!("pu-{}", pu.name))
            .spawn(move || {
                let pinned = bident_backend::pin_current_thread(&spec.name, &spec.cores);
                let ok = pinned.is_ok();
                let _ = ready_tx.send(pinned);
                if !ok {
                    return;
                }
                let mut exes: HashMap<u32, Box<dyn Executable>> = HashMap::new();
                while let Ok(job) = rx.recv() {
                    job(&mut exes);
                }
            })
            .map_err(|_| RuntimeError::Worker { pu: pu.name.clone(), secs: 0 })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self { pu: pu.name.clone(), tx: Some(tx), handle: Some(handle), hung: false.into() }),
            Ok(Err(e)) => {
                Err(RuntimeError::Op { op: 0, name: "<pinning>".into(), pu: pu.name.clone(), source: Box::new(e) })
            }
            Err(_) => Err(RuntimeError::Worker { pu: pu.name.clone(), secs: 0 }),
        }
    }

    /// Run `f` on the worker and wait for its answer.
    fn call<R: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&mut HashMap<u32, Box<dyn Executable>>) -> R + Send + 'static,
    ) -> Result<R, RuntimeError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |exes| {
            let _ = tx.send(f(exes));
        });
        let lost = || RuntimeError::Worker { pu: self.pu.clone(), secs: timeout.as_secs() };
        self.tx.as_ref().ok_or_else(lost)?.send(job).map_err(|_| lost())?;
        rx.recv_timeout(timeout).map_err(|_| {
            self.hung.set(true);
            lost()
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take()
            && !self.hung.get()
        {
            let _ = h.join();
        }
    }
}

/// Key under which the monolithic model is kept on its worker.
const WHOLE: u32 = u32::MAX;

/// Execute `plan` and the monolithic baseline, `cfg.runs` times each, with the same inputs.
pub fn run(
    g: &FusedGraph,
    plan: &Plan,
    soc: &SocSpec,
    backend: Arc<dyn Backend>,
    cfg: &RunConfig,
) -> Result<RunReport, RuntimeError> {
    let graph_hash = g.content_hash()?;
    if plan.graph != graph_hash {
        return Err(RuntimeError::Mismatch { plan: plan.graph.short(), graph: graph_hash.short() });
    }
    let pu_of = |name: &str, op: u32| {
        soc.pus.iter().position(|p| p.name == name).ok_or_else(|| RuntimeError::UnknownPu {
            op,
            pu: name.into(),
            soc: soc.name.clone(),
        })
    };
    let best = plan.best_single_pu.clone().ok_or(RuntimeError::NoBaseline)?;
    let best_idx = pu_of(&best, WHOLE)?;
    let mut workers: HashMap<usize, Worker> = HashMap::new();
    for s in &plan.steps {
        let j = pu_of(&s.pu, s.op)?;
        if let std::collections::hash_map::Entry::Vacant(e) = workers.entry(j) {
            e.insert(Worker::spawn(&soc.pus[j])?);
        }
    }
    if let std::collections::hash_map::Entry::Vacant(e) = workers.entry(best_idx) {
        e.insert(Worker::spawn(&soc.pus[best_idx])?);
    }

    // compile everything up front
    let t0 = Instant::now();
    let ex = Extractor::new(g)?;
    for s in &plan.steps {
        let j = pu_of(&s.pu, s.op)?;
        let onnx = ex.extract(s.op)?;
        let (be, spec, op) = (backend.clone(), soc.pus[j].clone(), s.op);
        workers[&j]
            .call(cfg.op_timeout, move |exes| be.compile(&onnx, &spec).map(|e| exes.insert(op, e)).map(|_| ()))?
            .map_err(|e| RuntimeError::Op { op: s.op, name: s.name.clone(), pu: s.pu.clone(), source: Box::new(e) })?;
    }
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    {
        let (be, spec, bytes) = (backend.clone(), soc.pus[best_idx].clone(), g.reference_model()?);
        workers[&best_idx]
            .call(cfg.op_timeout, move |exes| be.compile(&bytes, &spec).map(|e| exes.insert(WHOLE, e)).map(|_| ()))?
            .map_err(|e| RuntimeError::Monolithic { pu: best.clone(), source: Box::new(e) })?;
    }

    let inputs: Vec<Arc<HostTensor>> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = g.tensor(t);
            Arc::new(match g.input_values.get(&t.name) {
                Some(v) => v.to_host(),
                None => HostTensor::seeded(t.dtype, t.shape.clone(), cfg.seed.wrapping_add(k as u64)),
            })
        })
        .collect();

    let mut totals = vec![];
    let mut per_op: Vec<Vec<f64>> = vec![vec![]; plan.steps.len()];
    let mut outputs = vec![];
    for r in 0..cfg.warmup + cfg.runs.max(1) {
        let (outs, total, op_times) = run_plan_once(g, plan, &workers, &inputs, cfg, &pu_of)?;
        if r >= cfg.warmup {
            totals.push(total);
            for (k, t) in op_times.into_iter().enumerate() {
                per_op[k].push(t);
            }
        }
        outputs = outs;
    }
    let mut mono_times = vec![];
    let mut mono_out = (vec![], vec![]);
    for r in 0..cfg.warmup + cfg.runs.max(1) {
        let ins: Vec<Arc<HostTensor>> = inputs.clone();
        let names: Vec<String> = g.inputs.iter().map(|&t| g.tensor(t).name.clone()).collect();
        let (outs, us) = workers[&best_idx]
            .call(cfg.op_timeout, move |exes| {
                let exe = exes.get_mut(&WHOLE).expect("compiled above");
                let named: Vec<(&str, &HostTensor)> =
                    names.iter().map(String::as_str).zip(ins.iter().map(|t| t.as_ref())).collect();
                let refs = bident_backend::feed_order(exe.inputs(), &named)
                    .unwrap_or_else(|| ins.iter().map(|t| t.as_ref()).collect());
                let out_names: Vec<String> = exe.outputs().iter().map(|p| p.name.clone()).collect();
                let t = Instant::now();
                let out = exe.run(&refs);
                out.map(|o| ((o, out_names), t.elapsed().as_secs_f64() * 1e6))
            })?
            .map_err(|e| RuntimeError::Monolithic { pu: best.clone(), source: Box::new(e) })?;
        if r >= cfg.warmup {
            mono_times.push(us);
        }
        mono_out = outs;
    }
    let max_abs_err = compare(g, &outputs, &mono_out)?;
    let q = bident_profile::quantile;
    Ok(RunReport {
        model: g.name.clone(),
        soc: soc.name.clone(),
        simulated: false,
        measured_on: bident_profile::host_description(),
        backend: format!("{} {}", backend.name(), backend.version()),
        runs: cfg.runs.max(1),
        compile_ms,
        predicted_us: plan.predicted_us,
        measured_us: q(&mut totals.clone(), 0.5),
        measured_p10_us: q(&mut totals.clone(), 0.1),
        measured_p90_us: q(&mut totals, 0.9),
        best_single_pu: best,
        measured_best_single_pu_us: q(&mut mono_times, 0.5),
        max_abs_err,
        ops: plan
            .steps
            .iter()
            .zip(per_op)
            .map(|(s, mut t)| OpTiming {
                op: s.op,
                pu: s.pu.clone(),
                predicted_us: s.exec_us + s.transfer_in_us + s.transfer_out_us,
                measured_us: q(&mut t, 0.5),
            })
            .collect(),
    })
}

type RunOnce = (Vec<Arc<HostTensor>>, f64, Vec<f64>);
type Env = HashMap<TensorId, Arc<HostTensor>>;

/// One inference through the plan. Consecutive steps on the same PU go to its worker as one
/// job, so a hand-off between threads is paid only where the plan changes PU.
fn run_plan_once(
    g: &FusedGraph,
    plan: &Plan,
    workers: &HashMap<usize, Worker>,
    inputs: &[Arc<HostTensor>],
    cfg: &RunConfig,
    pu_of: &dyn Fn(&str, u32) -> Result<usize, RuntimeError>,
) -> Result<RunOnce, RuntimeError> {
    let mut env: Env = g.inputs.iter().copied().zip(inputs.iter().cloned()).collect();
    let mut op_times = Vec::with_capacity(plan.steps.len());
    let start = Instant::now();
    let mut k = 0;
    while k < plan.steps.len() {
        let pu = &plan.steps[k].pu;
        let end = plan.steps[k..].iter().position(|s| &s.pu != pu).map_or(plan.steps.len(), |n| k + n);
        let segment: Vec<(u32, Vec<TensorId>, Vec<TensorId>)> = plan.steps[k..end]
            .iter()
            .map(|s| {
                let op = &g.ops[s.op as usize];
                (s.op, op.inputs.clone(), op.outputs.clone())
            })
            .collect();
        let worker = &workers[&pu_of(pu, plan.steps[k].op)?];
        let env_in = std::mem::take(&mut env);
        let (env_out, times) =
            worker.call(cfg.op_timeout, move |exes| run_segment(exes, env_in, &segment))?.map_err(|(i, source)| {
                let s = &plan.steps[k + i];
                RuntimeError::Op { op: s.op, name: s.name.clone(), pu: s.pu.clone(), source: Box::new(source) }
            })?;
        env = env_out;
        op_times.extend(times);
        k = end;
    }
    let total = start.elapsed().as_secs_f64() * 1e6;
    let outs = g.outputs.iter().map(|t| env[t].clone()).collect();
    Ok((outs, total, op_times))
}

/// Runs on a worker: the segment's ops in order; on failure, the index of the op that failed.
#[allow(clippy::type_complexity)]
fn run_segment(
    exes: &mut HashMap<u32, Box<dyn Executable>>,
    mut env: Env,
    segment: &[(u32, Vec<TensorId>, Vec<TensorId>)],
) -> Result<(Env, Vec<f64>), (usize, BackendError)> {
    let mut times = Vec::with_capacity(segment.len());
    for (i, (op, ins, outs)) in segment.iter().enumerate() {
        let t = Instant::now();
        let refs: Vec<&HostTensor> = ins.iter().map(|t| env[t].as_ref()).collect();
        let exe = exes.get_mut(op).expect("compiled at load");
        let produced = exe.run(&refs).map_err(|e| (i, e))?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        for (&t, o) in outs.iter().zip(produced) {
            env.insert(t, Arc::new(o));
        }
    }
    Ok((env, times))
}

/// Largest absolute difference over all outputs, matched by name (by position where the
/// backend renamed them).
fn compare(
    g: &FusedGraph,
    got: &[Arc<HostTensor>],
    want: &(Vec<HostTensor>, Vec<String>),
) -> Result<f64, RuntimeError> {
    let (want, names) = want;
    if got.len() != want.len() {
        return Err(RuntimeError::Outputs(format!("plan gives {} outputs, the model {}", got.len(), want.len())));
    }
    let mut worst = 0.0f64;
    for (k, a) in got.iter().enumerate() {
        let name = &g.tensor(g.outputs[k]).name;
        let b = names.iter().position(|n| n == name).map_or(&want[k], |i| &want[i]);
        let d = a
            .max_abs_diff(b)
            .map_err(|e| RuntimeError::Outputs(format!("output `{}`: {e}", g.tensor(g.outputs[k]).name)))?;
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Input hash of a run report: the plan it executed.
pub fn input_hash(plan_hash: ContentHash, cfg: &RunConfig) -> ContentHash {
    ContentHash::of_parts(&[&plan_hash.0, format!("{cfg:?}").as_bytes()])
}
