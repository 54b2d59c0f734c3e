//! Services: `pkg/apis/serving/v1/service_validation.go`, `service_defaults.go` and their
//! `_test.go` tables, plus the API server's part (pruning) of issue #17's classes.

use serde_json::json;

use super::{Case, Tally, Want, check, defaulted_service_spec, merge, service, service_with};

fn hello() -> serde_json::Value {
    service_with(json!({}))
}

fn with(mut base: serde_json::Value, patch: serde_json::Value) -> serde_json::Value {
    merge(&mut base, patch);
    base
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    let plain = || Some(defaulted_service_spec(json!({})));
    vec![
        Case::new(
            "run latest",
            "service_defaults_test.go \"run latest\"",
            "Service",
            hello(),
            Accept(plain()),
        ),
        // Class 7: kube-apiserver prunes by the CRD's structural schema before the webhook.
        Case::new(
            "unknown spec field pruned",
            "issue 17 class 7; CRD schema (controller-gen ServiceSpec)",
            "Service",
            with(
                hello(),
                json!({"spec": {"foo": "bar"}, "status": {"x": 1}, "bogus": 1}),
            ),
            Accept(plain()),
        ),
        Case::new(
            "container fields outside Knative's schema pruned",
            "issue 17 class 7; cmd/schema-tweak/overrides.go containers allowedFields",
            "Service",
            service_with(
                json!({"stdin": true, "tty": true, "lifecycle": {"preStop": {"exec": {"command": ["x"]}}}}),
            ),
            Accept(plain()),
        ),
        Case::new(
            "nulls are absent",
            "issue 17 class 7; apiextensions prunenulls.go",
            "Service",
            json!({
                "metadata": {"name": "hello", "labels": null, "annotations": null},
                "spec": {"template": {"metadata": null, "spec": {"containers": [
                    {"image": "ghcr.io/knative/helloworld-go", "env": null}]}}, "traffic": null}
            }),
            Accept(plain()),
        ),
        Case::new(
            "spec of comments only",
            "issue 17 class 7; k8s_validation.go ValidatePodSpec (no containers)",
            "Service",
            json!({"metadata": {"name": "hello"}, "spec": null}),
            Reject("missing field(s): spec.template.spec.containers"),
        ),
        Case::new(
            "template metadata unknown key dropped",
            "issue 17 class 7; template.metadata preserves unknown fields, the Go round trip drops them",
            "Service",
            with(
                hello(),
                json!({"spec": {"template": {"metadata": {"foo": "x"}}}}),
            ),
            Accept(plain()),
        ),
        // Class 6.
        Case::new(
            "serving.knative.dev label on a Service",
            "issue 17 class 6; service_validation.go validateLabels",
            "Service",
            with(
                hello(),
                json!({"metadata": {"labels": {"serving.knative.dev/route": "x"}}}),
            ),
            Accept(plain()),
        ),
        Case::new(
            "visibility label value",
            "service_validation.go validateLabels / validateClusterVisibilityLabel",
            "Service",
            with(
                hello(),
                json!({"metadata": {"labels": {"networking.knative.dev/visibility": "public"}}}),
            ),
            Reject("invalid value: public: metadata.labels.networking.knative.dev/visibility"),
        ),
        // Class 8: kube-apiserver does not check that an owner exists.
        Case::new(
            "owner that does not exist",
            "issue 17 class 8; kube-apiserver stores dangling ownerReferences (the GC handles them)",
            "Service",
            with(
                hello(),
                json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}]}}),
            ),
            Accept(plain()),
        ),
        // Class 13.
        Case::new(
            "name too long",
            "issue 17 class 13; apimachinery validation.IsDNS1035Label MaxLenError",
            "Service",
            with(hello(), json!({"metadata": {"name": "a".repeat(64)}})),
            Reject("not a DNS 1035 label: [must be no more than 63 bytes]: metadata.name"),
        ),
        Case::new(
            "name and generateName both missing",
            "knative.dev/pkg apis/metadata_validation.go ValidateObjectMetadata",
            "Service",
            with(hello(), json!({"metadata": {"name": null}})),
            Reject("name or generateName is required: metadata.name"),
        ),
        // Class 14.
        Case::new(
            "repeated tag",
            "issue 17 class 14; route_validation.go validateTrafficList, field_error.go mergePaths",
            "Service",
            with(
                hello(),
                json!({"spec": {"traffic": [
                {"percent": 100, "latestRevision": true, "tag": "a"},
                {"percent": 0, "latestRevision": true, "tag": "a"},
                {"percent": 0, "latestRevision": true, "tag": "a"}]}}),
            ),
            Reject(
                "Multiple definitions for \"a\": spec.traffic[0].tag, spec.traffic[1].tag, spec.traffic[2].tag",
            ),
        ),
        // Class 20.
        Case::new(
            "traffic target without percent",
            "issue 17 class 20; route_defaults.go TrafficTarget.SetDefaults",
            "Service",
            with(
                hello(),
                json!({"spec": {"traffic": [
                {"percent": 100, "latestRevision": true},
                {"tag": "next", "latestRevision": true}]}}),
            ),
            Accept(Some({
                let mut s = defaulted_service_spec(json!({}));
                s["traffic"] = json!([
                    {"latestRevision": true, "percent": 100},
                    {"tag": "next", "latestRevision": true, "percent": 0}]);
                s
            })),
        ),
        Case::new(
            "configurationName in a Service's traffic",
            "service_validation_test.go \"invalid configurationName in traffic\" (route_validation.go ErrDisallowedFields)",
            "Service",
            with(
                hello(),
                json!({"spec": {"traffic": [
                {"percent": 100, "configurationName": "hello", "latestRevision": true}]}}),
            ),
            Reject("must not set the field(s): spec.traffic[0].configurationName"),
        ),
        Case::new(
            "traffic does not sum to 100",
            "service_validation_test.go (route_validation.go validateTrafficList)",
            "Service",
            with(
                hello(),
                json!({"spec": {"traffic": [{"percent": 90, "latestRevision": true}]}}),
            ),
            Reject("Traffic targets sum to 90, want 100: spec.traffic"),
        ),
        Case::new(
            "autoscaling annotation on the Service",
            "metadata_validation.go ValidateHasNoAutoscalingAnnotation",
            "Service",
            with(
                hello(),
                json!({"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}}}),
            ),
            Reject(
                "invalid key name \"autoscaling.knative.dev/min-scale\": metadata.annotations\nautoscaling annotations must be put under \"spec.template.metadata.annotations\" to work",
            ),
        ),
        Case::new(
            "rollout duration not at second precision",
            "metadata_validation.go ValidateRolloutDurationAnnotation",
            "Service",
            with(
                hello(),
                json!({"metadata": {"annotations": {"serving.knative.dev/rollout-duration": "1.5s"}}}),
            ),
            Reject(
                "rollout-duration=1.5s is not at second precision: metadata.annotations.serving.knative.dev/rollout-duration",
            ),
        ),
        Case::new(
            "BYO revision name without the prefix",
            "revision_validation.go validateRevisionName",
            "Service",
            with(
                hello(),
                json!({"spec": {"template": {"metadata": {"name": "other-1"}}}}),
            ),
            Reject(
                "invalid value: \"other-1\" must have prefix \"hello-\": spec.template.metadata.name",
            ),
        ),
        // Class 1.
        Case::new(
            "ko:// image",
            "issue 17 class 1; k8s_validation.go validate (the image is not parsed)",
            "Service",
            service(json!({"containers": [{"image": "ko://knative.dev/serving/cmd/helloworld"}]})),
            Accept(Some(defaulted_service_spec(
                json!({"image": "ko://knative.dev/serving/cmd/helloworld"}),
            ))),
        ),
    ]
}

pub(super) fn tally() -> Tally {
    check("Service", cases())
}

#[test]
fn service_conformance() {
    tally();
}
