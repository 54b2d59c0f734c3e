//! Bounds on the API's concurrent requests, as kube-apiserver's `--max-requests-inflight`
//! and `--max-mutating-requests-inflight` bound them
//! (`staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`): past the bound a
//! request is answered at once with kube-apiserver's 429 and `Retry-After: 1` instead of
//! queueing, so a flood of expensive requests cannot pile up work and memory. Long-running
//! requests (watches, logs) are not counted: they hold a connection, not a worker.
//!
//! Request bodies share a byte budget too ([`BodyBudget`]): at most that many bytes of
//! bodies are buffered at once across all requests; a body that does not fit waits before
//! it is read (its sender is slowed by TCP back-pressure) instead of growing the server's
//! memory.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header::RETRY_AFTER},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ApiState;

/// kube-apiserver's defaults.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// The request-body bytes buffered at once across all requests, by default.
pub const DEFAULT_BODY_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// The two bounds; 0 means unbounded (as in kube-apiserver).
#[derive(Clone, Debug)]
pub struct InFlight {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

impl InFlight {
    pub fn new(max_requests: usize, max_mutating: usize) -> Self {
        let sem = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        InFlight {
            read_only: sem(max_requests),
            mutating: sem(max_mutating),
        }
    }
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new(
            DEFAULT_MAX_REQUESTS_INFLIGHT,
            DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
        )
    }
}

/// kube-apiserver's non-mutating verbs are get, list and watch: GET and HEAD (and OPTIONS,
/// which it never routes to a resource).
fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Watches and the log subresource hold their connection for as long as the client wants
/// (kube-apiserver's long-running check: the watch verb and the `log` subresource).
fn is_long_running(req: &Request) -> bool {
    let watch = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1"))
    });
    watch || req.uri().path().ends_with("/log")
}

/// The middleware: counts the request against its bound for as long as the handler runs.
pub async fn limit(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    if is_long_running(&req) {
        return next.run(req).await;
    }
    let sem = if is_mutating(req.method()) {
        &st.inflight.mutating
    } else {
        &st.inflight.read_only
    };
    let Some(sem) = sem else {
        return next.run(req).await;
    };
    match sem.clone().try_acquire_owned() {
        Ok(permit) => {
            let resp = next.run(req).await;
            drop(permit);
            resp
        }
        Err(_) => too_many_requests(),
    }
}

/// kube-apiserver's answer, byte for byte: plain text, `Retry-After: 1` (client-go waits
/// that long and retries).
fn too_many_requests() -> Response {
    let mut resp = (
        StatusCode::TOO_MANY_REQUESTS,
        "Too many requests, please try again later.\n",
    )
        .into_response();
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The shared byte budget of buffered request bodies, counted in KiB.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    kib: Arc<Semaphore>,
}

impl BodyBudget {
    /// A budget of `bytes` (raised to one maximal body, so a body that fits the size limit
    /// can always be read).
    pub fn new(bytes: usize) -> Self {
        let kib = bytes.max(crate::body::MAX_BODY_BYTES).div_ceil(1024);
        BodyBudget {
            kib: Arc::new(Semaphore::new(kib)),
        }
    }

    /// Reserves `bytes` (at most one maximal body) in one piece, waiting while the budget
    /// is spent. In one piece: readers that each held part of their body and waited for
    /// the rest could hold the whole budget between them and wait for ever.
    pub(crate) async fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let kib = bytes.min(crate::body::MAX_BODY_BYTES).div_ceil(1024);
        if kib == 0 {
            return None;
        }
        // Never closed, and `new` makes the budget hold at least one maximal body.
        self.kib.clone().acquire_many_owned(kib as u32).await.ok()
    }

    /// KiB not held by any request (for tests).
    pub fn available_kib(&self) -> usize {
        self.kib.available_permits()
    }
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(DEFAULT_BODY_BUDGET_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_requests_count_where() {
        let req = |m: Method, uri: &str| {
            axum::http::Request::builder()
                .method(m)
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let svc = "/apis/serving.knative.dev/v1/namespaces/default/services";
        for (m, uri, mutating, long) in [
            (Method::GET, svc.to_string(), false, false),
            (Method::GET, format!("{svc}?watch=true"), false, true),
            (
                Method::GET,
                format!("{svc}?labelSelector=a&watch=1"),
                false,
                true,
            ),
            (Method::GET, format!("{svc}?watch=false"), false, false),
            (
                Method::GET,
                format!("{svc}/hello/log?follow=true"),
                false,
                true,
            ),
            (Method::POST, svc.to_string(), true, false),
            (Method::PUT, format!("{svc}/hello"), true, false),
            (Method::PATCH, format!("{svc}/hello/status"), true, false),
            (Method::DELETE, format!("{svc}/hello"), true, false),
        ] {
            let r = req(m.clone(), &uri);
            assert_eq!(is_mutating(r.method()), mutating, "{m} {uri}");
            assert_eq!(is_long_running(&r), long, "{m} {uri}");
        }
    }

    #[tokio::test]
    async fn the_body_budget_is_reserved_whole_and_given_back() {
        let max = crate::body::MAX_BODY_BYTES;
        // Raised to one maximal body.
        let budget = BodyBudget::new(1);
        let all = budget.available_kib();
        assert_eq!(all, max / 1024);
        assert!(budget.reserve(0).await.is_none());
        let one = budget.reserve(1).await;
        assert_eq!(budget.available_kib(), all - 1);
        // A second maximal body does not fit beside it: it waits, holding nothing…
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budget.reserve(max + 5),
        )
        .await;
        assert!(waiting.is_err(), "took more than the budget holds");
        assert_eq!(budget.available_kib(), all - 1);
        // …and gets it once the first request is done.
        drop(one);
        let big = tokio::time::timeout(std::time::Duration::from_secs(5), budget.reserve(max))
            .await
            .expect("the budget came back");
        assert_eq!(budget.available_kib(), all - max / 1024);
        drop(big);
        assert_eq!(budget.available_kib(), all);
    }
}
