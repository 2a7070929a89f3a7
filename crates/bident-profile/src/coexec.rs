//! Co-execution costs (paper 3.2.2, multi-model concurrent): what an op of model A and an op of
//! model B cost when both run on the same PU at the same time.
//!
//! Protocol, per PU: two worker threads, both on the PU's cores, one holding model A's ops
//! compiled for the PU, the other model B's. For each measured pair (a, b), in blocks: a alone,
//! b alone, then a and b together in barrier-synchronised rounds (both threads wait at a
//! barrier, then each runs its op once, timed from the barrier's release: waiting for the
//! shared PU is part of the cost). The medians are the pair's solo and co-run times.
//!
//! All N x M pairs are measured when there are at most `CoExecConfig::max_pairs`; otherwise a
//! seeded uniform sample of that many, and every other pair is predicted by a model fitted per
//! PU on the sample: `co(x | y) = a t_x + b t_y + c min(t_x, t_y) + d` (an op sharing a PU waits
//! for part of the other's time: all of it when the other runs first, the overlap under time
//! slicing). The fit's error is measured by 5-fold cross-validation on the sample and stored
//! with it.

#[cfg(feature = "measure")]
use std::sync::mpsc::{Receiver, Sender, channel};

use bident_artifact::{Artifact, ContentHash};
#[cfg(feature = "measure")]
use bident_backend::Backend;
use bident_backend::SocSpec;
use bident_ir::OpId;
#[cfg(feature = "measure")]
use bident_ir::{Extractor, FusedGraph};
use serde::{Deserialize, Serialize};

#[cfg(feature = "measure")]
use crate::ProfileError;
#[cfg(feature = "measure")]
use crate::contention::{Answer, CoRun, Job, Probe, worker};
use crate::quantile;

/// One measured pair on one PU: op `a` of model A and op `b` of model B, µs (medians).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairCost {
    pub a: OpId,
    pub b: OpId,
    pub solo_a_us: f64,
    pub solo_b_us: f64,
    /// Each op's time while the other runs on the same PU.
    pub co_a_us: f64,
    pub co_b_us: f64,
}

/// The fitted model of one PU: `co(x | y) = a t_x + b t_y + c min(t_x, t_y) + d` (µs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoExecFit {
    pub a: f64,
    pub b: f64,
    pub c: f64,
    pub d: f64,
    /// Relative error |predicted - measured| / measured of the fit, by 5-fold cross-validation
    /// on the measured pairs: median and 90th percentile.
    pub cv_median_rel_err: f64,
    pub cv_p90_rel_err: f64,
}

impl CoExecFit {
    pub fn predict(&self, t_x: f64, t_y: f64) -> f64 {
        let [a, b, c, d] = [self.a, self.b, self.c, self.d];
        (a * t_x + b * t_y + c * t_x.min(t_y) + d).max(t_x)
    }
}

/// Co-execution costs of two models on one SoC's PUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoExecTable {
    /// Names and fused-graph hashes of models A and B.
    pub models: [(String, ContentHash); 2],
    pub soc: SocSpec,
    pub measured_on: String,
    /// Per PU (indexed like `soc.pus`): the measured pairs.
    pub pairs: Vec<Vec<PairCost>>,
    /// Per PU: true when every pair was measured (no prediction needed).
    pub complete: Vec<bool>,
    /// Per PU: the model fitted on the measured pairs (None with fewer than 5 of them).
    pub fit: Vec<Option<CoExecFit>>,
}

impl Artifact for CoExecTable {
    const KIND: &'static str = "coexec-table";
    const SCHEMA_VERSION: u32 = 3;
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct CoExecConfig {
    /// Measure every pair up to this many, else a sample of this many.
    pub max_pairs: usize,
    pub warmup: u32,
    pub runs: u32,
    pub blocks: u32,
    pub seed: u64,
}

impl Default for CoExecConfig {
    fn default() -> Self {
        Self { max_pairs: 200, warmup: 2, runs: 10, blocks: 2, seed: 0 }
    }
}

/// Progress: pairs done on a PU.
pub struct CoExecProgress<'a> {
    pub pu: &'a str,
    pub done: usize,
    pub total: usize,
}

/// The pairs to measure: all of them, or a seeded uniform sample of `max` (sorted).
pub fn choose_pairs(n_a: usize, n_b: usize, max: usize, seed: u64) -> Vec<(usize, usize)> {
    let all = n_a * n_b;
    if all <= max {
        return (0..n_a).flat_map(|a| (0..n_b).map(move |b| (a, b))).collect();
    }
    // Floyd's sampling of `max` distinct indices out of `all`
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = |bound: usize| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % bound
    };
    let mut chosen = std::collections::BTreeSet::new();
    for j in all - max..all {
        let t = next(j + 1);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen.into_iter().map(|k| (k / n_b, k % n_b)).collect()
}

