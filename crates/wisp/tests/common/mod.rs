//! Test harness: a real `wisp serve` on an ephemeral loopback port with its own data dir.
#![allow(dead_code)]

pub mod kubectl;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// How long a server gets to come up before the test fails (never wait unbounded).
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Server {
    child: Option<Child>,
    /// The API's `host:port`, served over HTTPS (`scheme` says; `--api-insecure-http`
    /// servers speak plain HTTP).
    pub addr: String,
    pub scheme: &'static str,
    /// The external ingress (`host:port`).
    pub http_addr: String,
    /// The cluster-local ingress (`host:port`).
    pub local_addr: String,
    /// The HTTPS ingress (`host:port`; empty unless started with `--https-addr`).
    pub https_addr: String,
    /// The Prometheus endpoint (`host:port`; empty when off).
    pub metrics_addr: String,
    /// The web console (`host:port`; empty when off).
    pub console_addr: String,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub token: String,
    extra_args: Vec<String>,
    /// Extra environment of `wisp serve` (e.g. `DOCKER_CONFIG`).
    envs: Vec<(String, String)>,
}

/// A container bridge and subnet of this server's own, so that servers of tests running at
/// once never share (or clean up) each other's container network: tests run as separate
/// processes (nextest), so the pid and a per-process count name it.
fn container_network() -> [String; 4] {
    use std::sync::atomic::{AtomicU32, Ordering};
    static STARTED: AtomicU32 = AtomicU32::new(0);
    let n = (std::process::id().wrapping_mul(4) + STARTED.fetch_add(1, Ordering::Relaxed)) % 16384;
    [
        "--container-bridge".into(),
        format!("wt{n:x}"),
        "--container-subnet".into(),
        format!("10.{}.{}.0/24", 64 + n / 256, n % 256),
    ]
}

pub fn wisp_bin() -> &'static str {
    env!("CARGO_BIN_EXE_wisp")
}

impl Server {
    /// Starts a server with a fresh data dir.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// Starts a server with extra `wisp serve` flags.
    pub fn start_with(extra: &[&str]) -> Server {
        Self::start_with_env(extra, &[])
    }

    /// Starts a server with extra `wisp serve` flags and environment variables.
    pub fn start_with_env(extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().to_path_buf();
        let mut s = Server {
            child: None,
            addr: String::new(),
            scheme: "https",
            http_addr: String::new(),
            local_addr: String::new(),
            https_addr: String::new(),
            metrics_addr: String::new(),
            console_addr: String::new(),
            data_dir,
            _tmp: Some(tmp),
            token: String::new(),
            extra_args: extra
                .iter()
                .map(|s| s.to_string())
                .chain(container_network())
                .collect(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        install_crypto_provider();
        // Ephemeral ports for the observability listeners too, unless the test sets them.
        let mut observe = Vec::new();
        for flag in ["--metrics-addr", "--console-addr"] {
            if !self.extra_args.iter().any(|a| a == flag) {
                observe.extend([flag, "127.0.0.1:0"]);
            }
        }
        let mut child = Command::new(wisp_bin())
            .arg("serve")
            .args(["--api-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--local-addr", "127.0.0.1:0"])
            .args(&observe)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra_args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env_remove("WISP_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wisp serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // The ingress lines come before the API line; all three are sent once the API
            // line arrives.
            let (mut http, mut local) = (String::new(), String::new());
            let mut https = String::new();
            let (mut metrics, mut console) = (String::new(), String::new());
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(a) = line.strip_prefix("wisp: metrics listening on http://") {
                    metrics = a.trim().trim_end_matches("/metrics").to_string();
                }
                if let Some(a) = line.strip_prefix("wisp: console listening on http://") {
                    console = a.trim().trim_end_matches('/').to_string();
                }
                if let Some(a) = line.strip_prefix("wisp: ingress listening on http://") {
                    http = a.trim().to_string();
                }
                if let Some(a) = line.strip_prefix("wisp: ingress listening on https://") {
                    https = a.trim().to_string();
                }
                if let Some(a) =
                    line.strip_prefix("wisp: cluster-local ingress listening on http://")
                {
                    local = a.trim().to_string();
                }
                if let Some(url) = line.strip_prefix("wisp: API listening on ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send((
                        url.trim().to_string(),
                        http.clone(),
                        local.clone(),
                        metrics.clone(),
                        console.clone(),
                        https.clone(),
                    ));
                }
                if std::env::var_os("WISP_TEST_LOG").is_some() {
                    eprintln!("[wisp] {line}");
                }
            }
        });
        let (url, http, local, metrics, console, https) = rx
            .recv_timeout(START_TIMEOUT)
            .expect("wisp serve did not report its API address");
        self.metrics_addr = metrics;
        self.console_addr = console;
        let (scheme, addr) = url.split_once("://").expect("the API URL has a scheme");
        self.scheme = if scheme == "https" { "https" } else { "http" };
        self.addr = addr.to_string();
        self.http_addr = http;
        self.local_addr = local;
        self.https_addr = https;
        self.token = std::fs::read_to_string(self.data_dir.join("token"))
            .expect("token file")
            .trim()
            .to_string();
        self.child = Some(child);
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    pub fn server_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The server's CA certificate file (`wisp serve` writes it on first start).
    pub fn ca_path(&self) -> PathBuf {
        self.data_dir.join("ca.crt")
    }

    /// An HTTP client trusting only the server's CA, with a request timeout, so no test
    /// can hang on the server.
    pub fn http(&self) -> reqwest::blocking::Client {
        self.http_timeout(Duration::from_secs(30))
    }

    /// [`Server::http`] with another request timeout.
    pub fn http_timeout(&self, timeout: Duration) -> reqwest::blocking::Client {
        install_crypto_provider();
        let mut b = reqwest::blocking::Client::builder().timeout(timeout);
        if self.scheme == "https" {
            let pem = std::fs::read(self.ca_path()).expect("the server's CA");
            let ca = reqwest::Certificate::from_pem(&pem).expect("CA PEM");
            b = b.tls_certs_only([ca]);
        }
        b.build().expect("client")
    }

    pub fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// SIGTERM (a clean stop, waited for), then start again on the same data dir.
    #[allow(dead_code)] // not every test binary restarts cleanly
    pub fn terminate_and_restart(&mut self) {
        let status = self.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "wisp serve's exit: {status:?}"
        );
        self.spawn();
    }

    /// `kill -9`, then start again on the same data dir.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        c.wait().ok()
    }

    /// A `wisp` client command pointed at this server.
    pub fn cli(&self) -> Command {
        let mut c = Command::new(wisp_bin());
        c.env("WISP_SERVER", self.server_url())
            .env("WISP_TOKEN", &self.token)
            .env("WISP_CERTIFICATE_AUTHORITY", self.ca_path())
            .env_remove("WISP_DATA_DIR");
        c
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// This server's container bridge: also the prefix of its replicas' network namespaces.
    pub fn container_bridge(&self) -> &str {
        let i = self
            .extra_args
            .iter()
            .position(|a| a == "--container-bridge")
            .expect("the harness names a bridge");
        &self.extra_args[i + 1]
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Gracefully, so `wisp serve` stops its replicas: a `kill -9` here would leave
        // them running after the test (they are their own process groups).
        self.terminate();
    }
}

