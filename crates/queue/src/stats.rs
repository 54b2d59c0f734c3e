//! Time-weighted request statistics (Knative `networking/pkg/http/stats/request.go`).
//!
//! The accumulator integrates concurrency over time: on every change (a request in or out)
//! it adds `concurrency × time since the last change` to an area, so a report can return the
//! exact time-weighted average `area / window` without sampling. Counts are plain counters.
//! A report closes the window and starts the next one at the same instant.
//!
//! Areas are integer `request·nanoseconds` so that sums are exact (no float drift across
//! millions of events); floats only appear in [`Report`].

use std::sync::Mutex;

use tokio::time::{Duration, Instant};

/// One window's figures as the raw accumulator sees them.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Time-weighted average number of requests in the window.
    pub average_concurrency: f64,
    /// The part of `average_concurrency` from requests proxied by the activator.
    pub average_proxied_concurrency: f64,
    /// Requests that arrived in the window.
    pub request_count: u64,
    /// The part of `request_count` proxied by the activator.
    pub proxied_request_count: u64,
    /// The window's length.
    pub window: Duration,
}

/// What [`RequestStats::request_in`] hands back; give it to `request_out` or `cancel`.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    arrived: Instant,
    /// The window the request was counted in (see [`RequestStats::cancel`]).
    window: u64,
    proxied: bool,
}

/// The accumulator. A short std `Mutex` (a few adds per event, never held across `.await`)
/// is cheaper and simpler than keeping several atomics consistent.
#[derive(Debug)]
pub struct RequestStats {
    acc: Mutex<Acc>,
}

#[derive(Debug)]
struct Acc {
    // Current state, kept across windows.
    concurrency: u64,
    proxied_concurrency: u64,
    last_change: Instant,
    // The current window, reset by each report.
    window: u64,
    window_start: Instant,
    area: u128,
    proxied_area: u128,
    count: u64,
    proxied_count: u64,
}

impl Acc {
    /// Integrates the current concurrency up to `now`. Times before `last_change` (a caller
    /// with an older `Instant`) count as no time passing.
    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last_change).as_nanos();
        if dt > 0 {
            self.area += u128::from(self.concurrency) * dt;
            self.proxied_area += u128::from(self.proxied_concurrency) * dt;
            self.last_change = now;
        }
    }
}

impl RequestStats {
    /// An empty accumulator whose first window starts at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            acc: Mutex::new(Acc {
                concurrency: 0,
                proxied_concurrency: 0,
                last_change: now,
                window: 0,
                window_start: now,
                area: 0,
                proxied_area: 0,
                count: 0,
                proxied_count: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Acc> {
        wisp_sync::lock(&self.acc)
    }

    /// A request arrived at `now`.
    pub fn request_in(&self, now: Instant, proxied: bool) -> Ticket {
        let mut a = self.lock();
        a.advance(now);
        a.concurrency += 1;
        a.count += 1;
        if proxied {
            a.proxied_concurrency += 1;
            a.proxied_count += 1;
        }
        Ticket {
            arrived: now,
            window: a.window,
            proxied,
        }
    }

    /// The request of `t` finished at `now`.
    pub fn request_out(&self, t: Ticket, now: Instant) {
        let mut a = self.lock();
        a.advance(now);
        a.concurrency -= 1;
        if t.proxied {
            a.proxied_concurrency -= 1;
        }
    }

    /// Takes the request of `t` out as if it had never arrived (it was retried elsewhere):
    /// its concurrency area in the current window and, if it arrived in this window, its
    /// count. Parts already reported in earlier windows stay reported.
    pub fn cancel(&self, t: Ticket, now: Instant) {
        let mut a = self.lock();
        a.advance(now);
        a.concurrency -= 1;
        let since = t.arrived.max(a.window_start);
        let own_area = now.saturating_duration_since(since).as_nanos();
        a.area = a.area.saturating_sub(own_area);
        if t.proxied {
            a.proxied_concurrency -= 1;
            a.proxied_area = a.proxied_area.saturating_sub(own_area);
        }
        if t.window == a.window {
            a.count -= 1;
            if t.proxied {
                a.proxied_count -= 1;
            }
        }
    }

    /// Requests in progress right now.
    pub fn concurrency(&self) -> u64 {
        self.lock().concurrency
    }

