//! Kubernetes JSON ↔ k8s-pb messages, one field table per message (`fields.rs`, generated
//! from k8s-pb's structs with the JSON keys of the Go json tags).
//!
//! The JSON forms follow apimachinery's: `metav1.Time` is RFC 3339 to the second
//! (`time.go` MarshalJSON), `MicroTime` to the microsecond (`micro_time.go`), a
//! `resource.Quantity` is its string, an `IntOrString` a number or a string, `[]byte` is
//! base64, `FieldsV1` is the JSON object it holds. Go structs embedded with
//! `json:",inline"` (`ProbeHandler` in `Probe`, `VolumeSource` in `Volume`,
//! `LocalObjectReference` in the key selectors, …) are a field in protobuf and their
//! fields are the parent's in JSON.
//!
//! Nothing is dropped silently: a JSON key with no protobuf field is an error naming its
//! path, and every field of every message is in its table (the macro destructures the
//! struct, so a field left out does not compile).
//!
//! Empty values: Go writes every non-pointer field to protobuf, so a message from a Go
//! client carries `""` for each unset string and an empty `Time` for an unset timestamp,
//! where its JSON would omit them (`omitempty`). Reading protobuf, an empty string field and
//! a zero `Time` are therefore left out of the JSON; numbers and booleans are kept (a `0`
//! or `false` a Go client sent for a non-pointer field reads as it would in JSON).

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{FieldsV1, MicroTime, Time},
    util::intstr::IntOrString,
};
use serde_json::{Map, Value};

/// A JSON value that does not fit its protobuf field, or a protobuf value with no JSON
/// form; `path` says where (`spec.containers[0].ports`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", prefix(&self.path))]
pub struct ConvError {
    /// Innermost segment first (segments are added as the error travels out).
    path: Vec<String>,
    pub message: String,
}

fn prefix(path: &[String]) -> String {
    if path.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for seg in path.iter().rev() {
        if !seg.starts_with('[') && !out.is_empty() {
            out.push('.');
        }
        out.push_str(seg);
    }
    out + ": "
}

impl ConvError {
    pub fn new(message: impl Into<String>) -> Self {
        ConvError {
            path: Vec::new(),
            message: message.into(),
        }
    }

    fn within(mut self, segment: impl Into<String>) -> Self {
        self.path.push(segment.into());
        self
    }

    /// Where the error is, as a field path (empty at the top).
    pub fn path(&self) -> String {
        prefix(&self.path).trim_end_matches(": ").to_string()
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn expected(what: &str, got: &Value) -> ConvError {
    ConvError::new(format!("expected {what}, got {}", type_name(got)))
}

/// A value with one JSON form (a scalar, a special type, or a whole message).
pub trait Leaf: Sized {
    fn to_json(&self) -> Result<Value, ConvError>;
    fn from_json(v: Value) -> Result<Self, ConvError>;
    /// Left out of the JSON when it is an optional field's value (see the module docs).
    fn omit(&self) -> bool {
        false
    }
}

impl Leaf for String {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::String(self.clone()))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        match v {
            Value::String(s) => Ok(s),
            other => Err(expected("a string", &other)),
        }
    }
    fn omit(&self) -> bool {
        self.is_empty()
    }
}

impl Leaf for bool {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::Bool(*self))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        v.as_bool().ok_or_else(|| expected("a boolean", &v))
    }
}

impl Leaf for i64 {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::from(*self))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        v.as_i64().ok_or_else(|| expected("an integer", &v))
    }
}

impl Leaf for i32 {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::from(*self))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        let n = v.as_i64().ok_or_else(|| expected("an integer", &v))?;
        i32::try_from(n).map_err(|_| ConvError::new(format!("{n} does not fit in 32 bits")))
    }
}

