//! OpenAPI against a real `wisp serve`: the documents as kube-apiserver serves them (hashes,
//! ETags, 304, 301 for a stale hash, 406 for protobuf), and the real `kubectl` reading them
//! (`kubectl explain`, and `kubectl apply` leaving field validation to the server, as it
//! does against kube-apiserver). The kubectl tests are skipped (with a note) when kubectl is
//! not installed.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{path::Path, process::Command};

use common::Server;
use serde_json::Value;

#[test]
fn openapi_documents_with_hashes_etags_and_not_modified() {
    let s = Server::start();
    common::install_crypto_provider();
    // No redirects followed: the 301 for a stale hash is what is tested.
    let http = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .tls_certs_only([
            reqwest::Certificate::from_pem(&std::fs::read(s.ca_path()).unwrap()).unwrap(),
        ])
        .build()
        .unwrap();
    let get = |path: &str| http.get(s.url(path)).header("Authorization", s.auth());
    let index: Value = get("/openapi/v3").send().unwrap().json().unwrap();
    let paths = index["paths"].as_object().unwrap();
    for gv in [
        "api/v1",
        "apis/serving.knative.dev/v1",
        "apis/autoscaling.internal.knative.dev/v1alpha1",
    ] {
        assert!(paths.contains_key(gv), "{gv} missing from {index}");
    }
    let url = index["paths"]["apis/serving.knative.dev/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let hash = url.split("hash=").nth(1).unwrap().to_string();
    assert_eq!(hash.len(), 128, "a hex SHA-512: {hash}");

    // With the current hash: the document, immutable, with its ETag.
    let resp = get(url).send().unwrap();
    assert_eq!(resp.status(), 200);
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(etag, format!("\"{hash}\""));
    assert_eq!(resp.headers()["cache-control"], "public, immutable");
    let doc: Value = resp.json().unwrap();
    assert_eq!(doc["openapi"], "3.0.0");
    let svc = &doc["components"]["schemas"]["dev.knative.serving.v1.Service"];
    assert_eq!(
        svc["x-kubernetes-group-version-kind"][0],
        serde_json::json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"})
    );

    // Without a hash: the same document, not marked immutable; If-None-Match → 304.
    let plain = "/openapi/v3/apis/serving.knative.dev/v1";
    let resp = get(plain).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("cache-control").is_none());
    let resp = get(plain).header("If-None-Match", &etag).send().unwrap();
    assert_eq!(resp.status(), 304);
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), etag);
    assert!(resp.bytes().unwrap().is_empty());
    let resp = get(plain)
        .header("If-None-Match", "\"something-else\"")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);

    // A stale hash redirects to the current document.
    let resp = get("/openapi/v3/apis/serving.knative.dev/v1?hash=0BSOLETE")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 301);
    assert_eq!(resp.headers()["location"].to_str().unwrap(), url);

    // Only JSON is served: a client that takes only protobuf gets a 406 Status; a write
    // is a 405 Status.
    let resp = get(plain)
        .header(
            "Accept",
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 406);
    assert_eq!(resp.json::<Value>().unwrap()["reason"], "NotAcceptable");
    let resp = http
        .post(s.url(plain))
        .header("Authorization", s.auth())
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.json::<Value>().unwrap()["reason"], "MethodNotAllowed");

    // An unknown group-version: kube's 404 Status.
    let resp = get("/openapi/v3/apis/nope.example.com/v1").send().unwrap();
    assert_eq!(resp.status(), 404);
    let status: Value = resp.json().unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");

    // v2: JSON only; the protobuf client-go asks for by default gets a 406 Status.
    let resp = get("/openapi/v2").send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("etag"));
    let v2: Value = resp.json().unwrap();
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["dev.knative.serving.v1.Revision"].is_object());
    assert!(v2["definitions"]["io.k8s.api.core.v1.ConfigMap"].is_object());
    let resp = get("/openapi/v2")
        .header(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 406);
    assert_eq!(resp.json::<Value>().unwrap()["reason"], "NotAcceptable");
}

/// kubectl with the kubeconfig `wisp kubeconfig` prints, and its own cache dir.
struct Kubectl {
    kubeconfig: std::path::PathBuf,
    cache: std::path::PathBuf,
}

impl Kubectl {
    fn new(dir: &Path, s: &Server) -> Option<Kubectl> {
        let installed = Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            eprintln!("kubectl is not installed: skipping");
            return None;
        }
        let out = Command::new(common::wisp_bin())
            .arg("kubeconfig")
            .arg("--data-dir")
            .arg(s.data_dir())
            .output()
            .unwrap();
        assert!(out.status.success());
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, out.stdout).unwrap();
        Some(Kubectl {
            kubeconfig,
            cache: dir.join("cache"),
        })
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(args)
            .arg("--cache-dir")
            .arg(&self.cache)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.cache.parent().unwrap())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args, None);
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }
}

