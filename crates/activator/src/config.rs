//! A revision's queue settings, from its (defaulted, immutable) spec.

use std::time::Duration;

use wisp_api::{
    config::DefaultsConfig,
    serving::{ProtocolType, Revision},
};
use wisp_net::Protocol;
use wisp_queue::QueueConfig;

/// `containerConcurrency`, the three timeouts (unset or 0 falls back to config-defaults,
/// as the webhook would have defaulted them) and the protocol of the serving port.
pub fn queue_config(rev: &Revision, defaults: &DefaultsConfig) -> QueueConfig {
    let spec = &rev.spec;
    let timeout = rev.timeout(defaults);
    // The response-start and idle timeouts are off when 0, and when not below the overall
    // timeout (they could never fire).
    let optional = |v: Option<i64>, default: i64| {
        let s = v.unwrap_or(default);
        (s > 0)
            .then(|| Duration::from_secs(s.unsigned_abs()))
            .filter(|d| *d < timeout)
    };
    QueueConfig {
        container_concurrency: u32::try_from(
            spec.container_concurrency
                .unwrap_or(defaults.container_concurrency)
                .max(0),
        )
        .unwrap_or(u32::MAX),
        timeout,
        response_start_timeout: optional(
            spec.response_start_timeout_seconds,
            defaults.revision_response_start_timeout_seconds,
        ),
        idle_timeout: optional(
            spec.idle_timeout_seconds,
            defaults.revision_idle_timeout_seconds,
        ),
        protocol: protocol(rev),
    }
}

/// The revision's data-plane protocol ([`Revision::protocol`]).
pub fn protocol(rev: &Revision) -> Protocol {
    match rev.protocol() {
        ProtocolType::H2c => Protocol::H2c,
        ProtocolType::Http1 => Protocol::Http1,
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
