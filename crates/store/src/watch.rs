//! [`Watch`]: the one reader of the store's event log, as a Kubernetes informer reads the API
//! server's: list, then watch from the list's resourceVersion, in batches, sleeping on the
//! store's revision channel while there is nothing new.
//!
//! The controller runner, the activator's endpoint sync and the API server's `?watch=true`
//! all read the log this way; each used to hand-write the same loop (subscribe before
//! reading, read in batches until caught up, re-list or fail on `Gone`, run the SQLite reads
//! off the async threads). The rules, once:
//!
//! - **Nothing missed.** The watch subscribes to the revision channel before its first read
//!   and marks the channel seen *before* each read, so a commit that lands after a read wakes
//!   the next wait. A fresh list is taken with its resourceVersion in one connection lock;
//!   the watch goes on from exactly there.
//! - **Batches.** Each [`Watch::next`] returns what one read of at most
//!   [`WatchSpec::batch`] log entries yielded (filtered entries are skipped, and reading
//!   goes on until something matches); the watch waits only once it is caught up.
//! - **Gone.** When the log has been compacted past the watch's position the watch either
//!   fails with [`StoreError::Gone`] (what the API server tells a client, who re-lists) or
//!   re-lists by itself and says so ([`ListCause::Gone`]), per [`OnGone`].
//! - **The blocking pool.** Every read (and parse) runs under `spawn_blocking`: the store is
//!   synchronous SQLite behind one lock, and a reader must not stall an async worker.
//! - **Cancel-safe.** Dropping a pending `next()` loses nothing: the position moves only
//!   when a batch is handed out.

use serde_json::Value;

use crate::{
    LabelSelector, Store, StoreError,
    event::{EventType, RawEvent, WatchEvent},
    sqlite,
};

/// Log entries read per batch unless [`WatchSpec::batch`] says otherwise.
pub const DEFAULT_WATCH_BATCH: usize = 500;

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// With a list of every matching object (the first batch, [`WatchBatch::Listed`]), then
    /// every change after it.
    List,
    /// With the changes after this resourceVersion (exclusive), as a Kubernetes watch with
    /// `resourceVersion=N`.
    From(u64),
}

/// What the watch does when its position has been compacted away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnGone {
    /// `next()` returns [`StoreError::Gone`]; the watch stays at its position (and keeps
    /// failing): the caller re-lists, as a Kubernetes client does on 410.
    Fail,
    /// The watch lists again and hands out a [`WatchBatch::Listed`] with
    /// [`ListCause::Gone`]: the caller replaces what it knew.
    Relist,
}

/// What to watch and how. Built with [`WatchSpec::new`] and the setters.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    resources: Vec<String>,
    namespace: Option<String>,
    selector: Option<LabelSelector>,
    start: Start,
    on_gone: OnGone,
    batch: usize,
}

impl WatchSpec {
    /// A watch of the objects of `resources` (the caller's opaque resource strings), from a
    /// fresh list, failing on `Gone`, in batches of [`DEFAULT_WATCH_BATCH`].
    pub fn new<S: Into<String>>(resources: impl IntoIterator<Item = S>) -> Self {
        WatchSpec {
            resources: resources.into_iter().map(Into::into).collect(),
            namespace: None,
            selector: None,
            start: Start::List,
            on_gone: OnGone::Fail,
            batch: DEFAULT_WATCH_BATCH,
        }
    }

    /// Only objects of this namespace (`None`: all namespaces).
    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// Only objects whose labels match (list and events alike). An event is matched on the
    /// object it carries, as the Kubernetes API server does: an object whose labels stop
    /// matching is not reported as deleted.
    pub fn selector(mut self, selector: Option<LabelSelector>) -> Self {
        self.selector = selector.filter(|s| !s.is_empty());
        self
    }

    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    pub fn on_gone(mut self, on_gone: OnGone) -> Self {
        self.on_gone = on_gone;
        self
    }

    /// Log entries read per round trip to the store (at least 1).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }
}

/// Why a [`WatchBatch::Listed`] was handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListCause {
    /// The watch started with [`Start::List`].
    Start,
    /// The position `requested` had been compacted away (`oldest` is the smallest position
    /// that still works) and the watch re-listed ([`OnGone::Relist`]).
    Gone { requested: u64, oldest: u64 },
}

