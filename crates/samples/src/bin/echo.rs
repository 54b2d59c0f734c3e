//! `echo`: shows what the platform does to traffic on its way to and from the app, for the
//! end-to-end protocol tests (and for poking at a deployment with curl):
//!
//! - `/headers` answers the request headers the app saw, one `name: value` per line, sorted
//!   by name (values of a repeated header keep their order). With `?leak=1` the response
//!   also carries hop-by-hop and Knative-internal headers, which no proxy may pass back to
//!   the client, plus `X-App-Kept: 1`, which every proxy must.
//! - `/sse?n=N&interval_ms=M` streams N server-sent events `data: <i>\n\n`, M ms apart, as
//!   `text/event-stream`; `/chunked` does the same with `chunk <i>\n` lines as `text/plain`.
//!   Each event is its own body frame (so its own HTTP/1.1 chunk), written as it is made:
//!   a client sees them spread over time unless something in between buffers.
//! - `/ws` accepts an HTTP/1.1 upgrade (`Upgrade: websocket`, `Connection: upgrade`),
//!   answers `101 Switching Protocols` and then echoes every byte back until the client
//!   closes its side. It speaks no websocket framing (no `Sec-WebSocket-Accept` either): it
//!   tests the tunnel, not the protocol. Without the upgrade headers it answers `426`.
//!
//! - A `POST` with `content-type: application/grpc…` (any path) is a unary gRPC echo: the
//!   request's messages come back as they were sent, as `application/grpc`, ended by the
//!   trailers `grpc-status: 0` — what a gRPC client needs to see its call succeed, so a
//!   test can tell that the platform carries HTTP/2 trailers end to end.
//!
//! `/` answers this list of endpoints.

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, combinators::UnsyncBoxBody};
use hyper::{
    HeaderMap, Request, Response,
    body::{Frame, Incoming},
    header::{CONNECTION, CONTENT_TYPE, HeaderName, UPGRADE},
};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use wisp_samples::{int_param, text};

type EchoBody = UnsyncBoxBody<Bytes, Infallible>;

const USAGE: &str = "echo: GET /headers[?leak=1], /sse?n=N&interval_ms=M, \
                     /chunked?n=N&interval_ms=M, /ws (HTTP/1.1 upgrade, echoes bytes), \
                     POST application/grpc (unary echo)\n";

/// Caps on the streams, so a typo in a query cannot tie up a replica for hours.
const MAX_EVENTS: u64 = 10_000;
const MAX_INTERVAL_MS: u64 = 60_000;

fn main() {
    wisp_samples::main_with(|req| async move {
        let grpc = req.method() == hyper::Method::POST
            && req
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/grpc"));
        if grpc {
            return grpc_echo(req).await;
        }
        match req.uri().path() {
            "/headers" => headers(&req),
            "/sse" => stream(&req, "text/event-stream", |i| format!("data: {i}\n\n")),
            "/chunked" => stream(&req, "text/plain; charset=utf-8", |i| {
                format!("chunk {i}\n")
            }),
            "/ws" => upgrade(req),
            "/" => plain(200, USAGE),
            _ => plain(404, USAGE),
        }
    });
}

fn plain(status: u16, body: impl Into<Bytes>) -> Response<EchoBody> {
    text(status, body).map(BodyExt::boxed_unsync)
}

