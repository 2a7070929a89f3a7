//! Serving with a plan that stays right: a [`Server`] runs inferences through a [`Session`],
//! watches each PU's measured task times against the plan's predictions, and when one PU
//! drifts (its measured/predicted ratio, against the ratio it showed after the plan was loaded,
//! stays past a threshold for a sustained run of windows) it re-prices that PU by the slowdown
//! it measured, searches again and compiles the new plan off the hot path, on a thread of its
//! own, while the old session keeps serving. The new session is swapped in between two
//! inferences: none is lost, and every inference runs one whole plan.
//!
//! The drifting PU's slowdown is measured from the spans of the inferences it served (the ops
//! the plan put there, timed as they ran), and applied to every entry of that PU: a slowed
//! device (throttled, contended) slows every op. A PU the new plan leaves is not seen in the
//! spans again, so the server times the whole model on it off the hot path just after, and
//! again every [`ServeConfig::recheck`]: once it runs faster than then by more than the
//! threshold, it has recovered, is priced as profiled again ([`Planner::restored`]) and
//! the plan re-planned as for a drift (the switch's factor below 1). Each re-check runs the
//! whole model on the PU a few times beside the inferences, so it is off by default.
//!
//! Compiling a new plan takes longer than many inferences of a small model (about 100 ms
//! here, where the example runs in 0.1 ms), so by default the server keeps a standby session
//! of the whole model on every other PU that runs it, compiled at load: a re-plan to one of
//! them swaps at the next inference. That costs a compiled copy of the model per PU. When a
//! PU drifts, the server first gives way at once to the standby the re-priced table puts
//! fastest, where it beats the slowed plan ([`Via::Standby`]), and then searches.
//!
//! The search prices runs of ops the table has not measured whole from pairs, and that can
//! miss by 2x (the example's split across `CPU` and `core1` predicted 46 µs, served in 105).
//! So a re-plan refines as the pipeline does: the runs its plan would serve that the table
//! prices from pairs are measured whole, off the hot path and through the drifting backend (so
//! in its present state), and the search runs again on the grown table, before anything is
//! compiled. What it measures never enters a profile cache: it is the PU's state while
//! drifting, not its normal.
//!
//! The server keeps no cost table of its own kind and runs no search: the prices it holds are
//! a [`Planner::Table`], and every pricing, search, refine and whole-model timing is asked of
//! the [`Planner`] that made the plan (the driver's, with the search the plan names and the
//! pipeline's one refine loop). The server decides only when to ask and what to serve.
//!
//! A re-plan that fails (its search, a measurement, or the new plan's compile) is recorded
//! ([`Outcome::Failed`]) and the serving plan goes on serving: no inference fails for it.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bident_backend::{Backend, SocSpec};
use bident_ir::FusedGraph;
use bident_search::{Objective, Plan};
use bident_tensor::HostTensor;

use crate::drift::DriftWatch;
use crate::{Grouping, Inference, Program, RuntimeError, Session};

/// How a [`Server`] watches for drift.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Inferences per window: a PU's ratio of measured to predicted time is taken per window.
    pub window: usize,
    /// A PU drifts when its window ratio is this many times its calibrated one...
    pub threshold: f64,
    /// ...in this many consecutive windows.
    pub sustain: usize,
    /// How the plan's ops are grouped into tasks.
    pub grouping: Grouping,
    /// The sessions' watchdog.
    pub op_timeout: Duration,
    /// Compile the whole model on every other PU at load, so that a re-plan to one of them
    /// swaps at once.
    pub standby: bool,
    /// How often a PU that a drift made the plan leave is timed again off the hot path (the
    /// whole model on it, against its time just after the drift), so that one that recovered
    /// is priced as profiled again and the plan searched again; None: never, the default. Where
    /// the PUs share CPU cores, as on this machine, the timings' runs beside the inferences
    /// cost more than they save: the drift bench's latency after the swap was 109-129 µs with
    /// re-checks every second against 69-72 without (a contended yield turns every session's
    /// polling off for up to a second; `session.rs`).
    pub recheck: Option<Duration>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            window: 5,
            threshold: 1.3,
            sustain: 2,
            grouping: Grouping::Merged,
            op_timeout: Duration::from_secs(60),
            standby: true,
            recheck: None,
        }
    }
}

