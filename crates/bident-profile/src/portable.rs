//! Cost tables outside bident's artifact format, so a table measured on the device can be
//! planned from elsewhere (and read in a spreadsheet):
//! - JSON: the whole table, every field;
//! - CSV: one row per (op, PU), a missing entry as a row with its failure reason, the table's
//!   metadata (model, graph hash, SoC, contention, ...) as `# key: value` lines before the header.
//!
//! Both round-trip exactly. A table read back is checked against the fused graph it is for
//! ([`CostTable::check`]) before any stage uses it.

use bident_ir::FusedGraph;
use serde::{Deserialize, Serialize};

use crate::{Cost, CostTable, OpCosts, PowerSource, ProfileError, StopCheck};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

impl Format {
    /// By file extension: `.json` or `.csv`.
    pub fn of_path(path: &std::path::Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// One CSV row.
#[derive(Serialize, Deserialize)]
struct Row {
    op: u32,
    name: String,
    kind: String,
    pu: String,
    h2d_us: Option<f64>,
    dispatch_us: Option<f64>,
    exec_us: Option<f64>,
    d2h_us: Option<f64>,
    h2d_p10_us: Option<f64>,
    dispatch_p10_us: Option<f64>,
    exec_p10_us: Option<f64>,
    d2h_p10_us: Option<f64>,
    h2d_p90_us: Option<f64>,
    dispatch_p90_us: Option<f64>,
    exec_p90_us: Option<f64>,
    d2h_p90_us: Option<f64>,
    runs: Option<u32>,
    power_w: Option<f64>,
    power: Option<PowerSource>,
    /// The adaptive stop replayed on a fixed-count measurement (see `StopCheck`).
    stop_runs: Option<u32>,
    stop_median_us: Option<f64>,
    full_median_us: Option<f64>,
    /// Why the PU has no entry for the op.
    failure: Option<String>,
}

/// The metadata lines of a CSV export, in order. Values are JSON.
const META: &[&str] = &[
    "model",
    "graph",
    "simulated",
    "backend",
    "measured_on",
    "warmup",
    "components",
    "io_every_call",
    "launch_us",
    "segments",
    "soc",
    "contention",
];
const CSV_MAGIC: &str = "# bident cost table";

/// A text cell a spreadsheet will not run: one starting like a formula (`=`, `+`, `-`, `@`, a
/// tab or a return) gets a leading `'`, as does one starting with `'`, so [`uncell`] is exact.
fn cell(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']) { format!("'{s}") } else { s.to_string() }
}

/// The text [`cell`] wrote.
fn uncell(s: &str) -> String {
    match s.strip_prefix('\'') {
        Some(rest) if rest.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']) => rest.to_string(),
        _ => s.to_string(),
    }
}

pub fn export(t: &CostTable, format: Format) -> Result<String, ProfileError> {
    let bad = |e: &dyn std::fmt::Display| ProfileError::Portable { origin: "export".into(), reason: e.to_string() };
    match format {
        Format::Json => serde_json::to_string_pretty(t).map_err(|e| bad(&e)),
        Format::Csv => {
            let mut out =
                format!("{CSV_MAGIC} (schema {})\n", <CostTable as bident_artifact::Artifact>::SCHEMA_VERSION);
            let meta = serde_json::json!({
                "model": t.model, "graph": t.graph, "simulated": t.simulated, "backend": t.backend,
                "measured_on": t.measured_on, "warmup": t.warmup, "components": t.components, "io_every_call": t.io_every_call, "launch_us": t.launch_us, "segments": t.segments, "soc": t.soc,
                "contention": t.contention,
            });
            for key in META {
                out.push_str(&format!("# {key}: {}\n", meta[key]));
            }
            let mut w = csv::Writer::from_writer(vec![]);
            for o in &t.ops {
                for (j, pu) in t.soc.pus.iter().enumerate() {
                    let c = o.per_pu.get(j).and_then(Option::as_ref);
                    let failure = o.failures.iter().find(|(p, _)| *p == pu.name).map(|(_, r)| r.clone());
                    let part = |f: fn(&Cost) -> f64| c.map(f);
                    w.serialize(Row {
                        op: o.op,
                        name: cell(&o.name),
                        kind: cell(&o.kind),
                        pu: cell(&pu.name),
                        h2d_us: part(|c| c.h2d_us),
                        dispatch_us: part(|c| c.dispatch_us),
                        exec_us: part(|c| c.exec_us),
                        d2h_us: part(|c| c.d2h_us),
                        h2d_p10_us: part(|c| c.p10_us[0]),
                        dispatch_p10_us: part(|c| c.p10_us[1]),
                        exec_p10_us: part(|c| c.p10_us[2]),
                        d2h_p10_us: part(|c| c.p10_us[3]),
                        h2d_p90_us: part(|c| c.p90_us[0]),
                        dispatch_p90_us: part(|c| c.p90_us[1]),
                        exec_p90_us: part(|c| c.p90_us[2]),
                        d2h_p90_us: part(|c| c.p90_us[3]),
                        runs: c.map(|c| c.runs),
                        power_w: part(|c| c.power_w),
                        power: c.map(|c| c.power),
                        stop_runs: c.and_then(|c| c.stop_check.as_ref()).map(|s| s.runs),
                        stop_median_us: c.and_then(|c| c.stop_check.as_ref()).map(|s| s.median_us),
                        full_median_us: c.and_then(|c| c.stop_check.as_ref()).map(|s| s.full_median_us),
                        failure: failure.as_deref().map(cell),
                    })
                    .map_err(|e| bad(&e))?;
                }
            }
            let body = w.into_inner().map_err(|e| bad(&e))?;
            out.push_str(&String::from_utf8_lossy(&body));
            Ok(out)
        }
    }
}

/// Read a table exported by [`export`]; `origin` names the file in errors.
pub fn import(text: &str, format: Format, origin: &str) -> Result<CostTable, ProfileError> {
    let bad = |reason: String| ProfileError::Portable { origin: origin.into(), reason };
    bident_artifact::files::check_nesting(text).map_err(bad)?;
    match format {
        Format::Json => serde_json::from_str(text).map_err(|e| bad(e.to_string())),
        Format::Csv => import_csv(text, &bad),
    }
}

/// The error of a malformed export, from its reason.
type Bad<'a> = &'a dyn Fn(String) -> ProfileError;

/// A CSV export: the metadata lines, then a row per (op, PU).
fn import_csv(text: &str, bad: Bad) -> Result<CostTable, ProfileError> {
    let (mut t, body_at) = csv_metadata(text, bad)?;
    let n = t.soc.pus.len();
    // every (op, PU) has exactly one row: a repeated one would silently override, a
    // missing one would read as "cannot run there"
    let mut seen: Vec<Vec<bool>> = vec![];
    let mut r = csv::Reader::from_reader(text.get(body_at..).unwrap_or("").as_bytes());
    for (k, row) in r.deserialize::<Row>().enumerate() {
        let mut row = row.map_err(|e| bad(format!("row {}: {e}", k + 1)))?;
        for text in [&mut row.name, &mut row.kind, &mut row.pu].into_iter().chain(row.failure.as_mut()) {
            *text = uncell(text);
        }
        let j = t
            .soc
            .pus
            .iter()
            .position(|p| p.name == row.pu)
            .ok_or_else(|| bad(format!("row {}: PU `{}` is not in the SoC", k + 1, row.pu)))?;
        if row.op as usize == t.ops.len() {
            seen.push(vec![false; n]);
            t.ops.push(OpCosts {
                op: row.op,
                name: row.name.clone(),
                kind: row.kind.clone(),
                per_pu: vec![None; n],
                failures: vec![],
            });
        }
        let o = t
            .ops
            .get_mut(row.op as usize)
            .filter(|o| o.name == row.name && o.kind == row.kind)
            .ok_or_else(|| bad(format!("row {}: op {} `{}` is out of order", k + 1, row.op, row.name)))?;
        if std::mem::replace(&mut seen[row.op as usize][j], true) {
            let (op, name, pu) = (row.op, &row.name, &row.pu);
            return Err(bad(format!("row {}: op {op} `{name}` on PU `{pu}` has a row already", k + 1)));
        }
        o.per_pu[j] = row.cost(k, bad)?;
        if let Some(reason) = row.failure {
            o.failures.push((row.pu, reason));
        }
    }
    for (op, row) in seen.iter().enumerate() {
        if let Some(j) = row.iter().position(|&s| !s) {
            return Err(bad(format!("op {op} has no row for PU `{}`", t.soc.pus[j].name)));
        }
    }
    Ok(t)
}

/// The table without its ops, from the export's metadata lines, and where its rows start.
fn csv_metadata(text: &str, bad: Bad) -> Result<(CostTable, usize), ProfileError> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    if !first.starts_with(CSV_MAGIC) {
        return Err(bad(format!("not a bident cost table export (first line should start `{CSV_MAGIC}`)")));
    }
    let mut meta = serde_json::Map::new();
    let mut body_at = first.len() + 1;
    for line in lines {
        let Some(kv) = line.strip_prefix("# ") else { break };
        body_at += line.len() + 1;
        let (k, v) = kv.split_once(": ").ok_or_else(|| bad(format!("bad metadata line `{line}`")))?;
        let v = serde_json::from_str(v).map_err(|e| bad(format!("metadata `{k}`: {e}")))?;
        meta.insert(k.to_string(), v);
    }
    for key in META {
        if !meta.contains_key(*key) {
            return Err(bad(format!("metadata line `# {key}: ...` is missing")));
        }
    }
    meta.insert("ops".into(), serde_json::Value::Array(vec![]));
    let t = serde_json::from_value(serde_json::Value::Object(meta)).map_err(|e| bad(format!("metadata: {e}")))?;
    Ok((t, body_at))
}

impl Row {
    /// Row `k`'s cost: every cost column filled, or none (the op cannot run on the PU).
    fn cost(&self, k: usize, bad: Bad) -> Result<Option<Cost>, ProfileError> {
        let row = self;
        let (Some(h2d_us), Some(dispatch_us), Some(exec_us), Some(d2h_us), Some(runs), Some(power_w), Some(power)) =
            (row.h2d_us, row.dispatch_us, row.exec_us, row.d2h_us, row.runs, row.power_w, row.power)
        else {
            return match (row.h2d_us, row.dispatch_us, row.exec_us, row.d2h_us, row.runs, row.power_w, row.power) {
                (None, None, None, None, None, None, None) => Ok(None),
                _ => Err(bad(format!("row {}: some cost columns are empty, others not", k + 1))),
            };
        };
        let q = |v: [Option<f64>; 4]| -> Result<[f64; 4], ProfileError> {
            let got: Option<Vec<f64>> = v.into_iter().collect();
            got.and_then(|g| g.try_into().ok()).ok_or_else(|| bad(format!("row {}: a p10/p90 is missing", k + 1)))
        };
        let p10_us = q([row.h2d_p10_us, row.dispatch_p10_us, row.exec_p10_us, row.d2h_p10_us])?;
        let p90_us = q([row.h2d_p90_us, row.dispatch_p90_us, row.exec_p90_us, row.d2h_p90_us])?;
        let stop_check = match (row.stop_runs, row.stop_median_us, row.full_median_us) {
            (Some(runs), Some(median_us), Some(full_median_us)) => Some(StopCheck { runs, median_us, full_median_us }),
            (None, None, None) => None,
            _ => return Err(bad(format!("row {}: the stop-check columns are incomplete", k + 1))),
        };
        Ok(Some(Cost { h2d_us, dispatch_us, exec_us, d2h_us, p10_us, p90_us, runs, power_w, power, stop_check }))
    }
}

/// Largest time a cost may hold, in µs (an hour), and largest power, in W: anything above is a
/// corrupt or hostile table, whose sums would overflow to infinity.
const MAX_US: f64 = 3.6e9;
const MAX_POWER_W: f64 = 1e4;

impl Cost {
    /// Every figure finite, non-negative and in range.
    fn in_range(&self) -> bool {
        let time = |v: f64| v.is_finite() && (0.0..=MAX_US).contains(&v);
        [self.h2d_us, self.dispatch_us, self.exec_us, self.d2h_us]
            .into_iter()
            .chain(self.p10_us)
            .chain(self.p90_us)
            .all(time)
            && self.power_w.is_finite()
            && (0.0..=MAX_POWER_W).contains(&self.power_w)
    }
}

impl CostTable {
    /// Check that this table is whole and is for `g`: a valid SoC (`SocSpec::validate`), same
    /// graph, same ops, one entry slot per PU, every op runnable somewhere, every figure a finite
    /// non-negative number, a square contention matrix.
    pub fn check(&self, g: &FusedGraph) -> Result<(), ProfileError> {
        let bad = |reason: String| ProfileError::Mismatch { model: self.model.clone(), reason };
        // the SoC a table carries is data read from disk: its PUs' names and compile
        // properties are checked as a SoC file's are (in check_whole), before any engine sees them
        let graph = g.content_hash()?;
        if self.graph != graph {
            return Err(bad(format!(
                "it was made for graph {} but this fused graph (`{}`) is {}",
                self.graph.short(),
                g.name,
                graph.short()
            )));
        }
        if self.ops.len() != g.ops.len() {
            return Err(bad(format!("it has {} ops, the graph {}", self.ops.len(), g.ops.len())));
        }
        for (i, (o, op)) in self.ops.iter().zip(&g.ops).enumerate() {
            if o.name != op.name || o.kind != op.kind {
                return Err(bad(format!(
                    "op {i} is `{}` ({}) in the table, `{}` ({}) in the graph",
                    o.name, o.kind, op.name, op.kind
                )));
            }
        }
        self.check_whole()
    }

