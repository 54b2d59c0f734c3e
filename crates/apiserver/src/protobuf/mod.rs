//! `application/vnd.kubernetes.protobuf` for the built-in kinds (Namespace, Secret,
//! ConfigMap, Pod, Service, Event, Deployment, their lists, and meta/v1 `Status` and
//! `DeleteOptions`), as kube-apiserver speaks it
//! (`k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go`):
//!
//! - an object is the `k8s\0` magic, then a `runtime.Unknown` whose `typeMeta` names the
//!   kind and whose `raw` holds the message;
//! - a watch stream (`;stream=watch`) is a sequence of frames, each a 4-byte big-endian
//!   length and a `metav1.WatchEvent` written by the *raw* serializer (no magic, no
//!   envelope: `codec_factory.go` gives protobuf's StreamSerializer `NewRawSerializer`),
//!   whose `object.raw` is the event's object encoded as above (`handlers/watch.go`
//!   `doEncode`); `streaming/streaming.go` with `LengthDelimitedFramer`.
//!
//! Everything between decoding and encoding stays JSON: a protobuf body is turned into the
//! JSON object a JSON body would have been ([`decode_body`]), and a JSON answer into its
//! message at the edge ([`respond`]). The conversions are [`convert`]'s, over the
//! k8s-pb types. Custom resources (Knative's kinds) have no protobuf form, as in
//! kube-apiserver: a protobuf body for one is a 415, and an `Accept` that lists only
//! protobuf a 406.

pub(crate) mod convert;
mod fields;
pub mod respond;

pub(crate) use k8s_pb::api::{apps::v1 as appsv1, core::v1 as corev1, events::v1 as eventsv1};
pub(crate) use k8s_pb::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message as _;
use serde_json::{Map, Value};

use self::convert::{ConvError, Leaf};
use crate::error::ApiError;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The content type of a protobuf watch (`handlers/watch.go` adds `;stream=watch` to a
/// media type that is not JSON).
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The four bytes every kube protobuf object starts with.
pub const MAGIC: &[u8] = b"k8s\0";

/// One kind with a protobuf form.
pub struct Codec {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// For a list kind, the kind of its items (which carry their apiVersion and kind in
    /// wisp's JSON, and none in protobuf).
    item_kind: Option<&'static str>,
    encode: fn(Value) -> Result<Vec<u8>, ConvError>,
    decode: fn(&[u8]) -> Result<Value, ConvError>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Codec({} {})", self.api_version, self.kind)
    }
}

fn encode_as<M: Leaf + prost::Message>(v: Value) -> Result<Vec<u8>, ConvError> {
    Ok(M::from_json(v)?.encode_to_vec())
}

fn decode_as<M: Leaf + prost::Message + Default>(raw: &[u8]) -> Result<Value, ConvError> {
    let m = M::decode(raw).map_err(|e| ConvError::new(e.to_string()))?;
    m.to_json()
}

macro_rules! codecs {
    ($( ($av:literal, $kind:literal, $ty:ty $(, items $item:literal)?) ),* $(,)?) => {
        &[$(Codec {
            api_version: $av,
            kind: $kind,
            item_kind: codecs!(@item $($item)?),
            encode: encode_as::<$ty>,
            decode: decode_as::<$ty>,
        }),*]
    };
    (@item) => { None };
    (@item $item:literal) => { Some($item) };
}

/// Every kind with a protobuf form: the one list of them (the response negotiation asks
/// it whether a path's group is built in).
pub static CODECS: &[Codec] = codecs![
    ("v1", "Namespace", corev1::Namespace),
    ("v1", "NamespaceList", corev1::NamespaceList, items "Namespace"),
    ("v1", "Secret", corev1::Secret),
    ("v1", "SecretList", corev1::SecretList, items "Secret"),
    ("v1", "ConfigMap", corev1::ConfigMap),
    ("v1", "ConfigMapList", corev1::ConfigMapList, items "ConfigMap"),
    ("v1", "Pod", corev1::Pod),
    ("v1", "PodList", corev1::PodList, items "Pod"),
    ("v1", "Service", corev1::Service),
    ("v1", "ServiceList", corev1::ServiceList, items "Service"),
    ("v1", "Event", corev1::Event),
    ("v1", "EventList", corev1::EventList, items "Event"),
    ("apps/v1", "Deployment", appsv1::Deployment),
    ("apps/v1", "DeploymentList", appsv1::DeploymentList, items "Deployment"),
    ("events.k8s.io/v1", "Event", eventsv1::Event),
    ("events.k8s.io/v1", "EventList", eventsv1::EventList, items "Event"),
    // Errors: kube-apiserver answers them as `v1` Status objects.
    ("v1", "Status", metav1::Status),
    // kube registers DeleteOptions in every group version, and a client sends its own
    // group's: [`decode`] reads any of them as this one.
    ("meta.k8s.io/v1", "DeleteOptions", metav1::DeleteOptions),
];

