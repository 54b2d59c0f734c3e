//! The label keys Knative's controllers set on the objects they create (Knative's
//! `pkg/apis/serving/register.go`) and the visibility label of `knative.dev/networking`:
//! defined once, for the controllers that write them, the configuration and validation
//! that read them, and the client that selects by them.

pub const SERVICE: &str = "serving.knative.dev/service";
pub const SERVICE_UID: &str = "serving.knative.dev/serviceUID";
pub const CONFIGURATION: &str = "serving.knative.dev/configuration";
pub const CONFIGURATION_UID: &str = "serving.knative.dev/configurationUID";
pub const CONFIGURATION_GENERATION: &str = "serving.knative.dev/configurationGeneration";
pub const REVISION: &str = "serving.knative.dev/revision";
pub const REVISION_UID: &str = "serving.knative.dev/revisionUID";
pub const ROUTE: &str = "serving.knative.dev/route";
pub const ROUTE_NAMESPACE: &str = "serving.knative.dev/routeNamespace";
/// `pending` / `active` / `reserve`.
pub const ROUTING_STATE: &str = "serving.knative.dev/routingState";
/// `cluster-local` makes a route reachable only on the cluster-local listener.
pub const VISIBILITY: &str = "networking.knative.dev/visibility";
