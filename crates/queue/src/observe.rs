//! What a revision's requests report besides the autoscaler's stats: their duration by
//! status class (the revision's [`RequestMetrics`]) and the request log
//! ([`RevisionLog`]). One [`Observe`] per revision, shared by the activator and every
//! replica queue of the revision; everything in it is optional, and a request pays one
//! branch per part that is off.

use std::sync::Arc;

use hyper::StatusCode;
use tokio::time::Instant;
use wisp_metrics::RequestMetrics;

use crate::request_log::RevisionLog;

/// A revision's request observers (see the module doc).
#[derive(Debug, Default)]
pub struct Observe {
    /// `http.server.request.duration` of the revision.
    pub metrics: Option<Arc<RequestMetrics>>,
    /// The revision's request log (`logging.request-log-template`).
    pub log: Option<Arc<RevisionLog>>,
}

impl Observe {
    /// Whether anything records requests (the activator then notes their arrival).
    pub fn is_on(&self) -> bool {
        self.metrics.is_some() || self.log.is_some()
    }

    /// A request answered at once, with no body to wait for (a synthetic response).
    pub fn answered(&self, status: StatusCode, arrived: Option<Instant>, now: Instant) {
        self.finished(status.as_u16(), arrived.unwrap_or(now), now);
    }

    /// A request that arrived at `arrived` and whose response ended at `now`.
    pub fn finished(&self, status: u16, arrived: Instant, now: Instant) {
        if let Some(m) = &self.metrics {
            m.record(status, now.saturating_duration_since(arrived));
        }
    }
}
