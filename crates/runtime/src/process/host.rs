//! The process backend's [`Launcher`]: every replica is a local process group on a loopback
//! port of its own (see the module docs of `process`).

use std::{
    collections::HashSet,
    io,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
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
        let held = |port| taken.contains(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port(held)?)))
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
            let serving = replica.spec.serving_container().ok_or_else(|| Failure {
                reason: "ContainerMissing".into(),
                message: "the revision has no container to run".into(),
            })?;
            let pod = &replica.spec.pod;
            let serving = host_command(&replica, serving, Some(replica.address.port()), true)?;
            let sidecars = pod
                .containers
                .iter()
                .filter(|c| c.name != serving.name)
                .map(|c| host_command(&replica, c, None, true))
                .collect::<Result<Vec<_>, _>>()?;
            let inits = pod
                .init_containers
                .iter()
                .map(|c| host_command(&replica, c, None, false))
                .collect::<Result<Vec<_>, _>>()?;
            // Sidecars share the host's network: their probes reach the ports they name
            // on loopback, the replica's IP. Exec probes run with the container's env and
            // working directory.
            let targets = std::iter::once(&serving)
                .chain(&sidecars)
                .map(|c| {
                    let target = probe::Target {
                        address: replica.address,
                        env: c.env.clone(),
                        working_dir: c.working_dir.clone(),
                        exec_prefix: Arc::new([]),
                    };
                    (c.name.clone(), target)
                })
                .collect();
            Ok(Box::new(HostProcess {
                init_names: inits.iter().map(|c| c.name.clone()).collect(),
                serving,
                sidecars,
                inits,
                targets,
                replica,
                state_dir: self.state_dir.clone(),
            }) as Box<dyn Sandbox>)
        })
    }

    fn shutdown(&self) -> BoxFut<'_, ()> {
        Box::pin(async {})
    }
}

/// What it takes to start one container of a replica as a host process: its `command` and
/// `args` and its environment, expanded as the kubelet expands them.
#[derive(Clone, Debug)]
struct HostCommand {
    name: String,
    argv: Vec<String>,
    env: Arc<[(String, String)]>,
    working_dir: Option<PathBuf>,
}

/// A container of the replica as a [`HostCommand`]. `port` is the serving container's
/// (its `PORT`); `app`: an app container, which gets Knative's `K_*` variables (an init
/// container does not). Secrets and ConfigMaps are read now, once per replica, as the
/// kubelet builds a container's env when it creates it.
fn host_command(
    replica: &ReplicaInfo,
    c: &Container,
    port: Option<u16>,
    app: bool,
) -> Result<HostCommand, Failure> {
    let id = expand::Identity {
        service: &replica.spec.service,
        configuration: &replica.spec.configuration,
        revision: &replica.key.name,
    };
    let (c, warnings) = podconfig::resolve_env(c, &replica.pod_info(), &*replica.objects)?;
    for w in warnings {
        tracing::warn!(revision = %replica.key, replica = %replica.name, "{w}");
    }
    let id = app.then_some(&id);
    let (env, _) = expand::environment(&c, port, id, |n| std::env::var(n).ok());
    let argv = expand::argv(&c, &env);
    Ok(HostCommand {
        name: c.name.clone(),
        argv,
        env: env.into(),
        working_dir: (!c.working_dir.is_empty()).then(|| c.working_dir.clone().into()),
    })
}

