//! What a revision's KPA aims for (Knative's `resources/target.go`,
//! `kpa/resources/decider.go` and `resources/metric.go`): its annotations (with the legacy
//! camelCase aliases), its `containerConcurrency` and `config-autoscaler` resolved into one
//! [`DeciderSpec`].
//!
//! Resolution is lenient like Knative's `PodAutoscaler` getters: an annotation that does not
//! parse falls back to the config value, because the webhook has already rejected invalid
//! ones. [`DeciderSpec::validated`] runs that webhook check first, for inputs (the simulator's
//! command line) that never went through it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use wisp_api::annotations::Key;
use wisp_api::annotations::autoscaling::{
    ACTIVATION_SCALE, ALGORITHM, INITIAL_SCALE, MAX_SCALE, METRIC, MIN_SCALE, PANIC_THRESHOLD,
    PANIC_WINDOW, RETENTION, SCALE_DOWN_DELAY, TARGET, TARGET_BURST_CAPACITY as TBC,
    TARGET_UTILIZATION, WINDOW,
};
use wisp_api::config::AutoscalerConfig;
use wisp_api::duration::GoDuration;
use wisp_api::field_error::Level;
use wisp_api::validation::validate_autoscaling;

pub use crate::aggregation::Aggregation;

/// Annotations of a revision (its `metadata.annotations`).
pub type Annotations = BTreeMap<String, String>;

/// Knative's target utilisation for RPS when no annotation sets one (not configurable).
pub const RPS_TARGET_UTILIZATION: f64 = 0.7;
/// The smallest target value (`autoscaling.TargetMin`).
pub use wisp_api::autoscaling::TARGET_MIN as MIN_TARGET;
/// Added to the progress deadline before an activating revision gives up (`TimedOut`).
pub const ACTIVATION_TIMEOUT_BUFFER: Duration = Duration::from_secs(30);

fn get(m: &Annotations, key: Key) -> Option<&str> {
    key.value(m)
}

fn get_f64(m: &Annotations, key: Key) -> Option<f64> {
    get(m, key)?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

fn get_i32(m: &Annotations, key: Key) -> Option<i32> {
    get(m, key)?.trim().parse::<i32>().ok()
}

fn get_duration(m: &Annotations, key: Key) -> Option<Duration> {
    GoDuration::parse(get(m, key)?).ok()?.to_std()
}

fn std(d: GoDuration) -> Duration {
    d.to_std().unwrap_or_default()
}

/// The scaling metric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// In-flight requests (the default).
    #[default]
    Concurrency,
    /// Requests per second.
    Rps,
}

impl Metric {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Concurrency => "concurrency",
            Metric::Rps => "rps",
        }
    }
}

/// Everything the decider and the scaler need about one revision (Knative's `DeciderSpec`
/// plus the scale bounds and scale-to-zero knobs the KPA reconciler reads from the PA).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeciderSpec {
    pub metric: Metric,
    /// T: the per-pod value aimed for, `max(0.01, Total × TU)`.
    pub target_value: f64,
    /// Total: the per-pod capacity (CC, the target annotation or the default).
    pub total_value: f64,
    /// TBC: ≥ 0, or -1 for "activator always in the path".
    pub target_burst_capacity: f64,
    /// Panic when desired panic pods / ready ≥ this ratio (200 % → 2.0).
    pub panic_threshold: f64,
    pub stable_window: Duration,
    /// `max(1 s, round_1s(stable × panic-window-percentage / 100))`.
    pub panic_window: Duration,
    pub max_scale_up_rate: f64,
    pub max_scale_down_rate: f64,
    /// Minimum non-zero scale when activating; 0 = unset.
    pub activation_scale: i32,
    pub scale_down_delay: Duration,
    pub initial_scale: i32,
    /// Lower bound as configured; the scaler ignores it while the revision is unreachable.
    pub min_scale: i32,
    /// Upper bound; 0 = unlimited.
    pub max_scale: i32,
    pub enable_scale_to_zero: bool,
    pub scale_to_zero_grace_period: Duration,
    /// `scale-to-zero-pod-retention-period`.
    pub pod_retention: Duration,
    pub activator_capacity: f64,
    pub aggregation: Aggregation,
    /// False for a revision no route sends traffic to (routingState `reserve`): it may scale
    /// down without the rate limit, min-scale and scale-down-delay don't hold it up.
    pub reachable: bool,
}

impl Default for DeciderSpec {
    /// The spec of a revision without annotations, CC = 0, under the default config.
    fn default() -> Self {
        DeciderSpec::resolve(&Annotations::new(), 0, &AutoscalerConfig::default())
    }
}

