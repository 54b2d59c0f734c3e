//! Service reconciler against an in-memory store.

use crate::testing::ReconcilerExt;
use wisp_api::{
    kinds,
    meta::{ConditionStatus, Status},
    serving::{Configuration, ConfigurationStatus, Route, RouteStatus, Service, TrafficTarget},
};

use super::{ServiceReconciler, resources};
use crate::{
    conditions::{self, READY},
    objects,
    reconciler::{Action, Context, Reconciler},
    testing::{self, test_clock},
};

fn setup() -> (Context, Service) {
    let (ctx, _) = testing::test_context();
    let svc = testing::insert(&ctx, &testing::service("default", "hello", "img"));
    (ctx, svc)
}

fn reconcile(ctx: &Context) {
    assert_eq!(
        ServiceReconciler
            .reconcile_name(ctx, "default", "hello")
            .unwrap(),
        Action::Done
    );
}

fn cond(svc: &Service, ty: &str) -> (ConditionStatus, String) {
    let c = svc.status.as_ref().unwrap().status.condition(ty).unwrap();
    (c.status, c.reason.clone())
}

#[test]
fn creates_children_and_is_idempotent() {
    let (ctx, svc) = setup();
    reconcile(&ctx);
    let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    let route: Route = testing::fetch(&ctx, "default", "hello");
    assert!(objects::is_controlled_by(&cfg.metadata, &svc.metadata.uid));
    assert!(objects::is_controlled_by(
        &route.metadata,
        &svc.metadata.uid
    ));
    assert_eq!(route.spec.traffic[0].configuration_name, "hello");
    // Created already naming the route that sends it traffic (the labeler's annotation).
    assert_eq!(
        cfg.metadata.annotations[crate::names::annotation::ROUTES],
        "hello"
    );
    // Its first status waits for its children's first (their writes re-queue it).
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(svc.status, None, "no status before the children have one");
    let mut cfg = cfg;
    cfg.status = Some(Default::default());
    objects::update_status(&ctx.store, &cfg).unwrap();
    reconcile(&ctx);
    assert_eq!(
        testing::fetch::<Service>(&ctx, "default", "hello").status,
        None,
        "the route has none yet"
    );
    let mut route = route;
    route.status = Some(Default::default());
    objects::update_status(&ctx.store, &route).unwrap();
    reconcile(&ctx);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    // Neither child has reported anything useful yet.
    assert_eq!(
        cond(&svc, resources::CONFIGURATIONS_READY),
        (ConditionStatus::Unknown, "OutOfDate".into())
    );
    assert_eq!(cond(&svc, READY).0, ConditionStatus::Unknown);
    assert_eq!(svc.status.as_ref().unwrap().status.observed_generation, 1);

    let before = ctx.store.current_revision();
    reconcile(&ctx);
    assert_eq!(
        ctx.store.current_revision(),
        before,
        "a second run writes nothing"
    );
}

#[test]
fn drift_is_clobbered_but_labeler_annotation_kept() {
    let (ctx, _) = setup();
    reconcile(&ctx);
    let mut cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    cfg.spec.template.spec.timeout_seconds = Some(7);
    cfg.metadata
        .annotations
        .insert(crate::names::annotation::ROUTES.into(), "hello".into());
    objects::update(&ctx.store, &cfg).unwrap();
    let mut route: Route = testing::fetch(&ctx, "default", "hello");
    route.spec.traffic[0].percent = Some(50);
    objects::update(&ctx.store, &route).unwrap();

    reconcile(&ctx);
    let cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    assert_eq!(cfg.spec.template.spec.timeout_seconds, Some(300));
    assert_eq!(
        cfg.metadata.annotations[crate::names::annotation::ROUTES],
        "hello"
    );
    let route: Route = testing::fetch(&ctx, "default", "hello");
    assert_eq!(route.spec.traffic[0].percent, Some(100));
}

#[test]
fn not_owned_children() {
    let (ctx, _) = setup();
    testing::insert(&ctx, &testing::configuration("default", "hello", "other"));
    reconcile(&ctx);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(
        cond(&svc, resources::CONFIGURATIONS_READY),
        (ConditionStatus::False, "NotOwned".into())
    );
    assert!(
        objects::get::<Route>(&ctx.store, "default", "hello")
            .unwrap()
            .is_none(),
        "stops at the configuration"
    );

    // The foreign configuration's events map back to the service.
    let foreign = ctx
        .store
        .get("configurations.serving.knative.dev", "default", "hello")
        .unwrap()
        .unwrap();
    assert_eq!(
        ServiceReconciler.watched(&ctx, &kinds::CONFIGURATION, &foreign),
        [("default".to_string(), "hello".to_string())]
    );
    assert!(
        ServiceReconciler
            .watched(&ctx, &kinds::REVISION, &foreign)
            .is_empty()
    );

    objects::delete::<Configuration>(&ctx.store, "default", "hello", None).unwrap();
    testing::insert(&ctx, &testing::route("default", "hello", vec![]));
    reconcile(&ctx);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(
        cond(&svc, resources::ROUTES_READY),
        (ConditionStatus::False, "NotOwned".into())
    );
    assert_eq!(
        cond(&svc, READY),
        (ConditionStatus::False, "NotOwned".into())
    );
}

