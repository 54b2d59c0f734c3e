use crate::testing::ReconcilerExt;
use std::{cell::Cell, time::Duration};

use chrono::{DateTime, Utc};
use wisp_api::{
    config::{AutoscalerConfig, Config},
    duration::GoDuration,
    meta::ConditionStatus,
};
use wisp_autoscaler::{PodStat, Sample};

use super::*;
use crate::{
    autoscaling::resources::{ACTIVE, NO_TRAFFIC, QUEUED},
    conditions::READY,
    revision::RevisionReconciler,
    testing::{self, FakePlatform},
};

thread_local! {
    /// Milliseconds the test clock is ahead of `testing::test_clock()` (per test thread:
    /// reconcilers run synchronously on it).
    static OFFSET_MS: Cell<i64> = const { Cell::new(0) };
}

fn clock() -> DateTime<Utc> {
    testing::test_clock() + chrono::Duration::milliseconds(OFFSET_MS.with(Cell::get))
}

fn advance(d: Duration) {
    OFFSET_MS.with(|c| c.set(c.get() + d.as_millis() as i64));
}

const NS: &str = "default";
const NAME: &str = "auto-00001";

fn key() -> RevisionKey {
    RevisionKey::new(NS, NAME)
}

/// A context with short windows (stable 6 s, grace 2 s), a revision starting at zero
/// (target 10 concurrent ⇒ 7 per replica), and a platform whose replicas are ready at once.
fn setup(annotations: &[(&str, &str)]) -> (Context, std::sync::Arc<FakePlatform>) {
    OFFSET_MS.with(|c| c.set(0));
    let config = Config {
        autoscaler: AutoscalerConfig {
            stable_window: GoDuration::parse("6s").unwrap(),
            scale_to_zero_grace_period: GoDuration::parse("2s").unwrap(),
            allow_zero_initial_scale: true,
            ..Default::default()
        },
        ..Config::default()
    };
    let (ctx, platform) = testing::test_context_with(config, clock);
    platform.set_auto_ready(true);
    let mut rev = testing::revision(NS, NAME, "auto", 1);
    rev.metadata.labels.insert(
        crate::names::label::ROUTING_STATE.into(),
        crate::names::routing_state::ACTIVE.into(),
    );
    for (k, v) in [
        ("autoscaling.knative.dev/initial-scale", "0"),
        ("autoscaling.knative.dev/target", "10"),
    ]
    .iter()
    .chain(annotations)
    {
        rev.metadata
            .annotations
            .insert(k.to_string(), v.to_string());
    }
    testing::insert(&ctx, &rev);
    (ctx, platform)
}

fn pa_of(ctx: &Context) -> PodAutoscaler {
    testing::fetch(ctx, NS, NAME)
}

fn cond(pa: &PodAutoscaler, t: &str) -> (ConditionStatus, String) {
    let c = pa.status.as_ref().unwrap().status.condition(t).unwrap();
    (c.status, c.reason.clone())
}

/// One second of wisp: the stats feed records `concurrency` spread over the ready
/// replicas (or nothing without replicas), then both reconcilers run.
fn second(ctx: &Context, pa: &PodAutoscalerReconciler, concurrency: f64) {
    let ready = ready_replicas(ctx, &key());
    if ready > 0 {
        let per = concurrency / f64::from(ready);
        let sample = Sample {
            pods: vec![
                PodStat {
                    average_concurrency: per,
                    ..Default::default()
                };
                ready as usize
            ],
            period: Duration::from_secs(1),
            ..Default::default()
        };
        ctx.scaling.record(&key(), ctx.scaling.now(), &sample);
    }
    pa.reconcile_name(ctx, NS, NAME).unwrap();
    RevisionReconciler::default()
        .reconcile_name(ctx, NS, NAME)
        .unwrap();
    advance(Duration::from_secs(1));
}

#[test]
fn a_new_pas_serverless_service_names_it_and_is_made_once() {
    let (ctx, _platform) = setup(&[]);
    let r = PodAutoscalerReconciler::new();
    let sks = &ctx.views.serverless_services;
    let before = sks.resource_version();
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    let pa = pa_of(&ctx);
    let held = sks.get(NS, NAME).expect("the SKS is shown");
    // Its owner is the PA as created (made before the PA was, it named no uid).
    assert_eq!(
        held["metadata"]["ownerReferences"][0]["uid"],
        pa.metadata.uid.as_str()
    );
    assert_eq!(sks.resource_version(), before + 1, "made once");
    // A reconcile that changes nothing the SKS is made of leaves it alone.
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    assert_eq!(sks.resource_version(), before + 1, "not made again");
}

