//! A blocking HTTP client for the wisp REST API (Kubernetes conventions), and the error type
//! that carries the server's `Status` so that commands can print it the way kubectl does.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use reqwest::blocking::{RequestBuilder, Response};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use wisp_api::kinds::ResourceKind;
use wisp_api::meta::ApiStatus;

/// Timeout of every request except watches.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An error talking to the API.
#[derive(Debug)]
pub enum ApiError {
    /// The server answered with an error `Status`.
    Status(Box<ApiStatus>),
    /// The server could not be reached.
    Connect { server: String, detail: String },
    /// Anything else (a broken response, a timeout, …).
    Other(anyhow::Error),
}

impl ApiError {
    pub fn status(&self) -> Option<&ApiStatus> {
        match self {
            ApiError::Status(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    pub fn code(&self) -> Option<u16> {
        self.status().map(|s| s.code)
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// `Error from server (Reason): <context>message`, kubectl's rendering of a server error;
    /// other errors render as `error: …`.
    pub fn render(&self, context: Option<&str>) -> String {
        match self {
            ApiError::Status(s) => server_error_line(s, context),
            other => format!("error: {other}"),
        }
    }
}

/// kubectl's `Error from server (Reason): …` line.
pub fn server_error_line(s: &ApiStatus, context: Option<&str>) -> String {
    let ctx = context.map(|c| format!("{c}: ")).unwrap_or_default();
    if s.reason.is_empty() {
        format!("Error from server: {ctx}{}", s.message)
    } else {
        format!("Error from server ({}): {ctx}{}", s.reason, s.message)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status(s) => f.write_str(&server_error_line(s, None)),
            ApiError::Connect { server, detail } => write!(
                f,
                "cannot connect to the wisp API server at {server} ({detail}); is `wisp serve` \
                 running? Start it with `wisp serve`, or point --server (or WISP_SERVER) at a \
                 running server"
            ),
            ApiError::Other(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// Whether a transport error is rustls refusing the server's certificate.
fn is_certificate_error(e: &reqwest::Error) -> bool {
    fn rustls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
        if let Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) =
            e.downcast_ref::<rustls::Error>()
        {
            return true;
        }
        // io::Error hides the error it wraps from `source()`; look inside.
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            return rustls_refused(inner);
        }
        e.source().is_some_and(rustls_refused)
    }
    rustls_refused(e)
}

/// The `reason` Kubernetes uses for an HTTP status code, for errors without a Status body.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// Turns an error response body into a `Status`, synthesising one when the body is not.
pub fn status_from_body(code: u16, body: &str) -> ApiStatus {
    if let Ok(v) = serde_json::from_str::<Value>(body)
        && v.get("kind").and_then(Value::as_str) == Some("Status")
    {
        let field = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut s = ApiStatus::failure(code, &field("reason"), field("message"));
        if let Some(c) = v.get("code").and_then(Value::as_u64).filter(|c| *c > 0) {
            s.code = u16::try_from(c).unwrap_or(code);
        }
        if s.reason.is_empty() {
            s.reason = reason_for_code(s.code).to_string();
        }
        s.details = v.get("details").cloned();
        return s;
    }
    let text = body.trim();
    let message = if text.is_empty() {
        format!(
            "the server responded with status {code} {}",
            StatusCode::from_u16(code)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("")
        )
        .trim_end()
        .to_string()
    } else {
        text.to_string()
    };
    ApiStatus::failure(code, reason_for_code(code), message)
}

/// Parses a `Warning` header (`299 - "text"`) into its text, as kubectl prints it.
pub fn parse_warning(header: &str) -> Option<String> {
    let h = header.trim();
    // warn-code SP warn-agent SP quoted-text [SP warn-date]
    let mut parts = h.splitn(3, ' ');
    let code = parts.next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let _agent = parts.next()?;
    let rest = parts.next()?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let mut text = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.push(chars.next()?),
            '"' => return Some(text),
            c => text.push(c),
        }
    }
    None
}

/// One event of a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub type_: String,
    pub object: Value,
}

/// An open watch: newline-delimited JSON events.
pub struct WatchStream {
    reader: BufReader<Response>,
}

impl WatchStream {
    /// The next event; `Ok(None)` when the server closed the stream.
    pub fn next_event(&mut self) -> Result<Option<WatchEvent>, ApiError> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .reader
                .read_line(&mut line)
                .map_err(|e| ApiError::Other(anyhow::anyhow!("reading the watch stream: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            if line.trim().is_empty() {
                continue;
            }
            return parse_watch_line(&line).map(Some);
        }
    }
}

/// Parses one line of a watch stream.
pub fn parse_watch_line(line: &str) -> Result<WatchEvent, ApiError> {
    let v: Value = serde_json::from_str(line.trim()).map_err(|e| {
        ApiError::Other(anyhow::anyhow!(
            "malformed watch event {:?}: {e}",
            line.trim()
        ))
    })?;
    let type_ = v
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let object = v.get("object").cloned().unwrap_or(Value::Null);
    Ok(WatchEvent { type_, object })
}

/// A client for one API server.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    server: String,
    /// The CA file trusted for an https server (for error messages).
    ca: Option<std::path::PathBuf>,
    token: Option<String>,
    http: reqwest::blocking::Client,
}

