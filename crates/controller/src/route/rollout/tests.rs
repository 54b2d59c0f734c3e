//! Table tests of the rollout steps, ported from Knative's
//! `pkg/reconciler/route/traffic/rollout_test.go`, and a rollout played through time.

use super::*;

fn rev(name: &str, percent: i64) -> RevisionRollout {
    RevisionRollout {
        revision_name: name.into(),
        percent,
    }
}

fn cfg(name: &str, percent: i64, revs: Vec<RevisionRollout>) -> ConfigurationRollout {
    ConfigurationRollout {
        configuration_name: name.into(),
        percent,
        revisions: revs,
        ..Default::default()
    }
}

fn started(mut c: ConfigurationRollout, start: i64) -> ConfigurationRollout {
    c.step_params.start_time = start;
    c
}

fn ro(configurations: Vec<ConfigurationRollout>) -> Rollout {
    Rollout { configurations }
}

const NOW: i64 = 200620092020;

#[test]
fn step_merges_the_wanted_state_with_the_previous_one() {
    type Case = (&'static str, Rollout, Option<Rollout>, Rollout);
    let cases: Vec<Case> = vec![
        ("no prev", ro(vec![]), None, ro(vec![])),
        (
            "prev is empty",
            ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])]),
            Some(ro(vec![cfg("mick", 100, vec![])])),
            ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])]),
        ),
        (
            "simplest, same",
            ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])]),
            Some(ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])])),
            ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])]),
        ),
        (
            "when new revision becomes 0%",
            ro(vec![cfg("charlie", 0, vec![rev("aftermath", 0)])]),
            Some(ro(vec![cfg(
                "charlie",
                100,
                vec![rev("your-satanic-majesties-request", 100)],
            )])),
            ro(vec![]),
        ),
        (
            "simplest, roll",
            ro(vec![cfg("mick", 100, vec![rev("let-it-bleed", 100)])]),
            Some(ro(vec![cfg("mick", 100, vec![rev("goat-head-soup", 100)])])),
            ro(vec![started(
                cfg(
                    "mick",
                    100,
                    vec![rev("goat-head-soup", 99), rev("let-it-bleed", 1)],
                ),
                NOW,
            )]),
        ),
        (
            "roll with percentage change down",
            ro(vec![cfg("mick", 33, vec![rev("let-it-bleed", 33)])]),
            Some(ro(vec![cfg(
                "mick",
                42,
                vec![rev("goat-head-soup", 11), rev("aftermath", 31)],
            )])),
            ro(vec![started(
                cfg(
                    "mick",
                    33,
                    vec![
                        rev("goat-head-soup", 2),
                        rev("aftermath", 30),
                        rev("let-it-bleed", 1),
                    ],
                ),
                NOW,
            )]),
        ),
        (
            "roll with percentage change up",
            ro(vec![cfg("mick", 75, vec![rev("let-it-bleed", 75)])]),
            Some(ro(vec![cfg(
                "mick",
                25,
                vec![rev("goat-head-soup", 11), rev("aftermath", 14)],
            )])),
            ro(vec![started(
                cfg(
                    "mick",
                    75,
                    vec![
                        rev("goat-head-soup", 11),
                        rev("aftermath", 63),
                        rev("let-it-bleed", 1),
                    ],
                ),
                NOW,
            )]),
        ),
        (
            "superseded: a newer revision during a rollout joins it, newest drained first",
            ro(vec![cfg("mick", 100, vec![rev("sticky-fingers", 100)])]),
            Some(ro(vec![started(
                cfg(
                    "mick",
                    100,
                    vec![rev("goat-head-soup", 95), rev("beggars-banquet", 5)],
                ),
                NOW - 1982,
            )])),
            ro(vec![started(
                cfg(
                    "mick",
                    100,
                    vec![
                        rev("goat-head-soup", 95),
                        rev("beggars-banquet", 4),
                        rev("sticky-fingers", 1),
                    ],
                ),
                NOW,
            )]),
        ),
        (
            "roll with delete (two fast successive rolls)",
            ro(vec![cfg(
                "mick",
                100,
                vec![rev("between-the-buttons", 100)],
            )]),
            Some(ro(vec![started(
                cfg(
                    "mick",
                    100,
                    vec![rev("goat-head-soup", 99), rev("bridges-to-babylon", 1)],
                ),
                NOW - 1984,
            )])),
            ro(vec![started(
                cfg(
                    "mick",
                    100,
                    vec![rev("goat-head-soup", 99), rev("between-the-buttons", 1)],
                ),
                NOW,
            )]),
        ),
        (
            "roll with delete (minimal config target)",
            ro(vec![cfg("mick", 1, vec![rev("between-the-buttons", 1)])]),
            Some(ro(vec![cfg("mick", 1, vec![rev("bridges-to-babylon", 1)])])),
            ro(vec![cfg("mick", 1, vec![rev("between-the-buttons", 1)])]),
        ),
        (
            "deleted config, no roll",
            ro(vec![cfg(
                "mick",
                100,
                vec![rev("its-only-rock-n-roll", 100)],
            )]),
            Some(ro(vec![
                cfg("keith", 50, vec![rev("black-on-blue", 50)]),
                cfg("mick", 50, vec![rev("its-only-rock-n-roll", 50)]),
            ])),
            ro(vec![cfg(
                "mick",
                100,
                vec![rev("its-only-rock-n-roll", 100)],
            )]),
        ),
        (
            "a/b config, roll both (the 1% one does not roll)",
            ro(vec![
                cfg("keith", 99, vec![rev("black-on-blue", 99)]),
                cfg("mick", 1, vec![rev("its-only-rock-n-roll", 1)]),
            ]),
            Some(ro(vec![
                cfg("keith", 99, vec![rev("cant-get-no-satisfaction", 99)]),
                cfg("mick", 1, vec![rev("get-off-my-cloud", 1)]),
            ])),
            ro(vec![
                started(
                    cfg(
                        "keith",
                        99,
                        vec![rev("cant-get-no-satisfaction", 98), rev("black-on-blue", 1)],
                    ),
                    NOW,
                ),
                cfg("mick", 1, vec![rev("its-only-rock-n-roll", 1)]),
            ]),
        ),
        (
            "new config, no roll",
            ro(vec![
                cfg("keith", 50, vec![rev("black-on-blue", 50)]),
                cfg("mick", 50, vec![rev("its-only-rock-n-roll", 50)]),
            ]),
            Some(ro(vec![cfg(
                "mick",
                100,
                vec![rev("its-only-rock-n-roll", 100)],
            )])),
            ro(vec![
                cfg("keith", 50, vec![rev("black-on-blue", 50)]),
                cfg("mick", 50, vec![rev("its-only-rock-n-roll", 50)]),
            ]),
        ),
        (
            "rollback: pinning to a revision leaves no latest target, the rollout ends",
            ro(vec![]),
            Some(ro(vec![started(
                cfg("mick", 100, vec![rev("old", 60), rev("new", 40)]),
                NOW - 5,
            )])),
            ro(vec![]),
        ),
    ];
    for (what, cur, prev, want) in cases {
        let (got, _) = cur.step(prev, NOW);
        assert_eq!(got, want, "{what}");
        assert!(got.validate(), "{what}: {got:?}");
    }
}

