//! Pure builders of the DomainMapping reconciler (knative/serving
//! `pkg/reconciler/domainmapping/{reconciler.go,resources/}`): the claim it needs, how its
//! ref resolves to a cluster-local host, and the routing-table entry (the KIngress) that
//! sends its domain there.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use wisp_api::{
    config::Config,
    domainmapping::{
        ClusterDomainClaim, ClusterDomainClaimSpec, DomainMapping, KReference, condition,
    },
    kinds,
    meta::ObjectMeta,
    routing::{HostRoute, Visibility, domain_mapping_key},
};

use crate::conditions::{ConditionSet, READY};

/// DomainMapping conditions (`domainmapping_lifecycle.go`): Ready ⇐ DomainClaimed,
/// ReferenceResolved, IngressReady, CertificateProvisioned.
pub const CONDITIONS: ConditionSet = ConditionSet::new(
    READY,
    &[
        condition::DOMAIN_CLAIMED,
        condition::REFERENCE_RESOLVED,
        condition::INGRESS_READY,
        condition::CERTIFICATE_PROVISIONED,
    ],
);

/// `MarkDomainClaimNotOwned`.
pub const DOMAIN_ALREADY_CLAIMED: (&str, &str) = (
    "DomainAlreadyClaimed",
    "The domain name is already in use by another DomainMapping",
);

/// `MarkTLSNotEnabled` with route_lifecycle.go's `ExternalDomainTLSNotEnabledMessage` (the
/// message Route's CertificateProvisioned carries in wisp too).
pub const TLS_NOT_ENABLED: (&str, &str) = ("TLSNotEnabled", "external-domain-tls is not enabled");

/// `MarkCertificateNotRequired(TLSCertificateProvidedExternally)`: `spec.tls` names the
/// Secret the ingress serves.
pub const CERTIFICATE_EXTERNALLY_PROVIDED: (&str, &str) = (
    "CertificateExternallyProvided",
    "TLS certificate was provided externally",
);

/// `MarkIngressNotConfigured`.
pub const INGRESS_NOT_CONFIGURED: (&str, &str) = (
    "IngressNotConfigured",
    "Ingress has not yet been reconciled.",
);

/// The routing-table host of a mapping: its name without a trailing dot (a fully qualified
/// name may end in one; requests never carry it, see `wisp_ingress::host`).
pub fn host(dm: &DomainMapping) -> String {
    dm.metadata
        .name
        .strip_suffix('.')
        .unwrap_or(&dm.metadata.name)
        .to_owned()
}

/// `resources.MakeDomainClaim`: the claim on the mapping's domain for its namespace.
pub fn make_domain_claim(dm: &DomainMapping) -> ClusterDomainClaim {
    ClusterDomainClaim {
        api_version: kinds::CLUSTER_DOMAIN_CLAIM.api_version(),
        kind: kinds::CLUSTER_DOMAIN_CLAIM.kind.into(),
        metadata: ObjectMeta {
            name: dm.metadata.name.clone(),
            ..Default::default()
        },
        spec: ClusterDomainClaimSpec {
            namespace: dm.metadata.namespace.clone(),
            extra: BTreeMap::new(),
        },
        status: None,
    }
}

/// What the ref names, as wisp can read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Referent {
    /// A `v1` Service: addressable by its name, whether or not it exists (knative/pkg
    /// `resolver` special-cases it so).
    CoreService,
    /// A Knative Service or Route, with its `status.address.url` (None: no address yet).
    Addressable(Option<String>),
    /// A Knative Service or Route that does not exist: the store's not-found text.
    Missing(String),
    /// A kind wisp has no addressable of.
    Unsupported,
}

/// Which kind the ref names, when wisp can resolve it: a Knative Service or Route (their
/// `status.address`), or a `v1` Service.
pub fn referenced_kind(r: &KReference) -> Option<&'static kinds::ResourceKind> {
    match (r.api_version.as_str(), r.kind.as_str()) {
        ("v1", "Service") => Some(&kinds::CORE_SERVICE),
        ("serving.knative.dev/v1", "Service") => Some(&kinds::SERVICE),
        ("serving.knative.dev/v1", "Route") => Some(&kinds::ROUTE),
        _ => None,
    }
}

/// Go's `%+v` of a `*KReference`, as knative/pkg's resolver errors print the ref.
fn ref_string(r: &KReference) -> String {
    format!(
        "&{{Kind:{} Namespace:{} Name:{} APIVersion:{} Group:{} Address:<nil>}}",
        r.kind, r.namespace, r.name, r.api_version, r.group
    )
}

