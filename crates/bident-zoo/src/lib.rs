//! Models bident builds itself, so nothing has to be downloaded: the pipeline's example model,
//! the models tests import, and deliberately broken models for the bad-input tests. Weights are
//! seeded pseudo-random numbers: scheduling depends on shapes, not on weight values.
//!
//! Must not: depend on any backend or on stages after bident-ir.

mod builder;
pub mod families;

use bident_ir::proto::{ModelProto, tensor_proto::DataLocation};
use bident_tensor::DType;
use prost::Message;

pub use builder::Builder;

/// Names of the models [`build`] knows, with one line each.
pub const MODELS: &[(&str, &str)] = &[
    ("example", "small CNN with a fork/join (stem, two branches, add, head): the pipeline's default"),
    ("example-edited", "the example with a 12-class head: every op before the head unchanged (a small model edit)"),
    ("mlp", "three MatMul+Add+Relu layers: a plain chain"),
    (
        "resnet50",
        "ResNet-50 v1.5 at 224x224 (torchvision layout: bottlenecks [3, 4, 6, 3], stride on the 3x3, \
         ~25.6M f32 parameters), seeded weights",
    ),
    (
        "attention",
        "single-head self-attention block with LayerNorm and GELU (Erf), shape arithmetic via Shape/Gather/Concat",
    ),
    (
        "bert-encoder",
        "BERT-style encoder as PyTorch exports it (8 layers, hidden 384, 6 heads, ~70 MB of f32 weights): int64 \
         token ids and mask with a symbolic `seq` dim, embeddings, multi-head attention reshaped through \
         Shape/Gather/Concat, GELU (Erf), LayerNorm",
    ),
    ("dynamic-batch", "the mlp with a symbolic batch dim `N`"),
    ("recurrent", "a bidirectional GRU (linear before reset) feeding an RNN, sequence first"),
    (
        "control-loop",
        "a `for` Loop as exporters write it: constant trip count, a body that sets its condition to a constant \
         true, reads a weight of the enclosing graph and declares no types",
    ),
    ("loop-endless", "a Loop with a constant trip count of 10^12 carrying one value: valid, and never ends when run"),
    ("control-if", "an If whose branches read a tensor of the enclosing graph (outer scope), between two ops"),
    (
        "control-if-untyped",
        "control-if with branches that declare no output types, one computing a Reshape target from Shape",
    ),
    (
        "control-scan-untyped",
        "a Scan (running sum over the rows) whose body declares no output types, its stacked output reshaped \
         to a target that Split and Concat compute from its Shape",
    ),
    ("bad-dangling-input", "a node reads a tensor nothing produces"),
    ("bad-cycle", "two nodes feed each other"),
    ("bad-unknown-op", "an op bident does not know, with no value_info for its output"),
    ("bad-external-escape", "an initializer whose external data location is ../outside.bin"),
    ("bad-conv-kernel-zero", "a Conv whose kernel_shape is [0, 0]"),
    ("bad-pool-rank", "a MaxPool on a 1-d tensor"),
    ("bad-slice-lengths", "a Slice whose ends are shorter than its starts"),
    ("bad-concat-dtypes", "a Concat of an i64 and an i32 constant"),
    ("bad-range-huge", "a Range of 2^34 elements"),
    ("bad-gather-scalar", "a Gather on a scalar"),
    ("bad-split-negative", "a Split with a negative part"),
    ("bad-duplicate-output", "two nodes write the same tensor"),
    ("bad-if-missing-output", "an If whose then-branch declares no outputs"),
    ("bad-negative-dim", "an initializer with a negative dim"),
    ("bad-overflow-dims", "an initializer whose dims multiply past 2^64"),
    ("bad-initializer-size", "an f32[2] initializer holding 3 bytes"),
    ("bad-matmul-inner", "a MatMul of [1, 8] by [4, 4]"),
    ("bad-add-dtypes", "an Add of an f32 input and an i64 constant"),
    ("bad-if-branch-shapes", "an If on a run-time condition whose untyped branches give [16] and [1, 16]"),
    ("bad-external-absolute", "an initializer whose external data location is the absolute path /etc/passwd"),
    ("bad-external-if", "an If-branch initializer whose external data location is ../outside.bin"),
    ("bad-external-loop-constant", "a Constant inside a Loop body whose tensor's external data is /etc/passwd"),
    ("bad-duplicate-initializer", "two initializers named `w` with different values"),
    ("bad-nul-name", "an Add whose output tensor's name holds a NUL"),
    ("bad-escape-name", "a node whose name holds a terminal escape"),
    ("bad-sparse-initializer", "an Add of an input and a sparse initializer (valid ONNX bident does not read)"),
    ("bad-duplicate-input", "the graph input `x` listed twice"),
    ("bad-duplicate-graph-output", "the graph output `y` listed twice"),
    ("bad-opset-zero", "opset_import says the default domain is at version 0"),
    ("bad-no-opset", "no opset_import at all"),
    ("bad-future-ir", "ir_version 99"),
    ("bad-negative-input-dim", "an input whose dim 1 is -3"),
    (
        "const-transpose-pad",
        "a Pad whose pads come from Constant -> Transpose -> Reshape (an STFT front end's framing), reflect mode",
    ),
];

/// Where [`external_ref`] puts the tensor that names a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExternalPlace {
    /// An initializer of the main graph.
    Main,
    /// An initializer of an If's then-branch (the condition is a run-time value).
    IfBranch,
    /// The tensor of a Constant node inside a Loop body.
    LoopConstant,
}

