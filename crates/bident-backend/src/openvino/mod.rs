//! The OpenVINO backend, through the C API (`openvino-sys` with runtime linking).
//!
//! Why not the `openvino` crate: its handles keep their raw pointers crate-private, so neither
//! `ov_core_compile_model_props` (the only way to pass compile properties under runtime linking,
//! where C varargs are dropped) nor `ov_infer_request_get_profiling_info` can be reached through
//! it. This module is the small safe layer bident needs, over `openvino-sys` directly.
//!
//! What the timing parts mean on an OpenVINO CPU PU (unified host memory, no copies):
//! - `h2d`: wrapping each host input buffer as an `ov_tensor` and setting it on the request;
//! - `infer`: the synchronous `ov_infer_request_infer` call, i.e. dispatch and execution;
//! - `d2h`: reading each output tensor's shape and copying its bytes back into host memory.

pub mod install;
mod rewrite;

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use openvino_sys as sys;
use sys::{ov_element_type_e as Et, ov_status_e};

use crate::{
    Backend, BackendError, DType, DeviceInfo, Executable, HostTensor, Layer, LayerStatus, PortInfo, PuKind, PuSpec,
    RunTiming,
};

/// The OpenVINO runtime: one `ov_core_t`.
pub struct OpenVino {
    core: *mut sys::ov_core_t,
    library: PathBuf,
}

// SAFETY: ov::Core is documented as thread-safe; bident never mutates it after creation except
// through its own (thread-safe) API calls.
unsafe impl Send for OpenVino {}
unsafe impl Sync for OpenVino {}

impl Drop for OpenVino {
    fn drop(&mut self) {
        // SAFETY: created by ov_core_create, freed once.
        unsafe { sys::ov_core_free(self.core) }
    }
}

fn last_error(status: ov_status_e) -> String {
    // SAFETY: both functions return static or thread-local C strings owned by OpenVINO.
    unsafe {
        let info = sys::ov_get_error_info(status);
        let msg = sys::ov_get_last_err_msg();
        let info = if info.is_null() { String::new() } else { CStr::from_ptr(info).to_string_lossy().into_owned() };
        let msg = if msg.is_null() { String::new() } else { CStr::from_ptr(msg).to_string_lossy().trim().to_string() };
        match (info.is_empty(), msg.is_empty()) {
            (_, false) => first_lines(&msg),
            (false, true) => info,
            (true, true) => format!("status {status:?}"),
        }
    }
}

/// OpenVINO messages carry C++ source locations and stack-like context; keep them short.
fn first_lines(msg: &str) -> String {
    let lines: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Check ") && !l.contains(".cpp:"))
        .take(3)
        .collect();
    if lines.is_empty() { msg.lines().next().unwrap_or("").to_string() } else { lines.join(" | ") }
}

fn check(status: ov_status_e) -> Result<(), String> {
    if status == ov_status_e::OK { Ok(()) } else { Err(last_error(status)) }
}

/// Take ownership of a C string allocated by OpenVINO.
unsafe fn take_string(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: caller passes a NUL-terminated string allocated by OpenVINO, freed here once.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        sys::ov_free(p);
        s
    }
}

fn cstring(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("`{s}` contains a NUL byte"))
}

pub fn to_ov(dtype: DType) -> Et {
    match dtype {
        DType::F32 => Et::F32,
        DType::F16 => Et::F16,
        DType::Bf16 => Et::BF16,
        DType::F64 => Et::F64,
        DType::I8 => Et::I8,
        DType::I16 => Et::I16,
        DType::I32 => Et::I32,
        DType::I64 => Et::I64,
        DType::U8 => Et::U8,
        DType::U16 => Et::U16,
        DType::U32 => Et::U32,
        DType::U64 => Et::U64,
        DType::Bool => Et::OV_BOOLEAN,
    }
}

pub fn from_ov(et: Et) -> Option<DType> {
    Some(match et {
        Et::F32 => DType::F32,
        Et::F16 => DType::F16,
        Et::BF16 => DType::Bf16,
        Et::F64 => DType::F64,
        Et::I8 => DType::I8,
        Et::I16 => DType::I16,
        Et::I32 => DType::I32,
        Et::I64 => DType::I64,
        Et::U8 => DType::U8,
        Et::U16 => DType::U16,
        Et::U32 => DType::U32,
        Et::U64 => DType::U64,
        Et::OV_BOOLEAN => DType::Bool,
        _ => return None,
    })
}

