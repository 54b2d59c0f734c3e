//! Pure functions of the PodAutoscaler reconciler: the PodAutoscaler a Revision implies
//! (Knative's `revision/resources/pa.go`), the per-revision KPA state machine (decider +
//! scaler, ticked every 2 s or at once on a poke), and the PA status a scale result implies
//! (Knative's `kpa.go` `computeStatus` / `computeActiveCondition`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use wisp_api::{
    autoscaling::{PodAutoscaler, PodAutoscalerSpec, PodAutoscalerStatus},
    config::Config,
    kinds,
    meta::{ConditionStatus, ObjectMeta},
    serving::Revision,
};
use wisp_autoscaler::{
    ActiveState, Decider, DeciderSpec, Decision, HpaSpec, ScaleInput, ScaleResult, Scaler,
    decider::{TICK, initial_excess_burst_capacity},
    num_activators,
    scaler::SCALE_UNKNOWN,
    targets::{activation_timeout, progress_deadline},
};

use crate::{
    autoscaling::scaling::{KpaReport, RevisionScale, RoutingMode},
    conditions::{self, ConditionSet, READY},
    names::{label, routing_state},
    objects,
};

pub use wisp_api::autoscaling::condition::{ACTIVE, SCALE_TARGET_INITIALIZED, SKS_READY};
/// The PodAutoscaler's living condition set: Ready ⇐ Active, ScaleTargetInitialized,
/// SKSReady.
pub const CONDITIONS: ConditionSet =
    ConditionSet::new(READY, &[ACTIVE, SCALE_TARGET_INITIALIZED, SKS_READY]);

pub const QUEUED: &str = "Queued";
pub const QUEUED_MESSAGE: &str =
    "Requests to the target are being buffered as resources are provisioned.";
pub const NO_TRAFFIC: &str = "NoTraffic";
pub const NO_TRAFFIC_MESSAGE: &str = "The target is not receiving traffic.";
pub const TIMED_OUT: &str = "TimedOut";
pub const TIMED_OUT_MESSAGE: &str = "The target could not be activated.";

/// `spec.reachability` values.
pub const REACHABLE: &str = "Reachable";
pub const UNREACHABLE: &str = "Unreachable";

/// The annotation kubectl writes; Knative keeps it off the PA.
use wisp_api::annotations::LAST_APPLIED;

/// Smallest requeue, so a tick computed a hair early does not spin.
pub(crate) const MIN_REQUEUE: Duration = Duration::from_millis(50);

/// Knative's `reachability`: `active` ⇒ Reachable, `reserve` ⇒ Unreachable, otherwise
/// (pending or unset) unknown (""); a revision whose resources failed (ResourcesAvailable
/// False: progress deadline exceeded, or nothing this runtime can run) with no ready
/// replica is Unreachable too, so its min-scale does not keep it alive. A crash-looping
/// revision is not: like a Deployment in CrashLoopBackOff it keeps being restarted until
/// its progress deadline.
pub fn reachability(rev: &Revision) -> &'static str {
    if failed_with_nothing_ready(rev) {
        return UNREACHABLE;
    }
    match rev
        .metadata
        .labels
        .get(label::ROUTING_STATE)
        .map(String::as_str)
    {
        Some(routing_state::ACTIVE) => REACHABLE,
        Some(routing_state::RESERVE) => UNREACHABLE,
        _ => "",
    }
}

/// Whether a revision's resources failed for good (`ResourcesAvailable` False) with no
/// replica up.
pub fn failed_with_nothing_ready(rev: &Revision) -> bool {
    rev.status.as_ref().is_some_and(|st| {
        let available = st
            .status
            .condition(crate::revision::resources::RESOURCES_AVAILABLE)
            .map(|c| (c.status == ConditionStatus::False, c.reason.as_str()));
        gave_up(available, st.actual_replicas.unwrap_or(0).into())
    })
}

/// [`failed_with_nothing_ready`] of a revision as its event holds it.
pub fn failed_with_nothing_ready_in(revision: &serde_json::Value) -> bool {
    let status = &revision["status"];
    let available = status["conditions"].as_array().and_then(|cs| {
        cs.iter()
            .find(|c| c["type"] == crate::revision::resources::RESOURCES_AVAILABLE)
            .map(|c| (c["status"] == "False", c["reason"].as_str().unwrap_or("")))
    });
    gave_up(available, status["actualReplicas"].as_i64().unwrap_or(0))
}

