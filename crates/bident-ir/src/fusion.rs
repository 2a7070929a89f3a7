//! The two fusion sources: bident's own rules (in `lower/group.rs`) and the backend's grouping,
//! derived here from a whole-model profile, plus how far the two agree.
//!
//! Backend-true fusion follows the paper: compile the whole model on a reference PU with
//! profiling on and group the ONNX nodes the way the backend fused them. The profile names each
//! layer after one original node (sometimes with a suffix such as `/WithoutBiases`, sometimes
//! after a node the backend made up, such as `Multiply_3815` for a Conv with a BatchNorm folded
//! in), lists the nodes fused into it, and omits nodes that were folded away entirely. So:
//!
//! 1. every name of a layer (its own and its fused nodes') is resolved to a compute node: by node
//!    name, then by output tensor name, then again with trailing `/suffix` segments dropped;
//! 2. nodes resolved to one layer form a group; a node resolved to several layers merges them;
//! 3. a layer of a type that computes a Conv or MatMul ([`ANCHOR_LAYER_TYPES`]) but whose group
//!    holds no such node was renamed by the backend: the nearest unnamed Conv/MatMul upstream of
//!    its nodes joins it, with the unnamed nodes on the way (a Conv's BatchNorm folded into its
//!    weights); any Conv/MatMul still unnamed then starts a group of its own;
//! 4. a node no layer names joins its neighbours along the data path: a layout op (Transpose,
//!    Reshape, ...) the group all its consumers are in (the kernel reading it absorbed it); any
//!    other node the group all its producers are in (post-ops: bias, scale, activation), else the
//!    group all its consumers are in;
//!    repeated until nothing changes, and what is left stands alone. Both moves keep a group
//!    convex (no path leaves it and comes back);
//! 5. a group that still is not convex (names resolved against the data flow) is split into its
//!    nodes, and the split is counted in the report.
//!
//! Checked against OpenVINO's own record of fused nodes (`originalLayersNames`, which only its
//! C++/Python API exposes) by [`check_against_record`], on every third-party model in CI: see
//! ARCHITECTURE.md.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

/// One layer of a backend's whole-model profile (see `bident_backend::Layer`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendLayer {
    pub name: String,
    /// The backend's layer type, for the report (e.g. `Convolution`, `Reorder`).
    pub layer_type: String,
    /// Names of the nodes fused into this layer.
    pub fused: Vec<String>,
}

/// Which grouping an import uses (`--fusion rules|backend`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Fusion {
    /// bident's rules: an anchor (Conv, MatMul, ...) absorbs single-consumer affine ops with
    /// constant operands, then one activation.
    #[default]
    Rules,
    /// The backend's grouping, from the profile of the whole lowered model on `pu`.
    Backend { pu: String, layers: Vec<BackendLayer> },
}

/// How the fused graph was grouped, recorded in the artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusionInfo {
    /// `rules` or `backend`.
    pub source: String,
    /// Fused ops the rules give.
    pub rule_ops: u32,
    /// Present for backend fusion: the backend's grouping and its agreement with the rules.
    pub backend: Option<BackendFusion>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendFusion {
    /// The reference PU that was profiled.
    pub pu: String,
    /// Layers in the profile.
    pub layers: u32,
    /// Fused ops the backend's grouping gives.
    pub ops: u32,
    /// Groups (as sets of compute nodes) the two fusion sources both form.
    pub identical: u32,
    /// `identical / |rule groups ∪ backend groups|`: 1.0 when the groupings are the same.
    pub agreement: f64,
    /// Layers none of whose names resolved to a node (`name (type)`), e.g. layout reorders the
    /// backend inserted.
    pub unresolved: Vec<String>,
    /// Groups split into single nodes because they were not convex.
    pub split: u32,
}

/// Layer types (OpenVINO CPU plugin) that compute a Conv, ConvTranspose, MatMul or Gemm.
pub const ANCHOR_LAYER_TYPES: &[&str] =
    &["Convolution", "GroupConvolution", "Deconvolution", "FullyConnected", "MatMul", "Gemm"];

