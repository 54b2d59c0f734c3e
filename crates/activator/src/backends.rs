//! [`Backends`]: the endpoints registry — every revision's [`RevisionBackend`] by namespace
//! and name, in an immutable map swapped atomically (the request path reads it without a
//! lock) — and the per-second stats the autoscaler will read.

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use tokio::{sync::watch, time::Instant};
use wisp_metrics::{RequestMetrics, RevisionLabels};
use wisp_queue::{Observe, QueueConfig, Stat};
use wisp_runtime::{ReplicaStatus, RevisionKey};

use crate::revision_backend::{Kpa, RevisionBackend};

/// Knative's activator queue depth per revision: requests waiting for a replica, or (in
/// Proxy mode) for a free slot.
pub const DEFAULT_HOLD_BOUND: usize = 10_000;

/// How often the stats are reported (Knative's queue-proxy and activator: 1 s).
pub const STATS_PERIOD: Duration = Duration::from_secs(1);

// Persistent maps (a clone is O(1), an insert copies only the path to its entry): the map
// is copied on every revision added or removed, and a copy of a whole hash map per change
// made adding 10 000 revisions quadratic (a restart with 10 000 services spent most of its
// CPU cloning and dropping it). foldhash, not SipHash: every request looks its revision up
// here (two lookups).
type Hasher = foldhash::fast::RandomState;
type Revisions =
    imbl::GenericHashMap<String, Arc<RevisionBackend>, Hasher, imbl::shared_ptr::DefaultSharedPtr>;
type Map = imbl::GenericHashMap<String, Revisions, Hasher, imbl::shared_ptr::DefaultSharedPtr>;

/// One replica's report.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaStat {
    pub revision: RevisionKey,
    pub stat: Stat,
}

/// The activator's own figures for one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionStat {
    pub revision: RevisionKey,
    /// Requests held (waiting for a replica) right now.
    pub waiting: usize,
    /// Requests that had to be held during the last interval.
    pub held: u64,
    /// Requests that arrived during the last interval.
    pub requests: u64,
    /// Ready replicas now.
    pub ready_replicas: usize,
}

/// Everything reported in one interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// When the report was taken (None before the first one).
    pub at: Option<Instant>,
    /// Every live replica queue's report (Knative's per-pod `Stat`).
    pub replicas: Vec<ReplicaStat>,
    /// Every revision's activator figures.
    pub revisions: Vec<RevisionStat>,
}

impl Stats {
    /// The summed average concurrency of a revision's replicas.
    pub fn concurrency(&self, ns: &str, rev: &str) -> f64 {
        self.replicas
            .iter()
            .filter(|s| s.revision.namespace == ns && s.revision.name == rev)
            .map(|s| s.stat.average_concurrency)
            .sum()
    }

    pub fn revision(&self, ns: &str, rev: &str) -> Option<&RevisionStat> {
        self.revisions
            .iter()
            .find(|s| s.revision.namespace == ns && s.revision.name == rev)
    }
}

/// What the data plane records of each revision's requests besides the autoscaler's
/// stats (issue #18). Fixed before the first backend is made; all off by default.
#[derive(Clone, Debug, Default)]
pub struct Observability {
    /// Per-revision request durations by status class (`/metrics`, the console).
    pub metrics: bool,
    /// The request log (`config-observability`), when on.
    pub request_log: Option<Arc<wisp_queue::request_log::RequestLog>>,
}

/// The endpoints registry.
pub struct Backends {
    map: ArcSwap<Map>,
    hold_bound: usize,
    kpa: Kpa,
    stats: watch::Sender<Arc<Stats>>,
    observability: std::sync::OnceLock<Observability>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field("revisions", &self.len())
            .field("hold_bound", &self.hold_bound)
            .finish_non_exhaustive()
    }
}

impl Backends {
    /// An empty registry; each revision holds at most `hold_bound` requests while it has no
    /// replica. The KPA is poked when a request has to wait (and once a second while a
    /// revision has traffic, so the demand does not lapse while it is being served), and its
    /// routing mode says, per request, whether the activator is in a revision's path (Proxy
    /// mode): then requests also wait here for a replica with a free slot.
    pub fn new(hold_bound: usize, kpa: Kpa) -> Arc<Backends> {
        Arc::new(Backends {
            map: ArcSwap::from_pointee(Map::default()),
            hold_bound: hold_bound.max(1),
            kpa,
            stats: watch::channel(Arc::new(Stats::default())).0,
            observability: std::sync::OnceLock::new(),
        })
    }

    /// Sets what every backend made from now on records (call before the first `ensure`;
    /// later calls are ignored).
    pub fn observe(&self, o: Observability) {
        let _ = self.observability.set(o);
    }

    fn observe_for(&self, labels: RevisionLabels) -> Arc<Observe> {
        let o = self.observability.get().cloned().unwrap_or_default();
        let log = o.request_log.map(|sink| {
            Arc::new(wisp_queue::request_log::RevisionLog {
                sink,
                revision: wisp_api::config::request_log::RevisionInfo {
                    name: labels.revision.clone(),
                    namespace: labels.namespace.clone(),
                    service: labels.service.clone(),
                    configuration: labels.configuration.clone(),
                },
            })
        });
        Arc::new(Observe {
            metrics: o.metrics.then(|| Arc::new(RequestMetrics::new(labels))),
            log,
        })
    }

    /// The backend of a revision (lock-free).
    pub fn get(&self, namespace: &str, revision: &str) -> Option<Arc<RevisionBackend>> {
        self.map.load().get(namespace)?.get(revision).cloned()
    }

