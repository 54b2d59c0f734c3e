//! The DomainMapping reconciler (knative/serving `pkg/reconciler/domainmapping`): claims the
//! domain (a ClusterDomainClaim, created when config-network
//! `autocreate-cluster-domain-claims` is true), resolves the ref to its cluster-local host,
//! and publishes the domain in the routing table with that host as its rewrite, in place of
//! Knative's KIngress (which the KIngress view shows, built by `resources::make_ingress`).
//!
//! When the claim belongs to another namespace the mapping's entry leaves the routing table
//! (a domain never routes into a namespace that does not own it); when the ref does not
//! resolve the last published entry stays, as Knative leaves the last KIngress in place.
//! When the mapping is gone its entry leaves the table and, with autocreate on, the claim
//! its namespace held is deleted (Knative's `FinalizeKind`).

pub mod resources;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use wisp_api::{
    annotations::networking::{external_domain_tls, http_redirected},
    domainmapping::{ClusterDomainClaim, DomainMapping, condition},
    kinds,
    meta::ConditionStatus,
    routing::domain_mapping_key,
    serving::{Route, Service},
};
use wisp_store::StoreError;

use self::resources::{CONDITIONS, Referent};
use crate::{
    objects,
    reconciler::{Action, Context, Event, ObjectRef, Observer, ReconcileError, TypedReconciler},
    routing::HostRoute,
};

/// Reconciles `domainmappings.serving.knative.dev`.
#[derive(Debug, Default)]
pub struct DomainMappingReconciler {
    index: Arc<DomainMappingIndex>,
}

impl DomainMappingReconciler {
    pub fn new(index: Arc<DomainMappingIndex>) -> Self {
        DomainMappingReconciler { index }
    }
}

impl TypedReconciler for DomainMappingReconciler {
    type Object = DomainMapping;