/// How far below the serving plan a re-plan's plan must be predicted before the server
/// measures and compiles it while serving: the median prediction error the project aims
/// at. A plan predicted 5% faster is as likely to serve slower ([`worth_moving`]).
pub const MOVE_MARGIN: f64 = 0.10;

/// What a server asks of whoever made its plan: prices on a table the runtime does not read,
/// searches and whole-model timings. Shared with the server's re-plan threads.
pub trait Planner: Send + Sync + 'static {
    /// What plans are priced on (the driver's cost table).
    type Table: Clone + Send + 'static;
    /// `plan`'s placement priced on `table`, as the search would price it.
    fn price(&self, table: &Self::Table, plan: &Plan) -> Result<Plan, RuntimeError>;
    /// `plan`'s model whole on PU `pu` (by index), priced on `table`.
    fn whole_on(&self, table: &Self::Table, plan: &Plan, pu: usize) -> Result<Plan, RuntimeError>;
    /// `table` with PU `pu` priced `factor` times as high (its measured slowdown).
    fn scaled(&self, table: &Self::Table, pu: usize, factor: f64) -> Self::Table;
    /// `table` with PU `pu` priced as in `profiled` again (it recovered).
    fn restored(&self, table: &Self::Table, pu: usize, profiled: &Self::Table) -> Self::Table;
    /// Search again on `table`, refining the plan on runs measured whole, off the hot path:
    /// the plan to serve (the placement of `serving` where nothing beats it by more than
    /// [`MOVE_MARGIN`], [`worth_moving`]), the table grown by what was measured, and how many
    /// runs that was.
    fn replan(&self, table: Self::Table, serving: &Plan) -> Result<(Plan, Self::Table, usize), RuntimeError>;
    /// The whole model's time on PU `pu` (µs), measured now, in whatever state its cores are.
    fn time_whole(&self, pu: usize) -> Result<f64, RuntimeError>;
}

/// Runs of each standby session at load, before it may serve.
const STANDBY_WARMUP: usize = 5;

/// One re-plan: why, and what it changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    /// The inference (counted from 0) after which drift was detected.
    pub detected_after: usize,
    pub outcome: Outcome,
    /// Whether a standby session came in at once, or the search's plan.
    pub via: Via,
    pub pu: String,
    /// The PU's measured slowdown against its calibration.
    pub factor: f64,
    /// The old plan's and the new plan's predictions on the re-priced table.
    pub old_predicted_us: f64,
    pub new_predicted_us: f64,
    /// Ops per PU of the new plan.
    pub ops_per_pu: Vec<(String, u32)>,
    /// Runs of ops the search's refine measured whole before it settled on the plan.
    pub measured: usize,
}

/// Where a re-plan's plan came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A standby whole-model session, swapped in at the next inference: the re-priced table
    /// put it below the slowed plan, before any search.
    Standby,
    /// The search, refined on measured runs, off the hot path.
    Search,
}

/// Where a re-plan stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still being searched or compiled.
    Pending,
    /// The search kept the placement (on the re-priced table), decided before this inference.
    Kept(usize),
    /// The new plan served from this inference on.
    Swapped(usize),
    /// The search, a measurement or the new plan's compile failed, seen before this inference:
    /// the serving plan stays, and the drift is taken as the PU's new normal.
    Failed(usize, String),
}

impl Switch {
    /// The first inference the new plan served, if it was swapped in.
    pub fn swapped_before(&self) -> Option<usize> {
        match self.outcome {
            Outcome::Swapped(k) => Some(k),
            _ => None,
        }
    }
}

/// What a background re-plan gives.
struct Replanned<T> {
    plan: Plan,
    /// The re-priced table, grown by the runs the refine measured.
    costs: T,
    /// The serving plan's prediction on it.
    old_us: f64,
    /// The new plan's session: None where the placement did not change or a standby session
    /// runs it.
    session: Option<Session>,
    measured: usize,
}

/// A plan searched and compiled in the background.
struct Replan<T> {
    rx: mpsc::Receiver<Result<Replanned<T>, RuntimeError>>,
    switch: usize,
    /// The drifting PU and its slowdown, as the re-plan priced it.
    pu: usize,
    factor: f64,
    /// Whether a standby came in when the re-plan began (the PUs were calibrated afresh).
    gave_way: bool,
}

