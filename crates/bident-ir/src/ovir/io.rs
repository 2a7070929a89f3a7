//! The graph's boundary: `Parameter` is a graph input, `Const` an initializer whose bytes are a
//! slice of the `.bin`, `Result` a graph output (under the name ovc kept for it).

use bident_tensor::DType;

use super::xml::element_type;
use super::{Args, Converter, Registry};
use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::{TensorShapeProto, TypeProto, ValueInfoProto, type_proto};

pub(super) fn register(r: &mut Registry) {
    // they check their ports themselves (a Result has no output port)
    r.add_outputs(&["Parameter"], 0, parameter);
    r.add_outputs(&["Const"], 0, constant);
    r.add_outputs(&["Result"], 0, result);
}

/// The element type from `element_type` (else the output port's); the dims from the output
/// port, which must agree with the `shape` attribute where that says a size.
fn parameter(c: &mut Converter, a: &Args) -> Result<(), String> {
    let l = a.l;
    let dtype = match l.attr("element_type") {
        Some(t) => element_type(t).ok_or_else(|| format!("element type `{t}` is not supported"))?,
        None => l.outputs.first().and_then(|p| p.dtype).ok_or("unknown element type")?,
    };
    let dims = l.outputs.first().map(|p| p.dims.clone()).unwrap_or_default();
    if let Some(shape) = l.attr("shape") {
        let declared = parameter_shape(shape)?;
        let agree = declared.len() == dims.len() && declared.iter().zip(&dims).all(|(&a, &b)| a < 0 || b < 0 || a == b);
        if !agree {
            return Err(format!("shape `{shape}` and its output port's dims {dims:?} differ"));
        }
    }
    let outs = c.name_outputs(a.id);
    let input = outs.first().ok_or("a Parameter without an output port")?;
    c.inputs.push(typed(input, dtype, &dims));
    Ok(())
}

/// A Parameter's `shape` attribute: each dim a size, `-1` or `?` (dynamic) or an interval
/// `a..b` (dynamic here); anything else is an error.
fn parameter_shape(s: &str) -> Result<Vec<i64>, String> {
    if s.trim().is_empty() {
        return Ok(vec![]);
    }
    s.split(',')
        .map(|d| {
            let d = d.trim();
            let bound = |b: &str| b.is_empty() || b.parse::<u64>().is_ok();
            match d {
                "?" | "-1" => Ok(-1),
                _ if d.split_once("..").is_some_and(|(a, b)| bound(a) && bound(b)) => Ok(-1),
                _ => d.parse::<u32>().map(i64::from).map_err(|_| format!("shape `{s}`: `{d}` is not a dim")),
            }
        })
        .collect()
}

/// `size` bytes at `offset` of the `.bin`, exactly as many as the element type and shape need.
fn constant(c: &mut Converter, a: &Args) -> Result<(), String> {
    let l = a.l;
    let dtype = element_type(l.attr("element_type").unwrap_or(""))
        .ok_or_else(|| format!("element type `{}` is not supported", l.attr("element_type").unwrap_or("")))?;
    let shape: Vec<u64> = l
        .ints("shape")?
        .into_iter()
        .map(|d| u64::try_from(d).map_err(|_| format!("shape has a negative dim {d}")))
        .collect::<Result<_, _>>()?;
    let (offset, size) = (l.ints("offset")?, l.ints("size")?);
    let (offset, size) = (*offset.first().unwrap_or(&0) as usize, *size.first().unwrap_or(&0) as usize);
    if bident_tensor::numel(&shape).checked_mul(dtype.size() as u64) != Some(size as u64) {
        return Err(format!("{dtype}{shape:?} needs more or fewer than its {size} bytes"));
    }
    let end = offset
        .checked_add(size)
        .filter(|&e| e <= c.bin.len())
        .ok_or_else(|| format!("bytes {offset}+{size} lie beyond the .bin file ({} bytes)", c.bin.len()))?;
    let data = c.bin.slice(offset..end);
    let outs = c.name_outputs(a.id);
    let out = outs.first().ok_or("a Const without an output port")?.clone();
    c.add_initializer(&out, dtype, shape, data);
    Ok(())
}

/// The graph output reads its source tensor, or an Identity of it where the Result's
/// `output_names` names the output otherwise.
fn result(c: &mut Converter, a: &Args) -> Result<(), String> {
    let src = a.i.first().ok_or("a Result without an input")?.to_string();
    let want = a.l.output_names.clone().and_then(|n| n.split(',').next().map(|s| s.trim().to_string()));
    let out = match want.filter(|w| *w != src) {
        Some(w) => {
            let w = c.unique(&w);
            c.node("Identity", a.name, &[&src], &[&w], vec![]);
            w
        }
        None => src,
    };
    let dtype = a.types.first().copied().flatten().ok_or("unknown element type")?;
    c.outputs.push(typed(&out, dtype, a.dims.first().map_or(&[][..], Vec::as_slice)));
    Ok(())
}

/// A value info with `-1` dims as symbolic dims `<name>_<axis>`.
fn typed(name: &str, dtype: DType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .enumerate()
        .map(|(k, &d)| Dimension {
            value: Some(if d >= 0 {
                dimension::Value::DimValue(d)
            } else {
                dimension::Value::DimParam(format!("{name}_{k}"))
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype.onnx_code()),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}
