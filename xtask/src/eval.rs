//! `cargo xtask eval`: the paper's evaluation protocol (section 4) on the zoo's family models,
//! measured where the SoC is real and simulated where it is virtual, each figure labelled so.
//!
//! Table 2 (best single PU, latency- and energy-optimal sequential plans), Table 3 (parallel
//! plans), Figure 9 (every pair of configurations running at once), Figure 7 (energy of the
//! latency- and energy-optimal plans) and Figure 3 (MatMul size sweep per PU), as a Markdown
//! report and SVG charts in `target/bident/eval/<soc>-<size>/`.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use bident_partition::PhasedGraph;
use bident_profile::CostTable;
use bident_search::{Mode, Objective, Plan, SearchError};
use clap::Args;

use bident_driver::{Goal, Soc};

use crate::pipeline::{driver, target_dir};
use crate::svg;

#[derive(Args)]
pub struct EvalArgs {
    /// `lunar-lake` (virtual, simulated), `cores`, `local` or a SoC spec file (measured).
    #[arg(long, default_value = "lunar-lake")]
    pub soc: String,
    /// `tiny` (the families' test size) or `full` (the paper's shapes).
    #[arg(long, default_value = "tiny")]
    pub size: String,
    /// Measured inferences per plan on real PUs (at least: more where the blocks do not decide),
    /// in blocks of 5 taking turns with each alternative's. Twelve blocks, not six: Hyena FP16
    /// whole on core 0 measured 16% slower by medians than on core 1, an identical core, in six
    /// blocks, and 6% faster in the next six (block ratios 0.87-1.13).
    #[arg(long, default_value_t = 60)]
    pub runs: u32,
    /// Only these families (default: all ten).
    #[arg(long)]
    pub only: Vec<String>,
    /// Output folder (default: target/bident/eval/<soc>-<size>/, with --engines
    /// target/bident/eval/engines-<size>/). A run of every family into the default folder
    /// also writes its section of docs/results.md.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead of the paper's tables: the engines, precisions and cores table (measured, on the
    /// `all` SoC; `--soc` is not used), one row per family in fp32.
    #[arg(long)]
    pub engines: bool,
    /// With --engines: also the third-party models of `cargo xtask thirdparty` (all, or these
    /// cases; repeatable).
    #[arg(long, num_args = 0.., requires = "engines")]
    pub thirdparty: Option<Vec<String>>,
}

/// What a measured plan's run report says of it.
#[derive(Clone)]
struct Measured {
    us: f64,
    /// The prediction error per measured block: p10, median, p90.
    error: [f64; 3],
    /// [`bident_runtime::RunReport::prediction_error_fast_or_all`], and whether it had enough
    /// fast blocks.
    error_fast: ([f64; 3], bool),
    regret: f64,
    fastest: String,
    /// Regret against only the alternatives faster beyond the noise between blocks.
    regret_beyond_noise: f64,
    clearly_faster: Option<String>,
    /// The PU the run gave way to (the delivered plan is the whole model there), if it did.
    gave_way: Option<String>,
    /// What ran: the delivered plan's steps and schedule.
    ran: (Vec<bident_search::Step>, bident_search::Schedule),
    /// Measuring blocks, and those that ran in a slow state of the machine.
    blocks: (u32, u32),
}

impl Measured {
    /// The report of the plan the run delivered, `searched` the plan the search made.
    fn of(r: &bident_runtime::RunReport, searched: &Plan, delivered: &Plan) -> Self {
        Self {
            us: r.measured_us,
            error: r.prediction_error_blocks,
            error_fast: (r.prediction_error_fast_or_all(), r.prediction_error_fast.is_some()),
            regret: r.regret,
            regret_beyond_noise: r.regret_beyond_noise,
            clearly_faster: r.clearly_faster.clone(),
            fastest: r.fastest_candidate.clone(),
            gave_way: delivered.constraints.whole.clone().filter(|_| delivered.steps != searched.steps),
            ran: (delivered.steps.clone(), delivered.schedule),
            blocks: (r.blocks, r.slow_blocks),
        }
    }

