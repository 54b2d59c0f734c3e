//! A fresh `wisp serve` for one benchmark run.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use nix::{sys::signal::Signal, unistd::Pid};

use crate::{api::Api, procfs};

/// The line `wisp serve` prints on stderr once its API accepts connections.
const LISTENING: &str = "wisp: API listening on ";

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `wisp` binary.
    pub wisp: PathBuf,
    /// A `--config` file (Knative ConfigMap names as top-level keys), if any.
    pub config: Option<PathBuf>,
    /// How long to wait for the "API listening" line.
    pub start_timeout: Duration,
    /// How long `stop` waits after SIGTERM before it sends SIGKILL.
    pub stop_timeout: Duration,
    /// Serve the API over HTTPS (wisp's default; kubectl sends no token over plain HTTP).
    /// [`Server::api`] then does not work (it trusts no CA): use the data dir's `ca.crt`.
    pub api_tls: bool,
    /// Extra `wisp serve` arguments.
    pub extra_args: Vec<String>,
    /// `--metrics-addr` and `--console-addr` (an ephemeral port each by default, as
    /// every other listener; `off` turns one off).
    pub metrics_addr: String,
    pub console_addr: String,
}

impl Options {
    pub fn new(wisp: PathBuf) -> Self {
        Options {
            wisp,
            config: None,
            start_timeout: Duration::from_secs(20),
            stop_timeout: Duration::from_secs(30),
            api_tls: false,
            extra_args: Vec::new(),
            metrics_addr: "127.0.0.1:0".into(),
            console_addr: "127.0.0.1:0".into(),
        }
    }
}

/// A running `wisp serve` on a temporary data dir (removed when this is dropped).
///
/// Dropping it without [`Server::stop`] still stops the server (and kills leftovers), so a
/// benchmark that fails half-way leaves no process behind.
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    api: Api,
    data_dir: tempfile::TempDir,
    log_path: PathBuf,
    stop_timeout: Duration,
}

/// What [`Server::stop`] observed.
#[derive(Debug, Clone)]
pub struct StopReport {
    /// From SIGTERM to the exit of `wisp serve`.
    pub took: Duration,
    /// The exit status, e.g. `exit status: 0`.
    pub status: String,
    /// Whether SIGKILL was needed (the server did not exit within the timeout).
    pub killed: bool,
    /// Replicas still alive after wisp exited (then killed by us); should be 0.
    pub leftovers: usize,
}

/// The line `wisp serve` prints on stderr for its external ingress.
const INGRESS_LISTENING: &str = "wisp: ingress listening on http://";
/// The line for its HTTPS ingress (`--https-addr`).
const HTTPS_INGRESS_LISTENING: &str = "wisp: ingress listening on https://";

