//! Models with control flow as exporters write it: Loop, If and Scan whose bodies read the
//! enclosing graph and often declare no types.

use bident_ir::proto::ModelProto;
use bident_tensor::DType;

use crate::builder::{self, Builder};

pub(crate) fn control_if(seed: u64, typed: bool) -> ModelProto {
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
pub(crate) fn control_loop(seed: u64, trips: i64, scan: bool) -> ModelProto {
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

pub(crate) fn control_scan(seed: u64) -> ModelProto {
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
