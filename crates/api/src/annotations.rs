//! The annotation keys wisp reads from a revision (or its parents), each defined once, with
//! the legacy camelCase aliases Knative still honours: the autoscaling keys of Knative's
//! `pkg/apis/autoscaling/register.go` and the serving keys of `pkg/apis/serving/register.go`.
//! Validation (`validation/annotations.rs`), the KPA (`wisp-autoscaler`'s `targets.rs`) and
//! the controllers all look keys up here, so a new alias is one edit.

use std::collections::BTreeMap;

/// An annotation key and its legacy aliases, in priority order (Knative's
/// `kmap.KeyPriority`): the first present wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(&'static [&'static str]);

impl Key {
    /// The current spelling.
    pub const fn name(&self) -> &'static str {
        self.0[0]
    }

    /// Every spelling, the current one first.
    pub const fn aliases(&self) -> &'static [&'static str] {
        self.0
    }

    /// The first spelling present in `m`, with its value.
    pub fn get<'a>(&self, m: &'a BTreeMap<String, String>) -> Option<(&'static str, &'a str)> {
        self.0
            .iter()
            .find_map(|k| m.get(*k).map(|v| (*k, v.as_str())))
    }

    /// The value of the first spelling present in `m`.
    pub fn value<'a>(&self, m: &'a BTreeMap<String, String>) -> Option<&'a str> {
        self.get(m).map(|(_, v)| v)
    }

    /// Whether `k` is one of this key's spellings.
    pub fn matches(&self, k: &str) -> bool {
        self.0.contains(&k)
    }
}

/// kubectl's client-side-apply annotation: never copied from a parent to its children (it
/// describes the parent, and would make every child differ on every apply).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `autoscaling.knative.dev/*`: read from a revision template's annotations.
pub mod autoscaling {
    use super::Key;

    /// The annotation group: any key under it outside a revision template is an error.
    pub const GROUP: &str = "autoscaling.knative.dev";

    pub const CLASS: Key = Key(&["autoscaling.knative.dev/class"]);
    pub const METRIC: Key = Key(&["autoscaling.knative.dev/metric"]);
    pub const TARGET: Key = Key(&["autoscaling.knative.dev/target"]);
    pub const TARGET_UTILIZATION: Key = Key(&[
        "autoscaling.knative.dev/target-utilization-percentage",
        "autoscaling.knative.dev/targetUtilizationPercentage",
    ]);
    pub const WINDOW: Key = Key(&["autoscaling.knative.dev/window"]);
    pub const PANIC_WINDOW: Key = Key(&[
        "autoscaling.knative.dev/panic-window-percentage",
        "autoscaling.knative.dev/panicWindowPercentage",
    ]);
    pub const PANIC_THRESHOLD: Key = Key(&[
        "autoscaling.knative.dev/panic-threshold-percentage",
        "autoscaling.knative.dev/panicThresholdPercentage",
    ]);
    pub const MIN_SCALE: Key = Key(&[
        "autoscaling.knative.dev/min-scale",
        "autoscaling.knative.dev/minScale",
    ]);
    pub const MAX_SCALE: Key = Key(&[
        "autoscaling.knative.dev/max-scale",
        "autoscaling.knative.dev/maxScale",
    ]);
    pub const INITIAL_SCALE: Key = Key(&[
        "autoscaling.knative.dev/initial-scale",
        "autoscaling.knative.dev/initialScale",
    ]);
    pub const ACTIVATION_SCALE: Key = Key(&["autoscaling.knative.dev/activation-scale"]);
    pub const SCALE_DOWN_DELAY: Key = Key(&[
        "autoscaling.knative.dev/scale-down-delay",
        "autoscaling.knative.dev/scaleDownDelay",
    ]);
    pub const RETENTION: Key = Key(&[
        "autoscaling.knative.dev/scale-to-zero-pod-retention-period",
        "autoscaling.knative.dev/scaleToZeroPodRetentionPeriod",
    ]);
    pub const TARGET_BURST_CAPACITY: Key = Key(&[
        "autoscaling.knative.dev/target-burst-capacity",
        "autoscaling.knative.dev/targetBurstCapacity",
    ]);
    pub const ALGORITHM: Key = Key(&[
        "autoscaling.knative.dev/metric-aggregation-algorithm",
        "autoscaling.knative.dev/metricAggregationAlgorithm",
    ]);
}

