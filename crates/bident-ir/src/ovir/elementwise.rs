//! Elementwise ops: the plain renamings (binary with numpy broadcasting, unary), integer
//! Divide, the ops ONNX spells in several nodes (NotEqual, SquaredDifference, Swish, Gelu),
//! Clamp, HardSigmoid, Elu, Mod, Convert, and Select (Where).

use super::xml::element_type;
use super::{A, Args, Converter, Registry};

/// `(OpenVINO type, ONNX op)` on two inputs, numpy broadcasting. `Divide` is not a plain row:
/// see [`divide`].
const BINARY: &[(&str, &str)] = &[
    ("Add", "Add"),
    ("Subtract", "Sub"),
    ("Multiply", "Mul"),
    ("Power", "Pow"),
    ("Maximum", "Max"),
    ("Minimum", "Min"),
    ("Equal", "Equal"),
    ("Less", "Less"),
    ("Greater", "Greater"),
    ("LessEqual", "LessOrEqual"),
    ("GreaterEqual", "GreaterOrEqual"),
    ("LogicalAnd", "And"),
    ("LogicalOr", "Or"),
    ("LogicalXor", "Xor"),
    ("PRelu", "PRelu"),
];

/// `(OpenVINO type, ONNX op)` on one input.
const UNARY: &[(&str, &str)] = &[
    ("ReLU", "Relu"),
    ("Relu", "Relu"),
    ("Sigmoid", "Sigmoid"),
    ("Tanh", "Tanh"),
    ("Exp", "Exp"),
    ("Log", "Log"),
    ("Sqrt", "Sqrt"),
    ("Abs", "Abs"),
    ("Negative", "Neg"),
    ("Erf", "Erf"),
    ("Floor", "Floor"),
    ("Ceiling", "Ceil"),
    ("Sin", "Sin"),
    ("Cos", "Cos"),
    ("Sign", "Sign"),
    ("SoftPlus", "Softplus"),
    ("HSwish", "HardSwish"),
    ("Mish", "Mish"),
    ("LogicalNot", "Not"),
    ("Identity", "Identity"),
];

pub(super) fn register(r: &mut Registry) {
    r.binaries(BINARY);
    r.renames(UNARY, 1);
    r.renames(&[("Select", "Where")], 3);
    r.add(&["Divide"], divide);
    r.add(&["NotEqual"], not_equal);
    r.add(&["SquaredDifference"], squared_difference);
    r.add(&["FloorMod", "Mod"], modulo);
    r.add(&["Clamp"], clamp);
    r.add(&["HardSigmoid"], hard_sigmoid);
    r.add(&["Elu"], elu);
    r.add(&["Swish"], swish);
    r.add(&["Gelu"], gelu);
    r.add(&["Convert", "ConvertLike"], convert);
}

/// A [`BINARY`] row: OpenVINO's `auto_broadcast` other than numpy (or none) is refused.
pub(super) fn binary(c: &mut Converter, a: &Args, op: &str) -> Result<(), String> {
    a.need(2)?;
    if let Some(b) = a.l.attr("auto_broadcast").filter(|b| !matches!(*b, "numpy" | "none")) {
        return Err(format!("auto_broadcast `{b}` is not supported"));
    }
    let outs = c.name_outputs(a.id);
    c.node(op, a.name, &a.i[..2], &[&outs[0]], vec![]);
    Ok(())
}

/// An integer Divide rounds down unless `m_pythondiv` is false; ONNX's Div truncates. Exactly:
/// floor(a / b) = (a - a mod b) / b with the mod taking the divisor's sign (ONNX Mod, fmod 0).
/// A float Divide is `Div`.
fn divide(c: &mut Converter, a: &Args) -> Result<(), String> {
    let int_in = a.types.first().copied().flatten().is_some_and(|t| !t.is_float());
    if !(int_in && a.l.attr("m_pythondiv") != Some("false")) {
        return binary(c, a, "Div");
    }
    let (name, i) = (a.name, &a.i);
    a.need(2)?;
    let outs = c.name_outputs(a.id);
    let m = c.op("Mod", name, &i[..2], vec![]);
    let d = c.op("Sub", name, &[i[0], &m], vec![]);
    c.node("Div", name, &[&d, i[1]], &[&outs[0]], vec![]);
    Ok(())
}

/// `Not(Equal(a, b))`.
fn not_equal(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(2)?;
    let outs = c.name_outputs(a.id);
    let e = c.op("Equal", a.name, &a.i[..2], vec![]);
    c.node("Not", a.name, &[&e], &[&outs[0]], vec![]);
    Ok(())
}

/// `(a - b) * (a - b)`.
fn squared_difference(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(2)?;
    let outs = c.name_outputs(a.id);
    let d = c.op("Sub", a.name, &a.i[..2], vec![]);
    c.node("Mul", a.name, &[&d, &d], &[&outs[0]], vec![]);
    Ok(())
}

/// `Mod` takes the dividend's sign: ONNX `Mod` with `fmod = 1`. `FloorMod` takes the divisor's:
/// `fmod = 0` on integers; on floats ONNX allows only `fmod = 1`, so the remainder is moved to
/// the divisor's sign where the two differ: `r = fmod(a, b); r + b where r != 0 and r * b < 0`.
fn modulo(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(2)?;
    let (name, i, dtype0) = (a.name, &a.i, a.dtype0());
    let outs = c.name_outputs(a.id);
    if a.l.ty == "Mod" || !dtype0.is_float() {
        let fmod = i64::from(a.l.ty == "Mod");
        c.node("Mod", name, &i[..2], &[&outs[0]], vec![("fmod", A::I(fmod))]);
        return Ok(());
    }
    let r = c.op("Mod", name, &i[..2], vec![("fmod", A::I(1))]);
    let zero = c.scalar(&format!("{name}/zero"), dtype0, 0.0)?;
    let rb = c.op("Mul", name, &[&r, i[1]], vec![]);
    let opposite = c.op("Less", name, &[&rb, &zero], vec![]);
    let shifted = c.op("Add", name, &[&r, i[1]], vec![]);
    c.node("Where", name, &[&opposite, &shifted, &r], &[&outs[0]], vec![]);
    Ok(())
}

