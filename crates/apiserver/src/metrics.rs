//! kube-apiserver's request metrics (`apiserver_request_total`,
//! `apiserver_request_duration_seconds`) for wisp's API: every request is counted by
//! kube's verb (a GET of a collection is a LIST, with `watch=true` a WATCH; a DELETE of
//! a collection is a DELETECOLLECTION), the resource's plural and the status code. A
//! watch or log follow is measured until its response head, not until the stream ends.

use axum::{extract::Request, middleware::Next, response::Response};
use wisp_api::kinds;

/// kube's verb and the resource (`""` for discovery, OpenAPI and other non-resource paths)
/// of a request.
pub fn classify(method: &str, path: &str, query: Option<&str>) -> (&'static str, &'static str) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // After the group/version prefix: [plural], [plural, name, …], or
    // [namespaces, ns, plural, …]; the core group's namespaces are themselves a resource.
    let rest: &[&str] = match segs.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let (plural, named) = match rest {
        ["namespaces", _, plural, rest @ ..] => (*plural, !rest.is_empty()),
        ["namespaces", rest @ ..] => ("namespaces", !rest.is_empty()),
        [plural, rest @ ..] => (*plural, !rest.is_empty()),
        [] => ("", false),
    };
    let resource = kinds::ALL
        .iter()
        .chain(kinds::CORE.iter())
        .map(|k| k.plural)
        .find(|p| *p == plural)
        .unwrap_or("");
    let watch = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch"))
    });
    let verb = match (method, named || resource.is_empty()) {
        ("GET", true) => "GET",
        ("GET", false) if watch => "WATCH",
        ("GET", false) => "LIST",
        ("POST", _) => "CREATE",
        ("PUT", _) => "UPDATE",
        ("PATCH", _) => "PATCH",
        ("DELETE", true) => "DELETE",
        ("DELETE", false) => "DELETECOLLECTION",
        ("HEAD", _) => "HEAD",
        ("OPTIONS", _) => "OPTIONS",
        _ => "OTHER",
    };
    (verb, resource)
}

/// The middleware: one count and one duration per request, when metrics are on.
pub async fn observe(req: Request, next: Next) -> Response {
    let Some(m) = wisp_metrics::control() else {
        return next.run(req).await;
    };
    let (verb, resource) = classify(req.method().as_str(), req.uri().path(), req.uri().query());
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    m.api_request(
        wisp_metrics::control::ApiLabels {
            verb,
            resource,
            code: resp.status().as_u16(),
        },
        started.elapsed(),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn verbs_and_resources_as_kube_counts_them() {
        let ns = "/apis/serving.knative.dev/v1/namespaces/default";
        for (method, path, query, want) in [
            ("GET", format!("{ns}/services"), None, ("LIST", "services")),
            (
                "GET",
                format!("{ns}/services"),
                Some("watch=true&resourceVersion=3"),
                ("WATCH", "services"),
            ),
            (
                "GET",
                format!("{ns}/services/hello"),
                None,
                ("GET", "services"),
            ),
            (
                "GET",
                format!("{ns}/revisions/h-1/log"),
                Some("follow=true"),
                ("GET", "revisions"),
            ),
            (
                "POST",
                format!("{ns}/services"),
                None,
                ("CREATE", "services"),
            ),
            (
                "PUT",
                format!("{ns}/services/hello/status"),
                None,
                ("UPDATE", "services"),
            ),
            (
                "PATCH",
                format!("{ns}/routes/hello"),
                None,
                ("PATCH", "routes"),
            ),
            (
                "DELETE",
                format!("{ns}/services/hello"),
                None,
                ("DELETE", "services"),
            ),
            (
                "DELETE",
                format!("{ns}/services"),
                None,
                ("DELETECOLLECTION", "services"),
            ),
            (
                "GET",
                "/apis/serving.knative.dev/v1/revisions".into(),
                None,
                ("LIST", "revisions"),
            ),
            (
                "GET",
                "/apis/autoscaling.internal.knative.dev/v1alpha1/namespaces/d/podautoscalers"
                    .into(),
                None,
                ("LIST", "podautoscalers"),
            ),
            (
                "GET",
                "/api/v1/namespaces".into(),
                None,
                ("LIST", "namespaces"),
            ),
            (
                "GET",
                "/api/v1/namespaces/default".into(),
                None,
                ("GET", "namespaces"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/default".into(),
                None,
                ("DELETE", "namespaces"),
            ),
            (
                "POST",
                "/api/v1/namespaces/default/secrets".into(),
                None,
                ("CREATE", "secrets"),
            ),
            (
                "GET",
                "/api/v1/configmaps".into(),
                None,
                ("LIST", "configmaps"),
            ),
            ("GET", "/version".into(), None, ("GET", "")),
            (
                "GET",
                "/apis/serving.knative.dev/v1".into(),
                None,
                ("GET", ""),
            ),
            ("GET", "/openapi/v3".into(), None, ("GET", "")),
            ("GET", format!("{ns}/nonsense"), None, ("GET", "")),
        ] {
            assert_eq!(
                classify(method, &path, query),
                want,
                "{method} {path} {query:?}"
            );
        }
    }
}
