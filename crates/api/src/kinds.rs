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
    /// The CRD's `scope: Namespaced` (false: cluster-scoped).
    pub namespaced: bool,
    /// `all`, `knative`, `serving`: the CRD's `names.categories` (`kubectl get all`).
    pub categories: &'static [&'static str],
    /// The CRD's `additionalPrinterColumns` (`kubectl get` columns after `NAME`).
    pub printer_columns: &'static [PrinterColumn],
}

/// One `additionalPrinterColumns` entry of a CRD
/// (`apiextensions.k8s.io/v1` `CustomResourceColumnDefinition`).
#[derive(Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: &'static str,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    /// 0: shown by `kubectl get`; higher: only with `-o wide`.
    pub priority: i32,
    /// A kubectl JSONPath without the surrounding braces.
    pub json_path: &'static str,
}

impl PrinterColumn {
    const fn string(name: &'static str, json_path: &'static str) -> Self {
        PrinterColumn {
            name,
            type_: "string",
            format: "",
            description: "",
            priority: 0,
            json_path,
        }
    }

    const fn integer(name: &'static str, json_path: &'static str) -> Self {
        PrinterColumn {
            type_: "integer",
            ..Self::string(name, json_path)
        }
    }
}

// The facts below (short names in the CRD's order, categories, printer columns) are those of
// knative/serving `config/core/300-resources/{service,configuration,revision,route,
// podautoscaler}.yaml`, so discovery and Tables answer exactly as on a cluster.

const READY: PrinterColumn =
    PrinterColumn::string("Ready", ".status.conditions[?(@.type=='Ready')].status");
const REASON: PrinterColumn =
    PrinterColumn::string("Reason", ".status.conditions[?(@.type=='Ready')].reason");
const LATEST_CREATED: PrinterColumn =
    PrinterColumn::string("LatestCreated", ".status.latestCreatedRevisionName");
const LATEST_READY: PrinterColumn =
    PrinterColumn::string("LatestReady", ".status.latestReadyRevisionName");
const URL: PrinterColumn = PrinterColumn::string("URL", ".status.url");
const SERVING_CATEGORIES: &[&str] = &["all", "knative", "serving"];

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
    short_names: &["kservice", "ksvc"],
    group: "serving.knative.dev",
    version: "v1",
    namespaced: true,
    categories: SERVING_CATEGORIES,
    printer_columns: &[URL, LATEST_CREATED, LATEST_READY, READY, REASON],
};
pub const CONFIGURATION: ResourceKind = ResourceKind {
    kind: "Configuration",
    plural: "configurations",
    singular: "configuration",
    short_names: &["config", "cfg"],
    group: "serving.knative.dev",
    version: "v1",
    namespaced: true,
    categories: SERVING_CATEGORIES,
    printer_columns: &[LATEST_CREATED, LATEST_READY, READY, REASON],
};
pub const REVISION: ResourceKind = ResourceKind {
    kind: "Revision",
    plural: "revisions",
    singular: "revision",
    short_names: &["rev"],
    group: "serving.knative.dev",
    version: "v1",
    namespaced: true,
    categories: SERVING_CATEGORIES,
    printer_columns: &[
        PrinterColumn::string(
            "Config Name",
            r".metadata.labels['serving\.knative\.dev/configuration']",
        ),
        // A string column in Knative's CRD too: the label holds an int in string form.
        PrinterColumn::string(
            "Generation",
            r".metadata.labels['serving\.knative\.dev/configurationGeneration']",
        ),
        READY,
        REASON,
        PrinterColumn::integer("Actual Replicas", ".status.actualReplicas"),
        PrinterColumn::integer("Desired Replicas", ".status.desiredReplicas"),
    ],
};
pub const ROUTE: ResourceKind = ResourceKind {
    kind: "Route",
    plural: "routes",
    singular: "route",
    short_names: &["rt"],
    group: "serving.knative.dev",
    version: "v1",
    namespaced: true,
    categories: SERVING_CATEGORIES,
    printer_columns: &[URL, READY, REASON],
};
pub const POD_AUTOSCALER: ResourceKind = ResourceKind {
    kind: "PodAutoscaler",
    plural: "podautoscalers",
    singular: "podautoscaler",
    short_names: &["kpa", "pa"],
    group: "autoscaling.internal.knative.dev",
    version: "v1alpha1",
    namespaced: true,
    categories: &["knative-internal", "autoscaling"],
    printer_columns: &[
        PrinterColumn::integer("DesiredScale", ".status.desiredScale"),
        PrinterColumn::integer("ActualScale", ".status.actualScale"),
        READY,
        REASON,
    ],
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
