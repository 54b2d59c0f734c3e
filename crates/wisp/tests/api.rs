//! The REST API driven over real HTTP against a real `wisp serve`.

mod common;

use std::{
    io::{BufRead, BufReader},
    time::Duration,
};

use common::Server;
use reqwest::blocking::Response;
use serde_json::{Value, json};

const SVC: &str = "/apis/serving.knative.dev/v1/namespaces/default/services";

fn hello(name: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"command": ["/bin/hello"], "env": [{"name": "TARGET", "value": "world"}]}]}}}
    })
}

fn body(r: Response) -> (u16, Value) {
    let code = r.status().as_u16();
    let v = r.json::<Value>().unwrap_or(Value::Null);
    (code, v)
}

fn post(s: &Server, path: &str, obj: &Value) -> (u16, Value) {
    body(
        s.http()
            .post(s.url(path))
            .header("authorization", s.auth())
            .json(obj)
            .send()
            .unwrap(),
    )
}

fn get(s: &Server, path: &str) -> (u16, Value) {
    body(
        s.http()
            .get(s.url(path))
            .header("authorization", s.auth())
            .send()
            .unwrap(),
    )
}

fn put(s: &Server, path: &str, obj: &Value) -> (u16, Value) {
    body(
        s.http()
            .put(s.url(path))
            .header("authorization", s.auth())
            .json(obj)
            .send()
            .unwrap(),
    )
}

#[test]
fn create_get_list_update_delete() {
    let s = Server::start();
    let (code, created) = post(&s, SVC, &hello("hello"));
    assert_eq!(code, 201, "{created}");
    let meta = &created["metadata"];
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["generation"], 1);
    assert!(!meta["uid"].as_str().unwrap().is_empty());
    assert!(meta["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        meta["annotations"]["serving.knative.dev/creator"],
        "wisp-admin"
    );
    assert_eq!(
        meta["annotations"]["serving.knative.dev/lastModifier"],
        "wisp-admin"
    );
    // Knative's defaults were applied.
    assert_eq!(
        created["spec"]["traffic"],
        json!([{"latestRevision": true, "percent": 100}])
    );
    let c = &created["spec"]["template"]["spec"];
    assert_eq!(c["timeoutSeconds"], 300);
    assert_eq!(c["containerConcurrency"], 0);
    assert_eq!(c["containers"][0]["name"], "user-container");

    let (code, got) = get(&s, &format!("{SVC}/hello"));
    assert_eq!(code, 200);
    assert_eq!(got, created);

    let (code, list) = get(&s, SVC);
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, all) = get(&s, "/apis/serving.knative.dev/v1/services");
    assert_eq!(all["items"].as_array().unwrap().len(), 1);

    // A spec change bumps generation and resourceVersion.
    let mut changed = got.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "wisp".into();
    let (code, updated) = put(&s, &format!("{SVC}/hello"), &changed);
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);
    let rv1: u64 = got["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let rv2: u64 = updated["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);

    // Re-sending the same object is a no-op: same resourceVersion.
    let (code, same) = put(&s, &format!("{SVC}/hello"), &updated);
    assert_eq!(code, 200);
    assert_eq!(
        same["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );

    // A label change is not a spec change: generation stays.
    let (code, labelled) = body(
        s.http()
            .patch(s.url(&format!("{SVC}/hello")))
            .header("authorization", s.auth())
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"team":"a"}}}"#)
            .send()
            .unwrap(),
    );
    assert_eq!(code, 200, "{labelled}");
    assert_eq!(labelled["metadata"]["labels"]["team"], "a");
    assert_eq!(labelled["metadata"]["generation"], 2);

    let (code, _) = get(&s, &format!("{SVC}?labelSelector=team%3Da"));
    assert_eq!(code, 200);
    let (_, none) = get(&s, &format!("{SVC}?labelSelector=team%3Db"));
    assert_eq!(none["items"].as_array().unwrap().len(), 0);

    let (code, deleted) = body(
        s.http()
            .delete(s.url(&format!("{SVC}/hello")))
            .header("authorization", s.auth())
            .send()
            .unwrap(),
    );
    assert_eq!(code, 200);
    assert_eq!(deleted["metadata"]["name"], "hello");
    let (code, st) = get(&s, &format!("{SVC}/hello"));
    assert_eq!(code, 404);
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "NotFound");
    assert_eq!(
        st["message"],
        "services.serving.knative.dev \"hello\" not found"
    );
}

