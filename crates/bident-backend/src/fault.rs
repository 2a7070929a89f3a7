//! A backend that fails on purpose: wraps another backend and makes one PU fail to compile, or
//! fail, hang or slow down when it runs, so that the runtime's fault handling and its drift
//! re-planning can be exercised on real PUs (`--inject-fault`, the runtime's tests).

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{Backend, BackendError, DeviceInfo, Executable, HostTensor, Layer, PortInfo, PuSpec, RunTiming};

/// What goes wrong on the faulty PU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every compile for the PU fails.
    Compile,
    /// Runs fail once the PU has run this many times in this process.
    RunAfter(u64),
    /// Runs block for this long, once the PU has run this many times (a hung device).
    HangAfter(u64, Duration),
    /// Runs take this many times as long (busy, as a throttled or contended device is), once
    /// the PU has run this many times.
    SlowAfter(u64, SlowFactor),
    /// As `SlowAfter`, from the PU's first count of runs until its second: a device that
    /// throttles and recovers.
    SlowBetween(u64, u64, SlowFactor),
}

/// How many times slower a slowed PU runs: above 1, at most 1,000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowFactor(f64);

impl SlowFactor {
    pub fn new(f: f64) -> Option<Self> {
        (f.is_finite() && f > 1.0 && f <= 1000.0).then_some(Self(f))
    }
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Eq for SlowFactor {}

/// `PU:compile`, `PU:run` (`PU:run@N` after N good runs), `PU:hang` (`PU:hang@N`) or
/// `PU:slow=F` (`PU:slow=F@N`: F times slower after N runs; `PU:slow=F@N-M`: from run N until
/// run M), as given to `--inject-fault`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub pu: String,
    pub fault: Fault,
}

impl FromStr for FaultSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("`{s}`: expected PU:compile, PU:run[@N], PU:hang[@N] or PU:slow=F[@N[-M]] (1 < F <= 1000, N < M)")
        };
        let (pu, what) = s.rsplit_once(':').ok_or_else(bad)?;
        let (what, after, until) = match what.split_once('@') {
            Some((w, n)) => match n.split_once('-') {
                Some((n, m)) => {
                    let (n, m) = (n.parse::<u64>().map_err(|_| bad())?, m.parse::<u64>().map_err(|_| bad())?);
                    if m <= n {
                        return Err(bad());
                    }
                    (w, n, Some(m))
                }
                None => (w, n.parse::<u64>().map_err(|_| bad())?, None),
            },
            None => (what, 0, None),
        };
        if until.is_some() && !what.starts_with("slow=") {
            return Err(bad());
        }
        let fault = match what {
            "compile" if after == 0 => Fault::Compile,
            "run" => Fault::RunAfter(after),
            "hang" => Fault::HangAfter(after, Duration::from_secs(3600)),
            w => match (w.strip_prefix("slow=").and_then(|f| f.parse::<f64>().ok()).and_then(SlowFactor::new), until) {
                (Some(f), None) => Fault::SlowAfter(after, f),
                (Some(f), Some(m)) => Fault::SlowBetween(after, m, f),
                (None, _) => return Err(bad()),
            },
        };
        if pu.is_empty() {
            return Err(bad());
        }
        Ok(Self { pu: pu.to_string(), fault })
    }
}

/// `inner`, except on the PU named in `spec`.
pub struct FaultyBackend {
    inner: Arc<dyn Backend>,
    spec: FaultSpec,
    /// Runs of the faulty PU so far, over all its executables.
    runs: Arc<AtomicU64>,
}

impl FaultyBackend {
    pub fn new(inner: Arc<dyn Backend>, spec: FaultSpec) -> Self {
        Self { inner, spec, runs: Arc::default() }
    }
}

impl Backend for FaultyBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn version(&self) -> String {
        self.inner.version()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        self.inner.devices()
    }
    fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.wrap(self.inner.compile(onnx, pu)?, pu)
    }
    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.wrap(self.inner.compile_profiled(onnx, pu)?, pu)
    }
    fn timing_meaning(&self, pu: &PuSpec) -> String {
        self.inner.timing_meaning(pu)
    }
    fn quiet(&self, pu: &PuSpec) -> PuSpec {
        self.inner.quiet(pu)
    }
    fn backends(&self) -> Vec<String> {
        self.inner.backends()
    }
    fn backend_id(&self, backend: &str) -> Result<String, BackendError> {
        self.inner.backend_id(backend)
    }
    fn devices_of(&self, backend: &str) -> Result<Vec<DeviceInfo>, BackendError> {
        self.inner.devices_of(backend)
    }
    fn pu_kind(&self, pu: &PuSpec, device: &DeviceInfo) -> crate::PuKind {
        self.inner.pu_kind(pu, device)
    }
}

