//! The container backend: each replica is a pod-like sandbox.
//!
//! A replica gets its own network namespace with an address on a bridge this platform owns
//! (`net.rs`), shared by all of its containers, so the app listens on its fixed
//! `containerPort` and sidecars reach it on `localhost`, as in a pod. Each container is an
//! OCI bundle (`spec.rs` builds `config.json`) whose root is an overlay: the image's rootfs
//! (shared by every replica, never written) below, a fresh writable layer per run above.
//! A [`Runtime`] starts it: wisp's own (`native/`, the default: the app is exec'd by a
//! helper wisp spawns, no runtime binary per start) or `runc run -d` (`runc.rs`, the
//! reference). Either way wisp reaps the app itself and learns its exit (and OOM kills)
//! from the kernel. Everything else (scaling, probes, crash back-off, graceful stop,
//! logs) is the same supervisor the process backend uses: this module only implements its
//! `Launcher` (`process/launch.rs`).
//!
//! Images come from an [`ImageProvider`]: this crate does not pull or unpack anything.
//!
//! Start with [`ProcessPlatform::containers`](crate::process::ProcessPlatform::containers)
//! and [`ContainerOptions`].

pub mod hostfs;
mod native;
mod net;
mod runc;
mod seccomp;
mod spec;
mod standby;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeSet, HashSet},
    future::Future,
    io,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use nix::{
    mount::{MntFlags, MsFlags, mount, umount2},
    sys::signal::Signal,
};
use tokio::runtime::Handle;
use wisp_api::serving::{Container, PodSpec};

pub use self::native::{EXEC_COMMAND, INIT_COMMAND, helper_main};
use self::{
    native::{Native, Parked, cgroups},
    net::Network,
    runc::{Init, Runc},
    standby::Standbys,
};
use crate::{
    Failure, ReplicaSpec, RevisionKey, podconfig,
    process::{
        ProcessOptions, ProcessPlatform,
        launch::{BoxFut, Exit, Launched, Launcher, ReplicaInfo, Running, Sandbox},
        lock, probe,
    },
    usage::Meter,
};

/// An image ready to run: its unpacked root filesystem (shared by every replica, never
/// written) and the parts of its config a runtime honours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedImage {
    pub rootfs: PathBuf,
    pub config: ImageConfig,
}

/// The image config fields (OCI image spec `config`) a container runtime honours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `KEY=VALUE`.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    /// `user`, `uid`, `user:group` or `uid:gid`.
    pub user: Option<String>,
}

/// Where images come from: the image store plugs in here.
pub trait ImageProvider: Send + Sync + 'static {
    /// `image` is the container's image reference, or the digest it resolved to. Pulls and
    /// unpacks if needed, with the credentials `pull` names. A failure carries Kubernetes'
    /// reason (`ErrImagePull`, …) and is shown on the replica; the platform retries with
    /// back-off. A pull reports its bytes as they come through `progress`.
    fn prepare<'a>(
        &'a self,
        image: &'a str,
        pull: &'a PullSecrets,
        progress: &'a (dyn Fn(PullProgress) + Send + Sync),
    ) -> Pin<Box<dyn Future<Output = Result<PreparedImage, Failure>> + Send + 'a>>;
}

/// How far a pull is: bytes fetched of the bytes to fetch (the layers missing here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullProgress {
    pub done: u64,
    pub total: u64,
}

impl PullProgress {
    /// What a revision shows while its replica waits for the pull of `image`.
    pub fn message(&self, image: &str) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        format!(
            "Pulling image {image:?}: {:.1} MB of {:.1} MB",
            mb(self.done),
            mb(self.total)
        )
    }
}

/// The pod's `imagePullSecrets`: Secrets of its namespace that hold registry credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullSecrets {
    pub namespace: String,
    pub names: Vec<String>,
}

impl PullSecrets {
    /// The pull secrets a pod names.
    pub fn of(namespace: &str, pod: &PodSpec) -> PullSecrets {
        PullSecrets {
            namespace: namespace.to_owned(),
            names: pod
                .image_pull_secrets
                .iter()
                .filter_map(|s| s.get("name").and_then(|n| n.as_str()))
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// Tunables of the container platform.
#[derive(Clone, Debug)]
pub struct ContainerOptions {
    /// Supervision (probes, back-off, logs): shared with the process runtime.
    pub supervision: ProcessOptions,
    /// runc's state root, bundles and sandbox files live here. One per platform.
    pub state_dir: PathBuf,
    /// The bridge replicas attach to; also the prefix of every namespace and veth this
    /// platform creates (at most 8 bytes). Default `wisp0`.
    pub bridge: String,
    /// Private IPv4 subnet replicas get addresses from; the first host is the bridge's.
    /// Default `10.88.0.0/16`.
    pub subnet: String,
    /// What starts containers. Default: wisp's own runtime, run by this very binary.
    pub runtime: Runtime,
}

/// Which runtime starts containers. Both run the same bundles, with the same sandboxes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// wisp's own: `program` runs as each container's init (`program container-init
    /// <bundle>`), so it must be a binary whose `main` calls [`helper_main`] first: wisp
    /// itself (`/proc/self/exe`, the default).
    Native { program: PathBuf },
    /// runc, the reference: `binary` (looked up on `PATH` when bare).
    Runc { binary: PathBuf },
}

impl Runtime {
    /// wisp's own runtime, run by the current binary.
    pub fn native() -> Runtime {
        Runtime::Native {
            program: "/proc/self/exe".into(),
        }
    }

    /// runc from `PATH`.
    pub fn runc() -> Runtime {
        Runtime::Runc {
            binary: "runc".into(),
        }
    }
}

impl ContainerOptions {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        ContainerOptions {
            supervision: ProcessOptions::default(),
            state_dir: state_dir.into(),
            bridge: "wisp0".into(),
            subnet: "10.88.0.0/16".into(),
            runtime: Runtime::native(),
        }
    }
}

/// Why the container platform could not be created. (A machine that cannot run
/// containers is not an error here: every replica reports why instead.)
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("the container runtime must be created inside a tokio runtime")]
    NoRuntime,
    #[error("bridge name {0:?}: must be 1 to 8 letters, digits or '-'")]
    Bridge(String),
    #[error("subnet {0:?}: must be an IPv4 network like 10.88.0.0/16 (prefix 8 to 30)")]
    Subnet(String),
    #[error("state directory {}: {source}", path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl ProcessPlatform {
    /// The container platform: replicas run as containers in sandboxes of their own
    /// (see the module docs of `container`). Must be called inside a tokio runtime. What an
    /// earlier run left (containers, namespaces, mounts) is removed in the background before
    /// any replica starts. Without the runtime, root or namespaces, the platform is still created
    /// and every replica reports a failure that names the fix.
    pub fn containers(
        options: ContainerOptions,
        images: Arc<dyn ImageProvider>,
    ) -> Result<Arc<ProcessPlatform>, ContainerError> {
        let runtime = Handle::try_current().map_err(|_| ContainerError::NoRuntime)?;
        let b = &options.bridge;
        if b.is_empty()
            || b.len() > net::MAX_BRIDGE_NAME
            || !b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        {
            return Err(ContainerError::Bridge(b.clone()));
        }
        let (base, prefix) = net::parse_subnet(&options.subnet)
            .ok_or(ContainerError::Subnet(options.subnet.clone()))?;
        let dir = &options.state_dir;
        std::fs::create_dir_all(dir).map_err(|source| ContainerError::StateDir {
            path: dir.clone(),
            source,
        })?;
        let (engine, unusable) = match &options.runtime {
            Runtime::Runc { binary: wanted } => {
                let binary = find_binary(wanted);
                let unusable = unusable(binary.as_deref(), wanted, true);
                let runc = Runc {
                    binary: binary.unwrap_or_else(|| wanted.clone()),
                    root: dir.join("runc"),
                };
                (Engine::Runc(runc), unusable)
            }
            Runtime::Native { program } => {
                let found = program.is_file().then(|| program.clone());
                let unusable = unusable(found.as_deref(), program, false);
                let native = Native {
                    program: program.clone(),
                };
                (Engine::Native(native), unusable)
            }
        };
        let launcher = ContainerLauncher {
            net: Network {
                bridge: options.bridge.clone(),
                base,
                prefix,
            },
            engine,
            dir: dir.clone(),
            images,
            unusable: Mutex::new(unusable),
            network: tokio::sync::OnceCell::new(),
            compiled: Mutex::new(Default::default()),
            // Read once: wisp's runtime makes cgroups in each, and a restart's clean-up
            // looks for leftovers there, whichever runtime made them.
            hierarchies: cgroups::hierarchies().unwrap_or_default().into(),
            standbys: Mutex::default(),
        };
        Ok(ProcessPlatform::with_launcher(
            runtime,
            dir,
            Arc::new(launcher),
            options.supervision,
        ))
    }
}

