//! What a run stage whose plan failed plans next: a plan whose outputs were beyond the
//! tolerance is made again closer to the reference, and with `--fallback` a PU that failed is
//! dropped.

use std::collections::BTreeMap;

use bident_backend::SocSpec;
use bident_runtime::{RuntimeError, error_chain};
use bident_search::{Constraints, Plan};

use crate::{Driver, DriverError, Result, Stage};

impl Driver<'_> {
    /// The constraints to plan with after the run of `plan` on `soc` failed with `err`, said in
    /// a note: a plan whose outputs were beyond the tolerance is made again with its
    /// reduced-precision PUs whole or unused ([`whole_or_without_reduced`]), else closer to the
    /// reference ([`closer_to_the_reference`]); with `fallback`, a PU that failed is excluded
    /// (its pins dropped). The error where none of these applies, or no PU is left to plan on.
    pub(super) fn after_failure(
        &self,
        err: RuntimeError,
        plan: &Plan,
        soc: &SocSpec,
        fallback: bool,
    ) -> Result<Constraints> {
        if matches!(err, RuntimeError::Outputs(_))
            && let Some((c, why)) = whole_or_without_reduced(&plan.ops_per_pu, &plan.constraints, soc)
        {
            self.note(Stage::Run, format!("{}; {why}", error_chain(&err)));
            return Ok(c);
        }
        // outputs beyond the tolerance from a plan in exact precision: engines round apart,
        // and a model that quantises its activations turns that into whole steps, which a
        // plan crossing engines between them may carry further from the reference than
        // either engine whole (LaViSH INT8 split between OpenVINO's defaults and ONNX
        // Runtime on core 1 gave 0.448 where the reference gave 0.039): the plan is made
        // again on the reference's engine alone, and one that still differs gives way to
        // the reference itself, the whole model on that PU
        if matches!(err, RuntimeError::Outputs(_))
            && let Some((c, why)) = closer_to_the_reference(
                &plan.ops_per_pu,
                bident_runtime::reference_pu(plan, soc).as_deref(),
                &plan.constraints,
                soc,
            )
        {
            self.note(Stage::Run, format!("{}; {why}", error_chain(&err)));
            return Ok(c);
        }
        let Some(pu) = err.faulty_pu().map(str::to_string) else { return Err(err.into()) };
        if !fallback {
            return Err(DriverError::from(err).context(format!("run: rerun with --fallback to plan without PU `{pu}`")));
        }
        self.note(Stage::Run, format!("{}; --fallback: planning again without PU `{pu}`", error_chain(&err)));
        let mut c = plan.constraints.clone();
        let pins = c.pin.len();
        c.pin.retain(|(_, p)| *p != pu);
        c.whole.take_if(|p| *p == pu);
        if c.pin.len() < pins {
            self.note(Stage::Run, format!("dropping {} --pin to `{pu}`", pins - c.pin.len()));
        }
        c.exclude.push(pu);
        if c.exclude.len() >= soc.pus.len() {
            return Err(DriverError::Invalid(format!(
                "run: every PU of `{}` has failed; nothing left to plan on",
                soc.name
            )));
        }
        Ok(c)
    }
}

