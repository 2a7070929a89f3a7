//! Hand-off between engines (issue 15): no more than 2 µs per tensor beyond the backend calls.
//!
//! A chain of two ops, each taking and giving `n` tensors of `len` f32 (`Relu` on every tensor,
//! then `Neg` on every tensor), measured two ways side by side: (a) `session`: the runtime's
//! [`Session`] with op 1 on an OpenVINO PU and op 2 on an ONNX Runtime PU (`cores-mixed`: one
//! pinned worker per core), and the reverse; (b) `direct`: the same two models compiled for the
//! same PUs and called back to back on the bench thread, the first's outputs fed to the second.
//! The hand-off per tensor is (a - b) / n; the marginal one, the growth of (a - b) per extra
//! tensor between the smallest and the largest `n`, leaves out what an inference pays once
//! (waking the workers, collecting their answers).
//!
//! `cargo bench -p bident-tests --bench handoff` (installs both wheels into the target folder on
//! first use; needs two cores). After criterion's lines it prints a table from a second
//! measurement of every configuration in alternating blocks (session, direct), p10 and median,
//! with the session's timeline split into its parts: other processes' load hits both alike, and
//! on a shared machine the p10 is the figure to read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bident_backend::onnxruntime::OnnxRuntime;
use bident_backend::openvino::OpenVino;
use bident_backend::{Backend, Backends, DType, Executable, HostTensor, SocSpec};
use bident_runtime::program::Stream;
use bident_runtime::{Program, Session, Task};
use criterion::Criterion;
use prost::Message;

/// Tensors handed from op 1 to op 2.
const COUNTS: [usize; 3] = [1, 4, 16];
/// f32 elements per tensor: 64 B and 64 KiB.
const LENS: [u64; 2] = [16, 16384];

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| bident_tests::root().join("target"))
}

/// Both backends behind one dispatcher, as xtask builds it for a mixed SoC.
fn backends() -> Arc<Backends> {
    let target = target_dir();
    let say = &mut |l: &str| eprintln!("{l}");
    let ov = bident_backend::openvino::install::ensure(&target, say).expect("OpenVINO is needed");
    let ort = bident_backend::onnxruntime::install::ensure(&target, say).expect("ONNX Runtime is needed");
    Arc::new(Backends::new(vec![
        Arc::new(OpenVino::load(&ov).expect("loading OpenVINO")),
        Arc::new(OnnxRuntime::load(&ort).expect("loading ONNX Runtime")),
    ]))
}

/// Tensor `i` of stage `k` (0: the inputs, 1: op 1's outputs, 2: op 2's outputs).
fn tensor(k: usize, i: usize) -> String {
    format!("{}{i}", ["x", "y", "z"][k])
}

/// Op `k` (0 or 1) as a model: `n` independent nodes, inputs and outputs with static shapes
/// (as bident's extracted ops declare them).
fn op_model(k: usize, n: usize, len: u64) -> Vec<u8> {
    let op = ["Relu", "Neg"][k];
    let mut b = bident_zoo::Builder::new(0);
    for i in 0..n {
        let x = b.input(&tensor(k, i), &[1, len]);
        b.node_named(&format!("{op}{i}"), op, &[&x], &[&tensor(k + 1, i)], &[]);
        b.output(&tensor(k + 1, i));
    }
    let mut m = b.finish(&format!("op{k}"));
    if let Some(g) = m.graph.as_mut() {
        for (o, i) in g.output.iter_mut().zip(&g.input) {
            o.r#type = i.r#type.clone();
        }
    }
    m.encode_to_vec()
}

/// The two ops as a program: op `k` on PU `pus[k]` of a SoC of `n_pus`.
fn program(n: usize, len: u64, pus: [usize; 2], n_pus: usize) -> Program {
    let slot = |k: usize, i: usize| k * n + i;
    let tasks: Vec<Task> = (0..2)
        .map(|k| Task {
            stream: 0,
            ops: vec![k as u32],
            name: format!("op{k}"),
            pu: pus[k],
            inputs: (0..n).map(|i| slot(k, i)).collect(),
            input_names: (0..n).map(|i| tensor(k, i)).collect(),
            outputs: (0..n).map(|i| slot(k + 1, i)).collect(),
            output_names: (0..n).map(|i| tensor(k + 1, i)).collect(),
            output_types: vec![(DType::F32, vec![1, len]); n],
            predicted: (k as f64, k as f64 + 1.0),
        })
        .collect();
    let mut queues = vec![vec![]; n_pus];
    queues[pus[0]].push(0);
    queues[pus[1]].push(1);
    let stream = Stream {
        model: "chain".into(),
        inputs: (0..n).map(|i| slot(0, i)).collect(),
        outputs: (0..n).map(|i| slot(2, i)).collect(),
    };
    let p = Program {
        tasks,
        queues,
        slots: 3 * n,
        streams: vec![stream],
        schedule: "sequential".into(),
        predicted_us: 2.0,
    };
    p.check().expect("a valid program");
    p
}

