//! Small SVG charts for reports: a heatmap, grouped bars and a log-log line chart. Plain SVG
//! text (like the runtime's Gantt chart), so nothing depends on fonts at build time.

use std::fmt::Write as _;

const PALETTE: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

use bident_runtime::trace::xml_text as esc;

fn open(s: &mut String, w: f64, h: f64, title: &str) {
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
}

/// A symmetric matrix of values (None: empty cell) with row and column labels; colour from
/// the log of the value (below 1 red, 1 white, above 1 blue), the value written in each cell.
pub fn heatmap(title: &str, labels: &[String], m: &[Vec<Option<f64>>]) -> String {
    let n = labels.len();
    let cell = 34.0;
    let (left, top) = (130.0, 130.0);
    let (w, h) = (left + cell * n as f64 + 20.0, top + cell * n as f64 + 20.0);
    let mut s = String::new();
    open(&mut s, w, h, title);
    let hi = m.iter().flatten().flatten().map(|v| v.ln().abs()).fold(1e-9, f64::max);
    for (i, row) in m.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let (x, y) = (left + cell * j as f64, top + cell * i as f64);
            let Some(v) = v else { continue };
            let t = (v.ln() / hi).clamp(-1.0, 1.0);
            let (r, g, b) = if t >= 0.0 {
                (255.0 * (1.0 - t), 255.0 * (1.0 - 0.6 * t), 255.0)
            } else {
                (255.0, 255.0 * (1.0 + t), 255.0 * (1.0 + t))
            };
            let _ = write!(
                s,
                r##"<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="rgb({:.0},{:.0},{:.0})" stroke="#ccc"><title>{} + {}: {v:.2}x</title></rect><text x="{}" y="{}" font-size="9" text-anchor="middle">{v:.1}</text>"##,
                r,
                g,
                b,
                esc(&labels[i]),
                esc(&labels[j]),
                x + cell / 2.0,
                y + cell / 2.0 + 3.0
            );
        }
    }
    for (k, l) in labels.iter().enumerate() {
        let c = cell * k as f64 + cell / 2.0;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text><text transform="translate({},{}) rotate(-60)" text-anchor="start">{}</text>"#,
            left - 4.0,
            top + c + 3.0,
            esc(l),
            left + c,
            top - 6.0,
            esc(l)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Grouped bars: one group per label, one bar per series, a dashed line at 1.
pub fn bars(title: &str, series: &[&str], groups: &[(String, Vec<f64>)]) -> String {
    let (left, top, plot_h) = (60.0, 50.0, 260.0);
    let group_w = 16.0 * series.len() as f64 + 14.0;
    let w = left + group_w * groups.len() as f64 + 20.0;
    let h = top + plot_h + 130.0;
    let max = groups.iter().flat_map(|g| g.1.iter().copied()).fold(1.0f64, f64::max) * 1.1;
    let y = |v: f64| top + plot_h * (1.0 - v / max);
    let mut s = String::new();
    open(&mut s, w.max(420.0), h, title);
    for (k, name) in series.iter().enumerate() {
        let _ = write!(
            s,
            r#"<rect x="{}" y="32" width="10" height="10" fill="{}"/><text x="{}" y="41">{}</text>"#,
            left + 130.0 * k as f64,
            PALETTE[k % PALETTE.len()],
            left + 14.0 + 130.0 * k as f64,
            esc(name)
        );
    }
    for (g, (label, values)) in groups.iter().enumerate() {
        let x0 = left + group_w * g as f64 + 7.0;
        for (k, &v) in values.iter().enumerate() {
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="14" height="{:.1}" fill="{}"><title>{}: {}: {v:.3}</title></rect>"#,
                x0 + 16.0 * k as f64,
                y(v),
                (top + plot_h - y(v)).max(0.0),
                PALETTE[k % PALETTE.len()],
                esc(label),
                esc(series.get(k).copied().unwrap_or(""))
            );
        }
        let _ = write!(
            s,
            r#"<text transform="translate({:.1},{}) rotate(-60)" text-anchor="end">{}</text>"#,
            x0 + group_w / 2.0,
            top + plot_h + 12.0,
            esc(label)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{1:.1}" y2="{1:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{2}" y="{3:.1}" text-anchor="end">1.0</text><line x1="{left}" x2="{left}" y1="{top}" y2="{4}" stroke="#333"/>"##,
        w - 20.0,
        y(1.0),
        left - 4.0,
        y(1.0) + 4.0,
        top + plot_h
    );
    s.push_str("</svg>\n");
    s
}

/// Lines on log-log axes: (name, points).
pub fn loglog(title: &str, xlabel: &str, ylabel: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (left, top, pw, ph) = (70.0, 40.0, 560.0, 340.0);
    let pts = series.iter().flat_map(|s| s.1.iter().copied()).filter(|p| p.0 > 0.0 && p.1 > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, 0.0f64, f64::INFINITY, 0.0f64);
    for (x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (1.0, 10.0, 1.0, 10.0);
    }
    let (lx0, lx1) = (x0.log10().floor(), x1.log10().ceil().max(x0.log10().floor() + 1.0));
    let (ly0, ly1) = (y0.log10().floor(), y1.log10().ceil().max(y0.log10().floor() + 1.0));
    let sx = |x: f64| left + pw * (x.log10() - lx0) / (lx1 - lx0);
    let sy = |y: f64| top + ph * (1.0 - (y.log10() - ly0) / (ly1 - ly0));
    let mut s = String::new();
    open(&mut s, left + pw + 200.0, top + ph + 50.0, title);
    let _ = write!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    for e in lx0 as i32..=lx1 as i32 {
        let x = sx(10f64.powi(e));
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">1e{e}</text>"##,
            top + ph,
            top + ph + 14.0
        );
    }
    for e in ly0 as i32..=ly1 as i32 {
        let y = sy(10f64.powi(e));
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">1e{e}</text>"##,
            left + pw,
            left - 4.0,
            y + 4.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + 34.0,
        esc(xlabel),
        top + ph / 2.0,
        esc(ylabel)
    );
    for (k, (name, points)) in series.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let dash = if k >= PALETTE.len() / 2 { r#" stroke-dasharray="5 3""# } else { "" };
        let path: Vec<String> = points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        let ly = top + 14.0 * k as f64 + 10.0;
        let _ = write!(
            s,
            r#"<line x1="{0}" x2="{1}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{2}" y="{3}">{4}</text>"#,
            left + pw + 10.0,
            left + pw + 30.0,
            left + pw + 34.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
