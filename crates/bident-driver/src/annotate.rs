//! A folder's plan written into its source model (`cargo xtask annotate DIR -o placed.onnx`):
//! every node says its fused op, PU, predicted start and time and why it sits there, and the
//! model says the SoC, objective and predicted totals, and whether they were simulated or
//! measured. A viewer (Netron) shows the placement on the graph the user wrote.

use std::path::Path;

use crate::{Folder, Result};

/// What [`annotate`] wrote.
pub struct Annotation {
    pub model: String,
    /// Top-level nodes of the source graph, and those in some fused op (the rest were folded
    /// into constants or unused).
    pub nodes: usize,
    pub placed: usize,
    pub soc: String,
    pub simulated: bool,
}

/// Read `folder`'s fused graph and plan through their verifiers and write its source model,
/// annotated (`bident.fused_op`, `bident.pu`, `bident.start_us`, `bident.predicted_us`,
/// `bident.reason` on every node; `bident.soc`, `bident.objective`, `bident.mode`,
/// `bident.schedule`, `bident.search`, `bident.predicted_us`, `bident.predicted_energy_uj`,
/// `bident.figures` on the model), to `out`.
pub fn annotate(folder: &Folder, out: &Path) -> Result<Annotation> {
    let planned = folder.planned()?;
    let (g, plan) = (&planned.g, &planned.plan);
    let figures = if plan.simulated { "simulated" } else { "measured" };
    let mut per_op: Vec<Vec<(String, String)>> = vec![vec![]; g.ops.len()];
    let pair = |k: &str, v: String| (format!("bident.{k}"), v);
    for s in &plan.steps {
        // check_plan has matched the steps to the graph's ops
        per_op[s.op as usize] = vec![
            pair("pu", s.pu.clone()),
            pair("start_us", format!("{:.3}", s.start_us)),
            pair("predicted_us", format!("{:.3}", s.finish_us - s.start_us)),
            pair("reason", s.reason.name().to_string()),
        ];
    }
    let model = [
        pair("soc", plan.soc.clone()),
        pair("objective", plan.objective.name().to_string()),
        pair("mode", plan.mode.name().to_string()),
        pair("schedule", plan.schedule.name().to_string()),
        pair("search", plan.search.clone()),
        pair("predicted_us", format!("{:.3}", plan.predicted_us)),
        pair("predicted_energy_uj", format!("{:.3}", plan.predicted_energy_uj)),
        pair("figures", figures.to_string()),
    ];
    let a = bident_ir::annotate(g, &per_op, &model)?;
    crate::folder::write_replacing(out, &a.model)?;
    Ok(Annotation {
        model: g.name.clone(),
        nodes: a.nodes,
        placed: a.placed,
        soc: plan.soc.clone(),
        simulated: plan.simulated,
    })
}
