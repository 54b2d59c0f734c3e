//! Route reconciler against an in-memory store and routing table.

use wisp_api::{
    kinds,
    meta::{ConditionStatus, Status},
    serving::{Configuration, ConfigurationStatus, Revision, Route, TrafficTarget},
};

use super::{RouteIndex, RouteReconciler, resources};
use crate::{
    conditions::{self, READY},
    objects,
    reconciler::{Context, Observer, Reconciler},
    testing::{self, ReconcilerExt, test_clock},
};

fn ready_revision(ctx: &Context, name: &str) -> Revision {
    let rev = testing::insert(ctx, &testing::revision("default", name, "hello", 1));
    let mut r = rev.clone();
    testing::set_revision_ready(&mut r, ConditionStatus::True, "", "");
    objects::update_status(&ctx.store, &r).unwrap();
    testing::fetch(ctx, "default", name)
}

fn set_latest_ready(ctx: &Context, name: &str) {
    let mut cfg: Configuration = testing::fetch(ctx, "default", "hello");
    let mut st = Status {
        observed_generation: 1,
        ..Default::default()
    };
    conditions::set(&mut st, READY, ConditionStatus::True, "", "", test_clock());
    cfg.status = Some(ConfigurationStatus {
        status: st,
        latest_created_revision_name: name.into(),
        latest_ready_revision_name: name.into(),
    });
    objects::update_status(&ctx.store, &cfg).unwrap();
}

fn latest(percent: i64) -> TrafficTarget {
    TrafficTarget {
        configuration_name: "hello".into(),
        latest_revision: Some(true),
        percent: Some(percent),
        ..Default::default()
    }
}

fn pinned(tag: &str, rev: &str, percent: i64) -> TrafficTarget {
    TrafficTarget {
        tag: tag.into(),
        revision_name: rev.into(),
        latest_revision: Some(false),
        percent: Some(percent),
        ..Default::default()
    }
}

fn reconcile(ctx: &Context) {
    RouteReconciler::default()
        .reconcile_name(ctx, "default", "hello")
        .unwrap();
}

fn main_targets(ctx: &Context) -> Vec<(String, u32)> {
    ctx.routing.load().hosts["hello.default.example.com"]
        .targets
        .iter()
        .map(|t| (t.revision.clone(), t.percent))
        .collect()
}

fn cond(ctx: &Context, ty: &str) -> (ConditionStatus, String) {
    let r: Route = testing::fetch(ctx, "default", "hello");
    let c = r.status.unwrap().status.condition(ty).cloned().unwrap();
    (c.status, c.reason)
}

#[test]
fn publishes_follows_latest_ready_and_keeps_routing_on_errors() {
    let (ctx, _) = testing::test_context();
    testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
    testing::insert(
        &ctx,
        &testing::route(
            "default",
            "hello",
            vec![latest(100), pinned("v1", "hello-00001", 0)],
        ),
    );

    // Its first status waits for the configuration's first (which re-queues it).
    reconcile(&ctx);
    assert_eq!(
        testing::fetch::<Route>(&ctx, "default", "hello").status,
        None
    );
    let mut cfg: Configuration = testing::fetch(&ctx, "default", "hello");
    cfg.status = Some(Default::default());
    objects::update_status(&ctx.store, &cfg).unwrap();

    // Nothing ready yet: Unknown, nothing published.
    reconcile(&ctx);
    assert_eq!(
        cond(&ctx, resources::ALL_TRAFFIC_ASSIGNED),
        (ConditionStatus::Unknown, "RevisionMissing".into())
    );
    assert_eq!(
        cond(&ctx, resources::INGRESS_READY).1,
        "IngressNotConfigured"
    );
    assert!(ctx.routing.load().hosts.is_empty());

    ready_revision(&ctx, "hello-00001");
    set_latest_ready(&ctx, "hello-00001");
    reconcile(&ctx);
    assert_eq!(cond(&ctx, READY), (ConditionStatus::True, String::new()));
    assert_eq!(main_targets(&ctx), [("hello-00001".to_string(), 100)]);
    let table = ctx.routing.load();
    assert_eq!(
        table.hosts["v1-hello.default.example.com"].targets[0].percent,
        100
    );
    assert!(table.hosts.contains_key("hello.default.svc.cluster.local"));
    let route: Route = testing::fetch(&ctx, "default", "hello");
    let st = route.status.unwrap();
    assert_eq!(st.url, "http://hello.default.example.com");
    assert_eq!(
        st.traffic[1].url.as_deref(),
        Some("http://v1-hello.default.example.com")
    );

    let before = ctx.store.current_revision();
    reconcile(&ctx);
    assert_eq!(
        ctx.store.current_revision(),
        before,
        "a second run writes nothing"
    );

    ready_revision(&ctx, "hello-00002");
    set_latest_ready(&ctx, "hello-00002");
    reconcile(&ctx);
    assert_eq!(main_targets(&ctx), [("hello-00002".to_string(), 100)]);

    // Pointing at a revision that does not exist keeps the last good routing.
    let mut route: Route = testing::fetch(&ctx, "default", "hello");
    route.spec.traffic = vec![pinned("", "nope", 100)];
    objects::update(&ctx.store, &route).unwrap();
    reconcile(&ctx);
    assert_eq!(
        cond(&ctx, resources::ALL_TRAFFIC_ASSIGNED),
        (ConditionStatus::False, "RevisionMissing".into())
    );
    assert_eq!(main_targets(&ctx), [("hello-00002".to_string(), 100)]);
    let route: Route = testing::fetch(&ctx, "default", "hello");
    assert_eq!(route.status.unwrap().status.observed_generation, 2);

    // Deleting the route removes its hosts.
    objects::delete::<Route>(&ctx.store, "default", "hello", None).unwrap();
    reconcile(&ctx);
    assert!(ctx.routing.load().hosts.is_empty());
}

