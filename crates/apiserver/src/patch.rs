//! PATCH bodies by media type, as kube-apiserver's `handlers/patch.go` takes them.

use serde_json::{Map, Value};
use wisp_api::kinds::ResourceKind;

use crate::error::ApiError;

pub const JSON_PATCH: &str = "application/json-patch+json";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";

/// The kinds of patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// The patch type of a content type, or kube's 415 listing what the kind accepts: custom
/// resources (the Knative kinds) take no strategic merge patch
/// (`apiextensions-apiserver/pkg/apiserver/customresource_handler.go`).
pub fn patch_type(kind: &ResourceKind, content_type: &str) -> Result<PatchType, ApiError> {
    let accepted: &[&str] = if kind.is_core() {
        &[JSON_PATCH, MERGE_PATCH, STRATEGIC, APPLY]
    } else {
        &[JSON_PATCH, MERGE_PATCH, APPLY]
    };
    let t = match content_type {
        JSON_PATCH => PatchType::Json,
        MERGE_PATCH => PatchType::Merge,
        STRATEGIC => PatchType::Strategic,
        APPLY => PatchType::Apply,
        _ => PatchType::Strategic,
    };
    if !accepted.contains(&content_type) {
        // negotiation.NewUnsupportedMediaTypeError
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        ));
    }
    Ok(t)
}

/// Applies a JSON (RFC 6902) patch, the body being its raw bytes.
pub fn apply_json_patch(target: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let ops: json_patch::Patch =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut out = target.clone();
    json_patch::patch(&mut out, &ops).map_err(|e| {
        // patch.go answers a patch that does not apply with
        // NewGenericServerResponse(422, …), whose message is the generic one (the reason
        // is only logged).
        tracing::debug!(error = %e, "JSON patch does not apply");
        ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
    })?;
    Ok(out)
}

/// A strategic merge patch for a core kind. Their fields have no merge-key lists besides
/// metadata's, so it is a merge patch once its directives are handled: `$patch: delete`
/// and `$patch: replace` on a map, `$setElementOrder/…` (order hints, nothing to do for
/// maps); other directives are refused by name.
pub fn apply_strategic(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        None | Some("merge") => {}
        Some("replace") => {
            let mut replaced = Value::Object(Map::new());
            let mut rest = p.clone();
            rest.remove("$patch");
            apply_strategic(&mut replaced, &Value::Object(rest))?;
            *target = replaced;
            return Ok(());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch type: {other:?} in map: {patch}"
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k == "$patch" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if k.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "the strategic merge patch directive {k:?} is not supported by wisp"
            )));
        }
        let delete = v.is_null() || v.get("$patch").and_then(Value::as_str) == Some("delete");
        if delete {
            t.remove(k);
        } else {
            apply_strategic(t.entry(k.clone()).or_insert(Value::Null), v)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_per_kind() {
        let cases = [
            (
                &wisp_api::kinds::SERVICE,
                MERGE_PATCH,
                Some(PatchType::Merge),
            ),
            (&wisp_api::kinds::SERVICE, JSON_PATCH, Some(PatchType::Json)),
            (&wisp_api::kinds::SERVICE, APPLY, Some(PatchType::Apply)),
            (&wisp_api::kinds::SERVICE, STRATEGIC, None),
            (&wisp_api::kinds::SERVICE, "application/json", None),
            (
                &wisp_api::kinds::CONFIG_MAP,
                STRATEGIC,
                Some(PatchType::Strategic),
            ),
        ];
        for (kind, ct, want) in cases {
            match (patch_type(kind, ct), want) {
                (Ok(t), Some(w)) => assert_eq!(t, w),
                (Err(e), None) => {
                    assert_eq!(e.status.code, 415);
                    assert!(e.status.message.starts_with(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json"
                    ));
                }
                (got, _) => panic!("{ct}: {got:?}"),
            }
        }
    }

    #[test]
    fn json_patches_apply_or_fail_as_kube() {
        let obj = json!({"spec": {"x": 1, "l": [1, 2]}});
        let cases: [(&str, Result<Value, u16>); 5] = [
            (
                r#"[{"op":"replace","path":"/spec/x","value":2}]"#,
                Ok(json!({"spec": {"x": 2, "l": [1, 2]}})),
            ),
            (
                r#"[{"op":"add","path":"/spec/l/-","value":3},{"op":"remove","path":"/spec/x"}]"#,
                Ok(json!({"spec": {"l": [1, 2, 3]}})),
            ),
            (r#"[{"op":"test","path":"/spec/x","value":9}]"#, Err(422)),
            (r#"[{"op":"remove","path":"/nope/x"}]"#, Err(422)),
            (r#"{"op":"remove"}"#, Err(400)),
        ];
        for (patch, want) in cases {
            match (apply_json_patch(&obj, patch.as_bytes()), want) {
                (Ok(v), Ok(w)) => assert_eq!(v, w),
                (Err(e), Err(code)) => assert_eq!(e.status.code, code, "{patch}"),
                (got, want) => panic!("{patch}: {got:?} want {want:?}"),
            }
        }
    }

    #[test]
    fn strategic_directives() {
        let mut t = json!({"data": {"a": "1", "b": "2"}, "metadata": {"labels": {"x": "y"}}});
        apply_strategic(
            &mut t,
            &json!({"data": {"a": null, "c": "3"}, "$setElementOrder/finalizers": []}),
        )
        .unwrap();
        assert_eq!(t["data"], json!({"b": "2", "c": "3"}));
        apply_strategic(
            &mut t,
            &json!({"metadata": {"labels": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert!(t["metadata"].get("labels").is_none());
        assert_eq!(
            apply_strategic(&mut t, &json!({"data": {"$retainKeys": ["a"]}}))
                .unwrap_err()
                .status
                .code,
            400
        );
    }
}
