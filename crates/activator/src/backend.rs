//! [`RevisionBackend`]: everything the data plane knows about one revision — its queue
//! settings, its ready replicas (each behind its in-process queue-proxy), the load balancer
//! and the activator's hold queue — and [`RevisionBackend::serve`], the request path.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use hyper::{Request, Response, StatusCode, body::Incoming};
use tokio::time::Instant;
use wisp_net::{Body, ForwardContext, text_response};
use wisp_queue::{QueueConfig, ReplicaQueue};
use wisp_runtime::{ReplicaPhase, ReplicaStatus, RevisionKey};

use crate::{
    hold::{Hold, HoldError},
    lb::{Balancer, Policy, Slot},
};

/// Knative's activator answers these.
pub const QUEUE_FULL_MESSAGE: &str = "activator queue full";
pub const TIMEOUT_MESSAGE: &str = "activator request timeout";
pub const GONE_MESSAGE: &str = "revision is gone";

/// While every ready replica refused the connection, re-check this often (the platform may
/// not have noticed yet that they died).
const UNREACHED_RECHECK: Duration = Duration::from_millis(200);

/// Asks for replicas of a revision (the "poke"): wired to the controller's demand registry.
pub type Poke = Arc<dyn Fn(&RevisionKey) + Send + Sync>;

impl Slot for ReplicaQueue {
    fn in_flight(&self) -> usize {
        ReplicaQueue::in_flight(self) + self.queued()
    }
    fn has_free_slot(&self) -> bool {
        ReplicaQueue::has_free_slot(self)
    }
}

/// One revision's endpoints and request path.
pub struct RevisionBackend {
    key: RevisionKey,
    cfg: QueueConfig,
    /// Ready replicas in name order: the pick set (read lock-free on every request).
    ready: ArcSwap<Vec<Arc<ReplicaQueue>>>,
    /// Every replica the platform still runs, by name (only the endpoint sync touches it).
    known: Mutex<BTreeMap<String, Arc<ReplicaQueue>>>,
    balancer: Balancer,
    hold: Hold,
    poke: Poke,
    /// Requests that arrived (for the per-second demand keep-alive and stats).
    requests: AtomicU64,
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
    /// A backend with no replicas yet; `hold_bound` requests may wait for one.
    pub fn new(key: RevisionKey, cfg: QueueConfig, hold_bound: usize, poke: Poke) -> Self {
        RevisionBackend {
            balancer: Balancer::new(Policy::for_cc(cfg.container_concurrency)),
            key,
            cfg,
            ready: ArcSwap::from_pointee(Vec::new()),
            known: Mutex::new(BTreeMap::new()),
            hold: Hold::new(hold_bound),
            poke,
            requests: AtomicU64::new(0),
        }
    }

    pub fn key(&self) -> &RevisionKey {
        &self.key
    }

    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// The replicas requests may go to now.
    pub fn ready(&self) -> Arc<Vec<Arc<ReplicaQueue>>> {
        self.ready.load_full()
    }

    /// Every replica queue still alive in the platform (ready or not).
    pub fn known(&self) -> Vec<Arc<ReplicaQueue>> {
        self.lock_known().values().cloned().collect()
    }

