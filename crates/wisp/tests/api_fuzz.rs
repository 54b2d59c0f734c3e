//! Arbitrary bytes, JSON and YAML thrown at a real API server: never a 5xx, never a crash,
//! and a rejected write changes nothing that was stored.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use common::Server;
use proptest::{prelude::*, test_runner::TestRunner};
use serde_json::{Value, json};

const PATHS: [&str; 4] = [
    "/apis/serving.knative.dev/v1/namespaces/default/services",
    "/apis/serving.knative.dev/v1/namespaces/default/configurations",
    "/apis/serving.knative.dev/v1/namespaces/default/routes",
    "/apis/serving.knative.dev/v1/namespaces/default/revisions",
];

fn valid_service() -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "fuzz", "labels": {"app": "fuzz"}},
        "spec": {
            "template": {"metadata": {"annotations": {"autoscaling.knative.dev/target": "10"}},
                "spec": {"containerConcurrency": 5, "timeoutSeconds": 30,
                "containers": [{"command": ["/bin/hello"], "ports": [{"containerPort": 8080}],
                    "env": [{"name": "TARGET", "value": "x"}],
                    "readinessProbe": {"httpGet": {"path": "/"}, "periodSeconds": 1}}]}},
            "traffic": [{"latestRevision": true, "percent": 100, "tag": "current"}]
        }
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-zA-Z0-9:/._ -]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("-1"),
            Just("0"),
            Just("1s"),
            Just("abc"),
            Just("1001"),
            Just("8012")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer of a document, so a mutation can land anywhere in it.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, c)| pointers(c, format!("{at}/{k}"), out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, c)| pointers(c, format!("{at}/{i}"), out)),
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Input {
    Bytes(Vec<u8>, &'static str),
    Json(Value),
    Mutated(usize, Value),
    Yaml(String),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        (
            prop::collection::vec(any::<u8>(), 0..200),
            prop_oneof![Just("application/json"), Just("application/yaml")]
        )
            .prop_map(|(b, ct)| Input::Bytes(b, ct)),
        json_value().prop_map(Input::Json),
        (any::<usize>(), json_value()).prop_map(|(i, v)| Input::Mutated(i, v)),
        "[a-z:\\[\\]{}\\- \n'\"&*!|>0-9]{0,120}".prop_map(Input::Yaml),
    ]
}

/// What a rejected write must not change: which objects exist, and everything users own
/// on the stored Service (spec and metadata). The controllers keep writing status and
/// bookkeeping concurrently, so resourceVersions and status are not compared.
fn user_state(s: &Server) -> (Vec<String>, Value) {
    let mut names = Vec::new();
    for p in PATHS {
        let v: Value = s
            .http()
            .get(s.url(p))
            .header("authorization", s.auth())
            .send()
            .unwrap()
            .json()
            .unwrap();
        // Objects the controllers create (they all carry ownerReferences) come and go
        // asynchronously after an *accepted* write; only user-created objects count here.
        for item in v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["metadata"].get("ownerReferences").is_none())
        {
            names.push(format!(
                "{p}/{}",
                item["metadata"]["name"].as_str().unwrap()
            ));
        }
    }
    names.sort();
    let mut svc = s
        .get_json(&format!("{}/fuzz", PATHS[0]))
        .unwrap_or(Value::Null);
    if let Some(o) = svc.as_object_mut() {
        o.remove("status");
        o["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
    }
    (names, svc)
}

#[test]
fn arbitrary_input_never_5xx_and_rejections_change_nothing() {
    let s = Server::start();
    // One stored object that updates and patches aim at.
    let r = s
        .http()
        .post(s.url(PATHS[0]))
        .header("authorization", s.auth())
        .json(&valid_service())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);

    let mut runner = TestRunner::new(ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(input(), 0usize..4, 0usize..3),
            |(input, path_idx, verb)| {
                let (body, ct): (Vec<u8>, &str) = match &input {
                    Input::Bytes(b, ct) => (b.clone(), ct),
                    Input::Json(v) => (v.to_string().into_bytes(), "application/json"),
                    Input::Yaml(y) => (y.clone().into_bytes(), "application/yaml"),
                    Input::Mutated(i, v) => {
                        let mut doc = valid_service();
                        let mut ptrs = Vec::new();
                        pointers(&doc, String::new(), &mut ptrs);
                        let p = &ptrs[i % ptrs.len()];
                        if p.is_empty() {
                            doc = v.clone();
                        } else if let Some(slot) = doc.pointer_mut(p) {
                            *slot = v.clone();
                        }
                        (doc.to_string().into_bytes(), "application/json")
                    }
                };
                let before = user_state(&s);
                let base = PATHS[if matches!(input, Input::Mutated(..)) {
                    0
                } else {
                    path_idx
                }];
                let req = match verb {
                    0 => s.http().post(s.url(base)),
                    1 => s.http().put(s.url(&format!("{}/fuzz", PATHS[0]))),
                    _ => s.http().patch(s.url(&format!("{}/fuzz", PATHS[0]))),
                };
                let ct = if verb == 2 {
                    "application/merge-patch+json"
                } else {
                    ct
                };
                let resp = req
                    .header("authorization", s.auth())
                    .header("content-type", ct)
                    .body(body)
                    .send()
                    .expect("the server answers");
                let code = resp.status().as_u16();
                let text = resp.text().unwrap_or_default();
                prop_assert!(code < 500, "{code}: {text}");
                if code >= 400 {
                    let status: Value =
                        serde_json::from_str(&text).expect("errors are Status JSON");
                    prop_assert_eq!(&status["kind"], "Status");
                    prop_assert_eq!(user_state(&s), before, "a rejected write changed the store");
                }
                Ok(())
            },
        )
        .unwrap();
}
