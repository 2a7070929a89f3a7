//! Inlining an `If` whose condition is a known constant (an input pinned with
//! `--input-value`, or a condition that folds): the taken branch replaces the node. This is the
//! one case where inlining a control-flow node is exact; every other If/Loop/Scan stays whole.

use std::collections::{HashMap, HashSet};

use crate::proto::{GraphProto, NodeProto};

/// Replace `graph.node[at]` (an `If`) by the nodes of the branch `cond` selects. Branch-local
/// names that clash with the enclosing graph's are renamed; the branch's outputs take the If's
/// output names. The branch's initializers are appended to the graph's; returns how many.
pub(crate) fn inline_if(graph: &mut GraphProto, at: usize, cond: bool) -> Result<usize, String> {
    let node = graph.node[at].clone();
    let key = if cond { "then_branch" } else { "else_branch" };
    let branch = node
        .attribute
        .iter()
        .find(|a| a.name() == key)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| format!("attribute `{key}` (a graph) is missing"))?
        .clone();
    if branch.output.len() != node.output.len() {
        return Err(format!("{key} has {} outputs, the If has {}", branch.output.len(), node.output.len()));
    }

    let mut taken: HashSet<String> = names_defined(graph);
    taken.extend(graph.node.iter().flat_map(|n| n.input.iter().cloned()));
    let local: Vec<String> = branch
        .initializer
        .iter()
        .map(|t| t.name().to_string())
        .chain(branch.node.iter().flat_map(|n| n.output.iter().filter(|o| !o.is_empty()).cloned()))
        .collect();
    let produced: HashSet<&str> =
        branch.node.iter().flat_map(|n| n.output.iter().map(String::as_str)).filter(|o| !o.is_empty()).collect();

    // each branch output produced by a branch node takes the If's output name directly
    let mut rename: HashMap<String, String> = HashMap::new();
    let mut identities = vec![];
    for (out, want) in branch.output.iter().zip(&node.output) {
        if want.is_empty() {
            continue;
        }
        let direct = produced.contains(out.name())
            && !rename.contains_key(out.name())
            && branch.output.iter().filter(|o| o.name() == out.name()).count() == 1;
        if direct {
            rename.insert(out.name().to_string(), want.clone());
        } else {
            identities.push((out.name().to_string(), want.clone()));
        }
    }
    let prefix =
        if node.name().is_empty() { node.output.first().cloned().unwrap_or_default() } else { node.name().into() };
    for name in &local {
        if rename.contains_key(name) || !taken.contains(name) {
            continue;
        }
        let mut k = 0;
        let fresh = loop {
            let f = format!("{prefix}/{name}{}", if k == 0 { String::new() } else { format!("_{k}") });
            if !taken.contains(&f) && !local.contains(&f) {
                break f;
            }
            k += 1;
        };
        taken.insert(fresh.clone());
        rename.insert(name.clone(), fresh);
    }

    let mut body = branch;
    apply(&mut body, &rename, &HashSet::new());
    for t in &mut body.initializer {
        if let Some(n) = rename.get(t.name()) {
            t.name = Some(n.clone());
        }
    }
    let mut nodes = body.node;
    for (from, to) in identities {
        let from = rename.get(&from).cloned().unwrap_or(from);
        nodes.push(NodeProto {
            input: vec![from],
            output: vec![to.clone()],
            name: Some(format!("{prefix}/output:{to}")),
            op_type: Some("Identity".into()),
            ..Default::default()
        });
    }
    graph.node.splice(at..=at, nodes);
    let added = body.initializer.len();
    graph.initializer.extend(body.initializer);
    Ok(added)
}

/// Names a graph defines: inputs, initializers, node outputs.
fn names_defined(g: &GraphProto) -> HashSet<String> {
    g.input
        .iter()
        .map(|v| v.name().to_string())
        .chain(g.initializer.iter().map(|t| t.name().to_string()))
        .chain(g.node.iter().flat_map(|n| n.output.iter().filter(|o| !o.is_empty()).cloned()))
        .collect()
}

/// Rename references and definitions in `g` (recursively into subgraphs, where a name the
/// subgraph defines itself shadows the outer one).
fn apply(g: &mut GraphProto, rename: &HashMap<String, String>, shadowed: &HashSet<String>) {
    let get = |n: &str| if shadowed.contains(n) { None } else { rename.get(n).cloned() };
    for n in &mut g.node {
        for t in n.input.iter_mut().chain(n.output.iter_mut()) {
            if let Some(r) = get(t) {
                *t = r;
            }
        }
        for a in &mut n.attribute {
            for sub in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                let mut inner = shadowed.clone();
                inner.extend(names_defined(sub));
                apply(sub, rename, &inner);
            }
        }
    }
    for o in &mut g.output {
        if let Some(r) = get(o.name()) {
            o.name = Some(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AttributeProto, ValueInfoProto};

    fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            name: Some(name.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn out(name: &str) -> ValueInfoProto {
        ValueInfoProto { name: Some(name.into()), ..Default::default() }
    }

    /// The taken branch replaces the If; its output takes the If's output name; a branch-local
    /// name that clashes with the outer graph is renamed; an output that is an outer tensor
    /// goes through an Identity.
    #[test]
    fn taken_branch_replaces_the_if() {
        let then_g = GraphProto {
            node: vec![node("Relu", "r", &["x"], &["t"]), node("Neg", "n", &["t"], &["y_then"])],
            output: vec![out("y_then"), out("x")],
            ..Default::default()
        };
        let else_g = GraphProto { output: vec![out("x"), out("x")], ..Default::default() };
        let mut if_node = node("If", "if", &["c"], &["y", "z"]);
        if_node.attribute = vec![
            AttributeProto { name: Some("then_branch".into()), g: Some(then_g), ..Default::default() },
            AttributeProto { name: Some("else_branch".into()), g: Some(else_g), ..Default::default() },
        ];
        let mut g = GraphProto {
            node: vec![node("Abs", "a", &["in"], &["t"]), if_node, node("Add", "s", &["y", "z"], &["o"])],
            ..Default::default()
        };
        inline_if(&mut g, 1, true).unwrap();
        let ops: Vec<(String, Vec<String>, Vec<String>)> =
            g.node.iter().map(|n| (n.op_type().to_string(), n.input.clone(), n.output.clone())).collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ops,
            [
                ("Abs".into(), s(&["in"]), s(&["t"])),
                ("Relu".into(), s(&["x"]), s(&["if/t"])),
                ("Neg".into(), s(&["if/t"]), s(&["y"])),
                ("Identity".into(), s(&["x"]), s(&["z"])),
                ("Add".into(), s(&["y", "z"]), s(&["o"])),
            ]
        );
    }
}
