//! Kubernetes client libraries against a real `wisp serve` over TLS: the Python
//! `kubernetes` client (CustomObjectsApi list and watch of services.serving.knative.dev,
//! `tests/clients/watch_services.py`), installed from PyPI into a venv this test makes.
//! Skipped with a note when python3, venv or PyPI are not available.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::Server;
use serde_json::Value;

/// Runs `cmd` to completion or kills it after `limit`: (exit success, stdout, stderr).
fn run_with_timeout(cmd: &mut Command, limit: Duration) -> (bool, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A venv with the `kubernetes` package, or why there is none.
fn python_kubernetes(dir: &Path) -> Result<PathBuf, String> {
    let venv = dir.join("venv");
    let (ok, _, err) = run_with_timeout(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        Duration::from_secs(60),
    );
    if !ok {
        return Err(format!("python3 -m venv failed: {err}"));
    }
    let (ok, _, err) = run_with_timeout(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "kubernetes",
        ]),
        Duration::from_secs(300),
    );
    if !ok {
        return Err(format!("pip install kubernetes failed: {err}"));
    }
    Ok(venv.join("bin/python"))
}

#[test]
fn python_kubernetes_client_lists_and_watches_services() {
    let dir = tempfile::tempdir().unwrap();
    let python = match python_kubernetes(dir.path()) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipping the Python client test: {why}");
            return;
        }
    };
    let s = Server::start();
    s.apply(
        "apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: before
spec:
  template:
    spec:
      containers:
      - image: example.com/hello
",
    );
    let token = s.auth().strip_prefix("Bearer ").unwrap().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/watch_services.py");
    let (ok, out, err) = run_with_timeout(
        Command::new(&python)
            .arg(&script)
            .arg(s.server_url())
            .arg(s.ca_path())
            .arg(&token)
            .arg("from-python"),
        Duration::from_secs(90),
    );
    assert!(ok, "the Python client failed: {err}\n{out}");
    let seen: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(seen["listed"], serde_json::json!(["before"]), "{seen}");
    let events = seen["events"].as_array().unwrap();
    assert_eq!(events[0]["type"], "ADDED", "{seen}");
    assert!(
        events[1..].iter().all(|e| e["type"] == "MODIFIED"),
        "{seen}"
    );
    // The last event carries the client's own update; resourceVersions only grow.
    assert_eq!(events.last().unwrap()["labels"]["from"], "python", "{seen}");
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| e["resourceVersion"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
}
