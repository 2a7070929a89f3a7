//! The processing-unit (PU) abstraction, and its OpenVINO and ONNX Runtime implementations.
//!
//! A [`Backend`] compiles a standalone ONNX model for one PU (described by a [`PuSpec`]) into an
//! [`Executable`] that runs on the calling thread with host tensors. bident-profile and
//! bident-runtime are written against these traits only; which backend is used is decided by the
//! caller (xtask, tests). Each implementation is a module behind a feature of its own
//! (`openvino`, `onnxruntime`).
//!
//! Architecture invariant: this is the only crate that touches OpenVINO or ONNX Runtime. It
//! knows nothing of graphs, cost tables or plans.

pub mod deadline;
pub mod fault;
pub mod multi;
pub mod soc;
mod soc_check;
pub mod speed;

#[cfg(any(feature = "openvino", feature = "onnxruntime"))]
mod model_check;
#[cfg(feature = "onnxruntime")]
pub mod onnxruntime;
#[cfg(feature = "openvino")]
pub mod openvino;
#[cfg(any(feature = "openvino", feature = "onnxruntime"))]
mod wheel;

pub use bident_tensor::{DType, HostTensor};
pub use multi::Backends;
pub use soc::{PuFile, PuKind, PuSpec, SocError, SocFile, SocSpec};

use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, thiserror::Error)]
pub enum BackendError {
    #[error("backend library: {0}")]
    Library(String),
    #[error("PU `{pu}`: cannot compile: {reason}")]
    Compile { pu: String, reason: String },
    #[error("PU `{pu}`: {what}: {reason}")]
    Run { pu: String, what: String, reason: String },
    #[error("PU `{pu}`: input {index} (`{name}`): {reason}")]
    BadInput { pu: String, index: usize, name: String, reason: String },
    #[error("PU `{pu}`: setting `{key}` = `{value}` was not applied (device reports `{actual}`)")]
    PropertyIgnored { pu: String, key: String, value: String, actual: String },
    #[error("PU `{pu}`: cannot pin to cores {cores:?}: {reason}")]
    Pinning { pu: String, cores: Vec<usize>, reason: String },
    #[error("no backend `{name}` here (this build has: {})", built_in().join(", "))]
    UnknownBackend { name: String },
}

/// The backends this build has (its features), by the names PUs give them.
pub fn built_in() -> Vec<&'static str> {
    let mut out = vec![];
    if cfg!(feature = "openvino") {
        out.push("openvino");
    }
    if cfg!(feature = "onnxruntime") {
        out.push("onnxruntime");
    }
    out
}

/// A device a backend can compile for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend's device name, e.g. `CPU`, `GPU.0`, `NPU`.
    pub name: String,
    pub kind: PuKind,
    /// Human-readable name, e.g. the CPU model string.
    pub full_name: String,
    /// The precision the device computes f32 models in when left to its defaults (`f32`,
    /// `bf16`, `f16`), as the backend reports it; None when it does not say.
    pub precision: Option<String>,
}

/// Name, element type and shape of one model input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub name: String,
    pub dtype: DType,
    /// None when the shape is dynamic (fixed only when the model runs).
    pub shape: Option<Vec<u64>>,
}

/// Where the time of one timed run went. What each part means depends on the backend and PU
/// kind; the CPU meanings are documented on `openvino` and `onnxruntime`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunTiming {
    /// Making the inputs available to the PU.
    pub h2d: Duration,
    /// The backend's inference call (dispatch and execution).
    pub infer: Duration,
    /// Making the outputs available to the host.
    pub d2h: Duration,
}

/// What happened to one layer of a compiled model in its last run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerStatus {
    Executed,
    NotRun,
    OptimizedOut,
}

/// One layer the backend executed (or planned) for a compiled model, with the original nodes
/// it absorbed. Names are the backend's: after its own graph transformations, so they refer to
/// source nodes only loosely (a layer is named after one of the nodes it came from, sometimes
/// with a suffix such as `/WithoutBiases`, sometimes after a node the backend created).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub name: String,
    /// The backend's layer type, e.g. `Convolution`, `FullyConnected`, `Reorder`.
    pub layer_type: String,
    /// The kernel that ran, e.g. `brgconv_avx512_f32`.
    pub exec_type: String,
    pub status: LayerStatus,
    /// Time the layer took in the last run.
    pub real_time: Duration,
    /// Names of nodes fused into this layer (they did not run as layers of their own).
    pub fused: Vec<String>,
}

