//! Single-op probe models, `probe-<op>-<dtype>-<n>`: one op at one size, to compare PUs on.

use bident_ir::proto::ModelProto;
use bident_tensor::DType;

use crate::builder::Builder;

/// Single-op probe models, `probe-<op>-<dtype>-<n>` (see [`probe`]): the ops the paper's
/// Observations 1 and 2 compare PUs on.
pub const PROBE_OPS: &[(&str, &str)] = &[
    ("matmul", "[1,n,n] x [n,n] (int8: MatMulInteger)"),
    ("conv", "3x3 convolution, n -> n channels, 56x56, padded"),
    ("dwconv", "3x3 depthwise convolution, n channels, 56x56, padded"),
    ("add", "[1,n,32,32] + [1,n,32,32]"),
    ("dft", "complex DFT (real input) of 256 points along axis 2, [1,n,256,1]"),
    ("cumsum", "[1,n,1024] along the last axis"),
    ("gather", "n rows (int64 indices) of an [8192,256] table"),
];

/// A single-op probe: `op` from [`PROBE_OPS`] in `dtype` (f32, f16 or i8) at size `n`; None for
/// an unknown op or a dtype the op does not take.
pub fn probe(op: &str, dtype: DType, n: u64) -> Option<ModelProto> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::I8) || n == 0 {
        return None;
    }
    let mut b = Builder::new(n);
    let float = dtype != DType::I8;
    let out = match op {
        "matmul" => {
            let x = b.input_typed("x", dtype, &[Some(1), Some(n), Some(n)], "");
            let w = b.weight_typed("w", dtype, &[n, n]);
            b.node(if float { "MatMul" } else { "MatMulInteger" }, &[&x, &w], &[])
        }
        "conv" | "dwconv" if float => {
            let x = b.input_typed("x", dtype, &[Some(1), Some(n), Some(56), Some(56)], "");
            let (cin, group) = if op == "conv" { (n, 1) } else { (1, n as i64) };
            let w = b.weight_typed("w", dtype, &[n, cin, 3, 3]);
            b.node(
                "Conv",
                &[&x, &w],
                &[("pads", vec![1; 4].into()), ("kernel_shape", vec![3, 3].into()), ("group", group.into())],
            )
        }
        "add" if float => {
            let dims = [Some(1), Some(n), Some(32), Some(32)];
            let x = b.input_typed("x", dtype, &dims, "");
            let y = b.input_typed("y", dtype, &dims, "");
            b.node("Add", &[&x, &y], &[])
        }
        "dft" if float => {
            let x = b.input_typed("x", dtype, &[Some(1), Some(n), Some(256), Some(1)], "");
            b.node("DFT", &[&x], &[("axis", 2i64.into())])
        }
        "cumsum" if float => {
            let x = b.input_typed("x", dtype, &[Some(1), Some(n), Some(1024)], "");
            let axis = b.const_i64("axis", &[], &[2]);
            b.node("CumSum", &[&x, &axis], &[])
        }
        "gather" if float => {
            let table = b.weight_typed("table", dtype, &[8192, 256]);
            let idx = b.input_typed("indices", DType::I64, &[Some(n)], "");
            b.node("Gather", &[&table, &idx], &[("axis", 0i64.into())])
        }
        _ => return None,
    };
    b.output(&out);
    Some(b.finish(&format!("probe_{op}_{dtype}_{n}")))
}
