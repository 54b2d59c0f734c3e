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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(bound = "S: schemars::JsonSchema + Default + Serialize, T: schemars::JsonSchema")]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "ServiceSpec holds the desired state of the Service: the template of the revisions to create (as a Configuration) and how traffic is split among revisions (as a Route)."
)]
pub struct ServiceSpec {
    #[schemars(
        description = "Template holds the latest specification for the Revision to be stamped out."
    )]
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    #[schemars(
        description = "Traffic specifies how to distribute traffic over a collection of revisions and configurations."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "ConfigurationSpec holds the desired state of the Configuration.")]
pub struct ConfigurationSpec {
    #[schemars(
        description = "Template holds the latest specification for the Revision to be stamped out."
    )]
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "RouteSpec holds the desired state of the Route.")]
pub struct RouteSpec {
    #[schemars(
        description = "Traffic specifies how to distribute traffic over a collection of revisions and configurations."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "RevisionTemplateSpec describes the data a revision should have when created from a template."
)]
pub struct RevisionTemplateSpec {
    #[schemars(
        description = "Metadata for the revisions stamped out from this template: labels, annotations (autoscaling settings among them) and optionally a name."
    )]
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[schemars(description = "The specification of the revisions stamped out from this template.")]
    #[serde(default)]
    pub spec: RevisionSpec,
}

/// `Revision.spec`: an inline core PodSpec plus Knative's four fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "RevisionSpec holds the desired state of the Revision: a pod specification plus the request-handling settings of the revision."
)]
pub struct RevisionSpec {
    #[schemars(
        description = "The maximum number of concurrent requests a single replica of this revision handles. 0 means no limit (the system decides); when unset, the cluster default applies."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    #[schemars(
        description = "The maximum duration in seconds that the request routing layer will wait for a request delivered to a container to finish."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    #[schemars(
        description = "The maximum duration in seconds that the request routing layer will wait for a request delivered to a container to begin sending any network traffic."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_start_timeout_seconds: Option<i64>,
    #[schemars(
        description = "The maximum duration in seconds a request will be allowed to stay open while not receiving any bytes from the user's application."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<i64>,
    #[serde(flatten)]
    pub pod: PodSpec,
}