fn find_binary(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Why this machine cannot run containers, naming the fix; None if it can. `runc`: the
/// runtime is runc (which needs wisp to be a subreaper), else wisp's own.
fn unusable(binary: Option<&Path>, wanted: &Path, runc: bool) -> Option<Failure> {
    let fail = |message: String| {
        Some(Failure {
            reason: "ContainerRuntimeUnavailable".into(),
            message,
        })
    };
    if binary.is_none() && !runc {
        return fail(format!(
            "wisp's container runtime needs its helper binary {:?}, which does not exist",
            wanted.display().to_string()
        ));
    }
    if binary.is_none() {
        return fail(format!(
            "the container runtime {:?} is not installed: install it (Debian: `apt-get install \
             runc`) or run the container's `command` on the process runtime",
            wanted.display().to_string()
        ));
    }
    if !rustix::process::geteuid().is_root() {
        return fail(
            "running containers needs root (network namespaces, bridges, cgroups): run wisp \
             as root"
                .into(),
        );
    }
    if !Path::new("/proc/self/ns/net").exists() || !Path::new("/proc/self/ns/pid").exists() {
        return fail(
            "this kernel has no network or PID namespaces (CONFIG_NET_NS, CONFIG_PID_NS): \
             containers cannot run here"
                .into(),
        );
    }
    // runc reparents each container's init to wisp; wisp must be able to reap it.
    if runc && let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        return fail(format!("cannot become a child subreaper (prctl): {e}"));
    }
    None
}

/// The runtime a platform uses.
#[derive(Clone, Debug)]
enum Engine {
    Runc(Runc),
    Native(Native),
}

struct ContainerLauncher {
    net: Network,
    engine: Engine,
    dir: PathBuf,
    images: Arc<dyn ImageProvider>,
    /// Set when the machine cannot run containers (at creation).
    unusable: Mutex<Option<Failure>>,
    /// The bridge and NAT, set up when the first replica needs them (so a `wisp serve` that
    /// runs no container touches neither the host's links nor its iptables); `Some` failure
    /// when that could not be done.
    network: tokio::sync::OnceCell<Option<Failure>>,
    /// Seccomp profiles compiled for wisp's runtime, by the bounding capabilities they
    /// were made for (the only input of `RuntimeDefault`): compiled once, installed by each
    /// start.
    compiled: Mutex<std::collections::HashMap<Vec<String>, Arc<Vec<u8>>>>,
    /// The machine's cgroup hierarchies.
    hierarchies: Arc<[cgroups::Hierarchy]>,
    /// Sandboxes readied for revisions scaled to zero (`standby.rs`).
    standbys: Mutex<Standbys<ContainerSandbox>>,
}

impl ContainerLauncher {
    fn bundles(&self) -> PathBuf {
        self.dir.join("bundles")
    }

    fn sandboxes(&self) -> PathBuf {
        self.dir.join("sandboxes")
    }

    /// Sets up the bridge and NAT once, for the first replica.
    async fn ensure_network(&self) -> Result<(), Failure> {
        let failure = self
            .network
            .get_or_init(|| async {
                // Once per platform, with the rest of what the first replica needs.
                tokio::task::spawn_blocking(cgroups::favor_dynamic_modifications)
                    .await
                    .ok();
                self.net.set_up().await.err().map(|e| Failure {
                    reason: "ContainerRuntimeUnavailable".into(),
                    message: format!(
                        "setting up the replicas' network (bridge {}, {}/{}) failed: {e}; wisp \
                         needs root and iptables",
                        self.net.bridge, self.net.base, self.net.prefix
                    ),
                })
            })
            .await;
        failure.clone().map_or(Ok(()), Err)
    }

    /// The cgroup every container of this platform is under.
    fn cgroup_parent(&self) -> String {
        format!("/wisp-{}", self.net.bridge)
    }

    fn cgroups_path(&self, id: &str) -> String {
        format!("{}/{id}", self.cgroup_parent())
    }

