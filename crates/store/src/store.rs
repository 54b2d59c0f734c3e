//! [`Store`]: the public handle and the Kubernetes write semantics (create, update, status
//! update, cascading delete) on top of [`crate::sqlite`].

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::Connection;
use serde_json::Value;
use tokio::sync::watch;

use crate::object::{self, meta_str};
use crate::sqlite::{self, Row, WriteTx};
use crate::{CONFLICT_MODIFIED, EventType, LabelSelector, RawEvent, StoreError, WatchEvent};

/// How many watch events are kept by default: enough for watchers that fall a few minutes
/// behind on a busy single-node install, small enough that the table stays a few MB.
pub const DEFAULT_EVENT_HISTORY: usize = 10_000;

/// How often `generateName` is retried on a name collision before giving up.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Tunables for [`Store::open_with`]. `Options::default()` is what `wisp serve` uses.
#[derive(Debug, Clone)]
pub struct Options {
    /// Number of most recent watch events retained (at least 1). Older ones are compacted and
    /// `events_since` below them answers [`StoreError::Gone`].
    pub event_history: usize,
    /// How long to wait for a lock held by another process before failing with `Db(Busy)`.
    pub busy_timeout: Duration,
    /// Source of `creationTimestamp`/`deletionTimestamp`; replaceable for golden tests.
    pub clock: fn() -> DateTime<Utc>,
    /// The annotations [`Store::list_raw_by_annotation_item`] can look up: `None` every
    /// one, `Some(keys)` only these. Each looked-up annotation costs index rows on every
    /// write of every object carrying it, so a server that looks up one key indexes that
    /// one; a lookup of another key is refused. A change of this set between runs
    /// rebuilds the index when the store is opened.
    pub indexed_annotations: Option<&'static [&'static str]>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            event_history: DEFAULT_EVENT_HISTORY,
            busy_timeout: Duration::from_secs(5),
            clock: Utc::now,
            indexed_annotations: None,
        }
    }
}

/// Handle to the object store. Cheap to clone; all clones share one SQLite connection.
///
/// All methods are blocking (SQLite I/O, fsync on writes): call them from
/// `tokio::task::spawn_blocking` in async code. Objects are addressed by
/// `(resource, namespace, name)` passed as separate `&str` arguments; `resource` is an opaque
/// string chosen by the caller (e.g. `services.serving.knative.dev`) and appears verbatim in
/// error messages. Cluster-scoped kinds use the namespace `""`.
/// One page of a list ([`Store::list_page`]).
#[derive(Debug)]
pub struct ListPage {
    /// The page's objects, in (namespace, name) order: up to the limit, and one more when
    /// there is more.
    pub items: Vec<Value>,
    /// Matching rows beyond `items` that were not read (only a field-selector-free list
    /// knows they all match).
    pub unread: usize,
    /// The store's resourceVersion the page was read at.
    pub revision: u64,
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    /// How this handle's writes are made durable (handles share one connection).
    durability: Durability,
}

/// When a write is acknowledged relative to the disk.
///
/// Users' writes come through the API and are acknowledged only once fsynced, so they
/// survive `kill -9` and a power cut alike. Everything the controllers write (children,
/// status, routing labels) is derived from those objects: such writes are committed to the
/// WAL without waiting for the fsync (SQLite's `synchronous=NORMAL`), which still survives
/// `kill -9` (the WAL is in the OS page cache) and keeps the database consistent after a
/// power cut; derived writes lost to a power cut are recomputed by the level-based
/// reconcilers from the users' objects. Ordering holds: a later fsynced commit also syncs
/// every earlier WAL frame. The fsync is ~2.4 ms on this disk, and the controllers write
/// ~17 times per service, which is why they must not each wait for one.
///
/// With a WAL file (any store on disk), every commit is written with `synchronous=NORMAL`
/// and a durable one is then fsynced by [`WalSync`] *after* the store is unlocked: the
/// other threads read and write while the disk syncs, and writes that commit meanwhile
/// share the next fsync. A durable write is answered only after its sync; it is visible
/// to readers from its commit on, as the controllers' writes are, so a power cut in
/// between can take back a write that was seen but never acknowledged. While 1,000
/// services were created at once, an fsync under the lock was ~2.5 ms of every API commit
/// in which neither the controllers nor other API writes could touch the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync before acknowledging (`synchronous=FULL`).
    #[default]
    Full,
    /// Commit to the WAL, fsync later (`synchronous=NORMAL`): for derived state.
    Relaxed,
}

/// Syncs the WAL for durable commits outside the store's lock (see [`Durability`]).
struct WalSync {
    /// The store's WAL file, opened a second time: an fdatasync syncs the file, whichever
    /// descriptor wrote it. SQLite keeps the file (and its inode) while the store is open:
    /// a checkpoint rewrites or truncates it, never replaces it.
    file: std::fs::File,
    /// Commits so far; bumped with the connection still held, once the commit's frames
    /// are written.
    commits: std::sync::atomic::AtomicU64,
    /// How many commits are known to be on disk, or why a sync failed. Held while syncing,
    /// so a caller that waited for it usually finds its commit covered. A failure sticks:
    /// after a failed fsync Linux may drop the pages it could not write, and a later
    /// fsync that succeeds would not bring them back.
    synced: Mutex<Result<u64, String>>,
}

