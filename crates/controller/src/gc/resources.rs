//! Pure revision-GC selection (Knative `pkg/reconciler/gc/gc.go`): which
//! revisions of a configuration to delete now, and when to look again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use wisp_api::{
    config::GcConfig,
    serving::{Configuration, Revision},
};

use crate::names::{annotation, label, routing_state};

fn parse_time(s: Option<&String>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// When the revision was created; a revision without a readable timestamp counts as just
/// created, so it is never collected by age by mistake.
fn created(rev: &Revision, now: DateTime<Utc>) -> DateTime<Utc> {
    parse_time(rev.metadata.creation_timestamp.as_ref()).unwrap_or(now)
}

/// Knative's `revisionLastActiveTime`: `routingStateModified`, else creation time.
fn last_active(rev: &Revision, now: DateTime<Utc>) -> DateTime<Utc> {
    parse_time(
        rev.metadata
            .annotations
            .get(annotation::ROUTING_STATE_MODIFIED),
    )
    .unwrap_or_else(|| created(rev, now))
}

/// Revisions GC may consider: not the latest ready one, not pinned with `no-gc`, and
/// explicitly parked by the labeler (`routingState: reserve`; `pending`, `active` and
/// unlabelled ones are in use or about to be).
fn non_active<'a>(cfg: &Configuration, revisions: &'a [Revision]) -> Vec<&'a Revision> {
    let latest_ready = cfg
        .status
        .as_ref()
        .map_or("", |s| s.latest_ready_revision_name.as_str());
    revisions
        .iter()
        .filter(|r| r.metadata.name != latest_ready)
        .filter(|r| {
            !r.metadata
                .annotations
                .get(annotation::NO_GC)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        })
        .filter(|r| {
            r.metadata
                .labels
                .get(label::ROUTING_STATE)
                .map(String::as_str)
                == Some(routing_state::RESERVE)
        })
        .collect()
}

/// The moment a revision becomes stale, None if the time rules are both disabled (then
/// nothing is ever stale).
fn stale_at(gc: &GcConfig, rev: &Revision, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let after = |base: DateTime<Utc>, d: wisp_api::duration::GoDuration| {
        base + chrono::Duration::nanoseconds(d.0)
    };
    let by_create = gc
        .retain_since_create_time
        .map(|d| after(created(rev, now), d));
    let by_active = gc
        .retain_since_last_active_time
        .map(|d| after(last_active(rev, now), d));
    match (by_create, by_active) {
        (None, None) => None,
        (a, b) => a.max(b),
    }
}

/// All three deletion rules disabled: GC does nothing at all.
fn disabled(gc: &GcConfig) -> bool {
    gc.max_non_active_revisions.is_none()
        && gc.retain_since_create_time.is_none()
        && gc.retain_since_last_active_time.is_none()
}

/// The names of the revisions of `cfg` to delete at `now`, oldest first. `revisions` are
/// the revisions labelled with the configuration.
///
/// 1. Skip when max, retain-since-create and retain-since-last-active are all disabled, or
///    there are at most `min-non-active-revisions` revisions.
/// 2. Consider only non-active revisions (see [`non_active`]), oldest last-active first.
/// 3. Delete stale ones (old enough by every enabled time rule) while more than `min`
///    non-active revisions remain.
/// 4. Then, with `max` enabled, delete the oldest until at most `max` remain.
pub fn collect(
    cfg: &Configuration,
    revisions: &[Revision],
    gc: &GcConfig,
    now: DateTime<Utc>,
) -> Vec<String> {
    plan(cfg, revisions, gc, now).0
}