/// Why a spec could not be built from unvalidated input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The annotations fail Knative's webhook validation (the rendered `FieldError`).
    #[error("invalid autoscaling annotations: {0}")]
    InvalidAnnotations(String),
    /// containerConcurrency out of range.
    #[error("invalid containerConcurrency {0}: must be ≥ 0")]
    InvalidContainerConcurrency(i64),
}

impl DeciderSpec {
    /// Resolves the spec of a reachable revision: see the module doc for leniency.
    /// Set `reachable` afterwards for a revision no route targets.
    pub fn resolve(
        annotations: &Annotations,
        container_concurrency: i64,
        cfg: &AutoscalerConfig,
    ) -> DeciderSpec {
        let metric = match get(annotations, METRIC) {
            Some("rps") => Metric::Rps,
            // KPA allows only concurrency and rps; anything else is concurrency, as Knative's
            // `switch` default.
            _ => Metric::Concurrency,
        };
        let (target_value, total_value) =
            resolve_metric_target(annotations, metric, container_concurrency, cfg);

        let stable_window = get_duration(annotations, WINDOW)
            .filter(|d| !d.is_zero())
            .unwrap_or_else(|| std(cfg.stable_window));
        let panic_pct = get_f64(annotations, PANIC_WINDOW).unwrap_or(cfg.panic_window_percentage);
        let panic_threshold_pct =
            get_f64(annotations, PANIC_THRESHOLD).unwrap_or(cfg.panic_threshold_percentage);

        let initial_scale = match get_i32(annotations, INITIAL_SCALE) {
            // 0 only counts when the cluster allows it (`GetInitialScale`).
            Some(v) if v > 0 || cfg.allow_zero_initial_scale => v,
            _ => cfg.initial_scale,
        };
        let aggregation = match get(annotations, ALGORITHM) {
            Some("weighted-exponential" | "weightedExponential") => {
                Aggregation::WeightedExponential
            }
            _ => Aggregation::Linear,
        };

        DeciderSpec {
            metric,
            target_value,
            total_value,
            target_burst_capacity: get_f64(annotations, TBC).unwrap_or(cfg.target_burst_capacity),
            panic_threshold: panic_threshold_pct / 100.0,
            stable_window,
            panic_window: panic_window(stable_window, panic_pct),
            max_scale_up_rate: cfg.max_scale_up_rate,
            max_scale_down_rate: cfg.max_scale_down_rate,
            activation_scale: get_i32(annotations, ACTIVATION_SCALE).unwrap_or(0),
            scale_down_delay: get_duration(annotations, SCALE_DOWN_DELAY)
                .unwrap_or_else(|| std(cfg.scale_down_delay)),
            initial_scale,
            min_scale: get_i32(annotations, MIN_SCALE).unwrap_or(cfg.min_scale),
            max_scale: get_i32(annotations, MAX_SCALE).unwrap_or(cfg.max_scale),
            enable_scale_to_zero: cfg.enable_scale_to_zero,
            scale_to_zero_grace_period: std(cfg.scale_to_zero_grace_period),
            pod_retention: get_duration(annotations, RETENTION)
                .unwrap_or_else(|| std(cfg.scale_to_zero_pod_retention_period)),
            activator_capacity: cfg.activator_capacity,
            aggregation,
            reachable: true,
        }
    }

    /// [`resolve`](Self::resolve) after Knative's webhook checks of the annotations
    /// (`validate_autoscaling`, errors only; warnings pass).
    pub fn validated(
        annotations: &Annotations,
        container_concurrency: i64,
        cfg: &AutoscalerConfig,
    ) -> Result<DeciderSpec, SpecError> {
        if container_concurrency < 0 {
            return Err(SpecError::InvalidContainerConcurrency(
                container_concurrency,
            ));
        }
        let errors = validate_autoscaling(cfg, annotations)
            .via_field("annotations")
            .via_field("metadata")
            .filter(Level::Error);
        if !errors.is_empty() {
            return Err(SpecError::InvalidAnnotations(errors.to_string()));
        }
        Ok(DeciderSpec::resolve(
            annotations,
            container_concurrency,
            cfg,
        ))
    }

    /// Whether pods are scraped: not when TBC = -1 (only activator stats are used).
    pub fn scrapes_pods(&self) -> bool {
        self.target_burst_capacity != -1.0
    }
}

