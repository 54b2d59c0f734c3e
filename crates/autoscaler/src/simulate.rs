//! The library behind `wisp autoscale simulate`: replay a load trace through the real
//! windows, decider and scaler with a simple pod model, and render what happened.
//!
//! The model, one second at a time:
//! - the load (concurrency or RPS, per the spec's metric) holds each trace row's value until
//!   the next row;
//! - that load is recorded into the metric windows whenever something would report it:
//!   ready pods (scraped, unless TBC = -1) or the activator (while load > 0);
//! - the decider ticks every 2 s, and immediately when load arrives while the desired scale
//!   is 0 (Knative's "poke" on the activator's first stat);
//! - the scaler reconciles every second (standing in for Knative's watches and re-enqueue
//!   timers) and its replica changes take effect at once: new pods are ready
//!   `ready_delay` later, removed pods (youngest first) vanish immediately.
//!
//! The load is demand, not served traffic: with the activator buffering, clients' in-flight
//! requests are observed whether or not pods are ready yet. Pod stats are not sampled
//! (Knative scrapes at most 16 pods and extrapolates); the observed value is the exact total.
//! With TBC = -1 nothing is scraped and the activator stops reporting an idle revision, so
//! the stable average holds its last level until a whole window of silence has passed.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::decider::{Autoscaler, TICK, initial_excess_burst_capacity};
use crate::scaler::{ActiveState, SCALE_UNKNOWN, ScaleInput, Scaler};
use crate::targets::{DeciderSpec, activation_timeout};

/// A load trace: `(seconds, value)` rows, seconds non-decreasing, values ≥ 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    rows: Vec<(f64, f64)>,
}

/// Why a trace was rejected; line numbers are 1-based.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: expected `seconds,value`, found {text:?}")]
    Malformed { line: usize, text: String },
    #[error("line {line}: seconds {text:?} is not a number")]
    BadSeconds { line: usize, text: String },
    #[error("line {line}: value {text:?} is not a number")]
    BadValue { line: usize, text: String },
    #[error("line {line}: seconds must be finite and ≥ 0, found {seconds}")]
    NegativeSeconds { line: usize, seconds: f64 },
    #[error("line {line}: value must be finite and ≥ 0, found {value}")]
    NegativeValue { line: usize, value: f64 },
    #[error("line {line}: seconds {seconds} is before the previous row's {previous}")]
    Decreasing {
        line: usize,
        seconds: f64,
        previous: f64,
    },
    #[error("the trace has no rows")]
    Empty,
}

impl Trace {
    /// Parses CSV rows `seconds,value`. Blank lines and lines starting with `#` are ignored,
    /// and so is a header line whose first field is `seconds` before the first row.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut rows: Vec<(usize, f64, f64)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = trimmed.split(',').map(str::trim).collect();
            if rows.is_empty() && fields[0].eq_ignore_ascii_case("seconds") {
                continue;
            }
            let [secs, value] = fields[..] else {
                return Err(TraceError::Malformed {
                    line,
                    text: raw.to_string(),
                });
            };
            let seconds: f64 = secs.parse().map_err(|_| TraceError::BadSeconds {
                line,
                text: secs.to_string(),
            })?;
            let value: f64 = value.parse().map_err(|_| TraceError::BadValue {
                line,
                text: value.to_string(),
            })?;
            rows.push((line, seconds, value));
        }
        Trace::validate(rows)
    }

    /// A trace from rows (line numbers in errors are row numbers).
    pub fn from_rows(rows: &[(f64, f64)]) -> Result<Trace, TraceError> {
        Trace::validate(
            rows.iter()
                .enumerate()
                .map(|(i, &(s, v))| (i + 1, s, v))
                .collect(),
        )
    }

    fn validate(rows: Vec<(usize, f64, f64)>) -> Result<Trace, TraceError> {
        let mut previous: Option<f64> = None;
        for &(line, seconds, value) in &rows {
            if !seconds.is_finite() || seconds < 0.0 {
                return Err(TraceError::NegativeSeconds { line, seconds });
            }
            if !value.is_finite() || value < 0.0 {
                return Err(TraceError::NegativeValue { line, value });
            }
            if let Some(previous) = previous
                && seconds < previous
            {
                return Err(TraceError::Decreasing {
                    line,
                    seconds,
                    previous,
                });
            }
            previous = Some(seconds);
        }
        if rows.is_empty() {
            return Err(TraceError::Empty);
        }
        Ok(Trace {
            rows: rows.into_iter().map(|(_, s, v)| (s, v)).collect(),
        })
    }

    /// The rows.
    pub fn rows(&self) -> &[(f64, f64)] {
        &self.rows
    }

    /// The load at `seconds`: the last row at or before it (0 before the first row).
    pub fn value_at(&self, seconds: f64) -> f64 {
        let n = self.rows.partition_point(|&(s, _)| s <= seconds);
        if n == 0 { 0.0 } else { self.rows[n - 1].1 }
    }

    /// The last row's time.
    pub fn end(&self) -> f64 {
        self.rows.last().map_or(0.0, |r| r.0)
    }
}

