//! Pure builders of the Configuration reconciler: the revision a configuration stamps for
//! its generation, and the configuration status implied by its revisions (Knative
//! `pkg/reconciler/configuration/` and `pkg/apis/serving/v1/configuration_lifecycle.go`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use wisp_api::{
    kinds,
    meta::{ConditionStatus, ObjectMeta},
    serving::{Configuration, ConfigurationStatus, Revision},
};

use crate::{
    conditions::{self, ConditionSet, READY},
    names::{self, annotation, label, routing_state},
    objects,
};

/// The Configuration's condition set: Ready alone, moved by the latest revisions
/// (Knative's `confCondSet`).
pub const CONDITIONS: ConditionSet = ConditionSet::new(READY, &[]);
/// Reason of every failed Configuration Ready condition about its revisions.
pub const REVISION_FAILED: &str = "RevisionFailed";
/// Reason when the latest ready revision was deleted.
pub const REVISION_DELETED: &str = "RevisionDeleted";

/// The name of the revision for the configuration's current generation: the template's
/// name when the user brought one (BYO), else `<config>-<generation:05>`.
pub fn revision_name(cfg: &Configuration) -> String {
    let byo = &cfg.spec.template.metadata.name;
    if byo.is_empty() {
        names::revision_name(&cfg.metadata.name, cfg.metadata.generation)
    } else {
        byo.clone()
    }
}

/// True when the template names its revision.
pub fn is_byo(cfg: &Configuration) -> bool {
    !cfg.spec.template.metadata.name.is_empty()
}

