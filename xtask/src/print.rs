//! What the commands print: the driver's events on stderr (progress bars on a terminal), the
//! pipeline's summary on stdout, and its JSON line.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use bident_driver::{Event, Stage};
use bident_ir::FusedGraph;
use bident_profile::{CostTable, ProfileConfig};
use bident_runtime::RunReport;
use bident_search::Plan;

/// Progress state: the current bar's key and when it started, and the last line printed where
/// stderr is not a terminal.
struct Bar {
    key: String,
    started: Instant,
    last_line: Instant,
    open: bool,
}

static BAR: Mutex<Option<Bar>> = Mutex::new(None);

/// `s` safe to print on a terminal: control characters other than newline and tab (an escape
/// sequence in a name read from a file) written out as `\u{..}`.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Print one driver event (the callback every command gives its driver).
pub fn event(e: Event<'_>) {
    // -q: the stage lines, bars and summaries go; results on stdout and errors stay
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    match e {
        Event::Progress { stage, what, done, total } => progress(stage, &what, done, total),
        Event::Note { stage, text } => {
            end_bar();
            tracing::info!("{}: {}", stage.name(), printable(&text));
        }
        Event::Profiled { table, cfg } => {
            end_bar();
            print_profile_summary(table);
            print_merged(table);
            print_stop_check(table, cfg);
        }
        Event::Contention { soc, contention, probes } => print_contention(soc, contention, probes),
        Event::Front(front) => {
            eprintln!("search: latency/energy front, {} points (latency weight, µs, µJ, ops per PU):", front.len());
            for p in front {
                let mix: Vec<String> = p.ops_per_pu.iter().map(|(pu, n)| format!("{n} on {pu}")).collect();
                eprintln!(
                    "  {:>4.1} {:>12.1} {:>12.1}  {}",
                    p.blend.unwrap_or(f64::NAN),
                    p.predicted_us,
                    p.predicted_energy_uj,
                    mix.join(", ")
                );
            }
        }
        Event::Searched { plan, ms } => eprintln!(
            "search: `{}`, {} mode ({} schedule), {} objective in {ms:.1} ms: predicted {:.1} µs (the search's own \
             estimate {:.1}) vs best single PU {} {:.1} µs",
            plan.search,
            plan.mode.name(),
            plan.schedule.name(),
            if plan.blend.is_some() { "pareto" } else { plan.objective.name() },
            plan.predicted_us,
            plan.search_estimate,
            plan.best_single_pu.as_deref().unwrap_or("-"),
            plan.best_single_pu_us.unwrap_or(f64::NAN)
        ),
    }
}

/// A bar per (stage, what): on a terminal redrawn in place, elsewhere a line every 5 s. The ETA
/// is from the pace so far within this bar.
fn progress(stage: Stage, what: &str, done: usize, total: usize) {
    let tty = std::io::stderr().is_terminal();
    let Ok(mut bar) = BAR.lock() else { return };
    let key = format!("{} {what}", stage.name());
    if bar.as_ref().is_none_or(|b| b.key != key) {
        if bar.as_ref().is_some_and(|b| b.open) && tty {
            eprintln!();
        }
        *bar = Some(Bar { key: key.clone(), started: Instant::now(), last_line: Instant::now(), open: false });
    }
    let Some(b) = bar.as_mut() else { return };
    let spent = b.started.elapsed().as_secs_f64();
    let eta = if done > 0 && done < total {
        format!(", at most {:.0} s left", spent / done as f64 * (total - done) as f64)
    } else {
        String::new()
    };
    let width = 20;
    let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
    let line = format!("{key} [{}{}] {done}/{total}{eta}", "#".repeat(filled), ".".repeat(width - filled));
    if tty {
        eprint!("\r{}: {line:<90}", stage.name());
        b.open = true;
    } else if b.last_line.elapsed().as_secs() >= 5 {
        eprintln!("{}: {line}", stage.name());
        b.last_line = Instant::now();
    }
}

/// End a bar drawn in place before printing a line.
fn end_bar() {
    if let Ok(mut bar) = BAR.lock()
        && let Some(b) = bar.as_mut()
        && b.open
    {
        eprintln!();
        b.open = false;
    }
}

