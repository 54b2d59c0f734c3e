//! The resource kinds wisp serves: names, plurals, short names and API groups, so that the
//! API server, the store and the CLI agree on how a kind is spelled.

/// One served resource kind.
#[derive(Debug)]
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
    /// The CRD's `additionalPrinterColumns` (`kubectl get` columns after `NAME`); for the
    /// core kinds, the columns of kube's printers (`pkg/printers/internalversion/printers.go`).
    pub printer_columns: &'static [PrinterColumn],
    /// Whether the kind has a `status` subresource (every Knative kind and Namespace do;
    /// Secret and ConfigMap have no status).
    pub status_subresource: bool,
    /// What `kubectl explain` prints for the kind (its OpenAPI schema's description).
    pub description: &'static str,
    /// The kind's OpenAPI v3 schema, derived from its Rust type ([`crate::schema`]).
    pub schema: fn() -> serde_json::Value,
}

/// Two kinds are equal when their facts are; the schema function is left out (function
/// pointers have no meaningful equality, and a kind's schema follows from its type).
impl PartialEq for ResourceKind {
    fn eq(&self, o: &Self) -> bool {
        (
            self.kind,
            self.plural,
            self.singular,
            self.short_names,
            self.group,
            self.version,
            self.namespaced,
            self.categories,
            self.printer_columns,
            self.status_subresource,
            self.description,
        ) == (
            o.kind,
            o.plural,
            o.singular,
            o.short_names,
            o.group,
            o.version,
            o.namespaced,
            o.categories,
            o.printer_columns,
            o.status_subresource,
            o.description,
        )
    }
}

impl Eq for ResourceKind {}

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
    /// A cell kube's printers compute instead of reading one path (core kinds only).
    pub computed: Option<Computed>,
}

/// Cells of kube's core printers that no single JSONPath yields.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Computed {
    /// The number of keys in these top-level maps together (`DATA` of ConfigMaps:
    /// `len(data)+len(binaryData)`; of Secrets: `len(data)`).
    KeyCount(&'static [&'static str]),
    /// `metadata.creationTimestamp` as an age (`translateTimestampSince`), in a string column.
    Age,
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
            computed: None,
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
    /// `group/version`; just `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.is_core() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The core (legacy, `""`) group, served under `/api/v1` rather than `/apis/...`.
    pub fn is_core(&self) -> bool {
        self.group.is_empty()
    }

    /// `/apis/{group}/{version}`, or `/api/v1` for the core group: where the kind's paths
    /// start.
    pub fn api_prefix(&self) -> String {
        if self.is_core() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// `service.serving.knative.dev` (`configmap` for a core kind), as kubectl prints it.
    pub fn qualified(&self) -> String {
        if self.is_core() {
            self.singular.to_string()
        } else {
            format!("{}.{}", self.singular, self.group)
        }
    }

    /// The name of the kind's schema in kube-apiserver's OpenAPI documents: the group's DNS
    /// labels reversed for a CRD (`dev.knative.serving.v1.Service`, as apiextensions-apiserver
    /// names it in `pkg/controller/openapi/builder/builder.go`), `io.k8s.api.core.v1.Secret`
    /// for a core kind.
    pub fn openapi_name(&self) -> String {
        if self.is_core() {
            format!("io.k8s.api.core.{}.{}", self.version, self.kind)
        } else {
            let group: Vec<&str> = self.group.rsplit('.').collect();
            format!("{}.{}.{}", group.join("."), self.version, self.kind)
        }
    }

    /// `services.serving.knative.dev` (`configmaps` for a core kind): the group-qualified
    /// plural, the resource string the store files objects under and Kubernetes names a kind
    /// by in its error messages.
    pub fn store_key(&self) -> String {
        if self.is_core() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
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
    status_subresource: true,
    description: "Service acts as a top-level container that manages a Route and Configuration which implement a network service. The Service stamps out a new Revision for every change of its template and routes traffic to the latest ready Revision, or to the Revisions its traffic block names.",
    schema: crate::schema::of::<crate::serving::Service>,
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
    status_subresource: true,
    description: "Configuration represents the \"floating HEAD\" of a linear history of Revisions. Users create new Revisions by updating the spec of the Configuration; the latest created and latest ready Revisions are reported in its status.",
    schema: crate::schema::of::<crate::serving::Configuration>,
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
    status_subresource: true,
    description: "Revision is an immutable snapshot of code and configuration, stamped out by a Configuration. A Revision is scaled with its traffic, down to zero when it receives none.",
    schema: crate::schema::of::<crate::serving::Revision>,
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
    status_subresource: true,
    description: "Route is responsible for configuring ingress over a collection of Revisions: it names the network endpoint and splits traffic between Revisions, directly or through the latest ready Revision of a Configuration.",
    schema: crate::schema::of::<crate::serving::Route>,
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
    status_subresource: true,
    description: "PodAutoscaler is a Knative abstraction that encapsulates the interface by which Knative components instantiate autoscalers: it holds the autoscaling target of one Revision and reports the scale the autoscaler decided.",
    schema: crate::schema::of::<crate::autoscaling::PodAutoscaler>,
};

// The core kinds: names and short names as kube-apiserver's discovery lists them
// (`pkg/registry/core/{namespace,secret,configmap}/storage/storage.go`), columns as kube's
// printers print them (`pkg/printers/internalversion/printers.go`). None is in a category:
// `kubectl get all` does not list them.

/// kube's `Age` column of the core printers: a string cell with the object's age.
const CORE_AGE: PrinterColumn = PrinterColumn {
    name: "Age",
    type_: "string",
    format: "",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
    priority: 0,
    json_path: ".metadata.creationTimestamp",
    computed: Some(Computed::Age),
};

pub const NAMESPACE: ResourceKind = ResourceKind {
    kind: "Namespace",
    plural: "namespaces",
    singular: "namespace",
    short_names: &["ns"],
    group: "",
    version: "v1",
    namespaced: false,
    categories: &[],
    printer_columns: &[
        PrinterColumn {
            description: "The status of the namespace",
            ..PrinterColumn::string("Status", ".status.phase")
        },
        CORE_AGE,
    ],
    status_subresource: true,
    description: "Namespace provides a scope for Names. Deleting a namespace deletes everything in it.",
    schema: crate::schema::of::<crate::core::Namespace>,
};
pub const SECRET: ResourceKind = ResourceKind {
    kind: "Secret",
    plural: "secrets",
    singular: "secret",
    short_names: &[],
    group: "",
    version: "v1",
    namespaced: true,
    categories: &[],
    printer_columns: &[
        PrinterColumn {
            description: "Used to facilitate programmatic handling of secret data.",
            ..PrinterColumn::string("Type", ".type")
        },
        PrinterColumn {
            description: "Data contains the secret data.",
            computed: Some(Computed::KeyCount(&["data"])),
            ..PrinterColumn::string("Data", ".data")
        },
        CORE_AGE,
    ],
    status_subresource: false,
    description: "Secret holds secret data of a certain type. The total bytes of the values in the Data field must be less than MaxSecretSize bytes.",
    schema: crate::schema::of::<crate::core::Secret>,
};
pub const CONFIG_MAP: ResourceKind = ResourceKind {
    kind: "ConfigMap",
    plural: "configmaps",
    singular: "configmap",
    short_names: &["cm"],
    group: "",
    version: "v1",
    namespaced: true,
    categories: &[],
    printer_columns: &[
        PrinterColumn {
            description: "Data contains the configuration data.",
            computed: Some(Computed::KeyCount(&["data", "binaryData"])),
            ..PrinterColumn::string("Data", ".data")
        },
        CORE_AGE,
    ],
    status_subresource: false,
    description: "ConfigMap holds configuration data for pods to consume.",
    schema: crate::schema::of::<crate::core::ConfigMap>,
};

/// The Knative kinds, in the order `wisp get all` prints them.
pub const ALL: [&ResourceKind; 5] = [&SERVICE, &CONFIGURATION, &REVISION, &ROUTE, &POD_AUTOSCALER];

/// The core (`/api/v1`) kinds wisp serves.
pub const CORE: [&ResourceKind; 3] = [&NAMESPACE, &SECRET, &CONFIG_MAP];

/// Every served kind: the core kinds, then the Knative ones.
pub fn served() -> impl Iterator<Item = &'static ResourceKind> {
    CORE.into_iter().chain(ALL)
}

