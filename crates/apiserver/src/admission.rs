//! Admission: what Knative's webhooks do to a write before it is stored — decode into the
//! typed resource, set the creator/lastModifier annotations, default, validate.
//!
//! Objects travel as JSON values (the store is kind-agnostic); this module is the one place
//! where a write is checked against the typed model, so everything stored has passed it.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use wisp_api::{
    FieldError,
    config::{self, Config},
    core, defaults,
    field_error::Level,
    kinds::ResourceKind,
    serving::{Object, Service},
    validation,
};

use crate::error::ApiError;

/// Annotation Knative sets to the user who created an object.
pub const CREATOR: &str = "serving.knative.dev/creator";
/// Annotation Knative sets to the user who last changed an object's spec.
pub const LAST_MODIFIER: &str = "serving.knative.dev/lastModifier";

/// The admitted object and the warnings to pass back to the client.
#[derive(Debug)]
pub struct Admitted {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// Runs defaulting and validation for a create (`old` = None) or an update.
pub fn admit(
    kind: &ResourceKind,
    new: Value,
    old: Option<&Value>,
    cfg: &Config,
    user: &str,
) -> Result<Admitted, ApiError> {
    match kind.kind {
        "Service" => typed::<Service, _>(
            kind,
            new,
            old,
            user,
            true,
            |o: &mut Service| defaults::default_service(o, cfg, old.is_none()),
            |n, o| validation::validate_service(n, o, cfg),
        ),
        "Configuration" => typed(
            kind,
            new,
            old,
            user,
            true,
            |o| defaults::default_configuration(o, cfg, old.is_none()),
            |n, o| validation::validate_configuration(n, o, cfg),
        ),
        "Route" => typed(
            kind,
            new,
            old,
            user,
            true,
            |o| defaults::default_route(o, cfg),
            |n, o| validation::validate_route(n, o, cfg),
        ),
        "Revision" => typed(
            kind,
            new,
            old,
            user,
            false,
            |o| defaults::default_revision(o, cfg, old.is_none()),
            |n, o| validation::validate_revision(n, o, cfg),
        ),
        "DomainMapping" => typed::<wisp_api::domainmapping::DomainMapping, _>(
            kind,
            new,
            old,
            user,
            true,
            wisp_api::domainmapping::default_domain_mapping,
            |n, o| validation::validate_domain_mapping(n, o, cfg),
        ),
        "ClusterDomainClaim" => typed::<wisp_api::domainmapping::ClusterDomainClaim, _>(
            kind,
            new,
            old,
            user,
            false,
            |_| {},
            |n, _| validation::validate_cluster_domain_claim(n),
        ),
        "Namespace" => core_typed::<core::Namespace>(kind, new, old, |n, o| {
            core::prepare_namespace(n, o);
            core::validate_namespace(n)
        }),
        "Secret" => core_typed::<core::Secret>(kind, new, old, |n, o| {
            core::prepare_secret(n);
            core::validate_secret(n, o)
        }),
        "ConfigMap" => {
            let admitted = core_typed::<core::ConfigMap>(kind, new, old, |n, o| {
                core::validate_config_map(n, o)
            })?;
            knative_config_webhook(kind, &admitted.object)?;
            Ok(admitted)
        }
        // Internal kinds (PodAutoscaler) are written by wisp itself: check the shape only.
        _ => {
            decode::<Object<Value, Value>>(kind, &new)?;
            Ok(Admitted {
                object: new,
                warnings: Vec::new(),
            })
        }
    }
}

/// Knative's config validation webhook (`config.webhook.serving.knative.dev`), which
/// kube-apiserver calls after its own validation: a ConfigMap of wisp's live configuration
/// (in `knative-serving`) must parse as Knative parses it. Refused as kube-apiserver reports a
/// webhook's denial (`webhookerrors.ToStatusErr`: 400, the webhook's reason prefixed).
fn knative_config_webhook(kind: &ResourceKind, object: &Value) -> Result<(), ApiError> {
    let cm: core::ConfigMap = decode(kind, object)?;
    if cm.metadata.namespace != config::NAMESPACE {
        return Ok(());
    }
    config::validate_config_map(&cm.metadata.name, &cm.data, &cm.metadata.annotations).map_err(
        |why| {
            ApiError::bad_request(format!(
                "admission webhook {:?} denied the request: validation failed: {why}",
                config::WEBHOOK
            ))
        },
    )
}

/// Decodes `value` into `T`, naming the offending field on failure the way the Kubernetes
/// API server words a decode error.
pub fn decode<T: DeserializeOwned>(kind: &ResourceKind, value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {at}{inner}",
            kind = kind.kind,
            version = kind.version,
        ))
    })
}