/// A small model one of whose f32[1, 4] tensors keeps its data in the file `location` (ONNX
/// external data), at `place`: what an attacker writes to make an importer read a file.
pub fn external_ref(place: ExternalPlace, location: &str, seed: u64) -> ModelProto {
    use bident_ir::proto::{StringStringEntryProto, TensorProto};
    let external = |t: &mut TensorProto| {
        t.raw_data = None;
        t.data_location = Some(DataLocation::External as i32);
        t.external_data =
            vec![StringStringEntryProto { key: Some("location".into()), value: Some(location.to_string()) }];
    };
    let mut b = Builder::new(seed);
    let x = b.input("x", &[1, 4]);
    let y = match place {
        ExternalPlace::Main => {
            let w = b.weight("w", &[1, 4]);
            b.node("Add", &[&x, &w], &[])
        }
        ExternalPlace::IfBranch => {
            let s = b.node("ReduceSum", &[&x], &[("keepdims", 0i64.into())]);
            let zero = b.scalar_f32("zero", 0.0);
            let cond = b.node("Greater", &[&s, &zero], &[]);
            let mut then_b = Builder::new(seed);
            let w = then_b.weight("then_w", &[1, 4]);
            then_b.node_named("then_add", "Add", &[&x, &w], &["then_out"], &[]);
            then_b.output_typed("then_out", &[1, 4]);
            let mut then_g = then_b.finish_graph("then");
            external(&mut then_g.initializer[0]);
            let mut else_b = Builder::new(seed);
            else_b.node_named("else_neg", "Neg", &[&x], &["else_out"], &[]);
            else_b.output_typed("else_out", &[1, 4]);
            let branches = [
                ("then_branch", builder::Attr::Graph(Box::new(then_g))),
                ("else_branch", builder::Attr::Graph(Box::new(else_b.finish_graph("else")))),
            ];
            b.node("If", &[&cond], &branches)
        }
        ExternalPlace::LoopConstant => {
            use builder::Attr;
            let trip = b.const_i64("trip", &[], &[2]);
            let go = b.const_i64("go_i64", &[], &[1]);
            let go = b.node("Cast", &[&go], &[("to", (DType::Bool.onnx_code() as i64).into())]);
            let mut body = Builder::new(seed);
            body.input_typed("i", DType::I64, &[], "");
            body.input_typed("cond_in", DType::Bool, &[], "");
            body.input_typed("y_in", DType::F32, &[Some(1), Some(4)], "");
            let yes = bident_tensor::HostTensor { dtype: DType::Bool, shape: vec![], data: vec![1] };
            body.node_named("keep_going", "Constant", &[], &["cond_out"], &[("value", Attr::Tensor(yes))]);
            let w = bident_tensor::HostTensor::seeded(DType::F32, vec![1, 4], seed);
            body.node_named("body_w", "Constant", &[], &["w_in_body"], &[("value", Attr::Tensor(w))]);
            body.node_named("step", "Add", &["y_in", "w_in_body"], &["y_out"], &[]);
            body.output_untyped("cond_out");
            body.output_untyped("y_out");
            let mut g = body.finish_graph("body");
            if let Some(t) = g.node.iter_mut().find(|n| n.name() == "body_w").and_then(|n| n.attribute[0].t.as_mut()) {
                external(t);
            }
            b.node_named("loop", "Loop", &[&trip, &go, &x], &["y_final"], &[("body", Attr::Graph(Box::new(g)))]);
            "y_final".to_string()
        }
    };
    b.output(&y);
    let mut m = b.finish("external_ref");
    if place == ExternalPlace::Main
        && let Some(w) = m.graph.as_mut().and_then(|g| g.initializer.iter_mut().find(|t| t.name() == "w"))
    {
        external(w);
    }
    m
}

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

