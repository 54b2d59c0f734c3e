//! `application/vnd.kubernetes.protobuf` against a real `wisp serve`: requests encoded with
//! kube-rs's k8s-pb types and answers decoded with them (objects, lists, error Statuses,
//! `DeleteOptions`, watch frames), kube-apiserver's negotiation for built-in kinds and
//! custom resources, bad protobuf bodies refused with a Status and nothing stored, and the
//! real kubectl's protobuf requests.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{collections::BTreeMap, io::Read, time::Duration};

use common::Server;
use k8s_pb::api::core::v1 as corev1;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{Value, json};

const PB: &str = "application/vnd.kubernetes.protobuf";

/// A request body as client-go writes one: `k8s\0`, then the envelope.
fn body(api_version: &str, kind: &str, msg: &impl Message) -> Vec<u8> {
    envelope(api_version, kind, msg.encode_to_vec())
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat()
}

/// Opens an answer's envelope: (apiVersion, kind, raw message).
fn open(bytes: &[u8]) -> (String, String, Vec<u8>) {
    assert!(bytes.starts_with(b"k8s\0"), "not protobuf: {bytes:?}");
    let u = Unknown::decode(&bytes[4..]).unwrap();
    let tm = u.type_meta.unwrap();
    (
        tm.api_version.unwrap(),
        tm.kind.unwrap(),
        u.raw.unwrap_or_default(),
    )
}

fn decode<M: Message + Default>(bytes: &[u8], want_kind: &str) -> M {
    let (av, kind, raw) = open(bytes);
    assert_eq!(kind, want_kind, "{av} {kind}");
    M::decode(raw.as_slice()).unwrap()
}

fn status(bytes: &[u8]) -> metav1::Status {
    decode(bytes, "Status")
}

/// Sends a request with a protobuf body (or none), accepting protobuf: (code, content type,
/// body).
fn pb(s: &Server, method: &str, path: &str, body: Option<Vec<u8>>) -> (u16, String, Vec<u8>) {
    let mut rb = s
        .http()
        .request(method.parse().unwrap(), s.url(path))
        .header("authorization", s.auth())
        .header("accept", format!("{PB}, application/json"));
    if let Some(b) = body {
        rb = rb.header("content-type", PB).body(b);
    }
    let r = rb.send().unwrap();
    let code = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (code, ct, r.bytes().unwrap().to_vec())
}

