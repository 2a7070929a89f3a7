//! Control flow: If, Loop, Scan. Each is carried whole as one opaque operator with its
//! subgraphs (their outer-scope reads count as the node's inputs, see `lower::node_uses`); only
//! their output types are inferred here, from the subgraphs' declared outputs.

use std::collections::HashMap;

use bident_tensor::{DType, HostTensor};

use super::{Ctx, Fact, OpClass, Registry, Role, axis};
use crate::proto::{GraphProto, ValueInfoProto, tensor_shape_proto::dimension::Value as Dim, type_proto};

pub(super) fn register(r: &mut Registry) {
    r.add(&["If"], (Role::Plain, OpClass::Control), infer_if, None);
    r.add(&["Loop"], (Role::Plain, OpClass::Control), infer_loop, None);
    r.add(&["Scan"], (Role::Plain, OpClass::Control), infer_scan, None);
}

/// Element type and shape of a subgraph output, if declared; dims may be unknown (None).
fn declared(v: &ValueInfoProto) -> Option<(DType, Option<Vec<Option<u64>>>)> {
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref()?.value.as_ref() else { return None };
    let dtype = DType::from_onnx(t.elem_type?)?;
    let dims = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(Dim::DimValue(v)) if v >= 0 => Some(v as u64),
                _ => None,
            })
            .collect()
    });
    Some((dtype, dims))
}

fn graph_attr<'a>(c: &Ctx<'a>, name: &str) -> Result<&'a GraphProto, String> {
    c.attr(name).and_then(|a| a.g.as_ref()).ok_or_else(|| format!("attribute `{name}` (a graph) is missing"))
}

fn static_output(g: &GraphProto, k: usize) -> Result<Fact, String> {
    let v = g.output.get(k).ok_or_else(|| format!("subgraph has no output {k}"))?;
    match declared(v) {
        Some((dtype, Some(dims))) => {
            let shape = dims.into_iter().collect::<Option<Vec<u64>>>().ok_or_else(|| {
                format!("subgraph output `{}` has no static shape (declare it in value_info)", v.name())
            })?;
            Ok(Fact::new(dtype, shape))
        }
        _ => Err(format!("subgraph output `{}` has no declared type", v.name())),
    }
}

fn infer_if(c: &Ctx) -> Result<Vec<Fact>, String> {
    let then_g = graph_attr(c, "then_branch")?;
    let else_g = graph_attr(c, "else_branch")?;
    // a constant condition picks the branch; otherwise both must agree
    let cond = c.const_at(0).map(|t| t.numel() > 0 && t.get_f64(0) != 0.0);
    (0..c.n_outputs())
        .map(|k| match cond {
            Some(true) => static_output(then_g, k),
            Some(false) => static_output(else_g, k),
            None => {
                let (a, b) = (static_output(then_g, k)?, static_output(else_g, k)?);
                if a == b { Ok(a) } else { Err(format!("branches disagree on output {k}: {a:?} vs {b:?}")) }
            }
        })
        .collect()
}

