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
    fields, managed,
    negotiate::{self, ObjectForm},
    params::{FieldValidation, Verb, WriteOptions, WriteReq},
    patch::{self, PatchType},
    protobuf,
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
    resolve_any(group, version, plural).and_then(|k| {
        // A cluster-scoped kind's objects are under no namespace (cluster_routes.rs).
        if k.namespaced {
            Ok(k)
        } else {
            Err(ApiError::path_not_found())
        }
    })
}

/// A kind of a named group, namespaced or not (a list across namespaces serves both).
fn resolve_any(
    group: &str,
    version: &str,
    plural: &str,
) -> Result<&'static ResourceKind, ApiError> {
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
pub(crate) enum ReadForm {
    Json,
    Table {
        version: &'static str,
        include: Include,
    },
}

/// Negotiates a read's form from `Accept` and `includeObject` (only read for Tables, as
/// kube reads `TableOptions` only then).
pub(crate) fn read_form(
    headers: &HeaderMap,
    q: &HashMap<String, String>,
) -> Result<ReadForm, ApiError> {
    Ok(match negotiate::object_form(negotiate::accept(headers))? {
        ObjectForm::Json => ReadForm::Json,
        ObjectForm::Table(version) => ReadForm::Table {
            version,
            include: Include::parse(q.get("includeObject").map(String::as_str))?,
        },
    })
}

/// A watch's starting resourceVersion: None (`""`, `"0"`) starts with the current
/// objects.
pub(crate) fn watch_from(q: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    Ok(match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid resourceVersion {rv:?}: must be an integer"
            ))
        })?),
    })
}

