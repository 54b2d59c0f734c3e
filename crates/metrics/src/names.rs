//! Every metric name and label wisp exports, in one place. Names are Knative's
//! OpenTelemetry instrument names translated the way OpenTelemetry's Prometheus exporter
//! translates them: dots become underscores, the unit becomes a suffix (`s` → `_seconds`,
//! `{request}/s` → `_per_second`; annotations in braces such as `{pod}` add nothing) and
//! counters end in `_total` (prometheus-client appends `_total` and the unit itself, so the
//! names here stop before them). Names that start with `wisp_` have no Knative
//! counterpart (docs/differences.md).

// --- Labels: Knative's revision attributes.
pub const LABEL_NAMESPACE: &str = "k8s_namespace_name";
pub const LABEL_SERVICE: &str = "kn_service_name";
pub const LABEL_CONFIGURATION: &str = "kn_configuration_name";
pub const LABEL_REVISION: &str = "kn_revision_name";
/// The status code's class (`2xx`, …) on the request histogram.
pub const LABEL_CLASS: &str = "response_code_class";
/// A work queue's name (Knative: the reconciler's queue name).
pub const LABEL_QUEUE: &str = "name";

// --- Autoscaler (`pkg/autoscaler/scaling/metrics.go`, `pkg/reconciler/autoscaling/kpa/metrics.go`).
pub const PODS_DESIRED: &str = "kn_revision_pods_desired";
pub const PODS_REQUESTED: &str = "kn_revision_pods_requested";
pub const PODS_COUNT: &str = "kn_revision_pods_count";
pub const PODS_NOT_READY: &str = "kn_revision_pods_not_ready_count";
pub const PODS_PENDING: &str = "kn_revision_pods_pending_count";
pub const PODS_TERMINATING: &str = "kn_revision_pods_terminating_count";
pub const CAPACITY_EXCESS: &str = "kn_revision_capacity_excess";
pub const CONCURRENCY_STABLE: &str = "kn_revision_concurrency_stable";
pub const CONCURRENCY_PANIC: &str = "kn_revision_concurrency_panic";
pub const CONCURRENCY_TARGET: &str = "kn_revision_concurrency_target";
/// `kn.revision.rps.*`, unit `{request}/s` (prometheus-client adds no `_per_second`
/// suffix of its own, so it is part of the name).
pub const RPS_STABLE: &str = "kn_revision_rps_stable_per_second";
pub const RPS_PANIC: &str = "kn_revision_rps_panic_per_second";
pub const RPS_TARGET: &str = "kn_revision_rps_target_per_second";
/// `kn.revision.panic.mode`: in Knative's source, not in its metrics page.
pub const PANIC_MODE: &str = "kn_revision_panic_mode";

// --- Data plane (activator and queue-proxy).
/// `http.server.request.duration` with the revision's attributes (Knative's activator and
/// queue-proxy both export it through otelhttp); `_count` is the request count.
pub const REQUEST_DURATION: &str = "http_server_request_duration";
/// `kn.revision.request.concurrency`: the activator's average concurrency per report.
pub const REQUEST_CONCURRENCY: &str = "kn_revision_request_concurrency";
/// `kn.serving.queue.depth`: requests waiting in the replicas' queue-proxy breakers.
pub const QUEUE_DEPTH: &str = "kn_serving_queue_depth";
/// Requests the activator holds right now (for a replica, or for capacity).
pub const ACTIVATOR_HELD: &str = "wisp_activator_held_requests";

// --- Control plane.
pub const WORKQUEUE_DEPTH: &str = "kn_workqueue_depth";
pub const WORKQUEUE_ADDS: &str = "kn_workqueue_adds";
pub const WORKQUEUE_RETRIES: &str = "kn_workqueue_retries";
pub const WORKQUEUE_PROCESS_DURATION: &str = "kn_workqueue_process_duration";
pub const RECONCILE_ERRORS: &str = "wisp_reconcile_errors";
/// CPU time of each reconciler's reconciles (`_seconds_total`).
pub const RECONCILE_CPU: &str = "wisp_reconcile_cpu";
/// CPU time of the autoscaler's stats path (`_seconds_total`).
pub const AUTOSCALER_STATS_CPU: &str = "wisp_autoscaler_stats_cpu";
pub const STORE_WRITE_DURATION: &str = "wisp_store_write_duration";
/// kube-apiserver's `apiserver_request_total` / `apiserver_request_duration_seconds`:
/// wisp's API is a Kubernetes API server.
pub const API_REQUESTS: &str = "apiserver_request";
pub const API_REQUEST_DURATION: &str = "apiserver_request_duration";
