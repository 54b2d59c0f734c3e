//! `metadata` checks shared by the four kinds: names (`apis.ValidateObjectMetadata`), the
//! creator/lastModifier annotations (`apis.ValidateCreatorAndModifier`) and the
//! `serving.knative.dev/*` labels each kind accepts.
//!
//! Paths are relative to `metadata` unless a function says otherwise.

use std::collections::BTreeMap;

use crate::field_error::FieldError;
use crate::meta::{ObjectMeta, OwnerReference};

use super::names::{go_list, name_is_dns1035_label};

pub use crate::annotations::serving::{CREATOR, LAST_MODIFIER};
const SERVING_PREFIX: &str = "serving.knative.dev/";
const VISIBILITY_LABEL: &str = "networking.knative.dev/visibility";

/// Name/generateName: one is required and each must be a DNS-1035 label (a generateName
/// may end in `-`). Like Knative, the first failure is the only one reported.
pub fn validate_name(meta: &ObjectMeta) -> FieldError {
    if !meta.generate_name.is_empty() {
        let msgs = name_is_dns1035_label(&meta.generate_name, true);
        if !msgs.is_empty() {
            return FieldError::generic(
                format!("not a DNS 1035 label prefix: {}", go_list(&msgs)),
                &["generateName"],
            );
        }
    }
    if !meta.name.is_empty() {
        let msgs = name_is_dns1035_label(&meta.name, false);
        if !msgs.is_empty() {
            return FieldError::generic(
                format!("not a DNS 1035 label: {}", go_list(&msgs)),
                &["name"],
            );
        }
    }
    if meta.name.is_empty() && meta.generate_name.is_empty() {
        return FieldError::generic("name or generateName is required", &["name"]);
    }
    FieldError::none()
}

/// On update: the creator may never change, and lastModifier may only change together with
/// the spec (the webhook sets it from the requesting user). Paths are annotation keys,
/// relative to `metadata.annotations`.
pub fn validate_creator_and_modifier(
    spec_changed: bool,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> FieldError {
    // Knative skips the check when either side has no annotations at all (a nil map in Go).
    if old.is_empty() || new.is_empty() {
        return FieldError::none();
    }
    let mut errs = FieldError::none();
    if old.get(CREATOR) != new.get(CREATOR) {
        errs = errs.also(FieldError::generic(
            "annotation value is immutable",
            &[CREATOR],
        ));
    }
    if !spec_changed && old.get(LAST_MODIFIER) != new.get(LAST_MODIFIER) {
        errs = errs.also(FieldError::generic(
            "annotation value is immutable",
            &[LAST_MODIFIER],
        ));
    }
    errs
}

/// `verifyLabelOwnerRef`: a label naming a parent must be backed by an owner reference of
/// that kind and name, so users cannot fake ownership.
fn verify_owner(val: &str, label: &str, kind: &str, owners: &[OwnerReference]) -> FieldError {
    if owners.iter().any(|o| o.kind == kind && o.name == val) {
        FieldError::none()
    } else {
        FieldError::missing(&[label])
    }
}

fn visibility(val: &str) -> FieldError {
    if val == "cluster-local" {
        FieldError::none()
    } else {
        FieldError::invalid_value(val, VISIBILITY_LABEL)
    }
}

/// Service labels; paths relative to `metadata.labels`.
pub fn service_labels(meta: &ObjectMeta) -> FieldError {
    let mut errs = FieldError::none();
    for (k, v) in &meta.labels {
        if k == VISIBILITY_LABEL {
            errs = errs.also(visibility(v));
        } else if k.starts_with(SERVING_PREFIX) {
            errs = errs.also(FieldError::invalid_key_name(k, ""));
        }
    }
    errs
}

/// Configuration labels; paths relative to `metadata.labels`.
pub fn configuration_labels(meta: &ObjectMeta) -> FieldError {
    let mut errs = FieldError::none();
    for (k, v) in &meta.labels {
        match k.as_str() {
            "serving.knative.dev/route"
            | "serving.knative.dev/configurationUID"
            | "serving.knative.dev/serviceUID" => {}
            "serving.knative.dev/service" => {
                errs = errs.also(verify_owner(v, k, "Service", &meta.owner_references));
            }
            _ if k.starts_with(SERVING_PREFIX) => {
                errs = errs.also(FieldError::invalid_key_name(k, ""))
            }
            _ => {}
        }
    }
    errs
}

/// Route labels; paths relative to `metadata.labels`.
pub fn route_labels(meta: &ObjectMeta) -> FieldError {
    let mut errs = FieldError::none();
    for (k, v) in &meta.labels {
        match k.as_str() {
            VISIBILITY_LABEL => errs = errs.also(visibility(v)),
            "serving.knative.dev/service" => {
                errs = errs.also(verify_owner(v, k, "Service", &meta.owner_references));
            }
            _ if k.starts_with(SERVING_PREFIX) => {
                errs = errs.also(FieldError::invalid_key_name(k, ""))
            }
            _ => {}
        }
    }
    errs
}

/// Revision labels; paths relative to `metadata.labels`.
pub fn revision_labels(meta: &ObjectMeta) -> FieldError {
    let mut errs = FieldError::none();
    for (k, v) in &meta.labels {
        match k.as_str() {
            "serving.knative.dev/routingState"
            | "serving.knative.dev/route"
            | "serving.knative.dev/service"
            | "serving.knative.dev/configurationUID"
            | "serving.knative.dev/serviceUID"
            | "serving.knative.dev/configurationGeneration" => {}
            "serving.knative.dev/configuration" => {
                errs = errs.also(verify_owner(v, k, "Configuration", &meta.owner_references));
            }
            _ if k.starts_with(SERVING_PREFIX) => {
                errs = errs.also(FieldError::invalid_key_name(k, ""))
            }
            _ => {}
        }
    }
    errs
}
