//! The API over TLS and who calls it: token-file users recorded as creator, plain HTTP
//! refused off loopback, the `wisp` CLI's trust in the server's CA, a bad token file.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::process::Command;

use common::{Server, wisp_bin};
use serde_json::{Value, json};

const SVC: &str = "/apis/serving.knative.dev/v1/namespaces/default/services";

fn hello(name: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"command": ["/bin/hello"]}]}}},
    })
}

#[test]
fn token_file_users_are_recorded_as_creator_and_last_modifier() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    std::fs::write(
        &file,
        "alicetoken,alice,1001,\"dev,ops\"\nbobtoken,bob,1002\n",
    )
    .unwrap();
    let s = Server::start_with(&["--token-auth-file", file.to_str().unwrap()]);
    let http = s.http();
    let r = http
        .post(s.url(SVC))
        .bearer_auth("alicetoken")
        .json(&hello("by-alice"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let r = http
        .patch(s.url(&format!("{SVC}/by-alice")))
        .bearer_auth("bobtoken")
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"spec":{"template":{"spec":{"containers":[{"command":["/bin/hello2"]}]}}}}"#)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let o: Value = r.json().unwrap();
    let ann = &o["metadata"]["annotations"];
    assert_eq!(ann["serving.knative.dev/creator"], "alice", "{o}");
    assert_eq!(ann["serving.knative.dev/lastModifier"], "bob", "{o}");

    // The admin token still works; an unknown one gets kube-apiserver's 401 Status.
    let r = http
        .post(s.url(SVC))
        .header("authorization", s.auth())
        .json(&hello("by-admin"))
        .send()
        .unwrap();
    let o: Value = r.json().unwrap();
    assert_eq!(
        o["metadata"]["annotations"]["serving.knative.dev/creator"],
        "wisp-admin"
    );
    let r = http.get(s.url(SVC)).bearer_auth("carol").send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let status: Value = r.json().unwrap();
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
}

fn serve_fails(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(wisp_bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--http-addr", "127.0.0.1:0", "--local-addr", "127.0.0.1:0"])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_start_flags_fail_before_anything_listens() {
    // Plain HTTP on a non-loopback address: refused by the flag check, before binding.
    let err = serve_fails(&["--api-insecure-http", "--api-addr", "0.0.0.0:0"]);
    assert!(
        err.contains(
            "refusing to serve the API over plain HTTP on the non-loopback address 0.0.0.0:0"
        ),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");

    // A token file with a short line names the line.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    std::fs::write(&file, "t1,alice,1\nt2,bob\n").unwrap();
    let err = serve_fails(&[
        "--api-addr",
        "127.0.0.1:0",
        "--token-auth-file",
        file.to_str().unwrap(),
    ]);
    assert!(
        err.contains("must have at least 3 columns (token, user name, user uid), found 2 (line 2)"),
        "{err}"
    );

    let err = serve_fails(&["--api-addr", "127.0.0.1:0", "--tls-san", "bad name!"]);
    assert!(
        err.contains("neither an IP address nor a valid DNS name"),
        "{err}"
    );
}

#[test]
fn the_cli_trusts_only_the_servers_ca() {
    let s = Server::start();
    let out = s.cli().args(["get", "ksvc"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Another server's CA: the certificate does not verify.
    let other = Server::start();
    let out = s
        .cli()
        .args(["get", "ksvc"])
        .env("WISP_CERTIFICATE_AUTHORITY", other.ca_path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the API server's certificate at https://")
            && err.contains("does not verify against the CA")
            && err.contains("invalid peer certificate"),
        "{err}"
    );

    // No CA file at all.
    let out = s
        .cli()
        .args(["get", "ksvc"])
        .env("WISP_CERTIFICATE_AUTHORITY", "/nonexistent/ca.crt")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the API server's CA certificate /nonexistent/ca.crt"),
        "{err}"
    );
}

#[test]
fn kubeconfig_merge_keeps_other_entries_and_switches_context() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: https://prod}\n\
         users: []\ncontexts:\n- name: prod\n  context: {cluster: prod, user: prod}\ncurrent-context: prod\n",
    )
    .unwrap();
    let out = Command::new(wisp_bin())
        .args(["kubeconfig", "--merge", "--data-dir"])
        .arg(s.data_dir())
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(merged["current-context"], "wisp");
    assert_eq!(merged["clusters"][0]["name"], "prod");
    assert_eq!(merged["clusters"][1]["name"], "wisp");
    assert_eq!(
        merged["clusters"][1]["cluster"]["server"],
        s.server_url().as_str()
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}
