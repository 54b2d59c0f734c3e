//! The resolved routing the route reconciler publishes for the ingress: host → weighted
//! revision targets. Immutable snapshots swapped atomically, so the request path reads
//! them without locks.
//!
//! Here, in the pure API crate, so that the controller (which writes it) and the ingress
//! (which reads it) share it without the front door depending on the controller and its
//! store.

use std::collections::BTreeMap;

/// Whether a host is served on the external or the cluster-local listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Visibility {
    External,
    ClusterLocal,
}

/// One revision and its share of a host's traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionTarget {
    pub namespace: String,
    pub revision: String,
    /// 0–100; the targets of one host sum to 100.
    pub percent: u32,
}

/// Where requests for one host go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoute {
    pub namespace: String,
    pub route: String,
    /// The traffic tag this host serves, or None for the route's main host.
    pub tag: Option<String>,
    pub visibility: Visibility,
    /// Non-zero targets, in traffic order.
    pub targets: Vec<RevisionTarget>,
    /// For the main host: tag → targets, for `Knative-Serving-Tag` header routing.
    pub tag_targets: BTreeMap<String, Vec<RevisionTarget>>,
}

/// The whole routing table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingTable {
    /// Lower-case host (no port) → route.
    pub hosts: BTreeMap<String, HostRoute>,
}
