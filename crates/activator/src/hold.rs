//! The activator's hold queue for one revision: requests wait here while the revision has
//! no replica to send them to, or — with the activator in the path (Proxy mode) and
//! containerConcurrency ≥ 1 — while every replica is at capacity (Knative's `pkg/activator/net/throttler.go`: queue depth
//! 10 000 per revision, 503 when full, 504 `activator request timeout` at the revision's
//! timeout).
//!
//! A waiter registers (bounded: over the bound it is refused at once), then waits for a
//! release or for its deadline. [`Hold::release_all`] — called by the endpoint sync whenever
//! replicas become available — wakes everyone, oldest first; [`Hold::wake_one`] — called when
//! a throttled request frees its replica slot — wakes the oldest waiter only, so a freed slot
//! goes to the request that waited longest instead of a thundering herd. A waiter that was
//! woken but gives up (deadline, client gone) passes its wake-up on to the next one, so a
//! freed slot is never lost. A waiter woken alone ([`Wake::One`]) that loses the race for the
//! slot re-registers at the front ([`Hold::register_at`]), keeping its place; after
//! [`Hold::release_all`] the losers re-register at the back, in their order.
//!
//! Registration is separate from waiting so the caller can register *first* and then
//! re-check what it waits for: a release between the check and the wait can then never be
//! missed. (`waiting` is updated and read with `SeqCst` so that [`Hold::wake_one`]'s
//! "anybody waiting?" shortcut pairs with the waiter's re-check.)

use std::{
    collections::VecDeque,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::{sync::oneshot, time::Instant};

/// Why a wait ended without a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldError {
    /// The deadline passed first.
    Timeout,
    /// The revision went away.
    Closed,
}

/// How a waiter was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Everyone was ([`Hold::release_all`]: replicas became available).
    All,
    /// This waiter alone, the oldest ([`Hold::release_one`]: a slot was freed). One that
    /// loses the race for the slot should re-register at the front.
    One,
}

/// The hold queue of one revision.
#[derive(Debug)]
pub struct Hold {
    bound: usize,
    waiting: AtomicUsize,
    /// Requests ever held (for the "held in the last second" stat).
    held_total: AtomicU64,
    closed: AtomicBool,
    /// Senders of registered waiters, in arrival order (closed ones are pruned lazily).
    queue: Mutex<VecDeque<oneshot::Sender<Wake>>>,
}

/// A registered waiter; dropping it leaves the queue (passing on a wake-up it received but
/// did not consume).
#[derive(Debug)]
pub struct Waiter<'a> {
    hold: &'a Hold,
    rx: oneshot::Receiver<Wake>,
    consumed: bool,
}

impl Hold {
    /// A hold queue admitting at most `bound` waiters at once.
    pub fn new(bound: usize) -> Self {
        Hold {
            bound,
            waiting: AtomicUsize::new(0),
            held_total: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Requests held since the start (monotonic; diff it per interval).
    pub fn held_total(&self) -> u64 {
        self.held_total.load(Ordering::Relaxed)
    }

    /// Registers a waiter, or None when `bound` requests are already waiting. `first` says
    /// whether this request is held for the first time (it counts in `held_total` once).
    pub fn register(&self, first: bool) -> Option<Waiter<'_>> {
        self.register_at(first, false)
    }

    /// [`register`](Self::register), at the front of the queue when `front` (a woken waiter
    /// that lost the race for what it was woken for keeps its place).
    pub fn register_at(&self, first: bool, front: bool) -> Option<Waiter<'_>> {
        let admitted = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.bound).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return None;
        }
        if first {
            self.held_total.fetch_add(1, Ordering::Relaxed);
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut q = self.lock();
            // Waiters that gave up leave their sender behind; drop those now and then so the
            // queue stays bounded by roughly twice the bound.
            if q.len() >= self.bound.saturating_mul(2).max(64) {
                q.retain(|s| !s.is_closed());
            }
            if front {
                q.push_front(tx);
            } else {
                q.push_back(tx);
            }
        }
        Some(Waiter {
            hold: self,
            rx,
            consumed: false,
        })
    }

    /// Releases every registered waiter, oldest first (replicas became available).
    pub fn release_all(&self) {
        let released: VecDeque<_> = std::mem::take(&mut *self.lock());
        for tx in released {
            let _ = tx.send(Wake::All);
        }
    }

    /// Wakes the oldest waiter still waiting; returns whether there was one.
    pub fn release_one(&self) -> bool {
        let mut q = self.lock();
        while let Some(tx) = q.pop_front() {
            // Fails only for a waiter that already gave up: try the next one.
            if tx.send(Wake::One).is_ok() {
                return true;
            }
        }
        false
    }

    /// [`release_one`](Self::release_one) if anybody is waiting (one atomic load otherwise):
    /// a capacity slot was freed.
    pub fn wake_one(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.release_one();
        }
    }

    /// The revision is gone: every waiter (now and later) ends with [`HoldError::Closed`].
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Dropping the senders wakes the receivers with an error.
        drop(std::mem::take(&mut *self.lock()));
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<oneshot::Sender<Wake>>> {
        wisp_sync::lock(&self.queue)
    }
}