fn ready_status(generation: i64) -> Status {
    let mut st = Status {
        observed_generation: generation,
        ..Default::default()
    };
    conditions::set(&mut st, READY, ConditionStatus::True, "", "", test_clock());
    st
}

#[test]
fn propagates_child_status() {
    let (ctx, _) = setup();
    reconcile(&ctx);
    let mut cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    cfg.status = Some(ConfigurationStatus {
        status: ready_status(1),
        latest_created_revision_name: "hello-00001".into(),
        latest_ready_revision_name: "hello-00001".into(),
    });
    objects::update_status(&ctx.store, &cfg).unwrap();
    let mut route: Route = testing::fetch(&ctx, "default", "hello");
    route.status = Some(RouteStatus {
        status: ready_status(1),
        url: "http://hello.default.example.com".into(),
        traffic: vec![TrafficTarget {
            revision_name: "hello-00001".into(),
            latest_revision: Some(true),
            percent: Some(100),
            ..Default::default()
        }],
        ..Default::default()
    });
    objects::update_status(&ctx.store, &route).unwrap();

    reconcile(&ctx);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(cond(&svc, READY), (ConditionStatus::True, String::new()));
    let st = svc.status.unwrap();
    assert_eq!(st.url, "http://hello.default.example.com");
    assert_eq!(st.latest_ready_revision_name, "hello-00001");
    assert_eq!(st.traffic.len(), 1);
}

#[test]
fn byo_name_waits_for_the_configuration() {
    let (ctx, mut svc) = setup();
    svc.spec.template.metadata.name = "hello-byo".into();
    objects::update(&ctx.store, &svc).unwrap();
    reconcile(&ctx);
    assert!(
        objects::get::<Configuration>(&ctx.store, "default", "hello")
            .unwrap()
            .is_some()
    );
    assert!(
        objects::get::<Route>(&ctx.store, "default", "hello")
            .unwrap()
            .is_none(),
        "the route waits until the configuration observed its generation"
    );

    let mut cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    cfg.status = Some(ConfigurationStatus {
        status: ready_status(1),
        ..Default::default()
    });
    objects::update_status(&ctx.store, &cfg).unwrap();
    // A revision of that name that is not ours blocks the route too.
    testing::insert(
        &ctx,
        &testing::revision("default", "hello-byo", "someone-else", 1),
    );
    reconcile(&ctx);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(
        cond(&svc, resources::ROUTES_READY),
        (ConditionStatus::False, "RevisionNameTaken".into())
    );
    assert!(
        objects::get::<Route>(&ctx.store, "default", "hello")
            .unwrap()
            .is_none()
    );

    objects::delete::<wisp_api::serving::Revision>(&ctx.store, "default", "hello-byo", None)
        .unwrap();
    reconcile(&ctx);
    assert!(
        objects::get::<Route>(&ctx.store, "default", "hello")
            .unwrap()
            .is_some()
    );
}

#[test]
fn missing_service_is_fine() {
    let (ctx, _) = testing::test_context();
    assert_eq!(
        ServiceReconciler
            .reconcile_name(&ctx, "default", "nope")
            .unwrap(),
        Action::Done
    );
}