impl WalSync {
    /// Opens the WAL of the store at `path` if the connection journals to one.
    fn open(conn: &Connection, path: &Path) -> Result<Option<WalSync>, StoreError> {
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Ok(None);
        }
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        // `init` committed, so the file exists; without it, commits sync under the lock.
        let Ok(file) = std::fs::File::open(&wal) else {
            return Ok(None);
        };
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(Some(WalSync {
            file,
            commits: std::sync::atomic::AtomicU64::new(0),
            synced: Mutex::new(Ok(0)),
        }))
    }

    /// Counts a commit (called with the connection held): its number, to sync through.
    fn committed(&self) -> u64 {
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }

    /// Returns once commit `seq` and every earlier one is on disk.
    fn sync_through(&self, seq: u64) -> Result<(), StoreError> {
        let mut synced = wisp_sync::lock(&self.synced);
        match &*synced {
            Err(e) => return Err(StoreError::Sync(e.clone())),
            Ok(done) if *done >= seq => return Ok(()),
            Ok(_) => {}
        }
        // Read before the sync: every commit counted by now has written its frames.
        let target = self.commits.load(std::sync::atomic::Ordering::SeqCst);
        match self.file.sync_data() {
            Ok(()) => {
                *synced = Ok(target);
                Ok(())
            }
            Err(e) => {
                let e = e.to_string();
                *synced = Err(e.clone());
                Err(StoreError::Sync(e))
            }
        }
    }

    /// Commits known to be on disk (0 after a failed sync).
    #[cfg(test)]
    fn synced(&self) -> u64 {
        wisp_sync::lock(&self.synced).clone().unwrap_or(0)
    }
}

/// A durable commit whose WAL is still to be synced: [`Store::sync`] it before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) struct Unsynced(u64);

thread_local! {
    /// The batch ([`Store::batch`]) running on this thread: its store's id and the store's
    /// connection, lent to the batch for its duration.
    static BATCH: std::cell::RefCell<Option<(usize, Connection)>> =
        const { std::cell::RefCell::new(None) };
    /// The highest revision the running batch has written.
    static BATCH_REV: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// What the running batch's units left for after its commit ([`Store::after_commit`]).
    static AFTER: std::cell::RefCell<Vec<AfterCommit>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Work that follows from a batch's writes but needs no store (the in-memory views of
/// what a reconcile wrote, its events), queued with [`Store::after_commit`].
pub(crate) type AfterCommit = Box<dyn FnOnce() + Send>;

/// Runs after-commit work in order; one that panics is dropped alone.
pub(crate) fn run_after_commit(work: Vec<AfterCommit>) {
    for f in work {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    }
}

struct Inner {
    /// One connection for reads and writes. SQLite serializes writers anyway, and a single
    /// connection means a read can never observe a half-finished write of ours. Only ever held
    /// for one synchronous call, never across an `.await`. `None` while lent to a batch.
    conn: Mutex<Option<Connection>>,
    /// Signalled when a batch gives the connection back.
    returned: Condvar,
    /// The connection's current `synchronous` mode (changed only with `conn` locked).
    relaxed: std::sync::atomic::AtomicBool,
    /// The WAL, when durable commits sync it after unlocking (then the connection stays
    /// in `synchronous=NORMAL`).
    wal: Option<WalSync>,
    /// Latest committed revision, for async watchers. Updated while `conn` is still locked so
    /// the published value never goes backwards.
    revision: watch::Sender<u64>,
    options: Options,
}

/// The locked connection (never `None`: [`Store::conn`] waits out batches).
pub(crate) struct ConnGuard<'a>(MutexGuard<'a, Option<Connection>>);

