//! The ONNX Runtime backend against OpenVINO on the zoo's models, its profile, and its refusals.
//! Both runtimes are installed into the workspace's target folder on first use.

#![cfg(all(feature = "onnxruntime", feature = "openvino"))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bident_backend::onnxruntime::OnnxRuntime;
use bident_backend::openvino::OpenVino;
use bident_backend::{Backend, BackendError, Executable, HostTensor, LayerStatus, PuKind, PuSpec};

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

fn ort() -> &'static OnnxRuntime {
    static BE: OnceLock<OnnxRuntime> = OnceLock::new();
    BE.get_or_init(|| {
        let lib = bident_backend::onnxruntime::install::ensure(&target_dir(), &mut |l| eprintln!("{l}"))
            .expect("ONNX Runtime is needed by these tests");
        OnnxRuntime::load(&lib).expect("loading ONNX Runtime")
    })
}

fn openvino() -> &'static OpenVino {
    static BE: OnceLock<OpenVino> = OnceLock::new();
    BE.get_or_init(|| {
        let lib = bident_backend::openvino::install::ensure(&target_dir(), &mut |l| eprintln!("{l}"))
            .expect("OpenVINO is needed by these tests");
        OpenVino::load(&lib).expect("loading OpenVINO")
    })
}

fn cpu(properties: &[(&str, &str)]) -> PuSpec {
    PuSpec {
        name: "cpu".into(),
        backend: "onnxruntime".into(),
        kind: PuKind::Cpu,
        device: "CPU".into(),
        properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        cores: vec![],
        declared_power_w: 15.0,
        whole_only: false,
    }
}

fn model(name: &str) -> Vec<u8> {
    bident_zoo::build_bytes(name, 0).unwrap_or_else(|| panic!("zoo model {name}"))
}

/// Seeded inputs for an executable's ports (all static in the zoo models used here).
fn seeded_inputs(exe: &dyn Executable) -> Vec<HostTensor> {
    exe.inputs()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let shape = p.shape.clone().unwrap_or_else(|| panic!("input `{}` has a dynamic shape", p.name));
            HostTensor::seeded(p.dtype, shape, 7 + i as u64)
        })
        .collect()
}

fn run(exe: &mut dyn Executable, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    exe.run(&refs).expect("run")
}

#[test]
fn same_outputs_as_openvino() {
    // control-loop: Loop outputs whose rank ONNX Runtime only learns when it runs
    for name in ["example", "mlp", "control-loop"] {
        let onnx = model(name);
        let mut a = ort().compile(&onnx, &cpu(&[("INTRA_OP_NUM_THREADS", "1")])).expect("ONNX Runtime compiles");
        let mut b = openvino().compile(&onnx, &cpu(&[("INFERENCE_PRECISION_HINT", "f32")])).expect("OpenVINO compiles");
        assert_eq!(a.inputs().len(), b.inputs().len(), "{name}: inputs");
        assert_eq!(a.outputs().len(), b.outputs().len(), "{name}: outputs");
        let inputs = seeded_inputs(a.as_ref());
        // twice: the second run reuses the preallocated outputs and the binding
        let _ = run(a.as_mut(), &inputs);
        let (out_a, out_b) = (run(a.as_mut(), &inputs), run(b.as_mut(), &inputs));
        for (k, (x, y)) in out_a.iter().zip(&out_b).enumerate() {
            assert_eq!(x.shape, y.shape, "{name}: output {k}");
            assert_eq!(x.dtype, y.dtype, "{name}: output {k}");
            let diff = x.max_abs_diff(y).expect("comparable");
            assert!(diff <= 1e-4, "{name}: output {k} differs by {diff}");
            assert!(x.numel() > 0 && (0..x.numel()).any(|i| x.get_f64(i) != 0.0), "{name}: all zeros");
        }
    }
}

