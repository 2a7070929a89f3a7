//! The example model through every stage in-process on the `local` SoC: the plan as a
//! snapshot (measured costs redacted, so only structure and mapping are compared), the plan
//! checker, and the runtime's outputs against the whole model.

use bident_backend::SocSpec;
use bident_tests::{ModelCase, backend, import, read_case, root};

#[test]
fn example_plan_and_run() {
    let path = root().join("tests/data/import/example.yaml");
    let case: ModelCase = read_case(&path);
    let g = import(&case, &path);
    let phased = bident_partition::partition(&g).expect("partition");
    let be = backend();
    let soc = SocSpec::preset("local", be.as_ref()).expect("local SoC");
    let cfg = bident_profile::ProfileConfig { warmup: 1, runs: 3, seed: 0 };
    let costs = bident_profile::profile(&g, &soc, be.as_ref(), &cfg, &mut |_| {}).expect("profile");
    assert!(!costs.simulated);
    assert!(costs.ops.iter().all(|o| o.per_pu.iter().flatten().all(|c| c.exec_us > 0.0)));
    let plan = bident_search::search(&phased, &costs, &Default::default()).expect("search");
    bident_search::check_plan(&plan, &phased, &costs).expect("plan check");
    insta::assert_yaml_snapshot!("example-plan-local", plan, {
        ".graph" => "[hash]",
        ".steps[].exec_us" => "[us]",
        ".steps[].transfer_us" => "[us]",
        ".predicted_us" => "[us]",
        ".predicted_energy_uj" => "[uJ]",
        ".baselines[].predicted_us" => "[us]",
        ".baselines[].predicted_energy_uj" => "[uJ]",
        ".best_single_pu_us" => "[us]",
    });
    let run_cfg = bident_runtime::RunConfig { warmup: 1, runs: 3, ..Default::default() };
    let report = bident_runtime::run(&g, &plan, &soc, be, &run_cfg).expect("run");
    assert!(report.max_abs_err <= 1e-4, "max abs err {}", report.max_abs_err);
    assert!(report.measured_us > 0.0 && report.measured_best_single_pu_us > 0.0);
    assert_eq!(report.ops.len(), g.ops.len());
}

/// The `cores` SoC: one single-threaded PU pinned to each core; the plan may mix them, and its
/// outputs still match the whole model.
#[test]
fn example_on_pinned_cores() {
    let path = root().join("tests/data/import/example.yaml");
    let case: ModelCase = read_case(&path);
    let g = import(&case, &path);
    let phased = bident_partition::partition(&g).expect("partition");
    let be = backend();
    let soc = SocSpec::preset("cores", be.as_ref()).expect("cores SoC");
    assert_eq!(soc.pus.len(), std::thread::available_parallelism().map_or(1, |n| n.get()));
    assert!(soc.pus.iter().all(|p| p.cores.len() == 1 && p.properties["INFERENCE_NUM_THREADS"] == "1"));
    let cfg = bident_profile::ProfileConfig { warmup: 1, runs: 3, seed: 0 };
    let costs = bident_profile::profile(&g, &soc, be.as_ref(), &cfg, &mut |_| {}).expect("profile");
    assert!(costs.ops.iter().all(|o| o.per_pu.iter().all(Option::is_some)), "every op compiles on every core");
    let plan = bident_search::search(&phased, &costs, &Default::default()).expect("search");
    assert!(plan.predicted_us <= plan.best_single_pu_us.expect("baseline") + 1e-9);
    let report = bident_runtime::run(
        &g,
        &plan,
        &soc,
        be,
        &bident_runtime::RunConfig { warmup: 1, runs: 3, ..Default::default() },
    )
    .expect("run");
    assert!(report.max_abs_err <= 1e-4, "max abs err {}", report.max_abs_err);
}
