//! Table tests: the validation examples of Knative's `pkg/apis/serving/v1/*_validation_test.go`,
//! each autoscaling range of `pkg/apis/autoscaling/annotation_validation.go`, and valid objects that must pass. Expected strings are the full rendered errors
//! (`filter(Level::Error).to_string()`, which is what the API server sends); warnings are
//! tested separately.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::config::{Config, Flag, SecurePodDefaults};
use crate::field_error::Level;

const INSECURE: &str =
    "Kubernetes default value is insecure, Knative may default this to secure in a future release";

fn errors(e: &FieldError) -> String {
    e.filter(Level::Error).to_string()
}

/// Sets `v` at a JSON pointer, creating intermediate objects.
fn set(mut base: Value, pointer: &str, v: Value) -> Value {
    let mut cur = &mut base;
    for seg in pointer.trim_start_matches('/').split('/') {
        cur = match cur {
            Value::Array(a) => &mut a[seg.parse::<usize>().expect("array index")],
            other => {
                if !other.is_object() {
                    *other = json!({});
                }
                other
                    .as_object_mut()
                    .expect("object")
                    .entry(seg.to_string())
                    .or_insert(Value::Null)
            }
        };
    }
    *cur = v;
    base
}

/// A defaulted hello-world Service.
fn hello() -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {
            "template": {"spec": {
                "containerConcurrency": 0,
                "timeoutSeconds": 300,
                "containers": [{"name": "user-container", "image": "ghcr.io/knative/helloworld-go"}]
            }},
            "traffic": [{"percent": 100, "latestRevision": true}]
        }
    })
}

fn route() -> Value {
    json!({
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"traffic": [{"configurationName": "hello", "latestRevision": true, "percent": 100}]}
    })
}

fn svc(v: Value) -> Service {
    serde_json::from_value(v).expect("service")
}

fn check_service(v: Value, cfg: &Config) -> String {
    errors(&validate_service(&svc(v), None, cfg))
}

fn check_route(v: Value, cfg: &Config) -> String {
    errors(&validate_route(
        &serde_json::from_value(v).expect("route"),
        None,
        cfg,
    ))
}

fn cfg_with(f: impl FnOnce(&mut Config)) -> Config {
    let mut c = Config::default();
    f(&mut c);
    c
}

const C0: &str = "/spec/template/spec/containers/0";

