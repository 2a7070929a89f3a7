//! Element types and host tensors: the vocabulary that bident-ir (graph types), bident-backend
//! (buffers handed to a PU) and bident-runtime (tensors passed between operators) share.
//!
//! This crate is a leaf: it depends on nothing of bident's and knows no backend.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Element type of a tensor. The discriminants are ONNX's `TensorProto.DataType` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    Bf16 = 16,
}

impl DType {
    pub fn from_onnx(code: i32) -> Option<Self> {
        Some(match code {
            1 => Self::F32,
            2 => Self::U8,
            3 => Self::I8,
            4 => Self::U16,
            5 => Self::I16,
            6 => Self::I32,
            7 => Self::I64,
            9 => Self::Bool,
            10 => Self::F16,
            11 => Self::F64,
            12 => Self::U32,
            13 => Self::U64,
            16 => Self::Bf16,
            _ => return None,
        })
    }

    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    pub fn size(self) -> usize {
        match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 | Self::F16 | Self::Bf16 => 2,
            Self::F32 | Self::I32 | Self::U32 => 4,
            Self::F64 | Self::I64 | Self::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::Bf16 | Self::F64)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::U8 => "u8",
            Self::I8 => "i8",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::Bool => "bool",
            Self::F16 => "f16",
            Self::F64 => "f64",
            Self::U32 => "u32",
            Self::U64 => "u64",
            Self::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Number of elements of a static shape (1 for a scalar), saturating instead of overflowing:
/// shapes come from files and can be absurd.
pub fn numel(shape: &[u64]) -> u64 {
    shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
}

#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    #[error("tensor `{name}`: {dtype} {shape:?} needs {expected} bytes, got {got}")]
    SizeMismatch { name: String, dtype: DType, shape: Vec<u64>, expected: usize, got: usize },
    #[error("tensors differ in {what}: {a} vs {b}")]
    Incomparable { what: &'static str, a: String, b: String },
}

/// A dense tensor in host memory, little-endian, row-major.
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostTensor({} {:?}, {} bytes)", self.dtype, self.shape, self.data.len())
    }
}