impl Leaf for f64 {
    fn to_json(&self) -> Result<Value, ConvError> {
        serde_json::Number::from_f64(*self)
            .map(Value::Number)
            .ok_or_else(|| ConvError::new(format!("{self} has no JSON form")))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        v.as_f64().ok_or_else(|| expected("a number", &v))
    }
}

/// Go's `[]byte`: base64 in JSON.
impl Leaf for Vec<u8> {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(self),
        ))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        let Value::String(s) = v else {
            return Err(expected("a base64 string", &v));
        };
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(|e| ConvError::new(format!("illegal base64 data: {e}")))
    }
}

/// Go's zero `time.Time` in protobuf: an empty message (`Time.Marshal` writes nothing).
fn zero_time(seconds: Option<i64>, nanos: Option<i32>) -> bool {
    seconds.is_none() && nanos.unwrap_or(0) == 0
}

fn format_time(seconds: Option<i64>, nanos: Option<i32>, micros: bool) -> Result<Value, ConvError> {
    if zero_time(seconds, nanos) {
        return Ok(Value::Null);
    }
    let (s, n) = (seconds.unwrap_or(0), nanos.unwrap_or(0));
    let t = u32::try_from(n)
        .ok()
        .and_then(|n| chrono::DateTime::from_timestamp(s, n))
        .ok_or_else(|| ConvError::new(format!("time {s}s {n}ns is out of range")))?;
    // RFC 3339 has four-digit years; Go's `Time.MarshalJSON` refuses others with this text
    // (chrono would write `+123861-…`, which no RFC 3339 parser reads back).
    if !(0..=9999).contains(&chrono::Datelike::year(&t)) {
        return Err(ConvError::new(
            "Time.MarshalJSON: year outside of range [0,9999]".to_string(),
        ));
    }
    let format = if micros {
        chrono::SecondsFormat::Micros
    } else {
        chrono::SecondsFormat::Secs
    };
    Ok(Value::String(t.to_rfc3339_opts(format, true)))
}

fn parse_time(v: Value) -> Result<(i64, i32), ConvError> {
    let Value::String(s) = v else {
        return Err(expected("an RFC 3339 time", &v));
    };
    let t = chrono::DateTime::parse_from_rfc3339(&s)
        .map_err(|e| ConvError::new(format!("parsing time {s:?}: {e}")))?;
    // Below a second, always within i32.
    Ok((t.timestamp(), t.timestamp_subsec_nanos() as i32))
}

impl Leaf for Time {
    fn to_json(&self) -> Result<Value, ConvError> {
        format_time(self.seconds, self.nanos, false)
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        let (s, n) = parse_time(v)?;
        Ok(Time {
            seconds: Some(s),
            nanos: Some(n),
        })
    }
    fn omit(&self) -> bool {
        zero_time(self.seconds, self.nanos)
    }
}

impl Leaf for MicroTime {
    fn to_json(&self) -> Result<Value, ConvError> {
        format_time(self.seconds, self.nanos, true)
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        let (s, n) = parse_time(v)?;
        Ok(MicroTime {
            seconds: Some(s),
            nanos: Some(n),
        })
    }
    fn omit(&self) -> bool {
        zero_time(self.seconds, self.nanos)
    }
}

/// A quantity is its string; JSON may also spell it as a number (`Quantity.UnmarshalJSON`).
impl Leaf for Quantity {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(Value::String(self.string.clone().unwrap_or_default()))
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        let string = match v {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            other => return Err(expected("a quantity", &other)),
        };
        Ok(Quantity {
            string: Some(string),
        })
    }
}

/// `intstr.IntOrString`: `type` 0 is an int, 1 a string (`intstr.go`).
impl Leaf for IntOrString {
    fn to_json(&self) -> Result<Value, ConvError> {
        Ok(match self.r#type {
            Some(1) => Value::String(self.str_val.clone().unwrap_or_default()),
            _ => Value::from(self.int_val.unwrap_or(0)),
        })
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        match v {
            Value::String(s) => Ok(IntOrString {
                r#type: Some(1),
                int_val: None,
                str_val: Some(s),
            }),
            Value::Number(_) => Ok(IntOrString {
                r#type: Some(0),
                int_val: Some(i32::from_json(v)?),
                str_val: None,
            }),
            other => Err(expected("an integer or a string", &other)),
        }
    }
}