#[test]
fn run_timed_splits_time_and_checks_inputs() {
    let onnx = model("example");
    let mut exe = ort().compile(&onnx, &cpu(&[("INTRA_OP_NUM_THREADS", "1")])).expect("compiles");
    let inputs = seeded_inputs(exe.as_ref());
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    let (_, t) = exe.run_timed(&refs).expect("runs");
    assert!(t.infer > std::time::Duration::ZERO, "{t:?}");
    assert!(matches!(exe.run_timed(&[]), Err(BackendError::Run { .. })));
    let wrong = HostTensor::seeded(bident_backend::DType::I64, inputs[0].shape.clone(), 1);
    assert!(matches!(exe.run_timed(&[&wrong]), Err(BackendError::BadInput { index: 0, .. })));
    // the executable still works after refused inputs
    assert_eq!(exe.run(&refs).expect("runs again").len(), exe.outputs().len());
}

#[test]
fn profiled_run_lists_layers() {
    let onnx = model("example");
    let inputs = seeded_inputs(ort().compile(&onnx, &cpu(&[])).expect("compiles").as_ref());
    // the thread count is read back from the profile: with 2, one pool thread beside the caller
    for threads in ["2", "1"] {
        let mut exe = ort().compile_profiled(&onnx, &cpu(&[("INTRA_OP_NUM_THREADS", threads)])).expect("compiles");
        assert!(exe.layers().is_err(), "no layers before a run");
        let _ = run(exe.as_mut(), &inputs);
        assert!(exe.layers().is_ok(), "{threads} threads: {:?}", exe.layers());
    }
    let mut exe = ort().compile_profiled(&onnx, &cpu(&[("INTRA_OP_NUM_THREADS", "1")])).expect("compiles");
    for _ in 0..3 {
        let _ = run(exe.as_mut(), &inputs);
        let layers = exe.layers().expect("layers");
        assert!(layers.len() >= 3, "{layers:?}");
        assert!(layers.iter().all(|l| l.status == LayerStatus::Executed && !l.layer_type.is_empty()), "{layers:?}");
        // read back: every node ran on the PU's provider
        assert!(layers.iter().all(|l| l.exec_type == "CPUExecutionProvider"), "{layers:?}");
        assert!(layers.iter().any(|l| l.layer_type == "Conv" || l.layer_type == "FusedConv"), "{layers:?}");
        assert!(layers.iter().all(|l| !l.real_time.is_zero()), "{layers:?}");
    }
    // an executable compiled without profiling has no layers
    let mut plain = ort().compile(&onnx, &cpu(&[])).expect("compiles");
    let _ = run(plain.as_mut(), &inputs);
    assert!(matches!(plain.layers(), Err(BackendError::Run { .. })));
}

#[test]
fn bad_models_are_compile_errors() {
    let pu = cpu(&[]);
    for (what, onnx) in [
        ("garbage", b"this is not an ONNX model".to_vec()),
        ("unknown op", model("bad-unknown-op")),
        ("external data", model("bad-external-absolute")),
    ] {
        match ort().compile(&onnx, &pu) {
            Err(BackendError::Compile { reason, .. }) => assert!(!reason.is_empty(), "{what}"),
            Err(e) => panic!("{what}: not a compile error: {e}"),
            Ok(_) => panic!("{what}: compiled"),
        }
    }
}

