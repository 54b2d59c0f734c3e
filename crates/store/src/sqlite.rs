//! The SQLite layer: connection setup, schema, and the write transaction every mutation runs in.
//!
//! Schema (version 2):
//!
//! * `objects(resource, namespace, name, uid, resource_version, object)`: the current state,
//!   one row per object, full JSON in `object`.
//! * `labels(resource, namespace, name, key, value)`: one row per string-valued
//!   `metadata.labels` entry of every object, written in the same transaction as the object,
//!   so label selectors are evaluated in SQL (an index lookup) before any JSON is parsed.
//!   Added in version 2; opening a version-1 file backfills it.
//! * `annotation_items(resource, namespace, name, key, item)`: the comma-separated items
//!   (trimmed, empty ones dropped) of every string-valued annotation (or of those
//!   `Options::indexed_annotations` names; `meta` row `annotation_index` records which) of at most
//!   [`MAX_ITEMIZED`] bytes, and one row with item `''` for a longer one, so "which objects
//!   list X in annotation K" is an index lookup. Maintained and backfilled like `labels`.
//! * `owners(owner_uid, child_ns, child_resource, child_name)`: one row per
//!   `metadata.ownerReferences[].uid`, so cascading deletion is an index lookup per deleted
//!   object instead of a scan of every object's JSON.
//! * `events(resource_version, resource, namespace, name, type, object)`: the append-only watch
//!   log, bounded by compaction.
//! * `meta(key, value)`: `revision` (the global counter), `compacted` (highest resourceVersion
//!   removed from `events`), `schema_version`, `annotation_index` (which annotations
//!   `annotation_items` holds: [`annotation_index_signature`]; absent means all).
//!
//! Reads return the stored JSON *text*: the caller parses it after releasing the connection,
//! so one big list does not hold every other reader and writer up while it is decoded.

use std::time::Duration;

use rusqlite::{
    Connection, OptionalExtension, Transaction, TransactionBehavior, config::DbConfig, params,
    params_from_iter,
};
use serde_json::Value;

use crate::object;
use crate::selector::{LabelSelector, Operator, Requirement};
use crate::{EventType, RawEvent, StoreError};

const SCHEMA_VERSION: i64 = 2;

