//! Kubernetes' Horizontal Pod Autoscaler, pure: what an `hpa.autoscaling.knative.dev`
//! revision is scaled by.
//!
//! Knative's HPA class (`pkg/reconciler/autoscaling/hpa/hpa.go`) does not scale anything
//! itself: it writes an `autoscaling/v2` HorizontalPodAutoscaler
//! (`pkg/reconciler/autoscaling/hpa/resources/hpa.go` `MakeHPA`) and Kubernetes' HPA
//! controller scales the Deployment. wisp has no HPA controller to hand that to, so this
//! module is that controller's arithmetic, clock-injected:
//!
//! - [`HpaSpec::resolve`] — `MakeHPA`: the PA's annotations and `config-autoscaler` → min/max
//!   replicas, the metric target and the stabilization windows.
//! - [`replicas_for`] — `replica_calculator.go` (`GetResourceReplicas` for a CPU
//!   utilization target, `GetRawResourceReplicas` / `calcPlainMetricReplicas` for a memory
//!   average-value target): ⌈ready × usage / target⌉ with the 10 % tolerance, missing and
//!   unready pods filled in the direction that damps the change.
//! - [`Hpa::reconcile`] — `horizontal.go` `reconcileAutoscaler` +
//!   `normalizeDesiredReplicasWithBehaviors`: bounds, the stabilization windows (the max
//!   of the recommendations over the scale-down window, the min over the scale-up one) and
//!   the default `autoscaling/v2` scaling policies (up: the larger of +4 pods and +100 %
//!   per 15 s; down: 100 % per 15 s).
//!
//! Time is a [`Duration`] since an arbitrary epoch, as in the rest of this crate.

use std::time::Duration;

use wisp_api::annotations::Key;
use wisp_api::annotations::autoscaling::{MAX_SCALE, METRIC, MIN_SCALE, TARGET, WINDOW};
use wisp_api::config::AutoscalerConfig;
use wisp_api::duration::GoDuration;

use crate::targets::Annotations;

/// `--horizontal-pod-autoscaler-tolerance`: no change while |usage/target − 1| ≤ this.
pub const TOLERANCE: f64 = 0.1;
/// `--horizontal-pod-autoscaler-downscale-stabilization`: the scale-down window when the
/// PA sets no `window` annotation.
pub const DOWNSCALE_STABILIZATION: Duration = Duration::from_secs(300);
/// `autoscaling/v2` defaults (`pkg/apis/autoscaling/v2/defaults.go`): every scaling
/// policy counts changes over 15 s.
pub const POLICY_PERIOD: Duration = Duration::from_secs(15);
/// Default scale-up policies: +4 pods or +100 % per period, whichever is more.
pub const SCALE_UP_PODS: i32 = 4;
pub const SCALE_UP_PERCENT: i32 = 100;
/// Default scale-down policy: −100 % per period (no limit but the bounds).
pub const SCALE_DOWN_PERCENT: i32 = 100;
/// `autoscaling/v2` `DefaultCPUUtilization`: an HPA with no metric aims at 80 % CPU.
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;

/// The resource an HPA-class revision is scaled on (Knative's `autoscaling.CPU` /
/// `autoscaling.Memory`); anything else is a custom metric wisp has no source for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HpaMetric {
    Cpu,
    Memory,
    /// A custom (Pods) metric: Kubernetes reads it from a custom-metrics API adapter.
    Custom(String),
}

impl HpaMetric {
    /// Knative's `PodAutoscaler.Metric()`: the annotation, `cpu` for the HPA class when unset.
    pub fn of(annotations: &Annotations) -> HpaMetric {
        match METRIC.value(annotations) {
            None | Some("cpu") => HpaMetric::Cpu,
            Some("memory") => HpaMetric::Memory,
            Some(other) => HpaMetric::Custom(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            HpaMetric::Cpu => "cpu",
            HpaMetric::Memory => "memory",
            HpaMetric::Custom(name) => name,
        }
    }
}

/// What the HPA aims for, as `MakeHPA` writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HpaTarget {
    /// CPU `averageUtilization`: percent of the pods' CPU requests (`⌈target⌉`).
    CpuUtilization(i32),
    /// Memory `averageValue`, in milli-bytes as the HPA compares quantities
    /// (`target` Mi × 1024 × 1024 × 1000).
    MemoryAverageMilli(i64),
    /// A custom metric (not measurable here).
    Custom(String),
}