/// A watch's options (`timeoutSeconds`, Tables, `allowWatchBookmarks`), checked as kube
/// checks them.
pub(crate) fn watch_options(
    kind: &'static ResourceKind,
    form: ReadForm,
    q: &HashMap<String, String>,
) -> Result<watch::Options, ApiError> {
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
    crate::listing::validate_watch(q)?;
    let bookmarks = matches!(
        q.get("allowWatchBookmarks").map(String::as_str),
        Some("true" | "1")
    );
    Ok(watch::Options {
        timeout,
        table,
        bookmarks,
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
    if kind.is_view() {
        return crate::views::get(st, kind, ns, name, q, headers).await;
    }
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
            let table = Layout::of(kind)?.table([&obj], &rv, include, version);
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
    let kind = resolve_any(&g, &v, &plural)?;
    list_or_watch(st, kind, None, q, &headers).await
}

pub(crate) async fn list_or_watch(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    q: HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return crate::views::list_or_watch(st, kind, ns, q, headers).await;
    }
    let form = read_form(headers, &q)?;
    let selector = label_selector(&q)?;
    let fields = field_selector(kind, &q)?;
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        let from = watch_from(&q)?;
        let opts = watch_options(kind, form, &q)?;
        return watch::serve(st, kind, ns, selector, fields, from, opts).await;
    }
    let res = resource(kind);
    let params = crate::listing::parse(&q)?;
    let filtered = selector.is_some() || !fields.is_empty();
    // Read and encoded on the blocking pool: a large list is CPU work the async workers
    // must not do.
    let body = blocking(move || {
        use crate::listing;
        // Read from the continue token's key on, parsed only as far as the page needs.
        let after = params
            .resume
            .as_ref()
            .map(|(_, start)| listing::split_key(start));
        if matches!(form, ReadForm::Json) && fields.is_empty() {
            return raw_list(
                &st,
                kind,
                &res,
                ns.as_deref(),
                selector.as_ref(),
                after,
                &params,
                filtered,
            );
        }
        let wisp_store::ListPage {
            mut items,
            unread,
            revision: rv,
        } = st.store.list_page(
            &res,
            ns.as_deref(),
            selector.as_ref(),
            after,
            params.limit,
            (!fields.is_empty()).then_some(|o: &Value| fields.matches(o)),
        )?;
        // A token whose resourceVersion the event history no longer reaches is stale, as
        // kube's compacted snapshot is.
        let meta = listing::page(&mut items, unread, rv, &params, filtered, |token_rv| {
            !matches!(
                st.store.events_since(token_rv, Some(&res), None, 1),
                Err(StoreError::Gone { .. })
            )
        })?;
        let list_rv = meta["resourceVersion"].as_str().unwrap_or("").to_string();
        let list = match form {
            ReadForm::Json => json!({
                "apiVersion": kind.api_version(),
                "kind": format!("{}List", kind.kind),
                "metadata": meta,
                "items": items,
            }),
            ReadForm::Table { version, include } => {
                let mut t = Layout::of(kind)?.table(&items, &list_rv.to_string(), include, version);
                t["metadata"] = meta;
                t
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

/// A JSON list answered with the objects as stored: their texts are copied into the
/// answer, not parsed and written out again (a list of 10 000 services built 10 000
/// `Value`s, ~160 MiB, for a 17 MiB answer).
#[allow(clippy::too_many_arguments)]
fn raw_list(
    st: &ApiState,
    kind: &ResourceKind,
    res: &str,
    ns: Option<&str>,
    selector: Option<&LabelSelector>,
    after: Option<(&str, &str)>,
    params: &crate::listing::ListParams,
    filtered: bool,
) -> Result<Vec<u8>, ApiError> {
    use crate::listing;
    let (texts, unread, rv) = st
        .store
        .list_page_raw(res, ns, selector, after, params.limit)?;
    let mut items = texts
        .into_iter()
        .map(listing::RawItem::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::internal(format!("stored object: {e}")))?;
    let meta = listing::page(&mut items, unread, rv, params, filtered, |token_rv| {
        !matches!(
            st.store.events_since(token_rv, Some(res), None, 1),
            Err(StoreError::Gone { .. })
        )
    })?;
    raw_list_body(kind, meta, &items)
}

/// A JSON list's body from its metadata and its items' texts, as `serde_json` writes the
/// same list parsed (the texts were written by it).
pub(crate) fn raw_list_body(
    kind: &ResourceKind,
    meta: Value,
    items: &[crate::listing::RawItem],
) -> Result<Vec<u8>, ApiError> {
    let head = json!({
        "apiVersion": kind.api_version(),
        "kind": format!("{}List", kind.kind),
        "metadata": meta,
    });
    let mut body = serde_json::to_vec(&head)
        .map_err(|e| ApiError::internal(format!("encoding the list: {e}")))?;
    // `{…}` → `{…,"items":[…]}`, in the key order the parsed form had.
    body.pop();
    body.extend_from_slice(b",\"items\":[");
    let size: usize = items.iter().map(|i| i.text.len() + 1).sum();
    body.reserve(size + 2);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item.text.as_bytes());
    }
    body.extend_from_slice(b"]}");
    Ok(body)
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
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    create_in(st, kind, ns, req, body).await
}

/// [`create`] of a resolved kind (`ns` is "" for a cluster-scoped one).
pub(crate) async fn create_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let opts = req.options(Verb::Create)?;
    let lifecycle_ns = ns.clone();
    // Decoded and admitted on the CPU pool, before the write joins a batch (which holds
    // the store): defaulting and validation need nothing stored. Only a generated name
    // that is taken admits again, in the batch.
    let (obj, generate, first, field_warnings) = decode(&st, &req.headers, body, kind, {
        let st = st.clone();
        let validation = opts.validation;
        move |mut obj, dups| {
            normalize(kind, &mut obj, &ns, None)?;
            let meta = obj["metadata"].as_object_mut().expect("normalized");
            for server_owned in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "managedFields",
            ] {
                meta.remove(server_owned);
            }
            obj.as_object_mut().expect("object").remove("status");
            let field_warnings = check_fields(kind, &mut obj, &dups, validation)?;
            let generate = obj["metadata"]["name"].as_str().unwrap_or("").is_empty()
                && !obj["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or("")
                    .is_empty();
            let first = match admit_new(&st, kind, &obj, generate) {
                Ok(first) => first,
                Err(refused) => {
                    // kube-apiserver runs NamespaceLifecycle before the validating webhooks
                    // Knative's kinds are checked by (a core kind's own validation comes
                    // first, in its strategy): a missing namespace is the answer even for
                    // an invalid Service. Looked up only for a refused object: an admitted
                    // one meets the same check in the write batch, and a lookup here waits
                    // for the store on the pool's thread, behind every batch of
                    // reconciles (in a burst of 1,000 creates, most of a POST's time).
                    if kind.namespaced && !kind.is_core() {
                        crate::namespaces::admit_create(&st.store, &ns, &resource(kind), &obj)?;
                    }
                    return Err(refused);
                }
            };
            Ok((obj, generate, first, field_warnings))
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
                let mut object = admitted.object;
                managed::record_update(None, &mut object, &opts.manager, &kind.api_version());
                let warnings = [field_warnings.clone(), admitted.warnings].concat();
                if opts.dry_run {
                    return dry_run_create(st, &res, object, generate)
                        .map(|o| o.map(|o| ok(StatusCode::CREATED, o, &warnings)));
                }
                match st.store.create(&res, object) {
                    Ok(created) => Ok(Some(ok(StatusCode::CREATED, created, &warnings))),
                    Err(StoreError::AlreadyExists { .. }) if generate => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
            || ApiError::new(500, "AlreadyExists", "could not generate a unique name"),
        )
    })
    .await
}

/// What a create would store, with nothing stored (`dryRun=All`): the server-set fields
/// filled as the store fills them, except the resourceVersion, which a dry run never gets
/// (kube's dry-run storage copies the object without one). `None`: a generated name is
/// taken (draw again).
fn dry_run_create(
    st: &ApiState,
    res: &str,
    mut object: Value,
    generate: bool,
) -> Result<Option<Value>, ApiError> {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if st.store.get(res, &ns, &name)?.is_some() {
        if generate {
            return Ok(None);
        }
        return Err(StoreError::AlreadyExists {
            resource: res.into(),
            namespace: ns,
            name,
        }
        .into());
    }
    let meta = &mut object["metadata"];
    meta["uid"] = wisp_store::new_uid().into();
    meta["creationTimestamp"] = managed::now().into();
    meta["generation"] = 1.into();
    Ok(Some(object))
}

/// `fieldValidation` of a decoded body: unknown fields (what the kind's typed object does
/// not keep) and duplicate ones; warnings to send, or kube's strict decoding error.
///
/// A Knative kind is first pruned by its CRD's structural schema, as kube-apiserver prunes
/// it before any webhook sees it (`wisp_api::prune`): what is pruned is what is unknown.
fn check_fields(
    kind: &ResourceKind,
    obj: &mut Value,
    dups: &[String],
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    if let Some(mut unknown) = wisp_api::prune::prune(kind.kind, obj) {
        unknown.sort();
        return fields::enforce(validation, &unknown, dups);
    }
    if validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let unknown = admission::typed_roundtrip(kind, obj)
        .map(|kept| fields::unknown_fields(obj, &kept))
        .unwrap_or_default();
    fields::enforce(validation, &unknown, dups)
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
    admission::admit(kind, candidate, None, &st.config.load(), &st.user)
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
#[allow(clippy::too_many_arguments)]
async fn decode_named(
    st: &ApiState,
    headers: &HeaderMap,
    body: Body,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    whole: Whole,
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    let (ns, name) = (ns.to_owned(), name.to_owned());
    decode(st, headers, body, kind, move |mut obj, dups| {
        normalize(kind, &mut obj, &ns, Some(&name))?;
        let warnings = match whole {
            Whole::Status => {
                admission::decode::<wisp_api::serving::Object<Value, Value>>(kind, &obj)?;
                Vec::new()
            }
            Whole::Object => check_fields(kind, &mut obj, &dups, validation)?,
        };
        Ok((obj, warnings))
    })
    .await
}

/// Reads the body within the shared byte budget, then decodes it (JSON or YAML by its
/// content type) and runs `then` on the decoded object, both on the CPU pool.
async fn decode<T: Send + 'static>(
    st: &ApiState,
    headers: &HeaderMap,
    body: Body,
    kind: &'static ResourceKind,
    then: impl FnOnce(Value, Vec<String>) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let bytes = body::read(body, &st.body_budget).await?;
    let content_type = body::content_type(headers);
    st.cpu
        .run(move || {
            let value = if content_type == protobuf::MEDIA_TYPE {
                decode_protobuf(kind, &bytes)?
            } else {
                body::parse_as(&content_type, &bytes)?
            };
            // Repeated keys vanish in the decode (the last one wins): found on the text.
            let dups = if content_type.contains("json") || content_type.is_empty() {
                fields::duplicate_fields(&bytes)
            } else {
                Vec::new()
            };
            then(value, dups)
        })
        .await?
}

/// A protobuf body for `kind`: the JSON it stands for. A custom resource has no protobuf
/// form: 415, as kube-apiserver's CRD handler answers.
fn decode_protobuf(kind: &ResourceKind, bytes: &[u8]) -> Result<Value, ApiError> {
    let api_version = kind.api_version();
    if protobuf::codec(&api_version, kind.kind).is_none() {
        return Err(ApiError::unsupported_media_type(protobuf::MEDIA_TYPE));
    }
    protobuf::decode_body(
        bytes,
        protobuf::Expect::Object {
            api_version: &api_version,
            kind: kind.kind,
        },
    )
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
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    replace_in(st, kind, ns, name, req, body).await
}

pub(crate) async fn replace_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let opts = req.options(Verb::Update)?;
    let (obj, warnings) = decode_named(
        &st,
        &req.headers,
        body,
        kind,
        &ns,
        &name,
        Whole::Object,
        opts.validation,
    )
    .await?;
    write(st, move |st| {
        update_with(st, kind, &ns, &name, &opts, &warnings, |_old| {
            Ok(Some(obj.clone()))
        })
    })
    .await
}

pub async fn patch(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, ns, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    patch_in(st, kind, ns, name, req, body).await
}

/// A PATCH body, decoded for its patch type.
enum PatchBody {
    Json(bytes::Bytes),
    Merge(Value),
    Strategic(Value),
    Apply(Value),
}

pub(crate) async fn patch_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let ct = body::content_type(&req.headers);
    let ptype = patch::patch_type(kind, &ct)?;
    let opts = req.options(Verb::Patch {
        apply: ptype == PatchType::Apply,
    })?;
    let (patch_body, dups) = read_patch(&st, &req.headers, body, kind, ptype).await?;
    write(st, move |st| {
        let build = |old: Option<&Value>| -> Result<Option<Value>, ApiError> {
            let mut merged = match (&patch_body, old) {
                (PatchBody::Apply(config), _) => {
                    let mut config = config.clone();
                    normalize(kind, &mut config, &ns, Some(&name))?;
                    let (merged, entries) = managed::apply(
                        old,
                        &config,
                        &opts.manager,
                        opts.force,
                        &kind.api_version(),
                    )?;
                    let mut merged = merged;
                    managed::store(&mut merged, entries);
                    merged
                }
                (_, None) => return Ok(None),
                (PatchBody::Json(bytes), Some(old)) => patch::apply_json_patch(old, bytes)?,
                (PatchBody::Merge(p), Some(old)) => {
                    let mut m = old.clone();
                    merge_patch(&mut m, p);
                    m
                }
                (PatchBody::Strategic(p), Some(old)) => {
                    let mut m = old.clone();
                    patch::apply_strategic(&mut m, p)?;
                    m
                }
            };
            if !merged.is_object() {
                return Err(ApiError::bad_request(
                    "the patched object must be a JSON object",
                ));
            }
            normalize(kind, &mut merged, &ns, Some(&name))?;
            Ok(Some(merged))
        };
        let res = resource(kind);
        let exists = st.store.get(&res, &ns, &name)?.is_some();
        if !exists {
            // Server-side apply creates what does not exist (patch.go applyPatcher).
            if let PatchBody::Apply(_) = &patch_body {
                return apply_create(st, kind, &ns, &opts, &dups, build);
            }
        }
        let validation = opts.validation;
        update_with(st, kind, &ns, &name, &opts, &[], |old| {
            let mut merged = build(Some(old))?;
            if let Some(m) = &mut merged {
                // Unknown fields are judged on the patched object (patch.go decodes the
                // result with the request's field validation).
                check_fields(kind, m, &dups, validation)?;
            }
            Ok(merged)
        })
    })
    .await
}

/// Server-side apply of an object that does not exist yet: a create.
fn apply_create(
    st: &ApiState,
    kind: &'static ResourceKind,
    ns: &str,
    opts: &WriteOptions,
    dups: &[String],
    build: impl Fn(Option<&Value>) -> Result<Option<Value>, ApiError>,
) -> Result<Response, ApiError> {
    let Some(mut obj) = build(None)? else {
        return Err(ApiError::internal("apply built nothing"));
    };
    let res = resource(kind);
    let field_warnings = check_fields(kind, &mut obj, dups, opts.validation)?;
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    if kind.namespaced {
        crate::namespaces::admit_create(&st.store, ns, &res, &obj)?;
    }
    let entries = managed::entries(&obj);
    let admitted = admission::admit(kind, obj, None, &st.config.load(), &st.user)?;
    let mut object = admitted.object;
    managed::store(&mut object, entries);
    let warnings = [field_warnings, admitted.warnings].concat();
    if opts.dry_run {
        let o = dry_run_create(st, &res, object, false)?.unwrap_or_default();
        return Ok(ok(StatusCode::CREATED, o, &warnings));
    }
    let created = st.store.create(&res, object)?;
    Ok(ok(StatusCode::CREATED, created, &warnings))
}

/// Reads a PATCH body for its type: JSON patches stay bytes (an array, not an object),
/// the others decode as objects (apply's YAML too).
async fn read_patch(
    st: &ApiState,
    headers: &HeaderMap,
    body: Body,
    kind: &'static ResourceKind,
    ptype: PatchType,
) -> Result<(PatchBody, Vec<String>), ApiError> {
    if ptype == PatchType::Json {
        let bytes = body::read(body, &st.body_budget).await?;
        return Ok((PatchBody::Json(bytes.bytes.clone()), Vec::new()));
    }
    decode(st, headers, body, kind, move |v, dups| {
        Ok((
            match ptype {
                PatchType::Merge => PatchBody::Merge(v),
                PatchType::Strategic => PatchBody::Strategic(v),
                _ => PatchBody::Apply(v),
            },
            dups,
        ))
    })
    .await
}

/// Read-admit-write with compare-and-swap. `build` turns the stored object into the object
/// to write; when it carries no resourceVersion the stored one is used, so a concurrent
/// write makes this attempt fail and retry against fresh state instead of overwriting it.
/// Records the write in managedFields (an `Update` by the options' manager, unless `build`
/// already set them: apply). With `dryRun`, answers what would be stored.
fn update_with(
    st: &ApiState,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    opts: &WriteOptions,
    field_warnings: &[String],
    build: impl Fn(&Value) -> Result<Option<Value>, ApiError>,
) -> Result<Response, ApiError> {
    let res = resource(kind);
    cas_retries(
        || {
            let old = st
                .store
                .get(&res, ns, name)?
                .ok_or_else(|| ApiError::not_found(&res, name))?;
            let Some(mut new) = build(&old)? else {
                return Err(ApiError::not_found(&res, name));
            };
            let applied = new["metadata"].get("managedFields").is_some()
                && new["metadata"]["managedFields"] != old["metadata"]["managedFields"];
            let entries = applied.then(|| managed::entries(&new));
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
            let admitted = admission::admit(kind, new, Some(&old), &st.config.load(), &st.user)?;
            let mut object = admitted.object;
            match entries {
                Some(entries) => managed::store(&mut object, entries),
                None => managed::record_update(
                    Some(&old),
                    &mut object,
                    &opts.manager,
                    &kind.api_version(),
                ),
            }
            let warnings = [field_warnings, &admitted.warnings[..]].concat();
            if client_rv.is_empty() {
                object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            }
            if opts.dry_run {
                if object["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
                    return Err(ApiError::from(StoreError::Conflict {
                        resource: res.clone(),
                        namespace: ns.into(),
                        name: name.into(),
                        reason: wisp_store::CONFLICT_MODIFIED.into(),
                    }));
                }
                // The store bumps the generation on a spec change; so does the answer.
                if object.get("spec") != old.get("spec") {
                    let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
                    object["metadata"]["generation"] = (g + 1).into();
                }
                return Ok(Some(ok(StatusCode::OK, object, &warnings)));
            }
            match st.store.update(&res, object) {
                Ok(updated) => Ok(Some(ok(StatusCode::OK, updated, &warnings))),
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
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    replace_status_in(st, kind, ns, name, req, body).await
}

/// What a status write would store, without storing it (`dryRun=All`): the stored object
/// with the new status, after the same resourceVersion check the store makes.
fn dry_run_status(st: &ApiState, res: &str, new: &Value) -> Result<Value, ApiError> {
    let ns = new["metadata"]["namespace"].as_str().unwrap_or("");
    let name = new["metadata"]["name"].as_str().unwrap_or("");
    let mut old = st
        .store
        .get(res, ns, name)?
        .ok_or_else(|| ApiError::not_found(res, name))?;
    let rv = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
    if !rv.is_empty() && Some(rv) != old["metadata"]["resourceVersion"].as_str() {
        return Err(StoreError::Conflict {
            resource: res.into(),
            namespace: ns.into(),
            name: name.into(),
            reason: wisp_store::CONFLICT_MODIFIED.into(),
        }
        .into());
    }
    match new.get("status") {
        Some(status) => old["status"] = status.clone(),
        None => {
            if let Some(m) = old.as_object_mut() {
                m.remove("status");
            }
        }
    }
    Ok(old)
}

pub(crate) async fn replace_status_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let opts = req.options(Verb::Update)?;
    let (obj, _) = decode_named(
        &st,
        &req.headers,
        body,
        kind,
        &ns,
        &name,
        Whole::Status,
        FieldValidation::Ignore,
    )
    .await?;
    let res = resource(kind);
    write(st, move |st| {
        let stored = if opts.dry_run {
            dry_run_status(st, &res, &obj)?
        } else {
            st.store.update_status(&res, obj)?
        };
        Ok(ok(StatusCode::OK, stored, &[]))
    })
    .await
}

pub async fn patch_status(
    State(st): State<ApiState>,
    Path((g, v, ns, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    patch_status_in(st, kind, ns, name, req, body).await
}

pub(crate) async fn patch_status_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let ct = body::content_type(&req.headers);
    let ptype = patch::patch_type(kind, &ct)?;
    if ptype == PatchType::Apply {
        // Server-side apply of status is not served (docs/differences.md).
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json",
        ));
    }
    let opts = req.options(Verb::Patch { apply: false })?;
    let (patch_body, _) = read_patch(&st, &req.headers, body, kind, ptype).await?;
    let res = resource(kind);
    write(st, move |st| {
        cas_retries(
            || {
                let old = st
                    .store
                    .get(&res, &ns, &name)?
                    .ok_or_else(|| ApiError::not_found(&res, &name))?;
                let mut merged = match &patch_body {
                    PatchBody::Json(bytes) => patch::apply_json_patch(&old, bytes)?,
                    PatchBody::Merge(p) => {
                        let mut m = old.clone();
                        merge_patch(&mut m, p);
                        m
                    }
                    PatchBody::Strategic(p) => {
                        let mut m = old.clone();
                        patch::apply_strategic(&mut m, p)?;
                        m
                    }
                    PatchBody::Apply(_) => return Err(ApiError::internal("apply of status")),
                };
                if !merged.is_object() {
                    return Err(ApiError::bad_request(
                        "the patched object must be a JSON object",
                    ));
                }
                normalize(kind, &mut merged, &ns, Some(&name))?;
                admission::decode::<wisp_api::serving::Object<Value, Value>>(kind, &merged)?;
                merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                if opts.dry_run {
                    return Ok(Some(ok(
                        StatusCode::OK,
                        dry_run_status(st, &res, &merged)?,
                        &[],
                    )));
                }
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
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    delete_in(st, kind, ns, name, req, body).await
}

/// `DeleteOptions`, from the query and the body (kube reads both; the body wins for what
/// it sets), checked as `ValidateDeleteOptions` checks them.
#[derive(Default)]
struct DeleteOpts {
    dry_run: bool,
    uid: Option<String>,
    resource_version: Option<String>,
}

async fn delete_options(st: &ApiState, req: &WriteReq, body: Body) -> Result<DeleteOpts, ApiError> {
    let bytes = body::read(body, &st.body_budget).await?;
    let content_type = body::content_type(&req.headers);
    let from_body = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else if content_type == protobuf::MEDIA_TYPE {
        // DeleteOptions have a protobuf form for every kind, custom resources' included
        // (kube decodes them with the meta scheme's codecs: handlers/delete.go).
        protobuf::decode_body(&bytes, protobuf::Expect::DeleteOptions)?
    } else {
        body::parse_as(&content_type, &bytes)?
    };
    let mut dry_run = req.dry_run.clone();
    if let Some(list) = from_body["dryRun"].as_array() {
        dry_run.extend(list.iter().map(|v| v.as_str().unwrap_or("").to_string()));
    }
    req_options_delete(req, &dry_run)?;
    let policy = from_body["propagationPolicy"]
        .as_str()
        .map(String::from)
        .or_else(|| req.q.get("propagationPolicy").cloned());
    let orphan = from_body["orphanDependents"]
        .as_bool()
        .or_else(|| req.q.get("orphanDependents").map(|v| v == "true"));
    if orphan.is_some() && policy.is_some() {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: {:?}: orphanDependents and deletionPropagation cannot be both set",
                policy.as_deref().unwrap_or("")
            ),
        ));
    }
    // The deprecated orphanDependents=true is the Orphan policy.
    let policy = policy.or_else(|| (orphan == Some(true)).then(|| "Orphan".to_string()));
    match policy.as_deref() {
        // wisp deletes an object's dependents (by ownerReferences) with it, in the same
        // commit: both Background and Foreground end in that state.
        None | Some("Background" | "Foreground") => {}
        Some("Orphan") => {
            return Err(ApiError::new(
                422,
                "Invalid",
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Orphan\": wisp always deletes dependents with their owner (see docs/differences.md)",
            ));
        }
        Some(other) => {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
    }
    if let Some(g) = req.q.get("gracePeriodSeconds")
        && g.parse::<i64>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "invalid gracePeriodSeconds {g:?}: must be an integer"
        )));
    }
    let pre = &from_body["preconditions"];
    Ok(DeleteOpts {
        dry_run: !dry_run.is_empty(),
        uid: pre["uid"].as_str().map(String::from),
        resource_version: pre["resourceVersion"].as_str().map(String::from),
    })
}

