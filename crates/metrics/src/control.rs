//! The control plane's families: the controllers' work queues, reconcile errors, store
//! writes and API requests. These sites are spread over crates that know nothing of each
//! other, so their handles are process-wide: `wisp serve` [`install`]s them once, and every
//! site asks [`control`], which is `None` (one atomic load, nothing recorded) in tests and
//! when metrics are off. Per-revision figures are not here: the data plane holds its
//! handles per revision ([`crate::RequestMetrics`]).

use std::sync::{Arc, OnceLock, atomic::AtomicU64};
use std::time::Duration;

use prometheus_client::encoding::{
    EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
};
use prometheus_client::metrics::{
    MetricType, TypedMetric, counter::Counter, family::Family, gauge::Gauge,
};
use prometheus_client::registry::{Registry, Unit};

use crate::histogram::Histogram;
use crate::names;

/// A [`Histogram`] that can sit in a prometheus-client [`Family`].
#[derive(Clone, Debug, Default)]
pub struct SharedHistogram(Arc<Histogram>);

impl SharedHistogram {
    pub fn observe(&self, d: Duration) {
        self.0.observe(d);
    }

    pub fn get(&self) -> &Histogram {
        &self.0
    }
}

impl TypedMetric for SharedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SharedHistogram {
    fn encode(&self, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.snapshot().encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One label, `name="<queue>"` (or `reconciler="…"`).
type NameLabel = [(&'static str, String); 1];

/// A counter of seconds.
pub type Seconds = Counter<f64, AtomicU64>;

/// The CPU time the calling thread has used. Around synchronous work, the difference of
/// two readings is that work's CPU, whatever else the process does meanwhile (a wall
/// clock would count the waits and the other threads' turns).
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Runs `f` (synchronous work on this thread), adding the CPU it used to `seconds`.
pub fn count_cpu<R>(seconds: &Seconds, f: impl FnOnce() -> R) -> R {
    let start = thread_cpu_time();
    let out = f();
    seconds.inc_by(thread_cpu_time().saturating_sub(start).as_secs_f64());
    out
}

/// kube-apiserver's request labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ApiLabels {
    /// kube-apiserver's verb: GET, LIST, WATCH, CREATE, UPDATE, PATCH, DELETE,
    /// DELETECOLLECTION (or the HTTP method for a path that is not a resource).
    pub verb: &'static str,
    /// The resource's plural (`services`, …), or "" for discovery and other paths.
    pub resource: &'static str,
    pub code: u16,
}

impl EncodeLabelSet for ApiLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        ("verb", self.verb).encode(encoder.encode_label())?;
        ("resource", self.resource).encode(encoder.encode_label())?;
        ("code", self.code.to_string()).encode(encoder.encode_label())
    }
}

/// kube-apiserver's duration labels (no code, as its `apiserver_request_duration_seconds`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ApiDurationLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

impl EncodeLabelSet for ApiDurationLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        ("verb", self.verb).encode(encoder.encode_label())?;
        ("resource", self.resource).encode(encoder.encode_label())
    }
}

/// The control plane's families (see the module doc).
#[derive(Debug, Default)]
pub struct ControlPlane {
    workqueue_depth: Family<NameLabel, Gauge>,
    workqueue_adds: Family<NameLabel, Counter>,
    workqueue_retries: Family<NameLabel, Counter>,
    workqueue_process: Family<NameLabel, SharedHistogram>,
    reconcile_errors: Family<NameLabel, Counter>,
    reconcile_cpu: Family<NameLabel, Seconds>,
    stats_cpu: Seconds,
    store_writes: SharedHistogram,
    api_requests: Family<ApiLabels, Counter>,
    api_durations: Family<ApiDurationLabels, SharedHistogram>,
}

/// One work queue's handles, taken once when the queue is made.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub retries: Counter,
    pub process: SharedHistogram,
    pub errors: Counter,
    /// The CPU its reconciles used (on the reconcile thread, see [`count_cpu`]).
    pub cpu: Seconds,
}