/// The rule of [`failed_with_nothing_ready`]: `available` is the `ResourcesAvailable`
/// condition (whether False, and its reason), `actual` the `actualReplicas`. A revision
/// waiting for a Secret or ConfigMap is not given up on: the kubelet keeps retrying such a
/// container, and the replica starts once the object exists.
fn gave_up(available: Option<(bool, &str)>, actual: i64) -> bool {
    available.is_some_and(|(is_false, reason)| {
        is_false && !wisp_runtime::podconfig::WAITING_REASONS.contains(&reason)
    }) && actual == 0
}

/// A digest of all of a revision that its PodAutoscaler's reconcile reads: its metadata
/// ([`make_pa`]: labels, annotations, uid; a change of its spec moves its generation) and
/// whether it [`failed_with_nothing_ready`] ([`reachability`]). Its other status changes
/// (each of the revision's status writes is an event) leave the digest the same.
pub fn pa_inputs(meta: &ObjectMeta, failed_with_nothing_ready: bool) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (&meta.uid, meta.generation, &meta.labels, &meta.annotations).hash(&mut h);
    (meta.deletion_timestamp.is_some(), failed_with_nothing_ready).hash(&mut h);
    h.finish()
}

/// `http1`, or `h2c` when the serving container's port is named `h2c`.
pub fn protocol_type(rev: &Revision) -> &'static str {
    rev.protocol().as_str()
}

/// The PodAutoscaler of a revision: same name and namespace, controlled by the revision
/// (so it is deleted with it), the revision's labels plus `serving.knative.dev/revision`
/// and `revisionUID`, its annotations, and a spec pointing at it.
pub fn make_pa(rev: &Revision) -> PodAutoscaler {
    let m = &rev.metadata;
    let mut labels = m.labels.clone();
    labels.insert(label::REVISION.into(), m.name.clone());
    labels.insert(label::REVISION_UID.into(), m.uid.clone());
    let mut annotations = m.annotations.clone();
    annotations.remove(LAST_APPLIED);
    PodAutoscaler {
        api_version: kinds::POD_AUTOSCALER.api_version(),
        kind: kinds::POD_AUTOSCALER.kind.to_owned(),
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            labels,
            annotations,
            owner_references: vec![objects::owner_reference(&kinds::REVISION, m)],
            ..Default::default()
        },
        spec: PodAutoscalerSpec {
            container_concurrency: Some(rev.spec.container_concurrency.unwrap_or(0)),
            scale_target_ref: Some(serde_json::json!({
                "apiVersion": kinds::REVISION.api_version(),
                "kind": kinds::REVISION.kind,
                "name": m.name,
            })),
            reachability: reachability(rev).to_owned(),
            protocol_type: protocol_type(rev).to_owned(),
        },
        status: None,
    }
}

/// `existing` brought in line with `desired` (spec, labels, annotations, owners), or None
/// when nothing differs. Status is kept.
pub fn reconcile_pa(existing: &PodAutoscaler, desired: &PodAutoscaler) -> Option<PodAutoscaler> {
    let (e, d) = (&existing.metadata, &desired.metadata);
    if existing.spec == desired.spec
        && e.labels == d.labels
        && e.annotations == d.annotations
        && e.owner_references == d.owner_references
    {
        return None;
    }
    let mut updated = existing.clone();
    updated.spec = desired.spec.clone();
    updated.metadata.labels = d.labels.clone();
    updated.metadata.annotations = d.annotations.clone();
    updated.metadata.owner_references = d.owner_references.clone();
    Some(updated)
}

/// The KPA spec of a PodAutoscaler (its annotations, containerConcurrency and
/// reachability) under `config-autoscaler`.
pub fn decider_spec(pa: &PodAutoscaler, cfg: &Config) -> DeciderSpec {
    let mut spec = DeciderSpec::resolve(
        &pa.metadata.annotations,
        pa.spec.container_concurrency.unwrap_or(0),
        &cfg.autoscaler,
    );
    spec.reachable = pa.spec.reachability != UNREACHABLE;
    spec
}

pub use wisp_autoscaler::scaler::initial_replicas;

