//! Revision garbage collection (Knative `pkg/reconciler/gc`), a second reconciler of
//! Configurations: deletes the revisions `config-gc` says are no longer worth keeping
//! (selection in [`resources`], after `pkg/reconciler/gc/gc.go`).
//!
//! Writes: deletes Revisions (the store cascades to whatever they own). Requeues itself for
//! the moment the next kept revision turns stale, since nothing else changes then; changes
//! of routing state reach it as revision events through their configuration label.

pub mod resources;

use std::time::Duration;

use wisp_api::serving::{Configuration, Revision};

use crate::{
    names::label,
    objects,
    reconciler::{Action, Context, ReconcileError, TypedReconciler},
};

/// Never wake up more often than this for a stale deadline (timestamps have second
/// precision, so an earlier wake-up could find nothing to do yet).
const MIN_REQUEUE: Duration = Duration::from_secs(1);

/// How long a configuration's events wait to be one collection ([`TypedReconciler::settle`]).
pub const SETTLE: Duration = Duration::from_secs(1);

/// Collects revisions of `configurations.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct GcReconciler;

/// Gone: nothing to do, its revisions went with it (owner references).
impl TypedReconciler for GcReconciler {
    type Object = Configuration;

    /// Collection keeps revisions for minutes to hours (`config-gc`); a configuration's
    /// events of a second (its revision created, statuses, labels) make one look.
    fn settle(&self) -> Option<Duration> {
        Some(SETTLE)
    }

    fn reconcile_kind(
        &self,
        ctx: &Context,
        cfg: &mut Configuration,
    ) -> Result<Action, ReconcileError> {
        let (namespace, name) = (&cfg.metadata.namespace, &cfg.metadata.name);
        let revisions: Vec<Revision> =
            objects::list_labelled(&ctx.store, namespace, label::CONFIGURATION, name)?;
        let (doomed, next) = resources::plan(cfg, &revisions, &ctx.config.load().gc, (ctx.clock)());
        for rev in revisions
            .iter()
            .filter(|r| doomed.contains(&r.metadata.name))
        {
            tracing::info!(namespace, revision = %rev.metadata.name, "garbage collecting revision");
            // The uid guards against deleting a revision re-created under the same name.
            match objects::delete::<Revision>(
                &ctx.store,
                namespace,
                &rev.metadata.name,
                Some(&rev.metadata.uid),
            ) {
                Err(ReconcileError::Store(e)) if e.is_not_found() => {}
                other => other?,
            }
        }
        Ok(next.map_or(Action::Done, |d| Action::RequeueAfter(d.max(MIN_REQUEUE))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ReconcilerExt;
    use crate::{
        names::{annotation, routing_state},
        testing,
    };
    use wisp_api::{config::Config, duration::GoDuration, serving::ConfigurationStatus};

    fn ctx_with(gc: wisp_api::config::GcConfig) -> Context {
        let config = Config {
            gc,
            ..Default::default()
        };
        testing::test_context_with(config, testing::test_clock).0
    }

    fn add(ctx: &Context, name: &str, state: &str, modified_hours_ago: i64) {
        let config = name.split('-').next().unwrap();
        let mut r = testing::revision("default", name, config, 1);
        r.metadata
            .labels
            .insert(label::ROUTING_STATE.into(), state.into());
        let t = testing::test_clock() - chrono::Duration::hours(modified_hours_ago);
        r.metadata.annotations.insert(
            annotation::ROUTING_STATE_MODIFIED.into(),
            crate::conditions::timestamp(t),
        );
        testing::insert(ctx, &r);
    }

    fn names(ctx: &Context) -> Vec<String> {
        let revs: Vec<Revision> = objects::list(&ctx.store, Some("default"), None).unwrap();
        revs.into_iter().map(|r| r.metadata.name).collect()
    }

    #[test]
    fn deletes_selected_revisions() {
        // Immediate collection.
        let ctx = ctx_with(wisp_api::config::GcConfig {
            retain_since_create_time: None,
            retain_since_last_active_time: None,
            min_non_active_revisions: Some(0),
            max_non_active_revisions: Some(0),
        });
        let mut cfg = testing::configuration("default", "hello", "img");
        cfg.status = Some(ConfigurationStatus {
            latest_ready_revision_name: "hello-00003".into(),
            ..Default::default()
        });
        testing::insert(&ctx, &cfg);
        add(&ctx, "hello-00001", routing_state::RESERVE, 3);
        add(&ctx, "hello-00002", routing_state::ACTIVE, 2);
        add(&ctx, "hello-00003", routing_state::RESERVE, 1);
        add(&ctx, "other-00001", routing_state::RESERVE, 1);
        // The status was dropped by create; set it as the configuration reconciler would.
        let mut stored: Configuration = testing::fetch(&ctx, "default", "hello");
        stored.status = cfg.status.clone();
        objects::update_status(&ctx.store, &stored).unwrap();

        assert_eq!(
            GcReconciler
                .reconcile_name(&ctx, "default", "hello")
                .unwrap(),
            Action::Done
        );
        assert_eq!(names(&ctx), ["hello-00002", "hello-00003", "other-00001"]);
        assert_eq!(
            GcReconciler
                .reconcile_name(&ctx, "default", "gone")
                .unwrap(),
            Action::Done
        );
    }

    #[test]
    fn requeues_for_the_next_stale_revision() {
        let ctx = ctx_with(wisp_api::config::GcConfig {
            retain_since_create_time: None,
            retain_since_last_active_time: Some(GoDuration::from_secs(15 * 3600)),
            min_non_active_revisions: Some(0),
            max_non_active_revisions: None,
        });
        testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
        add(&ctx, "hello-00001", routing_state::RESERVE, 20);
        add(&ctx, "hello-00002", routing_state::RESERVE, 14);
        let action = GcReconciler
            .reconcile_name(&ctx, "default", "hello")
            .unwrap();
        assert_eq!(names(&ctx), ["hello-00002"]);
        assert_eq!(action, Action::RequeueAfter(Duration::from_secs(3600)));
    }
}
