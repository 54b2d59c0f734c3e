//! One handler per verb. Store calls are synchronous SQLite work, so none runs on the async
//! workers: reads go to the blocking pool, writes to the API's [`Batcher`] thread, where
//! writes that arrive together commit together (one fsync for all of them).

use std::collections::HashMap;

use axum::{
    Extension, Json,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use wisp_api::kinds::{self, ResourceKind};
use wisp_store::{LabelSelector, StoreError};

use crate::{
    ApiState, admission, auth,
    body::{self, merge_patch},
    error::{ApiError, add_warnings},
    negotiate::{self, ObjectForm},
    table::{Include, Layout},
    watch,
};

type NsPath = Path<(String, String, String, String)>;
type NamePath = Path<(String, String, String, String, String)>;
type Params = Query<HashMap<String, String>>;

/// How many times a write retries after losing a compare-and-swap race it started itself
/// (a client-supplied resourceVersion is never retried: its conflict is the client's).
const CAS_RETRIES: usize = 5;

fn resolve(group: &str, version: &str, plural: &str) -> Result<&'static ResourceKind, ApiError> {
    kinds::by_plural(group, plural)
        // The core kinds live under /api/v1 only (core_routes.rs).
        .filter(|k| k.version == version && !k.is_core())
        .ok_or_else(ApiError::path_not_found)
}

/// The store key of a kind ([`ResourceKind::store_key`]).
pub fn resource(kind: &ResourceKind) -> String {
    kind.store_key()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("store task failed: {e}")))?
}

/// Runs a unit of writes on the API's batching thread; answered once it is committed.
pub(crate) async fn write<T: Send + 'static>(
    st: ApiState,
    f: impl FnOnce(&ApiState) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let writer = st.writer.clone();
    writer
        .run(move || f(&st))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

pub(crate) fn ok(code: StatusCode, object: Value, warnings: &[String]) -> Response {
    let mut resp = (code, Json(object)).into_response();
    add_warnings(&mut resp, warnings);
    resp
}

// === reads ===

/// How a read answers: plain objects, or a Table with its `includeObject`.
#[derive(Clone, Copy)]
enum ReadForm {
    Json,
    Table {
        version: &'static str,
        include: Include,
    },
}

/// Negotiates a read's form from `Accept` and `includeObject` (only read for Tables, as
/// kube reads `TableOptions` only then).
fn read_form(headers: &HeaderMap, q: &HashMap<String, String>) -> Result<ReadForm, ApiError> {
    Ok(match negotiate::object_form(negotiate::accept(headers))? {
        ObjectForm::Json => ReadForm::Json,
        ObjectForm::Table(version) => ReadForm::Table {
            version,
            include: Include::parse(q.get("includeObject").map(String::as_str))?,
        },
    })
}

pub async fn get(
    State(st): State<ApiState>,
    Path((g, v, ns, plural, name)): NamePath,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    get_in(st, kind, ns, name, q, headers).await
}

/// [`get`] of a resolved kind (`ns` is "" for a cluster-scoped one).
pub(crate) async fn get_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    q: HashMap<String, String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = read_form(&headers, &q)?;
    let res = resource(kind);
    let obj = blocking(move || {
        st.store
            .get(&res, &ns, &name)?
            .ok_or_else(|| ApiError::not_found(&res, &name))
    })
    .await?;
    match form {
        ReadForm::Json => Ok(ok(StatusCode::OK, obj, &[])),
        ReadForm::Table { version, include } => {
            // A Table of one object carries that object's resourceVersion
            // (tableconvertor.go: CommonAccessor).
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let table = Layout::of(kind)?.table(vec![obj], &rv, include, version);
            Ok(ok(StatusCode::OK, table, &[]))
        }
    }
}

pub async fn get_status(
    state: State<ApiState>,
    path: NamePath,
    q: Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    get(state, path, q, headers).await
}

pub async fn list(
    State(st): State<ApiState>,
    Path((g, v, ns, plural)): NsPath,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    list_or_watch(st, kind, Some(ns), q, &headers).await
}

pub async fn list_all(
    State(st): State<ApiState>,
    Path((g, v, plural)): Path<(String, String, String)>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    list_or_watch(st, kind, None, q, &headers).await
}