/// Measure co-execution costs of `a` and `b` on every PU of `soc`.
#[cfg(feature = "measure")]
pub fn measure(
    backend: &dyn Backend,
    soc: &SocSpec,
    (a, b): (&FusedGraph, &FusedGraph),
    cfg: CoExecConfig,
    progress: &mut dyn FnMut(CoExecProgress),
) -> Result<CoExecTable, ProfileError> {
    let pairs = choose_pairs(a.ops.len(), b.ops.len(), cfg.max_pairs, cfg.seed);
    let probes = |g: &FusedGraph, used: Vec<usize>| -> Result<(Vec<usize>, Vec<Probe>), ProfileError> {
        let ex = Extractor::new(g)?;
        let mut used = used;
        used.sort_unstable();
        used.dedup();
        let probes = used
            .iter()
            .map(|&i| Ok(Probe { name: g.ops[i].name.clone(), onnx: ex.extract(i as OpId)? }))
            .collect::<Result<Vec<_>, ProfileError>>()?;
        Ok((used, probes))
    };
    let (ops_a, probes_a) = probes(a, pairs.iter().map(|p| p.0).collect())?;
    let (ops_b, probes_b) = probes(b, pairs.iter().map(|p| p.1).collect())?;
    let index = |ops: &[usize], op: usize| ops.binary_search(&op).unwrap_or(0);
    let mut table = CoExecTable {
        models: [(a.name.clone(), a.content_hash()?), (b.name.clone(), b.content_hash()?)],
        soc: soc.clone(),
        measured_on: crate::host_description(),
        pairs: vec![],
        complete: vec![],
        fit: vec![],
    };
    let rounds = crate::contention::ContentionConfig { warmup: cfg.warmup, runs: cfg.runs, blocks: cfg.blocks };
    for pu in &soc.pus {
        let measured = std::thread::scope(|s| -> Result<Vec<PairCost>, ProfileError> {
            let mut sides: Vec<(Sender<Job>, Receiver<Answer>)> = vec![];
            for probes in [probes_a.as_slice(), probes_b.as_slice()] {
                let (job_tx, job_rx) = channel::<Job>();
                let (res_tx, res_rx) = channel();
                s.spawn(move || worker(backend, pu, probes, rounds, job_rx, res_tx));
                sides.push((job_tx, res_rx));
            }
            let recv = |k: usize| -> Result<Vec<f64>, ProfileError> {
                sides[k]
                    .1
                    .recv()
                    .map_err(|_| ProfileError::Worker(pu.name.clone()))?
                    .map_err(|e| ProfileError::Contention { pu: pu.name.clone(), source: e })
            };
            let mut out = Vec::with_capacity(pairs.len());
            for (done, &(oa, ob)) in pairs.iter().enumerate() {
                progress(CoExecProgress { pu: &pu.name, done, total: pairs.len() });
                let probe = [index(&ops_a, oa), index(&ops_b, ob)];
                let (mut solo, mut co) = ([vec![], vec![]], [vec![], vec![]]);
                for _ in 0..cfg.blocks {
                    for k in 0..2 {
                        let _ = sides[k].0.send(Job::Time { probe: probe[k], sync: None });
                        solo[k].extend(recv(k)?);
                    }
                    let sync = CoRun::new();
                    for k in 0..2 {
                        let _ = sides[k].0.send(Job::Time { probe: probe[k], sync: Some(sync.clone()) });
                    }
                    co[0].extend(recv(0)?);
                    co[1].extend(recv(1)?);
                }
                out.push(PairCost {
                    a: oa as OpId,
                    b: ob as OpId,
                    solo_a_us: quantile(&mut solo[0], 0.5),
                    solo_b_us: quantile(&mut solo[1], 0.5),
                    co_a_us: quantile(&mut co[0], 0.5),
                    co_b_us: quantile(&mut co[1], 0.5),
                });
            }
            progress(CoExecProgress { pu: &pu.name, done: pairs.len(), total: pairs.len() });
            Ok(out)
        })?;
        table.complete.push(pairs.len() == a.ops.len() * b.ops.len());
        table.fit.push(fit(&measured));
        table.pairs.push(measured);
    }
    Ok(table)
}

/// Observations of one op in a pair: (t_x, t_y, co_x).
#[cfg_attr(not(feature = "measure"), allow(dead_code))]
fn observations(pairs: &[PairCost]) -> Vec<(f64, f64, f64)> {
    pairs.iter().flat_map(|p| [(p.solo_a_us, p.solo_b_us, p.co_a_us), (p.solo_b_us, p.solo_a_us, p.co_b_us)]).collect()
}