/// `Clip` with the bounds as scalar constants of the data's type.
fn clamp(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i, dtype0) = (a.name, &a.i, a.dtype0());
    a.need(1)?;
    let (lo, hi) = (a.l.float("min")? as f64, a.l.float("max")? as f64);
    let lo = c.scalar(&format!("{name}/min"), dtype0, lo)?;
    let hi = c.scalar(&format!("{name}/max"), dtype0, hi)?;
    let outs = c.name_outputs(a.id);
    c.node("Clip", name, &[i[0], &lo, &hi], &[&outs[0]], vec![]);
    Ok(())
}

/// OpenVINO's alpha and beta are constant inputs, ONNX's attributes.
fn hard_sigmoid(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(3)?;
    let alpha = c.scalar_value(a.i[1], "alpha")?;
    let beta = c.scalar_value(a.i[2], "beta")?;
    let outs = c.name_outputs(a.id);
    c.node("HardSigmoid", a.name, &a.i[..1], &[&outs[0]], vec![("alpha", A::F(alpha)), ("beta", A::F(beta))]);
    Ok(())
}

fn elu(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let alpha = a.l.float("alpha")?;
    let outs = c.name_outputs(a.id);
    c.node("Elu", a.name, &a.i[..1], &[&outs[0]], vec![("alpha", A::F(alpha))]);
    Ok(())
}

/// `x * sigmoid(beta * x)`, or `x * sigmoid(x)` without a beta input.
fn swish(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let (name, i) = (a.name, &a.i);
    let s = match i.get(1) {
        Some(beta) => {
            let m = c.op("Mul", name, &[i[0], beta], vec![]);
            c.op("Sigmoid", name, &[&m], vec![])
        }
        None => c.op("Sigmoid", name, &i[..1], vec![]),
    };
    let outs = c.name_outputs(a.id);
    c.node("Mul", name, &[i[0], &s], &[&outs[0]], vec![]);
    Ok(())
}

/// Written out (opset 18 has no Gelu): `x * (1 + erf(x / sqrt 2)) * 0.5`, or with
/// `approximation_mode = tanh`, `x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) * 0.5`.
fn gelu(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i, dtype0) = (a.name, &a.i, a.dtype0());
    a.need(1)?;
    let mode = a.l.attr("approximation_mode").unwrap_or("ERF").to_ascii_uppercase();
    let outs = c.name_outputs(a.id);
    let half = c.scalar(&format!("{name}/half"), dtype0, 0.5)?;
    let one = c.scalar(&format!("{name}/one"), dtype0, 1.0)?;
    let inner = if mode == "TANH" {
        let k0 = c.scalar(&format!("{name}/c"), dtype0, 0.044715)?;
        let k = c.scalar(&format!("{name}/k"), dtype0, (2.0 / std::f64::consts::PI).sqrt())?;
        let x2 = c.op("Mul", name, &[i[0], i[0]], vec![]);
        let x3 = c.op("Mul", name, &[&x2, i[0]], vec![]);
        let cx3 = c.op("Mul", name, &[&x3, &k0], vec![]);
        let s = c.op("Add", name, &[i[0], &cx3], vec![]);
        let ks = c.op("Mul", name, &[&s, &k], vec![]);
        c.op("Tanh", name, &[&ks], vec![])
    } else {
        let sqrt2 = c.scalar(&format!("{name}/sqrt2"), dtype0, std::f64::consts::SQRT_2)?;
        let d = c.op("Div", name, &[i[0], &sqrt2], vec![]);
        c.op("Erf", name, &[&d], vec![])
    };
    let e1 = c.op("Add", name, &[&inner, &one], vec![]);
    let m = c.op("Mul", name, &[i[0], &e1], vec![]);
    c.node("Mul", name, &[&m, &half], &[&outs[0]], vec![]);
    Ok(())
}

/// `Convert` is `Cast` to `destination_type`, `ConvertLike` is `CastLike`.
fn convert(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let outs = c.name_outputs(a.id);
    if a.l.ty == "ConvertLike" {
        a.need(2)?;
        c.node("CastLike", a.name, &a.i[..2], &[&outs[0]], vec![]);
    } else {
        let to = element_type(a.l.attr("destination_type").unwrap_or("")).ok_or("unsupported destination_type")?;
        c.node("Cast", a.name, &a.i[..1], &[&outs[0]], vec![("to", A::I(to.onnx_code() as i64))]);
    }
    Ok(())
}

impl Converter<'_> {
    fn scalar_value(&self, t: &str, what: &str) -> Result<f32, String> {
        let (dtype, _, data) = self.consts.get(t).ok_or_else(|| format!("{what} must be a constant"))?;
        let v = bident_tensor::HostTensor {
            dtype: *dtype,
            shape: vec![],
            data: data[..dtype.size().min(data.len())].to_vec(),
        };
        if v.data.len() != dtype.size() {
            return Err(format!("{what} is empty"));
        }
        Ok(v.get_f64(0) as f32)
    }
}
