//! The containerConcurrency breaker (Knative `pkg/queue/breaker.go`).
//!
//! At most `concurrency` requests hold a [`Permit`] at once; up to `queue_depth` more wait
//! in FIFO order (tokio's [`Semaphore`] is fair); anything beyond `concurrency + queue_depth`
//! is refused at once with [`QueueFull`] so that overload sheds load instead of growing an
//! unbounded queue.
//!
//! Everything is an RAII guard, so a waiter whose future is dropped (client gone, timeout)
//! leaves the queue without taking a slot, and a permit returns its slot however the request
//! ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request was refused because `concurrency + queue_depth` requests are already admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pending request queue full")]
pub struct QueueFull;

/// A concurrency limiter with a bounded FIFO queue. Cheap to share behind an `Arc`; all
/// operations are lock-free except the semaphore's own wait list.
#[derive(Debug)]
pub struct Breaker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sem: Arc<Semaphore>,
    concurrency: usize,
    /// `concurrency + queue_depth`: how many requests may be admitted (running or waiting).
    total_slots: usize,
    /// Requests admitted (running or waiting). Bounded by `total_slots` with a CAS, which is
    /// what makes the overflow check exact under contention.
    pending: AtomicUsize,
    /// Requests waiting for a permit (for `queued()`; `pending - in_flight` would be racy).
    waiting: AtomicUsize,
}

/// The right to run one request. Dropping it frees the slot (and wakes the next waiter).
#[derive(Debug)]
pub struct Permit {
    _sem: OwnedSemaphorePermit,
    _pending: PendingSlot,
}

