//! `cargo xtask fuzz [--target NAME]`: bident's libFuzzer targets (`fuzz/`), each with its corpus
//! seeded from the project's own files. The importers: `import` (ONNX; seeded with the zoo's
//! models) and `ovir` (the OpenVINO IRs that `cargo xtask ovir` converted, as XML, a zero byte,
//! then the weights). The artifact readers: `plan`, `cost-table` and `phased-graph` (seeded with
//! the artifacts of zoo models on the virtual `lunar-lake` SoC; the targets check what decodes
//! against the `example`'s). The SoC file: `soc` (the spec files of `tests/data/soc` and
//! `tests/data/bad-soc`). Needs a nightly toolchain (cargo fuzz builds with sanitizers);
//! installs cargo-fuzz when it is missing. Crashes land in `fuzz/artifacts/<target>/`.
//!
//! `--replay` (stable toolchain) seeds the `import` corpus and replays it, with the kept
//! regressions, through the import path as the target does; with `--backend`, also through that
//! backend's compile path: every entry bident imports, as given, and every fused op of it, compiled
//! on the `local` SoC's CPU PU of that backend, must compile or be refused with an error.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use bident_artifact::{Artifact, ContentHash};
use bident_search::Mode;
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
    /// Do not fuzz: seed the `import` corpus and replay it (and tests/data/fuzz-regressions)
    /// through the import path, counting what imports and what is refused.
    #[arg(long)]
    pub replay: bool,
    /// With --replay: also compile every ONNX entry, and every fused op of what imports, on a
    /// PU of this backend.
    #[arg(long, requires = "replay", value_parser = ["openvino", "onnxruntime"])]
    pub backend: Option<String>,
    /// With --replay: print one JSON object with the counts as the last line of stdout.
    #[arg(long, requires = "replay")]
    pub json: bool,
}