    /// Closes the window at `now` and starts the next one. A zero-length window (two reports
    /// at the same instant) reports zeros and keeps its counts for the next window.
    pub fn report(&self, now: Instant) -> Report {
        let mut a = self.lock();
        a.advance(now);
        let window = now.saturating_duration_since(a.window_start);
        let nanos = window.as_nanos();
        if nanos == 0 {
            return Report {
                average_concurrency: 0.0,
                average_proxied_concurrency: 0.0,
                request_count: 0,
                proxied_request_count: 0,
                window,
            };
        }
        let report = Report {
            average_concurrency: a.area as f64 / nanos as f64,
            average_proxied_concurrency: a.proxied_area as f64 / nanos as f64,
            request_count: a.count,
            proxied_request_count: a.proxied_count,
            window,
        };
        a.window += 1;
        a.window_start = now;
        a.area = 0;
        a.proxied_area = 0;
        a.count = 0;
        a.proxied_count = 0;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn half_a_window_is_half_a_request() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        let t = s.request_in(t0 + ms(250), false);
        s.request_out(t, t0 + ms(750));
        let r = s.report(t0 + ms(1000));
        assert_eq!(r.average_concurrency, 0.5);
        assert_eq!(r.average_proxied_concurrency, 0.0);
        assert_eq!((r.request_count, r.proxied_request_count), (1, 0));
        assert_eq!(r.window, ms(1000));
    }

    #[test]
    fn overlapping_and_proxied_requests() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        // [0, 1000) direct and [500, 1000) proxied: 1.5 on average, 0.5 of it proxied.
        let a = s.request_in(t0, false);
        let b = s.request_in(t0 + ms(500), true);
        assert_eq!(s.concurrency(), 2);
        s.request_out(a, t0 + ms(1000));
        s.request_out(b, t0 + ms(1000));
        let r = s.report(t0 + ms(1000));
        assert_eq!(r.average_concurrency, 1.5);
        assert_eq!(r.average_proxied_concurrency, 0.5);
        assert_eq!((r.request_count, r.proxied_request_count), (2, 1));
    }

    #[test]
    fn a_request_spanning_reports_counts_once_and_its_concurrency_in_each_window() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        let a = s.request_in(t0 + ms(500), false);
        let r1 = s.report(t0 + ms(1000));
        assert_eq!((r1.average_concurrency, r1.request_count), (0.5, 1));
        let r2 = s.report(t0 + ms(2000));
        assert_eq!((r2.average_concurrency, r2.request_count), (1.0, 0));
        s.request_out(a, t0 + ms(2250));
        let r3 = s.report(t0 + ms(3000));
        assert_eq!((r3.average_concurrency, r3.request_count), (0.25, 0));
        let r4 = s.report(t0 + ms(4000));
        assert_eq!((r4.average_concurrency, r4.request_count), (0.0, 0));
    }

    #[test]
    fn cancel_removes_the_request_from_the_current_window() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        let keep = s.request_in(t0, true);
        let gone = s.request_in(t0 + ms(100), true);
        s.cancel(gone, t0 + ms(300));
        s.request_out(keep, t0 + ms(500));
        let r = s.report(t0 + ms(1000));
        assert_eq!(
            (r.average_concurrency, r.average_proxied_concurrency),
            (0.5, 0.5)
        );
        assert_eq!((r.request_count, r.proxied_request_count), (1, 1));
        assert_eq!(s.concurrency(), 0);
    }

    #[test]
    fn cancel_after_a_report_only_removes_the_current_windows_part() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        let gone = s.request_in(t0 + ms(800), false);
        let r1 = s.report(t0 + ms(1000));
        assert_eq!(r1.request_count, 1);
        s.cancel(gone, t0 + ms(1200));
        let r2 = s.report(t0 + ms(2000));
        assert_eq!((r2.average_concurrency, r2.request_count), (0.0, 0));
    }

    #[test]
    fn zero_length_window_keeps_its_counts() {
        let t0 = Instant::now();
        let s = RequestStats::new(t0);
        s.request_in(t0, false);
        let r0 = s.report(t0);
        assert_eq!((r0.request_count, r0.window), (0, Duration::ZERO));
        let r1 = s.report(t0 + ms(1000));
        assert_eq!((r1.average_concurrency, r1.request_count), (1.0, 1));
    }
}