impl Waiter<'_> {
    /// Waits until released, or fails at `deadline` (or when the revision closes).
    pub async fn wait(mut self, deadline: Instant) -> Result<Wake, HoldError> {
        if self.hold.is_closed() {
            return Err(HoldError::Closed);
        }
        let r = tokio::select! {
            r = &mut self.rx => r.map_err(|_| HoldError::Closed),
            _ = tokio::time::sleep_until(deadline) => Err(HoldError::Timeout),
        };
        self.consumed = r.is_ok();
        r
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.hold.waiting.fetch_sub(1, Ordering::SeqCst);
        if !self.consumed {
            // Closing first makes any later send fail, so a wake-up is either seen here or
            // goes to someone else: never lost in between.
            self.rx.close();
            // Only a single wake-up needs passing on: `All` reached everyone anyway.
            if self.rx.try_recv() == Ok(Wake::One) {
                self.hold.release_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::*;

    #[test]
    fn bounded() {
        let h = Hold::new(2);
        let a = h.register(true).unwrap();
        let _b = h.register(true).unwrap();
        assert_eq!(h.waiting(), 2);
        assert!(h.register(true).is_none(), "the third is refused at once");
        drop(a);
        assert_eq!(h.waiting(), 1);
        assert!(h.register(false).is_some());
        assert_eq!(h.held_total(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn times_out_at_the_deadline() {
        let h = Hold::new(10);
        let start = Instant::now();
        let w = h.register(true).unwrap();
        let r = w.wait(start + Duration::from_secs(300)).await;
        assert_eq!(r, Err(HoldError::Timeout));
        assert_eq!(start.elapsed(), Duration::from_secs(300));
        assert_eq!(h.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn releases_in_order() {
        let h = Arc::new(Hold::new(100));
        let order = Arc::new(Mutex::new(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (h, order) = (h.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let w = h.register(true).unwrap();
                w.wait(deadline).await.unwrap();
                order.lock().unwrap().push(i);
            }));
            // Let the task register before the next one.
            tokio::task::yield_now().await;
        }
        while h.waiting() < 5 {
            tokio::task::yield_now().await;
        }
        h.release_all();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(h.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn release_before_wait_is_not_lost() {
        let h = Hold::new(1);
        let w = h.register(true).unwrap();
        h.release_all();
        let r = w.wait(Instant::now() + Duration::from_secs(1)).await;
        assert_eq!(r, Ok(Wake::All));
    }

    #[tokio::test(start_paused = true)]
    async fn close_ends_waiters() {
        let h = Hold::new(1);
        let w = h.register(true).unwrap();
        h.close();
        assert_eq!(
            w.wait(Instant::now() + Duration::from_secs(1)).await,
            Err(HoldError::Closed)
        );
        let w = h.register(true).unwrap();
        assert_eq!(
            w.wait(Instant::now() + Duration::from_secs(1)).await,
            Err(HoldError::Closed)
        );
    }

    #[test]
    fn abandoned_waiters_are_pruned() {
        let h = Hold::new(10);
        for _ in 0..1000 {
            drop(h.register(true).unwrap());
        }
        assert!(h.lock().len() <= 64, "{}", h.lock().len());
    }

    #[tokio::test(start_paused = true)]
    async fn release_one_wakes_the_oldest_and_front_keeps_the_place() {
        let h = Hold::new(10);
        let soon = || Instant::now() + Duration::from_millis(10);
        let a = h.register(true).unwrap();
        let b = h.register(true).unwrap();
        // A woken waiter re-registering goes before everyone.
        let c = h.register_at(false, true).unwrap();
        assert_eq!(h.waiting(), 3);
        assert!(h.release_one());
        assert_eq!(c.wait(soon()).await, Ok(Wake::One));
        assert!(h.release_one());
        assert_eq!(a.wait(soon()).await, Ok(Wake::One));
        h.wake_one();
        assert_eq!(b.wait(soon()).await, Ok(Wake::One));
        assert!(!h.release_one(), "nobody left");
        assert_eq!(h.held_total(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_not_taken_passes_on() {
        let h = Hold::new(10);
        let soon = || Instant::now() + Duration::from_millis(10);
        let a = h.register(true).unwrap();
        let b = h.register(true).unwrap();
        // `a` gave up (deadline, client gone) with a wake-up delivered: `b` gets it.
        assert!(h.release_one());
        drop(a);
        assert_eq!(b.wait(soon()).await, Ok(Wake::One));
        // Given up before any wake-up: the next wake goes to the next waiter.
        let c = h.register(true).unwrap();
        let d = h.register(true).unwrap();
        drop(c);
        assert!(h.release_one());
        assert_eq!(d.wait(soon()).await, Ok(Wake::One));
        assert_eq!(h.waiting(), 0);
    }
}
