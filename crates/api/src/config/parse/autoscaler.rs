//! `config-autoscaler`: its keys, defaults and checks, after Knative's `pkg/autoscaler/config/config.go`.

use super::*;

pub(super) fn autoscaler(d: &Data) -> Result<AutoscalerConfig, ConfigError> {
    let mut c = AutoscalerConfig::default();
    d.f64(
        &["container-concurrency-target-percentage"],
        &mut c.container_concurrency_target_fraction,
    )?;
    d.f64(
        &["container-concurrency-target-default"],
        &mut c.container_concurrency_target_default,
    )?;
    d.f64(
        &["requests-per-second-target-default"],
        &mut c.rps_target_default,
    )?;
    d.f64(&["target-burst-capacity"], &mut c.target_burst_capacity)?;
    d.duration(&["stable-window"], &mut c.stable_window)?;
    d.f64(&["panic-window-percentage"], &mut c.panic_window_percentage)?;
    d.f64(
        &["panic-threshold-percentage"],
        &mut c.panic_threshold_percentage,
    )?;
    d.f64(&["max-scale-up-rate"], &mut c.max_scale_up_rate)?;
    d.f64(&["max-scale-down-rate"], &mut c.max_scale_down_rate)?;
    d.bool(&["enable-scale-to-zero"], &mut c.enable_scale_to_zero)?;
    d.duration(
        &["scale-to-zero-grace-period"],
        &mut c.scale_to_zero_grace_period,
    )?;
    d.duration(
        &["scale-to-zero-pod-retention-period"],
        &mut c.scale_to_zero_pod_retention_period,
    )?;
    d.string(&["pod-autoscaler-class"], &mut c.pod_autoscaler_class);
    d.f64(&["activator-capacity"], &mut c.activator_capacity)?;
    d.int(&["initial-scale"], &mut c.initial_scale)?;
    d.bool(
        &["allow-zero-initial-scale"],
        &mut c.allow_zero_initial_scale,
    )?;
    d.int(&["min-scale"], &mut c.min_scale)?;
    d.int(&["max-scale"], &mut c.max_scale)?;
    d.duration(&["scale-down-delay"], &mut c.scale_down_delay)?;
    d.int(&["max-scale-limit"], &mut c.max_scale_limit)?;
    d.duration(&["wisp-hpa-sync-period"], &mut c.wisp_hpa_sync_period)?;

    // Percentages above 1 are percent; values in (0, 1] are a legacy fraction spelling.
    if c.container_concurrency_target_fraction > 1.0 {
        c.container_concurrency_target_fraction /= 100.0;
    }

    // Knative requires at least 6s here; wisp only requires a positive period, so that
    // demos and tests can scale to zero in seconds (docs/differences.md).
    if c.scale_to_zero_grace_period.0 <= 0 {
        return Err(d.invalid(
            "scale-to-zero-grace-period",
            format!(
                "scale-to-zero-grace-period must be positive, was: {}",
                c.scale_to_zero_grace_period
            ),
        ));
    }
    if c.wisp_hpa_sync_period.0 <= 0 {
        return Err(d.invalid(
            "wisp-hpa-sync-period",
            format!(
                "wisp-hpa-sync-period must be positive, was: {}",
                c.wisp_hpa_sync_period
            ),
        ));
    }
    if c.scale_down_delay.0 < 0 {
        return Err(d.invalid(
            "scale-down-delay",
            format!(
                "scale-down-delay cannot be negative, was: {}",
                c.scale_down_delay
            ),
        ));
    }
    if !c.scale_down_delay.is_whole_seconds() {
        return Err(d.invalid(
            "scale-down-delay",
            format!(
                "scale-down-delay = {}, must be specified with at most second precision",
                c.scale_down_delay
            ),
        ));
    }
    if c.scale_to_zero_pod_retention_period.0 < 0 {
        return Err(d.invalid(
            "scale-to-zero-pod-retention-period",
            format!(
                "scale-to-zero-pod-retention-period cannot be negative, was: {}",
                c.scale_to_zero_pod_retention_period
            ),
        ));
    }
    if c.target_burst_capacity < 0.0 && c.target_burst_capacity != -1.0 {
        return Err(d.invalid(
            "target-burst-capacity",
            format!(
                "target-burst-capacity must be either non-negative or -1 (for unlimited), was: {}",
                c.target_burst_capacity
            ),
        ));
    }
    if c.container_concurrency_target_fraction <= 0.0
        || c.container_concurrency_target_fraction > 1.0
    {
        let raw = d
            .get(&["container-concurrency-target-percentage"])
            .map_or(String::new(), |(_, v)| v.to_string());
        return Err(d.invalid(
            "container-concurrency-target-percentage",
            format!(
                "container-concurrency-target-percentage = {raw} is outside of valid range of (0, 100]"
            ),
        ));
    }
    let target = c.container_concurrency_target_fraction * c.container_concurrency_target_default;
    if target < TARGET_MIN {
        return Err(d.invalid(
            "container-concurrency-target-default",
            format!(
                "container-concurrency-target-percentage and container-concurrency-target-default \
                 yield target concurrency of {target}, can't be less than {TARGET_MIN}"
            ),
        ));
    }
    if c.rps_target_default < TARGET_MIN {
        return Err(d.invalid(
            "requests-per-second-target-default",
            format!(
                "requests-per-second-target-default must be at least {TARGET_MIN}, was: {}",
                c.rps_target_default
            ),
        ));
    }
    if c.activator_capacity < 1.0 {
        return Err(d.invalid(
            "activator-capacity",
            format!(
                "activator-capacity = {}, must be at least 1",
                c.activator_capacity
            ),
        ));
    }
    if c.max_scale_up_rate <= 1.0 {
        return Err(d.invalid(
            "max-scale-up-rate",
            format!(
                "max-scale-up-rate = {}, must be greater than 1.0",
                c.max_scale_up_rate
            ),
        ));
    }
    if c.max_scale_down_rate <= 1.0 {
        return Err(d.invalid(
            "max-scale-down-rate",
            format!(
                "max-scale-down-rate = {}, must be greater than 1.0",
                c.max_scale_down_rate
            ),
        ));
    }
    if c.stable_window < WINDOW_MIN || c.stable_window > WINDOW_MAX {
        return Err(d.invalid(
            "stable-window",
            format!(
                "stable-window = {}, must be in [{WINDOW_MIN}; {WINDOW_MAX}] range",
                c.stable_window
            ),
        ));
    }
    if !c.stable_window.is_whole_seconds() {
        return Err(d.invalid(
            "stable-window",
            format!(
                "stable-window = {}, must be specified with at most second precision",
                c.stable_window
            ),
        ));
    }
    if !(1.0..=100.0).contains(&c.panic_window_percentage) {
        return Err(d.invalid(
            "panic-window-percentage",
            format!(
                "panic-window-percentage = {}, must be in [1, 100] interval",
                c.panic_window_percentage
            ),
        ));
    }
    if c.initial_scale < 0 || (c.initial_scale == 0 && !c.allow_zero_initial_scale) {
        return Err(d.invalid(
            "initial-scale",
            format!(
                "initial-scale = {}, must be at least 0 (or at least 1 when allow-zero-initial-scale is false)",
                c.initial_scale
            ),
        ));
    }
    if c.min_scale < 0 {
        return Err(d.invalid(
            "min-scale",
            format!("min-scale = {}, must be at least 0", c.min_scale),
        ));
    }
    if c.max_scale_limit < 0 {
        return Err(d.invalid(
            "max-scale-limit",
            format!(
                "max-scale-limit = {}, must be at least 0",
                c.max_scale_limit
            ),
        ));
    }
    if c.max_scale < 0 {
        return Err(d.invalid(
            "max-scale",
            format!("max-scale = {}, must be at least 0", c.max_scale),
        ));
    }
    if c.max_scale_limit > 0 && (c.max_scale < 1 || c.max_scale > c.max_scale_limit) {
        let shown = if c.max_scale == 0 {
            "0 (unlimited)".to_string()
        } else {
            c.max_scale.to_string()
        };
        return Err(d.invalid(
            "max-scale",
            format!(
                "max-scale = {shown}, must be in [1, {limit}] range when max-scale-limit is {limit}",
                limit = c.max_scale_limit
            ),
        ));
    }
    if c.max_scale > 0 && c.min_scale > c.max_scale {
        return Err(d.invalid(
            "min-scale",
            format!(
                "min-scale ({}) must be less than or equal to max-scale ({})",
                c.min_scale, c.max_scale
            ),
        ));
    }
    Ok(c)
}
