//! The incremental profile cache: one entry per (sub-model, PU), so re-profiling after a small
//! model change only measures the ops that changed.
//!
//! An entry's key hashes everything its figures depend on: the extracted op's timing identity
//! (its ONNX without names and weight values, `bident_ir::timing_identity`) and input types, the PU's configuration (kind, device, properties, cores;
//! not its name), the backend and its version, the machine, and the measuring protocol. Entries
//! are artifacts (`<key>.bin` + YAML twin) in one folder; an unreadable or corrupt entry is a
//! miss and is measured again. Each entry records when and under what load it was measured.
//!
//! Before a profile trusts a PU's entries it times a sample of them again, the spot check
//! ([`spot_order`], [`spot_more`]): the faster of an entry's two figures is kept (the profile
//! prices the machine's fast state), and only while the sample says the cache was measured in a
//! slower state than the machine is in now does the sample grow, up to every entry. A machine
//! that is slower now than when it filled the cache keeps the cache's figures.

use std::path::PathBuf;

use bident_artifact::{Artifact, ContentHash};
use bident_backend::PuSpec;
use bident_tensor::{DType, HostTensor};
use serde::{Deserialize, Serialize};

use crate::{Cost, ProfileConfig};

/// One cached measurement: the cost, or why the op cannot run on the PU, and when and under
/// what load it was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedCost {
    pub result: Result<Cost, String>,
    pub measured: Conditions,
}

/// When and under what conditions an entry was measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// Seconds since the Unix epoch.
    pub at_unix_s: u64,
    /// The machine's 1-minute load average then (Linux `/proc/loadavg`), where readable.
    pub load_1min: Option<f64>,
}

impl Conditions {
    pub fn now() -> Self {
        let at_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let load_1min = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse::<f64>().ok()))
            .filter(|l| l.is_finite());
        Self { at_unix_s, load_1min }
    }

    /// `measured 3 h ago under load 4.2`, for notes.
    pub fn describe(&self) -> String {
        let now = Self::now().at_unix_s;
        let ago = now.saturating_sub(self.at_unix_s);
        let when = match ago {
            0..120 => format!("{ago} s ago"),
            120..7200 => format!("{} min ago", ago / 60),
            _ => format!("{} h ago", ago / 3600),
        };
        match self.load_1min {
            Some(l) => format!("measured {when} under load {l:.1}"),
            None => format!("measured {when}"),
        }
    }
}

impl Artifact for CachedCost {
    const KIND: &'static str = "cached-cost";
    const SCHEMA_VERSION: u32 = 2;
}

pub struct CostCache {
    dir: PathBuf,
}

impl CostCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The key of one (op, PU) measurement: the sub-model's timing identity
    /// ([`bident_ir::timing_identity`]: its ops, attributes and shapes, not its names or
    /// weights, so identical ops of two models share an entry), its input
    /// types, the PU's configuration (not its name), its backend and version, the machine and
    /// the protocol (`plain-timed`: entries timed with per-layer profiling on are stale;
    /// `fast-state`: entries timed in any state of the machine are, [`crate::speed`];
    /// `quiet-progress`: so are those timed beside a progress message per round; and, for a PU
    /// on more than one core or on every core, `every-core-fast`: entries timed once only the
    /// timing thread's core was fast are, [`crate::speed::await_fast_on`]). None where it
    /// cannot be encoded: that entry is not cached.
    pub fn key(
        identity: ContentHash,
        inputs: &[HostTensor],
        pu: &PuSpec,
        backend: &str,
        machine: &str,
        cfg: &ProfileConfig,
    ) -> Option<ContentHash> {
        let types: Vec<(DType, &[u64])> = inputs.iter().map(|t| (t.dtype, t.shape.as_slice())).collect();
        let config = (pu.kind, &pu.device, &pu.properties, &pu.cores);
        let protocol = (
            "plain-timed",
            if cfg.fast_state { "fast-state" } else { "any-state" },
            "quiet-progress",
            cfg.warmup,
            cfg.runs,
            cfg.adaptive,
            cfg.min_runs,
            cfg.rel_ci,
        );
        let key = (identity, types, config, backend, machine, protocol);
        if pu.cores.len() == 1 {
            ContentHash::of_value(&key).ok()
        } else {
            ContentHash::of_value(&(key, "every-core-fast")).ok()
        }
    }

    fn path(&self, key: ContentHash) -> PathBuf {
        self.dir.join(format!("{}.bin", key.hex()))
    }

    pub fn get(&self, key: ContentHash) -> Option<CachedCost> {
        let path = self.path(key);
        let entry = bident_artifact::read::<CachedCost>(&path).ok()?;
        (entry.header.input_hash == key).then_some(entry.value)
    }

    /// Store an entry, measured now; a cache that cannot be written only costs a
    /// re-measurement later.
    pub fn put(&self, key: ContentHash, result: &Result<Cost, String>) {
        let entry = CachedCost { result: result.clone(), measured: Conditions::now() };
        let _ = bident_artifact::write(&self.path(key), &entry, key);
    }
}

