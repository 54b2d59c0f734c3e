//! The last 15 minutes of every revision, sampled every 2 s (the KPA's tick): replicas
//! (ready and requested), the KPA's observed stable/panic values and panic mode, and the
//! request rate and latency quantiles over the last 10 s from the revision's request
//! histograms. The console charts it; `wisp top` reads the newest point.
//!
//! Memory and time are spent only on revisions that did something: a revision whose every
//! point in the window would be zero keeps no points, and one that never had a request
//! nor a busy KPA is not even read.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use wisp_activator::Backends;
use wisp_controller::autoscaling::{KpaReport, Scaling};
use wisp_metrics::Snapshot;
use wisp_runtime::RevisionKey;

/// How often a point is taken.
pub const PERIOD: Duration = Duration::from_secs(2);
/// How far back the charts go.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Points kept per revision.
const POINTS: usize = (WINDOW.as_secs() / PERIOD.as_secs()) as usize;
/// Rates and quantiles are over this many periods (10 s).
const RATE_PERIODS: usize = 5;

/// One sample of one revision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    /// Unix time, milliseconds.
    pub t: i64,
    pub ready: u32,
    /// Replicas the KPA asks for (the PA's desiredScale; 0 while unknown).
    pub desired: u32,
    /// The KPA's stable and panic values of its metric (total over the revision).
    pub stable: f32,
    pub panic: f32,
    /// The target per replica.
    pub target: f32,
    pub panic_mode: bool,
    /// Requests per second over the last 10 s.
    pub rps: f32,
    /// Latency quantiles over the last 10 s, in milliseconds (None: no request).
    pub p50: Option<f32>,
    pub p95: Option<f32>,
    pub p99: Option<f32>,
}

impl Point {
    /// Whether the point shows nothing at all (an idle revision at zero).
    fn is_idle(&self) -> bool {
        self.ready == 0
            && self.desired == 0
            && self.stable == 0.0
            && self.panic == 0.0
            && self.rps == 0.0
            && self.p50.is_none()
    }
}

/// One revision's series.
#[derive(Debug, Default)]
struct Series {
    points: VecDeque<Point>,
    /// The histogram's cumulative readings of the last periods (oldest first).
    readings: VecDeque<(i64, Snapshot)>,
    /// The revision's KPA scales by this metric.
    rps_metric: bool,
}

/// Every revision's series.
#[derive(Debug, Default)]
pub struct History {
    series: Mutex<HashMap<RevisionKey, Series>>,
}

/// The figures of one revision at one instant, before they become a point.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    pub kpa: Option<KpaReport>,
    /// The revision's request histogram (all classes), cumulative.
    pub requests: Snapshot,
}

/// Makes the point at `t` (unix ms) from a reading and the earlier histogram readings
/// (oldest first, at most [`RATE_PERIODS`]).
pub fn point(t: i64, r: &Reading, earlier: Option<&(i64, Snapshot)>) -> Point {
    let kpa = r.kpa.unwrap_or_default();
    let mut p = Point {
        t,
        ready: kpa.ready,
        desired: u32::try_from(kpa.requested).unwrap_or(0),
        stable: kpa.stable as f32,
        panic: kpa.panic as f32,
        target: kpa.target as f32,
        panic_mode: kpa.panic_mode,
        ..Point::default()
    };
    if let Some((t0, s0)) = earlier {
        let window = r.requests.since(s0);
        let secs = (t - t0) as f64 / 1000.0;
        if secs > 0.0 {
            p.rps = (window.count() as f64 / secs) as f32;
        }
        let ms = |q: f64| window.quantile(q).map(|s| (s * 1000.0) as f32);
        (p.p50, p.p95, p.p99) = (ms(0.5), ms(0.95), ms(0.99));
    }
    p
}

impl History {
    /// Takes one point of every revision read at `t` (unix ms); a revision with a series
    /// that is not read is gone (see [`read`]: one with a series is always read).
    pub fn sample(&self, t: i64, readings: Vec<(RevisionKey, Reading)>) {
        let mut all = wisp_sync::lock(&self.series);
        let live: std::collections::HashSet<&RevisionKey> =
            readings.iter().map(|(k, _)| k).collect();
        all.retain(|k, _| live.contains(k));
        for (key, r) in readings {
            let s = all.entry(key).or_default();
            let p = point(t, &r, s.readings.front());
            s.rps_metric = r
                .kpa
                .is_some_and(|k| k.metric == wisp_autoscaler::Metric::Rps);
            s.readings.push_back((t, r.requests));
            if s.readings.len() > RATE_PERIODS {
                s.readings.pop_front();
            }
            if p.is_idle() && s.points.iter().all(Point::is_idle) {
                s.points.clear();
                continue;
            }
            s.points.push_back(p);
            if s.points.len() > POINTS {
                s.points.pop_front();
            }
        }
    }

    /// A revision's points (oldest first) and whether it scales by rps.
    pub fn series(&self, key: &RevisionKey) -> (Vec<Point>, bool) {
        wisp_sync::lock(&self.series)
            .get(key)
            .map(|s| (s.points.iter().copied().collect(), s.rps_metric))
            .unwrap_or_default()
    }

    /// The revisions that have a series.
    pub fn keys(&self) -> std::collections::HashSet<RevisionKey> {
        wisp_sync::lock(&self.series).keys().cloned().collect()
    }

    /// Every revision's newest point (an idle revision: none).
    pub fn latest(&self) -> HashMap<RevisionKey, Point> {
        wisp_sync::lock(&self.series)
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), *s.points.back()?)))
            .collect()
    }
}

