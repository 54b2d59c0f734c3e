//! Pure functions of the Revision reconciler: how many replicas a revision should have,
//! what the platform needs to run them, and the revision status implied by the replicas
//! the platform reports (Knative's `pkg/reconciler/revision/reconcile_resources.go` and
//! `pkg/apis/serving/v1/revision_lifecycle.go`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use wisp_api::{
    config::{AutoscalerConfig, Config},
    meta::{ConditionStatus, Status},
    serving::{Container, ContainerStatus, PodSpec, Revision, RevisionStatus},
};
use wisp_autoscaler::{DeciderSpec, scaler::initial_replicas};
use wisp_runtime::{
    ReplicaPhase, ReplicaSpec, ReplicaStatus, RevisionKey, podconfig::POD_INITIALIZING,
};

use crate::{
    conditions::{self, ConditionSet, READY},
    names::{label, routing_state},
    revision::digest::ResolveOptions,
};

use wisp_api::autoscaling::condition::SCALE_TARGET_INITIALIZED;
pub use wisp_api::serving::condition::{ACTIVE, CONTAINER_HEALTHY, RESOURCES_AVAILABLE};
/// Ready's dependents, in Knative's order.
pub const DEPENDENTS: [&str; 2] = [RESOURCES_AVAILABLE, CONTAINER_HEALTHY];
/// The Revision's condition set (Knative's `revisionCondSet`).
pub const CONDITIONS: ConditionSet = ConditionSet::new(READY, &DEPENDENTS);

pub const DEPLOYING: &str = "Deploying";
/// `ResourcesAvailable` while the images' digests are being resolved (Knative's
/// `ReasonResolvingDigests`).
pub const RESOLVING_DIGESTS: &str = "ResolvingDigests";
/// `ContainerHealthy` when an image cannot be resolved (Knative's `ReasonContainerMissing`).
pub const CONTAINER_MISSING: &str = "ContainerMissing";
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub const PROGRESS_DEADLINE_MESSAGE: &str = "Initial scale was never achieved";
/// The PodAutoscaler's reasons, which the revision's `Active` mirrors.
pub use crate::autoscaling::resources::{NO_TRAFFIC, NO_TRAFFIC_MESSAGE, QUEUED, QUEUED_MESSAGE};

/// Whether no route references the revision any more (`routingState: reserve`).
pub fn is_reserve(rev: &Revision) -> bool {
    rev.metadata
        .labels
        .get(crate::names::label::ROUTING_STATE)
        .map(String::as_str)
        == Some(crate::names::routing_state::RESERVE)
}

/// The replicas to run: 0 for a reserve revision (unreachable: wisp does not wait a stable
/// window to stop what no route can reach, nor does its min-scale hold it), else the KPA's
/// count once it has one, else the initial scale the KPA starts from
/// ([`initial_replicas`](wisp_autoscaler::scaler::initial_replicas): initial-scale raised
/// to min-scale, capped at max-scale).
pub fn replicas(rev: &Revision, cfg: &AutoscalerConfig, kpa: Option<u32>) -> u32 {
    if is_reserve(rev) {
        return 0;
    }
    kpa.unwrap_or_else(|| {
        let cc = rev.spec.container_concurrency.unwrap_or(0);
        initial_replicas(&DeciderSpec::resolve(&rev.metadata.annotations, cc, cfg))
    })
}

/// Knative's `PropagateAutoscalerStatus` (`pkg/apis/serving/v1/revision_lifecycle.go`):
/// the revision's `Active` condition mirrors the PodAutoscaler's; `actualReplicas` is the
/// PA's `actualScale` and `desiredReplicas` its `desiredScale`, once known (≥ 0; before the
/// first decision it stays the replica count being applied).
///
/// Ready replicas make the revision's resources available and its container healthy only
/// once the PA says its scale target was initialized, as Knative marks ContainerHealthy
/// from `IsScaleTargetInitialized` alone: the revision turns Ready in one status write,
/// with the PA's `Active` (the PA's write queues the revision again), not first Ready and
/// then Active a moment later. `old` is the revision's status before this reconcile.
pub fn propagate_autoscaler_status(
    st: &mut RevisionStatus,
    old: Option<&RevisionStatus>,
    pa: &wisp_api::autoscaling::PodAutoscalerStatus,
    now: DateTime<Utc>,
) {
    if !conditions::is_true(&pa.status, SCALE_TARGET_INITIALIZED) {
        for (t, waiting) in [(RESOURCES_AVAILABLE, DEPLOYING), (CONTAINER_HEALTHY, "")] {
            let was = old.and_then(|o| o.status.condition(t));
            let was_true = was.is_some_and(|c| c.status == ConditionStatus::True);
            if conditions::is_true(&st.status, t) && !was_true {
                let (cs, reason, message) = was.map_or_else(
                    || (ConditionStatus::Unknown, waiting.to_owned(), String::new()),
                    |c| (c.status, c.reason.clone(), c.message.clone()),
                );
                CONDITIONS.mark(&mut st.status, t, cs, &reason, &message, now);
            }
        }
    }
    if let Some(a) = pa.actual_scale.filter(|a| *a >= 0) {
        st.actual_replicas = Some(a);
    }
    if let Some(c) = pa.status.condition(ACTIVE) {
        let (cs, reason, message) = (c.status, c.reason.clone(), c.message.clone());
        CONDITIONS.mark(&mut st.status, ACTIVE, cs, &reason, &message, now);
    }
    if let Some(d) = pa.desired_scale.filter(|d| *d >= 0) {
        st.desired_replicas = Some(d);
    }
}

