//! `wisp apply -f FILE`: create what does not exist; update what does with kubectl's
//! client-side apply (a three-way merge of the manifest, the last applied manifest and the
//! stored object), written with PUT and compare-and-swap, retried on conflict.
//!
//! Why not simply replace the stored spec with the manifest's: Knative defaults some fields
//! only on create (`enableServiceLinks`), so a replace would drop them, bump the generation
//! and stamp out a new Revision on every no-op apply. The merge keeps what the server
//! defaulted and still deletes what the user removed from the file.

use serde_json::{Map, Value};
use wisp_api::kinds::ResourceKind;

use super::client::{ApiError, Client};
use super::manifest::{self, Document};
use super::{GlobalArgs, Outcome, kind_of_document, obj};

/// Annotations the server owns; apply keeps the stored values.
pub const PRESERVED_ANNOTATIONS: [&str; 2] = [
    wisp_api::annotations::serving::CREATOR,
    wisp_api::annotations::serving::LAST_MODIFIER,
];

/// How many times apply re-reads and retries after a 409 Conflict.
const CONFLICT_RETRIES: usize = 5;

/// Flags of `wisp apply`.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// A manifest file, a directory of them, or `-` for stdin (repeatable).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    /// Wait until every applied Service is Ready, showing its progress; exit non-zero
    /// with the revision's reason and message if it fails.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (a Go duration: 60s, 2m30s).
    #[arg(long, default_value = "5m", value_parser = parse_timeout)]
    pub timeout: std::time::Duration,
}

/// `--timeout`: a positive Go duration.
fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = wisp_api::duration::GoDuration::parse(s).map_err(|e| e.to_string())?;
    match d.to_std() {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{s:?} must be a positive duration such as 60s")),
    }
}

/// What apply did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Configured,
    Unchanged,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
        }
    }
}

/// Where apply records what it applied, as kubectl does, so that the next apply can tell a
/// field the user removed from the file (delete it) from one the server defaulted (keep it).
pub use wisp_api::annotations::LAST_APPLIED;

/// The manifest as apply records it in [`LAST_APPLIED`]: without `status`, without the
/// annotation itself, with the namespace it was applied to.
pub fn applied_configuration(desired: &Value, namespace: &str) -> Value {
    let mut v = desired.clone();
    if let Some(top) = v.as_object_mut() {
        top.remove("status");
        let meta = top
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            // "" for a cluster-scoped kind (Namespace): no namespace to record.
            if namespace.is_empty() {
                m.remove("namespace");
            } else {
                m.insert("namespace".into(), Value::String(namespace.to_string()));
            }
            if let Some(Value::Object(a)) = m.get_mut("annotations") {
                a.remove(LAST_APPLIED);
                if a.is_empty() {
                    m.remove("annotations");
                }
            }
        }
    }
    v
}

/// kubectl's client-side three-way merge with JSON merge patch semantics (what it uses for
/// custom resources): keys set in `modified` win (objects merged recursively, lists and
/// scalars replaced, `null` deletes), keys that were in `original` (the last applied
/// configuration) but are gone from `modified` are deleted, and every other key of `current`
/// — such as fields the server defaulted — is kept.
pub fn merge3(
    original: Option<&Value>,
    modified: &Value,
    current: Option<&Value>,
) -> Option<Value> {
    match (modified, current) {
        (Value::Null, _) => None,
        (Value::Object(m), Some(Value::Object(c))) => {
            let mut out = c.clone();
            for (k, mv) in m {
                let ov = original.and_then(|o| o.get(k));
                match merge3(ov, mv, c.get(k)) {
                    Some(v) => {
                        out.insert(k.clone(), v);
                    }
                    None => {
                        out.remove(k);
                    }
                }
            }
            if let Some(Value::Object(o)) = original {
                for k in o.keys() {
                    if !m.contains_key(k) {
                        out.remove(k);
                    }
                }
            }
            Some(Value::Object(out))
        }
        (Value::Object(m), _) => {
            // Nothing to merge into: the manifest's object, without its nulls.
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| merge3(None, v, None).map(|v| (k.clone(), v)))
                .collect();
            Some(Value::Object(out))
        }
        (v, _) => Some(v.clone()),
    }
}

/// Three-way merge of one optional field: `file` (the manifest), `last` (last applied) and
/// `stored`; `None` removes the field.
fn merge_field(
    last: Option<&Value>,
    file: Option<&Value>,
    stored: Option<&Value>,
) -> Option<Value> {
    match file {
        Some(f) => merge3(last, f, stored),
        None if last.is_some() => None,
        None => stored.cloned(),
    }
}