/// Output pipes of a started process, by stream.
type Outputs = Vec<(&'static str, Box<dyn tokio::io::AsyncRead + Unpin + Send>)>;

impl HostCommand {
    /// Spawns the process into process group `pgid` (0: a group of its own, led by it).
    /// Returns it, its pid and its output pipes.
    fn spawn(&self, pgid: i32) -> Result<(Child, i32, Outputs), String> {
        let Some((program, args)) = self.argv.split_first() else {
            // failure() refuses a container without a command; be defensive anyway.
            return Err(format!("container {:?} has no command", self.name));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // One group per run, so that stopping it reaches everything it started.
            .process_group(pgid)
            // Stopping is explicit and graceful; dropping a handle must not SIGKILL.
            .kill_on_drop(false);
        if let Some(dir) = &self.working_dir {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting {program:?} (container {:?}): {e}", self.name))?;
        let Some(pid) = child.id().map(|p| p as i32) else {
            return Err(format!(
                "the process of container {:?} vanished at start",
                self.name
            ));
        };
        let mut outputs: Outputs = Vec::new();
        if let Some(p) = child.stdout.take() {
            outputs.push(("stdout", Box::new(p)));
        }
        if let Some(p) = child.stderr.take() {
            outputs.push(("stderr", Box::new(p)));
        }
        Ok((child, pid, outputs))
    }
}

/// A process replica's "sandbox": only what it takes to start its processes again.
struct HostProcess {
    serving: HostCommand,
    /// The pod's other containers: run in the serving process's group, so they start and
    /// stop with it.
    sidecars: Vec<HostCommand>,
    inits: Vec<HostCommand>,
    init_names: Vec<String>,
    /// What each app container's probes run against, by name.
    targets: Vec<(String, probe::Target)>,
    replica: ReplicaInfo,
    state_dir: PathBuf,
}

impl Sandbox for HostProcess {
    fn target(&self, container: &str) -> Option<&probe::Target> {
        self.targets
            .iter()
            .find(|(name, _)| name == container)
            .map(|(_, t)| t)
    }

    fn start(&self) -> BoxFut<'_, Result<Launched, String>> {
        Box::pin(async move {
            let (child, pgid, mut outputs) = self.serving.spawn(0)?;
            self.write_record(pgid).await;
            let mut run = HostRun {
                child,
                pgid,
                sidecars: Vec::new(),
                terminating: AtomicBool::new(false),
                state_dir: self.state_dir.clone(),
            };
            for sidecar in &self.sidecars {
                match sidecar.spawn(pgid) {
                    Ok((child, _, more)) => {
                        outputs.extend(more);
                        run.sidecars.push(child);
                    }
                    Err(e) => {
                        // What did start goes again.
                        Box::new(run).finish().await;
                        return Err(e);
                    }
                }
            }
            Ok(Launched {
                outputs,
                run: Box::new(run),
            })
        })
    }

    fn init_containers(&self) -> &[String] {
        &self.init_names
    }

    fn start_init(&self, i: usize) -> BoxFut<'_, Result<Launched, String>> {
        Box::pin(async move {
            let c = self
                .inits
                .get(i)
                .ok_or_else(|| format!("no init container {i}"))?;
            let (child, pgid, outputs) = c.spawn(0)?;
            self.write_record(pgid).await;
            Ok(Launched {
                outputs,
                run: Box::new(HostRun {
                    child,
                    pgid,
                    sidecars: Vec::new(),
                    terminating: AtomicBool::new(false),
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

/// How long to wait for a SIGKILLed sidecar process to be reaped.
const REAP: Duration = Duration::from_secs(5);

/// One run of a process replica: its serving process, leader of the run's process group,
/// and its sidecars, members of that group.
struct HostRun {
    child: Child,
    pgid: i32,
    sidecars: Vec<Child>,
    /// SIGTERM was sent: the run is being stopped, and the sidecars get the grace period
    /// to exit too, as a pod's containers do; otherwise the run ends with the serving
    /// process.
    terminating: AtomicBool,
    state_dir: PathBuf,
}

impl Running for HostRun {
    fn wait(&mut self) -> BoxFut<'_, io::Result<Exit>> {
        Box::pin(async move {
            // Cancel-safe: a child keeps its status once reaped.
            let status = self.child.wait().await?;
            if self.terminating.load(Ordering::Relaxed) {
                for sidecar in &mut self.sidecars {
                    let _ = sidecar.wait().await;
                }
            }
            Ok(Exit {
                code: status.code(),
                signal: status.signal(),
            })
        })
    }

    fn signal(&self, signal: Signal) {
        if signal == Signal::SIGTERM {
            self.terminating.store(true, Ordering::Relaxed);
        }
        let _ = killpg(Pid::from_raw(self.pgid), signal);
    }

    fn meters(&self) -> Vec<Meter> {
        // The group's leader: its tree is the serving container (a child that left the
        // group with `setsid` is still its descendant); each sidecar's tree likewise.
        std::iter::once(self.pgid)
            .chain(
                self.sidecars
                    .iter()
                    .filter_map(|c| c.id().map(|p| p as i32)),
            )
            .map(Meter::tree)
            .collect()
    }

    fn finish(self: Box<Self>) -> BoxFut<'static, Option<String>> {
        Box::pin(async move {
            let mut this = *self;
            // Like a pod's containers, a replica ends when its serving process does:
            // whatever it left running in its group goes too (its sidecars among them),
            // and is reaped, so that no zombie is left.
            let _ = killpg(Pid::from_raw(this.pgid), Signal::SIGKILL);
            let _ = tokio::time::timeout(REAP, this.child.wait()).await;
            for sidecar in &mut this.sidecars {
                let _ = tokio::time::timeout(REAP, sidecar.wait()).await;
            }
            records::remove(&this.state_dir, this.pgid).await;
            None
        })
    }
}

/// The reason a process replica cannot honour a `volumeMount` (wisp's own: Kubernetes has
/// no runtime without mounts).
pub const VOLUME_MOUNT_UNSUPPORTED: &str = "VolumeMountUnsupported";

/// Why a revision cannot run here, if it cannot: the process platform runs each
/// container's `command` (the serving container's, its sidecars', its init containers'), so
/// it needs a serving container and a command for every container.
pub(crate) fn failure(spec: &ReplicaSpec) -> Option<Failure> {
    let Some(serving) = spec.serving_container() else {
        return Some(Failure {
            reason: "ContainerMissing".into(),
            message: "the revision has no container to run".into(),
        });
    };
    let pod = &spec.pod;
    let field = |list: &str, cs: &[Container], c: &Container| {
        let index = cs.iter().position(|x| x.name == c.name).unwrap_or(0);
        format!("spec.{list}[{index}]")
    };
    // The serving container first, so that its failure is the one shown.
    let all = std::iter::once((field("containers", &pod.containers, serving), serving, true))
        .chain(
            pod.containers
                .iter()
                .filter(|c| c.name != serving.name)
                .map(|c| (field("containers", &pod.containers, c), c, false)),
        )
        .chain(
            pod.init_containers
                .iter()
                .map(|c| (field("initContainers", &pod.init_containers, c), c, false)),
        );
    for (path, c, is_serving) in all {
        if let Some((i, m)) = c.volume_mounts.iter().enumerate().next() {
            return Some(Failure {
                reason: VOLUME_MOUNT_UNSUPPORTED.into(),
                message: format!(
                    "{path}.volumeMounts[{i}].mountPath {:?}: the process runtime runs the \
                     container as a host process, with no mount namespace to mount volume {:?} \
                     in; give the container an `image` to run it in a container",
                    m.mount_path, m.name
                ),
            });
        }
        if !c.command.is_empty() {
            continue;
        }
        let message = if !c.image.is_empty() {
            format!(
                "wisp's process runtime runs a container's `command`; image {:?} needs a \
                 container runtime, which this wisp does not have: set `command` to the \
                 program to run",
                c.image
            )
        } else if is_serving {
            "the container has no `command` to run".to_string()
        } else {
            // A sidecar or init container is as much part of the pod as the serving one:
            // the revision fails rather than run without it.
            format!(
                "{path} ({:?}): the container has no `command` to run",
                c.name
            )
        };
        return Some(Failure {
            reason: "ContainerMissing".into(),
            message,
        });
    }
    None
}

/// The parts of a revision's pod the process platform runs without, named for the log: it
/// runs every container's `command` (init containers first, then the serving container and
/// its sidecars in one process group), with their env, working directories and probes, on
/// the host as wisp's user. Empty when it runs the whole pod.
pub fn left_out(pod: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
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
    for c in pod.containers.iter().chain(&pod.init_containers) {
        if c.security_context.is_some() {
            out.push(format!("container {}'s securityContext", c.name));
        }
    }
    out
}

/// A free loopback port: bound and released at once. Another process could take it in
/// between (a replica that then fails to bind crashes and is restarted on the same port,
/// which works once that process lets go), but never another replica of this platform:
/// the kernel picks the port at random on each bind (50 binds in a row repeated a port in
/// 32 of 400 trials here), and a replica restarted on a port its sibling holds can never
/// bind it.
fn free_port(held: impl Fn(u16) -> bool) -> std::io::Result<u16> {
    port_not_in(held, || {
        Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port())
    })
}

/// The first port from `candidates` that is not `held`, within [`PORT_ATTEMPTS`] tries.
pub(crate) fn port_not_in(
    held: impl Fn(u16) -> bool,
    mut candidates: impl FnMut() -> std::io::Result<u16>,
) -> std::io::Result<u16> {
    for _ in 0..PORT_ATTEMPTS {
        let port = candidates()?;
        if !held(port) {
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
