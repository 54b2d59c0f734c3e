//! [`View`]: one kind's objects, held in memory as Kubernetes JSON, with what the API
//! needs to serve them as it serves stored kinds — a resourceVersion counter, get, list in
//! key order, and an event log that watches read from a resourceVersion.
//!
//! Producers (the controllers, from what the runtime and the autoscaler report) change a
//! view one object, or one producer's set of objects, at a time: the cost of a change is
//! the size of what changed, never the size of the view.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use serde_json::Value;
use tokio::sync::watch;
use wisp_api::kinds::ResourceKind;
use wisp_sync::lock;

use crate::packed::{Codec, Packed};

/// Events a view keeps for watches that resume from a resourceVersion (the store keeps
/// 10 000 too); a watch from before the oldest one is told 410 Expired and re-lists.
pub const LOG_CAPACITY: usize = 10_000;

/// A watch event's type, as Kubernetes names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of a view.
#[derive(Clone, Debug)]
pub struct ViewEvent {
    pub resource_version: u64,
    pub event_type: EventType,
    /// The object after the change (the last state for a deletion), with this event's
    /// resourceVersion.
    pub object: Arc<Value>,
}

/// A watch asked for a resourceVersion older than the view's event log reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// The oldest resourceVersion a watch may still start from.
    pub oldest: u64,
}

type Key = (String, String);

/// One event as the log keeps it (see [`Inner`]).
struct Logged {
    resource_version: u64,
    event_type: EventType,
    object: Packed,
}

/// An object the view made itself from a `Value`: its text always parses.
fn parse(text: Option<String>) -> Arc<Value> {
    Arc::new(
        text.and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null),
    )
}

/// One kind's objects. Cheap to share (`Arc<View>`); every method takes the view's lock
/// briefly and never across an `.await`.
pub struct View {
    kind: &'static ResourceKind,
    inner: Mutex<Inner>,
    /// Packs and unpacks the texts [`Inner`] holds. Its own lock, so that a list unpacks
    /// without holding `inner`'s; taken after `inner`'s when both are.
    codec: Mutex<Codec>,
    /// The newest resourceVersion, for watchers to sleep on.
    latest: watch::Sender<u64>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("kind", &self.kind.kind)
            .finish_non_exhaustive()
    }
}

/// Objects and events are held as their JSON text, packed ([`crate::packed`]), and
/// unpacked and parsed when read: a `serde_json::Value` takes about nine times the memory
/// of its text (16 KiB for a 1.7 KiB Service), and the views hold several objects per
/// revision — with 10 000 services, about 1 GiB as values against about 110 MiB as text,
/// and about 20 MiB packed.
struct Inner {
    objects: BTreeMap<Key, Packed>,
    /// Each producer set's members ([`View::replace_set`]), sorted. A boxed slice: most
    /// sets hold one to three objects, and a `BTreeSet`'s first node alone takes about
    /// 500 bytes (1.2 KiB per service with 10 000 services).
    sets: HashMap<String, Box<[Key]>>,
    rv: u64,
    log: VecDeque<Logged>,
    /// The resourceVersion a watch must at least start from (events after it are in the
    /// log).
    oldest: u64,
    capacity: usize,
}

/// A resourceVersion to start counting from: the current time in microseconds, so that a
/// view's versions keep rising across restarts of wisp. A client resuming a watch from a
/// version the previous process handed out then gets 410 Expired and re-lists, instead of
/// waiting for a version the new process would reach only much later.
pub fn initial_resource_version() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or(1)
}

fn key_of(obj: &Value) -> Key {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap_or("").to_string(),
        m["name"].as_str().unwrap_or("").to_string(),
    )
}

