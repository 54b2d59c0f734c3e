//! The metric collector (Knative's `pkg/autoscaler/metrics/collector.go` and
//! `stats_scraper.go`): per revision, the [`MetricWindows`] the decider reads, fed once a
//! second with the revision's total of its scaling metric.
//!
//! What one second's report is made of ([`Sample`]) follows Knative's wire stats: every
//! replica's queue-proxy reports its time-weighted average concurrency and request count,
//! with the part that came through the activator apart; the activator reports the requests
//! it holds or proxies. Each request is counted once ([`observed_value`]):
//!
//! - concurrency = Σ replicas (`avg_concurrency − avg_proxied_concurrency`) + the
//!   activator's average concurrency;
//! - rps = Σ replicas (`request_count − proxied_request_count`) + the activator's request
//!   count, per second of the report.
//!
//! With `target-burst-capacity: -1` Knative stops scraping pods and counts only the
//! activator (which then carries every request); so does [`observed_value`].
//!
//! **Difference from Knative:** Knative scrapes a *sample* of the pods (at most 16) and
//! scales the sample's mean up to the population. In wisp every replica's queue runs
//! in-process and reports every second, so the collector sums the whole population — the
//! sample-size formula is not needed.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use crate::aggregation::{Aggregation, MetricWindows};
use crate::link::RoutingMode;
use crate::targets::{DeciderSpec, Metric};

/// One replica's figures for one report interval (Knative's `Stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodStat {
    /// Time-weighted average number of requests in flight.
    pub average_concurrency: f64,
    /// The part of `average_concurrency` that came through the activator.
    pub average_proxied_concurrency: f64,
    /// Requests that arrived during the interval.
    pub request_count: f64,
    /// The part of `request_count` that came through the activator.
    pub proxied_request_count: f64,
}

/// The activator's figures for one revision and one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActivatorStat {
    /// Average number of the revision's requests the activator holds or proxies.
    pub average_concurrency: f64,
    /// Requests the activator held or proxied during the interval.
    pub request_count: f64,
}

/// One revision's report for one interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Every replica that reported (empty when the revision has none).
    pub pods: Vec<PodStat>,
    /// The activator's figures.
    pub activator: ActivatorStat,
    /// The report interval (1 s in wisp and Knative); counts are divided by it for rps.
    pub period: Duration,
}

/// What wisp's in-process activator saw of one revision during one interval, before it is
/// attributed: the requests waiting in it now, the requests that arrived, and those it held.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActivatorReport {
    /// Requests held now (for a replica or for capacity).
    pub waiting: f64,
    /// Requests that arrived during the interval (every request passes the activator).
    pub requests: f64,
    /// Arrivals of the interval that had to wait.
    pub held: f64,
}

impl Sample {
    /// The sample of one revision from what its replica queues and the activator reported,
    /// attributed by the routing mode the KPA last decided. Every request passes wisp's
    /// in-process activator, so "proxied by the activator" follows Knative's SKS mode:
    ///
    /// - **Proxy** (at zero, too little burst capacity, TBC = -1): every request is the
    ///   activator's — it reports the requests waiting plus every replica's in-flight
    ///   average, and every arrival; the replicas contribute nothing of their own. With
    ///   TBC = -1 the collector counts only the activator, which then sees everything, as in
    ///   Knative.
    /// - **Serve**: the replicas report their own requests; the activator adds the requests
    ///   it holds and those it proxied after holding them (the queues' "proxied" part).
    ///
    /// Either way each request is counted once, and the concurrency total is
    /// Σ replicas' average concurrency + requests waiting in the activator.
    pub fn attribute(
        replicas: impl IntoIterator<Item = PodStat>,
        activator: ActivatorReport,
        mode: RoutingMode,
        period: Duration,
    ) -> Sample {
        let mut pods = Vec::new();
        let (mut proxied_conc, mut all_conc, mut proxied_count) = (0.0, 0.0, 0.0);
        for s in replicas {
            all_conc += s.average_concurrency;
            proxied_conc += s.average_proxied_concurrency;
            proxied_count += s.proxied_request_count;
            pods.push(match mode {
                // All of it came through the activator.
                RoutingMode::Proxy => PodStat {
                    average_proxied_concurrency: s.average_concurrency,
                    proxied_request_count: s.request_count,
                    ..s
                },
                RoutingMode::Serve => s,
            });
        }
        let activator = match mode {
            RoutingMode::Proxy => ActivatorStat {
                average_concurrency: activator.waiting + all_conc,
                request_count: activator.requests,
            },
            RoutingMode::Serve => ActivatorStat {
                average_concurrency: activator.waiting + proxied_conc,
                // Held arrivals of this interval are counted here; the queues count them
                // again as "proxied" when they reach a replica, which the collector
                // subtracts.
                request_count: activator.held.max(proxied_count),
            },
        };
        Sample {
            pods,
            activator,
            period,
        }
    }

