//! # wisp-metrics — what wisp is doing, in Prometheus' text format
//!
//! Names and attributes follow Knative's OpenTelemetry metrics translated to Prometheus
//! ([`names`]). Three kinds of figures, each recorded where it is cheapest:
//!
//! - **per request** (the data plane): [`RequestMetrics`] — one lock-free [`Histogram`]
//!   per status class of each revision, made when the revision's backend is, and held by
//!   its queues, so a request adds to atomics it already has;
//! - **per revision state** (the KPA's decisions, replica counts, queue depths): read when
//!   `/metrics` is scraped, by a collector in the binary that sees the autoscaler and the
//!   data plane ([`encode_gauges`] writes one family);
//! - **control plane** ([`control`]): work queues, reconcile errors, store writes and API
//!   requests, as prometheus-client families behind a process-wide handle.

pub mod control;
pub mod histogram;
pub mod names;
pub mod revision;

pub use control::{
    ControlPlane, QueueMetrics, Seconds, control, count_cpu, install, thread_cpu_time,
};
pub use histogram::{Histogram, Snapshot};
pub use prometheus_client;
pub use revision::{CLASSES, RequestMetrics, RevisionLabels, class_index};

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabel, EncodeLabelSet, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// `Content-Type` of `/metrics` (Prometheus text format 0.0.4).
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Writes one per-revision gauge family: `name` with a sample per `(labels, value)`.
/// Nothing is written for an empty family (Prometheus needs no descriptor without samples).
pub fn encode_gauges<'a, V: EncodeGaugeValue + 'a>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (&'a RevisionLabels, V)>,
) -> Result<(), std::fmt::Error> {
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, value) in samples {
        family.encode_family(labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// A revision's labels plus the status class.
struct WithClass<'a>(&'a RevisionLabels, &'static str);

impl EncodeLabelSet for WithClass<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)?;
        (names::LABEL_CLASS, self.1).encode(encoder.encode_label())
    }
}

/// Writes the request histograms of every revision: one series per revision and status
/// class that has seen a request (classes never answered are left out, as an OpenTelemetry
/// exporter leaves out attribute sets never recorded).
pub fn encode_requests<'a>(
    encoder: &mut DescriptorEncoder<'_>,
    revisions: impl IntoIterator<Item = &'a RequestMetrics>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        names::REQUEST_DURATION,
        "Duration of HTTP server requests",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for r in revisions {
        for (i, class) in CLASSES.iter().enumerate() {
            let s = r.class(i);
            if s.count() == 0 {
                continue;
            }
            s.encode(family.encode_family(&WithClass(r.labels(), class))?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::collector::Collector;
    use prometheus_client::registry::Registry;

    use super::*;

    #[derive(Debug)]
    struct Fixed(Vec<RequestMetrics>);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
            encode_requests(&mut encoder, &self.0)?;
            encode_gauges(
                &mut encoder,
                names::PODS_DESIRED,
                "Number of pods the autoscaler wants to allocate",
                None,
                self.0.iter().map(|r| (r.labels(), 3i64)),
            )?;
            encode_gauges::<i64>(&mut encoder, "empty", "no samples", None, [])
        }
    }

    #[test]
    fn revision_families_encode_with_knative_labels() {
        let r = RequestMetrics::new(RevisionLabels {
            namespace: "default".into(),
            service: "hello".into(),
            configuration: "hello".into(),
            revision: "hello-00001".into(),
        });
        r.record(200, Duration::from_millis(20));
        r.record(503, Duration::from_millis(1));
        let mut reg = Registry::default();
        reg.register_collector(Box::new(Fixed(vec![r])));
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &reg).unwrap();
        let labels = "k8s_namespace_name=\"default\",kn_service_name=\"hello\",kn_configuration_name=\"hello\",kn_revision_name=\"hello-00001\"";
        for want in [
            "# TYPE http_server_request_duration_seconds histogram\n".to_string(),
            format!(
                "http_server_request_duration_seconds_count{{{labels},response_code_class=\"2xx\"}} 1\n"
            ),
            format!(
                "http_server_request_duration_seconds_bucket{{{labels},response_code_class=\"5xx\",le=\"0.005\"}} 1\n"
            ),
            format!("kn_revision_pods_desired{{{labels}}} 3\n"),
        ] {
            assert!(out.contains(&want), "missing {want:?} in\n{out}");
        }
        assert!(
            !out.contains("1xx"),
            "classes without requests are left out"
        );
        assert!(
            !out.contains("empty"),
            "a family without samples is left out"
        );
    }
}