/// The whole chain with the framework's configuration and revision reconcilers and a
/// platform whose replicas come up at once: Service → Configuration → Revision → Route →
/// routing table, labels, and a second revision taking over the traffic.
#[test]
fn end_to_end() {
    use crate::{
        configuration::ConfigurationReconciler, gc::GcReconciler, labeler::LabelerReconciler,
        revision::RevisionReconciler, route::RouteReconciler,
    };
    let (ctx, platform) = testing::test_context();
    platform.set_auto_ready(true);
    testing::insert(&ctx, &testing::service("default", "hello", "img"));
    let all: [&dyn Reconciler; 6] = [
        &ServiceReconciler,
        &ConfigurationReconciler,
        &RevisionReconciler::default(),
        &RouteReconciler::default(),
        &LabelerReconciler::default(),
        &GcReconciler,
    ];
    testing::settle(&ctx, &all, 20);

    let svc: Service = testing::fetch(&ctx, "default", "hello");
    let st = svc.status.clone().unwrap();
    assert_eq!(
        cond(&svc, READY),
        (ConditionStatus::True, String::new()),
        "{st:#?}"
    );
    assert_eq!(st.url, "http://hello.default.example.com");
    assert_eq!(st.latest_ready_revision_name, "hello-00001");
    assert_eq!(st.traffic[0].revision_name, "hello-00001");
    let table = ctx.routing.load();
    assert_eq!(
        table.hosts["hello.default.example.com"].targets[0].revision,
        "hello-00001"
    );
    let rev: wisp_api::serving::Revision = testing::fetch(&ctx, "default", "hello-00001");
    assert_eq!(
        rev.metadata.labels[crate::names::label::ROUTING_STATE],
        "active"
    );

    let mut svc = svc;
    svc.spec.template.spec.timeout_seconds = Some(60);
    objects::update(&ctx.store, &svc).unwrap();
    testing::settle(&ctx, &all, 20);
    let svc: Service = testing::fetch(&ctx, "default", "hello");
    assert_eq!(cond(&svc, READY).0, ConditionStatus::True);
    assert_eq!(
        svc.status.as_ref().unwrap().traffic[0].revision_name,
        "hello-00002"
    );
    assert_eq!(
        ctx.routing.load().hosts["hello.default.example.com"].targets[0].revision,
        "hello-00002"
    );
    let old: wisp_api::serving::Revision = testing::fetch(&ctx, "default", "hello-00001");
    assert_eq!(
        old.metadata.labels[crate::names::label::ROUTING_STATE],
        "reserve"
    );
}

/// The same chain driven by the real runner with [`crate::all_reconcilers`]: nothing calls
/// the reconcilers here but store events, so the Route only turns Ready, and the labeler
/// only marks the revisions, if Configuration/Revision events reach the routes referencing
/// them through the shared [`crate::route::RouteIndex`] (their owner and labels name the
/// Service, never the Route). Several services at once, and a rollout and a retarget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_with_the_runner() {
    use std::time::Duration;
    use wisp_api::serving::Revision;

    let (ctx, platform) = testing::test_context();
    platform.set_auto_ready(true);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(
        crate::Controllers::new(ctx.clone(), crate::all_reconcilers()).run(async {
            let _ = stop_rx.await;
        }),
    );
    async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let ready = |name: &str, rev: &str| {
        objects::get::<Service>(&ctx.store, "default", name)
            .unwrap()
            .and_then(|s| s.status)
            .is_some_and(|st| {
                conditions::is_true(&st.status, READY)
                    && st.traffic.first().is_some_and(|t| t.revision_name == rev)
            })
    };
    let routing_state = |rev: &str| {
        objects::get::<Revision>(&ctx.store, "default", rev)
            .unwrap()
            .and_then(|r| {
                r.metadata
                    .labels
                    .get(crate::names::label::ROUTING_STATE)
                    .cloned()
            })
    };
    let names: Vec<String> = (0..5).map(|i| format!("svc-{i}")).collect();
    for n in &names {
        testing::insert(&ctx, &testing::service("default", n, "img"));
    }
    for n in &names {
        eventually(&format!("{n} Ready"), || ready(n, &format!("{n}-00001"))).await;
        eventually(&format!("{n}-00001 active"), || {
            routing_state(&format!("{n}-00001")).as_deref() == Some("active")
        })
        .await;
    }

    // A rollout: the route follows the new revision and the old one is parked.
    let mut svc: Service = testing::fetch(&ctx, "default", "svc-0");
    svc.spec.template.spec.timeout_seconds = Some(60);
    objects::update(&ctx.store, &svc).unwrap();
    eventually("svc-0 on 00002", || ready("svc-0", "svc-0-00002")).await;
    eventually("svc-0-00001 reserve", || {
        routing_state("svc-0-00001").as_deref() == Some("reserve")
    })
    .await;

    // A route of its own pinned to another service's revision: labelled there too.
    testing::insert(
        &ctx,
        &testing::route(
            "default",
            "pin",
            vec![TrafficTarget {
                revision_name: "svc-1-00001".into(),
                percent: Some(100),
                ..Default::default()
            }],
        ),
    );
    eventually("pin recorded on svc-1-00001", || {
        objects::get::<Revision>(&ctx.store, "default", "svc-1-00001")
            .unwrap()
            .is_some_and(|r| {
                r.metadata.annotations.get(crate::names::annotation::ROUTES)
                    == Some(&"pin,svc-1".to_string())
            })
    })
    .await;
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
}
