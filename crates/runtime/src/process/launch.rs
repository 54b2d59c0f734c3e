//! The seam between the shared replica machinery and what actually runs a replica.
//!
//! Everything about a replica that does not depend on *how* it runs lives once, in this
//! module's siblings: the desired-state map and scaling (`mod.rs`), the supervising task
//! with its crash back-off and graceful stop (`supervisor.rs`), probes (`probe.rs`) and log
//! buffers (`logs.rs`). A [`Launcher`] supplies the rest: the process backend (`host.rs`)
//! spawns a process group on a loopback port; the container backend (`crate::container`)
//! runs OCI containers with `runc` in a per-replica network namespace.
//!
//! The shapes mirror a Kubernetes pod: a [`Sandbox`] is created once per replica and lives
//! across restarts (the pod sandbox: its address, its network namespace), and each
//! [`Sandbox::start`] is one run of its containers ([`Running`]), restarted after a crash.
//! A pod's init containers run once per sandbox, before its first start, each to
//! completion ([`Sandbox::start_init`]): the kubelet runs them again only for a new pod
//! sandbox, not when the app containers of the same sandbox restart.

use std::{collections::HashSet, future::Future, io, net::SocketAddr, pin::Pin, sync::Arc};

use nix::sys::signal::Signal;
use tokio::io::AsyncRead;
use wisp_api::serving::PodSpec;

use super::probe;
use crate::{
    Failure, ReplicaSpec, RevisionKey,
    podconfig::{ObjectSource, PodInfo},
};

pub(crate) type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a platform runs replicas. One per platform, shared by every replica's task.
pub(crate) trait Launcher: Send + Sync + 'static {
    /// Why the revision cannot run here at all, if it cannot (checked on every `scale`).
    fn failure(&self, spec: &ReplicaSpec) -> Option<Failure>;

    /// The parts of the pod this launcher runs without, for a warning naming each.
    fn left_out(&self, pod: &PodSpec) -> Vec<String>;

    /// An address for a new replica, not among those other replicas hold.
    fn address(&self, spec: &ReplicaSpec, taken: &HashSet<SocketAddr>) -> io::Result<SocketAddr>;

    /// Removes what an earlier run of wisp left behind (after a `kill -9`). Replicas of this
    /// run start only once it is done.
    fn clean_up(&self) -> BoxFut<'_, ()>;

    /// Prepares a replica's sandbox. An error is reported on the replica and retried after
    /// back-off (an image that cannot be pulled yet, say).
    fn sandbox(&self, replica: ReplicaInfo) -> BoxFut<'_, Result<Box<dyn Sandbox>, Failure>>;

    /// Readies what every replica of a revision will share (its images, the platform's
    /// network) ahead of its first replica, so that a revision created at zero, or scaled
    /// to zero before a restart, does not pay for it on its first request. Best effort:
    /// whatever fails here is met again, and reported, by [`sandbox`](Self::sandbox).
    fn warm(&self, _spec: Arc<ReplicaSpec>) -> BoxFut<'_, ()> {
        Box::pin(async {})
    }

    /// The revision's replicas went to zero: ready a sandbox for its next one ahead of the
    /// request that will ask for it. Called with the platform's state locked (`taken`: the
    /// address of every replica), so that what is reserved here is seen by the next
    /// [`address`](Self::address); returns the work to run in the background, if any. Best
    /// effort: whatever fails is met again by [`sandbox`](Self::sandbox).
    fn standby(
        self: Arc<Self>,
        _spec: Arc<ReplicaSpec>,
        _objects: Arc<dyn ObjectSource>,
        _taken: &HashSet<SocketAddr>,
    ) -> Option<BoxFut<'static, ()>> {
        None
    }

    /// The revision is gone: what [`standby`](Self::standby) readied for it goes too.
    fn forget(self: Arc<Self>, _key: &RevisionKey) -> Option<BoxFut<'static, ()>> {
        None
    }

    /// After every replica has stopped at shutdown: release what the platform itself holds.
    fn shutdown(&self) -> BoxFut<'_, ()>;
}

