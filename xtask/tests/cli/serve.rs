//! Runs that decide from measurements at run time, wired to real PUs: a failing PU re-planned
//! around (`--fallback`), a slow plan giving way to a whole-model run, a server re-planning when
//! a PU slows down. Priced by recorded costs (`common::recorded_example`), slowed on purpose.

use crate::common::{recorded_example, stderr, xtask};

/// A PU that cannot compile: without --fallback the run fails naming it and suggesting the
/// flag; with it, bident plans again without that PU (dropping a --pin to it) and runs. The
/// plan is searched on the recorded costs (`pipeline` takes the same run flags).
#[test]
fn fallback_replans_without_a_failing_pu() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = recorded_example(tmp.path());
    let o = xtask(&["search", &dir, "--pin", "conv_3_node=core1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let args = ["run", &dir, "--inject-fault", "core1:compile", "--runs", "3"];
    let o = xtask(&args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("core1") && err.contains("--fallback"), "{err}");
    let o = xtask(&[&args[..], &["--fallback"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("planning again without PU `core1`") && err.contains("dropping 1 --pin"), "{err}");
    let plan: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(tmp.path().join("plan.yaml")).expect("plan.yaml"))
            .expect("YAML");
    let steps = plan["payload"]["steps"].as_sequence().expect("steps");
    assert!(!steps.is_empty() && steps.iter().all(|s| s["pu"].as_str() != Some("core1")), "{steps:?}");
    let excluded = plan["payload"]["constraints"]["exclude"].as_sequence().expect("exclude");
    assert_eq!(excluded.iter().filter_map(|e| e.as_str()).collect::<Vec<_>>(), ["core1"]);
}

/// `cargo xtask serve`: the plan the recorded costs give (the whole example on one core) served
/// while that core slows down 100x; the server gives way at once to the other core's standby,
/// then searches, and judges its recovery against a fresh plan; the serving trace shows the
/// switch. The decisions themselves are unit tests of `bident_runtime` on synthetic timings
/// (`drift`, `serve`); this checks that they are wired to a real server. Bad options are one
/// line.
#[test]
fn serving_replans_when_a_pu_slows_down() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = recorded_example(tmp.path());
    let o = xtask(&["search", &dir]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(tmp.path().join("plan.yaml")).expect("plan.yaml"))
            .expect("YAML");
    let per_pu = plan["payload"]["ops_per_pu"].as_mapping().expect("ops per PU");
    let busiest = per_pu.iter().max_by_key(|(_, n)| n.as_u64()).and_then(|(pu, _)| pu.as_str()).expect("a PU");
    let o = xtask(&["serve", &dir, "--inferences", "200", "--inject-fault", &format!("{busiest}:slow=100@30")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(&format!("re-plan    drift on {busiest}")) && stdout.contains("new plan"), "{stdout}");
    assert!(stdout.contains("gave way at once to a standby: new plan"), "{stdout}");
    assert!(stdout.contains("recovery   a fresh plan (") && stdout.contains("x of it [measured]"), "{stdout}");
    let trace = std::fs::read_to_string(tmp.path().join("serve-trace.json")).expect("serve-trace.json");
    assert!(trace.contains("re-planning"), "{trace}");
    let o = xtask(&["serve", &dir, "--threshold", "0.5"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--threshold must be above 1"), "{err}");
}

/// A plan clearly slower than a PU running the whole model beside it gives way to that PU: a
/// plan with every op on core0 (imported, priced by the recorded costs), core0 slowed 20x on
/// purpose at run time, and the run plans the whole model on core1, the SoC's only other PU.
/// The rules that decide it are unit tests of `bident_driver` on synthetic run reports; this
/// checks they are wired to a real run. Served, the plan that gave way may leave that PU again.
#[test]
fn a_plan_slower_than_a_whole_model_run_gives_way() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = recorded_example(tmp.path());
    let costs = tmp.path().join("costs.json");
    assert!(xtask(&["costs", "export", &dir, &costs.display().to_string()]).status.success());
    let costs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&costs).expect("costs.json")).expect("JSON");
    let placement: serde_json::Map<String, serde_json::Value> = costs["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|op| (op["name"].as_str().expect("op name").to_string(), "core0".into()))
        .collect();
    let file = tmp.path().join("placement.json");
    let text = serde_json::json!({"schedule": "sequential", "objective": "latency", "placement": placement});
    std::fs::write(&file, text.to_string()).expect("write");
    let o = xtask(&["plan", "import", &dir, &file.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = xtask(&["run", &dir, "--runs", "20", "--inject-fault", "core0:slow=20", "--measure-whole", "core1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(err.contains("planning the whole model on `core1` instead"), "{err}\n{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("plan ") && l.contains(": 10 on core1 ")), "{stdout}");
    // the plan holds the whole model there because the run gave way there, not by a pin: a
    // serving session may leave that PU when it slows down
    let plan: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(tmp.path().join("plan.yaml")).expect("plan.yaml"))
            .expect("YAML");
    let c = &plan["payload"]["constraints"];
    assert!(c["pin"].as_sequence().is_some_and(|p| p.is_empty()), "{c:?}");
    assert_eq!(c["whole"].as_str(), Some("core1"), "{c:?}\n{err}");
    let steps = plan["payload"]["steps"].as_sequence().expect("steps");
    assert!(steps.iter().all(|s| s["reason"].as_str() == Some("whole-model")), "{steps:?}");
    let o = xtask(&["serve", &dir, "--inferences", "120", "--inject-fault", "core1:slow=20@30"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("re-plan    drift on core1") && stdout.contains("new plan"), "{stdout}");
}
