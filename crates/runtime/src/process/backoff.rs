//! Crash-loop back-off: how long a crashed replica waits before its next start.
//!
//! Kubernetes waits 10 s after a crash, doubling up to 300 s, and forgets the history once a
//! container has run for 10 minutes. On a developer's machine a five-minute wait after a
//! typo-fix is mostly annoying, so wisp starts at 1 s and caps at 30 s (both configurable in
//! [`super::ProcessOptions`]) but keeps the 10-minute reset: a replica that ran that long
//! was healthy, and its next crash is a new story rather than another turn of the same loop.

use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    /// The delay used before the previous restart, None before the first crash (or after a
    /// reset).
    last: Option<Duration>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Backoff {
            initial,
            max,
            reset_after,
            last: None,
        }
    }

    /// The delay before restarting a process that just ended after running for `ran_for`.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= self.reset_after {
            self.last = None;
        }
        let delay = match self.last {
            None => self.initial,
            Some(last) => last.saturating_mul(2),
        }
        .min(self.max);
        self.last = Some(delay);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let s = Duration::from_secs;
        let mut b = Backoff::new(s(1), s(30), s(600));
        // (how long the process ran, expected delay)
        let steps = [
            (s(0), s(1)),
            (s(1), s(2)),
            (s(5), s(4)),
            (s(0), s(8)),
            (s(0), s(16)),
            (s(0), s(30)),
            (s(0), s(30)),
            (s(599), s(30)),
            (s(600), s(1)),
            (s(3), s(2)),
            (s(3600), s(1)),
        ];
        for (i, (ran, want)) in steps.into_iter().enumerate() {
            assert_eq!(b.next_delay(ran), want, "step {i}");
        }
    }

    #[test]
    fn initial_above_max_is_capped() {
        let mut b = Backoff::new(
            Duration::from_secs(5),
            Duration::from_secs(2),
            Duration::MAX,
        );
        assert_eq!(b.next_delay(Duration::ZERO), Duration::from_secs(2));
        assert_eq!(b.next_delay(Duration::ZERO), Duration::from_secs(2));
    }
}