/// Nodes by the names a backend reports for them: a node's own name or one of its outputs',
/// or either with trailing `/suffix` segments dropped (`conv_1/WithoutBiases`).
struct NameIndex<'a> {
    by_name: HashMap<&'a str, usize>,
    by_output: HashMap<&'a str, usize>,
}

impl<'a> NameIndex<'a> {
    fn new(nodes: impl Iterator<Item = (usize, &'a str, &'a [String])>) -> Self {
        let (mut by_name, mut by_output) = (HashMap::new(), HashMap::new());
        for (i, name, outputs) in nodes {
            if !name.is_empty() {
                by_name.entry(name).or_insert(i);
            }
            for o in outputs.iter().filter(|o| !o.is_empty()) {
                by_output.insert(o.as_str(), i);
            }
        }
        Self { by_name, by_output }
    }

    fn resolve(&self, name: &str) -> Option<usize> {
        let mut n = name;
        loop {
            if let Some(&i) = self.by_name.get(n).or_else(|| self.by_output.get(n)) {
                return Some(i);
            }
            n = &n[..n.rfind('/').filter(|&k| k > 0)?];
        }
    }
}

/// A fused graph's grouping against a backend's own record of the nodes each executed layer
/// holds (OpenVINO's `originalLayersNames`, which only its C++ and Python APIs expose).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCheck {
    /// Recorded layers whose names resolve to at least one compute node (distinct node sets).
    pub layers: u32,
    /// Of those, the layers whose nodes are exactly the nodes of one fused op, among the nodes
    /// the record names at all.
    pub reproduced: u32,
}

/// Compare `g`'s fused ops with `record` (per executed layer, the names of the ONNX nodes in
/// it). Names resolve as in the backend-fusion derivation; nodes no layer names (constants
/// folded away, nodes the backend renamed) are left out of the comparison.
#[cfg(feature = "onnx")]
pub fn check_against_record(g: &crate::FusedGraph, record: &[Vec<String>]) -> Result<RecordCheck, crate::IrError> {
    let model = g.decoded_model()?;
    let nodes = model.graph.map(|gr| gr.node).unwrap_or_default();
    // each node's fused op; nodes in several ops (copied constants) take no part
    let mut op_of: HashMap<usize, Option<usize>> = HashMap::new();
    for (k, op) in g.ops.iter().enumerate() {
        for &n in &op.nodes {
            op_of.entry(n as usize).and_modify(|o| *o = None).or_insert(Some(k));
        }
    }
    let op_of: HashMap<usize, usize> = op_of.into_iter().filter_map(|(n, o)| Some((n, o?))).collect();
    let index = NameIndex::new(
        nodes.iter().enumerate().filter(|(i, _)| op_of.contains_key(i)).map(|(i, n)| (i, n.name(), &n.output[..])),
    );
    let mut layers: Vec<BTreeSet<usize>> = record
        .iter()
        .map(|names| names.iter().filter_map(|n| index.resolve(n)).collect::<BTreeSet<_>>())
        .filter(|s| !s.is_empty())
        .collect();
    layers.sort();
    layers.dedup();
    let named: BTreeSet<usize> = layers.iter().flatten().copied().collect();
    let reproduced = layers
        .iter()
        .filter(|layer| {
            let ops: BTreeSet<usize> = layer.iter().map(|n| op_of[n]).collect();
            let [op] = ops.into_iter().collect::<Vec<_>>()[..] else { return false };
            named.iter().filter(|n| op_of[n] == op).eq(layer.iter())
        })
        .count();
    Ok(RecordCheck { layers: layers.len() as u32, reproduced: reproduced as u32 })
}

/// What the derivation needs to know of one node of the lowered graph.
pub(crate) struct NodeView<'a> {
    pub name: &'a str,
    pub outputs: &'a [String],
    /// Every tensor it reads (explicit inputs and outer-scope references).
    pub uses: &'a [String],
    /// False for nodes that only compute constants; those follow their consumers elsewhere.
    pub compute: bool,
    /// A Conv, ConvTranspose, MatMul or Gemm (fusion role anchor).
    pub anchor: bool,
    /// Only moves data (Transpose, Reshape, Squeeze, ...).
    pub layout: bool,
}

