//! The resource kinds wisp serves: names, plurals, short names and API groups, so that the
//! API server, the store and the CLI agree on how a kind is spelled.

/// One served resource kind.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceKind {
    /// `Service`
    pub kind: &'static str,
    /// `services` (the URL path segment)
    pub plural: &'static str,
    /// `service`
    pub singular: &'static str,
    /// `ksvc`, `kservice`
    pub short_names: &'static [&'static str],
    /// `serving.knative.dev`
    pub group: &'static str,
    /// `v1`
    pub version: &'static str,
}

impl ResourceKind {
    /// `group/version`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// `service.serving.knative.dev`, as kubectl prints it.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.singular, self.group)
    }

    /// `services.serving.knative.dev`: the group-qualified plural, the resource string the
    /// store files objects under and Kubernetes names a kind by in its error messages.
    pub fn store_key(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

pub const SERVICE: ResourceKind = ResourceKind {
    kind: "Service",
    plural: "services",
    singular: "service",
    short_names: &["ksvc", "kservice"],
    group: "serving.knative.dev",
    version: "v1",
};
pub const CONFIGURATION: ResourceKind = ResourceKind {
    kind: "Configuration",
    plural: "configurations",
    singular: "configuration",
    short_names: &["config", "cfg"],
    group: "serving.knative.dev",
    version: "v1",
};
pub const REVISION: ResourceKind = ResourceKind {
    kind: "Revision",
    plural: "revisions",
    singular: "revision",
    short_names: &["rev"],
    group: "serving.knative.dev",
    version: "v1",
};
pub const ROUTE: ResourceKind = ResourceKind {
    kind: "Route",
    plural: "routes",
    singular: "route",
    short_names: &["rt"],
    group: "serving.knative.dev",
    version: "v1",
};
pub const POD_AUTOSCALER: ResourceKind = ResourceKind {
    kind: "PodAutoscaler",
    plural: "podautoscalers",
    singular: "podautoscaler",
    short_names: &["kpa", "pa"],
    group: "autoscaling.internal.knative.dev",
    version: "v1alpha1",
};

/// Every kind, in the order `wisp get all` would print them.
pub const ALL: [&ResourceKind; 5] = [&SERVICE, &CONFIGURATION, &REVISION, &ROUTE, &POD_AUTOSCALER];

/// Finds a kind by any name a user may type: plural, singular, short name, Kind, or the
/// group-qualified forms (`services.serving.knative.dev`), case-insensitively.
pub fn lookup(name: &str) -> Option<&'static ResourceKind> {
    let lower = name.to_ascii_lowercase();
    ALL.into_iter().find(|k| {
        let (base, group) = match lower.split_once('.') {
            Some((b, g)) => (b, Some(g)),
            None => (lower.as_str(), None),
        };
        if group.is_some_and(|g| g != k.group) {
            return false;
        }
        base == k.plural
            || base == k.singular
            || base == k.kind.to_ascii_lowercase()
            || k.short_names.contains(&base)
    })
}

/// Finds a kind by its URL plural and API group.
pub fn by_plural(group: &str, plural: &str) -> Option<&'static ResourceKind> {
    ALL.into_iter()
        .find(|k| k.group == group && k.plural == plural)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_short_name_resolves() {
        let cases = [
            ("ksvc", "Service"),
            ("kservice", "Service"),
            ("service", "Service"),
            ("services", "Service"),
            ("Service", "Service"),
            ("services.serving.knative.dev", "Service"),
            ("rt", "Route"),
            ("route", "Route"),
            ("routes", "Route"),
            ("cfg", "Configuration"),
            ("config", "Configuration"),
            ("configuration", "Configuration"),
            ("configurations", "Configuration"),
            ("rev", "Revision"),
            ("revision", "Revision"),
            ("revisions", "Revision"),
            ("kpa", "PodAutoscaler"),
            ("pa", "PodAutoscaler"),
            ("podautoscaler", "PodAutoscaler"),
            ("podautoscalers", "PodAutoscaler"),
        ];
        for (name, kind) in cases {
            assert_eq!(lookup(name).map(|k| k.kind), Some(kind), "{name}");
        }
        assert!(lookup("pods").is_none());
        assert!(lookup("services.apps").is_none());
    }
}