    fn reconcile_kind(
        &self,
        ctx: &Context,
        dm: &mut DomainMapping,
    ) -> Result<Action, ReconcileError> {
        let cfg = ctx.config.load();
        let now = (ctx.clock)();
        let (ns, name) = (dm.metadata.namespace.clone(), dm.metadata.name.clone());
        let mut st = dm.status.clone().unwrap_or_default();
        let s = &mut st.status;
        CONDITIONS.initialize(s, now);
        if dm.metadata.generation != s.observed_generation {
            let (reason, message) = resources::INGRESS_NOT_CONFIGURED;
            CONDITIONS.mark_unknown(s, condition::INGRESS_READY, reason, message, now);
        }
        s.observed_generation = dm.metadata.generation;
        // `tls()`: a mapping that names its certificate is served over HTTPS with it; with
        // external-domain-tls wisp's CA issues one (`MarkCertificateReady`).
        let auto_tls = external_domain_tls(&cfg, &dm.metadata.annotations);
        let https = dm.spec.tls.is_some() || auto_tls;
        let url = format!("{}://{name}", if https { "https" } else { "http" });
        st.url = url.clone();
        st.address = Some(wisp_api::serving::Addressable { url });
        let cert = if dm.spec.tls.is_some() {
            Some(resources::CERTIFICATE_EXTERNALLY_PROVIDED)
        } else if auto_tls {
            None
        } else {
            Some(resources::TLS_NOT_ENABLED)
        };
        match cert {
            Some((reason, message)) => CONDITIONS.mark(
                &mut st.status,
                condition::CERTIFICATE_PROVISIONED,
                ConditionStatus::True,
                reason,
                message,
                now,
            ),
            None => CONDITIONS.mark_true(&mut st.status, condition::CERTIFICATE_PROVISIONED, now),
        }

        // The claim (`reconcileDomainClaim`).
        let claim = objects::get::<ClusterDomainClaim>(&ctx.store, "", &name)?;
        let owned = match claim {
            Some(c) => c.spec.namespace == ns,
            None if cfg.network.autocreate_cluster_domain_claims => {
                match objects::create(&ctx.store, &resources::make_domain_claim(dm)) {
                    Ok(_) => true,
                    Err(e) => {
                        // Knative's reason for a failed create; an AlreadyExists (another
                        // namespace's mapping claimed it first) is retried and then finds
                        // the claim taken.
                        CONDITIONS.mark_false(
                            &mut st.status,
                            condition::DOMAIN_CLAIMED,
                            "DomainClaimFailed",
                            &format!("failed to create ClusterDomainClaim: {e}"),
                            now,
                        );
                        dm.status = Some(st);
                        return Err(e);
                    }
                }
            }
            None => false,
        };
        if !owned {
            let (reason, message) = resources::DOMAIN_ALREADY_CLAIMED;
            CONDITIONS.mark_false(
                &mut st.status,
                condition::DOMAIN_CLAIMED,
                reason,
                message,
                now,
            );
            dm.status = Some(st);
            publish(ctx, &ns, &name, &BTreeMap::new());
            ctx.views
                .ingresses
                .replace_set(&view_set(&ns, &name), Vec::new());
            return Ok(Action::Done);
        }
        CONDITIONS.mark_true(&mut st.status, condition::DOMAIN_CLAIMED, now);

        // The ref (`resolveRef`).
        let referent = referent(ctx, dm)?;
        match resources::resolve(dm, &referent, &cfg) {
            Err(msg) => {
                CONDITIONS.mark_false(
                    &mut st.status,
                    condition::REFERENCE_RESOLVED,
                    "ResolveFailed",
                    &msg,
                    now,
                );
            }
            Ok(target) => {
                CONDITIONS.mark_true(&mut st.status, condition::REFERENCE_RESOLVED, now);
                // `MakeIngress`'s `GetHTTPOption` fails the reconcile on a bad annotation.
                let redirect = http_redirected(&cfg, &dm.metadata.annotations)
                    .map_err(ReconcileError::Other)?;
                let first = ctx
                    .routing
                    .load()
                    .route_hosts(&ns, &domain_mapping_key(&name))
                    .next()
                    .is_none();
                publish(
                    ctx,
                    &ns,
                    &name,
                    &resources::host_route(dm, &target, https, redirect),
                );
                ctx.views.ingresses.replace_set(
                    &view_set(&ns, &name),
                    vec![resources::make_ingress(dm, &target, &cfg)],
                );
                if first {
                    ctx.event(
                        &kinds::DOMAIN_MAPPING,
                        &dm.metadata,
                        wisp_views::events::EventType::Normal,
                        "Created",
                        format!("Created Ingress {name:?}"),
                    );
                }
                // wisp's ingress serves what is published at once: the KIngress is ready.
                CONDITIONS.mark_true(&mut st.status, condition::INGRESS_READY, now);
            }
        }
        dm.status = Some(st);
        Ok(Action::Done)
    }

    fn gone(&self, ctx: &Context, key: &ObjectRef) -> Result<Action, ReconcileError> {
        publish(ctx, &key.namespace, &key.name, &BTreeMap::new());
        ctx.views
            .ingresses
            .replace_set(&view_set(&key.namespace, &key.name), Vec::new());
        if ctx.config.load().network.autocreate_cluster_domain_claims
            && let Some(claim) = objects::get::<ClusterDomainClaim>(&ctx.store, "", &key.name)?
            && claim.spec.namespace == key.namespace
        {
            objects::delete::<ClusterDomainClaim>(
                &ctx.store,
                "",
                &key.name,
                Some(&claim.metadata.uid),
            )?;
        }
        Ok(Action::Done)
    }

    /// Mappings to look at again: those whose ref names a changed Service or Route, and
    /// those named by a changed ClusterDomainClaim.
    fn watches(&self, _ctx: &Context, event: &Event<'_>) -> Vec<ObjectRef> {
        let kind = event.kind;
        if kind == &kinds::CLUSTER_DOMAIN_CLAIM {
            return self
                .index
                .named(&event.meta.name)
                .into_iter()
                .map(|ns| ObjectRef::new(&kinds::DOMAIN_MAPPING, ns, &event.meta.name))
                .collect();
        }
        if kind == &kinds::SERVICE || kind == &kinds::ROUTE {
            return self
                .index
                .referencing(&event.meta.namespace, kind.kind, &event.meta.name)
                .into_iter()
                .map(|name| event.sibling(&kinds::DOMAIN_MAPPING, &name))
                .collect();
        }
        Vec::new()
    }
}