/// The order in which a PU's cached entries are spot-checked: by their keys, a seeded shuffle
/// that does not look at the figures. Checking the costliest entries instead picks the outliers
/// (an op timed in a slow moment), which move back by themselves: on a model profiled at two
/// runs each, the three costliest entries were 4.9-16 ms against 29-152 µs re-timed, and the
/// whole cache was measured again on every run.
pub fn spot_order(mut entries: Vec<(usize, ContentHash)>) -> Vec<usize> {
    entries.sort_by_key(|a| a.1.hex());
    entries.into_iter().map(|(i, _)| i).collect()
}

/// The spot check's rule, after a round re-timed `pairs` (cached, now) of a PU's entries:
/// how many more to re-time, `None` to stop. `done` were re-timed so far and `left` were not.
/// When the round's median entry got faster by more than `drift`, the cache was measured in a
/// slower state than the machine's now and the sample grows fourfold (3, 12, 48, ... up to
/// every entry); an entry that is slower now or within `drift` is the cache holding.
pub fn spot_more(pairs: &[(f64, f64)], done: usize, left: usize, drift: f64) -> Option<usize> {
    let move_ = spot_move(pairs)?;
    (move_ < -drift && left > 0).then(|| (3 * done).max(1).min(left))
}

/// The median relative move of `pairs` (cached, now): -0.4 is 40% faster now. None when empty
/// or when a figure is not positive.
pub fn spot_move(pairs: &[(f64, f64)]) -> Option<f64> {
    let mut moves: Vec<f64> = pairs.iter().filter(|(was, _)| *was > 0.0).map(|(was, now)| now / was - 1.0).collect();
    (!moves.is_empty() && moves.iter().all(|m| m.is_finite())).then(|| crate::quantile(&mut moves, 0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_grows_only_while_the_cache_was_slower() {
        // cached at 2x what the machine takes now: the sample grows 3 -> 12 -> 48 -> the rest
        let slower = [(200.0, 100.0), (300.0, 140.0), (50.0, 26.0)];
        assert_eq!(spot_more(&slower, 3, 166, 0.25), Some(9));
        assert_eq!(spot_more(&slower, 12, 157, 0.25), Some(36));
        assert_eq!(spot_more(&slower, 48, 121, 0.25), Some(121));
        assert_eq!(spot_more(&slower, 169, 0, 0.25), None);
        // within the drift, or slower now (a busy machine): the cache holds
        assert_eq!(spot_more(&[(100.0, 90.0), (100.0, 80.0), (100.0, 120.0)], 3, 166, 0.25), None);
        assert_eq!(spot_more(&[(100.0, 190.0), (100.0, 260.0), (100.0, 170.0)], 3, 166, 0.25), None);
        // one outlier does not move the median
        assert_eq!(spot_more(&[(9443.6, 52.5), (100.0, 95.0), (100.0, 104.0)], 3, 166, 0.25), None);
        assert_eq!(spot_more(&[], 0, 166, 0.25), None);
        assert_eq!(spot_more(&[(0.0, 1.0)], 1, 166, 0.25), None);
    }

    #[test]
    fn the_spot_order_ignores_the_figures() {
        let key = |n: u8| ContentHash::of(&[n]);
        let a = spot_order(vec![(0, key(1)), (1, key(2)), (2, key(3))]);
        let b = spot_order(vec![(2, key(3)), (0, key(1)), (1, key(2))]);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2]);
    }
}
