//! The paths of cluster-scoped kinds of the named groups (`/apis/{group}/{version}/{plural}
//! [/{name}[/status]]`), as kube-apiserver serves a CRD of `scope: Cluster` (Knative's
//! ClusterDomainClaim). Each handler resolves the kind and calls the generic handler with
//! an empty namespace ([`crate::handlers`]).

use std::collections::HashMap;

use axum::{
    Extension,
    body::Body,
    extract::{Path, Query, State},
    http::HeaderMap,
    response::Response,
};
use wisp_api::kinds::{self, ResourceKind};

use crate::{ApiState, auth, error::ApiError, handlers, params::WriteReq};

type Params = Query<HashMap<String, String>>;
type KindPath = Path<(String, String, String)>;
type NamePath = Path<(String, String, String, String)>;

/// A cluster-scoped kind of a named group; a namespaced kind's paths name a namespace.
fn resolve(group: &str, version: &str, plural: &str) -> Result<&'static ResourceKind, ApiError> {
    kinds::by_plural(group, plural)
        .filter(|k| k.version == version && !k.is_core() && !k.namespaced)
        .ok_or_else(ApiError::path_not_found)
}

pub async fn create(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, plural)): KindPath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    handlers::create_in(st, kind, String::new(), req, body).await
}

pub async fn delete_collection(
    State(st): State<ApiState>,
    Path((g, v, plural)): KindPath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    handlers::delete_collection_in(st, kind, None, req, body).await
}

pub async fn get(
    State(st): State<ApiState>,
    Path((g, v, plural, name)): NamePath,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    handlers::get_in(st, kind, String::new(), name, q, headers).await
}

pub async fn replace(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    handlers::replace_in(st, kind, String::new(), name, req, body).await
}

pub async fn patch(
    State(st): State<ApiState>,
    user: Option<Extension<auth::User>>,
    Path((g, v, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let st = st.acting_as(user.as_ref().map(|e| &e.0));
    let kind = resolve(&g, &v, &plural)?;
    handlers::patch_in(st, kind, String::new(), name, req, body).await
}

pub async fn delete(
    State(st): State<ApiState>,
    Path((g, v, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    handlers::delete_in(st, kind, String::new(), name, req, body).await
}

pub async fn replace_status(
    State(st): State<ApiState>,
    Path((g, v, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    handlers::replace_status_in(st, kind, String::new(), name, req, body).await
}

pub async fn patch_status(
    State(st): State<ApiState>,
    Path((g, v, plural, name)): NamePath,
    req: WriteReq,
    body: Body,
) -> Result<Response, ApiError> {
    let kind = resolve(&g, &v, &plural)?;
    handlers::patch_status_in(st, kind, String::new(), name, req, body).await
}
