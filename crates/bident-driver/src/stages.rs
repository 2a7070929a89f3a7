//! The stages, and the one list of them in order ([`Driver::pipeline`]).
//!
//! Each stage removes its own and every downstream artifact, runs the crate's entry function,
//! the verifier, and writes its artifact into the folder. The profile stage's own measurements
//! are `profile`'s; the run stage is `run`, its rules for giving way `give_way`, and what it
//! plans after a failed run `recovery`.

use std::path::Path;
use std::time::Instant;

use bident_artifact::ContentHash;
use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use bident_runtime::RunReport;
use bident_search::{Constraints, Plan};

mod give_way;
mod profile;
mod recovery;
mod run;

pub use profile::independent_pus;
pub use run::RunContext;
use run::check_run;

use crate::folder::{COSTS, FUSED, PHASED, PLAN, REPORT};
use crate::{
    Driver, DriverError, Event, Folder, FusionSource, Goal, ImportSpec, Measuring, Options, PlanOptions, Result,
    RunOptions, Soc, Stage,
};

/// A model imported, partitioned and profiled in its locked folder: what [`Driver::plan`]
/// searches on.
pub struct Prepared {
    pub folder: Folder,
    _lock: crate::Lock,
    pub graph: FusedGraph,
    pub graph_hash: ContentHash,
    pub phased: PhasedGraph,
    pub phased_hash: ContentHash,
    /// Grown by every refine.
    pub costs: CostTable,
    pub costs_hash: ContentHash,
    pub soc: Soc,
    /// Wall time of the profile stage (s).
    pub profile_s: f64,
}

/// Wall time of a pipeline's costly stages (s): the profile (with its cache), search and refine,
/// and the run (with giving way).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageSeconds {
    pub profile: f64,
    pub plan: f64,
    pub run: f64,
}

/// What a pipeline run produced (all of it also in its folder).
pub struct Outcome {
    pub folder: Folder,
    pub graph: FusedGraph,
    pub phased: PhasedGraph,
    pub costs: CostTable,
    pub plan: Plan,
    /// None on a virtual SoC: nothing runs there.
    pub report: Option<RunReport>,
    pub seconds: StageSeconds,
}

