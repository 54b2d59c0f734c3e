//! An open-loop, fixed-rate HTTP load generator (like vegeta's `attack -rate`), and timed
//! single requests.
//!
//! [`run`] sends requests at a fixed rate per [`Step`] — request `i` of a step is *due* at
//! `step start + i / rps` whatever happened to the earlier ones (open loop: a slow server
//! does not slow the generator down, so there is no coordinated omission). Each request's
//! latency runs from its due time to the end of its response body, so a generator that
//! falls behind shows up as latency too; how far behind it fell is reported apart
//! ([`Sample::lag`]).
//!
//! Requests go to one address with a `Host` header (wisp's ingress routes by it), over a
//! pooled HTTP/1.1 client (hyper), on a tokio runtime of its own.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, header::HOST};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

/// Where requests go: an address (wisp's ingress), the `Host` to route by, and the path
/// with its query.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl Target {
    pub fn new(addr: SocketAddr, host: impl Into<String>, path: impl Into<String>) -> Target {
        Target {
            addr,
            host: host.into(),
            path: path.into(),
        }
    }

    fn request(&self) -> anyhow::Result<Request<Empty<Bytes>>> {
        Ok(Request::get(format!("http://{}{}", self.addr, self.path))
            .header(HOST, &self.host)
            .body(Empty::new())?)
    }
}

/// A pooled HTTP/1.1 client (keep-alive, no idle limit per host).
pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(usize::MAX)
        .build(connector)
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A 2xx answer, body read in full.
    Ok,
    /// Any other status.
    Status(u16),
    /// No complete answer within the timeout.
    Timeout,
    /// Connection refused/reset, a broken body, …
    Failed,
    /// Not sent: the generator's in-flight limit was reached.
    Dropped,
}

impl Outcome {
    pub fn label(self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Status(s) => format!("HTTP {s}"),
            Outcome::Timeout => "timeout".into(),
            Outcome::Failed => "connection error".into(),
            Outcome::Dropped => "not sent (in-flight limit)".into(),
        }
    }
}

/// The answer to one timed request ([`get`]).
#[derive(Debug, Clone)]
pub struct Timed {
    /// When the request was handed to the client.
    pub sent: Instant,
    /// Sent → response head received (the first byte of the answer).
    pub ttfb: Duration,
    /// Sent → body read in full.
    pub total: Duration,
    pub status: u16,
    pub body: Bytes,
}

/// One GET of `target`, timed; an error for a failed connection or body, or after
/// `timeout`.
pub async fn get(client: &HttpClient, target: &Target, timeout: Duration) -> anyhow::Result<Timed> {
    let req = target.request()?;
    let sent = Instant::now();
    let fut = async {
        let resp = client.request(req).await.context("sending the request")?;
        let ttfb = sent.elapsed();
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .context("reading the body")?
            .to_bytes();
        anyhow::Ok(Timed {
            sent,
            ttfb,
            total: sent.elapsed(),
            status,
            body,
        })
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))?
}

/// A constant rate for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Requests per second.
    pub rps: u32,
    pub duration: Duration,
}

impl Step {
    /// Requests this step sends (rate × duration, rounded).
    pub fn requests(&self) -> u64 {
        (f64::from(self.rps) * self.duration.as_secs_f64()).round() as u64
    }
}

/// Parses steps like `200x20s,400x20s,800x20s` (rate `x` duration in seconds).
pub fn parse_steps(s: &str) -> anyhow::Result<Vec<Step>> {
    s.split(',')
        .map(|part| {
            let (rps, dur) = part
                .trim()
                .split_once('x')
                .with_context(|| format!("step {part:?} is not RPSxSECONDS, e.g. 200x20s"))?;
            let secs: f64 = dur.trim().trim_end_matches('s').parse()?;
            anyhow::ensure!(secs > 0.0, "step {part:?}: duration must be positive");
            Ok(Step {
                rps: rps.trim().parse()?,
                duration: Duration::from_secs_f64(secs),
            })
        })
        .collect()
}

/// How to run a schedule.
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    pub steps: Vec<Step>,
    /// Per-request timeout (Knative's load tests: 30 s).
    pub timeout: Duration,
    /// Requests in flight at most; beyond it a due request is not sent but counted as
    /// [`Outcome::Dropped`] (keeps a dead server from exhausting file descriptors).
    pub max_in_flight: usize,
    /// Worker threads of the generator's runtime.
    pub threads: usize,
}

impl Options {
    pub fn new(target: Target, steps: Vec<Step>) -> Options {
        Options {
            target,
            steps,
            timeout: Duration::from_secs(30),
            max_in_flight: 20_000,
            threads: 2,
        }
    }

