//! `cargo xtask conformance [--backend openvino|onnxruntime]`: the ONNX backend node tests
//! through bident's path (import -> extraction -> every fused op compiled and run on its own)
//! beside the backend running each test model whole, both on the same PU of that backend (the
//! `local` SoC's CPU, computing in f32). The test cases are generated from the pinned `onnx` pip
//! package into `target/conformance/` on first use.
//!
//! parity = (tests passing through bident's path among those the backend passes whole) / (tests
//! the backend passes whole): bident must not lose anything the backend can do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use bident_backend::{Backend, PuSpec, SocSpec};
use bident_tensor::HostTensor;
use clap::Args;

/// The `onnx` release whose test cases are used; its `onnx.proto` is the one vendored.
const ONNX_VERSION: &str = "1.23.2";
/// Inputs up to this many elements may be pinned to their test values.
const PIN_LIMIT: usize = 4096;
/// The ONNX backend test runner's default tolerances.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

/// Relative tolerance for outputs of `dtype`: the runner's, or two units in the last place where
/// that is coarser. A result rounded to f16 at every op boundary (as ONNX semantics have it, and
/// as bident's path does) may differ from the reference's by that much. Both paths are judged
/// alike.
fn rtol(dtype: bident_tensor::DType) -> f64 {
    match dtype {
        bident_tensor::DType::F16 => 2.0 * 2f64.powi(-10),
        bident_tensor::DType::Bf16 => 2.0 * 2f64.powi(-7),
        _ => RTOL,
    }
}

#[derive(Args)]
pub struct ConformanceArgs {
    /// Folder of node test cases (default: generated under target/conformance/).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Only tests whose name contains this.
    #[arg(long)]
    pub filter: Option<String>,
    /// Only the tests listed in this file (one name a line, `#` comments).
    #[arg(long)]
    pub subset: Option<PathBuf>,
    /// Last stdout line: one JSON object with total, whole_pass, extracted_pass, parity and the
    /// backend, its version and the PU's precision.
    #[arg(long)]
    pub json: bool,
    /// The backend of the PU both paths run on: the whole test model, and every fused op.
    #[arg(long, default_value = "openvino", value_parser = ["openvino", "onnxruntime"])]
    pub backend: String,
}

/// How a backend is named in the summary.
fn display_name(backend: &str) -> &str {
    match backend {
        "openvino" => "OpenVINO",
        "onnxruntime" => "ONNX Runtime",
        other => other,
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    Mismatch(String),
    Error(String),
}

impl Outcome {
    fn word(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Mismatch(_) => "mismatch",
            Outcome::Error(_) => "error",
        }
    }
    fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Pass => None,
            Outcome::Mismatch(r) | Outcome::Error(r) => Some(r),
        }
    }
}

/// A Python with the pinned onnx package, in a private venv under `target/conformance/`
/// (created and filled with pip on first use).
pub fn onnx_python() -> Result<PathBuf> {
    crate::venv::python_with(&crate::root().join("target/conformance/venv"), &[&format!("onnx=={ONNX_VERSION}")])
}

/// Generate the node test cases with the pinned onnx package in a private venv.
fn generated_dir() -> Result<PathBuf> {
    let base = crate::root().join("target/conformance");
    let out = base.join(format!("onnx-{ONNX_VERSION}")).join("node");
    if out.join("test_add").join("model.onnx").is_file() {
        return Ok(out);
    }
    eprintln!("conformance: generating the ONNX node tests with onnx=={ONNX_VERSION} (pip, into {})", base.display());
    let python = onnx_python()?;
    let script = crate::root().join("xtask/conformance/gen_node_tests.py");
    let o = Command::new(&python).arg(&script).arg(&out).output()?;
    if !o.status.success() {
        bail!("generating node tests failed: {}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or(""));
    }
    Ok(out)
}

fn read_pb(path: &Path) -> Result<(String, HostTensor), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    bident_ir::read_tensor(&bytes).map_err(|e| format!("test data: {e}"))
}

/// Inputs and expected outputs of `test_data_set_0`.
type DataSet = (Vec<(String, HostTensor)>, Vec<(String, HostTensor)>);

fn data_set(dir: &Path) -> Result<DataSet, String> {
    let d = dir.join("test_data_set_0");
    let list = |prefix: &str| -> Result<Vec<(String, HostTensor)>, String> {
        let mut out = vec![];
        for j in 0.. {
            let p = d.join(format!("{prefix}_{j}.pb"));
            if !p.is_file() {
                break;
            }
            out.push(read_pb(&p)?);
        }
        Ok(out)
    };
    Ok((list("input")?, list("output")?))
}