#[test]
fn reference_section_11_services() {
    let d = Config::default();
    let multi_off = cfg_with(|c| c.features.multi_container = Flag::Disabled);
    let init_on = cfg_with(|c| c.features.podspec_init_containers = Flag::Enabled);
    let no_zero_cc = cfg_with(|c| c.defaults.allow_container_concurrency_zero = false);
    let two = |a: Value, b: Value| set(hello(), "/spec/template/spec/containers", json!([a, b]));
    let cases: Vec<(&str, Value, &Config, &str)> = vec![
        // 1, 2
        (
            "11.1 percent 101",
            set(hello(), "/spec/traffic/0/percent", json!(101)),
            &d,
            "Traffic targets sum to 101, want 100: spec.traffic\nexpected 0 <= 101 <= 100: spec.traffic[0].percent",
        ),
        (
            "11.1+2 percent out of range, sum 100",
            set(
                hello(),
                "/spec/traffic",
                json!([{"percent": 101, "latestRevision": true}, {"percent": -1, "revisionName": "hello-00001", "latestRevision": false}]),
            ),
            &d,
            "expected 0 <= -1 <= 100: spec.traffic[1].percent\nexpected 0 <= 101 <= 100: spec.traffic[0].percent",
        ),
        (
            "11.2 percent -5",
            set(
                hello(),
                "/spec/traffic",
                json!([{"percent": -5, "latestRevision": true}, {"percent": 105, "revisionName": "hello-00001", "latestRevision": false}]),
            ),
            &d,
            "expected 0 <= -5 <= 100: spec.traffic[0].percent\nexpected 0 <= 105 <= 100: spec.traffic[1].percent",
        ),
        (
            "11.6 configurationName in a Service",
            set(hello(), "/spec/traffic/0/configurationName", json!("hello")),
            &d,
            "must not set the field(s): spec.traffic[0].configurationName",
        ),
        (
            "11.7 revisionName with latestRevision true",
            set(hello(), "/spec/traffic/0/revisionName", json!("valid")),
            &d,
            "may not set revisionName \"valid\" when latestRevision is true: spec.traffic[0].latestRevision",
        ),
        (
            "latestRevision false without revisionName",
            set(hello(), "/spec/traffic/0/latestRevision", json!(false)),
            &d,
            "may not set revisionName \"\" when latestRevision is false: spec.traffic[0].latestRevision",
        ),
        (
            "11.8 url in spec",
            set(
                set(
                    hello(),
                    "/spec/traffic/0/url",
                    json!("http://foo.example.com"),
                ),
                "/spec/traffic/0/tag",
                json!("foo"),
            ),
            &d,
            "must not set the field(s): spec.traffic[0].url",
        ),
        (
            "11.9 duplicate tag",
            set(
                hello(),
                "/spec/traffic",
                json!([
                    {"tag": "foo", "percent": 50, "latestRevision": true},
                    {"tag": "foo", "percent": 50, "revisionName": "hello-00001", "latestRevision": false}
                ]),
            ),
            &d,
            "Multiple definitions for \"foo\": spec.traffic[0].tag, spec.traffic[1].tag",
        ),
        (
            "11.10 bad tag",
            set(hello(), "/spec/traffic/0/tag", json!("A_B")),
            &d,
            "invalid value: not a DNS 1035 label: [a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]: spec.traffic.tag[0]",
        ),
        (
            "bad revisionName",
            set(
                hello(),
                "/spec/traffic",
                json!([{"revisionName": "-bad", "latestRevision": false, "percent": 100}]),
            ),
            &d,
            "invalid key name \"-bad\": spec.traffic[0].revisionName\nname part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            "empty traffic",
            set(hello(), "/spec/traffic", json!([])),
            &d,
            "Traffic targets sum to 0, want 100: spec.traffic",
        ),
        (
            "11.11 containerConcurrency 1001",
            set(
                hello(),
                "/spec/template/spec/containerConcurrency",
                json!(1001),
            ),
            &d,
            "expected 0 <= 1001 <= 1000: spec.template.spec.containerConcurrency",
        ),
        (
            "11.11 containerConcurrency 0 disallowed",
            hello(),
            &no_zero_cc,
            "expected 1 <= 0 <= 1000: spec.template.spec.containerConcurrency",
        ),
        (
            "11.12 timeoutSeconds 601",
            set(hello(), "/spec/template/spec/timeoutSeconds", json!(601)),
            &d,
            "expected 0 <= 601 <= 600: spec.template.spec.timeoutSeconds",
        ),
        (
            "timeoutSeconds -1",
            set(hello(), "/spec/template/spec/timeoutSeconds", json!(-1)),
            &d,
            "expected 0 <= -1 <= 600: spec.template.spec.timeoutSeconds",
        ),
        (
            "11.13 multi-container off",
            two(
                json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]}),
                json!({"name": "b", "image": "busybox"}),
            ),
            &multi_off,
            "multi-container is off, but found 2 containers: ",
        ),
        (
            "11.14 ports on two containers",
            two(
                json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]}),
                json!({"name": "b", "image": "busybox", "ports": [{"containerPort": 9000}]}),
            ),
            &d,
            "more than one container port is set: spec.template.spec.containers[*].ports\nOnly a single port is allowed across all containers",
        ),
        (
            "two containers, no port",
            two(
                json!({"name": "a", "image": "busybox"}),
                json!({"name": "b", "image": "busybox"}),
            ),
            &d,
            "missing field(s): spec.template.spec.containers[*].ports",
        ),
        (
            "duplicate container name",
            two(
                json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]}),
                json!({"name": "a", "image": "busybox"}),
            ),
            &d,
            "duplicate container name \"a\": spec.template.spec.containers[1].name",
        ),
        (
            "sidecar probe without multi-container-probing",
            two(
                json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]}),
                json!({"name": "b", "image": "busybox", "readinessProbe": {"tcpSocket": {"port": 9000}, "periodSeconds": 1}}),
            ),
            &d,
            // The inlined handler is named by the probe's own path (class 18).
            "must not set the field(s): spec.template.spec.containers[1].readinessProbe, spec.template.spec.containers[1].readinessProbe.periodSeconds",
        ),
        (
            "11.15 port name foobar",
            set(
                hello(),
                &format!("{C0}/ports"),
                json!([{"name": "foobar", "containerPort": 8080}]),
            ),
            &d,
            "Port name foobar is not allowed: spec.template.spec.containers[0].ports\nName must be empty, or one of: 'h2c', 'http1'",
        ),
        (
            "11.16 reserved port 8012",
            set(
                hello(),
                &format!("{C0}/ports"),
                json!([{"containerPort": 8012}]),
            ),
            &d,
            "invalid value: 8012 is a reserved port: spec.template.spec.containers[0].ports.containerPort\n8012 is a reserved port, please use a different value",
        ),
        (
            "port out of range, UDP, hostPort",
            set(
                hello(),
                &format!("{C0}/ports"),
                json!([{"containerPort": 70000, "protocol": "UDP", "hostPort": 80}]),
            ),
            &d,
            "expected 0 <= 70000 <= 65535: spec.template.spec.containers[0].ports.containerPort\ninvalid value: UDP: spec.template.spec.containers[0].ports.protocol\nmust not set the field(s): spec.template.spec.containers[0].ports.hostPort",
        ),
        (
            "11.17 env PORT",
            set(
                hello(),
                &format!("{C0}/env"),
                json!([{"name": "PORT", "value": "1"}]),
            ),
            &d,
            "\"PORT\" is a reserved environment variable: spec.template.spec.containers[0].env[0].name",
        ),
        (
            "11.17 env K_SERVICE in a sidecar",
            two(
                json!({"name": "a", "image": "busybox", "ports": [{"containerPort": 8080}]}),
                json!({"name": "b", "image": "busybox", "env": [{"name": "PORT", "value": "1"}, {"name": "K_SERVICE", "value": "x"}]}),
            ),
            &d,
            "\"K_SERVICE\" is a reserved environment variable: spec.template.spec.containers[1].env[1].name",
        ),
        (
            // k8s_validation.go validateEnvVar: `value` beside `valueFrom` is not its concern.
            "env fieldRef without the flag, value and valueFrom",
            set(
                hello(),
                &format!("{C0}/env"),
                json!([{"name": "POD", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
            ),
            &d,
            "must not set the field(s): spec.template.spec.containers[0].env[0].valueFrom.fieldRef",
        ),
        (
            "11.18 queue-proxy container name",
            set(hello(), &format!("{C0}/name"), json!("queue-proxy")),
            &d,
            "\"queue-proxy\" is a reserved container name: spec.template.spec.containers[0].name",
        ),
        (
            "11.19 lifecycle",
            set(
                hello(),
                &format!("{C0}/lifecycle"),
                json!({"preStop": {"exec": {"command": ["x"]}}}),
            ),
            &d,
            "must not set the field(s): spec.template.spec.containers[0].lifecycle",
        ),
        (
            "11.19 nodeSelector flag off",
            set(
                hello(),
                "/spec/template/spec/nodeSelector",
                json!({"disk": "ssd"}),
            ),
            &d,
            "must not set the field(s): spec.template.spec.nodeSelector",
        ),
        (
            "always-rejected pod fields and automount true",
            set(
                set(
                    hello(),
                    "/spec/template/spec/restartPolicy",
                    json!("Always"),
                ),
                "/spec/template/spec/automountServiceAccountToken",
                json!(true),
            ),
            &d,
            "must not set the field(s): spec.template.spec.automountServiceAccountToken, spec.template.spec.restartPolicy",
        ),
        (
            "resources claims, privileged, bad termination policy",
            set(
                set(
                    set(
                        hello(),
                        &format!("{C0}/resources"),
                        json!({"limits": {"cpu": "1"}, "claims": []}),
                    ),
                    &format!("{C0}/securityContext"),
                    json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}, "runAsUser": -1}),
                ),
                &format!("{C0}/terminationMessagePolicy"),
                json!("Sometimes"),
            ),
            &d,
            "expected 0 <= -1 <= 2147483647: spec.template.spec.containers[0].securityContext.runAsUser\ninvalid value: Sometimes: spec.template.spec.containers[0].terminationMessagePolicy\nmust not set the field(s): spec.template.spec.containers[0].resources.claims, spec.template.spec.containers[0].securityContext.capabilities.add, spec.template.spec.containers[0].securityContext.privileged",
        ),
        (
            "bad serviceAccountName",
            set(
                hello(),
                "/spec/template/spec/serviceAccountName",
                json!("Bad_SA"),
            ),
            &d,
            "invalid value: Bad_SA: spec.template.spec.serviceAccountName\na lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            "11.20 mount at /dev",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "x", "emptyDir": {}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "x", "mountPath": "/dev/"}]),
            ),
            &d,
            "mountPath \"/dev\" is a reserved path: spec.template.spec.containers[0].volumeMounts[0].mountPath",
        ),
        (
            "11.20 unmounted volume",
            set(
                hello(),
                "/spec/template/spec/volumes",
                json!([{"name": "x", "secret": {"secretName": "s"}}]),
            ),
            &d,
            "volume with name \"x\" not mounted: spec.template.spec.volumes[0].name",
        ),
        (
            "11.20 writable secret mount",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "x", "secret": {"secretName": "s"}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "x", "mountPath": "/data"}]),
            ),
            &d,
            "volume mount should be readOnly for this type of volume: spec.template.spec.containers[0].volumeMounts[0].readOnly",
        ),
        (
            "mount without volume, relative and duplicate paths",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "x", "emptyDir": {}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([
                    {"name": "x", "mountPath": "/data"},
                    {"name": "x", "mountPath": "/data/"},
                    {"name": "x", "mountPath": "rel"},
                    {"name": "y", "mountPath": "/y", "readOnly": true}
                ]),
            ),
            &d,
            "invalid value: \"/data/\" must be unique: spec.template.spec.containers[0].volumeMounts[1].mountPath\ninvalid value: rel: spec.template.spec.containers[0].volumeMounts[2].mountPath\nvolumeMount has no matching volume: spec.template.spec.containers[0].volumeMounts[3].name",
        ),
        (
            "gated and duplicate volume sources",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([
                        {"name": "h", "hostPath": {"path": "/"}},
                        {"name": "two", "secret": {"secretName": "s"}, "configMap": {"name": "c"}},
                        {"name": "none"}
                    ]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([
                    {"name": "h", "mountPath": "/h", "readOnly": true},
                    {"name": "two", "mountPath": "/two", "readOnly": true},
                    {"name": "none", "mountPath": "/none", "readOnly": true}
                ]),
            ),
            &d,
            "HostPath volume support is disabled, but found HostPath volume h: \nexpected exactly one, got both: spec.template.spec.volumes[1].configMap, spec.template.spec.volumes[1].secret\nexpected exactly one, got neither: spec.template.spec.volumes[2].configMap, spec.template.spec.volumes[2].emptyDir, spec.template.spec.volumes[2].projected, spec.template.spec.volumes[2].secret\nmust not set the field(s): spec.template.spec.volumes[0].hostPath",
        ),
        (
            "PVC without the flags",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "p", "persistentVolumeClaim": {"claimName": "data"}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "p", "mountPath": "/p"}]),
            ),
            &d,
            "Persistent volume claim support is disabled, but found persistent volume claim data: \nPersistent volume write support is disabled, but found persistent volume claim data that is not read-only: \nmust not set the field(s): spec.template.spec.volumes[0].persistentVolumeClaim",
        ),
        (
            "11.21 periodSeconds 0 with failureThreshold",
            set(
                hello(),
                &format!("{C0}/readinessProbe"),
                json!({"tcpSocket": {}, "periodSeconds": 0, "failureThreshold": 3, "successThreshold": 1}),
            ),
            &d,
            "failureThreshold is disallowed when periodSeconds is zero: spec.template.spec.containers[0].readinessProbe.failureThreshold",
        ),
        (
            "readiness probe bounds",
            set(
                hello(),
                &format!("{C0}/readinessProbe"),
                json!({"exec": {"command": ["true"]}, "periodSeconds": 5, "successThreshold": 0}),
            ),
            &d,
            "expected 1 <= 0 <= 2147483647: spec.template.spec.containers[0].readinessProbe.failureThreshold, spec.template.spec.containers[0].readinessProbe.successThreshold, spec.template.spec.containers[0].readinessProbe.timeoutSeconds",
        ),
        (
            "11.22 probe on another named port",
            set(
                set(
                    hello(),
                    &format!("{C0}/ports"),
                    json!([{"containerPort": 8080}]),
                ),
                &format!("{C0}/readinessProbe"),
                json!({"httpGet": {"port": "foo"}, "successThreshold": 1}),
            ),
            &d,
            "invalid value: foo: spec.template.spec.containers[0].readinessProbe.httpGet.port\nProbe port must match container port",
        ),
        (
            "probe handlers: both and neither",
            set(
                set(
                    hello(),
                    &format!("{C0}/livenessProbe"),
                    json!({"httpGet": {}, "exec": {"command": ["x"]}}),
                ),
                &format!("{C0}/startupProbe"),
                json!({"periodSeconds": 1}),
            ),
            &d,
            "expected exactly one, got both: spec.template.spec.containers[0].livenessProbe.exec, spec.template.spec.containers[0].livenessProbe.httpGet\nexpected exactly one, got neither: spec.template.spec.containers[0].startupProbe.exec, spec.template.spec.containers[0].startupProbe.grpc, spec.template.spec.containers[0].startupProbe.httpGet, spec.template.spec.containers[0].startupProbe.tcpSocket",
        ),
        (
            // Class 1: k8s_validation.go `validate` checks only that `image` is set; the
            // reference is parsed by tag resolution (a revision condition).
            "11.23 image that is no reference: admitted",
            set(hello(), &format!("{C0}/image"), json!("foo:bar:baz")),
            &d,
            "",
        ),
        (
            "wisp: neither image nor command",
            set(hello(), &format!("{C0}/image"), json!("")),
            &d,
            "missing field(s): spec.template.spec.containers[0].image",
        ),
        (
            "empty container",
            set(hello(), C0, json!({})),
            &d,
            "missing field(s): spec.template.spec.containers[0]",
        ),
        (
            "no containers",
            set(hello(), "/spec/template/spec/containers", json!([])),
            &d,
            "missing field(s): spec.template.spec.containers",
        ),
        (
            "11.24 init containers with the flag off",
            set(
                hello(),
                "/spec/template/spec/initContainers",
                json!([{"name": "init", "image": "busybox"}]),
            ),
            &d,
            "must not set the field(s): spec.template.spec.initContainers\npod spec support for init-containers is off, but found 1 init containers: ",
        ),
        (
            "11.24 probe in an init container",
            set(
                hello(),
                "/spec/template/spec/initContainers",
                json!([{"name": "init", "image": "busybox", "livenessProbe": {"exec": {"command": ["x"]}}}]),
            ),
            &init_on,
            "field not allowed in an init container: spec.template.spec.initContainers[0].livenessProbe",
        ),
        (
            "init container named like a container",
            set(
                hello(),
                "/spec/template/spec/initContainers",
                json!([{"name": "user-container", "command": ["true"]}]),
            ),
            &init_on,
            "duplicate container name \"user-container\": spec.template.spec.initContainers[0].name",
        ),
        (
            "11.25 window 1s",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"autoscaling.knative.dev/window": "1s"}),
            ),
            &d,
            "expected 6s <= 1s <= 1h0m0s: spec.template.metadata.annotations.autoscaling.knative.dev/window",
        ),
        (
            "11.25 max < min",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"autoscaling.knative.dev/min-scale": "5", "autoscaling.knative.dev/max-scale": "2"}),
            ),
            &d,
            "max-scale=2 is less than min-scale=5: spec.template.metadata.annotations.autoscaling.knative.dev/max-scale, spec.template.metadata.annotations.autoscaling.knative.dev/min-scale",
        ),
        (
            "11.25 initial-scale 0 through a Service",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"autoscaling.knative.dev/initial-scale": "0"}),
            ),
            &d,
            "invalid value: 0: spec.template.metadata.annotations.autoscaling.knative.dev/initial-scale=0 not allowed by cluster",
        ),
        (
            "11.26 autoscaling annotation on Service metadata",
            set(
                hello(),
                "/metadata/annotations",
                json!({"autoscaling.knative.dev/min-scale": "1"}),
            ),
            &d,
            "invalid key name \"autoscaling.knative.dev/min-scale\": metadata.annotations\nautoscaling annotations must be put under \"spec.template.metadata.annotations\" to work",
        ),
        (
            "template networking annotation",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"networking.knative.dev/visibility": "cluster-local", "networking.knative.dev/ingress.class": "x"}),
            ),
            &d,
            "invalid key name \"networking.knative.dev/visibility\": spec.template.metadata.annotations",
        ),
        (
            "11.27 BYO name without prefix",
            set(
                set(hello(), "/metadata/name", json!("byo-name")),
                "/spec/template/metadata/name",
                json!("foo"),
            ),
            &d,
            "invalid value: \"foo\" must have prefix \"byo-name-\": spec.template.metadata.name",
        ),
        (
            "BYO name with generateName parent",
            set(
                set(hello(), "/metadata", json!({"generateName": "hello-"})),
                "/spec/template/metadata/name",
                json!("hello-foo"),
            ),
            &d,
            "must not set the field(s): spec.template.metadata.name",
        ),
        (
            "BYO name not a label",
            set(hello(), "/spec/template/metadata/name", json!("hello_1")),
            &d,
            "invalid value: not a DNS 1035 label: [a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]: spec.template.metadata.name",
        ),
        (
            "11.28 rollout duration CLXXXIIIs",
            set(
                hello(),
                "/metadata/annotations",
                json!({"serving.knative.dev/rollout-duration": "CLXXXIIIs"}),
            ),
            &d,
            "invalid value: CLXXXIIIs: metadata.annotations.serving.knative.dev/rollout-duration",
        ),
        (
            "11.28 rollout duration 1.5s (legacy key)",
            set(
                hello(),
                "/metadata/annotations",
                json!({"serving.knative.dev/rolloutDuration": "1.5s"}),
            ),
            &d,
            "rollout-duration=1.5s is not at second precision: metadata.annotations.serving.knative.dev/rolloutDuration",
        ),
        (
            "rollout duration negative",
            set(
                hello(),
                "/metadata/annotations",
                json!({"serving.knative.dev/rollout-duration": "-1m"}),
            ),
            &d,
            "rollout-duration=-1m must be positive: metadata.annotations.serving.knative.dev/rollout-duration",
        ),
        (
            "11.28 progress deadline -1m3s",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"serving.knative.dev/progress-deadline": "-1m3s"}),
            ),
            &d,
            "progress-deadline=-1m3s must be positive: spec.template.metadata.annotations.serving.knative.dev/progress-deadline",
        ),
        (
            "progress deadline precision",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"serving.knative.dev/progress-deadline": "10.5s"}),
            ),
            &d,
            "progress-deadline=10.5s is not at second precision: spec.template.metadata.annotations.serving.knative.dev/progress-deadline",
        ),
        (
            "11.29 missing name",
            set(hello(), "/metadata", json!({"namespace": "default"})),
            &d,
            "name or generateName is required: metadata.name",
        ),
        (
            "name not a DNS-1035 label",
            set(hello(), "/metadata/name", json!("1hello")),
            &d,
            "not a DNS 1035 label: [a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]: metadata.name",
        ),
        (
            "name too long",
            set(hello(), "/metadata/name", json!("a".repeat(64))),
            &d,
            "not a DNS 1035 label: [must be no more than 63 bytes]: metadata.name",
        ),
        (
            // Class 6: the newest `service_validation.go` checks only the visibility label.
            "labels on a Service",
            set(
                hello(),
                "/metadata/labels",
                json!({"networking.knative.dev/visibility": "public", "serving.knative.dev/route": "x"}),
            ),
            &d,
            "invalid value: public: metadata.labels.networking.knative.dev/visibility",
        ),
        (
            "unknown spec field",
            set(hello(), "/spec/foo", json!(1)),
            &d,
            "must not set the field(s): spec.foo",
        ),
    ];
    for (name, obj, cfg, want) in cases {
        assert_eq!(check_service(obj, cfg), want, "{name}");
    }
}