/// Annotations longer than this are not split into `annotation_items` (a long value is
/// rarely a list, e.g. `last-applied-configuration`); they get one `''` row instead, and a
/// lookup checks such objects' JSON.
pub(crate) const MAX_ITEMIZED: usize = 1024;

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
CREATE TABLE IF NOT EXISTS labels (
    resource  TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_value ON labels (resource, key, value, namespace, name);
CREATE TABLE IF NOT EXISTS annotation_items (
    resource  TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    item      TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, key, item)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS annotation_items_by_item
    ON annotation_items (resource, namespace, key, item, name);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('compacted', 0);
";

/// WAL pages past which a commit checkpoints (SQLite's default: 1000, 4 MiB). The WAL
/// file grows to about this much (32 MiB) before it starts over; replaying it at open after
/// a crash reads that much.
const CHECKPOINT_PAGES: i64 = 8000;

/// Pragmas and schema for a freshly opened connection.
pub(crate) fn init(
    conn: &mut Connection,
    busy_timeout: Duration,
    indexed: Indexed,
) -> Result<(), StoreError> {
    // Another process (e.g. a second `wisp serve` by mistake, or the sqlite3 shell) holding the
    // lock should make us wait a little, not fail at once. First, so it covers the pragmas.
    conn.busy_timeout(busy_timeout)?;
    // One process owns the file (`wisp serve` takes its data directory's lock file too), so
    // the file lock is taken once and kept: otherwise every transaction, reads included,
    // takes and drops fcntl locks and locks the shared-memory WAL index, ~6% of wisp's CPU
    // while 100 services reconcile. Set before WAL mode so the WAL index lives in heap
    // memory, not a mapped `-shm` file. The price: no other process (the sqlite3 shell, say)
    // can open the store while wisp runs.
    let _mode: String = conn.query_row("PRAGMA locking_mode=EXCLUSIVE", [], |r| r.get(0))?;
    // WAL: readers never block the writer and a commit is one sequential append plus fsync.
    // (In-memory databases answer "memory"; that is fine.)
    let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    // synchronous=FULL by default: every write acknowledged to a user must survive kill -9
    // *and* power loss. In WAL mode NORMAL only survives a process crash; a power cut could
    // lose the last commits the API already answered 200/201 for. FULL fsyncs the WAL on
    // every commit. Handles with `Durability::Relaxed` (the controllers, whose writes are
    // all re-derivable) switch a transaction to NORMAL; see `Durability`.
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Each write inside a batch is a SAVEPOINT, whose undo pages go to a statement journal;
    // with the default temp_store that journal spills to a temporary file, two pwrite calls
    // per page, ~40% of all the store's write syscalls while 100 services reconcile. It only
    // ever holds what one batch changed, and is worthless after a crash (the transaction is
    // rolled back from the WAL anyway), so memory is the place for it.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // A checkpoint copies the WAL's newest version of each page into the database file and
    // syncs it, inside the commit that crossed the threshold, with the store locked. The
    // same few pages (the event log's tail, the objects' and indexes' hot leaves) are written
    // by every commit, so a longer WAL copies each of them once for many commits.
    conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_PAGES)?;
    // Selector queries are built per selector shape; keep a few more than the default 16.
    conn.set_prepared_statement_cache_capacity(64);
    // Without the query planner stability guarantee SQLite plans some statements around the
    // values bound to them (e.g. `?2 IS NULL OR resource = ?2`) and marks such a cached
    // statement expired whenever a parameter is rebound, so every call re-parsed and
    // re-planned it: a tenth of wisp's CPU under load. Our queries are index lookups whose
    // best plan does not depend on the values.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;

    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    let version: Option<i64> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    // Whether `annotation_items` was just filled with `indexed`'s rows (a migration).
    let mut index_built = false;
    match version {
        None => {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION],
            )?;
        }
        Some(v) if v == SCHEMA_VERSION => {}
        Some(1) => {
            // Version 1 had no `labels`/`annotation_items` tables (just created, empty): fill
            // them from the objects, in this same transaction, so a crash leaves either
            // version 1 or a complete version 2.
            backfill(&tx, |conn, resource, namespace, name, obj| {
                insert_metadata_index(conn, resource, namespace, name, obj, indexed)
            })?;
            index_built = true;
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                [SCHEMA_VERSION],
            )?;
        }
        Some(v) => {
            return Err(StoreError::Corrupt(format!(
                "store schema version {v} is not supported by this binary (expects {SCHEMA_VERSION})"
            )));
        }
    }
    // The annotation index holds what this store looks up: rebuilt when that changed
    // (an older file, or one opened with another set), in the same transaction.
    let held: Option<i64> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'annotation_index'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let wanted = annotation_index_signature(indexed);
    if !index_built && held.unwrap_or(annotation_index_signature(None)) != wanted {
        tx.execute("DELETE FROM annotation_items", [])?;
        backfill(&tx, |conn, resource, namespace, name, obj| {
            insert_annotation_items(conn, resource, namespace, name, obj, indexed)
        })?;
    }
    tx.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('annotation_index', ?1)",
        [wanted],
    )?;
    tx.commit()?;
    Ok(())
}

/// Which annotations `annotation_items` holds (`Options::indexed_annotations`).
pub(crate) type Indexed = Option<&'static [&'static str]>;

/// A number naming an [`Indexed`] set, as the `annotation_index` meta row keeps it: `0`
/// for all annotations, else a hash of the sorted keys (FNV-1a, so it is the same from
/// build to build).
pub(crate) fn annotation_index_signature(indexed: Indexed) -> i64 {
    let Some(keys) = indexed else {
        return 0;
    };
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in keys.join("\n").bytes().chain([0xff]) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // Never 0 (that is "all"); the sign bit is fine for SQLite's INTEGER.
    (h | 1) as i64
}

