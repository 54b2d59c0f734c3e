//! [`Controllers`]: runs a set of reconcilers against the store until shutdown.
//!
//! How changes become work:
//!
//! 1. **Start-up resync.** Every stored object is dispatched as in step 2 (as if it had
//!    just changed), and every revision the platform still runs but the store no longer has
//!    is queued to the revision reconciler (which removes it). The list is the first batch
//!    of the store watch, which goes on from the list's resourceVersion, so nothing
//!    committed meanwhile is missed (replaying a change twice is harmless: reconcilers are
//!    level-based).
//! 2. **Store events** (a [`wisp_store::Watch`] of every kind: the list of step 1, then
//!    every change in order, in batches). For each event: the [`Observer`]s see it first;
//!    then (a) the object's own key goes to the reconcilers of its kind; (b) each owner
//!    reference, and the `serving.knative.dev/{service,configuration,route}` labels on a
//!    direct child (see [`label_names_parent`]), queue the owner's key to the owner kind's
//!    reconcilers, so a child's change re-reconciles its parent; (c) each reconciler's
//!    [`Reconciler::watches`] may add keys of its own kind. If the log was compacted past
//!    our position (`Gone`), the watch re-lists and the list is handled as in step 1.
//! 3. **Platform changes**: the revision key goes to the PodAutoscaler and Revision
//!    reconcilers; if the broadcast lagged, every revision is resynced.
//!    **Autoscaling wake-ups** ([`crate::autoscaling::Scaling::subscribe`]: the activator
//!    poked a revision at zero, or the KPA decided a new replica count) go to the
//!    PodAutoscaler *and* Revision reconcilers at once.
//! 4. **Periodic resync** every [`RESYNC_PERIOD`], a cheap safety net.
//!
//! Each reconciler has its own [`WorkQueue`] and [`DEFAULT_WORKERS`] workers. A worker takes
//! a key, runs `reconcile` on the reconcile thread ([`crate::executor`]: one thread for
//! all reconcilers, running what is queued in store batches), and then:
//! `Done` ⇒ forget the back-off; `RequeueAfter(d)` ⇒ forget and re-add after `d`; an error
//! ⇒ log it and re-add with back-off. On shutdown no new key is taken; reconciles already
//! running finish before [`Controllers::run`] returns.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::Arc,
    time::Duration,
};

use serde::Deserialize;
use tokio::{sync::broadcast::error::RecvError, task::JoinHandle};
use tracing::{debug, error, info, warn};
use wisp_api::kinds::{self, ResourceKind};
use wisp_api::meta::ObjectMeta;
use wisp_runtime::RevisionKey;
use wisp_store::{
    EventType, ListCause, OnGone, RawEvent, StoreError, Watch, WatchBatch, WatchSpec,
};

use crate::{
    executor::{Executor, Outcome},
    names::label,
    reconciler::{
        Action, Context, Event, ObjectRef, Observer, OwnWrite, ReconcileError, Reconciler, resource,
    },
    workqueue::{RESYNC, Why, WorkQueue},
};

/// How often everything is re-queued even without changes: Knative's controllers'
/// `DefaultResyncPeriod` (`knative.dev/pkg/controller/controller.go`), 10 hours. Every
/// change already reaches its reconcilers through the store watch; with 10,000 services a
/// resync reconciles 50,000 objects (about 12 s of CPU), which every 5 minutes was 4 % of
/// a core on an idle server.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10 * 60 * 60);
/// Reconciles in flight per reconciler (never two for the same key). They all run on the
/// one reconcile thread; what several workers buy is a queue there, so that a burst (1,000
/// services at once) runs in full store batches (up to 64 reconciles, one commit) instead
/// of a commit per handful: with 4, a batch held at most 4 keys of each kind, and a key
/// queued behind a thousand others waited seconds for its first look.
pub const DEFAULT_WORKERS: usize = 16;
/// Events read from the store per batch.
const EVENT_BATCH: usize = 500;
/// Pause before retrying after the store failed to answer the watch.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// The reconcilers to run and the observers to feed (see [`Observer`]).
#[derive(Clone, Default)]
pub struct Reconcilers {
    pub reconcilers: Vec<Arc<dyn Reconciler>>,
    pub observers: Vec<Arc<dyn Observer>>,
}

impl From<Vec<Arc<dyn Reconciler>>> for Reconcilers {
    fn from(reconcilers: Vec<Arc<dyn Reconciler>>) -> Self {
        Reconcilers {
            reconcilers,
            observers: Vec::new(),
        }
    }
}

/// A set of reconcilers and the machinery that drives them.
pub struct Controllers {
    ctx: Context,
    reconcilers: Vec<Arc<dyn Reconciler>>,
    observers: Vec<Arc<dyn Observer>>,
    workers: usize,
    resync_period: Duration,
    resync_on: Option<tokio::sync::watch::Receiver<u64>>,
}

