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
