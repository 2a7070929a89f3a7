//! Checking outputs: the tolerance of the precision a plan computes in, and each output against
//! the whole model's on an exact PU.

use std::sync::Arc;

use bident_backend::{DType, PuSpec, SocSpec};
use bident_ir::FusedGraph;
use bident_search::Plan;
use bident_tensor::HostTensor;

use crate::baselines::Alternatives;
use crate::measure::Bench;
use crate::whole::whole;
use crate::{BackendDefault, Program, RuntimeError, Session};

/// One model's outputs, in graph order.
type Outputs = Vec<Arc<HostTensor>>;

/// The outputs a plan's are checked against, and how far from them each may be.
pub(crate) struct Expected {
    /// Per model, the outputs of the whole model on an exact PU.
    pub wants: Vec<Outputs>,
    /// The coarsest precision below f32 the plan computes in ([`reduced_precision`]).
    pub reduced: Option<DType>,
    /// Per model and output: how far the other engines' exact whole-model outputs, and those of
    /// each exact PU the plan uses, are from the reference's.
    pub engines_apart: Vec<Option<Vec<f64>>>,
    /// Per backend default (as [`Alternatives::defaults`]), per model and output: how far its
    /// outputs are from the reference's; None where it has no sessions.
    pub default_errs: Vec<Option<Vec<Vec<f64>>>>,
    /// Per model and output: how far the plan's outputs may be from the reference's
    /// ([`check_outputs`]).
    pub allowance: Vec<Option<Vec<f64>>>,
}

impl Expected {
    /// How far each engine's default is from the f32 reference, with the same inputs: where the
    /// plan computes in a reduced precision, it may be as far from f32 as the engine's own
    /// default at that precision (what a user would run instead), not further; a plan that is
    /// an engine's default gives that engine's own outputs (in f32 too: engines round apart).
    pub(crate) fn of(
        bench: &Bench,
        program: &Program,
        alternatives: &Alternatives,
        inputs: &[Vec<Arc<HostTensor>>],
        reduced: Option<DType>,
    ) -> Result<Self, RuntimeError> {
        let soc = bench.soc;
        let used: Vec<&str> =
            program.queues.iter().zip(&soc.pus).filter(|(q, _)| !q.is_empty()).map(|(_, p)| p.name.as_str()).collect();
        let (mut wants, mut engines_apart) = (vec![], vec![]);
        for m in 0..bench.graphs.len() {
            let (want, apart) = reference_outputs(bench, m, alternatives, inputs, &used)?;
            engines_apart.push(apart);
            wants.push(want);
        }
        let mut default_errs: Vec<Option<Vec<Vec<f64>>>> = vec![];
        for (_, sessions) in &alternatives.defaults {
            let mut per_model = vec![];
            for (m, s) in sessions.iter().enumerate() {
                let got = s.run(std::slice::from_ref(&inputs[m]))?.outputs.swap_remove(0);
                per_model.push(output_errors(bench.graphs[m], &got, &wants[m])?);
            }
            default_errs.push((!sessions.is_empty()).then_some(per_model));
        }
        let allowance = allowances(bench.graphs, &alternatives.defaults, &default_errs, &engines_apart, reduced);
        Ok(Self { wants, reduced, engines_apart, default_errs, allowance })
    }

    /// The tolerance every run was checked with, in words; `needed_allowance`: whether some
    /// output needed its allowance.
    pub(crate) fn tolerance_said(&self, defaults: &[BackendDefault], needed_allowance: bool) -> String {
        let reduced = self.reduced;
        let engine = defaults.iter().find(|d| needed_allowance && (d.is_plan || d.computes_in(reduced)));
        let mut tolerance = tolerance_words(reduced, engine);
        let apart = self.engines_apart.iter().flatten().flatten().fold(f64::NAN, |a, &b| a.max(b));
        if needed_allowance && apart.is_finite() {
            tolerance.push_str(&format!(
                ", or no further from it than the engines' and the plan's PUs' exact whole-model runs are from it (max \
                 abs {apart:.3e})"
            ));
        }
        tolerance
    }
}