/// For a plan (`ops_per_pu`, `constraints`) whose outputs were beyond the tolerance and that
/// computes ops in reduced precision: the constraints of the plan to try instead, and why. That
/// precision cut into sub-models may be wrong for the model where the whole model in it is not
/// (OpenVINO's bf16 on MiniLM's attention gave garbage cut, and its defaults, the whole model in
/// bf16, are within the tolerance): each such PU the plan cut may then run the whole model only
/// (`whole_only`), and one that ran the whole model, or could only, runs nothing. Pins to them
/// are dropped. None where the plan computes nothing in reduced precision.
fn whole_or_without_reduced(
    ops_per_pu: &BTreeMap<String, u32>,
    constraints: &Constraints,
    soc: &SocSpec,
) -> Option<(Constraints, String)> {
    let reduced: Vec<&String> = ops_per_pu
        .iter()
        .filter(|&(pu, &n)| n > 0 && soc.pu(pu).is_some_and(|p| !p.is_exact()))
        .map(|(pu, _)| pu)
        .collect();
    if reduced.is_empty() {
        return None;
    }
    let whole = ops_per_pu.values().filter(|&&n| n > 0).count() == 1;
    let mut c = constraints.clone();
    c.pin.retain(|(_, p)| !reduced.contains(&p));
    c.whole.take_if(|p| reduced.contains(&&*p));
    for &pu in &reduced {
        if whole || c.whole_only.contains(pu) {
            c.whole_only.retain(|p| p != pu);
            c.exclude.push(pu.clone());
        } else {
            c.whole_only.push(pu.clone());
        }
    }
    let on: Vec<&str> = reduced.iter().map(|pu| pu.as_str()).collect();
    let why = if whole {
        format!("the plan computes the whole model in reduced precision on {}: planning again without it", on[0])
    } else {
        format!(
            "the plan computes some ops in reduced precision on {}: planning again with the whole model there or \
             none of it",
            on.join(", ")
        )
    };
    Some((c, why))
}

