//! [`RouteIndex`]: which Routes name which Configurations and Revisions in their
//! `spec.traffic`, kept in memory so that "the routes referencing this object" costs a map
//! lookup per store event instead of listing and decoding every Route of the namespace.
//!
//! It is fed from the store's event stream, like a Kubernetes informer's indexer: the
//! runner calls every reconciler's [`watches`](crate::Reconciler::watches) with every
//! event, in resourceVersion order, and the route and labeler reconcilers hand Route events
//! to [`RouteIndex::observe`] before answering lookups for Configuration and Revision events.
//! A lookup for an event at resourceVersion N therefore sees every Route as of N, which is
//! all a level-based reconciler needs: a Route that starts referencing the object after N
//! is queued by its own event and reads the object then. The runner's start-up resync
//! dispatches every stored object, which builds the index on start.
//!
//! A Route deleted while the watch was compacted away (the runner resyncs then) is never
//! seen deleted and stays indexed: lookups may name it, and reconciling a missing route is a
//! no-op clean-up, so that costs an extra reconcile, never a missed one.

use std::{
    collections::{BTreeSet, HashMap},
    sync::RwLock,
};

use serde_json::Value;
use wisp_api::kinds::{self, ResourceKind};

use crate::names::label;

/// Routes by the configuration and revision names their `spec.traffic` targets. Shared by
/// the route and labeler reconcilers; cheap to query, safe to feed the same event twice.
#[derive(Debug, Default)]
pub struct RouteIndex {
    inner: RwLock<Inner>,
}

/// (namespace, name).
type Key = (String, String);

#[derive(Debug, Default)]
struct Inner {
    /// Every indexed route and what it targets.
    routes: HashMap<Key, Targets>,
    /// (namespace, configuration) → the routes targeting it.
    configurations: HashMap<Key, BTreeSet<String>>,
    /// (namespace, revision) → the routes targeting it.
    revisions: HashMap<Key, BTreeSet<String>>,
}

/// The names one route's spec traffic targets.
#[derive(Debug, Default, PartialEq, Eq)]
struct Targets {
    configurations: BTreeSet<String>,
    revisions: BTreeSet<String>,
}

impl Targets {
    /// From a stored Route's JSON (read directly: no typed decode on the watch path).
    fn of(route: &Value) -> Self {
        let mut t = Targets::default();
        for tt in route["spec"]["traffic"].as_array().into_iter().flatten() {
            for (field, set) in [
                ("configurationName", &mut t.configurations),
                ("revisionName", &mut t.revisions),
            ] {
                if let Some(n) = tt[field].as_str().filter(|n| !n.is_empty()) {
                    set.insert(n.to_owned());
                }
            }
        }
        t
    }
}

