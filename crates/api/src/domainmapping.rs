//! `serving.knative.dev/v1beta1` DomainMapping (knative/serving
//! `pkg/apis/serving/v1beta1/domainmapping_{types,defaults,lifecycle}.go`) and the
//! `networking.internal.knative.dev/v1alpha1` ClusterDomainClaim that guards its domain
//! (knative/networking `pkg/apis/networking/v1alpha1/domainclaim_types.go`).
//!
//! Validation is in [`crate::validation::domainmapping`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::meta::Status;
use crate::serving::{Addressable, Object};

/// `apiVersion` of DomainMapping.
pub const API_VERSION: &str = "serving.knative.dev/v1beta1";

pub type DomainMapping = Object<DomainMappingSpec, DomainMappingStatus>;

/// A ClusterDomainClaim has a spec only (no status in Knative's type); `Value` keeps
/// whatever a client sends under `status` harmlessly.
pub type ClusterDomainClaim = Object<ClusterDomainClaimSpec, Value>;

/// The DomainMapping condition types (`domainmapping_types.go`); Ready is
/// [`crate::meta::READY`].
pub mod condition {
    pub const DOMAIN_CLAIMED: &str = "DomainClaimed";
    pub const REFERENCE_RESOLVED: &str = "ReferenceResolved";
    pub const INGRESS_READY: &str = "IngressReady";
    pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "DomainMappingSpec describes the DomainMapping the user wishes to exist.")]
pub struct DomainMappingSpec {
    #[schemars(
        description = "Ref specifies the target of the Domain Mapping. The object identified by the Ref must be an Addressable with a URL of the form `{name}.{namespace}.{domain}` where `{domain}` is the cluster domain, and `{name}` and `{namespace}` are the name and namespace of a Kubernetes Service. This contract is satisfied by Knative types such as Knative Services and Knative Routes, and by Kubernetes Services."
    )]
    #[serde(default)]
    pub r#ref: KReference,
    #[schemars(
        description = "TLS allows the DomainMapping to terminate TLS traffic with an existing secret."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<SecretTls>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// knative/pkg `apis/duck/v1/knative_reference.go` `KReference`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "KReference contains enough information to refer to another object.")]
pub struct KReference {
    #[schemars(description = "Kind of the referent.")]
    #[serde(default)]
    pub kind: String,
    #[schemars(
        description = "Namespace of the referent. This is optional field, it gets defaulted to the object holding it if left out."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[schemars(description = "Name of the referent.")]
    #[serde(default)]
    pub name: String,
    #[schemars(description = "API version of the referent.")]
    #[serde(default)]
    pub api_version: String,
    #[schemars(
        description = "Group of the API, without the version of the group (experimental in Knative; refused unless the KReference group feature is on, which wisp does not offer)."
    )]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "SecretTLS wrapper for TLS SecretName.")]
pub struct SecretTls {
    #[schemars(
        description = "SecretName is the name of the existing secret used to terminate TLS traffic."
    )]
    #[serde(default)]
    pub secret_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "DomainMappingStatus describes the current state of the DomainMapping.")]
pub struct DomainMappingStatus {
    #[serde(flatten)]
    pub status: Status,
    #[schemars(description = "URL is the URL of this DomainMapping.")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    #[schemars(
        description = "Address holds the information needed for a DomainMapping to be the target of an event."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "ClusterDomainClaimSpec contains the specification for a ClusterDomainClaim."
)]
pub struct ClusterDomainClaimSpec {
    #[schemars(
        description = "Namespace is the namespace which is allowed to create a DomainMapping using this ClusterDomainClaim's name."
    )]
    #[serde(default)]
    pub namespace: String,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `DomainMapping.SetDefaults` (`domainmapping_defaults.go`): the ref's namespace defaults
/// to the mapping's (`KReference.SetDefaults`); the creator/lastModifier annotations are set
/// by the admission step every Knative kind shares.
pub fn default_domain_mapping(dm: &mut DomainMapping) {
    if dm.spec.r#ref.namespace.is_empty() {
        dm.spec.r#ref.namespace = dm.metadata.namespace.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_namespace_defaults_to_the_mapping_s() {
        let mut dm: DomainMapping = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "www.example.org", "namespace": "ns1"},
            "spec": {"ref": {"kind": "Service", "name": "hello", "apiVersion": "serving.knative.dev/v1"}},
        }))
        .unwrap();
        default_domain_mapping(&mut dm);
        assert_eq!(dm.spec.r#ref.namespace, "ns1");
        // A namespace already set is kept (validation refuses a different one).
        dm.spec.r#ref.namespace = "other".into();
        default_domain_mapping(&mut dm);
        assert_eq!(dm.spec.r#ref.namespace, "other");
        let v = serde_json::to_value(&dm).unwrap();
        assert_eq!(v["spec"]["ref"]["apiVersion"], "serving.knative.dev/v1");
        assert!(v["spec"].get("tls").is_none());
    }
}
