//! The Revision reconciler: the bridge between stored revisions and the [`Platform`]
//! (`wisp_runtime::Platform`). It asks the platform for the revision's desired replicas and
//! turns the replicas the platform reports into the revision's status conditions
//! (Knative's `pkg/apis/serving/v1/revision_lifecycle.go`). Decisions are pure functions in [`resources`].
//!
//! A revision that is no longer in the store has its replicas removed; the runner also
//! queues every platform revision unknown to the store at start-up and on each resync, so
//! leftovers of a previous run are cleaned up the same way.
//!
//! [`Platform`]: wisp_runtime::Platform

pub mod digest;
pub mod refs;
pub mod resources;
pub mod views;

use wisp_api::{autoscaling::PodAutoscaler, meta::ConditionStatus, serving::Revision};
use wisp_runtime::RevisionKey;

use self::digest::Resolution;

use crate::{
    objects,
    reconciler::{Action, Context, ObjectRef, ReconcileError, TypedReconciler},
};

/// Reconciles `revisions.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct RevisionReconciler {
    /// Which revisions reference which Secrets and ConfigMaps (an observer of revision
    /// events, registered beside this reconciler).
    refs: std::sync::Arc<refs::ObjectRefIndex>,
}

impl RevisionReconciler {
    pub fn new(refs: std::sync::Arc<refs::ObjectRefIndex>) -> Self {
        RevisionReconciler { refs }
    }
}

impl TypedReconciler for RevisionReconciler {
    type Object = Revision;

    fn reconcile_kind(&self, ctx: &Context, rev: &mut Revision) -> Result<Action, ReconcileError> {
        let (namespace, name) = (&rev.metadata.namespace, &rev.metadata.name);
        let key = RevisionKey::new(namespace, name);
        let now = (ctx.clock)();
        let stored_status = rev.status.is_some();
        if let Some(digests) = &ctx.digests
            && !resources::digests_resolved(rev)
        {
            // Knative's `reconcileDigest` (`pkg/reconciler/revision/revision.go`): nothing runs
            // until every image is pinned to the digest its tag names now.
            let opts = resources::resolve_options(rev, &ctx.config.load());
            let mut st = rev.status.clone().unwrap_or_default();
            match digests.resolve(rev, &opts) {
                Resolution::Pending => {
                    resources::CONDITIONS.mark(
                        &mut st.status,
                        resources::RESOURCES_AVAILABLE,
                        ConditionStatus::Unknown,
                        resources::RESOLVING_DIGESTS,
                        "",
                        now,
                    );
                    st.status.observed_generation = rev.metadata.generation;
                    rev.status = Some(st);
                    return Ok(Action::Done);
                }
                Resolution::Failed(message) => {
                    // Forget it, so that the retry the queue makes asks the registry again.
                    digests.clear(&key);
                    resources::CONDITIONS.mark(
                        &mut st.status,
                        resources::CONTAINER_HEALTHY,
                        ConditionStatus::False,
                        resources::CONTAINER_MISSING,
                        &message,
                        now,
                    );
                    st.status.observed_generation = rev.metadata.generation;
                    rev.status = Some(st);
                    return Err(ReconcileError::Other(message));
                }
                Resolution::Resolved(init, containers) => {
                    digests.clear(&key);
                    st.init_container_statuses = init;
                    st.container_statuses = containers;
                    rev.status = Some(st);
                }
            }
        }

        // The replica count is the KPA's (the PodAutoscaler reconciler publishes it in
        // `ctx.scaling` and wakes this reconciler when it changes); before the KPA's first
        // reconcile of this revision, its initial scale.
        let kpa = ctx.scaling.scale(&key).map(|s| s.replicas);
        let desired = resources::replicas(rev, &ctx.config.load().autoscaler, kpa);
        let spec = resources::replica_spec(rev, &ctx.config.load())
            .ok_or_else(|| ReconcileError::Other(format!("revision {key} has no container")))?;
        ctx.platform.scale(&spec, desired);

        let replicas = ctx.platform.replicas(&key);
        let deadline = resources::progress_deadline(rev, &ctx.config.load());
        {
            let (rev, replicas) = (rev.clone(), replicas.clone());
            ctx.after_commit(move |ctx| publish_views(ctx, &rev, desired, &replicas, deadline));
        }
        let (mut status, requeue) =
            resources::compute_status(rev, &replicas, desired, deadline, now);
        if let Some(waiting) = ctx.platform.waiting(&key) {
            resources::show_waiting(&mut status, &waiting, now);
        }
        if let Some(pa) = objects::get::<PodAutoscaler>(&ctx.store, namespace, name)?
            .filter(|pa| objects::is_controlled_by(&pa.metadata, &rev.metadata.uid))
            .and_then(|pa| pa.status)
        {
            resources::propagate_autoscaler_status(&mut status, rev.status.as_ref(), &pa, now);
        }
        failure_event(ctx, rev, &status);
        if let Some(wait) = resources::first_status_wait(rev, stored_status, &status, now) {
            // Nothing written yet (not even the digest step's container statuses, which
            // pin nothing here); looked at again when the hold ends, if nothing else
            // re-queues it before.
            rev.status = None;
            return Ok(Action::RequeueAfter(requeue.map_or(wait, |r| r.min(wait))));
        }
        rev.status = Some(status);
        Ok(requeue.map_or(Action::Done, Action::RequeueAfter))
    }

