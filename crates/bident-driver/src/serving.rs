//! Serving a folder's plan: the driver's [`TablePlanner`] is what a
//! [`bident_runtime::Server`] asks to price, search and measure (the cost table, the search
//! that made the plan, the one refine loop), and [`Driver::serve`] serves through it.

use std::sync::Arc;
use std::time::Duration;

use bident_backend::fault::{Fault, FaultSpec, FaultyBackend};
use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_partition::PhasedGraph;
use bident_profile::{CostTable, ProfileConfig};
use bident_runtime::{Planner, RuntimeError, ServeConfig, Server};
use bident_search::{MappingSearch, Objective, Placement, Plan, SearchConfig};

use crate::refine::Remeasure;
use crate::{Driver, DriverError, Event, Folder, Measuring, Result, RunOptions, Stage};

/// How long serving waits, at its end, for a re-plan still measuring or compiling.
const SETTLE: Duration = Duration::from_secs(300);

/// Inferences of a fresh plan served afresh ([`Served::fresh`]).
const FRESH_INFERENCES: usize = 100;

/// Timed runs (after one warm-up) of the whole model on a PU a drift left, just after and at
/// each re-check: few, for a slowed PU's run may be 100x its normal, and it spins beside the
/// inferences.
const RETIME_RUNS: u32 = 7;

/// The planner a server re-plans through: prices on a [`CostTable`], the search that made the
/// plan (from the pass registry), and the pipeline's refine loop ([`Remeasure::refine`]),
/// measuring with the server's backend (a drifting PU in its present state) and no cache.
#[derive(Clone)]
pub struct TablePlanner {
    graph: Arc<FusedGraph>,
    phased: Arc<PhasedGraph>,
    soc: SocSpec,
    backend: Arc<dyn Backend>,
    search: Arc<dyn MappingSearch>,
    cfg: SearchConfig,
    /// How a re-plan measures: lighter than a profile (its result only decides between plans)
    /// and in whatever state the cores are in: waiting for their fast state beside the
    /// server's own inferences spun for 150 ms on the example, and doubled their latency.
    measure: ProfileConfig,
}

impl TablePlanner {
    /// A planner for `plan`'s model (`graph`, `phased`) on `soc` through `backend`, searching
    /// with `search` as `plan` was searched (objective, mode and constraints, except a whole
    /// model a run gave way to: a drifting PU may be left).
    pub fn new(
        (graph, phased): (FusedGraph, PhasedGraph),
        (soc, backend): (SocSpec, Arc<dyn Backend>),
        search: Arc<dyn MappingSearch>,
        plan: &Plan,
    ) -> Self {
        let constraints = bident_search::Constraints { whole: None, ..plan.constraints.clone() };
        let cfg = SearchConfig { objective: plan.objective, mode: plan.mode, constraints, ..Default::default() };
        let measure = ProfileConfig { warmup: 5, runs: 50, min_runs: 20, fast_state: false, ..Default::default() };
        Self { graph: Arc::new(graph), phased: Arc::new(phased), soc, backend, search, cfg, measure }
    }

    fn placed(&self, t: &CostTable, plan: &Plan, pu: Option<&str>) -> std::result::Result<Plan, RuntimeError> {
        let placement = Placement {
            schedule: plan.schedule,
            objective: plan.objective,
            placement: plan.steps.iter().map(|s| (s.op.to_string(), pu.unwrap_or(&s.pu).to_string())).collect(),
        };
        bident_search::plan_from_placement(&self.phased, t, &placement)
            .map_err(|e| RuntimeError::Program(e.to_string()))
    }

    fn searched(&self, t: &CostTable, serving: &Plan) -> Result<Plan> {
        let plan = bident_search::search_by(self.search.as_ref(), &self.phased, t, &self.cfg)?;
        let stay = self.placed(t, serving, None)?;
        Ok(match bident_runtime::worth_moving(objective(&plan), objective(&stay)) {
            true => plan,
            false => stay,
        })
    }
}

impl Planner for TablePlanner {
    type Table = CostTable;

    fn price(&self, t: &CostTable, plan: &Plan) -> std::result::Result<Plan, RuntimeError> {
        self.placed(t, plan, None)
    }

    fn whole_on(&self, t: &CostTable, plan: &Plan, pu: usize) -> std::result::Result<Plan, RuntimeError> {
        let name = &self.soc.pus[pu].name;
        self.placed(t, plan, Some(name)).map_err(|e| RuntimeError::Program(format!("a standby plan on `{name}`: {e}")))
    }

    fn scaled(&self, t: &CostTable, pu: usize, factor: f64) -> CostTable {
        let mut t = t.clone();
        t.scale_pu(pu, factor);
        t
    }

    fn restored(&self, t: &CostTable, pu: usize, profiled: &CostTable) -> CostTable {
        let mut t = t.clone();
        t.restore_pu(pu, profiled);
        t
    }

