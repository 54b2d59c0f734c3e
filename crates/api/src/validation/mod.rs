//! Knative's validating webhook for `serving.knative.dev/v1`, with Knative's messages and
//! field paths (`pkg/apis/serving/v1/*_validation.go`, `pkg/apis/serving/k8s_validation.go`,
//! `pkg/apis/autoscaling/annotation_validation.go`).
//!
//! The API server calls one entry point per kind *after* defaulting; `old` is `Some` on
//! update. The result may hold warnings ([`Level::Warning`](crate::field_error::Level)):
//! the server rejects when `filter(Level::Error)` is non-empty and passes warnings on.
//!
//! Errors are built at the innermost field and moved outwards with `via_field`/`via_index`,
//! exactly as Knative builds them, so that merging and path rendering match byte for byte.
//!
//! Deliberate differences from Knative (documented where they happen):
//! - a container needs `image` **or** `command` (wisp runs plain processes);
//! - the `-old +new` diffs are line diffs of pretty JSON rather than go-cmp output.

mod annotations;
mod container;
mod diff;
pub mod domainmapping;
mod metadata;
pub mod names;
mod podspec;
mod traffic;

#[cfg(test)]
mod tests;

use crate::config::Config;
use crate::field_error::FieldError;
use crate::meta::ObjectMeta;
use crate::serving::{Configuration, Revision, RevisionSpec, RevisionTemplateSpec, Route, Service};

pub use annotations::validate_autoscaling;
pub use domainmapping::{validate_cluster_domain_claim, validate_domain_mapping};

/// Validates a Service (create: `old == None`; update: `old == Some(previous)`).
pub fn validate_service(new: &Service, old: Option<&Service>, cfg: &Config) -> FieldError {
    let meta = &new.metadata;
    let mut errs = metadata::validate_name(meta)
        .also(metadata::service_labels(meta).via_field("labels"))
        .also(
            annotations::validate_no_autoscaling(&meta.annotations)
                .also(annotations::validate_rollout_duration(&meta.annotations))
                .via_field("annotations"),
        )
        .via_field("metadata");

    let spec = container::disallowed_extra(&new.spec.extra, "")
        .also(validate_template(cfg, &new.spec.template, meta).via_field("template"))
        .also(traffic::validate_traffic(&new.spec.traffic, true).via_field("traffic"));
    errs = errs.also(spec.via_field("spec"));

    if let Some(old) = old {
        errs = errs.also(
            metadata::validate_creator_and_modifier(
                old.spec != new.spec,
                &old.metadata.annotations,
                &meta.annotations,
            )
            .via_field("metadata.annotations"),
        );
        errs = errs.also(
            verify_name_change(&new.spec.template, &old.spec.template).via_field("spec.template"),
        );
    }
    errs
}

/// Validates a Configuration.
pub fn validate_configuration(
    new: &Configuration,
    old: Option<&Configuration>,
    cfg: &Config,
) -> FieldError {
    let meta = &new.metadata;
    let mut errs = metadata::validate_name(meta)
        .also(metadata::configuration_labels(meta).via_field("labels"))
        .also(annotations::validate_no_autoscaling(&meta.annotations).via_field("annotations"))
        .via_field("metadata");

    let spec = container::disallowed_extra(&new.spec.extra, "")
        .also(validate_template(cfg, &new.spec.template, meta).via_field("template"));
    errs = errs.also(spec.via_field("spec"));

    if let Some(old) = old {
        // A Service-owned Configuration carries the Service's creator; only check our own.
        if meta.owner_references.is_empty() {
            errs = errs.also(
                metadata::validate_creator_and_modifier(
                    old.spec != new.spec,
                    &old.metadata.annotations,
                    &meta.annotations,
                )
                .via_field("metadata.annotations"),
            );
        }
        errs = errs.also(
            verify_name_change(&new.spec.template, &old.spec.template).via_field("spec.template"),
        );
    }
    errs
}

/// Validates a Revision. Its spec is immutable: on update any spec change is the only error
/// reported, as in Knative.
pub fn validate_revision(new: &Revision, old: Option<&Revision>, cfg: &Config) -> FieldError {
    let meta = &new.metadata;
    let errs = metadata::validate_name(meta)
        .also(metadata::revision_labels(meta).via_field("labels"))
        .also(
            annotations::validate_autoscaling(&cfg.autoscaler, &meta.annotations)
                .via_field("annotations"),
        )
        .via_field("metadata");

    match old {
        Some(old) => {
            let d = diff::json_diff(&old.spec, &new.spec);
            if d.is_empty() {
                errs
            } else {
                FieldError::generic("Immutable fields changed (-old +new)", &["spec"])
                    .with_details(d)
            }
        }
        None => errs.also(validate_revision_spec(cfg, &new.spec).via_field("spec")),
    }
}