/// ring as rustls's process-wide provider: reqwest is built without one (see the root
/// Cargo.toml), and every client needs it, even for plain HTTP.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Path of a sample binary (`hello`, `autoscale`), built on demand so that
/// `cargo test -p wisp` works without a prior workspace build.
pub fn sample_bin(name: &str) -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    let dir = Path::new(wisp_bin())
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let path = dir.join(name);
    if !path.exists() {
        BUILD.call_once(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "-p", "wisp-samples", "--bins"])
                .status()
                .expect("running cargo build for the samples");
            assert!(status.success(), "building the samples failed");
        });
    }
    assert!(path.exists(), "sample binary {} is missing", path.display());
    path
}

/// Polls `f` every 50 ms until it returns Some, failing the test after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True while a process with this pid exists.
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.split(") ")
                    .nth(1)
                    .is_some_and(|rest| rest.starts_with('Z'))
            })
            .unwrap_or(true)
}

impl Server {
    /// GET an API path as JSON (None on 404).
    pub fn get_json(&self, path: &str) -> Option<serde_json::Value> {
        let r = self
            .http()
            .get(self.url(path))
            .header("authorization", self.auth())
            .send()
            .ok()?;
        if r.status().as_u16() == 404 {
            return None;
        }
        r.json().ok()
    }

    /// (desiredScale, actualScale) of a revision's PodAutoscaler in `default`.
    pub fn pa_scale(&self, revision: &str) -> Option<(i64, i64)> {
        let pa = self.get_json(&format!(
            "/apis/autoscaling.internal.knative.dev/v1alpha1/namespaces/default/podautoscalers/{revision}"
        ))?;
        Some((
            pa["status"]["desiredScale"].as_i64()?,
            pa["status"]["actualScale"].as_i64()?,
        ))
    }

    /// A revision's Pods (in `default`) as the views show them now, terminating ones left
    /// out; -1 when the list cannot be read.
    pub fn running_pods(&self, revision: &str) -> i64 {
        self.get_json(&format!(
            "/api/v1/namespaces/default/pods?labelSelector=serving.knative.dev%2Frevision%3D{revision}"
        ))
        .and_then(|l| {
            l["items"].as_array().map(|items| {
                let live = items
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .count();
                i64::try_from(live).unwrap_or(i64::MAX)
            })
        })
        .unwrap_or(-1)
    }

    /// Applies YAML through `wisp apply -f -`, asserting success.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = self
            .cli()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wisp apply");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The Ready condition of an object: (status, reason, message).
    pub fn ready(&self, plural: &str, name: &str) -> Option<(String, String, String)> {
        let o = self.get_json(&format!(
            "/apis/serving.knative.dev/v1/namespaces/default/{plural}/{name}"
        ))?;
        let c = o["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        Some((s("status"), s("reason"), s("message")))
    }
}

/// Sends raw request bytes on a fresh connection and reads the answer until the server
/// closes it (bounded by a read timeout): (status code, or 0 without a status line; the
/// whole answer as text). For requests no HTTP client library would send.
pub fn raw_http(addr: &str, request: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request).expect("send");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}
