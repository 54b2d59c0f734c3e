//! Server-side printing: `meta.k8s.io` `Table`s built from a kind's printer columns, as
//! apiextensions-apiserver's CRD table convertor builds them
//! (`pkg/registry/customresource/tableconvertor/tableconvertor.go`), with `includeObject`
//! applied as kube-apiserver's `asTable` applies it
//! (`k8s.io/apiserver/pkg/endpoints/handlers/response.go`).

use serde_json::{Map, Value, json};
use wisp_api::kinds::{Computed, PrinterColumn, ResourceKind};

use crate::{error::ApiError, jsonpath::JsonPath};

/// `ObjectMeta.name`'s swagger description, which kube gives the `Name` column.
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `ObjectMeta.creationTimestamp`'s swagger description, for the default `Age` column.
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC. Populated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// kube's default when a CRD declares no printer columns (apiextensions `helpers.go`,
/// `serveDefaultColumnsIfEmpty`): a lone `Age`. With declared columns there is no `Age`,
/// which is why `kubectl get ksvc` on a cluster prints none.
const DEFAULT_COLUMNS: &[PrinterColumn] = &[PrinterColumn {
    name: "Age",
    type_: "date",
    format: "",
    description: AGE_DESCRIPTION,
    priority: 0,
    json_path: ".metadata.creationTimestamp",
    computed: None,
}];

/// `includeObject` of `TableOptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    /// Parses the query parameter; absent means `Metadata`, as in kube.
    pub fn parse(value: Option<&str>) -> Result<Include, ApiError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Include::Metadata),
            Some("None") => Ok(Include::None),
            Some("Object") => Ok(Include::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "unrecognized includeObject value: {other:?}"
            ))),
        }
    }
}

/// A kind's table layout: the columns and their parsed paths.
pub struct Layout {
    columns: &'static [PrinterColumn],
    /// Each column's path (None for a computed cell).
    paths: Vec<Option<JsonPath>>,
    /// Whether the implicit `Name` column comes first: every kind's but those whose
    /// columns place the name themselves (kube prints an Event's name last, in `-o wide`).
    name_first: bool,
}

impl Layout {
    pub fn of(kind: &ResourceKind) -> Result<Layout, ApiError> {
        let columns = if kind.printer_columns.is_empty() {
            DEFAULT_COLUMNS
        } else {
            kind.printer_columns
        };
        let paths = columns
            .iter()
            .map(|c| match c.computed {
                Some(_) => Ok(None),
                None => JsonPath::parse(c.json_path).map(Some),
            })
            .collect::<Result<Vec<_>, _>>()
            // The columns are compiled in: a bad path is a bug, but still no panic.
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let name_first = !columns.iter().any(|c| c.computed == Some(Computed::Name));
        Ok(Layout {
            columns,
            paths,
            name_first,
        })
    }

    /// `columnDefinitions`: `Name` first (unless the kind places it), then the kind's
    /// columns.
    pub fn column_definitions(&self) -> Vec<Value> {
        let mut defs = Vec::with_capacity(self.columns.len() + 1);
        if self.name_first {
            defs.push(json!({
                "name": "Name",
                "type": "string",
                "format": "name",
                "description": NAME_DESCRIPTION,
                "priority": 0,
            }));
        }
        defs.extend(self.columns.iter().map(|c| {
            let description = if c.description.is_empty() {
                format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    c.json_path
                )
            } else {
                c.description.to_string()
            };
            json!({
                "name": c.name,
                "type": c.type_,
                "format": c.format,
                "description": description,
                "priority": c.priority,
            })
        }));
        defs
    }

    /// One row's cells: the name, then each column's first match (null when none).
    pub fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut cells = Vec::with_capacity(1 + self.columns.len());
        if self.name_first {
            cells.push(obj["metadata"]["name"].clone());
        }
        for (col, path) in self.columns.iter().zip(&self.paths) {
            let cell = match (col.computed, path) {
                (Some(computed), _) => computed_cell(computed, obj),
                (None, Some(path)) => path
                    .find(obj)
                    .first()
                    .map_or(Value::Null, |v| cell(col.type_, v)),
                (None, None) => Value::Null,
            };
            cells.push(cell);
        }
        cells
    }

    /// A row with its object as `include` asks.
    pub fn row(&self, obj: &Value, include: Include, table_version: &str) -> Value {
        self.row_as(obj, obj, include, table_version)
    }

    /// A row whose cells come from `printed` and whose object is `shown` (an Event is
    /// printed from its core/v1 form whichever API it is read through).
    pub fn row_as(
        &self,
        printed: &Value,
        shown: &Value,
        include: Include,
        table_version: &str,
    ) -> Value {
        let cells = self.cells(printed);
        let obj = shown;
        let object = match include {
            Include::None => Value::Null,
            Include::Object => obj.clone(),
            Include::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{table_version}"),
                "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        };
        json!({"cells": cells, "object": object})
    }

    /// The Table of `objects` (one for a get, all for a list).
    pub fn table<'a>(
        &self,
        objects: impl IntoIterator<Item = &'a Value>,
        resource_version: &str,
        include: Include,
        table_version: &str,
    ) -> Value {
        self.table_of_rows(
            objects
                .into_iter()
                .map(|o| self.row(o, include, table_version))
                .collect(),
            resource_version,
            table_version,
        )
    }

    /// A Table of rows already made ([`Layout::row`], [`Layout::row_as`]).
    pub fn table_of_rows(
        &self,
        rows: Vec<Value>,
        resource_version: &str,
        table_version: &str,
    ) -> Value {
        let mut metadata = Map::new();
        if !resource_version.is_empty() {
            metadata.insert("resourceVersion".into(), resource_version.into());
        }
        json!({
            "kind": "Table",
            "apiVersion": format!("meta.k8s.io/{table_version}"),
            "metadata": metadata,
            "columnDefinitions": self.column_definitions(),
            "rows": rows,
        })
    }
}