    /// A Secret or ConfigMap a revision references changed (or appeared): its reconcile
    /// nudges the platform, whose replicas waiting for it retry at once and whose running
    /// replicas refresh their volume files (as the kubelet does on its volume sync).
    fn watches(&self, _ctx: &Context, event: &crate::reconciler::Event<'_>) -> Vec<ObjectRef> {
        self.refs.revisions_referencing(event)
    }

    /// Its replicas go: a revision no longer stored must not keep running.
    fn gone(&self, ctx: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
        let key = RevisionKey::new(&key.namespace, &key.name);
        if let Some(digests) = &ctx.digests {
            digests.clear(&key);
        }
        ctx.platform.remove(&key);
        let set = key.to_string();
        ctx.views.deployments.replace_set(&set, Vec::new());
        ctx.views.pods.replace_set(&set, Vec::new());
        Ok(Action::Done)
    }
}

/// Shows the revision's Deployment and one Pod per replica in the views ([`views`]), and
/// records the events kube's deployment controller and the kubelet would for what changed
/// since the last reconcile. Costs the revision's replicas, whatever else runs.
fn publish_views(
    ctx: &Context,
    rev: &Revision,
    desired: u32,
    replicas: &[wisp_runtime::ReplicaStatus],
    deadline: std::time::Duration,
) {
    let (ns, name) = (&rev.metadata.namespace, &rev.metadata.name);
    let set = format!("{ns}/{name}");
    let v = &ctx.views;
    let template = views::Template::of(rev, &resources::pinned_pod(rev));
    let old_deployment = v.deployments.get(ns, &views::deployment_name(name));
    let deployment = views::make_deployment(
        rev,
        &template,
        desired,
        replicas,
        deadline.as_secs(),
        old_deployment.as_deref(),
        (ctx.clock)(),
    );
    let pods: Vec<serde_json::Value> = replicas
        .iter()
        .map(|r| views::make_pod(rev, &template, r, v.node))
        .collect();
    let old_pods = v.pods.set_members(&set);
    // Both, always (`|`, not `||`).
    let changed =
        v.deployments.replace_set(&set, vec![deployment]) | v.pods.replace_set(&set, pods);
    if !changed {
        // Same scale, same Pods: nothing happened that an event would tell.
        return;
    }
    // The events name the objects as held (their uids are the views').
    let Some(deployment) = v.deployments.get(ns, &views::deployment_name(name)) else {
        return;
    };
    let old_scale = old_deployment.map(|d| d["spec"]["replicas"].as_i64().unwrap_or(0));
    let new_pods = v.pods.set_members(&set);
    for (source, regarding, type_, reason, message) in views::events(
        &deployment,
        &template.hash,
        old_scale,
        desired,
        &old_pods,
        &new_pods,
        v.node,
    ) {
        v.events.record(source, &regarding, type_, reason, message);
    }
}

