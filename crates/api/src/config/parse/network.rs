//! `config-network`: its keys, defaults and checks, after Knative's `knative.dev/networking/pkg/config/config.go`.

use super::*;

pub(super) fn network(d: &Data) -> Result<NetworkConfig, ConfigError> {
    let mut c = NetworkConfig::default();
    d.string(&["ingress-class", "ingress.class"], &mut c.ingress_class);
    d.string(
        &["certificate-class", "certificate.class"],
        &mut c.certificate_class,
    );
    d.string(
        &["domain-template", "domainTemplate"],
        &mut c.domain_template,
    );
    d.string(&["tag-template", "tagTemplate"], &mut c.tag_template);
    d.enabled(
        &["external-domain-tls", "auto-tls", "autoTLS"],
        &mut c.external_domain_tls,
    )?;
    d.enabled(
        &["cluster-local-domain-tls"],
        &mut c.cluster_local_domain_tls,
    )?;
    d.enabled(
        &["system-internal-tls", "internal-encryption"],
        &mut c.system_internal_tls,
    )?;
    if let Some((k, v)) = d.get(&["http-protocol", "httpProtocol"]) {
        c.http_protocol = ["Enabled", "Redirected", "Disabled"]
            .into_iter()
            .find(|p| p.eq_ignore_ascii_case(v))
            .ok_or_else(|| {
                d.invalid(
                    k,
                    format!("{v:?} is not one of Enabled, Redirected, Disabled"),
                )
            })?
            .to_string();
    }
    d.int(
        &["rollout-duration", "rolloutDuration"],
        &mut c.rollout_duration_seconds,
    )?;
    d.bool(
        &["autocreate-cluster-domain-claims"],
        &mut c.autocreate_cluster_domain_claims,
    )?;
    d.string(
        &["namespace-wildcard-cert-selector"],
        &mut c.namespace_wildcard_cert_selector,
    );
    d.bool(
        &["enable-mesh-pod-addressability"],
        &mut c.enable_mesh_pod_addressability,
    )?;
    if let Some((k, v)) = d.get(&["mesh-compatibility-mode"]) {
        c.mesh_compatibility_mode = one_of(d, k, v, &["auto", "enabled", "disabled"])?;
    }
    if let Some((k, v)) = d.get(&["default-external-scheme"]) {
        c.default_external_scheme = one_of(d, k, v, &["http", "https"])?;
    }

    if c.rollout_duration_seconds < 0 {
        let (k, _) = d
            .get(&["rollout-duration", "rolloutDuration"])
            .unwrap_or(("rollout-duration", ""));
        return Err(d.invalid(
            k,
            format!(
                "rollout-duration must be a non-negative integer, was: {}",
                c.rollout_duration_seconds
            ),
        ));
    }
    if !c.namespace_wildcard_cert_selector.is_empty() {
        match parse_yaml(&c.namespace_wildcard_cert_selector) {
            Ok(Value::Object(_) | Value::Null) => {}
            Ok(other) => {
                return Err(d.invalid(
                    "namespace-wildcard-cert-selector",
                    format!("expected a label selector mapping, got {}", kind(&other)),
                ));
            }
            Err(e) => {
                return Err(d.invalid(
                    "namespace-wildcard-cert-selector",
                    format!("failed to parse label selector: {e}"),
                ));
            }
        }
    }
    let domain_key = d
        .get(&["domain-template", "domainTemplate"])
        .map_or("domain-template", |(k, _)| k);
    check_domain_template(&c.domain_template).map_err(|e| d.invalid(domain_key, e))?;
    let tag_key = d
        .get(&["tag-template", "tagTemplate"])
        .map_or("tag-template", |(k, _)| k);
    Template::parse(&c.tag_template)
        .and_then(|t| t.render(&|f| tag_field(f, "v2", "foo")))
        .map_err(|e| d.invalid(tag_key, e))?;
    Ok(c)
}

/// Knative renders the domain template for a sample route and requires a bare hostname;
/// wisp additionally requires that the name appears, or every route would share one host.
pub(super) fn check_domain_template(src: &str) -> Result<(), String> {
    let t = Template::parse(src)?;
    let empty = BTreeMap::new();
    let render =
        |name: &str| t.render(&|f| domain_field(f, name, "bar", "baz.com", &empty, &empty));
    let host = render("foo")?;
    if host.is_empty() || !is_dns_subdomain(&host) {
        return Err(format!(
            "domain template {src:?} renders {host:?} for a sample route, which is not a valid hostname"
        ));
    }
    if render("qux")? == host {
        return Err(format!(
            "domain template {src:?} must contain {{{{.Name}}}}"
        ));
    }
    Ok(())
}

pub(super) fn domain_field<'a>(
    field: &str,
    name: &'a str,
    namespace: &'a str,
    domain: &'a str,
    annotations: &'a BTreeMap<String, String>,
    labels: &'a BTreeMap<String, String>,
) -> Option<Datum<'a>> {
    match field {
        "Name" => Some(Datum::Str(Cow::Borrowed(name))),
        "Namespace" => Some(Datum::Str(Cow::Borrowed(namespace))),
        "Domain" => Some(Datum::Str(Cow::Borrowed(domain))),
        "Annotations" => Some(Datum::Map(annotations)),
        "Labels" => Some(Datum::Map(labels)),
        _ => None,
    }
}

pub(super) fn tag_field<'a>(field: &str, tag: &'a str, name: &'a str) -> Option<Datum<'a>> {
    match field {
        "Tag" => Some(Datum::Str(Cow::Borrowed(tag))),
        "Name" => Some(Datum::Str(Cow::Borrowed(name))),
        _ => None,
    }
}

impl NetworkConfig {
    /// Renders `domain-template` for a route (Knative's `DomainNameFromTemplate`): `name` is
    /// the route name (or the tag-template result for a tagged target), `domain` the
    /// config-domain suffix. Errors only if the template needs a field it cannot have.
    pub fn render_domain(
        &self,
        name: &str,
        namespace: &str,
        domain: &str,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            map: "config-network".into(),
            key: "domain-template".into(),
            message,
        };
        Template::parse(&self.domain_template)
            .and_then(|t| {
                t.render(&|f| domain_field(f, name, namespace, domain, annotations, labels))
            })
            .map_err(invalid)
    }

    /// Renders `tag-template` (Knative's `HostnameFromTemplate` input for tagged targets):
    /// the name fed to the domain template for traffic tag `tag` of route `name`.
    pub fn render_tag(&self, tag: &str, name: &str) -> Result<String, ConfigError> {
        Template::parse(&self.tag_template)
            .and_then(|t| t.render(&|f| tag_field(f, tag, name)))
            .map_err(|message| ConfigError::Invalid {
                map: "config-network".into(),
                key: "tag-template".into(),
                message,
            })
    }
}
