//! Private Python venvs under `target/` (the onnx reference evaluator's, ovc's numpy), made
//! once: concurrent callers (CI's tests run several commands at once) wait on a lock, and a
//! venv counts as ready only once its marker is written after pip finished.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// The Python of the venv at `dir` with `packages` installed (`name==version` each), making it
/// first where it is missing.
pub fn python_with(dir: &Path, packages: &[&str]) -> Result<PathBuf> {
    let python = dir.join("bin/python");
    let ready = dir.join(format!(".ready-{}", packages.join("-")));
    if ready.is_file() {
        return Ok(python);
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
    }
    let lock = bident_artifact::files::open_lock_file(&dir.with_extension("lock"))?;
    lock.lock().context("locking the venv")?;
    if ready.is_file() {
        return Ok(python);
    }
    tracing::info!("installing {} with pip into a venv in {}", packages.join(", "), dir.display());
    if !python.is_file() {
        let st = Command::new("python3").args(["-m", "venv"]).arg(dir).status().context("python3 -m venv")?;
        anyhow::ensure!(st.success(), "could not create a Python venv in {}", dir.display());
    }
    let st = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status()
        .context("running pip")?;
    anyhow::ensure!(st.success(), "pip could not install {}", packages.join(", "));
    bident_artifact::files::write_bytes(&ready, b"")?;
    Ok(python)
}