    fn replan(&self, mut t: CostTable, serving: &Plan) -> std::result::Result<(Plan, CostTable, usize), RuntimeError> {
        let err = |e: DriverError| RuntimeError::Program(format!("re-planning: {e}"));
        let first = self.searched(&t, serving).map_err(err)?;
        let m = Remeasure {
            g: &self.graph,
            phased: &self.phased,
            soc: &self.soc,
            be: self.backend.as_ref(),
            cfg: self.measure.clone(),
            cache: None,
            session: None,
        };
        let before = t.segments.len();
        let plan = m.refine(&mut t, first, &mut |t| self.searched(t, serving), &mut |_| {}).map_err(err)?;
        let measured = t.segments.len() - before;
        Ok((plan, t, measured))
    }

    fn time_whole(&self, pu: usize) -> std::result::Result<f64, RuntimeError> {
        let cfg = ProfileConfig { warmup: 1, runs: RETIME_RUNS, adaptive: false, ..self.measure.clone() };
        let wanted = [(self.phased.order(), pu)];
        let name = &self.soc.pus[pu].name;
        let found = bident_profile::measure_segments(
            &self.graph,
            &self.soc,
            self.backend.as_ref(),
            &cfg,
            None,
            &wanted,
            &mut |_| {},
        )
        .map_err(|e| RuntimeError::Program(format!("timing the whole model on `{name}`: {e}")))?;
        found
            .first()
            .and_then(|s| s.per_pu.get(pu).cloned().flatten())
            .map(|c| c.weight_us() + c.h2d_us + c.d2h_us)
            .ok_or_else(|| RuntimeError::Program(format!("the whole model did not run on `{name}`")))
    }
}

/// The plan's predicted figure of its objective.
fn objective(plan: &Plan) -> f64 {
    match plan.objective {
        Objective::Latency => plan.predicted_us,
        Objective::Energy => plan.predicted_energy_uj,
    }
}

/// What a serving run did.
pub struct Served {
    pub switches: Vec<bident_runtime::Switch>,
    /// Every inference's latency (µs), in order.
    pub latencies: Vec<f64>,
    /// The plan serving at the end.
    pub plan: Plan,
    /// Where a slowed PU's fault made the server swap plans: a fresh plan (the profile's table
    /// re-priced by the injected slowdown, searched and refined on runs measured with that PU
    /// slowed, as a pipeline would) and its median latency (µs), served afresh so.
    pub fresh: Option<(Plan, f64)>,
    /// The search the server re-planned with.
    pub search: String,
}