#[test]
fn two_routes_share_the_table() {
    let (ctx, _) = testing::test_context();
    ready_revision(&ctx, "hello-00001");
    testing::insert(
        &ctx,
        &testing::route("default", "hello", vec![pinned("", "hello-00001", 100)]),
    );
    testing::insert(
        &ctx,
        &testing::route("default", "other", vec![pinned("", "hello-00001", 100)]),
    );
    reconcile(&ctx);
    RouteReconciler::default()
        .reconcile_name(&ctx, "default", "other")
        .unwrap();
    let table = ctx.routing.load();
    assert!(table.hosts.contains_key("hello.default.example.com"));
    assert!(table.hosts.contains_key("other.default.example.com"));
    assert_eq!(table.hosts.len(), 8);
}

/// Hands every store event so far to `index` and then to `r.watches`, as the runner does,
/// and returns the keys `r` asked for per event.
pub(crate) fn replay_events(
    ctx: &Context,
    index: &RouteIndex,
    r: &dyn Reconciler,
) -> Vec<Vec<(String, String)>> {
    let kinds: std::collections::HashMap<String, &'static kinds::ResourceKind> = kinds::ALL
        .into_iter()
        .map(|k| (crate::reconciler::resource(k), k))
        .collect();
    ctx.store
        .events_since(0, None, None, 100_000)
        .unwrap()
        .iter()
        .map(|ev| {
            let mut owned = testing::OwnedEvent::new(kinds[&ev.resource], ev.object.clone());
            if ev.event_type == wisp_store::EventType::Deleted {
                owned = owned.deleted();
            }
            index.observe(&owned.event());
            r.watched(ctx, kinds[&ev.resource], &ev.object)
        })
        .collect()
}

