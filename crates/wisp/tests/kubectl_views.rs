//! The real `kubectl` reading what a real `wisp serve` runs (issue #24): Pods (get, watch,
//! describe, logs, delete), Deployments (get, scale refused), Services (the ingress
//! gateway's, each route's placeholder, each revision's), ServerlessServices, KIngresses
//! and Events (`describe ksvc`, `get events`), each compared with what kubectl prints on a
//! cluster; writes to the read-only views refused as kube-apiserver refuses them.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{
    Server,
    kubectl::{Kubectl, kubectl_installed, words},
    sample_bin, wait_for,
};

/// Scale to zero within seconds of the last request.
const CONFIG: &str = "config-autoscaler:\n  stable-window: 6s\n  scale-to-zero-grace-period: 2s\n  allow-zero-initial-scale: \"true\"\n";

fn server_with_config(dir: &std::path::Path) -> Server {
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    Server::start_with(&["--config", cfg.to_str().unwrap()])
}

/// A Service running `command` (a shell line) with `annotations` on its template.
fn service(name: &str, command: &str, annotations: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    metadata:\n      annotations:\n        {annotations}\n    spec:\n      containers:\n      - command: [sh, -c, {command:?}]\n"
    )
}

fn get(s: &Server, host: &str) -> Option<String> {
    let r = s
        .http_timeout(Duration::from_secs(30))
        .get(format!("http://{}/", s.http_addr))
        .header("host", host)
        .send()
        .ok()?;
    r.status()
        .is_success()
        .then(|| r.text().unwrap_or_default())
}

