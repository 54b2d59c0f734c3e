//! Pure parts of the labeler (Knative `pkg/reconciler/labeler`): which revisions and
//! configurations a route references, and the metadata change that records (or drops) the
//! reference on one of them.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use wisp_api::{
    kinds,
    meta::ObjectMeta,
    serving::{Configuration, Revision, Route},
};

use crate::{
    conditions,
    names::{annotation, label, routing_state},
    objects,
};

/// The objects a route points at, by name (all in the route's namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    pub revisions: BTreeSet<String>,
    pub configurations: BTreeSet<String>,
}

/// Knative's `syncRoutingMeta` walk over status and spec traffic: a revision target marks
/// the revision and the configuration controlling it; a configuration target marks the
/// configuration, and with `latestRevision` also its latest *created* revision, so a new
/// revision is already `active` when it becomes ready and traffic moves to it. Names that
/// do not exist (yet) are skipped; their creation triggers another pass.
pub fn references(
    route: &Route,
    configurations: &BTreeMap<String, Configuration>,
    revisions: &BTreeMap<String, Revision>,
) -> References {
    let mut out = References::default();
    let status = route.status.iter().flat_map(|s| &s.traffic);
    for tt in status.chain(&route.spec.traffic) {
        let mut cfg_name = tt.configuration_name.as_str();
        if !tt.revision_name.is_empty() {
            let Some(rev) = revisions.get(&tt.revision_name) else {
                continue;
            };
            out.revisions.insert(rev.metadata.name.clone());
            if let Some(owner) = owning_configuration(&rev.metadata) {
                cfg_name = owner;
            }
        }
        let Some(cfg) = configurations.get(cfg_name) else {
            continue;
        };
        out.configurations.insert(cfg.metadata.name.clone());
        let latest_created = latest_created(cfg);
        if tt.latest_revision == Some(true)
            && revisions
                .get(&latest_created)
                .is_some_and(|rev| cfg.status.is_some() || owned_by(rev, cfg))
        {
            out.revisions.insert(latest_created);
        }
    }
    out
}

/// The configuration's latest created revision: its status's, or, before its first status,
/// the revision it creates for its generation. A new configuration writes its first status
/// only once that revision has one (see `configuration::ConfigurationReconciler`), and
/// meanwhile the revision must not be demoted from the `active` it was created with.
pub(crate) fn latest_created(cfg: &Configuration) -> String {
    match &cfg.status {
        Some(s) => s.latest_created_revision_name.clone(),
        None => crate::configuration::resources::revision_name(cfg),
    }
}

fn owned_by(rev: &Revision, cfg: &Configuration) -> bool {
    objects::is_controlled_by(&rev.metadata, &cfg.metadata.uid)
}

/// The configuration a revision belongs to: its controller if that is a Configuration,
/// else its configuration label.
pub(crate) fn owning_configuration(meta: &ObjectMeta) -> Option<&str> {
    match objects::controller_of(meta) {
        Some(r) if r.kind == kinds::CONFIGURATION.kind => Some(r.name.as_str()),
        _ => meta.labels.get(label::CONFIGURATION).map(String::as_str),
    }
}

