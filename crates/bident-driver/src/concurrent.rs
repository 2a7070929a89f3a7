//! Two models at once: import, partition and profile both, measure (or, on a virtual SoC,
//! model) their same-PU co-execution costs, search the concurrent plan and run it.

use std::time::Instant;

use bident_artifact::ContentHash;
use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::coexec::CoExecTable;
use bident_profile::{CostTable, ProfileConfig};
use bident_runtime::RunReport;
use bident_search::concurrent::{self, ConcurrentMode, ConcurrentPlan, Measured, TimeSlicing};
use bident_search::{Mode, whole_model_runs};

use crate::folder::{COSTS, REPORT};
use crate::{Driver, DriverError, Folder, ImportSpec, Options, Result, Soc};

/// Two models' plans at once on modelled co-execution costs (time slicing: two ops on one PU
/// share it), from tables already measured or simulated: the eval's every pair.
pub fn pair_plan(
    a: (&PhasedGraph, &CostTable),
    b: (&PhasedGraph, &CostTable),
    objective: bident_search::Objective,
) -> Result<ConcurrentPlan> {
    let label = if a.1.simulated {
        "simulated: time slicing on a virtual SoC"
    } else {
        "modelled: time slicing (two ops on one single-threaded PU share it); not measured per pair"
    };
    Ok(concurrent::plan(a, b, (&TimeSlicing, label), ConcurrentMode::Joint, objective)?)
}

/// The second model of a concurrent pipeline.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondModel {
    pub import: ImportSpec,
    /// Advance both models in lockstep (the paper's aligned mode) instead of the joint search.
    pub aligned: bool,
}

/// What a concurrent pipeline produced.
pub struct ConcurrentOutcome {
    pub folder: Folder,
    pub graphs: [FusedGraph; 2],
    pub plan: ConcurrentPlan,
    pub mode: ConcurrentMode,
    pub search_ms: f64,
    /// None on a virtual SoC.
    pub report: Option<RunReport>,
}

const PLAN_FILE: &str = "concurrent-plan.bin";

