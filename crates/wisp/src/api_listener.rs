//! The API's accept loop: each connection TLS-handshaken (rustls; ALPN picks HTTP/2 or
//! HTTP/1.1) — or plain with `--api-insecure-http` — and served by the axum router with
//! hyper-util's auto (h1/h2) connection; on stop, accepting ends and open connections get a
//! graceful shutdown (HTTP/2 GOAWAY, HTTP/1 close after the current response).

use std::time::Duration;

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A client that connects and never finishes its handshake holds only its own task, and
/// only this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `stop` turns true, then waits for open connections
/// to finish (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "API accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => break,
        };
        let _ = tcp.set_nodelay(true);
        let (tls, router, builder, watcher) = (
            tls.clone(),
            router.clone(),
            builder.clone(),
            graceful.watcher(),
        );
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let mut router = router.clone();
                async move { tower::Service::call(&mut router, req).await }
            });
            let result = match tls {
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                // A client that does not trust the CA ends here: its
                                // business, not a server error.
                                tracing::debug!(%peer, error = %e, "API TLS handshake");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "API TLS handshake timed out");
                                return;
                            }
                        };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
                None => {
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
                    watcher.watch(conn).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "API connection");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
