//! The host a request is for, checked as strictly as the HTTP RFCs ask of a server, so that
//! wisp never routes by a host that a proxy or firewall in front of it could read
//! differently.
//!
//! - HTTP/1.x (RFC 9112 §3.2): an HTTP/1.1 request needs exactly one `Host` line with a
//!   valid value (`uri-host [":" port]`, no userinfo, no whitespace, no path, a port of at
//!   most 65535), else 400. An absolute-form request target (`GET http://a.example.com/`)
//!   names the host itself: its authority wins and the `Host` line is replaced by it
//!   before forwarding (RFC 9112 §3.2.2, what a proxy must do), see [`absolute_form`].
//! - HTTP/2 (RFC 9113 §8.3.1): `:authority` is the host; a `host` field that disagrees
//!   with it, or several `host` fields, make the request malformed (400).
//!
//! The routing key is lower-cased, without port or trailing dot.

use std::{borrow::Cow, net::Ipv6Addr};

use hyper::{
    Request, Version,
    header::{HOST, HeaderValue},
};

/// Why a request names no usable host (each answered with 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostError {
    /// No `Host` (HTTP/1.1 without one, or an empty one) and no authority.
    Missing,
    /// More than one `Host` field line.
    Duplicate,
    /// A `Host` value that is not `uri-host [":" port]`.
    Invalid,
    /// A request-target authority that is not `host [":" port]` (userinfo, bad port).
    InvalidAuthority,
    /// HTTP/2: `:authority` and `host` present and different.
    Conflict,
}

impl HostError {
    /// The text of the 400 answer.
    pub fn message(self) -> &'static str {
        match self {
            HostError::Missing => "missing Host header\n",
            HostError::Duplicate => "more than one Host header\n",
            HostError::Invalid => "invalid Host header\n",
            HostError::InvalidAuthority => "invalid request authority\n",
            HostError::Conflict => ":authority and Host header disagree\n",
        }
    }
}

/// The routing key of a request's host (borrowed from the request unless it needed
/// lower-casing).
pub fn request_host<B>(req: &Request<B>) -> Result<Cow<'_, str>, HostError> {
    let mut lines = req.headers().get_all(HOST).iter();
    let host = lines.next();
    if lines.next().is_some() {
        return Err(HostError::Duplicate);
    }
    let host = host
        .map(|h| h.to_str().map_err(|_| HostError::Invalid))
        .transpose()?;
    match (req.uri().authority(), req.version()) {
        (Some(authority), Version::HTTP_2 | Version::HTTP_3) => {
            if host.is_some_and(|h| !h.eq_ignore_ascii_case(authority.as_str())) {
                return Err(HostError::Conflict);
            }
            normalize(authority.as_str()).map_err(authority_error)
        }
        (Some(authority), version) => {
            // The Host line must still be there and valid on HTTP/1.1, though its value
            // is replaced by the authority.
            match host {
                Some(h) => drop(normalize(h)?),
                None if version == Version::HTTP_11 => return Err(HostError::Missing),
                None => {}
            }
            normalize(authority.as_str()).map_err(authority_error)
        }
        (None, _) => normalize(host.ok_or(HostError::Missing)?),
    }
}

fn authority_error(e: HostError) -> HostError {
    match e {
        HostError::Missing => HostError::Missing,
        _ => HostError::InvalidAuthority,
    }
}

/// For an HTTP/1 request in absolute form, the `Host` value it must be forwarded with (its
/// authority, RFC 9112 §3.2.2); `None` for every other request. Call after
/// [`request_host`] accepted the request.
pub fn absolute_form<B>(req: &Request<B>) -> Option<HeaderValue> {
    if matches!(req.version(), Version::HTTP_2 | Version::HTTP_3) {
        return None;
    }
    let authority = req.uri().authority()?;
    HeaderValue::from_str(authority.as_str()).ok()
}

/// `Hello.Default.Example.com:8080` → `hello.default.example.com`; `[::1]:80` → `[::1]`.
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, HostError> {
    if raw.is_empty() {
        return Err(HostError::Missing);
    }
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // An IPv6 literal: keep the brackets, drop the port.
        let (addr, after) = rest.split_once(']').ok_or(HostError::Invalid)?;
        addr.parse::<Ipv6Addr>().map_err(|_| HostError::Invalid)?;
        match after {
            "" => {}
            _ => valid_port(after.strip_prefix(':').ok_or(HostError::Invalid)?)?,
        }
        &raw[..addr.len() + 2]
    } else {
        let (h, port) = raw.rsplit_once(':').unwrap_or((raw, ""));
        valid_port(port)?;
        // reg-name / IPv4address as DNS names have them: letters, digits, `-`, `.`, `_`.
        // RFC 3986 also allows percent-encoding and sub-delims in a reg-name; no route can
        // have such a host, and refusing them keeps every reader of the value in agreement.
        let ok = h
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !ok || h.len() > 255 {
            return Err(HostError::Invalid);
        }
        h
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err(HostError::Missing);
    }
    // Clients send lower case almost always: no copy then.
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Ok(Cow::Owned(host.to_ascii_lowercase()))
    } else {
        Ok(Cow::Borrowed(host))
    }
}