/// An HPA-class PodAutoscaler's HorizontalPodAutoscaler spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpaSpec {
    pub metric: HpaMetric,
    pub target: HpaTarget,
    /// `minReplicas`: Knative sets it only when min-scale > 0; the API's default is 1, so
    /// an HPA-class revision never scales to zero.
    pub min_replicas: i32,
    /// `maxReplicas`: max-scale, `i32::MAX` when unlimited.
    pub max_replicas: i32,
    pub scale_up_window: Duration,
    pub scale_down_window: Duration,
    /// How often the HPA controller reconciles (`--horizontal-pod-autoscaler-sync-period`).
    pub sync_period: Duration,
}

fn int(m: &Annotations, key: Key) -> Option<i32> {
    key.value(m)?.trim().parse().ok()
}

impl HpaSpec {
    /// `MakeHPA` (Knative's `pkg/reconciler/autoscaling/hpa/resources/hpa.go`) for a PA
    /// with these annotations; `reachable` is false for a PA whose spec.reachability is
    /// Unreachable (its min-scale does not count: `PodAutoscaler.ScaleBounds`).
    pub fn resolve(annotations: &Annotations, reachable: bool, cfg: &AutoscalerConfig) -> Self {
        let min = if reachable {
            int(annotations, MIN_SCALE).unwrap_or(cfg.min_scale)
        } else {
            0
        };
        let max = int(annotations, MAX_SCALE).unwrap_or(cfg.max_scale);
        let metric = HpaMetric::of(annotations);
        let target = TARGET
            .value(annotations)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|t| t.is_finite());
        let target = match (&metric, target) {
            // `TargetAverageUtilization: ptr.Int32(int32(math.Ceil(target)))`.
            (HpaMetric::Cpu, Some(t)) => HpaTarget::CpuUtilization(t.ceil() as i32),
            // `resource.NewQuantity(int64(target)*1024*1024, resource.BinarySI)`.
            (HpaMetric::Memory, Some(t)) => {
                HpaTarget::MemoryAverageMilli((t as i64).saturating_mul(1024 * 1024 * 1000))
            }
            (HpaMetric::Custom(name), Some(_)) => HpaTarget::Custom(name.clone()),
            // No target: MakeHPA writes no metric, and the v2 API defaults an HPA without
            // metrics to 80 % CPU utilization.
            (_, None) => HpaTarget::CpuUtilization(DEFAULT_CPU_UTILIZATION),
        };
        // `window` sets both stabilization windows (`hpa.Spec.Behavior`); otherwise the
        // controller's defaults: scale up at once, scale down over 5 minutes.
        let window = WINDOW
            .value(annotations)
            .and_then(|v| GoDuration::parse(v).ok())
            .and_then(|d| d.to_std());
        let (up, down) = match window {
            Some(w) => (w, w),
            None => (Duration::ZERO, DOWNSCALE_STABILIZATION),
        };
        HpaSpec {
            metric,
            target,
            min_replicas: min.max(1),
            max_replicas: if max <= 0 { i32::MAX } else { max },
            scale_up_window: up,
            scale_down_window: down,
            sync_period: cfg.wisp_hpa_sync_period.to_std().unwrap_or(Duration::ZERO),
        }
    }
}

/// One pod of the scale target, as `groupPods` sorts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Not started yet (Kubernetes' Pending): ignored.
    Pending,
    /// Running but not ready, or (CPU) ready too recently for a whole metric window since:
    /// ignored for CPU, counted for memory.
    Unready,
    Ready,
}

/// A pod and its metric: millicores of CPU, or milli-bytes of memory; None = no sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodMetric {
    pub state: PodState,
    pub value: Option<i64>,
}

/// Why no replica count could be computed (the HPA's `ScalingActive=False` messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HpaError {
    #[error("no pods returned by selector while calculating replica count")]
    NoPods,
    #[error("missing request for cpu")]
    MissingCpuRequest,
    #[error("did not receive metrics for any ready pods")]
    NoMetrics,
    #[error("unable to get metric {0}: no metrics source for custom metrics")]
    Custom(String),
}

/// What the replica calculator found: the proposal and the current metric value (CPU:
/// utilization percent; memory: average milli-bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub replicas: i32,
    pub current: i64,
}