#[test]
fn reference_section_11_routes() {
    let d = Config::default();
    let traffic = |t: Value| set(route(), "/spec/traffic", t);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "11.1 percent 101 (Route)",
            traffic(json!([
                {"configurationName": "hello", "latestRevision": true, "percent": 101},
                {"revisionName": "hello-00001", "latestRevision": false, "percent": -1}
            ])),
            "expected 0 <= -1 <= 100: spec.traffic[1].percent\nexpected 0 <= 101 <= 100: spec.traffic[0].percent",
        ),
        (
            "11.3 sum 90",
            traffic(json!([{"configurationName": "hello", "latestRevision": true, "percent": 90}])),
            "Traffic targets sum to 90, want 100: spec.traffic",
        ),
        (
            "11.4 both names",
            traffic(
                json!([{"configurationName": "hello", "revisionName": "hello-00001", "latestRevision": false, "percent": 100}]),
            ),
            "expected exactly one, got both: spec.traffic[0].configurationName, spec.traffic[0].revisionName",
        ),
        (
            "11.5 neither name",
            traffic(json!([{"latestRevision": true, "percent": 100}])),
            "expected exactly one, got neither: spec.traffic[0].configurationName, spec.traffic[0].revisionName",
        ),
        (
            "service label without owner",
            set(
                route(),
                "/metadata/labels",
                json!({"serving.knative.dev/service": "hello"}),
            ),
            "missing field(s): metadata.labels.serving.knative.dev/service",
        ),
        (
            "rollout duration on a Route",
            set(
                route(),
                "/metadata/annotations",
                json!({"serving.knative.dev/rollout-duration": "1.5s"}),
            ),
            "rollout-duration=1.5s is not at second precision: metadata.annotations.serving.knative.dev/rollout-duration",
        ),
    ];
    for (name, obj, want) in cases {
        assert_eq!(check_route(obj, &d), want, "{name}");
    }
    // An owner reference backs the label.
    let owned = set(
        set(
            route(),
            "/metadata/labels",
            json!({"serving.knative.dev/service": "hello"}),
        ),
        "/metadata/ownerReferences",
        json!([{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "hello", "uid": "u"}]),
    );
    assert_eq!(check_route(owned, &d), "");
}