/// Whether a PA is of the HPA class: its `autoscaling.knative.dev/class`, else
/// `config-autoscaler`'s `pod-autoscaler-class` (Knative's PA `SetDefaults`).
pub fn is_hpa_class(pa: &PodAutoscaler, cfg: &Config) -> bool {
    wisp_api::annotations::autoscaling::CLASS
        .value(&pa.metadata.annotations)
        .unwrap_or(&cfg.autoscaler.pod_autoscaler_class)
        == wisp_api::config::HPA_CLASS
}

/// The HorizontalPodAutoscaler an HPA-class PA implies (`MakeHPA`), under `cfg`.
pub fn hpa_spec(pa: &PodAutoscaler, cfg: &Config) -> HpaSpec {
    HpaSpec::resolve(
        &pa.metadata.annotations,
        pa.spec.reachability != UNREACHABLE,
        &cfg.autoscaler,
    )
}

/// The replicas an HPA-class revision starts with: its initial scale (as the KPA's
/// Deployment is created with), within the HPA's bounds; for a PA wisp reconciled before a
/// restart, its stored `desiredScale` (the Deployment keeps its replicas while Kubernetes'
/// HPA controller restarts), as [`KpaState::for_pa`] resumes.
pub fn hpa_initial_replicas(pa: &PodAutoscaler, cfg: &Config, spec: &HpaSpec) -> u32 {
    let stored = pa.status.as_ref().and_then(|s| {
        conditions::is_true(&s.status, SCALE_TARGET_INITIALIZED)
            .then_some(s.desired_scale)
            .flatten()
    });
    let initial = stored.unwrap_or_else(|| decider_spec(pa, cfg).initial_scale);
    u32::try_from(initial.clamp(spec.min_replicas, spec.max_replicas)).unwrap_or(1)
}

/// `activeThreshold` of Knative's `hpa.go`: the replicas an HPA-class PA needs before its
/// scale target counts as initialized: max(min-scale, initial scale) until it first
/// was, then max(min-scale, 1).
pub fn hpa_active_threshold(pa: &PodAutoscaler, cfg: &Config) -> u32 {
    let initialized = pa
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.status, SCALE_TARGET_INITIALIZED));
    // `ScaleBounds` min (0 while unreachable), not the HPA's floor of 1.
    let min = if pa.spec.reachability == UNREACHABLE {
        0
    } else {
        decider_spec(pa, cfg).min_scale
    };
    let other = if initialized {
        1
    } else {
        decider_spec(pa, cfg).initial_scale
    };
    u32::try_from(min.max(other)).unwrap_or(0)
}

/// The status of an HPA-class PA (Knative's `hpa.go` `ReconcileKind`): `Active` always
/// ("HPA is always _active_"), `SKSReady`, `ScaleTargetInitialized` once `current`
/// reached `threshold`, `desiredScale` = the HPA's desired replicas, `actualScale` = its
/// current replicas. Starts from `old` so that transition times survive.
pub fn compute_hpa_status(
    old: Option<&PodAutoscalerStatus>,
    pa: &PodAutoscaler,
    desired: i32,
    current: u32,
    threshold: u32,
    now: DateTime<Utc>,
) -> PodAutoscalerStatus {
    let mut st = old.cloned().unwrap_or_default();
    let s = &mut st.status;
    CONDITIONS.initialize(s, now);
    CONDITIONS.mark(s, SKS_READY, ConditionStatus::True, "", "", now);
    if !conditions::is_true(s, SCALE_TARGET_INITIALIZED) && current >= threshold {
        CONDITIONS.mark(
            s,
            SCALE_TARGET_INITIALIZED,
            ConditionStatus::True,
            "",
            "",
            now,
        );
    }
    CONDITIONS.mark(s, ACTIVE, ConditionStatus::True, "", "", now);
    s.observed_generation = pa.metadata.generation;
    st.service_name = pa.metadata.name.clone();
    st.desired_scale = Some(desired);
    st.actual_scale = Some(i32::try_from(current).unwrap_or(i32::MAX));
    st
}

/// One revision's KPA: its decider, its scaler, the latest decision and the replica count
/// applied so far. Windows live in the collector (shared with the stats feed).
#[derive(Clone, Debug)]
pub struct KpaState {
    /// The revision's uid: a revision re-created under the same name starts afresh.
    pub uid: String,
    pub spec: DeciderSpec,
    decider: Decider,
    scaler: Scaler,
    /// The decider's latest desired scale ([`SCALE_UNKNOWN`] until the first decision).
    pub desired: i32,
    pub excess_burst_capacity: i32,
    pub panic_mode: bool,
    /// Replicas to run (the scale target's `spec.replicas`).
    pub replicas: u32,
    last_tick: Option<Duration>,
}

