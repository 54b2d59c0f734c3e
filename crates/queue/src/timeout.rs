//! Request timeouts (Knative `pkg/http/handler/timeout.go`), all measured from the moment the
//! request reached the queue, so the breaker wait counts too:
//!
//! - **overall** (`timeoutSeconds`): no response headers by then → 504 `request timeout`;
//!   headers already sent → the body is cut.
//! - **response start** (`responseStartTimeoutSeconds`): no response headers by then → 504.
//! - **idle** (`idleTimeoutSeconds`): nothing written (headers or a body frame) for that
//!   long → 504 before the headers, body cut after.
//!
//! Before the headers, [`Deadlines::before_headers`] is the instant to race the breaker and
//! the forward against. After, [`TimeoutBody`] wraps the response body: it cuts the stream
//! with a [`TimedOut`] error, which makes hyper abort the connection (HTTP/1) or reset the
//! stream (HTTP/2) so that the client can tell a cut response from a complete one.
//!
//! A zero duration disables a timeout (Knative's meaning for the optional two; for the
//! overall one it avoids answering every request with 504 on a bad config).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Duration, Instant, Sleep};
use wisp_net::BoxError;

/// The body text of every timeout response (and of the error a cut body ends with).
pub use wisp_net::synthetic::QUEUE_TIMEOUT as TIMEOUT_MESSAGE;

/// The error a [`TimeoutBody`] ends with when it cuts a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimedOut {
    /// The overall request timeout passed while the body was streaming.
    #[error("request timeout: the response body outlived the request timeout")]
    Overall,
    /// The upstream sent nothing for the idle timeout.
    #[error("request timeout: the response body was idle too long")]
    Idle,
}

/// The timeouts of one request, fixed when it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    overall: Option<Instant>,
    response_start: Option<Instant>,
    idle: Option<Duration>,
    start: Instant,
}

fn enabled(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Deadlines {
    /// The deadlines of a request that arrived at `start`.
    pub fn new(
        start: Instant,
        timeout: Duration,
        response_start_timeout: Option<Duration>,
        idle_timeout: Option<Duration>,
    ) -> Self {
        Self {
            // `checked_add`: an absurd duration means "never", not a panic.
            overall: enabled(timeout).and_then(|d| start.checked_add(d)),
            response_start: response_start_timeout
                .and_then(enabled)
                .and_then(|d| start.checked_add(d)),
            idle: idle_timeout.and_then(enabled),
            start,
        }
    }

    /// When to give up waiting for the response headers (504), if ever. Arrival counts as
    /// the last "write" for the idle timeout, as in Knative.
    pub fn before_headers(&self) -> Option<Instant> {
        let idle = self.idle.and_then(|d| self.start.checked_add(d));
        earliest(earliest(self.overall, self.response_start), idle)
    }

    fn body_deadline(&self, last_write: Instant) -> Option<Instant> {
        earliest(
            self.overall,
            self.idle.and_then(|d| last_write.checked_add(d)),
        )
    }

    fn cause(&self, now: Instant) -> TimedOut {
        match self.overall {
            Some(o) if now >= o => TimedOut::Overall,
            _ => TimedOut::Idle,
        }
    }
}

/// Races `work` against the pre-header deadline. `sleep` is the request's one timer, reused
/// afterwards by [`TimeoutBody`] (set up with [`timer`]). `None` means the deadline passed.
///
/// `work` is pinned by the caller: taken by value, the (large) work future would be stored
/// twice in this future's state — once as the argument, once in the race — and copied on
/// every move of the request's future.
pub async fn before_headers<F: Future>(
    deadlines: &Deadlines,
    sleep: &mut Option<Pin<Box<Sleep>>>,
    work: Pin<&mut F>,
) -> Option<F::Output> {
    match (deadlines.before_headers(), sleep.as_mut()) {
        (Some(_), Some(s)) => {
            tokio::select! {
                // The work first: it is what usually finishes, and `biased` spares the
                // branch shuffle's random number.
                biased;
                out = work => Some(out),
                () = s.as_mut() => None,
            }
        }
        _ => Some(work.await),
    }
}

/// The request's timer, armed at the pre-header deadline (`None` when no timeout applies).
/// One allocation per request: a `Sleep` is `!Unpin` and there is no pin projection here.
pub fn timer(deadlines: &Deadlines) -> Option<Pin<Box<Sleep>>> {
    deadlines
        .before_headers()
        .map(|d| Box::pin(tokio::time::sleep_until(d)))
}

/// A response body that enforces the overall and idle timeouts and drops `guard` as soon as
/// the body ends, fails, is cut, or is dropped (that is when the request stops counting).
pub struct TimeoutBody<B, G> {
    inner: Option<B>,
    guard: Option<G>,
    deadlines: Deadlines,
    last_write: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B, G> std::fmt::Debug for TimeoutBody<B, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeoutBody")
            .field("done", &self.inner.is_none())
            .field("deadlines", &self.deadlines)
            .field("last_write", &self.last_write)
            .finish()
    }
}

