//! The query parameters of the write verbs (`CreateOptions`, `UpdateOptions`,
//! `PatchOptions`, `DeleteOptions`), parsed and checked as kube-apiserver checks them
//! (`k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`:
//! `ValidateCreateOptions`, `ValidatePatchOptions`, `ValidateDeleteOptions`).

use std::collections::HashMap;

use axum::http::HeaderMap;
use wisp_api::core::{ErrorType, FieldErr};

use crate::error::ApiError;

/// `fieldValidation`: what a write does with fields the kind does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// The options of one write.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// `dryRun=All`: admitted in full, nothing stored.
    pub dry_run: bool,
    pub validation: FieldValidation,
    /// `fieldManager`, or the User-Agent's first word when absent (kube-apiserver's
    /// `prefixFromUserAgent` in `handlers/rest.go`).
    pub manager: String,
    /// Whether the client named the manager (required for apply).
    pub manager_given: bool,
    /// `force` (apply only).
    pub force: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            dry_run: false,
            validation: FieldValidation::Warn,
            manager: "unknown".into(),
            manager_given: false,
            force: false,
        }
    }
}

/// Which verb's options a request carries: kube names the kind in its 422
/// (`CreateOptions.meta.k8s.io "" is invalid: …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Update,
    Patch { apply: bool },
    Delete,
}

impl Verb {
    fn options_kind(self) -> &'static str {
        match self {
            Verb::Create => "CreateOptions",
            Verb::Update => "UpdateOptions",
            Verb::Patch { .. } => "PatchOptions",
            Verb::Delete => "DeleteOptions",
        }
    }
}

/// kube's `FieldManagerMaxLength`.
const FIELD_MANAGER_MAX: usize = 128;