/// Runs `index` on every stored object (parsed), to write its index rows.
fn backfill(
    tx: &Transaction<'_>,
    index: impl Fn(&Connection, &str, &str, &str, &Value) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut stmt = tx.prepare("SELECT resource, namespace, name, object FROM objects")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    for row in rows {
        let (resource, namespace, name, text) = row?;
        index(tx, &resource, &namespace, &name, &parse_json(&text)?)?;
    }
    Ok(())
}

/// The `annotation_items` rows of one annotation value.
fn annotation_items(value: &str) -> Vec<&str> {
    if value.len() > MAX_ITEMIZED {
        return vec![""];
    }
    let mut items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    items.sort_unstable();
    items.dedup();
    items
}

/// The `labels` and `annotation_items` rows of one object.
fn insert_metadata_index(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    name: &str,
    obj: &Value,
    indexed: Indexed,
) -> Result<(), StoreError> {
    insert_labels(conn, resource, namespace, name, obj)?;
    insert_annotation_items(conn, resource, namespace, name, obj, indexed)
}

/// The `annotation_items` rows of one object: of its indexed annotations.
fn insert_annotation_items(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    name: &str,
    obj: &Value,
    indexed: Indexed,
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO annotation_items (resource, namespace, name, key, item)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let annotations = object::string_annotations(obj);
    for (key, value) in annotations.filter(|(k, _)| indexed.is_none_or(|keys| keys.contains(k))) {
        for item in annotation_items(value) {
            stmt.execute(params![resource, namespace, name, key, item])?;
        }
    }
    Ok(())
}

fn insert_labels(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    name: &str,
    obj: &Value,
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR REPLACE INTO labels (resource, namespace, name, key, value)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (key, value) in object::string_labels(obj) {
        stmt.execute(params![resource, namespace, name, key, value])?;
    }
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

pub(crate) fn parse_json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored object: {e}")))
}

/// The stored JSON text of one object.
pub(crate) fn get(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT object FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        )?
        .query_row(params![resource, namespace, name], |r| r.get(0))
        .optional()?)
}

/// Appends `v` to the query parameters and returns its placeholder (`?N`).
fn bind<'a>(params: &mut Vec<&'a str>, v: &'a str) -> String {
    params.push(v);
    format!("?{}", params.len())
}

/// `l.value IN (?a, ?b)` for a requirement's values.
fn values_in<'a>(params: &mut Vec<&'a str>, r: &'a Requirement) -> String {
    let list: Vec<String> = r.values.iter().map(|v| bind(params, v)).collect();
    format!("l.value IN ({})", list.join(", "))
}

/// Whether SQL alone decides a requirement. `>`/`<` compare integers the way Rust parses
/// them (`i64::from_str`), which SQL's casts do not reproduce exactly: SQL only checks that
/// the label exists, and the value, selected alongside the object, is compared in Rust.
fn exact_in_sql(r: &Requirement) -> bool {
    !matches!(r.op, Operator::GreaterThan | Operator::LessThan)
}

/// JSON text of the objects of one resource, sorted by (namespace, name), optionally in one
/// namespace and matching a label selector.
///
/// The selector becomes SQL over the `labels` table, so only matching rows are read at all:
/// `=`/`in`/exists/`>`/`<` select the names carrying the label (an index range), and
/// `!=`/`notin`/`!key` exclude those that carry it (a primary-key probe per row). This is
/// exactly [`LabelSelector::matches_object`]: the table holds the string-valued labels only,
/// which is what matching sees (non-string values count as absent), and a key has at most
/// one value, so "no row with key k and value in S" is "absent or not in S".
///
/// `after` (a continue token's last key) starts the list after that (namespace, name): an
/// index range, so a later page reads only the rows from there on.
pub(crate) fn list(
    conn: &Connection,
    resource: &str,
    namespace: Option<&str>,
    selector: Option<&LabelSelector>,
    after: Option<(&str, &str)>,
) -> Result<Vec<String>, StoreError> {
    Ok(list_at_most(conn, resource, namespace, selector, after, usize::MAX)?.0)
}

