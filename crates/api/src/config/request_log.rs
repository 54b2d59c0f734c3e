//! Request logs (`config-observability`'s `logging.request-log-template`): what one line
//! of Knative's queue-proxy request log can say, and how it is rendered. The template is
//! Go's `text/template` over Knative's `RequestLogTemplateInput` (`pkg/http/request_log.go`):
//! `.Request` (Go's `http.Request`: `Method`, `URL`, `RequestURI`, `Proto`, `Host`,
//! `RemoteAddr`, `ContentLength`, `Header`, `UserAgent`, `Referer`), `.Response` (`Code`,
//! `Size`, `Latency` in seconds), `.Revision` (`Name`, `Namespace`, `Service`,
//! `Configuration`, `PodName`, `PodIP`) and `.TraceID`. Values print as Go prints them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::parse::template::{Datum, Template};

/// Knative's default `logging.request-log-template`.
pub const DEFAULT_TEMPLATE: &str = r#"{"httpRequest": {"requestMethod": "{{.Request.Method}}", "requestUrl": "{{js .Request.RequestURI}}", "requestSize": "{{.Request.ContentLength}}", "status": {{.Response.Code}}, "responseSize": "{{.Response.Size}}", "userAgent": "{{js .Request.UserAgent}}", "remoteIp": "{{js .Request.RemoteAddr}}", "serverIp": "{{.Revision.PodIP}}", "referer": "{{js .Request.Referer}}", "latency": "{{.Response.Latency}}s", "protocol": "{{.Request.Proto}}"}, "traceId": "{{.TraceID}}"}"#;

/// The revision a request went to (Knative's `RequestLogRevision`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevisionInfo {
    pub name: String,
    pub namespace: String,
    pub service: String,
    pub configuration: String,
}

/// One request as the template sees it.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    pub method: &'a str,
    /// Go's `Request.URL` printed: the request target (path and query, or the absolute
    /// URL of an absolute-form request).
    pub url: &'a str,
    /// The request target as sent (`RequestURI`).
    pub request_uri: &'a str,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub proto: &'a str,
    pub host: &'a str,
    /// `ip:port` of the client.
    pub remote_addr: &'a str,
    /// -1 when unknown (a chunked body).
    pub content_length: i64,
    /// Headers by Go's canonical name (`X-B3-Traceid`).
    pub header: Option<&'a BTreeMap<String, Vec<String>>>,
    pub code: u16,
    /// Bytes of the response body.
    pub size: u64,
    /// Seconds from arrival to the end of the response.
    pub latency: f64,
    pub revision: &'a RevisionInfo,
    /// The replica that served it (`PodName`) and its IP (`PodIP`).
    pub pod_name: &'a str,
    pub pod_ip: &'a str,
    pub trace_id: &'a str,
}

/// A request log template, checked against every field a request has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestLogTemplate {
    template: Template,
    /// Whether it reads `.Request.Header` (only then are headers copied per request).
    headers: bool,
    /// Whether it reads `.TraceID`.
    trace: bool,
}

impl RequestLogTemplate {
    /// Parses `src` and renders it once against a sample request, so that a field wisp
    /// does not know fails here (Go would fail each request when it runs).
    pub fn parse(src: &str) -> Result<RequestLogTemplate, String> {
        let template = Template::parse(src)?;
        let headers = template.fields().contains(&"Request.Header");
        let trace = template.fields().contains(&"TraceID");
        let t = RequestLogTemplate {
            template,
            headers,
            trace,
        };
        let (empty, revision) = (BTreeMap::new(), RevisionInfo::default());
        let sample = Entry {
            method: "GET",
            url: "/",
            request_uri: "/",
            proto: "HTTP/1.1",
            host: "",
            remote_addr: "",
            content_length: 0,
            header: Some(&empty),
            code: 200,
            size: 0,
            latency: 0.0,
            revision: &revision,
            pod_name: "",
            pod_ip: "",
            trace_id: "",
        };
        t.render(&sample, &mut String::new())?;
        Ok(t)
    }

    /// Whether rendering needs the request's headers.
    pub fn needs_headers(&self) -> bool {
        self.headers
    }

    /// Whether rendering needs the trace id.
    pub fn needs_trace_id(&self) -> bool {
        self.trace
    }