#[test]
fn reference_section_11_updates() {
    let d = Config::default();
    // 11.27: BYO name kept while the template changed.
    let old = set(
        set(hello(), "/metadata/name", json!("byo-name")),
        "/spec/template/metadata/name",
        json!("byo-name-v1"),
    );
    let new = set(
        old.clone(),
        &format!("{C0}/image"),
        json!("ghcr.io/knative/helloworld-go:v2"),
    );
    let got = errors(&validate_service(
        &svc(new.clone()),
        Some(&svc(old.clone())),
        &d,
    ));
    let want_head = "Saw the following changes without a name change (-old +new): spec.template.metadata.name\n";
    assert!(got.starts_with(want_head), "{got}");
    let diff = &got[want_head.len()..];
    let changed: Vec<(char, &str)> = diff
        .lines()
        .filter(|l| l.starts_with(['-', '+']))
        .map(|l| {
            let text = l[1..].trim();
            // The line's trailing comma depends on which field follows it.
            (
                l.chars().next().unwrap_or(' '),
                text.strip_suffix(',').unwrap_or(text),
            )
        })
        .collect();
    assert_eq!(
        changed,
        vec![
            ('-', "\"image\": \"ghcr.io/knative/helloworld-go\""),
            ('+', "\"image\": \"ghcr.io/knative/helloworld-go:v2\"")
        ],
        "{diff}"
    );
    // Renaming with the change is fine, as is an unchanged update.
    let renamed = set(new, "/spec/template/metadata/name", json!("byo-name-v2"));
    assert_eq!(
        errors(&validate_service(
            &svc(renamed),
            Some(&svc(old.clone())),
            &d
        )),
        ""
    );
    assert_eq!(
        errors(&validate_service(&svc(old.clone()), Some(&svc(old)), &d)),
        ""
    );

    // 11.29: creator is immutable; lastModifier only changes with the spec.
    let annotated = |creator: &str, modifier: &str| {
        set(
            hello(),
            "/metadata/annotations",
            json!({"serving.knative.dev/creator": creator, "serving.knative.dev/lastModifier": modifier}),
        )
    };
    let got = errors(&validate_service(
        &svc(annotated("bob", "alice")),
        Some(&svc(annotated("alice", "alice"))),
        &d,
    ));
    assert_eq!(
        got,
        "annotation value is immutable: metadata.annotations.serving.knative.dev/creator"
    );
    let got = errors(&validate_service(
        &svc(annotated("alice", "bob")),
        Some(&svc(annotated("alice", "alice"))),
        &d,
    ));
    assert_eq!(
        got,
        "annotation value is immutable: metadata.annotations.serving.knative.dev/lastModifier"
    );
    let changed = set(
        annotated("alice", "bob"),
        "/spec/template/spec/timeoutSeconds",
        json!(10),
    );
    assert_eq!(
        errors(&validate_service(
            &svc(changed),
            Some(&svc(annotated("alice", "alice"))),
            &d
        )),
        ""
    );

    // The same rules on a Configuration that no Service owns.
    let cfg_obj = |creator: &str| -> Configuration {
        serde_json::from_value(json!({
            "metadata": {"name": "hello", "annotations": {"serving.knative.dev/creator": creator}},
            "spec": {"template": {"spec": {"containers": [{"image": "busybox"}]}}}
        }))
        .expect("configuration")
    };
    assert_eq!(
        errors(&validate_configuration(
            &cfg_obj("bob"),
            Some(&cfg_obj("alice")),
            &d
        )),
        "annotation value is immutable: metadata.annotations.serving.knative.dev/creator"
    );

    // 11.30: a Revision's spec is immutable.
    let rev = |image: &str| -> Revision {
        serde_json::from_value(json!({
            "metadata": {"name": "hello-00001", "namespace": "default"},
            "spec": {"containers": [{"image": image}]}
        }))
        .expect("revision")
    };
    let got = errors(&validate_revision(
        &rev("busybox:2"),
        Some(&rev("busybox:1")),
        &d,
    ));
    assert_eq!(
        got,
        "Immutable fields changed (-old +new): spec\n  ...\n      {\n-       \"image\": \"busybox:1\",\n+       \"image\": \"busybox:2\",\n        \"resources\": {}\n  ..."
    );
    assert_eq!(
        errors(&validate_revision(
            &rev("busybox:1"),
            Some(&rev("busybox:1")),
            &d
        )),
        ""
    );
}

