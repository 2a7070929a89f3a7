//! The ONNX Runtime backend, through the `ort` crate with the library loaded at run time from
//! the pinned wheel ([`install`]).
//!
//! A PU's `device` names its execution provider: `CPU` (the CPU execution provider, always
//! there), `CUDA`, `TensorRT`, `DirectML`, `MIGraphX`, `WebGPU`, `QNN`, `CoreML`,
//! `OpenVINO`, `XNNPACK` or `VitisAI`. Which of them the loaded library has is asked of it
//! (`GetAvailableProviders`): [`Backend::devices`] lists those it has, so a SoC file naming
//! another is refused when it is loaded, and compiling for one is refused with one line naming
//! the providers the library does have. CUDA and TensorRT are appended through their V2 options
//! (`SessionOptionsAppendExecutionProvider_CUDA_V2`, `.._TensorRT_V2`), the others by name
//! (`SessionOptionsAppendExecutionProvider`); ONNX Runtime keeps the CPU provider behind the
//! PU's for the nodes its provider does not take, and a profile shows them (below).
//!
//! PU properties (`PuSpec.properties`; any other key is refused):
//! - `EP.<option>`: an option of the PU's execution provider, passed as the string `<option>` =
//!   value (`EP.device_id = "0"`, `EP.trt_fp16_enable = "1"`, `EP.backend_type = "htp"`).
//!   ONNX Runtime checks them when the provider is appended and refuses unknown ones; the CPU
//!   provider takes none. The PU's kind follows the provider (CUDA, TensorRT, DirectML, MIGraphX,
//!   WebGPU: `gpu`; QNN, CoreML, VitisAI: `npu`; XNNPACK, OpenVINO: `cpu`) unless an option picks
//!   the hardware: QNN's `backend_type`/`backend_path`, OpenVINO's `device_type`, CoreML's
//!   `MLComputeUnits` ([`Backend::pu_kind`]).
//! - `INTRA_OP_NUM_THREADS`: threads of the session's intra-op pool, a positive integer. `1`
//!   runs every kernel on the calling thread (the one the profiler and the runtime pin); absent,
//!   ONNX Runtime uses one thread per physical core.
//! - `SPIN_BETWEEN_RUNS`: `YES` (absent: ONNX Runtime's default) or `NO`. By default the pool's
//!   threads spin on after a run returns, tens of milliseconds of CPU time each (measured here:
//!   a two-thread session of a LLaMA block still had its thread running 5 ms after every one of
//!   20 blocks of runs, none with `NO`), which keeps the next run of that session fast (by 0-25%
//!   on the zoo's tiny models back to back) and takes a core from whatever runs meanwhile. `NO`
//!   stops them when the run returns (ONNX Runtime's `session.force_spinning_stop`);
//!   [`Backend::quiet`] sets it on a PU with a pool: the profiler's units and a multi-task
//!   session's tasks run so, a whole model alone on the PU as configured.
//! - `GRAPH_OPTIMIZATION_LEVEL`: `DISABLE_ALL`, `BASIC`, `EXTENDED`, `LAYOUT` or `ALL` (absent:
//!   `ALL`, ONNX Runtime's default).
//! - `INFERENCE_PRECISION_HINT`: only `f32`. The CPU execution provider computes in the model's
//!   own types; the key is accepted so that OpenVINO's CPU presets describe an ONNX Runtime PU.
//!
//! ONNX Runtime has no getter for a session's thread count, optimisation level or provider
//! options: a value is checked before it is set and a refusal from ONNX Runtime is an error.
//! What a session does report, in its profile, is read back by [`Executable::layers`]: every
//! node ran on the PU's execution provider (a node left to the CPU provider behind a GPU's is
//! an error: its cost would not be the PU's), and every CPU node on the calling thread plus
//! exactly `INTRA_OP_NUM_THREADS - 1` pool threads (a mismatch is
//! [`BackendError::PropertyIgnored`]). The optimisation level and the options cannot be read
//! back.
//!
//! What the timing parts mean (host memory; inputs are not copied by bident):
//! - `h2d`: wrapping each host input buffer as an `OrtValue` and binding it (I/O binding);
//! - `infer`: the synchronous `RunWithBinding` call, i.e. dispatch and execution, writing into
//!   host outputs preallocated at compile time where their shapes are static; on a provider
//!   other than the CPU's, ONNX Runtime's copies to and from the device happen inside it;
//! - `d2h`: copying each output's bytes into the returned host tensor.
//!
//! Per-layer profiles come from ONNX Runtime's own profiler, one per run
//! (`RunOptionsEnableProfiling`, ONNX Runtime 1.25 and newer): a profiled executable writes one
//! JSON file per run into its own temporary folder (inside the `infer` call), and
//! [`Executable::layers`] parses the last one. Session-wide profiling cannot do this: ending it
//! (the only way to get its file) cannot be undone, and callers time a profiled executable and
//! read its layers run after run.

