//! Commands around the artifacts: show, plan-diff, annotate, extract, soc, costs export/import,
//! coexec, zoo.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bident_artifact::{self as artifact, Artifact, ContentHash};
use bident_driver::{Folder, Soc};
use bident_ir::{FusedGraph, OpId};
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use bident_runtime::RunReport;
use bident_search::Plan;
use clap::Args;

use crate::args::SocArgs;
use crate::pipeline::{driver, target_dir};

const COSTS: &str = "cost-table.bin";

#[derive(Args, Clone)]
pub struct ExtractArgs {
    /// Folder holding the import stage's artifacts.
    pub dir: PathBuf,
    /// The fused op: its name (see fused-graph.yaml), or `#N` for op N (a bare N where no op
    /// is named N).
    #[arg(long, required_unless_present = "lowered")]
    pub op: Option<String>,
    /// Write the whole lowered model (inputs pinned, constants folded) instead.
    #[arg(long, conflicts_with = "op")]
    pub lowered: bool,
    /// Output file.
    #[arg(short, long)]
    pub out: PathBuf,
}

pub fn extract(a: ExtractArgs) -> Result<()> {
    let (g, _) = Folder::new(&a.dir).fused()?;
    let bytes = match &a.op {
        None => g.lowered_model()?,
        Some(op) => {
            let id = bident_ir::resolve_op(g.ops.iter().map(|o| o.name.as_str()), op)
                .map_err(|e| anyhow::anyhow!("--op: {e} in {}", a.dir.display()))?;
            tracing::info!("extract: op {id} `{}` ({})", g.ops[id].name, g.ops[id].kind);
            bident_ir::Extractor::new(&g)?.extract(id as OpId)?
        }
    };
    artifact::files::write_bytes(&a.out, &bytes)?;
    tracing::info!("extract: {} bytes -> {}", bytes.len(), a.out.display());
    Ok(())
}

