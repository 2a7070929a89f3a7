//! OpenVINO IR (`.xml` + `.bin`, IR v10/v11 as `ovc` writes it) into an ONNX model, which then
//! goes through the same lowering as any ONNX file: one op knowledge, one fused graph.
//!
//! Each layer becomes the ONNX op(s) that compute the same thing. Where OpenVINO's op differs
//! from ONNX's, the conversion says how: `GroupConvolution` weights `[G, O/G, I/G, k..]` become a
//! `Conv` with `group = G` and weights `[O, I/G, k..]`; `MatMul`'s transpose flags become a
//! transposed constant or a `Transpose`; `Slice` takes `step` before `axes`; an empty `axes` on a
//! reduction is the identity; `MVN` over the trailing axes is `LayerNormalization`;
//! `ScaledDotProductAttention` is MatMul, scale, mask (a causal one built from the static
//! lengths), Softmax, MatMul; `LSTMSequence` (gates f,i,c,o, one summed bias, batch first) is an
//! ONNX `LSTM` (gates i,o,f,c, two biases, sequence first) between Transposes, and
//! `GRUSequence` and `RNNSequence` likewise; `StridedSlice`'s new-axis, shrink and ellipsis
//! masks are Slice, Squeeze and Unsqueeze; `Broadcast` in explicit mode is Unsqueeze + Expand;
//! `Gather` with `batch_dims` (along the first non-batch axis) is `GatherND`; an integer
//! `Divide` rounds down (`(a - a mod b) / b`), ONNX's `Div` truncates; `FakeQuantize` on a
//! 256-level grid is `QuantizeLinear` + `DequantizeLinear`, any other is written out;
//! `Interpolate` is `Resize` (its sizes or scales for the given axes); the `*BackpropData`
//! convolutions are `ConvTranspose` (grouped weights merged as for `GroupConvolution`). A layer
//! type without a conversion is an error naming the layer.
//!
//! Tensor names: an output port's `names` (the ONNX tensor names ovc kept) when present, else
//! `<layer name>:<port>`.

use std::collections::{HashMap, HashSet};

use bident_tensor::DType;
use bytes::Bytes;

use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, type_proto,
};

/// The ONNX opset the converted model uses (Reduce* and Split take their axes as inputs).
const OPSET: i64 = 18;

#[derive(Clone)]
struct Port {
    id: u32,
    dtype: Option<DType>,
    dims: Vec<i64>,
    names: Vec<String>,
}

#[derive(Clone)]
struct Layer {
    id: u32,
    name: String,
    ty: String,
    /// The op's opset (`opset4`), where an op changed its inputs between versions.
    version: String,
    data: HashMap<String, String>,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    output_names: Option<String>,
}

impl Layer {
    fn attr(&self, k: &str) -> Option<&str> {
        self.data.get(k).map(String::as_str)
    }

    fn ints(&self, k: &str) -> Result<Vec<i64>, String> {
        let v = self.attr(k).ok_or_else(|| format!("missing attribute `{k}`"))?;
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<i64>().map_err(|_| format!("attribute `{k}` = `{v}` is not a list of integers")))
            .collect()
    }

    fn float(&self, k: &str) -> Result<f32, String> {
        let v = self.attr(k).ok_or_else(|| format!("missing attribute `{k}`"))?;
        v.trim().parse::<f64>().map(|x| x as f32).map_err(|_| format!("attribute `{k}` = `{v}` is not a number"))
    }

    fn flag(&self, k: &str) -> bool {
        self.attr(k).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }
}

/// The newest OpenVINO opset a layer may name (the pinned 2026.4.1 has opset1 to opset16).
const NEWEST_OPSET: u32 = 16;

/// `opset1` to the newest: a layer from an opset version this build does not know may mean
/// other inputs or attributes than the conversion reads, so it is refused, not guessed.
fn known_opset(v: &str) -> bool {
    v.strip_prefix("opset").and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (1..=NEWEST_OPSET).contains(&n))
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

fn element_type(s: &str) -> Option<DType> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "f32" | "fp32" => DType::F32,
        "f16" | "fp16" => DType::F16,
        "bf16" => DType::Bf16,
        "f64" | "fp64" => DType::F64,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "u8" => DType::U8,
        "u16" => DType::U16,
        "u32" => DType::U32,
        "u64" => DType::U64,
        "boolean" | "bool" => DType::Bool,
        _ => return None,
    })
}

fn parse_ports(node: Option<roxmltree::Node>) -> Result<Vec<Port>, String> {
    let Some(node) = node else { return Ok(vec![]) };
    node.children()
        .filter(|c| c.has_tag_name("port"))
        .map(|p| {
            let id = p.attribute("id").and_then(|v| v.parse().ok()).ok_or("a port without a numeric id")?;
            let dims = p
                .children()
                .filter(|c| c.has_tag_name("dim"))
                .map(|d| {
                    let t = d.text().unwrap_or("").trim();
                    t.parse::<i64>()
                        .ok()
                        .filter(|&v| v >= -1)
                        .ok_or_else(|| format!("port {id}: dim `{t}` is not a size or -1"))
                })
                .collect::<Result<_, _>>()?;
            let names = p
                .attribute("names")
                .map(|n| {
                    let mut out = vec![String::new()];
                    let mut chars = n.chars().peekable();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' if chars.peek() == Some(&',') => out.last_mut().expect("non-empty").push(','),
                            ',' => out.push(String::new()),
                            c => out.last_mut().expect("non-empty").push(c),
                        }
                    }
                    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
                })
                .unwrap_or_default();
            Ok(Port { id, dtype: p.attribute("precision").and_then(element_type), dims, names })
        })
        .collect()
}