fn compare(got: &[HostTensor], names: &[String], want: &[(String, HostTensor)]) -> Outcome {
    if got.len() != want.len() {
        return Outcome::Mismatch(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (k, (wname, w)) in want.iter().enumerate() {
        // match by name where the backend kept it, else by position
        let g = names.iter().position(|n| n == wname).map_or(&got[k], |i| &got[i]);
        if let Some(m) = g.mismatch(w, rtol(w.dtype), ATOL) {
            return Outcome::Mismatch(format!("output `{wname}`: {m}"));
        }
    }
    Outcome::Pass
}

fn whole(
    be: &dyn Backend,
    pu: &PuSpec,
    model: &[u8],
    inputs: &[(String, HostTensor)],
    want: &[(String, HostTensor)],
) -> Outcome {
    let mut exe = match be.compile(model, pu) {
        Ok(e) => e,
        Err(e) => return Outcome::Error(format!("compile: {e}")),
    };
    let named: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let Some(ordered) = bident_backend::feed_order(exe.inputs(), &named) else {
        return Outcome::Error(format!("{} ports for {} test inputs", exe.inputs().len(), inputs.len()));
    };
    let names: Vec<String> = exe.outputs().iter().map(|p| p.name.clone()).collect();
    match exe.run(&ordered) {
        Ok(out) => compare(&out, &names, want),
        Err(e) => Outcome::Error(format!("run: {e}")),
    }
}

fn through_bident(
    be: &dyn Backend,
    pu: &PuSpec,
    model: &[u8],
    inputs: &[(String, HostTensor)],
    want: &[(String, HostTensor)],
) -> Outcome {
    let mut opts = bident_ir::ImportOptions {
        input_shapes: inputs.iter().map(|(n, t)| (n.clone(), t.shape.clone())).collect(),
        ..Default::default()
    };
    // The node tests feed shape parameters (Reshape's shape, TopK's k) as inputs. Pin the
    // inputs bident asks for to the test's values, as a user pins fixed parameters; where the
    // value is computed from inputs, pin the small integer inputs it may come from.
    let g = loop {
        match bident_ir::import_bytes(model, "model.onnx", None, &opts) {
            Ok(g) => break g,
            Err(bident_ir::IrError::NeedsValue { tensor, .. }) => {
                let before = opts.input_values.len();
                match inputs.iter().find(|(n, _)| *n == tensor) {
                    Some((n, t)) => {
                        opts.input_values.insert(n.clone(), t.clone());
                    }
                    // small integer inputs first, then small float ones (Range's start and limit)
                    None => {
                        for float in [false, true] {
                            let more: Vec<(String, HostTensor)> = inputs
                                .iter()
                                .filter(|(n, t)| {
                                    t.dtype.is_float() == float
                                        && t.numel() <= PIN_LIMIT
                                        && !opts.input_values.contains_key(n)
                                })
                                .cloned()
                                .collect();
                            opts.input_values.extend(more);
                            if opts.input_values.len() > before {
                                break;
                            }
                        }
                    }
                }
                if opts.input_values.len() == before {
                    return Outcome::Error(format!("import: `{tensor}` must be known and cannot be pinned"));
                }
            }
            Err(e) => return Outcome::Error(format!("import: {e}")),
        }
    };
    let mut fed = vec![];
    for &t in &g.inputs {
        match inputs.iter().find(|(n, _)| *n == g.tensor(t).name) {
            Some((_, v)) => fed.push(v.clone()),
            None => return Outcome::Error(format!("no test input for `{}`", g.tensor(t).name)),
        };
    }
    let got = match bident_runtime::run_op_by_op(&g, be, pu, fed) {
        Ok(got) => got,
        Err(e @ bident_runtime::RuntimeError::OpOutput { .. }) => return Outcome::Mismatch(e.to_string()),
        Err(e) => {
            return Outcome::Error(format!(
                "{e}: {}",
                std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default()
            ));
        }
    };
    let names: Vec<String> = g.outputs.iter().map(|&t| g.tensor(t).name.clone()).collect();
    compare(&got, &names, want)
}

/// A failure reason without the specifics (names, numbers), to group similar failures.
pub fn group_key(reason: &str) -> String {
    let mut out = String::new();
    let mut in_tick = false;
    for c in reason.chars() {
        match c {
            '`' => {
                in_tick = !in_tick;
                if in_tick {
                    out.push_str("`…`");
                }
            }
            _ if in_tick => {}
            '0'..='9' => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            _ => out.push(c),
        }
    }
    out.chars().take(110).collect()
}

pub fn conformance(a: ConformanceArgs) -> Result<()> {
    let dir = match a.dir {
        Some(d) => d,
        None => generated_dir()?,
    };
    let tests = select_tests(&dir, a.filter.as_deref(), a.subset.as_deref())?;
    let be = crate::pipeline::backend_named(&a.backend)?;
    let soc = SocSpec::preset("local", be.as_ref())?;
    let pu = soc.pus.iter().find(|p| p.device == "CPU").context("no CPU device")?.clone();
    // both paths are judged against the reference's f32 results: a PU computing in less would
    // lose tests for its precision, not for bident's path
    let precision = pu.properties.get("INFERENCE_PRECISION_HINT").cloned().unwrap_or_default();
    anyhow::ensure!(
        precision == "f32",
        "{} PU `{}` does not compute in f32 (INFERENCE_PRECISION_HINT `{precision}`)",
        a.backend,
        pu.name
    );
    let (name, version) = (display_name(&a.backend), be.version());

    let (mut whole_pass, mut bident_pass, mut both) = (0usize, 0usize, 0usize);
    let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let t0 = std::time::Instant::now();
    for (k, path) in tests.iter().enumerate() {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let model = std::fs::read(path.join("model.onnx"))?;
        let (w, b) = match data_set(path) {
            Ok((inputs, want)) => (
                whole(be.as_ref(), &pu, &model, &inputs, &want),
                through_bident(be.as_ref(), &pu, &model, &inputs, &want),
            ),
            Err(e) => (Outcome::Error(e.clone()), Outcome::Error(e)),
        };
        whole_pass += (w == Outcome::Pass) as usize;
        bident_pass += (b == Outcome::Pass) as usize;
        both += (w == Outcome::Pass && b == Outcome::Pass) as usize;
        let lost = w == Outcome::Pass && b != Outcome::Pass;
        // -v: a line for every test, not only the ones lost
        if tracing::enabled!(tracing::Level::DEBUG) || lost {
            println!(
                "{name:<60} whole: {:<8} bident: {:<8} {}",
                w.word(),
                b.word(),
                b.reason().or(w.reason()).unwrap_or("")
            );
        }
        for (path_name, o) in [("whole", &w), ("bident", &b)] {
            if let Some(r) = o.reason() {
                groups.entry((path_name.to_string(), group_key(r))).or_default().push(name.clone());
            }
        }
        if !a.json && (k + 1) % 200 == 0 {
            eprintln!("conformance: {}/{} tests", k + 1, tests.len());
        }
    }
    let total = tests.len();
    let parity = if whole_pass == 0 { 1.0 } else { both as f64 / whole_pass as f64 };
    println!();
    print_groups(groups);
    println!();
    println!(
        "conformance: {total} tests in {:.0} s on {name} {version} (PU `{}`, {precision}); whole: {whole_pass} pass; through bident: {bident_pass} pass; parity {:.4} ({both}/{whole_pass})",
        t0.elapsed().as_secs_f64(),
        pu.name,
        parity
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "total": total,
                "whole_pass": whole_pass,
                "extracted_pass": bident_pass,
                "both_pass": both,
                "parity": parity,
                "onnx_version": ONNX_VERSION,
                "backend": a.backend,
                "backend_version": version,
                "precision": precision,
            })
        );
    }
    Ok(())
}

