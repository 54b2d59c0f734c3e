//! Issue #23 part 2: the data plane does not feel the API's load, and the API bounds its own
//! work as kube-apiserver does (max-in-flight 429s, parse budgets).
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Server, sample_bin, wait_for};

const SVC: &str = "/apis/serving.knative.dev/v1/namespaces/default/services";
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A YAML alias bomb: nine levels of ten aliases (10^9 values if expanded).
fn alias_bomb() -> String {
    let mut y = String::from("apiVersion: serving.knative.dev/v1\nkind: Service\n");
    y.push_str("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        y.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{p}"); 10].join(", ")
        ));
    }
    y
}

#[test]
fn the_ingress_and_point_reads_stay_fast_while_the_api_is_flooded() {
    let s = Server::start();
    let hello = sample_bin("hello").display().to_string();
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{hello:?}]\n"
    ));
    wait_for("services/hello Ready", Duration::from_secs(30), || {
        s.ready("services", "hello")
            .filter(|(st, _, _)| st == "True")
    });
    let get = "GET / HTTP/1.1\r\nHost: hello.default.example.com\r\nConnection: close\r\n\r\n";
    wait_for("hello answering", Duration::from_secs(30), || {
        (common::raw_http(&s.http_addr, get.as_bytes()).0 == 200).then_some(())
    });

    // 16 clients sending alias bombs and oversized JSON as fast as they are answered, for
    // at most 4 s each.
    let stop = Arc::new(AtomicBool::new(false));
    let bomb = alias_bomb();
    let wide = format!("{{\"items\":[{}0]}}", "0,".repeat(1_000_000));
    let mut flood = Vec::new();
    for i in 0..16 {
        let (stop, url, auth, http) = (stop.clone(), s.url(SVC), s.auth(), s.http());
        let (body, ct) = if i % 2 == 0 {
            (bomb.clone(), "application/yaml")
        } else {
            (wide.clone(), "application/json")
        };
        flood.push(std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(4);
            let mut codes = Vec::new();
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let r = http
                    .post(&url)
                    .header("authorization", &auth)
                    .header("content-type", ct)
                    .body(body.clone())
                    .send();
                codes.push(r.map(|r| r.status().as_u16()).unwrap_or(0));
            }
            codes
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Meanwhile: new ingress connections, and a GET of one object.
    let (mut worst_ingress, mut worst_get) = (Duration::ZERO, Duration::ZERO);
    let http = s.http();
    for _ in 0..20 {
        let t = Instant::now();
        let (code, text) = common::raw_http(&s.http_addr, get.as_bytes());
        worst_ingress = worst_ingress.max(t.elapsed());
        assert_eq!(code, 200, "{text}");
        let t = Instant::now();
        let r = http
            .get(s.url(&format!("{SVC}/hello")))
            .header("authorization", s.auth())
            .send()
            .unwrap();
        worst_get = worst_get.max(t.elapsed());
        assert_eq!(r.status(), 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let codes: Vec<u16> = flood
        .into_iter()
        .flat_map(|t| t.join().expect("flood thread"))
        .collect();
    // Every bomb was refused as bad input (or shed with 429), never a 5xx or a timeout.
    assert!(
        codes.iter().all(|c| matches!(c, 400 | 429)),
        "flood answers: {codes:?}"
    );
    assert!(codes.contains(&400), "{codes:?}");
    // The benchmark (bench/src/bin/api_flood.rs) measures the figures; the bounds here
    // are loose enough for a debug build sharing the machine with other tests.
    assert!(
        worst_ingress < Duration::from_millis(500),
        "a new ingress connection waited {worst_ingress:?} while the API was flooded"
    );
    assert!(
        worst_get < Duration::from_millis(1000),
        "a GET waited {worst_get:?} while the API was flooded"
    );
}

#[test]
fn past_the_in_flight_bound_writes_get_kube_apiservers_429_and_watches_do_not_count() {
    // Raw bytes on TCP connections: over plain HTTP (loopback), which the bounds do not
    // depend on.
    let s = Server::start_with(&[
        "--api-insecure-http",
        "--max-mutating-requests-inflight",
        "1",
        "--max-requests-inflight",
        "1",
    ]);
    let api = s.addr.clone();
    let auth = s.auth();
    let body = r#"{"metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"command":["true"]}]}}}}"#;
    let post = format!(
        "POST {SVC} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A write that stays in flight: its head promises a body that has not arrived yet.
    // Should the probing write take the one slot first, the held one is refused and the
    // next round holds a new one.
    let (held, code, text) = wait_for("a write held in flight", IO_TIMEOUT, || {
        let mut held = TcpStream::connect(&api).unwrap();
        held.write_all(
            format!(
                "POST {SVC} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let (code, text) = common::raw_http(&api, post.as_bytes());
        (code == 429).then_some((held, code, text))
    });
    assert_eq!(code, 429);
    assert!(
        text.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"),
        "{text}"
    );
    assert!(
        text.ends_with("Too many requests, please try again later.\n"),
        "{text}"
    );
    // Reads have their own bound; a watch is long-running and takes no slot from it.
    let mut watch = TcpStream::connect(&api).unwrap();
    watch
        .write_all(
            format!("GET {SVC}?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut first = [0u8; 12];
    watch.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    watch.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let list = format!(
        "GET {SVC} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(common::raw_http(&api, list.as_bytes()).0, 200);
    // Once the held write is gone, writes are served again.
    drop(held);
    let (code, text) = wait_for("the slot to come back", IO_TIMEOUT, || {
        let (code, text) = common::raw_http(&api, post.as_bytes());
        (code != 429).then_some((code, text))
    });
    // 201, or 409 if a probe above got a slot before the held write did.
    assert!(matches!(code, 201 | 409), "{text}");
}
