//! Configurations: `pkg/apis/serving/v1/configuration_validation.go` (newest: only the
//! service label is checked), `configuration_defaults.go`, `configuration_validation_test.go`.

use serde_json::{Value, json};

use super::{Case, Tally, Want, check, container, defaulted_spec, merge};

fn config(patch: Value) -> Value {
    let mut c = json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Configuration",
        "metadata": {"name": "valid", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [container(json!({}))]}}}
    });
    merge(&mut c, patch);
    c
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    let stored = || {
        Some(
            json!({"template": {"metadata": {"creationTimestamp": null}, "spec": defaulted_spec(json!({}))}}),
        )
    };
    vec![
        Case::new(
            "valid",
            "configuration_validation_test.go TestConfigurationValidation \"valid\"; configuration_defaults.go",
            "Configuration",
            config(json!({})),
            Accept(stored()),
        ),
        Case::new(
            "invalid container concurrency",
            "configuration_validation_test.go \"invalid container concurrency\"",
            "Configuration",
            config(json!({"spec": {"template": {"spec": {"containerConcurrency": -10}}}})),
            Reject("expected 0 <= -10 <= 1000: spec.template.spec.containerConcurrency"),
        ),
        Case::new(
            "timeout above the maximum",
            "revision_validation.go validateTimeoutSeconds (max-revision-timeout-seconds 600)",
            "Configuration",
            config(json!({"spec": {"template": {"spec": {"timeoutSeconds": 6000}}}})),
            Reject("expected 0 <= 6000 <= 600: spec.template.spec.timeoutSeconds"),
        ),
        Case::new(
            "invalid name",
            "configuration_validation_test.go \"invalid name - dots\"",
            "Configuration",
            config(json!({"metadata": {"name": "do.not.use.dots"}})),
            Reject(
                "not a DNS 1035 label: [a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]: metadata.name",
            ),
        ),
        Case::new(
            "valid BYO name",
            "configuration_validation_test.go \"valid BYO name\"",
            "Configuration",
            config(
                json!({"metadata": {"name": "byo-name"}, "spec": {"template": {"metadata": {"name": "byo-name-foo"}}}}),
            ),
            Accept(None),
        ),
        Case::new(
            "invalid BYO name (not prefixed)",
            "configuration_validation_test.go \"invalid name (not prefixed)\"",
            "Configuration",
            config(
                json!({"metadata": {"name": "byo-name"}, "spec": {"template": {"metadata": {"name": "foo"}}}}),
            ),
            Reject(
                "invalid value: \"foo\" must have prefix \"byo-name-\": spec.template.metadata.name",
            ),
        ),
        Case::new(
            "BYO name with a generated parent name",
            "configuration_validation_test.go \"invalid BYO name with generateName\"",
            "Configuration",
            config(
                json!({"metadata": {"name": null, "generateName": "byo-name-"}, "spec": {"template": {"metadata": {"name": "byo-name-foo"}}}}),
            ),
            Reject("must not set the field(s): spec.template.metadata.name"),
        ),
        Case::new(
            "autoscaling annotation on the Configuration",
            "metadata_validation.go ValidateObjectMetadata(…, false) → ValidateHasNoAutoscalingAnnotation",
            "Configuration",
            config(json!({"metadata": {"annotations": {"autoscaling.knative.dev/window": "60s"}}})),
            Reject(
                "invalid key name \"autoscaling.knative.dev/window\": metadata.annotations\nautoscaling annotations must be put under \"spec.template.metadata.annotations\" to work",
            ),
        ),
        // Class 6.
        Case::new(
            "service label without an owner",
            "configuration_validation.go validateLabels / verifyLabelOwnerRef",
            "Configuration",
            config(json!({"metadata": {"labels": {"serving.knative.dev/service": "absent"}}})),
            Reject("missing field(s): metadata.labels.serving.knative.dev/service"),
        ),
        Case::new(
            "service label with its owner",
            "configuration_validation.go validateLabels / verifyLabelOwnerRef",
            "Configuration",
            config(json!({"metadata": {
                "labels": {"serving.knative.dev/service": "svc"},
                "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "svc", "uid": "u"}]}})),
            Accept(stored()),
        ),
        Case::new(
            "other serving.knative.dev label",
            "issue 17 class 6; configuration_validation.go validateLabels",
            "Configuration",
            config(
                json!({"metadata": {"labels": {"serving.knative.dev/foo": "x", "serving.knative.dev/route": "r"}}}),
            ),
            Accept(stored()),
        ),
        // Class 7.
        Case::new(
            "template: null",
            "issue 17 class 7; prunenulls.go, then k8s_validation.go ValidatePodSpec",
            "Configuration",
            config(json!({"spec": {"template": null}})),
            Reject("missing field(s): spec.template.spec.containers"),
        ),
        Case::new(
            "template metadata null, labels null",
            "issue 17 class 7; prunenulls.go",
            "Configuration",
            config(json!({"metadata": {"labels": null}, "spec": {"template": {"metadata": null}}})),
            Accept(stored()),
        ),
        Case::new(
            "unknown fields in spec and template spec",
            "issue 17 class 7; cmd/schema-tweak/overrides.go revision spec allowedFields",
            "Configuration",
            config(
                json!({"spec": {"foo": 1, "template": {"spec": {"nodeName": "n", "restartPolicy": "Always"}}}}),
            ),
            Accept(stored()),
        ),
    ]
}

pub(super) fn tally() -> Tally {
    check("Configuration", cases())
}

#[test]
fn configuration_conformance() {
    tally();
}
