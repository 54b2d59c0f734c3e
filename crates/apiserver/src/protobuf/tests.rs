use std::collections::BTreeMap;

use serde_json::json;

use super::*;

const TIME: &str = "2024-05-06T07:08:09Z";
const MICRO: &str = "2024-05-06T07:08:09.123456Z";

fn meta(name: &str, ns: Option<&str>) -> Value {
    let mut m = json!({
        "name": name,
        "uid": "8b5c3a38-5a2a-4b8e-9b2e-0f3f6c1d2e3f",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": TIME,
        "labels": {"app": "hello", "serving.knative.dev/revision": "hello-00001"},
        "annotations": {"a": "b"},
        "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
            "name": "hello-00001", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}],
        "finalizers": ["kubernetes"],
        "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
            "time": TIME, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}],
    });
    if let Some(ns) = ns {
        m["namespace"] = ns.into();
    }
    m
}

fn probe() -> Value {
    json!({"httpGet": {"path": "/healthz", "port": 8080, "host": "h", "scheme": "HTTP",
            "httpHeaders": [{"name": "X", "value": "y"}]},
           "initialDelaySeconds": 0, "timeoutSeconds": 1, "periodSeconds": 10,
           "successThreshold": 1, "failureThreshold": 3})
}

fn container(name: &str) -> Value {
    json!({
        "name": name,
        "image": "ghcr.io/x/hello@sha256:abc",
        "command": ["/ko-app/hello"],
        "args": ["--port", "8080"],
        "workingDir": "/",
        "ports": [{"name": "http1", "containerPort": 8080, "protocol": "TCP"}],
        "envFrom": [{"prefix": "P_", "configMapRef": {"name": "cfg", "optional": true}},
                    {"secretRef": {"name": "sec"}}],
        "env": [
            {"name": "PORT", "value": "8080"},
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "b", "optional": false}}},
            {"name": "C", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "D", "valueFrom": {"resourceFieldRef": {"containerName": name,
                "resource": "limits.cpu", "divisor": "1m"}}},
        ],
        "resources": {"limits": {"cpu": "1", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
        "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true, "subPath": "s"}],
        "livenessProbe": probe(),
        "readinessProbe": {"tcpSocket": {"port": "http1"}, "successThreshold": 1},
        "startupProbe": {"exec": {"command": ["true"]}},
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}},
                      "postStart": {"httpGet": {"path": "/", "port": 80}}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true,
            "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "seccompProfile": {"type": "RuntimeDefault"}},
    })
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta("hello-00001-deployment-7d9f-abcde", Some("default")),
        "spec": {
            "containers": [container("user-container"), container("queue-proxy")],
            "initContainers": [{"name": "init", "image": "busybox"}],
            "volumes": [
                {"name": "v", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "s", "secret": {"secretName": "sec", "defaultMode": 420,
                    "items": [{"key": "k", "path": "p", "mode": 256}]}},
                {"name": "c", "configMap": {"name": "cfg", "optional": true}},
                {"name": "p", "projected": {"defaultMode": 420, "sources": [
                    {"secret": {"name": "sec"}}, {"configMap": {"name": "cfg"}},
                    {"serviceAccountToken": {"audience": "a", "expirationSeconds": 3600, "path": "t"}},
                    {"downwardAPI": {"items": [{"path": "labels",
                        "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}},
                {"name": "pvc", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}},
                {"name": "hp", "hostPath": {"path": "/tmp", "type": "Directory"}},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 300,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"disk": "ssd"},
            "serviceAccountName": "default",
            "automountServiceAccountToken": false,
            "nodeName": "wisp",
            "shareProcessNamespace": false,
            "securityContext": {"fsGroup": 2000, "supplementalGroups": [1, 2],
                "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]},
            "imagePullSecrets": [{"name": "regcred"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "hello"}}}}]}},
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule",
                "tolerationSeconds": 30}],
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["foo.local"]}],
            "priorityClassName": "high",
            "priority": 1000,
            "dnsConfig": {"nameservers": ["1.1.1.1"], "options": [{"name": "ndots", "value": "2"}]},
            "runtimeClassName": "runc",
            "enableServiceLinks": false,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": TIME},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": TIME,
                 "reason": "r", "message": "m"},
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "10.88.0.5",
            "podIPs": [{"ip": "10.88.0.5"}],
            "startTime": TIME,
            "containerStatuses": [
                {"name": "user-container", "ready": true, "restartCount": 0, "started": true,
                 "image": "ghcr.io/x/hello@sha256:abc", "imageID": "sha256:abc",
                 "containerID": "wisp://1234",
                 "state": {"running": {"startedAt": TIME}},
                 "lastState": {"terminated": {"exitCode": 137, "signal": 9, "reason": "OOMKilled",
                    "message": "m", "startedAt": TIME, "finishedAt": TIME, "containerID": "wisp://1"}}},
                {"name": "queue-proxy", "ready": false, "restartCount": 2, "image": "q", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}},
            ],
            "qosClass": "Burstable",
        },
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta("hello", Some("default")),
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c",
                       "port": 80, "targetPort": 8012, "nodePort": 30080},
                      {"name": "https", "port": 443, "targetPort": "https"}],
            "selector": {"app": "hello"},
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1", "hostname": "h",
            "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]}]},
            "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                "lastTransitionTime": TIME, "reason": "R", "message": "m"}]},
    })
}

