//! OpenVINO IR (`.xml` + `.bin`, IR v10/v11 as `ovc` writes it) into an ONNX model, which then
//! goes through the same lowering as any ONNX file: one op knowledge, one fused graph.
//!
//! `xml` reads the layers and edges; each layer, in topological order, becomes the ONNX op(s)
//! that compute the same thing, by the rule the [`registry`] holds for its type. One file per op
//! family, each registering its types: a plain renaming (`Subtract` is `Sub`) is a data row, an
//! op that needs more is a named function whose doc says where OpenVINO's op differs from ONNX's
//! and how the conversion bridges it (GroupConvolution's weight layout, MatMul's transpose flags,
//! StridedSlice's masks, LSTMSequence's gate order, FakeQuantize, ...). A layer type without a
//! rule is an error naming the layer.
//!
//! Tensor names: an output port's `names` (the ONNX tensor names ovc kept) when present, else
//! `<layer name>:<port>`.

mod elementwise;
mod io;
mod nn;
mod quantize;
mod recurrent;
mod reduce;
mod shape;
mod xml;

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use bident_tensor::DType;
use bytes::Bytes;

use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
    attribute_proto::AttributeType,
};
use xml::{Edges, Layer};

/// The ONNX opset the converted model uses (Reduce* and Split take their axes as inputs).
const OPSET: i64 = 18;

