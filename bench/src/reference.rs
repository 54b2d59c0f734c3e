//! Reference reverse proxies: the same app behind a proxy that is not wisp, in the same
//! run, so a figure like "0.4× direct" can be read against what other proxies get on the
//! same machine under the same load.
//!
//! - [`ReferenceProxy::nginx`]: a mature C proxy. Its configuration is the minimum a fair
//!   proxy needs and nothing that flatters it: one worker per CPU (wisp runs one
//!   data-plane thread per CPU), keep-alive connections to the app, the `Host` passed
//!   through and `X-Forwarded-For` appended (the header work wisp does too), no access log.
//! - [`ReferenceProxy::bare`]: `bare_proxy`, hyper's HTTP/1 server and client with nothing
//!   else: the floor of wisp's own stack.
//!
//! - [`ReferenceProxy::nginx_tls`]: the same nginx terminating TLS (TLS 1.2 and 1.3, as
//!   rustls) with a certificate for one host, the yardstick of wisp's HTTPS ingress.
//!
//! A [`ReferenceProxy`] stops its processes when dropped.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{load, procfs};
use anyhow::{Context, bail};

/// A running reference proxy in front of one app.
#[derive(Debug)]
pub struct ReferenceProxy {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its configuration and logs.
    dir: tempfile::TempDir,
}

/// The certificate and key (PEM files) nginx terminates TLS with, and the host they are for.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub host: String,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// nginx's configuration: `workers` worker processes on `listen`, proxying to `upstream`;
/// with `tls`, the listener terminates TLS for its host. Every path it writes is under `dir`.
pub fn config(
    dir: &Path,
    listen: SocketAddr,
    upstream: SocketAddr,
    workers: usize,
    tls: Option<&TlsFiles>,
) -> String {
    let d = dir.display();
    // TLS 1.2 and 1.3 as wisp's rustls; no session cache or tickets beyond nginx's
    // defaults (the load keeps its connections, so resumption does not matter).
    let (ssl, tls_lines) = match tls {
        Some(t) => (
            " ssl",
            format!(
                "    server_name {};\n    ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_protocols TLSv1.2 TLSv1.3;\n",
                t.host,
                t.cert.display(),
                t.key.display()
            ),
        ),
        None => ("", String::new()),
    };
    format!(
        "worker_processes {workers};
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream app {{
    server {upstream};
    keepalive 256;
  }}
  server {{
    listen {listen}{ssl};
{tls_lines}    location / {{
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }}
  }}
}}
"
    )
}