#[test]
fn new_tag_starts_at_its_revision() {
    let mut tagged = cfg("mick", 100, vec![rev("black-on-blue", 100)]);
    tagged.tag = "jagger".into();
    let cur = ro(vec![
        cfg("mick", 100, vec![rev("black-on-blue", 100)]),
        tagged.clone(),
    ]);
    let prev = ro(vec![cfg("mick", 100, vec![rev("black-on-blue", 100)])]);
    let (got, next) = cur.clone().step(Some(prev), NOW);
    assert_eq!(got, cur);
    assert_eq!(next, 0);
}

#[test]
fn observe_ready_sizes_the_steps() {
    const NOW: i64 = 200620092020 + 1982;
    const OLDEN: i64 = 198219841988;
    let with = |name: &str, percent, params: RolloutParams| ConfigurationRollout {
        configuration_name: name.into(),
        percent,
        step_params: params,
        ..Default::default()
    };
    let p = |start, dur, size, next| RolloutParams {
        start_time: start,
        step_duration: dur,
        step_size: size,
        next_step_time: next,
    };
    let mut r = ro(vec![
        with("has-step", 100, p(0, 11, 0, 0)),
        with("no-step-no-begin", 100, p(0, 0, 0, 0)),
        with("step-begin < 1s", 100, p(200620092020, 0, 0, 0)),
        with("step-begin > 1s", 100, p(OLDEN, 0, 0, 0)),
        with("step size round up", 75, p(OLDEN, 0, 0, 0)),
        with("percent not 100%", 50, p(OLDEN, 0, 0, 0)),
    ]);
    r.observe_ready(NOW, 120.0);
    let want = ro(vec![
        with("has-step", 100, p(0, 11, 0, 0)),
        with("no-step-no-begin", 100, p(0, 0, 0, 0)),
        // 1s for the first 1%: 119s over 99 steps of 1%.
        with(
            "step-begin < 1s",
            100,
            p(200620092020, 1_202_020_202, 1, NOW + 1_202_020_202),
        ),
        // The first 1% took 3s (2.4s rounded up): 117s left, 39 steps of 3s.
        with(
            "step-begin > 1s",
            100,
            p(OLDEN, 3 * SECOND, 3, NOW + 3 * SECOND),
        ),
        with(
            "step size round up",
            75,
            p(OLDEN, 3 * SECOND, 2, NOW + 3 * SECOND),
        ),
        with(
            "percent not 100%",
            50,
            p(OLDEN, 3 * SECOND, 1, NOW + 3 * SECOND),
        ),
    ]);
    assert_eq!(r, want);
}

