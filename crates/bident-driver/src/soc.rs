//! Backends (installed on first use into the target folder) and the SoC to plan for.

use std::path::Path;
use std::sync::Arc;

use bident_backend::{Backend, Backends, SocSpec, onnxruntime::OnnxRuntime, openvino::OpenVino};
use bident_profile::simulate::VirtualSoc;

use crate::{Driver, DriverError, Result, SocChoice, Stage};

/// A backend bident is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BackendName {
    OpenVino,
    OnnxRuntime,
}

impl BackendName {
    pub const ALL: [BackendName; 2] = [BackendName::OpenVino, BackendName::OnnxRuntime];

    pub fn name(self) -> &'static str {
        match self {
            BackendName::OpenVino => "openvino",
            BackendName::OnnxRuntime => "onnxruntime",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| {
            DriverError::Invalid(format!(
                "no backend `{s}` (this build has: {})",
                bident_backend::built_in().join(", ")
            ))
        })
    }

    /// Load this backend, installing its pinned runtime under `target` first if needed.
    pub fn load(self, target: &Path, say: &mut dyn FnMut(&str)) -> Result<Arc<dyn Backend>> {
        Ok(match self {
            BackendName::OpenVino => {
                let lib = bident_backend::openvino::install::ensure(target, say)?;
                Arc::new(OpenVino::load(&lib)?)
            }
            BackendName::OnnxRuntime => {
                let lib = bident_backend::onnxruntime::install::ensure(target, say)?;
                Arc::new(OnnxRuntime::load(&lib)?)
            }
        })
    }
}

/// The backends `named` behind one dispatcher, the first being the default one, each installed
/// first if needed.
pub fn load_backends(named: &[BackendName], target: &Path, say: &mut dyn FnMut(&str)) -> Result<Arc<Backends>> {
    if named.is_empty() {
        return Err(DriverError::Invalid("--backend names no backend".into()));
    }
    let mut members: Vec<Arc<dyn Backend>> = vec![];
    for (k, b) in named.iter().enumerate() {
        if named[..k].contains(b) {
            return Err(DriverError::Invalid(format!("--backend names `{}` twice", b.name())));
        }
        members.push(b.load(target, say)?);
    }
    Ok(Arc::new(Backends::new(members)))
}

/// A SoC to plan for: real PUs that are measured (and run the plan), or a virtual SoC whose
/// costs are simulated (nothing runs, no backend needed).
pub enum Soc {
    Measured(SocSpec, Arc<Backends>),
    Virtual(VirtualSoc),
}

impl Soc {
    pub fn spec(&self) -> &SocSpec {
        match self {
            Soc::Measured(s, _) => s,
            Soc::Virtual(v) => &v.spec,
        }
    }

    pub fn pu_names(&self) -> Vec<&str> {
        self.spec().pus.iter().map(|p| p.name.as_str()).collect()
    }
}

impl Driver<'_> {
    /// Load backends by name, saying what an install does.
    pub fn backends(&self, named: &[BackendName]) -> Result<Arc<Backends>> {
        load_backends(named, &self.target, &mut |line| self.note(Stage::Install, line))
    }

    /// One backend alone.
    pub fn backend(&self, b: BackendName) -> Result<Arc<dyn Backend>> {
        b.load(&self.target, &mut |line| self.note(Stage::Install, line))
    }

    /// The SoC `c` names: a virtual preset, a measured preset or a spec file.
    pub fn soc(&self, c: &SocChoice) -> Result<Soc> {
        if let Some(v) = VirtualSoc::preset(&c.spec) {
            return Ok(Soc::Virtual(v));
        }
        let be = self.backends(&c.backends)?;
        match SocSpec::load(&c.spec, be.as_ref(), c.precisions) {
            Ok(soc) => Ok(Soc::Measured(soc, be)),
            Err(bident_backend::SocError::UnknownPreset(p)) => Err(DriverError::Invalid(format!(
                "unknown SoC `{p}` (measured: {}; virtual: {}; or a spec file .toml)",
                bident_backend::soc::PRESETS.join(", "),
                bident_profile::simulate::PRESETS.join(", ")
            ))),
            Err(e) => Err(e.into()),
        }
    }
}