fn external_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"type": "ExternalName", "externalName": "kourier.knative-serving.svc.cluster.local",
                 "sessionAffinity": "None"},
        "status": {"loadBalancer": {}},
    })
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta("hello-00001-deployment", Some("default")),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"serving.knative.dev/revisionUID": "u"},
                "matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]},
            "template": {"metadata": {"labels": {"app": "hello"}, "annotations": {"x": "y"}},
                         "spec": {"containers": [container("user-container")]}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
            "minReadySeconds": 0,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "paused": false,
        },
        "status": {
            "observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
            "availableReplicas": 1, "unavailableReplicas": 0,
            "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": TIME,
                "lastTransitionTime": TIME, "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability."}],
            "collisionCount": 0,
        },
    })
}

fn core_event() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": meta("hello.17c1", Some("default")),
        "involvedObject": {"kind": "Revision", "namespace": "default", "name": "hello-00001",
            "uid": "u", "apiVersion": "serving.knative.dev/v1", "resourceVersion": "7",
            "fieldPath": "spec.containers{user-container}"},
        "reason": "Created",
        "message": "Created container user-container",
        "source": {"component": "wisp", "host": "localhost"},
        "firstTimestamp": TIME,
        "lastTimestamp": TIME,
        "count": 2,
        "type": "Normal",
        "eventTime": MICRO,
        "series": {"count": 2, "lastObservedTime": MICRO},
        "action": "Create",
        "related": {"kind": "Pod", "name": "p"},
        "reportingComponent": "wisp",
        "reportingInstance": "wisp-1",
    })
}

fn events_event() -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": meta("hello.17c1", Some("default")),
        "eventTime": MICRO,
        "series": {"count": 2, "lastObservedTime": MICRO},
        "reportingController": "wisp",
        "reportingInstance": "wisp-1",
        "action": "Create",
        "reason": "Created",
        "regarding": {"kind": "Revision", "namespace": "default", "name": "hello-00001"},
        "related": {"kind": "Pod", "name": "p"},
        "note": "Created container",
        "type": "Warning",
        "deprecatedSource": {"component": "wisp"},
        "deprecatedFirstTimestamp": TIME,
        "deprecatedLastTimestamp": TIME,
        "deprecatedCount": 2,
    })
}

fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta("demo", None),
           "spec": {"finalizers": ["kubernetes"]},
           "status": {"phase": "Terminating", "conditions": [{"type": "NamespaceDeletionContentFailure",
               "status": "False", "lastTransitionTime": TIME, "reason": "r", "message": "m"}]}})
}

fn secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("s", Some("default")),
           "type": "kubernetes.io/dockerconfigjson", "immutable": true,
           "data": {".dockerconfigjson": "e30=", "empty": ""}})
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("config-autoscaler", Some("knative-serving")),
           "data": {"stable-window": "60s", "empty": "", "_example": "# lots\n# of text\n"},
           "binaryData": {"b": "AAE="}, "immutable": false})
}

