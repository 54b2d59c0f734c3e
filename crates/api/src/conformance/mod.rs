//! Conformance with Knative, end to end: each case is a user's object as sent to the API,
//! taken through what kube-apiserver and Knative's webhooks do to it before it is stored —
//! pruning by the CRD schema ([`crate::prune`]), decoding into the typed object, Knative's
//! defaulting, Knative's validation — and compared with Knative's verdict, its message, and
//! the spec it stores.
//!
//! One module per kind (and one for the PodSpec/container rules of `k8s_validation.go`, one
//! for the annotations of `annotation_validation.go`). Every expectation names the Knative
//! source it was read from — a `_test.go` table row or the rule in the non-test file — or
//! the class of issue #17 it pins. Knative's tables are the oracle: wisp's output is never
//! pasted in as the expected value.
//!
//! Run with `--nocapture` to see the agreement figures each module prints.

mod annotations;
mod configuration;
mod podspec;
mod revision;
mod route;
mod service;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::config::Config;
use crate::field_error::{FieldError, Level};
use crate::serving::{Configuration, Revision, Route, Service};
use crate::{defaults, prune, validation};

/// What Knative answers.
pub(crate) enum Want {
    /// Refused with exactly this message (the webhook's rendered `FieldError`).
    Reject(&'static str),
    /// Admitted; the stored `spec` is compared when given.
    Accept(Option<Value>),
}

pub(crate) struct Case {
    pub name: &'static str,
    /// Where the expectation comes from.
    pub source: &'static str,
    pub kind: &'static str,
    pub input: Value,
    pub cfg: Config,
    pub want: Want,
}

impl Case {
    pub fn new(
        name: &'static str,
        source: &'static str,
        kind: &'static str,
        input: Value,
        want: Want,
    ) -> Self {
        Case {
            name,
            source,
            kind,
            input,
            cfg: Config::default(),
            want,
        }
    }

    pub fn with_cfg(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut self.cfg);
        self
    }
}

/// The create path of a Knative kind: `Ok(stored object)` or `Err(message)`.
pub(crate) fn admit(kind: &str, mut input: Value, cfg: &Config) -> Result<Value, String> {
    prune::prune(kind, &mut input).expect("a Knative kind");
    match kind {
        "Service" => run::<Service>(
            input,
            |o| defaults::default_service(o, cfg, true),
            |o| validation::validate_service(o, None, cfg),
        ),
        "Configuration" => run::<Configuration>(
            input,
            |o| defaults::default_configuration(o, cfg, true),
            |o| validation::validate_configuration(o, None, cfg),
        ),
        "Revision" => run::<Revision>(
            input,
            |o| defaults::default_revision(o, cfg, true),
            |o| validation::validate_revision(o, None, cfg),
        ),
        "Route" => run::<Route>(
            input,
            |o| defaults::default_route(o, cfg),
            |o| validation::validate_route(o, None, cfg),
        ),
        other => panic!("not a Knative kind: {other}"),
    }
}

fn run<T: Serialize + DeserializeOwned>(
    input: Value,
    default: impl FnOnce(&mut T),
    validate: impl FnOnce(&T) -> FieldError,
) -> Result<Value, String> {
    let mut obj: T = serde_json::from_value(input).map_err(|e| format!("decode: {e}"))?;
    default(&mut obj);
    let errs = validate(&obj).filter(Level::Error);
    if !errs.is_empty() {
        return Err(errs.to_string());
    }
    Ok(serde_json::to_value(&obj).expect("encodes"))
}

/// Agreement counts, as issue #17 states them.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub cases: usize,
    pub verdict: usize,
    pub joint_rejections: usize,
    pub message: usize,
    pub joint_acceptances: usize,
    pub stored: usize,
}

