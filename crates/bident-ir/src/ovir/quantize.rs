//! FakeQuantize: QuantizeLinear + DequantizeLinear where it is a plain 256-level grid, else its
//! formula written out.

use bident_tensor::DType;

use super::{A, Args, Converter, Registry};

pub(super) fn register(r: &mut Registry) {
    r.add(&["FakeQuantize"], fake_quantize);
}

/// FakeQuantize: x clamped to [input_low, input_high], rounded onto `levels` steps and mapped
/// onto [output_low, output_high]. A 256-level grid whose input and output ranges agree and
/// hold an integer zero point (what NNCF and ovc's reading of ONNX Q/DQ pairs give), per
/// tensor or along one axis, is exactly QuantizeLinear + DequantizeLinear (uint8); any other
/// is written out as the formula.
fn fake_quantize(c: &mut Converter, a: &Args) -> Result<(), String> {
    let (id, name, i, dims, dtype) = (a.id, a.name, &a.i, a.dims, a.dtype0());
    if i.len() < 5 {
        return Err("needs the data and four range inputs".into());
    }
    let levels = a.l.ints("levels")?.first().copied().ok_or("missing attribute `levels`")?;
    if levels < 2 {
        return Err(format!("levels = {levels}"));
    }
    if let Some((scale, zero, axis)) = c.uniform_grid(i, dims, levels, dtype) {
        let shape = if axis.is_some() { vec![scale.len() as u64] } else { vec![] };
        let s = bident_tensor::HostTensor::from_f64("scale", DType::F32, shape.clone(), &scale)
            .map_err(|e| e.to_string())?;
        let s = c.constant(&format!("{name}/scale"), DType::F32, shape.clone(), s.data.into());
        let z = c.constant(&format!("{name}/zero_point"), DType::U8, shape, zero.into());
        let attrs = || axis.map(|a| vec![("axis", A::I(a))]).unwrap_or_default();
        let q = c.op("QuantizeLinear", name, &[i[0], &s, &z], attrs());
        let outs = c.name_outputs(id);
        c.node("DequantizeLinear", name, &[&q, &s, &z], &[&outs[0]], attrs());
        return Ok(());
    }
    let (x, il, ih, ol, oh) = (i[0], i[1], i[2], i[3], i[4]);
    let steps = c.scalar(&format!("{name}/steps"), dtype, (levels - 1) as f64)?;
    let lo = c.op("Min", name, &[il, ih], vec![]);
    let hi = c.op("Max", name, &[il, ih], vec![]);
    let t = c.op("Sub", name, &[x, il], vec![]);
    let range = c.op("Sub", name, &[ih, il], vec![]);
    let t = c.op("Div", name, &[&t, &range], vec![]);
    let t = c.op("Mul", name, &[&t, &steps], vec![]);
    let t = c.op("Round", name, &[&t], vec![]);
    let t = c.op("Div", name, &[&t, &steps], vec![]);
    let out_range = c.op("Sub", name, &[oh, ol], vec![]);
    let t = c.op("Mul", name, &[&t, &out_range], vec![]);
    let mid = c.op("Add", name, &[&t, ol], vec![]);
    let above = c.op("Greater", name, &[x, &hi], vec![]);
    let upper = c.op("Where", name, &[&above, oh, &mid], vec![]);
    let below = c.op("LessOrEqual", name, &[x, &lo], vec![]);
    let outs = c.name_outputs(id);
    c.node("Where", name, &[&below, ol, &upper], &[&outs[0]], vec![]);
    Ok(())
}

impl Converter<'_> {
    /// Scale, uint8 zero point and axis of a FakeQuantize that is a plain 256-level grid.
    fn uniform_grid(
        &self,
        i: &[&str],
        dims: &[Vec<i64>],
        levels: i64,
        dtype: DType,
    ) -> Option<(Vec<f64>, Vec<u8>, Option<i64>)> {
        if levels != 256 || dtype != DType::F32 {
            return None;
        }
        let (il, shape) = self.floats_of(i[1])?;
        let (ih, shape_h) = self.floats_of(i[2])?;
        let (ol, shape_ol) = self.floats_of(i[3])?;
        let (oh, shape_oh) = self.floats_of(i[4])?;
        if shape != shape_h || shape != shape_ol || shape != shape_oh || il != ol || ih != oh {
            return None;
        }
        // per tensor, or one axis of the data (the range's dims aligned to the data's from the right)
        let rank = dims.first()?.len();
        let wide: Vec<usize> = (0..shape.len()).filter(|&k| shape[k] != 1).collect();
        let axis = match wide[..] {
            [] => None,
            [k] if shape.len() <= rank => Some((k + rank - shape.len()) as i64),
            _ => return None,
        };
        let mut scale = Vec::with_capacity(il.len());
        let mut zero = Vec::with_capacity(il.len());
        for (&lo, &hi) in il.iter().zip(&ih) {
            let s = (hi - lo) / (levels - 1) as f64;
            let z = -lo / s;
            let on_grid = s.is_finite() && s > 0.0 && (z - z.round()).abs() <= 1e-3;
            if !on_grid || !(0.0..=255.0).contains(&z.round()) {
                return None;
            }
            scale.push(s);
            zero.push(z.round() as u8);
        }
        Some((scale, zero, axis))
    }

    /// Values and dims of a constant float tensor.
    fn floats_of(&self, t: &str) -> Option<(Vec<f64>, Vec<u64>)> {
        let (dtype, shape, data) = self.consts.get(t)?;
        let v = bident_tensor::HostTensor::new(t, *dtype, shape.clone(), data.to_vec()).ok()?;
        dtype.is_float().then(|| ((0..v.numel()).map(|k| v.get_f64(k)).collect(), shape.clone()))
    }
}
