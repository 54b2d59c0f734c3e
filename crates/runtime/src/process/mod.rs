//! The embedded process runtime: every replica is a local process group.
//!
//! A replica is what a Knative pod is on Kubernetes, reduced to what one machine needs: its
//! init containers' `command`s run to completion, one after another, then the serving
//! container's `command` and `args` as a process in its own process group (its sidecars'
//! processes join that group: they start, stop and end with it), with the revision's
//! environment, on its own loopback port, probed the way the kubelet and the
//! queue-proxy probe a pod, restarted with back-off when it crashes, and stopped gracefully
//! (SIGTERM to the group, SIGKILL after the revision's grace period).
//!
//! Differences from a pod, on purpose:
//!
//! - **Ports.** In a pod the container listens on its declared `containerPort` (8080 by
//!   default) in its own network namespace. Local processes share one network namespace, so
//!   two replicas cannot both have 8080: each replica gets a free loopback port of its own
//!   (chosen by binding `127.0.0.1:0`), passed in `PORT` as Knative does, and its
//!   [`address`](crate::ReplicaStatus::address) is `127.0.0.1:<port>`. The declared
//!   `containerPort` is not used. The serving container's probes target that port too,
//!   whatever port they name; a sidecar's (under `multi-container-probing`) the port they
//!   name on loopback, where the sidecar listens.
//! - **Environment.** A container does not inherit the node's environment and neither does
//!   a replica, except for the few variables a host binary needs to run at all
//!   ([`PASS_THROUGH`]); then `PORT`, `K_SERVICE`, `K_CONFIGURATION`, `K_REVISION` and the
//!   container's `env` (`valueFrom` and `envFrom` resolved from Secrets and ConfigMaps
//!   when the replica starts, `crate::podconfig`). `$(VAR)`
//!   references in `env`, `command` and `args` are expanded as Kubernetes does ([`expand`]).
//! - **Images.** The process launcher runs no images: a container with an `image` but no
//!   `command` is reported with the failure `ContainerMissing` and nothing starts (the
//!   container launcher, `crate::container`, runs them).
//! - **Crash loops** back off from 1 s to 30 s rather than from 10 s to 5 min (see
//!   `backoff.rs`); an exit with code 0 is a crash too, since a serving container must not
//!   exit.
//! - **wisp crashing.** Replicas outlive a `kill -9` of wisp (they are separate process
//!   groups). Each running replica has a pid record in the state directory, and the next
//!   [`ProcessPlatform::new`] stops whatever those records name (checking the process start
//!   time, so a recycled pid is never signalled) before any new replica starts. The old
//!   replicas are stopped rather than re-adopted: their stdout and stderr pipes, their
//!   probe state and their exit status died with the old wisp, and a replica we cannot read
//!   or reap is worse than a fresh one; the revision reconciler simply starts new replicas.
//!
//! Structure: [`ProcessPlatform`] keeps the desired state and the replicas' statuses in a
//! map; each replica is owned by one supervising task (`supervisor.rs`) that runs its
//! process, probes (`probe.rs`), reads its output into the log buffers (`logs.rs`) and keeps
//! its pid record (`records.rs`).

mod backoff;
pub mod expand;
mod host;
pub(crate) mod launch;
mod logs;
pub(crate) mod probe;
mod records;
mod supervisor;
#[cfg(test)]
pub(crate) mod tests;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    future::Future,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    runtime::Handle,
    sync::{broadcast, watch},
    task::JoinSet,
};

pub use self::expand::PASS_THROUGH;
pub use self::host::left_out;
#[cfg(test)]
use self::host::{PORT_ATTEMPTS, port_not_in};
pub use self::probe::USER_AGENT;
use self::{host::ProcessLauncher, launch::Launcher, logs::RevisionLogs, supervisor::Replica};
use crate::{
    Failure, LogLine, Platform, ReplicaPhase, ReplicaSpec, ReplicaStatus, RevisionKey,
    podconfig::{NoObjects, ObjectSource},
};

/// How often a change of what replicas wait for is announced ([`Inner::set_waiting`]).
const WAITING_EVERY: Duration = Duration::from_millis(250);