/// `resolveRef`: the cluster-local host the mapping's requests go to, or the message of
/// ReferenceResolved False (`ResolveFailed`). The URL comes from knative/pkg
/// `resolver.URIFromKReference`; the host must be `{name}.{namespace}.svc.{cluster-domain}`
/// in the mapping's namespace.
pub fn resolve(dm: &DomainMapping, referent: &Referent, cfg: &Config) -> Result<String, String> {
    let r = &dm.spec.r#ref;
    let url = match referent {
        Referent::CoreService => format!(
            "http://{}.{}.svc.{}/",
            r.name, r.namespace, cfg.network.cluster_domain
        ),
        Referent::Addressable(Some(url)) if !url.is_empty() => url.clone(),
        Referent::Addressable(_) => return Err(format!("address not set for {}", ref_string(r))),
        Referent::Missing(why) => {
            return Err(format!(
                "failed to get object {}/{}: {why}",
                r.namespace, r.name
            ));
        }
        Referent::Unsupported => {
            return Err(format!(
                "failed to get lister for {}: wisp resolves serving.knative.dev/v1 Services and Routes and v1 Services only",
                ref_string(r)
            ));
        }
    };
    let (host, path) = split_url(&url);
    if !path.trim_end_matches('/').is_empty() {
        return Err(format!("resolved URI {url:?} contains a path"));
    }
    let suffix = format!(".svc.{}", cfg.network.cluster_domain);
    let parts: Vec<&str> = host
        .strip_suffix(&suffix)
        .unwrap_or(host)
        .split('.')
        .collect();
    if !host.ends_with(&suffix) || parts.len() != 2 {
        return Err(format!(
            "resolved URI {url:?} must be of the form {{name}}.{{namespace}}{suffix}"
        ));
    }
    if parts[1] != dm.metadata.namespace {
        return Err(format!(
            "resolved URI {url:?} must be in same namespace as DomainMapping"
        ));
    }
    Ok(host.to_owned())
}

/// `http://host[:port]/path` → (host, path).
fn split_url(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    (host, path)
}

/// `resources.MakeIngress` as a routing-table entry: the mapping's domain, on the external
/// listener, rewritten to `target_host`.
pub fn host_route(
    dm: &DomainMapping,
    target_host: &str,
    tls: bool,
    redirect: bool,
) -> BTreeMap<String, HostRoute> {
    BTreeMap::from([(
        host(dm),
        HostRoute {
            namespace: dm.metadata.namespace.clone(),
            route: domain_mapping_key(&dm.metadata.name),
            tag: None,
            visibility: Visibility::External,
            targets: Vec::new(),
            tag_targets: BTreeMap::new(),
            rewrite_host: Some(target_host.to_owned()),
            tls,
            redirect: tls && redirect,
        },
    )])
}

/// `resources.MakeIngress` as the KIngress view wisp shows for the mapping (its routing is
/// the [`host_route`] entry): one ExternalIP rule for the domain, rewriting Host to
/// `target_host` and sending to the Service named by its first label, with
/// `K-Original-Host` appended. Named after the mapping (Knative's `kmeta.ChildName`, which
/// only shortens names past 63 characters). Ready: wisp's ingress serves it at once.
pub fn make_ingress(dm: &DomainMapping, target_host: &str, cfg: &Config) -> Value {
    let meta = &dm.metadata;
    let mut labels: Map<String, Value> = meta
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    labels.insert(UID_LABEL.into(), meta.uid.clone().into());
    labels.insert(NAMESPACE_LABEL.into(), meta.namespace.clone().into());
    let mut annotations: Map<String, Value> = meta
        .annotations
        .iter()
        .filter(|(k, _)| k.as_str() != LAST_APPLIED)
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    annotations
        .entry(CLASS_ANNOTATION)
        .or_insert_with(|| cfg.network.ingress_class.clone().into());
    let service = target_host.split('.').next().unwrap_or_default();
    let lb = |svc: &str| json!({"ingress": [{"domainInternal": wisp_views::ingress::domain_internal(svc, &cfg.network.cluster_domain)}]});
    let ready = |t: &str| json!({"type": t, "status": "True"});
    json!({
        "apiVersion": kinds::INGRESS.api_version(),
        "kind": "Ingress",
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": kinds::DOMAIN_MAPPING.api_version(),
                "kind": kinds::DOMAIN_MAPPING.kind,
                "name": meta.name,
                "uid": meta.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "httpOption": "Enabled",
            "rules": [{
                "hosts": [meta.name],
                "visibility": "ExternalIP",
                "http": {"paths": [{
                    "rewriteHost": target_host,
                    "splits": [{
                        "percent": 100,
                        "appendHeaders": {"K-Original-Host": meta.name},
                        "serviceNamespace": meta.namespace,
                        "serviceName": service,
                        "servicePort": 80,
                    }],
                }]},
            }],
        },
        "status": {
            "observedGeneration": 0,
            "conditions": [ready("LoadBalancerReady"), ready("NetworkConfigured"), ready("Ready")],
            "publicLoadBalancer": lb(wisp_views::ingress::EXTERNAL),
            "privateLoadBalancer": lb(wisp_views::ingress::INTERNAL),
        },
    })
}