/// `networking.knative.dev/*` keys read from a Route (a Service's annotations reach its
/// Route) or a DomainMapping.
pub mod networking {
    use std::collections::BTreeMap;

    use super::Key;
    use crate::config::Config;

    /// The route's gradual-rollout state, as JSON, on its KIngress (`RolloutAnnotationKey`).
    pub const ROLLOUT: &str = "networking.knative.dev/rollout";

    /// knative/networking `DisableExternalDomainTLSAnnotationKey` and its older spellings.
    pub const DISABLE_EXTERNAL_DOMAIN_TLS: Key = Key(&[
        "networking.knative.dev/disable-external-domain-tls",
        "networking.knative.dev/disable-auto-tls",
        "networking.knative.dev/disableAutoTLS",
    ]);

    /// knative/networking `HTTPProtocolAnnotationKey` and its older spelling (`httpOption`).
    pub const HTTP_PROTOCOL: Key = Key(&[
        "networking.knative.dev/http-protocol",
        "networking.knative.dev/httpOption",
    ]);

    /// Whether plain HTTP to the external hosts (with a certificate) of an object with these
    /// annotations is redirected to https: the annotation (`enabled` or `redirected`, any
    /// case), else config-network `http-protocol` (`Disabled` serves HTTP, as Knative's
    /// empty option does). knative/serving `pkg/reconciler/route/resources/networking`
    /// `GetHTTPOption`; its error text for another annotation value.
    pub fn http_redirected(
        cfg: &Config,
        annotations: &BTreeMap<String, String>,
    ) -> Result<bool, String> {
        match HTTP_PROTOCOL.value(annotations).filter(|v| !v.is_empty()) {
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "enabled" => Ok(false),
                "redirected" => Ok(true),
                other => Err(format!("incorrect http-protocol annotation: {other}")),
            },
            None => Ok(cfg.network.http_protocol.eq_ignore_ascii_case("Redirected")),
        }
    }

    /// Whether the external hosts of an object with these annotations get a certificate
    /// (knative/serving `pkg/reconciler/route/route.go` `externalDomainTLSEnabled`):
    /// config-network `external-domain-tls` on, and not opted out by the annotation (a value
    /// that is no boolean does not opt out).
    pub fn external_domain_tls(cfg: &Config, annotations: &BTreeMap<String, String>) -> bool {
        cfg.network.external_domain_tls
            && DISABLE_EXTERNAL_DOMAIN_TLS
                .value(annotations)
                .is_none_or(|v| crate::config::parse_go_bool(v) != Some(true))
    }
}

/// `serving.knative.dev/*` keys with a meaning for rollout and start-up.
pub mod serving {
    use std::{collections::BTreeMap, time::Duration};

    use super::Key;
    use crate::{config::DeploymentConfig, duration::GoDuration};

    /// Configures the Route (gradual rollout), never copied to a Configuration.
    pub const ROLLOUT_DURATION: Key = Key(&[
        "serving.knative.dev/rollout-duration",
        "serving.knative.dev/rolloutDuration",
    ]);
    /// The route's rollout duration in whole seconds (Knative's `Route.RolloutDuration`):
    /// 0 when absent or unparsable (validation refuses those on write), so that
    /// `config-network.rollout-duration` applies.
    pub fn rollout_duration_secs(annotations: &BTreeMap<String, String>) -> i64 {
        ROLLOUT_DURATION
            .value(annotations)
            .and_then(|v| GoDuration::parse(v).ok())
            .map_or(0, GoDuration::as_secs)
    }