impl std::fmt::Debug for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<_> = self.reconcilers.iter().map(|r| r.kind().kind).collect();
        f.debug_struct("Controllers")
            .field("reconcilers", &kinds)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Controllers {
    pub fn new(ctx: Context, reconcilers: impl Into<Reconcilers>) -> Self {
        let Reconcilers {
            reconcilers,
            observers,
        } = reconcilers.into();
        Controllers {
            ctx,
            reconcilers,
            observers,
            workers: DEFAULT_WORKERS,
            resync_period: RESYNC_PERIOD,
            resync_on: None,
        }
    }

    /// Resyncs everything each time `changes` changes: what every reconcile reads besides
    /// its objects (the live configuration) changed, as Knative's controllers resync when
    /// their config store is updated.
    pub fn resync_on(mut self, changes: tokio::sync::watch::Receiver<u64>) -> Self {
        self.resync_on = Some(changes);
        self
    }

    /// Concurrent workers per reconciler (at least 1).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Period of the safety-net resync.
    pub fn with_resync_period(mut self, period: Duration) -> Self {
        self.resync_period = period;
        self
    }

    /// Runs until `shutdown` completes, then stops taking keys and waits for the reconciles
    /// in flight.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let router = Arc::new(Router::new(
            self.ctx.clone(),
            &self.reconcilers,
            self.observers.clone(),
        ));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

        // Subscribe before the initial list so no platform change falls in between.
        let platform_changes = self.ctx.platform.changes();
        let scaling_wakes = self.ctx.scaling.subscribe();
        let watch = tokio::spawn(watch_store(router.clone(), stop_rx.clone()));
        let platform = tokio::spawn(watch_platform(
            router.clone(),
            platform_changes,
            stop_rx.clone(),
        ));
        let scaling = tokio::spawn(watch_scaling(
            router.clone(),
            scaling_wakes,
            stop_rx.clone(),
        ));
        let resync = tokio::spawn(periodic_resync(
            router.clone(),
            self.resync_period,
            self.resync_on.clone(),
            stop_rx,
        ));

        let executor = match Executor::start(self.ctx.store.clone()) {
            Ok(e) => e,
            Err(e) => {
                error!(error = %e, "cannot start the reconcile thread; controllers not running");
                let _ = stop_tx.send(true);
                return;
            }
        };
        let mut workers: Vec<JoinHandle<()>> = Vec::new();
        for (r, q) in &router.queues {
            for _ in 0..self.workers {
                workers.push(tokio::spawn(worker(
                    self.ctx.clone(),
                    executor.clone(),
                    r.clone(),
                    q.clone(),
                )));
            }
        }
        drop(executor);
        info!(
            reconcilers = router.queues.len(),
            workers = self.workers,
            "controllers started"
        );

        shutdown.await;
        info!("controllers stopping");
        let _ = stop_tx.send(true);
        for (_, q) in &router.queues {
            q.shutdown();
        }
        for h in [watch, platform, scaling, resync]
            .into_iter()
            .chain(workers)
        {
            if let Err(e) = h.await {
                error!(error = %e, "controller task failed");
            }
        }
        info!("controllers stopped");
    }
}

/// Labels that name an object's parent, and the parent's kind.
const LABELLED_PARENTS: [(&str, &ResourceKind); 3] = [
    (label::SERVICE, &kinds::SERVICE),
    (label::CONFIGURATION, &kinds::CONFIGURATION),
    (label::ROUTE, &kinds::ROUTE),
];

/// Whether an event of `kind` carrying `lbl` re-queues the parent it names. Knative's
/// Service and Configuration controllers watch only their direct children: a Service's
/// status is made of its Configuration's and Route's, a Configuration's of its Revisions'.
/// Revisions and PodAutoscalers also carry the Service label (and PodAutoscalers the
/// Configuration one), but re-reconciling the Service on each of their ~11 writes per
/// service only re-read three objects to find nothing changed: a fifth of the reconciles
/// while 100 services start.
fn label_names_parent(lbl: &str, kind: &ResourceKind) -> bool {
    match lbl {
        label::SERVICE => *kind == kinds::CONFIGURATION || *kind == kinds::ROUTE,
        label::CONFIGURATION => *kind == kinds::REVISION,
        _ => true,
    }
}

/// Turns changes into keys on the right queues.
/// The kinds the runner watches: Knative's, and the Secrets and ConfigMaps revisions read
/// (their events reach reconcilers only through `watches`; nothing reconciles them).
const WATCHED: [&ResourceKind; 9] = [
    kinds::ALL[0],
    kinds::ALL[1],
    kinds::ALL[2],
    kinds::ALL[3],
    kinds::ALL[4],
    kinds::ALL[5],
    kinds::ALL[6],
    &kinds::SECRET,
    &kinds::CONFIG_MAP,
];

