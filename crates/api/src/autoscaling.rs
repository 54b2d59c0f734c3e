//! `autoscaling.internal.knative.dev/v1alpha1` PodAutoscaler, written by the autoscaler.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::duration::{GoDuration, HOUR, SECOND};
use crate::meta::Status;
use crate::serving::Object;

/// `apiVersion` of the PodAutoscaler.
pub const API_VERSION: &str = "autoscaling.internal.knative.dev/v1alpha1";

pub type PodAutoscaler = Object<PodAutoscalerSpec, PodAutoscalerStatus>;

/// Knative's lower bound for any autoscaling target (`autoscaling.TargetMin`): keeps
/// `ceil(S / T)` finite.
pub const TARGET_MIN: f64 = 0.01;
/// Knative's bounds of the stable window (`autoscaling.WindowMin` / `WindowMax`).
pub const WINDOW_MIN: GoDuration = GoDuration(6 * SECOND);
pub const WINDOW_MAX: GoDuration = GoDuration(HOUR);

/// The PodAutoscaler's condition types (Knative's
/// `pkg/apis/autoscaling/v1alpha1/pa_lifecycle.go`); Ready is [`crate::meta::READY`].
pub mod condition {
    /// Whether the target is receiving traffic (or activating); a Revision's `Active`
    /// mirrors it.
    pub const ACTIVE: &str = "Active";
    pub const SCALE_TARGET_INITIALIZED: &str = "ScaleTargetInitialized";
    pub const SKS_READY: &str = "SKSReady";
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "PodAutoscalerSpec holds the desired state of the PodAutoscaler.")]
pub struct PodAutoscalerSpec {
    #[schemars(
        description = "The maximum number of concurrent requests one replica of the target handles; the autoscaler's target follows from it."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    #[schemars(
        description = "A reference to the object whose replicas are scaled (the revision's deployment)."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_target_ref: Option<Value>,
    #[schemars(
        description = "Whether the target is reachable by traffic: Reachable, Unreachable or empty (unknown)."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reachability: String,
    #[schemars(description = "The protocol the target serves: http1 or h2c.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_type: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "PodAutoscalerStatus communicates the observed state of the PodAutoscaler."
)]
pub struct PodAutoscalerStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(description = "The name of the service that fronts the target's replicas.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    #[schemars(description = "The name of the service the autoscaler scrapes metrics from.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metrics_service_name: String,
    #[schemars(description = "The number of replicas the autoscaler wants.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_scale: Option<i32>,
    #[schemars(description = "The number of ready replicas the target has.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_scale: Option<i32>,
}
