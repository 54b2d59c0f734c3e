//! The host a request is for: the URI authority (HTTP/2 `:authority`, or an absolute-form
//! HTTP/1 request target), else the `Host` header; lower-cased, without port or trailing dot.

use std::borrow::Cow;

use hyper::{Request, header::HOST};

/// Why a request names no usable host (answered with 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostError {
    Missing,
    Invalid,
}

/// The routing key of a request's host (borrowed from the request unless it needed
/// lower-casing).
pub fn request_host<B>(req: &Request<B>) -> Result<Cow<'_, str>, HostError> {
    if let Some(a) = req.uri().authority() {
        return normalize(a.as_str());
    }
    let h = req.headers().get(HOST).ok_or(HostError::Missing)?;
    normalize(h.to_str().map_err(|_| HostError::Invalid)?)
}

/// `Hello.Default.Example.com:8080` → `hello.default.example.com`; `[::1]:80` → `[::1]`.
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, HostError> {
    let raw = raw.trim();
    // Userinfo is never meaningful in a Host; an authority may carry it.
    let raw = raw.rsplit_once('@').map_or(raw, |(_, h)| h);
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // An IPv6 literal: keep the brackets, drop the port.
        let end = rest.find(']').ok_or(HostError::Invalid)?;
        let after = &rest[end + 1..];
        if !(after.is_empty() || valid_port(after.strip_prefix(':').ok_or(HostError::Invalid)?)) {
            return Err(HostError::Invalid);
        }
        &raw[..end + 2]
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if valid_port(port) => h,
            Some(_) => return Err(HostError::Invalid),
            None => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err(HostError::Missing);
    }
    let ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':'));
    if !ok || host.len() > 255 {
        return Err(HostError::Invalid);
    }
    // Clients send lower case almost always: no copy then.
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Ok(Cow::Owned(host.to_ascii_lowercase()))
    } else {
        Ok(Cow::Borrowed(host))
    }
}

fn valid_port(p: &str) -> bool {
    p.is_empty() || (p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        for (raw, want) in [
            ("hello.default.example.com", "hello.default.example.com"),
            ("Hello.Default.Example.COM", "hello.default.example.com"),
            (
                "hello.default.example.com:8080",
                "hello.default.example.com",
            ),
            ("hello.default.example.com.", "hello.default.example.com"),
            ("hello.default.example.com.:80", "hello.default.example.com"),
            ("hello.default:", "hello.default"),
            ("[::1]", "[::1]"),
            ("[::1]:8080", "[::1]"),
            ("[FE80::1]:80", "[fe80::1]"),
            ("127.0.0.1:8080", "127.0.0.1"),
            ("user@hello.default", "hello.default"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(want), "{raw}");
        }
        for raw in ["", ":80"] {
            assert_eq!(normalize(raw), Err(HostError::Missing), "{raw:?}");
        }
        for raw in [
            "[::1",
            "[::1]x",
            "host:port",
            "a b",
            "host/path",
            "h:123456",
        ] {
            assert_eq!(normalize(raw), Err(HostError::Invalid), "{raw:?}");
        }
    }

    #[test]
    fn from_requests() {
        let req = Request::builder()
            .uri("/")
            .header("host", "Hello.default.example.com:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req).unwrap(), "hello.default.example.com");
        // The authority (HTTP/2, absolute form) wins over Host.
        let req = Request::builder()
            .uri("http://tag-hello.default.example.com/x")
            .header("host", "other")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req).unwrap(), "tag-hello.default.example.com");
        let req = Request::builder().uri("/").body(()).unwrap();
        assert_eq!(request_host(&req), Err(HostError::Missing));
        let req = Request::builder()
            .uri("/")
            .header("host", &b"caf\xc3\xa9"[..])
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Err(HostError::Invalid));
    }
}