/// What the mapping's ref names, read from the store.
fn referent(ctx: &Context, dm: &DomainMapping) -> Result<Referent, ReconcileError> {
    let r = &dm.spec.r#ref;
    let Some(kind) = resources::referenced_kind(r) else {
        return Ok(Referent::Unsupported);
    };
    let missing = || {
        Referent::Missing(
            StoreError::NotFound {
                resource: kind.store_key(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            }
            .to_string(),
        )
    };
    let address = |a: Option<&wisp_api::serving::Addressable>| a.map(|a| a.url.clone());
    Ok(if kind == &kinds::CORE_SERVICE {
        Referent::CoreService
    } else if kind == &kinds::SERVICE {
        match objects::get::<Service>(&ctx.store, &r.namespace, &r.name)? {
            None => missing(),
            Some(s) => Referent::Addressable(address(s.status.and_then(|s| s.address).as_ref())),
        }
    } else {
        match objects::get::<Route>(&ctx.store, &r.namespace, &r.name)? {
            None => missing(),
            Some(rt) => Referent::Addressable(address(rt.status.and_then(|s| s.address).as_ref())),
        }
    })
}

/// The mapping's set in the KIngress view (apart from the routes' sets).
fn view_set(ns: &str, name: &str) -> String {
    format!("domainmapping:{ns}/{name}")
}

/// Replaces the mapping's entry in the routing table (none: removed).
fn publish(ctx: &Context, namespace: &str, name: &str, entries: &BTreeMap<String, HostRoute>) {
    let key = domain_mapping_key(name);
    if ctx.routing.load().holds(namespace, &key, entries) {
        return;
    }
    ctx.routing
        .rcu(|old| Arc::new(old.replace_route(namespace, &key, entries)));
}

/// DomainMappings by namespace and name, with the (kind, name) their ref names: for
/// [`DomainMappingReconciler::watches`]. Fed by DomainMapping events.
#[derive(Debug, Default)]
pub struct DomainMappingIndex {
    by_namespace: Mutex<BTreeMap<String, Mappings>>,
}

/// A namespace's mappings: name → the (kind, name) of their ref.
type Mappings = BTreeMap<String, (String, String)>;

impl DomainMappingIndex {
    /// The namespaces holding a mapping of this name.
    fn named(&self, name: &str) -> Vec<String> {
        let map = wisp_sync::lock(&self.by_namespace);
        map.iter()
            .filter(|(_, dms)| dms.contains_key(name))
            .map(|(ns, _)| ns.clone())
            .collect()
    }

    /// The mappings of `ns` whose ref names `kind`/`name` (a Knative Service or Route).
    fn referencing(&self, ns: &str, kind: &str, name: &str) -> BTreeSet<String> {
        let map = wisp_sync::lock(&self.by_namespace);
        map.get(ns)
            .into_iter()
            .flatten()
            .filter(|(_, (k, n))| k == kind && n == name)
            .map(|(dm, _)| dm.clone())
            .collect()
    }
}

impl Observer for DomainMappingIndex {
    fn observe(&self, event: &Event<'_>) {
        if event.kind != &kinds::DOMAIN_MAPPING {
            return;
        }
        let mut map = wisp_sync::lock(&self.by_namespace);
        let ns = &event.meta.namespace;
        if event.deleted {
            if let Some(dms) = map.get_mut(ns) {
                dms.remove(&event.meta.name);
                if dms.is_empty() {
                    map.remove(ns);
                }
            }
            return;
        }
        let r = &event.object["spec"]["ref"];
        let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
        map.entry(ns.clone())
            .or_default()
            .insert(event.meta.name.clone(), (field("kind"), field("name")));
    }
}

#[cfg(test)]
mod tests;
