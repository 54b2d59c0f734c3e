//! What an old position gets once the store's event history has moved past it: a watch
//! answers 200 with one `ERROR` event carrying 410 Expired, a continue token 410.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use axum::{body::Body, http::Request};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use wisp_apiserver::router;
use wisp_store::{Options, Store};

async fn get(app: &axum::Router, uri: &str) -> (u16, String) {
    let (code, bytes) = get_as(app, uri, "application/json").await;
    (code, String::from_utf8(bytes).unwrap())
}

async fn get_as(app: &axum::Router, uri: &str, accept: &str) -> (u16, Vec<u8>) {
    let resp = app
        .clone()
        .oneshot(
            Request::get(uri)
                .header("accept", accept)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        resp.into_body().collect(),
    )
    .await
    .expect("the answer ends")
    .unwrap()
    .to_bytes();
    (code, bytes.to_vec())
}

#[tokio::test]
async fn old_positions_are_expired() {
    let store = Store::open_in_memory_with(Options {
        event_history: 2,
        ..Options::default()
    })
    .unwrap();
    for i in 0..6 {
        store
            .create(
                "configmaps",
                json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}, "data": {}}),
            )
            .unwrap();
    }
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let app = router(common::state(store, stopping, wisp_views::Views::default()));

    let (code, body) = get(
        &app,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["kind"], "Status");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");

    // The same in protobuf: one frame, an ERROR event whose object is the 410 Status.
    let (code, body) = get_as(
        &app,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!(code, 200);
    let events = wisp_apiserver::protobuf::read_watch_frames(&body).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "ERROR");
    assert_eq!(events[0].1["kind"], "Status");
    assert_eq!(events[0].1["code"], 410);
    assert_eq!(events[0].1["reason"], "Expired");

    let token = wisp_apiserver::listing::encode_continue(1, "default/c0");
    let (code, body) = get(
        &app,
        &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={token}"),
    )
    .await;
    assert_eq!(code, 410, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old")
    );
}
