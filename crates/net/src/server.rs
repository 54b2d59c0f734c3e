//! The front-door server: HTTP/1.1 and h2c (prior knowledge) on one port.
//!
//! One accept loop, one task per connection. The first bytes a client sends (peeked, not
//! read) tell HTTP/1 from the HTTP/2 preface; the connection then goes straight to hyper's
//! HTTP/1 server (with upgrades, so websockets work) or its HTTP/2 one: no rewinding reader
//! between hyper and the socket. Draining is a shutdown signal (`Stop`) each connection
//! turns into hyper's graceful shutdown. Connection tasks may run on other runtimes than
//! the accept loop (`ServerOptions::runtimes`), round-robin.
//!
//! Limits, and why:
//! - connections are bounded by a semaphore: over the limit the accept loop stops accepting
//!   (the kernel backlog queues, then refuses) instead of exhausting file descriptors;
//! - a client must send its first bytes, and an HTTP/1 client its whole request head, within
//!   `header_read_timeout` (slowloris). The first-bytes wait is ours (hyper's timer starts
//!   once it has the connection). hyper arms the same timer while an HTTP/1 keep-alive
//!   connection waits for its next request, so it doubles as the idle timeout;
//! - `max_buf_size` bounds an HTTP/1 request head (hyper answers 431 beyond it), and
//!   `max_header_list_size` the HTTP/2 one;
//! - HTTP/2 keep-alive pings cut dead peers; streams per connection are bounded.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::debug;

use crate::body::Body;

/// Front-door server limits.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Open connections at most; over the limit the accept loop waits. Default 10 000.
    pub max_connections: usize,
    /// A client must send a complete HTTP/1 request head (an HTTP/2 client: its preface)
    /// within this time, or the connection is closed. Default 10 s.
    pub header_read_timeout: Duration,
    /// Bound of an HTTP/1 request head (hyper's `max_buf_size`, at least 8 KiB; larger →
    /// 431) and of an HTTP/2 header list. Default 64 KiB.
    pub max_header_bytes: usize,
    /// HTTP/2 concurrent streams per connection. Default 250.
    pub h2_max_concurrent_streams: u32,
    /// How long in-flight requests may run after shutdown starts. Default 30 s.
    pub shutdown_grace: Duration,
    /// Runtimes the connections are spread over, round-robin; empty (the default): the
    /// runtime `serve` runs on. A proxy does best on single-threaded runtimes: a request
    /// and the upstream exchange it drives then wake each other without crossing threads.
    pub runtimes: Vec<tokio::runtime::Handle>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            h2_max_concurrent_streams: 250,
            shutdown_grace: Duration::from_secs(30),
            runtimes: Vec::new(),
        }
    }
}

/// A single-threaded tokio runtime on a thread of its own, for
/// [`ServerOptions::runtimes`]; ended (tasks left on it are cancelled) and joined on drop.
#[derive(Debug)]
pub struct RuntimeThread {
    handle: tokio::runtime::Handle,
    end: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RuntimeThread {
    /// Starts the runtime on a thread called `name`.
    pub fn start(name: &str) -> std::io::Result<RuntimeThread> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // The runtime runs spawned tasks only while `block_on` runs.
                rt.block_on(async {
                    let _ = ended.await;
                });
            })?;
        Ok(RuntimeThread {
            handle,
            end: Some(end),
            thread: Some(thread),
        })
    }

    /// The runtime, to spawn on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for RuntimeThread {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            let _ = end.send(());
        }
        // The thread ends within a moment of the signal (dropping its runtime).
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The HTTP/2 connection preface a prior-knowledge client starts with.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper asserts `max_buf_size >= 8192`.
const MIN_BUF_SIZE: usize = 8192;