/// A backend: compiles ONNX models for PUs.
pub trait Backend: Send + Sync {
    /// Short name recorded in artifacts, e.g. `openvino`.
    fn name(&self) -> &str;
    /// Backend version string recorded in artifacts.
    fn version(&self) -> String;
    /// Devices this backend can compile for on this machine.
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError>;
    /// Compile a standalone ONNX model for a PU. Compile-time properties come from the spec and
    /// are read back: a property the device silently ignores is an error.
    fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError>;
    /// As [`Backend::compile`], with per-layer profiling on, so [`Executable::layers`] works.
    /// Profiling may slow the model down: do not time such an executable.
    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError>;
    /// What the parts of [`RunTiming`] stand for on this PU, in one line (recorded in cost
    /// tables beside the figures).
    fn timing_meaning(&self, pu: &PuSpec) -> String;
    /// `pu` configured to run beside other executables: none of its threads keeps a core busy
    /// once a run has returned. The profiler times its units in rounds and a multi-task session
    /// runs several executables in turn; an engine's pool spinning on after its run would slow
    /// whichever runs next (ONNX Runtime's does, see its `SPIN_BETWEEN_RUNS`). The default: `pu`
    /// as it is.
    fn quiet(&self, pu: &PuSpec) -> PuSpec {
        pu.clone()
    }
    /// The names of the backends that compile for PUs here (`PuSpec::backend`): this one's own
    /// name, or a dispatcher's members ([`Backends`]), the first being the default one.
    fn backends(&self) -> Vec<String> {
        vec![self.name().to_string()]
    }
    /// Name and version, e.g. `openvino 2026.4.1`, of the backend that compiles for PUs naming
    /// `backend`: what artifacts record per PU and what keys its cached costs.
    fn backend_id(&self, backend: &str) -> Result<String, BackendError> {
        self.check_backend(backend)?;
        Ok(format!("{} {}", self.name(), self.version()))
    }
    /// The kind of PU `pu` makes of `device`, one of its backend's devices: the device's own,
    /// unless the PU's properties pick other hardware (an ONNX Runtime execution provider's
    /// options can, e.g. QNN's `backend_type`). A SoC file's PU must declare this kind.
    fn pu_kind(&self, pu: &PuSpec, device: &DeviceInfo) -> PuKind {
        let _ = pu;
        device.kind
    }
    /// The devices of the backend named `backend` (what a PU naming it may use).
    fn devices_of(&self, backend: &str) -> Result<Vec<DeviceInfo>, BackendError> {
        self.check_backend(backend)?;
        self.devices()
    }
    /// Whether PUs naming `backend` can be compiled for here: [`BackendError::UnknownBackend`]
    /// if not.
    fn check_backend(&self, backend: &str) -> Result<(), BackendError> {
        match self.backends().iter().any(|b| b == backend) {
            true => Ok(()),
            false => Err(BackendError::UnknownBackend { name: backend.to_string() }),
        }
    }
}

/// A model compiled for one PU. `run` executes synchronously on the calling thread.
pub trait Executable: Send {
    fn inputs(&self) -> &[PortInfo];
    fn outputs(&self) -> &[PortInfo];
    /// Run once; inputs in the order of [`Executable::inputs`], outputs in the order of
    /// [`Executable::outputs`].
    fn run(&mut self, inputs: &[&HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        self.run_timed(inputs).map(|(out, _)| out)
    }
    /// Run once and report where the time went.
    fn run_timed(&mut self, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError>;
    /// Per-layer profile of the last run, in execution order. Needs the model compiled with
    /// profiling on ([`Backend::compile_profiled`]); otherwise an error.
    fn layers(&self) -> Result<Vec<Layer>, BackendError>;
    /// What stops a run of this executable from another thread: the run in progress then ends
    /// with an error soon after, and so does every later one. None where the engine cannot
    /// (the default). Safe to call at any time, also after the executable is gone.
    fn canceller(&self) -> Option<Canceller> {
        None
    }
}

/// Stops an executable's runs ([`Executable::canceller`]).
pub type Canceller = Arc<dyn Fn() + Send + Sync>;

/// The tensors to feed an executable whose inputs are `ports`, given `named` (name, tensor)
/// pairs in the graph's order: by port name where every port kept its tensor's name, else by
/// position when the counts agree (a backend may report another of a tensor's names, or drop
/// an input nothing reads), else None.
/// Input `index` of a run, checked against the compiled model's port: the element type, and a
/// buffer as long as the shape says (the backends wrap it without copying).
pub fn check_input(pu: &str, index: usize, port: &PortInfo, t: &HostTensor) -> Result<(), BackendError> {
    let bad = |reason: String| BackendError::BadInput { pu: pu.to_string(), index, name: port.name.clone(), reason };
    if t.dtype != port.dtype {
        return Err(bad(format!("expects {}, got {}", port.dtype, t.dtype)));
    }
    if t.data.len() != t.numel() * t.dtype.size() {
        return Err(bad("buffer size does not match shape".into()));
    }
    Ok(())
}

pub fn feed_order<'a>(ports: &[PortInfo], named: &[(&str, &'a HostTensor)]) -> Option<Vec<&'a HostTensor>> {
    let by_name: Option<Vec<&HostTensor>> =
        ports.iter().map(|p| named.iter().find(|(n, _)| *n == p.name).map(|(_, t)| *t)).collect();
    by_name.or_else(|| (ports.len() == named.len()).then(|| named.iter().map(|(_, t)| *t).collect()))
}

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data filled in by the kernel.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect();
                if !cpus.is_empty() {
                    return cpus;
                }
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// The CPU the calling thread is on now; None where that cannot be told (not Linux).
pub fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no arguments; returns -1 on failure.
        usize::try_from(unsafe { libc::sched_getcpu() }).ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Move the calling thread off the `busy` cores where it is on one of them now and may run on
