//! What the activator and the KPA say to each other, per revision: the activator pokes the
//! KPA when a request has to wait for a replica, and reads the routing mode the KPA last
//! decided (Knative's ServerlessService mode: whether the activator is in the path). In
//! Knative the poke is the activator's stat sent for the first request of an idle revision
//! (`pkg/activator/handler`), and the mode is the SKS the KPA reconciles
//! (`pkg/reconciler/autoscaling/kpa/kpa.go`). In wisp both run in one process, so the link is
//! a trait: the activator holds an `Arc<dyn ActivatorLink<K>>`, the controller's `Scaling`
//! implements it, and a test implements it in a few lines.

/// Where a revision's requests go (Knative's ServerlessService mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RoutingMode {
    /// Through the activator's capacity-aware hold/throttle path (scaled to zero, too
    /// little burst capacity, no ready replica, or TBC = -1).
    #[default]
    Proxy,
    /// Straight to a replica's queue.
    Serve,
}

/// The activator's view of the KPA, for revisions named by `K`.
pub trait ActivatorLink<K>: Send + Sync {
    /// A request for `revision` has to wait (no ready replica, or no free slot while the
    /// activator throttles): ask for replicas now instead of at the next tick.
    fn poke(&self, revision: &K);

    /// The routing mode the KPA last decided for `revision` ([`RoutingMode::Proxy`] before
    /// its first decision). Read once per request, so it must be cheap.
    fn mode(&self, revision: &K) -> RoutingMode;
}
