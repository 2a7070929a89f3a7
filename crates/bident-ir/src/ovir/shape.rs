//! Shape and data-movement ops: Reshape, Transpose, (Un)Squeeze, Concat, Split, Gather, Slice,
//! StridedSlice, ShapeOf, Range, Broadcast, Tile, Pad and Interpolate.

use bident_tensor::DType;

use super::xml::element_type;
use super::{A, Args, Converter, Registry};

pub(super) fn register(r: &mut Registry) {
    r.add(&["Reshape"], reshape);
    r.add(&["Transpose"], transpose);
    r.add(&["Squeeze", "Unsqueeze"], squeeze);
    r.add(&["Concat"], concat);
    r.add(&["Split", "VariadicSplit"], split);
    r.add(&["Gather"], gather);
    r.add(&["Slice"], slice);
    r.add(&["StridedSlice"], strided_slice);
    r.add(&["ShapeOf"], shape_of);
    r.add(&["Range"], range);
    r.add(&["Broadcast"], broadcast);
    r.renames(&[("Tile", "Tile")], 2);
    r.add(&["Pad"], pad);
    r.add(&["Interpolate"], interpolate);
}

/// `special_zero` (a 0 copies the input's dim) is the opposite of ONNX's `allowzero`.
fn reshape(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(2)?;
    let allowzero = i64::from(!a.l.flag("special_zero"));
    let outs = c.name_outputs(a.id);
    c.node("Reshape", a.name, &a.i[..2], &[&outs[0]], vec![("allowzero", A::I(allowzero))]);
    Ok(())
}

/// The order input (a constant) is ONNX's `perm` attribute; an empty one reverses the dims, as
/// ONNX's default does.
fn transpose(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(2)?;
    let order = c.const_ints(a.i[1], "the order input")?;
    let outs = c.name_outputs(a.id);
    let attrs = if order.is_empty() { vec![] } else { vec![("perm", A::Is(order))] };
    c.node("Transpose", a.name, &a.i[..1], &[&outs[0]], attrs);
    Ok(())
}

/// The same op, its axes (when given) an input in both.
fn squeeze(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let outs = c.name_outputs(a.id);
    let n = a.i.len().min(2);
    c.node(&a.l.ty, a.name, &a.i[..n], &[&outs[0]], vec![]);
    Ok(())
}

fn concat(c: &mut Converter, a: &Args) -> Result<(), String> {
    let axis = a.l.ints("axis")?.first().copied().ok_or("empty axis")?;
    let outs = c.name_outputs(a.id);
    c.node("Concat", a.name, &a.i, &[&outs[0]], vec![("axis", A::I(axis))]);
    Ok(())
}

/// `Split` into `num_splits` equal parts is `num_outputs`; `VariadicSplit`'s lengths (a
/// constant, no -1) are ONNX's split input. The axis is a constant input in OpenVINO, an
/// attribute in ONNX.
fn split(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i) = (a.name, &a.i);
    a.need(2)?;
    let axis = c.const_ints(i[1], "the axis input")?.first().copied().ok_or("empty axis")?;
    let outs = c.name_outputs(a.id);
    let o: Vec<&str> = outs.iter().map(String::as_str).collect();
    if a.l.ty == "Split" {
        let n = a.l.ints("num_splits")?.first().copied().ok_or("no num_splits")?;
        c.node("Split", name, &i[..1], &o, vec![("axis", A::I(axis)), ("num_outputs", A::I(n))]);
    } else {
        a.need(3)?;
        let lens = c.const_ints(i[2], "split_lengths")?;
        if lens.contains(&-1) {
            return Err("a split length of -1 is not supported".into());
        }
        let lens_c = c.const_i64(&format!("{name}/split"), &lens, vec![lens.len() as u64]);
        c.node("Split", name, &[i[0], &lens_c], &o, vec![("axis", A::I(axis))]);
    }
    Ok(())
}

