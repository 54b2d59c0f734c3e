//! Knative's timed metric buckets (`pkg/autoscaler/aggregation/bucketing.go`)
//! and the descending-maxima window behind scale-down-delay (`aggregation/max/`).
//!
//! Time is a [`Duration`] since an arbitrary epoch (the autoscaler's start, or second 0 of a
//! simulation). Only whole seconds matter: every timestamp is truncated to its 1 s bucket,
//! exactly as Knative truncates `time.Time` to the bucket granularity, so a table test can
//! write `secs(12)` and the live autoscaler can pass `Instant::now() - start`.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// The bucket granularity: Knative scrapes once a second and keeps one bucket per second.
pub const BUCKET: Duration = Duration::from_secs(1);

/// Decimal digits kept by the linear average (`precision` in bucketing.go).
const PRECISION_DIGITS: i32 = 6;
/// The weighted average's weights must add up to at least this much over the window.
const WEIGHT_PRECISION: f64 = 0.9999;
/// Lower bound of the decay coefficient, so huge windows don't degenerate into a flat mean.
const MIN_EXPONENT: f64 = 0.2;

/// How a window of buckets is averaged (`metric-aggregation-algorithm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Aggregation {
    /// Plain mean over the valid part of the window (the default).
    #[default]
    Linear,
    /// Exponentially decaying weights, newest bucket heaviest.
    WeightedExponential,
}

/// The smoothing coefficient α for a window of `buckets` buckets:
/// `max(1 − (1 − 0.9999)^{1/N}, 0.2)`.
pub fn smoothing_coefficient(buckets: usize) -> f64 {
    (1.0 - (1.0 - WEIGHT_PRECISION).powf(1.0 / buckets as f64)).max(MIN_EXPONENT)
}

/// Knative's `roundToNDigits`: it floors, so 0.0000019 becomes 0.000001, never 0.000002.
fn floor_to_digits(f: f64) -> f64 {
    let p = 10f64.powi(PRECISION_DIGITS);
    (f * p).floor() / p
}

/// The number of 1 s buckets needed to cover `window` (rounded up, at least one).
fn bucket_count(window: Duration) -> usize {
    (window.as_nanos().div_ceil(BUCKET.as_nanos()) as usize).max(1)
}

/// `TimedFloat64Buckets` / `WeightedFloat64Buckets`: a ring buffer of one-second buckets over
/// a window, averaged linearly or with exponential weights.
#[derive(Clone, Debug)]
pub struct Buckets {
    algorithm: Aggregation,
    /// Indexed by `second % len`.
    buckets: Vec<f64>,
    window: Duration,
    /// Second of the first write of the current run of data; reset after a window of silence.
    /// Bounds the divisor so a half-filled window averages over its filled half only.
    /// Signed: a resize may place it before the epoch, as Knative's does.
    first_write: Option<i64>,
    /// Second of the newest write; `None` until the first one.
    last_write: Option<u64>,
    /// Sum of every bucket in the ring (stale ones included until they are overwritten).
    window_total: f64,
    /// α, only used by the weighted algorithm.
    smoothing: f64,
}