/// Output types of a subgraph (an If branch, a Loop or Scan body) that does not declare them, inferred
/// node by node (constants folded on the way, for shape arithmetic) from the types of its formal
/// inputs (`inputs`, in order) and the types and values of the tensors it reads from the
/// enclosing graph. Nested control flow must declare its types.
pub(crate) fn infer_subgraph(
    g: &GraphProto,
    inputs: &[Fact],
    opset: i64,
    outer_facts: &HashMap<String, Fact>,
    outer_consts: &HashMap<String, HostTensor>,
) -> Result<Vec<Fact>, String> {
    if g.input.len() != inputs.len() {
        return Err(format!("the subgraph takes {} inputs, the node gives it {}", g.input.len(), inputs.len()));
    }
    let mut facts: HashMap<String, Fact> =
        g.input.iter().zip(inputs).map(|(v, f)| (v.name().to_string(), f.clone())).collect();
    let mut consts: HashMap<String, HostTensor> = HashMap::new();
    for t in &g.initializer {
        let v = crate::consts::from_proto(t).map_err(|e| format!("initializer `{}`: {e}", t.name()))?;
        facts.insert(t.name().into(), Fact::new(v.dtype, v.shape.clone()));
        consts.insert(t.name().into(), v);
    }
    for n in &g.node {
        let what = || format!("`{}` ({})", n.name(), n.op_type());
        let def = super::lookup(n.domain(), n.op_type()).ok_or_else(|| format!("{}: unknown op", what()))?;
        let present: Vec<Option<&str>> = n.input.iter().map(|t| (!t.is_empty()).then_some(t.as_str())).collect();
        let fact = |t: &str| facts.get(t).or_else(|| outer_facts.get(t));
        let inputs = present
            .iter()
            .map(|t| t.map(|t| fact(t).ok_or_else(|| format!("{}: no type for `{t}`", what()))).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let ctx = Ctx {
            node: n,
            opset,
            inputs,
            consts: present.iter().map(|t| t.and_then(|t| consts.get(t).or_else(|| outer_consts.get(t)))).collect(),
            missing_const: std::cell::Cell::new(None),
        };
        let out = (def.infer)(&ctx).map_err(|e| format!("{}: {e}", what()))?;
        // Shape, Size and CastLike read some inputs only for their (static) type
        let type_only = super::type_only_inputs(n.op_type());
        let foldable = ctx
            .consts
            .iter()
            .zip(&present)
            .enumerate()
            .all(|(k, (c, t))| c.is_some() || t.is_none() || type_only.contains(&k))
            && out.iter().all(|f| bident_tensor::numel(&f.shape) <= 1 << 16);
        let values = match def.eval {
            Some(eval) if foldable => eval(&ctx).ok().filter(|v| v.len() == out.len()),
            _ => None,
        };
        for (k, (o, f)) in n.output.iter().zip(out).enumerate() {
            if let Some(v) = values.as_ref().and_then(|v| v.get(k)) {
                consts.insert(o.clone(), v.clone());
            }
            facts.insert(o.clone(), f);
        }
    }
    g.output
        .iter()
        .map(|o| {
            facts
                .get(o.name())
                .or_else(|| outer_facts.get(o.name()))
                .cloned()
                .ok_or_else(|| format!("branch output `{}` is never produced", o.name()))
        })
        .collect()
}

/// Loop(M, cond, v_initial...) -> (v_final..., scan_outputs...). Carried values keep their
/// initial type; a scan output stacks one body output per iteration, which needs the trip count
/// M as a constant, and a condition that cannot end the loop early: either no `cond` input, or
/// a body that passes its `cond` through unchanged or sets it to a constant true (then the loop
/// runs M times or, if `cond` starts false, not at all). A loop that may exit early has a data-dependent length.
fn infer_loop(c: &Ctx) -> Result<Vec<Fact>, String> {
    let body = graph_attr(c, "body")?;
    infer_loop_with(c, &|k| static_output(body, k))
}

/// [`infer_loop`] with the types of the body's outputs (cond, carried..., scan...) given.
pub(crate) fn infer_loop_with(
    c: &Ctx,
    body_output: &dyn Fn(usize) -> Result<Fact, String>,
) -> Result<Vec<Fact>, String> {
    let body = graph_attr(c, "body")?;
    let carried = c.inputs.len().saturating_sub(2);
    let mut out = Vec::with_capacity(c.n_outputs());
    for k in 0..c.n_outputs() {
        if k < carried {
            out.push(c.input(2 + k)?.clone());
        } else {
            let trip = c.const_ints(0, "trip count M")?.first().copied().ok_or("empty trip count")?;
            let trip = u64::try_from(trip).unwrap_or(0);
            let runs = if !c.has_input(1) {
                trip
            } else if passes_cond_through(body) {
                let cond = c.const_f64(1, "the loop condition")?;
                if cond.first().is_some_and(|&v| v != 0.0) { trip } else { 0 }
            } else {
                return Err(
                    "scan outputs of a Loop whose body computes its condition have a data-dependent length".into()
                );
            };
            let per_iter = body_output(1 + k)?;
            let mut shape = vec![runs];
            shape.extend(per_iter.shape);
            out.push(Fact::new(per_iter.dtype, shape));
        }
    }
    Ok(out)
}

/// Whether a Loop body keeps its condition: its condition output is its condition input
/// (directly or through Identity) or a constant true (as exporters write `for` loops).
fn passes_cond_through(body: &GraphProto) -> bool {
    let (Some(cond_in), Some(cond_out)) = (body.input.get(1), body.output.first()) else { return false };
    let out = cond_out.name();
    let is_true = |t: &crate::proto::TensorProto| {
        crate::consts::from_proto(t).is_ok_and(|v| v.numel() == 1 && v.get_f64(0) != 0.0)
    };
    out == cond_in.name()
        || body.initializer.iter().any(|t| t.name() == out && is_true(t))
        || body.node.iter().filter(|n| n.output.first().map(String::as_str) == Some(out)).any(|n| match n.op_type() {
            "Identity" => n.input.first().map(String::as_str) == Some(cond_in.name()),
            "Constant" => {
                n.attribute.iter().find(|a| a.name() == "value").and_then(|a| a.t.as_ref()).is_some_and(is_true)
            }
            _ => false,
        })
}

/// Scan (opset 9+): inputs are N states then M scanned sequences; outputs are N final states
/// then K stacked scan outputs, stacked along `scan_output_axes` (default 0).
fn infer_scan(c: &Ctx) -> Result<Vec<Fact>, String> {
    let body = graph_attr(c, "body")?;
    infer_scan_with(c, &|k| static_output(body, k))
}

/// The number of states and scanned inputs of a Scan (opset 9+) and the axes it scans along.
fn scan_inputs(c: &Ctx) -> Result<(usize, Vec<i64>), String> {
    let m = c.attr_i("num_scan_inputs", 0) as usize;
    let n = c.inputs.len().checked_sub(m).ok_or("num_scan_inputs exceeds the inputs")?;
    Ok((n, c.attr_ints("scan_input_axes").unwrap_or_else(|| vec![0; m])))
}

/// The types a Scan's body is given (opset 9+): each state's, then one slice of each scanned
/// input (its scan axis removed).
pub(crate) fn scan_body_inputs(c: &Ctx) -> Result<Vec<Fact>, String> {
    if c.opset < 9 {
        return Err("a Scan-8 body must declare its output types".into());
    }
    let (n, in_axes) = scan_inputs(c)?;
    let mut out: Vec<Fact> = (0..n).map(|k| c.input(k).cloned()).collect::<Result<_, _>>()?;
    for k in n..c.inputs.len() {
        let x = c.input(k)?;
        let a = axis(*in_axes.get(k - n).unwrap_or(&0), x.shape.len())?;
        let mut shape = x.shape.clone();
        shape.remove(a);
        out.push(Fact::new(x.dtype, shape));
    }
    Ok(out)
}

/// [`infer_scan`] with the types of the body's outputs (states..., scan outputs...) given.
pub(crate) fn infer_scan_with(
    c: &Ctx,
    body_output: &dyn Fn(usize) -> Result<Fact, String>,
) -> Result<Vec<Fact>, String> {
    if c.opset < 9 {
        return infer_scan8(c, body_output);
    }
    let (n, in_axes) = scan_inputs(c)?;
    let out_axes = c.attr_ints("scan_output_axes");
    let first_scan = c.shape(n).map_err(|_| "Scan has no scanned input".to_string())?;
    let seq = first_scan[axis(*in_axes.first().unwrap_or(&0), first_scan.len())?];
    let mut out = Vec::with_capacity(c.n_outputs());
    for k in 0..c.n_outputs() {
        if k < n {
            out.push(c.input(k)?.clone());
        } else {
            let per_iter = body_output(k)?;
            let rank = per_iter.shape.len() + 1;
            let a = out_axes.as_ref().and_then(|v| v.get(k - n)).copied().unwrap_or(0);
            let a = axis(a, rank)?;
            let mut shape = per_iter.shape;
            shape.insert(a, seq);
            out.push(Fact::new(per_iter.dtype, shape));
        }
    }
    Ok(out)
}

/// Scan-8: input 0 is the optional `sequence_lens`, then N states [batch, ...] and M sequences
/// [batch, seq, ...]; scan outputs are [batch, seq, ...].
fn infer_scan8(c: &Ctx, body_output: &dyn Fn(usize) -> Result<Fact, String>) -> Result<Vec<Fact>, String> {
    let m = c.attr_i("num_scan_inputs", 0) as usize;
    let n = c.inputs.len().checked_sub(1 + m).ok_or("num_scan_inputs exceeds the inputs")?;
    let first_scan = c.shape(1 + n).map_err(|_| "Scan has no scanned input".to_string())?;
    if first_scan.len() < 2 {
        return Err("scanned inputs must be [batch, sequence, ...]".into());
    }
    let (batch, seq) = (first_scan[0], first_scan[1]);
    (0..c.n_outputs())
        .map(|k| {
            if k < n {
                Ok(c.input(1 + k)?.clone())
            } else {
                let per_iter = body_output(k)?;
                let mut shape = vec![batch, seq];
                shape.extend(per_iter.shape);
                Ok(Fact::new(per_iter.dtype, shape))
            }
        })
        .collect()
}
