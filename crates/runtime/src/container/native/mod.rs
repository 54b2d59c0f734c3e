//! wisp's own container runtime: runs the same bundles as runc (`config.json` from
//! `spec.rs`), without a runtime binary per start.
//!
//! A start is one short-lived thread of wisp and one helper process:
//!
//! 1. The thread unshares its PID namespace for children (a thread's own attribute, so
//!    nothing else in wisp is affected, and the thread ends right after) and spawns the
//!    helper: wisp's own binary as `container-init <bundle>`, which becomes PID 1 of the
//!    new namespace. The helper's stdout and stderr are pipes wisp reads as the replica's
//!    logs; its stdin is a socket back to the thread.
//! 2. The helper (`init.rs`, before anything else of wisp's `main` runs) joins the cgroups
//!    wisp made, the replica's network namespace, makes its mount/UTS/IPC/cgroup
//!    namespaces and root, takes the container's user, capabilities and seccomp programs
//!    (compiled once by wisp, `seccomp.bpf` in the bundle), says so on the socket and
//!    `execve`s the app, which closes the socket. Any failure is written there instead.
//!
//! The app is then wisp's own child: wisp watches it with a pidfd and reaps it, so its exit
//! code and signal come from the kernel, and no runtime or shim process stays behind. When
//! it ends, the kernel kills whatever else ran in its PID namespace; wisp removes the
//! cgroups, reading an OOM kill from the memory cgroup first.
//!
//! Exec probes run `container-exec <bundle> <argv…>`, which enters the container's
//! namespaces and cgroups, takes its credentials and filters, and runs the command as its
//! child.

pub(crate) mod cgroups;
pub(crate) mod init;
pub(crate) mod mounts;

use std::{
    ffi::OsString,
    io::Write,
    os::{fd::OwnedFd, unix::net::UnixStream},
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::Duration,
};

use nix::sched::{CloneFlags, unshare};
use oci_spec::runtime::Spec;

/// The compiled seccomp programs of a bundle (`seccomp::encode`); absent: none.
pub(crate) const SECCOMP_FILE: &str = "seccomp.bpf";

/// The app's pid (in wisp's PID namespace) while the container runs, for exec probes.
pub(crate) const PID_FILE: &str = "init.pid";

/// The first argument that makes wisp's binary a container's init (`init.rs`).
pub const INIT_COMMAND: &str = "container-init";

/// The first argument that makes wisp's binary run a command in a container.
pub const EXEC_COMMAND: &str = "container-exec";

/// The argument after the bundle that parks the init before the app (`init::PARKED`).
const PARK_ARG: &str = "park";

/// How long a helper may take from spawn to `execve` before the start counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `container-init` or `container-exec` if this process was started as one; call it
/// first thing in `main`, before any thread exists. None: an ordinary start.
pub fn helper_main() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let command = args.next()?;
    if command == INIT_COMMAND {
        let bundle = PathBuf::from(args.next()?);
        let park = args.next().is_some_and(|a| a == PARK_ARG);
        Some(init::init(&bundle, park))
    } else if command == EXEC_COMMAND {
        let bundle = PathBuf::from(args.next()?);
        let argv: Vec<OsString> = args.collect();
        Some(init::exec(&bundle, &argv))
    } else {
        None
    }
}

/// wisp's runtime: `program` is the binary that runs `container-init` (wisp itself).
#[derive(Clone, Debug)]
pub(crate) struct Native {
    pub program: PathBuf,
}

/// A started container: its app's pid and output.
pub(crate) struct Started {
    pub pid: i32,
    pub stdout: std::process::ChildStdout,
    pub stderr: std::process::ChildStderr,
}

impl Native {
    /// Starts the container of `bundle`; its cgroups must exist (`cgroups::create`). Returns
    /// once the app is exec'd.
    pub async fn start(&self, bundle: &Path) -> Result<Started, String> {
        self.park(bundle).await?.go("").await
    }

    /// Readies the container of `bundle` up to its app: the init is spawned and has made
    /// the container (cgroups joined, namespaces, root, devices) and waits, parked, for
    /// [`Parked::go`]. Its cgroups must exist (`cgroups::create`).
    pub async fn park(&self, bundle: &Path) -> Result<Parked, String> {
        let (program, bundle) = (self.program.clone(), bundle.to_path_buf());
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own: its PID namespace for children changes for good.
        std::thread::Builder::new()
            .name("wisp-launch".into())
            .spawn(move || {
                let _ = tx.send(launch(&program, &bundle));
            })
            .map_err(|e| format!("starting a launch thread: {e}"))?;
        rx.await
            .map_err(|_| "the launch thread ended without an answer".to_string())?
    }

