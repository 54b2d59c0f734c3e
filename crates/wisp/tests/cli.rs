//! The client commands (`apply`, `get`, `describe`, `delete`) run as the real binary against a
//! real `wisp serve`, and `get -w` against a scripted fake server for the reconnect paths.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use common::{Server, wisp_bin};
use serde_json::{Value, json};

/// Output of one command run.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_cmd(mut c: Command, stdin: Option<&str>) -> Out {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn wisp");
    {
        let mut w = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            w.write_all(text.as_bytes()).expect("write stdin");
        }
    }
    let out = child.wait_with_output().expect("wait wisp");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn wisp(s: &Server, args: &[&str]) -> Out {
    let mut c = s.cli();
    c.args(args);
    run_cmd(c, None)
}

fn wisp_stdin(s: &Server, args: &[&str], stdin: &str) -> Out {
    let mut c = s.cli();
    c.args(args);
    run_cmd(c, Some(stdin))
}

fn service_yaml(name: &str, target: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  template:
    spec:
      containers:
      - command: [\"/bin/hello\"]
        env:
        - name: TARGET
          value: {target}
"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write manifest");
    p.display().to_string()
}

fn get_json(s: &Server, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let out = wisp(s, &a);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("json output")
}

#[test]
fn apply_creates_then_reports_unchanged_and_configured() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "svc.yaml", &service_yaml("hello", "world"));

    let out = wisp(&s, &["apply", "-f", &f]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "service.serving.knative.dev/hello created\n"),
        "{}",
        out.stderr
    );
    let out = wisp(&s, &["apply", "-f", &f]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "service.serving.knative.dev/hello unchanged\n"),
        "{}",
        out.stderr
    );
    // A no-op apply must not bump the generation (that would stamp out a new Revision).
    assert_eq!(
        get_json(&s, &["ksvc", "hello"])["metadata"]["generation"],
        1
    );

    let f = write(dir.path(), "svc.yaml", &service_yaml("hello", "wisp"));
    let out = wisp(&s, &["apply", "-f", &f]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "service.serving.knative.dev/hello configured\n"),
        "{}",
        out.stderr
    );
    let svc = get_json(&s, &["ksvc", "hello"]);
    assert_eq!(svc["metadata"]["generation"], 2);
    assert_eq!(
        svc["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        "wisp"
    );
    // Fields the server defaulted on create survive the update.
    assert_eq!(svc["spec"]["template"]["spec"]["enableServiceLinks"], false);
    assert_eq!(
        svc["metadata"]["annotations"]["serving.knative.dev/creator"],
        "wisp-admin"
    );

    // Namespace from -n; the namespace must exist (kube's NamespaceLifecycle), and
    // `wisp apply` creates it like any object.
    let out = wisp(&s, &["apply", "-n", "other", "-f", &f]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("namespaces \"other\" not found"),
        "{}",
        out.stderr
    );
    s.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n");
    let out = wisp(&s, &["apply", "-n", "other", "-f", &f]);
    assert_eq!(
        out.stdout, "service.serving.knative.dev/hello created\n",
        "{}",
        out.stderr
    );
    assert_eq!(
        get_json(&s, &["ksvc", "hello", "-n", "other"])["metadata"]["namespace"],
        "other"
    );
}

#[test]
fn apply_reports_each_bad_document_and_continues() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "apiVersion: v1
kind: Foo
metadata:
  name: x
---
apiVersion: serving.knative.dev/v1
kind: Route
metadata:
  name: bad
spec:
  traffic:
  - configurationName: hello
    percent: 101
