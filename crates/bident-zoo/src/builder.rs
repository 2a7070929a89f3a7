//! A small ONNX graph builder with seeded weights.

use bident_ir::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, tensor_shape_proto, type_proto,
};
use bident_tensor::{DType, HostTensor};

/// ONNX opset the zoo writes.
pub const OPSET: i64 = 17;

/// An attribute value for [`Builder::node`].
pub enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Str(&'static str),
    Tensor(HostTensor),
    Graph(Box<GraphProto>),
}

impl From<i64> for Attr {
    fn from(v: i64) -> Self {
        Attr::Int(v)
    }
}
impl From<Vec<i64>> for Attr {
    fn from(v: Vec<i64>) -> Self {
        Attr::Ints(v)
    }
}
impl From<f32> for Attr {
    fn from(v: f32) -> Self {
        Attr::Float(v)
    }
}

pub struct Builder {
    seed: u64,
    counter: u64,
    graph: GraphProto,
}

fn tensor_type(dtype: DType, dims: &[Option<u64>], sym: &str) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(dtype.onnx_code()),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|d| tensor_shape_proto::Dimension {
                        value: Some(match d {
                            Some(v) => tensor_shape_proto::dimension::Value::DimValue(*v as i64),
                            None => tensor_shape_proto::dimension::Value::DimParam(sym.to_string()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            }),
        })),
        ..Default::default()
    }
}

impl Builder {
    pub fn new(seed: u64) -> Self {
        Self { seed, counter: 0, graph: GraphProto::default() }
    }

    fn fresh(&mut self, op: &str) -> String {
        self.counter += 1;
        format!("{}_{}", op.to_lowercase(), self.counter)
    }

    pub fn input(&mut self, name: &str, shape: &[u64]) -> String {
        let dims: Vec<Option<u64>> = shape.iter().map(|&d| Some(d)).collect();
        self.input_dyn(name, &dims, "")
    }

    /// An input whose `None` dims are symbolic, named `sym`.
    pub fn input_dyn(&mut self, name: &str, dims: &[Option<u64>], sym: &str) -> String {
        self.input_typed(name, DType::F32, dims, sym)
    }