    /// Makes the standby reserved for `spec`'s next replica at `address`: the sandbox as
    /// [`prepare`](Self::prepare) makes it, its root mounted and the serving container's
    /// init parked. Filled into `slot` (left empty, and the reservation released, if any of
    /// it fails: the replica then makes its sandbox itself).
    async fn make_standby(
        &self,
        spec: Arc<ReplicaSpec>,
        objects: Arc<dyn podconfig::ObjectSource>,
        address: SocketAddr,
        mut slot: tokio::sync::OwnedMutexGuard<Option<ContainerSandbox>>,
    ) {
        let key = spec.key.clone();
        let made = async {
            self.ensure_network().await.map_err(|f| f.message)?;
            let info = ReplicaInfo {
                key: key.clone(),
                // The hostname until a replica takes it (`take_standby` renames it).
                name: format!("{}-standby", key.name),
                spec: spec.clone(),
                address,
                objects,
                waiting: Arc::new(|_| {}),
            };
            let sandbox = match self.prepare(&info).await {
                Ok(sandbox) => sandbox,
                Err(f) => {
                    self.remove_half_made(address).await;
                    return Err(f.message);
                }
            };
            match sandbox.park_serving().await {
                Ok(()) => Ok(sandbox),
                Err(e) => {
                    Box::new(sandbox).remove().await;
                    Err(e)
                }
            }
        };
        let began = std::time::Instant::now();
        match made.await {
            Ok(sandbox) => {
                tracing::debug!(revision = %key, took = ?began.elapsed(), "standby sandbox ready");
                *slot = Some(sandbox);
            }
            Err(e) => {
                tracing::debug!(revision = %key, "no standby sandbox: {e}");
                let mutex = tokio::sync::OwnedMutexGuard::mutex(&slot).clone();
                lock(&self.standbys).release(&key, &mutex);
            }
        }
    }

    /// The standby readied for this replica's revision at its address, renamed for it;
    /// None if there is none (or it was for another spec: it is removed).
    async fn take_standby(&self, replica: &ReplicaInfo) -> Option<ContainerSandbox> {
        let slot = lock(&self.standbys).take(&replica.key, replica.address)?;
        // Waits for its making if it is not done yet.
        let sandbox = slot.lock().await.take()?;
        let ip = match replica.address {
            SocketAddr::V4(a) if sandbox.spec == replica.spec => *a.ip(),
            _ => {
                Box::new(sandbox).remove().await;
                return None;
            }
        };
        // The files are bind-mounted into the container: rewritten in place, as the
        // kubelet writes a pod's.
        let hostname = pod_hostname(&replica.name);
        if let Err(e) = write_sandbox_files(&sandbox.dir, &hostname, ip).await {
            tracing::debug!(replica = %replica.name, "standby sandbox not used: {e}");
            Box::new(sandbox).remove().await;
            return None;
        }
        if let Some(parked) = lock(&sandbox.parked).as_mut() {
            parked.1 = hostname;
        }
        tracing::debug!(replica = %replica.name, "standby sandbox taken");
        Some(sandbox)
    }

    /// Removes a standby that was pushed out or forgotten (once made, if it still is being
    /// made), then frees its address.
    async fn dispose(&self, address: SocketAddr, slot: standby::Slot<ContainerSandbox>) {
        if let Some(sandbox) = slot.lock().await.take() {
            Box::new(sandbox).remove().await;
        }
        lock(&self.standbys).retired(address);
    }