---
{}",
        service_yaml("good", "world")
    );
    let f = write(dir.path(), "all.yaml", &text);
    let out = wisp(&s, &["apply", "-f", &f]);
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout, "service.serving.knative.dev/good created\n");
    assert!(
        out.stderr.contains(&format!(
            "error: resource mapping not found for name: \"x\" namespace: \"\" from \"{f}\": no matches for kind \"Foo\" in version \"v1\""
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "Error from server (Invalid): error when creating \"{f}\": admission webhook \"validation.webhook.serving.knative.dev\" denied the request: validation failed:"
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("expected 0 <= 101 <= 100: spec.traffic[0].percent"),
        "{}",
        out.stderr
    );
}

#[test]
fn apply_reads_directories_json_lists_and_stdin() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.yaml", &service_yaml("b", "x"));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "a"},
         "spec": {"template": {"spec": {"containers": [{"command": ["/bin/hello"]}]}}}}
    ]});
    write(dir.path(), "a.json", &list.to_string());
    write(dir.path(), "ignored.txt", "not a manifest");
    let out = wisp(&s, &["apply", "-f", &dir.path().display().to_string()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "service.serving.knative.dev/a created\nservice.serving.knative.dev/b created\n"
    );

    let out = wisp_stdin(&s, &["apply", "-f", "-"], &service_yaml("c", "x"));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "service.serving.knative.dev/c created\n"),
        "{}",
        out.stderr
    );

    let out = wisp_stdin(&s, &["apply", "-f", "-"], "");
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("no objects passed to apply"),
        "{}",
        out.stderr
    );
}