/// The axis is a constant input. With `batch_dims`, gathering along the first non-batch axis
/// is GatherND on single indices (the indices unsqueezed); any other axis has no ONNX
/// equivalent.
fn gather(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i) = (a.name, &a.i);
    a.need(3)?;
    let axis = c.const_ints(i[2], "the axis input")?.first().copied().ok_or("empty axis")?;
    let batch = a.l.ints("batch_dims").ok().and_then(|v| v.first().copied()).unwrap_or(0);
    let outs = c.name_outputs(a.id);
    if batch == 0 {
        c.node("Gather", name, &i[..2], &[&outs[0]], vec![("axis", A::I(axis))]);
    } else {
        let norm = |v: i64, rank: usize| if v < 0 { v + rank as i64 } else { v };
        let (data_rank, idx_rank) = (a.dims[0].len(), a.dims[1].len());
        if norm(axis, data_rank) != norm(batch, idx_rank) {
            return Err(format!("batch_dims {batch} with axis {axis}: only axis = batch_dims has an ONNX equivalent"));
        }
        let last = c.const_i64(&format!("{name}/last"), &[-1], vec![1]);
        let idx = c.op("Unsqueeze", name, &[i[1], &last], vec![]);
        let attrs = vec![("batch_dims", A::I(norm(batch, idx_rank)))];
        c.node("GatherND", name, &[i[0], &idx], &[&outs[0]], attrs);
    }
    Ok(())
}

/// OpenVINO's inputs are data, start, stop, step[, axes]; ONNX's data, starts, ends, axes, steps.
fn slice(c: &mut Converter, a: &Args) -> Result<(), String> {
    let i = &a.i;
    a.need(4)?;
    let outs = c.name_outputs(a.id);
    let axes = i.get(4).copied().unwrap_or("");
    c.node("Slice", a.name, &[i[0], i[1], i[2], axes, i[3]], &[&outs[0]], vec![]);
    Ok(())
}

/// `Shape`, cast to int32 where `output_type` says so.
fn shape_of(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i) = (a.name, &a.i);
    a.need(1)?;
    let outs = c.name_outputs(a.id);
    if a.l.attr("output_type").is_some_and(|t| t == "i32") {
        let s = c.op("Shape", name, &i[..1], vec![]);
        c.node("Cast", name, &[&s], &[&outs[0]], vec![("to", A::I(DType::I32.onnx_code() as i64))]);
    } else {
        c.node("Shape", name, &i[..1], &[&outs[0]], vec![]);
    }
    Ok(())
}

/// ONNX's Range takes start, limit and delta of the output's type: each is cast to
/// `output_type` (else input 0's type) where it differs.
fn range(c: &mut Converter, a: &Args) -> Result<(), String> {
    let name = a.name;
    a.need(3)?;
    let to = a.l.attr("output_type").and_then(element_type).unwrap_or(a.dtype0());
    let mut cast = vec![];
    for (k, t) in a.i[..3].iter().enumerate() {
        cast.push(if a.types.get(k).copied().flatten() == Some(to) {
            t.to_string()
        } else {
            c.op("Cast", name, &[t], vec![("to", A::I(to.onnx_code() as i64))])
        });
    }
    let outs = c.name_outputs(a.id);
    c.node("Range", name, &[&cast[0], &cast[1], &cast[2]], &[&outs[0]], vec![]);
    Ok(())
}

/// `Expand`; in explicit mode the data is first unsqueezed so that its dim `k` lands on output
/// axis `axes_mapping[k]`.
fn broadcast(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i, l) = (a.name, &a.i, a.l);
    a.need(2)?;
    let data = if l.attr("mode").is_some_and(|m| m == "explicit") {
        // data dim k goes to output axis axes_mapping[k]; the others are new 1s
        let mapping = c.const_ints(i.get(2).ok_or("explicit mode needs axes_mapping")?, "axes_mapping")?;
        let rank = l.outputs[0].dims.len() as i64;
        let data_rank = a.dims.first().ok_or("no data dims")?.len();
        let fits = mapping.len() == data_rank
            && mapping.windows(2).all(|w| w[0] < w[1])
            && mapping.iter().all(|x| (0..rank).contains(x));
        if !fits {
            return Err(format!("axes_mapping {mapping:?} does not place rank {data_rank} into rank {rank}"));
        }
        let new: Vec<i64> = (0..rank).filter(|x| !mapping.contains(x)).collect();
        if new.is_empty() {
            i[0].to_string()
        } else {
            let axes = c.const_i64(&format!("{name}/new_axes"), &new, vec![new.len() as u64]);
            c.op("Unsqueeze", name, &[i[0], &axes], vec![])
        }
    } else {
        i[0].to_string()
    };
    let outs = c.name_outputs(a.id);
    c.node("Expand", name, &[&data, i[1]], &[&outs[0]], vec![]);
    Ok(())
}

