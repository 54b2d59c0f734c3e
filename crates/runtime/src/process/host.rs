//! The process backend's [`Launcher`]: every replica is a local process group on a loopback
//! port of its own (see the module docs of `process`).

use std::{
    collections::HashSet,
    io,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tokio::process::{Child, Command};
use wisp_api::serving::{Container, PodSpec};

use super::{
    expand,
    launch::{BoxFut, Exit, Launched, Launcher, ReplicaInfo, Running, Sandbox},
    probe, records,
};
use crate::{Failure, ReplicaSpec, podconfig, usage::Meter};

/// Runs replicas as host processes. `state_dir` holds the pid records.
pub(crate) struct ProcessLauncher {
    pub state_dir: PathBuf,
    pub cleanup_grace: Duration,
}

impl Launcher for ProcessLauncher {
    fn failure(&self, spec: &ReplicaSpec) -> Option<Failure> {
        failure(spec)
    }

    fn left_out(&self, pod: &PodSpec) -> Vec<String> {
        left_out(pod)
    }

    fn address(&self, _: &ReplicaSpec, taken: &HashSet<SocketAddr>) -> io::Result<SocketAddr> {
        let ports = taken.iter().map(|a| a.port()).collect();
        Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port(&ports)?)))
    }

    fn clean_up(&self) -> BoxFut<'_, ()> {
        Box::pin(records::clean_up(
            self.state_dir.clone(),
            self.cleanup_grace,
        ))
    }

    fn sandbox(&self, replica: ReplicaInfo) -> BoxFut<'_, Result<Box<dyn Sandbox>, Failure>> {
        Box::pin(async move {
            // `scale` starts no replica of a spec without a serving container (its failure).
            let c = replica.spec.serving_container().ok_or_else(|| Failure {
                reason: "ContainerMissing".into(),
                message: "the revision has no container to run".into(),
            })?;
            let id = expand::Identity {
                service: &replica.spec.service,
                configuration: &replica.spec.configuration,
                revision: &replica.key.name,
            };
            let port = replica.address.port();
            // Secrets and ConfigMaps are read now, once per replica, as the kubelet builds
            // a container's env when it creates it.
            let (c, warnings) = podconfig::resolve_env(c, &replica.pod_info(), &*replica.objects)?;
            for w in warnings {
                tracing::warn!(revision = %replica.key, replica = %replica.name, "{w}");
            }
            let (env, _) = expand::environment(&c, port, &id, |n| std::env::var(n).ok());
            let argv = expand::argv(&c, &env);
            let target = probe::Target {
                address: replica.address,
                env: env.into(),
                working_dir: (!c.working_dir.is_empty()).then(|| c.working_dir.clone().into()),
                exec_prefix: Arc::new([]),
            };
            Ok(Box::new(HostProcess {
                argv,
                target,
                replica,
                state_dir: self.state_dir.clone(),
            }) as Box<dyn Sandbox>)
        })
    }

    fn shutdown(&self) -> BoxFut<'_, ()> {
        Box::pin(async {})
    }
}

/// A process replica's "sandbox": only what it takes to start its process again.
struct HostProcess {
    argv: Vec<String>,
    target: probe::Target,
    replica: ReplicaInfo,
    state_dir: PathBuf,
}

impl Sandbox for HostProcess {
    fn target(&self) -> &probe::Target {
        &self.target
    }

    fn start(&self) -> BoxFut<'_, Result<Launched, String>> {
        Box::pin(async move {
            let Some((program, args)) = self.argv.split_first() else {
                // scale() never starts a replica without a command; be defensive anyway.
                return Err("the container has no command".into());
            };
            let mut cmd = Command::new(program);
            cmd.args(args)
                .env_clear()
                .envs(self.target.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // Its own group, so that stopping it reaches everything it started.
                .process_group(0)
                // Stopping is explicit and graceful; dropping a handle must not SIGKILL.
                .kill_on_drop(false);
            if let Some(dir) = &self.target.working_dir {
                cmd.current_dir(dir);
            }
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("starting {program:?}: {e}"))?;
            let Some(pid) = child.id().map(|p| p as i32) else {
                return Err("the process vanished at start".into());
            };
            let mut outputs: Vec<(&'static str, Box<dyn tokio::io::AsyncRead + Unpin + Send>)> =
                Vec::new();
            if let Some(p) = child.stdout.take() {
                outputs.push(("stdout", Box::new(p)));
            }
            if let Some(p) = child.stderr.take() {
                outputs.push(("stderr", Box::new(p)));
            }
            self.write_record(pid).await;
            Ok(Launched {
                outputs,
                run: Box::new(HostRun {
                    child,
                    pgid: pid,
                    state_dir: self.state_dir.clone(),
                }),
            })
        })
    }

    fn remove(self: Box<Self>) -> BoxFut<'static, ()> {
        Box::pin(async {})
    }
}

impl HostProcess {
    async fn write_record(&self, pid: i32) {
        let Some(start_time) = records::start_time(pid).await else {
            // Exited already, or no /proc: nothing could be verified on cleanup anyway.
            return;
        };
        let record = records::Record {
            pid,
            pgid: pid,
            start_time,
            namespace: self.replica.key.namespace.clone(),
            revision: self.replica.key.name.clone(),
            replica: self.replica.name.clone(),
        };
        if let Err(e) = records::write(&self.state_dir, &record).await {
            tracing::warn!("writing pid record for {}: {e}", self.replica.name);
        }
    }
}