pub fn fuzz(a: FuzzArgs) -> Result<()> {
    if a.replay {
        return replay(&a);
    }
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
    let mut n = 0;
    let mut put = |name: String, bytes: Vec<u8>| -> Result<()> {
        std::fs::write(corpus.join(name), bytes)?;
        n += 1;
        Ok(())
    };
    fn encode<A: Artifact>(value: &A) -> Result<Vec<u8>> {
        Ok(bident_artifact::encode(value, ContentHash::of(b"fuzz"))?)
    }
    // quiet: seeding prints one line for the whole corpus
    let d = bident_driver::Driver::new(crate::pipeline::target_dir(), crate::pipeline::passes(), &|_| {});
    for model in ["example", "mlp", "attention"] {
        let mut o = bident_driver::Options::new(bident_driver::Model::Zoo(model.into()), "lunar-lake");
        o.out = Some(crate::pipeline::target_dir().join("bident/fuzz-seeds").join(model));
        let mut p = d.prepare(&o, None)?;
        match target {
            "phased-graph" => put(format!("{model}.phased-graph"), encode(&p.phased)?)?,
            "cost-table" => put(format!("{model}.cost-table"), encode(&p.costs)?)?,
            _ => {
                for mode in [Mode::Sequential, Mode::Parallel] {
                    for goal in [bident_driver::Goal::Latency, bident_driver::Goal::Energy] {
                        let opts = bident_driver::PlanOptions { mode, goal, ..Default::default() };
                        let (plan, _) = d.plan(&mut p, &opts, o.measuring)?;
                        put(format!("{model}-{}-{}.plan", mode.name(), plan.objective.name()), encode(&plan)?)?;
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

/// What one replayed entry gave: import refused or not, and what the backend compiled.
#[derive(Default)]
struct Counts {
    entries: usize,
    imported: usize,
    import_refused: usize,
    whole_compiled: usize,
    whole_refused: usize,
    ops: usize,
    ops_compiled: usize,
    ops_refused: usize,
}

/// `--replay`: the `import` corpus and the kept regressions through the import path (import,
/// verify, extract every op, as the fuzz target does) and, with `--backend`, through that
/// backend's compile. A panic is caught and reported with its entry; a crash ends the process.
fn replay(a: &FuzzArgs) -> Result<()> {
    anyhow::ensure!(a.target == "import", "--replay replays the `import` target's corpus, not `{}`", a.target);
    let root = crate::root();
    let corpus = root.join("target/fuzz/corpus/import");
    let seeds = seed(&corpus)?;
    let entries = replay_entries(&[corpus.clone(), root.join("tests/data/fuzz-regressions")])?;
    let backend = a.backend.as_deref().map(crate::pipeline::backend_named).transpose()?;
    let pu = match &backend {
        Some(be) => {
            let soc = bident_backend::SocSpec::preset("local", be.as_ref())?;
            Some(soc.pus.iter().find(|p| p.device == "CPU").context("no CPU device")?.clone())
        }
        None => None,
    };
    let target = match (&backend, &pu) {
        (Some(be), Some(pu)) => Some((be.as_ref(), pu)),
        _ => None,
    };
    eprintln!(
        "fuzz: replaying {} entries ({seeds} seeds in {}, regressions, what the fuzzer added){}",
        entries.len(),
        corpus.display(),
        match target {
            Some((be, pu)) => format!(" through import and {} {} PU `{}`", be.name(), be.version(), pu.name),
            None => " through import".into(),
        }
    );
    let t0 = std::time::Instant::now();
    let r = Replayed::each(&entries, target, a.json)?;
    r.print(target, t0.elapsed().as_secs_f64(), a.json);
    anyhow::ensure!(
        r.failures.is_empty(),
        "{} of {} entries failed the replay (FAIL lines above)",
        r.failures.len(),
        r.c.entries
    );
    Ok(())
}

/// The files of `dirs`, sorted: the corpus and the kept regressions.
fn replay_entries(dirs: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>> {
    let mut entries = vec![];
    for dir in dirs {
        for e in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
            let path = e?.path();
            // `.ir` regressions belong to the `ovir` target
            if path.is_file() && path.extension().is_none_or(|x| x != "ir") {
                entries.push(path);
            }
        }
    }
    entries.sort();
    Ok(entries)
}

/// The backend and PU a replay compiles on, if any.
type Target<'a> = Option<(&'a dyn bident_backend::Backend, &'a bident_backend::PuSpec)>;

/// What a replay found: the counts, the backend's refusals by reason, the failures.
struct Replayed {
    c: Counts,
    reasons: std::collections::BTreeMap<String, Vec<String>>,
    failures: Vec<String>,
}

impl Replayed {
    /// Replay every entry, a panic caught and counted as its entry's failure.
    fn each(entries: &[std::path::PathBuf], target: Target, json: bool) -> Result<Self> {
        let mut c = Counts::default();
        let mut reasons: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut failures = vec![];
        for (k, path) in entries.iter().enumerate() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                replay_one(&bytes, target, &mut c, &mut |why| {
                    reasons.entry(crate::conformance::group_key(&why)).or_default().push(name.clone())
                })
            }));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!("{name}: {e}")),
                Err(p) => failures.push(format!(
                    "{name}: panicked: {}",
                    p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied()).unwrap_or("?")
                )),
            }
            if !json && (k + 1) % 200 == 0 {
                eprintln!("fuzz: {}/{} entries", k + 1, entries.len());
            }
        }
        c.entries = entries.len();
        Ok(Self { c, reasons, failures })
    }

    /// The refusals grouped, the failures, the summary line and, with `json`, one JSON line.
    fn print(&self, target: Target, seconds: f64, json: bool) {
        let (c, failures) = (&self.c, &self.failures);
        if target.is_some() {
            println!("backend refusals, grouped (count, reason, examples):");
            let mut rows: Vec<_> = self.reasons.iter().collect();
            rows.sort_by(|x, y| y.1.len().cmp(&x.1.len()).then(x.0.cmp(y.0)));
            for (key, names) in rows.iter().take(30) {
                let ex: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
                println!("{:>5}  {key}  [{}]", names.len(), ex.join(", "));
            }
        }
        for f in failures {
            println!("FAIL {f}");
        }
        println!(
            "fuzz replay: {} entries in {:.0} s; import: {} imported, {} refused{}; {} failures",
            c.entries,
            seconds,
            c.imported,
            c.import_refused,
            match target {
                Some((be, _)) => format!(
                    "; {} whole: {} compile, {} refused; {} fused ops: {} compile, {} refused",
                    be.name(),
                    c.whole_compiled,
                    c.whole_refused,
                    c.ops,
                    c.ops_compiled,
                    c.ops_refused
                ),
                None => String::new(),
            },
            failures.len()
        );
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "entries": c.entries,
                    "imported": c.imported,
                    "import_refused": c.import_refused,
                    "backend": target.map(|(be, _)| be.name().to_string()),
                    "backend_version": target.map(|(be, _)| be.version()),
                    "whole_compiled": c.whole_compiled,
                    "whole_refused": c.whole_refused,
                    "ops": c.ops,
                    "ops_compiled": c.ops_compiled,
                    "ops_refused": c.ops_refused,
                    "failures": failures.len(),
                })
            );
        }
    }
}

/// One entry: what the fuzz target asserts (an imported graph verifies and every op extracts) and,
/// with a backend, an entry bident imports and every extracted op through its compile; `refused` gets each
/// backend error.
fn replay_one(
    bytes: &[u8],
    target: Option<(&dyn bident_backend::Backend, &bident_backend::PuSpec)>,
    c: &mut Counts,
    refused: &mut dyn FnMut(String),
) -> Result<()> {
    let mut compile = |model: &[u8]| -> bool {
        let Some((be, pu)) = target else { return false };
        match be.compile(model, pu) {
            Ok(_) => true,
            Err(e) => {
                refused(e.to_string());
                false
            }
        }
    };
    // a model bident refuses never reaches an engine (ONNX Runtime 1.32.0 hangs creating a
    // session for some: tests/data/fuzz-regressions/einsum-equation-hangs-onnxruntime.onnx)
    let Ok(g) = bident_ir::import_bytes(bytes, "fuzz.onnx", None, &Default::default()) else {
        c.import_refused += 1;
        return Ok(());
    };
    c.imported += 1;
    if target.is_some() {
        if compile(bytes) {
            c.whole_compiled += 1;
        } else {
            c.whole_refused += 1;
        }
    }
    bident_ir::verify(&g).context("an imported graph does not verify")?;
    let ex = bident_ir::Extractor::new(&g).context("extractor")?;
    for op in 0..g.ops.len() as u32 {
        let model = ex.extract(op).with_context(|| format!("op {op} does not extract"))?;
        if target.is_some() {
            c.ops += 1;
            if compile(&model) {
                c.ops_compiled += 1;
            } else {
                c.ops_refused += 1;
            }
        }
    }
    Ok(())
}
