//! bident-ir: from an ONNX file to a [`FusedGraph`], the DAG of fused operators every later
//! stage works on, and extraction of any fused operator as a standalone ONNX model.
//!
//! Owns: the ONNX protobuf bindings (generated, `proto`), op knowledge (`ops`, one file per op
//! family), shape inference and constant folding, the fusion rules, the `FusedGraph` artifact and
//! its verifier, and the source model annotated with each node's fused op ([`annotate()`]).
//!
//! Must not: touch any backend (extraction produces bytes; running them is bident-backend's
//! job), or know about PUs, costs or plans.
//!
//! Everything that reads or writes ONNX (protobuf) is behind the `onnx` feature (on by
//! default). Without it the crate is the `FusedGraph` data type, its verifier and its queries:
//! what the search and the partition link, with no protobuf code.

#[cfg(feature = "onnx")]
mod annotate;
#[cfg(feature = "onnx")]
mod consts;
mod error;
#[cfg(feature = "onnx")]
mod extract;
#[cfg(feature = "onnx")]
mod files;
// its data types are the graph's; the derivation runs at import only
#[cfg_attr(not(feature = "onnx"), allow(dead_code))]
mod fusion;
#[cfg(feature = "onnx")]
mod inline;
#[cfg(feature = "onnx")]
mod lower;
mod names;
#[cfg(feature = "onnx")]
mod ops;
#[cfg(feature = "onnx")]
mod ovir;
#[cfg(feature = "onnx")]
pub use bident_onnx as proto;
#[cfg(feature = "onnx")]
mod weights;
mod work;

use std::collections::BTreeMap;

use bident_artifact::{Artifact, Blob, ContentHash};
use serde::{Deserialize, Serialize};

#[cfg(feature = "onnx")]
pub use annotate::{Annotated, FUSED_OP, NO_FUSED_OP, annotate};
pub use bident_tensor::DType;
pub use error::IrError;
#[cfg(feature = "onnx")]
pub use extract::{Extractor, IDENTITY_KEEPS, timing_identity};
#[cfg(feature = "onnx")]
pub use fusion::check_against_record;
pub use fusion::{BackendFusion, BackendLayer, Fusion, FusionInfo, RecordCheck};
#[cfg(feature = "onnx")]
pub use lower::{ImportOptions, import, import_bytes, import_openvino_ir_bytes, import_shared};
pub use names::resolve_op;
pub use work::{OpClass, Work};

/// Index of a tensor in [`FusedGraph::tensors`].
pub type TensorId = u32;
/// Index of a fused operator in [`FusedGraph::ops`]; ops are stored in topological order.
pub type OpId = u32;

/// A tensor visible between fused operators (or at the graph's boundary).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
}

impl TensorInfo {
    pub fn bytes(&self) -> u64 {
        bident_tensor::numel(&self.shape) * self.dtype.size() as u64
    }
}

/// A constant tensor stored in an artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstTensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub data: Blob,
}

impl ConstTensor {
    pub fn from_host(t: &bident_tensor::HostTensor) -> Self {
        Self { dtype: t.dtype, shape: t.shape.clone(), data: Blob::new(t.data.clone()) }
    }

    pub fn to_host(&self) -> bident_tensor::HostTensor {
        bident_tensor::HostTensor { dtype: self.dtype, shape: self.shape.clone(), data: self.data.0.to_vec() }
    }
}

/// A group of ONNX nodes executed as one unit (e.g. `Conv+BatchNormalization+Relu`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FusedOp {
    /// Name of the anchor (or only) node.
    pub name: String,
    /// Op types of the group's compute nodes joined with `+`.
    pub kind: String,
    /// Indices into the lowered model's `graph.node`, in execution order; constant-producing
    /// nodes the group needs are included.
    pub nodes: Vec<u32>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    /// What the op computes (class, FLOPs, bytes): the input of analytic cost models.
    pub work: Work,
}

