//! `cargo xtask fuzz [--target NAME]`: bident's libFuzzer targets (`fuzz/`), each with its corpus
//! seeded from the project's own files. The importers: `import` (ONNX; seeded with the zoo's
//! models) and `ovir` (the OpenVINO IRs that `cargo xtask ovir` converted, as XML, a zero byte,
//! then the weights). The artifact readers: `plan`, `cost-table` and `phased-graph` (seeded with
//! the artifacts of zoo models on the virtual `lunar-lake` SoC; the targets check what decodes
//! against the `example`'s). The SoC file: `soc` (the spec files of `tests/data/soc` and
//! `tests/data/bad-soc`). Needs a nightly toolchain (cargo fuzz builds with sanitizers);
//! installs cargo-fuzz when it is missing. Crashes land in `fuzz/artifacts/<target>/`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use bident_artifact::{Artifact, ContentHash};
use bident_search::{Mode, Objective, SearchConfig};
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
    /// Which target: an importer, `import` (ONNX) or `ovir` (OpenVINO IR); an artifact reader,
    /// `plan`, `cost-table` or `phased-graph`; or `soc` (SoC spec files).
    #[arg(long, default_value = "import", value_parser = ["import", "ovir", "plan", "cost-table", "phased-graph", "soc"])]
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
    let seeds = match a.target.as_str() {
        "ovir" => seed_ir(&corpus)?,
        "soc" => seed_soc(&corpus)?,
        "plan" | "cost-table" | "phased-graph" => seed_artifacts(&corpus, &a.target)?,
        _ => seed(&corpus)?,
    };
    eprintln!("fuzz: {seeds} seeds in {}; fuzzing for {} s", corpus.display(), a.seconds);
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

/// The `target` artifact of zoo models on the virtual `lunar-lake` SoC: the `example`'s are what
/// the target checks against (so they reach the verifiers), the others only decode. Plans in both
/// modes and for both objectives.
fn seed_artifacts(corpus: &Path, target: &str) -> Result<usize> {
    std::fs::create_dir_all(corpus)?;
    let soc = bident_profile::simulate::VirtualSoc::preset("lunar-lake").context("virtual SoC `lunar-lake`")?;
    let mut n = 0;
    let mut put = |name: String, bytes: Vec<u8>| -> Result<()> {
        std::fs::write(corpus.join(name), bytes)?;
        n += 1;
        Ok(())
    };
    fn encode<A: Artifact>(value: &A) -> Result<Vec<u8>> {
        Ok(bident_artifact::encode(value, ContentHash::of(b"fuzz"))?)
    }
    for model in ["example", "mlp", "attention"] {
        let onnx = bident_zoo::build_bytes(model, 0).with_context(|| format!("zoo model `{model}`"))?;
        let g = bident_ir::import_bytes(&onnx, &format!("{model}.onnx"), None, &Default::default())?;
        let phased = bident_partition::partition(&g)?;
        let costs = bident_profile::simulate::simulate(&g, &soc)?;
        match target {
            "phased-graph" => put(format!("{model}.phased-graph"), encode(&phased)?)?,
            "cost-table" => put(format!("{model}.cost-table"), encode(&costs)?)?,
            _ => {
                for mode in [Mode::Sequential, Mode::Parallel] {
                    for objective in [Objective::Latency, Objective::Energy] {
                        let cfg = SearchConfig { mode, objective, ..Default::default() };
                        let plan = bident_search::search(&phased, &costs, &cfg)?;
                        put(format!("{model}-{}-{}.plan", mode.name(), objective.name()), encode(&plan)?)?;
                    }
                }
            }
        }
    }
    Ok(n)
}

/// The SoC spec files of the tests, good and bad.
fn seed_soc(corpus: &Path) -> Result<usize> {
    std::fs::create_dir_all(corpus)?;
    let mut n = 0;
    for dir in ["tests/data/soc", "tests/data/bad-soc"] {
        let dir = crate::root().join(dir);
        for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
            let path = e?.path();
            if path.extension().is_some_and(|x| x == "toml") {
                let stem = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                std::fs::copy(&path, corpus.join(stem))?;
                n += 1;
            }
        }
    }
    Ok(n)
}
