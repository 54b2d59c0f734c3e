//! `GET …/revisions/{name}/log` and `…/services/{name}/log` (wisp's own, for `wisp logs`):
//! the replicas' output, as
//! newline-delimited JSON `{"replica","stream","line"}` so the client can prefix lines by
//! replica. `tailLines=N` limits the backlog; `follow=true` keeps streaming new lines.
//!
//! The `X-Wisp-Replicas` header says how many replicas the selected revisions have now, so
//! a client knows up front whether lines need a replica prefix.
//!
//! `container=queue-proxy` serves the revisions' request logs instead (Knative writes
//! them to the queue-proxy container's output): see [`RequestLogs`].
//!
//! `GET /api/v1/namespaces/{ns}/pods/{name}/log` ([`pod_log`]) is kube's, for `kubectl logs`.

use std::collections::HashMap;

use axum::{
    body::Body,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::Response,
};
use futures_util::StreamExt;
use serde_json::Value;
use serde_json::json;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use wisp_api::{
    core::{ErrorType, FieldErr},
    kinds, labels,
};
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
        time: std::time::SystemTime::now(),
        run: 0,
        seq: 0,
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

/// `GET /api/v1/namespaces/{ns}/pods/{name}/log`: one replica's output as plain text, as
/// the kubelet serves a container's log (`kubectl logs`), with `PodLogOptions`:
/// `container`, `follow`, `previous`, `sinceSeconds`/`sinceTime`, `timestamps`,
/// `tailLines`, `limitBytes`, checked as kube's `ValidatePodLogOptions` checks them.
///
/// The lines are those of the container's current run (`previous`: of the run before it);
/// a follow ends when that run ends (the container exits or is stopped), as the kubelet's
/// does. A replica's containers share one output (docs/differences.md): every container
/// name of the pod selects it.
pub(crate) async fn pod_log(
    State(st): State<ApiState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = PodLogOptions::parse(&q)?;
    let pod = st
        .views
        .pods
        .get(&ns, &name)
        .ok_or_else(|| ApiError::not_found(&kinds::POD.store_key(), &name))?;
    let names = |list: &str| -> Vec<&str> {
        pod["spec"][list]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default()
    };
    let (containers, inits) = (names("containers"), names("initContainers"));
    // kube-apiserver's `validateContainer` (`pkg/registry/core/pod/strategy.go`): any
    // container of the pod, init containers too, may be named.
    let container = match opts.container.as_deref() {
        Some(c) if containers.contains(&c) || inits.contains(&c) => c.to_string(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if containers.len() == 1 => containers[0].to_string(),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !inits.is_empty() {
                message += &format!(" or one of the init containers: [{}]", inits.join(" "));
            }
            return Err(ApiError::bad_request(message));
        }
    };
    let status = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|list| pod["status"][list].as_array())
        .flatten()
        .find(|c| c["name"] == container.as_str())
        .cloned()
        .unwrap_or(Value::Null);
    let restarts = status["restartCount"].as_u64().unwrap_or(0) as u32;
    let run = if opts.previous {
        if restarts == 0 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        restarts - 1
    } else {
        if status["state"]["waiting"].is_object() && restarts == 0 {
            let reason = status["state"]["waiting"]["reason"]
                .as_str()
                .unwrap_or("ContainerCreating");
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
            )));
        }
        restarts
    };
    let Some(platform) = st.platform.clone() else {
        return Err(ApiError::new(
            503,
            "ServiceUnavailable",
            "this server runs no replicas",
        ));
    };
    let revision = pod["metadata"]["labels"][wisp_api::labels::REVISION]
        .as_str()
        .unwrap_or("");
    let key = RevisionKey::new(&ns, revision);
    let since = opts.since();
    let selects = {
        let name = name.clone();
        move |l: &LogLine| l.replica == name && l.run == run && since.is_none_or(|s| l.time >= s)
    };
    // Subscribe before reading the backlog; lines in both are skipped by their sequence.
    let live = (opts.follow && !opts.previous).then(|| platform.follow_logs(&key));
    let mut backlog: Vec<LogLine> = platform
        .logs(&key, None)
        .into_iter()
        .filter(|l| selects(l))
        .collect();
    if let Some(t) = opts.tail_lines {
        let skip = backlog.len().saturating_sub(t);
        backlog.drain(..skip);
    }
    let last_seq = backlog.last().map_or(0, |l| l.seq);
    let timestamps = opts.timestamps;
    let text = move |l: &LogLine| -> bytes::Bytes {
        let mut s = String::with_capacity(l.line.len() + 40);
        if timestamps {
            s.push_str(
                &chrono::DateTime::<chrono::Utc>::from(l.time)
                    .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            );
            s.push(' ');
        }
        s.push_str(&l.line);
        s.push('\n');
        s.into()
    };
    let head = futures_util::stream::iter(backlog.iter().map(text).collect::<Vec<_>>());
    let body: std::pin::Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>> = match live
    {
        None => Box::pin(head),
        Some(rx) => {
            let pods = st.views.pods.clone();
            let (ns2, name2) = (ns.clone(), name.clone());
            let name3 = name.clone();
            // The follow ends when the pod's run ends: a line of a later run, or the
            // pod gone (checked every second), or the server stopping.
            let live = BroadcastStream::new(rx)
                .filter_map(move |r| {
                    let selects = selects.clone();
                    let name3 = name3.clone();
                    async move {
                        match r {
                            Ok(l) if l.replica == name3 && l.run > run => Some(None),
                            Ok(l) if selects(&l) && l.seq > last_seq => Some(Some(l)),
                            Ok(_) => None,
                            Err(BroadcastStreamRecvError::Lagged(n)) => Some(Some(LogLine {
                                replica: String::new(),
                                stream: "stderr",
                                line: format!("wisp: {n} log lines skipped (reader too slow)"),
                                time: std::time::SystemTime::now(),
                                run,
                                seq: 0,
                            })),
                        }
                    }
                })
                .take_while(|l| futures_util::future::ready(l.is_some()))
                .filter_map(|l| async move { l })
                .map(move |l| text(&l));
            let mut stopping = st.stopping.clone();
            let end = async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tokio::select! {
                        _ = stopping.wait_for(|s| *s) => return,
                        _ = tick.tick() => {
                            let running = pods.get(&ns2, &name2).is_some_and(|p| {
                                p["metadata"]["deletionTimestamp"].is_null()
                            });
                            if !running {
                                return;
                            }
                        }
                    }
                }
            };
            Box::pin(head.chain(live).take_until(end))
        }
    };
    let body = match opts.limit_bytes {
        None => Body::from_stream(body.map(Ok::<_, std::io::Error>)),
        Some(limit) => {
            let mut left = limit;
            Body::from_stream(
                body.take_while(move |_| futures_util::future::ready(left > 0))
                    .map(move |mut b| {
                        if b.len() > left {
                            b.truncate(left);
                        }
                        left -= b.len();
                        Ok::<_, std::io::Error>(b)
                    }),
            )
        }
    };
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(body)
        .expect("static response parts"))
}