/// Finds a kind by any name a user may type: plural, singular, short name, Kind, or the
/// group-qualified forms (`services.serving.knative.dev`), case-insensitively.
pub fn lookup(name: &str) -> Option<&'static ResourceKind> {
    let lower = name.to_ascii_lowercase();
    served().find(|k| {
        let (base, group) = match lower.split_once('.') {
            Some((b, g)) => (b, Some(g)),
            None => (lower.as_str(), None),
        };
        // A core kind has no group to qualify it with (`configmaps.` is no name).
        if group.is_some_and(|g| g != k.group || k.is_core()) {
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
    served().find(|k| k.group == group && k.plural == plural)
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
        for (name, kind) in [
            ("ns", "Namespace"),
            ("namespaces", "Namespace"),
            ("cm", "ConfigMap"),
            ("configmap", "ConfigMap"),
            ("secrets", "Secret"),
            ("Secret", "Secret"),
        ] {
            assert_eq!(lookup(name).map(|k| k.kind), Some(kind), "{name}");
        }
        assert!(lookup("configmaps.serving.knative.dev").is_none());
        assert_eq!(by_plural("", "secrets").map(|k| k.kind), Some("Secret"));
        assert!(lookup("pods").is_none());
        assert!(lookup("services.apps").is_none());
    }
}

#[cfg(test)]
mod core_tests {
    use super::*;

    #[test]
    fn core_kinds_are_spelled_as_kube_spells_them() {
        assert_eq!(CONFIG_MAP.api_version(), "v1");
        assert_eq!(CONFIG_MAP.store_key(), "configmaps");
        assert_eq!(CONFIG_MAP.api_prefix(), "/api/v1");
        assert_eq!(NAMESPACE.qualified(), "namespace");
        assert_eq!(SERVICE.api_prefix(), "/apis/serving.knative.dev/v1");
        assert_eq!(SERVICE.store_key(), "services.serving.knative.dev");
    }
}
