use super::*;
use crate::conditions;
use crate::testing::{self, test_clock};
use wisp_api::{
    config::AutoscalerConfig,
    meta::{ConditionStatus::*, Status},
    serving::RevisionStatus,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn rev(annotations: &[(&str, &str)], routing: Option<&str>) -> Revision {
    let mut r = testing::revision("default", "hello-00001", "hello", 1);
    r.metadata.uid = "rev-uid".into();
    for (k, v) in annotations {
        r.metadata.annotations.insert(k.to_string(), v.to_string());
    }
    if let Some(s) = routing {
        r.metadata
            .labels
            .insert(label::ROUTING_STATE.into(), s.into());
    }
    r
}

#[test]
fn pa_of_a_revision() {
    let mut r = rev(
        &[
            ("autoscaling.knative.dev/target", "10"),
            (LAST_APPLIED, "{}"),
        ],
        Some("active"),
    );
    r.spec.container_concurrency = Some(5);
    let pa = make_pa(&r);
    assert_eq!(pa.api_version, "autoscaling.internal.knative.dev/v1alpha1");
    assert_eq!(pa.kind, "PodAutoscaler");
    assert_eq!(
        (pa.metadata.namespace.as_str(), pa.metadata.name.as_str()),
        ("default", "hello-00001")
    );
    assert_eq!(pa.metadata.labels[label::REVISION], "hello-00001");
    assert_eq!(pa.metadata.labels[label::REVISION_UID], "rev-uid");
    assert_eq!(pa.metadata.labels[label::CONFIGURATION], "hello");
    assert_eq!(
        pa.metadata.annotations["autoscaling.knative.dev/target"],
        "10"
    );
    assert!(!pa.metadata.annotations.contains_key(LAST_APPLIED));
    let owner = objects::controller_of(&pa.metadata).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Revision", "hello-00001", "rev-uid")
    );
    assert_eq!(pa.spec.container_concurrency, Some(5));
    assert_eq!(pa.spec.reachability, "Reachable");
    assert_eq!(pa.spec.protocol_type, "http1");
    assert_eq!(
        pa.spec.scale_target_ref,
        Some(serde_json::json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": "hello-00001"
        }))
    );
    assert_eq!(make_pa(&rev(&[], None)).spec.container_concurrency, Some(0));
}

#[test]
fn reachability_table() {
    // Resources failed (progress deadline, nothing runnable) vs. a crash loop, which keeps
    // being restarted like a Deployment in CrashLoopBackOff.
    let with = |actual: i32, condition: &str, reason: &str| {
        let mut r = rev(&[], Some("active"));
        let mut st = Status::default();
        conditions::set(&mut st, condition, False, reason, "boom", test_clock());
        conditions::set(&mut st, READY, False, reason, "boom", test_clock());
        r.status = Some(RevisionStatus {
            status: st,
            actual_replicas: Some(actual),
            ..Default::default()
        });
        r
    };
    let failed = with;
    let cases = [
        ("active", rev(&[], Some("active")), REACHABLE),
        ("reserve", rev(&[], Some("reserve")), UNREACHABLE),
        ("pending", rev(&[], Some("pending")), ""),
        ("unset", rev(&[], None), ""),
        (
            "resources failed, nothing ready",
            failed(0, "ResourcesAvailable", "ProgressDeadlineExceeded"),
            UNREACHABLE,
        ),
        (
            "waiting for a Secret: the kubelet keeps retrying",
            failed(0, "ResourcesAvailable", "CreateContainerConfigError"),
            REACHABLE,
        ),
        (
            "resources failed, one ready",
            failed(1, "ResourcesAvailable", "ProgressDeadlineExceeded"),
            REACHABLE,
        ),
        (
            "crash-looping, nothing ready",
            failed(0, "ContainerHealthy", "ExitCode1"),
            REACHABLE,
        ),
    ];
    for (name, r, want) in cases {
        assert_eq!(reachability(&r), want, "{name}");
    }
    let mut h2 = rev(&[], None);
    h2.spec.pod.containers[0].ports[0].name = "h2c".into();
    assert_eq!(protocol_type(&h2), "h2c");
}

#[test]
fn pa_follows_the_revision() {
    let r = rev(&[], Some("active"));
    let pa = make_pa(&r);
    assert_eq!(reconcile_pa(&pa, &pa), None);
    let reserve = make_pa(&rev(&[], Some("reserve")));
    let mut stored = pa.clone();
    stored.status = Some(PodAutoscalerStatus {
        desired_scale: Some(3),
        ..Default::default()
    });
    let updated = reconcile_pa(&stored, &reserve).unwrap();
    assert_eq!(updated.spec.reachability, UNREACHABLE);
    assert_eq!(updated.metadata.labels[label::ROUTING_STATE], "reserve");
    assert_eq!(updated.status, stored.status, "status kept");
}

