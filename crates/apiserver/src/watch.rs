//! `?watch=true`: newline-delimited JSON events, in resourceVersion order, as the
//! Kubernetes API server streams them.
//!
//! The stream is a [`wisp_store::Watch`] (list-then-watch over the store's event log, read on
//! the blocking pool, asleep while nothing commits), so a watcher never misses or reorders
//! a change and costs nothing while idle; this module only frames its batches as lines.
//! A view's watch ([`serve_view`]) reads the view's own event log the same way.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{StatusCode, header},
    response::Response,
};
use serde_json::Value;
use wisp_api::kinds::ResourceKind;
use wisp_store::{LabelSelector, RawEvent, Start, Watch, WatchBatch, WatchSpec};
use wisp_views::{EventType as ViewEventType, Gone, View, ViewEvent};

use crate::{
    ApiState,
    error::ApiError,
    handlers::{FieldSelector, resource},
    table::{Include, Layout},
};

/// Events fetched from the store per round trip.
const BATCH: usize = 256;

/// How often a watch that allows bookmarks gets one (kube's cacher `bookmarkFrequency`).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// Where a watch's events come from: the store's event log (stored kinds) or a view's
/// (Pods, Deployments, Services, Events, SKS, KIngress).
enum Feed {
    Store(Watch<RawEvent>),
    View(ViewFeed),
}

/// A watch of a view: an initial list (as synthetic ADDED events) when it starts without
/// a resourceVersion, then the view's events after its position.
struct ViewFeed {
    view: Arc<View>,
    pos: u64,
    latest: tokio::sync::watch::Receiver<u64>,
    initial: Option<Vec<ViewEvent>>,
    /// The namespace watched (a view's log holds every namespace's events).
    namespace: Option<String>,
    /// The label selector (the store filters its own watches; a view's are filtered here).
    selector: Option<LabelSelector>,
    /// What clients see of an object (Events read through `events.k8s.io`).
    shown: Option<fn(&Value) -> Value>,
}

