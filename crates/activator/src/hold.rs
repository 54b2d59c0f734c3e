//! The activator's hold queue for one revision: requests wait here while the revision has
//! no replica to send them to (reference §8: queue depth 10 000 per revision, 503 when full,
//! 504 `activator request timeout` at the revision's timeout).
//!
//! A waiter registers (bounded: over the bound it is refused at once), then waits for
//! [`Hold::release_all`] — called by the endpoint sync whenever replicas become available —
//! or for its deadline. Waiters are released in arrival order. Registration is separate from
//! waiting so the caller can register *first* and then re-check the replica set: a release
//! between the check and the wait can then never be missed.

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

/// The hold queue of one revision.
#[derive(Debug)]
pub struct Hold {
    bound: usize,
    waiting: AtomicUsize,
    /// Requests ever held (for the "held in the last second" stat).
    held_total: AtomicU64,
    closed: AtomicBool,
    /// Senders of registered waiters, in arrival order (closed ones are pruned lazily).
    queue: Mutex<VecDeque<oneshot::Sender<()>>>,
}

/// A registered waiter; dropping it leaves the queue.
#[derive(Debug)]
pub struct Waiter<'a> {
    hold: &'a Hold,
    rx: oneshot::Receiver<()>,
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
        let admitted = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
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
            q.push_back(tx);
        }
        Some(Waiter { hold: self, rx })
    }

    /// Releases every registered waiter, oldest first (replicas became available).
    pub fn release_all(&self) {
        let released: VecDeque<_> = std::mem::take(&mut *self.lock());
        for tx in released {
            let _ = tx.send(());
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

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<oneshot::Sender<()>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Waiter<'_> {
    /// Waits until released, or fails at `deadline` (or when the revision closes).
    pub async fn wait(mut self, deadline: Instant) -> Result<(), HoldError> {
        if self.hold.is_closed() {
            return Err(HoldError::Closed);
        }
        tokio::select! {
            r = &mut self.rx => r.map_err(|_| HoldError::Closed),
            _ = tokio::time::sleep_until(deadline) => Err(HoldError::Timeout),
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.hold.waiting.fetch_sub(1, Ordering::AcqRel);
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
        assert_eq!(r, Ok(()));
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
}
