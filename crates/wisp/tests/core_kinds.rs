//! Namespaces, Secrets and ConfigMaps as API objects, against a real `wisp serve`: the
//! namespace lifecycle (kube's NamespaceLifecycle admission and namespace deletion), the
//! Secret and ConfigMap rules of kube-apiserver's validation, and their Tables.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{Server, pid_alive, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends a JSON body (or none) and returns (status, body as JSON).
fn call(s: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut rb = s
        .http()
        .request(method.parse().unwrap(), s.url(path))
        .header("authorization", s.auth());
    if let Some(b) = body {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        rb = rb.header("content-type", ct).body(b.to_string());
    }
    let r = rb.send().unwrap();
    let code = r.status().as_u16();
    (code, r.json().unwrap_or(Value::Null))
}

fn create_ns(s: &Server, name: &str) {
    let (code, body) = call(
        s,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": name}})),
    );
    assert_eq!(code, 201, "{body}");
}

#[test]
fn namespaces_are_objects_and_guard_their_contents() {
    let s = Server::start();
    let (code, default) = call(&s, "GET", "/api/v1/namespaces/default", None);
    assert_eq!(code, 200, "{default}");
    assert_eq!(default["status"]["phase"], "Active");
    assert_eq!(default["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(default["metadata"].get("namespace").is_none(), "{default}");

    create_ns(&s, "demo");
    let (code, list) = call(&s, "GET", "/api/v1/namespaces", None);
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "NamespaceList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    // knative-serving holds the live configuration (Knative's ConfigMaps); kourier-system
    // the ingress gateway's Services (a view): both always there.
    assert_eq!(
        names,
        ["default", "demo", "knative-serving", "kourier-system"]
    );

    // Names are RFC 1123 labels.
    let (code, err) = call(
        &s,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "a.b"}})),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );
    assert_eq!(err["details"]["causes"][0]["field"], "metadata.name");

    // NamespaceLifecycle: nothing is created in a namespace that does not exist — a
    // ConfigMap or a Knative Service alike, and for a Service that is also invalid the
    // namespace is the answer (kube runs NamespaceLifecycle before Knative's webhooks).
    for (path, body) in [
        (
            "/api/v1/namespaces/nope/configmaps",
            json!({"metadata": {"name": "c"}}),
        ),
        (
            "/apis/serving.knative.dev/v1/namespaces/nope/services",
            json!({"metadata": {"name": "svc"}, "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
        ),
        (
            "/apis/serving.knative.dev/v1/namespaces/nope/services",
            json!({"metadata": {"name": "bad"}, "spec": {"template": {"spec": {"containers": []}}}}),
        ),
    ] {
        let (code, err) = call(&s, "POST", path, Some(body));
        assert_eq!(code, 404, "{err}");
        assert_eq!(err["message"], "namespaces \"nope\" not found");
        assert_eq!(err["reason"], "NotFound");
    }

    let (code, err) = call(&s, "DELETE", "/api/v1/namespaces/default", None);
    assert_eq!(code, 403, "{err}");
    assert_eq!(
        err["message"],
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );

    // kubectl's Table: NAME STATUS AGE.
    let table: Value = s
        .http()
        .get(s.url("/api/v1/namespaces"))
        .header("authorization", s.auth())
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Age"]);
    assert_eq!(table["rows"][1]["cells"][0], "demo");
    assert_eq!(table["rows"][1]["cells"][1], "Active");

    // `wisp get` prints the same columns (kube's, with their own AGE).
    let out = s.cli().args(["get", "ns"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{text}");
    assert!(text.lines().nth(2).unwrap().starts_with("demo "), "{text}");

    // Discovery lists the core kinds.
    let v1 = s.get_json("/api/v1").unwrap();
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "namespaces",
            "namespaces/status",
            "secrets",
            "configmaps",
            "pods",
            "pods/log",
            "services",
            "events"
        ]
    );
}

#[test]
fn deleting_a_namespace_deletes_everything_in_it() {
    let s = Server::start();
    create_ns(&s, "demo");
    let (code, _) = call(
        &s,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        Some(json!({"metadata": {"name": "cfg"}, "data": {"a": "b"}})),
    );
    assert_eq!(code, 201);
    // `$$$$` is Kubernetes' escape for the shell's `$$` in args.
    let (code, body) = call(
        &s,
        "POST",
        "/apis/serving.knative.dev/v1/namespaces/demo/services",
        Some(json!({
            "metadata": {"name": "sleeper"},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {"containers": [{"command": ["sh", "-c",
                    "echo pid=$$$$; exec python3 -m http.server --bind 127.0.0.1 $PORT"]}]}
            }}
        })),
    );
    assert_eq!(code, 201, "{body}");
    let pid: u32 = wait_for("the replica's pid", TIMEOUT, || {
        let out = s
            .cli()
            .args(["logs", "sleeper", "-n", "demo"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.rsplit("pid=").next()?.trim().parse().ok())
    });
    assert!(pid_alive(pid));

    let (code, ns) = call(&s, "DELETE", "/api/v1/namespaces/demo", None);
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["status"]["phase"], "Terminating");
    wait_for("the namespace to go", TIMEOUT, || {
        (call(&s, "GET", "/api/v1/namespaces/demo", None).0 == 404).then_some(())
    });
    for path in [
        "/apis/serving.knative.dev/v1/namespaces/demo/services/sleeper",
        "/apis/serving.knative.dev/v1/namespaces/demo/revisions/sleeper-00001",
        "/api/v1/namespaces/demo/configmaps/cfg",
    ] {
        assert_eq!(call(&s, "GET", path, None).0, 404, "{path}");
    }
    wait_for("the replica to stop", TIMEOUT, || {
        (!pid_alive(pid)).then_some(())
    });
    // Gone means gone: creating in it again is refused.
    let (code, _) = call(
        &s,
        "POST",
        "/api/v1/namespaces/demo/secrets",
        Some(json!({"metadata": {"name": "s"}})),
    );
    assert_eq!(code, 404);
}

