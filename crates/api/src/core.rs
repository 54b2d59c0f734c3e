//! The core (`v1`) kinds wisp serves besides Knative's — Namespace, Secret, ConfigMap — with
//! kube-apiserver's defaulting and validation (`pkg/apis/core/validation/validation.go`
//! `ValidateNamespace`, `ValidateSecret`, `ValidateConfigMap` and their `…Update`s;
//! `pkg/registry/core/{namespace,secret,configmap}/strategy.go`), and its error wording
//! (`k8s.io/apimachinery/pkg/util/validation/field/errors.go`).
//!
//! Secret data travel base64-encoded in JSON, as Kubernetes' `[]byte` fields do; the typed
//! [`Secret`] decodes them to bytes, so a value that is not base64 never reaches the store.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::meta::ObjectMeta;
use crate::validation::names;

/// `core.MaxSecretSize`: the most bytes of data one Secret or ConfigMap may hold.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// The finalizer kube puts on every namespace (`core.FinalizerKubernetes`): the namespace
/// controller removes it once the namespace is empty.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// The namespace that always exists.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `Active` / `Terminating` (`core.NamespacePhase`).
pub const PHASE_ACTIVE: &str = "Active";
pub const PHASE_TERMINATING: &str = "Terminating";

/// `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    Forbidden,
    TooLong,
    NotSupported,
}

impl ErrorType {
    /// `ErrorType.String()`.
    fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::NotSupported => "Unsupported value",
        }
    }

    /// The `StatusCause` reason (`metav1.CauseType`).
    pub fn cause(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::NotSupported => "FieldValueNotSupported",
        }
    }
}

/// One `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldErr {
    pub type_: ErrorType,
    /// `data[tls.key]`, `metadata.name`, …
    pub field: String,
    /// The bad value as Go's `%#v` prints it (quoted strings); only for `Invalid`.
    pub value: String,
    pub detail: String,
}

impl FieldErr {
    fn new(type_: ErrorType, field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldErr {
            type_,
            field: field.into(),
            value: String::new(),
            detail: detail.into(),
        }
    }

    fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> Self {
        FieldErr {
            value: format!("{value:?}"),
            ..Self::new(ErrorType::Invalid, field, detail)
        }
    }

    /// `ErrorBody()`: the message without the field path (a `StatusCause`'s message).
    pub fn body(&self) -> String {
        let mut s = self.type_.as_str().to_string();
        if matches!(self.type_, ErrorType::Invalid | ErrorType::NotSupported) {
            s = format!("{s}: {}", self.value);
        }
        if !self.detail.is_empty() {
            s = format!("{s}: {}", self.detail);
        }
        s
    }
}