/// The codec of a kind, if it has a protobuf form.
pub fn codec(api_version: &str, kind: &str) -> Option<&'static Codec> {
    CODECS
        .iter()
        .find(|c| c.api_version == api_version && c.kind == kind)
}

/// Whether the API group (`""` for the core group) is one whose kinds are built in and
/// speak protobuf, as opposed to custom resources.
pub fn builtin_group(group: &str) -> bool {
    CODECS.iter().any(|c| match c.api_version.split_once('/') {
        Some((g, _)) => g == group && g != "meta.k8s.io",
        None => group.is_empty(),
    })
}

/// Wraps raw message bytes in the `k8s\0` + `runtime.Unknown` envelope.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        // Go writes the empty strings (non-pointer fields).
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown
        .encode(&mut out)
        .expect("a Vec grows to hold any message");
    out
}

/// Encodes a JSON object (with its `apiVersion` and `kind`) as a protobuf object.
pub fn encode(mut object: Value) -> Result<Vec<u8>, ConvError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| ConvError::new("the object is not a JSON object"))?;
    let api_version = take_str(map, "apiVersion");
    let kind = take_str(map, "kind");
    let codec = codec(&api_version, &kind).ok_or_else(|| {
        ConvError::new(format!(
            "{kind} in version {api_version:?} has no protobuf form"
        ))
    })?;
    if let Some(item_kind) = codec.item_kind
        && let Some(items) = map.get_mut("items").and_then(Value::as_array_mut)
    {
        for (i, item) in items.iter_mut().enumerate() {
            strip_item_type(item, &api_version, item_kind)
                .map_err(|e| ConvError::new(format!("items[{i}]: {}", e.message)))?;
        }
    }
    let raw = (codec.encode)(object)?;
    Ok(envelope(&api_version, &kind, raw))
}

fn take_str(map: &mut Map<String, Value>, key: &str) -> String {
    match map.remove(key) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A list item's `apiVersion`/`kind` must be the list's item kind; protobuf has no place
/// for them.
fn strip_item_type(item: &mut Value, api_version: &str, kind: &str) -> Result<(), ConvError> {
    let Some(map) = item.as_object_mut() else {
        return Ok(());
    };
    for (key, want) in [("apiVersion", api_version), ("kind", kind)] {
        match map.remove(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == want || s.is_empty() => {}
            Some(other) => {
                return Err(ConvError::new(format!(
                    "{key} {other} is not the list's item {key} {want:?}"
                )));
            }
        }
    }
    Ok(())
}

/// What a protobuf object's bytes decode to: its type and its JSON form.
#[derive(Debug, PartialEq)]
pub struct Decoded {
    pub api_version: String,
    pub kind: String,
    pub object: Value,
}

/// Why protobuf bytes did not decode: the envelope (no type known) or the message.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    Envelope(String),
    /// The type is known; its message did not decode (or has no codec: `None`).
    Message {
        api_version: String,
        kind: String,
        why: Option<String>,
    },
}

/// Reads the `k8s\0` + `runtime.Unknown` envelope: (apiVersion, kind, raw).
fn open(bytes: &[u8]) -> Result<(String, String, Vec<u8>), DecodeError> {
    let body = bytes.strip_prefix(MAGIC).ok_or_else(|| {
        // protobuf.go's errNotMarshalable-style refusal, with Go's %v of the prefix.
        DecodeError::Envelope(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
                .into(),
        )
    })?;
    let unknown = Unknown::decode(body).map_err(|e| DecodeError::Envelope(e.to_string()))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(DecodeError::Message {
            api_version,
            kind,
            why: Some("content encodings are not supported".into()),
        });
    }
    Ok((api_version, kind, unknown.raw.unwrap_or_default()))
}

/// Decodes a protobuf object into its JSON form (with `apiVersion` and `kind`; list items
/// get theirs, as wisp's JSON lists carry them). An empty type in the envelope is
/// `default`'s, as kube decodes with the path's kind as the default.
pub fn decode(bytes: &[u8], default: Option<(&str, &str)>) -> Result<Decoded, DecodeError> {
    let (mut api_version, mut kind, raw) = open(bytes)?;
    if let Some((av, k)) = default {
        if api_version.is_empty() {
            api_version = av.into();
        }
        if kind.is_empty() {
            kind = k.into();
        }
    }
    let found = match kind.as_str() {
        "DeleteOptions" => codec("meta.k8s.io/v1", "DeleteOptions"),
        _ => codec(&api_version, &kind),
    };
    let Some(codec) = found else {
        return Err(DecodeError::Message {
            api_version,
            kind,
            why: None,
        });
    };
    let mut object = match (codec.decode)(&raw) {
        Ok(o) => o,
        Err(e) => {
            return Err(DecodeError::Message {
                api_version,
                kind,
                why: Some(e.to_string()),
            });
        }
    };
    if let Some(map) = object.as_object_mut() {
        if let Some(item_kind) = codec.item_kind {
            // A list's items are never left out (`json:"items"`), even when there are none.
            let items = map
                .entry("items")
                .or_insert_with(|| Value::Array(Vec::new()));
            for item in items
                .as_array_mut()
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                item.insert("apiVersion".into(), api_version.clone().into());
                item.insert("kind".into(), item_kind.into());
            }
        }
        map.insert("apiVersion".into(), api_version.clone().into());
        map.insert("kind".into(), kind.clone().into());
    }
    Ok(Decoded {
        api_version,
        kind,
        object,
    })
}