/// The regressors of one observation: (t_x, t_y, min(t_x, t_y), 1).
#[cfg_attr(not(feature = "measure"), allow(dead_code))]
fn features(tx: f64, ty: f64) -> [f64; 4] {
    [tx, ty, tx.min(ty), 1.0]
}

/// Least squares of co_x on [`features`], by the normal equations.
#[cfg_attr(not(feature = "measure"), allow(dead_code))]
fn solve(obs: &[(f64, f64, f64)]) -> Option<[f64; 4]> {
    const N: usize = 4;
    let mut m = [[0.0f64; N + 1]; N];
    for &(tx, ty, co) in obs {
        let f = features(tx, ty);
        for r in 0..N {
            for c in 0..N {
                m[r][c] += f[r] * f[c];
            }
            m[r][N] += f[r] * co;
        }
    }
    // Gauss-Jordan with partial pivoting
    for col in 0..N {
        let pivot = (col..N).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
        if m[pivot][col].abs() < 1e-9 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col];
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let k = row[col] / pivot_row[col];
                for (v, p) in row.iter_mut().zip(pivot_row).skip(col) {
                    *v -= k * p;
                }
            }
        }
    }
    Some(std::array::from_fn(|r| m[r][N] / m[r][r]))
}

/// Fit on all measured pairs; the error by 5-fold cross-validation. None below 5 pairs.
#[cfg_attr(not(feature = "measure"), allow(dead_code))]
fn fit(pairs: &[PairCost]) -> Option<CoExecFit> {
    if pairs.len() < 5 {
        return None;
    }
    let obs = observations(pairs);
    let [a, b, c, d] = solve(&obs)?;
    let mut errs = vec![];
    for fold in 0..5 {
        // both observations of a pair stay in the same fold
        let train: Vec<_> = obs.iter().enumerate().filter(|(i, _)| (i / 2) % 5 != fold).map(|(_, o)| *o).collect();
        let Some([a, b, c, d]) = solve(&train) else { continue };
        let f = CoExecFit { a, b, c, d, cv_median_rel_err: 0.0, cv_p90_rel_err: 0.0 };
        for (_, &(tx, ty, co)) in obs.iter().enumerate().filter(|(i, _)| (i / 2) % 5 == fold) {
            errs.push((f.predict(tx, ty) - co).abs() / co.max(1e-9));
        }
    }
    Some(CoExecFit {
        a,
        b,
        c,
        d,
        cv_median_rel_err: quantile(&mut errs.clone(), 0.5),
        cv_p90_rel_err: quantile(&mut errs, 0.9),
    })
}

/// Input hash of a co-execution table: both graphs, the SoC, the protocol.
pub fn input_hash(
    a: ContentHash,
    b: ContentHash,
    soc: &SocSpec,
    cfg: &CoExecConfig,
) -> Result<ContentHash, bident_artifact::ArtifactError> {
    ContentHash::of_value(&(a, b, soc, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_pairs_or_a_distinct_sample() {
        assert_eq!(choose_pairs(2, 3, 10, 0).len(), 6);
        let s = choose_pairs(40, 50, 200, 7);
        assert_eq!(s.len(), 200);
        assert!(s.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        assert!(s.iter().all(|&(a, b)| a < 40 && b < 50));
        assert_eq!(s, choose_pairs(40, 50, 200, 7), "seeded");
    }

    /// The fit recovers a law the data follows exactly, with zero cross-validated error.
    #[test]
    fn fit_recovers_time_slicing() {
        let pairs: Vec<PairCost> = (0..30)
            .map(|k| {
                let (ta, tb) = (10.0 + k as f64 * 3.0, 50.0 - k as f64);
                PairCost {
                    a: k,
                    b: k,
                    solo_a_us: ta,
                    solo_b_us: tb,
                    co_a_us: 1.1 * ta + 0.3 * tb + 0.8 * ta.min(tb) + 2.0,
                    co_b_us: 1.1 * tb + 0.3 * ta + 0.8 * tb.min(ta) + 2.0,
                }
            })
            .collect();
        let f = fit(&pairs).expect("fit");
        let close = |x: f64, y: f64| (x - y).abs() < 1e-6;
        assert!(close(f.a, 1.1) && close(f.b, 0.3) && close(f.c, 0.8) && close(f.d, 2.0), "{f:?}");
        assert!(f.cv_p90_rel_err < 1e-6);
        assert!(fit(&pairs[..4]).is_none());
    }
}