/// The two executables called back to back on this thread; `feed[j]`: op 1's output that is
/// op 2's input `j`.
struct Direct {
    first: Box<dyn Executable>,
    second: Box<dyn Executable>,
    feed: Vec<usize>,
}

impl Direct {
    fn run(&mut self, inputs: &[&HostTensor]) -> Vec<HostTensor> {
        let mid = self.first.run(inputs).expect("op 1");
        let refs: Vec<&HostTensor> = self.feed.iter().map(|&j| &mid[j]).collect();
        self.second.run(&refs).expect("op 2")
    }
}

fn group(n: usize, len: u64, direction: &str) -> String {
    format!("handoff_{direction}_n{n}_{}B", len * 4)
}

fn handoff(c: &mut Criterion, be: &Arc<Backends>, rows: &mut Vec<Row>) {
    let soc = SocSpec::preset("cores-mixed", be.as_ref()).expect("cores-mixed: two cores and both backends");
    let (ov, ort) = (0, 1);
    for len in LENS {
        for n in COUNTS {
            let onnx = [op_model(0, n, len), op_model(1, n, len)];
            let xs: Vec<HostTensor> =
                (0..n).map(|i| HostTensor::seeded(DType::F32, vec![1, len], 1 + i as u64)).collect();
            let shared = vec![xs.iter().cloned().map(Arc::new).collect::<Vec<_>>()];
            let refs: Vec<&HostTensor> = xs.iter().collect();
            for (direction, pus) in [("ov-to-ort", [ov, ort]), ("ort-to-ov", [ort, ov])] {
                let built = (program(n, len, pus, soc.pus.len()), onnx.to_vec());
                let session = Session::load(built, &soc, be.clone(), Duration::from_secs(10)).expect("session");
                let first = be.compile(&onnx[0], &soc.pus[pus[0]]).expect("op 1 compiles");
                let second = be.compile(&onnx[1], &soc.pus[pus[1]]).expect("op 2 compiles");
                let names: Vec<&str> = first.outputs().iter().map(|p| p.name.as_str()).collect();
                let feed = second
                    .inputs()
                    .iter()
                    .map(|p| names.iter().position(|&o| o == p.name).expect("op 2 reads op 1's outputs"))
                    .collect();
                let mut direct = Direct { first, second, feed };
                // both ways compute the same thing
                let a = session.run(&shared).expect("run").outputs.remove(0);
                let b = direct.run(&refs);
                assert!(
                    a.len() == n && a.iter().zip(&b).all(|(x, y)| x.max_abs_diff(y).is_ok_and(|d| d == 0.0)),
                    "session and direct differ"
                );

                let mut g = c.benchmark_group(group(n, len, direction));
                g.sample_size(40).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
                g.bench_function("session", |b| b.iter(|| session.run(&shared).expect("run")));
                g.bench_function("direct", |b| b.iter(|| direct.run(&refs)));
                g.finish();
                rows.push(interleaved(direction, n, len, &session, &shared, &mut direct, &refs));
            }
        }
    }
}

/// One configuration measured again in alternating blocks (session, direct), so that load
/// from other processes hits both alike, with the session's timeline split into its parts.
struct Row {
    direction: &'static str,
    n: usize,
    len: u64,
    /// p10 and median of whole calls, µs.
    session: [f64; 2],
    direct: [f64; 2],
    /// Medians, µs: caller to op 1's start, op 1, op 1's finish to op 2's start, op 2, op 2's
    /// finish to the caller's end.
    parts: [f64; 5],
    /// Medians, µs: op 1 and op 2 called directly.
    direct_ops: [f64; 2],
}

const BLOCKS: usize = 200;
const PER_BLOCK: usize = 5;