    /// Removes what a failed preparation for `address` left (namespace, sandbox files).
    async fn remove_half_made(&self, address: SocketAddr) {
        let ip = match address {
            SocketAddr::V4(a) => Some(*a.ip()),
            SocketAddr::V6(_) => None,
        };
        if let Some(n) = ip.and_then(|ip| self.net.host_number(ip)) {
            self.net.remove_sandbox(n).await;
            let dir = self.sandboxes().join(self.net.netns_name(n));
            unmount_under(&dir);
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
    }

    async fn prepare(&self, replica: &ReplicaInfo) -> Result<ContainerSandbox, Failure> {
        let error = |reason: &str, message: String| Failure {
            reason: reason.into(),
            message,
        };
        let ip = match replica.address {
            SocketAddr::V4(a) => *a.ip(),
            SocketAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        let n = self
            .net
            .host_number(ip)
            .ok_or_else(|| error("CreateContainerError", format!("address {ip} is not ours")))?;
        let spec = &replica.spec;
        let pull = PullSecrets::of(&spec.key.namespace, &spec.pod);
        let serving = spec
            .serving_container()
            .ok_or_else(|| error("ContainerMissing", "the revision has no container".into()))?;
        // The serving container first: it is the one waited on.
        let containers: Vec<&Container> = std::iter::once(serving)
            .chain(
                spec.pod
                    .containers
                    .iter()
                    .filter(|c| c.name != serving.name),
            )
            .collect();
        // Init containers are made with the others, in the same sandbox (network
        // namespace, volumes, cgroup parent), as a pod's are; they run first.
        let all: Vec<&Container> = containers
            .iter()
            .copied()
            .chain(&spec.pod.init_containers)
            .collect();
        let sandbox_dir = self.sandboxes().join(self.net.netns_name(n));
        write_sandbox_files(&sandbox_dir, &pod_hostname(&replica.name), ip)
            .await
            .map_err(|e| error("CreateContainerError", format!("sandbox files: {e}")))?;
        let files: Vec<(PathBuf, String)> = ["hosts", "hostname", "resolv.conf"]
            .iter()
            .map(|f| (sandbox_dir.join(f), format!("/etc/{f}")))
            .collect();
        let port = replica.address.port();
        let volumes_dir = sandbox_dir.join("volumes");
        let file_volumes = self.prepare_volumes(replica, &all, &volumes_dir).await?;
        let pod_info = replica.pod_info();
        let mut ctrs = Vec::new();
        for c in &all {
            let mut binds = Vec::new();
            for (i, m) in c.volume_mounts.iter().enumerate() {
                binds.push(
                    volume_bind(&volumes_dir, m, &file_volumes).map_err(|message| {
                        error(
                            podconfig::CREATE_CONTAINER_CONFIG_ERROR,
                            format!("container {}: volumeMounts[{i}]: {message}", c.name),
                        )
                    })?,
                );
            }
            // Secrets and ConfigMaps are read now, as the kubelet builds a container's env
            // when it creates it: a running container's env never changes.
            let (c, warnings) = podconfig::resolve_env(c, &pod_info, &*replica.objects)?;
            for w in warnings {
                tracing::warn!(revision = %replica.key, replica = %replica.name, "{w}");
            }
            let c = &c;
            let report = |p: PullProgress| (replica.waiting)(p.message(&c.image));
            let image = self.images.prepare(&c.image, &pull, &report).await?;
            // A symlink could point out of the image (at the host's own files): not followed.
            let read = |f: &str| {
                let path = image.rootfs.join(f);
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_file() => std::fs::read_to_string(&path).unwrap_or_default(),
                    _ => String::new(),
                }
            };
            let identity = spec::Identity {
                namespace: &replica.key.namespace,
                pod: &replica.name,
                uid: &spec.uid,
                service: &spec.service,
                configuration: &spec.configuration,
                revision: &replica.key.name,
                app: !spec.pod.init_containers.iter().any(|i| i.name == c.name),
            };
            // PORT is the serving container's alone, as in Knative.
            let plan = spec::plan(
                c,
                &image.config,
                (c.name == serving.name).then_some(port),
                &identity,
                &read("etc/passwd"),
                &read("etc/group"),
            )?;
            let sc = c.security_context.as_ref();
            let id = format!("{}-{}", self.net.netns_name(n), c.name);
            let bundle = self.bundles().join(&id);
            let capabilities = spec::capabilities(c)?;
            let profile = match seccomp::profile(c, spec.pod.extra.get("securityContext"))? {
                seccomp::Profile::Unconfined => None,
                seccomp::Profile::RuntimeDefault => Some(
                    seccomp::runtime_default(&capabilities)
                        .map_err(|e| error("CreateContainerConfigError", e.to_string()))?,
                ),
            };
            // runc compiles the profile in config.json at every start; wisp's runtime gets
            // it compiled, once per profile.
            let (seccomp, compiled) = match (&self.engine, profile) {
                (Engine::Native(_), Some(p)) => (None, Some(self.compile(&capabilities, p).await?)),
                (_, p) => (p, None),
            };
            let b = spec::Bundle {
                rootfs: bundle.join("rootfs"),
                readonly_rootfs: sc.and_then(|s| s.read_only_root_filesystem) == Some(true),
                hostname: pod_hostname(&replica.name),
                netns: self.net.netns_path(n),
                files: files.clone(),
                cgroups_path: self.cgroups_path(&id),
                no_new_privileges: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
                capabilities,
                limits: spec::limits(c)?,
                seccomp,
                volumes: binds,
            };
            let config = spec::runtime_spec(&plan, &b)
                .map_err(|e| error("CreateContainerConfigError", e.to_string()))?;
            tokio::fs::create_dir_all(&bundle)
                .await
                .map_err(|e| error("CreateContainerError", format!("bundle: {e}")))?;
            config
                .save(bundle.join("config.json"))
                .map_err(|e| error("CreateContainerError", format!("config.json: {e}")))?;
            let bpf = bundle.join(native::SECCOMP_FILE);
            match &compiled {
                Some(bytes) => tokio::fs::write(&bpf, &**bytes).await,
                None => match tokio::fs::remove_file(&bpf).await {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                },
            }
            .map_err(|e| error("CreateContainerError", format!("{}: {e}", bpf.display())))?;
            ctrs.push(Ctr {
                id: id.clone(),
                bundle,
                lower: image.rootfs.clone(),
                cgroups_path: b.cgroups_path.clone(),
                resources: native::resources(&config).cloned(),
            });
        }
        let inits = ctrs.split_off(containers.len());
        let netns_started = std::time::Instant::now();
        self.net.add_sandbox(n).await.map_err(|e| {
            error(
                "CreateContainerError",
                format!("network namespace for {}: {e}", replica.name),
            )
        })?;
        tracing::debug!(
            replica = %replica.name,
            took = ?netns_started.elapsed(),
            "network namespace made"
        );
        // One network namespace per replica: every app container's probes reach it at the
        // replica's IP (a sidecar's at the port it names); exec probes run in the
        // container they belong to.
        let targets = containers
            .iter()
            .zip(&ctrs)
            .map(|(c, ctr)| {
                let target = probe::Target {
                    address: replica.address,
                    env: Arc::new([]),
                    working_dir: None,
                    exec_prefix: self.engine.exec_prefix(ctr).into(),
                };
                (c.name.clone(), target)
            })
            .collect();
        Ok(ContainerSandbox {
            containers: ctrs,
            init_names: spec
                .pod
                .init_containers
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            inits,
            targets,
            engine: self.engine.clone(),
            hierarchies: self.hierarchies.clone(),
            net: self.net.clone(),
            n,
            dir: sandbox_dir,
            volumes: VolumeSync {
                namespace: replica.key.namespace.clone(),
                dir: volumes_dir,
                volumes: file_volumes
                    .into_iter()
                    .filter_map(|name| spec.pod.volumes.iter().find(|v| v.name == name).cloned())
                    .collect(),
                objects: replica.objects.clone(),
            },
            spec: replica.spec.clone(),
            parked: Mutex::new(None),
        })
    }

    /// The `RuntimeDefault` profile for `bounding` compiled to BPF (`seccomp.bpf`'s bytes),
    /// from the cache or compiled now, off the async threads.
    async fn compile(
        &self,
        bounding: &std::collections::HashSet<oci_spec::runtime::Capability>,
        profile: oci_spec::runtime::LinuxSeccomp,
    ) -> Result<Arc<Vec<u8>>, Failure> {
        let mut key: Vec<String> = bounding.iter().map(|c| c.to_string()).collect();
        key.sort();
        if let Some(bytes) = lock(&self.compiled).get(&key) {
            return Ok(bytes.clone());
        }
        let bytes = tokio::task::spawn_blocking(move || {
            seccomp::compile(&profile).map(|programs| seccomp::encode(&programs))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .map_err(|message| Failure {
            reason: "CreateContainerConfigError".into(),
            message,
        })?;
        let bytes = Arc::new(bytes);
        lock(&self.compiled).insert(key, bytes.clone());
        Ok(bytes)
    }

    /// Makes the pod's mounted volumes under `dir` (`<sandbox>/volumes/<name>`): the files
    /// of secret, configMap and projected volumes (atomic writer), empty directories for
    /// `emptyDir` (a tmpfs for `medium: Memory`). Returns the names of the file volumes.
    async fn prepare_volumes(
        &self,
        replica: &ReplicaInfo,
        containers: &[&Container],
        dir: &Path,
    ) -> Result<BTreeSet<String>, Failure> {
        let mut files = BTreeSet::new();
        for v in &replica.spec.pod.volumes {
            let mounted = containers
                .iter()
                .any(|c| c.volume_mounts.iter().any(|m| m.name == v.name));
            if !mounted {
                continue;
            }
            let content = podconfig::volume_content(v, &replica.key.namespace, &*replica.objects)?;
            let path = dir.join(&v.name);
            let io_error = |e: io::Error| Failure {
                reason: podconfig::CONTAINER_CREATING.into(),
                message: format!("MountVolume.SetUp failed for volume {:?} : {e}", v.name),
            };
            match content {
                podconfig::VolumeContent::Files(payload) => {
                    let p = path.clone();
                    tokio::task::spawn_blocking(move || podconfig::write_atomic(&p, &payload))
                        .await
                        .map_err(|e| io_error(io::Error::other(e.to_string())))?
                        .map_err(io_error)?;
                    files.insert(v.name.clone());
                }
                podconfig::VolumeContent::EmptyDir { memory } => {
                    std::fs::create_dir_all(&path).map_err(io_error)?;
                    if memory {
                        // One tmpfs shared by the pod's containers, as the kubelet mounts
                        // a Memory emptyDir once per pod.
                        mount(
                            Some("tmpfs"),
                            &path,
                            Some("tmpfs"),
                            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                            Some("mode=1777"),
                        )
                        .map_err(|e| io_error(io::Error::from(e)))?;
                    } else {
                        use std::os::unix::fs::PermissionsExt;
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                            .map_err(io_error)?;
                    }
                }
            }
        }
        Ok(files)
    }
}

/// A container's `volumeMount` as a bind of the volume's directory (or, with `subPath`,
/// an entry inside it). Secret, configMap and projected volumes are always read-only, as
/// the kubelet mounts them.
fn volume_bind(
    volumes_dir: &Path,
    m: &wisp_api::serving::VolumeMount,
    file_volumes: &BTreeSet<String>,
) -> Result<spec::VolumeBind, String> {
    let mut source = volumes_dir.join(&m.name);
    if !source.exists() {
        return Err(format!(
            "volume {:?} is not among the pod's volumes",
            m.name
        ));
    }
    if !m.sub_path.is_empty() {
        let sub = Path::new(&m.sub_path);
        if sub.is_absolute()
            || sub
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!(
                "subPath {:?} must be a relative path inside the volume",
                m.sub_path
            ));
        }
        source = source.join(sub);
        if !file_volumes.contains(&m.name) && !source.exists() {
            // The kubelet creates a missing subPath of a writable volume.
            std::fs::create_dir_all(&source)
                .map_err(|e| format!("subPath {:?}: {e}", m.sub_path))?;
        }
    }
    Ok(spec::VolumeBind {
        source,
        destination: m.mount_path.clone(),
        read_only: m.read_only == Some(true) || file_volumes.contains(&m.name),
    })
}

/// A sandbox's Secret/ConfigMap volumes, rewritten when their objects change.
#[derive(Debug)]
struct VolumeSync {
    namespace: String,
    dir: PathBuf,
    volumes: Vec<wisp_api::serving::Volume>,
    objects: Arc<dyn podconfig::ObjectSource>,
}

impl VolumeSync {
    /// The kubelet's volume sync: each volume's current payload, through the atomic writer
    /// (which writes nothing when nothing changed). A volume whose object went missing
    /// keeps its last files, as the kubelet keeps a mounted volume when a resync fails.
    async fn refresh(&self) {
        for v in &self.volumes {
            let payload = match podconfig::volume_content(v, &self.namespace, &*self.objects) {
                Ok(podconfig::VolumeContent::Files(p)) => p,
                Ok(podconfig::VolumeContent::EmptyDir { .. }) => continue,
                Err(f) => {
                    tracing::warn!(volume = %v.name, "not updated: {}", f.message);
                    continue;
                }
            };
            let path = self.dir.join(&v.name);
            let name = v.name.clone();
            match tokio::task::spawn_blocking(move || podconfig::write_atomic(&path, &payload))
                .await
            {
                Ok(Ok(true)) => tracing::info!(volume = %name, "volume files updated"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(volume = %name, "updating volume files: {e}"),
                Err(e) => tracing::warn!(volume = %name, "updating volume files: {e}"),
            }
        }
    }
}

impl Launcher for ContainerLauncher {
    fn failure(&self, spec: &ReplicaSpec) -> Option<Failure> {
        if let Some(f) = lock(&self.unusable).clone() {
            return Some(f);
        }
        let missing = |message: String| {
            Some(Failure {
                reason: "ContainerMissing".into(),
                message,
            })
        };
        if spec.serving_container().is_none() {
            return missing("the revision has no container to run".into());
        }
        if let Some(c) = spec
            .pod
            .containers
            .iter()
            .chain(&spec.pod.init_containers)
            .find(|c| c.image.is_empty())
        {
            return missing(format!(
                "container {:?} has no image: the container runtime runs images",
                c.name
            ));
        }
        None
    }

