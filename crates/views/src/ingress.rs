//! The ingress as a cluster would show it: Knative's Kourier gateway, whose Services tools
//! look up to find where to send requests (`kubectl get svc -n kourier-system`). wisp's
//! external listener is the `kourier` Service (type LoadBalancer, as Kourier's; its port 80
//! has the listener's port as `nodePort`, its load balancer the listener's address), the
//! cluster-local one `kourier-internal` (type NodePort: a port on this machine). Every
//! route's placeholder Service and KIngress name them as Knative names the gateway's.

use std::net::SocketAddr;

use serde_json::{Value, json};

/// The namespace the gateway's Services live in (Kourier's).
pub const NAMESPACE: &str = "kourier-system";
/// The external gateway's Service.
pub const EXTERNAL: &str = "kourier";
/// The cluster-local gateway's Service.
pub const INTERNAL: &str = "kourier-internal";

/// `kourier.kourier-system.svc.cluster.local`: the `domainInternal` KIngress statuses
/// report and placeholder Services point at (`cluster_domain` from `config-network`).
pub fn domain_internal(service: &str, cluster_domain: &str) -> String {
    format!("{service}.{NAMESPACE}.svc.{cluster_domain}")
}

/// The gateway's two Services, for wisp's external listeners (plain HTTP, and HTTPS when
/// `wisp serve --https-addr` runs one: Kourier's `https` port 443) and its cluster-local one.
pub fn gateway_services(
    external: SocketAddr,
    https: Option<SocketAddr>,
    local: SocketAddr,
) -> Vec<Value> {
    let labels = json!({
        "app.kubernetes.io/component": "net-kourier",
        "app.kubernetes.io/name": "knative-serving",
        "networking.knative.dev/ingress-provider": "kourier",
    });
    let service = |name: &str, type_: &str, addr: SocketAddr| {
        let mut svc = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "type": type_,
                "ports": [{"name": "http2", "protocol": "TCP", "port": 80,
                           "targetPort": addr.port(), "nodePort": addr.port()}],
                "sessionAffinity": "None",
                "externalTrafficPolicy": "Cluster",
            },
            "status": {"loadBalancer": {}},
        });
        if type_ == "LoadBalancer" {
            svc["status"]["loadBalancer"] =
                json!({"ingress": [{"ip": addr.ip().to_string(), "ipMode": "VIP"}]});
        }
        svc
    };
    let mut external = service(EXTERNAL, "LoadBalancer", external);
    if let (Some(https), Some(ports)) = (https, external["spec"]["ports"].as_array_mut()) {
        ports.push(json!({"name": "https", "protocol": "TCP", "port": 443,
                          "targetPort": https.port(), "nodePort": https.port()}));
    }
    vec![external, service(INTERNAL, "NodePort", local)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_names_wisps_listeners() {
        let svcs = gateway_services(
            "127.0.0.1:8080".parse().unwrap(),
            None,
            "127.0.0.1:8081".parse().unwrap(),
        );
        assert_eq!(svcs[0]["metadata"]["name"], "kourier");
        assert_eq!(svcs[0]["spec"]["ports"][0]["nodePort"], 8080);
        assert_eq!(svcs[0]["spec"]["ports"].as_array().unwrap().len(), 1);
        assert_eq!(
            svcs[0]["status"]["loadBalancer"]["ingress"][0]["ip"],
            "127.0.0.1"
        );
        assert_eq!(svcs[1]["metadata"]["name"], "kourier-internal");
        assert_eq!(svcs[1]["spec"]["ports"][0]["nodePort"], 8081);
        // With the HTTPS listener, Kourier's `https` port 443 leads to it.
        let svcs = gateway_services(
            "127.0.0.1:8080".parse().unwrap(),
            Some("127.0.0.1:8443".parse().unwrap()),
            "127.0.0.1:8081".parse().unwrap(),
        );
        let https = &svcs[0]["spec"]["ports"][1];
        assert_eq!(
            (&https["name"], &https["port"], &https["nodePort"]),
            (&json!("https"), &json!(443), &json!(8443))
        );
        assert_eq!(svcs[1]["spec"]["ports"].as_array().unwrap().len(), 1);
        assert_eq!(
            domain_internal(INTERNAL, "cluster.local"),
            "kourier-internal.kourier-system.svc.cluster.local"
        );
    }
}
