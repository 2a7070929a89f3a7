//! What ran where: a run report drawn as a Chrome trace (opens in Perfetto or chrome://tracing)
//! and as an SVG Gantt chart, one row per PU, the plan's prediction above the measurement.

use std::fmt::Write;

use crate::RunReport;

/// Chrome trace-event JSON: process 1 is the prediction, process 2 the measured run (the run
/// whose latency was the median), one thread per PU.
pub fn chrome_trace(r: &RunReport) -> String {
    let mut events = vec![];
    let labels =
        [(1, format!("predicted ({} cost model)", r.soc)), (2, format!("measured on {} (median run)", r.measured_on))];
    for (pid, label) in &labels {
        events.push(serde_json::json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}}));
        for tid in 0..r.pus.len() {
            let pu = r.pu_label(tid);
            events.push(
                serde_json::json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": pu}}),
            );
        }
    }
    for o in &r.ops {
        let tid = r.pus.iter().position(|p| p == &o.pu).unwrap_or(0);
        let model = r.models.get(o.model as usize).map_or("?", String::as_str);
        for (pid, (start, finish)) in
            [(1, (o.predicted_start_us, o.predicted_finish_us)), (2, (o.measured_start_us, o.measured_finish_us))]
        {
            events.push(serde_json::json!({
                "ph": "X", "pid": pid, "tid": tid, "name": o.name, "cat": model,
                "ts": start, "dur": (finish - start).max(0.0),
                "args": {"ops": o.ops, "model": model, "predicted_us": o.predicted_us(), "measured_median_us": o.measured_us},
            }));
        }
    }
    serde_json::json!({"traceEvents": events, "displayTimeUnit": "ns"}).to_string()
}

fn ops_label(ops: &[u32]) -> String {
    match ops {
        [] => "whole model".into(),
        [op] => format!("op {op}"),
        [first, .., last] => format!("ops {first}..{last}"),
    }
}

/// What fits on a bar: `3` or `3-7`.
fn short_label(ops: &[u32]) -> String {
    match ops {
        [] => "all".into(),
        [op] => op.to_string(),
        [first, .., last] => format!("{first}-{last}"),
    }
}

const WIDTH: f64 = 1100.0;
/// Room for the PU labels, at least; a longer label (`core1 (onnxruntime)`) widens it.
const LEFT: f64 = 110.0;
const ROW: f64 = 26.0;
/// Bar colours per model (stream).
const COLOURS: [[&str; 2]; 2] = [["#4e79a7", "#a0cbe8"], ["#f28e2b", "#ffbe7d"]];

fn esc(s: &str) -> String {
    xml_text(s)
}

/// `s` as XML text or attribute value: markup characters as entities, and the control
/// characters XML 1.0 forbids (every one but tab, newline and return) written out as `\u{..}`,
/// so a name holding one still gives a well-formed SVG.
pub fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// A round step for about `n` ticks over `0..max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag)
}

/// An SVG Gantt chart: per PU, the predicted timeline and the measured one on one time axis.
pub fn gantt_svg(r: &RunReport) -> String {
    let chart = Gantt::of(r);
    let mut s = String::new();
    chart.header(&mut s, r);
    for (k, label) in ["predicted", "measured (median run)"].iter().enumerate() {
        chart.panel(&mut s, r, k, label);
    }
    chart.axis(&mut s);
    s.push_str("</svg>\n");
    s
}

/// Where a Gantt chart's parts sit: the plot's left edge and width (px), the time its axis ends
/// at (µs), and where the panels start and how tall each is (px).
struct Gantt {
    left: f64,
    plot: f64,
    end: f64,
    top: f64,
    panel_h: f64,
}

impl Gantt {
    fn of(r: &RunReport) -> Self {
        let end = r
            .ops
            .iter()
            .flat_map(|o| [o.predicted_finish_us, o.measured_finish_us])
            .chain([r.predicted_us, r.measured_us])
            // a non-finite time (a corrupt report) must not stretch the axis or its tick loop
            .filter(|t| t.is_finite())
            .fold(1.0, f64::max);
        // about 6.5 px per character at font size 11
        let widest = (0..r.pus.len()).map(|i| r.pu_label(i).chars().count()).max().unwrap_or(0);
        let left = LEFT.max(20.0 + 6.5 * widest as f64);
        let plot = WIDTH - left - 20.0;
        Self { left, plot, end, top: 58.0, panel_h: ROW * r.pus.len() as f64 + 30.0 }
    }