#[test]
fn watches_referencing_routes() {
    let (ctx, _) = testing::test_context();
    testing::insert(&ctx, &testing::route("default", "hello", vec![latest(100)]));
    testing::insert(
        &ctx,
        &testing::route("default", "pinned", vec![pinned("", "other-00001", 100)]),
    );
    testing::insert(
        &ctx,
        &testing::route("elsewhere", "hello", vec![latest(100)]),
    );
    let gone = testing::insert(
        &ctx,
        &testing::route("default", "gone", vec![pinned("", "other-00001", 100)]),
    );
    objects::delete::<Route>(&ctx.store, "default", "gone", Some(&gone.metadata.uid)).unwrap();
    let watcher = RouteReconciler::default();
    // Route events feed the index and queue nothing extra (the runner queues their own key).
    assert!(
        replay_events(&ctx, &watcher.index, &watcher)
            .iter()
            .all(Vec::is_empty)
    );
    let key = |n: &str| ("default".to_string(), n.to_string());

    let cfg = serde_json::to_value(testing::configuration("default", "hello", "img")).unwrap();
    assert_eq!(
        watcher.watched(&ctx, &kinds::CONFIGURATION, &cfg),
        [key("hello")]
    );
    // A revision of the referenced configuration, and a revision referenced by name (the
    // deleted route that also named it is gone).
    let rev =
        serde_json::to_value(testing::revision("default", "hello-00003", "hello", 3)).unwrap();
    assert_eq!(
        watcher.watched(&ctx, &kinds::REVISION, &rev),
        [key("hello")]
    );
    let rev =
        serde_json::to_value(testing::revision("default", "other-00001", "other", 1)).unwrap();
    assert_eq!(
        watcher.watched(&ctx, &kinds::REVISION, &rev),
        [key("pinned")]
    );
    assert!(watcher.watched(&ctx, &kinds::SERVICE, &cfg).is_empty());

    // Retargeted: the index follows the route's new spec.
    let mut pinned_route: Route = testing::fetch(&ctx, "default", "pinned");
    pinned_route.spec.traffic = vec![latest(100)];
    objects::update(&ctx.store, &pinned_route).unwrap();
    replay_events(&ctx, &watcher.index, &watcher);
    assert!(watcher.watched(&ctx, &kinds::REVISION, &rev).is_empty());
    assert_eq!(
        watcher.watched(&ctx, &kinds::CONFIGURATION, &cfg),
        [key("hello"), key("pinned")]
    );
}

#[test]
fn bad_domain_template() {
    let mut config = wisp_api::config::Config::default();
    config.network.domain_template = "{{.Name}}".into();
    let (ctx, _) = testing::test_context_with(config, test_clock);
    testing::insert(
        &ctx,
        &testing::route("default", "hello", vec![pinned("", "x", 100)]),
    );
    reconcile(&ctx);
    assert_eq!(
        cond(&ctx, resources::ALL_TRAFFIC_ASSIGNED),
        (ConditionStatus::False, "ErrorConfig".into())
    );
    assert!(ctx.routing.load().hosts.is_empty());
}

/// Seconds past [`test_clock`] for [`rollout_clock`]; only the rollout test moves it.
static ROLLOUT_SECS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn rollout_clock() -> chrono::DateTime<chrono::Utc> {
    test_clock() + chrono::Duration::seconds(ROLLOUT_SECS.load(std::sync::atomic::Ordering::SeqCst))
}

fn status_split(ctx: &Context) -> Vec<(String, i64)> {
    let r: Route = testing::fetch(ctx, "default", "hello");
    r.status
        .unwrap()
        .traffic
        .iter()
        .map(|t| (t.revision_name.clone(), t.percent.unwrap_or(0)))
        .collect()
}

