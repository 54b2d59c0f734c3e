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

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAutoscalerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_target_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reachability: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_type: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAutoscalerStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metrics_service_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_scale: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_scale: Option<i32>,
}
