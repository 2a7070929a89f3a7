//! Refine: the one loop that measures whole the runs of a plan the cost table prices from
//! pairs, and searches again on the grown table. The pipeline's refine stage and a server's
//! re-plans ([`crate::serving`]) both run it.

use std::sync::Arc;
use std::time::Instant;

use bident_artifact::ContentHash;
use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::cache::CostCache;
use bident_profile::{Cost, CostTable, ProfileConfig, SegmentCost};
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
    /// Where set, a plan of several segments is also run in a session of its own, as the run
    /// runs it, through this backend (`bident_runtime::task_times`), and each of its segments
    /// measured here is priced at its time there ([`in_session`]). None for a server's re-plan
    /// (a session beside the served one would measure both in turn).
    pub session: Option<Arc<dyn Backend>>,
}

/// Inferences of a plan's session that price its segments (`bident_runtime::task_times`).
const SESSION_RUNS: u32 = 40;

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
            let mut found = bident_profile::measure_segments(
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
            let sessions = self.in_session(&plan, &wanted, &mut found)?;
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
                "measured the plan's segments whole in {:.1} s ({}){sessions}; the plan predicted {before:.1} µs from \
                 pairs, the new plan {:.1} µs",
                t0.elapsed().as_secs_f64(),
                summary.join("; "),
                plan.predicted_us
            ));
        }
        Ok(plan)
    }

    /// Where [`Remeasure::session`] is set and `plan` has several segments: run the plan in a
    /// session as the run does and price each segment of `found` (measured alone, as `wanted`
    /// asked) that is one of its tasks at its time there. Timed alone, a segment runs back to
    /// back on one thread; in the run, an inference's other segments run between two of its
    /// calls, on other engines' threads sharing its cores, and its worker waits between them:
    /// on the silero VAD, 13 ops on `CPU.bf16` then 7 on `CPU.ort` were priced 72.5 + 23.1 µs
    /// alone and took 151 + 59 µs in the run. What the note says: each segment alone and in
    /// the session, and the session's inference (empty where no session ran).
    fn in_session(
        &self,
        plan: &Plan,
        wanted: &[(Vec<bident_ir::OpId>, usize)],
        found: &mut [SegmentCost],
    ) -> Result<String> {
        let Some(be) = &self.session else { return Ok(String::new()) };
        if plan.segments().len() < 2 {
            return Ok(String::new());
        }
        let cfg = bident_runtime::RunConfig { runs: SESSION_RUNS, ..Default::default() };
        let times = bident_runtime::task_times(self.g, plan, self.soc, be.clone(), &cfg)?;
        let mut said = vec![];
        for (s, (ops, j)) in found.iter_mut().zip(wanted) {
            let Some(&(_, _, own)) = times.tasks.iter().find(|(t, pu, _)| t == ops && pu == j) else { continue };
            if let Some(c) = s.per_pu[*j].as_mut() {
                let alone = c.h2d_us + c.weight_us() + c.d2h_us;
                in_session(c, own);
                said.push(format!("ops {}..{} {alone:.1} µs alone, {own:.1} in it", ops[0], ops[ops.len() - 1]));
            }
        }
        let sum: f64 = times.tasks.iter().map(|t| t.2).sum();
        Ok(format!(
            "; in the plan's session ({}): {}, an inference {:.1} µs (its tasks {sum:.1})",
            cfg.runs,
            said.join(", "),
            times.total_us
        ))
    }
}

/// `c` priced at `own` µs a call (inputs set, inference, outputs copied), as measured in a
/// plan's session: the difference goes to its execution (median, p10 and p90), never below 0.
fn in_session(c: &mut Cost, own: f64) {
    let exec = (own - c.h2d_us - c.dispatch_us - c.d2h_us).max(0.0);
    let d = exec - c.exec_us;
    c.exec_us = exec;
    c.p10_us[2] = (c.p10_us[2] + d).max(0.0);
    c.p90_us[2] = (c.p90_us[2] + d).max(0.0);
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
        Remeasure { g, phased, soc, be, cfg, cache: self.cache(m), session: None }
    }
}
