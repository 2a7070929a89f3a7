//! Elementwise ops: unary activations and math, broadcasting binary ops, comparisons, Where,
//! Cast. Small constant inputs are evaluated (shape arithmetic in exported transformers).

use bident_tensor::{DType, HostTensor};

use super::{Ctx, Fact, OpClass, Registry, Role, broadcast, same_as_input0};
use crate::consts::{from_f64, to_f64};

const ACTIVATIONS: &[&str] = &[
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Swish",
    "Tanh",
    "Clip",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Softplus",
    "Softsign",
    "Mish",
    "ThresholdedRelu",
    "PRelu",
];

const UNARY: &[&str] = &[
    "Exp",
    "Log",
    "Sqrt",
    "Abs",
    "Neg",
    "Erf",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Sign",
    "Identity",
    "Not",
    "BitwiseNot",
];

const ARITH: &[&str] = &["Add", "Sub", "Mul", "Div"];
const BINARY: &[&str] = &[
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Mod",
    "And",
    "Or",
    "Xor",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
];
const COMPARE: &[&str] = &["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"];

pub(super) fn register(r: &mut Registry) {
    r.add(ACTIVATIONS, (Role::Activation, OpClass::Elementwise), same_as_input0, Some(eval_unary));
    r.add(UNARY, (Role::Plain, OpClass::Elementwise), same_as_input0, Some(eval_unary));
    r.add(
        &["IsNaN", "IsInf"],
        (Role::Plain, OpClass::Elementwise),
        |c| Ok(vec![Fact::new(DType::Bool, c.shape(0)?.to_vec())]),
        None,
    );
    r.add(ARITH, (Role::Affine, OpClass::Elementwise), infer_binary, Some(eval_binary));
    r.add(BINARY, (Role::Plain, OpClass::Elementwise), infer_binary, Some(eval_binary));
    r.add(COMPARE, (Role::Plain, OpClass::Elementwise), infer_compare, Some(eval_binary));
    r.add(&["Where"], (Role::Plain, OpClass::Elementwise), infer_where, Some(eval_where));
    r.add(&["Cast"], (Role::Plain, OpClass::Elementwise), infer_cast, Some(eval_cast));
    r.add(
        &["CastLike"],
        (Role::Plain, OpClass::Elementwise),
        |c| Ok(vec![Fact::new(c.dtype(1)?, c.shape(0)?.to_vec())]),
        Some(|c| Ok(vec![cast(c.const_at(0).ok_or("not constant")?, c.dtype(1)?)])),
    );
    r.add(&["Dropout"], (Role::Plain, OpClass::Elementwise), infer_dropout, None);
}

fn infer_binary(c: &Ctx) -> Result<Vec<Fact>, String> {
    // Sum, Mean, Max and Min take one or more inputs; every other op here exactly two
    let variadic = matches!(c.node.op_type(), "Sum" | "Mean" | "Max" | "Min");
    let n = c.inputs.len();
    if n == 0 || (!variadic && n != 2) {
        return Err(format!("takes {} inputs, got {n}", if variadic { "one or more" } else { "two" }));
    }
    // one element type for all inputs (Pow alone allows a different exponent type)
    if c.node.op_type() != "Pow" {
        let d0 = c.dtype(0)?;
        if let Some(i) = (1..n).find(|&i| c.dtype(i).is_ok_and(|d| d != d0)) {
            return Err(format!("input {i} is {}, input 0 is {d0}: the element types must match", c.dtype(i)?));
        }
    }
    let shapes = (0..c.inputs.len()).map(|i| c.shape(i)).collect::<Result<Vec<_>, _>>()?;
    Ok(vec![Fact::new(c.dtype(0)?, broadcast(&shapes)?)])
}

fn infer_compare(c: &Ctx) -> Result<Vec<Fact>, String> {
    let mut f = infer_binary(c)?;
    f[0].dtype = DType::Bool;
    Ok(f)
}

fn infer_where(c: &Ctx) -> Result<Vec<Fact>, String> {
    let s = broadcast(&[c.shape(0)?, c.shape(1)?, c.shape(2)?])?;
    Ok(vec![Fact::new(c.dtype(1)?, s)])
}

fn cast_target(c: &Ctx) -> Result<DType, String> {
    let to = c.attr_i("to", 0) as i32;
    DType::from_onnx(to).ok_or_else(|| format!("Cast to unsupported type code {to}"))
}

fn infer_cast(c: &Ctx) -> Result<Vec<Fact>, String> {
    Ok(vec![Fact::new(cast_target(c)?, c.shape(0)?.to_vec())])
}

fn infer_dropout(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.input(0)?.clone();
    let mut out = vec![x.clone()];
    if c.n_outputs() > 1 {
        out.push(Fact::new(DType::Bool, x.shape));
    }
    Ok(out)
}

/// Inputs that must all be constants for evaluation.
fn all_consts<'a>(c: &Ctx<'a>) -> Result<Vec<&'a HostTensor>, String> {
    c.consts.iter().map(|t| t.ok_or_else(|| "not constant".to_string())).collect()
}

