//! Issue #18 "See what wisp is doing", with real parts: a real `wisp serve` and the hello
//! sample under load through the ingress; `/metrics` checked by Prometheus' own parser
//! (`promtool check metrics`) and read back; a real Prometheus server (Debian's package)
//! scraping wisp and answering PromQL.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    collections::BTreeMap,
    io::Write,
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::{Server, sample_bin, wait_for};

const HOST: &str = "hello.default.example.com";
const REV: &str = "hello-00001";
/// Requests sent through the ingress.
const REQUESTS: u64 = 40;

fn service_yaml() -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/min-scale: \"1\"\n    spec:\n      containers:\n      - command: [{:?}]\n",
        sample_bin("hello").display().to_string()
    )
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn scrape(s: &Server) -> String {
    let r = client()
        .get(format!("http://{}/metrics", s.metrics_addr))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    r.text().unwrap()
}

/// One sample line of the text format: name, labels, value. Parses what the format
/// allows wisp's names and values to be (validity is promtool's job, below).
fn samples(body: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').unwrap()),
                None => (series, ""),
            };
            let mut map = BTreeMap::new();
            // Label values here never contain `",`.
            for kv in labels.split("\",").filter(|kv| !kv.is_empty()) {
                let (k, v) = kv.split_once("=\"").unwrap();
                map.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
            (name.to_string(), map, value.parse::<f64>().unwrap())
        })
        .collect()
}