struct HostRun {
    child: Child,
    pgid: i32,
    state_dir: PathBuf,
}

impl Running for HostRun {
    fn wait(&mut self) -> BoxFut<'_, io::Result<Exit>> {
        Box::pin(async move {
            let status = self.child.wait().await?;
            Ok(Exit {
                code: status.code(),
                signal: status.signal(),
            })
        })
    }

    fn signal(&self, signal: Signal) {
        let _ = killpg(Pid::from_raw(self.pgid), signal);
    }

    fn meters(&self) -> Vec<Meter> {
        // The group's leader: its tree is the replica (a child that left the group with
        // `setsid` is still its descendant).
        vec![Meter::tree(self.pgid)]
    }

    fn finish(self: Box<Self>) -> BoxFut<'static, Option<String>> {
        Box::pin(async move {
            // Like a container, a replica ends when its main process does: whatever it left
            // running in its group goes too.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
            records::remove(&self.state_dir, self.pgid).await;
            None
        })
    }
}

/// The reason a process replica cannot honour a `volumeMount` (wisp's own: Kubernetes has
/// no runtime without mounts).
pub const VOLUME_MOUNT_UNSUPPORTED: &str = "VolumeMountUnsupported";

/// Why a revision cannot run here, if it cannot: the process platform runs the serving
/// container's `command`, so it needs that container and that command.
pub(crate) fn failure(spec: &ReplicaSpec) -> Option<Failure> {
    let Some(c) = spec.serving_container() else {
        return Some(Failure {
            reason: "ContainerMissing".into(),
            message: "the revision has no container to run".into(),
        });
    };
    if let Some((i, m)) = c.volume_mounts.iter().enumerate().next() {
        let index = spec
            .pod
            .containers
            .iter()
            .position(|x| x.name == c.name)
            .unwrap_or(0);
        return Some(Failure {
            reason: VOLUME_MOUNT_UNSUPPORTED.into(),
            message: format!(
                "spec.containers[{index}].volumeMounts[{i}].mountPath {:?}: the process \
                 runtime runs the container as a host process, with no mount namespace to \
                 mount volume {:?} in; give the container an `image` to run it in a container",
                m.mount_path, m.name
            ),
        });
    }
    if !c.command.is_empty() {
        return None;
    }
    let message = if c.image.is_empty() {
        "the container has no `command` to run".to_string()
    } else {
        format!(
            "wisp's process runtime runs a container's `command`; image {:?} needs a container \
             runtime, which this wisp does not have: set `command` to the program to run",
            c.image
        )
    };
    Some(Failure {
        reason: "ContainerMissing".into(),
        message,
    })
}

/// The parts of a revision's pod the process platform runs without, named for the log: it
/// runs one process, the serving container's `command`, with its env, working directory and
/// probes, on the host as wisp's user. Empty when it runs the whole pod.
pub fn left_out(pod: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    let serving = pod.serving_container().map(|c| c.name.as_str());
    let mut names = |what: &str, cs: &mut dyn Iterator<Item = &Container>| {
        let names: Vec<&str> = cs.map(|c| c.name.as_str()).collect();
        if !names.is_empty() {
            out.push(format!("{what} {}", names.join(", ")));
        }
    };
    names(
        "sidecar container(s)",
        &mut pod
            .containers
            .iter()
            .filter(|c| Some(c.name.as_str()) != serving),
    );
    names("init container(s)", &mut pod.init_containers.iter());
    if !pod.volumes.is_empty() {
        let volumes: Vec<&str> = pod.volumes.iter().map(|v| v.name.as_str()).collect();
        out.push(format!("volume(s) {}", volumes.join(", ")));
    }
    if !pod.service_account_name.is_empty() {
        out.push(format!("service account {}", pod.service_account_name));
    }
    if pod.extra.contains_key("securityContext") {
        out.push("the pod's securityContext".into());
    }
    if let Some(c) = pod.serving_container()
        && c.security_context.is_some()
    {
        out.push(format!("container {}'s securityContext", c.name));
    }
    out
}

/// A free loopback port: bound and released at once. Another process could take it in
/// between (a replica that then fails to bind crashes and is restarted on the same port,
/// which works once that process lets go), but never another replica of this platform:
/// the kernel picks the port at random on each bind (50 binds in a row repeated a port in
/// 32 of 400 trials here), and a replica restarted on a port its sibling holds can never
/// bind it.
fn free_port(taken: &HashSet<u16>) -> std::io::Result<u16> {
    port_not_in(taken, || {
        Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port())
    })
}

/// The first port from `candidates` not in `taken`, within [`PORT_ATTEMPTS`] tries.
pub(crate) fn port_not_in(
    taken: &HashSet<u16>,
    mut candidates: impl FnMut() -> std::io::Result<u16>,
) -> std::io::Result<u16> {
    for _ in 0..PORT_ATTEMPTS {
        let port = candidates()?;
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("{PORT_ATTEMPTS} ports in a row were already held by other replicas"),
    ))
}

/// How many kernel-chosen ports [`free_port`] tries before giving up.
pub(crate) const PORT_ATTEMPTS: usize = 64;
