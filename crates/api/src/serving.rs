//! `serving.knative.dev/v1` types: Service, Configuration, Revision, Route.
//!
//! Every struct that Knative's field masks apply to keeps the keys it does not model in a
//! flattened `extra` map. Validation reports anything found there as
//! `must not set the field(s)`, so a user who sends an unsupported field gets an error that
//! names it instead of having it silently dropped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::meta::{ObjectMeta, Status};
use crate::quantity::Quantity;

/// API group of the serving resources.
pub const GROUP: &str = "serving.knative.dev";
/// `apiVersion` of the serving resources.
pub const API_VERSION: &str = "serving.knative.dev/v1";

/// A top-level object: `apiVersion`, `kind`, `metadata`, `spec` and (optional) `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<S, T> {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<T>,
}

pub type Service = Object<ServiceSpec, ServiceStatus>;
pub type Configuration = Object<ConfigurationSpec, ConfigurationStatus>;
pub type Revision = Object<RevisionSpec, RevisionStatus>;
pub type Route = Object<RouteSpec, RouteStatus>;

/// The condition types of the serving kinds (Knative's `pkg/apis/serving/v1/*_lifecycle.go`);
/// Ready is [`crate::meta::READY`].
pub mod condition {
    // Service.
    pub const CONFIGURATIONS_READY: &str = "ConfigurationsReady";
    pub const ROUTES_READY: &str = "RoutesReady";
    // Route.
    pub const ALL_TRAFFIC_ASSIGNED: &str = "AllTrafficAssigned";
    pub const INGRESS_READY: &str = "IngressReady";
    pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
    // Revision.
    pub const RESOURCES_AVAILABLE: &str = "ResourcesAvailable";
    pub const CONTAINER_HEALTHY: &str = "ContainerHealthy";
    /// Whether the revision is receiving traffic; not part of Ready. The PodAutoscaler's
    /// condition, mirrored.
    pub use crate::autoscaling::condition::ACTIVE;
}

/// The wire protocol of a revision's serving port (Knative's `ProtocolType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolType {
    /// HTTP/1.1 (anything but a port named `h2c`).
    Http1,
    /// HTTP/2 with prior knowledge (a port named `h2c`): gRPC works end to end.
    H2c,
}

impl ProtocolType {
    /// The PodAutoscaler's `spec.protocolType` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolType::Http1 => "http1",
            ProtocolType::H2c => "h2c",
        }
    }
}

/// Facts about a revision that the controllers, the runtime and the data plane all need,
/// decided once here.
impl Revision {
    /// The serving container ([`PodSpec::serving_container`]).
    pub fn serving_container(&self) -> Option<&Container> {
        self.spec.pod.serving_container()
    }

    /// The protocol of the serving port, from its name (Knative's `RevisionSpec.GetProtocol`
    /// in `pkg/apis/serving/v1/revision_helpers.go`).
    pub fn protocol(&self) -> ProtocolType {
        match self
            .serving_container()
            .and_then(|c| c.ports.first())
            .map(|p| p.name.as_str())
        {
            Some("h2c") => ProtocolType::H2c,
            _ => ProtocolType::Http1,
        }
    }

    /// The request timeout: `timeoutSeconds`, or `config-defaults`' revision timeout when it
    /// is unset or 0 (what the webhook would have defaulted; a stored revision predating a
    /// default may lack it).
    pub fn timeout(&self, defaults: &crate::config::DefaultsConfig) -> std::time::Duration {
        let secs = self
            .spec
            .timeout_seconds
            .filter(|t| *t > 0)
            .unwrap_or(defaults.revision_timeout_seconds);
        std::time::Duration::from_secs(secs.max(0).unsigned_abs())
    }

    /// How long the revision may take to reach its initial scale: see
    /// [`progress_deadline`](crate::annotations::serving::progress_deadline).
    pub fn progress_deadline(&self, cfg: &crate::config::DeploymentConfig) -> std::time::Duration {
        crate::annotations::serving::progress_deadline(&self.metadata.annotations, cfg)
    }
}

