//! bident-partition: the phase/branch structure of a fused graph (paper 3.2.2).
//!
//! Walking the ops in topological order, a phase boundary falls after every fork (an op whose
//! outputs feed more than one op) and before every join (an op fed by more than one op). Inside
//! a phase, branches are the weakly connected components of its ops: mutually independent, each
//! run as a sequential chain. Consecutive single-branch phases are merged, so a chain is one
//! phase with one branch.
//!
//! Owns the `PhasedGraph` artifact. Must not: do I/O, or know PUs, costs or backends.

use bident_artifact::{Artifact, ContentHash};
use bident_ir::{FusedGraph, OpId};
use petgraph::unionfind::UnionFind;
use serde::{Deserialize, Serialize};

/// A sequential chain of ops inside a phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    pub ops: Vec<OpId>,
}

/// Ops between two synchronisation points; its branches may run concurrently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    pub branches: Vec<Branch>,
}

/// The phase structure of one fused graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasedGraph {
    pub model: String,
    /// Payload hash of the fused graph this was computed from.
    pub graph: ContentHash,
    pub op_count: u32,
    pub phases: Vec<Phase>,
    /// Producer -> consumer pairs of ops (one per pair, however many tensors), sorted: what a
    /// plan's transfers are charged on.
    pub edges: Vec<(OpId, OpId)>,
    /// Ops that read a graph input (from the host), sorted.
    pub reads_input: Vec<OpId>,
    /// Ops that produce a graph output (to the host), sorted.
    pub writes_output: Vec<OpId>,
}

impl Artifact for PhasedGraph {
    const KIND: &'static str = "phased-graph";
    const SCHEMA_VERSION: u32 = 2;
}

impl PhasedGraph {
    /// All ops in execution order: phase by phase, branch by branch.
    pub fn order(&self) -> Vec<OpId> {
        self.phases.iter().flat_map(|p| p.branches.iter().flat_map(|b| b.ops.iter().copied())).collect()
    }