/// Build a model by name; `None` for an unknown name.
pub fn build(name: &str, seed: u64) -> Option<ModelProto> {
    if let Some(spec) = name.strip_prefix("probe-") {
        let mut parts = spec.rsplitn(3, '-');
        let (n, dtype, op) = (parts.next()?, parts.next()?, parts.next()?);
        let dtype = [DType::F32, DType::F16, DType::I8].into_iter().find(|d| d.name() == dtype)?;
        return probe(op, dtype, n.parse().ok()?);
    }
    if let Some(m) = families::build(name, seed) {
        return Some(m);
    }
    Some(match name {
        "example" => example(seed, 10),
        "example-edited" => example(seed, 12),
        "resnet50" => resnet50(seed),
        "mlp" => mlp(seed, 1),
        "attention" => attention(seed),
        "bert-encoder" => {
            bert(seed, &Bert { layers: 8, hidden: 384, heads: 6, ffn: 1536, vocab: 8192, positions: 512 })
        }
        "dynamic-batch" => {
            let mut b = mlp_builder(seed, None);
            b.finish("dynamic_batch")
        }
        "recurrent" => recurrent(seed),
        "control-loop" => control_loop(seed, 3, true),
        "loop-endless" => control_loop(seed, 1_000_000_000_000, false),
        "control-if" => control_if(seed, true),
        "control-if-untyped" => control_if(seed, false),
        "control-scan-untyped" => control_scan(seed),
        "bad-external-absolute" => external_ref(ExternalPlace::Main, "/etc/passwd", seed),
        "bad-external-if" => external_ref(ExternalPlace::IfBranch, "../outside.bin", seed),
        "bad-external-loop-constant" => external_ref(ExternalPlace::LoopConstant, "/etc/passwd", seed),
        "bad-nul-name" | "bad-escape-name" | "bad-sparse-initializer" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 4]);
            let w = b.weight("w", &[1, 4]);
            b.node_named("add\u{1b}[2J", "Add", &[&x, &w], &["y\0z"], &[]);
            b.output("y\0z");
            let mut m = b.finish("bad_names");
            let g = m.graph.as_mut().expect("built");
            match name {
                "bad-nul-name" => g.node[0].name = Some("add".into()),
                "bad-escape-name" => {
                    g.node[0].output = vec!["y".into()];
                    g.output[0].name = Some("y".into());
                }
                _ => {
                    (g.node[0].name, g.node[0].output, g.output[0].name) =
                        (Some("add".into()), vec!["y".into()], Some("y".into()));
                    let values = g.initializer.remove(0);
                    let indices = bident_ir::proto::TensorProto {
                        dims: vec![4],
                        data_type: Some(bident_ir::proto::tensor_proto::DataType::Int64 as i32),
                        int64_data: vec![0, 1, 2, 3],
                        ..Default::default()
                    };
                    g.sparse_initializer.push(bident_ir::proto::SparseTensorProto {
                        values: Some(values),
                        indices: Some(indices),
                        dims: vec![1, 4],
                    });
                }
            }
            m
        }
        "bad-duplicate-initializer" | "bad-duplicate-input" | "bad-duplicate-graph-output" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 4]);
            let w = b.weight("w", &[1, 4]);
            let y = b.node("Add", &[&x, &w], &[]);
            b.output(&y);
            let mut m = b.finish("bad_duplicate");
            let g = m.graph.as_mut().expect("built");
            match name {
                "bad-duplicate-initializer" => {
                    let mut again = g.initializer[0].clone();
                    again.raw_data = Some(vec![0u8; 16].into());
                    g.initializer.push(again);
                }
                "bad-duplicate-input" => g.input.push(g.input[0].clone()),
                _ => g.output.push(g.output[0].clone()),
            }
            m
        }
        "bad-opset-zero" | "bad-no-opset" | "bad-future-ir" => {
            let mut m = one_op(seed, "Relu", &[1, 4], &[], &[]);
            match name {
                "bad-opset-zero" => m.opset_import[0].version = Some(0),
                "bad-no-opset" => m.opset_import.clear(),
                _ => m.ir_version = Some(99),
            }
            m
        }
        "bad-negative-input-dim" => {
            let mut m = one_op(seed, "Relu", &[1, 4], &[], &[]);
            if let Some(bident_ir::proto::type_proto::Value::TensorType(t)) =
                m.graph.as_mut().and_then(|g| g.input[0].r#type.as_mut()).and_then(|t| t.value.as_mut())
                && let Some(shape) = t.shape.as_mut()
            {
                shape.dim[1].value = Some(bident_ir::proto::tensor_shape_proto::dimension::Value::DimValue(-3));
            }
            m
        }
        "const-transpose-pad" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 2, 16]);
            // [[0, 0], [0, 0], [2, 3]] -> Transpose -> [[0, 0, 2], [0, 0, 3]] -> Reshape [6]: the pads
            let v = bident_tensor::HostTensor::from_f64("frame", DType::I64, vec![3, 2], &[0., 0., 0., 0., 2., 3.])
                .expect("valid");
            let c = b.node("Constant", &[], &[("value", builder::Attr::Tensor(v))]);
            let t = b.node("Transpose", &[&c], &[("perm", vec![1i64, 0].into())]);
            let flat = b.const_i64("flat", &[1], &[-1]);
            let pads = b.node("Reshape", &[&t, &flat], &[]);
            let p = b.node("Pad", &[&x, &pads], &[("mode", builder::Attr::Str("reflect"))]);
            let y = b.node("Relu", &[&p], &[]);
            b.output(&y);
            b.finish("const_transpose_pad")
        }
        "bad-dangling-input" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            let y = b.node("Add", &[&x, "ghost"], &[]);
            b.output(&y);
            b.finish("bad_dangling_input")
        }
        "bad-cycle" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            b.node_named("a", "Add", &[&x, "b_out"], &["a_out"], &[]);
            b.node_named("b", "Relu", &["a_out"], &["b_out"], &[]);
            b.output("b_out");
            b.finish("bad_cycle")
        }
        "bad-unknown-op" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            let y = b.node_domain("Frobnicate", "com.example", &[&x], &[]);
            b.output_untyped(&y);
            let mut m = b.finish("bad_unknown_op");
            m.opset_import
                .push(bident_ir::proto::OperatorSetIdProto { domain: Some("com.example".into()), version: Some(1) });
            m
        }
        "bad-external-escape" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 4]);
            let w = b.weight("w", &[1, 4]);
            let y = b.node("Add", &[&x, &w], &[]);
            b.output(&y);
            let mut m = b.finish("bad_external_escape");
            let t = &mut m.graph.as_mut().expect("built").initializer[0];
            t.raw_data = None;
            t.data_location = Some(DataLocation::External as i32);
            t.external_data = vec![bident_ir::proto::StringStringEntryProto {
                key: Some("location".into()),
                value: Some("../outside.bin".into()),
            }];
            m
        }
        "bad-conv-kernel-zero" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 1, 4, 4]);
            let w = b.weight("w", &[1, 1, 1, 1]);
            let y = b.node("Conv", &[&x, &w], &[("kernel_shape", vec![0i64, 0].into())]);
            b.output(&y);
            b.finish("bad_conv_kernel_zero")
        }
        "bad-pool-rank" => one_op(seed, "MaxPool", &[8], &[], &[("kernel_shape", vec![2i64].into())]),
        "bad-slice-lengths" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[4, 4]);
            let starts = b.const_i64("starts", &[2], &[0, 0]);
            let ends = b.const_i64("ends", &[1], &[2]);
            let y = b.node("Slice", &[&x, &starts, &ends], &[]);
            b.output(&y);
            b.finish("bad_slice_lengths")
        }
        "bad-concat-dtypes" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[2]);
            let a = b.const_i64("a", &[2], &[1, 2]);
            let c = b.const_i32("c", &[2], &[3, 4]);
            let j = b.node("Concat", &[&a, &c], &[("axis", 0i64.into())]);
            let y = b.node("Reshape", &[&x, &j], &[]);
            b.output(&y);
            b.finish("bad_concat_dtypes")
        }
        "bad-range-huge" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1]);
            let start = b.const_i64("start", &[], &[0]);
            let limit = b.const_i64("limit", &[], &[1 << 34]);
            let delta = b.const_i64("delta", &[], &[1]);
            let r = b.node("Range", &[&start, &limit, &delta], &[]);
            let c = b.node("Cast", &[&r], &[("to", 1i64.into())]);
            let y = b.node("Add", &[&x, &c], &[]);
            b.output(&y);
            b.finish("bad_range_huge")
        }
        "bad-gather-scalar" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[]);
            let i = b.const_i64("i", &[], &[0]);
            let y = b.node("Gather", &[&x, &i], &[("axis", 0i64.into())]);
            b.output(&y);
            b.finish("bad_gather_scalar")
        }
        "bad-duplicate-output" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            b.node_named("a", "Relu", &[&x], &["y"], &[]);
            b.node_named("b", "Sigmoid", &[&x], &["y"], &[]);
            b.output("y");
            b.finish("bad_duplicate_output")
        }
        "bad-if-missing-output" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            let s = b.node("ReduceSum", &[&x], &[("keepdims", 0i64.into())]);
            let zero = b.scalar_f32("zero", 0.0);
            let cond = b.node("Greater", &[&s, &zero], &[]);
            let mut then_b = Builder::new(seed);
            let mut else_b = Builder::new(seed);
            else_b.node_named("else_neg", "Neg", &[&x], &["else_out"], &[]);
            else_b.output_typed("else_out", &[1, 8]);
            let branches = [
                ("then_branch", builder::Attr::Graph(Box::new(then_b.finish_graph("then")))),
                ("else_branch", builder::Attr::Graph(Box::new(else_b.finish_graph("else")))),
            ];
            let y = b.node("If", &[&cond], &branches);
            b.output(&y);
            b.finish("bad_if_missing_output")
        }
        "bad-negative-dim" | "bad-overflow-dims" | "bad-initializer-size" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[2]);
            let w = b.weight("w", &[2]);
            let y = b.node("Add", &[&x, &w], &[]);
            b.output(&y);
            let mut m = b.finish(&name.replace('-', "_"));
            if let Some(t) = m.graph.as_mut().and_then(|g| g.initializer.first_mut()) {
                match name {
                    "bad-negative-dim" => t.dims = vec![-1, 2],
                    "bad-overflow-dims" => {
                        t.dims = vec![1 << 40, 1 << 40];
                        t.raw_data = Some(Default::default());
                    }
                    _ => t.raw_data = Some(vec![0u8; 3].into()),
                }
            }
            m
        }
        "bad-if-branch-shapes" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 16]);
            let s = b.node("ReduceSum", &[&x], &[("keepdims", 0i64.into())]);
            let zero = b.scalar_f32("zero", 0.0);
            let cond = b.node("Greater", &[&s, &zero], &[]);
            let flat = b.const_i64("flat", &[1], &[16]);
            let mut then_b = Builder::new(seed);
            then_b.node_named("then_flat", "Reshape", &[&x, &flat], &["then_out"], &[]);
            then_b.output_untyped("then_out");
            let mut else_b = Builder::new(seed);
            else_b.node_named("else_neg", "Neg", &[&x], &["else_out"], &[]);
            else_b.output_untyped("else_out");
            let branches = [
                ("then_branch", builder::Attr::Graph(Box::new(then_b.finish_graph("then")))),
                ("else_branch", builder::Attr::Graph(Box::new(else_b.finish_graph("else")))),
            ];
            let y = b.node("If", &[&cond], &branches);
            b.output(&y);
            b.finish("bad_if_branch_shapes")
        }
        "bad-matmul-inner" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            let w = b.weight("w", &[4, 4]);
            let y = b.node("MatMul", &[&x, &w], &[]);
            b.output(&y);
            b.finish("bad_matmul_inner")
        }
        "bad-add-dtypes" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[2]);
            let c = b.const_i64("c", &[2], &[1, 2]);
            let y = b.node("Add", &[&x, &c], &[]);
            b.output(&y);
            b.finish("bad_add_dtypes")
        }
        "bad-split-negative" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[10]);
            let parts = b.const_i64("parts", &[2], &[-1, 11]);
            b.node_named("split", "Split", &[&x, &parts], &["y0", "y1"], &[("axis", 0i64.into())]);
            b.output("y0");
            b.output("y1");
            b.finish("bad_split_negative")
        }
        _ => return None,
    })
}

