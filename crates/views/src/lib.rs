//! `wisp-views`: what wisp runs, shown as the Kubernetes objects a cluster would have —
//! Pods, Deployments, Services, Events, ServerlessServices and KIngresses — held in memory
//! and never stored.
//!
//! The controllers publish into the views as they reconcile (a revision's Deployment and
//! Pods from the replicas the platform reports, its ServerlessService from the
//! autoscaler's routing mode, a route's KIngress and Services from what the route
//! reconciler publishes for the ingress) and record [`events`]; the API serves them with
//! the same list, watch, Table and selector code as the stored kinds. Each change costs
//! the size of what changed ([`View::replace_set`]); nothing is rebuilt from everything.
//!
//! Start with [`View`], then [`Views`] and [`events::Recorder`].

pub mod events;
pub mod ingress;
mod packed;
pub mod view;

use std::sync::Arc;

use wisp_api::kinds::{self, ResourceKind};

pub use view::{EventType, Gone, View, ViewEvent};

/// Every view of one `wisp serve`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Views {
    pub pods: Arc<View>,
    pub deployments: Arc<View>,
    pub services: Arc<View>,
    pub serverless_services: Arc<View>,
    pub ingresses: Arc<View>,
    /// Events (core/v1; `events.k8s.io/v1` is the same events converted on the way out).
    pub events: Arc<events::Recorder>,
    /// The node every replica runs on: this machine's hostname (pods' `spec.nodeName`,
    /// the kubelet's events' `source.host`).
    pub node: &'static str,
}

impl Default for Views {
    fn default() -> Self {
        Views::new(chrono::Utc::now)
    }
}

impl Views {
    /// Empty views whose events are timed by `clock`.
    pub fn new(clock: fn() -> chrono::DateTime<chrono::Utc>) -> Views {
        let start = view::initial_resource_version();
        let view = |k: &'static ResourceKind| Arc::new(View::new(k, start));
        Views {
            pods: view(&kinds::POD),
            deployments: view(&kinds::DEPLOYMENT),
            services: view(&kinds::CORE_SERVICE),
            serverless_services: view(&kinds::SERVERLESS_SERVICE),
            ingresses: view(&kinds::INGRESS),
            events: Arc::new(events::Recorder::new(view(&kinds::EVENT), clock)),
            node: node_name(),
        }
    }

    /// The view holding a kind's objects (`events.k8s.io` Events are the core ones).
    pub fn of(&self, kind: &ResourceKind) -> Option<&Arc<View>> {
        match (kind.group, kind.plural) {
            ("", "pods") => Some(&self.pods),
            ("apps", "deployments") => Some(&self.deployments),
            ("", "services") => Some(&self.services),
            ("", "events") | ("events.k8s.io", "events") => Some(self.events.view()),
            ("networking.internal.knative.dev", "serverlessservices") => {
                Some(&self.serverless_services)
            }
            ("networking.internal.knative.dev", "ingresses") => Some(&self.ingresses),
            _ => None,
        }
    }
}

/// This machine's hostname, read once per process (and kept for its life: every view
/// names it), `localhost` if it cannot be read.
fn node_name() -> &'static str {
    static NODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NODE.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_kind_has_a_view() {
        let v = Views::default();
        for k in kinds::VIEWS {
            assert!(v.of(k).is_some(), "{}", k.kind);
        }
        assert!(v.of(&kinds::SERVICE).is_none());
    }
}