/// `ResolveMetricTarget`: `(TargetValue, TotalValue)`.
fn resolve_metric_target(
    annotations: &Annotations,
    metric: Metric,
    container_concurrency: i64,
    cfg: &AutoscalerConfig,
) -> (f64, f64) {
    let (mut total, mut tu) = match metric {
        Metric::Rps => (cfg.rps_target_default, RPS_TARGET_UTILIZATION),
        Metric::Concurrency if container_concurrency > 0 => (
            container_concurrency as f64,
            cfg.container_concurrency_target_fraction,
        ),
        Metric::Concurrency => (
            cfg.container_concurrency_target_default,
            cfg.container_concurrency_target_fraction,
        ),
    };
    if let Some(target) = get_f64(annotations, TARGET) {
        total = target;
        if metric == Metric::Concurrency && container_concurrency > 0 {
            // Never aim above what the container accepts.
            total = target.min(container_concurrency as f64);
        }
    }
    if let Some(pct) = get_f64(annotations, TARGET_UTILIZATION) {
        tu = pct / 100.0;
    }
    ((total * tu).max(MIN_TARGET), total)
}

/// The panic window: `stable × pct / 100` truncated to nanoseconds (Go's float→Duration),
/// rounded half away from zero to the second, at least one second (`MakeMetric`).
pub fn panic_window(stable_window: Duration, panic_window_percentage: f64) -> Duration {
    let nanos = (stable_window.as_nanos() as f64 * panic_window_percentage / 100.0) as u64;
    let second = 1_000_000_000u64;
    let rounded = (nanos + second / 2) / second;
    Duration::from_secs(rounded.max(1))
}

/// The revision's progress deadline (defined once, on the API types).
pub use wisp_api::annotations::serving::progress_deadline;

