//! Crate tests: real SQLite files in temporary directories.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::{EventType, LabelSelector, Options, Store, StoreError, WatchEvent};

const SVC: &str = "services.serving.knative.dev";
const CFG: &str = "configurations.serving.knative.dev";
const REV: &str = "revisions.serving.knative.dev";

fn fixed_clock() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap()
}

fn options(event_history: usize) -> Options {
    Options {
        event_history,
        clock: fixed_clock,
        ..Options::default()
    }
}

fn temp_store() -> (TempDir, Store) {
    temp_store_with(crate::DEFAULT_EVENT_HISTORY)
}

fn temp_store_with(event_history: usize) -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(&dir.path().join("wisp.db"), options(event_history)).unwrap();
    (dir, store)
}

fn obj(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"image": "hello"},
    })
}

fn owned(ns: &str, name: &str, owner_uid: &str) -> Value {
    json!({
        "metadata": {
            "name": name,
            "namespace": ns,
            "ownerReferences": [{"kind": "X", "name": "owner", "uid": owner_uid, "controller": true}],
        },
        "spec": {},
    })
}

fn meta<'a>(o: &'a Value, field: &str) -> &'a Value {
    &o["metadata"][field]
}

fn rv(o: &Value) -> u64 {
    meta(o, "resourceVersion")
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn uid(o: &Value) -> String {
    meta(o, "uid").as_str().unwrap().to_owned()
}

fn ns_names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                meta(o, "namespace").as_str().unwrap(),
                meta(o, "name").as_str().unwrap()
            )
        })
        .collect()
}

fn event_summary(events: &[WatchEvent]) -> Vec<(u64, EventType, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.resource_version,
                e.event_type,
                format!(
                    "{}:{}",
                    e.resource,
                    meta(&e.object, "name").as_str().unwrap()
                ),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------- create/get

#[test]
fn create_sets_server_owned_metadata() {
    let (_dir, store) = temp_store();
    let mut input = obj("default", "hello", json!({"app": "a"}));
    input["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    input["metadata"]["uid"] = json!("client-chosen");
    input["metadata"]["resourceVersion"] = json!("99");
    input["status"] = json!({"observedGeneration": 7});

    let created = store.create(SVC, input).unwrap();
    let m = &created["metadata"];
    assert_eq!(m["resourceVersion"], "1");
    assert_eq!(m["generation"], 1);
    assert_eq!(m["creationTimestamp"], "2026-11-21T12:00:00Z");
    assert!(m.get("deletionTimestamp").is_none());
    let u = uuid::Uuid::parse_str(m["uid"].as_str().unwrap()).unwrap();
    assert_eq!(u.get_version_num(), 7);
    assert_eq!(
        created["status"],
        json!({"observedGeneration": 7}),
        "status kept"
    );
    assert_eq!(store.current_revision(), 1);

    assert_eq!(
        store.get(SVC, "default", "hello").unwrap(),
        Some(created.clone())
    );
    assert_eq!(store.get(SVC, "default", "nope").unwrap(), None);
    assert_eq!(store.get(SVC, "other", "hello").unwrap(), None);
    assert_eq!(store.get(CFG, "default", "hello").unwrap(), None);

    // Time-ordered: a later create's uid sorts after (the indexes of uids grow at an end).
    let later = store
        .create(SVC, obj("default", "later", json!({"app": "a"})))
        .unwrap();
    let uid = |o: &Value| o["metadata"]["uid"].as_str().unwrap().to_owned();
    assert!(uid(&later) > uid(&created));
}

#[test]
fn create_rejects_bad_input() {
    let (_dir, store) = temp_store();
    let cases = [
        ("not an object", json!("x")),
        // (No namespace at all is a cluster-scoped object: see namespaces_in_use_….)
        (
            "namespace not a string",
            json!({"metadata": {"name": "a", "namespace": 5}}),
        ),
        ("no name", json!({"metadata": {"namespace": "default"}})),
        (
            "empty name",
            json!({"metadata": {"namespace": "default", "name": ""}}),
        ),
        ("metadata not object", json!({"metadata": 5})),
    ];
    for (what, input) in cases {
        let err = store.create(SVC, input).unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{what}: {err:?}");
    }
    assert_eq!(store.current_revision(), 0, "failed writes change nothing");
}

#[test]
fn create_already_exists() {
    let (_dir, store) = temp_store();
    store
        .create(SVC, obj("default", "hello", json!({})))
        .unwrap();
    let err = store
        .create(SVC, obj("default", "hello", json!({})))
        .unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }));
    assert_eq!(
        err.to_string(),
        r#"services.serving.knative.dev "hello" already exists"#
    );
    assert_eq!(store.current_revision(), 1);
    assert_eq!(store.events_since(0, None, None, 100).unwrap().len(), 1);
    // Same name in another namespace or of another resource is a different object.
    store.create(SVC, obj("other", "hello", json!({}))).unwrap();
    store
        .create(CFG, obj("default", "hello", json!({})))
        .unwrap();
}

#[test]
fn generate_name() {
    let (_dir, store) = temp_store();
    const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
    let mut seen = BTreeSet::new();
    for _ in 0..20 {
        let input = json!({"metadata": {"namespace": "default", "generateName": "hello-"}});
        let created = store.create(SVC, input).unwrap();
        let name = meta(&created, "name").as_str().unwrap().to_owned();
        let suffix = name.strip_prefix("hello-").unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(suffix.chars().all(|c| ALPHABET.contains(c)), "{name}");
        assert_eq!(meta(&created, "generateName"), "hello-");
        assert!(seen.insert(name));
    }
    // An explicit name wins over generateName.
    let input = json!({"metadata": {"namespace": "default", "name": "x", "generateName": "y-"}});
    assert_eq!(meta(&store.create(SVC, input).unwrap(), "name"), "x");
    // Long prefixes are truncated so the name fits in 63 characters.
    let long = "a".repeat(80);
    let input = json!({"metadata": {"namespace": "default", "generateName": long}});
    let created = store.create(SVC, input).unwrap();
    assert_eq!(meta(&created, "name").as_str().unwrap().len(), 63);
}

#[test]
fn in_memory_store_works() {
    let store = Store::open_in_memory().unwrap();
    store.create(SVC, obj("default", "a", json!({}))).unwrap();
    assert_eq!(store.list(SVC, None, None).unwrap().1, 1);
}

// ---------------------------------------------------------------------------------- list

fn seeded_for_list() -> (TempDir, Store) {
    let (dir, store) = temp_store();
    let items = [
        ("default", "b", json!({"app": "web", "tier": "front"})),
        (
            "default",
            "a",
            json!({"app": "api", "tier": "back", "canary": "true"}),
        ),
        ("prod", "a", json!({"app": "web", "version": "3"})),
        ("dev", "z", json!({})),
    ];
    for (ns, name, labels) in items {
        store.create(SVC, obj(ns, name, labels)).unwrap();
    }
    store
        .create(CFG, obj("default", "c", json!({"app": "web"})))
        .unwrap();
    (dir, store)
}

#[test]
fn list_namespaces_and_order() {
    let (_dir, store) = seeded_for_list();
    let (items, rev) = store.list(SVC, None, None).unwrap();
    assert_eq!(
        ns_names(&items),
        ["default/a", "default/b", "dev/z", "prod/a"]
    );
    assert_eq!(
        rev, 5,
        "list returns the global revision, not the newest item's"
    );
    let (items, _) = store.list(SVC, Some("default"), None).unwrap();
    assert_eq!(ns_names(&items), ["default/a", "default/b"]);
    let (items, _) = store.list(SVC, Some("empty"), None).unwrap();
    assert!(items.is_empty());
    let (items, _) = store.list(CFG, None, None).unwrap();
    assert_eq!(ns_names(&items), ["default/c"]);
    let (items, rev) = store.list("unknown.example.com", None, None).unwrap();
    assert!(items.is_empty());
    assert_eq!(rev, 5);
}

