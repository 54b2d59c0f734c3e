//! [`Scaling`]: the in-memory seam between the data plane and the KPA, shared by the
//! activator (which pokes and reads the routing mode), the stats feed (which fills the
//! collector), the PodAutoscaler reconciler (which decides) and the Revision reconciler
//! (which applies the replica count to the platform).
//!
//! - **Collector**: every revision's metric windows ([`wisp_autoscaler::Collector`]), fed
//!   once a second by `wisp serve` from the activator's and the replica queues' stats.
//! - **Poke** ([`Scaling::poke`]): the activator calls it when a request for a revision has
//!   to wait (Knative's activator sends an immediate stat for the first request to an idle
//!   revision). For a revision at zero it records that request in the collector (one
//!   concurrent request, one request) and wakes the runner, which reconciles the revision's
//!   PodAutoscaler at once; that reconcile then decides immediately instead of at the next
//!   2 s tick. Pokes for a revision that already runs replicas cost a map lookup.
//! - **Decisions** ([`Scaling::scale`]): per revision what the KPA last decided — the
//!   replicas to run (Knative's Deployment `spec.replicas`, which the KPA patches directly;
//!   the PA's `status.desiredScale` is its `want`, which is 0 while the last pod is still
//!   kept through the scale-to-zero sequence), whether the activator is in the path (the
//!   SKS Proxy/Serve mode) and the excess burst capacity. An immutable map swapped
//!   atomically: the request path reads it without a lock.
//! - **Wake-ups** ([`Scaling::subscribe`]): keys whose PodAutoscaler and Revision should be
//!   reconciled now (a poke, or a new replica count to apply).
//! - **Reports** ([`Scaling::reports`]): per revision what the KPA last observed and
//!   decided and the replicas by state ([`KpaReport`]), for `/metrics`, `wisp top` and the
//!   console; written by each PodAutoscaler reconcile, read when someone looks.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use wisp_autoscaler::{ActivatorLink, Collector, Metric, Sample};
use wisp_runtime::RevisionKey;

/// Capacity of the wake-up channel; a lagging runner resyncs every revision.
const WAKE_CAPACITY: usize = 1024;

pub use wisp_autoscaler::RoutingMode;

/// What the KPA last decided for one revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevisionScale {
    /// Replicas the revision should run now.
    pub replicas: u32,
    /// The PA's `desiredScale` (-1 while unknown).
    pub want: i32,
    pub mode: RoutingMode,
    /// Spare capacity beyond the target burst capacity (negative ⇒ Proxy).
    pub excess_burst_capacity: i32,
    /// Activators Knative would assign (informational in wisp: one in-process activator).
    pub num_activators: i32,
}

/// What the KPA last observed and decided for one revision, with its replicas by state
/// (Knative's autoscaler and KPA gauges: `kn.revision.pods.*`, `kn.revision.concurrency.*`
/// or `kn.revision.rps.*`, `kn.revision.capacity.excess`, `kn.revision.panic.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KpaReport {
    /// The scaling metric: the observed and target values are of this metric.
    pub metric: Metric,
    /// The decider's desired pods (-1 before its first decision).
    pub desired: i32,
    /// What the KPA asked of the platform: the PA's `desiredScale` (-1 while unknown).
    pub requested: i32,
    pub ready: u32,
    /// Running but not ready (readiness failing, or crash-loop back-off).
    pub not_ready: u32,
    /// Started and not yet ready once (image pull, sandbox, first probes).
    pub pending: u32,
    pub terminating: u32,
    pub excess_burst_capacity: f64,
    /// The metric's total over the stable and panic windows at the last decision.
    pub stable: f64,
    pub panic: f64,
    /// The per-replica target of the metric.
    pub target: f64,
    pub panic_mode: bool,
}

impl KpaReport {
    /// Nothing runs, nothing is wanted and nothing was seen in the windows: a revision at
    /// rest at zero.
    pub fn at_rest(&self) -> bool {
        self.ready == 0
            && self.not_ready == 0
            && self.pending == 0
            && self.terminating == 0
            && self.requested <= 0
            && self.desired <= 0
            && self.stable == 0.0
            && self.panic == 0.0
    }
}

/// foldhash, not SipHash: every proxied request looks its revision up here. A persistent
/// map: each decision published copies the map, and a copy of a whole hash map per decision
/// made 10 000 revisions' decisions quadratic.
pub type Decisions = imbl::GenericHashMap<
    RevisionKey,
    RevisionScale,
    foldhash::fast::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The shared autoscaling state of one `wisp serve` (see the module doc).
