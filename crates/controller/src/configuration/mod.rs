//! The Configuration reconciler: stamps one immutable Revision per configuration
//! generation and reports `latestCreatedRevisionName`, `latestReadyRevisionName` and Ready
//! (Knative's `pkg/reconciler/configuration/configuration.go`). The decisions are pure functions in [`resources`]; this module
//! reads, creates and writes.

pub mod resources;

use wisp_api::serving::{Configuration, Revision};

use crate::{
    names::label,
    objects,
    reconciler::{Action, Context, ObjectRef, ReconcileError, Reconciler, TypedReconciler},
};
use resources::LatestCreated;

/// Reconciles `configurations.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct ConfigurationReconciler;

/// Gone: nothing to do, the store already deleted its revisions (they are owned).
impl TypedReconciler for ConfigurationReconciler {
    type Object = Configuration;

    fn reconcile_kind(
        &self,
        ctx: &Context,
        cfg: &mut Configuration,
    ) -> Result<Action, ReconcileError> {
        let (namespace, name) = (&cfg.metadata.namespace, &cfg.metadata.name);
        let now = (ctx.clock)();

        let rev_name = resources::revision_name(cfg);
        let mut create_error = None;
        let latest: Result<Revision, String> = match objects::get::<Revision>(
            &ctx.store, namespace, &rev_name,
        )? {
            Some(rev) => resources::check_existing(cfg, &rev).map(|()| rev),
            None => match objects::create(&ctx.store, &resources::make_revision(cfg, now)) {
                Ok(rev) => {
                    tracing::info!(configuration = %format!("{namespace}/{name}"), revision = %rev_name, "created revision");
                    // Its event need not queue this configuration again (`OwnWrites`).
                    ctx.own_writes.wrote(
                        &wisp_api::kinds::REVISION,
                        &rev.metadata,
                        Reconciler::id(self),
                        ObjectRef::new(&wisp_api::kinds::CONFIGURATION, namespace, name),
                    );
                    ctx.event(
                        &wisp_api::kinds::CONFIGURATION,
                        &cfg.metadata,
                        wisp_views::events::EventType::Normal,
                        "Created",
                        format!("Created Revision {rev_name:?}"),
                    );
                    Ok(rev)
                }
                Err(ReconcileError::Store(e)) if is_already_exists(&e) => {
                    Err(resources::already_exists(&rev_name))
                }
                Err(e) => {
                    // Report it in status (as Knative does), then retry.
                    let msg = e.to_string();
                    ctx.event(
                        &wisp_api::kinds::CONFIGURATION,
                        &cfg.metadata,
                        wisp_views::events::EventType::Warning,
                        "CreationFailed",
                        format!("Failed to create Revision {rev_name:?}: {msg}"),
                    );
                    create_error = Some(e);
                    Err(msg)
                }
            },
        };

        // A new configuration's first status waits for its revision's first (which
        // re-queues it through the owner reference): one status write instead of an
        // "in progress" one replaced a moment later. The labeler meanwhile takes the
        // revision this generation creates as the latest created one.
        if cfg.status.is_none() && latest.as_ref().is_ok_and(|rev| rev.status.is_none()) {
            return Ok(Action::Done);
        }
        let revisions: Vec<Revision> =
            objects::list_labelled::<Revision>(&ctx.store, namespace, label::CONFIGURATION, name)?
                .into_iter()
                .filter(|r| objects::is_controlled_by(&r.metadata, &cfg.metadata.uid))
                .collect();
        let outcome = match &latest {
            Ok(rev) => LatestCreated::Revision(rev),
            Err(msg) => LatestCreated::CreationFailed(msg),
        };
        // Written even when the creation failed: the status says why (as Knative does).
        cfg.status = Some(resources::compute_status(cfg, outcome, &revisions, now));
        match create_error {
            Some(e) => Err(e),
            None => Ok(Action::Done),
        }
    }
}

