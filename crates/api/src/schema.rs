//! OpenAPI schemas of wisp's own types, derived from the Rust types with `schemars` (doc
//! comments become descriptions), in the shape kube-apiserver publishes a CRD's structural
//! schema (`apiextensions-apiserver/pkg/controller/openapi/builder`): every sub-schema
//! inlined, `x-kubernetes-preserve-unknown-fields` where wisp keeps arbitrary JSON,
//! `x-kubernetes-int-or-string` for IntOrString and Quantity.

use schemars::{JsonSchema, Schema, generate::SchemaSettings};
use serde_json::{Map, Value, json};

/// The schema of `T` as an OpenAPI v3 schema object.
pub fn of<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::openapi3();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut v = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    tidy(&mut v);
    v
}

/// The schema of an IntOrString field (`port`), as kube publishes `intstr.IntOrString` in a
/// structural schema.
pub fn int_or_string(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
    })
}

/// A field wisp keeps as arbitrary JSON (a Kubernetes object it does not model).
pub fn preserved_object(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Rewrites what schemars emits into what a Kubernetes client expects of a structural
/// schema:
/// - a `true` schema (a `serde_json::Value` field) is an object whose content is kept;
/// - the `additionalProperties` a flattened `extra` map brings is dropped: those maps hold
///   fields wisp refuses ("must not set the field(s)") or kube's metadata fields it keeps
///   verbatim, not a map-valued field;
/// - `nullable`, `default`, `title`, `$schema` and schemars' integer formats that OpenAPI
///   does not know (`uint…`) go: Knative's CRD schemas carry none of them.
fn tidy(v: &mut Value) {
    match v {
        Value::Bool(true) => {
            *v = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        }
        Value::Object(m) => {
            for key in ["nullable", "default", "title", "$schema"] {
                m.remove(key);
            }
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f.starts_with("uint"))
            {
                m.remove("format");
            }
            if let Some(Value::String(d)) = m.get_mut("description") {
                *d = unwrap_lines(d);
            }
            if m.contains_key("properties") {
                m.remove("additionalProperties");
            }
            // Only the keywords that hold schemas are schemas: an extension's `true` is a flag.
            for (key, child) in m.iter_mut() {
                match (key.as_str(), child) {
                    ("properties", Value::Object(props)) => props.values_mut().for_each(tidy),
                    ("anyOf" | "allOf" | "oneOf", Value::Array(items)) => {
                        items.iter_mut().for_each(tidy)
                    }
                    ("items" | "additionalProperties" | "not", child) => tidy(child),
                    _ => {}
                }
            }
            drop_empty_required(m);
        }
        _ => {}
    }
}

/// Doc comments wrap at 100 columns; a description is prose, one line per paragraph.
fn unwrap_lines(d: &str) -> String {
    d.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn drop_empty_required(m: &mut Map<String, Value>) {
    if m.get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        m.remove("required");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidy_rules() {
        let cases = [
            (
                "a Value field keeps its content",
                json!(true),
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            ),
            (
                "a flattened extra map is not a map",
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                       "additionalProperties": true}),
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            ),
            (
                "a real map keeps its values' schema",
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
            ),
            (
                "no nullable, default, title or uint format",
                json!({"type": "integer", "format": "uint16", "nullable": true,
                       "default": 0, "title": "X"}),
                json!({"type": "integer"}),
            ),
            (
                "nested properties are tidied",
                json!({"properties": {"x": {"items": true, "type": "array"}}}),
                json!({"properties": {"x": {"items": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}, "type": "array"}}}),
            ),
            (
                "wrapped doc comments are unwrapped, paragraphs kept",
                json!({"description": "one\ntwo\n\nthree"}),
                json!({"description": "one two\n\nthree"}),
            ),
            (
                "a property named like a keyword is a property",
                json!({"properties": {"default": {"type": "string"}}}),
                json!({"properties": {"default": {"type": "string"}}}),
            ),
        ];
        for (what, mut input, want) in cases {
            tidy(&mut input);
            assert_eq!(input, want, "{what}");
        }
    }

    #[test]
    fn service_schema_has_knative_fields_and_descriptions() {
        let s = of::<crate::serving::Service>();
        let spec = &s["properties"]["spec"];
        let pod = &spec["properties"]["template"]["properties"]["spec"];
        let container = &pod["properties"]["containers"]["items"];
        assert_eq!(container["properties"]["image"]["type"], "string");
        assert!(
            container["properties"]["image"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("image")),
            "{container}"
        );
        assert!(pod["properties"]["containerConcurrency"].is_object());
        assert!(spec.get("additionalProperties").is_none());
        let port = &container["properties"]["readinessProbe"]["properties"]["httpGet"]["properties"]
            ["port"];
        assert_eq!(port["x-kubernetes-int-or-string"], true, "{port}");
        let text = s.to_string();
        assert!(!text.contains("\"$ref\""), "everything is inlined");
        assert!(!text.contains("nullable"));
    }
}