/// `serving.DomainMappingUIDLabelKey` and `DomainMappingNamespaceLabelKey`.
const UID_LABEL: &str = "serving.knative.dev/domainMappingUID";
const NAMESPACE_LABEL: &str = "serving.knative.dev/domainMappingNamespace";
/// `networking.IngressClassAnnotationKey` (a mapping may choose its class so).
const CLASS_ANNOTATION: &str = "networking.knative.dev/ingress.class";
/// `corev1.LastAppliedConfigAnnotation`, left off the KIngress.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kingress_view() {
        let mut d = dm("serving.knative.dev/v1", "Service");
        d.metadata
            .annotations
            .insert(LAST_APPLIED.into(), "{}".into());
        let ing = make_ingress(&d, "hello.ns.svc.cluster.local", &Config::default());
        assert_eq!(ing["metadata"]["name"], "www.example.org");
        assert_eq!(ing["metadata"]["labels"][NAMESPACE_LABEL], "ns");
        assert!(ing["metadata"]["annotations"].get(LAST_APPLIED).is_none());
        assert_eq!(
            ing["metadata"]["annotations"][CLASS_ANNOTATION],
            Config::default().network.ingress_class
        );
        let path = &ing["spec"]["rules"][0]["http"]["paths"][0];
        assert_eq!(path["rewriteHost"], "hello.ns.svc.cluster.local");
        assert_eq!(path["splits"][0]["serviceName"], "hello");
        assert_eq!(
            path["splits"][0]["appendHeaders"]["K-Original-Host"],
            "www.example.org"
        );
    }

    fn dm(api_version: &str, kind: &str) -> DomainMapping {
        serde_json::from_value(json!({
            "metadata": {"name": "www.example.org", "namespace": "ns"},
            "spec": {"ref": {"apiVersion": api_version, "kind": kind, "name": "hello", "namespace": "ns"}},
        }))
        .unwrap()
    }

    #[test]
    fn resolves_like_knative() {
        let cfg = Config::default();
        let ksvc = dm("serving.knative.dev/v1", "Service");
        let ok = |url: &str| resolve(&ksvc, &Referent::Addressable(Some(url.into())), &cfg);
        assert_eq!(
            ok("http://hello.ns.svc.cluster.local"),
            Ok("hello.ns.svc.cluster.local".into())
        );
        assert_eq!(
            ok("http://hello.ns.svc.cluster.local/"),
            Ok("hello.ns.svc.cluster.local".into())
        );
        assert_eq!(
            ok("http://hello.ns.svc.cluster.local/x"),
            Err("resolved URI \"http://hello.ns.svc.cluster.local/x\" contains a path".into())
        );
        assert_eq!(
            ok("http://hello.ns.example.com"),
            Err("resolved URI \"http://hello.ns.example.com\" must be of the form {name}.{namespace}.svc.cluster.local".into())
        );
        assert_eq!(
            ok("http://hello.other.svc.cluster.local"),
            Err("resolved URI \"http://hello.other.svc.cluster.local\" must be in same namespace as DomainMapping".into())
        );
        assert_eq!(
            resolve(&ksvc, &Referent::Addressable(None), &cfg),
            Err("address not set for &{Kind:Service Namespace:ns Name:hello APIVersion:serving.knative.dev/v1 Group: Address:<nil>}".into())
        );
        assert_eq!(
            resolve(
                &ksvc,
                &Referent::Missing("services.serving.knative.dev \"hello\" not found".into()),
                &cfg
            ),
            Err(
                "failed to get object ns/hello: services.serving.knative.dev \"hello\" not found"
                    .into()
            )
        );
        let core = dm("v1", "Service");
        assert_eq!(
            resolve(&core, &Referent::CoreService, &cfg),
            Ok("hello.ns.svc.cluster.local".into())
        );
        assert_eq!(referenced_kind(&core.spec.r#ref).map(|k| k.group), Some(""));
        let other = dm("apps/v1", "Deployment");
        assert_eq!(referenced_kind(&other.spec.r#ref), None);
        assert!(
            resolve(&other, &Referent::Unsupported, &cfg)
                .unwrap_err()
                .starts_with("failed to get lister for ")
        );
    }

    #[test]
    fn claim_and_entry() {
        let d = dm("serving.knative.dev/v1", "Service");
        let claim = make_domain_claim(&d);
        assert_eq!(claim.metadata.name, "www.example.org");
        assert_eq!(claim.metadata.namespace, "");
        assert_eq!(claim.spec.namespace, "ns");
        let entries = host_route(&d, "hello.ns.svc.cluster.local", false, true);
        let e = &entries["www.example.org"];
        assert!(
            !e.redirect,
            "no redirect to https for a host without a certificate"
        );
        assert!(host_route(&d, "h", true, true)["www.example.org"].redirect);
        assert!(!host_route(&d, "h", true, false)["www.example.org"].redirect);
        assert_eq!(e.visibility, Visibility::External);
        assert_eq!(
            e.rewrite_host.as_deref(),
            Some("hello.ns.svc.cluster.local")
        );
        assert_eq!(e.route, "domainmapping:www.example.org");
    }
}
