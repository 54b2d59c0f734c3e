//! Discovery and server-side Tables over real HTTP against a real `wisp serve`: the
//! documents kubectl reads before anything else, and the Tables `kubectl get` prints.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{Server, wait_for};
use serde_json::{Value, json};

const SVC: &str = "/apis/serving.knative.dev/v1/namespaces/default/services";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
/// What kubectl 1.32 sends to `/api` and `/apis`.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// GET with an optional Accept header: (code, Content-Type, body).
fn get(s: &Server, path: &str, accept: Option<&str>) -> (u16, String, Value) {
    let mut req = s.http().get(s.url(path)).header("authorization", s.auth());
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let r = req.send().unwrap();
    let code = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (code, ct, r.json().unwrap_or(Value::Null))
}

fn assert_status(got: (u16, String, Value), code: u16, reason: &str) {
    let (c, _, body) = got;
    assert_eq!(c, code, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert_eq!(body["code"], code, "{body}");
}

#[test]
fn discovery_documents() {
    let s = Server::start();

    let (code, _, v) = get(&s, "/version", None);
    assert_eq!(code, 200);
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("32"))
    );
    assert!(
        v["gitVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1.32.0-wisp."),
        "{v}"
    );
    assert_eq!(v["compiler"], "rustc");

    let (code, ct, v) = get(&s, "/api", None);
    assert_eq!(code, 200);
    assert!(ct.starts_with("application/json"), "{ct}");
    assert_eq!(v["kind"], "APIVersions");
    assert_eq!(v["versions"], json!(["v1"]));
    assert_eq!(v["serverAddressByClientCIDRs"][0]["serverAddress"], s.addr);

    let (code, _, v) = get(&s, "/api/v1", None);
    assert_eq!(code, 200);
    assert_eq!(v["kind"], "APIResourceList");
    assert_eq!(v["groupVersion"], "v1");
    let core: Vec<(&str, bool)> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["namespaced"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        core,
        [
            ("namespaces", false),
            ("namespaces/status", false),
            ("secrets", true),
            ("configmaps", true),
            ("pods", true),
            ("pods/log", true),
            ("services", true),
            ("events", true)
        ]
    );

    let (code, _, v) = get(&s, "/apis", None);
    assert_eq!(code, 200);
    assert_eq!(v["kind"], "APIGroupList");
    let names: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "apps",
            "events.k8s.io",
            "serving.knative.dev",
            "autoscaling.internal.knative.dev",
            "networking.internal.knative.dev"
        ]
    );
    assert_eq!(
        v["groups"][3]["preferredVersion"],
        json!({"groupVersion": "autoscaling.internal.knative.dev/v1alpha1", "version": "v1alpha1"})
    );

    let (code, _, v) = get(&s, "/apis/serving.knative.dev", None);
    assert_eq!(code, 200);
    assert_eq!(v["kind"], "APIGroup");
    assert_eq!(v["versions"][0]["groupVersion"], "serving.knative.dev/v1");

    let (code, _, v) = get(&s, "/apis/serving.knative.dev/v1", None);
    assert_eq!(code, 200);
    assert_eq!(v["kind"], "APIResourceList");
    assert_eq!(v["groupVersion"], "serving.knative.dev/v1");
    let res = v["resources"].as_array().unwrap();
    let names: Vec<&str> = res.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "services",
            "services/status",
            "configurations",
            "configurations/status",
            "revisions",
            "revisions/status",
            "routes",
            "routes/status"
        ]
    );
    assert_eq!(
        res[0],
        json!({
            "name": "services",
            "singularName": "service",
            "namespaced": true,
            "kind": "Service",
            "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
            "shortNames": ["kservice", "ksvc"],
            "categories": ["all", "knative", "serving"],
        })
    );
    let (_, _, v) = get(&s, "/apis/autoscaling.internal.knative.dev/v1alpha1", None);
    assert_eq!(v["resources"][0]["shortNames"], json!(["kpa", "pa"]));

    // Aggregated discovery, as kubectl asks for it.
    for (path, groups) in [("/apis", 5), ("/api", 1)] {
        let (code, ct, v) = get(&s, path, Some(AGGREGATED));
        assert_eq!(code, 200, "{path}");
        assert_eq!(
            ct, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            "{path}"
        );
        assert_eq!(v["kind"], "APIGroupDiscoveryList");
        assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(v["items"].as_array().unwrap().len(), groups, "{path}");
    }
    let (_, _, v) = get(&s, "/apis", Some(AGGREGATED));
    // kube's own groups (apps, events.k8s.io) come first.
    assert_eq!(v["items"][2]["metadata"]["name"], "serving.knative.dev");
    let ksvc = &v["items"][2]["versions"][0]["resources"][0];
    assert_eq!(
        ksvc,
        &json!({
            "resource": "services",
            "responseKind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
            "scope": "Namespaced",
            "singularResource": "service",
            "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
            "shortNames": ["kservice", "ksvc"],
            "categories": ["all", "knative", "serving"],
            "subresources": [{
                "subresource": "status",
                "responseKind": {"group": "serving.knative.dev", "version": "v1", "kind": "Service"},
                "verbs": ["get", "patch", "update"],
            }],
        })
    );
    assert_eq!(v["items"][2]["versions"][0]["freshness"], "Current");

    // Bad input: kube-apiserver's Status objects, never a 5xx.
    assert_status(get(&s, "/apis/batch", None), 404, "NotFound");
    assert_status(get(&s, "/apis/apps/v2", None), 404, "NotFound");
    assert_status(
        get(&s, "/apis/serving.knative.dev/v2", None),
        404,
        "NotFound",
    );
    assert_status(get(&s, "/api/v2", None), 404, "NotFound");
    assert_status(
        get(&s, "/apis/serving.knative.dev/v1/pods", None),
        404,
        "NotFound",
    );
    assert_status(
        get(&s, "/apis", Some("application/yaml")),
        406,
        "NotAcceptable",
    );
    assert_status(
        get(
            &s,
            "/apis/serving.knative.dev/v1",
            Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
        ),
        406,
        "NotAcceptable",
    );

    // Discovery sits behind the same authentication as the rest of the API.
    let r = s.http().get(s.url("/apis")).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