/// `FieldsV1` holds its JSON object as bytes.
impl Leaf for FieldsV1 {
    fn to_json(&self) -> Result<Value, ConvError> {
        let raw = self.raw.as_deref().unwrap_or(b"{}");
        match serde_json::from_slice(raw) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(other) => Err(expected("a fieldsV1 object", &other)),
            Err(e) => Err(ConvError::new(format!("fieldsV1 is not JSON: {e}"))),
        }
    }
    fn from_json(v: Value) -> Result<Self, ConvError> {
        if !v.is_object() {
            return Err(expected("an object", &v));
        }
        Ok(FieldsV1 {
            raw: Some(v.to_string().into_bytes()),
        })
    }
}

/// A protobuf message with a JSON object form (implemented by [`message!`]).
pub trait Message: Sized + Default + PartialEq {
    /// Writes the fields into `out` (an inline child writes into its parent's object).
    fn put_fields(&self, out: &mut Map<String, Value>) -> Result<(), ConvError>;
    /// Takes the fields it knows out of `map`; what is left belongs to no field.
    fn take_fields(map: &mut Map<String, Value>) -> Result<Self, ConvError>;
}

pub fn message_to_json<M: Message>(m: &M) -> Result<Value, ConvError> {
    let mut out = Map::new();
    m.put_fields(&mut out)?;
    Ok(Value::Object(out))
}

pub fn message_from_json<M: Message>(v: Value) -> Result<M, ConvError> {
    let Value::Object(mut map) = v else {
        return Err(expected("an object", &v));
    };
    let m = M::take_fields(&mut map)?;
    match map.keys().next() {
        None => Ok(m),
        Some(k) => Err(ConvError::new("unknown field").within(k.clone())),
    }
}

/// An inline (embedded) message: present when any of its fields is.
pub fn take_inline<M: Message>(map: &mut Map<String, Value>) -> Result<Option<M>, ConvError> {
    let m = M::take_fields(map)?;
    Ok((m != M::default()).then_some(m))
}

/// A message field: optional, repeated or a map, of [`Leaf`] values.
pub trait Field: Sized {
    fn put(&self, key: &str, out: &mut Map<String, Value>) -> Result<(), ConvError>;
    fn take(map: &mut Map<String, Value>, key: &str) -> Result<Self, ConvError>;
}

impl<T: Leaf> Field for Option<T> {
    fn put(&self, key: &str, out: &mut Map<String, Value>) -> Result<(), ConvError> {
        if let Some(v) = self
            && !v.omit()
        {
            let j = v.to_json().map_err(|e| e.within(key))?;
            if !j.is_null() {
                out.insert(key.to_string(), j);
            }
        }
        Ok(())
    }
    fn take(map: &mut Map<String, Value>, key: &str) -> Result<Self, ConvError> {
        match map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => T::from_json(v).map(Some).map_err(|e| e.within(key)),
        }
    }
}

impl<T: Leaf> Field for Vec<T> {
    fn put(&self, key: &str, out: &mut Map<String, Value>) -> Result<(), ConvError> {
        if self.is_empty() {
            return Ok(());
        }
        let items = self
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.to_json()
                    .map_err(|e| e.within(format!("[{i}]")).within(key))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(key.to_string(), Value::Array(items));
        Ok(())
    }
    fn take(map: &mut Map<String, Value>, key: &str) -> Result<Self, ConvError> {
        match map.remove(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| T::from_json(v).map_err(|e| e.within(format!("[{i}]")).within(key)))
                .collect(),
            Some(other) => Err(expected("a list", &other).within(key)),
        }
    }
}