/// What compiling neighbours together saves, measured.
fn print_merged(t: &CostTable) {
    if t.segments.is_empty() {
        return;
    }
    // a whole-only PU has no ops of its own to pair
    for (j, pu) in t.soc.pus.iter().enumerate().filter(|(_, p)| !p.whole_only).map(|(j, p)| (j, &p.name)) {
        let io = if t.io_every_call.get(j) == Some(&true) { 1.0 } else { 0.0 };
        let mut saved: Vec<f64> = t
            .segments
            .iter()
            .filter_map(|m| {
                let [first, second] = m.ops[..] else { return None };
                let (a, b, ab) = (t.cost(first, j)?, t.cost(second, j)?, m.per_pu[j].as_ref()?);
                let call = |c: &bident_profile::Cost| c.weight_us() + io * (c.h2d_us + c.d2h_us);
                Some(call(a) + call(b) - call(ab))
            })
            .collect();
        let total: f64 = saved.iter().sum();
        eprintln!(
            "profile: {pu}: {} pairs of neighbours compiled together save {:.1} µs each (median; {total:.0} µs in all)",
            saved.len(),
            bident_profile::quantile(&mut saved, 0.5)
        );
    }
}

/// The SF matrix as a table; `excl` marks PUs that share hardware and never run at once.
fn print_contention(soc: &bident_backend::SocSpec, c: &bident_profile::Contention, probes: &[String]) {
    eprintln!("contention: SF(row PU | column PU busy), co-runs of {}:", probes.join(", "));
    eprintln!("  {:>25} {}", "", soc.pus.iter().map(|p| format!("{:>8}", p.name)).collect::<String>());
    let exclusive = soc.exclusive();
    let row = |label: &str, pu: &str, i: usize, sf: &[f64]| {
        let cells: String = sf
            .iter()
            .enumerate()
            .map(|(j, v)| if exclusive[i][j] { format!("{:>8}", "excl") } else { format!("{v:>8.2}") })
            .collect();
        eprintln!("  {label:>16} {pu:>8} {cells}");
    };
    for (i, pu) in soc.pus.iter().enumerate() {
        row("median", &pu.name, i, &c.sf[i]);
        if let bident_profile::ContentionSource::Measured { by_probe, .. } = &c.source {
            for (probe, m) in probes.iter().zip(by_probe) {
                row(probe, "", i, &m[i]);
            }
        }
    }
}

/// With `--fixed-runs`: how the adaptive stop would have done on the same runs.
fn print_stop_check(table: &CostTable, cfg: &ProfileConfig) {
    let checks: Vec<(u32, &bident_profile::StopCheck)> = table
        .ops
        .iter()
        .flat_map(|o| o.per_pu.iter().flatten())
        .filter_map(|c| c.stop_check.as_ref().map(|s| (c.runs, s)))
        .collect();
    if checks.is_empty() {
        return;
    }
    let (all, stopped): (u32, u32) = checks.iter().fold((0, 0), |(a, s), (runs, c)| (a + runs, s + c.runs));
    // the fixed protocol's cost includes the warm-up runs the adaptive one makes too
    let warm = cfg.warmup * checks.len() as u32;
    let mut dev: Vec<f64> = checks.iter().map(|(_, c)| (c.median_us / c.full_median_us - 1.0).abs() * 100.0).collect();
    dev.sort_by(f64::total_cmp);
    let within = dev.iter().filter(|&&d| d <= cfg.rel_ci * 100.0).count();
    eprintln!(
        "profile: adaptive-stop check on these {} entries: {stopped} of {all} timed runs ({:.1}x fewer; {:.1}x \
         counting the {} warm-up runs); its medians vs the full ones: median {:.2}%, p90 {:.2}%, max {:.2}% off, \
         {within} of {} within {:.0}%",
        checks.len(),
        all as f64 / stopped.max(1) as f64,
        (all + warm) as f64 / (stopped + warm).max(1) as f64,
        cfg.warmup,
        dev[dev.len() / 2],
        dev[(dev.len() - 1) * 9 / 10],
        dev[dev.len() - 1],
        dev.len(),
        cfg.rel_ci * 100.0
    );
}

