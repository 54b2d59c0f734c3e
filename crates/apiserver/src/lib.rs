//! The wisp REST API: Kubernetes API conventions over the wisp store, so that Knative YAML
//! and Kubernetes-minded clients work unchanged.
//!
//! Paths are `/apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}[/status]]` plus
//! cluster-wide lists `/apis/{group}/{version}/{plural}`. Writes go through [`admission`]
//! (Knative's defaulting and validation) before they reach the store; errors are
//! Kubernetes `Status` objects ([`error`]); `?watch=true` streams ordered events ([`watch`]).
//! The core kinds (Namespace, Secret, ConfigMap) live under `/api/v1` ([`core_routes`],
//! [`namespaces`] for the namespace lifecycle, [`protobuf`] for their protobuf form, requests
//! and answers).
//! Discovery (`/version`, `/api`, `/apis`, …) is [`discovery`]; reads answer a `Table`
//! ([`table`]) when the `Accept` header asks for one ([`negotiate`]).
//! Start reading at [`router`].

pub mod admission;
pub mod auth;
pub mod body;
mod cluster_routes;
mod core_routes;
pub mod cpu;
pub mod discovery;
pub mod error;
pub mod fields;
mod handlers;
pub mod inflight;
pub mod jsonpath;
pub mod listing;
pub mod logs;
pub mod managed;
pub mod metrics;
pub mod namespaces;
pub mod negotiate;
mod openapi;
pub mod params;
pub mod patch;
pub mod printers;
pub mod protobuf;
pub mod table;
mod views;
mod watch;

use std::sync::Arc;

use axum::{
    Router,
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use wisp_api::config::LiveConfig;
use wisp_store::{Batcher, Store};

use crate::error::ApiError;

/// What every handler needs.
#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    /// Runs every write (on `store`, with its durability): writes that arrive together
    /// share a commit and its fsync. See [`Batcher`].
    pub writer: Batcher,
    /// The configuration Knative's ConfigMaps give now (admission's defaults and checks).
    pub config: LiveConfig,
    /// Who may call (bearer tokens, [`auth`]); `None` disables authentication (every
    /// request then acts as `user`).
    pub auth: Option<Arc<auth::Authenticator>>,
    /// The user name recorded in `serving.knative.dev/creator` / `lastModifier`: the
    /// request's authenticated user once a write handler has called [`ApiState::acting_as`];
    /// the server-wide value only stands for requests when authentication is off.
    pub user: Arc<str>,
    /// Where replicas run, for the `log` subresource (None: this server runs none).
    pub platform: Option<wisp_runtime::SharedPlatform>,
    /// Turns true when the server shuts down: open watches and log follows end then, so
    /// a graceful shutdown does not wait on streams that never finish by themselves.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Where decoding, admission and list encodes run (never on the async workers).
    pub cpu: cpu::CpuPool,
    /// kube-apiserver's max-in-flight bounds.
    pub inflight: inflight::InFlight,
    /// Bytes of request bodies buffered at once, across all requests.
    pub body_budget: inflight::BodyBudget,
    /// What runs, as Kubernetes objects (Pods, Deployments, Services, Events, SKS,
    /// KIngress), served read-only from memory.
    pub views: wisp_views::Views,
    /// The revisions' request logs (`…/log?container=queue-proxy`); None when off.
    pub request_logs: Option<Arc<dyn logs::RequestLogs>>,
}

impl ApiState {
    /// This state for one request made by `user` (from the request's extensions, put there
    /// by the authentication middleware).
    pub fn acting_as(mut self, user: Option<&auth::User>) -> ApiState {
        if let Some(u) = user {
            self.user = u.name().into();
        }
        self
    }
}

/// The whole API as an axum router.
pub fn router(state: ApiState) -> Router {
    router_with(state, None)
}