impl<T: Leaf> Field for BTreeMap<String, T> {
    fn put(&self, key: &str, out: &mut Map<String, Value>) -> Result<(), ConvError> {
        if self.is_empty() {
            return Ok(());
        }
        let mut obj = Map::new();
        for (k, v) in self {
            let j = v.to_json().map_err(|e| e.within(k.clone()).within(key))?;
            obj.insert(k.clone(), j);
        }
        out.insert(key.to_string(), Value::Object(obj));
        Ok(())
    }
    fn take(map: &mut Map<String, Value>, key: &str) -> Result<Self, ConvError> {
        match map.remove(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(obj)) => obj
                .into_iter()
                .map(|(k, v)| {
                    let parsed = T::from_json(v).map_err(|e| e.within(k.clone()).within(key))?;
                    Ok((k, parsed))
                })
                .collect(),
            Some(other) => Err(expected("an object", &other).within(key)),
        }
    }
}

/// `message!(module::Type { rust_field => "jsonKey" | inline, … })`: the JSON form of a
/// k8s-pb message. Every field must be listed.
macro_rules! message {
    ($m:ident :: $t:ident { $($f:ident => $how:tt),* $(,)? }) => {
        impl $crate::protobuf::convert::Message for $m::$t {
            fn put_fields(
                &self,
                out: &mut serde_json::Map<String, serde_json::Value>,
            ) -> Result<(), $crate::protobuf::convert::ConvError> {
                let $m::$t { $($f),* } = self;
                $( message!(@put $how, $f, out); )*
                Ok(())
            }
            fn take_fields(
                map: &mut serde_json::Map<String, serde_json::Value>,
            ) -> Result<Self, $crate::protobuf::convert::ConvError> {
                Ok($m::$t { $($f: message!(@take $how, map)),* })
            }
        }
        impl $crate::protobuf::convert::Leaf for $m::$t {
            fn to_json(&self) -> Result<serde_json::Value, $crate::protobuf::convert::ConvError> {
                $crate::protobuf::convert::message_to_json(self)
            }
            fn from_json(
                v: serde_json::Value,
            ) -> Result<Self, $crate::protobuf::convert::ConvError> {
                $crate::protobuf::convert::message_from_json(v)
            }
        }
    };
    (@put inline, $f:ident, $out:ident) => {
        if let Some(inner) = $f {
            $crate::protobuf::convert::Message::put_fields(inner, $out)?;
        }
    };
    (@put $key:literal, $f:ident, $out:ident) => {
        $crate::protobuf::convert::Field::put($f, $key, $out)?;
    };
    (@take inline, $map:ident) => {
        $crate::protobuf::convert::take_inline($map)?
    };
    (@take $key:literal, $map:ident) => {
        $crate::protobuf::convert::Field::take($map, $key)?
    };
}
pub(crate) use message;

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn times_outside_four_digit_years_are_refused_as_go_refuses_them() {
        // (seconds, nanos, what JSON gets)
        type Case = (Option<i64>, Option<i32>, Result<&'static str, &'static str>);
        let cases: [Case; 5] = [
            (None, None, Ok("null")),
            (Some(0), Some(0), Ok("\"1970-01-01T00:00:00Z\"")),
            (Some(253_402_300_799), None, Ok("\"9999-12-31T23:59:59Z\"")),
            (
                Some(253_402_300_800),
                None,
                Err("Time.MarshalJSON: year outside of range [0,9999]"),
            ),
            (
                Some(-62_167_219_201),
                None,
                Err("Time.MarshalJSON: year outside of range [0,9999]"),
            ),
        ];
        for (s, n, want) in cases {
            let got = format_time(s, n, false)
                .map(|v| v.to_string())
                .map_err(|e| e.message);
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                want,
                "{s:?}s {n:?}ns"
            );
        }
    }
}
