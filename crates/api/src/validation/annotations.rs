//! Annotation checks: `autoscaling.knative.dev/*` (Knative's
//! `pkg/apis/autoscaling/annotation_validation.go`), the rollout-duration and
//! progress-deadline durations (`pkg/apis/serving/metadata_validation.go`) and the
//! `networking.knative.dev/*` keys a revision template may carry.
//!
//! Every error here is built at the annotation key as a path, relative to the annotations
//! map; callers move it under `metadata.annotations` (the key's own dots survive the path
//! join, as in Knative).

use std::collections::BTreeMap;

use crate::config::{AutoscalerConfig, HPA_CLASS, KPA_CLASS};
use crate::duration::GoDuration;
use crate::field_error::FieldError;

type Annotations = BTreeMap<String, String>;

use crate::annotations::Key;
use crate::annotations::autoscaling::{
    ACTIVATION_SCALE, ALGORITHM, CLASS, GROUP, INITIAL_SCALE, MAX_SCALE, METRIC, MIN_SCALE,
    PANIC_THRESHOLD, PANIC_WINDOW, RETENTION, SCALE_DOWN_DELAY, TARGET,
    TARGET_BURST_CAPACITY as TBC, TARGET_UTILIZATION, WINDOW,
};
use crate::annotations::serving::{
    PROGRESS_DEADLINE, QUEUE_RESOURCE_PERCENTAGE, QUEUE_RESOURCES, ROLLOUT_DURATION,
};
use crate::quantity::Quantity;

use crate::autoscaling::{TARGET_MIN, WINDOW_MAX, WINDOW_MIN};

/// Go's `strconv.ParseFloat`: Rust's parser accepts the same decimal/exponent/inf/nan forms
/// that matter in practice.
fn parse_float(v: &str) -> Option<f64> {
    v.parse::<f64>().ok()
}

/// Go's `strconv.ParseInt(v, 10, 32)`: `Err(true)` is a range error.
fn parse_i32(v: &str) -> Result<i32, bool> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(false);
    }
    v.parse::<i32>().map_err(|_| true)
}

/// `ValidateAnnotations`: all autoscaling annotation checks, paths relative to the map.
pub fn validate_autoscaling(cfg: &AutoscalerConfig, m: &Annotations) -> FieldError {
    validate_class(m)
        .also(validate_min_max_scale(cfg, m))
        .also(validate_floats(m))
        .also(validate_window(m))
        .also(validate_last_pod_retention(m))
        .also(validate_scale_down_delay(m))
        .also(validate_metric(m))
        .also(validate_algorithm(m))
        .also(validate_initial_scale(cfg, m))
}

fn validate_class(m: &Annotations) -> FieldError {
    match CLASS.get(m) {
        // Custom autoscalers keep their own domain; only unknown `*.knative.dev` classes
        // are typos of ours.
        Some((k, v)) if v.ends_with(".knative.dev") && v != KPA_CLASS && v != HPA_CLASS => {
            FieldError::invalid_value(v, k)
        }
        _ => FieldError::none(),
    }
}

fn validate_algorithm(m: &Annotations) -> FieldError {
    // Only an explicit KPA class is checked: custom autoscalers may define other values.
    if CLASS.get(m).map(|(_, v)| v) != Some(KPA_CLASS) {
        return FieldError::none();
    }
    match ALGORITHM.get(m) {
        Some((k, v))
            if !v.is_empty()
                && !matches!(v, "linear" | "weighted-exponential" | "weightedExponential") =>
        {
            FieldError::invalid_value(v, k)
        }
        _ => FieldError::none(),
    }
}

fn validate_floats(m: &Annotations) -> FieldError {
    let mut errs = FieldError::none();
    if let Some((k, v)) = PANIC_WINDOW.get(m) {
        match parse_float(v) {
            None => errs = errs.also(FieldError::invalid_value(v, k)),
            Some(f) if !(1.0..=100.0).contains(&f) => {
                errs = errs.also(FieldError::out_of_bounds(v, 1, 100, k));
            }
            _ => {}
        }
    }
    if let Some((k, v)) = PANIC_THRESHOLD.get(m) {
        match parse_float(v) {
            None => errs = errs.also(FieldError::invalid_value(v, k)),
            Some(f) if !(110.0..=1000.0).contains(&f) => {
                errs = errs.also(FieldError::out_of_bounds(v, 110, 1000, k));
            }
            _ => {}
        }
    }
    if let Some((k, v)) = TARGET.get(m) {
        match parse_float(v) {
            None => errs = errs.also(FieldError::invalid_value(v, k)),
            Some(f) if f < TARGET_MIN => {
                errs = errs.also(FieldError::generic(
                    format!("target {v} should be at least {TARGET_MIN}"),
                    &[k],
                ));
            }
            _ => {}
        }
    }
    if let Some((k, v)) = TARGET_UTILIZATION.get(m) {
        match parse_float(v) {
            None => errs = errs.also(FieldError::invalid_value(v, k)),
            Some(f) if !(1.0..=100.0).contains(&f) => {
                errs = errs.also(FieldError::out_of_bounds(v, 1, 100, k));
            }
            _ => {}
        }
    }
    if let Some((k, v)) = TBC.get(m) {
        // -1 means "activator always in path"; any other negative is a mistake.
        match parse_float(v) {
            Some(f) if f >= 0.0 || f == -1.0 => {}
            _ => errs = errs.also(FieldError::invalid_value(v, k)),
        }
    }
    errs
}