    /// Where time `us` sits on the plot.
    fn x(&self, us: f64) -> f64 {
        self.left + us / self.end * self.plot
    }

    /// The SVG's opening, its background, and the title and subtitle.
    fn header(&self, s: &mut String, r: &RunReport) {
        let height = self.top + self.panel_h * 2.0 + 50.0;
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
        );
        let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let title = format!(
            "{} on {} ({} schedule): predicted {:.1} µs, measured {:.1} µs (p10 {:.1}, p90 {:.1})",
            r.models.join(" + "),
            r.soc,
            r.schedule,
            r.predicted_us,
            r.measured_us,
            r.measured_p10_us,
            r.measured_p90_us
        );
        let _ = write!(s, r#"<text x="10" y="18" font-size="13" font-weight="bold">{}</text>"#, esc(&title));
        let sub = format!("measured on {}, {}; {} runs after {} warm-up", r.measured_on, r.backend, r.runs, r.warmup);
        let _ = write!(s, r##"<text x="10" y="36" fill="#555">{}</text>"##, esc(&sub));
    }

    /// Panel `k`: the prediction (0) or the measurement (1), one row per PU.
    fn panel(&self, s: &mut String, r: &RunReport, k: usize, label: &str) {
        let y0 = self.top + self.panel_h * k as f64;
        let _ = write!(s, r#"<text x="10" y="{}" font-weight="bold">{label}</text>"#, y0 + 12.0);
        for row in 0..r.pus.len() {
            self.row(s, r, row, y0 + 20.0 + ROW * row as f64, k == 1);
        }
    }

    /// PU `row`'s row at height `y`: its label and a bar per task on it, predicted or
    /// `measured`.
    fn row(&self, s: &mut String, r: &RunReport, row: usize, y: f64, measured: bool) {
        let (left, plot) = (self.left, self.plot);
        let _ = write!(
            s,
            r##"<rect x="{left}" y="{y}" width="{plot}" height="{}" fill="#f4f4f4"/><text x="10" y="{}">{}</text>"##,
            ROW - 4.0,
            y + ROW / 2.0 + 2.0,
            esc(&r.pu_label(row))
        );
        for (k, o) in r.ops.iter().enumerate().filter(|(_, o)| o.pu == r.pus[row]) {
            let (a, b) = if measured {
                (o.measured_start_us, o.measured_finish_us)
            } else {
                (o.predicted_start_us, o.predicted_finish_us)
            };
            let w = (self.x(b) - self.x(a)).max(0.5);
            let colour = COLOURS[(o.model as usize).min(1)][k % 2];
            let tip = format!(
                "{} {} `{}` on {}: {:.1}..{:.1} µs (predicted {:.1} µs, measured median {:.1} µs)",
                r.models.get(o.model as usize).map_or("?", String::as_str),
                ops_label(&o.ops),
                o.name,
                r.pu_label(row),
                a,
                b,
                o.predicted_us(),
                o.measured_us
            );
            let _ = write!(
                s,
                r##"<rect x="{:.2}" y="{y}" width="{w:.2}" height="{}" fill="{colour}" stroke="#333" stroke-width="0.3"><title>{}</title></rect>"##,
                self.x(a),
                ROW - 4.0,
                esc(&tip)
            );
            if w > 18.0 {
                let _ = write!(
                    s,
                    r#"<text x="{:.2}" y="{}" font-size="9" text-anchor="middle" pointer-events="none">{}</text>"#,
                    self.x(a) + w / 2.0,
                    y + ROW / 2.0 + 1.0,
                    short_label(&o.ops)
                );
            }
        }
    }

    /// The time axis under the panels, its ticks and its caption.
    fn axis(&self, s: &mut String) {
        let (left, plot, end) = (self.left, self.plot, self.end);
        let axis_y = self.top + self.panel_h * 2.0 + 4.0;
        let _ = write!(s, r##"<line x1="{left}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333"/>"##, left + plot);
        let step = tick_step(end, 8.0);
        // tick_step gives at most ~10 ticks; the bound keeps any float surprise from looping on
        for k in 0..=((end / step + 1e-9).floor() as usize).min(100) {
            let t = k as f64 * step;
            let _ = write!(
                s,
                r##"<line x1="{0:.2}" y1="{axis_y}" x2="{0:.2}" y2="{1}" stroke="#333"/><text x="{0:.2}" y="{2}" text-anchor="middle">{3}</text>"##,
                self.x(t),
                axis_y + 4.0,
                axis_y + 16.0,
                t
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">µs from the start of the inference</text>"#,
            left + plot / 2.0,
            axis_y + 32.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpTiming;

    fn report() -> RunReport {
        let op = |model, op, pu: &str, p: (f64, f64), m: (f64, f64)| OpTiming {
            model,
            ops: vec![op],
            name: format!("op<{op}>"),
            pu: pu.into(),
            predicted_start_us: p.0,
            predicted_finish_us: p.1,
            measured_start_us: m.0,
            measured_finish_us: m.1,
            measured_us: m.1 - m.0,
        };
        RunReport {
            models: vec!["a".into(), "b".into()],
            soc: "cores".into(),
            pus: vec!["core0".into(), "core1".into()],
            pu_backends: vec!["openvino".into(), "onnxruntime".into()],
            simulated: false,
            measured_on: "test".into(),
            backend: "none".into(),
            schedule: "concurrent".into(),
            warmup: 1,
            runs: 3,
            compile_ms: 1.0,
            predicted_us: 30.0,
            measured_us: 33.0,
            measured_p10_us: 32.0,
            measured_p90_us: 35.0,
            prediction_error: 0.1,
            prediction_error_blocks: [0.05, 0.1, 0.2],
            prediction_error_fast: Some(([0.04, 0.08, 0.15], 8)),
            regret: 0.0,
            fastest_candidate: "CPU".into(),
            regret_beyond_noise: 0.0,
            clearly_faster: None,
            best_single_pu: vec!["core0".into(), "core0".into()],
            measured_best_single_pu_us: 50.0,
            backend_default: "CPU".into(),
            measured_backend_default_us: 40.0,
            backend_defaults: vec![],
            measured_whole: vec![],
            blocks: 2,
            slow_blocks: 0,
            overhead_us_per_op: 1.0,
            max_abs_err: 0.0,
            tolerance: String::new(),
            ops: vec![
                op(0, 0, "core0", (0.0, 10.0), (0.0, 11.0)),
                op(1, 0, "core1", (0.0, 20.0), (0.5, 22.0)),
                op(0, 1, "core0", (10.0, 30.0), (11.0, 33.0)),
            ],
        }
    }

    #[test]
    fn chrome_trace_has_every_op_twice_with_names_escaped() {
        let t: serde_json::Value = serde_json::from_str(&chrome_trace(&report())).expect("valid JSON");
        let events = t["traceEvents"].as_array().expect("events");
        let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(spans.len(), 6);
        let measured = spans.iter().find(|e| e["pid"] == 2 && e["tid"] == 1).expect("b on core1");
        assert_eq!((measured["ts"].as_f64(), measured["dur"].as_f64()), (Some(0.5), Some(21.5)));
        assert_eq!(measured["cat"], "b");
        let thread = events.iter().find(|e| e["ph"] == "M" && e["pid"] == 2 && e["tid"] == 1).expect("thread name");
        assert_eq!(thread["args"]["name"], "core1 (onnxruntime)");
    }

    #[test]
    fn gantt_draws_one_bar_per_op_and_panel() {
        let svg = gantt_svg(&report());
        assert_eq!(svg.matches("<rect x=").count(), 2 * 2 + 2 * 3, "4 row backgrounds, 6 bars");
        assert!(svg.contains("op&lt;1&gt;") && !svg.contains("op<1>"));
        assert!(svg.contains(">core1 (onnxruntime)</text>"), "{svg}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn control_characters_never_reach_the_svg() {
        let mut r = report();
        r.ops[0].name = "a\u{1b}[2J\u{0}b\u{85}".into();
        let svg = gantt_svg(&r);
        assert!(!svg.chars().any(|c| c.is_control() && c != '\n'), "{svg}");
        assert!(svg.contains(r"a\u{1b}[2J\u{0}b\u{85}"), "{svg}");
    }
}
