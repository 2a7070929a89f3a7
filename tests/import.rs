//! Import cases (`tests/data/import/*.yaml`): the fused graph and its phases as a snapshot, and
//! the extraction round trip: every fused op extracted, compiled and run on OpenVINO in order
//! must reproduce the whole model's outputs.

use std::collections::HashMap;

use bident_backend::{Backend, SocSpec};
use bident_tensor::HostTensor;
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
        let inputs: Vec<HostTensor> = g
            .inputs
            .iter()
            .enumerate()
            .map(|(k, &t)| HostTensor::seeded(g.tensor(t).dtype, g.tensor(t).shape.clone(), k as u64))
            .collect();
        let mut whole = be.compile(&g.reference_model().expect("reference"), &pu).expect("whole model compiles");
        let want = whole.run(&inputs.iter().collect::<Vec<_>>()).expect("whole model runs");
        let ex = bident_ir::Extractor::new(&g).expect("extractor");
        let mut env: HashMap<u32, HostTensor> = g.inputs.iter().copied().zip(inputs).collect();
        for (i, op) in g.ops.iter().enumerate() {
            let bytes = ex.extract(i as u32).expect("extract");
            let mut exe = be.compile(&bytes, &pu).unwrap_or_else(|e| panic!("{name}: op {i} {}: {e}", op.kind));
            let ins: Vec<&HostTensor> = op.inputs.iter().map(|t| &env[t]).collect();
            let outs = exe.run(&ins).unwrap_or_else(|e| panic!("{name}: op {i} {}: {e}", op.kind));
            assert_eq!(outs.len(), op.outputs.len(), "{name}: op {i}");
            for (&t, o) in op.outputs.iter().zip(outs) {
                assert_eq!(o.shape, g.tensor(t).shape, "{name}: op {i} output shape vs inferred");
                env.insert(t, o);
            }
        }
        for (k, &t) in g.outputs.iter().enumerate() {
            let err = env[&t].max_abs_diff(&want[k]).expect("comparable outputs");
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
        if let Ok(g) = bident_ir::import_bytes(&bytes, "fuzz.onnx", None, &Default::default()) {
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
