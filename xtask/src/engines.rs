//! `cargo xtask eval --engines`: engines, precisions and cores. Every model runs through the
//! pipeline on the `all` SoC (each backend on the whole CPU at its defaults and in f32, and on
//! each core alone, in f32 and at the CPU's default precision; PUs that share cores never run at
//! once), latency objective, parallel mode. Beside bident's plan, in the same run: each backend's
//! whole-model defaults, and the whole model on one pinned core under each backend and precision.
//! Everything is measured on this machine.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use bident_runtime::RunReport;
use bident_search::Plan;

use bident_driver::{ImportSpec, Options};

use crate::pipeline::{driver, target_dir};

/// A model of the table: a zoo family's tiny model or a third-party model.
pub struct Target {
    pub label: String,
    pub import: ImportSpec,
}

/// What one model measured.
struct Row {
    label: String,
    ops: usize,
    /// Per backend: ops of the plan on its PUs.
    ops_per_backend: BTreeMap<String, u32>,
    /// Per backend: ops whose cheapest entry in the cost table is on that backend's PUs.
    ops_won: BTreeMap<String, u32>,
    schedule: String,
    /// The precisions of the PUs the plan uses.
    precisions: Vec<String>,
    report: RunReport,
}

impl Row {
    fn default_of(&self, backend: &str) -> Option<f64> {
        self.report.backend_defaults.iter().find(|d| d.backend == backend).and_then(|d| d.measured_us)
    }

    /// How far a backend default's outputs are from the f32 reference.
    fn default_err(&self, backend: &str) -> Option<f64> {
        self.report.backend_defaults.iter().find(|d| d.backend == backend).and_then(|d| d.max_abs_err)
    }

    /// The plan's latency, and which engine default it is, if it is one.
    fn plan(&self) -> String {
        let m = self.report.measured_us;
        match self.report.backend_defaults.iter().find(|d| d.is_plan) {
            Some(d) => format!("{m:.1} (= {} defaults)", engine(&d.backend)),
            None => format!("{m:.1}"),
        }
    }

    fn whole_on(&self, pu: &str) -> Option<f64> {
        self.report.measured_whole.iter().find(|w| w.pu == pu).and_then(|w| w.measured_us)
    }

    fn best_core(&self, cores: &[String]) -> Option<f64> {
        cores.iter().filter_map(|pu| self.whole_on(pu)).min_by(f64::total_cmp)
    }
}

/// The table's single-core columns: the PUs of the `all` SoC pinned to the first core alone
/// (each backend in f32 and, where the SoC has it, at the CPU's default precision), with their
/// headings.
fn one_core_pus() -> Result<Vec<(String, String)>> {
    let soc = driver().soc(&Options::new(bident_driver::Model::Zoo("example".into()), "all").soc)?;
    let c = bident_backend::allowed_cpus().first().copied().unwrap_or(0);
    Ok(soc
        .spec()
        .pus
        .iter()
        .filter(|p| p.cores == [c])
        .map(|p| {
            let engine = if p.backend == "onnxruntime" { "ONNX Runtime" } else { "OpenVINO" };
            (p.name.clone(), format!("{engine} 1 core {}", p.precision().unwrap_or("f32")))
        })
        .collect())
}