    /// ` 123.4 µs | 5.1% (3.0-8.2) | 0.0% |`, the first cell naming the PU the run gave way to
    fn cells(&self) -> String {
        let [lo, mid, hi] = self.error.map(|e| e * 100.0);
        let gave_way = self.gave_way.as_ref().map_or(String::new(), |pu| format!(" (gave way to {pu})"));
        format!(
            " {:.1} µs{gave_way} | {mid:.1}% ({lo:.1}-{hi:.1}) | {:.1}% ({:.1}%) |",
            self.us,
            self.regret * 100.0,
            self.regret_beyond_noise * 100.0
        )
    }
}

/// One of the paper's configurations: a family at a precision.
struct Config {
    label: String,
    model: String,
}

/// The paper's 19: nine families at FP16 and INT8, and pi0.5 once (mixed: INT8 vision encoder).
fn configs(size: &str, only: &[String]) -> Vec<Config> {
    let mut out = vec![];
    for (family, _) in bident_zoo::families::FAMILIES {
        if !only.is_empty() && !only.iter().any(|o| o == family) {
            continue;
        }
        let precisions: &[(&str, &str)] =
            if *family == "pi05" { &[("fp16", "mixed")] } else { &[("fp16", "FP16"), ("int8", "INT8")] };
        for (p, label) in precisions {
            out.push(Config { label: format!("{family} {label}"), model: format!("{family}-{size}-{p}") });
        }
    }
    out
}

/// What the protocol found for one configuration.
struct Row {
    label: String,
    ops: usize,
    parallel_phases: usize,
    phased: PhasedGraph,
    costs: CostTable,
    best_pu: String,
    best_us: f64,
    best_uj: f64,
    lat: Plan,
    energy: Plan,
    par: Plan,
    /// On real PUs: the latency plan and the parallel plan as measured.
    measured: Option<[Measured; 2]>,
}

pub fn eval(a: EvalArgs) -> Result<()> {
    anyhow::ensure!(a.size == "tiny" || a.size == "full", "--size is tiny or full, not `{}`", a.size);
    if a.engines {
        return engines(&a);
    }
    let soc = driver().soc(&bident_driver::SocChoice::named(&a.soc))?;
    let simulated = matches!(soc, Soc::Virtual(_));
    let label = if simulated { "SIMULATED" } else { "measured" };
    // a SoC given as a file path names a folder too: one safe name inside eval/, never a path
    let key = bident_driver::folder_name(&format!("{}-{}", a.soc, a.size));
    let out = a.out.clone().unwrap_or_else(|| target_dir().join("bident/eval").join(&key));
    std::fs::create_dir_all(&out).with_context(|| out.display().to_string())?;
    let configs = configs(&a.size, &a.only);
    anyhow::ensure!(!configs.is_empty(), "no family matches --only {:?}", a.only);
    let t0 = std::time::Instant::now();
    let contention = match &soc {
        Soc::Measured(spec, be) if bident_driver::independent_pus(spec) => {
            Some(driver().measure_contention(spec, be.as_ref())?)
        }
        _ => None,
    };
    // a configuration that fails is reported and the eval goes on: its error is in the report,
    // and the eval fails once the report is written
    let (mut rows, mut failed) = (vec![], vec![]);
    for (k, c) in configs.iter().enumerate() {
        progress(k, configs.len(), &c.label, t0);
        match evaluate(c, &a, contention.as_ref(), &out) {
            Ok(r) => rows.push(r),
            Err(e) => {
                eprintln!("\neval: {} failed: {e:#}", c.label);
                failed.push((c.label.clone(), format!("{e:#}")));
            }
        }
    }
    anyhow::ensure!(!rows.is_empty(), "every configuration failed (their errors are above)");
    progress(configs.len(), configs.len(), "pairs", t0);
    let pairs = pairs(&rows);
    let sweep = sweep(&soc)?;
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    let machine = match &soc {
        Soc::Virtual(v) => format!("nowhere: simulated {} (calibrated to {})", v.spec.name, v.calibration),
        Soc::Measured(..) => bident_profile::host_description(),
    };
    let mut report = report(&a, &rows, &pairs, &sweep, label, &machine);
    failures(&mut report, &failed, configs.len());
    bident_artifact::files::write_bytes(&out.join("report.md"), report.as_bytes())?;
    bident_artifact::files::write_bytes(&out.join("heatmap.svg"), heatmap(&rows, &pairs.planned, label).as_ref())?;
    bident_artifact::files::write_bytes(&out.join("energy.svg"), energy_chart(&rows, label).as_ref())?;
    let pus: Vec<String> = rows[0].costs.soc.pus.iter().map(|p| p.name.clone()).collect();
    bident_artifact::files::write_bytes(&out.join("matmul.svg"), matmul_chart(&sweep, &pus, label).as_ref())?;
    print!("{report}");
    if a.only.is_empty() && a.out.is_none() && failed.is_empty() {
        let command = format!("cargo xtask eval --soc {} --size {}{}", a.soc, a.size, runs_flag(a.runs));
        let charts = ["heatmap.svg", "energy.svg", "matmul.svg"];
        crate::results::record(&crate::results::path(), &key, &command, &report, &out, &charts)?;
        eprintln!("eval: the report is the `{command}` section of {}", crate::results::path().display());
    }
    eprintln!(
        "eval: {} configurations and {} pairs in {:.1} s [{label}] -> {}",
        rows.len(),
        pairs.planned.len(),
        t0.elapsed().as_secs_f64(),
        out.join("report.md").display()
    );
    if let Some((label, _)) = failed.first() {
        anyhow::bail!(
            "{} of {} configurations failed, the first {label} (see the report)",
            failed.len(),
            configs.len()
        );
    }
    if let Some((i, j, _)) = pairs.failed.first() {
        anyhow::bail!(
            "planning {} pairs failed, the first {} + {} (see the report)",
            pairs.failed.len(),
            rows[*i].label,
            rows[*j].label
        );
    }
    Ok(())
}