#[test]
fn properties_are_checked() {
    let onnx = model("mlp");
    for props in [
        &[("INTRA_OP_NUM_THREADS", "0")][..],
        &[("INTRA_OP_NUM_THREADS", "many")],
        &[("GRAPH_OPTIMIZATION_LEVEL", "MAX")],
        &[("SPIN_BETWEEN_RUNS", "SOMETIMES")],
        &[("INFERENCE_PRECISION_HINT", "bf16")],
        &[("PERFORMANCE_HINT", "LATENCY")],
    ] {
        assert!(
            matches!(ort().compile(&onnx, &cpu(props)), Err(BackendError::PropertyIgnored { .. })),
            "{props:?} accepted"
        );
    }
    let ok = [("INTRA_OP_NUM_THREADS", "2"), ("GRAPH_OPTIMIZATION_LEVEL", "DISABLE_ALL"), ("SPIN_BETWEEN_RUNS", "NO")];
    assert!(ort().compile(&onnx, &cpu(&ok)).is_ok());
    // provider options: the CPU provider takes none, and an option needs a name and a value
    for props in [&[("EP.use_arena", "1")][..], &[("EP.", "1")], &[("EP.device_id", "")]] {
        match ort().compile(&onnx, &cpu(props)) {
            Err(BackendError::PropertyIgnored { key, .. }) => assert_eq!(key, props[0].0),
            other => panic!("{props:?}: {:?}", other.map(|_| "compiled")),
        }
    }
}

/// The providers this library lacks: every one bident knows but `devices` does not list.
fn lacking() -> Vec<&'static str> {
    let have: Vec<String> = ort().devices().expect("devices").into_iter().map(|d| d.name).collect();
    ["CUDA", "TensorRT", "DirectML", "MIGraphX", "WebGPU", "QNN", "CoreML", "OpenVINO", "XNNPACK", "VitisAI"]
        .into_iter()
        .filter(|p| !have.iter().any(|h| h == p))
        .collect()
}

/// A PU naming an execution provider the library lacks, or one bident does not know, is one
/// line listing the providers the library has, before anything is built (its options are not
/// even looked at).
#[test]
fn missing_execution_provider_is_one_line() {
    let onnx = model("mlp");
    let have: Vec<String> = ort().devices().expect("devices").into_iter().map(|d| d.name).collect();
    let lacking = lacking();
    assert!(!lacking.is_empty(), "this test needs a library without some provider: {have:?}");
    for device in lacking.iter().copied().chain(["GPU", "cuda"]) {
        let mut pu = cpu(&[("EP.device_id", "0"), ("INTRA_OP_NUM_THREADS", "1")]);
        (pu.name, pu.device, pu.kind) = ("gpu".into(), device.into(), PuKind::Gpu);
        let err = ort().compile(&onnx, &pu).err().map(|e| e.to_string()).expect("refused");
        let head = format!(
            "PU `gpu`: cannot compile: ONNX Runtime {} here has execution providers {} (",
            ort().version(),
            have.join(", ")
        );
        assert!(err.starts_with(&head) && !err.contains('\n'), "{err}");
        let why = if lacking.contains(&device) {
            format!("this build lacks `{device}`)")
        } else {
            format!("`{device}` is not an execution provider bident knows: CPU, CUDA, TensorRT, ")
        };
        assert!(err[head.len()..].starts_with(&why), "{err}");
    }
}

/// A SoC file is checked against the providers: one naming a provider the library lacks is
/// refused when it is loaded, and a PU's kind follows its provider's options.
#[test]
fn soc_files_name_providers() {
    let soc = |device: &str, kind: &str, props: &str| {
        let text = format!(
            "name = \"ep\"\nbackend = \"onnxruntime\"\n[[pu]]\nname = \"pu\"\nkind = \"{kind}\"\ndevice = \"{device}\"\n\
             declared_power_w = 5.0\n[pu.properties]\n{props}\n"
        );
        bident_backend::SocSpec::from_toml(&text, Path::new("ep.toml"), ort()).map_err(|e| e.to_string())
    };
    let loaded = soc("CPU", "cpu", "INTRA_OP_NUM_THREADS = \"1\"").expect("a CPU PU");
    assert_eq!(loaded.pus[0].device, "CPU");
    assert!(soc("CPU", "gpu", "").is_err_and(|e| e.contains("kind `gpu` does not match device `CPU`, a cpu")));
    let device = lacking()[0];
    let err = soc(device, "gpu", "\"EP.device_id\" = \"0\"").expect_err("lacking provider");
    assert_eq!(err, format!("ep.toml: PU `pu`: unknown device `{device}` (this machine has: CPU on onnxruntime)"));
    // the kind a provider makes, with and without the options that pick the hardware
    let info = |name: &str, kind| bident_backend::DeviceInfo {
        name: name.into(),
        kind,
        full_name: name.into(),
        precision: None,
    };
    let kind_of = |device: &str, kind, props: &[(&str, &str)]| ort().pu_kind(&cpu(props), &info(device, kind));
    assert_eq!(kind_of("QNN", PuKind::Npu, &[]), PuKind::Npu);
    assert_eq!(kind_of("QNN", PuKind::Npu, &[("EP.backend_type", "gpu")]), PuKind::Gpu);
    assert_eq!(kind_of("OpenVINO", PuKind::Cpu, &[("EP.device_type", "NPU")]), PuKind::Npu);
    assert_eq!(kind_of("CUDA", PuKind::Gpu, &[("EP.device_id", "1")]), PuKind::Gpu);
    assert_eq!(kind_of("CPU", PuKind::Cpu, &[]), PuKind::Cpu);
}