    fn left_out(&self, pod: &PodSpec) -> Vec<String> {
        let mut out = Vec::new();
        // Volumes no container mounts have nothing to do.
        let unmounted: Vec<&str> = pod
            .volumes
            .iter()
            .filter(|v| {
                !pod.containers
                    .iter()
                    .chain(&pod.init_containers)
                    .any(|c| c.volume_mounts.iter().any(|m| m.name == v.name))
            })
            .map(|v| v.name.as_str())
            .collect();
        if !unmounted.is_empty() {
            out.push(format!("unmounted volume(s) {}", unmounted.join(", ")));
        }
        if !pod.service_account_name.is_empty() {
            out.push(format!("service account {}", pod.service_account_name));
        }
        // The pod's seccompProfile is honoured; nothing else of its securityContext.
        if let Some(sc) = pod.extra.get("securityContext").and_then(|v| v.as_object())
            && sc.keys().any(|k| k != "seccompProfile")
        {
            out.push("the pod's securityContext (but seccompProfile)".into());
        }
        out
    }

    fn address(&self, spec: &ReplicaSpec, taken: &HashSet<SocketAddr>) -> io::Result<SocketAddr> {
        // Knative's default containerPort.
        let port = spec
            .serving_container()
            .and_then(|c| c.ports.first())
            .and_then(|p| u16::try_from(p.container_port).ok())
            .filter(|p| *p != 0)
            .unwrap_or(8080);
        let standbys = lock(&self.standbys);
        // Its standby's, unless a replica holds it already (two started at once).
        if let Some(a) = standbys
            .address_of(&spec.key)
            .filter(|a| !taken.contains(a))
        {
            return Ok(a);
        }
        let used: HashSet<Ipv4Addr> = taken
            .iter()
            .copied()
            .chain(standbys.reserved_except(&spec.key))
            .filter_map(|a| match a {
                SocketAddr::V4(a) => Some(*a.ip()),
                SocketAddr::V6(_) => None,
            })
            .collect();
        self.net
            .replica_hosts()
            .map(|n| self.net.host(n))
            .find(|ip| !used.contains(ip))
            .map(|ip| SocketAddr::from((ip, port)))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "every address of {}/{} is taken",
                        self.net.base, self.net.prefix
                    ),
                )
            })
    }

    fn clean_up(&self) -> BoxFut<'_, ()> {
        Box::pin(async move {
            if lock(&self.unusable).is_some() {
                return;
            }
            // Containers of an earlier run: only those under this platform's runc root…
            if let Engine::Runc(runc) = &self.engine {
                for id in runc.list().await {
                    tracing::info!("removing container {id} left by an earlier run");
                    runc.delete(&id).await;
                }
            }
            // …and whatever runs in this platform's cgroups (wisp's runtime's apps, which
            // outlived their wisp; anything runc left).
            let parent = self.cgroup_parent();
            let mut ids = BTreeSet::new();
            for h in self.hierarchies.iter() {
                let Ok(entries) = std::fs::read_dir(cgroups::dir(h, &parent)) else {
                    continue;
                };
                ids.extend(
                    entries
                        .filter_map(|e| e.ok())
                        .filter(|e| e.path().is_dir())
                        .map(|e| e.file_name().to_string_lossy().into_owned()),
                );
            }
            for id in ids {
                tracing::info!("removing the cgroup of container {id} left by an earlier run");
                end_cgroup(&self.hierarchies, &format!("{parent}/{id}")).await;
            }
            unmount_under(&self.bundles());
            let _ = tokio::fs::remove_dir_all(self.bundles()).await;
            let _ = tokio::fs::remove_dir_all(self.sandboxes()).await;
            for n in self.net.existing_sandboxes().await {
                tracing::info!(
                    "removing network namespace {} left by an earlier run",
                    self.net.netns_name(n)
                );
                self.net.remove_sandbox(n).await;
            }
            // The bridge and NAT rule of an earlier run go too; the first replica of this
            // run sets them up again.
            if self.net.bridge_exists().await {
                self.net.tear_down().await;
            }
        })
    }

    fn sandbox(&self, replica: ReplicaInfo) -> BoxFut<'_, Result<Box<dyn Sandbox>, Failure>> {
        Box::pin(async move {
            if let Some(f) = lock(&self.unusable).clone() {
                return Err(f);
            }
            self.ensure_network().await?;
            if let Some(sandbox) = self.take_standby(&replica).await {
                return Ok(Box::new(sandbox) as Box<dyn Sandbox>);
            }
            match self.prepare(&replica).await {
                Ok(sandbox) => Ok(Box::new(sandbox) as Box<dyn Sandbox>),
                Err(f) => {
                    // Nothing half-made stays behind.
                    self.remove_half_made(replica.address).await;
                    Err(f)
                }
            }
        })
    }

    fn warm(&self, spec: Arc<ReplicaSpec>) -> BoxFut<'_, ()> {
        Box::pin(async move {
            if lock(&self.unusable).is_some() || self.failure(&spec).is_some() {
                return;
            }
            // The bridge and NAT rule (a few `iptables` runs), and each image unpacked: a
            // revision's first replica would otherwise wait for both.
            if self.ensure_network().await.is_err() {
                return;
            }
            let pull = PullSecrets::of(&spec.key.namespace, &spec.pod);
            let mut images: Vec<&str> = spec
                .pod
                .containers
                .iter()
                .chain(&spec.pod.init_containers)
                .map(|c| &*c.image)
                .collect();
            images.dedup();
            for image in images.into_iter().filter(|i| !i.is_empty()) {
                if let Err(f) = self.images.prepare(image, &pull, &|_| {}).await {
                    tracing::debug!(revision = %spec.key, image, "not readied ahead: {}", f.message);
                }
            }
        })
    }

    fn standby(
        self: Arc<Self>,
        spec: Arc<ReplicaSpec>,
        objects: Arc<dyn podconfig::ObjectSource>,
        taken: &HashSet<SocketAddr>,
    ) -> Option<BoxFut<'static, ()>> {
        // wisp's runtime only: runc has no way to stop an init before the app.
        if !matches!(self.engine, Engine::Native(_))
            || !standby::parkable(&spec.pod)
            || self.failure(&spec).is_some()
        {
            return None;
        }
        // (One the revision has already gives its own address, which `reserve` refuses.)
        let address = self.address(&spec, taken).ok()?;
        let (guard, evicted) =
            lock(&self.standbys).reserve(&spec.key, address, std::time::Instant::now())?;
        Some(Box::pin(async move {
            if let Some((address, slot)) = evicted {
                self.dispose(address, slot).await;
            }
            self.make_standby(spec, objects, address, guard).await;
        }))
    }

    fn forget(self: Arc<Self>, key: &RevisionKey) -> Option<BoxFut<'static, ()>> {
        let (address, slot) = lock(&self.standbys).forget(key)?;
        Some(Box::pin(async move { self.dispose(address, slot).await }))
    }

    fn shutdown(&self) -> BoxFut<'_, ()> {
        Box::pin(async move {
            let standbys = lock(&self.standbys).drain();
            for slot in standbys {
                if let Some(sandbox) = slot.lock().await.take() {
                    Box::new(sandbox).remove().await;
                }
            }
            // Only what this run set up: nothing if no replica ever ran.
            if lock(&self.unusable).is_none() && self.network.initialized() {
                // Every replica has stopped: a namespace left is a standby's whose making
                // was cut short by the shutdown.
                for n in self.net.existing_sandboxes().await {
                    self.net.remove_sandbox(n).await;
                }
                self.net.tear_down().await;
                // `runc delete` removes each container's cgroup but not their parent.
                remove_cgroup_parents(&format!("wisp-{}", self.net.bridge));
            }
        })
    }
}

