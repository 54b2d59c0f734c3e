//! Issue "Requests reach revisions": a real `wisp serve` with the sample apps, driven
//! through its ingress listeners like `curl -H 'Host: …'` would.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Server, sample_bin, wait_for};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A Service running `bin` (a sample), with extra template annotations, spec lines (under
/// `spec.template.spec`), env and top-level spec lines (traffic).
struct Svc<'a> {
    name: &'a str,
    bin: &'a str,
    target: &'a str,
    metadata: &'a str,
    annotations: &'a [(&'a str, &'a str)],
    template_spec: &'a str,
    traffic: &'a str,
    command: Option<&'a str>,
}

impl<'a> Svc<'a> {
    fn new(name: &'a str, bin: &'a str) -> Self {
        Svc {
            name,
            bin,
            target: "World",
            metadata: "",
            annotations: &[],
            template_spec: "",
            traffic: "",
            command: None,
        }
    }

    fn yaml(&self) -> String {
        let mut y = format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {}\n{}spec:\n  template:\n",
            self.name, self.metadata
        );
        if !self.annotations.is_empty() {
            y.push_str("    metadata:\n      annotations:\n");
            for (k, v) in self.annotations {
                y.push_str(&format!("        {k}: {v:?}\n"));
            }
        }
        let command = match self.command {
            Some(c) => c.to_string(),
            None => format!("[{:?}]", sample_bin(self.bin).display().to_string()),
        };
        y.push_str(&format!(
            "    spec:\n{}      containers:\n      - command: {command}\n        env:\n        - name: TARGET\n          value: {}\n",
            self.template_spec, self.target
        ));
        y.push_str(self.traffic);
        y
    }
}

fn wait_ready(s: &Server, plural: &str, name: &str) {
    wait_for(&format!("{plural}/{name} Ready"), READY_TIMEOUT, || {
        s.ready(plural, name).filter(|(st, _, _)| st == "True")
    });
}

/// Waits until the service's latest created revision is `rev` and the service is Ready.
fn wait_latest(s: &Server, svc: &str, rev: &str) {
    wait_for(&format!("{svc} Ready at {rev}"), READY_TIMEOUT, || {
        let o = s.get_json(&format!(
            "/apis/serving.knative.dev/v1/namespaces/default/services/{svc}"
        ))?;
        let ready = s.ready("services", svc)?.0 == "True";
        (ready && o["status"]["latestReadyRevisionName"] == rev).then_some(())
    });
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(64)
        .build()
        .expect("client")
}

/// `curl -H "Host: {host}" http://{addr}{path}` → (status, body).
fn get(c: &reqwest::blocking::Client, addr: &str, host: &str, path: &str) -> (u16, String) {
    get_with(c, addr, host, path, &[])
}

fn get_with(
    c: &reqwest::blocking::Client,
    addr: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut r = c.get(format!("http://{addr}{path}")).header("host", host);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    match r.send() {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.text().unwrap_or_default())
        }
        Err(e) => (0, format!("request failed: {e}")),
    }
}

/// Waits until the host answers 200 on `addr`, returning the body.
fn wait_200(addr: &str, host: &str) -> String {
    let c = client();
    wait_for(&format!("{host} answering 200"), READY_TIMEOUT, || {
        let (st, body) = get(&c, addr, host, "/");
        (st == 200).then_some(body)
    })
}