/// The Revision a configuration stamps for its current generation (Knative
/// `resources.MakeRevision`).
pub fn make_revision(cfg: &Configuration, now: DateTime<Utc>) -> Revision {
    let template = &cfg.spec.template;
    let cm = &cfg.metadata;

    let mut labels: BTreeMap<String, String> = template.metadata.labels.clone();
    labels.insert(label::CONFIGURATION.into(), cm.name.clone());
    labels.insert(
        label::CONFIGURATION_GENERATION.into(),
        cm.generation.to_string(),
    );
    labels.insert(label::CONFIGURATION_UID.into(), cm.uid.clone());
    for key in [label::SERVICE, label::SERVICE_UID] {
        if let Some(v) = cm.labels.get(key) {
            labels.insert(key.into(), v.clone());
        }
    }
    // A configuration already referenced by a route gets revisions that are routable from
    // the start; otherwise the labeler promotes them once a route picks them up.
    let routes = cm.annotations.get(annotation::ROUTES);
    let state = if routes.is_some() {
        routing_state::ACTIVE
    } else {
        routing_state::PENDING
    };
    labels.insert(label::ROUTING_STATE.into(), state.into());

    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(
        annotation::ROUTING_STATE_MODIFIED.into(),
        conditions::timestamp(now),
    );
    if let Some(who) = cm.annotations.get(annotation::LAST_MODIFIER) {
        annotations.insert(annotation::CREATOR.into(), who.clone());
    }
    if let Some(routes) = routes {
        annotations.insert(annotation::ROUTES.into(), routes.clone());
    }

    Revision {
        api_version: kinds::REVISION.api_version(),
        kind: kinds::REVISION.kind.into(),
        metadata: ObjectMeta {
            name: revision_name(cfg),
            namespace: cm.namespace.clone(),
            labels,
            annotations,
            owner_references: vec![objects::owner_reference(&kinds::CONFIGURATION, cm)],
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Whether an existing revision with the configuration's revision name is the one this
/// configuration would have stamped: controlled by it and, for a BYO name, with the
/// template's spec. `Err` holds the creation-failure message otherwise.
pub fn check_existing(cfg: &Configuration, rev: &Revision) -> Result<(), String> {
    let ours = objects::is_controlled_by(&rev.metadata, &cfg.metadata.uid)
        && (!is_byo(cfg) || rev.spec == cfg.spec.template.spec);
    if ours {
        Ok(())
    } else {
        Err(already_exists(&rev.metadata.name))
    }
}

/// Knative's wording of a revision name collision (an `AlreadyExists` API error).
pub fn already_exists(name: &str) -> String {
    format!(
        "{} \"{name}\" already exists",
        wisp_api::kinds::REVISION.store_key()
    )
}

/// What became of the revision for the current generation.
#[derive(Clone, Copy, Debug)]
pub enum LatestCreated<'a> {
    /// It exists (just created, or found) and belongs to the configuration.
    Revision(&'a Revision),
    /// It could not be created; the message says why.
    CreationFailed(&'a str),
}

fn revision_ready(rev: &Revision) -> (ConditionStatus, String) {
    match rev.status.as_ref().and_then(|s| s.status.condition(READY)) {
        Some(c) => (c.status, c.message.clone()),
        None => (ConditionStatus::Unknown, String::new()),
    }
}

/// Knative's `IsReady`: Ready True for the revision's current generation.
fn is_ready(rev: &Revision) -> bool {
    rev.status.as_ref().is_some_and(|s| {
        s.status.observed_generation == rev.metadata.generation
            && conditions::is_true(&s.status, READY)
    })
}

fn generation_of(rev: &Revision) -> i64 {
    objects::label_i64(&rev.metadata, label::CONFIGURATION_GENERATION).unwrap_or(0)
}

/// The configuration status after a reconcile (Knative `ReconcileKind` +
/// `findAndSetLatestReadyRevision`), starting from the current status so that transition
/// times survive. `revisions` are the revisions this configuration controls.
pub fn compute_status(
    cfg: &Configuration,
    latest: LatestCreated<'_>,
    revisions: &[Revision],
    now: DateTime<Utc>,
) -> ConfigurationStatus {
    let mut st = cfg.status.clone().unwrap_or_default();
    st.status.observed_generation = cfg.metadata.generation;
    // Knative moves Ready through several marks in one pass; only the final value is
    // written, so that an unchanged outcome keeps its transition time.
    let mut ready: (ConditionStatus, String, String) = match st.status.condition(READY) {
        Some(c) => (c.status, c.reason.clone(), c.message.clone()),
        None => (ConditionStatus::Unknown, String::new(), String::new()),
    };
    let unknown = || (ConditionStatus::Unknown, String::new(), String::new());
    let failed =
        |reason: &str, message: String| (ConditionStatus::False, reason.to_owned(), message);

    match latest {
        LatestCreated::CreationFailed(message) => {
            ready = failed(
                REVISION_FAILED,
                format!("Revision creation failed with message: {message}."),
            );
        }
        LatestCreated::Revision(lcr) => {
            // SetLatestCreatedRevisionName.
            st.latest_created_revision_name = lcr.metadata.name.clone();
            if st.latest_ready_revision_name != lcr.metadata.name {
                ready = unknown();
            }
            let (lcr_ready, message) = revision_ready(lcr);
            if lcr_ready == ConditionStatus::False {
                ready = failed(
                    REVISION_FAILED,
                    format!(
                        "Revision \"{}\" failed with message: {message}.",
                        lcr.metadata.name
                    ),
                );
            }

            // findAndSetLatestReadyRevision: the newest ready revision no older than the
            // current latest ready one.
            let mut floor = 0;
            if !st.latest_ready_revision_name.is_empty() {
                match revisions
                    .iter()
                    .find(|r| r.metadata.name == st.latest_ready_revision_name)
                {
                    Some(r) => floor = generation_of(r),
                    None => {
                        ready = failed(
                            REVISION_DELETED,
                            format!(
                                "Revision \"{}\" was deleted.",
                                st.latest_ready_revision_name
                            ),
                        );
                        st.latest_ready_revision_name.clear();
                    }
                }
            }
            let mut candidates: Vec<&Revision> = revisions
                .iter()
                .filter(|r| generation_of(r) >= floor)
                .collect();
            candidates.sort_by(|a, b| {
                generation_of(b)
                    .cmp(&generation_of(a))
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            });
            if let Some(newest) = candidates.into_iter().find(|r| is_ready(r)) {
                // SetLatestReadyRevisionName.
                st.latest_ready_revision_name = newest.metadata.name.clone();
                if st.latest_ready_revision_name == st.latest_created_revision_name {
                    ready = (ConditionStatus::True, String::new(), String::new());
                }
            }
        }
    }
    CONDITIONS.mark(&mut st.status, READY, ready.0, &ready.1, &ready.2, now);
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, set_revision_ready, test_clock};
    use ConditionStatus::{False, True, Unknown};
    use wisp_api::meta::Condition;

    fn cfg(generation: i64) -> Configuration {
        let mut c = testing::configuration("ns", "hello", "img");
        c.metadata.uid = "cfg-uid".into();
        c.metadata.generation = generation;
        c
    }

    #[test]
    fn revision_names() {
        let mut c = cfg(3);
        assert_eq!(revision_name(&c), "hello-00003");
        assert!(!is_byo(&c));
        c.spec.template.metadata.name = "hello-byo".into();
        assert_eq!(revision_name(&c), "hello-byo");
        assert!(is_byo(&c));
    }

    #[test]
    fn make_revision_labels_annotations_owner() {
        struct Case {
            what: &'static str,
            cfg_labels: &'static [(&'static str, &'static str)],
            cfg_annotations: &'static [(&'static str, &'static str)],
            template_labels: &'static [(&'static str, &'static str)],
            template_annotations: &'static [(&'static str, &'static str)],
            want_labels: &'static [(&'static str, &'static str)],
            want_annotations: &'static [(&'static str, &'static str)],
        }
        let base_labels = [
            (label::CONFIGURATION, "hello"),
            (label::CONFIGURATION_GENERATION, "2"),
            (label::CONFIGURATION_UID, "cfg-uid"),
        ];
        let cases = [
            Case {
                what: "plain configuration",
                cfg_labels: &[],
                cfg_annotations: &[],
                template_labels: &[],
                template_annotations: &[],
                want_labels: &[(label::ROUTING_STATE, "pending")],
                want_annotations: &[(annotation::ROUTING_STATE_MODIFIED, testing::TEST_NOW)],
            },
            Case {
                what: "owned by a service, referenced by a route, template metadata copied",
                cfg_labels: &[
                    (label::SERVICE, "hello"),
                    (label::SERVICE_UID, "svc-uid"),
                    ("team", "not-copied-from-config"),
                ],
                cfg_annotations: &[
                    (annotation::ROUTES, "hello"),
                    (annotation::LAST_MODIFIER, "alice"),
                    (annotation::CREATOR, "bob"),
                ],
                template_labels: &[("app", "web")],
                template_annotations: &[("autoscaling.knative.dev/min-scale", "1")],
                want_labels: &[
                    (label::SERVICE, "hello"),
                    (label::SERVICE_UID, "svc-uid"),
                    ("app", "web"),
                    (label::ROUTING_STATE, "active"),
                ],
                want_annotations: &[
                    (annotation::ROUTING_STATE_MODIFIED, testing::TEST_NOW),
                    (annotation::CREATOR, "alice"),
                    (annotation::ROUTES, "hello"),
                    ("autoscaling.knative.dev/min-scale", "1"),
                ],
            },
        ];
        fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }
        for c in cases {
            let mut config = cfg(2);
            config.metadata.labels = map(c.cfg_labels);
            config.metadata.annotations = map(c.cfg_annotations);
            config.spec.template.metadata.labels = map(c.template_labels);
            config.spec.template.metadata.annotations = map(c.template_annotations);
            let rev = make_revision(&config, test_clock());
            let mut want_labels = map(&base_labels);
            want_labels.extend(map(c.want_labels));
            assert_eq!(rev.metadata.labels, want_labels, "{}", c.what);
            assert_eq!(
                rev.metadata.annotations,
                map(c.want_annotations),
                "{}",
                c.what
            );
            assert_eq!(rev.metadata.name, "hello-00002", "{}", c.what);
            assert_eq!(rev.metadata.namespace, "ns");
            assert_eq!(rev.metadata.owner_references.len(), 1);
            let owner = &rev.metadata.owner_references[0];
            assert_eq!(
                (
                    owner.kind.as_str(),
                    owner.name.as_str(),
                    owner.uid.as_str(),
                    owner.controller
                ),
                ("Configuration", "hello", "cfg-uid", Some(true))
            );
            assert_eq!(rev.spec, config.spec.template.spec);
            assert_eq!(rev.kind, "Revision");
        }
    }

    #[test]
    fn existing_revision_checks() {
        let mut c = cfg(1);
        let ours = make_revision(&c, test_clock());
        assert_eq!(check_existing(&c, &ours), Ok(()));
        let mut foreign = ours.clone();
        foreign.metadata.owner_references[0].uid = "other".into();
        assert_eq!(
            check_existing(&c, &foreign),
            Err("revisions.serving.knative.dev \"hello-00001\" already exists".into())
        );
        // BYO: the spec must match too.
        c.spec.template.metadata.name = "hello-byo".into();
        let byo = make_revision(&c, test_clock());
        assert_eq!(check_existing(&c, &byo), Ok(()));
        let mut changed = c.clone();
        changed.spec.template.spec.timeout_seconds = Some(1);
        assert!(check_existing(&changed, &byo).is_err());
    }

    fn rev(name: &str, generation: i64, ready: Option<(ConditionStatus, &str)>) -> Revision {
        let mut r = testing::revision("ns", name, "hello", generation);
        r.metadata.generation = 1;
        if let Some((s, msg)) = ready {
            set_revision_ready(&mut r, s, if s == False { "ExitCode1" } else { "" }, msg);
        }
        r
    }

    fn ready_cond(st: &ConfigurationStatus) -> (ConditionStatus, String, String) {
        let c: &Condition = st.status.condition(READY).unwrap();
        (c.status, c.reason.clone(), c.message.clone())
    }

    #[test]
    fn status_table() {
        struct Case {
            what: &'static str,
            /// (latestCreated, latestReady) before.
            before: (&'static str, &'static str),
            revisions: Vec<Revision>,
            /// Index into `revisions` of the latest created, or None for a creation failure.
            latest: Option<usize>,
            want: (
                &'static str,
                &'static str,
                ConditionStatus,
                &'static str,
                &'static str,
            ),
        }
        let cases = vec![
            Case {
                what: "first revision still deploying",
                before: ("", ""),
                revisions: vec![rev("hello-00001", 1, None)],
                latest: Some(0),
                want: ("hello-00001", "", Unknown, "", ""),
            },
            Case {
                what: "first revision ready",
                before: ("hello-00001", ""),
                revisions: vec![rev("hello-00001", 1, Some((True, "")))],
                latest: Some(0),
                want: ("hello-00001", "hello-00001", True, "", ""),
            },
            Case {
                what: "first revision failed",
                before: ("hello-00001", ""),
                revisions: vec![rev("hello-00001", 1, Some((False, "boom")))],
                latest: Some(0),
                want: (
                    "hello-00001",
                    "",
                    False,
                    REVISION_FAILED,
                    "Revision \"hello-00001\" failed with message: boom.",
                ),
            },
            Case {
                what: "second revision deploying keeps the first as latest ready",
                before: ("hello-00001", "hello-00001"),
                revisions: vec![
                    rev("hello-00001", 1, Some((True, ""))),
                    rev("hello-00002", 2, None),
                ],
                latest: Some(1),
                want: ("hello-00002", "hello-00001", Unknown, "", ""),
            },
            Case {
                what: "second revision ready takes over",
                before: ("hello-00002", "hello-00001"),
                revisions: vec![
                    rev("hello-00001", 1, Some((True, ""))),
                    rev("hello-00002", 2, Some((True, ""))),
                ],
                latest: Some(1),
                want: ("hello-00002", "hello-00002", True, "", ""),
            },
            Case {
                what: "second revision failed: Ready False, latest ready stays",
                before: ("hello-00002", "hello-00001"),
                revisions: vec![
                    rev("hello-00001", 1, Some((True, ""))),
                    rev("hello-00002", 2, Some((False, "crash"))),
                ],
                latest: Some(1),
                want: (
                    "hello-00002",
                    "hello-00001",
                    False,
                    REVISION_FAILED,
                    "Revision \"hello-00002\" failed with message: crash.",
                ),
            },
            Case {
                what: "an older ready revision does not replace a newer latest ready",
                before: ("hello-00003", "hello-00002"),
                revisions: vec![
                    rev("hello-00001", 1, Some((True, ""))),
                    rev("hello-00002", 2, Some((True, ""))),
                    rev("hello-00003", 3, None),
                ],
                latest: Some(2),
                want: ("hello-00003", "hello-00002", Unknown, "", ""),
            },
            Case {
                what: "latest ready deleted",
                before: ("hello-00002", "hello-00001"),
                revisions: vec![rev("hello-00002", 2, None)],
                latest: Some(0),
                want: (
                    "hello-00002",
                    "",
                    False,
                    REVISION_DELETED,
                    "Revision \"hello-00001\" was deleted.",
                ),
            },
            Case {
                what: "name collision",
                before: ("hello-00001", "hello-00001"),
                revisions: vec![rev("hello-00001", 1, Some((True, "")))],
                latest: None,
                want: (
                    "hello-00001",
                    "hello-00001",
                    False,
                    REVISION_FAILED,
                    "Revision creation failed with message: revisions.serving.knative.dev \"hello-byo\" already exists.",
                ),
            },
        ];
        for c in cases {
            let mut config = cfg(c.revisions.len() as i64);
            config.status = Some(ConfigurationStatus {
                latest_created_revision_name: c.before.0.into(),
                latest_ready_revision_name: c.before.1.into(),
                ..Default::default()
            });
            let failed = already_exists("hello-byo");
            let latest = match c.latest {
                Some(i) => LatestCreated::Revision(&c.revisions[i]),
                None => LatestCreated::CreationFailed(&failed),
            };
            let st = compute_status(&config, latest, &c.revisions, test_clock());
            let (created, ready, cs, reason, message) = c.want;
            assert_eq!(st.latest_created_revision_name, created, "{}", c.what);
            assert_eq!(st.latest_ready_revision_name, ready, "{}", c.what);
            assert_eq!(
                ready_cond(&st),
                (cs, reason.to_owned(), message.to_owned()),
                "{}",
                c.what
            );
            assert_eq!(
                st.status.observed_generation, config.metadata.generation,
                "{}",
                c.what
            );
        }
    }

    #[test]
    fn unchanged_inputs_give_unchanged_status() {
        // Each outcome, computed twice an hour apart, must not move any transition time.
        for ready in [None, Some((True, "")), Some((False, "boom"))] {
            let revisions = vec![
                rev("hello-00001", 1, Some((True, ""))),
                rev("hello-00002", 2, ready),
            ];
            let mut config = cfg(2);
            config.status = Some(ConfigurationStatus {
                latest_ready_revision_name: "hello-00001".into(),
                ..Default::default()
            });
            let first = compute_status(
                &config,
                LatestCreated::Revision(&revisions[1]),
                &revisions,
                test_clock(),
            );
            config.status = Some(first.clone());
            let later = test_clock() + chrono::Duration::hours(1);
            let second = compute_status(
                &config,
                LatestCreated::Revision(&revisions[1]),
                &revisions,
                later,
            );
            assert_eq!(first, second, "{ready:?}");
        }
    }

    #[test]
    fn revision_not_ready_for_its_generation_does_not_count() {
        let mut r = rev("hello-00001", 1, Some((True, "")));
        r.metadata.generation = 2; // status observed generation 1
        let config = cfg(1);
        let st = compute_status(
            &config,
            LatestCreated::Revision(&r),
            std::slice::from_ref(&r),
            test_clock(),
        );
        assert_eq!(st.latest_ready_revision_name, "");
    }
}
