//! A revision's ServerlessService and its public and private Services, as Knative's KPA
//! and SKS reconcilers make them (`pkg/reconciler/autoscaling/resources/sks.go` `MakeSKS`,
//! `pkg/reconciler/serverlessservice/resources/services.go` `MakePublicService`,
//! `MakePrivateService`), built from what wisp's autoscaler decided: whether the activator
//! is in the revision's path (mode `Proxy`) or not (`Serve`), how many activators Knative
//! would assign, and how many replicas are ready. Pure functions; read-only views.

use serde_json::{Map, Value, json};
use wisp_api::{autoscaling::PodAutoscaler, kinds};

use super::RoutingMode;
use crate::{names::child_name, revision::views::deployment_name};

/// `networking.internal.knative.dev/serverlessservice` and `…/serviceType`.
pub const SKS_LABEL: &str = "networking.internal.knative.dev/serverlessservice";
pub const SERVICE_TYPE_LABEL: &str = "networking.internal.knative.dev/serviceType";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the SKS says of the revision now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SksState {
    pub mode: RoutingMode,
    pub num_activators: i32,
    pub ready_replicas: u32,
}

fn controller_ref(api_version: &str, kind: &str, meta: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn labels_annotations(pa: &PodAutoscaler) -> (Map<String, Value>, Map<String, Value>) {
    let labels = pa
        .metadata
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    let annotations = pa
        .metadata
        .annotations
        .iter()
        .filter(|(k, _)| *k != LAST_APPLIED)
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    (labels, annotations)
}

/// `MakeSKS`, with the status the SKS reconciler would report: `EndpointsPopulated` (and
/// so `Ready`) once a replica is ready, else `NoHealthyBackends`; the activator (in
/// process) is always there.
pub fn make_sks(pa: &PodAutoscaler, state: SksState) -> Value {
    let (labels, annotations) = labels_annotations(pa);
    let name = &pa.metadata.name;
    let mode = match state.mode {
        RoutingMode::Proxy => "Proxy",
        RoutingMode::Serve => "Serve",
    };
    let endpoints = if state.ready_replicas > 0 {
        json!({"type": "EndpointsPopulated", "status": "True"})
    } else {
        json!({"type": "EndpointsPopulated", "status": "False", "reason": "NoHealthyBackends",
               "message": "K8s Service is not ready"})
    };
    let mut ready = endpoints.clone();
    ready["type"] = "Ready".into();
    let protocol = if pa.spec.protocol_type.is_empty() {
        "http1"
    } else {
        pa.spec.protocol_type.as_str()
    };
    json!({
        "apiVersion": kinds::SERVERLESS_SERVICE.api_version(),
        "kind": "ServerlessService",
        "metadata": {
            "name": name,
            "namespace": pa.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_ref(
                &kinds::POD_AUTOSCALER.api_version(),
                "PodAutoscaler",
                &json!({"name": name, "uid": pa.metadata.uid}),
            )],
        },
        "spec": {
            "mode": mode,
            "numActivators": state.num_activators,
            "objectRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                          "name": deployment_name(name)},
            "protocolType": protocol,
        },
        "status": {
            "observedGeneration": 0,
            "serviceName": name,
            "privateServiceName": private_service_name(name),
            "conditions": [
                {"type": "ActivatorEndpointsPopulated", "status": "True"},
                endpoints,
                ready,
            ],
        },
    })
}

/// `<revision>-private`.
pub fn private_service_name(revision: &str) -> String {
    child_name(revision, "-private")
}

