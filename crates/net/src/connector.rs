//! Connections to one replica, and forwarding a request over them.
//!
//! - HTTP/1: a LIFO stack of idle `SendRequest`s (most recently used first, so surplus
//!   connections go cold and get closed by the replica). On single-threaded runtimes (the
//!   data plane of `wisp serve`) a request only takes connections whose task runs on its
//!   own thread, so neither side of an exchange has to wake another thread. A connection
//!   is taken out for one exchange and goes back when the response body has been read to
//!   its end; a body dropped early closes the connection instead (hyper cannot reuse it).
//! - h2c: one shared HTTP/2 connection (prior knowledge), multiplexing every request;
//!   re-established when it closes.
//! - Upgrades (websockets) always get a dedicated HTTP/1 connection driven with
//!   `with_upgrades`, never pooled: after a `101` the socket belongs to the tunnel.
//!
//! Locks: the idle stack and the h2 slot are `std::sync::Mutex`es held for a push/pop only,
//! never across `.await`. Establishing the h2 connection is serialized by a
//! `tokio::sync::Mutex` so a burst at a cold replica opens one connection, not hundreds;
//! that lock is only taken when no live connection exists.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::{TrySendError, http1, http2};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tracing::debug;

use crate::body::{Body, BoxError, boxed};
use crate::{headers, upgrade};

/// How long establishing a TCP connection to a replica may take before it counts as
/// unreachable (the caller then tries another replica).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The protocol a replica speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (pooled connections).
    Http1,
    /// HTTP/2 cleartext with prior knowledge (one multiplexed connection). Knative's `h2c`
    /// port name.
    H2c,
}

/// Per-request facts the proxy needs.
#[derive(Clone, Debug)]
pub struct ForwardContext {
    /// The downstream client's IP (appended to `X-Forwarded-For`).
    pub client_addr: IpAddr,
    /// The downstream client's port (with the IP, the request log's `RemoteAddr`).
    pub client_port: u16,
    /// The downstream scheme (`"http"`), for `X-Forwarded-Proto`.
    pub scheme: &'static str,
    /// The request came through the activator (`K-Proxy-Request: activator`).
    pub proxied_by_activator: bool,
    /// When the request reached its revision, if someone records its duration (the
    /// activator sets it when the revision's metrics are on; the queue's own arrival
    /// otherwise).
    pub arrived: Option<tokio::time::Instant>,
}

/// Why [`ReplicaConnector::forward`] failed.
#[derive(Debug, thiserror::Error)]
// `Unreached` carries the request itself so it can be retried elsewhere without a copy;
// boxing it would add an allocation to exactly the path that is about to retry.
#[allow(clippy::large_enum_variant)]
pub enum ForwardError {
    /// No connection to the replica could be made; the request was not sent and is returned
    /// untouched so the caller can retry it on another replica.
    #[error("replica unreachable: {1}")]
    Unreached(Request<Incoming>, std::io::Error),
    /// The request was sent but the exchange failed (reset, closed before the response
    /// head, protocol error): the caller answers 502.
    #[error("upstream failed: {0}")]
    Upstream(#[source] BoxError),
}

/// Which header rules [`ReplicaConnector::forward`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// The replica is the app: [`headers::prepare_request`] (the default).
    App,
    /// The "replica" is another wisp proxy (activator or queue-proxy over the network):
    /// [`headers::prepare_proxy_request`], which keeps the internal headers.
    Proxy,
}

/// Connections to ONE replica (address + protocol): an HTTP/1 pool of idle connections
/// (LIFO, at most `max_idle`), or one shared HTTP/2 (h2c prior knowledge) connection
/// re-established on failure. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ReplicaConnector {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    protocol: Protocol,
    max_idle: usize,
    hop: Hop,
    /// Idle HTTP/1 connections, most recently returned last, with the thread their
    /// connection task runs on (see [`Home`]).
    idle: Mutex<Vec<(Home, http1::SendRequest<Incoming>)>>,
    /// The shared h2 connection and its generation (to invalidate only the one that failed).
    h2: Mutex<Option<(u64, http2::SendRequest<Incoming>)>>,
    /// Serializes h2 (re)connects; never taken while a live connection exists.
    h2_connecting: tokio::sync::Mutex<u64>,
}

impl std::fmt::Debug for ReplicaConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaConnector")
            .field("addr", &self.inner.addr)
            .field("protocol", &self.inner.protocol)
            .field("max_idle", &self.inner.max_idle)
            .field("hop", &self.inner.hop)
            .finish()
    }
}

/// A boxed forward of a path other than plain HTTP/1.
type ColdForward<'a> =
    Pin<Box<dyn Future<Output = Result<Response<Body>, ForwardError>> + Send + 'a>>;