/// The subset of a Kubernetes PodSpec that Knative accepts; feature-gated fields are kept as
/// raw JSON because wisp only checks whether they may be set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[schemars(
        description = "List of containers belonging to the pod. Exactly one container serves requests (the one that declares a port, or the only one); others are sidecars."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    #[schemars(
        description = "List of initialization containers, run to completion in order before the containers start."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    #[schemars(
        description = "List of volumes that can be mounted by containers belonging to the pod."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[schemars(description = "Name of the ServiceAccount to use to run this pod.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_name: String,
    #[schemars(
        description = "References to secrets in the same namespace to use for pulling any of the images used by this pod."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<Value>,
    #[schemars(
        description = "Whether information about services should be injected into the pod's environment variables."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
    #[schemars(description = "Whether a service account token should be automatically mounted.")]
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

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "A single application container that you want to run within a pod.")]
pub struct Container {
    #[schemars(
        description = "Name of the container specified as a DNS_LABEL. Each container in a pod must have a unique name."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[schemars(description = "Container image name: the image to run for this container.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[schemars(
        description = "Entrypoint array. Not executed within a shell. The image's entrypoint is used if this is not provided."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[schemars(
        description = "Arguments to the entrypoint. The image's command arguments are used if this is not provided."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[schemars(description = "List of environment variables to set in the container.")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[schemars(
        description = "List of sources to populate environment variables in the container: every key of a ConfigMap or Secret becomes a variable."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::env_from_sources")]
    pub env_from: Vec<Value>,
    #[schemars(
        description = "Container's working directory. If not specified, the container runtime's default will be used."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[schemars(description = "Image pull policy: Always, Never or IfNotPresent.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
    #[schemars(
        description = "List of ports to expose from the container. At most one port may be given: the port the container serves requests on."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    #[schemars(
        description = "Periodic probe of container liveness. The container is restarted if the probe fails."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[schemars(
        description = "Periodic probe of container service readiness. A replica receives requests only while this probe succeeds."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    #[schemars(
        description = "StartupProbe indicates that the container has successfully initialized; other probes wait until it succeeds."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[schemars(description = "Compute resources required by this container.")]
    #[serde(default = "some_resources", serialize_with = "resources_or_empty")]
    pub resources: Option<ResourceRequirements>,
    #[schemars(
        description = "SecurityContext defines the security options the container should be run with."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    #[schemars(
        description = "Path at which the file to which the container's termination message will be written is mounted."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub termination_message_path: String,
    #[schemars(
        description = "Indicate how the termination message should be populated: File or FallbackToLogsOnError."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub termination_message_policy: String,
    #[schemars(description = "Pod volumes to mount into the container's filesystem.")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Container fields Knative rejects (`lifecycle`, `stdin`, `tty`, …).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `resources`: the quantities are parsed when the object is decoded, as kube-apiserver
/// decodes a `resource.Quantity` (a malformed one refuses the object with apimachinery's
/// message), and written back in canonical form (`1000m` is stored as `1`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(description = "ResourceRequirements describes the compute resource requirements.")]
pub struct ResourceRequirements {
    #[schemars(description = "Limits describes the maximum amount of compute resources allowed.")]
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub limits: BTreeMap<String, Quantity>,
    #[schemars(
        description = "Requests describes the minimum amount of compute resources required."
    )]
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

impl ResourceRequirements {
    /// Go's zero value: nothing requested, limited or otherwise set.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.requests.is_empty() && self.extra.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "EnvVar represents an environment variable present in a container.")]
pub struct EnvVar {
    #[schemars(description = "Name of the environment variable.")]
    #[serde(default)]
    pub name: String,
    #[schemars(
        description = "Variable value; $(VAR_NAME) references to earlier variables are expanded."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[schemars(
        description = "Source for the environment variable's value. Cannot be used if value is not empty."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "EnvVarSource represents a source for the value of an EnvVar.")]
pub struct EnvVarSource {
    #[schemars(description = "Selects a key of a ConfigMap.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::key_selector")]
    pub config_map_key_ref: Option<Value>,
    #[schemars(description = "Selects a key of a secret in the pod's namespace.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::key_selector")]
    pub secret_key_ref: Option<Value>,
    #[schemars(description = "Selects a field of the pod.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<Value>,
    #[schemars(description = "Selects a resource of the container: limits and requests.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<Value>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "ContainerPort represents a network port in a single container.")]
pub struct ContainerPort {
    #[schemars(
        description = "If specified, this must be an IANA_SVC_NAME; h2c selects HTTP/2 with prior knowledge, http1 (or empty) HTTP/1.1."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[schemars(description = "Number of port to expose on the pod's IP address.")]
    #[serde(default)]
    pub container_port: i64,
    #[schemars(description = "Protocol for port. Must be TCP.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// `hostIP`, `hostPort` and anything else Knative rejects.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A probe. The handler actions are kept as typed-enough structs for the runtime to run them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Probe describes a health check to be performed against a container to determine whether it is alive or ready to receive traffic."
)]
pub struct Probe {
    #[schemars(description = "HTTPGet specifies an HTTP GET request to perform.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    #[schemars(description = "TCPSocket specifies a connection to a TCP port.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[schemars(description = "Exec specifies a command to execute in the container.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[schemars(description = "GRPC specifies a GRPC HealthCheckRequest.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcAction>,
    #[schemars(
        description = "Number of seconds after the container has started before probes are initiated."
    )]
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub initial_delay_seconds: Option<i64>,
    #[schemars(description = "Number of seconds after which the probe times out.")]
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub timeout_seconds: Option<i64>,
    #[schemars(
        description = "How often (in seconds) to perform the probe. 0 on a readiness probe means probing aggressively until the first success."
    )]
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub period_seconds: Option<i64>,
    #[schemars(
        description = "Minimum consecutive successes for the probe to be considered successful after having failed."
    )]
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub success_threshold: Option<i64>,
    #[schemars(
        description = "Minimum consecutive failures for the probe to be considered failed after having succeeded."
    )]
    #[serde(default, skip_serializing_if = "zero_or_none")]
    pub failure_threshold: Option<i64>,
    #[schemars(
        description = "Optional duration in seconds the pod needs to terminate gracefully upon probe failure."
    )]
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

/// Go stores an absent IntOrString that has no `omitempty` (`HTTPGetAction.Port`,
/// `TCPSocketAction.Port`) as its zero value, the integer `0`: so does wisp (issue 17, class
/// 22: the stored object is Go's round trip of the typed object).
fn port_or_zero<S: serde::Serializer>(port: &IntOrString, s: S) -> Result<S::Ok, S::Error> {
    match port {
        Value::Null => s.serialize_i64(0),
        other => other.serialize(s),
    }
}

fn some_resources() -> Option<ResourceRequirements> {
    Some(ResourceRequirements::default())
}

/// Decodes an IntOrString port without `omitempty`: absent or `null` is Go's zero, `0`.
fn port_null_as_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<IntOrString, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(if v.is_null() { Value::from(0) } else { v })
}

fn zero_port() -> IntOrString {
    Value::from(0)
}

/// `Container.Resources` is a struct in Go: `omitempty` never omits it, so an absent one is
/// stored as `{}`.
fn resources_or_empty<S: serde::Serializer>(
    r: &Option<ResourceRequirements>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match r {
        Some(r) => r.serialize(s),
        None => ResourceRequirements::default().serialize(s),
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "HTTPGetAction describes an action based on HTTP Get requests.")]
pub struct HttpGetAction {
    #[schemars(description = "Path to access on the HTTP server.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[schemars(description = "Name or number of the port to access on the container.")]
    #[serde(
        default = "zero_port",
        deserialize_with = "port_null_as_zero",
        serialize_with = "port_or_zero"
    )]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub port: IntOrString,
    #[schemars(description = "Host name to connect to, defaults to the pod IP.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[schemars(description = "Scheme to use for connecting to the host. Defaults to HTTP.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    #[schemars(description = "Custom headers to set in the request.")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(description = "HTTPHeader describes a custom header to be used in HTTP probes.")]
pub struct HttpHeader {
    #[schemars(description = "The header field name.")]
    #[serde(default)]
    pub name: String,
    #[schemars(description = "The header field value.")]
    #[serde(default)]
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "TCPSocketAction describes an action based on opening a socket.")]
pub struct TcpSocketAction {
    #[schemars(description = "Number or name of the port to access on the container.")]
    #[serde(
        default = "zero_port",
        deserialize_with = "port_null_as_zero",
        serialize_with = "port_or_zero"
    )]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub port: IntOrString,
    #[schemars(description = "Optional: Host name to connect to, defaults to the pod IP.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "ExecAction describes a \"run in container\" action.")]
