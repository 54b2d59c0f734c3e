//! Every response the data plane makes up itself instead of relaying one from a replica:
//! the ingress's 400/404/503, the activator's 503/504, the queue-proxy's 503/504 and the
//! bare 502 for an upstream that failed mid-request. Like linkerd2-proxy's rescue layer,
//! one place turns a typed reason ([`Synthetic`]) into a response, so a header or a metric
//! on every synthetic error is one edit here. The bodies are Knative's texts where Knative
//! has one (the activator's and queue-proxy's), and the status codes are the ones clients
//! and tests rely on.

use std::borrow::Cow;

use hyper::{Response, StatusCode};

use crate::body::{Body, empty, text_response};

/// The queue-proxy's 503 body when its pending-request queue is full.
pub const QUEUE_FULL: &str = "pending request queue full";
/// The queue-proxy's 503 body while it drains (Knative's drainer answers "shutting down").
pub const DRAINING: &str = "shutting down";
/// The queue-proxy's 504 body when a request's deadline passes before its headers.
pub const QUEUE_TIMEOUT: &str = "request timeout";
/// The activator's 503 body when a revision's hold queue is full.
pub const ACTIVATOR_QUEUE_FULL: &str = "activator queue full";
/// The activator's 504 body when a held request's revision timeout passes.
pub const ACTIVATOR_TIMEOUT: &str = "activator request timeout";
/// The activator's 503 body for a request whose revision went away while it waited.
pub const REVISION_GONE: &str = "revision is gone";

/// Why the data plane answers a request itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Synthetic<'a> {
    /// 400: the request names no host, or not one unambiguous valid host; the text says
    /// which (the ingress' `HostError::message`).
    BadHost(&'static str),
    /// 404: no route serves this host (on this listener).
    UnknownHost(&'a str),
    /// 503: the host's route has no traffic targets.
    NoTargets(&'a str),
    /// 503: the picked revision has no backend yet.
    RevisionNotAvailable {
        namespace: &'a str,
        revision: &'a str,
    },
    /// 503: the activator's hold queue for the revision is full.
    ActivatorQueueFull,
    /// 504: a request held in the activator ran out of time.
    ActivatorTimeout,
    /// 503: the revision went away while the request waited for it.
    RevisionGone,
    /// 503: the replica's queue-proxy is full.
    QueueFull,
    /// 503: the replica's queue-proxy is draining.
    Draining,
    /// 504: the queue-proxy's deadline passed before the response headers.
    QueueTimeout,
    /// 502, with no body (Knative's proxy error handler): the replica failed mid-request.
    UpstreamFailed,
}

impl Synthetic<'_> {
    /// The status code clients see.
    pub fn status(&self) -> StatusCode {
        match self {
            Synthetic::BadHost(_) => StatusCode::BAD_REQUEST,
            Synthetic::UnknownHost(_) => StatusCode::NOT_FOUND,
            Synthetic::NoTargets(_)
            | Synthetic::RevisionNotAvailable { .. }
            | Synthetic::ActivatorQueueFull
            | Synthetic::RevisionGone
            | Synthetic::QueueFull
            | Synthetic::Draining => StatusCode::SERVICE_UNAVAILABLE,
            Synthetic::ActivatorTimeout | Synthetic::QueueTimeout => StatusCode::GATEWAY_TIMEOUT,
            Synthetic::UpstreamFailed => StatusCode::BAD_GATEWAY,
        }
    }

    /// The `text/plain` body, or `None` for a bare status.
    pub fn body(&self) -> Option<Cow<'static, str>> {
        Some(match self {
            Synthetic::BadHost(why) => Cow::Borrowed(*why),
            Synthetic::UnknownHost(host) => format!("no route for host {host:?}\n").into(),
            Synthetic::NoTargets(host) => {
                format!("route for host {host:?} has no traffic targets\n").into()
            }
            Synthetic::RevisionNotAvailable {
                namespace,
                revision,
            } => format!("revision \"{namespace}/{revision}\" is not available yet\n").into(),
            Synthetic::ActivatorQueueFull => ACTIVATOR_QUEUE_FULL.into(),
            Synthetic::ActivatorTimeout => ACTIVATOR_TIMEOUT.into(),
            Synthetic::RevisionGone => REVISION_GONE.into(),
            Synthetic::QueueFull => QUEUE_FULL.into(),
            Synthetic::Draining => DRAINING.into(),
            Synthetic::QueueTimeout => QUEUE_TIMEOUT.into(),
            Synthetic::UpstreamFailed => return None,
        })
    }

    /// The response: the one place every synthetic answer is built.
    pub fn response(&self) -> Response<Body> {
        match self.body() {
            Some(text) => text_response(self.status(), &text),
            None => {
                let mut resp = Response::new(empty());
                *resp.status_mut() = self.status();
                resp
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn each_reason_has_its_status_and_body() {
        let cases = [
            (
                Synthetic::BadHost("more than one Host header\n"),
                400,
                "more than one Host header\n",
            ),
            (
                Synthetic::UnknownHost("a.example"),
                404,
                "no route for host \"a.example\"\n",
            ),
            (
                Synthetic::NoTargets("a.example"),
                503,
                "route for host \"a.example\" has no traffic targets\n",
            ),
            (
                Synthetic::RevisionNotAvailable {
                    namespace: "default",
                    revision: "hello-00001",
                },
                503,
                "revision \"default/hello-00001\" is not available yet\n",
            ),
            (Synthetic::ActivatorQueueFull, 503, "activator queue full"),
            (
                Synthetic::ActivatorTimeout,
                504,
                "activator request timeout",
            ),
            (Synthetic::RevisionGone, 503, "revision is gone"),
            (Synthetic::QueueFull, 503, "pending request queue full"),
            (Synthetic::Draining, 503, "shutting down"),
            (Synthetic::QueueTimeout, 504, "request timeout"),
            (Synthetic::UpstreamFailed, 502, ""),
        ];
        for (reason, status, body) in cases {
            let resp = reason.response();
            assert_eq!(resp.status().as_u16(), status, "{reason:?}");
            let text = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(text, body.as_bytes(), "{reason:?}");
        }
    }
}