/// The hwloc setting that makes TBB, under OpenVINO's CPU plugin, leave threads where they are.
const UNBOUND: (&str, &str) = ("HWLOC_THISSYSTEM", "0");

/// Turn off TBB's thread binding for OpenVINO, where it places nothing.
///
/// OpenVINO's CPU plugin runs each inference in a TBB arena, and TBB (through hwloc) binds a
/// thread entering it to the arena's cores and restores the thread's own mask on leaving: two
/// `sched_setaffinity` calls per inference. On the 2-core EPYC VM a one-op call to a PU compiled
/// for one thread took 6.6-6.9 µs from an unpinned thread and 9.2-12.4 µs from a thread bident
/// pinned to a core (whose mask each call widens to every core and narrows back), 3.4-3.7 µs
/// from either unbound (`cargo bench -p bident-tests --bench handoff`). On a machine with one
/// NUMA node and one core type the arena's cores are every core the process may use, so the
/// binding places nothing; there this sets hwloc's `HWLOC_THISSYSTEM=0`, under which hwloc makes
/// no binding calls. Where a NUMA node or a core type is there to choose (a
/// `SCHEDULING_CORE_TYPE` PU), or the variable is set already, it does nothing. Returns whether
/// it set the variable; [`threads_unbound`] says whether the process runs unbound.
///
/// # Safety
/// It sets an environment variable: call it before the process starts a second thread.
pub unsafe fn unbind_threads() -> bool {
    if !cfg!(target_os = "linux") || std::env::var_os(UNBOUND.0).is_some() || binding_places_threads() {
        return false;
    }
    // SAFETY: the caller promises no other thread exists to read the environment meanwhile.
    unsafe { std::env::set_var(UNBOUND.0, UNBOUND.1) };
    true
}

/// Whether OpenVINO runs with TBB's thread binding off in this process ([`unbind_threads`]).
pub fn threads_unbound() -> bool {
    std::env::var_os(UNBOUND.0).is_some_and(|v| v == UNBOUND.1)
}

/// Whether binding a thread to an arena's cores can place it: other than one NUMA node (none
/// readable counts as other), or a hybrid processor.
fn binding_places_threads() -> bool {
    numa_nodes(&crate::soc::sysfs_devices().join("system/node")) != 1 || crate::soc::hybrid_cores().is_some()
}

/// How many NUMA nodes Linux lists in `dir` (`node0`, `node1`, ...): 0 where it cannot be read.
fn numa_nodes(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("node").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

impl OpenVino {
    /// Load `libopenvino_c` from its full path (the wheel ships only the versioned name, which
    /// the crate's own finder does not look for) and create a core.
    pub fn load(library: &Path) -> Result<Self, BackendError> {
        // openvino-sys keeps the first library it loads for the whole process, and panics on a
        // call to a symbol the library lacks: refuse both situations up front
        static LOADED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        let first = LOADED.get_or_init(|| library.to_path_buf());
        if first != library {
            return Err(BackendError::Library(format!(
                "{} is already loaded in this process; cannot also load {}",
                first.display(),
                library.display()
            )));
        }
        check_symbols(library)?;
        crate::keep_freed_memory();
        sys::library::load_from(library).map_err(|e| BackendError::Library(format!("{}: {e}", library.display())))?;
        let mut core = ptr::null_mut();
        // SAFETY: out-pointer to a fresh core.
        check(unsafe { sys::ov_core_create(&mut core) })
            .map_err(|e| BackendError::Library(format!("cannot create an OpenVINO core: {e}")))?;
        Ok(Self { core, library: library.to_path_buf() })
    }

    pub fn library(&self) -> &Path {
        &self.library
    }

    fn device_property(&self, device: &str, key: &str) -> Result<String, String> {
        let (d, k) = (cstring(device)?, cstring(key)?);
        let mut value = ptr::null_mut();
        // SAFETY: valid core and C strings; value is freed by take_string.
        unsafe {
            check(sys::ov_core_get_property(self.core, d.as_ptr(), k.as_ptr(), &mut value))?;
            Ok(take_string(value))
        }
    }
}

/// C API functions bident calls; a library without them is too old.
const REQUIRED_SYMBOLS: &[&str] = &[
    "ov_core_create",
    "ov_core_compile_model_props",
    "ov_core_read_model_from_memory_buffer",
    "ov_compiled_model_get_property",
    "ov_port_get_partial_shape",
    "ov_tensor_create_from_host_ptr",
    "ov_infer_request_get_profiling_info",
];

fn check_symbols(library: &Path) -> Result<(), BackendError> {
    // SAFETY: opening the library runs its initialisers, exactly as the later load does.
    let lib = unsafe { libloading::Library::new(library) }
        .map_err(|e| BackendError::Library(format!("{}: {e}", library.display())))?;
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; it is never called through this handle.
        .filter(|s| unsafe { lib.get::<*const c_void>(s.as_bytes()) }.is_err())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(BackendError::Library(format!(
            "{} lacks {} (OpenVINO too old? bident needs {})",
            library.display(),
            missing.join(", "),
            install::OPENVINO_VERSION
        )))
    }
}

