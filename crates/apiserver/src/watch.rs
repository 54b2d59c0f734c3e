//! `?watch=true`: newline-delimited JSON events, in resourceVersion order, as the
//! Kubernetes API server streams them.
//!
//! The stream reads committed events from the store's event log and sleeps on the store's
//! revision channel between batches, so a watcher never misses or reorders a change and
//! costs nothing while idle.

use std::{collections::VecDeque, time::Duration};

use axum::{
    body::Body,
    http::{StatusCode, header},
    response::Response,
};
use serde_json::Value;
use wisp_api::kinds::ResourceKind;
use wisp_store::{LabelSelector, StoreError};

use crate::{ApiState, error::ApiError, handlers::resource};

/// Events fetched from the store per round trip.
const BATCH: usize = 256;

struct WatchState {
    st: ApiState,
    resource: String,
    ns: Option<String>,
    selector: Option<LabelSelector>,
    last: u64,
    pending: VecDeque<bytes::Bytes>,
    rx: tokio::sync::watch::Receiver<u64>,
    deadline: Option<tokio::time::Instant>,
    stopping: tokio::sync::watch::Receiver<bool>,
    done: bool,
}

/// One watch event line, `{"type":…,"object":…}\n`.
fn line(event_type: &str, object: &Value) -> bytes::Bytes {
    raw_line(event_type, &object.to_string())
}

/// [`line`] for an object still in its stored JSON text: no parse, no re-serialization.
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

fn matches(selector: &Option<LabelSelector>, object: &Value) -> bool {
    selector
        .as_ref()
        .is_none_or(|sel| sel.matches_object(object))
}

/// Starts a watch from `from` (exclusive), or — when `from` is None — with synthetic ADDED
/// events for every current object followed by every later change.
pub async fn serve(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    selector: Option<LabelSelector>,
    from: Option<u64>,
    timeout_secs: Option<u64>,
) -> Result<Response, ApiError> {
    let res = resource(kind);
    // Subscribe before reading so that a commit between the read and the first wait is
    // still seen as a change.
    let rx = st.store.subscribe();
    let mut pending = VecDeque::new();
    let last = match from {
        Some(rv) => {
            // Probe once so that a too-old resourceVersion is answered with 410 up front.
            let (store, r, n) = (st.store.clone(), res.clone(), ns.clone());
            let probe = tokio::task::spawn_blocking(move || {
                store.events_since(rv, Some(&r), n.as_deref(), 1)
            })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
            match probe {
                Err(e @ StoreError::Gone { .. }) => return Err(e.into()),
                Err(e) => return Err(e.into()),
                Ok(_) => rv,
            }
        }
        None => {
            let (store, r, n, sel) = (st.store.clone(), res.clone(), ns.clone(), selector.clone());
            let (items, rv) =
                tokio::task::spawn_blocking(move || store.list(&r, n.as_deref(), sel.as_ref()))
                    .await
                    .map_err(|e| ApiError::internal(e.to_string()))??;
            pending.extend(items.iter().map(|o| line("ADDED", o)));
            rv
        }
    };
    let state = WatchState {
        stopping: st.stopping.clone(),
        st,
        resource: res,
        ns,
        selector,
        last,
        pending,
        rx,
        deadline: timeout_secs.map(|s| tokio::time::Instant::now() + Duration::from_secs(s)),
        done: false,
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
        let (store, r, n, from) = (s.st.store.clone(), s.resource.clone(), s.ns.clone(), s.last);
        let selector = s.selector.clone();
        // Without a selector the stored text goes out as it is: a watch's events are
        // otherwise parsed and serialized again for every watcher.
        let batch = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
            let events = store.events_since_raw(from, Some(&r), n.as_deref(), BATCH)?;
            let mut out = Vec::with_capacity(events.len());
            for ev in events {
                let line = match &selector {
                    None => Some(raw_line(ev.event_type.as_str(), &ev.object)),
                    Some(_) => {
                        let object: Value = serde_json::from_str(&ev.object)
                            .map_err(|e| StoreError::Corrupt(format!("stored object: {e}")))?;
                        matches(&selector, &object).then(|| line(ev.event_type.as_str(), &object))
                    }
                };
                out.push((ev.resource_version, line));
            }
            Ok(out)
        })
        .await;
        match batch {
            Ok(Ok(events)) if !events.is_empty() => {
                for (rv, line) in events {
                    s.last = rv;
                    s.pending.extend(line);
                }
                // A filtered-out batch may have advanced `last` past the store's revision
                // only up to what was committed; mark it seen so we do not spin.
                s.rx.borrow_and_update();
                continue;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                // Compacted past us (or a store failure): tell the client as Kubernetes does,
                // with an ERROR event carrying the Status, then end the stream.
                let status = ApiError::from(e).status;
                s.pending.push_back(line(
                    "ERROR",
                    &serde_json::to_value(status).unwrap_or_default(),
                ));
                s.done = true;
                continue;
            }
            Err(_) => return None,
        }
        // Nothing new: sleep until the store commits something, the watch times out, or
        // the server shuts down (then the stream ends cleanly, as a timeout would).
        let far = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let until = s.deadline.unwrap_or(far);
        tokio::select! {
            changed = s.rx.changed() => {
                if changed.is_err() {
                    return None;
                }
            }
            _ = tokio::time::sleep_until(until) => return None,
            _ = s.stopping.wait_for(|stop| *stop) => return None,
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
}