/// The PUT body for an object that exists: the stored object with `spec`, `metadata.labels`
/// and `metadata.annotations` three-way merged from the manifest (see [`merge3`]), the
/// server-owned creator/lastModifier annotations kept, the applied manifest recorded in
/// [`LAST_APPLIED`], and the stored `resourceVersion` for compare-and-swap.
pub fn build_update(stored: &Value, desired: &Value, namespace: &str) -> Value {
    let mut out = stored.clone();
    let Some(top) = out.as_object_mut() else {
        return out;
    };
    let last: Option<Value> = stored
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok());
    let applied = applied_configuration(desired, namespace);
    let last_at = |p: &str| last.as_ref().and_then(|l| l.pointer(p));

    match merge_field(last_at("/spec"), applied.get("spec"), stored.get("spec")) {
        Some(spec) => top.insert("spec".into(), spec),
        None => top.remove("spec"),
    };

    let meta = top
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("metadata is an object");
    for key in ["labels", "annotations"] {
        let p = format!("/metadata/{key}");
        let merged = merge_field(last_at(&p), applied.pointer(&p), stored.pointer(&p));
        match merged {
            Some(Value::Object(m)) if !m.is_empty() => meta.insert(key.into(), Value::Object(m)),
            _ => meta.remove(key),
        };
    }
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("annotations is an object");
    for key in PRESERVED_ANNOTATIONS {
        match stored
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
        {
            Some(v) => annotations.insert(key.to_string(), v.clone()),
            None => annotations.remove(key),
        };
    }
    annotations.insert(LAST_APPLIED.into(), Value::String(format!("{applied}\n")));
    if let Some(rv) = stored.pointer("/metadata/resourceVersion") {
        meta.insert("resourceVersion".into(), rv.clone());
    }
    out
}

/// The POST body for an object that does not exist: the manifest with its namespace set and
/// the applied configuration recorded.
pub fn build_create(desired: &Value, namespace: &str) -> Value {
    let applied = applied_configuration(desired, namespace);
    let mut out = applied.clone();
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        let a = m
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = a.as_object_mut() {
            a.insert(LAST_APPLIED.into(), Value::String(format!("{applied}\n")));
        }
    }
    out
}

/// Whether a replace changed the stored object (the server echoes an unchanged one as is).
pub fn action_for_update(stored: &Value, updated: &Value) -> Action {
    let before = obj::resource_version(stored);
    if !before.is_empty() && before == obj::resource_version(updated) {
        Action::Unchanged
    } else {
        Action::Configured
    }
}

/// The namespace a document goes to: its own, else `-n`.
pub fn namespace_for<'a>(doc: &'a Value, flag: &'a str) -> &'a str {
    Some(obj::namespace(doc))
        .filter(|n| !n.is_empty())
        .unwrap_or(flag)
}

/// An error while applying one document.
enum DocError {
    /// A client-side problem, printed as `error: …`.
    Client(String),
    /// A server error, printed as `Error from server (…): error when <verb> "FILE": …`.
    Server {
        verb: &'static str,
        source: String,
        err: ApiError,
    },
}

fn apply_one(
    client: &Client,
    kind: &ResourceKind,
    doc: &Document,
    ns: &str,
) -> Result<(Action, String), DocError> {
    let name = obj::name(&doc.value);
    if name.is_empty() {
        return Err(DocError::Client(format!(
            "error when retrieving current configuration of \"{}\": resource name may not be empty",
            doc.source
        )));
    }
    let server = |verb, err| DocError::Server {
        verb,
        source: doc.source.clone(),
        err,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let last = attempt > CONFLICT_RETRIES;
        match client.get(kind, ns, name) {
            Err(e) if e.is_not_found() => {
                match client.create(kind, ns, &build_create(&doc.value, ns)) {
                    Ok(created) => {
                        let n = Some(obj::name(&created))
                            .filter(|n| !n.is_empty())
                            .unwrap_or(name);
                        return Ok((Action::Created, n.to_string()));
                    }
                    // Somebody created it in between: apply again as an update.
                    Err(e) if e.is_conflict() && !last => continue,
                    Err(e) => return Err(server("creating", e)),
                }
            }
            Err(e) => return Err(server("retrieving current configuration of", e)),
            Ok(stored) => {
                let body = build_update(&stored, &doc.value, ns);
                if body == stored {
                    return Ok((Action::Unchanged, name.to_string()));
                }
                match client.replace(kind, ns, name, &body) {
                    Ok(updated) => {
                        return Ok((action_for_update(&stored, &updated), name.to_string()));
                    }
                    Err(e) if e.is_conflict() && !last => continue,
                    Err(e) => return Err(server("replacing", e)),
                }
            }
        }
    }
}