/// Simulation knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// Time from asking for a pod to it being ready (default 2 s).
    pub ready_delay: Duration,
    /// How long to simulate; default: up to the trace's last row.
    pub duration: Option<Duration>,
    /// Progress deadline + 30 s (default 630 s).
    pub activation_timeout: Duration,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            ready_delay: Duration::from_secs(2),
            duration: None,
            activation_timeout: activation_timeout(Duration::from_secs(600)),
        }
    }
}

/// One row per decider tick (every 2 s).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimRow {
    /// Seconds since the start.
    pub time: u64,
    pub load: f64,
    /// This tick's observed averages; `None` when there was no decision (no data).
    pub observed_stable: Option<f64>,
    pub observed_panic: Option<f64>,
    /// The decider's desired scale (-1 until the first decision).
    pub desired: i32,
    /// The scale target's replicas after this tick's reconcile.
    pub replicas: u32,
    /// Ready pods at this tick.
    pub ready: u32,
    pub panic_mode: bool,
    pub excess_burst_capacity: i32,
    pub active: ActiveState,
    pub activator_in_path: bool,
}

/// A finished simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    pub spec: DeciderSpec,
    pub rows: Vec<SimRow>,
}

/// Runs `trace` through `spec`'s KPA (see the module doc for the model).
pub fn simulate(spec: &DeciderSpec, trace: &Trace, opts: &SimOptions) -> Simulation {
    let end = opts
        .duration
        .map_or_else(|| trace.end().ceil() as u64, |d| d.as_secs());
    let tick_secs = TICK.as_secs();

    let mut autoscaler = Autoscaler::new(spec.clone());
    let mut scaler = Scaler::new(Duration::ZERO, opts.activation_timeout);
    // The scale target is created with initial-scale replicas.
    let mut replicas = u32::try_from(spec.initial_scale).unwrap_or(0);
    let mut pods: Vec<Duration> = vec![opts.ready_delay; replicas as usize];
    let mut desired = SCALE_UNKNOWN;
    let mut ebc = initial_excess_burst_capacity(spec);
    let mut panic_mode = false;
    let mut rows = Vec::new();

    for t in 0..=end {
        let now = Duration::from_secs(t);
        let ready = pods.iter().filter(|&&r| r <= now).count() as u32;
        let load = trace.value_at(t as f64);
        // Pods are scraped when ready (not at all with TBC = -1); the activator reports
        // only while it carries requests.
        if load > 0.0 || (ready > 0 && spec.scrapes_pods()) {
            autoscaler.record(now, load);
        }

        let on_tick = t % tick_secs == 0;
        let poke = load > 0.0 && desired == 0;
        let mut decision = None;
        if on_tick || poke {
            // No data ⇒ Knative keeps the previous decision.
            decision = autoscaler.tick(now, ready);
            if let Some(d) = decision {
                desired = d.desired_scale;
                ebc = d.excess_burst_capacity;
                panic_mode = d.panic_mode;
            }
        }

        let result = scaler.reconcile(
            now,
            spec,
            ScaleInput {
                desired,
                excess_burst_capacity: ebc,
                current_replicas: replicas,
                ready,
            },
        );
        if let Some(n) = result.replicas {
            scale_pods(&mut pods, n, now + opts.ready_delay);
            replicas = n;
        }

        if on_tick {
            rows.push(SimRow {
                time: t,
                load,
                observed_stable: decision.map(|d| d.observed_stable),
                observed_panic: decision.map(|d| d.observed_panic),
                desired,
                replicas,
                ready,
                panic_mode,
                excess_burst_capacity: ebc,
                active: result.active,
                activator_in_path: result.activator_in_path,
            });
        }
    }
    Simulation {
        spec: spec.clone(),
        rows,
    }
}

