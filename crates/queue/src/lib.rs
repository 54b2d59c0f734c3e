//! # wisp-queue — the per-replica queue-proxy
//!
//! Knative puts a `queue-proxy` sidecar in front of every replica; wisp runs the same thing
//! in-process, one [`ReplicaQueue`] per replica, between the ingress/activator and the
//! replica's [`ReplicaConnector`]. For every request it:
//!
//! 1. refuses it with 503 when the replica is draining ([`ReplicaQueue::begin_drain`]);
//! 2. counts it in the autoscaling stats ([`stats`]) — from arrival, so requests waiting
//!    in the breaker count as demand, as in Knative;
//! 3. passes it through the containerConcurrency [`breaker`] (CC ≥ 1: CC running, 10 × CC
//!    waiting, 503 `pending request queue full` beyond);
//! 4. forwards it, racing the [`timeout`]s (504 `request timeout`);
//! 5. wraps the response body so the timeouts keep applying while it streams and the request
//!    stops counting (stats, breaker slot, in-flight) exactly when the body ends.
//!
//! A request that never reached the replica (connect failed) comes back as `Err(req)` for
//! the caller to retry elsewhere, and leaves no trace in the stats.
//!
//! Start at [`ReplicaQueue::serve`]; the reporting side is [`ReplicaQueue::report`], called
//! once a second by whoever feeds the autoscaler.

pub mod breaker;
pub mod observe;
pub mod request_log;
pub mod stats;
pub mod timeout;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::Notify;
use tokio::time::Instant;
use wisp_net::{Body, ForwardContext, ForwardError, ReplicaConnector, Synthetic};

use crate::breaker::{Breaker, Permit, QueueFull};
pub use crate::observe::Observe;
use crate::request_log::{Capture, RevisionLog};
use crate::stats::{RequestStats, Ticket};
use crate::timeout::{Deadlines, TimeoutBody};

/// Knative's queue depth per unit of containerConcurrency.
pub const QUEUE_DEPTH_PER_CC: u32 = 10;

/// Idle upstream connections kept when CC = 0 (Knative keeps CC, or 1000 when unlimited).
const MAX_IDLE_UNLIMITED: usize = 1000;

/// The 503 bodies when the breaker is full and while draining ([`Synthetic`]).
pub use wisp_net::synthetic::{DRAINING as DRAINING_MESSAGE, QUEUE_FULL as QUEUE_FULL_MESSAGE};

/// One replica's queue settings, from its revision.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// `containerConcurrency`; 0 = unlimited (no breaker).
    pub container_concurrency: u32,
    /// `timeoutSeconds`: the overall request timeout (zero disables it).
    pub timeout: Duration,
    /// `responseStartTimeoutSeconds` (`None` or zero: none).
    pub response_start_timeout: Option<Duration>,
    /// `idleTimeoutSeconds` (`None` or zero: none).
    pub idle_timeout: Option<Duration>,
    /// How the replica speaks HTTP.
    pub protocol: wisp_net::Protocol,
}

/// One per-second report of a replica, the fields of Knative's `Stat` message.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// The replica (Knative's `pod_name`).
    pub replica: String,
    /// Time-weighted average number of requests in the queue (waiting or running).
    pub average_concurrency: f64,
    /// The part of `average_concurrency` proxied by the activator.
    pub average_proxied_concurrency: f64,
    /// Requests per second that arrived in the window.
    pub request_count: f64,
    /// The part of `request_count` proxied by the activator.
    pub proxied_request_count: f64,
    /// The window the figures cover (since the previous report).
    pub window: Duration,
}

/// The in-process queue-proxy of ONE replica: breaker + timeouts + stats in front of its
/// [`ReplicaConnector`].
#[derive(Debug)]
pub struct ReplicaQueue {
    replica: String,
    cfg: QueueConfig,
    connector: ReplicaConnector,
    breaker: Option<Breaker>,
    shared: Arc<Shared>,
}

/// What a request still holds after `serve` returns (its body streams on).
#[derive(Debug)]
struct Shared {
    stats: RequestStats,
    /// Requests inside the queue: arrived (past the drain check) and not finished.
    active: AtomicUsize,
    /// Requests admitted past the breaker and not finished.
    in_flight: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
    /// The revision's request metrics and log (shared by its replicas' queues).
    observe: Arc<Observe>,
}

impl ReplicaQueue {
    /// The queue of replica `replica` listening on `addr`, recording nothing but the
    /// autoscaler's stats.
    pub fn new(replica: String, addr: SocketAddr, cfg: QueueConfig) -> Arc<ReplicaQueue> {
        Self::observed(replica, addr, cfg, Arc::default())
    }

