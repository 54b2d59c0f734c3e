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

/// nginx's configuration: `workers` worker processes on `listen`, proxying to `upstream`;
/// every path it writes is under `dir`.
pub fn config(dir: &Path, listen: SocketAddr, upstream: SocketAddr, workers: usize) -> String {
    let d = dir.display();
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
    listen {listen};
    location / {{
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
        std::fs::write(&conf, config(dir.path(), addr, upstream, workers))?;
        // `-e` sends the errors of start-up itself to the log too (by default they go to
        // a system path that may not be writable).
        let mut cmd = Command::new(nginx);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"));
        Self::start(cmd, dir, addr, workers, timeout)
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
        Self::start(cmd, dir, addr, 0, timeout)
    }

    /// Spawns `cmd` (its stderr into `dir/stderr.log`) and waits until it proxies and has
    /// `workers` child processes.
    fn start(
        mut cmd: Command,
        dir: tempfile::TempDir,
        addr: SocketAddr,
        workers: usize,
        timeout: Duration,
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
            match load::get(addr, None, Duration::from_secs(2)) {
                Ok(r) if r.status == 200 && me.workers().len() == workers => return Ok(me),
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
        );
        assert!(c.contains("worker_processes 2;"));
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
}
