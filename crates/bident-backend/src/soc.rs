//! SoC descriptions: which PUs exist, how to compile for each, and what is declared about them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Backend, BackendError};

mod presets;

#[cfg(feature = "openvino")]
pub(crate) use presets::sysfs_devices;
pub use presets::{PRESETS, hybrid_cores};

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
    /// A whole-model configuration: the PU runs the whole model or nothing, and is measured
    /// whole, never op by op (a preset's whole-model configurations, [`SocSpec::preset_with`]).
    #[serde(default)]
    pub whole_only: bool,
}

impl PuSpec {
    /// The inference precision the PU asks for ([`PRECISION_KEY`], read back when it compiles):
    /// `f32`, `bf16`, `f16`; None leaves it to the device.
    pub fn precision(&self) -> Option<&str> {
        self.properties.get(PRECISION_KEY).map(String::as_str)
    }

    /// Its configuration in words, for reports: `openvino CPU, 1 thread on core 0, bf16`.
    pub fn configuration(&self) -> String {
        let threads = ["INFERENCE_NUM_THREADS", "INTRA_OP_NUM_THREADS"].iter().find_map(|k| self.properties.get(*k));
        let threads = match threads.map(String::as_str) {
            Some("1") => "1 thread".to_string(),
            Some(t) => format!("{t} threads"),
            None => "its own threads".to_string(),
        };
        let cores = match &self.cores[..] {
            [] => "not pinned".to_string(),
            [c] => format!("on core {c}"),
            cs => format!("on cores {}", cs.iter().map(usize::to_string).collect::<Vec<_>>().join(",")),
        };
        let precision = self.precision().unwrap_or("default precision");
        let hint =
            self.properties.get("PERFORMANCE_HINT").map_or(String::new(), |h| format!(", {} hint", h.to_lowercase()));
        format!("{} {}, {threads} {cores}, {precision}{hint}", self.backend, self.device)
    }

    /// Whether the PU computes f32 models exactly in f32 (it asks for f32).
    pub fn is_exact(&self) -> bool {
        self.precision().is_some_and(|p| p.eq_ignore_ascii_case("f32"))
    }

    /// Whether this PU and `other` compete for the same hardware, so they must never run at
    /// once: two CPU PUs whose cores overlap (an unpinned PU may use every core), or two PUs of
    /// one other device. (Two backends' names of one GPU are not matched.)
    pub fn shares_hardware(&self, other: &PuSpec) -> bool {
        if self.kind != other.kind {
            return false;
        }
        match self.kind {
            PuKind::Cpu => {
                self.cores.is_empty() || other.cores.is_empty() || self.cores.iter().any(|c| other.cores.contains(c))
            }
            _ => self.device == other.device,
        }
    }

    /// The whole device with the backend's own defaults: no properties, not pinned (the backend
    /// uses every core it sees). What a user would pick instead of a plan: the runtime's
    /// backend-default baseline. `of`: the PU whose backend and device these are.
    /// Whether compiling for this PU is compiling with `default`'s configuration (a
    /// [`PuSpec::backend_default`]): the same backend and device, not pinned, and the same
    /// properties once a precision request that names what the device computes in anyway
    /// (`device_precision`, as the backend reports it) is left out on either side. The runtime
    /// measures such a plan as that default, not twice.
    pub fn same_configuration(&self, default: &PuSpec, device_precision: Option<&str>) -> bool {
        let plain = |p: &PuSpec| -> BTreeMap<String, String> {
            let mut props = p.properties.clone();
            if props.get(PRECISION_KEY).is_some_and(|v| device_precision.is_some_and(|d| v.eq_ignore_ascii_case(d))) {
                props.remove(PRECISION_KEY);
            }
            props
        };
        self.backend == default.backend
            && self.device == default.device
            && self.kind == default.kind
            && self.cores.is_empty()
            && default.cores.is_empty()
            && plain(self) == plain(default)
    }

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
            whole_only: false,
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
    #[error("unknown SoC preset `{0}` (known: {known}; or give a .toml file)", known = PRESETS.join(", "))]
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

/// The PU property that sets (and, read back, states) its inference precision.
pub use crate::soc_check::{ALLOWED_PROPERTIES, check_properties, check_pu_name};

pub const PRECISION_KEY: &str = "INFERENCE_PRECISION_HINT";

/// Which inference precisions a preset offers (`--precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precisions {
    /// Exact f32 on every device and, beside it, each CPU at its default precision where that
    /// is another (e.g. `CPU.bf16` where OpenVINO's CPU plugin computes in bf16).
    #[default]
    Default,
    /// Exact f32 only.
    Exact,
}

/// How PU names tell backends apart: a PU of the SoC's default backend is named after its
/// device or core (`CPU`, `core0`), one of another backend gets its tag (`CPU.ort`, `core0.ort`).
pub fn backend_tag(backend: &str) -> &str {
    match backend {
        "openvino" => "ov",
        "onnxruntime" => "ort",
        other => other,
    }
}

fn is_file_spec(spec: &str) -> bool {
    spec.ends_with(".toml") || std::path::Path::new(spec).is_file()
}

/// A spec file's text, read as every input is ([`bident_artifact::files::read_text`]).
fn read_spec_file(path: &std::path::Path) -> Result<String, String> {
    use bident_artifact::ArtifactError as E;
    // the path is in SocError::File's message already
    bident_artifact::files::read_text(path).map_err(|e| match e {
        E::Io { source, .. } => source.to_string(),
        E::NotAFile { what, .. } => format!("{what}, not a regular file: refused unread"),
        E::TooLarge { limit, .. } => format!("larger than {limit} bytes: refused"),
        E::Text { reason, .. } => reason,
        e => e.to_string(),
    })
}

