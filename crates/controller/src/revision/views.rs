//! What a revision looks like on a cluster, built from what wisp runs: its Deployment
//! (Knative's `pkg/reconciler/revision/resources/deploy.go` `MakeDeployment`, with the
//! status kube's deployment controller would report) and one Pod per replica (as the
//! Deployment's ReplicaSet would name and label it, with the status the kubelet would
//! report). Pure functions of the revision, its pod, the replica count the autoscaler
//! wants and the replicas the platform reports, so a reconcile that changes nothing
//! builds the same objects and the view stays as it is.
//!
//! wisp runs no queue-proxy container: the pods show the revision's own containers only
//! (docs/differences.md).

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use wisp_api::{
    kinds,
    serving::{PodSpec, Revision},
};
use wisp_runtime::{ReplicaPhase, ReplicaStatus, podconfig::POD_INITIALIZING};
use wisp_views::events::{EventType, Regarding, Source};

use crate::names::{child_name, label};

/// Knative's `serving.knative.dev/revisionLastPinned` annotation, which MakeDeployment
/// leaves off the Deployment (its heartbeat would churn it).
const LAST_PINNED: &str = "serving.knative.dev/lastPinned";
/// The label kube's deployment controller adds to its ReplicaSets' pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// Knative's `UserPortName` and default port (`pkg/apis/serving/v1`).
const USER_PORT_NAME: &str = "user-port";
const DEFAULT_USER_PORT: i64 = 8080;

/// `<revision>-deployment` (`names.Deployment`: `kmeta.ChildName(rev.Name, "-deployment")`).
pub fn deployment_name(revision: &str) -> String {
    child_name(revision, "-deployment")
}

/// The pods' labels: the revision's, less the route labels, plus its name and uid, and
/// `app` = the revision's name unless the user set one (`makeLabels` in deploy.go).
pub fn pod_labels(rev: &Revision) -> Map<String, Value> {
    let mut labels: Map<String, Value> = rev
        .metadata
        .labels
        .iter()
        .filter(|(k, _)| *k != label::ROUTE && *k != label::ROUTING_STATE)
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    labels.insert(label::REVISION.into(), rev.metadata.name.clone().into());
    labels.insert(label::REVISION_UID.into(), rev.metadata.uid.clone().into());
    labels
        .entry("app")
        .or_insert_with(|| rev.metadata.name.clone().into());
    labels
}

fn annotations(rev: &Revision) -> Map<String, Value> {
    rev.metadata
        .annotations
        .iter()
        .filter(|(k, _)| *k != LAST_PINNED)
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect()
}

/// The Deployment's pod template: the revision's pod (images pinned to their digests),
/// each container as `makeContainer` makes it (`terminationMessagePolicy`
/// `FallbackToLogsOnError`, the `K_*` environment), the serving container with its port
/// named `user-port` and `PORT` set (`makeServingContainer`).
pub fn pod_template(rev: &Revision, pod: &PodSpec) -> Value {
    let mut spec = serde_json::to_value(pod).unwrap_or_else(|_| json!({}));
    let serving = pod
        .serving_container()
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let labels = &rev.metadata.labels;
    let k_env = [
        ("K_REVISION", rev.metadata.name.clone()),
        (
            "K_CONFIGURATION",
            labels
                .get(label::CONFIGURATION)
                .cloned()
                .unwrap_or_default(),
        ),
        (
            "K_SERVICE",
            labels.get(label::SERVICE).cloned().unwrap_or_default(),
        ),
    ];
    if let Some(containers) = spec["containers"].as_array_mut() {
        for c in containers {
            let is_serving = c["name"].as_str() == Some(serving.as_str());
            let env = c["env"].as_array().cloned().unwrap_or_default();
            let mut env = env;
            if is_serving {
                let port = c["ports"][0]["containerPort"]
                    .as_i64()
                    .filter(|p| *p != 0)
                    .unwrap_or(DEFAULT_USER_PORT);
                c["ports"] =
                    json!([{"name": USER_PORT_NAME, "containerPort": port, "protocol": "TCP"}]);
                env.push(json!({"name": "PORT", "value": port.to_string()}));
            }
            env.extend(k_env.iter().map(|(n, v)| json!({"name": n, "value": v})));
            c["env"] = env.into();
            // HTTP and TCP readiness probes are the queue-proxy's in Knative (wisp's
            // runtime runs them), not the kubelet's: `makeServingContainer` drops them.
            if is_serving
                && (c["readinessProbe"].get("httpGet").is_some()
                    || c["readinessProbe"].get("tcpSocket").is_some())
                && let Some(m) = c.as_object_mut()
            {
                m.remove("readinessProbe");
            }
            if c.get("terminationMessagePolicy").is_none() {
                c["terminationMessagePolicy"] = "FallbackToLogsOnError".into();
            }
        }
    }
    spec["terminationGracePeriodSeconds"] = rev.spec.timeout_seconds.unwrap_or(300).into();
    spec["restartPolicy"] = "Always".into();
    json!({
        "metadata": {"labels": pod_labels(rev), "annotations": annotations(rev)},
        "spec": spec,
    })
}