/// `annotation_validation.go`: every autoscaling annotation, a too-low and a too-high value and a valid one, with
/// paths relative to the annotations map (as Knative's own unit tests render them).
#[test]
fn autoscaling_annotation_ranges() {
    let d = Config::default();
    let limit10 = cfg_with(|c| c.autoscaler.max_scale_limit = 10);
    let zero_ok = cfg_with(|c| c.autoscaler.allow_zero_initial_scale = true);
    let a = "autoscaling.knative.dev/";
    type Case<'a> = (Vec<(&'a str, &'a str)>, &'a Config, String);
    let cases: Vec<Case> = vec![
        (
            vec![("class", "unsupported.knative.dev")],
            &d,
            format!("invalid value: unsupported.knative.dev: {a}class"),
        ),
        (
            vec![("class", "kpa.autoscaling.knative.dev")],
            &d,
            String::new(),
        ),
        (
            vec![("class", "custom.example.com"), ("metric", "anything")],
            &d,
            String::new(),
        ),
        (
            vec![("metric", "cpu")],
            &d,
            format!("invalid value: cpu: {a}metric"),
        ),
        (vec![("metric", "rps")], &d, String::new()),
        (
            vec![("class", "hpa.autoscaling.knative.dev"), ("metric", "cpu")],
            &d,
            String::new(),
        ),
        // Knative's `validateMetric`: any non-empty metric for the HPA class (cpu, memory
        // or a custom one), and its algorithm is not checked (`validateAlgorithm`).
        (
            vec![
                ("class", "hpa.autoscaling.knative.dev"),
                ("metric", "memory"),
                ("target", "75"),
                ("window", "30s"),
            ],
            &d,
            String::new(),
        ),
        (
            vec![
                ("class", "hpa.autoscaling.knative.dev"),
                ("metric", "custom-qps"),
                ("metric-aggregation-algorithm", "whatever"),
            ],
            &d,
            String::new(),
        ),
        (
            vec![("class", "hpa.autoscaling.knative.dev"), ("metric", "")],
            &d,
            format!("invalid value: : {a}metric"),
        ),
        (
            vec![("target", "0")],
            &d,
            format!("target 0 should be at least 0.01: {a}target"),
        ),
        (
            vec![("target", "0.009")],
            &d,
            format!("target 0.009 should be at least 0.01: {a}target"),
        ),
        (
            vec![("target", "abc")],
            &d,
            format!("invalid value: abc: {a}target"),
        ),
        (vec![("target", "0.01")], &d, String::new()),
        (vec![("target", "1e9")], &d, String::new()),
        (
            vec![("target-utilization-percentage", "0")],
            &d,
            format!("expected 1 <= 0 <= 100: {a}target-utilization-percentage"),
        ),
        (
            vec![("target-utilization-percentage", "101")],
            &d,
            format!("expected 1 <= 101 <= 100: {a}target-utilization-percentage"),
        ),
        (
            vec![("targetUtilizationPercentage", "101")],
            &d,
            format!("expected 1 <= 101 <= 100: {a}targetUtilizationPercentage"),
        ),
        (
            vec![("target-utilization-percentage", "70")],
            &d,
            String::new(),
        ),
        (
            vec![("window", "1s")],
            &d,
            format!("expected 6s <= 1s <= 1h0m0s: {a}window"),
        ),
        (
            vec![("window", "2h")],
            &d,
            format!("expected 6s <= 2h <= 1h0m0s: {a}window"),
        ),
        (
            vec![("window", "6500ms")],
            &d,
            format!("must be specified with at most second precision: {a}window"),
        ),
        (
            vec![("window", "sixty")],
            &d,
            format!("invalid value: sixty: {a}window"),
        ),
        (vec![("window", "60s")], &d, String::new()),
        (
            vec![("panic-window-percentage", "0")],
            &d,
            format!("expected 1 <= 0 <= 100: {a}panic-window-percentage"),
        ),
        (
            vec![("panicWindowPercentage", "101")],
            &d,
            format!("expected 1 <= 101 <= 100: {a}panicWindowPercentage"),
        ),
        (vec![("panic-window-percentage", "10")], &d, String::new()),
        (
            vec![("panic-threshold-percentage", "109")],
            &d,
            format!("expected 110 <= 109 <= 1000: {a}panic-threshold-percentage"),
        ),
        (
            vec![("panicThresholdPercentage", "1001")],
            &d,
            format!("expected 110 <= 1001 <= 1000: {a}panicThresholdPercentage"),
        ),
        (
            vec![("panic-threshold-percentage", "fifty")],
            &d,
            format!("invalid value: fifty: {a}panic-threshold-percentage"),
        ),
        (
            vec![("panic-threshold-percentage", "200")],
            &d,
            String::new(),
        ),
        (
            vec![("min-scale", "-1")],
            &d,
            format!("expected 0 <= -1 <= 2147483647: {a}min-scale"),
        ),
        (
            vec![("minScale", "2147483648")],
            &d,
            format!("expected 0 <= 2147483648 <= 2147483647: {a}minScale"),
        ),
        (
            vec![("min-scale", "one")],
            &d,
            format!("invalid value: one: {a}min-scale"),
        ),
        (vec![("min-scale", "3")], &d, String::new()),
        (
            vec![("max-scale", "-1")],
            &d,
            format!("expected 0 <= -1 <= 2147483647: {a}max-scale"),
        ),
        (vec![("maxScale", "5")], &d, String::new()),
        (
            vec![("min-scale", "5"), ("max-scale", "2")],
            &d,
            format!("max-scale=2 is less than min-scale=5: {a}max-scale, {a}min-scale"),
        ),
        (
            vec![("min-scale", "5"), ("max-scale", "0")],
            &d,
            String::new(),
        ),
        (
            vec![("max-scale", "11")],
            &limit10,
            format!("expected 1 <= 11 <= 10: {a}max-scale"),
        ),
        (
            vec![("max-scale", "0")],
            &limit10,
            format!("max-scale=0 (unlimited), must be less than 10: {a}max-scale"),
        ),
        (vec![("max-scale", "10")], &limit10, String::new()),
        (
            vec![("initial-scale", "0")],
            &d,
            format!("invalid value: 0: {a}initial-scale=0 not allowed by cluster"),
        ),
        (
            vec![("initialScale", "-1")],
            &d,
            format!("invalid value: -1: {a}initialScale must be greater than 0"),
        ),
        (
            vec![("initial-scale", "x")],
            &d,
            format!("invalid value: x: {a}initial-scale"),
        ),
        (vec![("initial-scale", "0")], &zero_ok, String::new()),
        (vec![("initial-scale", "3")], &d, String::new()),
        (
            vec![("activation-scale", "1")],
            &d,
            format!("activation-scale=1 must be greater than 1: {a}activation-scale"),
        ),
        (
            vec![("activation-scale", "2"), ("min-scale", "3")],
            &d,
            format!("min-scale=3 is greater than activation-scale=2: {a}activation-scale"),
        ),
        (
            vec![("activation-scale", "4"), ("max-scale", "3")],
            &d,
            format!("max-scale=3 is less than activation-scale=4: {a}activation-scale"),
        ),
        (
            vec![("activation-scale", "2"), ("max-scale", "3")],
            &d,
            String::new(),
        ),
        (
            vec![("scale-down-delay", "-1s")],
            &d,
            format!("expected 0s <= -1s <= 1h0m0s: {a}scale-down-delay"),
        ),
        (
            vec![("scaleDownDelay", "2h")],
            &d,
            format!("expected 0s <= 2h <= 1h0m0s: {a}scaleDownDelay"),
        ),
        (
            vec![("scale-down-delay", "1.5s")],
            &d,
            format!("must be specified with at most second precision: {a}scale-down-delay"),
        ),
        (vec![("scale-down-delay", "30s")], &d, String::new()),
        (
            vec![("scale-to-zero-pod-retention-period", "-1s")],
            &d,
            format!("expected 0s <= -1s <= 1h0m0s: {a}scale-to-zero-pod-retention-period"),
        ),
        (
            vec![("scaleToZeroPodRetentionPeriod", "1h1s")],
            &d,
            format!("expected 0s <= 1h1s <= 1h0m0s: {a}scaleToZeroPodRetentionPeriod"),
        ),
        (
            vec![("scale-to-zero-pod-retention-period", "1m30s")],
            &d,
            String::new(),
        ),
        (
            vec![("target-burst-capacity", "-11")],
            &d,
            format!("invalid value: -11: {a}target-burst-capacity"),
        ),
        (
            vec![("targetBurstCapacity", "x")],
            &d,
            format!("invalid value: x: {a}targetBurstCapacity"),
        ),
        (vec![("target-burst-capacity", "-1")], &d, String::new()),
        (vec![("target-burst-capacity", "211")], &d, String::new()),
        (
            vec![
                ("class", "kpa.autoscaling.knative.dev"),
                ("metric-aggregation-algorithm", "foo"),
            ],
            &d,
            format!("invalid value: foo: {a}metric-aggregation-algorithm"),
        ),
        (
            vec![
                ("class", "kpa.autoscaling.knative.dev"),
                ("metricAggregationAlgorithm", "weightedExponential"),
            ],
            &d,
            String::new(),
        ),
        // Without an explicit KPA class the algorithm is left to the autoscaler.
        (
            vec![("metric-aggregation-algorithm", "foo")],
            &d,
            String::new(),
        ),
        // The new spelling wins over the legacy one.
        (
            vec![("min-scale", "1"), ("minScale", "-5")],
            &d,
            String::new(),
        ),
    ];
    for (annos, cfg, want) in cases {
        let m: BTreeMap<String, String> = annos
            .iter()
            .map(|(k, v)| (format!("{a}{k}"), v.to_string()))
            .collect();
        assert_eq!(
            validate_autoscaling(&cfg.autoscaler, &m).to_string(),
            want,
            "{annos:?}"
        );
    }
}

