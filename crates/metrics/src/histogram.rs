//! A duration histogram the data plane can record into on every request without a lock:
//! fixed buckets (OpenTelemetry's default boundaries, which `http.server.request.duration`
//! advises), one relaxed atomic add for the bucket and one for the sum. prometheus-client's
//! own `Histogram` takes a mutex per observation; this one is only encoded through
//! prometheus-client ([`Snapshot::encode`]).
//!
//! [`Snapshot`]s subtract ([`Snapshot::since`]) so the console and `wisp top` can read the
//! last interval's rate and quantiles ([`Snapshot::quantile`], Prometheus'
//! `histogram_quantile` rule) from two readings.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{MetricEncoder, NoLabelSet};

/// OpenTelemetry's default explicit bucket boundaries, in seconds (the advisory boundaries
/// of `http.server.request.duration`, and of Knative's `kn.workqueue.*.duration`).
pub const DURATION_BOUNDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Buckets: one per boundary, then +Inf.
pub const BUCKETS: usize = DURATION_BOUNDS.len() + 1;

/// The boundaries in nanoseconds, so an observation compares integers.
const BOUNDS_NANOS: [u64; DURATION_BOUNDS.len()] = {
    let mut out = [0u64; DURATION_BOUNDS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = (DURATION_BOUNDS[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// The lock-free histogram (see the module doc).
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // `le` semantics: a value equal to a boundary belongs to that boundary's bucket.
        let i = BOUNDS_NANOS.partition_point(|&b| b < nanos);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts so far (each bucket read once; concurrent observations may land in the
    /// next reading, never half in this one's bucket and half in its sum by more than the
    /// few in flight).
    pub fn snapshot(&self) -> Snapshot {
        let mut counts = [0; BUCKETS];
        for (c, a) in counts.iter_mut().zip(&self.counts) {
            *c = a.load(Ordering::Relaxed);
        }
        Snapshot {
            counts,
            sum_nanos: self.sum_nanos.load(Ordering::Relaxed),
        }
    }
}

/// A reading of a [`Histogram`]: per-bucket (not cumulative) counts and the sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub counts: [u64; BUCKETS],
    pub sum_nanos: u64,
}

impl Snapshot {
    /// Observations in total.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The sum of the observations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_nanos as f64 / 1e9
    }

    /// What was observed after `earlier` (a reading of the same histogram).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut counts = [0; BUCKETS];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        Snapshot {
            counts,
            sum_nanos: self.sum_nanos.saturating_sub(earlier.sum_nanos),
        }
    }

    /// Adds `other`'s observations (several status classes into one revision total).
    pub fn add(&mut self, other: &Snapshot) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.sum_nanos += other.sum_nanos;
    }

    /// The `q` quantile (0 ≤ q ≤ 1) in seconds, as Prometheus' `histogram_quantile`
    /// estimates it: linear interpolation inside the bucket holding the rank, the first
    /// bucket starting at 0, and the highest finite boundary for a rank in +Inf. `None`
    /// without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total as f64;
        let mut below = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            let upto = below + n;
            if n > 0 && upto as f64 >= rank {
                let Some(&upper) = DURATION_BOUNDS.get(i) else {
                    return Some(DURATION_BOUNDS[DURATION_BOUNDS.len() - 1]);
                };
                let lower = if i == 0 { 0.0 } else { DURATION_BOUNDS[i - 1] };
                let within = (rank - below as f64) / n as f64;
                return Some(lower + (upper - lower) * within);
            }
            below = upto;
        }
        Some(DURATION_BOUNDS[DURATION_BOUNDS.len() - 1])
    }

    /// Writes this reading as a Prometheus histogram sample set.
    pub fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut buckets = [(0.0, 0u64); BUCKETS];
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = (
                DURATION_BOUNDS.get(i).copied().unwrap_or(f64::INFINITY),
                self.counts[i],
            );
        }
        encoder.encode_histogram::<NoLabelSet>(self.sum_seconds(), self.count(), &buckets, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn buckets_are_le() {
        let h = Histogram::default();
        for d in [ms(0), ms(5), ms(6), ms(10_000), ms(10_001), ms(60_000)] {
            h.observe(d);
        }
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2, "0 and exactly 5 ms are ≤ 0.005");
        assert_eq!(s.counts[1], 1);
        assert_eq!(s.counts[13], 1, "exactly 10 s");
        assert_eq!(s.counts[14], 2, "+Inf");
        assert_eq!(s.count(), 6);
        assert_eq!(
            s.sum_nanos,
            ms(5 + 6 + 10_000 + 10_001 + 60_000).as_nanos() as u64
        );
    }

    #[test]
    fn quantiles_interpolate_like_histogram_quantile() {
        let s = |pairs: &[(usize, u64)]| {
            let mut s = Snapshot::default();
            for &(i, n) in pairs {
                s.counts[i] = n;
            }
            s
        };
        // (bucket index and count pairs, q, expected seconds)
        type Case = (&'static [(usize, u64)], f64, Option<f64>);
        let cases: [Case; 8] = [
            (&[], 0.5, None),
            // 10 in (0, 5 ms]: the median is halfway.
            (&[(0, 10)], 0.5, Some(0.0025)),
            // 10 in (50, 75 ms]: p90 is 9/10 of the way.
            (&[(4, 10)], 0.9, Some(0.05 + 0.025 * 0.9)),
            // 50 fast, 50 in (0.25, 0.5]: p50 is the top of the first, p99 near 0.5.
            (&[(0, 50), (7, 50)], 0.5, Some(0.005)),
            (&[(0, 50), (7, 50)], 0.99, Some(0.25 + 0.25 * (49.0 / 50.0))),
            // Everything past 10 s: the highest finite boundary.
            (&[(14, 3)], 0.5, Some(10.0)),
            (&[(0, 1)], 1.5, None),
            (&[(0, 1)], 0.0, Some(0.0)),
        ];
        for (pairs, q, want) in cases {
            let got = s(pairs).quantile(q);
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-12, "{pairs:?} q{q}: {g} != {w}"),
                _ => assert_eq!(got, want, "{pairs:?} q{q}"),
            }
        }
    }

    #[test]
    fn since_and_add() {
        let h = Histogram::default();
        h.observe(ms(1));
        let a = h.snapshot();
        h.observe(ms(1));
        h.observe(ms(300));
        let d = h.snapshot().since(&a);
        assert_eq!(d.count(), 2);
        assert_eq!((d.counts[0], d.counts[7]), (1, 1));
        let mut total = a;
        total.add(&d);
        assert_eq!(total, h.snapshot());
    }
}
