//! [`RevisionBackend`]: everything the data plane knows about one revision — its queue
//! settings, its ready replicas (each behind its in-process queue-proxy), the load balancer
//! and the activator's hold queue — and [`RevisionBackend::serve`], the request path.
//!
//! The path depends on whether the activator is in the path (Knative's SKS mode, read per
//! request through the [`Kpa`] link):
//!
//! - **Serve** (or containerConcurrency 0, whose capacity is unlimited): straight to a
//!   replica picked by the policy; its queue runs CC at once, queues 10 × CC more and answers
//!   503 beyond. Held in the activator only while no replica is ready.
//! - **Proxy** with CC ≥ 1: the activator throttles by capacity (Knative's throttler: a
//!   per-replica breaker of CC in the activator). A request goes to a replica only once it
//!   has a free slot — fewer than CC requests in flight, counting both the activator's own
//!   [`Endpoint::reserved`] requests and what the replica's queue runs — and takes that slot
//!   atomically; otherwise it waits in the [`Hold`] queue (bounded by the activator queue
//!   depth: 503 when full, 504 at the revision timeout). Each throttled response body carries
//!   its slot and, when it ends or is dropped (the moment the queue frees the replica's
//!   slot), wakes the oldest waiter. So a burst of any size up to the hold depth is served
//!   CC × replicas at a time instead of being shed by the replicas' queues.

use std::future::Future;
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use arc_swap::ArcSwap;
use bytes::Bytes;
use hyper::{
    Request, Response,
    body::{Frame, Incoming, SizeHint},
};
use tokio::time::Instant;
use wisp_autoscaler::{ActivatorLink, RoutingMode};
use wisp_net::{Body, BoxError, ForwardContext, Synthetic};
use wisp_queue::{Observe, QueueConfig, ReplicaQueue};
use wisp_runtime::{ReplicaPhase, ReplicaStatus, RevisionKey};

use crate::{
    hold::{Hold, HoldError, Wake},
    lb::{Balancer, Policy, Slot},
};

/// Knative's activator answers these.
pub use wisp_net::synthetic::{
    ACTIVATOR_QUEUE_FULL as QUEUE_FULL_MESSAGE, ACTIVATOR_TIMEOUT as TIMEOUT_MESSAGE,
    REVISION_GONE as GONE_MESSAGE,
};

/// While every ready replica refused the connection, re-check this often (the platform may
/// not have noticed yet that they died).
const UNREACHED_RECHECK: Duration = Duration::from_millis(200);

/// While a replica's slots are taken by requests the activator did not throttle (sent in Serve
/// mode, before the KPA switched to Proxy), one of the requests waiting for capacity
/// re-checks this often: those requests free their slot without telling anyone. Once every
/// occupied slot is a throttled one, waiting is purely event-driven.
const UNTRACKED_RECHECK: Duration = Duration::from_millis(50);

/// The activator's link to the KPA: the poke (a request has to wait) and the routing mode
/// (whether the activator is in a revision's path: Knative's SKS Proxy mode, at zero, short
/// of burst capacity, or TBC = -1). `wisp serve` wires the controller's `Scaling`.
pub type Kpa = Arc<dyn ActivatorLink<RevisionKey>>;

impl Slot for ReplicaQueue {
    fn in_flight(&self) -> usize {
        ReplicaQueue::in_flight(self) + self.queued()
    }
    fn has_free_slot(&self) -> bool {
        ReplicaQueue::has_free_slot(self)
    }
}

/// A replica as the activator sees it: its queue-proxy, and the requests the activator
/// throttled onto it (Proxy mode) that have not finished yet. Reach the queue through
/// [`Endpoint::queue`], so that a call says whose `serve` it is.
#[derive(Debug)]
pub struct Endpoint {
    queue: Arc<ReplicaQueue>,
    /// Throttled requests sent here and not finished (Knative's per-pod activator breaker).
    reserved: AtomicUsize,
}

impl Endpoint {
    fn new(queue: Arc<ReplicaQueue>) -> Self {
        Endpoint {
            queue,
            reserved: AtomicUsize::new(0),
        }
    }

    /// The replica's queue.
    pub fn queue(&self) -> &Arc<ReplicaQueue> {
        &self.queue
    }

