//! The virtual `lunar-lake` SoC against the paper's published observations
//! (`tests/data/observations/*.yaml`): every figure here is simulated. Each case renders its
//! reproduction table (model against paper) as a snapshot, then asserts the paper's claims.

use std::collections::BTreeMap;
use std::fmt::Write;

use bident_profile::simulate::{VirtualSoc, simulate};
use bident_tests::{cases, read_case};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    soc: String,
    tolerance: f64,
    #[serde(default)]
    probes: Vec<Probe>,
    /// `contention[run][interferer]`: quoted slowdown factors.
    #[serde(default)]
    contention: BTreeMap<String, BTreeMap<String, f64>>,
    /// Largest slowdown the PUs of `negligible_for` may suffer from any other PU.
    negligible: Option<f64>,
    #[serde(default)]
    negligible_for: Vec<String>,
    /// PUs by sustained power, highest first.
    #[serde(default)]
    power_order: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Probe {
    /// A zoo probe model (`probe-<op>-<dtype>-<n>`).
    probe: String,
    fastest: String,
    /// Time on a PU over the fastest PU's time, as the paper quotes it.
    #[serde(default)]
    ratios: BTreeMap<String, f64>,
    #[serde(default)]
    slower: Vec<String>,
}

#[test]
fn virtual_soc_reproduces_the_paper() {
    for (name, path) in cases("observations") {
        let case: Case = read_case(&path);
        let mut failures = vec![];
        let table = check(&case, &mut failures);
        insta::assert_snapshot!(format!("observations-{name}"), table);
        assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
    }
}

/// The reproduction table of a case (Markdown); every claim that does not hold goes to `failures`.
fn check(case: &Case, failures: &mut Vec<String>) -> String {
    let soc = VirtualSoc::preset(&case.soc).unwrap_or_else(|| panic!("no virtual SoC `{}`", case.soc));
    let pus: Vec<&str> = soc.spec.pus.iter().map(|p| p.name.as_str()).collect();
    let index = |pu: &str| pus.iter().position(|p| *p == pu).unwrap_or_else(|| panic!("no PU `{pu}`"));
    let within = |got: f64, want: f64| (got / want - 1.0).abs() <= case.tolerance;
    let mut out = String::new();
    if !case.probes.is_empty() {
        let _ = writeln!(out, "simulated on {}: dispatch + execution, µs", case.soc);
        let _ = writeln!(out, "| probe | {} | fastest (paper / model) | ratios, paper / model |", pus.join(" | "));
        let _ = writeln!(out, "|---|{}---|---|", "---|".repeat(pus.len()));
    }
    for p in &case.probes {
        let bytes = bident_zoo::build_bytes(&p.probe, 0).unwrap_or_else(|| panic!("no zoo model {}", p.probe));
        let g = bident_ir::import_bytes(&bytes, &format!("{}.onnx", p.probe), None, &Default::default())
            .unwrap_or_else(|e| panic!("{}: {e}", p.probe));
        let t = simulate(&g, &soc).unwrap_or_else(|e| panic!("{}: {e}", p.probe));
        // the probe's time on each PU: every op there (None if one cannot run there)
        let time: Vec<Option<f64>> = (0..pus.len())
            .map(|j| (0..g.ops.len()).map(|i| t.cost(i as u32, j).map(|c| c.weight_us())).sum())
            .collect();
        let best = (0..pus.len())
            .filter(|&j| time[j].is_some())
            .min_by(|&a, &b| time[a].partial_cmp(&time[b]).expect("finite"))
            .map_or("-", |j| pus[j]);
        if best != p.fastest {
            failures.push(format!("{}: fastest is {best}, the paper says {}", p.probe, p.fastest));
        }
        let fastest = time[index(&p.fastest)].unwrap_or(f64::NAN);
        let mut ratios = vec![];
        for (pu, &want) in &p.ratios {
            let got = time[index(pu)].map_or(f64::NAN, |t| t / fastest);
            ratios.push(format!("{pu} {want:.2} / {got:.2}"));
            if !within(got, want) {
                failures.push(format!(
                    "{}: {pu} / {} = {got:.2}, the paper says {want} (±{})",
                    p.probe, p.fastest, case.tolerance
                ));
            }
        }
        for pu in &p.slower {
            let got = time[index(pu)].map_or(f64::NAN, |t| t / fastest);
            ratios.push(format!("{pu} >1 / {got:.2}"));
            if got.is_nan() || got <= 1.0 {
                failures.push(format!("{}: {pu} is not slower than {}", p.probe, p.fastest));
            }
        }
        let cells: Vec<String> = time.iter().map(|t| t.map_or("-".into(), |t| format!("{t:.1}"))).collect();
        let _ =
            writeln!(out, "| {} | {} | {} / {best} | {} |", p.probe, cells.join(" | "), p.fastest, ratios.join(", "));
    }
    for (run, by) in &case.contention {
        for (other, &want) in by {
            let got = soc.contention[index(run)][index(other)];
            let _ = writeln!(out, "SF({run} | {other} busy): paper {want}, model {got}");
            if !within(got, want) {
                failures.push(format!("SF({run} | {other}) = {got}, the paper says {want}"));
            }
        }
    }
    if let Some(limit) = case.negligible {
        for run in &case.negligible_for {
            let worst = soc.contention[index(run)].iter().copied().fold(1.0, f64::max);
            let _ = writeln!(out, "worst SF({run} | any): model {worst} (negligible: <= {limit})");
            if worst > limit {
                failures.push(format!("{run} is slowed {worst}x by another PU; the paper calls it negligible"));
            }
        }
    }
    if !case.power_order.is_empty() {
        let watts: Vec<f64> = case.power_order.iter().map(|pu| soc.pus[index(pu)].power_w).collect();
        let _ = writeln!(out, "power, highest first: {} = {watts:?} W", case.power_order.join(" > "));
        if watts.windows(2).any(|w| w[0] <= w[1]) {
            failures.push(format!("power is not ordered {}: {watts:?}", case.power_order.join(" > ")));
        }
    }
    out
}