fn interleaved(
    direction: &'static str,
    n: usize,
    len: u64,
    session: &Session,
    shared: &[Vec<Arc<HostTensor>>],
    direct: &mut Direct,
    refs: &[&HostTensor],
) -> Row {
    let (mut a, mut b) = (vec![], vec![]);
    let mut parts: [Vec<f64>; 5] = Default::default();
    let mut ops: [Vec<f64>; 2] = Default::default();
    for _ in 0..BLOCKS {
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let inf = session.run(shared).expect("run");
            a.push(t.elapsed().as_secs_f64() * 1e6);
            let (s0, s1) = (&inf.spans[0], &inf.spans[1]);
            let cut = [0.0, s0.start_us, s0.finish_us, s1.start_us, s1.finish_us, inf.total_us];
            for (k, p) in parts.iter_mut().enumerate() {
                p.push(cut[k + 1] - cut[k]);
            }
        }
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let mid = direct.first.run(refs).expect("op 1");
            let t1 = Instant::now();
            let fed: Vec<&HostTensor> = direct.feed.iter().map(|&j| &mid[j]).collect();
            std::hint::black_box(direct.second.run(&fed).expect("op 2"));
            let t2 = Instant::now();
            b.push((t2 - t).as_secs_f64() * 1e6);
            ops[0].push((t1 - t).as_secs_f64() * 1e6);
            ops[1].push((t2 - t1).as_secs_f64() * 1e6);
        }
    }
    let q = |v: &mut Vec<f64>, x| bident_profile::quantile(v, x);
    Row {
        direction,
        n,
        len,
        session: [q(&mut a, 0.1), q(&mut a, 0.5)],
        direct: [q(&mut b, 0.1), q(&mut b, 0.5)],
        parts: parts.map(|mut p| q(&mut p, 0.5)),
        direct_ops: ops.map(|mut p| q(&mut p, 0.5)),
    }
}

fn summary(rows: &[Row]) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nhand-off between engines (target: at most 2 µs per tensor beyond the backend calls)");
    println!(
        "{BLOCKS} alternating blocks of {PER_BLOCK} session and {PER_BLOCK} direct calls; µs; load average {load}"
    );
    println!(
        "{:<10} {:>3} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   session median: {:>6} {:>6} {:>6} {:>6} {:>6}   direct median: {:>6} {:>6}",
        "direction",
        "n",
        "bytes",
        "a p10",
        "b p10",
        "(a-b)/n",
        "a p50",
        "b p50",
        "(a-b)/n",
        "start",
        "op1",
        "hand",
        "op2",
        "end",
        "op1",
        "op2"
    );
    for r in rows {
        let per = |[a, b]: [[f64; 2]; 2], k: usize| (a[k] - b[k]) / r.n as f64;
        let p = r.parts;
        println!(
            "{:<10} {:>3} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}   {:>22.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1}   {:>21.1} {:>6.1}",
            r.direction,
            r.n,
            r.len * 4,
            r.session[0],
            r.direct[0],
            per([r.session, r.direct], 0),
            r.session[1],
            r.direct[1],
            per([r.session, r.direct], 1),
            p[0],
            p[1],
            p[2],
            p[3],
            p[4],
            r.direct_ops[0],
            r.direct_ops[1]
        );
    }
    // the growth of (a - b) per extra tensor, without what an inference pays once
    for direction in ["ov-to-ort", "ort-to-ov"] {
        for len in LENS {
            let of = |n: usize| rows.iter().find(|r| (r.direction, r.n, r.len) == (direction, n, len));
            let (Some(lo), Some(hi)) = (of(COUNTS[0]), of(COUNTS[COUNTS.len() - 1])) else { continue };
            let extra =
                |k: usize| ((hi.session[k] - hi.direct[k]) - (lo.session[k] - lo.direct[k])) / (hi.n - lo.n) as f64;
            println!(
                "{direction:<10} marginal hand-off per tensor of {} bytes: {:.2} µs (p10), {:.2} µs (p50)",
                len * 4,
                extra(0),
                extra(1)
            );
        }
    }
}

fn main() {
    // as `cargo xtask` runs OpenVINO; SAFETY: no other thread exists yet
    unsafe { bident_backend::openvino::unbind_threads() };
    let be = backends();
    let mut c = Criterion::default().configure_from_args();
    let mut rows = vec![];
    handoff(&mut c, &be, &mut rows);
    c.final_summary();
    summary(&rows);
}
