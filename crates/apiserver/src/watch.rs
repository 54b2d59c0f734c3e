//! `?watch=true`: newline-delimited JSON events, in resourceVersion order, as the
//! Kubernetes API server streams them.
//!
//! The stream is a [`wisp_store::Watch`] (list-then-watch over the store's event log, read on
//! the blocking pool, asleep while nothing commits), so a watcher never misses or reorders
//! a change and costs nothing while idle; this module only frames its batches as lines.

use std::{collections::VecDeque, time::Duration};

use axum::{
    body::Body,
    http::{StatusCode, header},
    response::Response,
};
use serde_json::Value;
use wisp_api::kinds::ResourceKind;
use wisp_store::{LabelSelector, RawEvent, Start, Watch, WatchBatch, WatchSpec};

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

struct WatchState {
    watch: Watch<RawEvent>,
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
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut table = self
            .layout
            .table(vec![obj], &rv, self.include, self.version);
        if self.headers_sent {
            table["columnDefinitions"] = Value::Null;
        }
        self.headers_sent = true;
        line(ev.event_type.as_str(), &table)
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
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    selector: Option<LabelSelector>,
    fields: FieldSelector,
    from: Option<u64>,
    timeout_secs: Option<u64>,
    table: Option<TableWatch>,
    bookmarks: bool,
) -> Result<Response, ApiError> {
    let spec = WatchSpec::new([resource(kind)])
        .namespace(ns)
        .selector(selector)
        .start(from.map_or(Start::List, Start::From))
        .batch(BATCH);
    let watch = match st.store.watch(spec).await {
        Ok(w) => w,
        Err(e @ wisp_store::StoreError::Gone { .. }) => {
            let status = ApiError::from(e).status;
            let body = line("ERROR", &serde_json::to_value(status).unwrap_or_default());
            return Ok(Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .expect("static response parts"));
        }
        Err(e) => return Err(e.into()),
    };
    let state = WatchState {
        watch,
        pending: VecDeque::new(),
        deadline: timeout_secs.map(|s| tokio::time::Instant::now() + Duration::from_secs(s)),
        stopping: st.stopping.clone(),
        done: false,
        table,
        fields,
        bookmarks: bookmarks.then(|| (kind.api_version(), kind.kind)),
        next_bookmark: tokio::time::Instant::now() + BOOKMARK_EVERY,
    };
    let stream = futures_util::stream::unfold(state, next_chunk);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static response parts"))
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
        let batch = tokio::select! {
            b = s.watch.next() => b,
            _ = tokio::time::sleep_until(until) => {
                // The cacher's last bookmark goes out as the watch's time runs out, so the
                // client resumes from where it got to.
                if let Some((av, kind)) = &s.bookmarks {
                    s.pending.push_back(bookmark(av, kind, s.watch.position()));
                    s.done = true;
                    continue;
                }
                return None;
            }
            _ = tokio::time::sleep_until(s.next_bookmark), if s.bookmarks.is_some() => {
                if let Some((av, kind)) = &s.bookmarks {
                    s.pending.push_back(bookmark(av, kind, s.watch.position()));
                }
                s.next_bookmark += BOOKMARK_EVERY;
                continue;
            }
            _ = s.stopping.wait_for(|stop| *stop) => return None,
        };
        match batch {
            Ok(WatchBatch::Listed { mut events, .. } | WatchBatch::Changed(mut events)) => {
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
            Err(e) => {
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