/// Who a sandbox is for.
#[derive(Clone)]
pub(crate) struct ReplicaInfo {
    pub key: RevisionKey,
    /// The replica's pod-style name (`hello-00001-1`).
    pub name: String,
    pub spec: Arc<ReplicaSpec>,
    pub address: SocketAddr,
    /// Where the pod's Secrets and ConfigMaps are read (env, volumes), at each sandbox
    /// creation and refresh, as the kubelet reads them when it creates a container.
    pub objects: Arc<dyn ObjectSource>,
    /// Says what the sandbox's creation is waiting for (an image pull's progress); the
    /// revision shows it until the sandbox is made.
    pub waiting: Arc<dyn Fn(String) + Send + Sync>,
}

impl std::fmt::Debug for ReplicaInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaInfo")
            .field("key", &self.key)
            .field("name", &self.name)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl ReplicaInfo {
    /// What the replica's downward-API `fieldRef`s see.
    pub fn pod_info(&self) -> PodInfo {
        PodInfo {
            name: self.name.clone(),
            namespace: self.key.namespace.clone(),
            pod_ip: Some(self.address.ip().to_string()),
            service_account: self.spec.pod.service_account_name.clone(),
        }
    }
}

/// A replica's lasting environment: created once, started many times, removed when the
/// replica goes away.
pub(crate) trait Sandbox: Send + Sync {
    /// What the probes of app container `container` run against (None: no such container).
    fn target(&self, container: &str) -> Option<&probe::Target>;

    /// Starts one run of the replica. Err: it could not start (reported like a container
    /// that failed to start, exit code 128).
    fn start(&self) -> BoxFut<'_, Result<Launched, String>>;

    /// The pod's init containers, by name, in order. The supervisor runs each to completion
    /// ([`start_init`](Self::start_init)) before the sandbox's first [`start`](Self::start).
    fn init_containers(&self) -> &[String] {
        &[]
    }

    /// Starts init container `i` (of [`init_containers`](Self::init_containers)). Its
    /// [`Running`] ends when it exits; a non-zero exit fails the replica's start.
    fn start_init(&self, _i: usize) -> BoxFut<'_, Result<Launched, String>> {
        Box::pin(async { Err("this sandbox runs no init containers".to_string()) })
    }

    /// Brings what the sandbox holds of changing objects up to date (the files of its
    /// Secret and ConfigMap volumes), as the kubelet's periodic volume sync does. Called
    /// when the revision is reconciled, e.g. because an object it references changed.
    fn refresh(&self) -> BoxFut<'_, ()> {
        Box::pin(async {})
    }

    /// Tears the sandbox down; the replica's last run has ended.
    fn remove(self: Box<Self>) -> BoxFut<'static, ()>;
}

/// One started run of a replica.
pub(crate) struct Launched {
    /// Output pipes, each named by its stream (`stdout`, `stderr`), read into the logs.
    pub outputs: Vec<(&'static str, Box<dyn AsyncRead + Unpin + Send>)>,
    pub run: Box<dyn Running>,
}

/// A running replica's main process.
pub(crate) trait Running: Send {
    /// Resolves when the main process has exited. Cancel-safe: it is raced against stop
    /// requests and probes, and awaited again after a signal.
    fn wait(&mut self) -> BoxFut<'_, io::Result<Exit>>;

    /// Sends `signal` to the replica (its process group; a container's init).
    fn signal(&self, signal: Signal);

    /// Where the run's CPU time and memory are read (one meter per container).
    fn meters(&self) -> Vec<crate::usage::Meter>;

    /// After the main process exited: removes what is left of the run. Returns a reason the
    /// kernel gave for the exit (`OOMKilled`), if any.
    fn finish(self: Box<Self>) -> BoxFut<'static, Option<String>>;
}

/// How a main process ended, as the kernel reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}