pub struct ExecAction {
    #[schemars(
        description = "Command is the command line to execute inside the container; it is not run in a shell."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "GRPCAction describes a gRPC health check.")]
pub struct GrpcAction {
    #[schemars(description = "Port number of the gRPC service.")]
    #[serde(default)]
    pub port: i64,
    #[schemars(
        description = "Service is the name of the service to place in the gRPC HealthCheckRequest."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Container security context; only the fields Knative's mask allows are modelled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "SecurityContext holds security configuration that will be applied to a container."
)]
pub struct SecurityContext {
    #[schemars(description = "The capabilities to add/drop when running containers.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[schemars(description = "Whether this container has a read-only root filesystem.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    #[schemars(description = "The UID to run the entrypoint of the container process.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    #[schemars(description = "The GID to run the entrypoint of the container process.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    #[schemars(description = "Indicates that the container must run as a non-root user.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    #[schemars(
        description = "Controls whether a process can gain more privileges than its parent process."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    #[schemars(description = "The seccomp options to use by this container.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<Value>,
    #[schemars(description = "Run container in privileged mode.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(description = "Adds and removes POSIX capabilities from running containers.")]
pub struct Capabilities {
    #[schemars(description = "Added capabilities.")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    #[schemars(description = "Removed capabilities.")]
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

/// A volume's schema: its name, and its source kept as given (wisp reads `secret`,
/// `configMap`, `projected` and `emptyDir`; validation refuses the sources Knative does not
/// allow).
impl schemars::JsonSchema for Volume {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Volume".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut properties = crate::schema::volume_sources();
        properties["name"] = serde_json::json!({
            "description": "name of the volume. Must be a DNS_LABEL and unique within the pod.",
            "type": "string",
        });
        schemars::json_schema!({
            "description": "Volume represents a named volume in a pod that may be accessed by any container in the pod. Besides its name it carries exactly one volume source: secret, configMap, projected or emptyDir (other sources are refused).",
            "type": "object",
            "required": ["name"],
            "properties": properties,
        })
    }
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

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "VolumeMount describes a mounting of a Volume within a container.")]
pub struct VolumeMount {
    #[schemars(description = "This must match the Name of a Volume.")]
    #[serde(default)]
    pub name: String,
    #[schemars(description = "Path within the container at which the volume should be mounted.")]
    #[serde(default)]
    pub mount_path: String,
    #[schemars(
        description = "Mounted read-only if true, read-write otherwise (false or unspecified)."
    )]
    #[serde(default, skip_serializing_if = "false_or_none")]
    pub read_only: Option<bool>,
    #[schemars(
        description = "Path within the volume from which the container's volume should be mounted."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    #[schemars(
        description = "Determines how mounts are propagated from the host to container and the other way around."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One entry of `spec.traffic` / `status.traffic`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "TrafficTarget holds a single entry of the routing table for a Route.")]
