//! A work queue with the semantics of Kubernetes' `client-go/util/workqueue`:
//!
//! * **Dedupe**: a key added while it is already waiting is queued once.
//! * **One at a time**: a key handed out by [`get`](WorkQueue::get) is not handed out again
//!   until [`done`](WorkQueue::done); if it is added meanwhile, it is queued again right after
//!   `done` (so a change during a reconcile is never lost, and never reconciled twice at once).
//! * **Resyncs wait for changes**: a key queued by a resync ([`RESYNC`]: a restart's
//!   list of every object) waits in a second, background lane that is served only while
//!   no other key is ready, and moves to the front lane when something else queues it.
//!   With 10 000 services, a restart queues 10 000 keys per reconciler; before, the
//!   revision a request woke up waited behind all of them (a first request after a
//!   restart took 8 s).
//! * **Delays**: [`add_after`](WorkQueue::add_after) (the earliest pending time wins).
//! * **Why**: each add says why ([`Why`]); the first reason since the key was last
//!   handed out comes with it from [`get_why`](WorkQueue::get_why), for the reconcile's
//!   tracing span.
//! * **Back-off**: [`add_rate_limited`](WorkQueue::add_rate_limited) waits
//!   [`BASE_DELAY`] × 2^(failures−1), capped at [`MAX_DELAY`]; [`forget`](WorkQueue::forget)
//!   resets the count after a success. Kubernetes starts at 5 ms and caps at 1000 s; wisp
//!   starts at 10 ms (a store conflict resolves on the next read) and caps at 30 s, because
//!   on one machine a stuck object should be retried within seconds of its cause going away.
//!
//! Time is `tokio::time`, so tests run with paused time.

use std::{
    borrow::Borrow,
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    hash::Hash,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// First retry delay of a failing key.
pub const BASE_DELAY: Duration = Duration::from_millis(10);
/// Longest retry delay of a failing key.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// Why a key was queued: a short fixed word such as `"changed"`, `"owner"` or `"retry"`.
pub type Why = &'static str;

/// Why a resync queues a key: it goes to the background lane (see the module doc).
pub const RESYNC: Why = "resync";

/// What a queue can hold: a key compared and hashed by value.
pub trait Key: Clone + Eq + Hash + Send + 'static {}
impl<K: Clone + Eq + Hash + Send + 'static> Key for K {}

/// A cloneable handle to one queue of `K` keys (the controllers' are
/// [`ObjectRef`](crate::reconciler::ObjectRef)s).
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Key> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    background: VecDeque::new(),
                    in_background: HashSet::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    delayed: HashMap::new(),
                    timers: BTreeSet::new(),
                    timer_keys: HashMap::new(),
                    next_timer: 0,
                    why: HashMap::new(),
                    failures: HashMap::new(),
                    shut_down: false,
                }),
                notify: Notify::new(),
                metrics: None,
            }),
        }
    }
}

impl<K: Key> std::fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state();
        f.debug_struct("WorkQueue")
            .field("queued", &st.ready())
            .field("processing", &st.processing.len())
            .field("delayed", &st.delayed.len())
            .finish()
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    /// `kn.workqueue.*` of this queue, when metrics are on.
    metrics: Option<wisp_metrics::QueueMetrics>,
}