    /// Whether anything reported at all: a replica (even an idle one: its zero counts, as
    /// a scraped idle pod does in Knative) or activator traffic.
    pub fn has_data(&self, scrapes_pods: bool) -> bool {
        (scrapes_pods && !self.pods.is_empty())
            || self.activator.average_concurrency > 0.0
            || self.activator.request_count > 0.0
    }
}

/// The revision-wide value of `metric` in one sample, each request counted once (module doc).
/// `scrapes_pods` is false for TBC = -1: only the activator counts.
pub fn observed_value(metric: Metric, scrapes_pods: bool, sample: &Sample) -> f64 {
    let pods = |f: fn(&PodStat) -> f64| -> f64 {
        if scrapes_pods {
            sample.pods.iter().map(f).map(|v| v.max(0.0)).sum()
        } else {
            0.0
        }
    };
    match metric {
        Metric::Concurrency => {
            pods(|p| p.average_concurrency - p.average_proxied_concurrency)
                + sample.activator.average_concurrency
        }
        Metric::Rps => {
            let secs = if sample.period.is_zero() {
                1.0
            } else {
                sample.period.as_secs_f64()
            };
            (pods(|p| p.request_count - p.proxied_request_count) + sample.activator.request_count)
                / secs
        }
    }
}

/// What a revision's windows were built for; a change resizes them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    metric: Metric,
    stable: Duration,
    panic: Duration,
    aggregation: Aggregation,
    scraping: bool,
}

