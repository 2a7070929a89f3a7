//! Sub-pass `group`: compute nodes grouped into fused ops, by bident's fusion rules (an anchor,
//! its affine successors and one activation, possibly written out in several nodes) or by a
//! backend's record.

use std::collections::{HashMap, HashSet};

use super::{Fate, Lowering};
use crate::fusion::{self, Fusion, FusionInfo, NodeView};
use crate::ops::{self, Role};
use crate::proto::NodeProto;

impl Lowering<'_> {
    pub(super) fn role(&self, n: &NodeProto) -> Role {
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

    /// Sub-pass `group`: the compute nodes grouped into fused ops, by the rules or by a
    /// backend's record (with how far the two agree).
    pub(super) fn group(&self, order: &[usize], fates: &[Fate]) -> (Vec<Vec<usize>>, FusionInfo) {
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
