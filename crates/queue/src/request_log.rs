//! Request logs (Knative's queue-proxy `RequestLogHandler`): one line per request, from
//! `config-observability`'s `logging.request-log-template`, written when the response has
//! been sent (its size and latency known). Lines are kept per revision, the newest
//! [`KEEP`] of each, and fanned out to followers; the API serves them as the revision's
//! `queue-proxy` container log (`wisp logs --requests`).
//!
//! Off (no template), a request pays one branch. On, the queue copies what the template
//! reads from the request before forwarding it ([`Capture`]), and wraps the response body
//! to count its bytes ([`LoggedBody`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::{Request, Response};
use tokio::sync::broadcast;
use tokio::time::Instant;
use wisp_api::config::request_log::{
    Entry, RequestLogTemplate, RevisionInfo, canonical_header, trace_id,
};
use wisp_net::{Body, BoxError, ForwardContext};

/// Lines kept per revision.
pub const KEEP: usize = 1000;

/// Lines in flight to slow followers before they skip some.
const FOLLOW_CAPACITY: usize = 1024;

/// One request log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub namespace: String,
    pub revision: String,
    /// The replica that served it ("" when the activator answered).
    pub replica: String,
    pub line: String,
    /// When the response ended (for `kubectl logs --timestamps`/`--since`).
    pub time: std::time::SystemTime,
}

/// Each revision's kept lines, by (namespace, revision).
type Lines = HashMap<(String, String), VecDeque<Arc<Line>>>;

/// The process's request log: the template and every revision's lines.
#[derive(Debug)]
pub struct RequestLog {
    template: RequestLogTemplate,
    /// `logging.enable-probe-request-log`.
    probes: bool,
    lines: Mutex<Lines>,
    follow: broadcast::Sender<Arc<Line>>,
}

impl RequestLog {
    pub fn new(template: RequestLogTemplate, probes: bool) -> Arc<RequestLog> {
        Arc::new(RequestLog {
            template,
            probes,
            lines: Mutex::default(),
            follow: broadcast::channel(FOLLOW_CAPACITY).0,
        })
    }

    /// The last `tail` lines (all kept when None) of a revision, oldest first.
    pub fn lines(&self, namespace: &str, revision: &str, tail: Option<usize>) -> Vec<Arc<Line>> {
        let all = wisp_sync::lock(&self.lines);
        let Some(q) = all.get(&(namespace.to_string(), revision.to_string())) else {
            return Vec::new();
        };
        let skip = tail.map_or(0, |t| q.len().saturating_sub(t));
        q.iter().skip(skip).cloned().collect()
    }

    /// Every new line, of every revision.
    pub fn follow(&self) -> broadcast::Receiver<Arc<Line>> {
        self.follow.subscribe()
    }

    /// Forgets a revision's lines (it is gone).
    pub fn forget(&self, namespace: &str, revision: &str) {
        wisp_sync::lock(&self.lines).remove(&(namespace.to_string(), revision.to_string()));
    }

    fn push(&self, line: Line) {
        let line = Arc::new(line);
        {
            let mut all = wisp_sync::lock(&self.lines);
            let q = all
                .entry((line.namespace.clone(), line.revision.clone()))
                .or_default();
            if q.len() == KEEP {
                q.pop_front();
            }
            q.push_back(line.clone());
        }
        let _ = self.follow.send(line);
    }
}

/// A revision's request log: the sink and what `.Revision` says.
#[derive(Debug)]
pub struct RevisionLog {
    pub sink: Arc<RequestLog>,
    pub revision: RevisionInfo,
}

impl RevisionLog {
    /// What the line of `req` will need, copied now (the request is about to be
    /// forwarded); None for a probe when probes are not logged.
    pub fn capture(
        &self,
        req: &Request<hyper::body::Incoming>,
        ctx: &ForwardContext,
        arrived: Instant,
    ) -> Option<Box<Capture>> {
        let h = req.headers();
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
        // Knative's `IsProbe`: its network probes and the kubelet's.
        let probe =
            h.contains_key("k-network-probe") || text("user-agent").starts_with("kube-probe/");
        if probe && !self.sink.probes {
            return None;
        }
        let template = &self.sink.template;
        let header = template.needs_headers().then(|| {
            let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in h {
                m.entry(canonical_header(k.as_str()))
                    .or_default()
                    .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
            }
            m
        });
        let trace = if template.needs_trace_id() {
            trace_id(
                h.get("traceparent").and_then(|v| v.to_str().ok()),
                h.get("x-b3-traceid").and_then(|v| v.to_str().ok()),
            )
            .to_string()
        } else {
            String::new()
        };
        let uri = req.uri().to_string();
        Some(Box::new(Capture {
            method: req.method().as_str().to_string(),
            request_uri: uri,
            proto: match req.version() {
                hyper::Version::HTTP_2 => "HTTP/2.0",
                hyper::Version::HTTP_10 => "HTTP/1.0",
                _ => "HTTP/1.1",
            },
            host: text("host").to_string(),
            remote_addr: std::net::SocketAddr::new(ctx.client_addr, ctx.client_port).to_string(),
            content_length: match h.get(hyper::header::CONTENT_LENGTH) {
                Some(v) => v.to_str().ok().and_then(|v| v.parse().ok()).unwrap_or(-1),
                None if h.contains_key(hyper::header::TRANSFER_ENCODING) => -1,
                None => 0,
            },
            user_agent: text("user-agent").to_string(),
            referer: text("referer").to_string(),
            header,
            trace,
            arrived,
        }))
    }

