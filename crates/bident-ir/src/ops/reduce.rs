//! Reductions, and Unique (a pass over the data whose output size depends on the values).

use std::collections::HashSet;

use bident_tensor::DType;

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
    r.add(&["Unique"], (Role::Plain, OpClass::Reduction), infer_unique, None);
}

/// Unique -> (Y, indices, inverse_indices, counts). How many distinct elements (or slices along
/// `axis`) there are depends on the values, so the input must be known: a pinned input or a
/// constant.
fn infer_unique(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.required_const(0, "the input (its values fix the output size)")?;
    let dims = &x.shape;
    let (outer, len, inner, a) = match c.attr("axis").and_then(|a| a.i) {
        Some(a) => {
            let a = axis(a, dims.len())?;
            let prod = |d: &[u64]| d.iter().product::<u64>() as usize;
            (prod(&dims[..a]), dims[a] as usize, prod(&dims[a + 1..]), Some(a))
        }
        None => (1, x.numel(), 1, None),
    };
    // a slice's elements as bytes: integers as stored, floats with -0 equal to 0 and every NaN
    // equal to every other
    let size = x.dtype.size();
    let key = |j: usize| -> Vec<u8> {
        let mut k = Vec::with_capacity(outer * inner * 8);
        for o in 0..outer {
            for i in 0..inner {
                let e = (o * len + j) * inner + i;
                if x.dtype.is_float() {
                    let v = x.get_f64(e);
                    k.extend((if v.is_nan() { f64::NAN } else { v + 0.0 }).to_bits().to_le_bytes());
                } else {
                    k.extend_from_slice(&x.data[e * size..(e + 1) * size]);
                }
            }
        }
        k
    };
    let distinct = (0..len).map(key).collect::<HashSet<_>>().len() as u64;
    let y = match a {
        Some(a) => {
            let mut s = dims.clone();
            s[a] = distinct;
            s
        }
        None => vec![distinct],
    };
    let index = |n: u64| Fact::new(DType::I64, vec![n]);
    let all = [Fact::new(x.dtype, y), index(distinct), index(len as u64), index(distinct)];
    Ok(all.into_iter().take(c.n_outputs()).collect())
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