/// The route names in an object's `serving.knative.dev/routes` annotation.
pub fn routes(meta: &ObjectMeta) -> BTreeSet<String> {
    meta.annotations
        .get(annotation::ROUTES)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Adds (`referenced`) or removes `route` in the routes annotation; an empty set removes
/// the annotation. Returns whether anything changed.
fn set_route(meta: &mut ObjectMeta, route: &str, referenced: bool) -> bool {
    let mut set = routes(meta);
    let changed = if referenced {
        set.insert(route.to_owned())
    } else {
        set.remove(route)
    };
    if !changed {
        return false;
    }
    if set.is_empty() {
        meta.annotations.remove(annotation::ROUTES);
    } else {
        let joined = set.into_iter().collect::<Vec<_>>().join(",");
        meta.annotations.insert(annotation::ROUTES.into(), joined);
    }
    true
}

/// The configuration with `route` recorded or dropped; None when already so.
pub fn configuration_patch(
    cfg: &Configuration,
    route: &str,
    referenced: bool,
) -> Option<Configuration> {
    let mut c = cfg.clone();
    set_route(&mut c.metadata, route, referenced).then_some(c)
}

/// The revision with `route` recorded or dropped and its routing state brought in line:
/// `active` while any route references it, `reserve` otherwise, stamping
/// `routingStateModified` on every change of state (Knative's `markRoutingState`, which
/// also turns a `pending` revision `active`). None when nothing changes.
pub fn revision_patch(
    rev: &Revision,
    route: &str,
    referenced: bool,
    now: DateTime<Utc>,
) -> Option<Revision> {
    let mut r = rev.clone();
    let mut changed = set_route(&mut r.metadata, route, referenced);
    let want = if routes(&r.metadata).is_empty() {
        routing_state::RESERVE
    } else {
        routing_state::ACTIVE
    };
    if r.metadata
        .labels
        .get(label::ROUTING_STATE)
        .map(String::as_str)
        != Some(want)
    {
        r.metadata
            .labels
            .insert(label::ROUTING_STATE.into(), want.into());
        r.metadata.annotations.insert(
            annotation::ROUTING_STATE_MODIFIED.into(),
            conditions::timestamp(now),
        );
        changed = true;
    }
    changed.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, test_clock};
    use wisp_api::serving::{ConfigurationStatus, RouteStatus, TrafficTarget};

    fn cfg(name: &str, latest_created: &str) -> Configuration {
        let mut c = testing::configuration("default", name, "img");
        c.metadata.uid = format!("{name}-uid");
        c.status = Some(ConfigurationStatus {
            latest_created_revision_name: latest_created.into(),
            ..Default::default()
        });
        c
    }

    fn rev(name: &str, owner: Option<&Configuration>) -> Revision {
        let mut r = testing::revision("default", name, "by-label", 1);
        if let Some(o) = owner {
            r.metadata
                .owner_references
                .push(objects::owner_reference(&kinds::CONFIGURATION, &o.metadata));
        }
        r
    }

    fn tt(cfg: &str, rev: &str, latest: bool) -> TrafficTarget {
        TrafficTarget {
            configuration_name: cfg.into(),
            revision_name: rev.into(),
            latest_revision: Some(latest),
            percent: Some(50),
            ..Default::default()
        }
    }

    #[test]
    fn referenced_objects() {
        let hello = cfg("hello", "hello-00003");
        let configs: BTreeMap<_, _> = [hello.clone(), cfg("by-label", "")]
            .into_iter()
            .map(|c| (c.metadata.name.clone(), c))
            .collect();
        let revs: BTreeMap<_, _> = [
            rev("hello-00001", Some(&hello)),
            rev("hello-00002", Some(&hello)),
            rev("hello-00003", Some(&hello)),
            rev("loose", None),
        ]
        .into_iter()
        .map(|r| (r.metadata.name.clone(), r))
        .collect();
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();

        // (what, spec traffic, status traffic, want revisions, want configurations)
        type Case<'a> = (
            &'a str,
            Vec<TrafficTarget>,
            Vec<TrafficTarget>,
            &'a [&'a str],
            &'a [&'a str],
        );
        let cases: Vec<Case> = vec![
            (
                "latest revision marks latest created and the configuration",
                vec![tt("hello", "", true)],
                vec![tt("", "hello-00002", true)],
                &["hello-00002", "hello-00003"],
                &["hello"],
            ),
            (
                "pinned revision marks its owner configuration, not the latest created",
                vec![tt("", "hello-00001", false)],
                vec![],
                &["hello-00001"],
                &["hello"],
            ),
            (
                "revision without owner falls back to its label",
                vec![tt("", "loose", false)],
                vec![],
                &["loose"],
                &["by-label"],
            ),
            (
                "missing targets are skipped",
                vec![tt("nope", "", true), tt("", "gone", false)],
                vec![],
                &[],
                &[],
            ),
        ];
        for (what, spec, status, want_revs, want_cfgs) in cases {
            let mut route = testing::route("default", "r", spec);
            route.status = Some(RouteStatus {
                traffic: status,
                ..Default::default()
            });
            let got = references(&route, &configs, &revs);
            assert_eq!(got.revisions, set(want_revs), "{what}");
            assert_eq!(got.configurations, set(want_cfgs), "{what}");
        }
    }

    #[test]
    fn revision_metadata() {
        let now = test_clock();
        let stamp = conditions::timestamp(now);
        let mut pending = rev("r", None);
        pending
            .metadata
            .labels
            .insert(label::ROUTING_STATE.into(), "pending".into());

        // Referenced: annotated and active.
        let r = revision_patch(&pending, "b", true, now).unwrap();
        assert_eq!(r.metadata.annotations[annotation::ROUTES], "b");
        assert_eq!(r.metadata.labels[label::ROUTING_STATE], "active");
        assert_eq!(
            r.metadata.annotations[annotation::ROUTING_STATE_MODIFIED],
            stamp
        );
        assert!(revision_patch(&r, "b", true, now).is_none(), "idempotent");

        // A second route: sorted list, state unchanged, timestamp untouched.
        let later = now + chrono::Duration::seconds(5);
        let r2 = revision_patch(&r, "a", true, later).unwrap();
        assert_eq!(r2.metadata.annotations[annotation::ROUTES], "a,b");
        assert_eq!(
            r2.metadata.annotations[annotation::ROUTING_STATE_MODIFIED],
            stamp
        );

        // Dropping one keeps it active; dropping the last parks it.
        let r3 = revision_patch(&r2, "b", false, later).unwrap();
        assert_eq!(r3.metadata.annotations[annotation::ROUTES], "a");
        assert_eq!(r3.metadata.labels[label::ROUTING_STATE], "active");
        let r4 = revision_patch(&r3, "a", false, later).unwrap();
        assert!(!r4.metadata.annotations.contains_key(annotation::ROUTES));
        assert_eq!(r4.metadata.labels[label::ROUTING_STATE], "reserve");
        assert_eq!(
            r4.metadata.annotations[annotation::ROUTING_STATE_MODIFIED],
            conditions::timestamp(later)
        );
        assert!(revision_patch(&r4, "a", false, later).is_none());
    }

    #[test]
    fn configuration_metadata() {
        let c = cfg("hello", "");
        let c1 = configuration_patch(&c, "r", true).unwrap();
        assert_eq!(c1.metadata.annotations[annotation::ROUTES], "r");
        assert!(configuration_patch(&c1, "r", true).is_none());
        let c2 = configuration_patch(&c1, "r", false).unwrap();
        assert!(c2.metadata.annotations.is_empty());
        assert!(configuration_patch(&c2, "r", false).is_none());
        assert!(
            !c2.metadata.labels.contains_key(label::ROUTING_STATE),
            "configurations have no routing state"
        );
    }
}
