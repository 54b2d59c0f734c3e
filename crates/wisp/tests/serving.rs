//! Issue "Revisions run": a Service applied to a real `wisp serve` becomes real processes
//! with truthful status, end to end.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{process::Command, time::Duration};

use common::{Server, pid_alive, sample_bin, wait_for};
use serde_json::Value;

const READY_TIMEOUT: Duration = Duration::from_secs(20);

fn hello_yaml(name: &str, target: &str, extra_template_annotations: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    metadata:\n      annotations:\n        x: \"y\"\n{extra_template_annotations}    spec:\n      containers:\n      - command: [{bin:?}]\n        env:\n        - name: TARGET\n          value: {target}\n",
        bin = sample_bin("hello").display().to_string(),
    )
}

fn wait_ready(s: &Server, plural: &str, name: &str) {
    wait_for(&format!("{plural}/{name} Ready"), READY_TIMEOUT, || {
        s.ready(plural, name).filter(|(st, _, _)| st == "True")
    });
}

/// The port a hello replica listens on, read from its log line `listening on http://…`.
fn replica_addr(s: &Server, target: &str) -> String {
    wait_for("a replica's listening line", READY_TIMEOUT, || {
        let out = s.cli().args(["logs", target]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .rev()
            .find_map(|l| l.split("listening on http://").nth(1))
            .map(|a| a.trim().to_string())
    })
}

fn http_get(addr: &str) -> String {
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

fn cli(s: &Server, args: &[&str]) -> String {
    let out = s.cli().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "wisp {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn a_service_runs_and_follows_template_changes() {
    let s = Server::start();
    s.apply(&hello_yaml("hello", "World", ""));
    wait_ready(&s, "services", "hello");

    let table = cli(&s, &["get", "ksvc"]);
    let row = table.lines().nth(1).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        [
            "hello",
            "http://hello.default.example.com",
            "hello-00001",
            "hello-00001",
            "True"
        ],
        "{table}"
    );
    let revs = cli(&s, &["get", "rev"]);
    assert!(revs.starts_with("NAME          CONFIG NAME   GENERATION   READY   REASON   ACTUAL REPLICAS   DESIRED REPLICAS   AGE"), "{revs}");
    let cells: Vec<&str> = revs.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &cells[..6],
        ["hello-00001", "hello", "1", "True", "1", "1"],
        "{revs}"
    );

    // The replica is a real process on its own port, with the user's env.
    let addr = replica_addr(&s, "hello");
    assert_eq!(http_get(&addr), "Hello World!\n");

    // A template change stamps hello-00002; latestRevision traffic follows it.
    s.apply(&hello_yaml("hello", "Wisp", ""));
    wait_for("hello-00002 to be latest ready", READY_TIMEOUT, || {
        let svc = s.get_json("/apis/serving.knative.dev/v1/namespaces/default/services/hello")?;
        (svc["status"]["latestReadyRevisionName"] == "hello-00002"
            && svc["status"]["traffic"][0]["revisionName"] == "hello-00002")
            .then_some(())
    });
    let rev1 = s
        .get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00001")
        .unwrap();
    let rev2 = s
        .get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00002")
        .unwrap();
    // Revisions are immutable snapshots of their template.
    assert_eq!(rev1["spec"]["containers"][0]["env"][0]["value"], "World");
    assert_eq!(rev2["spec"]["containers"][0]["env"][0]["value"], "Wisp");
    assert_eq!(
        rev2["metadata"]["labels"]["serving.knative.dev/configurationGeneration"],
        "2"
    );
    // The old revision is no longer routed: reserve, and scaled to zero.
    wait_for("hello-00001 in reserve at zero", READY_TIMEOUT, || {
        let r =
            s.get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00001")?;
        (r["metadata"]["labels"]["serving.knative.dev/routingState"] == "reserve"
            && r["status"]["actualReplicas"] == 0)
            .then_some(())
    });
    let rev2 = s
        .get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00002")
        .unwrap();
    assert_eq!(
        rev2["metadata"]["labels"]["serving.knative.dev/routingState"],
        "active"
    );
    assert_eq!(
        rev2["metadata"]["annotations"]["serving.knative.dev/routes"],
        "hello"
    );
}

