//! Labeler against an in-memory store.

use crate::testing::ReconcilerExt;
use wisp_api::{
    kinds,
    serving::{Configuration, ConfigurationStatus, Revision, Route, RouteStatus, TrafficTarget},
};

use super::LabelerReconciler;
use crate::{
    names::{annotation, label},
    objects,
    reconciler::Context,
    testing,
};

fn setup() -> Context {
    let (ctx, _) = testing::test_context();
    let cfg = testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
    for n in 1..=3 {
        let mut rev = testing::revision("default", &format!("hello-0000{n}"), "hello", n);
        rev.metadata.owner_references.push(objects::owner_reference(
            &kinds::CONFIGURATION,
            &cfg.metadata,
        ));
        rev.metadata
            .labels
            .insert(label::ROUTING_STATE.into(), "pending".into());
        testing::insert(&ctx, &rev);
    }
    let mut cfg = cfg;
    cfg.status = Some(ConfigurationStatus {
        latest_created_revision_name: "hello-00003".into(),
        latest_ready_revision_name: "hello-00002".into(),
        ..Default::default()
    });
    objects::update_status(&ctx.store, &cfg).unwrap();
    ctx
}

fn target(cfg: &str, rev: &str, latest: bool) -> TrafficTarget {
    TrafficTarget {
        configuration_name: cfg.into(),
        revision_name: rev.into(),
        latest_revision: Some(latest),
        percent: Some(100),
        ..Default::default()
    }
}

fn add_route(ctx: &Context, name: &str, spec: TrafficTarget, status: TrafficTarget) {
    let route = testing::insert(ctx, &testing::route("default", name, vec![spec]));
    let mut route = route;
    route.status = Some(RouteStatus {
        traffic: vec![status],
        ..Default::default()
    });
    objects::update_status(&ctx.store, &route).unwrap();
}

fn state(ctx: &Context, rev: &str) -> (Option<String>, Option<String>) {
    let r: Revision = testing::fetch(ctx, "default", rev);
    (
        r.metadata.labels.get(label::ROUTING_STATE).cloned(),
        r.metadata.annotations.get(annotation::ROUTES).cloned(),
    )
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

#[test]
fn labels_referenced_objects_and_cleans_up() {
    let ctx = setup();
    add_route(
        &ctx,
        "main",
        target("hello", "", true),
        target("", "hello-00002", true),
    );
    add_route(
        &ctx,
        "pin",
        target("", "hello-00001", false),
        target("", "hello-00001", false),
    );
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "main")
        .unwrap();
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "pin")
        .unwrap();

    assert_eq!(state(&ctx, "hello-00001"), (s("active"), s("pin")));
    assert_eq!(state(&ctx, "hello-00002"), (s("active"), s("main")));
    assert_eq!(
        state(&ctx, "hello-00003"),
        (s("active"), s("main")),
        "latest created is warmed up"
    );
    let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    assert_eq!(cfg.metadata.annotations[annotation::ROUTES], "main,pin");

    let before = ctx.store.current_revision();
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "main")
        .unwrap();
    assert_eq!(
        ctx.store.current_revision(),
        before,
        "a second run writes nothing"
    );

    // The pinned route moves to the latest revision: hello-00001 is parked.
    let mut pin: Route = testing::fetch(&ctx, "default", "pin");
    pin.spec.traffic = vec![target("", "hello-00003", false)];
    objects::update(&ctx.store, &pin).unwrap();
    let mut pin: Route = testing::fetch(&ctx, "default", "pin");
    pin.status.as_mut().unwrap().traffic = vec![target("", "hello-00003", false)];
    objects::update_status(&ctx.store, &pin).unwrap();
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "pin")
        .unwrap();
    assert_eq!(state(&ctx, "hello-00001"), (s("reserve"), None));
    assert_eq!(state(&ctx, "hello-00003"), (s("active"), s("main,pin")));
    let parked: Revision = testing::fetch(&ctx, "default", "hello-00001");
    assert_eq!(
        parked.metadata.annotations[annotation::ROUTING_STATE_MODIFIED],
        testing::TEST_NOW
    );

    // Deleting a route removes it everywhere.
    objects::delete::<Route>(&ctx.store, "default", "main", None).unwrap();
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "main")
        .unwrap();
    assert_eq!(state(&ctx, "hello-00002"), (s("reserve"), None));
    assert_eq!(state(&ctx, "hello-00003"), (s("active"), s("pin")));
    let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    assert_eq!(cfg.metadata.annotations[annotation::ROUTES], "pin");
}