/// `Service.spec`: an inline ConfigurationSpec plus an inline RouteSpec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationSpec {
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionTemplateSpec {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RevisionSpec,
}

/// `Revision.spec`: an inline core PodSpec plus Knative's four fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_start_timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<i64>,
    #[serde(flatten)]
    pub pod: PodSpec,
}

/// The subset of a Kubernetes PodSpec that Knative accepts; feature-gated fields are kept as
/// raw JSON because wisp only checks whether they may be set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    /// Feature-gated and always-rejected PodSpec fields, by their JSON name
    /// (`affinity`, `nodeSelector`, `restartPolicy`, …).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl PodSpec {
    /// The serving container: the one declaring a port, else the first. Validation allows
    /// exactly one container with a port when there are several (Knative's
    /// `validateContainersPorts`), so this is the one the requests go to; the others are
    /// sidecars.
    pub fn serving_container(&self) -> Option<&Container> {
        self.containers
            .iter()
            .find(|c| !c.ports.is_empty())
            .or_else(|| self.containers.first())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub termination_message_path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub termination_message_policy: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Container fields Knative rejects (`lifecycle`, `stdin`, `tty`, …).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `resources`: the quantities are parsed when the object is decoded, as kube-apiserver
/// decodes a `resource.Quantity` (a malformed one refuses the object with apimachinery's
/// message), and written back in canonical form (`1000m` is stored as `1`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceRequirements {
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub requests: BTreeMap<String, Quantity>,
    /// `claims` and anything else Knative rejects.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<Value>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default)]
    pub container_port: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// `hostIP`, `hostPort` and anything else Knative rejects.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A probe. The handler actions are kept as typed-enough structs for the runtime to run them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcAction>,
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub initial_delay_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub success_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub failure_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Go omits a zero `int32` tagged `omitempty` (k8s.io/api core/v1 `Probe`'s
/// `initialDelaySeconds`, `timeoutSeconds`, `periodSeconds`, `successThreshold`,
/// `failureThreshold`), so a stored `0` is not written.
fn zero_or_none(v: &Option<i64>) -> bool {
    matches!(v, None | Some(0))
}

/// Go omits a `false` `bool` tagged `omitempty` (k8s.io/api core/v1 `VolumeMount.readOnly`).
fn false_or_none(v: &Option<bool>) -> bool {
    matches!(v, None | Some(false))
}

/// An IntOrString port reference (`8080` or `"http"`); absent is `Value::Null`.
pub type IntOrString = Value;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub port: IntOrString,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpHeader {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpSocketAction {
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub port: IntOrString,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecAction {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcAction {
    #[serde(default)]
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Container security context; only the fields Knative's mask allows are modelled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A volume: its name plus one source, kept as raw JSON under the source's key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(from = "VolumeWire")]
pub struct Volume {
    #[serde(default)]
    pub name: String,
    /// `secret`, `configMap`, `projected`, `emptyDir`, `persistentVolumeClaim`, … by JSON name.
    #[serde(flatten)]
    pub source: BTreeMap<String, Value>,
}

/// A `ResourceList` given as `null` (`limits:` with nothing after it in YAML) is an empty
/// list, as Go decodes a null map.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Quantity>, D::Error> {
    Ok(Option::<BTreeMap<String, Quantity>>::deserialize(d)?.unwrap_or_default())
}

/// How a volume is decoded: as Go decodes `corev1.Volume`, `emptyDir.sizeLimit` is a
/// `resource.Quantity`, so a malformed one refuses the object (apimachinery's message, at
/// `…emptyDir.sizeLimit`) and a valid one is kept in canonical form.
#[derive(Deserialize)]
struct VolumeWire {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "emptyDir")]
    empty_dir: Option<EmptyDirWire>,
    #[serde(flatten)]
    source: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize)]
struct EmptyDirWire {
    #[serde(default, rename = "sizeLimit", skip_serializing_if = "Option::is_none")]
    size_limit: Option<Quantity>,
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

impl From<VolumeWire> for Volume {
    fn from(w: VolumeWire) -> Self {
        let mut source = w.source;
        if let Some(ed) = w.empty_dir {
            // Serializing plain strings and JSON values cannot fail.
            source.insert(
                "emptyDir".to_string(),
                serde_json::to_value(ed).unwrap_or(Value::Null),
            );
        }
        Volume {
            name: w.name,
            source,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub mount_path: String,
    #[serde(default, skip_serializing_if = "false_or_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One entry of `spec.traffic` / `status.traffic`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficTarget {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub configuration_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Addressable {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_ready_revision_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_created_revision_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_ready_revision_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_created_revision_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

/// Knative's `ContainerStatus` (`pkg/apis/serving/v1/revision_types.go`): a container's
/// name and the digest its image resolved to (empty when its registry skips resolution or,
/// on wisp, when it runs a host `command` without an image).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_digest: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_url: String,
    /// What each container's image resolved to, in `spec.containers` order, once the
    /// revision's digests are resolved (Knative's `reconcileDigest`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{DefaultsConfig, DeploymentConfig};

    fn rev(spec: Value) -> Revision {
        serde_json::from_value(json!({"metadata": {"name": "r"}, "spec": spec})).unwrap()
    }

    #[test]
    fn serving_container_and_protocol() {
        let cases = [
            (
                "no container",
                json!({"containers": []}),
                None,
                ProtocolType::Http1,
            ),
            (
                "the only one",
                json!({"containers": [{"name": "a", "image": "x"}]}),
                Some("a"),
                ProtocolType::Http1,
            ),
            (
                "the one with a port",
                json!({"containers": [{"name": "side", "image": "x"},
                    {"name": "app", "image": "y", "ports": [{"name": "h2c", "containerPort": 9}]}]}),
                Some("app"),
                ProtocolType::H2c,
            ),
            (
                "no port anywhere: the first",
                json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
                Some("a"),
                ProtocolType::Http1,
            ),
            (
                "a port not named h2c",
                json!({"containers": [{"name": "a", "image": "x",
                    "ports": [{"name": "http1", "containerPort": 9}]}]}),
                Some("a"),
                ProtocolType::Http1,
            ),
        ];
        for (what, spec, name, protocol) in cases {
            let r = rev(spec);
            assert_eq!(
                r.serving_container().map(|c| c.name.as_str()),
                name,
                "{what}"
            );
            assert_eq!(r.protocol(), protocol, "{what}");
        }
    }

    #[test]
    fn timeout_falls_back_to_config_defaults() {
        let defaults = DefaultsConfig::default();
        let cases = [
            (json!({}), defaults.revision_timeout_seconds),
            (
                json!({"timeoutSeconds": 0}),
                defaults.revision_timeout_seconds,
            ),
            (json!({"timeoutSeconds": 30}), 30),
        ];
        for (spec, want) in cases {
            let secs = rev(spec.clone()).timeout(&defaults).as_secs();
            assert_eq!(i64::try_from(secs).unwrap(), want, "{spec}");
        }
    }

    #[test]
    fn progress_deadline_from_annotation_or_config() {
        let cfg = DeploymentConfig::default();
        let mut r = rev(json!({}));
        assert_eq!(r.progress_deadline(&cfg).as_secs(), 600);
        for (value, want) in [("90s", 90), ("0s", 600), ("nonsense", 600)] {
            r.metadata.annotations.insert(
                crate::annotations::serving::PROGRESS_DEADLINE.name().into(),
                value.into(),
            );
            assert_eq!(r.progress_deadline(&cfg).as_secs(), want, "{value}");
        }
    }
}
