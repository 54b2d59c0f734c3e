//! wisp's configuration: Knative's ConfigMaps (`config-autoscaler`, `config-defaults`, …) in
//! the `knative-serving` namespace, each holding Knative's keys with Knative's defaults and
//! validation (`config/core/configmaps/*.yaml`). `wisp serve --config FILE` seeds them on
//! first start from one YAML file whose top-level keys are the ConfigMap names.
//!
//! Start at [`Config::from_maps`] (and [`Config::from_yaml`] for the file); every struct's
//! `Default` is Knative's shipped default. [`validate_config_map`] is Knative's config
//! webhook; [`LiveConfig`] holds the configuration the ConfigMaps say now.

mod parse;
pub mod request_log;

use std::{collections::BTreeMap, sync::Arc};

use crate::duration::GoDuration;

pub use parse::{ConfigError, maps_from_yaml};

/// Knative's system namespace, where its ConfigMaps live.
pub const NAMESPACE: &str = "knative-serving";

/// The ConfigMaps of [`NAMESPACE`] that are wisp's live configuration, created on first
/// start. `config-observability` configures nothing wisp implements; it exists (and takes
/// any keys) so that tools and habits that edit it find it.
pub const CONFIG_MAPS: [&str; 8] = [
    "config-autoscaler",
    "config-defaults",
    "config-deployment",
    "config-domain",
    "config-features",
    "config-gc",
    "config-network",
    "config-observability",
];

/// The key of a ConfigMap's documentation block, which parsing ignores
/// (knative/pkg `configmap/example.go`).
pub const EXAMPLE_KEY: &str = "_example";

/// The annotation holding the checksum of a shipped ConfigMap's `_example` block: an edit
/// of the block (instead of a setting above it) is refused while it is there.
pub const EXAMPLE_CHECKSUM_ANNOTATION: &str = "knative.dev/example-checksum";

/// The name of Knative's ConfigMap validation webhook, which words wisp's refusals.
pub const WEBHOOK: &str = "config.webhook.serving.knative.dev";

/// knative/pkg `configmap.Checksum`: CRC-32 (IEEE) of the trimmed value, 8 hex digits.
pub fn example_checksum(value: &str) -> String {
    format!("{:08x}", crc32fast::hash(value.trim().as_bytes()))
}