/// The revision's progress deadline: its annotation, else `config-deployment`.
pub fn progress_deadline(rev: &Revision, cfg: &Config) -> Duration {
    rev.progress_deadline(&cfg.deployment)
}

/// Whether `status.containerStatuses` already pins every container (Knative's
/// `reconcileDigest` test: one status per container, init containers included).
pub fn digests_resolved(rev: &Revision) -> bool {
    let st = rev.status.as_ref();
    let have = st.map_or(0, |s| {
        s.container_statuses.len() + s.init_container_statuses.len()
    });
    have == rev.spec.pod.containers.len() + rev.spec.pod.init_containers.len()
}

/// What digest resolution needs from the revision and config-deployment.
pub fn resolve_options(rev: &Revision, cfg: &Config) -> ResolveOptions {
    let pod = &rev.spec.pod;
    ResolveOptions {
        namespace: rev.metadata.namespace.clone(),
        service_account: pod.service_account_name.clone(),
        image_pull_secrets: pod
            .image_pull_secrets
            .iter()
            .filter_map(|s| s.get("name").and_then(|n| n.as_str()))
            .map(str::to_owned)
            .collect(),
        registries_to_skip: cfg.deployment.registries_skipping_tag_resolving.clone(),
        timeout: cfg
            .deployment
            .digest_resolution_timeout
            .to_std()
            .unwrap_or_default(),
    }
}

/// The pod to run: the revision's, each image replaced by the digest it resolved to (as
/// Knative's `makePodSpec` does, `pkg/reconciler/revision/resources/deploy.go`), so every
/// replica runs the same image even if its tag moves.
pub fn pinned_pod(rev: &Revision) -> PodSpec {
    let mut pod = rev.spec.pod.clone();
    if let Some(st) = &rev.status {
        let pin = |cs: &mut [Container], statuses: &[ContainerStatus]| {
            for (c, s) in cs.iter_mut().zip(statuses) {
                if !s.image_digest.is_empty() {
                    c.image = s.image_digest.clone();
                }
            }
        };
        pin(&mut pod.containers, &st.container_statuses);
        pin(&mut pod.init_containers, &st.init_container_statuses);
    }
    pod
}

/// What the platform needs to run the revision; None if it has no container.
pub fn replica_spec(rev: &Revision, cfg: &Config) -> Option<ReplicaSpec> {
    // Nothing to run without a container (validation requires one).
    rev.serving_container()?;
    let m = &rev.metadata;
    let pod = pinned_pod(rev);
    let hash = super::views::Template::of(rev, &pod).hash;
    Some(ReplicaSpec {
        key: RevisionKey::new(&m.namespace, &m.name),
        uid: m.uid.clone(),
        configuration: m
            .labels
            .get(label::CONFIGURATION)
            .cloned()
            .unwrap_or_default(),
        service: m.labels.get(label::SERVICE).cloned().unwrap_or_default(),
        pod,
        grace_period: rev.timeout(&cfg.defaults),
        name_prefix: super::views::name_prefix(&m.name, &hash),
        routed: m
            .labels
            .get(label::ROUTING_STATE)
            .is_some_and(|s| s == routing_state::ACTIVE),
    })
}

/// Knative's `ExitCode<N>` reason and `Container failed with: …` message for an exit.
fn exit_condition(exit: &wisp_runtime::ExitInfo) -> (String, String) {
    // Kubernetes reports a death by signal as exit code 128 + signal.
    let code = exit.code.or(exit.signal.map(|s| 128 + s)).unwrap_or(0);
    let message = if code == 0 && exit.message.is_empty() {
        "container exited with no error".to_string()
    } else {
        exit.message.clone()
    };
    // Knative's reason is the exit code; the kernel's verdict (`OOMKilled`, as the kubelet
    // reports a container its memory limit killed) leads the message so it is not lost.
    let message = match &exit.reason {
        Some(reason) if message.is_empty() => reason.clone(),
        Some(reason) => format!("{reason}: {message}"),
        None => message,
    };
    (
        format!("ExitCode{code}"),
        format!("Container failed with: {message}"),
    )
}

/// How long a new revision's first status may wait for what its replicas come to.
/// Creation times have whole seconds, so the wait is 1 to 2 s from the actual creation.
pub const FIRST_STATUS_HOLD: Duration = Duration::from_secs(2);

/// Whether a new revision should leave its first status unwritten for now, and how long
/// it may still wait: `status` (just computed) is in progress (Ready Unknown), none was
/// ever `stored`, and the revision is younger than [`FIRST_STATUS_HOLD`]. Its replica
/// turning ready (or failing) re-queues it within that time, and it writes Ready (or the
/// failure) as its first status. Its Configuration, Route and Service wait for its first
/// status too, so each writes one status on the way to Ready instead of an "in progress"
/// one replaced a moment later; a revision that takes longer shows `Deploying` from then.
///
/// Image digests just resolved are written at once (the resolver forgets them once
/// handed over): a revision whose containers name images writes its first status when
/// they are pinned; one of commands only resolves nothing, and waits.
pub fn first_status_wait(
    rev: &Revision,
    stored: bool,
    status: &RevisionStatus,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let in_progress = status
        .status
        .condition(READY)
        .is_some_and(|c| c.status == ConditionStatus::Unknown);
    let digests = status
        .container_statuses
        .iter()
        .chain(&status.init_container_statuses)
        .any(|c| !c.image_digest.is_empty());
    if stored || !in_progress || digests {
        return None;
    }
    let created = parse_time(rev.metadata.creation_timestamp.as_deref())?;
    let age = (now - created).to_std().unwrap_or_default();
    FIRST_STATUS_HOLD
        .checked_sub(age)
        .filter(|left| !left.is_zero())
}