/// `--runs N` where it is not the default, for a command line that reproduces a run.
fn runs_flag(runs: u32) -> String {
    if runs == 60 { String::new() } else { format!(" --runs {runs}") }
}

/// Fractions as `median 1.0%, p90 2.0%, max 3.0%`.
pub fn spread(mut v: Vec<f64>) -> String {
    let mut q = |p: f64| bident_profile::quantile(&mut v, p) * 100.0;
    format!("median {:.1}%, p90 {:.1}%, max {:.1}%", q(0.5), q(0.9), q(1.0))
}

/// The configurations that failed, with their errors, at the end of a report whose figures
/// leave them out.
pub fn failures(s: &mut String, failed: &[(String, String)], total: usize) {
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Failed: {} of {total} (left out of every figure above)\n", failed.len());
    for (label, why) in failed {
        let _ = writeln!(s, "- {label}: {}", why.replace('\n', " "));
    }
}

/// `--engines`: each family in fp32 (both engines compute it exactly), then the third-party
/// models asked for.
fn engines(a: &EvalArgs) -> Result<()> {
    let mut targets = vec![];
    for (family, _) in bident_zoo::families::FAMILIES {
        if !a.only.is_empty() && !a.only.iter().any(|o| o == family) {
            continue;
        }
        let model = format!("{family}-{}-fp32", a.size);
        let bytes = bident_zoo::build_bytes(&model, 0).with_context(|| format!("no zoo model {model}"))?;
        let path = target_dir().join("bident/zoo").join(format!("{model}.onnx"));
        std::fs::create_dir_all(target_dir().join("bident/zoo"))?;
        bident_artifact::files::write_bytes(&path, &bytes)?;
        targets.push(crate::engines::Target {
            label: model,
            import: bident_driver::ImportSpec::new(bident_driver::Model::File(path)),
        });
    }
    if let Some(only) = &a.thirdparty {
        for name in crate::thirdparty::case_names()? {
            if only.is_empty() || only.contains(&name) {
                targets.push(crate::engines::Target { import: crate::thirdparty::case_import(&name)?, label: name });
            }
        }
    }
    anyhow::ensure!(!targets.is_empty(), "no model matches --only {:?} / --thirdparty {:?}", a.only, a.thirdparty);
    let out = a.out.clone().unwrap_or_else(|| target_dir().join("bident/eval").join(format!("engines-{}", a.size)));
    let table = crate::engines::engines(&targets, a.runs, &out)?;
    if a.only.is_empty() && a.out.is_none() {
        let (key, with) = match &a.thirdparty {
            Some(only) if only.is_empty() => (format!("engines-{}-thirdparty", a.size), " --thirdparty"),
            Some(_) => return Ok(()),
            None => (format!("engines-{}", a.size), ""),
        };
        let command = format!("cargo xtask eval --engines --size {}{with}{}", a.size, runs_flag(a.runs));
        crate::results::record(&crate::results::path(), &key, &command, &table, &out, &[])?;
        eprintln!("eval: the table is the `{command}` section of {}", crate::results::path().display());
    }
    Ok(())
}