/// The test folders of `dir` (those with a `model.onnx`) whose name holds `filter` and, with a
/// `subset` file, that it lists; every test it lists must exist.
fn select_tests(dir: &Path, filter: Option<&str>, subset: Option<&Path>) -> Result<Vec<PathBuf>> {
    let subset: Option<Vec<String>> = match subset {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| p.display().to_string())?
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
                .filter(|l| !l.is_empty())
                .collect(),
        ),
        None => None,
    };
    let mut tests: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| dir.display().to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            filter.is_none_or(|f| name.contains(f)) && subset.as_ref().is_none_or(|s| s.contains(&name))
        })
        .collect();
    tests.sort();
    if let Some(s) = &subset {
        let missing: Vec<&String> = s
            .iter()
            .filter(|t| !tests.iter().any(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == t.as_str())))
            .collect();
        anyhow::ensure!(missing.is_empty(), "subset names tests that do not exist: {missing:?}");
    }
    Ok(tests)
}

/// The reasons tests failed, grouped by path and reason, most frequent first.
fn print_groups(groups: BTreeMap<(String, String), Vec<String>>) {
    println!("reasons, grouped (count, path, reason, examples):");
    let mut rows: Vec<_> = groups.into_iter().collect();
    rows.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    for ((path_name, key), names) in rows.iter().take(40) {
        let ex: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
        println!("{:>5}  {path_name:<6} {key}  [{}]", names.len(), ex.join(", "));
    }
}