/// Inferences through a plan that is searched again, by its [`Planner`], when a PU drifts.
pub struct Server<P: Planner> {
    graph: Arc<FusedGraph>,
    planner: Arc<P>,
    costs: P::Table,
    soc: Arc<SocSpec>,
    backend: Arc<dyn Backend>,
    cfg: ServeConfig,
    plan: Plan,
    session: Session,
    served: usize,
    /// The drift rule over this session's inferences (the first window is the warm-up: the
    /// first inference after a load ran 30x slower here).
    drift: DriftWatch,
    pending: Option<Replan<P::Table>>,
    /// A standby a re-plan gave way to, swapped in before the next inference: its PU, its plan
    /// and the re-priced table.
    giving_way: Option<(usize, Plan, P::Table)>,
    /// The table as loaded, kept where re-checks are on: what a PU that recovered is priced as
    /// again.
    profiled: Option<P::Table>,
    /// Per PU a drift made the plan leave: the whole model's time on it just after (µs), None
    /// until it is measured.
    left: Vec<Option<Option<f64>>>,
    /// A re-check in flight ([`ServeConfig::recheck`]): the PU and its whole-model time.
    retiming: Option<(usize, mpsc::Receiver<Result<f64, RuntimeError>>)>,
    last_retime: Instant,
    /// Whole-model sessions compiled at load, by PU index ([`ServeConfig::standby`]).
    standby: Vec<(usize, Session)>,
    switches: Vec<Switch>,
    /// Every inference: when it started (µs since the server started), its total, and the
    /// session generation that served it.
    log: Vec<(f64, f64, usize)>,
    t0: Instant,
}

impl<P: Planner> Server<P> {
    /// Load `plan` (made by `planner` on `costs`, for `graph` on `soc`) and serve with it on
    /// `backend`.
    pub fn new(
        graph: FusedGraph,
        (planner, costs): (Arc<P>, P::Table),
        (plan, soc): (Plan, SocSpec),
        backend: Arc<dyn Backend>,
        cfg: ServeConfig,
    ) -> Result<Self, RuntimeError> {
        if cfg.window == 0 || cfg.sustain == 0 || !(cfg.threshold.is_finite() && cfg.threshold > 1.0) {
            return Err(RuntimeError::Program(format!(
                "serving needs a window and a sustain of at least 1 and a threshold above 1 (got {}, {}, {})",
                cfg.window, cfg.sustain, cfg.threshold
            )));
        }
        let session = Session::load(
            Program::from_plan(&graph, &plan, &soc, cfg.grouping)?,
            &soc,
            backend.clone(),
            cfg.op_timeout,
        )?;
        let mut standby = vec![];
        if cfg.standby {
            let inputs = crate::model_inputs(&graph, 0);
            for j in 0..soc.pus.len() {
                // a PU that cannot run every op has no whole-model plan
                let Some(on_j) =
                    (whole_on(&plan) != Some(j)).then(|| planner.whole_on(&costs, &plan, j).ok()).flatten()
                else {
                    continue;
                };
                let built = Program::from_plan(&graph, &on_j, &soc, cfg.grouping)?;
                let session = Session::load(built, &soc, backend.clone(), cfg.op_timeout)?;
                // a session's first runs are its slowest (30x here): a standby comes in warm
                for _ in 0..STANDBY_WARMUP {
                    session.run(std::slice::from_ref(&inputs))?;
                }
                standby.push((j, session));
            }
        }
        let n = soc.pus.len();
        let profiled = cfg.recheck.is_some().then(|| costs.clone());
        let drift = DriftWatch::new(n, cfg.window, cfg.threshold, cfg.sustain);
        Ok(Self {
            graph: Arc::new(graph),
            planner,
            costs,
            soc: Arc::new(soc),
            backend,
            cfg,
            plan,
            session,
            served: 0,
            drift,
            pending: None,
            giving_way: None,
            profiled,
            left: vec![None; n],
            retiming: None,
            last_retime: Instant::now(),
            standby,
            switches: vec![],
            log: vec![],
            t0: Instant::now(),
        })
    }

