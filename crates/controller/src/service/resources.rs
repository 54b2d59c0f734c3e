//! Pure builders of the Service reconciler (Knative `pkg/reconciler/service/resources`):
//! the desired Configuration and Route of a Service, how an existing child is brought back
//! to that shape, and the Service status as a function of what the children report.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use wisp_api::{
    annotations::serving::ROLLOUT_DURATION,
    kinds,
    meta::{ConditionStatus, ObjectMeta, Status},
    serving::{
        API_VERSION, Addressable, Configuration, ConfigurationSpec, Revision, Route, RouteSpec,
        Service, ServiceStatus, TrafficTarget,
    },
};

use crate::{
    conditions::{ConditionSet, READY},
    names::{annotation, label},
    objects,
};

/// kubectl's client-side-apply annotation: never copied to children.
pub use wisp_api::annotations::LAST_APPLIED;

pub use wisp_api::serving::condition::{CONFIGURATIONS_READY, ROUTES_READY};
/// Service conditions: Ready ⇐ ConfigurationsReady, RoutesReady.
pub const CONDITIONS: ConditionSet =
    ConditionSet::new(READY, &[CONFIGURATIONS_READY, ROUTES_READY]);

/// The Configuration a Service owns: same name and namespace, the Service's template.
pub fn configuration(svc: &Service) -> Configuration {
    let mut labels = svc.metadata.labels.clone();
    labels.insert(label::SERVICE.into(), svc.metadata.name.clone());
    labels.insert(label::SERVICE_UID.into(), svc.metadata.uid.clone());
    let annotations = filter_annotations(&svc.metadata.annotations, |k| {
        // Rollout duration configures the Route, not the Configuration.
        k == LAST_APPLIED || ROLLOUT_DURATION.matches(k)
    });
    Configuration {
        api_version: API_VERSION.into(),
        kind: kinds::CONFIGURATION.kind.into(),
        metadata: child_meta(svc, labels, annotations),
        spec: ConfigurationSpec {
            template: svc.spec.template.clone(),
            extra: BTreeMap::new(),
        },
        status: None,
    }
}

/// The Configuration as the Service first creates it: [`configuration`], and when the
/// Route it creates alongside sends traffic to it, already carrying the labeler's
/// `serving.knative.dev/routes` annotation naming that Route. The labeler would write the
/// same a moment later; written at creation, it is one store write less per Service, and
/// the configuration's first revision is created `active` (see
/// `configuration::resources::make_revision`) instead of being promoted by another write.
/// Not with a bring-your-own revision name: then the Route waits for the Configuration
/// (see [`must_wait_for_configuration`]) and may never be ours.
pub fn new_configuration(svc: &Service) -> Configuration {
    let mut cfg = configuration(svc);
    let routed = route(svc)
        .spec
        .traffic
        .iter()
        .any(|t| t.configuration_name == svc.metadata.name);
    if routed && svc.spec.template.metadata.name.is_empty() {
        cfg.metadata
            .annotations
            .insert(annotation::ROUTES.into(), svc.metadata.name.clone());
    }
    cfg
}

/// The Route a Service owns: same name and namespace, the Service's traffic with every
/// entry that names no revision pointed at the Service's Configuration.
pub fn route(svc: &Service) -> Route {
    let mut labels = svc.metadata.labels.clone();
    labels.insert(label::SERVICE.into(), svc.metadata.name.clone());
    let annotations = filter_annotations(&svc.metadata.annotations, |k| k == LAST_APPLIED);
    let mut traffic = svc.spec.traffic.clone();
    if traffic.is_empty() {
        // The API server defaults this; a Service written straight to the store may not be.
        traffic.push(TrafficTarget {
            latest_revision: Some(true),
            percent: Some(100),
            ..Default::default()
        });
    }
    for t in &mut traffic {
        if t.revision_name.is_empty() {
            t.configuration_name = svc.metadata.name.clone();
        }
    }
    Route {
        api_version: API_VERSION.into(),
        kind: kinds::ROUTE.kind.into(),
        metadata: child_meta(svc, labels, annotations),
        spec: RouteSpec {
            traffic,
            extra: BTreeMap::new(),
        },
        status: None,
    }
}

