//! The run stage ([`Driver::run`]): the plan run and measured beside the alternatives, giving
//! way or planned again until one is delivered; and a folder's plan run again ([`Driver::rerun`]).

use std::sync::Arc;

use bident_artifact::ContentHash;
use bident_backend::fault::FaultyBackend;
use bident_backend::{Backend, Backends, SocSpec};
use bident_ir::FusedGraph;
use bident_runtime::{RunConfig, RunReport};
use bident_search::{Constraints, Plan};

use super::give_way::{GivingWay, gives_back, ran_beside, within_noise};
use crate::folder::{PLAN, REPORT};
use crate::{Driver, DriverError, Folder, Goal, PlanOptions, Result, RunOptions, Stage};

/// What the run stage runs on and writes to ([`Driver::run`]).
pub struct RunContext<'a> {
    /// Where the plan (when one before is given back) and the report are written.
    pub folder: &'a Folder,
    pub graph: &'a FusedGraph,
    pub soc: &'a SocSpec,
    pub backends: Arc<Backends>,
    /// The phased graph's and the cost table's, which a plan's header is derived from.
    pub hashes: (ContentHash, ContentHash),
}

/// The plans that gave way in one run stage: giving way's record, and the best measured of
/// them, `(speedup over the best default, the plan, its report)`.
#[derive(Default)]
struct GaveWay {
    giving_way: GivingWay,
    best: Option<(f64, Plan, RunReport)>,
}

impl GaveWay {
    /// Keep `plan`, which gave way, where it measured the best speedup over the best default
    /// of those that did so far.
    fn record(&mut self, plan: &Plan, report: RunReport) {
        let speedup = report.speedup_vs_best_default();
        if self.best.as_ref().is_none_or(|b| speedup > b.0) {
            self.best = Some((speedup, plan.clone(), report));
        }
    }
}