/// another: its affinity is narrowed to its other allowed cores, which moves it at once, then
/// given back, which leaves it where it now is. True if it moved (never where not Linux).
pub fn step_off(busy: &[usize]) -> bool {
    #[cfg(target_os = "linux")]
    {
        if !current_cpu().is_some_and(|c| busy.contains(&c)) {
            return false;
        }
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is plain data filled in by the kernel; CPU_CLR bounds are checked
        // against CPU_SETSIZE.
        unsafe {
            let mut mine: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut mine) != 0 {
                return false;
            }
            let mut free = mine;
            for &c in busy.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_CLR(c, &mut free);
            }
            if libc::CPU_COUNT(&free) == 0 || libc::sched_setaffinity(0, size, &free) != 0 {
                return false;
            }
            // the mask it had is one it was allowed: giving it back cannot fail but by a race
            // with another thread changing it, which then decides
            libc::sched_setaffinity(0, size, &mine);
        }
        true
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = busy;
        false
    }
}

/// How many of this process's threads other than the calling one are running (on a CPU or
/// waiting for one) now, from `/proc/self/task`; None where that cannot be read (not Linux).
/// An engine's thread pool that spins after its last inference shows here until it sleeps.
pub fn other_threads_running() -> Option<usize> {
    let me = std::fs::read_link("/proc/thread-self").ok()?;
    let me = me.file_name()?.to_owned();
    let mut n = 0;
    for e in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        if e.file_name() == me {
            continue;
        }
        // `TID (COMM) STATE ...`: COMM may hold spaces and parentheses, so read after the last `)`
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('R')) {
            n += 1;
        }
    }
    Some(n)
}

/// CPU time (s) the machine's other processes have used since boot: every CPU's busy time
/// (`/proc/stat`) less this process's (`/proc/self/stat`). Differences over an interval tell
/// whether something else kept the cores busy meanwhile. None where unreadable (not Linux).
pub fn others_cpu_seconds() -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        let all = busy_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let mine = process_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        // SAFETY: no arguments; returns -1 on failure.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| all.saturating_sub(mine) as f64 / hz as f64)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The busy clock ticks of all CPUs in `/proc/stat`: user, nice, system, irq and softirq (not
/// idle, I/O wait or time stolen by the hypervisor).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    Some(v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?)
}

/// A process's user and system clock ticks from its `/proc/<pid>/stat` (`PID (COMM) STATE ...`,
/// utime and stime the 12th and 13th fields after COMM, which may hold spaces and parentheses).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn process_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let v: Vec<&str> = rest.split_whitespace().collect();
    Some(v.get(11)?.parse::<u64>().ok()? + v.get(12)?.parse::<u64>().ok()?)
}

/// Keep the memory the process frees for reuse: once per process, on loading an engine (glibc
/// only; elsewhere the allocator is left as it is). Every op's outputs are fresh host buffers,
/// freed an inference later. Under glibc's defaults a free that leaves more than 128 KiB free at
/// the top of a heap gives it back to the system, and the next inference faults every page in
/// again: 16 tensors of 64 KiB handed between two ops on one thread took 725-1,279 µs an
/// inference on a 2-core VM, 195-296 µs with the memory kept (`cargo bench -p bident-tests
/// --bench handoff`). Setting the trim threshold stops glibc adapting its mmap
/// threshold, so that is raised to its maximum (32 MiB): buffers below it come from the heap and
/// are reused. Returns whether both settings took.
pub fn keep_freed_memory() -> bool {
    static KEPT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            /// Free memory a heap keeps at its top (glibc's default: 128 KiB).
            const TRIM_THRESHOLD: libc::c_int = 256 << 20;
            /// glibc's largest mmap threshold on 64-bit targets.
            const MMAP_THRESHOLD: libc::c_int = 32 << 20;
            // SAFETY: mallopt only sets allocator parameters; both values are in glibc's range.
            unsafe {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
                    && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            }
        }
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        false
    })
}

