//! Import: ONNX bytes -> typed, constant-folded node list -> fused groups -> [`FusedGraph`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use bident_artifact::{Blob, ContentHash};
use bident_tensor::{DType, HostTensor};
use bytes::Bytes;
use prost::Message;

use crate::fusion::{self, Fusion, FusionInfo, NodeView};
use crate::ops::{self, Ctx, Fact, Role};
use crate::proto::{
    GraphProto, ModelProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto,
    type_proto,
};
use crate::{FusedGraph, FusedOp, IrError, Source, TensorId, TensorInfo};
use crate::{consts, files, weights};

/// Options of [`import`].
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Static shapes for graph inputs (`--input-shape NAME=D,D,...`); required for every input
    /// that has a dynamic dim.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Fixed values for graph inputs (their shape pinned too). Such an input is still fed at
    /// run time, but bident treats it as the constant it will always be: shape parameters given
    /// as inputs (Reshape's shape, Resize's scales, TopK's k) become known.
    pub input_values: BTreeMap<String, HostTensor>,
    /// Fixed values given as plain numbers (`--input-value NAME=V,V,...`): converted to the
    /// input's element type; the shape is the pinned one, else the declared one, else a scalar
    /// (one value, rank 0) or a vector.
    pub input_literals: BTreeMap<String, Vec<f64>>,
    /// Constant subgraphs are evaluated at import when their result has at most this many
    /// elements; larger ones stay in the graph, attached to their consumer.
    pub fold_limit: usize,
    /// How compute nodes are grouped into fused operators.
    pub fusion: Fusion,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            input_shapes: BTreeMap::new(),
            input_values: BTreeMap::new(),
            input_literals: BTreeMap::new(),
            fold_limit: 1 << 16,
            fusion: Fusion::Rules,
        }
    }
}

impl ImportOptions {
    /// The fused graph's input hash: the source model's hash and these options, in their
    /// canonical bytes.
    pub fn input_hash(
        &self,
        source: bident_artifact::ContentHash,
    ) -> Result<bident_artifact::ContentHash, bident_artifact::ArtifactError> {
        let values: Vec<(&String, String, &Vec<u64>, &Vec<u8>)> =
            self.input_values.iter().map(|(name, v)| (name, v.dtype.to_string(), &v.shape, &v.data)).collect();
        bident_artifact::ContentHash::of_value(&(
            source,
            &self.input_shapes,
            &self.input_literals,
            self.fold_limit as u64,
            &self.fusion,
            values,
        ))
    }
}

/// Import an ONNX model file. External data is resolved only inside the model's own folder.
pub fn import(path: &Path, opts: &ImportOptions) -> Result<FusedGraph, IrError> {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("xml")) {
        return import_openvino_ir(path, opts);
    }
    let bytes = files::read_regular(path)?;
    let dir = files::model_dir(path);
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    import_shared(Bytes::from(bytes), &file, Some(&dir), opts).map_err(|e| match e {
        IrError::NotOnnx { reason, .. } => IrError::NotOnnx { path: path.to_path_buf(), reason },
        IrError::NoGraph { .. } => IrError::NoGraph { path: path.to_path_buf() },
        e => e,
    })
}

/// Import an OpenVINO IR (`model.xml` with its weights in `model.bin` beside it): converted to
/// the equivalent ONNX model first (see `ovir`), then lowered like any ONNX model.
fn import_openvino_ir(path: &Path, opts: &ImportOptions) -> Result<FusedGraph, IrError> {
    let xml = String::from_utf8(files::read_regular(path)?)
        .map_err(|_| IrError::OpenVinoIr { path: path.to_path_buf(), reason: "the XML is not UTF-8".into() })?;
    // the weights: `<stem>.bin` in the model's folder, read like external data (inside only)
    let bin_name = path.with_extension("bin").file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let bin = files::read_inside(&files::model_dir(path), &bin_name).map_err(|r| IrError::OpenVinoIr {
        path: path.to_path_buf(),
        reason: match r {
            files::Refused::Escapes => format!("its weights `{bin_name}` resolve outside the model's folder"),
            files::Refused::Other(reason) => format!("its weights: {reason}"),
        },
    })?;
    let bin = Bytes::from(bin);
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    import_openvino_ir_bytes(&xml, bin, &file, opts).map_err(|e| match e {
        IrError::OpenVinoIr { reason, .. } => IrError::OpenVinoIr { path: path.to_path_buf(), reason },
        e => e,
    })
}

/// Import an OpenVINO IR given as its XML text and its weights (`file` names it in messages).
pub fn import_openvino_ir_bytes(
    xml: &str,
    bin: Bytes,
    file: &str,
    opts: &ImportOptions,
) -> Result<FusedGraph, IrError> {
    let stem = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let model = crate::ovir::to_onnx(xml, &bin, &stem)
        .map_err(|reason| IrError::OpenVinoIr { path: PathBuf::from(file), reason })?;
    let bytes = Bytes::from(model.encode_to_vec());
    drop((model, bin));
    import_shared(bytes, file, None, opts)
}

/// Import ONNX bytes (copied once into a shared buffer; see [`import_shared`]). `dir` is where
/// external data may be read from (None: not allowed).
pub fn import_bytes(bytes: &[u8], file: &str, dir: Option<&Path>, opts: &ImportOptions) -> Result<FusedGraph, IrError> {
    import_shared(Bytes::copy_from_slice(bytes), file, dir, opts)
}