impl HostTensor {
    pub fn new(name: &str, dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Self, TensorError> {
        let expected = (numel(&shape) as usize).saturating_mul(dtype.size());
        if expected != data.len() {
            return Err(TensorError::SizeMismatch { name: name.to_string(), dtype, shape, expected, got: data.len() });
        }
        Ok(Self { dtype, shape, data })
    }

    /// A tensor of the given values (row-major), converted to `dtype` as a cast would: floats
    /// rounded to the type, integers truncated and saturated, booleans as `v != 0`.
    pub fn from_f64(name: &str, dtype: DType, shape: Vec<u64>, values: &[f64]) -> Result<Self, TensorError> {
        let mut data = Vec::with_capacity(values.len() * dtype.size());
        for &v in values {
            match dtype {
                DType::F32 => data.extend_from_slice(&(v as f32).to_le_bytes()),
                DType::F64 => data.extend_from_slice(&v.to_le_bytes()),
                DType::F16 => data.extend_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
                DType::Bf16 => data.extend_from_slice(&(((v as f32).to_bits() >> 16) as u16).to_le_bytes()),
                DType::Bool => data.push(u8::from(v != 0.0)),
                DType::U8 => data.push(v as u8),
                DType::I8 => data.extend_from_slice(&(v as i8).to_le_bytes()),
                DType::U16 => data.extend_from_slice(&(v as u16).to_le_bytes()),
                DType::I16 => data.extend_from_slice(&(v as i16).to_le_bytes()),
                DType::I32 => data.extend_from_slice(&(v as i32).to_le_bytes()),
                DType::U32 => data.extend_from_slice(&(v as u32).to_le_bytes()),
                DType::I64 => data.extend_from_slice(&(v as i64).to_le_bytes()),
                DType::U64 => data.extend_from_slice(&(v as u64).to_le_bytes()),
            }
        }
        Self::new(name, dtype, shape, data)
    }

    pub fn zeros(dtype: DType, shape: Vec<u64>) -> Self {
        let n = numel(&shape) as usize * dtype.size();
        Self { dtype, shape, data: vec![0; n] }
    }

    /// A deterministic pseudo-random tensor: floats in [-1, 1), integers in {0, 1}, booleans
    /// true/false. Integer inputs are kept tiny so they are valid indices, ids and masks.
    pub fn seeded(dtype: DType, shape: Vec<u64>, seed: u64) -> Self {
        let n = numel(&shape) as usize;
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // splitmix64
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let mut data = Vec::with_capacity(n * dtype.size());
        for _ in 0..n {
            let r = next();
            let unit = (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            let bit = r & 1;
            match dtype {
                DType::F32 => data.extend_from_slice(&(unit as f32).to_le_bytes()),
                DType::F64 => data.extend_from_slice(&unit.to_le_bytes()),
                DType::F16 => data.extend_from_slice(&f32_to_f16(unit as f32).to_le_bytes()),
                DType::Bf16 => data.extend_from_slice(&(((unit as f32).to_bits() >> 16) as u16).to_le_bytes()),
                _ => {
                    let mut v = vec![0u8; dtype.size()];
                    v[0] = bit as u8;
                    data.extend_from_slice(&v);
                }
            }
        }
        Self { dtype, shape, data }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape) as usize
    }

    /// Element `i` widened to f64 (for comparisons and reports).
    pub fn get_f64(&self, i: usize) -> f64 {
        let s = self.dtype.size();
        let b = &self.data[i * s..(i + 1) * s];
        let mut a8 = [0u8; 8];
        a8[..s].copy_from_slice(b);
        match self.dtype {
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::F64 => f64::from_le_bytes(a8),
            DType::F16 => f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
            DType::Bf16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64,
            DType::U8 | DType::Bool => b[0] as f64,
            DType::I8 => b[0] as i8 as f64,
            DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
            DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::I64 => i64::from_le_bytes(a8) as f64,
            DType::U64 => u64::from_le_bytes(a8) as f64,
        }
    }

    /// Largest absolute elementwise difference; NaN in either side counts as infinite.
    pub fn max_abs_diff(&self, other: &HostTensor) -> Result<f64, TensorError> {
        if self.dtype != other.dtype {
            return Err(TensorError::Incomparable {
                what: "dtype",
                a: self.dtype.to_string(),
                b: other.dtype.to_string(),
            });
        }
        if self.shape != other.shape {
            return Err(TensorError::Incomparable {
                what: "shape",
                a: format!("{:?}", self.shape),
                b: format!("{:?}", other.shape),
            });
        }
        Ok((0..self.numel()).map(|i| distance(self.get_f64(i), other.get_f64(i))).fold(0.0, f64::max))
    }
}

impl HostTensor {
    /// `None` when every element satisfies `|got - want| <= atol + rtol * |want|` (NaN equal to
    /// NaN, as the ONNX test runner treats them); otherwise the worst element, described.
    pub fn mismatch(&self, want: &HostTensor, rtol: f64, atol: f64) -> Option<String> {
        if self.dtype != want.dtype {
            return Some(format!("dtype {} vs expected {}", self.dtype, want.dtype));
        }
        if self.shape != want.shape {
            return Some(format!("shape {:?} vs expected {:?}", self.shape, want.shape));
        }
        let mut worst: Option<(usize, f64, f64, f64)> = None;
        for i in 0..self.numel() {
            let (g, w) = (self.get_f64(i), want.get_f64(i));
            let d = distance(g, w);
            let excess = if d == 0.0 { 0.0 } else { d - (atol + rtol * w.abs()) };
            if excess > 0.0 && worst.is_none_or(|(_, _, _, e)| excess > e) {
                worst = Some((i, g, w, excess));
            }
        }
        worst.map(|(i, g, w, _)| format!("element {i}: {g} vs expected {w}"))
    }
}

/// `|a - b|`, with NaN equal to NaN and infinitely far from any number.
fn distance(a: f64, b: f64) -> f64 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => 0.0,
        (false, false) if a == b => 0.0,
        (false, false) => (a - b).abs(),
        _ => f64::INFINITY,
    }
}

/// IEEE half to single precision.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // subnormal: renormalise
            let mut e = 127 - 15 + 1;
            let mut f = f;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 127 - 15) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// Single to half precision, round to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if frac != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = frac | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = rem > mid || (rem == mid && half & 1 == 1);
        return sign | (half as u16 + round as u16);
    }
    let half = ((e as u32) << 10) | (frac >> 13);
    let rem = frac & 0x1fff;
    let round = rem > 0x1000 || (rem == 0x1000 && half & 1 == 1);
    sign | (half + round as u32) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_representable_values() {
        for v in [0.0f32, 1.0, -2.5, 0.333_251_95, 65504.0, 6.103_515_6e-5, 5.960_464_5e-8] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
        }
        assert_eq!(f32_to_f16(1e6), 0x7c00);
    }

    #[test]
    fn seeded_is_deterministic_and_in_range() {
        let a = HostTensor::seeded(DType::F32, vec![4, 5], 7);
        assert_eq!(a, HostTensor::seeded(DType::F32, vec![4, 5], 7));
        assert_ne!(a, HostTensor::seeded(DType::F32, vec![4, 5], 8));
        assert!((0..a.numel()).all(|i| a.get_f64(i).abs() <= 1.0));
        let ids = HostTensor::seeded(DType::I64, vec![16], 1);
        assert!((0..16).all(|i| ids.get_f64(i) == 0.0 || ids.get_f64(i) == 1.0));
    }

    #[test]
    fn diff_checks_shape_and_values() {
        let a = HostTensor::seeded(DType::F32, vec![3], 1);
        let mut b = a.clone();
        b.data[0..4].copy_from_slice(&(a.get_f64(0) as f32 + 0.5).to_le_bytes());
        assert!((a.max_abs_diff(&b).unwrap() - 0.5).abs() < 1e-6);
        let c = HostTensor::seeded(DType::F32, vec![1, 3], 1);
        assert!(a.max_abs_diff(&c).is_err());
        assert!(HostTensor::new("t", DType::F32, vec![2], vec![0; 7]).is_err());
    }
}