impl ViewFeed {
    /// The next events, waiting while there are none; Err when the view's log no longer
    /// reaches the position.
    async fn next(&mut self) -> Result<Vec<ViewEvent>, Gone> {
        if let Some(initial) = self.initial.take() {
            return Ok(initial);
        }
        loop {
            // Marked seen before reading: a change after the read wakes the wait below.
            self.latest.borrow_and_update();
            let events = self.view.events_since(self.pos, BATCH)?;
            if let Some(last) = events.last() {
                self.pos = last.resource_version;
                return Ok(events);
            }
            if self.latest.changed().await.is_err() {
                // The view is gone (the server is stopping): nothing more will come.
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Feed {
    fn position(&self) -> u64 {
        match self {
            Feed::Store(w) => w.position(),
            Feed::View(v) => v.pos,
        }
    }
}

/// A watch's options besides what it selects.
pub struct Options {
    /// `timeoutSeconds`.
    pub timeout: Option<u64>,
    /// Answer Tables (`kubectl get -w`).
    pub table: Option<TableWatch>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
}

struct WatchState {
    feed: Feed,
    pending: VecDeque<bytes::Bytes>,
    deadline: Option<tokio::time::Instant>,
    stopping: tokio::sync::watch::Receiver<bool>,
    done: bool,
    table: Option<TableWatch>,
    fields: FieldSelector,
    /// `allowWatchBookmarks`: the kind's (apiVersion, kind), for the BOOKMARK objects.
    bookmarks: Option<(String, &'static str)>,
    next_bookmark: tokio::time::Instant,
}

/// A BOOKMARK event: an object of the kind carrying only the resourceVersion the watch
/// has seen everything up to (k8s.io/apiserver/pkg/storage/cacher `cacheWatcher`).
fn bookmark(api_version: &str, kind: &str, rv: u64) -> bytes::Bytes {
    line(
        "BOOKMARK",
        &serde_json::json!({
            "kind": kind,
            "apiVersion": api_version,
            "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null},
        }),
    )
}

/// A watch that answers Tables (`kubectl get -w`): each event's object is a Table of that
/// one object, and only the first carries the column definitions, as kube-apiserver's
/// watch `Fixup` sets `NoHeaders` after the first event
/// (`k8s.io/apiserver/pkg/endpoints/handlers/watch.go`).
pub struct TableWatch {
    layout: Layout,
    include: Include,
    version: &'static str,
    headers_sent: bool,
}

impl TableWatch {
    pub fn new(
        kind: &ResourceKind,
        include: Include,
        version: &'static str,
    ) -> Result<Self, ApiError> {
        Ok(TableWatch {
            layout: Layout::of(kind)?,
            include,
            version,
            headers_sent: false,
        })
    }

    fn line(&mut self, ev: &RawEvent) -> bytes::Bytes {
        let obj: Value = match serde_json::from_str(&ev.object) {
            Ok(o) => o,
            // Stored JSON always parses; should it not, the object goes out as stored.
            Err(_) => return raw_line(ev.event_type.as_str(), &ev.object),
        };
        self.line_of(ev.event_type.as_str(), &obj, &obj)
    }

    /// The line of one event whose row is printed from `printed` and carries `shown`.
    fn line_of(&mut self, event_type: &str, printed: &Value, shown: &Value) -> bytes::Bytes {
        let rv = printed["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let row = self
            .layout
            .row_as(printed, shown, self.include, self.version);
        let mut table = self.layout.table_of_rows(vec![row], &rv, self.version);
        if self.headers_sent {
            table["columnDefinitions"] = Value::Null;
        }
        self.headers_sent = true;
        line(event_type, &table)
    }
}

/// One watch event line, `{"type":…,"object":…}\n`.
fn line(event_type: &str, object: &Value) -> bytes::Bytes {
    raw_line(event_type, &object.to_string())
}

/// [`line`] for an object still in its stored JSON text: no parse, no re-serialization
/// (a watch's events would otherwise be parsed and serialized again for every watcher).
/// `event_type` is one of the fixed Kubernetes event names (nothing to escape).
fn raw_line(event_type: &str, object: &str) -> bytes::Bytes {
    let mut s = String::with_capacity(object.len() + 32);
    s.push_str("{\"type\":\"");
    s.push_str(event_type);
    s.push_str("\",\"object\":");
    s.push_str(object);
    s.push_str("}\n");
    s.into()
}

fn lines(events: Vec<RawEvent>) -> impl Iterator<Item = bytes::Bytes> {
    events
        .into_iter()
        .map(|ev| raw_line(ev.event_type.as_str(), &ev.object))
}

/// Starts a watch from `from` (exclusive), or — when `from` is None — with synthetic ADDED
/// events for every current object followed by every later change. A `from` already
/// compacted away is answered as kube-apiserver's watch cache answers it: 200 and one
/// `ERROR` event carrying the 410 `Expired` Status (`newErrWatcher` in
/// k8s.io/apiserver/pkg/storage/cacher), then the end of the stream.
pub async fn serve(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    selector: Option<LabelSelector>,
    fields: FieldSelector,
    from: Option<u64>,
    opts: Options,
) -> Result<Response, ApiError> {
    let spec = WatchSpec::new([resource(kind)])
        .namespace(ns)
        .selector(selector)
        .start(from.map_or(Start::List, Start::From))
        .batch(BATCH);
    let watch = match st.store.watch(spec).await {
        Ok(w) => w,
        Err(e @ wisp_store::StoreError::Gone { .. }) => {
            return Ok(expired(ApiError::from(e)));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(stream(st, kind, Feed::Store(watch), fields, opts))
}

/// A watch of a view (see [`serve`]): from `from`, or — without one — ADDED events for
/// the objects `ns`, `selector` and `fields` select now, then every later change.
#[allow(clippy::too_many_arguments)]
pub fn serve_view(
    st: ApiState,
    kind: &'static ResourceKind,
    view: Arc<View>,
    ns: Option<String>,
    selector: Option<LabelSelector>,
    fields: FieldSelector,
    from: Option<u64>,
    shown: Option<fn(&Value) -> Value>,
    opts: Options,
) -> Response {
    let latest = view.subscribe();
    let (pos, initial) = match from {
        Some(from) => {
            if let Err(gone) = view.events_since(from, 0) {
                return expired(too_old(from, gone));
            }
            (from, None)
        }
        None => {
            let (items, rv) = view.list(ns.as_deref(), |o| {
                selector.as_ref().is_none_or(|s| s.matches_object(o))
            });
            let initial = items
                .into_iter()
                .map(|object| ViewEvent {
                    resource_version: rv,
                    event_type: ViewEventType::Added,
                    object,
                })
                .collect();
            (rv, Some(initial))
        }
    };
    let feed = Feed::View(ViewFeed {
        view,
        pos,
        latest,
        initial,
        namespace: ns,
        selector,
        shown,
    });
    stream(st, kind, feed, fields, opts)
}

impl ViewFeed {
    /// Whether an object passes the watch's namespace and label selector.
    fn selects(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns))
            && self.selector.as_ref().is_none_or(|s| s.matches_object(obj))
    }
}

/// kube's 410 for a watch from a resourceVersion the history no longer holds
/// (`storage.NewTooLargeResourceVersionError`'s sibling in the cacher).
fn too_old(from: u64, gone: Gone) -> ApiError {
    ApiError::new(
        410,
        "Expired",
        format!("too old resource version: {from} ({})", gone.oldest),
    )
}

/// A 200 stream with one ERROR event carrying `err`'s Status, as kube-apiserver's watch
/// cache answers a watch it cannot start (`newErrWatcher` in
/// k8s.io/apiserver/pkg/storage/cacher).
fn expired(err: ApiError) -> Response {
    let body = line(
        "ERROR",
        &serde_json::to_value(err.status).unwrap_or_default(),
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("static response parts")
}

fn stream(
    st: ApiState,
    kind: &'static ResourceKind,
    feed: Feed,
    fields: FieldSelector,
    opts: Options,
) -> Response {
    let state = WatchState {
        feed,
        pending: VecDeque::new(),
        deadline: opts
            .timeout
            .map(|s| tokio::time::Instant::now() + Duration::from_secs(s)),
        stopping: st.stopping.clone(),
        done: false,
        table: opts.table,
        fields,
        bookmarks: opts.bookmarks.then(|| (kind.api_version(), kind.kind)),
        next_bookmark: tokio::time::Instant::now() + BOOKMARK_EVERY,
    };
    let stream = futures_util::stream::unfold(state, next_chunk);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static response parts")
}

/// What a watch's feed gave.
enum Batch {
    Store(Result<WatchBatch<RawEvent>, wisp_store::StoreError>),
    View(Result<Vec<ViewEvent>, Gone>),
}

async fn next_chunk(
    mut s: WatchState,
) -> Option<(Result<bytes::Bytes, std::io::Error>, WatchState)> {
    loop {
        if let Some(b) = s.pending.pop_front() {
            return Some((Ok(b), s));
        }
        if s.done {
            return None;
        }
        // Wait for a batch until the watch times out or the server shuts down (then the
        // stream ends cleanly, as a timeout would).
        let far = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let until = s.deadline.unwrap_or(far);
        let position = s.feed.position();
        let next = async {
            match &mut s.feed {
                Feed::Store(w) => Batch::Store(w.next().await),
                Feed::View(v) => Batch::View(v.next().await),
            }
        };
        let batch = tokio::select! {
            b = next => b,
            _ = tokio::time::sleep_until(until) => {
                // The cacher's last bookmark goes out as the watch's time runs out, so the
                // client resumes from where it got to.
                if let Some((av, kind)) = &s.bookmarks {
                    s.pending.push_back(bookmark(av, kind, position));
                    s.done = true;
                    continue;
                }
                return None;
            }
            _ = tokio::time::sleep_until(s.next_bookmark), if s.bookmarks.is_some() => {
                if let Some((av, kind)) = &s.bookmarks {
                    s.pending.push_back(bookmark(av, kind, position));
                }
                s.next_bookmark += BOOKMARK_EVERY;
                continue;
            }
            _ = s.stopping.wait_for(|stop| *stop) => return None,
        };
        match batch {
            Batch::Store(Ok(
                WatchBatch::Listed { mut events, .. } | WatchBatch::Changed(mut events),
            )) => {
                if !s.fields.is_empty() {
                    // The store watches by label only; the few fields a selector may
                    // name are checked here, on the event's object.
                    events.retain(|ev| {
                        serde_json::from_str::<Value>(&ev.object)
                            .is_ok_and(|o| s.fields.matches(&o))
                    });
                }
                match &mut s.table {
                    Some(t) => s.pending.extend(events.iter().map(|ev| t.line(ev))),
                    None => s.pending.extend(lines(events)),
                }
            }
            Batch::View(Ok(events)) => {
                let Feed::View(feed) = &s.feed else {
                    continue;
                };
                for ev in events {
                    if !feed.selects(&ev.object) || !s.fields.matches(&ev.object) {
                        continue;
                    }
                    let shown = feed.shown.map(|f| f(&ev.object));
                    let shown_ref = shown.as_ref().unwrap_or(&ev.object);
                    let ty = ev.event_type.as_str();
                    let out = match &mut s.table {
                        Some(t) => t.line_of(ty, &ev.object, shown_ref),
                        None => line(ty, shown_ref),
                    };
                    s.pending.push_back(out);
                }
            }
            Batch::View(Err(gone)) => {
                let status = too_old(position, gone).status;
                s.pending.push_back(line(
                    "ERROR",
                    &serde_json::to_value(status).unwrap_or_default(),
                ));
                s.done = true;
            }
            Batch::Store(Err(e)) => {
                // Compacted past us (or a store failure): tell the client as Kubernetes does,
                // with an ERROR event carrying the Status, then end the stream.
                let status = ApiError::from(e).status;
                s.pending.push_back(line(
                    "ERROR",
                    &serde_json::to_value(status).unwrap_or_default(),
                ));
                s.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn raw_lines_are_the_parsed_lines() {
        let object = json!({"metadata": {"name": "a \"quoted\" name", "labels": {"k": "v"}},
                            "spec": {"n": [1, 2.5, null, true]}});
        for ty in ["ADDED", "MODIFIED", "DELETED"] {
            let raw = raw_line(ty, &object.to_string());
            assert!(raw.ends_with(b"\n"));
            let a: Value = serde_json::from_slice(&raw).unwrap();
            let b = json!({"type": ty, "object": object});
            assert_eq!(a, b);
        }
    }

    #[test]
    fn table_watches_send_headers_once() {
        let mut t = TableWatch::new(&wisp_api::kinds::ROUTE, Include::None, "v1").unwrap();
        let ev = |ty, name: &str| RawEvent {
            resource_version: 3,
            resource: "routes.serving.knative.dev".into(),
            event_type: ty,
            object: json!({"metadata": {"name": name, "resourceVersion": "3"},
                           "status": {"url": "http://x"}})
            .to_string(),
        };
        let first: Value =
            serde_json::from_slice(&t.line(&ev(wisp_store::EventType::Added, "a"))).unwrap();
        assert_eq!(first["type"], "ADDED");
        assert_eq!(first["object"]["kind"], "Table");
        assert_eq!(first["object"]["columnDefinitions"][1]["name"], "URL");
        assert_eq!(
            first["object"]["rows"][0]["cells"],
            json!(["a", "http://x", null, null])
        );
        assert_eq!(first["object"]["metadata"]["resourceVersion"], "3");
        let second: Value =
            serde_json::from_slice(&t.line(&ev(wisp_store::EventType::Deleted, "b"))).unwrap();
        assert_eq!(second["type"], "DELETED");
        assert_eq!(second["object"]["columnDefinitions"], Value::Null);
        assert_eq!(second["object"]["rows"][0]["cells"][0], "b");
    }
}
