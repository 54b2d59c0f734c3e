//! Applying a decision (Knative's `kpa/scaler.go` and `kpa/kpa.go`): scale
//! bounds, initial scale, the scale-to-zero sequence, the activation timeout, the Active
//! condition and whether the activator is in the request path — a state machine per
//! revision (what Knative keeps in the PodAutoscaler's status) with time passed in.
//!
//! Simplifications against Knative, because wisp runs the activator in-process and has no
//! ServerlessService object:
//! - "Verify the activator answers on the public service" before scaling to zero always
//!   succeeds at once: there is no network programming to wait for.
//! - The SKS's Proxy/Serve mode is [`ScaleResult::activator_in_path`], and "how long the
//!   SKS has been in Proxy mode" is how long that flag has been true as of the previous
//!   reconcile (Knative reads the SKS before updating it in the same pass).
//! - The PA's `Active` condition starts `Unknown` at creation time (Knative's first reconcile
//!   re-stamps it with reason `Queued` a moment later), and there is no `SKSReady` gate.
//! - Re-enqueue timers don't exist: callers reconcile on a clock (the simulator every
//!   second), which is when Knative's timers would fire at the latest.

use std::time::Duration;

use serde::Serialize;

use crate::targets::DeciderSpec;

/// Desired scale before the decider has decided anything.
pub const SCALE_UNKNOWN: i32 = -1;

/// The PodAutoscaler's `Active` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActiveState {
    /// `Active=True`: enough pods ready.
    Active,
    /// `Active=Unknown`, reason `Queued`: requests buffer while pods start.
    Activating,
    /// `Active=False`, reason `NoTraffic`.
    Inactive,
    /// `Active=False`, reason `TimedOut`: activation exceeded progress deadline + 30 s.
    TimedOut,
}

impl ActiveState {
    /// The condition status.
    pub fn status(self) -> &'static str {
        match self {
            ActiveState::Active => "True",
            ActiveState::Activating => "Unknown",
            ActiveState::Inactive | ActiveState::TimedOut => "False",
        }
    }

    /// The condition reason.
    pub fn reason(self) -> &'static str {
        match self {
            ActiveState::Active => "",
            ActiveState::Activating => "Queued",
            ActiveState::Inactive => "NoTraffic",
            ActiveState::TimedOut => "TimedOut",
        }
    }

    /// `Active=False`.
    pub fn is_inactive(self) -> bool {
        matches!(self, ActiveState::Inactive | ActiveState::TimedOut)
    }

    /// A short name for tables (`active`, `activating`, `inactive`, `timed-out`).
    pub fn as_str(self) -> &'static str {
        match self {
            ActiveState::Active => "active",
            ActiveState::Activating => "activating",
            ActiveState::Inactive => "inactive",
            ActiveState::TimedOut => "timed-out",
        }
    }
}

/// What one reconcile sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleInput {
    /// The decider's latest desired scale, or [`SCALE_UNKNOWN`].
    pub desired: i32,
    /// The decider's latest excess burst capacity.
    pub excess_burst_capacity: i32,
    /// The scale target's current `spec.replicas`.
    pub current_replicas: u32,
    /// Ready pods.
    pub ready: u32,
}

/// What one reconcile decided.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScaleResult {
    /// New `spec.replicas` to apply; `None` = leave the scale target as it is.
    pub replicas: Option<u32>,
    /// The PA's `desiredScale` (`want`; -1 while unknown).
    pub want: i32,
    pub active: ActiveState,
    pub scale_target_initialized: bool,
    /// SKS Proxy mode: requests go through the activator (scaled to zero, too little burst
    /// capacity, or no ready pod).
    pub activator_in_path: bool,
}

/// One revision's scaler state.
#[derive(Clone, Debug)]
pub struct Scaler {
    activation_timeout: Duration,
    active: ActiveState,
    /// `lastTransitionTime` of the Active condition.
    active_since: Duration,
    scale_target_initialized: bool,
    /// Since when the activator has been in the path (`ActivatorEndpointsPopulated`).
    proxy_since: Option<Duration>,
}

impl Scaler {
    /// A new revision's scaler at `now` (its scale target was created with initial-scale
    /// replicas). `activation_timeout` is progress deadline + 30 s
    /// ([`crate::targets::activation_timeout`]).
    pub fn new(now: Duration, activation_timeout: Duration) -> Self {
        Scaler {
            activation_timeout,
            active: ActiveState::Activating,
            active_since: now,
            scale_target_initialized: false,
            proxy_since: None,
        }
    }

