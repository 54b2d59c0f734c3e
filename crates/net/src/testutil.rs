//! Test fixtures: tiny upstreams, a proxy built from `serve` + `ReplicaConnector`, clients.
//! Every wait in the tests goes through [`within`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::client::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::{Body, ForwardContext, ForwardError, ReplicaConnector, ServerOptions, serve};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
pub type Handler = Arc<dyn Fn(Request<Incoming>) -> BoxFuture<Response<Body>> + Send + Sync>;

/// Fails the test instead of hanging.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

pub async fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// An upstream app; counts accepted connections.
pub struct Upstream {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    /// Aborts every connection and stops accepting.
    pub kill: Option<oneshot::Sender<()>>,
}

impl Upstream {
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// `h2 == false`: HTTP/1.1 with upgrades; `true`: HTTP/2 prior knowledge only.
pub async fn upstream(h2: bool, h: Handler) -> Upstream {
    let (l, addr) = listener().await;
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let (kill_tx, mut kill_rx) = oneshot::channel();
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (stream, _) = tokio::select! {
                _ = &mut kill_rx => break,
                r = l.accept() => r.unwrap(),
            };
            count.fetch_add(1, Ordering::SeqCst);
            let h = h.clone();
            let svc = service_fn(move |req| {
                let fut = h(req);
                async move { Ok::<_, std::convert::Infallible>(fut.await) }
            });
            let io = TokioIo::new(stream);
            conns.spawn(async move {
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, svc)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .with_upgrades()
                        .await;
                }
            });
        }
        // Dropping the set aborts (and closes) every connection.
    });
    Upstream {
        addr,
        accepted,
        kill: Some(kill_tx),
    }
}

/// A front door (`serve`) forwarding everything to `connector`: `Unreached` → 503 whose
/// body describes the returned request, `Upstream` → 502.
pub async fn proxy(connector: ReplicaConnector) -> SocketAddr {
    proxy_with(connector, ServerOptions::default()).await
}

pub async fn proxy_with(connector: ReplicaConnector, opts: ServerOptions) -> SocketAddr {
    let (l, addr) = listener().await;
    let handler = move |req: Request<Incoming>, peer: SocketAddr| {
        let connector = connector.clone();
        async move {
            let ctx = ForwardContext {
                client_addr: peer.ip(),
                client_port: peer.port(),
                scheme: "http",
                proxied_by_activator: false,
                arrived: None,
            };
            match connector.forward(req, &ctx).await {
                Ok(resp) => resp,
                Err(ForwardError::Unreached(req, _)) => {
                    let xff = req.headers().contains_key("x-forwarded-for");
                    let uri = req.uri().to_string();
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let msg = format!("unreached uri={uri} xff={xff} body={}", text(&body));
                    crate::text_response(StatusCode::SERVICE_UNAVAILABLE, &msg)
                }
                Err(e @ ForwardError::Upstream(_)) => {
                    crate::text_response(StatusCode::BAD_GATEWAY, &e.to_string())
                }
            }
        }
    };
    tokio::spawn(serve(l, opts, handler, std::future::pending()));
    addr
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub async fn h1_client(addr: SocketAddr) -> http1::SendRequest<Body> {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender
}

pub async fn h2_client(addr: SocketAddr) -> http2::SendRequest<Body> {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(conn);
    sender
}

/// A request body fed frame by frame from the test.
pub struct ChanBody(pub mpsc::Receiver<Frame<Bytes>>);

impl hyper::body::Body for ChanBody {
    type Data = Bytes;
    type Error = crate::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}

/// A streaming body and the sender feeding it.
pub fn channel_body() -> (mpsc::Sender<Frame<Bytes>>, Body) {
    let (tx, rx) = mpsc::channel(16);
    (tx, crate::boxed(ChanBody(rx)))
}

/// Reads the next non-empty data frame, `None` at the end (an HTTP/2 stream may end with
/// an empty DATA frame).
pub async fn next_data(body: &mut Incoming) -> Option<Bytes> {
    loop {
        let frame = body.frame().await?.unwrap();
        if let Ok(data) = frame.into_data()
            && !data.is_empty()
        {
            return Some(data);
        }
    }
}
