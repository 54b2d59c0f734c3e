//! The views through the API's router: lists with selectors, `limit`/`continue` and
//! Tables, watches from a resourceVersion, and every kind of bad input answered with
//! kube-apiserver's Status (405 for writes to a view, 404, 400, 410, 422), never a 5xx.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use axum::{body::Body, http::Request};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use wisp_apiserver::{ApiState, router};
use wisp_store::Store;

fn state(views: wisp_views::Views) -> ApiState {
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    // The sender lives as long as the test process: watches end on their timeout.
    std::mem::forget(_stop);
    common::state(Store::open_in_memory().unwrap(), stopping, views)
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: &str) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/merge-patch+json")
        .header("accept", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let code = resp.status().as_u16();
    let bytes = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        resp.into_body().collect(),
    )
    .await
    .expect("the answer ends")
    .unwrap()
    .to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let v = if uri.contains("watch=true") {
        // A watch stream: one JSON object per line.
        Value::Array(
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (code, v)
}

fn pod(ns: &str, name: &str, revision: &str, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name,
                     "labels": {"serving.knative.dev/revision": revision}},
        "spec": {"containers": [{"name": "user-container"}], "nodeName": "n"},
        "status": {"phase": phase},
    })
}

fn views() -> wisp_views::Views {
    let v = wisp_views::Views::default();
    v.pods.replace_set(
        "a/r1",
        vec![
            pod("a", "r1-p1", "r1", "Running"),
            pod("a", "r1-p2", "r1", "Pending"),
        ],
    );
    v.pods
        .replace_set("b/r2", vec![pod("b", "r2-p1", "r2", "Running")]);
    v
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn lists_select_page_and_print() {
    let app = router(state(views()));
    let (code, all) = call(&app, "GET", "/api/v1/pods", "").await;
    assert_eq!(code, 200);
    assert_eq!(all["kind"], "PodList");
    assert_eq!(names(&all), ["r1-p1", "r1-p2", "r2-p1"]);
    // The plain list (the view's texts copied out) is the list a selector builds from the
    // parsed objects.
    let (_, everything) = call(
        &app,
        "GET",
        "/api/v1/pods?labelSelector=serving.knative.dev%2Frevision",
        "",
    )
    .await;
    assert_eq!(all, everything);
    let (_, a) = call(&app, "GET", "/api/v1/namespaces/a/pods", "").await;
    assert_eq!(names(&a), ["r1-p1", "r1-p2"]);
    let (_, sel) = call(
        &app,
        "GET",
        "/api/v1/pods?labelSelector=serving.knative.dev%2Frevision%3Dr2",
        "",
    )
    .await;
    assert_eq!(names(&sel), ["r2-p1"]);
    let (_, running) = call(
        &app,
        "GET",
        "/api/v1/pods?fieldSelector=status.phase%3DRunning,spec.nodeName%3Dn",
        "",
    )
    .await;
    assert_eq!(names(&running), ["r1-p1", "r2-p1"]);

    // Chunks: limit, then continue from the token.
    let (_, first) = call(&app, "GET", "/api/v1/pods?limit=2", "").await;
    assert_eq!(names(&first), ["r1-p1", "r1-p2"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().unwrap();
    let (_, rest) = call(
        &app,
        "GET",
        &format!("/api/v1/pods?limit=2&continue={token}"),
        "",
    )
    .await;
    assert_eq!(names(&rest), ["r2-p1"]);
    assert!(rest["metadata"].get("continue").is_none());

    // A Table with kube's pod columns.
    let req = Request::get("/api/v1/namespaces/a/pods")
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let t: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(t["kind"], "Table");
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
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert_eq!(t["rows"][1]["cells"][0], "r1-p2");
    assert_eq!(t["rows"][1]["cells"][2], "Pending");
    assert_eq!(t["rows"][1]["cells"][6], "n");
}

#[tokio::test]
async fn watches_resume_from_a_version() {
    let v = views();
    let app = router(state(v.clone()));
    let (_, list) = call(&app, "GET", "/api/v1/namespaces/a/pods", "").await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    v.pods
        .replace_set("a/r1", vec![pod("a", "r1-p1", "r1", "Running")]);
    v.pods.replace_set("b/r2", vec![]);
    let (code, events) = call(
        &app,
        "GET",
        &format!("/api/v1/namespaces/a/pods?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
        "",
    )
    .await;
    assert_eq!(code, 200);
    let seen: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    // Only namespace a's change: r1-p2 went.
    assert_eq!(seen, [("DELETED", "r1-p2")]);

    // Without a version: the current objects as ADDED, then nothing more here.
    let (_, events) = call(&app, "GET", "/api/v1/pods?watch=true&timeoutSeconds=1", "").await;
    let added: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["ADDED"]);
}

#[tokio::test]
async fn bad_input_gets_kubes_status() {
    let app = router(state(views()));
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        u16,
        &'static str,
        &'static str,
    );
    let cases: [Case; 12] = [
        (
            "POST",
            "/api/v1/namespaces/a/pods",
            r#"{"metadata":{"name":"x"}}"#,
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/a/pods/r1-p1",
            "{}",
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "PUT",
            "/apis/apps/v1/namespaces/a/deployments/d",
            "{}",
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/services/s",
            "",
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/pods",
            "",
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "POST",
            "/api/v1/namespaces/a/events",
            "{}",
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/nope",
            "",
            404,
            "NotFound",
            "pods \"nope\" not found",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/pods/nope",
            "",
            404,
            "NotFound",
            "pods \"nope\" not found",
        ),
        (
            "GET",
            "/api/v1/pods?fieldSelector=spec.bogus%3Dx",
            "",
            400,
            "BadRequest",
            "field label not supported: spec.bogus",
        ),
        (
            "GET",
            // A token from before the view's history (an earlier run of wisp).
            "/api/v1/pods?continue=eyJ2IjogIm1ldGEuazhzLmlvL3YxIiwgInJ2IjogMSwgInN0YXJ0IjogImEveFx1MDAwMCJ9",
            "",
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/r1-p1/log?tailLines=-1",
            "",
            422,
            "Invalid",
            "PodLogOptions.meta.k8s.io \"\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            "{}",
            404,
            "NotFound",
            "deployments.apps \"d\" not found",
        ),
    ];
    for (method, uri, body, code, reason, message) in cases {
        let (got, status) = call(&app, method, uri, body).await;
        assert_eq!(got, code, "{method} {uri}: {status}");
        assert_eq!(status["kind"], "Status", "{method} {uri}");
        assert_eq!(status["reason"], reason, "{method} {uri}");
        assert_eq!(status["message"], message, "{method} {uri}");
    }
    // A watch from before the view's history: 200 with one ERROR event carrying 410.
    let (code, events) = call(&app, "GET", "/api/v1/pods?watch=true&resourceVersion=1", "").await;
    assert_eq!(code, 200);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}
