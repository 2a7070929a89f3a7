//! Bench problems shaped as real models are: graphs written op by op in topological order, with
//! forks and joins, partitioned by the rule `bident_partition::partition` applies (a boundary
//! after every fork and before every join, branches the weakly connected components between,
//! consecutive single-branch phases merged).

use bident_search::Problem;

/// Ops in topological order, each with the ops it reads.
struct Dag {
    preds: Vec<Vec<usize>>,
}

impl Dag {
    fn new() -> Self {
        Dag { preds: vec![] }
    }

    /// Add an op reading `inputs`; returns its id.
    fn op(&mut self, inputs: &[usize]) -> usize {
        self.preds.push(inputs.to_vec());
        self.preds.len() - 1
    }

    /// A chain of `len` ops, the first reading `inputs`; returns its last op.
    fn chain(&mut self, inputs: &[usize], len: usize) -> usize {
        let mut last = self.op(inputs);
        for _ in 1..len {
            last = self.op(&[last]);
        }
        last
    }

    /// The bench problem of the graph on `k` PUs: ops reading nothing read a graph input, ops
    /// read by nothing write a graph output.
    fn problem(self, k: usize) -> Problem {
        let n = self.preds.len();
        let mut succs = vec![vec![]; n];
        for (c, ps) in self.preds.iter().enumerate() {
            ps.iter().for_each(|&p| succs[p].push(c));
        }
        let phases = phases(&self.preds, &succs);
        let mut place = vec![(0, 0); n];
        for (pi, phase) in phases.iter().enumerate() {
            for (bi, b) in phase.iter().enumerate() {
                b.iter().for_each(|&c| place[c] = (pi, bi));
            }
        }
        let from_host = self.preds.iter().map(Vec::is_empty).collect();
        let to_host = succs.iter().map(Vec::is_empty).collect();
        problem(k, phases, place, (self.preds, succs), (from_host, to_host))
    }
}

