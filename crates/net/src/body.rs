//! The data plane's response body type and small constructors.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

/// The error type carried by [`Body`] (and by proxied upstream bodies).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every response the data plane produces (upstream bodies are wrapped
/// into it). `Unsync` because hyper's `Incoming` is not `Sync` and nothing needs it to be.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// A complete body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Wraps any body with `Bytes` frames into a [`Body`].
pub fn boxed<B>(b: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    b.map_err(Into::into).boxed_unsync()
}

/// A short `text/plain` response: what [`Synthetic`](crate::Synthetic) answers with.
pub fn text_response(status: StatusCode, msg: &str) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::copy_from_slice(msg.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