impl std::ops::Deref for ConnGuard<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        // `conn()` only builds a guard around `Some`, and only a batch takes it out, which
        // needs this very lock.
        self.0.as_ref().expect("connection present while locked")
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("revision", &self.current_revision())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the store file at `path` with default [`Options`].
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, Options::default())
    }

    pub fn open_with(path: &Path, options: Options) -> Result<Store, StoreError> {
        Self::from_connection(Connection::open(path)?, options, Some(path))
    }

    /// A private in-memory store, for tests of other crates. Not durable, obviously.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Self::open_in_memory_with(Options::default())
    }

    pub fn open_in_memory_with(options: Options) -> Result<Store, StoreError> {
        Self::from_connection(Connection::open_in_memory()?, options, None)
    }

    fn from_connection(
        mut conn: Connection,
        options: Options,
        path: Option<&Path>,
    ) -> Result<Store, StoreError> {
        sqlite::init(&mut conn, options.busy_timeout, options.indexed_annotations)?;
        let wal = match path {
            Some(path) => WalSync::open(&conn, path)?,
            None => None,
        };
        let rev = sqlite::revision(&conn)?;
        let (revision, _) = watch::channel(rev);
        Ok(Store {
            inner: Arc::new(Inner {
                conn: Mutex::new(Some(conn)),
                returned: Condvar::new(),
                relaxed: std::sync::atomic::AtomicBool::new(wal.is_some()),
                wal,
                revision,
                options,
            }),
            durability: Durability::Full,
        })
    }

    /// A handle on the same store whose writes use `durability` (see [`Durability`]).
    pub fn with_durability(&self, durability: Durability) -> Store {
        Store {
            inner: self.inner.clone(),
            durability,
        }
    }

    /// This handle's durability.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn conn(&self) -> ConnGuard<'_> {
        // A panic while holding the lock left no partial write behind (the open transaction
        // rolls back when dropped), so a poisoned lock is safe to keep using.
        let mut guard = wisp_sync::lock(&self.inner.conn);
        // While a batch has the connection, wait for it to be given back.
        while guard.is_none() {
            guard = self
                .inner
                .returned
                .wait(guard)
                .unwrap_or_else(|e| e.into_inner());
        }
        ConnGuard(guard)
    }

    /// This store's identity, for [`BATCH`].
    fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Runs `f` with the connection: the open batch's on this thread, or else locked.
    pub(crate) fn with_conn<R>(&self, f: impl FnOnce(&Connection) -> R) -> R {
        let id = self.id();
        BATCH.with_borrow(|b| match b {
            Some((batch, conn)) if *batch == id => f(conn),
            _ => f(&self.conn()),
        })
    }

    fn in_batch(&self) -> bool {
        BATCH.with_borrow(|b| b.as_ref().is_some_and(|(id, _)| *id == self.id()))
    }

    /// Runs `f` with every write it makes (on this store, on this thread) in one
    /// transaction, committed when `f` returns, with this handle's durability; each write
    /// is still atomic on its own (a savepoint) and fails alone. The store stays locked for
    /// the whole of `f`, so no one reads what the batch has not committed yet.
    ///
    /// Returns what `f` returned and whether the commit succeeded: if it did not, none of
    /// the batch's writes happened, whatever `f` was told. A batch inside a batch joins it.
    /// After a commit, and with the store unlocked, runs what `f` queued with
    /// [`after_commit`](Self::after_commit).
    ///
    /// For the controllers: dozens of small reconciles, each of a few writes, cost one
    /// commit instead of one each, and take the lock once instead of racing for it.
    pub fn batch<R>(&self, f: impl FnOnce() -> R) -> (R, Result<(), StoreError>) {
        let (out, committed, after) = self.batch_then(f);
        let committed = committed.and_then(|unsynced| self.sync(unsynced));
        run_after_commit(after);
        (out, committed)
    }

    /// Counts a commit that wrote (with the connection still held): what a durable one
    /// must [`sync`](Self::sync) before it is answered.
    fn count_commit(&self) -> Option<Unsynced> {
        let wal = self.inner.wal.as_ref()?;
        let seq = wal.committed();
        (self.durability == Durability::Full).then_some(Unsynced(seq))
    }

    /// Returns once an [`Unsynced`] commit is on disk (at once for `None`). Call with the
    /// store unlocked: that is the point.
    pub(crate) fn sync(&self, unsynced: Option<Unsynced>) -> Result<(), StoreError> {
        match (unsynced, &self.inner.wal) {
            (Some(Unsynced(seq)), Some(wal)) => wal.sync_through(seq),
            _ => Ok(()),
        }
    }

    /// Queues `f` for after the commit of the batch running on this thread, once the
    /// connection is given back (runs it at once when no batch runs: then every write has
    /// committed already). For work that follows from the batch's writes but needs no
    /// store: done inside the batch, it would keep everyone else waiting for the store.
    /// Dropped if the batch does not commit (its writes did not happen).
    pub fn after_commit(&self, f: impl FnOnce() + Send + 'static) {
        if self.in_batch() {
            AFTER.with_borrow_mut(|a| a.push(Box::new(f)));
        } else {
            f();
        }
    }

    /// How much after-commit work the running batch has queued, to drop the work of a
    /// unit that panicked ([`truncate_after_commit`](Self::truncate_after_commit)).
    pub(crate) fn after_commit_len() -> usize {
        AFTER.with_borrow(Vec::len)
    }

    pub(crate) fn truncate_after_commit(len: usize) {
        AFTER.with_borrow_mut(|a| a.truncate(len));
    }

    /// [`batch`](Self::batch), returning the after-commit work its units queued instead of
    /// running it, and leaving the commit to [`sync`](Self::sync) (for a
    /// [`Batcher`](crate::Batcher), which does both on another thread).
    pub(crate) fn batch_then<R>(
        &self,
        f: impl FnOnce() -> R,
    ) -> (R, Result<Option<Unsynced>, StoreError>, Vec<AfterCommit>) {
        if self.in_batch() {
            return (f(), Ok(None), Vec::new());
        }
        let mut guard = self.conn();
        if let Err(e) = self.set_durability(&guard) {
            drop(guard);
            return (f(), Err(e), Vec::new());
        }
        if guard.execute_batch("BEGIN IMMEDIATE").is_err() {
            // Then the writes each begin their own transaction, and fail or succeed alone
            // (and sync their own).
            drop(guard);
            return (f(), Ok(None), Vec::new());
        }
        // The connection moves to this thread for the batch; everyone else waits in
        // `conn()` until `Lent` gives it back (also if `f` panics: then rolled back).
        let conn = guard.0.take();
        drop(guard);
        BATCH.set(conn.map(|c| (self.id(), c)));
        BATCH_REV.set(0);
        // Whatever a batch that panicked left behind did not commit.
        AFTER.take();
        struct Lent<'a>(&'a Store, bool);
        impl Drop for Lent<'_> {
            fn drop(&mut self) {
                let Some((_, conn)) = BATCH.take() else {
                    return;
                };
                if !self.1 {
                    // Not committed (a failed COMMIT leaves the transaction open, and a
                    // panic never reached it): nothing of the batch stays.
                    let _ = conn.execute_batch("ROLLBACK");
                }
                let inner = &self.0.inner;
                *wisp_sync::lock(&inner.conn) = Some(conn);
                inner.returned.notify_all();
            }
        }
        let mut lent = Lent(self, false);
        let out = f();
        let started = std::time::Instant::now();
        let committed = self.with_conn(|conn| conn.execute_batch("COMMIT"));
        record_commit(started);
        lent.1 = committed.is_ok();
        let unsynced = match committed {
            Ok(()) if BATCH_REV.get() > 0 => self.count_commit(),
            _ => None,
        };
        drop(lent);
        let after = AFTER.take();
        if let Err(e) = committed {
            return (out, Err(StoreError::from(e)), Vec::new());
        }
        self.publish(BATCH_REV.get());
        (out, Ok(unsynced), after)
    }

    /// Makes the connection's `synchronous` mode match this handle's durability.
    fn set_durability(&self, conn: &Connection) -> Result<(), StoreError> {
        // With a `WalSync`, durable commits sync after unlocking: the connection stays NORMAL.
        let relaxed = self.durability == Durability::Relaxed || self.inner.wal.is_some();
        // `synchronous` is per connection and may only change outside a transaction; the
        // flag is read and written with the connection locked.
        if self
            .inner
            .relaxed
            .load(std::sync::atomic::Ordering::Relaxed)
            != relaxed
        {
            let mode = if relaxed { "NORMAL" } else { "FULL" };
            conn.pragma_update(None, "synchronous", mode)?;
            self.inner
                .relaxed
                .store(relaxed, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// Tells watchers about committed revision `rev` (0: nothing was written).
    fn publish(&self, rev: u64) {
        self.inner.revision.send_if_modified(|cur| {
            let newer = rev > *cur;
            if newer {
                *cur = rev;
            }
            newer
        });
    }

    #[cfg(test)]
    pub(crate) fn inner_conn_for_tests(&self) -> ConnGuard<'_> {
        self.conn()
    }

    /// (commits counted, commits known to be on disk), for a store whose WAL is synced
    /// after unlocking.
    #[cfg(test)]
    pub(crate) fn wal_for_tests(&self) -> Option<(u64, u64)> {
        let wal = self.inner.wal.as_ref()?;
        Some((
            wal.commits.load(std::sync::atomic::Ordering::SeqCst),
            wal.synced(),
        ))
    }

    fn now(&self) -> String {
        (self.inner.options.clock)().to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Runs `f` in one write transaction, commits, and publishes the new revision. Inside a
    /// [`batch`](Self::batch) the batch commits and publishes instead.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut WriteTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.in_batch() {
            return self.with_conn(|conn| {
                let mut tx = WriteTx::begin(conn, &self.inner.options, true)?;
                let out = f(&mut tx)?;
                if let Some(rev) = tx.commit()? {
                    BATCH_REV.set(BATCH_REV.get().max(rev));
                }
                Ok(out)
            });
        }
        let conn = self.conn();
        self.set_durability(&conn)?;
        let mut tx = WriteTx::begin(&conn, &self.inner.options, false)?;
        let out = f(&mut tx)?;
        let started = std::time::Instant::now();
        let rev = tx.commit()?;
        record_commit(started);
        let unsynced = rev.and_then(|_| self.count_commit());
        if let Some(rev) = rev {
            self.publish(rev);
        }
        drop(conn);
        self.sync(unsynced)?;
        Ok(out)
    }

    /// The latest committed global resourceVersion (0 for an empty, never-written store).
    pub fn current_revision(&self) -> u64 {
        *self.inner.revision.borrow()
    }

    /// A receiver whose value is the latest committed resourceVersion. Async watchers await
    /// `changed()` and then read [`events_since`](Self::events_since) their last position.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.revision.subscribe()
    }

    pub fn get(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, StoreError> {
        self.get_raw(resource, namespace, name)?
            .as_deref()
            .map(sqlite::parse_json)
            .transpose()
    }

    /// [`get`](Self::get) without parsing: the stored JSON text, for callers that decode it
    /// straight into their own types.
    pub fn get_raw(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        self.with_conn(|conn| sqlite::get(conn, resource, namespace, name))
    }

    /// Objects of `resource` sorted by (namespace, name); `namespace: None` lists all
    /// namespaces. `selector` filters on `metadata.labels`. Also returns the global
    /// resourceVersion the list is consistent with: a watch from there misses nothing.
    ///
    /// The selector is evaluated by SQLite on the label index, so objects that do not match
    /// are never read or parsed; the ones that do are parsed after the connection is released.
    pub fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
    ) -> Result<(Vec<Value>, u64), StoreError> {
        let (texts, rev) = self.list_raw(resource, namespace, selector)?;
        let items = texts
            .iter()
            .map(|t| sqlite::parse_json(t))
            .collect::<Result<_, _>>()?;
        Ok((items, rev))
    }

    /// [`list`](Self::list) without parsing: the stored JSON text of each object.
    pub fn list_raw(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
    ) -> Result<(Vec<String>, u64), StoreError> {
        self.list_raw_after(resource, namespace, selector, None)
    }

    /// [`list_raw`](Self::list_raw) from after a (namespace, name) key on.
    fn list_raw_after(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
        after: Option<(&str, &str)>,
    ) -> Result<(Vec<String>, u64), StoreError> {
        let selector = selector.filter(|s| !s.is_empty());
        self.with_conn(|conn| {
            let rev = sqlite::revision(conn)?;
            let items = sqlite::list(conn, resource, namespace, selector, after)?;
            Ok((items, rev))
        })
    }

    /// [`list_page`](Self::list_page) without a filter and without parsing: the page's
    /// stored JSON texts (at most `limit + 1`), the matching rows beyond them, and the
    /// revision. For answers that hand the objects out as they are stored.
    pub fn list_page_raw(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
        after: Option<(&str, &str)>,
        limit: Option<usize>,
    ) -> Result<(Vec<String>, usize, u64), StoreError> {
        let want = limit.map_or(usize::MAX, |l| l.saturating_add(1));
        self.read_at_most(resource, namespace, selector, after, want)
    }

    /// The texts of the first `max` matching rows after `after`, how many match beyond
    /// them, and the revision, in one read.
    fn read_at_most(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
        after: Option<(&str, &str)>,
        max: usize,
    ) -> Result<(Vec<String>, usize, u64), StoreError> {
        let selector = selector.filter(|s| !s.is_empty());
        self.with_conn(|conn| {
            let rev = sqlite::revision(conn)?;
            let (texts, beyond) =
                sqlite::list_at_most(conn, resource, namespace, selector, after, max)?;
            Ok::<_, StoreError>((texts, beyond, rev))
        })
    }

    /// One page of a list, as a client asks for it with `limit` and `continue`: the objects
    /// after `after` (the last (namespace, name) of the page before), of those the ones
    /// `keep` accepts (a field selector; `None`: all), at most `limit + 1` of them (the one
    /// beyond tells that there is more), and how many matching rows were left unread beyond
    /// them. Without `keep`, only the page's rows are copied out of the store and parsed
    /// (the rest are counted), so a page of 500 costs 500 objects, not the whole kind;
    /// with it, every row from `after` on is copied and parsed as far as the page needs.
    pub fn list_page(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
        after: Option<(&str, &str)>,
        limit: Option<usize>,
        mut keep: Option<impl FnMut(&Value) -> bool>,
    ) -> Result<ListPage, StoreError> {
        let want = limit.map_or(usize::MAX, |l| l.saturating_add(1));
        let copy = if keep.is_some() { usize::MAX } else { want };
        let (texts, beyond, revision) =
            self.read_at_most(resource, namespace, selector, after, copy)?;
        let mut items = Vec::new();
        let mut unread = beyond;
        for (i, text) in texts.iter().enumerate() {
            if items.len() >= want {
                unread += texts.len() - i;
                break;
            }
            let object = sqlite::parse_json(text)?;
            if keep.as_mut().is_none_or(|keep| keep(&object)) {
                items.push(object);
            }
        }
        Ok(ListPage {
            items,
            unread,
            revision,
        })
    }

    /// The stored JSON text of the objects of `resource` in `namespace` whose annotation `key`
    /// is a comma-separated list naming `item` (items are trimmed of whitespace; empty ones
    /// never match), sorted by name: "which objects name X" for list-valued annotations such
    /// as `serving.knative.dev/routes`. Evaluated in SQL, so only the matches are returned.
    pub fn list_raw_by_annotation_item(
        &self,
        resource: &str,
        namespace: &str,
        key: &str,
        item: &str,
    ) -> Result<Vec<String>, StoreError> {
        if let Some(keys) = self.inner.options.indexed_annotations
            && !keys.contains(&key)
        {
            return Err(StoreError::Invalid(format!(
                "annotation {key:?} is not indexed by this store (it indexes {keys:?})"
            )));
        }
        self.with_conn(|conn| sqlite::list_annotated(conn, resource, namespace, key, item))
    }

    /// The namespaces that hold at least one object (of any resource), sorted: what a store
    /// written before Namespaces were objects needs Namespace objects for.
    pub fn namespaces_in_use(&self) -> Result<Vec<String>, StoreError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT DISTINCT namespace FROM objects WHERE namespace != '' ORDER BY namespace",
            )?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Creates an object.
    ///
    /// `metadata.namespace` is a string (the API server defaults it); absent or `""` means
    /// cluster-scoped.
    /// `metadata.name`, or failing that `metadata.generateName` (+ 5 random characters), names
    /// it. The server sets `uid`, `resourceVersion`, `generation: 1` and `creationTimestamp`,
    /// and drops a client-sent `deletionTimestamp`. `status` is stored as given.
    pub fn create(&self, resource: &str, mut obj: Value) -> Result<Value, StoreError> {
        let namespace = object::require_namespace(&obj)?;
        let name = meta_str(&obj, "name").unwrap_or("").to_owned();
        let generate = meta_str(&obj, "generateName").unwrap_or("").to_owned();
        if name.is_empty() && generate.is_empty() {
            return Err(StoreError::Invalid(
                "metadata.name: Required value: name or generateName is required".into(),
            ));
        }
        let now = self.now();
        let uid = new_uid();
        self.write(|tx| {
            let name = if !name.is_empty() {
                if tx.exists(resource, &namespace, &name)? {
                    return Err(StoreError::already_exists(resource, &namespace, &name));
                }
                name
            } else {
                let mut attempt = 0;
                loop {
                    let candidate = object::generate_name(&generate);
                    if !tx.exists(resource, &namespace, &candidate)? {
                        break candidate;
                    }
                    attempt += 1;
                    if attempt == GENERATE_NAME_ATTEMPTS {
                        return Err(StoreError::already_exists(resource, &namespace, &candidate));
                    }
                }
            };
            let rv = tx.next_rev();
            let meta = object::metadata_mut(&mut obj)?;
            meta.insert("name".into(), name.clone().into());
            meta.insert("uid".into(), uid.clone().into());
            meta.insert("resourceVersion".into(), rv.to_string().into());
            meta.insert("generation".into(), 1.into());
            meta.insert("creationTimestamp".into(), now.clone().into());
            meta.shift_remove("deletionTimestamp");
            object::canonicalize_metadata(meta);
            let owners = object::owner_uids(&obj);
            // kube-apiserver stores an object whatever its owner references name; the
            // garbage collector then deletes one none of whose owners exists (its
            // `attemptToDeleteItem`). Both happen here in one transaction: the create
            // answers with the object, and watchers see it ADDED then DELETED. This is also
            // what keeps a child created just after its owner's cascade (a controller that
            // read the owner a moment too early) from living on as an orphan.
            let mut dangling = true;
            for owner in &owners {
                if tx.uid_exists(owner)? {
                    dangling = false;
                    break;
                }
            }
            let json = obj.to_string();
            let row = Row {
                resource,
                namespace: &namespace,
                name: &name,
                uid: &uid,
                rv,
                obj: &obj,
                json: &json,
            };
            tx.insert(&row, &owners)?;
            tx.record_event(rv, resource, &namespace, &name, EventType::Added, &json)?;
            if !owners.is_empty() && dangling {
                Self::delete_one(tx, resource, &namespace, &name, obj.clone(), &now)?;
            }
            Ok(obj)
        })
    }

    /// Replaces an object's spec and metadata (the main resource, `PUT`).
    ///
    /// * `metadata.resourceVersion` non-empty: must equal the stored one, else `Conflict`.
    /// * A non-empty `metadata.uid` different from the stored one is a `Conflict` (the client
    ///   is talking about an object that was deleted and re-created under the same name).
    /// * `uid`, `creationTimestamp`, `generation`, `namespace`, `name`, `deletionTimestamp` are
    ///   server-owned and copied from the stored object; `status` in `obj` is ignored.
    /// * `generation` goes up by one iff `spec` changed.
    /// * If the result equals the stored object nothing is written: the stored object comes
    ///   back unchanged (same resourceVersion) and no event is emitted.
    pub fn update(&self, resource: &str, mut obj: Value) -> Result<Value, StoreError> {
        let (namespace, name, client_rv, client_uid) = Self::target(&obj)?;
        self.write(|tx| {
            let stored = Self::load_checked(
                tx,
                resource,
                &namespace,
                &name,
                client_rv.as_deref(),
                client_uid.as_deref(),
            )?;
            let spec_changed = obj.get("spec") != stored.get("spec");
            object::copy_top_field(&mut obj, &stored, "status");
            let meta = object::metadata_mut(&mut obj)?;
            for key in [
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
            ] {
                object::copy_meta_field(meta, &stored, key);
            }
            if spec_changed {
                meta.insert(
                    "generation".into(),
                    (object::generation(&stored) + 1).into(),
                );
            }
            object::canonicalize_metadata(meta);
            if obj == stored {
                return Ok(stored);
            }
            let owners = object::owner_uids(&obj);
            Self::store_modified(tx, resource, &namespace, &name, obj, Some(&owners))
        })
    }

    /// Replaces only `status` (the `/status` subresource): everything else in `obj` is ignored
    /// except the name/namespace that address it and the same `resourceVersion`/`uid`
    /// preconditions as [`update`](Self::update). `generation` is unchanged; a status equal
    /// to the stored one writes nothing.
    pub fn update_status(&self, resource: &str, obj: Value) -> Result<Value, StoreError> {
        let (namespace, name, client_rv, client_uid) = Self::target(&obj)?;
        self.write(|tx| {
            let stored = Self::load_checked(
                tx,
                resource,
                &namespace,
                &name,
                client_rv.as_deref(),
                client_uid.as_deref(),
            )?;
            let mut new = stored.clone();
            match obj.get("status") {
                Some(Value::Null) | None => {
                    object::copy_top_field(&mut new, &Value::Null, "status")
                }
                Some(_) => object::copy_top_field(&mut new, &obj, "status"),
            }
            if new == stored {
                return Ok(stored);
            }
            Self::store_modified(tx, resource, &namespace, &name, new, None)
        })
    }

    /// Deletes an object and, recursively, every object in the same namespace (any resource)
    /// whose `metadata.ownerReferences` names a deleted uid, all in one transaction.
    ///
    /// Each deleted object gets its own resourceVersion and a `DELETED` event carrying its
    /// last state with `deletionTimestamp` set. Order: the object itself, then its dependents
    /// breadth-first (all children, then grandchildren, ...), siblings sorted by
    /// (resource, name). `precondition_uid` (Kubernetes' `preconditions.uid`) must match the
    /// stored uid, else `Conflict`. Returns the deleted object as in its `DELETED` event.
    pub fn delete(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        precondition_uid: Option<&str>,
    ) -> Result<Value, StoreError> {
        let now = self.now();
        self.write(|tx| {
            let stored = tx
                .get(resource, namespace, name)?
                .ok_or_else(|| StoreError::not_found(resource, namespace, name))?;
            let uid = meta_str(&stored, "uid").unwrap_or("").to_owned();
            if let Some(want) = precondition_uid.filter(|u| !u.is_empty())
                && want != uid
            {
                return Err(StoreError::uid_precondition(
                    resource, namespace, name, want, &uid,
                ));
            }
            let deleted = Self::delete_one(tx, resource, namespace, name, stored, &now)?;
            let mut owners = VecDeque::from([uid]);
            while let Some(owner) = owners.pop_front() {
                for (child_resource, child_name) in tx.dependents(&owner, namespace)? {
                    // Already gone if it was reachable twice (several owners, or a cycle).
                    let Some(child) = tx.get(&child_resource, namespace, &child_name)? else {
                        continue;
                    };
                    let child =
                        Self::delete_one(tx, &child_resource, namespace, &child_name, child, &now)?;
                    owners.push_back(meta_str(&child, "uid").unwrap_or("").to_owned());
                }
            }
            Ok(deleted)
        })
    }

    /// Every event with resourceVersion `> from`, in order, optionally only for one resource
    /// and/or namespace, at most `limit` of them.
    ///
    /// Positions: pass the resourceVersion of the last thing you saw (a `list` result or the
    /// last event). `from == 0` means "from the very beginning" and works as long as nothing
    /// has been compacted yet; for "from now" pass [`current_revision`](Self::current_revision).
    /// A `from` in the future just yields nothing yet. `Gone` when events after `from` have
    /// already been compacted away: the caller must re-list (Kubernetes' 410).
    pub fn events_since(
        &self,
        from: u64,
        resource: Option<&str>,
        namespace: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        // Parsed with the connection released: other readers and writers need not wait.
        let raw = self.events_since_raw(from, resource, namespace, limit)?;
        raw.into_iter()
            .map(|e| {
                Ok(WatchEvent {
                    resource_version: e.resource_version,
                    resource: e.resource,
                    event_type: e.event_type,
                    object: sqlite::parse_json(&e.object)?,
                })
            })
            .collect()
    }

    /// [`events_since`](Self::events_since) without parsing the objects.
    pub fn events_since_raw(
        &self,
        from: u64,
        resource: Option<&str>,
        namespace: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RawEvent>, StoreError> {
        Ok(self
            .events_since_raw_at(from, resource, namespace, limit)?
            .0)
    }

    /// [`events_since_raw`](Self::events_since_raw), with the store's resourceVersion at
    /// the read: when fewer than `limit` events came back, every matching event up to it
    /// was read, so a reader filtering on a kind that rarely changes can move on to it
    /// instead of reading every other kind's events again on its next read.
    pub fn events_since_raw_at(
        &self,
        from: u64,
        resource: Option<&str>,
        namespace: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<RawEvent>, u64), StoreError> {
        self.with_conn(|conn| {
            let compacted = sqlite::compacted(conn)?;
            if from < compacted {
                return Err(StoreError::Gone {
                    requested: from,
                    oldest: compacted,
                });
            }
            let rev = sqlite::revision(conn)?;
            let events = sqlite::events_since(conn, from, resource, namespace, limit)?;
            Ok((events, rev))
        })
    }

    /// Forces the WAL into the main database file and truncates it. Not needed for durability
    /// (every durable commit is fsynced before it is answered); call on clean shutdown so the file is self-contained.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.with_conn(|conn| conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())))?;
        Ok(())
    }

    /// Address and preconditions of an update: (namespace, name, resourceVersion, uid).
    #[allow(clippy::type_complexity)]
    fn target(obj: &Value) -> Result<(String, String, Option<String>, Option<String>), StoreError> {
        let namespace = object::require_namespace(obj)?;
        let name = object::require_name(obj)?;
        let rv = object::client_resource_version(obj)?;
        let uid = meta_str(obj, "uid")
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        Ok((namespace, name, rv, uid))
    }

    /// Loads the object an update targets and checks the client's preconditions against it.
    fn load_checked(
        tx: &WriteTx<'_>,
        resource: &str,
        namespace: &str,
        name: &str,
        client_rv: Option<&str>,
        client_uid: Option<&str>,
    ) -> Result<Value, StoreError> {
        let stored = tx
            .get(resource, namespace, name)?
            .ok_or_else(|| StoreError::not_found(resource, namespace, name))?;
        let stored_uid = meta_str(&stored, "uid").unwrap_or("");
        if let Some(want) = client_uid
            && want != stored_uid
        {
            return Err(StoreError::uid_precondition(
                resource, namespace, name, want, stored_uid,
            ));
        }
        if let Some(want) = client_rv
            && Some(want) != meta_str(&stored, "resourceVersion")
        {
            return Err(StoreError::conflict(
                resource,
                namespace,
                name,
                CONFLICT_MODIFIED.to_owned(),
            ));
        }
        Ok(stored)
    }

    /// Writes a changed object at a new resourceVersion with a `MODIFIED` event.
    fn store_modified(
        tx: &mut WriteTx<'_>,
        resource: &str,
        namespace: &str,
        name: &str,
        mut obj: Value,
        owners: Option<&[String]>,
    ) -> Result<Value, StoreError> {
        let rv = tx.next_rev();
        object::metadata_mut(&mut obj)?.insert("resourceVersion".into(), rv.to_string().into());
        let uid = meta_str(&obj, "uid").unwrap_or("").to_owned();
        let json = obj.to_string();
        let row = Row {
            resource,
            namespace,
            name,
            uid: &uid,
            rv,
            obj: &obj,
            json: &json,
        };
        tx.put(&row, owners)?;
        tx.record_event(rv, resource, namespace, name, EventType::Modified, &json)?;
        Ok(obj)
    }

    /// Removes one object at a new resourceVersion with a `DELETED` event.
    fn delete_one(
        tx: &mut WriteTx<'_>,
        resource: &str,
        namespace: &str,
        name: &str,
        mut obj: Value,
        now: &str,
    ) -> Result<Value, StoreError> {
        let rv = tx.next_rev();
        let meta = object::metadata_mut(&mut obj)?;
        meta.insert("resourceVersion".into(), rv.to_string().into());
        meta.entry("deletionTimestamp")
            .or_insert_with(|| now.into());
        object::canonicalize_metadata(meta);
        tx.remove(resource, namespace, name)?;
        tx.record_event(
            rv,
            resource,
            namespace,
            name,
            EventType::Deleted,
            &obj.to_string(),
        )?;
        Ok(obj)
    }
}

