//! Revisions: `pkg/apis/serving/v1/revision_validation.go` (newest: only the configuration
//! label is checked), `revision_defaults.go` and `revision_defaults_test.go`.

use serde_json::{Value, json};

use super::{Case, Tally, Want, check, container, defaulted_spec, merge};

fn revision(patch: Value) -> Value {
    let mut r = json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Revision",
        "metadata": {"name": "valid-00001", "namespace": "default"},
        "spec": {"containers": [container(json!({}))]}
    });
    merge(&mut r, patch);
    r
}

fn with_container(fields: Value) -> Value {
    revision(json!({"spec": {"containers": [container(fields)]}}))
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    vec![
        Case::new(
            "defaults",
            "revision_defaults_test.go \"defaults\" (container name, resources, readiness probe, timeout, concurrency)",
            "Revision",
            revision(json!({})),
            Accept(Some(defaulted_spec(json!({})))),
        ),
        Case::new(
            "readiness probe kept, thresholds defaulted",
            "revision_defaults_test.go \"with readiness probe\" (applyProbes: successThreshold 1)",
            "Revision",
            with_container(json!({"readinessProbe": {"httpGet": {"path": "/health"}}})),
            Accept(Some(defaulted_spec(json!({
                "readinessProbe": {"httpGet": {"path": "/health", "port": 0}, "successThreshold": 1}})))),
        ),
        // Class 22: Go's omitempty per field decides what is stored.
        Case::new(
            "probe zero values",
            "issue 17 class 22; k8s.io/api core/v1 Probe (int32 omitempty), TCPSocketAction.Port (no omitempty)",
            "Revision",
            with_container(
                json!({"readinessProbe": {"tcpSocket": {}, "periodSeconds": 0, "timeoutSeconds": 0,
                "failureThreshold": 0, "initialDelaySeconds": 0, "successThreshold": 1}}),
            ),
            Accept(Some(defaulted_spec(json!({})))),
        ),
        Case::new(
            "volume mount readOnly false omitted",
            "issue 17 class 22; core/v1 VolumeMount.ReadOnly (bool omitempty); revision_defaults.go (emptyDir stays writable)",
            "Revision",
            revision(json!({"spec": {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [container(json!({"volumeMounts": [{"name": "scratch", "mountPath": "/s", "readOnly": false}]}))]}})),
            Accept(Some({
                let mut s = defaulted_spec(
                    json!({"volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}),
                );
                s["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
                s
            })),
        ),
        // Class 21.
        Case::new(
            "canonical quantities",
            "issue 17 class 21; apimachinery resource.Quantity String()",
            "Revision",
            with_container(
                json!({"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}, "limits": {"cpu": 2, "memory": "1e3"}}}),
            ),
            Accept(Some(defaulted_spec(json!({
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1e3"}}})))),
        ),
        // Class 6.
        Case::new(
            "configuration label without an owner",
            "revision_validation.go ValidateLabels / verifyLabelOwnerRef",
            "Revision",
            revision(
                json!({"metadata": {"labels": {"serving.knative.dev/configuration": "absent"}}}),
            ),
            Reject("missing field(s): metadata.labels.serving.knative.dev/configuration"),
        ),
        Case::new(
            "other serving.knative.dev labels",
            "issue 17 class 6; revision_validation.go ValidateLabels",
            "Revision",
            revision(
                json!({"metadata": {"labels": {"serving.knative.dev/foo": "x", "serving.knative.dev/routingState": "active"}}}),
            ),
            Accept(None),
        ),
        Case::new(
            "autoscaling annotations are validated on a Revision",
            "metadata_validation.go ValidateObjectMetadata(…, true); annotation_validation.go validateMinMaxScale",
            "Revision",
            revision(
                json!({"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "5", "autoscaling.knative.dev/max-scale": "2"}}}),
            ),
            Reject(
                "max-scale=2 is less than min-scale=5: metadata.annotations.autoscaling.knative.dev/max-scale, metadata.annotations.autoscaling.knative.dev/min-scale",
            ),
        ),
        // Class 7.
        Case::new(
            "env: null and unknown container fields",
            "issue 17 class 7; prunenulls.go; schema-tweak containers allowedFields",
            "Revision",
            with_container(
                json!({"env": null, "stdinOnce": true, "resizePolicy": [{"resourceName": "cpu"}]}),
            ),
            Accept(Some(defaulted_spec(json!({})))),
        ),
        Case::new(
            "probe terminationGracePeriodSeconds is not in Knative's schema",
            "issue 17 class 7; schema-tweak overrides.go probe allowedFields",
            "Revision",
            with_container(
                json!({"livenessProbe": {"httpGet": {"path": "/"}, "terminationGracePeriodSeconds": 5}}),
            ),
            Accept(Some(defaulted_spec(
                json!({"livenessProbe": {"httpGet": {"path": "/", "port": 0}}}),
            ))),
        ),
    ]
}

pub(super) fn tally() -> Tally {
    check("Revision", cases())
}

#[test]
fn revision_conformance() {
    tally();
}