/// A pod's hostname: its name, cut to 63 characters without a trailing `-` or `.` (the
/// kubelet's `truncatePodHostnameIfNeeded`), since a replica is named as a Deployment's pod
/// is and such names can be longer than a hostname may be.
fn pod_hostname(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    name[..63].trim_end_matches(['-', '.']).to_string()
}

/// `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` of a replica, as the kubelet writes
/// them (`kubelet_pods.go`'s `managedHostsFileContent`).
async fn write_sandbox_files(dir: &Path, hostname: &str, ip: Ipv4Addr) -> io::Result<()> {
    tokio::fs::create_dir_all(dir).await?;
    let hosts = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost \
         ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n{ip}\t{hostname}\n"
    );
    tokio::fs::write(dir.join("hosts"), hosts).await?;
    tokio::fs::write(dir.join("hostname"), format!("{hostname}\n")).await?;
    let host = tokio::fs::read_to_string("/etc/resolv.conf")
        .await
        .unwrap_or_default();
    tokio::fs::write(dir.join("resolv.conf"), resolv_conf(&host)).await
}

/// The host's resolv.conf, unless it points at a resolver on the host's loopback (systemd
/// resolved, dnsmasq), which a replica cannot reach from its own namespace: then public
/// resolvers, as Docker does.
fn resolv_conf(host: &str) -> String {
    let loopback = host.lines().any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|a| a.starts_with("127.") || a == "::1")
            && l.trim_start().starts_with("nameserver")
    });
    let has_ns = host
        .lines()
        .any(|l| l.trim_start().starts_with("nameserver"));
    if loopback || !has_ns {
        "nameserver 8.8.8.8\nnameserver 8.8.4.4\n".into()
    } else {
        host.to_string()
    }
}

/// Removes the (empty) cgroup `name` from every hierarchy: v1 controllers and v2.
fn remove_cgroup_parents(name: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let dirs = hierarchies
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(name))
        .chain([Path::new("/sys/fs/cgroup").join(name)]);
    for dir in dirs {
        // Fails harmlessly where it does not exist or still has containers.
        let _ = std::fs::remove_dir(dir);
    }
}

