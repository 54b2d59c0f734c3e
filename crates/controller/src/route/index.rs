//! [`RouteIndex`]: which Routes name which Configurations and Revisions in their
//! `spec.traffic`, kept in memory so that "the routes referencing this object" costs a map
//! lookup per store event instead of listing and decoding every Route of the namespace.
//!
//! It is fed from the store's event stream, like a Kubernetes informer's indexer: it is an
//! [`Observer`], which the runner hands every event, in resourceVersion order, before it
//! asks the reconcilers' [`watches`](crate::Reconciler::watches), where the route and
//! labeler reconcilers look up the routes of Configuration and Revision events.
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
use wisp_api::kinds;

use crate::{
    names::label,
    reconciler::{Event, ObjectRef, Observer},
};

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
    /// Records the Route `namespace/name` as of a store event: the targets of `route` (its
    /// stored JSON), or its removal when `None` (deleted).
    pub fn record(&self, namespace: &str, name: &str, route: Option<&Value>) {
        let targets = route.map(Targets::of);
        let key = (namespace.to_owned(), name.to_owned());
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

    /// The routes whose spec traffic references the event's object: a Configuration by
    /// name; a Revision by name or through its configuration label. Sorted, without
    /// duplicates.
    pub fn routes_referencing(&self, event: &Event<'_>) -> Vec<ObjectRef> {
        let meta = event.meta;
        let name = meta.name.as_str();
        let (cfg, rev) = if event.kind == &kinds::CONFIGURATION {
            (Some(name), None)
        } else if event.kind == &kinds::REVISION {
            let cfg = meta.labels.get(label::CONFIGURATION).map(String::as_str);
            (cfg, Some(name))
        } else {
            return Vec::new();
        };
        let ns = &meta.namespace;
        let inner = wisp_sync::read(&self.inner);
        let find = |map: &HashMap<Key, BTreeSet<String>>, target: Option<&str>| {
            target
                .filter(|t| !t.is_empty())
                .and_then(|t| map.get(&(ns.clone(), t.to_owned())))
                .into_iter()
                .flatten()
                .cloned()
                .collect::<BTreeSet<String>>()
        };
        let mut routes = find(&inner.configurations, cfg);
        routes.extend(find(&inner.revisions, rev));
        routes
            .into_iter()
            .map(|r| event.sibling(&kinds::ROUTE, &r))
            .collect()
    }

    /// Number of indexed routes (for tests and debugging).
    pub fn len(&self) -> usize {
        wisp_sync::read(&self.inner).routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Route events keep the index current (the runner calls observers before any watch).
impl Observer for RouteIndex {
    fn observe(&self, event: &Event<'_>) {
        if event.kind == &kinds::ROUTE {
            let route = (!event.deleted).then_some(event.object);
            self.record(&event.meta.namespace, &event.meta.name, route);
        }
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
    use wisp_api::kinds::ResourceKind;

    use super::*;
    use crate::testing::OwnedEvent;

    /// A Route event, as the runner hands it to observers.
    fn feed(idx: &RouteIndex, route: &Value, deleted: bool) {
        let mut ev = OwnedEvent::new(&kinds::ROUTE, route.clone());
        if deleted {
            ev = ev.deleted();
        }
        idx.observe(&ev.event());
    }

    /// The routes referencing an object, as a watch asks for them.
    fn lookup(idx: &RouteIndex, kind: &'static ResourceKind, obj: &Value) -> Vec<Key> {
        let ev = OwnedEvent::new(kind, obj.clone());
        idx.routes_referencing(&ev.event())
            .into_iter()
            .map(|r| (r.namespace, r.name))
            .collect()
    }

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
        feed(
            &idx,
            &route(
                "ns",
                "a",
                json!([{"configurationName": "hello", "percent": 100}]),
            ),
            false,
        );
        feed(
            &idx,
            &route(
                "ns",
                "b",
                json!([{"revisionName": "hello-00001"}, {"configurationName": "other"}]),
            ),
            false,
        );
        feed(
            &idx,
            &route("elsewhere", "a", json!([{"configurationName": "hello"}])),
            false,
        );
        feed(
            &idx,
            &route(
                "ns",
                "empty",
                json!([{"configurationName": "", "revisionName": ""}]),
            ),
            false,
        );
        assert_eq!(idx.len(), 4);

        // (event, expected routes)
        let cases: Vec<(&'static ResourceKind, Value, Vec<Key>)> = vec![
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
            assert_eq!(lookup(&idx, kind, obj), *want, "{} {obj}", kind.kind);
        }

        // Retargeting drops the old links; the same event twice changes nothing.
        let moved = route("ns", "a", json!([{"configurationName": "other"}]));
        feed(&idx, &moved, false);
        feed(&idx, &moved, false);
        assert!(lookup(&idx, c, &cfg("ns", "hello")).is_empty());
        assert_eq!(
            lookup(&idx, c, &cfg("ns", "other")),
            keys("ns", &["a", "b"])
        );

        // The last state of a deleted route removes it.
        let gone = route("ns", "b", json!([{"revisionName": "hello-00001"}]));
        feed(&idx, &gone, true);
        assert!(lookup(&idx, r, &rev("ns", "hello-00001", "x")).is_empty());
        assert_eq!(lookup(&idx, c, &cfg("ns", "other")), keys("ns", &["a"]));
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