impl ReferenceProxy {
    /// Starts `nginx` in front of `upstream` with `workers` worker processes and waits
    /// (up to `timeout`) until a request through it answers 200.
    pub fn nginx(
        nginx: &Path,
        upstream: SocketAddr,
        workers: usize,
        timeout: Duration,
    ) -> anyhow::Result<ReferenceProxy> {
        let dir = tempfile::tempdir()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], load::free_port()?));
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), addr, upstream, workers, None))?;
        // `-e` sends the errors of start-up itself to the log too (by default they go to
        // a system path that may not be writable).
        let mut cmd = Command::new(nginx);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"));
        Self::start(cmd, dir, addr, workers, timeout, &plain_ok)
    }

    /// Starts `nginx` terminating TLS for `tls.host` (its certificate and key written to
    /// the proxy's directory) in front of `upstream`, and waits (up to `timeout`) until an
    /// HTTPS request with that SNI answers 200 through it.
    pub fn nginx_tls(
        nginx: &Path,
        upstream: SocketAddr,
        workers: usize,
        host: &str,
        cert_pem: &str,
        key_pem: &str,
        timeout: Duration,
    ) -> anyhow::Result<ReferenceProxy> {
        let dir = tempfile::tempdir()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], load::free_port()?));
        let tls = TlsFiles {
            host: host.to_string(),
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        std::fs::write(&tls.cert, cert_pem)?;
        std::fs::write(&tls.key, key_pem)?;
        let conf = dir.path().join("nginx.conf");
        std::fs::write(
            &conf,
            config(dir.path(), addr, upstream, workers, Some(&tls)),
        )?;
        let mut cmd = Command::new(nginx);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"));
        crate::install_crypto_provider();
        // Readiness only: the certificate is checked by the benchmark's own probe.
        let client = reqwest::blocking::Client::builder()
            .danger_accept_invalid_certs(true)
            .resolve(host, addr)
            .timeout(Duration::from_secs(2))
            .build()?;
        let url = format!("https://{host}:{}/", addr.port());
        let ready = move |_: SocketAddr| {
            client
                .get(&url)
                .send()
                .is_ok_and(|r| r.status().as_u16() == 200)
        };
        Self::start(cmd, dir, addr, workers, timeout, &ready)
    }

    /// Starts `bare_proxy` (threads: one per CPU) in front of `upstream` and waits (up to
    /// `timeout`) until a request through it answers 200.
    pub fn bare(
        bare_proxy: &Path,
        upstream: SocketAddr,
        timeout: Duration,
    ) -> anyhow::Result<ReferenceProxy> {
        let dir = tempfile::tempdir()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], load::free_port()?));
        let mut cmd = Command::new(bare_proxy);
        cmd.arg("--listen")
            .arg(addr.to_string())
            .arg("--upstream")
            .arg(upstream.to_string());
        Self::start(cmd, dir, addr, 0, timeout, &plain_ok)
    }

    /// Spawns `cmd` (its stderr into `dir/stderr.log`) and waits until it proxies and has
    /// `workers` child processes.
    fn start(
        mut cmd: Command,
        dir: tempfile::TempDir,
        addr: SocketAddr,
        workers: usize,
        timeout: Duration,
        ready: &dyn Fn(SocketAddr) -> bool,
    ) -> anyhow::Result<ReferenceProxy> {
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))?;
        let what = format!("{:?}", cmd.get_program());
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let mut me = ReferenceProxy {
            child: Some(child),
            addr,
            dir,
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = me.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                bail!("{what} exited at start-up ({status}): {}", me.logs());
            }
            match ready(addr) {
                true if me.workers().len() == workers => return Ok(me),
                _ if Instant::now() > deadline => {
                    bail!(
                        "{what} did not proxy on {addr} in {timeout:?}: {}",
                        me.logs()
                    )
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The process started (nginx's master).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its child processes (nginx's workers).
    pub fn workers(&self) -> Vec<u32> {
        procfs::children(self.pid())
            .into_iter()
            .map(|p| p.pid)
            .collect()
    }

    /// The process and its children: all the CPU the proxy spends.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.pid()];
        pids.extend(self.workers());
        pids
    }

    /// What it logged (start-up problems end up here).
    pub fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.path().join(f)).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM (nginx's fast shutdown), SIGKILL after `timeout`; waits for the exit.
    pub fn stop(mut self, timeout: Duration) -> anyhow::Result<()> {
        self.stop_inner(timeout)
    }

    fn stop_inner(&mut self, timeout: Duration) -> anyhow::Result<()> {
        match self.child.take() {
            Some(mut child) => load::terminate(&mut child, timeout),
            None => Ok(()),
        }
    }
}

/// Whether a plain HTTP/1.1 `GET /` to `addr` answers 200.
fn plain_ok(addr: SocketAddr) -> bool {
    load::get(addr, None, Duration::from_secs(2)).is_ok_and(|r| r.status == 200)
}

impl Drop for ReferenceProxy {
    fn drop(&mut self) {
        let _ = self.stop_inner(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_proxies_with_keepalive_and_keeps_every_path_in_its_dir() {
        let c = config(
            Path::new("/tmp/x"),
            "127.0.0.1:9000".parse().unwrap(),
            "127.0.0.1:9001".parse().unwrap(),
            2,
            None,
        );
        assert!(c.contains("worker_processes 2;"));
        assert!(!c.contains("ssl"));
        assert!(c.contains("listen 127.0.0.1:9000;"));
        assert!(c.contains("server 127.0.0.1:9001;"));
        // Keep-alive to the app needs both HTTP/1.1 and an empty Connection header.
        assert!(c.contains("keepalive 256;"));
        assert!(c.contains("proxy_http_version 1.1;"));
        assert!(c.contains("proxy_set_header Connection \"\";"));
        for line in c
            .lines()
            .filter(|l| l.contains("_path ") || l.contains("pid "))
        {
            assert!(line.contains("/tmp/x/"), "{line}");
        }
    }

    #[test]
    fn tls_config_terminates_tls_for_the_host_with_its_files() {
        let tls = TlsFiles {
            host: "probe.default.example.com".into(),
            cert: "/tmp/x/tls.crt".into(),
            key: "/tmp/x/tls.key".into(),
        };
        let c = config(
            Path::new("/tmp/x"),
            "127.0.0.1:9000".parse().unwrap(),
            "127.0.0.1:9001".parse().unwrap(),
            2,
            Some(&tls),
        );
        assert!(c.contains("listen 127.0.0.1:9000 ssl;"), "{c}");
        assert!(c.contains("server_name probe.default.example.com;"));
        assert!(c.contains("ssl_certificate /tmp/x/tls.crt;"));
        assert!(c.contains("ssl_certificate_key /tmp/x/tls.key;"));
        assert!(c.contains("ssl_protocols TLSv1.2 TLSv1.3;"));
        // The same proxying as the plain listener: keep-alive and the forwarded headers.
        assert!(c.contains("proxy_set_header Connection \"\";"));
        assert!(c.contains("X-Forwarded-Proto $scheme;"));
    }
}