impl RouteIndex {
    /// Records a Route as of a store event: its current targets, or its removal when the
    /// object carries a `deletionTimestamp` (the last state of a deleted object; the store
    /// sets it only then).
    pub fn observe(&self, route: &Value) {
        let meta = &route["metadata"];
        let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
            return;
        };
        let deleted = !meta["deletionTimestamp"].is_null();
        let targets = (!deleted).then(|| Targets::of(route));
        let key = (ns.to_owned(), name.to_owned());
        {
            // Most route events (status updates) leave the targets alone.
            let inner = wisp_sync::read(&self.inner);
            if inner.routes.get(&key) == targets.as_ref() {
                return;
            }
        }
        let mut inner = wisp_sync::write(&self.inner);
        inner.unlink(&key);
        if let Some(targets) = targets {
            inner.link(&key, &targets);
            inner.routes.insert(key, targets);
        }
    }

    /// The routes whose spec traffic references the event object: a Configuration by name;
    /// a Revision by name or through its configuration label. Sorted, without duplicates.
    pub fn routes_referencing(&self, event_kind: &ResourceKind, obj: &Value) -> Vec<Key> {
        let meta = &obj["metadata"];
        let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
            return Vec::new();
        };
        let (cfg, rev) = if *event_kind == kinds::CONFIGURATION {
            (Some(name), None)
        } else if *event_kind == kinds::REVISION {
            (meta["labels"][label::CONFIGURATION].as_str(), Some(name))
        } else {
            return Vec::new();
        };
        let inner = wisp_sync::read(&self.inner);
        let find = |map: &HashMap<Key, BTreeSet<String>>, target: Option<&str>| {
            target
                .filter(|t| !t.is_empty())
                .and_then(|t| map.get(&(ns.to_owned(), t.to_owned())))
                .into_iter()
                .flatten()
                .cloned()
                .collect::<BTreeSet<String>>()
        };
        let mut routes = find(&inner.configurations, cfg);
        routes.extend(find(&inner.revisions, rev));
        routes.into_iter().map(|r| (ns.to_owned(), r)).collect()
    }

    /// Number of indexed routes (for tests and debugging).
    pub fn len(&self) -> usize {
        wisp_sync::read(&self.inner).routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn link(&mut self, (ns, route): &Key, targets: &Targets) {
        for (names, map) in [
            (&targets.configurations, &mut self.configurations),
            (&targets.revisions, &mut self.revisions),
        ] {
            for n in names {
                map.entry((ns.clone(), n.clone()))
                    .or_default()
                    .insert(route.clone());
            }
        }
    }

    fn unlink(&mut self, key: &Key) {
        let Some(old) = self.routes.remove(key) else {
            return;
        };
        let (ns, route) = key;
        for (names, map) in [
            (&old.configurations, &mut self.configurations),
            (&old.revisions, &mut self.revisions),
        ] {
            for n in names {
                let k = (ns.clone(), n.clone());
                if let Some(set) = map.get_mut(&k) {
                    set.remove(route);
                    if set.is_empty() {
                        map.remove(&k);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn route(ns: &str, name: &str, traffic: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "spec": {"traffic": traffic}})
    }

    fn cfg(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    fn rev(ns: &str, name: &str, config: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "labels": {label::CONFIGURATION: config}}})
    }

    fn keys(ns: &str, names: &[&str]) -> Vec<Key> {
        names
            .iter()
            .map(|n| (ns.to_owned(), (*n).to_owned()))
            .collect()
    }

    #[test]
    fn follows_routes_as_they_change() {
        let idx = RouteIndex::default();
        let c = &kinds::CONFIGURATION;
        let r = &kinds::REVISION;
        idx.observe(&route(
            "ns",
            "a",
            json!([{"configurationName": "hello", "percent": 100}]),
        ));
        idx.observe(&route(
            "ns",
            "b",
            json!([{"revisionName": "hello-00001"}, {"configurationName": "other"}]),
        ));
        idx.observe(&route(
            "elsewhere",
            "a",
            json!([{"configurationName": "hello"}]),
        ));
        idx.observe(&route(
            "ns",
            "empty",
            json!([{"configurationName": "", "revisionName": ""}]),
        ));
        assert_eq!(idx.len(), 4);

        // (event, expected routes)
        let cases: Vec<(&ResourceKind, Value, Vec<Key>)> = vec![
            (c, cfg("ns", "hello"), keys("ns", &["a"])),
            (c, cfg("ns", "other"), keys("ns", &["b"])),
            (c, cfg("ns", "nobody"), vec![]),
            (c, cfg("elsewhere", "hello"), keys("elsewhere", &["a"])),
            // A revision: by its configuration label, by name, or both.
            (r, rev("ns", "hello-00002", "hello"), keys("ns", &["a"])),
            (
                r,
                rev("ns", "hello-00001", "hello"),
                keys("ns", &["a", "b"]),
            ),
            (r, rev("ns", "x", "other"), keys("ns", &["b"])),
            (r, rev("ns", "x", ""), vec![]),
            (&kinds::SERVICE, cfg("ns", "hello"), vec![]),
            (c, json!({"metadata": {}}), vec![]),
        ];
        for (kind, obj, want) in &cases {
            assert_eq!(
                idx.routes_referencing(kind, obj),
                *want,
                "{} {obj}",
                kind.kind
            );
        }

        // Retargeting drops the old links; the same event twice changes nothing.
        let moved = route("ns", "a", json!([{"configurationName": "other"}]));
        idx.observe(&moved);
        idx.observe(&moved);
        assert!(idx.routes_referencing(c, &cfg("ns", "hello")).is_empty());
        assert_eq!(
            idx.routes_referencing(c, &cfg("ns", "other")),
            keys("ns", &["a", "b"])
        );

        // The last state of a deleted route (deletionTimestamp set) removes it.
        let mut gone = route("ns", "b", json!([{"revisionName": "hello-00001"}]));
        gone["metadata"]["deletionTimestamp"] = json!("2026-11-21T12:00:00Z");
        idx.observe(&gone);
        assert!(
            idx.routes_referencing(r, &rev("ns", "hello-00001", "x"))
                .is_empty()
        );
        assert_eq!(
            idx.routes_referencing(c, &cfg("ns", "other")),
            keys("ns", &["a"])
        );
        assert_eq!(idx.len(), 3);
        let inner = idx.inner.read().unwrap();
        assert!(
            !inner
                .revisions
                .contains_key(&("ns".into(), "hello-00001".into())),
            "no empty sets are left behind"
        );
    }
}
