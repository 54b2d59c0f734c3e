//! The API's accept loop: each connection TLS-handshaken (rustls; ALPN picks HTTP/2 or
//! HTTP/1.1) — or plain with `--api-insecure-http` — and served by the axum router with
//! hyper-util's auto (h1/h2) connection; on stop, accepting ends and open connections get a
//! graceful shutdown (HTTP/2 GOAWAY, HTTP/1 close after the current response).
//! [`serve_with`] is the same loop for any handler: the ingress's HTTPS listener uses it.

use std::{convert::Infallible, future::Future, net::SocketAddr, time::Duration};

use axum::Router;
use hyper::{Request, Response, body::Incoming};
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
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
        let mut router = router.clone();
        async move {
            match tower::Service::call(&mut router, req).await {
                Ok(r) => r,
                Err(e) => match e {},
            }
        }
    };
    serve_with(listener, tls, handler, stop).await;
}

/// [`serve`] with `handler(req, peer)` answering each request.
pub async fn serve_with<H, F, B>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
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
        let (tls, handler, builder, watcher) = (
            tls.clone(),
            handler.clone(),
            builder.clone(),
            graceful.watcher(),
        );
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = handler(req, peer);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let result = match tls {
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                // A client that does not trust the CA ends here: its
                                // business, not a server error.
                                tracing::debug!(%peer, error = %e, "TLS handshake");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
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
                tracing::debug!(%peer, error = %e, "connection");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
