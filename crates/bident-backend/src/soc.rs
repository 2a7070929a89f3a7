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
    /// The backend that compiles for this PU, e.g. `openvino`, `onnxruntime`.
    pub backend: String,
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

impl PuSpec {
    /// The whole device with the backend's own defaults: no properties, not pinned (the backend
    /// uses every core it sees). What a user would pick instead of a plan: the runtime's
    /// backend-default baseline. `of`: the PU whose backend and device these are.
    pub fn backend_default(of: &PuSpec) -> Self {
        let device = &of.device;
        Self {
            name: format!("{device} (backend defaults)"),
            backend: of.backend.clone(),
            // the PU's: a backend's device names need not say the kind (ONNX Runtime's `CUDA`)
            kind: of.kind,
            device: device.to_string(),
            properties: BTreeMap::new(),
            cores: vec![],
            declared_power_w: DECLARED_CPU_POWER_W,
        }
    }
}

/// A SoC: a named set of PUs, each compiled for by the backend it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocSpec {
    pub name: String,
    /// The SoC's default backend, e.g. `openvino` (a spec file's `backend`); each PU names its
    /// own ([`PuSpec::backend`]).
    pub backend: String,
    /// True for a virtual SoC whose costs come from a model, not from measurement.
    pub simulated: bool,
    pub pus: Vec<PuSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum SocError {
    #[error("unknown SoC preset `{0}` (known: local, cores, cores-mixed; or give a .toml file)")]
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

/// The `local` PUs of one device: the device itself, or, for the CPU of a hybrid processor
/// (P-cores and E-cores), one PU per core type (`SCHEDULING_CORE_TYPE`), each pinned to its cores.
fn local_pus(backend: &str, d: crate::DeviceInfo, hybrid: Option<&(Vec<usize>, Vec<usize>)>) -> Vec<PuSpec> {
    let pu = |name: String, properties: BTreeMap<String, String>, cores: Vec<usize>, share: f64| PuSpec {
        name,
        backend: backend.to_string(),
        kind: d.kind,
        device: d.name.clone(),
        properties,
        cores,
        declared_power_w: declared_power(d.kind) * share,
    };
    match (d.kind, hybrid) {
        (PuKind::Cpu, Some((p, e))) => {
            let total = (p.len() + e.len()) as f64;
            [("P", "PCORE_ONLY", p.clone()), ("E", "ECORE_ONLY", e.clone())]
                .into_iter()
                .map(|(suffix, core_type, cores)| {
                    let mut props = exact_precision(d.kind);
                    props.insert("SCHEDULING_CORE_TYPE".into(), core_type.into());
                    let share = cores.len() as f64 / total;
                    pu(format!("{}.{suffix}", d.name), props, cores, share)
                })
                .collect()
        }
        _ => vec![pu(d.name.clone(), exact_precision(d.kind), vec![], 1.0)],
    }
}

/// The P-cores and E-cores this process may run on, when the processor is hybrid: Linux lists
/// them in `/sys/devices/cpu_core/cpus` and `/sys/devices/cpu_atom/cpus`
/// (`BIDENT_SYSFS_DEVICES` points elsewhere). None when either list is missing or empty.
pub fn hybrid_cores() -> Option<(Vec<usize>, Vec<usize>)> {
    let dir =
        std::env::var_os("BIDENT_SYSFS_DEVICES").map(std::path::PathBuf::from).unwrap_or_else(|| "/sys/devices".into());
    hybrid_cores_in(&dir, &crate::allowed_cpus())
}

fn hybrid_cores_in(dir: &std::path::Path, allowed: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let read = |pmu: &str| -> Option<Vec<usize>> {
        let text = std::fs::read_to_string(dir.join(pmu).join("cpus")).ok()?;
        let cpus: Vec<usize> = parse_cpu_list(text.trim())?.into_iter().filter(|c| allowed.contains(c)).collect();
        (!cpus.is_empty()).then_some(cpus)
    };
    Some((read("cpu_core")?, read("cpu_atom")?))
}

fn is_file_spec(spec: &str) -> bool {
    spec.ends_with(".toml") || std::path::Path::new(spec).is_file()
}

/// A spec file's text; a FIFO or device would block the read: only a regular file is a spec.
fn read_spec_file(path: &std::path::Path) -> Result<String, String> {
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
    }
    .map_err(|e| e.to_string())?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut f, &mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// A Linux CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = vec![];
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// A single-threaded CPU PU pinned to core `c`, computing in f32, on `backend` (`openvino` or
/// `onnxruntime`), with a share `1/n` of the declared CPU power.
fn core_pu(backend: &str, c: usize, n: usize) -> PuSpec {
    let properties: &[(&str, &str)] = match backend {
        "onnxruntime" => &[("INTRA_OP_NUM_THREADS", "1"), ("INFERENCE_PRECISION_HINT", "f32")],
        _ => &[
            ("INFERENCE_NUM_THREADS", "1"),
            ("ENABLE_CPU_PINNING", "NO"),
            ("NUM_STREAMS", "1"),
            ("INFERENCE_PRECISION_HINT", "f32"),
        ],
    };
    PuSpec {
        name: format!("core{c}"),
        backend: backend.to_string(),
        kind: PuKind::Cpu,
        device: "CPU".into(),
        properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        cores: vec![c],
        declared_power_w: DECLARED_CPU_POWER_W / n as f64,
    }
}

impl SocSpec {
    /// Build a preset SoC against the devices this backend sees. `local` and `cores` are on the
    /// backend's default one ([`Backend::backends`], OpenVINO in xtask).
    ///
    /// - `local`: one PU per device, with the device's own defaults; a hybrid CPU becomes two
    ///   PUs, `CPU.P` and `CPU.E` (see [`hybrid_cores`]).
    /// - `cores`: one single-threaded PU per online CPU core, each pinned to its core.
    /// - `cores-mixed`: the first two cores this process may run on, the first an OpenVINO PU
    ///   and the second an ONNX Runtime PU, each single-threaded, pinned and f32 (needs both
    ///   backends and two cores).
    pub fn preset(name: &str, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let default = backend.backends().into_iter().next().unwrap_or_else(|| backend.name().to_string());
        let soc = match name {
            "local" => SocSpec {
                name: "local".into(),
                backend: default.clone(),
                simulated: false,
                pus: {
                    let hybrid = hybrid_cores();
                    backend
                        .devices_of(&default)?
                        .into_iter()
                        .flat_map(|d| local_pus(&default, d, hybrid.as_ref()))
                        .collect()
                },
            },
            "cores" => {
                let cpus = crate::allowed_cpus();
                let n = cpus.len();
                SocSpec {
                    name: "cores".into(),
                    backend: default.clone(),
                    simulated: false,
                    pus: cpus.into_iter().map(|c| core_pu(&default, c, n)).collect(),
                }
            }
            "cores-mixed" => {
                let cpus = crate::allowed_cpus();
                let &[first, second, ..] = &cpus[..] else {
                    return Err(SocError::Invalid {
                        soc: name.into(),
                        reason: format!("needs two cores, this process may run on {cpus:?} only"),
                    });
                };
                for b in ["openvino", "onnxruntime"] {
                    backend.check_backend(b)?;
                }
                SocSpec {
                    name: name.into(),
                    backend: "openvino".into(),
                    simulated: false,
                    pus: vec![core_pu("openvino", first, cpus.len()), core_pu("onnxruntime", second, cpus.len())],
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
        if is_file_spec(spec) {
            Self::from_file(std::path::Path::new(spec), backend)
        } else {
            Self::preset(spec, backend)
        }
    }

    /// The backends the PUs of `spec` (as [`SocSpec::load`] takes it) name besides `default`,
    /// so a caller can load only the backends a SoC needs before loading it. A file that cannot
    /// be read or parsed names none here; loading it says what is wrong.
    pub fn backends_named(spec: &str, default: &str) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::from([default.to_string()]);
        if is_file_spec(spec) {
            let path = std::path::Path::new(spec);
            if let Some(file) = read_spec_file(path).ok().and_then(|t| toml::from_str::<SocFile>(&t).ok()) {
                out.extend(file.pu.into_iter().map(|p| p.backend.unwrap_or_else(|| file.backend.clone())));
                out.insert(file.backend);
            }
        } else if spec == "cores-mixed" {
            out.extend(["openvino".to_string(), "onnxruntime".to_string()]);
        }
        out
    }

    /// Read and check a SoC spec file (format: [`SocFile`]) against the devices this backend
    /// sees and the CPUs this process may run on.
    pub fn from_file(path: &std::path::Path, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let text = read_spec_file(path).map_err(|reason| SocError::File { path: path.to_path_buf(), reason })?;
        Self::from_toml(&text, path, backend)
    }

    /// [`SocSpec::from_file`] on text already read; `path` is only used in messages.
    pub fn from_toml(text: &str, path: &std::path::Path, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        let bad = |reason: String| SocError::File { path: path.to_path_buf(), reason };
        let file: SocFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1);
            bad(match line {
                Some(l) => format!("line {l}: {}", e.message()),
                None => e.message().to_string(),
            })
        })?;
        let allowed = crate::allowed_cpus();
        let mut pinned: BTreeMap<usize, &str> = BTreeMap::new();
        // each backend's devices, asked once
        let mut devices_of: BTreeMap<&str, Vec<crate::DeviceInfo>> = BTreeMap::new();
        for pu in &file.pu {
            let at = |reason: String| bad(format!("PU `{}`: {reason}", pu.name));
            let pu_backend = pu.backend.as_deref().unwrap_or(&file.backend);
            if !devices_of.contains_key(pu_backend) {
                let found = backend.devices_of(pu_backend).map_err(|e| match e {
                    e @ BackendError::UnknownBackend { .. } => at(e.to_string()),
                    e => SocError::Backend(e),
                })?;
                devices_of.insert(pu_backend, found);
            }
            let devices = &devices_of[pu_backend];
            let device = devices.iter().find(|d| d.name == pu.device).ok_or_else(|| {
                let seen: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
                at(format!("unknown device `{}` (this machine has: {} on {pu_backend})", pu.device, seen.join(", ")))
            })?;
            let kind = backend.pu_kind(&pu.spec(&file.backend), device);
            if kind != pu.kind {
                return Err(at(format!(
                    "kind `{}` does not match device `{}`, a {}",
                    pu.kind.name(),
                    pu.device,
                    kind.name()
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
            backend: file.backend.clone(),
            simulated: false,
            pus: file.pu.into_iter().map(|p| p.spec(&file.backend)).collect(),
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
                    backend: (p.backend != self.backend).then(|| p.backend.clone()),
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
/// backend = "openvino"    # the PUs' backend where a PU names none
/// # shared_cores = true    # allow two PUs on one core
///
/// [[pu]]
/// name = "core0"
/// # backend = "onnxruntime"  # this PU's backend: openvino | onnxruntime
/// kind = "cpu"            # cpu | gpu | npu
/// device = "CPU"          # the PU's backend's device name
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
    /// The PU's backend; absent: the file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    pub kind: PuKind,
    pub device: String,
    #[serde(default)]
    pub cores: Vec<usize>,
    pub declared_power_w: f64,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

impl PuFile {
    /// The PU this entry describes; `backend`: the file's, where the entry names none.
    fn spec(&self, backend: &str) -> PuSpec {
        PuSpec {
            name: self.name.clone(),
            backend: self.backend.clone().unwrap_or_else(|| backend.to_string()),
            kind: self.kind,
            device: self.device.clone(),
            properties: self.properties.clone(),
            cores: self.cores.clone(),
            declared_power_w: self.declared_power_w,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    /// A hybrid CPU (as Linux lists it) becomes a P-core PU and an E-core PU; other devices and
    /// non-hybrid CPUs stay one PU.
    #[test]
    fn hybrid_cpu_is_split_by_core_type() {
        let dir = std::env::temp_dir().join(format!("bident-sysfs-{}", std::process::id()));
        for (pmu, list) in [("cpu_core", "0-3"), ("cpu_atom", "4-11")] {
            std::fs::create_dir_all(dir.join(pmu)).expect("dir");
            std::fs::write(dir.join(pmu).join("cpus"), format!("{list}\n")).expect("write");
        }
        let allowed: Vec<usize> = (0..10).collect();
        let hybrid = hybrid_cores_in(&dir, &allowed);
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(hybrid, Some(((0..4).collect(), (4..10).collect())));
        let cpu = crate::DeviceInfo { name: "CPU".into(), kind: PuKind::Cpu, full_name: "hybrid".into() };
        let pus = local_pus("openvino", cpu.clone(), hybrid.as_ref());
        let names: Vec<&str> = pus.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["CPU.P", "CPU.E"]);
        assert_eq!(pus[0].properties["SCHEDULING_CORE_TYPE"], "PCORE_ONLY");
        assert_eq!(pus[1].properties["SCHEDULING_CORE_TYPE"], "ECORE_ONLY");
        assert_eq!((pus[0].cores.len(), pus[1].cores.len()), (4, 6));
        assert!((pus[0].declared_power_w + pus[1].declared_power_w - DECLARED_CPU_POWER_W).abs() < 1e-9);
        assert_eq!(local_pus("openvino", cpu, None).len(), 1);
        let gpu = crate::DeviceInfo { name: "GPU".into(), kind: PuKind::Gpu, full_name: "gpu".into() };
        assert_eq!(local_pus("openvino", gpu, hybrid.as_ref()).len(), 1);
        assert_eq!(hybrid_cores_in(std::path::Path::new("/nonexistent"), &allowed), None);
    }
}
