//! The Service reconciler (Knative `pkg/reconciler/service`): keeps a Configuration and a
//! Route of the Service's name in the desired shape and rolls their status up into the
//! Service's.
//!
//! Writes: creates/updates the Configuration and Route (spec, labels, annotations); the
//! Service's status. Never deletes: children go with the Service through the store's
//! cascading delete on their owner reference.

pub mod resources;

use wisp_api::{
    kinds::{self, ResourceKind},
    serving::{Revision, Service},
};

use self::resources::{Child, Observed};
use crate::{
    objects::{self, Resource},
    reconciler::{Action, Context, ReconcileError, Reconciler},
};

/// Reconciles `services.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct ServiceReconciler;

impl Reconciler for ServiceReconciler {
    fn kind(&self) -> &'static ResourceKind {
        &kinds::SERVICE
    }

    fn reconcile(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let Some(svc) = objects::get::<Service>(&ctx.store, namespace, name)? else {
            return Ok(Action::Done);
        };
        if svc.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let now = (ctx.clock)();

        let config = ensure_child(ctx, &svc, resources::configuration(&svc), |d, e| {
            resources::reconcile_configuration(d, e)
        })?;
        let mut name_taken = false;
        let mut route = None;
        if let Some(cfg) = &config {
            let byo = &cfg.spec.template.metadata.name;
            if !resources::must_wait_for_configuration(cfg) {
                if !byo.is_empty() {
                    let rev: Option<Revision> = objects::get(&ctx.store, namespace, byo)?;
                    name_taken = resources::revision_name_taken(cfg, rev.as_ref());
                }
                if !name_taken {
                    route = Some(ensure_child(ctx, &svc, resources::route(&svc), |d, e| {
                        resources::reconcile_route(d, e)
                    })?);
                }
            }
        }

        let seen = Observed {
            config: config.as_ref().map_or(Child::NotOwned, Child::Owned),
            revision_name_taken: name_taken,
            route: route
                .as_ref()
                .map(|r| r.as_ref().map_or(Child::NotOwned, Child::Owned)),
        };
        let status = resources::status(&svc, seen, now);
        if svc.status.as_ref() != Some(&status) {
            let mut updated = svc.clone();
            updated.status = Some(status);
            objects::update_status(&ctx.store, &updated)?;
        }
        Ok(Action::Done)
    }

    /// A child that is not ours carries no owner reference to us, yet its deletion must
    /// let us create ours: children have the Service's name, so any Configuration or
    /// Route event maps to the Service of the same name.
    fn watches(
        &self,
        _ctx: &Context,
        event_kind: &ResourceKind,
        obj: &serde_json::Value,
    ) -> Vec<(String, String)> {
        if *event_kind != kinds::CONFIGURATION && *event_kind != kinds::ROUTE {
            return Vec::new();
        }
        let meta = &obj["metadata"];
        let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
            return Vec::new();
        };
        // Queued whether or not the Service exists: a reconcile of a missing one is one
        // lookup, cheaper than looking it up here on every event.
        vec![(ns.to_owned(), name.to_owned())]
    }
}

/// Creates the child when missing, or brings an owned one back to `desired`. `Ok(None)`
/// when a child of that name exists under another controller (`NotOwned`).
fn ensure_child<T: Resource + Clone>(
    ctx: &Context,
    svc: &Service,
    desired: T,
    reconcile: impl Fn(&T, &T) -> Option<T>,
) -> Result<Option<T>, ReconcileError> {
    let meta = desired.meta();
    let existing: Option<T> = objects::get(&ctx.store, &meta.namespace, &meta.name)?;
    let Some(existing) = existing else {
        return objects::create(&ctx.store, &desired).map(Some);
    };
    if !objects::is_controlled_by(existing.meta(), &svc.metadata.uid) {
        return Ok(None);
    }
    match reconcile(&desired, &existing) {
        Some(fixed) => objects::update(&ctx.store, &fixed).map(Some),
        None => Ok(Some(existing)),
    }
}

#[cfg(test)]
mod tests;