/// Lazily unmounts every mount at or below `dir` (overlays of an earlier run).
fn unmount_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = umount2(p, MntFlags::MNT_DETACH);
    }
}

/// One container of a replica.
#[derive(Clone, Debug)]
struct Ctr {
    id: String,
    bundle: PathBuf,
    lower: PathBuf,
    cgroups_path: String,
    /// Its cgroup limits (wisp's runtime applies them itself).
    resources: Option<oci_spec::runtime::LinuxResources>,
}

impl Ctr {
    fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }

    /// A fresh writable layer over the image, as each new container gets. `nodev`: a device
    /// node made in a container opens nothing (wisp's runtime relies on it, see `native/`).
    fn mount_rootfs(&self) -> io::Result<()> {
        self.unmount_rootfs();
        for d in ["upper", "work"] {
            let p = self.bundle.join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p)?;
            }
            std::fs::create_dir_all(&p)?;
        }
        std::fs::create_dir_all(self.rootfs())?;
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            self.lower.display(),
            self.bundle.join("upper").display(),
            self.bundle.join("work").display()
        );
        mount(
            Some("overlay"),
            &self.rootfs(),
            Some("overlay"),
            MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .map_err(|e| {
            io::Error::other(format!("overlay mount on {}: {e}", self.rootfs().display()))
        })?;
        // A writable /tmp, as every container has, even when the image ships none.
        let tmp = self.rootfs().join("tmp");
        if !tmp.exists() {
            std::fs::create_dir(&tmp)?;
            std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
        }
        Ok(())
    }

    fn unmount_rootfs(&self) {
        let _ = umount2(&self.rootfs(), MntFlags::MNT_DETACH);
    }
}

/// A started container's app and its output.
type StartedCtr = (
    Init,
    Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    Box<dyn tokio::io::AsyncRead + Unpin + Send>,
);

impl Engine {
    /// Starts one container (its root is mounted).
    async fn start(
        &self,
        c: &Ctr,
        hierarchies: &[cgroups::Hierarchy],
    ) -> Result<StartedCtr, String> {
        match self {
            Engine::Runc(runc) => {
                let (pid, stdout, stderr) = runc.run(&c.id, &c.bundle).await?;
                let init = Init::open(pid).map_err(|e| format!("pidfd of {pid}: {e}"))?;
                Ok((init, Box::new(stdout), Box::new(stderr)))
            }
            Engine::Native(native) => {
                cgroups::create(hierarchies, &c.cgroups_path, c.resources.as_ref())
                    .map_err(|e| format!("cgroups: {e}"))?;
                Self::started(c, native.start(&c.bundle).await?)
            }
        }
    }

    /// What wisp keeps of a container its runtime started.
    fn started(c: &Ctr, started: native::Started) -> Result<StartedCtr, String> {
        let pid = started.pid;
        // Open at once: the app is wisp's unreaped child, so the pid is its own.
        let init = Init::open(pid).map_err(|e| format!("pidfd of {pid}: {e}"))?;
        native::write_pid(&c.bundle, pid).map_err(|e| format!("pid file: {e}"))?;
        let stdout = tokio::process::ChildStdout::from_std(started.stdout)
            .map_err(|e| format!("stdout: {e}"))?;
        let stderr = tokio::process::ChildStderr::from_std(started.stderr)
            .map_err(|e| format!("stderr: {e}"))?;
        Ok((init, Box::new(stdout), Box::new(stderr)))
    }

    /// Removes what is left of a container whose app was reaped (or never started).
    async fn delete(&self, c: &Ctr, hierarchies: &[cgroups::Hierarchy]) {
        match self {
            Engine::Runc(runc) => runc.delete(&c.id).await,
            Engine::Native(_) => {
                end_cgroup(hierarchies, &c.cgroups_path).await;
                let _ = tokio::fs::remove_file(c.bundle.join(native::PID_FILE)).await;
            }
        }
    }

    fn exec_prefix(&self, c: &Ctr) -> Vec<String> {
        match self {
            Engine::Runc(runc) => runc.exec_prefix(&c.id),
            Engine::Native(native) => native.exec_prefix(&c.bundle),
        }
    }
}

/// How long [`end_cgroup`] waits for killed processes to be gone.
const CGROUP_EMPTY: Duration = Duration::from_secs(5);

