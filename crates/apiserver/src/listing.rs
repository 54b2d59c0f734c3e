//! List parameters: `limit` + `continue` (chunked lists), `resourceVersion` +
//! `resourceVersionMatch`, checked and answered as kube-apiserver does
//! (`k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`
//! `ValidateListOptions`; `k8s.io/apiserver/pkg/storage/continue.go`; the etcd3 store's
//! `GetList`).
//!
//! wisp's store reads the current state only: a continued list resumes after the last key
//! it returned, in the objects as they are now (kube reads the snapshot of the first
//! chunk); `resourceVersionMatch=Exact` is served for the current resourceVersion only.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{Value, json};
use wisp_api::core::{ErrorType, FieldErr};

use crate::error::ApiError;

/// A list's parameters.
#[derive(Debug, Default, PartialEq)]
pub struct ListParams {
    pub limit: Option<usize>,
    /// Resume after this `namespace/name` key, at the token's resourceVersion.
    pub resume: Option<(u64, String)>,
    /// `resourceVersion=N` with `NotOlderThan` (or no match): the list must be at least N.
    pub not_older_than: Option<u64>,
    /// `resourceVersionMatch=Exact`: the list must be at exactly N.
    pub exact: Option<u64>,
}

/// continue.go's token: `{"v":"meta.k8s.io/v1","rv":N,"start":"key\u0000"}`, base64.
pub fn encode_continue(rv: u64, last_key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last_key}\u{0}")});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    // continue.go DecodeContinue's errors, under kube's BadRequest.
    let bad = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|_| bad("illegal base64 data"))?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad("invalid JSON"))?;
    if v["v"] != "meta.k8s.io/v1" {
        return Err(bad("server does not recognize this encoded key"));
    }
    let rv = v["rv"]
        .as_u64()
        .filter(|rv| *rv > 0)
        .ok_or_else(|| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let start = v["start"].as_str().unwrap_or("");
    let start = start.strip_suffix('\u{0}').unwrap_or(start);
    if start.is_empty() {
        return Err(bad("encoded start key is empty"));
    }
    Ok((rv, start.to_string()))
}

fn invalid(errs: &[FieldErr]) -> ApiError {
    ApiError::invalid_core("ListOptions.meta.k8s.io", "", errs)
}

fn forbidden(field: &str, detail: &str) -> FieldErr {
    FieldErr {
        type_: ErrorType::Forbidden,
        field: field.into(),
        value: String::new(),
        detail: detail.into(),
    }
}

/// Parses and checks a list's parameters (not `watch`'s).
pub fn parse(q: &HashMap<String, String>) -> Result<ListParams, ApiError> {
    let mut p = ListParams::default();
    if let Some(l) = q.get("limit").filter(|l| !l.is_empty()) {
        let n: i64 = l.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid limit {l:?}: must be an integer"))
        })?;
        // A limit of 0 or less is no limit (ListOptions.Limit).
        if n > 0 {
            p.limit = Some(n as usize);
        }
    }
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let matching = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let cont = q.get("continue").map(String::as_str).unwrap_or("");
    let mut errs = Vec::new();
    if !matching.is_empty() {
        if rv.is_empty() {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !cont.is_empty() {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        match matching {
            "NotOlderThan" => {}
            "Exact" if rv == "0" => errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )),
            "Exact" => {}
            other => errs.push(FieldErr {
                type_: ErrorType::NotSupported,
                field: "resourceVersionMatch".into(),
                value: format!("{other:?}"),
                detail: "supported values: \"Exact\", \"NotOlderThan\", \"\"".into(),
            }),
        }
    }
    if !cont.is_empty() && !rv.is_empty() && rv != "0" {
        errs.push(forbidden(
            "resourceVersion",
            "specifying resource version is not allowed when using continue",
        ));
    }
    if !errs.is_empty() {
        return Err(invalid(&errs));
    }
    if !cont.is_empty() {
        p.resume = Some(decode_continue(cont)?);
    }
    if !rv.is_empty() && rv != "0" {
        let n: u64 = rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
        if matching == "Exact" {
            p.exact = Some(n);
        } else {
            p.not_older_than = Some(n);
        }
    }
    Ok(p)
}

