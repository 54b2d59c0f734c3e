//! [`ObjectRefIndex`]: which Revisions reference which Secrets and ConfigMaps (env,
//! envFrom, volumes, imagePullSecrets), so that a Secret's event re-queues only the
//! revisions that use it, with a map lookup instead of listing every revision. Fed from the
//! store's events like the `RouteIndex`; a revision's spec is immutable, so each revision is
//! decoded once (per uid).

use std::{
    collections::{BTreeSet, HashMap},
    sync::RwLock,
};

use wisp_api::{kinds, serving::PodSpec};

use crate::reconciler::{Event, ObjectRef, Observer};

/// (namespace, kind, name) of a referenced object; kind is `Secret` or `ConfigMap`.
type Target = (String, &'static str, String);

#[derive(Debug, Default)]
pub struct ObjectRefIndex {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// (namespace, revision) → (uid, what it references).
    revisions: HashMap<(String, String), (String, Vec<Target>)>,
    /// Referenced object → the revisions (names) referencing it.
    targets: HashMap<Target, BTreeSet<String>>,
}

impl ObjectRefIndex {
    /// Records a revision as of a store event (`None`: deleted).
    fn record(&self, ns: &str, name: &str, revision: Option<(&str, &serde_json::Value)>) {
        let key = (ns.to_owned(), name.to_owned());
        if let Some((uid, _)) = revision
            && wisp_sync::read(&self.inner)
                .revisions
                .get(&key)
                .is_some_and(|(u, _)| u == uid)
        {
            // Same revision: its spec cannot have changed.
            return;
        }
        let refs = revision.map(|(uid, spec)| {
            // A spec that does not decode references nothing it could resolve either.
            let pod: PodSpec = serde_json::from_value(spec.clone()).unwrap_or_default();
            let targets: Vec<Target> = wisp_runtime::podconfig::references(&pod)
                .into_iter()
                .map(|(kind, n)| (ns.to_owned(), kind, n))
                .collect();
            (uid.to_owned(), targets)
        });
        let mut inner = wisp_sync::write(&self.inner);
        if let Some((_, old)) = inner.revisions.remove(&key) {
            for t in old {
                if let Some(set) = inner.targets.get_mut(&t) {
                    set.remove(name);
                    if set.is_empty() {
                        inner.targets.remove(&t);
                    }
                }
            }
        }
        if let Some((uid, targets)) = refs {
            for t in &targets {
                inner
                    .targets
                    .entry(t.clone())
                    .or_default()
                    .insert(name.to_owned());
            }
            inner.revisions.insert(key, (uid, targets));
        }
    }

    /// The revisions referencing the event's Secret or ConfigMap.
    pub fn revisions_referencing(&self, event: &Event<'_>) -> Vec<ObjectRef> {
        let kind = if event.kind == &kinds::SECRET {
            "Secret"
        } else if event.kind == &kinds::CONFIG_MAP {
            "ConfigMap"
        } else {
            return Vec::new();
        };
        let t = (event.meta.namespace.clone(), kind, event.meta.name.clone());
        wisp_sync::read(&self.inner)
            .targets
            .get(&t)
            .into_iter()
            .flatten()
            .map(|r| event.sibling(&kinds::REVISION, r))
            .collect()
    }
}

impl Observer for ObjectRefIndex {
    fn observe(&self, event: &Event<'_>) {
        if event.kind == &kinds::REVISION {
            let m = event.meta;
            let rev = (!event.deleted).then(|| (m.uid.as_str(), &event.object["spec"]));
            self.record(&m.namespace, &m.name, rev);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wisp_api::meta::ObjectMeta;

    use super::*;

    fn event<'a>(
        kind: &'static kinds::ResourceKind,
        meta: &'a ObjectMeta,
        object: &'a serde_json::Value,
        deleted: bool,
    ) -> Event<'a> {
        Event {
            kind,
            meta,
            object,
            deleted,
        }
    }

    fn meta(ns: &str, name: &str, uid: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn secret_events_find_the_revisions_using_them() {
        let idx = ObjectRefIndex::default();
        let rev = json!({"spec": {"containers": [{"image": "x", "env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}});
        let m = meta("ns", "r-1", "u1");
        idx.observe(&event(&kinds::REVISION, &m, &rev, false));
        let null = serde_json::Value::Null;
        let names = |kind, ns: &str, name: &str| {
            let m = meta(ns, name, "");
            idx.revisions_referencing(&event(kind, &m, &null, false))
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&kinds::SECRET, "ns", "db"), ["r-1"]);
        assert_eq!(names(&kinds::CONFIG_MAP, "ns", "cfg"), ["r-1"]);
        assert!(
            names(&kinds::SECRET, "ns", "cfg").is_empty(),
            "kind matters"
        );
        assert!(
            names(&kinds::SECRET, "other", "db").is_empty(),
            "namespace matters"
        );
        idx.observe(&event(&kinds::REVISION, &m, &rev, true));
        assert!(names(&kinds::SECRET, "ns", "db").is_empty(), "deleted");
    }
}