/// Knative's config webhook (knative/pkg `webhook/configmaps`) for a ConfigMap written to
/// [`NAMESPACE`]: its `_example` block unchanged while the checksum annotation is there,
/// then the map's own parse and checks (`NewConfigFromMap` of each). `Err` is the webhook's
/// reason, which kube-apiserver reports as `admission webhook "…" denied the request:
/// validation failed: <reason>`. ConfigMaps wisp does not read pass.
pub fn validate_config_map(
    name: &str,
    data: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<(), String> {
    if !CONFIG_MAPS.contains(&name) {
        return Ok(());
    }
    if let (Some(example), Some(sum)) = (
        data.get(EXAMPLE_KEY),
        annotations.get(EXAMPLE_CHECKSUM_ANNOTATION),
    ) && *sum != example_checksum(example)
    {
        return Err(format!(
            "the update modifies a key in {EXAMPLE_KEY:?} which is probably not what you want. Instead, copy the respective setting to the top-level of the ConfigMap, directly below \"data\""
        ));
    }
    let maps = BTreeMap::from([(name.to_string(), data.clone())]);
    Config::from_maps(&maps).map(|_| ()).map_err(|e| match e {
        ConfigError::Invalid { message, .. } => message,
        ConfigError::Syntax(s) => s,
    })
}

/// The configuration as the ConfigMaps say now: read on every use (each admission, each
/// reconcile, each proxied revision's settings), swapped whole when a ConfigMap changes.
/// Cheap to clone; clones share the value.
#[derive(Clone, Debug, Default)]
pub struct LiveConfig(Arc<arc_swap::ArcSwap<Config>>);

impl LiveConfig {
    pub fn new(config: Config) -> Self {
        LiveConfig(Arc::new(arc_swap::ArcSwap::from_pointee(config)))
    }

    /// The configuration now.
    pub fn load(&self) -> Arc<Config> {
        self.0.load_full()
    }

    /// The configuration now, without touching a shared counter: for the data plane's
    /// per-request reads.
    pub fn guard(&self) -> arc_swap::Guard<Arc<Config>> {
        self.0.load()
    }

    /// Replaces the configuration for every reader at once.
    pub fn set(&self, config: Config) {
        self.0.store(Arc::new(config));
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub autoscaler: AutoscalerConfig,
    pub defaults: DefaultsConfig,
    pub domain: DomainConfig,
    pub network: NetworkConfig,
    pub gc: GcConfig,
    pub deployment: DeploymentConfig,
    pub features: FeaturesConfig,
    pub observability: ObservabilityConfig,
}

/// `config-observability`'s request log keys (Knative's `pkg/observability/config.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct ObservabilityConfig {
    /// `logging.enable-request-log`.
    pub enable_request_log: bool,
    /// `logging.request-log-template` (Go template; "" writes no request log).
    pub request_log_template: String,
    /// `logging.enable-probe-request-log`.
    pub enable_probe_request_log: bool,
}

impl Default for ObservabilityConfig {
    fn default() -> Self {
        ObservabilityConfig {
            enable_request_log: false,
            request_log_template: request_log::DEFAULT_TEMPLATE.to_string(),
            enable_probe_request_log: false,
        }
    }
}

impl ObservabilityConfig {
    /// The template to log requests with, when request logs are on: as Knative's
    /// queue-proxy, either key turns them on, and an empty template keeps them off. The
    /// template was checked when the config was read.
    pub fn request_log(&self) -> Option<request_log::RequestLogTemplate> {
        if !(self.enable_request_log || self.enable_probe_request_log)
            || self.request_log_template.is_empty()
        {
            return None;
        }
        request_log::RequestLogTemplate::parse(&self.request_log_template).ok()
    }
}

/// `config-autoscaler` (Knative's `pkg/autoscaler/config/config.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalerConfig {
    /// `container-concurrency-target-percentage`, stored as a fraction in (0, 1] (70 → 0.7).
    pub container_concurrency_target_fraction: f64,
    /// `container-concurrency-target-default`.
    pub container_concurrency_target_default: f64,
    /// `requests-per-second-target-default`.
    pub rps_target_default: f64,
    /// `target-burst-capacity` (≥ 0 or -1).
    pub target_burst_capacity: f64,
    /// `stable-window`.
    pub stable_window: GoDuration,
    /// `panic-window-percentage`.
    pub panic_window_percentage: f64,
    /// `panic-threshold-percentage`.
    pub panic_threshold_percentage: f64,
    /// `max-scale-up-rate`.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`.
    pub max_scale_down_rate: f64,
    /// `enable-scale-to-zero`.
    pub enable_scale_to_zero: bool,
    /// `scale-to-zero-grace-period`.
    pub scale_to_zero_grace_period: GoDuration,
    /// `scale-to-zero-pod-retention-period`.
    pub scale_to_zero_pod_retention_period: GoDuration,
    /// `pod-autoscaler-class`.
    pub pod_autoscaler_class: String,
    /// `activator-capacity`.
    pub activator_capacity: f64,
    /// `initial-scale`.
    pub initial_scale: i32,
    /// `allow-zero-initial-scale`.
    pub allow_zero_initial_scale: bool,
    /// `min-scale`.
    pub min_scale: i32,
    /// `max-scale` (0 = unlimited).
    pub max_scale: i32,
    /// `scale-down-delay`.
    pub scale_down_delay: GoDuration,
    /// `max-scale-limit` (0 = no limit).
    pub max_scale_limit: i32,
    /// `wisp-hpa-sync-period` (wisp only): how often HPA-class revisions are measured and
    /// scaled, Kubernetes' `--horizontal-pod-autoscaler-sync-period` (15 s). Knative has no
    /// such key: its HPA class hands scaling to the cluster's HPA controller.
    pub wisp_hpa_sync_period: GoDuration,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            container_concurrency_target_fraction: 0.7,
            container_concurrency_target_default: 100.0,
            rps_target_default: 200.0,
            target_burst_capacity: 211.0,
            stable_window: GoDuration::from_secs(60),
            panic_window_percentage: 10.0,
            panic_threshold_percentage: 200.0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            enable_scale_to_zero: true,
            scale_to_zero_grace_period: GoDuration::from_secs(30),
            scale_to_zero_pod_retention_period: GoDuration(0),
            pod_autoscaler_class: KPA_CLASS.to_string(),
            activator_capacity: 100.0,
            initial_scale: 1,
            allow_zero_initial_scale: false,
            min_scale: 0,
            max_scale: 0,
            scale_down_delay: GoDuration(0),
            max_scale_limit: 0,
            wisp_hpa_sync_period: GoDuration::from_secs(15),
        }
    }
}

