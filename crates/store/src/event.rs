//! Watch events as read back from the `events` table.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The three Kubernetes watch event types the store produces (`BOOKMARK` and `ERROR` are the
/// API server's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The wire/database spelling: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    pub(crate) fn from_db(s: &str) -> Option<Self> {
        match s {
            "ADDED" => Some(EventType::Added),
            "MODIFIED" => Some(EventType::Modified),
            "DELETED" => Some(EventType::Deleted),
            _ => None,
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One committed change. `object` is the object as of `resource_version` (for `Deleted`: its
/// last state, with that resourceVersion and `deletionTimestamp` set).
///
/// Serializes as `{"resourceVersion":N,"resource":"..","type":"ADDED","object":{..}}`; the API
/// server builds the Kubernetes watch frame (`{"type":..,"object":..}`) from the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchEvent {
    pub resource_version: u64,
    pub resource: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub object: Value,
}

/// A [`WatchEvent`] whose object is still the stored JSON text: for callers that pass it
/// on as JSON (the API's watch streams) and need not parse it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    pub resource_version: u64,
    pub resource: String,
    pub event_type: EventType,
    /// The object as stored: one JSON object, compact.
    pub object: String,
}