fn validate_scale_down_delay(m: &Annotations) -> FieldError {
    let Some((k, v)) = SCALE_DOWN_DELAY.get(m) else {
        return FieldError::none();
    };
    match GoDuration::parse(v) {
        Err(_) => FieldError::invalid_value(v, k),
        // Windows longer than an hour are disallowed, so a longer delay makes no sense either.
        Ok(d) if d.0 < 0 || d > WINDOW_MAX => {
            FieldError::out_of_bounds(v, GoDuration(0), WINDOW_MAX, k)
        }
        Ok(d) if !d.is_whole_seconds() => {
            FieldError::generic("must be specified with at most second precision", &[k])
        }
        Ok(_) => FieldError::none(),
    }
}

fn validate_last_pod_retention(m: &Annotations) -> FieldError {
    let Some((k, v)) = RETENTION.get(m) else {
        return FieldError::none();
    };
    match GoDuration::parse(v) {
        Err(_) => FieldError::invalid_value(v, k),
        Ok(d) if d.0 < 0 || d > WINDOW_MAX => {
            FieldError::out_of_bounds(v, GoDuration(0), WINDOW_MAX, k)
        }
        Ok(_) => FieldError::none(),
    }
}

fn validate_window(m: &Annotations) -> FieldError {
    let Some((k, v)) = WINDOW.get(m) else {
        return FieldError::none();
    };
    match GoDuration::parse(v) {
        Err(_) => FieldError::invalid_value(v, k),
        Ok(d) if d < WINDOW_MIN || d > WINDOW_MAX => {
            FieldError::out_of_bounds(v, WINDOW_MIN, WINDOW_MAX, k)
        }
        Ok(d) if !d.is_whole_seconds() => {
            FieldError::generic("must be specified with at most second precision", &[k])
        }
        Ok(_) => FieldError::none(),
    }
}

/// `getIntGE0`: a missing key is 0; negatives and overflows are out of bounds.
fn int_ge0(m: &Annotations, key: &Key) -> (i32, FieldError) {
    let Some((k, v)) = key.get(m) else {
        return (0, FieldError::none());
    };
    match parse_i32(v) {
        Ok(i) if i >= 0 => (i, FieldError::none()),
        Ok(_) | Err(true) => (0, FieldError::out_of_bounds(v, 0, i32::MAX, k)),
        Err(false) => (0, FieldError::invalid_value(v, k)),
    }
}

fn validate_min_max_scale(cfg: &AutoscalerConfig, m: &Annotations) -> FieldError {
    let (min, mut errs) = int_ge0(m, &MIN_SCALE);
    let (max, e) = int_ge0(m, &MAX_SCALE);
    errs = errs.also(e);

    if max != 0 && max < min {
        errs = errs.also(FieldError::generic(
            format!("max-scale={max} is less than min-scale={min}"),
            &[
                "autoscaling.knative.dev/max-scale",
                "autoscaling.knative.dev/min-scale",
            ],
        ));
    }

    if let Some((k, _)) = MAX_SCALE.get(m) {
        let limit = cfg.max_scale_limit;
        if limit != 0 {
            if max > limit {
                errs = errs.also(FieldError::out_of_bounds(max, 1, limit, k));
            }
            if max == 0 {
                errs = errs.also(FieldError::generic(
                    format!("max-scale=0 (unlimited), must be less than {limit}"),
                    &[k],
                ));
            }
        }
    }

    if let Some((k, v)) = ACTIVATION_SCALE.get(m) {
        // annotation_validation.go `validateMinMaxScale`: min-scale, then max-scale, and only
        // then the lower bound of 2 — the first that fails is the one reported.
        match parse_i32(v) {
            Err(_) => errs = errs.also(FieldError::invalid_value(v, k)),
            Ok(a) if min > a => {
                errs = errs.also(FieldError::generic(
                    format!("min-scale={min} is greater than activation-scale={a}"),
                    &[k],
                ));
            }
            Ok(a) if max != 0 && max < a => {
                errs = errs.also(FieldError::generic(
                    format!("max-scale={max} is less than activation-scale={a}"),
                    &[k],
                ));
            }
            Ok(a) if a < 2 => {
                errs = errs.also(FieldError::generic(
                    format!("activation-scale={a} must be greater than 1"),
                    &[k],
                ));
            }
            Ok(_) => {}
        }
    }
    errs
}

fn validate_metric(m: &Annotations) -> FieldError {
    let Some((_, metric)) = METRIC.get(m) else {
        return FieldError::none();
    };
    let class = CLASS.get(m).map_or(KPA_CLASS, |(_, c)| c);
    let ok = match class {
        KPA_CLASS => matches!(metric, "concurrency" | "rps"),
        HPA_CLASS => !metric.is_empty(),
        // Other autoscaler classes define their own metrics.
        _ => true,
    };
    if ok {
        FieldError::none()
    } else {
        FieldError::invalid_value(metric, "autoscaling.knative.dev/metric")
    }
}