#[test]
fn get_tables_names_and_formats() {
    let s = Server::start();
    let out = wisp(&s, &["get", "ksvc"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));
    assert_eq!(out.stderr, "No resources found in default namespace.\n");
    let out = wisp(&s, &["get", "ksvc", "-A"]);
    assert_eq!((out.code, out.stderr.as_str()), (0, "No resources found\n"));

    s.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n");
    for (name, ns) in [("hello", "default"), ("hi", "default"), ("away", "other")] {
        let out = wisp_stdin(
            &s,
            &["apply", "-n", ns, "-f", "-"],
            &service_yaml(name, "x"),
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
    }

    let out = wisp(&s, &["get", "services"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    // Column widths follow the cells (the controllers fill in URL, READY, … as they go).
    let header: Vec<&str> = lines[0]
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "URL",
            "LATESTCREATED",
            "LATESTREADY",
            "READY",
            "REASON",
            "AGE"
        ]
    );
    assert!(lines[1].starts_with("hello   "), "{}", out.stdout);
    assert!(lines[2].starts_with("hi      "), "{}", out.stdout);

    let out = wisp(&s, &["get", "ksvc", "-A", "--no-headers"]);
    let mut rows: Vec<String> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    rows.sort();
    assert_eq!(rows, ["default hello", "default hi", "other away"]);

    let out = wisp(&s, &["get", "ksvc", "hello", "hi", "-o", "name"]);
    assert_eq!(
        out.stdout,
        "service.serving.knative.dev/hello\nservice.serving.knative.dev/hi\n"
    );
    let out = wisp(&s, &["get", "kservice/hello", "-o", "name"]);
    assert_eq!(out.stdout, "service.serving.knative.dev/hello\n");

    let one = get_json(&s, &["ksvc", "hello"]);
    assert_eq!(
        (one["kind"].as_str(), one["metadata"]["name"].as_str()),
        (Some("Service"), Some("hello"))
    );
    let list = get_json(&s, &["ksvc"]);
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert_eq!(list["items"][0]["apiVersion"], "serving.knative.dev/v1");

    let out = wisp(&s, &["get", "ksvc", "hello", "-o", "yaml"]);
    assert!(
        out.stdout
            .starts_with("apiVersion: serving.knative.dev/v1\nkind: Service\n"),
        "{}",
        out.stdout
    );

    let out = wisp(&s, &["get", "ksvc", "-l", "app=hi", "-o", "name"]);
    assert_eq!(
        out.stdout, "service.serving.knative.dev/hi\n",
        "{}",
        out.stderr
    );

    let out = wisp(&s, &["get", "ksvc", "nope"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "Error from server (NotFound): services.serving.knative.dev \"nope\" not found\n"
    );

    let out = wisp(&s, &["get", "ksvc", "hello", "nope", "-o", "name"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (1, "service.serving.knative.dev/hello\n")
    );

    for kind in [
        "rt",
        "routes",
        "cfg",
        "config",
        "rev",
        "revisions",
        "kpa",
        "pa",
        "podautoscalers",
    ] {
        let out = wisp(&s, &["get", kind]);
        assert_eq!(out.code, 0, "{kind}: {}", out.stderr);
    }
    let out = wisp(&s, &["get", "replicasets"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            "error: the server doesn't have a resource type \"replicasets\"\n"
        )
    );
}

#[test]
fn describe_lists_owned_objects() {
    let s = Server::start();
    let out = wisp_stdin(&s, &["apply", "-f", "-"], &service_yaml("hello", "x"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let uid = get_json(&s, &["ksvc", "hello"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let cfg = format!(
        "apiVersion: serving.knative.dev/v1
kind: Configuration
metadata:
  name: hello
  ownerReferences:
  - {{apiVersion: serving.knative.dev/v1, kind: Service, name: hello, uid: {uid}, controller: true}}
spec:
  template:
    spec:
      containers:
      - command: [\"/bin/hello\"]
"
    );
    let out = wisp_stdin(&s, &["apply", "-f", "-"], &cfg);
    assert_eq!(out.code, 0, "{}", out.stderr);

    let out = wisp(&s, &["describe", "ksvc", "hello"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = out.stdout;
    for want in [
        "Name:                hello\n",
        "Namespace:           default\n",
        "Labels:              app=hello\n",
        "serving.knative.dev/creator: wisp-admin\n",
        "API Version:         serving.knative.dev/v1\n",
        "Kind:                Service\n",
        "Generation:          1\n",
        "Spec:\n  template:\n",
        "Owned objects:\n",
        "  configuration.serving.knative.dev/hello\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("last-applied-configuration"), "{text}");

    // The controllers' chain: the configuration owns its revision; a revision owns its
    // PodAutoscaler (created by the autoscaler as soon as the revision exists).
    let out = wisp(&s, &["describe", "cfg/hello"]);
    assert!(
        out.stdout
            .contains("Owned objects:\n  revision.serving.knative.dev/hello-00001\n"),
        "{}",
        out.stdout
    );
    common::wait_for(
        "the revision's PodAutoscaler",
        Duration::from_secs(10),
        || {
            let out = wisp(&s, &["describe", "rev/hello-00001"]);
            out.stdout
            .contains(
                "Owned objects:\n  podautoscaler.autoscaling.internal.knative.dev/hello-00001\n",
            )
            .then_some(())
        },
    );
    let out = wisp(&s, &["describe", "ksvc", "nope"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("Error from server (NotFound)"),
        "{}",
        out.stderr
    );
}

#[test]
fn delete_by_name_and_file() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "svc.yaml",
        &format!("{}---\n{}", service_yaml("a", "x"), service_yaml("b", "x")),
    );
    assert_eq!(wisp(&s, &["apply", "-f", &f]).code, 0);

    let out = wisp(&s, &["delete", "ksvc", "a"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "service.serving.knative.dev \"a\" deleted\n"),
        "{}",
        out.stderr
    );
    let out = wisp(&s, &["delete", "ksvc", "a"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "Error from server (NotFound): services.serving.knative.dev \"a\" not found\n"
    );
    let out = wisp(&s, &["delete", "ksvc/a", "--ignore-not-found"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );

    let out = wisp(&s, &["delete", "-f", &f]);
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout, "service.serving.knative.dev \"b\" deleted\n");
    assert_eq!(
        out.stderr,
        format!(
            "Error from server (NotFound): error when deleting \"{f}\": services.serving.knative.dev \"a\" not found\n"
        )
    );
    let out = wisp(&s, &["delete", "-f", &f, "--ignore-not-found"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));
}

#[test]
fn connection_and_auth_errors() {
    let s = Server::start();
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut c = Command::new(wisp_bin());
    c.args(["get", "ksvc", "--server", &url])
        .env_remove("WISP_TOKEN");
    let out = run_cmd(c, None);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains(&url) && out.stderr.contains("wisp serve"),
        "{}",
        out.stderr
    );

    let mut c = s.cli();
    c.args(["get", "ksvc"]).env("WISP_TOKEN", "wrong");
    let out = run_cmd(c, None);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.starts_with("Error from server (Unauthorized)"),
        "{}",
        out.stderr
    );

    // Without --token/WISP_TOKEN the token is read from <data-dir>/token.
    let mut c = s.cli();
    c.args(["get", "ksvc"])
        .env_remove("WISP_TOKEN")
        .env("WISP_DATA_DIR", s.data_dir());
    let out = run_cmd(c, None);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (0, "No resources found in default namespace.\n")
    );
}

/// Lines of a child's stdout, delivered over a channel so that reads can time out.
fn line_reader(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(20))
        .expect("a line from `wisp get -w` in time")
}

fn first_cell(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("")
}

#[test]
fn get_watch_prints_a_row_per_change() {
    let s = Server::start();
    assert_eq!(
        wisp_stdin(&s, &["apply", "-f", "-"], &service_yaml("a", "x")).code,
        0
    );
    let mut c = s.cli();
    c.args(["get", "ksvc", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let rx = line_reader(&mut child);
    assert_eq!(first_cell(&next_line(&rx)), "NAME");
    assert_eq!(first_cell(&next_line(&rx)), "a");

    // The controllers write status too, so rows for `a` keep coming; wait for the row of
    // each change we make.
    let next_row_for = |name: &str| {
        for _ in 0..200 {
            if first_cell(&next_line(&rx)) == name {
                return;
            }
        }
        panic!("no row for {name}");
    };
    assert_eq!(
        wisp_stdin(&s, &["apply", "-f", "-"], &service_yaml("b", "x")).code,
        0
    );
    next_row_for("b");
    assert_eq!(wisp(&s, &["delete", "ksvc", "b"]).code, 0);
    // After the delete, the stream carries a final row for `b` (the DELETED event).
    next_row_for("b");
    let _ = child.kill();
    let _ = child.wait();
}

/// A scripted HTTP server: answers the n-th request with the n-th response (status, body,
/// and whether to keep the connection open afterwards), recording each request line.
fn fake_server(script: Vec<(u16, String, bool)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let mut script = script.into_iter();
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            seen2
                .lock()
                .unwrap()
                .push(head.lines().next().unwrap_or("").to_string());
            let Some((code, body, keep)) = script.next() else {
                break;
            };
            let reason = if code == 200 { "OK" } else { "Gone" };
            let _ = write!(
                stream,
                "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}"
            );
            let _ = stream.flush();
            if keep {
                held.push(stream); // the watch stays open, silent
            }
        }
    });
    (addr, seen)
}

#[test]
fn get_watch_relists_after_gone_and_resumes_after_close() {
    let svc = |name: &str, rv: &str| json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}});
    let list = |rv: &str, items: Vec<Value>| {
        json!({"kind": "ServiceList", "metadata": {"resourceVersion": rv}, "items": items})
            .to_string()
    };
    let event = |t: &str, o: Value| format!("{}\n", json!({"type": t, "object": o}));
    let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410, "message": "too old resource version"});
    let script = vec![
        (200, list("5", vec![svc("a", "5")]), false),
        // The stream delivers one change, then the server closes it: resume from rv 6.
        (200, event("MODIFIED", svc("a", "6")), false),
        // Resuming is refused as too old: re-list, which shows the new object b.
        (410, gone.to_string(), false),
        (200, list("7", vec![svc("a", "6"), svc("b", "7")]), false),
        // The watch ends with an ERROR event carrying 410: re-list, a is gone.
        (200, event("ERROR", gone.clone()), false),
        (200, list("8", vec![svc("b", "7")]), false),
        (200, String::new(), true),
    ];
    let (addr, seen) = fake_server(script);
    let mut c = Command::new(wisp_bin());
    c.args(["get", "ksvc", "-w", "--server", &addr])
        .env_remove("WISP_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let rx = line_reader(&mut child);
    let cells: Vec<String> = (0..5)
        .map(|_| first_cell(&next_line(&rx)).to_string())
        .collect();
    // The client goes back to watching after the last re-list (bounded wait).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(cells, ["NAME", "a", "a", "b", "a"]);
    let seen = seen.lock().unwrap().clone();
    let paths: Vec<&str> = seen
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap_or(""))
        .collect();
    let base = "/apis/serving.knative.dev/v1/namespaces/default/services";
    assert_eq!(
        paths,
        [
            base.to_string(),
            format!("{base}?watch=true&resourceVersion=5"),
            format!("{base}?watch=true&resourceVersion=6"),
            base.to_string(),
            format!("{base}?watch=true&resourceVersion=7"),
            base.to_string(),
            format!("{base}?watch=true&resourceVersion=8"),
        ]
    );
}