/// Convert an IR's XML text and its weights file into an ONNX model. Weights stay slices of
/// `bin` until the model is encoded.
pub(crate) fn to_onnx(xml: &str, bin: &Bytes, name: &str) -> Result<ModelProto, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("not XML: {e}"))?;
    let net = doc.root_element();
    if !net.has_tag_name("net") {
        return Err(format!("the root element is <{}>, not <net>", net.tag_name().name()));
    }
    let version = net.attribute("version").unwrap_or("?");
    if !matches!(version, "10" | "11") {
        return Err(format!("IR version {version} (bident reads versions 10 and 11)"));
    }
    fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
        n.children().find(|c| c.has_tag_name(tag))
    }
    let mut layers = vec![];
    for l in child(net, "layers").ok_or("no <layers>")?.children().filter(|c| c.has_tag_name("layer")) {
        let id: u32 = l.attribute("id").and_then(|v| v.parse().ok()).ok_or("a layer without a numeric id")?;
        let label = l.attribute("name").unwrap_or("").to_string();
        let ctx = |e: String| format!("layer {id} `{label}`: {e}");
        let version = l.attribute("version").unwrap_or("").to_string();
        if !known_opset(&version) {
            return Err(ctx(format!("opset `{version}` is not one this build knows (opset1 to opset{NEWEST_OPSET})")));
        }
        layers.push(Layer {
            id,
            name: label.clone(),
            ty: l.attribute("type").ok_or_else(|| ctx("no type".into()))?.to_string(),
            version,
            data: child(l, "data")
                .map(|d| d.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect())
                .unwrap_or_default(),
            inputs: parse_ports(child(l, "input")).map_err(ctx)?,
            outputs: parse_ports(child(l, "output")).map_err(ctx)?,
            output_names: l.attribute("output_names").map(str::to_string),
        });
    }
    let mut edges: HashMap<(u32, u32), (u32, u32)> = HashMap::new();
    if let Some(es) = child(net, "edges") {
        for e in es.children().filter(|c| c.has_tag_name("edge")) {
            let num =
                |k: &str| e.attribute(k).and_then(|v| v.parse::<u32>().ok()).ok_or(format!("an edge without {k}"));
            let (fl, fp, tl, tp) = (num("from-layer")?, num("from-port")?, num("to-layer")?, num("to-port")?);
            if edges.insert((tl, tp), (fl, fp)).is_some() {
                return Err(format!("layer {tl} port {tp} has two incoming edges"));
            }
        }
    }
    let mut c = Converter {
        bin,
        layers: HashMap::new(),
        edges,
        names: HashMap::new(),
        used: HashSet::new(),
        consts: HashMap::new(),
        nodes: vec![],
        initializers: vec![],
        inputs: vec![],
        outputs: vec![],
        counter: 0,
    };
    let order = topo_order(&layers, &c.edges)?;
    for l in layers {
        c.layers.insert(l.id, l);
    }
    for id in order {
        let l = &c.layers[&id];
        let (lid, lname, lty) = (l.id, l.name.clone(), l.ty.clone());
        c.layer(id).map_err(|e| format!("layer {lid} `{lname}` ({lty}): {e}"))?;
    }
    Ok(ModelProto {
        ir_version: Some(8),
        producer_name: Some("bident (from OpenVINO IR)".into()),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(OPSET) }],
        graph: Some(GraphProto {
            name: Some(name.to_string()),
            node: c.nodes,
            initializer: c.initializers,
            input: c.inputs,
            output: c.outputs,
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn topo_order(layers: &[Layer], edges: &HashMap<(u32, u32), (u32, u32)>) -> Result<Vec<u32>, String> {
    let mut ids: HashSet<u32> = HashSet::new();
    if let Some(l) = layers.iter().find(|l| !ids.insert(l.id)) {
        return Err(format!("two layers have id {}", l.id));
    }
    let mut indegree: HashMap<u32, usize> = ids.iter().map(|&i| (i, 0)).collect();
    let mut succ: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&(to, _), &(from, _)) in edges {
        if !ids.contains(&to) || !ids.contains(&from) {
            return Err(format!("an edge {from} -> {to} names a layer that does not exist"));
        }
        *indegree.get_mut(&to).expect("checked") += 1;
        succ.entry(from).or_default().push(to);
    }
    let mut ready: Vec<u32> = layers.iter().map(|l| l.id).filter(|i| indegree[i] == 0).collect();
    ready.reverse();
    let mut out = vec![];
    while let Some(i) = ready.pop() {
        out.push(i);
        let mut next: Vec<u32> = vec![];
        for &s in succ.get(&i).map_or(&[][..], Vec::as_slice) {
            let d = indegree.get_mut(&s).expect("checked");
            *d -= 1;
            if *d == 0 {
                next.push(s);
            }
        }
        next.sort_unstable_by(|a, b| b.cmp(a));
        ready.extend(next);
    }
    if out.len() != layers.len() {
        return Err("the layer graph has a cycle".into());
    }
    Ok(out)
}

struct Converter<'b> {
    bin: &'b Bytes,
    layers: HashMap<u32, Layer>,
    edges: HashMap<(u32, u32), (u32, u32)>,
    /// ONNX tensor name of each (layer, output port).
    names: HashMap<(u32, u32), String>,
    used: HashSet<String>,
    /// Constant values by tensor name (Const layers and constants made here).
    consts: HashMap<String, (DType, Vec<u64>, Bytes)>,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    counter: usize,
}

enum A {
    I(i64),
    Is(Vec<i64>),
    F(f32),
    S(&'static str),
}

impl Converter<'_> {
    fn unique(&mut self, want: &str) -> String {
        let mut name = want.to_string();
        while !self.used.insert(name.clone()) {
            self.counter += 1;
            name = format!("{want}_{}", self.counter);
        }
        name
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.counter += 1;
        let n = format!("{hint}/bident_{}", self.counter);
        self.unique(&n)
    }

