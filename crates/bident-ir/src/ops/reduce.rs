//! Reductions.

use super::{Ctx, Fact, OpClass, Registry, Role, axis};

const REDUCE: &[&str] = &[
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

pub(super) fn register(r: &mut Registry) {
    r.add(REDUCE, (Role::Plain, OpClass::Reduction), infer_reduce, None);
}

fn infer_reduce(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    // axes became an input in opset 13 for ReduceSum and opset 18 for the others
    let axes_from_input = if c.node.op_type() == "ReduceSum" { c.opset >= 13 } else { c.opset >= 18 };
    let axes = if axes_from_input {
        if c.has_input(1) { Some(c.const_ints(1, "axes")?) } else { None }
    } else {
        c.attr_ints("axes")
    };
    let axes: Vec<usize> = match axes.filter(|a| !a.is_empty()) {
        Some(a) => a.iter().map(|&v| axis(v, x.len())).collect::<Result<_, _>>()?,
        None if c.attr_i("noop_with_empty_axes", 0) != 0 => return Ok(vec![c.input(0)?.clone()]),
        None => (0..x.len()).collect(),
    };
    let keep = c.attr_i("keepdims", 1) != 0;
    let shape = x
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(d),
        })
        .collect();
    Ok(vec![Fact::new(c.dtype(0)?, shape)])
}
