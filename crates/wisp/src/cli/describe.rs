//! `wisp describe KIND NAME`: a readable summary of one object — metadata, spec, the status
//! fields that matter, conditions, and every object it owns (children, grandchildren, …).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use wisp_api::kinds::{self, ResourceKind};

use super::client::{ApiError, Client};
use super::get::{list_items, with_type_meta};
use super::printers;
use super::{GlobalArgs, Outcome, obj, parse_resource_args};

/// Flags of `wisp describe`.
#[derive(Debug, Clone, clap::Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// `KIND NAME…` or `KIND/NAME…`; without a name, every object of the kind.
    #[arg(required = true, value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// Label selector (when no name is given).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
}

/// Lays out rows with kubectl describe's tabwriter settings (padding 2); the last cell of
/// each row is not padded.
fn layout(rows: &[Vec<String>], indent: &str) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(r.len().saturating_sub(1)) {
            let w = c.chars().count() + 2;
            match widths.get_mut(i) {
                Some(x) => *x = (*x).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::from(indent);
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                line.extend(std::iter::repeat_n(' ', widths[i] - c.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A table with a dashed underline under its header, as kubectl describe prints them.
fn table(header: &[&str], rows: Vec<Vec<String>>, indent: &str) -> String {
    let mut all = vec![
        header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        header
            .iter()
            .map(|h| "-".repeat(h.chars().count()))
            .collect(),
    ];
    all.extend(rows);
    layout(&all, indent)
}

/// `key=value` (labels) or `key: value` (annotations) lines, sorted; `<none>` when empty.
/// The last-applied-configuration annotation is skipped, as kubectl describe does.
fn map_lines(v: Option<&Value>, separator: &str) -> Vec<String> {
    let mut lines: Vec<String> = v
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != super::apply::LAST_APPLIED)
        .map(|(k, v)| {
            format!(
                "{k}{separator}{}",
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            )
        })
        .collect();
    if lines.is_empty() {
        return vec!["<none>".to_string()];
    }
    lines.sort();
    lines
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn indent_block(text: &str, indent: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::from("\n")
            } else {
                format!("{indent}{l}\n")
            }
        })
        .collect()
}

/// Objects owned, directly or through their owners, by the object with `root_uid`, depth
/// first: each child (at depth 1) followed by its own children. Siblings are ordered by kind
/// (Service, Configuration, Revision, Route, PodAutoscaler) then name. Cycles are ignored.
pub fn owned_tree<'a>(root_uid: &str, objects: &'a [Value]) -> Vec<(usize, &'a Value)> {
    fn kind_rank(o: &Value) -> usize {
        let k = obj::str_at(o, "/kind").unwrap_or_default();
        kinds::ALL
            .iter()
            .position(|rk| rk.kind == k)
            .unwrap_or(kinds::ALL.len())
    }
    fn owned_by(o: &Value, uid: &str) -> bool {
        o.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter()
                    .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
            })
    }
    fn visit<'a>(
        uid: &str,
        depth: usize,
        objects: &'a [Value],
        seen: &mut HashSet<String>,
        out: &mut Vec<(usize, &'a Value)>,
    ) {
        let mut children: Vec<&Value> = objects
            .iter()
            .filter(|o| owned_by(o, uid) && !seen.contains(obj::uid(o)))
            .collect();
        children.sort_by(|a, b| (kind_rank(a), obj::name(a)).cmp(&(kind_rank(b), obj::name(b))));
        for c in &children {
            seen.insert(obj::uid(c).to_string());
        }
        for c in children {
            out.push((depth, c));
            if !obj::uid(c).is_empty() {
                visit(obj::uid(c), depth + 1, objects, seen, out);
            }
        }
    }
    let mut out = Vec::new();
    if root_uid.is_empty() {
        return out;
    }
    let mut seen = HashSet::from([root_uid.to_string()]);
    visit(root_uid, 1, objects, &mut seen, &mut out);
    out
}