mod ep;
pub mod install;
mod profile;

use std::ffi::{CStr, CString, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ort::AsPointer;
use ort::environment::Environment;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{IoBinding, RunOptions, Session};
use ort::value::{DynTensor, TensorElementType, ValueType};

use crate::{
    Backend, BackendError, DType, DeviceInfo, Executable, HostTensor, Layer, PortInfo, PuKind, PuSpec, RunTiming,
};

/// ONNX Runtime's name of the CPU execution provider.
const CPU_PROVIDER: &str = "CPUExecutionProvider";

/// The PU properties passed to its execution provider as options: `EP.<option>`.
pub const PROVIDER_OPTION_PREFIX: &str = ep::OPTION_PREFIX;

/// The ONNX Runtime library, loaded once per process, and its one environment.
#[derive(Clone)]
pub struct OnnxRuntime {
    env: Environment,
    library: PathBuf,
    version: String,
    /// The execution providers the library has, by ONNX Runtime's names.
    providers: Vec<String>,
}

/// `ort` keeps the first library it loads for the whole process and allows one environment:
/// both are kept here, so a second backend shares them and another library is refused.
static LOADED: Mutex<Option<OnnxRuntime>> = Mutex::new(None);

impl OnnxRuntime {
    /// Load the library from its full path (the wheel ships only the versioned name) and create
    /// the environment. A missing file, a library that is not ONNX Runtime, or one older than
    /// the crate's API level is a [`BackendError::Library`].
    pub fn load(library: &Path) -> Result<Self, BackendError> {
        let lib_err = |reason: String| BackendError::Library(format!("{}: {reason}", library.display()));
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(first) = loaded.as_ref() {
            if first.library != library {
                return Err(BackendError::Library(format!(
                    "{} is already loaded in this process; cannot also load {}",
                    first.library.display(),
                    library.display()
                )));
            }
            return Ok(first.clone());
        }
        // ort would try a path relative to the executable for a missing file: refuse it here
        if !library.is_file() {
            return Err(lib_err(format!("no such file (set {} to the library's full path)", install::LIBRARY_ENV)));
        }
        let version = library_version(library).map_err(lib_err)?;
        crate::keep_freed_memory();
        // a failed load is not kept by ort, so a later call with the right path still works
        let builder = ort::init_from(library).map_err(|e| lib_err(e.to_string()))?;
        // `ort` turns ONNX Runtime's telemetry on unless told otherwise, and from 1.32 the
        // official Linux build has some: it kept a 2.5 MB event store and a device id in
        // ~/.cache/Microsoft/DeveloperTools/.onnxruntime/. Off here, and `ORT_DISABLE_TELEMETRY`
        // (set for cargo's processes in .cargo/config.toml) keeps it from starting at all.
        let env = builder.with_name("bident").with_telemetry(false).build().map_err(|e| lib_err(e.to_string()))?;
        // ONNX Runtime warns about things bident's cut models do on purpose (unused initialisers),
        // and logs every failed run, a cancelled one too, before returning the same error as a
        // status, which bident reports in its own one line
        env.set_log_level(ort::logging::LogLevel::Fatal);
        let providers = ep::available().map_err(|e| lib_err(format!("listing its execution providers: {e}")))?;
        let this = Self { env, library: library.to_path_buf(), version, providers };
        *loaded = Some(this.clone());
        Ok(this)
    }

    /// The execution providers the library has that bident can append, by device name.
    fn usable(&self) -> impl Iterator<Item = &'static ep::Provider> {
        ep::PROVIDERS.iter().filter(|p| self.providers.iter().any(|have| have == p.ort_name))
    }

    /// The execution provider a PU names, if the library has it; else the one-line refusal.
    fn provider(&self, pu: &PuSpec) -> Result<&'static ep::Provider, BackendError> {
        if let Some(p) = self.usable().find(|p| p.device == pu.device) {
            return Ok(p);
        }
        let have: Vec<&str> = self.usable().map(|p| p.device).collect();
        let why = match ep::by_device(&pu.device) {
            Some(_) => format!("this build lacks `{}`", pu.device),
            None => format!(
                "`{}` is not an execution provider bident knows: {}",
                pu.device,
                ep::PROVIDERS.iter().map(|p| p.device).collect::<Vec<_>>().join(", ")
            ),
        };
        Err(BackendError::Compile {
            pu: pu.name.clone(),
            reason: format!("ONNX Runtime {} here has execution providers {} ({why})", self.version, have.join(", ")),
        })
    }

    pub fn library(&self) -> &Path {
        &self.library
    }
}