/// A watch's options, checked as `validateWatchOptions` checks them with the WatchList
/// feature gate off (its default in kube 1.32).
pub fn validate_watch(q: &HashMap<String, String>) -> Result<(), ApiError> {
    let matching = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let initial = q.contains_key("sendInitialEvents");
    let mut errs = Vec::new();
    if initial {
        if matching != "NotOlderThan" {
            errs.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        errs.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    }
    if !matching.is_empty() {
        if !initial {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if matching != "NotOlderThan" {
            errs.push(FieldErr {
                type_: ErrorType::NotSupported,
                field: "resourceVersionMatch".into(),
                value: format!("{matching:?}"),
                detail: "supported values: \"NotOlderThan\"".into(),
            });
        }
        if q.get("continue").is_some_and(|c| !c.is_empty()) {
            errs.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(&errs))
    }
}

/// kube's answer to a list at a resourceVersion newer than the store's
/// (`storage.NewTooLargeResourceVersionError`).
pub fn too_large(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {requested}, current: {current}"),
    );
    e.status.details = Some(json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }));
    e
}

/// kube's 410 for a continue token whose snapshot is compacted away.
pub fn continue_expired() -> ApiError {
    ApiError::new(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    )
}

/// kube's 410 for an `Exact` list at a version the store cannot serve.
pub fn exact_expired() -> ApiError {
    ApiError::new(
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    )
}