impl ReplicaConnector {
    /// A connector for the app replica at `addr`, keeping at most `max_idle` idle HTTP/1
    /// connections (Knative keeps containerConcurrency, or 1000 when unlimited).
    pub fn new(addr: SocketAddr, protocol: Protocol, max_idle: usize) -> Self {
        Self::with_hop(addr, protocol, max_idle, Hop::App)
    }

    /// Like [`new`](Self::new), for a hop to another wisp proxy ([`Hop::Proxy`]).
    pub fn with_hop(addr: SocketAddr, protocol: Protocol, max_idle: usize, hop: Hop) -> Self {
        Self {
            inner: Arc::new(Inner {
                addr,
                protocol,
                max_idle,
                hop,
                idle: Mutex::new(Vec::new()),
                h2: Mutex::new(None),
                h2_connecting: tokio::sync::Mutex::new(0),
            }),
        }
    }

    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The replica's protocol.
    pub fn protocol(&self) -> Protocol {
        self.inner.protocol
    }

    /// Idle HTTP/1 connections currently pooled (for tests and metrics).
    pub fn idle_count(&self) -> usize {
        lock(&self.inner.idle).len()
    }

    /// Proxies `req` to the replica: prepares the headers ([`headers`]), sends it, and
    /// returns the response with its body wrapped as [`Body`], streaming (no buffering;
    /// trailers pass through).
    ///
    /// HTTP/1.1 Upgrade (websockets): the server-side `hyper::upgrade::on(&mut req)` is taken
    /// before sending, and if the replica answers `101` both upgraded connections are joined
    /// with `tokio::io::copy_bidirectional` in a spawned task. The downstream server must
    /// serve with upgrades enabled ([`serve`](crate::serve) does).
    ///
    /// `Err(ForwardError::Unreached(req, e))` when no connection to the replica could be made:
    /// `req` is returned untouched (not sent) so the caller can retry on another replica.
    /// `Err(ForwardError::Upstream(_))` when it was sent but failed before a response head
    /// arrived (answer 502). A failure after the head surfaces as an error of the body.
    pub fn forward<'a>(
        &'a self,
        req: Request<Incoming>,
        ctx: &'a ForwardContext,
    ) -> impl Future<Output = Result<Response<Body>, ForwardError>> + Send + 'a {
        // Not an `async fn`: that would be one more future around the chosen one, holding
        // the request a second time. Cold paths with large futures are boxed so that they do
        // not inflate every request's future, which is moved by value more than once.
        if headers::is_upgrade(req.headers()) && req.version() == Version::HTTP_11 {
            return Either::Left(Box::pin(self.forward_upgrade(req, ctx)) as ColdForward<'a>);
        }
        match self.inner.protocol {
            Protocol::Http1 => Either::Right(self.forward_h1(req, ctx)),
            Protocol::H2c => Either::Left(Box::pin(self.forward_h2(req, ctx)) as ColdForward<'a>),
        }
    }

    /// Drops idle connections (replica going away). Connections in use finish their exchange
    /// and may come back to the pool; drop the connector to close everything.
    pub fn close_idle(&self) {
        let idle = std::mem::take(&mut *lock(&self.inner.idle));
        drop(idle);
        // In-flight h2 streams keep their connection alive until they finish.
        lock(&self.inner.h2).take();
    }

    async fn forward_h1(
        &self,
        req: Request<Incoming>,
        ctx: &ForwardContext,
    ) -> Result<Response<Body>, ForwardError> {
        let home = Home::current();
        let mut sender = match self.checkout_h1(home) {
            Some(s) => s,
            None => match Box::pin(connect_h1(self.inner.addr, false)).await {
                Ok(s) => s,
                Err(e) => return Err(ForwardError::Unreached(req, e)),
            },
        };
        let req = self.prepare(req, ctx, Protocol::Http1, false);
        // The retry is only built here and awaited below, so that this future's state does
        // not keep the failed send's result and error alive while it runs.
        let retry = match sender.try_send_request(req).await {
            Ok(resp) => return Ok(self.pooled_response(resp, sender, home)),
            // Boxed: a cold path whose state (the request, the error) would otherwise enlarge
            // every request's future.
            Err(e) => Box::pin(self.resend_h1(e)),
        };
        let (resp, sender) = retry.await?;
        Ok(self.pooled_response(resp, sender, Home::current()))
    }

    /// The response of an HTTP/1 exchange, whose body returns `sender` to the pool when it
    /// ends.
    fn pooled_response(
        &self,
        resp: Response<Incoming>,
        sender: http1::SendRequest<Incoming>,
        home: Home,
    ) -> Response<Body> {
        let pool = if self.inner.max_idle > 0 {
            Arc::downgrade(&self.inner)
        } else {
            Weak::new()
        };
        finish_response(resp, false, move |body| {
            boxed(PooledBody {
                body,
                conn: Some(sender),
                home,
                pool,
                done: false,
            })
        })
    }

    /// After a pooled connection failed to take a request: if the request was not written
    /// (the connection closed between the readiness check and the send), sends it on fresh
    /// connections until one takes it; returns the response and the connection that
    /// carried it.
    async fn resend_h1(
        &self,
        mut failed: TrySendError<Request<Incoming>>,
    ) -> Result<(Response<Incoming>, http1::SendRequest<Incoming>), ForwardError> {
        loop {
            let Some(req) = failed.take_message() else {
                return Err(ForwardError::Upstream(failed.into_error().into()));
            };
            let mut sender = match connect_h1(self.inner.addr, false).await {
                Ok(s) => s,
                // Headers are already rewritten, so it cannot be handed back "untouched":
                // report it as an upstream failure.
                Err(e) => return Err(ForwardError::Upstream(e.into())),
            };
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, sender)),
                Err(e) => failed = e,
            }
        }
    }

    /// Takes idle connections of `home` (newest first) until one is ready; `None` when
    /// there is none. Only ready connections are pooled, so one that is not ready any more
    /// has been closed by the replica: it is dropped.
    fn checkout_h1(&self, home: Home) -> Option<http1::SendRequest<Incoming>> {
        let mut idle = lock(&self.inner.idle);
        let mut i = idle.len();
        while i > 0 {
            i -= 1;
            if idle[i].0 != home {
                continue;
            }
            // Near the end of the stack (LIFO), so the shift is short.
            let (_, sender) = idle.remove(i);
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    async fn forward_h2(
        &self,
        req: Request<Incoming>,
        ctx: &ForwardContext,
    ) -> Result<Response<Body>, ForwardError> {
        let (mut generation, mut sender) = match self.h2_sender().await {
            Ok(s) => s,
            Err(e) => return Err(ForwardError::Unreached(req, e)),
        };
        let mut req = self.prepare(req, ctx, Protocol::H2c, false);
        let mut retried = false;
        let resp = loop {
            match sender.try_send_request(req).await {
                Ok(resp) => break resp,
                Err(mut e) => {
                    self.invalidate_h2(generation);
                    match e.take_message() {
                        // The connection closed (GOAWAY, replica restart) before this stream
                        // was opened: once more on a fresh connection.
                        Some(unsent) if !retried => {
                            retried = true;
                            req = unsent;
                            (generation, sender) = self
                                .h2_sender()
                                .await
                                .map_err(|e| ForwardError::Upstream(e.into()))?;
                        }
                        _ => return Err(ForwardError::Upstream(e.into_error().into())),
                    }
                }
            }
        };
        Ok(finish_response(resp, false, boxed))
    }

    /// The live shared h2 connection, or a new one.
    async fn h2_sender(&self) -> std::io::Result<(u64, http2::SendRequest<Incoming>)> {
        if let Some(live) = self.live_h2() {
            return Ok(live);
        }
        let mut generation = self.inner.h2_connecting.lock().await;
        // Someone else may have connected while we waited for the lock.
        if let Some(live) = self.live_h2() {
            return Ok(live);
        }
        let sender = connect_h2(self.inner.addr).await?;
        *generation += 1;
        *lock(&self.inner.h2) = Some((*generation, sender.clone()));
        Ok((*generation, sender))
    }

    fn live_h2(&self) -> Option<(u64, http2::SendRequest<Incoming>)> {
        let mut slot = lock(&self.inner.h2);
        match &*slot {
            Some((g, s)) if !s.is_closed() => Some((*g, s.clone())),
            Some(_) => {
                *slot = None;
                None
            }
            None => None,
        }
    }

    fn invalidate_h2(&self, generation: u64) {
        let mut slot = lock(&self.inner.h2);
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }

    /// Upgrades always travel over a dedicated HTTP/1 connection: HTTP/2 has no `Upgrade`
    /// (and h2c apps behind Go's `h2c.NewHandler` accept HTTP/1 too).
    async fn forward_upgrade(
        &self,
        mut req: Request<Incoming>,
        ctx: &ForwardContext,
    ) -> Result<Response<Body>, ForwardError> {
        let mut sender = match connect_h1(self.inner.addr, true).await {
            Ok(s) => s,
            Err(e) => return Err(ForwardError::Unreached(req, e)),
        };
        // Taken only now, once the request can no longer be handed back.
        let downstream = hyper::upgrade::on(&mut req);
        let req = self.prepare(req, ctx, Protocol::Http1, true);
        let mut resp = sender
            .send_request(req)
            .await
            .map_err(|e| ForwardError::Upstream(e.into()))?;
        let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
        if switching {
            upgrade::spawn_tunnel(downstream, hyper::upgrade::on(&mut resp));
        }
        // Not pooled: `sender` drops with this scope; hyper keeps the connection until the
        // response body (if any) is done.
        Ok(finish_response(resp, switching, boxed))
    }

    fn prepare(
        &self,
        req: Request<Incoming>,
        ctx: &ForwardContext,
        protocol: Protocol,
        upgrade: bool,
    ) -> Request<Incoming> {
        let (mut parts, body) = req.into_parts();
        headers::ensure_host(&mut parts);
        match self.inner.hop {
            Hop::App => headers::prepare_request(&mut parts.headers, ctx, upgrade),
            Hop::Proxy => headers::prepare_proxy_request(&mut parts.headers, ctx, upgrade),
        }
        headers::prepare_target(&mut parts, protocol);
        Request::from_parts(parts, body)
    }
}

fn finish_response(
    resp: Response<Incoming>,
    upgrade: bool,
    wrap: impl FnOnce(Incoming) -> Body,
) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    headers::prepare_response(&mut parts.headers, upgrade);
    // The downstream connection decides its own version; an HTTP/1.0 or HTTP/2 upstream
    // version must not leak into it.
    parts.version = Version::HTTP_11;
    Response::from_parts(parts, wrap(body))
}

