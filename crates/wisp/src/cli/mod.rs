//! The client commands (`apply`, `get`, `describe`, `delete`): kubectl-like, talking to the
//! wisp REST API over HTTPS.
//!
//! Each command module holds its clap arguments, a `run` function that does the I/O, and the
//! pure logic behind it (row building, apply bodies, owner chains) with table tests.

pub mod apply;
pub mod autoscale;
pub mod client;
pub mod delete;
pub mod describe;
pub mod get;
pub mod image;
pub mod kubeconfig;
pub mod logs;
pub mod manifest;
pub mod printers;
pub mod top;
pub mod wait;

use std::path::PathBuf;

/// Writes a command's output to stdout. Unlike `print!`, a closed pipe (`wisp get … | head`)
/// comes back as an `io::Error` of kind `BrokenPipe`, which `main` turns into a quiet exit.
pub fn out(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    std::io::stdout().lock().write_fmt(args)
}

use wisp_api::kinds::{self, ResourceKind};

pub use client::{ApiError, Client};

/// Flags every client command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// URL of the wisp API server.
    #[arg(long, env = "WISP_SERVER", default_value = "https://127.0.0.1:7070")]
    pub server: String,
    /// CA certificate (PEM) that the https server's certificate must be signed by
    /// (default: <data-dir>/ca.crt, written by `wisp serve`).
    #[arg(long, env = "WISP_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Bearer token (default: the contents of <data-dir>/token).
    #[arg(long, env = "WISP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Data directory of the server (only used to find its token and CA files).
    #[arg(long, env = "WISP_DATA_DIR", default_value = ".wisp")]
    pub data_dir: PathBuf,
    /// Namespace to use.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

impl GlobalArgs {
    /// The token from `--token`/`WISP_TOKEN`, else `<data-dir>/token` (trimmed), else none.
    pub fn resolve_token(&self) -> Option<String> {
        if let Some(t) = self
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            return Some(t.to_string());
        }
        std::fs::read_to_string(self.data_dir.join("token"))
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    }

    pub fn client(&self) -> anyhow::Result<Client> {
        let ca = self
            .certificate_authority
            .clone()
            .unwrap_or_else(|| crate::tls::ca_path(&self.data_dir));
        Client::new(&self.server, self.resolve_token(), Some(&ca))
    }
}

/// Reads fields of an untyped object.
pub mod obj {
    use serde_json::Value;

    pub fn str_at<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
        o.pointer(pointer).and_then(Value::as_str)
    }

    pub fn name(o: &Value) -> &str {
        str_at(o, "/metadata/name").unwrap_or_default()
    }

    pub fn namespace(o: &Value) -> &str {
        str_at(o, "/metadata/namespace").unwrap_or_default()
    }

    pub fn uid(o: &Value) -> &str {
        str_at(o, "/metadata/uid").unwrap_or_default()
    }

    pub fn resource_version(o: &Value) -> &str {
        str_at(o, "/metadata/resourceVersion").unwrap_or_default()
    }
}

/// Resolves a resource type typed by the user, as kubectl reports an unknown one.
pub fn resolve_kind(name: &str) -> anyhow::Result<&'static ResourceKind> {
    kinds::lookup(name)
        .ok_or_else(|| anyhow::anyhow!("the server doesn't have a resource type \"{name}\""))
}

/// Finds the kind of a manifest document, checking `apiVersion` like kubectl's REST mapper.
/// The error is kubectl's `resource mapping not found` line (without the `error: ` prefix).
pub fn kind_of_document(
    doc: &serde_json::Value,
    source: &str,
) -> Result<&'static ResourceKind, String> {
    let kind = obj::str_at(doc, "/kind").unwrap_or_default();
    let api_version = obj::str_at(doc, "/apiVersion").unwrap_or_default();
    let mut missing = Vec::new();
    if api_version.is_empty() {
        missing.push("apiVersion not set");
    }
    if kind.is_empty() {
        missing.push("kind not set");
    }
    if !missing.is_empty() {
        return Err(format!(
            "error validating \"{source}\": error validating data: [{}]",
            missing.join(", ")
        ));
    }
    kinds::served()
        .find(|k| k.kind == kind && k.api_version() == api_version)
        .ok_or_else(|| {
            format!(
                "resource mapping not found for name: \"{}\" namespace: \"{}\" from \"{}\": \
                 no matches for kind \"{}\" in version \"{}\"\nensure CRDs are installed first",
                obj::name(doc),
                obj::namespace(doc),
                source,
                kind,
                api_version
            )
        })
}

