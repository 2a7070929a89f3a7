//! The command a user types, end to end: bad inputs (data-driven from
//! `tests/data/bad-input/*.yaml`), the pipeline on the example model, stage subcommands,
//! `show`, and rejection of corrupt or mismatched artifacts. Checks against outside references
//! are in `references.rs`; decisions a run makes from measurements, in `serve.rs`.

use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;

#[path = "../common/mod.rs"]
mod common;
mod references;
mod serve;

use common::{last_json, recorded_example, root, stderr, succeeded_json, xtask};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BadCase {
    /// `zoo:NAME` or a file beside the case.
    model: String,
    /// Write only the first N bytes of the model.
    truncate_to: Option<usize>,
    #[serde(default)]
    args: Vec<String>,
    /// Expected part of the one-line error.
    error: String,
}

#[test]
fn bad_inputs_fail_with_one_clear_line_and_leave_no_artifact() {
    let dir = root().join("tests/data/bad-input");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("case folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 7, "expected the bad-input cases, found {}", paths.len());
    for path in paths {
        let case: BadCase = serde_norway::from_str(&std::fs::read_to_string(&path).expect("case")).expect("case yaml");
        let tmp = tempfile::tempdir().expect("tempdir");
        let model = match (case.model.strip_prefix("zoo:"), case.truncate_to) {
            (Some(name), Some(n)) => {
                let bytes = bident_zoo::build_bytes(name, 0).expect("zoo model");
                let p = tmp.path().join("model.onnx");
                std::fs::write(&p, &bytes[..n.min(bytes.len())]).expect("write");
                p.display().to_string()
            }
            (Some(_), None) => case.model.clone(),
            (None, _) => dir.join(&case.model).display().to_string(),
        };
        let out = tmp.path().join("out");
        let out_s = out.display().to_string();
        let mut args = vec!["import", model.as_str(), "--out", out_s.as_str()];
        args.extend(case.args.iter().map(String::as_str));
        let o = xtask(&args);
        let err = stderr(&o);
        let name = path.display();
        assert_eq!(o.status.code(), Some(1), "{name}: exit code; stderr:\n{err}");
        assert!(!err.contains("panicked"), "{name}: panicked:\n{err}");
        // the import's own notes (a large zoo model built) may come first
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("import: ")).collect();
        assert_eq!(lines.len(), 1, "{name}: expected one line, got:\n{err}");
        assert!(lines[0].starts_with("error: "), "{name}: {err}");
        assert!(lines[0].contains(&case.error), "{name}: expected `{}` in:\n{err}", case.error);
        assert!(!out.join("fused-graph.bin").exists(), "{name}: left an artifact");
    }
}

