//! Neural-network ops: convolutions (grouped and transposed), MatMul, pooling, Softmax, MVN and
//! ScaledDotProductAttention.

use bident_tensor::DType;

use super::xml::Layer;
use super::{A, Args, Converter, Registry};

pub(super) fn register(r: &mut Registry) {
    r.add(&["Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData"], convolution);
    r.add(&["MatMul"], matmul);
    r.add(&["SoftMax", "Softmax", "LogSoftmax"], softmax);
    r.add(&["MaxPool", "AvgPool"], pool);
    r.add(&["MVN"], mvn);
    r.add(&["ScaledDotProductAttention"], sdpa);
}

/// `Conv`, and the `*BackpropData` convolutions as `ConvTranspose`. Grouped weights
/// `[G, O/G, I/G, k..]` (backprop: `[G, C_in/G, C_out/G, k..]`) merge their first two dims and
/// say `group = G`, as ONNX Conv and ConvTranspose want.
fn convolution(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (ty, name, i, l) = (a.l.ty.as_str(), a.name, &a.i, a.l);
    a.need(2)?;
    let transposed = ty.ends_with("BackpropData");
    if transposed && i.len() > 2 {
        return Err("an output_shape input is not supported".into());
    }
    let mut attrs = conv_attrs(l)?;
    if let Some(p) = l.ints("output_padding").ok().filter(|p| transposed && !p.is_empty()) {
        attrs.push(("output_padding", A::Is(p)));
    }
    let w = if ty.starts_with("Group") {
        let wd = a.dims.get(1).ok_or("no weight dims")?.clone();
        if wd.len() < 3 || wd.iter().any(|&d| d < 0) {
            return Err(format!("grouped weights must have static dims, got {wd:?}"));
        }
        attrs.push(("group", A::I(wd[0])));
        let mut flat = vec![wd[0].checked_mul(wd[1]).ok_or("weight dims overflow")?];
        flat.extend_from_slice(&wd[2..]);
        c.reshaped(i[1], &flat, name)?
    } else {
        i[1].to_string()
    };
    let outs = c.name_outputs(a.id);
    let op = if transposed { "ConvTranspose" } else { "Conv" };
    c.node(op, name, &[i[0], &w], &[&outs[0]], attrs);
    Ok(())
}

/// `transpose_a` and `transpose_b` swap the operand's last two dims first: a transposed copy of
/// a constant matrix, else a `Transpose` node.
fn matmul(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (name, i, l) = (a.name, &a.i, a.l);
    a.need(2)?;
    let x = c.transposed_if(l.flag("transpose_a"), i[0], a.dims[0].len(), name)?;
    let y = c.transposed_if(l.flag("transpose_b"), i[1], a.dims[1].len(), name)?;
    let outs = c.name_outputs(a.id);
    c.node("MatMul", name, &[&x, &y], &[&outs[0]], vec![]);
    Ok(())
}

/// OpenVINO's axis defaults to 1.
fn softmax(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let axis = a.l.ints("axis").ok().and_then(|v| v.first().copied()).unwrap_or(1);
    let op = if a.l.ty == "LogSoftmax" { "LogSoftmax" } else { "Softmax" };
    let outs = c.name_outputs(a.id);
    c.node(op, a.name, &a.i[..1], &[&outs[0]], vec![("axis", A::I(axis))]);
    Ok(())
}

/// `MaxPool` (its indices output too, when anything reads it) and `AveragePool`;
/// `rounding_type = ceil` is `ceil_mode`, `exclude-pad` the opposite of `count_include_pad`.
fn pool(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i, l) = (a.id, a.name, &a.i, a.l);
    a.need(1)?;
    let mut attrs = vec![("kernel_shape", A::Is(l.ints("kernel")?)), ("strides", A::Is(l.ints("strides")?))];
    attrs.extend(pad_attrs(l)?);
    attrs.push(("ceil_mode", A::I(i64::from(l.attr("rounding_type") == Some("ceil")))));
    let outs = c.name_outputs(id);
    if l.ty == "MaxPool" {
        if let Ok(d) = l.ints("dilations") {
            attrs.push(("dilations", A::Is(d)));
        }
        // the indices output, when anything reads it (OpenVINO flattens them like ONNX does with
        // storage_order 0)
        let read = |port: u32| c.edges.values().any(|&(fl, fp)| fl == id && fp == port);
        let idx_port = c.layers[&id].outputs.get(1).map(|p| p.id);
        let o: Vec<&str> = match idx_port {
            Some(p) if read(p) => vec![&outs[0], &outs[1]],
            _ => vec![&outs[0]],
        };
        c.node("MaxPool", name, &i[..1], &o, attrs);
    } else {
        attrs.push(("count_include_pad", A::I(i64::from(!l.flag("exclude-pad")))));
        c.node("AveragePool", name, &i[..1], &[&outs[0]], attrs);
    }
    Ok(())
}

