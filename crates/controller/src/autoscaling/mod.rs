//! The PodAutoscaler reconciler: Knative's KPA (`pkg/reconciler/autoscaling/kpa`) driving wisp's revisions.
//!
//! For every Revision it keeps a PodAutoscaler of the same name (created here, controlled
//! by the revision, so it is deleted with it) and, in memory, the revision's KPA state
//! ([`resources::KpaState`]: decider + scaler). Each reconcile:
//!
//! 1. brings the PA in line with the revision (labels, annotations, spec; reachability
//!    follows the revision's `routingState`),
//! 2. resolves the [`DeciderSpec`](wisp_autoscaler::DeciderSpec) from the PA's annotations,
//!    containerConcurrency and `config-autoscaler`,
//! 3. decides when the 2 s tick is due — the reconcile requeues itself for the next tick, so
//!    the queue *is* the ticker — or at once when the activator poked a revision at zero,
//!    reading the stable/panic averages from the collector in [`Scaling`],
//! 4. runs the scaler (bounds, initial scale, the scale-to-zero sequence, activation
//!    timeout), publishes the replica count and the routing mode in [`Scaling`] (waking the
//!    Revision reconciler when the count changed: it is the one calling `Platform::scale`),
//! 5. writes the PA status: `desiredScale`, `actualScale`, `Active`,
//!    `ScaleTargetInitialized`, `SKSReady` and `Ready` (`pkg/apis/autoscaling/v1alpha1/pa_lifecycle.go`).
//!
//! A PA of the HPA class (`autoscaling.knative.dev/class: hpa.autoscaling.knative.dev`, or
//! `pod-autoscaler-class`) takes [`hpa`]'s branch instead of 2–5: Kubernetes' HPA
//! arithmetic on its replicas' CPU or memory every `wisp-hpa-sync-period`, and the PA
//! status Knative's `hpa.go` writes.
//!
//! When the revision is gone the state is dropped (the store already cascade-deleted the
//! PA through its owner reference).

pub mod hpa;
pub mod resources;
pub mod scaling;
pub mod sks;

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use wisp_api::{
    autoscaling::PodAutoscaler,
    kinds::{self, ResourceKind},
    serving::Revision,
};
use wisp_runtime::{ReplicaPhase, RevisionKey};

use crate::{
    objects,
    reconciler::{Action, Context, Event, ObjectRef, ReconcileError, TypedReconciler},
};
pub use hpa::HpaState;
pub use resources::KpaState;
pub use scaling::{KpaReport, RevisionScale, RoutingMode, Scaling, since_epoch};
use wisp_autoscaler::HpaError;

/// Reconciles `podautoscalers.autoscaling.internal.knative.dev`.
#[derive(Debug, Default)]
pub struct PodAutoscalerReconciler {
    states: Mutex<HashMap<RevisionKey, KpaState>>,
    /// HPA-class revisions' state ([`hpa`]).
    hpa_states: Mutex<HashMap<RevisionKey, HpaState>>,
    /// What each revision's ServerlessService and Services were last made from (shared
    /// with the after-commit work that makes them).
    sks_made_from: std::sync::Arc<Mutex<HashMap<RevisionKey, SksInputs>>>,
    /// What each revision was when its PA was last reconciled ([`resources::pa_inputs`]):
    /// an event of the revision that changed none of it queues nothing (such as most of
    /// the revision's own status writes: while 1,000 services were created, PA reconciles
    /// per service went from 2.3 to 2.0).
    reconciled_from: Mutex<HashMap<RevisionKey, u64>>,
}

/// Everything a revision's ServerlessService and Services are made from: the same again
/// makes the same objects, so a KPA tick that changed none of it skips making and comparing
/// them (with 1,000 replicas running and idle, that was a fifth of wisp's CPU).
#[derive(Debug, Clone, PartialEq)]
struct SksInputs {
    /// A hash of what they are made of besides the routing state: the PA's identity,
    /// labels, annotations and protocol, and the revision's port. Not its resourceVersion,
    /// which moves with every status write of the PA (the SKS would be made again, only to
    /// compare equal, on each of them).
    made_of: u64,
    mode: RoutingMode,
    num_activators: i32,
    ready: u32,
}

impl PodAutoscalerReconciler {
    pub fn new() -> Self {
        Self::default()
    }

