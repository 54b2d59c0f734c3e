//! `metadata.managedFields` and server-side apply, after kube-apiserver's field manager
//! (`k8s.io/apimachinery/pkg/util/managedfields/internal/{structuredmerge,conflict,
//! managedfields,stripmeta}.go` over `sigs.k8s.io/structured-merge-diff`).
//!
//! Simplified to what the kinds wisp serves need: objects are granular (each key its own
//! field) and lists are atomic (one field), as for a CRD without `x-kubernetes-list-type`
//! markers — which Knative's CRDs have none of. A manager's set holds the leaves it set.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// A field path: the keys from the root.
pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.is_empty()
    }

    /// conflict.go `printManager` (the identifier carries no time).
    fn printed(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), self.manager.clone().into());
        m.insert("operation".into(), self.operation.clone().into());
        m.insert("apiVersion".into(), self.api_version.clone().into());
        m.insert("time".into(), self.time.clone().into());
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), encode(&self.fields));
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), self.subresource.clone().into());
        }
        Value::Object(m)
    }
}

/// stripmeta.go: fields no manager owns.
fn stripped(path: &[String]) -> bool {
    match path {
        [] => true,
        [top, ..] if top == "apiVersion" || top == "kind" || top == "status" => true,
        [m, f, ..] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "managedFields"
                | "selfLink"
        ),
        _ => false,
    }
}

/// The leaves of an object: scalars, lists, and empty objects.
pub fn leaves(v: &Value) -> FieldSet {
    fn go(v: &Value, path: &mut Path, out: &mut FieldSet) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, c) in m {
                    path.push(k.clone());
                    go(c, path, out);
                    path.pop();
                }
            }
            _ => {
                if !stripped(path) {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = FieldSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(k))
}

fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        match cur.as_object_mut().and_then(|m| m.get_mut(k)) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// `fieldsV1`: `{"f:spec": {"f:x": {}}}`, `.` for a member that also has children.
pub fn encode(set: &FieldSet) -> Value {
    fn build(set: &FieldSet, prefix: &[String]) -> Map<String, Value> {
        let mut m = Map::new();
        let children: BTreeSet<&String> = set
            .iter()
            .filter(|p| p.len() > prefix.len() && p.starts_with(prefix))
            .map(|p| &p[prefix.len()])
            .collect();
        if !prefix.is_empty() && !children.is_empty() && set.contains(prefix) {
            m.insert(".".into(), json!({}));
        }
        for k in children {
            let mut next = prefix.to_vec();
            next.push(k.clone());
            m.insert(format!("f:{k}"), Value::Object(build(set, &next)));
        }
        m
    }
    Value::Object(build(set, &[]))
}

/// The set a `fieldsV1` describes (keys other than `f:` stay as they are).
pub fn decode(fields: &Value) -> FieldSet {
    fn go(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, c) in m {
            if k == "." {
                // `.` marks the enclosing field itself; the root is not a field, so a
                // `.` there names nothing (and `encode` could not write it back).
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            path.push(k.strip_prefix("f:").unwrap_or(k).to_string());
            go(c, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    go(fields, &mut Vec::new(), &mut out);
    out
}

/// The entries an object carries.
pub fn entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj["metadata"]["managedFields"].as_array() else {
        return Vec::new();
    };
    let s = |e: &Value, k: &str| e[k].as_str().unwrap_or("").to_string();
    list.iter()
        .map(|e| Entry {
            manager: s(e, "manager"),
            operation: s(e, "operation"),
            api_version: s(e, "apiVersion"),
            time: s(e, "time"),
            subresource: s(e, "subresource"),
            fields: decode(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes `entries` into `obj`, keeping only the fields `obj` still has; an entry left
/// with none is dropped.
pub fn store(obj: &mut Value, mut entries: Vec<Entry>) {
    for e in &mut entries {
        e.fields.retain(|p| at(obj, p).is_some());
    }
    entries.retain(|e| !e.fields.is_empty());
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert(
                "managedFields".into(),
                Value::Array(entries.iter().map(Entry::to_json).collect()),
            );
        }
    }
}

/// The time of an entry: RFC 3339 in seconds, as `metav1.Time` encodes.
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// An `Update` (create, PUT, non-apply PATCH) by `manager`: it takes the fields it changed
/// from everyone (no conflicts for updates), as structuredmerge.go `Update` does.
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, api_version: &str) {
    let mut list = old.map(entries).unwrap_or_default();
    let changed: FieldSet = leaves(new)
        .into_iter()
        .filter(|p| old.and_then(|o| at(o, p)) != at(new, p))
        .collect();
    if !changed.is_empty() {
        for e in &mut list {
            e.fields.retain(|p| !changed.contains(p));
        }
        let time = now();
        match list.iter_mut().find(|e| e.is(manager, "Update")) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = time;
                e.api_version = api_version.into();
            }
            None => list.push(Entry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                time,
                subresource: String::new(),
                fields: changed,
            }),
        }
    }
    store(new, list);
}

