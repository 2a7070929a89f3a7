//! Import: ONNX bytes -> typed, constant-folded node list -> fused groups -> [`FusedGraph`].
//!
//! This file holds the import entry points, the model's well-formedness checks and the lowering's
//! order of sub-passes ([`Lowering::run`]); each sub-pass has a file (`boundary`, `analyse` for
//! `order`, `fold` and `dead`, `group`, `build` for `fused ops` and `fused graph`), and `checks`
//! holds the checks between them.

mod analyse;
mod boundary;
mod build;
mod checks;
mod group;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use bident_artifact::ContentHash;
use bident_tensor::HostTensor;
use bytes::Bytes;
use prost::Message;

use crate::fusion::Fusion;
use crate::ops::Fact;
use crate::proto::{GraphProto, ModelProto, NodeProto};
use crate::{FusedGraph, IrError, files};
pub(crate) use analyse::node_uses;
pub(crate) use boundary::value_info;
use checks::{check_groups, verify_if};

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

/// Bound on inlining Ifs with constant conditions (each inlining re-analyses the graph).
const MAX_INLINED_IFS: usize = 256;

fn node_label(n: &NodeProto, idx: usize) -> String {
    if n.name().is_empty() { format!("#{idx}") } else { n.name().to_string() }
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

    /// A constant: its value is known (or readable, for a big initializer).
    fn is_value(&self, t: &str) -> bool {
        self.consts.contains_key(t) || self.big.contains_key(t)
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
}
