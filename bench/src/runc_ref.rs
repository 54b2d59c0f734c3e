//! The reference of issue #22's cold-start figures: `runc run -d` of the `hello` sample's
//! bundle until its port listens, measured in the same run as wisp's figures.
//!
//! The bundle is `runc spec`'s defaults with the app at `/hello`, a read-only root (the
//! `hello` sample and its libraries, `hostfs`), in a network namespace with a veth made
//! once; each start is `runc run -d` until a TCP connect to its port succeeds (polled every
//! 1 ms), then `runc delete -f` (not timed). Needs root and runc.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use wisp_runtime::container::hostfs;

/// The reference namespace and its addresses (a subnet no test uses).
const REF_NS: &str = "wcbref";
const REF_HOST_IP: &str = "10.214.0.1/24";
const REF_IP: &str = "10.214.0.2";

fn sh(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program).args(args).output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A prepared reference: its bundle, runc root and namespace (removed on drop).
pub struct RuncReference {
    dir: tempfile::TempDir,
    /// The image's root filesystem (also usable as a container platform's image).
    pub rootfs: PathBuf,
    starts: usize,
}

impl RuncReference {
    /// Builds the rootfs with `app` at `/hello`, the bundle and the namespace.
    pub fn new(app: &Path) -> anyhow::Result<RuncReference> {
        if !rustix::process::geteuid().is_root() {
            bail!("the runc reference needs root (namespaces, cgroups) and runc");
        }
        let dir = tempfile::tempdir()?;
        let rootfs = dir.path().join("image");
        hostfs::build(&rootfs, &[(app.to_path_buf(), "/hello")])?;
        reference_netns()?;
        let r = RuncReference {
            rootfs,
            dir,
            starts: 0,
        };
        r.bundle_config()?;
        Ok(r)
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("ref")
    }

    /// `runc spec`'s defaults with the app, a read-only root and the reference namespace.
    fn bundle_config(&self) -> anyhow::Result<()> {
        let bundle = self.bundle();
        std::fs::create_dir_all(&bundle)?;
        sh("runc", &["spec", "--bundle", &bundle.display().to_string()])?;
        let path = bundle.join("config.json");
        let mut spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = serde_json::json!(["/hello"]);
        spec["process"]["env"] = serde_json::json!(["PATH=/bin", "HOST=0.0.0.0", "PORT=8080"]);
        spec["root"] = serde_json::json!({"path": self.rootfs, "readonly": true});
        let namespaces = spec["linux"]["namespaces"]
            .as_array_mut()
            .context("runc spec has no namespaces")?;
        for ns in namespaces.iter_mut() {
            if ns["type"] == "network" {
                ns["path"] = format!("/var/run/netns/{REF_NS}").into();
            }
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&spec)?)?;
        Ok(())
    }

    /// One `runc run -d` until the port listens.
    pub fn start_once(&mut self) -> anyhow::Result<Duration> {
        self.starts += 1;
        let id = format!("ref{}", self.starts);
        let root = self.dir.path().join("ref-runc");
        let target: SocketAddr = format!("{REF_IP}:8080").parse()?;
        let started = Instant::now();
        let status = Command::new("runc")
            .arg("--root")
            .arg(&root)
            .args(["run", "-d", "--bundle"])
            .arg(self.bundle())
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("runc run {id} failed: {status}");
        }
        let deadline = started + Duration::from_secs(10);
        loop {
            if std::net::TcpStream::connect_timeout(&target, Duration::from_millis(50)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!("{target} never listened");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = started.elapsed();
        sh(
            "runc",
            &["--root", &root.display().to_string(), "delete", "-f", &id],
        )?;
        Ok(took)
    }

    /// `n` starts.
    pub fn starts(&mut self, n: usize) -> anyhow::Result<Vec<Duration>> {
        (0..n).map(|_| self.start_once()).collect()
    }
}

impl Drop for RuncReference {
    fn drop(&mut self) {
        let _ = sh("ip", &["netns", "del", REF_NS]);
    }
}

fn reference_netns() -> anyhow::Result<()> {
    let _ = sh("ip", &["netns", "del", REF_NS]);
    sh("ip", &["netns", "add", REF_NS])?;
    sh(
        "ip",
        &[
            "link", "add", "wcbrefh", "type", "veth", "peer", "name", "eth0", "netns", REF_NS,
        ],
    )?;
    sh("ip", &["addr", "add", REF_HOST_IP, "dev", "wcbrefh"])?;
    sh("ip", &["link", "set", "wcbrefh", "up"])?;
    for cmd in [
        vec!["link", "set", "lo", "up"],
        vec!["addr", "add", &format!("{REF_IP}/24"), "dev", "eth0"],
        vec!["link", "set", "eth0", "up"],
    ] {
        let mut args = vec!["-n", REF_NS];
        args.extend(cmd.iter().map(|s| &**s));
        sh("ip", &args)?;
    }
    Ok(())
}