    /// [`new`](Self::new), also recording each request in the revision's `observe`.
    pub fn observed(
        replica: String,
        addr: SocketAddr,
        cfg: QueueConfig,
        observe: Arc<Observe>,
    ) -> Arc<ReplicaQueue> {
        let cc = cfg.container_concurrency;
        let breaker = (cc > 0).then(|| Breaker::new(cc, cc.saturating_mul(QUEUE_DEPTH_PER_CC)));
        let max_idle = if cc == 0 {
            MAX_IDLE_UNLIMITED
        } else {
            cc as usize
        };
        Arc::new(ReplicaQueue {
            replica,
            connector: ReplicaConnector::new(addr, cfg.protocol, max_idle),
            cfg,
            breaker,
            shared: Arc::new(Shared {
                stats: RequestStats::new(Instant::now()),
                active: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                draining: AtomicBool::new(false),
                idle: Notify::new(),
                observe,
            }),
        })
    }

    /// The replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.connector.addr()
    }

    /// The settings this queue runs with.
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// Requests currently being proxied (admitted past the breaker).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Requests waiting in the breaker's queue.
    pub fn queued(&self) -> usize {
        self.breaker.as_ref().map_or(0, Breaker::queued)
    }

    /// True if a new request would be proxied at once (CC == 0, or in_flight < CC).
    pub fn has_free_slot(&self) -> bool {
        let cc = self.cfg.container_concurrency as usize;
        cc == 0 || self.in_flight() < cc
    }

    /// True once [`begin_drain`](Self::begin_drain) was called.
    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::SeqCst)
    }

    /// Breaker → forward → timeouts → stats. Errors become responses: 503
    /// `pending request queue full` (queue of 10×CC exceeded, at once), 504 `request timeout`
    /// (overall timeout with no response headers yet; if headers were already sent the body
    /// is cut), 504 on response-start timeout and on idle timeout (between body chunks), 502
    /// when the replica failed mid-request, 503 while draining.
    ///
    /// `Err(req)` ONLY when the request never reached the replica (connect failed) — the
    /// caller retries it on another replica; such a request does not count in stats.
    ///
    /// Not an `async fn`: its arguments would be stored twice in the future (once as
    /// arguments, once moved into the body), and the request's future is moved by value.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn stores its arguments twice in its future"
    )]
    pub fn serve<'a>(
        &'a self,
        req: Request<Incoming>,
        ctx: &'a ForwardContext,
    ) -> impl Future<Output = Result<Response<Body>, Request<Incoming>>> + Send + 'a {
        async move {
            let start = Instant::now();
            // Off: one branch. On: what the log line needs, before the request is sent.
            let logged = match &self.shared.observe.log {
                Some(log) => log
                    .capture(&req, ctx, ctx.arrived.unwrap_or(start))
                    .map(|c| (log, c)),
                None => None,
            };
            let Some(mut request) = InQueue::enter(&self.shared) else {
                let resp = Synthetic::Draining.response();
                self.shared
                    .observe
                    .answered(resp.status(), ctx.arrived, start);
                return Ok(self.logged(logged, resp));
            };
            request.count(start, ctx);

            let deadlines = Deadlines::new(
                start,
                self.cfg.timeout,
                self.cfg.response_start_timeout,
                self.cfg.idle_timeout,
            );
            let mut sleep = timeout::timer(&deadlines);
            let work = std::pin::pin!(async {
                let permit = match &self.breaker {
                    Some(b) => Some(b.acquire().await?),
                    None => None,
                };
                let admitted = Admitted::new(&self.shared, permit);
                Ok::<_, QueueFull>((admitted, self.connector.forward(req, ctx).await))
            });
            // The breaker wait and the forward are both under the pre-header deadline; on
            // timeout this future returns at once, dropping the pinned work future with it,
            // which leaves the queue or aborts the exchange.
            let outcome = timeout::before_headers(&deadlines, &mut sleep, work).await;
            let headers_at = Instant::now();
            match outcome {
                None => Ok(self.logged(logged, request.answer(Synthetic::QueueTimeout.response()))),
                Some(Err(QueueFull)) => {
                    Ok(self.logged(logged, request.answer(Synthetic::QueueFull.response())))
                }
                Some(Ok((admitted, Ok(resp)))) => {
                    request.status = resp.status().as_u16();
                    let (parts, body) = resp.into_parts();
                    let guard = Finish {
                        _admitted: admitted,
                        _request: request,
                    };
                    let body = TimeoutBody::new(body, guard, deadlines, headers_at, sleep);
                    Ok(self.logged(logged, Response::from_parts(parts, wisp_net::boxed(body))))
                }
                Some(Ok((admitted, Err(ForwardError::Unreached(req, err))))) => {
                    tracing::debug!(replica = %self.replica, %err, "replica unreachable; request handed back");
                    // Slot first, then the drain count, so `drained()` never sees a stale slot.
                    drop(admitted);
                    request.forget(Instant::now());
                    Err(req)
                }
                Some(Ok((_admitted, Err(ForwardError::Upstream(err))))) => {
                    tracing::warn!(replica = %self.replica, %err, "upstream failed mid-request");
                    Ok(self.logged(logged, request.answer(Synthetic::UpstreamFailed.response())))
                }
            }
        }
    }

    /// `resp`, written to the request log when its body ends (when the request is logged).
    fn logged(
        &self,
        logged: Option<(&Arc<RevisionLog>, Box<Capture>)>,
        resp: Response<Body>,
    ) -> Response<Body> {
        match logged {
            Some((log, capture)) => {
                log.wrap(capture, &self.replica, &self.addr().ip().to_string(), resp)
            }
            None => resp,
        }
    }

    /// The per-second report: time-weighted average concurrency (and the part proxied by the
    /// activator, i.e. `ctx.proxied_by_activator`), request count and proxied request count
    /// per second over the window since the previous report; starts the next window. `now`
    /// is injectable for tests (normally `Instant::now()`).
    pub fn report(&self, now: Instant) -> Stat {
        let r = self.shared.stats.report(now);
        let secs = r.window.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        Stat {
            replica: self.replica.clone(),
            average_concurrency: r.average_concurrency,
            average_proxied_concurrency: r.average_proxied_concurrency,
            request_count: per_sec(r.request_count),
            proxied_request_count: per_sec(r.proxied_request_count),
            window: r.window,
        }
    }

    /// Stop admitting: new requests get 503 (and probes would fail); requests already inside
    /// (queued or running, including streaming bodies) carry on.
    pub fn begin_drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    /// Resolves when no request is in flight or queued. Meant to follow
    /// [`begin_drain`](Self::begin_drain); without it new requests may keep arriving.
    pub async fn drained(&self) {
        loop {
            let notified = self.shared.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Register before checking, so a request finishing in between still wakes us.
            notified.as_mut().enable();
            if self.shared.active.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Drops idle upstream connections (call once the replica is gone or drained).
    pub fn close_idle(&self) {
        self.connector.close_idle();
    }
}

/// A request inside the queue (arrived, not finished). Dropping it takes it out of the stats
/// and of the drain count, and records it in the revision's metrics.
#[derive(Debug)]
struct InQueue {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    /// Retried elsewhere: remove it from the stats instead of recording its end.
    forget_at: Option<Instant>,
    /// When the request reached the revision (the activator), for its duration.
    arrived: Instant,
    /// The status it was answered with (0 until then).
    status: u16,
}

impl InQueue {
    /// Enters the queue, or `None` when draining. The increment-then-check order pairs with
    /// `begin_drain` (store-then-check in `drained`) so that no request slips in unseen.
    fn enter(shared: &Arc<Shared>) -> Option<InQueue> {
        shared.active.fetch_add(1, Ordering::SeqCst);
        let this = InQueue {
            shared: shared.clone(),
            ticket: None,
            forget_at: None,
            arrived: Instant::now(),
            status: 0,
        };
        (!shared.draining.load(Ordering::SeqCst)).then_some(this)
    }

    fn count(&mut self, now: Instant, ctx: &ForwardContext) {
        self.ticket = Some(self.shared.stats.request_in(now, ctx.proxied_by_activator));
        self.arrived = ctx.arrived.unwrap_or(now);
    }

    /// The queue answers `resp` itself.
    fn answer(&mut self, resp: Response<Body>) -> Response<Body> {
        self.status = resp.status().as_u16();
        resp
    }

    fn forget(mut self, now: Instant) {
        self.forget_at = Some(now);
    }
}

impl Drop for InQueue {
    fn drop(&mut self) {
        if let Some(t) = self.ticket {
            match self.forget_at {
                Some(at) => self.shared.stats.cancel(t, at),
                None => {
                    let now = Instant::now();
                    self.shared.stats.request_out(t, now);
                    if self.status != 0 {
                        self.shared.observe.finished(self.status, self.arrived, now);
                    }
                }
            }
        }
        if self.shared.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.idle.notify_waiters();
        }
    }
}

/// A request admitted past the breaker: holds its breaker slot and counts in `in_flight`.
#[derive(Debug)]
struct Admitted {
    shared: Arc<Shared>,
    _permit: Option<Permit>,
}

impl Admitted {
    fn new(shared: &Arc<Shared>, permit: Option<Permit>) -> Self {
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        Self {
            shared: shared.clone(),
            _permit: permit,
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Everything a streaming response holds until its body ends. Fields drop in order: the
/// breaker slot first (wakes the next waiter), then the stats/drain accounting.
#[derive(Debug)]
struct Finish {
    _admitted: Admitted,
    _request: InQueue,
}
