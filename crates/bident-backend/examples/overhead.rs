//! Per-call overhead of a trivial model (one Add on [1,4]) through each backend's `run_timed`:
//! the median of 1000 calls each, both backends in one process, pinned to one core.
//!
//! `cargo run -p bident-backend --example overhead` (installs both wheels into the target folder
//! on first use).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bident_backend::{Backend, DType, HostTensor, PuKind, PuSpec, RunTiming};
use prost::Message;

const CALLS: usize = 1000;
const WARMUP: usize = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let say = &mut |l: &str| eprintln!("{l}");
    let ort =
        bident_backend::onnxruntime::OnnxRuntime::load(&bident_backend::onnxruntime::install::ensure(&target, say)?)?;
    let ov = bident_backend::openvino::OpenVino::load(&bident_backend::openvino::install::ensure(&target, say)?)?;

    let mut b = bident_zoo::Builder::new(0);
    let x = b.input("x", &[1, 4]);
    let w = b.weight("w", &[1, 4]);
    let y = b.node("Add", &[&x, &w], &[]);
    b.output(&y);
    let onnx = b.finish("add").encode_to_vec();

    let core = *bident_backend::allowed_cpus().first().unwrap_or(&0);
    bident_backend::pin_current_thread("bench", &[core])?;
    let pu = |backend: &str, props: &[(&str, &str)]| PuSpec {
        name: "cpu".into(),
        backend: backend.into(),
        kind: PuKind::Cpu,
        device: "CPU".into(),
        properties: props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        cores: vec![core],
        declared_power_w: 15.0,
        whole_only: false,
    };
    let input = HostTensor::seeded(DType::F32, vec![1, 4], 1);
    println!("one Add on [1,4], {CALLS} calls after {WARMUP} warm-up, pinned to core {core}; medians in µs");
    println!("{:<12} {:>8} {:>8} {:>8} {:>8} {:>8}", "backend", "call", "h2d", "infer", "d2h", "sum");
    let backends: [(&dyn Backend, PuSpec); 2] = [
        (&ort, pu("onnxruntime", &[("INTRA_OP_NUM_THREADS", "1")])),
        (&ov, pu("openvino", &[("INFERENCE_NUM_THREADS", "1"), ("INFERENCE_PRECISION_HINT", "f32")])),
    ];
    for (backend, spec) in backends {
        let mut exe = backend.compile(&onnx, &spec)?;
        let mut calls = Vec::with_capacity(CALLS);
        let mut parts: Vec<RunTiming> = Vec::with_capacity(CALLS);
        for i in 0..WARMUP + CALLS {
            let t = Instant::now();
            let (_, timing) = exe.run_timed(&[&input])?;
            let call = t.elapsed();
            if i >= WARMUP {
                calls.push(call);
                parts.push(timing);
            }
        }
        let us = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e6
        };
        println!(
            "{:<12} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            backend.name(),
            us(calls),
            us(parts.iter().map(|t| t.h2d).collect()),
            us(parts.iter().map(|t| t.infer).collect()),
            us(parts.iter().map(|t| t.d2h).collect()),
            us(parts.iter().map(|t| t.h2d + t.infer + t.d2h).collect()),
        );
    }
    Ok(())
}
