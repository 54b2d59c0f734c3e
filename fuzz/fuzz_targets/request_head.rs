//! Raw bytes as an HTTP/1 client's side of an ingress connection: hyper's request parsing
//! (request line, Content-Length / Transfer-Encoding, header limits) with wisp's handling
//! of what it accepts — the Host checks, then the header rules a proxied request goes
//! through (hop-by-hop, `Forwarded`, `X-Forwarded-*`, the upstream target). Never a panic
//! or a hang; a request that passes the Host checks leaves with exactly one Host.
#![no_main]

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::OnceLock,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, header::HOST, server::conn::http1};
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wisp_ingress::host;
use wisp_net::{ForwardContext, Protocol, headers};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    })
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let status = match host::request_host(&req) {
        Err(e) => {
            let _ = e.message();
            400
        }
        Ok(_) => {
            let forward = host::absolute_form(&req);
            let (mut parts, _body) = req.into_parts();
            if let Some(h) = forward {
                parts.headers.insert(HOST, h);
            }
            headers::ensure_host(&mut parts);
            let ctx = ForwardContext {
                client_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                client_port: 40000,
                scheme: "http",
                proxied_by_activator: false,
                arrived: None,
            };
            headers::prepare_request(&mut parts.headers, &ctx, false);
            headers::prepare_target(&mut parts, Protocol::Http1);
            assert_eq!(parts.headers.get_all(HOST).iter().count(), 1);
            200
        }
    };
    Ok(Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .expect("response"))
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let conn = http1::Builder::new()
            .max_buf_size(64 * 1024)
            .serve_connection(TokioIo::new(server), hyper::service::service_fn(handle));
        let exchange = async {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut out = Vec::new();
            let _ = client.read_to_end(&mut out).await;
        };
        let both = async { tokio::join!(conn, exchange) };
        // The connection's own result is hyper's verdict on the bytes: any is fine.
        let _ = tokio::time::timeout(Duration::from_secs(5), both)
            .await
            .expect("the connection ended within 5 s");
    });
});
