//! Deliberately broken models, `bad-*`, for the bad-input tests: each is wrong in one way an
//! importer must refuse with a message, never a panic (and never by reading a file it names).

use bident_ir::proto::{ModelProto, tensor_proto::DataLocation};
use bident_tensor::DType;

use crate::builder::{self, Builder};

/// Build the broken model `name` (its `bad-` prefix included); None for an unknown name.
pub(crate) fn build(name: &str, seed: u64) -> Option<ModelProto> {
    graph(name, seed)
        .or_else(|| tensors(name, seed))
        .or_else(|| header(name, seed))
        .or_else(|| shapes(name, seed))
        .or_else(|| dtypes_and_sizes(name, seed))
        .or_else(|| branches(name, seed))
}

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

/// Wrong as a graph: a dangling input, a cycle, an unknown op, a name given twice.
fn graph(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
        "bad-duplicate-output" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            b.node_named("a", "Relu", &[&x], &["y"], &[]);
            b.node_named("b", "Sigmoid", &[&x], &["y"], &[]);
            b.output("y");
            b.finish("bad_duplicate_output")
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
        _ => return None,
    })
}

/// A tensor wrong in its name, its storage or its external data.
fn tensors(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
        "bad-external-absolute" => external_ref(ExternalPlace::Main, "/etc/passwd", seed),
        "bad-external-if" => external_ref(ExternalPlace::IfBranch, "../outside.bin", seed),
        "bad-external-loop-constant" => external_ref(ExternalPlace::LoopConstant, "/etc/passwd", seed),
        _ => return None,
    })
}

/// The model's header or a graph input's type wrong.
fn header(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
        _ => return None,
    })
}

/// An op whose shape rule must refuse its inputs or attributes.
fn shapes(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
        "bad-gather-scalar" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[]);
            let i = b.const_i64("i", &[], &[0]);
            let y = b.node("Gather", &[&x, &i], &[("axis", 0i64.into())]);
            b.output(&y);
            b.finish("bad_gather_scalar")
        }
        "bad-matmul-inner" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[1, 8]);
            let w = b.weight("w", &[4, 4]);
            let y = b.node("MatMul", &[&x, &w], &[]);
            b.output(&y);
            b.finish("bad_matmul_inner")
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

/// Mismatched element types, or a tensor too large to compute.
fn dtypes_and_sizes(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
        "bad-add-dtypes" => {
            let mut b = Builder::new(seed);
            let x = b.input("x", &[2]);
            let c = b.const_i64("c", &[2], &[1, 2]);
            let y = b.node("Add", &[&x, &c], &[]);
            b.output(&y);
            b.finish("bad_add_dtypes")
        }
        _ => return None,
    })
}

/// An If whose branches do not agree with it or with each other.
fn branches(name: &str, seed: u64) -> Option<ModelProto> {
    Some(match name {
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
