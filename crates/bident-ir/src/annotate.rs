//! The source model with metadata on its nodes: which fused op each node went into, and
//! whatever the caller knows per fused op (a plan's PU and predicted time, for Netron to show).
//!
//! The model is the one bident read ([`FusedGraph::reference`]: external data embedded), so
//! every node the user wrote is there, not the lowered copy. A node is matched to the lowered
//! model by its outputs (names are unique in a graph, and lowering keeps them; an `If` inlined
//! on a constant condition hands its output names to its branch's nodes), and a lowered node to
//! the fused ops that hold it. This module knows nothing of PUs or plans: the caller's pairs are
//! copied as given.

use std::collections::HashMap;

use prost::Message;

use crate::proto::{ModelProto, StringStringEntryProto};
use crate::{FusedGraph, IrError};

/// The key naming a node's fused op (`<index> <name> (<kind>)`), or saying it has none.
pub const FUSED_OP: &str = "bident.fused_op";

/// What [`annotate`] says of a node that is in no fused op: lowering folded it into a
/// constant, or nothing it computes reaches an output.
pub const NO_FUSED_OP: &str = "none (folded into a constant, or unused)";

/// An annotated model's bytes and what was annotated.
pub struct Annotated {
    pub model: Vec<u8>,
    /// Top-level nodes of the source graph.
    pub nodes: usize,
    /// Those in some fused op (the others are [`NO_FUSED_OP`]).
    pub placed: usize,
}

/// The source model of `g` with, on every top-level node, [`FUSED_OP`] and the pairs of its
/// fused op in `per_op` (indexed by op id; a constant node copied into several ops names them
/// all, and each key's values are joined with `, ` in the same order), and `model` on the model
/// itself. Keys already present are
/// replaced; nothing else in the model changes.
pub fn annotate(
    g: &FusedGraph,
    per_op: &[Vec<(String, String)>],
    model: &[(String, String)],
) -> Result<Annotated, IrError> {
    if per_op.len() != g.ops.len() {
        return Err(IrError::Verify(format!("{} ops annotated, the graph has {}", per_op.len(), g.ops.len())));
    }
    let decode = |bytes: &bytes::Bytes, what: &str| {
        ModelProto::decode(bytes.clone()).map_err(|e| IrError::StoredModel(format!("{what}: {e}")))
    };
    let lowered = decode(&g.model.0, "the lowered model")?;
    let mut source = decode(&g.reference.0, "the reference model")?;
    // lowered node -> the fused ops holding it; tensor -> its lowered producer
    let lowered_nodes = lowered.graph.as_ref().map_or(&[][..], |lg| &lg.node[..]);
    let mut ops_of: Vec<Vec<usize>> = vec![vec![]; lowered_nodes.len()];
    for (i, op) in g.ops.iter().enumerate() {
        for &n in &op.nodes {
            let slot = ops_of.get_mut(n as usize).ok_or_else(|| {
                IrError::Verify(format!("fused op {i} `{}` names lowered node {n}, which does not exist", op.name))
            })?;
            slot.push(i);
        }
    }
    let producer: HashMap<&str, usize> = lowered_nodes
        .iter()
        .enumerate()
        .flat_map(|(k, n)| n.output.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), k)))
        .collect();
    let graph = source.graph.as_mut().ok_or_else(|| IrError::StoredModel("the reference has no graph".into()))?;
    let mut placed = 0;
    for node in &mut graph.node {
        let mut ops: Vec<usize> = node
            .output
            .iter()
            .filter_map(|o| producer.get(o.as_str()))
            .flat_map(|&k| ops_of[k].iter().copied())
            .collect();
        ops.sort_unstable();
        ops.dedup();
        let mut pairs: Vec<(String, String)> = vec![];
        if ops.is_empty() {
            pairs.push((FUSED_OP.into(), NO_FUSED_OP.into()));
        } else {
            placed += 1;
            let names: Vec<String> =
                ops.iter().map(|&i| format!("{i} {} ({})", g.ops[i].name, g.ops[i].kind)).collect();
            pairs.push((FUSED_OP.into(), names.join(", ")));
            for &i in &ops {
                for (k, v) in &per_op[i] {
                    match pairs.iter_mut().find(|(pk, _)| pk == k) {
                        Some((_, pv)) => {
                            pv.push_str(", ");
                            pv.push_str(v);
                        }
                        None => pairs.push((k.clone(), v.clone())),
                    }
                }
            }
        }
        set(&mut node.metadata_props, &pairs);
    }
    let nodes = graph.node.len();
    set(&mut source.metadata_props, model);
    Ok(Annotated { model: source.encode_to_vec(), nodes, placed })
}

/// `props` with every key of `pairs` set to its value (replaced where present, appended where not).
fn set(props: &mut Vec<StringStringEntryProto>, pairs: &[(String, String)]) {
    for (k, v) in pairs {
        match props.iter_mut().find(|e| e.key() == k) {
            Some(e) => e.value = Some(v.clone()),
            None => props.push(StringStringEntryProto { key: Some(k.clone()), value: Some(v.clone()) }),
        }
    }
}