#[test]
fn creates_the_pa_and_forgets_it_with_the_revision() {
    let (ctx, _platform) = setup(&[]);
    let r = PodAutoscalerReconciler::new();
    let action = r.reconcile_name(&ctx, NS, NAME).unwrap();
    // Initial scale 0 and no traffic: at rest, no tick until the activator pokes it.
    assert_eq!(action, Action::Done, "no tick at rest");
    let pa = pa_of(&ctx);
    let rev: Revision = testing::fetch(&ctx, NS, NAME);
    assert!(objects::is_controlled_by(&pa.metadata, &rev.metadata.uid));
    assert_eq!(pa.spec.reachability, "Reachable");
    let st = pa.status.as_ref().unwrap();
    assert_eq!((st.desired_scale, st.actual_scale), (Some(-1), Some(0)));
    // Initial scale 0: nothing to wait for, the PA is inactive at once.
    assert_eq!(
        cond(&pa, ACTIVE),
        (ConditionStatus::False, NO_TRAFFIC.into())
    );
    assert_eq!(
        cond(&pa, READY),
        (ConditionStatus::False, NO_TRAFFIC.into())
    );
    assert_eq!(ctx.scaling.scale(&key()).unwrap().replicas, 0);
    assert_eq!(ctx.scaling.mode(&key()), RoutingMode::Proxy);

    // Re-running changes nothing.
    let rv = ctx.store.current_revision();
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    assert_eq!(ctx.store.current_revision(), rv);

    // Watching: a revision event maps to the PA of the same name (for a reconciler that
    // has not reconciled it: see the next test for one that has).
    let obj = serde_json::to_value(&rev).unwrap();
    assert_eq!(
        PodAutoscalerReconciler::new().watched(&ctx, &kinds::REVISION, &obj),
        vec![(NS.to_string(), NAME.to_string())]
    );
    assert!(r.watched(&ctx, &kinds::ROUTE, &obj).is_empty());

    // Deleting the revision cascades to the PA; the next reconcile drops the state.
    objects::delete::<Revision>(&ctx.store, NS, NAME, None).unwrap();
    assert!(
        objects::get::<PodAutoscaler>(&ctx.store, NS, NAME)
            .unwrap()
            .is_none()
    );
    assert_eq!(r.reconcile_name(&ctx, NS, NAME).unwrap(), Action::Done);
    assert!(r.state(&key()).is_none());
    assert!(ctx.scaling.scale(&key()).is_none());
}

#[test]
fn a_revision_event_queues_its_pa_only_if_it_changed_what_the_pa_is_made_from() {
    let (ctx, _platform) = setup(&[]);
    let r = PodAutoscalerReconciler::new();
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    let rev: Revision = testing::fetch(&ctx, NS, NAME);
    let queued = |rev: &Revision| -> bool {
        let obj = serde_json::to_value(rev).unwrap();
        !r.watched(&ctx, &kinds::REVISION, &obj).is_empty()
    };
    let queued_deleted = |rev: &Revision| -> bool {
        let ev = testing::OwnedEvent::new(&kinds::REVISION, serde_json::to_value(rev).unwrap());
        !r.watches(&ctx, &ev.deleted().event()).is_empty()
    };

    // As reconciled, or with another status (each of the revision's status writes is an
    // event): nothing to do.
    assert!(!queued(&rev), "the revision as reconciled");
    let mut other_status = rev.clone();
    let st = other_status.status.get_or_insert_with(Default::default);
    st.actual_replicas = Some(0);
    st.desired_replicas = Some(3);
    st.status.observed_generation = 7;
    assert!(!queued(&other_status), "a status the PA does not read");

    // What the PA is made from: labels (routingState), annotations, the uid, the spec
    // (its generation), a deletion, and resources that failed with nothing up.
    let mut changed = Vec::new();
    let mut r1 = rev.clone();
    r1.metadata.labels.insert(
        crate::names::label::ROUTING_STATE.into(),
        crate::names::routing_state::RESERVE.into(),
    );
    changed.push(("routingState", r1));
    let mut r2 = rev.clone();
    r2.metadata
        .annotations
        .insert("autoscaling.knative.dev/target".into(), "3".into());
    changed.push(("an annotation", r2));
    let mut r3 = rev.clone();
    r3.metadata.uid = "another".into();
    changed.push(("the uid", r3));
    let mut r4 = rev.clone();
    r4.metadata.generation += 1;
    changed.push(("the generation", r4));
    let mut r5 = rev.clone();
    r5.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
    changed.push(("a deletion timestamp", r5));
    let mut r6 = rev.clone();
    let st = r6.status.get_or_insert_with(Default::default);
    st.actual_replicas = Some(0);
    crate::conditions::set(
        &mut st.status,
        crate::revision::resources::RESOURCES_AVAILABLE,
        ConditionStatus::False,
        "ProgressDeadlineExceeded",
        "gave up",
        clock(),
    );
    changed.push(("resources failed with nothing up", r6));
    for (what, rev) in &changed {
        assert!(queued(rev), "{what}");
    }
    assert!(queued_deleted(&rev), "the revision deleted");

    // Resources waiting for a ConfigMap (not given up on): the PA's reachability is what
    // it was.
    let mut waiting = rev.clone();
    let st = waiting.status.get_or_insert_with(Default::default);
    crate::conditions::set(
        &mut st.status,
        crate::revision::resources::RESOURCES_AVAILABLE,
        ConditionStatus::False,
        wisp_runtime::podconfig::WAITING_REASONS[0],
        "waiting",
        clock(),
    );
    assert!(!queued(&waiting), "waiting for a ConfigMap");

    // Once reconciled as changed, the same again is nothing to do.
    let (what, r1) = &changed[0];
    objects::update(&ctx.store, r1).unwrap();
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    let stored: Revision = testing::fetch(&ctx, NS, NAME);
    assert!(!queued(&stored), "{what} again, after its reconcile");
    // A revision it forgot (gone) or never reconciled is queued.
    r.reconcile_name(&ctx, NS, "gone").unwrap();
    assert!(queued(&testing::revision(NS, "gone", "auto", 1)));
}