    /// The scaler of a revision that was already running before wisp restarted, as its
    /// PodAutoscaler's status recorded it: Knative's KPA, restarted, finds the same in the
    /// PA and the Deployment. (Starting it as [`Scaler::new`] would start initial-scale
    /// replicas for every revision that had scaled to zero.)
    pub fn resume(
        now: Duration,
        activation_timeout: Duration,
        active: ActiveState,
        scale_target_initialized: bool,
    ) -> Self {
        Scaler {
            active,
            scale_target_initialized,
            ..Scaler::new(now, activation_timeout)
        }
    }

    /// The Active condition.
    pub fn active(&self) -> ActiveState {
        self.active
    }

    /// Since when the Active condition has its current value.
    pub fn active_since(&self) -> Duration {
        self.active_since
    }

    /// Whether ready pods reached the initial threshold once.
    pub fn scale_target_initialized(&self) -> bool {
        self.scale_target_initialized
    }

    /// One reconcile of the PodAutoscaler at `now` (Knative's `ReconcileKind` minus I/O).
    pub fn reconcile(
        &mut self,
        now: Duration,
        spec: &DeciderSpec,
        input: ScaleInput,
    ) -> ScaleResult {
        let (want, apply) = self.scale(now, spec, input.desired);
        let replicas = apply.filter(|&r| r != input.current_replicas);

        // Activator in the path: scaled to zero, not enough spare capacity, or unknown while
        // inactive (e.g. after a restart of an idle revision); and always with no pod ready.
        let activator_in_path = want == 0
            || input.excess_burst_capacity < 0
            || (want == SCALE_UNKNOWN && self.active.is_inactive())
            || input.ready == 0;
        self.proxy_since = if activator_in_path {
            Some(self.proxy_since.unwrap_or(now))
        } else {
            None
        };

        self.compute_active(now, spec, want, input.ready);
        ScaleResult {
            replicas,
            want,
            active: self.active,
            scale_target_initialized: self.scale_target_initialized,
            activator_in_path,
        }
    }

    /// `scaler.scale`: `(want, replicas to apply)`.
    fn scale(&self, now: Duration, spec: &DeciderSpec, desired: i32) -> (i32, Option<u32>) {
        if desired < 0 && self.active != ActiveState::Activating {
            // No metrics yet: leave the scale target alone.
            return (desired, None);
        }
        let (mut min, max) = scale_bounds(spec);
        // Until the target first reaches initial-scale, hold at least that many.
        if spec.initial_scale > 1 && !self.scale_target_initialized && spec.reachable {
            min = min.max(spec.initial_scale);
        }
        let bounded = apply_bounds(min, max, desired);
        let (want, apply) = self.handle_scale_to_zero(now, spec, bounded);
        match u32::try_from(want) {
            Ok(r) if apply => (want, Some(r)),
            _ => (want, None),
        }
    }

    /// `handleScaleToZero`: `(scale, apply?)`.
    fn handle_scale_to_zero(&self, now: Duration, spec: &DeciderSpec, desired: i32) -> (i32, bool) {
        if desired != 0 {
            return (desired, true);
        }
        if !spec.enable_scale_to_zero {
            return (1, true);
        }
        let in_state_for = now.saturating_sub(self.active_since);
        match self.active {
            ActiveState::Activating => {
                if in_state_for > self.activation_timeout {
                    // Stuck activating for longer than the progress deadline: give up.
                    (0, true)
                } else {
                    (SCALE_UNKNOWN, false)
                }
            }
            ActiveState::Active => {
                if in_state_for >= spec.stable_window {
                    // Don't scale yet: report 0 so the PA is marked inactive first.
                    (0, false)
                } else {
                    // Keep one pod for the rest of the idle period.
                    (1, true)
                }
            }
            ActiveState::Inactive | ActiveState::TimedOut => {
                // The activator always answers in-process (see the module doc).
                let grace = spec.scale_to_zero_grace_period;
                let retention = spec.pod_retention;
                if in_state_for >= grace.max(retention) {
                    return (0, true);
                }
                if !retention.is_zero() && in_state_for < retention {
                    return (0, false);
                }
                // Fast path: the activator has been in the path for the grace period already.
                let proxy_for = self
                    .proxy_since
                    .map_or(Duration::ZERO, |t| now.saturating_sub(t));
                (0, proxy_for >= grace)
            }
        }
    }

