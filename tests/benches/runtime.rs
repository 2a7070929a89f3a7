//! The runtime's own cost on this machine's pinned cores (targets, issue 6): executor overhead
//! under 5 µs per task beyond the backend's infer calls, and a plan with every op on one PU
//! within 1.2x of that PU running the whole model monolithically.
//!
//! `cargo bench -p bident-tests --bench runtime` (prints the overhead per task and the ratio).

use std::sync::Arc;
use std::time::Duration;

use bident_runtime::{Grouping, Program, Session};
use bident_tests::{backend, model, plan_on_cores};
use criterion::{Criterion, criterion_group, criterion_main};

fn runtime(c: &mut Criterion) {
    let mut g = c.benchmark_group("runtime_example");
    g.sample_size(30);
    let (graph, phased) = model("example");
    let inputs = vec![bident_runtime::model_inputs(&graph, 0)];
    let load = |pu_of: &dyn Fn(usize) -> usize, grouping| {
        let (soc, plan) = plan_on_cores(&graph, &phased, pu_of);
        let built = Program::from_plan(&graph, &plan, &soc, grouping).expect("program");
        Session::load(built, &soc, backend(), Duration::from_secs(10)).expect("session")
    };
    let whole = {
        let (soc, _) = plan_on_cores(&graph, &phased, |_| 0);
        let one = bident_backend::SocSpec { pus: vec![soc.pus[0].clone()], ..soc };
        let built = Program::whole(&graph, &one, 0, graph.reference_model().expect("model")).expect("program");
        Session::load(built, &one, backend(), Duration::from_secs(10)).expect("session")
    };
    let sessions: Vec<(&str, Arc<Session>)> = vec![
        ("whole_model_core0", Arc::new(whole)),
        ("merged_plan_core0", Arc::new(load(&|_| 0, Grouping::Merged))),
        ("per_op_plan_core0", Arc::new(load(&|_| 0, Grouping::PerOp))),
        ("per_op_alternating_cores", Arc::new(load(&|i| i, Grouping::PerOp))),
    ];
    let mut medians = vec![];
    for (name, s) in &sessions {
        g.bench_function(*name, |b| b.iter(|| s.run(&inputs).expect("run")));
        // the executor's own share, from the inferences' timelines
        let mut overhead: Vec<f64> =
            (0..500).map(|_| s.run(&inputs).expect("run").overhead_us_per_task(s.program())).collect();
        let mut total: Vec<f64> = (0..500).map(|_| s.run(&inputs).expect("run").total_us).collect();
        let (o, t) = (bident_profile::quantile(&mut overhead, 0.5), bident_profile::quantile(&mut total, 0.5));
        eprintln!(
            "{name}: {} tasks, median {t:.1} µs per inference, executor overhead {o:.2} µs per task",
            s.program().tasks.len()
        );
        medians.push(t);
    }
    eprintln!("every op on core0, merged, vs the whole model on core0: {:.2}x", medians[1] / medians[0]);
    eprintln!("every op on core0, op by op, vs the whole model on core0: {:.2}x", medians[2] / medians[0]);
    g.finish();
}

criterion_group!(benches, runtime);
criterion_main!(benches);
