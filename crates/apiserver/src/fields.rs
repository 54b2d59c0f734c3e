//! `fieldValidation`: the unknown and duplicate fields of a written body, found and
//! reported as kube-apiserver reports them (`strict decoding error: unknown field
//! "spec.foo"`, from `k8s.io/apimachinery/pkg/runtime/serializer/json` and the CRD
//! handler's pruning in `apiextensions-apiserver/pkg/registry/customresource`).
//!
//! Knative's kinds are pruned by their CRD schema (`wisp_api::prune`, called from
//! `handlers::check_fields`): what is pruned is unknown. For the core kinds a field is
//! unknown when the kind's typed decode does not keep it — the body is compared with the
//! typed object serialized back — plus `metadata` keys that are not `ObjectMeta` fields
//! (wisp's `ObjectMeta` keeps every key it does not model, so the comparison alone would
//! not see them).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::{error::ApiError, params::FieldValidation};

/// `metav1.ObjectMeta`'s JSON fields: one list, the store's.
use wisp_store::OBJECT_META_FIELDS as OBJECT_META;

/// The paths of `input` that `kept` (the typed object serialized back) lost. A key whose
/// value is empty (`null`, `""`, `0`, `false`, `{}`, `[]`) is not reported: the typed
/// object omits empty fields it knows, so their absence proves nothing.
pub fn unknown_fields(input: &Value, kept: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(input, Some(kept), "", &mut out);
    if let Some(meta) = input.get("metadata").and_then(Value::as_object) {
        for (k, v) in meta {
            if !OBJECT_META.contains(&k.as_str()) && !is_empty(v) {
                out.push(format!("metadata.{k}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn walk(input: &Value, kept: Option<&Value>, path: &str, out: &mut Vec<String>) {
    match (input, kept) {
        (Value::Object(m), Some(Value::Object(k))) => {
            for (key, v) in m {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(kv) => walk(v, Some(kv), &p, out),
                    None if is_empty(v) => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(a), Some(Value::Array(k))) if a.len() == k.len() => {
            for (i, (v, kv)) in a.iter().zip(k).enumerate() {
                walk(v, Some(kv), &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The keys a JSON text repeats within one object, as paths (`metadata.name`). Only JSON
/// bodies are checked: YAML bodies with a repeated key are refused by the YAML decoder.
pub fn duplicate_fields(json: &[u8]) -> Vec<String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut out = Vec::new();
    // A body that does not parse is refused by the real decode later.
    let _ = Dups {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de);
    out
}

struct Dups<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Dups<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Dups<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let seed = Dups {
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Dups {
                path,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }
}

/// What a write does with the problems found: `Ok(warnings)`, or kube's 400 under Strict.
pub fn enforce(
    validation: FieldValidation,
    unknown: &[String],
    duplicates: &[String],
) -> Result<Vec<String>, ApiError> {
    let problems: Vec<String> = duplicates
        .iter()
        .map(|p| format!("duplicate field {p:?}"))
        .chain(unknown.iter().map(|p| format!("unknown field {p:?}")))
        .collect();
    match validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(problems),
        FieldValidation::Strict if problems.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            problems.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_what_the_typed_object_lost() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1}), vec![]),
            (json!({"a": 1, "foo": "x"}), json!({"a": 1}), vec!["foo"]),
            (
                json!({"spec": {"foo": {"x": 1}, "template": {}}}),
                json!({"spec": {}}),
                vec!["spec.foo"],
            ),
            // Empty values the typed object omits are not unknown.
            (
                json!({"spec": {"labels": {}, "n": 0}}),
                json!({"spec": {}}),
                vec![],
            ),
            (
                json!({"c": [{"name": "a", "bogus": true}]}),
                json!({"c": [{"name": "a"}]}),
                vec!["c[0].bogus"],
            ),
            (
                json!({"metadata": {"name": "a", "finalizers": ["x"], "nope": "y"}}),
                json!({"metadata": {"name": "a", "finalizers": ["x"], "nope": "y"}}),
                vec!["metadata.nope"],
            ),
        ];
        for (input, kept, want) in cases {
            assert_eq!(unknown_fields(&input, &kept), want, "{input}");
        }
    }

    #[test]
    fn duplicate_fields_are_found_with_their_paths() {
        let cases: [(&str, Vec<&str>); 4] = [
            (r#"{"a":1,"b":2}"#, vec![]),
            (r#"{"a":1,"a":2}"#, vec!["a"]),
            (r#"{"spec":{"x":[{"n":1,"n":2}]}}"#, vec!["spec.x[0].n"]),
            (r#"{"a":{"b":1},"c":{"b":1}}"#, vec![]),
        ];
        for (text, want) in cases {
            assert_eq!(duplicate_fields(text.as_bytes()), want, "{text}");
        }
    }

    #[test]
    fn each_directive_answers_as_kube() {
        let unknown = vec!["spec.foo".to_string()];
        let dups = vec!["metadata.name".to_string()];
        assert!(
            enforce(FieldValidation::Ignore, &unknown, &dups)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            enforce(FieldValidation::Warn, &unknown, &[]).unwrap(),
            vec!["unknown field \"spec.foo\""]
        );
        let e = enforce(FieldValidation::Strict, &unknown, &dups).unwrap_err();
        assert_eq!(e.status.code, 400);
        assert_eq!(
            e.status.message,
            "strict decoding error: duplicate field \"metadata.name\", unknown field \"spec.foo\""
        );
        assert!(
            enforce(FieldValidation::Strict, &[], &[])
                .unwrap()
                .is_empty()
        );
    }
}
