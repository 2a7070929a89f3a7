//! The incremental profile cache: one entry per (sub-model, PU), so re-profiling after a small
//! model change only measures the ops that changed.
//!
//! An entry's key hashes everything its figures depend on: the extracted op's ONNX bytes
//! (weights included) and input types, the PU's configuration (kind, device, properties, cores;
//! not its name), the backend and its version, the machine, and the measuring protocol. Entries
//! are artifacts (`<key>.bin` + YAML twin) in one folder; an unreadable or corrupt entry is a
//! miss and is measured again.

use std::path::PathBuf;

use bident_artifact::{Artifact, ContentHash};
use bident_backend::PuSpec;
use bident_tensor::{DType, HostTensor};
use serde::{Deserialize, Serialize};

use crate::{Cost, ProfileConfig};

/// One cached measurement: the cost, or why the op cannot run on the PU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CachedCost {
    pub result: Result<Cost, String>,
}

impl Artifact for CachedCost {
    const KIND: &'static str = "cached-cost";
    const SCHEMA_VERSION: u32 = 1;
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
    /// the protocol (`plain-timed`: entries timed with per-layer profiling on are stale). None
    /// where it cannot be encoded: that entry is not cached.
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
        let protocol = ("plain-timed", cfg.warmup, cfg.runs, cfg.adaptive, cfg.min_runs, cfg.rel_ci);
        ContentHash::of_value(&(ContentHash::of(model), types, config, backend, machine, protocol)).ok()
    }

    fn path(&self, key: ContentHash) -> PathBuf {
        self.dir.join(format!("{}.bin", key.hex()))
    }

    pub fn get(&self, key: ContentHash) -> Option<Result<Cost, String>> {
        let path = self.path(key);
        let entry = bident_artifact::read::<CachedCost>(&path).ok()?;
        (entry.header.input_hash == key).then_some(entry.value.result)
    }

    /// Store an entry; a cache that cannot be written only costs a re-measurement later.
    pub fn put(&self, key: ContentHash, result: &Result<Cost, String>) {
        let _ = bident_artifact::write(&self.path(key), &CachedCost { result: result.clone() }, key);
    }
}