fn json_get(s: &Server, path: &str) -> (u16, Value) {
    let r = s
        .http()
        .get(s.url(path))
        .header("authorization", s.auth())
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

fn object_meta(name: &str) -> Option<metav1::ObjectMeta> {
    // Every string written, as Go writes its non-pointer fields.
    Some(metav1::ObjectMeta {
        name: Some(name.into()),
        generate_name: Some(String::new()),
        namespace: Some(String::new()),
        self_link: Some(String::new()),
        uid: Some(String::new()),
        resource_version: Some(String::new()),
        generation: Some(0),
        creation_timestamp: Some(metav1::Time::default()),
        labels: BTreeMap::from([("app".into(), "demo".into())]),
        ..Default::default()
    })
}

fn config_map(name: &str, value: &str) -> corev1::ConfigMap {
    corev1::ConfigMap {
        metadata: object_meta(name),
        data: BTreeMap::from([("k".into(), value.into())]),
        binary_data: BTreeMap::from([("bin".into(), vec![0, 1, 255])]),
        immutable: None,
    }
}

#[test]
fn core_kinds_round_trip_in_protobuf() {
    let s = Server::start();

    // Namespace: create, get, list.
    let ns = corev1::Namespace {
        metadata: object_meta("demo"),
        spec: Some(corev1::NamespaceSpec::default()),
        status: Some(corev1::NamespaceStatus::default()),
    };
    let (code, ct, out) = pb(
        &s,
        "POST",
        "/api/v1/namespaces",
        Some(body("v1", "Namespace", &ns)),
    );
    assert_eq!(
        (code, ct.as_str()),
        (201, PB),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let created: corev1::Namespace = decode(&out, "Namespace");
    assert_eq!(
        created.metadata.as_ref().unwrap().name.as_deref(),
        Some("demo")
    );
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let (code, _, out) = pb(&s, "GET", "/api/v1/namespaces/demo", None);
    assert_eq!(code, 200);
    let got: corev1::Namespace = decode(&out, "Namespace");
    assert_eq!(got.metadata.unwrap().labels["app"], "demo");
    let (code, _, out) = pb(&s, "GET", "/api/v1/namespaces", None);
    assert_eq!(code, 200);
    let list: corev1::NamespaceList = decode(&out, "NamespaceList");
    let names: Vec<_> = list
        .items
        .iter()
        .map(|n| n.metadata.as_ref().unwrap().name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "demo", "knative-serving", "kourier-system"]
    );
    assert!(!list.metadata.unwrap().resource_version.unwrap().is_empty());

    // Secret: bytes survive both ways; the JSON view agrees.
    let secret = corev1::Secret {
        metadata: object_meta("creds"),
        data: BTreeMap::from([("password".into(), b"s3cr\xffet".to_vec())]),
        string_data: BTreeMap::from([("user".into(), "admin".into())]),
        r#type: Some("Opaque".into()),
        immutable: Some(true),
    };
    let (code, _, out) = pb(
        &s,
        "POST",
        "/api/v1/namespaces/demo/secrets",
        Some(body("v1", "Secret", &secret)),
    );
    assert_eq!(code, 201, "{:?}", String::from_utf8_lossy(&out));
    let created: corev1::Secret = decode(&out, "Secret");
    assert_eq!(created.data["password"], b"s3cr\xffet");
    assert_eq!(created.data["user"], b"admin");
    assert_eq!(created.immutable, Some(true));
    let (_, j) = json_get(&s, "/api/v1/namespaces/demo/secrets/creds");
    assert_eq!(j["data"]["user"], "YWRtaW4=");
    assert_eq!(j["type"], "Opaque");

    // ConfigMap: create, get, update, list, delete with DeleteOptions.
    let path = "/api/v1/namespaces/demo/configmaps";
    let (code, _, out) = pb(
        &s,
        "POST",
        path,
        Some(body("v1", "ConfigMap", &config_map("cfg", "one"))),
    );
    assert_eq!(code, 201, "{:?}", String::from_utf8_lossy(&out));
    let created: corev1::ConfigMap = decode(&out, "ConfigMap");
    let rv = created
        .metadata
        .as_ref()
        .unwrap()
        .resource_version
        .clone()
        .unwrap();
    assert_eq!(created.binary_data["bin"], vec![0, 1, 255]);
    let (_, j) = json_get(&s, &format!("{path}/cfg"));
    assert_eq!(j["data"], json!({"k": "one"}));
    assert_eq!(j["binaryData"], json!({"bin": "AAH/"}));
    assert!(j["metadata"].get("selfLink").is_none(), "{j}");

    let mut update = config_map("cfg", "two");
    update.metadata.as_mut().unwrap().resource_version = Some(rv.clone());
    let (code, _, out) = pb(
        &s,
        "PUT",
        &format!("{path}/cfg"),
        Some(body("v1", "ConfigMap", &update)),
    );
    assert_eq!(code, 200, "{:?}", String::from_utf8_lossy(&out));
    let updated: corev1::ConfigMap = decode(&out, "ConfigMap");
    assert_eq!(updated.data["k"], "two");
    // The same update again: its resourceVersion is stale, a 409 Status in protobuf.
    let (code, ct, out) = pb(
        &s,
        "PUT",
        &format!("{path}/cfg"),
        Some(body("v1", "ConfigMap", &update)),
    );
    assert_eq!((code, ct.as_str()), (409, PB));
    let st = status(&out);
    assert_eq!(st.code, Some(409));
    assert_eq!(st.reason.as_deref(), Some("Conflict"));
    assert!(st.message.unwrap().contains("the object has been modified"));

    let (code, _, out) = pb(&s, "GET", "/api/v1/configmaps", None);
    assert_eq!(code, 200);
    let list: corev1::ConfigMapList = decode(&out, "ConfigMapList");
    assert!(
        list.items
            .iter()
            .any(|c| c.data.get("k").map(String::as_str) == Some("two"))
    );

    // DeleteOptions in protobuf: a precondition that fails, then one that holds.
    let opts = |rv: &str| metav1::DeleteOptions {
        preconditions: Some(metav1::Preconditions {
            uid: None,
            resource_version: Some(rv.into()),
        }),
        ..Default::default()
    };
    let (code, _, out) = pb(
        &s,
        "DELETE",
        &format!("{path}/cfg"),
        Some(body("v1", "DeleteOptions", &opts("1"))),
    );
    assert_eq!(code, 409);
    assert!(
        status(&out)
            .message
            .unwrap()
            .contains("Precondition failed")
    );
    let current = updated.metadata.unwrap().resource_version.unwrap();
    let (code, _, out) = pb(
        &s,
        "DELETE",
        &format!("{path}/cfg"),
        Some(body("meta.k8s.io/v1", "DeleteOptions", &opts(&current))),
    );
    assert_eq!(code, 200, "{:?}", String::from_utf8_lossy(&out));
    let (code, _, out) = pb(&s, "GET", &format!("{path}/cfg"), None);
    assert_eq!(code, 404);
    let st = status(&out);
    assert_eq!(st.reason.as_deref(), Some("NotFound"));
    assert_eq!(st.message.as_deref(), Some("configmaps \"cfg\" not found"));
    assert_eq!(st.details.unwrap().name.as_deref(), Some("cfg"));
}

#[test]
fn watches_stream_length_prefixed_frames() {
    let s = Server::start();
    let http = s.http_timeout(Duration::from_secs(30));
    let mut watch = http
        .get(s.url("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=10"))
        .header("authorization", s.auth())
        .header("accept", PB)
        .send()
        .unwrap();
    assert_eq!(
        watch.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    for name in ["a", "b"] {
        let (code, _, _) = pb(
            &s,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(body("v1", "ConfigMap", &config_map(name, name))),
        );
        assert_eq!(code, 201);
    }
    // Frame by frame, as client-go's LengthDelimitedFramer reads them.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let mut len = [0u8; 4];
        watch.read_exact(&mut len).unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        watch.read_exact(&mut frame).unwrap();
        let event = metav1::WatchEvent::decode(frame.as_slice()).unwrap();
        let raw = event.object.unwrap().raw.unwrap();
        let cm: corev1::ConfigMap = decode(&raw, "ConfigMap");
        seen.push((
            event.r#type.unwrap(),
            cm.metadata.unwrap().name.unwrap(),
            cm.data["k"].clone(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("ADDED".to_string(), "a".to_string(), "a".to_string()),
            ("ADDED".into(), "b".into(), "b".into())
        ]
    );
}

#[test]
fn custom_resources_stay_json_and_built_ins_negotiate() {
    let s = Server::start();
    let get = |path: &str, accept: &str| {
        let r = s
            .http()
            .get(s.url(path))
            .header("authorization", s.auth())
            .header("accept", accept)
            .send()
            .unwrap();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string());
        (
            r.status().as_u16(),
            ct.unwrap_or_default(),
            r.bytes().unwrap().to_vec(),
        )
    };
    let ksvc = "/apis/serving.knative.dev/v1/namespaces/default/services";
    // Only protobuf: a custom resource cannot answer in it.
    let (code, _, out) = get(ksvc, PB);
    assert_eq!(code, 406, "{}", String::from_utf8_lossy(&out));
    // Protobuf, then JSON: JSON.
    let (code, ct, out) = get(ksvc, &format!("{PB}, application/json"));
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    let list: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(list["kind"], "ServiceList");
    // A protobuf body for one: 415.
    let r = s
        .http()
        .post(s.url(ksvc))
        .header("authorization", s.auth())
        .header("content-type", PB)
        .body(body(
            "serving.knative.dev/v1",
            "Service",
            &config_map("x", "y"),
        ))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);

    // A built-in kind: JSON first is JSON; nothing acceptable is a 406 naming protobuf.
    let cms = "/api/v1/namespaces/default/configmaps";
    let (code, ct, _) = get(cms, &format!("application/json, {PB}"));
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    let (code, _, out) = get(cms, "application/yaml");
    assert_eq!(code, 406);
    let err: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        err["message"],
        "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf"
    );
    // An unknown path under /api/v1 answers its 404 in protobuf too.
    let (code, ct, out) = get("/api/v1/namespaces/default/widgets", PB);
    assert_eq!((code, ct.as_str()), (404, PB));
    assert_eq!(status(&out).reason.as_deref(), Some("NotFound"));
    // Discovery is not a built-in kind's answer: JSON as before.
    let (code, ct, _) = get("/api/v1", &format!("{PB}, application/json"));
    assert_eq!((code, ct.as_str()), (200, "application/json"));
}