/// How long a revision may stay activating before it is scaled to zero with `TimedOut`:
/// progress deadline + 30 s.
pub fn activation_timeout(progress_deadline: Duration) -> Duration {
    progress_deadline + ACTIVATION_TIMEOUT_BUFFER
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::config::DeploymentConfig;

    fn ann(pairs: &[(&str, &str)]) -> Annotations {
        pairs
            .iter()
            .map(|(k, v)| (format!("autoscaling.knative.dev/{k}"), v.to_string()))
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn target_table() {
        let cfg = AutoscalerConfig::default();
        // (name, annotations, CC, metric, target, total)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], i64, Metric, f64, f64);
        let cases: &[Case] = &[
            ("default 70/pod", &[], 0, Metric::Concurrency, 70.0, 100.0),
            ("CC=10 ⇒ 7", &[], 10, Metric::Concurrency, 7.0, 10.0),
            (
                "target annotation",
                &[("target", "50")],
                0,
                Metric::Concurrency,
                35.0,
                50.0,
            ),
            (
                "min(target, CC)",
                &[("target", "50")],
                10,
                Metric::Concurrency,
                7.0,
                10.0,
            ),
            (
                "target below CC",
                &[("target", "5")],
                10,
                Metric::Concurrency,
                3.5,
                5.0,
            ),
            (
                "rps 200 × 0.7",
                &[("metric", "rps")],
                0,
                Metric::Rps,
                140.0,
                200.0,
            ),
            // CC does not cap an rps target.
            (
                "rps target",
                &[("metric", "rps"), ("target", "50")],
                10,
                Metric::Rps,
                35.0,
                50.0,
            ),
            (
                "TU annotation",
                &[("target-utilization-percentage", "50")],
                0,
                Metric::Concurrency,
                50.0,
                100.0,
            ),
            (
                "TU legacy alias",
                &[("targetUtilizationPercentage", "90")],
                10,
                Metric::Concurrency,
                9.0,
                10.0,
            ),
            (
                "rps with TU",
                &[("metric", "rps"), ("target-utilization-percentage", "100")],
                0,
                Metric::Rps,
                200.0,
                200.0,
            ),
            (
                "floor of 0.01",
                &[("target", "0.01")],
                0,
                Metric::Concurrency,
                0.01,
                0.01,
            ),
            (
                "target 10 (the simulator example)",
                &[("target", "10")],
                0,
                Metric::Concurrency,
                7.0,
                10.0,
            ),
        ];
        for &(name, a, cc, metric, target, total) in cases {
            let spec = DeciderSpec::resolve(&ann(a), cc, &cfg);
            assert_eq!(spec.metric, metric, "{name}");
            assert!(
                close(spec.target_value, target),
                "{name}: {}",
                spec.target_value
            );
            assert!(
                close(spec.total_value, total),
                "{name}: {}",
                spec.total_value
            );
        }
    }

    #[test]
    fn config_percentage_changes_target() {
        let cfg = AutoscalerConfig {
            container_concurrency_target_fraction: 0.5,
            container_concurrency_target_default: 40.0,
            ..AutoscalerConfig::default()
        };
        let spec = DeciderSpec::resolve(&Annotations::new(), 0, &cfg);
        assert!(close(spec.target_value, 20.0));
    }

    #[test]
    fn defaults() {
        let s = DeciderSpec::default();
        assert_eq!(s.stable_window, Duration::from_secs(60));
        assert_eq!(s.panic_window, Duration::from_secs(6));
        assert!(close(s.panic_threshold, 2.0));
        assert!(close(s.target_burst_capacity, 211.0));
        assert!(close(s.max_scale_up_rate, 1000.0));
        assert!(close(s.max_scale_down_rate, 2.0));
        assert_eq!(s.activation_scale, 0);
        assert_eq!(s.scale_down_delay, Duration::ZERO);
        assert_eq!((s.initial_scale, s.min_scale, s.max_scale), (1, 0, 0));
        assert!(s.enable_scale_to_zero);
        assert_eq!(s.scale_to_zero_grace_period, Duration::from_secs(30));
        assert_eq!(s.pod_retention, Duration::ZERO);
        assert!(close(s.activator_capacity, 100.0));
        assert_eq!(s.aggregation, Aggregation::Linear);
        assert!(s.reachable);
        assert!(s.scrapes_pods());
    }

    #[test]
    fn annotations_override_config() {
        let a = ann(&[
            ("window", "2m"),
            ("panicWindowPercentage", "25"),
            ("panic-threshold-percentage", "150"),
            ("minScale", "2"),
            ("max-scale", "9"),
            ("initial-scale", "3"),
            ("activation-scale", "4"),
            ("scaleDownDelay", "30s"),
            ("scale-to-zero-pod-retention-period", "1m"),
            ("targetBurstCapacity", "-1"),
            ("metricAggregationAlgorithm", "weightedExponential"),
        ]);
        let s = DeciderSpec::resolve(&a, 0, &AutoscalerConfig::default());
        assert_eq!(s.stable_window, Duration::from_secs(120));
        assert_eq!(s.panic_window, Duration::from_secs(30));
        assert!(close(s.panic_threshold, 1.5));
        assert_eq!((s.min_scale, s.max_scale, s.initial_scale), (2, 9, 3));
        assert_eq!(s.activation_scale, 4);
        assert_eq!(s.scale_down_delay, Duration::from_secs(30));
        assert_eq!(s.pod_retention, Duration::from_secs(60));
        assert!(close(s.target_burst_capacity, -1.0));
        assert!(!s.scrapes_pods());
        assert_eq!(s.aggregation, Aggregation::WeightedExponential);
    }

    #[test]
    fn primary_key_beats_legacy_alias() {
        let a = ann(&[("min-scale", "3"), ("minScale", "1")]);
        assert_eq!(
            DeciderSpec::resolve(&a, 0, &AutoscalerConfig::default()).min_scale,
            3
        );
    }

    #[test]
    fn initial_scale_zero_needs_permission() {
        let a = ann(&[("initial-scale", "0")]);
        let cfg = AutoscalerConfig::default();
        assert_eq!(DeciderSpec::resolve(&a, 0, &cfg).initial_scale, 1);
        let cfg = AutoscalerConfig {
            allow_zero_initial_scale: true,
            ..cfg
        };
        assert_eq!(DeciderSpec::resolve(&a, 0, &cfg).initial_scale, 0);
    }

    #[test]
    fn panic_window_rounding() {
        let s = Duration::from_secs;
        assert_eq!(panic_window(s(60), 10.0), s(6));
        assert_eq!(panic_window(s(6), 1.0), s(1)); // 0.06 s → at least a second
        assert_eq!(panic_window(s(25), 10.0), s(3)); // 2.5 s rounds half up
        assert_eq!(panic_window(s(3600), 100.0), s(3600));
    }

    #[test]
    fn validated_rejects_bad_annotations() {
        let cfg = AutoscalerConfig::default();
        let err = DeciderSpec::validated(&ann(&[("target", "0")]), 0, &cfg).unwrap_err();
        let SpecError::InvalidAnnotations(msg) = err else {
            panic!("{err:?}")
        };
        assert!(msg.contains("target"), "{msg}");
        assert!(DeciderSpec::validated(&ann(&[("target", "10")]), 0, &cfg).is_ok());
        assert_eq!(
            DeciderSpec::validated(&Annotations::new(), -1, &cfg),
            Err(SpecError::InvalidContainerConcurrency(-1))
        );
    }

    #[test]
    fn progress_deadline_and_activation_timeout() {
        let cfg = DeploymentConfig::default();
        assert_eq!(
            progress_deadline(&Annotations::new(), &cfg),
            Duration::from_secs(600)
        );
        let a: Annotations = [(
            "serving.knative.dev/progress-deadline".to_string(),
            "90s".to_string(),
        )]
        .into();
        assert_eq!(progress_deadline(&a, &cfg), Duration::from_secs(90));
        assert_eq!(
            activation_timeout(Duration::from_secs(600)),
            Duration::from_secs(630)
        );
    }
}
