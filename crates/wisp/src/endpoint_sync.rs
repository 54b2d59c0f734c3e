//! The endpoint sync: keeps the activator's [`Backends`] in line with the store's
//! revisions and the platform's replicas. It lives in the binary, which assembles the
//! parts, so that the data plane's crates (activator, ingress) do not link the store.
//!
//! - Revisions: a [`wisp_store::Watch`] of the store's revisions: a full list at start,
//!   then every change; a revision that appears gets a backend with its queue settings, one
//!   that is deleted loses it (held requests end with 503). A list (at start, or when the
//!   log was compacted past the watch) replaces what was known.
//! - Replicas: every `Platform::changes()` key re-reads that revision's replicas; a lagged
//!   broadcast re-reads them all.
//! - Every [`RESYNC_PERIOD`] the watch is started again from a fresh list: simple, and it
//!   repairs whatever a missed event could have left behind. Rarely: a list of ten
//!   thousand revisions is work that grows with the number of services, and the watch
//!   itself misses nothing (it re-lists on its own when the log was compacted past it).

use std::{collections::HashSet, future::Future, sync::Arc, time::Duration};

use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, warn};
use wisp_api::{config::LiveConfig, serving::Revision};
use wisp_runtime::{RevisionKey, SharedPlatform};
use wisp_store::{EventType, OnGone, RawEvent, Store, Watch, WatchBatch, WatchSpec};

use wisp_activator::{Backends, config::queue_config};

/// The safety-net full resync.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(300);

/// Pause before retrying after the store failed to answer.
const RETRY: Duration = Duration::from_secs(1);

/// Runs the sync until `shutdown` resolves.
pub async fn sync_endpoints(
    backends: Arc<Backends>,
    store: Store,
    platform: SharedPlatform,
    config: LiveConfig,
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
    let mut shutdown = std::pin::pin!(shutdown);
    let mut watch = tokio::select! {
        _ = &mut shutdown => return,
        w = sync.watch() => w,
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
            batch = watch.next() => match batch {
                Ok(WatchBatch::Listed { events, .. }) => sync.listed(&events),
                Ok(WatchBatch::Changed(events)) => sync.changed(&events),
                Err(e) => {
                    warn!(error = %e, "endpoint sync: reading revisions failed; retrying");
                    tokio::select! {
                        _ = &mut shutdown => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            },
            _ = tick.tick() => {
                watch = tokio::select! {
                    _ = &mut shutdown => return,
                    w = sync.watch() => w,
                };
            }
        }
    }
}

struct Sync {
    backends: Arc<Backends>,
    store: Store,
    platform: SharedPlatform,
    config: LiveConfig,
}

impl Sync {
    /// A watch of the revisions from a fresh list (its first batch), retried until the
    /// store answers. Raw: each revision is parsed as it is applied, so a list of ten
    /// thousand is never held parsed at once (as `serde_json::Value`s it peaked wisp's
    /// RSS at 650 MiB every [`RESYNC_PERIOD`]).
    async fn watch(&self) -> Watch<RawEvent> {
        loop {
            let spec =
                WatchSpec::new([wisp_api::kinds::REVISION.store_key()]).on_gone(OnGone::Relist);
            match self.store.watch(spec).await {
                Ok(w) => return w,
                Err(e) => {
                    warn!(error = %e, "endpoint sync: listing revisions failed; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Re-reads one revision's replicas from the platform.
    fn replicas(&self, key: &RevisionKey) {
        if let Some(b) = self.backends.get(&key.namespace, &key.name) {
            b.set_replicas(&self.platform.replicas(key));
        }
    }

    /// A backend for a stored revision (created if new, with its replicas read at once).
    fn revision(&self, key: &RevisionKey, text: &str) {
        // Revisions are immutable: a known one has nothing new to say (its status changes
        // are the controller's business), and decoding it again would cost every event.
        if self.backends.get(&key.namespace, &key.name).is_some() {
            return;
        }
        let rev: Revision = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "endpoint sync: undecodable revision skipped");
                return;
            }
        };
        let key = RevisionKey::new(&rev.metadata.namespace, &rev.metadata.name);
        let label = |k: &str| rev.metadata.labels.get(k).cloned().unwrap_or_default();
        let labels = wisp_metrics::RevisionLabels {
            namespace: key.namespace.clone(),
            service: label(wisp_api::labels::SERVICE),
            configuration: label(wisp_api::labels::CONFIGURATION),
            revision: key.name.clone(),
        };
        let (b, created) = self.backends.ensure_labelled(
            &key,
            &queue_config(&rev, &self.config.load().defaults),
            labels,
        );
        if created {
            debug!(revision = %key, "endpoint sync: backend added");
            b.set_replicas(&self.platform.replicas(&key));
        }
    }

    /// Every stored revision: adds the missing backends, removes the stale ones, re-reads
    /// every replica set.
    fn listed(&self, events: &[RawEvent]) {
        let mut keys = HashSet::new();
        for ev in events {
            let Some(key) = key_of(&ev.object) else {
                continue;
            };
            self.revision(&key, &ev.object);
            keys.insert(key);
        }
        for b in self.backends.all() {
            if keys.contains(b.key()) {
                self.replicas(b.key());
            } else {
                debug!(revision = %b.key(), "endpoint sync: backend removed");
                self.backends.remove(b.key());
            }
        }
    }

    /// Applies revision events in order.
    fn changed(&self, events: &[RawEvent]) {
        for ev in events {
            let Some(key) = key_of(&ev.object) else {
                continue;
            };
            match ev.event_type {
                EventType::Deleted => {
                    debug!(revision = %key, "endpoint sync: backend removed");
                    self.backends.remove(&key);
                }
                EventType::Added | EventType::Modified => self.revision(&key, &ev.object),
            }
        }
    }
}

/// The revision a stored object's text is (its metadata's namespace and name; the rest is
/// skipped, not parsed), or `None`, logged, if the text is not an object with metadata.
fn key_of(text: &str) -> Option<RevisionKey> {
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(borrow)]
        metadata: Meta<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow, default)]
        namespace: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        name: std::borrow::Cow<'a, str>,
    }
    match serde_json::from_str::<Object<'_>>(text) {
        Ok(o) => Some(RevisionKey::new(o.metadata.namespace, o.metadata.name)),
        Err(e) => {
            warn!(error = %e, "endpoint sync: undecodable revision skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_metadata_alone() {
        let text = r#"{"apiVersion":"serving.knative.dev/v1","kind":"Revision",
            "metadata":{"name":"hello-00001","namespace":"default","labels":{"a":"b"}},
            "spec":{"containers":[{"image":"x"}]}}"#;
        assert_eq!(
            key_of(text),
            Some(RevisionKey::new("default", "hello-00001"))
        );
        let escaped = r#"{"metadata":{"name":"a-b","namespace":"n"}}"#;
        assert_eq!(key_of(escaped), Some(RevisionKey::new("n", "a-b")));
        assert_eq!(key_of("[1]"), None);
        assert_eq!(key_of("{}"), None);
    }
}