impl Driver<'_> {
    /// Stage 5: run and measure the plan. A plan slower than the fastest engine default beside
    /// it gives way to that engine's whole-model PU (`gives_way_to_default`), and one clearly
    /// slower than a PU running the whole model beside it to that PU (`ahead`), each PU
    /// `GIVE_WAY_TIMES` times at most, and then the default's once more, as the last run
    /// (`behind_default`); the plan before is kept, itself,
    /// where it measured better by both time and speedup over the best default and did not run
    /// beside the new plan (`ran_beside`; `keep`); a plan whose outputs were off is
    /// planned again closer to the reference, and with `fallback`, a PU that fails is excluded
    /// and the plan searched again (`replan`) until a plan runs or no PU is left to drop
    /// (`after_failure`).
    pub fn run(
        &self,
        cx: &RunContext<'_>,
        mut plan: (Plan, ContentHash),
        opts: &RunOptions,
        replan: &mut dyn FnMut(&Constraints) -> Result<(Plan, ContentHash)>,
    ) -> Result<(Plan, RunReport)> {
        bident_backend::deadline::set_limit(opts.config.op_timeout);
        let be = self.faulty(cx.backends.clone(), opts);
        let cfg = &with_candidates(&plan.0, &opts.config);
        let mut gave_way = GaveWay::default();
        loop {
            cx.folder.clear(&[REPORT])?;
            let next = match bident_runtime::run(cx.graph, &plan.0, cx.soc, be.clone(), cfg) {
                Ok(report) => {
                    let Some((pu, why)) = gave_way.giving_way.next(cx.soc, &report, &plan.0, cfg) else {
                        return self.keep(cx, plan, report, gave_way, cfg);
                    };
                    self.note(Stage::Run, why);
                    let mut c = plan.0.constraints.clone();
                    c.whole = Some(pu);
                    gave_way.record(&plan.0, report);
                    c
                }
                Err(err) => self.after_failure(err, &plan.0, cx.soc, opts.fallback)?,
            };
            plan = replan(&next)?;
        }
    }

    /// The run stage's last step, once a measured plan stays: says where an alternative was
    /// ahead of it within the noise, gives the best plan that gave way back where it measured
    /// better than the whole-model PU it gave way to ([`gives_back`]; a whole-model PU that
    /// measured no better gives that plan back, itself: it may not be the search's, `plan
    /// import`), and writes the report and its pictures.
    fn keep(
        &self,
        cx: &RunContext<'_>,
        mut plan: (Plan, ContentHash),
        mut report: RunReport,
        gave_way: GaveWay,
        cfg: &RunConfig,
    ) -> Result<(Plan, RunReport)> {
        let tried = &gave_way.giving_way.tried;
        if plan.0.constraints.pin.is_empty()
            && let Some(what) = within_noise(&report, &plan.0, tried)
        {
            self.note(
                Stage::Run,
                format!(
                    "{what}, the plan {:.1} µs: within the noise between blocks, the plan stays",
                    report.measured_us
                ),
            );
        }
        if let Some((speedup, earlier_plan, earlier)) = gave_way.best
            && !ran_beside(&earlier_plan.ops_per_pu, &report.measured_whole)
            && gives_back((speedup, earlier.measured_us), (report.speedup_vs_best_default(), report.measured_us))
        {
            self.note(
                Stage::Run,
                format!(
                    "the whole model on `{}` measured {:.2}x of the best default, the plan before it \
                     {speedup:.2}x: keeping that plan",
                    tried.last().map_or("?", String::as_str),
                    report.speedup_vs_best_default()
                ),
            );
            cx.folder.clear(&[PLAN])?;
            let h = cx.folder.write(PLAN, &earlier_plan, earlier_plan.input_hash(cx.hashes.0, cx.hashes.1)?)?;
            plan = (earlier_plan, h);
            report = earlier;
        }
        cx.folder.write(REPORT, &report, bident_runtime::input_hash(plan.1, cfg)?)?;
        self.write_pictures(cx.folder, &report)?;
        Ok((plan.0, report))
    }

    /// What ran where, next to the run report: `trace.json` (Chrome trace, opens in Perfetto)
    /// and `gantt.svg`.
    pub(crate) fn write_pictures(&self, folder: &Folder, r: &RunReport) -> Result<()> {
        for (file, text) in
            [("trace.json", bident_runtime::trace::chrome_trace(r)), ("gantt.svg", bident_runtime::trace::gantt_svg(r))]
        {
            let path = folder.path(file);
            crate::folder::write_replacing(&path, text)?;
        }
        self.note(
            Stage::Run,
            format!(
                "what ran where -> {} and {}",
                folder.path("gantt.svg").display(),
                folder.path("trace.json").display()
            ),
        );
        Ok(())
    }

    /// `be`, with the injected fault if any.
    pub fn faulty(&self, be: Arc<Backends>, opts: &RunOptions) -> Arc<dyn Backend> {
        match &opts.fault {
            Some(f) => {
                self.note(Stage::Run, format!("injecting a fault: PU `{}` {:?}", f.pu, f.fault));
                Arc::new(FaultyBackend::new(be, f.clone()))
            }
            None => be,
        }
    }

    /// Run the plan in `folder` again (every artifact up to it checked), re-planning from the
    /// folder's phases and costs where the run stage needs to.
    pub fn rerun(&self, folder: &Folder, opts: &RunOptions) -> Result<(Plan, RunReport, FusedGraph)> {
        let _lock = folder.lock()?;
        let p = folder.planned()?;
        let be = self.backends_of_plan(folder, &p, opts)?;
        let options = PlanOptions {
            goal: match p.plan.objective {
                bident_search::Objective::Latency => Goal::Latency,
                bident_search::Objective::Energy => Goal::Energy,
            },
            mode: p.plan.mode,
            constraints: p.plan.constraints.clone(),
            partition: String::new(),
            // a plan imported as a placement is re-planned by bident's search
            search: if self.passes.search(&p.plan.search).is_ok() { p.plan.search.clone() } else { "bident".into() },
        };
        let mut replan = |c: &Constraints| {
            let o = PlanOptions { constraints: c.clone(), ..options.clone() };
            self.search(folder, (&p.phased, p.ph), (&p.costs, p.ch), &o)
        };
        let cx = RunContext { folder, graph: &p.g, soc: &p.costs.soc, backends: be, hashes: (p.ph, p.ch) };
        let (plan, r) = self.run(&cx, (p.plan.clone(), p.plan_h), opts, &mut replan)?;
        Ok((plan, r, p.g))
    }

    /// The backends a folder's plan runs on, once its options are checked against its SoC and
    /// its costs are known to be measured.
    pub(crate) fn backends_of_plan(
        &self,
        folder: &Folder,
        p: &crate::Planned,
        opts: &RunOptions,
    ) -> Result<Arc<Backends>> {
        check_run(opts, &p.costs.soc)?;
        if p.costs.simulated {
            return Err(DriverError::Invalid(format!(
                "{}: the plan is for virtual SoC `{}` (simulated costs): there are no such PUs to run it on",
                folder.dir.display(),
                p.costs.soc.name
            )));
        }
        let named =
            p.costs.soc.pus.iter().map(|pu| crate::BackendName::parse(&pu.backend)).collect::<Result<Vec<_>>>()?;
        let mut distinct = vec![];
        for b in named {
            if !distinct.contains(&b) {
                distinct.push(b);
            }
        }
        self.backends(&distinct)
    }
}

/// `cfg` with every PU that runs the whole model among the runs measured beside `plan`: the
/// candidates its regret is measured against, in the same blocks.
fn with_candidates(plan: &Plan, cfg: &bident_runtime::RunConfig) -> bident_runtime::RunConfig {
    let mut config = cfg.clone();
    for b in plan.baselines.iter().filter(|b| b.predicted_us.is_some()) {
        if !config.whole_on.contains(&b.pu) {
            config.whole_on.push(b.pu.clone());
        }
    }
    config
}

/// Options that name a PU must name one of the SoC's: an injected fault on a PU the SoC does not
/// have would inject nothing.
pub(super) fn check_run(o: &RunOptions, soc: &SocSpec) -> Result<()> {
    let known = || soc.pus.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ");
    if let Some(f) = &o.fault
        && soc.pu(&f.pu).is_none()
    {
        return Err(DriverError::Invalid(format!(
            "--inject-fault: SoC `{}` has no PU `{}` (it has {})",
            soc.name,
            f.pu,
            known()
        )));
    }
    if let Some(pu) = o.config.whole_on.iter().find(|pu| soc.pu(pu).is_none()) {
        return Err(DriverError::Invalid(format!(
            "--measure-whole: SoC `{}` has no PU `{pu}` (it has {})",
            soc.name,
            known()
        )));
    }
    Ok(())
}