#[test]
fn spec_and_initial_replicas() {
    let cfg = Config::default();
    let pa = make_pa(&rev(
        &[
            ("autoscaling.knative.dev/target", "10"),
            ("autoscaling.knative.dev/min-scale", "2"),
            ("autoscaling.knative.dev/initial-scale", "1"),
        ],
        Some("active"),
    ));
    let spec = decider_spec(&pa, &cfg);
    assert_eq!(spec.target_value, 7.0);
    assert!(spec.reachable);
    assert_eq!(initial_replicas(&spec), 2, "raised to min-scale");

    let pa = make_pa(&rev(
        &[("autoscaling.knative.dev/min-scale", "2")],
        Some("reserve"),
    ));
    let spec = decider_spec(&pa, &cfg);
    assert!(!spec.reachable);
    assert_eq!(initial_replicas(&spec), 0);

    type Case = (
        &'static [(&'static str, &'static str)],
        AutoscalerConfig,
        u32,
    );
    let cases: [Case; 4] = [
        (&[], AutoscalerConfig::default(), 1),
        (
            &[("autoscaling.knative.dev/initial-scale", "0")],
            AutoscalerConfig {
                allow_zero_initial_scale: true,
                ..Default::default()
            },
            0,
        ),
        (
            &[("autoscaling.knative.dev/initial-scale", "0")],
            AutoscalerConfig::default(),
            1,
        ),
        (
            &[
                ("autoscaling.knative.dev/initial-scale", "5"),
                ("autoscaling.knative.dev/max-scale", "3"),
            ],
            AutoscalerConfig::default(),
            3,
        ),
    ];
    for (ann, autoscaler, want) in cases {
        let cfg = Config {
            autoscaler,
            ..Config::default()
        };
        let spec = decider_spec(&make_pa(&rev(ann, None)), &cfg);
        assert_eq!(initial_replicas(&spec), want, "{ann:?}");
    }
}

fn short_spec() -> DeciderSpec {
    let cfg = AutoscalerConfig {
        stable_window: wisp_api::duration::GoDuration::parse("6s").unwrap(),
        scale_to_zero_grace_period: wisp_api::duration::GoDuration::parse("2s").unwrap(),
        ..Default::default()
    };
    let mut a = std::collections::BTreeMap::new();
    a.insert(
        "autoscaling.knative.dev/target".to_string(),
        "10".to_string(),
    );
    DeciderSpec::resolve(&a, 0, &cfg)
}

#[test]
fn ticks_every_two_seconds_and_decides_on_a_poke_at_zero() {
    let spec = short_spec();
    let t0 = secs(1000);
    let mut st = KpaState::new("u", spec.clone(), t0, secs(600));
    assert_eq!((st.replicas, st.desired), (1, SCALE_UNKNOWN));

    // First step: a tick, but no data: nothing decided, the initial replica stays.
    let s = st.step(t0, &spec, 0, None, false);
    assert_eq!(s.decision, None);
    assert_eq!(s.result.replicas, None);
    assert_eq!(s.next_tick, Some(secs(2)));
    assert_eq!(s.result.active, ActiveState::Activating);

    // One second later with data: not due yet.
    let s = st.step(t0 + secs(1), &spec, 1, Some((50.0, 50.0)), false);
    assert_eq!(s.decision, None);
    assert_eq!(s.next_tick, Some(secs(1)));
    assert_eq!(s.result.active, ActiveState::Active);

    // Due: 50 concurrent / 7 per pod ⇒ 8.
    let s = st.step(t0 + secs(2), &spec, 1, Some((50.0, 50.0)), false);
    assert_eq!(s.decision.unwrap().desired_scale, 8);
    assert_eq!(s.result.replicas, Some(8));
    assert_eq!(st.replicas, 8);
    let p = st.published(&s.result, 1);
    assert_eq!((p.replicas, p.want), (8, 8));

    // A poke while replicas run does not decide off-tick.
    let s = st.step(t0 + secs(3), &spec, 8, Some((0.0, 0.0)), true);
    assert_eq!(s.decision, None);
}