/// A model of one op on one input of the given shape.
fn one_op(seed: u64, op: &str, shape: &[u64], extra: &[&str], attrs: &[(&str, builder::Attr)]) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("x", shape);
    let mut inputs = vec![x.as_str()];
    inputs.extend_from_slice(extra);
    let y = b.node(op, &inputs, attrs);
    b.output(&y);
    b.finish(&op.to_lowercase())
}

/// Move every initializer's bytes into one external-data file named `location` (beside the
/// model), as exporters do for large models. Returns that file's contents.
pub fn externalize(model: &mut ModelProto, location: &str) -> Vec<u8> {
    let mut blob = vec![];
    let Some(graph) = model.graph.as_mut() else { return blob };
    for t in &mut graph.initializer {
        let Some(raw) = t.raw_data.take() else { continue };
        let entry =
            |k: &str, v: String| bident_ir::proto::StringStringEntryProto { key: Some(k.into()), value: Some(v) };
        t.external_data = vec![
            entry("location", location.to_string()),
            entry("offset", blob.len().to_string()),
            entry("length", raw.len().to_string()),
        ];
        t.data_location = Some(DataLocation::External as i32);
        blob.extend_from_slice(&raw);
    }
    blob
}

/// Serialized bytes of [`build`].
pub fn build_bytes(name: &str, seed: u64) -> Option<Vec<u8>> {
    build(name, seed).map(|m| m.encode_to_vec())
}