pub(crate) struct Derived {
    /// Groups of compute nodes, in topological order, each in topological order.
    pub groups: Vec<Vec<usize>>,
    pub unresolved: Vec<String>,
    pub split: u32,
}

/// Group the compute nodes of `nodes` (visited in the topological `order`) as `layers` say.
pub(crate) fn derive(nodes: &[NodeView], order: &[usize], layers: &[BackendLayer]) -> Derived {
    let pos: HashMap<usize, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let compute: Vec<usize> = order.iter().copied().filter(|&i| nodes[i].compute).collect();
    let (group, unresolved) = claim(nodes, &compute, layers);
    let (producers, consumers) = dataflow(nodes, &compute);
    let mut g = Grouping { nodes, pos, compute, producers, consumers, group, next_group: layers.len() };
    g.adopt_renamed_anchors(layers);
    g.absorb_unnamed();
    g.order(unresolved)
}

/// Steps 1-2: each compute node to the layer that names it, layers that claim the same node
/// merged (union-find over layers); and the layers that resolved to no node.
fn claim(nodes: &[NodeView], compute: &[usize], layers: &[BackendLayer]) -> (HashMap<usize, usize>, Vec<String>) {
    let names = NameIndex::new(compute.iter().map(|&i| (i, nodes[i].name, nodes[i].outputs)));
    let resolve = |name: &str| names.resolve(name);
    let mut parent: Vec<usize> = (0..layers.len()).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut layer_of: HashMap<usize, usize> = HashMap::new();
    let mut unresolved = vec![];
    for (l, layer) in layers.iter().enumerate() {
        let mut any = false;
        for name in std::iter::once(&layer.name).chain(&layer.fused) {
            let Some(i) = resolve(name) else { continue };
            any = true;
            match layer_of.get(&i) {
                Some(&other) => {
                    let (a, b) = (root(&mut parent, other), root(&mut parent, l));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    layer_of.insert(i, l);
                }
            }
        }
        if !any {
            unresolved.push(format!("{} ({})", layer.name, layer.layer_type));
        }
    }
    let group = layer_of.iter().map(|(&i, &l)| (i, root(&mut parent, l))).collect();
    (group, unresolved)
}

/// Each compute node's producers and consumers among the compute nodes.
type Edges = HashMap<usize, Vec<usize>>;

fn dataflow(nodes: &[NodeView], compute: &[usize]) -> (Edges, Edges) {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for &i in compute {
        for o in nodes[i].outputs.iter().filter(|o| !o.is_empty()) {
            producer.insert(o, i);
        }
    }
    let producers: Edges = compute
        .iter()
        .map(|&i| (i, nodes[i].uses.iter().filter_map(|t| producer.get(t.as_str()).copied()).collect()))
        .collect();
    let mut consumers: Edges = HashMap::new();
    for (&c, ps) in &producers {
        for &p in ps {
            consumers.entry(p).or_default().push(c);
        }
    }
    (producers, consumers)
}

/// The derivation's state from step 3 on: the data flow and each compute node's group so far.
struct Grouping<'n, 'a> {
    nodes: &'n [NodeView<'a>],
    pos: HashMap<usize, usize>,
    compute: Vec<usize>,
    producers: Edges,
    consumers: Edges,
    group: HashMap<usize, usize>,
    /// The last id handed to a group no layer made.
    next_group: usize,
}