/// Where a fused graph came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// File name of the model as given.
    pub file: String,
    /// Hash of the model bytes (external data included).
    pub hash: ContentHash,
    pub ir_version: i64,
    /// `(domain, version)` of each imported opset.
    pub opsets: Vec<(String, i64)>,
    pub producer: String,
    /// ONNX nodes in the source graph.
    pub nodes: usize,
    /// Nodes removed by constant folding and dead-code elimination.
    pub folded_nodes: usize,
}

/// The fused-operator DAG of one model. Produced by [`import`]; read by every later stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedGraph {
    pub name: String,
    pub source: Source,
    /// Input shapes after pinning dynamic dims.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Inputs pinned to fixed values (see `ImportOptions::input_values`); fed with these values.
    pub input_values: BTreeMap<String, ConstTensor>,
    /// Which fusion produced the grouping, and how far the two sources agree.
    pub fusion: FusionInfo,
    pub tensors: Vec<TensorInfo>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    /// Fused operators in topological order.
    pub ops: Vec<FusedOp>,
    /// The lowered model (inputs pinned, constants folded) that `nodes` index into. Its original
    /// weights are references into `reference` (see [`FusedGraph::lowered_model`]).
    pub model: Blob,
    /// The source model as given (external data embedded), holding the weights once. The
    /// reference for correctness checks and the monolithic baseline: see
    /// [`FusedGraph::reference_model`].
    pub reference: Blob,
}

impl Artifact for FusedGraph {
    const KIND: &'static str = "fused-graph";
    const SCHEMA_VERSION: u32 = 3;
}

impl FusedGraph {
    pub fn tensor(&self, id: TensorId) -> &TensorInfo {
        &self.tensors[id as usize]
    }

    /// For each tensor, the op that produces it (None for graph inputs).
    pub fn producers(&self) -> Vec<Option<OpId>> {
        let mut p = vec![None; self.tensors.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &t in &op.outputs {
                p[t as usize] = Some(i as OpId);
            }
        }
        p
    }

    /// Data edges between ops: `(producer, consumer, tensor)`, each once, in consumer order.
    pub fn edges(&self) -> Vec<(OpId, OpId, TensorId)> {
        let prod = self.producers();
        let mut out = vec![];
        for (c, op) in self.ops.iter().enumerate() {
            for &t in &op.inputs {
                if let Some(p) = prod[t as usize] {
                    out.push((p, c as OpId, t));
                }
            }
        }
        out
    }

    /// The graph as a petgraph DAG over op ids (edge weight: tensor id).
    pub fn op_dag(&self) -> petgraph::graph::DiGraph<OpId, TensorId> {
        let mut g = petgraph::graph::DiGraph::<OpId, TensorId>::with_capacity(self.ops.len(), self.ops.len());
        for i in 0..self.ops.len() {
            g.add_node(i as OpId);
        }
        for (p, c, t) in self.edges() {
            g.add_edge(petgraph::graph::NodeIndex::new(p as usize), petgraph::graph::NodeIndex::new(c as usize), t);
        }
        g
    }