    /// The table the server prices plans on: the profile's, re-priced by every drift seen and
    /// grown by the runs re-plans measured.
    pub fn costs(&self) -> &P::Table {
        &self.costs
    }

    /// The SoC it serves on.
    pub fn soc(&self) -> &SocSpec {
        &self.soc
    }

    /// The plan serving now.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The re-plans so far.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// Inferences served so far.
    pub fn served(&self) -> usize {
        self.served
    }

    /// One inference of the model on `inputs` (graph input order). A standby given way to, and
    /// then a re-plan that finished compiling, are swapped in first.
    pub fn infer(&mut self, inputs: &[Arc<HostTensor>]) -> Result<Inference, RuntimeError> {
        self.land_recheck();
        self.start_recheck();
        self.give_way();
        self.swap_if_ready();
        let start = self.t0.elapsed().as_secs_f64() * 1e6;
        let inf = self.session.run(std::slice::from_ref(&inputs.to_vec()))?;
        self.log.push((start, inf.total_us, self.generation()));
        self.served += 1;
        self.watch(&inf);
        Ok(inf)
    }

    /// How many plans have served before the current one.
    fn generation(&self) -> usize {
        self.switches.iter().filter(|s| s.swapped_before().is_some()).count()
    }

    /// Land a timing of a PU a drift made the plan leave that finished: the first is what later
    /// ones are compared with; where a later one ran the whole model faster than that by more
    /// than the threshold, re-plan with the PU priced as profiled.
    fn land_recheck(&mut self) {
        let Some((pu, rx)) = &self.retiming else { return };
        let pu = *pu;
        match (rx.try_recv(), self.left[pu]) {
            (Err(mpsc::TryRecvError::Empty), _) => return,
            (Ok(Ok(now)), Some(None)) => self.left[pu] = Some(Some(now)),
            // the first timing failed: nothing to compare with, the PU is not watched
            (_, Some(None)) => self.left[pu] = None,
            (Ok(Ok(now)), Some(Some(then)))
                if recovered(now, then, self.cfg.threshold)
                    && self.pending.is_none()
                    && self.giving_way.is_none()
                    && self.profiled.is_some() =>
            {
                self.left[pu] = None;
                let costs = match &self.profiled {
                    Some(profiled) => self.planner.restored(&self.costs, pu, profiled),
                    None => self.costs.clone(),
                };
                self.replan_on(pu, now / then, costs);
            }
            // not recovered, or a timing that failed: tried again when the next is due
            _ => {}
        }
        self.retiming = None;
    }