/// The sum of `name`'s samples whose labels include every pair of `with`.
fn value(body: &str, name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples(body)
        .into_iter()
        .filter(|(n, l, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

const THIS_REV: [(&str, &str); 4] = [
    ("k8s_namespace_name", "default"),
    ("kn_service_name", "hello"),
    ("kn_configuration_name", "hello"),
    ("kn_revision_name", REV),
];

/// (DESIREDSCALE, ACTUALSCALE) of the revision as `wisp get kpa` prints them.
fn get_kpa(s: &Server) -> (f64, f64) {
    let out = s.cli().args(["get", "kpa"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with(REV))
        .unwrap_or_else(|| panic!("no {REV} in\n{text}"))
        .split_whitespace()
        .collect();
    (row[1].parse().unwrap(), row[2].parse().unwrap())
}

#[test]
fn metrics_follow_the_load_and_a_real_prometheus_scrapes_them() {
    let s = Server::start();
    assert!(!s.metrics_addr.is_empty(), "metrics are on by default");
    s.apply(&service_yaml());
    wait_for("hello ready", Duration::from_secs(60), || {
        // Ready=True, not just a Ready condition: until then the route may not be in
        // the ingress yet, and the first request would not reach the revision.
        s.ready("services", "hello")
            .filter(|(st, _, _)| st == "True")
    });

    let c = client();
    for _ in 0..REQUESTS {
        let r = c
            .get(format!("http://{}/", s.http_addr))
            .header("host", HOST)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.bytes();
    }
    // An unknown host is no revision's request.
    let r = c
        .get(format!("http://{}/", s.http_addr))
        .header("host", "nope.default.example.com")
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);

    let body = scrape(&s);
    // Prometheus' own parser and linter accept it.
    if let Some(problems) = promtool_check(&body) {
        panic!("promtool check metrics:\n{problems}\n---\n{body}");
    }
    // Every request counted once, as a 2xx of this revision (the histogram's count is
    // the request count; sum and buckets agree).
    let mut with_class = THIS_REV.to_vec();
    with_class.push(("response_code_class", "2xx"));
    let count = value(
        &body,
        "http_server_request_duration_seconds_count",
        &with_class,
    );
    assert_eq!(count, Some(REQUESTS as f64), "{body}");
    let inf = value(
        &body,
        "http_server_request_duration_seconds_bucket",
        &[&with_class[..], &[("le", "+Inf")]].concat(),
    );
    assert_eq!(inf, Some(REQUESTS as f64));
    assert!(
        value(
            &body,
            "http_server_request_duration_seconds_sum",
            &with_class
        )
        .unwrap()
            > 0.0
    );
    assert_eq!(
        value(&body, "http_server_request_duration_seconds_count", &[]),
        Some(REQUESTS as f64),
        "no other revision or class saw a request"
    );

    // The KPA's gauges match what `wisp get kpa` shows (read until both agree: they are
    // two reads of a value the 2 s tick may change in between; and until the KPA has
    // decided once: before, both say -1, Knative's "scale unknown", which on a loaded
    // machine can outlast the requests above).
    let (requested, ready) = wait_for(
        "/metrics and get kpa agree",
        Duration::from_secs(30),
        || {
            let body = scrape(&s);
            let (desired, actual) = get_kpa(&s);
            let requested = value(&body, "kn_revision_pods_requested", &THIS_REV)?;
            let ready = value(&body, "kn_revision_pods_count", &THIS_REV)?;
            (requested == desired && ready == actual && requested >= 0.0)
                .then_some((requested, ready))
        },
    );
    assert_eq!(
        (requested, ready),
        (1.0, 1.0),
        "min-scale 1, one ready replica"
    );
    let body = scrape(&s);
    for name in [
        "kn_revision_pods_desired",
        "kn_revision_pods_not_ready_count",
        "kn_revision_pods_pending_count",
        "kn_revision_pods_terminating_count",
        "kn_revision_capacity_excess",
        "kn_revision_concurrency_stable",
        "kn_revision_concurrency_panic",
        "kn_revision_concurrency_target",
        "kn_revision_panic_mode",
        "kn_revision_request_concurrency",
        "kn_serving_queue_depth",
        "wisp_activator_held_requests",
    ] {
        assert!(
            value(&body, name, &THIS_REV).is_some(),
            "{name} missing:\n{body}"
        );
    }
    assert_eq!(
        value(&body, "kn_revision_concurrency_target", &THIS_REV),
        Some(70.0),
        "Knative's default target: 100 × 70 %"
    );
    assert!(
        value(&body, "kn_revision_rps_stable_per_second", &THIS_REV).is_none(),
        "a concurrency-scaled revision"
    );
    // The control plane: work queues, reconciles, store commits, API requests.
    for (name, labels) in [
        ("kn_workqueue_adds_total", vec![("name", "service")]),
        (
            "kn_workqueue_process_duration_seconds_count",
            vec![("name", "podautoscaler")],
        ),
        ("wisp_store_write_duration_seconds_count", vec![]),
        (
            "apiserver_request_total",
            vec![
                ("verb", "CREATE"),
                ("resource", "services"),
                ("code", "201"),
            ],
        ),
        (
            "apiserver_request_duration_seconds_count",
            vec![("verb", "GET"), ("resource", "services")],
        ),
    ] {
        let v = value(&body, name, &labels);
        assert!(v.is_some_and(|v| v >= 1.0), "{name}{labels:?} = {v:?}");
    }
    assert!(value(&body, "kn_workqueue_depth", &[("name", "revision")]).is_some());
    assert!(
        value(
            &body,
            "wisp_reconcile_errors_total",
            &[("reconciler", "route")]
        )
        .is_some()
    );

    // A real Prometheus scrapes wisp; PromQL returns the revision's desired pods.
    let Some(prom) = Prometheus::start(&s.metrics_addr) else {
        eprintln!(
            "SKIPPED: the real-Prometheus half of this test: `prometheus` is not installed (apt-get install prometheus)"
        );
        return;
    };
    let query =
        format!("kn_revision_pods_desired{{kn_revision_name=\"{REV}\",kn_service_name=\"hello\"}}");
    let from_prometheus = wait_for(
        "Prometheus has scraped wisp",
        Duration::from_secs(60),
        || prom.query(&query),
    );
    let from_wisp = value(&scrape(&s), "kn_revision_pods_desired", &THIS_REV).unwrap();
    assert_eq!(from_prometheus, from_wisp, "PromQL {query}");
    let requests = wait_for(
        "Prometheus has the request count",
        Duration::from_secs(30),
        || {
            prom.query(&format!(
                "sum(http_server_request_duration_seconds_count{{kn_revision_name=\"{REV}\"}})"
            ))
        },
    );
    assert_eq!(requests, REQUESTS as f64);
}

/// `promtool check metrics` on `body` (Prometheus' text parser, then its linter): None
/// when it finds nothing wrong (or is not installed, said on stderr). The linter's one
/// style remark on Knative's own names (`kn.revision.pods.count` and friends end in
/// `_count` without being histograms) is expected and ignored; anything else fails.
fn promtool_check(body: &str) -> Option<String> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            eprintln!("SKIPPED: promtool check (apt-get install prometheus)");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let knative_names = [
        "kn_revision_pods_count",
        "kn_revision_pods_not_ready_count",
        "kn_revision_pods_pending_count",
        "kn_revision_pods_terminating_count",
    ];
    let unexpected: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            !knative_names.iter().any(|n| {
                *l == format!(
                    "{n} non-histogram and non-summary metrics should not have \"_count\" suffix"
                )
            })
        })
        .collect();
    (!unexpected.is_empty()).then(|| unexpected.join("\n"))
}