/// The slowest ops (by their best PU) and, per PU, the ops it cannot run.
fn print_profile_summary(table: &CostTable) {
    let best = |o: &bident_profile::OpCosts| {
        o.per_pu.iter().flatten().map(bident_profile::Cost::weight_us).fold(f64::INFINITY, f64::min)
    };
    let mut slow: Vec<&bident_profile::OpCosts> = table.ops.iter().collect();
    slow.sort_by(|a, b| best(b).total_cmp(&best(a)));
    let total: f64 = table.ops.iter().map(best).sum();
    eprintln!("profile: slowest ops (dispatch + execution on their best PU, share of the sum {total:.0} us):");
    for o in slow.iter().take(5) {
        let w = best(o);
        eprintln!("  op {:>4} {:<40} {:>9.1} us {:>5.1}%", o.op, truncate(&o.kind, 40), w, 100.0 * w / total);
    }
    let whole_only: Vec<&str> = table.soc.pus.iter().filter(|p| p.whole_only).map(|p| p.name.as_str()).collect();
    if !whole_only.is_empty() {
        eprintln!("profile: {} run the whole model or nothing: measured whole by refine", whole_only.join(", "));
    }
    for (j, pu) in table.soc.pus.iter().enumerate().filter(|(_, p)| !p.whole_only) {
        let missing: Vec<&str> =
            table.ops.iter().filter(|o| o.per_pu.get(j).is_none_or(Option::is_none)).map(|o| o.kind.as_str()).collect();
        if !missing.is_empty() {
            eprintln!("profile: {} cannot run {} ops: {}", pu.name, missing.len(), truncate(&missing.join(", "), 100));
        }
    }
}

pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// The pipeline's summary on stdout.
pub fn summary(g: &FusedGraph, plan: &Plan, r: Option<&RunReport>) {
    let precision = |pu: &str| plan.pus.iter().position(|p| p == pu).and_then(|i| plan.pu_precisions.get(i));
    let mix: Vec<String> = plan
        .ops_per_pu
        .iter()
        .map(|(pu, n)| match precision(pu) {
            Some(p) => format!("{n} on {pu} ({p})"),
            None => format!("{n} on {pu}"),
        })
        .collect();
    let label = if plan.simulated { "simulated" } else { "measured" };
    println!("model      {} ({} fused ops from {} ONNX nodes)", g.name, g.ops.len(), g.source.nodes);
    println!("soc        {} [{}], PUs: {}", plan.soc, label, plan.pus.join(", "));
    let objective = match plan.blend {
        Some(w) => format!("the front's fastest point, latency weight {w}"),
        None => format!("{} objective", plan.objective.name()),
    };
    println!(
        "plan       {} mode, {} schedule ({objective}, search `{}`): {}",
        plan.mode.name(),
        plan.schedule.name(),
        plan.search,
        mix.join(", ")
    );
    println!(
        "bound      no mapping beats {:.1} µs / {:.1} µJ under this schedule; the plan is {:.1}% above it ({})",
        plan.lower_bound_us,
        plan.lower_bound_energy_uj,
        plan.gap * 100.0,
        plan.objective.name()
    );
    println!(
        "predicted  {:.1} µs   best single PU {} {:.1} µs   speedup {:.2}x",
        plan.predicted_us,
        plan.best_single_pu.as_deref().unwrap_or("-"),
        plan.best_single_pu_us.unwrap_or(f64::NAN),
        plan.best_single_pu_us.unwrap_or(f64::NAN) / plan.predicted_us
    );
    let Some(r) = r else {
        println!("measured   nothing: {} is a virtual SoC; every figure above is simulated", plan.soc);
        return;
    };
    measured(r);
}