    /// The hold queue (waiting counts for the stats).
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Requests that arrived since the start (monotonic).
    pub fn requests_total(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn lock_known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<ReplicaQueue>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
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
            let q = match known.remove(&r.name) {
                Some(q) if q.addr() == r.address => q,
                old => {
                    if let Some(old) = old {
                        old.close_idle();
                    }
                    ReplicaQueue::new(r.name.clone(), r.address, self.cfg.clone())
                }
            };
            if r.phase == ReplicaPhase::Ready {
                ready.push(q.clone());
            }
            next.insert(r.name.clone(), q);
        }
        // Gone or terminating: out of every set. In-flight requests keep their Arc.
        for (_, q) in std::mem::replace(&mut *known, next) {
            q.close_idle();
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
    fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<ReplicaQueue>> {
        let ready = self.ready.load();
        if tried.is_empty() {
            return self.balancer.pick(&ready[..]).map(|i| ready[i].clone());
        }
        let rest: Vec<&Arc<ReplicaQueue>> = ready
            .iter()
            .filter(|q| !tried.contains(&q.addr()))
            .collect();
        self.balancer.pick(&rest[..]).map(|i| rest[i].clone())
    }

    /// Serves one request: picks a ready replica and sends the request through its queue;
    /// with none ready, pokes the scaler and holds the request until one is (bounded: 503
    /// `activator queue full`; 504 `activator request timeout` at the revision's timeout).
    /// A request that never reached its replica (connection refused) is retried on another
    /// one; one that failed mid-way gets the queue's 502.
    pub async fn serve(&self, req: Request<Incoming>, mut ctx: ForwardContext) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let deadline = (!self.cfg.timeout.is_zero()).then(|| Instant::now() + self.cfg.timeout);
        let mut req = req;
        let mut held = false;
        let mut tried: Vec<SocketAddr> = Vec::new();
        loop {
            if self.hold.is_closed() {
                return text_response(StatusCode::SERVICE_UNAVAILABLE, GONE_MESSAGE);
            }
            if let Some(queue) = self.pick(&tried) {
                // Knative counts requests that waited in the activator apart.
                ctx.proxied_by_activator = held;
                match queue.serve(req, &ctx).await {
                    Ok(resp) => return resp,
                    Err(back) => {
                        req = back;
                        tried.push(queue.addr());
                        continue;
                    }
                }
            }

            // No replica to go to: ask for one, and wait.
            (self.poke)(&self.key);
            let Some(waiter) = self.hold.register(!held) else {
                return text_response(StatusCode::SERVICE_UNAVAILABLE, QUEUE_FULL_MESSAGE);
            };
            held = true;
            // Registered first, so a release from here on is not missed; now re-check.
            if self.has_candidate(&tried) {
                continue;
            }
            let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
            let overall = deadline.unwrap_or(far);
            let until = if tried.is_empty() {
                overall
            } else {
                overall.min(Instant::now() + UNREACHED_RECHECK)
            };
            match waiter.wait(until).await {
                Ok(()) => tried.clear(),
                Err(HoldError::Closed) => {
                    return text_response(StatusCode::SERVICE_UNAVAILABLE, GONE_MESSAGE);
                }
                Err(HoldError::Timeout) if Instant::now() >= overall => {
                    return text_response(StatusCode::GATEWAY_TIMEOUT, TIMEOUT_MESSAGE);
                }
                Err(HoldError::Timeout) => tried.clear(),
            }
        }
    }

    fn has_candidate(&self, tried: &[SocketAddr]) -> bool {
        self.ready.load().iter().any(|q| !tried.contains(&q.addr()))
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
            last_exit: None,
            failure: None,
        }
    }

    fn backend() -> (RevisionBackend, Arc<AtomicUsize>) {
        let pokes = Arc::new(AtomicUsize::new(0));
        let p = pokes.clone();
        let b = RevisionBackend::new(
            RevisionKey::new("default", "hello-00001"),
            cfg(2),
            10,
            Arc::new(move |_: &RevisionKey| {
                p.fetch_add(1, Ordering::Relaxed);
            }),
        );
        (b, pokes)
    }

    fn names(v: &[Arc<ReplicaQueue>]) -> Vec<&str> {
        v.iter().map(|q| q.replica()).collect()
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
        assert_eq!(ready[0].addr().port(), 3);
        assert_eq!(b.known().len(), 1);
        // A request still holding r2's queue keeps it alive.
        assert_eq!(r2.replica(), "r2");

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
            Ok(())
        );
    }

    #[test]
    fn pick_skips_tried_replicas() {
        use ReplicaPhase::*;
        let (b, _) = backend();
        b.set_replicas(&[replica("r1", 1, Ready), replica("r2", 2, Ready)]);
        let first = b.pick(&[]).unwrap();
        assert_eq!(first.replica(), "r1", "first available");
        let other = b.pick(&[first.addr()]).unwrap();
        assert_eq!(other.replica(), "r2");
        assert!(b.pick(&[first.addr(), other.addr()]).is_none());
        assert!(!b.has_candidate(&[first.addr(), other.addr()]));
    }
}