/// OpenVINO's pads_begin and pads_end inputs are concatenated into ONNX's pads; `symmetric`
/// mode has no ONNX equivalent.
fn pad(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i) = (a.name, &a.i);
    a.need(3)?;
    let mode = match a.l.attr("pad_mode").unwrap_or("constant") {
        "constant" => "constant",
        "edge" => "edge",
        "reflect" => "reflect",
        m => return Err(format!("pad_mode `{m}` has no ONNX equivalent")),
    };
    let pads = c.op("Concat", name, &[i[1], i[2]], vec![("axis", A::I(0))]);
    let mut inputs = vec![i[0], pads.as_str()];
    if let Some(v) = i.get(3) {
        inputs.push(v);
    }
    let outs = c.name_outputs(a.id);
    c.node("Pad", name, &inputs, &[&outs[0]], vec![("mode", A::S(mode))]);
    Ok(())
}

/// StridedSlice: each entry of begin/end/strides slices one input dim, unless its
/// `new_axis_mask` bit inserts a dim of 1, its `shrink_axis_mask` bit takes the single index
/// `begin` and drops the dim, or its `ellipsis_mask` bit stands for every dim the other
/// entries leave over. As ONNX: Slice on the dims sliced, Squeeze of the shrunk ones,
/// Unsqueeze of the new ones.
fn strided_slice(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i) = (a.id, a.name, &a.i);
    if i.len() < 3 {
        return Err("needs begin and end".into());
    }
    let l = a.l;
    let rank = l.inputs.first().map_or(0, |p| p.dims.len());
    let bit = |k: &str, e: usize| l.ints(k).unwrap_or_default().get(e).is_some_and(|&m| m != 0);
    let begin = c.const_ints(i[1], "begin")?;
    let end = c.const_ints(i[2], "end")?;
    let strides = match i.get(3) {
        Some(s) => c.const_ints(s, "strides")?,
        None => vec![1; begin.len()],
    };
    if end.len() != begin.len() || strides.len() != begin.len() {
        return Err("begin, end and strides differ in length".into());
    }
    let n = begin.len();
    let ellipses = (0..n).filter(|&e| bit("ellipsis_mask", e)).count();
    if ellipses > 1 {
        return Err("more than one ellipsis".into());
    }
    // input dims the entries other than the ellipsis and new axes consume
    let consuming = (0..n).filter(|&e| !bit("ellipsis_mask", e) && !bit("new_axis_mask", e)).count();
    let spread = rank.checked_sub(consuming).ok_or("more slice entries than the input has dims")?;
    let (mut starts, mut ends, mut axes, mut steps) = (vec![], vec![], vec![], vec![]);
    let (mut shrunk, mut added) = (vec![], vec![]);
    let (mut d, mut o) = (0i64, 0i64);
    for e in 0..n {
        if bit("ellipsis_mask", e) {
            d += spread as i64;
            o += spread as i64;
        } else if bit("new_axis_mask", e) {
            added.push(o);
            o += 1;
        } else if bit("shrink_axis_mask", e) {
            let b = begin[e];
            starts.push(b);
            ends.push(if b == -1 { i64::MAX } else { b + 1 });
            axes.push(d);
            steps.push(1);
            shrunk.push(d);
            d += 1;
        } else {
            let neg = strides[e] < 0;
            starts.push(if bit("begin_mask", e) { if neg { i64::MAX } else { 0 } } else { begin[e] });
            ends.push(if bit("end_mask", e) { if neg { i64::MIN } else { i64::MAX } } else { end[e] });
            axes.push(d);
            steps.push(strides[e]);
            d += 1;
            o += 1;
        }
    }
    let outs = c.name_outputs(id);
    let ints =
        |c: &mut Converter, what: &str, v: &[i64]| c.const_i64(&format!("{name}/{what}"), v, vec![v.len() as u64]);
    let mut t = i[0].to_string();
    let sliced = !axes.is_empty();
    if sliced {
        let (sc, ec) = (ints(c, "starts", &starts), ints(c, "ends", &ends));
        let (ac, stc) = (ints(c, "axes", &axes), ints(c, "steps", &steps));
        let inputs = [i[0], &sc, &ec, &ac, &stc];
        if shrunk.is_empty() && added.is_empty() {
            c.node("Slice", name, &inputs, &[&outs[0]], vec![]);
        } else {
            t = c.op("Slice", name, &inputs, vec![]);
        }
    }
    if !shrunk.is_empty() {
        let ax = ints(c, "shrink_axes", &shrunk);
        if added.is_empty() {
            c.node("Squeeze", name, &[&t, &ax], &[&outs[0]], vec![]);
        } else {
            t = c.op("Squeeze", name, &[&t, &ax], vec![]);
        }
    }
    if !added.is_empty() {
        let ax = ints(c, "new_axes", &added);
        c.node("Unsqueeze", name, &[&t, &ax], &[&outs[0]], vec![]);
    } else if !sliced && shrunk.is_empty() {
        c.node("Identity", name, &[&t], &[&outs[0]], vec![]);
    }
    Ok(())
}

