//! bident-profile: the cost table (paper 3.1).
//!
//! For each PU of a SoC in turn, on a thread pinned to the PU's cores: compile every extracted
//! fused op, then time rounds in which each op runs once, and keep medians (see [`profile`]).
//! An op a PU cannot compile or run gets no entry there, with the backend's reason kept.
//!
//! Owns the `CostTable` artifact. Written against `bident_backend::Backend` only: which backend
//! measures is the caller's choice. Must not: decide mappings (that is bident-search).

use bident_artifact::{Artifact, ContentHash};
use bident_backend::{Backend, BackendError, Executable, PuSpec, SocSpec};
use bident_ir::{BackendLayer, Extractor, FusedGraph, OpId};
use bident_tensor::HostTensor;
use serde::{Deserialize, Serialize};

/// Where a power figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerSource {
    /// Declared in the SoC spec, not measured.
    Declared,
    Measured,
}

/// Profiled cost of one fused op on one PU. Times in microseconds, medians of `runs` runs.
///
/// On an OpenVINO CPU PU: `h2d_us` is wrapping and setting the input tensors, `exec_us` is the
/// synchronous infer call (dispatch and execution together), `d2h_us` is reading the outputs
/// back into host memory. The paper's node weight w(O, P) is `exec_us`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub h2d_us: f64,
    pub exec_us: f64,
    pub d2h_us: f64,
    pub exec_p10_us: f64,
    pub exec_p90_us: f64,
    pub runs: u32,
    pub power_w: f64,
    pub power: PowerSource,
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

/// The cost table of one model on one SoC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostTable {
    pub model: String,
    /// Payload hash of the fused graph profiled.
    pub graph: ContentHash,
    pub soc: SocSpec,
    /// True when the costs come from a model of a SoC rather than measurement.
    pub simulated: bool,
    /// Backend name and version that measured.
    pub backend: String,
    /// The machine the figures were measured on.
    pub measured_on: String,
    pub warmup: u32,
    pub ops: Vec<OpCosts>,
}

impl Artifact for CostTable {
    const KIND: &'static str = "cost-table";
    const SCHEMA_VERSION: u32 = 1;
}

impl CostTable {
    pub fn cost(&self, op: OpId, pu: usize) -> Option<&Cost> {
        self.ops.get(op as usize).and_then(|o| o.per_pu.get(pu)).and_then(Option::as_ref)
    }
}

