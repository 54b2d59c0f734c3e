//! Proxy header rules (pure functions, table-tested below).
//!
//! These follow what Knative's queue-proxy (Go `httputil.ReverseProxy` + its Forwarded shim)
//! and Envoy do:
//!
//! - hop-by-hop headers never cross a proxy (RFC 9110 §7.6.1), including every header named
//!   in `Connection`; `Upgrade`/`Connection: upgrade` survive only on an upgrade;
//! - `X-Forwarded-For` gets the client appended, `X-Forwarded-Proto`/`-Host` are set if absent;
//! - RFC 7239 `Forwarded` is synthesized from the `X-Forwarded-*` values when absent, in the
//!   queue-proxy's format: `for=<first>;host=<h>;proto=<p>, for=<second>, ...`;
//! - Knative's internal routing headers never reach the app nor leak back to the client.
//!
//! Two hops differ: [`prepare_request`] is for the last hop (to the app) and
//! [`prepare_proxy_request`] for a hop between wisp proxies (ingress → activator →
//! queue-proxy over the network), where the internal headers must survive.

use std::net::IpAddr;

use bytes::Bytes;
use hyper::header::{
    CONNECTION, FORWARDED, HOST, HeaderName, HeaderValue, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION,
    TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use hyper::http::request;
use hyper::http::uri::{Authority, PathAndQuery, Scheme, Uri};
use hyper::{HeaderMap, Version};

use crate::connector::{ForwardContext, Protocol};

/// Internal headers that must never reach the app (requests) nor the client (responses,
/// together with every `Knative-Serving-*` header).
///
/// `Knative-Serving-Tag` is deliberately absent: Knative's queue-proxy passes it to the app.
pub const INTERNAL: &[&str] = &[
    "knative-serving-revision",
    "knative-serving-namespace",
    "k-proxy-request",
    "k-original-host",
];

/// `K-Original-Host`: the Host the client used, when a proxy rewrote `Host` (restored at the
/// last hop).
pub const K_ORIGINAL_HOST: HeaderName = HeaderName::from_static("k-original-host");
/// `K-Proxy-Request`: value `activator` marks a request proxied by the activator.
pub const K_PROXY_REQUEST: HeaderName = HeaderName::from_static("k-proxy-request");
/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const KNATIVE_SERVING_REVISION: HeaderName = HeaderName::from_static("knative-serving-revision");
const KNATIVE_SERVING_NAMESPACE: HeaderName = HeaderName::from_static("knative-serving-namespace");

/// Hop-by-hop headers removed in both directions (besides those listed in `Connection`).
/// `TE` and `Upgrade` are handled separately.
const HOP_BY_HOP: [HeaderName; 6] = [
    KEEP_ALIVE,
    PROXY_CONNECTION,
    TRANSFER_ENCODING,
    TRAILER,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
];

/// Rewrites request headers for the last hop, to the app: hop-by-hop headers stripped,
/// `Host` restored from `K-Original-Host`, `X-Forwarded-*` completed, `Forwarded`
/// synthesized if absent, internal headers removed.
///
/// `upgrade`: the request is an HTTP/1.1 upgrade (keep `Upgrade`, `Connection: upgrade`).
/// `ctx.proxied_by_activator` changes nothing here (the queue-proxy counts it in its stats).
pub fn prepare_request(h: &mut HeaderMap, ctx: &ForwardContext, upgrade: bool) {
    let mut seen = Seen::scan(h);
    if upgrade || seen.special {
        strip_hop_by_hop(h, upgrade);
        keep_te_trailers(h);
        // The activator/ingress may have rewritten Host; the app must see the client's.
        if let Some(original) = h.remove(K_ORIGINAL_HOST) {
            h.insert(HOST, original);
        }
        h.remove(KNATIVE_SERVING_REVISION);
        h.remove(KNATIVE_SERVING_NAMESPACE);
        h.remove(K_PROXY_REQUEST);
        // `Connection` may have listed any of the forwarding headers.
        seen = Seen::scan(h);
    }
    add_forwarded(h, ctx, &seen, !seen.forwarded);
}

/// Rewrites request headers for a hop between wisp proxies (ingress → activator →
/// queue-proxy across the network): hop-by-hop stripped and `X-Forwarded-*` completed like
/// [`prepare_request`], but the internal headers (`Knative-Serving-*`, `K-Original-Host`)
/// are kept for the next proxy, `K-Proxy-Request: activator` is set when
/// `ctx.proxied_by_activator`, and `Forwarded` is left to the last hop (so it lists every
/// proxy in `X-Forwarded-For`).
pub fn prepare_proxy_request(h: &mut HeaderMap, ctx: &ForwardContext, upgrade: bool) {
    let mut seen = Seen::scan(h);
    if upgrade || seen.special {
        strip_hop_by_hop(h, upgrade);
        keep_te_trailers(h);
        seen = Seen::scan(h);
    }
    add_forwarded(h, ctx, &seen, false);
    if ctx.proxied_by_activator {
        h.insert(K_PROXY_REQUEST, HeaderValue::from_static("activator"));
    }
}

/// What one pass over a request's header names found. Most requests carry none of the
/// headers to strip and none of the forwarding headers: one scan of the names instead of a
/// dozen hashed lookups that find nothing.
#[derive(Debug, Default)]
struct Seen {
    /// A name the hop-by-hop or internal rules remove or rewrite ([`is_special`]).
    special: bool,
    x_forwarded_for: bool,
    x_forwarded_proto: bool,
    x_forwarded_host: bool,
    forwarded: bool,
}

impl Seen {
    fn scan(h: &HeaderMap) -> Seen {
        let mut seen = Seen::default();
        for name in h.keys() {
            match name.as_str() {
                "x-forwarded-for" => seen.x_forwarded_for = true,
                "x-forwarded-proto" => seen.x_forwarded_proto = true,
                "x-forwarded-host" => seen.x_forwarded_host = true,
                "forwarded" => seen.forwarded = true,
                _ => seen.special |= is_special(name),
            }
        }
        seen
    }
}

/// Rewrites response headers on the way back: hop-by-hop headers stripped (`Upgrade` and
/// `Connection: upgrade` kept on a `101`), internal headers (`K-Proxy-Request`,
/// `Knative-Serving-*`, `K-Original-Host`) removed.
pub fn prepare_response(h: &mut HeaderMap, upgrade: bool) {
    if !upgrade && !h.keys().any(is_special) {
        return;
    }
    strip_hop_by_hop(h, upgrade);
    h.remove(TE);
    h.remove(K_PROXY_REQUEST);
    h.remove(K_ORIGINAL_HOST);
    // Rare (apps do not send these), so check before paying for the scan-and-collect.
    if h.keys().any(is_knative_serving) {
        let leaked: Vec<HeaderName> = h
            .keys()
            .filter(|n| is_knative_serving(n))
            .cloned()
            .collect();
        for name in leaked {
            h.remove(name);
        }
    }
}

/// Whether the request asks for an HTTP/1.1 upgrade (`Upgrade` present and `Connection`
/// lists `upgrade`).
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(UPGRADE) && connection_tokens(h).any(|t| t.eq_ignore_ascii_case(b"upgrade"))
}