fn progress(done: usize, total: usize, what: &str, t0: std::time::Instant) {
    let width = 24;
    let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
    let line = format!(
        "eval: [{}{}] {done}/{total} {what} ({:.0} s)",
        "#".repeat(filled),
        ".".repeat(width - filled),
        t0.elapsed().as_secs_f64()
    );
    if std::io::stderr().is_terminal() {
        eprint!("\r{line:<90}");
    } else {
        eprintln!("{line}");
    }
}

/// One configuration through the driver's stages into `out/<model>/`: the latency plan, the
/// energy plan and the parallel plan (each refined on real PUs), the first and last measured
/// there.
fn evaluate(
    c: &Config,
    a: &EvalArgs,
    contention: Option<&bident_profile::Contention>,
    out: &std::path::Path,
) -> Result<Row> {
    let d = driver();
    let mut o = bident_driver::Options::new(bident_driver::Model::Zoo(c.model.clone()), &a.soc);
    o.out = Some(out.join(&c.model));
    let mut p = d.prepare(&o, contention)?;
    let options = |goal, mode| bident_driver::PlanOptions { goal, mode, ..Default::default() };
    let plan = |p: &mut bident_driver::Prepared, goal, mode| d.plan(p, &options(goal, mode), o.measuring);
    // each plan run as the pipeline runs it: one measured slower than an alternative beside it
    // beyond the noise between blocks gives way to it, and the plan delivered is the one reported. Each
    // is measured right after its search, so the folder ends with the parallel plan and its
    // report.
    let run = bident_driver::RunOptions {
        config: bident_runtime::RunConfig { runs: a.runs, ..Default::default() },
        ..Default::default()
    };
    let measure = |p: &bident_driver::Prepared, plan: &(Plan, _), mode| -> Result<Option<Measured>> {
        if matches!(p.soc, Soc::Virtual(_)) {
            return Ok(None);
        }
        let (delivered, report) = d.deliver(p, plan.clone(), &options(Goal::Latency, mode), &run)?;
        Ok(Some(Measured::of(&report, &plan.0, &delivered)))
    };
    let lat = plan(&mut p, Goal::Latency, Mode::Sequential)?;
    let lat_measured = measure(&p, &lat, Mode::Sequential)?;
    let energy = plan(&mut p, Goal::Energy, Mode::Sequential)?.0;
    let par = plan(&mut p, Goal::Latency, Mode::Parallel)?;
    let measured = match (lat_measured, measure(&p, &par, Mode::Parallel)?) {
        (Some(l), Some(r)) => Some([l, r]),
        _ => None,
    };
    let (lat, par) = (lat.0, par.0);
    let best = lat
        .baselines
        .iter()
        .filter_map(|b| Some((b.pu.clone(), b.predicted_us?, b.predicted_energy_uj?)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .context("no PU runs every op")?;
    Ok(Row {
        label: c.label.clone(),
        ops: p.graph.ops.len(),
        parallel_phases: p.phased.parallel_phases(),
        phased: p.phased,
        costs: p.costs,
        best_pu: best.0,
        best_us: best.1,
        best_uj: best.2,
        lat,
        energy,
        par,
        measured,
    })
}

/// Figure 9's pairs: (i, j, speedup, energy change) of those planned; those too large for the
/// joint search, and those whose planning failed otherwise, with the reason.
struct Pairs {
    planned: Vec<(usize, usize, f64, f64)>,
    too_large: Vec<(usize, usize, String)>,
    failed: Vec<(usize, usize, String)>,
}

/// Figure 9: every pair of configurations (the same one twice included) planned to run at once,
/// against both run one after the other on their best single PUs. A pair whose joint search
/// would not fit in memory is listed as such; a pair whose planning fails otherwise is listed
/// with its error and the eval goes on (it fails once the report is written).
fn pairs(rows: &[Row]) -> Pairs {
    let mut out = Pairs { planned: vec![], too_large: vec![], failed: vec![] };
    for i in 0..rows.len() {
        for j in i..rows.len() {
            let (a, b) = (&rows[i], &rows[j]);
            match bident_driver::pair_plan((&a.phased, &a.costs), (&b.phased, &b.costs), Objective::Latency) {
                Ok(p) => out.planned.push((i, j, p.speedup, p.predicted_energy_uj / p.baseline_energy_uj - 1.0)),
                Err(bident_driver::DriverError::Search(e)) if matches!(*e, SearchError::TooLarge { .. }) => {
                    eprintln!("eval: {} + {}: not planned: {e}", a.label, b.label);
                    out.too_large.push((i, j, e.to_string()));
                }
                Err(e) => {
                    let e = format!("{:#}", anyhow::Error::new(e));
                    eprintln!("\neval: {} + {}: planning the pair failed: {e}", a.label, b.label);
                    out.failed.push((i, j, e));
                }
            }
        }
    }
    out
}

/// Figure 3: square MatMul `[1,N,N] x [N,N]` per PU in FP16 and INT8: (dtype, N, µs per PU).
type Sweep = Vec<(&'static str, u64, Vec<Option<f64>>)>;

fn sweep(soc: &Soc) -> Result<Sweep> {
    let mut out = vec![];
    for (dtype, name) in [(bident_tensor::DType::F16, "f16"), (bident_tensor::DType::I8, "i8")] {
        for n in [32u64, 64, 128, 256, 512, 1024, 2048] {
            let model = bident_zoo::probe("matmul", dtype, n).context("probe")?;
            // a few fixed runs: N = 2048 takes a fraction of a second per run here
            let t = driver().probe_costs(soc, &format!("matmul-{name}-{n}"), &model, 5)?;
            let per_pu = (0..t.soc.pus.len()).map(|j| t.cost(0, j).map(bident_profile::Cost::weight_us)).collect();
            out.push((name, n, per_pu));
        }
    }
    Ok(out)
}

fn geomean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x.ln(), n + 1));
    if n == 0 { f64::NAN } else { (sum / n as f64).exp() }
}