/// The engines table of `targets` into `out/engines.md`; the table, when every model ran.
pub fn engines(targets: &[Target], runs: u32, out: &std::path::Path) -> Result<String> {
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let columns = one_core_pus()?;
    let cores: Vec<String> = columns.iter().map(|(pu, _)| pu.clone()).collect();
    let t0 = std::time::Instant::now();
    let (mut rows, mut failed) = (vec![], vec![]);
    for (k, t) in targets.iter().enumerate() {
        tracing::info!("engines: [{}/{}] {} ({:.0} s)", k + 1, targets.len(), t.label, t0.elapsed().as_secs_f64());
        let mut o = Options::new(t.import.model.clone(), "all");
        o.import = t.import.clone();
        o.out = Some(target_dir().join("bident/engines").join(&t.label));
        o.plan.mode = bident_search::Mode::Parallel;
        o.run.config.runs = runs;
        o.run.config.whole_on = cores.clone();
        // a model that fails is reported and the eval goes on (it fails once the table is written)
        let out = match driver().pipeline(&o) {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!("engines: {} failed: {e:#}", t.label);
                failed.push((t.label.clone(), format!("{e:#}")));
                continue;
            }
        };
        let (g, plan, report, costs) = (out.graph, out.plan, out.report, out.costs);
        let report = report.context("the `all` SoC is measured")?;
        rows.push(Row {
            label: t.label.clone(),
            ops: g.ops.len(),
            ops_per_backend: ops_per_backend(&plan, &costs),
            ops_won: ops_won(&costs),
            schedule: plan.schedule.name().to_string(),
            precisions: plan_precisions(&plan),
            report,
        });
    }
    anyhow::ensure!(!rows.is_empty(), "every model failed (their errors are above)");
    let mut table = table(&rows, &columns);
    crate::eval::failures(&mut table, &failed, targets.len());
    bident_artifact::files::write_bytes(&out.join("engines.md"), table.as_bytes())?;
    print!("{table}");
    tracing::info!(
        "engines: {} models in {:.0} s [measured] -> {}",
        rows.len(),
        t0.elapsed().as_secs_f64(),
        out.join("engines.md").display()
    );
    match failed.first() {
        None => Ok(table),
        Some((label, _)) => {
            anyhow::bail!("{} of {} models failed, the first {label} (see the table)", failed.len(), targets.len())
        }
    }
}

/// `OV` or `ORT`, as the table's columns say.
fn engine(backend: &str) -> &str {
    match backend {
        "openvino" => "OV",
        "onnxruntime" => "ORT",
        other => other,
    }
}

/// The distinct precisions of the PUs the plan puts ops on.
fn plan_precisions(plan: &Plan) -> Vec<String> {
    let mut out: Vec<String> = plan
        .pus
        .iter()
        .zip(&plan.pu_precisions)
        .filter(|(pu, _)| plan.ops_per_pu.get(*pu).is_some_and(|&n| n > 0))
        .map(|(_, p)| p.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The plan's ops per backend of the PUs they sit on.
fn ops_per_backend(plan: &Plan, costs: &bident_profile::CostTable) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (pu, n) in &plan.ops_per_pu {
        if let Some(p) = costs.soc.pu(pu) {
            *out.entry(p.backend.clone()).or_insert(0) += n;
        }
    }
    out
}

/// Per backend, the ops whose cheapest profiled entry (dispatch + execution) is on its PUs.
fn ops_won(costs: &bident_profile::CostTable) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for op in &costs.ops {
        let best = op
            .per_pu
            .iter()
            .enumerate()
            .filter_map(|(j, c)| c.as_ref().map(|c| (j, c.dispatch_us + c.exec_us)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((j, _)) = best {
            *out.entry(costs.soc.pus[j].backend.clone()).or_insert(0) += 1;
        }
    }
    out
}

fn us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn ratio(a: Option<f64>, b: f64) -> Option<f64> {
    a.map(|a| a / b)
}

fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len().max(1) as f64).exp()
}

