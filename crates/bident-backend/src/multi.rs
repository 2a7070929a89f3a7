//! One SoC over several backends: [`Backends`] holds one backend per name and hands every PU
//! to the backend it names (`PuSpec::backend`), so OpenVINO PUs and ONNX Runtime PUs can sit
//! in one SoC and every stage works per PU.

use std::sync::Arc;

use crate::{Backend, BackendError, DeviceInfo, Executable, PuKind, PuSpec};

/// A dispatcher over backends of distinct names; the first is the default one (presets, and the
/// PUs of a SoC file that name none). With one member it behaves exactly like that member.
pub struct Backends {
    members: Vec<Arc<dyn Backend>>,
    name: String,
}

impl Backends {
    /// `members` must be non-empty; a later member of an already present name is dropped.
    pub fn new(members: Vec<Arc<dyn Backend>>) -> Self {
        let mut kept: Vec<Arc<dyn Backend>> = vec![];
        for m in members {
            if !kept.iter().any(|k| k.name() == m.name()) {
                kept.push(m);
            }
        }
        assert!(!kept.is_empty(), "a dispatcher needs at least one backend");
        let name = kept.iter().map(|m| m.name()).collect::<Vec<_>>().join(" + ");
        Self { members: kept, name }
    }

    /// The member named `backend`.
    pub fn member(&self, backend: &str) -> Result<&Arc<dyn Backend>, BackendError> {
        self.members
            .iter()
            .find(|m| m.name() == backend)
            .ok_or_else(|| BackendError::UnknownBackend { name: backend.to_string() })
    }

    fn for_pu(&self, pu: &PuSpec) -> Result<&Arc<dyn Backend>, BackendError> {
        self.member(&pu.backend).map_err(|e| BackendError::Compile { pu: pu.name.clone(), reason: e.to_string() })
    }
}

impl Backend for Backends {
    /// The members' names, e.g. `openvino + onnxruntime`.
    fn name(&self) -> &str {
        &self.name
    }

    /// The members' versions: `2026.4.1` for one member, `openvino 2026.4.1 + onnxruntime
    /// 1.32.0` for several.
    fn version(&self) -> String {
        match &self.members[..] {
            [one] => one.version(),
            all => all.iter().map(|m| format!("{} {}", m.name(), m.version())).collect::<Vec<_>>().join(" + "),
        }
    }

