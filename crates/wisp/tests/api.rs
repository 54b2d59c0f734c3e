//! The REST API driven over real HTTP against a real `wisp serve`.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

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
    // The controllers may already have written status (and so a newer resourceVersion).
    let strip = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("status");
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        v
    };
    assert_eq!(strip(&got), strip(&created));

    let (code, list) = get(&s, SVC);
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, all) = get(&s, "/apis/serving.knative.dev/v1/services");
    assert_eq!(all["items"].as_array().unwrap().len(), 1);

    // A spec change bumps generation and resourceVersion.
    let rv = |v: &Value| -> u64 {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let updated = put_fresh(&s, &format!("{SVC}/hello"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "wisp".into();
    });
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(rv(&updated) > rv(&got));

    // Re-sending the stored object is a no-op: same resourceVersion, same generation.
    // (Retried while the controllers are still writing status in between.)
    common::wait_for("a no-op update", Duration::from_secs(20), || {
        let (_, current) = get(&s, &format!("{SVC}/hello"));
        let (code, same) = put(&s, &format!("{SVC}/hello"), &current);
        (code == 200 && rv(&same) == rv(&current) && same["metadata"]["generation"] == 2)
            .then_some(())
    });

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
    let (code, _) = post(&s, SVC, &hello("dup"));
    assert_eq!(code, 201);
    let (code, st) = post(&s, SVC, &hello("dup"));
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")));
    // Read, then let an update land (retrying past concurrent controller writes): what
    // was read is now out of date.
    let (_, mut stale) = get(&s, &format!("{SVC}/dup"));
    put_fresh(&s, &format!("{SVC}/dup"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["a"]);
    });
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
    post(&s, SVC, &hello("st"));
    // Status in a user's write is ignored.
    let after = put_fresh(&s, &format!("{SVC}/st"), |o| {
        o["status"] = json!({"url": "http://evil"});
    });
    assert_ne!(after["status"]["url"], "http://evil", "{after}");

    // /status writes status (and nothing else: generation stays).
    let written = put_fresh(&s, &format!("{SVC}/st/status"), |o| {
        o["status"]["url"] = "http://st.example.org".into();
        o["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["ignored"]);
    });
    assert_eq!(written["status"]["url"], "http://st.example.org");
    assert_eq!(written["metadata"]["generation"], 1);
    assert!(
        written["spec"]["template"]["spec"]["containers"][0]
            .get("args")
            .is_none()
    );
    // A later spec write keeps the stored status.
    let kept = put_fresh(&s, &format!("{SVC}/st"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["x"]);
    });
    assert!(kept["status"]["conditions"].is_array(), "{kept}");
    assert_eq!(kept["metadata"]["generation"], 2);
}

/// GET, modify, PUT; retried when a controller wrote in between (409 Conflict).
fn put_fresh(s: &Server, path: &str, modify: impl Fn(&mut Value)) -> Value {
    let object_path = path.trim_end_matches("/status");
    for _ in 0..20 {
        let (_, mut o) = get(s, object_path);
        modify(&mut o);
        let (code, v) = put(s, path, &o);
        match code {
            200 => return v,
            409 => continue,
            _ => panic!("PUT {path}: {code} {v}"),
        }
    }
    panic!("PUT {path} kept conflicting");
}

#[test]
fn delete_cascades_to_owned_objects() {
    let s = Server::start();
    post(&s, SVC, &hello("owner"));
    let base = "/apis/serving.knative.dev/v1/namespaces/default";
    let children = [
        format!("{base}/configurations/owner"),
        format!("{base}/routes/owner"),
        format!("{base}/revisions/owner-00001"),
    ];
    // The controllers create the Service's children, each owned by its parent.
    common::wait_for("children", Duration::from_secs(20), || {
        children.iter().all(|c| get(&s, c).0 == 200).then_some(())
    });
    let (code, _) = body(
        s.http()
            .delete(s.url(&format!("{SVC}/owner")))
            .header("authorization", s.auth())
            .send()
            .unwrap(),
    );
    assert_eq!(code, 200);
    // Deleted in the same transaction as the Service: no waiting.
    for c in &children {
        assert_eq!(get(&s, c).0, 404, "{c} survived its owner");
    }
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

    post(&s, SVC, &hello("w"));
    put_fresh(&s, &format!("{SVC}/w"), |o| {
        o["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["1"]);
    });
    s.http()
        .delete(s.url(&format!("{SVC}/w")))
        .header("authorization", s.auth())
        .send()
        .unwrap();

    // Every change arrives, in order; the controllers' status writes add MODIFIED events
    // of their own in between.
    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    let mut saw_our_change = false;
    loop {
        let line = lines.next().expect("event").expect("read");
        let ev: Value = serde_json::from_str(&line).unwrap();
        let rv: u64 = ev["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last_rv, "events out of order");
        last_rv = rv;
        let ty = ev["type"].as_str().unwrap().to_string();
        if ty == "MODIFIED"
            && ev["object"]["spec"]["template"]["spec"]["containers"][0]["args"] == json!(["1"])
        {
            saw_our_change = true;
        }
        let done = ty == "DELETED";
        seen.push(ty);
        if done {
            break;
        }
    }
    assert_eq!(seen.first().map(String::as_str), Some("ADDED"), "{seen:?}");
    assert!(saw_our_change, "{seen:?}");
    assert_eq!(seen.iter().filter(|t| *t == "DELETED").count(), 1);

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
    let http = s.http_timeout(Duration::from_secs(5));
    let writer = std::thread::spawn(move || {
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
fn sigterm_exits_zero_and_ends_open_watches() {
    let mut s = Server::start();
    // An open watch must not hold up the shutdown: the server ends it.
    let resp = s
        .http()
        .get(s.url(&format!("{SVC}?watch=true")))
        .header("authorization", s.auth())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let reader = std::thread::spawn(move || BufReader::new(resp).lines().count());
    let started = std::time::Instant::now();
    let status = s.terminate().expect("exit status");
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "shutdown waited on the watch: {:?}",
        started.elapsed()
    );
    reader.join().unwrap();
}
