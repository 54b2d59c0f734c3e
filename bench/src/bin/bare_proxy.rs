//! The barest reverse proxy wisp's own stack can make: hyper's HTTP/1 server and a pooled
//! hyper HTTP/1 client, one current-thread runtime per CPU (as wisp's data plane), and
//! nothing else: no routing, no queue or breaker, no stats, no timeouts, no header
//! rewriting, no HTTP/2, no graceful shutdown.
//!
//! It is a yardstick, not a product: `dataplane_probe` runs it in front of the direct app
//! so that wisp's CPU per request can be read as "hyper's floor on this machine" plus
//! "what wisp's per-request work costs". Never expose it: it has none of the limits a
//! server facing clients needs.
//!
//! Usage: `bare_proxy --listen 127.0.0.1:8000 --upstream 127.0.0.1:9000`

use std::{
    cell::RefCell,
    convert::Infallible,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use http_body_util::{Either, Empty};
use hyper::{
    Request, Response, StatusCode,
    body::{Body, Frame, Incoming},
    client::conn::http1::{self, SendRequest},
    service::service_fn,
};
use hyper_util::rt::TokioIo;

#[derive(Debug, Parser)]
#[command(about = "A bare hyper reverse proxy (a benchmark yardstick, not a server)")]
struct Args {
    /// Where to listen.
    #[arg(long)]
    listen: SocketAddr,
    /// The app to proxy to.
    #[arg(long)]
    upstream: SocketAddr,
    /// Runtime threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
}

type ResponseBody = Either<Pooled, Empty<Bytes>>;

thread_local! {
    /// This thread's idle connections to the upstream: a connection lives on the runtime
    /// that made it, like wisp's per-thread pools.
    static POOL: RefCell<Vec<SendRequest<Incoming>>> = const { RefCell::new(Vec::new()) };
}

/// A response body that gives its connection back to the pool once it has been read.
struct Pooled {
    inner: Incoming,
    sender: Option<SendRequest<Incoming>>,
}

impl Pooled {
    fn release(&mut self) {
        if let Some(s) = self.sender.take() {
            POOL.with(|p| p.borrow_mut().push(s));
        }
    }
}

impl Body for Pooled {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.release();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

async fn checkout(upstream: SocketAddr) -> anyhow::Result<SendRequest<Incoming>> {
    while let Some(mut s) = POOL.with(|p| p.borrow_mut().pop()) {
        if s.ready().await.is_ok() {
            return Ok(s);
        }
    }
    let io = tokio::net::TcpStream::connect(upstream).await?;
    io.set_nodelay(true)?;
    let (s, conn) = http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(s)
}

async fn forward(
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> anyhow::Result<Response<ResponseBody>> {
    let mut s = checkout(upstream).await?;
    let (parts, body) = s.send_request(req).await?.into_parts();
    let mut body = Pooled {
        inner: body,
        sender: Some(s),
    };
    if body.inner.is_end_stream() {
        body.release();
    }
    Ok(Response::from_parts(parts, Either::Left(body)))
}

async fn handle(
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    Ok(forward(upstream, req).await.unwrap_or_else(|_| {
        let mut resp = Response::new(Either::Right(Empty::new()));
        *resp.status_mut() = StatusCode::BAD_GATEWAY;
        resp
    }))
}

async fn accept_loop(listener: std::net::TcpListener, upstream: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |r| handle(upstream, r)),
                )
                .await;
        });
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    listener.set_nonblocking(true)?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // Every thread accepts on the same socket: the kernel hands each connection to one.
    let handles = (0..threads)
        .map(|_| {
            let listener = listener.try_clone()?;
            let upstream = args.upstream;
            Ok(std::thread::spawn(move || -> anyhow::Result<()> {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(accept_loop(listener, upstream))
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a proxy thread panicked"))??;
    }
    Ok(())
}
