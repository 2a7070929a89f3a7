//! Sub-passes `fused ops` and `fused graph`: each group as a fused op with the tensors it reads
//! and writes and its work, and the lowered model and [`FusedGraph`] around them.

use std::collections::{HashMap, HashSet};

use bident_artifact::{Blob, ContentHash};
use prost::Message;

use super::analyse::tensor_bytes;
use super::{Fate, Lowering, node_label, value_info};
use crate::fusion::FusionInfo;
use crate::ops::{self, Fact, Role};
use crate::proto::{NodeProto, TensorProto};
use crate::{FusedGraph, FusedOp, Source, TensorId, TensorInfo, consts, weights};

impl Lowering<'_> {
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

    /// Sub-pass `fused ops`: each group as a [`FusedOp`] (its nodes with the const-like
    /// producers it needs, the tensors it reads and writes, its work), and the tensors between.
    pub(super) fn fused_ops(&self, order: &[usize], fates: &[Fate], groups: &[Vec<usize>]) -> Ops {
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

        let mut tensors = Tensors::default();
        let inputs: Vec<TensorId> = self.inputs.iter().map(|(n, _)| tensors.id(n, &self.facts)).collect();

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
        let cx = Kept { fates, producer, new_index, graph_outputs, consumer_groups };
        let mut fused_ops = Vec::with_capacity(groups.len());
        let mut used_consts: HashSet<String> = HashSet::new();
        for (g, members) in groups.iter().enumerate() {
            fused_ops.push(self.fused_op(g, members, &cx, &mut tensors, &mut used_consts));
        }
        let outputs: Vec<TensorId> = self.outputs.iter().map(|n| tensors.id(n, &self.facts)).collect();
        Ops { kept, tensors: tensors.tensors, inputs, outputs, ops: fused_ops, used_consts }
    }

    /// Group `g` (its nodes `members`) as a [`FusedOp`]: its nodes with the const-like producers
    /// it needs, the tensors it reads (numbered in `tensors`; the constants among them added to
    /// `used_consts`) and writes, and its work.
    fn fused_op(
        &self,
        g: usize,
        members: &[usize],
        cx: &Kept,
        tensors: &mut Tensors,
        used_consts: &mut HashSet<String>,
    ) -> FusedOp {
        let nodes = &self.graph().node;
        let Kept { fates, producer, new_index, graph_outputs, consumer_groups } = cx;
        // attach the const-like producers this group needs, transitively
        let mut all: Vec<usize> = members.to_vec();
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
                let id = tensors.id(t, &self.facts);
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
                    op_outputs.push(tensors.id(o, &self.facts));
                    output_names.push(o.as_str());
                }
            }
        }
        let anchor_at = members.iter().copied().find(|&i| self.role(&nodes[i]) == Role::Anchor).unwrap_or(members[0]);
        let anchor = &nodes[anchor_at];
        let bytes = |ts: &mut dyn Iterator<Item = &str>| {
            ts.filter_map(|t| self.facts.get(t)).fold(0u64, |a, f| a.saturating_add(tensor_bytes(f)))
        };
        let work = ops::work::group_work(
            &members
                .iter()
                .map(|&i| (self.node_work(&nodes[i], producer), nodes[i].op_type().to_string()))
                .collect::<Vec<_>>(),
            bytes(&mut input_names.into_iter()),
            bytes(&mut group_consts.iter().copied()),
            bytes(&mut output_names.into_iter()),
        );
        FusedOp {
            name: node_label(anchor, anchor_at),
            kind: members.iter().map(|&i| nodes[i].op_type()).collect::<Vec<_>>().join("+"),
            nodes: all.iter().map(|i| new_index[i]).collect(),
            inputs: op_inputs,
            outputs: op_outputs,
            work,
        }
    }

    /// Sub-pass `fused graph`: the lowered model (the kept nodes, the constants they need as
    /// initializers, static boundary types) and the [`FusedGraph`] around it.
    pub(super) fn fused_graph(
        &self,
        name: String,
        file: String,
        hash: ContentHash,
        fusion: FusionInfo,
        ops: Ops,
    ) -> FusedGraph {
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
}

/// The fused ops and the tensors between them, before the lowered model is written.
pub(super) struct Ops {
    /// The nodes the lowered model keeps (compute and const-like), in topological order.
    kept: Vec<usize>,
    tensors: Vec<TensorInfo>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    ops: Vec<FusedOp>,
    /// The constants the fused ops read, by name.
    used_consts: HashSet<String>,
}

/// What [`Lowering::fused_ops`] knows of the kept nodes when it builds each group's op: their
/// fates, the kept node writing each tensor, each kept node's index in the lowered model, the
/// graph's outputs, and the groups reading each tensor.
struct Kept<'a> {
    fates: &'a [Fate],
    producer: HashMap<&'a str, usize>,
    new_index: HashMap<usize, u32>,
    graph_outputs: HashSet<&'a str>,
    consumer_groups: HashMap<&'a str, Vec<usize>>,
}

/// The tensors between fused ops, numbered as they are first met.
#[derive(Default)]
struct Tensors {
    tensors: Vec<TensorInfo>,
    ids: HashMap<String, TensorId>,
}

impl Tensors {
    /// Tensor `name`'s id, numbered now where it is new (`facts`: its type).
    fn id(&mut self, name: &str, facts: &HashMap<String, Fact>) -> TensorId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        // analyse gave every graph input and every produced tensor a fact
        let f = &facts[name];
        let id = self.tensors.len() as TensorId;
        self.tensors.push(TensorInfo { name: name.to_string(), dtype: f.dtype, shape: f.shape.clone() });
        self.ids.insert(name.to_string(), id);
        id
    }
}