    /// Time the whole model on a PU a drift made the plan leave, off the hot path: at once for
    /// the first timing, then every [`ServeConfig::recheck`].
    fn start_recheck(&mut self) {
        let Some(every) = self.cfg.recheck else { return };
        if self.retiming.is_some() || self.pending.is_some() {
            return;
        }
        let unused = |j: usize| !self.plan.ops_per_pu.contains_key(&self.soc.pus[j].name);
        let first = (0..self.left.len()).find(|&j| self.left[j] == Some(None) && unused(j));
        let due = || (0..self.left.len()).find(|&j| matches!(self.left[j], Some(Some(_))) && unused(j));
        let Some(pu) = first.or_else(|| (self.last_retime.elapsed() >= every).then(due).flatten()) else { return };
        self.last_retime = Instant::now();
        let planner = self.planner.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // a time of 0 or not finite compares with nothing: a "recovery" to 0 µs would
            // re-plan on it
            let timed = planner.time_whole(pu).and_then(|us| match us.is_finite() && us > 0.0 {
                true => Ok(us),
                false => Err(RuntimeError::Program(format!("the whole model timed at {us} µs"))),
            });
            let _ = tx.send(timed);
        });
        self.retiming = Some((pu, rx));
    }

    /// Serve with the standby a re-plan gave way to ([`Via::Standby`]), if one is due.
    fn give_way(&mut self) {
        let Some((j, plan, costs)) = self.giving_way.take() else { return };
        if let Some(k) = self.standby.iter().position(|(pu, _)| *pu == j) {
            let session = self.standby.swap_remove(k).1;
            self.swap_to(session);
            self.plan = plan;
            self.costs = costs;
            self.drift.recalibrate();
        }
    }

    /// Land a re-plan that finished: swap its session in, or keep the serving one.
    fn swap_if_ready(&mut self) {
        let Some(p) = &self.pending else { return };
        let got = match p.rx.try_recv() {
            Ok(got) => got,
            Err(mpsc::TryRecvError::Empty) => return,
            Err(mpsc::TryRecvError::Disconnected) => Err(RuntimeError::Program("the re-plan thread stopped".into())),
        };
        let (switch, pu, factor, gave_way) = (p.switch, p.pu, p.factor, p.gave_way);
        self.pending = None;
        let Replanned { plan, costs, old_us, session, measured } = match got {
            Ok(got) => got,
            Err(e) => {
                self.switches[switch].outcome = Outcome::Failed(self.served, crate::error_chain(&e));
                if !gave_way {
                    self.drift.rebase(pu, factor);
                }
                return;
            }
        };
        // a slowed PU the plan leaves is timed next, for its re-checks to compare with
        if factor > 1.0 && self.cfg.recheck.is_some() && !plan.ops_per_pu.contains_key(&self.soc.pus[pu].name) {
            self.left[pu] = Some(None);
        }
        let s = &mut self.switches[switch];
        s.old_predicted_us = old_us;
        s.new_predicted_us = plan.predicted_us;
        s.ops_per_pu = plan.ops_per_pu.iter().map(|(pu, &n)| (pu.clone(), n)).collect();
        s.measured = measured;
        let session = match (session, whole_on(&plan)) {
            (Some(session), _) => Some(session),
            (None, Some(j)) if whole_on(&self.plan) != Some(j) => {
                let k = self.standby.iter().position(|(pu, _)| *pu == j);
                k.map(|k| self.standby.swap_remove(k).1)
            }
            (None, _) => None,
        };
        let kept = session.is_none();
        s.outcome = if kept { Outcome::Kept(self.served) } else { Outcome::Swapped(self.served) };
        if let Some(session) = session {
            self.swap_to(session);
        }
        // kept or not, the plan is now priced on the re-priced table: the drift is the PU's
        // new normal
        self.costs = costs;
        self.plan = plan;
        match (kept, gave_way) {
            (true, false) => self.drift.rebase(pu, factor),
            // a standby came in when the re-plan began: the PUs were calibrated afresh then
            (true, true) => {}
            (false, _) => self.drift.recalibrate(),
        }
    }

    /// Serve with `session` from the next inference on. A whole-model session stands by for a
    /// later re-plan back to its PU; any other is dropped (its workers, idle between
    /// inferences, are joined here).
    fn swap_to(&mut self, session: Session) {
        let old = std::mem::replace(&mut self.session, session);
        if let Some(j) = whole_on(&self.plan) {
            self.standby.push((j, old));
        }
    }

    /// Take one inference's time per PU against the plan's prediction into the drift rule
    /// ([`DriftWatch`]); re-plan for a PU it reports.
    fn watch(&mut self, inf: &Inference) {
        let program = self.session.program();
        let n = self.soc.pus.len();
        let (mut measured, mut predicted) = (vec![0.0; n], vec![0.0; n]);
        for s in &inf.spans {
            let t = &program.tasks[s.task];
            measured[t.pu] += s.finish_us - s.start_us;
            predicted[t.pu] += t.predicted.1 - t.predicted.0;
        }
        // an inference beside the server's own measuring (a re-check, a re-plan's refine) is no
        // evidence: on cores the PUs share, re-checks every 20 ms drifted the serving PU 2.7x
        let measuring = self.retiming.is_some() || self.pending.is_some();
        let ratios: Vec<Option<f64>> =
            (0..n).map(|pu| (predicted[pu] > 0.0 && !measuring).then(|| measured[pu] / predicted[pu])).collect();
        if let Some((pu, factor)) = self.drift.observe(&ratios, self.pending.is_none()) {
            self.replan(pu, factor);
        }
    }

    /// Re-price `pu` by `factor`; give way at once to the standby that beats the slowed plan
    /// most on the re-priced table, if one does; then search, refine and compile in the
    /// background.
    fn replan(&mut self, pu: usize, factor: f64) {
        let costs = self.planner.scaled(&self.costs, pu, factor);
        self.replan_on(pu, factor, costs);
    }

    /// Re-plan on `costs`, the table re-priced for PU `pu` by `factor` (its time now against
    /// before): the standby first, then the search in the background.
    fn replan_on(&mut self, pu: usize, factor: f64, costs: P::Table) {
        let (detected_after, name) = (self.served - 1, self.soc.pus[pu].name.clone());
        // a plan the table cannot price gives way to no standby: the search says why
        if let Ok(staying) = self.planner.price(&costs, &self.plan) {
            let mut wholes: Vec<(usize, Plan)> = self
                .standby
                .iter()
                .filter_map(|(j, _)| Some((*j, self.planner.whole_on(&costs, &self.plan, *j).ok()?)))
                .collect();
            let priced: Vec<f64> = wholes.iter().map(|(_, p)| objective(p)).collect();
            if let Some(k) = standby_to_give_way(objective(&staying), &priced) {
                let (j, plan) = wholes.swap_remove(k);
                self.switches.push(Switch {
                    detected_after,
                    outcome: Outcome::Swapped(self.served),
                    via: Via::Standby,
                    pu: name.clone(),
                    factor,
                    old_predicted_us: staying.predicted_us,
                    new_predicted_us: plan.predicted_us,
                    ops_per_pu: plan.ops_per_pu.iter().map(|(pu, &n)| (pu.clone(), n)).collect(),
                    measured: 0,
                });
                self.giving_way = Some((j, plan, costs.clone()));
            }
        }
        // the standbys and the plan as they will be once a standby given way to is in
        let mut standing: Vec<usize> = self.standby.iter().map(|(j, _)| *j).collect();
        let serving = match &self.giving_way {
            Some((j, plan, _)) => {
                standing.retain(|k| k != j);
                standing.extend(whole_on(&self.plan));
                plan.clone()
            }
            None => self.plan.clone(),
        };
        self.switches.push(Switch {
            detected_after,
            outcome: Outcome::Pending,
            via: Via::Search,
            pu: name,
            factor,
            old_predicted_us: self.plan.predicted_us,
            new_predicted_us: f64::NAN,
            ops_per_pu: vec![],
            measured: 0,
        });
        let switch = self.switches.len() - 1;
        let gave_way = self.giving_way.is_some();
        let (graph, soc, backend, planner) =
            (self.graph.clone(), self.soc.clone(), self.backend.clone(), self.planner.clone());
        let (grouping, op_timeout) = (self.cfg.grouping, self.cfg.op_timeout);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = (|| {
                let (plan, costs, measured) = planner.replan(costs, &serving)?;
                let old_us = planner.price(&costs, &serving)?.predicted_us;
                let moved = !same_placement(&plan, &serving);
                let session = match moved && !whole_on(&plan).is_some_and(|j| standing.contains(&j)) {
                    true => {
                        let program = Program::from_plan(&graph, &plan, &soc, grouping)?;
                        Some(Session::load(program, &soc, backend, op_timeout)?)
                    }
                    false => None,
                };
                Ok(Replanned { plan, costs, old_us, session, measured })
            })();
            let _ = tx.send(r);
        });
        self.pending = Some(Replan { rx, switch, pu, factor, gave_way });
    }

    /// Wait for a re-check and a re-plan in flight to land (tests, and a caller about to stop
    /// serving).
    pub fn settle(&mut self, timeout: Duration) -> Result<(), RuntimeError> {
        let t0 = Instant::now();
        while self.pending.is_some() || self.retiming.is_some() {
            if t0.elapsed() > timeout {
                return Err(RuntimeError::Program("the re-plan did not finish in time".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
            self.land_recheck();
            self.give_way();
            self.swap_if_ready();
        }
        Ok(())
    }

    /// Every inference served as a Chrome trace (Perfetto): one slice per inference on the
    /// track of the plan that served it, and an instant event at each detection and swap.
    pub fn trace_json(&self) -> String {
        let mut events = vec![];
        for (k, &(start, total, generation)) in self.log.iter().enumerate() {
            events.push(serde_json::json!({
                "name": format!("inference {k}"), "ph": "X", "pid": 1, "tid": generation,
                "ts": start, "dur": total,
            }));
        }
        for s in &self.switches {
            let at = |k: usize| self.log.get(k).map_or(0.0, |l| l.0 + l.1);
            events.push(serde_json::json!({
                "name": match s.factor < 1.0 {
                    true => format!("{} recovered ({:.2}x): re-planning", s.pu, s.factor),
                    false => format!("drift on {} ({:.2}x): re-planning", s.pu, s.factor),
                },
                "ph": "i", "s": "g",
                "pid": 1, "tid": 0, "ts": at(s.detected_after),
            }));
            if let Some(k) = s.swapped_before() {
                events.push(serde_json::json!({
                    "name": format!(
                        "new plan: predicted {:.1} µs (was {:.1} on the re-priced table)",
                        s.new_predicted_us, s.old_predicted_us
                    ),
                    "ph": "i", "s": "g", "pid": 1, "tid": 0, "ts": at(k.saturating_sub(1)),
                }));
            }
        }
        let mut names = vec![];
        for g in 0..=self.generation() {
            names.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": g, "args": { "name": format!("plan {g}") },
            }));
        }
        events.extend(names);
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" }).to_string()
    }
}