/// Convert an IR's XML text and its weights file into an ONNX model. Weights stay slices of
/// `bin` until the model is encoded.
pub(crate) fn to_onnx(xml: &str, bin: &Bytes, name: &str) -> Result<ModelProto, String> {
    let (layers, edges) = xml::parse(xml)?;
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

fn topo_order(layers: &[Layer], edges: &Edges) -> Result<Vec<u32>, String> {
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

// ---- the registry ----

/// A conversion with logic of its own: emits the ONNX nodes that compute one layer.
type Convert = fn(&mut Converter, &Args) -> Result<(), String>;

#[derive(Clone, Copy)]
enum Rule {
    /// The same elementwise op on two inputs under its ONNX name (numpy broadcasting only).
    Binary(&'static str),
    /// The same op on its first `n` inputs under its ONNX name.
    Rename(&'static str, usize),
    Convert(Convert),
}

struct Def {
    rule: Rule,
    /// Output ports a layer of this type must have.
    outputs: usize,
}

struct Registry(HashMap<&'static str, Def>);

impl Registry {
    /// Plain renamings, `(OpenVINO type, ONNX op)` rows: the same op on the first `n` inputs.
    fn renames(&mut self, rows: &[(&'static str, &'static str)], n: usize) {
        for &(ty, onnx) in rows {
            self.insert(ty, Rule::Rename(onnx, n), 1);
        }
    }

    /// Elementwise ops on two inputs, `(OpenVINO type, ONNX op)` rows.
    fn binaries(&mut self, rows: &[(&'static str, &'static str)]) {
        for &(ty, onnx) in rows {
            self.insert(ty, Rule::Binary(onnx), 1);
        }
    }

    /// Types converted by `f`, with one output port at least.
    fn add(&mut self, types: &[&'static str], f: Convert) {
        self.add_outputs(types, 1, f);
    }

    /// Types converted by `f`, with `outputs` output ports at least.
    fn add_outputs(&mut self, types: &[&'static str], outputs: usize, f: Convert) {
        for ty in types {
            self.insert(ty, Rule::Convert(f), outputs);
        }
    }

    fn insert(&mut self, ty: &'static str, rule: Rule, outputs: usize) {
        let before = self.0.insert(ty, Def { rule, outputs });
        debug_assert!(before.is_none(), "OpenVINO op `{ty}` has two rules");
    }
}

/// The converter rules by OpenVINO layer type.
fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = Registry(HashMap::new());
        elementwise::register(&mut r);
        io::register(&mut r);
        nn::register(&mut r);
        quantize::register(&mut r);
        recurrent::register(&mut r);
        reduce::register(&mut r);
        shape::register(&mut r);
        r
    })
}

/// What a rule sees of one layer.
struct Args<'a> {
    id: u32,
    l: &'a Layer,
    name: &'a str,
    /// The ONNX tensor each input port reads, in port order.
    i: Vec<&'a str>,
    /// The dims and element type the IR gives each input port.
    dims: &'a [Vec<i64>],
    types: &'a [Option<DType>],
}

impl Args<'_> {
    fn need(&self, n: usize) -> Result<(), String> {
        if self.i.len() < n { Err(format!("needs {n} inputs, has {}", self.i.len())) } else { Ok(()) }
    }

    /// Input 0's element type (f32 where the IR does not say).
    fn dtype0(&self) -> DType {
        self.types.first().copied().flatten().unwrap_or(DType::F32)
    }
}

/// A [`Rule::Rename`].
fn rename(c: &mut Converter, a: &Args, op: &str, n: usize) -> Result<(), String> {
    a.need(n)?;
    let outs = c.name_outputs(a.id);
    c.node(op, a.name, &a.i[..n], &[&outs[0]], vec![]);
    Ok(())
}

// ---- the converter and the helpers shared by the rule files ----

struct Converter<'b> {
    bin: &'b Bytes,
    layers: HashMap<u32, Layer>,
    edges: Edges,
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

/// An ONNX attribute value.
enum A {
    I(i64),
    Is(Vec<i64>),
    F(f32),
    S(&'static str),
}

impl Converter<'_> {
    /// Convert one layer by its type's rule.
    fn layer(&mut self, id: u32) -> Result<(), String> {
        let l = self.layers[&id].clone();
        let ins: Vec<String> = l
            .inputs
            .iter()
            .map(|p| {
                let src = self.edges.get(&(id, p.id)).ok_or_else(|| format!("input port {} is not connected", p.id))?;
                self.names.get(src).cloned().ok_or_else(|| format!("input port {} reads an unknown port", p.id))
            })
            .collect::<Result<_, String>>()?;
        let def = registry().0.get(l.ty.as_str());
        let outputs = def.map_or(1, |d| d.outputs);
        if l.outputs.len() < outputs {
            return Err(format!("needs {outputs} output ports, has {}", l.outputs.len()));
        }
        let Some(def) = def else { return Err(format!("no conversion for OpenVINO op `{}`", l.ty)) };
        let dims: Vec<Vec<i64>> = l.inputs.iter().map(|p| p.dims.clone()).collect();
        let types: Vec<Option<DType>> = l.inputs.iter().map(|p| p.dtype).collect();
        let a =
            Args { id, l: &l, name: &l.name, i: ins.iter().map(String::as_str).collect(), dims: &dims, types: &types };
        match def.rule {
            Rule::Binary(op) => elementwise::binary(self, &a, op),
            Rule::Rename(op, n) => rename(self, &a, op, n),
            Rule::Convert(f) => f(self, &a),
        }
    }

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
}

#[cfg(test)]
mod tests {
    /// Every layer type the conversion knows, each with one rule (a type dropped or added
    /// shows here).
    #[test]
    fn registry_knows_each_type_once() {
        let mut types: Vec<&str> = super::registry().0.keys().copied().collect();
        types.sort_unstable();
        let mut expected: Vec<&str> = "Abs Add AvgPool Broadcast Ceiling Clamp Concat Const Convert ConvertLike
            Convolution ConvolutionBackpropData Cos Divide Elu Equal Erf Exp FakeQuantize Floor FloorMod GRUSequence
            Gather Gelu Greater GreaterEqual GroupConvolution GroupConvolutionBackpropData HSwish HardSigmoid
            Identity Interpolate LSTMSequence Less LessEqual Log LogSoftmax LogicalAnd LogicalNot LogicalOr
            LogicalXor MVN MatMul MaxPool Maximum Minimum Mish Mod Multiply Negative NotEqual PRelu Pad Parameter
            Power RNNSequence Range ReLU ReduceL2 ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape
            Result ScaledDotProductAttention Select ShapeOf Sigmoid Sign Sin Slice SoftMax SoftPlus Softmax Split
            Sqrt SquaredDifference Squeeze StridedSlice Subtract Swish Tanh Tile Transpose Unsqueeze VariadicSplit"
            .split_whitespace()
            .collect();
        expected.sort_unstable();
        assert_eq!(types, expected);
    }
}