/// A Prometheus server of this test only: loopback, ephemeral port, its own storage,
/// scraping one target every second; killed on drop.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Option<Prometheus> {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: wisp\n  static_configs:\n  - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        // A free port: bound and released (Prometheus cannot report an ephemeral one).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Prometheus {
            child,
            addr,
            _dir: dir,
        })
    }

    /// An instant query's single value, if it has exactly one.
    fn query(&self, q: &str) -> Option<f64> {
        let r = client()
            .get(format!("http://{}/api/v1/query", self.addr))
            .query(&[("query", q)])
            .send()
            .ok()?;
        let v: serde_json::Value = r.json().ok()?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn apply_wait_follows_the_service_and_top_shows_its_revision() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hello.yaml");
    std::fs::write(&file, service_yaml()).unwrap();
    let out = apply_wait(&s, &file, "60s");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a terminal: plain lines, one per stage seen, the last one the URL.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "service.serving.knative.dev/hello created");
    assert_eq!(
        lines.last(),
        Some(&"service/hello: ready at http://hello.default.example.com"),
        "{stdout}"
    );
    assert!(
        lines[1..].iter().all(|l| l.starts_with("service/hello: ")),
        "{stdout}"
    );
    // It really is ready: the URL answers.
    let r = client()
        .get(format!("http://{}/", s.http_addr))
        .header("host", HOST)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);

    // `wisp top`: the revision with its one replica (min-scale 1), its service, no panic.
    let top = wait_for("top shows 1/1", Duration::from_secs(30), || {
        let out = s.cli().arg("top").output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .any(|l| {
                l.split_whitespace().collect::<Vec<_>>()[..4] == [REV, "hello", "1/1", "0.0"][..]
            })
            .then_some(text)
    });
    let header: Vec<&str> = top.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SERVICE",
            "REPLICAS",
            "CONCURRENCY",
            "RPS",
            "P95",
            "PANIC"
        ]
    );
    assert!(top.contains(" no"), "{top}");

    // A Service whose app exits: the wait ends non-zero with the revision's reason and
    // message.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  template:\n    spec:\n      containers:\n      - command: [\"sh\", \"-c\", \"echo cannot start >&2; exit 3\"]\n",
    )
    .unwrap();
    let out = apply_wait(&s, &bad, "60s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error: service/bad failed: ExitCode3: Container failed with:"),
        "{stderr}"
    );

    // A timeout says where the Service got to: an app that never listens.
    let slow = dir.path().join("slow.yaml");
    std::fs::write(
        &slow,
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: slow\nspec:\n  template:\n    spec:\n      containers:\n      - command: [\"sleep\", \"3600\"]\n",
    )
    .unwrap();
    let out = apply_wait(&s, &slow, "2s");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: service/slow not ready after 2s: starting replicas (0/1 ready)"),
        "{stderr}"
    );
    let out = apply_wait(&s, &bad, "0s");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be a positive duration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wisp apply -f FILE --wait --timeout TIMEOUT`, run to its end.
fn apply_wait(s: &Server, file: &std::path::Path, timeout: &str) -> std::process::Output {
    s.cli()
        .args([
            "apply",
            "-f",
            file.to_str().unwrap(),
            "--wait",
            "--timeout",
            timeout,
        ])
        .output()
        .unwrap()
}

/// `wisp logs --requests` of the hello service (every line so far).
fn request_log(s: &Server) -> Vec<String> {
    let out = s
        .cli()
        .args(["logs", "--requests", "hello"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn request_logs_follow_the_template_and_a_bad_one_stops_serve() {
    let dir = tempfile::tempdir().unwrap();
    // A template naming a field requests do not have: `wisp serve` refuses to start,
    // naming the key, before it binds anything.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "config-observability:\n  logging.enable-request-log: \"true\"\n  logging.request-log-template: '{{.Request.Nope}}'\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(common::wisp_bin())
        .args(["serve", "--config", bad.to_str().unwrap(), "--data-dir"])
        .arg(data.path())
        .args(["--api-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--local-addr", "127.0.0.1:0", "--metrics-addr", "off"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "config-observability: logging.request-log-template: template: can't evaluate field Request.Nope"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");

    // A template over every part of the input; probes are not logged.
    let cfg = dir.path().join("good.yaml");
    std::fs::write(
        &cfg,
        "config-observability:\n  logging.enable-request-log: \"true\"\n  logging.request-log-template: '{{.Request.Method}} {{.Request.URL}} {{.Request.Host}} {{.Response.Code}} {{.Response.Size}} {{.Revision.Namespace}}/{{.Revision.Name}} {{.Revision.Service}} {{js .Request.UserAgent}} {{index .Request.Header \"X-Test\"}} {{.TraceID}}'\n",
    )
    .unwrap();
    let s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    s.apply(&service_yaml());
    wait_for("hello ready", Duration::from_secs(60), || {
        // Ready=True, not just a Ready condition: until then the route may not be in
        // the ingress yet, and the first request would not reach the revision.
        s.ready("services", "hello")
            .filter(|(st, _, _)| st == "True")
    });
    let c = client();
    let body = c
        .get(format!("http://{}/path?x=1", s.http_addr))
        .header("host", HOST)
        .header("user-agent", "test/1 \"q\"")
        .header("x-test", "yes")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .send()
        .unwrap();
    // Only a response of the revision is logged: say so if the request never got there.
    assert_eq!(body.status(), 200);
    let body = body.bytes().unwrap();
    let probe = c
        .get(format!("http://{}/", s.http_addr))
        .header("host", HOST)
        .header("k-network-probe", "queue")
        .send()
        .unwrap();
    let _ = probe.bytes();
    let lines = wait_for("the request's log line", Duration::from_secs(10), || {
        let l = request_log(&s);
        (!l.is_empty()).then_some(l)
    });
    assert_eq!(
        lines,
        [format!(
            "GET /path?x=1 {HOST} 200 {} default/{REV} hello test/1 \\\"q\\\" [yes] 4bf92f3577b34da6a3ce929d0e0e4736",
            body.len()
        )],
        "one line, the probe left out"
    );
}