/// Tunables of the process runtime. The defaults suit a developer's machine.
#[derive(Clone, Debug)]
pub struct ProcessOptions {
    /// Lines of output kept per replica for [`Platform::logs`]. Default 1000.
    pub log_lines_per_replica: usize,
    /// Last lines of output kept in [`ExitInfo::message`](crate::ExitInfo::message).
    /// Default 10.
    pub exit_message_lines: usize,
    /// Wait before the first restart of a crashed replica; doubles on each further crash.
    /// Default 1 s (Kubernetes: 10 s).
    pub backoff_initial: Duration,
    /// Longest wait between restarts. Default 30 s (Kubernetes: 300 s).
    pub backoff_max: Duration,
    /// A process that ran at least this long before exiting restarts after
    /// `backoff_initial` again. Default 10 min, as in Kubernetes.
    pub backoff_reset: Duration,
    /// Interval of Knative's aggressive readiness probing (probe `periodSeconds` 0 or
    /// unset) until a replica first becomes ready. Default 50 ms.
    pub aggressive_probe_interval: Duration,
    /// Per-attempt timeout of aggressive HTTP/TCP probes. Default 100 ms.
    pub aggressive_probe_timeout: Duration,
    /// Readiness check interval, after a replica first became ready, for probes without
    /// `periodSeconds`. Default 1 s.
    pub ready_probe_interval: Duration,
    /// How long [`ProcessPlatform::new`] waits for replicas of an earlier run to exit after
    /// SIGTERM before sending SIGKILL. Default 10 s.
    pub cleanup_grace: Duration,
}

impl Default for ProcessOptions {
    fn default() -> Self {
        ProcessOptions {
            log_lines_per_replica: 1000,
            exit_message_lines: 10,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(600),
            aggressive_probe_interval: Duration::from_millis(50),
            aggressive_probe_timeout: Duration::from_millis(100),
            ready_probe_interval: Duration::from_secs(1),
            cleanup_grace: Duration::from_secs(10),
        }
    }
}

/// The platform that supervises replicas on this machine: the process runtime (see the
/// module docs) with [`ProcessPlatform::new`], the container runtime with
/// [`ProcessPlatform::containers`] (see `container/mod.rs`).
///
/// Replicas are stopped by [`Platform::shutdown`], not by dropping the platform: its tasks
/// keep running (and the processes with them) until the tokio runtime ends, after which the
/// next start's pid-record cleanup deals with them. One state directory belongs to one
/// wisp: two platforms sharing it would stop each other's replicas at start-up.
pub struct ProcessPlatform {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProcessPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessPlatform")
            .field("state_dir", &self.inner.state_dir)
            .finish()
    }
}

/// Shared by the platform handle and the supervising tasks.
pub(crate) struct Inner {
    options: ProcessOptions,
    /// What runs the replicas: host processes or containers.
    launcher: Arc<dyn Launcher>,
    state_dir: PathBuf,
    state: Mutex<State>,
    logs: Mutex<HashMap<RevisionKey, RevisionLogs>>,
    changes: broadcast::Sender<RevisionKey>,
    /// Every supervising task (and the start-up cleanup), so that shutdown can wait.
    tasks: Mutex<JoinSet<()>>,
    /// Revisions' warm-ups ([`Launcher::warm`]): abandoned at shutdown, not waited for (an
    /// image pull may take long and nothing needs it any more).
    warming: Mutex<JoinSet<()>>,
    runtime: Handle,
    /// Becomes true once replicas of an earlier run are gone.
    cleaned_up: watch::Receiver<bool>,
    /// Where replicas read Secrets and ConfigMaps ([`ProcessPlatform::set_objects`]).
    objects: Mutex<Arc<dyn ObjectSource>>,
    /// What each revision's replicas wait for while prepared ([`Platform::waiting`]), and
    /// when a change was last announced.
    waiting: Mutex<HashMap<RevisionKey, (String, std::time::Instant)>>,
}

#[derive(Default)]
struct State {
    shut_down: bool,
    next_id: u64,
    revisions: HashMap<RevisionKey, Revision>,
    /// Every address a replica of this platform holds (stopping ones too), so that a new
    /// replica never gets one of them: kept as replicas come and go (collecting it per
    /// `scale` made starting 1,000 replicas quadratic).
    taken: HashSet<SocketAddr>,
}