impl Driver<'_> {
    /// Serve `inferences` inferences of the folder's plan through a [`Server`] that re-plans
    /// when a PU drifts (`opts.fault` may slow one on purpose: `PU:slow=F@N`), with the search
    /// that made the plan (bident's own, said, where that search is not registered: an
    /// imported plan). Every inference's outputs are checked against the whole model on an
    /// exact PU; a re-plan still in flight at the end is waited for; the server's trace goes to
    /// `serve-trace.json`. Where a `slow` fault made the server swap plans, a fresh plan is
    /// made and served with that PU slowed from the start ([`Served::fresh`]). Nothing else in
    /// the folder changes.
    pub fn serve(&self, folder: &Folder, inferences: usize, opts: &RunOptions, cfg: ServeConfig) -> Result<Served> {
        let _lock = folder.lock()?;
        bident_backend::deadline::set_limit(cfg.op_timeout);
        let p = folder.planned()?;
        let raw = self.backends_of_plan(folder, &p, opts)?;
        let be = self.faulty(raw.clone(), opts);
        let soc = p.costs.soc.clone();
        let inputs = bident_runtime::model_inputs(&p.g, opts.config.seed);
        let want = reference_outputs(&p.g, &soc, raw.clone(), &inputs, cfg.op_timeout)?;
        let search = match self.passes.shared_search(&p.plan.search) {
            Some(s) => s,
            None => {
                let s = self
                    .passes
                    .shared_search("bident")
                    .ok_or_else(|| DriverError::Invalid("no search `bident`".into()))?;
                self.note(
                    Stage::Run,
                    format!("no search `{}` is registered: re-planning with `bident`", p.plan.search),
                );
                s
            }
        };
        let searched_with = search.name().to_string();
        let planner =
            Arc::new(TablePlanner::new((p.g.clone(), p.phased.clone()), (soc.clone(), be.clone()), search, &p.plan));
        let mut server =
            Server::new(p.g.clone(), (planner.clone(), p.costs.clone()), (p.plan, soc.clone()), be, cfg.clone())?;
        let latencies = self.serve_checked(&mut server, &p.g, &inputs, &want, inferences, "serving")?;
        // a re-plan still measuring or compiling lands before anything else is timed
        server.settle(SETTLE).map_err(|e| DriverError::from(e).context("serving, the last re-plan"))?;
        let path = folder.path("serve-trace.json");
        crate::folder::write_replacing(&path, server.trace_json())?;
        self.note(Stage::Run, format!("the serving trace -> {}", path.display()));
        let swapped = server.switches().iter().any(|s| s.swapped_before().is_some());
        let fresh = match &opts.fault {
            Some(FaultSpec { pu, fault: Fault::SlowAfter(_, factor) }) if swapped => {
                let slowed = FaultSpec { pu: pu.clone(), fault: Fault::SlowAfter(0, *factor) };
                let be: Arc<dyn Backend> = Arc::new(FaultyBackend::new(raw, slowed));
                let fresh = Fresh { planner: &planner, costs: &p.costs, soc: &soc, be, pu, factor: factor.get() };
                self.serve_afresh(fresh, &p.g, (&inputs, &want), inferences.min(FRESH_INFERENCES), cfg)?
            }
            _ => None,
        };
        let (switches, plan) = (server.switches().to_vec(), server.plan().clone());
        Ok(Served { switches, latencies, plan, fresh, search: searched_with })
    }

    /// `n` inferences through `server`, each checked against `want`: their latencies (µs).
    fn serve_checked<P: Planner>(
        &self,
        server: &mut Server<P>,
        g: &FusedGraph,
        inputs: &[Arc<bident_tensor::HostTensor>],
        want: &[Arc<bident_tensor::HostTensor>],
        n: usize,
        what: &str,
    ) -> Result<Vec<f64>> {
        let mut latencies = vec![];
        for k in 0..n {
            let inf = server.infer(inputs)?;
            bident_runtime::check_plan_outputs(g, server.plan(), server.soc(), &inf.outputs[0], want)
                .map_err(|e| DriverError::from(e).context(format!("{what}, inference {k}")))?;
            latencies.push(inf.total_us);
            if (k + 1) % 100 == 0 || k + 1 == n {
                self.emit(Event::Progress { stage: Stage::Run, what: what.into(), done: k + 1, total: n });
            }
        }
        Ok(latencies)
    }

    /// What a fresh pipeline would plan with the PU slowed from the start (the profile
    /// re-priced by the slowdown, searched and refined through the slowed backend), served in
    /// a server that never ran another: the plan and its median latency, the latency a
    /// recovery is judged against.
    fn serve_afresh(
        &self,
        f: Fresh<'_>,
        g: &FusedGraph,
        (inputs, want): (&[Arc<bident_tensor::HostTensor>], &[Arc<bident_tensor::HostTensor>]),
        n: usize,
        cfg: ServeConfig,
    ) -> Result<Option<(Plan, f64)>> {
        let j = f.soc.pus.iter().position(|q| q.name == *f.pu);
        let j = j.ok_or_else(|| DriverError::Invalid(format!("no PU `{}` in the plan's SoC", f.pu)))?;
        let planner = TablePlanner { backend: f.be.clone(), ..f.planner.clone() };
        let costs = planner.scaled(f.costs, j, f.factor);
        let m = self.remeasure(
            (&planner.graph, &planner.phased),
            (f.soc, f.be.as_ref()),
            Measuring { cache: false, ..Default::default() },
        );
        let mut costs = costs;
        let search =
            |t: &CostTable| Ok(bident_search::search_by(planner.search.as_ref(), &planner.phased, t, &planner.cfg)?);
        let first = search(&costs)?;
        let plan = m.refine(&mut costs, first, &mut |t| search(t), &mut |line| self.note(Stage::Refine, line))?;
        // measured only: no standby sessions to compile
        let cfg = ServeConfig { standby: false, ..cfg };
        let planner = Arc::new(planner);
        let mut fresh = Server::new(g.clone(), (planner, costs), (plan.clone(), f.soc.clone()), f.be, cfg)?;
        let mut t = self.serve_checked(&mut fresh, g, inputs, want, n, "serving afresh")?;
        Ok((!t.is_empty()).then(|| (plan, bident_profile::quantile(&mut t, 0.5))))
    }
}

/// A fresh plan's ingredients ([`Driver::serve_afresh`]): the serving planner and its
/// profile, the SoC, the backend with the PU slowed from the start, and the slowdown.
struct Fresh<'a> {
    planner: &'a TablePlanner,
    costs: &'a CostTable,
    soc: &'a SocSpec,
    be: Arc<dyn Backend>,
    pu: &'a str,
    factor: f64,
}

/// The whole model's outputs on `inputs`, run on an exact PU of `soc` through `raw` (the
/// backend itself, not a fault wrapped around it): what every served inference must match.
fn reference_outputs(
    g: &FusedGraph,
    soc: &SocSpec,
    raw: Arc<dyn Backend>,
    inputs: &[Arc<bident_tensor::HostTensor>],
    timeout: Duration,
) -> Result<Vec<Arc<bident_tensor::HostTensor>>> {
    let reference = soc.pus.iter().position(|pu| pu.is_exact()).unwrap_or(0);
    let one = SocSpec { pus: vec![soc.pus[reference].clone()], ..soc.clone() };
    let whole = bident_runtime::Program::whole(g, &one, 0, g.reference_model()?)?;
    let session = bident_runtime::Session::load(whole, &one, raw, timeout)?;
    Ok(session.run(&[inputs.to_vec()])?.outputs.swap_remove(0))
}
