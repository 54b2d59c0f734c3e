//! Request bodies: JSON or YAML objects, merge patches, and the size limit.

use axum::{body::Body, http::HeaderMap};
use serde_json::Value;

use tokio::sync::OwnedSemaphorePermit;

use crate::{error::ApiError, inflight::BodyBudget};

/// Kubernetes' request body limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How much of a body past the limit is still read (and dropped) before the 413: a client
/// that is still sending would otherwise have its connection closed under it and see a
/// broken pipe instead of the answer.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// A request body read into memory, holding its share of the [`BodyBudget`] until dropped.
#[derive(Debug)]
pub struct Buffered {
    pub bytes: bytes::Bytes,
    _budget: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for Buffered {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads the whole body within the shared `budget`, answering 413 past the size limit.
///
/// The budget is reserved before reading, in one piece: the declared `Content-Length`, or
/// a maximal body when the length is not known (chunked).
pub async fn read(mut body: Body, budget: &BodyBudget) -> Result<Buffered, ApiError> {
    use http_body_util::BodyExt as _;
    let declared = axum::body::HttpBody::size_hint(&body).exact();
    let over = declared.is_some_and(|n| n > MAX_BODY_BYTES as u64);
    let held = if over {
        None
    } else {
        let want = declared.map_or(MAX_BODY_BYTES, |n| n as usize);
        budget.reserve(want).await
    };
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= MAX_BODY_BYTES && !over {
            buf.extend_from_slice(&data);
        } else if seen > MAX_BODY_BYTES.saturating_add(DRAIN_BYTES) {
            break;
        } else if !buf.is_empty() {
            // Over the limit: only counting from here on.
            buf = bytes::BytesMut::new();
        }
    }
    if seen > MAX_BODY_BYTES || over {
        return Err(ApiError::too_large());
    }
    Ok(Buffered {
        bytes: buf.freeze(),
        _budget: held,
    })
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
    parse_as(&content_type(headers), bytes)
}

/// [`parse_object`] for a body of the given media type ([`content_type`]'s form). Protobuf
/// bodies are decoded against the kind the path serves ([`crate::protobuf::decode_body`]),
/// so they are not read here.
pub fn parse_as(content_type: &str, bytes: &[u8]) -> Result<Value, ApiError> {
    let value = match content_type {
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

/// The most values (objects, arrays, scalars) one request body may decode into, and the
/// deepest nesting. A Knative object has a few hundred values and nests about 15 deep;
/// the bounds keep the memory and time of decoding any body within the size limit small
/// (a YAML alias bomb expands to at most this many values before it is refused).
pub const MAX_VALUES: usize = 100_000;
pub const MAX_DEPTH: usize = 64;

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    json_shape(bytes)
        .map_err(|what| ApiError::bad_request(format!("error decoding JSON body: {what}")))?;
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
}

/// Checks a JSON text against [`MAX_VALUES`] and [`MAX_DEPTH`] before anything is built
/// from it: one pass over the bytes, counting the values that commas, brackets and braces
/// outside strings delimit (an upper bound of the decoded values, never less).
fn json_shape(bytes: &[u8]) -> Result<(), String> {
    let (mut values, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                values += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => values += 1,
            _ => continue,
        }
        if values > MAX_VALUES {
            return Err(format!("more than {MAX_VALUES} values in one object"));
        }
    }
    Ok(())
}

fn parse_yaml(bytes: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("error decoding YAML body: not valid UTF-8"))?;
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_VALUES,
            max_depth: MAX_DEPTH,
            max_events: 4 * MAX_VALUES,
            max_aliases: MAX_VALUES,
            max_anchors: MAX_VALUES,
            max_documents: 1,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_VALUES,
        },
    };
    serde_saphyr::from_str_with_options::<Value>(text, options)
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
        let budget = BodyBudget::default();
        let ok = read(Body::from(vec![b'x'; MAX_BODY_BYTES]), &budget)
            .await
            .unwrap();
        assert_eq!(ok.len(), MAX_BODY_BYTES);
        drop(ok);
        for len in [MAX_BODY_BYTES + 1, MAX_BODY_BYTES + DRAIN_BYTES + 1] {
            let err = read(Body::from(vec![b'x'; len]), &budget)
                .await
                .unwrap_err();
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
            read(Body::from_stream(chunks), &budget)
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

    #[test]
    fn json_shape_bounds_values_and_depth() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let wide = |n: usize| format!("[{}0]", "0,".repeat(n - 1));
        let ok = [
            r#"{"a":[1,2,{"b":"c"}]}"#.to_string(),
            // Brackets, braces and commas inside strings are text, not structure.
            format!(r#"{{"a":"{}"}}"#, "[,{".repeat(MAX_VALUES)),
            r#"{"a":"\"[[[,,,"}"#.to_string(),
            deep(MAX_DEPTH),
            wide(MAX_VALUES - 1),
        ];
        for text in ok {
            assert_eq!(json_shape(text.as_bytes()), Ok(()), "{:.40}", text);
        }
        let too_deep = deep(MAX_DEPTH + 1);
        assert_eq!(
            json_shape(too_deep.as_bytes()),
            Err(format!("nested deeper than {MAX_DEPTH} levels"))
        );
        let too_wide = wide(MAX_VALUES + 1);
        assert_eq!(
            json_shape(too_wide.as_bytes()),
            Err(format!("more than {MAX_VALUES} values in one object"))
        );
    }

    #[test]
    fn bombs_are_refused_quickly_and_small_objects_pass() {
        let mut json = HeaderMap::new();
        json.insert("content-type", "application/json".parse().unwrap());
        let mut yaml = HeaderMap::new();
        yaml.insert("content-type", "application/yaml".parse().unwrap());
        // The billion laughs: nine levels of ten aliases each.
        let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            laughs.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let wide_json = format!("{{\"a\":[{}0]}}", "0,".repeat(MAX_VALUES));
        let wide_yaml = format!("a: [{}0]\n", "0, ".repeat(MAX_VALUES));
        let deep_yaml = format!(
            "a: {}{}\n",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        let cases: [(&HeaderMap, &str); 4] = [
            (&yaml, &laughs),
            (&json, &wide_json),
            (&yaml, &wide_yaml),
            (&yaml, &deep_yaml),
        ];
        for (headers, body) in cases {
            let start = std::time::Instant::now();
            let err = parse_object(headers, body.as_bytes()).unwrap_err();
            assert_eq!(err.status.code, 400, "{:.60}", body);
            // Generous for a debug build on a loaded machine (1-2.5 s measured there):
            // unbounded work (10^10 laughs, a million values expanded) takes hours.
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{:?} for {:.60}: {}",
                start.elapsed(),
                body,
                err.status.message
            );
        }
        // A real object with an anchor and an alias still decodes.
        let svc = "metadata: {name: a, labels: &l {app: a}}\nspec: {template: {metadata: {labels: *l}}}\n";
        let v = parse_object(&yaml, svc.as_bytes()).unwrap();
        assert_eq!(v["spec"]["template"]["metadata"]["labels"]["app"], "a");
    }
}

#[cfg(test)]
mod duplicate_yaml {
    use super::*;

    /// docs/differences.md says a YAML body that repeats a key is refused by the decoder.
    #[test]
    fn repeated_yaml_keys_are_refused() {
        let err = parse_as("application/yaml", b"a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.status.code, 400, "{}", err.status.message);
    }
}