#[test]
fn valid_objects_pass() {
    let d = Config::default();
    let cases: Vec<(&str, Value, &Config)> = vec![
        ("hello with image", hello(), &d),
        (
            "hello with command only (wisp)",
            set(
                hello(),
                C0,
                json!({"name": "user-container", "command": ["python3", "-m", "http.server"]}),
            ),
            &d,
        ),
        (
            "traffic split with tags",
            set(
                hello(),
                "/spec/traffic",
                json!([
                    {"tag": "current", "revisionName": "hello-00001", "latestRevision": false, "percent": 80},
                    {"tag": "candidate", "latestRevision": true, "percent": 20},
                    {"tag": "latest", "latestRevision": true, "percent": 0}
                ]),
            ),
            &d,
        ),
        (
            "BYO name with prefix, autoscaling and networking annotations",
            set(
                set(hello(), "/spec/template/metadata/name", json!("hello-v1")),
                "/spec/template/metadata/annotations",
                json!({
                    "autoscaling.knative.dev/min-scale": "1",
                    "autoscaling.knative.dev/max-scale": "5",
                    "autoscaling.knative.dev/target": "10",
                    "autoscaling.knative.dev/window": "30s",
                    "serving.knative.dev/progress-deadline": "120s",
                    "networking.knative.dev/ingress.class": "kourier.ingress.networking.knative.dev"
                }),
            ),
            &d,
        ),
        (
            "rollout duration and cluster-local",
            set(
                set(
                    hello(),
                    "/metadata/annotations",
                    json!({"serving.knative.dev/rollout-duration": "380s"}),
                ),
                "/metadata/labels",
                json!({"networking.knative.dev/visibility": "cluster-local"}),
            ),
            &d,
        ),
        (
            "port, probes, env, volumes",
            set(
                set(
                    hello(),
                    C0,
                    json!({
                        "name": "user-container",
                        "image": "gcr.io/knative-samples/helloworld-go:latest",
                        "ports": [{"name": "h2c", "containerPort": 9000}],
                        "env": [
                            {"name": "TARGET", "value": "wisp"},
                            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                        ],
                        "envFrom": [{"configMapRef": {"name": "c"}}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 9000}, "successThreshold": 1},
                        "livenessProbe": {"tcpSocket": {"port": "h2c"}, "periodSeconds": 5, "timeoutSeconds": 1, "failureThreshold": 3},
                        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "100m"}},
                        "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/config", "readOnly": true},
                            {"name": "scratch", "mountPath": "/tmp/scratch"}
                        ]
                    }),
                ),
                "/spec/template/spec/volumes",
                json!([
                    {"name": "config", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}]}},
                    {"name": "scratch", "emptyDir": {"medium": "Memory"}}
                ]),
            ),
            &d,
        ),
        (
            "serving container plus sidecar",
            set(
                hello(),
                "/spec/template/spec/containers",
                json!([
                    {"name": "app", "image": "busybox", "ports": [{"containerPort": 8080}]},
                    {"name": "sidecar", "command": ["sleep", "infinity"], "env": [{"name": "PORT", "value": "1"}]}
                ]),
            ),
            &d,
        ),
    ];
    for (name, obj, cfg) in cases {
        assert_eq!(check_service(obj, cfg), "", "{name}");
    }

    // Feature-gated fields pass once enabled.
    let gated = cfg_with(|c| {
        c.features.podspec_nodeselector = Flag::Enabled;
        c.features.podspec_init_containers = Flag::Enabled;
        c.features.podspec_fieldref = Flag::Enabled;
        c.features.podspec_securitycontext = Flag::Enabled;
        c.features.containerspec_addcapabilities = Flag::Enabled;
        c.features.multi_container_probing = Flag::Enabled;
    });
    let obj = set(
        set(
            set(
                set(
                    hello(),
                    "/spec/template/spec/nodeSelector",
                    json!({"disk": "ssd"}),
                ),
                "/spec/template/spec/initContainers",
                json!([{"name": "init", "image": "busybox"}]),
            ),
            "/spec/template/spec/securityContext",
            json!({"runAsUser": 1000, "fsGroup": 2000}),
        ),
        "/spec/template/spec/containers",
        json!([
            {"name": "app", "image": "busybox", "ports": [{"containerPort": 8080}],
             "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}},
            {"name": "side", "image": "busybox", "readinessProbe": {"tcpSocket": {"port": 9000}, "successThreshold": 1}}
        ]),
    );
    assert_eq!(check_service(obj, &gated), "");

    // Routes, Configurations and Revisions.
    let split = set(
        route(),
        "/spec/traffic",
        json!([
            {"configurationName": "hello", "latestRevision": true, "percent": 50, "tag": "latest"},
            {"revisionName": "hello-00001", "latestRevision": false, "percent": 50}
        ]),
    );
    assert_eq!(check_route(split, &d), "");
    let config: Configuration = serde_json::from_value(json!({
        "metadata": {"name": "hello", "labels": {"serving.knative.dev/service": "hello"},
            "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "hello", "uid": "u"}]},
        "spec": {"template": {"spec": {"containers": [{"image": "busybox"}]}}}
    }))
    .expect("configuration");
    assert_eq!(errors(&validate_configuration(&config, None, &d)), "");
    let rev: Revision = serde_json::from_value(json!({
        "metadata": {"name": "hello-00001",
            "labels": {"serving.knative.dev/configuration": "hello", "serving.knative.dev/configurationGeneration": "1",
                       "serving.knative.dev/routingState": "active"},
            "annotations": {"autoscaling.knative.dev/min-scale": "1"},
            "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "name": "hello", "uid": "u"}]},
        "spec": {"containerConcurrency": 10, "timeoutSeconds": 300, "containers": [{"image": "busybox"}]}
    }))
    .expect("revision");
    assert_eq!(errors(&validate_revision(&rev, None, &d)), "");
}

#[test]
fn other_kinds_reject_like_knative() {
    let d = Config::default();
    let config: Configuration = serde_json::from_value(json!({
        "metadata": {"name": "hello", "labels": {"serving.knative.dev/service": "hello"},
            "annotations": {"autoscaling.knative.dev/window": "60s"}},
        "spec": {"template": {"spec": {"containers": [{"image": "busybox"}]}}}
    }))
    .expect("configuration");
    assert_eq!(
        errors(&validate_configuration(&config, None, &d)),
        "invalid key name \"autoscaling.knative.dev/window\": metadata.annotations\nautoscaling annotations must be put under \"spec.template.metadata.annotations\" to work\nmissing field(s): metadata.labels.serving.knative.dev/service"
    );
    let rev: Revision = serde_json::from_value(json!({
        "metadata": {"name": "hello-00001", "labels": {"serving.knative.dev/configuration": "hello", "serving.knative.dev/foo": "x"},
            "annotations": {"autoscaling.knative.dev/window": "1s"}},
        "spec": {"containerConcurrency": 2000, "containers": [{"image": "busybox"}]}
    }))
    .expect("revision");
    assert_eq!(
        errors(&validate_revision(&rev, None, &d)),
        "expected 0 <= 2000 <= 1000: spec.containerConcurrency\nexpected 6s <= 1s <= 1h0m0s: metadata.annotations.autoscaling.knative.dev/window\nmissing field(s): metadata.labels.serving.knative.dev/configuration"
    );
}

#[test]
fn secure_pod_defaults_warnings() {
    let d = Config::default();
    let e = validate_service(&svc(hello()), None, &d);
    assert_eq!(errors(&e), "");
    let c = "spec.template.spec.containers[0].securityContext";
    assert_eq!(
        e.filter(Level::Warning).to_string(),
        format!(
            "{INSECURE}: {c}.allowPrivilegeEscalation, {c}.capabilities, {c}.runAsNonRoot, {c}.seccompProfile"
        )
    );

    let misspelled = set(
        hello(),
        &format!("{C0}/securityContext"),
        json!({"runAsNonRoot": true, "allowPrivilegeEscalation": false, "seccompProfile": {"type": "RuntimeDefault"},
               "capabilities": {"drop": ["all"]}}),
    );
    let e = validate_service(&svc(misspelled), None, &d);
    assert_eq!(
        e.filter(Level::Warning).to_string(),
        format!("invalid value: all: {c}.capabilities.drop\nMust be spelled as 'ALL'")
    );

    // Under secure-pod-defaults the defaults are secure: no warnings, and NET_BIND_SERVICE
    // may be added.
    let secure = cfg_with(|c| c.features.secure_pod_defaults = SecurePodDefaults::Enabled);
    let bind = set(
        hello(),
        &format!("{C0}/securityContext"),
        json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}}),
    );
    let e = validate_service(&svc(bind.clone()), None, &secure);
    assert!(e.is_empty(), "{e}");
    assert_eq!(
        check_service(bind, &d),
        "must not set the field(s): spec.template.spec.containers[0].securityContext.capabilities.add"
    );
}