/// The measured lines of a summary (single or concurrent plan).
pub fn measured(r: &RunReport) {
    println!(
        "measured   {:.1} µs (p10 {:.1}, p90 {:.1}; {} runs)   predicted {:.1} µs: prediction error {:.1}%   [{}]",
        r.measured_us,
        r.measured_p10_us,
        r.measured_p90_us,
        r.runs,
        r.predicted_us,
        r.prediction_error * 100.0,
        r.measured_on
    );
    let it = if r.plan_is_reference() {
        ": the plan itself".to_string()
    } else {
        format!(" (speedup {:.2}x)", r.measured_speedup())
    };
    println!(
        "baselines  whole model on {} {:.1} µs{it}",
        r.best_single_pu.join(" then "),
        r.measured_best_single_pu_us
    );
    for d in &r.backend_defaults {
        let best = if r.best_default() == Some(d) { "  <- the best default" } else { "" };
        let err = d.max_abs_err.map_or(String::new(), |e| format!(", outputs {e:.1e} from f32"));
        match (d.measured_us, &d.refused) {
            (Some(us), _) if d.is_plan => {
                println!("           {} {us:.1} µs: the plan itself (the same configuration){err}{best}", d.description)
            }
            (Some(us), _) => {
                let (faster, blocks) = (bident_runtime::faster_blocks(&d.block_ratios), d.block_ratios.len());
                println!(
                    "           {} {us:.1} µs (speedup {:.2}x{err}; faster than the plan in {faster} of {blocks} \
                     blocks){best}",
                    d.description,
                    us / r.measured_us
                )
            }
            (None, why) => println!("           {}: not measured ({})", d.description, why.as_deref().unwrap_or("?")),
        }
    }
    if let Some((tuned, us)) = r.tuned() {
        println!("tuned      {tuned} {us:.1} µs: the fastest whole-model configuration measured beside the plan");
    }
    println!("speedup    {:.2}x over the best backend default ({})", r.speedup_vs_best_default(), r.backend_default);
    println!("           {:.2}x over the tuned baseline", r.speedup_vs_tuned());
    let [lo, mid, hi] = r.prediction_error_blocks;
    let beyond = match &r.clearly_faster {
        Some(c) => format!("{:.1}% against {c}", r.regret_beyond_noise * 100.0),
        None => "0.0%: none was faster in a way the blocks agree on".into(),
    };
    println!(
        "regret     {:.1}% (the fastest alternative measured beside it: {}); beyond the noise between blocks \
         {beyond}; prediction error per block: median {:.1}%, p10 {:.1}%, p90 {:.1}%",
        r.regret * 100.0,
        r.fastest_candidate,
        mid * 100.0,
        lo * 100.0,
        hi * 100.0
    );
    if r.slow_blocks > 0 {
        println!(
            "machine    {} of {} measuring blocks ran with a core in a slow state (waiting for its fast state ran \
             out): their figures are slower than the machine's fast state",
            r.slow_blocks, r.blocks
        );
        if let Some(([lo, mid, hi], n)) = r.prediction_error_fast {
            println!(
                "           over the plan's {n} blocks in the fast state, the state the profile prices in: prediction \
                 error median {:.1}%, p10 {:.1}%, p90 {:.1}%",
                mid * 100.0,
                lo * 100.0,
                hi * 100.0
            );
        }
    }
    let ops: usize = r.ops.iter().map(|t| t.ops.len()).sum();
    println!(
        "runtime    {ops} ops as {} sub-models, compiled in {:.0} ms (not in the latency); executor overhead {:.2} µs \
         per sub-model",
        r.ops.len(),
        r.compile_ms,
        r.overhead_us_per_op
    );
    println!(
        "outputs    checked against the whole model in every block (its first run and its last): max abs error {:.3e}; {}",
        r.max_abs_err, r.tolerance
    );
    if r.pu_backends.iter().any(|b| Some(b) != r.pu_backends.first()) {
        let labels: Vec<String> = (0..r.pus.len()).map(|i| r.pu_label(i)).collect();
        println!("backends   {} ({})", labels.join(", "), r.backend);
    }
}