#[test]
fn secrets_follow_kube_rules() {
    let s = Server::start();
    let base = "/api/v1/namespaces/default/secrets";
    let (code, created) = call(
        &s,
        "POST",
        base,
        Some(
            json!({"metadata": {"name": "s"}, "data": {"a": "b2xk"}, "stringData": {"b": "plain"}}),
        ),
    );
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["type"], "Opaque");
    assert_eq!(created["data"], json!({"a": "b2xk", "b": "cGxhaW4="}));
    assert!(created.get("stringData").is_none());

    let (code, err) = call(
        &s,
        "POST",
        base,
        Some(json!({"metadata": {"name": "bad"}, "data": {"a": "!!"}})),
    );
    assert_eq!(code, 400, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("Secret in version \"v1\" cannot be handled as a Secret:"),
        "{err}"
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("illegal base64 data at input byte 0"),
        "{err}"
    );

    let (code, err) = call(
        &s,
        "POST",
        base,
        Some(json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls"})),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Secret \"tls\" is invalid: [data[tls.crt]: Required value, data[tls.key]: Required value]"
    );
    assert_eq!(err["details"]["causes"][1]["field"], "data[tls.key]");
    assert_eq!(err["details"]["causes"][1]["reason"], "FieldValueRequired");

    let (code, err) = call(
        &s,
        "PATCH",
        &format!("{base}/s"),
        Some(json!({"type": "example.com/other"})),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Secret \"s\" is invalid: type: Invalid value: \"example.com/other\": field is immutable"
    );

    // Immutable: the data stays; labels may still change.
    let (code, _) = call(
        &s,
        "PATCH",
        &format!("{base}/s"),
        Some(json!({"immutable": true})),
    );
    assert_eq!(code, 200);
    let (code, err) = call(
        &s,
        "PATCH",
        &format!("{base}/s"),
        Some(json!({"stringData": {"a": "new"}})),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "Secret \"s\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let (code, _) = call(
        &s,
        "PATCH",
        &format!("{base}/s"),
        Some(json!({"metadata": {"labels": {"x": "y"}}})),
    );
    assert_eq!(code, 200);

    let table: Value = s
        .http()
        .get(s.url("/api/v1/secrets"))
        .header("authorization", s.auth())
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        table["rows"][0]["cells"].as_array().unwrap()[..3],
        [json!("s"), json!("Opaque"), json!(2)]
    );
}

#[test]
fn config_maps_follow_kube_rules() {
    let s = Server::start();
    let base = "/api/v1/namespaces/default/configmaps";
    let (code, err) = call(
        &s,
        "POST",
        base,
        Some(
            json!({"metadata": {"name": "c"}, "data": {"a b": "x", "k": "v"}, "binaryData": {"k": "eA=="}}),
        ),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "ConfigMap \"c\" is invalid: [data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+'), data[k]: Invalid value: \"k\": duplicate of key present in binaryData]"
    );
    let (code, err) = call(
        &s,
        "POST",
        base,
        Some(json!({"metadata": {"name": "big"}, "data": {"a": "x".repeat(1024 * 1024 + 1)}})),
    );
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "ConfigMap \"big\" is invalid: : Too long: may not be more than 1048576 bytes"
    );

    let (code, cm) = call(
        &s,
        "POST",
        base,
        Some(json!({"metadata": {"name": "c"}, "data": {"k": "v"}, "binaryData": {"b": "AAE="}})),
    );
    assert_eq!(code, 201, "{cm}");
    let (code, cm) = call(&s, "GET", &format!("{base}/c"), None);
    assert_eq!(code, 200);
    assert_eq!(cm["binaryData"]["b"], "AAE=");
    let (code, list) = call(&s, "GET", "/api/v1/configmaps", None);
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "ConfigMapList");
    // Every namespace's: this one, and Knative's eight in knative-serving.
    let namespaces: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(namespaces.iter().filter(|n| **n == "default").count(), 1);
    assert_eq!(
        namespaces
            .iter()
            .filter(|n| **n == "knative-serving")
            .count(),
        8
    );
    let (code, _) = call(&s, "DELETE", &format!("{base}/c"), None);
    assert_eq!(code, 200);
    assert_eq!(call(&s, "GET", &format!("{base}/c"), None).0, 404);

    // A protobuf body for a custom resource is refused as kube-apiserver refuses it.
    let r = s
        .http()
        .post(s.url("/apis/serving.knative.dev/v1/namespaces/default/services"))
        .header("authorization", s.auth())
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(b"k8s\0\x0a\x21\x0a\x16serving.knative.dev/v1\x12\x07Service".to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let r = s
        .http()
        .post(s.url(base))
        .header("authorization", s.auth())
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(b"k8s\0\xff".to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

#[test]
fn a_store_from_before_namespaces_gets_them() {
    let mut s = Server::start();
    create_ns(&s, "old");
    let (code, _) = call(
        &s,
        "POST",
        "/api/v1/namespaces/old/configmaps",
        Some(json!({"metadata": {"name": "c"}})),
    );
    assert_eq!(code, 201);
    // Remove the Namespace object behind the server's back, as an older store lacks it.
    s.terminate();
    let db = s.data_dir().join("wisp.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n = conn
        .execute(
            "DELETE FROM objects WHERE resource = 'namespaces' AND name = 'old'",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(conn);
    s.kill9_and_restart();
    let (code, ns) = call(&s, "GET", "/api/v1/namespaces/old", None);
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["status"]["phase"], "Active");
}
