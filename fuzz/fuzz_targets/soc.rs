//! Any bytes (as UTF-8, lossily) as a SoC spec file: `SocSpec::from_toml` may refuse them, but
//! must not panic; whatever it accepts must print back as TOML.
#![no_main]

use std::path::Path;

use bident_backend::{Backend, BackendError, DeviceInfo, Executable, PuKind, PuSpec, SocSpec};
use libfuzzer_sys::fuzz_target;

/// A backend with one CPU device, all a spec file is checked against; it compiles nothing.
struct OneCpu;

impl Backend for OneCpu {
    fn name(&self) -> &str {
        // the backend the project's spec files (the seeds) name
        "openvino"
    }
    fn version(&self) -> String {
        "fuzz".into()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(vec![DeviceInfo { name: "CPU".into(), kind: PuKind::Cpu, full_name: "fuzz CPU".into() }])
    }
    fn compile(&self, _: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        Err(BackendError::Compile { pu: pu.name.clone(), reason: "the fuzz backend compiles nothing".into() })
    }
    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.compile(onnx, pu)
    }
    fn timing_meaning(&self, _: &PuSpec) -> String {
        String::new()
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(soc) = SocSpec::from_toml(&text, Path::new("fuzz.toml"), &OneCpu) {
        let _ = soc.to_toml();
    }
});
