//! `cargo xtask pipeline` and the stage subcommands: arguments in, the driver's stages, the
//! summary out. The stages themselves, and their order, are `bident_driver`'s.

use std::path::{Path, PathBuf};

use anyhow::Result;
use bident_driver::{Driver, Folder, Passes, Soc};

use crate::args::{ImportArgs, PartitionArgs, PipelineArgs, ProfileArgs, RunArgs, SearchArgs, ServeArgs};
use crate::print;

/// Cargo's target folder (installs, caches, default outputs).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| crate::root().join("target"))
}

/// What adds a binary's own passes to bident's ([`crate::main_with`]).
static REGISTER: std::sync::OnceLock<fn(&mut Passes)> = std::sync::OnceLock::new();

/// Add `register`'s passes to every driver this process makes (the first call counts).
pub fn register(register: fn(&mut Passes)) {
    let _ = REGISTER.set(register);
}

/// The passes `--partition` and `--search` choose from: bident's own and the ones the binary
/// registered.
pub fn passes() -> Passes {
    let mut p = Passes::default();
    if let Some(register) = REGISTER.get() {
        register(&mut p);
    }
    p
}

/// The driver every command uses: installs, caches and outputs under the target folder, events
/// printed on stderr.
pub fn driver() -> Driver<'static> {
    Driver::new(target_dir(), passes(), &print::event)
}

pub fn pipeline(a: PipelineArgs) -> Result<()> {
    if bident_profile::simulate::VirtualSoc::preset(&a.soc.soc).is_some() && !a.measuring_given.is_empty() {
        anyhow::bail!(
            "{} would be ignored: `--soc {}` is a virtual SoC; nothing runs on it",
            a.measuring_given.join(", "),
            a.soc.soc
        );
    }
    let d = driver();
    let o = a.options()?;
    if let Some(second) = a.second()? {
        return concurrent(&d, &o, &second, a.json);
    }
    let out = d.pipeline(&o)?;
    print::summary(&out.graph, &out.plan, out.report.as_ref());
    if a.json {
        println!("{}", print::plan_json(&out.graph, &out.plan, out.report.as_ref()));
    }
    Ok(())
}

fn concurrent(d: &Driver, o: &bident_driver::Options, second: &bident_driver::SecondModel, json: bool) -> Result<()> {
    let out = d.concurrent(o, second)?;
    let plan = &out.plan;
    let [ga, gb] = &out.graphs;
    let on = |pu: &str, side: fn(&bident_search::concurrent::ConcurrentStep) -> Option<&(u32, String)>| {
        plan.steps.iter().filter(|s| side(s).is_some_and(|(_, p)| p == pu)).count()
    };
    let both = plan.steps.iter().filter(|s| s.a.is_some() && s.b.is_some()).count();
    let label = if plan.simulated { "simulated" } else { "measured" };
    println!(
        "models     {} ({} ops) + {} ({} ops), concurrent ({:?})",
        ga.name,
        ga.ops.len(),
        gb.name,
        gb.ops.len(),
        out.mode
    );
    println!("soc        {} [{label}], PUs: {}", plan.soc, plan.pus.join(", "));
    println!("co-costs   {}", plan.co_costs);
    for pu in &plan.pus {
        println!(
            "  {pu:<8} {} ops of {}, {} ops of {}",
            on(pu, |s| s.a.as_ref()),
            ga.name,
            on(pu, |s| s.b.as_ref()),
            gb.name
        );
    }
    println!(
        "predicted  {:.1} µs ({} steps, {both} running both models; search {:.1} ms)   baseline {:.1} µs ({} on {}, then {} \
         on {})   speedup {:.2}x",
        plan.predicted_us,
        plan.steps.len(),
        out.search_ms,
        plan.baseline_us,
        ga.name,
        plan.baseline[0],
        gb.name,
        plan.baseline[1],
        plan.speedup
    );
    match &out.report {
        None => println!("measured   nothing: {} is a virtual SoC; every figure above is simulated", plan.soc),
        Some(r) => print::measured(r),
    }
    if json {
        let mut j = serde_json::json!({
            "models": [ga.name, gb.name],
            "soc": plan.soc,
            "simulated": plan.simulated,
            "pus": plan.pus,
            "mode": "concurrent",
            "concurrent_mode": format!("{:?}", out.mode).to_lowercase(),
            "objective": plan.objective.name(),
            "fused_ops": [ga.ops.len(), gb.ops.len()],
            "predicted_us": plan.predicted_us,
            "predicted_energy_mj": plan.predicted_energy_uj / 1000.0,
            "baseline_us": plan.baseline_us,
            "predicted_speedup": plan.speedup,
        });
        if let (Some(r), Some(o)) = (&out.report, j.as_object_mut()) {
            o.extend(print::measured_json(r));
        }
        println!("{j}");
    }
    Ok(())
}

/// Stage 1, as a command: lock the output folder, import.
pub fn import_cmd(a: ImportArgs) -> Result<()> {
    let d = driver();
    let spec = a.spec()?;
    let (path, name) = d.model_path(&spec.model)?;
    let folder = Folder::new(a.out.clone().unwrap_or_else(|| d.default_out(&name)));
    d.import_options(&spec)?;
    let _lock = folder.create_locked()?;
    d.import(&folder, &spec, &path, bident_driver::BackendName::OpenVino)?;
    Ok(())
}

pub fn partition_cmd(a: PartitionArgs) -> Result<()> {
    let d = driver();
    let folder = Folder::new(&a.dir);
    let _lock = folder.lock()?;
    let (g, gh) = folder.fused()?;
    d.partition(&folder, &g, gh, &a.partition)?;
    Ok(())
}

