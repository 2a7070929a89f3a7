//! The artifact folder: one file per artifact kind, each read through its verifier.
//!
//! Every read checks what the artifact can be checked against: a fused graph against
//! `bident_ir::verify`, a phased graph against its fused graph (`bident_partition::verify`), a
//! cost table against its fused graph (`CostTable::check`), a plan against its phased graph and
//! cost table (its input hash, then `check_plan`). A command that writes holds the folder's
//! lock; a stage removes its own and every downstream artifact before it runs.

use std::path::{Path, PathBuf};

use bident_artifact::{self as artifact, Artifact, ContentHash, Stamped};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use bident_search::Plan;

use crate::{DriverError, Result};

pub const FUSED: &str = "fused-graph.bin";
pub const PHASED: &str = "phased-graph.bin";
pub const COSTS: &str = "cost-table.bin";
pub const PLAN: &str = "plan.bin";
pub const REPORT: &str = "run-report.bin";

/// An artifact folder (`target/bident/<model>/` by default).
#[derive(Clone, Debug)]
pub struct Folder {
    pub dir: PathBuf,
}

/// An exclusive lock on a folder, held while a command writes there: two runs on one folder
/// would leave one model's fused graph beside another's plan.
pub struct Lock(#[allow(dead_code)] std::fs::File);

impl Folder {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Lock the folder, creating it.
    pub fn create_locked(&self) -> Result<Lock> {
        std::fs::create_dir_all(&self.dir).map_err(DriverError::io(&self.dir))?;
        self.lock()
    }

    /// Lock a folder that must exist (a stage reading earlier stages' artifacts).
    pub fn lock(&self) -> Result<Lock> {
        if !self.dir.is_dir() {
            return Err(DriverError::Invalid(format!(
                "{}: no such folder: run `cargo xtask import MODEL --out {}` first",
                self.dir.display(),
                self.dir.display()
            )));
        }
        let path = self.path(".lock");
        let f = bident_artifact::files::open_lock_file(&path)?;
        match f.try_lock() {
            Ok(()) => Ok(Lock(f)),
            Err(std::fs::TryLockError::WouldBlock) => Err(DriverError::Invalid(format!(
                "{}: another bident command is writing this folder; wait for it to finish or give another --out",
                self.dir.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(DriverError::Io { path, source: e }),
        }
    }

    /// Remove these artifacts (a stage's own and everything downstream of it).
    pub fn clear(&self, files: &[&str]) -> Result<()> {
        for f in files {
            artifact::remove(&self.path(f))?;
        }
        Ok(())
    }

    /// Write an artifact; its payload hash.
    pub fn write<A: Artifact>(&self, file: &str, value: &A, inputs: ContentHash) -> Result<ContentHash> {
        Ok(artifact::write(&self.path(file), value, inputs)?.payload_hash)
    }

    /// Read an artifact as it is, unchecked against the others (the typed readers below check).
    pub fn read_raw<A: Artifact>(&self, file: &str) -> Result<Stamped<A>> {
        let p = self.path(file);
        if !p.exists() {
            return Err(DriverError::Invalid(format!(
                "{} does not exist: run the stage that writes it first",
                p.display()
            )));
        }
        Ok(artifact::read(&p)?)
    }

    /// The fused graph, verified.
    pub fn fused(&self) -> Result<(FusedGraph, ContentHash)> {
        let s = self.read_raw::<FusedGraph>(FUSED)?;
        bident_ir::verify(&s.value)
            .map_err(|e| DriverError::from(e).context(self.path(FUSED).display().to_string()))?;
        Ok((s.value, s.header.payload_hash))
    }

    /// The phased graph, verified against its fused graph.
    pub fn phased(&self, g: &FusedGraph) -> Result<(PhasedGraph, ContentHash)> {
        let s = self.read_raw::<PhasedGraph>(PHASED)?;
        bident_partition::verify(g, &s.value)
            .map_err(|e| DriverError::from(e).context(self.path(PHASED).display().to_string()))?;
        Ok((s.value, s.header.payload_hash))
    }

    /// The cost table, checked against its fused graph.
    pub fn costs(&self, g: &FusedGraph) -> Result<(CostTable, ContentHash)> {
        let s = self.read_raw::<CostTable>(COSTS)?;
        s.value.check(g).map_err(|e| DriverError::from(e).context(self.path(COSTS).display().to_string()))?;
        Ok((s.value, s.header.payload_hash))
    }

    /// The plan, checked: made from exactly these phases and costs (its input hash) and every
    /// figure the evaluator's (`check_plan`).
    pub fn plan(
        &self,
        phased: (&PhasedGraph, ContentHash),
        costs: (&CostTable, ContentHash),
    ) -> Result<(Plan, ContentHash)> {
        let s = self.read_raw::<Plan>(PLAN)?;
        let path = self.path(PLAN);
        let expected = s.value.input_hash(phased.1, costs.1)?;
        artifact::expect_inputs(&path, &s.header, expected)?;
        bident_search::check_plan(&s.value, phased.0, costs.0)
            .map_err(|e| DriverError::from(e).context(path.display().to_string()))?;
        Ok((s.value, s.header.payload_hash))
    }

    /// Check the artifact `file` of this folder as a stage reading it does ([`Folder::fused`],
    /// [`Folder::phased`], [`Folder::costs`], [`Folder::plan`]), against the ones it derives
    /// from; false for a file no stage reads back through a verifier (a run report).
    pub fn verify(&self, file: &str) -> Result<bool> {
        match file {
            FUSED => drop(self.fused()?),
            PHASED => drop(self.phased(&self.fused()?.0)?),
            COSTS => drop(self.costs(&self.fused()?.0)?),
            PLAN => drop(self.planned()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Every artifact up to the plan, each checked against the ones it derives from.
    pub fn planned(&self) -> Result<Planned> {
        let (g, gh) = self.fused()?;
        let (phased, ph) = self.phased(&g)?;
        let (costs, ch) = self.costs(&g)?;
        let (plan, plan_h) = self.plan((&phased, ph), (&costs, ch))?;
        Ok(Planned { g, gh, phased, ph, costs, ch, plan, plan_h })
    }
}

/// A folder's artifacts up to the plan, checked, with their payload hashes.
pub struct Planned {
    pub g: FusedGraph,
    pub gh: ContentHash,
    pub phased: PhasedGraph,
    pub ph: ContentHash,
    pub costs: CostTable,
    pub ch: ContentHash,
    pub plan: Plan,
    pub plan_h: ContentHash,
}

/// Write a file by renaming a complete temporary one over it: a reader running at the same
/// time (two pipelines on one zoo model) sees the old file or the new one, never half of one;
/// a link planted in the folder is never written through ([`bident_artifact::files`]).
pub(crate) fn write_replacing(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(DriverError::io(dir))?;
    Ok(bident_artifact::files::write_bytes(path, bytes.as_ref())?)
}