fn req_options_delete(req: &WriteReq, dry_run: &[String]) -> Result<(), ApiError> {
    crate::params::parse(Verb::Delete, &req.q, dry_run, &req.headers).map(|_| ())
}

pub(crate) async fn delete_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let opts = delete_options(&st, &req, body).await?;
    if kind.is_view() {
        return crate::views::delete(st, kind, ns, name, opts.dry_run).await;
    }
    if *kind == kinds::NAMESPACE && !opts.dry_run {
        return crate::namespaces::delete(st, name).await;
    }
    let res = resource(kind);
    write(st, move |st| {
        let stored = st
            .store
            .get(&res, &ns, &name)?
            .ok_or_else(|| ApiError::not_found(&res, &name))?;
        if let Some(want) = opts.resource_version.as_deref() {
            let have = stored["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if want != have {
                // registry/rest Preconditions.Check (k8s.io/apiserver/pkg/storage).
                return Err(StoreError::Conflict {
                    resource: res.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    reason: format!(
                        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
                    ),
                }
                .into());
            }
        }
        if opts.dry_run {
            let uid = stored["metadata"]["uid"].as_str().unwrap_or("");
            if let Some(want) = opts.uid.as_deref().filter(|u| !u.is_empty() && *u != uid) {
                return Err(StoreError::Conflict {
                    resource: res.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    reason: format!(
                        "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                    ),
                }
                .into());
            }
            return Ok(ok(StatusCode::OK, stored, &[]));
        }
        Ok(ok(
            StatusCode::OK,
            st.store.delete(&res, &ns, &name, opts.uid.as_deref())?,
            &[],
        ))
    })
    .await
}