struct State<K> {
    /// Ready keys in FIFO order; every key here is also in `dirty`.
    queue: VecDeque<K>,
    /// Ready keys a resync queued, served when `queue` is empty. A key that moved to
    /// `queue` since is left here and skipped: it is no longer in `in_background`.
    background: VecDeque<K>,
    /// The keys waiting in `background`.
    in_background: HashSet<K>,
    /// Keys that need processing (queued, or added while being processed).
    dirty: HashSet<K>,
    /// Keys handed out and not yet `done`.
    processing: HashSet<K>,
    /// Keys waiting for a time, with the earliest time asked for, why, and their entry
    /// in `timers`.
    delayed: HashMap<K, (Instant, Why, u64)>,
    /// The delayed keys' times in order (time, entry number), so that finding what is
    /// due and the next deadline never walks every delayed key: with thousands of
    /// revisions ticking, a scan per `get` was work that grew with the number of objects.
    timers: BTreeSet<(Instant, u64)>,
    /// The key of each `timers` entry.
    timer_keys: HashMap<u64, K>,
    /// The number of the next `timers` entry.
    next_timer: u64,
    /// Why each dirty key was first queued since it was last handed out.
    why: HashMap<K, Why>,
    /// Consecutive failures per key, for back-off.
    failures: HashMap<K, u32>,
    shut_down: bool,
}

impl<K: Key> State<K> {
    /// Returns true if the key became ready to hand out (caller should notify).
    fn add(&mut self, key: K, why: Why) -> bool {
        if self.shut_down {
            return false;
        }
        if self.dirty.contains(&key) {
            // Something other than a resync wants a key a resync queued: it takes that
            // reason, and the front lane (now, or after its reconcile in flight).
            if why != RESYNC && self.why.get(&key) == Some(&RESYNC) {
                self.why.insert(key.clone(), why);
                if self.in_background.remove(&key) {
                    self.queue.push_back(key);
                }
            }
            return false;
        }
        self.dirty.insert(key.clone());
        self.why.insert(key.clone(), why);
        if self.processing.contains(&key) {
            return false;
        }
        self.push(key, why);
        true
    }

    /// Puts a dirty key in its lane.
    fn push(&mut self, key: K, why: Why) {
        if why == RESYNC {
            self.in_background.insert(key.clone());
            self.background.push_back(key);
        } else {
            self.queue.push_back(key);
        }
    }

    /// The next ready key: the front lane first.
    fn pop(&mut self) -> Option<K> {
        if let Some(key) = self.queue.pop_front() {
            return Some(key);
        }
        while let Some(key) = self.background.pop_front() {
            if self.in_background.remove(&key) {
                return Some(key);
            }
        }
        None
    }

    /// How many keys are ready.
    fn ready(&self) -> usize {
        self.queue.len() + self.in_background.len()
    }

    /// Moves every delayed key whose time has come into the queue; returns how many.
    fn promote_due(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(&(at, id)) = self.timers.first()
            && at <= now
        {
            self.timers.pop_first();
            let Some(key) = self.timer_keys.remove(&id) else {
                continue;
            };
            if let Some((_, why, _)) = self.delayed.remove(&key)
                && self.add(key, why)
            {
                n += 1;
            }
        }
        n
    }

    /// Gives back the memory of the ready-key collections once all of them are empty:
    /// they keep the capacity of their largest burst (10 000 services created at once
    /// left megabytes behind in every queue). Only empty ones are shrunk, which is O(1).
    fn release(&mut self) {
        fn set<K: Hash + Eq>(s: &mut HashSet<K>) {
            if s.is_empty() {
                s.shrink_to_fit();
            }
        }
        if self.queue.is_empty() {
            self.queue.shrink_to_fit();
        }
        if self.background.is_empty() {
            self.background.shrink_to_fit();
        }
        set(&mut self.in_background);
        set(&mut self.dirty);
        set(&mut self.processing);
        if self.why.is_empty() {
            self.why.shrink_to_fit();
        }
    }

    /// Delays `key` until `at` unless it already waits for an earlier time.
    fn delay(&mut self, key: K, at: Instant, why: Why) {
        if let Some(&(old, _, id)) = self.delayed.get(&key) {
            if old <= at {
                return;
            }
            self.timers.remove(&(old, id));
            self.timer_keys.remove(&id);
        }
        let id = self.next_timer;
        self.next_timer += 1;
        self.timers.insert((at, id));
        self.timer_keys.insert(id, key.clone());
        self.delayed.insert(key, (at, why, id));
    }
}