/// Server-side apply of `config` by `manager` onto `live` (None: the object is created).
/// Answers the merged object (not yet admitted) and the entries to store with it, or kube's
/// 409 listing the conflicts.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
) -> Result<(Value, Vec<Entry>), ApiError> {
    let mut list = live.map(entries).unwrap_or_default();
    let applied = leaves(config);
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for e in list.iter().filter(|e| !e.is(manager, "Apply")) {
        for p in applied.intersection(&e.fields) {
            if at(config, p) != live.and_then(|l| at(l, p)) {
                conflicts.push((e.printed(), path_string(p)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    // Fields this applier set before and no longer does are removed, unless another
    // manager also owns them.
    let previous = list
        .iter()
        .find(|e| e.is(manager, "Apply"))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for e in &mut list {
        if !e.is(manager, "Apply") {
            e.fields.retain(|p| !applied.contains(p));
        }
    }
    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    for p in previous.difference(&applied) {
        if !list
            .iter()
            .any(|e| !e.is(manager, "Apply") && e.fields.contains(p))
        {
            remove_at(&mut merged, p);
        }
    }
    merge(&mut merged, config);
    // An apply that changes nothing keeps the entry's time, so it writes nothing
    // (IgnoreManagedFieldsTimestampsTransformer in managedfields/internal).
    let unchanged =
        live.is_some_and(|l| previous == applied && without_managed(l) == without_managed(&merged));
    let time = now();
    match list.iter_mut().find(|e| e.is(manager, "Apply")) {
        Some(e) => {
            e.fields = applied;
            if !unchanged {
                e.time = time;
            }
            e.api_version = api_version.into();
        }
        None => list.push(Entry {
            manager: manager.into(),
            operation: "Apply".into(),
            api_version: api_version.into(),
            time,
            subresource: String::new(),
            fields: applied,
        }),
    }
    Ok((merged, list))
}

fn without_managed(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

/// Objects merge key by key; anything else (scalars, atomic lists) is replaced.
fn merge(target: &mut Value, config: &Value) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    continue;
                }
                match t.get_mut(k) {
                    Some(tv) if tv.is_object() && v.is_object() => merge(tv, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, c) => *t = c.clone(),
    }
}

/// `fieldpath.Path.String()` for field steps: `.spec.template`.
fn path_string(p: &[String]) -> String {
    p.iter().map(|k| format!(".{k}")).collect()
}

/// conflict.go `NewConflictError`.
fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let message = if let [(who, path)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {who}: {path}")
    } else {
        let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for (_, p) in conflicts.iter().filter(|(w, _)| w == m) {
                lines.push(format!("- {p}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut err = ApiError::new(409, "Conflict", message);
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(who, path)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {who}"), "field": path})
        })
        .collect();
    err.status.details = Some(json!({ "causes": causes }));
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Path {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn fields_v1_round_trips() {
        let set: FieldSet = [p("spec.x"), p("metadata.labels.app"), p("spec.y.z")]
            .into_iter()
            .collect();
        let v = encode(&set);
        assert_eq!(
            v,
            json!({"f:spec": {"f:x": {}, "f:y": {"f:z": {}}}, "f:metadata": {"f:labels": {"f:app": {}}}})
        );
        assert_eq!(decode(&v), set);
        let with_dot: FieldSet = [p("a"), p("a.b")].into_iter().collect();
        assert_eq!(encode(&with_dot), json!({"f:a": {".": {}, "f:b": {}}}));
        assert_eq!(decode(&encode(&with_dot)), with_dot);
        // A `.` at the root names no field (found by the api_patch fuzz target).
        let root_dot = json!({".": {"labels": {"$patch": "delete"}}});
        assert_eq!(decode(&root_dot), FieldSet::new());
        assert_eq!(decode(&encode(&decode(&root_dot))), decode(&root_dot));
    }

    #[test]
    fn leaves_skip_server_owned_fields() {
        let obj = json!({"apiVersion": "v1", "kind": "K",
            "metadata": {"name": "a", "uid": "u", "labels": {"x": "1"}},
            "spec": {"list": [1, 2], "empty": {}}, "status": {"s": 1}});
        let want: FieldSet = [p("metadata.labels.x"), p("spec.list"), p("spec.empty")]
            .into_iter()
            .collect();
        assert_eq!(leaves(&obj), want);
    }

    #[test]
    fn apply_conflicts_force_and_removal() {
        let live = json!({"metadata": {"name": "a"}, "spec": {"x": 1, "y": 2}});
        // Created by an update of "editor".
        let mut live1 = live.clone();
        record_update(None, &mut live1, "editor", "g/v1");
        assert_eq!(entries(&live1)[0].fields.len(), 2);
        // Applying a different value for a field editor owns conflicts.
        let config = json!({"metadata": {"name": "a"}, "spec": {"x": 5, "z": 3}});
        let err = apply(Some(&live1), &config, "me", false, "g/v1").unwrap_err();
        assert_eq!(err.status.code, 409);
        assert_eq!(
            err.status.message,
            "Apply failed with 1 conflict: conflict with \"editor\" using g/v1: .spec.x"
        );
        // The same value is shared, not a conflict.
        let same = json!({"metadata": {"name": "a"}, "spec": {"x": 1, "z": 3}});
        let (merged, list) = apply(Some(&live1), &same, "me", false, "g/v1").unwrap();
        assert_eq!(merged["spec"], json!({"x": 1, "y": 2, "z": 3}));
        assert_eq!(list.len(), 2);
        // Forced, ownership moves.
        let (mut merged, list) = apply(Some(&live1), &config, "me", true, "g/v1").unwrap();
        assert_eq!(merged["spec"]["x"], 5);
        store(&mut merged, list);
        let list = entries(&merged);
        assert!(!list[0].fields.contains(&p("spec.x")));
        // Dropping z from the config removes it; x stays owned by me alone.
        let again = json!({"metadata": {"name": "a"}, "spec": {"x": 5}});
        let (merged2, _) = apply(Some(&merged), &again, "me", false, "g/v1").unwrap();
        assert_eq!(merged2["spec"], json!({"x": 5, "y": 2}));
    }

    #[test]
    fn a_repeated_apply_keeps_its_time() {
        let config = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let (mut first, list) = apply(None, &config, "me", false, "v1").unwrap();
        store(&mut first, list);
        let mut old = first.clone();
        old["metadata"]["managedFields"][0]["time"] = "2000-01-01T00:00:00Z".into();
        let (mut again, list) = apply(Some(&old), &config, "me", false, "v1").unwrap();
        store(&mut again, list);
        assert_eq!(again, old);
        let changed = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        let (mut third, list) = apply(Some(&old), &changed, "me", false, "v1").unwrap();
        store(&mut third, list);
        assert_ne!(
            third["metadata"]["managedFields"][0]["time"],
            "2000-01-01T00:00:00Z"
        );
    }

    #[test]
    fn several_conflicts_are_listed_by_manager() {
        let e = conflict_error(&[
            ("\"b\"".into(), ".spec.x".into()),
            ("\"a\"".into(), ".spec.y".into()),
        ]);
        assert_eq!(
            e.status.message,
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.y\nconflicts with \"b\":\n- .spec.x"
        );
    }
}
