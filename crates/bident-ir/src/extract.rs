//! Extraction of fused operators as standalone ONNX models.

use std::collections::{HashMap, HashSet};

use prost::Message;

use crate::lower::value_info;
use crate::proto::{GraphProto, ModelProto, TensorProto};
use crate::{FusedGraph, IrError, OpId, TensorId};

/// An extracted group of ops: ONNX bytes, its inputs and its outputs.
pub type Group = (Vec<u8>, Vec<TensorId>, Vec<TensorId>);

/// Decodes a fused graph's lowered model once, then extracts any number of ops from it.
pub struct Extractor<'g> {
    graph: &'g FusedGraph,
    model: ModelProto,
    initializers: HashMap<String, usize>,
}

impl<'g> Extractor<'g> {
    pub fn new(graph: &'g FusedGraph) -> Result<Self, IrError> {
        let model = graph.decoded_model()?;
        let g = model.graph.as_ref().ok_or_else(|| IrError::StoredModel("no graph".into()))?;
        let initializers = g.initializer.iter().enumerate().map(|(i, t)| (t.name().to_string(), i)).collect();
        Ok(Self { graph, model, initializers })
    }

    /// ONNX bytes of one fused op: its nodes, the constants they read as initializers, the
    /// activations they read as inputs, and the tensors other ops (or the graph) read as outputs.
    pub fn extract(&self, op: OpId) -> Result<Vec<u8>, IrError> {
        let f = self
            .graph
            .ops
            .get(op as usize)
            .ok_or(IrError::NoSuchOp { op: op as usize, count: self.graph.ops.len() })?;
        self.model_of(&f.name, &f.nodes, &f.inputs, &f.outputs)
    }

    /// Several fused ops as one model (the runtime compiles a run of ops planned on one PU
    /// together, so the backend can fuse across them). `ops` must be in a topological order and
    /// closed under paths (no op outside the group lies between two of its ops: a run of
    /// neighbours in an execution order is). Returns the bytes and
    /// the group's inputs (read, not produced inside, first-use order) and outputs (produced
    /// inside and read outside or by the graph).
    pub fn extract_group(&self, ops: &[OpId]) -> Result<Group, IrError> {
        let count = self.graph.ops.len();
        let fs = ops
            .iter()
            .map(|&o| self.graph.ops.get(o as usize).ok_or(IrError::NoSuchOp { op: o as usize, count }))
            .collect::<Result<Vec<_>, _>>()?;
        let produced: HashSet<TensorId> = fs.iter().flat_map(|f| f.outputs.iter().copied()).collect();
        let mut so_far = HashSet::new();
        for (f, &o) in fs.iter().zip(ops) {
            if f.inputs.iter().any(|t| produced.contains(t) && !so_far.contains(t)) {
                return Err(IrError::StoredModel(format!("group {ops:?}: op {o} comes before an op it reads from")));
            }
            so_far.extend(f.outputs.iter().copied());
        }
        let mut inputs = vec![];
        for t in fs.iter().flat_map(|f| f.inputs.iter().copied()) {
            if !produced.contains(&t) && !inputs.contains(&t) {
                inputs.push(t);
            }
        }
        let inside: HashSet<OpId> = ops.iter().copied().collect();
        let read_outside: HashSet<TensorId> = (0..count as OpId)
            .filter(|o| !inside.contains(o))
            .flat_map(|o| self.graph.ops[o as usize].inputs.iter().copied())
            .chain(self.graph.outputs.iter().copied())
            .collect();
        let outputs: Vec<TensorId> =
            fs.iter().flat_map(|f| f.outputs.iter().copied()).filter(|t| read_outside.contains(t)).collect();
        let nodes: Vec<u32> = fs.iter().flat_map(|f| f.nodes.iter().copied()).collect();
        let name = fs.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join("+");
        Ok((self.model_of(&name, &nodes, &inputs, &outputs)?, inputs, outputs))
    }

