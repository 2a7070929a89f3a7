//! `cargo xtask`: bident's command surface: argument parsing and printing over
//! `bident_driver`, which lists the stages in order and runs them. Every stage also has its own
//! subcommand that reads the previous artifact and writes its own.
//!
//! A library too, so that a crate of one's own can run the same command line with passes of
//! its own registered ([`main_with`], as `rustc_driver`-based tools do): `examples/custom-search`
//! is one.

mod args;
mod codegen;
mod conformance;
mod engines;
mod eval;
mod explain;
mod fuzz;
mod inspect;
mod ovir;
mod pipeline;
mod print;
mod results;
mod svg;
mod thirdparty;
mod venv;
mod zoocheck;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "bident: operator-level orchestration over heterogeneous PUs",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// More on stderr: with -v, every op's profiled time on every PU (RUST_LOG, where set,
    /// decides instead).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less on stderr: no stage lines, progress or summaries; results and errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

/// Stage lines on stderr through `tracing`, as they always read (`import: ...`): `RUST_LOG`
/// where set, else info, warn with -q, debug with -v.
fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, _) => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .without_time()
        .with_target(false)
        .with_level(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every stage on a model: import, partition, profile, search, run.
    Pipeline(Box<args::PipelineArgs>),
    /// Stage 1: ONNX -> fused-graph.bin
    Import(args::ImportArgs),
    /// Stage 2: fused-graph.bin -> phased-graph.bin
    Partition(args::PartitionArgs),
    /// Stage 3: fused-graph.bin -> cost-table.bin (measures on the SoC's PUs)
    Profile(args::ProfileArgs),
    /// Stage 4: phased-graph.bin + cost-table.bin -> plan.bin
    Search(args::SearchArgs),
    /// Stage 5: fused-graph.bin + plan.bin -> run-report.bin (executes on the PUs)
    Run(args::RunArgs),
    /// Serve a folder's plan: inferences through a session that notices a drifting PU, plans
    /// again off the hot path and swaps the new plan in (`--inject-fault PU:slow=F@N` to try it).
    Serve(args::ServeArgs),
    /// Plans written by other tools: `plan import DIR FILE`.
    Plan {
        #[command(subcommand)]
        cmd: pipeline::PlanCmd,
    },
    /// Phased graphs written by other tools: `phases import DIR FILE`.
    Phases {
        #[command(subcommand)]
        cmd: pipeline::PhasesCmd,
    },
    /// The partition passes and mapping searches `--partition` and `--search` can name.
    Passes,
    /// Co-execution costs of two imported models' ops sharing each PU (for concurrent search).
    Coexec(inspect::CoexecArgs),
    /// Cost tables to and from JSON or CSV (by extension): profile on one machine, plan on
    /// another.
    Costs {
        #[command(subcommand)]
        cmd: inspect::CostsCmd,
    },
    /// What moved between two plans of one model, and the predicted change.
    PlanDiff { a: PathBuf, b: PathBuf },
    /// Print any artifact as YAML.
    Show { file: PathBuf },
    /// Where each fused op of DIR's plan went and why: per op its name, kind, PU, predicted
    /// start and time, the reason (`best-alone`, `joins-previous`, `avoids-transfer`,
    /// `overlaps`, `only-supported`, `pinned`) and the fastest PU for it alone.
    Explain {
        /// Folder holding the plan and the artifacts it was made from.
        dir: PathBuf,
        /// Also print the placement as one JSON object, the last line of stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write DIR's source model with its plan in the metadata (each node's fused op, PU,
    /// predicted start and time, reason; the SoC, objective and totals on the model), for Netron.
    Annotate {
        /// Folder holding the fused graph and the plan.
        dir: PathBuf,
        /// Output ONNX file.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Print a SoC (preset name or spec file), checked against this machine, as a spec file.
    Soc { spec: String },
    /// Write one fused op of an imported model as a standalone ONNX model (or, with
    /// `--lowered`, the whole lowered model its ops index into).
    Extract(inspect::ExtractArgs),
    /// Write a model the project builds itself as .onnx (list them without NAME).
    Zoo {
        name: Option<String>,
        #[arg(long, default_value = "target/bident/zoo")]
        out: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Store the weights in `<NAME>.weights` beside the model (ONNX external data).
        #[arg(long)]
        external_data: bool,
    },
    /// The paper's evaluation on the zoo's family models: Tables 2 and 3, Figures 3, 7 and 9, as
    /// target/bident/eval/<soc>-<size>/report.md and SVG charts (measured or simulated, said).
    Eval(eval::EvalArgs),
    /// The paper's family models (tiny, every precision; or the ones named) checked against the
    /// onnx reference evaluator, run whole by OpenVINO and through bident's path.
    ZooCheck {
        names: Vec<String>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Regenerate the ONNX protobuf bindings (with --check: fail if they are stale).
    Codegen {
        #[arg(long)]
        check: bool,
    },
    /// ONNX backend node tests through bident's path beside the backend (OpenVINO or ONNX Runtime)
    /// running them whole.
    Conformance(conformance::ConformanceArgs),
    /// OpenVINO IR import checked against the ONNX it was converted from (ovc; cases in
    /// tests/data/ovir).
    Ovir {
        /// Only these cases (file stems in tests/data/ovir; repeatable). Default: all.
        #[arg(long)]
        only: Vec<String>,
        /// Also print all rows as one JSON array (last line).
        #[arg(long)]
        json: bool,
    },
    /// Fuzz a reader (cargo fuzz, nightly): the importers, the artifact readers or the SoC file,
    /// the corpus seeded with the project's models and artifacts (or, with --replay, replay the
    /// importer's corpus through the import path and a backend's compile).
    Fuzz(fuzz::FuzzArgs),
    /// The pipeline on the third-party models of tests/data/thirdparty (fetched from PyPI).
    Thirdparty {
        #[arg(long, default_value = "local")]
        soc: String,
        /// Fusion source of the runs; with `backend` the table also shows the rules' op count
        /// and how far the two agree.
        #[arg(long, value_enum, default_value_t = args::Fusion::Backend)]
        fusion: args::Fusion,
        #[arg(long, default_value_t = bident_runtime::RunConfig::default().runs)]
        runs: u32,
        #[arg(long, default_value_t = bident_profile::ProfileConfig::default().runs)]
        profile_runs: u32,
        /// Only these cases (file stems in tests/data/thirdparty; repeatable). Default: all.
        #[arg(long)]
        only: Vec<String>,
        /// Also print all rows as one JSON array (last line).
        #[arg(long)]
        json: bool,
    },
    /// Install the pinned OpenVINO runtime into target/ if it is missing.
    Setup,
    /// What CI runs: setup, codegen check, format check, the whole test suite.
    Ci,
}

/// The command line, with what `pipeline` was given explicitly among the flags a virtual SoC
/// ignores ([`args::PipelineArgs::measuring_given`]).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Cmd::Pipeline(a), Some(("pipeline", m))) = (&mut cli.cmd, matches.subcommand()) {
        let cmd = Cli::command();
        let pipeline = cmd.find_subcommand("pipeline").expect("the pipeline subcommand");
        a.measuring_given = pipeline
            .get_arguments()
            .filter(|arg| matches!(arg.get_help_heading(), Some(args::MEASURING | args::RUNNING)))
            .filter(|arg| m.value_source(arg.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine))
            .filter_map(|arg| arg.get_long().map(|l| format!("--{l}")))
            .collect();
    }
    Ok(cli)
}

/// A clap usage error as one line, like every other error, its tip (`a similar argument
/// exists: '--soc'`) kept.
fn one_line(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("error: bad arguments");
    match text.lines().find_map(|l| l.trim().strip_prefix("tip: ")) {
        Some(tip) => format!("{first} ({tip})"),
        None => first.to_string(),
    }
}

/// Run bident's command line (`std::env::args`) with the passes `register` adds to bident's
/// own (`--search NAME` and `--partition NAME` then choose them, `passes` lists them), and exit.
///
/// # Safety
/// Call it as the first statement of `main`, before the process starts a second thread: it
/// sets an environment variable OpenVINO reads ([`bident_backend::openvino::unbind_threads`]).
pub unsafe fn main_with(register: fn(&mut bident_driver::Passes)) -> ! {
    // SAFETY: the caller's promise: no other thread exists yet.
    unsafe { bident_backend::openvino::unbind_threads() };
    pipeline::register(register);
    let cli = match parse() {
        Ok(cli) => cli,
        // help and version (also asked for by giving no arguments) print as clap writes them
        Err(e) if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) => {
            eprintln!("{}", one_line(&e.to_string()));
            std::process::exit(2);
        }
    };
    init_logging(cli.verbose, cli.quiet);
    let result = match cli.cmd {
        Cmd::Pipeline(a) => pipeline::pipeline(*a),
        Cmd::Import(a) => pipeline::import_cmd(a),
        Cmd::Partition(a) => pipeline::partition_cmd(a),
        Cmd::Profile(a) => pipeline::profile_cmd(a),
        Cmd::Search(a) => pipeline::search_cmd(a),
        Cmd::Run(a) => pipeline::run_cmd(a),
        Cmd::Serve(a) => pipeline::serve_cmd(a),
        Cmd::Plan { cmd: pipeline::PlanCmd::Import { dir, file } } => pipeline::import_plan(dir, file),
        Cmd::Phases { cmd: pipeline::PhasesCmd::Import { dir, file } } => pipeline::import_phases(dir, file),
        Cmd::Passes => pipeline::passes_cmd(),
        Cmd::Costs { cmd } => inspect::costs(cmd),
        Cmd::Coexec(a) => inspect::coexec(a),
        Cmd::PlanDiff { a, b } => inspect::plan_diff(&a, &b),
        Cmd::Show { file } => inspect::show(&file),
        Cmd::Annotate { dir, out } => inspect::annotate(&dir, &out),
        Cmd::Explain { dir, json } => explain::explain(&dir, json),
        Cmd::Extract(a) => inspect::extract(a),
        Cmd::Soc { spec } => inspect::soc(&spec),
        Cmd::Zoo { name, out, seed, external_data } => inspect::zoo(name.as_deref(), &out, seed, external_data),
        Cmd::ZooCheck { names, seed } => zoocheck::check(&names, seed),
        Cmd::Eval(a) => eval::eval(a),
        Cmd::Codegen { check } => codegen::codegen(check),
        Cmd::Conformance(a) => conformance::conformance(a),
        Cmd::Fuzz(a) => fuzz::fuzz(a),
        Cmd::Ovir { only, json } => ovir::ovir(&only, json),
        Cmd::Thirdparty { soc, fusion, runs, profile_runs, only, json } => {
            thirdparty::thirdparty(&soc, fusion.source(), (runs, profile_runs), &only, json)
        }
        Cmd::Setup => setup(),
        Cmd::Ci => ci(),
    };
    if let Err(e) = result {
        eprintln!("error: {}", print::printable(&format!("{e:#}")));
        std::process::exit(1);
    }
    std::process::exit(0)
}