impl Tally {
    fn percent(n: usize, of: usize) -> f64 {
        if of == 0 {
            100.0
        } else {
            100.0 * n as f64 / of as f64
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} cases: verdict {}/{} ({:.1}%), message {}/{} joint rejections ({:.1}%), stored spec {}/{} joint acceptances ({:.1}%)",
            self.cases,
            self.verdict,
            self.cases,
            Self::percent(self.verdict, self.cases),
            self.message,
            self.joint_rejections,
            Self::percent(self.message, self.joint_rejections),
            self.stored,
            self.joint_acceptances,
            Self::percent(self.stored, self.joint_acceptances),
        )
    }
}

/// Runs `cases`, prints the tally under `title` and fails listing every disagreement.
pub(crate) fn check(title: &str, cases: Vec<Case>) -> Tally {
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for c in cases {
        t.cases += 1;
        let got = admit(c.kind, c.input, &c.cfg);
        let label = format!("{} [{}]", c.name, c.source);
        match (&c.want, got) {
            (Want::Reject(want), Err(msg)) => {
                t.verdict += 1;
                t.joint_rejections += 1;
                if msg == *want {
                    t.message += 1;
                } else {
                    failures.push(format!("{label}: message\n  want: {want}\n  got:  {msg}"));
                }
            }
            (Want::Accept(spec), Ok(stored)) => {
                t.verdict += 1;
                t.joint_acceptances += 1;
                match spec {
                    Some(want) if stored["spec"] != *want => failures.push(format!(
                        "{label}: stored spec\n  want: {want}\n  got:  {}",
                        stored["spec"]
                    )),
                    _ => t.stored += 1,
                }
            }
            (Want::Reject(want), Ok(_)) => {
                failures.push(format!("{label}: accepted, Knative refuses with {want:?}"))
            }
            (Want::Accept(_), Err(msg)) => {
                failures.push(format!("{label}: refused with {msg:?}, Knative accepts"))
            }
        }
    }
    println!("conformance {title}: {}", t.summary());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    t
}

/// A hello-world Service as a user writes it.
pub(crate) fn service(spec_template: Value) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"template": {"spec": spec_template}}
    })
}

/// One container with `extra` merged in.
pub(crate) fn container(extra: Value) -> Value {
    let mut c = json!({"image": "ghcr.io/knative/helloworld-go"});
    merge(&mut c, extra);
    c
}

/// A Service with one container carrying `extra`.
pub(crate) fn service_with(extra: Value) -> Value {
    service(json!({"containers": [container(extra)]}))
}

/// JSON merge of objects (`b` wins), for building cases.
pub(crate) fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// The revision spec Knative stores for one defaulted container (`revision_defaults.go`:
/// name `user-container`, `resources: {}`, the TCP readiness probe on the serving port,
/// `enableServiceLinks: false` from config-defaults, timeout 300, concurrency 0), with
/// the container's own fields in place of those (each replaced whole).
pub(crate) fn defaulted_spec(container_fields: Value) -> Value {
    let mut c = json!({
        "name": "user-container",
        "image": "ghcr.io/knative/helloworld-go",
        "resources": {},
        "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1}
    });
    for (k, v) in container_fields.as_object().expect("fields") {
        c[k] = v.clone();
    }
    json!({
        "containerConcurrency": 0,
        "timeoutSeconds": 300,
        "enableServiceLinks": false,
        "containers": [c]
    })
}

/// The Service spec Knative stores for a one-container template.
pub(crate) fn defaulted_service_spec(container_fields: Value) -> Value {
    json!({
        "template": {"metadata": {"creationTimestamp": null}, "spec": defaulted_spec(container_fields)},
        "traffic": [{"latestRevision": true, "percent": 100}]
    })
}

#[test]
fn all_kinds() {
    let mut total = Tally::default();
    for t in [
        service::tally(),
        configuration::tally(),
        revision::tally(),
        route::tally(),
        podspec::tally(),
        annotations::tally(),
    ] {
        total.cases += t.cases;
        total.verdict += t.verdict;
        total.joint_rejections += t.joint_rejections;
        total.message += t.message;
        total.joint_acceptances += t.joint_acceptances;
        total.stored += t.stored;
    }
    println!("conformance total: {}", total.summary());
}