#[test]
fn yaml_bodies_and_generate_name() {
    let s = Server::start();
    let yaml = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  generateName: gen-\nspec:\n  template:\n    spec:\n      containers:\n      - command: [/bin/true]\n";
    let (code, created) = body(
        s.http()
            .post(s.url(SVC))
            .header("authorization", s.auth())
            .header("content-type", "application/yaml")
            .body(yaml)
            .send()
            .unwrap(),
    );
    assert_eq!(code, 201, "{created}");
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[test]
fn errors_are_kubernetes_status_objects() {
    let s = Server::start();
    // 401 without or with a wrong token; nothing is written.
    let r = s.http().post(s.url(SVC)).json(&hello("x")).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = s
        .http()
        .get(s.url(SVC))
        .header("authorization", "Bearer nope")
        .send()
        .unwrap();
    let (code, st) = body(r);
    assert_eq!((code, st["reason"].as_str()), (401, Some("Unauthorized")));

    // 400 malformed body.
    let r = s
        .http()
        .post(s.url(SVC))
        .header("authorization", s.auth())
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    let (code, st) = body(r);
    assert_eq!((code, st["status"].as_str()), (400, Some("Failure")));

    // 400 when a field has the wrong type, naming the field.
    let mut bad = hello("typed");
    bad["spec"]["template"]["spec"]["containerConcurrency"] = "lots".into();
    let (code, st) = post(&s, SVC, &bad);
    assert_eq!(code, 400);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("containerConcurrency"),
        "{st}"
    );

    // 422 with Knative's FieldError message.
    let mut bad = hello("bad");
    bad["spec"]["traffic"] = json!([{"latestRevision": true, "percent": 101}]);
    let (code, st) = post(&s, SVC, &bad);
    assert_eq!(code, 422);
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(
        st["message"],
        "admission webhook \"validation.webhook.serving.knative.dev\" denied the request: validation failed: Traffic targets sum to 101, want 100: spec.traffic\nexpected 0 <= 101 <= 100: spec.traffic[0].percent"
    );

    // 409 on create of an existing name and on a stale resourceVersion.
    let (code, created) = post(&s, SVC, &hello("dup"));
    assert_eq!(code, 201);
    let (code, st) = post(&s, SVC, &hello("dup"));
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")));
    let mut stale = created.clone();
    stale["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["a"]);
    let (code, _) = put(&s, &format!("{SVC}/dup"), &stale);
    assert_eq!(code, 200);
    stale["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["b"]);
    let (code, st) = put(&s, &format!("{SVC}/dup"), &stale);
    assert_eq!(
        (code, st["reason"].as_str()),
        (409, Some("Conflict")),
        "{st}"
    );

    // 413 past 3 MiB.
    let big = format!(
        "{{\"metadata\":{{\"name\":\"big\",\"annotations\":{{\"a\":\"{}\"}}}}}}",
        "x".repeat(4 << 20)
    );
    let r = s
        .http()
        .post(s.url(SVC))
        .header("authorization", s.auth())
        .header("content-type", "application/json")
        .body(big)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);

    // 404 for unknown kinds and paths.
    assert_eq!(
        get(&s, "/apis/serving.knative.dev/v1/namespaces/default/pods").0,
        404
    );
    assert_eq!(get(&s, "/nope").0, 404);

    // Nothing rejected was stored.
    let (_, list) = get(&s, SVC);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dup"]);
}

#[test]
fn status_subresource_is_the_only_way_to_write_status() {
    let s = Server::start();
    let (_, created) = post(&s, SVC, &hello("st"));
    // Status in a user's write is ignored.
    let mut with_status = created.clone();
    with_status["status"] = json!({"url": "http://evil"});
    let (code, after) = put(&s, &format!("{SVC}/st"), &with_status);
    assert_eq!(code, 200);
    assert!(
        after.get("status").is_none() || after["status"]["url"] != "http://evil",
        "{after}"
    );

    let mut st = after.clone();
    st["status"] = json!({"url": "http://st.default.example.com", "observedGeneration": 1});
    let (code, written) = put(&s, &format!("{SVC}/st/status"), &st);
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["status"]["url"], "http://st.default.example.com");
    assert_eq!(written["metadata"]["generation"], 1);
    // A later spec write keeps the status.
    let mut spec = written.clone();
    spec["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["x"]);
    let (_, kept) = put(&s, &format!("{SVC}/st"), &spec);
    assert_eq!(kept["status"]["url"], "http://st.default.example.com");
}

#[test]
fn delete_cascades_to_owned_objects() {
    let s = Server::start();
    let (_, svc) = post(&s, SVC, &hello("owner"));
    let cfg = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Configuration",
        "metadata": {"name": "owner", "ownerReferences": [{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "owner", "uid": svc["metadata"]["uid"], "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"command": ["/bin/true"]}]}}}
    });
    let cfgs = "/apis/serving.knative.dev/v1/namespaces/default/configurations";
    let (code, c) = post(&s, cfgs, &cfg);
    assert_eq!(code, 201, "{c}");
    let (code, _) = body(
        s.http()
            .delete(s.url(&format!("{SVC}/owner")))
            .header("authorization", s.auth())
            .send()
            .unwrap(),
    );
    assert_eq!(code, 200);
    assert_eq!(get(&s, &format!("{cfgs}/owner")).0, 404);
}

#[test]
fn watch_streams_every_change_in_order() {
    let s = Server::start();
    let (_, list) = get(&s, SVC);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = s
        .http()
        .get(s.url(&format!(
            "{SVC}?watch=true&resourceVersion={rv}&timeoutSeconds=20"
        )))
        .header("authorization", s.auth())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut lines = BufReader::new(resp).lines();

    let (_, created) = post(&s, SVC, &hello("w"));
    let mut changed = created.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["1"]);
    put(&s, &format!("{SVC}/w"), &changed);
    s.http()
        .delete(s.url(&format!("{SVC}/w")))
        .header("authorization", s.auth())
        .send()
        .unwrap();

    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    for _ in 0..3 {
        let line = lines.next().expect("event").expect("read");
        let ev: Value = serde_json::from_str(&line).unwrap();
        let rv: u64 = ev["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last_rv, "events out of order");
        last_rv = rv;
        seen.push(ev["type"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);

    // Without a resourceVersion a watch starts with the current objects.
    post(&s, SVC, &hello("existing"));
    let resp = s
        .http()
        .get(s.url(&format!("{SVC}?watch=true&timeoutSeconds=1")))
        .header("authorization", s.auth())
        .send()
        .unwrap();
    let first: Value =
        serde_json::from_str(&BufReader::new(resp).lines().next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "existing");
}

/// `kill -9` during a stream of writes: every acknowledged write is there after a restart
/// and resourceVersions keep rising.
#[test]
fn acknowledged_writes_survive_kill_9() {
    let mut s = Server::start();
    let (tx, rx) = std::sync::mpsc::channel::<(String, u64)>();
    let (url, auth) = (s.url(SVC), s.auth());
    let writer = std::thread::spawn(move || {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        for i in 0.. {
            let name = format!("svc-{i}");
            match http
                .post(&url)
                .header("authorization", &auth)
                .json(&hello(&name))
                .send()
            {
                Ok(r) if r.status().as_u16() == 201 => {
                    let v: Value = r.json().unwrap();
                    let rv = v["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    if tx.send((name, rv)).is_err() {
                        return;
                    }
                }
                _ => return, // the server died under us
            }
        }
    });
    // Let a good number of writes be acknowledged, then pull the plug mid-stream.
    let mut acked = Vec::new();
    while acked.len() < 40 {
        acked.push(
            rx.recv_timeout(Duration::from_secs(30))
                .expect("writes are acknowledged"),
        );
    }
    s.kill9();
    writer.join().unwrap();
    acked.extend(rx.try_iter());

    s.kill9_and_restart();
    let (_, list) = get(&s, SVC);
    let stored: std::collections::HashSet<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for (name, _) in &acked {
        assert!(stored.contains(name), "acknowledged {name} was lost");
    }
    let max_acked = acked.iter().map(|(_, rv)| *rv).max().unwrap();
    let (code, after) = post(&s, SVC, &hello("after-restart"));
    assert_eq!(code, 201);
    let rv: u64 = after["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rv > max_acked,
        "resourceVersion went back: {rv} <= {max_acked}"
    );
}

#[test]
fn bad_config_fails_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, "config-autoscaler:\n  stable-window: 1s\n").unwrap();
    let out = std::process::Command::new(common::wisp_bin())
        .args(["serve", "--api-addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stable-window"), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

#[test]
fn sigterm_exits_zero() {
    let mut s = Server::start();
    let status = s.terminate().expect("exit status");
    assert!(status.success(), "{status:?}");
}