struct Router {
    ctx: Context,
    /// One queue per reconciler, in registration order.
    queues: Vec<(Arc<dyn Reconciler>, WorkQueue<ObjectRef>)>,
    observers: Vec<Arc<dyn Observer>>,
    /// Store resource string → the kind.
    kinds: HashMap<String, &'static ResourceKind>,
}

impl Router {
    fn new(
        ctx: Context,
        reconcilers: &[Arc<dyn Reconciler>],
        observers: Vec<Arc<dyn Observer>>,
    ) -> Self {
        Router {
            ctx,
            queues: reconcilers
                .iter()
                .map(|r| (r.clone(), WorkQueue::named(&r.name())))
                .collect(),
            observers,
            kinds: WATCHED.iter().map(|k| (resource(k), *k)).collect(),
        }
    }

    /// Queues `key` to every reconciler of its kind, saying why.
    fn enqueue(&self, key: &ObjectRef, why: Why) {
        self.enqueue_unless(key, why, None);
    }

    /// [`enqueue`](Self::enqueue), but not to the reconciler whose own write the event
    /// is, if `key` is what it was reconciling (see [`OwnWrites`](crate::reconciler::OwnWrites)).
    fn enqueue_unless(&self, key: &ObjectRef, why: Why, own: Option<&OwnWrite>) {
        if key.name.is_empty() {
            return;
        }
        for (r, q) in &self.queues {
            if r.kind() == key.kind && !own.is_some_and(|w| w.skips(r.id(), key)) {
                add(r.as_ref(), q, key.clone(), why);
            }
        }
    }

    fn has_reconciler_for(&self, kind: &ResourceKind) -> bool {
        self.queues.iter().any(|(r, _)| r.kind() == kind)
    }

    /// Everything one store event implies (see the module doc, step 2); `why` the object's
    /// own key is queued (a change, or a resync). Returns that key (None when the
    /// object's metadata does not decode).
    fn dispatch(
        &self,
        kind: &'static ResourceKind,
        obj: &serde_json::Value,
        deleted: bool,
        why: Why,
    ) -> Option<ObjectRef> {
        let meta = match ObjectMeta::deserialize(&obj["metadata"]) {
            Ok(meta) => meta,
            Err(e) => {
                error!(kind = kind.kind, error = %e, "stored object with bad metadata; skipped");
                return None;
            }
        };
        let event = Event {
            kind,
            meta: &meta,
            object: obj,
            deleted,
        };
        // Observers first: a watch answering for this event must see them as of it.
        for o in &self.observers {
            o.observe(&event);
        }
        let own = event.object_ref();
        // Not back to the reconciler whose write this event is (see `OwnWrites`).
        let writer = (why != RESYNC)
            .then(|| self.ctx.own_writes.take(kind, &meta))
            .flatten();
        let writer = writer.as_ref();
        self.enqueue_unless(&own, why, writer);
        // What a resync fans out to is resync work too (it waits behind changes).
        let fan = |w: Why| if why == RESYNC { RESYNC } else { w };

        for o in &meta.owner_references {
            let group = o.api_version.split_once('/').map_or("", |(g, _)| g);
            if let Some(k) = kinds::ALL
                .into_iter()
                .find(|k| k.kind == o.kind && k.group == group)
            {
                self.enqueue_unless(&event.sibling(k, &o.name), fan("child changed"), writer);
            }
        }
        for (lbl, k) in LABELLED_PARENTS {
            if let Some(v) = meta.labels.get(lbl)
                && label_names_parent(lbl, kind)
            {
                self.enqueue_unless(&event.sibling(k, v), fan("labelled child changed"), writer);
            }
        }
        for (r, q) in &self.queues {
            // A bug in one reconciler's `watches` must not stop the watch for everyone.
            let extra = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                r.watches(&self.ctx, &event)
            }));
            match extra {
                Ok(keys) => {
                    for k in keys {
                        debug_assert!(k.kind == r.kind(), "watches() returned another kind");
                        if !writer.is_some_and(|w| w.skips(r.id(), &k)) {
                            add(r.as_ref(), q, k, fan("watched"));
                        }
                    }
                }
                Err(_) => error!(
                    kind = r.kind().kind,
                    "watches() panicked; event skipped for it"
                ),
            }
        }
        Some(own)
    }

    fn dispatch_event(&self, ev: &RawEvent) {
        if let Some(kind) = self.kinds.get(&ev.resource)
            && let Some(object) = parsed(kind, &ev.object)
        {
            let deleted = ev.event_type == EventType::Deleted;
            self.dispatch(kind, &object, deleted, "changed");
        }
    }

    /// Dispatches every stored object as if it had just changed (so owners, labels and
    /// watches fan out as for an event), and queues every platform revision the store does
    /// not know.
    fn resync_all(&self) -> Result<(), StoreError> {
        let mut n = 0;
        for kind in WATCHED {
            n += self.resync_kind(kind)?;
        }
        debug!(objects = n, "full resync");
        Ok(())
    }

    /// [`Router::resynced`] for a fresh list of `kind`. Returns how many objects there were.
    fn resync_kind(&self, kind: &'static ResourceKind) -> Result<usize, StoreError> {
        // Texts, parsed one at a time as dispatched (as in `listed`): the periodic resync's
        // list of 10 000 revisions held parsed at once peaked RSS at 410 MiB, and left it
        // 30 MiB higher.
        let (texts, _) = self.ctx.store.list_raw(&resource(kind), None, None)?;
        self.resynced(kind, texts.iter().filter_map(|t| parsed(kind, t)));
        Ok(texts.len())
    }

    /// Dispatches every object of a list of `kind`; for revisions also queues the platform
    /// leftovers.
    fn resynced<V: std::borrow::Borrow<serde_json::Value>>(
        &self,
        kind: &'static ResourceKind,
        items: impl IntoIterator<Item = V>,
    ) {
        let keys: HashSet<ObjectRef> = items
            .into_iter()
            .filter_map(|item| self.dispatch(kind, item.borrow(), false, RESYNC))
            .collect();
        if kind == &kinds::REVISION && self.has_reconciler_for(kind) {
            // Replicas of revisions deleted while we were not watching (or before a
            // restart): the revision reconciler removes what the store does not have.
            for RevisionKey { namespace, name } in self.ctx.platform.revisions() {
                let key = ObjectRef::new(kind, namespace, name);
                if !keys.contains(&key) {
                    debug!(revision = %key, "platform revision unknown to the store");
                    self.enqueue(&key, "platform leftover");
                }
            }
        }
    }

    /// A list from the store watch (start-up, or after the log was compacted past us): every
    /// kind's objects through [`Router::resynced`], kinds with no object included.
    fn listed(&self, events: &[RawEvent]) {
        // Writes recorded before the list may never come as events of their own.
        self.ctx.own_writes.clear();
        for kind in WATCHED {
            let res = resource(kind);
            // Parsed one at a time, as dispatched: a restart lists every object, and
            // holding them all parsed at once took about nine times their text (0.8 GiB
            // with 10 000 services).
            let items = events
                .iter()
                .filter(|e| e.resource == res)
                .filter_map(|e| parsed(kind, &e.object));
            self.resynced(kind, items);
        }
        debug!(objects = events.len(), "full resync");
    }
}