/// A revision whose Ready condition turns False records why, as a Warning on the revision
/// (its Pods carry the kubelet's events of the same failure).
fn failure_event(ctx: &Context, rev: &Revision, new: &wisp_api::serving::RevisionStatus) {
    use crate::conditions::READY;
    let ready = |st: Option<&wisp_api::serving::RevisionStatus>| {
        st.and_then(|s| s.status.condition(READY))
            .filter(|c| c.status == ConditionStatus::False)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let Some((reason, message)) = ready(Some(new)) else {
        return;
    };
    if ready(rev.status.as_ref()).is_some_and(|(r, _)| r == reason) {
        return;
    }
    ctx.event(
        &wisp_api::kinds::REVISION,
        &rev.metadata,
        wisp_views::events::EventType::Warning,
        &reason,
        message,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ReconcilerExt;
    use crate::{
        conditions::{self, READY},
        testing::{self, PlatformCall, crashed_replica, replica},
    };
    use std::time::Duration;
    use wisp_runtime::ReplicaPhase;

    fn setup() -> (Context, std::sync::Arc<testing::FakePlatform>, RevisionKey) {
        let (ctx, platform) = testing::test_context();
        let mut rev = testing::revision("default", "hello-00001", "hello", 1);
        rev.metadata
            .annotations
            .insert("autoscaling.knative.dev/initial-scale".into(), "2".into());
        testing::insert(&ctx, &rev);
        (ctx, platform, RevisionKey::new("default", "hello-00001"))
    }

    fn ready_of(ctx: &Context) -> (wisp_api::meta::ConditionStatus, String) {
        let rev: Revision = testing::fetch(ctx, "default", "hello-00001");
        let st = rev.status.unwrap();
        let c = st.status.condition(READY).unwrap();
        (c.status, c.reason.clone())
    }

    #[test]
    fn scales_and_follows_replicas() {
        use wisp_api::meta::ConditionStatus::*;
        let (mut ctx, platform, key) = setup();
        let action = RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        // A new revision's in-progress first status waits for what its replicas come to.
        assert_eq!(action, Action::RequeueAfter(resources::FIRST_STATUS_HOLD));
        let held: Revision = testing::fetch(&ctx, "default", "hello-00001");
        assert!(held.status.is_none(), "{:?}", held.status);
        assert_eq!(platform.scale_of(&key), Some(2));
        let spec = platform.spec_of(&key).unwrap();
        assert_eq!(spec.configuration, "hello");
        // Past the hold it shows that it is deploying.
        fn three_seconds_later() -> chrono::DateTime<chrono::Utc> {
            testing::test_clock() + chrono::Duration::seconds(3)
        }
        ctx.clock = three_seconds_later;
        let action = RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        assert_eq!(action, Action::RequeueAfter(Duration::from_secs(597)));
        assert_eq!(ready_of(&ctx), (Unknown, "Deploying".into()));

        platform.set_replicas(
            &key,
            vec![
                replica("a", ReplicaPhase::Ready),
                replica("b", ReplicaPhase::Starting),
            ],
        );
        assert_eq!(
            RevisionReconciler::default()
                .reconcile_name(&ctx, "default", "hello-00001")
                .unwrap(),
            Action::Done
        );
        assert_eq!(ready_of(&ctx), (True, String::new()));
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        let st = rev.status.unwrap();
        assert_eq!(
            (st.actual_replicas, st.desired_replicas),
            (Some(1), Some(2))
        );
        assert!(conditions::is_true(&st.status, "Active"));

        // Nothing changed: no write.
        let rv = ctx.store.current_revision();
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        assert_eq!(ctx.store.current_revision(), rv);

        platform.set_replicas(
            &key,
            vec![
                crashed_replica("a", 1, "boom"),
                crashed_replica("b", 1, "boom"),
            ],
        );
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        assert_eq!(ready_of(&ctx), (False, "ExitCode1".into()));
    }

    #[test]
    fn kpa_decision_sets_the_replicas() {
        // initial-scale 0 counts only where the cluster allows it (Knative's
        // `GetInitialScale`), as the KPA reads it.
        let mut config = wisp_api::config::Config::default();
        config.autoscaler.allow_zero_initial_scale = true;
        let (ctx, platform) = testing::test_context_with(config, testing::test_clock);
        let mut rev = testing::revision("default", "zero-00001", "zero", 1);
        rev.metadata
            .annotations
            .insert("autoscaling.knative.dev/initial-scale".into(), "0".into());
        testing::insert(&ctx, &rev);
        let key = RevisionKey::new("default", "zero-00001");
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "zero-00001")
            .unwrap();
        assert_eq!(platform.scale_of(&key), Some(0));

        let kpa = |replicas| crate::autoscaling::RevisionScale {
            replicas,
            want: replicas as i32,
            mode: crate::autoscaling::RoutingMode::Proxy,
            excess_burst_capacity: -1,
            num_activators: 2,
        };
        ctx.scaling.publish(&key, kpa(3));
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "zero-00001")
            .unwrap();
        assert_eq!(platform.scale_of(&key), Some(3));
        ctx.scaling.publish(&key, kpa(0));
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "zero-00001")
            .unwrap();
        assert_eq!(platform.scale_of(&key), Some(0));

        // Reserve revisions are unreachable: zero at once, whatever the KPA says.
        ctx.scaling.publish(&key, kpa(2));
        let mut rev: Revision = testing::fetch(&ctx, "default", "zero-00001");
        rev.metadata.labels.insert(
            crate::names::label::ROUTING_STATE.into(),
            crate::names::routing_state::RESERVE.into(),
        );
        objects::update(&ctx.store, &rev).unwrap();
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "zero-00001")
            .unwrap();
        assert_eq!(platform.scale_of(&key), Some(0));
    }

    #[test]
    fn deleted_revision_is_removed_from_the_platform() {
        let (ctx, platform, key) = setup();
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        objects::delete::<Revision>(&ctx.store, "default", "hello-00001", None).unwrap();
        platform.take_calls();
        assert_eq!(
            RevisionReconciler::default()
                .reconcile_name(&ctx, "default", "hello-00001")
                .unwrap(),
            Action::Done
        );
        assert_eq!(platform.calls(), [PlatformCall::Remove(key.clone())]);
        assert_eq!(platform.scale_of(&key), None);
    }

    #[test]
    fn progress_deadline_fires_without_events() {
        fn two_hours_later() -> chrono::DateTime<chrono::Utc> {
            testing::test_clock() + chrono::Duration::hours(2)
        }
        let (mut ctx, _platform, _) = setup();
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        ctx.clock = two_hours_later;
        assert_eq!(
            RevisionReconciler::default()
                .reconcile_name(&ctx, "default", "hello-00001")
                .unwrap(),
            Action::Done
        );
        assert_eq!(
            ready_of(&ctx),
            (
                wisp_api::meta::ConditionStatus::False,
                "ProgressDeadlineExceeded".into()
            )
        );
    }

    /// A registry that knows one tag.
    struct OneTag;

    impl digest::DigestResolver for OneTag {
        fn resolve<'a>(
            &'a self,
            image: &'a str,
            _: &'a digest::ResolveOptions,
        ) -> digest::BoxFuture<'a, Result<String, String>> {
            Box::pin(async move {
                match image {
                    "img" => Ok("index.docker.io/library/img@sha256:abc".to_string()),
                    other => Err(format!("{other}: MANIFEST_UNKNOWN: manifest unknown")),
                }
            })
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    fn with_resolver(ctx: &mut Context) -> std::sync::Arc<digest::BackgroundResolver> {
        let r = std::sync::Arc::new(digest::BackgroundResolver::new(
            std::sync::Arc::new(OneTag),
            std::sync::Arc::new(|_: &RevisionKey| {}),
        ));
        ctx.digests = Some(r.clone());
        r
    }

    #[tokio::test]
    async fn images_are_pinned_to_their_digests_before_anything_runs() {
        use wisp_api::meta::ConditionStatus::Unknown;
        let (mut ctx, platform, key) = setup();
        with_resolver(&mut ctx);
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        // Resolving: nothing asked of the platform yet.
        assert_eq!(platform.scale_of(&key), None);
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        let c = rev
            .status
            .as_ref()
            .unwrap()
            .status
            .condition(resources::RESOURCES_AVAILABLE)
            .unwrap();
        assert_eq!((c.status, c.reason.as_str()), (Unknown, "ResolvingDigests"));

        settle().await;
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        let statuses = &rev.status.as_ref().unwrap().container_statuses;
        assert_eq!(statuses.len(), 1);
        assert_eq!(
            statuses[0].image_digest,
            "index.docker.io/library/img@sha256:abc"
        );
        // The platform runs the digest, not the tag.
        let spec = platform.spec_of(&key).unwrap();
        assert_eq!(
            spec.pod.containers[0].image,
            "index.docker.io/library/img@sha256:abc"
        );
        assert_eq!(
            rev.spec.pod.containers[0].image, "img",
            "the spec is untouched"
        );
    }

    #[tokio::test]
    async fn a_revision_of_commands_resolves_nothing_and_its_first_status_waits() {
        let (mut ctx, platform, key) = setup();
        let mut rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        rev.spec.pod.containers[0].image = String::new();
        rev.spec.pod.containers[0].command = vec!["/bin/app".into()];
        objects::update(&ctx.store, &rev).unwrap();
        with_resolver(&mut ctx);
        let rv = ctx.store.current_revision();
        let action = RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        assert_eq!(action, Action::RequeueAfter(resources::FIRST_STATUS_HOLD));
        // Scaled, and nothing written: not even the (empty) container statuses.
        assert_eq!(platform.scale_of(&key), Some(2));
        assert_eq!(ctx.store.current_revision(), rv);
        // Its replica ready (no PodAutoscaler in this test), Ready is its first status.
        platform.set_replicas(&key, vec![replica("a", ReplicaPhase::Ready)]);
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        assert_eq!(ready_of(&ctx).0, wisp_api::meta::ConditionStatus::True);
    }

    #[tokio::test]
    async fn an_unresolvable_image_is_container_missing_and_retried() {
        use wisp_api::meta::ConditionStatus::False;
        let (mut ctx, platform, key) = setup();
        let mut rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        rev.spec.pod.containers[0].image = "nope:1".into();
        objects::update(&ctx.store, &rev).unwrap();
        with_resolver(&mut ctx);
        RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap();
        settle().await;
        let err = RevisionReconciler::default()
            .reconcile_name(&ctx, "default", "hello-00001")
            .unwrap_err();
        let want = "Unable to fetch image \"nope:1\": failed to resolve image to digest: \
                    nope:1: MANIFEST_UNKNOWN: manifest unknown";
        assert_eq!(err.to_string(), want);
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        let st = &rev.status.as_ref().unwrap().status;
        let c = st.condition(resources::CONTAINER_HEALTHY).unwrap();
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (False, "ContainerMissing", want)
        );
        assert_eq!(ready_of(&ctx), (False, "ContainerMissing".into()));
        assert_eq!(platform.scale_of(&key), None);
        // The failure was forgotten: the queue's retry asks the registry again.
        assert_eq!(
            RevisionReconciler::default()
                .reconcile_name(&ctx, "default", "hello-00001")
                .unwrap(),
            Action::Done
        );
    }
}