/// Sets the request target for the upstream protocol, after the headers were prepared:
/// HTTP/1 gets an origin-form URI (`/path?query`) and a `Host` header; HTTP/2 gets an
/// absolute URI whose authority is the `Host` (the `:authority` the app sees) and no `Host`
/// header (like Go's HTTP/2 transport).
///
/// An incoming HTTP/2 request has no `Host` header, only an authority: call
/// [`ensure_host`] first so the header rules see it.
pub fn prepare_target(parts: &mut request::Parts, protocol: Protocol) {
    let pq = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match protocol {
        Protocol::Http1 => {
            parts.version = Version::HTTP_11;
            // `OPTIONS *` and CONNECT's authority-form have no path: leave those alone.
            if parts.uri.path_and_query().is_some() {
                parts.uri = Uri::from(pq);
            }
        }
        Protocol::H2c => {
            parts.version = Version::HTTP_2;
            let authority = parts
                .headers
                .remove(HOST)
                .and_then(|host| Authority::from_maybe_shared(bytes_of(host)).ok())
                .or_else(|| parts.uri.authority().cloned());
            let mut builder = Uri::builder().scheme(Scheme::HTTP).path_and_query(pq);
            if let Some(authority) = authority {
                builder = builder.authority(authority);
            }
            if let Ok(uri) = builder.build() {
                parts.uri = uri;
            }
        }
    }
}