#[test]
fn step_size_and_interval_from_duration() {
    // (duration s, percent) → (step size, step duration ns), the first 1% having taken 1s.
    let cases = [
        (6, 100, 20, SECOND),             // 1 → 21 → 41 → 61 → 81 → 100
        (2, 100, 99, SECOND),             // one step after the first 1%
        (101, 100, 1, 100 * SECOND / 99), // 99 steps of 1%
        (380, 100, 1, 379 * SECOND / 99),
        (11, 50, 5, SECOND),     // 49% left in 10 steps of 5 (rounded)
        (30, 2, 1, 29 * SECOND), // 1% left: one step
    ];
    for (duration, percent, size, step) in cases {
        let mut c = started(cfg("c", percent, vec![]), NOW);
        c.compute_properties(NOW, 1.0, duration as f64);
        assert_eq!(
            (c.step_params.step_size, c.step_params.step_duration),
            (size, step),
            "{duration}s at {percent}%"
        );
    }
}

#[test]
fn adjust_percentage_cases() {
    let revs = |ps: &[i64]| ps.iter().map(|p| rev("", *p)).collect::<Vec<_>>();
    /// (what, goal, previous share, previous revisions' percents, wanted percents).
    type Case = (&'static str, i64, i64, &'static [i64], &'static [i64]);
    let cases: [Case; 7] = [
        ("noop, 100%", 100, 100, &[71, 29], &[71, 29]),
        ("noop, 42%", 42, 42, &[21, 21], &[21, 21]),
        ("raise, 42% -> 75%", 75, 42, &[21, 21], &[21, 54]),
        ("lower, 75%->42%, lose 1", 42, 75, &[21, 54], &[42]),
        (
            "lower, 75%->42%, lose 1, update 2, keep 3",
            42,
            75,
            &[21, 22, 32],
            &[10, 32],
        ),
        (
            "lower, 75%->42%, lose 2, update 3",
            42,
            75,
            &[10, 5, 60],
            &[42],
        ),
        ("go to 0%", 0, 75, &[10, 5, 60], &[]),
    ];
    for (what, goal, percent, prev, want) in cases {
        let mut c = cfg("c", percent, revs(prev));
        adjust_percentage(goal, &mut c);
        assert_eq!(c.revisions, revs(want), "{what}");
    }
}

#[test]
fn step_revisions_cases() {
    let with = |percent, revs: &[i64], next, size, dur, start| ConfigurationRollout {
        percent,
        revisions: revs.iter().map(|p| rev("", *p)).collect(),
        step_params: RolloutParams {
            start_time: start,
            next_step_time: next,
            step_size: size,
            step_duration: dur,
        },
        ..Default::default()
    };
    let cases = [
        (
            "noop: too soon",
            1982,
            with(75, &[10, 5, 60], 1984, 10, 0, 0),
            with(75, &[10, 5, 60], 1984, 10, 0, 0),
        ),
        (
            "noop: done",
            1982,
            with(10, &[10], 1984, 10, 10, 0),
            with(10, &[10], 1984, 10, 10, 0),
        ),
        (
            "step last, exact time",
            1984,
            with(90, &[30, 60], 1984, 10, 55, 0),
            with(90, &[20, 70], 1984 + 55, 10, 55, 0),
        ),
        (
            "step last, delete some",
            1988,
            with(90, &[22, 5, 3, 60], 1984, 10, 55, 0),
            with(90, &[20, 70], 1988 + 55, 10, 55, 0),
        ),
        (
            "over target now",
            1988,
            with(15, &[5, 1, 1, 8], 1984, 10, 77, 0),
            with(15, &[15], 0, 0, 0, 0),
        ),
        (
            "the very last step",
            2006,
            with(15, &[5, 1, 1, 8], 1984, 8, 77, 1977),
            with(15, &[15], 0, 0, 0, 0),
        ),
    ];
    for (what, now, mut c, want) in cases {
        step_revisions(&mut c, now);
        assert_eq!(c, want, "{what}");
    }
}

#[test]
fn validate_and_parse() {
    let bad = [
        ro(vec![cfg("keith", 101, vec![rev("a", 101)])]),
        ro(vec![cfg("keith", 42, vec![rev("a", 43)])]),
        ro(vec![cfg("keith", 42, vec![rev("a", 41), rev("b", 3)])]),
        ro(vec![started(cfg("keith", 42, vec![rev("a", 42)]), 1)]).tap(|r| {
            r.configurations[0].step_params.step_size = 43;
        }),
    ];
    for r in bad {
        assert!(!r.validate(), "{r:?}");
        assert_eq!(Rollout::parse(&r.to_json()), None);
    }
    let good = ro(vec![started(cfg("one", 100, vec![rev("roy", 100)]), 1955)]);
    assert_eq!(Rollout::parse(&good.to_json()), Some(good.clone()));
    assert_eq!(Rollout::parse("{not json"), None);
    // Knative's JSON field names, so the annotation reads the same.
    assert_eq!(
        good.to_json(),
        r#"{"configurations":[{"configurationName":"one","percent":100,"revisions":[{"revisionName":"roy","percent":100}],"stepParams":{"starttime":1955}}]}"#
    );
}

trait Tap: Sized {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
impl Tap for Rollout {}

fn latest(tag: &str, config: &str, rev: &str, percent: i64) -> TrafficTarget {
    TrafficTarget {
        tag: tag.into(),
        configuration_name: config.into(),
        revision_name: rev.into(),
        latest_revision: Some(true),
        percent: Some(percent),
        url: None,
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

#[test]
fn build_from_traffic() {
    let traffic = [
        latest("", "hello", "hello-00002", 80),
        pinned("", "hello-00001", 20),
        latest("cur", "hello", "hello-00002", 0),
        pinned("zero", "hello-00001", 0),
    ];
    let mut tagged = cfg("hello", 100, vec![rev("hello-00002", 100)]);
    tagged.tag = "cur".into();
    assert_eq!(
        Rollout::build(&traffic),
        ro(vec![cfg("hello", 80, vec![rev("hello-00002", 80)]), tagged])
    );
    // Only latestRevision targets roll out.
    assert_eq!(
        Rollout::build(&[pinned("", "hello-00001", 100)]),
        ro(vec![])
    );
}

/// A rollout played through time as the reconciler drives it: a 6s duration, a new
/// revision, the steps, a newer revision superseding it, and a rollback.
#[test]
fn a_rollout_through_time() {
    let s = SECOND;
    let t0 = 1_700_000_000 * s;
    let traffic = |rev: &str| vec![latest("", "hello", rev, 100)];
    let percents = |r: &Rollout| -> Vec<(String, i64)> {
        r.configurations[0]
            .revisions
            .iter()
            .map(|r| (r.revision_name.clone(), r.percent))
            .collect()
    };
    let p = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
        pairs.iter().map(|(r, p)| (r.to_string(), *p)).collect()
    };

    // Steady state at v1.
    let (ro1, next) = reconcile(&traffic("v1"), None, 6, t0);
    assert_eq!((percents(&ro1), next), (p(&[("v1", 100)]), 0));

    // v2 becomes the latest ready revision: 1% now, steps of 20% every second.
    let (ro2, next) = reconcile(&traffic("v2"), Some(ro1.clone()), 6, t0 + s);
    assert_eq!(percents(&ro2), p(&[("v1", 99), ("v2", 1)]));
    assert_eq!(next, t0 + 2 * s);
    assert!(!ro2.done());

    // A reconcile before the step time changes nothing.
    let (same, n) = reconcile(&traffic("v2"), Some(ro2.clone()), 6, t0 + s + s / 2);
    assert_eq!((same, n), (ro2.clone(), next));

    let mut state = ro2;
    let mut seen = Vec::new();
    for i in 2..=6 {
        let (r, n) = reconcile(&traffic("v2"), Some(state), 6, t0 + i * s);
        seen.push((percents(&r), n));
        state = r;
    }
    assert_eq!(
        seen,
        [
            (p(&[("v1", 79), ("v2", 21)]), t0 + 3 * s),
            (p(&[("v1", 59), ("v2", 41)]), t0 + 4 * s),
            (p(&[("v1", 39), ("v2", 61)]), t0 + 5 * s),
            (p(&[("v1", 19), ("v2", 81)]), t0 + 6 * s),
            (p(&[("v2", 100)]), 0),
        ]
    );
    assert!(state.done());
    assert_eq!(
        state.configurations[0].step_params,
        RolloutParams::default()
    );

    // Superseded: v3 arrives while v2 is at 21%; v2 drains first, v3 starts anew.
    let (mid, _) = reconcile(&traffic("v2"), Some(ro1.clone()), 6, t0);
    let (mid, _) = reconcile(&traffic("v2"), Some(mid), 6, t0 + s);
    assert_eq!(percents(&mid), p(&[("v1", 79), ("v2", 21)]));
    let (sup, next) = reconcile(&traffic("v3"), Some(mid.clone()), 6, t0 + s + s / 2);
    assert_eq!(percents(&sup), p(&[("v1", 79), ("v2", 20), ("v3", 1)]));
    assert_eq!(sup.configurations[0].step_params.start_time, t0 + s + s / 2);
    assert_eq!(next, t0 + 2 * s + s / 2);
    let (sup, _) = reconcile(&traffic("v3"), Some(sup), 6, next);
    assert_eq!(percents(&sup), p(&[("v1", 79), ("v3", 21)]));

    // Rollback: the traffic pinned to v1 ends the rollout at once.
    let (back, next) = reconcile(&[pinned("", "v1", 100)], Some(mid.clone()), 6, t0 + 2 * s);
    assert_eq!((back.clone(), next), (ro(vec![]), 0));
    assert!(back.done());

    // A duration of 0 (the default): the new revision takes everything at once.
    let (now, next) = reconcile(&traffic("v3"), Some(mid), 0, t0 + 2 * s);
    assert_eq!((percents(&now), next), (p(&[("v3", 100)]), 0));
}

#[test]
fn status_and_splits_follow_the_rollout() {
    let traffic = [latest("", "hello", "v2", 100), pinned("old", "v1", 0)];
    let r = ro(vec![cfg("hello", 100, vec![rev("v1", 70), rev("v2", 30)])]);
    let st = status_targets(&traffic, &r);
    let got: Vec<(&str, &str, i64, Option<bool>)> = st
        .iter()
        .map(|t| {
            (
                t.tag.as_str(),
                t.revision_name.as_str(),
                t.percent.unwrap(),
                t.latest_revision,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("", "v1", 70, Some(true)),
            ("", "v2", 30, Some(true)),
            ("old", "v1", 0, Some(false)),
        ]
    );
    let groups = targets_by_tag(&traffic);
    assert_eq!(splits(&groups[""], &r, ""), [("v1", 70), ("v2", 30)]);
    assert_eq!(splits(&groups["old"], &r, "old"), [("v1", 100)]);
}
