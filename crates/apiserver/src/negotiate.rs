//! `Accept` negotiation, as kube-apiserver does it
//! (`k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go`): the client lists
//! media types, each with optional `as`/`g`/`v` parameters naming a transformed form
//! (a `Table`, an aggregated discovery document); the server answers the first one it can
//! produce, in order of `q`, and 406 when it can produce none.

use crate::error::ApiError;

/// One media range of an `Accept` header.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaRange {
    /// `application/json`, `*/*`, …
    pub essence: String,
    pub as_: Option<String>,
    pub group: Option<String>,
    pub version: Option<String>,
    q: f32,
}

impl MediaRange {
    /// `*/*`, `application/*` and `application/json`, without a transformation.
    fn is_plain_json(&self) -> bool {
        self.as_.is_none()
            && matches!(
                self.essence.as_str(),
                "*/*" | "application/*" | "application/json"
            )
    }

    /// `application/json;as=<as_>;g=<group>` (or `application/*`), any version.
    fn is_json_as(&self, as_: &str, group: &str) -> bool {
        matches!(
            self.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        ) && self.as_.as_deref() == Some(as_)
            && self.group.as_deref() == Some(group)
    }
}

/// Parses an `Accept` header into its media ranges, best (`q`) first; ranges with `q=0`
/// are dropped. An absent or empty header accepts anything.
pub fn parse_accept(header: Option<&str>) -> Vec<MediaRange> {
    let Some(header) = header.map(str::trim).filter(|h| !h.is_empty()) else {
        return vec![MediaRange {
            essence: "*/*".into(),
            as_: None,
            group: None,
            version: None,
            q: 1.0,
        }];
    };
    let mut out: Vec<MediaRange> = header
        .split(',')
        .filter_map(|part| {
            let mut params = part.split(';').map(str::trim);
            let essence = params.next()?.to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let mut range = MediaRange {
                essence,
                as_: None,
                group: None,
                version: None,
                q: 1.0,
            };
            for p in params {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let v = v.trim().trim_matches('"').to_string();
                match k.trim() {
                    "as" => range.as_ = Some(v),
                    "g" => range.group = Some(v),
                    "v" => range.version = Some(v),
                    "q" => range.q = v.parse().unwrap_or(0.0),
                    _ => {}
                }
            }
            Some(range)
        })
        .filter(|r| r.q > 0.0)
        .collect();
    // Stable: equal q keeps the client's order.
    out.sort_by(|a, b| b.q.total_cmp(&a.q));
    out
}

/// What a read of objects (get, list) answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectForm {
    Json,
    /// A `meta.k8s.io` Table of this version (`v1` or `v1beta1`).
    Table(&'static str),
}

/// The form of a get or list response, or 406.
pub fn object_form(accept: Option<&str>) -> Result<ObjectForm, ApiError> {
    object_form_of(&parse_accept(accept))
}

fn object_form_of(ranges: &[MediaRange]) -> Result<ObjectForm, ApiError> {
    for r in ranges {
        if r.is_plain_json() {
            return Ok(ObjectForm::Json);
        }
        if r.is_json_as("Table", "meta.k8s.io") {
            match r.version.as_deref() {
                Some("v1") => return Ok(ObjectForm::Table("v1")),
                Some("v1beta1") => return Ok(ObjectForm::Table("v1beta1")),
                _ => {}
            }
        }
    }
    Err(not_acceptable())
}

/// What an answer about a built-in kind (which has a protobuf form) is encoded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinForm {
    Protobuf,
    /// JSON, or a JSON Table: what [`object_form`] negotiates.
    Json,
}

/// The form of an answer about a built-in kind: protobuf when it comes before anything
/// else wisp can produce, as kube-apiserver picks the first acceptable serializer
/// (`negotiate.go` over the scheme's media types, protobuf among them); else 406, naming
/// protobuf among the accepted types.
pub fn builtin_form(accept: Option<&str>) -> Result<BuiltinForm, ApiError> {
    for r in parse_accept(accept) {
        if r.essence == crate::protobuf::MEDIA_TYPE && r.as_.is_none() {
            return Ok(BuiltinForm::Protobuf);
        }
        if object_form_of(std::slice::from_ref(&r)).is_ok() {
            return Ok(BuiltinForm::Json);
        }
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, {}",
            crate::protobuf::MEDIA_TYPE
        ),
    ))
}

/// Ok when plain JSON is among the accepted types (documents with no other form).
pub fn plain_json(accept: Option<&str>) -> Result<(), ApiError> {
    if parse_accept(accept).iter().any(MediaRange::is_plain_json) {
        Ok(())
    } else {
        Err(not_acceptable())
    }
}

