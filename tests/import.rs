//! Import cases (`tests/data/import/*.yaml`): the fused graph and its phases as a snapshot, and
//! the extraction round trip: every fused op extracted, compiled and run on OpenVINO in order
//! must reproduce the whole model's outputs.

use bident_backend::{Backend, SocSpec};
use bident_tests::{ModelCase, backend, cases, import, read_case, summary};

#[test]
fn import_snapshots() {
    for (name, path) in cases("import") {
        let case: ModelCase = read_case(&path);
        let g = import(&case, &path);
        let p = bident_partition::partition(&g).expect("partition");
        insta::assert_yaml_snapshot!(format!("import-{name}"), summary(&g, &p));
    }
}

#[test]
fn extracted_ops_reproduce_the_whole_model() {
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    for (name, path) in cases("import") {
        let case: ModelCase = read_case(&path);
        let g = import(&case, &path);
        let inputs = g.example_inputs(0);
        let mut whole = be.compile(&g.reference_model().expect("reference"), &pu).expect("whole model compiles");
        let want = whole.run(&inputs.iter().collect::<Vec<_>>()).expect("whole model runs");
        let got =
            bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, inputs).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            let err = got.max_abs_diff(want).expect("comparable outputs");
            assert!(err <= 1e-4, "{name}: output {k} differs by {err}");
        }
    }
}

/// Inputs the fuzzer (`cargo xtask fuzz`) once crashed the importer (or an engine) on: each must
/// now import or fail with an error, and whatever imports must verify and extract. What imports
/// also goes through ONNX Runtime's compile path on a PU of its own (the entry as given when it is
/// ONNX, and every extracted op): compiled or refused with a `BackendError`, never a crash. A
/// model bident refuses never reaches an engine (`einsum-equation-hangs-onnxruntime.onnx`: ONNX
/// Runtime 1.32.0 never returns from creating a session for it). What each entry gives is a
/// snapshot.
#[test]
fn fuzz_regressions_do_not_panic() {
    let ort = bident_tests::onnxruntime();
    let pu = SocSpec::preset("local", ort.as_ref()).expect("local SoC").pus.remove(0);
    assert_eq!(pu.backend, "onnxruntime");
    let compile = |model: &[u8]| match ort.compile(model, &pu) {
        Ok(_) => "compiles".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    let dir = bident_tests::root().join("tests/data/fuzz-regressions");
    let mut entries: Vec<_> =
        std::fs::read_dir(&dir).expect("fuzz-regressions").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    let mut outcomes = std::collections::BTreeMap::new();
    for path in &entries {
        let bytes = std::fs::read(path).expect("read");
        let mut row = std::collections::BTreeMap::new();
        // `.ir` inputs are OpenVINO IR: the XML, a zero byte, the weights (as `fuzz/ovir` reads them)
        let imported = if path.extension().is_some_and(|x| x == "ir") {
            let split = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let xml = String::from_utf8_lossy(&bytes[..split]);
            let bin = bytes::Bytes::copy_from_slice(bytes.get(split + 1..).unwrap_or(&[]));
            bident_ir::import_openvino_ir_bytes(&xml, bin, "fuzz.xml", &Default::default())
        } else {
            let g = bident_ir::import_bytes(&bytes, "fuzz.onnx", None, &Default::default());
            if g.is_ok() {
                row.insert("onnxruntime_whole", compile(&bytes));
            }
            g
        };
        match imported {
            Ok(g) => {
                bident_ir::verify(&g).expect("verifies");
                let ex = bident_ir::Extractor::new(&g).expect("extractor");
                let mut compiled = 0;
                for op in 0..g.ops.len() as u32 {
                    let model = ex.extract(op).unwrap_or_else(|e| panic!("{}: op {op}: {e}", path.display()));
                    compiled += (compile(&model) == "compiles") as usize;
                }
                row.insert("import", format!("{} fused ops", g.ops.len()));
                row.insert("onnxruntime_ops", format!("{compiled} of {} compile", g.ops.len()));
            }
            Err(e) => {
                row.insert("import", format!("refused: {e}"));
            }
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        outcomes.insert(name, row);
    }
    assert!(!outcomes.is_empty(), "no cases in {}", dir.display());
    insta::assert_yaml_snapshot!("fuzz-regressions", outcomes);
}