/// The library's own version string, e.g. `1.32.0`, read before `ort` sees the library: `ort`
/// asserts (panics) on a library whose API base is null.
fn library_version(library: &Path) -> Result<String, String> {
    // SAFETY: opening the library runs its initialisers, exactly as ort's load does; the symbol
    // is called only after checking it exists, and its string is static in the library, which
    // stays loaded (ort loads it again right after).
    unsafe {
        let lib = libloading::Library::new(library).map_err(|e| e.to_string())?;
        let get = lib
            .get::<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase>(b"OrtGetApiBase")
            .map_err(|_| "not an ONNX Runtime library (no OrtGetApiBase)".to_string())?;
        let base = get();
        if base.is_null() {
            return Err("OrtGetApiBase returned nothing".into());
        }
        let v = ((*base).GetVersionString)();
        if v.is_null() {
            return Err("no version string".into());
        }
        let version = CStr::from_ptr(v).to_string_lossy().into_owned();
        let minor = version.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap_or(0);
        if minor < ort::MINOR_VERSION {
            return Err(format!(
                "ONNX Runtime {version} is too old: bident needs 1.{} or newer (pinned: {})",
                ort::MINOR_VERSION,
                install::ONNXRUNTIME_VERSION
            ));
        }
        // keep it loaded: the version string lives in it, and ort opens the same file next
        std::mem::forget(lib);
        Ok(version)
    }
}

/// ONNX Runtime messages can run over many lines (a stack of contexts); keep the first ones.
fn first_lines(msg: &str) -> String {
    let lines: Vec<&str> = msg.lines().map(str::trim).filter(|l| !l.is_empty()).take(3).collect();
    lines.join(" | ")
}

fn to_ort(dtype: DType) -> TensorElementType {
    match dtype {
        DType::F32 => TensorElementType::Float32,
        DType::F16 => TensorElementType::Float16,
        DType::Bf16 => TensorElementType::Bfloat16,
        DType::F64 => TensorElementType::Float64,
        DType::I8 => TensorElementType::Int8,
        DType::I16 => TensorElementType::Int16,
        DType::I32 => TensorElementType::Int32,
        DType::I64 => TensorElementType::Int64,
        DType::U8 => TensorElementType::Uint8,
        DType::U16 => TensorElementType::Uint16,
        DType::U32 => TensorElementType::Uint32,
        DType::U64 => TensorElementType::Uint64,
        DType::Bool => TensorElementType::Bool,
    }
}

fn from_ort(t: TensorElementType) -> Option<DType> {
    Some(match t {
        TensorElementType::Float32 => DType::F32,
        TensorElementType::Float16 => DType::F16,
        TensorElementType::Bfloat16 => DType::Bf16,
        TensorElementType::Float64 => DType::F64,
        TensorElementType::Int8 => DType::I8,
        TensorElementType::Int16 => DType::I16,
        TensorElementType::Int32 => DType::I32,
        TensorElementType::Int64 => DType::I64,
        TensorElementType::Uint8 => DType::U8,
        TensorElementType::Uint16 => DType::U16,
        TensorElementType::Uint32 => DType::U32,
        TensorElementType::Uint64 => DType::U64,
        TensorElementType::Bool => DType::Bool,
        _ => return None,
    })
}

