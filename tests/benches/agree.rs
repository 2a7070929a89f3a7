//! Experiment (issue 60, item 4): one configuration, the whole model on one PU, measured the
//! way refine measures it and the way the run does, alternated.
//!
//! `MODEL=... PU=CPU.bf16 REPS=6 cargo bench -p bident-tests --bench agree` (`ONLY=` a comma list
//! of `refine-alone`, `refine-round`, `refine-batch`, `session-reference`, `session-extracted`, `direct-reference`,
//! `direct-extracted`, `direct-default`); with `PLAN=<folder>/plan.bin`, a cut plan's tasks in its
//! session against the same executables called directly: back to back, alternating, and asleep
//! 100 µs before each.
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bident_backend::{Backend, HostTensor, SocSpec};
use bident_profile::ProfileConfig;
use bident_runtime::{Program, Session};

fn q(mut v: Vec<f64>, p: f64) -> f64 {
    bident_profile::quantile(&mut v, p)
}

/// Blocks as the run measures a baseline: 20 ms settle, 5 ms warm-up, 5 runs; the median of all.
fn session_blocks(session: &Session, inputs: &[Arc<HostTensor>], blocks: usize) -> (f64, f64, f64) {
    let mut all = vec![];
    for _ in 0..blocks {
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        let mut n = 0;
        while n < 3 || t0.elapsed() < Duration::from_millis(5) {
            session.run(std::slice::from_ref(&inputs.to_vec())).expect("runs");
            n += 1;
        }
        for _ in 0..5 {
            all.push(session.run(std::slice::from_ref(&inputs.to_vec())).expect("runs").total_us);
        }
    }
    (q(all.clone(), 0.1), q(all.clone(), 0.5), q(all, 0.9))
}

/// The profiler's way, by hand: a fresh thread, `warmup` runs then `runs`, back to back.
fn direct(be: &dyn Backend, onnx: &[u8], pu: &bident_backend::PuSpec, inputs: &[HostTensor]) -> (f64, f64) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut exe = be.compile(onnx, pu).expect("compiles");
            let refs: Vec<&HostTensor> = inputs.iter().collect();
            let (mut infer, mut total) = (vec![], vec![]);
            for k in 0..220 {
                let t = Instant::now();
                let (_, timing) = exe.run_timed(&refs).expect("runs");
                if k >= 20 {
                    infer.push(timing.infer.as_secs_f64() * 1e6);
                    total.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            (q(infer, 0.5), q(total, 0.5))
        })
        .join()
        .expect("thread")
    })
}

