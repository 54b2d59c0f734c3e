//! The event recorder: `core/v1` Events of what wisp's controllers and its runtime did,
//! where Knative's reconcilers, Kubernetes' controllers and the kubelet record theirs.
//!
//! Kept in memory (a [`View`]), aggregated as client-go's `EventCorrelator` aggregates
//! (`k8s.io/client-go/tools/record/events_cache.go`):
//! - the same event again — same source, involved object, type, reason and message — is
//!   one Event whose `count` grows and whose `lastTimestamp` moves (`eventLogger`);
//! - once 10 events of one source, object, type and reason with different messages came
//!   within 10 minutes, further ones become one Event with the message
//!   `(combined from similar events): <latest message>` (`EventAggregator`);
//!
//! and bounded: an Event expires an hour after it was last seen (kube-apiserver's default
//! `--event-ttl`), and at most [`MAX_EVENTS`] are held (the least recently seen goes
//! first), so a crash loop or any other repeat never grows memory. Like client-go's
//! `EventCorrelator`, the recorder remembers the keys it correlates by — for counting
//! repeats and for combining similar events — for the [`LRU_CACHE_ENTRIES`] most recently
//! used keys of each (`maxLruCacheEntries`); with ten thousand services created within ten
//! minutes it otherwise remembered every object's keys until they aged out.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use hashlink::{LruCache, linked_hash_map::Entry};
use serde_json::{Value, json};
use wisp_sync::lock;

use crate::view::{View, timestamp};

/// kube-apiserver's `--event-ttl` default.
pub const EVENT_TTL: Duration = Duration::from_secs(3600);

/// Events held at once; past it the least recently seen is dropped.
pub const MAX_EVENTS: usize = 10_000;

/// client-go's `maxLruCacheEntries` (`k8s.io/client-go/tools/record/events_cache.go`):
/// the size of the correlator's caches of event keys and of aggregate keys.
pub const LRU_CACHE_ENTRIES: usize = 4096;

/// client-go's `defaultAggregateMaxEvents` and `defaultAggregateIntervalInSeconds`.
const AGGREGATE_MAX_EVENTS: usize = 10;
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);

/// The object an Event is about (core/v1 `ObjectReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// A part of the object (`spec.containers{user-container}`), or "".
    pub field_path: String,
}

impl Regarding {
    /// A reference to a Knative or core object from its metadata.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str, uid: &str) -> Regarding {
        Regarding {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            field_path: String::new(),
        }
    }

    /// A reference to an object given as Kubernetes JSON.
    pub fn of(obj: &Value) -> Regarding {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let m = &obj["metadata"];
        Regarding {
            api_version: s(&obj["apiVersion"]),
            kind: s(&obj["kind"]),
            namespace: s(&m["namespace"]),
            name: s(&m["name"]),
            uid: s(&m["uid"]),
            field_path: String::new(),
        }
    }

    /// The same object, one part of it.
    pub fn field(mut self, path: impl Into<String>) -> Regarding {
        self.field_path = path.into();
        self
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
        });
        if !self.field_path.is_empty() {
            v["fieldPath"] = self.field_path.clone().into();
        }
        v
    }
}

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Who reports an event (core/v1 `EventSource`): Knative's controller names
/// (`service-controller`), kube's (`deployment-controller`), or `kubelet` with the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    pub component: &'static str,
    pub host: &'static str,
}

impl Source {
    pub const fn controller(component: &'static str) -> Source {
        Source {
            component,
            host: "",
        }
    }
}

struct State {
    /// Dedupe key → the Event's (namespace, name), for the most recently used keys
    /// (client-go's `eventLogger` cache). A key may outlive its Event (expired or
    /// evicted): a repeat then finds no Event and records a new one.
    by_key: LruCache<String, (String, String)>,
    /// (namespace, name) → when it was last seen.
    held: HashMap<(String, String), i64>,
    /// (last seen in ns, namespace, name): expiry and eviction order.
    by_time: BTreeSet<(i64, String, String)>,
    /// Aggregate key → (when one was last seen, distinct messages seen since the window
    /// began), for the most recently used keys (client-go's `EventAggregator` cache).
    similar: LruCache<String, (i64, BTreeSet<String>)>,
    /// The timestamp the last new Event was named after.
    last_name: i64,
}

impl State {
    fn new(cache_entries: usize) -> State {
        State {
            by_key: LruCache::new(cache_entries),
            held: HashMap::new(),
            by_time: BTreeSet::new(),
            similar: LruCache::new(cache_entries),
            last_name: 0,
        }
    }
}

