//! A route's KIngress and placeholder Services as Knative's route reconciler makes them
//! (`pkg/reconciler/route/resources/ingress.go` `MakeIngress`,
//! `pkg/reconciler/route/resources/service.go` `MakeK8sPlaceholderService`), built from
//! what the route reconciler publishes for wisp's ingress: the hosts, each host's
//! weighted revisions (the splits) and tags. Pure functions; read-only views.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use wisp_api::{
    annotations::networking::ROLLOUT,
    config::Config,
    kinds, labels,
    routing::{HostRoute, Visibility},
    serving::Route,
};
use wisp_views::ingress;

use super::{resources::Hosts, rollout::Rollout};

/// Knative's headers on the way to a revision (`pkg/network`): which revision and
/// namespace a split sends to, and the tag a tag's rule matched.
const REVISION_HEADER: &str = "Knative-Serving-Revision";
const NAMESPACE_HEADER: &str = "Knative-Serving-Namespace";
const TAG_HEADER: &str = "Knative-Serving-Tag";
const CLASS_ANNOTATION: &str = "networking.knative.dev/ingress.class";

fn route_ref(route: &Route) -> Value {
    json!({
        "apiVersion": kinds::ROUTE.api_version(),
        "kind": "Route",
        "name": route.metadata.name,
        "uid": route.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn splits(targets: &[wisp_api::routing::RevisionTarget]) -> Vec<Value> {
    targets
        .iter()
        .map(|t| {
            json!({
                "serviceName": t.revision,
                "serviceNamespace": t.namespace,
                "servicePort": 80,
                "percent": t.percent,
                "appendHeaders": {REVISION_HEADER: t.revision, NAMESPACE_HEADER: t.namespace},
            })
        })
        .collect()
}

/// The route's KIngress: one rule per tag (the main traffic being the tag-less one) and
/// visibility, each with the hosts wisp's ingress serves it on; the main rule matches the
/// `Knative-Serving-Tag` header first when tag-header routing is on. Ready: wisp's ingress
/// serves a published route at once.
pub fn make_ingress(
    route: &Route,
    entries: &BTreeMap<String, HostRoute>,
    cfg: &Config,
    tag_header_routing: bool,
    ro: &Rollout,
) -> Value {
    // (tag, visibility) → the hosts of that rule, and what they route to.
    type Rules<'a> = BTreeMap<(Option<String>, Visibility), (Vec<String>, &'a HostRoute)>;
    let mut rules: Rules = BTreeMap::new();
    for (host, r) in entries {
        rules
            .entry((r.tag.clone(), r.visibility))
            .or_insert_with(|| (Vec::new(), r))
            .0
            .push(host.clone());
    }
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|((tag, visibility), (mut hosts, r))| {
            hosts.sort();
            let mut paths = Vec::new();
            if tag.is_none() && tag_header_routing {
                for (t, targets) in &r.tag_targets {
                    paths.push(json!({
                        "headers": {TAG_HEADER: {"exact": t}},
                        "splits": splits(targets),
                        "appendHeaders": {TAG_HEADER: t},
                    }));
                }
            }
            let mut main = json!({"splits": splits(&r.targets)});
            if let Some(t) = &tag {
                main["appendHeaders"] = json!({TAG_HEADER: t});
            }
            paths.push(main);
            json!({
                "hosts": hosts,
                "visibility": match visibility {
                    Visibility::External => "ExternalIP",
                    Visibility::ClusterLocal => "ClusterLocal",
                },
                "http": {"paths": paths},
            })
        })
        .collect();
    let mut labels: Map<String, Value> = route
        .metadata
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    labels.insert(labels::ROUTE.into(), route.metadata.name.clone().into());
    labels.insert(
        labels::ROUTE_NAMESPACE.into(),
        route.metadata.namespace.clone().into(),
    );
    let mut annotations: Map<String, Value> = route
        .metadata
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    annotations.insert(
        CLASS_ANNOTATION.into(),
        cfg.network.ingress_class.clone().into(),
    );
    // Where the route reconciler keeps the rollout state between reconciles, as Knative's
    // does (`MakeIngressWithRollout`).
    annotations.insert(ROLLOUT.into(), ro.to_json().into());
    let lb = |svc: &str| json!({"ingress": [{"domainInternal": ingress::domain_internal(svc, &cfg.network.cluster_domain)}]});
    let ready = |t: &str| json!({"type": t, "status": "True"});
    json!({
        "apiVersion": kinds::INGRESS.api_version(),
        "kind": "Ingress",
        "metadata": {
            "name": route.metadata.name,
            "namespace": route.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [route_ref(route)],
        },
        "spec": {"rules": rules, "httpOption": "Enabled"},
        "status": {
            "observedGeneration": 0,
            "conditions": [ready("LoadBalancerReady"), ready("NetworkConfigured"), ready("Ready")],
            "publicLoadBalancer": lb(ingress::EXTERNAL),
            "privateLoadBalancer": lb(ingress::INTERNAL),
        },
    })
}

/// The route's placeholder Services: one named after the route and one per tag (named as
/// the tag's host), each an `ExternalName` to the cluster-local gateway, with the route's
/// labels (but the visibility label) and annotations (`makeK8sService`).
pub fn make_services(route: &Route, hosts: &Hosts, cfg: &Config) -> Vec<Value> {
    let mut labels: Map<String, Value> = route
        .metadata
        .labels
        .iter()
        .filter(|(k, _)| *k != labels::VISIBILITY)
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    labels.insert(labels::ROUTE.into(), route.metadata.name.clone().into());
    let annotations: Map<String, Value> = route
        .metadata
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    hosts
        .local
        .values()
        .filter_map(|names| names.first())
        .filter_map(|host| host.split('.').next())
        .map(|name| {
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": route.metadata.namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [route_ref(route)],
                },
                "spec": {
                    "type": "ExternalName",
                    "externalName": ingress::domain_internal(ingress::INTERNAL, &cfg.network.cluster_domain),
                    "sessionAffinity": "None",
                    "ports": [{"name": "http2", "protocol": "TCP", "port": 80, "targetPort": 80}],
                },
                "status": {"loadBalancer": {}},
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::resources;
    use crate::testing;

    #[test]
    fn ingress_and_services_of_a_tagged_split() {
        let cfg = Config::default();
        let mut route = testing::route(
            "default",
            "hello",
            vec![
                wisp_api::serving::TrafficTarget {
                    revision_name: "hello-00001".into(),
                    percent: Some(80),
                    ..Default::default()
                },
                wisp_api::serving::TrafficTarget {
                    revision_name: "hello-00002".into(),
                    percent: Some(20),
                    tag: "canary".into(),
                    ..Default::default()
                },
            ],
        );
        route.metadata.uid = "route-uid".into();
        let hosts = resources::hosts(&route, resources::spec_tags(&route), &cfg).unwrap();
        let traffic = resources::status_traffic(route.spec.traffic.clone(), &hosts, &cfg);
        let entries = resources::host_routes(&route, &hosts, &traffic, &Rollout::default());
        let ing = make_ingress(&route, &entries, &cfg, true, &Rollout::default());
        let rules = ing["spec"]["rules"].as_array().unwrap();
        // Main and tag, each external and cluster-local.
        assert_eq!(rules.len(), 4);
        let main_ext = rules
            .iter()
            .find(|r| {
                r["visibility"] == "ExternalIP" && r["hosts"][0] == "hello.default.example.com"
            })
            .unwrap();
        let paths = main_ext["http"]["paths"].as_array().unwrap();
        assert_eq!(paths[0]["headers"][TAG_HEADER]["exact"], "canary");
        let split = &paths[1]["splits"];
        assert_eq!(split[0]["serviceName"], "hello-00001");
        assert_eq!(split[0]["percent"], 80);
        assert_eq!(split[1]["percent"], 20);
        assert_eq!(ing["status"]["conditions"][2]["type"], "Ready");
        assert_eq!(
            ing["status"]["privateLoadBalancer"]["ingress"][0]["domainInternal"],
            "kourier-internal.kourier-system.svc.cluster.local"
        );
        let svcs = make_services(&route, &hosts, &cfg);
        let names: Vec<&str> = svcs
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["hello", "canary-hello"]);
        assert_eq!(svcs[0]["spec"]["type"], "ExternalName");
        assert_eq!(svcs[0]["metadata"]["labels"][labels::ROUTE], "hello");
        assert_eq!(
            svcs[0]["metadata"]["ownerReferences"][0]["uid"],
            "route-uid"
        );
    }
}