/// A revision's pod template and its hash, which name its ReplicaSet and pods.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    pub template: Value,
    pub hash: String,
}

impl Template {
    pub fn of(rev: &Revision, pod: &PodSpec) -> Template {
        let template = pod_template(rev, pod);
        let hash = template_hash(&template);
        Template { template, hash }
    }
}

/// kube's `controller.ComputeHash`: FNV-32a of the template, its decimal digits mapped onto
/// `rand.SafeEncodeString`'s alphabet (kube hashes the Go object; wisp its JSON).
pub fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u32 = 0x811c_9dc5;
    for b in template.to_string().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.to_string()
        .bytes()
        .map(|d| ALPHABET[usize::from(d) % ALPHABET.len()] as char)
        .collect()
}

/// What the ReplicaSet of the revision's Deployment names its pods after.
pub fn name_prefix(revision: &str, hash: &str) -> String {
    format!("{}-{hash}-", deployment_name(revision))
}

fn time(t: Option<SystemTime>) -> Value {
    t.map_or(Value::Null, |t| {
        wisp_views::view::timestamp(DateTime::<Utc>::from(t)).into()
    })
}

fn rev_ref(rev: &Revision) -> Value {
    json!({
        "apiVersion": kinds::REVISION.api_version(),
        "kind": "Revision",
        "name": rev.metadata.name,
        "uid": rev.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Replicas that count for the Deployment: those not being stopped.
fn live(replicas: &[ReplicaStatus]) -> impl Iterator<Item = &ReplicaStatus> {
    replicas
        .iter()
        .filter(|r| r.phase != ReplicaPhase::Terminating)
}

/// The revision's Deployment: `spec.replicas` is what the autoscaler wants, `status`
/// counts the replicas the platform runs. Condition times come from `old` (the
/// Deployment held now) while their status holds, else `now`.
pub fn make_deployment(
    rev: &Revision,
    t: &Template,
    desired: u32,
    replicas: &[ReplicaStatus],
    progress_deadline_seconds: u64,
    old: Option<&Value>,
    now: DateTime<Utc>,
) -> Value {
    let (template, hash) = (&t.template, &t.hash);
    let current = live(replicas).count();
    let ready = live(replicas)
        .filter(|r| r.phase == ReplicaPhase::Ready)
        .count();
    let rs = format!("{}-{hash}", deployment_name(&rev.metadata.name));
    let available = ready >= desired as usize;
    let mut status = json!({
        // The view fills in the generation this status is of (the current one).
        "observedGeneration": 0,
        "replicas": current,
        "updatedReplicas": current,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [
            if available {
                json!({"type": "Available", "status": "True",
                       "reason": "MinimumReplicasAvailable",
                       "message": "Deployment has minimum availability."})
            } else {
                json!({"type": "Available", "status": "False",
                       "reason": "MinimumReplicasUnavailable",
                       "message": "Deployment does not have minimum availability."})
            },
            json!({"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                   "message": format!("ReplicaSet \"{rs}\" has successfully progressed.")}),
        ],
    });
    let unavailable = current.saturating_sub(ready);
    if unavailable > 0 {
        status["unavailableReplicas"] = unavailable.into();
    }
    // kube's JSON leaves zero counts out (omitempty).
    if let Some(m) = status.as_object_mut() {
        m.retain(|k, v| k == "observedGeneration" || v.as_u64() != Some(0));
    }
    keep_condition_times(old.map(|o| &o["status"]), &mut status, now);
    let mut annotations = annotations(rev);
    annotations.insert("deployment.kubernetes.io/revision".into(), "1".into());
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(&rev.metadata.name),
            "namespace": rev.metadata.namespace,
            "labels": pod_labels(rev),
            "annotations": annotations,
            "ownerReferences": [rev_ref(rev)],
            "creationTimestamp": rev.metadata.creation_timestamp,
        },
        "spec": {
            "replicas": desired,
            "selector": {"matchLabels": {label::REVISION_UID: rev.metadata.uid}},
            "template": template,
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": progress_deadline_seconds,
        },
        "status": status,
    })
}