fn example(seed: u64, classes: u64) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("image", &[1, 3, 32, 32]);
    let stem = b.conv_bn_relu(&x, 3, 16, 3, 1);
    // two branches from the stem
    let a1 = b.conv_bn_relu(&stem, 16, 16, 3, 1);
    let a2 = b.conv(&a1, 16, 16, 3, 1);
    let b1 = b.conv(&stem, 16, 16, 1, 0);
    let b2 = b.node("Sigmoid", &[&b1], &[]);
    let j = b.node("Add", &[&a2, &b2], &[]);
    let r = b.node("Relu", &[&j], &[]);
    let p = b.node("GlobalAveragePool", &[&r], &[]);
    let f = b.node("Flatten", &[&p], &[("axis", 1i64.into())]);
    let w = b.weight("head.w", &[16, classes]);
    let bias = b.weight("head.b", &[classes]);
    let g = b.node("Gemm", &[&f, &w, &bias], &[]);
    let s = b.node("Softmax", &[&g], &[("axis", 1i64.into())]);
    b.output(&s);
    b.finish(if classes == 10 { "example" } else { "example_edited" })
}

fn resnet50(seed: u64) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("image", &[1, 3, 224, 224]);
    let stem = b.conv_bn(&x, 3, 64, (7, 3, 2), true);
    let mut h = b.node(
        "MaxPool",
        &[&stem],
        &[("kernel_shape", vec![3, 3].into()), ("strides", vec![2, 2].into()), ("pads", vec![1; 4].into())],
    );
    let mut cin = 64;
    for (stage, (blocks, mid)) in [(3, 64), (4, 128), (6, 256), (3, 512)].into_iter().enumerate() {
        for i in 0..blocks {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            let out = mid * 4;
            let a = b.conv_bn(&h, cin, mid, (1, 0, 1), true);
            let c = b.conv_bn(&a, mid, mid, (3, 1, stride), true);
            let d = b.conv_bn(&c, mid, out, (1, 0, 1), false);
            let shortcut = if i == 0 { b.conv_bn(&h, cin, out, (1, 0, stride), false) } else { h.clone() };
            let sum = b.node("Add", &[&d, &shortcut], &[]);
            h = b.node("Relu", &[&sum], &[]);
            cin = out;
        }
    }
    let p = b.node("GlobalAveragePool", &[&h], &[]);
    let f = b.node("Flatten", &[&p], &[("axis", 1i64.into())]);
    let w = b.weight("fc.w", &[2048, 1000]);
    let bias = b.weight("fc.b", &[1000]);
    let logits = b.node("Gemm", &[&f, &w, &bias], &[]);
    b.output(&logits);
    b.finish("resnet50")
}

fn control_if(seed: u64, typed: bool) -> ModelProto {
    let mut b = Builder::new(seed);
    let x = b.input("x", &[1, 16]);
    let w = b.weight("w", &[1, 16]);
    let h = b.node("Relu", &[&x], &[]);
    let s = b.node("ReduceSum", &[&h], &[("keepdims", 0i64.into())]);
    let zero = b.scalar_f32("zero", 0.0);
    let cond = b.node("Greater", &[&s, &zero], &[]);
    // the branches read `h` and `w` from the enclosing graph
    let mut then_b = Builder::new(seed);
    let mut else_b = Builder::new(seed);
    if typed {
        then_b.node_named("then_add", "Add", &[&h, &w], &["then_out"], &[]);
        then_b.output_typed("then_out", &[1, 16]);
        else_b.node_named("else_mul", "Mul", &[&h, &w], &["else_out"], &[]);
        else_b.output_typed("else_out", &[1, 16]);
    } else {
        // shape arithmetic inside a branch: Reshape(h * w, Shape(h))
        then_b.node_named("then_mul", "Mul", &[&h, &w], &["then_prod"], &[]);
        then_b.node_named("then_shape", "Shape", &[&h], &["then_target"], &[]);
        then_b.node_named("then_reshape", "Reshape", &["then_prod", "then_target"], &["then_out"], &[]);
        then_b.output_untyped("then_out");
        else_b.node_named("else_add", "Add", &[&h, &w], &["else_out"], &[]);
        else_b.output_untyped("else_out");
    }
    let branches = [
        ("then_branch", builder::Attr::Graph(Box::new(then_b.finish_graph("then")))),
        ("else_branch", builder::Attr::Graph(Box::new(else_b.finish_graph("else")))),
    ];
    let y = b.node("If", &[&cond], &branches);
    let z = b.node("Sigmoid", &[&y], &[]);
    b.output(&z);
    b.finish("control_if")
}