/// A watched object's JSON (None, logged, when the store holds text that does not parse).
fn parsed(kind: &ResourceKind, text: &str) -> Option<serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(object) => Some(object),
        Err(e) => {
            error!(kind = kind.kind, error = %e, "stored object is not JSON; skipped");
            None
        }
    }
}

/// Runs a blocking closure over the router on the blocking pool.
async fn blocking<T: Send + 'static>(
    router: &Arc<Router>,
    f: impl FnOnce(&Router) -> T + Send + 'static,
) -> T {
    let router = router.clone();
    router.ctx.store.clone().blocking(move |_| f(&router)).await
}

/// Starts the store watch from a fresh list, retrying until the store answers (or we are
/// told to stop).
async fn start_watch(
    router: &Router,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<Watch<RawEvent>> {
    let resources = WATCHED.iter().map(|k| resource(k));
    let spec = WatchSpec::new(resources)
        .on_gone(OnGone::Relist)
        .batch(EVENT_BATCH);
    loop {
        match router.ctx.store.watch(spec.clone()).await {
            Ok(w) => return Some(w),
            Err(e) => {
                warn!(error = %e, "listing the store failed; retrying");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return None,
                    _ = tokio::time::sleep(WATCH_RETRY) => {}
                }
            }
        }
    }
}

/// The store watch (module doc, steps 1 and 2).
async fn watch_store(router: Arc<Router>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(mut watch) = start_watch(&router, &mut stop).await else {
        return;
    };
    loop {
        let batch = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            b = watch.next() => b,
        };
        // Dispatched on the blocking pool: `watches` may read the store.
        match batch {
            Ok(WatchBatch::Listed { events, cause, .. }) => {
                if let ListCause::Gone { requested, oldest } = cause {
                    warn!(requested, oldest, "watch position compacted away; resynced");
                }
                blocking(&router, move |r| r.listed(&events)).await;
            }
            Ok(WatchBatch::Changed(events)) => {
                blocking(&router, move |r| {
                    for ev in &events {
                        r.dispatch_event(ev);
                    }
                })
                .await;
            }
            Err(e) => {
                warn!(error = %e, "reading store events failed; retrying");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tokio::time::sleep(WATCH_RETRY) => {}
                }
            }
        }
    }
}