/// Interpolate-4 (data, sizes, scales[, axes]) and -11 (data, scales or sizes[, axes]) as
/// ONNX Resize (its sizes or scales for the given axes). Modes without an ONNX equivalent
/// (the Pillow filters, `simple` or `tf_half_pixel_for_nn` rounding, padding) are errors.
fn interpolate(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i, l) = (a.id, a.name, &a.i, a.l);
    let v4 = l.version == "opset4";
    let by_sizes = match l.attr("shape_calculation_mode").unwrap_or("sizes") {
        "sizes" => true,
        "scales" => false,
        m => return Err(format!("shape_calculation_mode `{m}`")),
    };
    let (target, axes) = match (v4, by_sizes) {
        (true, true) => (i.get(1), i.get(3)),
        (true, false) => (i.get(2), i.get(3)),
        (false, _) => (i.get(1), i.get(2)),
    };
    let target = target.ok_or("needs its sizes or scales")?;
    let mode = match l.attr("mode").unwrap_or("nearest") {
        "nearest" => "nearest",
        "linear" | "linear_onnx" => "linear",
        "cubic" => "cubic",
        m => return Err(format!("mode `{m}` has no ONNX equivalent")),
    };
    let coords = l.attr("coordinate_transformation_mode").unwrap_or("half_pixel");
    let coords = ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"]
        .into_iter()
        .find(|&c| c == coords)
        .ok_or_else(|| format!("coordinate_transformation_mode `{coords}` has no ONNX equivalent"))?;
    let nearest = l.attr("nearest_mode").unwrap_or("round_prefer_floor");
    let nearest = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
        .into_iter()
        .find(|&n| n == nearest)
        .ok_or_else(|| format!("nearest_mode `{nearest}` has no ONNX equivalent"))?;
    for k in ["pads_begin", "pads_end"] {
        if l.ints(k).unwrap_or_default().iter().any(|&p| p != 0) {
            return Err(format!("{k} other than 0 is not supported"));
        }
    }
    let mut attrs = vec![
        ("mode", A::S(mode)),
        ("coordinate_transformation_mode", A::S(coords)),
        ("nearest_mode", A::S(nearest)),
        ("antialias", A::I(i64::from(l.flag("antialias")))),
        ("cubic_coeff_a", A::F(l.float("cube_coeff").unwrap_or(-0.75))),
    ];
    if let Some(ax) = axes {
        attrs.push(("axes", A::Is(c.const_ints(ax, "axes")?)));
    }
    let target = if by_sizes {
        // sizes: int64 in ONNX (OpenVINO allows i32)
        let v = c.const_ints(target, "sizes")?;
        c.const_i64(&format!("{name}/sizes"), &v, vec![v.len() as u64])
    } else {
        target.to_string()
    };
    let ins: Vec<&str> = if by_sizes { vec![i[0], "", "", &target] } else { vec![i[0], "", &target] };
    let outs = c.name_outputs(id);
    c.node("Resize", name, &ins, &[&outs[0]], attrs);
    Ok(())
}