pub struct TrafficTarget {
    #[schemars(
        description = "Tag is optionally used to expose a dedicated url for referencing this target exclusively."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    #[schemars(
        description = "RevisionName of a specific revision to which to send this portion of traffic."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision_name: String,
    #[schemars(
        description = "ConfigurationName of a configuration to whose latest revision traffic is sent. In a Service, the Service's own configuration is meant."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub configuration_name: String,
    #[schemars(
        description = "LatestRevision may be set to true to indicate that the latest ready revision of the configuration should be used for this traffic target."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<bool>,
    #[schemars(
        description = "Percent indicates that percentage based routing should be used and the value indicates the percent of traffic that is routed to this revision or configuration."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
    #[schemars(
        description = "URL displays the URL for accessing named traffic targets (those with a tag)."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(
    description = "Addressable provides a generic mechanism for a resource to publish the address it can be reached at."
)]
pub struct Addressable {
    #[schemars(description = "The URL of the address.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "ServiceStatus represents the current state of the Service.")]
pub struct ServiceStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(
        description = "LatestReadyRevisionName holds the name of the latest Revision stamped out from this Configuration that has had its \"Ready\" condition become \"True\"."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_ready_revision_name: String,
    #[schemars(
        description = "LatestCreatedRevisionName is the last revision that was created from this Configuration."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_created_revision_name: String,
    #[schemars(
        description = "URL holds the url that will distribute traffic over the provided traffic targets."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[schemars(
        description = "Address holds the information needed for a Route to be the target of an event."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[schemars(
        description = "Traffic holds the configured traffic distribution, with revision names resolved."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "ConfigurationStatus communicates the observed state of the Configuration."
)]
pub struct ConfigurationStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(
        description = "LatestReadyRevisionName holds the name of the latest Revision stamped out from this Configuration that has had its \"Ready\" condition become \"True\"."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_ready_revision_name: String,
    #[schemars(
        description = "LatestCreatedRevisionName is the last revision that was created from this Configuration."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_created_revision_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "RouteStatus communicates the observed state of the Route.")]
pub struct RouteStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(
        description = "URL holds the url that will distribute traffic over the provided traffic targets."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[schemars(
        description = "Address holds the information needed for a Route to be the target of an event."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[schemars(
        description = "Traffic holds the configured traffic distribution, with revision names resolved."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

/// Knative's `ContainerStatus` (`pkg/apis/serving/v1/revision_types.go`): a container's
/// name and the digest its image resolved to (empty when its registry skips resolution or,
/// on wisp, when it runs a host `command` without an image).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "ContainerStatus holds the information of a container's image.")]
pub struct ContainerStatus {
    #[schemars(description = "The name of the container.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[schemars(
        description = "The digest the container's image resolved to when the revision was created."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_digest: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "RevisionStatus communicates the observed state of the Revision.")]
pub struct RevisionStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(
        description = "LogURL specifies the generated logging url for this particular revision based on the revision url template specified in the controller's config."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_url: String,
    #[schemars(
        description = "ContainerStatuses is a slice of images present in .Spec.Container[*].Image to their respective digests and their container name."
    )]
    /// What each container's image resolved to, in `spec.containers` order, once the
    /// revision's digests are resolved (Knative's `reconcileDigest`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    #[schemars(
        description = "InitContainerStatuses is a slice of images present in .Spec.InitContainer[*].Image to their respective digests and their container name."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[schemars(
        description = "ActualReplicas reflects the amount of ready replicas running this revision."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_replicas: Option<i32>,
    #[schemars(
        description = "DesiredReplicas reflects the desired amount of replicas running this revision."
    )]
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