fn main() {
    // SAFETY: no other thread yet
    unsafe { bident_backend::openvino::unbind_threads() };
    let model =
        std::env::var("MODEL").unwrap_or_else(|_| "/work/main/target/thirdparty/silero-vad-lstm.lowered.onnx".into());
    let pu_name = std::env::var("PU").unwrap_or_else(|_| "CPU.bf16".into());
    let reps: usize = std::env::var("REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
    let only: Vec<String> = std::env::var("ONLY").map(|s| s.split(',').map(String::from).collect()).unwrap_or_default();
    let want = |c: &str| only.is_empty() || only.iter().any(|o| o == c);
    let be: Arc<dyn Backend> = bident_tests::both_backends();
    let g = bident_ir::import(std::path::Path::new(&model), &bident_ir::ImportOptions::default()).expect("imports");
    let soc = SocSpec::preset("local", be.as_ref()).expect("local");
    let j = soc.pus.iter().position(|p| p.name == pu_name).expect("PU");
    let pu = &soc.pus[j];
    let all: Vec<u32> = (0..g.ops.len() as u32).collect();
    let ex = bident_ir::Extractor::new(&g).expect("extractor");
    let (extracted, _, _) = ex.extract_group(&all).expect("group");
    let reference = g.reference_model().expect("reference");
    let one = SocSpec { name: "one".into(), backend: pu.backend.clone(), simulated: false, pus: vec![pu.clone()] };
    let inputs = bident_runtime::model_inputs(&g, 0);
    let host: Vec<HostTensor> = inputs.iter().map(|t| (**t).clone()).collect();
    let cfg = ProfileConfig::default();
    let total = |c: &bident_profile::Cost| c.weight_us() + c.h2d_us + c.d2h_us;
    println!("{} ({} ops) on {pu_name}", g.name, g.ops.len());
    if let Ok(plan) = std::env::var("PLAN") {
        cut(&g, &soc, &be, std::path::Path::new(&plan), reps);
        return;
    }
    for r in 0..reps {
        if want("refine-alone") {
            let mut notes = vec![];
            let found =
                bident_profile::measure_segments(&g, &soc, be.as_ref(), &cfg, None, &[(all.clone(), j)], &mut |p| {
                    notes.extend(p.note.clone().filter(|_| p.phase == "slow" || p.phase == "again"))
                })
                .expect("measures");
            if !notes.is_empty() {
                println!("  {}", notes.join("; "));
            }
            let c = found[0].per_pu[j].as_ref().expect("measured");
            println!(
                "{r} refine, whole alone            {:7.1} µs (infer {:.1}, p10 {:.1} p90 {:.1}, {} runs)",
                total(c),
                c.weight_us(),
                c.p10_us[1] + c.p10_us[2],
                c.p90_us[1] + c.p90_us[2],
                c.runs
            );
        }
        if want("refine-round") {
            // as refine's first round on a cut plan: every PU's whole model and the plan's segments
            let n = g.ops.len() as u32;
            let ort = soc.pus.iter().position(|p| p.name == "CPU.ort").expect("CPU.ort");
            let mut wanted: Vec<(Vec<u32>, usize)> = (0..soc.pus.len()).map(|k| (all.clone(), k)).collect();
            wanted.push(((1..13).collect(), j));
            wanted.push(((13..n).collect(), ort));
            let found = bident_profile::measure_segments(&g, &soc, be.as_ref(), &cfg, None, &wanted, &mut |_| {})
                .expect("measures");
            let c = found[j].per_pu[j].as_ref().expect("measured");
            println!(
                "{r} refine, a cut plan's round     {:7.1} µs (infer {:.1}, {} runs)",
                total(c),
                c.weight_us(),
                c.runs
            );
        }
        if want("refine-batch") {
            let n = g.ops.len() as u32;
            let mut wanted = vec![(all.clone(), j)];
            for (a, b) in [(1, n), (2, n - 2), (2, n), (0, n - 2)] {
                wanted.push(((a..b).collect(), j));
            }
            let found = bident_profile::measure_segments(&g, &soc, be.as_ref(), &cfg, None, &wanted, &mut |_| {})
                .expect("measures");
            let c = found[0].per_pu[j].as_ref().expect("measured");
            println!(
                "{r} refine, whole beside 1..n     {:7.1} µs (infer {:.1}, {} runs)",
                total(c),
                c.weight_us(),
                c.runs
            );
        }
        if want("direct-default") {
            let d = bident_runtime::default_spec(pu, &pu.backend, &bident_runtime::RunConfig::default());
            let (infer, tot) = direct(be.as_ref(), &reference, &d, &host);
            println!("{r} direct loop, default spec {:?} {tot:7.1} µs (infer {infer:.1})", d.properties);
        }
        for (what, bytes) in [("reference", &reference), ("extracted", &extracted)] {
            if want(&format!("session-{what}")) {
                let s = Session::load(
                    Program::whole(&g, &one, 0, bytes.clone()).expect("program"),
                    &one,
                    be.clone(),
                    Duration::from_secs(60),
                )
                .expect("loads");
                let (p10, p50, p90) = session_blocks(&s, &inputs, 16);
                println!("{r} run session, {what:<10}      {p50:7.1} µs (p10 {p10:.1} p90 {p90:.1})");
            }
            if want(&format!("direct-{what}")) {
                let (infer, tot) = direct(be.as_ref(), bytes, pu, &host);
                println!("{r} direct loop, {what:<10}      {tot:7.1} µs (infer {infer:.1})");
            }
        }
    }
}

/// A cut plan read from a folder: the session's own time per task against each task's segment
/// called directly on one thread (back to back; alternating with the other segments, as the
/// session runs them; with a sleep before each).
fn cut(g: &bident_ir::FusedGraph, soc: &SocSpec, be: &Arc<dyn Backend>, plan: &std::path::Path, reps: usize) {
    let plan = bident_artifact::read::<bident_search::Plan>(plan).expect("plan").value;
    let built = Program::from_plan(g, &plan, soc, bident_runtime::Grouping::Merged).expect("program");
    let program = built.0.clone();
    let bytes = built.1.clone();
    let inputs = bident_runtime::model_inputs(g, 0);
    let specs: Vec<bident_backend::PuSpec> = program.tasks.iter().map(|t| be.quiet(&soc.pus[t.pu])).collect();
    for t in &program.tasks {
        println!("task {} on {}: predicted {:.1} µs", t.name, soc.pus[t.pu].name, t.predicted.1 - t.predicted.0);
    }
    let session = Session::load(built, soc, be.clone(), Duration::from_secs(60)).expect("loads");
    for r in 0..reps {
        let mut own = vec![vec![]; program.tasks.len()];
        let mut totals = vec![];
        for _ in 0..16 {
            std::thread::sleep(Duration::from_millis(20));
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(5) {
                session.run(std::slice::from_ref(&inputs)).expect("runs");
            }
            for _ in 0..5 {
                let inf = session.run(std::slice::from_ref(&inputs)).expect("runs");
                totals.push(inf.total_us);
                for s in &inf.spans {
                    own[s.task].push(s.finish_us - s.start_us);
                }
            }
        }
        let own: Vec<String> = own.into_iter().map(|v| format!("{:.1}", q(v, 0.5))).collect();
        println!("{r} session: total {:.1} µs, own per task {}", q(totals, 0.5), own.join(", "));
        // direct calls on one thread, unpinned as the PUs are
        let direct: Vec<(String, Vec<f64>)> = std::thread::scope(|s| {
            s.spawn(|| {
                let mut exes: Vec<Box<dyn bident_backend::Executable>> =
                    bytes.iter().zip(&specs).map(|(b, spec)| be.compile(b, spec).expect("compiles")).collect();
                let task_inputs: Vec<Vec<HostTensor>> = exes
                    .iter()
                    .map(|e| {
                        e.inputs()
                            .iter()
                            .enumerate()
                            .map(|(k, p)| HostTensor::seeded(p.dtype, p.shape.clone().expect("static"), k as u64))
                            .collect()
                    })
                    .collect();
                let refs: Vec<Vec<&HostTensor>> = task_inputs.iter().map(|v| v.iter().collect()).collect();
                let mut out = vec![];
                let time = |exes: &mut Vec<Box<dyn bident_backend::Executable>>, k: usize| {
                    let t = Instant::now();
                    exes[k].run(&refs[k]).expect("runs");
                    t.elapsed().as_secs_f64() * 1e6
                };
                // back to back, each alone
                let mut alone = vec![];
                for k in 0..exes.len() {
                    let mut v = vec![];
                    for i in 0..220 {
                        let us = time(&mut exes, k);
                        if i >= 20 {
                            v.push(us);
                        }
                    }
                    alone.push(q(v, 0.5));
                }
                out.push(("back to back".to_string(), alone));
                // alternating, as an inference runs them
                let mut alt = vec![vec![]; exes.len()];
                for i in 0..220 {
                    for k in 0..exes.len() {
                        let us = time(&mut exes, k);
                        if i >= 20 {
                            alt[k].push(us);
                        }
                    }
                }
                out.push(("alternating".to_string(), alt.into_iter().map(|v| q(v, 0.5)).collect()));
                // a 100 µs sleep before each
                let mut slept = vec![vec![]; exes.len()];
                for i in 0..120 {
                    for k in 0..exes.len() {
                        std::thread::sleep(Duration::from_micros(100));
                        let us = time(&mut exes, k);
                        if i >= 20 {
                            slept[k].push(us);
                        }
                    }
                }
                out.push((
                    "alternating, asleep 100 µs before each".to_string(),
                    slept.into_iter().map(|v| q(v, 0.5)).collect(),
                ));
                out
            })
            .join()
            .expect("thread")
        });
        for (what, v) in direct {
            let v: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
            println!("{r} direct, {what}: {}", v.join(", "));
        }
    }
}