impl Server {
    /// Starts `wisp serve` with every listener on an ephemeral loopback port, on a new
    /// temporary data dir and waits for its API. Its stderr goes to `wisp.log` in the data
    /// dir (see [`Server::log_path`]); `RUST_LOG` is passed through.
    /// [`start`](Self::start), retried every 5 s for up to `wait` while a port is in use
    /// (another `wisp serve` on a fixed port the options name).
    pub fn start_waiting(opts: &Options, wait: std::time::Duration) -> anyhow::Result<Server> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            match Server::start(opts) {
                Ok(s) => return Ok(s),
                Err(e)
                    if format!("{e:#}").contains("in use")
                        && std::time::Instant::now() < deadline =>
                {
                    eprintln!(
                        "a port of wisp serve is in use (another wisp running?); retrying in 5 s"
                    );
                    std::thread::sleep(std::time::Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn start(opts: &Options) -> anyhow::Result<Server> {
        let data_dir = tempfile::Builder::new()
            .prefix("wisp-bench-")
            .tempdir()
            .context("creating a temporary data dir")?;
        Self::start_in(opts, data_dir)
    }

    /// Stops the server (SIGTERM, as [`Server::stop`]) and starts it again with `opts` on
    /// the same data dir. Returns the stop report and the time from the new process's
    /// spawn to its API answering a request.
    pub fn restart(self, opts: &Options) -> anyhow::Result<(Server, StopReport, Duration)> {
        let mut old = self;
        let report = old.stop_inner()?;
        // Keep the directory: it moves to the new server.
        let data_dir = std::mem::replace(&mut old.data_dir, tempfile::tempdir()?);
        drop(old);
        // The new process writes a fresh log (its listening lines are looked up there).
        let log = data_dir.path().join("wisp.log");
        std::fs::rename(&log, log.with_extension("log.1"))?;
        let start = Instant::now();
        let server = Self::start_in(opts, data_dir)?;
        loop {
            if server
                .api
                .resource_version(crate::api::SERVING, "services")
                .is_ok()
            {
                break;
            }
            if start.elapsed() > opts.start_timeout {
                bail!("the restarted server's API did not answer");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok((server, report, start.elapsed()))
    }

    fn start_in(opts: &Options, data_dir: tempfile::TempDir) -> anyhow::Result<Server> {
        let mut cmd = Command::new(&opts.wisp);
        crate::install_crypto_provider();
        cmd.arg("serve")
            .args(["--api-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            // The benchmarks measure wisp's work, not TLS's: the API speaks plain HTTP
            // (allowed on loopback only).
            .args((!opts.api_tls).then_some("--api-insecure-http"))
            // Every listener on an ephemeral port, so benchmarks can run side by side.
            .args(["--local-addr", "127.0.0.1:0"])
            .args(["--metrics-addr", &opts.metrics_addr])
            .args(["--console-addr", &opts.console_addr])
            .arg("--data-dir")
            .arg(data_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(config) = &opts.config {
            cmd.arg("--config").arg(config);
        }
        cmd.args(&opts.extra_args);
        cmd.args(own_bridge(&opts.extra_args));
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", opts.wisp.display()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let log_path = data_dir.path().join("wisp.log");
        let mut log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;

        // One thread copies stderr to the log for the whole run and reports the address.
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log, "{line}");
                if let Some(addr) = line.strip_prefix(LISTENING)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });

        let mut server = Server {
            child: Some(child),
            api: Api::new("http://unknown", "")?,
            data_dir,
            log_path,
            stop_timeout: opts.stop_timeout,
        };
        let url = match rx.recv_timeout(opts.start_timeout) {
            Ok(url) => url,
            Err(_) => bail!(
                "wisp serve did not print {LISTENING:?} within {:?}; log:\n{}",
                opts.start_timeout,
                server.log_tail(20)
            ),
        };
        let token = std::fs::read_to_string(server.data_dir.path().join("token"))
            .context("reading the API token")?;
        server.api = Api::new(&url, token.trim())?;
        Ok(server)
    }

    /// The address a listener announced on stderr (`wisp: <what> listening on http://…`),
    /// e.g. `metrics` or `console`; they are announced before the API, so they are known
    /// once [`Server::start`] returned.
    pub fn listening(&self, what: &str) -> Option<String> {
        let prefix = format!("wisp: {what} listening on http://");
        std::fs::read_to_string(&self.log_path)
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|a| {
                a.trim()
                    .trim_end_matches("/metrics")
                    .trim_end_matches('/')
                    .to_string()
            })
    }

    /// The API client (base URL and token of this server).
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The pid of `wisp serve`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The server's stderr so far.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The external ingress address, from the line `wisp serve` prints on stderr (its
    /// [`log_path`](Self::log_path)); waits at most `timeout` for it.
    pub fn ingress_addr(&self, timeout: Duration) -> anyhow::Result<std::net::SocketAddr> {
        self.announced_addr(INGRESS_LISTENING, timeout)
    }

    /// The HTTPS ingress address (`--https-addr`), as [`ingress_addr`](Self::ingress_addr).
    pub fn https_ingress_addr(&self, timeout: Duration) -> anyhow::Result<std::net::SocketAddr> {
        self.announced_addr(HTTPS_INGRESS_LISTENING, timeout)
    }

    fn announced_addr(
        &self,
        prefix: &str,
        timeout: Duration,
    ) -> anyhow::Result<std::net::SocketAddr> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            if let Some(addr) = text.lines().find_map(|l| l.strip_prefix(prefix)) {
                return addr
                    .trim()
                    .trim_end_matches('/')
                    .parse()
                    .with_context(|| format!("ingress address {addr:?}"));
            }
            if Instant::now() > deadline {
                bail!(
                    "no {prefix:?} line in {} after {timeout:?}",
                    self.log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `n` lines of the server's stderr.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The server's replicas: its child processes.
    pub fn replicas(&self) -> Vec<procfs::Proc> {
        procfs::children(self.pid())
    }

    /// SIGTERM, then waits (up to the stop timeout, then SIGKILL) for wisp to exit, and
    /// checks that no replica outlived it (killing any that did).
    pub fn stop(mut self) -> anyhow::Result<StopReport> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> anyhow::Result<StopReport> {
        let Some(mut child) = self.child.take() else {
            bail!("already stopped");
        };
        let pid = Pid::from_raw(child.id() as i32);
        // Replicas are their own process groups: remember them to check on them afterwards.
        let replicas = procfs::children(child.id());
        let start = Instant::now();
        nix::sys::signal::kill(pid, Signal::SIGTERM).context("sending SIGTERM to wisp")?;
        let mut killed = false;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if start.elapsed() > self.stop_timeout && !killed {
                let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = start.elapsed();
        // Replicas that are still alive (not a recycled pid: same start time) are killed.
        let mut leftovers = 0;
        for p in replicas.iter().filter(|p| p.is_alive()) {
            leftovers += 1;
            let _ = nix::sys::signal::killpg(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
            let _ = nix::sys::signal::kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
        }
        Ok(StopReport {
            took,
            status: status.to_string(),
            killed,
            leftovers,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_timeout = self.stop_timeout.min(Duration::from_secs(10));
            if let Err(e) = self.stop_inner() {
                eprintln!("stopping wisp: {e:#}");
            }
        }
    }
}

/// `--container-bridge` and `--container-subnet` of this server's own, unless the caller
/// chose them (an argument or `WISP_CONTAINER_BRIDGE`): with the defaults every `wisp serve`
/// on the machine shares the bridge `wisp0` and 10.88.0.0/16, and another one that runs
/// containers and stops (a test, another benchmark) tears that bridge down under this one's
/// replicas; a request to them then hangs (seen as 0 req/s in `dataplane_probe --image`).
fn own_bridge(extra_args: &[String]) -> Vec<String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SERVERS: AtomicU32 = AtomicU32::new(0);
    if extra_args
        .iter()
        .any(|a| a.starts_with("--container-bridge"))
        || std::env::var_os("WISP_CONTAINER_BRIDGE").is_some()
    {
        return Vec::new();
    }
    // wisp allows 8 bytes: `wb`, five digits of the pid, one of the server's number.
    let n = SERVERS.fetch_add(1, Ordering::Relaxed) % 10;
    let pid = std::process::id() % 100_000;
    // A /24 out of 10.192.0.0/10 that wisp's default (10.88.0.0/16) never overlaps;
    // 253 addresses, enough for the largest benchmark (100 services at once).
    let h = pid * 10 + n;
    vec![
        format!("--container-bridge=wb{pid:05}{n}"),
        format!(
            "--container-subnet=10.{}.{}.0/24",
            192 + h % 48,
            (h / 48) % 256
        ),
    ]
}