/// [`router`], with `extra` served under `/wisp/` behind the same authentication, bounds
/// and metrics (what `wisp serve` adds besides the store's objects, such as `wisp top`'s
/// figures).
pub fn router_with(state: ApiState, extra: Option<Router>) -> Router {
    let mut api = Router::new()
        // Discovery (discovery.rs): what kubectl asks before anything else.
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::api))
        .route("/api/v1", get(discovery::core_v1))
        // The core kinds (core_routes.rs); the static `namespaces` segment wins over
        // `{plural}`.
        .route(
            "/api/v1/namespaces",
            get(core_routes::list_namespaces).post(core_routes::create_namespace),
        )
        .route(
            "/api/v1/namespaces/{ns}",
            get(core_routes::get_namespace)
                .put(core_routes::replace_namespace)
                .patch(core_routes::patch_namespace)
                .delete(core_routes::delete_namespace),
        )
        .route(
            "/api/v1/namespaces/{ns}/status",
            get(core_routes::get_namespace)
                .put(core_routes::replace_namespace_status)
                .patch(core_routes::patch_namespace_status),
        )
        .route(
            "/api/v1/namespaces/{ns}/{plural}",
            get(core_routes::list)
                .post(core_routes::create)
                .delete(core_routes::delete_collection),
        )
        .route(
            "/api/v1/namespaces/{ns}/{plural}/{name}",
            get(core_routes::get)
                .put(core_routes::replace)
                .patch(core_routes::patch)
                .delete(core_routes::delete),
        )
        .route(
            "/api/v1/namespaces/{ns}/{plural}/{name}/{subresource}",
            get(core_routes::get_subresource),
        )
        .route("/api/v1/{plural}", get(core_routes::list_all))
        // OpenAPI (openapi.rs): what `kubectl explain` and client-side validation read.
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::v3_index))
        .route("/openapi/v3/{*path}", get(openapi::v3_group_version))
        .route("/apis", get(discovery::apis))
        .route("/apis/{group}", get(discovery::group))
        .route(
            "/apis/{group}/{version}",
            get(discovery::group_version_resources),
        )
        .route(
            "/apis/{group}/{version}/{plural}",
            get(handlers::list_all)
                .post(cluster_routes::create)
                .delete(cluster_routes::delete_collection),
        )
        // Cluster-scoped kinds of the named groups (cluster_routes.rs): ClusterDomainClaim.
        .route(
            "/apis/{group}/{version}/{plural}/{name}",
            get(cluster_routes::get)
                .put(cluster_routes::replace)
                .patch(cluster_routes::patch)
                .delete(cluster_routes::delete),
        )
        .route(
            "/apis/{group}/{version}/{plural}/{name}/status",
            get(cluster_routes::get)
                .put(cluster_routes::replace_status)
                .patch(cluster_routes::patch_status),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}",
            get(handlers::list)
                .post(handlers::create)
                .delete(handlers::delete_collection),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}",
            get(handlers::get)
                .put(handlers::replace)
                .patch(handlers::patch)
                .delete(handlers::delete),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/status",
            get(handlers::get_status)
                .put(handlers::replace_status)
                .patch(handlers::patch_status),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/log",
            get(logs::logs),
        )
        // A Deployment's scale (`kubectl scale deploy`): read, never written.
        .route(
            "/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale",
            get(views::get_scale)
                .put(views::write_scale)
                .patch(views::write_scale),
        );
    if let Some(extra) = extra {
        api = api.nest_service("/wisp", extra);
    }
    let api = api
        .fallback(|| async { ApiError::path_not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        // Layers run bottom-up: authentication first, then the in-flight bounds (as in
        // kube-apiserver, an unauthenticated request never takes a slot).
        .layer(middleware::from_fn_with_state(
            state.clone(),
            inflight::limit,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        // Every answer about a built-in kind, errors from the layers above included, is
        // re-encoded when the client asked for protobuf.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            protobuf::respond::negotiate,
        ))
        // Outermost: every answer is counted, a 401 or a 429 too.
        .layer(middleware::from_fn(metrics::observe))
        .layer(axum::extract::DefaultBodyLimit::disable());
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(api)
        .with_state(state)
}

/// Bearer-token authentication (see [`auth`]); the user goes into the request's
/// extensions for the handlers. A request without a valid token gets kube-apiserver's 401
/// Status.
async fn authenticate(State(state): State<ApiState>, mut req: Request, next: Next) -> Response {
    if let Some(auth) = &state.auth {
        let header = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match auth.authenticate(header) {
            Some(user) => {
                req.extensions_mut().insert(user);
            }
            None => return ApiError::unauthorized().into_response(),
        }
    }
    next.run(req).await
}