struct Revision {
    uid: String,
    /// What its replicas run: kept only while it has replicas or wants some. A revision at
    /// rest at zero holds none (every `scale` brings the spec again): with 10,000
    /// services at zero their specs were 26 MB of the heap (heaptrack).
    spec: Option<Arc<ReplicaSpec>>,
    desired: u32,
    /// Set when this platform cannot run the revision at all.
    failure: Option<Failure>,
    /// `remove` was called: forget the revision once its last replica is gone.
    removing: bool,
    /// Bumped on every `scale`: replicas waiting to retry their sandbox retry at once, and
    /// running ones refresh their volumes (a referenced Secret may have changed). Made
    /// with the first replica, dropped with the spec.
    nudge: Option<watch::Sender<u64>>,
    /// By a platform-wide id, so that a stopping replica and its successor with the same
    /// index never collide.
    replicas: BTreeMap<u64, ReplicaEntry>,
}

struct ReplicaEntry {
    index: u32,
    status: ReplicaStatus,
    /// Where the current run's usage is read; empty while it does not run.
    meters: Vec<crate::usage::Meter>,
    stopping: bool,
    stop: watch::Sender<bool>,
}

impl Revision {
    /// At rest at zero (no replica, none wanted): drops what only replicas need.
    fn rest(&mut self) {
        self.spec = None;
        self.nudge = None;
    }
}

impl ReplicaEntry {
    fn stop(&mut self) -> bool {
        if self.stopping {
            return false;
        }
        self.stopping = true;
        self.status.phase = ReplicaPhase::Terminating;
        // The task may have finished already; then there is nothing to stop.
        let _ = self.stop.send(true);
        true
    }
}

pub(crate) use wisp_sync::lock;

/// The reason a revision whose sidecar probe names no port fails with.
pub const PROBE_PORT_MISSING: &str = "CreateContainerConfigError";

/// Why the pod's probes cannot run, whatever the platform: a sidecar's probe that names
/// no port to reach (Knative fails such a revision's deployment; see [`probe::plan`]).
fn probe_failure(pod: &wisp_api::serving::PodSpec) -> Option<Failure> {
    // Without a serving container the launcher's own failure is reported first.
    pod.serving_container()?;
    probe::plan(pod).err().map(|message| Failure {
        reason: PROBE_PORT_MISSING.into(),
        message,
    })
}

/// A new replica's name: `<prefix><5 random characters>` as a ReplicaSet names its pods
/// (kube's `names.SimpleNameGenerator`: `utilrand.String(5)` over an alphabet without
/// vowels or look-alikes), unused by the revision's other replicas; `<revision>-<index>`
/// for a spec without a prefix.
fn replica_name(
    spec: &ReplicaSpec,
    key: &RevisionKey,
    index: u32,
    replicas: &BTreeMap<u64, ReplicaEntry>,
) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    if spec.name_prefix.is_empty() {
        return format!("{}-{index}", key.name);
    }
    use rand::Rng;
    let mut rng = rand::rng();
    loop {
        let suffix: String = (0..5)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        let name = format!("{}{suffix}", spec.name_prefix);
        if replicas.values().all(|r| r.status.name != name) {
            return name;
        }
    }
}