use wisp_sync::lock;

async fn connect_tcp(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    // Small writes (headers, SSE events) must not wait for Nagle.
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn connect_h1(
    addr: SocketAddr,
    with_upgrades: bool,
) -> std::io::Result<http1::SendRequest<Incoming>> {
    let io = TokioIo::new(connect_tcp(addr).await?);
    let (sender, conn) = http1::Builder::new()
        .handshake(io)
        .await
        .map_err(std::io::Error::other)?;
    if with_upgrades {
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                debug!(%addr, error = %e, "upstream connection failed");
            }
        });
    } else {
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(%addr, error = %e, "upstream connection failed");
            }
        });
    }
    Ok(sender)
}

async fn connect_h2(addr: SocketAddr) -> std::io::Result<http2::SendRequest<Incoming>> {
    let io = TokioIo::new(connect_tcp(addr).await?);
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        // Detects a replica that vanished without a FIN (process frozen, network gone).
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        // Large bodies would otherwise crawl at the 64 KiB default window.
        .adaptive_window(true)
        .handshake(io)
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(%addr, error = %e, "upstream h2 connection failed");
        }
    });
    Ok(sender)
}

/// Where a connection's task runs, for the pool: on a single-threaded runtime, its thread
/// (a request on that thread reaches the connection without waking another thread, so the
/// pool hands each thread its own connections); on a multi-threaded one, anywhere (`Any`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Any,
    Thread(std::thread::ThreadId),
}