/// `replica_calculator.go`: the replica count the metric asks for. `current` is the
/// scale target's `spec.replicas`; `cpu_request_milli` each pod's CPU request (every
/// replica of a revision has the same), None when the container sets none.
pub fn replicas_for(
    target: &HpaTarget,
    current: i32,
    pods: &[PodMetric],
    cpu_request_milli: Option<i64>,
) -> Result<Proposal, HpaError> {
    let (cpu, target_value) = match target {
        HpaTarget::CpuUtilization(u) => (true, i64::from(*u)),
        HpaTarget::MemoryAverageMilli(v) => (false, *v),
        HpaTarget::Custom(name) => return Err(HpaError::Custom(name.clone())),
    };
    if pods.is_empty() {
        return Err(HpaError::NoPods);
    }
    // `calculatePodRequests` runs before any metric is looked at.
    let request = match (cpu, cpu_request_milli) {
        (true, Some(r)) if r > 0 => r,
        (true, _) => return Err(HpaError::MissingCpuRequest),
        (false, _) => 0,
    };
    // `groupPods`.
    let (mut ready, mut ignored, mut missing) = (0usize, 0usize, 0usize);
    let mut values = Vec::with_capacity(pods.len());
    for p in pods {
        match (p.state, p.value) {
            (PodState::Pending, _) => ignored += 1,
            (_, None) => missing += 1,
            (PodState::Unready, Some(_)) if cpu => ignored += 1,
            (_, Some(v)) => {
                ready += 1;
                values.push(v);
            }
        }
    }
    if values.is_empty() {
        return Err(HpaError::NoMetrics);
    }
    // `GetResourceUtilizationRatio` (integer percent) / `GetMetricUsageRatio`.
    let ratio = |vals: &[i64]| -> (f64, i64) {
        let total: i64 = vals.iter().sum();
        let n = vals.len() as i64;
        let current = if cpu {
            total * 100 / (request * n)
        } else {
            total / n
        };
        (current as f64 / target_value as f64, current)
    };
    let (usage, current_value) = ratio(&values);
    let proposal = |replicas| Proposal {
        replicas,
        current: current_value,
    };
    let rebalance_ignored = ignored > 0 && usage > 1.0;
    if !rebalance_ignored && missing == 0 {
        if (1.0 - usage).abs() <= TOLERANCE {
            return Ok(proposal(current));
        }
        return Ok(proposal((usage * ready as f64).ceil() as i32));
    }
    // Missing pods: at 100 % of the target on a scale-down, at 0 on a scale-up; ignored
    // pods at 0 on a scale-up — whatever damps the change.
    if missing > 0 {
        let fill = if usage < 1.0 {
            if cpu { request } else { target_value }
        } else {
            0
        };
        values.extend(std::iter::repeat_n(fill, missing));
    }
    if rebalance_ignored {
        values.extend(std::iter::repeat_n(0, ignored));
    }
    let (new_usage, _) = ratio(&values);
    if (1.0 - new_usage).abs() <= TOLERANCE
        || (usage < 1.0 && new_usage > 1.0)
        || (usage > 1.0 && new_usage < 1.0)
    {
        return Ok(proposal(current));
    }
    let replicas = (new_usage * values.len() as f64).ceil() as i32;
    if (new_usage < 1.0 && replicas > current) || (new_usage > 1.0 && replicas < current) {
        return Ok(proposal(current));
    }
    Ok(proposal(replicas))
}

/// One HPA decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpaDecision {
    /// The replicas to run (the HPA's `status.desiredReplicas`).
    pub desired: i32,
    /// The metric's current value (CPU percent of requests, memory milli-bytes), when read.
    pub current_metric: Option<i64>,
    /// Why the metric gave no count (the replicas stay where they are).
    pub error: Option<HpaError>,
}

/// The HPA controller's memory of one scale target: its recent recommendations and scale
/// events (`HorizontalController.recommendations`, `scaleUpEvents`, `scaleDownEvents`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hpa {
    recommendations: Vec<(Duration, i32)>,
    scale_up_events: Vec<(Duration, i32)>,
    scale_down_events: Vec<(Duration, i32)>,
}

/// Strictly inside the last `window` before `now` (Go's `t.After(now - window)`).
fn within(now: Duration, window: Duration, t: Duration) -> bool {
    now.checked_sub(window).is_none_or(|cutoff| t > cutoff)
}