pub(crate) async fn list_or_watch(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    q: HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let form = read_form(headers, &q)?;
    let selector = match q.get("labelSelector").filter(|s| !s.is_empty()) {
        Some(s) => Some(LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?),
        None => None,
    };
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        let from = match q.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => None,
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion {rv:?}: must be an integer"
                ))
            })?),
        };
        let timeout = match q.get("timeoutSeconds") {
            Some(t) => Some(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {t:?}: must be an integer"))
            })?),
            None => None,
        };
        let table = match form {
            ReadForm::Json => None,
            ReadForm::Table { version, include } => {
                Some(watch::TableWatch::new(kind, include, version)?)
            }
        };
        return watch::serve(st, kind, ns, selector, from, timeout, table).await;
    }
    let res = resource(kind);
    // Read and encoded on the blocking pool: a large list is CPU work the async workers
    // must not do.
    let body = blocking(move || {
        let (items, rv) = st.store.list(&res, ns.as_deref(), selector.as_ref())?;
        let list = match form {
            ReadForm::Json => json!({
                "apiVersion": kind.api_version(),
                "kind": format!("{}List", kind.kind),
                "metadata": {"resourceVersion": rv.to_string()},
                "items": items,
            }),
            ReadForm::Table { version, include } => {
                Layout::of(kind)?.table(items, &rv.to_string(), include, version)
            }
        };
        serde_json::to_vec(&list).map_err(|e| ApiError::internal(format!("encoding the list: {e}")))
    })
    .await?;
    Ok((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

// === writes ===

/// Checks apiVersion/kind/namespace/name of a written object against the URL, fills what
/// the client may omit, and drops what only the server sets.
fn normalize(
    kind: &ResourceKind,
    obj: &mut Value,
    ns: &str,
    name: Option<&str>,
) -> Result<(), ApiError> {
    let map = obj.as_object_mut().expect("parse_object checked");
    let want_av = kind.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), want_av.clone().into());
        }
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), kind.kind.into());
        }
        Some(k) if k == kind.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
    }
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    match meta.get("namespace").and_then(Value::as_str) {
        // A cluster-scoped object has no namespace (kube's BeforeCreate clears it).
        _ if !kind.namespaced => {
            meta.remove("namespace");
        }
        None | Some("") => {
            meta.insert("namespace".into(), ns.into());
        }
        Some(n) if n == ns => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    if let Some(url_name) = name {
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), url_name.into());
            }
            Some(n) if n == url_name => {}
            Some(_) => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
        }
    }
    Ok(())
}

pub async fn create(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, ns, plural)): NsPath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    create_in(st, kind, ns, headers, body).await
}