#[test]
fn pinned_traffic_stays_and_tags_get_urls() {
    let s = Server::start();
    s.apply(&hello_yaml("split", "One", ""));
    wait_ready(&s, "services", "split");
    let pinned = format!(
        "{}  traffic:\n  - revisionName: split-00001\n    percent: 50\n    tag: old\n  - latestRevision: true\n    percent: 50\n",
        hello_yaml("split", "Two", "")
    );
    s.apply(&pinned);
    let traffic = wait_for("traffic split across two revisions", READY_TIMEOUT, || {
        let r = s.get_json("/apis/serving.knative.dev/v1/namespaces/default/routes/split")?;
        let t = r["status"]["traffic"].as_array()?.clone();
        (t.len() == 2 && t[1]["revisionName"] == "split-00002").then_some(t)
    });
    assert_eq!(traffic[0]["revisionName"], "split-00001");
    assert_eq!(traffic[0]["percent"], 50);
    assert_eq!(traffic[0]["url"], "http://old-split.default.example.com");
    assert_eq!(traffic[1]["percent"], 50);
}

#[test]
fn cluster_local_services_get_cluster_local_urls() {
    let s = Server::start();
    let yaml = hello_yaml("internal", "x", "").replace(
        "metadata:\n  name: internal\n",
        "metadata:\n  name: internal\n  labels:\n    networking.knative.dev/visibility: cluster-local\n",
    );
    s.apply(&yaml);
    wait_ready(&s, "services", "internal");
    let svc = s
        .get_json("/apis/serving.knative.dev/v1/namespaces/default/services/internal")
        .unwrap();
    assert_eq!(
        svc["status"]["url"],
        "http://internal.default.svc.cluster.local"
    );
}