    /// The whole schedule's length.
    pub fn duration(&self) -> Duration {
        self.steps.iter().map(|s| s.duration).sum()
    }
}

/// One request of a run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When it was due, since the start of the run.
    pub due: Duration,
    /// Due → actually handed to the client (how far the generator fell behind).
    pub lag: Duration,
    /// Due → response head received.
    pub ttfb: Duration,
    /// Due → body read in full (or → the failure).
    pub latency: Duration,
    pub outcome: Outcome,
    /// Index of its step.
    pub step: usize,
}

/// Everything a run recorded.
#[derive(Debug, Clone)]
pub struct Run {
    /// Time zero of [`Sample::due`].
    pub start: Instant,
    pub steps: Vec<Step>,
    /// Every request, in no particular order.
    pub samples: Vec<Sample>,
    /// Start → last answer.
    pub elapsed: Duration,
    /// The first few error messages (connection errors), with counts.
    pub error_messages: BTreeMap<String, u64>,
}

/// Latency statistics of a set of samples (successful ones only).
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub n: u64,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Run {
    /// Start (since the run's start) and end of step `i`.
    pub fn step_span(&self, i: usize) -> (Duration, Duration) {
        let start: Duration = self.steps[..i].iter().map(|s| s.duration).sum();
        (start, start + self.steps[i].duration)
    }

    /// The target rate at `t` since the start (0 after the schedule).
    pub fn rps_at(&self, t: Duration) -> u32 {
        let mut end = Duration::ZERO;
        for s in &self.steps {
            end += s.duration;
            if t < end {
                return s.rps;
            }
        }
        0
    }

    /// Requests due in the schedule.
    pub fn expected(&self) -> u64 {
        self.steps.iter().map(Step::requests).sum()
    }

    /// Samples matching `filter`, by outcome.
    pub fn outcomes(&self, filter: impl Fn(&Sample) -> bool) -> BTreeMap<Outcome, u64> {
        let mut m = BTreeMap::new();
        for s in self.samples.iter().filter(|s| filter(s)) {
            *m.entry(s.outcome).or_insert(0) += 1;
        }
        m
    }

    /// Errors (anything but [`Outcome::Ok`]) among the samples matching `filter`.
    pub fn errors(&self, filter: impl Fn(&Sample) -> bool) -> u64 {
        self.samples
            .iter()
            .filter(|s| filter(s) && s.outcome != Outcome::Ok)
            .count() as u64
    }

    /// A histogram (µs) of the latency of the successful samples matching `filter`.
    pub fn histogram(&self, filter: impl Fn(&Sample) -> bool) -> Histogram<u64> {
        let mut h =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
        for s in self
            .samples
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && filter(s))
        {
            h.saturating_record(s.latency.as_micros().max(1) as u64);
        }
        h
    }

    /// p50/p95/p99/max of the successful samples matching `filter`.
    pub fn latency(&self, filter: impl Fn(&Sample) -> bool) -> Latency {
        let h = self.histogram(filter);
        if h.is_empty() {
            return Latency::default();
        }
        let us = |v: u64| Duration::from_micros(v);
        Latency {
            n: h.len(),
            p50: us(h.value_at_quantile(0.50)),
            p95: us(h.value_at_quantile(0.95)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }

    /// The largest [`Sample::lag`]: how far behind its schedule the generator fell.
    pub fn max_lag(&self) -> Duration {
        self.samples.iter().map(|s| s.lag).max().unwrap_or_default()
    }
}

/// Runs the schedule of `opts` on a runtime of its own; returns when every request has
/// been answered or has timed out.
pub fn run(opts: &Options) -> anyhow::Result<Run> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.threads.max(1))
        .enable_all()
        .build()?;
    let run = rt.block_on(run_async(opts));
    rt.shutdown_timeout(Duration::from_secs(1));
    run
}