pub struct Scaling {
    clock: fn() -> DateTime<Utc>,
    collector: Mutex<Collector<RevisionKey>>,
    decisions: ArcSwap<Decisions>,
    /// Revisions poked at zero whose PA has not reconciled since.
    poked: Mutex<HashSet<RevisionKey>>,
    wake: broadcast::Sender<RevisionKey>,
    reports: Mutex<foldhash::HashMap<RevisionKey, KpaReport>>,
}

impl std::fmt::Debug for Scaling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaling")
            .field("revisions", &self.decisions.load().len())
            .finish_non_exhaustive()
    }
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling::new(Utc::now)
    }
}

/// A wall-clock time as the autoscaler's `Duration` since an epoch (the Unix epoch).
pub fn since_epoch(t: DateTime<Utc>) -> Duration {
    (t - DateTime::UNIX_EPOCH).to_std().unwrap_or_default()
}

impl Scaling {
    /// An empty registry reading time from `clock` (the controllers' `Context::clock`).
    pub fn new(clock: fn() -> DateTime<Utc>) -> Self {
        Scaling {
            clock,
            collector: Mutex::new(Collector::new()),
            decisions: ArcSwap::from_pointee(Decisions::default()),
            poked: Mutex::new(HashSet::new()),
            wake: broadcast::channel(WAKE_CAPACITY).0,
            reports: Mutex::default(),
        }
    }

    /// Records a revision's latest [`KpaReport`].
    pub fn report(&self, key: &RevisionKey, report: KpaReport) {
        wisp_sync::lock(&self.reports).insert(key.clone(), report);
    }

    /// A revision's latest report.
    pub fn report_of(&self, key: &RevisionKey) -> Option<KpaReport> {
        wisp_sync::lock(&self.reports).get(key).copied()
    }

    /// Every revision's latest report (a copy: the lock is held only while copying).
    pub fn reports(&self) -> Vec<(RevisionKey, KpaReport)> {
        self.reports_where(|_, _| true)
    }

    /// The latest reports `want` picks (only those are copied: with ten thousand revisions
    /// at rest, a sampler that wants the busy ones copies no key of the others).
    pub fn reports_where(
        &self,
        mut want: impl FnMut(&RevisionKey, &KpaReport) -> bool,
    ) -> Vec<(RevisionKey, KpaReport)> {
        wisp_sync::lock(&self.reports)
            .iter()
            .filter(|(k, r)| want(k, r))
            .map(|(k, r)| (k.clone(), *r))
            .collect()
    }

    /// Now, as the autoscaler counts time.
    pub fn now(&self) -> Duration {
        since_epoch((self.clock)())
    }