fn status() -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": "configmaps \"x\" not found", "reason": "NotFound", "code": 404,
           "details": {"name": "x", "kind": "configmaps", "group": "", "uid": "u",
               "retryAfterSeconds": 1,
               "causes": [{"reason": "FieldValueInvalid", "message": "m", "field": "data[a b]"}]}})
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"resourceVersion": "99", "continue": "abc", "remainingItemCount": 3},
           "items": items})
}

/// wisp's JSON with the spellings protobuf cannot keep normalized as kube's decode would
/// (a null timestamp is an absent one; an empty `details.group` string is absent).
fn normalized(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, x| !(x.is_null() || (x.as_str() == Some("") && k != "empty")));
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

fn all_fixtures() -> Vec<Value> {
    vec![
        pod(),
        service(),
        external_service(),
        deployment(),
        core_event(),
        events_event(),
        namespace(),
        secret(),
        config_map(),
        status(),
        list("PodList", "v1", vec![pod(), pod()]),
        list("ServiceList", "v1", vec![service(), external_service()]),
        list("DeploymentList", "apps/v1", vec![deployment()]),
        list("EventList", "v1", vec![core_event()]),
        list("EventList", "events.k8s.io/v1", vec![events_event()]),
        list("NamespaceList", "v1", vec![namespace()]),
        list("SecretList", "v1", vec![secret()]),
        list("ConfigMapList", "v1", vec![config_map(), config_map()]),
        list("ConfigMapList", "v1", vec![]),
    ]
}

#[test]
fn every_kind_round_trips() {
    for fixture in all_fixtures() {
        let what = format!("{} {}", fixture["apiVersion"], fixture["kind"]);
        let bytes = encode(fixture.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(bytes.starts_with(MAGIC), "{what}");
        let back = decode(&bytes, None).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(back.object, normalized(fixture), "{what}");
    }
}

/// What the bytes hold, read with k8s-pb's types directly: the encoding is the real wire
/// format, field by field, not a private one that only round-trips through itself.
#[test]
fn encodings_are_kubes_messages() {
    let bytes = encode(pod()).unwrap();
    let unknown = Unknown::decode(&bytes[4..]).unwrap();
    let tm = unknown.type_meta.unwrap();
    assert_eq!(
        (tm.api_version.as_deref(), tm.kind.as_deref()),
        (Some("v1"), Some("Pod"))
    );
    let pod = corev1::Pod::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let spec = pod.spec.unwrap();
    let c = &spec.containers[0];
    assert_eq!(c.name.as_deref(), Some("user-container"));
    assert_eq!(c.ports[0].container_port, Some(8080));
    let probe = c.liveness_probe.as_ref().unwrap();
    let get = probe.handler.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!(get.port.as_ref().unwrap().int_val, Some(8080));
    assert_eq!(probe.period_seconds, Some(10));
    assert_eq!(
        c.resources.as_ref().unwrap().limits["memory"]
            .string
            .as_deref(),
        Some("128Mi")
    );
    let secret_vol = spec.volumes[1].volume_source.as_ref().unwrap();
    assert_eq!(
        secret_vol.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("sec")
    );
    let cm_vol = spec.volumes[2].volume_source.as_ref().unwrap();
    assert_eq!(
        cm_vol
            .config_map
            .as_ref()
            .unwrap()
            .local_object_reference
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("cfg")
    );
    let meta = pod.metadata.unwrap();
    assert_eq!(meta.creation_timestamp.unwrap().seconds, Some(1714979289));
    assert_eq!(
        meta.managed_fields[0]
            .fields_v1
            .as_ref()
            .unwrap()
            .raw
            .as_deref(),
        Some(br#"{"f:metadata":{"f:labels":{"f:app":{}}}}"#.as_slice())
    );
    let status = pod.status.unwrap();
    let term = status.container_statuses[0]
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(term.exit_code, Some(137));

    let bytes = encode(deployment()).unwrap();
    let unknown = Unknown::decode(&bytes[4..]).unwrap();
    let d = appsv1::Deployment::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let strategy = d.spec.unwrap().strategy.unwrap();
    let ru = strategy.rolling_update.unwrap();
    assert_eq!(ru.max_surge.unwrap().str_val.as_deref(), Some("25%"));
    assert_eq!(ru.max_unavailable.unwrap().int_val, Some(0));

    let bytes = encode(events_event()).unwrap();
    let unknown = Unknown::decode(&bytes[4..]).unwrap();
    let e = eventsv1::Event::decode(unknown.raw.unwrap().as_slice()).unwrap();
    assert_eq!(e.event_time.unwrap().nanos, Some(123_456_000));
}

/// A Go client writes every non-pointer field: empty strings, an empty creationTimestamp.
/// They read as the JSON the same object would have had.
#[test]
fn go_clients_empty_fields_read_as_absent() {
    let cm = corev1::ConfigMap {
        metadata: Some(metav1::ObjectMeta {
            name: Some("cfg".into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(metav1::Time::default()),
            ..Default::default()
        }),
        data: BTreeMap::from([("k".into(), String::new())]),
        binary_data: BTreeMap::new(),
        immutable: None,
    };
    let bytes = envelope("v1", "ConfigMap", cm.encode_to_vec());
    let got = decode_body(
        &bytes,
        Expect::Object {
            api_version: "v1",
            kind: "ConfigMap",
        },
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "generation": 0}, "data": {"k": ""}})
    );
}

