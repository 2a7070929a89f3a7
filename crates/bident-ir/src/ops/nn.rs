//! Neural-network ops: convolutions, pooling, matrix products, normalisations, softmax,
//! recurrent cells, quantisation, Einsum, CumSum, TopK.

use bident_tensor::DType;

use super::{Ctx, Fact, OpClass, Registry, Role, axis, broadcast, same_as_input0};

pub(super) fn register(r: &mut Registry) {
    let mac = |class| (Role::Anchor, class);
    let plain = |class| (Role::Plain, class);
    r.add(&["Conv", "ConvInteger"], mac(OpClass::Conv), infer_conv, None);
    r.add(&["ConvTranspose"], mac(OpClass::Conv), infer_conv_transpose, None);
    r.add(&["MatMul", "MatMulInteger"], mac(OpClass::Matmul), infer_matmul, None);
    r.add(&["Gemm"], mac(OpClass::Matmul), infer_gemm, None);
    r.add(&["MaxPool", "AveragePool", "LpPool"], plain(OpClass::Reduction), infer_pool, None);
    r.add(&["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"], plain(OpClass::Reduction), infer_global_pool, None);
    r.add(&["BatchNormalization"], (Role::Affine, OpClass::Normalization), infer_batchnorm, None);
    r.add(
        &["InstanceNormalization", "LRN", "Softmax", "LogSoftmax", "Hardmax", "MeanVarianceNormalization"],
        plain(OpClass::Normalization),
        same_as_input0,
        None,
    );
    r.add(&["Trilu"], plain(OpClass::Elementwise), same_as_input0, None);
    r.add(&["CumSum"], plain(OpClass::Scan), same_as_input0, None);
    r.add(&["DFT"], plain(OpClass::Fft), infer_dft, None);
    r.add(&["LayerNormalization"], plain(OpClass::Normalization), infer_layernorm, None);
    r.add(&["QuantizeLinear"], plain(OpClass::Elementwise), infer_quantize, None);
    r.add(&["DequantizeLinear"], plain(OpClass::Elementwise), infer_dequantize, None);
    r.add(&["LSTM", "GRU", "RNN"], plain(OpClass::Recurrent), infer_rnn, None);
    r.add(&["Einsum"], plain(OpClass::Matmul), infer_einsum, None);
    r.add(&["TopK"], plain(OpClass::Reduction), infer_topk, None);
    r.add(&["ArgMax", "ArgMin"], plain(OpClass::Reduction), infer_argmax, None);
}

/// DFT (opset 17: `axis` attribute, default 1; opset 20: `axis` input, default -2). The
/// signal axis becomes `dft_length` (or stays), halved plus one when `onesided`; the last dim,
/// real (1) or complex (2), becomes complex.
fn infer_dft(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.input(0)?;
    let rank = x.shape.len();
    if rank < 2 || !matches!(x.shape[rank - 1], 1 | 2) {
        return Err(format!("DFT input must end in a dim of 1 (real) or 2 (complex), got {:?}", x.shape));
    }
    let a = if c.opset >= 20 {
        if c.has_input(2) { c.const_ints(2, "axis")?.first().copied().unwrap_or(-2) } else { -2 }
    } else {
        c.attr_i("axis", 1)
    };
    let a = axis(a, rank)?;
    if a == rank - 1 {
        return Err("DFT axis cannot be the last (real/imaginary) dim".into());
    }
    let mut shape = x.shape.clone();
    if c.has_input(1) {
        let n = c.const_ints(1, "dft_length")?.first().copied().unwrap_or(0);
        shape[a] = u64::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| format!("dft_length {n} is not positive"))?;
    }
    if c.attr_i("onesided", 0) == 1 {
        shape[a] = shape[a] / 2 + 1;
    }
    shape[rank - 1] = 2;
    Ok(vec![Fact::new(x.dtype, shape)])
}

