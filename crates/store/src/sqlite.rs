//! The SQLite layer: connection setup, schema, and the write transaction every mutation runs in.
//!
//! Schema (version 1):
//!
//! * `objects(resource, namespace, name, uid, resource_version, object)`: the current state,
//!   one row per object, full JSON in `object`.
//! * `owners(owner_uid, child_ns, child_resource, child_name)`: one row per
//!   `metadata.ownerReferences[].uid`, so cascading deletion is an index lookup per deleted
//!   object instead of a scan of every object's JSON.
//! * `events(resource_version, resource, namespace, name, type, object)`: the append-only watch
//!   log, bounded by compaction.
//! * `meta(key, value)`: `revision` (the global counter), `compacted` (highest resourceVersion
//!   removed from `events`), `schema_version`.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde_json::Value;

use crate::{EventType, StoreError, WatchEvent};

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS objects (
    resource         TEXT NOT NULL,
    namespace        TEXT NOT NULL,
    name             TEXT NOT NULL,
    uid              TEXT NOT NULL,
    resource_version INTEGER NOT NULL,
    object           TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name)
);
CREATE TABLE IF NOT EXISTS owners (
    owner_uid      TEXT NOT NULL,
    child_ns       TEXT NOT NULL,
    child_resource TEXT NOT NULL,
    child_name     TEXT NOT NULL,
    PRIMARY KEY (owner_uid, child_ns, child_resource, child_name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS owners_by_child ON owners (child_resource, child_ns, child_name);
CREATE INDEX IF NOT EXISTS objects_by_uid ON objects (uid);
CREATE TABLE IF NOT EXISTS events (
    resource_version INTEGER PRIMARY KEY,
    resource         TEXT NOT NULL,
    namespace        TEXT NOT NULL,
    name             TEXT NOT NULL,
    type             TEXT NOT NULL,
    object           TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('compacted', 0);
";

/// Pragmas and schema for a freshly opened connection.
pub(crate) fn init(conn: &mut Connection, busy_timeout: Duration) -> Result<(), StoreError> {
    // WAL: readers never block the writer and a commit is one sequential append plus fsync.
    // (In-memory databases answer "memory"; that is fine.)
    let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    // synchronous=FULL: every acknowledged write must survive kill -9 *and* power loss. In WAL
    // mode NORMAL only survives a process crash; a power cut could lose the last commits that
    // the API already answered 200/201 for, and controllers would then act on objects that no
    // longer exist. FULL fsyncs the WAL on every commit, which costs ~0.4 ms here: cheap next to
    // an HTTP round trip, and the store is not on any request hot path.
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Another process (e.g. a second `wisp serve` by mistake, or the sqlite3 shell) holding the
    // lock should make us wait a little, not fail at once.
    conn.busy_timeout(busy_timeout)?;

    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    let version: Option<i64> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    match version {
        None => {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION],
            )?;
        }
        Some(v) if v == SCHEMA_VERSION => {}
        Some(v) => {
            return Err(StoreError::Corrupt(format!(
                "store schema version {v} is not supported by this binary (expects {SCHEMA_VERSION})"
            )));
        }
    }
    tx.commit()?;
    Ok(())
}

/// resourceVersions are `u64` in the API but SQLite integers are `i64`; 2^63 writes will not
/// happen, so saturating is only a formality.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn meta_value(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    let v: i64 = conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))?;
    Ok(uint(v))
}

/// The committed global counter.
pub(crate) fn revision(conn: &Connection) -> Result<u64, StoreError> {
    meta_value(conn, "revision")
}

/// Highest resourceVersion removed from `events`.
pub(crate) fn compacted(conn: &Connection) -> Result<u64, StoreError> {
    meta_value(conn, "compacted")
}

fn parse_json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored object: {e}")))
}

pub(crate) fn get(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = conn
        .prepare_cached(
            "SELECT object FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        )?
        .query_row(params![resource, namespace, name], |r| r.get(0))
        .optional()?;
    text.as_deref().map(parse_json).transpose()
}

/// Objects of one resource, sorted by (namespace, name), optionally in one namespace.
pub(crate) fn list(
    conn: &Connection,
    resource: &str,
    namespace: Option<&str>,
) -> Result<Vec<Value>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT object FROM objects WHERE resource = ?1 AND (?2 IS NULL OR namespace = ?2)
         ORDER BY namespace, name",
    )?;
    let rows = stmt.query_map(params![resource, namespace], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for text in rows {
        out.push(parse_json(&text?)?);
    }
    Ok(out)
}

pub(crate) fn events_since(
    conn: &Connection,
    from: u64,
    resource: Option<&str>,
    namespace: Option<&str>,
    limit: usize,
) -> Result<Vec<WatchEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT resource_version, resource, type, object FROM events
         WHERE resource_version > ?1 AND (?2 IS NULL OR resource = ?2)
           AND (?3 IS NULL OR namespace = ?3)
         ORDER BY resource_version LIMIT ?4",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![int(from), resource, namespace, limit], |r| {
        Ok((
            uint(r.get::<_, i64>(0)?),
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (resource_version, resource, ty, object) = row?;
        let event_type = EventType::from_db(&ty)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown event type {ty:?}")))?;
        out.push(WatchEvent {
            resource_version,
            resource,
            event_type,
            object: parse_json(&object)?,
        });
    }
    Ok(out)
}