pub async fn delete_collection(
    State(st): State<ApiState>,
    Path((g, v, ns, plural)): NsPath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    delete_collection_in(st, kind, Some(ns), req, body).await
}

/// DELETE on a collection: every object the selectors match is deleted, and the answer is
/// the list of them (`registry/generic/registry/store.go` `DeleteCollection`).
pub(crate) async fn delete_collection_in(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    if *kind == kinds::NAMESPACE {
        // kube-apiserver serves no deletecollection for namespaces either.
        return Err(ApiError::method_not_allowed());
    }
    if kind.is_view() {
        return Err(crate::views::read_only(kind));
    }
    let opts = delete_options(&st, &req, body).await?;
    let selector = label_selector(&req.q)?;
    let names = field_selector(kind, &req.q)?;
    let res = resource(kind);
    write(st, move |st| {
        let (items, _) = st.store.list(&res, ns.as_deref(), selector.as_ref())?;
        let mut deleted = Vec::new();
        for item in items.into_iter().filter(|o| names.matches(o)) {
            let ns = item["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
            if opts.dry_run {
                deleted.push(item);
                continue;
            }
            match st.store.delete(&res, &ns, &name, None) {
                Ok(o) => deleted.push(o),
                // Already gone as a dependent of one deleted before it.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let rv = st.store.current_revision();
        Ok(ok(
            StatusCode::OK,
            json!({
                "apiVersion": kind.api_version(),
                "kind": format!("{}List", kind.kind),
                "metadata": {"resourceVersion": rv.to_string()},
                "items": deleted,
            }),
            &[],
        ))
    })
    .await
}

pub(crate) fn label_selector(
    q: &HashMap<String, String>,
) -> Result<Option<LabelSelector>, ApiError> {
    match q.get("labelSelector").filter(|s| !s.is_empty()) {
        Some(s) => Ok(Some(
            LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
        )),
        None => Ok(None),
    }
}

/// A `fieldSelector`: `metadata.name` and `metadata.namespace`, which every kind supports
/// (`DefaultClusterScopedAttr`/`DefaultNamespaceScopedAttr` in
/// k8s.io/apiserver/pkg/registry/generic/matcher.go), and the kind's own fields
/// ([`ResourceKind::field_labels`]), with `=`, `==` and `!=`.
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            let mut v = obj;
            for part in field.split('.') {
                v = &v[part];
            }
            // Go's field sets hold every value as its string form ("true", "3").
            let have = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (have == *want) == *eq
        })
    }
}

pub(crate) fn field_selector(
    kind: &ResourceKind,
    q: &HashMap<String, String>,
) -> Result<FieldSelector, ApiError> {
    let mut reqs = Vec::new();
    for term in q
        .get("fieldSelector")
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
        .filter(|t| !t.trim().is_empty())
    {
        let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
            (f, false, v)
        } else if let Some((f, v)) = term.split_once("==") {
            (f, true, v)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, true, v)
        } else {
            return Err(ApiError::bad_request(format!(
                "invalid selector: '{term}'; can't understand '{term}'"
            )));
        };
        let field = field.trim();
        if field != "metadata.name"
            && field != "metadata.namespace"
            && !kind.field_labels().contains(&field)
        {
            // The CRD handler's answer (customresource/strategy.go GetAttrs via
            // fields.Selector.Transform); kube's own kinds answer the same.
            return Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            )));
        }
        reqs.push((field.to_string(), eq, value.trim().to_string()));
    }
    Ok(FieldSelector(reqs))
}