/// Output spatial sizes of a windowed op (Conv, pooling).
fn window_out(c: &Ctx, x: &[u64], kernel: &[u64], ceil_mode: bool) -> Result<Vec<u64>, String> {
    let n = kernel.len();
    let spatial = &x[2..];
    if spatial.len() != n {
        return Err(format!("input rank {} does not fit a {n}-d kernel", x.len()));
    }
    let strides = c.attr_ints("strides").unwrap_or_else(|| vec![1; n]);
    let dil = c.attr_ints("dilations").unwrap_or_else(|| vec![1; n]);
    let auto_pad = c.attr_s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    let pads = c.attr_ints("pads").unwrap_or_else(|| vec![0; 2 * n]);
    if strides.len() != n || dil.len() != n || pads.len() != 2 * n {
        return Err("strides, dilations or pads do not match the kernel rank".into());
    }
    if strides.iter().chain(&dil).any(|&v| v < 1) || kernel.contains(&0) || pads.iter().any(|&p| p < 0) {
        return Err(format!("kernel {kernel:?}, strides {strides:?} and dilations {dil:?} must be >= 1, pads >= 0"));
    }
    (0..n)
        .map(|i| {
            let (s, d, k) = (strides[i] as u64, dil[i] as u64, kernel[i]);
            let ek = d.checked_mul(k - 1).and_then(|v| v.checked_add(1)).ok_or("kernel extent overflows")?;
            Ok(match auto_pad.as_str() {
                "SAME_UPPER" | "SAME_LOWER" => spatial[i].div_ceil(s),
                _ => {
                    // VALID is explicit padding of zero (ceil_mode still applies)
                    let (p0, p1) = if auto_pad == "VALID" { (0, 0) } else { (pads[i], pads[i + n]) };
                    let total = (spatial[i] as i64).saturating_add(p0).saturating_add(p1) - ek as i64;
                    if total < 0 {
                        return Err(format!("kernel {k} larger than padded input {}", spatial[i]));
                    }
                    let q = if ceil_mode { (total as u64).div_ceil(s) } else { total as u64 / s };
                    let mut o = q + 1;
                    // ceil mode: the last window must start inside the input or left padding
                    if ceil_mode && (o - 1) * s >= spatial[i] + p0 as u64 {
                        o -= 1;
                    }
                    o
                }
            })
        })
        .collect()
}

fn infer_conv(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (x, w) = (c.shape(0)?, c.shape(1)?);
    if x.len() < 3 || w.len() != x.len() {
        return Err(format!("input {x:?} and weight {w:?} ranks do not fit"));
    }
    let kernel =
        c.attr_ints("kernel_shape").map(|k| k.iter().map(|&v| v as u64).collect()).unwrap_or_else(|| w[2..].to_vec());
    let mut out = vec![x[0], w[0]];
    out.extend(window_out(c, x, &kernel, false)?);
    let dtype = if c.node.op_type() == "ConvInteger" { DType::I32 } else { c.dtype(0)? };
    Ok(vec![Fact::new(dtype, out)])
}