    /// Throttled requests in flight to this replica.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::SeqCst)
    }

    fn cc(&self) -> usize {
        self.queue.config().container_concurrency as usize
    }

    /// Below CC both by the activator's count and by the queue's.
    fn has_capacity(&self) -> bool {
        let cc = self.cc();
        cc == 0 || (self.reserved() < cc && self.queue.has_free_slot())
    }

    /// Full only because of requests the activator did not throttle (no wake-up will come).
    fn full_of_untracked(&self) -> bool {
        self.reserved() < self.cc() && !self.queue.has_free_slot()
    }

    /// Takes a slot if there is one (atomic against other throttled requests).
    fn try_reserve(&self) -> bool {
        let cc = self.cc();
        self.reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                (r < cc && self.queue.has_free_slot()).then_some(r + 1)
            })
            .is_ok()
    }
}

impl Slot for Endpoint {
    fn in_flight(&self) -> usize {
        Slot::in_flight(&*self.queue)
    }
    fn has_free_slot(&self) -> bool {
        self.has_capacity()
    }
}

/// One throttled request's replica slot: freed on drop, which wakes the oldest waiter.
#[derive(Debug)]
struct Reservation {
    endpoint: Arc<Endpoint>,
    hold: Arc<Hold>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SeqCst: pairs with a waiter's register-then-re-check (see `Hold`).
        self.endpoint.reserved.fetch_sub(1, Ordering::SeqCst);
        self.hold.wake_one();
    }
}

/// A throttled response body: holds the replica slot until the body ends, fails or is
/// dropped. The inner body (whose end frees the queue's slot) goes first, then the slot.
struct Throttled {
    inner: Option<Body>,
    slot: Option<Reservation>,
}

impl hyper::body::Body for Throttled {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = Pin::new(inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None | Some(Err(_)))) {
            this.inner = None;
            this.slot = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Throttled {
    fn drop(&mut self) {
        // Explicitly in this order: the queue's slot, then the activator's.
        self.inner = None;
        self.slot = None;
    }
}

/// The untracked-slot poller's turn; ends on drop (however the waiter ends).
struct PollerGuard<'a>(&'a RevisionBackend);

impl Drop for PollerGuard<'_> {
    fn drop(&mut self) {
        self.0.untracked_poller.store(false, Ordering::Release);
    }
}

/// What a throttled request found.
enum Capacity {
    Slot(Reservation),
    Full,
    NoReplica,
}

/// One revision's endpoints and request path.
pub struct RevisionBackend {
    key: RevisionKey,
    cfg: QueueConfig,
    /// Ready replicas in name order: the pick set (read lock-free on every request).
    ready: ArcSwap<Vec<Arc<Endpoint>>>,
    /// Every replica the platform still runs, by name (only the endpoint sync touches it).
    known: Mutex<BTreeMap<String, Arc<Endpoint>>>,
    balancer: Balancer,
    hold: Arc<Hold>,
    /// Set while one waiter re-checks on a timer for slots freed by untracked requests.
    untracked_poller: AtomicBool,
    kpa: Kpa,
    /// Requests that arrived (for the per-second demand keep-alive and stats).
    requests: AtomicU64,
    /// The revision's request metrics and log, shared with its replicas' queues.
    observe: Arc<Observe>,
}

impl std::fmt::Debug for RevisionBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevisionBackend")
            .field("key", &self.key)
            .field("cfg", &self.cfg)
            .field("ready", &self.ready.load().len())
            .field("policy", &self.balancer.policy())
            .field("waiting", &self.hold.waiting())
            .finish_non_exhaustive()
    }
}

impl RevisionBackend {
    /// A backend with no replicas yet; `hold_bound` requests may wait in the activator (for
    /// a replica, or for capacity while the KPA's mode puts the activator in the path).
    pub fn new(key: RevisionKey, cfg: QueueConfig, hold_bound: usize, kpa: Kpa) -> Self {
        Self::observed(key, cfg, hold_bound, kpa, Arc::default())
    }

    /// [`new`](Self::new), recording every request in `observe`.
    pub fn observed(
        key: RevisionKey,
        cfg: QueueConfig,
        hold_bound: usize,
        kpa: Kpa,
        observe: Arc<Observe>,
    ) -> Self {
        RevisionBackend {
            balancer: Balancer::new(Policy::for_cc(cfg.container_concurrency)),
            key,
            cfg,
            ready: ArcSwap::from_pointee(Vec::new()),
            known: Mutex::new(BTreeMap::new()),
            hold: Arc::new(Hold::new(hold_bound)),
            untracked_poller: AtomicBool::new(false),
            kpa,
            requests: AtomicU64::new(0),
            observe,
        }
    }

