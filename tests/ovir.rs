//! OpenVINO IR conversions that need more than a name change (`bident_ir`'s `ovir`), each on a
//! small hand-written IR with a known answer, imported and run op by op on OpenVINO. Whole
//! models converted by the pinned `ovc` are checked against their ONNX source by `cargo xtask
//! ovir` (the `openvino_ir_matches_its_onnx_source` CLI test).

use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_tensor::{DType, HostTensor};
use bident_tests::backend;

fn tensor(name: &str, dtype: DType, shape: &[u64], bytes: Vec<u8>) -> HostTensor {
    HostTensor::new(name, dtype, shape.to_vec(), bytes).expect("tensor")
}

fn f32s(name: &str, shape: &[u64], v: &[f32]) -> HostTensor {
    tensor(name, DType::F32, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn values(t: &HostTensor) -> Vec<f64> {
    (0..t.numel()).map(|k| t.get_f64(k)).collect()
}

/// An IR element type and its port precision.
#[derive(Clone, Copy)]
enum Et {
    F32,
    I32,
    I64,
}

impl Et {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Et::F32 => ("f32", "FP32"),
            Et::I32 => ("i32", "I32"),
            Et::I64 => ("i64", "I64"),
        }
    }
}

fn port(id: u32, et: Et, name: Option<&str>, dims: &[u64]) -> String {
    let names = name.map(|n| format!(r#" names="{n}""#)).unwrap_or_default();
    let dims: String = dims.iter().map(|d| format!("<dim>{d}</dim>")).collect();
    format!(r#"<port id="{id}" precision="{}"{names}>{dims}</port>"#, et.names().1)
}

fn parameter(id: u32, name: &str, et: Et, dims: &[u64]) -> String {
    let shape = dims.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    format!(
        r#"<layer id="{id}" name="{name}" type="Parameter" version="opset1"><data shape="{shape}" element_type="{}" /><output>{}</output></layer>"#,
        et.names().0,
        port(0, et, Some(name), dims)
    )
}

/// A Const reading its bytes at `offset` of the weights.
fn constant(id: u32, et: Et, dims: &[u64], offset: usize) -> String {
    let shape = dims.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let size = dims.iter().product::<u64>() * if matches!(et, Et::I64) { 8 } else { 4 };
    format!(
        r#"<layer id="{id}" name="c{id}" type="Const" version="opset1"><data element_type="{}" shape="{shape}" offset="{offset}" size="{size}" /><output>{}</output></layer>"#,
        et.names().0,
        port(0, et, None, dims)
    )
}

/// A compute layer: its input ports 0.. and its one output port after them.
fn layer(id: u32, ty: &str, version: &str, data: &str, inputs: &[(Et, &[u64])], out: (&str, Et, &[u64])) -> String {
    let ins: String = inputs.iter().enumerate().map(|(k, (et, dims))| port(k as u32, *et, None, dims)).collect();
    format!(
        r#"<layer id="{id}" name="{}" type="{ty}" version="{version}"><data {data} /><input>{ins}</input><output>{}</output></layer>"#,
        out.0,
        port(inputs.len() as u32, out.1, Some(out.0), out.2)
    )
}

fn result(id: u32, of: &str, et: Et, dims: &[u64]) -> String {
    format!(
        r#"<layer id="{id}" name="{of}/sink_port_0" type="Result" version="opset1" output_names="{of}"><input>{}</input></layer>"#,
        port(0, et, None, dims)
    )
}

/// A net of `layers` joined by `(from layer, from port, to layer, to port)` edges.
fn net(layers: &[String], edges: &[(u32, u32, u32, u32)]) -> String {
    let edges: String = edges
        .iter()
        .map(|(a, p, b, q)| format!(r#"<edge from-layer="{a}" from-port="{p}" to-layer="{b}" to-port="{q}" />"#))
        .collect();
    format!(
        r#"<?xml version="1.0"?><net name="t" version="11"><layers>{}</layers><edges>{edges}</edges></net>"#,
        layers.concat()
    )
}

/// Edges from layers 0..n to the input ports 0..n of layer `to`, then from its output port to
/// the Result `to + 1`.
fn fan_in(n: u32, to: u32) -> Vec<(u32, u32, u32, u32)> {
    (0..n).map(|k| (k, 0, to, k)).chain([(to, n, to + 1, 0)]).collect()
}

fn local_cpu() -> bident_backend::PuSpec {
    SocSpec::preset("local", backend().as_ref()).expect("local SoC").pus.remove(0)
}

/// Import an IR and run it op by op on the local CPU.
fn run(xml: &str, bin: Vec<u8>, inputs: Vec<HostTensor>) -> (FusedGraph, Vec<HostTensor>) {
    let g = bident_ir::import_openvino_ir_bytes(xml, bin.into(), "t.xml", &Default::default()).expect("imports");
    let got = bident_runtime::run_op_by_op(&g, backend().as_ref(), &local_cpu(), inputs).expect("runs");
    (g, got)
}

/// OpenVINO's integer `Divide` rounds down (`m_pythondiv`, on by default); the IR import must
/// not turn it into ONNX's truncating `Div`.
#[test]
fn integer_divide_rounds_down() {
    let six: &[u64] = &[6];
    let xml = net(
        &[
            parameter(0, "a", Et::I32, six),
            parameter(1, "b", Et::I32, six),
            layer(
                2,
                "Divide",
                "opset1",
                r#"m_pythondiv="true""#,
                &[(Et::I32, six), (Et::I32, six)],
                ("q", Et::I32, six),
            ),
            result(3, "q", Et::I32, six),
        ],
        &fan_in(2, 2),
    );
    let i32s = |name: &str, v: &[i32]| tensor(name, DType::I32, six, v.iter().flat_map(|x| x.to_le_bytes()).collect());
    let (_, got) = run(&xml, vec![], vec![i32s("a", &[7, -7, 7, -7, 6, -6]), i32s("b", &[2, 2, -2, -2, 3, 3])]);
    assert_eq!(values(&got[0]), [3.0, -4.0, -4.0, 3.0, 2.0, -2.0]);
}

/// `FloorMod` on floats takes the divisor's sign (Python's `%`), `Mod` the dividend's (C's
/// `fmod`): ONNX's float `Mod` is only the latter, so the import moves the remainder over.
#[test]
fn float_floor_mod_takes_the_divisors_sign() {
    let six: &[u64] = &[6];
    let floor_mod = |ty: &str| {
        net(
            &[
                parameter(0, "a", Et::F32, six),
                parameter(1, "b", Et::F32, six),
                layer(2, ty, "opset1", "", &[(Et::F32, six), (Et::F32, six)], ("r", Et::F32, six)),
                result(3, "r", Et::F32, six),
            ],
            &fan_in(2, 2),
        )
    };
    let inputs =
        || vec![f32s("a", six, &[7.5, -7.5, 7.5, -7.5, 6.0, -6.0]), f32s("b", six, &[2.0, 2.0, -2.0, -2.0, 3.0, 3.0])];
    let (_, got) = run(&floor_mod("FloorMod"), vec![], inputs());
    assert_eq!(values(&got[0]), [1.5, 0.5, -0.5, -1.5, 0.0, 0.0]);
    let (_, got) = run(&floor_mod("Mod"), vec![], inputs());
    assert_eq!(values(&got[0]), [1.5, -1.5, 1.5, -1.5, 0.0, -0.0]);
}

/// FakeQuantize, both ways the import writes it: a 256-level grid as QuantizeLinear +
/// DequantizeLinear, any other grid as the formula.
#[test]
fn fake_quantize() {
    let six: &[u64] = &[6];
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
        let mut layers = vec![parameter(0, "x", Et::F32, six)];
        layers.extend((1..5).map(|k| constant(k, Et::F32, &[], 4 * (k as usize - 1))));
        let ins: Vec<(Et, &[u64])> = [(Et::F32, six)].into_iter().chain([(Et::F32, &[][..]); 4]).collect();
        layers.push(layer(5, "FakeQuantize", "opset1", &format!(r#"levels="{levels}""#), &ins, ("y", Et::F32, six)));
        layers.push(result(6, "y", Et::F32, six));
        let bin = range.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (g, got) = run(&net(&layers, &fan_in(5, 5)), bin, vec![f32s("x", six, &x)]);
        let kinds: Vec<&str> = g.ops.iter().map(|o| o.kind.as_str()).collect();
        let form = if levels == 256 { "QuantizeLinear" } else { "Round" };
        assert!(kinds.iter().any(|k| k.contains(form)), "levels {levels}: {kinds:?}");
        let err = got[0].max_abs_diff(&f32s("y", six, &want)).expect("comparable");
        assert!(err < 1e-6, "levels {levels}: {:?} vs {want:?}", values(&got[0]));
    }
}

/// A causal ScaledDotProductAttention (3 queries, 5 keys) gives what OpenVINO computes from the
/// same IR, which it reads directly (the IR has no weights).
#[test]
fn causal_attention() {
    let (q, kv): (&[u64], &[u64]) = (&[1, 3, 4], &[1, 5, 4]);
    let xml = net(
        &[
            parameter(0, "q", Et::F32, q),
            parameter(1, "k", Et::F32, kv),
            parameter(2, "v", Et::F32, kv),
            layer(
                3,
                "ScaledDotProductAttention",
                "opset13",
                r#"causal="true""#,
                &[(Et::F32, q), (Et::F32, kv), (Et::F32, kv)],
                ("y", Et::F32, q),
            ),
            result(4, "y", Et::F32, q),
        ],
        &fan_in(3, 3),
    );
    let g =
        bident_ir::import_openvino_ir_bytes(&xml, Default::default(), "t.xml", &Default::default()).expect("imports");
    let inputs = g.example_inputs(3);
    let mut whole = backend().compile(xml.as_bytes(), &local_cpu()).expect("OpenVINO reads the IR");
    let want = whole.run(&inputs.iter().collect::<Vec<_>>()).expect("runs whole");
    let (_, got) = run(&xml, vec![], inputs);
    let err = got[0].max_abs_diff(&want[0]).expect("comparable");
    assert!(err < 1e-5, "max abs err {err}");
}

/// StridedSlice's masks: `x[..., newaxis, -1]` and `x[1, ::2, newaxis]` on [2, 3, 4] = 0..23.
#[test]
fn strided_slice_masks() {
    let (x, three): (&[u64], &[u64]) = (&[2, 3, 4], &[3]);
    // (begin, end, strides, masks: begin, end, new_axis, shrink, ellipsis; output dims and values)
    type Case<'a> = ([i64; 9], [&'a str; 5], &'a [u64], Vec<f64>);
    let cases: [Case; 2] = [
        (
            [0, 0, -1, 0, 0, 0, 1, 1, 1],
            ["0,0,0", "0,0,0", "0,1,0", "0,0,1", "1,0,0"],
            &[2, 3, 1],
            vec![3.0, 7.0, 11.0, 15.0, 19.0, 23.0],
        ),
        (
            [1, 0, 0, 0, 3, 0, 1, 2, 1],
            ["0,1,0", "0,0,0", "0,0,1", "1,0,0", "0,0,0"],
            &[2, 1, 4],
            vec![12.0, 13.0, 14.0, 15.0, 20.0, 21.0, 22.0, 23.0],
        ),
    ];
    for (bes, [bm, em, nm, sm, elm], out, want) in cases {
        let data = format!(
            r#"begin_mask="{bm}" end_mask="{em}" new_axis_mask="{nm}" shrink_axis_mask="{sm}" ellipsis_mask="{elm}""#
        );
        let mut layers = vec![parameter(0, "x", Et::F32, x)];
        layers.extend((1..4).map(|k| constant(k, Et::I64, three, 24 * (k as usize - 1))));
        let ins = [(Et::F32, x), (Et::I64, three), (Et::I64, three), (Et::I64, three)];
        layers.push(layer(4, "StridedSlice", "opset1", &data, &ins, ("y", Et::F32, out)));
        layers.push(result(5, "y", Et::F32, out));
        let input: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let (_, got) = run(&net(&layers, &fan_in(4, 4)), i64_bytes(&bes), vec![f32s("x", x, &input)]);
        assert_eq!((got[0].shape.as_slice(), values(&got[0])), (out, want), "masks {data}");
    }
}

/// Broadcast in `explicit` mode: data [3] placed on axis 1 of [2, 3, 4].
#[test]
fn explicit_broadcast() {
    let (x, out): (&[u64], &[u64]) = (&[3], &[2, 3, 4]);
    let layers = [
        parameter(0, "x", Et::F32, x),
        constant(1, Et::I64, &[3], 0),
        constant(2, Et::I64, &[1], 24),
        layer(
            3,
            "Broadcast",
            "opset3",
            r#"mode="explicit""#,
            &[(Et::F32, x), (Et::I64, &[3]), (Et::I64, &[1])],
            ("y", Et::F32, out),
        ),
        result(4, "y", Et::F32, out),
    ];
    let (_, got) = run(&net(&layers, &fan_in(3, 3)), i64_bytes(&[2, 3, 4, 1]), vec![f32s("x", x, &[10.0, 20.0, 30.0])]);
    let want: Vec<f64> = (0..24).map(|k| [10.0, 20.0, 30.0][(k / 4) % 3]).collect();
    assert_eq!((got[0].shape.as_slice(), values(&got[0])), (out, want));
}

/// Gather with batch_dims 1 along axis 1: row b of [2, 3] picks its own two indices.
#[test]
fn gather_batch_dims() {
    let (x, idx): (&[u64], &[u64]) = (&[2, 3], &[2, 2]);
    let layers = [
        parameter(0, "x", Et::F32, x),
        parameter(1, "idx", Et::I64, idx),
        constant(2, Et::I64, &[], 0),
        layer(
            3,
            "Gather",
            "opset8",
            r#"batch_dims="1""#,
            &[(Et::F32, x), (Et::I64, idx), (Et::I64, &[])],
            ("y", Et::F32, idx),
        ),
        result(4, "y", Et::F32, idx),
    ];
    let inputs = vec![
        f32s("x", x, &[0.0, 1.0, 2.0, 10.0, 11.0, 12.0]),
        tensor("idx", DType::I64, idx, i64_bytes(&[2, 0, 1, -1])),
    ];
    let (_, got) = run(&net(&layers, &fan_in(3, 3)), i64_bytes(&[1]), inputs);
    assert_eq!((got[0].shape.as_slice(), values(&got[0])), (idx, vec![2.0, 0.0, 11.0, 12.0]));
}
