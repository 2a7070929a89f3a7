//! The checks between the lowering's sub-passes, run in debug builds ([`verify_if`]).

use std::collections::HashMap;

use super::{Fate, Lowering, node_label};
use crate::IrError;

impl Lowering<'_> {
    /// After `boundary`: every input typed as listed, every constant's value of its tensor's
    /// type, every big initializer found where it is recorded.
    pub(super) fn check_boundary(&self) -> Result<(), String> {
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
    pub(super) fn check_order(&self, order: &[usize]) -> Result<(), String> {
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
    pub(super) fn check_fold(&self, fates: &[Fate]) -> Result<(), String> {
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
    pub(super) fn check_dead(&self, fates: &[Fate]) -> Result<(), String> {
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

/// Run the check of sub-pass `pass` in debug builds (as cranelift's `verify_if`): a sub-pass
/// that broke an invariant is caught where it did so, as an error naming it.
pub(super) fn verify_if(pass: &'static str, check: impl FnOnce() -> Result<(), String>) -> Result<(), IrError> {
    if !cfg!(debug_assertions) {
        return Ok(());
    }
    check().map_err(|reason| IrError::SubPass { pass, reason })
}

/// After `group`: every compute node in exactly one group, and nothing else in any.
pub(super) fn check_groups(fates: &[Fate], groups: &[Vec<usize>]) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use bident_tensor::DType;
    use bytes::Bytes;
    use prost::Message;

    use super::*;
    use crate::lower::{ImportOptions, value_info};
    use crate::ops::Fact;
    use crate::proto::OperatorSetIdProto;
    use crate::proto::{GraphProto, ModelProto, NodeProto};

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