#[test]
fn devices_and_version() {
    let devices = ort().devices().expect("devices");
    // the pip wheel has the CPU provider (and Azure's, which is no PU)
    assert_eq!((devices[0].name.as_str(), devices[0].kind), ("CPU", PuKind::Cpu));
    assert!(
        devices[1..]
            .iter()
            .all(|d| !lacking().contains(&d.name.as_str()) && d.full_name.ends_with("ExecutionProvider"))
    );
    assert_eq!(ort().version(), bident_backend::onnxruntime::install::ONNXRUNTIME_VERSION);
    assert_eq!(ort().name(), "onnxruntime");
}

#[test]
fn wrong_library_is_a_library_error() {
    let missing = target_dir().join("no-such-dir/libonnxruntime.so");
    assert!(matches!(OnnxRuntime::load(&missing), Err(BackendError::Library(_))));
    // a file that is not a shared library
    let not_a_lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    assert!(matches!(OnnxRuntime::load(&not_a_lib), Err(BackendError::Library(_))));
    // the right library still loads afterwards
    assert!(ort().devices().is_ok());
}

/// A chain of `n` MatMuls of 512 x 512: a run long enough to be stopped half-way.
fn long_chain(n: usize) -> Vec<u8> {
    use prost::Message;
    let mut b = bident_zoo::Builder::new(0);
    let mut x = b.input("x", &[512, 512]);
    let w = b.weight("w", &[512, 512]);
    for _ in 0..n {
        x = b.node("MatMul", &[&x, &w], &[]);
    }
    b.output(&x);
    b.finish("long_chain").encode_to_vec()
}

/// An executable's canceller stops the run in progress from another thread, before it
/// would have ended, and every run after it, under both engines.
#[test]
fn cancelled_runs_stop() {
    let ov_cpu = PuSpec { backend: "openvino".into(), ..cpu(&[]) };
    let onnx = long_chain(200);
    for (be, pu) in [(ort() as &dyn Backend, cpu(&[])), (openvino() as &dyn Backend, ov_cpu)] {
        let mut exe = be.compile(&onnx, &pu).expect("compiles");
        let inputs = seeded_inputs(exe.as_ref());
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        let t0 = std::time::Instant::now();
        exe.run(&refs).expect("a whole run");
        let whole = t0.elapsed();
        let cancel = exe.canceller().expect("both engines can cancel a run");
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(whole / 10);
            cancel();
        });
        let t0 = std::time::Instant::now();
        let stopped = exe.run(&refs);
        let took = t0.elapsed();
        canceller.join().expect("the cancelling thread");
        // stopped, not finished: how soon is a timing a loaded machine can stretch
        assert!(stopped.is_err(), "{}: the run went on after the cancel (took {took:?}, whole {whole:?})", pu.backend);
        assert!(exe.run(&refs).is_err(), "{}: a run after the cancel went on", pu.backend);
    }
}
