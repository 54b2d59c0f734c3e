//! The metrics arrow of `wisp serve`: once a second, the activator's report
//! ([`wisp_activator::Stats`]: every replica queue's stat and the activator's own figures)
//! becomes one [`Sample`] per revision in the KPA's collector ([`Scaling`]). How the
//! figures are attributed by the routing mode is the collector's rule
//! ([`Sample::attribute`]); this module only picks one revision's figures out of the report.

use std::{collections::BTreeMap, sync::Arc};

use wisp_activator::Stats;
use wisp_autoscaler::{ActivatorReport, PodStat, RoutingMode, Sample};
use wisp_controller::autoscaling::Scaling;
use wisp_runtime::RevisionKey;

/// The sample of one revision in one report.
pub fn sample_of(stats: &Stats, key: &RevisionKey, mode: RoutingMode) -> Sample {
    let replicas = stats
        .replicas
        .iter()
        .filter(|s| s.revision == *key)
        .map(|r| PodStat {
            average_concurrency: r.stat.average_concurrency,
            average_proxied_concurrency: r.stat.average_proxied_concurrency,
            request_count: r.stat.request_count,
            proxied_request_count: r.stat.proxied_request_count,
        });
    let activator = stats
        .revisions
        .iter()
        .find(|s| s.revision == *key)
        .map_or_else(ActivatorReport::default, |r| ActivatorReport {
            waiting: r.waiting as f64,
            requests: r.requests as f64,
            held: r.held as f64,
        });
    Sample::attribute(
        replicas,
        activator,
        mode,
        wisp_activator::backends::STATS_PERIOD,
    )
}

/// The report split per revision, in one pass (picking each revision's figures out of
/// the whole report instead was quadratic in the number of revisions).
fn by_revision(stats: &Stats) -> BTreeMap<&RevisionKey, Stats> {
    let mut out: BTreeMap<&RevisionKey, Stats> = BTreeMap::new();
    for r in &stats.replicas {
        out.entry(&r.revision).or_default().replicas.push(r.clone());
    }
    for r in &stats.revisions {
        out.entry(&r.revision)
            .or_default()
            .revisions
            .push(r.clone());
    }
    out
}

/// Copies every report into the collector until `shutdown` resolves.
pub async fn run(
    mut stats: tokio::sync::watch::Receiver<Arc<Stats>>,
    scaling: Arc<Scaling>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            changed = stats.changed() => if changed.is_err() { return },
        }
        let report = stats.borrow_and_update().clone();
        let feed = || {
            let now = scaling.now();
            for (key, part) in by_revision(&report) {
                let sample = sample_of(&part, key, scaling.mode(key));
                scaling.record(key, now, &sample);
            }
        };
        match wisp_metrics::control() {
            Some(c) => wisp_metrics::count_cpu(c.stats_cpu(), feed),
            None => feed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_activator::{ReplicaStat, RevisionStat};
    use wisp_autoscaler::{Metric, observed_value};
    use wisp_queue::Stat;

    fn stats() -> (Stats, RevisionKey) {
        let key = RevisionKey::new("default", "a-00001");
        let stat = |c: f64, pc: f64, n: f64, pn: f64| Stat {
            replica: "r".into(),
            average_concurrency: c,
            average_proxied_concurrency: pc,
            request_count: n,
            proxied_request_count: pn,
            window: std::time::Duration::from_secs(1),
        };
        let other = RevisionKey::new("default", "b-00001");
        let s = Stats {
            at: None,
            replicas: vec![
                ReplicaStat {
                    revision: key.clone(),
                    stat: stat(3.0, 1.0, 10.0, 2.0),
                },
                ReplicaStat {
                    revision: key.clone(),
                    stat: stat(2.0, 0.0, 8.0, 0.0),
                },
                ReplicaStat {
                    revision: other.clone(),
                    stat: stat(50.0, 0.0, 50.0, 0.0),
                },
            ],
            revisions: vec![RevisionStat {
                revision: key.clone(),
                waiting: 4,
                held: 2,
                requests: 20,
                ready_replicas: 2,
            }],
        };
        (s, key)
    }

    #[test]
    fn each_request_once_in_either_mode() {
        let (s, key) = stats();
        for mode in [RoutingMode::Proxy, RoutingMode::Serve] {
            let smp = sample_of(&s, &key, mode);
            assert_eq!(smp.pods.len(), 2);
            // 5 in flight at the replicas + 4 waiting.
            assert_eq!(
                observed_value(Metric::Concurrency, true, &smp),
                9.0,
                "{mode:?}"
            );
        }
        // Proxy: the activator alone sees everything (TBC = -1 scrapes no pod).
        let proxy = sample_of(&s, &key, RoutingMode::Proxy);
        assert_eq!(observed_value(Metric::Concurrency, false, &proxy), 9.0);
        assert_eq!(observed_value(Metric::Rps, true, &proxy), 20.0);
        // Serve: 16 direct arrivals + 2 held by the activator.
        let serve = sample_of(&s, &key, RoutingMode::Serve);
        assert_eq!(observed_value(Metric::Rps, true, &serve), 18.0);
        // Split per revision first (as `run` does): the same samples.
        let parts = by_revision(&s);
        assert_eq!(parts.len(), 2);
        for k in [&key, &RevisionKey::new("default", "b-00001")] {
            for mode in [RoutingMode::Proxy, RoutingMode::Serve] {
                for (metric, scrapes) in [(Metric::Concurrency, true), (Metric::Rps, true)] {
                    assert_eq!(
                        observed_value(metric, scrapes, &sample_of(&parts[k], k, mode)),
                        observed_value(metric, scrapes, &sample_of(&s, k, mode)),
                        "{k} {mode:?} {metric:?}"
                    );
                }
            }
        }
        // A revision unknown to the report: an empty sample.
        let none = sample_of(&s, &RevisionKey::new("x", "y"), RoutingMode::Proxy);
        assert!(!none.has_data(true));
    }
}