/// `port = *DIGIT` (RFC 3986), and a TCP port at that.
fn valid_port(p: &str) -> Result<(), HostError> {
    if p.is_empty() || (p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()) {
        Ok(())
    } else {
        Err(HostError::Invalid)
    }
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
            ("hello.default:65535", "hello.default"),
            ("[::1]", "[::1]"),
            ("[::1]:8080", "[::1]"),
            ("[FE80::1]:80", "[fe80::1]"),
            ("127.0.0.1:8080", "127.0.0.1"),
            ("under_score.example.com", "under_score.example.com"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(want), "{raw}");
        }
        for raw in ["", ":80", "."] {
            assert_eq!(normalize(raw), Err(HostError::Missing), "{raw:?}");
        }
        for raw in [
            "[::1",
            "[::1]x",
            "[::1]:x",
            "[nope]",
            "[::1]:99999",
            "host:port",
            "a b",
            " a",
            "a\t",
            "host/path",
            "host?q",
            "host#f",
            "h:123456",
            "h:65536",
            "h:+80",
            "user@hello.default",
            "@hello.default",
            "user:pw@hello.default:80",
            "a,b",
            "a%2eb",
            "h:80:80",
        ] {
            assert_eq!(normalize(raw), Err(HostError::Invalid), "{raw:?}");
        }
    }

    fn req(version: Version, uri: &str, hosts: &[&[u8]]) -> Request<()> {
        let mut b = Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn from_requests() {
        const HTTP_10: Version = Version::HTTP_10;
        const HTTP_11: Version = Version::HTTP_11;
        const HTTP_2: Version = Version::HTTP_2;
        let a = "a.default.example.com";
        type Case<'a> = (Version, &'a str, &'a [&'a [u8]], Result<&'a str, HostError>);
        let cases: &[Case] = &[
            (HTTP_11, "/", &[b"A.default.example.com:8080"], Ok(a)),
            (HTTP_11, "/", &[], Err(HostError::Missing)),
            (HTTP_11, "/", &[b""], Err(HostError::Missing)),
            (HTTP_10, "/", &[], Err(HostError::Missing)),
            (HTTP_11, "/", &[b"caf\xc3\xa9"], Err(HostError::Invalid)),
            (
                HTTP_11,
                "/",
                &[b"a.default.example.com", b"b.default.example.com"],
                Err(HostError::Duplicate),
            ),
            // Two identical lines are still two lines (RFC 9112 §3.2).
            (
                HTTP_11,
                "/",
                &[a.as_bytes(), a.as_bytes()],
                Err(HostError::Duplicate),
            ),
            (
                HTTP_11,
                "/",
                &[b"user@a.default.example.com"],
                Err(HostError::Invalid),
            ),
            // Absolute form: the authority wins over a valid Host line…
            (
                HTTP_11,
                "http://a.default.example.com/x",
                &[b"b.other"],
                Ok(a),
            ),
            (HTTP_10, "http://a.default.example.com/x", &[], Ok(a)),
            // …which HTTP/1.1 still requires, valid and single.
            (
                HTTP_11,
                "http://a.default.example.com/x",
                &[],
                Err(HostError::Missing),
            ),
            (
                HTTP_11,
                "http://a.default.example.com/x",
                &[b"a b"],
                Err(HostError::Invalid),
            ),
            (
                HTTP_11,
                "http://a.default.example.com/x",
                &[b"x", b"y"],
                Err(HostError::Duplicate),
            ),
            (
                HTTP_11,
                "http://user@a.default.example.com/x",
                &[a.as_bytes()],
                Err(HostError::InvalidAuthority),
            ),
            // HTTP/2: :authority, with an agreeing host field or none.
            (HTTP_2, "http://a.default.example.com/", &[], Ok(a)),
            (
                HTTP_2,
                "http://a.default.example.com:80/",
                &[b"A.default.example.com:80"],
                Ok(a),
            ),
            (
                HTTP_2,
                "http://a.default.example.com/",
                &[b"b.default.example.com"],
                Err(HostError::Conflict),
            ),
            (
                HTTP_2,
                "http://a.default.example.com/",
                &[a.as_bytes(), a.as_bytes()],
                Err(HostError::Duplicate),
            ),
            (
                HTTP_2,
                "http://u@a.default.example.com/",
                &[],
                Err(HostError::InvalidAuthority),
            ),
            // HTTP/2 without :authority (translated from HTTP/1): the host field.
            (HTTP_2, "/", &[a.as_bytes()], Ok(a)),
            (HTTP_2, "/", &[], Err(HostError::Missing)),
        ];
        for (version, uri, hosts, want) in cases {
            let r = req(*version, uri, hosts);
            assert_eq!(
                request_host(&r).as_deref().map_err(|e| *e),
                *want,
                "{version:?} {uri} {hosts:?}"
            );
        }
    }

    #[test]
    fn absolute_form_forwards_the_authority() {
        let r = req(Version::HTTP_11, "http://a.example.com:8080/x", &[b"b"]);
        assert_eq!(absolute_form(&r).unwrap(), "a.example.com:8080");
        let r = req(Version::HTTP_11, "/x", &[b"b"]);
        assert_eq!(absolute_form(&r), None);
        let r = req(Version::HTTP_2, "http://a.example.com/x", &[]);
        assert_eq!(absolute_form(&r), None);
    }
}