/// [`list`], copying out the text of the first `max` matching rows only; the matching rows
/// beyond are counted, not copied (a page of 500 out of 10 000 copies 500 objects).
pub(crate) fn list_at_most(
    conn: &Connection,
    resource: &str,
    namespace: Option<&str>,
    selector: Option<&LabelSelector>,
    after: Option<(&str, &str)>,
    max: usize,
) -> Result<(Vec<String>, usize), StoreError> {
    let q = ListQuery::new(resource, namespace, selector, after);
    let mut stmt = conn.prepare_cached(&q.sql)?;
    let mut rows = stmt.query(params_from_iter(q.params.iter()))?;
    let mut out = Vec::new();
    let mut beyond = 0;
    let mut count_rest = false;
    while let Some(row) = rows.next()? {
        let mut keep = true;
        for (i, r) in q.residual.iter().enumerate() {
            let value: Option<String> = row.get(i + 1)?;
            keep &= r.matches(value.as_deref());
        }
        if !keep {
            continue;
        }
        if out.len() < max {
            out.push(row.get(0)?);
        } else if q.residual.is_empty() {
            // SQL decides every row: the index counts the rest without reading them
            // (stepping through them reads each object).
            count_rest = true;
            break;
        } else {
            beyond += 1;
        }
    }
    if count_rest {
        let total: i64 = conn
            .prepare_cached(&q.count_sql())?
            .query_row(params_from_iter(q.params.iter()), |r| r.get(0))?;
        beyond = usize::try_from(total)
            .unwrap_or(0)
            .saturating_sub(out.len());
    }
    Ok((out, beyond))
}

/// The SQL of [`list`] and its parameters.
struct ListQuery<'a> {
    sql: String,
    /// Where the `FROM` and `ORDER BY` parts of `sql` start.
    from_at: usize,
    order_at: usize,
    params: Vec<&'a str>,
    /// Requirements SQL only approximates; their label values are columns 1.. of the result.
    residual: Vec<&'a Requirement>,
}

impl<'a> ListQuery<'a> {
    fn new(
        resource: &'a str,
        namespace: Option<&'a str>,
        selector: Option<&'a LabelSelector>,
        after: Option<(&'a str, &'a str)>,
    ) -> Self {
        let requirements = selector.map_or(&[][..], LabelSelector::requirements);
        let mut params: Vec<&str> = Vec::new();
        let res = bind(&mut params, resource);
        let ns = namespace.map(|ns| bind(&mut params, ns));
        let mut sql = String::from("SELECT o.object");
        let residual: Vec<&Requirement> =
            requirements.iter().filter(|r| !exact_in_sql(r)).collect();
        for r in &residual {
            let k = bind(&mut params, &r.key);
            sql += &format!(
                ", (SELECT l.value FROM labels l WHERE l.resource = o.resource \
                 AND l.namespace = o.namespace AND l.name = o.name AND l.key = {k})"
            );
        }
        let from_at = sql.len();
        sql += &format!(" FROM objects o WHERE o.resource = {res}");
        if let Some(ns) = &ns {
            sql += &format!(" AND o.namespace = {ns}");
        }
        for r in requirements {
            let with_values = match r.op {
                Operator::Exists
                | Operator::DoesNotExist
                | Operator::GreaterThan
                | Operator::LessThan => None,
                // An empty value set (not parseable, but constructible): `in ()` matches
                // nothing, `notin ()` everything.
                Operator::Equals | Operator::In if r.values.is_empty() => {
                    sql += " AND 0";
                    continue;
                }
                Operator::NotEquals | Operator::NotIn if r.values.is_empty() => continue,
                Operator::Equals | Operator::In | Operator::NotEquals | Operator::NotIn => {
                    Some(values_in(&mut params, r))
                }
            };
            let value_cond = with_values.map_or(String::new(), |c| format!(" AND {c}"));
            let k = bind(&mut params, &r.key);
            let positive = !matches!(
                r.op,
                Operator::NotEquals | Operator::NotIn | Operator::DoesNotExist
            );
            sql += &if !positive {
                format!(
                    " AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.resource = o.resource \
                     AND l.namespace = o.namespace AND l.name = o.name AND l.key = {k}{value_cond})"
                )
            } else if let Some(ns) = &ns {
                // A set of names from the index, which the planner drives the lookup from.
                format!(
                    " AND o.name IN (SELECT l.name FROM labels l WHERE l.resource = {res} \
                     AND l.key = {k}{value_cond} AND l.namespace = {ns})"
                )
            } else {
                format!(
                    " AND (o.namespace, o.name) IN (SELECT l.namespace, l.name FROM labels l \
                     WHERE l.resource = {res} AND l.key = {k}{value_cond})"
                )
            };
        }
        if let Some((after_ns, after_name)) = after {
            let (a, b) = (bind(&mut params, after_ns), bind(&mut params, after_name));
            sql += &format!(" AND (o.namespace, o.name) > ({a}, {b})");
        }
        let order_at = sql.len();
        sql += " ORDER BY o.namespace, o.name";
        ListQuery {
            sql,
            from_at,
            order_at,
            params,
            residual,
        }
    }