fn report(a: &EvalArgs, rows: &[Row], all_pairs: &Pairs, sweep: &Sweep, label: &str, machine: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# bident evaluation: {} SoC, {} models [{label}]\n", a.soc, a.size);
    let _ = writeln!(
        s,
        "Command: `cargo xtask eval --soc {} --size {}`. Figures are {label}{}; machine: {machine}.\n",
        a.soc,
        a.size,
        if label == "SIMULATED" { " (an analytic cost model; nothing ran)" } else { " on this machine" }
    );
    let measured = rows.iter().any(|r| r.measured.is_some());
    sequential_table(&mut s, rows, label, measured);
    parallel_table(&mut s, rows, label, measured);
    pairs_section(&mut s, rows, all_pairs, label);
    let _ = writeln!(s, "## Figure 7: energy of the latency- and energy-optimal plans [{label}]\n\n`energy.svg`.\n");
    matmul_table(&mut s, rows, sweep, label);
    s
}

/// Table 2: each config's latency- and energy-optimal sequential plans against its best single PU.
fn sequential_table(s: &mut String, rows: &[Row], label: &str, measured: bool) {
    let _ = writeln!(s, "## Table 2: sequential plans against the best single PU [{label}]\n");
    let _ = write!(
        s,
        "| config | fused ops | best single PU | latency plan | speedup | its energy | energy plan: energy | its speedup |"
    );
    if measured {
        let _ = write!(s, " measured latency plan | prediction error (p10-p90 of blocks) | regret (beyond noise) |");
    }
    let _ = writeln!(s, "\n|---|---|---|---|---|---|---|---|{}", if measured { "---|---|---|" } else { "" });
    for r in rows {
        let mix = |p: &Plan| p.ops_per_pu.iter().map(|(pu, n)| format!("{n} {pu}")).collect::<Vec<_>>().join(", ");
        let _ = write!(
            s,
            "| {} | {} | {} {:.1} µs | {:.1} µs ({}) | {:.2}x | {:+.1}% | {:+.1}% ({}) | {:.2}x |",
            r.label,
            r.ops,
            r.best_pu,
            r.best_us,
            r.lat.predicted_us,
            mix(&r.lat),
            r.best_us / r.lat.predicted_us,
            (r.lat.predicted_energy_uj / r.best_uj - 1.0) * 100.0,
            (r.energy.predicted_energy_uj / r.best_uj - 1.0) * 100.0,
            mix(&r.energy),
            r.best_us / r.energy.predicted_us,
        );
        if let Some([m, _]) = &r.measured {
            s.push_str(&m.cells());
        }
        let _ = writeln!(s);
    }
    let seq: Vec<f64> = rows.iter().map(|r| r.best_us / r.lat.predicted_us).collect();
    let e_opt: Vec<f64> = rows.iter().map(|r| r.energy.predicted_energy_uj / r.best_uj - 1.0).collect();
    let e_lat: Vec<f64> = rows.iter().map(|r| r.lat.predicted_energy_uj / r.best_uj - 1.0).collect();
    let _ = writeln!(
        s,
        "\nSequential speedup: geomean {:.2}x, max {:.2}x (paper: 1.09x, up to 1.58x). Energy-optimal plans: {:+.1}% \
         energy on average (paper: -9.2%), latency geomean {:.2}x (paper: 1.03x); latency-optimal plans: {:+.1}% energy \
         (paper: -3.7%), more energy than the best single PU on {} of {} (paper: 5 of 19).\n",
        geomean(seq.iter().copied()),
        seq.iter().copied().fold(0.0, f64::max),
        mean(&e_opt) * 100.0,
        geomean(rows.iter().map(|r| r.best_us / r.energy.predicted_us)),
        mean(&e_lat) * 100.0,
        e_lat.iter().filter(|&&e| e > 1e-9).count(),
        rows.len()
    );
}

