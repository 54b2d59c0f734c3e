//! Reads of the views (`wisp_views`): Pods, Deployments, Services, Events, SKS and
//! KIngress, served with the stored kinds' list parameters, Tables, selectors and watch
//! framing, from memory instead of the store. Writes are refused as kube-apiserver refuses
//! a verb a resource does not serve (405), but for `DELETE` of a Pod (it stops that
//! replica; its revision starts another, as a Deployment replaces a deleted pod) and the
//! Deployment's `scale` subresource (a refusal that says who owns the replica count).

use std::{collections::HashMap, sync::Arc};

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use serde_json::{Value, json};
use wisp_api::kinds::{self, ResourceKind};
use wisp_views::View;

use crate::{
    ApiState,
    error::ApiError,
    handlers::{self, ReadForm},
    listing, watch,
};

type Params = Query<HashMap<String, String>>;

/// kube-apiserver's answer to a verb a resource does not serve
/// (`k8s.io/apiserver/pkg/endpoints/handlers/responsewriters`: `MethodNotSupported`).
pub fn read_only(kind: &ResourceKind) -> ApiError {
    let mut e = ApiError::method_not_allowed();
    let mut details = json!({"kind": kind.plural});
    if !kind.group.is_empty() {
        details["group"] = kind.group.into();
    }
    e.status.details = Some(details);
    e
}

fn view_of(st: &ApiState, kind: &ResourceKind) -> Result<Arc<View>, ApiError> {
    st.views
        .of(kind)
        .cloned()
        .ok_or_else(ApiError::path_not_found)
}

/// What a client sees of a held object: Events read through `events.k8s.io/v1` in that
/// API's shape; everything else as held.
fn shown_fn(kind: &ResourceKind) -> Option<fn(&Value) -> Value> {
    (kind.group == kinds::EVENT_V1.group).then_some(wisp_views::events::to_events_v1 as _)
}

/// The layout an object is printed with: an `events.k8s.io` Event is printed from its
/// core form, as kube prints both through the one internal Event.
fn printed_kind(kind: &'static ResourceKind) -> &'static ResourceKind {
    if kind.group == kinds::EVENT_V1.group {
        &kinds::EVENT
    } else {
        kind
    }
}

pub(crate) async fn get(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    q: HashMap<String, String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = handlers::read_form(&headers, &q)?;
    let view = view_of(&st, kind)?;
    let obj = view
        .get(&ns, &name)
        .ok_or_else(|| ApiError::not_found(&kind.store_key(), &name))?;
    let shown = shown_fn(kind).map(|f| f(&obj));
    let shown = shown.as_ref().unwrap_or(&obj);
    match form {
        ReadForm::Json => Ok(handlers::ok(StatusCode::OK, shown.clone(), &[])),
        ReadForm::Table { version, include } => {
            let layout = crate::table::Layout::of(printed_kind(kind))?;
            let rv = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
            let row = layout.row_as(&obj, shown, include, version);
            Ok(handlers::ok(
                StatusCode::OK,
                layout.table_of_rows(vec![row], rv, version),
                &[],
            ))
        }
    }
}

/// A list's body, serialized without copying its items.
#[derive(Serialize)]
struct List<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Value,
    items: Vec<&'a Value>,
}