#[test]
fn json_that_does_not_fit_is_refused_with_its_path() {
    let cases = [
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "bogus": 1}]}}),
            "spec.containers[0].bogus: unknown field",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"ports": [{"containerPort": "x"}]}]}}),
            "spec.containers[0].ports[0].containerPort: expected an integer, got a string",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"creationTimestamp": "yesterday"}}),
            "metadata.creationTimestamp: parsing time \"yesterday\"",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "!!"}}),
            "data.k: illegal base64 data",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"priority": 4294967296i64}}),
            "spec.priority: 4294967296 does not fit in 32 bits",
        ),
        (
            json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service"}),
            "Service in version \"serving.knative.dev/v1\" has no protobuf form",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMapList", "items": [{"apiVersion": "v1", "kind": "Secret"}]}),
            "items[0]: kind \"Secret\" is not the list's item kind \"ConfigMap\"",
        ),
    ];
    for (v, want) in cases {
        let err = encode(v.clone()).unwrap_err().to_string();
        assert!(err.starts_with(want), "{v}: {err}");
    }
}

fn envelope_of(v: Value) -> Vec<u8> {
    encode(v).unwrap()
}

#[test]
fn bad_bodies_are_refused_as_kube_refuses_them() {
    let cm = Expect::Object {
        api_version: "v1",
        kind: "ConfigMap",
    };
    let good = envelope_of(config_map());
    // metadata (field 1) claims 32 bytes and has one.
    let bad_raw = envelope("v1", "ConfigMap", vec![0x0a, 0x20, 0x01]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{}}"#.to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] ({\"kind\":\"ConfigMap\",\"apiVersio ...)",
        ),
        (
            Vec::new(),
            "the object provided is unrecognized (must be of type ConfigMap): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] (<empty>)",
        ),
        // The envelope cut short.
        (
            good[..good.len() / 2].to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): failed to decode Protobuf message",
        ),
        // The envelope whole, its message cut short.
        (
            bad_raw,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: failed to decode Protobuf message",
        ),
        (
            envelope_of(secret()),
            "Secret in version \"v1\" cannot be handled as a ConfigMap: converting (v1.Secret) to (core.ConfigMap): unknown conversion",
        ),
        (
            envelope("serving.knative.dev/v1", "Service", Vec::new()),
            "Service in version \"v1\" cannot be handled as a ConfigMap: no kind \"Service\" is registered for version \"serving.knative.dev/v1\" in scheme \"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30\"",
        ),
        (
            envelope_of(deployment()),
            "Deployment in version \"v1\" cannot be handled as a ConfigMap: converting (v1.Deployment) to (core.ConfigMap): unknown conversion",
        ),
    ];
    for (body, want) in cases {
        let err = decode_body(&body, cm).unwrap_err();
        assert_eq!(err.status.code, 400, "{}", err.status.message);
        assert_eq!(err.status.reason, "BadRequest");
        assert!(
            err.status.message.starts_with(want),
            "{}\nwant {want}",
            err.status.message
        );
    }
    assert!(decode_body(&good, cm).is_ok());
    // An envelope without a type is the path's kind (kube decodes with it as the default).
    let raw = Unknown::decode(&good[4..]).unwrap().raw.unwrap();
    let untyped = envelope("", "", raw);
    assert_eq!(decode_body(&untyped, cm).unwrap()["kind"], "ConfigMap");
}