/// Model `m`'s reference outputs (`inputs`: every model's), and how far from them the other engines' exact whole-model
/// outputs are, and those of each exact PU the plan uses (`used`). Engines round apart even in
/// f32, one engine on one core and on two does too, and a model that quantises its
/// activations, as BitNet and the INT8 zoo do, turns that into whole steps: a plan may be that
/// far from it too (the INT8 ViT's outputs moved by one step, 0.144, between OpenVINO on one
/// core and on both, so a plan running on both failed against the one-core reference).
fn reference_outputs(
    bench: &Bench,
    m: usize,
    alternatives: &Alternatives,
    inputs: &[Vec<Arc<HostTensor>>],
    used: &[&str],
) -> Result<(Outputs, Option<Vec<f64>>), RuntimeError> {
    let (g, soc, backend, cfg) = (bench.graphs[m], bench.soc, &bench.backend, bench.cfg);
    let inputs = std::slice::from_ref(&inputs[m]);
    // the reference outputs are exact: a baseline PU in a reduced precision (a concurrent
    // plan's best single PU may be one) leaves them to an exact PU of the SoC
    let (exact, reference_pu) = match soc.pus.iter().find(|p| p.is_exact()) {
        Some(pu) if !alternatives.refs[m].is_exact() => (Some(whole(g, pu, &soc.name, backend, cfg)?), pu),
        _ => (None, alternatives.refs[m]),
    };
    let reference = exact.as_ref().unwrap_or(&alternatives.mono[m]);
    let want = reference.run(inputs)?.outputs.swap_remove(0);
    let mut apart: Option<Vec<f64>> = None;
    let mut seen = vec![reference_pu.backend.as_str()];
    for pu in soc.pus.iter().filter(|p| p.is_exact() && p.name != reference_pu.name) {
        // the first PU of another engine is needed; one the plan uses counts where it can
        // run the whole model
        let needed = !seen.contains(&pu.backend.as_str());
        if !needed && !used.contains(&pu.name.as_str()) {
            continue;
        }
        seen.push(pu.backend.as_str());
        // a whole-model session on that PU loaded beside the plan already is reused
        let loaded = alternatives
            .wholes
            .iter()
            .find(|(w, s)| w.pu == pu.name && s.len() == bench.graphs.len())
            .map(|(_, s)| &s[m]);
        let fresh;
        let session = match loaded {
            Some(s) => s,
            None => match whole(g, pu, &soc.name, backend, cfg) {
                Ok(s) => {
                    fresh = s;
                    &fresh
                }
                Err(_) if !needed => continue,
                Err(e) => return Err(e),
            },
        };
        let got = session.run(inputs)?.outputs.swap_remove(0);
        let e = output_errors(g, &got, &want)?;
        apart = Some(match apart {
            Some(a) => a.iter().zip(&e).map(|(x, y)| x.max(*y)).collect(),
            None => e,
        });
    }
    Ok((want, apart))
}

/// Each model's outputs' allowance: the engine default's at the plan's precision (its
/// `default_errs`, infinite where the plan is that default), or the engines' distance from each
/// other (`engines_apart`), whichever is larger.
fn allowances(
    graphs: &[&FusedGraph],
    defaults: &[(BackendDefault, Vec<Session>)],
    default_errs: &[Option<Vec<Vec<f64>>>],
    engines_apart: &[Option<Vec<f64>>],
    reduced: Option<DType>,
) -> Vec<Option<Vec<f64>>> {
    let allowance: Option<Vec<Vec<f64>>> =
        defaults.iter().zip(default_errs).filter(|((d, _), _)| d.is_plan || d.computes_in(reduced)).find_map(
            |((d, _), e)| match e {
                // the plan is that default: its outputs are the engine's own, at its precision
                None if d.is_plan => Some(graphs.iter().map(|g| vec![f64::INFINITY; g.outputs.len()]).collect()),
                e => e.clone(),
            },
        );
    engines_apart
        .iter()
        .enumerate()
        .map(|(m, apart)| match (allowance.as_ref().map(|a| &a[m]), apart) {
            (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| x.max(*y)).collect()),
            (a, b) => a.or(b.as_ref()).cloned(),
        })
        .collect()
}