/// Table 3: each config's parallel plan; with measurements, the regret and prediction error summary.
fn parallel_table(s: &mut String, rows: &[Row], label: &str, measured: bool) {
    let _ = writeln!(s, "## Table 3: parallel plans [{label}]\n");
    let _ = writeln!(
        s,
        "| config | phases with parallel branches | parallel plan | speedup | gain over sequential |{}",
        if measured { " measured | prediction error (p10-p90 of blocks) | regret (beyond noise) |" } else { "" }
    );
    let _ = writeln!(s, "|---|---|---|---|---|{}", if measured { "---|---|---|" } else { "" });
    for r in rows {
        let _ = write!(
            s,
            "| {} | {} | {:.1} µs ({} schedule) | {:.2}x | {:+.1}% |",
            r.label,
            r.parallel_phases,
            r.par.predicted_us,
            r.par.schedule.name(),
            r.best_us / r.par.predicted_us,
            (r.lat.predicted_us / r.par.predicted_us - 1.0) * 100.0
        );
        if let Some([_, m]) = &r.measured {
            s.push_str(&m.cells());
        }
        let _ = writeln!(s);
    }
    let par: Vec<f64> = rows.iter().map(|r| r.best_us / r.par.predicted_us).collect();
    let _ = writeln!(
        s,
        "\nParallel speedup: geomean {:.2}x, max {:.2}x (paper: up to 1.60x).\n",
        geomean(par.iter().copied()),
        par.iter().copied().fold(0.0, f64::max)
    );
    if measured {
        regret_summary(s, rows);
    }
}