/// Accepts on `listener` until `shutdown` resolves; then stops accepting, lets in-flight
/// requests finish (hyper's graceful shutdown: idle keep-alive connections close at once,
/// HTTP/2 gets GOAWAY) for up to `shutdown_grace`, and aborts what is left.
///
/// `handler(req, peer)` produces the response; it is called once per request.
///
/// Upgraded (websocket) connections are handed to tasks that outlive their HTTP
/// connection; they are not drained here.
pub async fn serve<H, F>(
    listener: TcpListener,
    opts: ServerOptions,
    handler: H,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let builders = Arc::new(Builders::new(&opts));
    let limit = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    // Shutdown for every connection: those still waiting for their first bytes close, the
    // others shut down gracefully.
    let stop = Arc::new(Stop::default());
    let mut conns = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next_runtime = 0usize;

    loop {
        let accept = async {
            // Acquired before accepting: at the limit we leave clients in the backlog.
            let permit = limit.clone().acquire_owned().await;
            (permit, listener.accept().await)
        };
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            // Reap finished connection tasks so the set stays as large as the live count.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            (permit, accepted) = accept => {
                let Ok(permit) = permit else { break };
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning on the error.
                        debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let builders = builders.clone();
                let handler = handler.clone();
                let stop = stop.clone();
                let first_bytes = opts.header_read_timeout;
                // A connection served on another runtime must be registered with that
                // runtime's reactor: it travels there as a std socket.
                let (stream, runtime) = match opts.runtimes.get(next_runtime % opts.runtimes.len().max(1)) {
                    None => (Conn::Here(stream), None),
                    Some(rt) => {
                        next_runtime = next_runtime.wrapping_add(1);
                        match stream.into_std() {
                            Ok(std) => (Conn::Moved(std), Some(rt)),
                            Err(e) => {
                                debug!(%peer, error = %e, "cannot hand the connection over");
                                continue;
                            }
                        }
                    }
                };
                let task = async move {
                    let _permit = permit;
                    let stream = match stream {
                        Conn::Here(s) => s,
                        Conn::Moved(s) => match TcpStream::from_std(s) {
                            Ok(s) => s,
                            Err(e) => {
                                debug!(%peer, error = %e, "cannot register the connection");
                                return;
                            }
                        },
                    };
                    let proto = tokio::select! {
                        proto = await_first_bytes(&stream, first_bytes) => match proto {
                            Some(proto) => proto,
                            None => return,
                        },
                        () = stop.wait() => return,
                    };
                    let service = service_fn(move |req| {
                        let response = handler(req, peer);
                        async move { Ok::<_, Infallible>(response.await) }
                    });
                    let io = TokioIo::new(stream);
                    let served = match proto {
                        Proto::Http1 => {
                            let conn = builders.http1.serve_connection(io, service).with_upgrades();
                            until_stopped(conn, |c| c.graceful_shutdown(), &stop).await
                        }
                        Proto::H2 => {
                            let conn = builders.http2.serve_connection(io, service);
                            until_stopped(conn, |c| c.graceful_shutdown(), &stop).await
                        }
                    };
                    if let Err(e) = served {
                        debug!(%peer, error = %e, "connection ended with an error");
                    }
                };
                match runtime {
                    Some(rt) => conns.spawn_on(task, rt),
                    None => conns.spawn(task),
                };
            }
        }
    }

    drop(listener);
    stop.signal();
    let drained = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(opts.shutdown_grace, drained)
        .await
        .is_err()
    {
        debug!(
            remaining = conns.len(),
            "shutdown grace elapsed, aborting connections"
        );
    }
    conns.shutdown().await;
    Ok(())
}

/// An accepted connection, still registered with the accepting runtime or on its way to
/// another one.
enum Conn {
    Here(TcpStream),
    Moved(std::net::TcpStream),
}

/// The server's shutdown signal, as its connections see it.
///
/// Not a `watch` channel: a connection checks for shutdown every time it is polled (each
/// read, write and response), and polling a `watch`/`Notify` future takes the channel's
/// lock, which every connection of every thread shares. Here the check is a load of a flag;
/// the `Notify` only wakes connections that sit idle.
#[derive(Debug, Default)]
struct Stop {
    stopped: AtomicBool,
    notify: Notify,
}