/// The pipeline's JSON line.
pub fn plan_json(g: &FusedGraph, plan: &Plan, r: Option<&RunReport>) -> serde_json::Value {
    let best_us = plan.best_single_pu_us.unwrap_or(f64::NAN);
    let mut j = serde_json::json!({
        "model": g.name,
        "soc": plan.soc,
        "simulated": plan.simulated,
        "pus": plan.pus,
        "mode": plan.mode.name(),
        "schedule": plan.schedule.name(),
        "objective": plan.objective.name(),
        "search": plan.search,
        "fused_ops": g.ops.len(),
        "predicted_us": plan.predicted_us,
        // energy = sum of time x power of the spending PU (declared unless measured)
        "predicted_energy_mj": plan.predicted_energy_uj / 1000.0,
        "best_single_pu": plan.best_single_pu,
        "best_single_pu_us": best_us,
        "predicted_speedup": best_us / plan.predicted_us,
        "lower_bound_us": plan.lower_bound_us,
        "latency_weight": plan.blend,
        "gap": plan.gap,
        // per op, where it went (`explain DIR --json` adds the times and the reasons)
        "placement": plan
            .steps
            .iter()
            .map(|s| serde_json::json!({"op": s.op, "name": s.name, "kind": s.kind, "pu": s.pu}))
            .collect::<Vec<_>>(),
    });
    // a virtual SoC's plan has no measured fields at all
    if let (Some(r), Some(o)) = (r, j.as_object_mut()) {
        o.extend(measured_json(r));
    }
    j
}