    /// The argv prefix that runs a command inside the container of `bundle`.
    pub fn exec_prefix(&self, bundle: &Path) -> Vec<String> {
        vec![
            self.program.to_string_lossy().into_owned(),
            EXEC_COMMAND.into(),
            bundle.to_string_lossy().into_owned(),
        ]
    }
}

/// A container's init that made everything but the app and waits to `execve` it. Dropped
/// without [`go`](Self::go): the init is killed and reaped.
pub(crate) struct Parked {
    child: Option<std::process::Child>,
    report: UnixStream,
}

impl Parked {
    /// Lets the app start: the init takes `hostname` (unless empty: the bundle's stays)
    /// and `execve`s it. Returns once the app is exec'd.
    pub async fn go(mut self, hostname: &str) -> Result<Started, String> {
        let line = format!("{hostname}\n");
        let child = self.child.take();
        let mut report = self
            .report
            .try_clone()
            .map_err(|e| format!("the init's socket: {e}"))?;
        tokio::task::spawn_blocking(move || {
            let mut child = child.ok_or("the parked init is gone")?;
            let report = report
                .write_all(line.as_bytes())
                .and_then(|()| init::read_report(&mut report));
            started(&mut child, report)
        })
        .await
        .map_err(|e| format!("starting the parked container: {e}"))?
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing the socket alone would end it too; the kill does not wait for it to
            // be scheduled.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn launch(program: &Path, bundle: &Path) -> Result<Parked, String> {
    let began = std::time::Instant::now();
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| format!("unshare(CLONE_NEWPID): {e}"))?;
    let (mut ours, theirs) =
        UnixStream::pair().map_err(|e| format!("a socket for the init: {e}"))?;
    let mut child = Command::new(program)
        .arg(INIT_COMMAND)
        .arg(bundle)
        .arg(PARK_ARG)
        .env_clear()
        // wisp's allocator (mimalloc) would back the helper's few allocations with a
        // transparent huge page: 4 MiB resident for a parked init instead of a few hundred
        // KiB. The init clears the process's THP flag this sets before the app's `execve`.
        .env("MIMALLOC_ALLOW_THP", "0")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    let spawned = began.elapsed();
    let _ = ours.set_read_timeout(Some(START_TIMEOUT));
    let report = init::read_line(&mut ours);
    tracing::debug!(?spawned, parked = ?began.elapsed(), "container init ran");
    match report {
        // The read timeout stays for `go`: from its line to the `execve`.
        Ok(Some(line)) if format!("{line}\n") == init::PARKED => Ok(Parked {
            child: Some(child),
            report: ours,
        }),
        // Anything else is why it failed (the rest of it still to read).
        other => {
            let report = other.and_then(|first| {
                let rest = init::read_report(&mut ours)?;
                Ok(match first {
                    Some(first) if rest.is_empty() => first,
                    Some(first) => format!("{first}\n{rest}"),
                    None => rest,
                })
            });
            match started(&mut child, report) {
                Ok(_) => Err("the container's init started the app before it was told to".into()),
                Err(e) => Err(e),
            }
        }
    }
}

/// The app's pid and output once the init reported `EXECUTING`; otherwise the init is
/// killed and reaped, and the error says why (with what it printed).
fn started(
    child: &mut std::process::Child,
    report: std::io::Result<String>,
) -> Result<Started, String> {
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the init's output pipes are missing".into());
    };
    let failure = match report {
        Ok(text) if text == init::EXECUTING => None,
        Ok(text) if text.is_empty() => Some("the container's init ended before starting it".into()),
        Ok(text) => Some(text.trim_start_matches(init::EXECUTING).to_string()),
        Err(e) => Some(format!("waiting for the container's init: {e}")),
    };
    let Some(failure) = failure else {
        let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_string())?;
        // Not waited for here: wisp reaps the app through a pidfd (`runc::Init`).
        return Ok(Started {
            pid,
            stdout,
            stderr,
        });
    };
    let _ = child.kill();
    let _ = child.wait();
    // What the init printed before it failed, if anything (a panic, say).
    let mut printed = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut printed);
    let printed = printed.trim();
    Err(if printed.is_empty() {
        failure
    } else {
        format!("{failure} ({printed})")
    })
}

/// Writes the app's pid for exec probes.
pub(crate) fn write_pid(bundle: &Path, pid: i32) -> std::io::Result<()> {
    let mut f = std::fs::File::create(bundle.join(PID_FILE))?;
    writeln!(f, "{pid}")
}

/// The cgroup resources of a bundle's spec.
pub(crate) fn resources(spec: &Spec) -> Option<&oci_spec::runtime::LinuxResources> {
    spec.linux().as_ref().and_then(|l| l.resources().as_ref())
}
