//! A session beside busy threads: what one inference costs beyond its op, quiet and with a busy
//! thread on every core. A bench, not a test: how long a wake-up takes is the machine's load
//! as much as bident's; the target is tens of µs, never a time slice.
//!
//! `cargo bench -p bident-tests --bench contended` (measured; say where it ran when quoting it).
//!
//! A session whose threads poll with yields hands a busy thread on the same core the core for a
//! whole time slice at every yield: a one-op session on a pinned PU took the scheduler's tick
//! (~3,900 µs here) per inference beside two busy processes, against ~2 µs alone. Polling now
//! stops once a yield is seen to give the core away, and a sleeping thread is woken ahead of a
//! busy one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bident_backend::Backend;

fn main() {
    let be: Arc<dyn Backend> = bident_tests::backend();
    let soc = bident_tests::pinned_cores(be.as_ref());
    let model = bident_zoo::probe("add", bident_tensor::DType::F32, 16).expect("a probe");
    let g = bident_ir::import_bytes(&prost::Message::encode_to_vec(&model), "probe.onnx", None, &Default::default())
        .expect("imports");
    let pu = soc.pus.iter().position(|p| p.cores.len() == 1).expect("a PU on one core");
    let quiet = bident_runtime::launch_us(&g, &soc, pu, be.clone(), 10).expect("measures");
    // a busy thread on every core, as another process's would be
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..std::thread::available_parallelism().map_or(2, |n| n.get()))
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let busy = bident_runtime::launch_us(&g, &soc, pu, be.clone(), 10);
    stop.store(true, Ordering::Relaxed);
    hogs.into_iter().for_each(|h| h.join().expect("a busy thread"));
    let busy = busy.expect("measures");
    // a time slice is milliseconds; being woken ahead of a busy thread, tens of µs at most
    println!("a one-op session on a pinned PU, beyond its op: {quiet:.1} µs alone, {busy:.1} µs beside busy threads");
    println!("target: under 500 µs beside busy threads ({})", if busy < 500.0 { "met" } else { "MISSED" });
}