/// For a plan (`ops_per_pu`, `constraints`) whose outputs were beyond the tolerance: the
/// constraints of one closer to the `reference` (the run's, [`bident_runtime::reference_pu`]: the
/// whole model on it is what the outputs are checked against) and why. A plan with ops on another backend than the
/// reference's keeps the reference's backend alone (its pins elsewhere dropped); a plan on that
/// backend alone that is not the whole model on the reference becomes it. None where the plan
/// is that already, or has no reference.
fn closer_to_the_reference(
    ops_per_pu: &BTreeMap<String, u32>,
    reference: Option<&str>,
    constraints: &Constraints,
    soc: &SocSpec,
) -> Option<(Constraints, String)> {
    let reference = soc.pu(reference?)?;
    let used: Vec<&bident_backend::PuSpec> =
        ops_per_pu.iter().filter(|&(_, &n)| n > 0).filter_map(|(pu, _)| soc.pu(pu)).collect();
    let mut c = constraints.clone();
    if used.iter().any(|p| p.backend != reference.backend) {
        let others: Vec<String> =
            soc.pus.iter().filter(|p| p.backend != reference.backend).map(|p| p.name.clone()).collect();
        c.pin.retain(|(_, p)| !others.contains(p));
        c.whole.take_if(|p| others.contains(p));
        for p in &others {
            if !c.exclude.contains(p) {
                c.exclude.push(p.clone());
            }
        }
        let mut elsewhere: Vec<&str> =
            used.iter().filter(|p| p.backend != reference.backend).map(|p| p.backend.as_str()).collect();
        elsewhere.sort_unstable();
        elsewhere.dedup();
        let why = format!(
            "the plan runs ops on {}: planning again on {}'s PUs alone, the reference `{}`'s",
            elsewhere.join(", "),
            reference.backend,
            reference.name
        );
        return Some((c, why));
    }
    if let [only] = used[..]
        && only.name == reference.name
    {
        return None;
    }
    c.pin.clear();
    c.whole = Some(reference.name.clone());
    Some((c, format!("planning the whole model on `{}`, the reference, instead", reference.name)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bident_backend::SocSpec;
    use bident_search::Constraints;

    use crate::stages::test_pu as pu;

    /// A plan whose outputs were off: across engines it keeps the reference's engine (its pins
    /// elsewhere dropped), on one engine it becomes the whole model on the reference, and the
    /// reference itself or a plan without one has nothing closer.
    #[test]
    fn a_plan_with_outputs_off_is_made_again_closer_to_the_reference() {
        let soc = SocSpec {
            name: "cores".into(),
            backend: "openvino".into(),
            simulated: false,
            pus: vec![pu("core0", "openvino", &[]), pu("core1", "openvino", &[]), pu("core0.ort", "onnxruntime", &[])],
        };
        let ops = |pus: &[(&str, u32)]| pus.iter().map(|&(p, n)| (p.to_string(), n)).collect::<BTreeMap<_, _>>();
        let pinned = Constraints {
            pin: vec![("3".into(), "core0.ort".into()), ("4".into(), "core1".into())],
            ..Default::default()
        };
        // across engines: OpenVINO's PUs alone, the pin to ONNX Runtime's dropped
        let (c, why) =
            super::closer_to_the_reference(&ops(&[("core0", 5), ("core0.ort", 3)]), Some("core0"), &pinned, &soc)
                .expect("across engines");
        assert_eq!(c.exclude, ["core0.ort"]);
        assert_eq!(c.pin, [("4".to_string(), "core1".to_string())]);
        assert_eq!(c.whole, None);
        assert!(why.contains("ops on onnxruntime: planning again on openvino's PUs alone"), "{why}");
        // one engine, two PUs: the whole model on the reference
        let (c, why) = super::closer_to_the_reference(
            &ops(&[("core0", 5), ("core1", 3), ("core0.ort", 0)]),
            Some("core0"),
            &pinned,
            &soc,
        )
        .expect("on one engine");
        assert_eq!((c.whole.as_deref(), c.pin.len(), c.exclude.len()), (Some("core0"), 0, 0));
        assert!(why.contains("whole model on `core0`"), "{why}");
        // the reference itself, no reference, an unknown one: nothing closer
        let none = Constraints::default();
        assert!(super::closer_to_the_reference(&ops(&[("core0", 8)]), Some("core0"), &none, &soc).is_none());
        assert!(super::closer_to_the_reference(&ops(&[("core0", 5), ("core1", 3)]), None, &none, &soc).is_none());
        assert!(super::closer_to_the_reference(&ops(&[("core0", 8)]), Some("npu"), &none, &soc).is_none());
    }

    /// A plan cut across a reduced-precision PU whose outputs were off is made again with that
    /// PU whole or unused (MiniLM's bf16 cut gave garbage, its defaults in bf16 did not); one
    /// whose outputs were off with the whole model there runs nothing there.
    #[test]
    fn a_reduced_precision_cut_with_outputs_off_leaves_that_pu_whole_or_nothing() {
        let exact = |name: &str| {
            let mut p = pu(name, "openvino", &[]);
            p.properties.insert(bident_backend::soc::PRECISION_KEY.into(), "f32".into());
            p
        };
        let soc = SocSpec {
            name: "cores".into(),
            backend: "openvino".into(),
            simulated: false,
            pus: vec![exact("CPU"), pu("CPU.bf16", "openvino", &[]), pu("core0.bf16", "openvino", &[0])],
        };
        let ops = |pus: &[(&str, u32)]| pus.iter().map(|&(p, n)| (p.to_string(), n)).collect::<BTreeMap<_, _>>();
        let pinned = Constraints { pin: vec![("3".into(), "core0.bf16".into())], ..Default::default() };
        let cut = ops(&[("CPU", 2), ("CPU.bf16", 60), ("core0.bf16", 9)]);
        let (c, why) = super::whole_or_without_reduced(&cut, &pinned, &soc).expect("a reduced cut");
        assert_eq!(
            (c.whole_only, c.exclude, c.pin),
            (vec!["CPU.bf16".to_string(), "core0.bf16".into()], vec![], vec![])
        );
        assert!(why.contains("on CPU.bf16, core0.bf16: planning again with the whole model there or none"), "{why}");
        // the whole model there, off too: that PU is dropped
        let whole = Constraints { whole: Some("CPU.bf16".into()), whole_only: vec!["CPU.bf16".into()], ..pinned };
        let (c, why) = super::whole_or_without_reduced(&ops(&[("CPU.bf16", 71)]), &whole, &soc).expect("whole");
        assert_eq!((c.whole, c.whole_only, c.exclude), (None, vec![], vec!["CPU.bf16".to_string()]));
        assert!(why.contains("the whole model in reduced precision on CPU.bf16: planning again without it"), "{why}");
        // nothing in reduced precision: another cause
        assert!(super::whole_or_without_reduced(&ops(&[("CPU", 71), ("CPU.bf16", 0)]), &whole, &soc).is_none());
    }
}
