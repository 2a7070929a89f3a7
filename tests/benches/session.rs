//! What a session adds to a whole model on one PU: the model run through the runtime's
//! [`Session`] against the same model compiled for the same PU and called directly on the bench
//! thread, as a user of the engine would: what a session adds to every whole-model run and
//! every engine default the run report compares with (on the calling thread where the PU is
//! not pinned, through the PU's worker where it is).
//!
//! `cargo bench -p bident-tests --bench session` (installs both wheels into the target folder on
//! first use). For each model and PU it prints the medians of 60 alternating blocks of 5
//! session and 5 direct runs, the session's share outside the engine's call (from the call's
//! start and its end to the inference's), and the ratio. `MODELS` and `PUS` (comma-separated)
//! pick others than the default zoo models and PUs of the `all` SoC.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bident_backend::{Backend, Executable, HostTensor, SocSpec};
use bident_runtime::program::Stream;
use bident_runtime::{Program, Session, Task};
use bident_tests::both_backends;

const BLOCKS: usize = 60;
const PER_BLOCK: usize = 5;

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

/// The whole model as a one-task program on PU `pu`, its ports as `exe` reports them.
fn program(model: &str, exe: &dyn Executable, outputs: &[HostTensor], pu: usize, n_pus: usize) -> Program {
    let (n_in, n_out) = (exe.inputs().len(), outputs.len());
    let task = Task {
        stream: 0,
        ops: vec![],
        name: "whole".into(),
        pu,
        inputs: (0..n_in).collect(),
        input_names: exe.inputs().iter().map(|p| p.name.clone()).collect(),
        outputs: (n_in..n_in + n_out).collect(),
        output_names: exe.outputs().iter().map(|p| p.name.clone()).collect(),
        output_types: outputs.iter().map(|o| (o.dtype, o.shape.clone())).collect(),
        predicted: (0.0, 0.0),
    };
    let mut queues = vec![vec![]; n_pus];
    queues[pu].push(0);
    let stream = Stream { model: model.into(), inputs: (0..n_in).collect(), outputs: (n_in..n_in + n_out).collect() };
    let p = Program {
        tasks: vec![task],
        queues,
        slots: n_in + n_out,
        streams: vec![stream],
        schedule: "whole".into(),
        predicted_us: 0.0,
    };
    p.check().expect("a valid program");
    p
}

fn main() {
    let be = both_backends();
    let soc = SocSpec::preset("all", be.as_ref()).expect("the `all` SoC");
    let q = |v: &mut Vec<f64>, x| bident_profile::quantile(v, x);
    println!("\na whole model through a session and called directly, µs (medians of {BLOCKS} alternating blocks)");
    println!(
        "{:<22} {:<10} {:>9} {:>9} {:>7} {:>9} {:>9}",
        "model", "PU", "session", "direct", "ratio", "start", "end"
    );
    for model in list("MODELS", "llama-tiny-int8,snn-vgg9-tiny-fp32,resnet50-tiny-fp32") {
        let onnx = bident_zoo::build_bytes(&model, 0).unwrap_or_else(|| panic!("no zoo model `{model}`"));
        for name in list("PUS", "CPU,CPU.ort,core1,core1.ort") {
            let pu = soc.pus.iter().position(|p| p.name == name).unwrap_or_else(|| panic!("no PU `{name}`"));
            let mut exe = be.compile(&onnx, &soc.pus[pu]).expect("compiles");
            let xs: Vec<HostTensor> = (exe.inputs().iter().enumerate())
                .map(|(i, p)| HostTensor::seeded(p.dtype, p.shape.clone().expect("static inputs"), 1 + i as u64))
                .collect();
            let refs: Vec<&HostTensor> = xs.iter().collect();
            let outputs = exe.run(&refs).expect("runs");
            let built = (program(&model, exe.as_ref(), &outputs, pu, soc.pus.len()), vec![onnx.clone()]);
            let session = Session::load(built, &soc, be.clone(), Duration::from_secs(10)).expect("session");
            let shared = vec![xs.iter().cloned().map(Arc::new).collect::<Vec<_>>()];
            for _ in 0..20 {
                session.run(&shared).expect("run");
                exe.run(&refs).expect("run");
            }
            let (mut a, mut b, mut start, mut end) = (vec![], vec![], vec![], vec![]);
            for _ in 0..BLOCKS {
                for _ in 0..PER_BLOCK {
                    let t = Instant::now();
                    let inf = session.run(&shared).expect("run");
                    a.push(t.elapsed().as_secs_f64() * 1e6);
                    start.push(inf.spans[0].start_us);
                    end.push(inf.total_us - inf.spans[0].finish_us);
                }
                for _ in 0..PER_BLOCK {
                    let t = Instant::now();
                    std::hint::black_box(exe.run(&refs).expect("run"));
                    b.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            let (a, b) = (q(&mut a, 0.5), q(&mut b, 0.5));
            println!(
                "{model:<22} {name:<10} {a:>9.1} {b:>9.1} {:>7.3} {:>9.1} {:>9.1}{}",
                a / b,
                q(&mut start, 0.5),
                q(&mut end, 0.5),
                if session.on_caller() { "   (on the calling thread)" } else { "" }
            );
        }
    }
}
