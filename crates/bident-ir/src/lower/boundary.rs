//! Sub-pass `boundary`: the graph's initializers, inputs (with the shapes and values pinned for
//! them), outputs and declared types read, every one of them typed.

use bident_tensor::{DType, HostTensor};

use super::Lowering;
use crate::ops::Fact;
use crate::proto::{TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto};
use crate::{IrError, consts};

/// The tensor `--input-value NAME=V,...` means for an input of element type `dtype` whose
/// declared dims are `dims`.
fn literal_value(
    name: &str,
    dtype: DType,
    dims: &[Option<u64>],
    pinned: Option<&Vec<u64>>,
    vals: &[f64],
) -> Result<HostTensor, IrError> {
    let bad = |reason: String| IrError::BadInputValue { input: name.to_string(), reason };
    let shape = match (pinned, dims.iter().copied().collect::<Option<Vec<u64>>>()) {
        (Some(p), _) => p.clone(),
        (None, Some(d)) => d,
        (None, None) if dims.len() == 1 => vec![vals.len() as u64],
        (None, None) => return Err(bad("has dynamic dims: pin its shape too (--input-shape)".into())),
    };
    if bident_tensor::numel(&shape) != vals.len() as u64 {
        return Err(bad(format!("{} values given for shape {shape:?}", vals.len())));
    }
    if let Some(v) = vals.iter().find(|&&v| !fits(dtype, v)) {
        let range = match integer_range(dtype) {
            Some((lo, hi)) => format!("whole numbers from {lo} to {hi}"),
            None => "finite numbers".into(),
        };
        return Err(bad(format!("{v} does not fit {} ({range})", dtype.name())));
    }
    HostTensor::from_f64(name, dtype, shape, vals).map_err(|e| bad(e.to_string()))
}

/// The values an integer or boolean type holds, as floats (`--input-value` parses numbers).
fn integer_range(dtype: DType) -> Option<(f64, f64)> {
    Some(match dtype {
        DType::Bool => (0.0, 1.0),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        // the floats that convert exactly: beyond 2^53 a parsed number is already rounded
        DType::I64 => (-(2f64.powi(53)), 2f64.powi(53)),
        DType::U64 => (0.0, 2f64.powi(53)),
        DType::F32 | DType::F64 | DType::F16 | DType::Bf16 => return None,
    })
}

/// Whether `v` is a value of `dtype` as given, not rounded or clamped into one.
fn fits(dtype: DType, v: f64) -> bool {
    match integer_range(dtype) {
        Some((lo, hi)) => v.fract() == 0.0 && (lo..=hi).contains(&v),
        // beyond its largest finite value a float type holds infinity, not the value given
        None => match dtype {
            DType::F16 => v.abs() <= 65504.0,
            DType::F32 | DType::Bf16 => v.abs() <= f32::MAX as f64,
            _ => v.is_finite(),
        },
    }
}

fn static_type(vi: &ValueInfoProto) -> Option<(i32, Vec<Option<u64>>, Vec<String>)> {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref()?.value.as_ref() else { return None };
    let shape = t.shape.as_ref()?;
    let mut dims = vec![];
    let mut syms = vec![];
    for d in &shape.dim {
        match &d.value {
            Some(tensor_shape_proto::dimension::Value::DimValue(v)) if *v >= 0 => {
                dims.push(Some(*v as u64));
                syms.push(String::new());
            }
            Some(tensor_shape_proto::dimension::Value::DimParam(p)) => {
                dims.push(None);
                syms.push(p.clone());
            }
            // a negative size is no size: said as such where the dim is reported
            Some(tensor_shape_proto::dimension::Value::DimValue(v)) => {
                dims.push(None);
                syms.push(v.to_string());
            }
            None => {
                dims.push(None);
                syms.push("?".into());
            }
        }
    }
    Some((t.elem_type.unwrap_or(0), dims, syms))
}