/// Validates a Route.
pub fn validate_route(new: &Route, old: Option<&Route>, _cfg: &Config) -> FieldError {
    let meta = &new.metadata;
    let mut errs = metadata::validate_name(meta)
        .also(metadata::route_labels(meta).via_field("labels"))
        .also(
            annotations::validate_no_autoscaling(&meta.annotations)
                .also(annotations::validate_rollout_duration(&meta.annotations))
                .via_field("annotations"),
        )
        .via_field("metadata");

    let spec = container::disallowed_extra(&new.spec.extra, "")
        .also(traffic::validate_traffic(&new.spec.traffic, false).via_field("traffic"));
    errs = errs.also(spec.via_field("spec"));

    // A Service-owned Route is rewritten by the controller; only check independent ones.
    if let Some(old) = old
        && meta.owner_references.is_empty()
    {
        errs = errs.also(
            metadata::validate_creator_and_modifier(
                old.spec != new.spec,
                &old.metadata.annotations,
                &meta.annotations,
            )
            .via_field("metadata.annotations"),
        );
    }
    errs
}

/// `RevisionTemplateSpec.Validate`; paths relative to the template. `parent` is the
/// Service/Configuration metadata the BYO revision name is checked against.
fn validate_template(cfg: &Config, rts: &RevisionTemplateSpec, parent: &ObjectMeta) -> FieldError {
    let annos = &rts.metadata.annotations;
    validate_revision_spec(cfg, &rts.spec)
        .via_field("spec")
        .also(
            annotations::validate_autoscaling(&cfg.autoscaler, annos)
                .also(annotations::validate_queue_sidecar(annos))
                .also(annotations::validate_progress_deadline(annos))
                .also(annotations::validate_template_networking(annos))
                .via_field("metadata.annotations"),
        )
        .also(validate_revision_name(&rts.metadata, parent))
}

/// BYO revision names: a DNS-1035 label prefixed by `<parent>-`, so that revisions of
/// different parents cannot collide; not allowed while the parent itself has no name yet.
fn validate_revision_name(meta: &ObjectMeta, parent: &ObjectMeta) -> FieldError {
    if !meta.generate_name.is_empty() {
        let msgs = names::name_is_dns1035_label(&meta.generate_name, true);
        if !msgs.is_empty() {
            return FieldError::invalid_value(
                format!("not a DNS 1035 label prefix: {}", names::go_list(&msgs)),
                "metadata.generateName",
            );
        }
    }
    if meta.name.is_empty() {
        return FieldError::none();
    }
    let msgs = names::name_is_dns1035_label(&meta.name, false);
    if !msgs.is_empty() {
        return FieldError::invalid_value(
            format!("not a DNS 1035 label: {}", names::go_list(&msgs)),
            "metadata.name",
        );
    }
    if parent.name.is_empty() && !parent.generate_name.is_empty() {
        return FieldError::disallowed(&["metadata.name"]);
    }
    let prefix = format!("{}-", parent.name);
    if !meta.name.starts_with(&prefix) {
        return FieldError::invalid_value(
            format!("{:?} must have prefix {prefix:?}", meta.name),
            "metadata.name",
        );
    }
    FieldError::none()
}

/// With a BYO name, every template change must come with a new name (the name *is* the
/// revision); paths relative to the template.
fn verify_name_change(new: &RevisionTemplateSpec, old: &RevisionTemplateSpec) -> FieldError {
    if new.metadata.name.is_empty() || new.metadata.name != old.metadata.name {
        return FieldError::none();
    }
    let d = diff::json_diff(old, new);
    if d.is_empty() {
        return FieldError::none();
    }
    FieldError::generic(
        "Saw the following changes without a name change (-old +new)",
        &["metadata.name"],
    )
    .with_details(d)
}

/// `RevisionSpec.Validate`; paths relative to the RevisionSpec. `responseStartTimeoutSeconds`
/// and `idleTimeoutSeconds` are not checked on the resource (as in `revision_validation.go`).
fn validate_revision_spec(cfg: &Config, rs: &RevisionSpec) -> FieldError {
    let mut errs = podspec::validate_pod_spec(cfg, &rs.pod);
    let max_timeout = cfg.defaults.max_revision_timeout_seconds;
    if let Some(t) = rs.timeout_seconds
        && t != 0
        && !(0..=max_timeout).contains(&t)
    {
        errs = errs.also(FieldError::out_of_bounds(
            t,
            0,
            max_timeout,
            "timeoutSeconds",
        ));
    }
    if let Some(cc) = rs.container_concurrency {
        let min = if cfg.defaults.allow_container_concurrency_zero {
            0
        } else {
            1
        };
        let max = cfg.defaults.container_concurrency_max_limit;
        if !(min..=max).contains(&cc) {
            errs = errs.also(FieldError::out_of_bounds(
                cc,
                min,
                max,
                "containerConcurrency",
            ));
        }
    }
    errs
}
