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
///
/// Kinds are compared on every store event (which reconcilers take this kind), so the
/// identity is compared first and the facts of two equal kinds — the same `const`, whose
/// strings and tables are the same statics — by address before content: comparing every
/// description byte by byte was a tenth of wisp's CPU at a restart with 10 000 services.
impl PartialEq for ResourceKind {
    fn eq(&self, o: &Self) -> bool {
        fn same<T: ?Sized + PartialEq>(a: &T, b: &T) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        if std::ptr::eq(self, o) {
            return true;
        }
        same(self.group, o.group)
            && same(self.version, o.version)
            && same(self.kind, o.kind)
            && same(self.plural, o.plural)
            && same(self.singular, o.singular)
            && same(self.short_names, o.short_names)
            && self.namespaced == o.namespaced
            && same(self.categories, o.categories)
            && same(self.printer_columns, o.printer_columns)
            && self.status_subresource == o.status_subresource
            && same(self.description, o.description)
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
    /// An integer field that Go's printers read from a struct, so absent is 0 (a JSON
    /// pointer: `/status/availableReplicas`).
    IntOrZero(&'static str),
    /// A string field printed as `<none>` when absent or empty (a JSON pointer).
    OrNone(&'static str),
    /// `printPod`: `READY` (`ready/total` containers).
    PodReady,
    /// `printPod`: `STATUS`, the reason the pod's containers give (`Running`,
    /// `CrashLoopBackOff`, `OOMKilled`, `Terminating`, …).
    PodStatus,
    /// `printPod`: `RESTARTS`, with the time since the last one (`3 (5m ago)`).
    PodRestarts,
    /// `printPod`: `IP`, the first of `status.podIPs` (`<none>`).
    PodIp,
    /// `printPod`: `READINESS GATES` (`<none>` without gates).
    PodReadinessGates,
    /// `printDeployment`: `READY` (`readyReplicas/spec.replicas`).
    DeploymentReady,
    /// `CONTAINERS` of a workload: the template's container names, comma-separated.
    Containers,
    /// `IMAGES` of a workload: the template's images, comma-separated.
    Images,
    /// `SELECTOR` of a workload (`spec.selector` as a label selector string).
    WorkloadSelector,
    /// `printService`: `CLUSTER-IP` (`<none>` when unset).
    ServiceClusterIp,
    /// `printService`: `EXTERNAL-IP` (`<none>`, the load balancer's addresses, or the
    /// ExternalName).
    ServiceExternalIp,
    /// `printService`: `PORT(S)` (`80/TCP,443:31443/TCP`).
    ServicePorts,
    /// `printService`: `SELECTOR` (`<none>` without one).
    ServiceSelector,
    /// `printEvent`: `LAST SEEN` (series, lastTimestamp or eventTime, as an age).
    EventLastSeen,
    /// `printEvent`: `FIRST SEEN`.
    EventFirstSeen,
    /// `printEvent`: `OBJECT` (`kind/name`, the kind lower-cased).
    EventObject,
    /// `printEvent`: `SOURCE` (`component, host`).
    EventSource,
    /// `printEvent`: `COUNT` (the series' count, else `count`).
    EventCount,
    /// The object's name, in a column of its own place (Events print it last).
    Name,
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

    /// A string column of kube's core printers read from one field.
    const fn field(name: &'static str, description: &'static str, json_path: &'static str) -> Self {
        PrinterColumn {
            description,
            ..Self::string(name, json_path)
        }
    }

    /// A column of kube's core printers: a string cell that `computed` makes.
    const fn printed(name: &'static str, description: &'static str, computed: Computed) -> Self {
        PrinterColumn {
            name,
            type_: "string",
            format: "",
            description,
            priority: 0,
            json_path: "",
            computed: Some(computed),
        }
    }

    /// The same column, shown only by `kubectl get -o wide`.
    const fn wide(self) -> Self {
        PrinterColumn {
            priority: 1,
            ..self
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
    /// for a core kind and `io.k8s.api.apps.v1.Deployment` for one of kube's built-in groups
    /// (the Go package the type lives in).
    pub fn openapi_name(&self) -> String {
        if self.is_core() {
            format!("io.k8s.api.core.{}.{}", self.version, self.kind)
        } else if let Some(package) = builtin_package(self.group) {
            format!("io.k8s.api.{package}.{}.{}", self.version, self.kind)
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

    /// Whether wisp shows the kind as a read-only view of what runs (held in memory,
    /// [`VIEWS`]) rather than storing its objects.
    pub fn is_view(&self) -> bool {
        VIEWS
            .iter()
            .any(|k| k.group == self.group && k.plural == self.plural)
    }

    /// The verbs the kind serves, as discovery lists them: every verb for a stored kind
    /// (Namespaces have no deletecollection, in kube-apiserver as here); for a view, reads,
    /// plus `delete` of a Pod (which stops that replica; its revision replaces it).
    pub fn verbs(&self) -> &'static [&'static str] {
        const ALL_VERBS: &[&str] = &[
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch",
        ];
        const NAMESPACE_VERBS: &[&str] = &[
            "delete", "get", "list", "patch", "create", "update", "watch",
        ];
        const READ: &[&str] = &["get", "list", "watch"];
        const POD_VERBS: &[&str] = &["delete", "get", "list", "watch"];
        if self.is_view() {
            if self.is_core() && self.plural == "pods" {
                POD_VERBS
            } else {
                READ
            }
        } else if self.is_core() && self.plural == "namespaces" {
            NAMESPACE_VERBS
        } else {
            ALL_VERBS
        }
    }

    /// The fields a `fieldSelector` may name for the kind, besides `metadata.name` and
    /// `metadata.namespace` (every kind's): kube's `GetAttrs`/`ToSelectableFields` of
    /// `pkg/registry/core/{pod,event,service}/strategy.go` and `pkg/registry/apps/deployment`
    /// (none beyond the metadata ones).
    pub fn field_labels(&self) -> &'static [&'static str] {
        match (self.group, self.plural) {
            ("", "pods") => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            ("", "events") | ("events.k8s.io", "events") => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("", "secrets") => &["type"],
            _ => &[],
        }
    }

    /// Subresources besides `status`, as discovery lists them: (name, the kind it answers
    /// as — group, version, kind —, verbs). `pods/log` streams a replica's output;
    /// `deployments/scale` answers as an `autoscaling/v1` Scale, so that `kubectl scale`
    /// finds it and gets wisp's refusal (the autoscaler owns the replica count).
    pub fn subresources(&self) -> &'static [Subresource] {
        match (self.group, self.plural) {
            ("", "pods") => &[Subresource {
                name: "log",
                group: "",
                version: "v1",
                kind: "Pod",
                verbs: &["get"],
            }],
            ("apps", "deployments") => &[Subresource {
                name: "scale",
                group: "autoscaling",
                version: "v1",
                kind: "Scale",
                verbs: &["get", "patch", "update"],
            }],
            _ => &[],
        }
    }
}

/// A subresource of a kind other than `status` ([`ResourceKind::subresources`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Subresource {
    pub name: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// The Go package of one of kube's built-in API groups (`apps`, `events.k8s.io`), which
/// names its types in OpenAPI; None for any other group (a CRD's).
fn builtin_package(group: &str) -> Option<&'static str> {
    match group {
        "apps" => Some("apps"),
        "events.k8s.io" => Some("events"),
        "autoscaling" => Some("autoscaling"),
        _ => None,
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

/// knative/serving `config/core/300-resources/domain-mapping.yaml`.
pub const DOMAIN_MAPPING: ResourceKind = ResourceKind {
    kind: "DomainMapping",
    plural: "domainmappings",
    singular: "domainmapping",
    short_names: &["dm"],
    group: "serving.knative.dev",
    version: "v1beta1",
    namespaced: true,
    categories: SERVING_CATEGORIES,
    printer_columns: &[URL, READY, REASON],
    status_subresource: true,
    description: "DomainMapping is a mapping from a custom hostname to an Addressable.",
    schema: crate::schema::of::<crate::domainmapping::DomainMapping>,
};
/// knative/networking `config/domain-claim.yaml` (cluster-scoped; the
/// claim on a domain that a DomainMapping in `spec.namespace` may then use).
pub const CLUSTER_DOMAIN_CLAIM: ResourceKind = ResourceKind {
    kind: "ClusterDomainClaim",
    plural: "clusterdomainclaims",
    singular: "clusterdomainclaim",
    short_names: &["cdc"],
    group: "networking.internal.knative.dev",
    version: "v1alpha1",
    namespaced: false,
    categories: &["knative-internal", "networking"],
    printer_columns: &[],
    status_subresource: true,
    description: "ClusterDomainClaim is a cluster-wide reservation for a particular domain name.",
    schema: crate::schema::of::<crate::domainmapping::ClusterDomainClaim>,
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

// The views (`VIEWS`): what wisp runs, shown as the objects Knative's controllers and the
// kubelet would make on a cluster. Core and apps kinds: names as kube-apiserver's discovery
// lists them, columns as kube's printers (`pkg/printers/internalversion/printers.go`) print
// them; Knative's networking kinds: knative/networking `config/serverlessservice.yaml` and
// `config/ingress.yaml`.

/// A view's schema: wisp does not publish a field-by-field schema for objects it only
/// shows (their fields are Kubernetes' own; see docs/differences.md), so clients keep
/// every field.
fn view_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

pub const POD: ResourceKind = ResourceKind {
    kind: "Pod",
    plural: "pods",
    singular: "pod",
    short_names: &["po"],
    group: "",
    version: "v1",
    namespaced: true,
    categories: &["all"],
    printer_columns: &[
        PrinterColumn::printed(
            "Ready",
            "The aggregate readiness state of this pod for accepting traffic.",
            Computed::PodReady,
        ),
        PrinterColumn::printed(
            "Status",
            "The aggregate status of the containers in this pod.",
            Computed::PodStatus,
        ),
        PrinterColumn::printed(
            "Restarts",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            Computed::PodRestarts,
        ),
        CORE_AGE,
        PrinterColumn::printed(
            "IP",
            "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            Computed::PodIp,
        )
        .wide(),
        PrinterColumn::printed(
            "Node",
            "NodeName indicates in which node this pod is scheduled.",
            Computed::OrNone("/spec/nodeName"),
        )
        .wide(),
        PrinterColumn::printed(
            "Nominated Node",
            "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            Computed::OrNone("/status/nominatedNodeName"),
        )
        .wide(),
        PrinterColumn::printed(
            "Readiness Gates",
            "If specified, all readiness gates will be evaluated for pod readiness.",
            Computed::PodReadinessGates,
        )
        .wide(),
    ],
    status_subresource: false,
    description: "Pod is one replica of a revision as it runs in wisp: its containers, their state, restarts and exit reasons. A read-only view: deleting one stops that replica and its revision starts another.",
    schema: view_schema,
};
pub const DEPLOYMENT: ResourceKind = ResourceKind {
    kind: "Deployment",
    plural: "deployments",
    singular: "deployment",
    short_names: &["deploy"],
    group: "apps",
    version: "v1",
    namespaced: true,
    categories: &["all"],
    printer_columns: &[
        PrinterColumn::printed(
            "Ready",
            "Number of the pod with ready state",
            Computed::DeploymentReady,
        ),
        PrinterColumn {
            type_: "integer",
            ..PrinterColumn::printed(
                "Up-to-date",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                Computed::IntOrZero("/status/updatedReplicas"),
            )
        },
        PrinterColumn {
            type_: "integer",
            ..PrinterColumn::printed(
                "Available",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                Computed::IntOrZero("/status/availableReplicas"),
            )
        },
        CORE_AGE,
        PrinterColumn::printed(
            "Containers",
            "Names of each container in the template.",
            Computed::Containers,
        )
        .wide(),
        PrinterColumn::printed(
            "Images",
            "Images referenced by each container in the template.",
            Computed::Images,
        )
        .wide(),
        PrinterColumn::printed(
            "Selector",
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels.",
            Computed::WorkloadSelector,
        )
        .wide(),
    ],
    status_subresource: false,
    description: "Deployment is a revision's replica set as a cluster would show it: spec.replicas is what the autoscaler wants, status counts the replicas that run. A read-only view.",
    schema: view_schema,
};
/// core/v1 Service (the ingress, each route's placeholder, each revision's public and
/// private Service); `SERVICE` is Knative's.
pub const CORE_SERVICE: ResourceKind = ResourceKind {
    kind: "Service",
    plural: "services",
    singular: "service",
    short_names: &["svc"],
    group: "",
    version: "v1",
    namespaced: true,
    categories: &["all"],
    printer_columns: &[
        PrinterColumn::field(
            "Type",
            "type determines how the Service is exposed.",
            ".spec.type",
        ),
        PrinterColumn::printed(
            "Cluster-IP",
            "clusterIP is the IP address of the service and is usually assigned randomly.",
            Computed::ServiceClusterIp,
        ),
        PrinterColumn::printed(
            "External-IP",
            "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            Computed::ServiceExternalIp,
        ),
        PrinterColumn::printed(
            "Port(s)",
            "The list of ports that are exposed by this service.",
            Computed::ServicePorts,
        ),
        CORE_AGE,
        PrinterColumn::printed(
            "Selector",
            "Route service traffic to pods with label keys and values matching this selector.",
            Computed::ServiceSelector,
        )
        .wide(),
    ],
    status_subresource: false,
    description: "Service names where requests for an ingress, a route or a revision go, as Knative's controllers create them on a cluster. A read-only view.",
    schema: view_schema,
};
const EVENT_COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::printed(
        "Last Seen",
        "The time at which the most recent occurrence of this event was recorded.",
        Computed::EventLastSeen,
    ),
    PrinterColumn::field("Type", "Type of this event (Normal, Warning), new types could be added in the future", ".type"),
    PrinterColumn::field("Reason", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", ".reason"),
    PrinterColumn::printed(
        "Object",
        "The object that this event is about.",
        Computed::EventObject,
    ),
    PrinterColumn::field("Subobject", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.", ".involvedObject.fieldPath").wide(),
    PrinterColumn::printed(
        "Source",
        "The component reporting this event.",
        Computed::EventSource,
    )
    .wide(),
    PrinterColumn::field("Message", "A human-readable description of the status of this operation.", ".message"),
    PrinterColumn::printed(
        "First Seen",
        "The time at which the event was first recorded.",
        Computed::EventFirstSeen,
    )
    .wide(),
    PrinterColumn::printed(
        "Count",
        "The number of times this event has occurred.",
        Computed::EventCount,
    )
    .wide(),
    PrinterColumn {
        format: "name",
        ..PrinterColumn::printed(
            "Name",
            "Name must be unique within a namespace.",
            Computed::Name,
        )
        .wide()
    },
];
pub const EVENT: ResourceKind = ResourceKind {
    kind: "Event",
    plural: "events",
    singular: "event",
    short_names: &["ev"],
    group: "",
    version: "v1",
    namespaced: true,
    categories: &[],
    printer_columns: EVENT_COLUMNS,
    status_subresource: false,
    description: "Event is a report of something that happened to an object, recorded by wisp's controllers where Knative's and the kubelet record theirs. Kept in memory for an hour.",
    schema: view_schema,
};
/// The same events in `events.k8s.io/v1`'s shape (`regarding`, `note`, `series`).
pub const EVENT_V1: ResourceKind = ResourceKind {
    group: "events.k8s.io",
    short_names: &[],
    ..EVENT
};
pub const SERVERLESS_SERVICE: ResourceKind = ResourceKind {
    kind: "ServerlessService",
    plural: "serverlessservices",
    singular: "serverlessservice",
    short_names: &["sks"],
    group: "networking.internal.knative.dev",
    version: "v1alpha1",
    namespaced: true,
    categories: &["knative-internal", "networking"],
    printer_columns: &[
        PrinterColumn::string("Mode", ".spec.mode"),
        PrinterColumn::integer("Activators", ".spec.numActivators"),
        PrinterColumn::string("ServiceName", ".status.serviceName"),
        PrinterColumn::string("PrivateServiceName", ".status.privateServiceName"),
        READY,
        REASON,
    ],
    status_subresource: false,
    description: "ServerlessService is a proxy for the K8s service objects containing the endpoints for the revision, whether those are endpoints of the activator or revision pods. In wisp, a read-only view of whether the activator is in a revision's path (mode Proxy) or not (Serve).",
    schema: view_schema,
};
pub const INGRESS: ResourceKind = ResourceKind {
    kind: "Ingress",
    plural: "ingresses",
    singular: "ingress",
    short_names: &["kingress", "king"],
    group: "networking.internal.knative.dev",
    version: "v1alpha1",
    namespaced: true,
    categories: &["knative-internal", "networking"],
    printer_columns: &[READY, REASON],
    status_subresource: false,
    description: "Ingress is a collection of rules that allow inbound connections to reach the endpoints defined by a backend. In wisp, a read-only view of the hosts, splits and tags wisp's ingress routes a Route's requests by.",
    schema: view_schema,
};

/// The views: kinds wisp shows from what runs, held in memory and never stored.
pub const VIEWS: [&ResourceKind; 7] = [
    &POD,
    &DEPLOYMENT,
    &CORE_SERVICE,
    &EVENT,
    &EVENT_V1,
    &SERVERLESS_SERVICE,
    &INGRESS,
];

/// The Knative kinds, in the order `wisp get all` prints them (the namespaced ones: a
/// ClusterDomainClaim belongs to no namespace).
pub const ALL: [&ResourceKind; 7] = [
    &SERVICE,
    &CONFIGURATION,
    &REVISION,
    &ROUTE,
    &POD_AUTOSCALER,
    &DOMAIN_MAPPING,
    &CLUSTER_DOMAIN_CLAIM,
];

/// The core (`/api/v1`) kinds wisp serves.
pub const CORE: [&ResourceKind; 3] = [&NAMESPACE, &SECRET, &CONFIG_MAP];

/// Every served kind: the stored core kinds, the Knative ones, then the views (so that a
/// name two kinds share — `services` — finds Knative's first, as `wisp get` means it).
pub fn served() -> impl Iterator<Item = &'static ResourceKind> {
    CORE.into_iter().chain(ALL).chain(VIEWS)
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
            ("dm", "DomainMapping"),
            ("domainmappings.serving.knative.dev", "DomainMapping"),
            ("cdc", "ClusterDomainClaim"),
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
        assert_eq!(lookup("pods").map(|k| k.kind), Some("Pod"));
        assert_eq!(lookup("svc").map(|k| k.group), Some(""));
        assert_eq!(
            lookup("services").map(|k| k.group),
            Some("serving.knative.dev")
        );
        assert_eq!(lookup("sks").map(|k| k.kind), Some("ServerlessService"));
        assert_eq!(lookup("kingress").map(|k| k.kind), Some("Ingress"));
        assert_eq!(lookup("deploy").map(|k| k.group), Some("apps"));
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
        assert_eq!(DEPLOYMENT.openapi_name(), "io.k8s.api.apps.v1.Deployment");
        assert_eq!(EVENT_V1.openapi_name(), "io.k8s.api.events.v1.Event");
        assert_eq!(
            SERVERLESS_SERVICE.openapi_name(),
            "dev.knative.internal.networking.v1alpha1.ServerlessService"
        );
        assert_eq!(POD.store_key(), "pods");
        assert_eq!(DEPLOYMENT.store_key(), "deployments.apps");
    }

    #[test]
    fn views_and_their_verbs() {
        for k in VIEWS {
            assert!(k.is_view(), "{}", k.kind);
        }
        for k in CORE.into_iter().chain(ALL) {
            assert!(!k.is_view(), "{}", k.kind);
        }
        assert_eq!(POD.verbs(), ["delete", "get", "list", "watch"]);
        assert_eq!(DEPLOYMENT.verbs(), ["get", "list", "watch"]);
        assert!(!NAMESPACE.verbs().contains(&"deletecollection"));
        assert!(SECRET.verbs().contains(&"deletecollection"));
    }
}