impl ControlPlane {
    /// The handles of the queue `name` (its reconciler).
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let l = [(names::LABEL_QUEUE, name.to_string())];
        QueueMetrics {
            depth: self.workqueue_depth.get_or_create(&l).clone(),
            adds: self.workqueue_adds.get_or_create(&l).clone(),
            retries: self.workqueue_retries.get_or_create(&l).clone(),
            process: self.workqueue_process.get_or_create(&l).clone(),
            errors: self
                .reconcile_errors
                .get_or_create(&[("reconciler", name.to_string())])
                .clone(),
            cpu: self
                .reconcile_cpu
                .get_or_create(&[("reconciler", name.to_string())])
                .clone(),
        }
    }

    /// The counter of the autoscaler's stats path: the activator's report of every
    /// replica queue each second, and its split into the KPA's samples.
    pub fn stats_cpu(&self) -> &Seconds {
        &self.stats_cpu
    }

    /// One store transaction (a batch of writes committed together) took `d`.
    pub fn store_write(&self, d: Duration) {
        self.store_writes.observe(d);
    }

    /// One API request.
    pub fn api_request(&self, labels: ApiLabels, d: Duration) {
        self.api_durations
            .get_or_create(&ApiDurationLabels {
                verb: labels.verb,
                resource: labels.resource,
            })
            .observe(d);
        self.api_requests.get_or_create(&labels).inc();
    }

    /// Registers every family (they share state with `self`: clones of the same handles).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            names::WORKQUEUE_DEPTH,
            "Number of current items in the queue",
            self.workqueue_depth.clone(),
        );
        r.register(
            names::WORKQUEUE_ADDS,
            "Number of items added to the queue",
            self.workqueue_adds.clone(),
        );
        r.register(
            names::WORKQUEUE_RETRIES,
            "Number of items re-added to the queue",
            self.workqueue_retries.clone(),
        );
        r.register_with_unit(
            names::WORKQUEUE_PROCESS_DURATION,
            "How long in seconds processing an item from workqueue takes",
            Unit::Seconds,
            self.workqueue_process.clone(),
        );
        r.register(
            names::RECONCILE_ERRORS,
            "Reconciles that failed (each is retried with back-off)",
            self.reconcile_errors.clone(),
        );
        r.register_with_unit(
            names::RECONCILE_CPU,
            "CPU time the reconciles of each reconciler used (the podautoscaler's are the KPA: its decisions and scaling, every 2 s per revision with replicas)",
            Unit::Seconds,
            self.reconcile_cpu.clone(),
        );
        r.register_with_unit(
            names::AUTOSCALER_STATS_CPU,
            "CPU time of the autoscaler's stats path: the activator's report of every replica queue each second and its split into the KPA's samples",
            Unit::Seconds,
            self.stats_cpu.clone(),
        );
        r.register_with_unit(
            names::STORE_WRITE_DURATION,
            "How long one store transaction (a batch of writes committed together) takes",
            Unit::Seconds,
            self.store_writes.clone(),
        );
        r.register(
            names::API_REQUESTS,
            "Counter of apiserver requests broken out for each verb, resource and HTTP response code",
            self.api_requests.clone(),
        );
        r.register_with_unit(
            names::API_REQUEST_DURATION,
            "Response latency distribution in seconds for each verb and resource",
            Unit::Seconds,
            self.api_durations.clone(),
        );
    }
}

static CONTROL: OnceLock<ControlPlane> = OnceLock::new();

/// The process's control-plane families, once [`install`]ed.
pub fn control() -> Option<&'static ControlPlane> {
    CONTROL.get()
}

/// Turns control-plane recording on for this process (idempotent).
pub fn install() -> &'static ControlPlane {
    CONTROL.get_or_init(ControlPlane::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_with_knative_and_kube_names() {
        let c = ControlPlane::default();
        let q = c.queue("service");
        q.adds.inc();
        q.adds.inc();
        q.retries.inc();
        q.depth.set(3);
        q.process.observe(Duration::from_millis(2));
        q.cpu.inc_by(0.25);
        c.stats_cpu().inc_by(0.5);
        c.store_write(Duration::from_millis(4));
        c.api_request(
            ApiLabels {
                verb: "LIST",
                resource: "services",
                code: 200,
            },
            Duration::from_millis(1),
        );
        let mut r = Registry::default();
        c.register(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &r).unwrap();
        for want in [
            "kn_workqueue_adds_total{name=\"service\"} 2\n",
            "kn_workqueue_retries_total{name=\"service\"} 1\n",
            "kn_workqueue_depth{name=\"service\"} 3\n",
            "kn_workqueue_process_duration_seconds_bucket{name=\"service\",le=\"0.005\"} 1\n",
            "kn_workqueue_process_duration_seconds_count{name=\"service\"} 1\n",
            "wisp_reconcile_errors_total{reconciler=\"service\"} 0\n",
            "wisp_reconcile_cpu_seconds_total{reconciler=\"service\"} 0.25\n",
            "wisp_autoscaler_stats_cpu_seconds_total 0.5\n",
            "wisp_store_write_duration_seconds_count 1\n",
            "apiserver_request_total{verb=\"LIST\",resource=\"services\",code=\"200\"} 1\n",
            "apiserver_request_duration_seconds_count{verb=\"LIST\",resource=\"services\"} 1\n",
        ] {
            assert!(out.contains(want), "missing {want:?} in\n{out}");
        }
    }

    #[test]
    fn count_cpu_counts_the_work_of_this_thread_and_not_its_sleep() {
        let seconds = Seconds::default();
        let spun = count_cpu(&seconds, || {
            let start = thread_cpu_time();
            let mut x = 0u64;
            while thread_cpu_time() - start < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        });
        assert!(spun > 0);
        let busy = seconds.get();
        assert!(
            (0.02..0.5).contains(&busy),
            "busy 20 ms counted as {busy} s"
        );
        count_cpu(&seconds, || std::thread::sleep(Duration::from_millis(50)));
        let slept = seconds.get() - busy;
        assert!(slept < 0.01, "a 50 ms sleep counted as {slept} s of CPU");
    }
}
