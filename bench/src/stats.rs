//! Percentiles of latency samples and Markdown tables.

use std::{fmt::Write, time::Duration};

/// Order statistics of a set of durations.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub n: usize,
    pub min: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Summary {
    /// `None` for no samples.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_unstable();
        let total: Duration = v.iter().sum();
        Some(Summary {
            n: v.len(),
            min: v[0],
            p50: percentile(&v, 50.0),
            p95: percentile(&v, 95.0),
            p99: percentile(&v, 99.0),
            max: v[v.len() - 1],
            mean: total / v.len() as u32,
        })
    }
}

/// The median of `v` (the mean of the middle two for an even count; NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile of sorted samples: the smallest value with at least `p`% of the
/// samples at or below it.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty());
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration as milliseconds with one decimal, e.g. `12.3 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A Markdown table built row by row.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: ToString>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        self.rows
            .push(cells.into_iter().map(|s| s.to_string()).collect());
        self
    }

    /// GitHub-flavoured Markdown, columns padded for reading as plain text.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![3; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            out.push('|');
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let _ = write!(out, " {c:<w$} |");
            }
            out.push('\n');
        };
        line(&mut out, &self.header);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&mut out, &rule);
        for r in &self.rows {
            line(&mut out, r);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p95, Duration::from_millis(95));
        assert_eq!(s.max, Duration::from_millis(100));
        let one = Summary::of(&[Duration::from_millis(7)]).unwrap();
        assert_eq!(one.p95, Duration::from_millis(7));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn table_renders_markdown() {
        let mut t = Table::new(["a", "long header"]);
        t.row(["1", "2"]);
        assert_eq!(
            t.render(),
            "| a   | long header |\n| --- | ----------- |\n| 1   | 2           |\n"
        );
    }
}