    /// `computeActiveCondition` (the table in Knative's kpa.go).
    fn compute_active(&mut self, now: Duration, spec: &DeciderSpec, want: i32, ready: u32) {
        let min_ready = self.active_threshold(spec);
        let ready = i64::from(ready);
        if ready >= min_ready {
            self.scale_target_initialized = true;
        }
        let next = if want == 0 || min_ready == 0 {
            if self.active == ActiveState::Activating && min_ready > 0 {
                // Only a timed-out activation scales to zero while activating.
                ActiveState::TimedOut
            } else {
                ActiveState::Inactive
            }
        } else if ready < min_ready {
            if want > 0 || !self.active.is_inactive() {
                ActiveState::Activating
            } else {
                ActiveState::Inactive
            }
        } else if want > 0 || !self.active.is_inactive() {
            ActiveState::Active
        } else {
            self.active
        };
        self.set_active(now, next);
    }

    /// Ready pods needed to be Active: `max(min, initial-scale)` before initialisation,
    /// `max(min, 1)` after.
    fn active_threshold(&self, spec: &DeciderSpec) -> i64 {
        let (min, _) = scale_bounds(spec);
        let floor = if self.scale_target_initialized {
            1
        } else {
            spec.initial_scale
        };
        i64::from(min.max(floor))
    }

    fn set_active(&mut self, now: Duration, next: ActiveState) {
        if next != self.active {
            self.active = next;
            self.active_since = now;
        }
    }
}

/// `ScaleBounds`: `(min, max)`; min is ignored for an unreachable revision; max 0 = none.
pub fn scale_bounds(spec: &DeciderSpec) -> (i32, i32) {
    let min = if spec.reachable {
        spec.min_scale.max(0)
    } else {
        0
    };
    (min, spec.max_scale.max(0))
}

/// Replicas a revision starts with, before its KPA's first decision (Knative creates the
/// Deployment with initial-scale): initial-scale within `[min, max]`, like a fresh Knative
/// Deployment; 0 for an unreachable revision (no route can reach it, so wisp does not wait
/// a stable window to stop it).
pub fn initial_replicas(spec: &DeciderSpec) -> u32 {
    if !spec.reachable {
        return 0;
    }
    let (min, max) = scale_bounds(spec);
    u32::try_from(apply_bounds(min, max, spec.initial_scale.max(0))).unwrap_or(0)
}