/// Pages as `limit`/`continue` read them: from after a key, at most limit + 1 kept, the
/// rest counted unread, a filter applied to what is read.
#[test]
fn list_pages() {
    let (_dir, store) = seeded_for_list();
    // (after, limit, the page, unread)
    type Case<'a> = (
        Option<(&'a str, &'a str)>,
        Option<usize>,
        &'a [&'a str],
        usize,
    );
    let table: [Case; 5] = [
        (
            None,
            None,
            &["default/a", "default/b", "dev/z", "prod/a"],
            0,
        ),
        (None, Some(1), &["default/a", "default/b"], 2),
        (Some(("default", "a")), Some(1), &["default/b", "dev/z"], 1),
        (Some(("default", "b")), Some(5), &["dev/z", "prod/a"], 0),
        (Some(("prod", "a")), Some(5), &[], 0),
    ];
    let all = |_: &Value| true;
    for (after, limit, want, unread) in table {
        // Without a filter only the page is copied out; with one that keeps everything,
        // every row is read: the same page either way.
        for keep in [None, Some(all)] {
            let page = store
                .list_page(SVC, None, None, after, limit, keep)
                .unwrap();
            assert_eq!(ns_names(&page.items), want, "{after:?} {limit:?}");
            assert_eq!(page.unread, unread, "{after:?} {limit:?}");
            assert_eq!(page.revision, 5);
        }
    }
    // A label selector: only matching rows count, read or not.
    let web = LabelSelector::parse("app=web").unwrap();
    let page = store
        .list_page(
            SVC,
            None,
            Some(&web),
            None,
            Some(1),
            None::<fn(&Value) -> bool>,
        )
        .unwrap();
    assert_eq!(ns_names(&page.items), ["default/b", "prod/a"]);
    assert_eq!(page.unread, 0);
    // Within a namespace, and with a filter: only kept objects count toward the limit.
    let page = store
        .list_page(
            SVC,
            Some("default"),
            None,
            Some(("default", "a")),
            None,
            Some(all),
        )
        .unwrap();
    assert_eq!(ns_names(&page.items), ["default/b"]);
    let page = store
        .list_page(
            SVC,
            None,
            None,
            None,
            Some(1),
            Some(|o: &Value| o["metadata"]["name"] != "b"),
        )
        .unwrap();
    assert_eq!(ns_names(&page.items), ["default/a", "dev/z"]);
    assert_eq!(page.unread, 1);
}

#[test]
fn list_label_selectors() {
    let (_dir, store) = seeded_for_list();
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        ("", None, &["default/a", "default/b", "dev/z", "prod/a"]),
        ("app=web", None, &["default/b", "prod/a"]),
        ("app==web", None, &["default/b", "prod/a"]),
        ("app=web", Some("default"), &["default/b"]),
        ("app!=web", None, &["default/a", "dev/z"]),
        ("app", None, &["default/a", "default/b", "prod/a"]),
        ("!app", None, &["dev/z"]),
        (
            "app in (web,api)",
            None,
            &["default/a", "default/b", "prod/a"],
        ),
        ("app in (api)", None, &["default/a"]),
        ("app notin (web)", None, &["default/a", "dev/z"]),
        ("app=web,tier=front", None, &["default/b"]),
        ("app=web,!tier", None, &["prod/a"]),
        (" app = web , tier notin ( front ) ", None, &["prod/a"]),
        ("canary,app in (api,x)", None, &["default/a"]),
        ("version>2", None, &["prod/a"]),
        ("version<3", None, &[]),
        ("app=nothing", None, &[]),
    ];
    for (sel, ns, want) in cases {
        let parsed = LabelSelector::parse(sel).unwrap();
        let (items, _) = store.list(SVC, *ns, Some(&parsed)).unwrap();
        assert_eq!(ns_names(&items), *want, "selector {sel:?}");
    }
}

#[test]
fn label_selector_matching_and_display() {
    let labels = json!({"a": "1", "b": "", "c": "x"});
    let labels = labels.as_object().unwrap();
    let cases = [
        ("a=1", true, "a=1"),
        ("a=2", false, "a=2"),
        ("b=", true, "b="),
        ("b", true, "b"),
        ("d=", false, "d="),
        ("d!=x", true, "d!=x"),
        ("!d", true, "!d"),
        ("!a", false, "!a"),
        ("c in (y, x, x)", true, "c in (x,y)"),
        ("c notin (x)", false, "c notin (x)"),
        ("c in (x,)", true, "c in (,x)"),
        ("a>0,a<2", true, "a>0,a<2"),
        ("c>0", false, "c>0"),
        ("example.com/key=v_1.2-3", false, "example.com/key=v_1.2-3"),
    ];
    for (input, want, display) in cases {
        let sel = LabelSelector::parse(input).unwrap();
        assert_eq!(sel.matches(labels), want, "{input}");
        assert_eq!(sel.to_string(), display, "{input}");
        assert_eq!(
            LabelSelector::parse(display).unwrap(),
            sel,
            "round trip {input}"
        );
    }
    assert!(LabelSelector::parse("").unwrap().is_empty());
    assert!(LabelSelector::everything().matches_object(&json!({})));
    assert!(
        !LabelSelector::parse("a")
            .unwrap()
            .matches_object(&json!({}))
    );
}

#[test]
fn label_selector_parse_errors() {
    let cases = [
        "a in ()",
        "a in (x",
        "a in x",
        "a notin",
        "a=b=c",
        "a b",
        "a,",
        ",a",
        "!",
        "!a=b",
        "=b",
        "a>x",
        "a<",
        "a in (b c)",
        "-bad=x",
        "a=-bad",
        "Upper.Case/x=y",
        "a=(b)",
        &format!("{}=x", "k".repeat(64)),
    ];
    for input in cases {
        let err = LabelSelector::parse(input).unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{input}: {err:?}");
        assert!(
            err.to_string().contains("unable to parse label selector"),
            "{err}"
        );
    }
}

// ---------------------------------------------------------------------------------- update

#[test]
fn update_cas_conflict() {
    let (_dir, store) = temp_store();
    let v1 = store
        .create(SVC, obj("default", "hello", json!({})))
        .unwrap();

    let mut stale = v1.clone();
    stale["spec"]["image"] = json!("v2");
    let v2 = store.update(SVC, stale.clone()).unwrap();
    assert_eq!(rv(&v2), 2);

    // Same resourceVersion again: now stale.
    stale["spec"]["image"] = json!("v3");
    let err = store.update(SVC, stale.clone()).unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(
        err.to_string(),
        "Operation cannot be fulfilled on services.serving.knative.dev \"hello\": the object has \
         been modified; please apply your changes to the latest version and try again"
    );
    let err = store.update_status(SVC, stale.clone()).unwrap_err();
    assert!(err.is_conflict());

    // Empty resourceVersion: unconditional.
    stale["metadata"]["resourceVersion"] = json!("");
    let v3 = store.update(SVC, stale.clone()).unwrap();
    assert_eq!((rv(&v3), &v3["spec"]["image"]), (3, &json!("v3")));

    // A different uid means a different (re-created) object.
    let mut other = v3.clone();
    other["metadata"]["uid"] = json!("6f1d7c5e-0000-4000-8000-000000000000");
    other["spec"]["image"] = json!("v4");
    let err = store.update(SVC, other).unwrap_err();
    assert!(err.is_conflict());
    assert!(
        err.to_string()
            .contains("Precondition failed: UID in precondition"),
        "{err}"
    );

    // Not found.
    let err = store
        .update(SVC, obj("default", "missing", json!({})))
        .unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(
        err.to_string(),
        r#"services.serving.knative.dev "missing" not found"#
    );

    assert_eq!(store.current_revision(), 3);
    assert_eq!(store.get(SVC, "default", "hello").unwrap(), Some(v3));
}