/// One answer of [`Watch::next`].
#[derive(Clone, Debug, PartialEq)]
pub enum WatchBatch<E> {
    /// Every matching object as of `resource_version`, each as an `ADDED` event carrying
    /// that resourceVersion: the state to replace whatever the caller knew.
    Listed {
        events: Vec<E>,
        resource_version: u64,
        cause: ListCause,
    },
    /// Changes committed after the previous batch, in resourceVersion order (never empty).
    Changed(Vec<E>),
}

/// The event type a [`Watch`] hands out: [`RawEvent`] (the stored JSON text, for callers
/// that pass it on) or [`WatchEvent`] (parsed, on the blocking pool).
pub trait FromRaw: Sized + Send + 'static {
    /// Converts a stored event; `parsed` is its object when the watch has parsed it already
    /// (to match a selector).
    fn from_raw(raw: RawEvent, parsed: Option<Value>) -> Result<Self, StoreError>;
}

impl FromRaw for RawEvent {
    fn from_raw(raw: RawEvent, _: Option<Value>) -> Result<Self, StoreError> {
        Ok(raw)
    }
}

impl FromRaw for WatchEvent {
    fn from_raw(raw: RawEvent, parsed: Option<Value>) -> Result<Self, StoreError> {
        let object = match parsed {
            Some(v) => v,
            None => sqlite::parse_json(&raw.object)?,
        };
        Ok(WatchEvent {
            resource_version: raw.resource_version,
            resource: raw.resource,
            event_type: raw.event_type,
            object,
        })
    }
}

/// A running watch; see the module doc. Ask it for batches with [`next`](Self::next).
#[derive(Debug)]
pub struct Watch<E> {
    store: Store,
    spec: WatchSpec,
    /// The resourceVersion of the last log entry handed out (or skipped by the filter).
    position: u64,
    revisions: tokio::sync::watch::Receiver<u64>,
    /// The first list, waiting to be handed out.
    listed: Option<WatchBatch<E>>,
    /// The last read came back short: wait for a commit before reading again.
    caught_up: bool,
}