/// Import ONNX bytes held in a shared buffer. Weights are never copied: the fused graph's
/// `reference` is this buffer, and the lowered model refers to the weights in it.
pub fn import_shared(
    bytes: Bytes,
    file: &str,
    dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<FusedGraph, IrError> {
    let path = PathBuf::from(file);
    let mut model = ModelProto::decode(bytes.clone())
        .map_err(|e| IrError::NotOnnx { path: path.clone(), reason: e.to_string() })?;
    if model.graph.is_none() || model.ir_version.is_none() {
        return Err(IrError::NoGraph { path });
    }
    well_formed(&model)?;
    let mut ext_bytes = vec![];
    let external = files::resolve_external_data(&mut model, dir, &mut ext_bytes)?;
    let hash = ContentHash::of_parts(&[&bytes, &ext_bytes]);
    drop(ext_bytes);
    // the reference is the source itself, or (with external data) the source with it embedded
    let (reference, model) = if external {
        let r = Bytes::from(model.encode_to_vec());
        drop(model);
        let m = ModelProto::decode(r.clone()).map_err(|e| IrError::NotOnnx { path, reason: e.to_string() })?;
        (r, m)
    } else {
        (bytes, model)
    };
    let name = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    Lowering::new(model, reference, opts).run(name, file.to_string(), hash)
}

/// What the ONNX checker and OpenVINO's reader refuse, refused here before anything picks one of
/// two values: an IR version from the future, opsets missing or below 1, names defined twice.
fn well_formed(model: &ModelProto) -> Result<(), IrError> {
    let bad = |reason: String| Err(IrError::Malformed(reason));
    let newest = crate::proto::Version::IrVersion as i64;
    match model.ir_version {
        Some(v) if v < 1 => return bad(format!("ir_version {v} (versions start at 1)")),
        Some(v) if v > newest => {
            return bad(format!("ir_version {v} is newer than this build reads (at most {newest})"));
        }
        _ => {}
    }
    if model.opset_import.is_empty() {
        return bad("opset_import is empty: the model says no operator set version".into());
    }
    let default_ops = model.graph.iter().flat_map(|g| &g.node).any(|n| matches!(n.domain(), "" | "ai.onnx"));
    if default_ops && !model.opset_import.iter().any(|o| matches!(o.domain(), "" | "ai.onnx")) {
        return bad("opset_import names no version of the default ONNX domain, which its nodes use".into());
    }
    let mut domains = HashSet::new();
    for o in &model.opset_import {
        let domain = if o.domain() == "ai.onnx" { "" } else { o.domain() };
        if !domains.insert(domain) {
            return bad(format!("opset_import lists domain `{}` twice", o.domain()));
        }
        match o.version {
            Some(v) if v >= 1 => {}
            v => {
                return bad(format!(
                    "opset_import: domain `{}` has version {} (opsets start at 1)",
                    o.domain(),
                    v.unwrap_or(0)
                ));
            }
        }
    }
    let Some(g) = model.graph.as_ref() else { return Ok(()) };
    let once = |what: &str, names: &mut dyn Iterator<Item = &str>| -> Result<(), IrError> {
        let mut seen = HashSet::new();
        for n in names {
            if !seen.insert(n) {
                return Err(IrError::Malformed(format!("{what} `{n}` appears twice")));
            }
        }
        Ok(())
    };
    once("initializer", &mut g.initializer.iter().map(|t| t.name()))?;
    once("graph input", &mut g.input.iter().map(|v| v.name()))?;
    once("graph output", &mut g.output.iter().map(|v| v.name()))?;
    printable_and_dense(g)
}

/// Every name in `g` and its subgraphs is printable (an engine cuts a name at a NUL, a terminal
/// runs an escape), and no graph holds a sparse initializer (valid ONNX that bident does not
/// read: refused by name rather than blamed on a missing producer later).
fn printable_and_dense(g: &GraphProto) -> Result<(), IrError> {
    let check = |what: &str, name: &str| -> Result<(), IrError> {
        match name.chars().find(|c| c.is_control()) {
            Some(c) => Err(IrError::Malformed(format!(
                "{what} {name:?} holds the control character U+{:04X}: names must be printable",
                c as u32
            ))),
            None => Ok(()),
        }
    };
    if let Some(s) = g.sparse_initializer.first() {
        let name = s.values.as_ref().map_or("", |v| v.name());
        return Err(IrError::Malformed(format!(
            "sparse_initializer {name:?} in graph {:?}: sparse initializers are not supported; store it as a dense \
             initializer",
            g.name()
        )));
    }
    check("graph name", g.name())?;
    for t in &g.initializer {
        check("initializer", t.name())?;
    }
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        check("tensor", v.name())?;
    }
    for n in &g.node {
        check("node name", n.name())?;
        for t in n.input.iter().chain(&n.output) {
            check("tensor", t)?;
        }
        for a in &n.attribute {
            for sub in a.g.iter().chain(&a.graphs) {
                printable_and_dense(sub)?;
            }
        }
    }
    Ok(())
}

/// Every tensor a node reads: its explicit inputs, then the outer-scope tensors its subgraphs
/// read (If/Loop/Scan bodies may use any tensor of the enclosing graph by name).
pub(crate) fn node_uses(n: &NodeProto) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut push = |t: &str| {
        if !t.is_empty() && !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    };
    n.input.iter().for_each(|t| push(t));
    for a in &n.attribute {
        for g in a.g.iter().chain(&a.graphs) {
            outer_refs(g).iter().for_each(|t| push(t));
        }
    }
    out
}

/// Names a subgraph reads but does not define (its inputs, initializers and node outputs define
/// names; nested subgraphs see the enclosing subgraph's names).
fn outer_refs(g: &GraphProto) -> Vec<String> {
    let defined: HashSet<&str> = g
        .input
        .iter()
        .map(|v| v.name())
        .chain(g.initializer.iter().map(|t| t.name()))
        .chain(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
        .collect();
    let mut refs: Vec<String> = vec![];
    for n in &g.node {
        for t in node_uses(n) {
            if !defined.contains(t.as_str()) && !refs.contains(&t) {
                refs.push(t);
            }
        }
    }
    // subgraph outputs may name outer tensors directly
    for o in &g.output {
        if !o.name().is_empty() && !defined.contains(o.name()) && !refs.iter().any(|r| r == o.name()) {
            refs.push(o.name().to_string());
        }
    }
    refs
}

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

/// Bound on inlining Ifs with constant conditions (each inlining re-analyses the graph).
const MAX_INLINED_IFS: usize = 256;

fn node_label(n: &NodeProto, idx: usize) -> String {
    if n.name().is_empty() { format!("#{idx}") } else { n.name().to_string() }
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

/// Largest tensor bident accepts (16 GiB): a larger one is a malformed or mis-pinned model.
const MAX_TENSOR_BYTES: u64 = 1 << 34;

fn tensor_bytes(f: &Fact) -> u64 {
    bident_tensor::numel(&f.shape).saturating_mul(f.dtype.size() as u64)
}

/// How a node ends up after constant analysis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// Computes on activations: becomes part of a fused op.
    Compute,
    /// All inputs constant but not evaluated here: copied into each consuming fused op.
    ConstLike,
    /// Evaluated at import; its outputs are constants now.
    Folded,
    /// Nothing it produces reaches a graph output.
    Dead,
}

struct Lowering<'o> {
    model: ModelProto,
    /// The source model's bytes (external data embedded); original weights are slices of it.
    reference: Bytes,
    opts: &'o ImportOptions,
    opset: i64,
    facts: HashMap<String, Fact>,
    consts: HashMap<String, HostTensor>,
    /// Original initializers over `fold_limit` elements: constants whose values are read (from
    /// `model`'s initializer at this index) only when a node could fold them, never kept.
    big: HashMap<String, usize>,
    /// Names of original initializers.
    initializers: HashSet<String>,
    inputs: Vec<(String, Fact)>,
    outputs: Vec<String>,
    /// value_info and graph outputs with fully static shapes, for ops the registry lacks.
    declared: HashMap<String, Fact>,
    /// Per node: every tensor it reads, explicit inputs and, for control flow, the outer-scope
    /// tensors its subgraphs read. Dependencies, fusion and extraction go by these.
    uses: Vec<Vec<String>>,
}

impl<'o> Lowering<'o> {
    fn new(model: ModelProto, reference: Bytes, opts: &'o ImportOptions) -> Self {
        let opset = model
            .opset_import
            .iter()
            .find(|o| o.domain().is_empty() || o.domain() == "ai.onnx")
            .and_then(|o| o.version)
            .unwrap_or(1);
        Self {
            model,
            reference,
            opts,
            opset,
            facts: HashMap::new(),
            consts: HashMap::new(),
            big: HashMap::new(),
            initializers: HashSet::new(),
            inputs: vec![],
            outputs: vec![],
            declared: HashMap::new(),
            uses: vec![],
        }
    }

    fn graph(&self) -> &GraphProto {
        self.model.graph.as_ref().expect("checked at import")
    }

