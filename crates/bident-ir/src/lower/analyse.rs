//! Sub-passes `order`, `fold` and `dead`: what each node reads, the nodes in topological order,
//! shape inference and constant folding node by node, and the nodes nothing needs.

use std::collections::{HashMap, HashSet};

use bident_tensor::{DType, HostTensor};

use super::{Fate, Lowering, node_label};
use crate::ops::{self, Ctx, Fact};
use crate::proto::{GraphProto, NodeProto};
use crate::{IrError, consts};

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

/// Largest tensor bident accepts (16 GiB): a larger one is a malformed or mis-pinned model.
const MAX_TENSOR_BYTES: u64 = 1 << 34;

pub(super) fn tensor_bytes(f: &Fact) -> u64 {
    bident_tensor::numel(&f.shape).saturating_mul(f.dtype.size() as u64)
}

impl Lowering<'_> {
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

    /// Topological order of the nodes, after checking producers.
    pub(super) fn topo_order(&mut self) -> Result<Vec<usize>, IrError> {
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
    pub(super) fn analyse(&mut self, order: &[usize]) -> Result<Option<Vec<Fate>>, IrError> {
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
                self.inline_if(graph, i, cond, label)?;
                return Ok(None);
            }
            let rule = ops::lookup(n.domain(), n.op_type());
            let all_values = self.uses[i].iter().all(|t| self.is_value(t));
            let all_const = self.uses[i].iter().all(|t| self.is_value(t) || const_like.contains(t));
            // a node that might fold reads its big initializers (only for as long as it takes)
            let read = if all_values { self.read_big(&graph, &present)? } else { HashMap::new() };
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
            let facts = self.infer_facts(&ctx, rule, &present, &label)?;
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

    /// An If on a constant condition (`cond`) at node `i` of `graph`: replaced by its taken
    /// branch, whose initializers are added, and `graph` put back for the sub-passes to start
    /// over.
    fn inline_if(&mut self, mut graph: GraphProto, i: usize, cond: bool, label: String) -> Result<(), IrError> {
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
        Ok(())
    }

    /// The big initializers a node reads (`present`: its inputs), read from `graph`.
    fn read_big<'g>(
        &self,
        graph: &GraphProto,
        present: &[Option<&'g str>],
    ) -> Result<HashMap<&'g str, HostTensor>, IrError> {
        let mut read: HashMap<&str, HostTensor> = HashMap::new();
        for t in present.iter().flatten() {
            if let Some(&k) = self.big.get(*t) {
                let v = consts::from_proto(&graph.initializer[k])
                    .map_err(|reason| IrError::BadTensor { tensor: t.to_string(), reason })?;
                read.insert(t, v);
            }
        }
        Ok(read)
    }

    /// The types of a node's outputs (`ctx.node`, labelled `label`, whose inputs are `present`):
    /// by its `rule`, else inside its untyped subgraphs; as declared where the registry lacks
    /// its op.
    fn infer_facts(
        &self,
        ctx: &Ctx,
        rule: Option<&ops::OpDef>,
        present: &[Option<&str>],
        label: &str,
    ) -> Result<Vec<Fact>, IrError> {
        let n = ctx.node;
        let err = |reason: String| IrError::Shape { node: label.to_string(), op: n.op_type().into(), reason };
        match rule {
            Some(def) => {
                (def.infer)(ctx).or_else(|reason| self.infer_untyped_subgraphs(n, ctx, reason)).map_err(|reason| {
                    match ctx.missing_const.get().and_then(|k| present.get(k).copied().flatten()) {
                        Some(t) => IrError::NeedsValue {
                            node: label.to_string(),
                            op: n.op_type().into(),
                            tensor: t.to_string(),
                            hint: if self.inputs.iter().any(|(name, _)| name == t) {
                                "it is a graph input: pin its value (--input-value NAME=V,...)".to_string()
                            } else {
                                "it is computed from run-time data".into()
                            },
                        },
                        None => err(reason),
                    }
                })
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
                        node: label.to_string(),
                        domain: if n.domain().is_empty() { "ai.onnx".into() } else { n.domain().into() },
                        op: n.op_type().into(),
                        tensor: o.clone(),
                    })
                })
                .collect::<Result<_, _>>(),
        }
    }

    /// Sub-pass `dead`: the nodes none of whose outputs reach a graph output are dead.
    pub(super) fn mark_dead(&self, order: &[usize], fates: &mut [Fate]) {
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
}
