//! Shape and data-movement ops: Reshape, Transpose, (Un)Squeeze, Concat, Split, Slice, Gather,
//! Scatter, Expand, Tile, Pad, Resize, Shape, Size, ConstantOfShape, Range, Constant.
//! The ones that appear in shape arithmetic are evaluated on constants.

use bident_tensor::{DType, HostTensor};

use super::elementwise::broadcast_map;
use super::{Ctx, Fact, OpClass, Registry, Role, axis, broadcast};
use crate::consts::{from_f64, from_proto, to_f64};

pub(super) fn register(r: &mut Registry) {
    r.add(&["Reshape"], (Role::Plain, OpClass::Movement), infer_reshape, Some(eval_reshape));
    r.add(&["Flatten"], (Role::Plain, OpClass::Movement), infer_flatten, Some(eval_reshape));
    r.add(&["Transpose"], (Role::Plain, OpClass::Movement), infer_transpose, Some(eval_transpose));
    r.add(&["Squeeze"], (Role::Plain, OpClass::Movement), infer_squeeze, Some(eval_reshape));
    r.add(&["Unsqueeze"], (Role::Plain, OpClass::Movement), infer_unsqueeze, Some(eval_reshape));
    r.add(&["Concat"], (Role::Plain, OpClass::Movement), infer_concat, Some(eval_concat));
    r.add(&["Split"], (Role::Plain, OpClass::Movement), infer_split, Some(eval_split));
    r.add(&["Slice"], (Role::Plain, OpClass::Movement), infer_slice, Some(eval_slice));
    r.add(&["Gather"], (Role::Plain, OpClass::Gather), infer_gather, Some(eval_gather));
    r.add(
        &["GatherElements"],
        (Role::Plain, OpClass::Gather),
        |c| Ok(vec![Fact::new(c.dtype(0)?, c.shape(1)?.to_vec())]),
        None,
    );
    r.add(&["GatherND"], (Role::Plain, OpClass::Gather), infer_gather_nd, None);
    r.add(
        &["ScatterND", "ScatterElements", "Scatter"],
        (Role::Plain, OpClass::Gather),
        |c| Ok(vec![c.input(0)?.clone()]),
        None,
    );
    r.add(&["Expand"], (Role::Plain, OpClass::Movement), infer_expand, Some(eval_expand));
    r.add(&["Tile"], (Role::Plain, OpClass::Movement), infer_tile, None);
    r.add(&["Pad"], (Role::Plain, OpClass::Movement), infer_pad, None);
    r.add(&["Resize", "Upsample"], (Role::Plain, OpClass::Movement), infer_resize, None);
    r.add(&["DepthToSpace", "SpaceToDepth"], (Role::Plain, OpClass::Movement), infer_depth_space, None);
    r.add(&["Shape"], (Role::Plain, OpClass::Movement), infer_shape_op, Some(eval_shape_op));
    r.add(&["Size"], (Role::Plain, OpClass::Movement), |_| Ok(vec![Fact::new(DType::I64, vec![])]), Some(eval_size));
    r.add(
        &["ConstantOfShape"],
        (Role::Plain, OpClass::Movement),
        infer_constant_of_shape,
        Some(eval_constant_of_shape),
    );
    r.add(
        &["Range"],
        (Role::Plain, OpClass::Movement),
        |c| Ok(vec![Fact::new(c.dtype(0)?, vec![range_params(c)?.2])]),
        Some(|c| Ok(vec![range(c)?])),
    );
    r.add(
        &["Constant"],
        (Role::Plain, OpClass::Movement),
        |c| Ok(vec![fact_of(&constant(c)?)]),
        Some(|c| Ok(vec![constant(c)?])),
    );
}

fn fact_of(t: &HostTensor) -> Fact {
    Fact::new(t.dtype, t.shape.clone())
}

fn non_negative(v: &[i64], what: &str) -> Result<Vec<u64>, String> {
    v.iter().map(|&d| u64::try_from(d).map_err(|_| format!("{what} {v:?} has a negative entry"))).collect()
}