    /// How many rows the query selects (the requirements SQL decides only: without
    /// `residual` ones, how many objects match). Takes the same parameters.
    fn count_sql(&self) -> String {
        format!("SELECT COUNT(*){}", &self.sql[self.from_at..self.order_at])
    }
}

/// `EXPLAIN QUERY PLAN` of a [`list`], one line per step.
#[cfg(test)]
pub(crate) fn explain_list(
    conn: &Connection,
    resource: &str,
    namespace: Option<&str>,
    selector: Option<&LabelSelector>,
) -> Vec<String> {
    let q = ListQuery::new(resource, namespace, selector, None);
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql))
        .unwrap();
    stmt.query_map(params_from_iter(q.params.iter()), |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Whether `item` is one of the comma-separated, whitespace-trimmed, non-empty items of
/// `list` (the shape of list-valued annotations such as `serving.knative.dev/routes`).
pub(crate) fn list_contains(list: &str, item: &str) -> bool {
    !item.is_empty() && list.split(',').map(str::trim).any(|s| s == item)
}

/// JSON text of the objects of one resource in one namespace whose annotation `key` is a
/// string listing `item` (see [`list_contains`]), sorted by name.
///
/// An index lookup in `annotation_items`; only objects whose annotation was too long to be
/// itemized are checked against their JSON as well (SQLite extracts the annotation, the
/// membership test is [`list_contains`]), so the answer is exact.
pub(crate) fn list_annotated(
    conn: &Connection,
    resource: &str,
    namespace: &str,
    key: &str,
    item: &str,
) -> Result<Vec<String>, StoreError> {
    if item.is_empty() {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT o.object, a.item = '',
                CASE WHEN a.item = '' THEN
                    (SELECT j.value FROM json_each(o.object, '$.metadata.annotations') j
                     WHERE j.key = ?3 AND j.type = 'text')
                END
         FROM annotation_items a
         JOIN objects o
           ON o.resource = a.resource AND o.namespace = a.namespace AND o.name = a.name
         WHERE a.resource = ?1 AND a.namespace = ?2 AND a.key = ?3 AND a.item IN (?4, '')
         ORDER BY o.name",
    )?;
    let rows = stmt.query_map(params![resource, namespace, key, item], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, Option<String>>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (text, long, list) = row?;
        if !long || list.is_some_and(|l| list_contains(&l, item)) {
            out.push(text);
        }
    }
    Ok(out)
}

/// `EXPLAIN QUERY PLAN` of the lookup in [`list_annotated`], one line per step.
#[cfg(test)]
pub(crate) fn explain_annotated(conn: &Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT o.object FROM annotation_items a
             JOIN objects o
               ON o.resource = a.resource AND o.namespace = a.namespace AND o.name = a.name
             WHERE a.resource = ?1 AND a.namespace = ?2 AND a.key = ?3 AND a.item IN (?4, '')
             ORDER BY o.name",
        )
        .unwrap();
    stmt.query_map(params!["r", "ns", "k", "i"], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

pub(crate) const EVENTS_SINCE: &str = "SELECT resource_version, resource, type, object FROM events
     WHERE resource_version > ?1 AND (?2 IS NULL OR resource = ?2)
       AND (?3 IS NULL OR namespace = ?3)
     ORDER BY resource_version LIMIT ?4";

/// How often the cached statement `sql` was re-prepared (SQLite expires a statement whose
/// plan depended on a bound value when that parameter is rebound).
#[cfg(test)]
pub(crate) fn reprepares(conn: &Connection, sql: &str) -> i32 {
    conn.prepare_cached(sql)
        .unwrap()
        .get_status(rusqlite::StatementStatus::RePrepare)
}

/// The SQL [`list`] runs for these arguments.
#[cfg(test)]
pub(crate) fn list_sql(
    resource: &str,
    namespace: Option<&str>,
    selector: Option<&LabelSelector>,
) -> String {
    ListQuery::new(resource, namespace, selector, None).sql
}

/// The event log's rows after resourceVersion `from`, in order, objects still as JSON text.
pub(crate) fn events_since(
    conn: &Connection,
    from: u64,
    resource: Option<&str>,
    namespace: Option<&str>,
    limit: usize,
) -> Result<Vec<RawEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(EVENTS_SINCE)?;
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
        out.push(RawEvent {
            resource_version,
            resource,
            event_type,
            object,
        });
    }
    Ok(out)
}