#[test]
fn idle_revision_goes_to_zero_then_wakes_on_a_poke() {
    let spec = short_spec();
    let t0 = secs(1000);
    let mut st = KpaState::new("u", spec.clone(), t0, secs(600));
    let mut t = t0;
    let mut zero_at = None;
    // Idle from the start, one ready replica reporting zeros.
    for _ in 0..20 {
        let s = st.step(
            t,
            &spec,
            u32::from(st.replicas > 0),
            Some((0.0, 0.0)),
            false,
        );
        if st.replicas == 0 && zero_at.is_none() {
            zero_at = Some(t - t0);
            assert_eq!(s.result.active, ActiveState::Inactive);
            assert!(s.result.activator_in_path);
            assert_eq!(s.result.want, 0);
        }
        t += secs(1);
    }
    // Active for a stable window (6 s), then inactive; the activator has been in the path
    // (TBC 211 > spare capacity) for longer than the grace period, so zero follows at once.
    let zero_at = zero_at.expect("scaled to zero");
    assert!(zero_at >= secs(6) && zero_at <= secs(10), "{zero_at:?}");

    // A poke right after a tick decides at once.
    let s = st.step(t, &spec, 0, Some((1.0, 1.0)), true);
    assert_eq!(s.decision.unwrap().desired_scale, 1);
    assert_eq!(s.result.replicas, Some(1));
    assert_eq!(s.result.active, ActiveState::Activating);
}

#[test]
fn uid_and_spec_changes() {
    let spec = short_spec();
    let mut st = KpaState::new("u", spec.clone(), secs(0), secs(600));
    let mut unreachable = spec.clone();
    unreachable.reachable = false;
    st.step(secs(0), &unreachable, 1, Some((0.0, 0.0)), false);
    assert_eq!(st.spec, unreachable);
}