#[test]
fn poke_scales_from_zero_load_scales_out_idle_scales_to_zero() {
    let (ctx, platform) = setup(&[]);
    let r = PodAutoscalerReconciler::new();
    second(&ctx, &r, 0.0);
    assert_eq!(platform.scale_of(&key()), Some(0));

    // A request arrives: the activator pokes; the PA decides at once (not at the tick).
    assert!(ctx.scaling.poke(&key()));
    advance(Duration::from_millis(100));
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    assert_eq!(ctx.scaling.scale(&key()).unwrap().replicas, 1);
    assert_eq!(
        cond(&pa_of(&ctx), ACTIVE),
        (ConditionStatus::Unknown, QUEUED.into())
    );
    RevisionReconciler::default()
        .reconcile_name(&ctx, NS, NAME)
        .unwrap();
    assert_eq!(platform.scale_of(&key()), Some(1));
    r.reconcile_name(&ctx, NS, NAME).unwrap();
    assert_eq!(
        cond(&pa_of(&ctx), ACTIVE),
        (ConditionStatus::True, String::new())
    );

    // 50 steady concurrent requests: ⌈50/7⌉ = 8 replicas.
    for _ in 0..12 {
        second(&ctx, &r, 50.0);
    }
    assert_eq!(platform.scale_of(&key()), Some(8));
    let pa = pa_of(&ctx);
    let st = pa.status.as_ref().unwrap();
    assert_eq!((st.desired_scale, st.actual_scale), (Some(8), Some(8)));
    let rev: Revision = testing::fetch(&ctx, NS, NAME);
    let rst = rev.status.unwrap();
    assert_eq!(
        (rst.desired_replicas, rst.actual_replicas),
        (Some(8), Some(8))
    );
    assert_eq!(
        ctx.scaling.mode(&key()),
        RoutingMode::Proxy,
        "TBC 211 > spare capacity"
    );

    // Idle: down by at most half per tick, then the scale-to-zero sequence.
    let mut seen_zero_at = None;
    for i in 0..40 {
        second(&ctx, &r, 0.0);
        if platform.scale_of(&key()) == Some(0) {
            seen_zero_at = Some(i);
            break;
        }
    }
    let at = seen_zero_at.expect("scaled to zero within 40 s");
    assert!(
        at >= 8,
        "not before a stable window and the grace period: {at}"
    );
    let pa = pa_of(&ctx);
    assert_eq!(
        cond(&pa, ACTIVE),
        (ConditionStatus::False, NO_TRAFFIC.into())
    );
    assert_eq!(pa.status.as_ref().unwrap().desired_scale, Some(0));
}

#[test]
fn sudden_jump_panics() {
    let (ctx, platform) = setup(&[("autoscaling.knative.dev/initial-scale", "1")]);
    let r = PodAutoscalerReconciler::new();
    for _ in 0..8 {
        second(&ctx, &r, 5.0);
    }
    assert_eq!(platform.scale_of(&key()), Some(1));
    // 5 → 100 concurrent: the panic window sees it first.
    second(&ctx, &r, 100.0);
    second(&ctx, &r, 100.0);
    let st = r.state(&key()).unwrap();
    assert!(st.panic_mode, "panicking");
    assert!(
        platform.scale_of(&key()).unwrap() >= 8,
        "{:?}",
        platform.scale_of(&key())
    );
}

#[test]
fn min_and_max_scale_bound_the_decision() {
    let (ctx, platform) = setup(&[
        ("autoscaling.knative.dev/min-scale", "2"),
        ("autoscaling.knative.dev/max-scale", "3"),
    ]);
    let r = PodAutoscalerReconciler::new();
    second(&ctx, &r, 0.0);
    assert_eq!(
        platform.scale_of(&key()),
        Some(2),
        "min-scale from the start"
    );
    for _ in 0..6 {
        second(&ctx, &r, 100.0);
    }
    assert_eq!(platform.scale_of(&key()), Some(3), "capped at max-scale");
    for _ in 0..30 {
        second(&ctx, &r, 0.0);
    }
    assert_eq!(platform.scale_of(&key()), Some(2), "never below min-scale");
}