/// The names listed under `FIELDS:` in `kubectl explain` output.
fn explained_fields(out: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("FIELDS:"))
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn kubectl_explain_prints_descriptions_and_fields() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let Some(k) = Kubectl::new(dir.path(), &s) else {
        return;
    };

    let out = k.ok(&["explain", "ksvc"]);
    assert!(out.contains("GROUP:      serving.knative.dev"), "{out}");
    assert!(out.contains("KIND:       Service"), "{out}");
    assert!(out.contains("VERSION:    v1"), "{out}");
    assert!(
        out.contains("Service acts as a top-level container that manages a Route"),
        "{out}"
    );
    assert_eq!(
        explained_fields(&out),
        ["apiVersion", "kind", "metadata", "spec", "status"],
        "{out}"
    );

    let out = k.ok(&["explain", "ksvc.spec.template.spec.containers"]);
    assert!(out.contains("FIELD: containers <[]Object>"), "{out}");
    assert!(
        out.contains("List of containers belonging to the pod"),
        "{out}"
    );
    let fields = explained_fields(&out);
    for f in [
        "args",
        "env",
        "image",
        "ports",
        "readinessProbe",
        "volumeMounts",
    ] {
        assert!(
            fields.iter().any(|x| x == f),
            "{f} not in {fields:?}\n{out}"
        );
    }
    assert!(
        out.contains("image\t<string>\n    Container image name"),
        "{out}"
    );

    let out = k.ok(&["explain", "revision.status"]);
    assert!(out.contains("KIND:       Revision"), "{out}");
    assert!(
        out.contains("RevisionStatus communicates the observed state of the Revision."),
        "{out}"
    );
    let fields = explained_fields(&out);
    for f in [
        "actualReplicas",
        "conditions",
        "containerStatuses",
        "desiredReplicas",
        "logUrl",
        "observedGeneration",
    ] {
        assert!(
            fields.iter().any(|x| x == f),
            "{f} not in {fields:?}\n{out}"
        );
    }

    // Volumes and env sources wisp keeps as JSON still explain their fields.
    let out = k.ok(&["explain", "ksvc.spec.template.spec.volumes.secret"]);
    let fields = explained_fields(&out);
    for f in ["defaultMode", "items", "optional", "secretName"] {
        assert!(
            fields.iter().any(|x| x == f),
            "{f} not in {fields:?}\n{out}"
        );
    }
    let out = k.ok(&[
        "explain",
        "ksvc.spec.template.spec.containers.env.valueFrom.secretKeyRef",
    ]);
    assert!(out.contains("key\t<string> -required-"), "{out}");

    // The core kinds come from /openapi/v3/api/v1.
    let out = k.ok(&["explain", "secret.stringData"]);
    assert!(
        out.contains("FIELD: stringData <map[string]string>"),
        "{out}"
    );

    // A field that does not exist: kubectl's own message.
    let (ok, _, err) = k.run(&["explain", "ksvc.spec.nope"], None);
    assert!(!ok);
    assert!(
        err.contains(r#"field "nope" does not exist"#),
        "unexpected: {err}"
    );
}

#[test]
fn kubectl_apply_leaves_field_validation_to_the_server() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let Some(k) = Kubectl::new(dir.path(), &s) else {
        return;
    };
    let yaml = "apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  foo: bar
  template:
    spec:
      containers:
      - image: example.com/hello
";
    // kubectl reads the PATCH operation of the Service in /openapi/v3 to decide
    // (query_param_verifier_v3.go): it finds `fieldValidation`, so it validates on the
    // server, as against kube-apiserver, and sends fieldValidation=Strict.
    let (ok, _, err) = k.run(&["apply", "-f", "-", "-v=6"], Some(yaml));
    assert!(!ok, "an unknown field was accepted: {err}");
    assert!(
        err.contains("/namespaces/default/services?fieldManager=kubectl-client-side-apply&fieldValidation=Strict"),
        "{err}"
    );
    assert!(
        !err.contains("error validating data"),
        "kubectl validated on the client: {err}"
    );
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with(r#"The request is invalid: error when creating "STDIN""#)
            || last.starts_with(r#"Error from server (BadRequest): error when creating "STDIN""#),
        "{last}"
    );
    assert!(last.contains("spec.foo"), "{last}");
}