/// kube's `summarizeData(body, 30)` (handlers/rest.go): what a refusal quotes of the body.
fn summarize(data: &[u8]) -> String {
    const MAX: usize = 30;
    match data.first() {
        None => "<empty>".into(),
        Some(b'{') if data.len() > MAX => format!("{} ...", String::from_utf8_lossy(&data[..MAX])),
        Some(b'{') => String::from_utf8_lossy(data).into_owned(),
        Some(_) if data.len() > MAX => format!("{} ...", hex::encode(&data[..MAX])),
        Some(_) => hex::encode(data),
    }
}

/// The Go package kube converts a group's objects into (`pkg/apis/<group>`), as its
/// conversion errors name them.
fn internal_package(api_version: &str) -> &str {
    match api_version.split_once('/') {
        None => "core",
        Some(("events.k8s.io", _)) => "core",
        Some((group, _)) => group.split('.').next().unwrap_or(group),
    }
}

/// What a path that serves `want` (apiVersion, kind) accepts as a protobuf request body.
#[derive(Debug, Clone, Copy)]
pub enum Expect<'a> {
    /// An object of this kind (create, update).
    Object { api_version: &'a str, kind: &'a str },
    /// `DeleteOptions` of any group version.
    DeleteOptions,
}

/// Decodes a protobuf request body into the JSON object a JSON body would have been; a body
/// that is not protobuf, is cut short, or holds another kind is refused as kube-apiserver
/// refuses it (`transformDecodeError` in handlers/rest.go: 400 BadRequest).
pub fn decode_body(bytes: &[u8], expect: Expect<'_>) -> Result<Value, ApiError> {
    let (want_av, want_kind) = match expect {
        Expect::Object { api_version, kind } => (api_version, kind),
        Expect::DeleteOptions => ("meta.k8s.io/v1", "DeleteOptions"),
    };
    let refuse = |e: DecodeError| match e {
        DecodeError::Envelope(why) => ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {want_kind}): {why} ({})",
            summarize(bytes)
        )),
        DecodeError::Message {
            api_version,
            kind,
            why,
        } => {
            let version = api_version.rsplit('/').next().unwrap_or("");
            let why = why.unwrap_or_else(|| {
                format!(
                    "no kind {kind:?} is registered for version {api_version:?} in scheme \"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30\""
                )
            });
            ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {want_kind}: {why}"
            ))
        }
    };
    let decoded = decode(bytes, Some((want_av, want_kind))).map_err(refuse)?;
    let matches = match expect {
        Expect::Object { .. } => decoded.api_version == want_av && decoded.kind == want_kind,
        Expect::DeleteOptions => decoded.kind == "DeleteOptions",
    };
    if !matches {
        // A kind kube knows, decoded, then not convertible into the path's
        // (runtime/converter.go's error, between the Go types' names).
        let why = format!(
            "converting (v1.{}) to ({}.{want_kind}): unknown conversion",
            decoded.kind,
            internal_package(want_av)
        );
        return Err(refuse(DecodeError::Message {
            api_version: decoded.api_version,
            kind: decoded.kind,
            why: Some(why),
        }));
    }
    Ok(decoded.object)
}

/// One watch event as a protobuf frame: length, then the raw `WatchEvent` whose object is
/// the event's object in its envelope.
pub fn watch_frame(event_type: &str, object: Value) -> Result<Vec<u8>, ConvError> {
    let event = metav1::WatchEvent {
        r#type: Some(event_type.into()),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
            raw: Some(encode(object)?),
        }),
    };
    let len = u32::try_from(event.encoded_len())
        .map_err(|_| ConvError::new("a watch event larger than 4 GiB"))?;
    let mut out = Vec::with_capacity(4 + len as usize);
    out.extend_from_slice(&len.to_be_bytes());
    event
        .encode(&mut out)
        .expect("a Vec grows to hold any message");
    Ok(out)
}

/// Splits a protobuf watch stream into its events (type, object JSON) — the client side of
/// [`watch_frame`], for tests and tools. `Err` names the frame that did not decode.
pub fn read_watch_frames(mut bytes: &[u8]) -> Result<Vec<(String, Value)>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(format!("frame {}: a cut length", out.len()));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return Err(format!("frame {}: cut short", out.len()));
        }
        let (frame, rest) = rest.split_at(len);
        let event = metav1::WatchEvent::decode(frame).map_err(|e| e.to_string())?;
        let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
        let decoded = decode(&raw, None).map_err(|e| format!("frame {}: {e:?}", out.len()))?;
        out.push((event.r#type.unwrap_or_default(), decoded.object));
        bytes = rest;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