fn infer_conv_transpose(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (x, w) = (c.shape(0)?, c.shape(1)?);
    if x.len() < 3 || w.len() != x.len() {
        return Err(format!("input {x:?} and weight {w:?} ranks do not fit"));
    }
    let n = x.len() - 2;
    let group = c.attr_i("group", 1);
    if group < 1 {
        return Err(format!("group {group} must be >= 1"));
    }
    let group = group as u64;
    let kernel = c
        .attr_ints("kernel_shape")
        .map(|k| k.iter().map(|&v| v as u64).collect::<Vec<_>>())
        .unwrap_or_else(|| w[2..].to_vec());
    let mut out = vec![x[0], w[1].checked_mul(group).ok_or("output channels overflow")?];
    if let Some(os) = c.attr_ints("output_shape") {
        out.extend(os.iter().rev().take(n).rev().map(|&v| v as u64));
        return Ok(vec![Fact::new(c.dtype(0)?, out)]);
    }
    let strides = c.attr_ints("strides").unwrap_or_else(|| vec![1; n]);
    let dil = c.attr_ints("dilations").unwrap_or_else(|| vec![1; n]);
    let pads = c.attr_ints("pads").unwrap_or_else(|| vec![0; 2 * n]);
    let opad = c.attr_ints("output_padding").unwrap_or_else(|| vec![0; n]);
    let auto_pad = c.attr_s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    if kernel.len() != n || strides.len() != n || dil.len() != n || pads.len() != 2 * n || opad.len() != n {
        return Err("kernel_shape, strides, dilations, pads or output_padding do not match the spatial rank".into());
    }
    for i in 0..n {
        let o = if auto_pad.starts_with("SAME") {
            x[2 + i] as i64 * strides[i]
        } else {
            strides[i] * (x[2 + i] as i64 - 1) + opad[i] + (kernel[i] as i64 - 1) * dil[i] + 1 - pads[i] - pads[i + n]
        };
        if o <= 0 {
            return Err(format!("non-positive output size {o}"));
        }
        out.push(o as u64);
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_pool(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    if x.len() < 3 {
        return Err(format!("input must be N x C x spatial..., got {x:?}"));
    }
    let kernel: Vec<u64> =
        c.attr_ints("kernel_shape").ok_or("kernel_shape is required")?.iter().map(|&v| v as u64).collect();
    let mut out = vec![x[0], x[1]];
    out.extend(window_out(c, x, &kernel, c.attr_i("ceil_mode", 0) != 0)?);
    let mut res = vec![Fact::new(c.dtype(0)?, out.clone())];
    if c.n_outputs() > 1 {
        res.push(Fact::new(DType::I64, out));
    }
    Ok(res)
}

fn infer_global_pool(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let mut out = x[..2.min(x.len())].to_vec();
    out.extend(std::iter::repeat_n(1, x.len().saturating_sub(2)));
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

pub(super) fn matmul_shape(a: &[u64], b: &[u64]) -> Result<Vec<u64>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul of a scalar".into());
    }
    let (a2, b2) =
        (if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() }, if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() });
    let (m, k1) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k1 != k2 {
        return Err(format!("inner dims differ: {a:?} x {b:?}"));
    }
    let mut out = broadcast(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

fn infer_matmul(c: &Ctx) -> Result<Vec<Fact>, String> {
    let out = matmul_shape(c.shape(0)?, c.shape(1)?)?;
    let dtype = if c.node.op_type() == "MatMulInteger" { DType::I32 } else { c.dtype(0)? };
    Ok(vec![Fact::new(dtype, out)])
}

fn infer_gemm(c: &Ctx) -> Result<Vec<Fact>, String> {
    let (a, b) = (c.shape(0)?, c.shape(1)?);
    if a.len() != 2 || b.len() != 2 {
        return Err(format!("Gemm needs 2-d operands, got {a:?} and {b:?}"));
    }
    let (m, ka) = if c.attr_i("transA", 0) != 0 { (a[1], a[0]) } else { (a[0], a[1]) };
    let (kb, n) = if c.attr_i("transB", 0) != 0 { (b[1], b[0]) } else { (b[0], b[1]) };
    if ka != kb {
        return Err(format!("inner dims differ: {a:?} x {b:?}"));
    }
    Ok(vec![Fact::new(c.dtype(0)?, vec![m, n])])
}

fn infer_batchnorm(c: &Ctx) -> Result<Vec<Fact>, String> {
    // training-mode extra outputs (running mean/var) have the channel shape
    let x = c.input(0)?.clone();
    let mut out = vec![x.clone()];
    for _ in 1..c.n_outputs() {
        out.push(Fact::new(x.dtype, vec![x.shape.get(1).copied().unwrap_or(1)]));
    }
    Ok(out)
}

fn infer_layernorm(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.input(0)?.clone();
    let ax = axis(c.attr_i("axis", -1), x.shape.len())?;
    let mut stat = x.shape.clone();
    stat[ax..].iter_mut().for_each(|d| *d = 1);
    let mut out = vec![x.clone()];
    for _ in 1..c.n_outputs() {
        out.push(Fact::new(DType::F32, stat.clone()));
    }
    Ok(out)
}

fn infer_quantize(c: &Ctx) -> Result<Vec<Fact>, String> {
    let dtype = if c.has_input(2) {
        c.dtype(2)?
    } else {
        match c.attr_i("output_dtype", 0) {
            0 => DType::U8,
            code => DType::from_onnx(code as i32).ok_or("unsupported output_dtype")?,
        }
    };
    Ok(vec![Fact::new(dtype, c.shape(0)?.to_vec())])
}

fn infer_dequantize(c: &Ctx) -> Result<Vec<Fact>, String> {
    Ok(vec![Fact::new(c.dtype(1)?, c.shape(0)?.to_vec())])
}

fn infer_rnn(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    if x.len() != 3 {
        return Err(format!("input must be 3-d, got {x:?}"));
    }
    let hidden = c.attr_i("hidden_size", 0) as u64;
    if hidden == 0 {
        return Err("hidden_size is required".into());
    }
    let dirs = if c.attr_s("direction").as_deref() == Some("bidirectional") { 2 } else { 1 };
    let batch_first = c.attr_i("layout", 0) != 0;
    let (seq, batch) = if batch_first { (x[1], x[0]) } else { (x[0], x[1]) };
    let dt = c.dtype(0)?;
    let y = if batch_first { vec![batch, seq, dirs, hidden] } else { vec![seq, dirs, batch, hidden] };
    let h = if batch_first { vec![batch, dirs, hidden] } else { vec![dirs, batch, hidden] };
    let mut out = vec![Fact::new(dt, y), Fact::new(dt, h.clone()), Fact::new(dt, h)];
    out.truncate(c.n_outputs());
    Ok(out)
}

fn infer_einsum(c: &Ctx) -> Result<Vec<Fact>, String> {
    let eq: String =
        c.attr_s("equation").ok_or("equation is required")?.chars().filter(|ch| !ch.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != c.inputs.len() {
        return Err(format!("equation has {} operands, node has {}", terms.len(), c.inputs.len()));
    }
    let mut sizes = std::collections::BTreeMap::<char, u64>::new();
    let mut counts = std::collections::BTreeMap::<char, usize>::new();
    let mut ellipsis: Vec<u64> = vec![];
    for (i, t) in terms.iter().enumerate() {
        let shape = c.shape(i)?;
        let letters: Vec<char> = t.replace("...", "").chars().collect();
        let ell_rank = shape.len().checked_sub(letters.len()).ok_or("operand rank smaller than its subscripts")?;
        let (before, after) = match t.find("...") {
            Some(p) => (t[..p].chars().count(), Some(p)),
            None if ell_rank != 0 => return Err("operand rank does not match its subscripts".into()),
            None => (letters.len(), None),
        };
        if after.is_some() {
            ellipsis = broadcast(&[&ellipsis, &shape[before..before + ell_rank]])?;
        }
        for (k, ch) in letters.iter().enumerate() {
            let dim = if k < before { shape[k] } else { shape[k + ell_rank] };
            let e = sizes.entry(*ch).or_insert(dim);
            if *e == 1 {
                *e = dim;
            } else if dim != 1 && *e != dim {
                return Err(format!("subscript {ch} has sizes {e} and {dim}"));
            }
            *counts.entry(*ch).or_default() += 1;
        }
    }
    let out_letters: String = match rhs {
        Some(r) => r,
        None => {
            let singles: String = counts.iter().filter(|(_, n)| **n == 1).map(|(ch, _)| *ch).collect();
            if lhs.contains("...") { format!("...{singles}") } else { singles }
        }
    };
    let mut out = vec![];
    let mut rest = out_letters.as_str();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            out.extend(&ellipsis);
            rest = r;
        } else {
            let ch = rest.chars().next().ok_or("bad equation")?;
            out.push(*sizes.get(&ch).ok_or_else(|| format!("output subscript {ch} not in inputs"))?);
            rest = &rest[ch.len_utf8()..];
        }
    }
    Ok(vec![Fact::new(c.dtype(0)?, out)])
}

fn infer_topk(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let ax = axis(c.attr_i("axis", -1), x.len())?;
    let k = if c.opset < 10 { c.attr_i("k", 0) } else { *c.const_ints(1, "K")?.first().ok_or("empty K")? };
    let mut s = x.to_vec();
    s[ax] = k as u64;
    Ok(vec![Fact::new(c.dtype(0)?, s.clone()), Fact::new(DType::I64, s)])
}

fn infer_argmax(c: &Ctx) -> Result<Vec<Fact>, String> {
    let x = c.shape(0)?;
    let ax = axis(c.attr_i("axis", 0), x.len())?;
    let mut s = x.to_vec();
    if c.attr_i("keepdims", 1) != 0 {
        s[ax] = 1;
    } else {
        s.remove(ax);
    }
    Ok(vec![Fact::new(DType::I64, s)])
}