#[test]
fn bad_protobuf_bodies_get_a_status_and_change_nothing() {
    let s = Server::start();
    let path = "/api/v1/namespaces/default/configmaps";
    let good = body("v1", "ConfigMap", &config_map("keep", "v"));
    let (code, _, out) = pb(&s, "POST", path, Some(good.clone()));
    assert_eq!(code, 201);
    let stored: corev1::ConfigMap = decode(&out, "ConfigMap");
    let stored_rv = stored.metadata.unwrap().resource_version.unwrap();
    let secret = corev1::Secret {
        metadata: object_meta("keep"),
        ..Default::default()
    };
    let raw = config_map("new", "v").encode_to_vec();
    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        // The body cut short: its envelope does not decode.
        (
            "POST",
            path,
            good[..good.len() - 7].to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): failed to decode Protobuf message",
        ),
        // A whole envelope around a message cut short.
        (
            "POST",
            path,
            envelope("v1", "ConfigMap", raw[..raw.len() - 3].to_vec()),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: failed to decode Protobuf message",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/configmaps/keep",
            body("v1", "Secret", &secret),
            "Secret in version \"v1\" cannot be handled as a ConfigMap: converting (v1.Secret) to (core.ConfigMap): unknown conversion",
        ),
        (
            "POST",
            path,
            body("serving.knative.dev/v1", "Service", &secret),
            "Service in version \"v1\" cannot be handled as a ConfigMap: no kind \"Service\" is registered for version \"serving.knative.dev/v1\"",
        ),
        (
            "POST",
            path,
            br#"{"apiVersion":"v1","kind":"ConfigMap"}"#.to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): provided data does not appear to be a protobuf message",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/configmaps/keep",
            body("v1", "ConfigMap", &config_map("keep", "v")),
            "ConfigMap in version \"v1\" cannot be handled as a DeleteOptions",
        ),
    ];
    for (method, p, bytes, want) in cases {
        let (code, ct, out) = pb(&s, method, p, Some(bytes));
        assert_eq!(
            (code, ct.as_str()),
            (400, PB),
            "{method} {p}: {:?}",
            String::from_utf8_lossy(&out)
        );
        let st = status(&out);
        assert_eq!(st.reason.as_deref(), Some("BadRequest"));
        let msg = st.message.unwrap();
        assert!(msg.starts_with(want), "{msg}\nwant {want}");
    }
    // What was stored is as it was; nothing else was created.
    let (_, list) = json_get(&s, path);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["data"], json!({"k": "v"}));
    assert_eq!(items[0]["metadata"]["resourceVersion"], stored_rv.as_str());
}