impl fmt::Display for FieldErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `ErrorList.ToAggregate().Error()`: one error as itself, several as `[a, b]`.
pub fn aggregate(errs: &[FieldErr]) -> String {
    match errs {
        [one] => one.to_string(),
        _ => format!(
            "[{}]",
            errs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `Path.Key(k)`: `data[k]`.
fn key_path(map: &str, key: &str) -> String {
    format!("{map}[{key}]")
}

const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

// === names and keys ===

const CONFIG_MAP_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// `IsConfigMapKey` (`k8s.io/apimachinery/pkg/util/validation/validation.go`): keys of a
/// ConfigMap's or Secret's data, which become file names when mounted.
pub fn config_map_key(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > 253 {
        out.push("must be no more than 253 bytes".to_string());
    }
    let ok = !key.is_empty()
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        out.push(CONFIG_MAP_KEY_MSG.to_string());
    }
    // hasChDirPrefix
    if key == "." {
        out.push("must not be '.'".to_string());
    } else if key == ".." {
        out.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        out.push("must not start with '..'".to_string());
    }
    out
}

/// `ValidateObjectMeta`'s name part: a name (or generateName prefix) shaped by `check`.
fn validate_name(meta: &ObjectMeta, check: fn(&str) -> Vec<String>) -> Vec<FieldErr> {
    let mut errs = Vec::new();
    if !meta.generate_name.is_empty() {
        // A prefix may end in '-': kube masks it before checking (`NameIsDNSSubdomain(prefix=true)`).
        let masked = match meta.generate_name.strip_suffix('-') {
            Some(p) => format!("{p}a"),
            None => meta.generate_name.clone(),
        };
        for msg in check(&masked) {
            errs.push(FieldErr::invalid(
                "metadata.generateName",
                &meta.generate_name,
                msg,
            ));
        }
    }
    if meta.name.is_empty() {
        if meta.generate_name.is_empty() {
            errs.push(FieldErr::new(
                ErrorType::Required,
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for msg in check(&meta.name) {
            errs.push(FieldErr::invalid("metadata.name", &meta.name, msg));
        }
    }
    errs
}

// === Namespace ===

/// A Namespace. `spec.finalizers` and `status` are the only fields kube gives it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    #[schemars(
        description = "APIVersion defines the versioned schema of this representation of an object."
    )]
    #[serde(default)]
    pub api_version: String,
    #[schemars(
        description = "Kind is a string value representing the REST resource this object represents."
    )]
    #[serde(default)]
    pub kind: String,
    #[schemars(description = "Standard object's metadata.")]
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[schemars(description = "Spec defines the behavior of the Namespace.")]
    #[serde(default)]
    pub spec: NamespaceSpec,
    #[schemars(description = "Status describes the current status of a Namespace.")]
    #[serde(default)]
    pub status: NamespaceStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "NamespaceSpec describes the attributes on a Namespace.")]
pub struct NamespaceSpec {
    #[schemars(
        description = "Finalizers is an opaque list of values that must be empty to permanently remove the object from storage."
    )]
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub finalizers: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "NamespaceStatus is information about the current status of a Namespace.")]
pub struct NamespaceStatus {
    #[schemars(
        description = "Phase is the current lifecycle phase of the namespace: Active or Terminating."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
}

impl Namespace {
    pub fn is_terminating(&self) -> bool {
        self.status.phase == PHASE_TERMINATING
    }
}

/// kube's namespace strategy (`pkg/registry/core/namespace/strategy.go`): on create the
/// phase is `Active` and the `kubernetes` finalizer is added; an update keeps the stored
/// finalizers and status (they change only through `/finalize` and `/status`).
pub fn prepare_namespace(new: &mut Namespace, old: Option<&Namespace>) {
    match old {
        None => {
            new.status = NamespaceStatus {
                phase: PHASE_ACTIVE.into(),
            };
            if !new
                .spec
                .finalizers
                .iter()
                .any(|f| f == FINALIZER_KUBERNETES)
            {
                new.spec.finalizers.push(FINALIZER_KUBERNETES.into());
            }
        }
        Some(old) => {
            new.spec.finalizers = old.spec.finalizers.clone();
            new.status = old.status.clone();
        }
    }
}