/// What one [`KpaState::step`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub result: ScaleResult,
    /// The decision taken in this step, if it was a tick (or a poke) with data.
    pub decision: Option<Decision>,
    /// Time until the next tick; None when the revision is at rest at zero (no replica,
    /// none wanted, no traffic seen): nothing can change until the activator pokes it, and
    /// ten thousand idle revisions must not cost a reconcile every two seconds each.
    pub next_tick: Option<Duration>,
}

impl KpaState {
    /// A new revision's KPA at `now`; `progress` is its progress deadline.
    pub fn new(uid: &str, spec: DeciderSpec, now: Duration, progress: Duration) -> Self {
        KpaState {
            uid: uid.to_owned(),
            decider: Decider::new(spec.clone()),
            scaler: Scaler::new(now, activation_timeout(progress)),
            desired: SCALE_UNKNOWN,
            excess_burst_capacity: initial_excess_burst_capacity(&spec),
            panic_mode: false,
            replicas: initial_replicas(&spec),
            last_tick: None,
            spec,
        }
    }

    /// The state for a PodAutoscaler under `cfg` (spec and progress deadline from it). A
    /// PA whose status says its scale target was initialized is one wisp reconciled before
    /// a restart: it resumes from that status (its replicas = `desiredScale`, its Active
    /// condition) instead of starting again from initial-scale, so a restart starts no
    /// replica for a revision at zero.
    pub fn for_pa(pa: &PodAutoscaler, uid: &str, cfg: &Config, now: Duration) -> Self {
        let progress = progress_deadline(&pa.metadata.annotations, &cfg.deployment);
        let mut st = KpaState::new(uid, decider_spec(pa, cfg), now, progress);
        if let Some(status) = &pa.status
            && conditions::is_true(&status.status, SCALE_TARGET_INITIALIZED)
            && let Some(desired) = status.desired_scale.filter(|d| *d >= 0)
        {
            let active = match status.status.condition(ACTIVE) {
                Some(c) if c.status == ConditionStatus::True => ActiveState::Active,
                Some(c) if c.status == ConditionStatus::False && c.reason == TIMED_OUT => {
                    ActiveState::TimedOut
                }
                Some(c) if c.status == ConditionStatus::False => ActiveState::Inactive,
                _ => ActiveState::Activating,
            };
            st.replicas = u32::try_from(desired).unwrap_or(0);
            // The decision stands until the decider has data again, so the status keeps
            // the same desiredScale across the restart rather than Knative's -1 of a new
            // decider (issue #19: the PA status is continuous).
            st.desired = desired;
            st.scaler = Scaler::resume(now, activation_timeout(progress), active, true);
        }
        st
    }

    /// One reconcile at `now` with `ready` ready replicas: applies a changed spec; decides
    /// when a tick is due (every [`TICK`]) or when `poked` while the desired scale is ≤ 0
    /// (Knative's poke), from the `observed` (stable, panic) averages — `None` = no data,
    /// the previous decision stands; then runs the scaler.
    pub fn step(
        &mut self,
        now: Duration,
        spec: &DeciderSpec,
        ready: u32,
        observed: Option<(f64, f64)>,
        poked: bool,
    ) -> Step {
        if *spec != self.spec {
            self.decider.update(spec.clone());
            self.spec = spec.clone();
        }
        self.decider.start(now, ready);
        let due = self.last_tick.is_none_or(|t| now >= t + TICK);
        let mut decision = None;
        if due || (poked && self.desired <= 0) {
            if due {
                self.last_tick = Some(now);
            }
            if let Some((stable, panic)) = observed {
                let d = self.decider.decide(now, ready, stable, panic);
                self.desired = d.desired_scale;
                self.excess_burst_capacity = d.excess_burst_capacity;
                self.panic_mode = d.panic_mode;
                decision = Some(d);
            }
        }
        let result = self.scaler.reconcile(
            now,
            &self.spec,
            ScaleInput {
                desired: self.desired,
                excess_burst_capacity: self.excess_burst_capacity,
                current_replicas: self.replicas,
                ready,
            },
        );
        if let Some(n) = result.replicas {
            self.replicas = n;
        }
        let next = self.last_tick.map_or(now, |t| t + TICK);
        let no_traffic = observed.is_none_or(|(stable, panic)| stable <= 0.0 && panic <= 0.0);
        let at_rest = self.replicas == 0
            && ready == 0
            && self.desired <= 0
            && result.want <= 0
            && result.replicas.is_none_or(|n| n == 0)
            && no_traffic;
        Step {
            result,
            decision,
            next_tick: (!at_rest).then(|| next.saturating_sub(now).max(MIN_REQUEUE)),
        }
    }