/// The partition's phases of a graph whose ops are numbered in topological order.
fn phases(preds: &[Vec<usize>], succs: &[Vec<usize>]) -> Vec<Vec<Vec<usize>>> {
    let n = preds.len();
    let mut segments: Vec<Vec<usize>> = vec![];
    let mut current = vec![];
    for c in 0..n {
        if preds[c].len() > 1 && !current.is_empty() {
            segments.push(std::mem::take(&mut current));
        }
        current.push(c);
        if succs[c].len() > 1 {
            segments.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    let mut out: Vec<Vec<Vec<usize>>> = vec![];
    let mut branch_of = vec![usize::MAX; n];
    let mut seg_of = vec![0; n];
    for (s, seg) in segments.iter().enumerate() {
        seg.iter().for_each(|&c| seg_of[c] = s);
    }
    for (s, seg) in segments.into_iter().enumerate() {
        // an op joins the branch of the first producer in its segment: the segment's components
        let mut branches: Vec<Vec<usize>> = vec![];
        let mut root: Vec<usize> = vec![];
        for &c in &seg {
            let inside: Vec<usize> =
                preds[c].iter().filter(|&&p| seg_of[p] == s).map(|&p| find(&mut root, branch_of[p])).collect();
            let b = match inside.first() {
                Some(&b) => {
                    inside.iter().for_each(|&o| root[o] = b);
                    b
                }
                None => {
                    root.push(root.len());
                    branches.push(vec![]);
                    root.len() - 1
                }
            };
            branch_of[c] = b;
        }
        for &c in &seg {
            let b = find(&mut root, branch_of[c]);
            branches[b].push(c);
        }
        let branches: Vec<Vec<usize>> = branches.into_iter().filter(|b| !b.is_empty()).collect();
        match out.last_mut() {
            Some(last) if branches.len() == 1 && last.len() == 1 => last[0].extend(&branches[0]),
            _ => out.push(branches),
        }
    }
    out
}

fn find(root: &mut [usize], mut b: usize) -> usize {
    while root[b] != b {
        root[b] = root[root[b]];
        b = root[b];
    }
    b
}

/// One fork op feeding `width` branches of 3 ops, one join op reading them all (a model of
/// parallel heads joined by one `Sum`).
pub fn fork_join(width: usize, k: usize) -> Problem {
    let mut g = Dag::new();
    let fork = g.op(&[]);
    let tails: Vec<usize> = (0..width).map(|_| g.chain(&[fork], 3)).collect();
    g.op(&tails);
    g.problem(k)
}

/// Transformer blocks of multi-head attention with residuals until about `n` ops: each block a
/// layer norm and a QKV projection forking into `heads` heads of 3 ops (scores, softmax,
/// weighted sum), a concat joining them, an output projection, a residual add reading the
/// block's input, then a layer norm, a 2-op feed-forward and a second residual add.
pub fn attention(n: usize, heads: usize, k: usize) -> Problem {
    let mut g = Dag::new();
    let mut x = g.op(&[]);
    while g.preds.len() < n {
        let qkv = g.chain(&[x], 2);
        let outs: Vec<usize> = (0..heads).map(|_| g.chain(&[qkv], 3)).collect();
        let concat = g.op(&outs);
        let proj = g.op(&[concat]);
        let add = g.op(&[proj, x]);
        let ffn = g.chain(&[add], 3);
        x = g.op(&[ffn, add]);
    }
    g.problem(k)
}

/// Fork-joins nested in fork-joins: one fork feeding `width` branches, each an op and a fork
/// feeding `inner` branches of 2 ops, joined by an op followed by one more; one join reading
/// every branch.
pub fn nested(width: usize, inner: usize, k: usize) -> Problem {
    let mut g = Dag::new();
    let fork = g.op(&[]);
    let tails: Vec<usize> = (0..width)
        .map(|_| {
            let split = g.chain(&[fork], 2);
            let leaves: Vec<usize> = (0..inner).map(|_| g.chain(&[split], 2)).collect();
            let joined = g.op(&leaves);
            g.op(&[joined])
        })
        .collect();
    g.op(&tails);
    g.problem(k)
}

pub fn rng() -> impl FnMut() -> f64 {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub type Rows = (Vec<Vec<Option<f64>>>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Deterministic costs of `n` ops on `k` PUs (the last PU an accelerator), every 17th op
/// unsupported on it, as the paper's NPU lacks some ops: (w, h2d, d2h, power).
pub fn rows(n: usize, k: usize) -> Rows {
    let mut r = rng();
    let w = (0..n).map(|i| (0..k).map(|j| (j + 1 < k || i % 17 != 0).then(|| 5.0 + 100.0 * r())).collect()).collect();
    let h2d = (0..n).map(|_| (0..k).map(|_| 10.0 * r()).collect()).collect();
    let d2h = (0..n).map(|_| (0..k).map(|_| 10.0 * r()).collect()).collect();
    let power = (0..n).map(|_| (0..k).map(|j| 5.0 + 5.0 * j as f64).collect()).collect();
    (w, h2d, d2h, power)
}

/// The bench problem of `phases` on `k` PUs with [`rows`] costs and seeded contention factors, no
/// measured runs (the search's fast path).
pub fn problem(
    k: usize,
    phases: Vec<Vec<Vec<usize>>>,
    place: Vec<(usize, usize)>,
    (preds, succs): (Vec<Vec<usize>>, Vec<Vec<usize>>),
    (from_host, to_host): (Vec<bool>, Vec<bool>),
) -> Problem {
    let n = place.len();
    let mut r = rng();
    let (w, h2d, d2h, power) = rows(n, k);
    let links = bident_search::OrderLinks::new(&phases, &place);
    Problem {
        w,
        h2d,
        d2h,
        power,
        accelerator: (0..k).map(|j| j > 0).collect(),
        preds,
        succs,
        from_host,
        to_host,
        sf: (0..k).map(|i| (0..k).map(|j| if i == j { 1.0 } else { 1.0 + 0.1 * r() }).collect()).collect(),
        exclusive: vec![vec![false; k]; k],
        phases,
        place,
        prev: links.prev,
        next: links.next,
        joins_in_parallel: links.joins_in_parallel,
        saving: vec![vec![0.0; k]; n],
        segment_cost: Default::default(),
        launch: vec![],
        progress: Default::default(),
    }
}
