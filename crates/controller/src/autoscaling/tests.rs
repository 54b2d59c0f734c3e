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

    // Watching: a revision event maps to the PA of the same name.
    let obj = serde_json::to_value(&rev).unwrap();
    assert_eq!(
        r.watched(&ctx, &kinds::REVISION, &obj),
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