/// The KPA class name.
pub const KPA_CLASS: &str = "kpa.autoscaling.knative.dev";
/// The HPA class name.
pub const HPA_CLASS: &str = "hpa.autoscaling.knative.dev";

/// `config-defaults` (Knative's `pkg/apis/config/defaults.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultsConfig {
    pub revision_timeout_seconds: i64,
    pub max_revision_timeout_seconds: i64,
    /// Defaults to `revision_timeout_seconds` when the key is absent.
    pub revision_response_start_timeout_seconds: i64,
    pub revision_idle_timeout_seconds: i64,
    /// `revision-{cpu,memory,ephemeral-storage}-{request,limit}`: raw quantity strings.
    pub revision_cpu_request: Option<String>,
    pub revision_memory_request: Option<String>,
    pub revision_ephemeral_storage_request: Option<String>,
    pub revision_cpu_limit: Option<String>,
    pub revision_memory_limit: Option<String>,
    pub revision_ephemeral_storage_limit: Option<String>,
    /// `container-name-template` (a Go template over the parent ObjectMeta; `{{.Name}}` etc.).
    pub container_name_template: String,
    pub init_container_name_template: String,
    pub container_concurrency: i64,
    pub container_concurrency_max_limit: i64,
    pub allow_container_concurrency_zero: bool,
    /// `enable-service-links`: Some(true/false), or None for "leave unset".
    pub enable_service_links: Option<bool>,
}

impl Default for DefaultsConfig {
    fn default() -> Self {
        DefaultsConfig {
            revision_timeout_seconds: 300,
            max_revision_timeout_seconds: 600,
            revision_response_start_timeout_seconds: 300,
            revision_idle_timeout_seconds: 0,
            revision_cpu_request: None,
            revision_memory_request: None,
            revision_ephemeral_storage_request: None,
            revision_cpu_limit: None,
            revision_memory_limit: None,
            revision_ephemeral_storage_limit: None,
            container_name_template: "user-container".into(),
            init_container_name_template: "init-container".into(),
            container_concurrency: 0,
            container_concurrency_max_limit: 1000,
            allow_container_concurrency_zero: true,
            enable_service_links: Some(false),
        }
    }
}

/// `config-domain` (Knative's `pkg/reconciler/route/config/domain.go`): domain suffix → label selector (empty = catch-all).
#[derive(Clone, Debug, PartialEq)]
pub struct DomainConfig {
    pub domains: BTreeMap<String, BTreeMap<String, String>>,
}

impl Default for DomainConfig {
    /// wisp ships `example.com` as the catch-all, like Knative's example config, so that a
    /// fresh install gives external URLs (`http://hello.default.example.com`).
    fn default() -> Self {
        let mut domains = BTreeMap::new();
        domains.insert("example.com".to_string(), BTreeMap::new());
        DomainConfig { domains }
    }
}