/// Why the process platform could not be created.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the process runtime must be created inside a tokio runtime")]
    NoRuntime,
    #[error("state directory {}: {source}", path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ProcessPlatform {
    /// Creates the platform. `state_dir` holds pid records (for cleanup after a crash of
    /// wisp itself) and nothing else; it is created if missing. Replicas left running by
    /// an earlier run (recorded there) are stopped in the background; replicas of this run
    /// start only after that.
    ///
    /// Must be called inside a tokio runtime: the platform spawns its tasks there.
    pub fn new(
        state_dir: &Path,
        options: ProcessOptions,
    ) -> Result<Arc<ProcessPlatform>, RuntimeError> {
        let runtime = Handle::try_current().map_err(|_| RuntimeError::NoRuntime)?;
        // A one-off small syscall at start-up, so that a bad path fails here, loudly.
        std::fs::create_dir_all(state_dir).map_err(|source| RuntimeError::StateDir {
            path: state_dir.to_path_buf(),
            source,
        })?;
        let launcher = ProcessLauncher {
            state_dir: state_dir.to_path_buf(),
            cleanup_grace: options.cleanup_grace,
        };
        Ok(Self::with_launcher(
            runtime,
            state_dir,
            Arc::new(launcher),
            options,
        ))
    }

    /// A platform whose replicas `launcher` runs; everything else (scaling, supervision,
    /// probes, logs) is shared by every backend.
    pub(crate) fn with_launcher(
        runtime: Handle,
        state_dir: &Path,
        launcher: Arc<dyn Launcher>,
        options: ProcessOptions,
    ) -> Arc<ProcessPlatform> {
        let (cleaned_tx, cleaned_up) = watch::channel(false);
        let inner = Arc::new(Inner {
            launcher,
            state_dir: state_dir.to_path_buf(),
            state: Mutex::default(),
            logs: Mutex::default(),
            changes: broadcast::channel(1024).0,
            tasks: Mutex::default(),
            warming: Mutex::default(),
            runtime,
            cleaned_up,
            options,
            objects: Mutex::new(Arc::new(NoObjects)),
            waiting: Mutex::new(HashMap::new()),
        });
        let launcher = inner.launcher.clone();
        inner.spawn(async move {
            launcher.clean_up().await;
            let _ = cleaned_tx.send(true);
        });
        Arc::new(ProcessPlatform { inner })
    }

    /// Where replicas read the Secrets and ConfigMaps their pod references (none until
    /// set: every reference is then "not found"). Used by replicas started afterwards.
    pub fn set_objects(&self, objects: Arc<dyn ObjectSource>) {
        *lock(&self.inner.objects) = objects;
    }

    /// Resolves once replicas left by an earlier run have been stopped.
    pub async fn cleaned_up(&self) {
        let _ = self.inner.cleaned_up.clone().wait_for(|d| *d).await;
    }
}

