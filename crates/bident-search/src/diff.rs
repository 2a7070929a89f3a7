//! What changed between two plans of one graph: the ops that moved and the predicted totals
//! of both ([`diff`]), and the table `cargo xtask plan-diff` prints ([`PlanDiff::table`]).

use std::collections::BTreeMap;
use std::fmt::Write;

use bident_ir::OpId;
use serde::{Deserialize, Serialize};

use crate::{Plan, Schedule, SearchError, Step};

/// An op whose PU differs between two plans.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub op: OpId,
    pub name: String,
    pub kind: String,
    pub from: String,
    pub to: String,
    /// The op's own time (execution and transfers) in each plan, µs.
    pub before_us: f64,
    pub after_us: f64,
}

/// What changed from plan `a` to plan `b` of the same graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanDiff {
    /// Ops in each plan.
    pub ops: usize,
    pub moves: Vec<Move>,
    pub predicted_us: (f64, f64),
    pub predicted_energy_uj: (f64, f64),
    pub schedule: (Schedule, Schedule),
}

/// The ops that moved between two plans of one graph, and the predicted totals of both.
pub fn diff(a: &Plan, b: &Plan) -> Result<PlanDiff, SearchError> {
    if a.graph != b.graph || a.steps.len() != b.steps.len() {
        return Err(SearchError::Check(format!(
            "the plans are for different graphs (`{}` {}, `{}` {})",
            a.model,
            a.graph.short(),
            b.model,
            b.graph.short()
        )));
    }
    let own = |s: &Step| s.exec_us + s.transfer_in_us + s.transfer_out_us;
    let mut by_op: BTreeMap<OpId, &Step> = BTreeMap::new();
    for s in &b.steps {
        by_op.insert(s.op, s);
    }
    let mut moves = vec![];
    for s in &a.steps {
        let t = by_op
            .get(&s.op)
            .ok_or_else(|| SearchError::Check(format!("op {} is missing from the second plan", s.op)))?;
        if s.pu != t.pu {
            moves.push(Move {
                op: s.op,
                name: s.name.clone(),
                kind: s.kind.clone(),
                from: s.pu.clone(),
                to: t.pu.clone(),
                before_us: own(s),
                after_us: own(t),
            });
        }
    }
    Ok(PlanDiff {
        ops: a.steps.len(),
        moves,
        predicted_us: (a.predicted_us, b.predicted_us),
        predicted_energy_uj: (a.predicted_energy_uj, b.predicted_energy_uj),
        schedule: (a.schedule, b.schedule),
    })
}

impl PlanDiff {
    /// The diff as `cargo xtask plan-diff` prints it: a row per op that moved (op, name, kind,
    /// PUs, the op's own time in each plan) and a summary line (ops moved, the predicted totals
    /// and their change, the schedules). Figures to 0.1 µs.
    pub fn table(&self) -> String {
        let fit = |s: &str, n: usize| {
            if s.chars().count() <= n {
                s.to_string()
            } else {
                format!("{}…", s.chars().take(n - 1).collect::<String>())
            }
        };
        let mut out = format!(
            "{:>5}  {:<28} {:<26} {:>6} -> {:<6} {:>10} {:>10}\n",
            "op", "name", "kind", "from", "to", "µs before", "µs after"
        );
        for m in &self.moves {
            let _ = writeln!(
                out,
                "{:>5}  {:<28} {:<26} {:>6} -> {:<6} {:>10.1} {:>10.1}",
                m.op,
                fit(&m.name, 28),
                fit(&m.kind, 26),
                m.from,
                m.to,
                m.before_us,
                m.after_us
            );
        }
        let pct = |(x, y): (f64, f64)| (y / x - 1.0) * 100.0;
        let _ = writeln!(
            out,
            "{} of {} ops moved; predicted {:.1} -> {:.1} µs ({:+.1}%), {:.1} -> {:.1} µJ ({:+.1}%); schedule {} -> {}",
            self.moves.len(),
            self.ops,
            self.predicted_us.0,
            self.predicted_us.1,
            pct(self.predicted_us),
            self.predicted_energy_uj.0,
            self.predicted_energy_uj.1,
            pct(self.predicted_energy_uj),
            self.schedule.0.name(),
            self.schedule.1.name()
        );
        out
    }
}
