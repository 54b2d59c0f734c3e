//! The PodSpec and container rules of `pkg/apis/serving/k8s_validation.go` (and the field
//! masks of `fieldmask.go`), through a whole Service: issue #17's classes 1–5, 10–12 and
//! 16–18, and rows of `k8s_validation_test.go`.

use serde_json::{Value, json};

use super::{Case, Tally, Want, check, container, defaulted_service_spec, service, service_with};
use crate::config::Flag;

const P: &str = "spec.template.spec";

fn two(a: Value, b: Value) -> Value {
    service(json!({"containers": [a, b]}))
}

fn serving() -> Value {
    json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]})
}

fn with_pod(fields: Value) -> Value {
    let mut s = service_with(json!({}));
    for (k, v) in fields.as_object().expect("object") {
        s["spec"]["template"]["spec"][k] = v.clone();
    }
    s
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

pub(super) fn cases() -> Vec<Case> {
    use Want::{Accept, Reject};
    vec![
        // Class 1.
        Case::new(
            "image with a scheme and odd slashes",
            "issue 17 class 1; k8s_validation.go validate (only emptiness is checked)",
            "Service",
            service(json!({"containers": [{"image": "https://gcr.io//foo/bar:latest"}]})),
            Accept(Some(defaulted_service_spec(json!({"image": "https://gcr.io//foo/bar:latest"})))),
        ),
        Case::new(
            "no image",
            "k8s_validation_test.go TestContainerValidation \"empty container\" family (ErrMissingField image)",
            "Service",
            service(json!({"containers": [{"name": "x", "args": ["a"]}]})),
            Reject("missing field(s): spec.template.spec.containers[0].image"),
        ),
        // Class 2.
        Case::new(
            "Go value fields at their zero value are not set",
            "issue 17 class 2; fieldmask.go PodSpecMask (hostNetwork bool, dnsPolicy string)",
            "Service",
            with_pod(json!({"hostNetwork": false, "hostPID": false, "dnsPolicy": ""})),
            Accept(None),
        ),
        Case::new(
            "pointer fields are set even at zero",
            "issue 17 class 2; fieldmask.go PodSpecMask (shareProcessNamespace *bool)",
            "Service",
            with_pod(json!({"shareProcessNamespace": false})),
            Reject(leak(format!("must not set the field(s): {P}.shareProcessNamespace"))),
        ),
        Case::new(
            "gated field with its flag on",
            "fieldmask.go PodSpecMask (kubernetes.podspec-hostnetwork)",
            "Service",
            with_pod(json!({"hostNetwork": true})),
            Accept(None),
        )
        .with_cfg(|c| c.features.podspec_hostnetwork = Flag::Enabled),
        // Class 3.
        Case::new(
            "container and env names are not shape-checked",
            "issue 17 class 3; k8s_validation.go validate / validateEnvVar",
            "Service",
            service(json!({"containers": [container(json!({"name": "My_Container",
                "env": [{"name": "1FOO", "value": "x"}, {"name": "a=b.c", "value": "y"}]}))]})),
            Accept(None),
        ),
        Case::new(
            "reserved container name",
            "k8s_validation_test.go \"reserved container name\"",
            "Service",
            service(json!({"containers": [container(json!({"name": "queue-proxy"}))]})),
            Reject(leak(format!("\"queue-proxy\" is a reserved container name: {P}.containers[0].name"))),
        ),
        // Class 4.
        Case::new(
            "value together with valueFrom",
            "issue 17 class 4; k8s_validation.go validateEnvVar",
            "Service",
            service_with(json!({"env": [{"name": "S", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]})),
            Accept(None),
        ),
        Case::new(
            "reserved env var",
            "k8s_validation_test.go \"reserved env var name\" (reservedEnvVars)",
            "Service",
            service_with(json!({"env": [{"name": "K_SERVICE", "value": "x"}]})),
            Reject(leak(format!("\"K_SERVICE\" is a reserved environment variable: {P}.containers[0].env[0].name"))),
        ),
        // Class 5.
        Case::new(
            "integer probe ports are not compared",
            "issue 17 class 5; k8s_validation.go validateProbe (StrVal only)",
            "Service",
            service_with(json!({"livenessProbe": {"tcpSocket": {"port": 9999}},
                "readinessProbe": {"httpGet": {"port": 1}, "successThreshold": 1}})),
            Accept(None),
        ),
        Case::new(
            "named probe port",
            "k8s_validation.go validateProbe",
            "Service",
            service_with(json!({"livenessProbe": {"tcpSocket": {"port": "grpc"}}})),
            Reject(leak(format!("invalid value: grpc: {P}.containers[0].livenessProbe.tcpSocket.port\nProbe port must match container port"))),
        ),
        // Class 10.
        Case::new(
            "projected downwardAPI items",
            "issue 17 class 10; k8s_validation.go validateDownwardAPIProjection",
            "Service",
            {
                let mut s = service_with(json!({"volumeMounts": [{"name": "d", "mountPath": "/d", "readOnly": true}]}));
                s["spec"]["template"]["spec"]["volumes"] = json!([{"name": "d", "projected": {"sources": [{"downwardAPI": {"items": [
                    {"path": "ok", "fieldRef": {"fieldPath": "metadata.name"}},
                    {"path": "none"},
                    {"fieldRef": {"fieldPath": "metadata.name"}, "resourceFieldRef": {"resource": "limits.cpu"}}]}}]}}]);
                s
            },
            Reject(leak(format!("Within a single item, cannot set both: {P}.volumes[0].projected[0].downwardAPI.items[2].fieldRef, {P}.volumes[0].projected[0].downwardAPI.items[2].resourceFieldRef\nexpected exactly one, got neither: {P}.volumes[0].projected[0].downwardAPI.items[1].fieldRef, {P}.volumes[0].projected[0].downwardAPI.items[1].resourceFieldRef\nmissing field(s): {P}.volumes[0].projected[0].downwardAPI.items[2].path"))),
        ),
        // Class 11.
        Case::new(
            "negative emptyDir sizeLimit",
            "issue 17 class 11; k8s_validation.go validateEmptyDirFields",
            "Service",
            {
                let mut s = service_with(json!({"volumeMounts": [{"name": "x", "mountPath": "/x"}]}));
                s["spec"]["template"]["spec"]["volumes"] = json!([{"name": "x", "emptyDir": {"sizeLimit": "-1024Mi"}}]);
                s
            },
            Reject(leak(format!("invalid value: -1Gi: {P}.volumes[0].emptyDir.sizeLimit"))),
        ),
        // Class 12.
        Case::new(
            "sidecar startupProbe without multi-container probing",
            "issue 17 class 12; k8s_validation.go validateSidecarContainer",
            "Service",
            two(serving(), json!({"name": "b", "image": "busybox", "startupProbe": {"tcpSocket": {"port": 9000}, "periodSeconds": 2}})),
            Reject(leak(format!("must not set the field(s): {P}.containers[1].startupProbe, {P}.containers[1].startupProbe.periodSeconds"))),
        ),
        Case::new(
            "sidecar probes with multi-container probing",
            "k8s_validation.go validateSidecarContainer (multi-container-probing enabled)",
            "Service",
            two(serving(), json!({"name": "b", "image": "busybox",
                "startupProbe": {"tcpSocket": {"port": 9000}, "periodSeconds": 2},
                "readinessProbe": {"tcpSocket": {"port": 9000}}})),
            Accept(None),
        )
        .with_cfg(|c| c.features.multi_container_probing = Flag::Enabled),
        // Class 16: a volume kind outside Knative's schema is pruned, leaving none.
        Case::new(
            "unsupported volume kind",
            "issue 17 class 16; schema-tweak volumes allowedFields, then k8s_validation.go validateVolume",
            "Service",
            {
                let mut s = service_with(json!({"volumeMounts": [{"name": "g", "mountPath": "/g", "readOnly": true}]}));
                s["spec"]["template"]["spec"]["volumes"] = json!([{"name": "g", "nfs": {"server": "s", "path": "/"}}]);
                s
            },
            Reject(leak(format!("expected exactly one, got neither: {P}.volumes[0].configMap, {P}.volumes[0].emptyDir, {P}.volumes[0].projected, {P}.volumes[0].secret"))),
        ),
        // Class 17.
        Case::new(
            "pod securityContext with the flag off",
            "issue 17 class 17; fieldmask.go PodSecurityContextMask",
            "Service",
            with_pod(json!({"securityContext": {"runAsUser": 1000, "fsGroup": 2000, "sysctls": [{"name": "a", "value": "b"}]}})),
            Reject(leak(format!("must not set the field(s): {P}.securityContext.fsGroup, {P}.securityContext.runAsUser, {P}.securityContext.sysctls"))),
        ),
        // Class 18.
        Case::new(
            "sidecar probe masks",
            "issue 17 class 18; k8s_validation_test.go TestSidecarContainerValidation \"probes not allowed\"",
            "Service",
            two(serving(), json!({"name": "side", "image": "busybox",
                "readinessProbe": {"httpGet": {"path": "/"}, "periodSeconds": 1, "timeoutSeconds": 1,
                    "successThreshold": 1, "failureThreshold": 3, "initialDelaySeconds": 0},
                "livenessProbe": {"tcpSocket": {}}})),
            Reject(leak(format!("must not set the field(s): {P}.containers[1].livenessProbe, {P}.containers[1].readinessProbe, {P}.containers[1].readinessProbe.failureThreshold, {P}.containers[1].readinessProbe.periodSeconds, {P}.containers[1].readinessProbe.successThreshold, {P}.containers[1].readinessProbe.timeoutSeconds"))),
        ),
        // Multi-container and init containers.
        Case::new(
            "two containers, one port",
            "k8s_validation.go ValidatePodSpec (multi-container)",
            "Service",
            two(serving(), json!({"name": "b", "image": "busybox"})),
            Accept(None),
        ),
        Case::new(
            "init containers with the flag off",
            "k8s_validation.go ValidatePodSpec / fieldmask.go PodSpecMask",
            "Service",
            with_pod(json!({"initContainers": [{"name": "init", "image": "busybox"}]})),
            Reject(leak(format!("must not set the field(s): {P}.initContainers\npod spec support for init-containers is off, but found 1 init containers: "))),
        ),
        Case::new(
            "probe in an init container",
            "k8s_validation.go validateInitContainer",
            "Service",
            with_pod(json!({"initContainers": [{"name": "init", "image": "busybox", "livenessProbe": {"exec": {"command": ["x"]}}}]})),
            Reject(leak(format!("field not allowed in an init container: {P}.initContainers[0].livenessProbe"))),
        )
        .with_cfg(|c| c.features.podspec_init_containers = Flag::Enabled),
    ]
}

pub(super) fn tally() -> Tally {
    check("PodSpec", cases())
}

#[test]
fn podspec_conformance() {
    tally();
}
