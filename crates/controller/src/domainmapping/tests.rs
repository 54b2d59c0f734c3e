//! DomainMapping reconciler against an in-memory store and routing table.

use serde_json::json;
use wisp_api::{
    config::Config,
    domainmapping::{ClusterDomainClaim, DomainMapping, condition},
    kinds,
    meta::{ConditionStatus, READY},
    routing::Visibility,
    serving::{Addressable, Service, ServiceStatus},
};

use super::{DomainMappingIndex, DomainMappingReconciler};
use crate::{
    objects,
    reconciler::{Context, Observer, Reconciler},
    testing::{self, OwnedEvent, ReconcilerExt, test_clock},
};

fn autocreate() -> Context {
    let mut cfg = Config::default();
    cfg.network.autocreate_cluster_domain_claims = true;
    testing::test_context_with(cfg, test_clock).0
}

fn mapping(ns: &str, name: &str, target: &str) -> DomainMapping {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": target, "namespace": ns}},
    }))
    .unwrap()
}

fn addressed_service(ctx: &Context, ns: &str, name: &str) {
    let svc = testing::insert(ctx, &testing::service(ns, name, "img"));
    let mut s: Service = svc;
    s.status = Some(ServiceStatus {
        address: Some(Addressable {
            url: format!("http://{name}.{ns}.svc.cluster.local"),
        }),
        ..Default::default()
    });
    objects::update_status(&ctx.store, &s).unwrap();
}

fn reconcile(ctx: &Context, ns: &str, name: &str) {
    DomainMappingReconciler::default()
        .reconcile_name(ctx, ns, name)
        .unwrap();
}

fn cond(ctx: &Context, ns: &str, name: &str, ty: &str) -> (ConditionStatus, String, String) {
    let dm: DomainMapping = testing::fetch(ctx, ns, name);
    let c = dm.status.unwrap().status.condition(ty).cloned().unwrap();
    (c.status, c.reason, c.message)
}

#[test]
fn maps_claims_and_releases() {
    let ctx = autocreate();
    addressed_service(&ctx, "ns1", "hello");
    testing::insert(&ctx, &mapping("ns1", "www.example.org", "hello"));
    reconcile(&ctx, "ns1", "www.example.org");

    let dm: DomainMapping = testing::fetch(&ctx, "ns1", "www.example.org");
    let st = dm.status.unwrap();
    assert_eq!(st.url, "http://www.example.org");
    assert_eq!(st.address.unwrap().url, "http://www.example.org");
    for ty in [
        READY,
        condition::DOMAIN_CLAIMED,
        condition::REFERENCE_RESOLVED,
        condition::INGRESS_READY,
    ] {
        assert_eq!(
            st.status.condition(ty).unwrap().status,
            ConditionStatus::True,
            "{ty}"
        );
    }
    let c = st
        .status
        .condition(condition::CERTIFICATE_PROVISIONED)
        .unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        ("TLSNotEnabled", "external-domain-tls is not enabled")
    );
    let claim: ClusterDomainClaim = testing::fetch(&ctx, "", "www.example.org");
    assert_eq!(claim.spec.namespace, "ns1");
    let table = ctx.routing.load();
    let e = &table.hosts["www.example.org"];
    assert_eq!(e.visibility, Visibility::External);
    assert_eq!(
        e.rewrite_host.as_deref(),
        Some("hello.ns1.svc.cluster.local")
    );

    // Another namespace asks for the same domain: refused in status, not routed.
    addressed_service(&ctx, "ns2", "other");
    testing::insert(&ctx, &mapping("ns2", "www.example.org", "other"));
    reconcile(&ctx, "ns2", "www.example.org");
    assert_eq!(
        cond(&ctx, "ns2", "www.example.org", condition::DOMAIN_CLAIMED),
        (
            ConditionStatus::False,
            "DomainAlreadyClaimed".into(),
            "The domain name is already in use by another DomainMapping".into()
        )
    );
    assert_eq!(
        cond(&ctx, "ns2", "www.example.org", READY).1,
        "DomainAlreadyClaimed"
    );
    assert_eq!(ctx.routing.load().hosts["www.example.org"].namespace, "ns1");

    // The first mapping goes: its routing and its claim with it; the second then gets both.
    objects::delete::<DomainMapping>(&ctx.store, "ns1", "www.example.org", None).unwrap();
    reconcile(&ctx, "ns1", "www.example.org");
    assert!(ctx.routing.load().hosts.is_empty());
    assert!(ctx.views.ingresses.get("ns1", "www.example.org").is_none());
    assert!(
        objects::get::<ClusterDomainClaim>(&ctx.store, "", "www.example.org")
            .unwrap()
            .is_none()
    );
    reconcile(&ctx, "ns2", "www.example.org");
    assert_eq!(
        cond(&ctx, "ns2", "www.example.org", READY).0,
        ConditionStatus::True
    );
    assert_eq!(
        ctx.routing.load().hosts["www.example.org"]
            .rewrite_host
            .as_deref(),
        Some("other.ns2.svc.cluster.local")
    );
}