    fn states(&self) -> MutexGuard<'_, HashMap<RevisionKey, KpaState>> {
        wisp_sync::lock(&self.states)
    }

    fn hpa_states(&self) -> MutexGuard<'_, HashMap<RevisionKey, HpaState>> {
        wisp_sync::lock(&self.hpa_states)
    }

    /// A copy of a revision's HPA state (for tests and diagnostics).
    pub fn hpa_state(&self, key: &RevisionKey) -> Option<HpaState> {
        self.hpa_states().get(key).cloned()
    }

    /// A copy of a revision's KPA state (for tests and diagnostics).
    pub fn state(&self, key: &RevisionKey) -> Option<KpaState> {
        self.states().get(key).cloned()
    }

    /// An HPA-class revision ([`hpa`]): syncs when due, publishes the count with the
    /// activator out of the path, and writes the PA status as Knative's `hpa.go` does.
    fn reconcile_hpa(
        &self,
        ctx: &Context,
        rev: &Revision,
        pa: PodAutoscaler,
        exists: bool,
        key: &RevisionKey,
        wall: chrono::DateTime<chrono::Utc>,
    ) -> Result<Action, ReconcileError> {
        let now = since_epoch(wall);
        let cfg = ctx.config.load();
        let spec = resources::hpa_spec(&pa, &cfg);
        // The activator's poke means nothing here: the HPA never scales to zero.
        ctx.scaling.take_poke(key);
        let (replicas, desired, next) = {
            let mut states = self.hpa_states();
            let initial = resources::hpa_initial_replicas(&pa, &cfg, &spec);
            let st = states
                .entry(key.clone())
                .or_insert_with(|| HpaState::new(&rev.metadata.uid, initial));
            if st.uid != rev.metadata.uid {
                *st = HpaState::new(&rev.metadata.uid, initial);
            }
            if st.until_sync(now, &spec).is_zero() {
                let statuses = ctx.platform.replicas(key);
                let usage = ctx.platform.usage(key);
                let before = st.replicas;
                if st.sync(now, &spec, &rev.spec.pod, &statuses, &usage) {
                    match &st.error {
                        // Expected while replicas start: a CPU rate needs two samples.
                        Some(e @ (HpaError::NoMetrics | HpaError::NoPods)) => {
                            tracing::debug!(revision = %key, "hpa: {e}")
                        }
                        // What the HPA cannot ever compute (no CPU request, a custom
                        // metric): said once per change, as an HPA condition would.
                        Some(e) => {
                            tracing::warn!(revision = %key, "hpa: {e}; the replica count stays")
                        }
                        None => tracing::debug!(revision = %key, "hpa: metrics available"),
                    }
                }
                if st.replicas != before {
                    tracing::debug!(
                        revision = %key,
                        from = before,
                        to = st.replicas,
                        metric = ?st.current_metric,
                        "hpa scale"
                    );
                }
            }
            (st.replicas, st.desired, st.until_sync(now, &spec))
        };
        let counts = replica_counts(ctx, key);
        let ready = counts.ready;
        let published = RevisionScale {
            replicas,
            want: desired,
            // Knative's HPA class keeps its SKS in Serve mode; with no ready replica the
            // SKS points at the activator, which holds the requests (wisp: Proxy).
            mode: if ready > 0 {
                RoutingMode::Serve
            } else {
                RoutingMode::Proxy
            },
            excess_burst_capacity: 0,
            // `ReconcileSKS(ctx, pa, Serve, 0)`: 0 is "all activators".
            num_activators: 0,
        };
        if ctx.scaling.publish(key, published) {
            tracing::debug!(revision = %key, replicas, "hpa scale published");
            ctx.scaling.wake(key);
        }
        // `currentReplicas` of the HPA: the target's replicas that exist.
        let current = counts.ready + counts.not_ready + counts.pending;
        let status = resources::compute_hpa_status(
            pa.status.as_ref(),
            &pa,
            desired,
            current,
            resources::hpa_active_threshold(&pa, &cfg),
            wall,
        );
        let pa = self.write_pa(ctx, pa, exists, status)?;
        self.publish_sks(ctx, rev, &pa, published, ready);
        Ok(Action::RequeueAfter(next.max(resources::MIN_REQUEUE)))
    }

    /// Creates the PA with `status`, or writes `status` if it changed; recorded as this
    /// reconciler's own write ([`crate::reconciler::OwnWrites`]). Returns the PA as it
    /// now is.
    fn write_pa(
        &self,
        ctx: &Context,
        mut pa: PodAutoscaler,
        exists: bool,
        status: wisp_api::autoscaling::PodAutoscalerStatus,
    ) -> Result<PodAutoscaler, ReconcileError> {
        let id = crate::reconciler::Reconciler::id(self);
        let key = ObjectRef::new(
            &kinds::POD_AUTOSCALER,
            &pa.metadata.namespace,
            &pa.metadata.name,
        );
        if !exists {
            pa.status = Some(status);
            let created = objects::create(&ctx.store, &pa)?;
            ctx.own_writes
                .wrote(&kinds::POD_AUTOSCALER, &created.metadata, id, key);
            Ok(created)
        } else if pa.status.as_ref() != Some(&status) {
            pa.status = Some(status);
            let rv = objects::update_status(&ctx.store, &pa)?;
            ctx.own_writes
                .record(&kinds::POD_AUTOSCALER, &pa.metadata, rv.clone(), id);
            pa.metadata.resource_version = rv;
            Ok(pa)
        } else {
            Ok(pa)
        }
    }

    /// Shows the revision's ServerlessService (the routing mode just published) and its
    /// public and private Services in the views ([`sks`]).
    fn publish_sks(
        &self,
        ctx: &Context,
        rev: &Revision,
        pa: &PodAutoscaler,
        scale: RevisionScale,
        ready: u32,
    ) {
        let port = rev
            .serving_container()
            .and_then(|c| c.ports.first())
            .map(|p| p.container_port)
            .filter(|p| *p != 0)
            .unwrap_or(8080);
        let made_of = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            let m = &pa.metadata;
            (&m.namespace, &m.name, &m.uid, &m.labels, &m.annotations).hash(&mut h);
            (&pa.spec.protocol_type, port).hash(&mut h);
            h.finish()
        };
        let inputs = SksInputs {
            made_of,
            mode: scale.mode,
            num_activators: scale.num_activators,
            ready,
        };
        let key = RevisionKey::new(&rev.metadata.namespace, &rev.metadata.name);
        if wisp_sync::lock(&self.sks_made_from).get(&key) == Some(&inputs) {
            return;
        }
        // Made once the reconcile's writes have committed, off the store's lock.
        let (pa, made_from) = (pa.clone(), self.sks_made_from.clone());
        ctx.after_commit(move |ctx| {
            let (ns, name) = (&key.namespace, &key.name);
            let set = format!("{ns}/{name}");
            let sks = sks::make_sks(
                &pa,
                sks::SksState {
                    mode: scale.mode,
                    num_activators: scale.num_activators,
                    ready_replicas: ready,
                },
            );
            ctx.views.serverless_services.replace_set(&set, vec![sks]);
            // The Services are owned by the SKS as held (its uid is the view's).
            let Some(held) = ctx.views.serverless_services.get(ns, name) else {
                return;
            };
            ctx.views
                .services
                .replace_set(&set, sks::make_services(&pa, &held, port));
            wisp_sync::lock(&made_from).insert(key, inputs);
        });
    }

    fn forget(&self, ctx: &Context, key: &RevisionKey) {
        self.states().remove(key);
        self.hpa_states().remove(key);
        wisp_sync::lock(&self.sks_made_from).remove(key);
        wisp_sync::lock(&self.reconciled_from).remove(key);
        ctx.scaling.forget(key);
    }
}