impl Client {
    /// A client of `server`; an `https` server must present a certificate signed by the CA
    /// in the file `ca` (and only that CA is trusted).
    pub fn new(
        server: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> anyhow::Result<Client> {
        let server = server.trim_end_matches('/').to_string();
        let base = Url::parse(&server)
            .map_err(|e| anyhow::anyhow!("invalid server URL {server:?}: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("invalid server URL {server:?}: the scheme must be http or https");
        }
        crate::tls::install_default_provider();
        let mut builder = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(None::<Duration>)
            .no_proxy();
        let ca = if base.scheme() == "https" {
            let path = ca.ok_or_else(|| {
                anyhow::anyhow!("{server} is an https URL: a CA certificate to trust is needed")
            })?;
            let pem = std::fs::read(path).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the API server's CA certificate {}: {e}; `wisp serve` writes \
                     it to its data dir (point --data-dir or WISP_DATA_DIR there), or pass \
                     --certificate-authority",
                    path.display()
                )
            })?;
            builder = builder.tls_backend_preconfigured(crate::tls::client_config(&pem, path)?);
            Some(path.to_path_buf())
        } else {
            None
        };
        let http = builder.build()?;
        Ok(Client {
            base,
            server,
            ca,
            token,
            http,
        })
    }

    /// `/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]` (`/api/v1/…` for the core
    /// kinds).
    pub fn url(&self, kind: &ResourceKind, namespace: Option<&str>, name: Option<&str>) -> Url {
        let mut url = self.base.clone();
        {
            let mut segs = url.path_segments_mut().expect("http URLs have a path");
            segs.pop_if_empty();
            if kind.is_core() {
                segs.extend(["api", kind.version]);
            } else {
                segs.extend(["apis", kind.group, kind.version]);
            }
            // A cluster-scoped kind (Namespace) has no namespace segment.
            if let Some(ns) = namespace.filter(|_| kind.namespaced) {
                segs.extend(["namespaces", ns]);
            }
            segs.push(kind.plural);
            if let Some(n) = name {
                segs.push(n);
            }
        }
        url
    }

    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let mut rb = self
            .http
            .request(method, url)
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    fn send(&self, rb: RequestBuilder) -> Result<Response, ApiError> {
        let resp = rb.send().map_err(|e| self.transport_error(e))?;
        for w in resp.headers().get_all("warning") {
            if let Some(text) = w.to_str().ok().and_then(parse_warning) {
                eprintln!("Warning: {text}");
            }
        }
        if resp.status().is_success() {
            return Ok(resp);
        }
        let code = resp.status().as_u16();
        let body = resp.text().unwrap_or_default();
        Err(ApiError::Status(Box::new(status_from_body(code, &body))))
    }

    fn transport_error(&self, e: reqwest::Error) -> ApiError {
        let mut detail = e.to_string();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(s) = src {
            detail = s.to_string();
            src = s.source();
        }
        if is_certificate_error(&e) {
            ApiError::Other(anyhow::anyhow!(
                "the API server's certificate at {} does not verify against the CA {}: {detail}",
                self.server,
                self.ca
                    .as_deref()
                    .map_or_else(|| "(none)".into(), |p| p.display().to_string()),
            ))
        } else if e.is_connect() {
            ApiError::Connect {
                server: self.server.clone(),
                detail,
            }
        } else if e.is_timeout() {
            ApiError::Other(anyhow::anyhow!("request to {} timed out", self.server))
        } else {
            ApiError::Other(anyhow::anyhow!(
                "request to {} failed: {detail}",
                self.server
            ))
        }
    }

    fn json(&self, rb: RequestBuilder) -> Result<Value, ApiError> {
        let resp = self.send(rb.timeout(REQUEST_TIMEOUT))?;
        let text = resp.text().map_err(|e| self.transport_error(e))?;
        serde_json::from_str(&text).map_err(|e| {
            ApiError::Other(anyhow::anyhow!(
                "the server sent a response that is not JSON: {e}"
            ))
        })
    }

    /// GETs a path (with its query) of the server (`/wisp/v1/top?…`) as JSON.
    pub fn get_path_query(&self, path_and_query: &str) -> Result<Value, ApiError> {
        let url = self.base.join(path_and_query).map_err(|e| {
            ApiError::Other(anyhow::anyhow!("invalid path {path_and_query:?}: {e}"))
        })?;
        self.json(self.request(Method::GET, url))
    }

    pub fn get(&self, kind: &ResourceKind, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.json(self.request(Method::GET, self.url(kind, Some(ns), Some(name))))
    }

    /// Lists a kind in one namespace, or in all with `ns = None`.
    pub fn list(
        &self,
        kind: &ResourceKind,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut url = self.url(kind, ns, None);
        if let Some(sel) = selector.filter(|s| !s.is_empty()) {
            url.query_pairs_mut().append_pair("labelSelector", sel);
        }
        self.json(self.request(Method::GET, url))
    }

    pub fn create(&self, kind: &ResourceKind, ns: &str, body: &Value) -> Result<Value, ApiError> {
        self.json(
            self.request(Method::POST, self.url(kind, Some(ns), None))
                .json(body),
        )
    }

    pub fn replace(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        self.json(
            self.request(Method::PUT, self.url(kind, Some(ns), Some(name)))
                .json(body),
        )
    }

    pub fn delete(&self, kind: &ResourceKind, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.json(self.request(Method::DELETE, self.url(kind, Some(ns), Some(name))))
    }

    /// Opens the `log` subresource of a service or revision: how many replicas it has now,
    /// and a reader of newline-delimited JSON lines `{"replica","stream","line"}`.
    pub fn logs(
        &self,
        kind: &ResourceKind,
        ns: &str,
        name: &str,
        follow: bool,
        tail: Option<usize>,
        container: Option<&str>,
    ) -> Result<(usize, BufReader<Response>), ApiError> {
        let mut url = self.url(kind, Some(ns), Some(name));
        url.path_segments_mut()
            .expect("http URLs have a path")
            .push("log");
        {
            let mut q = url.query_pairs_mut();
            if follow {
                q.append_pair("follow", "true");
            }
            if let Some(t) = tail {
                q.append_pair("tailLines", &t.to_string());
            }
            if let Some(c) = container {
                q.append_pair("container", c);
            }
        }
        let resp = self.send(self.request(Method::GET, url))?;
        let replicas = resp
            .headers()
            .get("x-wisp-replicas")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok((replicas, BufReader::new(resp)))
    }

    /// Opens a watch from `resource_version`. A too-old version fails with a 410 `Status`.
    pub fn watch(
        &self,
        kind: &ResourceKind,
        ns: Option<&str>,
        selector: Option<&str>,
        resource_version: &str,
    ) -> Result<WatchStream, ApiError> {
        let mut url = self.url(kind, ns, None);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("watch", "true");
            if !resource_version.is_empty() {
                q.append_pair("resourceVersion", resource_version);
            }
            if let Some(sel) = selector.filter(|s| !s.is_empty()) {
                q.append_pair("labelSelector", sel);
            }
        }
        let resp = self.send(self.request(Method::GET, url))?;
        Ok(WatchStream {
            reader: BufReader::new(resp),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::kinds;

    #[test]
    fn urls() {
        let c = Client::new("http://127.0.0.1:7070/", None, None).unwrap();
        assert_eq!(
            c.url(&kinds::SERVICE, Some("default"), Some("hello"))
                .as_str(),
            "http://127.0.0.1:7070/apis/serving.knative.dev/v1/namespaces/default/services/hello"
        );
        assert_eq!(
            c.url(&kinds::POD_AUTOSCALER, None, None).as_str(),
            "http://127.0.0.1:7070/apis/autoscaling.internal.knative.dev/v1alpha1/podautoscalers"
        );
        let c = Client::new("http://host:1/prefix", None, None).unwrap();
        assert_eq!(
            c.url(&kinds::ROUTE, Some("ns"), None).as_str(),
            "http://host:1/prefix/apis/serving.knative.dev/v1/namespaces/ns/routes"
        );
        assert!(Client::new("not a url", None, None).is_err());
        assert!(Client::new("ftp://x", None, None).is_err());
    }

    #[test]
    fn warnings() {
        let cases = [
            (
                r#"299 - "spec.foo is deprecated""#,
                Some("spec.foo is deprecated"),
            ),
            (
                r#"299 wisp "say \"hi\"" "Mon, 01 Jan 2024 00:00:00 GMT""#,
                Some("say \"hi\""),
            ),
            ("299 - unquoted", None),
            ("abc - \"x\"", None),
            ("", None),
        ];
        for (h, want) in cases {
            assert_eq!(parse_warning(h).as_deref(), want, "{h}");
        }
    }

    #[test]
    fn status_bodies() {
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"services.serving.knative.dev \"x\" not found","reason":"NotFound","code":404}"#;
        let s = status_from_body(404, body);
        assert_eq!(
            server_error_line(&s, None),
            "Error from server (NotFound): services.serving.knative.dev \"x\" not found"
        );
        let s = status_from_body(
            422,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"admission webhook denied","reason":"Invalid","code":422}"#,
        );
        assert_eq!(
            server_error_line(&s, Some("error when creating \"svc.yaml\"")),
            "Error from server (Invalid): error when creating \"svc.yaml\": admission webhook denied"
        );
        let s = status_from_body(500, "boom\n");
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (500, "InternalError", "boom")
        );
        let s = status_from_body(418, "");
        assert_eq!(
            server_error_line(&s, None),
            "Error from server: the server responded with status 418 I'm a teapot"
        );
    }

    #[test]
    fn watch_lines() {
        let e =
            parse_watch_line("{\"type\":\"ADDED\",\"object\":{\"kind\":\"Service\"}}\n").unwrap();
        assert_eq!(e.type_, "ADDED");
        assert_eq!(e.object["kind"], "Service");
        let e = parse_watch_line(
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Gone"}}"#,
        )
        .unwrap();
        assert_eq!(e.type_, "ERROR");
        assert!(parse_watch_line("not json").is_err());
    }
}