#[test]
fn generation_bumps_only_on_spec_change() {
    let (_dir, store) = temp_store();
    let mut cur = store
        .create(SVC, obj("default", "hello", json!({})))
        .unwrap();
    // (change, want generation, want resourceVersion)
    type Case = (&'static str, Box<dyn Fn(&mut Value)>, i64, u64);
    let cases: Vec<Case> = vec![
        (
            "label",
            Box::new(|o| o["metadata"]["labels"]["x"] = json!("y")),
            1,
            2,
        ),
        (
            "annotation",
            Box::new(|o| o["metadata"]["annotations"] = json!({"n": "1"})),
            1,
            3,
        ),
        (
            "spec field",
            Box::new(|o| o["spec"]["image"] = json!("v2")),
            2,
            4,
        ),
        (
            "spec added key",
            Box::new(|o| o["spec"]["port"] = json!(8080)),
            3,
            5,
        ),
        (
            "client generation ignored",
            Box::new(|o| o["metadata"]["generation"] = json!(42)),
            3,
            5,
        ),
        (
            "spec and label",
            Box::new(|o| {
                o["spec"]["image"] = json!("v3");
                o["metadata"]["labels"]["x"] = json!("z");
            }),
            4,
            6,
        ),
    ];
    for (what, change, want_gen, want_rv) in cases {
        let mut next = cur.clone();
        change(&mut next);
        cur = store.update(SVC, next).unwrap();
        assert_eq!(meta(&cur, "generation"), want_gen, "{what}");
        assert_eq!(rv(&cur), want_rv, "{what}");
    }
}

#[test]
fn noop_update_writes_nothing() {
    let (_dir, store) = temp_store();
    let created = store
        .create(SVC, obj("default", "hello", json!({"a": "b"})))
        .unwrap();
    let mut rx = store.subscribe();
    rx.mark_unchanged();

    let cases: Vec<(&str, Value)> = vec![
        ("identical", created.clone()),
        ("no resourceVersion", {
            let mut o = created.clone();
            o["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            o
        }),
        ("server fields omitted or different", {
            let mut o = obj("default", "hello", json!({"a": "b"}));
            o["metadata"]["creationTimestamp"] = json!("1999-01-01T00:00:00Z");
            o["metadata"]["generation"] = json!(9);
            o
        }),
        ("status sent to main resource", {
            let mut o = created.clone();
            o["status"] = json!({"ready": true});
            o
        }),
    ];
    for (what, input) in cases {
        let out = store.update(SVC, input).unwrap();
        assert_eq!(out, created, "{what}");
    }
    let same_status = store.update_status(SVC, created.clone()).unwrap();
    assert_eq!(same_status, created);

    assert_eq!(store.current_revision(), 1);
    assert!(!rx.has_changed().unwrap(), "no revision published");
    let events = store.events_since(0, None, None, 100).unwrap();
    assert_eq!(
        event_summary(&events),
        [(1, EventType::Added, format!("{SVC}:hello"))]
    );
}

#[test]
fn update_ignores_status_and_update_status_only_touches_status() {
    let (_dir, store) = temp_store();
    let mut input = obj("default", "hello", json!({}));
    input["status"] = json!({"phase": "initial"});
    let created = store.create(SVC, input).unwrap();

    // Main resource: spec applied, status ignored.
    let mut u = created.clone();
    u["spec"]["image"] = json!("v2");
    u["status"] = json!({"phase": "hacked"});
    let updated = store.update(SVC, u).unwrap();
    assert_eq!(updated["status"], json!({"phase": "initial"}));
    assert_eq!(updated["spec"]["image"], "v2");

    // Client omits status entirely: stored status still kept.
    let mut u = updated.clone();
    u.as_object_mut().unwrap().remove("status");
    u["metadata"]["labels"]["l"] = json!("1");
    let updated = store.update(SVC, u).unwrap();
    assert_eq!(updated["status"], json!({"phase": "initial"}));

    // Status subresource: only status replaced.
    let mut s = updated.clone();
    s["status"] = json!({"phase": "ready", "observedGeneration": 2});
    s["spec"]["image"] = json!("ignored");
    s["metadata"]["labels"]["l"] = json!("ignored");
    let after = store.update_status(SVC, s).unwrap();
    assert_eq!(
        after["status"],
        json!({"phase": "ready", "observedGeneration": 2})
    );
    assert_eq!(after["spec"], updated["spec"]);
    assert_eq!(after["metadata"]["labels"], updated["metadata"]["labels"]);
    assert_eq!(meta(&after, "generation"), meta(&updated, "generation"));
    assert_eq!(rv(&after), rv(&updated) + 1);

    // Null status clears it.
    let mut s = after.clone();
    s["status"] = Value::Null;
    let cleared = store.update_status(SVC, s).unwrap();
    assert!(cleared.get("status").is_none());

    let events = store.events_since(0, Some(SVC), None, 100).unwrap();
    let types: Vec<_> = events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [
            EventType::Added,
            EventType::Modified,
            EventType::Modified,
            EventType::Modified,
            EventType::Modified
        ]
    );
    assert_eq!(events.last().unwrap().object, cleared);
}

// ---------------------------------------------------------------------------------- delete

#[test]
fn delete_cascades_through_owner_references() {
    let (_dir, store) = temp_store();
    let svc = store
        .create(SVC, obj("default", "hello", json!({})))
        .unwrap(); // rv 1
    let cfg = store
        .create(CFG, owned("default", "hello", &uid(&svc)))
        .unwrap(); // 2
    store
        .create(REV, owned("default", "hello-00002", &uid(&cfg)))
        .unwrap(); // 3
    store
        .create(REV, owned("default", "hello-00001", &uid(&cfg)))
        .unwrap(); // 4
    let route = store
        .create("routes", owned("default", "hello", &uid(&svc)))
        .unwrap(); // 5
    // Same owner uid but another namespace: owner references never cross namespaces.
    store
        .create(REV, owned("other", "stray", &uid(&cfg)))
        .unwrap(); // 6
    store
        .create(SVC, obj("default", "unrelated", json!({})))
        .unwrap(); // 7
    // Owned by the route, but the reference is removed by an update before the delete.
    let ex = store
        .create(REV, owned("default", "ex-child", &uid(&route)))
        .unwrap(); // 8
    let mut ex = ex.clone();
    ex["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    store.update(REV, ex).unwrap(); // 9

    // Wrong uid precondition: nothing happens.
    let err = store
        .delete(SVC, "default", "hello", Some("wrong"))
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(store.current_revision(), 9);

    let deleted = store
        .delete(SVC, "default", "hello", Some(&uid(&svc)))
        .unwrap();
    assert_eq!(rv(&deleted), 10);
    assert_eq!(meta(&deleted, "deletionTimestamp"), "2026-11-21T12:00:00Z");
    assert_eq!(deleted["spec"], svc["spec"]);

    // Breadth-first: the object, its children sorted by (resource, name), then grandchildren.
    let events = store.events_since(9, None, None, 100).unwrap();
    assert_eq!(
        event_summary(&events),
        [
            (10, EventType::Deleted, format!("{SVC}:hello")),
            (11, EventType::Deleted, format!("{CFG}:hello")),
            (12, EventType::Deleted, "routes:hello".to_owned()),
            (13, EventType::Deleted, format!("{REV}:hello-00001")),
            (14, EventType::Deleted, format!("{REV}:hello-00002")),
        ]
    );
    for e in &events {
        assert_eq!(rv(&e.object), e.resource_version);
        assert_eq!(meta(&e.object, "deletionTimestamp"), "2026-11-21T12:00:00Z");
    }
    assert_eq!(events[0].object, deleted);
    assert_eq!(store.current_revision(), 14);

    for (res, ns, name, exists) in [
        (SVC, "default", "hello", false),
        (CFG, "default", "hello", false),
        ("routes", "default", "hello", false),
        (REV, "default", "hello-00001", false),
        (REV, "default", "hello-00002", false),
        (REV, "other", "stray", true),
        (SVC, "default", "unrelated", true),
        (REV, "default", "ex-child", true),
    ] {
        assert_eq!(
            store.get(res, ns, name).unwrap().is_some(),
            exists,
            "{res} {ns}/{name}"
        );
    }

    let err = store.delete(SVC, "default", "hello", None).unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(store.current_revision(), 14);
}

#[test]
fn delete_survives_ownership_cycles_and_shared_children() {
    let (_dir, store) = temp_store();
    let a = store.create(CFG, obj("default", "a", json!({}))).unwrap();
    let b = store.create(CFG, owned("default", "b", &uid(&a))).unwrap();
    // a is (also) owned by b: a cycle. c is owned by both.
    let mut a2 = a.clone();
    a2["metadata"]["ownerReferences"] = json!([{"uid": uid(&b)}]);
    store.update(CFG, a2).unwrap();
    let mut c = owned("default", "c", &uid(&a));
    c["metadata"]["ownerReferences"] = json!([{"uid": uid(&a)}, {"uid": uid(&b)}]);
    store.create(CFG, c).unwrap();

    store.delete(CFG, "default", "a", None).unwrap();
    assert!(store.list(CFG, None, None).unwrap().0.is_empty());
    let deletes = store.events_since(4, None, None, 100).unwrap();
    assert_eq!(deletes.len(), 3, "each object deleted exactly once");
}

// ---------------------------------------------------------------------------------- events

#[test]
fn events_since_order_filter_and_limit() {
    let (_dir, store) = temp_store();
    store.create(SVC, obj("default", "a", json!({}))).unwrap(); // 1
    store.create(CFG, obj("default", "a", json!({}))).unwrap(); // 2
    let b = store.create(SVC, obj("prod", "b", json!({}))).unwrap(); // 3
    let mut b2 = b.clone();
    b2["spec"]["image"] = json!("v2");
    store.update(SVC, b2).unwrap(); // 4
    store.delete(SVC, "default", "a", None).unwrap(); // 5

    let all = store.events_since(0, None, None, 100).unwrap();
    let rvs: Vec<u64> = all.iter().map(|e| e.resource_version).collect();
    assert_eq!(rvs, [1, 2, 3, 4, 5]);

    /// (from, resource, namespace, limit, expected resourceVersions)
    type Case<'a> = (u64, Option<&'a str>, Option<&'a str>, usize, &'a [u64]);
    let cases: &[Case] = &[
        (0, Some(SVC), None, 100, &[1, 3, 4, 5]),
        (0, Some(CFG), None, 100, &[2]),
        (0, None, Some("prod"), 100, &[3, 4]),
        (0, Some(SVC), Some("default"), 100, &[1, 5]),
        (3, None, None, 100, &[4, 5]),
        (0, None, None, 2, &[1, 2]),
        (2, Some(SVC), None, 1, &[3]),
        (5, None, None, 100, &[]),
        (50, None, None, 100, &[]),
        (0, Some("nothing"), None, 100, &[]),
    ];
    for (from, res, ns, limit, want) in cases {
        let got: Vec<u64> = store
            .events_since(*from, *res, *ns, *limit)
            .unwrap()
            .iter()
            .map(|e| e.resource_version)
            .collect();
        assert_eq!(
            got, *want,
            "from={from} res={res:?} ns={ns:?} limit={limit}"
        );
    }
    assert_eq!(all[3].event_type, EventType::Modified);
    assert_eq!(all[3].object["spec"]["image"], "v2");
    assert_eq!(all[4].event_type, EventType::Deleted);

    let wire = serde_json::to_value(&all[0]).unwrap();
    assert_eq!(wire["type"], "ADDED");
    assert_eq!(wire["resourceVersion"], 1);
}

#[test]
fn events_gone_after_compaction() {
    let (dir, store) = temp_store_with(5);
    for i in 0..12 {
        store
            .create(SVC, obj("default", &format!("o{i}"), json!({})))
            .unwrap();
    }
    // Retained: 8..=12, compacted through 7.
    let got: Vec<u64> = store
        .events_since(7, None, None, 100)
        .unwrap()
        .iter()
        .map(|e| e.resource_version)
        .collect();
    assert_eq!(got, [8, 9, 10, 11, 12]);
    for from in [0, 1, 6] {
        let err = store.events_since(from, None, None, 100).unwrap_err();
        assert!(
            matches!(err, StoreError::Gone { oldest: 7, .. }),
            "{from}: {err:?}"
        );
    }
    let err = store.events_since(6, None, None, 100).unwrap_err();
    assert_eq!(err.to_string(), "too old resource version: 6 (7)");
    // Filtered watches are judged by the same global position.
    assert!(matches!(
        store.events_since(3, Some("other"), None, 100),
        Err(StoreError::Gone { .. })
    ));
    assert!(store.events_since(12, None, None, 100).unwrap().is_empty());

    // Compaction state survives a restart, also with a larger history setting.
    drop(store);
    let store = Store::open_with(&dir.path().join("wisp.db"), options(100)).unwrap();
    assert!(store.events_since(6, None, None, 100).is_err());
    assert_eq!(store.events_since(7, None, None, 100).unwrap().len(), 5);
}

#[test]
fn subscribe_publishes_commits() {
    let (_dir, store) = temp_store();
    let mut rx = store.subscribe();
    assert_eq!(*rx.borrow_and_update(), 0);
    store.create(SVC, obj("default", "a", json!({}))).unwrap();
    assert!(rx.has_changed().unwrap());
    assert_eq!(*rx.borrow_and_update(), 1);
    // A failed write publishes nothing.
    let _ = store
        .create(SVC, obj("default", "a", json!({})))
        .unwrap_err();
    assert!(!rx.has_changed().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_wakes_async_watchers() {
    let (_dir, store) = temp_store();
    let mut rx = store.subscribe();
    let writer = store.clone();
    let task = tokio::task::spawn_blocking(move || {
        for i in 0..3 {
            writer
                .create(SVC, obj("default", &format!("o{i}"), json!({})))
                .unwrap();
        }
    });
    let mut seen = 0;
    let mut events = Vec::new();
    while seen < 3 {
        rx.changed().await.unwrap();
        let target = *rx.borrow_and_update();
        let reader = store.clone();
        let from = seen;
        let batch = tokio::task::spawn_blocking(move || reader.events_since(from, None, None, 100))
            .await
            .unwrap()
            .unwrap();
        // A wake-up can announce a revision an earlier batch already delivered.
        let Some(last) = batch.last() else {
            assert!(
                target <= seen,
                "woken for {target} but nothing after {seen}"
            );
            continue;
        };
        assert!(last.resource_version >= target);
        seen = last.resource_version;
        events.extend(batch);
    }
    task.await.unwrap();
    let rvs: Vec<u64> = events.iter().map(|e| e.resource_version).collect();
    assert_eq!(rvs, [1, 2, 3]);
}

// ---------------------------------------------------------------------------------- durability

#[test]
fn counter_monotonic_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wisp.db");
    let mut last = 0;
    for round in 0..3 {
        let store = Store::open_with(&path, options(100)).unwrap();
        assert_eq!(store.current_revision(), last, "round {round}");
        let o = store
            .create(SVC, obj("default", &format!("r{round}"), json!({})))
            .unwrap();
        assert_eq!(rv(&o), last + 1);
        // Deletions take revisions too; the counter must not fall back to the max object rv.
        store
            .delete(SVC, "default", &format!("r{round}"), None)
            .unwrap();
        last = store.current_revision();
        assert_eq!(last, rv(&o) + 1);
        if round == 1 {
            store.checkpoint().unwrap();
        }
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.current_revision(), 6);
    assert_eq!(store.events_since(0, None, None, 100).unwrap().len(), 6);
}

#[test]
fn a_live_store_keeps_its_file_to_itself() {
    // The store holds SQLite's lock for as long as it is open (locking_mode=EXCLUSIVE), so a
    // second opener waits out its busy timeout and fails instead of sharing the file; the
    // first one is unaffected, and once it is closed the file opens again with everything.
    // (A store that dies without closing is `survives_process_abort`.)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wisp.db");
    let store = Store::open(&path).unwrap();
    store.create(SVC, obj("default", "o1", json!({}))).unwrap();
    let quick = Options {
        busy_timeout: std::time::Duration::from_millis(20),
        ..Options::default()
    };
    let second = Store::open_with(&path, quick);
    assert!(second.is_err(), "second opener got the file");
    store.create(SVC, obj("default", "o2", json!({}))).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.current_revision(), 2);
    assert_eq!(store.list(SVC, None, None).unwrap().0.len(), 2);
}

/// Child half of `survives_process_abort`: only does something when spawned by it.
#[test]
#[ignore = "helper process for survives_process_abort"]
fn abort_child() {
    let Some(dir) = std::env::var_os("WISP_STORE_ABORT_DIR") else {
        return;
    };
    let store = Store::open(&Path::new(&dir).join("wisp.db")).unwrap();
    for i in 0..20 {
        store
            .create(SVC, obj("default", &format!("o{i}"), json!({})))
            .unwrap();
    }
    // Every create above was acknowledged; die without running any destructor.
    std::process::abort();
}

#[test]
fn survives_process_abort() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "tests::abort_child", "--nocapture"])
        .env("WISP_STORE_ABORT_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "child should have aborted");
    let store = Store::open(&dir.path().join("wisp.db")).unwrap();
    assert_eq!(store.current_revision(), 20);
    let (items, _) = store.list(SVC, None, None).unwrap();
    assert_eq!(items.len(), 20);
    let o = store
        .create(SVC, obj("default", "after", json!({})))
        .unwrap();
    assert_eq!(rv(&o), 21);
}