    /// An input of any element type; `None` dims are symbolic, named `sym`.
    pub fn input_typed(&mut self, name: &str, dtype: DType, dims: &[Option<u64>], sym: &str) -> String {
        self.graph.input.push(ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(tensor_type(dtype, dims, sym)),
            ..Default::default()
        });
        name.to_string()
    }

    pub fn output(&mut self, name: &str) {
        self.graph.output.push(ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(tensor_type(DType::F32, &[], "")),
            ..Default::default()
        });
        // rank unknown to the builder: drop the shape, keep the element type
        if let Some(type_proto::Value::TensorType(t)) =
            self.graph.output.last_mut().and_then(|o| o.r#type.as_mut()).and_then(|t| t.value.as_mut())
        {
            t.shape = None;
        }
    }

    /// An output of element type `dtype`, rank left to inference.
    pub fn output_of(&mut self, name: &str, dtype: DType) {
        self.output(name);
        if let Some(type_proto::Value::TensorType(t)) =
            self.graph.output.last_mut().and_then(|o| o.r#type.as_mut()).and_then(|t| t.value.as_mut())
        {
            t.elem_type = Some(dtype.onnx_code());
        }
    }

    /// A constant float tensor (f32 or f16) with the given values.
    pub fn const_float(&mut self, name: &str, dtype: DType, shape: &[u64], values: &[f32]) -> String {
        let data = match dtype {
            DType::F16 => values.iter().flat_map(|&v| bident_tensor::f32_to_f16(v).to_le_bytes()).collect(),
            _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let dtype = if dtype == DType::F16 { DType::F16 } else { DType::F32 };
        self.add_initializer(name, &HostTensor { dtype, shape: shape.to_vec(), data })
    }

    /// The f32 weight [`Builder::weight`] would make, quantized to int8 per tensor
    /// (symmetric: scale = max |w| / 127); returns its name and the scale.
    pub fn weight_i8(&mut self, name: &str, shape: &[u64]) -> (String, f32) {
        let w = self.weight(name, shape);
        let t = self.graph.initializer.pop().expect("weight just added");
        let values: Vec<f32> =
            t.raw_data.unwrap_or_default().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let scale = values.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE) / 127.0;
        let data = values.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8 as u8).collect();
        (self.add_initializer(&w, &HostTensor { dtype: DType::I8, shape: shape.to_vec(), data }), scale)
    }

    pub fn const_i8(&mut self, name: &str, shape: &[u64], v: &[i8]) -> String {
        self.add_initializer(
            name,
            &HostTensor { dtype: DType::I8, shape: shape.to_vec(), data: v.iter().map(|&x| x as u8).collect() },
        )
    }

    /// A seeded ternary int8 weight: every value in {-1, 0, 1} (BitNet b1.58).
    pub fn ternary(&mut self, name: &str, shape: &[u64]) -> String {
        self.counter += 1;
        let t =
            HostTensor::seeded(DType::U8, shape.to_vec(), self.seed.wrapping_mul(1_000_003).wrapping_add(self.counter));
        let data = t.data.iter().map(|&b| ((b % 3) as i8 - 1) as u8).collect();
        self.add_initializer(name, &HostTensor { dtype: DType::I8, shape: shape.to_vec(), data })
    }

    /// An output without any type information.
    pub fn output_untyped(&mut self, name: &str) {
        self.graph.output.push(ValueInfoProto { name: Some(name.into()), ..Default::default() });
    }

    /// Add an initializer; one of that name already there is reused when it holds the same
    /// value, else the new one gets a fresh name (a model may define a name only once).
    fn add_initializer(&mut self, name: &str, t: &HostTensor) -> String {
        let proto = tensor_proto(name, t);
        let mut unique = name.to_string();
        let mut k = 1;
        while let Some(existing) = self.graph.initializer.iter().find(|i| i.name() == unique) {
            if *existing == (TensorProto { name: Some(unique.clone()), ..proto.clone() }) {
                return unique;
            }
            unique = format!("{name}.{k}");
            k += 1;
        }
        self.graph.initializer.push(TensorProto { name: Some(unique.clone()), ..proto });
        unique
    }

    /// A seeded weight with values in [-1, 1) scaled by 1/sqrt(fan-in) so activations stay tame.
    pub fn weight(&mut self, name: &str, shape: &[u64]) -> String {
        self.counter += 1;
        let t = HostTensor::seeded(
            DType::F32,
            shape.to_vec(),
            self.seed.wrapping_mul(1_000_003).wrapping_add(self.counter),
        );
        let fan_in = shape.iter().skip(1).product::<u64>().max(1) as f32;
        let scale = 1.0 / fan_in.sqrt();
        let data = t
            .data
            .chunks(4)
            .flat_map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * scale).to_le_bytes())
            .collect();
        self.add_initializer(name, &HostTensor { data, ..t })
    }

    /// A seeded weight of another element type: f16 from the f32 weight's values, integers as
    /// seeded bytes.
    pub fn weight_typed(&mut self, name: &str, dtype: DType, shape: &[u64]) -> String {
        match dtype {
            DType::F32 => self.weight(name, shape),
            DType::F16 => {
                let w = self.weight(name, shape);
                let t = self.graph.initializer.pop().expect("weight just added");
                let data: Vec<u8> = t
                    .raw_data
                    .unwrap_or_default()
                    .chunks(4)
                    .flat_map(|c| bident_tensor::f32_to_f16(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                    .collect();
                self.add_initializer(&w, &HostTensor { dtype, shape: shape.to_vec(), data })
            }
            _ => {
                self.counter += 1;
                let t = HostTensor::seeded(
                    dtype,
                    shape.to_vec(),
                    self.seed.wrapping_mul(1_000_003).wrapping_add(self.counter),
                );
                self.add_initializer(name, &t)
            }
        }
    }

    pub fn scalar_f32(&mut self, name: &str, v: f32) -> String {
        self.add_initializer(name, &HostTensor { dtype: DType::F32, shape: vec![], data: v.to_le_bytes().to_vec() })
    }

    pub fn const_i64(&mut self, name: &str, shape: &[u64], v: &[i64]) -> String {
        self.add_initializer(
            name,
            &HostTensor {
                dtype: DType::I64,
                shape: shape.to_vec(),
                data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
        )
    }

    pub fn const_i32(&mut self, name: &str, shape: &[u64], v: &[i32]) -> String {
        self.add_initializer(
            name,
            &HostTensor {
                dtype: DType::I32,
                shape: shape.to_vec(),
                data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
        )
    }

    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        self.node_domain_attrs(op, "", inputs, attrs)
    }

    pub fn node_domain(&mut self, op: &str, domain: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        self.node_domain_attrs(op, domain, inputs, attrs)
    }

    fn node_domain_attrs(&mut self, op: &str, domain: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        let out = self.fresh(op);
        let name = format!("{out}_node");
        self.push(&name, op, domain, inputs, std::slice::from_ref(&out.as_str()), attrs);
        out
    }

    /// A node with explicit node and output names.
    pub fn node_named(&mut self, name: &str, op: &str, inputs: &[&str], outputs: &[&str], attrs: &[(&str, Attr)]) {
        self.push(name, op, "", inputs, outputs, attrs);
    }

    fn push(&mut self, name: &str, op: &str, domain: &str, inputs: &[&str], outputs: &[&str], attrs: &[(&str, Attr)]) {
        let attribute = attrs
            .iter()
            .map(|(k, v)| {
                let mut a = AttributeProto { name: Some(k.to_string()), ..Default::default() };
                match v {
                    Attr::Int(i) => {
                        a.i = Some(*i);
                        a.r#type = Some(AttributeType::Int as i32);
                    }
                    Attr::Ints(is) => {
                        a.ints = is.clone();
                        a.r#type = Some(AttributeType::Ints as i32);
                    }
                    Attr::Float(f) => {
                        a.f = Some(*f);
                        a.r#type = Some(AttributeType::Float as i32);
                    }
                    Attr::Str(v) => {
                        a.s = Some(v.as_bytes().to_vec());
                        a.r#type = Some(AttributeType::String as i32);
                    }
                    Attr::Tensor(t) => {
                        a.t = Some(tensor_proto("", t));
                        a.r#type = Some(AttributeType::Tensor as i32);
                    }
                    Attr::Graph(g) => {
                        a.g = Some(g.as_ref().clone());
                        a.r#type = Some(AttributeType::Graph as i32);
                    }
                }
                a
            })
            .collect();
        self.graph.node.push(NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            domain: (!domain.is_empty()).then(|| domain.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        });
    }

    pub fn conv(&mut self, x: &str, cin: u64, cout: u64, k: u64, pad: i64) -> String {
        self.conv_strided(x, cin, cout, k, pad, 1)
    }

    pub fn conv_strided(&mut self, x: &str, cin: u64, cout: u64, k: u64, pad: i64, stride: i64) -> String {
        let id = self.counter + 1;
        let w = self.weight(&format!("conv{id}.w"), &[cout, cin, k, k]);
        let b = self.weight(&format!("conv{id}.b"), &[cout]);
        let mut attrs = vec![("pads", vec![pad; 4].into()), ("kernel_shape", vec![k as i64; 2].into())];
        if stride != 1 {
            attrs.push(("strides", vec![stride; 2].into()));
        }
        self.node("Conv", &[x, &w, &b], &attrs)
    }

    /// Conv, BatchNormalization and, when `relu`, Relu: the classic fusable group.
    pub fn conv_bn(&mut self, x: &str, cin: u64, cout: u64, (k, pad, stride): (u64, i64, i64), relu: bool) -> String {
        let c = self.conv_strided(x, cin, cout, k, pad, stride);
        let id = self.counter + 1;
        let scale = self.weight(&format!("bn{id}.scale"), &[cout]);
        let bias = self.weight(&format!("bn{id}.bias"), &[cout]);
        let mean = self.weight(&format!("bn{id}.mean"), &[cout]);
        let var_t = HostTensor {
            dtype: DType::F32,
            shape: vec![cout],
            data: (0..cout).flat_map(|i| (1.0f32 + i as f32 * 0.01).to_le_bytes()).collect(),
        };
        let var = self.add_initializer(&format!("bn{id}.var"), &var_t);
        let bn = self.node("BatchNormalization", &[&c, &scale, &bias, &mean, &var], &[]);
        if relu { self.node("Relu", &[&bn], &[]) } else { bn }
    }

    pub fn conv_bn_relu(&mut self, x: &str, cin: u64, cout: u64, k: u64, pad: i64) -> String {
        self.conv_bn(x, cin, cout, (k, pad, 1), true)
    }

    /// Declare an output with a static f32 shape (subgraph outputs need one).
    pub fn output_typed(&mut self, name: &str, shape: &[u64]) {
        let dims: Vec<Option<u64>> = shape.iter().map(|&d| Some(d)).collect();
        self.graph.output.push(ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(tensor_type(DType::F32, &dims, "")),
            ..Default::default()
        });
    }

    /// Finish as a subgraph (a branch or loop body) rather than a model.
    pub fn finish_graph(&mut self, name: &str) -> GraphProto {
        let mut graph = std::mem::take(&mut self.graph);
        graph.name = Some(name.into());
        graph
    }

    pub fn finish(&mut self, name: &str) -> ModelProto {
        let mut graph = std::mem::take(&mut self.graph);
        graph.name = Some(name.into());
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(OPSET) }],
            producer_name: Some("bident-zoo".into()),
            graph: Some(graph),
            ..Default::default()
        }
    }
}

fn tensor_proto(name: &str, t: &HostTensor) -> TensorProto {
    TensorProto {
        name: (!name.is_empty()).then(|| name.into()),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.onnx_code()),
        raw_data: Some(t.data.clone().into()),
        ..Default::default()
    }
}