impl Store {
    /// Runs `f` with this store on tokio's blocking pool and waits for it: how async code
    /// calls the store, which is synchronous SQLite behind one lock and must not stall an
    /// async worker. A panic in `f` is the caller's panic.
    pub async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> T {
        let store = self.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Starts a watch. With [`Start::List`] the list is taken now (and handed out by the
    /// first `next()`); with [`Start::From`] a position already compacted away is reported
    /// now, as [`StoreError::Gone`], whatever [`OnGone`] says.
    pub async fn watch<E: FromRaw>(&self, spec: WatchSpec) -> Result<Watch<E>, StoreError> {
        // Subscribed before reading: a commit after the read is seen as a change.
        let revisions = self.subscribe();
        let mut watch = Watch {
            store: self.clone(),
            spec,
            position: 0,
            revisions,
            listed: None,
            caught_up: false,
        };
        match watch.spec.start {
            Start::List => {
                let (events, rv) = watch.list().await?;
                watch.position = rv;
                watch.listed = Some(WatchBatch::Listed {
                    events,
                    resource_version: rv,
                    cause: ListCause::Start,
                });
            }
            Start::From(rv) => {
                watch.position = rv;
                let (store, spec) = (watch.store.clone(), watch.spec.clone());
                store
                    .blocking(move |store| {
                        store.events_since_raw(rv, spec.single_resource(), None, 1)
                    })
                    .await?;
            }
        }
        Ok(watch)
    }
}

impl<E: FromRaw> Watch<E> {
    /// The resourceVersion the watch has seen everything up to.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next batch: the first list, or changes (waiting for a commit while there are
    /// none). Errors other than `Gone` leave the watch where it was: call again to retry.
    pub async fn next(&mut self) -> Result<WatchBatch<E>, StoreError> {
        if let Some(listed) = self.listed.take() {
            return Ok(listed);
        }
        loop {
            if self.caught_up {
                // The store (and so the sender) lives as long as `self.store`: `changed`
                // cannot fail while we hold it.
                if self.revisions.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                self.caught_up = false;
            }
            // Seen *before* the read, so a commit after it wakes the next wait.
            self.revisions.borrow_and_update();
            let (store, spec, from) = (self.store.clone(), self.spec.clone(), self.position);
            let read = store
                .blocking(move |store| read_events::<E>(store, &spec, from))
                .await;
            match read {
                Ok((events, last, short)) => {
                    self.caught_up = short;
                    if let Some(last) = last {
                        self.position = last;
                    }
                    if !events.is_empty() {
                        return Ok(WatchBatch::Changed(events));
                    }
                }
                Err(StoreError::Gone { requested, oldest })
                    if self.spec.on_gone == OnGone::Relist =>
                {
                    let (events, rv) = self.list().await?;
                    self.position = rv;
                    self.caught_up = false;
                    return Ok(WatchBatch::Listed {
                        events,
                        resource_version: rv,
                        cause: ListCause::Gone { requested, oldest },
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every matching object, as `ADDED` events, and the resourceVersion of the list: all
    /// resources under one lock, so the list is one consistent state.
    async fn list(&self) -> Result<(Vec<E>, u64), StoreError> {
        let (store, spec) = (self.store.clone(), self.spec.clone());
        store
            .blocking(move |store| {
                let (texts, rv) = store.with_conn(|conn| -> Result<_, StoreError> {
                    let rv = sqlite::revision(conn)?;
                    let mut texts = Vec::new();
                    for r in &spec.resources {
                        let objects = sqlite::list(
                            conn,
                            r,
                            spec.namespace.as_deref(),
                            spec.selector.as_ref(),
                            None,
                        )?;
                        texts.extend(objects.into_iter().map(|o| (r.clone(), o)));
                    }
                    Ok((texts, rv))
                })?;
                let events = texts
                    .into_iter()
                    .map(|(resource, object)| {
                        let raw = RawEvent {
                            resource_version: rv,
                            resource,
                            event_type: EventType::Added,
                            object,
                        };
                        E::from_raw(raw, None)
                    })
                    .collect::<Result<_, _>>()?;
                Ok((events, rv))
            })
            .await
    }
}

impl WatchSpec {
    /// The resource to let SQLite filter events on, when there is exactly one.
    fn single_resource(&self) -> Option<&str> {
        match self.resources.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// One read of the log after `from`: the matching events, the resourceVersion of the last
/// entry read (matching or not), and whether the read came back short (caught up).
fn read_events<E: FromRaw>(
    store: &Store,
    spec: &WatchSpec,
    from: u64,
) -> Result<(Vec<E>, Option<u64>, bool), StoreError> {
    let (raw, rev) = store.events_since_raw_at(
        from,
        spec.single_resource(),
        spec.namespace.as_deref(),
        spec.batch,
    )?;
    let short = raw.len() < spec.batch;
    // Caught up: everything up to the store's revision has been read, matching or not (SQL
    // filters by kind and namespace). Staying at the last match instead made a watch of a
    // kind that does not change read every other kind's events again on each commit — a
    // quarter of wisp's CPU while 1 000 services were created.
    let last = if short {
        Some(rev.max(from))
    } else {
        raw.last().map(|e| e.resource_version)
    };
    let mut out = Vec::with_capacity(raw.len());
    for ev in raw {
        if !spec.resources.contains(&ev.resource) {
            continue;
        }
        let parsed = match &spec.selector {
            None => None,
            Some(sel) => {
                let object = sqlite::parse_json(&ev.object)?;
                if !sel.matches_object(&object) {
                    continue;
                }
                Some(object)
            }
        };
        out.push(E::from_raw(ev, parsed)?);
    }
    Ok((out, last, short))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::Options;

    const SVC: &str = "services.serving.knative.dev";
    const CFG: &str = "configurations.serving.knative.dev";

    fn obj(ns: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "X",
               "metadata": {"namespace": ns, "name": name, "labels": labels}})
    }

    fn names(events: &[WatchEvent]) -> Vec<(EventType, String)> {
        events
            .iter()
            .map(|e| {
                let name = e.object["metadata"]["name"].as_str().unwrap_or("");
                (e.event_type, name.to_owned())
            })
            .collect()
    }

    async fn next<E: FromRaw>(w: &mut Watch<E>) -> WatchBatch<E> {
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("a batch within 5 s")
            .unwrap()
    }

    async fn nothing_for_a_while<E: FromRaw + std::fmt::Debug>(w: &mut Watch<E>) {
        let r = tokio::time::timeout(Duration::from_millis(100), w.next()).await;
        assert!(r.is_err(), "expected no batch, got {r:?}");
    }

    #[tokio::test]
    async fn a_watch_of_a_quiet_kind_moves_past_other_kinds_events() {
        let store = Store::open_in_memory().unwrap();
        let spec = WatchSpec::new([CFG]).start(Start::From(0));
        let mut w: Watch<WatchEvent> = store.watch(spec).await.unwrap();
        for i in 0..5 {
            store
                .create(SVC, obj("a", &format!("s{i}"), json!({})))
                .unwrap();
        }
        store.create(CFG, obj("a", "c1", json!({}))).unwrap();
        let WatchBatch::Changed(events) = next(&mut w).await else {
            panic!("expected changes");
        };
        assert_eq!(names(&events), [(EventType::Added, "c1".to_owned())]);
        assert_eq!(w.position(), 6);
        // Other kinds' events only: nothing to hand out, but once caught up the watch is
        // at the store's revision, not left at its last match (where it would read them
        // all again after every commit).
        for i in 5..8 {
            store
                .create(SVC, obj("a", &format!("s{i}"), json!({})))
                .unwrap();
        }
        nothing_for_a_while(&mut w).await;
        assert_eq!(w.position(), 9);
    }

    #[tokio::test]
    async fn lists_then_watches_in_batches() {
        let store = Store::open_in_memory().unwrap();
        store.create(SVC, obj("a", "s1", json!({}))).unwrap();
        store.create(CFG, obj("a", "c1", json!({}))).unwrap();
        store.create("other", obj("a", "o1", json!({}))).unwrap();
        let spec = WatchSpec::new([SVC, CFG]).batch(2);
        let mut w: Watch<WatchEvent> = store.watch(spec).await.unwrap();
        let WatchBatch::Listed {
            events,
            resource_version,
            cause,
        } = next(&mut w).await
        else {
            panic!("a list first")
        };
        assert_eq!(cause, ListCause::Start);
        assert_eq!(resource_version, 3);
        assert_eq!(
            names(&events),
            [
                (EventType::Added, "s1".to_owned()),
                (EventType::Added, "c1".to_owned())
            ]
        );
        nothing_for_a_while(&mut w).await;

        // Five changes, two of them to a resource not watched: batches of at most two
        // entries read, the unwatched ones skipped.
        for i in 0..3 {
            store
                .create(SVC, obj("a", &format!("n{i}"), json!({})))
                .unwrap();
            store
                .create("other", obj("a", &format!("o{}", i + 2), json!({})))
                .unwrap();
        }
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let WatchBatch::Changed(events) = next(&mut w).await else {
                panic!("changes after the list")
            };
            assert!(!events.is_empty() && events.len() <= 2);
            seen.extend(names(&events));
        }
        let want: Vec<_> = (0..3)
            .map(|i| (EventType::Added, format!("n{i}")))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(w.position(), store.current_revision());
        nothing_for_a_while(&mut w).await;
    }

    #[tokio::test]
    async fn filters_by_namespace_and_selector_and_keeps_raw_text() {
        let store = Store::open_in_memory().unwrap();
        store
            .create(SVC, obj("a", "yes", json!({"app": "x"})))
            .unwrap();
        store
            .create(SVC, obj("a", "no", json!({"app": "y"})))
            .unwrap();
        store
            .create(SVC, obj("b", "elsewhere", json!({"app": "x"})))
            .unwrap();
        let spec = WatchSpec::new([SVC])
            .namespace(Some("a".into()))
            .selector(Some(LabelSelector::equals("app", "x")));
        let mut w: Watch<RawEvent> = store.watch(spec).await.unwrap();
        let WatchBatch::Listed { events, .. } = next(&mut w).await else {
            panic!("a list first")
        };
        assert_eq!(events.len(), 1);
        let stored = store.get_raw(SVC, "a", "yes").unwrap().unwrap();
        assert_eq!(events[0].object, stored);

        store.create(SVC, obj("a", "later-no", json!({}))).unwrap();
        store
            .create(SVC, obj("b", "later-b", json!({"app": "x"})))
            .unwrap();
        store
            .create(SVC, obj("a", "later-yes", json!({"app": "x"})))
            .unwrap();
        let WatchBatch::Changed(events) = next(&mut w).await else {
            panic!("changes")
        };
        assert_eq!(events.len(), 1);
        assert!(events[0].object.contains("later-yes"));
    }

    #[tokio::test]
    async fn starts_from_a_resource_version() {
        let store = Store::open_in_memory().unwrap();
        for n in ["s1", "s2", "s3"] {
            store.create(SVC, obj("a", n, json!({}))).unwrap();
        }
        let spec = WatchSpec::new([SVC]).start(Start::From(1));
        let mut w: Watch<WatchEvent> = store.watch(spec).await.unwrap();
        let WatchBatch::Changed(events) = next(&mut w).await else {
            panic!("changes, no list")
        };
        let got: Vec<_> = names(&events).into_iter().map(|(_, n)| n).collect();
        assert_eq!(got, ["s2", "s3"]);
        store.delete(SVC, "a", "s1", None).unwrap();
        let WatchBatch::Changed(events) = next(&mut w).await else {
            panic!("changes")
        };
        assert_eq!(names(&events), [(EventType::Deleted, "s1".to_owned())]);
    }

    #[tokio::test]
    async fn gone_fails_or_relists() {
        let store = Store::open_in_memory_with(Options {
            event_history: 1,
            ..Options::default()
        })
        .unwrap();
        for n in ["s1", "s2", "s3"] {
            store.create(SVC, obj("a", n, json!({}))).unwrap();
        }
        // Too old up front: refused at the start, whatever the policy.
        for on_gone in [OnGone::Fail, OnGone::Relist] {
            let spec = WatchSpec::new([SVC]).start(Start::From(0)).on_gone(on_gone);
            let err = store.watch::<WatchEvent>(spec).await.unwrap_err();
            assert!(matches!(err, StoreError::Gone { .. }), "{err}");
        }

        // Compacted while watching.
        for (on_gone, relists) in [(OnGone::Fail, false), (OnGone::Relist, true)] {
            let from = store.current_revision();
            let spec = WatchSpec::new([SVC])
                .start(Start::From(from))
                .on_gone(on_gone);
            let mut w: Watch<WatchEvent> = store.watch(spec).await.unwrap();
            let n = store.current_revision();
            for i in 0..3 {
                store
                    .create(SVC, obj("a", &format!("g{n}-{i}"), json!({})))
                    .unwrap();
            }
            let got = tokio::time::timeout(Duration::from_secs(5), w.next())
                .await
                .unwrap();
            match (got, relists) {
                (Err(StoreError::Gone { requested, .. }), false) => assert_eq!(requested, from),
                (
                    Ok(WatchBatch::Listed {
                        events,
                        resource_version,
                        cause,
                    }),
                    true,
                ) => {
                    assert!(
                        matches!(cause, ListCause::Gone { requested, .. } if requested == from)
                    );
                    assert_eq!(resource_version, store.current_revision());
                    assert_eq!(events.len(), 9);
                    assert_eq!(w.position(), resource_version);
                }
                (other, _) => panic!("{on_gone:?}: unexpected {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_dropped_next_loses_nothing() {
        let store = Store::open_in_memory().unwrap();
        let mut w: Watch<WatchEvent> = store
            .watch(WatchSpec::new([SVC]).start(Start::From(0)))
            .await
            .unwrap();
        // Caught up and waiting; then cancelled.
        nothing_for_a_while(&mut w).await;
        store.create(SVC, obj("a", "s1", json!({}))).unwrap();
        let WatchBatch::Changed(events) = next(&mut w).await else {
            panic!("changes")
        };
        assert_eq!(names(&events), [(EventType::Added, "s1".to_owned())]);
    }
}