/// Every `*.snap` file of the workspace is one a test read (listed in `refs` by insta).
fn unreferenced_snapshots(refs: &std::path::Path) -> Result<()> {
    let canonical = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let read: std::collections::BTreeSet<PathBuf> = bident_artifact::files::read_text(refs)
        .unwrap_or_default()
        .lines()
        .map(|l| canonical(std::path::Path::new(l)))
        .collect();
    let mut unread = vec![];
    let mut dirs = vec![root()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let p = e.path();
            let name = e.file_name();
            if p.is_dir() && name != "target" && name != ".git" {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "snap") && !read.contains(&canonical(&p)) {
                unread.push(p.strip_prefix(root()).unwrap_or(&p).display().to_string());
            }
        }
    }
    unread.sort();
    anyhow::ensure!(unread.is_empty(), "snapshots no test reads (remove them): {}", unread.join(", "));
    Ok(())
}

/// Install both backends' pinned runtimes (each loaded once to check it).
fn setup() -> Result<()> {
    pipeline::driver().backends(&bident_driver::BackendName::ALL)?;
    Ok(())
}

/// Workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// The `*.yaml` case files of a folder under `tests/data/`, sorted; with `only`, just the cases
/// of those names (each must exist).
fn chosen_cases(area: &str, only: &[String]) -> Result<Vec<PathBuf>> {
    let all = case_files(area)?;
    let stem = |p: &PathBuf| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(o) = only.iter().find(|o| !all.iter().any(|p| stem(p) == **o)) {
        anyhow::bail!("--only {o}: no such case in tests/data/{area}");
    }
    Ok(all.into_iter().filter(|p| only.is_empty() || only.contains(&stem(p))).collect())
}