/// Ready replicas of a revision.
pub fn ready_replicas(ctx: &Context, key: &RevisionKey) -> u32 {
    replica_counts(ctx, key).ready
}

/// A revision's replicas by state, as Knative's KPA counts pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    pub ready: u32,
    pub not_ready: u32,
    pub pending: u32,
    pub terminating: u32,
}

/// Counts a revision's replicas by state: `Starting` is Kubernetes' pending (not ready
/// once yet), `NotReady` and `BackOff` are running but not ready.
pub fn replica_counts(ctx: &Context, key: &RevisionKey) -> ReplicaCounts {
    let mut c = ReplicaCounts::default();
    for r in ctx.platform.replicas(key) {
        let n = match r.phase {
            ReplicaPhase::Ready => &mut c.ready,
            ReplicaPhase::Starting => &mut c.pending,
            ReplicaPhase::NotReady | ReplicaPhase::BackOff => &mut c.not_ready,
            ReplicaPhase::Terminating => &mut c.terminating,
        };
        *n = n.saturating_add(1);
    }
    c
}

/// Keyed by PodAutoscaler, but what it reconciles is the Revision of the same name: the PA
/// is derived from it (and created here).
impl TypedReconciler for PodAutoscalerReconciler {
    type Object = Revision;

    fn kind(&self) -> &'static ResourceKind {
        &kinds::POD_AUTOSCALER
    }

    fn reconcile_kind(&self, ctx: &Context, rev: &mut Revision) -> Result<Action, ReconcileError> {
        let key = RevisionKey::new(&rev.metadata.namespace, &rev.metadata.name);
        let inputs = resources::pa_inputs(&rev.metadata, resources::failed_with_nothing_ready(rev));
        let action = self.reconcile_revision(ctx, rev, &key)?;
        wisp_sync::lock(&self.reconciled_from).insert(key, inputs);
        Ok(action)
    }

    /// The revision is gone: so is its KPA state (the store already cascade-deleted the PA),
    /// its ServerlessService and its Services.
    fn gone(&self, ctx: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
        self.forget(ctx, &RevisionKey::new(&key.namespace, &key.name));
        let set = format!("{}/{}", key.namespace, key.name);
        ctx.views.serverless_services.replace_set(&set, Vec::new());
        ctx.views.services.replace_set(&set, Vec::new());
        Ok(Action::Done)
    }

    /// A Revision event reconciles the PA of the same name (creating it for a new one),
    /// unless it changed nothing the PA is made from since the PA's last reconcile.
    fn watches(&self, _ctx: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
        if event.kind != &kinds::REVISION || event.meta.name.is_empty() {
            return Vec::new();
        }
        if !event.deleted {
            let key = RevisionKey::new(&event.meta.namespace, &event.meta.name);
            let inputs = resources::pa_inputs(
                event.meta,
                resources::failed_with_nothing_ready_in(event.object),
            );
            if wisp_sync::lock(&self.reconciled_from).get(&key) == Some(&inputs) {
                return Vec::new();
            }
        }
        vec![event.object_ref().with_kind(&kinds::POD_AUTOSCALER)]
    }
}

