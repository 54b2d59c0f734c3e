//! Small helpers over Kubernetes-style JSON objects: reading and writing `metadata` fields
//! without a typed model, because the store is kind-agnostic.

use rand::Rng;
use serde_json::{Map, Value};

use crate::StoreError;

/// Kubernetes' `utilrand.String` alphabet: no vowels (no accidental words) and no look-alikes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of the random suffix appended to `generateName`.
const GENERATED_SUFFIX_LEN: usize = 5;
/// Kubernetes truncates the `generateName` prefix so that prefix + suffix fits in 63 characters.
const MAX_GENERATE_NAME_PREFIX: usize = 63 - GENERATED_SUFFIX_LEN;

/// `metav1.ObjectMeta`'s JSON fields: one list, on the API types.
pub use wisp_api::meta::OBJECT_META_FIELDS;

pub(crate) fn metadata(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// A string field of `metadata`; `None` when absent, null or not a string.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    metadata(obj)?.get(field)?.as_str()
}

/// `metadata` as a mutable map, checking the object's shape on the way.
pub(crate) fn metadata_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| StoreError::Invalid("object must be a JSON object".into()))?;
    map.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| StoreError::Invalid("metadata: must be an object".into()))
}

/// The object's namespace, which the caller must have set (`""` for cluster-scoped kinds).
pub(crate) fn require_namespace(obj: &Value) -> Result<String, StoreError> {
    match metadata(obj).and_then(|m| m.get("namespace")) {
        Some(Value::String(ns)) => Ok(ns.clone()),
        // Cluster-scoped objects (Namespaces) carry no namespace, as in kube.
        None => Ok(String::new()),
        _ => Err(StoreError::Invalid(
            "metadata.namespace: Required value".into(),
        )),
    }
}

/// The object's name, required for everything except create-with-generateName.
pub(crate) fn require_name(obj: &Value) -> Result<String, StoreError> {
    match meta_str(obj, "name") {
        Some(n) if !n.is_empty() => Ok(n.to_owned()),
        _ => Err(StoreError::Invalid(
            "metadata.name: Required value: name is required".into(),
        )),
    }
}

/// The client's `metadata.resourceVersion` precondition, `None` when empty or absent
/// (an unconditional write).
pub(crate) fn client_resource_version(obj: &Value) -> Result<Option<String>, StoreError> {
    match metadata(obj).and_then(|m| m.get("resourceVersion")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(StoreError::Invalid(
            "metadata.resourceVersion: Invalid value: must be a string".into(),
        )),
    }
}

/// Every `metadata.ownerReferences[].uid`, de-duplicated.
pub(crate) fn owner_uids(obj: &Value) -> Vec<String> {
    let mut uids: Vec<String> = metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid")?.as_str())
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    uids.sort();
    uids.dedup();
    uids
}

/// The string-valued entries of `metadata.labels`: what label selectors see (a non-string
/// value, which valid objects never have, counts as absent).
pub(crate) fn string_labels(obj: &Value) -> impl Iterator<Item = (&str, &str)> {
    metadata(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

/// The string-valued entries of `metadata.annotations`.
pub(crate) fn string_annotations(obj: &Value) -> impl Iterator<Item = (&str, &str)> {
    metadata(obj)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

/// `generateName` + 5 random characters, the way Kubernetes' `SimpleNameGenerator` does it.
pub(crate) fn generate_name(prefix: &str) -> String {
    let prefix: String = prefix.chars().take(MAX_GENERATE_NAME_PREFIX).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..GENERATED_SUFFIX_LEN)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    prefix + &suffix
}

/// Makes `dst.metadata[key]` equal `src.metadata[key]`, including absence.
pub(crate) fn copy_meta_field(dst: &mut Map<String, Value>, src: &Value, key: &str) {
    match metadata(src).and_then(|m| m.get(key)) {
        Some(v) => {
            dst.insert(key.to_owned(), v.clone());
        }
        None => {
            dst.shift_remove(key);
        }
    }
}

/// Makes `dst[key]` equal `src[key]` at the top level (used for `spec`/`status`).
pub(crate) fn copy_top_field(dst: &mut Value, src: &Value, key: &str) {
    let Some(dst) = dst.as_object_mut() else {
        return;
    };
    match src.get(key) {
        Some(v) => {
            dst.insert(key.to_owned(), v.clone());
        }
        None => {
            dst.shift_remove(key);
        }
    }
}

/// Reorders `metadata` keys into `ObjectMeta` order; unknown keys keep their relative order
/// after the known ones. Purely cosmetic (JSON maps compare order-insensitively).
pub(crate) fn canonicalize_metadata(meta: &mut Map<String, Value>) {
    let mut rest = std::mem::take(meta);
    for key in OBJECT_META_FIELDS {
        if let Some(v) = rest.shift_remove(*key) {
            meta.insert((*key).to_owned(), v);
        }
    }
    meta.extend(rest);
}

/// The stored object's `metadata.generation` (1 if somehow missing).
pub(crate) fn generation(obj: &Value) -> i64 {
    metadata(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1)
}