    /// Sub-pass `boundary`: initializers, inputs (with pinning), outputs and declared shapes
    /// read, every one of them typed.
    fn read_boundary(&mut self) -> Result<(), IrError> {
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
            let name = vi.name().to_string();
            if self.initializers.contains(&name) {
                continue;
            }
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
            let shape = match self.opts.input_shapes.get(&name).or(value.map(|v| &v.shape)) {
                Some(pinned) => {
                    if pinned.len() != dims.len() {
                        return Err(IrError::BadInputShape {
                            input: name,
                            reason: format!("model says rank {}, given {}", dims.len(), pinned.len()),
                        });
                    }
                    if let Some((i, d)) = dims.iter().enumerate().find(|(i, d)| d.is_some_and(|d| d != pinned[*i])) {
                        return Err(IrError::BadInputShape {
                            input: name,
                            reason: format!("dim {i} is fixed at {} in the model, given {}", d.unwrap_or(0), pinned[i]),
                        });
                    }
                    pinned.clone()
                }
                None => match dims.iter().position(Option::is_none) {
                    Some(i) => {
                        let example = dims
                            .iter()
                            .zip(&syms)
                            .map(|(d, s)| match d {
                                Some(v) => v.to_string(),
                                None if s.starts_with('-') => "D".into(),
                                None => s.clone(),
                            })
                            .collect::<Vec<_>>()
                            .join(",");
                        if syms[i].starts_with('-') {
                            return Err(IrError::BadInput {
                                input: name.clone(),
                                reason: format!(
                                    "dim {i} is {} in the model, which is not a size; pin it with --input-shape \
                                     {name}={example}",
                                    syms[i]
                                ),
                            });
                        }
                        return Err(IrError::DynamicInput { input: name, dim: i, symbol: syms[i].clone(), example });
                    }
                    None => dims.iter().map(|d| d.unwrap_or(0)).collect(),
                },
            };
            self.facts.insert(name.clone(), Fact::new(dtype, shape.clone()));
            if let Some(v) = value {
                self.consts.insert(name.clone(), v.clone());
            }
            self.inputs.push((name, Fact::new(dtype, shape)));
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

    /// An initializer (at index `k` of the graph's): its fact, and its value unless it is big.
    fn add_initializer(&mut self, k: usize, t: &TensorProto) -> Result<(), IrError> {
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

    /// Control flow whose subgraphs do not declare their output types: infer them inside the
    /// subgraphs. An If's two branches must agree; a Loop's body sees the iteration number, the
    /// condition and the carried values' initial types; a Scan's body its states' types and one
    /// slice of each scanned input. Any other node keeps the reason its rule gave.
    fn infer_untyped_subgraphs(&self, n: &NodeProto, ctx: &Ctx, reason: String) -> Result<Vec<Fact>, String> {
        let graph = |key: &str| n.attribute.iter().find(|a| a.name() == key).and_then(|a| a.g.as_ref());
        let infer = |g: &GraphProto, inputs: &[Fact], which: &str| {
            ops::control::infer_subgraph(g, inputs, self.opset, &self.facts, &self.consts)
                .map_err(|e| format!("{reason}; inferring the {which}: {e}"))
        };
        match n.op_type() {
            "If" => {
                let (Some(then_g), Some(else_g)) = (graph("then_branch"), graph("else_branch")) else {
                    return Err(reason);
                };
                if n.output.len() != then_g.output.len() || n.output.len() != else_g.output.len() {
                    return Err(reason);
                }
                let (a, b) = (infer(then_g, &[], "then branch")?, infer(else_g, &[], "else branch")?);
                match a.iter().zip(&b).position(|(x, y)| x != y) {
                    None => Ok(a),
                    Some(k) => Err(format!(
                        "the branches give output {k} different types ({}{:?} vs {}{:?}): its type depends on \
                         the condition; pin the inputs it is computed from (--input-value)",
                        a[k].dtype, a[k].shape, b[k].dtype, b[k].shape
                    )),
                }
            }
            "Loop" => {
                let Some(body) = graph("body") else { return Err(reason) };
                let mut inputs = vec![Fact::new(DType::I64, vec![]), Fact::new(DType::Bool, vec![])];
                for k in 2..ctx.inputs.len() {
                    inputs.push(ctx.input(k)?.clone());
                }
                let outs = infer(body, &inputs, "loop body")?;
                ops::control::infer_loop_with(ctx, &|k| {
                    outs.get(k).cloned().ok_or_else(|| format!("the loop body has no output {k}"))
                })
            }
            "Scan" => {
                let Some(body) = graph("body") else { return Err(reason) };
                let inputs = ops::control::scan_body_inputs(ctx).map_err(|e| format!("{reason}; {e}"))?;
                let outs = infer(body, &inputs, "scan body")?;
                ops::control::infer_scan_with(ctx, &|k| {
                    outs.get(k).cloned().ok_or_else(|| format!("the scan body has no output {k}"))
                })
            }
            _ => Err(reason),
        }
    }

    /// A constant: its value is known (or readable, for a big initializer).
    fn is_value(&self, t: &str) -> bool {
        self.consts.contains_key(t) || self.big.contains_key(t)
    }

    /// Topological order of the nodes, after checking producers.
    fn topo_order(&mut self) -> Result<Vec<usize>, IrError> {
        self.uses = self.graph().node.iter().map(node_uses).collect();
        let nodes = &self.graph().node;
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                let is_source = self.initializers.contains(o) || self.inputs.iter().any(|(name, _)| name == o);
                if let Some(&first) = producer.get(o.as_str()) {
                    return Err(IrError::DuplicateProducer {
                        tensor: o.clone(),
                        first: node_label(&nodes[first], first),
                        second: node_label(n, i),
                    });
                }
                if is_source {
                    return Err(IrError::DuplicateProducer {
                        tensor: o.clone(),
                        first: "a graph input or initializer".into(),
                        second: node_label(n, i),
                    });
                }
                producer.insert(o, i);
            }
        }
        let known = |t: &str| producer.contains_key(t) || self.facts.contains_key(t);
        for (i, n) in nodes.iter().enumerate() {
            if let Some(t) = self.uses[i].iter().find(|t| !known(t)) {
                return Err(IrError::DanglingInput {
                    node: node_label(n, i),
                    op: n.op_type().into(),
                    tensor: t.clone(),
                });
            }
        }
        if let Some(t) = self.outputs.iter().find(|t| !known(t)) {
            return Err(IrError::DanglingOutput { tensor: t.clone() });
        }
        if let Some(t) = self.outputs.iter().find(|t| !producer.contains_key(t.as_str())) {
            return Err(IrError::Unsupported {
                node: "-".into(),
                op: "-".into(),
                reason: format!(
                    "graph output `{t}` is a graph input or initializer passed through unchanged; not supported yet"
                ),
            });
        }
        // Kahn's algorithm, stable in file order.
        let mut indeg = vec![0usize; nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![vec![]; nodes.len()];
        for (i, uses) in self.uses.iter().enumerate() {
            for t in uses {
                if let Some(&p) = producer.get(t.as_str()) {
                    indeg[i] += 1;
                    users[p].push(i);
                }
            }
        }
        let mut ready: std::collections::BTreeSet<usize> = (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() != nodes.len() {
            let i = (0..nodes.len()).find(|&i| indeg[i] > 0).unwrap_or(0);
            return Err(IrError::Cycle { node: node_label(&nodes[i], i), op: nodes[i].op_type().into() });
        }
        Ok(order)
    }

    /// Shape inference and constant folding, node by node in topological order: types,
    /// constant folding and each node's fate. `None`: the graph changed (an If on a constant
    /// condition was inlined) and must be ordered and analysed again.
    fn analyse(&mut self, order: &[usize]) -> Result<Option<Vec<Fate>>, IrError> {
        let graph = self.model.graph.take().expect("checked at import");
        let outputs: HashSet<&str> = self.outputs.iter().map(String::as_str).collect();
        let mut fates = vec![Fate::Compute; graph.node.len()];
        // outputs of const-like nodes: constant, but with no value known here
        let mut const_like: HashSet<String> = HashSet::new();
        for &i in order {
            let n = &graph.node[i];
            let label = node_label(n, i);
            let err = |reason: String| IrError::Shape { node: label.clone(), op: n.op_type().into(), reason };
            let present: Vec<Option<&str>> = n.input.iter().map(|t| (!t.is_empty()).then_some(t.as_str())).collect();
            // an If on a known condition is its taken branch: inline it and start over
            if n.op_type() == "If"
                && ops::lookup(n.domain(), "If").is_some()
                && let Some(cond) = present.first().copied().flatten().and_then(|t| self.consts.get(t))
            {
                let cond = cond.numel() > 0 && cond.get_f64(0) != 0.0;
                let mut graph = graph;
                let added = crate::inline::inline_if(&mut graph, i, cond).map_err(|reason| IrError::Shape {
                    node: label,
                    op: "If".into(),
                    reason,
                })?;
                for k in graph.initializer.len() - added..graph.initializer.len() {
                    let t = graph.initializer[k].clone();
                    self.add_initializer(k, &t)?;
                }
                self.model.graph = Some(graph);
                return Ok(None);
            }
            let rule = ops::lookup(n.domain(), n.op_type());
            let all_values = self.uses[i].iter().all(|t| self.is_value(t));
            let all_const = self.uses[i].iter().all(|t| self.is_value(t) || const_like.contains(t));
            // a node that might fold reads its big initializers (only for as long as it takes)
            let mut read: HashMap<&str, HostTensor> = HashMap::new();
            if all_values {
                for t in present.iter().flatten() {
                    if let Some(&k) = self.big.get(*t) {
                        let v = consts::from_proto(&graph.initializer[k])
                            .map_err(|reason| IrError::BadTensor { tensor: t.to_string(), reason })?;
                        read.insert(t, v);
                    }
                }
            }
            let feeds_output = n.output.iter().any(|o| outputs.contains(o.as_str()));
            // Shape, Size and CastLike read some inputs only for their (static) type.
            let type_only = ops::type_only_inputs(n.op_type());
            let types_suffice = rule.is_some()
                && !type_only.is_empty()
                && present
                    .iter()
                    .enumerate()
                    .all(|(k, t)| type_only.contains(&k) || t.is_none_or(|t| self.is_value(t)));
            let ctx = Ctx {
                node: n,
                opset: self.opset,
                inputs: present.iter().map(|t| t.and_then(|t| self.facts.get(t))).collect(),
                consts: present.iter().map(|t| t.and_then(|t| self.consts.get(t).or_else(|| read.get(t)))).collect(),
                missing_const: std::cell::Cell::new(None),
            };
            let facts: Vec<Fact> = match rule {
                Some(def) => {
                    (def.infer)(&ctx).or_else(|reason| self.infer_untyped_subgraphs(n, &ctx, reason)).map_err(
                        |reason| match ctx.missing_const.get().and_then(|k| present.get(k).copied().flatten()) {
                            Some(t) => IrError::NeedsValue {
                                node: label.clone(),
                                op: n.op_type().into(),
                                tensor: t.to_string(),
                                hint: if self.inputs.iter().any(|(name, _)| name == t) {
                                    "it is a graph input: pin its value (--input-value NAME=V,...)".to_string()
                                } else {
                                    "it is computed from run-time data".into()
                                },
                            },
                            None => err(reason),
                        },
                    )?
                }
                // one fact per output position; an omitted (empty) output gets a placeholder
                None => n
                    .output
                    .iter()
                    .map(|o| {
                        if o.is_empty() {
                            return Ok(Fact::new(DType::F32, vec![]));
                        }
                        self.declared.get(o).cloned().ok_or_else(|| IrError::UnknownOp {
                            node: label.clone(),
                            domain: if n.domain().is_empty() { "ai.onnx".into() } else { n.domain().into() },
                            op: n.op_type().into(),
                            tensor: o.clone(),
                        })
                    })
                    .collect::<Result<_, _>>()?,
            };
            let named: Vec<(usize, &String)> = n.output.iter().enumerate().filter(|(_, o)| !o.is_empty()).collect();
            if let Some((f, o)) = facts.iter().zip(&n.output).find(|(f, _)| tensor_bytes(f) > MAX_TENSOR_BYTES) {
                return Err(err(format!(
                    "output `{o}` would be {}{:?}, {} bytes; bident refuses tensors over {MAX_TENSOR_BYTES} bytes",
                    f.dtype,
                    f.shape,
                    tensor_bytes(f)
                )));
            }
            let foldable = (all_values || types_suffice)
                && !feeds_output
                && facts.iter().all(|f| bident_tensor::numel(&f.shape) as usize <= self.opts.fold_limit);
            let values = match rule.and_then(|d| d.eval) {
                // an evaluator must give one value per named output, else it is not trusted
                Some(eval) if foldable => eval(&ctx).ok().filter(|v| v.len() == named.len()),
                _ => None,
            };
            match values {
                Some(vals) => {
                    fates[i] = Fate::Folded;
                    for ((_, o), v) in named.into_iter().zip(vals) {
                        self.facts.insert(o.clone(), Fact::new(v.dtype, v.shape.clone()));
                        self.consts.insert(o.clone(), v);
                    }
                }
                None => {
                    // a constant that is a graph output must be computed by some op
                    if all_const && rule.is_some() && !feeds_output {
                        fates[i] = Fate::ConstLike;
                        const_like.extend(named.iter().map(|(_, o)| (*o).clone()));
                    }
                    for (k, o) in named {
                        let f = facts.get(k).ok_or_else(|| err(format!("no type inferred for output {k} `{o}`")))?;
                        self.facts.insert(o.clone(), f.clone());
                    }
                }
            }
        }
        self.model.graph = Some(graph);
        Ok(Some(fates))
    }

    /// Sub-pass `dead`: the nodes none of whose outputs reach a graph output are dead.
    fn mark_dead(&self, order: &[usize], fates: &mut [Fate]) {
        let nodes = &self.graph().node;
        let mut live: HashSet<&str> = self.outputs.iter().map(String::as_str).collect();
        for &i in order.iter().rev() {
            if fates[i] == Fate::Folded {
                continue;
            }
            let n = &nodes[i];
            if n.output.iter().any(|o| live.contains(o.as_str())) {
                live.extend(self.uses[i].iter().map(String::as_str));
            } else {
                fates[i] = Fate::Dead;
            }
        }
    }

    /// What node `n` computes (`producer`: the node producing each tensor, to see through
    /// `DequantizeLinear` to the integer type an operand is stored in).
    fn node_work(&self, n: &NodeProto, producer: &HashMap<&str, usize>) -> ops::work::NodeWork {
        let fact = |t: &String| (!t.is_empty()).then(|| self.facts.get(t)).flatten();
        let inputs: Vec<Option<&Fact>> = n.input.iter().map(fact).collect();
        let outputs: Vec<Option<&Fact>> = n.output.iter().map(fact).collect();
        let nodes = &self.graph().node;
        let operand_dtype = |k: usize| {
            let t = n.input.get(k).filter(|t| !t.is_empty())?;
            match producer.get(t.as_str()).map(|&p| &nodes[p]) {
                Some(p) if p.op_type() == "DequantizeLinear" => p.input.first().and_then(fact).map(|f| f.dtype),
                _ => fact(t).map(|f| f.dtype),
            }
        };
        let mut w = ops::work::node_work(n, ops::lookup(n.domain(), n.op_type()), &inputs, &outputs, &operand_dtype);
        // a Loop with a constant trip count runs its body that often: at least one pass over the
        // values it carries each time (the body's own work is not modelled)
        if n.op_type() == "Loop"
            && let Some(trips) = n.input.first().and_then(|t| self.consts.get(t))
            && let Some(&m) = crate::consts::to_i64(trips).first()
        {
            // its first outputs are the values carried (one per input after the trip count and
            // the condition); the rest are stacked per trip
            let carried = outputs
                .iter()
                .take(n.input.len().saturating_sub(2))
                .flatten()
                .fold(0u64, |a, f| a.saturating_add(bident_tensor::numel(&f.shape)));
            w.flops = w.flops.saturating_add(u64::try_from(m).unwrap_or(0).saturating_mul(carried.max(1)));
        }
        w
    }

    fn role(&self, n: &NodeProto) -> Role {
        ops::lookup(n.domain(), n.op_type()).map_or(Role::Plain, |d| d.role)
    }

    /// Group compute nodes: an anchor absorbs its single-consumer affine successors (bias,
    /// scale, BatchNorm with constant operands) and then one activation, which may be written
    /// out in several nodes (`x * sigmoid(x)`, see [`Gates::gated_activation`]); such a written
    /// out activation with no anchor before it is a group of its own.
    fn fuse(&self, order: &[usize], fates: &[Fate]) -> Vec<Vec<usize>> {
        let nodes = &self.graph().node;
        let outputs: HashSet<&str> = self.outputs.iter().map(String::as_str).collect();
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for &i in order {
            if fates[i] == Fate::Compute {
                for t in &self.uses[i] {
                    consumers.entry(t).or_default().push(i);
                }
            }
        }
        let const_like: HashSet<&str> = order
            .iter()
            .filter(|&&i| fates[i] == Fate::ConstLike)
            .flat_map(|&i| nodes[i].output.iter().map(String::as_str))
            .collect();
        let is_const = |t: &str| t.is_empty() || self.is_value(t) || const_like.contains(t);
        let position: HashMap<usize, usize> = order.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        let g = Gates { nodes, outputs: &outputs, consumers: &consumers, is_const: &is_const };
        let mut assigned = vec![false; nodes.len()];
        let mut groups = vec![];
        for &i in order {
            if fates[i] != Fate::Compute || assigned[i] {
                continue;
            }
            let mut group = vec![i];
            if self.role(&nodes[i]) == Role::Anchor {
                assigned[i] = true;
                let mut tail = i;
                let ended = loop {
                    let Some(out) = g.single_output(tail) else { break true };
                    let Some([c]) = consumers.get(out).map(Vec::as_slice) else { break false };
                    let c = *c;
                    let role = self.role(&nodes[c]);
                    if assigned[c]
                        || !g.reads_once_with_consts(c, out)
                        || !matches!(role, Role::Affine | Role::Activation)
                    {
                        break true;
                    }
                    assigned[c] = true;
                    group.push(c);
                    tail = c;
                    if role == Role::Activation {
                        break true;
                    }
                };
                // an activation written out in several nodes ends the group like an activation
                if !ended
                    && let Some(out) = g.single_output(tail)
                    && let Some(act) = g.gated_activation(out, &assigned)
                {
                    group.extend(act);
                }
            } else if let Some(x) = g.only_variable_input(i)
                && let Some(act) = g.gated_activation(x, &assigned).filter(|a| a.contains(&i))
            {
                group = act;
            }
            group.sort_by_key(|n| position[n]);
            for &n in &group {
                assigned[n] = true;
            }
            groups.push(group);
        }
        groups
    }

    /// The lowering's sub-passes, in order. In debug builds each one's result is checked before
    /// the next runs (cranelift's `verify_if`); the fused graph is verified in every build.
    fn run(mut self, name: String, file: String, hash: ContentHash) -> Result<FusedGraph, IrError> {
        self.read_boundary()?;
        verify_if("boundary", || self.check_boundary())?;
        let (order, mut fates) = self.order_and_fold()?;
        verify_if("fold", || self.check_fold(&fates))?;
        self.mark_dead(&order, &mut fates);
        verify_if("dead", || self.check_dead(&fates))?;
        let (groups, fusion) = self.group(&order, &fates);
        verify_if("group", || check_groups(&fates, &groups))?;
        let ops = self.fused_ops(&order, &fates, &groups);
        let fused = self.fused_graph(name, file, hash, fusion, ops);
        crate::verify(&fused)?;
        Ok(fused)
    }

    /// Sub-passes `order` and `fold`: the nodes in topological order, every tensor typed and the
    /// constant subgraphs folded; an If on a constant condition is inlined and both run again.
    fn order_and_fold(&mut self) -> Result<(Vec<usize>, Vec<Fate>), IrError> {
        let mut inlined = 0;
        loop {
            let order = self.topo_order()?;
            verify_if("order", || self.check_order(&order))?;
            if let Some(fates) = self.analyse(&order)? {
                return Ok((order, fates));
            }
            inlined += 1;
            if inlined > MAX_INLINED_IFS {
                return Err(IrError::Verify(format!("more than {MAX_INLINED_IFS} If nodes on constant conditions")));
            }
        }
    }

    /// Sub-pass `group`: the compute nodes grouped into fused ops, by the rules or by a
    /// backend's record (with how far the two agree).
    fn group(&self, order: &[usize], fates: &[Fate]) -> (Vec<Vec<usize>>, FusionInfo) {
        let rule_groups = self.fuse(order, fates);
        match &self.opts.fusion {
            Fusion::Rules => {
                let info = FusionInfo { source: "rules".into(), rule_ops: rule_groups.len() as u32, backend: None };
                (rule_groups, info)
            }
            Fusion::Backend { pu, layers } => {
                let graph = self.graph();
                let views: Vec<NodeView> = graph
                    .node
                    .iter()
                    .enumerate()
                    .map(|(i, n)| NodeView {
                        name: n.name(),
                        outputs: &n.output,
                        uses: &self.uses[i],
                        compute: fates[i] == Fate::Compute,
                        anchor: self.role(n) == Role::Anchor,
                        layout: matches!(
                            n.op_type(),
                            "Transpose" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity"
                        ),
                    })
                    .collect();
                let d = fusion::derive(&views, order, layers);
                let (identical, agreement) = fusion::agreement(&rule_groups, &d.groups);
                let info = FusionInfo {
                    source: "backend".into(),
                    rule_ops: rule_groups.len() as u32,
                    backend: Some(fusion::BackendFusion {
                        pu: pu.clone(),
                        layers: layers.len() as u32,
                        ops: d.groups.len() as u32,
                        identical,
                        agreement,
                        unresolved: d.unresolved,
                        split: d.split,
                    }),
                };
                (d.groups, info)
            }
        }
    }

    /// Sub-pass `fused ops`: each group as a [`FusedOp`] (its nodes with the const-like
    /// producers it needs, the tensors it reads and writes, its work), and the tensors between.
    fn fused_ops(&self, order: &[usize], fates: &[Fate], groups: &[Vec<usize>]) -> Ops {
        let graph = self.graph();
        let nodes = &graph.node;

        // The lowered node list: const-like and compute nodes in topological order.
        let kept: Vec<usize> =
            order.iter().copied().filter(|&i| matches!(fates[i], Fate::Compute | Fate::ConstLike)).collect();
        let new_index: HashMap<usize, u32> = kept.iter().enumerate().map(|(k, &i)| (i, k as u32)).collect();
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for &i in &kept {
            for o in nodes[i].output.iter().filter(|o| !o.is_empty()) {
                producer.insert(o, i);
            }
        }

        let mut tensors: Vec<TensorInfo> = vec![];
        let mut tensor_ids: HashMap<String, TensorId> = HashMap::new();
        let mut tid = |name: &str, facts: &HashMap<String, Fact>| -> TensorId {
            if let Some(&id) = tensor_ids.get(name) {
                return id;
            }
            // analyse gave every graph input and every produced tensor a fact
            let f = &facts[name];
            let id = tensors.len() as TensorId;
            tensors.push(TensorInfo { name: name.to_string(), dtype: f.dtype, shape: f.shape.clone() });
            tensor_ids.insert(name.to_string(), id);
            id
        };
        let inputs: Vec<TensorId> = self.inputs.iter().map(|(n, _)| tid(n, &self.facts)).collect();

        // Which group consumes each tensor (to find group outputs).
        let mut group_of = vec![usize::MAX; nodes.len()];
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                group_of[i] = g;
            }
        }
        let graph_outputs: HashSet<&str> = self.outputs.iter().map(String::as_str).collect();
        let mut consumer_groups: HashMap<&str, Vec<usize>> = HashMap::new();
        for &j in &kept {
            if fates[j] == Fate::Compute {
                for t in &self.uses[j] {
                    consumer_groups.entry(t).or_default().push(group_of[j]);
                }
            }
        }
        let mut fused_ops = Vec::with_capacity(groups.len());
        let mut used_consts: HashSet<String> = HashSet::new();
        for (g, members) in groups.iter().enumerate() {
            // attach the const-like producers this group needs, transitively
            let mut all: Vec<usize> = members.clone();
            let mut k = 0;
            while k < all.len() {
                for t in &self.uses[all[k]] {
                    if let Some(&p) = producer.get(t.as_str())
                        && fates[p] == Fate::ConstLike
                        && !all.contains(&p)
                    {
                        all.push(p);
                    }
                }
                k += 1;
            }
            all.sort_by_key(|i| new_index[i]);
            let inside: HashSet<&str> = all.iter().flat_map(|&i| nodes[i].output.iter().map(String::as_str)).collect();
            let mut op_inputs = vec![];
            let mut group_consts: HashSet<&str> = HashSet::new();
            let mut input_names: Vec<&str> = vec![];
            for &i in &all {
                for t in &self.uses[i] {
                    if inside.contains(t.as_str()) {
                        continue;
                    }
                    if self.is_value(t) {
                        used_consts.insert(t.clone());
                        group_consts.insert(t);
                        continue;
                    }
                    let id = tid(t, &self.facts);
                    if !op_inputs.contains(&id) {
                        op_inputs.push(id);
                        input_names.push(t.as_str());
                    }
                }
            }
            let mut op_outputs = vec![];
            let mut output_names: Vec<&str> = vec![];
            for &i in members {
                for o in nodes[i].output.iter().filter(|o| !o.is_empty()) {
                    let used_outside = graph_outputs.contains(o.as_str())
                        || consumer_groups.get(o.as_str()).is_some_and(|gs| gs.iter().any(|&c| c != g));
                    if used_outside {
                        op_outputs.push(tid(o, &self.facts));
                        output_names.push(o.as_str());
                    }
                }
            }
            let anchor_at =
                members.iter().copied().find(|&i| self.role(&nodes[i]) == Role::Anchor).unwrap_or(members[0]);
            let anchor = &nodes[anchor_at];
            let bytes = |ts: &mut dyn Iterator<Item = &str>| {
                ts.filter_map(|t| self.facts.get(t)).fold(0u64, |a, f| a.saturating_add(tensor_bytes(f)))
            };
            let work = ops::work::group_work(
                &members
                    .iter()
                    .map(|&i| (self.node_work(&nodes[i], &producer), nodes[i].op_type().to_string()))
                    .collect::<Vec<_>>(),
                bytes(&mut input_names.into_iter()),
                bytes(&mut group_consts.iter().copied()),
                bytes(&mut output_names.into_iter()),
            );
            fused_ops.push(FusedOp {
                name: node_label(anchor, anchor_at),
                kind: members.iter().map(|&i| nodes[i].op_type()).collect::<Vec<_>>().join("+"),
                nodes: all.iter().map(|i| new_index[i]).collect(),
                inputs: op_inputs,
                outputs: op_outputs,
                work,
            });
        }
        let outputs: Vec<TensorId> = self.outputs.iter().map(|n| tid(n, &self.facts)).collect();
        Ops { kept, tensors, inputs, outputs, ops: fused_ops, used_consts }
    }