    /// The revision's request observers.
    pub fn observe(&self) -> &Arc<Observe> {
        &self.observe
    }

    pub fn key(&self) -> &RevisionKey {
        &self.key
    }

    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// The replicas requests may go to now.
    pub fn ready(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.ready.load_full()
    }

    /// How many replicas are ready now.
    pub fn ready_len(&self) -> usize {
        self.ready.load().len()
    }

    /// Every replica queue still alive in the platform (ready or not).
    pub fn known(&self) -> Vec<Arc<ReplicaQueue>> {
        self.lock_known()
            .values()
            .map(|e| e.queue.clone())
            .collect()
    }

    /// The hold queue (waiting counts for the stats).
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Requests that arrived since the start (monotonic).
    pub fn requests_total(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn lock_known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Endpoint>>> {
        wisp_sync::lock(&self.known)
    }

    /// Brings the replica set in line with what the platform reports. A replica keeps its
    /// queue (same name and address ⇒ same `Arc<ReplicaQueue>`, so breaker and stats
    /// survive) for as long as the platform runs it; only `Ready` ones are in the pick set.
    /// A replica that stops being ready leaves the pick set at once; requests already in
    /// its queue carry on (they hold their own `Arc`), and the replica's process, stopped
    /// gracefully by the platform, finishes them. Waiters are released when a replica
    /// becomes available.
    pub fn set_replicas(&self, replicas: &[ReplicaStatus]) {
        let mut known = self.lock_known();
        let mut next = BTreeMap::new();
        let mut ready = Vec::new();
        for r in replicas {
            if r.phase == ReplicaPhase::Terminating {
                continue;
            }
            let e = match known.remove(&r.name) {
                Some(e) if e.queue().addr() == r.address => e,
                old => {
                    if let Some(old) = old {
                        old.queue().close_idle();
                    }
                    Arc::new(Endpoint::new(ReplicaQueue::observed(
                        r.name.clone(),
                        r.address,
                        self.cfg.clone(),
                        self.observe.clone(),
                    )))
                }
            };
            if r.phase == ReplicaPhase::Ready {
                ready.push(e.clone());
            }
            next.insert(r.name.clone(), e);
        }
        // Gone or terminating: out of every set. In-flight requests keep their Arc.
        for (_, e) in std::mem::replace(&mut *known, next) {
            e.queue().close_idle();
        }
        let current = self.ready.load();
        let same = current.len() == ready.len()
            && current.iter().zip(&ready).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            let available = !ready.is_empty();
            self.ready.store(Arc::new(ready));
            if available {
                self.hold.release_all();
            }
        }
    }

    /// The revision is gone: drop every replica, and end the held requests (503).
    pub fn close(&self) {
        self.set_replicas(&[]);
        self.hold.close();
    }

    /// Picks a ready replica not in `tried` by the revision's policy.
    fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<Endpoint>> {
        let ready = self.ready.load();
        if tried.is_empty() {
            return self.balancer.pick(&ready[..]).map(|i| ready[i].clone());
        }
        let rest: Vec<&Arc<Endpoint>> = ready
            .iter()
            .filter(|e| !tried.contains(&e.queue().addr()))
            .collect();
        self.balancer.pick(&rest[..]).map(|i| rest[i].clone())
    }

    /// Takes a free slot on a ready replica not in `tried`, by the revision's policy (first
    /// available or round robin: both pick a replica with a free slot when there is one).
    fn reserve(&self, tried: &[SocketAddr]) -> Capacity {
        let ready = self.ready.load();
        if tried.is_empty() {
            return self.reserve_among(&ready[..]);
        }
        // Rare (a replica refused the connection): the clones do not matter.
        let rest: Vec<Arc<Endpoint>> = ready
            .iter()
            .filter(|e| !tried.contains(&e.queue().addr()))
            .cloned()
            .collect();
        self.reserve_among(&rest[..])
    }

