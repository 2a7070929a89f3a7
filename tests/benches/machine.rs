//! What the machine itself does to a measurement, apart from bident: the floor under every
//! prediction error and regret the reports print.
//!
//! 1. **Speed states.** A fixed computation (no memory traffic, no engine) on a thread pinned to
//!    the last core, back to back for ~3 s: its fastest run, the share of runs more than 20%
//!    slower than that, and the longest stretch of such runs. On a quiet machine every run is
//!    within a few % of the fastest.
//! 2. **Waking up.** Each model whole on each PU (the `all` SoC), called on a thread pinned to
//!    the PU's cores, in alternating blocks of 10 runs: back to back, and with 100 µs between
//!    runs spent asleep, spinning or yielding the CPU. What a run costs after its thread slept
//!    is what a worker pays when it sleeps between tasks.
//!
//! `cargo bench -p bident-tests --bench machine` (measured; say where it ran when quoting it).
//! `MODELS` and `PUS` (comma-separated) pick others than the default zoo models and PUs.

use std::time::{Duration, Instant};

use bident_backend::{Backend, HostTensor, SocSpec};

const GAP: Duration = Duration::from_micros(100);
const BLOCKS: usize = 100;
const PER_BLOCK: usize = 10;

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn speed_states(core: usize) {
    bident_backend::pin_current_thread("bench", &[core]).expect("pinned");
    let t0 = Instant::now();
    let mut runs = vec![];
    while t0.elapsed() < Duration::from_secs(3) {
        // `bident_profile::speed`'s probe, 8 times as long
        runs.push(bident_profile::speed::fixed_computation_us(200));
    }
    let fastest = runs.iter().copied().fold(f64::INFINITY, f64::min);
    let slow: Vec<bool> = runs.iter().map(|&t| t > 1.2 * fastest).collect();
    let longest = slow.split(|s| !s).map(|stretch| stretch.len()).max().unwrap_or(0);
    let mut sorted = runs.clone();
    println!(
        "\nspeed states: a fixed computation on core {core}, {} runs back to back in {:.1} s\n  fastest {fastest:.1} µs, \
         median {:.1} µs, p90 {:.1} µs; {:.1}% of runs >20% slower than the fastest, the longest stretch of them {longest} \
         runs ({:.1} ms)",
        runs.len(),
        t0.elapsed().as_secs_f64(),
        bident_profile::quantile(&mut sorted, 0.5),
        bident_profile::quantile(&mut sorted, 0.9),
        100.0 * slow.iter().filter(|&&s| s).count() as f64 / runs.len() as f64,
        longest as f64 * bident_profile::quantile(&mut sorted, 0.5) / 1e3,
    );
}

fn waking_up(be: &dyn Backend, soc: &SocSpec) {
    let gaps: [(&str, fn()); 4] = [
        ("back to back", || {}),
        ("asleep", || std::thread::sleep(GAP)),
        ("spinning", || {
            let t = Instant::now();
            while t.elapsed() < GAP {
                std::hint::spin_loop();
            }
        }),
        ("yielding", || {
            let t = Instant::now();
            while t.elapsed() < GAP {
                std::thread::yield_now();
            }
        }),
    ];
    println!(
        "\nwaking up: µs a run, median (p10) of {BLOCKS} blocks of {PER_BLOCK} runs each way, 100 µs between runs"
    );
    print!("{:<22} {:<10}", "model", "PU");
    gaps.iter().for_each(|(name, _)| print!(" {name:>16}"));
    println!();
    for model in list("MODELS", "llama-tiny-fp16,kan-tiny-int8,snn-vgg9-tiny-fp16") {
        let onnx = bident_zoo::build_bytes(&model, 0).unwrap_or_else(|| panic!("no zoo model `{model}`"));
        for name in list("PUS", "core1,core1.ort") {
            let pu = soc.pu(&name).unwrap_or_else(|| panic!("no PU `{name}`"));
            let times = std::thread::scope(|s| {
                s.spawn(|| {
                    bident_backend::pin_current_thread(&pu.name, &pu.cores).expect("pinned");
                    let mut exe = be.compile(&onnx, pu).expect("compiles");
                    let xs: Vec<HostTensor> = (exe.inputs().iter().enumerate())
                        .map(|(i, p)| {
                            HostTensor::seeded(p.dtype, p.shape.clone().expect("static inputs"), 1 + i as u64)
                        })
                        .collect();
                    let refs: Vec<&HostTensor> = xs.iter().collect();
                    let mut times = vec![vec![]; gaps.len()];
                    for b in 0..BLOCKS * gaps.len() {
                        let (_, gap) = gaps[b % gaps.len()];
                        for _ in 0..PER_BLOCK {
                            gap();
                            let t = Instant::now();
                            std::hint::black_box(exe.run(&refs).expect("runs"));
                            times[b % gaps.len()].push(us(t));
                        }
                    }
                    times
                })
                .join()
                .expect("the bench thread")
            });
            print!("{model:<22} {name:<10}");
            for mut t in times {
                let (p50, p10) = (bident_profile::quantile(&mut t, 0.5), bident_profile::quantile(&mut t, 0.1));
                print!(" {:>16}", format!("{p50:.1} ({p10:.1})"));
            }
            println!();
        }
    }
}

fn main() {
    let be = bident_tests::both_backends();
    let soc = SocSpec::preset("all", be.as_ref()).expect("the `all` SoC");
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    speed_states(last);
    waking_up(be.as_ref(), &soc);
}