/// The coarsest precision below f32 that a PU the program uses computes in: bf16, or f16 (also
/// for a PU that leaves the precision to its device); None where every PU used is exact.
pub(crate) fn reduced_precision(soc: &SocSpec, program: &Program) -> Option<DType> {
    let used = program.queues.iter().enumerate().filter(|(_, q)| !q.is_empty()).map(|(j, _)| &soc.pus[j]);
    coarsest(used)
}

/// The coarsest precision below f32 of `pus`.
fn coarsest<'a>(pus: impl Iterator<Item = &'a PuSpec>) -> Option<DType> {
    pus.filter(|p| !p.is_exact())
        .map(|p| match p.precision() {
            Some(x) if x.eq_ignore_ascii_case("bf16") => DType::Bf16,
            _ => DType::F16,
        })
        .max_by_key(|d| matches!(d, DType::Bf16))
}

/// The tolerance a run was checked with, in words; `engine`: the default at the plan's reduced
/// precision whose own distance from f32 some output needed.
fn tolerance_words(reduced: Option<DType>, engine: Option<&BackendDefault>) -> String {
    let (rtol, atol) = tolerance(DType::F32, reduced);
    let why = match reduced {
        Some(d) => format!("some ops run in {d}"),
        None => "every op runs in f32".into(),
    };
    let within =
        format!("float outputs within {atol:e} x max|output| + {rtol:e} x |expected| of the f32 whole model ({why})");
    match engine {
        Some(d) if d.is_plan => format!(
            "{within}, or, since the plan is {}, the engine's own outputs (max abs error {:.3e})",
            d.description,
            d.max_abs_err.unwrap_or(f64::NAN)
        ),
        Some(d) => format!(
            "{within}, or no further from it than {} (max abs error {:.3e})",
            d.description,
            d.max_abs_err.unwrap_or(f64::NAN)
        ),
        None => within,
    }
}

/// How close the plan's outputs must be to the monolithic run's: `|got - want| <= atol + rtol
/// |want|`, with `atol` relative to the output's largest magnitude (fusion reorders float sums).
/// Float outputs of a plan that computes some ops in a reduced precision (`reduced`: the
/// coarsest of its PUs, bf16 or f16) get that precision's tolerance.
fn tolerance(dtype: DType, reduced: Option<DType>) -> (f64, f64) {
    match (dtype, reduced) {
        (DType::F32 | DType::F64, Some(DType::Bf16)) | (DType::Bf16, _) => (5e-2, 2e-2),
        (DType::F32 | DType::F64, Some(_)) | (DType::F16, _) => (2e-2, 1e-2),
        (DType::F32 | DType::F64, None) => (1e-3, 1e-4),
        // quantized outputs may round one step apart
        (DType::I8 | DType::U8, _) => (0.0, 1.0),
        _ => (0.0, 0.0),
    }
}

/// A plan's outputs against the whole model's on an exact PU (`want`), within the tolerance of
/// the coarsest precision the plan's PUs compute in: the largest absolute difference, or the
/// first output out of tolerance. What a caller serving a plan checks its answers with.
pub fn check_plan_outputs(
    g: &FusedGraph,
    plan: &Plan,
    soc: &SocSpec,
    got: &[Arc<HostTensor>],
    want: &[Arc<HostTensor>],
) -> Result<f64, RuntimeError> {
    let used = soc.pus.iter().filter(|p| plan.ops_per_pu.get(&p.name).is_some_and(|&n| n > 0));
    Ok(check_outputs(g, got, want, coarsest(used), None)?.0)
}

/// Each output's largest absolute difference from the reference's (in graph order).
fn output_errors(g: &FusedGraph, got: &[Arc<HostTensor>], want: &[Arc<HostTensor>]) -> Result<Vec<f64>, RuntimeError> {
    if got.len() != want.len() {
        return Err(RuntimeError::Outputs(format!("{} outputs where the model has {}", got.len(), want.len())));
    }
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(k, (a, b))| {
            a.max_abs_diff(b)
                .map_err(|e| RuntimeError::Outputs(format!("`{}` of `{}`: {e}", g.tensor(g.outputs[k]).name, g.name)))
        })
        .collect()
}

