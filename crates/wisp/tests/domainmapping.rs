//! DomainMapping end to end (issue #19): a real `wisp serve` maps a custom domain to a
//! Knative Service through its ingress, refuses a domain another namespace claimed, and
//! stops routing a mapping as soon as it is deleted.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::{
    Server,
    kubectl::{Kubectl, kubectl_installed, words},
    sample_bin, wait_for,
};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A Service running the `bin` sample (`echo` shows the headers it got, `hello` greets
/// `target`).
fn service(ns: &str, name: &str, bin: &str, target: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{:?}]\n        env:\n        - name: TARGET\n          value: {target}\n",
        sample_bin(bin).display().to_string()
    )
}

fn mapping(ns: &str, domain: &str, svc: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1beta1\nkind: DomainMapping\nmetadata:\n  name: {domain}\n  namespace: {ns}\nspec:\n  ref:\n    apiVersion: serving.knative.dev/v1\n    kind: Service\n    name: {svc}\n"
    )
}

fn dm_path(ns: &str, name: &str) -> String {
    format!("/apis/serving.knative.dev/v1beta1/namespaces/{ns}/domainmappings/{name}")
}

/// A condition of a DomainMapping: (status, reason, message).
fn condition(s: &Server, ns: &str, name: &str, ty: &str) -> Option<(String, String, String)> {
    let o = s.get_json(&dm_path(ns, name))?;
    let c = o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?
        .clone();
    let f = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((f("status"), f("reason"), f("message")))
}

fn wait_ready(s: &Server, ns: &str, kind_path: &str, name: &str) {
    wait_for(&format!("{ns}/{name} Ready"), READY_TIMEOUT, || {
        let o = s.get_json(&format!("{kind_path}/namespaces/{ns}/{name}"))?;
        o["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    });
}

/// `curl -H "Host: {host}" http://{addr}{path}` → (status, body).
fn get(addr: &str, host: &str, path: &str) -> (u16, String) {
    let c = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    match c
        .get(format!("http://{addr}{path}"))
        .header("host", host)
        .send()
    {
        Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
        Err(e) => (0, format!("request failed: {e}")),
    }
}

fn cli(s: &Server, args: &[&str]) -> String {
    let out = s.cli().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "wisp {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_domain_routes_to_its_service_until_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "config-network:\n  autocreate-cluster-domain-claims: \"true\"\n",
    )
    .unwrap();
    let s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    s.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n");
    s.apply(&service("default", "hello", "echo", "Default"));
    s.apply(&service("other", "hello", "hello", "Other"));
    let services = "/apis/serving.knative.dev/v1";
    wait_ready(&s, "default", services, "services/hello");
    wait_ready(&s, "other", services, "services/hello");

    s.apply(&mapping("default", "www.example.org", "hello"));
    wait_for("the mapping Ready", READY_TIMEOUT, || {
        condition(&s, "default", "www.example.org", "Ready").filter(|c| c.0 == "True")
    });
    let dm = s.get_json(&dm_path("default", "www.example.org")).unwrap();
    assert_eq!(dm["status"]["url"], "http://www.example.org");
    assert_eq!(dm["spec"]["ref"]["namespace"], "default");
    let claim = s
        .get_json(
            "/apis/networking.internal.knative.dev/v1alpha1/clusterdomainclaims/www.example.org",
        )
        .unwrap();
    assert_eq!(claim["spec"]["namespace"], "default");

    // `curl -H 'Host: www.example.org' http://<ingress>/headers`: the Service answers, and
    // sees the mapped domain as its Host.
    let (st, body) = get(&s.http_addr, "www.example.org", "/headers");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("host: www.example.org\n"), "{body}");
    // Only on the external listener.
    assert_eq!(get(&s.local_addr, "www.example.org", "/headers").0, 404);

    // Another namespace cannot take the domain.
    s.apply(&mapping("other", "www.example.org", "hello"));
    let claimed = wait_for("the second mapping refused", READY_TIMEOUT, || {
        condition(&s, "other", "www.example.org", "DomainClaimed").filter(|c| c.0 == "False")
    });
    assert_eq!(
        claimed,
        (
            "False".into(),
            "DomainAlreadyClaimed".into(),
            "The domain name is already in use by another DomainMapping".into()
        )
    );
    // The domain still goes to the first namespace's Service.
    let (st, body) = get(&s.http_addr, "www.example.org", "/headers");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("host: www.example.org\n"), "{body}");

    // `wisp get dm` shows both, with Knative's columns.
    let out = cli(&s, &["get", "dm", "-A"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("URL") && lines[0].contains("READY"),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.contains("www.example.org")
            && l.contains("http://www.example.org")
            && l.contains("True")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("other") && l.contains("DomainAlreadyClaimed")),
        "{out}"
    );

    // Deleting the mapping stops the routing at once; the claim goes with it, and the other
    // namespace's mapping then gets the domain.
    cli(&s, &["delete", "domainmapping", "www.example.org"]);
    wait_for("the domain unrouted", Duration::from_secs(5), || {
        let (st, body) = get(&s.http_addr, "www.example.org", "/headers");
        (st == 404 || body == "Hello Other!\n").then_some(())
    });
    wait_for("the other namespace's mapping Ready", READY_TIMEOUT, || {
        condition(&s, "other", "www.example.org", "Ready").filter(|c| c.0 == "True")
    });
    let claim = s
        .get_json(
            "/apis/networking.internal.knative.dev/v1alpha1/clusterdomainclaims/www.example.org",
        )
        .unwrap();
    assert_eq!(claim["spec"]["namespace"], "other");
    assert_eq!(
        get(&s.http_addr, "www.example.org", "/"),
        (200, "Hello Other!\n".into())
    );
}