#[test]
fn without_autocreate_a_claim_must_exist() {
    let (ctx, _) = testing::test_context();
    addressed_service(&ctx, "ns1", "hello");
    testing::insert(&ctx, &mapping("ns1", "www.example.org", "hello"));
    reconcile(&ctx, "ns1", "www.example.org");
    assert_eq!(
        cond(&ctx, "ns1", "www.example.org", condition::DOMAIN_CLAIMED).1,
        "DomainAlreadyClaimed"
    );
    assert!(ctx.routing.load().hosts.is_empty());

    let claim: ClusterDomainClaim = serde_json::from_value(json!({
        "metadata": {"name": "www.example.org"}, "spec": {"namespace": "ns1"},
    }))
    .unwrap();
    testing::insert(&ctx, &claim);
    reconcile(&ctx, "ns1", "www.example.org");
    assert_eq!(
        cond(&ctx, "ns1", "www.example.org", READY).0,
        ConditionStatus::True
    );
    // Without autocreate the claim is the user's: deleting the mapping keeps it.
    objects::delete::<DomainMapping>(&ctx.store, "ns1", "www.example.org", None).unwrap();
    reconcile(&ctx, "ns1", "www.example.org");
    assert!(ctx.routing.load().hosts.is_empty());
    testing::fetch::<ClusterDomainClaim>(&ctx, "", "www.example.org");
}

#[test]
fn an_unresolved_ref_says_why() {
    let ctx = autocreate();
    testing::insert(&ctx, &mapping("ns1", "www.example.org", "hello"));
    reconcile(&ctx, "ns1", "www.example.org");
    assert_eq!(
        cond(
            &ctx,
            "ns1",
            "www.example.org",
            condition::REFERENCE_RESOLVED
        ),
        (
            ConditionStatus::False,
            "ResolveFailed".into(),
            "failed to get object ns1/hello: services.serving.knative.dev \"hello\" not found"
                .into()
        )
    );
    assert_eq!(
        cond(&ctx, "ns1", "www.example.org", condition::INGRESS_READY).1,
        "IngressNotConfigured"
    );
    // The service appears with its address: the mapping resolves.
    addressed_service(&ctx, "ns1", "hello");
    reconcile(&ctx, "ns1", "www.example.org");
    assert_eq!(
        cond(&ctx, "ns1", "www.example.org", READY).0,
        ConditionStatus::True
    );
}

#[test]
fn watches_claims_and_targets() {
    let index = std::sync::Arc::new(DomainMappingIndex::default());
    let r = DomainMappingReconciler::new(index.clone());
    let (ctx, _) = testing::test_context();
    let dm = serde_json::to_value(mapping("ns1", "www.example.org", "hello")).unwrap();
    let ev = OwnedEvent::new(&kinds::DOMAIN_MAPPING, dm);
    index.observe(&ev.event());

    let svc = serde_json::to_value(testing::service("ns1", "hello", "img")).unwrap();
    let keys = r.watches(&ctx, &OwnedEvent::new(&kinds::SERVICE, svc).event());
    assert_eq!(keys.len(), 1);
    assert_eq!(
        (keys[0].namespace.as_str(), keys[0].name.as_str()),
        ("ns1", "www.example.org")
    );
    let other = serde_json::to_value(testing::service("ns1", "other", "img")).unwrap();
    assert!(
        r.watches(&ctx, &OwnedEvent::new(&kinds::SERVICE, other).event())
            .is_empty()
    );

    let claim = json!({"metadata": {"name": "www.example.org"}, "spec": {"namespace": "x"}});
    let keys = r.watches(
        &ctx,
        &OwnedEvent::new(&kinds::CLUSTER_DOMAIN_CLAIM, claim).event(),
    );
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].kind, &kinds::DOMAIN_MAPPING);

    index.observe(&ev.deleted().event());
    let svc = serde_json::to_value(testing::service("ns1", "hello", "img")).unwrap();
    assert!(
        r.watches(&ctx, &OwnedEvent::new(&kinds::SERVICE, svc).event())
            .is_empty()
    );
}