fn pad_attrs(l: &Layer) -> Result<Vec<(&'static str, A)>, String> {
    Ok(match l.attr("auto_pad").unwrap_or("explicit") {
        "same_upper" => vec![("auto_pad", A::S("SAME_UPPER"))],
        "same_lower" => vec![("auto_pad", A::S("SAME_LOWER"))],
        "valid" => vec![("auto_pad", A::S("VALID"))],
        "explicit" | "notset" | "" => {
            let mut pads = l.ints("pads_begin")?;
            pads.extend(l.ints("pads_end")?);
            vec![("pads", A::Is(pads))]
        }
        other => return Err(format!("auto_pad `{other}` is not supported")),
    })
}

fn conv_attrs(l: &Layer) -> Result<Vec<(&'static str, A)>, String> {
    let mut a = vec![("strides", A::Is(l.ints("strides")?)), ("dilations", A::Is(l.ints("dilations")?))];
    a.extend(pad_attrs(l)?);
    Ok(a)
}

/// MVN over the trailing axes with the variance inside the root is LayerNormalization
/// (unit scale, zero bias); any other MVN is written out as its formula.
fn mvn(c: &mut Converter, a: &Args) -> Result<(), String> {
    a.need(1)?;
    let (id, name, i, dims, dtype, l) = (a.id, a.name, &a.i, &a.dims[0], a.dtype0(), a.l);
    let eps = l.float("eps")?;
    let inside = l.attr("eps_mode").is_none_or(|m| m.eq_ignore_ascii_case("inside_sqrt"));
    let variance = l.flag("normalize_variance");
    let rank = dims.len() as i64;
    let axes: Vec<i64> = match i.get(1) {
        Some(t) => c.const_ints(t, "the axes input")?,
        None => return Err("MVN-1 (axes as an attribute) is not supported".into()),
    };
    let mut norm: Vec<i64> = axes.iter().map(|&x| if x < 0 { x + rank } else { x }).collect();
    norm.sort_unstable();
    let trailing = !norm.is_empty() && norm.iter().enumerate().all(|(k, &x)| x == rank - norm.len() as i64 + k as i64);
    let outs = c.name_outputs(id);
    let normalized: Vec<i64> = dims[(rank as usize).saturating_sub(norm.len())..].to_vec();
    if variance && inside && trailing && normalized.iter().all(|&d| d > 0) && dtype.is_float() {
        let count = normalized.iter().product::<i64>() as usize;
        let shape: Vec<u64> = normalized.iter().map(|&d| d as u64).collect();
        let one = bident_tensor::HostTensor::from_f64("one", dtype, shape.clone(), &vec![1.0; count])
            .map_err(|e| e.to_string())?;
        let scale = c.constant(&format!("{name}/scale"), dtype, shape.clone(), one.data.into());
        let zero = bident_tensor::HostTensor::zeros(dtype, shape.clone());
        let bias = c.constant(&format!("{name}/bias"), dtype, shape, zero.data.into());
        let attrs = vec![("axis", A::I(norm[0])), ("epsilon", A::F(eps))];
        c.node("LayerNormalization", name, &[i[0], &scale, &bias], &[&outs[0]], attrs);
        return Ok(());
    }
    let ax = c.const_i64(&format!("{name}/axes"), &norm, vec![norm.len() as u64]);
    let mean = c.op("ReduceMean", name, &[i[0], &ax], vec![("keepdims", A::I(1))]);
    if !variance {
        c.node("Sub", name, &[i[0], &mean], &[&outs[0]], vec![]);
        return Ok(());
    }
    let d = c.op("Sub", name, &[i[0], &mean], vec![]);
    let sq = c.op("Mul", name, &[&d, &d], vec![]);
    let var = c.op("ReduceMean", name, &[&sq, &ax], vec![("keepdims", A::I(1))]);
    let e = c.scalar(&format!("{name}/eps"), dtype, eps as f64)?;
    let den = if inside {
        let v = c.op("Add", name, &[&var, &e], vec![]);
        c.op("Sqrt", name, &[&v], vec![])
    } else {
        let s = c.op("Sqrt", name, &[&var], vec![]);
        c.op("Add", name, &[&s, &e], vec![])
    };
    c.node("Div", name, &[&d, &den], &[&outs[0]], vec![]);
    Ok(())
}

