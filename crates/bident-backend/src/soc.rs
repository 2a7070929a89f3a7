//! SoC descriptions: which PUs exist, how to compile for each, and what is declared about them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Backend, BackendError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PuKind {
    Cpu,
    Gpu,
    Npu,
}

impl PuKind {
    /// Paper 3.2.1: transfers into an accelerator pay H2D; leaving one pays D2H.
    pub fn is_accelerator(self) -> bool {
        !matches!(self, PuKind::Cpu)
    }

    pub fn from_device_name(device: &str) -> Self {
        let base = device.split('.').next().unwrap_or(device);
        match base {
            "GPU" => PuKind::Gpu,
            "NPU" => PuKind::Npu,
            _ => PuKind::Cpu,
        }
    }
}

/// One processing unit: a device of a backend plus the configuration that makes it a PU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PuSpec {
    pub name: String,
    pub kind: PuKind,
    /// The backend's device name, e.g. `CPU`.
    pub device: String,
    /// Compile-time properties, e.g. `INFERENCE_NUM_THREADS = 1`.
    pub properties: BTreeMap<String, String>,
    /// CPU cores the PU's worker thread is pinned to; empty means not pinned.
    pub cores: Vec<usize>,
    /// Declared sustained power in watts, used where power is not measured.
    pub declared_power_w: f64,
}

/// A SoC: a named set of PUs on one backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocSpec {
    pub name: String,
    /// Backend that compiles for these PUs, e.g. `openvino`.
    pub backend: String,
    /// True for a virtual SoC whose costs come from a model, not from measurement.
    pub simulated: bool,
    pub pus: Vec<PuSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum SocError {
    #[error("unknown SoC preset `{0}` (known: local, cores)")]
    UnknownPreset(String),
    #[error("SoC `{soc}`: {reason}")]
    Invalid { soc: String, reason: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Declared package power of a CPU PU when nothing is measured (a laptop-class figure).
const DECLARED_CPU_POWER_W: f64 = 15.0;
const DECLARED_GPU_POWER_W: f64 = 20.0;
const DECLARED_NPU_POWER_W: f64 = 5.0;

/// Compile in the model's own precision on CPUs: OpenVINO's CPU plugin otherwise lowers f32
/// to bf16 where the core supports it, and extracted ops would no longer match the whole model.
fn exact_precision(kind: PuKind) -> BTreeMap<String, String> {
    match kind {
        PuKind::Cpu => [("INFERENCE_PRECISION_HINT".to_string(), "f32".to_string())].into(),
        _ => BTreeMap::new(),
    }
}

fn declared_power(kind: PuKind) -> f64 {
    match kind {
        PuKind::Cpu => DECLARED_CPU_POWER_W,
        PuKind::Gpu => DECLARED_GPU_POWER_W,
        PuKind::Npu => DECLARED_NPU_POWER_W,
    }
}

impl SocSpec {
    /// Build a preset SoC against the devices this backend sees.
    ///
    /// - `local`: one PU per device, with the device's own defaults.
    /// - `cores`: one single-threaded PU per online CPU core, each pinned to its core.
    pub fn preset(name: &str, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let soc = match name {
            "local" => SocSpec {
                name: "local".into(),
                backend: backend.name().into(),
                simulated: false,
                pus: backend
                    .devices()?
                    .into_iter()
                    .map(|d| PuSpec {
                        name: d.name.clone(),
                        kind: d.kind,
                        device: d.name,
                        properties: exact_precision(d.kind),
                        cores: vec![],
                        declared_power_w: declared_power(d.kind),
                    })
                    .collect(),
            },
            "cores" => {
                let cpus = crate::allowed_cpus();
                let n = cpus.len();
                SocSpec {
                    name: "cores".into(),
                    backend: backend.name().into(),
                    simulated: false,
                    pus: cpus
                        .into_iter()
                        .map(|c| PuSpec {
                            name: format!("core{c}"),
                            kind: PuKind::Cpu,
                            device: "CPU".into(),
                            properties: [
                                ("INFERENCE_NUM_THREADS", "1"),
                                ("ENABLE_CPU_PINNING", "NO"),
                                ("NUM_STREAMS", "1"),
                                ("INFERENCE_PRECISION_HINT", "f32"),
                            ]
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                            cores: vec![c],
                            declared_power_w: DECLARED_CPU_POWER_W / n as f64,
                        })
                        .collect(),
                }
            }
            other => return Err(SocError::UnknownPreset(other.to_string())),
        };
        soc.validate()?;
        Ok(soc)
    }

    pub fn validate(&self) -> Result<(), SocError> {
        let bad = |reason: String| SocError::Invalid { soc: self.name.clone(), reason };
        if self.pus.is_empty() {
            return Err(bad("has no PUs".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for pu in &self.pus {
            if pu.name.is_empty() {
                return Err(bad("a PU has an empty name".into()));
            }
            if !seen.insert(&pu.name) {
                return Err(bad(format!("PU name `{}` appears twice", pu.name)));
            }
            if !(pu.declared_power_w.is_finite() && pu.declared_power_w > 0.0) {
                return Err(bad(format!("PU `{}`: declared power must be a positive number of watts", pu.name)));
            }
        }
        Ok(())
    }

    pub fn pu(&self, name: &str) -> Option<&PuSpec> {
        self.pus.iter().find(|p| p.name == name)
    }
}