/// `ValidateNamespace`: the name is an RFC 1123 label; no namespace of its own.
pub fn validate_namespace(ns: &Namespace) -> Vec<FieldErr> {
    let mut errs = validate_name(&ns.metadata, names::dns1123_label);
    if !ns.metadata.namespace.is_empty() {
        errs.push(FieldErr::new(
            ErrorType::Forbidden,
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    errs
}

// === ConfigMap ===

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMap {
    #[schemars(
        description = "APIVersion defines the versioned schema of this representation of an object."
    )]
    #[serde(default)]
    pub api_version: String,
    #[schemars(
        description = "Kind is a string value representing the REST resource this object represents."
    )]
    #[serde(default)]
    pub kind: String,
    #[schemars(description = "Standard object's metadata.")]
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[schemars(
        description = "If set to true, the data stored in the ConfigMap cannot be updated, only the object's metadata."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    #[schemars(description = "Data contains the configuration data: UTF-8 strings by key.")]
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub data: BTreeMap<String, String>,
    #[schemars(description = "BinaryData contains the binary data by key, base64-encoded.")]
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub binary_data: BTreeMap<String, Bytes>,
}

/// `ValidateConfigMap`, and with `old` `ValidateConfigMapUpdate`.
pub fn validate_config_map(cm: &ConfigMap, old: Option<&ConfigMap>) -> Vec<FieldErr> {
    let mut errs = validate_name(&cm.metadata, names::dns1123_subdomain);
    let mut total = 0usize;
    for (key, value) in &cm.data {
        for msg in config_map_key(key) {
            errs.push(FieldErr::invalid(key_path("data", key), key, msg));
        }
        if cm.binary_data.contains_key(key) {
            errs.push(FieldErr::invalid(
                key_path("data", key),
                key,
                "duplicate of key present in binaryData",
            ));
        }
        total += value.len();
    }
    for (key, value) in &cm.binary_data {
        for msg in config_map_key(key) {
            errs.push(FieldErr::invalid(key_path("binaryData", key), key, msg));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        // kube passes the path "" here: the error is about the whole object.
        errs.push(FieldErr::new(ErrorType::TooLong, "", too_long()));
    }
    if let Some(old) = old
        && old.immutable == Some(true)
    {
        if cm.immutable != Some(true) {
            errs.push(FieldErr::new(
                ErrorType::Forbidden,
                "immutable",
                IMMUTABLE_WHEN_SET,
            ));
        }
        if cm.data != old.data {
            errs.push(FieldErr::new(
                ErrorType::Forbidden,
                "data",
                IMMUTABLE_WHEN_SET,
            ));
        }
        if cm.binary_data != old.binary_data {
            errs.push(FieldErr::new(
                ErrorType::Forbidden,
                "binaryData",
                IMMUTABLE_WHEN_SET,
            ));
        }
    }
    errs
}

/// `field.TooLong`'s detail for [`MAX_SECRET_SIZE`].
fn too_long() -> String {
    format!("may not be more than {MAX_SECRET_SIZE} bytes")
}

// === Secret ===

pub const SECRET_TYPE_OPAQUE: &str = "Opaque";

/// A Secret. `string_data` is write-only: [`prepare_secret`] merges it into `data`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    #[schemars(
        description = "APIVersion defines the versioned schema of this representation of an object."
    )]
    #[serde(default)]
    pub api_version: String,
    #[schemars(
        description = "Kind is a string value representing the REST resource this object represents."
    )]
    #[serde(default)]
    pub kind: String,
    #[schemars(description = "Standard object's metadata.")]
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[schemars(
        description = "If set to true, the data stored in the Secret cannot be updated, only the object's metadata."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    #[schemars(
        description = "Data contains the secret data by key; each value is base64-encoded."
    )]
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub data: BTreeMap<String, Bytes>,
    #[schemars(
        description = "A write-only convenience to give secret data as plain strings; merged into data on write, never returned."
    )]
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub string_data: BTreeMap<String, String>,
    #[schemars(
        description = "Used to facilitate programmatic handling of secret data, for example Opaque."
    )]
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub type_: String,
}

impl Secret {
    /// The decoded value of `key`, for whoever uses a Secret (env, volumes).
    pub fn value(&self, key: &str) -> Option<&[u8]> {
        self.data.get(key).map(|b| b.0.as_slice())
    }

    /// The Docker config a registry-credentials Secret holds (an `imagePullSecrets` entry).
    pub fn docker_config(&self) -> Option<&[u8]> {
        docker_config_key(&self.type_).and_then(|k| self.value(k))
    }
}

/// The key holding the Docker config in a Secret of this type, if the type carries registry
/// credentials (`pkg/apis/core/types.go`: `SecretTypeDockerConfigJson`, `SecretTypeDockercfg`).
pub fn docker_config_key(secret_type: &str) -> Option<&'static str> {
    match secret_type {
        "kubernetes.io/dockerconfigjson" => Some(".dockerconfigjson"),
        "kubernetes.io/dockercfg" => Some(".dockercfg"),
        _ => None,
    }
}