/// One object row as [`WriteTx`] writes it: its key, uid and resourceVersion, the object,
/// and its JSON text (serialized once, by the caller, which stores the same text in the
/// event).
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub resource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub rv: u64,
    pub obj: &'a Value,
    pub json: &'a str,
}

/// One write transaction. Every mutation goes through here so that the object rows, the owner
/// index, the event log and the counter change together or not at all: dropping a `WriteTx`
/// without [`commit`](Self::commit) (e.g. on `?`) rolls everything back.
///
/// Inside a [`crate::Store::batch`] it is a savepoint of the batch's transaction instead:
/// atomic and rolled back alone on error the same way, committed with the batch.
pub(crate) struct WriteTx<'c> {
    tx: &'c Connection,
    /// A savepoint inside an open batch transaction, not a transaction of its own.
    nested: bool,
    /// Still to be committed or rolled back.
    open: bool,
    /// Counter value at the start; `rev > start` means something was written.
    start: u64,
    rev: u64,
    /// Number of events to keep.
    history: u64,
    /// The annotations indexed.
    indexed: Indexed,
}

impl<'c> WriteTx<'c> {
    /// IMMEDIATE takes the write lock up front, so the counter we read cannot be stale by the
    /// time we write it back (matters only if another process shares the file).
    pub(crate) fn begin(
        conn: &'c Connection,
        options: &crate::Options,
        nested: bool,
    ) -> Result<Self, StoreError> {
        conn.execute_batch(if nested {
            "SAVEPOINT wisp_write"
        } else {
            "BEGIN IMMEDIATE"
        })?;
        let mut tx = WriteTx {
            tx: conn,
            nested,
            open: true,
            start: 0,
            rev: 0,
            history: options.event_history.max(1) as u64,
            indexed: options.indexed_annotations,
        };
        // On error the drop rolls the transaction back.
        tx.start = revision(conn)?;
        tx.rev = tx.start;
        Ok(tx)
    }

    fn rollback(&mut self) {
        if std::mem::take(&mut self.open) {
            // Nothing useful can be done if this fails: SQLite rolls an unfinished
            // transaction back by itself when the connection next begins one or closes.
            let _ = self.tx.execute_batch(if self.nested {
                "ROLLBACK TO wisp_write; RELEASE wisp_write"
            } else {
                "ROLLBACK"
            });
        }
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
        get(self.tx, resource, namespace, name)?
            .as_deref()
            .map(parse_json)
            .transpose()
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

    /// Inserts or replaces an object row. When `owners` is given its owner index rows and
    /// label rows are rewritten too; `None` means the metadata did not change (a status
    /// update), so neither needs touching.
    pub(crate) fn put(&self, row: &Row<'_>, owners: Option<&[String]>) -> Result<(), StoreError> {
        let Row {
            resource,
            namespace,
            name,
            uid,
            rv,
            obj,
            json,
        } = *row;
        // A changed object (same uid) is updated in place: its row keeps its rowid, so
        // neither the key's index nor the uid's is touched. `INSERT OR REPLACE` deletes
        // the row and inserts another (both indexes twice). Most writes are such updates
        // (statuses); while 1,000 services were created, wisp's CPU per service was about
        // 3 % lower with this. New rows (and a uid that changed) insert.
        let updated = self
            .tx
            .prepare_cached(
                "UPDATE objects SET resource_version = ?5, object = ?6
                 WHERE resource = ?1 AND namespace = ?2 AND name = ?3 AND uid = ?4",
            )?
            .execute(params![resource, namespace, name, uid, int(rv), json])?;
        if updated == 0 {
            self.tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO objects
                     (resource, namespace, name, uid, resource_version, object)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![resource, namespace, name, uid, int(rv), json])?;
        }
        if let Some(owners) = owners {
            self.clear_owners(resource, namespace, name)?;
            self.clear_metadata_index(resource, namespace, name)?;
            self.index(resource, namespace, name, obj, owners)?;
        }
        Ok(())
    }

