//! Re-planning while serving (issue 17): how soon a server's latency recovers after its plan's
//! busiest PU slows down, against a fresh plan made knowing the slowdown.
//!
//! The example on `cores` (OpenVINO, one pinned single-threaded PU per core), profiled and
//! planned; served 400 inferences through a [`Server`] whose busiest PU runs 4x slower from
//! inference 100 on. Beside it, in the same process: the fresh plan, profiled again through the
//! same slowed backend, searched and served 200 inferences. Printed: when the server noticed,
//! when it swapped, and from which inference on its latency (median of 10) stayed within 10% of
//! the fresh plan's median.
//!
//! `cargo bench -p bident-tests --bench drift` (measured; say where it ran when quoting it).

use std::sync::Arc;

use bident_backend::Backend;
use bident_backend::fault::{Fault, FaultSpec, FaultyBackend, SlowFactor};
use bident_driver::TablePlanner;
use bident_runtime::{Grouping, Program, ServeConfig, Server};

const SLOW_FROM: usize = 100;
const SERVED: usize = 400;

fn main() {
    let (g, phased) = bident_tests::model("example");
    let be = bident_tests::backend();
    let soc = bident_tests::pinned_cores(be.as_ref());
    let cfg = bident_profile::ProfileConfig::default();
    let costs = bident_profile::profile(&g, &soc, be.as_ref(), &cfg, None, &mut |_| {}).expect("profile");
    let search = bident_search::SearchConfig::default();
    let plan = bident_search::search(&phased, &costs, &search).expect("search");
    let busiest = plan.ops_per_pu.iter().max_by_key(|(_, n)| **n).map(|(p, _)| p.clone()).expect("a PU");
    let pu = soc.pus.iter().position(|p| p.name == busiest).expect("its index");
    let calls = Program::from_plan(&g, &plan, &soc, Grouping::Merged).expect("program").0.queues[pu].len() as u64;
    let fault = FaultSpec {
        pu: busiest.clone(),
        fault: Fault::SlowAfter(SLOW_FROM as u64 * calls, SlowFactor::new(4.0).expect("4x")),
    };
    let faulty: Arc<dyn Backend> = Arc::new(FaultyBackend::new(be.clone(), fault));
    let inputs = bident_runtime::model_inputs(&g, 0);
    let searched = Arc::new(bident_search::pass::Bident);
    let planner = TablePlanner::new((g.clone(), phased.clone()), (soc.clone(), faulty.clone()), searched, &plan);
    let mut server =
        Server::new(g.clone(), (Arc::new(planner), costs), (plan, soc.clone()), faulty.clone(), ServeConfig::default())
            .expect("serve");
    let totals: Vec<f64> = (0..SERVED).map(|_| server.infer(&inputs).expect("inference").total_us).collect();
    // the fresh plan: profiled through the slowed backend (the slowdown is on by now)
    let fresh_costs = bident_profile::profile(&g, &soc, faulty.as_ref(), &cfg, None, &mut |_| {}).expect("profile");
    let fresh = bident_search::search(&phased, &fresh_costs, &search).expect("search");
    let built = Program::from_plan(&g, &fresh, &soc, Grouping::Merged).expect("program");
    let s = bident_runtime::Session::load(built, &soc, faulty, std::time::Duration::from_secs(60)).expect("load");
    let mut fresh_us: Vec<f64> =
        (0..200).map(|_| s.run(std::slice::from_ref(&inputs)).expect("inference").total_us).skip(20).collect();
    let q = |v: &mut [f64]| bident_profile::quantile(v, 0.5);
    let fresh_median = q(&mut fresh_us);
    let rolling = |k: usize| q(&mut totals[k..(k + 10).min(SERVED)].to_vec());
    let recovered = (SLOW_FROM..SERVED - 10).find(|&k| (k..SERVED - 10).all(|j| rolling(j) <= 1.1 * fresh_median));
    let sw = server.switches().first();
    println!(
        "drift: {busiest} slowed 4x from inference {SLOW_FROM} (measured on {})",
        bident_profile::host_description()
    );
    println!(
        "       median before {:.1} µs, slowed {:.1} µs; fresh plan ({}) {fresh_median:.1} µs",
        q(&mut totals[20..SLOW_FROM].to_vec()),
        q(&mut totals[SLOW_FROM..SLOW_FROM + 10].to_vec()),
        fresh.ops_per_pu.iter().map(|(p, n)| format!("{n} on {p}")).collect::<Vec<_>>().join(", ")
    );
    match sw {
        Some(s) => println!(
            "       noticed after inference {} ({:.2}x), new plan from inference {}",
            s.detected_after,
            s.factor,
            s.swapped_before().map_or("-".into(), |k| k.to_string())
        ),
        None => println!("       not noticed"),
    }
    match recovered {
        Some(k) => println!(
            "       within 10% of the fresh plan from inference {k} on: {} inferences after the slowdown",
            k - SLOW_FROM
        ),
        None => println!("       never within 10% of the fresh plan"),
    }
    let from = sw.and_then(|s| s.swapped_before()).unwrap_or(SERVED);
    println!(
        "       after the swap: median {:.1} µs; by 50 inferences: {:?}",
        q(&mut totals[from.min(SERVED)..].to_vec()),
        (from..SERVED)
            .step_by(50)
            .map(|k| q(&mut totals[k..(k + 50).min(SERVED)].to_vec()).round())
            .collect::<Vec<_>>()
    );
}