    /// Sub-pass `fused graph`: the lowered model (the kept nodes, the constants they need as
    /// initializers, static boundary types) and the [`FusedGraph`] around it.
    fn fused_graph(&self, name: String, file: String, hash: ContentHash, fusion: FusionInfo, ops: Ops) -> FusedGraph {
        let Ops { kept, tensors, inputs, outputs, ops: fused_ops, used_consts } = ops;
        let graph = self.graph();
        let nodes = &graph.node;
        let graph_outputs: HashSet<&str> = self.outputs.iter().map(String::as_str).collect();
        let mut lowered = self.model.clone();
        let mut lg = lowered.graph.take().expect("checked at import");
        lg.node = kept.iter().map(|&i| nodes[i].clone()).collect();
        let mut const_names: Vec<&String> = used_consts.iter().collect();
        const_names.sort();
        let original: HashMap<&str, &TensorProto> = graph.initializer.iter().map(|t| (t.name(), t)).collect();
        lg.initializer = const_names
            .iter()
            .map(|n| match (self.initializers.contains(*n), original.get(n.as_str())) {
                (true, Some(t)) => weights::stored(t, &self.reference),
                _ => consts::to_proto(n, &self.consts[*n]),
            })
            .collect();
        lg.input = self.inputs.iter().map(|(n, f)| value_info(n, f.dtype, &f.shape)).collect();
        lg.output = outputs
            .iter()
            .map(|&t| {
                let t = &tensors[t as usize];
                value_info(&t.name, t.dtype, &t.shape)
            })
            .collect();
        lg.value_info = tensors
            .iter()
            .filter(|t| !graph_outputs.contains(t.name.as_str()))
            .map(|t| value_info(&t.name, t.dtype, &t.shape))
            .collect();
        lowered.graph = Some(lg);

        let source = Source {
            file,
            hash,
            ir_version: self.model.ir_version.unwrap_or(0),
            opsets: self.model.opset_import.iter().map(|o| (o.domain().to_string(), o.version.unwrap_or(0))).collect(),
            producer: format!("{} {}", self.model.producer_name(), self.model.producer_version()).trim().to_string(),
            nodes: nodes.len(),
            folded_nodes: nodes.len() - kept.len(),
        };
        FusedGraph {
            name,
            source,
            input_shapes: self.inputs.iter().map(|(n, f)| (n.clone(), f.shape.clone())).collect(),
            input_values: self
                .inputs
                .iter()
                .filter_map(|(n, _)| self.consts.get(n).map(|v| (n.clone(), crate::ConstTensor::from_host(v))))
                .collect(),
            fusion,
            tensors,
            inputs,
            outputs,
            ops: fused_ops,
            model: Blob::new(lowered.encode_to_vec()),
            reference: Blob(self.reference.clone()),
        }
    }