/// Now as Kubernetes writes a timestamp (RFC 3339, seconds, UTC).
pub fn timestamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl View {
    /// An empty view of `kind` whose resourceVersions start after `start`.
    pub fn new(kind: &'static ResourceKind, start: u64) -> View {
        Self::with_capacity(kind, start, LOG_CAPACITY)
    }

    /// [`View::new`] keeping `capacity` events for watches.
    pub fn with_capacity(kind: &'static ResourceKind, start: u64, capacity: usize) -> View {
        View {
            kind,
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                sets: HashMap::new(),
                rv: start,
                log: VecDeque::new(),
                oldest: start,
                capacity: capacity.max(1),
            }),
            codec: Mutex::default(),
            latest: watch::channel(start).0,
        }
    }

    pub fn kind(&self) -> &'static ResourceKind {
        self.kind
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.inner).rv
    }

    /// Wakes when the resourceVersion moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// Puts `obj` in the view (keyed by its namespace and name). Its `uid` and
    /// `creationTimestamp` are kept from the object it replaces, or made up when new and
    /// not given; `resourceVersion` is the view's. An object equal to the one held changes
    /// nothing. Returns whether it changed.
    pub fn upsert(&self, obj: Value) -> bool {
        let changed = {
            let mut inner = lock(&self.inner);
            inner.upsert(obj, &mut lock(&self.codec))
        };
        if changed {
            self.announce();
        }
        changed
    }

    /// Removes an object; returns it if it was there.
    pub fn delete(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let removed = {
            let mut inner = lock(&self.inner);
            let key = (namespace.to_string(), name.to_string());
            let removed = inner.delete(&key, &mut lock(&self.codec));
            for members in inner.sets.values_mut() {
                if let Ok(i) = members.binary_search(&key) {
                    let mut rest = std::mem::take(members).into_vec();
                    rest.remove(i);
                    *members = rest.into_boxed_slice();
                }
            }
            removed
        };
        if removed.is_some() {
            self.announce();
        }
        removed
    }

    /// Makes `objects` the whole of what producer set `set` holds (a revision's Pods, a
    /// route's Services): each is upserted, and members of the set missing from `objects`
    /// are deleted. Costs the size of the set, whatever the size of the view. An empty
    /// `objects` removes the set.
    pub fn replace_set(&self, set: &str, objects: Vec<Value>) -> bool {
        let changed = {
            let mut inner = lock(&self.inner);
            let mut codec = lock(&self.codec);
            let mut keys: Vec<Key> = objects.iter().map(key_of).collect();
            keys.sort_unstable();
            keys.dedup();
            let mut changed = false;
            for obj in objects {
                changed |= inner.upsert(obj, &mut codec);
            }
            let old = if keys.is_empty() {
                inner.sets.remove(set).unwrap_or_default()
            } else {
                inner
                    .sets
                    .insert(set.to_string(), keys.clone().into_boxed_slice())
                    .unwrap_or_default()
            };
            for gone in old.iter().filter(|k| keys.binary_search(k).is_err()) {
                changed |= inner.delete(gone, &mut codec).is_some();
            }
            changed
        };
        if changed {
            self.announce();
        }
        changed
    }

    /// The members of a producer set, in key order.
    pub fn set_members(&self, set: &str) -> Vec<Arc<Value>> {
        let packed: Vec<Packed> = {
            let inner = lock(&self.inner);
            inner
                .sets
                .get(set)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| inner.objects.get(k).cloned())
                        .collect()
                })
                .unwrap_or_default()
        };
        self.unpack_all(&packed).into_iter().map(parse).collect()
    }

    /// Whether the view holds the object (without unpacking it).
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        lock(&self.inner)
            .objects
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let packed = lock(&self.inner)
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()?;
        let text = lock(&self.codec).unpack(&packed);
        Some(parse(text))
    }

    /// Texts of packed objects, unpacked under the codec's lock only (and parsed by the
    /// caller after it).
    fn unpack_all(&self, packed: &[Packed]) -> Vec<Option<String>> {
        let mut codec = lock(&self.codec);
        packed.iter().map(|p| codec.unpack(p)).collect()
    }

    /// The objects of one namespace (or all), in (namespace, name) order, that `keep`
    /// accepts, with the view's resourceVersion at that moment.
    pub fn list(
        &self,
        namespace: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, u64) {
        // The texts are copied out (reference counts) under the lock, and unpacked and
        // parsed after it.
        let (texts, rv) = lock(&self.inner).packed_in(namespace);
        let items = self
            .unpack_all(&texts)
            .into_iter()
            .map(parse)
            .filter(|o| keep(o))
            .collect();
        (items, rv)
    }

    /// The JSON texts of one namespace's objects (or all), in (namespace, name) order, with
    /// the view's resourceVersion at that moment: for answers that copy them out as they
    /// are, without parsing them.
    pub fn list_texts(&self, namespace: Option<&str>) -> (Vec<String>, u64) {
        let (packed, rv) = lock(&self.inner).packed_in(namespace);
        // A text the view packed always unpacks; "null" keeps the list whole if not.
        let texts = self
            .unpack_all(&packed)
            .into_iter()
            .map(|t| t.unwrap_or_else(|| "null".into()))
            .collect();
        (texts, rv)
    }

    /// Up to `max` events after resourceVersion `from`, oldest first.
    pub fn events_since(&self, from: u64, max: usize) -> Result<Vec<ViewEvent>, Gone> {
        let inner = lock(&self.inner);
        if from < inner.oldest {
            return Err(Gone {
                oldest: inner.oldest,
            });
        }
        // The log is in resourceVersion order: find the first event after `from`.
        let start = inner.log.partition_point(|e| e.resource_version <= from);
        let (meta, packed): (Vec<(u64, EventType)>, Vec<Packed>) = inner
            .log
            .iter()
            .skip(start)
            .take(max)
            .map(|e| ((e.resource_version, e.event_type), e.object.clone()))
            .unzip();
        drop(inner);
        Ok(meta
            .into_iter()
            .zip(self.unpack_all(&packed))
            .map(|((resource_version, event_type), text)| ViewEvent {
                resource_version,
                event_type,
                object: parse(text),
            })
            .collect())
    }

    fn announce(&self) {
        let rv = lock(&self.inner).rv;
        self.latest.send_replace(rv);
    }
}