impl Driver<'_> {
    /// Every stage in order: import, partition, profile ([`Driver::prepare`]), search and
    /// refine ([`Driver::plan`]) and run (on a virtual SoC the pipeline stops after the search:
    /// there is nothing to run on). Every option is checked before the folder is touched.
    pub fn pipeline(&self, o: &Options) -> Result<Outcome> {
        let mut p = self.prepare(o, None)?;
        let t0 = std::time::Instant::now();
        let (mut plan, plan_h) = self.plan(&mut p, &o.plan, o.measuring)?;
        let mut seconds = StageSeconds { profile: p.profile_s, plan: t0.elapsed().as_secs_f64(), run: 0.0 };
        let t0 = std::time::Instant::now();
        let report = match &p.soc {
            Soc::Measured(..) => {
                // a plan held to f32 is compared with the engines held to f32
                let mut run = o.run.clone();
                run.config.exact_defaults = o.soc.precisions == bident_backend::soc::Precisions::Exact;
                let (done, report) = self.deliver(&p, (plan, plan_h), &o.plan, &run)?;
                plan = done;
                Some(report)
            }
            Soc::Virtual(v) => {
                self.note(
                    Stage::Run,
                    format!("skipped: `{}` is a virtual SoC, its plan is simulated only", v.spec.name),
                );
                None
            }
        };
        seconds.run = t0.elapsed().as_secs_f64();
        let Prepared { folder, graph, phased, costs, .. } = p;
        Ok(Outcome { folder, graph, phased, costs, plan, report, seconds })
    }

    /// The stages before the search, in order: check every option, lock the folder, import,
    /// partition, profile. `contention`: a SoC's contention matrix measured before (an eval
    /// over many models measures it once), instead of measuring it again.
    pub fn prepare(&self, o: &Options, contention: Option<&bident_profile::Contention>) -> Result<Prepared> {
        // one bound on every measured call from here on: profile, refine, baselines
        bident_backend::deadline::set_limit(o.run.config.op_timeout);
        let (path, name) = self.model_path(&o.import.model)?;
        let folder = Folder::new(o.out.clone().unwrap_or_else(|| self.default_out(&name)));
        let soc = self.soc(&o.soc)?;
        self.check(o, &soc)?;
        let lock = folder.create_locked()?;
        let fuser = o.soc.backends.first().copied().unwrap_or(crate::BackendName::OpenVino);
        let (graph, graph_hash) = self.import(&folder, &o.import, &path, fuser)?;
        let (phased, phased_hash) = self.partition(&folder, &graph, graph_hash, &o.plan.partition)?;
        let t0 = std::time::Instant::now();
        let (costs, costs_hash) =
            self.profile(&folder, (&graph, graph_hash), &soc, o.measuring, phased.neighbours(), contention)?;
        let profile_s = t0.elapsed().as_secs_f64();
        Ok(Prepared { folder, _lock: lock, graph, graph_hash, phased, phased_hash, costs, costs_hash, soc, profile_s })
    }

    /// Search and, on real PUs, refine (the plan's segments measured whole, the table grown,
    /// searched again): the plan `opts` asks for, written to the folder with the grown table.
    pub fn plan(&self, p: &mut Prepared, opts: &PlanOptions, m: Measuring) -> Result<(Plan, ContentHash)> {
        let (plan, plan_h) = self.search(&p.folder, (&p.phased, p.phased_hash), (&p.costs, p.costs_hash), opts)?;
        let Soc::Measured(spec, be) = &p.soc else { return Ok((plan, plan_h)) };
        if opts.goal == Goal::Pareto {
            return Ok((plan, plan_h));
        }
        let mut remeasure = self.remeasure((&p.graph, &p.phased), (spec, be.as_ref()), m);
        remeasure.session = Some(be.clone());
        let phased = (&p.phased, p.phased_hash);
        let refined =
            self.refine(&p.folder, &remeasure, phased, (p.costs.clone(), p.costs_hash), (plan, plan_h), opts)?;
        (p.costs, p.costs_hash) = refined.costs;
        Ok(refined.plan)
    }

    /// The run stage with its policies ([`Driver::run`]: giving way, fallback), re-planning
    /// from `p`'s phases and costs with `opts` where it needs to: the plan delivered and its
    /// report (both also in the folder). Only on real PUs.
    pub fn deliver(
        &self,
        p: &Prepared,
        plan: (Plan, ContentHash),
        opts: &PlanOptions,
        run: &RunOptions,
    ) -> Result<(Plan, RunReport)> {
        let Soc::Measured(spec, be) = &p.soc else {
            return Err(DriverError::Invalid(format!("`{}` is a virtual SoC: nothing runs on it", p.soc.spec().name)));
        };
        let mut replan = |c: &Constraints| {
            // a re-plan is one search: the front's fastest point was the latency one
            let goal = if opts.goal == Goal::Pareto { Goal::Latency } else { opts.goal };
            let o = PlanOptions { constraints: c.clone(), goal, ..opts.clone() };
            self.search(&p.folder, (&p.phased, p.phased_hash), (&p.costs, p.costs_hash), &o)
        };
        let cx = RunContext {
            folder: &p.folder,
            graph: &p.graph,
            soc: spec,
            backends: be.clone(),
            hashes: (p.phased_hash, p.costs_hash),
        };
        self.run(&cx, plan, run, &mut replan)
    }

    /// What can be checked before a folder is touched: passes and PUs named exist, options
    /// that name a PU name one of the SoC's, faults only where something runs.
    pub fn check(&self, o: &Options, soc: &Soc) -> Result<()> {
        self.passes.partition(&o.plan.partition)?;
        self.passes.search(&o.plan.search)?;
        if o.plan.goal == Goal::Pareto && o.plan.search != "bident" {
            return Err(DriverError::Invalid(format!(
                "--objective pareto runs bident's search; `{}` cannot blend objectives",
                o.plan.search
            )));
        }
        self.import_options(&o.import)?;
        o.plan.constraints.check_names(&soc.pu_names())?;
        match soc {
            Soc::Measured(spec, _) => check_run(&o.run, spec),
            Soc::Virtual(v) if o.run.fault.is_some() => Err(DriverError::Invalid(format!(
                "--inject-fault: `{}` is a virtual SoC; nothing runs on it",
                v.spec.name
            ))),
            Soc::Virtual(_) => Ok(()),
        }
    }

    pub fn import_options(&self, spec: &ImportSpec) -> Result<bident_ir::ImportOptions> {
        Ok(bident_ir::ImportOptions {
            input_shapes: spec.input_shapes.clone(),
            input_literals: spec.input_values.clone(),
            ..Default::default()
        })
    }

    /// Stage 1: import the model at `path` into `folder` (every artifact there is removed first).
    /// `fuser`: the backend whose grouping `--fusion backend` takes (the SoC's default one).
    pub fn import(
        &self,
        folder: &Folder,
        spec: &ImportSpec,
        path: &Path,
        fuser: crate::BackendName,
    ) -> Result<(FusedGraph, ContentHash)> {
        let t0 = Instant::now();
        folder.clear(&[FUSED, PHASED, COSTS, PLAN, REPORT])?;
        let mut opts = self.import_options(spec)?;
        let g = match spec.fusion {
            FusionSource::Backend => {
                let be = self.backend(fuser)?;
                self.import_backend_fused(path, &mut opts, be.as_ref())?
            }
            FusionSource::Rules => bident_ir::import(path, &opts)?,
        };
        bident_ir::verify(&g)?;
        let inputs = opts.input_hash(g.source.hash)?;
        let h = folder.write(FUSED, &g, inputs)?;
        self.note(
            Stage::Import,
            format!(
                "{} -> {} fused ops by {} ({} ONNX nodes, {} folded) in {:.2} s -> {}",
                path.display(),
                g.ops.len(),
                g.fusion.source,
                g.source.nodes,
                g.source.folded_nodes,
                t0.elapsed().as_secs_f64(),
                folder.path(FUSED).display()
            ),
        );
        if let Some(b) = &g.fusion.backend {
            self.note(
                Stage::Fusion,
                format!(
                    "backend on {} gives {} ops, rules {}; {} groups identical (agreement {:.2}){}",
                    b.pu,
                    b.ops,
                    g.fusion.rule_ops,
                    b.identical,
                    b.agreement,
                    if b.split > 0 { format!("; {} non-convex groups split", b.split) } else { String::new() }
                ),
            );
        }
        Ok((g, h))
    }

    /// Import with backend-true fusion: import, profile the lowered model whole on the first PU
    /// of the `local` SoC, import again grouped as the backend fused it (`opts.fusion` is set).
    pub fn import_backend_fused(
        &self,
        path: &Path,
        opts: &mut bident_ir::ImportOptions,
        be: &dyn Backend,
    ) -> Result<FusedGraph> {
        let g = bident_ir::import(path, opts)?;
        let mut local = SocSpec::preset("local", be)?;
        if local.pus.is_empty() {
            return Err(DriverError::Invalid("the backend has no device to fuse on".into()));
        }
        let pu = local.pus.remove(0);
        let layers = bident_profile::backend_layers(be, &g, &pu)?;
        opts.fusion = bident_ir::Fusion::Backend { pu: pu.name.clone(), layers };
        Ok(bident_ir::import(path, opts)?)
    }

    /// Stage 2: the partition pass named `pass`, verified.
    pub fn partition(
        &self,
        folder: &Folder,
        g: &FusedGraph,
        gh: ContentHash,
        pass: &str,
    ) -> Result<(PhasedGraph, ContentHash)> {
        let t0 = Instant::now();
        folder.clear(&[PHASED, PLAN, REPORT])?;
        let pass = self.passes.partition(pass)?;
        let p = pass.partition(g)?;
        bident_partition::verify(g, &p)
            .map_err(|e| DriverError::from(e).context(format!("partition pass `{}`", pass.name())))?;
        let h = folder.write(PHASED, &p, ContentHash::of_value(&(gh, pass.name()))?)?;
        self.note(
            Stage::Partition,
            format!(
                "{} phases, {} with parallel branches ({}) in {:.2} s",
                p.phases.len(),
                p.parallel_phases(),
                pass.name(),
                t0.elapsed().as_secs_f64()
            ),
        );
        Ok((p, h))
    }

    /// Stage 4: the plan, by the search `p.search` (or the latency/energy front, whose fastest
    /// point becomes the plan and which is written to `pareto.yaml`).
    pub fn search(
        &self,
        folder: &Folder,
        phased: (&PhasedGraph, ContentHash),
        costs: (&CostTable, ContentHash),
        p: &PlanOptions,
    ) -> Result<(Plan, ContentHash)> {
        folder.clear(&[PLAN, REPORT])?;
        let cfg = p.search_config();
        let t0 = Instant::now();
        let plan = if p.goal == Goal::Pareto {
            let front = bident_search::pareto(phased.0, costs.0, &cfg)?;
            self.emit(Event::Front(&front));
            write_front(folder, &front)?;
            front.into_iter().next().ok_or_else(|| DriverError::Invalid("an empty latency/energy front".into()))?
        } else {
            self.search_reporting(self.passes.search(&p.search)?, phased.0, costs.0, cfg)?
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let h = folder.write(PLAN, &plan, plan.input_hash(phased.1, costs.1)?)?;
        self.emit(Event::Searched { plan: &plan, ms });
        Ok((plan, h))
    }

    /// `search` on its own thread, its progress reported as it goes.
    fn search_reporting(
        &self,
        search: &dyn bident_search::MappingSearch,
        phased: &PhasedGraph,
        costs: &CostTable,
        mut cfg: bident_search::SearchConfig,
    ) -> Result<Plan> {
        let (tx, rx) = std::sync::mpsc::channel::<(String, usize, usize)>();
        cfg.progress = bident_search::ProgressHook::new(move |what, done, total| {
            let _ = tx.send((what.to_string(), done, total));
        });
        std::thread::scope(|s| {
            // cfg moves in: the channel closes when the search is done
            let worker = s.spawn(move || bident_search::search_by(search, phased, costs, &cfg));
            for (what, done, total) in rx {
                self.emit(Event::Progress { stage: Stage::Search, what, done, total });
            }
            match worker.join() {
                Ok(plan) => Ok(plan?),
                Err(_) => Err(DriverError::Invalid(format!("the search `{}` panicked", search.name()))),
            }
        })
    }
}

