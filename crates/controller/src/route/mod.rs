//! The Route reconciler (Knative `pkg/reconciler/route`): resolves a Route's traffic to
//! revisions, names its hosts, and publishes them in the routing table the ingress reads
//! (`ctx.routing`), in place of Knative's KIngress and placeholder Services.
//!
//! Writes: the Route's status, and its entries in `ctx.routing` (removed when the Route is
//! gone). When some target cannot be routed the previously published entries stay, so a
//! bad update never takes a working route down (as Knative's `pkg/reconciler/route/route.go`
//! keeps the last good KIngress).
//!
//! A new latest revision takes traffic gradually when the route has a rollout duration
//! ([`rollout`]): the state is kept on the route's KIngress view, as Knative keeps it on the
//! KIngress, and the route is reconciled again at each step's time.
//!
//! Not yet: TLS certificates, per-tag visibility.

pub mod index;
pub mod resources;
pub mod rollout;
pub mod views;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use wisp_api::{
    annotations,
    serving::{Configuration, Revision, Route},
};

pub use self::index::RouteIndex;
use self::{resources::Outcome, rollout::Rollout};
use crate::{
    objects,
    reconciler::{Action, Context, Event, ObjectRef, ReconcileError, TypedReconciler},
    routing::HostRoute,
};

/// Reconciles `routes.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct RouteReconciler {
    /// Routes by what they reference, for [`TypedReconciler::watches`]; shared with the
    /// labeler and fed as an [`Observer`](crate::Observer) (see [`crate::all_reconcilers`]).
    index: Arc<RouteIndex>,
}

impl RouteReconciler {
    pub fn new(index: Arc<RouteIndex>) -> Self {
        RouteReconciler { index }
    }
}

impl TypedReconciler for RouteReconciler {
    type Object = Route;

    fn reconcile_kind(&self, ctx: &Context, route: &mut Route) -> Result<Action, ReconcileError> {
        let (namespace, name) = (&route.metadata.namespace, &route.metadata.name);
        let cfg = &ctx.config.load();
        let now = (ctx.clock)();
        let mut requeue = None;
        let outcome = match resources::hosts(route, resources::spec_tags(route), cfg) {
            Err(msg) => Outcome::BadHosts(msg),
            Ok(hosts) => {
                let (configurations, revisions) = referenced(ctx, route)?;
                // A new route's first status waits until what it references has a
                // status of its own (whose write re-queues it through the RouteIndex):
                // one status write instead of an "unresolved" one replaced a moment later.
                let unsettled = configurations.values().any(|c| c.status.is_none())
                    || revisions.values().any(|r| r.status.is_none());
                if route.status.is_none() && unsettled {
                    return Ok(Action::Done);
                }
                match resources::resolve(route, &configurations, &revisions) {
                    Err(e) => Outcome::Unresolved(hosts, e),
                    Ok(traffic) => {
                        // `reconcileRollout`: the Route's duration, else config-network's.
                        let mut duration = annotations::serving::rollout_duration_secs(
                            &route.metadata.annotations,
                        );
                        if duration == 0 {
                            duration = cfg.network.rollout_duration_seconds;
                        }
                        let now_ns = now.timestamp_nanos_opt().unwrap_or(0);
                        let prev = previous_rollout(ctx, namespace, name);
                        let (ro, next) = rollout::reconcile(&traffic, prev, duration, now_ns);
                        if next > now_ns {
                            requeue = Some(Duration::from_nanos((next - now_ns).unsigned_abs()));
                        }
                        let rolling = !ro.done();
                        let entries = resources::host_routes(route, &hosts, &traffic, &ro);
                        // Knative shows the rollout's split only while one is in flight.
                        let shown = if rolling {
                            rollout::status_targets(&traffic, &ro)
                        } else {
                            traffic
                        };
                        let traffic = resources::status_traffic(shown, &hosts, cfg);
                        publish(ctx, namespace, name, &entries);
                        {
                            let (route, hosts) = (route.clone(), hosts.clone());
                            let (entries, ro) = (entries.clone(), ro.clone());
                            ctx.after_commit(move |ctx| {
                                publish_views(ctx, &route, &hosts, &entries, &ro)
                            });
                        }
                        Outcome::Published(hosts, traffic, rolling)
                    }
                }
            }
        };
        route.status = Some(resources::status(route, &outcome, cfg, now));
        Ok(requeue.map_or(Action::Done, Action::RequeueAfter))
    }

    /// Its hosts leave the routing table.
    fn gone(&self, ctx: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
        publish(ctx, &key.namespace, &key.name, &BTreeMap::new());
        let set = format!("route:{}/{}", key.namespace, key.name);
        ctx.views.ingresses.replace_set(&set, Vec::new());
        ctx.views.services.replace_set(&set, Vec::new());
        Ok(Action::Done)
    }