/// A `for` Loop of `trips` iterations; with `scan`, its body's value at each step is stacked too.
fn control_loop(seed: u64, trips: i64, scan: bool) -> ModelProto {
    use builder::Attr;
    let mut b = Builder::new(seed);
    let x = b.input("x", &[1, 8]);
    let w = b.weight("w", &[1, 8]);
    let h = b.node("Relu", &[&x], &[]);
    let trip = b.const_i64("trip", &[], &[trips]);
    let go = b.const_i64("go_i64", &[], &[1]);
    let go = b.node("Cast", &[&go], &[("to", (DType::Bool.onnx_code() as i64).into())]);
    let mut body = Builder::new(seed);
    body.input_typed("i", DType::I64, &[], "");
    body.input_typed("cond_in", DType::Bool, &[], "");
    body.input_typed("y_in", DType::F32, &[Some(1), Some(8)], "");
    let yes = bident_tensor::HostTensor { dtype: DType::Bool, shape: vec![], data: vec![1] };
    body.node_named("keep_going", "Constant", &[], &["cond_out"], &[("value", Attr::Tensor(yes))]);
    body.node_named("step", "Add", &["y_in", &w], &["y_out"], &[]);
    let outputs: &[&str] = if scan {
        body.node_named("record", "Identity", &["y_out"], &["y_scan"], &[]);
        &["cond_out", "y_out", "y_scan"]
    } else {
        &["cond_out", "y_out"]
    };
    for o in outputs {
        body.output_untyped(o);
    }
    let loop_body = ("body", Attr::Graph(Box::new(body.finish_graph("body"))));
    let results: &[&str] = if scan { &["y_final", "ys"] } else { &["y_final"] };
    b.node_named("loop", "Loop", &[&trip, &go, &h], results, &[loop_body]);
    b.output("y_final");
    if scan {
        let z = b.node("Sigmoid", &["ys"], &[]);
        b.output(&z);
    }
    b.finish(if scan { "control_loop" } else { "loop_endless" })
}

fn control_scan(seed: u64) -> ModelProto {
    use builder::Attr;
    let mut b = Builder::new(seed);
    let x = b.input("x", &[4, 8]);
    let w = b.weight("w", &[8]);
    let h = b.node("Relu", &[&x], &[]);
    // the body reads `w` from the enclosing graph and declares none of its outputs' types
    let mut body = Builder::new(seed);
    body.input_typed("s_in", DType::F32, &[Some(8)], "");
    body.input_typed("x_t", DType::F32, &[Some(8)], "");
    body.node_named("acc", "Add", &["s_in", "x_t"], &["s_out"], &[]);
    body.node_named("scale", "Mul", &["s_out", &w], &["y_t"], &[]);
    for o in ["s_out", "y_t"] {
        body.output_untyped(o);
    }
    let scan_body = ("body", Attr::Graph(Box::new(body.finish_graph("body"))));
    b.node_named("scan", "Scan", &[&w, &h], &["s_final", "ys"], &[scan_body, ("num_scan_inputs", Attr::Int(1))]);
    // Reshape([4, 8] -> [8, 4]) with the target swapped from Shape: Split, then Concat
    let shape = b.node("Shape", &["ys"], &[]);
    b.node_named("halves", "Split", &[&shape], &["rows", "cols"], &[]);
    let target = b.node("Concat", &["cols", "rows"], &[("axis", Attr::Int(0))]);
    let r = b.node("Reshape", &["ys", &target], &[]);
    let z = b.node("Sigmoid", &[&r], &[]);
    b.output("s_final");
    b.output(&z);
    b.finish("control_scan")
}

fn mlp_builder(seed: u64, batch: Option<u64>) -> Builder {
    let mut b = Builder::new(seed);
    let mut h = match batch {
        Some(n) => b.input("x", &[n, 64]),
        None => b.input_dyn("x", &[None, Some(64)], "N"),
    };
    for (i, (k, n)) in [(64u64, 128u64), (128, 128), (128, 32)].into_iter().enumerate() {
        let w = b.weight(&format!("fc{i}.w"), &[k, n]);
        let bias = b.weight(&format!("fc{i}.b"), &[n]);
        let m = b.node("MatMul", &[&h, &w], &[]);
        let a = b.node("Add", &[&m, &bias], &[]);
        h = b.node("Relu", &[&a], &[]);
    }
    b.output(&h);
    b
}

fn mlp(seed: u64, batch: u64) -> ModelProto {
    mlp_builder(seed, Some(batch)).finish("mlp")
}

fn recurrent(seed: u64) -> ModelProto {
    use builder::Attr;
    let (t, batch, i, h) = (6u64, 2u64, 8u64, 8u64);
    let mut b = Builder::new(seed);
    let x = b.input("x", &[t, batch, i]);
    let (w, r, bias) =
        (b.weight("gru.w", &[2, 3 * h, i]), b.weight("gru.r", &[2, 3 * h, h]), b.weight("gru.b", &[2, 6 * h]));
    let attrs = [
        ("hidden_size", Attr::Int(h as i64)),
        ("direction", Attr::Str("bidirectional")),
        ("linear_before_reset", Attr::Int(1)),
    ];
    b.node_named("gru", "GRU", &[&x, &w, &r, &bias], &["gru_y", "gru_h"], &attrs);
    // [T, 2, B, H] -> [T, B, 2H]
    let y = b.node("Transpose", &["gru_y"], &[("perm", vec![0i64, 2, 1, 3].into())]);
    let shape = b.const_i64("seq_shape", &[3], &[t as i64, batch as i64, 2 * h as i64]);
    let y = b.node("Reshape", &[&y, &shape], &[]);
    let (w, r, bias) =
        (b.weight("rnn.w", &[1, h, 2 * h]), b.weight("rnn.r", &[1, h, h]), b.weight("rnn.b", &[1, 2 * h]));
    b.node_named("rnn", "RNN", &[&y, &w, &r, &bias], &["rnn_y", "rnn_h"], &[("hidden_size", Attr::Int(h as i64))]);
    b.output("rnn_y");
    b.output("gru_h");
    b.finish("recurrent")
}