fn child_meta(
    svc: &Service,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: svc.metadata.name.clone(),
        namespace: svc.metadata.namespace.clone(),
        labels,
        annotations,
        owner_references: vec![objects::owner_reference(&kinds::SERVICE, &svc.metadata)],
        ..Default::default()
    }
}

fn filter_annotations(
    from: &BTreeMap<String, String>,
    drop: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    from.iter()
        .filter(|(k, _)| !drop(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `existing` brought to `desired`'s spec, labels and annotations, keeping everything else
/// (uid, resourceVersion, status) and the annotations other controllers own: the labeler's
/// `serving.knative.dev/routes`. None when nothing differs, so a resync writes nothing.
pub fn reconcile_configuration(
    desired: &Configuration,
    existing: &Configuration,
) -> Option<Configuration> {
    let mut annotations = desired.metadata.annotations.clone();
    if let Some(routes) = existing.metadata.annotations.get(annotation::ROUTES) {
        annotations.insert(annotation::ROUTES.into(), routes.clone());
    }
    let same = existing.spec == desired.spec
        && existing.metadata.labels == desired.metadata.labels
        && existing.metadata.annotations == annotations;
    (!same).then(|| {
        let mut c = existing.clone();
        c.spec = desired.spec.clone();
        c.metadata.labels = desired.metadata.labels.clone();
        c.metadata.annotations = annotations;
        c
    })
}

/// Like [`reconcile_configuration`] for the Route (which has no foreign metadata).
pub fn reconcile_route(desired: &Route, existing: &Route) -> Option<Route> {
    let same = existing.spec == desired.spec
        && existing.metadata.labels == desired.metadata.labels
        && existing.metadata.annotations == desired.metadata.annotations;
    (!same).then(|| {
        let mut r = existing.clone();
        r.spec = desired.spec.clone();
        r.metadata.labels = desired.metadata.labels.clone();
        r.metadata.annotations = desired.metadata.annotations.clone();
        r
    })
}

/// With a bring-your-own revision name the Route must not be reprogrammed before the
/// Configuration has stamped out (or adopted) that revision, or traffic could briefly go to
/// a revision of that name that is not ours (Knative's `pkg/reconciler/service/service.go`).
pub fn must_wait_for_configuration(cfg: &Configuration) -> bool {
    !cfg.spec.template.metadata.name.is_empty() && !observed(&cfg.metadata, status_of_cfg(cfg))
}

/// Knative's `CheckNameAvailability`: the BYO revision name is taken when a revision of that
/// name exists that our Configuration does not control, or that was stamped from a
/// different spec.
pub fn revision_name_taken(cfg: &Configuration, rev: Option<&Revision>) -> bool {
    let Some(rev) = rev else { return false };
    if !objects::is_controlled_by(&rev.metadata, &cfg.metadata.uid) {
        return true;
    }
    let generation = cfg.metadata.generation.to_string();
    if rev.metadata.labels.get(label::CONFIGURATION_GENERATION) == Some(&generation) {
        return false;
    }
    rev.spec != cfg.spec.template.spec
}

fn status_of_cfg(cfg: &Configuration) -> Option<&Status> {
    cfg.status.as_ref().map(|s| &s.status)
}

fn observed(meta: &ObjectMeta, status: Option<&Status>) -> bool {
    status.map_or(0, |s| s.observed_generation) == meta.generation
}

/// What the reconciler found for one child, after creating or updating it.
#[derive(Debug)]
pub enum Child<'a, T> {
    /// Exists and is controlled by this Service.
    Owned(&'a T),
    /// An object with the child's name exists, controlled by someone else.
    NotOwned,
}

// Manual impls: a derive would demand `T: Copy`, but only the reference is copied.
impl<T> Clone for Child<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Child<'_, T> {}

/// How far the reconcile got, in Knative's order: the Configuration, then (unless waiting
/// for a BYO name, or the name is taken) the Route.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub config: Child<'a, Configuration>,
    /// The BYO revision name is taken by a revision that is not ours.
    pub revision_name_taken: bool,
    /// None when the reconcile stopped before the Route.
    pub route: Option<Child<'a, Route>>,
}

/// The Service status Knative's reconciler would write, starting from the stored one (so
/// unchanged conditions keep their transition times).
pub fn status(svc: &Service, seen: Observed<'_>, now: DateTime<Utc>) -> ServiceStatus {
    let mut st = svc.status.clone().unwrap_or_default();
    CONDITIONS.initialize(&mut st.status, now);
    // Knative bumps observedGeneration after every reconcile, successful or not.
    st.status.observed_generation = svc.metadata.generation;

    let cfg = match seen.config {
        Child::NotOwned => {
            CONDITIONS.mark_false(
                &mut st.status,
                CONFIGURATIONS_READY,
                "NotOwned",
                &format!(
                    "There is an existing Configuration {:?} that we do not own.",
                    svc.metadata.name
                ),
                now,
            );
            return st;
        }
        Child::Owned(cfg) => cfg,
    };
    let cfg_status = cfg.status.clone().unwrap_or_default();
    if !observed(&cfg.metadata, Some(&cfg_status.status)) {
        CONDITIONS.mark_unknown(
            &mut st.status,
            CONFIGURATIONS_READY,
            "OutOfDate",
            "The Configuration is still working to reflect the latest desired specification.",
            now,
        );
        if must_wait_for_configuration(cfg) {
            return st;
        }
    } else {
        st.latest_created_revision_name = cfg_status.latest_created_revision_name.clone();
        st.latest_ready_revision_name = cfg_status.latest_ready_revision_name.clone();
        propagate(
            &mut st.status,
            CONFIGURATIONS_READY,
            &cfg_status.status,
            now,
        );
    }

    if seen.revision_name_taken {
        CONDITIONS.mark_false(
            &mut st.status,
            ROUTES_READY,
            "RevisionNameTaken",
            &format!(
                "The revision name {:?} is taken by a conflicting Revision, so traffic will not be migrated",
                cfg.spec.template.metadata.name
            ),
            now,
        );
        return st;
    }

    let route = match seen.route {
        None => return st,
        Some(Child::NotOwned) => {
            CONDITIONS.mark_false(
                &mut st.status,
                ROUTES_READY,
                "NotOwned",
                &format!(
                    "There is an existing Route {:?} that we do not own.",
                    svc.metadata.name
                ),
                now,
            );
            return st;
        }
        Some(Child::Owned(route)) => route,
    };
    let route_status = route.status.clone().unwrap_or_default();
    if !observed(&route.metadata, Some(&route_status.status)) {
        CONDITIONS.mark_unknown(
            &mut st.status,
            ROUTES_READY,
            "OutOfDate",
            "The Route is still working to reflect the latest desired specification.",
            now,
        );
    } else {
        st.url = route_status.url.clone();
        st.address = route_status
            .address
            .clone()
            .filter(|a: &Addressable| !a.url.is_empty());
        st.traffic = route_status.traffic.clone();
        propagate(&mut st.status, ROUTES_READY, &route_status.status, now);
    }
    if crate::conditions::is_true(&st.status, ROUTES_READY)
        && !traffic_migrated(cfg, &route.spec.traffic, &route_status.traffic)
    {
        CONDITIONS.mark_unknown(
            &mut st.status,
            ROUTES_READY,
            "TrafficNotMigrated",
            "Traffic is not yet migrated to the latest revision.",
            now,
        );
    }
    st
}

/// Copies a child's Ready condition onto one of the Service's dependents; a child without
/// a Ready condition leaves it as it was (Knative's `Propagate*Status`).
fn propagate(st: &mut Status, dependent: &str, child: &Status, now: DateTime<Utc>) {
    let Some(c) = child.condition(READY) else {
        return;
    };
    match c.status {
        ConditionStatus::True => CONDITIONS.mark_true(st, dependent, now),
        ConditionStatus::False => CONDITIONS.mark_false(st, dependent, &c.reason, &c.message, now),
        ConditionStatus::Unknown => {
            CONDITIONS.mark_unknown(st, dependent, &c.reason, &c.message, now)
        }
    }
}

/// Knative's `checkRoutesNotReady`: a Ready Route may still serve an older revision than
/// the Configuration's latest ready one (it has not seen the Configuration change yet).
/// Its status traffic must equal its spec traffic with our configuration resolved,
/// ignoring `url` and `latestRevision`. The spec side is merged the way the route merges
/// its status (same tag, revision and latestRevision), so a spec listing one target twice
/// does not look unmigrated forever.
fn traffic_migrated(cfg: &Configuration, spec: &[TrafficTarget], status: &[TrafficTarget]) -> bool {
    let latest_ready = cfg
        .status
        .as_ref()
        .map_or("", |s| s.latest_ready_revision_name.as_str());
    let mut want: Vec<TrafficTarget> = Vec::new();
    for t in spec {
        let mut t = t.clone();
        if t.configuration_name == cfg.metadata.name {
            t.revision_name = latest_ready.to_owned();
            t.configuration_name.clear();
        }
        crate::route::resources::merge_into(&mut want, t);
    }
    want.len() == status.len()
        && want.iter().zip(status).all(|(want, got)| {
            got.tag == want.tag
                && got.revision_name == want.revision_name
                && got.configuration_name == want.configuration_name
                && got.percent == want.percent
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, test_clock};
    use wisp_api::meta::Condition;

    fn svc() -> Service {
        let mut s = testing::service("default", "hello", "img");
        s.metadata.uid = "svc-uid".into();
        s.metadata.generation = 3;
        s.metadata.labels.insert("app".into(), "x".into());
        for (k, v) in [
            (LAST_APPLIED, "{}"),
            ("serving.knative.dev/rollout-duration", "60s"),
            ("serving.knative.dev/rolloutDuration", "60s"),
            ("networking.knative.dev/ingress.class", "c"),
        ] {
            s.metadata.annotations.insert(k.into(), v.into());
        }
        s
    }

    #[test]
    fn configuration_builder() {
        let s = svc();
        let c = configuration(&s);
        assert_eq!(
            (c.metadata.name.as_str(), c.metadata.namespace.as_str()),
            ("hello", "default")
        );
        assert_eq!(
            (c.api_version.as_str(), c.kind.as_str()),
            (API_VERSION, "Configuration")
        );
        let labels: Vec<_> = c
            .metadata
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("app", "x"),
                ("serving.knative.dev/service", "hello"),
                ("serving.knative.dev/serviceUID", "svc-uid")
            ]
        );
        let annotations: Vec<_> = c.metadata.annotations.keys().map(String::as_str).collect();
        assert_eq!(annotations, ["networking.knative.dev/ingress.class"]);
        assert_eq!(c.spec.template, s.spec.template);
        let owner = &c.metadata.owner_references[..];
        assert_eq!(owner.len(), 1);
        assert_eq!(
            (
                owner[0].api_version.as_str(),
                owner[0].kind.as_str(),
                owner[0].name.as_str(),
                owner[0].uid.as_str()
            ),
            ("serving.knative.dev/v1", "Service", "hello", "svc-uid")
        );
        assert_eq!(
            (owner[0].controller, owner[0].block_owner_deletion),
            (Some(true), Some(true))
        );
    }

    #[test]
    fn route_builder() {
        let mut s = svc();
        s.spec.traffic = vec![
            TrafficTarget {
                latest_revision: Some(true),
                percent: Some(80),
                ..Default::default()
            },
            TrafficTarget {
                revision_name: "hello-00001".into(),
                latest_revision: Some(false),
                percent: Some(20),
                tag: "old".into(),
                ..Default::default()
            },
        ];
        let r = route(&s);
        let labels: Vec<_> = r
            .metadata
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [("app", "x"), ("serving.knative.dev/service", "hello")]
        );
        // Rollout duration configures the route, so it is kept here.
        let annotations: Vec<_> = r.metadata.annotations.keys().map(String::as_str).collect();
        assert_eq!(
            annotations,
            [
                "networking.knative.dev/ingress.class",
                "serving.knative.dev/rollout-duration",
                "serving.knative.dev/rolloutDuration"
            ]
        );
        assert_eq!(r.spec.traffic[0].configuration_name, "hello");
        assert_eq!(r.spec.traffic[0].percent, Some(80));
        assert_eq!(r.spec.traffic[1].configuration_name, "");
        assert_eq!(r.spec.traffic[1].revision_name, "hello-00001");
        assert_eq!(r.spec.traffic[1].tag, "old");
        assert_eq!(r.metadata.owner_references[0].kind, "Service");

        s.spec.traffic.clear();
        let r = route(&s);
        assert_eq!(
            r.spec.traffic,
            [TrafficTarget {
                configuration_name: "hello".into(),
                latest_revision: Some(true),
                percent: Some(100),
                ..Default::default()
            }]
        );
    }

    #[test]
    fn reconcile_children_clobbers_drift_but_keeps_routes_annotation() {
        let s = svc();
        let desired = configuration(&s);
        let mut existing = desired.clone();
        existing.metadata.uid = "cfg-uid".into();
        existing
            .metadata
            .annotations
            .insert(annotation::ROUTES.into(), "hello".into());
        assert!(
            reconcile_configuration(&desired, &existing).is_none(),
            "labeler metadata is not drift"
        );

        existing.metadata.labels.insert("extra".into(), "1".into());
        existing.spec.template.spec.timeout_seconds = Some(1);
        let fixed = reconcile_configuration(&desired, &existing).expect("drift");
        assert_eq!(fixed.spec, desired.spec);
        assert_eq!(fixed.metadata.labels, desired.metadata.labels);
        assert_eq!(fixed.metadata.uid, "cfg-uid");
        assert_eq!(
            fixed
                .metadata
                .annotations
                .get(annotation::ROUTES)
                .map(String::as_str),
            Some("hello")
        );

        let desired = route(&s);
        let mut existing = desired.clone();
        assert!(reconcile_route(&desired, &existing).is_none());
        existing.spec.traffic[0].percent = Some(50);
        assert_eq!(
            reconcile_route(&desired, &existing).unwrap().spec,
            desired.spec
        );
    }

    #[test]
    fn byo_name_checks() {
        let s = svc();
        let mut cfg = configuration(&s);
        cfg.metadata.uid = "cfg-uid".into();
        cfg.metadata.generation = 2;
        assert!(
            !must_wait_for_configuration(&cfg),
            "no BYO name: never wait"
        );
        cfg.spec.template.metadata.name = "hello-byo".into();
        assert!(must_wait_for_configuration(&cfg));
        cfg.status = Some(Default::default());
        cfg.status.as_mut().unwrap().status.observed_generation = 2;
        assert!(!must_wait_for_configuration(&cfg));

        let mut rev = testing::revision("default", "hello-byo", "hello", 2);
        rev.spec = cfg.spec.template.spec.clone();
        assert!(
            revision_name_taken(&cfg, Some(&rev)),
            "not controlled by the configuration"
        );
        rev.metadata.owner_references.push(objects::owner_reference(
            &kinds::CONFIGURATION,
            &cfg.metadata,
        ));
        assert!(!revision_name_taken(&cfg, Some(&rev)));
        rev.metadata
            .labels
            .insert(label::CONFIGURATION_GENERATION.into(), "1".into());
        assert!(
            !revision_name_taken(&cfg, Some(&rev)),
            "older generation, same spec"
        );
        rev.spec.timeout_seconds = Some(1);
        assert!(
            revision_name_taken(&cfg, Some(&rev)),
            "older generation, other spec"
        );
        assert!(!revision_name_taken(&cfg, None));
    }

    fn ready(cs: ConditionStatus, reason: &str, message: &str) -> Status {
        let mut st = Status::default();
        crate::conditions::set(&mut st, READY, cs, reason, message, test_clock());
        st
    }

    fn child_cfg(
        generation: i64,
        observed: i64,
        cs: ConditionStatus,
        reason: &str,
    ) -> Configuration {
        let mut c = configuration(&svc());
        c.metadata.generation = generation;
        let mut st = ready(cs, reason, "cfg message");
        st.observed_generation = observed;
        c.status = Some(wisp_api::serving::ConfigurationStatus {
            status: st,
            latest_created_revision_name: "hello-00002".into(),
            latest_ready_revision_name: "hello-00001".into(),
        });
        c
    }

    fn child_route(
        generation: i64,
        observed: i64,
        cs: ConditionStatus,
        reason: &str,
        rev: &str,
    ) -> Route {
        let mut r = route(&svc());
        r.metadata.generation = generation;
        let mut st = ready(cs, reason, "route message");
        st.observed_generation = observed;
        r.status = Some(wisp_api::serving::RouteStatus {
            status: st,
            url: "http://hello.default.example.com".into(),
            address: Some(Addressable {
                url: "http://hello.default.svc.cluster.local".into(),
            }),
            traffic: vec![TrafficTarget {
                revision_name: rev.into(),
                latest_revision: Some(true),
                percent: Some(100),
                ..Default::default()
            }],
        });
        r
    }

    fn cond(st: &ServiceStatus, ty: &str) -> (ConditionStatus, String, String) {
        let c: &Condition = st.status.condition(ty).unwrap();
        (c.status, c.reason.clone(), c.message.clone())
    }

    #[test]
    fn status_combinations() {
        use ConditionStatus::{False, True, Unknown};
        let now = test_clock();
        let s = svc();
        let cfg_ok = child_cfg(1, 1, True, "");
        let cfg_old = child_cfg(2, 1, True, "");
        let cfg_failed = child_cfg(1, 1, False, "RevisionFailed");
        let route_ok = child_route(1, 1, True, "", "hello-00001");
        let route_stale = child_route(1, 1, True, "", "hello-00000");
        let route_old = child_route(2, 1, True, "", "hello-00001");
        let route_missing = child_route(1, 1, False, "RevisionMissing", "hello-00001");
        type Want<'a> = [(ConditionStatus, &'a str); 3];
        let cases: Vec<(&str, Observed, Want)> = vec![
            (
                "all ready",
                Observed {
                    config: Child::Owned(&cfg_ok),
                    revision_name_taken: false,
                    route: Some(Child::Owned(&route_ok)),
                },
                [(True, ""), (True, ""), (True, "")],
            ),
            (
                "configuration not owned",
                Observed {
                    config: Child::NotOwned,
                    revision_name_taken: false,
                    route: None,
                },
                [(False, "NotOwned"), (Unknown, ""), (False, "NotOwned")],
            ),
            (
                "route not owned",
                Observed {
                    config: Child::Owned(&cfg_ok),
                    revision_name_taken: false,
                    route: Some(Child::NotOwned),
                },
                [(True, ""), (False, "NotOwned"), (False, "NotOwned")],
            ),
            (
                "configuration out of date",
                Observed {
                    config: Child::Owned(&cfg_old),
                    revision_name_taken: false,
                    route: Some(Child::Owned(&route_ok)),
                },
                [(Unknown, "OutOfDate"), (True, ""), (Unknown, "OutOfDate")],
            ),
            (
                "route out of date",
                Observed {
                    config: Child::Owned(&cfg_ok),
                    revision_name_taken: false,
                    route: Some(Child::Owned(&route_old)),
                },
                [(True, ""), (Unknown, "OutOfDate"), (Unknown, "OutOfDate")],
            ),
            (
                "configuration failed",
                Observed {
                    config: Child::Owned(&cfg_failed),
                    revision_name_taken: false,
                    route: Some(Child::Owned(&route_missing)),
                },
                [
                    (False, "RevisionFailed"),
                    (False, "RevisionMissing"),
                    (False, "RevisionFailed"),
                ],
            ),
            (
                "traffic not migrated",
                Observed {
                    config: Child::Owned(&cfg_ok),
                    revision_name_taken: false,
                    route: Some(Child::Owned(&route_stale)),
                },
                [
                    (True, ""),
                    (Unknown, "TrafficNotMigrated"),
                    (Unknown, "TrafficNotMigrated"),
                ],
            ),
            (
                "revision name taken",
                Observed {
                    config: Child::Owned(&cfg_ok),
                    revision_name_taken: true,
                    route: None,
                },
                [
                    (True, ""),
                    (False, "RevisionNameTaken"),
                    (False, "RevisionNameTaken"),
                ],
            ),
        ];
        for (what, seen, want) in cases {
            let st = status(&s, seen, now);
            assert_eq!(st.status.observed_generation, 3, "{what}");
            for (ty, (cs, reason)) in [CONFIGURATIONS_READY, ROUTES_READY, READY]
                .into_iter()
                .zip(want)
            {
                let (got_cs, got_reason, _) = cond(&st, ty);
                assert_eq!((got_cs, got_reason.as_str()), (cs, reason), "{what}: {ty}");
            }
        }
    }

    #[test]
    fn status_copies_fields_and_messages() {
        let now = test_clock();
        let s = svc();
        let cfg = child_cfg(1, 1, ConditionStatus::True, "");
        let r = child_route(1, 1, ConditionStatus::True, "", "hello-00001");
        let st = status(
            &s,
            Observed {
                config: Child::Owned(&cfg),
                revision_name_taken: false,
                route: Some(Child::Owned(&r)),
            },
            now,
        );
        assert_eq!(st.latest_created_revision_name, "hello-00002");
        assert_eq!(st.latest_ready_revision_name, "hello-00001");
        assert_eq!(st.url, "http://hello.default.example.com");
        assert_eq!(
            st.address.unwrap().url,
            "http://hello.default.svc.cluster.local"
        );
        assert_eq!(st.traffic[0].revision_name, "hello-00001");

        let st = status(
            &s,
            Observed {
                config: Child::NotOwned,
                revision_name_taken: false,
                route: None,
            },
            now,
        );
        assert_eq!(
            cond(&st, CONFIGURATIONS_READY).2,
            "There is an existing Configuration \"hello\" that we do not own."
        );
        let st = status(
            &s,
            Observed {
                config: Child::Owned(&cfg),
                revision_name_taken: false,
                route: Some(Child::NotOwned),
            },
            now,
        );
        assert_eq!(
            cond(&st, ROUTES_READY).2,
            "There is an existing Route \"hello\" that we do not own."
        );
        let old = child_cfg(2, 1, ConditionStatus::True, "");
        let st = status(
            &s,
            Observed {
                config: Child::Owned(&old),
                revision_name_taken: false,
                route: None,
            },
            now,
        );
        assert_eq!(
            cond(&st, CONFIGURATIONS_READY).2,
            "The Configuration is still working to reflect the latest desired specification."
        );
        assert_eq!(
            st.latest_created_revision_name, "",
            "fields are not copied from an out-of-date child"
        );
        let stale = child_route(1, 1, ConditionStatus::True, "", "hello-00000");
        let st = status(
            &s,
            Observed {
                config: Child::Owned(&cfg),
                revision_name_taken: false,
                route: Some(Child::Owned(&stale)),
            },
            now,
        );
        assert_eq!(
            cond(&st, ROUTES_READY).2,
            "Traffic is not yet migrated to the latest revision."
        );
    }

    #[test]
    fn status_is_stable() {
        // Re-computing from the written status changes nothing (no transition-time churn).
        let now = test_clock();
        let mut s = svc();
        let cfg = child_cfg(1, 1, ConditionStatus::True, "");
        let r = child_route(1, 1, ConditionStatus::True, "", "hello-00001");
        let seen = Observed {
            config: Child::Owned(&cfg),
            revision_name_taken: false,
            route: Some(Child::Owned(&r)),
        };
        let first = status(&s, seen, now);
        s.status = Some(first.clone());
        let later = now + chrono::Duration::seconds(60);
        assert_eq!(status(&s, seen, later), first);
    }
}