fn parse_time(s: Option<&str>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

type Cond = (ConditionStatus, String, String);

fn cond(cs: ConditionStatus, reason: &str, message: &str) -> Cond {
    (cs, reason.to_owned(), message.to_owned())
}

/// The revision status implied by the platform's replicas, and how long until it should
/// be looked at again without any event (the progress deadline), if at all.
///
/// Starts from the current status so that transition times survive; each condition is
/// set exactly once with its final value.
/// A failure the platform keeps retrying, as the kubelet retries a waiting container
/// (`CreateContainerConfigError`, a volume that cannot be set up yet), not a permanent one.
pub fn is_waiting(f: &wisp_runtime::Failure) -> bool {
    wisp_runtime::podconfig::WAITING_REASONS.contains(&f.reason.as_str())
}

/// While the revision deploys, `ResourcesAvailable` says what its replicas wait for (an
/// image pull and its bytes); the kubelet shows this as the pod's `Pulling` events.
pub fn show_waiting(st: &mut RevisionStatus, waiting: &str, now: DateTime<Utc>) {
    let deploying = st
        .status
        .condition(RESOURCES_AVAILABLE)
        .is_some_and(|c| c.status == ConditionStatus::Unknown && c.reason == DEPLOYING);
    if deploying {
        CONDITIONS.mark(
            &mut st.status,
            RESOURCES_AVAILABLE,
            ConditionStatus::Unknown,
            DEPLOYING,
            waiting,
            now,
        );
    }
}

pub fn compute_status(
    rev: &Revision,
    replicas: &[ReplicaStatus],
    desired: u32,
    deadline: Duration,
    now: DateTime<Utc>,
) -> (RevisionStatus, Option<Duration>) {
    let mut st = rev.status.clone().unwrap_or_default();
    let old = st.status.clone();
    let ready_count = replicas
        .iter()
        .filter(|r| r.phase == ReplicaPhase::Ready)
        .count();
    let was = |t: &str| old.condition(t).map(|c| c.status);
    // Once healthy, a container stays healthy until it is seen failing (Knative).
    let healthy_or_unknown = || {
        if was(CONTAINER_HEALTHY) == Some(ConditionStatus::True) {
            cond(ConditionStatus::True, "", "")
        } else {
            cond(ConditionStatus::Unknown, "", "")
        }
    };
    let mut requeue = None;

    let failure = replicas.iter().find_map(|r| r.failure.as_ref());
    let (resources, health): (Cond, Cond) = if let Some(f) = failure.filter(|f| !is_waiting(f)) {
        let c = cond(ConditionStatus::False, &f.reason, &f.message);
        (c.clone(), c)
    } else if let Some(f) = failure.filter(|_| ready_count == 0) {
        // A container the kubelet keeps trying to create (its config refers to a Secret
        // that does not exist yet, say): Knative's `reconcile_resources.go` shows the
        // waiting reason on ResourcesAvailable; the replica recovers by itself.
        (
            cond(ConditionStatus::False, &f.reason, &f.message),
            healthy_or_unknown(),
        )
    } else if ready_count == 0
        && desired == 0
        && (was(CONTAINER_HEALTHY) == Some(ConditionStatus::False)
            || was(RESOURCES_AVAILABLE) == Some(ConditionStatus::False))
    {
        // Scaled to zero after failing (the KPA stops running a revision whose resources
        // failed): going to zero fixes nothing, so the failure stays reported.
        let keep = |t: &str| {
            old.condition(t)
                .map(|c| (c.status, c.reason.clone(), c.message.clone()))
                .unwrap_or_else(|| cond(ConditionStatus::Unknown, "", ""))
        };
        (keep(RESOURCES_AVAILABLE), keep(CONTAINER_HEALTHY))
    } else if ready_count >= 1 || desired == 0 {
        (
            cond(ConditionStatus::True, "", ""),
            cond(ConditionStatus::True, "", ""),
        )
    } else if let Some(exit) = replicas
        .iter()
        .filter(|r| r.phase != ReplicaPhase::Terminating)
        .find_map(|r| r.last_exit.as_ref())
        // Knative's `reconcile_resources.go` reads the pod's `containerStatuses`, never its
        // `initContainerStatuses`: a failing init container is not a crash of the revision's
        // container but a pod that never initializes (the deadline below).
        .filter(|e| e.init_container.is_none())
    {
        let (reason, message) = exit_condition(exit);
        let resources = match old.condition(RESOURCES_AVAILABLE) {
            Some(c) if c.status != ConditionStatus::True => {
                (c.status, c.reason.clone(), c.message.clone())
            }
            _ => cond(ConditionStatus::Unknown, DEPLOYING, ""),
        };
        (resources, cond(ConditionStatus::False, &reason, &message))
    } else {
        // Waiting for replicas: since creation, or since the revision last stopped being
        // available (a scale-up from zero, replicas lost), whichever is later.
        let created = parse_time(rev.metadata.creation_timestamp.as_deref());
        let since = match old.condition(RESOURCES_AVAILABLE) {
            None => created.unwrap_or(now),
            Some(c) if c.status == ConditionStatus::Unknown => created
                .max(parse_time(c.last_transition_time.as_deref()))
                .unwrap_or(now),
            // It was available (or failed for another reason): the wait starts now.
            Some(_) => now,
        };
        let waited = (now - since).to_std().unwrap_or_default();
        let already_exceeded = old.condition(RESOURCES_AVAILABLE).is_some_and(|c| {
            c.reason == PROGRESS_DEADLINE_EXCEEDED
                || (c.status == ConditionStatus::False && c.reason == POD_INITIALIZING)
        });
        // A replica whose init containers have not all completed (one keeps failing, say):
        // its serving container waits with the kubelet's `PodInitializing`, which Knative's
        // `reconcile_resources.go` puts on ResourcesAvailable once the Deployment's progress
        // deadline passed (`MarkResourcesAvailableFalse(w.Reason, w.Message)`; the kubelet
        // gives that reason no message).
        let init_count = rev.spec.pod.init_containers.len();
        let initializing = replicas.iter().any(|r| {
            r.phase != ReplicaPhase::Terminating
                && usize::try_from(r.init_done).unwrap_or(usize::MAX) < init_count
        });
        if waited >= deadline || already_exceeded {
            let (reason, message) = if initializing {
                (POD_INITIALIZING, "")
            } else {
                (PROGRESS_DEADLINE_EXCEEDED, PROGRESS_DEADLINE_MESSAGE)
            };
            (
                cond(ConditionStatus::False, reason, message),
                healthy_or_unknown(),
            )
        } else {
            requeue = Some(deadline - waited);
            (
                cond(ConditionStatus::Unknown, DEPLOYING, ""),
                healthy_or_unknown(),
            )
        }
    };

    let active = if ready_count >= 1 {
        cond(ConditionStatus::True, "", "")
    } else if desired == 0 {
        cond(ConditionStatus::False, NO_TRAFFIC, NO_TRAFFIC_MESSAGE)
    } else {
        cond(ConditionStatus::Unknown, QUEUED, QUEUED_MESSAGE)
    };

    let s: &mut Status = &mut st.status;
    let marks = [
        (RESOURCES_AVAILABLE, resources),
        (CONTAINER_HEALTHY, health),
        (ACTIVE, active),
    ];
    CONDITIONS.mark_all(
        s,
        marks
            .iter()
            .map(|(t, (cs, r, m))| (*t, *cs, r.as_str(), m.as_str())),
        now,
    );
    s.observed_generation = rev.metadata.generation;
    st.actual_replicas = Some(i32::try_from(ready_count).unwrap_or(i32::MAX));
    st.desired_replicas = Some(i32::try_from(desired).unwrap_or(i32::MAX));
    (st, requeue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions;
    use crate::names::annotation;
    use crate::testing::{self, crashed_replica, failed_replica, replica, test_clock};
    use ConditionStatus::{False, True, Unknown};
    use wisp_runtime::ExitInfo;

    fn rev_with(annotations: &[(&str, &str)]) -> Revision {
        let mut r = testing::revision("ns", "hello-00001", "hello", 1);
        r.metadata.generation = 1;
        r.metadata.creation_timestamp = Some(testing::TEST_NOW.into());
        for (k, v) in annotations {
            r.metadata.annotations.insert(k.to_string(), v.to_string());
        }
        r
    }

    #[test]
    fn initial_replicas_table() {
        let as_cfg = |initial, min, max| AutoscalerConfig {
            initial_scale: initial,
            min_scale: min,
            max_scale: max,
            ..Default::default()
        };
        type Annotations = &'static [(&'static str, &'static str)];
        let cases: [(&str, Annotations, AutoscalerConfig, u32); 10] = [
            ("config default", &[], AutoscalerConfig::default(), 1),
            (
                "annotation initial",
                &[("autoscaling.knative.dev/initial-scale", "3")],
                as_cfg(1, 0, 0),
                3,
            ),
            (
                "legacy initial",
                &[("autoscaling.knative.dev/initialScale", "2")],
                as_cfg(1, 0, 0),
                2,
            ),
            (
                "current key wins over legacy",
                &[
                    ("autoscaling.knative.dev/initial-scale", "4"),
                    ("autoscaling.knative.dev/initialScale", "2"),
                ],
                as_cfg(1, 0, 0),
                4,
            ),
            (
                "zero initial, where the cluster allows it",
                &[("autoscaling.knative.dev/initial-scale", "0")],
                AutoscalerConfig {
                    allow_zero_initial_scale: true,
                    ..as_cfg(1, 0, 0)
                },
                0,
            ),
            (
                "zero initial, where the cluster does not allow it",
                &[("autoscaling.knative.dev/initial-scale", "0")],
                as_cfg(1, 0, 0),
                1,
            ),
            (
                "raised to min annotation",
                &[("autoscaling.knative.dev/min-scale", "5")],
                as_cfg(1, 0, 0),
                5,
            ),
            ("raised to config min", &[], as_cfg(1, 2, 0), 2),
            (
                "capped at max",
                &[
                    ("autoscaling.knative.dev/initial-scale", "10"),
                    ("autoscaling.knative.dev/maxScale", "3"),
                ],
                as_cfg(1, 0, 0),
                3,
            ),
            ("config max caps", &[], as_cfg(7, 0, 4), 4),
        ];
        for (what, annotations, cfg, want) in cases {
            assert_eq!(replicas(&rev_with(annotations), &cfg, None), want, "{what}");
        }
        // Unreachable revisions go to zero whatever their min-scale.
        let mut reserve = rev_with(&[("autoscaling.knative.dev/min-scale", "3")]);
        reserve
            .metadata
            .labels
            .insert("serving.knative.dev/routingState".into(), "reserve".into());
        assert_eq!(replicas(&reserve, &AutoscalerConfig::default(), None), 0);
        // The KPA's count wins once it has one, except for a reserve revision.
        assert_eq!(
            replicas(&rev_with(&[]), &AutoscalerConfig::default(), Some(4)),
            4
        );
        assert_eq!(replicas(&reserve, &AutoscalerConfig::default(), Some(4)), 0);
    }

    #[test]
    fn progress_deadline_from_annotation_or_config() {
        let cfg = Config::default();
        assert_eq!(
            progress_deadline(&rev_with(&[]), &cfg),
            Duration::from_secs(600)
        );
        let r = rev_with(&[(annotation::PROGRESS_DEADLINE, "90s")]);
        assert_eq!(progress_deadline(&r, &cfg), Duration::from_secs(90));
    }

    #[test]
    fn replica_spec_from_revision() {
        let mut r = rev_with(&[]);
        r.metadata.uid = "rev-uid".into();
        r.metadata
            .labels
            .insert(label::SERVICE.into(), "svc".into());
        let sidecar = wisp_api::serving::Container {
            name: "sidecar".into(),
            ..Default::default()
        };
        r.spec.pod.containers.insert(0, sidecar);
        r.spec.timeout_seconds = None;
        let spec = replica_spec(&r, &Config::default()).unwrap();
        assert_eq!(spec.key, RevisionKey::new("ns", "hello-00001"));
        assert_eq!(spec.uid, "rev-uid");
        assert_eq!(spec.configuration, "hello");
        assert_eq!(spec.service, "svc");
        assert_eq!(
            spec.serving_container().map(|c| c.name.as_str()),
            Some("user-container"),
            "the container with a port serves"
        );
        assert_eq!(spec.pod.containers.len(), 2, "the sidecar travels along");
        assert_eq!(spec.grace_period, Duration::from_secs(300));
        r.spec.timeout_seconds = Some(30);
        r.metadata.labels.remove(label::SERVICE);
        let spec = replica_spec(&r, &Config::default()).unwrap();
        assert_eq!(
            (spec.grace_period, spec.service.as_str()),
            (Duration::from_secs(30), "")
        );
        // Routed: what the labeler says of it (`pending` until a route names it).
        for (state, routed) in [
            (None, false),
            (Some(routing_state::PENDING), false),
            (Some(routing_state::ACTIVE), true),
            (Some(routing_state::RESERVE), false),
        ] {
            match state {
                Some(s) => r
                    .metadata
                    .labels
                    .insert(label::ROUTING_STATE.into(), s.into()),
                None => r.metadata.labels.remove(label::ROUTING_STATE),
            };
            let spec = replica_spec(&r, &Config::default()).unwrap();
            assert_eq!(spec.routed, routed, "{state:?}");
        }
        r.spec.pod.containers.clear();
        assert!(replica_spec(&r, &Config::default()).is_none());
    }

    fn signalled(name: &str, signal: i32) -> ReplicaStatus {
        ReplicaStatus {
            last_exit: Some(ExitInfo {
                reason: None,
                code: None,
                signal: Some(signal),
                message: "killed".into(),
                started_at: None,
                finished_at: None,
                init_container: None,
            }),
            ..replica(name, ReplicaPhase::BackOff)
        }
    }

    type Want = (ConditionStatus, &'static str, &'static str);

    #[test]
    fn status_table() {
        struct Case {
            what: &'static str,
            replicas: Vec<ReplicaStatus>,
            desired: u32,
            /// Seconds since creation.
            age: i64,
            ready: Want,
            resources: Want,
            healthy: Want,
            active: Want,
            requeue: Option<u64>,
        }
        let t = (True, "", "");
        let deploying = (Unknown, DEPLOYING, "");
        let queued = (Unknown, QUEUED, QUEUED_MESSAGE);
        let cases = vec![
            Case {
                what: "no replicas yet",
                replicas: vec![],
                desired: 1,
                age: 10,
                ready: deploying,
                resources: deploying,
                healthy: (Unknown, "", ""),
                active: queued,
                requeue: Some(590),
            },
            Case {
                what: "starting",
                replicas: vec![replica("r1", ReplicaPhase::Starting)],
                desired: 1,
                age: 0,
                ready: deploying,
                resources: deploying,
                healthy: (Unknown, "", ""),
                active: queued,
                requeue: Some(600),
            },
            Case {
                what: "one ready",
                replicas: vec![
                    replica("r1", ReplicaPhase::Ready),
                    replica("r2", ReplicaPhase::Starting),
                ],
                desired: 2,
                age: 5,
                ready: t,
                resources: t,
                healthy: t,
                active: t,
                requeue: None,
            },
            Case {
                what: "scaled to zero",
                replicas: vec![],
                desired: 0,
                age: 5000,
                ready: t,
                resources: t,
                healthy: t,
                active: (False, NO_TRAFFIC, NO_TRAFFIC_MESSAGE),
                requeue: None,
            },
            Case {
                what: "platform cannot run it",
                replicas: vec![failed_replica("r1", "ImageNotSupported", "no command")],
                desired: 1,
                age: 1,
                ready: (False, "ImageNotSupported", "no command"),
                resources: (False, "ImageNotSupported", "no command"),
                healthy: (False, "ImageNotSupported", "no command"),
                active: queued,
                requeue: None,
            },
            Case {
                what: "crashing",
                replicas: vec![crashed_replica("r1", 3, "panic: boom")],
                desired: 1,
                age: 20,
                ready: (False, "ExitCode3", "Container failed with: panic: boom"),
                resources: deploying,
                healthy: (False, "ExitCode3", "Container failed with: panic: boom"),
                active: queued,
                requeue: None,
            },
            Case {
                what: "exited cleanly",
                replicas: vec![crashed_replica("r1", 0, "")],
                desired: 1,
                age: 20,
                ready: (
                    False,
                    "ExitCode0",
                    "Container failed with: container exited with no error",
                ),
                resources: deploying,
                healthy: (
                    False,
                    "ExitCode0",
                    "Container failed with: container exited with no error",
                ),
                active: queued,
                requeue: None,
            },
            Case {
                what: "killed by a signal",
                replicas: vec![signalled("r1", 9)],
                desired: 1,
                age: 20,
                ready: (False, "ExitCode137", "Container failed with: killed"),
                resources: deploying,
                healthy: (False, "ExitCode137", "Container failed with: killed"),
                active: queued,
                requeue: None,
            },
            Case {
                what: "killed for memory: the kernel's reason leads the message",
                replicas: vec![ReplicaStatus {
                    last_exit: Some(ExitInfo {
                        reason: Some("OOMKilled".into()),
                        code: None,
                        signal: Some(9),
                        message: "allocating".into(),
                        started_at: None,
                        finished_at: None,
                        init_container: None,
                    }),
                    ..replica("r1", ReplicaPhase::BackOff)
                }],
                desired: 1,
                age: 20,
                ready: (
                    False,
                    "ExitCode137",
                    "Container failed with: OOMKilled: allocating",
                ),
                resources: deploying,
                healthy: (
                    False,
                    "ExitCode137",
                    "Container failed with: OOMKilled: allocating",
                ),
                active: queued,
                requeue: None,
            },
            Case {
                what: "deadline exceeded",
                replicas: vec![replica("r1", ReplicaPhase::Starting)],
                desired: 1,
                age: 600,
                ready: (False, PROGRESS_DEADLINE_EXCEEDED, PROGRESS_DEADLINE_MESSAGE),
                resources: (False, PROGRESS_DEADLINE_EXCEEDED, PROGRESS_DEADLINE_MESSAGE),
                healthy: (Unknown, "", ""),
                active: queued,
                requeue: None,
            },
        ];
        for c in cases {
            let r = rev_with(&[]);
            let now = test_clock() + chrono::Duration::seconds(c.age);
            let (st, requeue) =
                compute_status(&r, &c.replicas, c.desired, Duration::from_secs(600), now);
            let get = |t: &str| {
                let x = st
                    .status
                    .condition(t)
                    .unwrap_or_else(|| panic!("{}: no {t}", c.what));
                (x.status, x.reason.as_str(), x.message.as_str())
            };
            assert_eq!(get(READY), c.ready, "{}: Ready", c.what);
            assert_eq!(
                get(RESOURCES_AVAILABLE),
                c.resources,
                "{}: ResourcesAvailable",
                c.what
            );
            assert_eq!(
                get(CONTAINER_HEALTHY),
                c.healthy,
                "{}: ContainerHealthy",
                c.what
            );
            assert_eq!(get(ACTIVE), c.active, "{}: Active", c.what);
            assert_eq!(
                requeue,
                c.requeue.map(Duration::from_secs),
                "{}: requeue",
                c.what
            );
            let ready_n = c
                .replicas
                .iter()
                .filter(|r| r.phase == ReplicaPhase::Ready)
                .count() as i32;
            assert_eq!(st.actual_replicas, Some(ready_n), "{}", c.what);
            assert_eq!(st.desired_replicas, Some(c.desired as i32), "{}", c.what);
            assert_eq!(st.status.observed_generation, 1, "{}", c.what);
        }
    }

    /// Knative's `reconcile_resources.go` reads only `containerStatuses`: an init container
    /// that keeps failing leaves the serving container waiting (`PodInitializing`), which
    /// shows on ResourcesAvailable once the progress deadline passed, never as a crash.
    #[test]
    fn a_failing_init_container_shows_as_a_pod_that_never_initializes() {
        let mut r = rev_with(&[]);
        r.spec.pod.init_containers = vec![wisp_api::serving::Container {
            name: "migrate".into(),
            ..Default::default()
        }];
        let mut exit = crashed_replica("r1", 1, "no database");
        if let Some(e) = exit.last_exit.as_mut() {
            e.init_container = Some("migrate".into());
        }
        let deadline = Duration::from_secs(600);
        let at = |s: i64| test_clock() + chrono::Duration::seconds(s);
        let get = |st: &RevisionStatus, t: &str| {
            let c = st.status.condition(t).unwrap();
            (c.status, c.reason.clone(), c.message.clone())
        };
        let (st, requeue) = compute_status(&r, std::slice::from_ref(&exit), 1, deadline, at(20));
        assert_eq!(
            get(&st, RESOURCES_AVAILABLE),
            (Unknown, DEPLOYING.into(), String::new())
        );
        assert_eq!(
            get(&st, CONTAINER_HEALTHY),
            (Unknown, String::new(), String::new())
        );
        assert_eq!(requeue, Some(Duration::from_secs(580)));
        r.status = Some(st);
        // (The wait counts from when ResourcesAvailable last changed: at 20 s.)
        let (st, requeue) = compute_status(&r, std::slice::from_ref(&exit), 1, deadline, at(620));
        let failed = (False, POD_INITIALIZING.to_string(), String::new());
        assert_eq!(get(&st, RESOURCES_AVAILABLE), failed);
        assert_eq!(get(&st, READY), failed);
        assert_eq!(
            get(&st, CONTAINER_HEALTHY),
            (Unknown, String::new(), String::new())
        );
        assert_eq!(requeue, None);
        // It stays so while the replica keeps failing.
        r.status = Some(st);
        let (st, _) = compute_status(&r, std::slice::from_ref(&exit), 1, deadline, at(900));
        assert_eq!(get(&st, RESOURCES_AVAILABLE), failed);
        // Once the init containers completed, a crash of the app is the revision's again.
        let mut crashed = crashed_replica("r1", 3, "panic: boom");
        crashed.init_done = 1;
        let (st, _) = compute_status(&r, &[crashed], 1, deadline, at(20));
        assert_eq!(
            get(&st, CONTAINER_HEALTHY),
            (
                False,
                "ExitCode3".into(),
                "Container failed with: panic: boom".into()
            )
        );
    }

    #[test]
    fn crash_after_ready_fails_the_revision() {
        let mut r = rev_with(&[]);
        let ready = [replica("r1", ReplicaPhase::Ready)];
        let (st, _) = compute_status(&r, &ready, 1, Duration::from_secs(600), test_clock());
        r.status = Some(st);
        let later = test_clock() + chrono::Duration::hours(2);
        let (st, requeue) = compute_status(
            &r,
            &[crashed_replica("r1", 1, "oops")],
            1,
            Duration::from_secs(600),
            later,
        );
        let ready = st.status.condition(READY).unwrap();
        assert_eq!((ready.status, ready.reason.as_str()), (False, "ExitCode1"));
        assert_eq!(requeue, None);
    }

    #[test]
    fn a_pull_in_progress_is_shown_while_deploying_only() {
        let pulling = "Pulling image \"r.local/app:1\": 1.5 MB of 4.0 MB";
        let r = rev_with(&[]);
        // No replica ready yet: Deploying, with what it waits for.
        let (mut st, _) = compute_status(&r, &[], 1, Duration::from_secs(600), test_clock());
        show_waiting(&mut st, pulling, test_clock());
        let c = st.status.condition(RESOURCES_AVAILABLE).unwrap();
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (ConditionStatus::Unknown, DEPLOYING, pulling)
        );
        // Ready, or failed: the condition says so, not the pull.
        for replicas in [
            vec![replica("r1", ReplicaPhase::Ready)],
            vec![failed_replica("r1", "ErrImagePull", "unauthorized")],
        ] {
            let (mut st, _) =
                compute_status(&r, &replicas, 1, Duration::from_secs(600), test_clock());
            let before = st.status.condition(RESOURCES_AVAILABLE).cloned();
            show_waiting(&mut st, pulling, test_clock());
            assert_eq!(st.status.condition(RESOURCES_AVAILABLE).cloned(), before);
        }
    }

    #[test]
    fn a_failed_revision_scaled_to_zero_stays_failed() {
        let mut r = rev_with(&[]);
        let failing = [failed_replica(
            "r1",
            "ContainerMissing",
            "needs a container runtime",
        )];
        let (st, _) = compute_status(&r, &failing, 1, Duration::from_secs(600), test_clock());
        r.status = Some(st);
        // The KPA takes an unreachable (failed) revision to zero: no replica to report.
        let (st, _) = compute_status(&r, &[], 0, Duration::from_secs(600), test_clock());
        let ready = st.status.condition(READY).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (False, "ContainerMissing", "needs a container runtime")
        );
    }

    #[test]
    fn losing_replicas_after_ready_restarts_the_deadline() {
        let mut r = rev_with(&[]);
        let (st, _) = compute_status(
            &r,
            &[replica("r1", ReplicaPhase::Ready)],
            1,
            Duration::from_secs(600),
            test_clock(),
        );
        r.status = Some(st);
        // Two hours later the only replica is not ready (no crash): Deploying, not
        // ProgressDeadlineExceeded, with a fresh deadline.
        let later = test_clock() + chrono::Duration::hours(2);
        let (st, requeue) = compute_status(
            &r,
            &[replica("r1", ReplicaPhase::NotReady)],
            1,
            Duration::from_secs(600),
            later,
        );
        let ra = st.status.condition(RESOURCES_AVAILABLE).unwrap();
        assert_eq!((ra.status, ra.reason.as_str()), (Unknown, DEPLOYING));
        assert_eq!(requeue, Some(Duration::from_secs(600)));
        assert!(
            conditions::is_true(&st.status, CONTAINER_HEALTHY),
            "stays healthy"
        );
        // ... and the deadline fires 600 s after that transition.
        r.status = Some(st);
        let (st, requeue) = compute_status(
            &r,
            &[replica("r1", ReplicaPhase::NotReady)],
            1,
            Duration::from_secs(600),
            later + chrono::Duration::seconds(600),
        );
        assert!(conditions::is_false(&st.status, READY));
        assert_eq!(requeue, None);
    }

    #[test]
    fn ready_replicas_count_once_the_pa_initialized_its_scale_target() {
        use wisp_api::autoscaling::PodAutoscalerStatus;
        let pa = |initialized: bool, active: ConditionStatus| {
            let mut st = PodAutoscalerStatus {
                // A PA behind the replicas has not counted them yet.
                actual_scale: Some(i32::from(initialized)),
                desired_scale: Some(-1),
                ..Default::default()
            };
            let now = test_clock();
            for (t, cs) in [
                (
                    SCALE_TARGET_INITIALIZED,
                    if initialized { True } else { Unknown },
                ),
                (ACTIVE, active),
            ] {
                crate::autoscaling::resources::CONDITIONS.mark(&mut st.status, t, cs, "", "", now);
            }
            st
        };
        let ready = [replica("r1", ReplicaPhase::Ready)];
        let fresh = rev_with(&[]);
        let (before, _) = compute_status(&fresh, &[], 1, Duration::from_secs(600), test_clock());
        let mut was_ready = rev_with(&[]);
        let (st, _) = compute_status(
            &was_ready,
            &ready,
            1,
            Duration::from_secs(600),
            test_clock(),
        );
        was_ready.status = Some(st);
        // (what, the revision's status before, PA initialized, PA active, Ready after,
        //  ResourcesAvailable's reason after)
        let cases = [
            (
                "PA behind the replicas",
                Some(&before),
                false,
                Unknown,
                Unknown,
                DEPLOYING,
            ),
            (
                "first reconcile, PA behind",
                None,
                false,
                Unknown,
                Unknown,
                DEPLOYING,
            ),
            ("PA caught up", Some(&before), true, True, True, ""),
            (
                "was ready: stays so",
                was_ready.status.as_ref(),
                false,
                True,
                True,
                "",
            ),
        ];
        for (what, old, initialized, active, want_ready, want_reason) in cases {
            let mut r = rev_with(&[]);
            r.status = old.cloned();
            let (mut st, _) = compute_status(&r, &ready, 1, Duration::from_secs(600), test_clock());
            propagate_autoscaler_status(&mut st, old, &pa(initialized, active), test_clock());
            let c = |t: &str| st.status.condition(t).unwrap().clone();
            assert_eq!(c(READY).status, want_ready, "{what}");
            assert_eq!(c(RESOURCES_AVAILABLE).reason, want_reason, "{what}");
            assert_eq!(c(ACTIVE).status, active, "{what}");
            // Replica counts are the PA's.
            assert_eq!(st.actual_replicas, Some(i32::from(initialized)), "{what}");
        }
    }

    #[test]
    fn only_a_new_revisions_in_progress_first_status_waits() {
        let deploying = compute_status(
            &rev_with(&[]),
            &[],
            1,
            Duration::from_secs(600),
            test_clock(),
        )
        .0;
        let ready = compute_status(
            &rev_with(&[]),
            &[replica("r1", ReplicaPhase::Ready)],
            1,
            Duration::from_secs(600),
            test_clock(),
        )
        .0;
        let failed = compute_status(
            &rev_with(&[]),
            &[crashed_replica("r1", 1, "boom")],
            1,
            Duration::from_secs(600),
            test_clock(),
        )
        .0;
        let secs = chrono::Duration::seconds;
        let mut pinned = deploying.clone();
        pinned.container_statuses = vec![ContainerStatus {
            name: "user-container".into(),
            image_digest: "example.com/hello@sha256:0123".into(),
        }];
        // (what, a status stored already?, status computed, seconds since creation, wait)
        let cases = [
            ("new, deploying", false, &deploying, 0, Some(2)),
            ("new, deploying, 1 s on", false, &deploying, 1, Some(1)),
            ("new, deploying, hold over", false, &deploying, 2, None),
            ("new, ready", false, &ready, 0, None),
            ("new, failed", false, &failed, 0, None),
            ("has a status", true, &deploying, 0, None),
            ("digests just resolved", false, &pinned, 0, None),
        ];
        for (what, stored, status, age, want) in cases {
            let r = rev_with(&[]);
            let got = first_status_wait(&r, stored, status, test_clock() + secs(age));
            assert_eq!(got, want.map(Duration::from_secs), "{what}");
        }
    }

    #[test]
    fn recomputing_changes_nothing() {
        for replicas in [
            vec![],
            vec![replica("r1", ReplicaPhase::Ready)],
            vec![crashed_replica("r1", 2, "x")],
        ] {
            let mut r = rev_with(&[]);
            let (st, _) = compute_status(&r, &replicas, 1, Duration::from_secs(600), test_clock());
            r.status = Some(st.clone());
            let (again, _) = compute_status(
                &r,
                &replicas,
                1,
                Duration::from_secs(600),
                test_clock() + chrono::Duration::seconds(5),
            );
            assert_eq!(st, again);
        }
    }
}