fn table(rows: &[Row], columns: &[(String, String)]) -> String {
    let cores: Vec<String> = columns.iter().map(|(pu, _)| pu.clone()).collect();
    let mut s = String::new();
    let machine = rows.first().map_or_else(bident_profile::host_description, |r| r.report.measured_on.clone());
    let precision = |b: &str| {
        rows.iter()
            .flat_map(|r| &r.report.backend_defaults)
            .find(|d| d.backend == b)
            .and_then(|d| d.precision.clone())
            .unwrap_or_else(|| "?".into())
    };
    let _ = writeln!(s, "## Engines, precisions and cores (measured on {machine})\n");
    let _ = writeln!(
        s,
        "Every figure is a median latency in µs, measured in one run per model: bident's plan on the `all` SoC \
         (latency, parallel mode) and, beside it, each backend whole at its own defaults (every core, not pinned; \
         OpenVINO in {}, ONNX Runtime in {}) and whole on one pinned core ({}). Speedups are over the faster \
         default and over the faster single-core run. `won` counts the ops whose cheapest profiled entry is on \
         that backend. `OV err` is how far OpenVINO's defaults' outputs are from the f32 whole model (max abs \
         difference); a plan in reduced precision may be as far, not further. `= OV defaults` marks a plan that \
         is that engine's default configuration (one measurement for both).\n",
        precision("openvino"),
        precision("onnxruntime"),
        cores.join(", ")
    );
    let headings: String = columns.iter().map(|(_, h)| format!(" {h} |")).collect();
    let _ = writeln!(
        s,
        "| model | ops | OpenVINO defaults | ONNX Runtime defaults |{headings} \
         OV err | plan: ops OV/ORT | won OV/ORT | schedule | precision | plan | vs best default | vs best 1 core | \
         vs tuned |"
    );
    let _ = writeln!(s, "|---|---|---|---|{}---|---|---|---|---|---|---|---|---|", "---|".repeat(columns.len()));
    let (mut vs_default, mut vs_core, mut vs_tuned) = (vec![], vec![], vec![]);
    for r in rows {
        let m = r.report.measured_us;
        let d = r.report.speedup_vs_best_default();
        let t = r.report.speedup_vs_tuned();
        vs_tuned.push(t);
        let c = ratio(r.best_core(&cores), m);
        vs_default.push(d);
        if let Some(c) = c {
            vs_core.push(c);
        }
        let n = |map: &BTreeMap<String, u32>, b: &str| map.get(b).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |{} {} | {}/{} | {}/{} | {} | {} | {} | {d:.2}x | {} | {t:.2}x |",
            r.label,
            r.ops,
            us(r.default_of("openvino")),
            us(r.default_of("onnxruntime")),
            cores.iter().map(|c| format!(" {} |", us(r.whole_on(c)))).collect::<String>(),
            r.default_err("openvino").map_or("-".into(), |e| format!("{e:.0e}")),
            n(&r.ops_per_backend, "openvino"),
            n(&r.ops_per_backend, "onnxruntime"),
            n(&r.ops_won, "openvino"),
            n(&r.ops_won, "onnxruntime"),
            r.schedule,
            r.precisions.join("+"),
            r.plan(),
            c.map_or("-".into(), |c| format!("{c:.2}x")),
        );
    }
    let worst = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let _ = writeln!(
        s,
        "\nOver the best default: geomean {:.2}x, lowest {:.2}x; over the best single core: geomean {:.2}x; over the \
         tuned baseline (the fastest whole-model configuration measured beside each plan): geomean {:.2}x, lowest \
         {:.2}x.",
        geomean(&vs_default),
        worst(&vs_default),
        geomean(&vs_core),
        geomean(&vs_tuned),
        worst(&vs_tuned)
    );
    // issue 17's figures over these runs: regret, and the prediction error of each plan's blocks
    // (over all of them, and over those in the fast state where it had enough)
    let pct = crate::eval::spread;
    let reports = || rows.iter().map(|r| &r.report);
    let _ = writeln!(
        s,
        "Regret (measured / the fastest alternative measured beside it - 1): {}; beyond the noise between blocks: {}. \
         Prediction error (each plan's median over its blocks): {}; over the blocks in the fast state only (each \
         plan with at least {} such blocks, the others with all of theirs): {}. {} of {} blocks ran in a slow state.",
        pct(reports().map(|r| r.regret).collect()),
        pct(reports().map(|r| r.regret_beyond_noise).collect()),
        pct(reports().map(|r| r.prediction_error_blocks[1]).collect()),
        bident_runtime::FAST_BLOCKS_MIN,
        pct(reports().map(|r| r.prediction_error_fast_or_all()[1]).collect()),
        reports().map(|r| r.slow_blocks).sum::<u32>(),
        reports().map(|r| r.blocks).sum::<u32>(),
    );
    s
}