// ---------------------------------------------------------------------------------- concurrency

#[test]
fn concurrent_cas_increments_lose_nothing() {
    const THREADS: usize = 4;
    const PER_THREAD: i64 = 25;
    let (_dir, store) = temp_store();
    let mut counter = obj("default", "counter", json!({}));
    counter["spec"] = json!({"count": 0});
    store.create(CFG, counter).unwrap();
    let conflicts = Arc::new(std::sync::atomic::AtomicUsize::new(0));

    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let store = store.clone();
            let conflicts = conflicts.clone();
            s.spawn(move || {
                let mut done = 0;
                while done < PER_THREAD {
                    let mut cur = store.get(CFG, "default", "counter").unwrap().unwrap();
                    // Widen the read-modify-write window so conflicts actually happen.
                    std::thread::yield_now();
                    let n = cur["spec"]["count"].as_i64().unwrap();
                    cur["spec"]["count"] = json!(n + 1);
                    match store.update(CFG, cur) {
                        Ok(_) => done += 1,
                        Err(e) if e.is_conflict() => {
                            conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });

    let total = THREADS as i64 * PER_THREAD;
    let last = store.get(CFG, "default", "counter").unwrap().unwrap();
    assert_eq!(last["spec"]["count"], total);
    assert_eq!(meta(&last, "generation"), total + 1);
    assert_eq!(rv(&last), total as u64 + 1);
    assert_eq!(store.current_revision(), total as u64 + 1);
    let events = store.events_since(0, None, None, 1000).unwrap();
    assert_eq!(events.len() as i64, total + 1);
    eprintln!(
        "conflicts retried: {}",
        conflicts.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Issue 17, class 8: kube-apiserver stores an object whose owners do not exist, and its
/// garbage collector deletes it (`attemptToDeleteItem`: no owner left); one with at least
/// one owner that exists is kept.
#[test]
fn children_of_a_deleted_owner_are_stored_then_collected() {
    let (_dir, store) = temp_store();
    let owner = store.create(SVC, obj("default", "svc", json!({}))).unwrap();
    let owner_uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
    store
        .create(CFG, owned("default", "ok", &owner_uid))
        .unwrap();
    store.delete(SVC, "default", "svc", None).unwrap();
    // A controller that read the owner just before it was deleted must not leave an orphan.
    let rv = store.current_revision();
    let late = store
        .create(CFG, owned("default", "late", &owner_uid))
        .unwrap();
    assert_eq!(late["metadata"]["name"], "late");
    assert!(store.get(CFG, "default", "late").unwrap().is_none());
    let events = store.events_since(rv, None, None, 10).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.event_type).collect();
    assert_eq!(kinds, vec![EventType::Added, EventType::Deleted]);
    // One live owner among dangling ones keeps the object.
    let live = store
        .create(SVC, obj("default", "live", json!({})))
        .unwrap();
    let mut two = owned("default", "two", &owner_uid);
    two["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kind": "X", "name": "live", "uid": live["metadata"]["uid"]}));
    store.create(CFG, two).unwrap();
    assert!(store.get(CFG, "default", "two").unwrap().is_some());
}

// ------------------------------------------------------------------ selectors evaluated in SQL

/// Objects with every label shape matching has to cope with: several namespaces, absent and
/// `null` label maps, non-string values (absent to selectors), empty values, prefixed keys,
/// integers for `>`/`<` (and things that are not quite integers).
fn seeded_for_sql_selectors() -> (TempDir, Store) {
    let (dir, store) = temp_store();
    let items: Vec<(&str, &str, Value)> = vec![
        (
            "default",
            "a",
            json!({"app": "api", "tier": "back", "canary": "true"}),
        ),
        ("default", "b", json!({"app": "web", "tier": "front"})),
        ("default", "c", json!({"app": "web", "tier": "", "n": "10"})),
        ("default", "d", json!({"app": 7, "tier": null, "n": "+3"})),
        ("default", "e", Value::Null),
        ("default", "f", json!({"example.com/role": "x", "n": "-2"})),
        (
            "prod",
            "a",
            json!({"app": "web", "version": "3", "n": "007"}),
        ),
        ("prod", "g", json!({"app": "db", "n": "1e3"})),
        ("dev", "z", json!({})),
        ("dev", "y", json!({"n": "99999999999999999999"})),
    ];
    for (ns, name, labels) in items {
        store.create(SVC, obj(ns, name, labels)).unwrap();
    }
    store
        .create(
            SVC,
            json!({"metadata": {"name": "nolabels", "namespace": "default"}, "spec": {}}),
        )
        .unwrap();
    // Another resource with the same labels must never leak into the results.
    store
        .create(CFG, obj("default", "a", json!({"app": "web"})))
        .unwrap();
    (dir, store)
}

const SQL_SELECTORS: &[&str] = &[
    "",
    "app=web",
    "app==api",
    "app!=web",
    "app=",
    "tier=",
    "tier!=",
    "tier",
    "!tier",
    "app",
    "!app",
    "app in (web,api)",
    "app in (db)",
    "app notin (web)",
    "app notin (web,api,db)",
    "app in (web),tier notin (front)",
    "app=web,!tier",
    "app=web,version",
    "canary,app in (api,x)",
    "example.com/role=x",
    "example.com/role",
    "!example.com/role,!app",
    "app!=web,app!=api,tier",
    "nope",
    "!nope",
    "nope notin (x)",
    "n>2",
    "n<0",
    "n>6",
    "n<11,app=web",
    "n>-100,!version",
    "version>2",
];

/// What the store's list used to do: read everything, filter in Rust.
fn filter_in_rust(store: &Store, ns: Option<&str>, sel: &LabelSelector) -> Vec<String> {
    let (all, _) = store.list(SVC, ns, None).unwrap();
    let kept: Vec<Value> = all.into_iter().filter(|o| sel.matches_object(o)).collect();
    ns_names(&kept)
}

#[test]
fn selectors_in_sql_equal_the_rust_filter() {
    let (_dir, store) = seeded_for_sql_selectors();
    let (everything, _) = store.list(SVC, None, None).unwrap();
    assert_eq!(everything.len(), 11);
    for sel in SQL_SELECTORS {
        let parsed = LabelSelector::parse(sel).unwrap();
        for ns in [None, Some("default"), Some("prod"), Some("missing")] {
            let (items, _) = store.list(SVC, ns, Some(&parsed)).unwrap();
            assert_eq!(
                ns_names(&items),
                filter_in_rust(&store, ns, &parsed),
                "selector {sel:?} in {ns:?}"
            );
            // The raw variant returns the same objects, still as text.
            let (raw, _) = store.list_raw(SVC, ns, Some(&parsed)).unwrap();
            let parsed_raw: Vec<Value> = raw
                .iter()
                .map(|t| serde_json::from_str(t).unwrap())
                .collect();
            assert_eq!(parsed_raw, items, "raw {sel:?} in {ns:?}");
        }
    }
    // A few answers spelled out, so both sides being wrong the same way would show.
    let names = |sel: &str, ns: Option<&str>| {
        let (items, _) = store
            .list(SVC, ns, Some(&LabelSelector::parse(sel).unwrap()))
            .unwrap();
        ns_names(&items)
    };
    assert_eq!(names("app=web", None), ["default/b", "default/c", "prod/a"]);
    assert_eq!(
        names("!app", Some("default")),
        ["default/d", "default/e", "default/f", "default/nolabels"],
        "a non-string value counts as absent"
    );
    assert_eq!(names("tier=", None), ["default/c"]);
    assert_eq!(names("n>6", None), ["default/c", "prod/a"]);
    assert_eq!(names("n<0", None), ["default/f"]);
    assert_eq!(names("n>2", Some("default")), ["default/c", "default/d"]);
}

#[test]
fn selectors_in_sql_built_in_code() {
    use crate::selector::{Operator, Requirement};
    let (_dir, store) = seeded_for_sql_selectors();
    let cases = [
        LabelSelector::equals("app", "web"),
        LabelSelector::from_requirements([Requirement::new("app", Operator::In, ["api", "db"])]),
        // Empty sets cannot be parsed but can be built: `in ()` is nothing, `notin ()` all.
        LabelSelector::from_requirements([Requirement::new(
            "app",
            Operator::In,
            Vec::<String>::new(),
        )]),
        LabelSelector::from_requirements([Requirement::new(
            "app",
            Operator::NotIn,
            Vec::<String>::new(),
        )]),
        // Keys the parser would reject still work.
        LabelSelector::equals("not a valid key", "x"),
    ];
    for sel in cases {
        for ns in [None, Some("default")] {
            let (items, _) = store.list(SVC, ns, Some(&sel)).unwrap();
            assert_eq!(
                ns_names(&items),
                filter_in_rust(&store, ns, &sel),
                "{sel:?} in {ns:?}"
            );
        }
    }
}

#[test]
fn label_index_follows_writes() {
    let (_dir, store) = temp_store();
    let sel = |s: &str| LabelSelector::parse(s).unwrap();
    let names = |s: &str| ns_names(&store.list(SVC, None, Some(&sel(s))).unwrap().0);
    let o = store
        .create(SVC, obj("default", "a", json!({"app": "web", "old": "1"})))
        .unwrap();
    assert_eq!(names("app=web"), ["default/a"]);

    // An update replaces the labels.
    let mut changed = o.clone();
    changed["metadata"]["labels"] = json!({"app": "api"});
    let o = store.update(SVC, changed).unwrap();
    assert!(names("app=web").is_empty());
    assert!(names("old").is_empty());
    assert_eq!(names("app=api"), ["default/a"]);

    // A status update leaves them alone (and cannot change them).
    let mut status = o.clone();
    status["status"] = json!({"x": 1});
    status["metadata"]["labels"] = json!({"app": "ignored"});
    store.update_status(SVC, status).unwrap();
    assert_eq!(names("app=api"), ["default/a"]);

    // A failed write leaves the index as it was (same transaction).
    let mut stale = o.clone();
    stale["metadata"]["labels"] = json!({"app": "lost"});
    stale["metadata"]["resourceVersion"] = json!("1");
    assert!(store.update(SVC, stale).unwrap_err().is_conflict());
    assert!(names("app=lost").is_empty());
    assert_eq!(names("app=api"), ["default/a"]);

    // Deletion (also by cascade) removes them.
    let owner_uid = uid(&o);
    let mut child = owned("default", "child", &owner_uid);
    child["metadata"]["labels"] = json!({"app": "api"});
    store.create(SVC, child).unwrap();
    assert_eq!(names("app=api"), ["default/a", "default/child"]);
    store.delete(SVC, "default", "a", None).unwrap();
    assert!(names("app=api").is_empty());
    assert!(names("").is_empty());

    // Re-created under the same name: the new labels only.
    store
        .create(SVC, obj("default", "a", json!({"tier": "x"})))
        .unwrap();
    assert!(names("app").is_empty());
    assert_eq!(names("tier=x"), ["default/a"]);
}

#[test]
fn schema_1_files_are_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wisp.db");
    {
        let store = Store::open(&path).unwrap();
        store
            .create(SVC, obj("default", "a", json!({"app": "web", "n": 5})))
            .unwrap();
        let mut b = obj("prod", "b", json!({"app": "api"}));
        b["metadata"]["annotations"] = json!({"list": "x, y"});
        store.create(SVC, b).unwrap();
        store.checkpoint().unwrap();
    }
    // Make it what version 1 wrote: no side tables.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE labels; DROP TABLE annotation_items;
             UPDATE meta SET value = 1 WHERE key = 'schema_version';",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let names = |s: &str| {
        let sel = LabelSelector::parse(s).unwrap();
        ns_names(&store.list(SVC, None, Some(&sel)).unwrap().0)
    };
    assert_eq!(names("app=web"), ["default/a"]);
    assert_eq!(names("app"), ["default/a", "prod/b"]);
    assert_eq!(
        names("n"),
        Vec::<String>::new(),
        "non-string values are not labels"
    );
    assert_eq!(names("!app"), Vec::<String>::new());
    assert_eq!(
        store
            .list_raw_by_annotation_item(SVC, "prod", "list", "y")
            .unwrap()
            .len(),
        1
    );
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, 2);

    // A newer schema than this binary knows is refused, not silently misread.
    conn.execute("UPDATE meta SET value = 3 WHERE key = 'schema_version'", [])
        .unwrap();
    drop(conn);
    assert!(matches!(Store::open(&path), Err(StoreError::Corrupt(_))));
}

