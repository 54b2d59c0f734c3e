//! Output formatting shared by the client commands: kubectl's table layout (tabwriter with
//! padding 3), the printer columns of each kind (the `additionalPrinterColumns` of Knative's
//! `config/core/300-resources/*.yaml`), `HumanDuration` ages (`wisp_api::age`) and the
//! `-o json|yaml|name` formats.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use wisp_api::kinds::{self, ResourceKind};

use super::obj;

/// An output format selected with `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Wide,
    Yaml,
    Json,
    Name,
}

impl Output {
    /// Parses the value of `-o` (absent = table).
    pub fn parse(flag: Option<&str>) -> anyhow::Result<Output> {
        match flag {
            None | Some("") => Ok(Output::Table),
            Some("wide") => Ok(Output::Wide),
            Some("yaml") => Ok(Output::Yaml),
            Some("json") => Ok(Output::Json),
            Some("name") => Ok(Output::Name),
            Some(other) => anyhow::bail!(
                "unable to match a printer suitable for the output format \"{other}\", \
                 allowed formats are: json,name,wide,yaml"
            ),
        }
    }
}

// Ages are kube's HumanDuration, shared with the API server's Tables.
pub use wisp_api::age::age;

/// The kind-specific printer columns (between NAME and AGE): the kind's
/// `additionalPrinterColumns` ([`ResourceKind::printer_columns`]), upper-cased as kubectl
/// prints them.
pub fn kind_columns(kind: &ResourceKind) -> Vec<String> {
    kind.printer_columns
        .iter()
        .map(|c| c.name.to_uppercase())
        .collect()
}

/// The kind-specific cells of one row, in the order of [`kind_columns`]: the API server's
/// Table cells (one evaluation of the columns' JSONPaths), blank where a value is missing,
/// as kubectl prints them.
pub fn kind_cells(kind: &ResourceKind, o: &Value) -> Vec<String> {
    let Ok(layout) = wisp_apiserver::table::Layout::of(kind) else {
        // The compiled-in paths parse (wisp-apiserver's tests check each kind).
        return vec![String::new(); kind.printer_columns.len()];
    };
    layout
        .cells(o)
        .into_iter()
        .skip(1) // the name, printed by the caller
        .map(|c| match c {
            Value::String(s) => s,
            Value::Null => String::new(),
            other => other.to_string(),
        })
        .collect()
}

/// How the rows of one table are laid out.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableOptions {
    /// Leading NAMESPACE column (`-A`).
    pub with_namespace: bool,
    /// NAME printed as `service.serving.knative.dev/hello` (several kinds in one `get`).
    pub with_kind: bool,
}

/// The header row of a kind's table.
pub fn header(kind: &ResourceKind, opts: TableOptions) -> Vec<String> {
    let mut h = Vec::new();
    if opts.with_namespace {
        h.push("NAMESPACE".to_string());
    }
    h.push("NAME".to_string());
    h.extend(kind_columns(kind));
    if !prints_age(kind) {
        h.push("AGE".to_string());
    }
    h
}

/// Whether the kind's own columns end in an age (kube's core printers), so none is added.
fn prints_age(kind: &ResourceKind) -> bool {
    kind.printer_columns
        .iter()
        .any(|c| c.computed == Some(wisp_api::kinds::Computed::Age))
}

/// One table row for an object.
pub fn row(kind: &ResourceKind, o: &Value, opts: TableOptions, now: DateTime<Utc>) -> Vec<String> {
    let mut r = Vec::new();
    if opts.with_namespace {
        r.push(obj::namespace(o).to_string());
    }
    if opts.with_kind {
        r.push(format!("{}/{}", kind.qualified(), obj::name(o)));
    } else {
        r.push(obj::name(o).to_string());
    }
    r.extend(kind_cells(kind, o));
    if !prints_age(kind) {
        r.push(age(obj::str_at(o, "/metadata/creationTimestamp"), now));
    }
    r
}

/// Column widths as Go's `text/tabwriter` computes them with kubectl's settings
/// (minwidth 6, padding 3): every column but the last of each row is padded.
pub fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        // The last cell of a row is not terminated by a tab, so it is not part of a column.
        for (i, c) in r.iter().enumerate().take(r.len().saturating_sub(1)) {
            let w = (c.chars().count() + 3).max(6);
            if i >= widths.len() {
                widths.push(w);
            } else {
                widths[i] = widths[i].max(w);
            }
        }
    }
    widths
}

/// Formats rows with the given column widths (see [`column_widths`]).
pub fn format_rows(rows: &[Vec<String>], widths: &[usize]) -> String {
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                let w = widths
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .max((c.chars().count() + 3).max(6));
                line.push_str(c);
                line.extend(std::iter::repeat_n(' ', w - c.chars().count()));
            } else {
                line.push_str(c);
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Formats a table the way kubectl's tabwriter does.
pub fn format_table(rows: &[Vec<String>]) -> String {
    format_rows(rows, &column_widths(rows))
}

/// `service.serving.knative.dev/hello`, the `-o name` form.
pub fn qualified_name(kind: &ResourceKind, o: &Value) -> String {
    format!("{}/{}", kind.qualified(), obj::name(o))
}

/// Pretty JSON with kubectl's four-space indentation.
pub fn to_json(v: &Value) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    v.serialize(&mut ser)
        .expect("a JSON value always serializes");
    let mut s = String::from_utf8(buf).expect("serde_json writes UTF-8");
    s.push('\n');
    s
}

/// YAML for `-o yaml` and `describe`.
pub fn to_yaml(v: &Value) -> String {
    let mut s =
        serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# cannot render YAML: {e}\n"));
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// A kubectl `List` holding the given items.
pub fn list_of(items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "items": items,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    })
}

