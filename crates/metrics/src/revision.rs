//! Per-revision metrics: the attributes Knative puts on every revision's series, and the
//! data plane's request histograms, made once when a revision appears so that a request
//! only adds to atomics it already holds (no label lookup, no allocation).

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

use crate::histogram::{Histogram, Snapshot};
use crate::names;

/// Knative's revision attributes (`k8s.namespace.name`, `kn.service.name`,
/// `kn.configuration.name`, `kn.revision.name`), as Prometheus labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RevisionLabels {
    pub namespace: String,
    /// Empty for a revision no Service owns.
    pub service: String,
    pub configuration: String,
    pub revision: String,
}

impl EncodeLabelSet for RevisionLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (k, v) in [
            (names::LABEL_NAMESPACE, &self.namespace),
            (names::LABEL_SERVICE, &self.service),
            (names::LABEL_CONFIGURATION, &self.configuration),
            (names::LABEL_REVISION, &self.revision),
        ] {
            (k, v.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// A status code's class as a label value. Anything outside 100–599 counts as `5xx`
/// (Knative's rule for `response_code_class`).
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The index into [`CLASSES`] of `status`.
pub fn class_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100 - 1),
        _ => 4,
    }
}

/// One revision's request durations by status class (the data plane's
/// `http.server.request.duration`).
#[derive(Debug, Default)]
pub struct RequestMetrics {
    labels: RevisionLabels,
    by_class: [Histogram; 5],
}

impl RequestMetrics {
    pub fn new(labels: RevisionLabels) -> Self {
        RequestMetrics {
            labels,
            by_class: Default::default(),
        }
    }

    pub fn labels(&self) -> &RevisionLabels {
        &self.labels
    }

    /// One request answered with `status` after `took` (arrival to the body's end).
    pub fn record(&self, status: u16, took: Duration) {
        self.by_class[class_index(status)].observe(took);
    }

    /// The reading of one class (index into [`CLASSES`]).
    pub fn class(&self, i: usize) -> Snapshot {
        self.by_class[i].snapshot()
    }

    /// Every class together.
    pub fn total(&self) -> Snapshot {
        let mut s = Snapshot::default();
        for h in &self.by_class {
            s.add(&h.snapshot());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        for (status, class) in [
            (100, "1xx"),
            (200, "2xx"),
            (204, "2xx"),
            (302, "3xx"),
            (404, "4xx"),
            (499, "4xx"),
            (503, "5xx"),
            (599, "5xx"),
            (0, "5xx"),
            (99, "5xx"),
            (600, "5xx"),
        ] {
            assert_eq!(CLASSES[class_index(status)], class, "{status}");
        }
    }

    #[test]
    fn records_by_class_and_totals() {
        let m = RequestMetrics::new(RevisionLabels::default());
        m.record(200, Duration::from_millis(3));
        m.record(201, Duration::from_millis(3));
        m.record(503, Duration::from_secs(1));
        assert_eq!(m.class(1).count(), 2);
        assert_eq!(m.class(4).count(), 1);
        assert_eq!(m.total().count(), 3);
    }
}