/// Records Events into a view (see the module doc). Cheap to share.
pub struct Recorder {
    view: Arc<View>,
    state: Mutex<State>,
    clock: fn() -> DateTime<Utc>,
    max: usize,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

fn nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

impl Recorder {
    pub fn new(view: Arc<View>, clock: fn() -> DateTime<Utc>) -> Recorder {
        Self::with_max(view, clock, MAX_EVENTS)
    }

    /// A recorder holding at most `max` Events.
    pub fn with_max(view: Arc<View>, clock: fn() -> DateTime<Utc>, max: usize) -> Recorder {
        Self::with_limits(view, clock, max, LRU_CACHE_ENTRIES)
    }

    /// A recorder holding at most `max` Events and remembering `cache_entries` keys of
    /// each kind.
    fn with_limits(
        view: Arc<View>,
        clock: fn() -> DateTime<Utc>,
        max: usize,
        cache_entries: usize,
    ) -> Recorder {
        Recorder {
            view,
            state: Mutex::new(State::new(cache_entries.max(1))),
            clock,
            max: max.max(1),
        }
    }

    pub fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// Records one event about `regarding`.
    pub fn record(
        &self,
        source: Source,
        regarding: &Regarding,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let now = (self.clock)();
        let now_ns = nanos(now);
        let mut message: String = message.into();
        // kube-apiserver refuses a message over 1 KiB in an Event (validation); the
        // recorder cuts it as client-go's does not, so that nothing is refused.
        if message.len() > 1024 {
            let mut end = 1024;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let r = regarding;
        let aggregate = format!(
            "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
            source.component,
            source.host,
            r.kind,
            r.namespace,
            r.name,
            r.uid,
            r.api_version,
            type_.as_str(),
            reason
        );
        let mut st = lock(&self.state);
        self.expire_locked(&mut st, now_ns);
        // EventAggregator: once the tenth distinct message of one source, object, type and
        // reason arrives within the interval (counted from the last one), it and every
        // later one become one combined event (`EventAggregate`).
        let window = i64::try_from(AGGREGATE_INTERVAL.as_nanos()).unwrap_or(i64::MAX);
        // Used: to the back of the LRU order, as groupcache's `Get` moves it; a new key
        // first pushes out the least recently used one if the cache is full (the entry
        // API alone would let it hold one more).
        if !st.similar.contains_key(&aggregate) && st.similar.len() >= st.similar.capacity() {
            st.similar.remove_lru();
        }
        let entry = match st.similar.entry(aggregate.clone()) {
            Entry::Occupied(mut seen) => {
                seen.to_back();
                seen.into_mut()
            }
            Entry::Vacant(new) => new.insert((now_ns, BTreeSet::new())),
        };
        if entry.0.saturating_add(window) < now_ns {
            entry.1.clear();
        }
        entry.0 = now_ns;
        entry.1.insert(message.clone());
        let dedupe = if entry.1.len() < AGGREGATE_MAX_EVENTS {
            format!("{aggregate}\u{0}{message}")
        } else {
            // Keep the set from growing past the bound, as client-go's `PopAny`.
            entry.1.pop_first();
            message = format!("(combined from similar events): {message}");
            aggregate
        };
        // EventLogger: the same event again counts up.
        if let Some(key) = st.by_key.get(&dedupe).cloned()
            && let Some(old) = self.view.get(&key.0, &key.1)
        {
            let mut ev = (*old).clone();
            ev["count"] = (ev["count"].as_i64().unwrap_or(1) + 1).into();
            ev["lastTimestamp"] = timestamp(now).into();
            ev["message"] = message.into();
            let st = &mut *st;
            if let Some(last) = st.held.get_mut(&key) {
                st.by_time.remove(&(*last, key.0.clone(), key.1.clone()));
                *last = now_ns;
                st.by_time.insert((now_ns, key.0.clone(), key.1.clone()));
            }
            self.view.upsert(ev);
            return;
        }
        // client-go names an Event `<object>.<UnixNano in hex>`; two in the same
        // nanosecond (or under a test clock) still get distinct names.
        st.last_name = st.last_name.saturating_add(1).max(now_ns);
        let name = format!("{}.{:x}", r.name, st.last_name);
        let ev = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": r.namespace, "creationTimestamp": timestamp(now)},
            "involvedObject": r.json(),
            "reason": reason,
            "message": message,
            "source": if source.host.is_empty() {
                json!({"component": source.component})
            } else {
                json!({"component": source.component, "host": source.host})
            },
            "firstTimestamp": timestamp(now),
            "lastTimestamp": timestamp(now),
            "count": 1,
            "type": type_.as_str(),
            "eventTime": null,
            "reportingComponent": source.component,
            "reportingInstance": source.host,
        });
        let key = (r.namespace.clone(), name);
        st.by_key.insert(dedupe, key.clone());
        st.held.insert(key.clone(), now_ns);
        st.by_time.insert((now_ns, key.0, key.1));
        let evict = st.held.len().saturating_sub(self.max);
        let mut evicted = Vec::new();
        for _ in 0..evict {
            if let Some(oldest) = st.by_time.pop_first() {
                evicted.push(self.forget_locked(&mut st, (oldest.1, oldest.2)));
            }
        }
        drop(st);
        self.view.upsert(ev);
        for (ns, name) in evicted {
            self.view.delete(&ns, &name);
        }
    }