/// Clamps `x` into `[min, max]` (max 0 = unbounded).
pub fn apply_bounds(min: i32, max: i32, x: i32) -> i32 {
    if x < min {
        min
    } else if max != 0 && x > max {
        max
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    const TIMEOUT: Duration = Duration::from_secs(630);

    fn input(desired: i32, current: u32, ready: u32) -> ScaleInput {
        ScaleInput {
            desired,
            excess_burst_capacity: 0,
            current_replicas: current,
            ready,
        }
    }

    /// A scaler already Active since `t` with one ready pod.
    fn active_at(spec: &DeciderSpec, t: u64) -> Scaler {
        let mut sc = Scaler::new(s(0), TIMEOUT);
        let r = sc.reconcile(s(t), spec, input(1, 1, 1));
        assert_eq!(r.active, ActiveState::Active);
        sc
    }

    #[test]
    fn unknown_desired_leaves_target_alone_unless_activating() {
        let spec = DeciderSpec::default();
        let mut sc = Scaler::new(s(0), TIMEOUT);
        // Activating, no pods yet: -1 is bounded to min (0), then 0 while activating ⇒ wait.
        let r = sc.reconcile(s(0), &spec, input(-1, 1, 0));
        assert_eq!(r.replicas, None);
        assert_eq!(r.want, -1);
        assert_eq!(r.active, ActiveState::Activating);
        assert!(r.activator_in_path);
        // First pod ready: Active and initialised, still nothing applied.
        let r = sc.reconcile(s(3), &spec, input(-1, 1, 1));
        assert_eq!(r.active, ActiveState::Active);
        assert!(r.scale_target_initialized);
        assert_eq!(r.replicas, None);
        // Active with unknown desired: untouched.
        let r = sc.reconcile(s(5), &spec, input(-1, 1, 1));
        assert_eq!((r.replicas, r.want), (None, -1));
    }

    #[test]
    fn bounds_and_patching_only_when_different() {
        let spec = DeciderSpec {
            min_scale: 2,
            max_scale: 5,
            ..DeciderSpec::default()
        };
        let mut sc = Scaler::new(s(0), TIMEOUT);
        let r = sc.reconcile(s(1), &spec, input(2, 2, 2));
        assert_eq!((r.active, r.replicas), (ActiveState::Active, None));
        // (desired, current, want, replicas)
        for (desired, current, want, replicas) in [
            (1, 1, 2, Some(2)),
            (9, 2, 5, Some(5)),
            (4, 4, 4, None),
            (0, 4, 2, Some(2)),
        ] {
            let r = sc.reconcile(s(2), &spec, input(desired, current, 2));
            assert_eq!((r.want, r.replicas), (want, replicas), "desired {desired}");
        }
    }

    #[test]
    fn min_scale_ignored_when_unreachable() {
        let spec = DeciderSpec {
            min_scale: 3,
            reachable: false,
            ..DeciderSpec::default()
        };
        let mut sc = active_at(&spec, 1);
        let r = sc.reconcile(s(2), &spec, input(1, 3, 3));
        assert_eq!((r.want, r.replicas), (1, Some(1)));
    }

    #[test]
    fn initial_scale_until_initialised() {
        let spec = DeciderSpec {
            initial_scale: 3,
            ..DeciderSpec::default()
        };
        let mut sc = Scaler::new(s(0), TIMEOUT);
        // Unknown desired while activating is lifted to initial-scale.
        let r = sc.reconcile(s(1), &spec, input(-1, 3, 0));
        assert_eq!((r.want, r.replicas), (3, None));
        assert_eq!(r.active, ActiveState::Activating);
        // Desired 1 is still raised to 3; two ready pods are not enough to be Active.
        let r = sc.reconcile(s(2), &spec, input(1, 3, 2));
        assert_eq!(r.want, 3);
        assert_eq!(r.active, ActiveState::Activating);
        assert!(!r.scale_target_initialized);
        // Three ready: initialised and Active; from now on desired 1 is applied.
        let r = sc.reconcile(s(3), &spec, input(1, 3, 3));
        assert!(r.scale_target_initialized);
        assert_eq!(r.active, ActiveState::Active);
        let r = sc.reconcile(s(4), &spec, input(1, 3, 3));
        assert_eq!((r.want, r.replicas), (1, Some(1)));
    }

    #[test]
    fn scale_to_zero_disabled_keeps_one() {
        let spec = DeciderSpec {
            enable_scale_to_zero: false,
            ..DeciderSpec::default()
        };
        let mut sc = active_at(&spec, 1);
        let r = sc.reconcile(s(500), &spec, input(0, 2, 2));
        assert_eq!((r.want, r.replicas), (1, Some(1)));
        assert_eq!(r.active, ActiveState::Active);
    }

    #[test]
    fn scale_to_zero_sequence_waits_grace() {
        // TBC 0 keeps the activator out of the path while pods serve, so no fast path.
        let spec = DeciderSpec {
            target_burst_capacity: 0.0,
            ..DeciderSpec::default()
        };
        let mut sc = active_at(&spec, 10); // Active since t=10
        let at = |sc: &mut Scaler, t: u64, desired: i32, cur: u32, ready: u32| {
            sc.reconcile(s(t), &spec, input(desired, cur, ready))
        };
        // Desired 0 but active < stable window (60 s): keep one pod.
        let r = at(&mut sc, 40, 0, 2, 2);
        assert_eq!((r.want, r.replicas), (1, Some(1)));
        assert_eq!(r.active, ActiveState::Active);
        assert!(!r.activator_in_path);
        // Active for 60 s: marked inactive, nothing applied, activator into the path.
        let r = at(&mut sc, 70, 0, 1, 1);
        assert_eq!((r.want, r.replicas), (0, None));
        assert_eq!(r.active, ActiveState::Inactive);
        assert_eq!(sc.active_since(), s(70));
        assert!(r.activator_in_path);
        // Inactive, but not yet for the grace period (30 s): wait.
        let r = at(&mut sc, 99, 0, 1, 1);
        assert_eq!((r.want, r.replicas), (0, None));
        // Grace period over: scale to zero.
        let r = at(&mut sc, 100, 0, 1, 1);
        assert_eq!((r.want, r.replicas), (0, Some(0)));
        assert_eq!(r.active, ActiveState::Inactive);
        // Zero: nothing more to do.
        let r = at(&mut sc, 101, 0, 0, 0);
        assert_eq!(r.replicas, None);
    }

    #[test]
    fn scale_to_zero_fast_path_when_activator_already_in_path() {
        // Default TBC 211 with one pod: EBC < 0, the activator has been in the path all along.
        let spec = DeciderSpec::default();
        let mut sc = Scaler::new(s(0), TIMEOUT);
        let mut ebc_input = |t: u64, desired: i32, cur: u32, ready: u32| {
            sc.reconcile(
                s(t),
                &spec,
                ScaleInput {
                    desired,
                    excess_burst_capacity: -111,
                    current_replicas: cur,
                    ready,
                },
            )
        };
        assert_eq!(ebc_input(1, 1, 1, 1).active, ActiveState::Active);
        let r = ebc_input(61, 0, 1, 1);
        assert_eq!(r.active, ActiveState::Inactive);
        // Proxy for 60 s ≥ grace: immediately to zero on the next reconcile.
        let r = ebc_input(62, 0, 1, 1);
        assert_eq!(r.replicas, Some(0));
    }

    #[test]
    fn pod_retention_holds_the_last_pod() {
        let spec = DeciderSpec {
            pod_retention: s(90),
            ..DeciderSpec::default()
        };
        let mut sc = Scaler::new(s(0), TIMEOUT);
        let mut go = |t: u64| {
            sc.reconcile(
                s(t),
                &spec,
                ScaleInput {
                    desired: if t < 5 { 1 } else { 0 },
                    excess_burst_capacity: -1,
                    current_replicas: 1,
                    ready: 1,
                },
            )
        };
        go(1);
        assert_eq!(go(61).active, ActiveState::Inactive);
        // Activator in the path for long, but retention (90 s) not over: keep it.
        assert_eq!(go(120).replicas, None);
        assert_eq!(go(150).replicas, None);
        // max(grace 30, retention 90) reached.
        assert_eq!(go(151).replicas, Some(0));
    }

    #[test]
    fn activation_timeout_scales_to_zero_with_timed_out() {
        let spec = DeciderSpec::default();
        let mut sc = Scaler::new(s(0), TIMEOUT);
        // Never gets a ready pod; the decider wants 0 (say, the request gave up).
        let r = sc.reconcile(s(600), &spec, input(0, 1, 0));
        assert_eq!((r.want, r.replicas), (-1, None));
        assert_eq!(r.active, ActiveState::Activating);
        let r = sc.reconcile(s(630), &spec, input(0, 1, 0));
        assert_eq!(r.replicas, None, "not more than the timeout yet");
        let r = sc.reconcile(s(631), &spec, input(0, 1, 0));
        assert_eq!((r.want, r.replicas), (0, Some(0)));
        assert_eq!(r.active, ActiveState::TimedOut);
        assert_eq!(r.active.reason(), "TimedOut");
        assert_eq!(r.active.status(), "False");
    }

    #[test]
    fn reactivation_from_zero() {
        let spec = DeciderSpec {
            target_burst_capacity: 0.0,
            ..DeciderSpec::default()
        };
        let mut sc = active_at(&spec, 1);
        sc.reconcile(s(61), &spec, input(0, 1, 1));
        let r = sc.reconcile(s(91), &spec, input(0, 1, 1));
        assert_eq!(r.replicas, Some(0));
        // Unknown desired while inactive: stays inactive, activator in path.
        let r = sc.reconcile(s(200), &spec, input(-1, 0, 0));
        assert_eq!((r.replicas, r.active), (None, ActiveState::Inactive));
        assert!(r.activator_in_path);
        // A request arrives: desired 1 ⇒ scale up, Activating until the pod is ready.
        let r = sc.reconcile(s(201), &spec, input(1, 0, 0));
        assert_eq!(r.replicas, Some(1));
        assert_eq!(r.active, ActiveState::Activating);
        let r = sc.reconcile(s(203), &spec, input(1, 1, 1));
        assert_eq!(r.active, ActiveState::Active);
        assert!(!r.activator_in_path);
    }

    #[test]
    fn activator_in_path_rules() {
        let spec = DeciderSpec::default();
        let mut sc = active_at(&spec, 1);
        let mut r = |ebc: i32, ready: u32| {
            sc.reconcile(
                s(2),
                &spec,
                ScaleInput {
                    desired: 3,
                    excess_burst_capacity: ebc,
                    current_replicas: 3,
                    ready,
                },
            )
            .activator_in_path
        };
        assert!(!r(0, 3));
        assert!(r(-1, 3));
        assert!(r(50, 0), "no ready pod");
    }

    #[test]
    fn bound_helpers() {
        assert_eq!(apply_bounds(0, 0, 7), 7);
        assert_eq!(apply_bounds(2, 0, -1), 2);
        assert_eq!(apply_bounds(0, 5, 7), 5);
        assert_eq!(apply_bounds(0, 5, -1), 0);
    }
}