    // ---- the checks between sub-passes (debug builds, see `verify_if`) ----

    /// After `boundary`: every input typed as listed, every constant's value of its tensor's
    /// type, every big initializer found where it is recorded.
    fn check_boundary(&self) -> Result<(), String> {
        for (name, f) in &self.inputs {
            if self.facts.get(name) != Some(f) {
                return Err(format!("input `{name}` is not typed {}{:?}", f.dtype, f.shape));
            }
        }
        let initializers = &self.graph().initializer;
        for (name, &k) in &self.big {
            if initializers.get(k).is_none_or(|t| t.name() != name) || !self.facts.contains_key(name) {
                return Err(format!("big initializer `{name}` is not initializer {k}, or is untyped"));
            }
        }
        self.check_consts()
    }

    /// After `order`: every node once, each after the producers of all it reads; what no node
    /// produces is a typed graph input or initializer.
    fn check_order(&self, order: &[usize]) -> Result<(), String> {
        let nodes = &self.graph().node;
        let mut position = vec![usize::MAX; nodes.len()];
        for (p, &i) in order.iter().enumerate() {
            match position.get_mut(i) {
                Some(q) if *q == usize::MAX => *q = p,
                _ => return Err(format!("node {i} is out of range or ordered twice")),
            }
        }
        if order.len() != nodes.len() || self.uses.len() != nodes.len() {
            return Err(format!("{} nodes ordered, {} reads listed, of {}", order.len(), self.uses.len(), nodes.len()));
        }
        let producer = self.producers();
        for (p, &i) in order.iter().enumerate() {
            for t in &self.uses[i] {
                let ok = match producer.get(t.as_str()) {
                    Some(&q) => position[q] < p,
                    None => self.facts.contains_key(t),
                };
                if !ok {
                    return Err(format!("node {} reads `{t}` before it is produced", node_label(&nodes[i], i)));
                }
            }
        }
        Ok(())
    }