/// [`create`] of a resolved kind (`ns` is "" for a cluster-scoped one).
pub(crate) async fn create_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let lifecycle_ns = ns.clone();
    // Decoded and admitted on the CPU pool, before the write joins a batch (which holds
    // the store): defaulting and validation need nothing stored. Only a generated name
    // that is taken admits again, in the batch.
    let (obj, generate, first) = decode(&st, &headers, body, {
        let st = st.clone();
        move |mut obj| {
            normalize(kind, &mut obj, &ns, None)?;
            let meta = obj["metadata"].as_object_mut().expect("normalized");
            for server_owned in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
            ] {
                meta.remove(server_owned);
            }
            obj.as_object_mut().expect("object").remove("status");
            // kube-apiserver runs NamespaceLifecycle before the validating webhooks Knative's
            // kinds are checked by (a core kind's own validation comes first, in its
            // strategy): a missing namespace is the answer even for an invalid Service.
            if kind.namespaced && !kind.is_core() {
                crate::namespaces::admit_create(&st.store, &ns, &resource(kind), &obj)?;
            }
            let generate = obj["metadata"]["name"].as_str().unwrap_or("").is_empty()
                && !obj["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or("")
                    .is_empty();
            let first = admit_new(&st, kind, &obj, generate)?;
            Ok((obj, generate, first))
        }
    })
    .await?;
    let mut first = Some(first);
    write(st, move |st| {
        let res = resource(kind);
        // In the write batch, so that a namespace's deletion and a create in it are ordered.
        if kind.namespaced {
            crate::namespaces::admit_create(&st.store, &lifecycle_ns, &res, &obj)?;
        }
        cas_retries(
            || {
                let admitted = match first.take() {
                    Some(a) => a,
                    None => admit_new(st, kind, &obj, generate)?,
                };
                match st.store.create(&res, admitted.object) {
                    Ok(created) => Ok(Some(ok(StatusCode::CREATED, created, &admitted.warnings))),
                    Err(StoreError::AlreadyExists { .. }) if generate => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
            || ApiError::new(500, "AlreadyExists", "could not generate a unique name"),
        )
    })
    .await
}

/// Admission of a new object; with `generate`, under a fresh name from its generateName.
fn admit_new(
    st: &ApiState,
    kind: &'static ResourceKind,
    obj: &Value,
    generate: bool,
) -> Result<admission::Admitted, ApiError> {
    let mut candidate = obj.clone();
    if generate {
        let prefix = candidate["metadata"]["generateName"]
            .as_str()
            .unwrap_or("")
            .to_string();
        candidate["metadata"]["name"] = format!("{prefix}{}", random_suffix()).into();
    }
    admission::admit(kind, candidate, None, &st.config, &st.user)
}

/// Runs `attempt` until it no longer asks to be retried (`Ok(None)`: it lost a
/// compare-and-swap race it started itself, or drew a taken generated name), at most
/// [`CAS_RETRIES`] times; then answers `exhausted()`.
fn cas_retries<T>(
    mut attempt: impl FnMut() -> Result<Option<T>, ApiError>,
    exhausted: impl FnOnce() -> ApiError,
) -> Result<T, ApiError> {
    for _ in 0..CAS_RETRIES {
        if let Some(done) = attempt()? {
            return Ok(done);
        }
    }
    Err(exhausted())
}

/// What a PUT replaces: the object (admitted later, against the stored one) or its status
/// (which must decode as the kind's object here, as nothing admits it later).
#[derive(Clone, Copy)]
enum Whole {
    Object,
    Status,
}

/// Decodes a PUT's body for the object the URL names, normalized against the URL.
async fn decode_named(
    st: &ApiState,
    headers: &HeaderMap,
    body: Body,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    whole: Whole,
) -> Result<Value, ApiError> {
    let (ns, name) = (ns.to_owned(), name.to_owned());
    decode(st, headers, body, move |mut obj| {
        normalize(kind, &mut obj, &ns, Some(&name))?;
        if let Whole::Status = whole {
            admission::decode::<wisp_api::serving::Object<Value, Value>>(kind, &obj)?;
        }
        Ok(obj)
    })
    .await
}

/// Reads the body within the shared byte budget, then decodes it (JSON or YAML by its
/// content type) and runs `then` on the decoded object, both on the CPU pool.
async fn decode<T: Send + 'static>(
    st: &ApiState,
    headers: &HeaderMap,
    body: Body,
    then: impl FnOnce(Value) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let bytes = body::read(body, &st.body_budget).await?;
    let content_type = body::content_type(headers);
    st.cpu
        .run(move || then(body::parse_as(&content_type, &bytes)?))
        .await?
}

/// Kubernetes' generateName suffix: 5 characters from an alphabet without vowels or
/// look-alikes, so generated names never spell words.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

pub async fn replace(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, ns, plural, name)): NamePath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    replace_in(st, kind, ns, name, headers, body).await
}

pub(crate) async fn replace_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let obj = decode_named(&st, &headers, body, kind, &ns, &name, Whole::Object).await?;
    write(st, move |st| {
        update_with(st, kind, &ns, &name, |_old| Ok(obj.clone()))
    })
    .await
}

pub async fn patch(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, ns, plural, name)): NamePath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    patch_in(st, kind, ns, name, headers, body).await
}

pub(crate) async fn patch_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let patch = patch_body(&st, &headers, body).await?;
    write(st, move |st| {
        update_with(st, kind, &ns, &name, |old| {
            let mut merged = old.clone();
            merge_patch(&mut merged, &patch);
            normalize(kind, &mut merged, &ns, Some(&name))?;
            Ok(merged)
        })
    })
    .await
}