impl Grouping<'_, '_> {
    /// Step 3: a layer renamed by the backend takes the nearest unnamed anchor upstream; an
    /// anchor still unnamed starts a group of its own.
    fn adopt_renamed_anchors(&mut self, layers: &[BackendLayer]) {
        let Self { nodes, pos, compute, producers, consumers, group, next_group } = self;
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        for &i in compute.iter() {
            if let Some(&g) = group.get(&i) {
                members.entry(g).or_default().push(i);
            }
        }
        let mut roots: Vec<usize> = members.keys().copied().collect();
        roots.sort_unstable();
        for g in roots {
            if !ANCHOR_LAYER_TYPES.contains(&layers[g].layer_type.as_str())
                || members[&g].iter().any(|&i| nodes[i].anchor)
            {
                continue;
            }
            // breadth-first upstream through unnamed nodes (`via`: the nodes seen). Of the
            // nearest unnamed anchors, the one executed last is the backend's usual choice (a
            // residual Add fuses into the conv that finishes last); a candidate that would make the
            // group non-convex is passed over.
            let mut via: HashMap<usize, usize> = HashMap::new();
            let mut depth: HashMap<usize, usize> = HashMap::new();
            let mut queue: VecDeque<usize> = members[&g].iter().copied().collect();
            let mut candidates = vec![];
            while let Some(n) = queue.pop_front() {
                for &p in &producers[&n] {
                    if group.contains_key(&p) || via.contains_key(&p) {
                        continue;
                    }
                    via.insert(p, n);
                    let d = depth.get(&n).map_or(1, |d| d + 1);
                    depth.insert(p, d);
                    if nodes[p].anchor {
                        candidates.push((d, Reverse(pos[&p]), p));
                    } else {
                        queue.push_back(p);
                    }
                }
            }
            candidates.sort_unstable();
            for (_, _, anchor) in candidates {
                // every unnamed node on some path from the anchor to the layer's nodes
                let mut path = vec![anchor];
                let mut k = 0;
                while k < path.len() {
                    for &c in consumers.get(&path[k]).map_or(&[][..], Vec::as_slice) {
                        if via.contains_key(&c) && !group.contains_key(&c) && !path.contains(&c) {
                            path.push(c);
                        }
                    }
                    k += 1;
                }
                for &i in &path {
                    group.insert(i, g);
                }
                let all: Vec<usize> = members[&g].iter().chain(&path).copied().collect();
                if convex(&all, group, consumers, pos) {
                    break;
                }
                for i in path {
                    group.remove(&i);
                }
            }
        }
        for &i in compute.iter() {
            if nodes[i].anchor && !group.contains_key(&i) {
                *next_group += 1;
                group.insert(i, *next_group);
            }
        }
    }