impl Inner {
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.tasks);
        // Reap finished tasks so the set does not grow with churn.
        while tasks.try_join_next().is_some() {}
        tasks.spawn_on(task, &self.runtime);
    }

    fn notify(&self, key: &RevisionKey) {
        // No receivers is fine.
        let _ = self.changes.send(key.clone());
    }

    /// Applies `f` to a replica's entry; announces the change if the status changed.
    fn update_replica(&self, key: &RevisionKey, id: u64, f: impl FnOnce(&mut ReplicaEntry)) {
        let changed = {
            let mut state = lock(&self.state);
            let Some(entry) = state
                .revisions
                .get_mut(key)
                .and_then(|r| r.replicas.get_mut(&id))
            else {
                return;
            };
            let before = entry.status.clone();
            f(entry);
            entry.status != before
        };
        if changed {
            self.notify(key);
        }
    }

    /// Sets (or clears) what a revision's replicas wait for. Changes are announced at most
    /// every [`WAITING_EVERY`], so that a pull's progress does not become a store write per
    /// chunk; clearing is announced at once.
    pub(crate) fn set_waiting(&self, key: &RevisionKey, message: Option<String>) {
        let now = std::time::Instant::now();
        let announce = {
            let mut waiting = lock(&self.waiting);
            match message {
                None => waiting.remove(key).is_some(),
                Some(m) => match waiting.get_mut(key) {
                    Some((old, _)) if *old == m => false,
                    Some((old, at)) => {
                        *old = m;
                        let due = now.duration_since(*at) >= WAITING_EVERY;
                        if due {
                            *at = now;
                        }
                        due
                    }
                    None => {
                        waiting.insert(key.clone(), (m, now));
                        true
                    }
                },
            }
        };
        if announce {
            self.notify(key);
        }
    }

    fn push_log(&self, key: &RevisionKey, line: LogLine) {
        // Lines of a revision that was removed meanwhile are dropped.
        if let Some(logs) = lock(&self.logs).get_mut(key) {
            logs.push(line, self.options.log_lines_per_replica);
        }
    }

    /// Called by a replica's task as it ends: the replica disappears.
    async fn finish(&self, key: &RevisionKey, id: u64, name: &str) {
        let forget = {
            let mut guard = lock(&self.state);
            let state = &mut *guard;
            match state.revisions.get_mut(key) {
                Some(rev) => {
                    if let Some(gone) = rev.replicas.remove(&id) {
                        state.taken.remove(&gone.status.address);
                    }
                    let forget = rev.removing && rev.replicas.is_empty();
                    if forget {
                        state.revisions.remove(key);
                    } else if rev.desired == 0 && rev.replicas.is_empty() {
                        rev.rest();
                    }
                    forget
                }
                None => false,
            }
        };
        {
            let mut logs = lock(&self.logs);
            if forget {
                logs.remove(key);
            } else if let Some(l) = logs.get_mut(key) {
                l.forget_replica(name);
            }
        }
        self.notify(key);
    }

    fn scale(self: &Arc<Self>, spec: &ReplicaSpec, replicas: u32) {
        // Before any replica starts: `push_log` drops lines of a revision it has no buffer
        // for, and a replica spawned below may print before this thread runs on.
        lock(&self.logs).entry(spec.key.clone()).or_default();
        let changed = {
            let mut guard = lock(&self.state);
            let state = &mut *guard;
            if state.shut_down {
                return;
            }
            // Once per revision (and spec): say what of its pod does not run here. A
            // revision's pod is immutable (a new template makes a new revision), so one at
            // rest, which keeps no spec, is told apart by its uid.
            if state
                .revisions
                .get(&spec.key)
                .is_none_or(|r| match &r.spec {
                    Some(kept) => **kept != *spec,
                    None => r.uid != spec.uid,
                })
            {
                let left_out = self.launcher.left_out(&spec.pod);
                if !left_out.is_empty() {
                    tracing::warn!(
                        revision = %spec.key,
                        "this platform runs the revision without: {}",
                        left_out.join("; ")
                    );
                }
            }
            // A revision first seen at zero is readied now; one with replicas wanted is
            // readied by their sandboxes, which report the pull's progress as they go.
            if replicas == 0 && !state.revisions.contains_key(&spec.key) {
                self.warm(spec);
            }
            let rev = state
                .revisions
                .entry(spec.key.clone())
                .or_insert_with(|| Revision {
                    uid: spec.uid.clone(),
                    spec: None,
                    desired: 0,
                    failure: None,
                    removing: false,
                    nudge: None,
                    replicas: BTreeMap::new(),
                });
            if let Some(nudge) = &rev.nudge {
                nudge.send_modify(|n| *n = n.wrapping_add(1));
            }
            // Scaled to zero while routed: its next replica's sandbox is readied now, for
            // the request that will wake it. Not routed (any more): nothing will.
            if !spec.routed {
                if let Some(drop) = self.launcher.clone().forget(&spec.key) {
                    self.background(drop);
                }
            } else if replicas == 0 && rev.desired > 0 && rev.failure.is_none() {
                let objects = lock(&self.objects).clone();
                let ready =
                    self.launcher
                        .clone()
                        .standby(Arc::new(spec.clone()), objects, &state.taken);
                if let Some(ready) = ready {
                    self.background(ready);
                }
            }
            let mut changed = rev.removing || rev.desired != replicas;
            if rev.uid != spec.uid {
                // Same name, new revision: the old one's replicas go.
                for r in rev.replicas.values_mut() {
                    r.stop();
                }
                rev.uid = spec.uid.clone();
                changed = true;
            }
            if replicas == 0 && rev.replicas.is_empty() {
                rev.rest();
            } else if rev.spec.as_deref() != Some(spec) {
                rev.spec = Some(Arc::new(spec.clone()));
            }
            rev.removing = false;
            rev.desired = replicas;
            rev.failure = self
                .launcher
                .failure(spec)
                .or_else(|| probe_failure(&spec.pod));
            if rev.failure.is_none() {
                changed |= self.converge(&mut state.next_id, rev, &spec.key, &mut state.taken);
            }
            changed
        };
        if changed {
            self.notify(&spec.key);
        }
    }

    /// Readies a revision's shared parts in the background ([`Launcher::warm`]).
    fn warm(self: &Arc<Self>, spec: &ReplicaSpec) {
        let (launcher, spec) = (self.launcher.clone(), Arc::new(spec.clone()));
        self.background(Box::pin(async move { launcher.warm(spec).await }));
    }

    /// Runs a launcher's readying work in the background, once the leftovers of an earlier
    /// run are cleaned up (the clean-up removes the network and every namespace).
    fn background(&self, work: launch::BoxFut<'static, ()>) {
        let mut cleaned_up = self.cleaned_up.clone();
        let mut warming = lock(&self.warming);
        while warming.try_join_next().is_some() {}
        warming.spawn_on(
            async move {
                let _ = cleaned_up.wait_for(|d| *d).await;
                work.await;
            },
            &self.runtime,
        );
    }

    /// Starts or stops replicas until `rev.desired` are running (or starting). New replicas
    /// take the lowest free indexes; scaling down stops the highest first.
    fn converge(
        self: &Arc<Self>,
        next_id: &mut u64,
        rev: &mut Revision,
        key: &RevisionKey,
        taken: &mut HashSet<SocketAddr>,
    ) -> bool {
        let mut active: Vec<(u32, u64)> = rev
            .replicas
            .iter()
            .filter(|(_, r)| !r.stopping)
            .map(|(id, r)| (r.index, *id))
            .collect();
        active.sort_unstable();
        let desired = rev.desired as usize;
        let mut changed = false;
        for (_, id) in active.iter().skip(desired) {
            if let Some(r) = rev.replicas.get_mut(id) {
                changed |= r.stop();
            }
        }
        for _ in active.len()..desired {
            // Indexes of stopping replicas stay taken until they are gone, so that names
            // are unique among the replicas listed.
            let index = (1..)
                .find(|i| rev.replicas.values().all(|r| r.index != *i))
                .unwrap_or(u32::MAX);
            // `scale` keeps the spec of a revision that wants replicas, and one that has
            // some keeps it until the last is gone.
            let Some(spec) = rev.spec.clone() else {
                tracing::error!(revision = %key, "no spec kept for a replica to start");
                break;
            };
            let address = match self.launcher.address(&spec, taken) {
                Ok(address) => {
                    taken.insert(address);
                    address
                }
                Err(e) => {
                    tracing::error!(revision = %key, "no free address for a replica: {e}");
                    break;
                }
            };
            let name = replica_name(&spec, key, index, &rev.replicas);
            let (stop, stop_rx) = watch::channel(false);
            *next_id += 1;
            let id = *next_id;
            rev.replicas.insert(
                id,
                ReplicaEntry {
                    index,
                    status: ReplicaStatus {
                        name: name.clone(),
                        address,
                        phase: ReplicaPhase::Starting,
                        restarts: 0,
                        init_done: 0,
                        unready: Vec::new(),
                        last_exit: None,
                        failure: None,
                        times: crate::ReplicaTimes {
                            created: Some(std::time::SystemTime::now()),
                            ..Default::default()
                        },
                    },
                    meters: Vec::new(),
                    stopping: false,
                    stop,
                },
            );
            let replica = Replica {
                inner: self.clone(),
                key: key.clone(),
                id,
                name,
                spec,
                address,
            };
            let nudge = rev.nudge.get_or_insert_with(|| watch::channel(0).0);
            self.spawn(replica.supervise(stop_rx, nudge.subscribe()));
            changed = true;
        }
        changed
    }

    /// Stops the running replica `name` and starts another in its place.
    fn stop_replica(self: &Arc<Self>, key: &RevisionKey, name: &str) -> bool {
        let found = {
            let mut guard = lock(&self.state);
            let state = &mut *guard;
            let shut_down = state.shut_down;
            let Some(rev) = state.revisions.get_mut(key) else {
                return false;
            };
            let Some(replica) = rev
                .replicas
                .values_mut()
                .find(|r| r.status.name == name && !r.stopping)
            else {
                return false;
            };
            replica.stop();
            if rev.failure.is_none() && !shut_down && !rev.removing {
                self.converge(&mut state.next_id, rev, key, &mut state.taken);
            }
            true
        };
        if found {
            self.notify(key);
        }
        found
    }

    fn remove(&self, key: &RevisionKey) {
        if let Some(drop) = self.launcher.clone().forget(key) {
            self.background(drop);
        }
        let (known, forget) = {
            let mut state = lock(&self.state);
            match state.revisions.get_mut(key) {
                Some(rev) => {
                    rev.desired = 0;
                    rev.failure = None;
                    rev.removing = true;
                    for r in rev.replicas.values_mut() {
                        r.stop();
                    }
                    let forget = rev.replicas.is_empty();
                    if forget {
                        state.revisions.remove(key);
                    }
                    (true, forget)
                }
                None => (false, true),
            }
        };
        if forget {
            lock(&self.logs).remove(key);
        }
        if known {
            self.notify(key);
        }
    }

    fn replicas(&self, key: &RevisionKey) -> Vec<ReplicaStatus> {
        let state = lock(&self.state);
        let Some(rev) = state.revisions.get(key) else {
            return Vec::new();
        };
        let mut list: Vec<(u32, ReplicaStatus)> = rev
            .replicas
            .values()
            .map(|r| (r.index, r.status.clone()))
            .collect();
        list.sort_by_key(|(index, s)| (*index, s.phase == ReplicaPhase::Terminating));
        let mut list: Vec<ReplicaStatus> = list.into_iter().map(|(_, s)| s).collect();
        if let Some(failure) = &rev.failure {
            // Nothing runs, but the revision should see why for each replica it asked for.
            list.extend((1..=rev.desired).map(|i| ReplicaStatus {
                name: format!("{}-{i}", key.name),
                address: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                phase: ReplicaPhase::Starting,
                restarts: 0,
                init_done: 0,
                unready: Vec::new(),
                last_exit: None,
                failure: Some(failure.clone()),
                times: Default::default(),
            }));
        }
        list
    }

    fn revisions(&self) -> Vec<RevisionKey> {
        let state = lock(&self.state);
        let mut keys: Vec<RevisionKey> = state
            .revisions
            .iter()
            .filter(|(_, r)| !r.replicas.is_empty() || (r.failure.is_some() && r.desired > 0))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// The synchronous half of shutdown: no more starts, every replica told to stop.
    fn begin_shutdown(&self) {
        let keys: Vec<RevisionKey> = {
            let mut state = lock(&self.state);
            state.shut_down = true;
            for rev in state.revisions.values_mut() {
                rev.desired = 0;
                rev.failure = None;
                for r in rev.replicas.values_mut() {
                    r.stop();
                }
            }
            state.revisions.keys().cloned().collect()
        };
        for key in &keys {
            self.notify(key);
        }
    }

    async fn shutdown(&self) {
        self.begin_shutdown();
        let mut warming = std::mem::take(&mut *lock(&self.warming));
        warming.shutdown().await;
        // Every replica's task stops its process (in parallel) and removes its record.
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        while tasks.join_next().await.is_some() {}
        self.launcher.shutdown().await;
    }
}

