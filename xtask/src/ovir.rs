//! `cargo xtask ovir`: OpenVINO IR import checked against the ONNX it came from. Each case in
//! `tests/data/ovir/` names an ONNX model (zoo or third-party); `ovc` from the pinned wheel
//! converts it to IR (weights kept f32) under `target/ovir/`; bident imports both, runs the
//! fused ops of each one by one on the local CPU with the same inputs, and compares. The table shows nodes and fused ops from both sources, by bident's rules and as
//! OpenVINO fuses them (ovc already fuses some patterns, so the rules see different graphs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use bident_backend::SocSpec;
use bident_ir::FusedGraph;
use bident_tensor::HostTensor;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// `zoo:NAME` or `thirdparty:CASE`.
    model: String,
    #[serde(default)]
    input_shape: BTreeMap<String, Vec<u64>>,
    /// Largest absolute difference accepted between the IR and the ONNX model, both run op by op
    /// (default 1e-4).
    #[serde(default)]
    tolerance: Option<f64>,
}

/// numpy for the openvino wheel's Python API (ovc); the wheel itself comes from the install.
const NUMPY: &str = "numpy==2.4.6";

pub fn ovir(only: &[String], json: bool) -> Result<()> {
    let root = crate::root();
    let be = crate::pipeline::openvino()?;
    let pu = SocSpec::preset("local", be.as_ref())?.pus.remove(0);
    let python = python()?;
    let cases = crate::chosen_cases("ovir", only)?;
    let mut rows = vec![];
    for path in &cases {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let c: Case =
            serde_norway::from_str(&std::fs::read_to_string(path)?).with_context(|| path.display().to_string())?;
        let onnx = source(&c.model)?;
        let xml = root.join("target/ovir").join(format!("{name}.xml"));
        convert(&python, &onnx, &xml, &c.input_shape)?;
        let opts = bident_ir::ImportOptions { input_shapes: c.input_shape.clone(), ..Default::default() };
        let from_onnx = bident_ir::import(&onnx, &opts).with_context(|| onnx.display().to_string())?;
        let from_ir = bident_ir::import(&xml, &opts).with_context(|| xml.display().to_string())?;
        let inputs = from_onnx.example_inputs(0);
        // the oracle: the ONNX model through the same path (each fused op alone, f32), which
        // zoo-check holds to the onnx reference evaluator. OpenVINO running the ONNX model whole
        // is not one: on an AVX2-only CPU its int8 compiles differ from the reference by up to
        // half the output's range.
        let want = bident_runtime::run_op_by_op(&from_onnx, be.as_ref(), &pu, inputs.clone()).map_err(|e| {
            anyhow::anyhow!("{name}: {e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default())
        })?;
        // the IR's inputs by name (ovc keeps the ONNX input names)
        let fed = ir_inputs(&name, &from_onnx, &from_ir, &inputs)?;
        let got = bident_runtime::run_op_by_op(&from_ir, be.as_ref(), &pu, fed).map_err(|e| {
            anyhow::anyhow!("{name}: {e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default())
        })?;
        let err = max_output_err(&name, &from_onnx, &from_ir, &want, &got)?;
        // grouped as OpenVINO fuses them, the two sources should come close
        let backend_ops = |p: &Path| -> Result<usize> {
            let mut o = opts.clone();
            Ok(crate::pipeline::driver().import_backend_fused(p, &mut o, be.as_ref())?.ops.len())
        };
        let (onnx_backend, ir_backend) = (backend_ops(&onnx)?, backend_ops(&xml)?);
        eprintln!(
            "ovir: {name}: ONNX {} nodes -> {} fused ops ({onnx_backend} by backend); IR {} nodes -> {} fused ops \
             ({ir_backend} by backend); max abs err {err:.2e}",
            from_onnx.source.nodes,
            from_onnx.ops.len(),
            from_ir.source.nodes,
            from_ir.ops.len()
        );
        rows.push(serde_json::json!({
            "case": name,
            "onnx_nodes": from_onnx.source.nodes,
            "onnx_fused_ops": from_onnx.ops.len(),
            "ir_nodes": from_ir.source.nodes,
            "ir_fused_ops": from_ir.ops.len(),
            "onnx_backend_ops": onnx_backend,
            "ir_backend_ops": ir_backend,
            "max_abs_err": err,
            "tolerance": c.tolerance.unwrap_or(1e-4),
        }));
    }
    print_table(&rows);
    if json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// The ONNX model's `inputs` in the IR's input order, by name (ovc keeps the ONNX input names).
fn ir_inputs(
    name: &str,
    from_onnx: &FusedGraph,
    from_ir: &FusedGraph,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>> {
    from_ir
        .inputs
        .iter()
        .map(|&t| {
            let n = &from_ir.tensor(t).name;
            from_onnx
                .inputs
                .iter()
                .position(|&u| from_onnx.tensor(u).name == *n)
                .map(|k| inputs[k].clone())
                .with_context(|| format!("{name}: the IR has an input `{n}` the ONNX model lacks"))
        })
        .collect()
}

/// The largest difference between the IR's outputs `got` and the ONNX model's `want`, matched by
/// name (ovc may reorder them).
fn max_output_err(
    name: &str,
    from_onnx: &FusedGraph,
    from_ir: &FusedGraph,
    want: &[HostTensor],
    got: &[HostTensor],
) -> Result<f64> {
    if got.len() != want.len() {
        bail!("{name}: the IR gives {} outputs, the ONNX model {}", got.len(), want.len());
    }
    let mut err = 0.0f64;
    for (k, &t) in from_onnx.outputs.iter().enumerate() {
        let n = &from_onnx.tensor(t).name;
        let j = from_ir
            .outputs
            .iter()
            .position(|&u| from_ir.tensor(u).name == *n)
            .with_context(|| format!("{name}: the IR has no output `{n}`"))?;
        err = err.max(got[j].max_abs_diff(&want[k]).with_context(|| format!("{name}: output `{n}`"))?);
    }
    Ok(err)
}

/// The cases as a markdown table.
fn print_table(rows: &[serde_json::Value]) {
    println!(
        "| case | ONNX: nodes -> fused ops (rules / backend) | IR: nodes -> fused ops (rules / backend) | max abs err |"
    );
    println!("|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} -> {} / {} | {} -> {} / {} | {:.2e} |",
            r["case"].as_str().unwrap_or(""),
            r["onnx_nodes"],
            r["onnx_fused_ops"],
            r["onnx_backend_ops"],
            r["ir_nodes"],
            r["ir_fused_ops"],
            r["ir_backend_ops"],
            r["max_abs_err"].as_f64().unwrap_or(f64::NAN)
        );
    }
}

/// The ONNX file of a case's `model`.
fn source(model: &str) -> Result<PathBuf> {
    if let Some(zoo) = model.strip_prefix("zoo:") {
        let bytes = bident_zoo::build_bytes(zoo, 0).with_context(|| format!("no zoo model `{zoo}`"))?;
        let path = crate::root().join("target/bident/zoo").join(format!("{zoo}.onnx"));
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
        std::fs::write(&path, bytes)?;
        return Ok(path);
    }
    if let Some(case) = model.strip_prefix("thirdparty:") {
        return crate::thirdparty::model_of(case);
    }
    bail!("model `{model}`: expected zoo:NAME or thirdparty:CASE")
}

/// A Python with numpy that sees the pinned openvino wheel (PYTHONPATH), for ovc.
fn python() -> Result<PathBuf> {
    crate::venv::python_with(&crate::root().join("target/ovir/venv"), &[NUMPY])
}

/// OpenVINO's own record of the ONNX nodes each executed layer of `onnx` holds
/// (`originalLayersNames`, through its Python API: `xtask/ovc/fused_layers.py`), compiled as the
/// reference PU compiles it.
pub(crate) fn fused_layers(onnx: &Path) -> Result<Vec<Vec<String>>> {
    let wheel = bident_backend::openvino::install::install_dir(&crate::pipeline::target_dir());
    let o = Command::new(python()?)
        .env("PYTHONPATH", &wheel)
        .arg(crate::root().join("xtask/ovc/fused_layers.py"))
        .arg(onnx)
        .output()
        .context("running fused_layers.py")?;
    if !o.status.success() {
        bail!(
            "fused_layers.py failed on {}: {}",
            onnx.display(),
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
        );
    }
    serde_json::from_slice(&o.stdout).context("fused_layers.py output")
}

/// ovc: ONNX -> IR (skipped when the IR is newer than the ONNX file).
fn convert(python: &Path, onnx: &Path, xml: &Path, shapes: &BTreeMap<String, Vec<u64>>) -> Result<()> {
    let fresh = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(a), Some(b)) = (fresh(xml), fresh(onnx))
        && a > b
    {
        return Ok(());
    }
    std::fs::create_dir_all(xml.parent().unwrap_or(Path::new(".")))?;
    let wheel = bident_backend::openvino::install::install_dir(&crate::pipeline::target_dir());
    let o = Command::new(python)
        .env("PYTHONPATH", &wheel)
        .arg(crate::root().join("xtask/ovc/convert.py"))
        .arg(onnx)
        .arg(xml)
        .args(shapes.iter().map(|(k, v)| format!("{k}={}", v.iter().map(u64::to_string).collect::<Vec<_>>().join(","))))
        .output()
        .context("running ovc")?;
    if !o.status.success() {
        bail!("ovc failed on {}: {}", onnx.display(), String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or(""));
    }
    Ok(())
}
