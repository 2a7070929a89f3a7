//! The alternatives a plan is measured beside: the whole model on its reference PU, every
//! backend's own defaults, and the models whole on the PUs asked for.

use bident_backend::{Backend, PuSpec, SocSpec};
use bident_ir::FusedGraph;
use bident_search::Plan;

use crate::measure::Bench;
use crate::whole::whole;
use crate::{BackendDefault, Program, RunConfig, RuntimeError, Session, WholeRun};

/// The sessions a plan is measured beside, loaded.
pub(crate) struct Alternatives<'a> {
    /// Per model, the whole model on its reference PU, and that PU.
    pub mono: Vec<Session>,
    pub refs: Vec<&'a PuSpec>,
    /// Every backend's own defaults on the reference PUs' devices, and their sessions (none
    /// where the backend refused a model, or the plan is that default).
    pub defaults: Vec<(BackendDefault, Vec<Session>)>,
    /// The models whole on each PU of [`RunConfig::whole_on`], and their sessions (none where
    /// the PU refused a model, or the run is the same as another measured beside it).
    pub wholes: Vec<(WholeRun, Vec<Session>)>,
}

impl<'a> Alternatives<'a> {
    /// Load every alternative. `best`: each model's reference PU; `plan_whole_on`: the PU the
    /// plan runs the whole model on, if it does; `plan_is_default`: the backend whose
    /// whole-model default the plan is, if it is one. An error where no backend runs the models
    /// at its defaults.
    pub(crate) fn load(
        bench: &Bench<'a>,
        best: &[String],
        plan_whole_on: Option<&str>,
        plan_is_default: Option<&str>,
    ) -> Result<Self, RuntimeError> {
        let soc = bench.soc;
        let mut mono = vec![];
        let mut refs: Vec<&PuSpec> = vec![];
        for (g, best) in bench.graphs.iter().zip(best) {
            let pu = soc.pus.iter().find(|p| &p.name == best).ok_or_else(|| RuntimeError::UnknownPu {
                what: "the whole model".into(),
                pu: best.clone(),
                soc: soc.name.clone(),
            })?;
            mono.push(whole(g, pu, &soc.name, &bench.backend, bench.cfg)?);
            refs.push(pu);
        }
        // every backend's own defaults on the reference PUs' devices; one that refuses a model
        // is reported, not measured
        let mut defaults: Vec<(BackendDefault, Vec<Session>)> = vec![];
        for b in bench.backend.backends() {
            defaults.push(backend_default(bench, &refs, &b, plan_is_default == Some(b.as_str()))?);
        }
        let mut wholes: Vec<(WholeRun, Vec<Session>)> = vec![];
        for name in &bench.cfg.whole_on {
            wholes.push(whole_on(bench, name, best, plan_whole_on)?);
        }
        if defaults.iter().all(|(d, _)| d.refused.is_some()) {
            let why: Vec<String> = defaults
                .iter()
                .map(|(d, _)| format!("{}: {}", d.backend, d.refused.as_deref().unwrap_or("?")))
                .collect();
            return Err(RuntimeError::Program(format!(
                "no backend runs the whole model at its defaults ({})",
                why.join("; ")
            )));
        }
        Ok(Self { mono, refs, defaults, wholes })
    }
}

/// The models whole on PU `name` ([`RunConfig::whole_on`]) and their sessions: none where a
/// run measured beside the plan anyway is this one, or where the PU refuses a model.
fn whole_on(
    bench: &Bench,
    name: &str,
    best: &[String],
    plan_whole_on: Option<&str>,
) -> Result<(WholeRun, Vec<Session>), RuntimeError> {
    let soc = bench.soc;
    let pu = soc.pu(name).ok_or_else(|| RuntimeError::UnknownPu {
        what: "a whole-model run".into(),
        pu: name.to_string(),
        soc: soc.name.clone(),
    })?;
    let run = WholeRun {
        pu: name.to_string(),
        measured_us: None,
        refused: None,
        same_as: None,
        block_ratios: vec![],
        configuration: pu.configuration(),
    };
    // a run measured beside it anyway is not measured twice (two sessions of one
    // configuration differ only by noise)
    let same_as = match plan_whole_on {
        Some(pu) if pu == name => Some("the plan".to_string()),
        _ if best.len() == 1 && best[0] == *name => Some("the reference".to_string()),
        _ if bench.graphs.len() == 1 && is_default_configuration(pu, bench.backend.as_ref(), bench.cfg)? => {
            Some(pu.backend.clone())
        }
        _ => None,
    };
    if same_as.is_some() {
        return Ok((WholeRun { same_as, ..run }, vec![]));
    }
    let sessions: Result<Vec<Session>, RuntimeError> =
        bench.graphs.iter().map(|g| whole(g, pu, &soc.name, &bench.backend, bench.cfg)).collect();
    Ok(match sessions {
        Ok(s) => (run, s),
        Err(e) => (WholeRun { refused: Some(e.to_string()), ..run }, vec![]),
    })
}