    fn reserve_among(&self, eps: &[Arc<Endpoint>]) -> Capacity {
        if eps.is_empty() {
            return Capacity::NoReplica;
        }
        // A lost race for a slot (another request took it first) picks again.
        for _ in 0..=eps.len() {
            let Some(i) = self.balancer.pick(eps) else {
                return Capacity::NoReplica;
            };
            let e = &eps[i];
            if !e.has_capacity() {
                return Capacity::Full;
            }
            if e.try_reserve() {
                return Capacity::Slot(Reservation {
                    endpoint: e.clone(),
                    hold: self.hold.clone(),
                });
            }
        }
        Capacity::Full
    }

    /// Serves one request (see the module doc for the two paths). A request that never
    /// reached its replica (connection refused) is retried on another one; one that failed
    /// mid-way gets the queue's 502.
    ///
    /// Not an `async fn`: its arguments would be stored twice in the future (once as
    /// arguments, once moved into the body), and the request's future is moved by value.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn stores its arguments twice in its future"
    )]
    pub fn serve(
        &self,
        mut req: Request<Incoming>,
        mut ctx: ForwardContext,
    ) -> impl Future<Output = Response<Body>> + Send + '_ {
        async move {
            self.requests.fetch_add(1, Ordering::Relaxed);
            // Only read the clock when someone records the request's duration.
            if self.observe.is_on() {
                ctx.arrived = Some(Instant::now());
            }
            let in_path = self.kpa.mode(&self.key) == RoutingMode::Proxy;
            let throttled = in_path && self.cfg.container_concurrency > 0;
            let deadline = (!self.cfg.timeout.is_zero()).then(|| Instant::now() + self.cfg.timeout);
            let mut held = false;
            // Woken alone (a freed slot was handed to this request) and not served yet.
            let mut front = false;
            let mut tried: Vec<SocketAddr> = Vec::new();
            loop {
                if self.hold.is_closed() {
                    return self.answer(Synthetic::RevisionGone, &ctx, &req);
                }
                // Knative counts the requests that came through the activator apart.
                ctx.proxied_by_activator = in_path || held;
                // One call site for the forward below: two would each hold a copy of the
                // (large) queue future in this one.
                let (chosen, any_ready) = if throttled {
                    match self.reserve(&tried) {
                        Capacity::Slot(slot) => {
                            // Slots freed without a wake-up each (a new replica, untracked
                            // requests ending): pass the turn on while there is room.
                            if held && self.can_go(true, &[]) {
                                self.hold.wake_one();
                            }
                            (Some((slot.endpoint.clone(), Some(slot))), true)
                        }
                        Capacity::Full => (None, true),
                        Capacity::NoReplica => (None, false),
                    }
                } else {
                    match self.pick(&tried) {
                        Some(e) => (Some((e, None)), true),
                        None => (None, false),
                    }
                };
                if let Some((e, slot)) = chosen {
                    match e.queue().serve(req, &ctx).await {
                        Ok(resp) => {
                            return match slot {
                                Some(slot) => resp.map(|body| {
                                    wisp_net::boxed(Throttled {
                                        inner: Some(body),
                                        slot: Some(slot),
                                    })
                                }),
                                None => resp,
                            };
                        }
                        Err(back) => {
                            req = back;
                            tried.push(e.queue().addr());
                            continue;
                        }
                    }
                }

                // No replica to go to (ask for one), or none with a free slot: wait.
                if !any_ready {
                    self.kpa.poke(&self.key);
                }
                let Some(waiter) = self.hold.register_at(!held, front) else {
                    return self.answer(Synthetic::ActivatorQueueFull, &ctx, &req);
                };
                held = true;
                front = false;
                // Registered first, so a release from here on is not missed; now re-check.
                if self.can_go(throttled, &tried) {
                    continue;
                }
                let now = Instant::now();
                let overall = deadline.unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
                let mut until = overall;
                if !tried.is_empty() {
                    until = until.min(now + UNREACHED_RECHECK);
                }
                let _poller = if throttled && self.untracked_full(&tried) {
                    self.claim_untracked_poller().inspect(|_| {
                        until = until.min(now + UNTRACKED_RECHECK);
                    })
                } else {
                    None
                };
                // Boxed: the hold is the cold path; unboxed, its futures would enlarge every
                // request's future (moved by value on the way into hyper).
                match Box::pin(waiter.wait(until)).await {
                    Ok(wake) => {
                        tried.clear();
                        front = wake == Wake::One;
                    }
                    Err(HoldError::Closed) => {
                        return self.answer(Synthetic::RevisionGone, &ctx, &req);
                    }
                    Err(HoldError::Timeout) if Instant::now() >= overall => {
                        return self.answer(Synthetic::ActivatorTimeout, &ctx, &req);
                    }
                    Err(HoldError::Timeout) => tried.clear(),
                }
            }
        }
    }

    /// The activator answers the request itself (cold path: recorded at once; logged
    /// with no replica).
    fn answer(
        &self,
        why: Synthetic<'_>,
        ctx: &ForwardContext,
        req: &Request<Incoming>,
    ) -> Response<Body> {
        let now = Instant::now();
        let resp = why.response();
        self.observe.answered(resp.status(), ctx.arrived, now);
        match &self.observe.log {
            Some(log) => match log.capture(req, ctx, ctx.arrived.unwrap_or(now)) {
                Some(capture) => log.wrap(capture, "", "", resp),
                None => resp,
            },
            None => resp,
        }
    }

    /// Makes the caller the one waiter that re-checks on a timer for untracked slots (None if
    /// another one already does); released when the guard drops.
    fn claim_untracked_poller(&self) -> Option<PollerGuard<'_>> {
        (!self.untracked_poller.swap(true, Ordering::AcqRel)).then_some(PollerGuard(self))
    }

    /// Whether a request could go now: a ready replica not in `tried` (with a free slot
    /// when `throttled`).
    fn can_go(&self, throttled: bool, tried: &[SocketAddr]) -> bool {
        self.ready
            .load()
            .iter()
            .any(|e| !tried.contains(&e.queue().addr()) && (!throttled || e.has_capacity()))
    }

    /// Whether some candidate replica is full only of requests the activator did not
    /// throttle (their end wakes nobody).
    fn untracked_full(&self, tried: &[SocketAddr]) -> bool {
        self.ready
            .load()
            .iter()
            .any(|e| !tried.contains(&e.queue().addr()) && e.full_of_untracked())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn cfg(cc: u32) -> QueueConfig {
        QueueConfig {
            container_concurrency: cc,
            timeout: Duration::from_secs(300),
            response_start_timeout: None,
            idle_timeout: None,
            protocol: wisp_net::Protocol::Http1,
        }
    }

    fn replica(name: &str, port: u16, phase: ReplicaPhase) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            phase,
            restarts: 0,
            init_done: 0,
            unready: Vec::new(),
            last_exit: None,
            failure: None,
            times: Default::default(),
        }
    }

    fn backend() -> (RevisionBackend, Arc<AtomicUsize>) {
        let pokes = Arc::new(AtomicUsize::new(0));
        let p = pokes.clone();
        struct Counting(Arc<AtomicUsize>);
        impl ActivatorLink<RevisionKey> for Counting {
            fn poke(&self, _: &RevisionKey) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            fn mode(&self, _: &RevisionKey) -> RoutingMode {
                RoutingMode::Proxy
            }
        }
        let b = RevisionBackend::new(
            RevisionKey::new("default", "hello-00001"),
            cfg(2),
            10,
            Arc::new(Counting(p)),
        );
        (b, pokes)
    }

    fn names(v: &[Arc<Endpoint>]) -> Vec<&str> {
        v.iter().map(|q| q.queue().replica()).collect()
    }

    #[test]
    fn replica_queues_survive_snapshot_rebuilds() {
        use ReplicaPhase::*;
        let (b, _) = backend();
        assert_eq!(b.balancer.policy(), Policy::FirstAvailable);
        b.set_replicas(&[replica("r2", 2, Starting), replica("r1", 1, Ready)]);
        let ready = b.ready();
        assert_eq!(names(&ready), ["r1"]);
        let r1 = ready[0].clone();

        // r2 becomes ready: r1 keeps its queue, both are in the pick set, in name order.
        b.set_replicas(&[replica("r1", 1, Ready), replica("r2", 2, Ready)]);
        let ready = b.ready();
        assert_eq!(names(&ready), ["r1", "r2"]);
        assert!(Arc::ptr_eq(&ready[0], &r1));
        let r2 = ready[1].clone();

        // r1 stops being ready: out of the pick set at once, but its queue lives on.
        b.set_replicas(&[replica("r1", 1, NotReady), replica("r2", 2, Ready)]);
        assert_eq!(names(&b.ready()), ["r2"]);
        assert_eq!(b.known().len(), 2);
        b.set_replicas(&[replica("r1", 1, Ready), replica("r2", 2, Ready)]);
        assert!(
            Arc::ptr_eq(&b.ready()[0], &r1),
            "same name and address: same queue"
        );

        // r1 restarts on another port: a new queue; r2 terminates: gone.
        b.set_replicas(&[replica("r1", 3, Ready), replica("r2", 2, Terminating)]);
        let ready = b.ready();
        assert_eq!(names(&ready), ["r1"]);
        assert!(!Arc::ptr_eq(&ready[0], &r1));
        assert_eq!(ready[0].queue().addr().port(), 3);
        assert_eq!(b.known().len(), 1);
        // A request still holding r2's queue keeps it alive.
        assert_eq!(r2.queue().replica(), "r2");

        b.close();
        assert!(b.ready().is_empty());
        assert!(b.hold().is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_appearing_release_waiters() {
        use ReplicaPhase::*;
        let (b, _) = backend();
        let w = b.hold().register(true).unwrap();
        // No replica ready yet: nothing released.
        b.set_replicas(&[replica("r1", 1, Starting)]);
        let deadline = Instant::now() + Duration::from_millis(10);
        assert_eq!(w.wait(deadline).await, Err(HoldError::Timeout));
        let w = b.hold().register(true).unwrap();
        b.set_replicas(&[replica("r1", 1, Ready)]);
        assert_eq!(
            w.wait(Instant::now() + Duration::from_secs(1)).await,
            Ok(Wake::All)
        );
    }

    #[test]
    fn pick_skips_tried_replicas() {
        use ReplicaPhase::*;
        let (b, _) = backend();
        b.set_replicas(&[replica("r1", 1, Ready), replica("r2", 2, Ready)]);
        let first = b.pick(&[]).unwrap();
        assert_eq!(first.queue().replica(), "r1", "first available");
        let other = b.pick(&[first.queue().addr()]).unwrap();
        assert_eq!(other.queue().replica(), "r2");
        assert!(
            b.pick(&[first.queue().addr(), other.queue().addr()])
                .is_none()
        );
        assert!(!b.can_go(false, &[first.queue().addr(), other.queue().addr()]));
    }

    #[test]
    fn reservations_take_free_slots_atomically() {
        use ReplicaPhase::*;
        let (b, _) = backend(); // CC 2, first available
        b.set_replicas(&[replica("r1", 1, Ready), replica("r2", 2, Ready)]);
        let ready = b.ready();
        let mut slots = Vec::new();
        for want in ["r1", "r1", "r2", "r2"] {
            match b.reserve(&[]) {
                Capacity::Slot(s) => {
                    assert_eq!(s.endpoint.queue().replica(), want);
                    slots.push(s);
                }
                _ => panic!("a free slot was expected"),
            }
        }
        assert!(matches!(b.reserve(&[]), Capacity::Full));
        assert!(!b.can_go(true, &[]));
        assert!(
            b.can_go(false, &[]),
            "without throttling any ready replica will do"
        );
        assert!(!b.untracked_full(&[]), "every slot is a throttled one");
        assert_eq!((ready[0].reserved(), ready[1].reserved()), (2, 2));

        // A freed slot wakes the oldest waiter, and can be taken again.
        let w = b.hold().register(true).unwrap();
        drop(slots.remove(0));
        assert_eq!(ready[0].reserved(), 1);
        assert!(b.can_go(true, &[]));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(
                w.wait(Instant::now() + Duration::from_millis(10)).await,
                Ok(Wake::One)
            );
        });
        assert!(
            matches!(b.reserve(&[]), Capacity::Slot(s) if s.endpoint.queue().replica() == "r1")
        );
        // Tried replicas are skipped; none left ⇒ no replica.
        let (a1, a2) = (ready[0].queue().addr(), ready[1].queue().addr());
        assert!(matches!(b.reserve(&[a1]), Capacity::Full));
        assert!(matches!(b.reserve(&[a1, a2]), Capacity::NoReplica));
        drop(slots);
        assert_eq!((ready[0].reserved(), ready[1].reserved()), (0, 0));
    }
}
