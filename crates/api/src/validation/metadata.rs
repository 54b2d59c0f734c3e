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
use crate::labels::{
    CONFIGURATION as CONFIGURATION_LABEL, SERVICE as SERVICE_LABEL, VISIBILITY as VISIBILITY_LABEL,
};

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

// The label rules of the newest Knative (`pkg/apis/serving/v1/*_validation.go`
// `validateLabels`): each kind checks one label and nothing else — other
// `serving.knative.dev/*` labels are no longer refused (older releases refused any other key
// under the prefix with `invalid key name`).

/// Service labels (`service_validation.go`): only the visibility label's value is checked.
/// Paths relative to `metadata.labels`.
pub fn service_labels(meta: &ObjectMeta) -> FieldError {
    meta.labels
        .get(VISIBILITY_LABEL)
        .map_or_else(FieldError::none, |v| visibility(v))
}

/// A label naming a parent, if present, must be backed by an owner reference.
fn owner_label(meta: &ObjectMeta, label: &str, kind: &str) -> FieldError {
    meta.labels.get(label).map_or_else(FieldError::none, |v| {
        verify_owner(v, label, kind, &meta.owner_references)
    })
}

/// Configuration labels (`configuration_validation.go`): `serving.knative.dev/service` must
/// name an owning Service. Paths relative to `metadata.labels`.
pub fn configuration_labels(meta: &ObjectMeta) -> FieldError {
    owner_label(meta, SERVICE_LABEL, "Service")
}

/// Route labels (`route_validation.go`): `serving.knative.dev/service` must name an owning
/// Service; the visibility label is not checked on a Route. Paths relative to
/// `metadata.labels`.
pub fn route_labels(meta: &ObjectMeta) -> FieldError {
    owner_label(meta, SERVICE_LABEL, "Service")
}

/// Revision labels (`revision_validation.go`): `serving.knative.dev/configuration` must name
/// an owning Configuration. Paths relative to `metadata.labels`.
pub fn revision_labels(meta: &ObjectMeta) -> FieldError {
    owner_label(meta, CONFIGURATION_LABEL, "Configuration")
}