    /// Who created / last changed an object: set by the API server, never by a user.
    pub const CREATOR: &str = "serving.knative.dev/creator";
    pub const LAST_MODIFIER: &str = "serving.knative.dev/lastModifier";
    /// Comma-sorted names of the routes referencing a configuration or revision.
    pub const ROUTES: &str = "serving.knative.dev/routes";
    pub const ROUTING_STATE_MODIFIED: &str = "serving.knative.dev/routingStateModified";
    /// `true` keeps a revision from garbage collection.
    pub const NO_GC: &str = "serving.knative.dev/no-gc";

    /// How long a revision may take to reach its initial scale.
    pub const PROGRESS_DEADLINE: Key = Key(&["serving.knative.dev/progress-deadline"]);

    /// The queue-proxy's share of the user container's resources, in percent (deprecated by
    /// Knative in favour of the per-resource keys below).
    pub const QUEUE_RESOURCE_PERCENTAGE: Key = Key(&[
        "queue.sidecar.serving.knative.dev/resource-percentage",
        "queue.sidecar.serving.knative.dev/resourcePercentage",
    ]);
    /// The queue-proxy's own requests and limits, each a Kubernetes quantity
    /// (`pkg/apis/serving/register.go` `QueueSidecar*ResourceRequestAnnotation` …).
    pub const QUEUE_RESOURCES: [Key; 6] = [
        Key(&["queue.sidecar.serving.knative.dev/cpu-resource-request"]),
        Key(&["queue.sidecar.serving.knative.dev/cpu-resource-limit"]),
        Key(&["queue.sidecar.serving.knative.dev/memory-resource-request"]),
        Key(&["queue.sidecar.serving.knative.dev/memory-resource-limit"]),
        Key(&["queue.sidecar.serving.knative.dev/ephemeral-storage-resource-request"]),
        Key(&["queue.sidecar.serving.knative.dev/ephemeral-storage-resource-limit"]),
    ];

    /// The progress deadline of a revision (or of its PodAutoscaler, which carries the same
    /// annotations): the annotation when it parses and is not 0, else `config-deployment`'s
    /// `progress-deadline`.
    pub fn progress_deadline(
        annotations: &BTreeMap<String, String>,
        cfg: &DeploymentConfig,
    ) -> Duration {
        PROGRESS_DEADLINE
            .value(annotations)
            .and_then(|v| GoDuration::parse(v).ok())
            .and_then(GoDuration::to_std)
            .filter(|d| !d.is_zero())
            .unwrap_or_else(|| cfg.progress_deadline.to_std().unwrap_or_default())
    }
}

/// `networking.knative.dev/*` keys wisp writes (knative/networking `pkg/apis/networking/register.go`).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_spelling_wins_over_the_legacy_one() {
        let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        type Found = Option<(&'static str, &'static str)>;
        let cases: [(&str, BTreeMap<String, String>, Found); 4] = [
            ("absent", m(&[]), None),
            (
                "legacy only",
                m(&[("autoscaling.knative.dev/minScale", "2")]),
                Some(("autoscaling.knative.dev/minScale", "2")),
            ),
            (
                "current only",
                m(&[("autoscaling.knative.dev/min-scale", "3")]),
                Some(("autoscaling.knative.dev/min-scale", "3")),
            ),
            (
                "both: current wins",
                m(&[
                    ("autoscaling.knative.dev/minScale", "2"),
                    ("autoscaling.knative.dev/min-scale", "3"),
                ]),
                Some(("autoscaling.knative.dev/min-scale", "3")),
            ),
        ];
        for (what, annotations, want) in cases {
            assert_eq!(autoscaling::MIN_SCALE.get(&annotations), want, "{what}");
        }
        assert_eq!(
            autoscaling::MIN_SCALE.name(),
            "autoscaling.knative.dev/min-scale"
        );
        assert!(serving::ROLLOUT_DURATION.matches("serving.knative.dev/rolloutDuration"));
        let rd = |v: &str| {
            serving::rollout_duration_secs(&m(&[("serving.knative.dev/rollout-duration", v)]))
        };
        assert_eq!((rd("380s"), rd("2m"), rd("0"), rd("bad")), (380, 120, 0, 0));
        assert_eq!(serving::rollout_duration_secs(&m(&[])), 0);
    }
}