async fn patch_body(st: &ApiState, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    let ct = body::content_type(headers);
    if !matches!(
        ct.as_str(),
        "application/merge-patch+json"
            | "application/strategic-merge-patch+json"
            | "application/json"
    ) {
        return Err(ApiError::unsupported_media_type(&ct));
    }
    decode(st, headers, body, Ok).await
}

/// Read-admit-write with compare-and-swap. `build` turns the stored object into the object
/// to write; when it carries no resourceVersion the stored one is used, so a concurrent
/// write makes this attempt fail and retry against fresh state instead of overwriting it.
fn update_with(
    st: &ApiState,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    build: impl Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let res = resource(kind);
    cas_retries(
        || {
            let old = st
                .store
                .get(&res, ns, name)?
                .ok_or_else(|| ApiError::not_found(&res, name))?;
            let mut new = build(&old)?;
            let client_rv = new["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            // Status is written through /status only; server-owned metadata comes from the
            // store.
            if let Some(status) = old.get("status") {
                new["status"] = status.clone();
            } else if let Some(m) = new.as_object_mut() {
                m.remove("status");
            }
            for server_owned in [
                "uid",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
            ] {
                match old["metadata"].get(server_owned) {
                    Some(v) => new["metadata"][server_owned] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(server_owned);
                        }
                    }
                }
            }
            let admitted = admission::admit(kind, new, Some(&old), &st.config, &st.user)?;
            let mut object = admitted.object;
            if client_rv.is_empty() {
                object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            }
            match st.store.update(&res, object) {
                Ok(updated) => Ok(Some(ok(StatusCode::OK, updated, &admitted.warnings))),
                // Only a conflict with the version this attempt read is ours to retry; a
                // client-supplied resourceVersion's conflict is the client's.
                Err(StoreError::Conflict { .. }) if client_rv.is_empty() => Ok(None),
                Err(e) => Err(e.into()),
            }
        },
        || too_many_updates(&res, name),
    )
}

fn too_many_updates(res: &str, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {res} {name:?}: too many concurrent updates; please retry"
        ),
    )
}

pub async fn replace_status(
    State(st): State<ApiState>,
    Path((g, v, ns, plural, name)): NamePath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    replace_status_in(st, kind, ns, name, headers, body).await
}

pub(crate) async fn replace_status_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let obj = decode_named(&st, &headers, body, kind, &ns, &name, Whole::Status).await?;
    let res = resource(kind);
    write(st, move |st| {
        Ok(ok(StatusCode::OK, st.store.update_status(&res, obj)?, &[]))
    })
    .await
}

pub async fn patch_status(
    State(st): State<ApiState>,
    Path((g, v, ns, plural, name)): NamePath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    patch_status_in(st, kind, ns, name, headers, body).await
}

pub(crate) async fn patch_status_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let patch = patch_body(&st, &headers, body).await?;
    let res = resource(kind);
    write(st, move |st| {
        cas_retries(
            || {
                let old = st
                    .store
                    .get(&res, &ns, &name)?
                    .ok_or_else(|| ApiError::not_found(&res, &name))?;
                let mut merged = old.clone();
                merge_patch(&mut merged, &patch);
                normalize(kind, &mut merged, &ns, Some(&name))?;
                admission::decode::<wisp_api::serving::Object<Value, Value>>(kind, &merged)?;
                merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                match st.store.update_status(&res, merged) {
                    Ok(o) => Ok(Some(ok(StatusCode::OK, o, &[]))),
                    Err(StoreError::Conflict { .. }) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
            || too_many_updates(&res, &name),
        )
    })
    .await
}

pub async fn delete(
    State(st): State<ApiState>,
    Path((g, v, ns, plural, name)): NamePath,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    delete_in(st, kind, ns, name).await
}

pub(crate) async fn delete_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
) -> Result<Response, ApiError> {
    if *kind == kinds::NAMESPACE {
        return crate::namespaces::delete(st, name).await;
    }
    let res = resource(kind);
    write(st, move |st| {
        Ok(ok(
            StatusCode::OK,
            st.store.delete(&res, &ns, &name, None)?,
            &[],
        ))
    })
    .await
}