/// The measured fields of the pipeline's JSON line.
pub fn measured_json(r: &RunReport) -> serde_json::Map<String, serde_json::Value> {
    let j = serde_json::json!({
        "measured_us": r.measured_us,
        "prediction_error": r.prediction_error,
        "measured_best_single_pu_us": r.measured_best_single_pu_us,
        "measured_speedup": r.measured_speedup(),
        "measured_backend_default_us": r.measured_backend_default_us,
        // the faster default, kept under its first name
        "speedup_vs_backend_default": r.speedup_vs_best_default(),
        "measured_backend_defaults": r
            .backend_defaults
            .iter()
            .map(|d| (d.backend.clone(), serde_json::json!(d.measured_us)))
            .collect::<serde_json::Map<_, _>>(),
        "backend_default_errors": r
            .backend_defaults
            .iter()
            .map(|d| (d.backend.clone(), serde_json::json!(d.max_abs_err)))
            .collect::<serde_json::Map<_, _>>(),
        "plan_is_backend_default": r.backend_defaults.iter().find(|d| d.is_plan).map(|d| d.backend.clone()),
        "backend_default_precisions": r
            .backend_defaults
            .iter()
            .map(|d| (d.backend.clone(), serde_json::json!(d.precision)))
            .collect::<serde_json::Map<_, _>>(),
        "speedup_vs_best_default": r.speedup_vs_best_default(),
        "tuned_baseline": r.tuned().map(|(what, _)| what),
        "measured_tuned_us": r.tuned().map(|(_, us)| us),
        "speedup_vs_tuned": r.speedup_vs_tuned(),
        "regret": r.regret,
        "fastest_candidate": r.fastest_candidate,
        "regret_beyond_noise": r.regret_beyond_noise,
        "clearly_faster": r.clearly_faster,
        "prediction_error_blocks": r.prediction_error_blocks,
        "prediction_error_fast": r.prediction_error_fast.map(|(e, n)| serde_json::json!({"blocks": n, "error": e})),
        "blocks": r.blocks,
        "slow_blocks": r.slow_blocks,
        "measured_whole": r
            .measured_whole
            .iter()
            .map(|w| (w.pu.clone(), serde_json::json!(w.measured_us)))
            .collect::<serde_json::Map<_, _>>(),
        // per alternative: each block's median over the plan's
        "block_ratios": r
            .backend_defaults
            .iter()
            .filter(|d| !d.is_plan)
            .map(|d| (d.backend.clone(), serde_json::json!(d.block_ratios)))
            .chain(r.measured_whole.iter().map(|w| (w.pu.clone(), serde_json::json!(w.block_ratios))))
            .collect::<serde_json::Map<_, _>>(),
        "overhead_us_per_op": r.overhead_us_per_op,
        "compile_ms": r.compile_ms,
        "max_abs_err": r.max_abs_err,
        "tolerance": r.tolerance,
        "measured_on": r.measured_on,
    });
    match j {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// What `cargo xtask serve` did: every re-plan, and the latency in windows around it.
pub fn served(s: &bident_driver::Served, window: usize) {
    use bident_runtime::{Outcome, Via};
    let median = |v: &[f64]| if v.is_empty() { f64::NAN } else { bident_profile::quantile(&mut v.to_vec(), 0.5) };
    let n = s.latencies.len();
    println!(
        "served     {n} inferences, median {:.1} µs [measured]; re-planning with search `{}`",
        median(&s.latencies),
        s.search
    );
    if s.switches.is_empty() {
        println!("drift      none: no PU left its calibrated ratio of measured to predicted time for long");
    }
    let ops = |o: &[(String, u32)]| o.iter().map(|(pu, n)| format!("{n} on {pu}")).collect::<Vec<_>>().join(", ");
    for w in &s.switches {
        let from = w.detected_after + 1;
        let before = median(&s.latencies[from.saturating_sub(2 * window)..from.min(n)]);
        let how = match w.via {
            Via::Standby => "gave way at once to a standby:".to_string(),
            Via::Search if w.measured > 0 => format!("searched, {} runs measured whole first:", w.measured),
            Via::Search => "searched:".to_string(),
        };
        let seen = match w.factor < 1.0 {
            true => format!(
                "re-plan    {} recovered ({:.2}x its time after the drift) seen after inference {}: {how}",
                w.pu, w.factor, w.detected_after
            ),
            false => {
                format!(
                    "re-plan    drift on {} ({:.2}x) seen after inference {}: {how}",
                    w.pu, w.factor, w.detected_after
                )
            }
        };
        match w.outcome {
            Outcome::Swapped(k) if k >= n => println!(
                "{seen} new plan ({}), predicted {:.1} µs where the serving plan would take {:.1}, ready after serving ended",
                ops(&w.ops_per_pu),
                w.new_predicted_us,
                w.old_predicted_us
            ),
            Outcome::Swapped(k) => {
                let after = median(&s.latencies[k..(k + 2 * window).min(n)]);
                println!(
                    "{seen} new plan ({}) from inference {k}, predicted {:.1} µs where the serving plan would take {:.1}; \
                     median {before:.1} µs before, {after:.1} µs after{}",
                    ops(&w.ops_per_pu),
                    w.new_predicted_us,
                    w.old_predicted_us,
                    if after > before { " (slower than before it: the new plan's prediction missed)" } else { "" }
                )
            }
            Outcome::Kept(k) => println!(
                "{seen} the serving plan stays (predicted {:.1} µs; decided {})",
                w.new_predicted_us,
                if k < n { format!("before inference {k}") } else { "after serving ended".into() }
            ),
            Outcome::Pending => println!("{seen} still planning when serving ended"),
            Outcome::Failed(k, ref why) => println!(
                "{seen} failed ({why}); the serving plan stays ({})",
                if k < n { format!("from inference {k}") } else { "after serving ended".into() }
            ),
        }
    }
    let last = s.switches.iter().rev().find_map(|w| w.swapped_before().filter(|&k| k < n));
    if let (Some((plan, fresh)), Some(k)) = (&s.fresh, last) {
        let after = median(&s.latencies[k..(k + 2 * window).min(n)]);
        let placed = |p: &bident_search::Plan| p.steps.iter().map(|s| (s.op, s.pu.clone())).collect::<Vec<_>>();
        let same = if placed(plan) == placed(&s.plan) {
            "the plan serving at the end"
        } else {
            "not the plan serving at the end"
        };
        // the first window after the swap whose median is within RECOVERED of the fresh plan's
        let within = (k..n.saturating_sub(window - 1))
            .step_by(window)
            .find(|&j| median(&s.latencies[j..j + window]) <= RECOVERED * fresh)
            .map_or("never".to_string(), |j| format!("from inference {j}"));
        println!(
            "recovery   a fresh plan ({}; {same}: the profile re-priced by the injected slowdown, searched and \
             refined), served afresh with its PU slowed from the start: median {fresh:.1} µs; after the last swap \
             (inference {k}) windows of {window} served within {:.0}% of it {within}; the first {} inferences \
             {after:.1} µs, {:.2}x of it [measured]",
            plan.ops_per_pu.iter().map(|(pu, n)| format!("{n} on {pu}")).collect::<Vec<_>>().join(", "),
            (RECOVERED - 1.0) * 100.0,
            (k + 2 * window).min(n) - k,
            after / fresh
        );
    }
}

/// A served window within this of a fresh plan's latency has recovered (issue 17: 10%).
const RECOVERED: f64 = 1.10;
