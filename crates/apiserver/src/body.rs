//! Request bodies: JSON or YAML objects, merge patches, and the size limit.

use axum::{body::Body, http::HeaderMap};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::error::ApiError;

/// Kubernetes' request body limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How much of a body past the limit is still read (and dropped) before the 413: a client
/// that is still sending would otherwise have its connection closed under it and see a
/// broken pipe instead of the answer.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// Reads the whole body, answering 413 past the limit.
pub async fn read(mut body: Body) -> Result<bytes::Bytes, ApiError> {
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= MAX_BODY_BYTES {
            buf.extend_from_slice(&data);
        } else if seen > MAX_BODY_BYTES.saturating_add(DRAIN_BYTES) {
            break;
        } else if !buf.is_empty() {
            // Over the limit: only counting from here on.
            buf = bytes::BytesMut::new();
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(ApiError::too_large());
    }
    Ok(buf.freeze())
}

/// The media type of the body, without parameters, lower-cased.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Parses a JSON or YAML body into a JSON value that must be an object.
pub fn parse_object(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    let value = match ct.as_str() {
        ""
        | "application/json"
        | "application/merge-patch+json"
        | "application/strategic-merge-patch+json" => parse_json(bytes)?,
        "application/yaml"
        | "application/x-yaml"
        | "text/yaml"
        | "application/apply-patch+yaml" => parse_yaml(bytes)?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON or YAML object",
        ));
    }
    Ok(value)
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
}

fn parse_yaml(bytes: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("error decoding YAML body: not valid UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let t = target.as_object_mut().expect("just made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn bodies_past_the_limit_are_413_and_read_to_the_end() {
        let ok = read(Body::from(vec![b'x'; MAX_BODY_BYTES])).await.unwrap();
        assert_eq!(ok.len(), MAX_BODY_BYTES);
        for len in [MAX_BODY_BYTES + 1, MAX_BODY_BYTES + DRAIN_BYTES + 1] {
            let err = read(Body::from(vec![b'x'; len])).await.unwrap_err();
            assert_eq!(err.status.code, 413, "{len}");
        }
        // Read to its end: a sender would have finished writing before the answer.
        let (mut tx, rx) = tokio::io::duplex(64 * 1024);
        let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
            use tokio::io::AsyncReadExt;
            let mut chunk = vec![0u8; 64 * 1024];
            match rx.read(&mut chunk).await {
                Ok(0) | Err(_) => None,
                Ok(n) => {
                    chunk.truncate(n);
                    Some((Ok::<_, std::io::Error>(bytes::Bytes::from(chunk)), rx))
                }
            }
        });
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&vec![b'x'; MAX_BODY_BYTES + 1024 * 1024])
                .await
        });
        assert_eq!(
            read(Body::from_stream(chunks))
                .await
                .unwrap_err()
                .status
                .code,
            413
        );
        let written = tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the sender was left blocked: the body was not read to its end");
        written.unwrap().expect("the whole body was taken");
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (json!({"a": [1, 2]}), json!({"a": [3]}), json!({"a": [3]})),
            (
                json!({"a": "b"}),
                json!({"a": {"x": 1}}),
                json!({"a": {"x": 1}}),
            ),
        ];
        for (mut target, patch, want) in cases {
            merge_patch(&mut target, &patch);
            assert_eq!(target, want);
        }
    }

    #[test]
    fn parses_yaml_and_json() {
        let mut h = HeaderMap::new();
        assert_eq!(parse_object(&h, br#"{"a":1}"#).unwrap(), json!({"a": 1}));
        h.insert("content-type", "application/yaml".parse().unwrap());
        assert_eq!(
            parse_object(&h, b"a: 1\nb: [x]\n").unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(parse_object(&h, b"- 1\n").unwrap_err().status.code, 400);
        assert_eq!(parse_object(&h, b"a: [").unwrap_err().status.code, 400);
        h.insert("content-type", "text/plain".parse().unwrap());
        assert_eq!(parse_object(&h, b"{}").unwrap_err().status.code, 415);
    }
}
