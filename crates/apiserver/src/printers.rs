//! The cells kube's printers compute for the kinds wisp shows as views
//! (`pkg/printers/internalversion/printers.go`: `printPod`, `printDeployment`,
//! `printService`, `printEvent`), from the objects' JSON. Pure functions of the object
//! and, for ages, the time now.

use chrono::{DateTime, Utc};
use serde_json::Value;
use wisp_api::{age, kinds::Computed};

/// One computed cell (the Table's column definitions say which is which).
pub fn cell(computed: Computed, obj: &Value) -> Value {
    cell_at(computed, obj, Utc::now())
}

fn since(t: &Value, now: DateTime<Utc>) -> Option<String> {
    let t = age::parse_time(t.as_str()?)?;
    Some(age::human_duration(now - t))
}

/// `translateTimestampSince`: `<unknown>` for a missing time.
fn age_or_unknown(t: &Value, now: DateTime<Utc>) -> Value {
    since(t, now).unwrap_or_else(|| "<unknown>".into()).into()
}

fn or_none(s: &str) -> Value {
    if s.is_empty() { "<none>" } else { s }.into()
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

pub fn cell_at(computed: Computed, obj: &Value, now: DateTime<Utc>) -> Value {
    match computed {
        Computed::Name => obj["metadata"]["name"].clone(),
        Computed::IntOrZero(p) => obj.pointer(p).and_then(Value::as_i64).unwrap_or(0).into(),
        Computed::OrNone(p) => or_none(str_at(obj, p)),
        Computed::PodReady => {
            let total = arr(&obj["spec"]["containers"]).len();
            let ready = arr(&obj["status"]["containerStatuses"])
                .iter()
                .filter(|c| c["ready"] == true && c["state"]["running"].is_object())
                .count();
            format!("{ready}/{total}").into()
        }
        Computed::PodStatus => pod_status(obj).into(),
        Computed::PodRestarts => pod_restarts(obj, now).into(),
        Computed::PodIp => or_none(
            arr(&obj["status"]["podIPs"])
                .first()
                .and_then(|ip| ip["ip"].as_str())
                .unwrap_or(""),
        ),
        Computed::PodReadinessGates => {
            let gates = arr(&obj["spec"]["readinessGates"]);
            if gates.is_empty() {
                return "<none>".into();
            }
            let conditions = arr(&obj["status"]["conditions"]);
            let ready = gates
                .iter()
                .filter(|g| {
                    conditions
                        .iter()
                        .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
                })
                .count();
            format!("{ready}/{}", gates.len()).into()
        }
        Computed::DeploymentReady => format!(
            "{}/{}",
            obj["status"]["readyReplicas"].as_i64().unwrap_or(0),
            obj["spec"]["replicas"].as_i64().unwrap_or(0)
        )
        .into(),
        Computed::Containers => arr(&obj["spec"]["template"]["spec"]["containers"])
            .iter()
            .map(|c| c["name"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
            .into(),
        Computed::Images => arr(&obj["spec"]["template"]["spec"]["containers"])
            .iter()
            .map(|c| c["image"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
            .into(),
        Computed::WorkloadSelector => {
            let labels = obj["spec"]["selector"]["matchLabels"].as_object();
            match labels {
                Some(m) if !m.is_empty() => m
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
                    .into(),
                _ => "<none>".into(),
            }
        }
        Computed::ServiceClusterIp => or_none(str_at(obj, "/spec/clusterIP")),
        Computed::ServiceExternalIp => service_external_ip(obj).into(),
        Computed::ServicePorts => {
            let ports: Vec<String> = arr(&obj["spec"]["ports"])
                .iter()
                .map(|p| {
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    let port = p["port"].as_i64().unwrap_or(0);
                    match p["nodePort"].as_i64() {
                        Some(n) if n > 0 => format!("{port}:{n}/{proto}"),
                        _ => format!("{port}/{proto}"),
                    }
                })
                .collect();
            or_none(&ports.join(","))
        }
        Computed::ServiceSelector => match obj["spec"]["selector"].as_object() {
            Some(m) if !m.is_empty() => {
                let mut pairs: Vec<String> = m
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect();
                // labels.FormatLabels sorts by key.
                pairs.sort();
                pairs.join(",").into()
            }
            _ => "<none>".into(),
        },
        Computed::EventLastSeen => {
            let series = &obj["series"]["lastObservedTime"];
            let t = if series.is_string() {
                series
            } else if obj["lastTimestamp"].is_string() {
                &obj["lastTimestamp"]
            } else {
                &obj["eventTime"]
            };
            age_or_unknown(t, now)
        }
        Computed::EventFirstSeen => {
            let t = if obj["firstTimestamp"].is_string() {
                &obj["firstTimestamp"]
            } else {
                &obj["eventTime"]
            };
            age_or_unknown(t, now)
        }
        Computed::EventObject => format!(
            "{}/{}",
            str_at(obj, "/involvedObject/kind").to_ascii_lowercase(),
            str_at(obj, "/involvedObject/name")
        )
        .into(),
        Computed::EventSource => {
            // formatEventSource: the old source, else the reporting controller.
            let (component, host) = match str_at(obj, "/source/component") {
                "" => (
                    str_at(obj, "/reportingComponent"),
                    str_at(obj, "/reportingInstance"),
                ),
                c => (c, str_at(obj, "/source/host")),
            };
            if host.is_empty() {
                component.into()
            } else {
                format!("{component}, {host}").into()
            }
        }
        Computed::EventCount => {
            let count = obj["series"]["count"]
                .as_i64()
                .or_else(|| obj["count"].as_i64())
                .unwrap_or(0);
            count.to_string().into()
        }
        Computed::KeyCount(_) | Computed::Age => Value::Null,
    }
}

/// `printPod`'s STATUS: the pod's phase, overridden by what its init containers say while
/// they have not all completed (`Init:<reason>`, `Init:ExitCode:N`, `Init:N/M`), else by
/// what its containers say (the last container's waiting or terminated reason,
/// `ExitCode:N`, `Signal:N`), `Terminating` while it is being deleted.
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = status["phase"].as_str().unwrap_or("").to_string();
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let inits = arr(&status["initContainerStatuses"]);
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let terminated = &c["state"]["terminated"];
        let waiting = c["state"]["waiting"]["reason"].as_str().unwrap_or("");
        if terminated.is_object() && terminated["exitCode"].as_i64() == Some(0) {
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(sig) => format!("Init:Signal:{sig}"),
                    None => format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    ),
                },
            }
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", inits.len())
        };
        break;
    }
    let initialized = arr(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if initializing && !initialized {
        if pod["metadata"]["deletionTimestamp"].is_string() {
            return "Terminating".into();
        }
        return reason;
    }
    let mut has_running = false;
    for c in arr(&status["containerStatuses"]).iter().rev() {
        let state = &c["state"];
        let waiting = state["waiting"]["reason"].as_str().unwrap_or("");
        let terminated = &state["terminated"];
        if !waiting.is_empty() {
            reason = waiting.to_string();
        } else if terminated.is_object() {
            let r = terminated["reason"].as_str().unwrap_or("");
            reason = if !r.is_empty() {
                r.to_string()
            } else if let Some(sig) = terminated["signal"].as_i64().filter(|s| *s != 0) {
                format!("Signal:{sig}")
            } else {
                format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0))
            };
        } else if c["ready"] == true && state["running"].is_object() {
            has_running = true;
        }
    }
    if reason == "Completed" && has_running {
        let ready = arr(&status["conditions"])
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        reason = if ready { "Running" } else { "NotReady" }.into();
    }
    let terminal = matches!(reason.as_str(), "Succeeded" | "Failed");
    if pod["metadata"]["deletionTimestamp"].is_string() && !terminal {
        reason = "Terminating".into();
    }
    reason
}

