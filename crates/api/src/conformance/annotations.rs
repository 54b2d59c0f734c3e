//! Revision template annotations through a Service: `pkg/apis/autoscaling/
//! annotation_validation.go` (and its `_test.go` rows), the queue-proxy resource keys of
//! `revision_validation.go`, and the progress deadline.

use serde_json::{Value, json};

use super::{Case, Tally, Want, check, service_with};

fn annotated(annotations: Value) -> Value {
    let mut s = service_with(json!({}));
    s["spec"]["template"]["metadata"] = json!({"annotations": annotations});
    s
}

const A: &str = "spec.template.metadata.annotations";

/// `ViaKey(k)` then `ViaField("metadata.annotations")`: knative.dev/pkg `flatten` splits
/// `[queue.sidecar…]` at its dots, so no part is an index and the key keeps a `.` before it.
const AK: &str = "spec.template.metadata.annotations.";

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    let v = "annotation_validation_test.go TestValidateAnnotations";
    vec![
        Case::new(
            "window too short",
            v,
            "Service",
            annotated(json!({"autoscaling.knative.dev/window": "1s"})),
            Reject(leak(format!(
                "expected 6s <= 1s <= 1h0m0s: {A}.autoscaling.knative.dev/window"
            ))),
        ),
        Case::new(
            "max below min",
            v,
            "Service",
            annotated(
                json!({"autoscaling.knative.dev/min-scale": "5", "autoscaling.knative.dev/max-scale": "2"}),
            ),
            Reject(leak(format!(
                "max-scale=2 is less than min-scale=5: {A}.autoscaling.knative.dev/max-scale, {A}.autoscaling.knative.dev/min-scale"
            ))),
        ),
        Case::new(
            "initial scale 0 not allowed by the cluster",
            v,
            "Service",
            annotated(json!({"autoscaling.knative.dev/initial-scale": "0"})),
            Reject(leak(format!(
                "invalid value: 0: {A}.autoscaling.knative.dev/initial-scale=0 not allowed by cluster"
            ))),
        ),
        Case::new(
            "valid min, max, target, class",
            v,
            "Service",
            annotated(
                json!({"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "10",
                "autoscaling.knative.dev/target": "50", "autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev"}),
            ),
            Accept(None),
        ),
        // Class 15.
        Case::new(
            "activation-scale below min-scale",
            "issue 17 class 15; annotation_validation.go validateMinMaxScale (activation checked first)",
            "Service",
            annotated(
                json!({"autoscaling.knative.dev/min-scale": "3", "autoscaling.knative.dev/activation-scale": "1"}),
            ),
            Reject(leak(format!(
                "min-scale=3 is greater than activation-scale=1: {A}.autoscaling.knative.dev/activation-scale"
            ))),
        ),
        Case::new(
            "activation-scale 1",
            "annotation_validation.go validateMinMaxScale",
            "Service",
            annotated(json!({"autoscaling.knative.dev/activation-scale": "1"})),
            Reject(leak(format!(
                "activation-scale=1 must be greater than 1: {A}.autoscaling.knative.dev/activation-scale"
            ))),
        ),
        // Class 9.
        Case::new(
            "queue-proxy resource annotations must be quantities",
            "issue 17 class 9; revision_validation.go (queue sidecar resource annotations: resource.ParseQuantity)",
            "Service",
            annotated(
                json!({"queue.sidecar.serving.knative.dev/cpu-resource-request": "lots",
                "queue.sidecar.serving.knative.dev/memory-resource-limit": "1Gi"}),
            ),
            Reject(leak(format!(
                "invalid value: lots: {AK}[queue.sidecar.serving.knative.dev/cpu-resource-request]"
            ))),
        ),
        Case::new(
            "queue-proxy resource annotations that parse",
            "revision_validation.go; queue_test.go TestMakeQueueContainerWithResourceAnnotations",
            "Service",
            annotated(
                json!({"queue.sidecar.serving.knative.dev/cpu-resource-request": "1",
                "queue.sidecar.serving.knative.dev/ephemeral-storage-resource-limit": "600Mi"}),
            ),
            Accept(None),
        ),
        Case::new(
            "resource percentage out of range",
            "revision_validation.go validateQueueSidecarAnnotation",
            "Service",
            annotated(json!({"queue.sidecar.serving.knative.dev/resource-percentage": "200"})),
            Reject(leak(format!(
                "expected 0.1 <= 200 <= 100: {AK}[queue.sidecar.serving.knative.dev/resource-percentage]"
            ))),
        ),
        Case::new(
            "progress deadline not at second precision",
            "revision_validation.go (progress-deadline annotation)",
            "Service",
            annotated(json!({"serving.knative.dev/progress-deadline": "10.5s"})),
            Reject(leak(format!(
                "progress-deadline=10.5s is not at second precision: {A}.serving.knative.dev/progress-deadline"
            ))),
        ),
    ]
}

pub(super) fn tally() -> Tally {
    check("annotations", cases())
}

#[test]
fn annotations_conformance() {
    tally();
}
