//! Load-balancing policies by containerConcurrency (Knative's
//! `pkg/activator/net/lb_policy.go`):
//!
//! - CC = 0: **random choice of two** — two distinct random replicas, the one with fewer
//!   requests in flight wins, ties broken at random.
//! - CC 1–3: **first available** — scan the replicas in order, take the first with a free
//!   slot.
//! - CC > 3: **round robin** over the replicas with a free slot.
//!
//! With the activator in the path (Proxy mode) a pick without a free slot is not used: the
//! request waits in the activator instead (`backend`). In Serve mode, when no replica has a
//! free slot the request still goes somewhere, so that the chosen replica's queue (10 × CC
//! deep) holds it or sheds it with a 503: round robin keeps rotating ignoring capacity;
//! first available (which would otherwise pile everything on the first replica) takes the
//! replica with the fewest requests in flight, first in order on ties. The policies only
//! read the replicas' counters: the queue's breaker is what enforces CC, so a lost race
//! between "has a free slot" and admission just queues.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use rand::Rng;

/// What a policy needs to know about a replica.
pub trait Slot {
    /// Requests this process has in flight to the replica (queued ones included).
    fn in_flight(&self) -> usize;
    /// Whether one more request would start at once (below containerConcurrency).
    fn has_free_slot(&self) -> bool;
}

impl<T: Slot + ?Sized> Slot for Arc<T> {
    fn in_flight(&self) -> usize {
        (**self).in_flight()
    }
    fn has_free_slot(&self) -> bool {
        (**self).has_free_slot()
    }
}

impl<T: Slot + ?Sized> Slot for &T {
    fn in_flight(&self) -> usize {
        (**self).in_flight()
    }
    fn has_free_slot(&self) -> bool {
        (**self).has_free_slot()
    }
}

/// The three policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    RandomOfTwo,
    FirstAvailable,
    RoundRobin,
}

impl Policy {
    /// Knative's choice for a revision's containerConcurrency.
    pub fn for_cc(cc: u32) -> Policy {
        match cc {
            0 => Policy::RandomOfTwo,
            1..=3 => Policy::FirstAvailable,
            _ => Policy::RoundRobin,
        }
    }
}

/// A policy and its state (the round-robin position). Shared by all requests of a revision.
#[derive(Debug)]
pub struct Balancer {
    policy: Policy,
    next: AtomicUsize,
}