/// The PU property that says whether the session's pool spins on after a run.
const SPIN_KEY: &str = "SPIN_BETWEEN_RUNS";

/// `pu` with [`SPIN_KEY`] = `NO` where its sessions have a pool (more than one intra-op thread,
/// or ONNX Runtime's default of one per core) and the PU does not say otherwise.
fn quiet(pu: &PuSpec) -> PuSpec {
    let mut quiet = pu.clone();
    let one_thread = pu.properties.get("INTRA_OP_NUM_THREADS").is_some_and(|n| n.parse::<usize>() == Ok(1));
    if !one_thread && !pu.properties.contains_key(SPIN_KEY) {
        quiet.properties.insert(SPIN_KEY.into(), "NO".into());
    }
    quiet
}

/// The session options a PU asks for, checked before any is set.
struct Options {
    intra_threads: Option<usize>,
    /// `SPIN_BETWEEN_RUNS`: whether the pool spins on after a run (ONNX Runtime's default).
    spin_between_runs: bool,
    level: GraphOptimizationLevel,
    /// The execution provider's options (`EP.<option>` properties), in key order.
    provider: Vec<(String, String)>,
}

fn options(pu: &PuSpec) -> Result<Options, BackendError> {
    let refuse = |key: &str, value: &str, why: &str| BackendError::PropertyIgnored {
        pu: pu.name.clone(),
        key: key.to_string(),
        value: value.to_string(),
        actual: why.to_string(),
    };
    let mut o =
        Options { intra_threads: None, spin_between_runs: true, level: GraphOptimizationLevel::All, provider: vec![] };
    for (key, value) in &pu.properties {
        if let Some(option) = key.strip_prefix(ep::OPTION_PREFIX) {
            if option.is_empty() || value.is_empty() {
                return Err(refuse(key, value, "<an execution provider option needs a name and a value>"));
            }
            o.provider.push((option.to_string(), value.clone()));
            continue;
        }
        match key.as_str() {
            "INTRA_OP_NUM_THREADS" => {
                let n = value.parse::<usize>().ok().filter(|&n| (1..=4096).contains(&n));
                o.intra_threads = Some(n.ok_or_else(|| refuse(key, value, "<not a thread count from 1 to 4096>"))?);
            }
            SPIN_KEY => {
                o.spin_between_runs = match value.to_ascii_uppercase().as_str() {
                    "YES" => true,
                    "NO" => false,
                    _ => return Err(refuse(key, value, "<YES or NO>")),
                }
            }
            "GRAPH_OPTIMIZATION_LEVEL" => {
                o.level = match value.to_ascii_uppercase().as_str() {
                    "DISABLE_ALL" => GraphOptimizationLevel::Disable,
                    "BASIC" => GraphOptimizationLevel::Level1,
                    "EXTENDED" => GraphOptimizationLevel::Level2,
                    "LAYOUT" => GraphOptimizationLevel::Level3,
                    "ALL" => GraphOptimizationLevel::All,
                    _ => return Err(refuse(key, value, "<one of DISABLE_ALL, BASIC, EXTENDED, LAYOUT, ALL>")),
                }
            }
            "INFERENCE_PRECISION_HINT" if value.eq_ignore_ascii_case("f32") => {}
            "INFERENCE_PRECISION_HINT" => {
                return Err(refuse(key, value, "f32 (ONNX Runtime computes in the model's types)"));
            }
            _ => {
                return Err(refuse(
                    key,
                    value,
                    "<unknown to ONNX Runtime: INTRA_OP_NUM_THREADS, SPIN_BETWEEN_RUNS, GRAPH_OPTIMIZATION_LEVEL, \
                     INFERENCE_PRECISION_HINT, \
                     EP.<execution provider option>>",
                ));
            }
        }
    }
    Ok(o)
}

