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

use std::{collections::BTreeMap, sync::Arc};

use wisp_api::{
    kinds,
    serving::{Configuration, Revision, Route},
};

use crate::{
    names::annotation,
    objects::{self, Resource},
    reconciler::{Action, Context, Event, ObjectRef, ReconcileError, TypedReconciler},
    route::RouteIndex,
};

/// How long a route's events wait to be one labeling ([`TypedReconciler::settle`]).
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Reconciles `routes.serving.knative.dev` into routing metadata.
#[derive(Debug, Default)]
pub struct LabelerReconciler {
    /// Routes by what they reference, for [`TypedReconciler::watches`]; shared with the
    /// route reconciler and fed as an [`Observer`](crate::Observer) (see
    /// [`crate::all_reconcilers`]).
    index: Arc<RouteIndex>,
}

impl LabelerReconciler {
    pub fn new(index: Arc<RouteIndex>) -> Self {
        LabelerReconciler { index }
    }
}

impl TypedReconciler for LabelerReconciler {
    type Object = Route;

    /// Routing metadata is for GC and for the next cold start, neither of which waits on
    /// it: a route's events of a moment (its creation, its status, its configuration's and
    /// revision's) make one labeling.
    fn settle(&self) -> Option<std::time::Duration> {
        Some(SETTLE)
    }

    fn reconcile_kind(&self, ctx: &Context, route: &mut Route) -> Result<Action, ReconcileError> {
        label(
            ctx,
            &route.metadata.namespace,
            &route.metadata.name,
            Some(&*route),
        )
    }

    /// A deleted route is removed from every object that still names it.
    fn gone(&self, ctx: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
        label(ctx, &key.namespace, &key.name, None)
    }

    /// Routes to re-label when a Configuration or Revision changes: those whose spec
    /// references it (a new latest created revision, a revision that now exists), and
    /// those it says reference it (so hand edits of the annotation are repaired).
    fn watches(&self, _ctx: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
        let mut keys = self.index.routes_referencing(event);
        if let Some(list) = event.meta.annotations.get(annotation::ROUTES) {
            for r in list.split(',').map(str::trim).filter(|r| !r.is_empty()) {
                keys.push(event.sibling(&kinds::ROUTE, r));
            }
        }
        keys.sort_by(|a, b| a.name.cmp(&b.name));
        keys.dedup();
        keys
    }
}

/// Brings the routing metadata of `namespace` in line with the route `name` (`None`: gone).
/// Reads only what concerns this route: the objects its traffic names (by name) and the
/// ones whose routes annotation names it (found by the store), never the whole namespace.
fn label(
    ctx: &Context,
    namespace: &str,
    name: &str,
    route: Option<&Route>,
) -> Result<Action, ReconcileError> {
    let mut found = Found::default();
    if let Some(route) = route {
        found.fetch_referenced(ctx, route)?;
    }
    let (mut configurations, mut revisions) = found.into_existing();
    let refs = route.map_or_else(resources::References::default, |route| {
        resources::references(route, &configurations, &revisions)
    });
    // Everything that names the route now, referenced or not (so stale names go).
    for rev in objects::list_by_annotation_item::<Revision>(
        &ctx.store,
        namespace,
        annotation::ROUTES,
        name,
    )? {
        revisions.insert(rev.metadata.name.clone(), rev);
    }
    for cfg in objects::list_by_annotation_item::<Configuration>(
        &ctx.store,
        namespace,
        annotation::ROUTES,
        name,
    )? {
        configurations.insert(cfg.metadata.name.clone(), cfg);
    }

    let now = (ctx.clock)();
    for rev in revisions.values() {
        let wanted = refs.revisions.contains(&rev.metadata.name);
        if (wanted || resources::routes(&rev.metadata).contains(name))
            && let Some(patched) = resources::revision_patch(rev, name, wanted, now)
        {
            objects::update(&ctx.store, &patched)?;
        }
    }
    for cfg in configurations.values() {
        let wanted = refs.configurations.contains(&cfg.metadata.name);
        if let Some(patched) = resources::configuration_patch(cfg, name, wanted) {
            objects::update(&ctx.store, &patched)?;
        }
    }
    Ok(Action::Done)
}

/// Objects of one namespace read by name, remembering the ones that do not exist.
#[derive(Default)]
struct Found {
    configurations: BTreeMap<String, Option<Configuration>>,
    revisions: BTreeMap<String, Option<Revision>>,
}

impl Found {
    /// Reads every object [`resources::references`] can look at for `route`: the revisions
    /// its status and spec traffic name, their configurations (owner or label), the named
    /// configurations, and those configurations' latest created revisions. Given these, it
    /// answers exactly as it would with the whole namespace.
    fn fetch_referenced(&mut self, ctx: &Context, route: &Route) -> Result<(), ReconcileError> {
        let ns = &route.metadata.namespace;
        let status = route.status.iter().flat_map(|s| &s.traffic);
        for tt in status.chain(&route.spec.traffic) {
            let mut cfg_name = tt.configuration_name.clone();
            if !tt.revision_name.is_empty() {
                let Some(rev) = fetch(ctx, ns, &tt.revision_name, &mut self.revisions)? else {
                    continue;
                };
                if let Some(owner) = resources::owning_configuration(&rev.metadata) {
                    cfg_name = owner.to_owned();
                }
            }
            let Some(cfg) = fetch(ctx, ns, &cfg_name, &mut self.configurations)? else {
                continue;
            };
            let latest = resources::latest_created(&cfg);
            if tt.latest_revision == Some(true) {
                fetch(ctx, ns, &latest, &mut self.revisions)?;
            }
        }
        Ok(())
    }

    fn into_existing(self) -> (BTreeMap<String, Configuration>, BTreeMap<String, Revision>) {
        (flatten(self.configurations), flatten(self.revisions))
    }
}

/// `name` from the store, read at most once per reconcile (an empty name is never there).
fn fetch<T: Resource + Clone>(
    ctx: &Context,
    ns: &str,
    name: &str,
    seen: &mut BTreeMap<String, Option<T>>,
) -> Result<Option<T>, ReconcileError> {
    if name.is_empty() {
        return Ok(None);
    }
    if let Some(known) = seen.get(name) {
        return Ok(known.clone());
    }
    let obj = objects::get::<T>(&ctx.store, ns, name)?;
    seen.insert(name.to_owned(), obj.clone());
    Ok(obj)
}

fn flatten<T>(m: BTreeMap<String, Option<T>>) -> BTreeMap<String, T> {
    m.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
}

#[cfg(test)]
mod tests;