fn attention(seed: u64) -> ModelProto {
    let (t, d) = (16u64, 32u64);
    let mut b = Builder::new(seed);
    let x = b.input("tokens", &[1, t, d]);
    let gamma = b.weight("ln.g", &[d]);
    let beta = b.weight("ln.b", &[d]);
    let ln = b.node("LayerNormalization", &[&x, &gamma, &beta], &[("axis", (-1i64).into())]);
    let proj = |b: &mut Builder, name: &str| {
        let w = b.weight(&format!("{name}.w"), &[d, d]);
        let bias = b.weight(&format!("{name}.b"), &[d]);
        let m = b.node("MatMul", &[&ln, &w], &[]);
        b.node("Add", &[&m, &bias], &[])
    };
    let q = proj(&mut b, "q");
    let k = proj(&mut b, "k");
    let v = proj(&mut b, "v");
    let kt = b.node("Transpose", &[&k], &[("perm", vec![0i64, 2, 1].into())]);
    let s = b.node("MatMul", &[&q, &kt], &[]);
    let scale = b.scalar_f32("scale", 1.0 / (d as f32).sqrt());
    let s = b.node("Mul", &[&s, &scale], &[]);
    let p = b.node("Softmax", &[&s], &[("axis", (-1i64).into())]);
    let o = b.node("MatMul", &[&p, &v], &[]);
    // shape arithmetic as exporters write it: reshape back through Shape -> Gather -> Concat
    let shp = b.node("Shape", &[&x], &[]);
    let i0 = b.const_i64("i0", &[], &[0]);
    let i1 = b.const_i64("i1", &[], &[1]);
    let n0 = b.node("Gather", &[&shp, &i0], &[("axis", 0i64.into())]);
    let n1 = b.node("Gather", &[&shp, &i1], &[("axis", 0i64.into())]);
    let ax = b.const_i64("ax0", &[1], &[0]);
    let u0 = b.node("Unsqueeze", &[&n0, &ax], &[]);
    let u1 = b.node("Unsqueeze", &[&n1, &ax], &[]);
    let minus1 = b.const_i64("minus1", &[1], &[-1]);
    let target = b.node("Concat", &[&u0, &u1, &minus1], &[("axis", 0i64.into())]);
    let o = b.node("Reshape", &[&o, &target], &[]);
    let res = b.node("Add", &[&o, &x], &[]);
    // GELU as exported: x * 0.5 * (1 + erf(x / sqrt 2))
    let sqrt2 = b.scalar_f32("sqrt2", std::f32::consts::SQRT_2);
    let half = b.scalar_f32("half", 0.5);
    let one = b.scalar_f32("one", 1.0);
    let dv = b.node("Div", &[&res, &sqrt2], &[]);
    let e = b.node("Erf", &[&dv], &[]);
    let e1 = b.node("Add", &[&e, &one], &[]);
    let m = b.node("Mul", &[&res, &e1], &[]);
    let g = b.node("Mul", &[&m, &half], &[]);
    b.output(&g);
    b.finish("attention")
}

/// Sizes of [`bert`].
pub struct Bert {
    pub layers: usize,
    pub hidden: u64,
    pub heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub positions: u64,
}

