//! Test support shared by every reconciler's tests (and usable by other crates' tests):
//! a scriptable [`FakePlatform`], a [`Context`] over an in-memory store with a fixed clock,
//! object fixtures, and [`settle`], which runs reconcilers to a fixed point without the
//! async runner.
//!
//! Typical use:
//!
//! ```
//! use wisp_controller::testing;
//! let (ctx, platform) = testing::test_context();
//! testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
//! assert!(platform.calls().is_empty());
//! ```

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use arc_swap::ArcSwap;
use chrono::{DateTime, TimeZone, Utc};
use tokio::sync::broadcast;
use wisp_api::{
    config::Config,
    kinds::ResourceKind,
    meta::{ConditionStatus, ObjectMeta, Status},
    serving::{
        Configuration, ConfigurationSpec, Container, ContainerPort, Revision, RevisionSpec,
        RevisionStatus, RevisionTemplateSpec, Route, RouteSpec, Service, ServiceSpec,
        TrafficTarget,
    },
};
use wisp_runtime::{
    ExitInfo, Failure, LogLine, Platform, ReplicaPhase, ReplicaSpec, ReplicaStatus, RevisionKey,
};
use wisp_store::{Options, Store};

use crate::{
    conditions,
    objects::{self, Resource},
    reconciler::{Action, Context, Event, ObjectRef, ReconcileError, Reconciler, resource},
    routing::RoutingTable,
};

/// The fixed "now" of [`test_clock`]: 2024-01-01T00:00:00Z.
pub const TEST_NOW: &str = "2024-01-01T00:00:00Z";

/// A clock that always says [`TEST_NOW`].
pub fn test_clock() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap()
}

/// A recorded call to the platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlatformCall {
    Scale { key: RevisionKey, replicas: u32 },
    Remove(RevisionKey),
    StopReplica(RevisionKey, String),
}

#[derive(Default)]
struct FakeState {
    /// Latest spec and replica count per scaled key (removed on `remove`).
    scaled: BTreeMap<RevisionKey, (ReplicaSpec, u32)>,
    /// What `replicas()` answers, set by the test (or by auto-ready).
    replicas: BTreeMap<RevisionKey, Vec<ReplicaStatus>>,
    /// Keys `revisions()` reports without ever having been scaled (leftovers to clean up).
    orphans: BTreeSet<RevisionKey>,
    calls: Vec<PlatformCall>,
    /// When true, `scale(n)` immediately makes n Ready replicas and announces the change.
    auto_ready: bool,
}

/// A [`Platform`] that runs nothing: it records `scale`/`remove` calls and answers
/// `replicas` with whatever the test set. Every `set_*` announces a change, as the real
/// platform does when a replica changes.
pub struct FakePlatform {
    state: Mutex<FakeState>,
    changes: broadcast::Sender<RevisionKey>,
    logs: broadcast::Sender<LogLine>,
}

impl std::fmt::Debug for FakePlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakePlatform").finish_non_exhaustive()
    }
}