impl Stop {
    fn signal(&self) {
        // Flag first: a woken connection must see it.
        self.stopped.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_signalled(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Resolves once [`signal`](Self::signal) was called (also if before this call).
    async fn wait(&self) {
        let notified = self.notify.notified();
        let mut notified = pin!(notified);
        // Registered before the flag is checked, so a signal in between is not missed.
        notified.as_mut().enable();
        if !self.is_signalled() {
            notified.await;
        }
    }
}

/// Drives a connection until it ends; once `stop` is signalled, asks it to shut down
/// gracefully (`shutdown`) and drives it to its end.
///
/// The stop notification is polled once, to register this task's waker (the waker of a
/// spawned task stays the same); after that, polls only check the flag.
async fn until_stopped<C, E>(
    conn: C,
    shutdown: impl FnOnce(Pin<&mut C>),
    stop: &Stop,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    let mut conn = pin!(conn);
    let mut notified = pin!(stop.notify.notified());
    let mut registered = false;
    let mut shutdown = Some(shutdown);
    std::future::poll_fn(|cx| {
        if shutdown.is_some() {
            let woken = !registered && notified.as_mut().poll(cx).is_ready();
            registered = true;
            if (woken || stop.is_signalled())
                && let Some(shutdown) = shutdown.take()
            {
                shutdown(conn.as_mut());
            }
        }
        conn.as_mut().poll(cx)
    })
    .await
}

/// What a client speaks, by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http1,
    /// HTTP/2 with prior knowledge (h2c): the connection starts with the preface.
    H2,
}

/// hyper's connection builders, set up once per listener.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(opts: &ServerOptions) -> Self {
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(opts.header_read_timeout)
            .max_buf_size(opts.max_header_bytes.max(MIN_BUF_SIZE));
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(opts.h2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(opts.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10))
            .adaptive_window(true);
        Self { http1, http2 }
    }
}