/// `PodLogOptions` from the query.
#[derive(Debug, Default, PartialEq)]
struct PodLogOptions {
    container: Option<String>,
    follow: bool,
    previous: bool,
    since_seconds: Option<i64>,
    since_time: Option<chrono::DateTime<chrono::Utc>>,
    timestamps: bool,
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
}

impl PodLogOptions {
    fn parse(q: &HashMap<String, String>) -> Result<PodLogOptions, ApiError> {
        let flag = |k: &str| -> Result<bool, ApiError> {
            match q.get(k).map(String::as_str) {
                None | Some("") | Some("false") | Some("0") => Ok(false),
                Some("true") | Some("1") => Ok(true),
                Some(v) => Err(ApiError::bad_request(format!(
                    "invalid {k} {v:?}: must be true or false"
                ))),
            }
        };
        let int = |k: &str| -> Result<Option<i64>, ApiError> {
            q.get(k)
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse::<i64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid {k} {v:?}: must be an integer"))
                    })
                })
                .transpose()
        };
        let since_time = match q.get("sinceTime").filter(|v| !v.is_empty()) {
            Some(t) => Some(wisp_api::age::parse_time(t).ok_or_else(|| {
                ApiError::bad_request(format!("invalid sinceTime {t:?}: must be RFC 3339"))
            })?),
            None => None,
        };
        let (tail, since_seconds, limit) =
            (int("tailLines")?, int("sinceSeconds")?, int("limitBytes")?);
        // ValidatePodLogOptions (pkg/apis/core/validation/validation.go).
        let mut errs = Vec::new();
        let invalid = |field: &str, v: i64, detail: &str| FieldErr {
            type_: ErrorType::Invalid,
            field: field.into(),
            value: v.to_string(),
            detail: detail.into(),
        };
        if let Some(t) = tail.filter(|t| *t < 0) {
            errs.push(invalid(
                "tailLines",
                t,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(l) = limit.filter(|l| *l < 1) {
            errs.push(invalid("limitBytes", l, "must be greater than 0"));
        }
        if since_seconds.is_some() && since_time.is_some() {
            errs.push(FieldErr {
                type_: ErrorType::Forbidden,
                field: String::new(),
                value: String::new(),
                detail: "at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
            });
        }
        if let Some(s) = since_seconds.filter(|s| *s < 1) {
            errs.push(invalid("sinceSeconds", s, "must be greater than 0"));
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid_core(
                "PodLogOptions.meta.k8s.io",
                "",
                &errs,
            ));
        }
        Ok(PodLogOptions {
            container: q.get("container").filter(|c| !c.is_empty()).cloned(),
            follow: flag("follow")?,
            previous: flag("previous")?,
            since_seconds,
            since_time,
            timestamps: flag("timestamps")?,
            tail_lines: tail.map(|t| t as usize),
            limit_bytes: limit.map(|l| l as usize),
        })
    }

    /// The oldest time a line may have.
    fn since(&self) -> Option<std::time::SystemTime> {
        if let Some(t) = self.since_time {
            return Some(t.into());
        }
        self.since_seconds.map(|s| {
            std::time::SystemTime::now() - std::time::Duration::from_secs(s.unsigned_abs())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pod_log_options_as_kube_checks_them() {
        let ok = PodLogOptions::parse(&q(&[
            ("container", "user-container"),
            ("follow", "true"),
            ("tailLines", "5"),
            ("timestamps", "true"),
            ("sinceSeconds", "300"),
        ]))
        .unwrap();
        assert_eq!(ok.container.as_deref(), Some("user-container"));
        assert!(ok.follow && ok.timestamps && !ok.previous);
        assert_eq!((ok.tail_lines, ok.since_seconds), (Some(5), Some(300)));
        let cases = [
            (
                q(&[("tailLines", "-1")]),
                "PodLogOptions.meta.k8s.io \"\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                q(&[("sinceSeconds", "0")]),
                "PodLogOptions.meta.k8s.io \"\" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0",
            ),
            (
                q(&[("limitBytes", "0")]),
                "PodLogOptions.meta.k8s.io \"\" is invalid: limitBytes: Invalid value: 0: must be greater than 0",
            ),
            (
                q(&[("follow", "maybe")]),
                "invalid follow \"maybe\": must be true or false",
            ),
            (
                q(&[("sinceTime", "yesterday")]),
                "invalid sinceTime \"yesterday\": must be RFC 3339",
            ),
        ];
        for (params, want) in cases {
            let err = PodLogOptions::parse(&params).unwrap_err();
            assert_eq!(err.status.message, want, "{params:?}");
        }
        let both = PodLogOptions::parse(&q(&[
            ("sinceSeconds", "1"),
            ("sinceTime", "2024-01-01T00:00:00Z"),
        ]))
        .unwrap_err();
        assert_eq!(both.status.code, 422);
        assert!(
            both.status.message.contains("at most one of"),
            "{}",
            both.status.message
        );
    }
}
