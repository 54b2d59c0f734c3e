//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the core kinds:
//! kubectl 1.32 sends `kubectl create namespace|secret|configmap` that way. The wire form is
//! the `k8s\0` magic, then a `runtime.Unknown` envelope whose `raw` holds the object
//! (`k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go`). The object is turned
//! into the same JSON a JSON body would have been, so everything after decoding is shared.
//! Answers stay JSON, which kubectl accepts. Custom resources (Knative's kinds) have no
//! protobuf form: a protobuf body for one is refused with 415, as kube-apiserver refuses it.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::api::core::v1 as corev1;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every kube protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

fn malformed(why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the protobuf body could not be decoded: {why}"))
}

/// Decodes a protobuf body into the JSON object it stands for.
pub fn decode(bytes: &[u8]) -> Result<Value, ApiError> {
    let envelope = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("it does not start with the \"k8s\\x00\" prefix"))?;
    let unknown = Unknown::decode(envelope).map_err(malformed)?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(malformed("content encodings are not supported"));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => namespace(corev1::Namespace::decode(&raw[..]).map_err(malformed)?),
        ("v1", "Secret") => secret(corev1::Secret::decode(&raw[..]).map_err(malformed)?),
        ("v1", "ConfigMap") => config_map(corev1::ConfigMap::decode(&raw[..]).map_err(malformed)?),
        // kube-apiserver has no protobuf form for custom resources (or anything wisp does
        // not serve): the media type is what is unsupported.
        _ => return Err(ApiError::unsupported_media_type(MEDIA_TYPE)),
    }?;
    obj.insert("apiVersion".into(), api_version.into());
    obj.insert("kind".into(), kind.into());
    Ok(Value::Object(obj))
}

fn namespace(ns: corev1::Namespace) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    out.insert(
        "metadata".into(),
        metadata(ns.metadata.unwrap_or_default())?,
    );
    if let Some(spec) = ns.spec
        && !spec.finalizers.is_empty()
    {
        out.insert("spec".into(), json!({"finalizers": spec.finalizers}));
    }
    // status is the server's (a create ignores it).
    Ok(out)
}

fn secret(s: corev1::Secret) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    out.insert("metadata".into(), metadata(s.metadata.unwrap_or_default())?);
    if let Some(immutable) = s.immutable {
        out.insert("immutable".into(), immutable.into());
    }
    if !s.data.is_empty() {
        out.insert("data".into(), base64_map(s.data));
    }
    if !s.string_data.is_empty() {
        out.insert("stringData".into(), json!(s.string_data));
    }
    if let Some(t) = s.r#type.filter(|t| !t.is_empty()) {
        out.insert("type".into(), t.into());
    }
    Ok(out)
}

fn config_map(c: corev1::ConfigMap) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    out.insert("metadata".into(), metadata(c.metadata.unwrap_or_default())?);
    if let Some(immutable) = c.immutable {
        out.insert("immutable".into(), immutable.into());
    }
    if !c.data.is_empty() {
        out.insert("data".into(), json!(c.data));
    }
    if !c.binary_data.is_empty() {
        out.insert("binaryData".into(), base64_map(c.binary_data));
    }
    Ok(out)
}

fn base64_map(map: BTreeMap<String, Vec<u8>>) -> Value {
    Value::Object(
        map.into_iter()
            .map(|(k, v)| {
                let text = base64::engine::general_purpose::STANDARD.encode(v);
                (k, Value::String(text))
            })
            .collect(),
    )
}

/// The client-settable part of `ObjectMeta`. Server-owned fields (timestamps, generation,
/// selfLink, managedFields) are left out: the server sets or clears them on every write.
fn metadata(m: metav1::ObjectMeta) -> Result<Value, ApiError> {
    let mut out = Map::new();
    let mut put = |key: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            out.insert(key.into(), v.into());
        }
    };
    put("name", m.name);
    put("generateName", m.generate_name);
    put("namespace", m.namespace);
    put("uid", m.uid);
    put("resourceVersion", m.resource_version);
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .into_iter()
            .map(|r| {
                let mut o = json!({
                    "apiVersion": r.api_version.unwrap_or_default(),
                    "kind": r.kind.unwrap_or_default(),
                    "name": r.name.unwrap_or_default(),
                    "uid": r.uid.unwrap_or_default(),
                });
                if let Some(c) = r.controller {
                    o["controller"] = c.into();
                }
                if let Some(b) = r.block_owner_deletion {
                    o["blockOwnerDeletion"] = b.into();
                }
                o
            })
            .collect();
        out.insert("ownerReferences".into(), refs.into());
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    fn meta(name: &str) -> Option<metav1::ObjectMeta> {
        Some(metav1::ObjectMeta {
            name: Some(name.into()),
            labels: BTreeMap::from([("a".into(), "b".into())]),
            ..Default::default()
        })
    }

    #[test]
    fn core_kinds_decode_to_their_json() {
        let cm = corev1::ConfigMap {
            metadata: meta("cfg"),
            data: BTreeMap::from([("k".into(), "v".into())]),
            binary_data: BTreeMap::from([("b".into(), vec![0, 1])]),
            immutable: None,
        };
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap(),
            json!({"metadata": {"name": "cfg", "labels": {"a": "b"}}, "data": {"k": "v"},
                   "binaryData": {"b": "AAE="}, "apiVersion": "v1", "kind": "ConfigMap"})
        );
        let s = corev1::Secret {
            metadata: meta("s"),
            data: BTreeMap::from([("k".into(), b"v".to_vec())]),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let got = decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(got["data"], json!({"k": "dg=="}));
        assert_eq!(got["type"], "Opaque");
        let ns = corev1::Namespace {
            metadata: meta("demo"),
            ..Default::default()
        };
        let got = decode(&envelope("v1", "Namespace", ns.encode_to_vec())).unwrap();
        assert_eq!(got["metadata"]["name"], "demo");
        assert_eq!(got["kind"], "Namespace");
    }

    #[test]
    fn bad_bodies_are_refused_clearly() {
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (b"{}".to_vec(), 400, "does not start with"),
            (b"k8s\0\xff\xff\xff".to_vec(), 400, "could not be decoded"),
            (
                envelope("v1", "ConfigMap", vec![0xff, 0xff]),
                400,
                "could not be decoded",
            ),
            (
                envelope("serving.knative.dev/v1", "Service", vec![]),
                415,
                "unknown format",
            ),
            (envelope("v1", "Pod", vec![]), 415, "unknown format"),
        ];
        for (body, code, text) in cases {
            let err = decode(&body).unwrap_err();
            assert_eq!(err.status.code, code, "{}", err.status.message);
            assert!(err.status.message.contains(text), "{}", err.status.message);
        }
    }
}