fn config_file(s: &tempfile::TempDir, yaml: &str) -> String {
    let p = s.path().join("config.yaml");
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

#[test]
fn hosts_visibility_and_unknown_hosts() {
    let s = Server::start();
    s.apply(&Svc::new("hello", "hello").yaml());
    s.apply(
        &Svc {
            target: "Private",
            metadata: "  labels:\n    networking.knative.dev/visibility: cluster-local\n",
            ..Svc::new("private", "hello")
        }
        .yaml(),
    );
    wait_ready(&s, "services", "hello");
    wait_ready(&s, "services", "private");
    let c = client();

    // External host on the external listener; case and port do not matter.
    assert_eq!(
        wait_200(&s.http_addr, "hello.default.example.com"),
        "Hello World!\n"
    );
    assert_eq!(
        get(&c, &s.http_addr, "Hello.Default.Example.com:8080", "/"),
        (200, "Hello World!\n".into())
    );
    // Cluster-local names only on the cluster-local listener.
    for host in [
        "hello.default.svc.cluster.local",
        "hello.default.svc",
        "hello.default",
    ] {
        assert_eq!(
            get(&c, &s.local_addr, host, "/"),
            (200, "Hello World!\n".into()),
            "{host} on the cluster-local listener"
        );
        let (st, body) = get(&c, &s.http_addr, host, "/");
        assert_eq!(st, 404, "{host} on the external listener: {body}");
    }
    // And external hosts are not served on the cluster-local listener.
    assert_eq!(
        get(&c, &s.local_addr, "hello.default.example.com", "/").0,
        404
    );
    // A cluster-local service is not reachable from the external listener at all.
    assert_eq!(
        wait_200(&s.local_addr, "private.default.svc.cluster.local"),
        "Hello Private!\n"
    );
    for host in [
        "private.default.example.com",
        "private.default.svc.cluster.local",
        "private.default",
    ] {
        assert_eq!(get(&c, &s.http_addr, host, "/").0, 404, "{host}");
    }
    // Unknown host: 404 with a short body naming it.
    let (st, body) = get(&c, &s.http_addr, "nope.default.example.com", "/");
    assert_eq!(st, 404);
    assert!(body.contains("nope.default.example.com"), "{body}");
    assert!(body.len() < 100, "{body}");
}

#[test]
fn traffic_splits_tags_and_tag_header_routing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config_file(
        &tmp,
        "config-features:\n  tag-header-based-routing: Enabled\n",
    );
    let s = Server::start_with(&["--config", &cfg]);
    s.apply(
        &Svc {
            target: "one",
            ..Svc::new("split", "hello")
        }
        .yaml(),
    );
    wait_latest(&s, "split", "split-00001");
    s.apply(
        &Svc {
            target: "two",
            traffic: "  traffic:\n  - revisionName: split-00001\n    percent: 80\n    tag: one\n  - latestRevision: true\n    percent: 20\n    tag: two\n",
            ..Svc::new("split", "hello")
        }
        .yaml(),
    );
    wait_latest(&s, "split", "split-00002");
    let host = "split.default.example.com";
    wait_for("the 80/20 split is live", READY_TIMEOUT, || {
        let c = client();
        let seen: Vec<String> = (0..50)
            .map(|_| get(&c, &s.http_addr, host, "/").1)
            .collect();
        (seen.iter().any(|b| b == "Hello one!\n") && seen.iter().any(|b| b == "Hello two!\n"))
            .then_some(())
    });

    // 10,000 requests over keep-alive from a few threads: within ±2% of 80/20.
    let threads = 8;
    let per = 10_000 / threads;
    let (ones, twos, others) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (ones, twos, others, addr) = (&ones, &twos, &others, &s.http_addr);
            scope.spawn(move || {
                let c = client();
                for _ in 0..per {
                    match get(&c, addr, host, "/") {
                        (200, b) if b == "Hello one!\n" => ones.fetch_add(1, Ordering::Relaxed),
                        (200, b) if b == "Hello two!\n" => twos.fetch_add(1, Ordering::Relaxed),
                        other => {
                            others.lock().unwrap().push(other);
                            0
                        }
                    };
                }
            });
        }
    });
    let (n1, n2) = (ones.load(Ordering::Relaxed), twos.load(Ordering::Relaxed));
    let others = others.lock().unwrap();
    assert!(
        others.is_empty(),
        "non-200 answers: {:?}",
        &others[..others.len().min(5)]
    );
    let share = n1 as f64 / (n1 + n2) as f64;
    eprintln!(
        "10,000 requests in {:?}: {n1} one / {n2} two",
        started.elapsed()
    );
    assert!(
        (0.78..=0.82).contains(&share),
        "share of split-00001: {share}"
    );

    // Tag URLs reach their tag's revision.
    let c = client();
    for _ in 0..20 {
        assert_eq!(
            get(&c, &s.http_addr, "one-split.default.example.com", "/"),
            (200, "Hello one!\n".into())
        );
        assert_eq!(
            get(&c, &s.http_addr, "two-split.default.example.com", "/"),
            (200, "Hello two!\n".into())
        );
    }
    // With tag-header-based-routing on, the header selects the tag's revision.
    for _ in 0..50 {
        assert_eq!(
            get_with(
                &c,
                &s.http_addr,
                host,
                "/",
                &[("Knative-Serving-Tag", "two")]
            ),
            (200, "Hello two!\n".into())
        );
    }

    // A tag at 0% is still reachable on its URL.
    s.apply(
        &Svc {
            target: "two",
            traffic: "  traffic:\n  - revisionName: split-00001\n    percent: 0\n    tag: zero\n  - latestRevision: true\n    percent: 100\n",
            ..Svc::new("split", "hello")
        }
        .yaml(),
    );
    wait_for("the 0% tag is routed", READY_TIMEOUT, || {
        (get(&c, &s.http_addr, "zero-split.default.example.com", "/")
            == (200, "Hello one!\n".to_string()))
            .then_some(())
    });
    for _ in 0..50 {
        assert_eq!(
            get(&c, &s.http_addr, host, "/"),
            (200, "Hello two!\n".into())
        );
    }
}