fn eval_unary(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = all_consts(c)?[0];
    let op = c.node.op_type();
    let f: fn(f64) -> f64 = match op {
        "Identity" => |v| v,
        "Neg" => |v| -v,
        "Abs" => f64::abs,
        "Floor" => f64::floor,
        "Ceil" => f64::ceil,
        "Sqrt" => f64::sqrt,
        "Reciprocal" => |v| 1.0 / v,
        "Relu" => |v| v.max(0.0),
        "Not" => |v| (v == 0.0) as u8 as f64,
        "Sign" => |v| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                0.0
            }
        },
        _ => return Err(format!("no constant evaluation for {op}")),
    };
    let v: Vec<f64> = to_f64(x).into_iter().map(f).collect();
    Ok(vec![from_f64(x.dtype, x.shape.clone(), &v)])
}

/// Row-major strides of `shape` broadcast into `out`: 0 where the dim is broadcast.
fn broadcast_strides(shape: &[u64], out: &[u64]) -> Vec<usize> {
    let off = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        strides[off + i] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i] as usize;
    }
    strides
}

/// Evaluate an n-ary broadcasting op on constants.
pub(super) fn broadcast_map(
    inputs: &[&HostTensor],
    dtype: DType,
    f: impl Fn(&[f64]) -> f64,
) -> Result<HostTensor, String> {
    let shapes: Vec<&[u64]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let out = broadcast(&shapes)?;
    let vals: Vec<Vec<f64>> = inputs.iter().map(|t| to_f64(t)).collect();
    let strides: Vec<Vec<usize>> = inputs.iter().map(|t| broadcast_strides(&t.shape, &out)).collect();
    let n = bident_tensor::numel(&out) as usize;
    let mut idx = vec![0usize; out.len()];
    let mut res = Vec::with_capacity(n);
    let mut args = vec![0.0; inputs.len()];
    for _ in 0..n {
        for (k, a) in args.iter_mut().enumerate() {
            let off: usize = idx.iter().zip(&strides[k]).map(|(i, s)| i * s).sum();
            *a = vals[k][off];
        }
        res.push(f(&args));
        for d in (0..out.len()).rev() {
            idx[d] += 1;
            if (idx[d] as u64) < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(from_f64(dtype, out, &res))
}

fn eval_binary(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let xs = all_consts(c)?;
    let op = c.node.op_type();
    if op == "Mod" {
        // fmod=0: the result takes the divisor's sign (integers only); fmod=1: C fmod
        let fmod = c.attr_i("fmod", 0) != 0;
        return Ok(vec![broadcast_map(&xs, xs[0].dtype, |a| {
            if a[1] == 0.0 {
                0.0
            } else if fmod {
                a[0] % a[1]
            } else {
                a[0] - a[1] * (a[0] / a[1]).floor()
            }
        })?]);
    }
    let int = !xs[0].dtype.is_float();
    let dtype = if COMPARE.contains(&op) { DType::Bool } else { xs[0].dtype };
    let f: fn(&[f64], bool) -> f64 = match op {
        "Add" | "Sum" => |a, _| a.iter().sum(),
        "Sub" => |a, _| a[0] - a[1],
        "Mul" => |a, _| a[0] * a[1],
        "Div" => |a, int| if int { (a[0] / a[1]).trunc() } else { a[0] / a[1] },
        "Max" => |a, _| a.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "Min" => |a, _| a.iter().copied().fold(f64::INFINITY, f64::min),
        "Equal" => |a, _| (a[0] == a[1]) as u8 as f64,
        "Less" => |a, _| (a[0] < a[1]) as u8 as f64,
        "Greater" => |a, _| (a[0] > a[1]) as u8 as f64,
        "LessOrEqual" => |a, _| (a[0] <= a[1]) as u8 as f64,
        "GreaterOrEqual" => |a, _| (a[0] >= a[1]) as u8 as f64,
        "And" => |a, _| (a[0] != 0.0 && a[1] != 0.0) as u8 as f64,
        "Or" => |a, _| (a[0] != 0.0 || a[1] != 0.0) as u8 as f64,
        _ => return Err(format!("no constant evaluation for {op}")),
    };
    Ok(vec![broadcast_map(&xs, dtype, |a| f(a, int))?])
}

fn eval_where(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let xs = all_consts(c)?;
    Ok(vec![broadcast_map(&xs, xs[1].dtype, |a| if a[0] != 0.0 { a[1] } else { a[2] })?])
}

fn eval_cast(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    Ok(vec![cast(all_consts(c)?[0], cast_target(c)?)])
}

fn cast(x: &HostTensor, to: DType) -> HostTensor {
    if !x.dtype.is_float() && !to.is_float() && to != DType::Bool {
        // integer to integer keeps the low bits, as the ONNX spec says
        return crate::consts::from_i64_wrapping(to, x.shape.clone(), &crate::consts::to_i64(x));
    }
    let mut v = to_f64(x);
    if !to.is_float() && x.dtype.is_float() {
        v.iter_mut().for_each(|e| *e = e.trunc());
    }
    from_f64(to, x.shape.clone(), &v)
}