#[test]
fn invalid_mappings_are_refused_with_knative_s_messages() {
    let s = Server::start();
    let out = s
        .cli()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(
                mapping("default", "hello.default.svc.cluster.local", "hello").as_bytes(),
            )?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid name \"hello.default.svc.cluster.local\": must not be a subdomain of cluster local domain \"cluster.local\": metadata.name"),
        "{err}"
    );
}

#[test]
fn kubectl_applies_and_gets_domain_mappings() {
    if !kubectl_installed() {
        eprintln!("kubectl not on PATH: skipping");
        return;
    }
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new(dir.path(), &s);
    // Without autocreate (Knative's default) the claim is the user's to make.
    let file = dir.path().join("dm.yaml");
    std::fs::write(
        &file,
        format!(
            "{}---\n{}---\napiVersion: networking.internal.knative.dev/v1alpha1\nkind: ClusterDomainClaim\nmetadata:\n  name: www.example.org\nspec:\n  namespace: default\n",
            service("default", "hello", "hello", "Kubectl"),
            mapping("default", "www.example.org", "hello")
        ),
    )
    .unwrap();
    let out = k.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(
        out.contains("domainmapping.serving.knative.dev/www.example.org created")
            && out.contains(
                "clusterdomainclaim.networking.internal.knative.dev/www.example.org created"
            ),
        "{out}"
    );
    wait_for("the mapping Ready", READY_TIMEOUT, || {
        condition(&s, "default", "www.example.org", "Ready").filter(|c| c.0 == "True")
    });
    assert_eq!(
        words(&k.ok(&["get", "dm"])),
        words(
            "NAME              URL                      READY   REASON
             www.example.org   http://www.example.org   True"
        )
    );
    assert_eq!(
        k.ok(&["get", "cdc", "-o", "jsonpath={.items[*].spec.namespace}"]),
        "default"
    );
    // Its KIngress, as Knative makes it.
    assert_eq!(
        k.ok(&[
            "get",
            "king",
            "www.example.org",
            "-o",
            "jsonpath={.spec.rules[0].http.paths[0].rewriteHost}"
        ]),
        "hello.default.svc.cluster.local"
    );
    assert_eq!(
        get(&s.http_addr, "www.example.org", "/"),
        (200, "Hello Kubectl!\n".into())
    );
    k.ok(&["delete", "dm", "www.example.org"]);
    wait_for("the domain unrouted", Duration::from_secs(5), || {
        (get(&s.http_addr, "www.example.org", "/").0 == 404).then_some(())
    });
}