/// Resizes the pod set: new pods are ready at `ready_at`; removals take the youngest (the
/// not-yet-ready ones first), as a ReplicaSet does.
fn scale_pods(pods: &mut Vec<Duration>, n: u32, ready_at: Duration) {
    let n = n as usize;
    if n > pods.len() {
        pods.resize(n, ready_at);
    } else {
        pods.sort();
        pods.truncate(n);
    }
}

const COLUMNS: [&str; 11] = [
    "time",
    "load",
    "observed_stable",
    "observed_panic",
    "desired",
    "replicas",
    "ready",
    "panic_mode",
    "excess_burst_capacity",
    "active",
    "activator_in_path",
];

fn opt(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl SimRow {
    fn cells(&self, precise: bool) -> [String; 11] {
        let f = |v: f64| {
            if precise {
                v.to_string()
            } else {
                format!("{v:.2}")
            }
        };
        let o = |v: Option<f64>| {
            if precise {
                opt(v)
            } else {
                v.map_or_else(|| "-".to_string(), f)
            }
        };
        [
            self.time.to_string(),
            f(self.load),
            o(self.observed_stable),
            o(self.observed_panic),
            self.desired.to_string(),
            self.replicas.to_string(),
            self.ready.to_string(),
            self.panic_mode.to_string(),
            self.excess_burst_capacity.to_string(),
            self.active.as_str().to_string(),
            self.activator_in_path.to_string(),
        ]
    }
}

impl Simulation {
    /// CSV with a header line; empty observed cells where no decision was made.
    pub fn to_csv(&self) -> String {
        let mut out = COLUMNS.join(",");
        out.push('\n');
        for row in &self.rows {
            out.push_str(&row.cells(true).join(","));
            out.push('\n');
        }
        out
    }

    /// The rows as a JSON array.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.rows).unwrap_or_else(|_| "[]".to_string())
    }

    /// An aligned text table (right-aligned columns, 2 decimals).
    pub fn to_table(&self) -> String {
        let headers = [
            "TIME",
            "LOAD",
            "STABLE",
            "PANIC",
            "DESIRED",
            "REPLICAS",
            "READY",
            "PANIC?",
            "EBC",
            "ACTIVE",
            "ACTIVATOR",
        ];
        let cells: Vec<[String; 11]> = self.rows.iter().map(|r| r.cells(false)).collect();
        let mut widths = headers.map(str::len);
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |items: &mut dyn Iterator<Item = &str>| {
            let parts: Vec<String> = items.zip(widths).map(|(c, w)| format!("{c:>w$}")).collect();
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&mut headers.iter().copied());
        for row in &cells {
            line(&mut row.iter().map(String::as_str));
        }
        out
    }

    /// An ASCII chart `width` × `height` characters of plot area: ready replicas as `#`
    /// columns, the load scaled to its own maximum as `.` (`*` where it falls inside a
    /// column), with axis labels and a legend.
    pub fn to_ascii_chart(&self, width: usize, height: usize) -> String {
        let (width, height) = (width.max(1), height.max(1));
        if self.rows.is_empty() {
            return "(no data)\n".to_string();
        }
        let cols = width.min(self.rows.len());
        let max_rep = self.max_replicas().max(1);
        let max_load = self.max_load();
        // Each column summarises a slice of rows by its maxima, so short spikes stay visible.
        let columns: Vec<(usize, usize)> = (0..cols)
            .map(|c| {
                let lo = c * self.rows.len() / cols;
                let hi = ((c + 1) * self.rows.len() / cols).max(lo + 1);
                let slice = &self.rows[lo..hi];
                let rep = slice.iter().map(|r| r.ready).max().unwrap_or(0);
                let load = slice.iter().map(|r| r.load).fold(0.0, f64::max);
                let bar = scale_to(f64::from(rep), f64::from(max_rep), height);
                let dot = if max_load > 0.0 {
                    scale_to(load, max_load, height)
                } else {
                    0
                };
                (bar, dot)
            })
            .collect();

        let label_w = max_rep.to_string().len();
        let mut out = String::new();
        for level in (1..=height).rev() {
            let label = if level == height {
                max_rep.to_string()
            } else if level == height.div_ceil(2) {
                (max_rep / 2).to_string()
            } else {
                String::new()
            };
            let _ = write!(out, "{label:>label_w$} |");
            let mut line = String::new();
            for &(bar, dot) in &columns {
                line.push(match (bar >= level, dot == level) {
                    (true, true) => '*',
                    (true, false) => '#',
                    (false, true) => '.',
                    (false, false) => ' ',
                });
            }
            if level == height {
                let _ = write!(
                    line,
                    "{}| load {}",
                    " ".repeat(cols - line.chars().count()),
                    fmt_num(max_load)
                );
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let _ = writeln!(out, "{:>label_w$} +{}", 0, "-".repeat(cols));
        let first = format!("{}s", self.rows[0].time);
        let last = format!("{}s", self.rows[self.rows.len() - 1].time);
        let gap = (cols + 1).saturating_sub(first.len() + last.len()).max(1);
        let _ = writeln!(out, "{:label_w$}  {first}{}{last}", "", " ".repeat(gap));
        let _ = writeln!(
            out,
            "{:label_w$}  # ready replicas (max {max_rep})   . load (max {})   * both",
            "",
            fmt_num(max_load)
        );
        out
    }

    /// A standalone SVG line chart: desired (dashed) and ready replicas on the left axis,
    /// load on the right axis, panic periods shaded, with ticks, labels and a legend.
    pub fn to_svg(&self) -> String {
        const W: f64 = 900.0;
        const H: f64 = 420.0;
        const LEFT: f64 = 60.0;
        const RIGHT: f64 = 70.0;
        const TOP: f64 = 40.0;
        const BOTTOM: f64 = 50.0;
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;

        let t0 = self.rows.first().map_or(0, |r| r.time) as f64;
        let t1 = (self.rows.last().map_or(0, |r| r.time) as f64).max(t0 + 1.0);
        let rep_step = nice_step(f64::from(self.max_replicas().max(1)), 6);
        let rep_max = (f64::from(self.max_replicas().max(1)) / rep_step).ceil() * rep_step;
        let load_step = nice_step(self.max_load().max(1.0), 6);
        let load_max = (self.max_load().max(1.0) / load_step).ceil() * load_step;
        let x = |t: f64| LEFT + (t - t0) / (t1 - t0) * pw;
        let y_rep = |v: f64| TOP + ph - v / rep_max * ph;
        let y_load = |v: f64| TOP + ph - v / load_max * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="20" text-anchor="middle" font-size="14">KPA simulation: {} target {} per pod</text>"#,
            W / 2.0,
            self.spec.metric.as_str(),
            fmt_num(self.spec.target_value)
        );

        // Panic periods.
        let mut start: Option<f64> = None;
        for (i, row) in self.rows.iter().enumerate() {
            let t = row.time as f64;
            match (row.panic_mode, start) {
                (true, None) => start = Some(t),
                (false, Some(a)) => {
                    panic_rect(&mut s, x(a), x(t), TOP, ph);
                    start = None;
                }
                _ => {}
            }
            if i + 1 == self.rows.len()
                && let Some(a) = start
            {
                panic_rect(&mut s, x(a), x(t), TOP, ph);
            }
        }

        // Grid, ticks and labels.
        let _ = writeln!(s, r##"<g stroke="#ccc" stroke-width="1">"##);
        let mut v = 0.0;
        while v <= rep_max + 1e-9 {
            let _ = writeln!(
                s,
                r#"<line x1="{LEFT}" y1="{y:.1}" x2="{x2}" y2="{y:.1}"/>"#,
                y = y_rep(v),
                x2 = LEFT + pw
            );
            v += rep_step;
        }
        let _ = writeln!(s, "</g>");
        let _ = writeln!(s, r##"<g stroke="#000" stroke-width="1">"##);
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}"/>"#,
            b = TOP + ph
        );
        let _ = writeln!(
            s,
            r#"<line x1="{r}" y1="{TOP}" x2="{r}" y2="{b}"/>"#,
            r = LEFT + pw,
            b = TOP + ph
        );
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}"/>"#,
            r = LEFT + pw,
            b = TOP + ph
        );
        let _ = writeln!(s, "</g>");

        let _ = writeln!(s, r#"<g text-anchor="end">"#);
        let mut v = 0.0;
        while v <= rep_max + 1e-9 {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}">{}</text>"#,
                LEFT - 6.0,
                y_rep(v) + 4.0,
                fmt_num(v)
            );
            v += rep_step;
        }
        let _ = writeln!(s, "</g>");
        let _ = writeln!(s, r#"<g text-anchor="start">"#);
        let mut v = 0.0;
        while v <= load_max + 1e-9 {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}">{}</text>"#,
                LEFT + pw + 6.0,
                y_load(v) + 4.0,
                fmt_num(v)
            );
            v += load_step;
        }
        let _ = writeln!(s, "</g>");
        let t_step = nice_step(t1 - t0, 10);
        let _ = writeln!(s, r#"<g text-anchor="middle">"#);
        let mut t = (t0 / t_step).ceil() * t_step;
        while t <= t1 + 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{b}" x2="{xx:.1}" y2="{b2}" stroke="#000"/><text x="{xx:.1}" y="{ty}">{label}s</text>"##,
                xx = x(t),
                b = TOP + ph,
                b2 = TOP + ph + 5.0,
                ty = TOP + ph + 18.0,
                label = fmt_num(t)
            );
            t += t_step;
        }
        let _ = writeln!(s, "</g>");
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">time</text>"#,
            LEFT + pw / 2.0,
            H - 10.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">replicas</text>"#,
            TOP + ph / 2.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({} {}) rotate(90)" text-anchor="middle">load ({})</text>"#,
            W - 16.0,
            TOP + ph / 2.0,
            self.spec.metric.as_str()
        );

        // Series.
        let series = |f: &dyn Fn(&SimRow) -> (f64, f64)| -> String {
            self.rows
                .iter()
                .map(|r| {
                    let (xx, yy) = f(r);
                    format!("{xx:.1},{yy:.1}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let load_pts = series(&|r| (x(r.time as f64), y_load(r.load)));
        let desired_pts = series(&|r| (x(r.time as f64), y_rep(f64::from(r.desired.max(0)))));
        let ready_pts = series(&|r| (x(r.time as f64), y_rep(f64::from(r.ready))));
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="#ff7f0e" stroke-width="1.5" points="{load_pts}"/>"##
        );
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" stroke-dasharray="6 3" points="{desired_pts}"/>"##
        );
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="#2ca02c" stroke-width="2" points="{ready_pts}"/>"##
        );

        // Legend.
        let lx = LEFT + 10.0;
        let ly = TOP + 12.0;
        let _ = writeln!(
            s,
            r##"<rect x="{}" y="{}" width="130" height="62" fill="white" fill-opacity="0.85" stroke="#ccc"/>"##,
            lx - 5.0,
            ly - 9.0
        );
        for (i, (color, dash, name)) in [
            ("#2ca02c", "", "ready replicas"),
            ("#1f77b4", r#" stroke-dasharray="6 3""#, "desired replicas"),
            ("#ff7f0e", "", "load (right axis)"),
        ]
        .iter()
        .enumerate()
        {
            let yy = ly + 14.0 * i as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{yy}" x2="{}" y2="{yy}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{name}</text>"#,
                lx + 20.0,
                lx + 26.0,
                yy + 4.0
            );
        }
        let yy = ly + 42.0;
        let _ = writeln!(
            s,
            r##"<rect x="{lx}" y="{}" width="20" height="8" fill="#d62728" fill-opacity="0.12"/><text x="{}" y="{}">panic mode</text>"##,
            yy - 4.0,
            lx + 26.0,
            yy + 4.0
        );
        s.push_str("</svg>\n");
        s
    }

    fn max_replicas(&self) -> u32 {
        self.rows
            .iter()
            .map(|r| {
                r.ready
                    .max(r.replicas)
                    .max(u32::try_from(r.desired).unwrap_or(0))
            })
            .max()
            .unwrap_or(0)
    }

    fn max_load(&self) -> f64 {
        self.rows.iter().map(|r| r.load).fold(0.0, f64::max)
    }
}