/// What the data plane and the KPA say now about the revisions worth a point: those that
/// have a series, had a request since wisp started, or whose KPA is not at rest. The
/// others — with ten thousand services, nearly all — cost an atomic load each: no key is
/// copied and nothing is kept for them ("nothing periodic per idle object").
pub fn read(
    backends: &Backends,
    scaling: &Scaling,
    history: &History,
) -> Vec<(RevisionKey, Reading)> {
    let tracked = history.keys();
    let mut reports: HashMap<RevisionKey, KpaReport> = scaling
        .reports_where(|k, r| !r.at_rest() || tracked.contains(k))
        .into_iter()
        .collect();
    let mut out = Vec::new();
    backends.for_each(|b| {
        let key = b.key();
        let kpa = reports.remove(key);
        if kpa.is_none() && b.requests_total() == 0 && !tracked.contains(key) {
            return;
        }
        let requests = b
            .observe()
            .metrics
            .as_ref()
            .map(|m| m.total())
            .unwrap_or_default();
        out.push((key.clone(), Reading { kpa, requests }));
    });
    out
}

/// Samples every [`PERIOD`] until `stop` turns true.
pub async fn run(
    history: std::sync::Arc<History>,
    backends: std::sync::Arc<Backends>,
    scaling: std::sync::Arc<Scaling>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let t = chrono::Utc::now().timestamp_millis();
        let readings = read(&backends, &scaling, &history);
        history.sample(t, readings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RevisionKey {
        RevisionKey::new("default", "hello-00001")
    }

    fn reading(ready: u32, requests: &[(usize, u64)]) -> Reading {
        let mut s = Snapshot::default();
        for &(i, n) in requests {
            s.counts[i] = n;
        }
        Reading {
            kpa: Some(KpaReport {
                ready,
                requested: i32::try_from(ready).unwrap(),
                ..KpaReport::default()
            }),
            requests: s,
        }
    }

    #[test]
    fn rates_and_quantiles_come_from_the_histograms_window() {
        // 20 requests ≤ 5 ms in the 2 s since the earlier reading: 10 rps, p50 2.5 ms.
        let earlier = (0, Snapshot::default());
        let p = point(2000, &reading(1, &[(0, 20)]), Some(&earlier));
        assert_eq!((p.ready, p.desired, p.rps), (1, 1, 10.0));
        assert_eq!(p.p50, Some(2.5));
        assert_eq!(p.p99, Some(4.95));
        // No earlier reading: no rate yet.
        let p = point(2000, &reading(1, &[(0, 20)]), None);
        assert_eq!((p.rps, p.p50), (0.0, None));
    }

    #[test]
    fn idle_revisions_keep_nothing_and_gone_ones_are_dropped() {
        let h = History::default();
        let idle = || vec![(key(), reading(0, &[]))];
        h.sample(0, idle());
        h.sample(2000, idle());
        assert!(h.series(&key()).0.is_empty(), "idle: no points");
        assert!(h.latest().is_empty());

        h.sample(4000, vec![(key(), reading(1, &[(0, 10)]))]);
        h.sample(6000, vec![(key(), reading(1, &[(0, 30)]))]);
        let (points, rps) = h.series(&key());
        assert!(!rps);
        assert_eq!(points.len(), 2);
        // The rate is over the readings kept (up to 10 s back): 30 requests since t=0.
        assert_eq!(points[1].rps, 5.0);
        assert_eq!(h.latest()[&key()].t, 6000);
        // Once something happened, idle points are kept (the chart goes back to zero).
        h.sample(8000, vec![(key(), reading(0, &[(0, 30)]))]);
        assert_eq!(h.series(&key()).0.len(), 3);

        h.sample(10_000, vec![]);
        assert!(h.series(&key()).0.is_empty(), "the revision is gone");
    }

    #[test]
    fn only_revisions_that_did_something_are_read() {
        let scaling = std::sync::Arc::new(Scaling::default());
        let backends = Backends::new(1, scaling.clone());
        let cfg = wisp_queue::QueueConfig {
            container_concurrency: 0,
            timeout: Duration::from_secs(300),
            response_start_timeout: None,
            idle_timeout: None,
            protocol: wisp_net::Protocol::Http1,
        };
        let key = |n: &str| RevisionKey::new("default", n);
        for n in ["idle", "busy-kpa", "other"] {
            backends.ensure(&key(n), &cfg);
        }
        // At rest: no replica, nothing wanted, nothing seen.
        scaling.report(
            &key("idle"),
            KpaReport {
                requested: 0,
                desired: 0,
                ..KpaReport::default()
            },
        );
        scaling.report(
            &key("busy-kpa"),
            KpaReport {
                requested: 1,
                ready: 1,
                ..KpaReport::default()
            },
        );
        let h = History::default();
        let names = |r: &[(RevisionKey, Reading)]| {
            let mut n: Vec<String> = r.iter().map(|(k, _)| k.name.clone()).collect();
            n.sort();
            n
        };
        let r = read(&backends, &scaling, &h);
        // Neither "idle" (at rest) nor "other" (no report, no request) is read.
        assert_eq!(names(&r), ["busy-kpa"]);
        // A revision with a series is read even once it is idle again (its chart goes back
        // to zero), and dropped when its backend is gone.
        h.sample(0, r);
        scaling.report(&key("busy-kpa"), KpaReport::default());
        assert_eq!(names(&read(&backends, &scaling, &h)), ["busy-kpa"]);
        backends.remove(&key("busy-kpa"));
        h.sample(2000, read(&backends, &scaling, &h));
        assert!(h.keys().is_empty());
    }

    #[test]
    fn the_window_is_bounded() {
        let h = History::default();
        for i in 0..(POINTS as i64 + 10) {
            h.sample(i * 2000, vec![(key(), reading(1, &[]))]);
        }
        let (points, _) = h.series(&key());
        assert_eq!(points.len(), POINTS);
        assert_eq!(points[0].t, 20_000);
    }
}