/// Issue 17 ("Exactly Knative"): one row per numbered class of difference, each asserting
/// Knative's own verdict and message (empty string: accepted). The source file each rule was
/// read from is named on the row.
#[test]
fn exactly_knative_issue_17() {
    let d = Config::default();
    let cases: Vec<(&str, Value, &Config, &str)> = vec![
        // Class 3 — k8s_validation.go `validate`: only the reserved name `queue-proxy` is
        // checked on a container name; `validateEnvVar`: only emptiness and reserved names.
        (
            "3 container name not an RFC 1123 label",
            set(hello(), &format!("{C0}/name"), json!("My_Container")),
            &d,
            "",
        ),
        (
            "3 env name not a C identifier",
            set(
                hello(),
                &format!("{C0}/env"),
                json!([{"name": "1FOO", "value": "x"}, {"name": "a=b.c", "value": "y"}]),
            ),
            &d,
            "",
        ),
        // Class 4 — k8s_validation.go `validateEnvVar`: value with valueFrom is not refused.
        (
            "4 value and valueFrom",
            set(
                hello(),
                &format!("{C0}/env"),
                json!([{"name": "S", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            ),
            &d,
            "",
        ),
        // Class 5 — k8s_validation.go `validateProbe`: only `StrVal != ""` is compared.
        (
            "5 integer probe ports that differ from the container port",
            set(
                set(
                    hello(),
                    &format!("{C0}/livenessProbe"),
                    json!({"tcpSocket": {"port": 9999}}),
                ),
                &format!("{C0}/readinessProbe"),
                json!({"httpGet": {"port": 1}, "successThreshold": 1}),
            ),
            &d,
            "",
        ),
        (
            "5 named probe port still checked",
            set(
                hello(),
                &format!("{C0}/livenessProbe"),
                json!({"tcpSocket": {"port": "grpc"}}),
            ),
            &d,
            "invalid value: grpc: spec.template.spec.containers[0].livenessProbe.tcpSocket.port\nProbe port must match container port",
        ),
        // Class 14 — knative.dev/pkg apis/field_error.go `mergePaths` de-duplicates paths.
        (
            "14 three equal tags",
            set(
                hello(),
                "/spec/traffic",
                json!([
                    {"percent": 100, "latestRevision": true, "tag": "a"},
                    {"percent": 0, "latestRevision": true, "tag": "a"},
                    {"percent": 0, "latestRevision": true, "tag": "a"}
                ]),
            ),
            &d,
            "Multiple definitions for \"a\": spec.traffic[0].tag, spec.traffic[1].tag, spec.traffic[2].tag",
        ),
        // Class 15 — autoscaling/annotation_validation.go `validateMinMaxScale`: min-scale is
        // compared with activation-scale before the "greater than 1" bound.
        (
            "15 activation-scale 1 below min-scale 3",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"autoscaling.knative.dev/min-scale": "3", "autoscaling.knative.dev/activation-scale": "1"}),
            ),
            &d,
            "min-scale=3 is greater than activation-scale=1: spec.template.metadata.annotations.autoscaling.knative.dev/activation-scale",
        ),
        (
            "15 activation-scale 1 alone",
            set(
                hello(),
                "/spec/template/metadata/annotations",
                json!({"autoscaling.knative.dev/activation-scale": "1"}),
            ),
            &d,
            "activation-scale=1 must be greater than 1: spec.template.metadata.annotations.autoscaling.knative.dev/activation-scale",
        ),
        // Class 16 — k8s_validation.go `validateVolume`: a kind Knative does not know is
        // masked and leaves the one-of empty; gated HostPath carries its own line.
        (
            "16 unknown volume kind",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "g", "nfs": {"server": "s", "path": "/"}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "g", "mountPath": "/g", "readOnly": true}]),
            ),
            &d,
            "expected exactly one, got neither: spec.template.spec.volumes[0].configMap, spec.template.spec.volumes[0].emptyDir, spec.template.spec.volumes[0].projected, spec.template.spec.volumes[0].secret\nmust not set the field(s): spec.template.spec.volumes[0].nfs",
        ),
        (
            "16 hostPath with the flag off",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "v", "hostPath": {"path": "/"}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "v", "mountPath": "/v", "readOnly": true}]),
            ),
            &d,
            "HostPath volume support is disabled, but found HostPath volume v: \nmust not set the field(s): spec.template.spec.volumes[0].hostPath",
        ),
        // Class 18 — k8s_validation.go `validateSidecarContainer` checks a sidecar's probes
        // against `ProbeMask(&corev1.Probe{})`; Knative's k8s_validation_test.go
        // `TestSidecarContainerValidation` "probes not allowed" expects exactly these paths
        // (the handler as the probe itself, then each non-zero field; zero ones omitted).
        (
            "18 sidecar probe masks",
            set(
                hello(),
                "/spec/template/spec/containers",
                json!([
                    {"name": "user-container", "image": "busybox", "ports": [{"containerPort": 8080}]},
                    {"name": "side", "image": "busybox",
                     "readinessProbe": {"httpGet": {"path": "/"}, "periodSeconds": 1, "timeoutSeconds": 1,
                                        "successThreshold": 1, "failureThreshold": 3, "initialDelaySeconds": 0},
                     "livenessProbe": {"tcpSocket": {}}}
                ]),
            ),
            &d,
            "must not set the field(s): spec.template.spec.containers[1].livenessProbe, spec.template.spec.containers[1].readinessProbe, spec.template.spec.containers[1].readinessProbe.failureThreshold, spec.template.spec.containers[1].readinessProbe.periodSeconds, spec.template.spec.containers[1].readinessProbe.successThreshold, spec.template.spec.containers[1].readinessProbe.timeoutSeconds",
        ),
        // Class 11 — k8s_validation.go `validateEmptyDirFields`: `SizeLimit.Value() < 0` is
        // `ErrInvalidValue(dir.SizeLimit, "sizeLimit")`, printed as the Quantity's String().
        (
            "11 negative emptyDir sizeLimit",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "x", "emptyDir": {"sizeLimit": "-1024Mi"}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "x", "mountPath": "/x"}]),
            ),
            &d,
            "invalid value: -1Gi: spec.template.spec.volumes[0].emptyDir.sizeLimit",
        ),
        (
            "11 negative fraction of a nano rounds away from zero, zero passes",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([
                        {"name": "x", "emptyDir": {"sizeLimit": "-0.1n"}},
                        {"name": "y", "emptyDir": {"sizeLimit": "-0"}},
                        {"name": "z", "emptyDir": {"sizeLimit": 1, "medium": "Memory"}}
                    ]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "x", "mountPath": "/x"}, {"name": "y", "mountPath": "/y"}, {"name": "z", "mountPath": "/z"}]),
            ),
            &d,
            "invalid value: -1n: spec.template.spec.volumes[0].emptyDir.sizeLimit",
        ),
        // Class 10 — k8s_validation.go `validateDownwardAPIProjection` /
        // `validateDownwardAPIVolumeFile`: one of fieldRef / resourceFieldRef, not both, and
        // a path.
        (
            "10 projected downwardAPI items",
            set(
                set(
                    hello(),
                    "/spec/template/spec/volumes",
                    json!([{"name": "d", "projected": {"sources": [{"downwardAPI": {"items": [
                        {"path": "ok", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "none"},
                        {"fieldRef": {"fieldPath": "metadata.name"}, "resourceFieldRef": {"resource": "limits.cpu"}}
                    ]}}]}}]),
                ),
                &format!("{C0}/volumeMounts"),
                json!([{"name": "d", "mountPath": "/d", "readOnly": true}]),
            ),
            &d,
            "Within a single item, cannot set both: spec.template.spec.volumes[0].projected[0].downwardAPI.items[2].fieldRef, spec.template.spec.volumes[0].projected[0].downwardAPI.items[2].resourceFieldRef\nexpected exactly one, got neither: spec.template.spec.volumes[0].projected[0].downwardAPI.items[1].fieldRef, spec.template.spec.volumes[0].projected[0].downwardAPI.items[1].resourceFieldRef\nmissing field(s): spec.template.spec.volumes[0].projected[0].downwardAPI.items[2].path",
        ),
        // Class 17 — k8s_validation.go `ValidatePodSecurityContext` with
        // `PodSecurityContextMask`: each sub-field set is named, not the whole context.
        (
            "17 pod securityContext with the flag off",
            set(
                hello(),
                "/spec/template/spec/securityContext",
                json!({"runAsUser": 1000, "fsGroup": 2000, "sysctls": [{"name": "a", "value": "b"}], "seLinuxOptions": null}),
            ),
            &d,
            "must not set the field(s): spec.template.spec.securityContext.fsGroup, spec.template.spec.securityContext.runAsUser, spec.template.spec.securityContext.sysctls",
        ),
        (
            "17 pod securityContext: bounds are checked whatever the flag",
            set(
                hello(),
                "/spec/template/spec/securityContext",
                json!({"runAsGroup": -1}),
            ),
            &d,
            "expected 0 <= -1 <= 2147483647: spec.template.spec.securityContext.runAsGroup\nmust not set the field(s): spec.template.spec.securityContext.runAsGroup",
        ),
        // Class 2 — k8s_validation.go `ValidatePodSpec`/`validate` use
        // `apis.CheckDisallowedFields` with `PodSpecMask`/`ContainerMask`: a Go value field at
        // its zero value is not set; a pointer field is set by any non-null value.
        (
            "2 gated value fields at their zero value",
            set(
                set(
                    hello(),
                    "/spec/template/spec",
                    json!({
                        "containerConcurrency": 0, "timeoutSeconds": 300,
                        "containers": [{"name": "user-container", "image": "ghcr.io/knative/helloworld-go"}],
                        "hostNetwork": false, "hostPID": false, "hostIPC": false,
                        "nodeSelector": {}, "tolerations": [], "dnsPolicy": "", "schedulerName": ""
                    }),
                ),
                &format!("{C0}/stdin"),
                json!(false),
            ),
            &d,
            "",
        ),
        (
            "2 container tty/stdinOnce false, stdin true",
            set(
                set(
                    set(hello(), &format!("{C0}/tty"), json!(false)),
                    &format!("{C0}/stdinOnce"),
                    json!(false),
                ),
                &format!("{C0}/stdin"),
                json!(true),
            ),
            &d,
            "must not set the field(s): spec.template.spec.containers[0].stdin",
        ),
        (
            "2 gated pointer fields at their zero value",
            set(
                set(
                    set(
                        hello(),
                        "/spec/template/spec/shareProcessNamespace",
                        json!(false),
                    ),
                    "/spec/template/spec/terminationGracePeriodSeconds",
                    json!(0),
                ),
                "/spec/template/spec/runtimeClassName",
                json!(""),
            ),
            &d,
            "must not set the field(s): spec.template.spec.runtimeClassName, spec.template.spec.shareProcessNamespace, spec.template.spec.terminationGracePeriodSeconds",
        ),
        (
            "2 hostNetwork true still refused",
            set(hello(), "/spec/template/spec/hostNetwork", json!(true)),
            &d,
            "must not set the field(s): spec.template.spec.hostNetwork",
        ),
        // Class 13 — apimachinery content/errors.go `MaxLenError`: "bytes".
        (
            "13 name too long",
            set(hello(), "/metadata/name", json!("a".repeat(64))),
            &d,
            "not a DNS 1035 label: [must be no more than 63 bytes]: metadata.name",
        ),
    ];
    for (name, obj, cfg, want) in cases {
        assert_eq!(check_service(obj, cfg), want, "{name}");
    }
}

