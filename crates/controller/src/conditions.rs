//! Knative's "living" condition set (`knative.dev/pkg/apis.ConditionSet`) over
//! [`wisp_api::meta::Status`].
//!
//! A resource has one happy condition (`Ready`) and some dependents (a Revision:
//! `ResourcesAvailable`, `ContainerHealthy`). Ready is True iff every dependent is True,
//! False as soon as one is False, and Unknown otherwise; the reason and message of the
//! dependent that decided it are copied up so `kubectl get` shows why.
//!
//! Transition times follow Knative's `SetCondition`: setting a condition to exactly what it
//! already is (status, reason, message, severity) changes nothing, so a re-run reconcile
//! writes nothing; any other change stamps `lastTransitionTime = now`. Conditions are kept
//! sorted by type, as Knative does.

use chrono::{DateTime, SecondsFormat, Utc};
use wisp_api::meta::{Condition, ConditionStatus, Status};

/// The happy condition of every resource.
pub use wisp_api::meta::READY;

/// Formats a condition time the way Kubernetes serializes `metav1.Time` (second precision).
pub fn timestamp(now: DateTime<Utc>) -> String {
    now.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Sets one condition. A condition identical to the existing one (ignoring its
/// `lastTransitionTime`) leaves `status` untouched; otherwise it is replaced and stamped.
pub fn set(
    status: &mut Status,
    type_: &str,
    cs: ConditionStatus,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let new = Condition {
        type_: type_.to_owned(),
        status: cs,
        severity: String::new(),
        last_transition_time: Some(timestamp(now)),
        reason: reason.to_owned(),
        message: message.to_owned(),
    };
    if let Some(old) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
        let same = old.status == new.status
            && old.reason == new.reason
            && old.message == new.message
            && old.severity == new.severity;
        if !same {
            *old = new;
        }
    } else {
        status.conditions.push(new);
    }
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// The Ready condition implied by `dependents`, as (status, reason, message): True iff all
/// are True; False if any is False (the first False one's reason and message); else
/// Unknown (the first not-True one's reason and message). A missing dependent counts as
/// Unknown with no reason.
pub fn ready_from(status: &Status, dependents: &[&str]) -> (ConditionStatus, String, String) {
    let mut unknown: Option<(String, String)> = None;
    for dep in dependents {
        match status.condition(dep) {
            Some(c) if c.status == ConditionStatus::True => {}
            Some(c) if c.status == ConditionStatus::False => {
                return (ConditionStatus::False, c.reason.clone(), c.message.clone());
            }
            Some(c) => {
                unknown.get_or_insert_with(|| (c.reason.clone(), c.message.clone()));
            }
            None => {
                unknown.get_or_insert_with(Default::default);
            }
        }
    }
    match unknown {
        None => (ConditionStatus::True, String::new(), String::new()),
        Some((reason, message)) => (ConditionStatus::Unknown, reason, message),
    }
}

/// A happy condition and its dependents, e.g. a Revision's.
#[derive(Clone, Copy, Debug)]
pub struct ConditionSet {
    pub happy: &'static str,
    pub dependents: &'static [&'static str],
}

impl ConditionSet {
    pub const fn new(happy: &'static str, dependents: &'static [&'static str]) -> Self {
        ConditionSet { happy, dependents }
    }

    /// Adds any missing happy/dependent condition as Unknown (Knative's `InitializeConditions`).
    pub fn initialize(&self, status: &mut Status, now: DateTime<Utc>) {
        for t in std::iter::once(&self.happy).chain(self.dependents) {
            if status.condition(t).is_none() {
                set(status, t, ConditionStatus::Unknown, "", "", now);
            }
        }
    }

    /// Sets a condition; when it is a dependent, recomputes the happy condition.
    pub fn mark(
        &self,
        status: &mut Status,
        type_: &str,
        cs: ConditionStatus,
        reason: &str,
        message: &str,
        now: DateTime<Utc>,
    ) {
        set(status, type_, cs, reason, message, now);
        if self.dependents.contains(&type_) {
            let (cs, reason, message) = ready_from(status, self.dependents);
            set(status, self.happy, cs, &reason, &message, now);
        }
    }

    /// Sets several conditions, then the happy one from its dependents once. For a
    /// reconcile that computes every dependent in one pass: marking them one at a time
    /// could move the happy condition through a passing value and stamp a new transition
    /// time on a Ready that in the end did not change.
    pub fn mark_all<'a>(
        &self,
        status: &mut Status,
        marks: impl IntoIterator<Item = (&'a str, ConditionStatus, &'a str, &'a str)>,
        now: DateTime<Utc>,
    ) {
        for (type_, cs, reason, message) in marks {
            set(status, type_, cs, reason, message, now);
        }
        let (cs, reason, message) = ready_from(status, self.dependents);
        set(status, self.happy, cs, &reason, &message, now);
    }

    pub fn mark_true(&self, status: &mut Status, type_: &str, now: DateTime<Utc>) {
        self.mark(status, type_, ConditionStatus::True, "", "", now);
    }

    pub fn mark_false(
        &self,
        status: &mut Status,
        type_: &str,
        reason: &str,
        message: &str,
        now: DateTime<Utc>,
    ) {
        self.mark(status, type_, ConditionStatus::False, reason, message, now);
    }

    pub fn mark_unknown(
        &self,
        status: &mut Status,
        type_: &str,
        reason: &str,
        message: &str,
        now: DateTime<Utc>,
    ) {
        self.mark(
            status,
            type_,
            ConditionStatus::Unknown,
            reason,
            message,
            now,
        );
    }

    /// True when the happy condition is True.
    pub fn is_happy(&self, status: &Status) -> bool {
        is_true(status, self.happy)
    }
}

/// True when the condition exists and is True.
pub fn is_true(status: &Status, type_: &str) -> bool {
    status
        .condition(type_)
        .is_some_and(|c| c.status == ConditionStatus::True)
}

/// True when the condition exists and is False.
pub fn is_false(status: &Status, type_: &str) -> bool {
    status
        .condition(type_)
        .is_some_and(|c| c.status == ConditionStatus::False)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True, Unknown};
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn cond(type_: &str, cs: ConditionStatus, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: cs,
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Some(timestamp(t(0))),
            ..Default::default()
        }
    }

    #[test]
    fn set_keeps_transition_time_only_when_nothing_changes() {
        // (existing, new status, reason, message, transition time expected to be moved?)
        let cases = [
            ("identical", Some((True, "", "")), (True, "", ""), false),
            (
                "status flips",
                Some((True, "", "")),
                (False, "R", "m"),
                true,
            ),
            (
                "reason changes",
                Some((False, "A", "m")),
                (False, "B", "m"),
                true,
            ),
            (
                "message changes",
                Some((Unknown, "R", "a")),
                (Unknown, "R", "b"),
                true,
            ),
            ("new condition", None, (Unknown, "", ""), true),
        ];
        for (what, existing, (cs, reason, message), moved) in cases {
            let mut st = Status::default();
            if let Some((s, r, m)) = existing {
                st.conditions.push(cond("Ready", s, r, m));
            }
            set(&mut st, "Ready", cs, reason, message, t(10));
            let c = st.condition("Ready").unwrap();
            assert_eq!(
                (c.status, c.reason.as_str(), c.message.as_str()),
                (cs, reason, message),
                "{what}"
            );
            let want = if moved { t(10) } else { t(0) };
            assert_eq!(c.last_transition_time, Some(timestamp(want)), "{what}");
        }
    }

    #[test]
    fn set_sorts_by_type() {
        let mut st = Status::default();
        for ty in ["Ready", "Active", "ContainerHealthy"] {
            set(&mut st, ty, Unknown, "", "", t(0));
        }
        let types: Vec<_> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Active", "ContainerHealthy", "Ready"]);
    }

    #[test]
    fn ready_from_dependents() {
        type Dep = (&'static str, ConditionStatus, &'static str, &'static str);
        type Want = (ConditionStatus, &'static str, &'static str);
        let cases: [(&str, Vec<Dep>, Want); 6] = [
            (
                "all true",
                vec![("A", True, "", ""), ("B", True, "", "")],
                (True, "", ""),
            ),
            (
                "one false wins over unknown",
                vec![("A", Unknown, "U", "u"), ("B", False, "F", "f")],
                (False, "F", "f"),
            ),
            (
                "first false",
                vec![("A", False, "F1", "1"), ("B", False, "F2", "2")],
                (False, "F1", "1"),
            ),
            (
                "first unknown",
                vec![("A", True, "", ""), ("B", Unknown, "Deploying", "d")],
                (Unknown, "Deploying", "d"),
            ),
            (
                "missing counts as unknown",
                vec![("A", True, "", "")],
                (Unknown, "", ""),
            ),
            ("nothing set", vec![], (Unknown, "", "")),
        ];
        for (what, deps, (cs, reason, message)) in cases {
            let mut st = Status::default();
            for (ty, s, r, m) in deps {
                st.conditions.push(cond(ty, s, r, m));
            }
            let got = ready_from(&st, &["A", "B"]);
            assert_eq!(got, (cs, reason.to_owned(), message.to_owned()), "{what}");
        }
    }

    #[test]
    fn condition_set_propagates_to_happy() {
        const SET: ConditionSet =
            ConditionSet::new(READY, &["ResourcesAvailable", "ContainerHealthy"]);
        let mut st = Status::default();
        SET.initialize(&mut st, t(0));
        assert_eq!(st.conditions.len(), 3);
        SET.mark_unknown(&mut st, "ResourcesAvailable", "Deploying", "", t(1));
        assert_eq!(st.condition(READY).unwrap().reason, "Deploying");
        SET.mark_true(&mut st, "ResourcesAvailable", t(2));
        SET.mark_true(&mut st, "ContainerHealthy", t(2));
        assert!(SET.is_happy(&st));
        SET.mark_false(&mut st, "ContainerHealthy", "ExitCode1", "boom", t(3));
        let r = st.condition(READY).unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.message.as_str()),
            (False, "ExitCode1", "boom")
        );
        assert!(is_false(&st, READY));
        // A non-dependent condition does not touch Ready.
        SET.mark_true(&mut st, "Active", t(4));
        assert!(is_false(&st, READY));
        assert!(is_true(&st, "Active"));
    }

    #[test]
    fn mark_all_moves_ready_once() {
        const SET: ConditionSet = ConditionSet::new(READY, &["A", "B"]);
        // (what, A, B, expected Ready, Ready's transition moved to t(1)?)
        let cases = [
            ("both still true", True, True, True, false),
            ("one fails", True, False, False, true),
            // One at a time, A=Unknown first would pass Ready through Unknown and stamp it;
            // together Ready goes straight to False.
            ("both change", Unknown, False, False, true),
        ];
        for (what, a, b, ready, moved) in cases {
            let mut st = Status::default();
            SET.mark_all(&mut st, [("A", True, "", ""), ("B", True, "", "")], t(0));
            SET.mark_all(&mut st, [("A", a, "", ""), ("B", b, "", "")], t(1));
            let r = st.condition(READY).unwrap();
            assert_eq!(r.status, ready, "{what}");
            let at = if moved { t(1) } else { t(0) };
            assert_eq!(r.last_transition_time, Some(timestamp(at)), "{what}");
        }
    }
}