#[test]
fn selector_queries_use_the_label_index() {
    // The point of the labels table: a selective selector does not scan the namespace.
    let (_dir, store) = seeded_for_sql_selectors();
    let conn = store.inner_conn_for_tests();
    for (sel, ns) in [("app=web", Some("default")), ("app in (a,b)", None)] {
        let sel = LabelSelector::parse(sel).unwrap();
        let plan = crate::sqlite::explain_list(&conn, SVC, ns, Some(&sel));
        assert!(
            plan.iter().any(|l| l.contains("labels_by_value")),
            "{sel} {ns:?}: {plan:#?}"
        );
        assert!(
            !plan.iter().any(|l| l.starts_with("SCAN o")),
            "{sel} {ns:?}: {plan:#?}"
        );
    }
}

#[test]
fn annotation_item_queries() {
    let (_dir, store) = temp_store();
    const KEY: &str = "serving.knative.dev/routes";
    let with = |name: &str, annotations: Value| {
        json!({
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"mentions": "r1 r2,r3"},
        })
    };
    // Longer than what is itemized: found through their JSON.
    let long_with_r4 = format!("{},r4", "x".repeat(crate::sqlite::MAX_ITEMIZED));
    let long_without = format!("{},r44", "x".repeat(crate::sqlite::MAX_ITEMIZED));
    for o in [
        with("a", json!({KEY: "r1"})),
        with("b", json!({KEY: "r10,r2"})),
        with("c", json!({KEY: " r2 , r1 ,\tr5"})),
        with("d", json!({"other": "r1", KEY: ""})),
        with("e", json!({KEY: 1})),
        with("f", Value::Null),
        with("g", json!({KEY: "x\"y,r3"})),
        with("h", json!({KEY: long_with_r4})),
        with("i", json!({KEY: long_without, "other": "r4"})),
        with("j", json!({KEY: "r1,r1"})),
    ] {
        store.create(CFG, o).unwrap();
    }
    store.create(REV, with("a", json!({KEY: "r1"}))).unwrap();
    store
        .create(
            CFG,
            json!({"metadata": {"name": "h", "namespace": "prod", "annotations": {KEY: "r1"}}}),
        )
        .unwrap();
    let names = |item: &str| -> Vec<String> {
        store
            .list_raw_by_annotation_item(CFG, "default", KEY, item)
            .unwrap()
            .iter()
            .map(|t| {
                serde_json::from_str::<Value>(t).unwrap()["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    // The definition, applied to every object: what the store must answer.
    let by_definition = |item: &str| -> Vec<String> {
        let (all, _) = store.list(CFG, Some("default"), None).unwrap();
        all.iter()
            .filter(|o| {
                o["metadata"]["annotations"][KEY]
                    .as_str()
                    .is_some_and(|l| crate::sqlite::list_contains(l, item))
            })
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let items = [
        "r1", "r2", "r3", "r4", "r5", "r10", "r44", "x\"y", "r", "", " r1", "r1,r2", "x",
    ];
    for item in items {
        assert_eq!(names(item), by_definition(item), "{item:?}");
    }
    assert_eq!(names("r1"), ["a", "c", "j"]);
    assert_eq!(names("r2"), ["b", "c"]);
    assert_eq!(names("r5"), ["c"], "items are trimmed of any whitespace");
    assert_eq!(
        names("r3"),
        ["g"],
        "not the spec that mentions it, the annotation"
    );
    assert_eq!(names("x\"y"), ["g"]);
    assert_eq!(names("r4"), ["h"], "a long annotation, through its JSON");
    assert!(names("r").is_empty(), "items, not substrings");
    assert!(names("").is_empty());
    assert!(names(" r1").is_empty());
    assert!(names("r1,r2").is_empty());

    // The index follows updates and deletes.
    let mut a = store.get(CFG, "default", "a").unwrap().unwrap();
    a["metadata"]["annotations"] = json!({KEY: "r2"});
    store.update(CFG, a).unwrap();
    store.delete(CFG, "default", "c", None).unwrap();
    assert_eq!(names("r1"), ["j"]);
    assert_eq!(names("r2"), ["a", "b"]);
    for item in items {
        assert_eq!(names(item), by_definition(item), "{item:?} after writes");
    }

    // An index lookup, not a scan of the objects.
    let conn = store.inner_conn_for_tests();
    let plan = crate::sqlite::explain_annotated(&conn);
    assert!(
        plan.iter().any(|l| l.contains("annotation_items_by_item")),
        "{plan:#?}"
    );
    assert!(!plan.iter().any(|l| l.starts_with("SCAN")), "{plan:#?}");
}

#[test]
fn durable_writes_return_synced_relaxed_ones_do_not_wait_and_no_commit_holds_the_store_to_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wisp.db");
    let full = Store::open(&path).unwrap();
    let relaxed = full.with_durability(crate::Durability::Relaxed);
    let mode = |s: &Store| -> i64 {
        s.inner_conn_for_tests()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    };
    // (commits, commits on disk)
    let wal = || {
        full.wal_for_tests()
            .expect("a store on disk syncs its own WAL")
    };
    relaxed
        .create(SVC, obj("default", "derived", json!({})))
        .unwrap();
    let (commits, synced) = wal();
    assert!(
        synced < commits,
        "a relaxed write does not wait for the disk"
    );
    full.create(SVC, obj("default", "user", json!({}))).unwrap();
    assert_eq!(
        wal().1,
        wal().0,
        "a durable write returns synced, earlier commits too"
    );
    // The connection never waits for an fsync in a commit: the sync follows the unlock.
    assert_eq!(mode(&full), 1, "synchronous=NORMAL");

    relaxed
        .create(SVC, obj("default", "derived-2", json!({})))
        .unwrap();
    let (_, committed) = full.batch(|| {
        for name in ["b1", "b2"] {
            full.create(SVC, obj("default", name, json!({}))).unwrap();
        }
    });
    committed.unwrap();
    assert_eq!(wal().1, wal().0, "a durable batch returns synced");

    // Both handles see one store, one revision counter.
    assert_eq!(relaxed.current_revision(), 5);
    drop((full, relaxed));
    let reopened = Store::open(&path).unwrap();
    for name in ["derived", "user", "derived-2", "b1", "b2"] {
        assert!(
            reopened.get(SVC, "default", name).unwrap().is_some(),
            "{name}"
        );
    }
}

#[test]
fn an_in_memory_store_has_no_wal_to_sync_and_writes_alike() {
    let store = Store::open_in_memory().unwrap();
    assert_eq!(store.wal_for_tests(), None);
    store.create(SVC, obj("default", "a", json!({}))).unwrap();
    assert!(store.get(SVC, "default", "a").unwrap().is_some());
}

#[test]
fn cached_reads_are_not_re_prepared_when_rebound() {
    // A statement whose plan depends on a bound value is expired by SQLite on every rebind
    // and parsed again: under load that was a tenth of wisp's CPU.
    let (_dir, store) = seeded_for_sql_selectors();
    let sel = LabelSelector::parse("app=web").unwrap();
    for (resource, ns, app) in [(Some(SVC), Some("default"), "web"), (None, None, "db")] {
        store.events_since(0, resource, ns, 10).unwrap();
        let by_app = LabelSelector::parse(&format!("app={app}")).unwrap();
        store.list(SVC, Some("default"), Some(&by_app)).unwrap();
    }
    let conn = store.inner_conn_for_tests();
    assert_eq!(
        crate::sqlite::reprepares(&conn, crate::sqlite::EVENTS_SINCE),
        0
    );
    let list = crate::sqlite::list_sql(SVC, Some("default"), Some(&sel));
    assert_eq!(crate::sqlite::reprepares(&conn, &list), 0);
}

// ---------------------------------------------------------------------------------- batches

#[test]
fn a_batch_commits_its_writes_together_and_each_fails_alone() {
    let (dir, store) = temp_store();
    let mut watch = store.subscribe();
    watch.mark_unchanged();
    let ((), committed) = store.batch(|| {
        store.create(SVC, obj("default", "a", json!({}))).unwrap();
        let stale = store.create(SVC, obj("default", "b", json!({}))).unwrap();
        let mut changed = stale.clone();
        changed["spec"]["image"] = json!("hello:2");
        store.update(SVC, changed).unwrap();
        // A stale resourceVersion: this write alone is refused and leaves nothing.
        let mut stale = stale;
        stale["spec"]["image"] = json!("hello:3");
        let err = store.update(SVC, stale).unwrap_err();
        assert!(err.is_conflict(), "{err}");
        // Nothing is published before the commit.
        assert!(!watch.has_changed().unwrap());
        // The batch reads its own writes.
        assert!(store.get(SVC, "default", "a").unwrap().is_some());
    });
    committed.unwrap();
    assert!(watch.has_changed().unwrap());
    assert_eq!(store.current_revision(), 3);
    let types: Vec<_> = store
        .events_since(0, None, None, 10)
        .unwrap()
        .into_iter()
        .map(|e| (e.resource_version, e.event_type))
        .collect();
    assert_eq!(
        types,
        [
            (1, EventType::Added),
            (2, EventType::Added),
            (3, EventType::Modified)
        ]
    );
    // And it is on disk.
    drop(store);
    let store = Store::open(&dir.path().join("wisp.db")).unwrap();
    assert_eq!(store.current_revision(), 3);
}

#[test]
fn no_one_sees_a_batch_before_it_commits() {
    let (_dir, store) = temp_store();
    let (tx, rx) = std::sync::mpsc::channel();
    let ((), committed) = store.batch(|| {
        store.create(SVC, obj("default", "a", json!({}))).unwrap();
        let reader = store.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let seen = reader.get(SVC, "default", "a").unwrap().is_some();
            tx.send(seen).unwrap();
        });
        // The reader waits for the connection until the batch is over.
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(100))
                .is_err()
        );
    });
    committed.unwrap();
    let seen = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert!(seen, "the reader saw the committed batch");
}

