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

/// OpenVINO's integer `Divide` rounds down (`m_pythondiv`, on by default); the IR import must
/// not turn it into ONNX's truncating `Div`.
#[test]
fn openvino_ir_integer_divide_rounds_down() {
    let port = |id: u32, names: &str| format!(r#"<port id="{id}" precision="I32"{names}><dim>6</dim></port>"#);
    let param = |id: u32, name: &str| {
        format!(
            r#"<layer id="{id}" name="{name}" type="Parameter" version="opset1"><data shape="6" element_type="i32" /><output>{}</output></layer>"#,
            port(0, &format!(r#" names="{name}""#))
        )
    };
    let xml = format!(
        r#"<?xml version="1.0"?><net name="div" version="11"><layers>{}{}
        <layer id="2" name="q" type="Divide" version="opset1"><data auto_broadcast="numpy" m_pythondiv="true" /><input>{}{}</input><output>{}</output></layer>
        <layer id="3" name="q/sink_port_0" type="Result" version="opset1" output_names="q"><input>{}</input></layer>
        </layers><edges><edge from-layer="0" from-port="0" to-layer="2" to-port="0" /><edge from-layer="1" from-port="0" to-layer="2" to-port="1" />
        <edge from-layer="2" from-port="2" to-layer="3" to-port="0" /></edges></net>"#,
        param(0, "a"),
        param(1, "b"),
        port(0, ""),
        port(1, ""),
        port(2, r#" names="q""#),
        port(0, "")
    );
    let g =
        bident_ir::import_openvino_ir_bytes(&xml, Default::default(), "div.xml", &Default::default()).expect("imports");
    let i32s = |name: &str, v: &[i32]| {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        bident_tensor::HostTensor::new(name, bident_tensor::DType::I32, vec![6], data).expect("tensor")
    };
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    let inputs = vec![i32s("a", &[7, -7, 7, -7, 6, -6]), i32s("b", &[2, 2, -2, -2, 3, 3])];
    let got = bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, inputs).expect("runs");
    assert_eq!(got[0], i32s("q", &[3, -4, -4, 3, 2, -2]));
}

/// OpenVINO's FakeQuantize, both ways the IR import writes it: a 256-level grid as
/// QuantizeLinear + DequantizeLinear, any other grid as the formula.
#[test]
fn openvino_ir_fake_quantize() {
    let f32s = |name: &str, v: &[f32]| {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        bident_tensor::HostTensor::new(name, bident_tensor::DType::F32, vec![v.len() as u64], data).expect("tensor")
    };
    let port = |id: u32, names: &str, dims: &str| format!(r#"<port id="{id}" precision="FP32"{names}>{dims}</port>"#);
    let six = "<dim>6</dim>";
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    // (levels, [input_low, input_high, output_low, output_high], x, expected)
    type Case = (u32, [f32; 4], [f32; 6], [f32; 6]);
    let cases: [Case; 2] = [
        // not a uint8 grid: the formula (x <= 0.5 -> -1, x > 2 -> 1, else 4 levels between)
        (4, [0.5, 2.0, -1.0, 1.0], [0.0, 0.5, 0.9, 1.3, 1.8, 2.5], [-1.0, -1.0, -1.0 / 3.0, 1.0 / 3.0, 1.0, 1.0]),
        // scale 0.01, zero point 128: QuantizeLinear + DequantizeLinear
        (
            256,
            [-1.28, 1.27, -1.28, 1.27],
            [0.004, -0.006, 0.5, 2.0, -2.0, 0.0149],
            [0.0, -0.01, 0.5, 1.27, -1.28, 0.01],
        ),
    ];
    for (levels, range, x, want) in cases {
        let consts: String = (0..4)
            .map(|k| {
                format!(
                    r#"<layer id="{}" name="c{k}" type="Const" version="opset1"><data element_type="f32" shape="" offset="{}" size="4" /><output>{}</output></layer>"#,
                    k + 1,
                    4 * k,
                    port(0, "", "")
                )
            })
            .collect();
        let edges: String =
            (1..5).map(|k| format!(r#"<edge from-layer="{k}" from-port="0" to-layer="5" to-port="{k}" />"#)).collect();
        let xml = format!(
            r#"<?xml version="1.0"?><net name="fq" version="11"><layers>
            <layer id="0" name="x" type="Parameter" version="opset1"><data shape="6" element_type="f32" /><output>{}</output></layer>{consts}
            <layer id="5" name="y" type="FakeQuantize" version="opset1"><data levels="{levels}" auto_broadcast="numpy" /><input>{}{}{}{}{}</input><output>{}</output></layer>
            <layer id="6" name="y/sink_port_0" type="Result" version="opset1" output_names="y"><input>{}</input></layer>
            </layers><edges><edge from-layer="0" from-port="0" to-layer="5" to-port="0" />{edges}<edge from-layer="5" from-port="5" to-layer="6" to-port="0" /></edges></net>"#,
            port(0, r#" names="x""#, six),
            port(0, "", six),
            port(1, "", ""),
            port(2, "", ""),
            port(3, "", ""),
            port(4, "", ""),
            port(5, r#" names="y""#, six),
            port(0, "", six),
        );
        let bin: Vec<u8> = range.iter().flat_map(|v| v.to_le_bytes()).collect();
        let g = bident_ir::import_openvino_ir_bytes(&xml, bin.into(), "fq.xml", &Default::default()).expect("imports");
        let kinds: Vec<&str> = g.ops.iter().map(|o| o.kind.as_str()).collect();
        let form = if levels == 256 { "QuantizeLinear" } else { "Round" };
        assert!(kinds.iter().any(|k| k.contains(form)), "levels {levels}: {kinds:?}");
        let got = bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, vec![f32s("x", &x)]).expect("runs");
        let err = got[0].max_abs_diff(&f32s("y", &want)).expect("comparable");
        let got: Vec<f64> = (0..got[0].numel()).map(|k| got[0].get_f64(k)).collect();
        assert!(err < 1e-6, "levels {levels}: {got:?} vs {want:?}");
    }
}

/// A causal ScaledDotProductAttention imported from OpenVINO IR gives what OpenVINO computes
/// from the same IR (which it reads directly: the IR has no weights).
#[test]
fn openvino_ir_causal_attention() {
    let port = |id: u32, names: &str, len: u32| {
        format!(r#"<port id="{id}" precision="FP32"{names}><dim>1</dim><dim>{len}</dim><dim>4</dim></port>"#)
    };
    let param = |id: u32, name: &str, len: u32| {
        format!(
            r#"<layer id="{id}" name="{name}" type="Parameter" version="opset1"><data shape="1,{len},4" element_type="f32" /><output>{}</output></layer>"#,
            port(0, &format!(r#" names="{name}""#), len)
        )
    };
    let xml = format!(
        r#"<?xml version="1.0"?><net name="sdpa" version="11"><layers>{}{}{}
        <layer id="3" name="y" type="ScaledDotProductAttention" version="opset13"><data causal="true" /><input>{}{}{}</input><output>{}</output></layer>
        <layer id="4" name="y/sink_port_0" type="Result" version="opset1" output_names="y"><input>{}</input></layer>
        </layers><edges><edge from-layer="0" from-port="0" to-layer="3" to-port="0" /><edge from-layer="1" from-port="0" to-layer="3" to-port="1" />
        <edge from-layer="2" from-port="0" to-layer="3" to-port="2" /><edge from-layer="3" from-port="3" to-layer="4" to-port="0" /></edges></net>"#,
        param(0, "q", 3),
        param(1, "k", 5),
        param(2, "v", 5),
        port(0, "", 3),
        port(1, "", 5),
        port(2, "", 5),
        port(3, r#" names="y""#, 3),
        port(0, "", 3)
    );
    let g = bident_ir::import_openvino_ir_bytes(&xml, Default::default(), "sdpa.xml", &Default::default())
        .expect("imports");
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    let inputs = g.example_inputs(3);
    let mut whole = be.compile(xml.as_bytes(), &pu).expect("OpenVINO reads the IR");
    let want = whole.run(&inputs.iter().collect::<Vec<_>>()).expect("runs whole");
    let got = bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, inputs).expect("runs");
    let err = got[0].max_abs_diff(&want[0]).expect("comparable");
    assert!(err < 1e-5, "max abs err {err}");
}

/// StridedSlice's masks from OpenVINO IR (`x[..., newaxis, -1]` and `x[1, ::2, newaxis]` on a
/// [2, 3, 4] tensor of 0..23).
#[test]
fn openvino_ir_strided_slice_masks() {
    let dims = |d: &[usize]| d.iter().map(|d| format!("<dim>{d}</dim>")).collect::<String>();
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    // (begin, end, strides, masks (begin, end, new_axis, shrink, ellipsis), output dims, output values)
    type Case<'a> = ([i64; 3], [i64; 3], [i64; 3], [&'a str; 5], &'a [usize], Vec<f32>);
    let cases: [Case; 2] = [
        (
            [0, 0, -1],
            [0, 0, 0],
            [1, 1, 1],
            ["0,0,0", "0,0,0", "0,1,0", "0,0,1", "1,0,0"],
            &[2, 3, 1],
            vec![3.0, 7.0, 11.0, 15.0, 19.0, 23.0],
        ),
        (
            [1, 0, 0],
            [0, 3, 0],
            [1, 2, 1],
            ["0,1,0", "0,0,0", "0,0,1", "1,0,0", "0,0,0"],
            &[2, 1, 4],
            vec![12.0, 13.0, 14.0, 15.0, 20.0, 21.0, 22.0, 23.0],
        ),
    ];
    for (begin, end, strides, masks, out_dims, want) in cases {
        let consts: String = (0..3)
            .map(|k| {
                format!(
                    r#"<layer id="{}" name="c{k}" type="Const" version="opset1"><data element_type="i64" shape="3" offset="{}" size="24" /><output><port id="0" precision="I64"><dim>3</dim></port></output></layer>"#,
                    k + 1,
                    24 * k
                )
            })
            .collect();
        let [bm, em, nm, sm, elm] = masks;
        let xml = format!(
            r#"<?xml version="1.0"?><net name="ss" version="11"><layers>
            <layer id="0" name="x" type="Parameter" version="opset1"><data shape="2,3,4" element_type="f32" /><output><port id="0" precision="FP32" names="x">{x}</port></output></layer>{consts}
            <layer id="4" name="y" type="StridedSlice" version="opset1"><data begin_mask="{bm}" end_mask="{em}" new_axis_mask="{nm}" shrink_axis_mask="{sm}" ellipsis_mask="{elm}" />
            <input><port id="0" precision="FP32">{x}</port><port id="1" precision="I64"><dim>3</dim></port><port id="2" precision="I64"><dim>3</dim></port><port id="3" precision="I64"><dim>3</dim></port></input>
            <output><port id="4" precision="FP32" names="y">{y}</port></output></layer>
            <layer id="5" name="y/sink_port_0" type="Result" version="opset1" output_names="y"><input><port id="0" precision="FP32">{y}</port></input></layer>
            </layers><edges><edge from-layer="0" from-port="0" to-layer="4" to-port="0" /><edge from-layer="1" from-port="0" to-layer="4" to-port="1" />
            <edge from-layer="2" from-port="0" to-layer="4" to-port="2" /><edge from-layer="3" from-port="0" to-layer="4" to-port="3" />
            <edge from-layer="4" from-port="4" to-layer="5" to-port="0" /></edges></net>"#,
            x = dims(&[2, 3, 4]),
            y = dims(out_dims),
        );
        let bin: Vec<u8> = begin.iter().chain(&end).chain(&strides).flat_map(|v| v.to_le_bytes()).collect();
        let g = bident_ir::import_openvino_ir_bytes(&xml, bin.into(), "ss.xml", &Default::default()).expect("imports");
        let x: Vec<u8> = (0..24).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let x = bident_tensor::HostTensor::new("x", bident_tensor::DType::F32, vec![2, 3, 4], x).expect("x");
        let got = bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, vec![x]).expect("runs");
        let shape: Vec<u64> = out_dims.iter().map(|&d| d as u64).collect();
        let values: Vec<f32> = (0..got[0].numel()).map(|k| got[0].get_f64(k) as f32).collect();
        assert_eq!((&got[0].shape, &values), (&shape, &want), "masks {masks:?}");
    }
}

/// Broadcast in `explicit` mode from OpenVINO IR: data [3] placed on axis 1 of [2, 3, 4].
#[test]
fn openvino_ir_explicit_broadcast() {
    let xml = r#"<?xml version="1.0"?><net name="bc" version="11"><layers>
        <layer id="0" name="x" type="Parameter" version="opset1"><data shape="3" element_type="f32" /><output><port id="0" precision="FP32" names="x"><dim>3</dim></port></output></layer>
        <layer id="1" name="shape" type="Const" version="opset1"><data element_type="i64" shape="3" offset="0" size="24" /><output><port id="0" precision="I64"><dim>3</dim></port></output></layer>
        <layer id="2" name="mapping" type="Const" version="opset1"><data element_type="i64" shape="1" offset="24" size="8" /><output><port id="0" precision="I64"><dim>1</dim></port></output></layer>
        <layer id="3" name="y" type="Broadcast" version="opset3"><data mode="explicit" />
        <input><port id="0" precision="FP32"><dim>3</dim></port><port id="1" precision="I64"><dim>3</dim></port><port id="2" precision="I64"><dim>1</dim></port></input>
        <output><port id="3" precision="FP32" names="y"><dim>2</dim><dim>3</dim><dim>4</dim></port></output></layer>
        <layer id="4" name="y/sink_port_0" type="Result" version="opset1" output_names="y"><input><port id="0" precision="FP32"><dim>2</dim><dim>3</dim><dim>4</dim></port></input></layer>
        </layers><edges><edge from-layer="0" from-port="0" to-layer="3" to-port="0" /><edge from-layer="1" from-port="0" to-layer="3" to-port="1" />
        <edge from-layer="2" from-port="0" to-layer="3" to-port="2" /><edge from-layer="3" from-port="3" to-layer="4" to-port="0" /></edges></net>"#;
    let bin: Vec<u8> = [2i64, 3, 4, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let g = bident_ir::import_openvino_ir_bytes(xml, bin.into(), "bc.xml", &Default::default()).expect("imports");
    let be = backend();
    let pu = SocSpec::preset("local", be.as_ref()).expect("local SoC").pus[0].clone();
    let x: Vec<u8> = [10f32, 20.0, 30.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let x = bident_tensor::HostTensor::new("x", bident_tensor::DType::F32, vec![3], x).expect("x");
    let got = bident_runtime::run_op_by_op(&g, be.as_ref(), &pu, vec![x]).expect("runs");
    let values: Vec<f64> = (0..got[0].numel()).map(|k| got[0].get_f64(k)).collect();
    let want: Vec<f64> = (0..24).map(|k| [10.0, 20.0, 30.0][(k / 4) % 3]).collect();
    assert_eq!((got[0].shape.as_slice(), values), (&[2u64, 3, 4][..], want));
}