impl Backend for OpenVino {
    fn name(&self) -> &str {
        "openvino"
    }

    fn timing_meaning(&self, pu: &PuSpec) -> String {
        let kind = pu.kind;
        let api = "h2d = wrapping each host input as an ov_tensor and setting it on the request; infer = the \
                   synchronous ov_infer_request_infer call; d2h = reading each output's shape and copying its \
                   bytes to host memory";
        match kind {
            PuKind::Cpu => format!("{api} (CPU: unified host memory, no device copies)"),
            _ => format!(
                "{api} ({}: any copy to or from device memory happens inside the infer call)",
                kind.name().to_uppercase()
            ),
        }
    }

    fn version(&self) -> String {
        let mut v = sys::ov_version_t { buildNumber: ptr::null(), description: ptr::null() };
        // SAFETY: out-struct freed by ov_version_free.
        unsafe {
            if sys::ov_get_openvino_version(&mut v) != ov_status_e::OK || v.buildNumber.is_null() {
                return "unknown".into();
            }
            let mut s = CStr::from_ptr(v.buildNumber).to_string_lossy().into_owned();
            sys::ov_version_free(&mut v);
            // how it runs changes its costs: cached ones are keyed by this
            if threads_unbound() {
                s.push_str(" (threads unbound)");
            }
            s
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let mut list = sys::ov_available_devices_t { devices: ptr::null_mut(), size: 0 };
        // SAFETY: out-struct freed by ov_available_devices_free after copying the names.
        let names = unsafe {
            check(sys::ov_core_get_available_devices(self.core, &mut list)).map_err(BackendError::Library)?;
            let names = (0..list.size)
                .map(|i| CStr::from_ptr(*list.devices.add(i)).to_string_lossy().into_owned())
                .collect::<Vec<_>>();
            sys::ov_available_devices_free(&mut list);
            names
        };
        Ok(names
            .into_iter()
            .map(|name| DeviceInfo {
                kind: PuKind::from_device_name(&name),
                full_name: self.device_property(&name, "FULL_DEVICE_NAME").unwrap_or_default(),
                precision: self.device_property(&name, "INFERENCE_PRECISION_HINT").ok().filter(|p| !p.is_empty()),
                name,
            })
            .collect())
    }

    fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.compile_with(onnx, pu, false)
    }

    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.compile_with(onnx, pu, true)
    }
}

impl OpenVino {
    fn compile_with(&self, onnx: &[u8], pu: &PuSpec, profiled: bool) -> Result<Box<dyn Executable>, BackendError> {
        let fail = |reason: String| BackendError::Compile { pu: pu.name.clone(), reason };
        if crate::model_check::names_a_file(onnx) {
            return Err(fail(crate::model_check::NAMES_A_FILE.into()));
        }
        let onnx = rewrite::for_openvino(onnx);
        let mut model = ptr::null_mut();
        // SAFETY: the buffer outlives the call; OpenVINO copies what it keeps.
        check(unsafe {
            sys::ov_core_read_model_from_memory_buffer(
                self.core,
                onnx.as_ptr().cast::<c_char>(),
                onnx.len(),
                ptr::null(),
                &mut model,
            )
        })
        .map_err(|e| fail(format!("cannot read model: {e}")))?;
        let model = ModelGuard(model);

        let mut properties = pu.properties.clone();
        if profiled {
            properties.insert("PERF_COUNT".into(), "YES".into());
        }
        let props: Vec<(CString, CString)> = properties
            .iter()
            .map(|(k, v)| Ok((cstring(k)?, cstring(v)?)))
            .collect::<Result<_, String>>()
            .map_err(fail)?;
        let raw: Vec<sys::ov_property_t> = props
            .iter()
            .map(|(k, v)| sys::ov_property_t { key: k.as_ptr(), value: v.as_ptr().cast::<c_void>() })
            .collect();
        let device = cstring(&pu.device).map_err(fail)?;
        let mut compiled = ptr::null_mut();
        // SAFETY: all pointers valid for the call; properties are C strings as the API expects.
        check(unsafe {
            sys::ov_core_compile_model_props(
                self.core,
                model.0,
                device.as_ptr(),
                raw.len(),
                if raw.is_empty() { ptr::null() } else { raw.as_ptr() },
                &mut compiled,
            )
        })
        .map_err(fail)?;
        let mut exe = OvExecutable {
            pu: pu.name.clone(),
            compiled,
            request: ptr::null_mut(),
            inputs: vec![],
            outputs: vec![],
            profiled,
            cancel: Arc::default(),
        };
        exe.verify_properties(&properties)?;
        exe.inputs = exe.ports(true).map_err(fail)?;
        exe.outputs = exe.ports(false).map_err(fail)?;
        // SAFETY: valid compiled model; request freed in Drop.
        check(unsafe { sys::ov_compiled_model_create_infer_request(exe.compiled, &mut exe.request) })
            .map_err(|e| fail(format!("cannot create infer request: {e}")))?;
        lock(&exe.cancel).0 = exe.request;
        Ok(Box::new(exe))
    }
}