/// A BERT-style encoder with the node patterns PyTorch's exporter writes.
pub fn bert(seed: u64, c: &Bert) -> ModelProto {
    let (h, heads) = (c.hidden, c.heads);
    let dh = h / heads;
    let mut b = Builder::new(seed);
    let ids = b.input_typed("input_ids", DType::I64, &[Some(1), None], "seq");
    let mask = b.input_typed("attention_mask", DType::I64, &[Some(1), None], "seq");
    // embeddings: token + position (positions 0..seq from the ids' shape), then LayerNorm
    let tok_table = b.weight("embeddings.word", &[c.vocab, h]);
    let pos_table = b.weight("embeddings.position", &[c.positions, h]);
    let tok = b.node("Gather", &[&tok_table, &ids], &[("axis", 0i64.into())]);
    let shp = b.node("Shape", &[&ids], &[]);
    let one = b.const_i64("one_i", &[], &[1]);
    let zero = b.const_i64("zero_i", &[], &[0]);
    let seq = b.node("Gather", &[&shp, &one], &[("axis", 0i64.into())]);
    let range = b.node("Range", &[&zero, &seq, &one], &[]);
    let pos = b.node("Gather", &[&pos_table, &range], &[("axis", 0i64.into())]);
    let x = b.node("Add", &[&tok, &pos], &[]);
    let mut x = layer_norm(&mut b, &x, h, "embeddings.ln");
    // additive mask: (1 - mask) * -10000, shaped [1, 1, 1, seq]
    let ax12 = b.const_i64("axes12", &[2], &[1, 2]);
    let m = b.node("Unsqueeze", &[&mask, &ax12], &[]);
    let m = b.node("Cast", &[&m], &[("to", (DType::F32.onnx_code() as i64).into())]);
    let onef = b.scalar_f32("one_f", 1.0);
    let m = b.node("Sub", &[&onef, &m], &[]);
    let big = b.scalar_f32("neg_big", -10000.0);
    let mask_add = b.node("Mul", &[&m, &big], &[]);
    let scale = b.scalar_f32("scale", 1.0 / (dh as f32).sqrt());
    let heads_c = b.const_i64("heads", &[1], &[heads as i64]);
    let dh_c = b.const_i64("head_dim", &[1], &[dh as i64]);
    let h_c = b.const_i64("hidden", &[1], &[h as i64]);
    let ax0 = b.const_i64("ax0", &[1], &[0]);
    for l in 0..c.layers {
        let p = format!("layer{l}");
        let linear = |b: &mut Builder, x: &str, name: &str, i: u64, o: u64| {
            let w = b.weight(&format!("{p}.{name}.w"), &[i, o]);
            let bias = b.weight(&format!("{p}.{name}.b"), &[o]);
            let y = b.node("MatMul", &[x, &w], &[]);
            b.node("Add", &[&y, &bias], &[])
        };
        // [1, seq, h] -> [1, heads, seq, dh], the target shape computed from the input's shape
        let split_heads = |b: &mut Builder, t: &str| {
            let s = b.node("Shape", &[t], &[]);
            let n = b.node("Gather", &[&s, &zero], &[("axis", 0i64.into())]);
            let q = b.node("Gather", &[&s, &one], &[("axis", 0i64.into())]);
            let n = b.node("Unsqueeze", &[&n, &ax0], &[]);
            let q = b.node("Unsqueeze", &[&q, &ax0], &[]);
            let target = b.node("Concat", &[&n, &q, &heads_c, &dh_c], &[("axis", 0i64.into())]);
            let r = b.node("Reshape", &[t, &target], &[]);
            b.node("Transpose", &[&r], &[("perm", vec![0i64, 2, 1, 3].into())])
        };
        let q = linear(&mut b, &x, "q", h, h);
        let k = linear(&mut b, &x, "k", h, h);
        let v = linear(&mut b, &x, "v", h, h);
        let (q, k, v) = (split_heads(&mut b, &q), split_heads(&mut b, &k), split_heads(&mut b, &v));
        let kt = b.node("Transpose", &[&k], &[("perm", vec![0i64, 1, 3, 2].into())]);
        let s = b.node("MatMul", &[&q, &kt], &[]);
        let s = b.node("Mul", &[&s, &scale], &[]);
        let s = b.node("Add", &[&s, &mask_add], &[]);
        let pr = b.node("Softmax", &[&s], &[("axis", (-1i64).into())]);
        let o = b.node("MatMul", &[&pr, &v], &[]);
        let o = b.node("Transpose", &[&o], &[("perm", vec![0i64, 2, 1, 3].into())]);
        let so = b.node("Shape", &[&x], &[]);
        let n = b.node("Gather", &[&so, &zero], &[("axis", 0i64.into())]);
        let sq = b.node("Gather", &[&so, &one], &[("axis", 0i64.into())]);
        let n = b.node("Unsqueeze", &[&n, &ax0], &[]);
        let sq = b.node("Unsqueeze", &[&sq, &ax0], &[]);
        let target = b.node("Concat", &[&n, &sq, &h_c], &[("axis", 0i64.into())]);
        let o = b.node("Reshape", &[&o, &target], &[]);
        let o = linear(&mut b, &o, "o", h, h);
        let r = b.node("Add", &[&o, &x], &[]);
        let a = layer_norm(&mut b, &r, h, &format!("{p}.ln1"));
        let f = linear(&mut b, &a, "ffn1", h, c.ffn);
        let f = gelu(&mut b, &f);
        let f = linear(&mut b, &f, "ffn2", c.ffn, h);
        let r = b.node("Add", &[&f, &a], &[]);
        x = layer_norm(&mut b, &r, h, &format!("{p}.ln2"));
    }
    b.output(&x);
    b.finish("bert_encoder")
}

fn layer_norm(b: &mut Builder, x: &str, h: u64, name: &str) -> String {
    let g = b.weight(&format!("{name}.g"), &[h]);
    let beta = b.weight(&format!("{name}.b"), &[h]);
    b.node("LayerNormalization", &[x, &g, &beta], &[("axis", (-1i64).into())])
}

/// GELU as exported: x * 0.5 * (1 + erf(x / sqrt 2)).
fn gelu(b: &mut Builder, x: &str) -> String {
    let sqrt2 = b.scalar_f32("gelu.sqrt2", std::f32::consts::SQRT_2);
    let half = b.scalar_f32("gelu.half", 0.5);
    let one = b.scalar_f32("gelu.one", 1.0);
    let d = b.node("Div", &[x, &sqrt2], &[]);
    let e = b.node("Erf", &[&d], &[]);
    let e = b.node("Add", &[&e, &one], &[]);
    let m = b.node("Mul", &[x, &e], &[]);
    b.node("Mul", &[&m, &half], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_model_builds_deterministically() {
        for (name, _) in MODELS {
            let a = build_bytes(name, 7).expect(name);
            assert_eq!(a, build_bytes(name, 7).expect(name), "{name}");
            assert!(!a.is_empty());
        }
        assert_ne!(build_bytes("example", 1), build_bytes("example", 2));
        assert!(build("nope", 0).is_none());
    }

    #[test]
    fn externalize_moves_every_initializer() {
        let mut m = build("mlp", 0).unwrap();
        let inline: usize =
            m.graph.as_ref().unwrap().initializer.iter().map(|t| t.raw_data.as_ref().unwrap().len()).sum();
        let blob = externalize(&mut m, "w.bin");
        assert_eq!(blob.len(), inline);
        assert!(m.graph.unwrap().initializer.iter().all(|t| t.raw_data.is_none() && t.external_data.len() == 3));
    }
}