/// What `/api` and `/apis` answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryForm {
    /// `APIVersions` / `APIGroupList`.
    Legacy,
    /// `apidiscovery.k8s.io/<version>` `APIGroupDiscoveryList` (`v2` or `v2beta1`).
    Aggregated(&'static str),
}

/// The form of a discovery response, or 406.
pub fn discovery_form(accept: Option<&str>) -> Result<DiscoveryForm, ApiError> {
    for r in parse_accept(accept) {
        if r.is_plain_json() {
            return Ok(DiscoveryForm::Legacy);
        }
        if r.is_json_as("APIGroupDiscoveryList", "apidiscovery.k8s.io") {
            match r.version.as_deref() {
                Some("v2") => return Ok(DiscoveryForm::Aggregated("v2")),
                Some("v2beta1") => return Ok(DiscoveryForm::Aggregated("v2beta1")),
                _ => {}
            }
        }
    }
    Err(not_acceptable())
}

/// The Accept header of a request, if readable.
pub fn accept(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
}

/// kube-apiserver's `errNotAcceptable` (negotiation/errors.go), listing what wisp serializes.
pub fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    const KUBECTL_DISCOVERY: &str = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/vnd.kubernetes.protobuf,application/json";

    #[test]
    fn object_forms() {
        let cases: &[(Option<&str>, Option<ObjectForm>)] = &[
            (None, Some(ObjectForm::Json)),
            (Some(""), Some(ObjectForm::Json)),
            (Some("*/*"), Some(ObjectForm::Json)),
            (Some("application/json"), Some(ObjectForm::Json)),
            (
                Some("application/json, text/plain;q=0.5"),
                Some(ObjectForm::Json),
            ),
            (Some(KUBECTL_GET), Some(ObjectForm::Table("v1"))),
            (
                Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
                Some(ObjectForm::Table("v1beta1")),
            ),
            (
                Some("application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io"),
                Some(ObjectForm::Table("v1")),
            ),
            // A Table version wisp does not serve, then plain JSON: the fallback.
            (
                Some("application/json;as=Table;v=v9;g=meta.k8s.io,application/json"),
                Some(ObjectForm::Json),
            ),
            (Some("application/json;as=Table;v=v9;g=meta.k8s.io"), None),
            (
                Some("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"),
                None,
            ),
            (Some("application/yaml"), None),
            (Some("application/vnd.kubernetes.protobuf"), None),
            (Some("application/json;q=0"), None),
            (Some("text/html"), None),
        ];
        for (accept, want) in cases {
            let got = object_form(*accept).ok();
            assert_eq!(&got, want, "{accept:?}");
        }
        assert!(plain_json(Some(KUBECTL_DISCOVERY)).is_ok());
        assert!(plain_json(None).is_ok());
        assert!(plain_json(Some("application/yaml")).is_err());
        let err = object_form(Some("text/html")).unwrap_err();
        assert_eq!(err.status.code, 406);
        assert_eq!(err.status.reason, "NotAcceptable");
    }

    #[test]
    fn builtin_forms() {
        use BuiltinForm::*;
        let cases: &[(Option<&str>, Option<BuiltinForm>)] = &[
            (None, Some(Json)),
            (Some("*/*"), Some(Json)),
            (Some("application/vnd.kubernetes.protobuf"), Some(Protobuf)),
            // client-go's default for built-in kinds.
            (
                Some("application/vnd.kubernetes.protobuf, */*"),
                Some(Protobuf),
            ),
            (
                Some("application/json, application/vnd.kubernetes.protobuf"),
                Some(Json),
            ),
            (
                Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
                Some(Protobuf),
            ),
            // A protobuf Table is not served; the JSON Table after it is.
            (
                Some(
                    "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io",
                ),
                Some(Json),
            ),
            (Some(KUBECTL_GET), Some(Json)),
            (Some("application/yaml"), None),
            (
                Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"),
                None,
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(&builtin_form(*accept).ok(), want, "{accept:?}");
        }
        let err = builtin_form(Some("text/html")).unwrap_err();
        assert_eq!(err.status.code, 406);
        assert_eq!(
            err.status.message,
            "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf"
        );
    }

    #[test]
    fn discovery_forms() {
        let cases: &[(Option<&str>, Option<DiscoveryForm>)] = &[
            (None, Some(DiscoveryForm::Legacy)),
            (Some("application/json"), Some(DiscoveryForm::Legacy)),
            (
                Some(KUBECTL_DISCOVERY),
                Some(DiscoveryForm::Aggregated("v2")),
            ),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
                Some(DiscoveryForm::Aggregated("v2beta1")),
            ),
            (
                Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
                None,
            ),
            (Some("application/yaml"), None),
        ];
        for (accept, want) in cases {
            assert_eq!(&discovery_form(*accept).ok(), want, "{accept:?}");
        }
    }
}