#[derive(Args)]
pub struct CoexecArgs {
    /// Folders of the two imported models (A and B; may be the same).
    pub a: PathBuf,
    pub b: PathBuf,
    #[command(flatten)]
    pub soc: SocArgs,
    /// Measure every (A op, B op) pair up to this many per PU, else a seeded sample of this
    /// many, with a fitted model (and its cross-validated error) for the rest.
    #[arg(long, default_value_t = bident_profile::coexec::CoExecConfig::default().max_pairs)]
    pub max_pairs: usize,
    /// Output folder (default: target/bident/pairs/<A>+<B>/).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn coexec(a: CoexecArgs) -> Result<()> {
    let (ga, ha) = Folder::new(&a.a).fused()?;
    let (gb, hb) = Folder::new(&a.b).fused()?;
    let Soc::Measured(soc, be) = driver().soc(&a.soc.choice()?)? else {
        bail!("co-execution costs are measured: `{}` is a virtual SoC", a.soc.soc);
    };
    let cfg = bident_profile::coexec::CoExecConfig { max_pairs: a.max_pairs, ..Default::default() };
    let dir = a.out.clone().unwrap_or_else(|| {
        target_dir().join("bident/pairs").join(bident_driver::folder_name(&format!("{}+{}", ga.name, gb.name)))
    });
    let file = "coexec-table.bin";
    let folder = Folder::new(&dir);
    let _lock = folder.create_locked()?;
    folder.clear(&[file])?;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr()) && tracing::enabled!(tracing::Level::INFO);
    let t0 = std::time::Instant::now();
    let table = bident_profile::coexec::measure(be.as_ref(), &soc, (&ga, &gb), cfg, &mut |p| {
        if tty {
            eprint!("\rcoexec: {} pair {}/{}   ", p.pu, p.done, p.total);
        }
    })?;
    if tty {
        eprintln!();
    }
    folder.write(file, &table, bident_profile::coexec::input_hash(ha, hb, &soc, &cfg)?)?;
    tracing::info!(
        "coexec: {} x {} ops of `{}` and `{}` on {} in {:.1} s ({}) -> {}",
        ga.ops.len(),
        gb.ops.len(),
        ga.name,
        gb.name,
        soc.name,
        t0.elapsed().as_secs_f64(),
        table.measured_on,
        dir.join(file).display()
    );
    for (j, pu) in soc.pus.iter().enumerate() {
        let pairs = &table.pairs[j];
        let mut slow: Vec<f64> =
            pairs.iter().flat_map(|p| [p.co_a_us / p.solo_a_us, p.co_b_us / p.solo_b_us]).collect();
        let med = bident_profile::quantile(&mut slow, 0.5);
        let fit = match &table.fit[j] {
            Some(f) => format!(
                "fit co(x|y) = {:.2} t_x + {:.2} t_y + {:.2} min(t_x, t_y) + {:.1} µs, cross-validated error \
                 median {:.1}%, p90 {:.1}%",
                f.a,
                f.b,
                f.c,
                f.d,
                f.cv_median_rel_err * 100.0,
                f.cv_p90_rel_err * 100.0
            ),
            None => "too few pairs to fit".into(),
        };
        tracing::info!(
            "coexec: {}: {} pairs measured ({}), median slowdown sharing the PU {med:.2}x; {fit}",
            pu.name,
            pairs.len(),
            if table.complete[j] { "all of them" } else { "a sample" }
        );
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum CostsCmd {
    /// Write DIR's cost table as FILE (`.json`: every field; `.csv`: a row per (op, PU), the
    /// metadata as `# key: value` lines).
    Export { dir: PathBuf, file: PathBuf },
    /// Read FILE (an export) as DIR's cost table, after checking it is for DIR's fused graph.
    /// (`import FILE DIR`, the old order, is read too, for one more release.)
    Import { dir: PathBuf, file: PathBuf },
}

pub fn costs(cmd: CostsCmd) -> Result<()> {
    use bident_profile::portable::{self, Format};
    let format = |f: &Path| Format::of_path(f).with_context(|| format!("{}: give a .json or .csv file", f.display()));
    match cmd {
        CostsCmd::Export { dir, file } => {
            let t = Folder::new(&dir).read_raw::<CostTable>(COSTS)?.value;
            artifact::files::write_bytes(&file, portable::export(&t, format(&file)?)?.as_bytes())?;
            tracing::info!(
                "costs: {} ops x {} PUs ({}) -> {}",
                t.ops.len(),
                t.soc.pus.len(),
                if t.simulated { "simulated" } else { "measured" },
                file.display()
            );
        }
        CostsCmd::Import { dir, file } => {
            let (dir, file) = crate::pipeline::folder_then_file(dir, file, "costs import");
            let fmt = format(&file)?;
            let text = artifact::files::read_text(&file)?;
            let t = portable::import(&text, fmt, &file.display().to_string())?;
            let folder = Folder::new(&dir);
            let _lock = folder.lock()?;
            let (g, gh) = folder.fused()?;
            t.check(&g).with_context(|| file.display().to_string())?;
            folder.clear(&[COSTS, "plan.bin", "run-report.bin"])?;
            folder.write(COSTS, &t, ContentHash::of_parts(&[&gh.0, text.as_bytes()]))?;
            tracing::info!(
                "costs: {} -> {} ({} ops x {} PUs, {} on {})",
                file.display(),
                dir.join(COSTS).display(),
                t.ops.len(),
                t.soc.pus.len(),
                if t.simulated { "simulated" } else { "measured" },
                t.measured_on
            );
        }
    }
    Ok(())
}

/// Print a SoC (preset or file), checked against this machine, in the spec file format.
pub fn soc(spec: &str) -> Result<()> {
    match crate::pipeline::soc_named(spec)? {
        Soc::Measured(soc, _) => print!("{}", soc.to_toml()),
        Soc::Virtual(v) => {
            println!("# VIRTUAL SoC: costs come from an analytic model (simulated), calibrated to {}", v.calibration);
            print!("{}", v.spec.to_toml());
            for (pu, model) in v.spec.pus.iter().zip(&v.pus) {
                println!("\n# model of `{}` (simulated)", pu.name);
                for line in toml::to_string(model)?.lines() {
                    println!("# {line}");
                }
            }
            println!("\n# contention: sf[i][j] = slowdown of PU i while PU j is busy (simulated)");
            for (pu, row) in v.spec.pus.iter().zip(&v.contention) {
                println!("# {:<6} {row:?}", pu.name);
            }
        }
    }
    Ok(())
}

pub fn plan_diff(a: &Path, b: &Path) -> Result<()> {
    let (pa, pb) = (bident_driver::read_plan(a)?, bident_driver::read_plan(b)?);
    let d = bident_search::diff(&pa, &pb)?;
    let label = |p: &Plan| format!("{} {} / {}", p.mode.name(), p.objective.name(), p.soc);
    println!("plan-diff  {} ({}) -> {} ({}), model {}", a.display(), label(&pa), b.display(), label(&pb), pa.model);
    print!("{}", d.table());
    Ok(())
}

pub fn annotate(dir: &Path, out: &Path) -> Result<()> {
    let a = bident_driver::annotate(&Folder::new(dir), out)?;
    tracing::info!(
        "annotate: `{}` planned on {} ({}): {} of {} nodes placed{} -> {}",
        a.model,
        a.soc,
        if a.simulated { "simulated" } else { "measured" },
        a.placed,
        a.nodes,
        if a.placed < a.nodes { " (the others folded into constants or unused)" } else { "" },
        out.display()
    );
    Ok(())
}

/// Print an artifact as YAML, then check it as the stage reading it would: against the
/// artifacts it derives from in its folder ([`Folder::verify`]), a fused graph under another
/// name on its own. One that does not verify is printed all the same (that is when one looks),
/// and the command fails saying why.
pub fn show(file: &Path) -> Result<()> {
    let bytes = artifact::read_bytes(file)?;
    let (header, _) = artifact::read_header(file, &bytes)?;
    // a fused graph under another name is verified on its own below: decoded once for both
    let mut fused = None;
    let yaml = match header.kind.as_str() {
        FusedGraph::KIND => {
            let s = artifact::decode::<FusedGraph>(file, &bytes)?;
            let yaml = artifact::to_yaml(&s.header, &s.value)?;
            fused = Some(s.value);
            yaml
        }
        PhasedGraph::KIND => twin::<PhasedGraph>(file, &bytes)?,
        bident_profile::coexec::CoExecTable::KIND => twin::<bident_profile::coexec::CoExecTable>(file, &bytes)?,
        bident_search::concurrent::ConcurrentPlan::KIND => {
            twin::<bident_search::concurrent::ConcurrentPlan>(file, &bytes)?
        }
        CostTable::KIND => twin::<CostTable>(file, &bytes)?,
        Plan::KIND => twin::<Plan>(file, &bytes)?,
        RunReport::KIND => twin::<RunReport>(file, &bytes)?,
        k => bail!("{}: unknown artifact kind `{k}`", file.display()),
    };
    print!("{yaml}");
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let not_verified = |e: anyhow::Error| e.context(format!("{}: printed, but it does not verify", file.display()));
    let verified = Folder::new(dir).verify(name).map_err(|e| not_verified(e.into()))?;
    if let (false, Some(graph)) = (verified, &fused) {
        bident_ir::verify(graph).map_err(|e| not_verified(e.into()))?;
    } else if !verified {
        tracing::info!(
            "{}: not verified: a fused graph is checked on its own, and fused-graph.bin, phased-graph.bin, \
             cost-table.bin and plan.bin against the artifacts beside them in their folder",
            file.display()
        );
    }
    Ok(())
}

fn twin<A: Artifact>(file: &Path, bytes: &[u8]) -> Result<String> {
    let s = artifact::decode::<A>(file, bytes)?;
    Ok(artifact::to_yaml(&s.header, &s.value)?)
}

pub fn zoo(name: Option<&str>, out: &Path, seed: u64, external_data: bool) -> Result<()> {
    let Some(name) = name else {
        for (n, what) in bident_zoo::MODELS {
            println!("{n:<22} {what}");
        }
        println!("\nthe paper's families, as <family>-<tiny|full>-<fp32|fp16|int8> (full size below):");
        for (n, what) in bident_zoo::families::FAMILIES {
            println!("{n:<22} {what}");
        }
        return Ok(());
    };
    let mut model = bident_zoo::build(name, seed)
        .with_context(|| format!("no zoo model `{name}` (list them with `cargo xtask zoo`)"))?;
    std::fs::create_dir_all(out)?;
    if external_data {
        let weights = format!("{name}.weights");
        let blob = bident_zoo::externalize(&mut model, &weights);
        artifact::files::write_bytes(&out.join(&weights), &blob)?;
    }
    let path = out.join(format!("{name}.onnx"));
    artifact::files::write_bytes(&path, &prost::Message::encode_to_vec(&model))?;
    println!("{}", path.display());
    Ok(())
}