    fn node(&mut self, op: &str, name: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<(&str, A)>) {
        let attribute = attrs
            .into_iter()
            .map(|(k, v)| {
                let mut a = AttributeProto { name: Some(k.into()), ..Default::default() };
                match v {
                    A::I(i) => (a.i, a.r#type) = (Some(i), Some(AttributeType::Int as i32)),
                    A::Is(is) => (a.ints, a.r#type) = (is, Some(AttributeType::Ints as i32)),
                    A::F(f) => (a.f, a.r#type) = (Some(f), Some(AttributeType::Float as i32)),
                    A::S(s) => (a.s, a.r#type) = (Some(s.as_bytes().to_vec()), Some(AttributeType::String as i32)),
                }
                a
            })
            .collect();
        self.nodes.push(NodeProto {
            name: Some(name.to_string()),
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        });
    }

    /// A one-output node on a fresh tensor.
    fn op(&mut self, op: &str, name: &str, inputs: &[&str], attrs: Vec<(&str, A)>) -> String {
        let out = self.fresh(name);
        self.node(op, name, inputs, &[&out], attrs);
        out
    }

    fn constant(&mut self, hint: &str, dtype: DType, shape: Vec<u64>, data: Bytes) -> String {
        let name = self.fresh(hint);
        self.add_initializer(&name, dtype, shape, data);
        name
    }

    fn add_initializer(&mut self, name: &str, dtype: DType, shape: Vec<u64>, data: Bytes) {
        self.initializers.push(TensorProto {
            name: Some(name.to_string()),
            dims: shape.iter().map(|&d| d as i64).collect(),
            data_type: Some(dtype.onnx_code()),
            raw_data: Some(data.clone()),
            ..Default::default()
        });
        self.consts.insert(name.to_string(), (dtype, shape, data));
    }

    fn const_i64(&mut self, hint: &str, v: &[i64], shape: Vec<u64>) -> String {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(hint, DType::I64, shape, data.into())
    }

    fn scalar(&mut self, hint: &str, dtype: DType, v: f64) -> Result<String, String> {
        let t = bident_tensor::HostTensor::from_f64(hint, dtype, vec![], &[v]).map_err(|e| e.to_string())?;
        Ok(self.constant(hint, dtype, vec![], t.data.into()))
    }

    /// Integer values of a constant tensor (i64 or i32).
    fn ints_of(&self, t: &str) -> Option<Vec<i64>> {
        let (dtype, _, data) = self.consts.get(t)?;
        match dtype {
            DType::I64 => {
                Some(data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
            }
            DType::I32 => {
                Some(data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64).collect())
            }
            _ => None,
        }
    }

    fn const_ints(&self, t: &str, what: &str) -> Result<Vec<i64>, String> {
        self.ints_of(t).ok_or_else(|| format!("{what} must be a constant integer tensor"))
    }

    /// Name the layer's output ports (ONNX names where ovc kept them).
    fn name_outputs(&mut self, l: u32) -> Vec<String> {
        let ports: Vec<(u32, String)> = self.layers[&l]
            .outputs
            .iter()
            .map(|p| (p.id, p.names.first().cloned().unwrap_or_else(|| format!("{}:{}", self.layers[&l].name, p.id))))
            .collect();
        ports
            .into_iter()
            .map(|(port, want)| {
                let n = self.unique(&want);
                self.names.insert((l, port), n.clone());
                n
            })
            .collect()
    }

    fn layer(&mut self, id: u32) -> Result<(), String> {
        let l = self.layers[&id].clone();
        let l = &l;
        let ins: Vec<String> = l
            .inputs
            .iter()
            .map(|p| {
                let src = self.edges.get(&(id, p.id)).ok_or_else(|| format!("input port {} is not connected", p.id))?;
                self.names.get(src).cloned().ok_or_else(|| format!("input port {} reads an unknown port", p.id))
            })
            .collect::<Result<_, String>>()?;
        let (ty, name) = (l.ty.clone(), l.name.clone());
        let in_dims: Vec<Vec<i64>> = l.inputs.iter().map(|p| p.dims.clone()).collect();
        let in_types: Vec<Option<DType>> = l.inputs.iter().map(|p| p.dtype).collect();
        match ty.as_str() {
            "Parameter" => {
                let dtype = match l.attr("element_type") {
                    Some(t) => element_type(t).ok_or_else(|| format!("element type `{t}` is not supported"))?,
                    None => l.outputs.first().and_then(|p| p.dtype).ok_or("unknown element type")?,
                };
                let dims = l.outputs.first().map(|p| p.dims.clone()).unwrap_or_default();
                if let Some(shape) = l.attr("shape") {
                    let declared = parameter_shape(shape)?;
                    let agree = declared.len() == dims.len()
                        && declared.iter().zip(&dims).all(|(&a, &b)| a < 0 || b < 0 || a == b);
                    if !agree {
                        return Err(format!("shape `{shape}` and its output port's dims {dims:?} differ"));
                    }
                }
                let outs = self.name_outputs(id);
                let input = outs.first().ok_or("a Parameter without an output port")?;
                self.inputs.push(typed(input, dtype, &dims));
            }
            "Const" => {
                let dtype = element_type(l.attr("element_type").unwrap_or("")).ok_or_else(|| {
                    format!("element type `{}` is not supported", l.attr("element_type").unwrap_or(""))
                })?;
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
                let end = offset.checked_add(size).filter(|&e| e <= self.bin.len()).ok_or_else(|| {
                    format!("bytes {offset}+{size} lie beyond the .bin file ({} bytes)", self.bin.len())
                })?;
                let data = self.bin.slice(offset..end);
                let outs = self.name_outputs(id);
                let out = outs.first().ok_or("a Const without an output port")?.clone();
                self.add_initializer(&out, dtype, shape, data);
            }
            "Result" => {
                let src = ins.first().ok_or("a Result without an input")?.clone();
                let want = l.output_names.clone().and_then(|n| n.split(',').next().map(|s| s.trim().to_string()));
                let out = match want.filter(|w| *w != src) {
                    Some(w) => {
                        let w = self.unique(&w);
                        self.node("Identity", &name, &[&src], &[&w], vec![]);
                        w
                    }
                    None => src,
                };
                let dtype = in_types.first().copied().flatten().ok_or("unknown element type")?;
                self.outputs.push(typed(&out, dtype, in_dims.first().map_or(&[][..], Vec::as_slice)));
            }
            _ => self.compute(id, &ty, &name, &ins, &in_dims, &in_types)?,
        }
        Ok(())
    }

    fn compute(
        &mut self,
        id: u32,
        ty: &str,
        name: &str,
        ins: &[String],
        in_dims: &[Vec<i64>],
        in_types: &[Option<DType>],
    ) -> Result<(), String> {
        let l = self.layers[&id].clone();
        let l = &l;
        let need = |n: usize| if ins.len() < n { Err(format!("needs {n} inputs, has {}", ins.len())) } else { Ok(()) };
        let outputs = match ty {
            "LSTMSequence" => 3,
            "GRUSequence" | "RNNSequence" => 2,
            _ => 1,
        };
        if l.outputs.len() < outputs {
            return Err(format!("needs {outputs} output ports, has {}", l.outputs.len()));
        }
        let i: Vec<&str> = ins.iter().map(String::as_str).collect();
        let simple = |op: &'static str| -> Option<&'static str> { Some(op) };
        let binary = match ty {
            "Add" => simple("Add"),
            "Subtract" => simple("Sub"),
            "Multiply" => simple("Mul"),
            "Divide" => simple("Div"),
            "Power" => simple("Pow"),
            "Maximum" => simple("Max"),
            "Minimum" => simple("Min"),
            "Equal" => simple("Equal"),
            "Less" => simple("Less"),
            "Greater" => simple("Greater"),
            "LessEqual" => simple("LessOrEqual"),
            "GreaterEqual" => simple("GreaterOrEqual"),
            "LogicalAnd" => simple("And"),
            "LogicalOr" => simple("Or"),
            "LogicalXor" => simple("Xor"),
            "PRelu" => simple("PRelu"),
            _ => None,
        };
        let unary = match ty {
            "ReLU" | "Relu" => simple("Relu"),
            "Sigmoid" => simple("Sigmoid"),
            "Tanh" => simple("Tanh"),
            "Exp" => simple("Exp"),
            "Log" => simple("Log"),
            "Sqrt" => simple("Sqrt"),
            "Abs" => simple("Abs"),
            "Negative" => simple("Neg"),
            "Erf" => simple("Erf"),
            "Floor" => simple("Floor"),
            "Ceiling" => simple("Ceil"),
            "Sin" => simple("Sin"),
            "Cos" => simple("Cos"),
            "Sign" => simple("Sign"),
            "SoftPlus" => simple("Softplus"),
            "HSwish" => simple("HardSwish"),
            "Mish" => simple("Mish"),
            "LogicalNot" => simple("Not"),
            "Identity" => simple("Identity"),
            _ => None,
        };
        // integer Divide rounds down unless `m_pythondiv` is false; ONNX's Div truncates. Exactly:
        // floor(a / b) = (a - a mod b) / b with the mod taking the divisor's sign (ONNX Mod, fmod 0)
        let int_in = in_types.first().copied().flatten().is_some_and(|t| !t.is_float());
        if ty == "Divide" && int_in && l.attr("m_pythondiv") != Some("false") {
            need(2)?;
            let outs = self.name_outputs(id);
            let m = self.op("Mod", name, &i[..2], vec![]);
            let d = self.op("Sub", name, &[i[0], &m], vec![]);
            self.node("Div", name, &[&d, i[1]], &[&outs[0]], vec![]);
            return Ok(());
        }
        if let Some(op) = binary {
            need(2)?;
            if let Some(b) = l.attr("auto_broadcast").filter(|b| !matches!(*b, "numpy" | "none")) {
                return Err(format!("auto_broadcast `{b}` is not supported"));
            }
            let outs = self.name_outputs(id);
            self.node(op, name, &i[..2], &[&outs[0]], vec![]);
            return Ok(());
        }
        if let Some(op) = unary {
            need(1)?;
            let outs = self.name_outputs(id);
            self.node(op, name, &i[..1], &[&outs[0]], vec![]);
            return Ok(());
        }
        let dtype0 = in_types.first().copied().flatten().unwrap_or(DType::F32);
        match ty {
            "NotEqual" | "SquaredDifference" | "FloorMod" | "Mod" => {
                need(2)?;
                let outs = self.name_outputs(id);
                match ty {
                    "NotEqual" => {
                        let e = self.op("Equal", name, &i[..2], vec![]);
                        self.node("Not", name, &[&e], &[&outs[0]], vec![]);
                    }
                    "SquaredDifference" => {
                        let d = self.op("Sub", name, &i[..2], vec![]);
                        self.node("Mul", name, &[&d, &d], &[&outs[0]], vec![]);
                    }
                    _ => {
                        let fmod = i64::from(ty == "Mod" || dtype0.is_float());
                        self.node("Mod", name, &i[..2], &[&outs[0]], vec![("fmod", A::I(fmod))]);
                    }
                }
            }
            "Clamp" => {
                need(1)?;
                let (lo, hi) = (l.float("min")? as f64, l.float("max")? as f64);
                let lo = self.scalar(&format!("{name}/min"), dtype0, lo)?;
                let hi = self.scalar(&format!("{name}/max"), dtype0, hi)?;
                let outs = self.name_outputs(id);
                self.node("Clip", name, &[i[0], &lo, &hi], &[&outs[0]], vec![]);
            }
            "HardSigmoid" => {
                need(3)?;
                let alpha = self.scalar_value(i[1], "alpha")?;
                let beta = self.scalar_value(i[2], "beta")?;
                let outs = self.name_outputs(id);
                self.node(
                    "HardSigmoid",
                    name,
                    &i[..1],
                    &[&outs[0]],
                    vec![("alpha", A::F(alpha)), ("beta", A::F(beta))],
                );
            }
            "Elu" => {
                let alpha = l.float("alpha")?;
                let outs = self.name_outputs(id);
                self.node("Elu", name, &i[..1], &[&outs[0]], vec![("alpha", A::F(alpha))]);
            }
            "Swish" => {
                let s = match i.get(1) {
                    Some(beta) => {
                        let m = self.op("Mul", name, &[i[0], beta], vec![]);
                        self.op("Sigmoid", name, &[&m], vec![])
                    }
                    None => self.op("Sigmoid", name, &i[..1], vec![]),
                };
                let outs = self.name_outputs(id);
                self.node("Mul", name, &[i[0], &s], &[&outs[0]], vec![]);
            }
            "Gelu" => {
                need(1)?;
                let mode = l.attr("approximation_mode").unwrap_or("ERF").to_ascii_uppercase();
                let outs = self.name_outputs(id);
                let half = self.scalar(&format!("{name}/half"), dtype0, 0.5)?;
                let one = self.scalar(&format!("{name}/one"), dtype0, 1.0)?;
                let inner = if mode == "TANH" {
                    // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
                    let c = self.scalar(&format!("{name}/c"), dtype0, 0.044715)?;
                    let k = self.scalar(&format!("{name}/k"), dtype0, (2.0 / std::f64::consts::PI).sqrt())?;
                    let x2 = self.op("Mul", name, &[i[0], i[0]], vec![]);
                    let x3 = self.op("Mul", name, &[&x2, i[0]], vec![]);
                    let cx3 = self.op("Mul", name, &[&x3, &c], vec![]);
                    let s = self.op("Add", name, &[i[0], &cx3], vec![]);
                    let ks = self.op("Mul", name, &[&s, &k], vec![]);
                    self.op("Tanh", name, &[&ks], vec![])
                } else {
                    let sqrt2 = self.scalar(&format!("{name}/sqrt2"), dtype0, std::f64::consts::SQRT_2)?;
                    let d = self.op("Div", name, &[i[0], &sqrt2], vec![]);
                    self.op("Erf", name, &[&d], vec![])
                };
                let e1 = self.op("Add", name, &[&inner, &one], vec![]);
                let m = self.op("Mul", name, &[i[0], &e1], vec![]);
                self.node("Mul", name, &[&m, &half], &[&outs[0]], vec![]);
            }
            "SoftMax" | "Softmax" | "LogSoftmax" => {
                need(1)?;
                let axis = l.ints("axis").ok().and_then(|v| v.first().copied()).unwrap_or(1);
                let op = if ty == "LogSoftmax" { "LogSoftmax" } else { "Softmax" };
                let outs = self.name_outputs(id);
                self.node(op, name, &i[..1], &[&outs[0]], vec![("axis", A::I(axis))]);
            }
            "Convert" | "ConvertLike" => {
                need(1)?;
                let outs = self.name_outputs(id);
                if ty == "ConvertLike" {
                    need(2)?;
                    self.node("CastLike", name, &i[..2], &[&outs[0]], vec![]);
                } else {
                    let to =
                        element_type(l.attr("destination_type").unwrap_or("")).ok_or("unsupported destination_type")?;
                    self.node("Cast", name, &i[..1], &[&outs[0]], vec![("to", A::I(to.onnx_code() as i64))]);
                }
            }
            "Convolution" | "GroupConvolution" | "ConvolutionBackpropData" | "GroupConvolutionBackpropData" => {
                // grouped weights [G, O/G, I/G, k..] (backprop: [G, C_in/G, C_out/G, k..]) merge
                // their first two dims and say `group = G`, as ONNX Conv and ConvTranspose want
                need(2)?;
                let transposed = ty.ends_with("BackpropData");
                if transposed && i.len() > 2 {
                    return Err("an output_shape input is not supported".into());
                }
                let mut attrs = conv_attrs(l)?;
                if let Some(p) = l.ints("output_padding").ok().filter(|p| transposed && !p.is_empty()) {
                    attrs.push(("output_padding", A::Is(p)));
                }
                let w = if ty.starts_with("Group") {
                    let wd = in_dims.get(1).ok_or("no weight dims")?.clone();
                    if wd.len() < 3 || wd.iter().any(|&d| d < 0) {
                        return Err(format!("grouped weights must have static dims, got {wd:?}"));
                    }
                    attrs.push(("group", A::I(wd[0])));
                    let mut flat = vec![wd[0].checked_mul(wd[1]).ok_or("weight dims overflow")?];
                    flat.extend_from_slice(&wd[2..]);
                    self.reshaped(i[1], &flat, name)?
                } else {
                    i[1].to_string()
                };
                let outs = self.name_outputs(id);
                let op = if transposed { "ConvTranspose" } else { "Conv" };
                self.node(op, name, &[i[0], &w], &[&outs[0]], attrs);
            }
            "MatMul" => {
                need(2)?;
                let a = self.transposed_if(l.flag("transpose_a"), i[0], in_dims[0].len(), name)?;
                let b = self.transposed_if(l.flag("transpose_b"), i[1], in_dims[1].len(), name)?;
                let outs = self.name_outputs(id);
                self.node("MatMul", name, &[&a, &b], &[&outs[0]], vec![]);
            }
            "Reshape" => {
                need(2)?;
                let allowzero = i64::from(!l.flag("special_zero"));
                let outs = self.name_outputs(id);
                self.node("Reshape", name, &i[..2], &[&outs[0]], vec![("allowzero", A::I(allowzero))]);
            }
            "Transpose" => {
                need(2)?;
                let order = self.const_ints(i[1], "the order input")?;
                let outs = self.name_outputs(id);
                let attrs = if order.is_empty() { vec![] } else { vec![("perm", A::Is(order))] };
                self.node("Transpose", name, &i[..1], &[&outs[0]], attrs);
            }
            "Squeeze" | "Unsqueeze" => {
                need(1)?;
                let outs = self.name_outputs(id);
                let n = ins.len().min(2);
                self.node(ty, name, &i[..n], &[&outs[0]], vec![]);
            }
            "Concat" => {
                let axis = l.ints("axis")?.first().copied().ok_or("empty axis")?;
                let outs = self.name_outputs(id);
                self.node("Concat", name, &i, &[&outs[0]], vec![("axis", A::I(axis))]);
            }
            "Split" | "VariadicSplit" => {
                need(2)?;
                let axis = self.const_ints(i[1], "the axis input")?.first().copied().ok_or("empty axis")?;
                let outs = self.name_outputs(id);
                let o: Vec<&str> = outs.iter().map(String::as_str).collect();
                if ty == "Split" {
                    let n = l.ints("num_splits")?.first().copied().ok_or("no num_splits")?;
                    self.node("Split", name, &i[..1], &o, vec![("axis", A::I(axis)), ("num_outputs", A::I(n))]);
                } else {
                    need(3)?;
                    let lens = self.const_ints(i[2], "split_lengths")?;
                    if lens.contains(&-1) {
                        return Err("a split length of -1 is not supported".into());
                    }
                    let lens_c = self.const_i64(&format!("{name}/split"), &lens, vec![lens.len() as u64]);
                    self.node("Split", name, &[i[0], &lens_c], &o, vec![("axis", A::I(axis))]);
                }
            }
            "Gather" => {
                need(3)?;
                let axis = self.const_ints(i[2], "the axis input")?.first().copied().ok_or("empty axis")?;
                let batch = l.ints("batch_dims").ok().and_then(|v| v.first().copied()).unwrap_or(0);
                let outs = self.name_outputs(id);
                if batch == 0 {
                    self.node("Gather", name, &i[..2], &[&outs[0]], vec![("axis", A::I(axis))]);
                } else {
                    // gathering along the first non-batch axis is GatherND on single indices
                    let norm = |v: i64, rank: usize| if v < 0 { v + rank as i64 } else { v };
                    let (data_rank, idx_rank) = (in_dims[0].len(), in_dims[1].len());
                    if norm(axis, data_rank) != norm(batch, idx_rank) {
                        return Err(format!(
                            "batch_dims {batch} with axis {axis}: only axis = batch_dims has an ONNX equivalent"
                        ));
                    }
                    let last = self.const_i64(&format!("{name}/last"), &[-1], vec![1]);
                    let idx = self.op("Unsqueeze", name, &[i[1], &last], vec![]);
                    let attrs = vec![("batch_dims", A::I(norm(batch, idx_rank)))];
                    self.node("GatherND", name, &[i[0], &idx], &[&outs[0]], attrs);
                }
            }
            "Slice" => {
                need(4)?;
                let outs = self.name_outputs(id);
                // OpenVINO: data, start, stop, step[, axes]; ONNX: data, starts, ends, axes, steps
                let axes = i.get(4).copied().unwrap_or("");
                self.node("Slice", name, &[i[0], i[1], i[2], axes, i[3]], &[&outs[0]], vec![]);
            }
            "StridedSlice" => self.strided_slice(id, name, &i)?,
            "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2" => {
                need(2)?;
                let keep = i64::from(l.flag("keep_dims"));
                let outs = self.name_outputs(id);
                if self.ints_of(i[1]).is_some_and(|a| a.is_empty()) {
                    // an empty axes list reduces nothing in OpenVINO
                    self.node("Identity", name, &i[..1], &[&outs[0]], vec![]);
                } else {
                    self.node(ty, name, &i[..2], &[&outs[0]], vec![("keepdims", A::I(keep))]);
                }
            }
            "MVN" => {
                need(1)?;
                self.mvn(id, name, &i, &in_dims[0], dtype0)?
            }
            "ShapeOf" => {
                need(1)?;
                let outs = self.name_outputs(id);
                if l.attr("output_type").is_some_and(|t| t == "i32") {
                    let s = self.op("Shape", name, &i[..1], vec![]);
                    self.node("Cast", name, &[&s], &[&outs[0]], vec![("to", A::I(DType::I32.onnx_code() as i64))]);
                } else {
                    self.node("Shape", name, &i[..1], &[&outs[0]], vec![]);
                }
            }
            "Range" => {
                need(3)?;
                let to = l.attr("output_type").and_then(element_type).unwrap_or(dtype0);
                let mut cast = vec![];
                for (k, t) in i[..3].iter().enumerate() {
                    cast.push(if in_types.get(k).copied().flatten() == Some(to) {
                        t.to_string()
                    } else {
                        self.op("Cast", name, &[t], vec![("to", A::I(to.onnx_code() as i64))])
                    });
                }
                let outs = self.name_outputs(id);
                self.node("Range", name, &[&cast[0], &cast[1], &cast[2]], &[&outs[0]], vec![]);
            }
            "Broadcast" => {
                need(2)?;
                let data = if l.attr("mode").is_some_and(|m| m == "explicit") {
                    // data dim k goes to output axis axes_mapping[k]; the others are new 1s
                    let mapping =
                        self.const_ints(i.get(2).ok_or("explicit mode needs axes_mapping")?, "axes_mapping")?;
                    let rank = l.outputs[0].dims.len() as i64;
                    let data_rank = in_dims.first().ok_or("no data dims")?.len();
                    let fits = mapping.len() == data_rank
                        && mapping.windows(2).all(|w| w[0] < w[1])
                        && mapping.iter().all(|a| (0..rank).contains(a));
                    if !fits {
                        return Err(format!(
                            "axes_mapping {mapping:?} does not place rank {data_rank} into rank {rank}"
                        ));
                    }
                    let new: Vec<i64> = (0..rank).filter(|a| !mapping.contains(a)).collect();
                    if new.is_empty() {
                        i[0].to_string()
                    } else {
                        let axes = self.const_i64(&format!("{name}/new_axes"), &new, vec![new.len() as u64]);
                        self.op("Unsqueeze", name, &[i[0], &axes], vec![])
                    }
                } else {
                    i[0].to_string()
                };
                let outs = self.name_outputs(id);
                self.node("Expand", name, &[&data, i[1]], &[&outs[0]], vec![]);
            }
            "Tile" => {
                need(2)?;
                let outs = self.name_outputs(id);
                self.node("Tile", name, &i[..2], &[&outs[0]], vec![]);
            }
            "Select" => {
                need(3)?;
                let outs = self.name_outputs(id);
                self.node("Where", name, &i[..3], &[&outs[0]], vec![]);
            }
            "Pad" => {
                need(3)?;
                let mode = match l.attr("pad_mode").unwrap_or("constant") {
                    "constant" => "constant",
                    "edge" => "edge",
                    "reflect" => "reflect",
                    m => return Err(format!("pad_mode `{m}` has no ONNX equivalent")),
                };
                let pads = self.op("Concat", name, &[i[1], i[2]], vec![("axis", A::I(0))]);
                let mut inputs = vec![i[0], pads.as_str()];
                if let Some(v) = i.get(3) {
                    inputs.push(v);
                }
                let outs = self.name_outputs(id);
                self.node("Pad", name, &inputs, &[&outs[0]], vec![("mode", A::S(mode))]);
            }
            "MaxPool" | "AvgPool" => {
                need(1)?;
                let mut attrs =
                    vec![("kernel_shape", A::Is(l.ints("kernel")?)), ("strides", A::Is(l.ints("strides")?))];
                attrs.extend(pad_attrs(l)?);
                attrs.push(("ceil_mode", A::I(i64::from(l.attr("rounding_type") == Some("ceil")))));
                let outs = self.name_outputs(id);
                if ty == "MaxPool" {
                    if let Ok(d) = l.ints("dilations") {
                        attrs.push(("dilations", A::Is(d)));
                    }
                    // the indices output, when anything reads it (OpenVINO flattens them like ONNX
                    // does with storage_order 0)
                    let read = |port: u32| self.edges.values().any(|&(fl, fp)| fl == id && fp == port);
                    let idx_port = self.layers[&id].outputs.get(1).map(|p| p.id);
                    let o: Vec<&str> = match idx_port {
                        Some(p) if read(p) => vec![&outs[0], &outs[1]],
                        _ => vec![&outs[0]],
                    };
                    self.node("MaxPool", name, &i[..1], &o, attrs);
                } else {
                    attrs.push(("count_include_pad", A::I(i64::from(!l.flag("exclude-pad")))));
                    self.node("AveragePool", name, &i[..1], &[&outs[0]], attrs);
                }
            }
            "ScaledDotProductAttention" => self.sdpa(id, name, &i, in_dims, dtype0)?,
            "FakeQuantize" => self.fake_quantize(id, name, &i, in_dims, dtype0)?,
            "Interpolate" => self.interpolate(id, name, &i)?,
            "LSTMSequence" | "GRUSequence" | "RNNSequence" => self.rnn_sequence(id, name, &i)?,
            other => return Err(format!("no conversion for OpenVINO op `{other}`")),
        }
        Ok(())
    }

    fn scalar_value(&self, t: &str, what: &str) -> Result<f32, String> {
        let (dtype, _, data) = self.consts.get(t).ok_or_else(|| format!("{what} must be a constant"))?;
        let v = bident_tensor::HostTensor {
            dtype: *dtype,
            shape: vec![],
            data: data[..dtype.size().min(data.len())].to_vec(),
        };
        if v.data.len() != dtype.size() {
            return Err(format!("{what} is empty"));
        }
        Ok(v.get_f64(0) as f32)
    }

    /// Interpolate-4 (data, sizes, scales[, axes]) and -11 (data, scales or sizes[, axes]) as
    /// ONNX Resize (its sizes or scales for the given axes). Modes without an ONNX equivalent
    /// (the Pillow filters, `simple` or `tf_half_pixel_for_nn` rounding, padding) are errors.
    fn interpolate(&mut self, id: u32, name: &str, i: &[&str]) -> Result<(), String> {
        let l = self.layers[&id].clone();
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
        if let Some(a) = axes {
            attrs.push(("axes", A::Is(self.const_ints(a, "axes")?)));
        }
        let target = if by_sizes {
            // sizes: int64 in ONNX (OpenVINO allows i32)
            let v = self.const_ints(target, "sizes")?;
            self.const_i64(&format!("{name}/sizes"), &v, vec![v.len() as u64])
        } else {
            target.to_string()
        };
        let ins: Vec<&str> = if by_sizes { vec![i[0], "", "", &target] } else { vec![i[0], "", &target] };
        let outs = self.name_outputs(id);
        self.node("Resize", name, &ins, &[&outs[0]], attrs);
        Ok(())
    }

    /// Values and dims of a constant float tensor.
    fn floats_of(&self, t: &str) -> Option<(Vec<f64>, Vec<u64>)> {
        let (dtype, shape, data) = self.consts.get(t)?;
        let v = bident_tensor::HostTensor::new(t, *dtype, shape.clone(), data.to_vec()).ok()?;
        dtype.is_float().then(|| ((0..v.numel()).map(|k| v.get_f64(k)).collect(), shape.clone()))
    }

    /// FakeQuantize: x clamped to [input_low, input_high], rounded onto `levels` steps and mapped
    /// onto [output_low, output_high]. A 256-level grid whose input and output ranges agree and
    /// hold an integer zero point (what NNCF and ovc's reading of ONNX Q/DQ pairs give), per
    /// tensor or along one axis, is exactly QuantizeLinear + DequantizeLinear (uint8); any other
    /// is written out as the formula.
    fn fake_quantize(
        &mut self,
        id: u32,
        name: &str,
        i: &[&str],
        dims: &[Vec<i64>],
        dtype: DType,
    ) -> Result<(), String> {
        if i.len() < 5 {
            return Err("needs the data and four range inputs".into());
        }
        let levels = self.layers[&id].ints("levels")?.first().copied().ok_or("missing attribute `levels`")?;
        if levels < 2 {
            return Err(format!("levels = {levels}"));
        }
        if let Some((scale, zero, axis)) = self.uniform_grid(i, dims, levels, dtype) {
            let shape = if axis.is_some() { vec![scale.len() as u64] } else { vec![] };
            let s = bident_tensor::HostTensor::from_f64("scale", DType::F32, shape.clone(), &scale)
                .map_err(|e| e.to_string())?;
            let s = self.constant(&format!("{name}/scale"), DType::F32, shape.clone(), s.data.into());
            let z = self.constant(&format!("{name}/zero_point"), DType::U8, shape, zero.into());
            let attrs = || axis.map(|a| vec![("axis", A::I(a))]).unwrap_or_default();
            let q = self.op("QuantizeLinear", name, &[i[0], &s, &z], attrs());
            let outs = self.name_outputs(id);
            self.node("DequantizeLinear", name, &[&q, &s, &z], &[&outs[0]], attrs());
            return Ok(());
        }
        let (x, il, ih, ol, oh) = (i[0], i[1], i[2], i[3], i[4]);
        let steps = self.scalar(&format!("{name}/steps"), dtype, (levels - 1) as f64)?;
        let lo = self.op("Min", name, &[il, ih], vec![]);
        let hi = self.op("Max", name, &[il, ih], vec![]);
        let t = self.op("Sub", name, &[x, il], vec![]);
        let range = self.op("Sub", name, &[ih, il], vec![]);
        let t = self.op("Div", name, &[&t, &range], vec![]);
        let t = self.op("Mul", name, &[&t, &steps], vec![]);
        let t = self.op("Round", name, &[&t], vec![]);
        let t = self.op("Div", name, &[&t, &steps], vec![]);
        let out_range = self.op("Sub", name, &[oh, ol], vec![]);
        let t = self.op("Mul", name, &[&t, &out_range], vec![]);
        let mid = self.op("Add", name, &[&t, ol], vec![]);
        let above = self.op("Greater", name, &[x, &hi], vec![]);
        let upper = self.op("Where", name, &[&above, oh, &mid], vec![]);
        let below = self.op("LessOrEqual", name, &[x, &lo], vec![]);
        let outs = self.name_outputs(id);
        self.node("Where", name, &[&below, ol, &upper], &[&outs[0]], vec![]);
        Ok(())
    }

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

    /// StridedSlice: each entry of begin/end/strides slices one input dim, unless its
    /// `new_axis_mask` bit inserts a dim of 1, its `shrink_axis_mask` bit takes the single index
    /// `begin` and drops the dim, or its `ellipsis_mask` bit stands for every dim the other
    /// entries leave over. As ONNX: Slice on the dims sliced, Squeeze of the shrunk ones,
    /// Unsqueeze of the new ones.
    fn strided_slice(&mut self, id: u32, name: &str, i: &[&str]) -> Result<(), String> {
        if i.len() < 3 {
            return Err("needs begin and end".into());
        }
        let l = self.layers[&id].clone();
        let rank = l.inputs.first().map_or(0, |p| p.dims.len());
        let bit = |k: &str, e: usize| l.ints(k).unwrap_or_default().get(e).is_some_and(|&m| m != 0);
        let begin = self.const_ints(i[1], "begin")?;
        let end = self.const_ints(i[2], "end")?;
        let strides = match i.get(3) {
            Some(s) => self.const_ints(s, "strides")?,
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
        let outs = self.name_outputs(id);
        let ints =
            |c: &mut Self, what: &str, v: &[i64]| c.const_i64(&format!("{name}/{what}"), v, vec![v.len() as u64]);
        let mut t = i[0].to_string();
        let sliced = !axes.is_empty();
        if sliced {
            let (sc, ec) = (ints(self, "starts", &starts), ints(self, "ends", &ends));
            let (ac, stc) = (ints(self, "axes", &axes), ints(self, "steps", &steps));
            let inputs = [i[0], &sc, &ec, &ac, &stc];
            if shrunk.is_empty() && added.is_empty() {
                self.node("Slice", name, &inputs, &[&outs[0]], vec![]);
            } else {
                t = self.op("Slice", name, &inputs, vec![]);
            }
        }
        if !shrunk.is_empty() {
            let ax = ints(self, "shrink_axes", &shrunk);
            if added.is_empty() {
                self.node("Squeeze", name, &[&t, &ax], &[&outs[0]], vec![]);
            } else {
                t = self.op("Squeeze", name, &[&t, &ax], vec![]);
            }
        }
        if !added.is_empty() {
            let ax = ints(self, "new_axes", &added);
            self.node("Unsqueeze", name, &[&t, &ax], &[&outs[0]], vec![]);
        } else if !sliced && shrunk.is_empty() {
            self.node("Identity", name, &[&t], &[&outs[0]], vec![]);
        }
        Ok(())
    }

    /// MVN over the trailing axes with the variance inside the root is LayerNormalization
    /// (unit scale, zero bias); any other MVN is written out as its formula.
    fn mvn(&mut self, id: u32, name: &str, i: &[&str], dims: &[i64], dtype: DType) -> Result<(), String> {
        let l = self.layers[&id].clone();
        let eps = l.float("eps")?;
        let inside = l.attr("eps_mode").is_none_or(|m| m.eq_ignore_ascii_case("inside_sqrt"));
        let variance = l.flag("normalize_variance");
        let rank = dims.len() as i64;
        let axes: Vec<i64> = match i.get(1) {
            Some(a) => self.const_ints(a, "the axes input")?,
            None => return Err("MVN-1 (axes as an attribute) is not supported".into()),
        };
        let mut norm: Vec<i64> = axes.iter().map(|&a| if a < 0 { a + rank } else { a }).collect();
        norm.sort_unstable();
        let trailing =
            !norm.is_empty() && norm.iter().enumerate().all(|(k, &a)| a == rank - norm.len() as i64 + k as i64);
        let outs = self.name_outputs(id);
        let normalized: Vec<i64> = dims[(rank as usize).saturating_sub(norm.len())..].to_vec();
        if variance && inside && trailing && normalized.iter().all(|&d| d > 0) && dtype.is_float() {
            let count = normalized.iter().product::<i64>() as usize;
            let shape: Vec<u64> = normalized.iter().map(|&d| d as u64).collect();
            let one = bident_tensor::HostTensor::from_f64("one", dtype, shape.clone(), &vec![1.0; count])
                .map_err(|e| e.to_string())?;
            let scale = self.constant(&format!("{name}/scale"), dtype, shape.clone(), one.data.into());
            let zero = bident_tensor::HostTensor::zeros(dtype, shape.clone());
            let bias = self.constant(&format!("{name}/bias"), dtype, shape, zero.data.into());
            let attrs = vec![("axis", A::I(norm[0])), ("epsilon", A::F(eps))];
            self.node("LayerNormalization", name, &[i[0], &scale, &bias], &[&outs[0]], attrs);
            return Ok(());
        }
        let ax = self.const_i64(&format!("{name}/axes"), &norm, vec![norm.len() as u64]);
        let mean = self.op("ReduceMean", name, &[i[0], &ax], vec![("keepdims", A::I(1))]);
        if !variance {
            self.node("Sub", name, &[i[0], &mean], &[&outs[0]], vec![]);
            return Ok(());
        }
        let d = self.op("Sub", name, &[i[0], &mean], vec![]);
        let sq = self.op("Mul", name, &[&d, &d], vec![]);
        let var = self.op("ReduceMean", name, &[&sq, &ax], vec![("keepdims", A::I(1))]);
        let e = self.scalar(&format!("{name}/eps"), dtype, eps as f64)?;
        let den = if inside {
            let v = self.op("Add", name, &[&var, &e], vec![]);
            self.op("Sqrt", name, &[&v], vec![])
        } else {
            let s = self.op("Sqrt", name, &[&var], vec![]);
            self.op("Add", name, &[&s, &e], vec![])
        };
        self.node("Div", name, &[&d, &den], &[&outs[0]], vec![]);
        Ok(())
    }

    /// softmax(Q·Kᵀ·scale + mask)·V; a boolean mask keeps where true.
    fn sdpa(&mut self, id: u32, name: &str, i: &[&str], dims: &[Vec<i64>], dtype: DType) -> Result<(), String> {
        if i.len() < 3 {
            return Err("needs Q, K and V".into());
        }
        let rank = dims[1].len();
        if rank < 2 || dims[0].len() < 2 {
            return Err("Q and K must have rank 2 or more".into());
        }
        let kt = self.transposed_if(true, i[1], rank, name)?;
        let mut s = self.op("MatMul", name, &[i[0], &kt], vec![]);
        let scale = match i.get(4) {
            Some(sc) => sc.to_string(),
            None => {
                let e = *dims[0].last().ok_or("Q has no dims")?;
                if e <= 0 {
                    return Err("without a scale input Q's last dim must be static".into());
                }
                self.scalar(&format!("{name}/scale"), dtype, 1.0 / (e as f64).sqrt())?
            }
        };
        s = self.op("Mul", name, &[&s, &scale], vec![]);
        if self.layers[&id].flag("causal") {
            // query i sees keys 0..=i (OpenVINO: ones(L, S).tril(0)); the mask input is ignored
            let (l, k) = (dims[0][dims[0].len() - 2], dims[1][rank - 2]);
            if l <= 0 || k <= 0 {
                return Err("causal attention needs static query and key lengths".into());
            }
            let (l, k) = (l as u64, k as u64);
            let bias: Vec<f64> = (0..l * k).map(|e| if e % k <= e / k { 0.0 } else { f64::NEG_INFINITY }).collect();
            let t =
                bident_tensor::HostTensor::from_f64("causal", dtype, vec![l, k], &bias).map_err(|e| e.to_string())?;
            let bias = self.constant(&format!("{name}/causal"), dtype, vec![l, k], t.data.into());
            s = self.op("Add", name, &[&s, &bias], vec![]);
        } else if let Some(mask) = i.get(3).filter(|m| !m.is_empty()) {
            let boolean = self.layers[&id].inputs.get(3).and_then(|p| p.dtype) == Some(DType::Bool);
            let add = if boolean {
                let zero = self.scalar(&format!("{name}/zero"), dtype, 0.0)?;
                let ninf = self.scalar(&format!("{name}/ninf"), dtype, f64::NEG_INFINITY)?;
                self.op("Where", name, &[mask, &zero, &ninf], vec![])
            } else {
                mask.to_string()
            };
            s = self.op("Add", name, &[&s, &add], vec![]);
        }
        let p = self.op("Softmax", name, &[&s], vec![("axis", A::I(-1))]);
        let outs = self.name_outputs(id);
        self.node("MatMul", name, &[&p, i[2]], &[&outs[0]], vec![]);
        Ok(())
    }

    /// LSTMSequence-5, GRUSequence-5 and RNNSequence-5 (X [B,T,I], initial states [B,D,H],
    /// lengths [B], W [D,G*H,I], R [D,G*H,H], B [D,G*H]) as ONNX LSTM, GRU and RNN (sequence
    /// first, between Transposes). LSTM gates go from f,i,c,o to i,o,f,c; GRU's z,r,h and the
    /// RNN's single gate keep their order. OpenVINO's bias is the sum of ONNX's Wb and Rb, so Rb
    /// is zero, except for a GRU with `linear_before_reset`, whose bias [D,4H] carries the
    /// hidden gate's Rb last.
    fn rnn_sequence(&mut self, id: u32, name: &str, i: &[&str]) -> Result<(), String> {
        let l = self.layers[&id].clone();
        let (op, gates, default_acts, states) = match l.ty.as_str() {
            "LSTMSequence" => ("LSTM", 4u64, "sigmoid, tanh, tanh", 2),
            "GRUSequence" => ("GRU", 3, "sigmoid, tanh", 1),
            _ => ("RNN", 1, "tanh", 1),
        };
        // inputs: X, initial states, lengths, W, R, B
        let [x, lens, w, r, b] = [0, 1 + states, 2 + states, 3 + states, 4 + states].map(|k| i.get(k).copied());
        let (Some(x), Some(lens), Some(w), Some(r), Some(b)) = (x, lens, w, r, b) else {
            return Err(format!("needs {} inputs", 5 + states));
        };
        let hidden = l.ints("hidden_size")?.first().copied().ok_or("no hidden_size")?;
        let acts: Vec<String> =
            l.attr("activations").unwrap_or(default_acts).split(',').map(|s| s.trim().to_string()).collect();
        if acts.join(", ") != default_acts {
            return Err(format!("activations {acts:?} are not supported"));
        }
        if l.float("clip").unwrap_or(0.0) != 0.0 {
            return Err("clip is not supported".into());
        }
        let before_reset = op == "GRU" && l.flag("linear_before_reset");
        let weight = |c: &Converter, t: &str, what: &str, blocks: u64| -> Result<(DType, Vec<u64>, Vec<u8>), String> {
            let (dtype, shape, data) = c.consts.get(t).cloned().ok_or_else(|| format!("{what} must be a constant"))?;
            if shape.len() < 2 || shape[0] == 0 || shape[1] != blocks * hidden as u64 {
                return Err(format!("{what} has shape {shape:?}, not [directions, {blocks} x {hidden}, ..]"));
            }
            // LSTM: blocks along axis 1 from f,i,c,o to i,o,f,c
            let order: &[usize] = if op == "LSTM" && blocks == 4 { &[1, 3, 0, 2] } else { &[] };
            if order.is_empty() {
                return Ok((dtype, shape, data.to_vec()));
            }
            let d = shape[0] as usize;
            let per_dir = data.len() / d;
            let block = per_dir / 4;
            let mut out = Vec::with_capacity(data.len());
            for k in 0..d {
                let dir = &data[k * per_dir..(k + 1) * per_dir];
                for &g in order {
                    out.extend_from_slice(&dir[g * block..(g + 1) * block]);
                }
            }
            Ok((dtype, shape, out))
        };
        let (wt, ws, wd) = weight(self, w, "W", gates)?;
        let (rt, rs, rd) = weight(self, r, "R", gates)?;
        let (bt, bs, bd) = weight(self, b, "B", gates + u64::from(before_reset))?;
        let w = self.constant(&format!("{name}/W"), wt, ws, wd.into());
        let r = self.constant(&format!("{name}/R"), rt, rs, rd.into());
        // ONNX bias per direction: Wb (G*H) then Rb (G*H)
        let (d, size) = (bs[0] as usize, bt.size());
        let (gh, per) = (gates as usize * hidden as usize * size, bd.len() / d);
        let mut b2 = Vec::with_capacity(2 * gh * d);
        for k in 0..d {
            let dir = &bd[k * per..(k + 1) * per];
            b2.extend_from_slice(&dir[..gh]);
            b2.extend(std::iter::repeat_n(0u8, gh));
            if before_reset {
                // the hidden gate's Rb is the fourth block; it goes last in Rb
                let rb_h = &dir[gh..];
                let at = b2.len() - rb_h.len();
                b2[at..].copy_from_slice(rb_h);
            }
        }
        let b = self.constant(&format!("{name}/B"), bt, vec![bs[0], 2 * gates * hidden as u64], b2.into());
        let lens = self.op("Cast", name, &[lens], vec![("to", A::I(DType::I32.onnx_code() as i64))]);
        // ONNX's default layout is sequence first (X [T,B,I], states [D,B,H], Y [T,D,B,H]);
        // OpenVINO's CPU plugin mis-reads `layout = 1`, so transpose around the op instead
        let swap01 = || vec![("perm", A::Is(vec![1, 0, 2]))];
        let x = self.op("Transpose", name, &[x], swap01());
        let init: Vec<String> = (0..states).map(|k| self.op("Transpose", name, &[i[1 + k]], swap01())).collect();
        let outs = self.name_outputs(id);
        let y = self.fresh(name);
        let finals: Vec<String> = (0..states).map(|_| self.fresh(name)).collect();
        let mut attrs = vec![
            ("hidden_size", A::I(hidden)),
            (
                "direction",
                A::S(match l.attr("direction").unwrap_or("forward") {
                    "reverse" => "reverse",
                    "bidirectional" => "bidirectional",
                    _ => "forward",
                }),
            ),
        ];
        if before_reset {
            attrs.push(("linear_before_reset", A::I(1)));
        }
        let mut inputs: Vec<&str> = vec![&x, &w, &r, &b, &lens];
        inputs.extend(init.iter().map(String::as_str));
        let mut outputs: Vec<&str> = vec![&y];
        outputs.extend(finals.iter().map(String::as_str));
        self.node(op, name, &inputs, &outputs, attrs);
        // Y [T,D,B,H] -> [B,D,T,H]; states [D,B,H] -> [B,D,H]
        self.node("Transpose", name, &[&y], &[&outs[0]], vec![("perm", A::Is(vec![2, 1, 0, 3]))]);
        for (k, f) in finals.iter().enumerate() {
            self.node("Transpose", name, &[f], &[&outs[1 + k]], swap01());
        }
        Ok(())
    }
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