/// Records one commit (begun at `started`) as `wisp_store_write_duration_seconds`: the
/// COMMIT, which is where a durable write waits for its fsync.
fn record_commit(started: std::time::Instant) {
    if let Some(m) = wisp_metrics::control() {
        m.store_write(started.elapsed());
    }
}

/// The uid of an object about to be created. Time-ordered (UUID version 7; Kubernetes makes
/// version 4, and a uid is opaque to its clients): the uid index, the owner index and the
/// index rows of `*UID` labels then grow at their ends, so the creates of a batch share
/// those pages, where random uids dirtied a page of each index per object in every commit.
pub fn new_uid() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod wal_sync_tests {
    use super::*;

    fn wal_on(file: std::fs::File) -> WalSync {
        WalSync {
            file,
            commits: std::sync::atomic::AtomicU64::new(0),
            synced: Mutex::new(Ok(0)),
        }
    }

    #[test]
    fn one_sync_covers_every_commit_counted_before_it() {
        let file = tempfile::tempfile().unwrap();
        let wal = wal_on(file);
        let first = wal.committed();
        let second = wal.committed();
        wal.sync_through(first).unwrap();
        // The second commit had written its frames when the sync began: covered too.
        assert_eq!(wal.synced(), second);
        wal.sync_through(second).unwrap();
        assert_eq!(wal.synced(), second);
    }

    #[test]
    fn after_a_failed_sync_no_commit_is_vouched_for() {
        // fdatasync on a character device fails (EINVAL), as a disk's EIO would.
        let wal = wal_on(std::fs::File::open("/dev/null").unwrap());
        let first = wal.committed();
        let err = wal.sync_through(first).unwrap_err();
        assert!(matches!(err, StoreError::Sync(_)), "{err:?}");
        assert!(
            err.to_string().starts_with("syncing the store to disk: "),
            "{err}"
        );
        // Not the next commit, nor an earlier one: the failed fsync may have dropped pages.
        let second = wal.committed();
        assert!(matches!(wal.sync_through(second), Err(StoreError::Sync(_))));
        assert!(matches!(wal.sync_through(first), Err(StoreError::Sync(_))));
        assert_eq!(wal.synced(), 0);
    }
}