/// The CPU model string, for [`DeviceInfo::full_name`].
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_else(|| "CPU".into())
}

impl Backend for OnnxRuntime {
    fn name(&self) -> &str {
        "onnxruntime"
    }

    fn version(&self) -> String {
        self.version.clone()
    }

    /// The execution providers the library has and bident can append, CPU first.
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(self
            .usable()
            .map(|p| DeviceInfo {
                name: p.device.into(),
                kind: p.kind,
                full_name: if p.is_cpu() { cpu_name() } else { p.ort_name.into() },
                // the CPU execution provider computes in the model's own types; others say
                // nothing bident reads
                precision: p.is_cpu().then(|| "f32".into()),
            })
            .collect())
    }

    fn pu_kind(&self, pu: &PuSpec, device: &DeviceInfo) -> PuKind {
        match ep::by_device(&device.name) {
            Some(p) => p.kind(&ep::options_of(&pu.properties)),
            None => device.kind,
        }
    }

    fn quiet(&self, pu: &PuSpec) -> PuSpec {
        quiet(pu)
    }

    fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.compile_with(onnx, pu, false).map(|e| Box::new(e) as Box<dyn Executable>)
    }

    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.compile_with(onnx, pu, true).map(|e| Box::new(e) as Box<dyn Executable>)
    }

    fn timing_meaning(&self, pu: &PuSpec) -> String {
        let common = "h2d = wrapping each host input as an OrtValue and binding it; infer = the synchronous \
                      RunWithBinding call (host outputs preallocated where static)";
        match ep::by_device(&pu.device) {
            Some(p) if !p.is_cpu() => format!(
                "{common}, including ONNX Runtime's copies to and from the {} device; d2h = copying each output's \
                 bytes into the returned host tensor",
                p.device
            ),
            _ => format!(
                "{common}; d2h = copying each output's bytes to host memory (CPU: host memory, no device copies)"
            ),
        }
    }
}