    /// Routes to re-resolve when a Configuration or Revision changes: those whose spec
    /// traffic names it, or (for a revision) names its configuration. Answered from the
    /// [`RouteIndex`], which Route events keep current.
    fn watches(&self, _ctx: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
        self.index.routes_referencing(event)
    }
}

/// The rollout state the route's KIngress holds (`networking.knative.dev/rollout`), if
/// any and valid: none after a restart, as when Knative's KIngress is recreated.
fn previous_rollout(ctx: &Context, namespace: &str, name: &str) -> Option<Rollout> {
    let ingress = ctx.views.ingresses.get(namespace, name)?;
    let state = ingress["metadata"]["annotations"][annotations::networking::ROLLOUT].as_str()?;
    Rollout::parse(state)
}

/// Shows the route's KIngress (with its rollout state) and placeholder Services in the
/// views ([`views`]), and records Knative's `Created` events for the ones that are new.
fn publish_views(
    ctx: &Context,
    route: &Route,
    hosts: &resources::Hosts,
    entries: &BTreeMap<String, HostRoute>,
    ro: &Rollout,
) {
    use wisp_views::events::EventType::Normal;
    let (ns, name) = (&route.metadata.namespace, &route.metadata.name);
    // The set is the route's, apart from the revisions' Services in the same view.
    let set = format!("route:{ns}/{name}");
    let cfg = ctx.config.load();
    let tag_header = cfg.features.tag_header_based_routing == wisp_api::config::Flag::Enabled;
    let ingress = views::make_ingress(route, entries, &cfg, tag_header, ro);
    let services = views::make_services(route, hosts, &cfg);
    let new_services: Vec<String> = services
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .filter(|n| !ctx.views.services.contains(ns, n))
        .map(str::to_owned)
        .collect();
    let new_ingress = !ctx.views.ingresses.contains(ns, name);
    ctx.views.services.replace_set(&set, services);
    ctx.views.ingresses.replace_set(&set, vec![ingress]);
    let kind = &wisp_api::kinds::ROUTE;
    for s in new_services {
        ctx.event(
            kind,
            &route.metadata,
            Normal,
            "Created",
            format!("Created placeholder service {s:?}"),
        );
    }
    if new_ingress {
        ctx.event(
            kind,
            &route.metadata,
            Normal,
            "Created",
            format!("Created Ingress {name:?}"),
        );
    }
}

/// Objects of one namespace by name.
type ByName<T> = BTreeMap<String, T>;

/// The configurations and revisions the route's traffic can resolve to, by name: every
/// named configuration and revision, and each configuration's latest ready revision.
fn referenced(
    ctx: &Context,
    route: &Route,
) -> Result<(ByName<Configuration>, ByName<Revision>), ReconcileError> {
    let ns = &route.metadata.namespace;
    let mut configurations = BTreeMap::new();
    let mut revisions = BTreeMap::new();
    let want_revision =
        |name: &str, revisions: &mut BTreeMap<String, Revision>| -> Result<(), ReconcileError> {
            if !name.is_empty()
                && !revisions.contains_key(name)
                && let Some(rev) = objects::get::<Revision>(&ctx.store, ns, name)?
            {
                revisions.insert(name.to_owned(), rev);
            }
            Ok(())
        };
    for t in &route.spec.traffic {
        want_revision(&t.revision_name, &mut revisions)?;
        let c = &t.configuration_name;
        if !c.is_empty()
            && !configurations.contains_key(c)
            && let Some(cfg) = objects::get::<Configuration>(&ctx.store, ns, c)?
        {
            let latest = cfg
                .status
                .as_ref()
                .map(|s| s.latest_ready_revision_name.clone())
                .unwrap_or_default();
            want_revision(&latest, &mut revisions)?;
            configurations.insert(c.clone(), cfg);
        }
    }
    Ok((configurations, revisions))
}

/// Replaces the route's hosts in the routing table. `rcu` retries on a concurrent swap, so
/// two routes reconciled at once never lose each other's entries. Costs the same whatever
/// the number of routes (see [`RoutingTable`](crate::routing::RoutingTable)).
fn publish(ctx: &Context, namespace: &str, name: &str, entries: &BTreeMap<String, HostRoute>) {
    if ctx.routing.load().holds(namespace, name, entries) {
        return;
    }
    ctx.routing
        .rcu(|old| Arc::new(old.replace_route(namespace, name, entries)));
}

#[cfg(test)]
pub(crate) mod tests;