/// Cuts a list (`items`, in key order, as of resourceVersion `rv`) to what its parameters
/// ask — the resourceVersion checks, the `continue` token's start, the `limit` — and
/// returns its `ListMeta` (resourceVersion, continue, remainingItemCount), as the etcd3
/// store's `GetList` answers. `reachable` says whether a token's resourceVersion is still
/// in the history (a token older than it is 410 Expired); `filtered` lists (by a
/// selector) get no remaining count, as etcd's. `unread` counts matching objects beyond
/// `items` that the caller did not read (`wisp_store::ListPage::unread`).
pub fn page<T: Keyed>(
    items: &mut Vec<T>,
    unread: usize,
    rv: u64,
    params: &ListParams,
    filtered: bool,
    reachable: impl FnOnce(u64) -> bool,
) -> Result<Value, ApiError> {
    if let Some(n) = params.not_older_than
        && n > rv
    {
        return Err(too_large(n, rv));
    }
    if params.exact.is_some_and(|n| n != rv) {
        return Err(exact_expired());
    }
    let mut list_rv = rv;
    if let Some((token_rv, start)) = &params.resume {
        if !reachable(*token_rv) {
            return Err(continue_expired());
        }
        let start = split_key(start);
        items.retain(|o| o.key() > start);
        list_rv = *token_rv;
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(limit) = params.limit
        && items.len() > limit
    {
        let remaining = items.len() - limit + unread;
        items.truncate(limit);
        let (lns, lname) = items.last().map(Keyed::key).unwrap_or_default();
        meta["continue"] = encode_continue(list_rv, &format!("{lns}/{lname}")).into();
        if !filtered {
            meta["remainingItemCount"] = remaining.into();
        }
    }
    Ok(meta)
}

/// A list item's sort key: (namespace, name), as the store sorts.
pub trait Keyed {
    fn key(&self) -> (&str, &str);
}

impl Keyed for Value {
    fn key(&self) -> (&str, &str) {
        key(self)
    }
}

impl Keyed for std::sync::Arc<Value> {
    fn key(&self) -> (&str, &str) {
        key(self)
    }
}

/// A stored object's JSON text with its key, read without parsing the rest of it: a list
/// answered as stored copies each text into the answer instead of building every object
/// as a `Value` (about nine times its text) and writing it out again.
pub struct RawItem {
    pub text: String,
    namespace: String,
    name: String,
}

impl RawItem {
    pub fn new(text: String) -> Result<RawItem, serde_json::Error> {
        #[derive(serde::Deserialize)]
        struct Meta {
            namespace: Option<String>,
            name: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Object {
            metadata: Meta,
        }
        let o: Object = serde_json::from_str(&text)?;
        Ok(RawItem {
            text,
            namespace: o.metadata.namespace.unwrap_or_default(),
            name: o.metadata.name.unwrap_or_default(),
        })
    }
}

impl Keyed for RawItem {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

/// The key a list is sorted by: (namespace, name), as the store sorts.
pub fn key(obj: &Value) -> (&str, &str) {
    (
        obj["metadata"]["namespace"].as_str().unwrap_or(""),
        obj["metadata"]["name"].as_str().unwrap_or(""),
    )
}

/// A continue token's start key (`namespace/name`; a namespace has no `/`) as [`key`]'s
/// tuple.
pub fn split_key(start: &str) -> (&str, &str) {
    start.split_once('/').unwrap_or(("", start))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_raw_item_is_keyed_by_its_metadata_without_the_rest() {
        let cases = [
            (
                r#"{"kind":"X","metadata":{"name":"a","namespace":"ns","labels":{"x":"y"}},"spec":{"n":[1,2]}}"#,
                ("ns", "a"),
            ),
            // Cluster-scoped: no namespace.
            (r#"{"metadata":{"name":"c"}}"#, ("", "c")),
        ];
        for (text, want) in cases {
            let item = RawItem::new(text.to_string()).unwrap();
            assert_eq!(item.key(), want);
            assert_eq!(item.text, text, "kept as stored");
        }
        assert!(RawItem::new("{}".into()).is_err(), "no metadata");
    }

    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn watch_options_fail_as_kube_without_watch_list() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: [Case; 4] = [
            (&[], None),
            (
                &[("resourceVersionMatch", "NotOlderThan")],
                Some(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ),
            ),
            (
                &[("sendInitialEvents", "true")],
                Some(
                    "[resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled]",
                ),
            ),
            (
                &[
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                Some(
                    "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                ),
            ),
        ];
        for (params, want) in cases {
            let got = validate_watch(&q(params)).err().map(|e| e.status.message);
            let want = want.map(|w| format!("ListOptions.meta.k8s.io \"\" is invalid: {w}"));
            assert_eq!(got, want, "{params:?}");
        }
    }

    #[test]
    fn list_options_parse_or_fail_as_kube() {
        let token = encode_continue(7, "default/b");
        type Case = (
            HashMap<String, String>,
            Result<ListParams, (u16, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (q(&[]), Ok(ListParams::default())),
            (
                q(&[("limit", "2")]),
                Ok(ListParams {
                    limit: Some(2),
                    ..Default::default()
                }),
            ),
            (q(&[("limit", "0")]), Ok(ListParams::default())),
            (
                q(&[("continue", &token), ("limit", "1")]),
                Ok(ListParams {
                    limit: Some(1),
                    resume: Some((7, "default/b".into())),
                    ..Default::default()
                }),
            ),
            (
                q(&[("resourceVersion", "5")]),
                Ok(ListParams {
                    not_older_than: Some(5),
                    ..Default::default()
                }),
            ),
            (
                q(&[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")]),
                Ok(ListParams {
                    exact: Some(5),
                    ..Default::default()
                }),
            ),
            (
                q(&[("resourceVersionMatch", "Exact")]),
                Err((
                    422,
                    "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                )),
            ),
            (
                q(&[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")]),
                Err((
                    422,
                    "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                )),
            ),
            (
                q(&[("resourceVersion", "1"), ("resourceVersionMatch", "Newest")]),
                Err((
                    422,
                    "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
                )),
            ),
            (
                q(&[("continue", "!!!")]),
                Err((400, "continue key is not valid: illegal base64 data")),
            ),
            (
                q(&[("limit", "x")]),
                Err((400, "invalid limit \"x\": must be an integer")),
            ),
        ];
        for (params, want) in cases {
            match (parse(&params), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{params:?}"),
                (Err(e), Err((code, msg))) => {
                    assert_eq!((e.status.code, e.status.message.as_str()), (code, msg))
                }
                (got, want) => panic!("{params:?}: {got:?} want {want:?}"),
            }
        }
    }
}
