//! Line charts as SVG, drawn here so the console needs no charting script: a time axis
//! over the window, a y axis from 0 to a round maximum, one polyline per series (a gap
//! where a series has no value), shaded spans behind them (panic mode), and a legend.
//! Colours are SVG presentation attributes, so the console's Content-Security-Policy can
//! forbid inline styles.

use std::fmt::Write as _;

/// Size of the drawing, in SVG user units (the page scales it to its box).
const W: f64 = 560.0;
const H: f64 = 180.0;
/// Margins: left for the y labels, bottom for the time labels, top for the legend.
const L: f64 = 44.0;
const R: f64 = 10.0;
const T: f64 = 22.0;
const B: f64 = 22.0;

/// One line.
#[derive(Clone, Debug)]
pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    /// (unix ms, value); None is a gap.
    pub points: Vec<(i64, Option<f64>)>,
    /// Dashed (a target or a reference line).
    pub dashed: bool,
}

/// A chart over `[from, to]` (unix ms).
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    pub id: &'a str,
    pub title: &'a str,
    /// Appended to the y labels (`ms`, `/s`).
    pub unit: &'a str,
    pub from: i64,
    pub to: i64,
    pub series: Vec<Series<'a>>,
    /// Spans (unix ms) shaded behind the lines, with their legend label.
    pub shaded: Vec<(i64, i64)>,
    pub shade_label: &'a str,
}

/// The smallest "round" number (1, 2 or 5 × 10ⁿ) at or above `v` (at least 1).
pub fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 1.0) {
        return 1.0;
    }
    let exp = v.log10().floor();
    let base = 10f64.powf(exp);
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * base >= v - 1e-9 {
            return m * base;
        }
    }
    10.0 * base
}

/// A value for an axis label: integers plainly, small numbers with one decimal.
fn label(v: f64) -> String {
    if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// HTML/XML text escaping.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Chart<'_> {
    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let span = (self.to - self.from).max(1) as f64;
        let max = nice_max(
            self.series
                .iter()
                .flat_map(|s| s.points.iter().filter_map(|p| p.1))
                .fold(0.0, f64::max),
        );
        let x = |t: i64| L + (W - L - R) * ((t - self.from) as f64 / span).clamp(0.0, 1.0);
        let y = |v: f64| T + (H - T - B) * (1.0 - (v / max).clamp(0.0, 1.0));
        let mut s = String::with_capacity(4096);
        let _ = write!(
            s,
            r#"<svg id="{id}" class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{title}"><title>{title}</title>"#,
            id = esc(self.id),
            title = esc(self.title)
        );
        for &(a, b) in &self.shaded {
            let (xa, xb) = (x(a), x(b));
            let _ = write!(
                s,
                r##"<rect class="shade" x="{xa:.1}" y="{T}" width="{w:.1}" height="{h}" fill="#f4b400" fill-opacity="0.18"/>"##,
                w = (xb - xa).max(1.0),
                h = H - T - B
            );
        }
        // Grid: 0, half and max; time ticks every 5 minutes back from now.
        for v in [0.0, max / 2.0, max] {
            let yy = y(v);
            let _ = write!(
                s,
                r##"<line x1="{L}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#d9dde3" stroke-width="1"/><text x="{tx}" y="{ty:.1}" text-anchor="end" font-size="10" fill="#5f6b7a">{v}{u}</text>"##,
                x2 = W - R,
                tx = L - 4.0,
                ty = yy + 3.5,
                v = label(v),
                u = esc(self.unit)
            );
        }
        let mut back = 0;
        while back * 60_000 <= self.to - self.from {
            let t = self.to - back * 60_000;
            let text = if back == 0 {
                "now".to_string()
            } else {
                format!("-{back}m")
            };
            let _ = write!(
                s,
                r##"<text x="{xx:.1}" y="{yy}" text-anchor="middle" font-size="10" fill="#5f6b7a">{text}</text>"##,
                xx = x(t),
                yy = H - 6.0
            );
            back += 5;
        }
        let mut lx = L;
        for series in &self.series {
            let last = series.points.iter().rev().find_map(|p| p.1);
            let _ = write!(
                s,
                r#"<g data-series="{label}" data-last="{last}">"#,
                label = esc(series.label),
                last = last.map_or_else(String::new, |v| format!("{v}"))
            );
            // One polyline per run of values (a gap ends a run).
            let mut run: Vec<String> = Vec::new();
            let flush = |run: &mut Vec<String>, s: &mut String| {
                if run.len() == 1 {
                    // A lone point: a short tick so it shows.
                    run.push(run[0].clone());
                }
                if !run.is_empty() {
                    let _ = write!(
                        s,
                        r#"<polyline fill="none" stroke="{c}" stroke-width="1.8"{dash} points="{p}"/>"#,
                        c = series.color,
                        dash = if series.dashed {
                            r#" stroke-dasharray="4 3""#
                        } else {
                            ""
                        },
                        p = run.join(" ")
                    );
                }
                run.clear();
            };
            for &(t, v) in &series.points {
                match v {
                    Some(v) => run.push(format!("{:.1},{:.1}", x(t), y(v))),
                    None => flush(&mut run, &mut s),
                }
            }
            flush(&mut run, &mut s);
            s.push_str("</g>");
            // Legend entry.
            let _ = write!(
                s,
                r##"<rect x="{lx:.1}" y="6" width="10" height="3" fill="{c}"/><text x="{tx:.1}" y="11" font-size="10" fill="#28323d">{l}{v}</text>"##,
                c = series.color,
                tx = lx + 13.0,
                l = esc(series.label),
                v = last.map_or_else(String::new, |v| format!(
                    " {}{}",
                    label_value(v),
                    esc(self.unit)
                ))
            );
            lx += 13.0 + 6.5 * (series.label.len() as f64 + 8.0);
        }
        if !self.shaded.is_empty() {
            let _ = write!(
                s,
                r##"<rect x="{lx:.1}" y="3" width="10" height="9" fill="#f4b400" fill-opacity="0.35"/><text x="{tx:.1}" y="11" font-size="10" fill="#28323d">{l}</text>"##,
                tx = lx + 13.0,
                l = esc(self.shade_label)
            );
        }
        s.push_str("</svg>");
        s
    }
}