#[test]
fn a_batch_that_panics_leaves_nothing_and_the_store_works_on() {
    let (_dir, store) = temp_store();
    store
        .create(SVC, obj("default", "before", json!({})))
        .unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.batch(|| {
            store
                .create(SVC, obj("default", "lost", json!({})))
                .unwrap();
            panic!("reconcile bug");
        })
    }));
    assert!(panicked.is_err());
    assert!(store.get(SVC, "default", "lost").unwrap().is_none());
    assert_eq!(store.current_revision(), 1);
    // A nested batch joins the outer one; writes outside batches work as before.
    let ((), committed) = store.batch(|| {
        let ((), inner) = store.batch(|| {
            store
                .create(SVC, obj("default", "nested", json!({})))
                .unwrap();
        });
        inner.unwrap();
    });
    committed.unwrap();
    store
        .create(SVC, obj("default", "after", json!({})))
        .unwrap();
    assert_eq!(store.current_revision(), 3);
}

#[test]
fn after_commit_work_runs_once_the_batch_committed_and_the_store_is_free() {
    let (_dir, store) = temp_store();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let note = |what: &'static str| {
        let (seen, store) = (seen.clone(), store.clone());
        move || {
            // Another thread can read at once: the batch gave the connection back.
            let reader = store.clone();
            let found = std::thread::spawn(move || reader.get(SVC, "default", "a").unwrap())
                .join()
                .unwrap();
            seen.lock()
                .unwrap()
                .push((what, store.current_revision(), found.is_some()));
        }
    };
    let ((), committed) = store.batch(|| {
        store.create(SVC, obj("default", "a", json!({}))).unwrap();
        store.after_commit(note("first"));
        store.after_commit(note("second"));
        assert!(seen.lock().unwrap().is_empty(), "not while the batch runs");
    });
    committed.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [("first", 1, true), ("second", 1, true)],
        "in order, after the commit was published"
    );
    // Outside a batch every write has committed already: at once.
    store.after_commit(note("alone"));
    assert_eq!(seen.lock().unwrap().last(), Some(&("alone", 1, true)));
    // A batch that panics drops its work with its writes.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.batch(|| {
            store.after_commit(note("lost"));
            panic!("reconcile bug");
        })
    }));
    assert!(panicked.is_err());
    let ((), committed) = store.batch(|| store.after_commit(note("next")));
    committed.unwrap();
    let whats: Vec<_> = seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(whats, ["first", "second", "alone", "next"]);
}

