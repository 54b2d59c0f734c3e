//! The reconciler contract shared by every controller: level-based, idempotent, and driven
//! by a work queue of `namespace/name` keys.

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use wisp_api::{config::Config, kinds::ResourceKind};
use wisp_runtime::SharedPlatform;
use wisp_store::{Store, StoreError};

use crate::{autoscaling::Scaling, routing::RoutingTable};

/// What every reconciler may use. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub store: Store,
    pub config: Arc<Config>,
    pub platform: SharedPlatform,
    /// The resolved routing published for the ingress (written by the route reconciler).
    pub routing: Arc<ArcSwap<RoutingTable>>,
    /// The autoscaling seam: the metric collector the data plane feeds, the activator's
    /// poke, and the KPA's decisions (replicas to run, activator in the path).
    pub scaling: Arc<Scaling>,
    /// Wall clock for timestamps and deadlines; injectable so tests are deterministic.
    pub clock: fn() -> DateTime<Utc>,
}

/// What the work queue should do with a key after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing more to do until something changes.
    Done,
    /// Reconcile again after this long even if nothing changes (deadlines, GC timers).
    RequeueAfter(Duration),
}

/// A reconcile that failed; the queue retries it with exponential back-off.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The store refused a write (most often a compare-and-swap conflict: retry).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored object did not decode into its type.
    #[error("decoding {what}: {source}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// Anything else, with a message saying what.
    #[error("{0}")]
    Other(String),
}

/// One controller. `reconcile` is synchronous (the store is synchronous SQLite) and is run
/// on the blocking pool, at most once at a time per key.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind whose `namespace/name` keys this reconciler receives.
    fn kind(&self) -> &'static ResourceKind;

    /// Makes the world match the object named by the key (which may no longer exist).
    /// Re-running it with nothing changed must change nothing.
    fn reconcile(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Result<Action, ReconcileError>;

    /// Extra keys of *this* reconciler's kind to enqueue when an object of `event_kind`
    /// changes (`obj` is its new state, or its last state when deleted), beyond what the
    /// runner derives by itself (the object's own key, its owner references and its
    /// `serving.knative.dev/{service,configuration,route}` labels). For example the route
    /// reconciler returns the routes that reference a changed configuration.
    ///
    /// Called on the watch task for every event: keep it cheap. It may read `ctx.store`
    /// (a quick indexed read is fine) but must not write.
    fn watches(
        &self,
        ctx: &Context,
        event_kind: &ResourceKind,
        obj: &serde_json::Value,
    ) -> Vec<(String, String)> {
        let _ = (ctx, event_kind, obj);
        Vec::new()
    }
}

/// The store key of a kind ([`ResourceKind::store_key`]).
pub fn resource(kind: &ResourceKind) -> String {
    kind.store_key()
}