#[test]
fn a_new_latest_revision_rolls_out_over_the_duration() {
    use std::{sync::atomic::Ordering::SeqCst, time::Duration};

    use crate::reconciler::Action;

    let (ctx, _) = testing::test_context_with(Default::default(), rollout_clock);
    let at = |secs: i64| ROLLOUT_SECS.store(secs, SeqCst);
    let run = |ctx: &Context| {
        RouteReconciler::default()
            .reconcile_name(ctx, "default", "hello")
            .unwrap()
    };
    let owned = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
        pairs.iter().map(|(r, p)| (r.to_string(), *p)).collect()
    };
    let split = |ctx: &Context| -> Vec<(String, i64)> {
        main_targets(ctx)
            .into_iter()
            .map(|(r, p)| (r, i64::from(p)))
            .collect()
    };
    testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
    let mut route = testing::route("default", "hello", vec![latest(100)]);
    route
        .metadata
        .annotations
        .insert("serving.knative.dev/rollout-duration".into(), "6s".into());
    testing::insert(&ctx, &route);
    ready_revision(&ctx, "hello-00001");
    set_latest_ready(&ctx, "hello-00001");
    assert_eq!(run(&ctx), Action::Done);
    assert_eq!(split(&ctx), owned(&[("hello-00001", 100)]));

    // A new latest ready revision: 1% at once, then steps of 20% a second.
    ready_revision(&ctx, "hello-00002");
    set_latest_ready(&ctx, "hello-00002");
    at(1);
    assert_eq!(run(&ctx), Action::RequeueAfter(Duration::from_secs(1)));
    let want = owned(&[("hello-00001", 99), ("hello-00002", 1)]);
    assert_eq!(split(&ctx), want);
    assert_eq!(status_split(&ctx), want);
    assert_eq!(
        cond(&ctx, resources::INGRESS_READY),
        (ConditionStatus::Unknown, "RolloutInProgress".into())
    );
    assert_eq!(cond(&ctx, READY).0, ConditionStatus::Unknown);
    let ingress = ctx.views.ingresses.get("default", "hello").unwrap();
    let state = ingress["metadata"]["annotations"]["networking.knative.dev/rollout"]
        .as_str()
        .unwrap();
    assert!(state.contains(r#""stepSize":20"#), "{state}");

    at(2);
    assert_eq!(run(&ctx), Action::RequeueAfter(Duration::from_secs(1)));
    let want = owned(&[("hello-00001", 79), ("hello-00002", 21)]);
    assert_eq!((split(&ctx), status_split(&ctx)), (want.clone(), want));

    // The steps go on at their times, to 100%.
    for t in 3..=5 {
        at(t);
        assert_eq!(
            run(&ctx),
            Action::RequeueAfter(Duration::from_secs(1)),
            "{t}s"
        );
    }
    assert_eq!(
        split(&ctx),
        owned(&[("hello-00001", 19), ("hello-00002", 81)])
    );
    at(6);
    assert_eq!(run(&ctx), Action::Done);
    assert_eq!(split(&ctx), owned(&[("hello-00002", 100)]));
    let r: Route = testing::fetch(&ctx, "default", "hello");
    let st = r.status.unwrap();
    assert_eq!(st.traffic.len(), 1);
    assert_eq!(st.traffic[0].latest_revision, Some(true));
    assert_eq!(cond(&ctx, READY), (ConditionStatus::True, String::new()));

    // Rollback: a third revision rolling out, then the traffic pinned to the second ends
    // the rollout at once.
    ready_revision(&ctx, "hello-00003");
    set_latest_ready(&ctx, "hello-00003");
    at(10);
    assert_eq!(run(&ctx), Action::RequeueAfter(Duration::from_secs(1)));
    assert_eq!(
        split(&ctx),
        owned(&[("hello-00002", 99), ("hello-00003", 1)])
    );
    let mut route: Route = testing::fetch(&ctx, "default", "hello");
    route.spec.traffic = vec![pinned("", "hello-00002", 100)];
    objects::update(&ctx.store, &route).unwrap();
    at(11);
    assert_eq!(run(&ctx), Action::Done);
    let want = owned(&[("hello-00002", 100)]);
    assert_eq!((split(&ctx), status_split(&ctx)), (want.clone(), want));
    assert_eq!(cond(&ctx, READY), (ConditionStatus::True, String::new()));

    // Back to the latest revision: with no latest target in the previous state there is
    // nothing to roll from, so it moves at once (as Knative's `Step` with an empty
    // previous rollout).
    let mut route: Route = testing::fetch(&ctx, "default", "hello");
    route.spec.traffic = vec![latest(100)];
    objects::update(&ctx.store, &route).unwrap();
    at(12);
    assert_eq!(run(&ctx), Action::Done);
    assert_eq!(split(&ctx), owned(&[("hello-00003", 100)]));
}

#[test]
fn config_network_rollout_duration_applies_without_the_annotation() {
    use std::time::Duration;

    use crate::reconciler::Action;

    let mut config = wisp_api::config::Config::default();
    config.network.rollout_duration_seconds = 101;
    let (ctx, _) = testing::test_context_with(config, test_clock);
    testing::insert(&ctx, &testing::configuration("default", "hello", "img"));
    testing::insert(&ctx, &testing::route("default", "hello", vec![latest(100)]));
    ready_revision(&ctx, "hello-00001");
    set_latest_ready(&ctx, "hello-00001");
    reconcile(&ctx);
    ready_revision(&ctx, "hello-00002");
    set_latest_ready(&ctx, "hello-00002");
    let action = RouteReconciler::default()
        .reconcile_name(&ctx, "default", "hello")
        .unwrap();
    // 100s left after the first 1%: 99 steps of 1%, 100/99 s apart (to the float
    // precision of Knative's arithmetic on Unix nanoseconds).
    let Action::RequeueAfter(d) = action else {
        panic!("{action:?}")
    };
    let want = Duration::from_nanos(1_010_101_010);
    assert!(d.abs_diff(want) < Duration::from_micros(1), "{d:?}");
    assert_eq!(
        main_targets(&ctx),
        [
            ("hello-00001".to_string(), 99),
            ("hello-00002".to_string(), 1)
        ]
    );
}