/// A CA named `ca_name` and a certificate it signs for `host`, as PEM: (ca.crt, tls.crt,
/// tls.key).
fn certificate_for(host: &str, ca_name: &str) -> (String, String, String) {
    certificate_with(host, ca_name, false)
}

/// [`certificate_for`], the leaf valid only in 2020 when `expired`.
fn certificate_with(host: &str, ca_name: &str, expired: bool) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Subjects of their own: a leaf whose subject is its issuer's looks self-signed.
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_cert.pem(), ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec![host.to_string()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, host);
    if expired {
        leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
        leaf.not_after = rcgen::date_time_ymd(2020, 12, 31);
    }
    let leaf = leaf.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

/// `curl --cacert ca --resolve host:port:127.0.0.1 https://host:port/path` with extra
/// flags: (success, the `-w` output then the body, stderr).
fn curl_https(
    s: &Server,
    ca: &std::path::Path,
    host: &str,
    path: &str,
    extra: &[&str],
) -> (bool, String, String) {
    let port = s.https_addr.rsplit_once(':').unwrap().1;
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(extra)
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether curl (which the HTTPS tests drive as a user would) is installed.
fn curl_installed() -> bool {
    std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok()
}

/// A server with an HTTPS listener and `config` (YAML) as its `--config`, written in `tmp`.
fn https_server(tmp: &tempfile::TempDir, config: &str) -> Server {
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, config).unwrap();
    Server::start_with(&[
        "--config",
        cfg.to_str().unwrap(),
        "--https-addr",
        "127.0.0.1:0",
    ])
}