/// Admission of a core kind, as kube-apiserver's registry strategies do it: decode, prepare
/// (defaults, write-only fields), validate; 422 with kube's causes on failure.
fn core_typed<T>(
    kind: &ResourceKind,
    new: Value,
    old: Option<&Value>,
    check: impl FnOnce(&mut T, Option<&T>) -> Vec<core::FieldErr>,
) -> Result<Admitted, ApiError>
where
    T: Serialize + DeserializeOwned,
{
    let mut obj: T = decode(kind, &new)?;
    let old_obj: Option<T> = old.map(|o| decode(kind, o)).transpose()?;
    let errors = check(&mut obj, old_obj.as_ref());
    if !errors.is_empty() {
        let name = new["metadata"]["name"].as_str().unwrap_or("");
        return Err(ApiError::invalid_core(kind.kind, name, &errors));
    }
    let object = serde_json::to_value(&obj)
        .map_err(|e| ApiError::internal(format!("encoding admitted object: {e}")))?;
    Ok(Admitted {
        object,
        warnings: Vec::new(),
    })
}

fn typed<T, S>(
    kind: &ResourceKind,
    new: Value,
    old: Option<&Value>,
    user: &str,
    user_info: bool,
    default: impl FnOnce(&mut T),
    validate: impl FnOnce(&T, Option<&T>) -> FieldError,
) -> Result<Admitted, ApiError>
where
    T: Serialize + DeserializeOwned + HasMeta<Spec = S>,
    S: Serialize,
{
    let mut obj: T = decode(kind, &new)?;
    let old_obj: Option<T> = old.map(|o| decode(kind, o)).transpose()?;

    default(&mut obj);
    if user_info {
        set_user_info(&mut obj, old_obj.as_ref(), user);
    }

    let errors = validate(&obj, old_obj.as_ref());
    let warnings: Vec<String> = errors
        .filter(Level::Warning)
        .merged()
        .into_iter()
        .map(|w| w.to_string())
        .collect();
    let fatal = errors.filter(Level::Error);
    if !fatal.is_empty() {
        let mut err = ApiError::invalid(&fatal);
        err.warnings = warnings;
        return Err(err);
    }
    let object = serde_json::to_value(&obj)
        .map_err(|e| ApiError::internal(format!("encoding admitted object: {e}")))?;
    Ok(Admitted { object, warnings })
}

/// Knative's `SetUserInfo`: creator and lastModifier on create; lastModifier on an update
/// that changes the spec. A client that replaces the annotations without repeating these
/// keeps the old values (it did not ask to change them), so validation of their
/// immutability only fires on a real attempt to rewrite them.
fn set_user_info<T: HasMeta>(obj: &mut T, old: Option<&T>, user: &str)
where
    T::Spec: Serialize,
{
    match old {
        None => {
            let ann = &mut obj.meta_mut().annotations;
            ann.insert(CREATOR.into(), user.into());
            ann.insert(LAST_MODIFIER.into(), user.into());
        }
        Some(old) => {
            for key in [CREATOR, LAST_MODIFIER] {
                if let Some(v) = old.meta().annotations.get(key) {
                    obj.meta_mut()
                        .annotations
                        .entry(key.into())
                        .or_insert_with(|| v.clone());
                }
            }
            let spec_changed =
                serde_json::to_value(obj.spec()).ok() != serde_json::to_value(old.spec()).ok();
            if spec_changed {
                obj.meta_mut()
                    .annotations
                    .insert(LAST_MODIFIER.into(), user.into());
            }
        }
    }
}

/// Access to the metadata and spec of a typed object.
pub trait HasMeta {
    type Spec;
    fn meta(&self) -> &wisp_api::meta::ObjectMeta;
    fn meta_mut(&mut self) -> &mut wisp_api::meta::ObjectMeta;
    fn spec(&self) -> &Self::Spec;
}

impl<S, T> HasMeta for Object<S, T> {
    type Spec = S;
    fn meta(&self) -> &wisp_api::meta::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut wisp_api::meta::ObjectMeta {
        &mut self.metadata
    }
    fn spec(&self) -> &S {
        &self.spec
    }
}

/// `value` decoded as the kind's typed object and serialized back: what the kind keeps of
/// a body ([`crate::fields::unknown_fields`] compares the two). None when it does not
/// decode (admission answers that with the decode error).
pub fn typed_roundtrip(kind: &ResourceKind, value: &Value) -> Option<Value> {
    fn rt<T: Serialize + DeserializeOwned>(v: &Value) -> Option<Value> {
        let t: T = serde_json::from_value(v.clone()).ok()?;
        serde_json::to_value(t).ok()
    }
    use wisp_api::serving::{Configuration, Revision, Route};
    match kind.kind {
        "Service" => rt::<Service>(value),
        "Configuration" => rt::<Configuration>(value),
        "Route" => rt::<Route>(value),
        "Revision" => rt::<Revision>(value),
        "DomainMapping" => rt::<wisp_api::domainmapping::DomainMapping>(value),
        "ClusterDomainClaim" => rt::<wisp_api::domainmapping::ClusterDomainClaim>(value),
        "Namespace" => rt::<core::Namespace>(value),
        "Secret" => rt::<core::Secret>(value),
        "ConfigMap" => rt::<core::ConfigMap>(value),
        _ => rt::<Object<Value, Value>>(value),
    }
}