#[test]
fn tables_from_printer_columns() {
    let s = Server::start();
    // Its command does not exist: the revision fails, which the columns show too.
    s.apply(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - command: [/bin/hello]\n",
    );
    // The controllers fill the status the columns show.
    let obj = wait_for("the service's status", Duration::from_secs(20), || {
        let (_, _, o) = get(&s, &format!("{SVC}/hello"), None);
        o["status"]["conditions"].is_array().then_some(o)
    });

    let (code, _, t) = get(&s, &format!("{SVC}/hello"), Some(TABLE));
    assert_eq!(code, 200, "{t}");
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "Name",
            "URL",
            "LatestCreated",
            "LatestReady",
            "Ready",
            "Reason"
        ]
    );
    let row = &t["rows"][0];
    assert_eq!(row["cells"][0], "hello");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], "hello");
    // Cells are the object's fields (read again: the controllers may have moved on).
    let (_, _, now) = get(&s, &format!("{SVC}/hello"), None);
    let (_, _, t) = get(&s, &format!("{SVC}/hello"), Some(TABLE));
    let (_, _, after) = get(&s, &format!("{SVC}/hello"), None);
    if now["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"] {
        let cells = &t["rows"][0]["cells"];
        let ready = now["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(cells[1], now["status"]["url"]);
        assert_eq!(cells[2], now["status"]["latestCreatedRevisionName"]);
        assert_eq!(cells[4], ready["status"]);
    }
    assert!(obj["status"].is_object());

    // A list: one row per object, with includeObject honoured.
    let (code, _, t) = get(&s, &format!("{SVC}?includeObject=Object"), Some(TABLE));
    assert_eq!(code, 200);
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    assert_eq!(t["rows"][0]["object"]["kind"], "Service");
    assert!(t["metadata"]["resourceVersion"].is_string());
    let (_, _, t) = get(&s, &format!("{SVC}?includeObject=None"), Some(TABLE));
    assert_eq!(t["rows"][0]["object"], Value::Null);
    // Cluster-wide lists of the other kinds, as `kubectl get rev -A` asks.
    let (code, _, t) = get(&s, "/apis/serving.knative.dev/v1/revisions", Some(TABLE));
    assert_eq!(code, 200);
    assert_eq!(t["columnDefinitions"][1]["name"], "Config Name");
    wait_for("a revision row", Duration::from_secs(20), || {
        let (_, _, t) = get(&s, "/apis/serving.knative.dev/v1/revisions", Some(TABLE));
        let row = t["rows"][0].clone();
        (row["cells"][1] == "hello").then_some(())
    });
    let (_, _, t) = get(
        &s,
        "/apis/autoscaling.internal.knative.dev/v1alpha1/namespaces/default/podautoscalers",
        Some(TABLE),
    );
    assert_eq!(t["columnDefinitions"][1]["name"], "DesiredScale");

    // A watch of Tables (`kubectl get -w`): headers on the first event only.
    let r = s
        .http()
        .get(s.url(&format!("{SVC}?watch=true&timeoutSeconds=1")))
        .header("authorization", s.auth())
        .header("accept", TABLE)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!events.is_empty(), "{text}");
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["rows"][0]["cells"][0], "hello");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    for e in &events[1..] {
        assert_eq!(e["object"]["columnDefinitions"], Value::Null, "{e}");
    }

    // kubectl's Accept list falls back to plain JSON; plain requests are unchanged.
    let (_, _, o) = get(&s, &format!("{SVC}/hello"), Some("application/json"));
    assert_eq!(o["kind"], "Service");
    let (_, _, l) = get(&s, SVC, None);
    assert_eq!(l["kind"], "ServiceList");

    // Bad input.
    assert_status(
        get(&s, &format!("{SVC}/hello?includeObject=All"), Some(TABLE)),
        400,
        "BadRequest",
    );
    assert_status(
        get(&s, &format!("{SVC}/hello"), Some("application/yaml")),
        406,
        "NotAcceptable",
    );
    assert_status(
        get(
            &s,
            SVC,
            Some("application/json;as=Table;v=v2;g=meta.k8s.io"),
        ),
        406,
        "NotAcceptable",
    );
    assert_status(
        get(&s, &format!("{SVC}/nope"), Some(TABLE)),
        404,
        "NotFound",
    );
}