/// Every value of a repeatable query parameter (`dryRun=All&dryRun=All`), from the raw
/// query string: the `HashMap` extractor keeps only one.
pub fn all_values(query: Option<&str>, key: &str) -> Vec<String> {
    let Some(q) = query else { return Vec::new() };
    q.split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then(|| percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(s.get(i + 1..i + 3).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses and validates a write's options. `dry_run` holds every `dryRun` value sent.
pub fn parse(
    verb: Verb,
    q: &HashMap<String, String>,
    dry_run: &[String],
    headers: &HeaderMap,
) -> Result<WriteOptions, ApiError> {
    let mut errs = Vec::new();
    let mut opts = WriteOptions::default();
    // validation.go ValidateDryRun: only "All" is supported, reported as Go prints the
    // whole []string.
    if dry_run.iter().any(|v| v != "All") {
        let shown = dry_run
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        errs.push(unsupported(
            "dryRun",
            format!("[]string{{{shown}}}"),
            &["\"All\""],
        ));
    }
    opts.dry_run = !dry_run.is_empty();
    if verb != Verb::Delete {
        // rest.go fieldValidation: an absent directive is Warn.
        opts.validation = match q.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(other) => {
                errs.push(unsupported(
                    "fieldValidation",
                    format!("{other:?}"),
                    &["\"\"", "\"Ignore\"", "\"Strict\"", "\"Warn\""],
                ));
                FieldValidation::Warn
            }
        };
        let manager = q.get("fieldManager").cloned().unwrap_or_default();
        if manager.chars().count() > FIELD_MANAGER_MAX {
            errs.push(FieldErr {
                type_: ErrorType::TooLong,
                field: "fieldManager".into(),
                value: String::new(),
                detail: format!("may not be more than {FIELD_MANAGER_MAX} bytes"),
            });
        }
        for (i, c) in manager.chars().enumerate() {
            if c.is_control() {
                errs.push(FieldErr {
                    type_: ErrorType::Invalid,
                    field: "fieldManager".into(),
                    value: format!("{manager:?}"),
                    detail: format!("invalid character U+{:04X} (at position {i})", c as u32),
                });
            }
        }
        match verb {
            Verb::Patch { apply: true } => {
                if manager.is_empty() {
                    errs.insert(
                        0,
                        FieldErr {
                            type_: ErrorType::Required,
                            field: "fieldManager".into(),
                            value: String::new(),
                            detail: "is required for apply patch".into(),
                        },
                    );
                }
            }
            _ => {
                if q.contains_key("force") {
                    errs.insert(
                        0,
                        FieldErr {
                            type_: ErrorType::Forbidden,
                            field: "force".into(),
                            value: String::new(),
                            detail: "may not be specified for non-apply patch".into(),
                        },
                    );
                }
            }
        }
        opts.force = matches!(q.get("force").map(String::as_str), Some("true" | "1"));
        opts.manager_given = !manager.is_empty();
        opts.manager = if manager.is_empty() {
            user_agent_prefix(headers)
        } else {
            manager
        };
    }
    if errs.is_empty() {
        Ok(opts)
    } else {
        Err(ApiError::invalid_core(
            &format!("{}.meta.k8s.io", verb.options_kind()),
            "",
            &errs,
        ))
    }
}

fn unsupported(field: &str, value: String, supported: &[&str]) -> FieldErr {
    FieldErr {
        type_: ErrorType::NotSupported,
        field: field.into(),
        value,
        detail: format!("supported values: {}", supported.join(", ")),
    }
}

/// rest.go `prefixFromUserAgent`: the manager of a write that names none.
fn user_agent_prefix(headers: &HeaderMap) -> String {
    let ua = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let prefix = ua.split('/').next().unwrap_or("");
    // managedfields' DefaultFieldManager caps the derived name too.
    let prefix: String = prefix.chars().take(FIELD_MANAGER_MAX).collect();
    if prefix.is_empty() {
        "unknown".into()
    } else {
        prefix
    }
}

/// A write's query parameters and headers, as one extractor.
pub struct WriteReq {
    pub q: HashMap<String, String>,
    pub dry_run: Vec<String>,
    pub headers: HeaderMap,
}

impl WriteReq {
    pub fn options(&self, verb: Verb) -> Result<WriteOptions, ApiError> {
        parse(verb, &self.q, &self.dry_run, &self.headers)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for WriteReq {
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        let axum::extract::Query(q) =
            axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(WriteReq {
            q,
            dry_run: all_values(parts.uri.query(), "dryRun"),
            headers: parts.headers.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_checked_as_kube_checks_them() {
        let h = HeaderMap::new();
        let all = vec!["All".to_string()];
        type Case = (
            Verb,
            HashMap<String, String>,
            Vec<String>,
            Result<(), &'static str>,
        );
        let cases: Vec<Case> = vec![
            (Verb::Create, q(&[]), vec![], Ok(())),
            (Verb::Create, q(&[]), all.clone(), Ok(())),
            (
                Verb::Create,
                q(&[]),
                vec!["foo".into()],
                Err(
                    "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"foo\"}: supported values: \"All\"",
                ),
            ),
            (
                Verb::Update,
                q(&[("fieldValidation", "Loose")]),
                vec![],
                Err(
                    "UpdateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Loose\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                ),
            ),
            (
                Verb::Patch { apply: true },
                q(&[]),
                vec![],
                Err(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ),
            ),
            (
                Verb::Patch { apply: false },
                q(&[("force", "true")]),
                vec![],
                Err(
                    "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
                ),
            ),
            (
                Verb::Patch { apply: true },
                q(&[("fieldManager", "me"), ("force", "true")]),
                vec![],
                Ok(()),
            ),
        ];
        for (verb, params, dry, want) in cases {
            let got = parse(verb, &params, &dry, &h);
            match (got, want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(msg)) => {
                    assert_eq!(e.status.code, 422);
                    assert_eq!(e.status.message, msg);
                }
                (got, want) => panic!("{verb:?} {params:?}: {got:?} want {want:?}"),
            }
        }
    }

    #[test]
    fn manager_defaults_to_the_user_agent_prefix() {
        let mut h = HeaderMap::new();
        h.insert(
            "user-agent",
            "kubectl/v1.32.0 (linux/amd64)".parse().unwrap(),
        );
        let o = parse(Verb::Update, &q(&[]), &[], &h).unwrap();
        assert_eq!(o.manager, "kubectl");
        assert!(!o.manager_given);
        let o = parse(Verb::Update, &q(&[("fieldManager", "x")]), &[], &h).unwrap();
        assert_eq!(o.manager, "x");
        assert_eq!(o.validation, FieldValidation::Warn);
    }

    #[test]
    fn repeated_values_are_all_read() {
        assert_eq!(
            all_values(Some("dryRun=All&a=b&dryRun=x%20y"), "dryRun"),
            vec!["All", "x y"]
        );
        assert!(all_values(None, "dryRun").is_empty());
    }
}