/// Go's `strconv.ParseBool` (None: not a boolean).
pub fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `config-network` (`knative.dev/networking`'s `pkg/config/config.go`).
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfig {
    pub ingress_class: String,
    pub certificate_class: String,
    pub domain_template: String,
    pub tag_template: String,
    pub external_domain_tls: bool,
    pub cluster_local_domain_tls: bool,
    pub system_internal_tls: bool,
    /// `Enabled`, `Redirected` or `Disabled`.
    pub http_protocol: String,
    pub rollout_duration_seconds: i64,
    pub autocreate_cluster_domain_claims: bool,
    pub namespace_wildcard_cert_selector: String,
    pub enable_mesh_pod_addressability: bool,
    /// `auto`, `enabled` or `disabled`.
    pub mesh_compatibility_mode: String,
    pub default_external_scheme: String,
    /// The cluster domain used for cluster-local hosts (`svc.<cluster-domain>`).
    pub cluster_domain: String,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            ingress_class: "istio.ingress.networking.knative.dev".into(),
            certificate_class: "cert-manager.certificate.networking.knative.dev".into(),
            domain_template: "{{.Name}}.{{.Namespace}}.{{.Domain}}".into(),
            tag_template: "{{.Tag}}-{{.Name}}".into(),
            external_domain_tls: false,
            cluster_local_domain_tls: false,
            system_internal_tls: false,
            http_protocol: "Enabled".into(),
            rollout_duration_seconds: 0,
            autocreate_cluster_domain_claims: false,
            namespace_wildcard_cert_selector: String::new(),
            enable_mesh_pod_addressability: false,
            mesh_compatibility_mode: "auto".into(),
            default_external_scheme: "http".into(),
            cluster_domain: "cluster.local".into(),
        }
    }
}

/// `config-gc` (Knative's `pkg/gc/config.go`). `None` means `disabled`.
#[derive(Clone, Debug, PartialEq)]
pub struct GcConfig {
    pub retain_since_create_time: Option<GoDuration>,
    pub retain_since_last_active_time: Option<GoDuration>,
    pub min_non_active_revisions: Option<i64>,
    pub max_non_active_revisions: Option<i64>,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            retain_since_create_time: Some(GoDuration::from_secs(48 * 3600)),
            retain_since_last_active_time: Some(GoDuration::from_secs(15 * 3600)),
            min_non_active_revisions: Some(20),
            max_non_active_revisions: Some(1000),
        }
    }
}

/// `config-deployment` (Knative's `pkg/deployment/config.go`). The queue sidecar image is not needed by the
/// process runtime, so it is optional here.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentConfig {
    pub queue_sidecar_image: String,
    pub registries_skipping_tag_resolving: Vec<String>,
    pub digest_resolution_timeout: GoDuration,
    pub progress_deadline: GoDuration,
    pub queue_sidecar_cpu_request: Option<String>,
    pub queue_sidecar_cpu_limit: Option<String>,
    pub queue_sidecar_memory_request: Option<String>,
    pub queue_sidecar_memory_limit: Option<String>,
    pub queue_sidecar_ephemeral_storage_request: Option<String>,
    pub queue_sidecar_ephemeral_storage_limit: Option<String>,
    pub default_affinity_type: String,
    pub pod_is_always_schedulable: bool,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        DeploymentConfig {
            queue_sidecar_image: String::new(),
            registries_skipping_tag_resolving: vec![
                "kind.local".into(),
                "ko.local".into(),
                "dev.local".into(),
            ],
            digest_resolution_timeout: GoDuration::from_secs(10),
            progress_deadline: GoDuration::from_secs(600),
            queue_sidecar_cpu_request: Some("25m".into()),
            queue_sidecar_cpu_limit: None,
            queue_sidecar_memory_request: None,
            queue_sidecar_memory_limit: None,
            queue_sidecar_ephemeral_storage_request: None,
            queue_sidecar_ephemeral_storage_limit: None,
            default_affinity_type: "prefer-spread-revision-over-nodes".into(),
            pod_is_always_schedulable: false,
        }
    }
}