impl FakePlatform {
    pub fn new() -> Arc<FakePlatform> {
        Arc::new(FakePlatform {
            state: Mutex::new(FakeState::default()),
            changes: broadcast::channel(1024).0,
            logs: broadcast::channel(16).0,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        wisp_sync::lock(&self.state)
    }

    /// Every scale/remove call so far, in order.
    pub fn calls(&self) -> Vec<PlatformCall> {
        self.state().calls.clone()
    }

    /// Returns and clears the recorded calls.
    pub fn take_calls(&self) -> Vec<PlatformCall> {
        std::mem::take(&mut self.state().calls)
    }

    /// The replica count last asked for, None if never scaled (or removed since).
    pub fn scale_of(&self, key: &RevisionKey) -> Option<u32> {
        self.state().scaled.get(key).map(|(_, n)| *n)
    }

    /// The spec last passed to `scale`.
    pub fn spec_of(&self, key: &RevisionKey) -> Option<ReplicaSpec> {
        self.state().scaled.get(key).map(|(s, _)| s.clone())
    }

    /// Makes `scale(n)` produce n Ready replicas at once (for end-to-end tests).
    pub fn set_auto_ready(&self, on: bool) {
        self.state().auto_ready = on;
    }

    /// Sets what `replicas(key)` returns and announces the change.
    pub fn set_replicas(&self, key: &RevisionKey, replicas: Vec<ReplicaStatus>) {
        self.state().replicas.insert(key.clone(), replicas);
        self.fire(key);
    }

    /// Makes `revisions()` report a key nobody scaled (a leftover from a previous run).
    pub fn add_orphan(&self, key: &RevisionKey) {
        self.state().orphans.insert(key.clone());
    }

    /// Announces a change of `key` on `changes()`.
    pub fn fire(&self, key: &RevisionKey) {
        // No receiver is fine: nobody is watching yet.
        let _ = self.changes.send(key.clone());
    }
}

impl Platform for FakePlatform {
    fn scale(&self, spec: &ReplicaSpec, replicas: u32) {
        let fire = {
            let mut st = self.state();
            st.calls.push(PlatformCall::Scale {
                key: spec.key.clone(),
                replicas,
            });
            let changed = st.scaled.get(&spec.key).map(|(_, n)| *n) != Some(replicas);
            st.scaled.insert(spec.key.clone(), (spec.clone(), replicas));
            if st.auto_ready && changed {
                let reps = (0..replicas)
                    .map(|i| replica(&format!("{}-{}", spec.key.name, i + 1), ReplicaPhase::Ready))
                    .collect();
                st.replicas.insert(spec.key.clone(), reps);
            }
            st.auto_ready && changed
        };
        if fire {
            self.fire(&spec.key);
        }
    }

    fn remove(&self, key: &RevisionKey) {
        let mut st = self.state();
        st.calls.push(PlatformCall::Remove(key.clone()));
        st.scaled.remove(key);
        st.replicas.remove(key);
        st.orphans.remove(key);
    }

    fn stop_replica(&self, key: &RevisionKey, name: &str) -> bool {
        let mut st = self.state();
        st.calls
            .push(PlatformCall::StopReplica(key.clone(), name.to_string()));
        st.replicas
            .get(key)
            .is_some_and(|rs| rs.iter().any(|r| r.name == name))
    }

    fn replicas(&self, key: &RevisionKey) -> Vec<ReplicaStatus> {
        self.state().replicas.get(key).cloned().unwrap_or_default()
    }

    fn revisions(&self) -> Vec<RevisionKey> {
        let st = self.state();
        let mut keys: BTreeSet<RevisionKey> = st.scaled.keys().cloned().collect();
        keys.extend(st.replicas.keys().cloned());
        keys.extend(st.orphans.iter().cloned());
        keys.into_iter().collect()
    }

    fn changes(&self) -> broadcast::Receiver<RevisionKey> {
        self.changes.subscribe()
    }

    fn logs(&self, _key: &RevisionKey, _tail: Option<usize>) -> Vec<LogLine> {
        Vec::new()
    }

    fn follow_logs(&self, _key: &RevisionKey) -> broadcast::Receiver<LogLine> {
        self.logs.subscribe()
    }

    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// A replica in the given phase at a dummy loopback address.
pub fn replica(name: &str, phase: ReplicaPhase) -> ReplicaStatus {
    ReplicaStatus {
        name: name.to_owned(),
        address: SocketAddr::from(([127, 0, 0, 1], 1)),
        phase,
        restarts: 0,
        init_done: 0,
        unready: Vec::new(),
        last_exit: None,
        failure: None,
        times: Default::default(),
    }
}

/// A replica in back-off after exiting with `code` and printing `message`.
pub fn crashed_replica(name: &str, code: i32, message: &str) -> ReplicaStatus {
    ReplicaStatus {
        restarts: 1,
        init_done: 0,
        unready: Vec::new(),
        last_exit: Some(ExitInfo {
            reason: None,
            code: Some(code),
            signal: None,
            message: message.to_owned(),
            started_at: None,
            finished_at: None,
            init_container: None,
        }),
        ..replica(name, ReplicaPhase::BackOff)
    }
}

/// A replica the platform cannot run at all.
pub fn failed_replica(name: &str, reason: &str, message: &str) -> ReplicaStatus {
    ReplicaStatus {
        failure: Some(Failure {
            reason: reason.to_owned(),
            message: message.to_owned(),
        }),
        ..replica(name, ReplicaPhase::Starting)
    }
}

/// A context over a fresh in-memory store (whose timestamps use [`test_clock`]), default
/// config and a [`FakePlatform`].
pub fn test_context() -> (Context, Arc<FakePlatform>) {
    test_context_with(Config::default(), test_clock)
}

/// Like [`test_context`] with a given config and clock (the store uses the same clock).
pub fn test_context_with(
    config: Config,
    clock: fn() -> DateTime<Utc>,
) -> (Context, Arc<FakePlatform>) {
    let store = Store::open_in_memory_with(Options {
        clock,
        // As `wisp serve` opens it: a lookup of another annotation fails the test.
        indexed_annotations: Some(crate::INDEXED_ANNOTATIONS),
        ..Options::default()
    })
    .expect("in-memory store");
    let platform = FakePlatform::new();
    let ctx = Context {
        store,
        config: wisp_api::config::LiveConfig::new(config),
        platform: platform.clone(),
        routing: Arc::new(ArcSwap::from_pointee(RoutingTable::default())),
        scaling: Arc::new(crate::autoscaling::Scaling::new(clock)),
        clock,
        digests: None,
        views: wisp_views::Views::new(clock),
        own_writes: Default::default(),
    };
    (ctx, platform)
}

/// Creates `obj` in the store (panics on failure) and returns it as stored.
pub fn insert<T: Resource>(ctx: &Context, obj: &T) -> T {
    objects::create(&ctx.store, obj).expect("create")
}

/// Reads an object (panics if it is missing or undecodable).
pub fn fetch<T: Resource>(ctx: &Context, namespace: &str, name: &str) -> T {
    objects::get(&ctx.store, namespace, name)
        .expect("get")
        .unwrap_or_else(|| panic!("{} {namespace}/{name} not found", T::kind().kind))
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        ..Default::default()
    }
}

/// A serving container with a port and a command (so the process runtime could run it).
pub fn container(image: &str) -> Container {
    Container {
        name: "user-container".into(),
        image: image.to_owned(),
        command: vec!["/bin/true".into()],
        ports: vec![ContainerPort {
            container_port: 8080,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn template(image: &str) -> RevisionTemplateSpec {
    RevisionTemplateSpec {
        metadata: ObjectMeta::default(),
        spec: RevisionSpec {
            timeout_seconds: Some(300),
            pod: wisp_api::serving::PodSpec {
                containers: vec![container(image)],
                ..Default::default()
            },
            ..Default::default()
        },
    }
}

pub fn configuration(namespace: &str, name: &str, image: &str) -> Configuration {
    Configuration {
        metadata: meta(namespace, name),
        spec: ConfigurationSpec {
            template: template(image),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A Service with the default traffic (100% to the latest revision).
pub fn service(namespace: &str, name: &str, image: &str) -> Service {
    Service {
        metadata: meta(namespace, name),
        spec: ServiceSpec {
            template: template(image),
            traffic: vec![TrafficTarget {
                latest_revision: Some(true),
                percent: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

pub fn route(namespace: &str, name: &str, traffic: Vec<TrafficTarget>) -> Route {
    Route {
        metadata: meta(namespace, name),
        spec: RouteSpec {
            traffic,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A Revision labelled as generation `generation` of configuration `config` (no owner
/// reference: add one with [`objects::owner_reference`] when ownership matters).
pub fn revision(namespace: &str, name: &str, config: &str, generation: i64) -> Revision {
    let mut m = meta(namespace, name);
    m.labels
        .insert(crate::names::label::CONFIGURATION.into(), config.into());
    m.labels.insert(
        crate::names::label::CONFIGURATION_GENERATION.into(),
        generation.to_string(),
    );
    Revision {
        metadata: m,
        spec: template("img").spec,
        ..Default::default()
    }
}

/// Sets a revision's status to Ready (or failed with `reason`) as the revision reconciler
/// would, for tests of the routes/service side that need revisions in a given state.
pub fn set_revision_ready(rev: &mut Revision, ready: ConditionStatus, reason: &str, message: &str) {
    let mut st = Status {
        observed_generation: rev.metadata.generation,
        ..Default::default()
    };
    conditions::set(
        &mut st,
        conditions::READY,
        ready,
        reason,
        message,
        test_clock(),
    );
    rev.status = Some(RevisionStatus {
        status: st,
        ..Default::default()
    });
}

/// Runs `reconcilers` over every object of their kinds, round after round, until a round
/// writes nothing to the store (or panics after `max_rounds`). A synchronous, deterministic
/// stand-in for the runner in reconciler tests. Errors are retried in the next round.
pub fn settle(ctx: &Context, reconcilers: &[&dyn Reconciler], max_rounds: usize) {
    for _ in 0..max_rounds {
        let before = ctx.store.current_revision();
        let mut errors = Vec::new();
        for r in reconcilers {
            let (items, _) = ctx
                .store
                .list(&resource(r.kind()), None, None)
                .expect("list");
            for item in items {
                let ns = item["metadata"]["namespace"].as_str().unwrap_or("");
                let name = item["metadata"]["name"].as_str().unwrap_or("");
                if let Err(e) = r.reconcile_name(ctx, ns, name) {
                    errors.push(format!("{} {ns}/{name}: {e}", r.kind().kind));
                }
            }
        }
        if errors.is_empty() && ctx.store.current_revision() == before {
            return;
        }
    }
    panic!("reconcilers did not settle within {max_rounds} rounds");
}

/// Test shorthands on every reconciler: keys and events from names and JSON.
pub trait ReconcilerExt: Reconciler {
    /// Reconciles the object of this reconciler's kind named `namespace/name`.
    fn reconcile_name(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        self.reconcile(ctx, &ObjectRef::new(self.kind(), namespace, name))
    }

    /// [`Reconciler::watches`] for a change of `obj` (of `kind`), as `(namespace, name)`.
    fn watched(
        &self,
        ctx: &Context,
        kind: &'static ResourceKind,
        obj: &serde_json::Value,
    ) -> Vec<(String, String)> {
        let ev = OwnedEvent::new(kind, obj.clone());
        self.watches(ctx, &ev.event())
            .into_iter()
            .map(|k| (k.namespace, k.name))
            .collect()
    }
}

impl<R: Reconciler + ?Sized> ReconcilerExt for R {}

/// An [`Event`] and what it borrows, built from an object's JSON.
#[derive(Debug)]
pub struct OwnedEvent {
    kind: &'static ResourceKind,
    meta: ObjectMeta,
    object: serde_json::Value,
    deleted: bool,
}

impl OwnedEvent {
    /// A change (not a deletion) of `object`; its metadata must decode.
    pub fn new(kind: &'static ResourceKind, object: serde_json::Value) -> Self {
        let meta = serde_json::from_value(object["metadata"].clone()).expect("metadata");
        OwnedEvent {
            kind,
            meta,
            object,
            deleted: false,
        }
    }

    /// The same object, deleted.
    pub fn deleted(mut self) -> Self {
        self.deleted = true;
        self
    }

    pub fn event(&self) -> Event<'_> {
        Event {
            kind: self.kind,
            meta: &self.meta,
            object: &self.object,
            deleted: self.deleted,
        }
    }
}