    /// What the data plane and the Revision reconciler read.
    pub fn published(&self, result: &ScaleResult, ready: u32) -> RevisionScale {
        RevisionScale {
            replicas: self.replicas,
            want: result.want,
            mode: if result.activator_in_path {
                RoutingMode::Proxy
            } else {
                RoutingMode::Serve
            },
            excess_burst_capacity: self.excess_burst_capacity,
            num_activators: num_activators(&self.spec, ready),
        }
    }
}

/// The Active condition of a scale result: (status, reason, message).
pub fn active_condition(active: ActiveState) -> (ConditionStatus, &'static str, &'static str) {
    match active {
        ActiveState::Active => (ConditionStatus::True, "", ""),
        ActiveState::Activating => (ConditionStatus::Unknown, QUEUED, QUEUED_MESSAGE),
        ActiveState::Inactive => (ConditionStatus::False, NO_TRAFFIC, NO_TRAFFIC_MESSAGE),
        ActiveState::TimedOut => (ConditionStatus::False, TIMED_OUT, TIMED_OUT_MESSAGE),
    }
}

/// The PA status after a reconcile: `desiredScale` = the scaler's `want`, `actualScale` =
/// ready replicas, `serviceName` = the revision (wisp's activator addresses revisions by
/// name), and the conditions. wisp has no ServerlessService: `SKSReady` is always True.
/// Starts from `old` so that transition times survive.
pub fn compute_status(
    old: Option<&PodAutoscalerStatus>,
    pa: &PodAutoscaler,
    result: &ScaleResult,
    ready: u32,
    now: DateTime<Utc>,
) -> PodAutoscalerStatus {
    let mut st = old.cloned().unwrap_or_default();
    let s = &mut st.status;
    CONDITIONS.initialize(s, now);
    let (cs, reason, message) = active_condition(result.active);
    CONDITIONS.mark(s, ACTIVE, cs, reason, message, now);
    if result.scale_target_initialized {
        CONDITIONS.mark(
            s,
            SCALE_TARGET_INITIALIZED,
            ConditionStatus::True,
            "",
            "",
            now,
        );
    }
    CONDITIONS.mark(s, SKS_READY, ConditionStatus::True, "", "", now);
    s.observed_generation = pa.metadata.generation;
    st.service_name = pa.metadata.name.clone();
    st.desired_scale = Some(result.want);
    st.actual_scale = Some(i32::try_from(ready).unwrap_or(i32::MAX));
    st
}

/// The revision's [`KpaReport`] after a step: replica counts now; the observed values,
/// panic mode and excess burst capacity of this step's decision, or of the last one when
/// this step decided nothing (`prev`); `desired` is the KPA state's latest desired scale.
pub fn report(
    prev: Option<KpaReport>,
    spec: &DeciderSpec,
    step: &Step,
    counts: super::ReplicaCounts,
    desired: i32,
) -> KpaReport {
    let mut r = prev.unwrap_or(KpaReport {
        desired: SCALE_UNKNOWN,
        ..KpaReport::default()
    });
    if let Some(d) = step.decision {
        r.stable = d.observed_stable;
        r.panic = d.observed_panic;
        r.panic_mode = d.panic_mode;
        r.excess_burst_capacity = f64::from(d.excess_burst_capacity);
    }
    r.desired = desired;
    r.metric = spec.metric;
    r.target = spec.target_value;
    r.requested = step.result.want;
    r.ready = counts.ready;
    r.not_ready = counts.not_ready;
    r.pending = counts.pending;
    r.terminating = counts.terminating;
    r
}

#[cfg(test)]
mod tests;