/// One write transaction. Every mutation goes through here so that the object rows, the owner
/// index, the event log and the counter change together or not at all: dropping a `WriteTx`
/// without [`commit`](Self::commit) (e.g. on `?`) rolls everything back.
pub(crate) struct WriteTx<'c> {
    tx: Transaction<'c>,
    /// Counter value at the start; `rev > start` means something was written.
    start: u64,
    rev: u64,
    /// Number of events to keep.
    history: u64,
}

impl<'c> WriteTx<'c> {
    /// IMMEDIATE takes the write lock up front, so the counter we read cannot be stale by the
    /// time we write it back (matters only if another process shares the file).
    pub(crate) fn begin(conn: &'c mut Connection, history: usize) -> Result<Self, StoreError> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rev = revision(&tx)?;
        Ok(WriteTx {
            tx,
            start: rev,
            rev,
            history: history.max(1) as u64,
        })
    }

    /// Takes the next global resourceVersion.
    pub(crate) fn next_rev(&mut self) -> u64 {
        self.rev += 1;
        self.rev
    }

    pub(crate) fn get(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, StoreError> {
        get(&self.tx, resource, namespace, name)
    }

    pub(crate) fn exists(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, StoreError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT 1 FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            )?
            .exists(params![resource, namespace, name])?)
    }

    /// Whether any object has this uid.
    pub(crate) fn uid_exists(&self, uid: &str) -> Result<bool, StoreError> {
        Ok(self
            .tx
            .prepare_cached("SELECT 1 FROM objects WHERE uid = ?1")?
            .exists(params![uid])?)
    }

    /// Inserts or replaces an object row at resourceVersion `rv`, and its owner index rows
    /// when `owners` is given (`None` = ownerReferences unchanged).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        uid: &str,
        rv: u64,
        obj: &Value,
        owners: Option<&[String]>,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO objects
                 (resource, namespace, name, uid, resource_version, object)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                resource,
                namespace,
                name,
                uid,
                int(rv),
                obj.to_string()
            ])?;
        if let Some(owners) = owners {
            self.clear_owners(resource, namespace, name)?;
            let mut stmt = self.tx.prepare_cached(
                "INSERT OR IGNORE INTO owners (owner_uid, child_ns, child_resource, child_name)
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for owner in owners {
                stmt.execute(params![owner, namespace, resource, name])?;
            }
        }
        Ok(())
    }

    fn clear_owners(&self, resource: &str, namespace: &str, name: &str) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "DELETE FROM owners WHERE child_resource = ?1 AND child_ns = ?2 AND child_name = ?3",
            )?
            .execute(params![resource, namespace, name])?;
        Ok(())
    }

    pub(crate) fn remove(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "DELETE FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            )?
            .execute(params![resource, namespace, name])?;
        self.clear_owners(resource, namespace, name)
    }

    /// Objects in `namespace` that name `owner_uid` in their ownerReferences, as
    /// (resource, name), sorted so cascades are deterministic.
    pub(crate) fn dependents(
        &self,
        owner_uid: &str,
        namespace: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT child_resource, child_name FROM owners
             WHERE owner_uid = ?1 AND child_ns = ?2 ORDER BY child_resource, child_name",
        )?;
        let rows = stmt.query_map(params![owner_uid, namespace], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub(crate) fn record_event(
        &self,
        rv: u64,
        resource: &str,
        namespace: &str,
        name: &str,
        event_type: EventType,
        obj: &Value,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT INTO events (resource_version, resource, namespace, name, type, object)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                int(rv),
                resource,
                namespace,
                name,
                event_type.as_str(),
                obj.to_string()
            ])?;
        Ok(())
    }

    /// Persists the counter, compacts the event log and commits. Returns the new revision, or
    /// `None` when nothing was written (no-op update): then the transaction is rolled back
    /// and nothing touches the disk.
    ///
    /// Compaction runs inside the same transaction so that `events` always holds exactly the
    /// resourceVersions in `(compacted, revision]`; `events_since` relies on that to decide
    /// between "here are the events" and `Gone`.
    pub(crate) fn commit(self) -> Result<Option<u64>, StoreError> {
        if self.rev == self.start {
            return Ok(None);
        }
        self.tx
            .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'revision'")?
            .execute([int(self.rev)])?;
        let keep_after = self.rev.saturating_sub(self.history);
        if keep_after > compacted(&self.tx)? {
            self.tx
                .prepare_cached("DELETE FROM events WHERE resource_version <= ?1")?
                .execute([int(keep_after)])?;
            self.tx
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'compacted'")?
                .execute([int(keep_after)])?;
        }
        self.tx.commit()?;
        Ok(Some(self.rev))
    }
}