/// Pin the calling thread to the given CPU cores (no-op for an empty list).
pub fn pin_current_thread(pu: &str, cores: &[usize]) -> Result<(), BackendError> {
    if cores.is_empty() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data; CPU_SET bounds are checked against CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cores {
                if c >= libc::CPU_SETSIZE as usize {
                    return Err(BackendError::Pinning {
                        pu: pu.to_string(),
                        cores: cores.to_vec(),
                        reason: format!("core {c} out of range"),
                    });
                }
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(BackendError::Pinning {
                    pu: pu.to_string(),
                    cores: cores.to_vec(),
                    reason: std::io::Error::last_os_error().to_string(),
                });
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(BackendError::Pinning {
        pu: pu.to_string(),
        cores: cores.to_vec(),
        reason: "thread pinning is only implemented on Linux".into(),
    })
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

/// The name and version of every backend `soc`'s PUs name, joined by ` + `
/// (`openvino 2026.4.1 + onnxruntime 1.32.0`): the PU whose backend `backend` does not have
/// is the error's.
pub fn describe(backend: &dyn Backend, soc: &SocSpec) -> Result<String, (String, BackendError)> {
    let mut ids: Vec<String> = vec![];
    for pu in &soc.pus {
        let id = backend.backend_id(&pu.backend).map_err(|e| (pu.name.clone(), e))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids.join(" + "))
}

#[cfg(test)]
mod tests {
    /// glibc takes both settings (a value out of its range would be refused).
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_is_kept() {
        assert!(super::keep_freed_memory());
    }

    #[test]
    fn busy_and_process_ticks_are_read_from_procs_lines() {
        let stat = "cpu  100 5 20 1000 7 3 2 9 0 0\ncpu0 50 2 10 500 3 1 1 4 0 0\n";
        assert_eq!(super::busy_ticks(stat), Some(100 + 5 + 20 + 3 + 2));
        assert_eq!(super::busy_ticks("cpu0 1 2 3\n"), None);
        let me = "4242 (a (tricky) name) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15";
        assert_eq!(super::process_ticks(me), Some(11 + 12));
        assert_eq!(super::process_ticks("4242 (x) R 1 2"), None);
    }

    /// A busy child process shows as the others' CPU time; where /proc cannot be read, nothing does.
    #[test]
    fn a_busy_process_shows_in_the_others_cpu_time() {
        let Some(before) = super::others_cpu_seconds() else { return };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done"])
            .spawn()
            .expect("sh");
        child.wait().expect("the busy child");
        let used = super::others_cpu_seconds().expect("readable again") - before;
        // at least a second of its time (the loop spins 1-2 s), none of this process's
        assert!(used >= 0.5, "the others used {used:.2} s of CPU while a child spun for 1-2 s");
    }

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A thread that spins is seen running.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_spinning_thread_runs() {
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        // it may wait for a core a moment, but it is never asleep
        let seen = super::other_threads_running().expect("Linux has /proc/self/task");
        stop.store(true, Ordering::Relaxed);
        spinning.join().expect("the spinning thread");
        assert!(seen >= 1, "the spinning thread was not seen running");
    }

    /// A thread on a busy core steps off it, to a core it may run on, and keeps the cores it
    /// was allowed; one allowed only busy cores stays.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_caller_steps_off_busy_cores() {
        let cpus = super::allowed_cpus();
        assert!(cpus.len() >= 2, "this test needs two cores, the process may run on {cpus:?}");
        std::thread::spawn(move || {
            let here = super::current_cpu().expect("Linux tells the CPU");
            assert!(super::step_off(&[here]), "on core {here}, allowed {cpus:?}: did not step off");
            let now = super::current_cpu().expect("Linux tells the CPU");
            assert_ne!(now, here, "stepped off core {here} but is still there");
            assert_eq!(super::allowed_cpus(), cpus, "the cores it may run on were not given back");
            assert!(!super::step_off(&[here]), "stepped off a core it was not on");
            super::pin_current_thread("test", &[now]).expect("pin");
            assert!(!super::step_off(&[now]), "stepped off the only core it may run on");
            assert_eq!(super::current_cpu(), Some(now));
        })
        .join()
        .expect("the stepping thread");
    }
}
