//! The core group's paths (`/api/v1/...`), as kube-apiserver lays them out: Namespaces are
//! cluster-scoped (`/api/v1/namespaces/{name}`), Secrets and ConfigMaps live in a namespace
//! (`/api/v1/namespaces/{ns}/{plural}/{name}`) and list across all of them at
//! `/api/v1/{plural}`. Each handler resolves the kind and calls the same generic handler the
//! Knative kinds use ([`crate::handlers`]).

use std::collections::HashMap;

use axum::{
    body::Body,
    extract::{Path, Query, State},
    http::HeaderMap,
    response::Response,
};
use wisp_api::kinds::{self, ResourceKind};

use crate::{ApiState, error::ApiError, handlers, params::WriteReq};

type Params = Query<HashMap<String, String>>;

/// A core kind by its plural; `namespaced` says which side of the URL layout asked.
fn resolve(plural: &str, namespaced: bool) -> Result<&'static ResourceKind, ApiError> {
    kinds::by_plural("", plural)
        .filter(|k| k.namespaced == namespaced)
        .ok_or_else(ApiError::path_not_found)
}

fn namespace_kind() -> &'static ResourceKind {
    kinds::CORE[0]
}

// === /api/v1/namespaces/{ns}/{plural}/{name}/{subresource} ===

/// A namespaced core kind's subresource: a Pod's `log` and `status`.
pub async fn get_subresource(
    st: State<ApiState>,
    Path((ns, plural, name, sub)): Path<(String, String, String, String)>,
    q: Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    match (plural.as_str(), sub.as_str()) {
        ("pods", "log") => crate::logs::pod_log(st, Path((ns, name)), q).await,
        ("pods", "status") => crate::views::get_pod_status(st, Path((ns, name)), q, headers).await,
        _ => Err(ApiError::path_not_found()),
    }
}

// === /api/v1/{plural}: every namespace's objects ===

pub async fn list_all(
    State(st): State<ApiState>,
    Path(plural): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = kinds::by_plural("", &plural).ok_or_else(ApiError::path_not_found)?;
    handlers::list_or_watch(st, kind, None, q, &headers).await
}

// === /api/v1/namespaces[/{name}[/status]] ===

pub async fn list_namespaces(
    State(st): State<ApiState>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    handlers::list_or_watch(st, namespace_kind(), None, q, &headers).await
}

pub async fn create_namespace(
    State(st): State<ApiState>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::create_in(st, namespace_kind(), String::new(), req, body).await
}

pub async fn get_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    handlers::get_in(st, namespace_kind(), String::new(), name, q, headers).await
}

pub async fn replace_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::replace_in(st, namespace_kind(), String::new(), name, req, body).await
}

pub async fn patch_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::patch_in(st, namespace_kind(), String::new(), name, req, body).await
}

pub async fn delete_namespace(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::delete_in(st, namespace_kind(), String::new(), name, req, body).await
}

pub async fn replace_namespace_status(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::replace_status_in(st, namespace_kind(), String::new(), name, req, body).await
}

pub async fn patch_namespace_status(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    handlers::patch_status_in(st, namespace_kind(), String::new(), name, req, body).await
}

// === /api/v1/namespaces/{ns}/{plural}[/{name}] ===

pub async fn list(
    State(st): State<ApiState>,
    Path((ns, plural)): Path<(String, String)>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::list_or_watch(st, kind, Some(ns), q, &headers).await
}

pub async fn create(
    State(st): State<ApiState>,
    Path((ns, plural)): Path<(String, String)>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::create_in(st, kind, ns, req, body).await
}

pub async fn delete_collection(
    State(st): State<ApiState>,
    Path((ns, plural)): Path<(String, String)>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::delete_collection_in(st, kind, Some(ns), req, body).await
}

pub async fn get(
    State(st): State<ApiState>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::get_in(st, kind, ns, name, q, headers).await
}

pub async fn replace(
    State(st): State<ApiState>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::replace_in(st, kind, ns, name, req, body).await
}

pub async fn patch(
    State(st): State<ApiState>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::patch_in(st, kind, ns, name, req, body).await
}

pub async fn delete(
    State(st): State<ApiState>,
    Path((ns, plural, name)): Path<(String, String, String)>,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&plural, true)?;
    handlers::delete_in(st, kind, ns, name, req, body).await
}