    /// The collector (locked briefly: never across an `.await`).
    pub fn collector(&self) -> MutexGuard<'_, Collector<RevisionKey>> {
        wisp_sync::lock(&self.collector)
    }

    fn poked_set(&self) -> MutexGuard<'_, HashSet<RevisionKey>> {
        wisp_sync::lock(&self.poked)
    }

    /// Records one second's report of a revision at `now` (see
    /// [`Collector::record_sample`]); ignored for a revision without a PodAutoscaler yet.
    pub fn record(&self, key: &RevisionKey, now: Duration, sample: &Sample) -> Option<f64> {
        self.collector().record_sample(key, now, sample)
    }

    /// A request for `key` has to wait: the revision has no ready replica (module doc).
    /// Returns whether this poke woke the autoscaler (it was not poked already).
    ///
    /// The activator only pokes when no replica is ready, so this does not look at the
    /// published replica count: during the scale-to-zero sequence that count can still be 1
    /// for a replica that is already stopping, and a poke ignored then would leave the
    /// request waiting for the next tick.
    pub fn poke(&self, key: &RevisionKey) -> bool {
        if !self.poked_set().insert(key.clone()) {
            return false;
        }
        // Knative's activator sends (concurrency 1, count 1) for the first request.
        let now = self.now();
        self.collector().record(key, now, 1.0);
        // No receiver (controllers not running yet) is fine: they resync at start.
        let _ = self.wake.send(key.clone());
        true
    }

    /// Whether `key` was poked since the last call (clears it).
    pub fn take_poke(&self, key: &RevisionKey) -> bool {
        self.poked_set().remove(key)
    }

    /// Keys to reconcile now (PodAutoscaler and Revision).
    pub fn subscribe(&self) -> broadcast::Receiver<RevisionKey> {
        self.wake.subscribe()
    }

    /// Asks the runner to reconcile `key` now.
    pub fn wake(&self, key: &RevisionKey) {
        let _ = self.wake.send(key.clone());
    }

    /// The KPA's last decision for a revision.
    pub fn scale(&self, key: &RevisionKey) -> Option<RevisionScale> {
        self.decisions.load().get(key).copied()
    }

    /// Every revision's last decision (a snapshot).
    pub fn decisions(&self) -> Arc<Decisions> {
        self.decisions.load_full()
    }

    /// Where requests for a revision go now: Proxy until the KPA says otherwise.
    pub fn mode(&self, key: &RevisionKey) -> RoutingMode {
        self.scale(key).map_or(RoutingMode::Proxy, |s| s.mode)
    }

    /// Publishes a decision; returns whether the replica count changed (the Revision
    /// reconciler must apply it).
    pub fn publish(&self, key: &RevisionKey, scale: RevisionScale) -> bool {
        if self.scale(key) == Some(scale) {
            return false;
        }
        let mut replicas_changed = true;
        self.decisions.rcu(|old| {
            let mut next = Decisions::clone(old);
            let prev = next.insert(key.clone(), scale);
            replicas_changed = prev.is_none_or(|p| p.replicas != scale.replicas);
            next
        });
        replicas_changed
    }

    /// Forgets a revision (it is gone).
    pub fn forget(&self, key: &RevisionKey) {
        self.collector().forget(key);
        self.poked_set().remove(key);
        wisp_sync::lock(&self.reports).remove(key);
        if self.decisions.load().contains_key(key) {
            self.decisions.rcu(|old| {
                let mut next = Decisions::clone(old);
                next.remove(key);
                next
            });
        }
    }
}

/// The activator reaches the KPA through this: the poke and the routing mode.
impl ActivatorLink<RevisionKey> for Scaling {
    fn poke(&self, revision: &RevisionKey) {
        Scaling::poke(self, revision);
    }

    fn mode(&self, revision: &RevisionKey) -> RoutingMode {
        Scaling::mode(self, revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_clock;
    use wisp_autoscaler::DeciderSpec;

    fn scale(replicas: u32) -> RevisionScale {
        RevisionScale {
            replicas,
            want: replicas as i32,
            mode: RoutingMode::Serve,
            excess_burst_capacity: 0,
            num_activators: 2,
        }
    }

    #[test]
    fn poke_at_zero_records_and_wakes_once() {
        let s = Scaling::new(test_clock);
        let k = RevisionKey::new("default", "hello-00001");
        let mut rx = s.subscribe();
        s.collector().watch(&k, &DeciderSpec::default(), s.now());
        assert_eq!(s.mode(&k), RoutingMode::Proxy, "unknown ⇒ proxy");

        assert!(s.poke(&k), "the first poke wakes");
        assert_eq!(rx.try_recv().unwrap(), k);
        assert!(!s.poke(&k), "already poked: no second wake or record");
        assert!(rx.try_recv().is_err());
        let (stable, _) = s.collector().observe(&k, s.now()).unwrap();
        assert_eq!(stable, 1.0);
        assert!(s.take_poke(&k));
        assert!(!s.take_poke(&k));

        assert!(s.publish(&k, scale(1)));
        assert!(!s.publish(&k, scale(1)), "same decision: nothing changes");
        // The activator pokes only when no replica is ready: a published count of 1 (a
        // replica still stopping in the scale-to-zero sequence) must not swallow it.
        assert!(s.poke(&k), "no ready replica, whatever was published");
        assert!(s.take_poke(&k));
        let mut other = scale(1);
        other.mode = RoutingMode::Proxy;
        assert!(!s.publish(&k, other), "mode only: replicas unchanged");
        assert_eq!(s.mode(&k), RoutingMode::Proxy);
        assert!(s.publish(&k, scale(0)));
        assert!(s.poke(&k), "back at zero");

        s.forget(&k);
        assert_eq!(s.scale(&k), None);
        assert!(!s.collector().contains(&k));
        assert!(!s.take_poke(&k));
    }

    #[test]
    fn epoch() {
        assert_eq!(
            since_epoch(test_clock()),
            Duration::from_secs(1_704_067_200)
        );
    }
}