    /// The part of [`CostTable::check`] that needs no graph, run by the search on every table
    /// it is given (from a file, a profile, a refine or a server's re-pricing): a valid SoC, one
    /// entry slot per PU, every op runnable somewhere, every figure a finite non-negative
    /// number, segments of ops in range, a square contention matrix.
    pub fn check_whole(&self) -> Result<(), ProfileError> {
        let bad = |reason: String| ProfileError::Mismatch { model: self.model.clone(), reason };
        self.soc.validate().map_err(|e| bad(e.to_string()))?;
        let n = self.soc.pus.len();
        if self.components.len() != n || self.io_every_call.len() != n {
            return Err(bad(format!(
                "it describes the timing of {} and the transfers of {} PUs, the SoC has {n}",
                self.components.len(),
                self.io_every_call.len()
            )));
        }
        if !(self.launch_us.is_empty() || self.launch_us.len() == n) {
            return Err(bad(format!(
                "it has the runtime's launch cost of {} PUs, the SoC has {n}",
                self.launch_us.len()
            )));
        }
        if let Some(v) = self.launch_us.iter().find(|v| !(v.is_finite() && (0.0..=1e6).contains(*v))) {
            return Err(bad(format!("its runtime launch cost {v} µs is negative, not finite or over a second")));
        }
        for s in &self.segments {
            if s.ops.len() < 2 || s.ops.iter().any(|&o| o as usize >= self.ops.len()) || s.per_pu.len() != n {
                return Err(bad(format!(
                    "segment {:?} has fewer than two ops, an op out of range or not one entry per PU",
                    s.ops
                )));
            }
            if s.per_pu.iter().flatten().any(|c| !c.in_range()) {
                return Err(bad(format!(
                    "segment {:?} has a figure that is negative, not finite or over an hour",
                    s.ops
                )));
            }
        }
        for (i, o) in self.ops.iter().enumerate() {
            if o.op as usize != i {
                return Err(bad(format!("op {i} `{}` is numbered {} in the table", o.name, o.op)));
            }
            if o.per_pu.len() != n {
                return Err(bad(format!("op {i} has {} PU slots for {n} PUs", o.per_pu.len())));
            }
            if o.per_pu.iter().all(Option::is_none) {
                return Err(bad(format!("op {i} `{}` has no cost on any PU", o.name)));
            }
            if o.per_pu.iter().flatten().any(|c| !c.in_range()) {
                return Err(bad(format!(
                    "op {i} `{}` has a figure that is negative, not finite or over an hour (or a power over 10 kW)",
                    o.name
                )));
            }
        }
        if let Some(c) = &self.contention
            && (c.sf.len() != n
                || c.sf
                    .iter()
                    .any(|r| r.len() != n || r.iter().any(|v| !(v.is_finite() && (0.0..=1e3).contains(v) && *v > 0.0))))
        {
            return Err(bad(format!("its contention matrix is not {n} x {n} positive factors up to 1000")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_defused_and_read_back_exactly() {
        for s in ["=HYPERLINK(\"http://x\")", "+1", "-2", "@sum", "\tx", "'quoted", "''", "plain", "", "a=b"] {
            let c = cell(s);
            assert!(!c.starts_with(['=', '+', '-', '@', '\t', '\r']), "{c}");
            assert_eq!(uncell(&c), s);
        }
    }
}