/// The backend whose whole-model default the program is, if it is one: a single task of the
/// whole model on a PU of the default's configuration.
pub(crate) fn whole_default(
    g: &FusedGraph,
    program: &Program,
    soc: &SocSpec,
    backend: &dyn Backend,
    cfg: &RunConfig,
) -> Result<Option<String>, RuntimeError> {
    let [task] = &program.tasks[..] else { return Ok(None) };
    if task.ops.len() != g.ops.len() {
        return Ok(None);
    }
    let pu = &soc.pus[task.pu];
    Ok(is_default_configuration(pu, backend, cfg)?.then(|| pu.backend.clone()))
}

/// Whether compiling for `pu` is compiling with its backend's whole-model defaults.
fn is_default_configuration(pu: &PuSpec, backend: &dyn Backend, cfg: &RunConfig) -> Result<bool, RuntimeError> {
    let devices = backend.devices_of(&pu.backend).map_err(|e| RuntimeError::Program(e.to_string()))?;
    let Some(d) = devices.iter().find(|d| d.kind == pu.kind && d.name == pu.device) else { return Ok(false) };
    Ok(pu.same_configuration(&default_spec(pu, &pu.backend, cfg), d.precision.as_deref()))
}

/// The PU backend `b`'s whole-model default compiles for, on the device of `of`: no
/// properties, not pinned; f32 requested where the run compares in exact precision.
pub fn default_spec(of: &PuSpec, b: &str, cfg: &RunConfig) -> PuSpec {
    let mut spec = PuSpec::backend_default(&PuSpec { backend: b.to_string(), ..of.clone() });
    if cfg.exact_defaults && of.kind == bident_backend::PuKind::Cpu {
        spec.properties.insert(bident_backend::soc::PRECISION_KEY.into(), "f32".into());
    }
    spec
}

/// The PU the whole model runs on as reference and baseline: the plan's best single PU, unless
/// the plan excludes it (a fallback plan), then the best single PU it allows.
/// Among exact (f32) PUs where the SoC has one: a reduced-precision PU is no reference.
pub fn reference_pu(plan: &Plan, soc: &SocSpec) -> Option<String> {
    let any_exact = soc.pus.iter().any(PuSpec::is_exact);
    let allowed = |pu: &str| {
        !plan.constraints.exclude.iter().any(|e| e == pu) && (!any_exact || soc.pu(pu).is_some_and(PuSpec::is_exact))
    };
    match &plan.best_single_pu {
        Some(b) if allowed(b) => Some(b.clone()),
        _ => plan
            .baselines
            .iter()
            .filter(|b| allowed(&b.pu))
            .filter_map(|b| b.predicted_us.map(|t| (t, &b.pu)))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, pu)| pu.clone()),
    }
}

/// Backend `b`'s whole-model defaults for each of the models, on the device of its reference PU:
/// the baseline's description and its sessions (none, and why, where `b` has no such device
/// or refuses a model; none where the plan is this default, `is_plan`).
fn backend_default(
    bench: &Bench,
    refs: &[&PuSpec],
    b: &str,
    is_plan: bool,
) -> Result<(BackendDefault, Vec<Session>), RuntimeError> {
    let (graphs, backend, cfg) = (bench.graphs, &bench.backend, bench.cfg);
    let devices = backend.devices_of(b).map_err(|e| RuntimeError::Program(e.to_string()))?;
    let (mut sessions, mut names, mut precision, mut refused) = (vec![], vec![], None, None);
    for (g, pu) in graphs.iter().zip(refs) {
        let Some(d) = devices.iter().find(|d| d.kind == pu.kind && d.name == pu.device) else {
            refused = Some(format!("no device `{}`", pu.device));
            break;
        };
        precision = if cfg.exact_defaults { Some("f32".into()) } else { d.precision.clone() };
        names.push(d.name.clone());
        if is_plan {
            continue;
        }
        match whole(g, &default_spec(pu, b, cfg), "backend-default", backend, cfg) {
            Ok(s) => sessions.push(s),
            Err(e) => {
                refused = Some(e.to_string());
                sessions.clear();
                break;
            }
        }
    }
    names.dedup();
    let at = match precision.as_deref() {
        _ if cfg.exact_defaults => "f32 requested: --precision exact".to_string(),
        Some(p) => format!("{p} on this machine"),
        None => "precision not reported".to_string(),
    };
    let description = format!("{b} {} defaults ({at}), not pinned", names.join(" + "));
    let d = BackendDefault {
        backend: b.to_string(),
        description,
        precision,
        measured_us: None,
        is_plan: is_plan && refused.is_none(),
        refused,
        max_abs_err: None,
        block_ratios: vec![],
    };
    Ok((d, sessions))
}