/// The describe text of one object; `objects` are the candidates for `Owned objects`.
pub fn describe(kind: &ResourceKind, o: &Value, objects: &[Value], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let created = obj::str_at(o, "/metadata/creationTimestamp");
    let created = match created {
        Some(t) => format!("{t} ({} ago)", printers::age(Some(t), now)),
        None => "<unknown>".to_string(),
    };
    let mut rows: Vec<Vec<String>> = vec![
        vec!["Name:".into(), obj::name(o).into()],
        vec!["Namespace:".into(), obj::namespace(o).into()],
    ];
    for (label, key, sep) in [
        ("Labels:", "labels", "="),
        ("Annotations:", "annotations", ": "),
    ] {
        for (i, line) in map_lines(o.pointer(&format!("/metadata/{key}")), sep)
            .into_iter()
            .enumerate()
        {
            rows.push(vec![
                if i == 0 { label.into() } else { String::new() },
                line,
            ]);
        }
    }
    rows.push(vec![
        "API Version:".into(),
        obj::str_at(o, "/apiVersion")
            .map(str::to_string)
            .unwrap_or_else(|| kind.api_version()),
    ]);
    rows.push(vec![
        "Kind:".into(),
        obj::str_at(o, "/kind").unwrap_or(kind.kind).into(),
    ]);
    rows.push(vec!["Creation Timestamp:".into(), created]);
    rows.push(vec![
        "Generation:".into(),
        o.pointer("/metadata/generation")
            .and_then(scalar)
            .unwrap_or_default(),
    ]);
    if let Some(t) = obj::str_at(o, "/metadata/deletionTimestamp") {
        rows.push(vec!["Deletion Timestamp:".into(), t.into()]);
    }
    out.push_str(&layout(&rows, ""));

    match o.get("spec") {
        Some(spec) if spec.as_object().is_some_and(|m| !m.is_empty()) => {
            out.push_str("Spec:\n");
            out.push_str(&indent_block(&printers::to_yaml(spec), "  "));
        }
        _ => out.push_str("Spec:  <none>\n"),
    }

    let status = o
        .get("status")
        .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()));
    match status {
        None => out.push_str("Status:  <none>\n"),
        Some(st) => {
            out.push_str("Status:\n");
            let fields = [
                ("URL:", "/url"),
                ("Address:", "/address/url"),
                ("Latest Created Revision:", "/latestCreatedRevisionName"),
                ("Latest Ready Revision:", "/latestReadyRevisionName"),
                ("Observed Generation:", "/observedGeneration"),
                ("Actual Replicas:", "/actualReplicas"),
                ("Desired Replicas:", "/desiredReplicas"),
                ("Desired Scale:", "/desiredScale"),
                ("Actual Scale:", "/actualScale"),
                ("Service Name:", "/serviceName"),
                ("Metrics Service Name:", "/metricsServiceName"),
                ("Log URL:", "/logUrl"),
            ];
            let rows: Vec<Vec<String>> = fields
                .iter()
                .filter_map(|(label, p)| {
                    st.pointer(p)
                        .and_then(scalar)
                        .map(|v| vec![label.to_string(), v])
                })
                .collect();
            out.push_str(&layout(&rows, "  "));
            if let Some(traffic) = st
                .get("traffic")
                .and_then(Value::as_array)
                .filter(|t| !t.is_empty())
            {
                out.push_str("  Traffic:\n");
                let rows = traffic
                    .iter()
                    .map(|t| {
                        let f = |k: &str| t.get(k).and_then(scalar).unwrap_or_default();
                        let pct = t
                            .get("percent")
                            .and_then(scalar)
                            .map(|p| format!("{p}%"))
                            .unwrap_or_default();
                        vec![
                            pct,
                            f("revisionName"),
                            f("configurationName"),
                            f("latestRevision"),
                            f("tag"),
                            f("url"),
                        ]
                    })
                    .collect();
                out.push_str(&table(
                    &[
                        "Percent",
                        "Revision",
                        "Configuration",
                        "Latest",
                        "Tag",
                        "URL",
                    ],
                    rows,
                    "    ",
                ));
            }
            let conditions = st
                .get("conditions")
                .and_then(Value::as_array)
                .filter(|c| !c.is_empty());
            match conditions {
                None => out.push_str("  Conditions:  <none>\n"),
                Some(cs) => {
                    out.push_str("  Conditions:\n");
                    let rows = cs
                        .iter()
                        .map(|c| {
                            let f = |k: &str| c.get(k).and_then(scalar).unwrap_or_default();
                            let lt = obj::str_at(c, "/lastTransitionTime")
                                .map(|t| printers::age(Some(t), now))
                                .unwrap_or_default();
                            vec![f("type"), f("status"), f("reason"), f("message"), lt]
                        })
                        .collect();
                    out.push_str(&table(
                        &["Type", "Status", "Reason", "Message", "Last Transition"],
                        rows,
                        "    ",
                    ));
                }
            }
        }
    }

    let owned = owned_tree(obj::uid(o), objects);
    if owned.is_empty() {
        out.push_str("Owned objects:  <none>\n");
    } else {
        out.push_str("Owned objects:\n");
        for (depth, child) in owned {
            let name = match printers::kind_of(child) {
                Some(k) => printers::qualified_name(k, child),
                None => format!(
                    "{}/{}",
                    obj::str_at(child, "/kind").unwrap_or("?"),
                    obj::name(child)
                ),
            };
            out.push_str(&format!("{}{name}\n", "  ".repeat(depth)));
        }
    }
    out
}