#[test]
fn failing_apps_report_why() {
    let s = Server::start();
    let yaml = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: crash\nspec:\n  template:\n    spec:\n      containers:\n      - command: [sh, -c, 'echo starting up; echo cannot open db >&2; exit 3']\n---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: stuck\nspec:\n  template:\n    metadata:\n      annotations:\n        serving.knative.dev/progress-deadline: 2s\n    spec:\n      containers:\n      - command: [sleep, '1000']\n---\napiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: image\nspec:\n  template:\n    spec:\n      containers:\n      - image: 127.0.0.1:1/knative/helloworld-go:latest\n";
    s.apply(yaml);

    let (_, reason, message) = wait_for("crash to fail", READY_TIMEOUT, || {
        s.ready("revisions", "crash-00001")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!(reason, "ExitCode3");
    assert!(message.starts_with("Container failed with: "), "{message}");
    assert!(message.contains("cannot open db"), "{message}");
    // It is restarted with back-off, like CrashLoopBackOff.
    let logs = wait_for("a restart", READY_TIMEOUT, || {
        let out = cli(&s, &["logs", "crash"]);
        (out.matches("starting up").count() >= 2).then_some(out)
    });
    assert!(logs.contains("cannot open db"));
    // The service says which revision failed and why.
    let (st, reason, message) = wait_for("crash service to fail", READY_TIMEOUT, || {
        s.ready("services", "crash")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!((st.as_str(), reason.as_str()), ("False", "RevisionFailed"));
    assert!(
        message.starts_with("Revision \"crash-00001\" failed with message: Container failed with:"),
        "{message}"
    );

    let (_, reason, message) = wait_for("stuck to pass its deadline", READY_TIMEOUT, || {
        s.ready("revisions", "stuck-00001")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!(reason, "ProgressDeadlineExceeded");
    assert_eq!(message, "Initial scale was never achieved");

    let (_, reason, message) = wait_for("image to fail", READY_TIMEOUT, || {
        s.ready("revisions", "image-00001")
            .filter(|(st, _, _)| st == "False")
    });
    // The image's digest cannot be resolved (a registry on a closed loopback port): Knative's
    // reason and message, with the registry's error.
    assert_eq!(reason, "ContainerMissing");
    assert!(
        message.starts_with(
            "Unable to fetch image \"127.0.0.1:1/knative/helloworld-go:latest\": failed to \
             resolve image to digest: "
        ),
        "{message}"
    );
}

/// Reads the pid a `sh -c 'echo pid=$$; exec …'` replica printed.
fn printed_pids(s: &Server, target: &str, want: usize) -> Vec<u32> {
    wait_for("replicas to print their pids", READY_TIMEOUT, || {
        let out = s.cli().args(["logs", target]).output().ok()?;
        let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.rsplit("pid=").next()?.trim().parse().ok())
            .collect();
        (pids.len() >= want).then_some(pids)
    })
}

fn sleeper_yaml(name: &str, replicas: u32) -> String {
    // `$$$$` is Kubernetes' escape for a literal `$$` (the shell's pid) in args.
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/initial-scale: '{replicas}'\n    spec:\n      timeoutSeconds: 5\n      containers:\n      - command: [sh, -c, 'echo pid=$$$$; exec {python} -m http.server --bind 127.0.0.1 $PORT']\n",
        python = "python3",
    )
}

#[test]
fn deleting_a_service_stops_its_processes_and_logs_are_prefixed_by_replica() {
    let s = Server::start();
    s.apply(&sleeper_yaml("sleeper", 2));
    wait_ready(&s, "services", "sleeper");
    let pids = printed_pids(&s, "sleeper", 2);
    assert!(pids.iter().all(|p| pid_alive(*p)));
    let logs = cli(&s, &["logs", "sleeper"]);
    // Replicas are named as the revision's Deployment would name its pods.
    let prefixed: std::collections::HashSet<&str> = logs
        .lines()
        .filter(|l| l.contains("] pid="))
        .filter_map(|l| l.strip_prefix("[sleeper-00001-deployment-"))
        .filter_map(|l| l.split(']').next())
        .collect();
    assert_eq!(prefixed.len(), 2, "{logs}");
    let tail = cli(&s, &["logs", "rev/sleeper-00001", "--tail", "1"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");

    cli(&s, &["delete", "ksvc", "sleeper"]);
    wait_for("replicas to stop", READY_TIMEOUT, || {
        pids.iter().all(|p| !pid_alive(*p)).then_some(())
    });
    assert!(
        s.get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/sleeper-00001")
            .is_none()
    );
}

#[test]
fn sigterm_stops_every_replica_and_kill_9_leaves_no_orphans() {
    let mut s = Server::start();
    s.apply(&sleeper_yaml("keep", 1));
    wait_ready(&s, "services", "keep");
    let first = printed_pids(&s, "keep", 1);

    // kill -9 wisp: the replica outlives it, but the next start stops it and runs a new one.
    s.kill9_and_restart();
    wait_ready(&s, "services", "keep");
    wait_for(
        "the earlier run's replica to be stopped",
        READY_TIMEOUT,
        || (!pid_alive(first[0])).then_some(()),
    );
    let second = printed_pids(&s, "keep", 1);
    assert!(second.iter().all(|p| pid_alive(*p)));

    // SIGTERM: graceful stop of everything, exit 0.
    let status = s.terminate().expect("exit status");
    assert!(status.success(), "{status:?}");
    for p in second {
        assert!(!pid_alive(p), "replica {p} outlived wisp serve");
    }
}

#[test]
fn two_servers_cannot_share_a_data_dir() {
    let s = Server::start();
    let out = Command::new(common::wisp_bin())
        .args(["serve", "--api-addr", "127.0.0.1:0", "--data-dir"])
        .arg(&s.data_dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another wisp serve"),
        "{:?}",
        out
    );
    let _: Option<Value> = s.get_json("/healthz");
}
