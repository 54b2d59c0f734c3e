//! Seeing what `wisp serve` is doing (issue #18): the Prometheus endpoint ([`collector`]),
//! the recent history the console and `wisp top` read ([`history`]), and the web console
//! ([`console`]). Each listens on its own loopback address by default; what they read is
//! recorded by the data plane (per-revision request histograms), the KPA (its reports in
//! `Scaling`) and the control plane's process-wide families (`wisp_metrics::control`).

pub mod collector;
pub mod console;
pub mod history;
pub mod request_logs;
pub mod top;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::{Router, http::header, response::IntoResponse, routing::get};
use wisp_metrics::prometheus_client::registry::Registry;

/// The Prometheus endpoint's default address (Knative's metrics port).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9090";
/// The console's default address (next to the API's 7070).
pub const DEFAULT_CONSOLE_ADDR: &str = "127.0.0.1:7071";

/// Where a listener goes: an address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

/// Parses `ADDR` or `off` (a flag's value).
pub fn parse_listen(s: &str) -> Result<Listen, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Listen::Off);
    }
    s.parse::<SocketAddr>()
        .map(Listen::At)
        .map_err(|e| format!("{e}: expected an address such as 127.0.0.1:9090, or `off`"))
}

/// Flags of `wisp serve` for observability.
#[derive(Debug, Clone, clap::Args)]
pub struct ObserveArgs {
    /// Address of the Prometheus endpoint (`GET /metrics`, text format), or `off`.
    /// Default 127.0.0.1:9090; when that default is taken (another wisp), wisp runs
    /// without it and says so — an address given here must be free.
    #[arg(long, env = "WISP_METRICS_ADDR", value_name = "ADDR|off", value_parser = parse_listen)]
    pub metrics_addr: Option<Listen>,
    /// Address of the web console (services, revisions, live charts, logs; sign in with
    /// the API token), or `off`. Default 127.0.0.1:7071, given up (with a warning) when
    /// taken; an address given here must be free.
    #[arg(long, env = "WISP_CONSOLE_ADDR", value_name = "ADDR|off", value_parser = parse_listen)]
    pub console_addr: Option<Listen>,
}

/// A listener to bind: where, and whether that was asked for (a default that is taken is
/// not an error).
fn wanted(flag: Option<Listen>, default: &str) -> Option<(SocketAddr, bool)> {
    match flag {
        Some(Listen::Off) => None,
        Some(Listen::At(a)) => Some((a, true)),
        None => default.parse().ok().map(|a| (a, false)),
    }
}

/// Binds `addr`; a default address that is in use gives `None` with a warning.
async fn bind(
    (addr, explicit): (SocketAddr, bool),
    what: &str,
    flag: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(%addr, "{what}: the default address is in use; running without it (set {flag})");
            eprintln!("wisp: {what} off: {addr} is in use (set {flag} ADDR|off)");
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("binding the {what} address {addr} ({flag})")),
    }
}

/// What `wisp serve` observes, decided from the flags before anything starts.
#[derive(Debug)]
pub struct Observing {
    metrics: Option<(SocketAddr, bool)>,
    console: Option<(SocketAddr, bool)>,
}

impl Observing {
    pub fn new(args: &ObserveArgs) -> Self {
        Observing {
            metrics: wanted(args.metrics_addr, DEFAULT_METRICS_ADDR),
            console: wanted(args.console_addr, DEFAULT_CONSOLE_ADDR),
        }
    }

    /// Whether the data plane records each request (its duration by status class): for
    /// `/metrics`, and for the console's and `wisp top`'s rates and latencies.
    pub fn records_requests(&self) -> bool {
        self.metrics.is_some() || self.console.is_some()
    }

    /// Binds and serves the console until `stop` turns true; `None` when off (or the
    /// default address is taken).
    pub async fn serve_console(
        &self,
        console: console::Console,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
        let Some(want) = self.console else {
            return Ok(None);
        };
        let Some(listener) = bind(want, "console", "--console-addr").await? else {
            return Ok(None);
        };
        let bound = listener.local_addr()?;
        tracing::info!(addr = %bound, "console listening");
        eprintln!("wisp: console listening on http://{bound}/");
        Ok(Some(tokio::spawn(crate::api_listener::serve(
            listener,
            None,
            console::router(console),
            stop,
        ))))
    }

    /// Turns on the control plane's families (before the controllers start, so their work
    /// queues take their handles).
    pub fn install(&self) {
        if self.metrics.is_some() {
            wisp_metrics::install();
        }
    }

    /// Binds and serves `/metrics` until `stop` turns true; `None` when off (or the
    /// default address is taken).
    pub async fn serve_metrics(
        &self,
        revisions: collector::Revisions,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
        let Some(want) = self.metrics else {
            return Ok(None);
        };
        let Some(listener) = bind(want, "metrics", "--metrics-addr").await? else {
            return Ok(None);
        };
        let bound = listener.local_addr()?;
        tracing::info!(addr = %bound, "metrics listening");
        eprintln!("wisp: metrics listening on http://{bound}/metrics");
        let registry = Arc::new(collector::registry(revisions));
        let router = Router::new().route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move { scrape(&registry) }
            }),
        );
        Ok(Some(tokio::spawn(crate::api_listener::serve(
            listener, None, router, stop,
        ))))
    }
}

/// One scrape: the registry in Prometheus' text format.
fn scrape(registry: &Registry) -> axum::response::Response {
    let mut body = String::with_capacity(64 * 1024);
    match wisp_metrics::prometheus_client::encoding::prometheus_text::encode(&mut body, registry) {
        Ok(()) => ([(header::CONTENT_TYPE, wisp_metrics::CONTENT_TYPE)], body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "encoding /metrics");
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_flags() {
        assert_eq!(parse_listen("off"), Ok(Listen::Off));
        assert_eq!(parse_listen("OFF"), Ok(Listen::Off));
        assert_eq!(
            parse_listen("127.0.0.1:0"),
            Ok(Listen::At("127.0.0.1:0".parse().unwrap()))
        );
        let err = parse_listen("localhost:9090").unwrap_err();
        assert!(err.contains("or `off`"), "{err}");
        assert_eq!(wanted(Some(Listen::Off), DEFAULT_METRICS_ADDR), None);
        assert_eq!(
            wanted(None, DEFAULT_METRICS_ADDR),
            Some(("127.0.0.1:9090".parse().unwrap(), false))
        );
        assert_eq!(
            wanted(
                Some(Listen::At("[::1]:1".parse().unwrap())),
                DEFAULT_METRICS_ADDR
            ),
            Some(("[::1]:1".parse().unwrap(), true))
        );
    }
}