impl OnnxRuntime {
    fn compile_with(&self, onnx: &[u8], pu: &PuSpec, profiled: bool) -> Result<OrtExecutable, BackendError> {
        let fail = |reason: String| BackendError::Compile { pu: pu.name.clone(), reason };
        let provider = self.provider(pu)?;
        if crate::model_check::names_a_file(onnx) {
            return Err(fail(crate::model_check::NAMES_A_FILE.into()));
        }
        let o = options(pu)?;
        if provider.is_cpu()
            && let Some((option, value)) = o.provider.first()
        {
            return Err(BackendError::PropertyIgnored {
                pu: pu.name.clone(),
                key: format!("{}{option}", ep::OPTION_PREFIX),
                value: value.clone(),
                actual: "<the CPU execution provider takes no options>".into(),
            });
        }
        let ort_fail = |e: ort::Error| fail(first_lines(&e.to_string()));
        let mut builder = Session::builder(&self.env).map_err(ort_fail)?;
        provider
            .append(builder.ptr_mut(), &o.provider)
            .map_err(|e| fail(format!("appending the {} execution provider: {e}", provider.device)))?;
        if let Some(n) = o.intra_threads {
            builder = builder.with_intra_threads(n).map_err(|e| fail(first_lines(&e.to_string())))?;
        }
        if !o.spin_between_runs {
            builder = builder
                .with_config_entry("session.force_spinning_stop", "1")
                .map_err(|e| fail(first_lines(&e.to_string())))?;
        }
        let mut builder = builder.with_optimization_level(o.level).map_err(|e| fail(first_lines(&e.to_string())))?;
        let session = builder.commit_from_memory(onnx).map_err(ort_fail)?;

        let ports = |outlets: &[ort::value::Outlet], inputs: bool| -> Result<Vec<PortInfo>, BackendError> {
            outlets
                .iter()
                .enumerate()
                .map(|(i, o)| match o.dtype() {
                    ValueType::Tensor { ty, shape, .. } => {
                        let dtype = from_ort(*ty).ok_or_else(|| {
                            fail(format!("port `{}`: element type {ty} is not supported by bident", o.name()))
                        })?;
                        let dims = shape.iter().map(|&d| u64::try_from(d).ok()).collect::<Option<Vec<u64>>>();
                        let dims = dims.filter(|_| has_shape(&session, i, inputs));
                        Ok(PortInfo { name: o.name().to_string(), dtype, shape: dims })
                    }
                    other => Err(fail(format!("port `{}` is not a tensor ({other})", o.name()))),
                })
                .collect()
        };
        let inputs = ports(session.inputs(), true)?;
        let outputs = ports(session.outputs(), false)?;
        let input_names = inputs
            .iter()
            .map(|p| CString::new(p.name.as_str()).map_err(|_| fail(format!("input `{}` contains a NUL byte", p.name))))
            .collect::<Result<Vec<_>, _>>()?;
        let cpu =
            MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Arena, MemoryType::Default).map_err(ort_fail)?;
        let mut binding = session.create_binding().map_err(ort_fail)?;
        for p in &outputs {
            match &p.shape {
                // static shape: ONNX Runtime writes into the same buffer every run
                Some(dims) => {
                    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
                    let t = DynTensor::new(session.allocator(), to_ort(p.dtype), dims).map_err(ort_fail)?;
                    binding.bind_output(p.name.as_str(), t).map_err(ort_fail)?;
                }
                None => binding.bind_output_to_device(p.name.as_str(), &cpu).map_err(ort_fail)?,
            }
        }
        // every run goes through these options: they carry the profiling switch, and the
        // terminate flag another thread sets to stop a run ([`Executable::canceller`])
        let mut options = RunOptions::new().map_err(ort_fail)?;
        let profile = if profiled {
            let dir = tempfile::Builder::new()
                .prefix("bident-ort-profile-")
                .tempdir()
                .map_err(|e| fail(format!("cannot create a folder for the profile: {e}")))?;
            options.enable_profiling(dir.path().join("run")).map_err(ort_fail)?;
            Some(Profiling { dir })
        } else {
            None
        };
        Ok(OrtExecutable {
            pu: pu.name.clone(),
            provider: provider.ort_name,
            intra_threads: o.intra_threads,
            session,
            binding,
            cpu,
            input_names,
            inputs,
            outputs,
            options: Arc::new(options),
            profile,
        })
    }
}

/// Whether a port's type has a shape at all: ONNX Runtime reports an unknown rank as rank 0,
/// which would read as a scalar (a Loop's outputs without declared shapes, for instance).
fn has_shape(session: &Session, index: usize, input: bool) -> bool {
    let api = ort::api();
    let get = if input { api.SessionGetInputTypeInfo } else { api.SessionGetOutputTypeInfo };
    let mut info = std::ptr::null_mut();
    // SAFETY: valid session and index (from its own port list); the type info is released
    // once, and the tensor info borrowed from it is not used after that.
    unsafe {
        if check(get(session.ptr(), index, &mut info)).is_err() || info.is_null() {
            return false;
        }
        let mut tensor = std::ptr::null();
        let has = check((api.CastTypeInfoToTensorInfo)(info, &mut tensor)).is_ok()
            && !tensor.is_null()
            && (api.TensorTypeAndShape_HasShape)(tensor);
        (api.ReleaseTypeInfo)(info);
        has
    }
}

struct Profiling {
    /// Deleted with the executable.
    dir: tempfile::TempDir,
}

struct OrtExecutable {
    pu: String,
    /// ONNX Runtime's name of the PU's execution provider, checked against the profile.
    provider: &'static str,
    /// As requested, checked against the profile.
    intra_threads: Option<usize>,
    session: Session,
    binding: IoBinding,
    cpu: MemoryInfo<'static>,
    input_names: Vec<CString>,
    inputs: Vec<PortInfo>,
    outputs: Vec<PortInfo>,
    options: Arc<RunOptions>,
    profile: Option<Profiling>,
}

/// An `OrtValue` bident created; released once.
struct ValueGuard(*mut ort::sys::OrtValue);
impl Drop for ValueGuard {
    fn drop(&mut self) {
        // SAFETY: created by CreateTensorWithDataAsOrtValue, released once.
        unsafe { (ort::api().ReleaseValue)(self.0) }
    }
}