#[test]
fn namespaces_in_use_and_cluster_scoped_objects() {
    let (_dir, store) = temp_store();
    assert!(store.namespaces_in_use().unwrap().is_empty());
    for (ns, name) in [("b", "x"), ("a", "y"), ("b", "z")] {
        store
            .create(SVC, json!({"metadata": {"namespace": ns, "name": name}}))
            .unwrap();
    }
    // A cluster-scoped object has no namespace, and is filed under "".
    let ns = store
        .create("namespaces", json!({"metadata": {"name": "a"}}))
        .unwrap();
    assert!(ns["metadata"].get("namespace").is_none());
    assert!(store.get("namespaces", "", "a").unwrap().is_some());
    assert_eq!(store.namespaces_in_use().unwrap(), ["a", "b"]);
}

/// A changed object is updated in its row (not deleted and re-inserted): after updates of
/// its status and of its labels it is still found by its uid (its children keep it as
/// their owner) and by its labels, and a delete and re-create under the same name is a
/// new object.
#[test]
fn an_updated_object_keeps_its_uid_and_labels_findable() {
    let (_dir, store) = temp_store();
    let owner = store
        .create(SVC, obj("default", "svc", json!({"app": "a"})))
        .unwrap();
    let owner_uid = uid(&owner);
    let mut changed = owner.clone();
    changed["status"] = json!({"observedGeneration": 1});
    let changed = store.update_status(SVC, changed).unwrap();
    let mut relabelled = changed.clone();
    relabelled["metadata"]["labels"] = json!({"app": "b"});
    let relabelled = store.update(SVC, relabelled).unwrap();
    assert_eq!(uid(&relabelled), owner_uid);
    assert!(rv(&relabelled) > rv(&changed) && rv(&changed) > rv(&owner));
    // Found by its uid: a child naming it as owner is kept.
    store
        .create(CFG, owned("default", "child", &owner_uid))
        .unwrap();
    assert!(store.get(CFG, "default", "child").unwrap().is_some());
    let by_label = |v: &str| {
        let sel = LabelSelector::equals("app", v);
        ns_names(&store.list(SVC, None, Some(&sel)).unwrap().0)
    };
    assert_eq!(by_label("b"), vec!["default/svc"]);
    assert!(by_label("a").is_empty());
    assert_eq!(ns_names(&store.list(SVC, None, None).unwrap().0).len(), 1);
    // Deleted and made again: a new uid, stored as a new row.
    store.delete(SVC, "default", "svc", None).unwrap();
    let again = store.create(SVC, obj("default", "svc", json!({}))).unwrap();
    assert_ne!(uid(&again), owner_uid);
    let held = store.get(SVC, "default", "svc").unwrap().unwrap();
    assert_eq!(uid(&held), uid(&again));
}