#[test]
fn status_from_scale_results() {
    let pa = make_pa(&rev(&[], Some("active")));
    let result = |active, init, want| ScaleResult {
        replicas: None,
        want,
        active,
        scale_target_initialized: init,
        activator_in_path: false,
    };
    type Row = (
        &'static str,
        ScaleResult,
        u32,
        (wisp_api::meta::ConditionStatus, &'static str),
        (wisp_api::meta::ConditionStatus, &'static str),
        wisp_api::meta::ConditionStatus,
    );
    let cases: [Row; 5] = [
        (
            "activating",
            result(ActiveState::Activating, false, -1),
            0,
            (Unknown, QUEUED),
            (Unknown, QUEUED),
            Unknown,
        ),
        (
            "active",
            result(ActiveState::Active, true, 3),
            3,
            (True, ""),
            (True, ""),
            True,
        ),
        (
            "no traffic",
            result(ActiveState::Inactive, true, 0),
            0,
            (False, NO_TRAFFIC),
            (False, NO_TRAFFIC),
            True,
        ),
        (
            "timed out",
            result(ActiveState::TimedOut, false, 0),
            0,
            (False, TIMED_OUT),
            (False, TIMED_OUT),
            Unknown,
        ),
        (
            "inactive before initialised",
            result(ActiveState::Inactive, false, -1),
            0,
            (False, NO_TRAFFIC),
            (False, NO_TRAFFIC),
            Unknown,
        ),
    ];
    for (name, r, ready, active, ready_cond, init) in cases {
        let st = compute_status(None, &pa, &r, ready, test_clock());
        let c = |t: &str| {
            let c = st.status.condition(t).unwrap();
            (c.status, c.reason.clone())
        };
        assert_eq!(c(ACTIVE), (active.0, active.1.to_string()), "{name}");
        assert_eq!(c(READY), (ready_cond.0, ready_cond.1.to_string()), "{name}");
        assert_eq!(c(SCALE_TARGET_INITIALIZED).0, init, "{name}");
        assert_eq!(c(SKS_READY).0, True, "{name}");
        assert_eq!(st.desired_scale, Some(r.want), "{name}");
        assert_eq!(st.actual_scale, Some(ready as i32), "{name}");
        assert_eq!(st.service_name, "hello-00001");
    }
    // Messages are Knative's.
    let st = compute_status(
        None,
        &pa,
        &result(ActiveState::Activating, false, 1),
        0,
        test_clock(),
    );
    assert_eq!(st.status.condition(ACTIVE).unwrap().message, QUEUED_MESSAGE);
    // Re-computing the same status changes nothing (no write).
    let again = compute_status(
        Some(&st),
        &pa,
        &result(ActiveState::Activating, false, 1),
        0,
        test_clock() + chrono::Duration::seconds(5),
    );
    assert_eq!(again, st);
}

#[test]
fn a_revision_at_rest_at_zero_needs_no_tick_until_poked() {
    let mut spec = short_spec();
    spec.initial_scale = 0;
    let t0 = secs(1000);
    let mut st = KpaState::new("u", spec.clone(), t0, secs(600));
    assert_eq!(st.replicas, 0);
    // (step at, ready, observed, poked) → (a tick planned?, replicas to run)
    let cases = [
        // Nothing runs, nothing wanted, no traffic: at rest.
        (t0, 0, None, false, false, 0),
        (t0 + secs(5), 0, Some((0.0, 0.0)), false, false, 0),
        // A poke with a request seen: it scales up, and from then on it ticks.
        (t0 + secs(6), 0, Some((1.0, 1.0)), true, true, 1),
    ];
    for (i, (at, ready, observed, poked, ticks, replicas)) in cases.into_iter().enumerate() {
        let s = st.step(at, &spec, ready, observed, poked);
        assert_eq!(s.next_tick.is_some(), ticks, "case {i}");
        assert_eq!(st.replicas, replicas, "case {i}");
    }
}

#[test]
fn a_pa_reconciled_before_a_restart_resumes_from_its_status() {
    let cfg = Config::default();
    let mut pa = make_pa(&rev(&[], Some("active")));
    let now = secs(1000);
    assert_eq!(
        KpaState::for_pa(&pa, "rev-uid", &cfg, now).replicas,
        1,
        "a new PA starts at initial-scale"
    );
    // (desiredScale, Active, scale target initialized) in the stored status → replicas,
    // and whether a step with no data then plans no tick (at rest at zero).
    for (want, active, initialized, replicas, at_rest) in [
        (0, ActiveState::Inactive, true, 0, true),
        (3, ActiveState::Active, true, 3, false),
        // Not initialized, or unknown: as a new PA.
        (0, ActiveState::Inactive, false, 1, false),
        (-1, ActiveState::Inactive, true, 1, false),
    ] {
        let result = ScaleResult {
            replicas: None,
            want,
            active,
            scale_target_initialized: initialized,
            activator_in_path: want == 0,
        };
        pa.status = Some(compute_status(None, &pa, &result, 0, test_clock()));
        let mut st = KpaState::for_pa(&pa, "rev-uid", &cfg, now);
        let case = format!("{want} {active:?} {initialized}");
        assert_eq!(st.replicas, replicas, "{case}");
        let spec = st.spec.clone();
        let step = st.step(now, &spec, 0, None, false);
        assert_eq!(step.next_tick.is_none(), at_rest, "{case}");
        assert_eq!(st.replicas, replicas, "{case}: no data changes nothing");
        if initialized && want >= 0 {
            assert_eq!(
                step.result.want, want,
                "{case}: the status's desiredScale stands"
            );
        }
    }
}

#[test]
fn hpa_class_pa() {
    let mut cfg = Config::default();
    let hpa = [
        (
            "autoscaling.knative.dev/class",
            "hpa.autoscaling.knative.dev",
        ),
        ("autoscaling.knative.dev/min-scale", "2"),
        ("autoscaling.knative.dev/max-scale", "4"),
    ];
    let mut pa = make_pa(&rev(&hpa, Some("active")));
    assert!(is_hpa_class(&pa, &cfg));
    assert!(!is_hpa_class(&make_pa(&rev(&[], None)), &cfg));
    cfg.autoscaler.pod_autoscaler_class = wisp_api::config::HPA_CLASS.into();
    assert!(
        is_hpa_class(&make_pa(&rev(&[], None)), &cfg),
        "the config's default class"
    );
    let spec = hpa_spec(&pa, &cfg);
    assert_eq!((spec.min_replicas, spec.max_replicas), (2, 4));
    assert_eq!(
        hpa_initial_replicas(&pa, &cfg, &spec),
        2,
        "initial 1 within [2, 4]"
    );
    assert_eq!(hpa_active_threshold(&pa, &cfg), 2);

    // Status: Active always; initialized once the replicas reach the threshold.
    let st = compute_hpa_status(None, &pa, 2, 1, 2, test_clock());
    assert!(conditions::is_true(&st.status, ACTIVE));
    assert!(conditions::is_true(&st.status, SKS_READY));
    assert!(!conditions::is_true(&st.status, SCALE_TARGET_INITIALIZED));
    assert!(!conditions::is_true(&st.status, READY));
    assert_eq!((st.desired_scale, st.actual_scale), (Some(2), Some(1)));
    let st = compute_hpa_status(Some(&st), &pa, 3, 2, 2, test_clock());
    assert!(conditions::is_true(&st.status, SCALE_TARGET_INITIALIZED));
    assert!(conditions::is_true(&st.status, READY));
    // Once initialized it stays so, whatever the replicas.
    let st = compute_hpa_status(Some(&st), &pa, 3, 0, 2, test_clock());
    assert!(conditions::is_true(&st.status, SCALE_TARGET_INITIALIZED));

    // A restart resumes from the stored desiredScale.
    pa.status = Some(st);
    assert_eq!(hpa_initial_replicas(&pa, &cfg, &spec), 3);
    assert_eq!(
        hpa_active_threshold(&pa, &cfg),
        2,
        "max(min-scale, 1) once initialized"
    );
}