/// Inserts a `Host` header from the URI authority when absent (HTTP/2 requests carry the
/// host as `:authority` only).
pub fn ensure_host(parts: &mut request::Parts) {
    if !parts.headers.contains_key(HOST)
        && let Some(authority) = parts.uri.authority()
        && let Ok(v) = HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(HOST, v);
    }
}

fn bytes_of(v: HeaderValue) -> Bytes {
    Bytes::copy_from_slice(v.as_bytes())
}

/// Whether `name` is one the header rules may remove or rewrite: hop-by-hop (RFC 9110
/// §7.6.1, plus `Connection`, `Upgrade` and `TE`) or internal. A header that `Connection`
/// lists is only hop-by-hop when `Connection` is present, which this also catches.
fn is_special(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "trailer"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "upgrade"
            | "te"
            | "k-original-host"
            | "k-proxy-request"
    ) || is_knative_serving(name)
}

fn is_knative_serving(name: &HeaderName) -> bool {
    name.as_str().starts_with("knative-serving-")
}

/// Comma-separated tokens of every `Connection` header line.
fn connection_tokens(h: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    h.get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
    if h.contains_key(CONNECTION) {
        // Names listed in Connection are hop-by-hop too. Collected first: we cannot remove
        // while borrowing the Connection values.
        let listed: Vec<HeaderName> = connection_tokens(h)
            .filter(|t| !(upgrade && t.eq_ignore_ascii_case(b"upgrade")))
            .filter_map(|t| HeaderName::from_bytes(t).ok())
            .filter(|n| *n != HOST)
            .collect();
        for name in listed {
            h.remove(name);
        }
        h.remove(CONNECTION);
    }
    for name in &HOP_BY_HOP {
        h.remove(name);
    }
    if upgrade {
        h.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(UPGRADE);
    }
}

/// `TE` is hop-by-hop, except that `trailers` must reach the app (gRPC requires it).
fn keep_te_trailers(h: &mut HeaderMap) {
    if let Some(te) = h.remove(TE) {
        let trailers = te
            .as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        if trailers {
            h.insert(TE, HeaderValue::from_static("trailers"));
        }
    }
}

/// Appends the client to `X-Forwarded-For`, sets `X-Forwarded-Proto`/`-Host` when absent
/// and, with `synthesize`, adds `Forwarded` built from the three. `seen` must describe `h`.
fn add_forwarded(h: &mut HeaderMap, ctx: &ForwardContext, seen: &Seen, synthesize: bool) {
    let ip = ip_text(ctx.client_addr);
    let xff = if seen.x_forwarded_for {
        // Several X-Forwarded-For lines mean one comma-separated list (RFC 9110 §5.3).
        let mut joined = Vec::with_capacity(64);
        for v in h.get_all(X_FORWARDED_FOR) {
            let v = v.as_bytes().trim_ascii();
            if v.is_empty() {
                continue;
            }
            if !joined.is_empty() {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(v);
        }
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(&ip);
        joined
    } else {
        ip
    };
    let host = if seen.x_forwarded_host {
        None
    } else {
        h.get(HOST).cloned()
    };
    let proto = (!seen.x_forwarded_proto).then(|| scheme_value(ctx.scheme));
    // Built from the values in hand, before they are inserted: no lookups of what was
    // just set.
    let forwarded = if synthesize {
        let xfh = if seen.x_forwarded_host {
            h.get(X_FORWARDED_HOST)
        } else {
            host.as_ref()
        };
        let xfp = if seen.x_forwarded_proto {
            h.get(X_FORWARDED_PROTO)
        } else {
            proto.as_ref()
        };
        synthesize_forwarded(
            &xff,
            xfh.map(HeaderValue::as_bytes),
            xfp.map(HeaderValue::as_bytes),
        )
    } else {
        None
    };
    // `from_maybe_shared` validates in place: no second copy of the built value.
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(xff)) {
        h.insert(X_FORWARDED_FOR, v);
    }
    if let Some(proto) = proto {
        h.insert(X_FORWARDED_PROTO, proto);
    }
    if let Some(host) = host {
        h.insert(X_FORWARDED_HOST, host);
    }
    if let Some(forwarded) = forwarded {
        h.insert(FORWARDED, forwarded);
    }
}

