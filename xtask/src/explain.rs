//! `cargo xtask explain DIR`: where each fused op of a folder's plan went and why, as a table
//! (or, with `--json`, one object on the last line of stdout).

use std::path::Path;

use anyhow::Result;
use bident_driver::Folder;
use bident_search::{Plan, Reason, Step};

use crate::print::printable;

/// Print the plan of `dir` op by op in execution order: name, kind, PU, predicted start and
/// time, the reason, and the fastest PU for the op alone; then what each reason used means.
pub fn explain(dir: &Path, json: bool) -> Result<()> {
    let plan = Folder::new(dir).planned()?.plan;
    let figures = if plan.simulated { "simulated" } else { "measured costs" };
    println!(
        "plan of `{}` on {} [{figures}]: {} schedule, {} objective, search `{}`: predicted {:.1} µs, {:.1} µJ",
        printable(&plan.model),
        printable(&plan.soc),
        plan.schedule.name(),
        plan.objective.name(),
        printable(&plan.search),
        plan.predicted_us,
        plan.predicted_energy_uj
    );
    let width = plan.steps.iter().map(|s| printable(&s.name).chars().count()).max().unwrap_or(4).clamp(4, 40);
    let kinds = plan.steps.iter().map(|s| s.kind.chars().count()).max().unwrap_or(4).clamp(4, 48);
    println!(
        "{:>4}  {:<width$}  {:<kinds$}  {:<10}  {:>9}  {:>9}  {:<15}  fastest alone",
        "op", "name", "kind", "PU", "start µs", "time µs", "reason"
    );
    for s in &plan.steps {
        println!(
            "{:>4}  {:<width$}  {:<kinds$}  {:<10}  {:>9.1}  {:>9.1}  {:<15}  {}",
            s.op,
            printable(&s.name),
            printable(&s.kind),
            printable(&s.pu),
            s.start_us,
            s.finish_us - s.start_us,
            s.reason.name(),
            fastest_alone(&plan, s).map_or("-".to_string(), |(pu, us)| format!("{} {us:.1} µs", printable(pu)))
        );
    }
    for r in Reason::ALL {
        let n = plan.steps.iter().filter(|s| s.reason == r).count();
        if n > 0 {
            println!("{n:>4} {:<15} {}", r.name(), r.meaning());
        }
    }
    if json {
        println!("{}", as_json(&plan));
    }
    Ok(())
}

/// The PU that runs the op alone fastest (dispatch + execution), and that time.
fn fastest_alone<'a>(plan: &'a Plan, s: &Step) -> Option<(&'a str, f64)> {
    plan.pus.iter().zip(&s.cost_us).filter_map(|(pu, c)| c.map(|c| (pu.as_str(), c))).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The placement as one JSON object: the plan's totals and, per op in execution order, where
/// it went, when, and why.
fn as_json(plan: &Plan) -> serde_json::Value {
    let ops: Vec<serde_json::Value> = plan
        .steps
        .iter()
        .map(|s| {
            let alone: serde_json::Map<String, serde_json::Value> =
                plan.pus.iter().zip(&s.cost_us).filter_map(|(pu, c)| c.map(|c| (pu.clone(), c.into()))).collect();
            serde_json::json!({
                "op": s.op, "name": s.name, "kind": s.kind, "pu": s.pu,
                "phase": s.phase, "branch": s.branch,
                "start_us": s.start_us, "predicted_us": s.finish_us - s.start_us,
                "transfer_in_us": s.transfer_in_us, "transfer_out_us": s.transfer_out_us,
                "saved_us": s.saved_us, "contention": s.contention,
                "reason": s.reason.name(), "alone_us": alone,
            })
        })
        .collect();
    serde_json::json!({
        "model": plan.model, "soc": plan.soc, "simulated": plan.simulated,
        "schedule": plan.schedule.name(), "objective": plan.objective.name(), "search": plan.search,
        "predicted_us": plan.predicted_us, "predicted_energy_uj": plan.predicted_energy_uj,
        "ops": ops,
    })
}
