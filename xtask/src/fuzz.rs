//! `cargo xtask fuzz [--target import|ovir]`: the importers' libFuzzer targets (`fuzz/`), with
//! their corpus seeded from the project's own models (ONNX; for `ovir`, the OpenVINO IRs that
//! `cargo xtask ovir` converted, as XML, a zero byte, then the weights). Needs a nightly
//! toolchain (cargo fuzz builds with sanitizers); installs cargo-fuzz when it is missing. Crashes
//! land in `fuzz/artifacts/<target>/`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;

const CARGO_FUZZ: &str = "0.13.2";

#[derive(Args)]
pub struct FuzzArgs {
    /// How long to fuzz, in seconds.
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Parallel fuzzing jobs.
    #[arg(long, default_value_t = 1)]
    pub jobs: u32,
    /// Which importer: `import` (ONNX) or `ovir` (OpenVINO IR).
    #[arg(long, default_value = "import", value_parser = ["import", "ovir"])]
    pub target: String,
}

pub fn fuzz(a: FuzzArgs) -> Result<()> {
    let root = crate::root();
    let nightly = Command::new("rustup").args(["run", "nightly", "rustc", "--version"]).output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        bail!("cargo fuzz needs a nightly toolchain: `rustup toolchain install nightly`");
    }
    let have = Command::new("cargo").args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("fuzz: installing cargo-fuzz {CARGO_FUZZ}");
        let st = Command::new("cargo").args(["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ]).status()?;
        anyhow::ensure!(st.success(), "installing cargo-fuzz failed");
    }
    let corpus = root.join("target/fuzz/corpus").join(&a.target);
    let seeds = if a.target == "ovir" { seed_ir(&corpus)? } else { seed(&corpus)? };
    eprintln!("fuzz: {seeds} seed models in {}; fuzzing for {} s", corpus.display(), a.seconds);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&root)
        .args(["+nightly", "fuzz", "run", "--fuzz-dir", "fuzz", &a.target])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={}", a.seconds))
        .args(["-rss_limit_mb=4096", "-timeout=20", "-max_len=1048576", "-print_final_stats=1"]);
    if a.jobs > 1 {
        // libFuzzer then writes each job's log to fuzz-<N>.log in the current folder
        cmd.arg(format!("-jobs={}", a.jobs)).arg(format!("-workers={}", a.jobs));
    }
    let st = cmd.status().context("running cargo fuzz")?;
    anyhow::ensure!(
        st.success(),
        "the fuzzer found a crash: see fuzz/artifacts/{}/ (keep the input in tests/data/fuzz-regressions/)",
        a.target
    );
    Ok(())
}

/// Zoo models up to 1 MiB (broken ones included) and, when generated, the ONNX node-test models.
fn seed(corpus: &Path) -> Result<usize> {
    std::fs::create_dir_all(corpus)?;
    let mut n = 0;
    for (name, _) in bident_zoo::MODELS {
        // big models only slow the fuzzer down (inputs are capped at 1 MiB)
        if let Some(bytes) = bident_zoo::build_bytes(name, 0).filter(|b| b.len() <= 1 << 20) {
            std::fs::write(corpus.join(format!("zoo-{name}.onnx")), bytes)?;
            n += 1;
        }
    }
    let node_tests = crate::root().join("target/conformance/onnx-1.23.2/node");
    if let Ok(dirs) = std::fs::read_dir(&node_tests) {
        for d in dirs.filter_map(|e| e.ok()) {
            let model = d.path().join("model.onnx");
            if model.is_file() {
                std::fs::copy(&model, corpus.join(format!("node-{}.onnx", d.file_name().to_string_lossy())))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// OpenVINO IRs up to 1 MiB (from `cargo xtask ovir` and the bad-input cases) as XML, 0, weights.
fn seed_ir(corpus: &Path) -> Result<usize> {
    std::fs::create_dir_all(corpus)?;
    let mut n = 0;
    for dir in [crate::root().join("target/ovir"), crate::root().join("tests/data/bad-input")] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for xml in
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "xml"))
        {
            let mut bytes = std::fs::read(&xml)?;
            bytes.push(0);
            bytes.extend(std::fs::read(xml.with_extension("bin")).unwrap_or_default());
            if bytes.len() <= 1 << 20 {
                let stem = xml.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                std::fs::write(corpus.join(format!("{stem}.ir")), bytes)?;
                n += 1;
            }
        }
    }
    if n == 0 {
        bail!("no OpenVINO IR to seed from: run `cargo xtask ovir` first");
    }
    Ok(n)
}