    /// Consecutive ops of the execution order, `(op, the op after it)`: what the runtime may
    /// compile together when a plan puts both on one PU, and whose merged cost the profiler
    /// measures.
    pub fn neighbours(&self) -> Vec<(OpId, OpId)> {
        self.order().windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// Phases with more than one branch.
    pub fn parallel_phases(&self) -> usize {
        self.phases.iter().filter(|p| p.branches.len() > 1).count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("phased graph does not match its fused graph: {0}")]
    Mismatch(String),
    #[error(transparent)]
    Ir(#[from] bident_ir::IrError),
}

/// A partition pass, selectable by name (`--partition NAME`): fused graph in, phased graph out.
/// The driver runs [`verify`] on whatever a pass returns.
pub trait PartitionPass: Send + Sync {
    /// The name it is selected by.
    fn name(&self) -> &str;
    /// One line saying what it does.
    fn about(&self) -> &str;
    fn partition(&self, g: &FusedGraph) -> Result<PhasedGraph, PartitionError>;
}

/// The paper's phases and branches ([`partition`]).
pub struct Phases;

impl PartitionPass for Phases {
    fn name(&self) -> &str {
        "phases"
    }
    fn about(&self) -> &str {
        "the paper's phases (a boundary after every fork and before every join) and branches (components)"
    }
    fn partition(&self, g: &FusedGraph) -> Result<PhasedGraph, PartitionError> {
        partition(g)
    }
}

/// One phase of one branch in topological order: no op overlaps another, whatever the mode.
pub struct Chain;

impl PartitionPass for Chain {
    fn name(&self) -> &str {
        "chain"
    }
    fn about(&self) -> &str {
        "the whole graph as one chain in topological order (no parallel branches)"
    }
    fn partition(&self, g: &FusedGraph) -> Result<PhasedGraph, PartitionError> {
        let ops: Vec<OpId> = (0..g.ops.len() as OpId).collect();
        phased(g, vec![Phase { branches: vec![Branch { ops }] }])
    }
}

/// The partition passes bident ships, the default first.
pub fn builtin() -> Vec<Box<dyn PartitionPass>> {
    vec![Box::new(Phases), Box::new(Chain)]
}

/// Partition a fused graph into phases and branches.
pub fn partition(g: &FusedGraph) -> Result<PhasedGraph, PartitionError> {
    let n = g.ops.len();
    let edges = g.edges();
    let mut consumers: Vec<Vec<OpId>> = vec![vec![]; n];
    let mut producers: Vec<Vec<OpId>> = vec![vec![]; n];
    for &(p, c, _) in &edges {
        if !consumers[p as usize].contains(&c) {
            consumers[p as usize].push(c);
        }
        if !producers[c as usize].contains(&p) {
            producers[c as usize].push(p);
        }
    }
    // segments of the topological order between fork/join boundaries
    let mut segments: Vec<Vec<OpId>> = vec![];
    let mut current: Vec<OpId> = vec![];
    for i in 0..n {
        if producers[i].len() > 1 && !current.is_empty() {
            segments.push(std::mem::take(&mut current));
        }
        current.push(i as OpId);
        if consumers[i].len() > 1 {
            segments.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    let mut phases: Vec<Phase> = vec![];
    for seg in segments {
        // components restricted to the segment: union only edges inside it
        let mut local = UnionFind::<usize>::new(seg.len());
        let index: std::collections::HashMap<OpId, usize> = seg.iter().enumerate().map(|(k, &o)| (o, k)).collect();
        let pos = |op: OpId| index.get(&op).copied();
        for (k, &op) in seg.iter().enumerate() {
            for &c in &consumers[op as usize] {
                if let Some(j) = pos(c) {
                    local.union(k, j);
                }
            }
        }
        let mut branches: Vec<Branch> = vec![];
        let mut root_of: Vec<(usize, usize)> = vec![];
        for (k, &op) in seg.iter().enumerate() {
            let r = local.find(k);
            match root_of.iter().find(|(root, _)| *root == r) {
                Some(&(_, b)) => branches[b].ops.push(op),
                None => {
                    root_of.push((r, branches.len()));
                    branches.push(Branch { ops: vec![op] });
                }
            }
        }
        let sequential = branches.len() == 1;
        match phases.last_mut() {
            Some(last) if sequential && last.branches.len() == 1 => last.branches[0].ops.extend(branches.remove(0).ops),
            _ => phases.push(Phase { branches }),
        }
    }
    phased(g, phases)
}

/// The phased graph of `g` with these phases (checked).
fn phased(g: &FusedGraph, phases: Vec<Phase>) -> Result<PhasedGraph, PartitionError> {
    let (edges, reads_input, writes_output) = dataflow(g);
    let out = PhasedGraph {
        model: g.name.clone(),
        graph: g.content_hash()?,
        op_count: g.ops.len() as u32,
        phases,
        edges,
        reads_input,
        writes_output,
    };
    verify(g, &out)?;
    Ok(out)
}

/// The op-level dataflow of `g`: distinct producer -> consumer pairs, the ops reading graph
/// inputs and the ops producing graph outputs (each sorted).
fn dataflow(g: &FusedGraph) -> (Vec<(OpId, OpId)>, Vec<OpId>, Vec<OpId>) {
    let mut edges: Vec<(OpId, OpId)> = g.edges().into_iter().map(|(p, c, _)| (p, c)).collect();
    edges.sort_unstable();
    edges.dedup();
    let reads: Vec<OpId> =
        (0..g.ops.len() as OpId).filter(|&i| g.ops[i as usize].inputs.iter().any(|t| g.inputs.contains(t))).collect();
    let writes: Vec<OpId> =
        (0..g.ops.len() as OpId).filter(|&i| g.ops[i as usize].outputs.iter().any(|t| g.outputs.contains(t))).collect();
    (edges, reads, writes)
}

/// Every op in exactly one branch; each op's producers are in an earlier phase or earlier in
/// its own branch (so branches of a phase are independent and phases are in dependency order).
pub fn verify(g: &FusedGraph, p: &PhasedGraph) -> Result<(), PartitionError> {
    let bad = |m: String| Err(PartitionError::Mismatch(m));
    let n = g.ops.len();
    if p.op_count as usize != n {
        return bad(format!("{} ops in the phased graph, {n} in the fused graph", p.op_count));
    }
    if (p.edges.clone(), p.reads_input.clone(), p.writes_output.clone()) != dataflow(g) {
        return bad("its edges, input readers or output writers differ from the fused graph's".into());
    }
    // (phase, branch, position) of every op
    let mut place: Vec<Option<(usize, usize, usize)>> = vec![None; n];
    for (pi, phase) in p.phases.iter().enumerate() {
        if phase.branches.is_empty() {
            return bad(format!("phase {pi} has no branches"));
        }
        for (bi, b) in phase.branches.iter().enumerate() {
            if b.ops.is_empty() {
                return bad(format!("phase {pi} branch {bi} is empty"));
            }
            for (k, &op) in b.ops.iter().enumerate() {
                let slot = place
                    .get_mut(op as usize)
                    .ok_or_else(|| PartitionError::Mismatch(format!("op {op} out of range")))?;
                if slot.is_some() {
                    return bad(format!("op {op} is in two branches"));
                }
                *slot = Some((pi, bi, k));
            }
        }
    }
    if let Some(op) = place.iter().position(Option::is_none) {
        return bad(format!("op {op} `{}` is in no branch", g.ops[op].name));
    }
    for (prod, cons, _) in g.edges() {
        let (pp, pb, pk) = place[prod as usize].unwrap_or_default();
        let (cp, cb, ck) = place[cons as usize].unwrap_or_default();
        let ok = pp < cp || (pp == cp && pb == cb && pk < ck);
        if !ok {
            return bad(format!(
                "op {cons} `{}` depends on op {prod} `{}` but does not come after it (phase {pp} branch {pb} -> phase {cp} branch {cb})",
                g.ops[cons as usize].name, g.ops[prod as usize].name
            ));
        }
    }
    Ok(())
}
