//! DomainMapping validation (knative/serving `pkg/apis/serving/v1beta1/domainmapping_validation.go`,
//! the ref by knative/pkg `apis/duck/v1/knative_reference.go` `KReference.Validate`) and
//! ClusterDomainClaim validation (knative/networking
//! `pkg/apis/networking/v1alpha1/domainclaim_validation.go`: none beyond the shape; wisp
//! also requires `spec.namespace`, without which the claim grants nothing).

use crate::config::Config;
use crate::domainmapping::{ClusterDomainClaim, DomainMapping, KReference};
use crate::field_error::FieldError;

use super::container::disallowed_extra;
use super::metadata;
use super::names::{dns1123_label, dns1123_subdomain};

/// Validates a DomainMapping (after defaulting; `old` on update).
pub fn validate_domain_mapping(
    new: &DomainMapping,
    old: Option<&DomainMapping>,
    cfg: &Config,
) -> FieldError {
    let meta = &new.metadata;
    let mut md = FieldError::none();
    if !meta.generate_name.is_empty() {
        md = md.also(FieldError::disallowed(&["generateName"]));
    }
    if let Some(why) = fully_qualified_domain_name("name", &meta.name) {
        md = md.also(FieldError::generic(
            format!("invalid name {:?}: {why}", meta.name),
            &["name"],
        ));
    }
    let cluster_domain = &cfg.network.cluster_domain;
    if meta.name.ends_with(&format!(".{cluster_domain}")) {
        md = md.also(FieldError::generic(
            format!(
                "invalid name {:?}: must not be a subdomain of cluster local domain {cluster_domain:?}",
                meta.name
            ),
            &["name"],
        ));
    }
    if let Some(old) = old {
        md = md.also(
            metadata::validate_creator_and_modifier(
                old.spec != new.spec,
                &old.metadata.annotations,
                &meta.annotations,
            )
            .via_field("annotations"),
        );
    }
    let spec = disallowed_extra(&new.spec.extra, "")
        .also(validate_ref(&new.spec.r#ref, &meta.namespace).via_field("ref"));
    md.via_field("metadata").also(spec.via_field("spec"))
}

/// `KReference.Validate`, with the parent's namespace (cross-namespace references are not
/// allowed, and Knative's `group` is only allowed behind a context flag wisp never sets).
fn validate_ref(r: &KReference, parent_ns: &str) -> FieldError {
    let mut errs = FieldError::none();
    if r.name.is_empty() {
        errs = errs.also(FieldError::missing(&["name"]));
    }
    if !r.group.is_empty() {
        errs = errs.also(FieldError::disallowed(&["group"]));
    }
    if r.api_version.is_empty() {
        errs = errs.also(FieldError::missing(&["apiVersion"]));
    }
    if r.kind.is_empty() {
        errs = errs.also(FieldError::missing(&["kind"]));
    }
    if !r.namespace.is_empty() && !parent_ns.is_empty() && r.namespace != parent_ns {
        errs = errs.also(
            FieldError::generic("mismatched namespaces", &["namespace"]).with_details(format!(
                "parent namespace: {parent_ns:?} does not match ref: {:?}",
                r.namespace
            )),
        );
    }
    errs.also(disallowed_extra(&r.extra, ""))
}

/// apimachinery `validation.IsFullyQualifiedDomainName` rendered as its `ToAggregate()`
/// (one error: `name: Invalid value: "x": …`); None when valid.
fn fully_qualified_domain_name(path: &str, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some(format!("{path}: Required value"));
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let invalid =
        |value: &str, detail: String| Some(format!("{path}: Invalid value: {value:?}: {detail}"));
    let errs = dns1123_subdomain(name);
    if !errs.is_empty() {
        return invalid(name, errs.join(","));
    }
    if name.split('.').count() < 2 {
        return invalid(
            name,
            "should be a domain with at least two segments separated by dots".into(),
        );
    }
    for label in name.split('.') {
        let errs = dns1123_label(label);
        if !errs.is_empty() {
            return invalid(label, errs.join(","));
        }
    }
    None
}

/// Validates a ClusterDomainClaim: a DNS-1123 subdomain name and the namespace it grants.
pub fn validate_cluster_domain_claim(new: &ClusterDomainClaim) -> FieldError {
    let mut errs = FieldError::none();
    let name_errs = dns1123_subdomain(&new.metadata.name);
    if new.metadata.name.is_empty() {
        errs = errs.also(FieldError::generic(
            "name or generateName is required",
            &["metadata.name"],
        ));
    } else if !name_errs.is_empty() {
        errs = errs.also(FieldError::generic(
            format!(
                "not a DNS 1123 subdomain: {}",
                super::names::go_list(&name_errs)
            ),
            &["metadata.name"],
        ));
    }
    if new.spec.namespace.is_empty() {
        errs = errs.also(FieldError::missing(&["spec.namespace"]));
    }
    errs.also(disallowed_extra(&new.spec.extra, "spec"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domainmapping::default_domain_mapping;
    use serde_json::json;

    fn dm(v: serde_json::Value) -> DomainMapping {
        let mut d: DomainMapping = serde_json::from_value(v).unwrap();
        default_domain_mapping(&mut d);
        d
    }

    fn good() -> serde_json::Value {
        json!({
            "metadata": {"name": "www.example.org", "namespace": "ns"},
            "spec": {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "hello"}},
        })
    }

    #[test]
    fn table() {
        let cfg = Config::default();
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            ("valid", good(), ""),
            (
                "trailing dot is a valid FQDN",
                with(&|v| v["metadata"]["name"] = json!("www.example.org.")),
                "",
            ),
            (
                "single label",
                with(&|v| v["metadata"]["name"] = json!("localhost")),
                "invalid name \"localhost\": name: Invalid value: \"localhost\": should be a domain with at least two segments separated by dots: metadata.name",
            ),
            (
                "upper case",
                with(&|v| v["metadata"]["name"] = json!("WWW.example.org")),
                "invalid name \"WWW.example.org\": name: Invalid value: \"WWW.example.org\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'): metadata.name",
            ),
            (
                "cluster-local",
                with(&|v| v["metadata"]["name"] = json!("hello.ns.svc.cluster.local")),
                "invalid name \"hello.ns.svc.cluster.local\": must not be a subdomain of cluster local domain \"cluster.local\": metadata.name",
            ),
            (
                "generateName",
                with(&|v| v["metadata"]["generateName"] = json!("www-")),
                "must not set the field(s): metadata.generateName",
            ),
            (
                "ref missing everything",
                with(&|v| v["spec"]["ref"] = json!({})),
                "missing field(s): spec.ref.apiVersion, spec.ref.kind, spec.ref.name",
            ),
            (
                "ref in another namespace",
                with(&|v| v["spec"]["ref"]["namespace"] = json!("other")),
                "mismatched namespaces: spec.ref.namespace\nparent namespace: \"ns\" does not match ref: \"other\"",
            ),
            (
                "ref group",
                with(&|v| v["spec"]["ref"]["group"] = json!("serving.knative.dev")),
                "must not set the field(s): spec.ref.group",
            ),
            (
                "tls",
                with(&|v| v["spec"]["tls"] = json!({"secretName": "cert"})),
                "",
            ),
            (
                "unknown spec field",
                with(&|v| v["spec"]["paths"] = json!(["/x"])),
                "must not set the field(s): spec.paths",
            ),
        ];
        for (name, input, want) in cases {
            let got = validate_domain_mapping(&dm(input), None, &cfg).to_string();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn creator_is_immutable() {
        let cfg = Config::default();
        let mut old = dm(good());
        old.metadata
            .annotations
            .insert(metadata::CREATOR.into(), "alice".into());
        let mut new = old.clone();
        new.metadata
            .annotations
            .insert(metadata::CREATOR.into(), "bob".into());
        assert_eq!(
            validate_domain_mapping(&new, Some(&old), &cfg).to_string(),
            "annotation value is immutable: metadata.annotations.serving.knative.dev/creator"
        );
    }

    #[test]
    fn claims() {
        let claim = |v| serde_json::from_value::<ClusterDomainClaim>(v).unwrap();
        assert!(
            validate_cluster_domain_claim(&claim(
                json!({"metadata": {"name": "www.example.org"}, "spec": {"namespace": "ns"}})
            ))
            .is_empty()
        );
        assert_eq!(
            validate_cluster_domain_claim(&claim(json!({"metadata": {"name": "www.example.org"}})))
                .to_string(),
            "missing field(s): spec.namespace"
        );
    }
}