proptest::proptest! {
    /// Untrusted strings in any checked position never panic the webhook.
    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,80}", n in -5i64..70_000) {
        let d = Config::default();
        let annos: serde_json::Map<String, Value> = [
            "autoscaling.knative.dev/window", "autoscaling.knative.dev/min-scale",
            "autoscaling.knative.dev/initial-scale", "autoscaling.knative.dev/target",
            "serving.knative.dev/progress-deadline",
        ].iter().map(|k| (k.to_string(), json!(s))).collect();
        let obj = set(
            set(
                set(
                    set(hello(), "/metadata/name", json!(s)),
                    &format!("{C0}/image"), json!(s),
                ),
                "/spec/template/metadata/annotations", Value::Object(annos),
            ),
            "/spec/traffic/0/tag", json!(s),
        );
        let obj = set(obj, &format!("{C0}/ports"), json!([{"name": s, "containerPort": n}]));
        let obj = set(obj, &format!("{C0}/volumeMounts"), json!([{"name": s, "mountPath": s}]));
        let _ = validate_service(&svc(obj), None, &d).to_string();
    }
}

/// Issue 17, class 21 (and the decode half of class 11): `resources` quantities are
/// apimachinery `resource.Quantity` values (k8s.io/apimachinery `pkg/api/resource/quantity.go`
/// `UnmarshalJSON` / `MarshalJSON`): decoding parses them (a malformed one refuses the whole
/// object with `ErrFormatWrong` / `ErrSuffix`) and the stored object has the canonical form.
#[test]
fn exactly_knative_issue_17_quantities() {
    let stored = |resources: Value| -> Value {
        let s = svc(set(hello(), &format!("{C0}/resources"), resources));
        serde_json::to_value(&s.spec.template.spec.pod.containers[0].resources).expect("json")
    };
    for (given, want) in [
        (
            json!({"limits": {"cpu": "1000m", "memory": "1024Mi"}, "requests": {"cpu": 0.5, "memory": 128974848}}),
            json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "128974848"}}),
        ),
        (
            json!({"limits": {"ephemeral-storage": "1e3", "cpu": " 2 "}}),
            json!({"limits": {"cpu": "2", "ephemeral-storage": "1e3"}}),
        ),
        (
            json!({"requests": {"memory": "1.5Gi", "cpu": "100m"}}),
            json!({"requests": {"cpu": "100m", "memory": "1536Mi"}}),
        ),
        // A null list (YAML `limits:` with nothing after it) is empty, as Go decodes it.
        (
            json!({"limits": null, "requests": {"cpu": "1"}}),
            json!({"requests": {"cpu": "1"}}),
        ),
    ] {
        assert_eq!(stored(given.clone()), want, "{given}");
    }
    for (given, want) in [
        (
            json!({"limits": {"cpu": "one"}}),
            crate::quantity::ERR_FORMAT_WRONG,
        ),
        (
            json!({"requests": {"memory": "1GB"}}),
            crate::quantity::ERR_FORMAT_WRONG,
        ),
        (
            json!({"requests": {"memory": "1mi"}}),
            crate::quantity::ERR_SUFFIX,
        ),
        (
            json!({"limits": {"cpu": ""}}),
            crate::quantity::ERR_FORMAT_WRONG,
        ),
    ] {
        let e = serde_json::from_value::<Service>(set(
            hello(),
            &format!("{C0}/resources"),
            given.clone(),
        ))
        .expect_err("malformed quantity");
        assert!(e.to_string().starts_with(want), "{given}: {e}");
    }
}

/// Issue 17, class 22: the stored object omits the zero values Go omits (k8s.io/api
/// core/v1 types.go: `Probe`'s `int32 ...,omitempty` fields, `VolumeMount.ReadOnly bool
/// ...,omitempty`) and keeps those Go keeps (`SeccompProfile.Type` and
/// `TCPSocketAction.Port` have no omitempty; `Probe.TerminationGracePeriodSeconds` is a
/// pointer).
#[test]
fn exactly_knative_issue_17_zero_values() {
    let given = set(
        set(
            set(
                hello(),
                &format!("{C0}/readinessProbe"),
                json!({"tcpSocket": {}, "periodSeconds": 0, "initialDelaySeconds": 0, "timeoutSeconds": 0,
                       "failureThreshold": 0, "successThreshold": 1, "terminationGracePeriodSeconds": 0}),
            ),
            &format!("{C0}/volumeMounts"),
            json!([{"name": "x", "mountPath": "/x", "readOnly": false}]),
        ),
        &format!("{C0}/securityContext"),
        json!({"seccompProfile": {"type": ""}}),
    );
    let c = serde_json::to_value(&svc(given).spec.template.spec.pod.containers[0]).expect("json");
    assert_eq!(
        c["readinessProbe"],
        json!({"tcpSocket": {"port": 0}, "successThreshold": 1, "terminationGracePeriodSeconds": 0})
    );
    assert_eq!(c["volumeMounts"], json!([{"name": "x", "mountPath": "/x"}]));
    assert_eq!(
        c["securityContext"],
        json!({"seccompProfile": {"type": ""}})
    );
}

/// Issue 17, classes 11 and 21 for `emptyDir.sizeLimit`: a `resource.Quantity` in Go's
/// `corev1.EmptyDirVolumeSource`, so a malformed one fails decoding (apimachinery's
/// quantity.go message) and a valid one is stored canonical.
#[test]
fn exactly_knative_issue_17_size_limit() {
    let with = |limit: Value| {
        set(
            set(
                hello(),
                "/spec/template/spec/volumes",
                json!([{"name": "x", "emptyDir": {"medium": "Memory", "sizeLimit": limit}}]),
            ),
            &format!("{C0}/volumeMounts"),
            json!([{"name": "x", "mountPath": "/x"}]),
        )
    };
    for (given, want) in [
        (json!("1024Mi"), json!("1Gi")),
        (json!(0.5), json!("500m")),
        (json!("1e3"), json!("1e3")),
    ] {
        let s = svc(with(given.clone()));
        assert_eq!(
            s.spec.template.spec.pod.volumes[0].source["emptyDir"],
            json!({"medium": "Memory", "sizeLimit": want}),
            "{given}"
        );
        assert_eq!(check_service(with(given), &Config::default()), "");
    }
    let e = serde_json::from_value::<Service>(with(json!("1 Gi"))).expect_err("malformed");
    assert!(
        e.to_string().starts_with(crate::quantity::ERR_FORMAT_WRONG),
        "{e}"
    );
}
