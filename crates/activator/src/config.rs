//! A revision's queue settings, from its (defaulted, immutable) spec.

use std::time::Duration;

use wisp_api::{config::DefaultsConfig, serving::Revision};
use wisp_net::Protocol;
use wisp_queue::QueueConfig;

/// `containerConcurrency`, the three timeouts (unset or 0 falls back to config-defaults,
/// as the webhook would have defaulted them), and the protocol: a serving container port
/// named `h2c` ⇒ HTTP/2 cleartext, anything else ⇒ HTTP/1.1 (reference §6.1).
pub fn queue_config(rev: &Revision, defaults: &DefaultsConfig) -> QueueConfig {
    let spec = &rev.spec;
    let secs = |s: i64| Duration::from_secs(s.max(0).unsigned_abs());
    let timeout = spec
        .timeout_seconds
        .filter(|t| *t > 0)
        .unwrap_or(defaults.revision_timeout_seconds);
    let optional = |v: Option<i64>, default: i64| {
        let s = v.unwrap_or(default);
        (s > 0).then(|| secs(s))
    };
    QueueConfig {
        container_concurrency: u32::try_from(
            spec.container_concurrency
                .unwrap_or(defaults.container_concurrency)
                .max(0),
        )
        .unwrap_or(u32::MAX),
        timeout: secs(timeout),
        response_start_timeout: optional(
            spec.response_start_timeout_seconds,
            defaults.revision_response_start_timeout_seconds,
        )
        .filter(|d| *d < secs(timeout)),
        idle_timeout: optional(
            spec.idle_timeout_seconds,
            defaults.revision_idle_timeout_seconds,
        )
        .filter(|d| *d < secs(timeout)),
        protocol: protocol(rev),
    }
}

/// The revision's protocol, from the serving container's port name.
pub fn protocol(rev: &Revision) -> Protocol {
    let containers = &rev.spec.pod.containers;
    let serving = containers
        .iter()
        .find(|c| !c.ports.is_empty())
        .or_else(|| containers.first());
    match serving
        .and_then(|c| c.ports.first())
        .map(|p| p.name.as_str())
    {
        Some("h2c") => Protocol::H2c,
        _ => Protocol::Http1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(json: serde_json::Value) -> Revision {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn from_spec() {
        let r = rev(serde_json::json!({
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {
                "containerConcurrency": 3,
                "timeoutSeconds": 30,
                "responseStartTimeoutSeconds": 10,
                "idleTimeoutSeconds": 0,
                "containers": [{"image": "x", "ports": [{"name": "h2c", "containerPort": 9000}]}]
            }
        }));
        let c = queue_config(&r, &DefaultsConfig::default());
        assert_eq!(c.container_concurrency, 3);
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.response_start_timeout, Some(Duration::from_secs(10)));
        assert_eq!(c.idle_timeout, None);
        assert_eq!(c.protocol, Protocol::H2c);
    }

    #[test]
    fn defaults_and_http1() {
        let r = rev(serde_json::json!({
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {"containers": [{"image": "x", "ports": [{"name": "http1", "containerPort": 9000}]}]}
        }));
        let d = DefaultsConfig::default();
        let c = queue_config(&r, &d);
        assert_eq!(c.container_concurrency, 0);
        assert_eq!(
            c.timeout,
            Duration::from_secs(d.revision_timeout_seconds as u64)
        );
        assert_eq!(c.protocol, Protocol::Http1);
        let r = rev(serde_json::json!({
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {"containers": [{"image": "x"}]}
        }));
        assert_eq!(protocol(&r), Protocol::Http1);
    }
}