#[test]
fn https_serves_a_mapping_s_certificate_by_sni() {
    if !curl_installed() {
        eprintln!("curl not on PATH: skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = https_server(
        &tmp,
        "config-network:\n  autocreate-cluster-domain-claims: \"true\"\n",
    );
    assert!(!s.https_addr.is_empty());
    let (ca, crt, key) = certificate_for("secure.example.org", "test-ca");
    let ca_path = tmp.path().join("ca.crt");
    std::fs::write(&ca_path, &ca).unwrap();
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "secure-cert", "namespace": "default"},
        "stringData": {"tls.crt": crt, "tls.key": key},
    });
    s.apply(&secret.to_string());
    s.apply(&service("default", "hello", "echo", "Secure"));
    s.apply(&format!(
        "{}  tls:\n    secretName: secure-cert\n",
        mapping("default", "secure.example.org", "hello")
    ));
    wait_for("the mapping Ready", READY_TIMEOUT, || {
        condition(&s, "default", "secure.example.org", "Ready").filter(|c| c.0 == "True")
    });
    let dm = s
        .get_json(&dm_path("default", "secure.example.org"))
        .unwrap();
    assert_eq!(dm["status"]["url"], "https://secure.example.org");
    assert_eq!(
        condition(
            &s,
            "default",
            "secure.example.org",
            "CertificateProvisioned"
        )
        .unwrap(),
        (
            "True".into(),
            "CertificateExternallyProvided".into(),
            "TLS certificate was provided externally".into()
        )
    );

    // The mapping's certificate, chosen by SNI; HTTP/1.1 and HTTP/2 by ALPN; the app is told
    // the request came over https.
    let (ok, out, err) = curl_https(
        &s,
        &ca_path,
        "secure.example.org",
        "/headers",
        &["--http1.1", "-w", "%{http_code} %{http_version}\n"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("host: secure.example.org\n"), "{out}");
    assert!(out.contains("x-forwarded-proto: https\n"), "{out}");
    assert!(out.ends_with("200 1.1\n"), "{out}");
    let (ok, out, err) = curl_https(
        &s,
        &ca_path,
        "secure.example.org",
        "/headers",
        &["--http2", "-w", "%{http_code} %{http_version}\n"],
    );
    assert!(ok, "{err}");
    assert!(out.ends_with("200 2\n"), "{out}");

    // A client that does not trust the issuer refuses the certificate.
    let (other_ca, _, _) = certificate_for("secure.example.org", "other-ca");
    let other_path = tmp.path().join("other-ca.crt");
    std::fs::write(&other_path, other_ca).unwrap();
    let (ok, _, err) = curl_https(&s, &other_path, "secure.example.org", "/", &[]);
    assert!(!ok, "an untrusted certificate was accepted");
    assert!(err.contains("certificate"), "{err}");
    // A host with no certificate gets no handshake.
    let (ok, _, err) = curl_https(&s, &ca_path, "nocert.example.org", "/", &[]);
    assert!(!ok, "a host without a certificate was served");
    assert!(!err.is_empty());

    // A rustls client (reqwest) agrees.
    let port = s.https_addr.rsplit_once(':').unwrap().1;
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve(
            "secure.example.org",
            format!("127.0.0.1:{port}").parse().unwrap(),
        )
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let r = client
        .get(format!("https://secure.example.org:{port}/headers"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().unwrap().contains("host: secure.example.org\n"));
}

#[test]
fn external_domain_tls_uses_wisp_s_ca_and_redirects_plain_http() {
    if !curl_installed() {
        eprintln!("curl not on PATH: skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = https_server(
        &tmp,
        "config-network:\n  external-domain-tls: Enabled\n  http-protocol: Redirected\n  autocreate-cluster-domain-claims: \"true\"\n",
    );
    let ca = s.ca_path();
    s.apply(&service("default", "hello", "hello", "TLS"));
    // Opted out by the annotation (which reaches its Route).
    s.apply(&service("default", "plain", "hello", "Plain").replace(
        "  namespace: default\n",
        "  namespace: default\n  annotations:\n    networking.knative.dev/disable-external-domain-tls: \"true\"\n",
    ));
    let services = "/apis/serving.knative.dev/v1";
    wait_ready(&s, "default", services, "services/hello");
    wait_ready(&s, "default", services, "services/plain");
    let url = |name: &str| {
        s.get_json(&format!("{services}/namespaces/default/services/{name}"))
            .unwrap()["status"]["url"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(url("hello"), "https://hello.default.example.com");
    assert_eq!(url("plain"), "http://plain.default.example.com");

    // The host's certificate comes from wisp's CA (the API's, `wisp kubeconfig`'s).
    let (ok, out, err) = curl_https(&s, &ca, "hello.default.example.com", "/", &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "Hello TLS!\n");
    // Plain HTTP to it is redirected; the opted-out Service is served over HTTP only.
    let c = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = c
        .get(format!("http://{}/x?y=1", s.http_addr))
        .header("host", "hello.default.example.com")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 301);
    assert_eq!(
        r.headers()["location"],
        "https://hello.default.example.com/x?y=1"
    );
    assert_eq!(
        get(&s.http_addr, "plain.default.example.com", "/"),
        (200, "Hello Plain!\n".into())
    );
    let (ok, _, _) = curl_https(&s, &ca, "plain.default.example.com", "/", &[]);
    assert!(!ok, "an opted-out host got a certificate");

    // A DomainMapping without spec.tls gets one from the CA too.
    s.apply(&mapping("default", "www.example.org", "hello"));
    wait_for("the mapping Ready", READY_TIMEOUT, || {
        condition(&s, "default", "www.example.org", "Ready").filter(|c| c.0 == "True")
    });
    let dm = s.get_json(&dm_path("default", "www.example.org")).unwrap();
    assert_eq!(dm["status"]["url"], "https://www.example.org");
    let (ok, out, err) = curl_https(&s, &ca, "www.example.org", "/", &["--http2"]);
    assert!(ok, "{err}");
    assert_eq!(out, "Hello TLS!\n");
}

/// One unary gRPC call (`POST`, `application/grpc`, `te: trailers`, one length-prefixed
/// message) over HTTP/2 on TLS — ALPN `h2`, SNI `host`, trusting `ca_pem` — to `addr`:
/// (status, content type, the answer's bytes, its `grpc-status` trailer).
fn grpc_over_tls(
    addr: &str,
    host: &str,
    ca_pem: &[u8],
    message: &[u8],
) -> (u16, String, Vec<u8>, Option<String>) {
    use http_body_util::{BodyExt, Full};
    use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let call = async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from(host.to_string()).unwrap();
            let tls = connector.connect(name, tcp).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2");
            let (mut send, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tls),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            let req = hyper::Request::post(format!("https://{host}/echo.Echo/Say"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(Full::new(bytes::Bytes::from(frame)))
                .unwrap();
            let resp = send.send_request(req).await.unwrap();
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            let status = resp.status().as_u16();
            let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
            let collected = resp.into_body().collect().await.unwrap();
            let grpc_status = collected
                .trailers()
                .and_then(|t| t.get("grpc-status"))
                .map(|v| v.to_str().unwrap().to_string());
            (
                status,
                content_type,
                collected.to_bytes().to_vec(),
                grpc_status,
            )
        };
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the gRPC call answered in time")
    })
}

#[test]
fn a_grpc_call_over_https_keeps_its_messages_and_trailers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = https_server(&tmp, "config-network:\n  external-domain-tls: Enabled\n");
    // gRPC apps name their port h2c: wisp speaks HTTP/2 to them (Knative's rule).
    s.apply(&format!(
        "{}        ports:\n        - name: h2c\n          containerPort: 8080\n",
        service("default", "grpc", "echo", "gRPC")
    ));
    wait_ready(
        &s,
        "default",
        "/apis/serving.knative.dev/v1",
        "services/grpc",
    );
    let ca = std::fs::read(s.ca_path()).unwrap();
    let (status, content_type, body, grpc_status) = grpc_over_tls(
        &s.https_addr,
        "grpc.default.example.com",
        &ca,
        b"\x0a\x05hello",
    );
    assert_eq!((status, content_type.as_str()), (200, "application/grpc"));
    assert_eq!(
        body, b"\x00\x00\x00\x00\x07\x0a\x05hello",
        "the message, framed"
    );
    assert_eq!(
        grpc_status.as_deref(),
        Some("0"),
        "the trailers came through"
    );
}

/// A mapping's Secret holding a certificate for another name, or an expired one: wisp
/// serves what the Secret holds (as Knative's gateway does), and a client refuses it.
#[test]
fn a_mismatched_or_expired_certificate_is_refused_by_the_client() {
    if !curl_installed() {
        eprintln!("curl not on PATH: skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = https_server(
        &tmp,
        "config-network:\n  autocreate-cluster-domain-claims: \"true\"\n",
    );
    s.apply(&service("default", "hello", "hello", "TLS"));
    for (domain, cert_host, expired) in [
        ("mismatch.example.org", "other.example.org", false),
        ("expired.example.org", "expired.example.org", true),
    ] {
        let (ca, crt, key) = certificate_with(cert_host, "test-ca", expired);
        let ca_path = tmp.path().join(format!("{domain}.ca.crt"));
        std::fs::write(&ca_path, &ca).unwrap();
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": domain.replace('.', "-"), "namespace": "default"},
            "stringData": {"tls.crt": crt, "tls.key": key},
        });
        s.apply(&secret.to_string());
        s.apply(&format!(
            "{}  tls:\n    secretName: {}\n",
            mapping("default", domain, "hello"),
            domain.replace('.', "-")
        ));
        wait_for(&format!("{domain} Ready"), READY_TIMEOUT, || {
            condition(&s, "default", domain, "Ready").filter(|c| c.0 == "True")
        });
        let (ok, _, err) = curl_https(&s, &ca_path, domain, "/", &[]);
        assert!(!ok, "{domain}: the certificate was accepted");
        let why = if expired { "expired" } else { "does not match" };
        assert!(
            err.contains(if expired { "expired" } else { "match" }),
            "{domain}: the client should refuse a certificate that {why}: {err}"
        );
        // The same request, told to skip verification, reaches the app: the refusal is the
        // client's verdict on the certificate, not a failed handshake.
        let (ok, out, err) = curl_https(&s, &ca_path, domain, "/", &["--insecure"]);
        assert!(ok, "{domain}: {err}");
        assert_eq!(out, "Hello TLS!\n");
    }
}