impl<B, G> TimeoutBody<B, G> {
    /// Wraps `inner`, whose headers were received at `headers_at` (a write for the idle
    /// timeout). `sleep` is the request's timer from [`timer`], re-armed here.
    pub fn new(
        inner: B,
        guard: G,
        deadlines: Deadlines,
        headers_at: Instant,
        mut sleep: Option<Pin<Box<Sleep>>>,
    ) -> Self {
        let deadline = deadlines.body_deadline(headers_at);
        match (deadline, sleep.as_mut()) {
            // Re-arming re-registers the timer (and may wake the timer driver): skip it when
            // the deadline stays, as it does by default (only `timeoutSeconds` set).
            (Some(d), Some(s)) if s.deadline() == d => {}
            (Some(d), Some(s)) => s.as_mut().reset(d),
            (Some(d), None) => sleep = Some(Box::pin(tokio::time::sleep_until(d))),
            (None, _) => sleep = None,
        }
        Self {
            inner: Some(inner),
            guard: Some(guard),
            deadlines,
            last_write: headers_at,
            sleep,
        }
    }

    /// Ends the request: the upstream body is dropped (which aborts an unfinished upstream
    /// exchange) and the guard released.
    fn finish(&mut self) {
        self.inner = None;
        self.sleep = None;
        self.guard = None;
    }
}

