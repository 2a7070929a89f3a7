//! Constant tensors: conversion between ONNX `TensorProto` and [`HostTensor`], and the f64 view
//! that constant evaluation of shape arithmetic works in.

use bident_tensor::{DType, HostTensor};

use crate::proto::TensorProto;

/// Element type and shape of an (already external-data-resolved) ONNX tensor, checked against
/// the data it carries, without copying the data.
pub(crate) fn header(t: &TensorProto) -> Result<(DType, Vec<u64>), String> {
    let code = t.data_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| format!("unsupported data type code {code}"))?;
    if t.dims.iter().any(|&d| d < 0) {
        return Err(format!("negative dim in {:?}", t.dims));
    }
    let shape: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
    // checked: dims come from the file and may be absurd
    let n = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| n.checked_mul(dtype.size()).is_some())
        .ok_or_else(|| format!("element count of dims {:?} overflows", t.dims))?;
    let stored = match t.raw_data.as_ref().filter(|r| !r.is_empty() || n == 0) {
        Some(raw) => raw.len(),
        None => typed_len(t, dtype) * dtype.size(),
    };
    if stored != n * dtype.size() {
        return Err(format!("{dtype}{shape:?} needs {} bytes of data, the tensor holds {stored}", n * dtype.size()));
    }
    Ok((dtype, shape))
}

/// Elements in the type-specific field the data of `dtype` is stored in.
fn typed_len(t: &TensorProto, dtype: DType) -> usize {
    match dtype {
        DType::F32 => t.float_data.len(),
        DType::F64 => t.double_data.len(),
        DType::I64 => t.int64_data.len(),
        DType::U32 | DType::U64 => t.uint64_data.len(),
        _ => t.int32_data.len(),
    }
}

/// Decode an (already external-data-resolved) ONNX tensor.
pub(crate) fn from_proto(t: &TensorProto) -> Result<HostTensor, String> {
    let (dtype, shape) = header(t)?;
    let n = bident_tensor::numel(&shape) as usize;
    let mut data = Vec::with_capacity(n * dtype.size());
    if let Some(raw) = t.raw_data.as_ref().filter(|r| !r.is_empty() || n == 0) {
        data.extend_from_slice(raw);
    } else {
        match dtype {
            DType::F32 => t.float_data.iter().for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
            DType::F64 => t.double_data.iter().for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
            DType::I64 => t.int64_data.iter().for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
            DType::U32 | DType::U64 => {
                t.uint64_data.iter().for_each(|&v| data.extend_from_slice(&v.to_le_bytes()[..dtype.size()]))
            }
            // int32_data carries the narrower types, one element per int32
            _ => t.int32_data.iter().for_each(|&v| data.extend_from_slice(&v.to_le_bytes()[..dtype.size()])),
        }
    }
    HostTensor::new(t.name(), dtype, shape, data).map_err(|e| e.to_string())
}

pub(crate) fn to_proto(name: &str, t: &HostTensor) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.onnx_code()),
        raw_data: Some(bytes::Bytes::copy_from_slice(&t.data)),
        ..Default::default()
    }
}

pub(crate) fn to_f64(t: &HostTensor) -> Vec<f64> {
    (0..t.numel()).map(|i| t.get_f64(i)).collect()
}

/// Integer view: exact for i64/i32 (shape arithmetic uses i64::MAX as "to the end").
pub(crate) fn to_i64(t: &HostTensor) -> Vec<i64> {
    match t.dtype {
        DType::I64 => t.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
        DType::I32 => {
            t.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64).collect()
        }
        DType::U64 => {
            t.data.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as i64).collect()
        }
        _ => to_f64(t).into_iter().map(|v| v as i64).collect(),
    }
}

/// Integers into an integer type, keeping the low bits (two's complement wrap).
pub(crate) fn from_i64_wrapping(dtype: DType, shape: Vec<u64>, values: &[i64]) -> HostTensor {
    let size = dtype.size();
    let data = values.iter().flat_map(|v| v.to_le_bytes()[..size].to_vec()).collect();
    HostTensor { dtype, shape, data }
}

pub(crate) fn from_f64(dtype: DType, shape: Vec<u64>, values: &[f64]) -> HostTensor {
    // callers give one value per element; should one not, keep the values rather than the shape
    let n = values.len() as u64;
    let shape = if bident_tensor::numel(&shape) == n { shape } else { vec![n] };
    HostTensor::from_f64("", dtype, shape, values).unwrap_or_else(|_| HostTensor::zeros(dtype, vec![0]))
}
