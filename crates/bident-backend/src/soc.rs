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
    pub fn name(self) -> &'static str {
        match self {
            PuKind::Cpu => "cpu",
            PuKind::Gpu => "gpu",
            PuKind::Npu => "npu",
        }
    }

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
    #[error("unknown SoC preset `{0}` (known: local, cores; or give a .toml file)")]
    UnknownPreset(String),
    #[error("{path}: {reason}")]
    File { path: std::path::PathBuf, reason: String },
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

    /// A preset by name, or a SoC spec file (`*.toml`, or any existing file).
    pub fn load(spec: &str, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let path = std::path::Path::new(spec);
        if spec.ends_with(".toml") || path.is_file() {
            Self::from_file(path, backend)
        } else {
            Self::preset(spec, backend)
        }
    }

    /// Read and check a SoC spec file (format: [`SocFile`]) against the devices this backend
    /// sees and the CPUs this process may run on.
    pub fn from_file(path: &std::path::Path, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let bad = |reason: String| SocError::File { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: SocFile = toml::from_str(&text).map_err(|e| {
            let line = e.span().map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1);
            bad(match line {
                Some(l) => format!("line {l}: {}", e.message()),
                None => e.message().to_string(),
            })
        })?;
        if file.backend != backend.name() {
            return Err(bad(format!("backend `{}`, but this build runs `{}`", file.backend, backend.name())));
        }
        let devices = backend.devices()?;
        let allowed = crate::allowed_cpus();
        let mut pinned: BTreeMap<usize, &str> = BTreeMap::new();
        for pu in &file.pu {
            let at = |reason: String| bad(format!("PU `{}`: {reason}", pu.name));
            let device = devices.iter().find(|d| d.name == pu.device).ok_or_else(|| {
                let seen: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
                at(format!("unknown device `{}` (this machine has: {})", pu.device, seen.join(", ")))
            })?;
            if device.kind != pu.kind {
                return Err(at(format!(
                    "kind `{}` does not match device `{}`, a {}",
                    pu.kind.name(),
                    pu.device,
                    device.kind.name()
                )));
            }
            for &c in &pu.cores {
                if !allowed.contains(&c) {
                    return Err(at(format!("core {c} is not available to this process (available: {allowed:?})")));
                }
                if let Some(other) = pinned.insert(c, &pu.name)
                    && !file.shared_cores
                {
                    return Err(at(format!(
                        "core {c} is also `{other}`'s: PUs on one core disturb each other's timings \
                         (set `shared_cores = true` to allow it)"
                    )));
                }
            }
        }
        let soc = SocSpec {
            name: file.name,
            backend: file.backend,
            simulated: false,
            pus: file
                .pu
                .into_iter()
                .map(|p| PuSpec {
                    name: p.name,
                    kind: p.kind,
                    device: p.device,
                    properties: p.properties,
                    cores: p.cores,
                    declared_power_w: p.declared_power_w,
                })
                .collect(),
        };
        soc.validate().map_err(|e| bad(e.to_string()))?;
        Ok(soc)
    }

    /// The spec in the file format [`SocSpec::from_file`] reads (a starting point for your own).
    pub fn to_toml(&self) -> String {
        let file = SocFile {
            name: self.name.clone(),
            backend: self.backend.clone(),
            shared_cores: false,
            pu: self
                .pus
                .iter()
                .map(|p| PuFile {
                    name: p.name.clone(),
                    kind: p.kind,
                    device: p.device.clone(),
                    cores: p.cores.clone(),
                    declared_power_w: p.declared_power_w,
                    properties: p.properties.clone(),
                })
                .collect(),
        };
        toml::to_string(&file).unwrap_or_default()
    }

    pub fn pu(&self, name: &str) -> Option<&PuSpec> {
        self.pus.iter().find(|p| p.name == name)
    }
}

/// A SoC spec file (TOML):
///
/// ```toml
/// name = "two-cores"
/// backend = "openvino"
/// # shared_cores = true    # allow two PUs on one core
///
/// [[pu]]
/// name = "core0"
/// kind = "cpu"            # cpu | gpu | npu
/// device = "CPU"          # the backend's device name
/// cores = [0]             # the worker thread's cores (empty: not pinned)
/// declared_power_w = 7.5  # used where power is not measured
/// [pu.properties]         # compile properties, read back after compiling
/// INFERENCE_NUM_THREADS = "1"
/// ```
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocFile {
    pub name: String,
    pub backend: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_cores: bool,
    pub pu: Vec<PuFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PuFile {
    pub name: String,
    pub kind: PuKind,
    pub device: String,
    #[serde(default)]
    pub cores: Vec<usize>,
    pub declared_power_w: f64,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}
