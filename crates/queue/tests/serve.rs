//! End-to-end tests of `ReplicaQueue::serve` over real loopback sockets:
//! client → front server (calls `serve`) → `ReplicaConnector` → tiny hyper upstream.
//!
//! Timeout and stats tests run with paused time: every socket lives in the test's
//! single-threaded runtime, so loopback I/O completes without the clock moving and the
//! clock only jumps to the next timer (an upstream's sleep, a timeout).
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use wisp_net::{Body, BoxError, ForwardContext, Protocol};
use wisp_queue::{QueueConfig, ReplicaQueue};

/// The status the front answers when `serve` hands the request back (`Err(req)`).
const HANDED_BACK: u16 = 599;
/// The status the front answers when the test cancels a request (`x-cancel-after-ms`).
const CANCELLED: u16 = 499;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(cc: u32) -> QueueConfig {
    QueueConfig {
        container_concurrency: cc,
        timeout: secs(300),
        response_start_timeout: None,
        idle_timeout: None,
        protocol: Protocol::Http1,
    }
}

/// Fails the test instead of hanging (real time would be 10 s; paused time jumps).
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(secs(3600), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A response body fed from the upstream handler's task.
struct ChanBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChanBody {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// The app behind the queue. Paths:
/// - `/` → 200 `ok` at once;
/// - `/sleep/<ms>` → 200 after sleeping;
/// - `/gate` → 200 once the test opens the gate;
/// - `/stream/<ms>,<ms>,...` → headers at once, then one chunk after each delay, then
///   stalls forever (a stalled stream) unless the list ends with `end`.
struct App {
    addr: SocketAddr,
    current: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    gate: watch::Sender<bool>,
}

impl App {
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
    fn current(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }
    fn open_gate(&self) {
        self.gate.send_replace(true);
    }
}

/// Counts the app's concurrent requests while alive.
struct Busy(Arc<AtomicUsize>);
impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn app() -> App {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (gate, gate_rx) = watch::channel(false);
    let (cur, pk) = (current.clone(), peak.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = l.accept().await.unwrap();
            nodelay(&stream);
            let (cur, pk, gate_rx) = (cur.clone(), pk.clone(), gate_rx.clone());
            let svc = service_fn(move |req: Request<Incoming>| {
                let now = cur.fetch_add(1, Ordering::SeqCst) + 1;
                pk.fetch_max(now, Ordering::SeqCst);
                let busy = Busy(cur.clone());
                let mut gate_rx = gate_rx.clone();
                async move {
                    let path = req.uri().path().to_owned();
                    let resp = if let Some(d) = path.strip_prefix("/sleep/") {
                        tokio::time::sleep(ms(d.parse().unwrap())).await;
                        drop(busy);
                        Response::new(wisp_net::full("slept"))
                    } else if path == "/gate" {
                        gate_rx.wait_for(|open| *open).await.unwrap();
                        drop(busy);
                        Response::new(wisp_net::full("opened"))
                    } else if let Some(plan) = path.strip_prefix("/stream/") {
                        let (tx, rx) = mpsc::channel(1);
                        let plan: Vec<String> = plan.split(',').map(str::to_owned).collect();
                        tokio::spawn(async move {
                            let _busy = busy;
                            for (i, step) in plan.iter().enumerate() {
                                if step == "end" {
                                    return;
                                }
                                tokio::time::sleep(ms(step.parse().unwrap())).await;
                                if tx.send(Bytes::from(format!("chunk{i};"))).await.is_err() {
                                    return;
                                }
                            }
                            // Stall: keep the stream open without sending.
                            tx.closed().await;
                        });
                        Response::new(wisp_net::boxed(ChanBody(rx)))
                    } else {
                        drop(busy);
                        Response::new(wisp_net::full("ok"))
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    App {
        addr,
        current,
        peak,
        gate,
    }
}

/// The front door: calls `queue.serve` like the ingress/activator will. Header
/// `k-proxy-request: activator` marks the request as proxied; `x-cancel-after-ms: N` drops
/// the `serve` future after N ms (a client that went away).
async fn front(queue: Arc<ReplicaQueue>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = l.accept().await.unwrap();
            nodelay(&stream);
            let queue = queue.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let queue = queue.clone();
                async move {
                    let ctx = ForwardContext {
                        client_addr: peer.ip(),
                        client_port: peer.port(),
                        scheme: "http",
                        proxied_by_activator: req
                            .headers()
                            .get("k-proxy-request")
                            .is_some_and(|v| v == "activator"),
                        arrived: None,
                    };
                    let cancel = req
                        .headers()
                        .get("x-cancel-after-ms")
                        .map(|v| ms(v.to_str().unwrap().parse().unwrap()));
                    let serve = queue.serve(req, &ctx);
                    let served = match cancel {
                        Some(after) => match tokio::time::timeout(after, serve).await {
                            Ok(r) => r,
                            Err(_) => return Ok(status(CANCELLED)),
                        },
                        None => serve.await,
                    };
                    Ok::<_, Infallible>(served.unwrap_or_else(|_req| status(HANDED_BACK)))
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// With paused time the clock jumps whenever the runtime is idle, including while bytes
/// sit in a socket: Nagle's algorithm (waiting for a delayed ACK) would let a timeout fire
/// "before" data that was already written. Every test socket writes at once.
fn nodelay(s: &TcpStream) {
    s.set_nodelay(true).unwrap();
}

fn status(code: u16) -> Response<Body> {
    let mut r = Response::new(wisp_net::empty());
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

/// Sends one request on a fresh connection; returns the response with its body unread.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    nodelay(&stream);
    let io = TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = Request::get(path).header("host", "app.example.com");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap()
}

/// Sends a request and reads the whole body: (status, body) or the body error.
async fn get(addr: SocketAddr, path: &str) -> (u16, Result<String, String>) {
    get_with(addr, path, &[]).await
}

async fn get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Result<String, String>) {
    let resp = send(addr, path, headers).await;
    let code = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
        .map_err(|e| e.to_string());
    (code, body)
}

/// Polls `cond` (yielding to the runtime) until it holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    within(what, async {
        while !cond() {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await;
}

async fn setup(cfg: QueueConfig) -> (App, Arc<ReplicaQueue>, SocketAddr) {
    let app = app().await;
    let queue = ReplicaQueue::new("rev-00001-replica-1".into(), app.addr, cfg);
    let addr = front(queue.clone()).await;
    (app, queue, addr)
}

#[tokio::test]
async fn proxies_a_request() {
    let (app, queue, addr) = setup(config(0)).await;
    assert_eq!(get(addr, "/").await, (200, Ok("ok".into())));
    assert_eq!(queue.addr(), app.addr);
    assert_eq!(queue.replica(), "rev-00001-replica-1");
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
}

#[tokio::test]
async fn cc1_lets_one_request_through_queues_ten_and_rejects_the_twelfth_at_once() {
    let (app, queue, addr) = setup(config(1)).await;
    let mut clients = Vec::new();
    for _ in 0..11 {
        clients.push(tokio::spawn(get(addr, "/gate")));
    }
    until("1 at the replica + 10 queued", || {
        app.current() == 1 && queue.in_flight() == 1 && queue.queued() == 10
    })
    .await;
    assert!(!queue.has_free_slot());
    assert_eq!(app.current(), 1);

    // The 12th is refused without waiting (the gate is still closed).
    let (code, body) = within("12th rejected at once", get(addr, "/gate")).await;
    assert_eq!((code, body), (503, Ok("pending request queue full".into())));

    app.open_gate();
    for c in clients {
        assert_eq!(c.await.unwrap(), (200, Ok("opened".into())));
    }
    assert_eq!(app.peak(), 1, "the replica never saw two requests at once");
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
    assert!(queue.has_free_slot());
}

#[tokio::test]
async fn cc0_is_unlimited() {
    let (app, queue, addr) = setup(config(0)).await;
    let clients: Vec<_> = (0..30).map(|_| tokio::spawn(get(addr, "/gate"))).collect();
    until("all 30 at the replica", || app.current() == 30).await;
    assert_eq!((queue.in_flight(), queue.queued()), (30, 0));
    assert!(queue.has_free_slot());
    app.open_gate();
    for c in clients {
        assert_eq!(c.await.unwrap().0, 200);
    }
}

#[tokio::test]
async fn a_queued_request_whose_client_left_frees_its_slot() {
    let (app, queue, addr) = setup(config(1)).await;
    let running = tokio::spawn(get(addr, "/gate"));
    until("first running", || queue.in_flight() == 1).await;
    // Fill the queue; one of the ten gives up after 50 ms.
    let quitter = tokio::spawn(get_with(addr, "/gate", &[("x-cancel-after-ms", "50")]));
    let mut waiting: Vec<_> = (0..9).map(|_| tokio::spawn(get(addr, "/gate"))).collect();
    assert_eq!(quitter.await.unwrap().0, CANCELLED);
    until("9 queued", || queue.queued() == 9).await;
    // Its slot is free again: one more fits, then the queue is full.
    waiting.push(tokio::spawn(get(addr, "/gate")));
    until("10 queued", || queue.queued() == 10).await;
    assert_eq!(get(addr, "/gate").await.0, 503);

    app.open_gate();
    assert_eq!(running.await.unwrap().0, 200);
    for w in waiting {
        assert_eq!(w.await.unwrap().0, 200);
    }
    assert_eq!(app.peak(), 1);
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn overall_timeout_answers_504_before_the_headers() {
    let cfg = QueueConfig {
        timeout: secs(2),
        ..config(0)
    };
    let (_app, queue, addr) = setup(cfg).await;
    let t0 = Instant::now();
    assert_eq!(
        get(addr, "/sleep/10000").await,
        (504, Ok("request timeout".into()))
    );
    assert_eq!(Instant::now() - t0, secs(2));
    assert_eq!(queue.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn overall_timeout_cuts_a_body_already_streaming() {
    let cfg = QueueConfig {
        timeout: secs(2),
        ..config(1)
    };
    let (app, queue, addr) = setup(cfg).await;
    let (code, body) = get(addr, "/stream/0,1000").await;
    assert_eq!(code, 200);
    assert!(
        body.is_err(),
        "the client must see a cut body, got {body:?}"
    );
    until("upstream released", || app.current() == 0).await;
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
    assert!(queue.has_free_slot());
}

#[tokio::test(start_paused = true)]
async fn overall_timeout_covers_the_breaker_wait() {
    let cfg = QueueConfig {
        timeout: secs(2),
        ..config(1)
    };
    let (_app, queue, addr) = setup(cfg).await;
    let t0 = Instant::now();
    // The first request holds the only slot for 1.5 s (within its timeout).
    let first = tokio::spawn(get(addr, "/sleep/1500"));
    until("first running", || queue.in_flight() == 1).await;
    // The second needs 1 s at the replica, but 1.5 s of it were spent waiting for the
    // slot: it times out 2 s after it arrived, not 2 s after it was admitted.
    let arrived = Instant::now();
    assert_eq!(
        get(addr, "/sleep/1000").await,
        (504, Ok("request timeout".into()))
    );
    assert_eq!(Instant::now() - arrived, secs(2));
    assert_eq!(first.await.unwrap(), (200, Ok("slept".into())));
    assert!(Instant::now() - t0 < secs(3));
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn response_start_timeout_answers_504() {
    let cfg = QueueConfig {
        response_start_timeout: Some(secs(1)),
        ..config(0)
    };
    let (_app, _queue, addr) = setup(cfg).await;
    let t0 = Instant::now();
    assert_eq!(
        get(addr, "/sleep/5000").await,
        (504, Ok("request timeout".into()))
    );
    assert_eq!(Instant::now() - t0, secs(1));
    // A response that starts in time may stream longer than the response-start timeout.
    assert_eq!(
        get(addr, "/stream/0,800,800,end").await,
        (200, Ok("chunk0;chunk1;chunk2;".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn idle_timeout_cuts_a_stalled_stream() {
    let cfg = QueueConfig {
        idle_timeout: Some(secs(1)),
        ..config(0)
    };
    let (app, queue, addr) = setup(cfg).await;
    // Chunks 800 ms apart are fine, however long the stream lasts.
    assert_eq!(
        get(addr, "/stream/800,800,800,end").await,
        (200, Ok("chunk0;chunk1;chunk2;".into()))
    );
    // Two chunks, then silence: cut 1 s after the last chunk.
    let resp = send(addr, "/stream/500,500", &[]).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = String::new();
    let t0 = Instant::now();
    let err = loop {
        match body.frame().await {
            Some(Ok(f)) => got.push_str(&String::from_utf8_lossy(&f.into_data().unwrap())),
            Some(Err(e)) => break e.to_string(),
            None => panic!("the stream must be cut, not ended"),
        }
    };
    assert_eq!(got, "chunk0;chunk1;");
    assert_eq!(
        Instant::now() - t0,
        secs(2),
        "1 s of chunks + 1 s idle ({err})"
    );
    until("upstream released", || app.current() == 0).await;
    assert_eq!(queue.in_flight(), 0);
    // Idle before the headers counts too (Knative measures from arrival).
    assert_eq!(
        get(addr, "/sleep/3000").await,
        (504, Ok("request timeout".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn stats_half_a_window() {
    let (_app, queue, addr) = setup(config(1)).await;
    let t0 = Instant::now();
    // Start the window here: `setup` took no virtual time, but be explicit.
    queue.report(t0);
    assert_eq!(get(addr, "/sleep/500").await.0, 200);
    let stat = queue.report(t0 + secs(1));
    assert_eq!(stat.replica, "rev-00001-replica-1");
    assert_eq!(stat.average_concurrency, 0.5);
    assert_eq!(stat.average_proxied_concurrency, 0.0);
    assert_eq!(stat.request_count, 1.0);
    assert_eq!(stat.proxied_request_count, 0.0);
    assert_eq!(stat.window, secs(1));
    // The report reset the window.
    let next = queue.report(t0 + secs(2));
    assert_eq!((next.average_concurrency, next.request_count), (0.0, 0.0));
}

#[tokio::test(start_paused = true)]
async fn stats_overlapping_and_proxied_requests_per_second() {
    let (_app, queue, addr) = setup(config(0)).await;
    let t0 = Instant::now();
    queue.report(t0);
    let a = tokio::spawn(get(addr, "/sleep/2000"));
    let b = tokio::spawn(get_with(
        addr,
        "/sleep/1000",
        &[("k-proxy-request", "activator")],
    ));
    let c = tokio::spawn(get_with(
        addr,
        "/sleep/500",
        &[("k-proxy-request", "activator")],
    ));
    for t in [a, b, c] {
        assert_eq!(t.await.unwrap().0, 200);
    }
    // Over 2 s: 2 + 1 + 0.5 request·seconds → 1.75 average, 0.75 of it proxied;
    // 3 requests (2 proxied) → 1.5/s (1/s proxied).
    let stat = queue.report(t0 + secs(2));
    assert_eq!(stat.window, secs(2));
    assert_eq!(stat.average_concurrency, 1.75);
    assert_eq!(stat.average_proxied_concurrency, 0.75);
    assert_eq!(stat.request_count, 1.5);
    assert_eq!(stat.proxied_request_count, 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_response_counts_until_its_body_ends() {
    let (_app, queue, addr) = setup(config(1)).await;
    let t0 = Instant::now();
    queue.report(t0);
    // Headers at once, body chunks at 250 ms and 500 ms, then the end.
    assert_eq!(
        get(addr, "/stream/250,250,end").await,
        (200, Ok("chunk0;chunk1;".into()))
    );
    let stat = queue.report(t0 + secs(1));
    assert_eq!(stat.average_concurrency, 0.5);
}

#[tokio::test]
async fn an_unreachable_replica_hands_the_request_back_and_records_nothing() {
    // A port nobody listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let queue = ReplicaQueue::new("gone".into(), dead_addr, config(1));
    let addr = front(queue.clone()).await;
    queue.report(Instant::now());
    assert_eq!(get(addr, "/").await.0, HANDED_BACK);
    let stat = queue.report(Instant::now());
    assert_eq!(
        (stat.average_concurrency, stat.request_count),
        (0.0, 0.0),
        "{stat:?}"
    );
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
    assert!(queue.has_free_slot(), "the breaker slot came back");
}

#[tokio::test]
async fn a_replica_failing_mid_request_gives_502() {
    // Reads the request, then closes the connection without answering.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app_addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            drop(s);
        }
    });
    let queue = ReplicaQueue::new("flaky".into(), app_addr, config(1));
    let addr = front(queue.clone()).await;
    assert_eq!(get(addr, "/").await, (502, Ok(String::new())));
    assert_eq!((queue.in_flight(), queue.queued()), (0, 0));
    let stat = queue.report(Instant::now());
    assert!(stat.request_count > 0.0, "a failed request still counts");
}

#[tokio::test]
async fn draining_refuses_new_requests_and_waits_for_in_flight_ones() {
    let (app, queue, addr) = setup(config(2)).await;
    let running = tokio::spawn(get(addr, "/gate"));
    until("one running", || queue.in_flight() == 1).await;
    queue.begin_drain();
    assert!(queue.is_draining());
    assert_eq!(get(addr, "/").await, (503, Ok("shutting down".into())));

    let mut drained = tokio::spawn({
        let queue = queue.clone();
        async move { queue.drained().await }
    });
    tokio::time::sleep(ms(50)).await;
    assert!(
        futures_poll(&mut drained).is_none(),
        "drained() must wait for the running request"
    );
    app.open_gate();
    assert_eq!(running.await.unwrap(), (200, Ok("opened".into())));
    within("drained", drained).await.unwrap();
    // A drained queue stays drained (resolves at once).
    within("drained again", queue.drained()).await;
}

/// Non-blocking check of a spawned task: `Some` if it finished.
fn futures_poll<T>(
    h: &mut tokio::task::JoinHandle<T>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let waker = std::task::Waker::noop();
    match Pin::new(h).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}