fn headers(req: &Request<Incoming>) -> Response<EchoBody> {
    let mut seen: Vec<(&str, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    // Stable: the values of one header stay in the order they arrived.
    seen.sort_by_key(|(n, _)| *n);
    let body: String = seen.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
    let mut resp = plain(200, body);
    let leak = int_param(req.uri().query().unwrap_or(""), "leak");
    if leak == Ok(Some(1)) {
        let h = resp.headers_mut();
        for (name, value) in [
            // Hop-by-hop: `Connection` names `X-App-Hop`, which makes it hop-by-hop too.
            ("connection", "x-app-hop"),
            ("x-app-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authenticate", "Basic realm=\"app\""),
            // Knative's internal headers: never for the client.
            ("k-proxy-request", "activator"),
            ("k-original-host", "leaked.example.com"),
            ("knative-serving-revision", "leaked-00001"),
            ("knative-serving-namespace", "leaked"),
            ("x-app-kept", "1"),
        ] {
            h.append(
                HeaderName::from_static(name),
                hyper::header::HeaderValue::from_static(value),
            );
        }
    }
    resp
}

/// A gRPC call's answer: its messages, then its trailers.
struct Unary(Option<Bytes>, Option<HeaderMap>);

impl hyper::body::Body for Unary {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.0.take() {
            Some(data) => Some(Frame::data(data)),
            None => self.1.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }
}

/// The unary gRPC echo (see the module doc).
async fn grpc_echo(req: Request<Incoming>) -> Response<EchoBody> {
    let Ok(body) = req.into_body().collect().await else {
        return plain(400, "the request body did not arrive whole\n");
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
    Response::builder()
        .status(200)
        .header(CONTENT_TYPE, "application/grpc")
        .body(Unary(Some(body.to_bytes()), Some(trailers)).boxed_unsync())
        .expect("static response parts")
}

/// A body fed by a channel: each message is one data frame, sent when it is produced.
struct Frames(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

fn stream(
    req: &Request<Incoming>,
    content_type: &'static str,
    event: fn(u64) -> String,
) -> Response<EchoBody> {
    let query = req.uri().query().unwrap_or("");
    let (n, interval_ms) = match (int_param(query, "n"), int_param(query, "interval_ms")) {
        (Ok(n), Ok(ms)) => (n.unwrap_or(5), ms.unwrap_or(300)),
        (Err(e), _) | (_, Err(e)) => return plain(400, format!("{e}\n")),
    };
    if n > MAX_EVENTS || interval_ms > MAX_INTERVAL_MS {
        return plain(
            400,
            format!("at most n={MAX_EVENTS} and interval_ms={MAX_INTERVAL_MS}\n"),
        );
    }
    // Capacity 1: the producer runs at most one event ahead of the connection.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for i in 0..n {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(interval_ms)).await;
            }
            if tx.send(Bytes::from(event(i))).await.is_err() {
                return; // The client went away.
            }
        }
    });
    Response::builder()
        .status(200)
        .header(CONTENT_TYPE, content_type)
        .header("cache-control", "no-cache")
        .body(Frames(rx).boxed_unsync())
        .expect("static response parts")
}

/// Whether a comma-separated header lists `token` (case-insensitive), on any of its lines.
fn lists(h: &HeaderMap, name: HeaderName, token: &str) -> bool {
    h.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

fn upgrade(mut req: Request<Incoming>) -> Response<EchoBody> {
    // Checked here, not left to hyper: a proxy that dropped the upgrade headers must show
    // up as a 426, not as a plain 200.
    let h = req.headers();
    if !lists(h, UPGRADE, "websocket") || !lists(h, CONNECTION, "upgrade") {
        let mut resp = plain(
            426,
            "/ws needs Upgrade: websocket and Connection: upgrade\n",
        );
        resp.headers_mut().insert(
            UPGRADE,
            hyper::header::HeaderValue::from_static("websocket"),
        );
        return resp;
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        // Resolves once hyper has written the 101 below.
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let (mut from_client, mut to_client) = tokio::io::split(TokioIo::new(upgraded));
        let _ = tokio::io::copy(&mut from_client, &mut to_client).await;
        // The client closed its side: close ours, so it sees the end of the echo.
        let _ = to_client.shutdown().await;
    });
    Response::builder()
        .status(101)
        .header(UPGRADE, "websocket")
        .header(CONNECTION, "upgrade")
        .body(http_body_util::Empty::new().boxed_unsync())
        .expect("static response parts")
}