/// Waits until the revision's PodAutoscaler has decided with a replica ready (desiredScale
/// and actualScale ≥ 1): the KPA has published its routing mode for a running revision.
fn wait_kpa_running(s: &Server, rev: &str) {
    let path = format!(
        "/apis/autoscaling.internal.knative.dev/v1alpha1/namespaces/default/podautoscalers/{rev}"
    );
    let what = format!("{rev}: KPA decided with a replica ready");
    wait_for(&what, READY_TIMEOUT, || {
        let pa = s.get_json(&path)?;
        let st = &pa["status"];
        (st["desiredScale"].as_i64()? >= 1 && st["actualScale"].as_i64()? >= 1).then_some(())
    });
}

#[test]
fn container_concurrency_serializes_and_sheds() {
    // target-burst-capacity 0: once a replica runs, the KPA takes the activator out of the
    // path (Serve mode), so the replica's own queue (CC + 10 × CC) is the only buffer.
    let s = Server::start();
    s.apply(
        &Svc {
            template_spec: "      containerConcurrency: 1\n",
            annotations: &[
                ("autoscaling.knative.dev/target-burst-capacity", "0"),
                ("autoscaling.knative.dev/max-scale", "1"),
            ],
            ..Svc::new("cc", "autoscale")
        }
        .yaml(),
    );
    wait_ready(&s, "services", "cc");
    let host = "cc.default.example.com";
    wait_200(&s.http_addr, host);
    wait_kpa_running(&s, "cc-00001");

    // 11 concurrent requests (CC 1 + a queue of 10): all served, one at a time. Each
    // sleeps long enough that the 12th, sent once the others are in, finds the first still
    // running and the queue full even on a loaded machine (400 ms was too short there).
    let sleep_ms = 1000;
    let done: Arc<Mutex<Vec<(u16, Instant)>>> = Arc::default();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..11 {
            let (done, addr) = (&done, &s.http_addr);
            scope.spawn(move || {
                let (st, _) = get(&client(), addr, host, &format!("/?sleep={sleep_ms}"));
                done.lock().unwrap().push((st, Instant::now()));
            });
        }
        // The 12th, once the others are in: 503 at once.
        std::thread::sleep(Duration::from_millis(600));
        let t = Instant::now();
        let (st, body) = get(
            &client(),
            &s.http_addr,
            host,
            &format!("/?sleep={sleep_ms}"),
        );
        assert_eq!(st, 503, "{body}");
        assert!(body.contains("queue full"), "{body}");
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
    });
    let done = done.lock().unwrap().clone();
    assert!(done.iter().all(|(st, _)| *st == 200), "{done:?}");
    // Serialized at the app: the burst takes at least one sleep per request. (Gaps between
    // the clients' completion times are no proof either way: on a loaded machine a client
    // thread can note its answer late, bringing two completions closer than one sleep.)
    assert!(start.elapsed() >= Duration::from_millis(11 * sleep_ms - 50));
}