impl Home {
    /// The home of a connection spawned (or a request made) here, now.
    fn current() -> Home {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => {
                Home::Thread(std::thread::current().id())
            }
            _ => Home::Any,
        }
    }
}

/// An HTTP/1 response body that gives its connection back to the pool once read to the end.
struct PooledBody {
    body: Incoming,
    conn: Option<http1::SendRequest<Incoming>>,
    home: Home,
    pool: Weak<Inner>,
    done: bool,
}

impl PooledBody {
    /// Gives the connection back once it can take a new request. Usually at once; when the
    /// response ended before the request body was fully sent (or the driver task has not run
    /// since the last frame), a small task waits for readiness, so a checkout never waits
    /// behind someone else's upload.
    fn release(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if conn.is_closed() || self.pool.strong_count() == 0 {
            return;
        }
        if conn.is_ready() {
            push_idle(&self.pool, self.home, conn);
            return;
        }
        let pool = std::mem::take(&mut self.pool);
        let home = self.home;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if conn.ready().await.is_ok() {
                    push_idle(&pool, home, conn);
                }
            });
        }
    }
}

fn push_idle(pool: &Weak<Inner>, home: Home, conn: http1::SendRequest<Incoming>) {
    let Some(pool) = pool.upgrade() else {
        return;
    };
    let mut idle = lock(&pool.idle);
    if idle.len() >= pool.max_idle {
        // Connections of another thread are only pruned when that thread checks out; make
        // room from the ones the replica has closed before refusing this one.
        idle.retain(|(_, c)| !c.is_closed());
    }
    if idle.len() < pool.max_idle {
        idle.push((home, conn));
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                this.done = true;
                this.release();
            }
            // Errors leave the connection unusable: drop it.
            Poll::Ready(Some(Err(_))) => this.conn = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body never polled because it was known empty (HEAD, 204, Content-Length: 0)
        // also leaves a reusable connection; a body dropped half-read does not.
        if self.done || hyper::body::Body::is_end_stream(&self.body) {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use hyper::body::Frame;
    use hyper::header::HeaderValue;
    use hyper::{HeaderMap, Request, Response, StatusCode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::testutil::*;
    use crate::{empty, full};

    /// Echoes what the app saw: method, URI, selected headers, then the body.
    fn echo() -> Handler {
        handler(|req: Request<Incoming>| async move {
            let mut seen = format!("{} {}", req.method(), req.uri());
            for name in [
                "host",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-forwarded-host",
                "forwarded",
                "knative-serving-revision",
                "k-proxy-request",
                "connection",
                "x-hop",
            ] {
                if let Some(v) = req.headers().get(name) {
                    seen.push_str(&format!("\n{name}: {}", v.to_str().unwrap()));
                }
            }
            let body = req.into_body().collect().await.unwrap().to_bytes();
            seen.push_str(&format!("\n\n{}", text(&body)));
            let mut resp = Response::new(full(seen));
            // Must not leak back to the client.
            resp.headers_mut()
                .insert("knative-serving-revision", HeaderValue::from_static("leak"));
            resp.headers_mut()
                .insert("k-proxy-request", HeaderValue::from_static("activator"));
            resp
        })
    }

    async fn body_text(resp: Response<Incoming>) -> String {
        text(&resp.into_body().collect().await.unwrap().to_bytes())
    }

    #[tokio::test]
    async fn get_and_post_are_proxied_with_proxy_headers() {
        let up = upstream(false, echo()).await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::Http1, 10)).await;
        let mut client = h1_client(front).await;

        let req = Request::get("/hello?x=1")
            .header("host", "hello.default.example.com")
            .header("knative-serving-revision", "hello-00001")
            .header("k-proxy-request", "activator")
            .header("connection", "x-hop")
            .header("x-hop", "1")
            .body(empty())
            .unwrap();
        let resp = within("GET", client.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(!resp.headers().contains_key("knative-serving-revision"));
        assert!(!resp.headers().contains_key("k-proxy-request"));
        let seen = within("GET body", body_text(resp)).await;
        assert_eq!(
            seen,
            "GET /hello?x=1\nhost: hello.default.example.com\nx-forwarded-for: 127.0.0.1\n\
             x-forwarded-proto: http\nx-forwarded-host: hello.default.example.com\n\
             forwarded: for=127.0.0.1;host=hello.default.example.com;proto=http\n\n"
        );

        let req = Request::post("/submit")
            .header("host", "h")
            .body(full("payload"))
            .unwrap();
        let resp = within("POST", client.send_request(req)).await.unwrap();
        let seen = within("POST body", body_text(resp)).await;
        assert!(seen.starts_with("POST /submit\nhost: h\n"), "{seen}");
        assert!(seen.ends_with("\n\npayload"), "{seen}");
    }

    /// The upstream writes 3 chunks 200 ms apart; the client must see the first before the
    /// upstream has even produced the last.
    #[tokio::test]
    async fn response_chunks_stream_as_flushed() {
        let last_sent = Arc::new(AtomicBool::new(false));
        let flag = last_sent.clone();
        let up = upstream(
            false,
            handler(move |_req| {
                let flag = flag.clone();
                async move {
                    let (tx, body) = channel_body();
                    tokio::spawn(async move {
                        for i in 0..3 {
                            if i > 0 {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                            if i == 2 {
                                flag.store(true, Ordering::SeqCst);
                            }
                            let _ = tx
                                .send(Frame::data(Bytes::from(format!("chunk{i};"))))
                                .await;
                        }
                    });
                    Response::new(body)
                }
            }),
        )
        .await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::Http1, 10)).await;
        let mut client = h1_client(front).await;
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("head", client.send_request(req)).await.unwrap();
        assert_eq!(
            resp.headers().get("transfer-encoding").unwrap(),
            "chunked",
            "re-framed by hyper"
        );
        let mut body = resp.into_body();
        let first = within("first chunk", next_data(&mut body)).await.unwrap();
        assert_eq!(&first[..], b"chunk0;");
        assert!(
            !last_sent.load(Ordering::SeqCst),
            "first chunk arrived only after the last was produced"
        );
        let mut rest = Vec::new();
        while let Some(d) = within("rest", next_data(&mut body)).await {
            rest.extend_from_slice(&d);
        }
        assert_eq!(text(&rest), "chunk1;chunk2;");
    }

    /// Server-sent events through an h2c client (front door) to an HTTP/1 app: each event
    /// arrives before the app writes the next.
    #[tokio::test]
    async fn server_sent_events_stream_one_by_one() {
        let (step_tx, step_rx) = tokio::sync::mpsc::channel::<()>(1);
        let step_rx = Arc::new(tokio::sync::Mutex::new(Some(step_rx)));
        let up = upstream(
            false,
            handler(move |_req| {
                let step_rx = step_rx.clone();
                async move {
                    let mut step_rx = step_rx.lock().await.take().unwrap();
                    let (tx, body) = channel_body();
                    tokio::spawn(async move {
                        for i in 0..3 {
                            let event = format!("data: event {i}\n\n");
                            let _ = tx.send(Frame::data(Bytes::from(event))).await;
                            // The next event only once the test saw this one.
                            if step_rx.recv().await.is_none() {
                                return;
                            }
                        }
                    });
                    let mut resp = Response::new(body);
                    resp.headers_mut().insert(
                        "content-type",
                        HeaderValue::from_static("text/event-stream"),
                    );
                    resp
                }
            }),
        )
        .await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::Http1, 10)).await;
        let mut client = h2_client(front).await;
        let req = Request::get("http://sse.example.com/events")
            .body(empty())
            .unwrap();
        let resp = within("head", client.send_request(req)).await.unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut body = resp.into_body();
        for i in 0..3 {
            let event = within("event", next_data(&mut body)).await.unwrap();
            assert_eq!(text(&event), format!("data: event {i}\n\n"));
            step_tx.send(()).await.unwrap();
        }
        assert!(within("end", next_data(&mut body)).await.is_none());
    }

    /// Full duplex: the app echoes each request chunk as it arrives (gRPC bidi streaming
    /// shape), over h2c on both sides; trailers come back too.
    #[tokio::test]
    async fn h2c_bidirectional_streaming_with_trailers() {
        let up = upstream(
            true,
            handler(|req: Request<Incoming>| async move {
                assert_eq!(req.uri().authority().unwrap().as_str(), "grpc.example.com");
                assert_eq!(req.headers()["te"], "trailers");
                let mut incoming = req.into_body();
                let (tx, body) = channel_body();
                tokio::spawn(async move {
                    while let Some(data) = next_data(&mut incoming).await {
                        let _ = tx.send(Frame::data(data)).await;
                    }
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    let _ = tx.send(Frame::trailers(trailers)).await;
                });
                let mut resp = Response::new(body);
                resp.headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/grpc"));
                resp
            }),
        )
        .await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::H2c, 10)).await;
        let mut client = h2_client(front).await;
        let (tx, req_body) = channel_body();
        let req = Request::post("http://grpc.example.com/svc/Method")
            .header("te", "trailers")
            .header("content-type", "application/grpc")
            .body(req_body)
            .unwrap();
        let resp = within("head", client.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        for msg in ["one", "two", "three"] {
            tx.send(Frame::data(Bytes::from(msg))).await.unwrap();
            let echoed = within("echo", next_data(&mut body)).await.unwrap();
            assert_eq!(&echoed[..], msg.as_bytes());
        }
        drop(tx);
        let trailers = within("trailers", async {
            loop {
                match body.frame().await {
                    Some(Ok(f)) if f.is_trailers() => break f.into_trailers().unwrap(),
                    Some(Ok(_)) => continue,
                    other => panic!("no trailers: {other:?}"),
                }
            }
        })
        .await;
        assert_eq!(trailers["grpc-status"], "0");
    }

    #[tokio::test]
    async fn websocket_upgrade_is_tunneled() {
        let up = upstream(
            false,
            handler(|mut req: Request<Incoming>| async move {
                assert_eq!(req.headers()["upgrade"], "websocket");
                assert_eq!(
                    req.headers()["sec-websocket-key"],
                    "dGhlIHNhbXBsZSBub25jZQ=="
                );
                let on_upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let upgraded = on_upgrade.await.unwrap();
                    let mut io = TokioIo::new(upgraded);
                    let mut buf = [0u8; 64];
                    loop {
                        let n = io.read(&mut buf).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        io.write_all(&buf[..n]).await.unwrap();
                    }
                });
                Response::builder()
                    .status(StatusCode::SWITCHING_PROTOCOLS)
                    .header("upgrade", "websocket")
                    .header("connection", "Upgrade")
                    .header("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
                    .body(empty())
                    .unwrap()
            }),
        )
        .await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::Http1, 10)).await;
        let mut stream = TcpStream::connect(front).await.unwrap();
        stream
            .write_all(
                b"GET /ws HTTP/1.1\r\nHost: ws.example.com\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                  Sec-WebSocket-Version: 13\r\n\r\n",
            )
            .await
            .unwrap();
        let head = within("101", read_head(&mut stream)).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("upgrade: websocket"), "{head}");
        assert!(lower.contains("connection: upgrade"), "{head}");
        for msg in [&b"hello"[..], b"world, again"] {
            stream.write_all(msg).await.unwrap();
            let mut buf = vec![0u8; msg.len()];
            within("echo", stream.read_exact(&mut buf)).await.unwrap();
            assert_eq!(buf, msg);
        }
    }

    async fn read_head(stream: &mut TcpStream) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.unwrap();
            assert!(n > 0, "closed during head: {}", text(&head));
            head.push(byte[0]);
        }
        text(&head)
    }

    async fn closed_port() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    }

    #[tokio::test]
    async fn unreached_returns_the_request_untouched() {
        for protocol in [Protocol::Http1, Protocol::H2c] {
            let front = proxy(ReplicaConnector::new(closed_port().await, protocol, 10)).await;
            let mut client = h1_client(front).await;
            let req = Request::post("/x?y=1")
                .header("host", "h")
                .body(full("payload"))
                .unwrap();
            let resp = within("unreached", client.send_request(req)).await.unwrap();
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                body_text(resp).await,
                "unreached uri=/x?y=1 xff=false body=payload",
                "{protocol:?}"
            );
        }
    }

    #[tokio::test]
    async fn unreached_for_upgrades_too() {
        let connector = ReplicaConnector::new(closed_port().await, Protocol::Http1, 10);
        let front = proxy(connector).await;
        let mut stream = TcpStream::connect(front).await.unwrap();
        stream
            .write_all(
                b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            )
            .await
            .unwrap();
        let head = within("503", read_head(&mut stream)).await;
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    }

    /// A raw upstream that answers every request with `reply` and closes.
    async fn raw_upstream(reply: &'static [u8]) -> SocketAddr {
        let (l, addr) = listener().await;
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s.write_all(reply).await;
                    // Dropping `s` closes the connection.
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn upstream_closing_mid_response_is_upstream_error() {
        let addr = raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Le").await;
        let front = proxy(ReplicaConnector::new(addr, Protocol::Http1, 10)).await;
        let mut client = h1_client(front).await;
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("502", client.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
        assert!(body_text(resp).await.starts_with("upstream failed"));
    }

    #[tokio::test]
    async fn upstream_closing_mid_body_fails_the_body() {
        let addr = raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part").await;
        let connector = ReplicaConnector::new(addr, Protocol::Http1, 10);
        let front = proxy(connector.clone()).await;
        let mut client = h1_client(front).await;
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("head", client.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let collected = within("body", resp.into_body().collect()).await;
        assert!(
            collected.is_err(),
            "a truncated body must not look complete"
        );
        assert_eq!(
            connector.idle_count(),
            0,
            "a failed connection is not pooled"
        );
    }

    #[tokio::test]
    async fn http1_pool_reuses_one_connection() {
        let up = upstream(false, echo()).await;
        let connector = ReplicaConnector::new(up.addr, Protocol::Http1, 10);
        let front = proxy(connector.clone()).await;
        let mut client = h1_client(front).await;
        for i in 0..100 {
            let req = Request::post(format!("/{i}"))
                .header("host", "h")
                .body(full(format!("n{i}")))
                .unwrap();
            let resp = within("request", client.send_request(req)).await.unwrap();
            let seen = within("body", body_text(resp)).await;
            assert!(seen.ends_with(&format!("\n\nn{i}")), "{seen}");
        }
        assert_eq!(up.accepted(), 1);
        assert_eq!(connector.idle_count(), 1);

        connector.close_idle();
        assert_eq!(connector.idle_count(), 0);
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("after close_idle", client.send_request(req))
            .await
            .unwrap();
        within("body", body_text(resp)).await;
        assert_eq!(up.accepted(), 2);
    }

    #[tokio::test]
    async fn http1_pool_is_bounded_by_max_idle() {
        let gate = Arc::new(tokio::sync::Barrier::new(4));
        let g = gate.clone();
        let up = upstream(
            false,
            handler(move |_req| {
                let g = g.clone();
                async move {
                    g.wait().await;
                    Response::new(full("ok"))
                }
            }),
        )
        .await;
        let connector = ReplicaConnector::new(up.addr, Protocol::Http1, 2);
        let front = proxy(connector.clone()).await;
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let mut client = h1_client(front).await;
            tasks.spawn(async move {
                let req = Request::get("/").header("host", "h").body(empty()).unwrap();
                let resp = client.send_request(req).await.unwrap();
                body_text(resp).await
            });
        }
        while let Some(r) = within("concurrent", tasks.join_next()).await {
            assert_eq!(r.unwrap(), "ok");
        }
        assert_eq!(up.accepted(), 4);
        assert_eq!(connector.idle_count(), 2);
    }

    /// Connections served on two single-threaded runtimes (as `wisp serve`'s data plane)
    /// each get upstream connections whose task runs on their own thread.
    #[tokio::test]
    async fn http1_pool_is_per_thread_on_single_threaded_runtimes() {
        let up = upstream(false, handler(|_req| async { Response::new(full("ok")) })).await;
        let connector = ReplicaConnector::new(up.addr, Protocol::Http1, 8);
        let threads = [
            crate::RuntimeThread::start("rt-a").unwrap(),
            crate::RuntimeThread::start("rt-b").unwrap(),
        ];
        let runtimes = threads.iter().map(|t| t.handle().clone()).collect();
        let opts = crate::ServerOptions {
            runtimes,
            ..crate::ServerOptions::default()
        };
        let front = proxy_with(connector.clone(), opts).await;
        // Client connections alternate between the two runtimes; each makes two requests
        // one after the other, so a runtime reuses its own idle upstream connection.
        for _ in 0..3 {
            let mut client = h1_client(front).await;
            for _ in 0..2 {
                let req = Request::get("/").header("host", "h").body(empty()).unwrap();
                let resp = within("request", client.send_request(req)).await.unwrap();
                assert_eq!(within("body", body_text(resp)).await, "ok");
            }
        }
        // One upstream connection per runtime: not one in all (shared across threads),
        // not one per request.
        assert_eq!(up.accepted(), 2);
        assert_eq!(connector.idle_count(), 2);
    }

    /// 16 requests held open at the same time by the app all share one h2c connection.
    #[tokio::test]
    async fn h2c_multiplexes_on_one_connection() {
        const N: usize = 16;
        let gate = Arc::new(tokio::sync::Barrier::new(N));
        let g = gate.clone();
        let up = upstream(
            true,
            handler(move |req: Request<Incoming>| {
                let g = g.clone();
                async move {
                    g.wait().await;
                    Response::new(full(req.uri().path().to_owned()))
                }
            }),
        )
        .await;
        let front = proxy(ReplicaConnector::new(up.addr, Protocol::H2c, 10)).await;
        let client = h2_client(front).await;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..N {
            let mut client = client.clone();
            tasks.spawn(async move {
                let req = Request::get(format!("http://h/{i}")).body(empty()).unwrap();
                let resp = client.send_request(req).await.unwrap();
                (i, body_text(resp).await)
            });
        }
        while let Some(r) = within("multiplexed", tasks.join_next()).await {
            let (i, path) = r.unwrap();
            assert_eq!(path, format!("/{i}"));
        }
        assert_eq!(up.accepted(), 1);
    }

    #[tokio::test]
    async fn h2c_reconnects_after_the_connection_dies() {
        let mut up = upstream(true, echo()).await;
        let connector = ReplicaConnector::new(up.addr, Protocol::H2c, 10);
        let front = proxy(connector.clone()).await;
        let mut client = h1_client(front).await;
        let get = || Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("first", client.send_request(get())).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        within("body", body_text(resp)).await;

        // Kill every upstream connection, then serve again on the same port.
        let addr = up.addr;
        up.kill.take().unwrap().send(()).unwrap();
        let revived = within("revive", async {
            loop {
                if let Ok(l) = TcpListener::bind(addr).await {
                    break l;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let h = echo();
        tokio::spawn(async move {
            loop {
                let (s, _) = revived.accept().await.unwrap();
                let h = h.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let f = h(req);
                    async move { Ok::<_, std::convert::Infallible>(f.await) }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), svc),
                );
            }
        });
        // Either the dead connection is noticed before the send, or the send fails
        // unsent and is retried once; a request already on the wire would be a 502.
        let mut ok = false;
        for _ in 0..3 {
            let resp = within("after kill", client.send_request(get()))
                .await
                .unwrap();
            let status = resp.status();
            within("body", body_text(resp)).await;
            if status == StatusCode::OK {
                ok = true;
                break;
            }
        }
        assert!(ok, "no request succeeded after the reconnect");
    }

    #[tokio::test]
    async fn head_and_empty_responses_return_the_connection() {
        let up = upstream(false, handler(|_req| async { Response::new(empty()) })).await;
        let connector = ReplicaConnector::new(up.addr, Protocol::Http1, 10);
        let front = proxy(connector.clone()).await;
        let mut client = h1_client(front).await;
        for method in ["HEAD", "GET", "HEAD"] {
            let req = Request::builder()
                .method(method)
                .uri("/")
                .header("host", "h")
                .body(empty())
                .unwrap();
            let resp = within("request", client.send_request(req)).await.unwrap();
            within("body", body_text(resp)).await;
        }
        assert_eq!(up.accepted(), 1);
    }
}