#[derive(Clone, Debug)]
pub struct ProfileConfig {
    pub warmup: u32,
    pub runs: u32,
    /// Seed of the random op inputs.
    pub seed: u64,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        // the paper's protocol is 20 + 200; the skeleton keeps profiling quick
        Self { warmup: 5, runs: 30, seed: 0 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
    #[error("op {op} `{name}` ({kind}) runs on no PU of SoC `{soc}`: {reasons}")]
    NoPu { op: OpId, name: String, kind: String, soc: String, reasons: String },
    #[error("SoC `{soc}` is for backend `{wanted}`, but the backend given is `{got}`")]
    WrongBackend { soc: String, wanted: String, got: String },
    #[error("a profiling thread for PU `{0}` panicked")]
    Worker(String),
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
    // by name: a backend may drop inputs nothing reads (a pinned value that was folded away);
    // by position when a port goes by another of its tensor's names
    let by_name: Option<Vec<&HostTensor>> = exe
        .inputs()
        .iter()
        .map(|port| g.inputs.iter().position(|&t| g.tensor(t).name == port.name).map(|k| &inputs[k]))
        .collect();
    let fed = match by_name {
        Some(fed) => fed,
        None if exe.inputs().len() == inputs.len() => inputs.iter().collect(),
        None => {
            return Err(fail(BackendError::BadInput {
                pu: pu.name.clone(),
                index: 0,
                name: exe.inputs().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
                reason: format!("the compiled model's inputs do not match the graph's {}", inputs.len()),
            }));
        }
    };
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
pub fn profile(
    g: &FusedGraph,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &ProfileConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<CostTable, ProfileError> {
    if soc.backend != backend.name() {
        return Err(ProfileError::WrongBackend {
            soc: soc.name.clone(),
            wanted: soc.backend.clone(),
            got: backend.name().into(),
        });
    }
    let ex = Extractor::new(g)?;
    let models: Vec<Vec<u8>> = (0..g.ops.len()).map(|i| ex.extract(i as OpId)).collect::<Result<_, _>>()?;
    let inputs: Vec<Vec<HostTensor>> = g
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            op.inputs
                .iter()
                .enumerate()
                .map(|(k, &t)| {
                    let t = g.tensor(t);
                    HostTensor::seeded(t.dtype, t.shape.clone(), cfg.seed ^ ((i as u64) << 16) ^ k as u64)
                })
                .collect()
        })
        .collect();
    // per_pu[j][i]: op i on PU j
    let mut columns: Vec<Vec<Result<Cost, String>>> = Vec::with_capacity(soc.pus.len());
    for pu in &soc.pus {
        columns.push(profile_pu(backend, pu, &models, &inputs, cfg, progress)?);
    }
    let mut ops = Vec::with_capacity(g.ops.len());
    for (i, op) in g.ops.iter().enumerate() {
        let mut per_pu = vec![];
        let mut failures = vec![];
        for (pu, col) in soc.pus.iter().zip(&mut columns) {
            match std::mem::replace(&mut col[i], Err(String::new())) {
                Ok(c) => per_pu.push(Some(c)),
                Err(reason) => {
                    per_pu.push(None);
                    failures.push((pu.name.clone(), reason));
                }
            }
        }
        if per_pu.iter().all(Option::is_none) {
            return Err(ProfileError::NoPu {
                op: i as OpId,
                name: op.name.clone(),
                kind: op.kind.clone(),
                soc: soc.name.clone(),
                reasons: failures.iter().map(|(p, r)| format!("{p}: {r}")).collect::<Vec<_>>().join("; "),
            });
        }
        ops.push(OpCosts { op: i as OpId, name: op.name.clone(), kind: op.kind.clone(), per_pu, failures });
    }
    Ok(CostTable {
        model: g.name.clone(),
        graph: g.content_hash()?,
        soc: soc.clone(),
        simulated: soc.simulated,
        backend: format!("{} {}", backend.name(), backend.version()),
        measured_on: host_description(),
        warmup: cfg.warmup,
        ops,
    })
}

/// One PU's column of the table: a cost, or the backend's reason, per op.
fn profile_pu(
    backend: &dyn Backend,
    pu: &PuSpec,
    models: &[Vec<u8>],
    inputs: &[Vec<HostTensor>],
    cfg: &ProfileConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Result<Cost, String>>, ProfileError> {
    let (tx, rx) = std::sync::mpsc::channel::<(&'static str, usize, usize)>();
    std::thread::scope(|s| {
        let worker = s.spawn(move || -> Result<Vec<Result<Cost, String>>, BackendError> {
            bident_backend::pin_current_thread(&pu.name, &pu.cores)?;
            let n = models.len();
            let mut exes: Vec<Result<Box<dyn Executable>, String>> = Vec::with_capacity(n);
            for (i, m) in models.iter().enumerate() {
                let _ = tx.send(("compiling", i, n));
                exes.push(backend.compile(m, pu).map_err(|e| e.to_string()));
            }
            let runs = cfg.runs.max(1);
            let rounds = cfg.warmup + runs;
            let mut samples: Vec<[Vec<f64>; 3]> = vec![Default::default(); n];
            let mut failed: Vec<Option<String>> = vec![None; n];
            for r in 0..rounds {
                let _ = tx.send(("timing", r as usize, rounds as usize));
                for i in 0..n {
                    let Ok(exe) = exes[i].as_mut() else { continue };
                    if failed[i].is_some() {
                        continue;
                    }
                    let refs: Vec<&HostTensor> = inputs[i].iter().collect();
                    match exe.run_timed(&refs) {
                        Ok((_, t)) if r >= cfg.warmup => {
                            samples[i][0].push(t.h2d.as_secs_f64() * 1e6);
                            samples[i][1].push(t.infer.as_secs_f64() * 1e6);
                            samples[i][2].push(t.d2h.as_secs_f64() * 1e6);
                        }
                        Ok(_) => {}
                        Err(e) => failed[i] = Some(e.to_string()),
                    }
                }
            }
            let _ = tx.send(("timing", rounds as usize, rounds as usize));
            Ok(exes
                .into_iter()
                .zip(samples)
                .zip(failed)
                .map(|((exe, [mut h2d, mut exec, mut d2h]), failed)| {
                    exe?;
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    Ok(Cost {
                        h2d_us: quantile(&mut h2d, 0.5),
                        exec_us: quantile(&mut exec, 0.5),
                        d2h_us: quantile(&mut d2h, 0.5),
                        exec_p10_us: quantile(&mut exec, 0.1),
                        exec_p90_us: quantile(&mut exec, 0.9),
                        runs,
                        power_w: pu.declared_power_w,
                        power: PowerSource::Declared,
                    })
                })
                .collect())
        });
        for (phase, done, total) in rx {
            progress(Progress { pu: &pu.name, phase, done, total });
        }
        match worker.join() {
            Ok(Ok(col)) => Ok(col),
            // the PU itself is unusable (e.g. cannot pin): every op fails there with that reason
            Ok(Err(e)) => Ok(models.iter().map(|_| Err(e.to_string())).collect()),
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
pub fn input_hash(graph: ContentHash, soc: &SocSpec, cfg: &ProfileConfig) -> ContentHash {
    ContentHash::of_parts(&[&graph.0, format!("{soc:?}").as_bytes(), format!("{cfg:?}").as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }
}
