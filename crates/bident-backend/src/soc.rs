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

/// Compile in the model's own precision on CPUs: OpenVINO's CPU plugin otherwise lowers f32
/// to bf16 where the core supports it, and extracted ops would no longer match the whole model.
fn exact_precision(kind: PuKind) -> BTreeMap<String, String> {
    match kind {
        PuKind::Cpu => [(PRECISION_KEY.to_string(), "f32".to_string())].into(),
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

fn pu_name(base: String, backend: &str, default: &str) -> String {
    if backend == default { base } else { format!("{base}.{}", backend_tag(backend)) }
}

/// The `local` PUs of one device of `backend` (`default`: the SoC's default backend, which
/// names PUs without a tag): the device itself in exact f32 or, for the CPU of a hybrid
/// processor (P-cores and E-cores) under OpenVINO, one PU per core type
/// (`SCHEDULING_CORE_TYPE`), each pinned to its cores; and, unless `precisions` is exact, the
/// whole CPU at its default precision where that is not f32 (`CPU.bf16`).
fn local_pus(
    backend: &str,
    default: &str,
    d: crate::DeviceInfo,
    hybrid: Option<&(Vec<usize>, Vec<usize>)>,
    precisions: Precisions,
) -> Vec<PuSpec> {
    let pu = |base: String, properties: BTreeMap<String, String>, cores: Vec<usize>, share: f64| PuSpec {
        name: pu_name(base, backend, default),
        backend: backend.to_string(),
        kind: d.kind,
        device: d.name.clone(),
        properties,
        cores,
        declared_power_w: declared_power(d.kind) * share,
        whole_only: false,
    };
    let mut out = match (d.kind, hybrid) {
        (PuKind::Cpu, Some((p, e))) if backend == "openvino" => {
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
    };
    if let (PuKind::Cpu, Precisions::Default, Some(p)) = (d.kind, precisions, &d.precision)
        && !p.eq_ignore_ascii_case("f32")
    {
        let props = [(PRECISION_KEY.to_string(), p.to_ascii_lowercase())].into();
        out.push(pu(format!("{}.{}", d.name, p.to_ascii_lowercase()), props, vec![], 1.0));
    }
    out
}

/// Linux's `/sys/devices`, where bident reads the processor's make-up (`BIDENT_SYSFS_DEVICES`
/// points elsewhere).
pub(crate) fn sysfs_devices() -> std::path::PathBuf {
    std::env::var_os("BIDENT_SYSFS_DEVICES").map(std::path::PathBuf::from).unwrap_or_else(|| "/sys/devices".into())
}

/// The P-cores and E-cores this process may run on, when the processor is hybrid: Linux lists
/// them in `cpu_core/cpus` and `cpu_atom/cpus` under `sysfs_devices`. None when either list
/// is missing or empty.
pub fn hybrid_cores() -> Option<(Vec<usize>, Vec<usize>)> {
    hybrid_cores_in(&sysfs_devices(), &crate::allowed_cpus())
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
/// `onnxruntime`; `default` names PUs without a tag), with a share `1/n` of the declared CPU
/// power.
fn core_pu(backend: &str, default: &str, c: usize, n: usize) -> PuSpec {
    let properties: &[(&str, &str)] = match backend {
        "onnxruntime" => &[("INTRA_OP_NUM_THREADS", "1"), (PRECISION_KEY, "f32")],
        _ => &[
            ("INFERENCE_NUM_THREADS", "1"),
            ("ENABLE_CPU_PINNING", "NO"),
            ("NUM_STREAMS", "1"),
            (PRECISION_KEY, "f32"),
        ],
    };
    PuSpec {
        name: pu_name(format!("core{c}"), backend, default),
        backend: backend.to_string(),
        kind: PuKind::Cpu,
        device: "CPU".into(),
        properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        cores: vec![c],
        declared_power_w: DECLARED_CPU_POWER_W / n as f64,
        whole_only: false,
    }
}

/// [`core_pu`] computing in `precision` (a CPU's default, not f32): `core0.bf16`.
fn reduced_core_pu(backend: &str, default: &str, c: usize, n: usize, precision: &str) -> PuSpec {
    threads_pu(backend, default, &[c], n, Some(precision))
}

/// [`core_pu`] on `cores.len()` threads with its worker pinned to `cores` (`core0`, `cores0-3`),
/// computing in `precision` where given (`core0.bf16`), else f32.
fn threads_pu(backend: &str, default: &str, cores: &[usize], n: usize, precision: Option<&str>) -> PuSpec {
    let mut pu = core_pu(backend, default, cores[0], n);
    let t = cores.len();
    let mut base = if t > 1 { format!("cores{}-{}", cores[0], cores[t - 1]) } else { format!("core{}", cores[0]) };
    if t > 1 {
        let key = if backend == "onnxruntime" { "INTRA_OP_NUM_THREADS" } else { "INFERENCE_NUM_THREADS" };
        pu.properties.insert(key.into(), t.to_string());
        pu.cores = cores.to_vec();
        pu.declared_power_w *= t as f64;
    }
    if let Some(p) = precision {
        let p = p.to_ascii_lowercase();
        base = format!("{base}.{p}");
        pu.properties.insert(PRECISION_KEY.into(), p);
    }
    pu.name = pu_name(base, backend, default);
    pu
}

/// The whole-model configurations a careful user tries by hand before trusting an engine's
/// defaults (issue 60), as whole-only PUs: for every backend with a CPU, the model on 1, 2, 4,
/// ... threads (below every core: the backend's own PU has them all), the worker pinned to the
/// first cores, in f32 and, unless `precisions` is exact, at the CPU's default precision where
/// that is not f32. One of the same name as a PU in `existing` (`core0` of `cores`) is that PU.
fn whole_model_configurations(
    backends: &[String],
    default: &str,
    backend: &dyn Backend,
    precisions: Precisions,
    existing: &[PuSpec],
) -> Result<Vec<PuSpec>, SocError> {
    let cpus = crate::allowed_cpus();
    let n = cpus.len();
    let threads: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2)).take_while(|&t| t < n).collect();
    let mut pus = vec![];
    for b in backends {
        for d in backend.devices_of(b)?.into_iter().filter(|d| d.kind == PuKind::Cpu) {
            let reduced = d.precision.filter(|p| precisions == Precisions::Default && !p.eq_ignore_ascii_case("f32"));
            for &t in &threads {
                pus.push(threads_pu(b, default, &cpus[..t], n, None));
                pus.extend(reduced.as_deref().map(|p| threads_pu(b, default, &cpus[..t], n, Some(p))));
            }
        }
    }
    pus.retain(|p| !existing.iter().any(|q| q.name == p.name));
    pus.iter_mut().for_each(|p| p.whole_only = true);
    Ok(pus)
}

/// The measured presets.
pub const PRESETS: [&str; 4] = ["local", "cores", "all", "cores-mixed"];

impl SocSpec {
    /// Build a preset SoC against the devices the backend sees, over every backend it has
    /// ([`Backend::backends`]: a dispatcher's members, the first being the default one, whose
    /// PUs are named without a tag).
    ///
    /// - `local`: every device of every backend, each whole (not pinned) with the device's
    ///   defaults in exact f32 and, unless `precisions` is exact, a CPU also at its default
    ///   precision where that is not f32 (`CPU.bf16`). A hybrid CPU under OpenVINO becomes two
    ///   PUs, `CPU.P` and `CPU.E` (see [`hybrid_cores`]). The other backends' PUs are tagged:
    ///   `CPU.ort`.
    /// - `cores`: one single-threaded f32 PU per online CPU core and backend, pinned to its
    ///   core (`core0`, `core0.ort`, ...), and the PUs of `local`: each engine left to its own
    ///   defaults on every core is what a user would run instead, so a plan can always fall back
    ///   to it (issue 15) and may give an op all the cores.
    /// - `all`: the PUs of `cores` and, unless `precisions` is exact, each core also at a CPU's
    ///   default precision where that is not f32 (`core0.bf16`).
    /// - `cores-mixed`: the first two cores this process may run on, the first an OpenVINO PU
    ///   and the second an ONNX Runtime PU, each single-threaded, pinned and f32 (needs both
    ///   backends and two cores).
    ///
    /// `local`, `cores` and `all` also have the whole-model configurations a careful user tries by
    /// hand (`whole_model_configurations`: 1, 2, 4, ... pinned threads below every core, in f32
    /// and at the CPU's default precision), as whole-only PUs ([`PuSpec::whole_only`]).
    ///
    /// PUs of one preset may share cores (`CPU` and `CPU.ort`, `core0` and `core0.ort`): they
    /// never run at once ([`SocSpec::exclusive`]).
    pub fn preset_with(name: &str, backend: &dyn Backend, precisions: Precisions) -> Result<SocSpec, SocError> {
        let backends = backend.backends();
        let default = backends.first().cloned().unwrap_or_else(|| backend.name().to_string());
        let local = || -> Result<Vec<PuSpec>, SocError> {
            let hybrid = hybrid_cores();
            let mut pus = vec![];
            for b in &backends {
                for d in backend.devices_of(b)? {
                    pus.extend(local_pus(b, &default, d, hybrid.as_ref(), precisions));
                }
            }
            Ok(pus)
        };
        let cores = || -> Vec<PuSpec> {
            let cpus = crate::allowed_cpus();
            let n = cpus.len();
            backends.iter().flat_map(|b| cpus.iter().map(|&c| core_pu(b, &default, c, n)).collect::<Vec<_>>()).collect()
        };
        // each core again at a CPU's default precision where that is not f32 (`core0.bf16`)
        let reduced_cores = || -> Result<Vec<PuSpec>, SocError> {
            let cpus = crate::allowed_cpus();
            let mut pus = vec![];
            for b in backends.iter().filter(|_| precisions == Precisions::Default) {
                for d in backend.devices_of(b)? {
                    if let (PuKind::Cpu, Some(p)) = (d.kind, &d.precision)
                        && !p.eq_ignore_ascii_case("f32")
                    {
                        pus.extend(cpus.iter().map(|&c| reduced_core_pu(b, &default, c, cpus.len(), p)));
                    }
                }
            }
            Ok(pus)
        };
        let mut pus: Vec<PuSpec> = match name {
            "local" => local()?,
            "cores" => local()?.into_iter().chain(cores()).collect(),
            "all" => local()?.into_iter().chain(cores()).chain(reduced_cores()?).collect(),
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
                let n = cpus.len();
                let pus =
                    vec![core_pu("openvino", "openvino", first, n), core_pu("onnxruntime", "onnxruntime", second, n)];
                return Self::checked(SocSpec { name: name.into(), backend: "openvino".into(), simulated: false, pus });
            }
            other => return Err(SocError::UnknownPreset(other.to_string())),
        };
        pus.extend(whole_model_configurations(&backends, &default, backend, precisions, &pus)?);
        Self::checked(SocSpec { name: name.into(), backend: default, simulated: false, pus })
    }

    /// [`SocSpec::preset_with`] every precision.
    pub fn preset(name: &str, backend: &dyn Backend) -> Result<SocSpec, SocError> {
        Self::preset_with(name, backend, Precisions::Default)
    }

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
            whole_only: false,
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
        let cpu = crate::DeviceInfo {
            name: "CPU".into(),
            kind: PuKind::Cpu,
            full_name: "hybrid".into(),
            precision: Some("f32".into()),
        };
        let pus = local_pus("openvino", "openvino", cpu.clone(), hybrid.as_ref(), Precisions::Default);
        let names: Vec<&str> = pus.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["CPU.P", "CPU.E"]);
        assert_eq!(pus[0].properties["SCHEDULING_CORE_TYPE"], "PCORE_ONLY");
        assert_eq!(pus[1].properties["SCHEDULING_CORE_TYPE"], "ECORE_ONLY");
        assert_eq!((pus[0].cores.len(), pus[1].cores.len()), (4, 6));
        assert!((pus[0].declared_power_w + pus[1].declared_power_w - DECLARED_CPU_POWER_W).abs() < 1e-9);
        assert_eq!(local_pus("openvino", "openvino", cpu.clone(), None, Precisions::Default).len(), 1);
        // ONNX Runtime has no core types: its CPU stays whole, tagged
        let ort = local_pus("onnxruntime", "openvino", cpu, hybrid.as_ref(), Precisions::Default);
        assert_eq!(ort.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["CPU.ort"]);
        let gpu = crate::DeviceInfo {
            name: "GPU".into(),
            kind: PuKind::Gpu,
            full_name: "gpu".into(),
            precision: Some("f16".into()),
        };
        assert_eq!(local_pus("openvino", "openvino", gpu, hybrid.as_ref(), Precisions::Default).len(), 1);
        assert_eq!(hybrid_cores_in(std::path::Path::new("/nonexistent"), &allowed), None);
    }

    /// A CPU whose default precision is reduced is offered at it beside exact f32, unless only
    /// exact precision is asked for.
    #[test]
    fn default_precision_beside_exact() {
        let cpu = |p: &str| crate::DeviceInfo {
            name: "CPU".into(),
            kind: PuKind::Cpu,
            full_name: "cpu".into(),
            precision: Some(p.into()),
        };
        let pus = local_pus("openvino", "openvino", cpu("BF16"), None, Precisions::Default);
        let got: Vec<(&str, Option<&str>, bool)> =
            pus.iter().map(|p| (p.name.as_str(), p.precision(), p.is_exact())).collect();
        assert_eq!(got, [("CPU", Some("f32"), true), ("CPU.bf16", Some("bf16"), false)]);
        assert!(pus[0].shares_hardware(&pus[1]));
        let soc = SocSpec { name: "t".into(), backend: "openvino".into(), simulated: false, pus: pus.clone() };
        assert!(soc.check_exact().expect_err("bf16").to_string().contains("PU `CPU.bf16` computes in bf16"));
        assert_eq!(local_pus("openvino", "openvino", cpu("bf16"), None, Precisions::Exact).len(), 1);
        assert_eq!(local_pus("openvino", "openvino", cpu("f32"), None, Precisions::Default).len(), 1);
    }

    /// A PU is its backend's default configuration when it asks for nothing the device does not
    /// do anyway: `CPU.bf16` on a CPU computing in bf16 by default, not `CPU` (f32 requested)
    /// nor a pinned or threaded PU.
    #[test]
    fn same_configuration_as_the_default() {
        let cpu = crate::DeviceInfo {
            name: "CPU".into(),
            kind: PuKind::Cpu,
            full_name: "cpu".into(),
            precision: Some("bf16".into()),
        };
        let pus = local_pus("openvino", "openvino", cpu, None, Precisions::Default);
        let default = PuSpec::backend_default(&pus[0]);
        let same: Vec<bool> = pus.iter().map(|p| p.same_configuration(&default, Some("bf16"))).collect();
        assert_eq!(same, [false, true]);
        // where the device's precision is not reported, a request is a difference
        assert!(!pus[1].same_configuration(&default, None));
        let mut exact_default = default.clone();
        exact_default.properties.insert(PRECISION_KEY.into(), "f32".into());
        assert!(pus[0].same_configuration(&exact_default, Some("bf16")));
        let ort = core_pu("onnxruntime", "openvino", 0, 2);
        assert!(!ort.same_configuration(&PuSpec::backend_default(&ort), Some("f32")), "pinned, one thread");
        let whole_ort = local_pus(
            "onnxruntime",
            "openvino",
            crate::DeviceInfo {
                name: "CPU".into(),
                kind: PuKind::Cpu,
                full_name: "c".into(),
                precision: Some("f32".into()),
            },
            None,
            Precisions::Default,
        );
        assert!(whole_ort[0].same_configuration(&PuSpec::backend_default(&whole_ort[0]), Some("f32")));
        assert!(!whole_ort[0].same_configuration(&default, Some("f32")), "another backend");
    }

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
}