impl Buckets {
    /// Empty buckets over `window` (Knative validates windows to whole seconds; a fractional
    /// window is rounded up to the next bucket, as Knative's `math.Ceil` does).
    pub fn new(window: Duration, algorithm: Aggregation) -> Self {
        let n = bucket_count(window);
        Buckets {
            algorithm,
            buckets: vec![0.0; n],
            window,
            first_write: None,
            last_write: None,
            window_total: 0.0,
            smoothing: smoothing_coefficient(n),
        }
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The averaging algorithm.
    pub fn algorithm(&self) -> Aggregation {
        self.algorithm
    }

    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    fn slot(&self, second: u64) -> usize {
        (second % self.len()) as usize
    }

    /// Adds `value` to the bucket of `now`. Values in the same second are summed (several
    /// pods' and the activator's stats add up to the revision's total). A write after a gap
    /// zeroes the skipped buckets; a write after a whole window of silence starts a fresh
    /// run (so the average is over the partial window again); a write older than a window
    /// before the newest one is dropped.
    pub fn record(&mut self, now: Duration, value: f64) {
        let second = now.as_secs();
        match self.last_write {
            Some(last) if last == second => {}
            Some(last) => {
                if Duration::from_secs(second) + self.window <= Duration::from_secs(last) {
                    // Older than the window behind the newest write: useless.
                    return;
                }
                if self.first_write.is_none_or(|first| first > second as i64) {
                    self.first_write = Some(second as i64);
                }
                if second > last {
                    if Duration::from_secs(second - last) >= self.window {
                        self.reset(second);
                    } else {
                        // Buckets we skipped over still hold data from a window ago.
                        for s in last + 1..=second {
                            let i = self.slot(s);
                            self.window_total -= self.buckets[i];
                            self.buckets[i] = 0.0;
                        }
                    }
                    self.last_write = Some(second);
                }
                // else: a late value inside the window, simply added below.
            }
            None => {
                self.reset(second);
                self.last_write = Some(second);
            }
        }
        let i = self.slot(second);
        self.buckets[i] += value;
        self.window_total += value;
    }

    fn reset(&mut self, second: u64) {
        self.first_write = Some(second as i64);
        self.buckets.iter_mut().for_each(|b| *b = 0.0);
        self.window_total = 0.0;
    }

    /// True when nothing was recorded during the last window (`IsEmpty`): the decider then
    /// makes no decision.
    pub fn is_empty(&self, now: Duration) -> bool {
        match self.last_write {
            None => true,
            Some(last) => Duration::from_secs(now.as_secs().saturating_sub(last)) > self.window,
        }
    }

    /// The window average at `now` with this buckets' algorithm.
    pub fn window_average(&self, now: Duration) -> f64 {
        match self.algorithm {
            Aggregation::Linear => self.linear_average(now),
            Aggregation::WeightedExponential => self.weighted_average(now),
        }
    }

    /// The linear average (`bucketing.go`'s `WindowAverage`): gaps inside the data count as 0; the divisor covers only
    /// the span since the first write of this run, and excludes the trailing span with no
    /// data when the newest write is less than a window old; nothing for a window ⇒ 0.
    /// Floored to 6 decimals.
    pub fn linear_average(&self, now: Duration) -> f64 {
        let (Some(first), Some(last)) = (self.first_write, self.last_write) else {
            return 0.0;
        };
        let now = now.as_secs();
        let filled = (last as i64 - first + 1) as f64; // +1: both ends are inclusive.
        if now <= last {
            let n = filled.min(self.len() as f64);
            return floor_to_digits(self.window_total / n);
        }
        let silent = now - last;
        if Duration::from_secs(silent) >= self.window {
            return 0.0;
        }
        // Buckets after the newest write hold stale data from a window ago: drop them.
        let mut total = self.window_total;
        for s in last + 1..=now {
            total -= self.buckets[self.slot(s)];
        }
        let n = filled.min((self.len() - silent) as f64);
        floor_to_digits(total / n)
    }

    /// The weighted exponential average (`bucketing.go`'s `WeightedWindowAverage`): Σ α(1−α)^{z+i}·b_{last−i} over the buckets
    /// still inside the window, z being the empty buckets since the newest write. Not
    /// rounded (Knative doesn't round this one) and not normalised for a partial window.
    pub fn weighted_average(&self, now: Duration) -> f64 {
        let Some(last) = self.last_write else {
            return 0.0;
        };
        if self.is_empty(now) {
            return 0.0;
        }
        let now = now.as_secs();
        let total = self.len();
        let mut count = total;
        let mut multiplier = self.smoothing;
        if now > last {
            let zeros = now - last;
            multiplier *= (1.0 - self.smoothing).powf(zeros as f64);
            count = count.saturating_sub(zeros);
        }
        let start = last + total; // keeps `start - i` non-negative.
        let mut sum = 0.0;
        for i in 0..count {
            sum += self.buckets[((start - i) % total) as usize] * multiplier;
            multiplier *= 1.0 - self.smoothing;
        }
        sum
    }

    /// Changes the window (`ResizeWindow`), keeping the newest buckets that still fit when the
    /// last write is at most a window old, and otherwise starting empty. O(window).
    pub fn resize_window(&mut self, window: Duration, now: Duration) {
        if window == self.window {
            return;
        }
        let n = bucket_count(window);
        let mut buckets = vec![0.0; n];
        let mut total = 0.0;
        match self.last_write {
            Some(last)
                if Duration::from_secs(now.as_secs().saturating_sub(last)) <= self.window =>
            {
                let old = self.len();
                let keep = (n as u64).min(old);
                for k in 0..keep {
                    let Some(s) = last.checked_sub(k) else { break };
                    let v = self.buckets[(s % old) as usize];
                    buckets[(s % n as u64) as usize] = v;
                    total += v;
                }
                // The earliest moment data could have been written, as Knative does.
                self.first_write = Some(last as i64 - (old as i64 - 1));
            }
            _ => {
                // Knative forgets only the first write: `is_empty` still measures the
                // silence from the old last write, against the new window.
                self.first_write = None;
            }
        }
        self.window = window;
        self.buckets = buckets;
        self.window_total = total;
        self.smoothing = smoothing_coefficient(n);
    }
}

/// The stable and panic windows of one metric, fed with the same values
/// (`collector.go`'s `concurrencyBuckets` + `concurrencyPanicBuckets`, or the RPS pair).
#[derive(Clone, Debug)]
pub struct MetricWindows {
    stable: Buckets,
    panic: Buckets,
    /// Whether pods are scraped. With TBC = -1 Knative scrapes nothing (the activator is
    /// always in the path and reports everything), and an empty window then means "zero
    /// load", not "no data yet".
    scraping: bool,
}

impl MetricWindows {
    /// Windows of the given lengths; `scraping` is false only when TBC = -1.
    pub fn new(
        stable_window: Duration,
        panic_window: Duration,
        algorithm: Aggregation,
        scraping: bool,
    ) -> Self {
        MetricWindows {
            stable: Buckets::new(stable_window, algorithm),
            panic: Buckets::new(panic_window, algorithm),
            scraping,
        }
    }