/// The revision's public and private Services. wisp runs no queue-proxy, so the ports are
/// the revision's own (`80` → the user port, named `http` or, for h2c, `http2`); the
/// queue-proxy's metrics, admin and TLS ports are not shown, nor is a cluster IP (wisp
/// allocates none: docs/differences.md).
pub fn make_services(pa: &PodAutoscaler, sks: &Value, user_port: i64) -> Vec<Value> {
    let (labels, annotations) = labels_annotations(pa);
    let name = &pa.metadata.name;
    let port_name = match pa.spec.protocol_type.as_str() {
        "h2c" => "http2",
        _ => "http",
    };
    let ports =
        json!([{"name": port_name, "protocol": "TCP", "port": 80, "targetPort": user_port}]);
    let service = |svc_name: String, type_: &str, selector: Option<Value>| {
        let mut labels = labels.clone();
        labels.insert(SKS_LABEL.into(), name.clone().into());
        labels.insert(SERVICE_TYPE_LABEL.into(), type_.into());
        let mut spec = json!({"type": "ClusterIP", "ports": ports, "sessionAffinity": "None"});
        if let Some(s) = selector {
            spec["selector"] = s;
        }
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": svc_name,
                "namespace": pa.metadata.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [controller_ref(
                    &kinds::SERVERLESS_SERVICE.api_version(),
                    "ServerlessService",
                    &sks["metadata"],
                )],
            },
            "spec": spec,
            "status": {"loadBalancer": {}},
        })
    };
    let uid = pa
        .metadata
        .labels
        .get(wisp_api::labels::REVISION_UID)
        .cloned()
        .unwrap_or_default();
    vec![
        service(name.clone(), "Public", None),
        service(
            private_service_name(name),
            "Private",
            Some(json!({wisp_api::labels::REVISION_UID: uid})),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn pa() -> PodAutoscaler {
        let mut rev = testing::revision("default", "hello-00001", "hello", 1);
        rev.metadata.uid = "rev-uid".into();
        let mut pa = super::super::resources::make_pa(&rev);
        pa.metadata.uid = "pa-uid".into();
        pa
    }

    #[test]
    fn sks_prints_as_knatives() {
        let cases = [
            (
                RoutingMode::Proxy,
                0,
                "Proxy",
                "False",
                Some("NoHealthyBackends"),
            ),
            (RoutingMode::Serve, 2, "Serve", "True", None),
        ];
        for (mode, ready, want_mode, want_ready, reason) in cases {
            let s = make_sks(
                &pa(),
                SksState {
                    mode,
                    num_activators: 2,
                    ready_replicas: ready,
                },
            );
            assert_eq!(s["spec"]["mode"], want_mode);
            assert_eq!(s["spec"]["numActivators"], 2);
            assert_eq!(s["status"]["serviceName"], "hello-00001");
            assert_eq!(s["status"]["privateServiceName"], "hello-00001-private");
            assert_eq!(s["status"]["conditions"][2]["type"], "Ready");
            assert_eq!(s["status"]["conditions"][2]["status"], want_ready);
            assert_eq!(s["status"]["conditions"][2]["reason"].as_str(), reason);
            assert_eq!(s["spec"]["objectRef"]["name"], "hello-00001-deployment");
            assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "PodAutoscaler");
        }
    }

    #[test]
    fn public_and_private_services() {
        let p = pa();
        let sks = json!({"metadata": {"name": "hello-00001", "uid": "sks-uid"}});
        let svcs = make_services(&p, &sks, 8080);
        assert_eq!(svcs[0]["metadata"]["name"], "hello-00001");
        assert_eq!(svcs[0]["metadata"]["labels"][SERVICE_TYPE_LABEL], "Public");
        assert!(svcs[0]["spec"].get("selector").is_none());
        assert_eq!(svcs[1]["metadata"]["name"], "hello-00001-private");
        assert_eq!(svcs[1]["metadata"]["labels"][SKS_LABEL], "hello-00001");
        assert_eq!(
            svcs[1]["spec"]["selector"][wisp_api::labels::REVISION_UID],
            "rev-uid"
        );
        assert_eq!(svcs[1]["metadata"]["ownerReferences"][0]["uid"], "sks-uid");
        assert_eq!(svcs[0]["spec"]["ports"][0]["port"], 80);
        assert!(
            svcs[0]["spec"].get("clusterIP").is_none(),
            "no invented cluster IP"
        );
    }
}