#[test]
fn kubectl_speaks_protobuf() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("kubectl not on PATH: skipping");
        return;
    }
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let out = std::process::Command::new(common::wisp_bin())
        .args(["kubeconfig", "--data-dir"])
        .arg(s.data_dir())
        .output()
        .unwrap();
    std::fs::write(&kubeconfig, out.stdout).unwrap();
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .args(args)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, log) = kubectl(&["create", "configmap", "cfg", "--from-literal=a=b", "-v=8"]);
    assert!(ok, "{log}");
    assert_eq!(out, "configmap/cfg created\n");
    // kubectl sent protobuf and accepted it first; wisp answered in it.
    assert!(
        log.contains("Accept: application/vnd.kubernetes.protobuf,application/json"),
        "{log}"
    );
    assert!(
        log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{log}"
    );
    let answer = log
        .split("Response Status: 201 Created")
        .nth(1)
        .expect("the create's answer is logged");
    assert!(
        answer.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{answer}"
    );
    // Its error answer, in protobuf, reads as kube's.
    let (ok, _, err) = kubectl(&["create", "configmap", "cfg", "--from-literal=a=b"]);
    assert!(!ok);
    assert!(err.contains("configmaps \"cfg\" already exists"), "{err}");
    let (ok, out, err) = kubectl(&["get", "configmap", "cfg", "-o", "jsonpath={.data.a}"]);
    assert!(ok, "{err}");
    assert_eq!(out, "b");
    let (ok, out, err) = kubectl(&["create", "secret", "generic", "s", "--from-literal=k=v"]);
    assert!(ok, "{err}");
    assert_eq!(out, "secret/s created\n");
    let (ok, out, err) = kubectl(&["get", "secret", "s", "-o", "jsonpath={.data.k}"]);
    assert!(ok, "{err}");
    assert_eq!(out, "dg==");
}

