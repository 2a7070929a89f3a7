//! bident checked against references outside it: third-party models against OpenVINO's record
//! of what it fused, the ONNX backend node tests, the importer's fuzz corpus through an engine,
//! OpenVINO IR against its ONNX source, and the zoo's families against the onnx reference
//! evaluator.

use crate::common::{last_json, root, stderr, succeeded_json, xtask};

/// A third-party model of `tests/data/thirdparty` (fetched from PyPI on first use) runs end to
/// end, the plan's outputs match the whole model, and at least `share` of the layers OpenVINO
/// records having fused are reproduced by the backend fusion. CI runs one of each shape of
/// problem (the tests below); `cargo xtask thirdparty` runs all eight.
fn thirdparty_runs_end_to_end(case: &str, share: f64) {
    let o = xtask(&["thirdparty", "--runs", "2", "--profile-runs", "2", "--json", "--only", case]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let rows: serde_norway::Value = last_json(&stdout);
    let rows = rows.as_sequence().expect("array");
    assert_eq!(rows.iter().filter_map(|r| r["case"].as_str()).collect::<Vec<_>>(), [case], "{stdout}");
    let r = &rows[0];
    let err = r["max_abs_err"].as_f64().expect("max_abs_err");
    // every run was checked against the f32 whole model within its precision's tolerance
    // (relative to each output's scale); a plan all in f32 is also close in absolute terms
    let tolerance = r["tolerance"].as_str().expect("tolerance");
    match r["precisions"].as_sequence().expect("precisions").iter().find(|p| p.as_str() != Some("f32")) {
        None => assert!(err <= 1e-3, "{case}: max abs err {err}"),
        Some(p) => assert!(tolerance.contains(p.as_str().unwrap_or("?")), "{case}: {p:?} not in `{tolerance}`"),
    }
    // backend fusion by default: both groupings are reported
    let (rules, backend) = (r["rule_ops"].as_u64().expect("rule_ops"), r["backend_ops"].as_u64().expect("ops"));
    assert!(backend >= 10 && rules >= 10, "{case}: {backend} backend ops, {rules} by rules");
    assert_eq!(r["fused_ops"].as_u64(), Some(backend), "{case}");
    // the derivation against OpenVINO's own record of what it fused
    let (done, of) = (r["record_reproduced"].as_u64().expect("record"), r["record_layers"].as_u64().expect("layers"));
    assert!(done as f64 >= share * of as f64, "{case}: only {done} of {of} recorded layers reproduced");
}

/// A conv net: the OCR direction classifier (85 of its 85 recorded layers reproduced here).
#[test]
fn a_thirdparty_conv_net_runs_end_to_end() {
    thirdparty_runs_end_to_end("ocr-classifier", 0.9);
}

/// A recurrent model with control flow and a pinned input value: Silero VAD's LSTM (12 of its
/// 15 recorded layers reproduced here).
#[test]
fn a_thirdparty_recurrent_model_runs_end_to_end() {
    thirdparty_runs_end_to_end("silero-vad-lstm", 0.75);
}

/// The fixed CI subset of the ONNX backend node tests, on each backend: every test the backend
/// passes whole (all but those the subset notes as `# <backend> fails whole`) must also pass
/// through bident's path (import, extraction, op-by-op execution on a PU of that backend).
#[test]
fn conformance_subset_keeps_parity() {
    let subset = root().join("tests/data/conformance/subset.txt");
    let text = std::fs::read_to_string(&subset).expect("subset");
    let listed: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    for backend in ["openvino", "onnxruntime"] {
        let fails_whole = listed.iter().filter(|l| l.contains(&format!("# {backend} fails whole:"))).count();
        let o = xtask(&["conformance", "--backend", backend, "--subset", &subset.display().to_string(), "--json"]);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let j: serde_norway::Value = last_json(&stdout);
        assert_eq!(j["backend"].as_str(), Some(backend), "{stdout}");
        assert_eq!(j["precision"].as_str(), Some("f32"), "{stdout}");
        assert_eq!(j["total"].as_u64(), Some(listed.len() as u64), "{stdout}");
        assert_eq!(
            j["whole_pass"].as_u64(),
            Some((listed.len() - fails_whole) as u64),
            "{backend} changed? (the subset notes {fails_whole} tests it fails whole)\n{stdout}"
        );
        assert_eq!(j["parity"].as_f64(), Some(1.0), "{backend}: {stdout}");
    }
}

/// The importer's fuzz corpus (seeded: the zoo, the node tests when generated, the kept
/// regressions) through ONNX Runtime's compile path: every entry bident imports, and every fused
/// op of it, compiles or is refused with an error; nothing panics or crashes.
#[test]
fn fuzz_corpus_replays_through_onnxruntime() {
    let o = xtask(&["fuzz", "--replay", "--backend", "onnxruntime", "--json"]);
    let (stdout, j) = succeeded_json(&o);
    let n = |k: &str| j[k].as_u64().unwrap_or_else(|| panic!("{k}: {stdout}"));
    assert_eq!(j["backend"].as_str(), Some("onnxruntime"), "{stdout}");
    assert_eq!(n("failures"), 0, "{stdout}");
    // an engine sees only what bident imports
    assert_eq!(n("whole_compiled") + n("whole_refused"), n("imported"), "{stdout}");
    assert_eq!(n("imported") + n("import_refused"), n("entries"), "{stdout}");
    assert_eq!(n("ops_compiled") + n("ops_refused"), n("ops"), "{stdout}");
    // the zoo's good models import and compile; its broken ones are refused
    assert!(n("imported") >= 10 && n("import_refused") >= 10, "{stdout}");
    assert!(n("ops_compiled") >= 50 && n("whole_compiled") >= 10, "{stdout}");
}

/// OpenVINO IR import: cases of `tests/data/ovir` (converted from ONNX with the pinned ovc) run
/// op by op to the same outputs as their ONNX source run whole; where ovc leaves the graph as it
/// was, the fused graphs have the same size. CI runs one case per shape of problem (plain
/// graphs, a recurrent cell ovc unrolls, an int8 decode layer ovc rewrites); `cargo xtask
/// ovir` runs all fifteen.
#[test]
fn openvino_ir_matches_its_onnx_source() {
    let only = ["example", "llama-tiny-int8", "mlp", "recurrent"];
    let mut args = vec!["ovir", "--json"];
    args.extend(only.iter().flat_map(|c| ["--only", c]));
    let o = xtask(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let rows: serde_norway::Value = last_json(&stdout);
    let rows = rows.as_sequence().expect("array");
    let cases: Vec<&str> = rows.iter().filter_map(|r| r["case"].as_str()).collect();
    assert_eq!(cases, only, "{stdout}");
    for r in rows {
        let case = r["case"].as_str().unwrap_or("?");
        let (err, tol) = (r["max_abs_err"].as_f64().expect("max_abs_err"), r["tolerance"].as_f64().expect("tolerance"));
        assert!(err <= tol, "{case}: max abs err {err}, tolerance {tol}");
        if matches!(case, "example" | "mlp") {
            assert_eq!(r["ir_fused_ops"], r["onnx_fused_ops"], "{case}: {stdout}");
            assert_eq!(r["ir_backend_ops"], r["onnx_backend_ops"], "{case}: {stdout}");
        }
    }
}

/// The paper's ten families, tiny: bident's path (every fused op alone) agrees with the onnx
/// reference evaluator on every one (OpenVINO running a model whole may not, on some CPUs:
/// reported by zoo-check). CI checks each family once, the precisions taken in turn so each
/// is checked on three or four families; `cargo xtask zoo-check` checks all thirty.
#[test]
fn zoo_families_match_the_reference_evaluator() {
    let models = [
        "resnet50-tiny-int8",
        "vit-tiny-fp16",
        "llama-tiny-fp32",
        "mamba-tiny-int8",
        "hyena-tiny-fp16",
        "kan-tiny-fp32",
        "snn-vgg9-tiny-int8",
        "bitnet-tiny-fp16",
        "lavish-tiny-fp32",
        "pi05-tiny-int8",
    ];
    let mut args = vec!["zoo-check"];
    args.extend(models);
    let o = xtask(&args);
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("-tiny-") && !l.starts_with("OpenVINO")).collect();
    assert_eq!(rows.len(), models.len(), "{stdout}");
    // the last column, bident's path: `ok (<difference>)`
    assert!(rows.iter().all(|r| r.split_whitespace().rev().nth(1) == Some("ok")), "{stdout}");
}
