//! Artifacts from anywhere: a plan or a phased graph written by another tool (YAML or JSON),
//! verified on the way in and stamped with the hashes of what it was checked against; and a
//! plan file to compare ([`read_plan`]).

use std::path::Path;

use bident_partition::PhasedGraph;
use bident_search::{Placement, Plan};
use serde::de::DeserializeOwned;

use crate::folder::{PHASED, PLAN, REPORT};
use crate::{Driver, DriverError, Folder, Result};

/// `text` as a `T`: the artifact's YAML twin (`header` + `payload`, the header ignored: the
/// hashes are stamped anew) or the payload alone, in YAML or JSON.
fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T> {
    let bad = |e: serde_norway::Error| DriverError::Invalid(format!("{origin}: {e}"));
    let value = parse_value(text, origin)?;
    let payload = match value.get("payload") {
        Some(p) if value.get("header").is_some() => p.clone(),
        _ => value,
    };
    serde_norway::from_value(payload).map_err(bad)
}

/// `text` as a YAML (or JSON) value, its nesting checked first: parsing is quadratic in depth.
fn parse_value(text: &str, origin: &str) -> Result<serde_norway::Value> {
    bident_artifact::files::check_nesting(text).map_err(|e| DriverError::Invalid(format!("{origin}: {e}")))?;
    serde_norway::from_str(text).map_err(|e| DriverError::Invalid(format!("{origin}: {e}")))
}

/// A plan file to compare (`cargo xtask plan-diff`): an artifact (`plan.bin`), or, by its
/// extension (`.yaml`, `.yml`, `.json`), a plan as text: its YAML twin (`plan.yaml`) or the
/// payload alone. Only its figures are checked (`check_figures`): a plan compared is not run,
/// and the diff refuses plans of different graphs.
pub fn read_plan(path: &Path) -> Result<Plan> {
    let origin = path.display().to_string();
    let text = path.extension().and_then(|e| e.to_str()).is_some_and(|e| ["yaml", "yml", "json"].contains(&e));
    let plan = if text {
        parse::<Plan>(&bident_artifact::files::read_text(path)?, &origin)?
    } else {
        bident_artifact::decode::<Plan>(path, &bident_artifact::read_bytes(path)?)?.value
    };
    bident_search::check_figures(&plan).map_err(|e| DriverError::from(e).context(origin))?;
    Ok(plan)
}

impl Driver<'_> {
    /// A plan written by any tool into `folder`: a whole plan, checked by `check_plan` against
    /// the folder's phases and costs, or a placement (`placement: {op: PU}`), priced by the
    /// evaluator and checked the same way. The run stage's input hash is stamped on it.
    pub fn import_plan(&self, folder: &Folder, text: &str, origin: &str) -> Result<Plan> {
        let _lock = folder.lock()?;
        let (g, _) = folder.fused()?;
        let (phased, ph) = folder.phased(&g)?;
        let (costs, ch) = folder.costs(&g)?;
        let is_placement = parse_value(text, origin)?.get("placement").is_some();
        let plan = if is_placement {
            let placed: Placement = parse(text, origin)?;
            bident_search::plan_from_placement(&phased, &costs, &placed)
        } else {
            let plan: Plan = parse(text, origin)?;
            bident_search::check_plan(&plan, &phased, &costs).map(|()| plan)
        }
        .map_err(|e| DriverError::from(e).context(origin.to_string()))?;
        folder.clear(&[PLAN, REPORT])?;
        folder.write(PLAN, &plan, plan.input_hash(ph, ch)?)?;
        Ok(plan)
    }

    /// A phased graph written by any tool into `folder`, verified against the folder's fused
    /// graph. The plan and report there are removed; the cost table stays (it is the fused
    /// graph's).
    pub fn import_phases(&self, folder: &Folder, text: &str, origin: &str) -> Result<PhasedGraph> {
        let _lock = folder.lock()?;
        let (g, gh) = folder.fused()?;
        let p: PhasedGraph = parse(text, origin)?;
        bident_partition::verify(&g, &p).map_err(|e| DriverError::from(e).context(origin.to_string()))?;
        folder.clear(&[PHASED, PLAN, REPORT])?;
        folder.write(PHASED, &p, bident_artifact::ContentHash::of_value(&(gh, "imported"))?)?;
        Ok(p)
    }
}