impl Hpa {
    pub fn new() -> Self {
        Hpa::default()
    }

    /// `reconcileAutoscaler` at `now` for a target running `current` replicas
    /// (`spec.replicas`), given what the metric proposed.
    pub fn reconcile(
        &mut self,
        now: Duration,
        spec: &HpaSpec,
        current: i32,
        proposal: Result<Proposal, HpaError>,
    ) -> HpaDecision {
        // `recordInitialRecommendation`.
        if self.recommendations.is_empty() {
            self.recommendations.push((now, current));
        }
        let (desired, current_metric, error) = if current > spec.max_replicas {
            (spec.max_replicas, None, None)
        } else if current < spec.min_replicas {
            (spec.min_replicas, None, None)
        } else {
            match proposal {
                Err(e) => (current, None, Some(e)),
                Ok(p) => (
                    self.normalize(now, spec, current, p.replicas),
                    Some(p.current),
                    None,
                ),
            }
        };
        if desired != current {
            self.store_scale_event(now, current, desired);
        }
        HpaDecision {
            desired,
            current_metric,
            error,
        }
    }

    /// `normalizeDesiredReplicasWithBehaviors`.
    fn normalize(&mut self, now: Duration, spec: &HpaSpec, current: i32, proposed: i32) -> i32 {
        let stabilized = self.stabilize(now, spec, current, proposed);
        self.limit_rate(now, spec, current, stabilized)
    }

    /// `stabilizeRecommendationWithBehaviors`: between the lowest recommendation of the
    /// scale-up window and the highest of the scale-down window, as close to `current` as
    /// that allows; records `proposed`.
    fn stabilize(&mut self, now: Duration, spec: &HpaSpec, current: i32, proposed: i32) -> i32 {
        let (mut up, mut down) = (proposed, proposed);
        for &(t, r) in &self.recommendations {
            if within(now, spec.scale_up_window, t) {
                up = up.min(r);
            }
            if within(now, spec.scale_down_window, t) {
                down = down.max(r);
            }
        }
        let longest = spec.scale_up_window.max(spec.scale_down_window);
        match self
            .recommendations
            .iter_mut()
            .find(|(t, _)| now.checked_sub(longest).is_some_and(|cutoff| *t < cutoff))
        {
            Some(old) => *old = (now, proposed),
            None => self.recommendations.push((now, proposed)),
        }
        current.max(up).min(down)
    }

    /// `convertDesiredReplicasWithBehaviorRate` with the default policies.
    fn limit_rate(&self, now: Duration, spec: &HpaSpec, current: i32, desired: i32) -> i32 {
        let changed = |events: &[(Duration, i32)]| -> i32 {
            events
                .iter()
                .filter(|(t, _)| within(now, POLICY_PERIOD, *t))
                .map(|(_, n)| n)
                .sum()
        };
        let (added, deleted) = (
            changed(&self.scale_up_events),
            changed(&self.scale_down_events),
        );
        if desired > current {
            // `calculateScaleUpLimitWithScalingRules`, selectPolicy Max.
            let start = current - added + deleted;
            let by_pods = start + SCALE_UP_PODS;
            let by_percent =
                (f64::from(start) * (1.0 + f64::from(SCALE_UP_PERCENT) / 100.0)).ceil() as i32;
            let limit = by_pods.max(by_percent).max(current);
            desired.min(spec.max_replicas.min(limit))
        } else if desired < current {
            // `calculateScaleDownLimitWithBehaviors`, selectPolicy Max (the lowest count).
            let start = current + deleted;
            let limit = ((f64::from(start) * (1.0 - f64::from(SCALE_DOWN_PERCENT) / 100.0)) as i32)
                .min(current);
            desired.max(spec.min_replicas.max(limit))
        } else {
            desired
        }
    }

    /// `storeScaleEvent`: events older than the policy period are reused.
    fn store_scale_event(&mut self, now: Duration, prev: i32, new: i32) {
        let (events, change) = if new > prev {
            (&mut self.scale_up_events, new - prev)
        } else {
            (&mut self.scale_down_events, prev - new)
        };
        match events
            .iter_mut()
            .find(|(t, _)| !within(now, POLICY_PERIOD, *t))
        {
            Some(old) => *old = (now, change),
            None => events.push((now, change)),
        }
    }
}

#[cfg(test)]
mod tests;