    /// Writes the line of a request answered with `status`, `size` body bytes, now.
    fn write(&self, c: &Capture, replica: &str, pod_ip: &str, status: u16, size: u64) {
        let mut header = c.header.clone().unwrap_or_default();
        // UserAgent and Referer are Header lookups in Go; keep them in one place.
        if !c.user_agent.is_empty() {
            header
                .entry("User-Agent".into())
                .or_insert_with(|| vec![c.user_agent.clone()]);
        }
        if !c.referer.is_empty() {
            header
                .entry("Referer".into())
                .or_insert_with(|| vec![c.referer.clone()]);
        }
        let e = Entry {
            method: &c.method,
            url: &c.request_uri,
            request_uri: &c.request_uri,
            proto: c.proto,
            host: &c.host,
            remote_addr: &c.remote_addr,
            content_length: c.content_length,
            header: Some(&header),
            code: status,
            size,
            latency: Instant::now()
                .saturating_duration_since(c.arrived)
                .as_secs_f64(),
            revision: &self.revision,
            pod_name: replica,
            pod_ip,
            trace_id: &c.trace,
        };
        let mut line = String::with_capacity(256);
        if let Err(err) = self.sink.template.render(&e, &mut line) {
            // Knative's fallback line (the template was checked at start, so this is rare).
            line = format!(
                "Invalid request log template: method: {}, response code: {status}, latency: {}, url: {} ({err})",
                c.method,
                wisp_api::config::request_log::go_float(e.latency),
                c.request_uri
            );
        }
        self.sink.push(Line {
            namespace: self.revision.namespace.clone(),
            revision: self.revision.name.clone(),
            replica: replica.to_string(),
            line,
            time: std::time::SystemTime::now(),
        });
    }

    /// `resp` as it will be logged when its body ends: wrapped to count its bytes.
    pub fn wrap(
        self: &Arc<Self>,
        capture: Box<Capture>,
        replica: &str,
        pod_ip: &str,
        resp: Response<Body>,
    ) -> Response<Body> {
        let status = resp.status().as_u16();
        let log = self.clone();
        let (replica, pod_ip) = (replica.to_string(), pod_ip.to_string());
        resp.map(|inner| {
            wisp_net::boxed(LoggedBody {
                inner,
                bytes: 0,
                pending: Some(Pending {
                    log,
                    capture,
                    replica,
                    pod_ip,
                    status,
                }),
            })
        })
    }
}

/// What a request's log line needs from the request (see [`RevisionLog::capture`]).
#[derive(Debug)]
pub struct Capture {
    method: String,
    request_uri: String,
    proto: &'static str,
    host: String,
    remote_addr: String,
    content_length: i64,
    user_agent: String,
    referer: String,
    header: Option<BTreeMap<String, Vec<String>>>,
    trace: String,
    arrived: Instant,
}

/// The line still to write.
#[derive(Debug)]
struct Pending {
    log: Arc<RevisionLog>,
    capture: Box<Capture>,
    replica: String,
    pod_ip: String,
    status: u16,
}

/// A response body that writes its request's log line when it ends (or is dropped: a
/// client that went away still gets its line, with the bytes sent so far).
struct LoggedBody {
    inner: Body,
    bytes: u64,
    pending: Option<Pending>,
}

impl LoggedBody {
    fn finish(&mut self) {
        if let Some(p) = self.pending.take() {
            p.log
                .write(&p.capture, &p.replica, &p.pod_ip, p.status, self.bytes);
        }
    }
}

impl HttpBody for LoggedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.bytes += d.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.finish();
                }
            }
            Poll::Ready(_) => this.finish(),
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.finish();
    }
}
