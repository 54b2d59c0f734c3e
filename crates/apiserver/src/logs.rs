//! `GET …/revisions/{name}/log` and `…/services/{name}/log`: the replicas' output, as
//! newline-delimited JSON `{"replica","stream","line"}` so the client can prefix lines by
//! replica. `tailLines=N` limits the backlog; `follow=true` keeps streaming new lines.
//!
//! The `X-Wisp-Replicas` header says how many replicas the selected revisions have now, so
//! a client knows up front whether lines need a replica prefix.
//!
//! `container=queue-proxy` serves the revisions' request logs instead (Knative writes
//! them to the queue-proxy container's output): see [`RequestLogs`].

use std::collections::HashMap;

use axum::{
    body::Body,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::Response,
};
use futures_util::StreamExt;
use serde_json::json;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use wisp_api::{kinds, labels};
use wisp_runtime::{LogLine, RevisionKey};
use wisp_store::LabelSelector;

use crate::{ApiState, error::ApiError};

type NamePath = Path<(String, String, String, String, String)>;

/// The container whose output is the request log, as in Knative's pods.
pub const QUEUE_PROXY: &str = "queue-proxy";

/// The request logs (`logging.request-log-template`), provided by `wisp serve`.
pub trait RequestLogs: Send + Sync {
    /// The last `tail` lines of a revision (all kept when None), oldest first.
    fn lines(&self, key: &RevisionKey, tail: Option<usize>) -> Vec<LogLine>;
    /// New lines of the given revisions as they are written.
    fn follow(
        &self,
        keys: &[RevisionKey],
    ) -> futures_util::stream::BoxStream<'static, Result<LogLine, u64>>;
}

fn encode(l: &LogLine) -> bytes::Bytes {
    let mut s = json!({"replica": l.replica, "stream": l.stream, "line": l.line}).to_string();
    s.push('\n');
    s.into()
}

pub async fn logs(
    State(st): State<ApiState>,
    Path((group, version, ns, plural, name)): NamePath,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if group != kinds::SERVICE.group || version != kinds::SERVICE.version {
        return Err(ApiError::path_not_found());
    }
    let Some(platform) = st.platform.clone() else {
        return Err(ApiError::new(
            503,
            "ServiceUnavailable",
            "this server runs no replicas",
        ));
    };
    let tail = match q.get("tailLines") {
        Some(t) => Some(t.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid tailLines {t:?}: must be a non-negative integer"
            ))
        })?),
        None => None,
    };
    let follow = matches!(q.get("follow").map(String::as_str), Some("true" | "1"));
    // Any other container is the replicas' output (wisp does not split it by container).
    let requests = match q.get("container").map(String::as_str) {
        Some(QUEUE_PROXY) => Some(st.request_logs.clone().ok_or_else(|| {
            ApiError::bad_request(
                "request logs are off: set config-observability's logging.enable-request-log"
                    .to_string(),
            )
        })?),
        _ => None,
    };

    // Which revisions: the one named, or every revision of the named service.
    let store = st.store.clone();
    let (ns2, name2, plural2) = (ns.clone(), name.clone(), plural.clone());
    let revisions: Vec<String> =
        tokio::task::spawn_blocking(move || -> Result<Vec<String>, ApiError> {
            match plural2.as_str() {
                "revisions" => {
                    let res = kinds::REVISION.store_key();
                    store
                        .get(&res, &ns2, &name2)?
                        .ok_or_else(|| ApiError::not_found(&res, &name2))?;
                    Ok(vec![name2])
                }
                "services" => {
                    let res = kinds::SERVICE.store_key();
                    store
                        .get(&res, &ns2, &name2)?
                        .ok_or_else(|| ApiError::not_found(&res, &name2))?;
                    let sel = LabelSelector::parse(&format!("{}={name2}", labels::SERVICE))?;
                    let (revs, _) =
                        store.list(&kinds::REVISION.store_key(), Some(&ns2), Some(&sel))?;
                    Ok(revs
                        .iter()
                        .filter_map(|r| r["metadata"]["name"].as_str().map(str::to_string))
                        .collect())
                }
                _ => Err(ApiError::path_not_found()),
            }
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;

    let keys: Vec<RevisionKey> = revisions.iter().map(|r| RevisionKey::new(&ns, r)).collect();
    let replicas: usize = keys.iter().map(|k| platform.replicas(k).len()).sum();
    if let Some(requests) = requests {
        // Subscribe before reading the backlog so no line falls between the two.
        let live = follow.then(|| requests.follow(&keys));
        let mut backlog: Vec<LogLine> = Vec::new();
        for k in &keys {
            backlog.extend(requests.lines(k, tail));
        }
        let live = live.map(|s| {
            s.map(|r| {
                Ok(encode(&match r {
                    Ok(l) => l,
                    Err(n) => skipped(n),
                }))
            })
            .boxed()
        });
        return Ok(respond(&st, backlog, tail, live, replicas));
    }
    // Subscribe before reading the backlog so no line falls between the two.
    let live: Vec<_> = if follow {
        keys.iter().map(|k| platform.follow_logs(k)).collect()
    } else {
        Vec::new()
    };
    let mut backlog: Vec<LogLine> = Vec::new();
    for k in &keys {
        backlog.extend(platform.logs(k, tail));
    }
    let live = follow.then(|| {
        futures_util::stream::select_all(live.into_iter().map(BroadcastStream::new))
            .filter_map(|r| async move {
                match r {
                    Ok(l) => Some(Ok(encode(&l))),
                    // A slow reader skipped lines: say so in the stream rather than silently.
                    Err(BroadcastStreamRecvError::Lagged(n)) => Some(Ok(encode(&skipped(n)))),
                }
            })
            .boxed()
    });
    Ok(respond(&st, backlog, tail, live, replicas))
}

/// The line a reader that fell behind gets instead of the `n` it missed.
fn skipped(n: u64) -> LogLine {
    LogLine {
        replica: String::new(),
        stream: "stderr",
        line: format!("wisp: {n} log lines skipped (reader too slow)"),
    }
}

type Chunks = futures_util::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>;

/// The answer: the backlog (its newest `tail` lines), then the live lines if following.
fn respond(
    st: &ApiState,
    mut backlog: Vec<LogLine>,
    tail: Option<usize>,
    live: Option<Chunks>,
    replicas: usize,
) -> Response {
    if let Some(t) = tail {
        // Several revisions: keep the newest `t` overall (each list is already in order).
        let skip = backlog.len().saturating_sub(t);
        backlog.drain(..skip);
    }
    let head = futures_util::stream::iter(
        backlog
            .into_iter()
            .map(|l| Ok::<_, std::io::Error>(encode(&l))),
    );
    let body = if let Some(merged) = live {
        // End the follow when the server shuts down, so shutdown does not wait on it.
        let mut stopping = st.stopping.clone();
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        Body::from_stream(head.chain(merged).take_until(stop))
    } else {
        Body::from_stream(head)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header("x-wisp-replicas", replicas.to_string())
        .body(body)
        .expect("static response parts")
}
