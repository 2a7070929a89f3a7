//! ONNX Runtime's pool spins on after a run unless the PU is quiet ([`Backend::quiet`]). One
//! test in a binary of its own: a thread of another test running beside it would count.

#![cfg(feature = "onnxruntime")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use bident_backend::onnxruntime::OnnxRuntime;
use bident_backend::{Backend, Executable, HostTensor, PuKind, PuSpec};

#[test]
fn a_quiet_pool_stops_when_the_run_returns() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let lib = bident_backend::onnxruntime::install::ensure(&target, &mut |l| eprintln!("{l}")).expect("install");
    let ort = OnnxRuntime::load(&lib).expect("load");
    // a pool of two threads, on any machine; a LLaMA block's MatMuls hand work to it
    let pu = PuSpec {
        name: "cpu".into(),
        backend: "onnxruntime".into(),
        kind: PuKind::Cpu,
        device: "CPU".into(),
        properties: [("INTRA_OP_NUM_THREADS".to_string(), "2".to_string())].into(),
        cores: vec![],
        declared_power_w: 15.0,
        whole_only: false,
    };
    let onnx = bident_zoo::build_bytes("llama-tiny-int8", 0).expect("zoo model");
    // how many of ten blocks of runs left a thread running 5 ms after the block
    let spinning_after = |exe: &mut dyn Executable| -> usize {
        let inputs: Vec<HostTensor> = exe
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, p)| HostTensor::seeded(p.dtype, p.shape.clone().expect("static input"), i as u64))
            .collect();
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        (0..10)
            .filter(|_| {
                std::thread::sleep(Duration::from_millis(100));
                for _ in 0..20 {
                    exe.run(&refs).expect("runs");
                }
                std::thread::sleep(Duration::from_millis(5));
                bident_backend::other_threads_running().expect("Linux") > 0
            })
            .count()
    };
    let quiet = ort.quiet(&pu);
    assert_eq!(quiet.properties.get("SPIN_BETWEEN_RUNS").map(String::as_str), Some("NO"));
    let mut exe = ort.compile(&onnx, &quiet).expect("compiles");
    // at most two blocks: on a loaded machine a pool thread may still wait for a core to
    // reach its sleep 5 ms after a block; a spinning pool runs on after most blocks
    let quiet_spinning = spinning_after(exe.as_mut());
    assert!(quiet_spinning <= 2, "a quiet pool kept spinning after {quiet_spinning} of 10 blocks");
    drop(exe);
    std::thread::sleep(Duration::from_millis(100));
    let mut exe = ort.compile(&onnx, &pu).expect("compiles");
    assert!(spinning_after(exe.as_mut()) >= 5, "ONNX Runtime's default pool no longer spins after a run");
}