    /// After `fold`: a fate for every node, none dead yet; every tensor a node writes typed,
    /// those of folded nodes with values; every constant's value of its tensor's type.
    fn check_fold(&self, fates: &[Fate]) -> Result<(), String> {
        let nodes = &self.graph().node;
        if fates.len() != nodes.len() {
            return Err(format!("{} fates for {} nodes", fates.len(), nodes.len()));
        }
        for (i, n) in nodes.iter().enumerate() {
            if fates[i] == Fate::Dead {
                return Err(format!("node {} is dead before dead nodes are looked for", node_label(n, i)));
            }
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                if !self.facts.contains_key(o) || (fates[i] == Fate::Folded && !self.consts.contains_key(o)) {
                    return Err(format!(
                        "output `{o}` of node {} is untyped or, folded, has no value",
                        node_label(n, i)
                    ));
                }
            }
        }
        self.check_consts()
    }

    /// After `dead`: every graph output computed by a live compute node, and no live node
    /// reads what a dead one writes.
    fn check_dead(&self, fates: &[Fate]) -> Result<(), String> {
        let nodes = &self.graph().node;
        let producer = self.producers();
        if let Some(t) =
            self.outputs.iter().find(|t| producer.get(t.as_str()).is_none_or(|&p| fates[p] != Fate::Compute))
        {
            return Err(format!("graph output `{t}` is not computed by a live compute node"));
        }
        for (i, n) in nodes.iter().enumerate().filter(|&(i, _)| matches!(fates[i], Fate::Compute | Fate::ConstLike)) {
            if let Some(t) =
                self.uses[i].iter().find(|t| producer.get(t.as_str()).is_some_and(|&p| fates[p] == Fate::Dead))
            {
                return Err(format!("live node {} reads `{t}`, which a dead node writes", node_label(n, i)));
            }
        }
        Ok(())
    }

    /// The node writing each tensor.
    fn producers(&self) -> HashMap<&str, usize> {
        let nodes = &self.graph().node;
        (0..nodes.len())
            .flat_map(|i| nodes[i].output.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), i)))
            .collect()
    }

    /// Every constant's value is of its tensor's type.
    fn check_consts(&self) -> Result<(), String> {
        for (name, v) in &self.consts {
            if self.facts.get(name).is_none_or(|f| f.dtype != v.dtype || f.shape != v.shape) {
                return Err(format!("constant `{name}` ({}{:?}) is not of its tensor's type", v.dtype, v.shape));
            }
        }
        Ok(())
    }
}