/// SAFETY: `status` must come from an ONNX Runtime API call.
unsafe fn check(status: ort::sys::OrtStatusPtr) -> Result<(), String> {
    // SAFETY: forwarded from the caller; ort takes ownership and releases the status.
    unsafe { ort::Error::result_from_status(status) }.map_err(|e| first_lines(&e.to_string()))
}

impl Executable for OrtExecutable {
    fn inputs(&self) -> &[PortInfo] {
        &self.inputs
    }

    fn outputs(&self) -> &[PortInfo] {
        &self.outputs
    }

    fn run_timed(&mut self, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError> {
        let outcome = self.bind_and_run(inputs);
        // whatever happened, the binding keeps no pointer to the caller's buffers past this call
        self.binding.clear_inputs();
        outcome
    }

    fn layers(&self) -> Result<Vec<Layer>, BackendError> {
        self.profiled_layers()
    }

    fn canceller(&self) -> Option<crate::Canceller> {
        let options = self.options.clone();
        Some(Arc::new(move || {
            // fails only where ONNX Runtime cannot set a flag: nothing more to do then
            let _ = options.terminate();
        }))
    }
}

impl OrtExecutable {
    /// [`Executable::run_timed`] without clearing the binding.
    fn bind_and_run(&mut self, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError> {
        let pu = self.pu.clone();
        let run_err = |what: &str, reason: String| BackendError::Run { pu: pu.clone(), what: what.to_string(), reason };
        if inputs.len() != self.inputs.len() {
            return Err(run_err("inputs", format!("model takes {} inputs, got {}", self.inputs.len(), inputs.len())));
        }
        if let Some(p) = &self.profile {
            clear_folder(p.dir.path()).map_err(|e| run_err("profiling", e))?;
        }
        let t0 = Instant::now();
        let mut held = Vec::with_capacity(inputs.len());
        for (i, (t, port)) in inputs.iter().zip(&self.inputs).enumerate() {
            crate::check_input(&self.pu, i, port, t)?;
            let bad = |reason: String| BackendError::BadInput {
                pu: self.pu.clone(),
                index: i,
                name: port.name.clone(),
                reason,
            };
            let dims: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
            let mut value = std::ptr::null_mut();
            // SAFETY: the host buffer outlives the run below (held by the caller) and the binding
            // is cleared when `run_timed` returns, so ONNX Runtime keeps no pointer to it. ONNX Runtime
            // never writes to an input, and inputs may be shared with other consumers: the cast to
            // *mut only satisfies the C signature. An output that aliases an input (an Identity)
            // is copied out below before the buffer can change.
            unsafe {
                check((ort::api().CreateTensorWithDataAsOrtValue)(
                    self.cpu.ptr(),
                    t.data.as_ptr() as *mut c_void,
                    t.data.len(),
                    dims.as_ptr(),
                    dims.len(),
                    to_ort(t.dtype).into(),
                    &mut value,
                ))
                .map_err(bad)?;
                let value = ValueGuard(value);
                check((ort::api().BindInput)(self.binding.ptr_mut(), self.input_names[i].as_ptr(), value.0))
                    .map_err(bad)?;
                held.push(value);
            }
        }
        let t1 = Instant::now();
        let result = self.session.run_binding_with_options(&self.binding, &self.options);
        let t2 = Instant::now();
        let result = result.map_err(|e| run_err("infer", first_lines(&e.to_string()))).and_then(|values| {
            self.outputs
                .iter()
                .map(|port| {
                    let v = values
                        .get(port.name.as_str())
                        .ok_or_else(|| run_err("output", format!("`{}` was not produced", port.name)))?;
                    let ValueType::Tensor { shape, .. } = v.dtype() else {
                        return Err(run_err("output", format!("`{}` is not a tensor", port.name)));
                    };
                    let dims: Vec<u64> = shape.iter().map(|&d| d.max(0) as u64).collect();
                    let bytes = bident_tensor::numel(&dims) as usize * port.dtype.size();
                    let mut data = std::ptr::null_mut();
                    // SAFETY: a CPU tensor produced by the run, alive while `values` is; read
                    // within its byte size (shape times element size) and copied out here.
                    let buf = unsafe {
                        check((ort::api().GetTensorMutableData)(v.ptr() as *mut _, &mut data))
                            .map_err(|e| run_err("output", e))?;
                        if bytes == 0 || data.is_null() {
                            vec![]
                        } else {
                            std::slice::from_raw_parts(data.cast::<u8>(), bytes).to_vec()
                        }
                    };
                    HostTensor::new(&port.name, port.dtype, dims, buf).map_err(|e| run_err("output", e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()
        });
        let t3 = Instant::now();
        drop(held);
        Ok((result?, RunTiming { h2d: t1 - t0, infer: t2 - t1, d2h: t3 - t2 }))
    }

    fn profiled_layers(&self) -> Result<Vec<Layer>, BackendError> {
        let err = |reason: String| BackendError::Run { pu: self.pu.clone(), what: "profiling".into(), reason };
        let p = self.profile.as_ref().ok_or_else(|| err("the model was not compiled with profiling on".into()))?;
        let file = last_profile(p.dir.path()).map_err(err)?;
        let text = std::fs::read_to_string(&file).map_err(|e| err(format!("{}: {e}", file.display())))?;
        let nodes = profile::parse(&text).map_err(|e| err(format!("{}: {e}", file.display())))?;
        if let Some(n) = nodes.iter().find(|n| n.provider != self.provider) {
            return Err(err(format!("node `{}` ran on {}, not on the PU's {}", n.name, n.provider, self.provider)));
        }
        // the intra-op pool is the CPU provider's; other providers' nodes report no threads
        if let Some(want) = self.intra_threads
            && let Some(n) = nodes.iter().find(|n| n.provider == CPU_PROVIDER && n.threads != want)
        {
            return Err(BackendError::PropertyIgnored {
                pu: self.pu.clone(),
                key: "INTRA_OP_NUM_THREADS".into(),
                value: want.to_string(),
                actual: format!("{} (threads node `{}` could run on)", n.threads, n.name),
            });
        }
        Ok(nodes.into_iter().map(profile::Node::into_layer).collect())
    }
}

fn clear_folder(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The one profile file the last run wrote.
fn last_profile(dir: &Path) -> Result<PathBuf, String> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    match files.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err("no profile: run the model first".into()),
        _ => Err(format!("{} profile files in {}, expected one", files.len(), dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pu(properties: &[(&str, &str)]) -> PuSpec {
        PuSpec {
            name: "cpu".into(),
            backend: "onnxruntime".into(),
            kind: PuKind::Cpu,
            device: "CPU".into(),
            properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cores: vec![],
            declared_power_w: 15.0,
            whole_only: false,
        }
    }

    #[test]
    fn quiet_stops_a_pool_spinning_unless_the_pu_says() {
        let spin = |p: &PuSpec| p.properties.get(SPIN_KEY).cloned();
        // (properties, SPIN_BETWEEN_RUNS of the quiet PU)
        type Props<'a> = &'a [(&'a str, &'a str)];
        let cases: [(Props, Option<&str>); 5] = [
            (&[], Some("NO")),
            (&[("INTRA_OP_NUM_THREADS", "2")], Some("NO")),
            (&[("INTRA_OP_NUM_THREADS", "1")], None),
            (&[(SPIN_KEY, "YES")], Some("YES")),
            (&[(SPIN_KEY, "no"), ("INTRA_OP_NUM_THREADS", "4")], Some("no")),
        ];
        for (props, want) in cases {
            let q = quiet(&pu(props));
            assert_eq!(spin(&q).as_deref(), want, "{props:?}");
            assert_eq!(
                options(&q).expect("valid").spin_between_runs,
                !want.is_some_and(|w| w.eq_ignore_ascii_case("no"))
            );
        }
        assert!(options(&pu(&[])).expect("valid").spin_between_runs, "ONNX Runtime's default spins");
        assert!(matches!(options(&pu(&[(SPIN_KEY, "SOMETIMES")])), Err(BackendError::PropertyIgnored { .. })));
    }
}
