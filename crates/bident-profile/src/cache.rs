//! The incremental profile cache: one entry per (sub-model, PU), so re-profiling after a small
//! model change only measures the ops that changed.
//!
//! An entry's key hashes everything its figures depend on: the extracted op's ONNX bytes
//! (weights included) and input types, the PU's configuration (kind, device, properties, cores;
//! not its name), the backend and its version, the machine, and the measuring protocol. Entries
//! are artifacts (`<key>.bin` + YAML twin) in one folder; an unreadable or corrupt entry is a
//! miss and is measured again. Each entry records when and under what load it was measured;
//! before a profile trusts a PU's entries it times a few of them again (`ProfileConfig::recheck`)
//! and measures them all again if they moved (`ProfileConfig::drift`).

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

    /// The key of one (op, PU) measurement: the canonical bytes of the sub-model, its input
    /// types, the PU's configuration (not its name), its backend and version, the machine and
    /// the protocol (`plain-timed`: entries timed with per-layer profiling on are stale;
    /// `fast-state`: entries timed in any state of the machine are, [`crate::speed`];
    /// `quiet-progress`: so are those timed beside a progress message per round; and, for a PU
    /// on more than one core or on every core, `every-core-fast`: entries timed once only the
    /// timing thread's core was fast are, [`crate::speed::await_fast_on`]). None where it
    /// cannot be encoded: that entry is not cached.
    pub fn key(
        model: &[u8],
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
        let key = (ContentHash::of(model), types, config, backend, machine, protocol);
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