pub(crate) fn value_info(name: &str, dtype: DType, shape: &[u64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype.onnx_code()),
                shape: Some(TensorShapeProto {
                    dim: shape
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl Lowering<'_> {
    /// Sub-pass `boundary`: initializers, inputs (with pinning), outputs and declared shapes
    /// read, every one of them typed.
    pub(super) fn read_boundary(&mut self) -> Result<(), IrError> {
        let graph = self.model.graph.take().expect("checked at import");
        for (k, t) in graph.initializer.iter().enumerate() {
            self.add_initializer(k, t)?;
        }
        let inputs: Vec<&str> =
            graph.input.iter().map(|i| i.name()).filter(|i| !self.initializers.contains(*i)).collect();
        let unknown = |c: &String| !inputs.contains(&c.as_str());
        let no_such = || format!("the model has no input of that name (inputs: {})", inputs.join(", "));
        if let Some(c) = self.opts.input_shapes.keys().find(|c| unknown(c)) {
            return Err(IrError::BadInputShape { input: c.clone(), reason: no_such() });
        }
        if let Some(c) = self.opts.input_values.keys().chain(self.opts.input_literals.keys()).find(|c| unknown(c)) {
            return Err(IrError::BadInputValue { input: c.clone(), reason: no_such() });
        }
        for vi in &graph.input {
            if self.initializers.contains(vi.name()) {
                continue;
            }
            self.read_input(vi)?;
        }
        for vi in graph.value_info.iter().chain(&graph.output) {
            if let Some((code, dims, _)) = static_type(vi)
                && let (Some(dt), Some(shape)) =
                    (DType::from_onnx(code), dims.into_iter().collect::<Option<Vec<u64>>>())
            {
                self.declared.insert(vi.name().to_string(), Fact::new(dt, shape));
            }
        }
        self.outputs = graph.output.iter().map(|o| o.name().to_string()).collect();
        self.model.graph = Some(graph);
        Ok(())
    }

    /// Graph input `vi` (not an initializer), typed: its declared type, with the shape or the
    /// value pinned for it; its value a constant where pinned.
    fn read_input(&mut self, vi: &ValueInfoProto) -> Result<(), IrError> {
        let name = vi.name().to_string();
        let (code, dims, syms) = static_type(vi).ok_or_else(|| IrError::BadInput {
            input: name.clone(),
            reason: "is not a tensor with a known rank".into(),
        })?;
        let dtype = DType::from_onnx(code).ok_or_else(|| IrError::BadInput {
            input: name.clone(),
            reason: format!("unsupported element type code {code}"),
        })?;
        let literal = match self.opts.input_literals.get(&name) {
            Some(vals) => Some(literal_value(&name, dtype, &dims, self.opts.input_shapes.get(&name), vals)?),
            None => None,
        };
        let value = self.opts.input_values.get(&name).or(literal.as_ref());
        if let Some(v) = value {
            if v.dtype != dtype {
                return Err(IrError::BadInputValue {
                    input: name,
                    reason: format!("the model's input is {dtype}, the value given is {}", v.dtype),
                });
            }
            if self.opts.input_shapes.get(&name).is_some_and(|s| *s != v.shape) {
                return Err(IrError::BadInputShape {
                    input: name,
                    reason: "the pinned shape and the pinned value's shape differ".into(),
                });
            }
        }
        let shape = input_shape(&name, &dims, &syms, self.opts.input_shapes.get(&name).or(value.map(|v| &v.shape)))?;
        self.facts.insert(name.clone(), Fact::new(dtype, shape.clone()));
        if let Some(v) = value {
            self.consts.insert(name.clone(), v.clone());
        }
        self.inputs.push((name, Fact::new(dtype, shape)));
        Ok(())
    }

    /// An initializer (at index `k` of the graph's): its fact, and its value unless it is big.
    pub(super) fn add_initializer(&mut self, k: usize, t: &TensorProto) -> Result<(), IrError> {
        let bad = |reason| IrError::BadTensor { tensor: t.name().into(), reason };
        let (dtype, shape) = consts::header(t).map_err(bad)?;
        if bident_tensor::numel(&shape) as usize > self.opts.fold_limit {
            self.big.insert(t.name().into(), k);
        } else {
            self.consts.insert(t.name().into(), consts::from_proto(t).map_err(bad)?);
        }
        self.facts.insert(t.name().into(), Fact::new(dtype, shape));
        self.initializers.insert(t.name().into());
        Ok(())
    }
}

/// Input `name`'s shape: the one pinned for it (its shape or its value's), which must agree with
/// the declared `dims`; else the declared one, which must be static (`syms`: each dim as declared).
fn input_shape(
    name: &str,
    dims: &[Option<u64>],
    syms: &[String],
    pinned: Option<&Vec<u64>>,
) -> Result<Vec<u64>, IrError> {
    Ok(match pinned {
        Some(pinned) => {
            if pinned.len() != dims.len() {
                return Err(IrError::BadInputShape {
                    input: name.to_string(),
                    reason: format!("model says rank {}, given {}", dims.len(), pinned.len()),
                });
            }
            if let Some((i, d)) = dims.iter().enumerate().find(|(i, d)| d.is_some_and(|d| d != pinned[*i])) {
                return Err(IrError::BadInputShape {
                    input: name.to_string(),
                    reason: format!("dim {i} is fixed at {} in the model, given {}", d.unwrap_or(0), pinned[i]),
                });
            }
            pinned.clone()
        }
        None => match dims.iter().position(Option::is_none) {
            Some(i) => {
                let example = dims
                    .iter()
                    .zip(syms)
                    .map(|(d, s)| match d {
                        Some(v) => v.to_string(),
                        None if s.starts_with('-') => "D".into(),
                        None => s.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                if syms[i].starts_with('-') {
                    return Err(IrError::BadInput {
                        input: name.to_string(),
                        reason: format!(
                            "dim {i} is {} in the model, which is not a size; pin it with --input-shape \
                             {name}={example}",
                            syms[i]
                        ),
                    });
                }
                return Err(IrError::DynamicInput {
                    input: name.to_string(),
                    dim: i,
                    symbol: syms[i].clone(),
                    example,
                });
            }
            None => dims.iter().map(|d| d.unwrap_or(0)).collect(),
        },
    })
}