fn is_already_exists(e: &wisp_store::StoreError) -> bool {
    matches!(e, wisp_store::StoreError::AlreadyExists { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ReconcilerExt;
    use crate::testing::{self, set_revision_ready};
    use wisp_api::meta::ConditionStatus;

    fn reconcile(ctx: &Context, name: &str) {
        assert_eq!(
            ConfigurationReconciler
                .reconcile_name(ctx, "default", name)
                .unwrap(),
            Action::Done
        );
    }

    fn revision_names(ctx: &Context) -> Vec<String> {
        objects::list::<Revision>(&ctx.store, None, None)
            .unwrap()
            .into_iter()
            .map(|r| r.metadata.name)
            .collect()
    }

    #[test]
    fn creates_one_revision_per_generation_idempotently() {
        let (ctx, _) = testing::test_context();
        testing::insert(&ctx, &testing::configuration("default", "hello", "img:1"));
        reconcile(&ctx, "hello");
        assert_eq!(revision_names(&ctx), ["hello-00001"]);
        // Its first status waits for the revision's first (which re-queues it).
        let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
        assert_eq!(cfg.status, None, "no status before the revision has one");
        let rv = ctx.store.current_revision();
        reconcile(&ctx, "hello");
        assert_eq!(ctx.store.current_revision(), rv, "still nothing to write");
        let mut rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        set_revision_ready(&mut rev, ConditionStatus::Unknown, "Deploying", "");
        objects::update_status(&ctx.store, &rev).unwrap();
        reconcile(&ctx, "hello");
        let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
        let st = cfg.status.as_ref().unwrap();
        assert_eq!(st.latest_created_revision_name, "hello-00001");
        assert_eq!(st.latest_ready_revision_name, "");
        assert_eq!(
            st.status.condition("Ready").unwrap().status,
            ConditionStatus::Unknown
        );
        assert_eq!(st.status.observed_generation, 1);

        // Re-running changes nothing: no new revision, no write at all.
        let rv = ctx.store.current_revision();
        reconcile(&ctx, "hello");
        assert_eq!(ctx.store.current_revision(), rv);

        // A template change bumps the generation and stamps 00002, once.
        let mut cfg: Configuration = testing::fetch(&ctx, "default", "hello");
        cfg.spec.template.spec.pod.containers[0].image = "img:2".into();
        objects::update(&ctx.store, &cfg).unwrap();
        reconcile(&ctx, "hello");
        reconcile(&ctx, "hello");
        assert_eq!(revision_names(&ctx), ["hello-00001", "hello-00002"]);
        // Once it has a status, a new revision is reported at once.
        let rev: Revision = testing::fetch(&ctx, "default", "hello-00002");
        assert_eq!(rev.spec.pod.containers[0].image, "img:2");
        assert_eq!(rev.metadata.labels[label::CONFIGURATION_GENERATION], "2");
        let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
        assert_eq!(
            cfg.status.unwrap().latest_created_revision_name,
            "hello-00002"
        );
    }

    #[test]
    fn follows_revision_readiness() {
        let (ctx, _) = testing::test_context();
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        reconcile(&ctx, "hello");
        let mut rev: Revision = testing::fetch(&ctx, "default", "hello-00001");
        set_revision_ready(&mut rev, ConditionStatus::True, "", "");
        objects::update_status(&ctx.store, &rev).unwrap();
        reconcile(&ctx, "hello");
        let st = testing::fetch::<Configuration>(&ctx, "default", "hello")
            .status
            .unwrap();
        assert_eq!(st.latest_ready_revision_name, "hello-00001");
        assert_eq!(
            st.status.condition("Ready").unwrap().status,
            ConditionStatus::True
        );
    }

    #[test]
    fn byo_name_taken_by_someone_else_fails() {
        let (ctx, _) = testing::test_context();
        testing::insert(&ctx, &testing::revision("default", "hello-byo", "other", 1));
        let mut cfg = testing::configuration("default", "hello", "img");
        cfg.spec.template.metadata.name = "hello-byo".into();
        testing::insert(&ctx, &cfg);
        reconcile(&ctx, "hello");
        let st = testing::fetch::<Configuration>(&ctx, "default", "hello")
            .status
            .unwrap();
        let ready = st.status.condition("Ready").unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "RevisionFailed");
        assert_eq!(
            ready.message,
            "Revision creation failed with message: revisions.serving.knative.dev \"hello-byo\" already exists."
        );
        assert_eq!(st.latest_created_revision_name, "");
    }

    #[test]
    fn byo_name_is_used() {
        let (ctx, _) = testing::test_context();
        let mut cfg = testing::configuration("default", "hello", "img");
        cfg.spec.template.metadata.name = "hello-first".into();
        testing::insert(&ctx, &cfg);
        reconcile(&ctx, "hello");
        reconcile(&ctx, "hello");
        assert_eq!(revision_names(&ctx), ["hello-first"]);
    }

    #[test]
    fn missing_configuration_is_done() {
        let (ctx, _) = testing::test_context();
        reconcile(&ctx, "nope");
    }
}