    /// Records one observation (the revision-wide concurrency or request count).
    pub fn record(&mut self, now: Duration, value: f64) {
        self.stable.record(now, value);
        self.panic.record(now, value);
    }

    /// `(stable, panic)` averages at `now`, or `None` ("no data", Knative's `ErrNoData`) when
    /// the stable window saw nothing and pods are being scraped.
    pub fn observe(&self, now: Duration) -> Option<(f64, f64)> {
        if self.scraping && self.stable.is_empty(now) {
            return None;
        }
        Some((
            self.stable.window_average(now),
            self.panic.window_average(now),
        ))
    }

    /// Applies new window lengths / scraping mode (a changed revision spec or config).
    /// A change of algorithm starts from empty buckets.
    pub fn update(
        &mut self,
        stable_window: Duration,
        panic_window: Duration,
        algorithm: Aggregation,
        scraping: bool,
        now: Duration,
    ) {
        if algorithm != self.stable.algorithm {
            *self = MetricWindows::new(stable_window, panic_window, algorithm, scraping);
            return;
        }
        self.stable.resize_window(stable_window, now);
        self.panic.resize_window(panic_window, now);
        self.scraping = scraping;
    }

    /// The stable buckets.
    pub fn stable(&self) -> &Buckets {
        &self.stable
    }