/// [`run`] on the current runtime.
pub async fn run_async(opts: &Options) -> anyhow::Result<Run> {
    anyhow::ensure!(!opts.steps.is_empty(), "no steps");
    anyhow::ensure!(
        opts.steps.iter().all(|s| s.rps > 0),
        "every step needs a rate > 0"
    );
    let client = client();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::with_capacity(
        opts.steps.iter().map(Step::requests).sum::<u64>() as usize,
    )));
    let messages = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(opts.max_in_flight.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    let t0 = tokio::time::Instant::from_std(start);
    let mut step_start = Duration::ZERO;
    for (i, step) in opts.steps.iter().enumerate() {
        let interval = Duration::from_secs_f64(1.0 / f64::from(step.rps));
        for n in 0..step.requests() {
            let due = step_start + interval.mul_f64(n as f64);
            tokio::time::sleep_until(t0 + due).await;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                wisp_sync::lock(&samples).push(Sample {
                    due,
                    lag: start.elapsed().saturating_sub(due),
                    ttfb: Duration::ZERO,
                    latency: Duration::ZERO,
                    outcome: Outcome::Dropped,
                    step: i,
                });
                continue;
            };
            let (client, target, samples, messages) = (
                client.clone(),
                opts.target.clone(),
                samples.clone(),
                messages.clone(),
            );
            let timeout = opts.timeout;
            tasks.spawn(async move {
                let _permit = permit;
                let lag = start.elapsed().saturating_sub(due);
                let (outcome, ttfb) = match get(&client, &target, timeout).await {
                    Ok(t) if (200..300).contains(&t.status) => {
                        (Outcome::Ok, t.sent + t.ttfb - start)
                    }
                    Ok(t) => (Outcome::Status(t.status), t.sent + t.ttfb - start),
                    Err(e) => {
                        let timed_out = e.to_string().starts_with("no answer within");
                        if !timed_out {
                            let mut m = wisp_sync::lock(&messages);
                            let key = format!("{e:#}");
                            if m.len() < 20 || m.contains_key(&key) {
                                *m.entry(key).or_insert(0) += 1;
                            }
                        }
                        let o = if timed_out {
                            Outcome::Timeout
                        } else {
                            Outcome::Failed
                        };
                        (o, Duration::ZERO)
                    }
                };
                let end = start.elapsed();
                wisp_sync::lock(&samples).push(Sample {
                    due,
                    lag,
                    ttfb: ttfb.saturating_sub(due),
                    latency: end.saturating_sub(due),
                    outcome,
                    step: i,
                });
            });
            // Reap finished tasks as we go so the set stays small.
            while tasks.try_join_next().is_some() {}
        }
        step_start += step.duration;
    }
    // Every request carries its own timeout; this bound is only a safety net.
    let drain = tokio::time::timeout(opts.timeout + Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drain.is_err() {
        tasks.abort_all();
    }
    let elapsed = start.elapsed();
    let samples = std::mem::take(&mut *wisp_sync::lock(&samples));
    let error_messages = std::mem::take(&mut *wisp_sync::lock(&messages));
    Ok(Run {
        start,
        steps: opts.steps.clone(),
        samples,
        elapsed,
        error_messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps() {
        let s = parse_steps("200x20s, 400x20,800x2.5s").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].rps, 200);
        assert_eq!(s[1].duration, Duration::from_secs(20));
        assert_eq!(s[2].requests(), 2000);
        assert!(parse_steps("200").is_err());
        assert!(parse_steps("200x0s").is_err());
    }

    /// A tiny HTTP/1.1 server on loopback that answers every request with "ok".
    async fn server() -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut have = Vec::new();
                    loop {
                        let Ok(n) = sock.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        have.extend_from_slice(&buf[..n]);
                        while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            have.drain(..end + 4);
                            let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if sock.write_all(resp).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn runs_a_schedule_open_loop() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let addr = server().await;
            let target = Target::new(addr, "x.example.com", "/");
            let steps = parse_steps("100x0.3s,200x0.2s").unwrap();
            let run = run_async(&Options::new(target.clone(), steps))
                .await
                .unwrap();
            assert_eq!(run.expected(), 70);
            assert_eq!(run.samples.len(), 70);
            assert_eq!(run.errors(|_| true), 0, "{:?}", run.error_messages);
            assert_eq!(run.outcomes(|s| s.step == 1)[&Outcome::Ok], 40);
            assert_eq!(run.rps_at(Duration::from_millis(350)), 200);
            assert_eq!(run.rps_at(Duration::from_secs(1)), 0);
            let l = run.latency(|_| true);
            assert_eq!(l.n, 70);
            assert!(l.p50 <= l.p95 && l.p95 <= l.max);
            // The due times follow the schedule: 10 ms apart, then 5 ms.
            let mut due: Vec<Duration> = run.samples.iter().map(|s| s.due).collect();
            due.sort();
            assert_eq!(due[1], Duration::from_millis(10));
            assert_eq!(due[31] - due[30], Duration::from_millis(5));

            let t = get(&client(), &target, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!((t.status, &t.body[..]), (200, &b"ok"[..]));
            assert!(t.ttfb <= t.total);

            // Nothing listens: every request fails, none hangs.
            let dead = Target::new("127.0.0.1:1".parse().unwrap(), "x", "/");
            let run = run_async(&Options::new(dead, parse_steps("50x0.1s").unwrap()))
                .await
                .unwrap();
            assert_eq!(run.errors(|_| true), 5);
            assert!(!run.error_messages.is_empty());
        });
    }
}