/// Check a run's outputs against the monolithic run's (in graph order): the largest absolute
/// difference, and whether an output needed its allowance; the first output out of tolerance
/// is an error. `allowance[k]`: how far output `k` of the engine's own default at the plan's
/// reduced precision is from the reference.
pub(crate) fn check_outputs(
    g: &FusedGraph,
    got: &[Arc<HostTensor>],
    want: &[Arc<HostTensor>],
    reduced: Option<DType>,
    allowance: Option<&[f64]>,
) -> Result<(f64, bool), RuntimeError> {
    let errors = output_errors(g, got, want)?;
    let (mut worst, mut loose) = (0.0f64, false);
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let allowed = allowance.and_then(|e| e.get(k).copied());
        loose |= check_output(a, b, errors[k], reduced, allowed).map_err(|why| {
            RuntimeError::Outputs(format!("`{}` of `{}`: {why}", g.name, g.tensor(g.outputs[k]).name))
        })?;
        worst = worst.max(errors[k]);
    }
    Ok((worst, loose))
}

/// One output `a` against the reference `b` (`err`: their largest absolute difference): within
/// the precision's tolerance, or (a float output) no further from `b` than its allowance
/// (`allowed`: the engine's own default at the plan's reduced precision, or the engines' exact
/// runs from each other), with the precision's absolute tolerance as slack. Whether it needed
/// the allowance; the mismatch otherwise.
fn check_output(
    a: &HostTensor,
    b: &HostTensor,
    err: f64,
    reduced: Option<DType>,
    allowed: Option<f64>,
) -> Result<bool, String> {
    let scale = (0..b.numel()).map(|i| b.get_f64(i).abs()).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let (rtol, atol) = tolerance(b.dtype, reduced);
    let atol = if b.dtype.is_float() { atol * scale } else { atol };
    match (a.mismatch(b, rtol, atol), allowed) {
        (None, _) => Ok(false),
        (Some(_), Some(engine)) if b.dtype.is_float() && err <= engine + atol => Ok(true),
        (Some(why), _) => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use bident_tensor::{DType, HostTensor};

    use super::check_output;

    fn f32s(v: &[f32]) -> HostTensor {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        HostTensor::new("t", DType::F32, vec![v.len() as u64], bytes).expect("tensor")
    }

    /// A plan may be as far from the f32 reference as its allowance (the engine's own default at
    /// the plan's reduced precision, or the engines' exact runs from each other) plus the
    /// precision's absolute slack, not further.
    #[test]
    fn reduced_precision_is_held_to_the_engines_own_default() {
        let want = f32s(&[0.38, 0.5, 0.12]);
        let close = f32s(&[0.381, 0.5, 0.12]);
        let far = f32s(&[0.015, 0.5, 0.12]);
        let err = |a: &HostTensor| a.max_abs_diff(&want).expect("diff");
        let bf16 = Some(DType::Bf16);
        assert_eq!(check_output(&close, &want, err(&close), bf16, None), Ok(false));
        assert!(check_output(&far, &want, err(&far), bf16, None).is_err());
        // the default at bf16 is as far off: the plan may be too
        assert_eq!(check_output(&far, &want, err(&far), bf16, Some(0.36)), Ok(true));
        // but not further than the default plus the slack (0.365 > 0.3 + 2e-2 x max|output| 1.0)
        assert!(check_output(&far, &want, err(&far), bf16, Some(0.3)).is_err());
        // a plan all in f32 is held to f32's tolerance without an allowance (the caller gives
        // one only where the engines' own exact runs are that far apart)
        assert!(check_output(&far, &want, err(&far), None, None).is_err());
        assert_eq!(check_output(&far, &want, err(&far), None, Some(0.37)), Ok(true));
        // f32's slack is smaller: 0.365 > 0.36 + 1e-4 x max|output| 1.0
        assert!(check_output(&far, &want, err(&far), None, Some(0.36)).is_err());
    }
}
