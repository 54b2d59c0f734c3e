//! `config-deployment`: its keys, defaults and checks, after Knative's `pkg/deployment/config.go`.

use super::*;

pub(super) fn deployment(d: &Data) -> Result<DeploymentConfig, ConfigError> {
    let mut c = DeploymentConfig::default();
    d.string(
        &["queue-sidecar-image", "queueSidecarImage"],
        &mut c.queue_sidecar_image,
    );
    if let Some((_, v)) = d.get(&["registries-skipping-tag-resolving"]) {
        let mut regs: Vec<String> = Vec::new();
        for r in v.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            if !regs.iter().any(|x| x == r) {
                regs.push(r.to_string());
            }
        }
        c.registries_skipping_tag_resolving = regs;
    }
    d.duration(
        &["digest-resolution-timeout"],
        &mut c.digest_resolution_timeout,
    )?;
    d.duration(&["progress-deadline"], &mut c.progress_deadline)?;
    d.quantity(
        &["queue-sidecar-cpu-request"],
        &mut c.queue_sidecar_cpu_request,
    )?;
    d.quantity(&["queue-sidecar-cpu-limit"], &mut c.queue_sidecar_cpu_limit)?;
    d.quantity(
        &["queue-sidecar-memory-request"],
        &mut c.queue_sidecar_memory_request,
    )?;
    d.quantity(
        &["queue-sidecar-memory-limit"],
        &mut c.queue_sidecar_memory_limit,
    )?;
    d.quantity(
        &["queue-sidecar-ephemeral-storage-request"],
        &mut c.queue_sidecar_ephemeral_storage_request,
    )?;
    d.quantity(
        &["queue-sidecar-ephemeral-storage-limit"],
        &mut c.queue_sidecar_ephemeral_storage_limit,
    )?;
    if let Some((k, v)) = d.get(&["default-affinity-type"]) {
        c.default_affinity_type = one_of(d, k, v, &["none", "prefer-spread-revision-over-nodes"])?;
    }
    d.bool(
        &["pod-is-always-schedulable"],
        &mut c.pod_is_always_schedulable,
    )?;

    if c.progress_deadline.0 <= 0 {
        return Err(d.invalid(
            "progress-deadline",
            format!(
                "progress-deadline cannot be a non-positive duration, was {}",
                c.progress_deadline
            ),
        ));
    }
    if !c.progress_deadline.is_whole_seconds() {
        return Err(d.invalid(
            "progress-deadline",
            format!(
                "progress-deadline = {}, must be specified with at most second precision",
                c.progress_deadline
            ),
        ));
    }
    if c.digest_resolution_timeout.0 <= 0 {
        return Err(d.invalid(
            "digest-resolution-timeout",
            format!(
                "digest-resolution-timeout cannot be a non-positive duration, was {}",
                c.digest_resolution_timeout
            ),
        ));
    }
    Ok(c)
}