    /// Every backend.
    pub fn all(&self) -> Vec<Arc<RevisionBackend>> {
        self.map
            .load()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Calls `f` with every backend (no copy of the set).
    pub fn for_each(&self, mut f: impl FnMut(&Arc<RevisionBackend>)) {
        for b in self.map.load().values().flat_map(|m| m.values()) {
            f(b);
        }
    }

    pub fn len(&self) -> usize {
        self.map.load().values().map(|m| m.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The backend of `key`, created with `cfg` if missing (a revision's settings never
    /// change: revisions are immutable). Returns it and whether it was created.
    pub fn ensure(&self, key: &RevisionKey, cfg: &QueueConfig) -> (Arc<RevisionBackend>, bool) {
        let labels = RevisionLabels {
            namespace: key.namespace.clone(),
            revision: key.name.clone(),
            ..RevisionLabels::default()
        };
        self.ensure_labelled(key, cfg, labels)
    }

    /// [`ensure`](Self::ensure), naming the revision's Service and Configuration in its
    /// metrics.
    pub fn ensure_labelled(
        &self,
        key: &RevisionKey,
        cfg: &QueueConfig,
        labels: RevisionLabels,
    ) -> (Arc<RevisionBackend>, bool) {
        if let Some(b) = self.get(&key.namespace, &key.name) {
            return (b, false);
        }
        let fresh = Arc::new(RevisionBackend::observed(
            key.clone(),
            cfg.clone(),
            self.hold_bound,
            self.kpa.clone(),
            self.observe_for(labels),
        ));
        let mut created = false;
        self.map.rcu(|old| {
            let mut next = Map::clone(old);
            let ns = next.entry(key.namespace.clone()).or_default();
            created = !ns.contains_key(&key.name);
            if created {
                ns.insert(key.name.clone(), fresh.clone());
            }
            next
        });
        let b = self.get(&key.namespace, &key.name).expect("just inserted");
        (b, created)
    }

    /// Removes a revision's backend; its held requests end with 503.
    pub fn remove(&self, key: &RevisionKey) -> Option<Arc<RevisionBackend>> {
        self.get(&key.namespace, &key.name)?;
        let mut removed = None;
        self.map.rcu(|old| {
            let mut next = Map::clone(old);
            removed = next
                .get_mut(&key.namespace)
                .and_then(|m| m.remove(&key.name));
            if next.get(&key.namespace).is_some_and(|m| m.is_empty()) {
                next.remove(&key.namespace);
            }
            next
        });
        if let Some(b) = &removed {
            b.close();
            if let Some(log) = &b.observe().log {
                log.sink.forget(&key.namespace, &key.name);
            }
        }
        removed
    }

    /// Updates the replicas of `key` (no-op if the revision has no backend).
    pub fn set_replicas(&self, key: &RevisionKey, replicas: &[ReplicaStatus]) {
        if let Some(b) = self.get(&key.namespace, &key.name) {
            b.set_replicas(replicas);
        }
    }

    /// The latest per-second stats (the autoscaler of the next issue reads this).
    pub fn stats(&self) -> watch::Receiver<Arc<Stats>> {
        self.stats.subscribe()
    }

    /// Reports stats every [`STATS_PERIOD`] until `shutdown` resolves. Each tick also pokes
    /// every revision that had requests or has waiters, keeping its demand alive.
    pub async fn run_stats(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        let mut last: HashMap<RevisionKey, (u64, u64)> = HashMap::new();
        let mut tick = tokio::time::interval(STATS_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let mut report = || {
                let stats = self.report(Instant::now(), &mut last);
                for r in &stats.revisions {
                    if r.waiting > 0 || r.requests > 0 {
                        self.kpa.poke(&r.revision);
                    }
                }
                self.stats.send_replace(Arc::new(stats));
            };
            match wisp_metrics::control() {
                Some(c) => wisp_metrics::count_cpu(c.stats_cpu(), report),
                None => report(),
            }
        }
    }

    /// One report; `last` carries each revision's counters from the previous one. A
    /// revision with nothing to say — no replica queue, nobody waiting, no request since the
    /// last report — is left out: ten thousand revisions at zero cost a pass over the map
    /// and nothing else (no sample, no allocation), and an absent revision is "no data" to
    /// the KPA, as an empty one would be.
    pub fn report(&self, now: Instant, last: &mut HashMap<RevisionKey, (u64, u64)>) -> Stats {
        let mut stats = Stats {
            at: Some(now),
            ..Stats::default()
        };
        let map = self.map.load();
        for b in map.values().flat_map(|m| m.values()) {
            let key = b.key();
            let known = b.known();
            let (held, requests) = (b.hold().held_total(), b.requests_total());
            let (held0, requests0) = last.get(key).copied().unwrap_or((0, 0));
            let waiting = b.hold().waiting();
            if known.is_empty() && waiting == 0 && (held, requests) == (held0, requests0) {
                continue;
            }
            for q in known {
                stats.replicas.push(ReplicaStat {
                    revision: key.clone(),
                    stat: q.report(now),
                });
            }
            stats.revisions.push(RevisionStat {
                revision: key.clone(),
                waiting,
                held: held.saturating_sub(held0),
                requests: requests.saturating_sub(requests0),
                ready_replicas: b.ready_len(),
            });
            if (held, requests) != (held0, requests0) {
                last.insert(key.clone(), (held, requests));
            }
        }
        // Counters of revisions that are gone.
        last.retain(|k, _| {
            map.get(&k.namespace)
                .is_some_and(|m| m.contains_key(&k.name))
        });
        stats
    }
}