struct ModelGuard(*mut sys::ov_model_t);
impl Drop for ModelGuard {
    fn drop(&mut self) {
        // SAFETY: created by read_model, freed once.
        unsafe { sys::ov_model_free(self.0) }
    }
}

struct OvExecutable {
    pu: String,
    compiled: *mut sys::ov_compiled_model_t,
    request: *mut sys::ov_infer_request_t,
    inputs: Vec<PortInfo>,
    outputs: Vec<PortInfo>,
    profiled: bool,
    /// The infer request again, for [`Executable::canceller`]: null once it is freed.
    cancel: Arc<Mutex<Request>>,
}

// SAFETY: a compiled model and its infer request may be used from any one thread at a time;
// `Executable::run_timed` takes `&mut self`.
unsafe impl Send for OvExecutable {}

/// The infer request (null once freed), and whether its runs were cancelled.
struct Request(*mut sys::ov_infer_request_t, bool);

/// A poisoned lock only means a thread panicked holding it; the pointer stays valid.
fn lock(m: &Mutex<Request>) -> MutexGuard<'_, Request> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Request {
    fn default() -> Self {
        Request(ptr::null_mut(), false)
    }
}

// SAFETY: only `ov_infer_request_cancel` is called through it, which OpenVINO allows from any
// thread while another runs the request, and only while it is not freed (under the lock).
unsafe impl Send for Request {}

impl Drop for OvExecutable {
    fn drop(&mut self) {
        // no cancel after this: the request is freed below
        lock(&self.cancel).0 = ptr::null_mut();
        // SAFETY: each handle created once and freed once; request before its model.
        unsafe {
            if !self.request.is_null() {
                sys::ov_infer_request_free(self.request);
            }
            sys::ov_compiled_model_free(self.compiled);
        }
    }
}

impl OvExecutable {
    fn property(&self, key: &str) -> Result<String, String> {
        let k = cstring(key)?;
        let mut value = ptr::null_mut();
        // SAFETY: valid compiled model; value freed by take_string.
        unsafe {
            check(sys::ov_compiled_model_get_property(self.compiled, k.as_ptr(), &mut value))?;
            Ok(take_string(value))
        }
    }

