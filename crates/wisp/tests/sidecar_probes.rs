//! Issue #17, multi-container revisions under `multi-container-probing`: a sidecar's
//! readiness probe gates its replica, as Knative's queue-proxy gates a pod on every
//! container's probe (`pkg/reconciler/revision/resources/queue.go`). On the process
//! runtime, so that it needs neither root nor images.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{Server, sample_bin, wait_for};

const TIMEOUT: Duration = Duration::from_secs(20);

/// The `ready` of each container of the revision's first pod, by name.
fn containers_ready(s: &Server, revision: &str) -> Option<Vec<(String, bool)>> {
    let pods = s.get_json(&format!(
        "/api/v1/namespaces/default/pods?labelSelector=serving.knative.dev%2Frevision%3D{revision}"
    ))?;
    let statuses = pods["items"][0]["status"]["containerStatuses"].as_array()?;
    Some(
        statuses
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["ready"].as_bool().unwrap_or(false),
                )
            })
            .collect(),
    )
}

/// One request through the ingress: its status, or None when no answer came in `wait`.
fn get(s: &Server, wait: Duration) -> Option<u16> {
    let client = reqwest::blocking::Client::builder()
        .timeout(wait)
        .build()
        .unwrap();
    client
        .get(format!("http://{}/", s.http_addr))
        .header("host", "gated.default.example.com")
        .send()
        .ok()
        .map(|r| r.status().as_u16())
}

#[test]
fn a_sidecar_that_becomes_ready_late_keeps_the_service_from_being_ready_and_served() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "config-features:\n  multi-container-probing: enabled\n",
    )
    .unwrap();
    let s = Server::start_with(&["--config", &cfg.display().to_string()]);
    let open = tmp.path().join("open");
    let hello = sample_bin("hello").display().to_string();
    // The sidecar is ready once the test creates `open`; its exec probe runs with the
    // sidecar's env.
    let yaml = format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: gated\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{hello:?}]\n        ports: [{{containerPort: 8080}}]\n      - name: gate\n        command: [sh, -c, 'exec sleep 1000']\n        env: [{{name: OPEN, value: {open:?}}}]\n        readinessProbe:\n          exec:\n            command: [sh, -c, 'test -e \"$OPEN\"']\n",
        open = open.display().to_string()
    );
    s.apply(&yaml);

    // The serving container is ready; the sidecar is not, and neither is the service.
    let ready = wait_for(
        "the serving container ready, the sidecar not",
        TIMEOUT,
        || {
            let ready = containers_ready(&s, "gated-00001")?;
            let gate = ready.iter().find(|(n, _)| n == "gate")?.1;
            let serving = ready.iter().find(|(n, _)| n != "gate")?.1;
            (serving && !gate).then_some(ready)
        },
    );
    assert_eq!(ready.len(), 2, "{ready:?}");
    std::thread::sleep(Duration::from_millis(500));
    let not_ready = s.ready("services", "gated");
    assert_ne!(
        not_ready.as_ref().map(|(st, _, _)| st.as_str()),
        Some("True"),
        "{not_ready:?}"
    );
    // No answer from the app while its replica is not Ready.
    assert_ne!(get(&s, Duration::from_secs(2)), Some(200));
    // Not Ready (a new revision's in-progress first status may still be waiting: none).
    let revision = s.ready("revisions", "gated-00001");
    assert_ne!(
        revision.as_ref().map(|(st, _, _)| st.as_str()),
        Some("True"),
        "{revision:?}"
    );

    std::fs::write(&open, "").unwrap();
    wait_for("gated Ready", TIMEOUT, || {
        s.ready("services", "gated")
            .filter(|(st, _, _)| st == "True")
    });
    assert_eq!(get(&s, Duration::from_secs(10)), Some(200));
    let ready = containers_ready(&s, "gated-00001").unwrap();
    assert!(ready.iter().all(|(_, r)| *r), "{ready:?}");
}