    /// Inserts a new object (the caller checked that no object has its key) with its
    /// owner and metadata index rows. [`put`](Self::put) would first try an update and
    /// clear the rows of an object that is not there: four statements, each a B-tree
    /// descent and a statement journal, for every create.
    pub(crate) fn insert(&self, row: &Row<'_>, owners: &[String]) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT INTO objects (resource, namespace, name, uid, resource_version, object)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                row.resource,
                row.namespace,
                row.name,
                row.uid,
                int(row.rv),
                row.json
            ])?;
        self.index(row.resource, row.namespace, row.name, row.obj, owners)
    }

    /// The owner index and metadata index rows of an object that has none.
    fn index(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        obj: &Value,
        owners: &[String],
    ) -> Result<(), StoreError> {
        let mut stmt = self.tx.prepare_cached(
            "INSERT OR IGNORE INTO owners (owner_uid, child_ns, child_resource, child_name)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for owner in owners {
            stmt.execute(params![owner, namespace, resource, name])?;
        }
        insert_metadata_index(self.tx, resource, namespace, name, obj, self.indexed)
    }

    fn clear_metadata_index(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM labels WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            "DELETE FROM annotation_items WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        ] {
            self.tx
                .prepare_cached(sql)?
                .execute(params![resource, namespace, name])?;
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
        self.clear_owners(resource, namespace, name)?;
        self.clear_metadata_index(resource, namespace, name)
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
        json: &str,
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
                json
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
    pub(crate) fn commit(mut self) -> Result<Option<u64>, StoreError> {
        if self.rev == self.start {
            self.rollback();
            return Ok(None);
        }
        self.tx
            .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'revision'")?
            .execute([int(self.rev)])?;
        let keep_after = self.rev.saturating_sub(self.history);
        if keep_after > compacted(self.tx)? {
            self.tx
                .prepare_cached("DELETE FROM events WHERE resource_version <= ?1")?
                .execute([int(keep_after)])?;
            self.tx
                .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'compacted'")?
                .execute([int(keep_after)])?;
        }
        self.tx.execute_batch(if self.nested {
            "RELEASE wisp_write"
        } else {
            "COMMIT"
        })?;
        self.open = false;
        Ok(Some(self.rev))
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        self.rollback();
    }
}

#[cfg(test)]
mod signature_tests {
    use super::annotation_index_signature as sig;

    #[test]
    fn an_index_set_is_named_by_its_keys_alone() {
        // (set, same as which earlier case, or None for a new number)
        let cases: [(Option<&'static [&'static str]>, Option<usize>); 6] = [
            (None, None),
            (Some(&["a"]), None),
            (Some(&["a", "b"]), None),
            (Some(&["b", "a"]), Some(2)),
            (Some(&["a", "a", "b"]), Some(2)),
            (Some(&[]), None),
        ];
        let mut seen = Vec::new();
        for (i, (set, same_as)) in cases.into_iter().enumerate() {
            let s = sig(set);
            match same_as {
                Some(j) => assert_eq!(s, seen[j], "case {i}"),
                None => assert!(!seen.contains(&s), "case {i}: {s} taken"),
            }
            seen.push(s);
        }
        assert_eq!(
            sig(None),
            0,
            "all annotations: what a store without the row holds"
        );
    }
}