/// `printPod`'s RESTARTS: the containers' restarts, with the age of the last one.
fn pod_restarts(pod: &Value, now: DateTime<Utc>) -> String {
    let mut restarts = 0;
    let mut last: Option<DateTime<Utc>> = None;
    let status = &pod["status"];
    for c in arr(&status["initContainerStatuses"])
        .iter()
        .chain(arr(&status["containerStatuses"]))
    {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        if let Some(t) = c["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(age::parse_time)
            && last.is_none_or(|l| l < t)
        {
            last = Some(t);
        }
    }
    match last {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", age::human_duration(now - t))
        }
        _ => restarts.to_string(),
    }
}

/// `printService`'s EXTERNAL-IP (`getServiceExternalIP`).
fn service_external_ip(svc: &Value) -> String {
    let spec = &svc["spec"];
    let external: Vec<&str> = arr(&spec["externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match spec["type"].as_str().unwrap_or("ClusterIP") {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ips: Vec<String> = arr(&svc["status"]["loadBalancer"]["ingress"])
                .iter()
                .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
                .map(str::to_string)
                .collect();
            ips.extend(external.iter().map(|s| s.to_string()));
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => spec["externalName"].as_str().unwrap_or("").into(),
        _ => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container_status(ready: bool, state: Value, restarts: i64, last: Value) -> Value {
        json!({"name": "user-container", "ready": ready, "restartCount": restarts,
               "state": state, "lastState": last})
    }

    fn now() -> DateTime<Utc> {
        age::parse_time("2024-01-01T01:00:00Z").unwrap()
    }

    fn pod(statuses: Vec<Value>, deleting: bool) -> Value {
        let mut p = json!({
            "metadata": {"name": "p", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "user-container"}]},
            "status": {"phase": "Running", "containerStatuses": statuses,
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "podIPs": [{"ip": "10.88.0.5"}]},
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = "2024-01-01T00:59:00Z".into();
        }
        p
    }

    #[test]
    fn pod_cells_as_kubectl_prints_them() {
        let running = json!({"running": {"startedAt": "2024-01-01T00:00:01Z"}});
        let oom = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                          "finishedAt": "2024-01-01T00:55:00Z"}});
        let backoff = json!({"waiting": {"reason": "CrashLoopBackOff"}});
        type Case = (&'static str, Value, [&'static str; 3]);
        let mut cases: Vec<Case> = vec![
            (
                "running and ready",
                pod(
                    vec![container_status(true, running.clone(), 0, json!({}))],
                    false,
                ),
                ["1/1", "Running", "0"],
            ),
            (
                "crash loop after an OOM kill",
                pod(
                    vec![container_status(false, backoff, 3, oom.clone())],
                    false,
                ),
                ["0/1", "CrashLoopBackOff", "3 (5m ago)"],
            ),
            (
                "just killed",
                pod(vec![container_status(false, oom, 1, json!({}))], false),
                ["0/1", "OOMKilled", "1"],
            ),
            (
                "exit code without a reason",
                pod(
                    vec![container_status(
                        false,
                        json!({"terminated": {"exitCode": 2}}),
                        0,
                        json!({}),
                    )],
                    false,
                ),
                ["0/1", "ExitCode:2", "0"],
            ),
            (
                "being deleted",
                pod(vec![container_status(true, running, 0, json!({}))], true),
                ["1/1", "Terminating", "0"],
            ),
        ];
        // Init containers (kubectl's `printPod`): the first one not completed speaks.
        let init = |statuses: Vec<Value>| {
            let mut p = pod(
                vec![container_status(
                    false,
                    json!({"waiting": {"reason": "PodInitializing"}}),
                    0,
                    json!({}),
                )],
                false,
            );
            p["status"]["phase"] = "Pending".into();
            p["status"]["initContainerStatuses"] = statuses.into();
            p["status"]["conditions"] = json!([{"type": "Initialized", "status": "False"}]);
            p
        };
        let done = container_status(
            true,
            json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
            0,
            json!({}),
        );
        let failed = json!({"terminated": {"exitCode": 7, "reason": "Error",
                             "finishedAt": "2024-01-01T00:58:00Z"}});
        cases.extend([
            (
                "the second init container runs",
                init(vec![
                    done.clone(),
                    container_status(false, json!({"running": {}}), 0, json!({})),
                ]),
                ["0/1", "Init:1/2", "0"],
            ),
            (
                "an init container just failed",
                init(vec![
                    done.clone(),
                    container_status(false, failed.clone(), 0, json!({})),
                ]),
                ["0/1", "Init:Error", "0"],
            ),
            (
                "an init container backs off",
                init(vec![
                    done,
                    container_status(
                        false,
                        json!({"waiting": {"reason": "CrashLoopBackOff"}}),
                        2,
                        failed,
                    ),
                ]),
                ["0/1", "Init:CrashLoopBackOff", "2 (2m ago)"],
            ),
        ]);
        for (name, p, want) in cases {
            let got = [
                cell_at(Computed::PodReady, &p, now()),
                cell_at(Computed::PodStatus, &p, now()),
                cell_at(Computed::PodRestarts, &p, now()),
            ];
            assert_eq!(got, want.map(Value::from), "{name}");
        }
        assert_eq!(
            cell_at(Computed::PodIp, &pod(vec![], false), now()),
            "10.88.0.5"
        );
        assert_eq!(cell_at(Computed::PodIp, &json!({}), now()), "<none>");
    }

    #[test]
    fn service_cells() {
        let cases = [
            (
                json!({"spec": {"type": "ClusterIP", "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP"},
                    {"name": "https", "port": 443, "protocol": "TCP"}]}}),
                ["<none>", "<none>", "80/TCP,443/TCP", "<none>"],
            ),
            (
                json!({"spec": {"type": "ExternalName",
                                "externalName": "kourier-internal.kourier-system.svc.cluster.local",
                                "ports": [{"port": 80, "protocol": "TCP"}]}}),
                [
                    "<none>",
                    "kourier-internal.kourier-system.svc.cluster.local",
                    "80/TCP",
                    "<none>",
                ],
            ),
            (
                json!({"spec": {"type": "LoadBalancer", "clusterIP": "",
                                "ports": [{"port": 80, "nodePort": 8080, "protocol": "TCP"}],
                                "selector": {"b": "2", "a": "1"}},
                       "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}}),
                ["<none>", "127.0.0.1", "80:8080/TCP", "a=1,b=2"],
            ),
        ];
        for (svc, want) in cases {
            let got = [
                cell_at(Computed::ServiceClusterIp, &svc, now()),
                cell_at(Computed::ServiceExternalIp, &svc, now()),
                cell_at(Computed::ServicePorts, &svc, now()),
                cell_at(Computed::ServiceSelector, &svc, now()),
            ];
            assert_eq!(got, want.map(Value::from), "{svc}");
        }
    }

    #[test]
    fn event_and_deployment_cells() {
        let ev = json!({"metadata": {"name": "hello.1"},
            "involvedObject": {"kind": "Service", "name": "hello"},
            "source": {"component": "kubelet", "host": "wisp"},
            "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:58:00Z",
            "count": 4});
        assert_eq!(cell_at(Computed::EventObject, &ev, now()), "service/hello");
        assert_eq!(cell_at(Computed::EventSource, &ev, now()), "kubelet, wisp");
        assert_eq!(cell_at(Computed::EventLastSeen, &ev, now()), "2m");
        assert_eq!(cell_at(Computed::EventFirstSeen, &ev, now()), "60m");
        assert_eq!(cell_at(Computed::EventCount, &ev, now()), "4");
        assert_eq!(cell_at(Computed::Name, &ev, now()), "hello.1");
        let d = json!({"spec": {"replicas": 2, "selector": {"matchLabels": {"k": "v"}},
                                "template": {"spec": {"containers": [
                                    {"name": "user-container", "image": "img@sha256:1"}]}}},
                       "status": {"readyReplicas": 1}});
        assert_eq!(cell_at(Computed::DeploymentReady, &d, now()), "1/2");
        assert_eq!(
            cell_at(Computed::IntOrZero("/status/availableReplicas"), &d, now()),
            0
        );
        assert_eq!(cell_at(Computed::Containers, &d, now()), "user-container");
        assert_eq!(cell_at(Computed::Images, &d, now()), "img@sha256:1");
        assert_eq!(cell_at(Computed::WorkloadSelector, &d, now()), "k=v");
    }
}