/// Platform replica changes → revision keys (module doc, step 3).
async fn watch_platform(
    router: Arc<Router>,
    mut changes: tokio::sync::broadcast::Receiver<RevisionKey>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let change = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            c = changes.recv() => c,
        };
        match change {
            Ok(k) => {
                // The PodAutoscaler counts the replicas too (Knative's KPA hears of them
                // through its SKS's endpoints): the revision turns Ready once the PA says
                // its scale target was initialized.
                let key = ObjectRef::new(&kinds::REVISION, k.namespace, k.name);
                router.enqueue(&key.with_kind(&kinds::POD_AUTOSCALER), "replicas changed");
                router.enqueue(&key, "replicas changed");
            }
            Err(RecvError::Lagged(n)) => {
                warn!(missed = n, "platform changes lagged; resyncing revisions");
                if let Err(e) = blocking(&router, |r| r.resync_kind(&kinds::REVISION)).await {
                    warn!(error = %e, "revision resync failed");
                }
            }
            Err(RecvError::Closed) => {
                debug!("platform change stream closed");
                return;
            }
        }
    }
}

/// Autoscaling wake-ups → PodAutoscaler and Revision keys (module doc, step 3).
async fn watch_scaling(
    router: Arc<Router>,
    mut wakes: tokio::sync::broadcast::Receiver<RevisionKey>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let wake = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            w = wakes.recv() => w,
        };
        match wake {
            Ok(k) => {
                let rev = ObjectRef::new(&kinds::REVISION, k.namespace, k.name);
                router.enqueue(&rev.with_kind(&kinds::POD_AUTOSCALER), "scaling");
                router.enqueue(&rev, "scaling");
            }
            Err(RecvError::Lagged(n)) => {
                warn!(missed = n, "autoscaling wake-ups lagged; resyncing");
                for kind in [&kinds::POD_AUTOSCALER, &kinds::REVISION] {
                    if let Err(e) = blocking(&router, move |r| r.resync_kind(kind)).await {
                        warn!(error = %e, "resync after lagged wake-ups failed");
                    }
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// The safety-net resync (module doc, step 4), and one on each change of `changes`.
async fn periodic_resync(
    router: Arc<Router>,
    period: Duration,
    mut changes: Option<tokio::sync::watch::Receiver<u64>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let start = tokio::time::Instant::now() + period;
    let mut tick = tokio::time::interval_at(start, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let changed = async {
            match changes.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        // The sender is gone: no more changes to wait for.
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
            _ = changed => debug!("configuration changed: resyncing"),
        }
        if let Err(e) = blocking(&router, |r| r.resync_all()).await {
            warn!(error = %e, "periodic resync failed");
        }
    }
}

/// One worker of one reconciler.
async fn worker(
    ctx: Context,
    exec: Executor,
    reconciler: Arc<dyn Reconciler>,
    queue: WorkQueue<ObjectRef>,
) {
    let kind = reconciler.kind().kind;
    while let Some((k, why)) = queue.get_why().await {
        let retries = queue.num_requeues(&k);
        // What happens during the reconcile (store writes, platform calls) is logged
        // inside this span; `why` says what queued it, `retries` how often it failed.
        let span = tracing::debug_span!(
            "reconcile",
            kind,
            namespace = %k.namespace,
            name = %k.name,
            why,
            retries
        );
        let (r, c, key) = (reconciler.clone(), ctx.clone(), k.clone());
        let cpu = queue.metrics().map(|m| m.cpu.clone());
        let started = std::time::Instant::now();
        let outcome = exec
            .run(move || {
                let reconcile = || span.in_scope(|| r.reconcile(&c, &key));
                match &cpu {
                    Some(cpu) => wisp_metrics::count_cpu(cpu, reconcile),
                    None => reconcile(),
                }
            })
            .await;
        if let Some(m) = queue.metrics() {
            m.process.observe(started.elapsed());
            if !matches!(outcome, Outcome::Returned(Ok(_))) {
                m.errors.inc();
            }
        }
        match outcome {
            Outcome::Returned(Ok(Action::Done)) => queue.forget(&k),
            Outcome::Returned(Ok(Action::RequeueAfter(d))) => {
                queue.forget(&k);
                queue.add_after(k.clone(), d);
            }
            Outcome::Returned(Err(e)) => {
                if is_conflict(&e) {
                    debug!(kind, key = %k, retries, error = %e, "reconcile conflict; retrying");
                } else {
                    warn!(kind, key = %k, retries, error = %e, "reconcile failed; retrying");
                }
                queue.add_rate_limited(k.clone());
            }
            Outcome::Panicked => {
                error!(kind, key = %k, "reconcile panicked; retrying");
                queue.add_rate_limited(k.clone());
            }
        }
        queue.done(&k);
    }
}

fn is_conflict(e: &ReconcileError) -> bool {
    matches!(e, ReconcileError::Store(s) if s.is_conflict())
}

/// Queues `key` to `r`'s queue for an event: at once, or after `r`'s
/// [`settle`](Reconciler::settle) time (a resync never waits).
fn add(r: &dyn Reconciler, q: &WorkQueue<ObjectRef>, key: ObjectRef, why: Why) {
    match r.settle() {
        Some(delay) if why != RESYNC => q.add_settled(key, delay, why),
        _ => q.add_why(key, why),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use wisp_api::{
        meta::ConditionStatus,
        serving::{Configuration, Revision},
    };
    use wisp_store::Options;

    use super::*;
    use crate::{
        configuration::ConfigurationReconciler,
        objects,
        revision::RevisionReconciler,
        testing::{self, FakePlatform, PlatformCall},
    };

    /// Polls `check` every 10 ms for up to 5 s.
    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !check() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts `Controllers::run`; returns the handle and the shutdown trigger.
    fn start(
        ctx: &Context,
        reconcilers: Vec<Arc<dyn Reconciler>>,
    ) -> (JoinHandle<()>, tokio::sync::oneshot::Sender<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let controllers = Controllers::new(ctx.clone(), reconcilers);
        let h = tokio::spawn(controllers.run(async {
            let _ = rx.await;
        }));
        (h, tx)
    }

    async fn stop(h: JoinHandle<()>, tx: tokio::sync::oneshot::Sender<()>) {
        let _ = tx.send(());
        tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .expect("runner stops after shutdown")
            .unwrap();
    }

    fn config_ready(ctx: &Context, name: &str) -> bool {
        objects::get::<Configuration>(&ctx.store, "default", name)
            .unwrap()
            .and_then(|c| c.status)
            .is_some_and(|s| {
                crate::conditions::is_true(&s.status, "Ready")
                    && s.latest_ready_revision_name == format!("{name}-00001")
            })
    }

    fn serving() -> Vec<Arc<dyn Reconciler>> {
        vec![
            Arc::new(ConfigurationReconciler),
            Arc::new(RevisionReconciler::default()),
        ]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn configuration_becomes_ready_end_to_end() {
        let (ctx, platform) = testing::test_context();
        platform.set_auto_ready(true);
        let (h, tx) = start(&ctx, serving());
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        eventually("configuration Ready", || config_ready(&ctx, "hello")).await;
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        let ready = rev
            .status
            .unwrap()
            .status
            .condition("Ready")
            .unwrap()
            .status;
        assert_eq!(ready, ConditionStatus::True);
        stop(h, tx).await;

        // After shutdown nothing is reconciled any more.
        testing::insert(&ctx, &testing::configuration("default", "late", "img"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            objects::get::<Revision>(&ctx.store, "default", "late-00001")
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn platform_changes_drive_revision_status() {
        let (ctx, platform) = testing::test_context();
        let (h, tx) = start(&ctx, serving());
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        let key = RevisionKey::new("default", "hello-00001");
        eventually("scaled", || platform.scale_of(&key) == Some(1)).await;
        let status = || {
            objects::get::<Revision>(&ctx.store, "default", "hello-00001")
                .unwrap()
                .and_then(|r| r.status)
        };
        // In progress, the new revision's first status waits (the test clock stands still).
        assert!(status().is_none());
        platform.set_replicas(
            &key,
            vec![testing::replica("r1", wisp_runtime::ReplicaPhase::Ready)],
        );
        eventually("configuration Ready", || config_ready(&ctx, "hello")).await;
        assert!(crate::conditions::is_true(
            &status().unwrap().status,
            "Ready"
        ));

        // Deleting the configuration cascades to the revision, whose replicas go away.
        objects::delete::<Configuration>(&ctx.store, "default", "hello", None).unwrap();
        eventually("removed", || {
            platform
                .calls()
                .contains(&PlatformCall::Remove(key.clone()))
        })
        .await;
        stop(h, tx).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn startup_removes_platform_leftovers() {
        let (ctx, platform) = testing::test_context();
        let orphan = RevisionKey::new("default", "gone-00001");
        platform.add_orphan(&orphan);
        let (h, tx) = start(&ctx, serving());
        eventually("orphan removed", || {
            platform
                .calls()
                .contains(&PlatformCall::Remove(orphan.clone()))
        })
        .await;
        stop(h, tx).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_periodic_resync_reads_every_stored_revision() {
        let (ctx, platform) = testing::test_context();
        platform.set_auto_ready(true);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let controllers =
            Controllers::new(ctx.clone(), serving()).with_resync_period(Duration::from_millis(100));
        let h = tokio::spawn(controllers.run(async {
            let _ = rx.await;
        }));
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        eventually("configuration Ready", || config_ready(&ctx, "hello")).await;
        // Only a resync finds replicas of a revision the store does not have: the one it
        // read from the store (from its text) stays, the orphan goes.
        let orphan = RevisionKey::new("default", "gone-00001");
        platform.add_orphan(&orphan);
        eventually("orphan removed by the periodic resync", || {
            platform
                .calls()
                .contains(&PlatformCall::Remove(orphan.clone()))
        })
        .await;
        let kept = RevisionKey::new("default", "hello-00001");
        assert!(!platform.calls().contains(&PlatformCall::Remove(kept)));
        stop(h, tx).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compacted_watch_resyncs_and_misses_nothing() {
        // An event log of one entry: the watch falls behind constantly and must resync.
        let store = wisp_store::Store::open_in_memory_with(Options {
            event_history: 1,
            clock: testing::test_clock,
            ..Options::default()
        })
        .unwrap();
        let (mut ctx, platform) = testing::test_context();
        ctx.store = store;
        platform.set_auto_ready(true);
        let (h, tx) = start(&ctx, serving());
        let names: Vec<String> = (0..6).map(|i| format!("cfg{i}")).collect();
        for n in &names {
            testing::insert(&ctx, &testing::configuration("default", n, "img"));
        }
        eventually("all ready", || names.iter().all(|n| config_ready(&ctx, n))).await;
        stop(h, tx).await;
    }

    /// Records the keys it reconciles; watches configurations on behalf of routes.
    struct RouteRecorder {
        seen: Mutex<Vec<String>>,
    }

    impl Reconciler for RouteRecorder {
        fn kind(&self) -> &'static ResourceKind {
            &kinds::ROUTE
        }
        fn reconcile(&self, _: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
            self.seen.lock().unwrap().push(key.to_string());
            Ok(Action::Done)
        }
        fn watches(&self, _: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
            if event.kind == &kinds::CONFIGURATION {
                vec![event.sibling(&kinds::ROUTE, "watcher")]
            } else {
                Vec::new()
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_fan_out_to_owners_labels_and_watches() {
        let (ctx, _) = testing::test_context();
        let recorder = Arc::new(RouteRecorder {
            seen: Mutex::default(),
        });
        let (h, tx) = start(&ctx, vec![recorder.clone()]);
        let seen = |k: &str| recorder.seen.lock().unwrap().iter().any(|s| s == k);

        // (c) a reconciler's own watch.
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        eventually("watch fan-out", || seen("default/watcher")).await;

        // (b) a label naming a route.
        let mut rev = testing::revision("default", "rev-1", "hello", 1);
        rev.metadata
            .labels
            .insert(crate::names::label::ROUTE.into(), "labelled".into());
        testing::insert(&ctx, &rev);
        eventually("label fan-out", || seen("default/labelled")).await;

        // (b) an owner reference to a route.
        let owner = testing::insert(&ctx, &testing::route("default", "owner", vec![]));
        eventually("own key", || seen("default/owner")).await;
        recorder.seen.lock().unwrap().clear();
        let mut child = testing::configuration("default", "child", "img");
        child
            .metadata
            .owner_references
            .push(objects::owner_reference(&kinds::ROUTE, &owner.metadata));
        testing::insert(&ctx, &child);
        eventually("owner fan-out", || seen("default/owner")).await;
        stop(h, tx).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcilers_own_status_write_does_not_queue_it_again() {
        let (ctx, _) = testing::test_context();
        // Two reconcilers of configurations: the configuration reconciler and the GC.
        let both: Vec<Arc<dyn Reconciler>> = crate::all_reconcilers()
            .reconcilers
            .into_iter()
            .filter(|r| r.kind() == &kinds::CONFIGURATION)
            .collect();
        assert_eq!(both.len(), 2);
        let router = Router::new(ctx.clone(), &both, Vec::new());
        let writer = both[0].id();
        let cfg = testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        let at = |rv: &str| {
            let mut c = cfg.clone();
            c.metadata.resource_version = rv.into();
            c
        };
        // Ready or settling (the GC waits a moment: `Reconciler::settle`).
        async fn queued(router: &Router) -> Vec<usize> {
            let lens = router.queues.iter().map(|(_, q)| q.pending()).collect();
            for (_, q) in &router.queues {
                while q.pending() > 0 {
                    let key = q.get().await.unwrap();
                    q.done(&key);
                }
            }
            lens
        }
        // (what the writer wrote, the event's resourceVersion, why, queued to each)
        let cases = [
            ("its own write", Some("8"), "8", "changed", [0, 1]),
            ("nothing recorded", None, "9", "changed", [1, 1]),
            ("a later version", Some("10"), "11", "changed", [1, 1]),
            ("a resync", Some("12"), "12", RESYNC, [1, 1]),
        ];
        for (what, wrote, event_rv, why, want) in cases {
            if let Some(rv) = wrote {
                ctx.own_writes
                    .record(&kinds::CONFIGURATION, &cfg.metadata, rv.into(), writer);
            }
            let obj = objects::encode(&at(event_rv)).unwrap();
            router.dispatch(&kinds::CONFIGURATION, &obj, false, why);
            assert_eq!(queued(&router).await, want, "{what}");
        }
        // A resync leaves the record: the write's own event, coming after, still is skipped.
        let obj = objects::encode(&at("12")).unwrap();
        router.dispatch(&kinds::CONFIGURATION, &obj, false, "changed");
        assert_eq!(queued(&router).await, [0, 1]);
    }

    #[tokio::test]
    async fn a_child_a_reconciler_wrote_does_not_queue_its_owner_to_it_again() {
        let (ctx, _) = testing::test_context();
        let all = crate::all_reconcilers().reconcilers;
        let router = Router::new(ctx.clone(), &all, Vec::new());
        async fn queued(router: &Router, kind: &ResourceKind) -> Vec<String> {
            let (_, q) = router
                .queues
                .iter()
                .find(|(r, _)| r.kind() == kind)
                .unwrap();
            let mut keys = Vec::new();
            while !q.is_empty() {
                let k = q.get().await.unwrap();
                q.done(&k);
                keys.push(k.to_string());
            }
            keys
        }
        let svc = testing::insert(&ctx, &testing::service("default", "hello", "img"));
        let mut cfg = testing::configuration("default", "hello", "img");
        cfg.metadata
            .owner_references
            .push(objects::owner_reference(&kinds::SERVICE, &svc.metadata));
        cfg.metadata
            .labels
            .insert(label::SERVICE.into(), "hello".into());
        let cfg = testing::insert(&ctx, &cfg);
        let service_reconciler = all.iter().find(|r| r.kind() == &kinds::SERVICE).unwrap();
        // (what was recorded, the keys the event queues to the Service reconciler)
        let cases: [(&str, Option<&str>, &[&str]); 3] = [
            (
                "created by the service reconciler for it",
                Some("hello"),
                &[],
            ),
            (
                "written for another service",
                Some("other"),
                &["default/hello"],
            ),
            ("nothing recorded", None, &["default/hello"]),
        ];
        for (what, reconciling, want) in cases {
            if let Some(name) = reconciling {
                ctx.own_writes.wrote(
                    &kinds::CONFIGURATION,
                    &cfg.metadata,
                    service_reconciler.id(),
                    ObjectRef::new(&kinds::SERVICE, "default", name),
                );
            }
            let obj = objects::encode(&cfg).unwrap();
            router.dispatch(&kinds::CONFIGURATION, &obj, false, "changed");
            assert_eq!(queued(&router, &kinds::SERVICE).await, want, "{what}");
            // The Configuration's own reconciler gets it whoever wrote it.
            let cfgs = queued(&router, &kinds::CONFIGURATION).await;
            assert_eq!(cfgs, ["default/hello"], "{what}");
        }
    }

    #[test]
    fn queue_names_are_the_reconcilers_types() {
        let names: Vec<String> = crate::all_reconcilers()
            .reconcilers
            .iter()
            .map(|r| r.name())
            .collect();
        assert_eq!(
            names,
            [
                "service",
                "configuration",
                "revision",
                "podautoscaler",
                "route",
                "labeler",
                "gc",
                "domainmapping"
            ]
        );
    }

    #[test]
    fn labels_requeue_only_direct_parents() {
        for (lbl, kind, requeued) in [
            (label::SERVICE, &kinds::CONFIGURATION, true),
            (label::SERVICE, &kinds::ROUTE, true),
            (label::SERVICE, &kinds::REVISION, false),
            (label::SERVICE, &kinds::POD_AUTOSCALER, false),
            (label::CONFIGURATION, &kinds::REVISION, true),
            (label::CONFIGURATION, &kinds::POD_AUTOSCALER, false),
            (label::ROUTE, &kinds::REVISION, true),
        ] {
            assert_eq!(
                label_names_parent(lbl, kind),
                requeued,
                "{lbl} on a {}",
                kind.kind
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn errors_are_retried_with_backoff() {
        struct Flaky {
            calls: Mutex<u32>,
        }
        impl Reconciler for Flaky {
            fn kind(&self) -> &'static ResourceKind {
                &kinds::CONFIGURATION
            }
            fn reconcile(&self, _: &Context, _: &ObjectRef) -> Result<Action, ReconcileError> {
                let mut n = self.calls.lock().unwrap();
                *n += 1;
                if *n < 4 {
                    Err(ReconcileError::Other("not yet".into()))
                } else {
                    Ok(Action::Done)
                }
            }
        }
        let (ctx, _) = testing::test_context();
        let flaky = Arc::new(Flaky {
            calls: Mutex::new(0),
        });
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        let (h, tx) = start(&ctx, vec![flaky.clone()]);
        eventually("four attempts", || *flaky.calls.lock().unwrap() >= 4).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(*flaky.calls.lock().unwrap(), 4, "no retries after success");
        stop(h, tx).await;
    }

    #[test]
    fn fake_platform_is_a_platform() {
        // Compile-time check that the fake fits the seam the runner uses.
        let p: wisp_runtime::SharedPlatform = FakePlatform::new();
        assert!(p.revisions().is_empty());
    }
}