#[test]
fn container_concurrency_in_proxy_mode_holds_the_burst_in_the_activator() {
    // Default target-burst-capacity (211) with CC 1: one replica is far short of burst
    // capacity, so the activator stays in the path (Proxy mode) and throttles by capacity: a
    // burst beyond the replica's queue (CC + 10 × CC = 11) waits in the activator instead of
    // being shed, and the replica still runs one request at a time.
    let s = Server::start();
    s.apply(
        &Svc {
            template_spec: "      containerConcurrency: 1\n",
            annotations: &[("autoscaling.knative.dev/max-scale", "1")],
            ..Svc::new("ccp", "autoscale")
        }
        .yaml(),
    );
    wait_ready(&s, "services", "ccp");
    let host = "ccp.default.example.com";
    wait_200(&s.http_addr, host);
    wait_kpa_running(&s, "ccp-00001");

    let (n, sleep_ms) = (20, 200);
    let done: Arc<Mutex<Vec<(u16, Instant)>>> = Arc::default();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..n {
            let (done, addr) = (&done, &s.http_addr);
            scope.spawn(move || {
                let (st, _) = get(&client(), addr, host, &format!("/?sleep={sleep_ms}"));
                done.lock().unwrap().push((st, Instant::now()));
            });
        }
    });
    let done = done.lock().unwrap().clone();
    assert_eq!(done.len(), n);
    assert!(done.iter().all(|(st, _)| *st == 200), "{done:?}");
    // One at a time at the app: the burst takes at least one sleep per request (see above).
    assert!(start.elapsed() >= Duration::from_millis(n as u64 * sleep_ms - 50));
}

#[test]
fn request_timeout_is_a_504() {
    let s = Server::start();
    s.apply(
        &Svc {
            template_spec: "      timeoutSeconds: 2\n",
            ..Svc::new("slow", "autoscale")
        }
        .yaml(),
    );
    wait_ready(&s, "services", "slow");
    let host = "slow.default.example.com";
    wait_200(&s.http_addr, host);
    let t = Instant::now();
    let (st, body) = get(&client(), &s.http_addr, host, "/?sleep=5000");
    assert_eq!(st, 504, "{body}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

const ZERO_CONFIG: &str =
    "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n  initial-scale: \"0\"\n";

/// How many replicas the platform runs for a revision (its status `actualReplicas`).
fn actual_replicas(s: &Server, rev: &str) -> i64 {
    s.get_json(&format!(
        "/apis/serving.knative.dev/v1/namespaces/default/revisions/{rev}"
    ))
    .and_then(|o| o["status"]["actualReplicas"].as_i64())
    .unwrap_or(-1)
}

#[test]
fn a_revision_at_zero_wakes_on_the_first_request() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config_file(&tmp, ZERO_CONFIG);
    let s = Server::start_with(&["--config", &cfg]);
    s.apply(&Svc::new("zero", "hello").yaml());
    wait_ready(&s, "services", "zero");
    assert_eq!(actual_replicas(&s, "zero-00001"), 0);
    // Nothing runs: no replica logs.
    let logs = s.cli().args(["logs", "zero"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&logs.stdout).contains("listening"),
        "a replica started before any request"
    );

    // 20 requests at once against zero replicas: all held, then all answered.
    let results: Arc<Mutex<Vec<(u16, String)>>> = Arc::default();
    let t = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..20 {
            let (results, addr) = (&results, &s.http_addr);
            scope.spawn(move || {
                let r = get(&client(), addr, "zero.default.example.com", "/");
                results.lock().unwrap().push(r);
            });
        }
    });
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 20);
    assert!(
        results.iter().all(|r| *r == (200, "Hello World!\n".into())),
        "{results:?}"
    );
    eprintln!("cold start of 20 held requests took {:?}", t.elapsed());
    wait_for("one replica", READY_TIMEOUT, || {
        (actual_replicas(&s, "zero-00001") == 1).then_some(())
    });
}