#[test]
fn watches() {
    let ctx = setup();
    add_route(
        &ctx,
        "main",
        target("hello", "", true),
        target("", "hello-00002", true),
    );
    let mut rev = testing::revision("default", "x", "unrelated", 1);
    rev.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "stale,main".into());
    let v = serde_json::to_value(&rev).unwrap();
    let key = |n: &str| ("default".to_string(), n.to_string());
    let labeler = LabelerReconciler::default();
    crate::route::tests::replay_events(&ctx, &labeler.index, &labeler);
    assert_eq!(
        labeler.watched(&ctx, &kinds::REVISION, &v),
        [key("main"), key("stale")]
    );
    let cfg = serde_json::to_value(testing::configuration("default", "hello", "img")).unwrap();
    assert_eq!(
        labeler.watched(&ctx, &kinds::CONFIGURATION, &cfg),
        [key("main")]
    );
}

#[test]
fn drops_stale_names_found_by_the_store() {
    let ctx = setup();
    add_route(
        &ctx,
        "main",
        target("hello", "", true),
        target("", "hello-00002", true),
    );
    // Objects naming "main" that it does not reference (hand edits, or a former target),
    // one of them in another namespace, which is not this route's business.
    let mut r1: Revision = testing::fetch(&ctx, "default", "hello-00001");
    r1.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "main, other".into());
    objects::update(&ctx.store, &r1).unwrap();
    let mut x = testing::configuration("default", "x", "img");
    x.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "main".into());
    testing::insert(&ctx, &x);
    let mut far = testing::revision("elsewhere", "far", "hello", 1);
    far.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "main".into());
    testing::insert(&ctx, &far);
    // Names that merely contain the route's name are other routes.
    let mut y = testing::configuration("default", "y", "img");
    y.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "main2,xmain".into());
    testing::insert(&ctx, &y);

    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "main")
        .unwrap();
    assert_eq!(state(&ctx, "hello-00001"), (s("active"), s("other")));
    assert_eq!(state(&ctx, "hello-00002"), (s("active"), s("main")));
    assert_eq!(state(&ctx, "hello-00003"), (s("active"), s("main")));
    let x: Configuration = testing::fetch(&ctx, "default", "x");
    assert!(!x.metadata.annotations.contains_key(annotation::ROUTES));
    let y: Configuration = testing::fetch(&ctx, "default", "y");
    assert_eq!(y.metadata.annotations[annotation::ROUTES], "main2,xmain");
    let far: Revision = testing::fetch(&ctx, "elsewhere", "far");
    assert_eq!(far.metadata.annotations[annotation::ROUTES], "main");
    let hello: Configuration = testing::fetch(&ctx, "default", "hello");
    assert_eq!(hello.metadata.annotations[annotation::ROUTES], "main");
}

/// A new Service's configuration and its first revision are created already naming the
/// route, and the configuration writes no status before the revision has one: meanwhile
/// the labeler must take that revision as the latest created one and write nothing, not
/// demote it to `reserve`.
#[test]
fn a_new_configuration_without_status_keeps_its_first_revision_active() {
    let (ctx, _) = testing::test_context();
    let mut cfg = testing::configuration("default", "new", "img");
    cfg.metadata
        .annotations
        .insert(annotation::ROUTES.into(), "new".into());
    let cfg = testing::insert(&ctx, &cfg);
    let rev = crate::configuration::resources::make_revision(&cfg, (ctx.clock)());
    assert_eq!(rev.metadata.labels[label::ROUTING_STATE], "active");
    testing::insert(&ctx, &rev);
    testing::insert(
        &ctx,
        &testing::route("default", "new", vec![target("new", "", true)]),
    );
    let before = ctx.store.current_revision();
    LabelerReconciler::default()
        .reconcile_name(&ctx, "default", "new")
        .unwrap();
    assert_eq!(ctx.store.current_revision(), before, "nothing to write");
    assert_eq!(state(&ctx, "new-00001"), (s("active"), s("new")));
}