    fn model_of(
        &self,
        name: &str,
        nodes: &[u32],
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<Vec<u8>, IrError> {
        let g = self.model.graph.as_ref().ok_or_else(|| IrError::StoredModel("no graph".into()))?;
        let mut node = Vec::with_capacity(nodes.len());
        let mut initializer: Vec<TensorProto> = vec![];
        let mut seen = HashSet::new();
        for &i in nodes {
            // a constant-producing node two ops both need is in both
            if !seen.insert(i) {
                continue;
            }
            let n =
                g.node.get(i as usize).ok_or_else(|| IrError::StoredModel(format!("node index {i} out of range")))?;
            // explicit inputs and what control-flow subgraphs read from the outer scope
            for t in &crate::lower::node_uses(n) {
                if let Some(&k) = self.initializers.get(t)
                    && !initializer.iter().any(|x| x.name() == t)
                {
                    initializer.push(g.initializer[k].clone());
                }
            }
            node.push(n.clone());
        }
        let vi = |t: &u32| {
            let t = self.graph.tensor(*t);
            value_info(&t.name, t.dtype, &t.shape)
        };
        let sub = ModelProto {
            ir_version: Some(self.model.ir_version.unwrap_or(8).max(4)),
            opset_import: self.model.opset_import.clone(),
            // model-local functions an op's nodes may call
            functions: self.model.functions.clone(),
            producer_name: Some("bident".into()),
            graph: Some(GraphProto {
                name: Some(name.to_string()),
                node,
                initializer,
                input: inputs.iter().map(vi).collect(),
                output: outputs.iter().map(vi).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(sub.encode_to_vec())
    }
}

/// What a sub-model's time depends on, as bytes to hash: the model with its tensor names
/// replaced by their order of appearance, node and graph names and doc strings cleared, and the
/// data of every initializer over [`IDENTITY_KEEPS`] elements blanked (a Conv's time does not
/// depend on its weights' values; shape tensors, trip counts and other small constants stay).
/// Two fused ops of one model, or of two models, with the same kinds, attributes, shapes and
/// small constants get the same bytes: the profile times one of them. A model with control-flow
/// subgraphs (which read outer names) keeps its bytes as they are.
pub fn timing_identity(model: &[u8]) -> Result<Vec<u8>, IrError> {
    let mut m = ModelProto::decode(model).map_err(|e| IrError::StoredModel(e.to_string()))?;
    let Some(g) = m.graph.as_mut() else { return Ok(model.to_vec()) };
    if g.node.iter().any(|n| n.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty())) {
        return Ok(model.to_vec());
    }
    let mut names: HashMap<String, String> = HashMap::new();
    let mut rename = |name: &mut String| {
        if !name.is_empty() {
            let k = names.len();
            *name = names.entry(std::mem::take(name)).or_insert_with(|| format!("t{k}")).clone();
        }
    };
    for v in &mut g.input {
        v.name.as_mut().map(&mut rename);
    }
    for t in &mut g.initializer {
        t.name.as_mut().map(&mut rename);
        let elements = t.dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d.max(0)));
        if elements.is_none_or(|n| n > IDENTITY_KEEPS) {
            *t = TensorProto {
                dims: std::mem::take(&mut t.dims),
                data_type: t.data_type,
                name: t.name.take(),
                ..Default::default()
            };
        }
    }
    for n in &mut g.node {
        n.input.iter_mut().chain(&mut n.output).for_each(&mut rename);
        n.name = None;
        n.doc_string = None;
    }
    for v in g.output.iter_mut().chain(&mut g.value_info) {
        v.name.as_mut().map(&mut rename);
    }
    g.name = None;
    g.doc_string = None;
    m.doc_string = None;
    m.metadata_props.clear();
    Ok(m.encode_to_vec())
}

/// Initializers of at most this many elements keep their data in [`timing_identity`].
pub const IDENTITY_KEEPS: i64 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn model(weight: f32, name: &str, dims: &[i64]) -> Vec<u8> {
        let extractor_free = crate::proto::ModelProto {
            graph: Some(GraphProto {
                name: Some(format!("op `{name}`")),
                node: vec![crate::proto::NodeProto {
                    name: Some(name.into()),
                    op_type: Some("MatMul".into()),
                    input: vec![format!("{name}.x"), format!("{name}.w")],
                    output: vec![format!("{name}.y")],
                    ..Default::default()
                }],
                initializer: vec![TensorProto {
                    name: Some(format!("{name}.w")),
                    dims: dims.to_vec(),
                    data_type: Some(1),
                    float_data: vec![weight; dims.iter().product::<i64>() as usize],
                    ..Default::default()
                }],
                input: vec![value_info(&format!("{name}.x"), crate::DType::F32, &[1, dims[0] as u64])],
                output: vec![value_info(&format!("{name}.y"), crate::DType::F32, &[1, dims[1] as u64])],
                ..Default::default()
            }),
            ..Default::default()
        };
        extractor_free.encode_to_vec()
    }

    #[test]
    fn same_ops_and_shapes_are_one_identity() {
        let id = |w, name, dims: &[i64]| timing_identity(&model(w, name, dims)).expect("identity");
        // other names and other weights: one identity
        assert_eq!(id(0.5, "a", &[16, 16]), id(-2.0, "b", &[16, 16]));
        // other shapes: another
        assert_ne!(id(0.5, "a", &[16, 16]), id(0.5, "a", &[16, 8]));
        // a small constant keeps its values: another
        assert_ne!(id(0.5, "a", &[4, 4]), id(1.0, "a", &[4, 4]));
        assert!(timing_identity(b"\xff\xff not onnx").is_err());
    }
}