/// The address as text, IPv4 without going through `fmt` (every request formats one).
fn ip_text(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => {
            let mut out = Vec::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
            out
        }
        IpAddr::V6(v6) => v6.to_string().into_bytes(),
    }
}

fn scheme_value(scheme: &'static str) -> HeaderValue {
    match scheme {
        "http" => HeaderValue::from_static("http"),
        "https" => HeaderValue::from_static("https"),
        other => HeaderValue::from_str(other).unwrap_or(HeaderValue::from_static("http")),
    }
}

/// RFC 7239 `Forwarded` from the `X-Forwarded-For/-Host/-Proto` values, in the
/// queue-proxy's layout: `for=<first>;host=<h>;proto=<p>, for=<second>, ...`. `None` when
/// all are empty.
fn synthesize_forwarded(xff: &[u8], xfh: Option<&[u8]>, xfp: Option<&[u8]>) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(xff.len() * 2 + xfh.map_or(0, <[u8]>::len) + 32);
    let mut nodes = xff
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|n| !n.is_empty());
    if let Some(first) = nodes.next() {
        out.extend_from_slice(b"for=");
        write_node(&mut out, first);
    }
    for (key, value) in [(&b"host="[..], xfh), (&b"proto="[..], xfp)] {
        if let Some(value) = value.map(<[u8]>::trim_ascii).filter(|v| !v.is_empty()) {
            if !out.is_empty() {
                out.push(b';');
            }
            out.extend_from_slice(key);
            write_value(&mut out, value);
        }
    }
    for node in nodes {
        out.extend_from_slice(b", for=");
        write_node(&mut out, node);
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::from_maybe_shared(Bytes::from(out)).ok()
}

/// A node of `for=`: IPv6 addresses as `"[addr]"` (RFC 7239 §6), others as token or
/// quoted string.
fn write_node(out: &mut Vec<u8>, node: &[u8]) {
    // Only a node with a colon can be an IPv6 address: spare the others the parse.
    let v6 = node.contains(&b':')
        && std::str::from_utf8(node)
            .ok()
            .and_then(|s| s.parse::<IpAddr>().ok())
            .is_some_and(|ip| ip.is_ipv6());
    if v6 {
        out.extend_from_slice(b"\"[");
        out.extend_from_slice(node);
        out.extend_from_slice(b"]\"");
    } else {
        write_value(out, node);
    }
}