impl Platform for ProcessPlatform {
    fn scale(&self, spec: &ReplicaSpec, replicas: u32) {
        self.inner.scale(spec, replicas);
    }

    fn remove(&self, key: &RevisionKey) {
        self.inner.remove(key);
    }

    fn stop_replica(&self, key: &RevisionKey, name: &str) -> bool {
        self.inner.stop_replica(key, name)
    }

    fn replicas(&self, key: &RevisionKey) -> Vec<ReplicaStatus> {
        self.inner.replicas(key)
    }

    fn revisions(&self) -> Vec<RevisionKey> {
        self.inner.revisions()
    }

    fn usage(&self, key: &RevisionKey) -> Vec<crate::ReplicaUsage> {
        // Copied under the lock, read outside it: reading /proc and cgroups is file I/O.
        let meters: Vec<_> = {
            let state = lock(&self.inner.state);
            let Some(rev) = state.revisions.get(key) else {
                return Vec::new();
            };
            rev.replicas
                .values()
                .filter(|r| !r.meters.is_empty())
                .map(|r| (r.status.name.clone(), r.meters.clone()))
                .collect()
        };
        crate::usage::read(meters)
    }

    fn changes(&self) -> broadcast::Receiver<RevisionKey> {
        self.inner.changes.subscribe()
    }

    fn waiting(&self, key: &RevisionKey) -> Option<String> {
        lock(&self.inner.waiting).get(key).map(|(m, _)| m.clone())
    }

    fn logs(&self, key: &RevisionKey, tail: Option<usize>) -> Vec<LogLine> {
        lock(&self.inner.logs)
            .get(key)
            .map(|l| l.tail(tail))
            .unwrap_or_default()
    }

    fn follow_logs(&self, key: &RevisionKey) -> broadcast::Receiver<LogLine> {
        lock(&self.inner.logs)
            .entry(key.clone())
            .or_default()
            .subscribe()
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.inner.shutdown())
    }
}