/// Splits `KIND/NAME` arguments or `KIND[,KIND…] [NAME…]` into the kinds and names asked for,
/// in the order given. `all` expands to every kind.
pub fn parse_resource_args(
    args: &[String],
) -> anyhow::Result<Vec<(&'static ResourceKind, Vec<String>)>> {
    let mut out: Vec<(&'static ResourceKind, Vec<String>)> = Vec::new();
    let Some(first) = args.first() else {
        anyhow::bail!(
            "you must specify the type of resource to get. Valid resource types include: \
             services (ksvc), configurations (cfg), revisions (rev), routes (rt), podautoscalers (kpa)"
        );
    };
    if first.contains('/') {
        for a in args {
            let Some((k, n)) = a.split_once('/') else {
                anyhow::bail!(
                    "arguments in resource/name form must have a single resource and name"
                );
            };
            if n.is_empty() || n.contains('/') {
                anyhow::bail!(
                    "arguments in resource/name form must have a single resource and name"
                );
            }
            let kind = resolve_kind(k)?;
            match out.iter_mut().find(|(rk, _)| std::ptr::eq(*rk, kind)) {
                Some((_, names)) => names.push(n.to_string()),
                None => out.push((kind, vec![n.to_string()])),
            }
        }
        return Ok(out);
    }
    let names: Vec<String> = args[1..].to_vec();
    if names.iter().any(|n| n.contains('/')) {
        anyhow::bail!(
            "there is no need to specify a resource type as a separate argument when passing \
             arguments in resource/name form (e.g. 'wisp get resource/<resource_name>' instead of \
             'wisp get resource resource/<resource_name>'"
        );
    }
    for k in first.split(',').filter(|k| !k.is_empty()) {
        if k.eq_ignore_ascii_case("all") {
            // The namespaced ones: a ClusterDomainClaim belongs to no namespace (nor to
            // Knative's `all` category).
            for rk in kinds::ALL.into_iter().filter(|k| k.namespaced) {
                if !out.iter().any(|(o, _)| std::ptr::eq(*o, rk)) {
                    out.push((rk, names.clone()));
                }
            }
            continue;
        }
        let kind = resolve_kind(k)?;
        if !out.iter().any(|(o, _)| std::ptr::eq(*o, kind)) {
            out.push((kind, names.clone()));
        }
    }
    if out.is_empty() {
        anyhow::bail!("you must specify the type of resource");
    }
    Ok(out)
}

/// Reports the outcome of a command: `Ok(true)` all went well; `Ok(false)` some errors were
/// already printed (exit 1).
pub type Outcome = anyhow::Result<bool>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn shape(r: &[(&'static ResourceKind, Vec<String>)]) -> Vec<(&'static str, Vec<String>)> {
        r.iter().map(|(k, n)| (k.kind, n.clone())).collect()
    }

    #[test]
    fn resource_args() {
        let r = parse_resource_args(&strs(&["ksvc"])).unwrap();
        assert_eq!(shape(&r), [("Service", vec![])]);
        let r = parse_resource_args(&strs(&["rev", "a", "b"])).unwrap();
        assert_eq!(shape(&r), [("Revision", strs(&["a", "b"]))]);
        let r = parse_resource_args(&strs(&["ksvc/a", "rt/b", "service/c"])).unwrap();
        assert_eq!(
            shape(&r),
            [("Service", strs(&["a", "c"])), ("Route", strs(&["b"]))]
        );
        let r = parse_resource_args(&strs(&["ksvc,rt"])).unwrap();
        assert_eq!(shape(&r), [("Service", vec![]), ("Route", vec![])]);
        let r = parse_resource_args(&strs(&["all"])).unwrap();
        assert_eq!(r.len(), 6);
        assert_eq!(r[5].0.kind, "DomainMapping");
        // The views are served kinds too.
        let r = parse_resource_args(&strs(&["po", "hello-00001-deployment-x"])).unwrap();
        assert_eq!(shape(&r), [("Pod", strs(&["hello-00001-deployment-x"]))]);
        let e = parse_resource_args(&strs(&["widgets"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "the server doesn't have a resource type \"widgets\"");
        assert!(parse_resource_args(&strs(&["ksvc/a", "b"])).is_err());
        assert!(parse_resource_args(&strs(&["ksvc", "rt/b"])).is_err());
        assert!(parse_resource_args(&[]).is_err());
    }

    #[test]
    fn document_kinds() {
        let ok = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "x"}});
        assert_eq!(kind_of_document(&ok, "f.yaml").unwrap().kind, "Service");
        let pa = json!({"apiVersion": "autoscaling.internal.knative.dev/v1alpha1", "kind": "PodAutoscaler"});
        assert_eq!(
            kind_of_document(&pa, "f.yaml").unwrap().kind,
            "PodAutoscaler"
        );
        let foo = json!({"apiVersion": "v1", "kind": "Foo", "metadata": {"name": "x"}});
        assert_eq!(
            kind_of_document(&foo, "f.yaml").unwrap_err(),
            "resource mapping not found for name: \"x\" namespace: \"\" from \"f.yaml\": \
             no matches for kind \"Foo\" in version \"v1\"\nensure CRDs are installed first"
        );
        let wrong_version = json!({"apiVersion": "serving.knative.dev/v1beta1", "kind": "Service",
                                   "metadata": {"name": "x", "namespace": "ns"}});
        let e = kind_of_document(&wrong_version, "-").unwrap_err();
        assert!(e.contains("namespace: \"ns\""), "{e}");
        assert!(
            e.contains("in version \"serving.knative.dev/v1beta1\""),
            "{e}"
        );
        let e = kind_of_document(&json!({"metadata": {}}), "f.yaml").unwrap_err();
        assert!(e.contains("apiVersion not set, kind not set"), "{e}");
    }

    #[test]
    fn token_resolution() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = GlobalArgs {
            server: "http://x".into(),
            token: None,
            certificate_authority: None,
            data_dir: dir.path().to_path_buf(),
            namespace: "default".into(),
        };
        assert_eq!(g.resolve_token(), None);
        std::fs::write(dir.path().join("token"), "  secret\n").unwrap();
        assert_eq!(g.resolve_token().as_deref(), Some("secret"));
        g.token = Some("flag".into());
        assert_eq!(g.resolve_token().as_deref(), Some("flag"));
    }
}