pub(crate) async fn list_or_watch(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: Option<String>,
    q: HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let form = handlers::read_form(headers, &q)?;
    let selector = handlers::label_selector(&q)?;
    let fields = handlers::field_selector(kind, &q)?;
    let view = view_of(&st, kind)?;
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        let from = handlers::watch_from(&q)?;
        let opts = handlers::watch_options(printed_kind(kind), form, &q)?;
        return Ok(watch::serve_view(
            st,
            kind,
            view,
            ns,
            selector,
            fields,
            from,
            shown_fn(kind),
            opts,
        ));
    }
    let params = listing::parse(&q)?;
    let filtered = selector.is_some() || !fields.is_empty();
    // Encoded on the blocking pool: a list of a thousand pods is CPU work the async
    // workers must not do.
    let body = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ApiError> {
        // A plain JSON list copies the view's texts into the answer, as a stored kind's
        // does (`handlers::raw_list`): parsing each to write it out again took twice the
        // time, and the memory of every object as a `Value` at once.
        if matches!(form, ReadForm::Json) && !filtered && shown_fn(kind).is_none() {
            let (texts, rv) = view.list_texts(ns.as_deref());
            let mut items = texts
                .into_iter()
                .map(listing::RawItem::new)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ApiError::internal(format!("view object: {e}")))?;
            let meta = listing::page(&mut items, 0, rv, &params, filtered, |token_rv| {
                view.events_since(token_rv, 0).is_ok()
            })?;
            return handlers::raw_list_body(kind, meta, &items);
        }
        let (mut items, rv) = view.list(ns.as_deref(), |o| {
            selector.as_ref().is_none_or(|s| s.matches_object(o)) && fields.matches(o)
        });
        // A token from before the view's history (another run of wisp) is stale.
        let meta = listing::page(&mut items, 0, rv, &params, filtered, |token_rv| {
            view.events_since(token_rv, 0).is_ok()
        })?;
        let list_rv = meta["resourceVersion"].as_str().unwrap_or("").to_string();
        let shown = shown_fn(kind);
        let converted: Vec<Value> = match shown {
            Some(f) => items.iter().map(|o| f(o)).collect(),
            None => Vec::new(),
        };
        let encoded = match form {
            ReadForm::Json => {
                let list = List {
                    api_version: kind.api_version(),
                    kind: format!("{}List", kind.kind),
                    metadata: meta,
                    items: match shown {
                        Some(_) => converted.iter().collect(),
                        None => items.iter().map(|o| &**o).collect(),
                    },
                };
                serde_json::to_vec(&list)
            }
            ReadForm::Table { version, include } => {
                let layout = crate::table::Layout::of(printed_kind(kind))?;
                let rows = items
                    .iter()
                    .enumerate()
                    .map(|(i, o)| {
                        let shown = converted.get(i).unwrap_or(o);
                        layout.row_as(o, shown, include, version)
                    })
                    .collect();
                let mut t = layout.table_of_rows(rows, &list_rv, version);
                t["metadata"] = meta;
                serde_json::to_vec(&t)
            }
        };
        encoded.map_err(|e| ApiError::internal(format!("encoding the list: {e}")))
    })
    .await
    .map_err(|e| ApiError::internal(format!("list task failed: {e}")))??;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `DELETE` of a view's object: a Pod's stops that replica (its revision starts another in
/// its place); anything else is not served.
pub(crate) async fn delete(
    st: ApiState,
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    dry_run: bool,
) -> Result<Response, ApiError> {
    if *kind != kinds::POD {
        return Err(read_only(kind));
    }
    let pod = st
        .views
        .pods
        .get(&ns, &name)
        .ok_or_else(|| ApiError::not_found(&kind.store_key(), &name))?;
    let revision = pod["metadata"]["labels"][wisp_api::labels::REVISION]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut answer = (*pod).clone();
    if !dry_run {
        let Some(platform) = &st.platform else {
            return Err(ApiError::new(
                503,
                "ServiceUnavailable",
                "this server runs no replicas",
            ));
        };
        let key = wisp_runtime::RevisionKey::new(&ns, &revision);
        if !platform.stop_replica(&key, &name) {
            // Being stopped already (or gone since the read): as for a pod whose deletion
            // is under way, the answer is the pod as it is.
            tracing::debug!(pod = %name, "delete of a replica that is not running");
        }
        // kube answers a graceful delete with the pod marked for deletion.
        if answer["metadata"]["deletionTimestamp"].is_null() {
            answer["metadata"]["deletionTimestamp"] =
                wisp_views::view::timestamp(chrono::Utc::now()).into();
            answer["metadata"]["deletionGracePeriodSeconds"] =
                pod["spec"]["terminationGracePeriodSeconds"].clone();
        }
    }
    Ok(handlers::ok(StatusCode::OK, answer, &[]))
}

/// `GET …/deployments/{name}/scale`: the Deployment's scale as an `autoscaling/v1` Scale;
/// `PUT`/`PATCH` are refused: the autoscaler owns a revision's replica count.
pub async fn get_scale(
    State(st): State<ApiState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let d = st
        .views
        .deployments
        .get(&ns, &name)
        .ok_or_else(|| ApiError::not_found(&kinds::DEPLOYMENT.store_key(), &name))?;
    let selector = d["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let m = &d["metadata"];
    Ok(handlers::ok(
        StatusCode::OK,
        json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
                         "resourceVersion": m["resourceVersion"],
                         "creationTimestamp": m["creationTimestamp"]},
            "spec": {"replicas": d["spec"]["replicas"]},
            "status": {"replicas": d["status"]["replicas"].as_i64().unwrap_or(0),
                       "selector": selector},
        }),
        &[],
    ))
}

/// `PUT`/`PATCH …/deployments/{name}/scale` (`kubectl scale deploy`): refused, naming what
/// to change instead.
pub async fn write_scale(
    State(st): State<ApiState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let res = kinds::DEPLOYMENT.store_key();
    let d = st
        .views
        .deployments
        .get(&ns, &name)
        .ok_or_else(|| ApiError::not_found(&res, &name))?;
    let revision = d["metadata"]["labels"][wisp_api::labels::REVISION]
        .as_str()
        .unwrap_or("");
    Err(ApiError::forbidden(
        &res,
        &name,
        &format!(
            "the replica count of revision {revision:?} is the autoscaler's: set the \
             autoscaling.knative.dev/min-scale and autoscaling.knative.dev/max-scale \
             annotations on the revision template (spec.template.metadata.annotations of \
             its Service or Configuration) instead"
        ),
    ))
}

/// `GET /api/v1/namespaces/{ns}/pods/{name}/status`: the Pod (kube serves the whole
/// object on its status subresource).
pub async fn get_pod_status(
    State(st): State<ApiState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    get(st, &kinds::POD, ns, name, q, headers).await
}
