//! What `/metrics` says about each revision besides its request histograms: the KPA's
//! figures (from [`Scaling`]'s reports) and the data plane's queues (from the activator's
//! [`Backends`]), read when Prometheus scrapes, so nothing is kept in sync in between.

use std::collections::HashMap;
use std::sync::Arc;

use wisp_activator::Backends;
use wisp_autoscaler::Metric;
use wisp_controller::autoscaling::{KpaReport, Scaling};
use wisp_metrics::prometheus_client::{
    collector::Collector, encoding::DescriptorEncoder, registry::Registry,
};
use wisp_metrics::{RevisionLabels, encode_gauges, encode_requests, names};
use wisp_runtime::RevisionKey;

/// The per-revision collector (see the module doc).
pub struct Revisions {
    pub backends: Arc<Backends>,
    pub scaling: Arc<Scaling>,
}

impl std::fmt::Debug for Revisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revisions").finish_non_exhaustive()
    }
}

/// One revision's scrape-time figures.
struct Row {
    labels: RevisionLabels,
    kpa: Option<KpaReport>,
    queue_depth: i64,
    held: i64,
    concurrency: f64,
}

impl Revisions {
    fn rows(&self) -> Vec<Row> {
        let stats = self.backends.stats().borrow().clone();
        let mut concurrency: HashMap<&RevisionKey, f64> = HashMap::new();
        for r in &stats.replicas {
            *concurrency.entry(&r.revision).or_default() += r.stat.average_concurrency;
        }
        for r in &stats.revisions {
            *concurrency.entry(&r.revision).or_default() += r.waiting as f64;
        }
        let mut reports: HashMap<RevisionKey, KpaReport> =
            self.scaling.reports().into_iter().collect();
        let mut rows: Vec<Row> = self
            .backends
            .all()
            .iter()
            .map(|b| {
                let key = b.key();
                let labels = b
                    .observe()
                    .metrics
                    .as_ref()
                    .map_or_else(|| labels_of(key), |m| m.labels().clone());
                let queue_depth: usize = b.known().iter().map(|q| q.queued()).sum();
                Row {
                    labels,
                    kpa: reports.remove(key),
                    queue_depth: i64::try_from(queue_depth).unwrap_or(i64::MAX),
                    held: i64::try_from(b.hold().waiting()).unwrap_or(i64::MAX),
                    concurrency: concurrency.get(key).copied().unwrap_or(0.0),
                }
            })
            .collect();
        // A PodAutoscaler whose revision has no backend yet still reports its decisions.
        rows.extend(reports.into_iter().map(|(key, kpa)| Row {
            labels: labels_of(&key),
            kpa: Some(kpa),
            queue_depth: 0,
            held: 0,
            concurrency: 0.0,
        }));
        rows
    }
}

fn labels_of(key: &RevisionKey) -> RevisionLabels {
    RevisionLabels {
        namespace: key.namespace.clone(),
        revision: key.name.clone(),
        ..RevisionLabels::default()
    }
}

/// A KPA gauge: its name, help, and the value of a report (None: not exported for it).
type KpaGauge = (&'static str, &'static str, fn(&KpaReport) -> Option<f64>);

const KPA_GAUGES: [KpaGauge; 14] = [
    (
        names::PODS_DESIRED,
        "Number of pods the autoscaler wants to allocate",
        |r| Some(f64::from(r.desired)),
    ),
    (
        names::PODS_REQUESTED,
        "Number of pods autoscaler requested from Kubernetes",
        |r| Some(f64::from(r.requested)),
    ),
    (
        names::PODS_COUNT,
        "Number of pods that are allocated currently",
        |r| Some(f64::from(r.ready)),
    ),
    (
        names::PODS_NOT_READY,
        "Number of pods that are not ready currently",
        |r| Some(f64::from(r.not_ready)),
    ),
    (
        names::PODS_PENDING,
        "Number of pods that are pending currently",
        |r| Some(f64::from(r.pending)),
    ),
    (
        names::PODS_TERMINATING,
        "Number of pods that are terminating currently",
        |r| Some(f64::from(r.terminating)),
    ),
    (
        names::CAPACITY_EXCESS,
        "Excess burst capacity observed over the stable window",
        |r| Some(r.excess_burst_capacity),
    ),
    (
        names::CONCURRENCY_STABLE,
        "Average of request count per observed pod over the stable window",
        |r| (r.metric == Metric::Concurrency).then_some(r.stable),
    ),
    (
        names::CONCURRENCY_PANIC,
        "Average of request count per observed pod over the panic window",
        |r| (r.metric == Metric::Concurrency).then_some(r.panic),
    ),
    (
        names::CONCURRENCY_TARGET,
        "The desired concurrent requests for each pod",
        |r| (r.metric == Metric::Concurrency).then_some(r.target),
    ),
    (
        names::RPS_STABLE,
        "Average of requests-per-second per observed pod over the stable window",
        |r| (r.metric == Metric::Rps).then_some(r.stable),
    ),
    (
        names::RPS_PANIC,
        "Average of requests-per-second per observed pod over the panic window",
        |r| (r.metric == Metric::Rps).then_some(r.panic),
    ),
    (
        names::RPS_TARGET,
        "The desired requests-per-second for each pod",
        |r| (r.metric == Metric::Rps).then_some(r.target),
    ),
    (
        names::PANIC_MODE,
        "If greater than 0 the autoscaler is in panic mode",
        |r| Some(if r.panic_mode { 1.0 } else { 0.0 }),
    ),
];

impl Collector for Revisions {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let backends = self.backends.all();
        encode_requests(
            &mut encoder,
            backends
                .iter()
                .filter_map(|b| b.observe().metrics.as_deref()),
        )?;
        let rows = self.rows();
        for (name, help, value) in &KPA_GAUGES {
            encode_gauges(
                &mut encoder,
                name,
                help,
                None,
                rows.iter()
                    .filter_map(|r| Some((&r.labels, value(r.kpa.as_ref()?)?))),
            )?;
        }
        encode_gauges(
            &mut encoder,
            names::REQUEST_CONCURRENCY,
            "Concurrent requests that are routed to the Activator",
            None,
            rows.iter().map(|r| (&r.labels, r.concurrency)),
        )?;
        encode_gauges(
            &mut encoder,
            names::QUEUE_DEPTH,
            "Number of current items in the queue proxy queue",
            None,
            rows.iter().map(|r| (&r.labels, r.queue_depth)),
        )?;
        encode_gauges(
            &mut encoder,
            names::ACTIVATOR_HELD,
            "Requests the activator holds now, waiting for a replica or for capacity",
            None,
            rows.iter().map(|r| (&r.labels, r.held)),
        )
    }
}

/// The registry `/metrics` encodes: the control plane's families and the revisions'.
pub fn registry(revisions: Revisions) -> Registry {
    let mut r = Registry::default();
    wisp_metrics::install().register(&mut r);
    r.register_collector(Box::new(revisions));
    r
}