    /// The panic buckets.
    pub fn panic(&self) -> &Buckets {
        &self.panic
    }
}

/// `max.TimeWindow`: the maximum value recorded over the last `duration`, with buckets of
/// `granularity` (the 2 s decider tick for scale-down-delay). A descending-maxima deque: an
/// entry smaller than a newer one can never be the maximum again, so it is dropped.
#[derive(Clone, Debug)]
pub struct MaxTimeWindow {
    /// Number of granularity buckets covered.
    size: u64,
    granularity_secs: u64,
    /// `(bucket index, value)`, indexes ascending, values strictly descending.
    maxima: VecDeque<(u64, i32)>,
}

impl MaxTimeWindow {
    /// A window over `duration` in buckets of `granularity` (whole seconds, at least 1 s).
    pub fn new(duration: Duration, granularity: Duration) -> Self {
        let granularity_secs = granularity.as_secs().max(1);
        let size = duration
            .as_nanos()
            .div_ceil(Duration::from_secs(granularity_secs).as_nanos())
            .max(1) as u64;
        MaxTimeWindow {
            size,
            granularity_secs,
            maxima: VecDeque::new(),
        }
    }

    /// Records `value` at `now` (times must not go backwards by more than a bucket).
    pub fn record(&mut self, now: Duration, mut value: i32) {
        let index = now.as_secs() / self.granularity_secs;
        while self.maxima.back().is_some_and(|&(_, v)| v <= value) {
            self.maxima.pop_back();
        }
        while self
            .maxima
            .front()
            .is_some_and(|&(i, _)| index.saturating_sub(i) >= self.size)
        {
            self.maxima.pop_front();
        }
        // Several values in one bucket: keep the largest.
        if let Some(&(i, v)) = self.maxima.back()
            && i == index
        {
            value = value.max(v);
            self.maxima.pop_back();
        }
        self.maxima.push_back((index, value));
    }

