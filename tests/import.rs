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

/// Inputs the fuzzer (`cargo xtask fuzz`) once crashed the importer on: each must now import or
/// fail with an error, and whatever imports must verify and extract.
#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = bident_tests::root().join("tests/data/fuzz-regressions");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("fuzz-regressions") {
        let path = e.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        // `.ir` inputs are OpenVINO IR: the XML, a zero byte, the weights (as `fuzz/ovir` reads them)
        let imported = if path.extension().is_some_and(|x| x == "ir") {
            let split = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let xml = String::from_utf8_lossy(&bytes[..split]);
            let bin = bytes::Bytes::copy_from_slice(bytes.get(split + 1..).unwrap_or(&[]));
            bident_ir::import_openvino_ir_bytes(&xml, bin, "fuzz.xml", &Default::default())
        } else {
            bident_ir::import_bytes(&bytes, "fuzz.onnx", None, &Default::default())
        };
        if let Ok(g) = imported {
            bident_ir::verify(&g).expect("verifies");
            let ex = bident_ir::Extractor::new(&g).expect("extractor");
            for op in 0..g.ops.len() as u32 {
                ex.extract(op).unwrap_or_else(|e| panic!("{}: op {op}: {e}", path.display()));
            }
        }
        n += 1;
    }
    assert!(n > 0, "no cases in {}", dir.display());
}
