//! `spec.traffic` of a Route or Service (Knative's `pkg/apis/serving/v1/route_validation.go`).
//! Paths are relative to the traffic list (the caller adds `traffic`).

use std::collections::BTreeMap;

use crate::field_error::FieldError;
use crate::serving::TrafficTarget;

use super::names::{dns1035_label, go_list, qualified_name};

/// Validates a spec traffic list. `in_service` gives every target a default configuration
/// (the Service's own), so `configurationName` may not be named.
pub fn validate_traffic(traffic: &[TrafficTarget], in_service: bool) -> FieldError {
    let mut errs = FieldError::none();
    let mut tags: BTreeMap<&str, usize> = BTreeMap::new();
    let mut sum = 0i64;
    for (i, tt) in traffic.iter().enumerate() {
        errs = errs.also(validate_target(tt, in_service).via_index(i));
        sum += tt.percent.unwrap_or(0);
        if tt.tag.is_empty() {
            continue;
        }
        let msgs = dns1035_label(&tt.tag);
        if !msgs.is_empty() {
            // `ErrInvalidArrayValue`: Knative indexes the field, giving `traffic.tag[i]`.
            errs = errs.also(
                FieldError::invalid_value(format!("not a DNS 1035 label: {}", go_list(&msgs)), "")
                    .via_field_index("tag", i),
            );
        }
        match tags.get(tt.tag.as_str()) {
            Some(&first) => {
                errs = errs.also(FieldError::generic(
                    format!("Multiple definitions for {:?}", tt.tag),
                    &[&format!("[{i}].tag"), &format!("[{first}].tag")],
                ));
            }
            None => {
                tags.insert(&tt.tag, i);
            }
        }
    }
    if sum != 100 {
        errs = errs.also(FieldError::generic(
            format!("Traffic targets sum to {sum}, want 100"),
            &[""],
        ));
    }
    errs
}

fn validate_target(tt: &TrafficTarget, in_service: bool) -> FieldError {
    let mut errs = FieldError::none();
    // latestRevision and revisionName must agree: pinned iff a revision is named.
    if let Some(lr) = tt.latest_revision {
        let pinned = !tt.revision_name.is_empty();
        if pinned == lr {
            errs = errs.also(FieldError::generic(
                format!(
                    "may not set revisionName {:?} when latestRevision is {lr}",
                    tt.revision_name
                ),
                &["latestRevision"],
            ));
        }
    }

    if in_service && !tt.configuration_name.is_empty() {
        errs = errs.also(FieldError::disallowed(&["configurationName"]));
    } else if !tt.revision_name.is_empty() && !tt.configuration_name.is_empty() {
        errs = errs.also(FieldError::multiple_one_of(&[
            "revisionName",
            "configurationName",
        ]));
    } else if !tt.revision_name.is_empty() {
        errs = errs.also(check_qualified(&tt.revision_name, "revisionName"));
    } else if !tt.configuration_name.is_empty() {
        errs = errs.also(check_qualified(&tt.configuration_name, "configurationName"));
    } else if !in_service {
        errs = errs.also(FieldError::missing_one_of(&[
            "revisionName",
            "configurationName",
        ]));
    }

    if let Some(p) = tt.percent
        && !(0..=100).contains(&p)
    {
        errs = errs.also(FieldError::out_of_bounds(p, 0, 100, "percent"));
    }

    // `url` is status-only (the controller fills it in for tagged targets).
    if tt.url.as_deref().is_some_and(|u| !u.is_empty()) {
        errs = errs.also(FieldError::disallowed(&["url"]));
    }
    errs
}

fn check_qualified(name: &str, field: &str) -> FieldError {
    let msgs = qualified_name(name);
    if msgs.is_empty() {
        FieldError::none()
    } else {
        FieldError::invalid_key_name(name, field).with_details(msgs.join(", "))
    }
}