/// Which standby a re-plan gives way to at once, as an index into `standbys` (each one's whole
/// model priced on the re-priced table, in the objective's unit): the cheapest, if it is below
/// `staying`, the serving plan priced on that table; ties go to the first.
fn standby_to_give_way(staying: f64, standbys: &[f64]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (k, &v) in standbys.iter().enumerate() {
        if v < best.map_or(staying, |b| b.1) {
            best = Some((k, v));
        }
    }
    best.map(|b| b.0)
}

/// Whether a searched plan predicted at `new` is worth measuring and compiling while serving,
/// against the plan `staying` at: below it by more than [`MOVE_MARGIN`].
pub fn worth_moving(new: f64, staying: f64) -> bool {
    new <= staying * (1.0 - MOVE_MARGIN)
}

/// Whether a PU a drift made the plan leave has recovered: its whole-model time `now` is below
/// `then` (just after the drift) by more than the drift `threshold`.
fn recovered(now: f64, then: f64, threshold: f64) -> bool {
    now * threshold < then
}

/// Whether two plans put every op on the same PU.
fn same_placement(a: &Plan, b: &Plan) -> bool {
    let of = |p: &Plan| p.steps.iter().map(|s| (s.op, s.pu.clone())).collect::<std::collections::BTreeMap<_, _>>();
    of(a) == of(b)
}

