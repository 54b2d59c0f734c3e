//! API errors as Kubernetes `Status` objects.

use axum::{
    http::{HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use wisp_api::{FieldError, meta::ApiStatus};
use wisp_store::StoreError;

/// An error answered with a `Status` body and the matching HTTP code.
#[derive(Debug)]
pub struct ApiError {
    /// Boxed: errors travel through many `Result`s and should stay pointer-sized.
    pub status: Box<ApiStatus>,
    /// `Warning` headers to send along (admission warnings survive a rejection).
    pub warnings: Vec<String>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: Box::new(ApiStatus::failure(code, reason, message)),
            warnings: Vec::new(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} {name:?} not found")).about(resource, name)
    }

    /// kube's `StatusDetails` of an error about one object: `name`, and the `group` and
    /// `kind` (the plural) of its qualified resource (`services.serving.knative.dev`).
    pub fn about(mut self, resource: &str, name: &str) -> Self {
        let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
        let mut details = serde_json::json!({"name": name, "kind": plural});
        if !group.is_empty() {
            details["group"] = group.into();
        }
        self.status.details = Some(details);
        self
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn too_large() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json; got {content_type:?}"
            ),
        )
    }

    /// A rejection by admission (defaulting/validation), worded like Knative's webhook.
    pub fn invalid(errors: &FieldError) -> Self {
        Self::new(
            422,
            "Invalid",
            format!(
                "admission webhook \"validation.webhook.serving.knative.dev\" denied the request: validation failed: {errors}"
            ),
        )
    }

    /// kube-apiserver's `NewInvalid` for a core kind: `ConfigMap "cfg" is invalid: …`, with
    /// a cause per field error (`k8s.io/apimachinery/pkg/api/errors/errors.go`).
    pub fn invalid_core(kind: &str, name: &str, errors: &[wisp_api::core::FieldErr]) -> Self {
        let mut err = Self::new(
            422,
            "Invalid",
            format!(
                "{kind} {name:?} is invalid: {}",
                wisp_api::core::aggregate(errors)
            ),
        );
        let causes: Vec<serde_json::Value> = errors
            .iter()
            .map(|e| {
                serde_json::json!({
                    "reason": e.type_.cause(),
                    "message": e.body(),
                    "field": e.field,
                })
            })
            .collect();
        err.status.details = Some(serde_json::json!({
            "name": name, "kind": kind, "causes": causes,
        }));
        err
    }

    /// kube-apiserver's `NewForbidden`: `namespaces "default" is forbidden: …`.
    pub fn forbidden(resource: &str, name: &str, why: &str) -> Self {
        let mut err = Self::new(
            403,
            "Forbidden",
            format!("{resource} {name:?} is forbidden: {why}"),
        );
        err.status.details = Some(serde_json::json!({"name": name, "kind": resource}));
        err
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match e {
            StoreError::NotFound { resource, name, .. } => {
                ApiError::new(404, "NotFound", msg).about(&resource, &name)
            }
            StoreError::AlreadyExists { resource, name, .. } => {
                ApiError::new(409, "AlreadyExists", msg).about(&resource, &name)
            }
            StoreError::Conflict { resource, name, .. } => {
                ApiError::new(409, "Conflict", msg).about(&resource, &name)
            }
            StoreError::Gone { .. } => ApiError::new(410, "Expired", msg),
            StoreError::Invalid(_) => ApiError::bad_request(msg),
            // Named, not `_`: a new store error must choose its status here.
            StoreError::Corrupt(_) | StoreError::Db(_) | StoreError::Sync(_) => {
                tracing::error!(error = %msg, "store failure");
                ApiError::internal(msg)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code =
            StatusCode::from_u16(self.status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (code, axum::Json(self.status)).into_response();
        add_warnings(&mut resp, &self.warnings);
        resp
    }
}

/// Adds `Warning: 299 - "text"` headers, as the Kubernetes API server does for admission warnings.
pub fn add_warnings(resp: &mut Response, warnings: &[String]) {
    for w in warnings {
        let escaped = w
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', " ");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("warning", v);
        }
    }
}