impl Balancer {
    pub fn new(policy: Policy) -> Self {
        Balancer {
            policy,
            next: AtomicUsize::new(0),
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The index of the replica to send the next request to (None when `replicas` is empty).
    pub fn pick<T: Slot>(&self, replicas: &[T]) -> Option<usize> {
        let n = replicas.len();
        match n {
            0 => return None,
            1 => return Some(0),
            _ => {}
        }
        match self.policy {
            Policy::RandomOfTwo => {
                let mut rng = rand::rng();
                let a = rng.random_range(0..n);
                // A second, distinct index.
                let b = (a + rng.random_range(1..n)) % n;
                let (fa, fb) = (replicas[a].in_flight(), replicas[b].in_flight());
                Some(match fa.cmp(&fb) {
                    std::cmp::Ordering::Less => a,
                    std::cmp::Ordering::Greater => b,
                    std::cmp::Ordering::Equal => {
                        if rng.random::<bool>() {
                            a
                        } else {
                            b
                        }
                    }
                })
            }
            Policy::FirstAvailable => Some(
                replicas
                    .iter()
                    .position(Slot::has_free_slot)
                    .unwrap_or_else(|| least_loaded(replicas)),
            ),
            Policy::RoundRobin => {
                let start = self.next.load(Ordering::Relaxed);
                for i in 0..n {
                    let idx = start.wrapping_add(i) % n;
                    if replicas[idx].has_free_slot() {
                        self.next.store(idx.wrapping_add(1), Ordering::Relaxed);
                        return Some(idx);
                    }
                }
                // Nobody has room: keep rotating, the replica's queue holds the request.
                let idx = self.next.fetch_add(1, Ordering::Relaxed) % n;
                Some(idx)
            }
        }
    }
}

/// The replica with the fewest requests in flight (the first on ties).
fn least_loaded<T: Slot>(replicas: &[T]) -> usize {
    let mut best = 0;
    for (i, r) in replicas.iter().enumerate().skip(1) {
        if r.in_flight() < replicas[best].in_flight() {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fake {
        in_flight: usize,
        cc: usize,
    }

    impl Slot for Fake {
        fn in_flight(&self) -> usize {
            self.in_flight
        }
        fn has_free_slot(&self) -> bool {
            self.cc == 0 || self.in_flight < self.cc
        }
    }

    fn fakes(cc: usize, loads: &[usize]) -> Vec<Fake> {
        loads
            .iter()
            .map(|&in_flight| Fake { in_flight, cc })
            .collect()
    }

    #[test]
    fn policy_by_cc() {
        assert_eq!(Policy::for_cc(0), Policy::RandomOfTwo);
        for cc in 1..=3 {
            assert_eq!(Policy::for_cc(cc), Policy::FirstAvailable);
        }
        assert_eq!(Policy::for_cc(4), Policy::RoundRobin);
        assert_eq!(Policy::for_cc(1000), Policy::RoundRobin);
    }

    #[test]
    fn empty_and_single() {
        for p in [
            Policy::RandomOfTwo,
            Policy::FirstAvailable,
            Policy::RoundRobin,
        ] {
            let b = Balancer::new(p);
            assert_eq!(b.pick::<Fake>(&[]), None);
            assert_eq!(b.pick(&fakes(1, &[5])), Some(0));
        }
    }

    #[test]
    fn random_of_two_prefers_fewer_in_flight() {
        let b = Balancer::new(Policy::RandomOfTwo);
        // Two replicas: the pair is always both, so the idle one always wins.
        let two = fakes(0, &[10, 0]);
        for _ in 0..1000 {
            assert_eq!(b.pick(&two), Some(1));
        }
        // Three: the busiest one can only win a pair against... nobody: it never wins.
        let three = fakes(0, &[0, 50, 0]);
        let mut counts = [0; 3];
        for _ in 0..3000 {
            counts[b.pick(&three).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0, "{counts:?}");
        // Ties are random: both idle replicas get a fair share.
        assert!(counts[0] > 1200 && counts[2] > 1200, "{counts:?}");
        // The least loaded of all is picked whenever it is in the pair (2/3 of the time).
        let graded = fakes(0, &[1, 2, 3]);
        let mut counts = [0; 3];
        for _ in 0..3000 {
            counts[b.pick(&graded).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0, "the busiest never wins a pair: {counts:?}");
        assert!(counts[0] > 1800, "{counts:?}");
    }

    #[test]
    fn first_available_scans_in_order() {
        let b = Balancer::new(Policy::FirstAvailable);
        assert_eq!(b.pick(&fakes(2, &[0, 0, 0])), Some(0));
        assert_eq!(b.pick(&fakes(2, &[2, 1, 0])), Some(1));
        assert_eq!(b.pick(&fakes(2, &[2, 2, 0])), Some(2));
        // Nobody has room: the least loaded, first on ties.
        assert_eq!(b.pick(&fakes(2, &[5, 3, 4])), Some(1));
        assert_eq!(b.pick(&fakes(2, &[3, 3, 3])), Some(0));
    }

    #[test]
    fn round_robin_rotates_over_free_slots() {
        let b = Balancer::new(Policy::RoundRobin);
        let free = fakes(4, &[0, 0, 0]);
        let picks: Vec<_> = (0..6).map(|_| b.pick(&free).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // Replica 1 is full: it is skipped.
        let b = Balancer::new(Policy::RoundRobin);
        let one_full = fakes(4, &[0, 4, 0]);
        let picks: Vec<_> = (0..4).map(|_| b.pick(&one_full).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
        // All full: still rotates.
        let b = Balancer::new(Policy::RoundRobin);
        let full = fakes(4, &[4, 4, 4]);
        let picks: Vec<_> = (0..4).map(|_| b.pick(&full).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0]);
    }
}