/// The names of the pods of a revision, as kubectl lists them.
fn pods(k: &Kubectl, revision: &str) -> Vec<String> {
    k.ok(&[
        "get",
        "pods",
        "-l",
        &format!("serving.knative.dev/revision={revision}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])
    .split_whitespace()
    .map(String::from)
    .collect()
}

/// A server (with `CONFIG`), kubectl pointed at it, and the `hello` sample's path; None
/// (the test then passes, saying why) without kubectl.
fn setup() -> Option<(tempfile::TempDir, Server, Kubectl, String)> {
    if !kubectl_installed() {
        eprintln!("kubectl not on PATH: skipping");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = server_with_config(dir.path());
    let k = Kubectl::new(dir.path(), &s);
    let hello = sample_bin("hello").display().to_string();
    Some((dir, s, k, hello))
}

/// A long-running kubectl (`get -w`, `logs -f`) and its output lines, as they come.
fn stream(k: &Kubectl, args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new("kubectl")
        .args(args)
        .arg("--cache-dir")
        .arg(&k.cache)
        .env("KUBECONFIG", &k.kubeconfig)
        .env("HOME", k.cache.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn kubectl_reads_what_runs() {
    let Some((dir, s, k, hello)) = setup() else {
        return;
    };
    // One replica always (min-scale), so nothing scales away while we look.
    s.apply(&service(
        "hello",
        // Both lines on stderr (hello prints "listening on" there): one pipe keeps their
        // order, which two streams read apart do not.
        &format!("echo starting >&2; exec {hello}"),
        "autoscaling.knative.dev/min-scale: \"1\"",
    ));
    wait_for("hello Ready", Duration::from_secs(30), || {
        s.ready("services", "hello").filter(|r| r.0 == "True")
    });
    assert_eq!(
        get(&s, "hello.default.example.com").unwrap(),
        "Hello World!\n"
    );

    // Pods: kube's printer columns, Knative's labels, named as a ReplicaSet names its pods.
    let rows = words(&k.ok(&["get", "pods"]));
    assert_eq!(rows[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let pod = rows[1][0].clone();
    assert!(pod.starts_with("hello-00001-deployment-"), "{pod}");
    assert_eq!(rows[1][1..4], ["1/1", "Running", "0"]);
    let wide = words(&k.ok(&["get", "pods", "-o", "wide"]));
    assert_eq!(
        wide[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ]
    );
    assert_eq!(
        wide[1][5], "<none>",
        "a process replica has no IP of its own"
    );
    for label in [
        "serving.knative.dev/service=hello",
        "serving.knative.dev/configuration=hello",
        "serving.knative.dev/configurationGeneration=1",
        "serving.knative.dev/revision=hello-00001",
        "app=hello-00001",
    ] {
        assert_eq!(
            k.ok(&["get", "pods", "-l", label, "-o", "name"]).trim(),
            format!("pod/{pod}"),
            "{label}"
        );
    }
    assert_eq!(
        k.ok(&[
            "get",
            "pods",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name"
        ])
        .trim(),
        format!("pod/{pod}")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "pods",
            "--field-selector",
            "status.phase=Pending",
            "-o",
            "name"
        ]),
        ""
    );
    let owner = k.ok(&[
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
    ]);
    assert!(
        owner.starts_with("ReplicaSet/hello-00001-deployment-"),
        "{owner}"
    );
    let describe = k.ok(&["describe", "pod", &pod]);
    for want in [
        "Status:         Running",
        "Controlled By:  ReplicaSet/hello-00001-deployment-",
        "user-container:",
        "State:          Running",
        "Ready:          True",
        "Restart Count:  0",
        "K_REVISION:       hello-00001",
        "Started  ",
        "Started container user-container",
    ] {
        assert!(
            describe.contains(want),
            "{want:?} missing from:\n{describe}"
        );
    }

    // Logs: a container's output, its tail, with timestamps; by label selector.
    let logs = k.ok(&["logs", &pod]);
    assert!(
        logs.starts_with("starting\nlistening on http://127.0.0.1:"),
        "{logs}"
    );
    assert_eq!(
        k.ok(&["logs", &pod, "-c", "user-container", "--tail", "1"])
            .lines()
            .count(),
        1
    );
    let stamped = k.ok(&["logs", &pod, "--timestamps", "--since", "5m"]);
    let first = stamped.lines().next().unwrap();
    let (stamp, line) = first.split_once(' ').unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
        "{first}"
    );
    assert_eq!(line, "starting");
    assert!(
        k.ok(&["logs", "-l", "serving.knative.dev/service=hello"])
            .contains("starting")
    );
    let (ok, _, err) = k.run(&["logs", &pod, "--previous"]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "previous terminated container \"user-container\" in pod \"{pod}\" not found"
        )),
        "{err}"
    );
    let (ok, _, err) = k.run(&["logs", &pod, "-c", "queue-proxy"]);
    assert!(!ok);
    assert!(
        err.contains(&format!("container queue-proxy is not valid for pod {pod}")),
        "{err}"
    );

    // Deployments: one per revision, READY as the replicas are.
    let d = words(&k.ok(&[
        "get",
        "deploy",
        "-l",
        "serving.knative.dev/configuration=hello",
    ]));
    assert_eq!(d[0], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(d[1][..4], ["hello-00001-deployment", "1/1", "1", "1"]);
    let (ok, _, err) = k.run(&[
        "scale",
        "deploy",
        "hello-00001-deployment",
        "--replicas",
        "3",
    ]);
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): deployments.apps \"hello-00001-deployment\" is forbidden: the replica count of revision \"hello-00001\" is the autoscaler's: set the autoscaling.knative.dev/min-scale and autoscaling.knative.dev/max-scale annotations"),
        "{err}"
    );

    // Services: the gateway's (where to send requests), the route's, the revision's.
    let svc = words(&k.ok(&["get", "svc", "-n", "kourier-system"]));
    assert_eq!(
        svc[0],
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    let http_port = s.http_addr.rsplit(':').next().unwrap();
    let local_port = s.local_addr.rsplit(':').next().unwrap();
    assert_eq!(
        svc[1][..5],
        [
            "kourier",
            "LoadBalancer",
            "<none>",
            "127.0.0.1",
            &format!("80:{http_port}/TCP")
        ]
    );
    assert_eq!(
        svc[2][..5],
        [
            "kourier-internal",
            "NodePort",
            "<none>",
            "<none>",
            &format!("80:{local_port}/TCP")
        ]
    );
    let svc = words(&k.ok(&["get", "svc"]));
    let names: Vec<&str> = svc[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["hello", "hello-00001", "hello-00001-private"]);
    assert_eq!(
        svc[1][1..4],
        [
            "ExternalName",
            "<none>",
            "kourier-internal.kourier-system.svc.cluster.local"
        ]
    );
    assert_eq!(svc[3][1..5], ["ClusterIP", "<none>", "<none>", "80/TCP"]);
    assert_eq!(
        k.ok(&[
            "get",
            "svc",
            "-l",
            "serving.knative.dev/configuration=hello",
            "-o",
            "name"
        ]),
        "service/hello-00001\nservice/hello-00001-private\n"
    );

    // Knative's networking objects.
    let sks = words(&k.ok(&["get", "sks"]));
    assert_eq!(
        sks[0],
        [
            "NAME",
            "MODE",
            "ACTIVATORS",
            "SERVICENAME",
            "PRIVATESERVICENAME",
            "READY",
            "REASON"
        ]
    );
    assert_eq!(sks[1][0], "hello-00001");
    assert!(sks[1][1] == "Proxy" || sks[1][1] == "Serve", "{sks:?}");
    assert_eq!(sks[1][3..6], ["hello-00001", "hello-00001-private", "True"]);
    let king = words(&k.ok(&["get", "kingress"]));
    assert_eq!(
        king,
        [vec!["NAME", "READY", "REASON"], vec!["hello", "True"]]
    );
    let hosts = k.ok(&[
        "get",
        "kingress",
        "hello",
        "-o",
        "jsonpath={.spec.rules[*].hosts[*]}",
    ]);
    assert!(
        hosts.split(' ').any(|h| h == "hello.default.example.com"),
        "{hosts}"
    );
    assert!(
        hosts
            .split(' ')
            .any(|h| h == "hello.default.svc.cluster.local"),
        "{hosts}"
    );

    // Events: `describe ksvc` ends with them; `get events` lists them all.
    let describe = k.ok(&["describe", "ksvc", "hello"]);
    let events = &describe[describe.rfind("Events:").expect("an Events section")..];
    assert!(events.contains("Normal  Created"), "{events}");
    assert!(
        events.contains("service-controller  Created Configuration \"hello\""),
        "{events}"
    );
    assert!(events.contains("Created Route \"hello\""), "{events}");
    let ev = words(&k.ok(&["get", "events"]));
    assert_eq!(
        ev[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    let all = k.ok(&["get", "events"]);
    for want in [
        "configuration/hello",
        "route/hello",
        "deployment/hello-00001-deployment",
        "ScalingReplicaSet",
        &format!("pod/{pod}"),
    ] {
        assert!(all.contains(want), "{want} missing from:\n{all}");
    }
    let v1 = k.ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-o",
        "jsonpath={.items[0].regarding.kind}",
    ]);
    assert!(!v1.is_empty());

    // Read-only: writes are refused as kube refuses a verb a resource does not serve.
    for args in [
        vec!["delete", "deploy", "hello-00001-deployment"],
        vec!["delete", "svc", "hello-00001"],
        vec!["delete", "sks", "hello-00001"],
        vec!["label", "pod", &pod, "x=y"],
        vec!["annotate", "kingress", "hello", "x=y"],
    ] {
        let (ok, _, err) = k.run(&args);
        assert!(!ok, "{args:?}");
        assert!(
            err.contains("(MethodNotAllowed): the server does not allow this method on the requested resource"),
            "{args:?}: {err}"
        );
    }
    let pod_yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: mine\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
    let yaml = dir.path().join("pod.yaml");
    std::fs::write(&yaml, pod_yaml).unwrap();
    // (kubectl validates a kind whose OpenAPI lists no create on the client, with the
    // protobuf OpenAPI wisp does not serve: docs/differences.md.)
    let (ok, _, err) = k.run(&["create", "--validate=false", "-f", yaml.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("MethodNotAllowed"), "{err}");

    // Deleting a pod stops that replica; the revision replaces it, as a Deployment would.
    k.ok(&["delete", "pod", &pod]);
    let replacement = wait_for("a replacement pod", Duration::from_secs(30), || {
        let now = pods(&k, "hello-00001");
        (now.len() == 1 && now[0] != pod).then(|| now[0].clone())
    });
    assert!(replacement.starts_with("hello-00001-deployment-"));
    let (ok, _, err) = k.run(&["get", "pod", &pod]);
    assert!(!ok);
    assert!(err.contains(&format!("pods \"{pod}\" not found")), "{err}");
    let (ok, _, err) = k.run(&["delete", "pod", "nope"]);
    assert!(!ok);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
}

/// `kubectl get pods -w` while a revision scales from zero to one and back.
#[test]
fn kubectl_watches_a_revision_scale_from_zero_and_back() {
    let Some((_dir, s, k, hello)) = setup() else {
        return;
    };
    s.apply(&service(
        "zero",
        &format!("exec {hello}"),
        "autoscaling.knative.dev/initial-scale: \"0\"",
    ));
    wait_for("zero's route Ready", Duration::from_secs(30), || {
        s.ready("routes", "zero").filter(|r| r.0 == "True")
    });
    assert!(pods(&k, "zero-00001").is_empty(), "initial scale 0: no pod");
    let deploy = words(&k.ok(&["get", "deploy", "zero-00001-deployment"]));
    assert_eq!(deploy[1][1], "0/0", "idle revisions read 0/0");

    let (mut watch, rx) = stream(&k, &["get", "pods", "-w", "--request-timeout", "0"]);
    // Scale from zero: a request wakes the revision.
    assert_eq!(
        get(&s, "zero.default.example.com").unwrap(),
        "Hello World!\n"
    );
    let mut lines = Vec::new();
    let next = |what: &str, lines: &mut Vec<String>| -> Vec<String> {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no watch line for {what}; so far: {lines:#?}"));
        lines.push(line.clone());
        line.split_whitespace().map(String::from).collect()
    };
    // kubectl prints the header, then one row per change of the pod.
    let mut row = next("the header", &mut lines);
    if row[0] == "NAME" {
        row = next("the new pod", &mut lines);
    }
    assert!(row[0].starts_with("zero-00001-deployment-"), "{lines:#?}");
    let pod = row[0].clone();
    while row[2] != "Running" || row[1] != "1/1" {
        row = next("the pod to run", &mut lines);
        assert_eq!(row[0], pod, "{lines:#?}");
    }
    // And back to zero once idle: Terminating, then gone.
    while row[2] != "Terminating" {
        row = next("the pod to terminate", &mut lines);
    }
    wait_for("the pod to be gone", Duration::from_secs(30), || {
        pods(&k, "zero-00001").is_empty().then_some(())
    });
    let _ = watch.kill();
    let _ = watch.wait();
    let deploy = words(&k.ok(&["get", "deploy", "zero-00001-deployment"]));
    assert_eq!(deploy[1][1], "0/0");
    let sks = words(&k.ok(&["get", "sks", "zero-00001"]));
    assert_eq!(
        sks[1][1], "Proxy",
        "the activator is in the path at zero: {sks:?}"
    );
    assert_eq!(sks[1][5..], ["False", "NoHealthyBackends"]);
}

/// `kubectl logs -f` while the app writes.
#[test]
fn kubectl_follows_logs() {
    let Some((_dir, s, k, hello)) = setup() else {
        return;
    };
    s.apply(&service(
        "ticker",
        &format!("{hello} & i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"),
        "autoscaling.knative.dev/min-scale: \"1\"",
    ));
    wait_for("ticker Ready", Duration::from_secs(30), || {
        s.ready("services", "ticker").filter(|r| r.0 == "True")
    });
    let pod = pods(&k, "ticker-00001").remove(0);
    let (mut follow, rx) = stream(&k, &["logs", "-f", "--tail", "1", &pod]);
    // The ticks keep coming, in order, each once.
    let mut ticks = Vec::new();
    while ticks.len() < 8 {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a followed line");
        if let Some(n) = line.strip_prefix("tick ") {
            ticks.push(n.parse::<u64>().unwrap());
        }
    }
    assert!(ticks.windows(2).all(|w| w[1] == w[0] + 1), "{ticks:?}");
    // Deleting the pod ends the follow, as the container's end ends kubectl's.
    k.ok(&["delete", "pod", &pod, "--wait=false"]);
    let ended = wait_for("the follow to end", Duration::from_secs(30), || {
        follow.try_wait().unwrap()
    });
    assert!(ended.success());
}

/// Why container tests cannot run here, if they cannot (they need root and runc).
fn containers_unusable() -> Option<&'static str> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let runc = Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !root {
        Some("not root")
    } else if !runc {
        Some("no runc")
    } else {
        None
    }
}

/// `kubectl describe pod` of a replica its memory limit killed: the kubelet's
/// `OOMKilled`, exit code 137, a restart.
#[test]
fn kubectl_describes_an_oom_killed_replica() {
    if !kubectl_installed() {
        eprintln!("kubectl not on PATH: skipping");
        return;
    }
    if let Some(why) = containers_unusable() {
        eprintln!("SKIPPED: container tests need root and runc: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The autoscale sample as an image (`?bloat=MB` allocates), loaded into the server.
    let archive = dir.path().join("autoscale.tar");
    let out = Command::new(common::wisp_bin())
        .args(["image", "pack", "--data-dir"])
        .arg(dir.path().join("scratch"))
        .arg("--binary")
        .arg(sample_bin("autoscale"))
        .args([
            "--tag",
            "example.com/autoscale:1",
            "--env",
            "HOST=0.0.0.0",
            "--output",
        ])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = server_with_config(dir.path());
    let out = s
        .cli()
        .args(["image", "load", "-i"])
        .arg(&archive)
        .env("WISP_DATA_DIR", s.data_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let k = Kubectl::new(dir.path(), &s);
    s.apply(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bloat\nspec:\n  \
         template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/min-scale: \"1\"\n    \
         spec:\n      containers:\n      - image: example.com/autoscale:1\n        resources:\n          \
         limits:\n            memory: 48Mi\n",
    );
    wait_for("bloat Ready", Duration::from_secs(60), || {
        s.ready("services", "bloat").filter(|r| r.0 == "True")
    });
    let pod = pods(&k, "bloat-00001").remove(0);
    let ip = k.ok(&["get", "pod", &pod, "-o", "jsonpath={.status.podIP}"]);
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "a container replica has its own IP: {ip:?}"
    );
    // Far over the limit: the kernel kills it mid-request.
    let _ = s
        .http_timeout(Duration::from_secs(30))
        .get(format!("http://{}/?bloat=256", s.http_addr))
        .header("host", "bloat.default.example.com")
        .send();
    // Killed, then restarted after its back-off: the last state says why.
    let describe = wait_for("the OOM kill in describe", Duration::from_secs(60), || {
        let d = k.ok(&["describe", "pod", &pod]);
        (d.contains("Reason:       OOMKilled") && d.contains("Restart Count:  1")).then_some(d)
    });
    for want in [
        "Last State:     Terminated",
        "Reason:       OOMKilled",
        "Exit Code:    137",
        "Restart Count:  1",
        "Limits:\n      memory:  48Mi",
        "Image:          ",
        "Image ID:       ",
    ] {
        assert!(
            describe.contains(want),
            "{want:?} missing from:\n{describe}"
        );
    }
    let status = words(&k.ok(&["get", "pod", &pod]));
    assert!(
        ["Running", "CrashLoopBackOff", "OOMKilled"].contains(&status[1][2].as_str()),
        "{status:?}"
    );
    assert!(status[1][3].starts_with('1'), "{status:?}");
    // The kubelet's events of it: a back-off, or the restart.
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={pod}"),
    ]);
    assert!(events.contains("Started"), "{events}");
}
