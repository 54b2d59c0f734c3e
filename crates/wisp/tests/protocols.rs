//! Issue #4 "Protocols pass through": streamed responses (SSE, chunked), websockets
//! (HTTP/1.1 upgrade) and Knative's proxy header rules, end to end through a real
//! `wisp serve` (ingress → activator → queue-proxy → replica) and the `echo` sample.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    future::Future,
    time::{Duration, Instant},
};

use bytes::Bytes;
use common::{Server, sample_bin, wait_for};
use http_body_util::{BodyExt, Empty};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on every single network wait below (connect, response head, next frame, read).
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts a server running one `echo` Service called `name`, answering on its external
/// host (`<name>.default.example.com`).
fn start_echo(name: &str) -> Server {
    let s = Server::start();
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{:?}]\n",
        sample_bin("echo").display().to_string()
    ));
    wait_for(&format!("services/{name} Ready"), READY_TIMEOUT, || {
        s.ready("services", name).filter(|(st, _, _)| st == "True")
    });
    let http = s.http();
    let url = format!("http://{}/headers", s.http_addr);
    let host = format!("{name}.default.example.com");
    wait_for(&format!("{host} answering 200"), READY_TIMEOUT, || {
        let r = http.get(&url).header("host", &host).send().ok()?;
        (r.status().as_u16() == 200).then_some(())
    });
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Awaits `f`, failing the test after [`IO_TIMEOUT`]: no test may hang on the server.
async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(IO_TIMEOUT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {IO_TIMEOUT:?} waiting for {what}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Http {
    V1,
    /// h2c with prior knowledge, as gRPC clients speak it.
    V2,
}

/// Keeps a client connection's request handle alive while its response body streams.
type ConnGuard = Box<dyn std::any::Any>;

/// Sends `GET path` with `Host: host` (HTTP/2: `:authority`) and `headers` on a fresh
/// connection to `addr`; returns as soon as the response head is in, the body unread.
async fn send(
    addr: &str,
    version: Http,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (Response<Incoming>, ConnGuard) {
    let stream = within("connect", TcpStream::connect(addr))
        .await
        .expect("connect to the ingress");
    let io = TokioIo::new(stream);
    let mut req = match version {
        Http::V1 => Request::get(path).header("host", host),
        Http::V2 => Request::get(format!("http://{host}{path}")),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Empty::<Bytes>::new()).expect("request");
    match version {
        Http::V1 => {
            let (mut sender, conn) = within("handshake", hyper::client::conn::http1::handshake(io))
                .await
                .expect("HTTP/1.1 handshake");
            tokio::spawn(conn);
            let resp = within("response head", sender.send_request(req))
                .await
                .expect("HTTP/1.1 response");
            (resp, Box::new(sender))
        }
        Http::V2 => {
            let (mut sender, conn) = within(
                "handshake",
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io),
            )
            .await
            .expect("h2c handshake");
            tokio::spawn(conn);
            let resp = within("response head", sender.send_request(req))
                .await
                .expect("h2c response");
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            (resp, Box::new(sender))
        }
    }
}

/// Reads a body to its end, noting when each data frame arrived.
async fn timed_frames(mut body: Incoming) -> Vec<(Instant, Bytes)> {
    let mut frames = Vec::new();
    while let Some(frame) = within("the next body frame", body.frame()).await {
        if let Ok(data) = frame.expect("body frame").into_data() {
            frames.push((Instant::now(), data));
        }
    }
    frames
}

/// `GET` over HTTP/1.1 → (response head, body as text).
async fn get_text(
    addr: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (hyper::http::response::Parts, String) {
    let (resp, _conn) = send(addr, Http::V1, host, path, headers).await;
    let (parts, body) = resp.into_parts();
    let body = within("the response body", body.collect())
        .await
        .expect("response body")
        .to_bytes();
    (parts, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn streamed_responses_reach_the_client_as_they_are_produced() {
    let s = start_echo("stream");
    let host = "stream.default.example.com";
    // The app produces the last event 3 × 400 ms after the first. Buffering anywhere on the
    // way would deliver them together; a loaded machine delays all of them alike, so half
    // the app's spread is a safe bar.
    let (n, interval_ms) = (4u64, 400u64);
    let min_spread = Duration::from_millis((n - 1) * interval_ms / 2);
    runtime().block_on(async {
        for (path, content_type, event) in [
            (
                "/sse",
                "text/event-stream",
                (|i| format!("data: {i}\n\n")) as fn(u64) -> String,
            ),
            ("/chunked", "text/plain", |i| format!("chunk {i}\n")),
        ] {
            for version in [Http::V1, Http::V2] {
                let what = format!("{path} over {version:?}");
                let target = format!("{path}?n={n}&interval_ms={interval_ms}");
                let (resp, _conn) = send(&s.http_addr, version, host, &target, &[]).await;
                assert_eq!(resp.status(), 200, "{what}");
                let h = resp.headers();
                let ct = h.get("content-type").map(|v| v.to_str().unwrap());
                assert!(
                    ct.is_some_and(|v| v.starts_with(content_type)),
                    "{what}: content-type {ct:?}"
                );
                // A length would mean the body was collected before the head was sent.
                assert!(!h.contains_key("content-length"), "{what}: {h:?}");
                if version == Http::V1 {
                    assert_eq!(
                        h.get("transfer-encoding").map(|v| v.to_str().unwrap()),
                        Some("chunked"),
                        "{what}"
                    );
                }

                let frames = timed_frames(resp.into_body()).await;
                let want: String = (0..n).map(event).collect();
                let got: Vec<u8> = frames.iter().flat_map(|(_, b)| b.to_vec()).collect();
                assert_eq!(String::from_utf8_lossy(&got), want, "{what}");
                // When the client had the whole first event, and when the whole body.
                let first_len = event(0).len();
                let mut seen = 0;
                let first_at = frames
                    .iter()
                    .find_map(|(t, b)| {
                        seen += b.len();
                        (seen >= first_len).then_some(*t)
                    })
                    .expect("the first event");
                let last_at = frames.last().expect("frames").0;
                let spread = last_at - first_at;
                eprintln!("{what}: {} frames over {spread:?}", frames.len());
                assert!(
                    spread >= min_spread,
                    "{what}: the first event arrived only {spread:?} before the end of the \
                     stream (the app spread them over {:?}): the response was buffered",
                    Duration::from_millis((n - 1) * interval_ms)
                );
            }
        }
    });
}

/// Reads an HTTP/1.1 response head from a raw stream: (status line, lower-cased headers,
/// bytes read past the head).
async fn read_head(stream: &mut TcpStream) -> (String, Vec<(String, String)>, Vec<u8>) {
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        assert!(buf.len() < 64 * 1024, "no end of the response head");
        let mut chunk = [0u8; 4096];
        let n = within("the response head", stream.read(&mut chunk))
            .await
            .expect("read");
        assert!(n > 0, "connection closed in the head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..end].to_vec()).expect("UTF-8 head");
    let rest = buf[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default().to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, rest)
}

#[test]
fn websocket_upgrade_tunnels_bytes_both_ways() {
    let s = start_echo("ws");
    let host = "ws.default.example.com";
    runtime().block_on(async {
        // Control: without the upgrade headers the app refuses (426), so the 101 below
        // proves they reached it.
        let (parts, body) = get_text(&s.http_addr, host, "/ws", &[]).await;
        assert_eq!(parts.status, 426, "{body}");

        let mut stream = within("connect", TcpStream::connect(&s.http_addr))
            .await
            .expect("connect to the ingress");
        stream.set_nodelay(true).unwrap();
        let upgrade = format!(
            "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        within("sending the upgrade", stream.write_all(upgrade.as_bytes()))
            .await
            .unwrap();
        let (status, headers, rest) = read_head(&mut stream).await;
        assert!(status.starts_with("HTTP/1.1 101"), "{status} {headers:?}");
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_ascii_lowercase())
        };
        assert_eq!(
            header("upgrade").as_deref(),
            Some("websocket"),
            "{headers:?}"
        );
        assert_eq!(
            header("connection").as_deref(),
            Some("upgrade"),
            "{headers:?}"
        );
        assert!(
            !headers
                .iter()
                .any(|(k, _)| k.starts_with("knative-serving-") || k.starts_with("k-")),
            "internal headers on the 101: {headers:?}"
        );
        assert!(rest.is_empty(), "bytes before we sent any: {rest:?}");

        // Small messages, one at a time: each comes back whole before the next goes out.
        for msg in ["hello through the tunnel", "\u{1F30A} second", "3"] {
            within("sending a message", stream.write_all(msg.as_bytes()))
                .await
                .unwrap();
            let mut back = vec![0u8; msg.len()];
            within("the echo", stream.read_exact(&mut back))
                .await
                .expect("echo");
            assert_eq!(String::from_utf8_lossy(&back), msg);
        }

        // 1 MiB both ways at once: more than the socket buffers hold, so the tunnel must
        // copy in both directions concurrently (a writer that stops reading would stall).
        let big: Vec<u8> = (0..1usize << 20).map(|i| (i * 31 % 251) as u8).collect();
        let (mut rd, mut wr) = stream.into_split();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            wr.write_all(&sent).await.expect("writing 1 MiB");
            // Half-close: the app sees the end of its input and closes its side.
            wr.shutdown().await.expect("shutdown");
            wr
        });
        let mut back = Vec::with_capacity(big.len());
        loop {
            let mut chunk = vec![0u8; 64 * 1024];
            let n = within("echoed bytes or the end", rd.read(&mut chunk))
                .await
                .expect("read");
            if n == 0 {
                break;
            }
            back.extend_from_slice(&chunk[..n]);
            assert!(back.len() <= big.len(), "more bytes back than sent");
        }
        assert_eq!(back.len(), big.len(), "bytes echoed before the close");
        assert!(back == big, "the echoed bytes differ from those sent");
        let _wr = within("the writer", writer).await.expect("writer task");
    });
}

/// The `name: value` lines of `/headers`.
fn parse_seen(body: &str) -> Vec<(String, String)> {
    body.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every value the app saw for `name`.
fn seen<'a>(lines: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Internal headers: set by (or forged for) the proxies, never for the app nor the client.
const INTERNAL: [&str; 4] = [
    "k-proxy-request",
    "k-original-host",
    "knative-serving-revision",
    "knative-serving-namespace",
];

#[test]
fn headers_are_rewritten_as_knative_does() {
    let s = start_echo("hdrs");
    let host = "hdrs.default.example.com";
    runtime().block_on(async {
        // A client behind another proxy, sending hop-by-hop headers and forged internal ones.
        let (parts, body) = get_text(
            &s.http_addr,
            host,
            "/headers",
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("connection", "x-custom"),
                ("x-custom", "listed in Connection"),
                ("keep-alive", "timeout=5"),
                ("proxy-authorization", "Basic Zm9vOmJhcg=="),
                ("proxy-connection", "keep-alive"),
                ("te", "trailers, deflate"),
                ("k-proxy-request", "activator"),
                ("knative-serving-revision", "forged-00001"),
                ("knative-serving-namespace", "forged"),
                ("knative-serving-tag", "blue"),
                ("x-kept", "yes"),
            ],
        )
        .await;
        assert_eq!(parts.status, 200, "{body}");
        let app = parse_seen(&body);
        let expect = [
            ("host", host),
            ("x-forwarded-for", "203.0.113.7, 127.0.0.1"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", host),
            (
                "forwarded",
                "for=203.0.113.7;host=hdrs.default.example.com;proto=http, for=127.0.0.1",
            ),
            // TE is hop-by-hop, but `trailers` must reach the app (gRPC needs it).
            ("te", "trailers"),
            // Knative passes the tag header to the app.
            ("knative-serving-tag", "blue"),
            ("x-kept", "yes"),
        ];
        for (name, value) in expect {
            assert_eq!(seen(&app, name), [value], "{name}; the app saw:\n{body}");
        }
        for name in [
            "x-custom",
            "keep-alive",
            "proxy-authorization",
            "proxy-connection",
            "upgrade",
        ]
        .iter()
        .chain(&INTERNAL)
        {
            assert!(
                seen(&app, name).is_empty(),
                "{name} reached the app:\n{body}"
            );
        }
        // The last proxy may speak its own `Connection`, but not the client's.
        assert!(
            seen(&app, "connection")
                .iter()
                .all(|v| !v.to_ascii_lowercase().contains("x-custom")),
            "the client's Connection reached the app:\n{body}"
        );

        // A direct client, with a port in Host: Host passes unchanged, and a `host:port`
        // is a quoted string in `Forwarded` (RFC 7239).
        let with_port = "hdrs.default.example.com:8080";
        let (_, body) = get_text(&s.http_addr, with_port, "/headers", &[]).await;
        let app = parse_seen(&body);
        assert_eq!(seen(&app, "host"), [with_port], "{body}");
        assert_eq!(seen(&app, "x-forwarded-for"), ["127.0.0.1"], "{body}");
        assert_eq!(
            seen(&app, "forwarded"),
            ["for=127.0.0.1;host=\"hdrs.default.example.com:8080\";proto=http"],
            "{body}"
        );

        // Over HTTP/2 the host is the `:authority`; the app (HTTP/1.1) gets it as Host.
        let (resp, _conn) = send(&s.http_addr, Http::V2, host, "/headers", &[]).await;
        assert_eq!(resp.status(), 200);
        let body = within("the h2 body", resp.into_body().collect())
            .await
            .expect("body")
            .to_bytes();
        let body = String::from_utf8_lossy(&body);
        let app = parse_seen(&body);
        assert_eq!(seen(&app, "host"), [host], "{body}");
        assert_eq!(
            seen(&app, "forwarded"),
            ["for=127.0.0.1;host=hdrs.default.example.com;proto=http"],
            "{body}"
        );

        // `K-Original-Host` is wisp's own (the last hop turns it back into Host, as
        // Knative's queue-proxy does in `RewriteHostOut`): a client's is dropped at the
        // ingress, so the app sees the Host the request was routed by, and never the header.
        let (_, body) = get_text(
            &s.http_addr,
            host,
            "/headers",
            &[("k-original-host", "original.example.com")],
        )
        .await;
        let app = parse_seen(&body);
        assert!(seen(&app, "k-original-host").is_empty(), "{body}");
        assert_eq!(seen(&app, "host"), [host], "{body}");

        // The way back: the app's hop-by-hop and internal response headers stop at the
        // proxy; its own headers pass.
        let (parts, body) = get_text(&s.http_addr, host, "/headers?leak=1", &[]).await;
        assert_eq!(parts.status, 200, "{body}");
        let h = &parts.headers;
        assert_eq!(h.get("x-app-kept").map(|v| v.as_bytes()), Some(&b"1"[..]));
        for name in ["x-app-hop", "keep-alive", "proxy-authenticate"]
            .iter()
            .chain(&INTERNAL)
        {
            assert!(!h.contains_key(*name), "{name} reached the client: {h:?}");
        }
        assert!(
            !h.keys().any(|k| k.as_str().starts_with("knative-serving-")),
            "{h:?}"
        );
        assert!(
            h.get_all("connection")
                .iter()
                .all(|v| !v.to_str().unwrap().contains("x-app-hop")),
            "the app's Connection reached the client: {h:?}"
        );
    });
}
