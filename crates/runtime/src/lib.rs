//! The `Platform` seam: how wisp runs a revision's replicas, whatever runs them.
//!
//! The revision reconciler (with the count the autoscaler publishes) only ever says "this
//! revision should have N replicas" ([`Platform::scale`]) and reads back what exists
//! ([`Platform::replicas`]); the platform converges in the background and announces every
//! change on [`Platform::changes`]. [`process::ProcessPlatform`] implements it with one
//! supervisor and two launchers (`process/launch.rs`): [`ProcessPlatform::new`]'s replicas
//! are local process groups on loopback ports of their own; those of
//! [`ProcessPlatform::containers`] are pod-like sandboxes run with `runc` (`container/`),
//! whose images come through the [`container::ImageProvider`] seam. `wisp serve` runs both
//! behind one platform, [`dispatch::ByImage`], which gives a revision to the container
//! backend when its pod names an image and to the process backend when it gives only host
//! commands. A Kubernetes backend comes later behind the same trait.
//!
//! Start with [`Platform`], then `process/mod.rs`, `process/launch.rs` and `container/mod.rs`.
//!
//! [`ProcessPlatform::new`]: process::ProcessPlatform::new
//! [`ProcessPlatform::containers`]: process::ProcessPlatform::containers

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use wisp_api::serving::{Container, PodSpec};

pub mod container;
pub mod dispatch;
pub mod podconfig;
pub mod process;
pub mod usage;

pub use usage::ReplicaUsage;

/// Identifies a revision: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RevisionKey {
    pub namespace: String,
    pub name: String,
}

impl RevisionKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        RevisionKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for RevisionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Everything a platform needs to run replicas of one revision. Built by the revision
/// reconciler from the (immutable) Revision, so it never changes for a given key.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSpec {
    pub key: RevisionKey,
    /// Revision uid: lets a platform tell a re-created revision of the same name apart.
    pub uid: String,
    /// `K_CONFIGURATION` (the configuration label).
    pub configuration: String,
    /// `K_SERVICE` (the service label, or empty).
    pub service: String,
    /// The revision's whole pod, as stored (defaulted: the serving container has a
    /// readiness probe): every container (the serving one and its sidecars), init
    /// containers, volumes, the service account, security contexts. Each platform takes
    /// what it can run and says what it cannot (see [`Platform::scale`]).
    pub pod: PodSpec,
    /// Grace period between SIGTERM and SIGKILL: the revision's `timeoutSeconds`, as Knative
    /// sets `terminationGracePeriodSeconds`.
    pub grace_period: Duration,
    /// What replicas are named after: `<revision>-deployment-<pod-template-hash>-`, the
    /// name a Deployment's ReplicaSet gives its pods, which a random 5-character suffix
    /// completes (the replica's hostname and `metadata.name`). Empty: `<revision>-<n>`.
    pub name_prefix: String,
    /// The revision is routed (its `serving.knative.dev/routingState` is `active`): a
    /// request may wake it from zero, so a platform may ready its next replica while it is
    /// at zero. A revision that no route names only waits to be collected.
    pub routed: bool,
}

impl ReplicaSpec {
    /// The container requests go to ([`PodSpec::serving_container`]).
    pub fn serving_container(&self) -> Option<&Container> {
        self.pod.serving_container()
    }
}

/// The state of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaPhase {
    /// Process started, readiness probe not yet passed.
    Starting,
    /// Readiness probe passing: may receive traffic.
    Ready,
    /// Was ready, probe now failing (still running).
    NotReady,
    /// Exited; waiting out the crash-loop back-off before the next start.
    BackOff,
    /// Being stopped (SIGTERM sent).
    Terminating,
}

/// How a replica's process last ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, or None when killed by a signal.
    pub code: Option<i32>,
    /// Signal number when killed by a signal.
    pub signal: Option<i32>,
    /// Why, when the kernel said more than the status: Kubernetes' `OOMKilled` for a
    /// container its cgroup's memory limit killed.
    pub reason: Option<String>,
    /// The last lines the process wrote (stdout and stderr), like Kubernetes'
    /// `FallbackToLogsOnError` termination message.
    pub message: String,
    /// When that run started and ended (a container status's `startedAt`/`finishedAt`).
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    /// The init container that ended so, when it was one (a non-zero exit of an init
    /// container fails the replica's start: Kubernetes' `Init:Error`); None for a run of
    /// the app containers.
    pub init_container: Option<String>,
}

/// When things happened to a replica, for the Pod wisp shows of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaTimes {
    /// The replica was created (the Pod's `creationTimestamp` and `startTime`).
    pub created: Option<SystemTime>,
    /// Its current run started (`state.running.startedAt`).
    pub started: Option<SystemTime>,
    /// It last became ready or unready (the Ready condition's `lastTransitionTime`).
    pub ready_changed: Option<SystemTime>,
}

