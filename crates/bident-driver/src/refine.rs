//! Refine: the one loop that measures whole the runs of a plan the cost table prices from
//! pairs, and searches again on the grown table. The pipeline's refine stage and a server's
//! re-plans ([`crate::serving`]) both run it.

use std::time::Instant;

use bident_artifact::ContentHash;
use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::cache::CostCache;
use bident_profile::{CostTable, ProfileConfig};
use bident_search::{Plan, REFINE_ROUNDS, segments_to_measure};

use crate::folder::COSTS;
use crate::{Driver, Folder, Measuring, PlanOptions, Result, Stage};

/// What the refine loop measures with: the model, its phases, the PUs and how to time them.
pub struct Remeasure<'a> {
    pub g: &'a FusedGraph,
    pub phased: &'a PhasedGraph,
    pub soc: &'a SocSpec,
    pub be: &'a dyn Backend,
    pub cfg: ProfileConfig,
    /// Where measured runs are kept across processes (never for a server's re-plan: what it
    /// measures is a drifting PU's state, not its normal).
    pub cache: Option<CostCache>,
}

impl Remeasure<'_> {
    /// Measure the plan's segments of three or more ops and every PU's whole model where the
    /// table has no measurement of them, add them to `costs` and plan again with `search`,
    /// until nothing is left to measure (at most [`REFINE_ROUNDS`] rounds). `note` hears one
    /// line per round (and the profiler's notes).
    pub fn refine(
        &self,
        costs: &mut CostTable,
        mut plan: Plan,
        search: &mut dyn FnMut(&CostTable) -> Result<Plan>,
        note: &mut dyn FnMut(String),
    ) -> Result<Plan> {
        for _ in 0..REFINE_ROUNDS {
            let wanted = segments_to_measure(&plan, costs, self.phased);
            if wanted.is_empty() {
                break;
            }
            let t0 = Instant::now();
            let found = bident_profile::measure_segments(
                self.g,
                self.soc,
                self.be,
                &self.cfg,
                self.cache.as_ref(),
                &wanted,
                &mut |p| {
                    if let Some(why) = &p.note {
                        note(format!("{}: {why}", p.pu));
                    }
                },
            )?;
            let before = plan.predicted_us;
            let summary: Vec<String> = found
                .iter()
                .zip(&wanted)
                .map(|(s, (ops, j))| {
                    let got = s.per_pu[*j]
                        .as_ref()
                        .map_or("failed".to_string(), |c| format!("{:.1} µs", c.weight_us() + c.h2d_us + c.d2h_us));
                    format!("ops {}..{} on {}: {got}", ops[0], ops[ops.len() - 1], self.soc.pus[*j].name)
                })
                .collect();
            costs.segments.extend(found);
            plan = search(costs)?;
            note(format!(
                "measured the plan's segments whole in {:.1} s ({}); the plan predicted {before:.1} µs from pairs, \
                 the new plan {:.1} µs",
                t0.elapsed().as_secs_f64(),
                summary.join("; "),
                plan.predicted_us
            ));
        }
        Ok(plan)
    }
}

/// The cost table and plan a folder's refine stage writes, with their payload hashes.
pub struct Refined {
    pub costs: (CostTable, ContentHash),
    pub plan: (Plan, ContentHash),
}

impl Driver<'_> {
    /// Between search and run, on real PUs: refine the plan ([`Remeasure::refine`]) on the
    /// folder's cost table, rewriting the table and the plan in `folder` after each round.
    pub fn refine(
        &self,
        folder: &Folder,
        m: &Remeasure<'_>,
        phased: (&PhasedGraph, ContentHash),
        (mut costs, mut ch): (CostTable, ContentHash),
        (plan, mut plan_h): (Plan, ContentHash),
        p: &PlanOptions,
    ) -> Result<Refined> {
        let table_inputs = folder.read_raw::<CostTable>(COSTS)?.header.input_hash;
        let plan = m.refine(
            &mut costs,
            plan,
            &mut |costs| {
                ch = folder.write(COSTS, costs, table_inputs)?;
                let (plan, h) = self.search(folder, phased, (costs, ch), p)?;
                plan_h = h;
                Ok(plan)
            },
            &mut |line| self.note(Stage::Refine, line),
        )?;
        Ok(Refined { costs: (costs, ch), plan: (plan, plan_h) })
    }

    /// How the refine loop measures on `soc` with `be` under `m` (the profile cache where
    /// `m` keeps one).
    pub fn remeasure<'a>(
        &self,
        (g, phased): (&'a FusedGraph, &'a PhasedGraph),
        (soc, be): (&'a SocSpec, &'a dyn Backend),
        m: Measuring,
    ) -> Remeasure<'a> {
        let cfg = ProfileConfig { runs: m.runs, adaptive: m.adaptive, ..Default::default() };
        Remeasure { g, phased, soc, be, cfg, cache: self.cache(m) }
    }
}
