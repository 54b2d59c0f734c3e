//! Issue #23 "The front door holds under abuse", part 1: one unambiguous Host per request.
//! Raw HTTP/1.1 bytes and h2c requests against a real `wisp serve`, on the external and the
//! cluster-local ingress, to a revision reached through the queue (TBC 0, activator out of
//! the path) and one that always goes through the activator (TBC -1).
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Server, sample_bin, wait_for};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Two `echo` services: `viaq` (activator out of the path once a replica is ready) and
/// `viaa` (target-burst-capacity -1: the activator stays in the path).
fn start() -> Server {
    let s = Server::start();
    let echo = sample_bin("echo").display().to_string();
    for (name, tbc) in [("viaq", "0"), ("viaa", "-1")] {
        s.apply(&format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/target-burst-capacity: \"{tbc}\"\n    spec:\n      containers:\n      - command: [{echo:?}]\n"
        ));
    }
    for name in ["viaq", "viaa"] {
        wait_for(&format!("services/{name} Ready"), READY_TIMEOUT, || {
            s.ready("services", name).filter(|(st, _, _)| st == "True")
        });
        let host = format!("{name}.default.example.com");
        wait_for(&format!("{host} answering 200"), READY_TIMEOUT, || {
            let (code, _) = raw(
                &s.http_addr,
                &format!("GET /headers HTTP/1.1\r\nHost: {host}\r\n"),
            );
            (code == 200).then_some(())
        });
    }
    s
}

/// Sends a request head (`head` without its final empty line; `Connection: close` is
/// added) and returns the status code and the body.
fn raw(addr: &str, head: &str) -> (u16, String) {
    let (code, text) =
        common::raw_http(addr, format!("{head}Connection: close\r\n\r\n").as_bytes());
    assert_ne!(code, 0, "no status line in {text:?}");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// The values of `name` in the echo app's `/headers` answer.
fn seen(body: &str, name: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
        .collect()
}

#[test]
fn http1_host_must_be_one_and_valid_on_every_listener_and_path() {
    let s = start();
    for (addr, domain) in [
        (&s.http_addr, "default.example.com"),
        (&s.local_addr, "default.svc.cluster.local"),
    ] {
        for svc in ["viaq", "viaa"] {
            let a = format!("{svc}.{domain}");
            let (code, body) = raw(addr, &format!("GET /headers HTTP/1.1\r\nHost: {a}\r\n"));
            assert_eq!(code, 200, "{a}: {body}");
            assert_eq!(seen(&body, "host"), [a.as_str()], "{body}");

            let bad: [(String, &str); 9] = [
                (
                    format!("Host: {a}\r\nHost: nope.{domain}\r\n"),
                    "more than one Host header",
                ),
                (
                    format!("Host: nope.{domain}\r\nHost: {a}\r\n"),
                    "more than one Host header",
                ),
                (
                    format!("Host: {a}\r\nHost: {a}\r\n"),
                    "more than one Host header",
                ),
                (format!("Host: user@{a}\r\n"), "invalid Host header"),
                (format!("Host: {a}/x\r\n"), "invalid Host header"),
                (format!("Host: {a}:99999\r\n"), "invalid Host header"),
                (format!("Host: {a} x\r\n"), "invalid Host header"),
                (String::new(), "missing Host header"),
                ("Host: \r\n".to_string(), "missing Host header"),
            ];
            for (lines, why) in bad {
                let (code, body) = raw(addr, &format!("GET /headers HTTP/1.1\r\n{lines}"));
                assert_eq!(code, 400, "{lines:?} → {body}");
                assert_eq!(body.trim(), why, "{lines:?}");
            }

            // Absolute form: routed by the authority, and the app gets that Host alone.
            let (code, body) = raw(
                addr,
                &format!("GET http://{a}/headers HTTP/1.1\r\nHost: nope.{domain}\r\n"),
            );
            assert_eq!(code, 200, "{body}");
            assert_eq!(seen(&body, "host"), [a.as_str()], "{body}");
            let (code, body) = raw(
                addr,
                &format!("GET http://u@{a}/headers HTTP/1.1\r\nHost: {a}\r\n"),
            );
            assert_eq!((code, body.trim()), (400, "invalid request authority"));
            let (code, _) = raw(addr, &format!("GET http://{a}/headers HTTP/1.1\r\n"));
            assert_eq!(code, 400, "HTTP/1.1 without Host, even in absolute form");

            // A client cannot pick the Host the app sees with Knative's internal header.
            let (code, body) = raw(
                addr,
                &format!(
                    "GET /headers HTTP/1.1\r\nHost: {a}\r\nK-Original-Host: other.example.com\r\n"
                ),
            );
            assert_eq!(code, 200, "{body}");
            assert_eq!(seen(&body, "host"), [a.as_str()], "{body}");
            assert!(seen(&body, "k-original-host").is_empty(), "{body}");
        }
    }
}

/// One h2c request with `:authority` = `authority` and the given `host` fields.
async fn h2(addr: &str, authority: &str, hosts: &[&str]) -> (u16, String) {
    let stream = tokio::time::timeout(IO_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2c handshake");
    tokio::spawn(conn);
    let mut req = hyper::Request::get(format!("http://{authority}/headers"));
    for h in hosts {
        req = req.header("host", *h);
    }
    let req = req.body(Empty::<Bytes>::new()).unwrap();
    let resp = tokio::time::timeout(IO_TIMEOUT, sender.send_request(req))
        .await
        .expect("an answer in time")
        .expect("h2c response");
    let code = resp.status().as_u16();
    let body = tokio::time::timeout(IO_TIMEOUT, resp.into_body().collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn h2c_authority_and_host_must_agree() {
    let s = start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (addr, domain) in [
            (&s.http_addr, "default.example.com"),
            (&s.local_addr, "default.svc.cluster.local"),
        ] {
            for svc in ["viaq", "viaa"] {
                let a = format!("{svc}.{domain}");
                let (code, body) = h2(addr, &a, &[]).await;
                assert_eq!(code, 200, "{body}");
                assert_eq!(seen(&body, "host"), [a.as_str()], "{body}");
                let (code, body) = h2(addr, &a, &[&a]).await;
                assert_eq!(code, 200, "{body}");
                assert_eq!(seen(&body, "host"), [a.as_str()], "{body}");

                let other = format!("nope.{domain}");
                let (code, body) = h2(addr, &a, &[&other]).await;
                assert_eq!(
                    (code, body.trim()),
                    (400, ":authority and Host header disagree")
                );
                let (code, body) = h2(addr, &a, &[&a, &a]).await;
                assert_eq!((code, body.trim()), (400, "more than one Host header"));
                let (code, body) = h2(addr, &format!("u@{a}"), &[]).await;
                assert_eq!((code, body.trim()), (400, "invalid request authority"));
            }
        }
    });
}