/// Figure 9: every pair of configs planned to run at once, and the pairs left out.
fn pairs_section(s: &mut String, rows: &[Row], all_pairs: &Pairs, label: &str) {
    let _ = writeln!(s, "## Figure 9: pairs running at once [{label}]\n");
    let pairs = &all_pairs.planned;
    let speedups: Vec<f64> = pairs.iter().map(|p| p.2).collect();
    let best = pairs.iter().max_by(|x, y| x.2.total_cmp(&y.2));
    let worst = pairs.iter().min_by(|x, y| x.2.total_cmp(&y.2));
    let name = |p: Option<&(usize, usize, f64, f64)>| {
        p.map_or(String::new(), |p| format!("{} + {} {:.2}x", rows[p.0].label, rows[p.1].label, p.2))
    };
    let _ = writeln!(
        s,
        "{} pairs; speedup against both models one after the other on their best single PUs: geomean {:.2}x, \
         {:.2}x to {:.2}x (best {}, worst {}); {} pairs below 1x (paper: 190 pairs, geomean 3.42x, 0.86x to 22.4x). \
         Energy: {:+.1}% on average (paper: -48.2%). Same-PU co-execution: time slicing. Heatmap: `heatmap.svg`.\n",
        pairs.len(),
        geomean(speedups.iter().copied()),
        speedups.iter().copied().fold(f64::INFINITY, f64::min),
        speedups.iter().copied().fold(0.0, f64::max),
        name(best),
        name(worst),
        speedups.iter().filter(|&&x| x < 1.0 - 1e-9).count(),
        mean(&pairs.iter().map(|p| p.3).collect::<Vec<_>>()) * 100.0
    );
    for (list, what) in [(&all_pairs.too_large, "not planned"), (&all_pairs.failed, "failed to plan")] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(s, "{} pairs {what} (empty in the heatmap):\n", list.len());
        for (i, j, why) in list {
            let _ = writeln!(s, "- {} + {}: {}", rows[*i].label, rows[*j].label, why.replace('\n', " "));
        }
        let _ = writeln!(s);
    }
}