impl<K: Key> WorkQueue<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A queue reporting Knative's `kn.workqueue.*` figures as `name`, when the process
    /// records metrics ([`wisp_metrics::control`]).
    pub fn named(name: &str) -> Self {
        let mut q = Self::default();
        if let Some(inner) = Arc::get_mut(&mut q.inner) {
            inner.metrics = wisp_metrics::control().map(|c| c.queue(name));
        }
        q
    }

    /// This queue's metrics, if it reports any.
    pub fn metrics(&self) -> Option<&wisp_metrics::QueueMetrics> {
        self.inner.metrics.as_ref()
    }

    /// Publishes the ready keys' count (called with the state locked, after a change).
    fn depth(&self, st: &State<K>) {
        if let Some(m) = &self.inner.metrics {
            m.depth.set(i64::try_from(st.ready()).unwrap_or(i64::MAX));
        }
    }

    fn state(&self) -> MutexGuard<'_, State<K>> {
        wisp_sync::lock(&self.inner.state)
    }

    /// Queues `key` now (no-op if it is already waiting, or after shutdown).
    pub fn add(&self, key: impl Into<K>) {
        self.add_why(key, "added");
    }

    /// [`add`](Self::add), saying why.
    pub fn add_why(&self, key: impl Into<K>, why: Why) {
        let ready = {
            let mut st = self.state();
            let was = st.dirty.len();
            let ready = st.add(key.into(), why);
            if let Some(m) = &self.inner.metrics
                && st.dirty.len() > was
            {
                m.adds.inc();
            }
            self.depth(&st);
            ready
        };
        if ready {
            self.inner.notify.notify_one();
        }
    }

    /// Queues `key` once `delay` has passed, unless it is to run already (that run will see
    /// whatever this add is about) or already waits for an earlier time: every add within
    /// `delay` of the first is the same one run.
    pub fn add_settled(&self, key: impl Into<K>, delay: Duration, why: Why) {
        let key = key.into();
        {
            let st = self.state();
            // Dirty: ready, or to run again once its reconcile in progress is done.
            if st.dirty.contains(&key) {
                return;
            }
        }
        self.add_after_why(key, delay, why);
    }

    /// Queues `key` once `delay` has passed (now for a zero delay). If the key is already
    /// waiting for an earlier time, that time stands.
    pub fn add_after(&self, key: impl Into<K>, delay: Duration) {
        self.add_after_why(key, delay, "requeue");
    }

    fn add_after_why(&self, key: impl Into<K>, delay: Duration, why: Why) {
        if delay.is_zero() {
            return self.add_why(key, why);
        }
        let at = Instant::now() + delay;
        {
            let mut st = self.state();
            if st.shut_down {
                return;
            }
            st.delay(key.into(), at, why);
        }
        // A waiting worker may be sleeping until a later deadline: wake one to re-plan.
        self.inner.notify.notify_one();
    }

    /// Queues `key` after its back-off delay, and counts one more failure for it.
    pub fn add_rate_limited(&self, key: impl Into<K>) {
        let key = key.into();
        let delay = {
            let mut st = self.state();
            let n = st.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            backoff(*n)
        };
        if let Some(m) = &self.inner.metrics {
            m.retries.inc();
        }
        self.add_after_why(key, delay, "retry");
    }

    /// Clears the failure count of `key` (after it succeeded).
    pub fn forget<Q: Hash + Eq + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        self.state().failures.remove(key);
    }

    /// How many times in a row `key` has failed.
    pub fn num_requeues<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
    {
        self.state().failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next ready key, or None once the queue is shut down. The key must be
    /// given back with [`done`](Self::done).
    pub async fn get(&self) -> Option<K> {
        self.get_why().await.map(|(key, _)| key)
    }

    /// [`get`](Self::get), with why the key was queued.
    pub async fn get_why(&self) -> Option<(K, Why)> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register before looking, so an add between the look and the wait is not lost.
            notified.as_mut().enable();
            let next_deadline = {
                let mut st = self.state();
                if st.shut_down {
                    return None;
                }
                let before = st.dirty.len();
                let promoted = st.promote_due(Instant::now());
                if let Some(m) = &self.inner.metrics
                    && promoted > 0
                {
                    m.adds.inc_by(st.dirty.len().saturating_sub(before) as u64);
                }
                if let Some(key) = st.pop() {
                    self.depth(&st);
                    st.dirty.remove(&key);
                    let why = st.why.remove(&key).unwrap_or("added");
                    st.processing.insert(key.clone());
                    // Pass the baton: another worker may take the next key, or must
                    // take over waiting for the next delayed one while we are busy.
                    let more = st.ready() > 0 || !st.delayed.is_empty();
                    drop(st);
                    if more {
                        self.inner.notify.notify_one();
                    }
                    return Some((key, why));
                }
                st.timers.first().map(|(t, _)| *t)
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as processed; if it was added meanwhile it is queued again.
    pub fn done<Q: Hash + Eq + ToOwned<Owned = K> + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        let requeued = {
            let mut st = self.state();
            st.processing.remove(key);
            let requeued = if st.dirty.contains(key) && !st.shut_down {
                let why = st.why.get(key).copied().unwrap_or("added");
                st.push(key.to_owned(), why);
                true
            } else {
                false
            };
            if st.dirty.is_empty() && st.processing.is_empty() {
                st.release();
            }
            self.depth(&st);
            requeued
        };
        if requeued {
            self.inner.notify.notify_one();
        }
    }

    /// Stops handing out keys: every current and future `get` returns None; adds are ignored.
    pub fn shutdown(&self) {
        self.state().shut_down = true;
        self.inner.notify.notify_waiters();
    }

    pub fn is_shut_down(&self) -> bool {
        self.state().shut_down
    }

    /// Keys ready to be handed out now (not counting delayed or in-flight ones).
    pub fn len(&self) -> usize {
        self.state().ready()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys ready or waiting for their time ([`add_after`](Self::add_after)).
    pub fn pending(&self) -> usize {
        let st = self.state();
        st.ready() + st.delayed.len()
    }
}

/// The back-off before retry number `failures` (1-based).
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(32);
    BASE_DELAY
        .checked_mul(1u32 << exp.min(31))
        .map_or(MAX_DELAY, |d| d.min(MAX_DELAY))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The semantics do not depend on the key type: strings read best.
    type WorkQueue = super::WorkQueue<String>;

    /// `get` that must return at once (the key is ready).
    async fn get_now(q: &WorkQueue) -> String {
        tokio::time::timeout(Duration::from_millis(1), q.get())
            .await
            .expect("a ready key")
            .expect("not shut down")
    }

    /// `get_why` that must return within a minute (paused time: as soon as a key is due).
    async fn next_why(q: &WorkQueue) -> (String, Why) {
        tokio::time::timeout(Duration::from_secs(60), q.get_why())
            .await
            .expect("a key within a minute")
            .expect("not shut down")
    }

    async fn nothing_ready(q: &WorkQueue, within: Duration) {
        assert!(
            tokio::time::timeout(within, q.get()).await.is_err(),
            "expected no key within {within:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn resync_keys_wait_behind_changes_and_move_up_when_wanted() {
        let q = WorkQueue::new();
        let next = || next_why(&q);
        // A restart's resync queues a, b, c; then a change queues d: d goes first.
        for k in ["a", "b", "c"] {
            q.add_why(k, RESYNC);
        }
        q.add_why("d", "changed");
        assert_eq!(q.len(), 4);
        assert_eq!(next().await, ("d".to_owned(), "changed"));
        q.done("d");
        // A change to c (queued by the resync) moves it ahead of a and b, once.
        q.add_why("c", "watched");
        assert_eq!(next().await, ("c".to_owned(), "watched"));
        q.done("c");
        assert_eq!(next().await, ("a".to_owned(), RESYNC));
        // A resync key in flight that is wanted meanwhile comes back in the front lane,
        // ahead of b, with the new reason.
        q.add_why("a", RESYNC);
        q.add_why("a", "changed");
        q.done("a");
        assert_eq!(next().await, ("a".to_owned(), "changed"));
        q.done("a");
        assert_eq!(next().await, ("b".to_owned(), RESYNC));
        q.done("b");
        // Nothing is handed out twice (c's old place in the background lane is skipped).
        assert!(q.is_empty());
        nothing_ready(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_queue_gives_its_burst_memory_back() {
        let q = WorkQueue::new();
        let capacities = |q: &WorkQueue| {
            let st = q.state();
            [
                st.queue.capacity(),
                st.dirty.capacity(),
                st.processing.capacity(),
                st.why.capacity(),
            ]
        };
        for i in 0..1000 {
            q.add(format!("k{i}"));
        }
        let burst = capacities(&q);
        assert!(burst.iter().take(2).all(|&c| c >= 1000), "{burst:?}");
        // Two in flight: the last `done` leaves the queue empty.
        let mut held = Vec::new();
        for _ in 0..1000 {
            held.push(get_now(&q).await);
            if held.len() == 2 {
                for k in held.drain(..) {
                    q.done(&k);
                }
            }
        }
        assert!(q.is_empty());
        assert_eq!(capacities(&q), [0, 0, 0, 0]);
        // And it still works.
        q.add("again");
        assert_eq!(get_now(&q).await, "again");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_come_with_the_first_reason_since_handed_out() {
        let q = WorkQueue::new();
        let next = || next_why(&q);
        // (adds before the get, the reason expected)
        q.add_why("a", "changed");
        q.add_why("a", "owner");
        assert_eq!(next().await, ("a".to_owned(), "changed"));
        // Added while in flight: handed out after `done`, with that reason.
        q.add_why("a", "watched");
        q.done("a");
        assert_eq!(next().await, ("a".to_owned(), "watched"));
        q.done("a");
        q.add_after("b", Duration::from_secs(1));
        assert_eq!(next().await, ("b".to_owned(), "requeue"));
        q.done("b");
        q.add_rate_limited("c");
        assert_eq!(next().await, ("c".to_owned(), "retry"));
        q.done("c");
        q.add("d");
        assert_eq!(next().await, ("d".to_owned(), "added"));
    }

    #[tokio::test(start_paused = true)]
    async fn dedupes_while_queued() {
        let q = WorkQueue::new();
        q.add("ns/a");
        q.add("ns/b");
        q.add("ns/a");
        assert_eq!(q.len(), 2);
        assert_eq!(get_now(&q).await, "ns/a");
        assert_eq!(get_now(&q).await, "ns/b");
        nothing_ready(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_in_flight_is_not_handed_out_again_until_done() {
        let q = WorkQueue::new();
        q.add("ns/a");
        let k = get_now(&q).await;
        q.add("ns/a");
        q.add("ns/a");
        assert_eq!(q.len(), 0, "held back while processing");
        nothing_ready(&q, Duration::from_secs(1)).await;
        q.done(&k);
        assert_eq!(get_now(&q).await, "ns/a", "re-queued once after done");
        q.done("ns/a");
        nothing_ready(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_new_add_does_not_requeue() {
        let q = WorkQueue::new();
        q.add("k");
        let k = get_now(&q).await;
        q.done(&k);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_worker_wakes_on_add() {
        let q = WorkQueue::new();
        let q2 = q.clone();
        let h = tokio::spawn(async move { q2.get().await });
        tokio::time::sleep(Duration::from_secs(5)).await;
        q.add("late");
        assert_eq!(h.await.unwrap().as_deref(), Some("late"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_waits_and_earliest_wins() {
        let q = WorkQueue::new();
        q.add_after("k", Duration::from_secs(10));
        q.add_after("k", Duration::from_secs(3));
        q.add_after("k", Duration::from_secs(20));
        let start = Instant::now();
        assert_eq!(q.get().await.as_deref(), Some("k"));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        q.done("k");
        nothing_ready(&q, Duration::from_secs(60)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn settled_adds_of_a_moment_are_one_run() {
        let settle = Duration::from_millis(200);
        let q = WorkQueue::new();
        // Three adds within the settle time: one key waiting, from the first.
        let t0 = Instant::now();
        for _ in 0..3 {
            q.add_settled("a", settle, "changed");
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        assert_eq!((q.len(), q.pending()), (0, 1));
        assert_eq!(q.get().await.as_deref(), Some("a"));
        assert_eq!(
            Instant::now() - t0,
            settle,
            "run once the first add settled"
        );
        // An add while it runs waits its own settle time; one while it is ready anyway
        // (here: to run again after this run) adds nothing.
        q.add_settled("a", settle, "changed");
        assert_eq!(q.pending(), 1);
        q.add("a");
        q.add_settled("a", settle, "changed");
        q.done("a");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        // The settled add from while it ran is still due: one more run, then nothing.
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        assert_eq!(q.pending(), 0);
        // A ready key is not delayed by a settled add.
        q.add("b");
        q.add_settled("b", settle, "changed");
        assert_eq!((q.len(), q.pending()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_key_added_while_waiting_for_another_is_seen() {
        let q = WorkQueue::new();
        q.add_after("slow", Duration::from_secs(100));
        let q2 = q.clone();
        let h = tokio::spawn(async move { q2.get().await });
        tokio::task::yield_now().await;
        q.add_after("fast", Duration::from_secs(1));
        assert_eq!(h.await.unwrap().as_deref(), Some("fast"));
    }

    #[test]
    fn backoff_grows_and_caps() {
        let cases = [
            (1, Duration::from_millis(10)),
            (2, Duration::from_millis(20)),
            (3, Duration::from_millis(40)),
            (10, Duration::from_millis(5120)),
            (13, MAX_DELAY),
            (100, MAX_DELAY),
            (u32::MAX, MAX_DELAY),
        ];
        for (n, want) in cases {
            assert_eq!(backoff(n), want, "failure {n}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_backs_off_and_forget_resets() {
        let q = WorkQueue::new();
        for want_ms in [10u64, 20, 40] {
            let start = Instant::now();
            q.add_rate_limited("k");
            assert_eq!(q.get().await.as_deref(), Some("k"));
            assert_eq!(start.elapsed(), Duration::from_millis(want_ms));
            q.done("k");
        }
        assert_eq!(q.num_requeues("k"), 3);
        q.forget("k");
        assert_eq!(q.num_requeues("k"), 0);
        let start = Instant::now();
        q.add_rate_limited("k");
        q.get().await;
        assert_eq!(start.elapsed(), BASE_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_waiters_and_ignores_adds() {
        let q = WorkQueue::new();
        let q2 = q.clone();
        let h = tokio::spawn(async move { q2.get().await });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(h.await.unwrap(), None);
        q.add("k");
        assert_eq!(q.get().await, None);
        assert!(q.is_shut_down());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_workers_never_share_a_key() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let q = WorkQueue::new();
        let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
        let processed = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, in_flight, processed) = (q.clone(), in_flight.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert!(
                        in_flight.lock().unwrap().insert(k.clone()),
                        "{k} twice at once"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    in_flight.lock().unwrap().remove(&k);
                    processed.fetch_add(1, Ordering::SeqCst);
                    q.done(&k);
                }
            }));
        }
        for round in 0..20 {
            for k in ["a", "b", "c"] {
                q.add(k);
            }
            tokio::time::sleep(Duration::from_millis(if round % 2 == 0 { 1 } else { 7 })).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.shutdown();
        for w in workers {
            w.await.unwrap();
        }
        assert!(processed.load(Ordering::SeqCst) >= 3);
    }
}