/// The fused ops and the tensors between them, before the lowered model is written.
struct Ops {
    /// The nodes the lowered model keeps (compute and const-like), in topological order.
    kept: Vec<usize>,
    tensors: Vec<TensorInfo>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    ops: Vec<FusedOp>,
    /// The constants the fused ops read, by name.
    used_consts: HashSet<String>,
}

/// Run the check of sub-pass `pass` in debug builds (as cranelift's `verify_if`): a sub-pass
/// that broke an invariant is caught where it did so, as an error naming it.
fn verify_if(pass: &'static str, check: impl FnOnce() -> Result<(), String>) -> Result<(), IrError> {
    if !cfg!(debug_assertions) {
        return Ok(());
    }
    check().map_err(|reason| IrError::SubPass { pass, reason })
}

/// After `group`: every compute node in exactly one group, and nothing else in any.
fn check_groups(fates: &[Fate], groups: &[Vec<usize>]) -> Result<(), String> {
    let mut seen = vec![false; fates.len()];
    for (g, members) in groups.iter().enumerate() {
        if members.is_empty() {
            return Err(format!("group {g} is empty"));
        }
        for &i in members {
            if fates.get(i) != Some(&Fate::Compute) || std::mem::replace(&mut seen[i], true) {
                return Err(format!("node {i} of group {g} is not a compute node, or is in two groups"));
            }
        }
    }
    match (0..fates.len()).find(|&i| fates[i] == Fate::Compute && !seen[i]) {
        Some(i) => Err(format!("compute node {i} is in no group")),
        None => Ok(()),
    }
}

/// The graph as the fusion rules see it, for recognising activations written out in several
/// nodes.
struct Gates<'a> {
    nodes: &'a [NodeProto],
    outputs: &'a HashSet<&'a str>,
    consumers: &'a HashMap<&'a str, Vec<usize>>,
    is_const: &'a dyn Fn(&str) -> bool,
}

/// Longest run of elementwise nodes between a gate's input and its closing Mul.
const MAX_GATE_CHAIN: usize = 8;