    /// Appends the line for `e` (without a newline) to `out`.
    pub fn render(&self, e: &Entry<'_>, out: &mut String) -> Result<(), String> {
        let empty = BTreeMap::new();
        let s = |v: &str| Some(Datum::Str(Cow::Owned(v.to_string())));
        let lookup = |f: &str| -> Option<Datum<'_>> {
            match f {
                "Request.Method" => s(e.method),
                "Request.URL" => s(e.url),
                "Request.RequestURI" => s(e.request_uri),
                "Request.Proto" => s(e.proto),
                "Request.ProtoMajor" => s(&major(e.proto).to_string()),
                "Request.ProtoMinor" => s(&minor(e.proto).to_string()),
                "Request.Host" => s(e.host),
                "Request.RemoteAddr" => s(e.remote_addr),
                "Request.ContentLength" => s(&e.content_length.to_string()),
                "Request.UserAgent" => s(first(e.header, "User-Agent")),
                "Request.Referer" => s(first(e.header, "Referer")),
                "Request.Header" => Some(Datum::Multi(e.header.unwrap_or(&empty))),
                "Response.Code" => s(&e.code.to_string()),
                "Response.Size" => s(&e.size.to_string()),
                "Response.Latency" => s(&go_float(e.latency)),
                "Revision.Name" => s(&e.revision.name),
                "Revision.Namespace" => s(&e.revision.namespace),
                "Revision.Service" => s(&e.revision.service),
                "Revision.Configuration" => s(&e.revision.configuration),
                "Revision.PodName" => s(e.pod_name),
                "Revision.PodIP" => s(e.pod_ip),
                "TraceID" => s(e.trace_id),
                _ => None,
            }
        };
        self.template.render_into(out, &lookup)
    }
}

fn first<'a>(h: Option<&'a BTreeMap<String, Vec<String>>>, k: &str) -> &'a str {
    h.and_then(|h| h.get(k))
        .and_then(|v| v.first())
        .map_or("", String::as_str)
}