/// A parameter value: as is when it is an RFC 9110 token, else a quoted string (e.g. a
/// `host:port`, which a token cannot hold).
fn write_value(out: &mut Vec<u8>, value: &[u8]) {
    if value.iter().all(|b| is_tchar(*b)) {
        out.extend_from_slice(value);
        return;
    }
    out.push(b'"');
    for &b in value {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// RFC 9110 `tchar` as a table: every request's `Forwarded` value is checked byte by byte,
/// and a search of the punctuation list per byte was a visible share of the request path.
const TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric();
        b += 1;
    }
    let punctuation = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < punctuation.len() {
        table[punctuation[i] as usize] = true;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn ctx(ip: IpAddr) -> ForwardContext {
        ForwardContext {
            client_addr: ip,
            client_port: 0,
            scheme: "http",
            proxied_by_activator: false,
            arrived: None,
        }
    }

    type Pairs = Vec<(&'static str, &'static str)>;

    fn v4() -> ForwardContext {
        ctx(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)))
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn get<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
        h.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn every_header_the_rules_remove_takes_the_slow_path() {
        // `is_special` guards the removals: a name missing from it would leak through.
        for name in HOP_BY_HOP.iter().chain([&CONNECTION, &UPGRADE, &TE]) {
            assert!(is_special(name), "{name}");
        }
        for name in INTERNAL {
            assert!(is_special(&HeaderName::from_static(name)), "{name}");
        }
        for name in ["host", "accept", "x-forwarded-for", "user-agent"] {
            assert!(!is_special(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn forwarded_headers_table() {
        let v6 = ctx(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
        // (client ctx, request headers, expected XFF, expected Forwarded)
        let cases: Vec<(ForwardContext, Pairs, &str, &str)> = vec![
            (
                v4(),
                vec![("host", "example.com")],
                "1.2.3.4",
                "for=1.2.3.4;host=example.com;proto=http",
            ),
            (
                v4(),
                vec![("host", "example.com"), ("x-forwarded-for", "9.9.9.9")],
                "9.9.9.9, 1.2.3.4",
                "for=9.9.9.9;host=example.com;proto=http, for=1.2.3.4",
            ),
            (
                // Two XFF lines are one list.
                v4(),
                vec![
                    ("host", "a.b"),
                    ("x-forwarded-for", "8.8.8.8"),
                    ("x-forwarded-for", "7.7.7.7,6.6.6.6"),
                ],
                "8.8.8.8, 7.7.7.7,6.6.6.6, 1.2.3.4",
                "for=8.8.8.8;host=a.b;proto=http, for=7.7.7.7, for=6.6.6.6, for=1.2.3.4",
            ),
            (
                v6,
                vec![("host", "example.com:8080")],
                "2001:db8::1",
                "for=\"[2001:db8::1]\";host=\"example.com:8080\";proto=http",
            ),
            (
                // Existing X-Forwarded-Proto/Host are kept and used.
                v4(),
                vec![
                    ("host", "internal.svc"),
                    ("x-forwarded-proto", "https"),
                    ("x-forwarded-host", "public.example.com"),
                ],
                "1.2.3.4",
                "for=1.2.3.4;host=public.example.com;proto=https",
            ),
            (
                // An existing Forwarded header is left alone.
                v4(),
                vec![("host", "h"), ("forwarded", "for=5.5.5.5")],
                "1.2.3.4",
                "for=5.5.5.5",
            ),
        ];
        for (ctx, headers, xff, fwd) in cases {
            let mut h = map(&headers);
            prepare_request(&mut h, &ctx, false);
            assert_eq!(get(&h, "x-forwarded-for"), Some(xff), "{headers:?}");
            assert_eq!(get(&h, "forwarded"), Some(fwd), "{headers:?}");
            assert_eq!(h.get_all("forwarded").iter().count(), 1);
        }
    }

    #[test]
    fn x_forwarded_proto_and_host_set_only_if_absent() {
        let mut h = map(&[("host", "example.com")]);
        prepare_request(&mut h, &v4(), false);
        assert_eq!(get(&h, "x-forwarded-proto"), Some("http"));
        assert_eq!(get(&h, "x-forwarded-host"), Some("example.com"));
        assert_eq!(get(&h, "host"), Some("example.com"));
    }

    #[test]
    fn hop_by_hop_table() {
        // (request headers, upgrade, headers that must be gone, headers that must remain)
        let cases: Vec<(Pairs, bool, Vec<&str>, Pairs)> = vec![
            (
                vec![
                    ("connection", "keep-alive, X-Custom"),
                    ("keep-alive", "timeout=5"),
                    ("x-custom", "1"),
                    ("x-other", "2"),
                    ("proxy-connection", "keep-alive"),
                    ("transfer-encoding", "chunked"),
                    ("trailer", "grpc-status"),
                    ("proxy-authorization", "Basic x"),
                    ("proxy-authenticate", "Basic"),
                    ("upgrade", "websocket"),
                ],
                false,
                vec![
                    "connection",
                    "keep-alive",
                    "x-custom",
                    "proxy-connection",
                    "transfer-encoding",
                    "trailer",
                    "proxy-authorization",
                    "proxy-authenticate",
                    "upgrade",
                ],
                vec![("x-other", "2")],
            ),
            (
                // Two Connection lines, both honoured.
                vec![
                    ("connection", "x-a"),
                    ("connection", " x-b ,"),
                    ("x-a", "1"),
                    ("x-b", "1"),
                ],
                false,
                vec!["connection", "x-a", "x-b"],
                vec![],
            ),
            (
                vec![
                    ("connection", "Upgrade, x-hop"),
                    ("upgrade", "websocket"),
                    ("x-hop", "1"),
                    ("sec-websocket-key", "k"),
                ],
                true,
                vec!["x-hop"],
                vec![
                    ("connection", "upgrade"),
                    ("upgrade", "websocket"),
                    ("sec-websocket-key", "k"),
                ],
            ),
            (
                vec![("te", "trailers, deflate")],
                false,
                vec![],
                vec![("te", "trailers")],
            ),
            (vec![("te", "gzip")], false, vec!["te"], vec![]),
            (
                // Forwarding headers named in `Connection` are dropped before they are
                // completed: the app sees this hop's values only.
                vec![
                    ("host", "h.example.com"),
                    ("connection", "x-forwarded-for, x-forwarded-host, forwarded"),
                    ("x-forwarded-for", "9.9.9.9"),
                    ("x-forwarded-host", "spoofed.example.com"),
                    ("forwarded", "for=9.9.9.9"),
                ],
                false,
                vec!["connection"],
                vec![
                    ("x-forwarded-for", "1.2.3.4"),
                    ("x-forwarded-host", "h.example.com"),
                    ("forwarded", "for=1.2.3.4;host=h.example.com;proto=http"),
                ],
            ),
        ];
        for (headers, upgrade, gone, kept) in cases {
            let mut h = map(&headers);
            prepare_request(&mut h, &v4(), upgrade);
            for name in &gone {
                assert!(!h.contains_key(*name), "{name} kept: {headers:?}");
            }
            for (name, value) in &kept {
                assert_eq!(get(&h, name), Some(*value), "{name}: {headers:?}");
            }
        }
    }

    #[test]
    fn internal_headers_never_reach_the_app() {
        let mut h = map(&[
            ("host", "rewritten.internal"),
            ("k-original-host", "hello.default.example.com"),
            ("knative-serving-revision", "hello-00001"),
            ("knative-serving-namespace", "default"),
            ("k-proxy-request", "activator"),
            ("knative-serving-tag", "blue"),
        ]);
        let ctx = ForwardContext {
            proxied_by_activator: true,
            arrived: None,
            ..v4()
        };
        prepare_request(&mut h, &ctx, false);
        for name in INTERNAL {
            assert!(!h.contains_key(*name), "{name} reached the app");
        }
        assert_eq!(get(&h, "host"), Some("hello.default.example.com"));
        assert_eq!(
            get(&h, "x-forwarded-host"),
            Some("hello.default.example.com")
        );
        assert_eq!(get(&h, "knative-serving-tag"), Some("blue"));
    }

    #[test]
    fn proxy_hop_keeps_internal_headers() {
        let mut h = map(&[
            ("host", "h"),
            ("knative-serving-revision", "r"),
            ("k-original-host", "o"),
            ("connection", "close"),
        ]);
        let ctx = ForwardContext {
            proxied_by_activator: true,
            arrived: None,
            ..v4()
        };
        prepare_proxy_request(&mut h, &ctx, false);
        assert_eq!(get(&h, "knative-serving-revision"), Some("r"));
        assert_eq!(get(&h, "k-original-host"), Some("o"));
        assert_eq!(get(&h, "k-proxy-request"), Some("activator"));
        assert_eq!(get(&h, "x-forwarded-for"), Some("1.2.3.4"));
        assert!(!h.contains_key("forwarded"));
        assert!(!h.contains_key("connection"));
    }

    #[test]
    fn response_rules() {
        let mut h = map(&[
            ("connection", "close, x-drop"),
            ("x-drop", "1"),
            ("transfer-encoding", "chunked"),
            ("keep-alive", "timeout=5"),
            ("k-proxy-request", "activator"),
            ("knative-serving-revision", "r"),
            ("knative-serving-anything", "x"),
            ("content-type", "text/plain"),
            ("upgrade", "websocket"),
        ]);
        prepare_response(&mut h, false);
        let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, vec!["content-type"]);

        let mut h = map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-accept", "x"),
        ]);
        prepare_response(&mut h, true);
        assert_eq!(get(&h, "connection"), Some("upgrade"));
        assert_eq!(get(&h, "upgrade"), Some("websocket"));
        assert_eq!(get(&h, "sec-websocket-accept"), Some("x"));
    }

    #[test]
    fn upgrade_detection() {
        assert!(is_upgrade(&map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket")
        ])));
        assert!(!is_upgrade(&map(&[("connection", "upgrade")])));
        assert!(!is_upgrade(&map(&[("upgrade", "websocket")])));
    }

    fn parts(uri: &str, headers: &[(&str, &str)]) -> request::Parts {
        let mut b = hyper::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn target_table() {
        // (uri, headers, protocol, expected uri, expected Host header)
        let cases = [
            (
                "/a/b?x=1",
                &[("host", "example.com")][..],
                Protocol::Http1,
                "/a/b?x=1",
                Some("example.com"),
            ),
            (
                "http://example.com/p?q",
                &[][..],
                Protocol::Http1,
                "/p?q",
                Some("example.com"),
            ),
            (
                "/p",
                &[("host", "example.com:8080")][..],
                Protocol::H2c,
                "http://example.com:8080/p",
                None,
            ),
            (
                "http://from-authority/p",
                &[][..],
                Protocol::H2c,
                "http://from-authority/p",
                None,
            ),
            ("*", &[("host", "h")][..], Protocol::Http1, "*", Some("h")),
        ];
        for (uri, headers, protocol, want_uri, want_host) in cases {
            let mut p = parts(uri, headers);
            ensure_host(&mut p);
            prepare_target(&mut p, protocol);
            assert_eq!(p.uri.to_string(), want_uri, "{uri} {protocol:?}");
            assert_eq!(get(&p.headers, "host"), want_host, "{uri} {protocol:?}");
        }
    }

    #[test]
    fn tchar_table_is_rfc_9110() {
        let punctuation = b"!#$%&'*+-.^_`|~";
        for b in 0..=u8::MAX {
            let expected = b.is_ascii_alphanumeric() || punctuation.contains(&b);
            assert_eq!(is_tchar(b), expected, "{b:#04x}");
        }
    }

    #[test]
    fn ip_text_matches_display() {
        let cases: [IpAddr; 7] = [
            Ipv4Addr::new(0, 0, 0, 0).into(),
            Ipv4Addr::new(255, 255, 255, 255).into(),
            Ipv4Addr::new(127, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 100, 9).into(),
            Ipv4Addr::new(1, 20, 3, 45).into(),
            Ipv6Addr::LOCALHOST.into(),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10).into(),
        ];
        for ip in cases {
            assert_eq!(ip_text(ip), ip.to_string().into_bytes(), "{ip}");
        }
    }
}
