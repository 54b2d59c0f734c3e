//! The labeler (Knative `pkg/reconciler/labeler`), a second reconciler of Routes: records
//! on every Revision and Configuration which routes reference it
//! (`serving.knative.dev/routes`), and keeps each revision's `routingState` label
//! (`active` while referenced, `reserve` after) with its `routingStateModified` time, which
//! GC and scale-to-zero read.
//!
//! Writes: metadata (labels, annotations) of Revisions and Configurations in the route's
//! namespace, through the main resource with resourceVersion CAS. A deleted route is
//! removed from every object that still names it.

pub mod resources;

use std::collections::BTreeMap;

use wisp_api::{
    kinds::{self, ResourceKind},
    serving::{Configuration, Revision, Route},
};

use crate::{
    objects,
    reconciler::{Action, Context, ReconcileError, Reconciler},
};

/// Reconciles `routes.serving.knative.dev` into routing metadata.
#[derive(Debug, Default)]
pub struct LabelerReconciler;

impl Reconciler for LabelerReconciler {
    fn kind(&self) -> &'static ResourceKind {
        &kinds::ROUTE
    }

    fn reconcile(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let route = objects::get::<Route>(&ctx.store, namespace, name)?
            .filter(|r| r.metadata.deletion_timestamp.is_none());
        let configurations: Vec<Configuration> = objects::list(&ctx.store, Some(namespace), None)?;
        let revisions: Vec<Revision> = objects::list(&ctx.store, Some(namespace), None)?;
        let refs = match &route {
            None => resources::References::default(),
            Some(route) => {
                resources::references(route, &by_name(&configurations), &by_name(&revisions))
            }
        };
        let now = (ctx.clock)();
        for rev in &revisions {
            let wanted = refs.revisions.contains(&rev.metadata.name);
            if (wanted || resources::routes(&rev.metadata).contains(name))
                && let Some(patched) = resources::revision_patch(rev, name, wanted, now)
            {
                objects::update(&ctx.store, &patched)?;
            }
        }
        for cfg in &configurations {
            let wanted = refs.configurations.contains(&cfg.metadata.name);
            if let Some(patched) = resources::configuration_patch(cfg, name, wanted) {
                objects::update(&ctx.store, &patched)?;
            }
        }
        Ok(Action::Done)
    }

    /// Routes to re-label when a Configuration or Revision changes: those whose spec
    /// references it (a new latest created revision, a revision that now exists), and
    /// those it says reference it (so hand edits of the annotation are repaired).
    fn watches(
        &self,
        ctx: &Context,
        event_kind: &ResourceKind,
        obj: &serde_json::Value,
    ) -> Vec<(String, String)> {
        let mut keys = crate::route::routes_referencing(ctx, event_kind, obj);
        let meta = &obj["metadata"];
        if let (Some(ns), Some(list)) = (
            meta["namespace"].as_str(),
            meta["annotations"][crate::names::annotation::ROUTES].as_str(),
        ) {
            for r in list.split(',').map(str::trim).filter(|r| !r.is_empty()) {
                keys.push((ns.to_owned(), r.to_owned()));
            }
        }
        keys.sort();
        keys.dedup();
        keys
    }
}

fn by_name<T: objects::Resource + Clone>(objs: &[T]) -> BTreeMap<String, T> {
    objs.iter()
        .map(|o| (o.meta().name.clone(), o.clone()))
        .collect()
}

#[cfg(test)]
mod tests;
