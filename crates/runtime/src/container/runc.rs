//! Driving Debian's `runc`, and learning from the kernel how its containers end.
//!
//! `runc run -d` leaves no runc process behind: the container's init is re-parented to wisp,
//! which is a child subreaper (`PR_SET_CHILD_SUBREAPER`, set by the platform). wisp then
//! waits on a pidfd of that init and reaps it with `waitid(P_PIDFD)`, so the exit code and
//! signal come from the kernel; `runc state` would have lost both. An OOM kill is read from
//! the container's memory cgroup before `runc delete` removes it.

use std::{
    ffi::OsString,
    io,
    os::fd::{AsFd, OwnedFd},
    path::{Path, PathBuf},
    process::Stdio,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use rustix::process::{PidfdFlags, WaitId, WaitIdOptions, pidfd_open, waitid};
use tokio::{io::unix::AsyncFd, process::Command};

use crate::process::launch::Exit;

/// One runc state root: every container of one platform, and only those.
#[derive(Clone, Debug)]
pub(crate) struct Runc {
    pub binary: PathBuf,
    pub root: PathBuf,
}

impl Runc {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root).kill_on_drop(true);
        cmd
    }

    /// `runc run -d`: creates and starts the container. Its stdout and stderr are the pipes
    /// returned (runc passes its own stdio through to a detached container without a
    /// terminal). Returns the init's pid and the pipes.
    pub async fn run(
        &self,
        id: &str,
        bundle: &Path,
    ) -> Result<
        (
            i32,
            tokio::process::ChildStdout,
            tokio::process::ChildStderr,
        ),
        String,
    > {
        let pid_file = bundle.join("init.pid");
        let log = bundle.join("runc.log");
        let _ = tokio::fs::remove_file(&pid_file).await;
        let _ = tokio::fs::remove_file(&log).await;
        let mut child = self
            .command()
            .arg("--log")
            .arg(&log)
            .args(["run", "-d", "--pid-file"])
            .arg(&pid_file)
            .arg("--bundle")
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.binary.display()))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("runc's output pipes are missing".into());
        };
        let status = child
            .wait()
            .await
            .map_err(|e| format!("waiting for runc: {e}"))?;
        if !status.success() {
            let log = tokio::fs::read_to_string(&log).await.unwrap_or_default();
            let last = log.lines().last().unwrap_or("").to_string();
            return Err(format!("runc run {id} failed ({status}): {last}"));
        }
        let pid = tokio::fs::read_to_string(&pid_file)
            .await
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("runc wrote no pid for container {id}"))?;
        Ok((pid, stdout, stderr))
    }

    /// `runc delete -f`: kills what is left and removes the container and its cgroup.
    pub async fn delete(&self, id: &str) {
        match self.command().args(["delete", "-f", id]).output().await {
            Ok(out) if !out.status.success() => {
                let err = String::from_utf8_lossy(&out.stderr);
                if !err.contains("does not exist") {
                    tracing::warn!("runc delete {id}: {}", err.trim());
                }
            }
            Err(e) => tracing::warn!("runc delete {id}: {e}"),
            Ok(_) => {}
        }
    }

    /// Ids of every container under this root.
    pub async fn list(&self) -> Vec<String> {
        match self.command().args(["list", "-q"]).output().await {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .filter(|l| !l.is_empty())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The argv prefix that runs a command inside container `id` (exec probes).
    pub fn exec_prefix(&self, id: &str) -> Vec<String> {
        let os = |s: &Path| OsString::from(s).to_string_lossy().into_owned();
        vec![
            os(&self.binary),
            "--root".into(),
            os(&self.root),
            "exec".into(),
            id.into(),
        ]
    }
}

/// A container's init process, watched through a pidfd.
pub(crate) struct Init {
    pub pid: i32,
    fd: AsyncFd<OwnedFd>,
    exited: Option<Exit>,
}

impl Init {
    pub fn open(pid: i32) -> io::Result<Init> {
        let raw = rustix::process::Pid::from_raw(pid)
            .ok_or_else(|| io::Error::other(format!("invalid pid {pid}")))?;
        let fd = pidfd_open(raw, PidfdFlags::empty())?;
        // `AsyncFd::new` is deprecated because an arbitrary `AsRawFd` may close its fd while
        // registered; an `OwnedFd` moved into the `AsyncFd` cannot, and the replacement
        // (`register`) is `unsafe`, which this workspace forbids.
        #[allow(deprecated)]
        let fd = AsyncFd::new(fd)?;
        Ok(Init {
            pid,
            fd,
            exited: None,
        })
    }

    /// Waits for the init to exit and reaps it. Cancel-safe; returns the same exit again.
    pub async fn wait(&mut self) -> io::Result<Exit> {
        loop {
            if let Some(exit) = self.exited {
                return Ok(exit);
            }
            let mut ready = self.fd.readable().await?;
            match waitid(
                WaitId::PidFd(self.fd.get_ref().as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            ) {
                Ok(Some(status)) => {
                    self.exited = Some(Exit {
                        code: status.exit_status(),
                        signal: status.terminating_signal(),
                    });
                }
                Ok(None) => ready.clear_ready(),
                Err(e) => {
                    // Not our child (reaped by someone else): it is gone, how is unknown.
                    self.exited = Some(Exit {
                        code: None,
                        signal: None,
                    });
                    return Err(io::Error::from(e));
                }
            }
        }
    }

    pub fn signal(&self, signal: Signal) {
        if self.exited.is_none() {
            // Through the pid: the pidfd keeps it from being reused until reaped.
            let _ = kill(Pid::from_raw(self.pid), signal);
        }
    }

    pub fn has_exited(&self) -> bool {
        self.exited.is_some()
    }
}

/// Whether the kernel OOM-killed a process of the cgroup (`cgroups_path` as in the runtime
/// spec): v1 `memory.oom_control`'s `oom_kill`, v2 `memory.events`' `oom_kill`.
pub(crate) fn oom_killed(cgroups_path: &str) -> bool {
    let rel = cgroups_path.trim_start_matches('/');
    let candidates = [
        (Path::new("/sys/fs/cgroup/memory")
            .join(rel)
            .join("memory.oom_control")),
        (Path::new("/sys/fs/cgroup").join(rel).join("memory.events")),
    ];
    candidates.iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().any(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
            })
        })
    })
}
