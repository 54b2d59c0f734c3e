//! Issue #17, multi-container revisions: a revision's init containers (behind
//! `kubernetes.podspec-init-containers`) run to completion, in order, before its app, and
//! one that fails shows on the revision as Knative shows it; sidecars run with the app and
//! stop with it. On the process runtime, so that it needs neither root nor images.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{Server, pid_alive, sample_bin, wait_for};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(20);

fn server(tmp: &tempfile::TempDir) -> Server {
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "config-features:\n  kubernetes.podspec-init-containers: enabled\n",
    )
    .unwrap();
    Server::start_with(&["--config", &cfg.display().to_string()])
}

/// The revision's pods as the API shows them.
fn pods(s: &Server, revision: &str) -> Vec<Value> {
    s.get_json(&format!(
        "/api/v1/namespaces/default/pods?labelSelector=serving.knative.dev%2Frevision%3D{revision}"
    ))
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

#[test]
fn init_containers_run_before_the_app_and_a_failing_one_fails_the_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(&tmp);
    let dir = tmp.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.display().to_string();
    let hello = sample_bin("hello").display().to_string();
    // The app's TARGET is what the init containers wrote, in order: it answers only if they
    // ran first. `$(DIR)` is Kubernetes' expansion of the container's env.
    let yaml = format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: seeded\nspec:\n  template:\n    spec:\n      initContainers:\n      - name: first\n        command: [sh, -c, 'printf seeded > $(DIR)/target; echo first init done']\n        env: [{{name: DIR, value: {dir:?}}}]\n      - name: second\n        command: [sh, -c, 'printf +two >> $(DIR)/target']\n        env: [{{name: DIR, value: {dir:?}}}]\n      containers:\n      - command: [sh, -c, 'TARGET=$(cat $DIR/target) exec {hello}']\n        env: [{{name: DIR, value: {dir:?}}}]\n---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: unseeded\nspec:\n  template:\n    metadata:\n      annotations:\n        serving.knative.dev/progress-deadline: 3s\n    spec:\n      initContainers:\n      - name: migrate\n        command: [sh, -c, 'echo no database >&2; exit 7']\n      containers:\n      - command: [{hello:?}]\n"
    );
    s.apply(&yaml);

    let deadline = std::time::Instant::now() + TIMEOUT;
    while s
        .ready("services", "seeded")
        .is_none_or(|(st, _, _)| st != "True")
    {
        if std::time::Instant::now() > deadline {
            let rev = s
                .get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/seeded-00001");
            let out = s.cli().args(["logs", "seeded"]).output().unwrap();
            panic!(
                "seeded not Ready: {:?}\nrevision: {rev:#?}\npods: {:#?}\nlogs: {}{}",
                s.ready("services", "seeded"),
                pods(&s, "seeded-00001"),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its answer, through the replica's address (its `listening on` log line).
    let logs = wait_for("the app's listening line", TIMEOUT, || {
        let out = s.cli().args(["logs", "seeded"]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.contains("listening on http://").then_some(text)
    });
    // The init containers' output is in the replica's logs.
    assert!(logs.contains("first init done"), "{logs}");
    let addr = logs
        .lines()
        .find_map(|l| l.split("listening on http://").nth(1))
        .unwrap()
        .trim()
        .to_string();
    let answer = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://{addr}/"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(answer.trim(), "Hello seeded+two!");
    let pod = &pods(&s, "seeded-00001")[0];
    let inits = pod["status"]["initContainerStatuses"].as_array().unwrap();
    let completed: Vec<&Value> = inits
        .iter()
        .map(|c| &c["state"]["terminated"]["reason"])
        .collect();
    assert_eq!(completed, ["Completed", "Completed"], "{pod:#}");

    // The failing one: the app never starts; past the progress deadline the revision
    // shows what Knative shows (the serving container waits with `PodInitializing`).
    let (_, reason, message) = wait_for("unseeded to fail", TIMEOUT, || {
        s.ready("revisions", "unseeded-00001")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!((reason.as_str(), message.as_str()), ("PodInitializing", ""));
    // The pod says which init container failed, how, and that it is retried.
    let init = wait_for("the init container's failure on the pod", TIMEOUT, || {
        let pod = pods(&s, "unseeded-00001").into_iter().next()?;
        let c = pod["status"]["initContainerStatuses"][0].clone();
        (c["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(c)
    });
    assert_eq!(init["name"], "migrate");
    let last = &init["lastState"]["terminated"];
    assert_eq!(
        (&last["exitCode"], &last["reason"], &last["message"]),
        (
            &Value::from(7),
            &Value::from("Error"),
            &Value::from("no database")
        )
    );
    let pod = &pods(&s, "unseeded-00001")[0];
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    // Its output, by the init container's name (kube-apiserver accepts any container of
    // the pod); the replica's lines are not told apart by container.
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    let log = wait_for("the init container's log", TIMEOUT, || {
        let r = s
            .http()
            .get(s.url(&format!(
                "/api/v1/namespaces/default/pods/{pod_name}/log?container=migrate"
            )))
            .header("authorization", s.auth())
            .send()
            .ok()?;
        let text = r.text().ok()?;
        text.contains("no database").then_some(text)
    });
    assert!(!log.is_empty());
    // kubectl's STATUS column.
    let table = String::from_utf8(
        s.cli()
            .args([
                "get",
                "pods",
                "-l",
                "serving.knative.dev/revision=unseeded-00001",
            ])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(table.contains("Init:CrashLoopBackOff"), "{table}");
}

#[test]
fn a_sidecar_process_runs_with_its_replica_and_stops_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start();
    let pid_file = tmp.path().join("sidecar.pid");
    let hello = sample_bin("hello").display().to_string();
    // `$$$$` is the shell's `$$` once Kubernetes' `$$` escape is undone.
    let yaml = format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: paired\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{hello:?}]\n        ports: [{{containerPort: 8080}}]\n      - name: logger\n        command: [sh, -c, 'echo $$$$ > {pid}; echo sidecar of $K_REVISION; exec sleep 1000']\n",
        pid = pid_file.display()
    );
    s.apply(&yaml);
    wait_for("paired Ready", TIMEOUT, || {
        s.ready("services", "paired")
            .filter(|(st, _, _)| st == "True")
    });
    let pid: u32 = wait_for("the sidecar's pid", TIMEOUT, || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    assert!(pid_alive(pid));
    wait_for("the sidecar's line in the logs", TIMEOUT, || {
        let out = s.cli().args(["logs", "paired"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains("sidecar of paired-00001")
            .then_some(())
    });
    let out = s.cli().args(["delete", "ksvc", "paired"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the sidecar to stop with its replica", TIMEOUT, || {
        (!pid_alive(pid)).then_some(())
    });
}