/// Finds the kind of an object from its `kind` field.
pub fn kind_of(o: &Value) -> Option<&'static ResourceKind> {
    obj::str_at(o, "/kind").and_then(|k| kinds::ALL.into_iter().find(|rk| rk.kind == k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_formats() {
        assert_eq!(Output::parse(None).unwrap(), Output::Table);
        assert_eq!(Output::parse(Some("wide")).unwrap(), Output::Wide);
        assert_eq!(Output::parse(Some("yaml")).unwrap(), Output::Yaml);
        assert_eq!(Output::parse(Some("json")).unwrap(), Output::Json);
        assert_eq!(Output::parse(Some("name")).unwrap(), Output::Name);
        let err = Output::parse(Some("xml")).unwrap_err().to_string();
        assert!(err.contains("\"xml\""), "{err}");
    }

    #[test]
    fn tabwriter_layout() {
        let rows = vec![
            vec![
                "NAME".to_string(),
                "URL".into(),
                "READY".into(),
                "AGE".into(),
            ],
            vec![
                "hello".to_string(),
                "http://hello.default.example.com".into(),
                "True".into(),
                "5s".into(),
            ],
            vec!["a".to_string(), "".into(), "".into(), "10m".into()],
        ];
        let got = format_table(&rows);
        let want = "\
NAME    URL                                READY   AGE
hello   http://hello.default.example.com   True    5s
a                                                  10m
";
        assert_eq!(got, want);
        // minwidth 6: a one-character column is still 6 wide.
        let got = format_table(&[vec!["A".into(), "B".into()], vec!["x".into(), "y".into()]]);
        assert_eq!(got, "A     B\nx     y\n");
    }

    fn service() -> Value {
        json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": "hello", "namespace": "default", "creationTimestamp": "2024-05-01T11:55:00Z"},
            "status": {
                "url": "http://hello.default.example.com",
                "latestCreatedRevisionName": "hello-00002",
                "latestReadyRevisionName": "hello-00001",
                "conditions": [
                    {"type": "ConfigurationsReady", "status": "Unknown", "reason": "Deploying"},
                    {"type": "Ready", "status": "Unknown", "reason": "RevisionMissing"}
                ]
            }
        })
    }

    #[test]
    fn rows_per_kind() {
        let now = wisp_api::age::parse_time("2024-05-01T12:00:00Z").unwrap();
        let opts = TableOptions::default();
        assert_eq!(
            row(&kinds::SERVICE, &service(), opts, now),
            [
                "hello",
                "http://hello.default.example.com",
                "hello-00002",
                "hello-00001",
                "Unknown",
                "RevisionMissing",
                "5m"
            ]
        );
        let rev = json!({
            "kind": "Revision",
            "metadata": {"name": "hello-00001", "namespace": "ns1",
                "labels": {"serving.knative.dev/configuration": "hello",
                           "serving.knative.dev/configurationGeneration": "1"}},
            "status": {"actualReplicas": 1, "desiredReplicas": 2,
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let opts_ns = TableOptions {
            with_namespace: true,
            with_kind: false,
        };
        assert_eq!(
            row(&kinds::REVISION, &rev, opts_ns, now),
            [
                "ns1",
                "hello-00001",
                "hello",
                "1",
                "True",
                "",
                "1",
                "2",
                "<unknown>"
            ]
        );
        assert_eq!(
            header(&kinds::REVISION, opts_ns),
            [
                "NAMESPACE",
                "NAME",
                "CONFIG NAME",
                "GENERATION",
                "READY",
                "REASON",
                "ACTUAL REPLICAS",
                "DESIRED REPLICAS",
                "AGE"
            ]
        );
        let pa = json!({"kind": "PodAutoscaler", "metadata": {"name": "hello-00001"},
                        "status": {"desiredScale": 0, "actualScale": 0}});
        assert_eq!(
            row(&kinds::POD_AUTOSCALER, &pa, opts, now),
            ["hello-00001", "0", "0", "", "", "<unknown>"]
        );
        let rt = json!({"kind": "Route", "metadata": {"name": "hello"}});
        let with_kind = TableOptions {
            with_namespace: false,
            with_kind: true,
        };
        assert_eq!(
            row(&kinds::ROUTE, &rt, with_kind, now),
            ["route.serving.knative.dev/hello", "", "", "", "<unknown>"]
        );
        assert_eq!(
            header(&kinds::CONFIGURATION, opts),
            [
                "NAME",
                "LATESTCREATED",
                "LATESTREADY",
                "READY",
                "REASON",
                "AGE"
            ]
        );
        assert_eq!(
            header(&kinds::ROUTE, opts),
            ["NAME", "URL", "READY", "REASON", "AGE"]
        );
        assert_eq!(
            header(&kinds::POD_AUTOSCALER, opts),
            [
                "NAME",
                "DESIREDSCALE",
                "ACTUALSCALE",
                "READY",
                "REASON",
                "AGE"
            ]
        );
    }

    #[test]
    fn name_json_yaml() {
        assert_eq!(
            qualified_name(&kinds::SERVICE, &service()),
            "service.serving.knative.dev/hello"
        );
        let j = to_json(&json!({"a": {"b": 1}}));
        assert_eq!(j, "{\n    \"a\": {\n        \"b\": 1\n    }\n}\n");
        let y = to_yaml(&list_of(vec![json!({"kind": "Service"})]));
        assert!(y.starts_with("apiVersion: v1\nitems:\n"), "{y}");
        assert!(y.contains("kind: List"), "{y}");
        assert!(
            y.contains("resourceVersion: ''") || y.contains("resourceVersion: \"\""),
            "{y}"
        );
        assert_eq!(kind_of(&service()).map(|k| k.kind), Some("Service"));
    }
}