impl Shape {
    fn of(spec: &DeciderSpec) -> Shape {
        Shape {
            metric: spec.metric,
            stable: spec.stable_window,
            panic: spec.panic_window,
            aggregation: spec.aggregation,
            scraping: spec.scrapes_pods(),
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    shape: Shape,
    windows: MetricWindows,
}

/// Every watched revision's metric windows, keyed by `K` (a revision key).
#[derive(Clone, Debug)]
pub struct Collector<K> {
    entries: HashMap<K, Entry>,
}

impl<K> Default for Collector<K> {
    fn default() -> Self {
        Collector {
            entries: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone> Collector<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts collecting for `key` with `spec`'s metric and windows, or applies a changed
    /// spec (windows resized keeping their history; a changed metric or algorithm starts
    /// empty). Knative creates a `Metric` object per revision for the same purpose.
    pub fn watch(&mut self, key: &K, spec: &DeciderSpec, now: Duration) {
        let shape = Shape::of(spec);
        match self.entries.get_mut(key) {
            Some(e) if e.shape == shape => {}
            Some(e) if e.shape.metric == shape.metric => {
                e.windows.update(
                    shape.stable,
                    shape.panic,
                    shape.aggregation,
                    shape.scraping,
                    now,
                );
                e.shape = shape;
            }
            _ => {
                self.entries.insert(
                    key.clone(),
                    Entry {
                        shape,
                        windows: MetricWindows::new(
                            shape.stable,
                            shape.panic,
                            shape.aggregation,
                            shape.scraping,
                        ),
                    },
                );
            }
        }
    }

    /// Stops collecting for `key` (its revision is gone).
    pub fn forget(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Whether `key` is watched.
    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// The watched keys.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    /// Records a revision-wide value at `now` (summed with other values of the same second).
    /// Returns false (and records nothing) for a key that is not watched.
    pub fn record(&mut self, key: &K, now: Duration, value: f64) -> bool {
        match self.entries.get_mut(key) {
            Some(e) => {
                e.windows.record(now, value);
                true
            }
            None => false,
        }
    }

    /// Records one report: the value of the revision's metric in `sample`, if the sample
    /// carries data (see [`Sample::has_data`]). Returns the recorded value.
    pub fn record_sample(&mut self, key: &K, now: Duration, sample: &Sample) -> Option<f64> {
        let e = self.entries.get_mut(key)?;
        if !sample.has_data(e.shape.scraping) {
            return None;
        }
        let v = observed_value(e.shape.metric, e.shape.scraping, sample);
        e.windows.record(now, v);
        Some(v)
    }

    /// The windows of `key`.
    pub fn windows(&self, key: &K) -> Option<&MetricWindows> {
        self.entries.get(key).map(|e| &e.windows)
    }

    /// `(stable, panic)` averages of `key` at `now`; None when not watched or no data.
    pub fn observe(&self, key: &K, now: Duration) -> Option<(f64, f64)> {
        self.windows(key)?.observe(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::config::AutoscalerConfig;

    #[test]
    fn attribute_counts_each_request_once_in_either_mode() {
        let pod = |c: f64, pc: f64, n: f64, pn: f64| PodStat {
            average_concurrency: c,
            average_proxied_concurrency: pc,
            request_count: n,
            proxied_request_count: pn,
        };
        let replicas = [pod(3.0, 1.0, 10.0, 2.0), pod(2.0, 0.0, 8.0, 0.0)];
        let activator = ActivatorReport {
            waiting: 4.0,
            requests: 20.0,
            held: 2.0,
        };
        let sample = |mode| Sample::attribute(replicas, activator, mode, Duration::from_secs(1));
        // (mode, scrapes pods, metric, want)
        let cases = [
            // 5 in flight at the replicas + 4 waiting, whoever reports them.
            (RoutingMode::Proxy, true, Metric::Concurrency, 9.0),
            (RoutingMode::Serve, true, Metric::Concurrency, 9.0),
            // Proxy: the activator alone sees everything (TBC = -1 scrapes no pod).
            (RoutingMode::Proxy, false, Metric::Concurrency, 9.0),
            (RoutingMode::Proxy, true, Metric::Rps, 20.0),
            // Serve: 16 direct arrivals + 2 held by the activator.
            (RoutingMode::Serve, true, Metric::Rps, 18.0),
        ];
        for (mode, scrapes, metric, want) in cases {
            let smp = sample(mode);
            assert_eq!(smp.pods.len(), 2);
            assert_eq!(
                observed_value(metric, scrapes, &smp),
                want,
                "{mode:?} {metric:?} scrapes={scrapes}"
            );
        }
        // Nothing reported: an empty sample.
        let none = Sample::attribute(
            [],
            ActivatorReport::default(),
            RoutingMode::Proxy,
            Duration::from_secs(1),
        );
        assert!(!none.has_data(true));
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn pod(c: f64, pc: f64, n: f64, pn: f64) -> PodStat {
        PodStat {
            average_concurrency: c,
            average_proxied_concurrency: pc,
            request_count: n,
            proxied_request_count: pn,
        }
    }

    fn sample(pods: Vec<PodStat>, ac: f64, an: f64) -> Sample {
        Sample {
            pods,
            activator: ActivatorStat {
                average_concurrency: ac,
                request_count: an,
            },
            period: s(1),
        }
    }

    #[test]
    fn each_request_counted_once() {
        // Two pods: 3 in flight (1 via the activator) and 2 (none via it); the activator
        // holds or proxies 4 (the 1 above among them).
        let smp = sample(
            vec![pod(3.0, 1.0, 30.0, 10.0), pod(2.0, 0.0, 20.0, 0.0)],
            4.0,
            15.0,
        );
        let cases = [
            ("concurrency", Metric::Concurrency, true, 2.0 + 2.0 + 4.0),
            ("rps", Metric::Rps, true, 20.0 + 20.0 + 15.0),
            ("TBC -1: activator only", Metric::Concurrency, false, 4.0),
            ("TBC -1 rps", Metric::Rps, false, 15.0),
        ];
        for (name, metric, scraping, want) in cases {
            assert_eq!(observed_value(metric, scraping, &smp), want, "{name}");
        }
        let two = Sample {
            period: s(2),
            ..smp.clone()
        };
        assert_eq!(observed_value(Metric::Rps, true, &two), 55.0 / 2.0);
        // A negative difference (rounding in a report) never subtracts.
        let odd = sample(vec![pod(1.0, 1.5, 0.0, 0.0)], 0.0, 0.0);
        assert_eq!(observed_value(Metric::Concurrency, true, &odd), 0.0);
    }

    #[test]
    fn has_data() {
        let idle = sample(vec![pod(0.0, 0.0, 0.0, 0.0)], 0.0, 0.0);
        assert!(idle.has_data(true), "an idle scraped pod reports zeros");
        assert!(!idle.has_data(false), "not scraped with TBC -1");
        assert!(!sample(vec![], 0.0, 0.0).has_data(true));
        assert!(sample(vec![], 1.0, 0.0).has_data(false));
    }

    #[test]
    fn windows_follow_the_spec() {
        let cfg = AutoscalerConfig::default();
        let mut spec = DeciderSpec::resolve(&Default::default(), 0, &cfg);
        spec.stable_window = s(6);
        spec.panic_window = s(1);
        let mut c: Collector<&str> = Collector::new();
        assert!(!c.record(&"a", s(0), 1.0), "unknown key");
        assert_eq!(c.observe(&"a", s(0)), None);
        c.watch(&"a", &spec, s(0));
        assert_eq!(c.observe(&"a", s(0)), None, "no data yet");
        for t in 0..6 {
            let smp = sample(vec![pod(10.0, 0.0, 0.0, 0.0)], 0.0, 0.0);
            assert_eq!(c.record_sample(&"a", s(t), &smp), Some(10.0));
        }
        assert_eq!(c.observe(&"a", s(5)), Some((10.0, 10.0)));
        // Nothing reported (no pods, no activator traffic): nothing recorded.
        assert_eq!(c.record_sample(&"a", s(6), &sample(vec![], 0.0, 0.0)), None);
        // Same spec again: history kept; a longer window keeps it too.
        c.watch(&"a", &spec, s(5));
        assert_eq!(c.windows(&"a").unwrap().stable().window(), s(6));
        spec.stable_window = s(12);
        c.watch(&"a", &spec, s(5));
        assert_eq!(c.windows(&"a").unwrap().stable().window(), s(12));
        assert!(c.observe(&"a", s(5)).is_some());
        // Another metric starts empty.
        spec.metric = Metric::Rps;
        c.watch(&"a", &spec, s(5));
        assert_eq!(c.observe(&"a", s(5)), None);
        assert_eq!(c.keys().count(), 1);
        c.forget(&"a");
        assert!(!c.contains(&"a"));
    }

    #[test]
    fn tbc_minus_one_means_zero_without_reports() {
        let cfg = AutoscalerConfig::default();
        let mut spec = DeciderSpec::resolve(&Default::default(), 0, &cfg);
        spec.target_burst_capacity = -1.0;
        let mut c: Collector<u32> = Collector::new();
        c.watch(&1, &spec, s(0));
        assert_eq!(c.observe(&1, s(3)), Some((0.0, 0.0)));
    }
}