fn infer_reshape(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let target = if c.opset < 5 { c.attr_ints("shape").ok_or("shape is required")? } else { c.const_ints(1, "shape")? };
    let allow_zero = c.attr_i("allowzero", 0) != 0;
    let total = super::checked_numel(x)?;
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            0 if !allow_zero => out.push(*x.get(i).ok_or("0 in shape beyond the input rank")?),
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            d if d >= 0 => out.push(d as u64),
            _ => return Err(format!("invalid target shape {target:?}")),
        }
    }
    let known = super::checked_numel(&out)?;
    if let Some(i) = infer_at {
        if known == 0 || !total.is_multiple_of(known) {
            return Err(format!("cannot reshape {x:?} to {target:?}"));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(format!("cannot reshape {x:?} ({total} elements) to {out:?}"));
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_flatten(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let a = c.attr_i("axis", 1);
    let a = if a < 0 { a + x.len() as i64 } else { a } as usize;
    if a > x.len() {
        return Err(format!("axis {a} out of range"));
    }
    Ok(vec![Fact::new(c.dtype(0)?, vec![super::checked_numel(&x[..a])?, super::checked_numel(&x[a..])?])])
}

/// Every op whose result is its input with a new shape.
fn eval_reshape(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = c.const_at(0).ok_or("not constant")?;
    let shape = (super::lookup("", c.node.op_type()).ok_or("unknown")?.infer)(c)?.remove(0).shape;
    Ok(vec![HostTensor { dtype: x.dtype, shape, data: x.data.clone() }])
}

fn infer_transpose(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let perm = transpose_perm(c, x.len())?;
    let out = perm.iter().map(|&a| x[a]).collect();
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

/// The permutation of a Transpose (checked: each axis once).
fn transpose_perm(c: &Ctx, rank: usize) -> Result<Vec<usize>, String> {
    let perm = c.attr_ints("perm").unwrap_or_else(|| (0..rank as i64).rev().collect());
    let perm: Vec<usize> = perm.iter().map(|&p| axis(p, rank)).collect::<Result<_, _>>()?;
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(format!("perm {perm:?} is not a permutation of {rank} axes"));
    }
    Ok(perm)
}

/// A constant Transpose, element by element (as bytes: any element type).
fn eval_transpose(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = c.const_at(0).ok_or("not constant")?;
    let rank = x.shape.len();
    let perm = transpose_perm(c, rank)?;
    let out_shape: Vec<u64> = perm.iter().map(|&a| x.shape[a]).collect();
    let size = x.dtype.size();
    // input strides in elements, taken in output-axis order
    let mut strides = vec![1u64; rank];
    for a in (0..rank.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * x.shape[a + 1];
    }
    let strides: Vec<u64> = perm.iter().map(|&a| strides[a]).collect();
    let n = x.numel();
    let mut data = Vec::with_capacity(x.data.len());
    let mut idx = vec![0u64; rank];
    for _ in 0..n {
        let src = idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<u64>() as usize * size;
        data.extend_from_slice(x.data.get(src..src + size).ok_or("constant shorter than its shape")?);
        for a in (0..rank).rev() {
            idx[a] += 1;
            if idx[a] < out_shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(vec![HostTensor { dtype: x.dtype, shape: out_shape, data }])
}

fn axes_arg(c: &Ctx) -> Result<Option<Vec<i64>>, String> {
    if c.opset >= 13 {
        if c.has_input(1) { Ok(Some(c.const_ints(1, "axes")?)) } else { Ok(None) }
    } else {
        Ok(c.attr_ints("axes"))
    }
}

fn infer_squeeze(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let out = match axes_arg(c)? {
        Some(axes) => {
            let axes: Vec<usize> = axes.iter().map(|&a| axis(a, x.len())).collect::<Result<_, _>>()?;
            if let Some(a) = axes.iter().find(|&&a| x[a] != 1) {
                return Err(format!("cannot squeeze axis {a} of size {}", x[*a]));
            }
            x.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect()
        }
        None => x.iter().copied().filter(|&d| d != 1).collect(),
    };
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_unsqueeze(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let axes = axes_arg(c)?.ok_or("axes are required")?;
    let rank = x.len() + axes.len();
    let mut axes: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Result<_, _>>()?;
    axes.sort_unstable();
    let mut src = x.iter();
    let out = (0..rank)
        .map(|i| if axes.contains(&i) { Some(1) } else { src.next().copied() })
        .collect::<Option<Vec<_>>>()
        .ok_or("bad axes")?;
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_concat(c: &Ctx) -> Result<Vec<Fact>, String> {
    let first = c.shape(0)?;
    let ax = axis(c.attr_i("axis", 0), first.len())?;
    let mut out = first.to_vec();
    out[ax] = 0;
    for i in 0..c.inputs.len() {
        let s = c.shape(i)?;
        if c.dtype(i)? != c.dtype(0)? {
            return Err(format!("inputs of types {} and {} cannot be concatenated", c.dtype(0)?, c.dtype(i)?));
        }
        if s.len() != first.len() || s.iter().enumerate().any(|(k, &d)| k != ax && d != first[k]) {
            return Err(format!("input shapes {first:?} and {s:?} do not concatenate on axis {ax}"));
        }
        out[ax] += s[ax];
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn eval_concat(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let out = infer_concat(c)?.remove(0);
    let ax = axis(c.attr_i("axis", 0), out.shape.len())?;
    let inputs: Vec<&HostTensor> = c.consts.iter().map(|t| t.ok_or("not constant")).collect::<Result<_, _>>()?;
    let outer: u64 = out.shape[..ax].iter().product();
    let es = out.dtype.size();
    let mut data = Vec::with_capacity(bident_tensor::numel(&out.shape) as usize * es);
    for o in 0..outer as usize {
        for t in &inputs {
            let chunk = t.shape[ax..].iter().product::<u64>() as usize * es;
            data.extend_from_slice(&t.data[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(vec![HostTensor { dtype: out.dtype, shape: out.shape, data }])
}

fn infer_split(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let ax = axis(c.attr_i("axis", 0), x.len())?;
    let n = c.n_outputs() as u64;
    let split: Vec<u64> = if c.opset >= 13 && c.has_input(1) {
        non_negative(&c.const_ints(1, "split")?, "split")?
    } else if let Some(s) = c.attr_ints("split").filter(|_| c.opset < 13) {
        non_negative(&s, "split")?
    } else {
        let d = x[ax];
        let chunk = d.div_ceil(n.max(1));
        (0..n).map(|i| chunk.min(d.saturating_sub(i * chunk))).collect()
    };
    let total = split.iter().try_fold(0u64, |a, &v| a.checked_add(v));
    if split.len() as u64 != n || total != Some(x[ax]) {
        return Err(format!("split {split:?} does not divide dim {} into {n} outputs", x[ax]));
    }
    Ok(split
        .iter()
        .map(|&s| {
            let mut sh = x.to_vec();
            sh[ax] = s;
            Fact { dtype: c.input(0).map(|f| f.dtype).unwrap_or(DType::F32), shape: sh }
        })
        .collect())
}

fn eval_split(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = c.const_at(0).ok_or("not constant")?;
    let outs = infer_split(c)?;
    let ax = axis(c.attr_i("axis", 0), x.shape.len())?;
    let outer = x.shape[..ax].iter().product::<u64>() as usize;
    let inner = x.shape[ax + 1..].iter().product::<u64>() as usize * x.dtype.size();
    let row = x.shape[ax] as usize * inner;
    let mut start = 0;
    let mut res = Vec::with_capacity(outs.len());
    for f in outs {
        let chunk = f.shape[ax] as usize * inner;
        let mut data = Vec::with_capacity(outer * chunk);
        for o in 0..outer {
            data.extend_from_slice(x.data.get(o * row + start..o * row + start + chunk).ok_or("input too short")?);
        }
        start += chunk;
        res.push(HostTensor { dtype: x.dtype, shape: f.shape, data });
    }
    Ok(res)
}

/// Resolved (start, step, count) per axis of a Slice.
fn slice_params(c: &Ctx) -> Result<Vec<(i64, i64, u64)>, String> {
    let x = c.shape(0)?;
    let (starts, ends, axes, steps) = if c.opset < 10 {
        (
            c.attr_ints("starts").ok_or("starts required")?,
            c.attr_ints("ends").ok_or("ends required")?,
            c.attr_ints("axes"),
            None,
        )
    } else {
        (
            c.const_ints(1, "starts")?,
            c.const_ints(2, "ends")?,
            if c.has_input(3) { Some(c.const_ints(3, "axes")?) } else { None },
            if c.has_input(4) { Some(c.const_ints(4, "steps")?) } else { None },
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err("starts, ends, axes and steps differ in length".into());
    }
    let mut params: Vec<(i64, i64, u64)> = x.iter().map(|&d| (0, 1, d)).collect();
    for k in 0..starts.len() {
        let a = axis(axes[k], x.len())?;
        let d = x[a] as i64;
        let step = steps[k];
        if step == 0 {
            return Err("slice step 0".into());
        }
        let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = if step > 0 {
            (clamp(norm(starts[k]), 0, d), clamp(norm(ends[k]), 0, d))
        } else {
            (clamp(norm(starts[k]), 0, d - 1), clamp(norm(ends[k]), -1, d - 1))
        };
        let span = if step > 0 { (e - s).max(0) as u64 } else { (s - e).max(0) as u64 };
        let count = span.div_ceil(step.unsigned_abs());
        params[a] = (s, step, count);
    }
    Ok(params)
}

fn infer_slice(c: &Ctx) -> Result<Vec<Fact>, String> {
    let p = slice_params(c)?;
    Ok(vec![Fact::new(c.dtype(0)?, p.iter().map(|x| x.2).collect())])
}

fn eval_slice(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = c.const_at(0).ok_or("not constant")?;
    let p = slice_params(c)?;
    let shape: Vec<u64> = p.iter().map(|q| q.2).collect();
    let vals = to_f64(x);
    let n = bident_tensor::numel(&shape) as usize;
    let strides: Vec<i64> = (0..x.shape.len()).map(|i| x.shape[i + 1..].iter().product::<u64>() as i64).collect();
    let mut idx = vec![0u64; shape.len()];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let off: i64 = (0..shape.len()).map(|d| (p[d].0 + idx[d] as i64 * p[d].1) * strides[d]).sum();
        out.push(vals[off as usize]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(vec![from_f64(x.dtype, shape, &out)])
}

fn infer_gather(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (x, i) = (c.shape(0)?, c.shape(1)?);
    let ax = axis(c.attr_i("axis", 0), x.len())?;
    let mut out = x[..ax].to_vec();
    out.extend_from_slice(i);
    out.extend_from_slice(&x[ax + 1..]);
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn eval_gather(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let (x, ind) = (c.const_at(0).ok_or("not constant")?, c.const_at(1).ok_or("not constant")?);
    let out = infer_gather(c)?.remove(0);
    let ax = axis(c.attr_i("axis", 0), x.shape.len())?;
    let outer: usize = x.shape[..ax].iter().product::<u64>() as usize;
    let inner: usize = x.shape[ax + 1..].iter().product::<u64>() as usize;
    let d = x.shape[ax] as i64;
    let vals = to_f64(x);
    let mut res = Vec::with_capacity(bident_tensor::numel(&out.shape) as usize);
    for o in 0..outer {
        for k in to_f64(ind) {
            let k = k as i64;
            let k = if k < 0 { k + d } else { k };
            if !(0..d).contains(&k) {
                return Err(format!("gather index {k} out of range {d}"));
            }
            let base = (o * d as usize + k as usize) * inner;
            res.extend_from_slice(&vals[base..base + inner]);
        }
    }
    Ok(vec![from_f64(x.dtype, out.shape, &res)])
}

fn infer_gather_nd(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (x, i) = (c.shape(0)?, c.shape(1)?);
    let b = c.attr_i("batch_dims", 0) as usize;
    let last = *i.last().ok_or("indices must have rank >= 1")? as usize;
    if b + last > x.len() {
        return Err("indices last dim too large".into());
    }
    let mut out = i[..i.len() - 1].to_vec();
    out.extend_from_slice(&x[b + last..]);
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_expand(c: &Ctx) -> Result<Vec<Fact>, String> {
    let target = non_negative(&c.const_ints(1, "shape")?, "shape")?;
    Ok(vec![Fact::new(c.dtype(0)?, broadcast(&[c.shape(0)?, &target])?)])
}

fn eval_expand(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let x = c.const_at(0).ok_or("not constant")?;
    let target = non_negative(&c.const_ints(1, "shape")?, "shape")?;
    let ones = HostTensor::zeros(DType::F64, target);
    Ok(vec![broadcast_map(&[x, &ones], x.dtype, |a| a[0])?])
}

fn infer_tile(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let reps = c.const_ints(1, "repeats")?;
    if reps.len() != x.len() {
        return Err("repeats length differs from rank".into());
    }
    let out = x
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| u64::try_from(r).ok().and_then(|r| d.checked_mul(r)).ok_or(format!("bad repeats {reps:?}")))
        .collect::<Result<_, _>>()?;
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_pad(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let pads = if c.opset < 11 { c.attr_ints("pads").ok_or("pads required")? } else { c.const_ints(1, "pads")? };
    let axes: Vec<usize> = if c.has_input(3) {
        c.const_ints(3, "axes")?.iter().map(|&a| axis(a, x.len())).collect::<Result<_, _>>()?
    } else {
        (0..x.len()).collect()
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut out = x.to_vec();
    for (k, &a) in axes.iter().enumerate() {
        let v = (out[a] as i64).checked_add(pads[k]).and_then(|v| v.checked_add(pads[k + axes.len()]));
        let Some(v) = v.filter(|&v| v >= 0) else {
            return Err("padded size is negative or overflows".into());
        };
        out[a] = v as u64;
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_resize(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let (scales_at, sizes_at) = if c.node.op_type() == "Upsample" || c.opset < 11 { (1, usize::MAX) } else { (2, 3) };
    // opset 18: scales and sizes may cover only the listed axes
    let axes: Vec<usize> = match c.attr_ints("axes") {
        Some(a) => a.iter().map(|&v| axis(v, x.len())).collect::<Result<_, _>>()?,
        None => (0..x.len()).collect(),
    };
    let mut out = x.to_vec();
    let sizes_given = c.has_input(sizes_at) && c.const_at(sizes_at).is_none_or(|t| t.numel() > 0);
    if sizes_given {
        let sizes = non_negative(&c.const_ints(sizes_at, "sizes")?, "sizes")?;
        if sizes.len() != axes.len() {
            return Err(format!("{} sizes for {} axes", sizes.len(), axes.len()));
        }
        let policy = c.attr_s("keep_aspect_ratio_policy").unwrap_or_else(|| "stretch".into());
        let ratios = axes.iter().zip(&sizes).map(|(&a, &s)| s as f64 / x[a].max(1) as f64);
        let scale = match policy.as_str() {
            "not_larger" => Some(ratios.fold(f64::INFINITY, f64::min)),
            "not_smaller" => Some(ratios.fold(0.0, f64::max)),
            _ => None,
        };
        for (k, &a) in axes.iter().enumerate() {
            out[a] = match scale {
                Some(r) => (r * x[a] as f64).round_ties_even().max(0.0) as u64,
                None => sizes[k],
            };
        }
    } else {
        let scales = if c.opset < 9 && c.node.op_type() == "Upsample" {
            c.attr("scales").map(|a| a.floats.iter().map(|&f| f as f64).collect()).ok_or("scales required")?
        } else {
            c.const_f64(scales_at, "scales")?
        };
        if scales.len() != axes.len() {
            return Err(format!("{} scales for {} axes", scales.len(), axes.len()));
        }
        for (&a, &sc) in axes.iter().zip(&scales) {
            // in f32 with a small epsilon, as ONNX Runtime and OpenVINO compute it
            out[a] = ((x[a] as f32 * sc as f32) as f64 + 1e-5).floor().max(0.0) as u64;
        }
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_depth_space(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let b = c.attr_i("blocksize", 0) as u64;
    if x.len() != 4 || b == 0 || b > u32::MAX as u64 {
        return Err("needs a 4-d input and a blocksize".into());
    }
    let out = if c.node.op_type() == "DepthToSpace" {
        vec![x[0], x[1] / (b * b), x[2] * b, x[3] * b]
    } else {
        vec![x[0], x[1] * b * b, x[2] / b, x[3] / b]
    };
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn shape_range(c: &Ctx) -> Result<(usize, usize), String> {
    let r = c.shape(0)?.len() as i64;
    let norm = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    Ok((norm(c.attr_i("start", 0)), norm(c.attr_i("end", r))))
}

fn infer_shape_op(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (s, e) = shape_range(c)?;
    Ok(vec![Fact::new(DType::I64, vec![e.saturating_sub(s) as u64])])
}

/// Shape needs only the input's static shape, never its value: always foldable.
fn eval_shape_op(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let (s, e) = shape_range(c)?;
    let dims: Vec<f64> = c.shape(0)?[s..e.max(s)].iter().map(|&d| d as f64).collect();
    Ok(vec![from_f64(DType::I64, vec![dims.len() as u64], &dims)])
}

fn eval_size(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let n: u64 = c.shape(0)?.iter().product();
    Ok(vec![from_f64(DType::I64, vec![], &[n as f64])])
}

fn constant_of_shape_value(c: &Ctx) -> Result<HostTensor, String> {
    match c.attr("value").and_then(|a| a.t.as_ref()) {
        Some(t) => from_proto(t),
        None => Ok(from_f64(DType::F32, vec![1], &[0.0])),
    }
}

fn infer_constant_of_shape(c: &Ctx) -> Result<Vec<Fact>, String> {
    let shape = non_negative(&c.const_ints(0, "shape")?, "shape")?;
    Ok(vec![Fact::new(constant_of_shape_value(c)?.dtype, shape)])
}

fn eval_constant_of_shape(c: &Ctx) -> Result<Vec<HostTensor>, String> {
    let shape = non_negative(&c.const_ints(0, "shape")?, "shape")?;
    let v = constant_of_shape_value(c)?;
    let n = bident_tensor::numel(&shape) as usize;
    let data = v.data.repeat(n);
    Ok(vec![HostTensor { dtype: v.dtype, shape, data }])
}

fn range_params(c: &Ctx) -> Result<(f64, f64, u64), String> {
    let scalar =
        |i: usize, what: &str| c.const_f64(i, what).and_then(|v| v.first().copied().ok_or(format!("{what} is empty")));
    let (start, limit, delta) = (scalar(0, "start")?, scalar(1, "limit")?, scalar(2, "delta")?);
    if delta == 0.0 || !delta.is_finite() {
        return Err("delta must be a non-zero number".into());
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    if !n.is_finite() || n > (1u64 << 40) as f64 {
        return Err(format!("Range of {n} elements"));
    }
    Ok((start, delta, n as u64))
}

fn range(c: &Ctx) -> Result<HostTensor, String> {
    let (start, delta, n) = range_params(c)?;
    let vals: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
    Ok(from_f64(c.dtype(0)?, vec![n], &vals))
}

fn constant(c: &Ctx) -> Result<HostTensor, String> {
    let a = c.node.attribute.first().ok_or("Constant without a value")?;
    match a.name() {
        "value" => from_proto(a.t.as_ref().ok_or("value is not a tensor")?),
        "value_float" => Ok(from_f64(DType::F32, vec![], &[a.f.unwrap_or(0.0) as f64])),
        "value_floats" => Ok(from_f64(
            DType::F32,
            vec![a.floats.len() as u64],
            &a.floats.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        )),
        "value_int" => Ok(from_f64(DType::I64, vec![], &[a.i.unwrap_or(0) as f64])),
        "value_ints" => Ok(HostTensor {
            dtype: DType::I64,
            shape: vec![a.ints.len() as u64],
            data: a.ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }),
        other => Err(format!("Constant attribute `{other}` is not supported")),
    }
}