    /// A device may accept a property and ignore it: read every requested one back.
    fn verify_properties(&self, wanted: &BTreeMap<String, String>) -> Result<(), BackendError> {
        for (key, value) in wanted {
            let actual = self.property(key).map_err(|e| BackendError::PropertyIgnored {
                pu: self.pu.clone(),
                key: key.clone(),
                value: value.clone(),
                actual: format!("<unreadable: {e}>"),
            })?;
            if !actual.eq_ignore_ascii_case(value) {
                return Err(BackendError::PropertyIgnored {
                    pu: self.pu.clone(),
                    key: key.clone(),
                    value: value.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    fn ports(&self, inputs: bool) -> Result<Vec<PortInfo>, String> {
        let mut n = 0usize;
        // SAFETY: valid compiled model; every port is freed after reading it.
        unsafe {
            if inputs {
                check(sys::ov_compiled_model_inputs_size(self.compiled, &mut n))?;
            } else {
                check(sys::ov_compiled_model_outputs_size(self.compiled, &mut n))?;
            }
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let mut port = ptr::null_mut();
                if inputs {
                    check(sys::ov_compiled_model_input_by_index(self.compiled, i, &mut port))?;
                } else {
                    check(sys::ov_compiled_model_output_by_index(self.compiled, i, &mut port))?;
                }
                let info = read_port(port);
                sys::ov_output_const_port_free(port);
                out.push(info?);
            }
            Ok(out)
        }
    }
}

/// SAFETY: `port` must be a valid const port.
unsafe fn read_port(port: *mut sys::ov_output_const_port_t) -> Result<PortInfo, String> {
    unsafe {
        let mut name = ptr::null_mut();
        check(sys::ov_port_get_any_name(port, &mut name))?;
        let name = take_string(name);
        let mut et = Et::DYNAMIC;
        check(sys::ov_port_get_element_type(port, &mut et))?;
        let dtype = from_ov(et).ok_or_else(|| format!("port `{name}`: unsupported element type {et:?}"))?;
        // the partial shape, not ov_const_port_get_shape: the C API refuses rank-0 (scalar) shapes
        let mut ps = sys::ov_partial_shape_t { rank: sys::ov_dimension_t { min: 0, max: 0 }, dims: ptr::null_mut() };
        check(sys::ov_port_get_partial_shape(port, &mut ps))?;
        let dims = if ps.rank.min == ps.rank.max && ps.rank.min >= 0 {
            (0..ps.rank.min as usize)
                .map(|i| {
                    let d = *ps.dims.add(i);
                    (d.min == d.max && d.min >= 0).then_some(d.min as u64)
                })
                .collect::<Option<Vec<u64>>>()
        } else {
            None
        };
        sys::ov_partial_shape_free(&mut ps);
        Ok(PortInfo { name, dtype, shape: dims })
    }
}

struct TensorGuard(*mut sys::ov_tensor_t);
impl Drop for TensorGuard {
    fn drop(&mut self) {
        // SAFETY: created by OpenVINO, freed once.
        unsafe { sys::ov_tensor_free(self.0) }
    }
}

impl Executable for OvExecutable {
    fn inputs(&self) -> &[PortInfo] {
        &self.inputs
    }

    fn outputs(&self) -> &[PortInfo] {
        &self.outputs
    }

    fn run_timed(&mut self, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError> {
        let run_err =
            |what: &str, reason: String| BackendError::Run { pu: self.pu.clone(), what: what.to_string(), reason };
        if lock(&self.cancel).1 {
            return Err(run_err("infer", "cancelled".into()));
        }
        if inputs.len() != self.inputs.len() {
            return Err(run_err("inputs", format!("model takes {} inputs, got {}", self.inputs.len(), inputs.len())));
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
            let mut dims: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
            // built by hand: ov_shape_create refuses rank 0, and the tensor copies the dims
            let shape = sys::ov_shape_t { rank: dims.len() as i64, dims: dims.as_mut_ptr() };
            let mut tensor = ptr::null_mut();
            // SAFETY: the host buffer outlives the infer call below (held by the caller) and
            // is only read by OpenVINO for an input; `dims` outlives the create call. Inputs may
            // be shared with other consumers, so nothing may write through this pointer: OpenVINO
            // never writes to input tensors. After this call returns, the request may still hold
            // these tensors; every run sets all inputs again before inferring, so a stale
            // pointer is never read.
            unsafe {
                check(sys::ov_tensor_create_from_host_ptr(
                    to_ov(t.dtype),
                    shape,
                    t.data.as_ptr() as *mut c_void,
                    &mut tensor,
                ))
                .map_err(bad)?;
                let tensor = TensorGuard(tensor);
                check(sys::ov_infer_request_set_input_tensor_by_index(self.request, i, tensor.0)).map_err(bad)?;
                held.push(tensor);
            }
        }
        let t1 = Instant::now();
        // SAFETY: valid request with all inputs set.
        check(unsafe { sys::ov_infer_request_infer(self.request) }).map_err(|e| run_err("infer", e))?;
        let t2 = Instant::now();
        let mut outs = Vec::with_capacity(self.outputs.len());
        for (i, port) in self.outputs.iter().enumerate() {
            let mut tensor = ptr::null_mut();
            // SAFETY: valid request after a successful infer; data copied before the guard drops.
            let out = unsafe {
                check(sys::ov_infer_request_get_output_tensor_by_index(self.request, i, &mut tensor))
                    .map_err(|e| run_err("output", e))?;
                let tensor = TensorGuard(tensor);
                let mut shape = sys::ov_shape_t { rank: 0, dims: ptr::null_mut() };
                let dims: Vec<u64> = if sys::ov_tensor_get_shape(tensor.0, &mut shape) == ov_status_e::OK {
                    let d = (0..shape.rank as usize).map(|k| *shape.dims.add(k) as u64).collect();
                    sys::ov_shape_free(&mut shape);
                    d
                } else if port.shape.as_deref() == Some(&[]) {
                    // the C API cannot return a rank-0 shape: a scalar port gives a scalar
                    vec![]
                } else {
                    return Err(run_err("output", last_error(ov_status_e::GENERAL_ERROR)));
                };
                let mut bytes = 0usize;
                check(sys::ov_tensor_get_byte_size(tensor.0, &mut bytes)).map_err(|e| run_err("output", e))?;
                let mut data = ptr::null_mut();
                check(sys::ov_tensor_data(tensor.0, &mut data)).map_err(|e| run_err("output", e))?;
                let buf =
                    if bytes == 0 { vec![] } else { std::slice::from_raw_parts(data.cast::<u8>(), bytes).to_vec() };
                HostTensor::new(&port.name, port.dtype, dims, buf).map_err(|e| run_err("output", e.to_string()))?
            };
            outs.push(out);
        }
        let t3 = Instant::now();
        drop(held);
        Ok((outs, RunTiming { h2d: t1 - t0, infer: t2 - t1, d2h: t3 - t2 }))
    }

    /// The CPU plugin lists each executed layer followed by the nodes fused into it (exec type
    /// `undef`); that order is what groups them here.
    fn layers(&self) -> Result<Vec<Layer>, BackendError> {
        let err = |reason: String| BackendError::Run { pu: self.pu.clone(), what: "profiling".into(), reason };
        if !self.profiled {
            return Err(err("the model was not compiled with profiling on".into()));
        }
        let mut list = sys::ov_profiling_info_list_t { profiling_infos: ptr::null_mut(), size: 0 };
        // SAFETY: valid request; the list is copied into owned strings and freed once.
        let raw: Vec<(String, String, String, LayerStatus, i64)> = unsafe {
            check(sys::ov_infer_request_get_profiling_info(self.request, &mut list)).map_err(err)?;
            let text = |p: *const c_char| {
                if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
            };
            let out = (0..list.size)
                .map(|i| {
                    let info = &*list.profiling_infos.add(i);
                    let status = match info.status {
                        sys::ov_profiling_info_t_Status::EXECUTED => LayerStatus::Executed,
                        sys::ov_profiling_info_t_Status::OPTIMIZED_OUT => LayerStatus::OptimizedOut,
                        _ => LayerStatus::NotRun,
                    };
                    (text(info.node_name), text(info.node_type), text(info.exec_type), status, info.real_time)
                })
                .collect();
            sys::ov_profiling_info_list_free(&mut list);
            out
        };
        let mut layers: Vec<Layer> = vec![];
        for (name, layer_type, exec_type, status, real_time) in raw {
            match layers.last_mut() {
                Some(host) if exec_type == "undef" => host.fused.push(name),
                _ => layers.push(Layer {
                    name,
                    layer_type,
                    exec_type,
                    status,
                    real_time: std::time::Duration::from_micros(real_time.max(0) as u64),
                    fused: vec![],
                }),
            }
        }
        Ok(layers)
    }

    fn canceller(&self) -> Option<crate::Canceller> {
        let request = self.cancel.clone();
        Some(Arc::new(move || {
            let mut r = lock(&request);
            r.1 = true;
            if !r.0.is_null() {
                // SAFETY: the request is alive while the lock is held and non-null (its
                // executable nulls it under the lock before freeing it); OpenVINO cancels from
                // any thread. Failing, it leaves the run going: nothing more to do here.
                unsafe { sys::ov_infer_request_cancel(r.0) };
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    /// Only `nodeN` entries count as NUMA nodes; an unreadable folder counts none, and so
    /// leaves the binding alone.
    #[test]
    fn numa_nodes_are_counted_from_their_folders() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        for name in ["node0", "node1", "node", "nodex", "online", "possible"] {
            std::fs::create_dir(dir.path().join(name)).expect("a folder");
        }
        assert_eq!(super::numa_nodes(dir.path()), 2);
        assert_eq!(super::numa_nodes(&dir.path().join("missing")), 0);
    }
}