fn major(proto: &str) -> u8 {
    proto
        .strip_prefix("HTTP/")
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn minor(proto: &str) -> u8 {
    proto
        .strip_prefix("HTTP/")
        .and_then(|v| v.split('.').nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Go's canonical header name (`x-b3-traceid` → `X-B3-Traceid`).
pub fn canonical_header(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    out
}

/// The trace id of a request, as Knative's `ExtractTraceID`: W3C `traceparent`'s trace id,
/// else B3's `X-B3-TraceId`, else "".
pub fn trace_id<'a>(traceparent: Option<&'a str>, b3: Option<&'a str>) -> &'a str {
    if let Some(tp) = traceparent {
        let parts: Vec<&str> = tp.trim().split('-').collect();
        if parts.len() >= 4
            && parts[1].len() == 32
            && parts[1].bytes().all(|b| b.is_ascii_hexdigit())
        {
            return parts[1];
        }
    }
    b3.map(str::trim).unwrap_or("")
}

/// A float64 as Go's `%v` prints it (`strconv`'s shortest `%g`): the shortest digits that
/// read back the same, in exponent form (`1.5e-05`, `1e+06`) when the exponent is below
/// -4 or at least 6.
pub fn go_float(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "NaN".into()
        } else if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Rust's `{:e}` gives the same shortest digits: `1.5e-5`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let mut out = mantissa.to_string();
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
        out
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(rev: &'a RevisionInfo, header: &'a BTreeMap<String, Vec<String>>) -> Entry<'a> {
        Entry {
            method: "POST",
            url: "/api?q=1",
            request_uri: "/api?q=1",
            proto: "HTTP/1.1",
            host: "hello.default.example.com",
            remote_addr: "127.0.0.1:53412",
            content_length: 12,
            header: Some(header),
            code: 201,
            size: 1234,
            latency: 0.001_5,
            revision: rev,
            pod_name: "hello-00001-abc",
            pod_ip: "127.0.0.1",
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
        }
    }

    #[test]
    fn every_documented_field() {
        let rev = RevisionInfo {
            name: "hello-00001".into(),
            namespace: "default".into(),
            service: "hello".into(),
            configuration: "hello".into(),
        };
        let header: BTreeMap<String, Vec<String>> = [
            ("User-Agent".to_string(), vec!["curl/8.0 \"x\"".to_string()]),
            ("Referer".to_string(), vec!["http://a/".to_string()]),
            ("X-B3-Traceid".to_string(), vec!["b3id".to_string()]),
        ]
        .into();
        let e = entry(&rev, &header);
        let cases = [
            ("{{.Request.Method}}", "POST"),
            ("{{.Request.URL}}", "/api?q=1"),
            ("{{.Request.RequestURI}}", "/api?q=1"),
            (
                "{{.Request.Proto}} {{.Request.ProtoMajor}}.{{.Request.ProtoMinor}}",
                "HTTP/1.1 1.1",
            ),
            ("{{.Request.Host}}", "hello.default.example.com"),
            ("{{.Request.RemoteAddr}}", "127.0.0.1:53412"),
            ("{{.Request.ContentLength}}", "12"),
            ("{{js .Request.UserAgent}}", "curl/8.0 \\\"x\\\""),
            ("{{.Request.Referer}}", "http://a/"),
            ("{{index .Request.Header \"X-B3-Traceid\"}}", "[b3id]"),
            ("{{.Response.Code}} {{.Response.Size}}", "201 1234"),
            ("{{.Response.Latency}}", "0.0015"),
            (
                "{{.Revision.Name}}/{{.Revision.Namespace}}",
                "hello-00001/default",
            ),
            (
                "{{.Revision.Service}} {{.Revision.Configuration}}",
                "hello hello",
            ),
            (
                "{{.Revision.PodName}} {{.Revision.PodIP}}",
                "hello-00001-abc 127.0.0.1",
            ),
            ("{{.TraceID}}", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ];
        for (src, want) in cases {
            let t = RequestLogTemplate::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let mut out = String::new();
            t.render(&e, &mut out).unwrap();
            assert_eq!(out, want, "{src}");
        }
        let t = RequestLogTemplate::parse(DEFAULT_TEMPLATE).unwrap();
        assert!(
            !t.needs_headers(),
            "the default reads UserAgent and Referer, not Header"
        );
        assert!(t.needs_trace_id());
        let mut out = String::new();
        t.render(&e, &mut out).unwrap();
        assert_eq!(
            out,
            r#"{"httpRequest": {"requestMethod": "POST", "requestUrl": "/api?q\u003D1", "requestSize": "12", "status": 201, "responseSize": "1234", "userAgent": "curl/8.0 \"x\"", "remoteIp": "127.0.0.1:53412", "serverIp": "127.0.0.1", "referer": "http://a/", "latency": "0.0015s", "protocol": "HTTP/1.1"}, "traceId": "4bf92f3577b34da6a3ce929d0e0e4736"}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["httpRequest"]["userAgent"], "curl/8.0 \"x\"");
        assert_eq!(
            parsed["httpRequest"]["requestUrl"], "/api?q=1",
            "js escapes `=`"
        );
    }

    #[test]
    fn unknown_fields_fail_at_parse() {
        for (src, want) in [
            (
                "{{.Request.Nope}}",
                "template: can't evaluate field Request.Nope",
            ),
            ("{{.Response}}", "template: can't evaluate field Response"),
            ("{{.Revision.Name", "template: unclosed action"),
        ] {
            let err = RequestLogTemplate::parse(src).unwrap_err();
            assert!(err.starts_with(want), "{src}: {err}");
        }
    }

    #[test]
    fn floats_print_as_go_prints_them() {
        for (v, want) in [
            (0.0, "0"),
            (1.0, "1"),
            (0.5, "0.5"),
            (0.0015, "0.0015"),
            (0.0001, "0.0001"),
            (0.000_015, "1.5e-05"),
            (12.25, "12.25"),
            (100_000.0, "100000"),
            (1e6, "1e+06"),
            (123_456_789.0, "1.23456789e+08"),
            (2e21, "2e+21"),
        ] {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn trace_ids_and_header_names() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            trace_id(Some(tp), Some("b3")),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(trace_id(Some("garbage"), Some("b3")), "b3");
        assert_eq!(trace_id(None, None), "");
        for (raw, want) in [
            ("x-b3-traceid", "X-B3-Traceid"),
            ("USER-AGENT", "User-Agent"),
            ("accept", "Accept"),
        ] {
            assert_eq!(canonical_header(raw), want);
        }
    }
}