#[test]
fn pipeline_end_to_end_on_the_example() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&["pipeline", "--out", &dir, "--json", "--runs", "3", "--profile-runs", "3"]);
    assert!(o.status.success(), "pipeline failed:\n{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().expect("output");
    let j: serde_norway::Value = serde_norway::from_str(last).expect("last line is JSON");
    for key in [
        "model",
        "soc",
        "simulated",
        "pus",
        "mode",
        "objective",
        "fused_ops",
        "predicted_us",
        "predicted_energy_mj",
        "best_single_pu",
        "best_single_pu_us",
        "predicted_speedup",
        "measured_us",
        "measured_best_single_pu_us",
        "measured_speedup",
        "max_abs_err",
    ] {
        assert!(j.get(key).is_some(), "missing `{key}` in {last}");
    }
    assert_eq!(j["model"].as_str(), Some("example"));
    assert_eq!(j["simulated"].as_bool(), Some(false));
    assert_eq!(j["mode"].as_str(), Some("sequential"));
    assert_eq!(j["fused_ops"].as_u64(), Some(10));
    // exact where every op ran in f32; where the CPU computes in bf16 by default (AVX512-BF16),
    // `local` offers that PU too, and the report states the looser tolerance it checked
    let tolerance = j["tolerance"].as_str().unwrap_or_default();
    let bound = if tolerance.contains("every op runs in f32") { 1e-4 } else { 5e-2 };
    assert!(tolerance.contains("f32") || tolerance.contains("bf16"), "{last}");
    assert!(j["max_abs_err"].as_f64().is_some_and(|e| e <= bound), "{last}");
    assert!(j["measured_us"].as_f64().is_some_and(|t| t > 0.0), "{last}");
    for f in ["fused-graph", "phased-graph", "cost-table", "plan", "run-report"] {
        assert!(tmp.path().join(format!("{f}.bin")).exists(), "{f}.bin");
        assert!(tmp.path().join(format!("{f}.yaml")).exists(), "{f}.yaml");
    }

    // every stage reruns on its own from the artifacts
    for stage in [vec!["partition", &dir], vec!["search", &dir, "--objective", "energy"]] {
        let o = xtask(&stage);
        assert!(o.status.success(), "{stage:?}:\n{}", stderr(&o));
    }

    // show prints any artifact as YAML
    let plan = tmp.path().join("plan.bin");
    let o = xtask(&["show", &plan.display().to_string()]);
    assert!(o.status.success());
    let yaml = String::from_utf8_lossy(&o.stdout);
    assert!(yaml.contains("kind: plan") && yaml.contains("objective: energy"), "{yaml}");

    let good = std::fs::read(&plan).expect("plan");

    // a corrupt artifact is rejected, saying which and why
    let mut bytes = good.clone();
    let n = bytes.len();
    bytes[n - 2] ^= 0x55;
    std::fs::write(&plan, &bytes).expect("write");
    let o = xtask(&["show", &plan.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("plan.bin: payload is corrupt"), "{}", stderr(&o));

    // a cost table of another model is refused by the search
    let other = tempfile::tempdir().expect("tempdir");
    let od = other.path().display().to_string();
    let o = xtask(&["import", "zoo:mlp", "--out", &od]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(xtask(&["partition", &od]).status.success());
    std::fs::copy(tmp.path().join("cost-table.bin"), other.path().join("cost-table.bin")).expect("copy");
    let o = xtask(&["search", &od]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the cost table of `example` does not fit"), "{}", stderr(&o));
    // so is a plan of another model, and show prints it but fails, saying why
    let stray = other.path().join("plan.bin");
    std::fs::write(&stray, &good).expect("write");
    let o = xtask(&["show", &stray.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("kind: plan"));
    assert!(stderr(&o).contains("plan.bin: printed, but it does not verify"), "{}", stderr(&o));
}

#[test]
fn external_data_inside_the_model_folder_is_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&["zoo", "mlp", "--out", &dir, "--external-data"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(tmp.path().join("mlp.weights").exists());
    let model = tmp.path().join("mlp.onnx").display().to_string();
    let out = tmp.path().join("out").display().to_string();
    let o = xtask(&["import", &model, "--out", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("-> 3 fused ops"), "{}", stderr(&o));
    // the weights file shortened: a clear error naming the initializer
    std::fs::write(tmp.path().join("mlp.weights"), [0u8; 16]).expect("write");
    let o = xtask(&["import", &model, "--out", &out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tensor `fc0.w`: external data:"), "{}", stderr(&o));
}

#[test]
fn bare_xtask_prints_help() {
    let o = xtask(&[]);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(text.contains("pipeline") && text.contains("codegen"), "{text}");
}

/// Every malformed SoC spec in `tests/data/bad-soc/` (its first line: `# error: <expected>`) is
/// refused with one clear line; the good one in `tests/data/soc/` plans and runs a model.
#[test]
fn soc_spec_files() {
    let dir = root().join("tests/data/bad-soc");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("bad-soc") {
        let path = e.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let want = text.lines().next().and_then(|l| l.strip_prefix("# error: ")).expect("first line: # error: ...");
        let o = xtask(&["soc", &path.display().to_string()]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{}: accepted", path.display());
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{}: {err}", path.display());
        assert!(errors[0].contains(want), "{}: expected `{want}` in {err}", path.display());
        n += 1;
    }
    assert!(n >= 5);
    let good = root().join("tests/data/soc/one-core.toml");
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = xtask(&[
        "pipeline",
        "zoo:mlp",
        "--soc",
        &good.display().to_string(),
        "--runs",
        "2",
        "--profile-runs",
        "2",
        "--out",
        &tmp.path().display().to_string(),
        "--json",
    ]);
    let (stdout, j) = succeeded_json(&o);
    assert_eq!(j["soc"].as_str(), Some("core0-and-cpu"), "{stdout}");
    assert!(j["max_abs_err"].as_f64().is_some_and(|e| e <= 1e-4), "{stdout}");

    // one SoC over two backends: core0 on OpenVINO, core1 on ONNX Runtime, every stage per PU
    let mixed = root().join("tests/data/soc/mixed-cores.toml");
    for soc in [mixed.display().to_string(), "cores-mixed".to_string()] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().display().to_string();
        let o = xtask(&[
            "pipeline",
            "zoo:example",
            "--soc",
            &soc,
            "--out",
            &out,
            "--runs",
            "3",
            "--profile-runs",
            "3",
            "--json",
        ]);
        assert!(o.status.success(), "{soc}: {}", stderr(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let j: serde_norway::Value = last_json(&stdout);
        let pus: Vec<&str> = j["pus"].as_sequence().expect("pus").iter().filter_map(|p| p.as_str()).collect();
        assert!(pus.len() == 2 && pus.iter().all(|p| p.starts_with("core")), "{soc}: {stdout}");
        assert!(j["max_abs_err"].as_f64().is_some_and(|e| e <= 1e-4), "{soc}: {stdout}");
        let costs = std::fs::read_to_string(tmp.path().join("cost-table.yaml")).expect("cost table twin");
        let both = |l: &str| l.trim_start().starts_with("backend: openvino ") && l.contains(" + onnxruntime ");
        assert!(costs.lines().any(both), "{soc}: the cost table names both backends:\n{costs}");
        let gantt = std::fs::read_to_string(tmp.path().join("gantt.svg")).expect("gantt");
        assert!(gantt.contains(" (onnxruntime)</text>"), "{soc}: the Gantt names the backend of each PU");
    }
}

/// `--soc lunar-lake` plans from the virtual SoC: simulated everywhere, nothing measured, and
/// the plan cannot be run.
#[test]
fn virtual_soc_plans_and_says_it_is_simulated() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&["pipeline", "zoo:attention", "--out", &dir, "--soc", "lunar-lake", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("[simulated]"), "{stdout}");
    let j: serde_norway::Value = last_json(&stdout);
    assert_eq!(j["simulated"].as_bool(), Some(true), "{stdout}");
    assert_eq!(j["pus"].as_sequence().map(Vec::len), Some(3), "{stdout}");
    assert!(j["predicted_energy_mj"].as_f64().is_some_and(|e| e > 0.0), "{stdout}");
    // every fused op once, on one of the SoC's PUs
    let placement = j["placement"].as_sequence().expect("placement");
    assert_eq!(placement.len() as u64, j["fused_ops"].as_u64().expect("fused_ops"), "{stdout}");
    let pus: Vec<&str> = j["pus"].as_sequence().expect("pus").iter().filter_map(|p| p.as_str()).collect();
    assert!(placement.iter().all(|p| p["pu"].as_str().is_some_and(|pu| pus.contains(&pu))), "{stdout}");
    for key in ["measured_us", "measured_speedup", "max_abs_err", "measured_on"] {
        assert!(j.get(key).is_none(), "a virtual SoC reported `{key}`: {stdout}");
    }
    assert!(!tmp.path().join("run-report.bin").exists());
    let costs = std::fs::read_to_string(tmp.path().join("cost-table.yaml")).expect("cost table twin");
    assert!(costs.contains("simulated: true") && costs.contains("power: simulated"), "{costs}");
    let o = xtask(&["run", &dir]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("virtual SoC `lunar-lake`"), "{}", stderr(&o));
    let o = xtask(&["pipeline", "--soc", "no-such-soc"]);
    assert!(stderr(&o).contains("unknown SoC `no-such-soc`") && stderr(&o).contains("lunar-lake"), "{}", stderr(&o));
}

/// Cost tables leave as CSV or JSON and come back identical (a PU's failure reason included);
/// a table for another graph, or with a negative figure, is refused.
#[test]
fn cost_tables_round_trip_through_csv_and_json() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a");
    let d = dir.display().to_string();
    // control flow runs only on the virtual SoC's CPU: rows with failure reasons
    let o = xtask(&["pipeline", "zoo:control-if", "--out", &d, "--soc", "lunar-lake"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let twin = || {
        let text = std::fs::read_to_string(dir.join("cost-table.yaml")).expect("twin");
        text.lines().filter(|l| !l.contains("hash")).collect::<Vec<_>>().join("\n")
    };
    let before = twin();
    assert!(before.contains("this model runs control flow on the CPU only"), "{before}");
    for ext in ["csv", "json"] {
        let file = tmp.path().join(format!("costs.{ext}")).display().to_string();
        let o = xtask(&["costs", "export", &d, &file]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = xtask(&["costs", "import", &d, &file]);
        assert!(o.status.success(), "{}", stderr(&o));
        // the old order, FILE DIR, is read for one more release, with a warning
        let o = xtask(&["costs", "import", &file, &d]);
        assert!(o.status.success() && stderr(&o).contains("FILE DIR is the old order"), "{}", stderr(&o));
        assert_eq!(twin(), before, "{ext} round trip changed the table");
    }
    // a negative figure
    let csv = std::fs::read_to_string(tmp.path().join("costs.csv")).expect("csv");
    let row = csv.lines().find(|l| l.starts_with("0,")).expect("a row of op 0");
    let mut cells: Vec<&str> = row.split(',').collect();
    cells[6] = "-1.0";
    let bad = tmp.path().join("bad.csv");
    std::fs::write(&bad, csv.replace(row, &cells.join(","))).expect("write");
    let o = xtask(&["costs", "import", &d, &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("negative, not finite or over an hour"), "{}", stderr(&o));
    // another model's graph
    let other = tmp.path().join("b").display().to_string();
    assert!(xtask(&["import", "zoo:mlp", "--out", &other]).status.success());
    let o = xtask(&["costs", "import", &other, &tmp.path().join("costs.json").display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("it was made for graph"), "{}", stderr(&o));
}

/// Placement constraints on the virtual SoC: a pinned op sits where it was pinned (and says
/// why), an excluded PU is unused, and impossible constraints fail with one line naming the op.
#[test]
fn placement_constraints() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&["pipeline", "--out", &dir, "--soc", "lunar-lake", "--pin", "0=npu", "--exclude-pu", "gpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = std::fs::read_to_string(tmp.path().join("plan.yaml")).expect("plan twin");
    let first = plan.split("  - op: ").nth(1).expect("a step");
    assert!(first.starts_with("0\n") && first.contains("pu: npu") && first.contains("reason: pinned"), "{first}");
    assert!(!plan.contains("pu: gpu\n    phase"), "an op on the excluded gpu:\n{plan}");
    for (args, want) in [
        (vec!["--pin", "0=gpu", "--exclude-pu", "gpu"], "op 0 `conv_3_node` is pinned to gpu, but gpu is excluded"),
        (vec!["--forbid", "0=cpu", "--forbid", "0=gpu", "--forbid", "0=npu"], "op 0 `conv_3_node` can run on no PU"),
        (vec!["--pin", "nope=cpu"], "no op named `nope`"),
        (vec!["--pin", "0=tpu"], "no PU named `tpu` (the SoC has cpu, gpu, npu)"),
        (vec!["--pin", "0"], "--pin 0: expected OP=PU"),
    ] {
        let mut all = vec!["search", dir.as_str()];
        all.extend(args.iter().copied());
        let o = xtask(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.len() == 1 && lines[0].contains(want), "{args:?}: expected `{want}` in {err}");
    }
}

/// `plan-diff` lists the ops that moved between two plans of one model with the predicted
/// change, reads plans as artifacts or YAML twins, and refuses plans of different models.
#[test]
fn plan_diff_shows_what_moved() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    assert!(xtask(&["pipeline", "--out", &dir, "--soc", "lunar-lake"]).status.success());
    let first = tmp.path().join("first.bin");
    std::fs::copy(tmp.path().join("plan.bin"), &first).expect("copy");
    assert!(xtask(&["search", &dir, "--objective", "energy"]).status.success());
    let o = xtask(&["plan-diff", &first.display().to_string(), &tmp.path().join("plan.bin").display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let summary = out.lines().last().expect("summary");
    assert!(summary.contains("ops moved; predicted") && summary.contains("µJ"), "{out}");
    assert!(out.lines().count() > 3, "no op moved between the latency and energy plans:\n{out}");
    // the YAML twin reads as the artifact does
    let o = xtask(&["plan-diff", &first.display().to_string(), &tmp.path().join("plan.yaml").display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let twin = String::from_utf8_lossy(&o.stdout);
    assert_eq!(twin.lines().skip(1).collect::<Vec<_>>(), out.lines().skip(1).collect::<Vec<_>>());
    let other = tmp.path().join("mlp");
    let od = other.display().to_string();
    assert!(xtask(&["pipeline", "zoo:mlp", "--out", &od, "--soc", "lunar-lake"]).status.success());
    let o = xtask(&["plan-diff", &first.display().to_string(), &other.join("plan.bin").display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the plans are for different graphs"), "{}", stderr(&o));
}

/// `annotate DIR -o placed.onnx`: the source model as bident read it (external data embedded),
/// each node carrying its fused op and that op's PU, start and predicted time as planned (the
/// nodes folded at import saying so), the model its SoC, objective and figures; nothing else
/// changed. On attention (folded nodes, a parallel plan over two PUs) and on an MLP whose weights
/// are external data.
#[test]
fn annotate_writes_the_plan_into_the_source_model() {
    use prost::Message;
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = xtask(&["zoo", "mlp", "--out", &tmp.path().display().to_string(), "--external-data"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mlp = tmp.path().join("mlp.onnx").display().to_string();
    for (name, model, extra) in
        [("attention", "zoo:attention", ["--mode", "parallel"]), ("mlp", mlp.as_str(), ["--objective", "energy"])]
    {
        let dir = tmp.path().join(name);
        let d = dir.display().to_string();
        let mut args = vec!["pipeline", model, "--soc", "lunar-lake", "--out", &d];
        args.extend(extra);
        let o = xtask(&args);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let placed = tmp.path().join(format!("{name}-placed.onnx"));
        let o = xtask(&["annotate", &d, "-o", &placed.display().to_string()]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains("planned on lunar-lake (simulated)"), "{name}: {}", stderr(&o));

        let bytes = std::fs::read(&placed).expect("annotated model");
        let mut m = bident_ir::proto::ModelProto::decode(bytes.as_slice()).expect("an ONNX model");
        let planned = bident_driver::Folder::new(&dir).planned().expect("the folder's artifacts");
        let meta = |props: &[bident_ir::proto::StringStringEntryProto], k: &str| {
            props.iter().find(|e| e.key() == k).map(|e| e.value().to_string())
        };
        assert_eq!(meta(&m.metadata_props, "bident.soc").as_deref(), Some("lunar-lake"), "{name}");
        assert_eq!(meta(&m.metadata_props, "bident.figures").as_deref(), Some("simulated"), "{name}");
        assert_eq!(meta(&m.metadata_props, "bident.objective").as_deref(), Some(planned.plan.objective.name()));
        let total: f64 = meta(&m.metadata_props, "bident.predicted_us").expect("total").parse().expect("µs");
        assert!((total - planned.plan.predicted_us).abs() < 1e-3, "{name}: {total}");
        let graph = m.graph.as_mut().expect("a graph");
        let mut folded = 0;
        let mut pus = std::collections::BTreeSet::new();
        for node in &graph.node {
            let op = meta(&node.metadata_props, "bident.fused_op").unwrap_or_else(|| panic!("{name}: {node:?}"));
            if op == bident_ir::NO_FUSED_OP {
                folded += 1;
                continue;
            }
            let index: u32 = op.split(' ').next().and_then(|i| i.parse().ok()).expect("`<index> <name> (<kind>)`");
            let step = planned.plan.steps.iter().find(|s| s.op == index).expect("a step");
            assert_eq!(meta(&node.metadata_props, "bident.pu").as_deref(), Some(step.pu.as_str()), "{name}: {op}");
            let us: f64 = meta(&node.metadata_props, "bident.predicted_us").expect("time").parse().expect("µs");
            assert!((us - (step.finish_us - step.start_us)).abs() < 1e-3, "{name}: {op}: {us}");
            assert!(meta(&node.metadata_props, "bident.reason").is_some(), "{name}: {op}");
            pus.insert(step.pu.clone());
        }
        assert_eq!(folded, planned.g.source.folded_nodes, "{name}: the nodes in no fused op are the folded ones");
        if name == "attention" {
            assert!(folded > 0 && pus.len() > 1, "attention: {folded} folded, PUs {pus:?}");
        }
        // with the metadata removed, the model bident read: the source, its weights embedded
        graph.node.iter_mut().for_each(|n| n.metadata_props.clear());
        m.metadata_props.clear();
        let source = bident_ir::proto::ModelProto::decode(planned.g.reference.0.clone()).expect("the reference");
        assert_eq!(m, source, "{name}: the annotation changed more than metadata");
        let built = bident_zoo::build(name, 0).expect("zoo model");
        let weights = |m: &bident_ir::proto::ModelProto| -> Vec<(String, Vec<u8>)> {
            let g = m.graph.as_ref().expect("a graph");
            g.initializer
                .iter()
                .map(|t| (t.name().to_string(), t.raw_data.clone().unwrap_or_default().to_vec()))
                .collect()
        };
        assert!(source.graph.iter().flat_map(|g| &g.initializer).all(|t| t.external_data.is_empty()), "{name}");
        assert_eq!(weights(&source), weights(&built), "{name}: the weights are the model's, embedded");
    }
}

/// `--with MODEL2`: the concurrent plan of two models on the virtual SoC, never slower than
/// running them one after the other on their best single PUs; the artifact reads back.
#[test]
fn concurrent_plan_of_two_models() {
    // every run in a folder of its own: tests run at once, and a folder has one writer
    let pairs = tempfile::tempdir().expect("tempdir");
    for extra in [vec![], vec!["--aligned"]] {
        let second = if extra.is_empty() { "zoo:mlp" } else { "zoo:attention" };
        let out = pairs.path().join(extra.len().to_string()).display().to_string();
        let mut args = vec!["pipeline", "zoo:attention", "--with", second, "--soc", "lunar-lake", "--json", "--out"];
        args.push(&out);
        args.extend(extra.iter().copied());
        let o = xtask(&args);
        let (stdout, j) = succeeded_json(&o);
        assert_eq!(j["mode"].as_str(), Some("concurrent"), "{stdout}");
        assert_eq!(j["simulated"].as_bool(), Some(true), "{stdout}");
        let speedup = j["predicted_speedup"].as_f64().expect("speedup");
        assert!(speedup >= 1.0 - 1e-9, "{extra:?}: slower than the serial baseline: {stdout}");
        assert!(j.get("measured_us").is_none(), "{stdout}");
    }
    // measured on `local`, both engines at every precision: the outputs are checked against
    // an exact f32 reference even where a model's best single PU computes in bf16
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&[
        "pipeline",
        "zoo:example",
        "--with",
        "zoo:mlp",
        "--soc",
        "local",
        "--runs",
        "3",
        "--profile-runs",
        "3",
        "--out",
        &dir,
        "--json",
    ]);
    let (stdout, j) = succeeded_json(&o);
    assert_eq!((j["mode"].as_str(), j["simulated"].as_bool()), (Some("concurrent"), Some(false)), "{stdout}");
    assert!(j["measured_us"].as_f64().is_some_and(|us| us > 0.0), "{stdout}");
    assert!(j["tolerance"].as_str().is_some_and(|t| t.contains("of the f32 whole model")), "{stdout}");
    // ONNX Runtime's default computes in f32: next to an f32 reference it is all but exact
    let ort = j["backend_default_errors"]["onnxruntime"].as_f64().expect("ONNX Runtime's default's error");
    assert!(ort <= 1e-4, "{stdout}");
    let plan = pairs.path().join("0/concurrent-plan.bin");
    let o = xtask(&["show", &plan.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("kind: concurrent-plan"));
}

/// `--objective pareto`: a front of non-dominated plans (pareto.yaml), the fastest one the plan.
#[test]
fn pareto_front() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&["pipeline", "--out", &dir, "--soc", "lunar-lake", "--objective", "pareto", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let front: Vec<serde_norway::Value> =
        serde_norway::from_str(&std::fs::read_to_string(tmp.path().join("pareto.yaml")).expect("pareto.yaml"))
            .expect("a YAML list");
    assert!(front.len() >= 2, "the example trades latency for energy on lunar-lake: {front:?}");
    let point = |v: &serde_norway::Value| {
        (v["predicted_us"].as_f64().expect("us"), v["predicted_energy_uj"].as_f64().expect("uj"))
    };
    for w in front.windows(2) {
        let ((t0, e0), (t1, e1)) = (point(&w[0]), point(&w[1]));
        assert!(t0 <= t1 && e0 > e1, "not a front, sorted by latency: {front:?}");
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    let j: serde_norway::Value = last_json(&stdout);
    assert_eq!(j["predicted_us"].as_f64(), Some(point(&front[0]).0), "{stdout}");
}

/// On the `cores` SoC a parallel plan runs for real: the JSON carries the measurement beside
/// the prediction and the backend's own default, and the trace and Gantt chart are written next
/// to the report.
#[test]
fn plans_run_for_real_on_the_cores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().display().to_string();
    let o = xtask(&[
        "pipeline",
        "zoo:attention",
        "--out",
        &dir,
        "--soc",
        "cores",
        "--mode",
        "parallel",
        "--runs",
        "5",
        "--profile-runs",
        "3",
        "--json",
    ]);
    let (stdout, j) = succeeded_json(&o);
    for key in ["measured_us", "prediction_error", "measured_backend_default_us", "speedup_vs_backend_default"] {
        assert!(j[key].as_f64().is_some_and(|v| v.is_finite() && v >= 0.0), "{key}: {stdout}");
    }
    assert_eq!(j["simulated"].as_bool(), Some(false));
    for file in ["gantt.svg", "trace.json", "run-report.yaml"] {
        assert!(tmp.path().join(file).is_file(), "{file} missing");
    }
}

/// Two models at once on the `cores` SoC, run for real: the concurrent plan's measurement, and
/// its Gantt chart in the pair's folder.
#[test]
fn two_models_run_for_real_on_the_cores() {
    let pair = tempfile::tempdir().expect("tempdir");
    let o = xtask(&[
        "pipeline",
        "zoo:example",
        "--with",
        "zoo:mlp",
        "--soc",
        "cores",
        "--runs",
        "5",
        "--profile-runs",
        "3",
        "--out",
        &pair.path().display().to_string(),
        "--json",
    ]);
    let (stdout, j) = succeeded_json(&o);
    assert_eq!(j["mode"].as_str(), Some("concurrent"), "{stdout}");
    assert!(j["measured_us"].as_f64().is_some_and(|v| v > 0.0), "{stdout}");
    assert!(pair.path().join("gantt.svg").is_file());
}

/// `eval` on the virtual SoC: the report has all 19 configurations and 190 pairs, every heading
/// says SIMULATED, and the three charts are written.
#[test]
fn eval_reproduces_the_protocol_on_the_virtual_soc() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().display().to_string();
    let o = xtask(&["eval", "--soc", "lunar-lake", "--size", "tiny", "--out", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = std::fs::read_to_string(tmp.path().join("report.md")).expect("report.md");
    let table2 = report.split("## Table 3").next().expect("table 2");
    assert_eq!(table2.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| config")).count(), 19, "{report}");
    assert!(report.contains("190 pairs"), "{report}");
    assert!(report.lines().filter(|l| l.starts_with("## ")).all(|l| l.contains("[SIMULATED]")), "{report}");
    assert!(!report.contains("measured latency plan"), "a virtual SoC has no measured column");
    for chart in ["heatmap.svg", "energy.svg", "matmul.svg"] {
        let svg = std::fs::read_to_string(tmp.path().join(chart)).expect(chart);
        assert!(svg.starts_with("<svg") && svg.contains("SIMULATED"), "{chart}");
    }
}

/// Plans from anywhere: a Python script places the example's ops from the exported cost table,
/// `plan import` prices and checks the placement, `run` executes it; the plan's own YAML twin
/// imports back unchanged, and a placement on a PU that does not exist fails with one line.
#[test]
fn a_plan_written_by_a_python_script_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("example");
    let d = dir.display().to_string();
    let o = xtask(&[
        "pipeline",
        "--out",
        &d,
        "--soc",
        "cores",
        "--backends",
        "openvino",
        "--profile-runs",
        "3",
        "--fixed-runs",
        "--runs",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let costs = tmp.path().join("costs.json");
    assert!(xtask(&["costs", "export", &d, &costs.display().to_string()]).status.success());
    let placement = tmp.path().join("placement.json");
    let st = Command::new("python3")
        .arg(root().join("tests/data/plan-import/cheapest.py"))
        .args([&costs, &placement])
        .status()
        .expect("python3 runs");
    assert!(st.success());
    let o = xtask(&["plan", "import", &d, &placement.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("search `placement`"), "{}", stderr(&o));
    let o = xtask(&["run", &d, "--runs", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("measured ") && out.contains("max abs error"), "{out}");
    // the twin of a whole plan reads back as the same plan
    let twin = dir.join("plan.yaml");
    let before = std::fs::read(dir.join("plan.bin")).expect("plan");
    let o = xtask(&["plan", "import", &d, &twin.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("plan.bin")).expect("plan"), before);
    // a PU the SoC does not have
    let text = std::fs::read_to_string(&placement).expect("placement");
    let bad = tmp.path().join("bad.json");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    if let Some(pu) = json["placement"].as_object_mut().and_then(|m| m.values_mut().next()) {
        *pu = "tpu0".into();
    }
    std::fs::write(&bad, json.to_string()).expect("write");
    let o = xtask(&["plan", "import", &d, &bad.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.lines().count() == 1 && err.contains("no PU named `tpu"), "{err}");
}

/// Passes are chosen by name from the driver's registry: `--search greedy` plans with the
/// paper's baseline and the plan names it; `passes` lists every pass; an unknown name is one
/// line listing the known; `--partition chain` turns parallel branches off. (A search from
/// outside bident, in a binary of its own: `examples/custom-search/tests/binary.rs`.)
#[test]
fn passes_are_chosen_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().display().to_string();
    let o = xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake", "--search", "greedy", "--json"]);
    let (stdout, j) = succeeded_json(&o);
    assert_eq!(j["search"].as_str(), Some("greedy"), "{stdout}");
    let o = xtask(&["passes"]);
    let listed = String::from_utf8_lossy(&o.stdout);
    for name in ["phases", "chain", "bident", "greedy"] {
        assert!(listed.contains(name), "{name} not listed:\n{listed}");
    }
    let o = xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake", "--search", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("no search named `nope` (registered: bident, greedy)"), "{err}");
    let o = xtask(&["pipeline", "--out", &d, "--soc", "lunar-lake", "--partition", "chain", "--mode", "parallel"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 phases, 0 with parallel branches (chain)"), "{}", stderr(&o));
}

/// Architecture invariant: the search and the partition link no ONNX, protobuf or engine code
/// (their graph and cost-table types come from bident-ir and bident-profile without their
/// `onnx` and `measure` features).
#[test]
fn search_and_partition_link_no_onnx_nor_engines() {
    for krate in ["bident-search", "bident-partition"] {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let o = Command::new(cargo)
            .args(["tree", "--offline", "-p", krate, "-e", "normal", "--prefix", "none"])
            .current_dir(root())
            .output()
            .expect("cargo tree runs");
        assert!(o.status.success(), "{}", stderr(&o));
        let tree = String::from_utf8_lossy(&o.stdout);
        assert!(tree.contains("bident-ir") && tree.contains("serde"), "{tree}");
        for banned in ["prost", "bident-onnx", "openvino", "ort ", "ort-sys", "libloading", "roxmltree"] {
            assert!(!tree.lines().any(|l| l.starts_with(banned)), "{krate} links {banned}:\n{tree}");
        }
    }
}

/// Architecture invariant: the runtime runs plans and never makes one: it depends on neither
/// the partition nor the profile (a server re-plans through the driver's `Planner`).
#[test]
fn the_runtime_depends_on_no_partition_nor_profile() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = Command::new(cargo)
        .args(["tree", "--offline", "-p", "bident-runtime", "-e", "normal", "--depth", "1", "--prefix", "none"])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let tree = String::from_utf8_lossy(&o.stdout);
    assert!(tree.contains("bident-search") && tree.contains("bident-backend"), "{tree}");
    for banned in ["bident-partition", "bident-profile"] {
        assert!(!tree.lines().any(|l| l.starts_with(banned)), "bident-runtime depends on {banned}:\n{tree}");
    }
}

/// `cargo xtask explain`: every op of the plan in execution order with its PU, predicted times
/// and reason (a pinned op says `pinned`), what each reason used means, and the same placement
/// as JSON; every reason it can give is documented in the README.
#[test]
fn explain_says_where_each_op_went_and_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = recorded_example(tmp.path());
    let o = xtask(&["search", &dir, "--pin", "conv_3_node=core1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = xtask(&["explain", &dir, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let pinned = stdout.lines().find(|l| l.contains(" conv_3_node ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(pinned.contains(" core1 ") && pinned.contains(" pinned "), "{pinned}");
    assert!(stdout.lines().any(|l| l.contains(" pinned ") && l.contains("a --pin put it there")), "{stdout}");
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("JSON")).expect("JSON");
    let ops = j["ops"].as_array().expect("ops");
    assert_eq!(ops.len(), 10, "{stdout}");
    for op in ops {
        let known = bident_search::Reason::ALL.map(|r| r.name());
        assert!(op["reason"].as_str().is_some_and(|r| known.contains(&r)), "{op}");
        assert!(op["alone_us"][op["pu"].as_str().expect("pu")].as_f64().is_some(), "{op}");
    }
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    for r in bident_search::Reason::ALL {
        assert!(readme.contains(&format!("`{}`", r.name())), "`{}` is not documented in the README", r.name());
    }
    let o = xtask(&["explain", &tmp.path().join("nothing").display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}