    /// Step 4: nodes no layer names join a neighbouring group along the data path; what is left
    /// stands alone.
    fn absorb_unnamed(&mut self) {
        let Self { nodes, compute, producers, consumers, group, next_group, .. } = self;
        let same = |group: &HashMap<usize, usize>, of: &[usize]| -> Option<usize> {
            let gs: HashSet<Option<usize>> = of.iter().map(|n| group.get(n).copied()).collect();
            match gs.into_iter().collect::<Vec<_>>()[..] {
                [Some(g)] => Some(g),
                _ => None,
            }
        };
        loop {
            let mut changed = false;
            let downstream = |i: usize| consumers.get(&i).map_or(&[][..], Vec::as_slice);
            // layout ops first go with their consumers (the backend folds them into the kernel
            // that reads them), everything else first with its producers (post-ops)
            for &i in compute.iter().rev() {
                if nodes[i].layout
                    && !group.contains_key(&i)
                    && let Some(g) = same(group, downstream(i))
                {
                    group.insert(i, g);
                    changed = true;
                }
            }
            for &i in compute.iter() {
                if !group.contains_key(&i)
                    && let Some(g) = same(group, &producers[&i])
                {
                    group.insert(i, g);
                    changed = true;
                }
            }
            for &i in compute.iter().rev() {
                if !group.contains_key(&i)
                    && let Some(g) = same(group, downstream(i))
                {
                    group.insert(i, g);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for &i in compute.iter() {
            group.entry(i).or_insert_with(|| {
                *next_group += 1;
                *next_group
            });
        }
    }

    /// Step 5: order the groups; split those on a cycle of the quotient graph and try again.
    fn order(mut self, unresolved: Vec<String>) -> Derived {
        let mut split = 0;
        loop {
            match order_groups(&self.compute, &self.group, &self.producers, &self.pos) {
                Ok(groups) => return Derived { groups, unresolved, split },
                Err(cyclic) => split += self.split_cycle(cyclic),
            }
        }
    }

    /// Split the groups a path leaves and re-enters; if none (convex groups can still form a
    /// cycle between them), every group of several nodes on the cycle. Returns how many.
    fn split_cycle(&mut self, cyclic: BTreeSet<usize>) -> u32 {
        let mut by_group: HashMap<usize, Vec<usize>> = HashMap::new();
        for &i in &self.compute {
            by_group.entry(self.group[&i]).or_default().push(i);
        }
        let on_cycle: Vec<usize> = cyclic.into_iter().filter(|g| by_group[g].len() > 1).collect();
        let mut bad: Vec<usize> = on_cycle
            .iter()
            .copied()
            .filter(|g| !convex(&by_group[g], &self.group, &self.consumers, &self.pos))
            .collect();
        if bad.is_empty() {
            bad = on_cycle;
        }
        for g in &bad {
            for &i in &by_group[g] {
                self.next_group += 1;
                self.group.insert(i, self.next_group);
            }
        }
        bad.len() as u32
    }
}

/// True when no path leaves `members` and comes back.
fn convex(
    members: &[usize],
    group: &HashMap<usize, usize>,
    consumers: &HashMap<usize, Vec<usize>>,
    pos: &HashMap<usize, usize>,
) -> bool {
    let g = group.get(&members[0]);
    let last = members.iter().map(|i| pos[i]).max().unwrap_or(0);
    let next = |n: usize| consumers.get(&n).map_or(&[][..], Vec::as_slice);
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<usize> =
        members.iter().flat_map(|&m| next(m).iter().copied()).filter(|c| group.get(c) != g).collect();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) || pos[&n] > last {
            continue;
        }
        if group.get(&n) == g {
            return false;
        }
        stack.extend(next(n).iter().copied());
    }
    true
}

/// Groups in topological order (ties broken by their first node's position), or the groups
/// that lie on a cycle.
fn order_groups(
    compute: &[usize],
    group: &HashMap<usize, usize>,
    producers: &HashMap<usize, Vec<usize>>,
    pos: &HashMap<usize, usize>,
) -> Result<Vec<Vec<usize>>, BTreeSet<usize>> {
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for &i in compute {
        members.entry(group[&i]).or_default().push(i);
    }
    let mut preds: HashMap<usize, BTreeSet<usize>> = members.keys().map(|&g| (g, BTreeSet::new())).collect();
    for &i in compute {
        for p in &producers[&i] {
            if group[p] != group[&i] {
                preds.get_mut(&group[&i]).expect("every group has an entry").insert(group[p]);
            }
        }
    }
    let mut succs: HashMap<usize, Vec<usize>> = HashMap::new();
    for (&g, ps) in &preds {
        for &p in ps {
            succs.entry(p).or_default().push(g);
        }
    }
    let first = |g: usize| members[&g].iter().map(|i| pos[i]).min().unwrap_or(0);
    let mut indegree: HashMap<usize, usize> = preds.iter().map(|(&g, p)| (g, p.len())).collect();
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> =
        indegree.iter().filter(|(_, d)| **d == 0).map(|(&g, _)| Reverse((first(g), g))).collect();
    let mut out = vec![];
    while let Some(Reverse((_, g))) = ready.pop() {
        out.push(g);
        for &s in succs.get(&g).map_or(&[][..], Vec::as_slice) {
            let d = indegree.get_mut(&s).expect("every group has an entry");
            *d -= 1;
            if *d == 0 {
                ready.push(Reverse((first(s), s)));
            }
        }
    }
    if out.len() < members.len() {
        let done: HashSet<usize> = out.iter().copied().collect();
        return Err(members.keys().copied().filter(|g| !done.contains(g)).collect());
    }
    Ok(out.into_iter().map(|g| members[&g].clone()).collect())
}

/// `(identical groups, agreement)` of two groupings of the same compute nodes.
pub(crate) fn agreement(a: &[Vec<usize>], b: &[Vec<usize>]) -> (u32, f64) {
    let set =
        |gs: &[Vec<usize>]| -> HashSet<BTreeSet<usize>> { gs.iter().map(|g| g.iter().copied().collect()).collect() };
    let (sa, sb) = (set(a), set(b));
    let identical = sa.intersection(&sb).count();
    let union = sa.len() + sb.len() - identical;
    (identical as u32, if union == 0 { 1.0 } else { identical as f64 / union as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Derive the groups of a graph given as `(name, outputs, uses)` in topological order (every
    /// node a compute node; `conv*` and `gemm*` are anchors) from layers `(name, type, fused)`.
    fn run(spec: &[(&str, &[&str], &[&str])], layers: &[(&str, &str, &[&str])]) -> (Vec<Vec<String>>, Derived) {
        let owned: Vec<(String, Vec<String>, Vec<String>)> =
            spec.iter().map(|(n, o, u)| (n.to_string(), strings(o), strings(u))).collect();
        let order: Vec<usize> = (0..spec.len()).collect();
        let views: Vec<NodeView> = owned
            .iter()
            .map(|(n, o, u)| NodeView {
                name: n,
                outputs: o,
                uses: u,
                compute: true,
                anchor: n.starts_with("conv") || n.starts_with("gemm"),
                layout: false,
            })
            .collect();
        let layers: Vec<BackendLayer> = layers
            .iter()
            .map(|(n, t, f)| BackendLayer { name: n.to_string(), layer_type: t.to_string(), fused: strings(f) })
            .collect();
        let d = derive(&views, &order, &layers);
        let names = d.groups.iter().map(|g| g.iter().map(|&i| owned[i].0.clone()).collect()).collect();
        (names, d)
    }

    /// The example CNN as OpenVINO 2026.4.1's CPU plugin profiled it: the first two convs are
    /// renamed after their BatchNorm folding (`Multiply_*`), the BatchNorms do not appear, the
    /// other convs carry a `/WithoutBiases` suffix, and the Softmax layer is named after its
    /// output tensor.
    #[test]
    fn example_cnn_as_profiled() {
        let spec: &[(&str, &[&str], &[&str])] = &[
            ("conv_3_node", &["conv_3"], &["image"]),
            ("bn_7_node", &["bn_7"], &["conv_3"]),
            ("relu_8_node", &["relu_8"], &["bn_7"]),
            ("conv_11_node", &["conv_11"], &["relu_8"]),
            ("bn_15_node", &["bn_15"], &["conv_11"]),
            ("relu_16_node", &["relu_16"], &["bn_15"]),
            ("conv_19_node", &["conv_19"], &["relu_16"]),
            ("conv_22_node", &["conv_22"], &["relu_8"]),
            ("sigmoid_23_node", &["sigmoid_23"], &["conv_22"]),
            ("add_24_node", &["add_24"], &["conv_19", "sigmoid_23"]),
            ("relu_25_node", &["relu_25"], &["add_24"]),
            ("gap_26_node", &["gap_26"], &["relu_25"]),
            ("flatten_27_node", &["flatten_27"], &["gap_26"]),
            ("gemm_30_node", &["gemm_30"], &["flatten_27"]),
            ("softmax_31_node", &["softmax_31"], &["gemm_30"]),
        ];
        let layers: &[(&str, &str, &[&str])] = &[
            ("image", "Parameter", &[]),
            ("image_abcd_acdb_Multiply_3815", "Reorder", &[]),
            ("Multiply_3815", "Convolution", &["relu_8_node"]),
            ("Multiply_3825", "Convolution", &["relu_16_node"]),
            ("conv_22_node/WithoutBiases", "Convolution", &["sigmoid_23_node"]),
            ("conv_19_node/WithoutBiases", "Convolution", &["add_24_node", "relu_25_node"]),
            ("gap_26_node", "ReduceMean", &[]),
            ("gap_26_node_acdb_abcd_flatten_27_node", "Reorder", &[]),
            ("flatten_27_node", "Reshape", &[]),
            ("gemm_30_node", "FullyConnected", &[]),
            ("softmax_31", "Softmax", &[]),
            ("softmax_31/sink_port_0", "Result", &[]),
        ];
        let (groups, d) = run(spec, layers);
        let want: Vec<Vec<&str>> = vec![
            vec!["conv_3_node", "bn_7_node", "relu_8_node"],
            vec!["conv_11_node", "bn_15_node", "relu_16_node"],
            vec!["conv_19_node", "add_24_node", "relu_25_node"],
            vec!["conv_22_node", "sigmoid_23_node"],
            vec!["gap_26_node"],
            vec!["flatten_27_node"],
            vec!["gemm_30_node"],
            vec!["softmax_31_node"],
        ];
        // conv_22 comes before conv_19's group in topological order only by position
        let mut got = groups.clone();
        got.sort();
        let mut want: Vec<Vec<String>> = want.iter().map(|g| g.iter().map(|s| s.to_string()).collect()).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(
            d.unresolved,
            [
                "image (Parameter)",
                "image_abcd_acdb_Multiply_3815 (Reorder)",
                "gap_26_node_acdb_abcd_flatten_27_node (Reorder)"
            ]
        );
        assert_eq!(d.split, 0);
        // the Add joins its later producer's group, so it comes after conv_22's group
        let pos = |n: &str| groups.iter().position(|g| g.iter().any(|x| x == n)).unwrap();
        assert!(pos("conv_22_node") < pos("add_24_node"));
    }

    /// A node named by two layers merges them; an unnamed node between two groups with
    /// consumers in both joins its producer's group.
    #[test]
    fn merges_and_data_path() {
        let spec: &[(&str, &[&str], &[&str])] =
            &[("a", &["ta"], &["x"]), ("b", &["tb"], &["ta"]), ("c", &["tc"], &["tb"]), ("d", &["td"], &["tb"])];
        let (groups, d) = run(spec, &[("a/x", "T", &[]), ("a/y", "T", &[]), ("c", "T", &[]), ("d", "T", &[])]);
        assert_eq!(groups, [vec!["a", "b"], vec!["c"], vec!["d"]]);
        assert!(d.unresolved.is_empty());
    }

    /// Names that claim a non-convex group (a and c, with b between them outside) are split.
    #[test]
    fn non_convex_groups_are_split() {
        let spec: &[(&str, &[&str], &[&str])] =
            &[("a", &["ta"], &["x"]), ("b", &["tb"], &["ta"]), ("c", &["tc"], &["tb", "ta"])];
        let (groups, d) = run(spec, &[("a", "T", &["c"]), ("b", "T", &[])]);
        assert_eq!(groups, [vec!["a"], vec!["b"], vec!["c"]]);
        assert_eq!(d.split, 1);
    }

    /// A Conv the backend renamed and named nothing of (its layer resolves to no node) still
    /// gets a group of its own, with its folded BatchNorm; the next layer, renamed too, finds
    /// its Conv upstream of the activations fused into it.
    #[test]
    fn renamed_convs_are_found() {
        let spec: &[(&str, &[&str], &[&str])] = &[
            ("conv_a", &["ta"], &["x"]),
            ("bn", &["tb"], &["ta"]),
            ("conv_b", &["tc"], &["tb"]),
            ("mul", &["td"], &["tc"]),
            ("add", &["te"], &["td"]),
        ];
        let layers: &[(&str, &str, &[&str])] =
            &[("Multiply_1", "Convolution", &[]), ("Multiply_2", "GroupConvolution", &["HSwish_9", "add"])];
        let (groups, d) = run(spec, layers);
        assert_eq!(groups, [vec!["conv_a", "bn"], vec!["conv_b", "mul", "add"]]);
        assert_eq!(d.unresolved, ["Multiply_1 (Convolution)"]);
    }

    #[test]
    fn agreement_counts_identical_groups() {
        assert_eq!(agreement(&[vec![0, 1], vec![2]], &[vec![1, 0], vec![2]]), (2, 1.0));
        assert_eq!(agreement(&[vec![0, 1], vec![2]], &[vec![0], vec![1], vec![2]]), (1, 0.25));
    }
}