pub fn profile_cmd(a: ProfileArgs) -> Result<()> {
    bident_backend::deadline::set_limit(std::time::Duration::from_secs(a.timeout));
    let d = driver();
    let soc = d.soc(&a.soc.choice()?)?;
    let folder = Folder::new(&a.dir);
    let _lock = folder.lock()?;
    let (g, gh) = folder.fused()?;
    let (phased, _) = folder.phased(&g)?;
    d.profile(&folder, (&g, gh), &soc, a.measure.measuring(), phased.neighbours(), None)?;
    Ok(())
}

pub fn search_cmd(a: SearchArgs) -> Result<()> {
    let d = driver();
    let options = a.plan.options("")?;
    d.passes.search(&options.search)?;
    let folder = Folder::new(&a.dir);
    let _lock = folder.lock()?;
    let (g, _) = folder.fused()?;
    let (phased, ph) = folder.phased(&g)?;
    let (costs, ch) = folder.costs(&g)?;
    d.search(&folder, (&phased, ph), (&costs, ch), &options)?;
    Ok(())
}

/// `cargo xtask serve DIR`: the folder's plan served, re-planned where a PU drifts.
pub fn serve_cmd(a: ServeArgs) -> Result<()> {
    let d = driver();
    let mut opts = bident_driver::RunOptions { fault: a.inject_fault.clone(), ..Default::default() };
    // the fresh plan served to judge recovery by is bounded alike
    opts.config.op_timeout = std::time::Duration::from_secs(a.timeout);
    let served = d.serve(&Folder::new(&a.dir), a.inferences as usize, &opts, a.config()?)?;
    print::served(&served, a.window as usize);
    Ok(())
}

pub fn run_cmd(a: RunArgs) -> Result<()> {
    let d = driver();
    let (plan, r, g) = d.rerun(&Folder::new(&a.dir), &a.run.options())?;
    print::summary(&g, &plan, Some(&r));
    Ok(())
}

/// `cargo xtask passes`: the partition passes and searches `--partition` and `--search` name.
pub fn passes_cmd() -> Result<()> {
    let p = passes();
    println!("partition passes (--partition):");
    for (name, about) in p.partitions() {
        println!("  {name:<14} {about}");
    }
    println!("searches (--search):");
    for (name, about) in p.searches() {
        println!("  {name:<14} {about}");
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum PlanCmd {
    /// Read a plan written by any tool (YAML or JSON): a whole plan (as `plan.yaml`, or its
    /// payload alone) or a placement (`placement: {OP: PU, ...}`, optional `schedule` and
    /// `objective`), check it against DIR's phases and costs and write it as DIR's plan, ready
    /// for `cargo xtask run DIR`. (`import FILE DIR`, the old order, is read too, for one more
    /// release.)
    Import { dir: PathBuf, file: PathBuf },
}

#[derive(clap::Subcommand)]
pub enum PhasesCmd {
    /// Read a phased graph written by any tool (YAML or JSON), verify it against DIR's fused
    /// graph and write it as DIR's phased graph. (`import FILE DIR`, the old order, is read too,
    /// for one more release.)
    Import { dir: PathBuf, file: PathBuf },
}

/// `DIR FILE` as given, or as the old order `FILE DIR` gave them (not a folder, then a folder),
/// which `cmd` reads for one more release with a warning.
pub fn folder_then_file(dir: PathBuf, file: PathBuf, cmd: &str) -> (PathBuf, PathBuf) {
    if !dir.is_dir() && file.is_dir() {
        tracing::warn!("{cmd}: FILE DIR is the old order, read as DIR FILE for one more release");
        return (file, dir);
    }
    (dir, file)
}

pub fn import_plan(dir: PathBuf, file: PathBuf) -> Result<()> {
    let (dir, file) = folder_then_file(dir, file, "plan import");
    let (dir, file) = (dir.as_path(), file.as_path());
    let plan = driver().import_plan(&Folder::new(dir), &read_text(file)?, &file.display().to_string())?;
    tracing::info!(
        "plan: {} -> {} ({} ops: {}; predicted {:.1} µs by the evaluator; search `{}`)",
        file.display(),
        dir.join("plan.bin").display(),
        plan.steps.len(),
        plan.ops_per_pu.iter().map(|(pu, n)| format!("{n} on {pu}")).collect::<Vec<_>>().join(", "),
        plan.predicted_us,
        plan.search
    );
    Ok(())
}

pub fn import_phases(dir: PathBuf, file: PathBuf) -> Result<()> {
    let (dir, file) = folder_then_file(dir, file, "phases import");
    let (dir, file) = (dir.as_path(), file.as_path());
    let p = driver().import_phases(&Folder::new(dir), &read_text(file)?, &file.display().to_string())?;
    tracing::info!(
        "phases: {} -> {} ({} phases, {} with parallel branches)",
        file.display(),
        dir.join("phased-graph.bin").display(),
        p.phases.len(),
        p.parallel_phases()
    );
    Ok(())
}

fn read_text(file: &Path) -> Result<String> {
    Ok(bident_artifact::files::read_text(file)?)
}

/// A SoC, by `--soc` name, for commands that only need the spec and backends.
pub fn soc_named(spec: &str) -> Result<Soc> {
    Ok(driver().soc(&bident_driver::SocChoice::named(spec))?)
}

/// OpenVINO alone (installed first if needed).
pub fn openvino() -> Result<std::sync::Arc<dyn bident_backend::Backend>> {
    Ok(driver().backend(bident_driver::BackendName::OpenVino)?)
}

/// One backend alone, by name (`openvino` or `onnxruntime`).
pub fn backend_named(name: &str) -> Result<std::sync::Arc<dyn bident_backend::Backend>> {
    Ok(driver().backend(bident_driver::BackendName::parse(name)?)?)
}
