//! The endpoint sync: keeps [`Backends`] in line with the store's revisions and the
//! platform's replicas.
//!
//! - Revisions: a full list at start, then the store's event log filtered to revisions
//!   (`subscribe()` + `events_since`); a revision that appears gets a backend with its
//!   queue settings, one that is deleted loses it (held requests end with 503).
//! - Replicas: every `Platform::changes()` key re-reads that revision's replicas; a lagged
//!   broadcast re-reads them all.
//! - Every [`RESYNC_PERIOD`] everything is re-read anyway: simple, and it repairs whatever
//!   a missed event could have left behind.

use std::{collections::HashSet, future::Future, sync::Arc, time::Duration};

use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, warn};
use wisp_api::{config::Config, serving::Revision};
use wisp_runtime::{RevisionKey, SharedPlatform};
use wisp_store::{EventType, Store, StoreError};

use crate::{backends::Backends, config::queue_config};

/// The store resource of revisions.
pub const REVISIONS: &str = "revisions.serving.knative.dev";

/// The safety-net full resync.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(5);

const EVENT_BATCH: usize = 500;

/// Runs the sync until `shutdown` resolves.
pub async fn sync_endpoints(
    backends: Arc<Backends>,
    store: Store,
    platform: SharedPlatform,
    config: Arc<Config>,
    shutdown: impl Future<Output = ()>,
) {
    let sync = Sync {
        backends,
        store,
        platform,
        config,
    };
    // Subscribe before listing, so no change falls in between.
    let mut changes = sync.platform.changes();
    let mut commits = sync.store.subscribe();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut last = loop {
        match sync.full().await {
            Ok(rv) => break rv,
            Err(e) => {
                warn!(error = %e, "endpoint sync: listing revisions failed; retrying");
                tokio::select! {
                    _ = &mut shutdown => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    let mut tick = tokio::time::interval(RESYNC_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut platform_open = true;
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            change = changes.recv(), if platform_open => match change {
                Ok(key) => sync.replicas(&key),
                Err(RecvError::Lagged(n)) => {
                    debug!(missed = n, "endpoint sync: platform changes lagged; re-reading all");
                    for b in sync.backends.all() {
                        sync.replicas(b.key());
                    }
                }
                Err(RecvError::Closed) => platform_open = false,
            },
            changed = commits.changed() => {
                if changed.is_err() {
                    return;
                }
                commits.borrow_and_update();
                match sync.events(last).await {
                    Ok(rv) => last = rv,
                    Err(StoreError::Gone { .. }) => match sync.full().await {
                        Ok(rv) => last = rv,
                        Err(e) => warn!(error = %e, "endpoint sync: resync failed"),
                    },
                    Err(e) => warn!(error = %e, "endpoint sync: reading events failed"),
                }
            }
            _ = tick.tick() => match sync.full().await {
                Ok(rv) => last = last.max(rv),
                Err(e) => warn!(error = %e, "endpoint sync: resync failed"),
            },
        }
    }
}

struct Sync {
    backends: Arc<Backends>,
    store: Store,
    platform: SharedPlatform,
    config: Arc<Config>,
}

impl Sync {
    /// Re-reads one revision's replicas from the platform.
    fn replicas(&self, key: &RevisionKey) {
        if let Some(b) = self.backends.get(&key.namespace, &key.name) {
            b.set_replicas(&self.platform.replicas(key));
        }
    }

    /// A backend for a stored revision (created if new, with its replicas read at once).
    fn revision(&self, obj: &serde_json::Value) {
        let rev: Revision = match serde_json::from_value(obj.clone()) {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "endpoint sync: undecodable revision skipped");
                return;
            }
        };
        let key = RevisionKey::new(&rev.metadata.namespace, &rev.metadata.name);
        if rev.metadata.deletion_timestamp.is_some() {
            self.backends.remove(&key);
            return;
        }
        let (b, created) = self
            .backends
            .ensure(&key, &queue_config(&rev, &self.config.defaults));
        if created {
            debug!(revision = %key, "endpoint sync: backend added");
            b.set_replicas(&self.platform.replicas(&key));
        }
    }

    /// Lists every revision: adds the missing backends, removes the stale ones, re-reads
    /// every replica set. Returns the store revision the list is consistent with.
    async fn full(&self) -> Result<u64, StoreError> {
        let store = self.store.clone();
        let (items, rv) = blocking(move || store.list(REVISIONS, None, None)).await?;
        let mut keys = HashSet::new();
        for obj in &items {
            self.revision(obj);
            let m = &obj["metadata"];
            keys.insert(RevisionKey::new(
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or(""),
            ));
        }
        for b in self.backends.all() {
            if keys.contains(b.key()) {
                self.replicas(b.key());
            } else {
                debug!(revision = %b.key(), "endpoint sync: backend removed");
                self.backends.remove(b.key());
            }
        }
        Ok(rv)
    }

    /// Applies the revision events after `from`; returns the new position.
    async fn events(&self, mut from: u64) -> Result<u64, StoreError> {
        loop {
            let store = self.store.clone();
            let events =
                blocking(move || store.events_since(from, Some(REVISIONS), None, EVENT_BATCH))
                    .await?;
            for ev in &events {
                match ev.event_type {
                    EventType::Deleted => {
                        let m = &ev.object["metadata"];
                        let key = RevisionKey::new(
                            m["namespace"].as_str().unwrap_or(""),
                            m["name"].as_str().unwrap_or(""),
                        );
                        debug!(revision = %key, "endpoint sync: backend removed");
                        self.backends.remove(&key);
                    }
                    _ => self.revision(&ev.object),
                }
                from = from.max(ev.resource_version);
            }
            if events.len() < EVENT_BATCH {
                return Ok(from);
            }
        }
    }
}

/// Runs a store call on the blocking pool (the store is synchronous SQLite).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
