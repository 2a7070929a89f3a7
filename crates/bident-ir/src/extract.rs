//! Extraction of fused operators as standalone ONNX models.

use std::collections::HashMap;

use prost::Message;

use crate::lower::value_info;
use crate::proto::{GraphProto, ModelProto, TensorProto};
use crate::{FusedGraph, IrError, OpId};

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
        let g = self.model.graph.as_ref().ok_or_else(|| IrError::StoredModel("no graph".into()))?;
        let mut node = Vec::with_capacity(f.nodes.len());
        let mut initializer: Vec<TensorProto> = vec![];
        for &i in &f.nodes {
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
                name: Some(f.name.clone()),
                node,
                initializer,
                input: f.inputs.iter().map(vi).collect(),
                output: f.outputs.iter().map(vi).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(sub.encode_to_vec())
    }
}