    /// Every member's devices; those of all but the default member are qualified with their
    /// backend's name (`onnxruntime:CPU`), since two backends may both have a `CPU`. A SoC file
    /// names the unqualified device together with the PU's `backend`.
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let mut out = vec![];
        for (i, m) in self.members.iter().enumerate() {
            for mut d in m.devices()? {
                if i > 0 {
                    d.name = format!("{}:{}", m.name(), d.name);
                }
                out.push(d);
            }
        }
        Ok(out)
    }

    fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.for_pu(pu)?.compile(onnx, pu)
    }

    fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
        self.for_pu(pu)?.compile_profiled(onnx, pu)
    }

    fn timing_meaning(&self, pu: &PuSpec) -> String {
        match self.member(&pu.backend) {
            Ok(m) => m.timing_meaning(pu),
            Err(e) => e.to_string(),
        }
    }

    fn backends(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name().to_string()).collect()
    }

    fn backend_id(&self, backend: &str) -> Result<String, BackendError> {
        let m = self.member(backend)?;
        Ok(format!("{} {}", m.name(), m.version()))
    }

    fn devices_of(&self, backend: &str) -> Result<Vec<DeviceInfo>, BackendError> {
        self.member(backend)?.devices()
    }

    fn pu_kind(&self, pu: &PuSpec, device: &DeviceInfo) -> PuKind {
        match self.member(&pu.backend) {
            Ok(m) => m.pu_kind(pu, device),
            Err(_) => device.kind,
        }
    }

    fn quiet(&self, pu: &PuSpec) -> PuSpec {
        self.member(&pu.backend).map_or_else(|_| pu.clone(), |m| m.quiet(pu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SocSpec;
    use crate::soc::Precisions;

    /// A backend with one CPU that compiles nothing, saying in its refusal who it is.
    struct Fake(&'static str, &'static str);

    impl Backend for Fake {
        fn name(&self) -> &str {
            self.0
        }
        fn version(&self) -> String {
            self.1.into()
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
            Ok(vec![DeviceInfo {
                name: "CPU".into(),
                kind: PuKind::Cpu,
                full_name: "fake".into(),
                precision: Some("f32".into()),
            }])
        }
        fn compile(&self, _: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
            Err(BackendError::Compile { pu: pu.name.clone(), reason: format!("compiled by {}", self.0) })
        }
        fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
            self.compile(onnx, pu)
        }
        fn timing_meaning(&self, _: &PuSpec) -> String {
            format!("{} timing", self.0)
        }
    }

    fn both() -> Backends {
        Backends::new(vec![Arc::new(Fake("openvino", "2026.4.1")), Arc::new(Fake("onnxruntime", "1.32.0"))])
    }

    const MIXED: &str = r#"
name = "mixed"
backend = "openvino"
[[pu]]
name = "core0"
kind = "cpu"
device = "CPU"
declared_power_w = 7.5
[[pu]]
name = "core1"
backend = "onnxruntime"
kind = "cpu"
device = "CPU"
declared_power_w = 7.5
"#;

    /// Every PU goes to the backend it names; the dispatcher describes both.
    #[test]
    fn routes_each_pu_to_its_backend() {
        let be = both();
        assert_eq!(be.name(), "openvino + onnxruntime");
        assert_eq!(be.version(), "openvino 2026.4.1 + onnxruntime 1.32.0");
        assert_eq!(be.backends(), ["openvino", "onnxruntime"]);
        let devices: Vec<String> = be.devices().expect("devices").into_iter().map(|d| d.name).collect();
        assert_eq!(devices, ["CPU", "onnxruntime:CPU"]);
        let soc = SocSpec::from_toml(MIXED, std::path::Path::new("mixed.toml"), &be).expect("mixed SoC");
        assert_eq!(soc.pus[0].backend, "openvino");
        assert_eq!(soc.pus[1].backend, "onnxruntime");
        for pu in &soc.pus {
            let err = be.compile(&[], pu).err().expect("the fakes compile nothing").to_string();
            assert!(err.ends_with(&format!("compiled by {}", pu.backend)), "{err}");
            assert_eq!(be.timing_meaning(pu), format!("{} timing", pu.backend));
        }
        assert_eq!(be.backend_id("onnxruntime").expect("id"), "onnxruntime 1.32.0");
        // the file writes the PU's backend only where it is not the file's
        let text = soc.to_toml();
        assert_eq!(text.matches("backend = ").count(), 2, "{text}");
        let again = SocSpec::from_toml(&text, std::path::Path::new("again.toml"), &be).expect("reads back");
        assert_eq!(again, soc);
    }

    /// A PU naming a backend that is not here is one error listing the build's backends; one
    /// backend alone is its own dispatcher.
    #[test]
    fn unknown_backend_is_refused() {
        let only_ov = Backends::new(vec![Arc::new(Fake("openvino", "2026.4.1"))]);
        assert_eq!((only_ov.name(), only_ov.version().as_str()), ("openvino", "2026.4.1"));
        let err = SocSpec::from_toml(MIXED, std::path::Path::new("mixed.toml"), &only_ov).expect_err("no ORT");
        let want = format!(
            "mixed.toml: PU `core1`: no backend `onnxruntime` here (this build has: {})",
            crate::built_in().join(", ")
        );
        assert_eq!(err.to_string(), want);
        let pu = PuSpec { backend: "tensorrt".into(), ..PuSpec::backend_default(&core_pu()) };
        let err = both().compile(&[], &pu).err().expect("unknown").to_string();
        assert!(err.contains("no backend `tensorrt` here"), "{err}");
        assert!(Fake("openvino", "1").check_backend("onnxruntime").is_err());
        assert_eq!(Fake("openvino", "1").backend_id("openvino").expect("own"), "openvino 1");
    }

    /// `cores-mixed` puts the first allowed core on OpenVINO and the second on ONNX Runtime;
    /// `local`, `cores` and `all` have every backend's PUs, the default backend's untagged.
    #[test]
    fn presets_name_their_backends() {
        let cpus = crate::allowed_cpus();
        match SocSpec::preset("cores-mixed", &both()) {
            Ok(soc) => {
                let got: Vec<(&str, &[usize])> = soc.pus.iter().map(|p| (p.backend.as_str(), &p.cores[..])).collect();
                assert_eq!(got, [("openvino", &cpus[..1]), ("onnxruntime", &cpus[1..2])]);
                assert_eq!(soc.pus[1].properties["INTRA_OP_NUM_THREADS"], "1");
                assert_eq!(soc.pus[0].properties["INFERENCE_NUM_THREADS"], "1");
            }
            Err(e) => assert!(cpus.len() < 2, "{e}"),
        }
        let err = SocSpec::preset("cores-mixed", &Fake("openvino", "1")).expect_err("needs ONNX Runtime");
        assert!(cpus.len() < 2 || err.to_string().contains("no backend `onnxruntime` here"), "{err}");
        let names = |preset: &str| -> Vec<(String, String)> {
            let soc = SocSpec::preset(preset, &both()).expect("preset");
            assert_eq!(soc.backend, "openvino");
            soc.pus.into_iter().map(|p| (p.name, p.backend)).collect()
        };
        let local = [("CPU".to_string(), "openvino".to_string()), ("CPU.ort".into(), "onnxruntime".into())];
        let tag = |b: &str| if b == "openvino" { String::new() } else { ".ort".into() };
        // the whole-model configurations: 1, 2, 4, ... threads below every core, on the first cores
        let threads: Vec<usize> =
            std::iter::successors(Some(1), |t| Some(t * 2)).take_while(|&t| t < cpus.len()).collect();
        let configurations = |from: usize| -> Vec<(String, String)> {
            ["openvino", "onnxruntime"]
                .iter()
                .flat_map(|b| {
                    threads.iter().filter(|&&t| t >= from).map(|&t| match t {
                        1 => (format!("core{}{}", cpus[0], tag(b)), b.to_string()),
                        t => (format!("cores{}-{}{}", cpus[0], cpus[t - 1], tag(b)), b.to_string()),
                    })
                })
                .collect()
        };
        assert_eq!(names("local"), [&local[..], &configurations(1)].concat());
        let cores: Vec<(String, String)> = ["openvino", "onnxruntime"]
            .iter()
            .flat_map(|b| cpus.iter().map(move |c| (format!("core{c}{}", tag(b)), b.to_string())))
            .collect();
        // a one-thread configuration is the core's own PU there
        let local_and_cores: Vec<_> = [&local[..], &cores, &configurations(2)].concat();
        assert_eq!(names("cores"), local_and_cores);
        assert_eq!(names("all"), local_and_cores);
        let only_ov = SocSpec::preset("local", &Fake("openvino", "1")).expect("local");
        let whole_only: Vec<bool> = only_ov.pus.iter().map(|p| p.whole_only).collect();
        assert_eq!((only_ov.pus[0].name.as_str(), &whole_only[1..]), ("CPU", &vec![true; threads.len()][..]));
    }

    /// OpenVINO's CPU computing in bf16 by default.
    struct Bf16Cpu;

    impl Backend for Bf16Cpu {
        fn name(&self) -> &str {
            "openvino"
        }
        fn version(&self) -> String {
            "1".into()
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
            let mut d = Fake("openvino", "1").devices()?;
            d[0].precision = Some("BF16".into());
            Ok(d)
        }
        fn compile(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
            Fake("openvino", "1").compile(onnx, pu)
        }
        fn compile_profiled(&self, onnx: &[u8], pu: &PuSpec) -> Result<Box<dyn Executable>, BackendError> {
            self.compile(onnx, pu)
        }
        fn timing_meaning(&self, pu: &PuSpec) -> String {
            Fake("openvino", "1").timing_meaning(pu)
        }
    }

    /// `all` offers each core at the CPU's default precision too, where that is not f32, sharing
    /// its core with the f32 PU; `cores` and exact precision do not (`cores` has the CPU whole
    /// at its default precision, as `local`).
    #[test]
    fn all_has_each_core_at_the_default_precision() {
        let cpus = crate::allowed_cpus();
        let names = |preset: &str, p: Precisions| -> Vec<String> {
            SocSpec::preset_with(preset, &Bf16Cpu, p).expect("preset").pus.into_iter().map(|p| p.name).collect()
        };
        let cores: Vec<String> = cpus.iter().map(|c| format!("core{c}")).collect();
        let reduced: Vec<String> = cpus.iter().map(|c| format!("core{c}.bf16")).collect();
        let local = ["CPU".to_string(), "CPU.bf16".into()];
        // the whole-model configurations beyond one thread (one thread is a core's own PU)
        let more: Vec<usize> =
            std::iter::successors(Some(2), |t| Some(t * 2)).take_while(|&t| t < cpus.len()).collect();
        let wider = |bf16: bool| -> Vec<String> {
            let name = |t: usize| format!("cores{}-{}", cpus[0], cpus[t - 1]);
            more.iter()
                .flat_map(|&t| std::iter::once(name(t)).chain(bf16.then(|| format!("{}.bf16", name(t)))))
                .collect()
        };
        assert_eq!(names("all", Precisions::Default), [&local[..], &cores, &reduced, &wider(true)].concat());
        assert_eq!(names("all", Precisions::Exact), [&local[..1], &cores, &wider(false)].concat());
        assert_eq!(names("cores", Precisions::Default), [&local[..], &cores, &reduced[..1], &wider(true)].concat());
        let local_pus = SocSpec::preset_with("local", &Bf16Cpu, Precisions::Default).expect("local");
        let configured: Vec<(&str, Option<&str>, bool)> =
            local_pus.pus.iter().skip(2).take(2).map(|p| (p.name.as_str(), p.precision(), p.whole_only)).collect();
        let first = format!("core{}", cpus[0]);
        if cpus.len() > 1 {
            let bf16 = format!("{first}.bf16");
            assert_eq!(configured, [(first.as_str(), Some("f32"), true), (bf16.as_str(), Some("bf16"), true)]);
        }
        let soc = SocSpec::preset("all", &Bf16Cpu).expect("all");
        let (f32_pu, bf16_pu) = (soc.pu(&cores[0]).expect("f32"), soc.pu(&reduced[0]).expect("bf16"));
        assert_eq!((f32_pu.precision(), bf16_pu.precision()), (Some("f32"), Some("bf16")));
        assert_eq!(bf16_pu.cores, f32_pu.cores);
        assert!(bf16_pu.shares_hardware(f32_pu) && !bf16_pu.is_exact());
    }

    fn core_pu() -> PuSpec {
        PuSpec {
            name: "core0".into(),
            backend: "openvino".into(),
            kind: PuKind::Cpu,
            device: "CPU".into(),
            properties: Default::default(),
            cores: vec![],
            declared_power_w: 1.0,
            whole_only: false,
        }
    }
}
