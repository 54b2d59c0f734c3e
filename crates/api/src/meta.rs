//! Kubernetes object metadata, owner references, conditions and the `Status` error object.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `metav1.ObjectMeta`'s JSON fields, in its order (`k8s.io/apimachinery/pkg/apis/meta/v1/
/// types.go`): stored objects print their `metadata` the way kubectl users expect no matter
/// where the server inserted a field, and the API server tells known metadata fields from
/// unknown ones by it (`fieldValidation`).
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `metadata` of every object, as Kubernetes defines it.
///
/// Fields wisp does not interpret (finalizers, managedFields, …) are kept in `extra` so that
/// nothing a client sent is silently dropped on a round trip through the store.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Standard object metadata: the name and namespace that identify the object, the labels and annotations users attach, and the fields the system maintains (uid, resourceVersion, generation, timestamps, owners)."
)]
pub struct ObjectMeta {
    #[schemars(
        description = "Name of the object, unique within its namespace for its kind. Required when creating, unless generateName is set. Cannot be updated."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[schemars(
        description = "A prefix from which the server builds a unique name when name is not given: a random suffix is appended."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    #[schemars(
        description = "The namespace the object lives in; an empty namespace means \"default\". Cannot be updated."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[schemars(
        description = "Unique identifier of this object for its whole lifetime, set by the server on creation. Read-only."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[schemars(
        description = "Opaque value naming the version of this object the client saw; used for optimistic concurrency (an update with a stale resourceVersion is refused with a conflict) and by watches. Set by the server. Read-only."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[schemars(
        description = "A sequence number for the desired state: the server increments it whenever the spec changes. Read-only."
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    #[schemars(description = "When the server created this object (RFC 3339, UTC). Read-only.")]
    // Go's `metav1.Time` is a struct, which `omitempty` never omits: an object without one
    // (a revision template's metadata) is stored with `creationTimestamp: null`.
    #[serde(default)]
    pub creation_timestamp: Option<String>,
    #[schemars(
        description = "When this object will be deleted, set by the server when a graceful deletion was requested. Read-only."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[schemars(
        description = "Map of string keys and values used to organize and select objects (label selectors)."
    )]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[schemars(
        description = "Map of string keys and values holding arbitrary, non-identifying metadata; tools and controllers store their settings here."
    )]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[schemars(
        description = "Objects this one depends on. When every owner is deleted, this object is garbage-collected."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A pointer from a child to the object that owns it; deleting the owner deletes the child.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Identifies an owning object, which must be in the same namespace as the dependent."
)]
pub struct OwnerReference {
    #[schemars(description = "API version of the owner.")]
    pub api_version: String,
    #[schemars(description = "Kind of the owner.")]
    pub kind: String,
    #[schemars(description = "Name of the owner.")]
    pub name: String,
    #[schemars(description = "UID of the owner.")]
    pub uid: String,
    #[schemars(
        description = "If true, this owner is the managing controller. At most one owner may be the controller."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[schemars(
        description = "If true, the owner cannot be deleted in the foreground until this dependent is gone."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// The condition every Knative object's readiness rolls up into (`apis.ConditionReady`).
pub const READY: &str = "Ready";

/// Condition status: "True", "False" or "Unknown".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// A Knative condition (`knative.dev/pkg/apis.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "Condition describes one aspect of the current state of a resource.")]
pub struct Condition {
    #[schemars(description = "Type of the condition, for example Ready.")]
    #[serde(rename = "type")]
    pub type_: String,
    #[schemars(description = "Status of the condition: True, False or Unknown.")]
    pub status: ConditionStatus,
    #[schemars(
        description = "How to interpret a condition that is not True: Error (the default when empty), Warning or Info."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub severity: String,
    #[schemars(description = "When the condition last changed from one status to another.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[schemars(description = "A one-word CamelCase reason for the condition's last transition.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[schemars(description = "A human-readable message with details about the transition.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The duck-typed status every Knative resource carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[schemars(description = "The metadata.generation the controller last processed.")]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[schemars(description = "The latest available observations of the resource's current state.")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[schemars(
        description = "Additional status information the controllers record as key/value pairs."
    )]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Status {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Kubernetes `Status` object returned for every API error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiStatus {
    pub kind: String,
    pub api_version: String,
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    pub status: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

impl ApiStatus {
    /// A `Failure` status with the given HTTP code, reason (e.g. `NotFound`) and message.
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiStatus {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: BTreeMap::new(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
        }
    }
}
