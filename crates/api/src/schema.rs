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

/// `configMapKeyRef` / `secretKeyRef` of an env var (core/v1 `ConfigMapKeySelector`,
/// `SecretKeySelector`), kept as JSON by wisp.
pub fn key_selector(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "description": "Selects a key of a ConfigMap or Secret in the namespace of the revision.",
        "type": "object",
        "required": ["key"],
        "properties": {
            "name": {"description": "Name of the referent (the ConfigMap or Secret).", "type": "string"},
            "key": {"description": "The key to select.", "type": "string"},
            "optional": {"description": "Specify whether the ConfigMap or Secret or its key must be defined. An optional missing one leaves the variable unset.", "type": "boolean"},
        },
        "x-kubernetes-map-type": "atomic",
    })
}

/// One `envFrom` entry (core/v1 `EnvFromSource`), kept as JSON by wisp.
pub fn env_from_sources(_: &mut schemars::SchemaGenerator) -> Schema {
    let reference = |what: &str| {
        serde_json::json!({
            "description": format!("The {what} to select from."),
            "type": "object",
            "properties": {
                "name": {"description": format!("Name of the {what}."), "type": "string"},
                "optional": {"description": format!("Specify whether the {what} must be defined."), "type": "boolean"},
            },
            "x-kubernetes-map-type": "atomic",
        })
    };
    schemars::json_schema!({
        "type": "array",
        "items": {
            "description": "EnvFromSource represents the source of a set of ConfigMaps or Secrets: every key becomes an environment variable.",
            "type": "object",
            "properties": {
                "prefix": {"description": "An optional identifier to prepend to each key in the ConfigMap or Secret.", "type": "string"},
                "configMapRef": reference("ConfigMap"),
                "secretRef": reference("Secret"),
            },
        },
    })
}

/// The volume sources wisp mounts (core/v1 `SecretVolumeSource`, `ConfigMapVolumeSource`,
/// `ProjectedVolumeSource`, `EmptyDirVolumeSource`), for [`crate::serving::Volume`].
pub fn volume_sources() -> Value {
    let items = json!({
        "description": "If unspecified, each key-value pair in the Data field of the referenced object is projected into the volume as a file whose name is the key and content is the value. If specified, the listed keys are projected into the specified paths, and unlisted keys are not present.",
        "type": "array",
        "items": {
            "description": "Maps a string key to a path within a volume.",
            "type": "object",
            "required": ["key", "path"],
            "properties": {
                "key": {"description": "The key to project.", "type": "string"},
                "path": {"description": "The relative path of the file to map the key to. May not be an absolute path or contain '..'.", "type": "string"},
                "mode": {"description": "Optional: mode bits used to set permissions on this file, an octal value between 0000 and 0777 (or the decimal equivalent).", "type": "integer", "format": "int32"},
            },
        },
    });
    let default_mode = json!({"description": "Mode bits used to set permissions on created files by default, an octal value between 0000 and 0777 (or the decimal equivalent). Defaults to 0644.", "type": "integer", "format": "int32"});
    let secret = json!({
        "description": "Secret represents a Secret that should populate this volume.",
        "type": "object",
        "properties": {
            "secretName": {"description": "Name of the Secret in the namespace of the revision to use.", "type": "string"},
            "items": items,
            "defaultMode": default_mode,
            "optional": {"description": "Specify whether the Secret or its keys must be defined.", "type": "boolean"},
        },
    });
    let config_map = json!({
        "description": "ConfigMap represents a ConfigMap that should populate this volume.",
        "type": "object",
        "properties": {
            "name": {"description": "Name of the ConfigMap.", "type": "string"},
            "items": items,
            "defaultMode": default_mode,
            "optional": {"description": "Specify whether the ConfigMap or its keys must be defined.", "type": "boolean"},
        },
        "x-kubernetes-map-type": "atomic",
    });
    let projection = |what: &str| {
        json!({
            "description": format!("Information about the {what} data to project."),
            "type": "object",
            "properties": {
                "name": {"description": format!("Name of the {what}."), "type": "string"},
                "items": items,
                "optional": {"description": format!("Specify whether the {what} or its keys must be defined."), "type": "boolean"},
            },
            "x-kubernetes-map-type": "atomic",
        })
    };
    json!({
        "secret": secret,
        "configMap": config_map,
        "projected": {
            "description": "Projected items for all-in-one resources: Secrets and ConfigMaps.",
            "type": "object",
            "properties": {
                "sources": {
                    "description": "The list of volume projections.",
                    "type": "array",
                    "items": {
                        "description": "Projection that may be projected along with other supported volume types.",
                        "type": "object",
                        "properties": {"secret": projection("Secret"), "configMap": projection("ConfigMap")},
                    },
                },
                "defaultMode": default_mode,
            },
        },
        "emptyDir": {
            "description": "EmptyDir represents a temporary directory that shares a revision replica's lifetime.",
            "type": "object",
            "properties": {
                "medium": {"description": "What type of storage medium should back this directory: \"\" (the default) or Memory.", "type": "string"},
                "sizeLimit": {
                    "description": "Total amount of local storage required for this EmptyDir volume.",
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": true,
                },
            },
        },
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
        let volume = &pod["properties"]["volumes"]["items"]["properties"];
        assert_eq!(
            volume["secret"]["properties"]["secretName"]["type"],
            "string"
        );
        assert!(
            volume["projected"]["properties"]["sources"]["items"]["properties"]["configMap"]
                .is_object()
        );
        let env = &container["properties"]["env"]["items"]["properties"];
        assert_eq!(
            env["valueFrom"]["properties"]["secretKeyRef"]["required"],
            json!(["key"])
        );
        assert!(container["properties"]["envFrom"]["items"]["properties"]["secretRef"].is_object());
        let text = s.to_string();
        assert!(!text.contains("\"$ref\""), "everything is inlined");
        assert!(!text.contains("nullable"));
    }
}