impl PodAutoscalerReconciler {
    /// [`TypedReconciler::reconcile_kind`] but for remembering what the revision was.
    fn reconcile_revision(
        &self,
        ctx: &Context,
        rev: &Revision,
        key: &RevisionKey,
    ) -> Result<Action, ReconcileError> {
        let key = key.clone();
        let (namespace, name) = (&rev.metadata.namespace, &rev.metadata.name);
        let want = resources::make_pa(rev);
        // A missing PA is created below with its first status in the same write (one
        // store write instead of two); until then `pa` is the one about to be created.
        let (pa, exists) = match objects::get::<PodAutoscaler>(&ctx.store, namespace, name)? {
            None => {
                let mut new = want;
                // What the store stamps on a created object (the status observes it).
                new.metadata.generation = 1;
                (new, false)
            }
            Some(pa) if !objects::is_controlled_by(&pa.metadata, &rev.metadata.uid) => {
                // Someone else's object (Knative: NotOwned): leave it alone.
                tracing::warn!(pa = %key, "PodAutoscaler not controlled by its revision; ignored");
                self.forget(ctx, &key);
                return Ok(Action::Done);
            }
            Some(pa) => match resources::reconcile_pa(&pa, &want) {
                Some(updated) => (objects::update(&ctx.store, &updated)?, true),
                None => (pa, true),
            },
        };

        let wall = (ctx.clock)();
        let now = since_epoch(wall);
        if resources::is_hpa_class(&pa, &ctx.config.load()) {
            self.states().remove(&key);
            return self.reconcile_hpa(ctx, rev, pa, exists, &key, wall);
        }
        self.hpa_states().remove(&key);
        let spec = resources::decider_spec(&pa, &ctx.config.load());
        let counts = replica_counts(ctx, &key);
        let ready = counts.ready;
        let observed = {
            let mut collector = ctx.scaling.collector();
            collector.watch(&key, &spec, now);
            collector.observe(&key, now)
        };
        let poked = ctx.scaling.take_poke(&key);
        let (step, published, desired) = {
            let mut states = self.states();
            let st = states.entry(key.clone()).or_insert_with(|| {
                KpaState::for_pa(&pa, &rev.metadata.uid, &ctx.config.load(), now)
            });
            if st.uid != rev.metadata.uid {
                *st = KpaState::for_pa(&pa, &rev.metadata.uid, &ctx.config.load(), now);
            }
            let step = st.step(now, &spec, ready, observed, poked);
            (step, st.published(&step.result, ready), st.desired)
        };
        if let Some(d) = step.decision {
            tracing::debug!(
                revision = %key,
                desired = d.desired_scale,
                stable = d.observed_stable,
                panic = d.observed_panic,
                panic_mode = d.panic_mode,
                ebc = d.excess_burst_capacity,
                ready,
                "kpa decision"
            );
        }
        ctx.scaling.report(
            &key,
            resources::report(ctx.scaling.report_of(&key), &spec, &step, counts, desired),
        );
        if ctx.scaling.publish(&key, published) {
            tracing::debug!(revision = %key, replicas = published.replicas, "kpa scale");
            ctx.scaling.wake(&key);
        }

        let status = resources::compute_status(pa.status.as_ref(), &pa, &step.result, ready, wall);
        // The SKS after the PA is written: a new PA has its uid only then, and the SKS's
        // owner reference names it (made before, a new revision's SKS was made twice).
        let pa = self.write_pa(ctx, pa, exists, status)?;
        self.publish_sks(ctx, rev, &pa, published, ready);
        // At rest at zero no tick is needed: a request pokes the revision, which wakes
        // this reconciler (`Scaling::poke`), and a change of the revision or PA re-queues it.
        Ok(step.next_tick.map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests;