impl FaultyBackend {
    fn wrap(&self, exe: Box<dyn Executable>, pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        if pu.name != self.spec.pu {
            return Ok(exe);
        }
        if self.spec.fault == Fault::Compile {
            return Err(BackendError::Compile { pu: pu.name.clone(), reason: "injected fault".into() });
        }
        Ok(Box::new(FaultyExecutable {
            inner: exe,
            pu: pu.name.clone(),
            fault: self.spec.fault,
            runs: self.runs.clone(),
            cancelled: Arc::default(),
        }))
    }
}

struct FaultyExecutable {
    inner: Box<dyn Executable>,
    pu: String,
    fault: Fault,
    runs: Arc<AtomicU64>,
    /// Set by its canceller: a hang ends at once, and every run after it fails.
    cancelled: Arc<(Mutex<bool>, Condvar)>,
}

impl FaultyExecutable {
    /// A run `f` times as long: the device stays busy, spinning, as the engine's own thread
    /// would.
    fn slowly(&mut self, f: SlowFactor, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError> {
        let t0 = std::time::Instant::now();
        let (out, mut timing) = self.inner.run_timed(inputs)?;
        let until = t0.elapsed().mul_f64(f.get());
        while t0.elapsed() < until {
            std::hint::spin_loop();
        }
        timing.infer = until.saturating_sub(timing.h2d + timing.d2h);
        Ok((out, timing))
    }
}

impl Executable for FaultyExecutable {
    fn inputs(&self) -> &[PortInfo] {
        self.inner.inputs()
    }
    fn outputs(&self) -> &[PortInfo] {
        self.inner.outputs()
    }
    fn run_timed(&mut self, inputs: &[&HostTensor]) -> Result<(Vec<HostTensor>, RunTiming), BackendError> {
        let cancelled = || BackendError::Run { pu: self.pu.clone(), what: "infer".into(), reason: "cancelled".into() };
        if *lock(&self.cancelled.0) {
            return Err(cancelled());
        }
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        match self.fault {
            Fault::RunAfter(k) if n >= k => {
                return Err(BackendError::Run {
                    pu: self.pu.clone(),
                    what: "infer".into(),
                    reason: "injected fault".into(),
                });
            }
            Fault::HangAfter(k, d) if n >= k => {
                let (flag, cv) = &*self.cancelled;
                let (stopped, _) =
                    cv.wait_timeout_while(lock(flag), d, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
                if *stopped {
                    return Err(cancelled());
                }
            }
            Fault::SlowAfter(k, f) if n >= k => return self.slowly(f, inputs),
            Fault::SlowBetween(k, m, f) if (k..m).contains(&n) => return self.slowly(f, inputs),
            _ => {}
        }
        self.inner.run_timed(inputs)
    }
    fn layers(&self) -> Result<Vec<Layer>, BackendError> {
        self.inner.layers()
    }
    /// Stops an injected hang, and the engine's run where the engine can stop it (None where it
    /// cannot).
    fn canceller(&self) -> Option<crate::Canceller> {
        let (inner, cancelled) = (self.inner.canceller()?, self.cancelled.clone());
        Some(Arc::new(move || {
            *lock(&cancelled.0) = true;
            cancelled.1.notify_all();
            inner();
        }))
    }
}

/// A poisoned lock only means a thread panicked holding it; the flag stays meaningful.
fn lock(m: &Mutex<bool>) -> std::sync::MutexGuard<'_, bool> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let p = |s: &str| s.parse::<FaultSpec>();
        assert_eq!(p("core1:compile"), Ok(FaultSpec { pu: "core1".into(), fault: Fault::Compile }));
        assert_eq!(p("core1:run@5").map(|f| f.fault), Ok(Fault::RunAfter(5)));
        assert_eq!(p("a:b:run").map(|f| f.pu), Ok("a:b".into()));
        assert!(matches!(p("core1:hang").map(|f| f.fault), Ok(Fault::HangAfter(0, _))));
        assert_eq!(p("core1:slow=3@10").map(|f| f.fault), Ok(Fault::SlowAfter(10, SlowFactor(3.0))));
        assert_eq!(p("core1:slow=1.5").map(|f| f.fault), Ok(Fault::SlowAfter(0, SlowFactor(1.5))));
        assert_eq!(p("core1:slow=3@10-50").map(|f| f.fault), Ok(Fault::SlowBetween(10, 50, SlowFactor(3.0))));
        for bad in [
            "core1",
            ":run",
            "core1:explode",
            "core1:run@x",
            "core1:compile@2",
            "core1:slow",
            "core1:slow=1",
            "core1:slow=nan",
            "core1:slow=1e9",
            "core1:slow=3@50-10",
            "core1:slow=3@10-",
            "core1:run@1-5",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}