/// A current value in a legend (two significant decimals at most).
fn label_value(v: f64) -> String {
    // Whole numbers, and anything large enough that decimals are noise, without them.
    if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The spans during which `flag` held, from a series of (t, flag) samples `step` apart.
pub fn spans(samples: &[(i64, bool)], step: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &(t, on) in samples {
        if !on {
            continue;
        }
        match out.last_mut() {
            Some(last) if t - last.1 <= step => last.1 = t,
            _ => out.push((t, t)),
        }
    }
    // A span covers its last sample's period too.
    for s in &mut out {
        s.1 += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_maxima() {
        for (v, want) in [
            (0.0, 1.0),
            (0.4, 1.0),
            (1.0, 1.0),
            (1.2, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (10.0, 10.0),
            (11.0, 20.0),
            (180.0, 200.0),
            (501.0, 1000.0),
            (f64::NAN, 1.0),
        ] {
            assert_eq!(nice_max(v), want, "{v}");
        }
    }

    #[test]
    fn panic_spans_join_consecutive_samples() {
        let samples = [
            (0, false),
            (2000, true),
            (4000, true),
            (6000, false),
            (8000, true),
        ];
        assert_eq!(spans(&samples, 2000), [(2000, 6000), (8000, 10_000)]);
        assert!(spans(&[(0, false)], 2000).is_empty());
    }

    #[test]
    fn svg_has_lines_gaps_shading_and_last_values() {
        let chart = Chart {
            id: "chart-replicas",
            title: "Replicas <actual & desired>",
            unit: "",
            from: 0,
            to: 900_000,
            series: vec![
                Series {
                    label: "actual",
                    color: "#1a73e8",
                    points: vec![(0, Some(0.0)), (450_000, Some(2.0)), (900_000, Some(4.0))],
                    dashed: false,
                },
                Series {
                    label: "desired",
                    color: "#d93025",
                    points: vec![(0, Some(1.0)), (450_000, None), (900_000, Some(4.0))],
                    dashed: true,
                },
            ],
            shaded: vec![(450_000, 900_000)],
            shade_label: "panic",
        };
        let svg = chart.svg();
        assert!(
            svg.starts_with(r#"<svg id="chart-replicas" class="chart""#),
            "{svg}"
        );
        assert!(
            svg.contains("Replicas &lt;actual &amp; desired&gt;"),
            "titles are escaped"
        );
        // Max 4 → axis to 5; x from 44 to 550; y from 158 (0) to 22 (5).
        assert!(
            svg.contains(r#"points="44.0,158.0 297.0,103.6 550.0,49.2""#),
            "{svg}"
        );
        assert!(svg.contains(r#"<g data-series="actual" data-last="4">"#));
        // The gap splits desired into two runs (each a lone point, drawn as a tick).
        assert_eq!(svg.matches("stroke-dasharray").count(), 2);
        assert!(svg.contains(r#"<rect class="shade" x="297.0""#));
        for t in ["now", "-5m", "-10m", "-15m"] {
            assert!(svg.contains(&format!(">{t}</text>")), "{t}");
        }
        assert!(svg.ends_with("</svg>"));
        assert!(!svg.contains("style="), "no inline styles (CSP)");
    }
}