    /// The maximum over the window as of the last record (0 before any record).
    pub fn current(&self) -> i32 {
        self.maxima.front().map_or(0, |&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn linear(window: u64, writes: &[(u64, f64)]) -> Buckets {
        let mut b = Buckets::new(s(window), Aggregation::Linear);
        for &(t, v) in writes {
            b.record(s(t), v);
        }
        b
    }

    #[test]
    fn linear_average_table() {
        // (name, window, writes, now, expected)
        type Case<'a> = (&'a str, u64, &'a [(u64, f64)], u64, f64);
        let cases: &[Case] = &[
            ("no data", 10, &[], 5, 0.0),
            ("one write, same second", 10, &[(5, 4.0)], 5, 4.0),
            // Same-second values are summed, not averaged.
            ("same second summed", 10, &[(5, 4.0), (5, 6.0)], 5, 10.0),
            // First write 3 s ago: average over the 4 elapsed buckets only.
            (
                "partial window",
                10,
                &[(1, 4.0), (2, 4.0), (3, 4.0), (4, 8.0)],
                4,
                5.0,
            ),
            // A gap inside the data counts as zero.
            ("gap is zero", 10, &[(1, 6.0), (4, 6.0)], 4, 3.0),
            // Newest data 2 s old: the trailing 2 empty buckets leave the divisor, but the
            // divisor is still capped by the elapsed span (3 buckets: 1..=3).
            (
                "trailing silence",
                10,
                &[(1, 3.0), (2, 3.0), (3, 3.0)],
                5,
                3.0,
            ),
            // Full window of data, then silence: window − silence buckets divide.
            (
                "full then silence",
                4,
                &[(1, 4.0), (2, 4.0), (3, 8.0), (4, 8.0), (5, 8.0), (6, 8.0)],
                8,
                8.0,
            ),
            ("silence of a window", 10, &[(1, 5.0)], 11, 0.0),
            ("silence over a window", 10, &[(1, 5.0)], 30, 0.0),
            // A full window: plain mean of the last W buckets.
            (
                "ring wraps",
                3,
                &[(1, 100.0), (2, 1.0), (3, 2.0), (4, 3.0)],
                4,
                2.0,
            ),
            // 1/3 floored to 6 decimals.
            ("floored", 10, &[(0, 1.0), (1, 0.0), (2, 0.0)], 2, 0.333333),
        ];
        for &(name, w, writes, now, want) in cases {
            let got = linear(w, writes).window_average(s(now));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn first_write_resets_after_a_window_of_silence() {
        let mut b = linear(5, &[(0, 10.0), (1, 10.0), (2, 10.0)]);
        // Six seconds later: a fresh run, averaged over its own single bucket.
        b.record(s(8), 2.0);
        assert_eq!(b.window_average(s(8)), 2.0);
        b.record(s(9), 4.0);
        assert_eq!(b.window_average(s(9)), 3.0);
    }

    #[test]
    fn stale_values_are_dropped_and_late_values_kept() {
        let mut b = linear(5, &[(10, 5.0)]);
        b.record(s(2), 100.0); // a window older than the newest write
        assert_eq!(b.window_average(s(10)), 5.0);
        b.record(s(8), 5.0); // late but inside the window: counts, and widens the run
        assert_eq!(b.window_average(s(10)), 3.333333);
    }

    #[test]
    fn is_empty_after_more_than_a_window() {
        let b = linear(10, &[(3, 1.0)]);
        assert!(Buckets::new(s(10), Aggregation::Linear).is_empty(s(0)));
        assert!(!b.is_empty(s(3)));
        assert!(!b.is_empty(s(13)));
        assert!(b.is_empty(s(14)));
    }

    #[test]
    fn weighted_coefficients() {
        assert_eq!(smoothing_coefficient(60), 0.2);
        let a6 = smoothing_coefficient(6);
        assert!((a6 - 0.78456).abs() < 1e-4, "{a6}");
    }

    #[test]
    fn weighted_average_formula() {
        // Knative's doc example data [10, 10, 5, 5] (newest last), on a 60 s window: α = 0.2.
        let mut b = Buckets::new(s(60), Aggregation::WeightedExponential);
        for (t, v) in [(1, 10.0), (2, 10.0), (3, 5.0), (4, 5.0)] {
            b.record(s(t), v);
        }
        let a: f64 = 0.2;
        let want = 5.0 * a
            + 5.0 * a * (1.0 - a)
            + 10.0 * a * (1.0 - a).powi(2)
            + 10.0 * a * (1.0 - a).powi(3);
        assert!((b.window_average(s(4)) - want).abs() < 1e-12);
        // Two empty buckets since the last write: every weight shifts by (1 − α)².
        let shifted = want * (1.0 - a).powi(2);
        assert!((b.window_average(s(6)) - shifted).abs() < 1e-12);
        // Empty ⇒ 0.
        assert_eq!(b.window_average(s(65)), 0.0);
    }

    /// A worked example of Knative's `WeightedFloat64Buckets` (10 s and 3 s windows, 1 s
    /// buckets, concurrency 1, 3, 5, 4, 6, 7, 2, 8, 10, 20 at seconds 1–10, averaged at
    /// second 10), with the values Knative's code printed for it.
    #[test]
    fn weighted_average_knative_example() {
        for (window, want) in [(10, 15.430728028666296), (3, 19.530732247258655)] {
            let mut b = Buckets::new(s(window), Aggregation::WeightedExponential);
            for (i, v) in [1.0, 3.0, 5.0, 4.0, 6.0, 7.0, 2.0, 8.0, 10.0, 20.0]
                .into_iter()
                .enumerate()
            {
                b.record(s(i as u64 + 1), v);
            }
            let got = b.window_average(s(10));
            assert!((got - want).abs() < 1e-9, "{window}s: {got} != {want}");
        }
    }

    #[test]
    fn weighted_constant_full_window_is_nearly_the_constant() {
        let mut b = Buckets::new(s(6), Aggregation::WeightedExponential);
        for t in 0..20 {
            b.record(s(t), 10.0);
        }
        let got = b.window_average(s(19));
        assert!((got - 10.0).abs() < 0.01, "{got}");
    }

    #[test]
    fn resize_keeps_newest_buckets() {
        let mut b = linear(10, &[(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]);
        b.resize_window(s(2), s(4));
        assert_eq!(b.window(), s(2));
        assert_eq!(b.window_average(s(4)), 3.5);
        b.resize_window(s(20), s(4));
        assert_eq!(b.window_average(s(4)), 3.5);
        // Nothing recent: the old buckets are dropped.
        let mut old = linear(5, &[(1, 9.0)]);
        old.resize_window(s(10), s(100));
        assert!(old.is_empty(s(100)));
        assert_eq!(old.window_average(s(100)), 0.0);
        // …but the last write is kept: a window grown past the silence is not "empty".
        let mut grown = linear(5, &[(1, 9.0)]);
        grown.resize_window(s(60), s(20));
        assert!(!grown.is_empty(s(20)));
        assert_eq!(grown.window_average(s(20)), 0.0);
        grown.record(s(21), 4.0);
        assert_eq!(grown.window_average(s(21)), 4.0);
    }

    #[test]
    fn metric_windows_no_data_unless_not_scraping() {
        let w = MetricWindows::new(s(60), s(6), Aggregation::Linear, true);
        assert_eq!(w.observe(s(10)), None);
        let w = MetricWindows::new(s(60), s(6), Aggregation::Linear, false);
        assert_eq!(w.observe(s(10)), Some((0.0, 0.0)));
        let mut w = MetricWindows::new(s(60), s(6), Aggregation::Linear, true);
        for t in 0..10 {
            w.record(s(t), if t < 5 { 0.0 } else { 12.0 });
        }
        // Stable over 10 buckets, panic over the last 6 (one zero, five 12s).
        assert_eq!(w.observe(s(9)), Some((6.0, 10.0)));
    }

    #[test]
    fn max_window_table() {
        let mut w = MaxTimeWindow::new(s(6), s(2)); // 3 buckets
        let steps = [
            (0, 5, 5),
            (2, 3, 5),
            (4, 1, 5),
            (6, 1, 3), // 5 recorded at bucket 0 is now 3 buckets old
            (8, 2, 2),
            (9, 7, 7), // same bucket as 8: the larger wins
            (10, 0, 7),
            (14, 0, 0),
        ];
        for (t, v, want) in steps {
            w.record(s(t), v);
            assert_eq!(w.current(), want, "t={t}");
        }
    }

    proptest! {
        #[test]
        fn max_window_matches_brute_force(values in proptest::collection::vec(0i32..20, 1..60), size in 1u64..8) {
            let mut w = MaxTimeWindow::new(s(2 * size), s(2));
            for (k, &v) in values.iter().enumerate() {
                w.record(s(2 * k as u64), v);
                let lo = (k + 1).saturating_sub(size as usize);
                let want = *values[lo..=k].iter().max().unwrap();
                prop_assert_eq!(w.current(), want);
            }
        }

        #[test]
        fn linear_constant_is_constant(c in 0.0f64..1000.0, start in 0u64..100, len in 1u64..120, w in 1u64..90) {
            let mut b = Buckets::new(s(w), Aggregation::Linear);
            for t in start..start + len {
                b.record(s(t), c);
            }
            let got = b.window_average(s(start + len - 1));
            prop_assert!((got - c).abs() <= 1e-6 * (1.0 + c), "{} vs {}", got, c);
        }

        #[test]
        fn linear_full_window_is_mean_of_last_w(values in proptest::collection::vec(0.0f64..100.0, 1..80), w in 1u64..30) {
            let mut b = Buckets::new(s(w), Aggregation::Linear);
            for (t, &v) in values.iter().enumerate() {
                b.record(s(t as u64), v);
            }
            let n = values.len();
            let k = n.min(w as usize);
            let mean = values[n - k..].iter().sum::<f64>() / k as f64;
            let got = b.window_average(s(n as u64 - 1));
            prop_assert!((got - mean).abs() <= 2e-6, "{} vs {}", got, mean);
        }
    }
}