/// The `*.yaml` case files of a folder under `tests/data/`, sorted.
fn case_files(area: &str) -> Result<Vec<PathBuf>> {
    use anyhow::Context;
    let dir = root().join("tests/data").join(area);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| dir.display().to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    cases.sort();
    Ok(cases)
}

fn ci() -> Result<()> {
    use std::process::Command;
    let step = |name: &str, cmd: &mut Command| -> Result<()> {
        eprintln!("== {name}");
        let st = cmd.current_dir(root()).status()?;
        anyhow::ensure!(st.success(), "{name} failed");
        Ok(())
    };
    setup()?;
    codegen::codegen(true)?;
    step("format", Command::new("cargo").args(["fmt", "--all", "--", "--check"]))?;
    step("clippy", Command::new("cargo").args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // the crates that must build without ONNX, alone (in the workspace, features unify)
    step(
        "search and partition without ONNX",
        Command::new("cargo").args(["clippy", "-p", "bident-search", "-p", "bident-partition", "--", "-D", "warnings"]),
    )?;
    step(
        "profile's data types without measuring",
        Command::new("cargo").args(["clippy", "-p", "bident-profile", "--no-default-features", "--", "-D", "warnings"]),
    )?;
    // snapshots are checked as `cargo insta test --check --unreferenced=reject` would, without
    // building cargo-insta: a changed snapshot fails its test (INSTA_UPDATE=no), and insta lists
    // every snapshot a test read, so a file no test read is found below
    let refs = pipeline::target_dir().join("insta-references.txt");
    let _ = std::fs::remove_file(&refs);
    step(
        "tests",
        Command::new("cargo")
            .args(["test", "--workspace"])
            .env("INSTA_UPDATE", "no")
            .env("INSTA_SNAPSHOT_REFERENCES_FILE", &refs)
            // the property tests draw the same cases in every CI run (a plain `cargo test`
            // draws new ones, and keeps any failure in the tests' regression files)
            .env("PROPTEST_RNG_SEED", "58"),
    )?;
    unreferenced_snapshots(&refs)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the whole command line (names unique after the global -v and -q
    /// reach every subcommand, defaults valid), which it otherwise runs only for the
    /// subcommand a user types.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        let cli = super::Cli::command();
        cli.clone().debug_assert();
        // a subcommand's own `verbose` would take the global's id, and clap would panic on
        // that subcommand only, when it reads the global's count
        let mut todo: Vec<&clap::Command> = cli.get_subcommands().collect();
        while let Some(c) = todo.pop() {
            for a in c.get_arguments() {
                assert!(
                    !["verbose", "quiet"].contains(&a.get_id().as_str()),
                    "`{}` defines --{}",
                    c.get_name(),
                    a.get_id()
                );
            }
            todo.extend(c.get_subcommands());
        }
    }
}
