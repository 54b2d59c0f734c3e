//! `GET …/revisions/{name}/log` and `…/services/{name}/log`: the replicas' output, as
//! newline-delimited JSON `{"replica","stream","line"}` so the client can prefix lines by
//! replica. `tailLines=N` limits the backlog; `follow=true` keeps streaming new lines.
//!
//! The `X-Wisp-Replicas` header says how many replicas the selected revisions have now, so
//! a client knows up front whether lines need a replica prefix.

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
    let body = if follow {
        let merged = futures_util::stream::select_all(live.into_iter().map(BroadcastStream::new))
            .filter_map(|r| async move {
                match r {
                    Ok(l) => Some(Ok(encode(&l))),
                    // A slow reader skipped lines: say so in the stream rather than silently.
                    Err(BroadcastStreamRecvError::Lagged(n)) => Some(Ok(encode(&LogLine {
                        replica: String::new(),
                        stream: "stderr",
                        line: format!("wisp: {n} log lines skipped (reader too slow)"),
                    }))),
                }
            });
        // End the follow when the server shuts down, so shutdown does not wait on it.
        let mut stopping = st.stopping.clone();
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        Body::from_stream(head.chain(merged).take_until(stop))
    } else {
        Body::from_stream(head)
    };
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header("x-wisp-replicas", replicas.to_string())
        .body(body)
        .expect("static response parts"))
}