#[test]
fn held_requests_time_out_when_replicas_keep_crashing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config_file(&tmp, ZERO_CONFIG);
    let s = Server::start_with(&["--config", &cfg]);
    s.apply(
        &Svc {
            command: Some("[\"/bin/sh\", \"-c\", \"echo crashing; exit 3\"]"),
            template_spec: "      timeoutSeconds: 3\n",
            ..Svc::new("crash", "hello")
        }
        .yaml(),
    );
    // At zero nothing has run yet, so the revision is Ready and routed.
    wait_ready(&s, "services", "crash");
    let t = Instant::now();
    let (st, body) = get(&client(), &s.http_addr, "crash.default.example.com", "/");
    let took = t.elapsed();
    assert_eq!(st, 504, "{body}");
    assert!(body.contains("activator request timeout"), "{body}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // The request did ask for a replica, which crashed.
    wait_for("the crash in the logs", READY_TIMEOUT, || {
        let out = s.cli().args(["logs", "crash"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains("crashing")
            .then_some(())
    });
}

#[test]
fn a_rollout_under_load_loses_nothing() {
    let s = Server::start();
    s.apply(
        &Svc {
            target: "v1",
            ..Svc::new("roll", "autoscale")
        }
        .yaml(),
    );
    wait_ready(&s, "services", "roll");
    let host = "roll.default.example.com";
    wait_200(&s.http_addr, host);

    let stop = AtomicBool::new(false);
    let ok = AtomicUsize::new(0);
    let failures: Mutex<Vec<(u16, String)>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (stop, ok, failures, addr) = (&stop, &ok, &failures, &s.http_addr);
            scope.spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    match get(&c, addr, host, "/?sleep=20") {
                        (200, _) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failures.lock().unwrap().push(other),
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        // A new template: a new revision, then the route moves to it, then the old one
        // scales to zero while the load goes on.
        s.apply(
            &Svc {
                target: "v2",
                template_spec: "      containerConcurrency: 10\n",
                ..Svc::new("roll", "autoscale")
            }
            .yaml(),
        );
        wait_latest(&s, "roll", "roll-00002");
        wait_for("the old revision's replicas gone", READY_TIMEOUT, || {
            (actual_replicas(&s, "roll-00001") == 0).then_some(())
        });
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
    });
    let failures = failures.lock().unwrap();
    let ok = ok.load(Ordering::Relaxed);
    eprintln!("rollout: {ok} requests answered 200");
    assert!(ok > 100, "{ok}");
    assert!(
        failures.is_empty(),
        "{} failed requests, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// One HTTP/2 (prior knowledge, as gRPC clients speak) GET through the ingress.
fn h2c_get(addr: &str, host: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        let req = hyper::Request::get(format!("http://{host}/"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
            .await
            .expect("h2c response in time")
            .unwrap();
        assert_eq!(resp.version(), hyper::Version::HTTP_2);
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

#[test]
fn h2c_end_to_end_when_the_port_is_named_h2c() {
    let s = Server::start();
    s.apply(&format!(
        "{}        ports:\n        - name: h2c\n          containerPort: 8080\n",
        Svc {
            target: "h2c",
            ..Svc::new("grpc", "hello")
        }
        .yaml()
    ));
    wait_ready(&s, "services", "grpc");
    assert_eq!(
        wait_200(&s.http_addr, "grpc.default.example.com"),
        "Hello h2c!\n"
    );
    assert_eq!(
        h2c_get(&s.http_addr, "grpc.default.example.com"),
        (200, "Hello h2c!\n".into())
    );
    // Unknown hosts answer over HTTP/2 too.
    assert_eq!(h2c_get(&s.http_addr, "nope.default.example.com").0, 404);
}