/// Kills whatever still runs in the cgroup `cgroups_path` (in any hierarchy), waits until
/// it is empty and removes it.
async fn end_cgroup(hierarchies: &[cgroups::Hierarchy], cgroups_path: &str) {
    let dirs: Vec<PathBuf> = hierarchies
        .iter()
        .map(|h| cgroups::dir(h, cgroups_path))
        .filter(|d| d.exists())
        .collect();
    let deadline = tokio::time::Instant::now() + CGROUP_EMPTY;
    loop {
        let left: BTreeSet<i32> = dirs.iter().flat_map(|d| cgroups::procs(d)).collect();
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!(
                "cgroup {cgroups_path}: processes {left:?} still there {CGROUP_EMPTY:?} after \
                 SIGKILL"
            );
            return;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cgroups::remove(&dirs);
}

struct ContainerSandbox {
    /// The app containers, the serving one first.
    containers: Vec<Ctr>,
    /// The init containers, in order, and their names.
    inits: Vec<Ctr>,
    init_names: Vec<String>,
    /// What each app container's probes run against, by name.
    targets: Vec<(String, probe::Target)>,
    engine: Engine,
    hierarchies: Arc<[cgroups::Hierarchy]>,
    net: Network,
    n: u32,
    dir: PathBuf,
    volumes: VolumeSync,
    /// What it was made for (a standby is used only for the same spec).
    spec: Arc<ReplicaSpec>,
    /// A standby's serving container, parked before its app, and the hostname it takes
    /// when let go: its first start only lets it go.
    parked: Mutex<Option<(Parked, String)>>,
}

impl ContainerSandbox {
    /// Parks the serving container's init (a standby): its root mounted, its cgroups made.
    async fn park_serving(&self) -> Result<(), String> {
        let Engine::Native(native) = &self.engine else {
            return Err("only wisp's runtime parks a container".into());
        };
        let c = self.containers.first().ok_or("no container")?;
        c.mount_rootfs().map_err(|e| e.to_string())?;
        cgroups::create(&self.hierarchies, &c.cgroups_path, c.resources.as_ref())
            .map_err(|e| format!("cgroups: {e}"))?;
        let parked = native.park(&c.bundle).await?;
        *lock(&self.parked) = Some((parked, String::new()));
        Ok(())
    }
}

impl Sandbox for ContainerSandbox {
    fn target(&self, container: &str) -> Option<&probe::Target> {
        self.targets
            .iter()
            .find(|(name, _)| name == container)
            .map(|(_, t)| t)
    }

    fn refresh(&self) -> BoxFut<'_, ()> {
        Box::pin(self.volumes.refresh())
    }

    fn start(&self) -> BoxFut<'_, Result<Launched, String>> {
        Box::pin(async move {
            let mut run = ContainerRun {
                inits: Vec::new(),
                engine: self.engine.clone(),
                hierarchies: self.hierarchies.clone(),
                containers: self.containers.clone(),
                terminating: AtomicBool::new(false),
            };
            let mut outputs: Vec<(&'static str, Box<dyn tokio::io::AsyncRead + Unpin + Send>)> =
                Vec::new();
            // A standby's serving container is only let go, the first time.
            let mut parked = lock(&self.parked).take();
            for (i, c) in self.containers.iter().enumerate() {
                if let Some((p, hostname)) = parked.take().filter(|_| i == 0) {
                    let t0 = std::time::Instant::now();
                    match p.go(&hostname).await.and_then(|s| Engine::started(c, s)) {
                        Ok((init, stdout, stderr)) => {
                            tracing::debug!(container = %c.id, start = ?t0.elapsed(), "parked container let go");
                            outputs.push(("stdout", stdout));
                            outputs.push(("stderr", stderr));
                            run.inits.push(init);
                            continue;
                        }
                        // Started as any other below, from a fresh root.
                        Err(e) => {
                            tracing::debug!(container = %c.id, "parked container failed: {e}");
                            self.engine.delete(c, &self.hierarchies).await;
                        }
                    }
                }
                let started = async {
                    let t0 = std::time::Instant::now();
                    c.mount_rootfs().map_err(|e| e.to_string())?;
                    let t1 = std::time::Instant::now();
                    let started = self.engine.start(c, &self.hierarchies).await;
                    // Where a start's time goes (`RUST_LOG=wisp_runtime=debug`).
                    tracing::debug!(
                        container = %c.id,
                        root = ?t1 - t0,
                        start = ?t1.elapsed(),
                        "container started"
                    );
                    started
                };
                match started.await {
                    Ok((init, stdout, stderr)) => {
                        outputs.push(("stdout", stdout));
                        outputs.push(("stderr", stderr));
                        run.inits.push(init);
                    }
                    Err(e) => {
                        // What did start goes again (and this one's cgroup, if made).
                        self.engine.delete(c, &self.hierarchies).await;
                        c.unmount_rootfs();
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
            // A fresh writable layer for each run, as for the app containers.
            let started = async {
                c.mount_rootfs().map_err(|e| e.to_string())?;
                self.engine.start(c, &self.hierarchies).await
            };
            match started.await {
                Ok((init, stdout, stderr)) => Ok(Launched {
                    outputs: vec![("stdout", stdout), ("stderr", stderr)],
                    run: Box::new(ContainerRun {
                        inits: vec![init],
                        engine: self.engine.clone(),
                        hierarchies: self.hierarchies.clone(),
                        containers: vec![c.clone()],
                        terminating: AtomicBool::new(false),
                    }),
                }),
                Err(e) => {
                    self.engine.delete(c, &self.hierarchies).await;
                    c.unmount_rootfs();
                    Err(e)
                }
            }
        })
    }

    fn remove(self: Box<Self>) -> BoxFut<'static, ()> {
        Box::pin(async move {
            // A parked init (never let go) is killed and reaped before its cgroup goes.
            drop(lock(&self.parked).take());
            for c in self.containers.iter().chain(&self.inits) {
                self.engine.delete(c, &self.hierarchies).await;
                c.unmount_rootfs();
                let _ = tokio::fs::remove_dir_all(&c.bundle).await;
            }
            self.net.remove_sandbox(self.n).await;
            // A Memory emptyDir is a tmpfs under the sandbox's directory.
            unmount_under(&self.dir);
            let _ = tokio::fs::remove_dir_all(&self.dir).await;
        })
    }
}

/// One run of a replica's containers; the first is the serving container.
struct ContainerRun {
    inits: Vec<Init>,
    engine: Engine,
    hierarchies: Arc<[cgroups::Hierarchy]>,
    containers: Vec<Ctr>,
    /// SIGTERM was sent: the run is being stopped, and every container gets the grace
    /// period to exit, as in a pod; otherwise the run ends when the serving container does.
    terminating: AtomicBool,
}

/// How long to wait for a SIGKILLed sidecar's init to be reaped.
const REAP: Duration = Duration::from_secs(5);

impl Running for ContainerRun {
    fn wait(&mut self) -> BoxFut<'_, io::Result<Exit>> {
        Box::pin(async move {
            let Some((serving, sidecars)) = self.inits.split_first_mut() else {
                return Ok(Exit {
                    code: None,
                    signal: None,
                });
            };
            // Cancel-safe: each init remembers its exit once reaped.
            let exit = serving.wait().await?;
            if self.terminating.load(Ordering::Relaxed) {
                for init in sidecars {
                    let _ = init.wait().await;
                }
            }
            Ok(exit)
        })
    }

    fn signal(&self, signal: Signal) {
        if signal == Signal::SIGTERM {
            self.terminating.store(true, Ordering::Relaxed);
        }
        for init in &self.inits {
            init.signal(signal);
        }
    }

    fn meters(&self) -> Vec<Meter> {
        // The cgroups the container joined (`cgroups::joined`): a v1 hierarchy carrying the
        // controller, or the unified one where it is enabled.
        self.containers
            .iter()
            .zip(&self.inits)
            .map(|(c, init)| {
                let joined = cgroups::joined(&self.hierarchies, c.resources.as_ref());
                let find = |controller: &str| {
                    joined
                        .iter()
                        .find(|h| h.controllers.iter().any(|x| x == controller))
                        .map(|h| (cgroups::dir(h, &c.cgroups_path), h.unified))
                };
                Meter {
                    pid: init.pid,
                    cpu: find("cpuacct").or_else(|| find("cpu").filter(|(_, v2)| *v2)),
                    memory: find("memory"),
                }
            })
            .collect()
    }

    fn finish(self: Box<Self>) -> BoxFut<'static, Option<String>> {
        Box::pin(async move {
            let mut this = *self;
            // Read before the cgroup is removed.
            let oom = this
                .containers
                .first()
                .is_some_and(|c| runc::oom_killed(&c.cgroups_path));
            // The replica ends with its serving container: sidecars go too (and are reaped,
            // so that no zombie is left).
            for init in &mut this.inits {
                if !init.has_exited() {
                    init.signal(Signal::SIGKILL);
                    let _ = tokio::time::timeout(REAP, init.wait()).await;
                }
            }
            for c in this.containers.iter().take(this.inits.len()) {
                this.engine.delete(c, &this.hierarchies).await;
                c.unmount_rootfs();
            }
            oom.then(|| "OOMKilled".to_string())
        })
    }
}