/// softmax(Q·Kᵀ·scale + mask)·V; a boolean mask keeps where true. Without a scale input the
/// scale is 1/sqrt(Q's last dim); with `causal` the mask is built from the static lengths (the
/// mask input is ignored, as OpenVINO ignores it).
fn sdpa(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i, dims, dtype) = (a.id, a.name, &a.i, a.dims, a.dtype0());
    if i.len() < 3 {
        return Err("needs Q, K and V".into());
    }
    let rank = dims[1].len();
    if rank < 2 || dims[0].len() < 2 {
        return Err("Q and K must have rank 2 or more".into());
    }
    let kt = c.transposed_if(true, i[1], rank, name)?;
    let mut s = c.op("MatMul", name, &[i[0], &kt], vec![]);
    let scale = match i.get(4) {
        Some(sc) => sc.to_string(),
        None => {
            let e = *dims[0].last().ok_or("Q has no dims")?;
            if e <= 0 {
                return Err("without a scale input Q's last dim must be static".into());
            }
            c.scalar(&format!("{name}/scale"), dtype, 1.0 / (e as f64).sqrt())?
        }
    };
    s = c.op("Mul", name, &[&s, &scale], vec![]);
    if a.l.flag("causal") {
        // query i sees keys 0..=i (OpenVINO: ones(L, S).tril(0)); the mask input is ignored
        let (l, k) = (dims[0][dims[0].len() - 2], dims[1][rank - 2]);
        if l <= 0 || k <= 0 {
            return Err("causal attention needs static query and key lengths".into());
        }
        let (l, k) = (l as u64, k as u64);
        let bias: Vec<f64> = (0..l * k).map(|e| if e % k <= e / k { 0.0 } else { f64::NEG_INFINITY }).collect();
        let t = bident_tensor::HostTensor::from_f64("causal", dtype, vec![l, k], &bias).map_err(|e| e.to_string())?;
        let bias = c.constant(&format!("{name}/causal"), dtype, vec![l, k], t.data.into());
        s = c.op("Add", name, &[&s, &bias], vec![]);
    } else if let Some(mask) = i.get(3).filter(|m| !m.is_empty()) {
        let boolean = a.l.inputs.get(3).and_then(|p| p.dtype) == Some(DType::Bool);
        let add = if boolean {
            let zero = c.scalar(&format!("{name}/zero"), dtype, 0.0)?;
            let ninf = c.scalar(&format!("{name}/ninf"), dtype, f64::NEG_INFINITY)?;
            c.op("Where", name, &[mask, &zero, &ninf], vec![])
        } else {
            mask.to_string()
        };
        s = c.op("Add", name, &[&s, &add], vec![]);
    }
    let p = c.op("Softmax", name, &[&s], vec![("axis", A::I(-1))]);
    let outs = c.name_outputs(id);
    c.node("MatMul", name, &[&p, i[2]], &[&outs[0]], vec![]);
    Ok(())
}

impl Converter<'_> {
    /// `t` with new dims: a constant reshaped for free (same bytes), else a Reshape node.
    fn reshaped(&mut self, t: &str, dims: &[i64], name: &str) -> Result<String, String> {
        if let Some((dtype, _, data)) = self.consts.get(t).cloned() {
            return Ok(self.constant(t, dtype, dims.iter().map(|&d| d as u64).collect(), data));
        }
        let shape = self.const_i64(&format!("{name}/shape"), dims, vec![dims.len() as u64]);
        Ok(self.op("Reshape", name, &[t, &shape], vec![]))
    }

    /// `t` with its last two dims swapped when `yes`: a transposed copy of a constant, else a
    /// Transpose node.
    fn transposed_if(&mut self, yes: bool, t: &str, rank: usize, name: &str) -> Result<String, String> {
        if !yes {
            return Ok(t.to_string());
        }
        if rank < 2 {
            return Ok(t.to_string());
        }
        if let Some((dtype, shape, data)) = self.consts.get(t).cloned()
            && shape.len() == 2
        {
            let (r, c, s) = (shape[0] as usize, shape[1] as usize, dtype.size());
            let mut out = vec![0u8; data.len()];
            for y in 0..r {
                for x in 0..c {
                    out[(x * r + y) * s..(x * r + y + 1) * s]
                        .copy_from_slice(&data[(y * c + x) * s..(y * c + x + 1) * s]);
                }
            }
            return Ok(self.constant(t, dtype, vec![shape[1], shape[0]], out.into()));
        }
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(rank - 1, rank - 2);
        Ok(self.op("Transpose", name, &[t], vec![("perm", A::Is(perm))]))
    }
}