#[test]
fn delete_options_of_any_group_version() {
    let opts = metav1::DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(metav1::Preconditions {
            uid: Some("u".into()),
            resource_version: Some("5".into()),
        }),
        propagation_policy: Some("Foreground".into()),
        dry_run: vec!["All".into()],
        ..Default::default()
    };
    for av in ["v1", "meta.k8s.io/v1", "apps/v1", "serving.knative.dev/v1"] {
        let body = envelope(av, "DeleteOptions", opts.encode_to_vec());
        let got = decode_body(&body, Expect::DeleteOptions).unwrap();
        assert_eq!(got["preconditions"]["resourceVersion"], "5", "{av}");
        assert_eq!(got["gracePeriodSeconds"], 0);
        assert_eq!(got["dryRun"], json!(["All"]));
        assert_eq!(got["propagationPolicy"], "Foreground");
    }
    let err = decode_body(&envelope_of(config_map()), Expect::DeleteOptions).unwrap_err();
    assert_eq!(
        err.status.message,
        "ConfigMap in version \"v1\" cannot be handled as a DeleteOptions: converting (v1.ConfigMap) to (meta.DeleteOptions): unknown conversion"
    );
}

#[test]
fn watch_frames_are_length_prefixed_raw_watch_events() {
    let a = watch_frame("ADDED", config_map()).unwrap();
    let b = watch_frame("DELETED", pod()).unwrap();
    let len = u32::from_be_bytes(a[..4].try_into().unwrap()) as usize;
    assert_eq!(len, a.len() - 4);
    // The frame is the raw WatchEvent (no magic); its object is a whole envelope.
    let ev = metav1::WatchEvent::decode(&a[4..]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert!(ev.object.unwrap().raw.unwrap().starts_with(MAGIC));
    let stream = [a, b].concat();
    let events = read_watch_frames(&stream).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].0, "ADDED");
    assert_eq!(events[0].1, normalized(config_map()));
    assert_eq!(events[1].0, "DELETED");
    assert_eq!(events[1].1, normalized(pod()));
    assert!(read_watch_frames(&stream[..stream.len() - 1]).is_err());
}

#[test]
fn builtin_groups() {
    assert!(builtin_group(""));
    assert!(builtin_group("apps"));
    assert!(builtin_group("events.k8s.io"));
    assert!(!builtin_group("serving.knative.dev"));
    assert!(!builtin_group("meta.k8s.io"));
}

#[test]
fn summaries_are_kubes() {
    assert_eq!(summarize(b""), "<empty>");
    assert_eq!(summarize(b"{}"), "{}");
    assert_eq!(summarize(&[1, 2]), "0102");
    assert_eq!(summarize(&[0xab; 31]), format!("{} ...", "ab".repeat(30)));
}

proptest::proptest! {
    /// Whatever the bytes — random, or a real encoding with bytes changed or cut — a body
    /// decodes or is a 400, never a panic; what decodes encodes again.
    #[test]
    fn any_body_decodes_or_is_refused(
        noise in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        flips in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 0..4),
        cut in proptest::num::usize::ANY,
        which in 0usize..4,
    ) {
        let fixtures = [pod(), config_map(), deployment(), secret()];
        let mut bytes = envelope_of(fixtures[which].clone());
        for (at, b) in flips {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        bytes.extend(noise);
        for (av, kind) in [("v1", "Pod"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Secret")] {
            match decode_body(&bytes, Expect::Object { api_version: av, kind }) {
                Ok(v) => { encode(v).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?; }
                Err(e) => proptest::prop_assert_eq!(e.status.code, 400),
            }
        }
        if let Err(e) = decode_body(&bytes, Expect::DeleteOptions) {
            proptest::prop_assert_eq!(e.status.code, 400);
        }
    }
}