#[test]
fn only_the_indexed_annotations_are_indexed_and_a_change_of_them_rebuilds_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wisp.db");
    let open = |indexed: Option<&'static [&'static str]>| {
        let options = Options {
            indexed_annotations: indexed,
            ..Options::default()
        };
        Store::open_with(&path, options).unwrap()
    };
    let rows = |store: &Store| -> Vec<String> {
        let conn = store.inner_conn_for_tests();
        let mut stmt = conn
            .prepare("SELECT DISTINCT key FROM annotation_items ORDER BY key")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let annotated = |name: &str| {
        let mut o = obj("default", name, json!({}));
        o["metadata"]["annotations"] = json!({"routes": "r1, r2", "creator": "admin"});
        o
    };
    let found = |store: &Store, key: &str| {
        store
            .list_raw_by_annotation_item(
                SVC,
                "default",
                key,
                if key == "routes" { "r2" } else { "admin" },
            )
            .map(|texts| texts.len())
    };
    {
        // Every annotation, as a store opened with the defaults always did.
        let store = open(None);
        store.create(SVC, annotated("a")).unwrap();
        assert_eq!(rows(&store), ["creator", "routes"]);
    }
    {
        // One key: the index is rebuilt with it alone, and new objects get its rows only.
        let store = open(Some(&["routes"]));
        assert_eq!(rows(&store), ["routes"]);
        store.create(SVC, annotated("b")).unwrap();
        assert_eq!(rows(&store), ["routes"]);
        assert_eq!(found(&store, "routes").unwrap(), 2);
        let err = found(&store, "creator").unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
        assert!(err.to_string().contains("not indexed"), "{err}");
    }
    // Back to all: rebuilt, and both objects are found by either key.
    let store = open(None);
    assert_eq!(rows(&store), ["creator", "routes"]);
    assert_eq!(found(&store, "creator").unwrap(), 2);
    assert_eq!(found(&store, "routes").unwrap(), 2);
}