impl SocSpec {
    fn checked(soc: SocSpec) -> Result<SocSpec, SocError> {
        soc.validate()?;
        Ok(soc)
    }

    /// `exclusive[i][j]`: PUs `i` and `j` (`i != j`) share hardware ([`PuSpec::shares_hardware`]),
    /// so the evaluator and the runtime never run them at once.
    pub fn exclusive(&self) -> Vec<Vec<bool>> {
        let n = self.pus.len();
        (0..n).map(|i| (0..n).map(|j| i != j && self.pus[i].shares_hardware(&self.pus[j])).collect()).collect()
    }

    /// Refuse PUs that compute in a reduced precision (`--precision exact`).
    pub fn check_exact(&self) -> Result<(), SocError> {
        match self.pus.iter().find(|p| !p.is_exact()) {
            Some(p) => Err(SocError::Invalid {
                soc: self.name.clone(),
                reason: format!(
                    "PU `{}` computes in {} (--precision exact allows f32 only)",
                    p.name,
                    p.precision().unwrap_or("the device's default precision")
                ),
            }),
            None => Ok(()),
        }
    }

    pub fn validate(&self) -> Result<(), SocError> {
        let bad = |reason: String| SocError::Invalid { soc: self.name.clone(), reason };
        if self.pus.is_empty() {
            return Err(bad("has no PUs".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for pu in &self.pus {
            check_pu_name(&pu.name).map_err(bad)?;
            if !seen.insert(&pu.name) {
                return Err(bad(format!("PU name `{}` appears twice", pu.name)));
            }
            check_properties(pu).map_err(bad)?;
            if !(pu.declared_power_w.is_finite() && pu.declared_power_w > 0.0) {
                return Err(bad(format!("PU `{}`: declared power must be a positive number of watts", pu.name)));
            }
        }
        // a whole-only PU is measured whole, never op by op: with only those no op has a cost
        if self.pus.iter().all(|p| p.whole_only) {
            return Err(bad("every PU is `whole_only`: at least one must run ops one by one".into()));
        }
        Ok(())
    }

    /// A preset by name, or a SoC spec file (`*.toml`, or any existing file), whose PUs must
    /// then all be exact when `precisions` is.
    pub fn load(spec: &str, backend: &dyn Backend, precisions: Precisions) -> Result<SocSpec, SocError> {
        if is_file_spec(spec) {
            let soc = Self::from_file(std::path::Path::new(spec), backend)?;
            if precisions == Precisions::Exact {
                soc.check_exact()?;
            }
            Ok(soc)
        } else {
            Self::preset_with(spec, backend, precisions)
        }
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
        bident_artifact::files::check_nesting(text).map_err(bad)?;
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
            shared_cores: self
                .pus
                .iter()
                .enumerate()
                .any(|(i, p)| self.pus[i + 1..].iter().any(|q| p.cores.iter().any(|c| q.cores.contains(c)))),
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
                    whole_only: p.whole_only,
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
    /// Run the whole model or nothing: measured whole, never op by op.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_only: bool,
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
            whole_only: self.whole_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PUs that share a core, or an unpinned PU and any CPU PU, are exclusive; PUs on distinct
    /// cores or of distinct kinds are not.
    #[test]
    fn exclusive_where_hardware_is_shared() {
        let pu = |name: &str, kind: PuKind, cores: Vec<usize>| PuSpec {
            name: name.into(),
            backend: "openvino".into(),
            kind,
            device: kind.name().to_uppercase(),
            properties: BTreeMap::new(),
            cores,
            declared_power_w: 1.0,
            whole_only: false,
        };
        let soc = SocSpec {
            name: "t".into(),
            backend: "openvino".into(),
            simulated: false,
            pus: vec![
                pu("CPU", PuKind::Cpu, vec![]),
                pu("core0", PuKind::Cpu, vec![0]),
                pu("core1", PuKind::Cpu, vec![1]),
                pu("core0.ort", PuKind::Cpu, vec![0]),
                pu("gpu", PuKind::Gpu, vec![]),
            ],
        };
        let x = soc.exclusive();
        let pairs: Vec<(usize, usize)> =
            (0..5).flat_map(|i| (i + 1..5).map(move |j| (i, j))).filter(|&(i, j)| x[i][j]).collect();
        assert_eq!(pairs, [(0, 1), (0, 2), (0, 3), (1, 3)]);
        assert!((0..5).all(|i| (0..5).all(|j| x[i][j] == x[j][i]) && !x[i][i]));
        assert!(soc.to_toml().contains("shared_cores = true"));
    }

    /// A spec file's `whole_only` reaches the PU, and a PU's is written back to its file.
    #[test]
    fn a_spec_file_keeps_whole_only() {
        let pu = |whole_only: bool| PuSpec {
            name: "a".into(),
            backend: "openvino".into(),
            kind: PuKind::Cpu,
            device: "CPU".into(),
            properties: Default::default(),
            cores: vec![],
            declared_power_w: 1.0,
            whole_only,
        };
        let soc =
            SocSpec { name: "s".into(), backend: "openvino".into(), simulated: false, pus: vec![pu(false), pu(true)] };
        let file: SocFile = toml::from_str(&soc.to_toml()).expect("its own file");
        let read: Vec<bool> = file.pu.iter().map(|p| p.spec("openvino").whole_only).collect();
        assert_eq!(read, [false, true]);
    }
}