/// Waits until the client has sent enough to tell HTTP/1 from HTTP/2: any first byte that
/// is not the start of the h2 preface, or the whole preface. `None` on timeout or EOF.
async fn await_first_bytes(stream: &TcpStream, timeout: Duration) -> Option<Proto> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return None,
        };
        if n == 0 {
            return None;
        }
        if buf[..n] != H2_PREFACE[..n] {
            return Some(Proto::Http1);
        }
        if n == buf.len() {
            return Some(Proto::H2);
        }
        // A partial preface (rare: clients send it in one segment). `peek` does not
        // consume, so the socket stays readable; poll again shortly rather than spin.
        if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(5)))
            .await
            .is_err()
        {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http_body_util::BodyExt;
    use hyper::StatusCode;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::{Notify, oneshot};

    use super::*;
    use crate::testutil::*;
    use crate::{empty, full};

    /// Answers with the request's HTTP version.
    async fn version_server(opts: ServerOptions) -> (SocketAddr, oneshot::Sender<()>) {
        let (l, addr) = listener().await;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let handler = |req: Request<Incoming>, _peer| async move {
            Response::new(full(format!("{:?}", req.version())))
        };
        tokio::spawn(serve(l, opts, handler, async {
            let _ = stop_rx.await;
        }));
        (addr, stop_tx)
    }

    async fn body_text(resp: Response<Incoming>) -> String {
        text(&resp.into_body().collect().await.unwrap().to_bytes())
    }

    /// Reads until EOF (or error), returning what was read.
    async fn read_to_close(stream: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        text(&out)
    }

    #[tokio::test]
    async fn http1_and_h2c_on_one_port() {
        let (addr, _stop) = version_server(ServerOptions::default()).await;
        let mut h1 = h1_client(addr).await;
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("h1", h1.send_request(req)).await.unwrap();
        assert_eq!(within("h1 body", body_text(resp)).await, "HTTP/1.1");

        let mut h2 = h2_client(addr).await;
        let req = Request::get("http://h/").body(empty()).unwrap();
        let resp = within("h2", h2.send_request(req)).await.unwrap();
        assert_eq!(within("h2 body", body_text(resp)).await, "HTTP/2.0");
    }

    #[tokio::test]
    async fn connections_are_served_on_the_given_runtimes() {
        // A single-threaded runtime on its own thread, as `wisp serve`'s data plane has.
        let rt = RuntimeThread::start("test-dataplane").unwrap();

        let (l, addr) = listener().await;
        let handler = |_req: Request<Incoming>, _peer| async move {
            let name = std::thread::current().name().unwrap_or("").to_string();
            Response::new(full(name))
        };
        let opts = ServerOptions {
            runtimes: vec![rt.handle().clone()],
            ..ServerOptions::default()
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(l, opts, handler, async {
            let _ = stop_rx.await;
        }));
        for _ in 0..3 {
            let mut h1 = h1_client(addr).await;
            let req = Request::get("/").header("host", "h").body(empty()).unwrap();
            let resp = within("h1", h1.send_request(req)).await.unwrap();
            assert_eq!(within("body", body_text(resp)).await, "test-dataplane");
        }
        stop_tx.send(()).unwrap();
        within("serve returns", server).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn header_read_timeout_cuts_slow_and_idle_clients() {
        let opts = ServerOptions {
            header_read_timeout: Duration::from_millis(300),
            ..ServerOptions::default()
        };
        let (addr, _stop) = version_server(opts).await;

        // Half a request line, then nothing.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /slo").await.unwrap();
        let started = Instant::now();
        let got = within("slow client cut", read_to_close(&mut slow)).await;
        assert!(!got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(started.elapsed() < Duration::from_secs(3));

        // Connected, never a byte (the h1/h2 sniffing phase).
        let mut idle = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            within("idle client cut", read_to_close(&mut idle)).await,
            ""
        );

        // Half an HTTP/2 preface.
        let mut partial = TcpStream::connect(addr).await.unwrap();
        partial.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        assert_eq!(
            within("partial preface cut", read_to_close(&mut partial)).await,
            ""
        );

        // A prompt client on the same server is unaffected.
        let mut h1 = h1_client(addr).await;
        let req = Request::get("/").header("host", "h").body(empty()).unwrap();
        let resp = within("prompt", h1.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn oversized_request_head_gets_431() {
        let opts = ServerOptions {
            max_header_bytes: 8 * 1024,
            ..ServerOptions::default()
        };
        let (addr, _stop) = version_server(opts).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let big = "a".repeat(20 * 1024);
        let req = format!("GET / HTTP/1.1\r\nHost: h\r\nX-Big: {big}\r\n\r\n");
        // The server may stop reading (and close) before we finish writing.
        let _ = s.write_all(req.as_bytes()).await;
        let got = within("431", read_to_close(&mut s)).await;
        assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    }

    #[tokio::test]
    async fn connection_limit_holds_back_extra_connections() {
        let release = Arc::new(Notify::new());
        let entered = Arc::new(Notify::new());
        let (l, addr) = listener().await;
        let (r, e) = (release.clone(), entered.clone());
        let handler = move |_req: Request<Incoming>, _peer| {
            let (r, e) = (r.clone(), e.clone());
            async move {
                e.notify_one();
                r.notified().await;
                Response::new(full("done"))
            }
        };
        let opts = ServerOptions {
            max_connections: 1,
            ..ServerOptions::default()
        };
        tokio::spawn(serve(l, opts, handler, std::future::pending()));

        let mut first = h1_client(addr).await;
        let first_resp = tokio::spawn(async move {
            let req = Request::get("/").header("host", "h").body(empty()).unwrap();
            first.send_request(req).await.unwrap().status()
        });
        within("first request in handler", entered.notified()).await;

        // The kernel completes the second TCP handshake (backlog), but the server does not
        // accept it while the first connection is open.
        let mut second = h1_client(addr).await;
        let second_resp = tokio::spawn(async move {
            let req = Request::get("/").header("host", "h").body(empty()).unwrap();
            second.send_request(req).await.unwrap().status()
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second_resp.is_finished(),
            "second connection served over the limit"
        );

        // Finish the first request and close its connection: the second gets its turn.
        release.notify_one();
        assert_eq!(within("first", first_resp).await.unwrap(), StatusCode::OK);
        within("second in handler", entered.notified()).await;
        release.notify_one();
        assert_eq!(within("second", second_resp).await.unwrap(), StatusCode::OK);
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_at_once() {
        let (l, addr) = listener().await;
        let handler = |_req: Request<Incoming>, _peer| async { Response::new(full("ok")) };
        // Far beyond `within`'s bound: only the shutdown can end these connections in time.
        let opts = ServerOptions {
            header_read_timeout: Duration::from_secs(60),
            ..ServerOptions::default()
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(l, opts, handler, async {
            let _ = stop_rx.await;
        }));

        // A keep-alive connection idle after one request, and one that never sent a byte.
        let mut used = TcpStream::connect(addr).await.unwrap();
        used.write_all(b"GET / HTTP/1.1\r\nhost: h\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        within("first response", used.read_exact(&mut head))
            .await
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        let mut silent = TcpStream::connect(addr).await.unwrap();
        // Let the server take both connections before it stops accepting.
        tokio::time::sleep(Duration::from_millis(50)).await;

        stop_tx.send(()).unwrap();
        within("serve returns", server).await.unwrap().unwrap();
        assert!(
            within("idle keep-alive closed", read_to_close(&mut used))
                .await
                .ends_with("ok")
        );
        assert_eq!(
            within("silent closed", read_to_close(&mut silent)).await,
            ""
        );
    }

    #[tokio::test]
    async fn graceful_shutdown_lets_in_flight_requests_finish() {
        let entered = Arc::new(Notify::new());
        let e = entered.clone();
        let (l, addr) = listener().await;
        let handler = move |_req: Request<Incoming>, _peer| {
            let e = e.clone();
            async move {
                e.notify_one();
                tokio::time::sleep(Duration::from_millis(300)).await;
                Response::new(full("finished"))
            }
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(l, ServerOptions::default(), handler, async {
            let _ = stop_rx.await;
        }));

        let mut client = h1_client(addr).await;
        let in_flight = tokio::spawn(async move {
            let req = Request::get("/").header("host", "h").body(empty()).unwrap();
            let resp = client.send_request(req).await.unwrap();
            body_text(resp).await
        });
        within("request in handler", entered.notified()).await;
        stop_tx.send(()).unwrap();

        assert_eq!(within("in-flight", in_flight).await.unwrap(), "finished");
        within("serve returns", server).await.unwrap().unwrap();
        // The listener is gone: new connections are refused.
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn shutdown_grace_bounds_the_drain() {
        let (l, _addr) = listener().await;
        let addr = l.local_addr().unwrap();
        let handler = |_req: Request<Incoming>, _peer| async {
            std::future::pending::<()>().await;
            Response::new(empty())
        };
        let opts = ServerOptions {
            shutdown_grace: Duration::from_millis(200),
            ..ServerOptions::default()
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(l, opts, handler, async {
            let _ = stop_rx.await;
        }));
        let mut client = h1_client(addr).await;
        let stuck = tokio::spawn(async move {
            let req = Request::get("/").header("host", "h").body(empty()).unwrap();
            client.send_request(req).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(()).unwrap();
        within("serve returns after grace", server)
            .await
            .unwrap()
            .unwrap();
        assert!(within("stuck request cut", stuck).await.unwrap().is_err());
    }
}