    /// Values to feed the graph inputs: the pinned value where there is one, else a seeded
    /// pseudo-random tensor (input `k` gets seed `seed + k`).
    pub fn example_inputs(&self, seed: u64) -> Vec<bident_tensor::HostTensor> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(k, &t)| {
                let t = self.tensor(t);
                match self.input_values.get(&t.name) {
                    Some(v) => v.to_host(),
                    None => bident_tensor::HostTensor::seeded(t.dtype, t.shape.clone(), seed.wrapping_add(k as u64)),
                }
            })
            .collect()
    }

    /// Hash identifying this graph for downstream artifacts (the payload hash its artifact
    /// header carries), computed without encoding the graph into memory.
    pub fn content_hash(&self) -> Result<ContentHash, IrError> {
        bident_artifact::payload_hash(self).map_err(IrError::Verify)
    }

    /// The lowered model as a standalone ONNX model, weights included.
    #[cfg(feature = "onnx")]
    pub fn lowered_model(&self) -> Result<Vec<u8>, IrError> {
        use prost::Message;
        Ok(self.decoded_model()?.encode_to_vec())
    }

    /// The lowered model decoded, its weights slices of the reference (not copies).
    #[cfg(feature = "onnx")]
    pub(crate) fn decoded_model(&self) -> Result<proto::ModelProto, IrError> {
        use prost::Message;
        let mut m = proto::ModelProto::decode(self.model.0.clone()).map_err(|e| IrError::StoredModel(e.to_string()))?;
        weights::resolve(&mut m, &self.reference.0).map_err(IrError::StoredModel)?;
        Ok(m)
    }

    /// The source model with its input shapes pinned as imported: what the backend runs whole.
    #[cfg(feature = "onnx")]
    pub fn reference_model(&self) -> Result<Vec<u8>, IrError> {
        use prost::Message;
        let mut m =
            proto::ModelProto::decode(self.reference.0.clone()).map_err(|e| IrError::StoredModel(e.to_string()))?;
        let g = m.graph.as_mut().ok_or_else(|| IrError::StoredModel("the reference has no graph".into()))?;
        for vi in &mut g.input {
            if let Some(t) = self.inputs.iter().map(|&t| self.tensor(t)).find(|t| t.name == vi.name()) {
                *vi = lower::value_info(&t.name, t.dtype, &t.shape);
            }
        }
        Ok(m.encode_to_vec())
    }
}

/// Decode a serialized ONNX `TensorProto` (a `.pb` file of the ONNX test suites) into its name
/// and value.
#[cfg(feature = "onnx")]
pub fn read_tensor(bytes: &[u8]) -> Result<(String, bident_tensor::HostTensor), IrError> {
    use prost::Message;
    let t = proto::TensorProto::decode(bytes)
        .map_err(|e| IrError::BadTensor { tensor: "<file>".into(), reason: e.to_string() })?;
    let v = consts::from_proto(&t).map_err(|reason| IrError::BadTensor { tensor: t.name().into(), reason })?;
    Ok((t.name().to_string(), v))
}

/// Check the invariants every stage relies on: ops in topological order, one producer per
/// tensor, every op input available, outputs produced, ids in range, shapes static.
pub fn verify(g: &FusedGraph) -> Result<(), IrError> {
    let bad = |m: String| Err(IrError::Verify(m));
    let n = g.tensors.len() as u32;
    let mut available = vec![false; g.tensors.len()];
    let mut produced = vec![false; g.tensors.len()];
    for &t in &g.inputs {
        if t >= n {
            return bad(format!("input tensor id {t} out of range"));
        }
        available[t as usize] = true;
        produced[t as usize] = true;
    }
    for (i, op) in g.ops.iter().enumerate() {
        if op.outputs.is_empty() {
            return bad(format!("op {i} `{}` has no outputs", op.name));
        }
        if op.nodes.is_empty() {
            return bad(format!("op {i} `{}` has no nodes", op.name));
        }
        for &t in &op.inputs {
            if t >= n || !available[t as usize] {
                return bad(format!(
                    "op {i} `{}` reads tensor {t} before it is produced (ops not in topological order?)",
                    op.name
                ));
            }
        }
        for &t in &op.outputs {
            if t >= n {
                return bad(format!("op {i} `{}` writes tensor id {t} out of range", op.name));
            }
            if produced[t as usize] {
                return bad(format!("tensor `{}` has two producers", g.tensors[t as usize].name));
            }
            produced[t as usize] = true;
            available[t as usize] = true;
        }
    }
    for &t in &g.outputs {
        if t >= n || !produced[t as usize] {
            return bad(format!("graph output tensor {t} is never produced"));
        }
    }
    Ok(())
}