/// Copies each condition's `lastTransitionTime`/`lastUpdateTime` from `old` while its
/// status is the same (so an unchanged object stays equal), else stamps `now`.
fn keep_condition_times(old: Option<&Value>, status: &mut Value, now: DateTime<Utc>) {
    let now = wisp_views::view::timestamp(now);
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    for c in conditions {
        let before = old
            .and_then(|o| o["conditions"].as_array())
            .and_then(|cs| cs.iter().find(|o| o["type"] == c["type"]))
            .filter(|o| o["status"] == c["status"]);
        for field in ["lastUpdateTime", "lastTransitionTime"] {
            c[field] = before
                .and_then(|b| b.get(field).cloned())
                .unwrap_or_else(|| now.clone().into());
        }
    }
}

/// The pod the platform's replica is: named, labelled and owned as the Deployment's
/// ReplicaSet would do it, with its containers' states as the kubelet would report them.
pub fn make_pod(rev: &Revision, t: &Template, replica: &ReplicaStatus, node: &str) -> Value {
    let (template, hash) = (&t.template, &t.hash);
    let rs = format!("{}-{hash}", deployment_name(&rev.metadata.name));
    let mut labels = template["metadata"]["labels"].clone();
    labels[POD_TEMPLATE_HASH] = hash.as_str().into();
    let mut spec = template["spec"].clone();
    spec["nodeName"] = node.into();
    let ip = replica.address.ip();
    // A process replica shares the host's loopback; only a container replica has an
    // address of its own (`podIP`). Its port is the replica's own, in `PORT`.
    let own_address = !ip.is_loopback() && !ip.is_unspecified();
    if !own_address
        && replica.address.port() != 0
        && let Some(cs) = spec["containers"].as_array_mut()
    {
        for c in cs {
            if let Some(env) = c["env"].as_array_mut() {
                for e in env.iter_mut().filter(|e| e["name"] == "PORT") {
                    e["value"] = replica.address.port().to_string().into();
                }
            }
        }
    }
    // One string field of each container of a list (`containers`, `initContainers`).
    let each = |list: &str, field: &str| -> Vec<String> {
        spec[list]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| c[field].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let names = each("containers", "name");
    let images = each("containers", "image");
    let init_names = each("initContainers", "name");
    let init_done = usize::try_from(replica.init_done).unwrap_or(usize::MAX);
    let initialized = init_done >= init_names.len();
    let running = replica.times.started.is_some()
        && replica.failure.is_none()
        && replica.phase != ReplicaPhase::BackOff;
    let ready = replica.phase == ReplicaPhase::Ready;
    // A container is ready while the replica is, or (on the way there, or out of rotation)
    // when it runs and its readiness probe is not among those the platform reports unmet;
    // with no report, none is.
    let container_ready = |name: &str| {
        ready
            || (running
                && !replica.unready.is_empty()
                && !replica.unready.iter().any(|u| u == name))
    };
    let created = time(replica.times.created);
    // The app containers' last exit (an init container's is its own, below).
    let app_exit = replica
        .last_exit
        .as_ref()
        .filter(|e| e.init_container.is_none());
    let statuses: Vec<Value> = names
        .iter()
        .zip(&images)
        .map(|(name, image)| {
            let state = if let Some(f) = &replica.failure {
                json!({"waiting": {"reason": f.reason, "message": f.message}})
            } else if !initialized {
                // The kubelet's default state while the pod's init containers run.
                json!({"waiting": {"reason": POD_INITIALIZING}})
            } else if replica.phase == ReplicaPhase::BackOff {
                json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off restarting failed container={name} pod={}_{}",
                        replica.name, rev.metadata.namespace)}})
            } else if running {
                json!({"running": {"startedAt": time(replica.times.started)}})
            } else {
                json!({"waiting": {"reason": "ContainerCreating"}})
            };
            let last = app_exit.map_or_else(|| json!({}), terminated);
            json!({
                "name": name,
                "image": image,
                "imageID": image_id(image),
                "ready": container_ready(name),
                "started": running,
                // Init containers that keep failing restart, not the app containers.
                "restartCount": if initialized { replica.restarts } else { 0 },
                "state": state,
                "lastState": last,
            })
        })
        .collect();
    let init_images = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Init containers as the kubelet reports them: those before `init_done` completed, the
    // next one running (or backing off after its failure), the rest waiting.
    let init_statuses: Vec<Value> = init_names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let image = init_images[i]["image"].as_str().unwrap_or("").to_string();
            let own_exit = replica
                .last_exit
                .as_ref()
                .filter(|e| e.init_container.as_deref() == Some(name));
            let current = i == init_done;
            let state = if i < init_done {
                json!({"terminated": {"exitCode": 0, "reason": "Completed"}})
            } else if !current {
                json!({"waiting": {"reason": POD_INITIALIZING}})
            } else if let Some(f) = &replica.failure {
                json!({"waiting": {"reason": f.reason, "message": f.message}})
            } else if replica.phase == ReplicaPhase::BackOff && own_exit.is_some() {
                json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off restarting failed container={name} pod={}_{}",
                        replica.name, rev.metadata.namespace)}})
            } else {
                json!({"running": {}})
            };
            let last = match own_exit {
                Some(exit) if current => terminated(exit),
                _ => json!({}),
            };
            json!({
                "name": name,
                "image": image,
                "imageID": image_id(&image),
                "ready": i < init_done,
                "started": current && state["running"].is_object(),
                "restartCount": if current { replica.restarts } else { 0 },
                "state": state,
                "lastState": last,
            })
        })
        .collect();
    let ready_time = time(replica.times.ready_changed.or(replica.times.created));
    let started_time = time(replica.times.started.or(replica.times.created));
    let unready = if ready {
        None
    } else {
        let unready: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !container_ready(n))
            .collect();
        Some(format!(
            "containers with unready status: [{}]",
            unready.join(" ")
        ))
    };
    let cond = |type_: &str, ok: bool, at: &Value| {
        let mut c = json!({"type": type_, "status": if ok { "True" } else { "False" },
                           "lastProbeTime": null, "lastTransitionTime": at});
        if !ok && let Some(m) = &unready {
            c["reason"] = "ContainersNotReady".into();
            c["message"] = m.clone().into();
        }
        c
    };
    let mut init_cond = json!({"type": "Initialized", "status": if initialized { "True" } else { "False" },
                               "lastProbeTime": null, "lastTransitionTime": created});
    if !initialized {
        // The kubelet's `GeneratePodInitializedCondition`.
        init_cond["reason"] = "ContainersNotInitialized".into();
        init_cond["message"] = format!(
            "containers with incomplete status: [{}]",
            init_names[init_done.min(init_names.len())..].join(" ")
        )
        .into();
    }
    let conditions = vec![
        json!({"type": "PodReadyToStartContainers", "status": if replica.times.started.is_some() || init_done > 0 { "True" } else { "False" },
               "lastProbeTime": null, "lastTransitionTime": started_time}),
        init_cond,
        cond("Ready", ready, &ready_time),
        cond("ContainersReady", ready, &ready_time),
        json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": created}),
    ];
    let mut status = json!({
        "phase": if replica.times.started.is_some() && initialized { "Running" } else { "Pending" },
        "conditions": conditions,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "startTime": created,
        "containerStatuses": statuses,
        "qosClass": qos_class(&spec),
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = init_statuses.into();
    }
    if own_address {
        status["podIP"] = ip.to_string().into();
        status["podIPs"] = json!([{"ip": ip.to_string()}]);
    }
    let mut metadata = json!({
        "name": replica.name,
        "generateName": format!("{rs}-"),
        "namespace": rev.metadata.namespace,
        "labels": labels,
        "annotations": template["metadata"]["annotations"],
        "ownerReferences": [{
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": rs,
            "uid": replica_set_uid(&rev.metadata.uid),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
        "creationTimestamp": created,
    });
    if replica.phase == ReplicaPhase::Terminating {
        // Being stopped: kube marks a pod it deletes gracefully so.
        metadata["deletionTimestamp"] = time(replica.times.ready_changed.or(replica.times.created));
        metadata["deletionGracePeriodSeconds"] = spec["terminationGracePeriodSeconds"].clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// A container's last run as the kubelet reports it (`lastState.terminated`).
fn terminated(exit: &wisp_runtime::ExitInfo) -> Value {
    let code = exit.code.or(exit.signal.map(|s| 128 + s)).unwrap_or(0);
    let reason = exit
        .reason
        .clone()
        .unwrap_or_else(|| if code == 0 { "Completed" } else { "Error" }.to_string());
    let mut t = json!({"exitCode": code, "reason": reason,
                       "startedAt": time(exit.started_at),
                       "finishedAt": time(exit.finished_at)});
    if let Some(sig) = exit.signal {
        t["signal"] = sig.into();
    }
    if !exit.message.is_empty() {
        t["message"] = exit.message.clone().into();
    }
    json!({"terminated": t})
}

/// The digest an image is pinned to (a process replica runs no image).
fn image_id(image: &str) -> String {
    if image.contains('@') {
        image.to_string()
    } else {
        String::new()
    }
}

/// The uid of the ReplicaSet a cluster would hold between the Deployment and its pods
/// (wisp serves no ReplicaSets): derived from the revision's, so it is stable.
fn replica_set_uid(revision_uid: &str) -> String {
    use md5::{Digest, Md5};
    let d = Md5::digest(format!("{revision_uid}/replicaset").as_bytes());
    let h: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// kube's QoS class (`GetPodQOS`): BestEffort without requests or limits, Guaranteed when
/// every container's limits equal its requests for cpu and memory, Burstable otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let containers = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let r = &c["resources"];
        let (req, lim) = (&r["requests"], &r["limits"]);
        for res in ["cpu", "memory"] {
            let (q, l) = (req.get(res).or(lim.get(res)), lim.get(res));
            any |= q.is_some() || l.is_some();
            guaranteed &= l.is_some() && q == l;
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// One event to record.
pub type Emitted = (Source, Regarding, EventType, &'static str, String);

pub const DEPLOYMENT_CONTROLLER: Source = Source::controller("deployment-controller");

/// The events kube's controllers and the kubelet (on `node`) would record for the change
/// from `old` pods to `new` (and the Deployment's scale from `old_replicas` to `desired`).
pub fn events(
    deployment: &Value,
    hash: &str,
    old_replicas: Option<i64>,
    desired: u32,
    old: &[std::sync::Arc<Value>],
    new: &[std::sync::Arc<Value>],
    node: &'static str,
) -> Vec<Emitted> {
    #[allow(non_snake_case)]
    let KUBELET = Source {
        component: "kubelet",
        host: node,
    };
    let mut out = Vec::new();
    let rs = format!(
        "{}-{hash}",
        deployment["metadata"]["name"].as_str().unwrap_or("")
    );
    let desired = i64::from(desired);
    match old_replicas {
        Some(o) if o < desired => out.push((
            DEPLOYMENT_CONTROLLER,
            Regarding::of(deployment),
            EventType::Normal,
            "ScalingReplicaSet",
            format!("Scaled up replica set {rs} from {o} to {desired}"),
        )),
        Some(o) if o > desired => out.push((
            DEPLOYMENT_CONTROLLER,
            Regarding::of(deployment),
            EventType::Normal,
            "ScalingReplicaSet",
            format!("Scaled down replica set {rs} from {o} to {desired}"),
        )),
        None if desired > 0 => out.push((
            DEPLOYMENT_CONTROLLER,
            Regarding::of(deployment),
            EventType::Normal,
            "ScalingReplicaSet",
            format!("Scaled up replica set {rs} to {desired}"),
        )),
        _ => {}
    }
    for pod in new.iter().map(|p| &**p) {
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let before = old.iter().find(|o| o["metadata"]["name"] == name);
        let container_of = |list: &str, i: usize| -> (String, Regarding) {
            let c = pod["spec"][list][i]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let r = Regarding::of(pod).field(format!("spec.{list}{{{c}}}"));
            (c, r)
        };
        let container = |i: usize| container_of("containers", i);
        let statuses_of = |list: &str| pod["status"][list].as_array().cloned().unwrap_or_default();
        let statuses = statuses_of("containerStatuses");
        // The kubelet records the same events for init containers (`spec.initContainers{…}`).
        let all = [
            ("containers", "containerStatuses"),
            ("initContainers", "initContainerStatuses"),
        ]
        .into_iter()
        .flat_map(|(list, status_list)| {
            statuses_of(status_list)
                .into_iter()
                .enumerate()
                .map(move |(i, st)| (list, status_list, i, st))
        });
        for (list, status_list, i, st) in all {
            let prev = before.and_then(|b| b["status"][status_list].get(i));
            let (c, r) = container_of(list, i);
            let started = st["state"]["running"]["startedAt"].as_str();
            let was_started = prev.and_then(|p| p["state"]["running"]["startedAt"].as_str());
            if started.is_some() && started != was_started {
                out.push((
                    KUBELET,
                    r.clone(),
                    EventType::Normal,
                    "Created",
                    format!("Created container: {c}"),
                ));
                out.push((
                    KUBELET,
                    r.clone(),
                    EventType::Normal,
                    "Started",
                    format!("Started container {c}"),
                ));
            }
            let waiting = st["state"]["waiting"]["reason"].as_str();
            let was_waiting = prev.and_then(|p| p["state"]["waiting"]["reason"].as_str());
            if waiting == Some("CrashLoopBackOff") && was_waiting != waiting {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
                let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
                out.push((
                    KUBELET,
                    r.clone(),
                    EventType::Warning,
                    "BackOff",
                    format!("Back-off restarting failed container {c} in pod {name}_{ns}({uid})"),
                ));
            }
            // The kubelet's default states are no failures.
            if let Some(reason) = waiting.filter(|w| {
                !["CrashLoopBackOff", "ContainerCreating", POD_INITIALIZING].contains(w)
            }) && was_waiting != waiting
            {
                let msg = st["state"]["waiting"]["message"].as_str().unwrap_or(reason);
                out.push((
                    KUBELET,
                    r.clone(),
                    EventType::Warning,
                    "Failed",
                    format!("Error: {msg}"),
                ));
            }
        }
        let deleting = pod["metadata"]["deletionTimestamp"].is_string();
        let was_deleting = before.is_some_and(|b| b["metadata"]["deletionTimestamp"].is_string());
        if deleting && !was_deleting {
            for i in 0..statuses.len() {
                let (c, r) = container(i);
                out.push((
                    KUBELET,
                    r,
                    EventType::Normal,
                    "Killing",
                    format!("Stopping container {c}"),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, time::Duration};

    use wisp_runtime::{ExitInfo, ReplicaTimes};

    use super::*;
    use crate::testing;

    fn rev() -> Revision {
        let mut r = testing::revision("default", "hello-00001", "hello", 1);
        r.metadata.uid = "rev-uid".into();
        r.metadata
            .labels
            .insert(label::SERVICE.into(), "hello".into());
        r.metadata
            .labels
            .insert(label::ROUTING_STATE.into(), "active".into());
        r
    }

    fn at(s: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200 + s))
    }

    fn replica(name: &str, phase: ReplicaPhase, addr: &str) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            address: addr.parse::<SocketAddr>().unwrap(),
            phase,
            restarts: 0,
            init_done: 0,
            unready: Vec::new(),
            last_exit: None,
            failure: None,
            times: ReplicaTimes {
                created: at(0),
                started: at(1),
                ready_changed: at(2),
            },
        }
    }

    #[test]
    fn labels_are_knatives() {
        let l = pod_labels(&rev());
        assert_eq!(l[label::REVISION], "hello-00001");
        assert_eq!(l[label::REVISION_UID], "rev-uid");
        assert_eq!(l[label::CONFIGURATION], "hello");
        assert_eq!(l[label::SERVICE], "hello");
        assert_eq!(l["app"], "hello-00001");
        assert!(!l.contains_key(label::ROUTING_STATE));
        assert_eq!(deployment_name("hello-00001"), "hello-00001-deployment");
    }

    #[test]
    fn the_template_hash_is_stable_and_safe() {
        let r = rev();
        let t = pod_template(&r, &r.spec.pod);
        let h = template_hash(&t);
        assert_eq!(h, template_hash(&t));
        assert!(!h.is_empty() && h.len() <= 10);
        assert!(
            h.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        assert_eq!(
            name_prefix("hello-00001", &h),
            format!("hello-00001-deployment-{h}-")
        );
    }

    #[test]
    fn deployment_counts_what_runs() {
        let r = rev();
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        let now = testing::test_clock();
        let reps = [
            replica("a", ReplicaPhase::Ready, "127.0.0.1:4000"),
            replica("b", ReplicaPhase::Starting, "127.0.0.1:4001"),
            replica("c", ReplicaPhase::Terminating, "127.0.0.1:4002"),
        ];
        let d = make_deployment(&r, &t, 2, &reps, 600, None, now);
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(d["status"]["replicas"], 2);
        assert_eq!(d["status"]["readyReplicas"], 1);
        assert_eq!(d["status"]["unavailableReplicas"], 1);
        assert_eq!(d["status"]["conditions"][0]["status"], "False");
        assert_eq!(d["metadata"]["ownerReferences"][0]["kind"], "Revision");
        assert_eq!(
            d["spec"]["selector"]["matchLabels"][label::REVISION_UID],
            "rev-uid"
        );
        // Rebuilt later with nothing changed: the same object (condition times kept).
        let again = make_deployment(
            &r,
            &t,
            2,
            &reps,
            600,
            Some(&d),
            now + chrono::TimeDelta::seconds(9),
        );
        assert_eq!(again, d);
        let idle = make_deployment(&r, &t, 0, &[], 600, Some(&d), now);
        assert_eq!(idle["status"]["conditions"][0]["status"], "True");
        assert!(
            idle["status"].get("replicas").is_none(),
            "zero counts are left out"
        );
    }

    #[test]
    fn pods_report_their_containers_as_the_kubelet() {
        let r = rev();
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        let mut rep = replica(
            "hello-00001-deployment-h-abcde",
            ReplicaPhase::BackOff,
            "10.88.0.5:8080",
        );
        rep.restarts = 3;
        rep.last_exit = Some(ExitInfo {
            code: Some(137),
            signal: None,
            reason: Some("OOMKilled".into()),
            message: "killed".into(),
            started_at: at(10),
            finished_at: at(20),
            init_container: None,
        });
        let p = make_pod(&r, &t, &rep, "node");
        assert_eq!(p["metadata"]["labels"][POD_TEMPLATE_HASH], "h");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            "hello-00001-deployment-h"
        );
        assert_eq!(p["status"]["podIP"], "10.88.0.5");
        let cs = &p["status"]["containerStatuses"][0];
        assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(cs["lastState"]["terminated"]["reason"], "OOMKilled");
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 137);
        assert_eq!(cs["restartCount"], 3);
        assert_eq!(p["status"]["phase"], "Running");

        let proc = make_pod(
            &r,
            &t,
            &replica("p", ReplicaPhase::Ready, "127.0.0.1:4321"),
            "node",
        );
        assert!(
            proc["status"].get("podIP").is_none(),
            "a process replica has no address of its own"
        );
        let env = proc["spec"]["containers"][0]["env"].as_array().unwrap();
        assert!(
            env.iter()
                .any(|e| e["name"] == "PORT" && e["value"] == "4321")
        );
        assert_eq!(proc["status"]["containerStatuses"][0]["ready"], true);
        assert_eq!(proc["status"]["conditions"][2]["type"], "Ready");
        assert_eq!(proc["status"]["conditions"][2]["status"], "True");

        let mut stopping = replica("s", ReplicaPhase::Terminating, "127.0.0.1:1");
        stopping.times.ready_changed = at(30);
        let s = make_pod(&r, &t, &stopping, "node");
        assert!(s["metadata"]["deletionTimestamp"].is_string());
    }

    #[test]
    fn each_container_is_ready_as_its_probe_says() {
        let mut r = rev();
        let serving = r.spec.pod.containers[0].name.clone();
        r.spec.pod.containers.push(wisp_api::serving::Container {
            name: "proxy".into(),
            image: "example.com/proxy@sha256:1".into(),
            ..Default::default()
        });
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        let ready = |p: &Value| -> Vec<bool> {
            p["status"]["containerStatuses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["ready"].as_bool().unwrap())
                .collect()
        };
        // The serving container passed its probe; the sidecar's is still unmet.
        let mut rep = replica("p", ReplicaPhase::Starting, "10.88.0.5:8080");
        rep.unready = vec!["proxy".into()];
        let p = make_pod(&r, &t, &rep, "node");
        assert_eq!(ready(&p), [true, false]);
        let cond = &p["status"]["conditions"][2];
        assert_eq!(
            (&cond["type"], &cond["status"]),
            (&"Ready".into(), &"False".into())
        );
        assert_eq!(cond["message"], "containers with unready status: [proxy]");
        // Both unmet; then no report at all (not running yet): none is ready.
        rep.unready = vec![serving.clone(), "proxy".into()];
        assert_eq!(ready(&make_pod(&r, &t, &rep, "node")), [false, false]);
        rep.unready.clear();
        let p = make_pod(&r, &t, &rep, "node");
        assert_eq!(ready(&p), [false, false]);
        assert_eq!(
            p["status"]["conditions"][2]["message"],
            format!("containers with unready status: [{serving} proxy]")
        );
        rep.phase = ReplicaPhase::Ready;
        assert_eq!(ready(&make_pod(&r, &t, &rep, "node")), [true, true]);
    }

    #[test]
    fn pods_report_their_init_containers_as_the_kubelet() {
        let mut r = rev();
        let init = |name: &str| wisp_api::serving::Container {
            name: name.into(),
            image: format!("example.com/{name}@sha256:1"),
            ..Default::default()
        };
        r.spec.pod.init_containers = vec![init("schema"), init("migrate")];
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        // The second init container failed and backs off; the first completed.
        let mut rep = replica("p", ReplicaPhase::BackOff, "10.88.0.5:8080");
        rep.init_done = 1;
        rep.restarts = 2;
        rep.last_exit = Some(ExitInfo {
            code: Some(7),
            signal: None,
            reason: None,
            message: "no database".into(),
            started_at: at(10),
            finished_at: at(20),
            init_container: Some("migrate".into()),
        });
        let p = make_pod(&r, &t, &rep, "node");
        let inits = &p["status"]["initContainerStatuses"];
        assert_eq!(inits[0]["name"], "schema");
        assert_eq!(inits[0]["state"]["terminated"]["reason"], "Completed");
        assert_eq!(inits[0]["imageID"], "example.com/schema@sha256:1");
        assert_eq!(inits[1]["name"], "migrate");
        assert_eq!(inits[1]["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(inits[1]["lastState"]["terminated"]["exitCode"], 7);
        assert_eq!(inits[1]["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(
            inits[1]["lastState"]["terminated"]["message"],
            "no database"
        );
        assert_eq!(inits[1]["restartCount"], 2);
        // The app waits, never started, with no exit of its own.
        let cs = &p["status"]["containerStatuses"][0];
        assert_eq!(cs["state"]["waiting"]["reason"], POD_INITIALIZING);
        assert_eq!(cs["restartCount"], 0);
        assert_eq!(cs["lastState"], json!({}));
        assert_eq!(p["status"]["phase"], "Pending");
        let initialized = &p["status"]["conditions"][1];
        assert_eq!(
            (
                &initialized["type"],
                &initialized["status"],
                &initialized["reason"]
            ),
            (
                &json!("Initialized"),
                &json!("False"),
                &json!("ContainersNotInitialized")
            )
        );
        assert_eq!(
            initialized["message"],
            "containers with incomplete status: [migrate]"
        );

        // Once both completed, the app's own state shows.
        let mut running = replica("p", ReplicaPhase::Ready, "10.88.0.5:8080");
        running.init_done = 2;
        running.times.started = at(30);
        let p = make_pod(&r, &t, &running, "node");
        assert_eq!(
            p["status"]["initContainerStatuses"][1]["state"]["terminated"]["exitCode"],
            0
        );
        assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_object());
        assert_eq!(p["status"]["conditions"][1]["status"], "True");
        assert_eq!(p["status"]["phase"], "Running");
    }

    #[test]
    fn events_of_a_change() {
        let r = rev();
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        let d = make_deployment(&r, &t, 1, &[], 600, None, testing::test_clock());
        let started = make_pod(
            &r,
            &t,
            &replica("p", ReplicaPhase::Ready, "127.0.0.1:1"),
            "n",
        );
        let started = std::sync::Arc::new(started);
        let evs = events(&d, "h", None, 1, &[], std::slice::from_ref(&started), "n");
        assert_eq!(
            evs[0].4,
            "Scaled up replica set hello-00001-deployment-h to 1"
        );
        let reasons: Vec<&str> = evs.iter().map(|e| e.3).collect();
        assert_eq!(reasons, ["ScalingReplicaSet", "Created", "Started"]);
        let mut crashed = replica("p", ReplicaPhase::BackOff, "127.0.0.1:1");
        crashed.restarts = 1;
        let crashed = make_pod(&r, &t, &crashed, "n");
        let evs = events(
            &d,
            "h",
            Some(1),
            1,
            &[started],
            &[std::sync::Arc::new(crashed)],
            "n",
        );
        let reasons: Vec<&str> = evs.iter().map(|e| e.3).collect();
        assert_eq!(reasons, ["BackOff"]);
        assert_eq!(evs[0].1.field_path, "spec.containers{user-container}");

        // An init container that fails: its back-off is recorded against it; the app's
        // `PodInitializing` is no failure.
        let mut r = rev();
        r.spec.pod.init_containers = vec![wisp_api::serving::Container {
            name: "migrate".into(),
            ..Default::default()
        }];
        let t = Template {
            template: pod_template(&r, &r.spec.pod),
            hash: "h".into(),
        };
        let mut initializing = replica("p", ReplicaPhase::Starting, "127.0.0.1:1");
        initializing.times.started = None;
        let initializing = std::sync::Arc::new(make_pod(&r, &t, &initializing, "n"));
        let evs = events(
            &d,
            "h",
            Some(1),
            1,
            &[],
            std::slice::from_ref(&initializing),
            "n",
        );
        assert_eq!(
            evs.iter().map(|e| e.3).collect::<Vec<_>>(),
            Vec::<&str>::new()
        );
        let mut failed = replica("p", ReplicaPhase::BackOff, "127.0.0.1:1");
        failed.times.started = None;
        failed.last_exit = Some(ExitInfo {
            code: Some(1),
            signal: None,
            reason: None,
            message: String::new(),
            started_at: None,
            finished_at: None,
            init_container: Some("migrate".into()),
        });
        let failed = std::sync::Arc::new(make_pod(&r, &t, &failed, "n"));
        let evs = events(&d, "h", Some(1), 1, &[initializing], &[failed], "n");
        let reasons: Vec<&str> = evs.iter().map(|e| e.3).collect();
        assert_eq!(reasons, ["BackOff"]);
        assert_eq!(evs[0].1.field_path, "spec.initContainers{migrate}");
        assert!(
            evs[0]
                .4
                .starts_with("Back-off restarting failed container migrate in pod p_")
        );
    }
}
