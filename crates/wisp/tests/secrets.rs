//! Issue #16 item 4: revisions use Secrets and ConfigMaps as on Kubernetes, through a real
//! `wisp serve` (process runtime here; the container runtime's volumes are covered by the
//! runtime's own container tests).
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{Server, sample_bin, wait_for};

const TIMEOUT: Duration = Duration::from_secs(30);

fn create(s: &Server, plural: &str, body: serde_json::Value) {
    let r = s
        .http()
        .post(s.url(&format!("/api/v1/namespaces/default/{plural}")))
        .header("authorization", s.auth())
        .json(&body)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
}

/// The revision's Ready condition once it has the wanted status.
fn revision_ready(s: &Server, name: &str, status: &str) -> (String, String, String) {
    wait_for(&format!("revision {name} Ready={status}"), TIMEOUT, || {
        s.ready("revisions", name).filter(|(st, _, _)| st == status)
    })
}

fn replica_answer(s: &Server, target: &str) -> String {
    let addr = wait_for("a replica's listening line", TIMEOUT, || {
        let out = s.cli().args(["logs", target]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .rev()
            .find_map(|l| l.split("listening on http://").nth(1))
            .map(|a| a.trim().to_string())
    });
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://{addr}/"))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn env_from_a_missing_secret_fails_then_recovers_when_it_appears() {
    let s = Server::start();
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: sec\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{bin:?}]\n        env:\n        - name: TARGET\n          valueFrom:\n            secretKeyRef: {{name: greeting, key: target}}\n        envFrom:\n        - configMapRef: {{name: extra, optional: true}}\n",
        bin = sample_bin("hello").display().to_string(),
    ));
    // kubelet's reason and message, shown as Knative shows a waiting container.
    let (_, reason, message) = revision_ready(&s, "sec-00001", "False");
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (
            "CreateContainerConfigError",
            "secret \"greeting\" not found"
        )
    );

    // A Secret without the key: still waiting, now for the key.
    create(
        &s,
        "secrets",
        serde_json::json!({"metadata": {"name": "greeting"}, "stringData": {"other": "x"}}),
    );
    wait_for("the missing key reported", TIMEOUT, || {
        s.ready("revisions", "sec-00001")
            .filter(|(_, _, m)| m == "couldn't find key target in Secret default/greeting")
    });

    // The key appears: the revision recovers by itself, with the value in its env.
    let r = s
        .http()
        .patch(s.url("/api/v1/namespaces/default/secrets/greeting"))
        .header("authorization", s.auth())
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"stringData": {"target": "from-a-secret"}}"#)
        .send()
        .unwrap();
    if !r.status().is_success() {
        // Without PATCH on core kinds: replace the whole object.
        let mut secret = s
            .get_json("/api/v1/namespaces/default/secrets/greeting")
            .unwrap();
        secret["stringData"] = serde_json::json!({"target": "from-a-secret"});
        let r = s
            .http()
            .put(s.url("/api/v1/namespaces/default/secrets/greeting"))
            .header("authorization", s.auth())
            .json(&secret)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
    }
    revision_ready(&s, "sec-00001", "True");
    assert_eq!(replica_answer(&s, "sec").trim(), "Hello from-a-secret!");
}

#[test]
fn a_volume_mount_on_the_process_runtime_fails_naming_the_field() {
    let s = Server::start();
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: vol\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{bin:?}]\n        volumeMounts:\n        - {{name: cfg, mountPath: /etc/config}}\n      volumes:\n      - name: cfg\n        configMap: {{name: cfg}}\n",
        bin = sample_bin("hello").display().to_string(),
    ));
    let (_, reason, message) = revision_ready(&s, "vol-00001", "False");
    assert_eq!(reason, "VolumeMountUnsupported");
    assert!(
        message.starts_with("spec.containers[0].volumeMounts[0].mountPath \"/etc/config\": "),
        "{message}"
    );
}