/// Every object of every kind in a namespace (the candidates for `Owned objects`).
fn namespace_objects(client: &Client, ns: &str) -> Result<Vec<Value>, ApiError> {
    let mut all = Vec::new();
    for kind in kinds::ALL {
        all.extend(list_items(kind, &client.list(kind, Some(ns), None)?));
    }
    Ok(all)
}

pub fn run(args: DescribeArgs) -> Outcome {
    let targets = parse_resource_args(&args.resources)?;
    let client = args.global.client()?;
    let ns = args.global.namespace.as_str();
    let mut ok = true;
    let mut found = Vec::new();
    for (kind, names) in &targets {
        if names.is_empty() {
            let list = client.list(kind, Some(ns), args.selector.as_deref())?;
            found.extend(list_items(kind, &list).into_iter().map(|o| (*kind, o)));
            continue;
        }
        for name in names {
            match client.get(kind, ns, name) {
                Ok(o) => found.push((*kind, with_type_meta(kind, o))),
                Err(e @ ApiError::Status(_)) => {
                    eprintln!("{}", e.render(None));
                    ok = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if found.is_empty() {
        if ok {
            eprintln!("{}", super::get::no_resources_message(Some(ns)));
        }
        return Ok(ok);
    }
    let objects = namespace_objects(&client, ns)?;
    let now = Utc::now();
    let texts: Vec<String> = found
        .iter()
        .map(|(k, o)| describe(k, o, &objects, now))
        .collect();
    super::out(format_args!("{}", texts.join("\n\n")))?;
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn o(kind: &str, name: &str, uid: &str, owner: Option<&str>) -> Value {
        let mut v = json!({"kind": kind, "metadata": {"name": name, "uid": uid}});
        if let Some(ow) = owner {
            v["metadata"]["ownerReferences"] =
                json!([{"uid": ow, "kind": "X", "name": "x", "apiVersion": "v"}]);
        }
        v
    }

    #[test]
    fn owner_chains() {
        let objects = vec![
            o("Service", "hello", "s1", None),
            o("Route", "hello", "rt1", Some("s1")),
            o("Revision", "hello-00002", "r2", Some("c1")),
            o("Configuration", "hello", "c1", Some("s1")),
            o("Revision", "hello-00001", "r1", Some("c1")),
            o("PodAutoscaler", "hello-00001", "pa1", Some("r1")),
            o("Service", "other", "s2", None),
            o("Configuration", "other", "c2", Some("s2")),
            // A cycle must not loop forever.
            o("Revision", "loop-a", "la", Some("lb")),
            o("Revision", "loop-b", "lb", Some("la")),
        ];
        let got: Vec<(usize, String)> = owned_tree("s1", &objects)
            .into_iter()
            .map(|(d, v)| {
                (
                    d,
                    format!("{}/{}", v["kind"].as_str().unwrap(), obj::name(v)),
                )
            })
            .collect();
        let want = [
            (1, "Configuration/hello"),
            (2, "Revision/hello-00001"),
            (3, "PodAutoscaler/hello-00001"),
            (2, "Revision/hello-00002"),
            (1, "Route/hello"),
        ]
        .map(|(d, s)| (d, s.to_string()));
        assert_eq!(got, want);
        assert!(owned_tree("pa1", &objects).is_empty());
        assert!(owned_tree("", &objects).is_empty());
        assert_eq!(owned_tree("la", &objects).len(), 1);
    }

    #[test]
    fn describe_service() {
        let now = wisp_api::age::parse_time("2024-05-01T12:00:00Z").unwrap();
        let svc = json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {
                "name": "hello", "namespace": "default", "uid": "s1", "generation": 1,
                "creationTimestamp": "2024-05-01T11:55:00Z",
                "annotations": {"serving.knative.dev/creator": "admin", "serving.knative.dev/lastModifier": "admin",
                                "kubectl.kubernetes.io/last-applied-configuration": "{}"}
            },
            "spec": {"template": {"spec": {"containers": [{"image": "hello:1"}]}}},
            "status": {
                "url": "http://hello.default.example.com",
                "latestCreatedRevisionName": "hello-00001",
                "latestReadyRevisionName": "hello-00001",
                "observedGeneration": 1,
                "traffic": [{"revisionName": "hello-00001", "latestRevision": true, "percent": 100}],
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T11:58:00Z"},
                    {"type": "RoutesReady", "status": "False", "reason": "RevisionMissing",
                     "message": "Configuration \"hello\" does not have any ready Revision."}
                ]
            }
        });
        let objects = vec![
            svc.clone(),
            o("Configuration", "hello", "c1", Some("s1")),
            o("Route", "hello", "rt1", Some("s1")),
        ];
        let got = describe(&kinds::SERVICE, &svc, &objects, now);
        let want_start = "\
Name:                hello
Namespace:           default
Labels:              <none>
Annotations:         serving.knative.dev/creator: admin
                     serving.knative.dev/lastModifier: admin
API Version:         serving.knative.dev/v1
Kind:                Service
Creation Timestamp:  2024-05-01T11:55:00Z (5m ago)
Generation:          1
Spec:
  template:
";
        assert!(got.starts_with(want_start), "{got}");
        assert!(
            got.contains("      - image: hello:1\n") || got.contains("        - image: hello:1\n"),
            "{got}"
        );
        let want_end = "\
Status:
  URL:                      http://hello.default.example.com
  Latest Created Revision:  hello-00001
  Latest Ready Revision:    hello-00001
  Observed Generation:      1
  Traffic:
    Percent  Revision     Configuration  Latest  Tag  URL
    -------  --------     -------------  ------  ---  ---
    100%     hello-00001                 true
  Conditions:
    Type         Status  Reason           Message                                                  Last Transition
    ----         ------  ------           -------                                                  ---------------
    Ready        True                                                                              2m
    RoutesReady  False   RevisionMissing  Configuration \"hello\" does not have any ready Revision.
Owned objects:
  configuration.serving.knative.dev/hello
  route.serving.knative.dev/hello
";
        assert!(got.ends_with(want_end), "{got}");
    }

    #[test]
    fn describe_bare_object() {
        let now = wisp_api::age::parse_time("2024-05-01T12:00:00Z").unwrap();
        let rev =
            json!({"metadata": {"name": "r", "namespace": "ns", "labels": {"b": "2", "a": "1"}}});
        let got = describe(&kinds::REVISION, &rev, &[], now);
        assert!(
            got.contains("Labels:              a=1\n                     b=2\n"),
            "{got}"
        );
        assert!(
            got.contains(
                "API Version:         serving.knative.dev/v1\nKind:                Revision\n"
            ),
            "{got}"
        );
        assert!(got.contains("Creation Timestamp:  <unknown>\n"), "{got}");
        assert!(
            got.ends_with("Spec:  <none>\nStatus:  <none>\nOwned objects:  <none>\n"),
            "{got}"
        );
    }
}