/// The plan's predicted figure of its objective.
fn objective(plan: &Plan) -> f64 {
    match plan.objective {
        Objective::Latency => plan.predicted_us,
        Objective::Energy => plan.predicted_energy_uj,
    }
}

/// The PU index a plan puts every op on, if it puts them all on one.
fn whole_on(plan: &Plan) -> Option<usize> {
    match plan.ops_per_pu.len() {
        1 => plan.pus.iter().position(|p| plan.ops_per_pu.contains_key(p)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standby given way to is the cheapest below the serving plan, none when none is
    /// below it (a tie with the serving plan does not move), the first of equals.
    #[test]
    fn the_cheapest_standby_below_the_serving_plan_is_given_way_to() {
        assert_eq!(standby_to_give_way(100.0, &[120.0, 80.0, 90.0]), Some(1));
        assert_eq!(standby_to_give_way(100.0, &[120.0, 100.0]), None);
        assert_eq!(standby_to_give_way(100.0, &[]), None);
        assert_eq!(standby_to_give_way(100.0, &[70.0, 70.0]), Some(0));
        assert_eq!(standby_to_give_way(f64::INFINITY, &[1e9]), Some(0));
    }

    /// A searched plan moves only past the margin: 10% below the serving plan, not 9%.
    #[test]
    fn a_searched_plan_moves_only_past_the_margin() {
        assert!(worth_moving(89.0, 100.0));
        assert!(worth_moving(90.0, 100.0));
        assert!(!worth_moving(91.0, 100.0));
        assert!(!worth_moving(120.0, 100.0));
    }

    /// A PU left after a drift has recovered when it runs the model faster than just after the
    /// drift by more than the threshold, not by as much.
    #[test]
    fn a_left_pu_recovers_past_the_threshold() {
        assert!(recovered(100.0, 140.0, 1.3));
        assert!(!recovered(100.0, 130.0, 1.3));
        assert!(!recovered(100.0, 120.0, 1.3));
    }
}
