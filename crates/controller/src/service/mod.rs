//! The Service reconciler (Knative `pkg/reconciler/service`): keeps a Configuration and a
//! Route of the Service's name in the desired shape and rolls their status up into the
//! Service's.
//!
//! Writes: creates/updates the Configuration and Route (spec, labels, annotations); the
//! Service's status. Never deletes: children go with the Service through the store's
//! cascading delete on their owner reference.

pub mod resources;

use wisp_api::{
    kinds,
    serving::{Revision, Service},
};

use self::resources::{Child, Observed};
use crate::{
    objects::{self, Resource},
    reconciler::{Action, Context, Event, ObjectRef, ReconcileError, Reconciler, TypedReconciler},
};

use wisp_views::events::EventType;

/// Reconciles `services.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct ServiceReconciler;

/// Gone: nothing to do, its children went with it (owner references).
impl TypedReconciler for ServiceReconciler {
    type Object = Service;

    fn reconcile_kind(&self, ctx: &Context, svc: &mut Service) -> Result<Action, ReconcileError> {
        let namespace = &svc.metadata.namespace;
        let now = (ctx.clock)();

        let config = ensure_child(
            ctx,
            self,
            svc,
            resources::configuration(svc),
            || resources::new_configuration(svc),
            resources::reconcile_configuration,
        )?;
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
                    let desired = resources::route(svc);
                    route = Some(ensure_child(
                        ctx,
                        self,
                        svc,
                        desired.clone(),
                        || desired,
                        resources::reconcile_route,
                    )?);
                }
            }
        }

        // A new Service's first status waits for its children's first: each child's
        // status write re-queues it (owner reference), so the "in progress" status it
        // would write now is replaced a moment later, and nobody needs it meanwhile.
        // One status write per object on the way to Ready, not three.
        let child_unsettled = config.as_ref().is_some_and(|c| c.status.is_none())
            || route
                .as_ref()
                .is_some_and(|r| r.as_ref().is_some_and(|r| r.status.is_none()));
        if svc.status.is_none() && child_unsettled {
            return Ok(Action::Done);
        }
        let seen = Observed {
            config: config.as_ref().map_or(Child::NotOwned, Child::Owned),
            revision_name_taken: name_taken,
            route: route
                .as_ref()
                .map(|r| r.as_ref().map_or(Child::NotOwned, Child::Owned)),
        };
        svc.status = Some(resources::status(svc, seen, now));
        Ok(Action::Done)
    }

    /// A child that is not ours carries no owner reference to us, yet its deletion must
    /// let us create ours: children have the Service's name, so any Configuration or
    /// Route event maps to the Service of the same name.
    fn watches(&self, _ctx: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
        if event.kind != &kinds::CONFIGURATION && event.kind != &kinds::ROUTE {
            return Vec::new();
        }
        // Queued whether or not the Service exists: a reconcile of a missing one is one
        // lookup, cheaper than looking it up here on every event.
        vec![event.object_ref().with_kind(&kinds::SERVICE)]
    }
}

/// Creates the child (as `new` makes it) when missing, or brings an owned one back to
/// `desired`. `Ok(None)` when a child of that name exists under another controller
/// (`NotOwned`).
fn ensure_child<T: Resource + Clone>(
    ctx: &Context,
    writer: &ServiceReconciler,
    svc: &Service,
    desired: T,
    new: impl FnOnce() -> T,
    reconcile: impl Fn(&T, &T) -> Option<T>,
) -> Result<Option<T>, ReconcileError> {
    let meta = desired.meta();
    let existing: Option<T> = objects::get(&ctx.store, &meta.namespace, &meta.name)?;
    let Some(existing) = existing else {
        // Knative's service reconciler records both outcomes (`Created`, `CreationFailed`).
        let what = format!("{} {:?}", T::kind().kind, meta.name);
        let created = objects::create(&ctx.store, &new());
        match &created {
            Ok(_) => ctx.event(
                &kinds::SERVICE,
                &svc.metadata,
                EventType::Normal,
                "Created",
                format!("Created {what}"),
            ),
            Err(e) => ctx.event(
                &kinds::SERVICE,
                &svc.metadata,
                EventType::Warning,
                "CreationFailed",
                format!("Failed to create {what}: {e}"),
            ),
        }
        return created.map(|c| Some(own_write(ctx, writer, svc, c)));
    };
    if !objects::is_controlled_by(existing.meta(), &svc.metadata.uid) {
        return Ok(None);
    }
    match reconcile(&desired, &existing) {
        Some(fixed) => {
            objects::update(&ctx.store, &fixed).map(|c| Some(own_write(ctx, writer, svc, c)))
        }
        None => Ok(Some(existing)),
    }
}

/// Records `child`, just written, as the Service reconciler's own write for `svc`: its
/// event need not queue `svc` again (see `OwnWrites`).
fn own_write<T: Resource>(ctx: &Context, writer: &ServiceReconciler, svc: &Service, child: T) -> T {
    let key = ObjectRef::new(&kinds::SERVICE, &svc.metadata.namespace, &svc.metadata.name);
    ctx.own_writes
        .wrote(T::kind(), child.meta(), Reconciler::id(writer), key);
    child
}

#[cfg(test)]
mod tests;
