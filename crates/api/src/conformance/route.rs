//! Routes: `pkg/apis/serving/v1/route_validation.go` (newest: only the service label is
//! checked), `route_defaults.go`, and the rows of `route_validation_test.go`
//! (`TestRouteValidation`, `TestTrafficTargetValidation` run through a whole Route).

use serde_json::{Value, json};

use super::{Case, Tally, Want, check};

const DNS1035: &str = "not a DNS 1035 label: [a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]: metadata.name";
const QUALIFIED: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn route(name: &str, traffic: Value) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Route",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"traffic": traffic}
    })
}

fn labelled(labels: Value, owners: Value) -> Value {
    let mut r = route(
        "byo-name",
        json!([{"tag": "bar", "revisionName": "foo", "percent": 100}]),
    );
    r["metadata"]["labels"] = labels;
    r["metadata"]["ownerReferences"] = owners;
    r
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    let t = "route_validation_test.go TestRouteValidation";
    let tt = "route_validation_test.go TestTrafficTargetValidation";
    vec![
        Case::new(
            "valid",
            t,
            "Route",
            route(
                "valid",
                json!([{"tag": "bar", "revisionName": "foo", "percent": 100}]),
            ),
            Accept(Some(json!({"traffic": [
                {"tag": "bar", "revisionName": "foo", "latestRevision": false, "percent": 100}]}))),
        ),
        Case::new(
            "valid split",
            t,
            "Route",
            route(
                "valid",
                json!([
                {"tag": "prod", "revisionName": "foo", "percent": 90},
                {"tag": "experiment", "configurationName": "bar", "percent": 10}]),
            ),
            Accept(Some(json!({"traffic": [
                {"tag": "prod", "revisionName": "foo", "latestRevision": false, "percent": 90},
                {"tag": "experiment", "configurationName": "bar", "latestRevision": true, "percent": 10}]}))),
        ),
        Case::new(
            "valid split without tags",
            t,
            "Route",
            route(
                "valid",
                json!([
                {"revisionName": "foo", "percent": 90}, {"revisionName": "bar", "percent": 10}]),
            ),
            Accept(None),
        ),
        Case::new(
            "invalid traffic entry (missing oneof)",
            t,
            "Route",
            route("valid", json!([{"tag": "foo", "percent": 100}])),
            Reject(
                "expected exactly one, got neither: spec.traffic[0].configurationName, spec.traffic[0].revisionName",
            ),
        ),
        Case::new(
            "invalid traffic entry (multiple names)",
            t,
            "Route",
            route(
                "valid",
                json!([
                {"tag": "foo", "revisionName": "bar", "percent": 50},
                {"tag": "foo", "revisionName": "bar", "percent": 50}]),
            ),
            Reject("Multiple definitions for \"foo\": spec.traffic[0].tag, spec.traffic[1].tag"),
        ),
        Case::new(
            "invalid name - dots",
            t,
            "Route",
            route(
                "do.not.use.dots",
                json!([{"revisionName": "foo", "percent": 100}]),
            ),
            Reject(DNS1035),
        ),
        Case::new(
            "invalid name - dots and spec percent is not 100",
            t,
            "Route",
            route(
                "do.not.use.dots",
                json!([{"revisionName": "foo", "percent": 90}]),
            ),
            // `FieldError.Error()` sorts merged errors by message (upper case first), so
            // the test table's order is not the rendered one.
            Reject(Box::leak(
                format!("Traffic targets sum to 90, want 100: spec.traffic\n{DNS1035}")
                    .into_boxed_str(),
            )),
        ),
        Case::new(
            "invalid name - too long",
            "route_validation_test.go TestRouteValidation; issue 17 class 13 (apimachinery now says bytes)",
            "Route",
            route(
                &"a".repeat(64),
                json!([{"revisionName": "foo", "percent": 100}]),
            ),
            Reject("not a DNS 1035 label: [must be no more than 63 bytes]: metadata.name"),
        ),
        Case::new(
            "invalid with bad revisionName",
            tt,
            "Route",
            route("r", json!([{"revisionName": "b ar", "percent": 100}])),
            Reject(Box::leak(
                format!("invalid key name \"b ar\": spec.traffic[0].revisionName\n{QUALIFIED}")
                    .into_boxed_str(),
            )),
        ),
        Case::new(
            "invalid with bad configurationName",
            tt,
            "Route",
            route("r", json!([{"configurationName": "b ar", "percent": 100}])),
            Reject(Box::leak(
                format!(
                    "invalid key name \"b ar\": spec.traffic[0].configurationName\n{QUALIFIED}"
                )
                .into_boxed_str(),
            )),
        ),
        Case::new(
            "invalid with revisionName and latestRevision (spec)",
            tt,
            "Route",
            route(
                "r",
                json!([{"revisionName": "bar", "latestRevision": true, "percent": 100}]),
            ),
            Reject(
                "may not set revisionName \"bar\" when latestRevision is true: spec.traffic[0].latestRevision",
            ),
        ),
        Case::new(
            "invalid with configurationName and latestRevision",
            tt,
            "Route",
            route(
                "r",
                json!([{"configurationName": "blah", "latestRevision": false, "percent": 100}]),
            ),
            Reject(
                "may not set revisionName \"\" when latestRevision is false: spec.traffic[0].latestRevision",
            ),
        ),
        Case::new(
            "valid with configurationName and latestRevision",
            tt,
            "Route",
            route(
                "r",
                json!([{"configurationName": "blah", "latestRevision": true, "percent": 100}]),
            ),
            Accept(None),
        ),
        Case::new(
            "invalid with both",
            tt,
            "Route",
            route(
                "r",
                json!([{"revisionName": "foo", "configurationName": "bar", "percent": 100}]),
            ),
            Reject(
                "expected exactly one, got both: spec.traffic[0].configurationName, spec.traffic[0].revisionName",
            ),
        ),
        Case::new(
            "invalid percent too high",
            tt,
            "Route",
            route("r", json!([{"revisionName": "foo", "percent": 101}])),
            Reject(
                "Traffic targets sum to 101, want 100: spec.traffic\nexpected 0 <= 101 <= 100: spec.traffic[0].percent",
            ),
        ),
        Case::new(
            "disallowed url set",
            tt,
            "Route",
            route(
                "r",
                json!([{"configurationName": "foo", "percent": 100, "url": "http://should.not.be.set"}]),
            ),
            Reject("must not set the field(s): spec.traffic[0].url"),
        ),
        // Class 20.
        Case::new(
            "valid with no percent",
            "route_validation_test.go \"valid with no percent\"; issue 17 class 20 (route_defaults.go)",
            "Route",
            route(
                "r",
                json!([{"configurationName": "booga"}, {"revisionName": "b", "percent": 100}]),
            ),
            Accept(Some(json!({"traffic": [
                {"configurationName": "booga", "latestRevision": true, "percent": 0},
                {"revisionName": "b", "latestRevision": false, "percent": 100}]}))),
        ),
        // Class 6: the newest route_validation.go checks only the service label.
        Case::new(
            "visibility label is not checked on a Route",
            "issue 17 class 6; route_validation.go validateLabels",
            "Route",
            labelled(
                json!({"networking.knative.dev/visibility": "bad-value"}),
                json!([]),
            ),
            Accept(None),
        ),
        Case::new(
            "other serving.knative.dev label",
            "issue 17 class 6; route_validation.go validateLabels",
            "Route",
            labelled(json!({"serving.knative.dev/foo": "x"}), json!([])),
            Accept(None),
        ),
        Case::new(
            "valid knative service name",
            "route_validation_test.go TestRouteLabelValidation",
            "Route",
            labelled(
                json!({"serving.knative.dev/service": "test-svc"}),
                json!([{"apiVersion": "serving.knative.dev/v1alpha1", "kind": "Service", "name": "test-svc", "uid": ""}]),
            ),
            Accept(None),
        ),
        Case::new(
            "invalid knative service name",
            "route_validation_test.go TestRouteLabelValidation",
            "Route",
            labelled(
                json!({"serving.knative.dev/service": "absent-svc"}),
                json!([]),
            ),
            Reject("missing field(s): metadata.labels.serving.knative.dev/service"),
        ),
        Case::new(
            "mismatch knative service label and owner ref",
            "route_validation_test.go TestRouteLabelValidation",
            "Route",
            labelled(
                json!({"serving.knative.dev/service": "test-svc"}),
                json!([{"apiVersion": "serving.knative.dev/v1alpha1", "kind": "BrandNewService", "name": "brand-new-svc", "uid": ""}]),
            ),
            Reject("missing field(s): metadata.labels.serving.knative.dev/service"),
        ),
        // Class 7.
        Case::new(
            "traffic: null",
            "issue 17 class 7; prunenulls.go, then route_validation.go validateTrafficList",
            "Route",
            route("r", Value::Null),
            Reject("Traffic targets sum to 0, want 100: spec.traffic"),
        ),
        Case::new(
            "unknown traffic field pruned",
            "issue 17 class 7; CRD schema (controller-gen TrafficTarget)",
            "Route",
            route(
                "r",
                json!([{"revisionName": "foo", "percent": 100, "weight": 3}]),
            ),
            Accept(Some(json!({"traffic": [
                {"revisionName": "foo", "latestRevision": false, "percent": 100}]}))),
        ),
        // Class 14.
        Case::new(
            "one tag three times",
            "issue 17 class 14; field_error.go mergePaths",
            "Route",
            route(
                "r",
                json!([
                {"tag": "a", "revisionName": "x", "percent": 100},
                {"tag": "a", "revisionName": "x", "percent": 0},
                {"tag": "a", "revisionName": "x", "percent": 0}]),
            ),
            Reject(
                "Multiple definitions for \"a\": spec.traffic[0].tag, spec.traffic[1].tag, spec.traffic[2].tag",
            ),
        ),
    ]
}

pub(super) fn tally() -> Tally {
    check("Route", cases())
}

#[test]
fn route_conformance() {
    tally();
}