/// One replica as the platform sees it now.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaStatus {
    /// Stable name within the revision, e.g. `hello-00001-1`.
    pub name: String,
    /// Where the replica listens (loopback, its own port).
    pub address: SocketAddr,
    pub phase: ReplicaPhase,
    /// How many times this replica was restarted (crash or failed liveness probe).
    pub restarts: u32,
    /// How many of the pod's init containers have run to completion in the replica's
    /// sandbox, in order; the app containers start once all have (as a pod's do).
    pub init_done: u32,
    /// The app containers whose readiness probe has not passed in the current run (the
    /// serving container's and, under `multi-container-probing`, the sidecars'); the
    /// others are ready once started. Empty while the replica is Ready.
    pub unready: Vec<String>,
    /// How the process last ended, if it ever did.
    pub last_exit: Option<ExitInfo>,
    /// Why it is not starting, when the platform cannot run it at all (e.g. an `image`
    /// without `command` on the process runtime). The revision fails with this reason.
    pub failure: Option<Failure>,
    pub times: ReplicaTimes,
}

/// A permanent failure to run a revision on this platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// A Knative-style CamelCase reason.
    pub reason: String,
    pub message: String,
}

/// One line of a replica's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub replica: String,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    pub line: String,
    /// When it was read.
    pub time: SystemTime,
    /// Which run of the replica wrote it: 0 for the first, then one more per restart
    /// (the container's `restartCount` while it ran), for `kubectl logs --previous`.
    pub run: u32,
    /// Its place among the revision's lines (set by the platform's log buffer), so that a
    /// follower can skip what it already read from the backlog.
    pub seq: u64,
}

/// The seam between the controllers and whatever runs replicas.
pub trait Platform: Send + Sync + 'static {
    /// Declares that `spec.key` should have `replicas` replicas. Idempotent and
    /// non-blocking: the platform starts or stops replicas in the background (stopping is
    /// graceful: SIGTERM, then SIGKILL after the grace period).
    ///
    /// The spec carries the revision's whole pod; a platform that cannot run some of it
    /// says so instead of dropping it silently: what the revision cannot do without (no
    /// container to run, say) is a [`Failure`] on every replica status, which fails the
    /// revision with that reason; what it can (a volume on the process platform, a
    /// sidecar's probes) is a warning in wisp's log naming each part left out.
    fn scale(&self, spec: &ReplicaSpec, replicas: u32);

    /// Stops every replica of the revision and forgets it.
    fn remove(&self, key: &RevisionKey);

    /// Stops one replica (by its name) and starts another in its place, as a Deployment
    /// replaces a deleted pod. Returns whether the revision had such a running replica.
    fn stop_replica(&self, key: &RevisionKey, name: &str) -> bool;

    /// The replicas of a revision right now (empty if unknown).
    fn replicas(&self, key: &RevisionKey) -> Vec<ReplicaStatus>;

    /// Every revision with replicas (or a pending stop), for re-adoption and cleanup.
    fn revisions(&self) -> Vec<RevisionKey>;

    /// Receives the key of every revision whose replicas changed (started, ready, not
    /// ready, exited, restarted, stopped). Lagging receivers should re-read everything.
    fn changes(&self) -> tokio::sync::broadcast::Receiver<RevisionKey>;

    /// What a revision's replicas are waiting for while the platform prepares them, when it
    /// knows: pulling their image, with the bytes done of the total (`Pulling image "…":
    /// 1.2 MB of 4.5 MB`). The revision shows it while it deploys. Default: nothing.
    fn waiting(&self, _key: &RevisionKey) -> Option<String> {
        None
    }

    /// What each running replica of a revision has used: its CPU time so far and its
    /// memory now (`usage.rs`), for the HPA class. A replica that is not running, or whose
    /// platform cannot tell, is left out. Default: nothing.
    fn usage(&self, _key: &RevisionKey) -> Vec<ReplicaUsage> {
        Vec::new()
    }

    /// The last `tail` lines (all buffered lines when None) of every replica of a revision,
    /// in arrival order.
    fn logs(&self, key: &RevisionKey, tail: Option<usize>) -> Vec<LogLine>;

    /// New lines of a revision's replicas as they arrive.
    fn follow_logs(&self, key: &RevisionKey) -> tokio::sync::broadcast::Receiver<LogLine>;

    /// What the platform does when `wisp serve` stops, after the data plane has drained:
    /// release whatever it runs on wisp's behalf that must not outlive wisp, and return once
    /// that is done. Each platform defines it: the process platform's replicas are wisp's
    /// children, so it stops every replica gracefully and waits until they are gone; a
    /// platform whose replicas live elsewhere (pods of a Kubernetes backend) would leave
    /// them running and only stop watching them.
    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// Shared handle to a platform.
pub type SharedPlatform = Arc<dyn Platform>;
