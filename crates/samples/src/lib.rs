//! Sample workloads used by the docs, tests and benchmarks, each a tiny HTTP server on
//! `127.0.0.1:$PORT` (`$HOST:$PORT` when HOST is set) (HTTP/1.1 and h2c on the same port), like Knative's samples:
//!
//! - `hello` answers `Hello <TARGET>!` (TARGET from the environment, default `World`).
//! - `autoscale` burns what its query asks for: `sleep=MS`, `prime=N`, `bloat=MB`, like
//!   Knative's `autoscale-go`.
//! - `echo` shows what the platform does to traffic: the request headers it saw, streamed
//!   (SSE and chunked) responses, and an HTTP/1.1 upgrade that echoes raw bytes.
//!
//! [`serve`] is the shared server loop; each binary only supplies a handler.

use std::{convert::Infallible, future::Future, net::SocketAddr, sync::Arc};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
};

/// A response body.
pub type Body = Full<Bytes>;

/// The address to listen on: `$HOST:$PORT`, by default `127.0.0.1:8080` (8080 as in
/// Knative). A replica in a container sets `HOST=0.0.0.0`, so that the data plane reaches it
/// on its sandbox's address, as Knative's samples listen on every interface.
pub fn listen_addr() -> Result<SocketAddr, String> {
    let port = match std::env::var("PORT") {
        Ok(p) => p
            .parse::<u16>()
            .map_err(|_| format!("PORT={p:?} is not a port number"))?,
        Err(_) => 8080,
    };
    let host = match std::env::var("HOST") {
        Ok(h) => h
            .parse::<std::net::IpAddr>()
            .map_err(|_| format!("HOST={h:?} is not an IP address"))?,
        Err(_) => std::net::IpAddr::from([127, 0, 0, 1]),
    };
    Ok(SocketAddr::from((host, port)))
}

/// A plain-text response.
pub fn text(status: u16, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("static response parts")
}

/// Serves `handler` until SIGTERM or SIGINT, then lets in-flight requests finish.
///
/// Generic over the response body so that a handler may stream (`echo`); most answer a
/// complete [`Body`].
pub async fn serve<H, F, B>(handler: H) -> Result<(), String>
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let addr = listen_addr()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("listening on {addr}: {e}"))?;
    eprintln!("listening on http://{addr}");
    let handler = Arc::new(handler);
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let h = handler.clone();
                let service = service_fn(move |req| {
                    let fut = h(req);
                    async move { Ok::<_, Infallible>(fut.await) }
                });
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    eprintln!("shutting down");
    graceful.shutdown().await;
    Ok(())
}

/// Runs `serve` on a small multi-threaded runtime and exits non-zero on error.
pub fn main_with<H, F, B>(handler: H)
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(serve(handler)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The largest prime ≤ `max` (0 when there is none), by a sieve — deliberately CPU-bound.
pub fn largest_prime(max: u64) -> u64 {
    if max < 2 {
        return 0;
    }
    let n = max as usize;
    let mut composite = vec![false; n + 1];
    let mut i = 2;
    while i * i <= n {
        if !composite[i] {
            let mut j = i * i;
            while j <= n {
                composite[j] = true;
                j += i;
            }
        }
        i += 1;
    }
    (2..=n).rev().find(|&k| !composite[k]).unwrap_or(0) as u64
}

/// Parses one integer query parameter: `Ok(None)` when absent.
pub fn int_param(query: &str, key: &str) -> Result<Option<u64>, String> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == key {
            return v.parse::<u64>().map(Some).map_err(|_| {
                format!("invalid value for {key}: {v:?} (want a non-negative integer)")
            });
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        for (max, want) in [(0, 0), (1, 0), (2, 2), (10, 7), (100, 97), (7919, 7919)] {
            assert_eq!(largest_prime(max), want, "{max}");
        }
    }

    #[test]
    fn params() {
        assert_eq!(int_param("sleep=100&prime=5", "sleep"), Ok(Some(100)));
        assert_eq!(int_param("sleep=100&prime=5", "prime"), Ok(Some(5)));
        assert_eq!(int_param("sleep=100", "bloat"), Ok(None));
        assert!(int_param("sleep=abc", "sleep").is_err());
        assert!(int_param("sleep=-1", "sleep").is_err());
    }
}