impl Driver<'_> {
    /// Plan and run `o`'s model and `second` at the same time. Each model's stages go to
    /// `<out>/<model>/` (default `<target>/bident/<model>/`), the concurrent plan to `<out>`
    /// (default `<target>/bident/pairs/<A>+<B>/`).
    pub fn concurrent(&self, o: &Options, second: &SecondModel) -> Result<ConcurrentOutcome> {
        let cfg = o.plan.search_config();
        self.check_pair(o, second)?;
        let mut stages: Vec<(FusedGraph, PhasedGraph, CostTable)> = vec![];
        let mut soc = None;
        for import in [&o.import, &second.import] {
            let crate::Prepared { graph, phased, costs, soc: s, .. } = self.prepare_one(o, import)?;
            stages.push((graph, phased, costs));
            soc = Some(s);
        }
        let soc = soc.ok_or_else(|| DriverError::Invalid("a concurrent pipeline takes two models".into()))?;
        let Ok([(ga, pa, ca), (gb, pb, cb)]) = <[_; 2]>::try_from(stages) else {
            return Err(DriverError::Invalid("a concurrent pipeline takes two models".into()));
        };
        let folder = Folder::new(match &o.out {
            Some(out) => out.clone(),
            None => self.target.join("bident/pairs").join(crate::folder_name(&format!("{}+{}", ga.name, gb.name))),
        });
        let _lock = folder.create_locked()?;
        folder.clear(&[PLAN_FILE, REPORT])?;
        let mode = if second.aligned { ConcurrentMode::Aligned } else { ConcurrentMode::Joint };
        let order = |p: &PhasedGraph| p.order().into_iter().map(|o| o as usize).collect::<Vec<_>>();
        let coexec;
        let (co, label): (Box<dyn concurrent::CoCost>, String) = match &soc {
            Soc::Virtual(v) => {
                (Box::new(TimeSlicing), format!("simulated: time slicing on virtual SoC {}", v.spec.name))
            }
            Soc::Measured(spec, be) => {
                let (table, label) = self.measure_coexec(spec, be.as_ref(), &folder, (&ga, &gb))?;
                coexec = table;
                (Box::new(Measured::new(&coexec, order(&pa), order(&pb))), label)
            }
        };
        let t0 = Instant::now();
        let plan = concurrent::plan((&pa, &ca), (&pb, &cb), (co.as_ref(), &label), mode, cfg.objective)?;
        let search_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mode_name = match mode {
            ConcurrentMode::Aligned => "aligned",
            ConcurrentMode::Joint => "joint",
        };
        let plan_h =
            folder.write(PLAN_FILE, &plan, ContentHash::of_value(&(ca.graph, cb.graph, mode_name, cfg.objective))?)?;
        self.note(crate::Stage::Concurrent, format!("plan -> {}", folder.path(PLAN_FILE).display()));
        let report = match soc {
            Soc::Virtual(_) => None,
            Soc::Measured(spec, be) => {
                let r =
                    bident_runtime::run_concurrent((&ga, &gb), &plan, &spec, self.faulty(be, &o.run), &o.run.config)?;
                folder.write(REPORT, &r, bident_runtime::input_hash(plan_h, &o.run.config)?)?;
                self.write_pictures(&folder, &r)?;
                Some(r)
            }
        };
        Ok(ConcurrentOutcome { folder, graphs: [ga, gb], plan, mode, search_ms, report })
    }

    /// What [`Driver::concurrent`] checks before either model's folder is touched: the plan
    /// options it can honour, and both models' options.
    fn check_pair(&self, o: &Options, second: &SecondModel) -> Result<()> {
        let cfg = o.plan.search_config();
        if cfg.mode != Mode::Sequential || !cfg.constraints.is_empty() {
            return Err(DriverError::Invalid(
                "--with plans each model's ops one at a time, without constraints: drop --mode parallel, --pin, \
                 --forbid and --exclude-pu"
                    .into(),
            ));
        }
        if o.run.fallback {
            return Err(DriverError::Invalid(
                "--fallback is not available with --with: a concurrent plan cannot exclude a PU yet".into(),
            ));
        }
        for import in [&o.import, &second.import] {
            self.model_path(&import.model)?;
            self.import_options(import)?;
        }
        Ok(())
    }

    /// One model of a pair prepared in its own folder (`<out>/<model>/`), and on real PUs
    /// measured whole on each PU (what running it on a PU of its own costs) into its table.
    fn prepare_one(&self, o: &Options, import: &ImportSpec) -> Result<crate::Prepared> {
        let (_, name) = self.model_path(&import.model)?;
        let out = match &o.out {
            Some(out) => out.join(&name),
            None => self.default_out(&name),
        };
        let one = Options { import: import.clone(), out: Some(out), ..o.clone() };
        let mut p = self.prepare(&one, None)?;
        if let Soc::Measured(spec, be) = &p.soc {
            let wanted = whole_model_runs(&p.costs, &p.phased);
            let pcfg = ProfileConfig { runs: o.measuring.runs, adaptive: o.measuring.adaptive, ..Default::default() };
            let cache = self.cache(o.measuring);
            let found = bident_profile::measure_segments(
                &p.graph,
                spec,
                be.as_ref(),
                &pcfg,
                cache.as_ref(),
                &wanted,
                &mut |_| {},
            )?;
            p.costs.segments.extend(found);
            let inputs = p.folder.read_raw::<CostTable>(COSTS)?.header.input_hash;
            p.folder.write(COSTS, &p.costs, inputs)?;
        }
        Ok(p)
    }

    /// The two models' same-PU co-execution costs measured on `spec` and written to `folder`,
    /// with what the plan says of them.
    fn measure_coexec(
        &self,
        spec: &SocSpec,
        be: &dyn Backend,
        folder: &Folder,
        (ga, gb): (&FusedGraph, &FusedGraph),
    ) -> Result<(CoExecTable, String)> {
        let cfg = bident_profile::coexec::CoExecConfig::default();
        let coexec = bident_profile::coexec::measure(be, spec, (ga, gb), cfg, &mut |_| {})?;
        let inputs = ContentHash::of_value(&(ga.content_hash()?, gb.content_hash()?, spec, cfg))?;
        folder.write("coexec-table.bin", &coexec, inputs)?;
        let label = format!(
            "measured on {}: {} pairs per PU ({}), fitted model for the rest",
            coexec.measured_on,
            coexec.pairs.first().map_or(0, Vec::len),
            if coexec.complete.iter().all(|&c| c) { "all of them" } else { "a sample" }
        );
        Ok((coexec, label))
    }
}