fn validate_initial_scale(cfg: &AutoscalerConfig, m: &Annotations) -> FieldError {
    let Some((k, v)) = INITIAL_SCALE.get(m) else {
        return FieldError::none();
    };
    // Knative puts the explanation into the *path* of these errors; kept byte-for-byte.
    match v.parse::<i64>() {
        Err(_) => FieldError::invalid_value(v, k),
        Ok(i) if i < 0 => FieldError::invalid_value(v, &format!("{k} must be greater than 0")),
        Ok(0) if !cfg.allow_zero_initial_scale => {
            FieldError::invalid_value(v, &format!("{k}=0 not allowed by cluster"))
        }
        Ok(_) => FieldError::none(),
    }
}

/// `ValidateHasNoAutoscalingAnnotation`: autoscaling keys on a Service/Configuration/Route
/// would silently do nothing, so they are rejected with a hint.
pub fn validate_no_autoscaling(m: &Annotations) -> FieldError {
    let mut errs = FieldError::none();
    for key in m.keys().filter(|k| k.starts_with(GROUP)) {
        errs = errs.also(
            FieldError::invalid_key_name(key, "")
                .with_details(r#"autoscaling annotations must be put under "spec.template.metadata.annotations" to work"#),
        );
    }
    errs
}

/// A duration annotation: Go syntax, whole seconds, not negative. `name` is the short name
/// Knative prints in the message (`rollout-duration`, `progress-deadline`).
fn validate_duration(name: &str, k: &str, v: &str) -> FieldError {
    let d = match GoDuration::parse(v) {
        Ok(d) => d,
        Err(_) => return FieldError::invalid_value(v, k),
    };
    // The message repeats the user's spelling: Go's `%v` could print it differently.
    if !d.is_whole_seconds() {
        return FieldError::generic(format!("{name}={v} is not at second precision"), &[k]);
    }
    if d.0 < 0 {
        return FieldError::generic(format!("{name}={v} must be positive"), &[k]);
    }
    FieldError::none()
}

/// `ValidateRolloutDurationAnnotation` (Service and Route metadata).
pub fn validate_rollout_duration(m: &Annotations) -> FieldError {
    match ROLLOUT_DURATION.get(m) {
        Some((k, v)) if !v.is_empty() => validate_duration("rollout-duration", k, v),
        _ => FieldError::none(),
    }
}

/// The progress-deadline template annotation.
pub fn validate_progress_deadline(m: &Annotations) -> FieldError {
    match PROGRESS_DEADLINE.get(m) {
        Some((k, v)) if !v.is_empty() => validate_duration("progress-deadline", k, v),
        _ => FieldError::none(),
    }
}

/// `networking.knative.dev/*` keys that mean something on a revision template.
const ALLOWED_NETWORKING_KEYS: &[&str] = &[
    "networking.knative.dev/ingress.class",
    "networking.knative.dev/ingress-class",
    "networking.knative.dev/certificate.class",
    "networking.knative.dev/certificate-class",
    "networking.knative.dev/disable-external-domain-tls",
    "networking.knative.dev/disableAutoTLS",
    "networking.knative.dev/disable-auto-tls",
    "networking.knative.dev/httpOption",
    "networking.knative.dev/http-protocol",
];

/// Any other `networking.knative.dev/*` annotation on a template (e.g. `visibility`, which
/// is a *label* on the Service) has no effect there, so it is rejected.
pub fn validate_template_networking(m: &Annotations) -> FieldError {
    let mut errs = FieldError::none();
    for key in m.keys() {
        if key.starts_with("networking.knative.dev/")
            && !ALLOWED_NETWORKING_KEYS.contains(&key.as_str())
        {
            errs = errs.also(FieldError::invalid_key_name(key, ""));
        }
    }
    errs
}

/// `pkg/apis/serving/v1/revision_validation.go` `validateQueueSidecarResourceAnnotations`:
/// the (deprecated) resource percentage must be a float in 0.1..100, and each per-resource
/// queue-proxy annotation must parse as a quantity (`resource.ParseQuantity`). Every bad key
/// is reported, not only the first.
pub fn validate_queue_sidecar(m: &Annotations) -> FieldError {
    let mut errs = match QUEUE_RESOURCE_PERCENTAGE.get(m) {
        None => FieldError::none(),
        Some((k, v)) => match parse_float(v) {
            None => FieldError::invalid_value(v, "").via_key(k),
            Some(f) if !(0.1..=100.0).contains(&f) => {
                FieldError::out_of_bounds(f, 0.1, 100, "").via_key(k)
            }
            Some(_) => FieldError::none(),
        },
    };
    for key in &QUEUE_RESOURCES {
        if let Some((k, v)) = key.get(m)
            && Quantity::parse(v).is_err()
        {
            errs = errs.also(FieldError::invalid_value(v, "").via_key(k));
        }
    }
    errs
}