/// Figure 3: the MatMul sweep, dispatch + execution per PU, and the fastest.
fn matmul_table(s: &mut String, rows: &[Row], sweep: &Sweep, label: &str) {
    let _ = writeln!(s, "## Figure 3: MatMul [1,N,N] x [N,N] per PU, dispatch + execution µs [{label}]\n");
    let pus: Vec<String> =
        rows.first().map(|r| r.costs.soc.pus.iter().map(|p| p.name.clone()).collect()).unwrap_or_default();
    let _ = writeln!(s, "| dtype | N | {} | fastest |", pus.join(" | "));
    let _ = writeln!(s, "|---|---|{}---|", "---|".repeat(pus.len()));
    for (dtype, n, per) in sweep {
        let fastest = per
            .iter()
            .enumerate()
            .filter_map(|(j, v)| v.map(|v| (j, v)))
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map_or("-".to_string(), |(j, _)| pus.get(j).cloned().unwrap_or_default());
        let cells: Vec<String> = per.iter().map(|v| v.map_or("-".into(), |v| format!("{v:.1}"))).collect();
        let _ = writeln!(s, "| {dtype} | {n} | {} | {fastest} |", cells.join(" | "));
    }
    let _ = writeln!(s, "\n`matmul.svg`.");
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Over every measured plan: regret (measured / the fastest alternative measured beside it -
/// 1), raw and against only the alternatives faster beyond the noise between blocks, and the
/// prediction error of its blocks, median and spread, and the worst.
fn regret_summary(s: &mut String, rows: &[Row]) {
    let all: Vec<(&str, &Measured)> =
        rows.iter().flat_map(|r| r.measured.iter().flatten().map(move |m| (r.label.as_str(), m))).collect();
    let q = |mut v: Vec<f64>, p: f64| bident_profile::quantile(&mut v, p) * 100.0;
    // the worst names what beat it: none where no plan had any regret
    let raw = all.iter().filter(|(_, m)| m.regret > 0.0).max_by(|a, b| a.1.regret.total_cmp(&b.1.regret));
    let clear = all
        .iter()
        .filter(|(_, m)| m.regret_beyond_noise > 0.0)
        .max_by(|a, b| a.1.regret_beyond_noise.total_cmp(&b.1.regret_beyond_noise));
    let errors: Vec<f64> = all.iter().map(|(_, m)| m.error[1]).collect();
    let _ = writeln!(
        s,
        "## Regret and prediction error [measured]\n\nOver {} measured plans (each as the run delivered it; {} \
         gave way to a whole-model run measured faster beside it beyond the noise between blocks):\n\n\
         - regret, against the fastest alternative by medians: {}{};\n\
         - regret beyond the noise, against only the alternatives faster in a way the blocks agree on (Wilcoxon, \
         `consistently_faster`; {} plans had one): {}{};\n\
         - prediction error (each plan's median over its blocks): median {:.1}%, p90 {:.1}%.\n",
        all.len(),
        all.iter().filter(|(_, m)| m.gave_way.is_some()).count(),
        spread(all.iter().map(|(_, m)| m.regret).collect()),
        raw.map_or(String::new(), |(l, m)| format!(" (worst {l}: {} was faster)", m.fastest)),
        all.iter().filter(|(_, m)| m.clearly_faster.is_some()).count(),
        spread(all.iter().map(|(_, m)| m.regret_beyond_noise).collect()),
        clear
            .and_then(|(l, m)| Some((l, m.clearly_faster.as_ref()?)))
            .map_or(String::new(), |(l, c)| format!(" (worst {l}: {c} was faster)")),
        q(errors.clone(), 0.5),
        q(errors, 0.9)
    );
    // the cost model apart from the machine's slow states: each plan over its blocks in the
    // fast state, where it had enough of them, else over all of them
    let fast: Vec<f64> = all.iter().map(|(_, m)| m.error_fast.0[1]).collect();
    let _ = writeln!(
        s,
        "Prediction error over the blocks in the fast state only, the state the profile prices in ({} plans had at \
         least {} such blocks; the others count with all their blocks): median {:.1}%, p90 {:.1}%.\n",
        all.iter().filter(|(_, m)| m.error_fast.1).count(),
        bident_runtime::FAST_BLOCKS_MIN,
        q(fast.clone(), 0.5),
        q(fast, 0.9)
    );
    let (blocks, slow) = all.iter().fold((0, 0), |(b, sl), (_, m)| (b + m.blocks.0, sl + m.blocks.1));
    let _ = writeln!(
        s,
        "Every measuring block waited for the machine's fast state (`bident_profile::speed`) and was measured again \
         where a core left it; {slow} of {blocks} blocks still ran in a slow state (the waiting budget ran out).\n"
    );
    // the floor under any prediction: one plan measured twice in this process, minutes apart
    let twice: Vec<f64> = rows
        .iter()
        .filter_map(|r| match &r.measured {
            Some([a, b]) if a.ran == b.ran => Some(a.us.max(b.us) / a.us.min(b.us) - 1.0),
            _ => None,
        })
        .filter(|d| d.is_finite())
        .collect();
    if !twice.is_empty() {
        let _ = writeln!(
            s,
            "The noise any prediction is judged through: in {} configurations the sequential and the parallel run \
             delivered the same plan, measured minutes apart in this process; the two measurements differ by {}.\n",
            twice.len(),
            spread(twice)
        );
    }
}

fn heatmap(rows: &[Row], pairs: &[(usize, usize, f64, f64)], label: &str) -> String {
    let n = rows.len();
    let mut m = vec![vec![None; n]; n];
    for &(i, j, x, _) in pairs {
        m[i][j] = Some(x);
        m[j][i] = Some(x);
    }
    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    svg::heatmap(&format!("Pairs at once: speedup vs serial best single PUs [{label}]"), &labels, &m)
}

fn energy_chart(rows: &[Row], label: &str) -> String {
    let groups: Vec<(String, Vec<f64>)> = rows
        .iter()
        .map(|r| {
            (
                r.label.clone(),
                vec![1.0, r.lat.predicted_energy_uj / r.best_uj, r.energy.predicted_energy_uj / r.best_uj],
            )
        })
        .collect();
    svg::bars(
        &format!("Energy relative to the best single PU [{label}]"),
        &["best single PU", "latency-optimal", "energy-optimal"],
        &groups,
    )
}

fn matmul_chart(sweep: &Sweep, pus: &[String], label: &str) -> String {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = vec![];
    for dtype in ["f16", "i8"] {
        for (j, pu) in pus.iter().enumerate() {
            let pts: Vec<(f64, f64)> = sweep
                .iter()
                .filter(|s| s.0 == dtype)
                .filter_map(|s| s.2.get(j).copied().flatten().map(|v| (s.1 as f64, v)))
                .collect();
            series.push((format!("{pu} {dtype}"), pts));
        }
    }
    svg::loglog(&format!("MatMul [1,N,N] x [N,N], µs per PU [{label}]"), "N", "µs", &series)
}