    /// Drops every Event last seen more than [`EVENT_TTL`] ago (also done on each
    /// record; `wisp serve` calls it every minute so that idle expiry happens too).
    pub fn expire(&self) {
        let now = nanos((self.clock)());
        let mut st = lock(&self.state);
        self.expire_locked(&mut st, now);
    }

    fn expire_locked(&self, st: &mut State, now: i64) {
        let ttl = i64::try_from(EVENT_TTL.as_nanos()).unwrap_or(i64::MAX);
        while let Some(first) = st.by_time.first().cloned() {
            if now - first.0 <= ttl {
                break;
            }
            st.by_time.pop_first();
            let (ns, name) = self.forget_locked(st, (first.1, first.2));
            self.view.delete(&ns, &name);
        }
    }

    fn forget_locked(&self, st: &mut State, key: (String, String)) -> (String, String) {
        st.held.remove(&key);
        key
    }

    /// Events held now.
    pub fn len(&self) -> usize {
        lock(&self.state).held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An Event in `events.k8s.io/v1`'s shape, converted from core/v1 as kube-apiserver
/// converts the one stored Event for either API (`pkg/apis/events/v1/conversion.go`).
pub fn to_events_v1(core: &Value) -> Value {
    let mut meta = core["metadata"].clone();
    if let Some(m) = meta.as_object_mut() {
        m.remove("selfLink");
    }
    let mut v = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": meta,
        "eventTime": core["eventTime"],
        "reportingController": core["reportingComponent"],
        "reportingInstance": core["reportingInstance"],
        "action": core["action"],
        "reason": core["reason"],
        "regarding": core["involvedObject"],
        "note": core["message"],
        "type": core["type"],
        "deprecatedSource": core["source"],
        "deprecatedFirstTimestamp": core["firstTimestamp"],
        "deprecatedLastTimestamp": core["lastTimestamp"],
        "deprecatedCount": core["count"],
    });
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, v| !v.is_null());
        // eventTime is required in events.k8s.io/v1 and marshals as null when zero.
        m.entry("eventTime").or_insert(Value::Null);
    }
    v
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use wisp_api::kinds;

    use super::*;

    static NOW: AtomicI64 = AtomicI64::new(0);

    fn clock() -> DateTime<Utc> {
        DateTime::from_timestamp(1_704_067_200 + NOW.load(Ordering::SeqCst), 0).unwrap()
    }

    fn pod() -> Regarding {
        Regarding::new("v1", "Pod", "default", "hello-abc", "uid-1")
    }

    fn events(r: &Recorder) -> Vec<Value> {
        r.view()
            .list(None, |_| true)
            .0
            .iter()
            .map(|e| (**e).clone())
            .collect()
    }

    // One test owns the shared clock (tests in this module run in parallel otherwise).
    #[test]
    fn repeats_count_up_similar_ones_combine_and_all_expire() {
        NOW.store(0, Ordering::SeqCst);
        let r = Recorder::new(Arc::new(View::new(&kinds::EVENT, 0)), clock);
        let kubelet = Source {
            component: "kubelet",
            host: "wisp",
        };
        // A crash loop: the same BackOff event every few seconds for ten minutes.
        for i in 0..120 {
            NOW.store(i * 5, Ordering::SeqCst);
            r.record(
                kubelet,
                &pod().field("spec.containers{user-container}"),
                EventType::Warning,
                "BackOff",
                "Back-off restarting failed container user-container in pod hello-abc_default(uid-1)",
            );
        }
        let evs = events(&r);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0]["count"], 120);
        assert_eq!(evs[0]["firstTimestamp"], "2024-01-01T00:00:00Z");
        assert_eq!(evs[0]["lastTimestamp"], "2024-01-01T00:09:55Z");
        assert_eq!(
            evs[0]["involvedObject"]["fieldPath"],
            "spec.containers{user-container}"
        );
        assert_eq!(
            evs[0]["source"],
            json!({"component": "kubelet", "host": "wisp"})
        );

        // Messages that differ each time: ten distinct ones, then one combined event.
        let deploy = Regarding::new("apps/v1", "Deployment", "default", "d", "uid-2");
        for i in 0..30 {
            r.record(
                Source::controller("deployment-controller"),
                &deploy,
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set d-abc to {i}"),
            );
        }
        let evs = events(&r);
        assert_eq!(evs.len(), 1 + 9 + 1);
        let combined: Vec<&Value> = evs
            .iter()
            .filter(|e| {
                e["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("(combined from similar events): ")
            })
            .collect();
        assert_eq!(combined.len(), 1);
        assert_eq!(combined[0]["count"], 21);
        assert_eq!(
            combined[0]["message"],
            "(combined from similar events): Scaled up replica set d-abc to 29"
        );

        // An hour after they were last seen, all are gone.
        NOW.store(595 + 3601, Ordering::SeqCst);
        r.expire();
        assert!(events(&r).is_empty());
        assert!(r.is_empty());

        // And the recorder holds no more than its bound.
        let small = Recorder::with_max(Arc::new(View::new(&kinds::EVENT, 0)), clock, 3);
        for i in 0..5 {
            NOW.store(10_000 + i, Ordering::SeqCst);
            small.record(
                kubelet,
                &Regarding::new("v1", "Pod", "default", &format!("p{i}"), "u"),
                EventType::Normal,
                "Started",
                "Started container user-container",
            );
        }
        assert_eq!(small.len(), 3);
        let names: Vec<String> = events(&small)
            .iter()
            .map(|e| e["involvedObject"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["p2", "p3", "p4"]);
    }

    #[test]
    fn the_correlator_remembers_only_its_most_recent_keys() {
        fn fixed() -> DateTime<Utc> {
            DateTime::from_timestamp(1_704_067_200, 0).unwrap()
        }
        let r = Recorder::with_limits(Arc::new(View::new(&kinds::EVENT, 0)), fixed, 100, 2);
        let started = |name: &str| {
            r.record(
                Source::controller("kubelet"),
                &Regarding::new("v1", "Pod", "default", name, "u"),
                EventType::Normal,
                "Started",
                "Started container user-container",
            )
        };
        started("p0");
        started("p0");
        started("p1");
        started("p0");
        let counts = |r: &Recorder| -> Vec<(String, i64)> {
            events(r)
                .iter()
                .map(|e| {
                    (
                        e["involvedObject"]["name"].as_str().unwrap().to_string(),
                        e["count"].as_i64().unwrap(),
                    )
                })
                .collect()
        };
        let mut seen = counts(&r);
        seen.sort();
        assert_eq!(seen, [("p0".into(), 3), ("p1".into(), 1)]);
        // p2 pushes out the least recently used key, p1's: its repeat is a new Event, as
        // client-go's eventLogger records one when its cache forgot the key.
        started("p2");
        started("p1");
        let mut seen = counts(&r);
        seen.sort();
        assert_eq!(
            seen,
            [
                ("p0".into(), 3),
                ("p1".into(), 1),
                ("p1".into(), 1),
                ("p2".into(), 1)
            ]
        );
        let st = lock(&r.state);
        assert_eq!((st.by_key.len(), st.similar.len()), (2, 2));
    }

    #[test]
    fn events_v1_shape() {
        let core = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "x.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "x"}, "reason": "Started",
            "message": "Started container", "source": {"component": "kubelet"},
            "firstTimestamp": "t0", "lastTimestamp": "t1", "count": 2, "type": "Normal",
            "eventTime": null, "reportingComponent": "kubelet", "reportingInstance": "wisp"});
        let v1 = to_events_v1(&core);
        assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v1["regarding"]["kind"], "Pod");
        assert_eq!(v1["note"], "Started container");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(v1["reportingController"], "kubelet");
        assert!(v1.get("eventTime").is_some());
    }
}