/// A cell kube's core printers compute (`printConfigMap`, `printSecret`,
/// `translateTimestampSince`; the workload, Service and Event printers in [`printers`]).
fn computed_cell(computed: Computed, obj: &Value) -> Value {
    match computed {
        Computed::KeyCount(_) | Computed::Age => {}
        other => return crate::printers::cell(other, obj),
    }
    match computed {
        Computed::KeyCount(fields) => fields
            .iter()
            .map(|f| obj[*f].as_object().map_or(0, Map::len))
            .sum::<usize>()
            .into(),
        Computed::Age => match obj["metadata"]["creationTimestamp"].as_str() {
            Some(t) => cell("date", &Value::String(t.into())),
            None => "<unknown>".into(),
        },
        _ => Value::Null,
    }
}

/// A cell of a column of `type_`, as the convertor makes it: string columns print the
/// value as kubectl's JSONPath prints it; the others keep a value of their type, or null.
pub(crate) fn cell(type_: &str, v: &Value) -> Value {
    match (type_, v) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(_)) => v.clone(),
        ("string", Value::Number(_) | Value::Bool(_)) => Value::String(v.to_string()),
        // Go's fmt prints maps and slices its own way; JSON text is the readable nearest.
        ("string", _) => Value::String(v.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(_)) => v.clone(),
        // kube prints a date as its age (`ConvertToHumanReadableDateType`), `<invalid>` when
        // it does not parse.
        ("date", Value::String(s)) => match wisp_api::age::parse_time(s) {
            Some(t) => Value::String(wisp_api::age::human_duration(chrono::Utc::now() - t)),
            None => Value::String("<invalid>".into()),
        },
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::kinds;

    fn service() -> Value {
        json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": "hello", "namespace": "default", "resourceVersion": "7"},
            "spec": {},
            "status": {
                "url": "http://hello.default.example.com",
                "latestCreatedRevisionName": "hello-00002",
                "latestReadyRevisionName": "hello-00001",
                "conditions": [
                    {"type": "ConfigurationsReady", "status": "False"},
                    {"type": "Ready", "status": "False", "reason": "RevisionMissing"}
                ]
            }
        })
    }

    #[test]
    fn cells_per_kind() {
        let rev = json!({
            "metadata": {"name": "hello-00001", "labels": {
                "serving.knative.dev/configuration": "hello",
                "serving.knative.dev/configurationGeneration": "1"}},
            "status": {"actualReplicas": 1, "desiredReplicas": 2.0,
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let pa = json!({"metadata": {"name": "hello-00001"}, "status": {"desiredScale": 0}});
        let cases: Vec<(&ResourceKind, Value, Value)> = vec![
            (
                &kinds::SERVICE,
                service(),
                json!([
                    "hello",
                    "http://hello.default.example.com",
                    "hello-00002",
                    "hello-00001",
                    "False",
                    "RevisionMissing"
                ]),
            ),
            (
                &kinds::SERVICE,
                json!({"metadata": {"name": "new"}}),
                json!(["new", null, null, null, null, null]),
            ),
            (
                &kinds::ROUTE,
                service(),
                json!([
                    "hello",
                    "http://hello.default.example.com",
                    "False",
                    "RevisionMissing"
                ]),
            ),
            (
                &kinds::CONFIGURATION,
                service(),
                json!([
                    "hello",
                    "hello-00002",
                    "hello-00001",
                    "False",
                    "RevisionMissing"
                ]),
            ),
            (
                &kinds::REVISION,
                rev,
                json!(["hello-00001", "hello", "1", "True", null, 1, 2]),
            ),
            (
                &kinds::POD_AUTOSCALER,
                pa,
                json!(["hello-00001", 0, null, null, null]),
            ),
        ];
        for (kind, obj, want) in cases {
            let layout = Layout::of(kind).unwrap();
            assert_eq!(Value::from(layout.cells(&obj)), want, "{}", kind.kind);
        }
    }

    #[test]
    fn core_kinds_columns() {
        let created = (chrono::Utc::now() - chrono::TimeDelta::seconds(725))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let meta = json!({"name": "x", "creationTimestamp": created});
        let cases: Vec<(&ResourceKind, Value, Value)> = vec![
            (
                &kinds::NAMESPACE,
                json!({"metadata": meta, "status": {"phase": "Active"}}),
                json!(["x", "Active", "12m"]),
            ),
            (
                &kinds::SECRET,
                json!({"metadata": meta, "type": "Opaque", "data": {"a": "", "b": ""}}),
                json!(["x", "Opaque", 2, "12m"]),
            ),
            (
                &kinds::CONFIG_MAP,
                json!({"metadata": meta, "data": {"a": ""}, "binaryData": {"b": ""}}),
                json!(["x", 2, "12m"]),
            ),
            (
                &kinds::CONFIG_MAP,
                json!({"metadata": {"name": "y"}}),
                json!(["y", 0, "<unknown>"]),
            ),
        ];
        for (kind, obj, want) in cases {
            let layout = Layout::of(kind).unwrap();
            assert_eq!(Value::from(layout.cells(&obj)), want, "{}", kind.kind);
        }
        let names: Vec<Value> = Layout::of(&kinds::SECRET)
            .unwrap()
            .column_definitions()
            .into_iter()
            .map(|d| d["name"].clone())
            .collect();
        assert_eq!(
            names,
            [json!("Name"), json!("Type"), json!("Data"), json!("Age")]
        );
    }

    #[test]
    fn cell_types() {
        let cases = [
            ("string", json!("x"), json!("x")),
            ("string", json!(3), json!("3")),
            ("string", json!(true), json!("true")),
            ("string", json!(null), json!(null)),
            ("integer", json!(3), json!(3)),
            ("integer", json!(3.0), json!(3)),
            ("integer", json!("3"), json!(null)),
            ("number", json!(3), json!(3.0)),
            ("boolean", json!(false), json!(false)),
            ("boolean", json!("false"), json!(null)),
            ("date", json!("yesterday"), json!("<invalid>")),
            ("date", json!(7), json!(null)),
        ];
        for (t, v, want) in cases {
            assert_eq!(cell(t, &v), want, "{t} {v}");
        }
    }

    #[test]
    fn column_definitions_follow_the_crd() {
        let defs = Layout::of(&kinds::SERVICE).unwrap().column_definitions();
        let names: Vec<&str> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "URL",
                "LatestCreated",
                "LatestReady",
                "Ready",
                "Reason"
            ]
        );
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(
            defs[4]["description"],
            "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=='Ready')].status"
        );
        let rev = Layout::of(&kinds::REVISION).unwrap().column_definitions();
        assert_eq!(rev[5]["name"], "Actual Replicas");
        assert_eq!(rev[5]["type"], "integer");
    }

    #[test]
    fn include_object() {
        let layout = Layout::of(&kinds::SERVICE).unwrap();
        let t = layout.table([&service()], "7", Include::Metadata, "v1");
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        let obj = &t["rows"][0]["object"];
        assert_eq!(obj["kind"], "PartialObjectMetadata");
        assert_eq!(obj["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(obj["metadata"]["name"], "hello");
        assert!(obj.get("spec").is_none());

        let t = layout.table([&service()], "7", Include::Object, "v1");
        assert_eq!(t["rows"][0]["object"], service());
        let t = layout.table([&service()], "7", Include::None, "v1beta1");
        assert_eq!(t["rows"][0]["object"], Value::Null);
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        let t = layout.table([], "", Include::None, "v1");
        assert_eq!(t["rows"], json!([]));
        assert_eq!(t["metadata"], json!({}));

        assert_eq!(Include::parse(None).unwrap(), Include::Metadata);
        assert_eq!(Include::parse(Some("None")).unwrap(), Include::None);
        assert_eq!(Include::parse(Some("Object")).unwrap(), Include::Object);
        assert_eq!(Include::parse(Some("all")).unwrap_err().status.code, 400);
    }

    #[test]
    fn a_kind_without_columns_gets_age() {
        let bare = ResourceKind {
            printer_columns: &[],
            ..kinds::SERVICE
        };
        let layout = Layout::of(&bare).unwrap();
        let defs = layout.column_definitions();
        assert_eq!(defs.len(), 2);
        assert_eq!(defs[1]["name"], "Age");
        assert_eq!(defs[1]["type"], "date");
        let created = (chrono::Utc::now() - chrono::TimeDelta::seconds(605))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let cells = layout.cells(&json!({"metadata": {"name": "a", "creationTimestamp": created}}));
        assert_eq!(cells, [json!("a"), json!("10m")]); // 10m for 600..659 s: not timing-sensitive
    }

    #[test]
    fn every_kind_has_parseable_columns() {
        for kind in kinds::served() {
            let layout = Layout::of(kind).unwrap();
            let named = kind
                .printer_columns
                .iter()
                .any(|c| c.computed == Some(Computed::Name));
            // A kind without columns (ClusterDomainClaim) gets `Age`, as a CRD without
            // additionalPrinterColumns does.
            let age = usize::from(kind.printer_columns.is_empty());
            assert_eq!(
                layout.column_definitions().len(),
                usize::from(!named) + kind.printer_columns.len() + age
            );
        }
    }
}
