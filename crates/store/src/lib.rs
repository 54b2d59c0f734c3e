//! `wisp-store`: the durable, versioned object store that is the single source of truth of
//! `wisp serve`.
//!
//! Objects are Kubernetes-style JSON documents (`apiVersion`, `kind`, `metadata`, `spec`,
//! `status`) kept in one SQLite file, addressed by `(resource, namespace, name)`, where
//! `resource` is an opaque string chosen by the caller. The store implements the parts of the
//! Kubernetes API conventions that need the database: server-owned metadata (uid,
//! resourceVersion, generation, timestamps), optimistic concurrency on `resourceVersion`, the
//! `/status` subresource split, no-op updates, cascading deletion through `ownerReferences`,
//! one global resourceVersion counter (like an etcd revision), and an ordered, bounded event
//! log for watches. It knows nothing about Knative kinds; defaulting and validation happen in
//! the API server before objects get here.
//!
//! Start reading at [`Store`] (in `store.rs`: the semantics), then `sqlite.rs` (schema,
//! durability, compaction). Label selectors live in [`selector`]; [`Watch`] (in `watch.rs`)
//! is the one list-then-watch reader of the event log.

pub mod batcher;
mod error;
mod event;
mod object;
pub mod selector;
mod sqlite;
mod store;
mod watch;

pub use batcher::{BatchError, Batcher};
pub use error::{CONFLICT_MODIFIED, StoreError};
pub use event::{EventType, RawEvent, WatchEvent};
pub use object::OBJECT_META_FIELDS;
pub use selector::LabelSelector;
pub use store::{DEFAULT_EVENT_HISTORY, Durability, ListPage, Options, Store, new_uid};
pub use watch::{
    DEFAULT_WATCH_BATCH, FromRaw, ListCause, OnGone, Start, Watch, WatchBatch, WatchSpec,
};

#[cfg(test)]
mod tests;
