//! `config-domain`: its keys, defaults and checks, after Knative's `pkg/reconciler/route/config/domain.go`.

use super::*;

pub(super) fn domain(d: &Data) -> Result<DomainConfig, ConfigError> {
    // A config-domain that is present replaces the shipped example.com catch-all entirely.
    let mut domains = BTreeMap::new();
    for (name, raw) in d.data {
        if name.starts_with('_') {
            continue;
        }
        if !is_dns_subdomain(name) {
            return Err(d.invalid(
                name,
                "a domain must be a lowercase RFC 1123 subdomain (e.g. example.com)",
            ));
        }
        let selector = parse_selector(raw).map_err(|e| d.invalid(name, e))?;
        domains.insert(name.clone(), selector);
    }
    Ok(DomainConfig { domains })
}

/// A config-domain value: `""` (catch-all) or YAML `selector: {label: value, …}`. Like
/// Knative's lenient YAML unmarshalling, other keys are ignored.
pub(super) fn parse_selector(raw: &str) -> Result<BTreeMap<String, String>, String> {
    if raw.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let value = parse_yaml(raw).map_err(|e| format!("failed to parse domain selector: {e}"))?;
    let selector = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(mut o) => o.remove("selector").unwrap_or(Value::Null),
        other => {
            return Err(format!(
                "expected empty or `selector: {{label: value}}`, got {}",
                kind(&other)
            ));
        }
    };
    match selector {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(o) => o
            .into_iter()
            .map(|(k, v)| match v {
                Value::Array(_) | Value::Object(_) => {
                    Err(format!("selector label {k:?} must have a scalar value"))
                }
                v => Ok((k, stringify(v))),
            })
            .collect(),
        other => Err(format!(
            "selector must be a mapping of labels, got {}",
            kind(&other)
        )),
    }
}

impl DomainConfig {
    /// The domain suffix for a Route with these labels (Knative's `LookupDomainForLabels`):
    /// routes labelled `networking.knative.dev/visibility: cluster-local` and routes that no
    /// selector matches get `svc.<cluster_domain>`; otherwise the matching selector with the
    /// most labels wins, ties going to the lexicographically smallest domain.
    pub fn lookup(&self, labels: &BTreeMap<String, String>, cluster_domain: &str) -> String {
        let cluster_local = format!("svc.{cluster_domain}");
        if labels.get(VISIBILITY_LABEL).map(String::as_str) == Some("cluster-local") {
            return cluster_local;
        }
        // BTreeMap iterates domains in ascending order, so keeping only strictly more
        // specific matches leaves the smallest domain among equally specific ones.
        let mut best: Option<(&String, usize)> = None;
        for (domain, selector) in &self.domains {
            let matches = selector.iter().all(|(k, v)| labels.get(k) == Some(v));
            if matches && best.is_none_or(|(_, n)| selector.len() > n) {
                best = Some((domain, selector.len()));
            }
        }
        best.map_or(cluster_local, |(d, _)| d.clone())
    }
}