impl<'a> Gates<'a> {
    /// The node's one named output, unless it is a graph output.
    fn single_output(&self, i: usize) -> Option<&'a str> {
        let mut outs = self.nodes[i].output.iter().filter(|o| !o.is_empty());
        match (outs.next(), outs.next()) {
            (Some(o), None) if !self.outputs.contains(o.as_str()) => Some(o),
            _ => None,
        }
    }

    /// Whether node `c` reads `t` once and everything else it reads is constant.
    fn reads_once_with_consts(&self, c: usize, t: &str) -> bool {
        let n = &self.nodes[c];
        n.input.iter().filter(|u| *u == t).count() == 1
            && n.input.iter().filter(|u| *u != t).all(|u| (self.is_const)(u))
    }

    /// The node's one non-constant input, read once.
    fn only_variable_input(&self, i: usize) -> Option<&'a str> {
        let mut vars = self.nodes[i].input.iter().filter(|u| !(self.is_const)(u));
        match (vars.next(), vars.next()) {
            (Some(x), None) if self.reads_once_with_consts(i, x) => Some(x),
            _ => None,
        }
    }

    fn sole_consumer(&self, t: &str) -> Option<usize> {
        match self.consumers.get(t).map(Vec::as_slice) {
            Some([c]) => Some(*c),
            _ => None,
        }
    }

    fn elementwise(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        ops::lookup(n.domain(), n.op_type()).is_some_and(|d| d.class == ops::OpClass::Elementwise)
    }

    /// `x * f(x)` written out: x feeds a chain of elementwise nodes with constant operands (f)
    /// and, directly or scaled by a constant, the Mul that closes the gate, optionally followed
    /// by one more constant scale. Mish (`x * tanh(softplus(x))`), SiLU (`x * sigmoid(x)`),
    /// HardSwish and the erf form of GELU (`x * 0.5 * (1 + erf(x / sqrt 2))`) are of this form;
    /// backends compute each as one activation. The nodes found, none assigned yet.
    fn gated_activation(&self, x: &str, assigned: &[bool]) -> Option<Vec<usize>> {
        let Some([a, b]) = self.consumers.get(x).map(Vec::as_slice) else { return None };
        let ok = |i: usize| !assigned[i] && self.elementwise(i);
        for (head, gate) in [(*a, *b), (*b, *a)] {
            if !ok(head) || !ok(gate) || !self.reads_once_with_consts(head, x) {
                continue;
            }
            // the gate side: x itself, or x scaled by a constant (read only by the closing Mul)
            let gate_in = if self.reads_once_with_consts(gate, x) && matches!(self.nodes[gate].op_type(), "Mul" | "Div")
            {
                self.single_output(gate)
            } else if self.nodes[gate].op_type() == "Mul" {
                None
            } else {
                continue;
            };
            let mut chain = vec![head];
            let mut tail = head;
            let closing = loop {
                let out = self.single_output(tail)?;
                let next = self.sole_consumer(out)?;
                let n = &self.nodes[next];
                let closes = |other: &str| {
                    n.op_type() == "Mul"
                        && n.input.len() == 2
                        && (n.input[0] == out && n.input[1] == other || n.input[1] == out && n.input[0] == other)
                };
                match gate_in {
                    None if next == gate && closes(x) => break vec![gate],
                    Some(g) if closes(g) && self.sole_consumer(g) == Some(next) && ok(next) => break vec![gate, next],
                    _ => {}
                }
                if next == gate || !ok(next) || !self.reads_once_with_consts(next, out) || chain.len() >= MAX_GATE_CHAIN
                {
                    return None;
                }
                chain.push(next);
                tail = next;
            };
            chain.extend(closing);
            // a trailing constant scale (GELU's 0.5 written after the Mul)
            let last = *chain.last()?;
            if let Some(out) = self.single_output(last)
                && let Some(next) = self.sole_consumer(out)
                && ok(next)
                && matches!(self.nodes[next].op_type(), "Mul" | "Div")
                && self.reads_once_with_consts(next, out)
                && gate_in.is_none()
            {
                chain.push(next);
            }
            return Some(chain);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::OperatorSetIdProto;

    fn node(op: &str, name: &str, input: &str, output: &str) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            name: Some(name.into()),
            input: vec![input.into()],
            output: vec![output.into()],
            ..Default::default()
        }
    }

    /// `x -> relu -> neg -> y`, listed out of order, and an `abs` of x that nothing reads.
    fn lowering(opts: &ImportOptions) -> Lowering<'_> {
        let graph = GraphProto {
            node: vec![node("Neg", "neg", "a", "y"), node("Relu", "relu", "x", "a"), node("Abs", "abs", "x", "z")],
            input: vec![value_info("x", DType::F32, &[2])],
            output: vec![value_info("y", DType::F32, &[2])],
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(18) }],
            graph: Some(graph),
            ..Default::default()
        };
        let reference = Bytes::from(model.encode_to_vec());
        Lowering::new(model, reference, opts)
    }

    /// Each sub-pass's check holds on what the sub-pass leaves, and fails, as an error naming
    /// the sub-pass, on a state that breaks its invariant.
    #[test]
    fn sub_pass_checks() {
        let opts = ImportOptions::default();
        let mut l = lowering(&opts);
        l.read_boundary().unwrap();
        l.check_boundary().unwrap();
        let (order, mut fates) = l.order_and_fold().unwrap();
        assert_eq!(order, [1, 0, 2]);
        l.check_order(&order).unwrap();
        l.check_fold(&fates).unwrap();
        l.mark_dead(&order, &mut fates);
        assert_eq!(fates, [Fate::Compute, Fate::Compute, Fate::Dead]);
        l.check_dead(&fates).unwrap();
        let (groups, _) = l.group(&order, &fates);
        assert_eq!(groups, [vec![1], vec![0]]);
        check_groups(&fates, &groups).unwrap();

        let mut broken = vec![];
        let mut b = lowering(&opts);
        b.read_boundary().unwrap();
        b.facts.insert("x".into(), Fact::new(DType::F32, vec![3]));
        broken.push(("boundary", b.check_boundary()));
        broken.push(("order", l.check_order(&[2, 0, 1])));
        let (x, _) = l.facts.remove_entry("a").unwrap();
        broken.push(("fold", l.check_fold(&fates)));
        l.facts.insert(x, Fact::new(DType::F32, vec![2]));
        let mut dead = fates.clone();
        dead[1] = Fate::Dead;
        broken.push(("dead", l.check_dead(&dead)));
        broken.push(("group", check_groups(&fates, &groups[1..])));
        let messages: Vec<String> = broken
            .into_iter()
            .map(|(pass, r)| match verify_if(pass, || r) {
                Ok(()) => "ok".into(),
                Err(e @ IrError::SubPass { pass: p, .. }) if p == pass => e.to_string(),
                Err(e) => format!("{pass}: not a SubPass error: {e:?}"),
            })
            .collect();
        // release builds skip the checks
        let expected = if cfg!(debug_assertions) {
            vec![
                "import: sub-pass `boundary` broke an invariant: input `x` is not typed f32[2]",
                "import: sub-pass `order` broke an invariant: node neg reads `a` before it is produced",
                "import: sub-pass `fold` broke an invariant: output `a` of node relu is untyped or, folded, has no \
                 value",
                "import: sub-pass `dead` broke an invariant: live node neg reads `a`, which a dead node writes",
                "import: sub-pass `group` broke an invariant: compute node 1 is in no group",
            ]
        } else {
            vec!["ok"; 5]
        };
        assert_eq!(messages, expected);
    }
}
