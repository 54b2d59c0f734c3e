//! Answers in protobuf: a layer around the API that, for a request about a built-in kind
//! whose `Accept` puts protobuf first ([`negotiate::builtin_form`]), lets the handler answer
//! in JSON as always and re-encodes what it answers — the object, the list, the `Status` of
//! an error, each event of a watch — as kube-apiserver would have written it in protobuf.
//!
//! Done at the edge rather than in each handler so that every answer about a built-in kind
//! takes the same path, errors included (kube negotiates its error Statuses too:
//! `responsewriters.ErrorNegotiated`), and a kind served later needs only its codec
//! ([`super::CODECS`]).

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures_util::StreamExt as _;
use serde_json::Value;

use crate::{
    ApiState,
    error::ApiError,
    negotiate::{self, BuiltinForm},
};

/// Whether `path` names resources of a built-in kind: `/api/v1/…` past the discovery
/// document, or `/apis/{group}/{version}/…` of a built-in group.
pub fn builtin_resource_path(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", first, ..] => !first.is_empty(),
        ["apis", group, _version, first, ..] => !first.is_empty() && super::builtin_group(group),
        _ => false,
    }
}

fn is_watch(req: &Request) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1"))
    })
}

/// The layer (`axum::middleware::from_fn_with_state`).
pub async fn negotiate(State(st): State<ApiState>, mut req: Request, next: Next) -> Response {
    if !builtin_resource_path(req.uri().path()) {
        return next.run(req).await;
    }
    match negotiate::builtin_form(negotiate::accept(req.headers())) {
        Ok(BuiltinForm::Json) => return next.run(req).await,
        Ok(BuiltinForm::Protobuf) => {}
        // Nothing acceptable: the 406 goes out in JSON, as kube's does when no serializer
        // fits (`ErrorNegotiated` falls back to its first).
        Err(e) => return e.into_response(),
    }
    let watch = is_watch(&req);
    // The handlers answer JSON; this layer encodes it.
    req.headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let resp = next.run(req).await;
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !json {
        // Not an object (a log's text): nothing to encode.
        return resp;
    }
    if watch && resp.status() == StatusCode::OK {
        return watch_stream(resp);
    }
    encode_response(&st, resp).await
}

/// A failure to encode an answer: logged, and answered as a 500 Status (itself in
/// protobuf, which a Status always has).
fn encode_failure(why: String) -> Response {
    tracing::error!(error = %why, "encoding an answer as protobuf");
    let status = ApiError::internal(format!("encoding the answer as protobuf: {why}")).status;
    let bytes = serde_json::to_value(&*status)
        .map_err(|e| e.to_string())
        .and_then(|v| super::encode(v).map_err(|e| e.to_string()));
    match bytes {
        Ok(b) => protobuf_response(StatusCode::INTERNAL_SERVER_ERROR, b),
        Err(e) => {
            // A Status that does not encode is a bug in the codec: say so in JSON.
            ApiError::internal(format!("encoding a Status as protobuf: {e}")).into_response()
        }
    }
}

fn protobuf_response(code: StatusCode, bytes: Vec<u8>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, super::MEDIA_TYPE)],
        Body::from(bytes),
    )
        .into_response()
}

async fn encode_response(st: &ApiState, resp: Response) -> Response {
    use http_body_util::BodyExt as _;
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return encode_failure(format!("reading the answer: {e}")),
    };
    // Re-encoding a large list is CPU work: on the API's CPU pool, like its JSON encode.
    let encoded = st
        .cpu
        .run(move || {
            let value: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            super::encode(value).map_err(|e| e.to_string())
        })
        .await;
    match encoded {
        Ok(Ok(pb)) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(super::MEDIA_TYPE),
            );
            Response::from_parts(parts, Body::from(pb))
        }
        Ok(Err(why)) => encode_failure(why),
        Err(e) => e.into_response(),
    }
}

/// A JSON watch stream (one `{"type":…,"object":…}` line per event) as protobuf frames.
fn watch_stream(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(super::WATCH_MEDIA_TYPE),
    );
    let state = Lines {
        body: body.into_data_stream(),
        buf: Vec::new(),
        done: false,
    };
    let frames = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(pos) = s.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = s.buf.drain(..=pos).collect();
                let frame = match frame_line(&line) {
                    Ok(f) => f,
                    Err(why) => {
                        // The stream cannot go on without losing the event: tell the
                        // client, as a watch tells of any failure, and end it.
                        s.done = true;
                        s.buf.clear();
                        error_frame(&why)
                    }
                };
                return Some((Ok::<_, std::io::Error>(bytes::Bytes::from(frame)), s));
            }
            if s.done {
                return None;
            }
            match s.body.next().await {
                Some(Ok(chunk)) => s.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Some((Err(std::io::Error::other(e)), s)),
                None => s.done = true,
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(frames))
}

struct Lines {
    body: axum::body::BodyDataStream,
    buf: Vec<u8>,
    done: bool,
}

fn frame_line(line: &[u8]) -> Result<Vec<u8>, String> {
    let mut event: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let event_type = event["type"].as_str().unwrap_or("").to_string();
    let object = event["object"].take();
    super::watch_frame(&event_type, object).map_err(|e| e.to_string())
}

fn error_frame(why: &str) -> Vec<u8> {
    tracing::error!(error = %why, "encoding a watch event as protobuf");
    let status = ApiError::internal(format!("encoding a watch event as protobuf: {why}")).status;
    serde_json::to_value(&*status)
        .ok()
        .and_then(|v| super::watch_frame("ERROR", v).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_resource_paths() {
        let cases = [
            ("/api/v1/namespaces", true),
            ("/api/v1/namespaces/default/configmaps/x", true),
            ("/api/v1/configmaps", true),
            ("/api/v1/namespaces/default/pods/p/log", true),
            ("/api/v1", false),
            ("/api/v1/", false),
            ("/api", false),
            ("/apis/apps/v1/namespaces/default/deployments", true),
            ("/apis/apps/v1/deployments", true),
            ("/apis/events.k8s.io/v1/events", true),
            ("/apis/apps/v1", false),
            ("/apis/apps", false),
            (
                "/apis/serving.knative.dev/v1/namespaces/default/services",
                false,
            ),
            ("/apis/meta.k8s.io/v1/x", false),
            ("/openapi/v2", false),
            ("/version", false),
        ];
        for (path, want) in cases {
            assert_eq!(builtin_resource_path(path), want, "{path}");
        }
    }

    #[test]
    fn watch_lines_become_frames() {
        let line = br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}}"#;
        let frame = frame_line(line).unwrap();
        let events = super::super::read_watch_frames(&frame).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, "ADDED");
        assert_eq!(events[0].1["data"]["k"], "v");
        // An object with no protobuf form is an error, not a silent drop.
        let bad = br#"{"type":"ADDED","object":{"apiVersion":"serving.knative.dev/v1","kind":"Service"}}"#;
        assert!(frame_line(bad).unwrap_err().contains("no protobuf form"));
        let err = super::super::read_watch_frames(&error_frame("boom")).unwrap();
        assert_eq!(err[0].0, "ERROR");
        assert_eq!(err[0].1["code"], 500);
    }
}