/// The views of what runs (Pods, Deployments, Services, Events) answer client-go's typed
/// clients in protobuf as the stored kinds do: lists, single objects, watch frames.
#[test]
fn views_answer_in_protobuf() {
    use k8s_pb::api::apps::v1 as appsv1;
    use k8s_pb::api::events::v1 as eventsv1;

    let s = Server::start();
    let hello = common::sample_bin("hello");
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: pbview\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/min-scale: \"1\"\n    spec:\n      containers:\n      - command: [{:?}]\n",
        hello.display()
    ));
    common::wait_for("pbview Ready", Duration::from_secs(60), || {
        s.ready("services", "pbview").filter(|r| r.0 == "True")
    });

    // A watch of pods from the start sees the running replica as an ADDED frame.
    let http = s.http_timeout(Duration::from_secs(30));
    let mut watch = http
        .get(s.url(
            "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=10\
             &labelSelector=serving.knative.dev%2Fservice%3Dpbview",
        ))
        .header("authorization", s.auth())
        .header("accept", PB)
        .send()
        .unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    let mut len = [0u8; 4];
    watch.read_exact(&mut len).unwrap();
    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
    watch.read_exact(&mut frame).unwrap();
    let event = metav1::WatchEvent::decode(frame.as_slice()).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let watched: corev1::Pod = decode(&event.object.unwrap().raw.unwrap(), "Pod");

    let (code, ct, bytes) = pb(&s, "GET", "/api/v1/namespaces/default/pods", None);
    assert_eq!((code, ct.as_str()), (200, PB));
    let pods: corev1::PodList = decode(&bytes, "PodList");
    assert_eq!(pods.items.len(), 1);
    let pod = &pods.items[0];
    let meta = pod.metadata.as_ref().unwrap();
    let name = meta.name.clone().unwrap();
    assert!(name.starts_with("pbview-00001-deployment-"), "{name}");
    assert_eq!(watched.metadata.unwrap().name.unwrap(), name);
    assert_eq!(meta.labels["serving.knative.dev/revision"], "pbview-00001");
    let pod_status = pod.status.as_ref().unwrap();
    assert_eq!(pod_status.phase.as_deref(), Some("Running"));
    assert_eq!(pod_status.container_statuses[0].ready, Some(true));

    let (code, _, bytes) = pb(
        &s,
        "GET",
        &format!("/api/v1/namespaces/default/pods/{name}"),
        None,
    );
    assert_eq!(code, 200);
    let one: corev1::Pod = decode(&bytes, "Pod");
    assert_eq!(one.metadata.unwrap().name.unwrap(), name);

    let (code, _, bytes) = pb(
        &s,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments",
        None,
    );
    assert_eq!(code, 200);
    let deps: appsv1::DeploymentList = decode(&bytes, "DeploymentList");
    let dep = &deps.items[0];
    assert_eq!(
        dep.metadata.as_ref().unwrap().name.as_deref(),
        Some("pbview-00001-deployment")
    );
    assert_eq!(dep.status.as_ref().unwrap().ready_replicas, Some(1));

    let (code, _, bytes) = pb(
        &s,
        "GET",
        "/api/v1/namespaces/kourier-system/services",
        None,
    );
    assert_eq!(code, 200);
    let svcs: corev1::ServiceList = decode(&bytes, "ServiceList");
    let names: Vec<_> = svcs
        .items
        .iter()
        .map(|s| s.metadata.as_ref().unwrap().name.clone().unwrap())
        .collect();
    assert_eq!(names, ["kourier", "kourier-internal"]);

    let (code, _, bytes) = pb(&s, "GET", "/api/v1/namespaces/default/events", None);
    assert_eq!(code, 200);
    let events: corev1::EventList = decode(&bytes, "EventList");
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Created")),
        "{:?}",
        events.items
    );
    let (code, _, bytes) = pb(
        &s,
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        None,
    );
    assert_eq!(code, 200);
    let events: eventsv1::EventList = decode(&bytes, "EventList");
    assert!(!events.items.is_empty());

    // A write to a view is refused in protobuf too (a Status, not a 5xx).
    let (code, _, bytes) = pb(
        &s,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        Some(body(
            "apps/v1",
            "Deployment",
            &appsv1::Deployment::default(),
        )),
    );
    assert_eq!(code, 405, "{:?}", status(&bytes));
}