fn panic_rect(s: &mut String, x0: f64, x1: f64, top: f64, height: f64) {
    let _ = writeln!(
        s,
        r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{height}" fill="#d62728" fill-opacity="0.12"/>"##,
        (x1 - x0).max(1.0)
    );
}

/// `v / max` of `height` cells, rounded; any non-zero value gets at least one cell.
fn scale_to(v: f64, max: f64, height: usize) -> usize {
    if v <= 0.0 || max <= 0.0 {
        return 0;
    }
    ((v / max * height as f64).round() as usize).clamp(1, height)
}

/// A 1/2/5×10ⁿ step giving about `ticks` ticks over `range`.
fn nice_step(range: f64, ticks: usize) -> f64 {
    let raw = range / ticks.max(1) as f64;
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag);
    // Replica counts and seconds are integers: never step by fractions of one.
    step.max(1.0)
}

/// A number without a trailing `.0`, at most 2 decimals.
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Annotations;
    use wisp_api::config::AutoscalerConfig;

    fn spec_target_10(tbc: f64) -> DeciderSpec {
        let a: Annotations = [(
            "autoscaling.knative.dev/target".to_string(),
            "10".to_string(),
        )]
        .into();
        DeciderSpec {
            target_burst_capacity: tbc,
            ..DeciderSpec::resolve(&a, 0, &AutoscalerConfig::default())
        }
    }

    /// 5 clients for two minutes, a jump to 50, then idle from 300 s.
    const TRACE: &str = "# the issue's example\nseconds,concurrency\n0,5\n120,50\n300,0\n480,0\n";

    fn row(sim: &Simulation, t: u64) -> &SimRow {
        sim.rows.iter().find(|r| r.time == t).unwrap()
    }

    #[test]
    fn the_issue_example() {
        let spec = spec_target_10(0.0);
        assert_eq!(spec.target_value, 7.0);
        let trace = Trace::parse(TRACE).unwrap();
        let sim = simulate(&spec, &trace, &SimOptions::default());
        assert_eq!(sim.rows.len(), 241); // 0, 2, …, 480

        // Start: one pod (initial scale), ready after 2 s, activating until then.
        let r0 = row(&sim, 0);
        assert_eq!((r0.desired, r0.replicas, r0.ready), (1, 1, 0));
        assert_eq!(r0.active, ActiveState::Activating);
        assert_eq!(row(&sim, 2).active, ActiveState::Active);

        // 5 clients: ⌈5/7⌉ = 1 pod, calm.
        for r in sim.rows.iter().filter(|r| (4..120).contains(&r.time)) {
            assert_eq!(
                (r.desired, r.ready, r.panic_mode),
                (1, 1, false),
                "t={}",
                r.time
            );
        }

        // The jump: panic within one panic window (6 s).
        let first_panic = sim.rows.iter().find(|r| r.panic_mode).unwrap().time;
        assert!((120..=126).contains(&first_panic), "{first_panic}");
        // Panic never scales down.
        let during: Vec<i32> = sim
            .rows
            .iter()
            .filter(|r| r.panic_mode)
            .map(|r| r.desired)
            .collect();
        assert!(during.windows(2).all(|w| w[1] >= w[0]), "{during:?}");
        // Panic ends a stable window after the last over-threshold tick.
        let last_panic = sim.rows.iter().rfind(|r| r.panic_mode).unwrap().time;
        assert!((180..=190).contains(&last_panic), "{last_panic}");

        // 50 steady clients settle at ⌈50 / (10 × 0.7)⌉ = 8.
        for r in sim.rows.iter().filter(|r| (140..=300).contains(&r.time)) {
            assert_eq!((r.desired, r.replicas, r.ready), (8, 8, 8), "t={}", r.time);
            assert!(r.observed_stable.is_some());
        }
        assert_eq!(row(&sim, 250).observed_stable, Some(50.0));

        // Idle tail: descent limited by max-scale-down-rate, 0 desired after a stable window
        // of zeros, PA inactive, then the grace period before replicas reach 0.
        let r360 = row(&sim, 360);
        assert_eq!(r360.desired, 0);
        assert_eq!(r360.observed_stable, Some(0.0));
        assert_eq!(r360.active, ActiveState::Inactive);
        assert_eq!(r360.replicas, 1);
        let zero = sim.rows.iter().find(|r| r.replicas == 0).unwrap().time;
        assert_eq!(
            zero, 390,
            "stable window (60 s) after the load stops + grace (30 s)"
        );
        let tail = row(&sim, 480);
        assert_eq!((tail.replicas, tail.ready, tail.desired), (0, 0, 0));
        assert!(tail.activator_in_path);
        // No data for a stable window after scale-to-zero: no decisions, state unchanged.
        assert_eq!(tail.observed_stable, None);
    }

    #[test]
    fn default_tbc_scales_to_zero_on_the_fast_path() {
        // TBC 211 with 10-per-pod capacity: EBC < 0 throughout, the activator has been in
        // the path for longer than the grace period, so zero follows inactivity at once.
        let sim = simulate(
            &spec_target_10(211.0),
            &Trace::parse(TRACE).unwrap(),
            &SimOptions::default(),
        );
        assert!(sim.rows.iter().all(|r| r.excess_burst_capacity < 0));
        let zero = sim.rows.iter().find(|r| r.replicas == 0).unwrap().time;
        assert_eq!(zero, 362);
    }

    #[test]
    fn tbc_minus_one_keeps_the_activator_in_the_path() {
        let sim = simulate(
            &spec_target_10(-1.0),
            &Trace::parse(TRACE).unwrap(),
            &SimOptions::default(),
        );
        assert!(sim.rows.iter().all(|r| r.activator_in_path));
        assert!(sim.rows.iter().all(|r| r.excess_burst_capacity == -1));
        assert_eq!(row(&sim, 250).ready, 8);
        // Only the activator reports, and it goes quiet with the load: the average holds
        // until a whole stable window of silence, then drops (rate-limited) to zero.
        assert_eq!(row(&sim, 358).desired, 8);
        let zero = sim.rows.iter().find(|r| r.replicas == 0).unwrap().time;
        assert!((360..=380).contains(&zero), "{zero}");
    }

    #[test]
    fn cold_start_from_zero_pokes_the_decider() {
        let spec = spec_target_10(0.0);
        let trace = Trace::parse("0,0\n201,20\n260,20").unwrap();
        let sim = simulate(&spec, &trace, &SimOptions::default());
        // Idle from the start: scaled to zero once the first pod was active a stable window.
        let zero = sim.rows.iter().find(|r| r.replicas == 0).unwrap().time;
        assert!(zero <= 100, "{zero}");
        // Load at 201 (odd second) pokes: replicas asked at 201, ready at 203, seen at 204.
        let r202 = row(&sim, 202);
        assert!(r202.replicas >= 3, "{r202:?}");
        assert_eq!(r202.ready, 0);
        assert_eq!(r202.active, ActiveState::Activating);
        let r204 = row(&sim, 204);
        assert!(r204.ready >= 3);
        assert_eq!(r204.active, ActiveState::Active);
    }

    #[test]
    fn renderers() {
        let sim = simulate(
            &spec_target_10(0.0),
            &Trace::parse(TRACE).unwrap(),
            &SimOptions {
                duration: Some(Duration::from_secs(40)),
                ..SimOptions::default()
            },
        );
        let csv = sim.to_csv();
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), COLUMNS.join(","));
        assert_eq!(
            lines.next().unwrap(),
            "0,5,5,5,1,1,0,false,0,activating,true"
        );
        assert_eq!(csv.lines().count(), 22);

        let table = sim.to_table();
        assert!(table.starts_with("TIME"));
        let widths: Vec<usize> = table
            .lines()
            .map(|l| l.find("DESIRED").unwrap_or(0))
            .collect();
        assert!(widths[0] > 0);
        assert!(table.lines().nth(1).unwrap().contains("5.00"));

        let json: serde_json::Value = serde_json::from_str(&sim.to_json()).unwrap();
        assert_eq!(json[0]["active"], "activating");

        let chart = sim.to_ascii_chart(60, 15);
        let plot: Vec<&str> = chart.lines().take(15).collect();
        assert!(plot.iter().all(|l| l.contains('|')));
        assert!(chart.contains('#'));
        assert!(chart.contains("load"));

        let svg = sim.to_svg();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_balanced(&svg);
        assert_eq!(svg.matches("<polyline").count(), 3);
    }

    #[test]
    fn ascii_chart_shape() {
        let sim = simulate(
            &spec_target_10(0.0),
            &Trace::parse(TRACE).unwrap(),
            &SimOptions::default(),
        );
        let chart = sim.to_ascii_chart(60, 15);
        let lines: Vec<&str> = chart.lines().collect();
        assert_eq!(lines.len(), 15 + 3);
        // The plot area is 60 columns wide.
        let axis = lines[15];
        assert_eq!(axis.matches('-').count(), 60);
        // The busiest part reaches the top row.
        assert!(lines[0].contains('#') || lines[0].contains('*'));
    }

    /// A tiny XML well-formedness check: every opened tag is closed in order.
    fn assert_balanced(xml: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
            } else {
                let name = tag.split_whitespace().next().unwrap();
                stack.push(name.to_string());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    #[test]
    fn trace_parsing() {
        let t = Trace::parse("# c\n\nseconds,rps\n0, 1\n 2 ,3.5\n2,4\n").unwrap();
        assert_eq!(t.rows(), &[(0.0, 1.0), (2.0, 3.5), (2.0, 4.0)]);
        assert_eq!(t.value_at(1.9), 1.0);
        assert_eq!(t.value_at(2.0), 4.0, "equal seconds: the later row wins");
        assert_eq!(t.value_at(100.0), 4.0);
        assert_eq!(Trace::parse("5,1").unwrap().value_at(4.0), 0.0);
        assert_eq!(t.end(), 2.0);
    }

    #[test]
    fn trace_errors_have_line_numbers() {
        let cases: &[(&str, &str)] = &[
            (
                "0,1\n1,2,3\n",
                "line 2: expected `seconds,value`, found \"1,2,3\"",
            ),
            ("0,1\nx,2\n", "line 2: seconds \"x\" is not a number"),
            ("#h\n0,abc\n", "line 2: value \"abc\" is not a number"),
            (
                "0,1\n-1,2\n",
                "line 2: seconds must be finite and ≥ 0, found -1",
            ),
            ("0,-3\n", "line 1: value must be finite and ≥ 0, found -3"),
            (
                "0,1\n5,1\n\n4,1\n",
                "line 4: seconds 4 is before the previous row's 5",
            ),
            (
                "0,1\nseconds,value\n",
                "line 2: seconds \"seconds\" is not a number",
            ),
            ("# nothing\nseconds,value\n", "the trace has no rows"),
            ("0,NaN\n", "line 1: value must be finite and ≥ 0, found NaN"),
        ];
        for (input, want) in cases {
            assert_eq!(
                Trace::parse(input).unwrap_err().to_string(),
                *want,
                "{input:?}"
            );
        }
        assert!(matches!(
            Trace::from_rows(&[(1.0, 1.0), (0.0, 1.0)]),
            Err(TraceError::Decreasing { line: 2, .. })
        ));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(8.0, 6), 2.0);
        assert_eq!(nice_step(480.0, 10), 50.0);
        assert_eq!(nice_step(1.0, 6), 1.0);
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(3.0), "3");
    }
}