/// [`collect`] plus how long until running it again could delete more (the next time a
/// kept non-active revision turns stale). None: nothing will change by waiting alone.
pub fn plan(
    cfg: &Configuration,
    revisions: &[Revision],
    gc: &GcConfig,
    now: DateTime<Utc>,
) -> (Vec<String>, Option<Duration>) {
    // A disabled minimum keeps nothing back.
    let min = usize::try_from(gc.min_non_active_revisions.unwrap_or(0)).unwrap_or(0);
    if disabled(gc) || revisions.len() <= min {
        return (Vec::new(), None);
    }
    let mut candidates = non_active(cfg, revisions);
    // Oldest first; ties broken by name so the choice is deterministic.
    candidates.sort_by(|a, b| {
        (last_active(a, now), &a.metadata.name).cmp(&(last_active(b, now), &b.metadata.name))
    });

    let mut count = candidates.len();
    let mut doomed: Vec<String> = Vec::new();
    let mut kept: Vec<&Revision> = Vec::new();
    for rev in candidates {
        let stale = stale_at(gc, rev, now).is_some_and(|t| t <= now);
        if stale && count > min {
            doomed.push(rev.metadata.name.clone());
            count -= 1;
        } else {
            kept.push(rev);
        }
    }
    if let Some(max) = gc.max_non_active_revisions {
        let max = usize::try_from(max).unwrap_or(0);
        if kept.len() > max {
            let extra = kept.len() - max;
            doomed.extend(kept.drain(..extra).map(|r| r.metadata.name.clone()));
        }
    }
    // Waiting helps only while more than `min` remain: then the next kept revision to
    // turn stale can go.
    let next = (kept.len() > min)
        .then(|| {
            kept.iter()
                .filter_map(|r| stale_at(gc, r, now))
                .filter(|t| *t > now)
                .min()
        })
        .flatten()
        .and_then(|t| (t - now).to_std().ok());
    (doomed, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use wisp_api::{duration::GoDuration, serving::ConfigurationStatus};

    const H: i64 = 3600;

    fn now() -> DateTime<Utc> {
        testing::test_clock()
    }

    fn ago(secs: i64) -> String {
        crate::conditions::timestamp(now() - chrono::Duration::seconds(secs))
    }

    /// A revision created `age` seconds ago, in `state`, last active `idle` seconds ago.
    fn rev(name: &str, state: Option<&str>, age: i64, idle: Option<i64>) -> Revision {
        let mut r = testing::revision("default", name, "hello", 1);
        r.metadata.creation_timestamp = Some(ago(age));
        if let Some(s) = state {
            r.metadata
                .labels
                .insert(label::ROUTING_STATE.into(), s.into());
        }
        if let Some(i) = idle {
            r.metadata
                .annotations
                .insert(annotation::ROUTING_STATE_MODIFIED.into(), ago(i));
        }
        r
    }

    fn reserve(name: &str, age_h: i64, idle_h: i64) -> Revision {
        rev(
            name,
            Some(routing_state::RESERVE),
            age_h * H,
            Some(idle_h * H),
        )
    }

    fn config(latest_ready: &str) -> Configuration {
        let mut c = testing::configuration("default", "hello", "img");
        c.status = Some(ConfigurationStatus {
            latest_ready_revision_name: latest_ready.into(),
            ..Default::default()
        });
        c
    }

    fn gc(
        create: Option<i64>,
        active: Option<i64>,
        min: Option<i64>,
        max: Option<i64>,
    ) -> GcConfig {
        GcConfig {
            retain_since_create_time: create.map(|h| GoDuration::from_secs(h * H)),
            retain_since_last_active_time: active.map(|h| GoDuration::from_secs(h * H)),
            min_non_active_revisions: min,
            max_non_active_revisions: max,
        }
    }

    /// r1 (oldest) … r5, all reserve, created 100h..60h ago, idle 50h..10h.
    fn five() -> Vec<Revision> {
        (1..=5)
            .map(|i| reserve(&format!("r{i}"), 110 - 10 * i, 60 - 10 * i))
            .collect()
    }

    #[test]
    fn selection() {
        let immediate = gc(None, None, Some(0), Some(0));
        let keep_two = gc(None, None, Some(0), Some(2));
        let no_gc = gc(None, None, Some(0), None);
        let defaults = GcConfig::default(); // 48h, 15h, min 20, max 1000
        let timers_min_1 = gc(Some(48), Some(15), Some(1), Some(1000)); // r5 idle only 10h
        let create_only = gc(Some(75), None, Some(0), None);
        let active_only = gc(None, Some(25), Some(0), None);

        let mut mixed = five();
        mixed[0]
            .metadata
            .labels
            .insert(label::ROUTING_STATE.into(), "active".into());
        mixed[1].metadata.labels.remove(label::ROUTING_STATE);
        mixed[2]
            .metadata
            .annotations
            .insert(annotation::NO_GC.into(), "True".into());
        mixed.push(rev("pending", Some(routing_state::PENDING), 100 * H, None));

        let mut unsorted = five();
        unsorted.reverse();
        // r3 was active recently although created long ago: it sorts last.
        unsorted[2]
            .metadata
            .annotations
            .insert(annotation::ROUTING_STATE_MODIFIED.into(), ago(H));

        // (what, config, latest ready, revisions, want deleted)
        type Case<'a> = (&'a str, GcConfig, &'a str, Vec<Revision>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "immediate: every non-active goes",
                immediate.clone(),
                "",
                five(),
                vec!["r1", "r2", "r3", "r4", "r5"],
            ),
            (
                "immediate keeps the latest ready",
                immediate.clone(),
                "r5",
                five(),
                vec!["r1", "r2", "r3", "r4"],
            ),
            (
                "immediate skips active, unlabelled, no-gc, pending",
                immediate.clone(),
                "",
                mixed,
                vec!["r4", "r5"],
            ),
            (
                "keep last two",
                keep_two,
                "",
                five(),
                vec!["r1", "r2", "r3"],
            ),
            ("no GC when all three disabled", no_gc, "", five(), vec![]),
            (
                "defaults: min 20 keeps everything",
                defaults,
                "",
                five(),
                vec![],
            ),
            (
                "timers: stale by both rules, min 1",
                timers_min_1.clone(),
                "",
                five(),
                vec!["r1", "r2", "r3", "r4"],
            ),
            (
                "min keeps the newest",
                gc(None, Some(0), Some(3), None),
                "",
                five(),
                vec!["r1", "r2"],
            ),
            (
                "create rule only",
                create_only,
                "",
                five(),
                vec!["r1", "r2", "r3"],
            ),
            (
                "last-active rule only",
                active_only,
                "",
                five(),
                vec!["r1", "r2", "r3"],
            ),
            (
                "oldest by last activity",
                gc(None, None, Some(0), Some(3)),
                "",
                unsorted,
                vec!["r1", "r2"],
            ),
            ("count at min: nothing", immediate, "", Vec::new(), vec![]),
        ];
        for (what, gc, latest, revs, want) in cases {
            let got = collect(&config(latest), &revs, &gc, now());
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn stale_needs_every_enabled_rule() {
        // 48h/15h: created 50h ago but active 10h ago is not stale; created 40h ago and idle
        // 20h is not stale either.
        let g = gc(Some(48), Some(15), Some(0), None);
        let revs = vec![
            reserve("young", 40, 20),
            reserve("busy", 50, 10),
            reserve("old", 50, 20),
        ];
        assert_eq!(collect(&config(""), &revs, &g, now()), ["old"]);
    }

    #[test]
    fn fallbacks() {
        // No routingStateModified: last active = creation time.
        let g = gc(None, Some(15), Some(0), None);
        let revs = vec![rev("a", Some(routing_state::RESERVE), 20 * H, None)];
        assert_eq!(collect(&config(""), &revs, &g, now()), ["a"]);
        // No creation time either: treated as brand new.
        let mut r = rev("b", Some(routing_state::RESERVE), 0, None);
        r.metadata.creation_timestamp = None;
        assert!(collect(&config(""), &[r], &g, now()).is_empty());
    }

    #[test]
    fn next_check() {
        let g = gc(Some(48), Some(15), Some(0), None);
        // Stale in 2h (active rule) and in 5h (create rule).
        let revs = vec![
            reserve("a", 60, 13),
            reserve("b", 43, 40),
            reserve("gone", 60, 20),
        ];
        let (doomed, next) = plan(&config(""), &revs, &g, now());
        assert_eq!(doomed, ["gone"]);
        assert_eq!(next, Some(Duration::from_secs(2 * H as u64)));
        // At min nothing more can go, so there is nothing to wait for.
        let g = gc(Some(48), Some(15), Some(2), None);
        let (doomed, next) = plan(&config(""), &revs[..2], &g, now());
        assert!(doomed.is_empty());
        assert_eq!(next, None);
        // Timers disabled: only counts matter, never time.
        let (_, next) = plan(
            &config(""),
            &revs,
            &gc(None, None, Some(0), Some(10)),
            now(),
        );
        assert_eq!(next, None);
    }
}