/// What a write does to a Secret before validation: `stringData` is merged over `data` and
/// dropped (`Convert_v1_Secret_To_core_Secret`), the type defaults to `Opaque`
/// (`SetDefaults_Secret`).
pub fn prepare_secret(secret: &mut Secret) {
    for (k, v) in std::mem::take(&mut secret.string_data) {
        secret.data.insert(k, Bytes(v.into_bytes()));
    }
    if secret.type_.is_empty() {
        secret.type_ = SECRET_TYPE_OPAQUE.into();
    }
}

/// `ValidateSecret`, and with `old` `ValidateSecretUpdate` (type immutable; nothing of the
/// data changes once `immutable` is set).
pub fn validate_secret(secret: &Secret, old: Option<&Secret>) -> Vec<FieldErr> {
    let mut errs = validate_name(&secret.metadata, names::dns1123_subdomain);
    if let Some(old) = old {
        if secret.type_ != old.type_ {
            errs.push(FieldErr::invalid(
                "type",
                &secret.type_,
                "field is immutable",
            ));
        }
        if old.immutable == Some(true) {
            if secret.immutable != Some(true) {
                errs.push(FieldErr::new(
                    ErrorType::Forbidden,
                    "immutable",
                    IMMUTABLE_WHEN_SET,
                ));
            }
            if secret.data != old.data {
                errs.push(FieldErr::new(
                    ErrorType::Forbidden,
                    "data",
                    IMMUTABLE_WHEN_SET,
                ));
            }
        }
    }
    let mut total = 0usize;
    for (key, value) in &secret.data {
        for msg in config_map_key(key) {
            errs.push(FieldErr::invalid(key_path("data", key), key, msg));
        }
        total += value.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldErr::new(ErrorType::TooLong, "data", too_long()));
    }
    let required = |errs: &mut Vec<FieldErr>, key: &str| {
        errs.push(FieldErr::new(
            ErrorType::Required,
            key_path("data", key),
            "",
        ));
    };
    let json_key = |errs: &mut Vec<FieldErr>, key: &str| match secret.value(key) {
        None => required(errs, key),
        Some(bytes) => {
            if let Err(e) =
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes)
            {
                errs.push(FieldErr::invalid(
                    key_path("data", key),
                    "<secret contents redacted>",
                    e.to_string(),
                ));
            }
        }
    };
    if let Some(key) = docker_config_key(&secret.type_) {
        json_key(&mut errs, key);
    }
    match secret.type_.as_str() {
        "kubernetes.io/service-account-token" => {
            let key = "kubernetes.io/service-account.name";
            if secret
                .metadata
                .annotations
                .get(key)
                .is_none_or(String::is_empty)
            {
                errs.push(FieldErr::new(
                    ErrorType::Required,
                    key_path("metadata.annotations", key),
                    "",
                ));
            }
        }
        // Either may be empty, but one must be present.
        "kubernetes.io/basic-auth"
            if secret.value("username").is_none() && secret.value("password").is_none() =>
        {
            required(&mut errs, "username");
            required(&mut errs, "password");
        }
        "kubernetes.io/ssh-auth" if secret.value("ssh-privatekey").is_none_or(<[u8]>::is_empty) => {
            required(&mut errs, "ssh-privatekey");
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if secret.value(key).is_none() {
                    required(&mut errs, key);
                }
            }
        }
        _ => {}
    }
    errs
}

/// `null` decodes as the empty value, as Go's JSON decoder leaves a nil map or slice.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Bytes that travel as standard, padded base64 in JSON (Go's `[]byte`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

/// Go's `[]byte` in OpenAPI: a base64 string.
impl schemars::JsonSchema for Bytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Bytes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "format": "byte"})
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        decode_base64(&text)
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}

/// Go's `base64.StdEncoding.DecodeString`, with its error wording.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    use base64::DecodeError;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| {
            let at = match e {
                DecodeError::InvalidByte(at, _)
                | DecodeError::InvalidLastSymbol { offset: at, .. } => at,
                _ => text.len(),
            };
            format!("illegal base64 data at input byte {at}")
        })
}

#[cfg(test)]
mod tests;