/// The latency/energy front as `pareto.yaml` beside the plan.
fn write_front(folder: &Folder, front: &[Plan]) -> Result<()> {
    let mut yaml = String::from("# latency/energy front: plans minimising weight*latency + (1-weight)*energy\n");
    for p in front {
        let mix: Vec<String> = p.ops_per_pu.iter().map(|(pu, n)| format!("{n} on {pu}")).collect();
        yaml.push_str(&format!(
            "- {{latency_weight: {}, predicted_us: {}, predicted_energy_uj: {}, ops_per_pu: \"{}\"}}\n",
            p.blend.unwrap_or(f64::NAN),
            p.predicted_us,
            p.predicted_energy_uj,
            mix.join(", ")
        ));
    }
    let path = folder.path("pareto.yaml");
    crate::folder::write_replacing(&path, yaml)
}

/// A CPU PU of `backend` on `cores`, for the run stage's rules' tests.
#[cfg(test)]
fn test_pu(name: &str, backend: &str, cores: &[usize]) -> bident_backend::PuSpec {
    bident_backend::PuSpec {
        name: name.into(),
        backend: backend.into(),
        kind: bident_backend::PuKind::Cpu,
        device: "CPU".into(),
        properties: Default::default(),
        cores: cores.to_vec(),
        declared_power_w: 1.0,
        whole_only: false,
    }
}
