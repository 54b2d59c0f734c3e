//! The request path of a revision backend against real sockets on 127.0.0.1: a tiny
//! upstream app per replica, a front server (`wisp_net::serve`) calling
//! `RevisionBackend::serve`, and a plain hyper client. Every wait is bounded.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use wisp_activator::{Backends, RevisionBackend};
use wisp_autoscaler::{ActivatorLink, RoutingMode};
use wisp_net::{ForwardContext, Protocol, ServerOptions};
use wisp_queue::QueueConfig;
use wisp_runtime::{ReplicaPhase, ReplicaStatus, RevisionKey};

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// An app answering `name` after `?sleep=MS`, counting requests in flight at once.
struct App {
    addr: SocketAddr,
    max_concurrent: Arc<AtomicUsize>,
}

async fn app(name: &'static str) -> App {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let now = Arc::new(AtomicUsize::new(0));
    let max_concurrent = Arc::new(AtomicUsize::new(0));
    let (now2, max2) = (now.clone(), max_concurrent.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (now, max) = (now2.clone(), max2.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (now, max) = (now.clone(), max.clone());
                    async move {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(n, Ordering::SeqCst);
                        let ms: u64 = req
                            .uri()
                            .query()
                            .and_then(|q| q.strip_prefix("sleep="))
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from(
                            name,
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    App {
        addr,
        max_concurrent,
    }
}

/// An address nobody listens on.
async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

fn cfg(cc: u32, timeout: Duration) -> QueueConfig {
    QueueConfig {
        container_concurrency: cc,
        timeout,
        response_start_timeout: None,
        idle_timeout: None,
        protocol: Protocol::Http1,
    }
}

fn replica(name: &str, addr: SocketAddr) -> ReplicaStatus {
    ReplicaStatus {
        name: name.into(),
        address: addr,
        phase: ReplicaPhase::Ready,
        restarts: 0,
        init_done: 0,
        unready: Vec::new(),
        last_exit: None,
        failure: None,
        times: Default::default(),
    }
}

/// The KPA as the activator sees it: counts pokes, reports the mode a test sets.
struct TestKpa {
    pokes: Arc<AtomicUsize>,
    /// true = Proxy (activator in the path).
    proxy: Arc<AtomicBool>,
}

impl ActivatorLink<RevisionKey> for TestKpa {
    fn poke(&self, _: &RevisionKey) {
        self.pokes.fetch_add(1, Ordering::SeqCst);
    }
    fn mode(&self, _: &RevisionKey) -> RoutingMode {
        if self.proxy.load(Ordering::SeqCst) {
            RoutingMode::Proxy
        } else {
            RoutingMode::Serve
        }
    }
}

struct Front {
    addr: SocketAddr,
    backend: Arc<RevisionBackend>,
    backends: Arc<Backends>,
    pokes: Arc<AtomicUsize>,
    /// The routing mode the backend reads: true = Proxy (activator in the path).
    proxy: Arc<AtomicBool>,
}

/// A front server sending every request to one revision backend, in Serve mode.
async fn front(cfg: QueueConfig, hold_bound: usize) -> Front {
    front_in(cfg, hold_bound, false).await
}

/// A front server sending every request to one revision backend; `proxy`: the activator is
/// in the path (Knative's Proxy mode).
async fn front_in(cfg: QueueConfig, hold_bound: usize, proxy: bool) -> Front {
    let pokes = Arc::new(AtomicUsize::new(0));
    let p = pokes.clone();
    let proxy = Arc::new(AtomicBool::new(proxy));
    let m = proxy.clone();
    let backends = Backends::new(hold_bound, Arc::new(TestKpa { pokes: p, proxy: m }));
    let (backend, created) = backends.ensure(&RevisionKey::new("default", "rev-1"), &cfg);
    assert!(created);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let b = backend.clone();
    tokio::spawn(wisp_net::serve(
        listener,
        ServerOptions::default(),
        move |req, peer: SocketAddr| {
            let b = b.clone();
            async move {
                let ctx = ForwardContext {
                    client_addr: peer.ip(),
                    client_port: peer.port(),
                    scheme: "http",
                    proxied_by_activator: false,
                    arrived: None,
                };
                b.serve(req, ctx).await
            }
        },
        std::future::pending(),
    ));
    Front {
        addr,
        backend,
        backends,
        pokes,
        proxy,
    }
}

/// GET `path` on a fresh connection → (status, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "rev-1.default")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_through_a_ready_replica() {
    let a = app("a").await;
    let f = front(cfg(0, Duration::from_secs(10)), 10).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    assert_eq!(within("get", get(f.addr, "/")).await, (200, "a".into()));
    assert_eq!(
        f.pokes.load(Ordering::SeqCst),
        0,
        "no poke with a replica ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_until_a_replica_is_ready_then_released() {
    let f = front(cfg(0, Duration::from_secs(10)), 100).await;
    let mut reqs = Vec::new();
    for _ in 0..5 {
        reqs.push(tokio::spawn(get(f.addr, "/")));
    }
    within("all held", async {
        while f.backend.hold().waiting() < 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(f.pokes.load(Ordering::SeqCst) >= 1, "a held request pokes");
    let a = app("a").await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    for r in reqs {
        assert_eq!(within("released", r).await.unwrap(), (200, "a".into()));
    }
    assert_eq!(f.backend.hold().waiting(), 0);
    assert_eq!(f.backend.hold().held_total(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_queue_is_bounded_and_times_out() {
    let f = front(cfg(0, Duration::from_millis(800)), 2).await;
    let held: Vec<_> = (0..2).map(|_| tokio::spawn(get(f.addr, "/"))).collect();
    within("two held", async {
        while f.backend.hold().waiting() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The third is refused at once.
    let t = std::time::Instant::now();
    let (st, body) = within("refused", get(f.addr, "/")).await;
    assert_eq!((st, body.as_str()), (503, "activator queue full"));
    assert!(t.elapsed() < Duration::from_millis(300));
    // The held ones end at the revision's timeout.
    for h in held {
        let (st, body) = within("timed out", h).await.unwrap();
        assert_eq!((st, body.as_str()), (504, "activator request timeout"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreached_replicas_are_skipped() {
    let a = app("a").await;
    let dead = dead_addr().await;
    // CC 1: first available; the dead replica comes first in name order.
    let f = front(cfg(1, Duration::from_secs(10)), 10).await;
    f.backend
        .set_replicas(&[replica("a-dead", dead), replica("b-live", a.addr)]);
    for _ in 0..5 {
        assert_eq!(within("get", get(f.addr, "/")).await, (200, "a".into()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_concurrency_caps_each_replica_and_stats_report_load() {
    let (a, b) = (app("a").await, app("b").await);
    let f = front(cfg(2, Duration::from_secs(10)), 10).await;
    f.backend
        .set_replicas(&[replica("a", a.addr), replica("b", b.addr)]);
    let mut stats = f.backends.stats();
    let stats_task = tokio::spawn(f.backends.clone().run_stats(std::future::pending()));
    // 8 concurrent requests over 2 replicas with CC 2: never more than 2 at once at either.
    let reqs: Vec<_> = (0..8)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=300")))
        .collect();
    let mut seen = std::collections::BTreeMap::new();
    for r in reqs {
        let (st, body) = within("served", r).await.unwrap();
        assert_eq!(st, 200);
        *seen.entry(body).or_insert(0) += 1;
    }
    assert!(a.max_concurrent.load(Ordering::SeqCst) <= 2);
    assert!(b.max_concurrent.load(Ordering::SeqCst) <= 2);
    assert_eq!(seen.len(), 2, "both replicas served: {seen:?}");
    // The per-second report saw the load.
    let s = within("a report with load", async {
        loop {
            stats.changed().await.unwrap();
            let s = stats.borrow_and_update().clone();
            if s.concurrency("default", "rev-1") > 0.0 {
                return s;
            }
        }
    })
    .await;
    let r = s.revision("default", "rev-1").unwrap();
    assert_eq!(r.ready_replicas, 2);
    assert_eq!(s.replicas.len(), 2);
    stats_task.abort();
}

/// Waits until `n` requests wait in the activator.
async fn until_waiting(f: &Front, n: usize) {
    within("requests waiting in the activator", async {
        while f.backend.hold().waiting() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_holds_a_burst_in_the_activator_and_serves_it_by_capacity() {
    // CC 1, one replica, a slow app: 30 concurrent requests (far beyond the replica's own
    // queue of CC + 10 × CC = 11) are all served, one at a time, none shed.
    let a = app("a").await;
    let f = front_in(cfg(1, Duration::from_secs(20)), 100, true).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let start = std::time::Instant::now();
    let reqs: Vec<_> = (0..30)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=100")))
        .collect();
    // They wait in the activator, not in the replica's queue.
    until_waiting(&f, 20).await;
    let queue = f.backend.ready()[0].clone();
    assert!(
        queue.queue().queued() <= 1,
        "replica queue: {}",
        queue.queue().queued()
    );
    for r in reqs {
        let (st, body) = tokio::time::timeout(Duration::from_secs(20), r)
            .await
            .expect("served in time")
            .unwrap();
        assert_eq!((st, body.as_str()), (200, "a"));
    }
    assert_eq!(
        a.max_concurrent.load(Ordering::SeqCst),
        1,
        "never two at once"
    );
    assert!(start.elapsed() >= Duration::from_millis(30 * 100 - 50));
    assert_eq!(f.backend.hold().waiting(), 0);
    assert_eq!(queue.reserved(), 0, "every slot given back");
    assert!(f.backend.hold().held_total() >= 20);
    assert_eq!(
        f.pokes.load(Ordering::SeqCst),
        0,
        "capacity waits do not poke"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_mode_sheds_beyond_the_replica_queue() {
    // The same revision in Serve mode: CC 1 + a queue of 10 at the replica, the 12th is
    // refused at once by the replica's queue.
    let a = app("a").await;
    let f = front(cfg(1, Duration::from_secs(20)), 100).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let reqs: Vec<_> = (0..11)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=300")))
        .collect();
    let queue = f.backend.ready()[0].clone();
    within("11 inside the replica's queue", async {
        while queue.queue().in_flight() + queue.queue().queued() < 11 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let t = std::time::Instant::now();
    let (st, body) = within("refused", get(f.addr, "/")).await;
    assert_eq!((st, body.as_str()), (503, "pending request queue full"));
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(f.backend.hold().held_total(), 0);
    for r in reqs {
        assert_eq!(within("served", r).await.unwrap().0, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_with_unlimited_concurrency_does_not_wait() {
    let a = app("a").await;
    let f = front_in(cfg(0, Duration::from_secs(20)), 100, true).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let t = std::time::Instant::now();
    let reqs: Vec<_> = (0..20)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=300")))
        .collect();
    for r in reqs {
        assert_eq!(within("served", r).await.unwrap(), (200, "a".into()));
    }
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(a.max_concurrent.load(Ordering::SeqCst), 20, "all at once");
    assert_eq!(f.backend.hold().held_total(), 0, "nobody waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_waiting_is_bounded_by_the_hold_depth_and_times_out() {
    // CC 1, hold depth 3: one request runs, three wait, the fifth is refused at once. The
    // running one is cut by its queue at the revision timeout; the oldest waiter then gets
    // the slot (and a fresh timeout in the queue), the other two end at theirs in the
    // activator.
    let a = app("a").await;
    let f = front_in(cfg(1, Duration::from_millis(800)), 3, true).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let running = tokio::spawn(get(f.addr, "/?sleep=5000"));
    let queue = f.backend.ready()[0].clone();
    within("one running", async {
        while queue.queue().in_flight() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let waiting: Vec<_> = (0..3)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=5000")))
        .collect();
    until_waiting(&f, 3).await;
    let t = std::time::Instant::now();
    let (st, body) = within("refused", get(f.addr, "/")).await;
    assert_eq!((st, body.as_str()), (503, "activator queue full"));
    assert!(t.elapsed() < Duration::from_millis(300));
    assert_eq!(
        within("running", running).await.unwrap(),
        (504, "request timeout".into()),
        "cut by the replica's queue"
    );
    let mut in_activator = 0;
    for w in waiting {
        let (st, body) = within("timed out", w).await.unwrap();
        assert_eq!(st, 504, "{body}");
        if body == "activator request timeout" {
            in_activator += 1;
        }
    }
    assert_eq!(in_activator, 2);
    assert_eq!(f.backend.hold().waiting(), 0);
    assert_eq!(f.backend.ready()[0].reserved(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_spreads_by_free_slots_over_replicas() {
    // CC 2, two replicas: 12 concurrent requests, at most 2 at once at each, none shed.
    let (a, b) = (app("a").await, app("b").await);
    let f = front_in(cfg(2, Duration::from_secs(20)), 100, true).await;
    f.backend
        .set_replicas(&[replica("a", a.addr), replica("b", b.addr)]);
    let reqs: Vec<_> = (0..12)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=150")))
        .collect();
    let mut seen = std::collections::BTreeMap::new();
    for r in reqs {
        let (st, body) = within("served", r).await.unwrap();
        assert_eq!(st, 200);
        *seen.entry(body).or_insert(0) += 1;
    }
    assert_eq!(a.max_concurrent.load(Ordering::SeqCst), 2);
    assert_eq!(b.max_concurrent.load(Ordering::SeqCst), 2);
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_proxy_waits_for_slots_taken_in_serve_mode() {
    // Serve mode fills the replica (CC 1) with requests the activator did not throttle; the
    // KPA then switches to Proxy: new requests wait in the activator until those finish,
    // though their end wakes nobody (the fallback re-check covers it).
    let a = app("a").await;
    let f = front_in(cfg(1, Duration::from_secs(20)), 100, false).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let early: Vec<_> = (0..3)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=200")))
        .collect();
    let queue = f.backend.ready()[0].clone();
    within("three in the replica's queue", async {
        while queue.queue().in_flight() + queue.queue().queued() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    f.proxy.store(true, Ordering::SeqCst);
    let late: Vec<_> = (0..3)
        .map(|_| tokio::spawn(get(f.addr, "/?sleep=10")))
        .collect();
    until_waiting(&f, 3).await;
    for r in early.into_iter().chain(late) {
        assert_eq!(within("served", r).await.unwrap(), (200, "a".into()));
    }
    assert_eq!(a.max_concurrent.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_serves_waiters_in_arrival_order() {
    // CC 1: requests arriving (10 ms apart) while the first runs get the slot oldest first.
    // The first runs long enough that none of the others is served before all have
    // arrived, however slowly a busy machine sends them (each waits to be seen waiting).
    let a = app("a").await;
    let f = front_in(cfg(1, Duration::from_secs(20)), 100, true).await;
    f.backend.set_replicas(&[replica("a", a.addr)]);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut reqs = Vec::new();
    for i in 0..8 {
        let (addr, order) = (f.addr, order.clone());
        let path = if i == 0 { "/?sleep=1500" } else { "/?sleep=50" };
        reqs.push(tokio::spawn(async move {
            let r = get(addr, path).await;
            order.lock().unwrap().push(i);
            r
        }));
        until_waiting(&f, i).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for r in reqs {
        assert_eq!(within("served", r).await.unwrap().0, 200);
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
}

/// A revision with nothing to say (no replica, nobody waiting, no request since the last
/// report) is left out of the report: ten thousand revisions at zero cost no sample each
/// second. One with a request since the last report is in it once, then left out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_revisions_at_zero_are_left_out_of_the_report() {
    let a = app("a").await;
    let f = front(cfg(0, Duration::from_secs(10)), 10).await;
    let (_idle, created) = f.backends.ensure(
        &RevisionKey::new("default", "idle-1"),
        &cfg(0, Duration::from_secs(10)),
    );
    assert!(created);
    let mut last = std::collections::HashMap::new();
    let now = tokio::time::Instant::now();
    let s = f.backends.report(now, &mut last);
    assert!(s.revisions.is_empty() && s.replicas.is_empty(), "{s:?}");

    f.backend.set_replicas(&[replica("a", a.addr)]);
    assert_eq!(within("get", get(f.addr, "/")).await.0, 200);
    f.backend.set_replicas(&[]);
    let s = f.backends.report(now, &mut last);
    let names: Vec<_> = s
        .revisions
        .iter()
        .map(|r| r.revision.name.as_str())
        .collect();
    assert_eq!(names, ["rev-1"]);
    assert_eq!(s.revisions[0].requests, 1);
    let s = f.backends.report(now, &mut last);
    assert!(s.revisions.is_empty(), "nothing new: {s:?}");
}