impl<B, G> HttpBody for TimeoutBody<B, G>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
    G: Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let now = Instant::now();
                // A fast upstream never lets the timer below be polled, so the overall
                // deadline is also checked on every frame.
                if this.deadlines.overall.is_some_and(|o| now >= o) {
                    this.finish();
                    return Poll::Ready(Some(Err(Box::new(TimedOut::Overall))));
                }
                this.last_write = now;
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(other) => {
                // End of stream or an upstream error: the request is over either way.
                this.finish();
                return Poll::Ready(other);
            }
            Poll::Pending => {}
        }
        // The timer is armed lazily: it fires at the deadline computed when it was last
        // armed, and is only re-armed then if frames moved the idle deadline on. That keeps
        // the per-frame cost to one `Instant::now()`.
        loop {
            let Some(sleep) = this.sleep.as_mut() else {
                return Poll::Pending;
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            match this.deadlines.body_deadline(this.last_write) {
                Some(d) if d > now => sleep.as_mut().reset(d),
                _ => {
                    let cause = this.deadlines.cause(now);
                    this.finish();
                    return Poll::Ready(Some(Err(Box::new(cause))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // Forwarded so that hyper keeps the upstream's Content-Length.
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::mpsc;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A body fed from a channel, so tests decide when frames arrive.
    struct ChannelBody(mpsc::Receiver<Bytes>);

    impl HttpBody for ChannelBody {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
        }
    }

    /// Sets its flag when dropped.
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    fn body(
        deadlines: Deadlines,
    ) -> (
        mpsc::Sender<Bytes>,
        TimeoutBody<ChannelBody, Flag>,
        Arc<AtomicBool>,
    ) {
        let (tx, rx) = mpsc::channel(4);
        let released = Arc::new(AtomicBool::new(false));
        let b = TimeoutBody::new(
            ChannelBody(rx),
            Flag(released.clone()),
            deadlines,
            Instant::now(),
            timer(&deadlines),
        );
        (tx, b, released)
    }

    async fn next(b: &mut TimeoutBody<ChannelBody, Flag>) -> Option<Result<Bytes, String>> {
        b.frame()
            .await
            .map(|r| r.map(|f| f.into_data().unwrap()).map_err(|e| e.to_string()))
    }

    #[test]
    fn before_headers_is_the_earliest_enabled_deadline() {
        let t0 = Instant::now();
        let d = |t, rs, idle| Deadlines::new(t0, t, rs, idle).before_headers();
        assert_eq!(d(secs(300), None, None), Some(t0 + secs(300)));
        assert_eq!(d(secs(300), Some(secs(10)), None), Some(t0 + secs(10)));
        assert_eq!(
            d(secs(300), Some(secs(10)), Some(secs(5))),
            Some(t0 + secs(5))
        );
        assert_eq!(
            d(secs(3), Some(secs(10)), Some(secs(5))),
            Some(t0 + secs(3))
        );
        // Zero disables.
        assert_eq!(
            d(secs(300), Some(secs(0)), Some(secs(0))),
            Some(t0 + secs(300))
        );
        assert_eq!(d(secs(0), None, None), None);
        assert_eq!(d(Duration::MAX, None, Some(Duration::MAX)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn before_headers_times_out_or_returns_the_work() {
        let d = Deadlines::new(Instant::now(), secs(2), None, None);
        let mut sleep = timer(&d);
        let slow =
            before_headers(&d, &mut sleep, std::pin::pin!(tokio::time::sleep(secs(3)))).await;
        assert_eq!(slow, None);
        assert_eq!(Instant::now(), d.before_headers().unwrap());

        let d = Deadlines::new(Instant::now(), secs(2), None, None);
        let mut sleep = timer(&d);
        let fast = before_headers(&d, &mut sleep, std::pin::pin!(async { 7 })).await;
        assert_eq!(fast, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_cuts_a_stalled_stream() {
        let t0 = Instant::now();
        let (tx, mut b, released) = body(Deadlines::new(t0, secs(300), None, Some(secs(5))));
        tokio::time::sleep(secs(4)).await;
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"a"))));
        // 4 s later another frame: the idle clock restarted at the first one.
        tokio::time::sleep(secs(4)).await;
        tx.send(Bytes::from_static(b"b")).await.unwrap();
        assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"b"))));
        // Then the upstream stalls.
        assert_eq!(next(&mut b).await, Some(Err(TimedOut::Idle.to_string())));
        assert_eq!(Instant::now() - t0, secs(13));
        assert!(released.load(Ordering::Acquire), "guard released when cut");
        assert!(b.is_end_stream());
        assert_eq!(next(&mut b).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn overall_timeout_cuts_a_slow_stream_and_a_busy_one() {
        let t0 = Instant::now();
        let (_tx, mut b, released) = body(Deadlines::new(t0, secs(10), None, None));
        assert_eq!(next(&mut b).await, Some(Err(TimedOut::Overall.to_string())));
        assert_eq!(Instant::now() - t0, secs(10));
        assert!(released.load(Ordering::Acquire));

        // An upstream that always has a frame ready is cut at the deadline too.
        let t0 = Instant::now();
        let (tx, mut b, _released) = body(Deadlines::new(t0, secs(10), None, None));
        tx.send(Bytes::from_static(b"x")).await.unwrap();
        assert!(matches!(next(&mut b).await, Some(Ok(_))));
        tokio::time::advance(secs(10)).await;
        tx.send(Bytes::from_static(b"y")).await.unwrap();
        assert_eq!(next(&mut b).await, Some(Err(TimedOut::Overall.to_string())));
    }

    #[tokio::test(start_paused = true)]
    async fn end_of_stream_releases_the_guard_at_once() {
        let (tx, mut b, released) = body(Deadlines::new(Instant::now(), secs(10), None, None));
        tx.send(Bytes::from_static(b"x")).await.unwrap();
        drop(tx);
        assert!(matches!(next(&mut b).await, Some(Ok(_))));
        assert!(!released.load(Ordering::Acquire));
        assert_eq!(next(&mut b).await, None);
        assert!(released.load(Ordering::Acquire));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_body_releases_the_guard() {
        let (_tx, b, released) = body(Deadlines::new(Instant::now(), secs(10), None, None));
        drop(b);
        assert!(released.load(Ordering::Acquire));
    }

    #[tokio::test(start_paused = true)]
    async fn size_hint_is_forwarded() {
        let full = wisp_net::full("hello");
        let d = Deadlines::new(Instant::now(), secs(10), None, None);
        let b = TimeoutBody::new(full, (), d, Instant::now(), timer(&d));
        assert_eq!(b.size_hint().exact(), Some(5));
        let collected = b.collect().await.unwrap().to_bytes();
        assert_eq!(collected, "hello");
    }
}