pub fn run(args: ApplyArgs) -> Outcome {
    let docs = manifest::read_all(&args.files, &mut std::io::stdin().lock())?;
    if docs.is_empty() {
        anyhow::bail!("no objects passed to apply");
    }
    let client = args.global.client()?;
    let mut ok = true;
    let mut services = Vec::new();
    for doc in &docs {
        let kind = match kind_of_document(&doc.value, &doc.source) {
            Ok(k) => k,
            Err(msg) => {
                eprintln!("error: {msg}");
                ok = false;
                continue;
            }
        };
        let ns = if kind.namespaced {
            namespace_for(&doc.value, &args.global.namespace)
        } else {
            ""
        };
        match apply_one(&client, kind, doc, ns) {
            Ok((action, name)) => {
                super::out(format_args!(
                    "{}/{} {}\n",
                    kind.qualified(),
                    name,
                    action.as_str()
                ))?;
                if *kind == wisp_api::kinds::SERVICE {
                    services.push((ns.to_string(), name));
                }
            }
            Err(DocError::Client(msg)) => {
                eprintln!("error: {msg}");
                ok = false;
            }
            Err(DocError::Server {
                err: e @ (ApiError::Connect { .. } | ApiError::Other(_)),
                ..
            }) => {
                // The server is unreachable: the remaining documents would fail the same way.
                return Err(e.into());
            }
            Err(DocError::Server { verb, source, err }) => {
                eprintln!(
                    "{}",
                    err.render(Some(&format!("error when {verb} \"{source}\"")))
                );
                ok = false;
            }
        }
    }
    if args.wait && !services.is_empty() {
        ok &= super::wait::wait(&client, &services, args.timeout)?;
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored() -> Value {
        json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {
                "name": "hello",
                "namespace": "default",
                "uid": "u1",
                "resourceVersion": "41",
                "generation": 2,
                "creationTimestamp": "2024-05-01T11:55:00Z",
                "labels": {"old": "x"},
                "annotations": {
                    "serving.knative.dev/creator": "admin",
                    "serving.knative.dev/lastModifier": "bob",
                    "stale": "y"
                }
            },
            "spec": {"template": {"spec": {"containers": [{"image": "old"}]}}, "traffic": [{"latestRevision": true, "percent": 100}]},
            "status": {"observedGeneration": 2}
        })
    }

    fn last_applied(v: &Value) -> Value {
        serde_json::from_str(v["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap()).unwrap()
    }

    #[test]
    fn update_without_last_applied_merges_two_way() {
        // An object created by something other than apply: nothing is known to delete, so the
        // manifest is merged over the stored object and server-set keys stay.
        let desired = json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {
                "name": "hello",
                "resourceVersion": "1",
                "labels": {"app": "hello"},
                "annotations": {"serving.knative.dev/creator": "mallory", "note": "n"}
            },
            "spec": {"template": {"spec": {"containers": [{"image": "new"}]}}},
            "status": {"observedGeneration": 99}
        });
        let got = build_update(&stored(), &desired, "default");
        let mut want = stored();
        want["metadata"]["labels"] = json!({"old": "x", "app": "hello"});
        want["metadata"]["annotations"] = json!({
            "serving.knative.dev/creator": "admin",
            "serving.knative.dev/lastModifier": "bob",
            "stale": "y",
            "note": "n",
            LAST_APPLIED: got["metadata"]["annotations"][LAST_APPLIED].clone(),
        });
        want["spec"]["template"]["spec"]["containers"] = json!([{"image": "new"}]);
        assert_eq!(got, want);
        let la = last_applied(&got);
        assert_eq!(la["metadata"]["namespace"], "default");
        assert_eq!(la.get("status"), None);
        assert_eq!(la["spec"], desired["spec"]);
    }

    #[test]
    fn second_apply_of_the_same_file_changes_nothing() {
        let file = json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": "hello", "labels": {"app": "a"}},
            "spec": {"template": {"spec": {"containerConcurrency": 10, "containers": [{"image": "x"}]}}}
        });
        // What the server stored after create: the manifest plus defaults and server metadata.
        let mut stored = build_create(&file, "default");
        stored["metadata"]["uid"] = json!("u");
        stored["metadata"]["resourceVersion"] = json!("7");
        stored["metadata"]["annotations"]["serving.knative.dev/creator"] = json!("admin");
        stored["metadata"]["annotations"]["serving.knative.dev/lastModifier"] = json!("admin");
        stored["spec"]["template"]["spec"]["enableServiceLinks"] = json!(false);
        stored["spec"]["template"]["spec"]["timeoutSeconds"] = json!(300);
        stored["spec"]["traffic"] = json!([{"latestRevision": true, "percent": 100}]);
        stored["status"] = json!({"observedGeneration": 1});
        assert_eq!(build_update(&stored, &file, "default"), stored);

        // Removing a field from the file removes it from the object; server defaults stay.
        let mut edited = file.clone();
        edited["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("containerConcurrency");
        edited["metadata"].as_object_mut().unwrap().remove("labels");
        let got = build_update(&stored, &edited, "default");
        let spec = &got["spec"]["template"]["spec"];
        assert_eq!(spec.get("containerConcurrency"), None);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["timeoutSeconds"], 300);
        assert_eq!(got["spec"]["traffic"], stored["spec"]["traffic"]);
        assert_eq!(got["metadata"].get("labels"), None);
        assert_eq!(
            got["metadata"]["annotations"]["serving.knative.dev/creator"],
            "admin"
        );
        assert_eq!(got["metadata"]["resourceVersion"], "7");
        assert_eq!(last_applied(&got)["spec"], edited["spec"]);
    }

    #[test]
    fn merge3_rules() {
        let cases = [
            // (original, modified, current, want)
            (
                json!(null),
                json!({"a": 1}),
                json!({"a": 2, "b": 3}),
                json!({"a": 1, "b": 3}),
            ),
            (
                json!({"a": 1, "b": 3}),
                json!({"a": 1}),
                json!({"a": 1, "b": 3, "c": 4}),
                json!({"a": 1, "c": 4}),
            ),
            (
                json!(null),
                json!({"a": null}),
                json!({"a": 1, "b": 2}),
                json!({"b": 2}),
            ),
            (
                json!(null),
                json!({"l": [1]}),
                json!({"l": [{"x": 1}, 2]}),
                json!({"l": [1]}),
            ),
            (
                json!(null),
                json!({"m": {"x": {"y": 1}}}),
                json!({"m": "scalar"}),
                json!({"m": {"x": {"y": 1}}}),
            ),
            (
                json!({"m": {"x": 1}}),
                json!({"m": {}}),
                json!({"m": {"x": 1, "d": 2}}),
                json!({"m": {"d": 2}}),
            ),
            (
                json!(null),
                json!({"n": {"a": null, "b": 1}}),
                json!({}),
                json!({"n": {"b": 1}}),
            ),
        ];
        for (o, m, c, want) in cases {
            let orig = (!o.is_null()).then_some(&o);
            assert_eq!(
                merge3(orig, &m, Some(&c)),
                Some(want.clone()),
                "{o} {m} {c}"
            );
        }
    }

    #[test]
    fn spec_removed_from_file() {
        let mut s = stored();
        s["metadata"]["annotations"][LAST_APPLIED] = json!("{\"spec\":{\"x\":1}}\n");
        let got = build_update(&s, &json!({"metadata": {"name": "hello"}}), "default");
        assert_eq!(got.get("spec"), None);
        // Without a record of applying spec, a file without spec leaves it alone.
        let got = build_update(
            &stored(),
            &json!({"metadata": {"name": "hello"}}),
            "default",
        );
        assert_eq!(got["spec"], stored()["spec"]);
    }

    #[test]
    fn create_sets_namespace_and_last_applied() {
        let d = json!({"kind": "Route", "metadata": {"name": "r"}, "spec": {}, "status": {"x": 1}});
        let got = build_create(&d, "ns1");
        assert_eq!(got["metadata"]["namespace"], "ns1");
        assert_eq!(got.get("status"), None);
        assert_eq!(
            got["metadata"]["annotations"][LAST_APPLIED],
            "{\"kind\":\"Route\",\"metadata\":{\"name\":\"r\",\"namespace\":\"ns1\"},\"spec\":{}}\n"
        );
        let d =
            json!({"kind": "Route", "metadata": {"annotations": {LAST_APPLIED: "old", "a": "b"}}});
        let got = build_create(&d, "ns1");
        assert_eq!(
            last_applied(&got)["metadata"]["annotations"],
            json!({"a": "b"})
        );
    }

    #[test]
    fn namespaces_and_actions() {
        assert_eq!(
            namespace_for(&json!({"metadata": {"namespace": "a"}}), "b"),
            "a"
        );
        assert_eq!(
            namespace_for(&json!({"metadata": {"namespace": ""}}), "b"),
            "b"
        );
        assert_eq!(namespace_for(&json!({}), "b"), "b");
        let s = stored();
        assert_eq!(action_for_update(&s, &s), Action::Unchanged);
        let mut u = s.clone();
        u["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(action_for_update(&s, &u), Action::Configured);
        assert_eq!(Action::Created.as_str(), "created");
    }
}