/// A `config-features` flag value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flag {
    Enabled,
    #[default]
    Disabled,
    Allowed,
}

impl Flag {
    /// Enabled or Allowed: the feature may be used.
    pub fn on(self) -> bool {
        !matches!(self, Flag::Disabled)
    }
}

/// `secure-pod-defaults` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecurePodDefaults {
    #[default]
    Disabled,
    AllowRootBounded,
    Enabled,
}

/// `config-features` (Knative's `pkg/apis/config/features.go`), one field per key.
#[derive(Clone, Debug, PartialEq)]
pub struct FeaturesConfig {
    pub multi_container: Flag,
    pub multi_container_probing: Flag,
    pub podspec_affinity: Flag,
    pub podspec_topologyspreadconstraints: Flag,
    pub podspec_hostaliases: Flag,
    pub podspec_nodeselector: Flag,
    pub podspec_tolerations: Flag,
    pub podspec_fieldref: Flag,
    pub podspec_runtimeclassname: Flag,
    pub podspec_dnspolicy: Flag,
    pub podspec_dnsconfig: Flag,
    pub podspec_securitycontext: Flag,
    pub podspec_shareprocessnamespace: Flag,
    pub podspec_hostipc: Flag,
    pub podspec_hostpid: Flag,
    pub podspec_hostnetwork: Flag,
    pub podspec_priorityclassname: Flag,
    pub podspec_schedulername: Flag,
    pub containerspec_addcapabilities: Flag,
    pub podspec_init_containers: Flag,
    pub podspec_persistent_volume_claim: Flag,
    pub podspec_persistent_volume_write: Flag,
    pub podspec_volumes_emptydir: Flag,
    pub podspec_volumes_hostpath: Flag,
    pub podspec_volumes_csi: Flag,
    pub podspec_volumes_ephemeral: Flag,
    pub podspec_volumes_image: Flag,
    pub podspec_volumes_mount_propagation: Flag,
    pub tag_header_based_routing: Flag,
    pub autodetect_http2: Flag,
    pub queueproxy_mount_podinfo: Flag,
    pub queueproxy_resource_defaults: Flag,
    pub secure_pod_defaults: SecurePodDefaults,
}

impl Default for FeaturesConfig {
    fn default() -> Self {
        use Flag::*;
        FeaturesConfig {
            multi_container: Enabled,
            multi_container_probing: Disabled,
            podspec_affinity: Disabled,
            podspec_topologyspreadconstraints: Disabled,
            podspec_hostaliases: Disabled,
            podspec_nodeselector: Disabled,
            podspec_tolerations: Disabled,
            podspec_fieldref: Disabled,
            podspec_runtimeclassname: Disabled,
            podspec_dnspolicy: Disabled,
            podspec_dnsconfig: Disabled,
            podspec_securitycontext: Disabled,
            podspec_shareprocessnamespace: Disabled,
            podspec_hostipc: Disabled,
            podspec_hostpid: Disabled,
            podspec_hostnetwork: Disabled,
            podspec_priorityclassname: Disabled,
            podspec_schedulername: Disabled,
            containerspec_addcapabilities: Disabled,
            podspec_init_containers: Disabled,
            podspec_persistent_volume_claim: Disabled,
            podspec_persistent_volume_write: Disabled,
            podspec_volumes_emptydir: Enabled,
            podspec_volumes_hostpath: Disabled,
            podspec_volumes_csi: Disabled,
            podspec_volumes_ephemeral: Disabled,
            podspec_volumes_image: Disabled,
            podspec_volumes_mount_propagation: Disabled,
            tag_header_based_routing: Disabled,
            autodetect_http2: Disabled,
            queueproxy_mount_podinfo: Disabled,
            queueproxy_resource_defaults: Disabled,
            secure_pod_defaults: SecurePodDefaults::Disabled,
        }
    }
}