impl Inner {
    /// The packed objects of one namespace (or all), in (namespace, name) order (copies of
    /// reference counts), with the view's resourceVersion.
    fn packed_in(&self, namespace: Option<&str>) -> (Vec<Packed>, u64) {
        let packed = match namespace {
            Some(ns) => self
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, o)| o.clone())
                .collect(),
            None => self.objects.values().cloned().collect(),
        };
        (packed, self.rv)
    }

    fn push(&mut self, event_type: EventType, object: Packed) {
        self.log.push_back(Logged {
            resource_version: self.rv,
            event_type,
            object,
        });
        while self.log.len() > self.capacity {
            if let Some(e) = self.log.pop_front() {
                self.oldest = e.resource_version;
            }
        }
    }

    fn upsert(&mut self, mut obj: Value, codec: &mut Codec) -> bool {
        if !obj["metadata"].is_object() {
            obj["metadata"] = Value::Object(Default::default());
        }
        let key = key_of(&obj);
        let old = self.objects.get(&key).map(|t| parse(codec.unpack(t)));
        // The generation moves as the store moves a stored object's: 1 when made, one
        // more for each change of `spec`; a status that reports `observedGeneration`
        // reports that one (a view is always built from the current state).
        if obj.get("spec").is_some() {
            let generation = match &old {
                None => 1,
                Some(o) => {
                    let g = o["metadata"]["generation"].as_i64().unwrap_or(1);
                    if o.get("spec") == obj.get("spec") {
                        g
                    } else {
                        g + 1
                    }
                }
            };
            obj["metadata"]["generation"] = generation.into();
            if obj["status"].get("observedGeneration").is_some() {
                obj["status"]["observedGeneration"] = generation.into();
            }
        }
        let meta = &mut obj["metadata"];
        match &old {
            Some(old) => {
                for kept in ["uid", "creationTimestamp"] {
                    if meta.get(kept).is_none_or(Value::is_null) {
                        meta[kept] = old["metadata"][kept].clone();
                    }
                }
                meta["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                if obj == **old {
                    return false;
                }
            }
            None => {
                if meta.get("uid").is_none_or(Value::is_null) {
                    meta["uid"] = uuid::Uuid::new_v4().to_string().into();
                }
                if meta.get("creationTimestamp").is_none_or(Value::is_null) {
                    meta["creationTimestamp"] = timestamp(chrono::Utc::now()).into();
                }
            }
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let obj = codec.pack(&obj.to_string());
        self.objects.insert(key, obj.clone());
        let ty = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.push(ty, obj);
        true
    }

    fn delete(&mut self, key: &Key, codec: &mut Codec) -> Option<Arc<Value>> {
        let old = self.objects.remove(key)?;
        self.rv += 1;
        // kube sends a deleted object with the resourceVersion of its deletion.
        let mut last = (*parse(codec.unpack(&old))).clone();
        last["metadata"]["resourceVersion"] = self.rv.to_string().into();
        self.push(EventType::Deleted, codec.pack(&last.to_string()));
        Some(Arc::new(last))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wisp_api::kinds;

    use super::*;

    fn pod(ns: &str, name: &str, phase: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": ns, "name": name, "labels": {"app": name}},
               "status": {"phase": phase}})
    }

    fn names(items: &[Arc<Value>]) -> Vec<String> {
        items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn upserts_version_and_keep_identity() {
        let v = View::new(&kinds::POD, 100);
        assert!(v.upsert(pod("a", "p", "Pending")));
        let first = v.get("a", "p").unwrap();
        assert_eq!(first["metadata"]["resourceVersion"], "101");
        let uid = first["metadata"]["uid"].clone();
        assert!(uid.is_string());
        assert!(
            !v.upsert(pod("a", "p", "Pending")),
            "same object: no change"
        );
        assert_eq!(v.resource_version(), 101);
        assert!(v.upsert(pod("a", "p", "Running")));
        let second = v.get("a", "p").unwrap();
        assert_eq!(second["metadata"]["uid"], uid, "uid kept");
        assert_eq!(second["metadata"]["resourceVersion"], "102");
        let gone = v.delete("a", "p").unwrap();
        assert_eq!(gone["metadata"]["resourceVersion"], "103");
        assert!(v.get("a", "p").is_none());
        let evs = v.events_since(100, 10).unwrap();
        let types: Vec<_> = evs.iter().map(|e| e.event_type).collect();
        assert_eq!(
            types,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        assert_eq!(v.events_since(102, 10).unwrap().len(), 1);
    }

    #[test]
    fn a_return_to_an_earlier_state_is_a_change_and_an_equal_object_is_not() {
        let v = View::new(&kinds::POD, 0);
        assert!(v.upsert(pod("a", "p", "Pending")));
        assert!(v.upsert(pod("a", "p", "Running")));
        // Back to an input given before: a change, whatever was given earlier.
        assert!(v.upsert(pod("a", "p", "Pending")), "A, B, A: three states");
        assert!(!v.upsert(pod("a", "p", "Pending")));
        assert_eq!(v.get("a", "p").unwrap()["status"]["phase"], "Pending");
        // An input that differs but makes the same object (the uid the view gave it,
        // spelled out) changes nothing; and neither does repeating it.
        let mut same = pod("a", "p", "Pending");
        same["metadata"]["uid"] = v.get("a", "p").unwrap()["metadata"]["uid"].clone();
        assert!(!v.upsert(same.clone()));
        assert!(!v.upsert(same));
        assert!(v.upsert(pod("a", "p", "Running")));
        assert_eq!(v.resource_version(), 4);
        // A deleted object comes back as new, whatever its input was before.
        v.delete("a", "p");
        assert!(v.upsert(pod("a", "p", "Running")));
        assert!(v.contains("a", "p") && !v.contains("a", "q"));
    }

    #[test]
    fn generations_follow_the_spec() {
        let v = View::new(&kinds::DEPLOYMENT, 0);
        let d = |replicas: i64, ready: i64| {
            json!({"metadata": {"namespace": "a", "name": "d"},
                   "spec": {"replicas": replicas},
                   "status": {"observedGeneration": 0, "readyReplicas": ready}})
        };
        v.upsert(d(1, 0));
        let generation = |v: &View| {
            let o = v.get("a", "d").unwrap();
            (
                o["metadata"]["generation"].as_i64().unwrap(),
                o["status"]["observedGeneration"].as_i64().unwrap(),
            )
        };
        assert_eq!(generation(&v), (1, 1));
        assert!(v.upsert(d(1, 1)), "a status change");
        assert_eq!(generation(&v), (1, 1));
        assert!(!v.upsert(d(1, 1)));
        assert!(v.upsert(d(2, 1)), "a spec change");
        assert_eq!(generation(&v), (2, 2));
    }

    #[test]
    fn lists_by_namespace_in_key_order() {
        let v = View::new(&kinds::POD, 0);
        for (ns, n) in [("b", "x"), ("a", "z"), ("a", "y"), ("c", "w")] {
            v.upsert(pod(ns, n, "Running"));
        }
        let (all, rv) = v.list(None, |_| true);
        assert_eq!(names(&all), ["y", "z", "x", "w"]);
        assert_eq!(rv, 4);
        let (a, _) = v.list(Some("a"), |_| true);
        assert_eq!(names(&a), ["y", "z"]);
        let (none, _) = v.list(Some("aa"), |_| true);
        assert!(none.is_empty());
        // The texts are the objects, in the same order.
        let (texts, rv) = v.list_texts(Some("a"));
        assert_eq!(rv, 4);
        let parsed: Vec<Arc<Value>> = texts
            .iter()
            .map(|t| Arc::new(serde_json::from_str(t).unwrap()))
            .collect();
        assert_eq!(parsed, v.list(Some("a"), |_| true).0);
        assert_eq!(v.list_texts(None).0.len(), 4);
        let (some, _) = v.list(None, |o| o["metadata"]["name"] != "z");
        assert_eq!(names(&some), ["y", "x", "w"]);
    }

    #[test]
    fn sets_replace_only_their_members() {
        let v = View::new(&kinds::POD, 0);
        v.upsert(pod("a", "other", "Running"));
        assert!(v.replace_set(
            "a/rev-1",
            vec![pod("a", "p1", "Running"), pod("a", "p2", "Pending")]
        ));
        assert!(!v.replace_set(
            "a/rev-1",
            vec![pod("a", "p1", "Running"), pod("a", "p2", "Pending")]
        ));
        assert!(v.replace_set("a/rev-1", vec![pod("a", "p2", "Running")]));
        assert_eq!(names(&v.list(None, |_| true).0), ["other", "p2"]);
        assert_eq!(names(&v.set_members("a/rev-1")), ["p2"]);
        assert!(v.replace_set("a/rev-1", vec![]));
        assert_eq!(names(&v.list(None, |_| true).0), ["other"]);
        assert!(v.set_members("a/rev-1").is_empty());
        // A member deleted by itself leaves its set; the rest stay, in key order.
        let three = ["p3", "p1", "p2"].map(|n| pod("a", n, "Running")).to_vec();
        assert!(v.replace_set("a/rev-2", three));
        assert_eq!(names(&v.set_members("a/rev-2")), ["p1", "p2", "p3"]);
        assert!(v.delete("a", "p2").is_some());
        assert_eq!(names(&v.set_members("a/rev-2")), ["p1", "p3"]);
        assert!(v.replace_set("a/rev-2", vec![pod("a", "p3", "Running")]));
        assert_eq!(names(&v.list(None, |_| true).0), ["other", "p3"]);
    }

    #[test]
    fn a_watch_from_before_the_log_is_gone() {
        let v = View::with_capacity(&kinds::POD, 10, 2);
        for i in 0..4 {
            v.upsert(pod("a", &format!("p{i}"), "Running"));
        }
        // Versions 11..14; the log keeps 13 and 14.
        assert_eq!(v.events_since(10, 10).unwrap_err(), Gone { oldest: 12 });
        assert_eq!(v.events_since(12, 10).unwrap().len(), 2);
        assert!(v.events_since(14, 10).unwrap().is_empty());
    }

    #[tokio::test]
    async fn watchers_wake_on_changes() {
        let v = View::new(&kinds::POD, 0);
        let mut rx = v.subscribe();
        v.upsert(pod("a", "p", "Running"));
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), 1);
    }
}
