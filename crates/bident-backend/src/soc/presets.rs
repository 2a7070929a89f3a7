//! The presets: the PUs a machine offers as `local`, `cores`, `all` and `cores-mixed`, each
//! engine's whole-model configurations among them, built against the devices a backend sees and
//! the cores this process may run on.

use std::collections::BTreeMap;

use super::*;

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
}