/// One admitted (`pending`) slot; released on drop.
#[derive(Debug)]
struct PendingSlot(Arc<Inner>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts a waiter for as long as it waits (dropped on success or cancellation).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Breaker {
    /// A breaker running at most `concurrency` requests with up to `queue_depth` waiting.
    /// Knative uses `queue_depth = 10 × concurrency`.
    ///
    /// # Panics
    /// If `concurrency` is 0 (unlimited concurrency means no breaker at all).
    pub fn new(concurrency: u32, queue_depth: u32) -> Self {
        assert!(concurrency > 0, "a breaker needs concurrency >= 1");
        let concurrency = concurrency as usize;
        Self {
            inner: Arc::new(Inner {
                sem: Arc::new(Semaphore::new(concurrency)),
                concurrency,
                total_slots: concurrency + queue_depth as usize,
                pending: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// A permit if one is free right now (never queues). Knative's `Reserve`.
    pub fn try_acquire(&self) -> Option<Permit> {
        let pending = self.reserve_pending()?;
        // A free permit is only visible when nobody waits (released permits go to waiters
        // first), so this cannot jump the queue.
        let sem = self.inner.sem.clone().try_acquire_owned().ok()?;
        Some(Permit {
            _sem: sem,
            _pending: pending,
        })
    }

    /// Waits for a permit in FIFO order, or fails at once with [`QueueFull`] when
    /// `concurrency + queue_depth` requests are already admitted. Cancellation-safe: dropping
    /// the future while it waits gives back the queue slot and takes no permit.
    pub async fn acquire(&self) -> Result<Permit, QueueFull> {
        let pending = self.reserve_pending().ok_or(QueueFull)?;
        let sem = match self.inner.sem.clone().try_acquire_owned() {
            Ok(sem) => sem,
            Err(_) => {
                self.inner.waiting.fetch_add(1, Ordering::AcqRel);
                let _waiting = Waiting(&self.inner.waiting);
                // Dropping tokio's `Acquire` future unlinks the waiter and returns any permit
                // already handed to it, so cancellation here leaks nothing.
                self.inner
                    .sem
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the breaker never closes its semaphore")
            }
        };
        Ok(Permit {
            _sem: sem,
            _pending: pending,
        })
    }

    /// Requests holding a permit.
    pub fn in_flight(&self) -> usize {
        self.inner.concurrency - self.inner.sem.available_permits()
    }

    /// Requests waiting for a permit.
    pub fn queued(&self) -> usize {
        self.inner.waiting.load(Ordering::Acquire)
    }

    /// The concurrency limit.
    pub fn capacity(&self) -> usize {
        self.inner.concurrency
    }

    fn reserve_pending(&self) -> Option<PendingSlot> {
        let inner = &self.inner;
        inner
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p < inner.total_slots).then_some(p + 1)
            })
            .ok()?;
        Some(PendingSlot(inner.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// Polls a future once without a runtime (the breaker never needs one).
    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn admits_up_to_concurrency_then_try_acquire_fails() {
        for cc in [1u32, 2, 5] {
            let b = Breaker::new(cc, 10 * cc);
            let permits: Vec<_> = (0..cc).map(|_| b.try_acquire().unwrap()).collect();
            assert_eq!(b.in_flight(), cc as usize);
            assert!(b.try_acquire().is_none(), "cc={cc}");
            // A failed try_acquire must not keep its pending slot.
            assert_eq!(b.inner.pending.load(Ordering::Acquire), cc as usize);
            drop(permits);
            assert_eq!(b.in_flight(), 0);
            assert_eq!(b.inner.pending.load(Ordering::Acquire), 0);
        }
    }

    #[tokio::test]
    async fn queues_ten_times_cc_then_rejects_at_once() {
        // (concurrency, queue depth): total admitted = cc + depth.
        for (cc, depth) in [(1u32, 10u32), (2, 20), (3, 0)] {
            let b = Breaker::new(cc, depth);
            let running: Vec<_> = (0..cc).map(|_| b.try_acquire().unwrap()).collect();
            let mut waiters: Vec<_> = (0..depth).map(|_| Box::pin(b.acquire())).collect();
            for w in &mut waiters {
                assert!(poll_once(w.as_mut()).is_pending());
            }
            assert_eq!(b.queued(), depth as usize);
            assert_eq!(b.in_flight(), cc as usize);
            // The next one is refused without waiting.
            let next = pin!(b.acquire());
            assert_eq!(
                poll_once(next).map(|r| r.err()),
                Poll::Ready(Some(QueueFull))
            );
            drop(waiters);
            drop(running);
            assert_eq!((b.queued(), b.in_flight()), (0, 0));
        }
    }

    #[tokio::test]
    async fn releases_go_to_waiters_in_fifo_order() {
        let b = Breaker::new(1, 10);
        let first = b.try_acquire().unwrap();
        let mut a = Box::pin(b.acquire());
        let mut c = Box::pin(b.acquire());
        assert!(poll_once(a.as_mut()).is_pending());
        assert!(poll_once(c.as_mut()).is_pending());
        // A newcomer cannot take the freed slot ahead of the queue.
        drop(first);
        assert!(b.try_acquire().is_none());
        let Poll::Ready(Ok(pa)) = poll_once(a.as_mut()) else {
            panic!("first waiter should get the permit")
        };
        assert!(poll_once(c.as_mut()).is_pending());
        drop(pa);
        assert!(matches!(poll_once(c.as_mut()), Poll::Ready(Ok(_))));
    }

    #[tokio::test]
    async fn cancelled_waiters_free_their_queue_slot_and_take_no_permit() {
        let b = Breaker::new(1, 2);
        let running = b.try_acquire().unwrap();
        let mut w1 = Box::pin(b.acquire());
        let mut w2 = Box::pin(b.acquire());
        assert!(poll_once(w1.as_mut()).is_pending());
        assert!(poll_once(w2.as_mut()).is_pending());
        assert!(poll_once(pin!(b.acquire())).is_ready(), "queue is full");

        // The client of w1 goes away: its queue slot is free again.
        drop(w1);
        assert_eq!(b.queued(), 1);
        let mut w3 = Box::pin(b.acquire());
        assert!(poll_once(w3.as_mut()).is_pending());

        // Release: the permit was handed to w2 (assigned inside the semaphore) but w2 is
        // dropped before it observed it — the permit must come back, not leak.
        drop(running);
        drop(w2);
        let Poll::Ready(Ok(p3)) = poll_once(w3.as_mut()) else {
            panic!("w3 should get the permit w2 gave back")
        };
        assert_eq!((b.in_flight(), b.queued()), (1, 0));
        drop(p3);
        assert_eq!((b.in_flight(), b.queued()), (0, 0));
        assert_eq!(b.inner.pending.load(Ordering::Acquire), 0);
        assert_eq!(b.inner.sem.available_permits(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn many_concurrent_tasks_never_exceed_capacity() {
        let b = Arc::new(Breaker::new(3, 30));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..33 {
            let (b, peak) = (b.clone(), peak.clone());
            tasks.push(tokio::spawn(async move {
                let _p = b.acquire().await.expect("33 = 3 + 30 fit");
                peak.fetch_max(b.in_flight(), Ordering::AcqRel);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }));
        }
        // Let all 33 be admitted before the 34th arrives.
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        assert_eq!(b.acquire().await.err(), Some(QueueFull));
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(peak.load(Ordering::Acquire), 3);
        assert_eq!((b.in_flight(), b.queued()), (0, 0));
    }

    #[test]
    #[should_panic(expected = "concurrency >= 1")]
    fn zero_concurrency_is_a_programming_error() {
        let _ = Breaker::new(0, 0);
    }
}
