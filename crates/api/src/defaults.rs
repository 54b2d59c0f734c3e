//! Knative's webhook defaulting (`pkg/apis/serving/v1/service_defaults.go`,
//! `configuration_defaults.go`, `revision_defaults.go`, `route_defaults.go`), as pure
//! functions of the object and the [`Config`].
//!
//! Defaulting runs before validation on every create and update, so every rule here only
//! fills in what is unset (or, for volume mounts, forces what validation would otherwise
//! reject) and is idempotent: defaulting an already-defaulted object changes nothing, which
//! keeps an unchanged re-apply from looking like a spec change that stamps a new Revision.
//!
//! `is_create` exists for the one rule Knative applies only on create (`apis.IsInCreate`):
//! `enableServiceLinks`. Applying it on update would rewrite the spec of objects created
//! before the config value existed and so roll out new Revisions nobody asked for.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::config::{Config, DefaultsConfig, SecurePodDefaults};
use crate::meta::ObjectMeta;
use crate::quantity::Quantity;
use crate::serving::{
    Capabilities, Configuration, Container, Probe, ResourceRequirements, Revision, RevisionSpec,
    Route, SecurityContext, Service, TcpSocketAction, TrafficTarget,
};

/// Volume sources that may be mounted writable; mounts of every other volume (secrets,
/// config maps, projected, …) are forced read-only, as Knative requires them to be.
const WRITABLE_VOLUME_SOURCES: [&str; 3] = ["emptyDir", "persistentVolumeClaim", "ephemeral"];

/// Defaults a Service: its revision template (container names rendered over the Service's
/// metadata) and its traffic, which becomes 100% to the latest revision when empty.
pub fn default_service(svc: &mut Service, cfg: &Config, is_create: bool) {
    default_revision_spec(&mut svc.spec.template.spec, &svc.metadata, cfg, is_create);
    // Only a Service gets default traffic: its configuration is implicit, so "latest
    // revision" is unambiguous. A bare Route with no traffic is left empty and rejected
    // by validation ("Traffic targets sum to 0, want 100"), as in Knative.
    if svc.spec.traffic.is_empty() {
        svc.spec.traffic.push(TrafficTarget {
            percent: Some(100),
            latest_revision: Some(true),
            ..Default::default()
        });
    }
    default_traffic(&mut svc.spec.traffic);
}

/// Defaults a Configuration's revision template (container names rendered over the
/// Configuration's metadata).
pub fn default_configuration(c: &mut Configuration, cfg: &Config, is_create: bool) {
    default_revision_spec(&mut c.spec.template.spec, &c.metadata, cfg, is_create);
}

/// Defaults a Revision's spec (container names rendered over the Revision's own metadata).
pub fn default_revision(r: &mut Revision, cfg: &Config, is_create: bool) {
    default_revision_spec(&mut r.spec, &r.metadata, cfg, is_create);
}

/// Defaults a Route: each traffic target's `latestRevision`. An empty traffic list stays
/// empty (see [`default_service`]). Nothing in a Route depends on the config today; the
/// parameter keeps the four entry points uniform.
pub fn default_route(r: &mut Route, _cfg: &Config) {
    default_traffic(&mut r.spec.traffic);
}

/// `TrafficTarget.SetDefaults` (`pkg/apis/serving/v1/route_defaults.go`): `latestRevision`
/// defaults to "no revision named" and a missing `percent` is stored as an explicit `0`.
fn default_traffic(traffic: &mut [TrafficTarget]) {
    for t in traffic {
        t.latest_revision.get_or_insert(t.revision_name.is_empty());
        t.percent.get_or_insert(0);
    }
}

/// Defaults a RevisionSpec, shared by Service, Configuration and Revision. `parent` is the
/// metadata the container-name templates render over.
pub fn default_revision_spec(
    spec: &mut RevisionSpec,
    parent: &ObjectMeta,
    cfg: &Config,
    is_create: bool,
) {
    let d = &cfg.defaults;

    // 0 is "unset" for the timeout (a zero request deadline is meaningless).
    let timeout = match spec.timeout_seconds {
        Some(t) if t != 0 => t,
        _ => d.revision_timeout_seconds,
    };
    spec.timeout_seconds = Some(timeout);
    // The response-start and idle defaults only make sense below the overall timeout; at or
    // above it they would never fire, so the field is left unset (= off).
    for (field, default) in [
        (
            &mut spec.response_start_timeout_seconds,
            d.revision_response_start_timeout_seconds,
        ),
        (
            &mut spec.idle_timeout_seconds,
            d.revision_idle_timeout_seconds,
        ),
    ] {
        if matches!(*field, None | Some(0)) && default != 0 && default < timeout {
            *field = Some(default);
        }
    }
    spec.container_concurrency
        .get_or_insert(d.container_concurrency);

    // Defaulted names avoid names the user chose, across containers and init containers.
    let taken: BTreeSet<String> = spec
        .pod
        .containers
        .iter()
        .chain(&spec.pod.init_containers)
        .map(|c| c.name.clone())
        .collect();
    default_container_names(&mut spec.pod.containers, &taken, &d.container_name(parent));
    default_container_names(
        &mut spec.pod.init_containers,
        &taken,
        &d.init_container_name(parent),
    );

    let writable: BTreeSet<&str> = spec
        .pod
        .volumes
        .iter()
        .filter(|v| {
            WRITABLE_VOLUME_SOURCES
                .iter()
                .any(|s| v.source.contains_key(*s))
        })
        .map(|v| v.name.as_str())
        .collect();
    let single = spec.pod.containers.len() == 1;
    for c in &mut spec.pod.init_containers {
        // Only the typed value changes (`{}` is what an absent one is stored as): decoding
        // the stored object gives the same value back.
        c.resources
            .get_or_insert_with(ResourceRequirements::default);
    }
    for c in &mut spec.pod.containers {
        default_resources(&mut c.resources, d);
        // The serving container (the only one, or the one with a port) must be probed for
        // readiness; sidecars may go unprobed.
        if single || !c.ports.is_empty() {
            default_serving_readiness_probe(c);
        }
        if let Some(p) = &mut c.readiness_probe {
            default_readiness_thresholds(p);
        }
        for p in [&mut c.readiness_probe, &mut c.liveness_probe]
            .into_iter()
            .flatten()
        {
            if let Some(g) = &mut p.grpc {
                g.service.get_or_insert_with(String::new);
            }
        }
        for m in &mut c.volume_mounts {
            if !writable.contains(m.name.as_str()) {
                m.read_only = Some(true);
            }
        }
    }
    if is_create && !spec.pod.containers.is_empty() && spec.pod.enable_service_links.is_none() {
        spec.pod.enable_service_links = d.enable_service_links;
    }

    let pod_sc = spec.pod.extra.get("securityContext");
    let pod_seccomp_set = pod_sc
        .and_then(|s| s.pointer("/seccompProfile/type"))
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    let pod_run_as_non_root_set = pod_sc
        .and_then(|s| s.get("runAsNonRoot"))
        .is_some_and(|v| !v.is_null());
    let mode = cfg.features.secure_pod_defaults;
    for c in spec
        .pod
        .containers
        .iter_mut()
        .chain(&mut spec.pod.init_containers)
    {
        default_security_context(c, mode, pod_seccomp_set, pod_run_as_non_root_set);
    }
}

/// Knative's `applyDefaultContainerNames`: an unnamed container gets the rendered template;
/// when there are several containers, or the plain name is taken, a numeric suffix `-N` is
/// appended, skipping suffixes that collide with user-chosen names.
fn default_container_names(containers: &mut [Container], taken: &BTreeSet<String>, base: &str) {
    let several = containers.len() > 1;
    let mut next = 0;
    for c in containers.iter_mut().filter(|c| c.name.is_empty()) {
        let mut name = base.to_string();
        if several || taken.contains(&name) {
            loop {
                name = format!("{base}-{next}");
                next += 1;
                if !taken.contains(&name) {
                    break;
                }
            }
        }
        c.name = name;
    }
}

/// Fills `resources.requests` / `resources.limits` entries the container leaves unset from
/// `revision-{cpu,memory,ephemeral-storage}-{request,limit}`. Nothing is added when the
/// config has no value, so the default config leaves `resources` untouched.
fn default_resources(resources: &mut Option<ResourceRequirements>, d: &DefaultsConfig) {
    // Go's `Resources` is a struct: a container always has one (stored as `{}`).
    resources.get_or_insert_with(ResourceRequirements::default);
    let wanted = [
        (false, "cpu", &d.revision_cpu_request),
        (false, "memory", &d.revision_memory_request),
        (
            false,
            "ephemeral-storage",
            &d.revision_ephemeral_storage_request,
        ),
        (true, "cpu", &d.revision_cpu_limit),
        (true, "memory", &d.revision_memory_limit),
        (
            true,
            "ephemeral-storage",
            &d.revision_ephemeral_storage_limit,
        ),
    ];
    for (limit, resource, value) in wanted {
        // The config parser only keeps values that parse.
        let Some(q) = value.as_deref().and_then(|v| Quantity::parse(v).ok()) else {
            continue;
        };
        let res = resources.get_or_insert_with(ResourceRequirements::default);
        let section = if limit {
            &mut res.limits
        } else {
            &mut res.requests
        };
        section.entry(resource.to_string()).or_insert(q);
    }
}

/// The serving container gets a readiness probe with a TCP handler when it has none; the
/// port is Go's zero IntOrString (`tcpSocket: {port: 0}`), meaning the container port.
fn default_serving_readiness_probe(c: &mut Container) {
    let p = c.readiness_probe.get_or_insert_with(Probe::default);
    if p.tcp_socket.is_none() && p.http_get.is_none() && p.exec.is_none() && p.grpc.is_none() {
        p.tcp_socket = Some(TcpSocketAction {
            port: 0.into(),
            ..TcpSocketAction::default()
        });
    }
}

/// Kubernetes' own probe defaults, applied up front so the stored spec shows what runs.
/// Zero means unset for these fields, as in the Go API.
fn default_readiness_thresholds(p: &mut Probe) {
    let unset = |v: Option<i64>| matches!(v, None | Some(0));
    if unset(p.success_threshold) {
        p.success_threshold = Some(1);
    }
    if !unset(p.period_seconds) {
        if unset(p.failure_threshold) {
            p.failure_threshold = Some(3);
        }
        if unset(p.timeout_seconds) {
            p.timeout_seconds = Some(1);
        }
    }
}

/// `secure-pod-defaults`: harden what the user left unset. Settings made at the pod level
/// (seccomp profile, runAsNonRoot) are respected and not repeated on the container.
fn default_security_context(
    c: &mut Container,
    mode: SecurePodDefaults,
    pod_seccomp_set: bool,
    pod_run_as_non_root_set: bool,
) {
    if mode == SecurePodDefaults::Disabled {
        return;
    }
    let needs_low_port = c.ports.iter().any(|p| p.container_port < 1024);
    let sc = c
        .security_context
        .get_or_insert_with(SecurityContext::default);
    sc.allow_privilege_escalation.get_or_insert(false);
    if !pod_seccomp_set {
        let profile = sc
            .seccomp_profile
            .get_or_insert_with(|| Value::Object(Map::new()));
        if profile.is_null() {
            *profile = Value::Object(Map::new());
        }
        if let Some(obj) = profile.as_object_mut() {
            let has_type = obj
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty());
            if !has_type {
                obj.insert("type".into(), Value::String("RuntimeDefault".into()));
            }
        }
    }
    if sc.capabilities.is_none() {
        sc.capabilities = Some(Capabilities {
            drop: vec!["ALL".into()],
            // Binding a port below 1024 needs this capability once ALL is dropped.
            add: if needs_low_port {
                vec!["NET_BIND_SERVICE".into()]
            } else {
                Vec::new()
            },
            ..Default::default()
        });
    }
    if mode == SecurePodDefaults::Enabled && !pod_run_as_non_root_set {
        sc.run_as_non_root.get_or_insert(true);
    }
}

#[cfg(test)]
mod tests {
    use serde::{Serialize, de::DeserializeOwned};
    use serde_json::json;

    use super::*;
    use crate::config::FeaturesConfig;

    fn from<T: DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("test input decodes")
    }

    fn to_json<T: Serialize>(t: &T) -> Value {
        serde_json::to_value(t).expect("encodes")
    }

    fn cfg_with(f: impl FnOnce(&mut Config)) -> Config {
        let mut c = Config::default();
        f(&mut c);
        c
    }

    /// Defaults a RevisionSpec given as JSON (parent metadata `name: hello`) on create.
    fn spec_defaults(cfg: &Config, spec: Value) -> Value {
        let mut s: RevisionSpec = from(spec);
        let parent = ObjectMeta {
            name: "hello".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        default_revision_spec(&mut s, &parent, cfg, true);
        // Idempotent: a second pass changes nothing.
        let once = s.clone();
        default_revision_spec(&mut s, &parent, cfg, true);
        assert_eq!(s, once, "defaulting twice differs from once");
        to_json(&s)
    }

    /// What the default config adds to a single-container spec with no other fields (and
    /// what Go stores for zero values: `resources: {}`, a probe port of `0`).
    fn defaulted_container(extra: Value) -> Value {
        let mut c = json!({
            "name": "user-container",
            "image": "img",
            "resources": {},
            "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1},
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[test]
    fn revision_spec_table() {
        let default = Config::default();
        let cases: Vec<(&str, Config, Value, Value)> = vec![
            (
                "minimal spec gets timeout, CC, name, probe, enableServiceLinks",
                default.clone(),
                json!({"containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "timeout 0 means unset; response-start default not < timeout stays unset",
                default.clone(),
                json!({"timeoutSeconds": 0, "containerConcurrency": 5, "containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 5,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "explicit timeout and response-start are kept",
                default.clone(),
                json!({"timeoutSeconds": 60, "responseStartTimeoutSeconds": 90, "idleTimeoutSeconds": 5, "containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 60,
                    "responseStartTimeoutSeconds": 90,
                    "idleTimeoutSeconds": 5,
                    "containers": [defaulted_container(json!({}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "response-start and idle defaults apply when strictly below the timeout",
                cfg_with(|c| {
                    c.defaults.revision_response_start_timeout_seconds = 100;
                    c.defaults.revision_idle_timeout_seconds = 50;
                    c.defaults.container_concurrency = 10;
                    c.defaults.enable_service_links = None;
                }),
                json!({"containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 10,
                    "timeoutSeconds": 300,
                    "responseStartTimeoutSeconds": 100,
                    "idleTimeoutSeconds": 50,
                    "containers": [defaulted_container(json!({}))],
                }),
            ),
            (
                "response-start and idle defaults are not applied at or above the timeout",
                cfg_with(|c| {
                    c.defaults.revision_response_start_timeout_seconds = 100;
                    c.defaults.revision_idle_timeout_seconds = 200;
                }),
                json!({"timeoutSeconds": 100, "containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 100,
                    "containers": [defaulted_container(json!({}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "multi-container: names get suffixes, only the container with a port is probed",
                default.clone(),
                json!({"containers": [
                    {"image": "a", "ports": [{"containerPort": 8080}]},
                    {"image": "b"},
                    {"name": "user-container-1", "image": "c"},
                ]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [
                        {"name": "user-container-0", "image": "a", "ports": [{"containerPort": 8080}],
                         "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1}, "resources": {}},
                        // -1 is taken by the user, so the next suffix is used.
                        {"name": "user-container-2", "image": "b", "resources": {}},
                        {"name": "user-container-1", "image": "c", "resources": {}},
                    ],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "single container whose default name clashes with an init container",
                default.clone(),
                json!({
                    "containers": [{"image": "a"}],
                    "initContainers": [{"name": "user-container", "image": "i"}, {"image": "j"}],
                }),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({"name": "user-container-0", "image": "a"}))],
                    "initContainers": [
                        {"name": "user-container", "image": "i", "resources": {}},
                        {"name": "init-container-0", "image": "j", "resources": {}},
                    ],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "a single init container keeps the plain template name",
                cfg_with(|c| c.defaults.container_name_template = "{{.Name}}".into()),
                json!({"containers": [{"image": "a"}], "initContainers": [{"image": "i"}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({"name": "hello", "image": "a"}))],
                    "initContainers": [{"name": "init-container", "image": "i", "resources": {}}],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "probe thresholds: period set adds failure/timeout; grpc service defaulted",
                default.clone(),
                json!({"containers": [{"image": "img",
                    "readinessProbe": {"httpGet": {"path": "/ready"}, "periodSeconds": 5},
                    "livenessProbe": {"grpc": {"port": 9000}},
                }]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [{"name": "user-container", "image": "img",
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 0}, "periodSeconds": 5,
                            "successThreshold": 1, "failureThreshold": 3, "timeoutSeconds": 1},
                        "livenessProbe": {"grpc": {"port": 9000, "service": ""}},
                        "resources": {},
                    }],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "probe thresholds set by the user are kept; grpc readiness gets a service",
                default.clone(),
                json!({"containers": [{"image": "img",
                    "readinessProbe": {"grpc": {"port": 9000, "service": "health"}, "periodSeconds": 2,
                        "successThreshold": 2, "failureThreshold": 7, "timeoutSeconds": 4},
                }]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [{"name": "user-container", "image": "img",
                        "readinessProbe": {"grpc": {"port": 9000, "service": "health"}, "periodSeconds": 2,
                            "successThreshold": 2, "failureThreshold": 7, "timeoutSeconds": 4},
                    }],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "mounts of non-emptyDir/PVC/ephemeral volumes are forced read-only",
                default.clone(),
                json!({
                    "containers": [{"image": "img", "volumeMounts": [
                        {"name": "secret", "mountPath": "/s", "readOnly": false},
                        {"name": "cm", "mountPath": "/c"},
                        {"name": "scratch", "mountPath": "/tmp"},
                        {"name": "data", "mountPath": "/data", "readOnly": false},
                        {"name": "eph", "mountPath": "/eph"},
                    ]}],
                    "volumes": [
                        {"name": "secret", "secret": {"secretName": "s"}},
                        {"name": "cm", "configMap": {"name": "c"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                        {"name": "eph", "ephemeral": {}},
                    ],
                }),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({"volumeMounts": [
                        {"name": "secret", "mountPath": "/s", "readOnly": true},
                        {"name": "cm", "mountPath": "/c", "readOnly": true},
                        {"name": "scratch", "mountPath": "/tmp"},
                        // Go omits `readOnly: false` (core/v1 VolumeMount, omitempty).
                        {"name": "data", "mountPath": "/data"},
                        {"name": "eph", "mountPath": "/eph"},
                    ]}))],
                    "volumes": [
                        {"name": "secret", "secret": {"secretName": "s"}},
                        {"name": "cm", "configMap": {"name": "c"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                        {"name": "eph", "ephemeral": {}},
                    ],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "enableServiceLinks set by the user is kept; config true applies otherwise",
                cfg_with(|c| c.defaults.enable_service_links = Some(true)),
                json!({"enableServiceLinks": false, "containers": [{"image": "img"}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "resources come from config where unset",
                cfg_with(|c| {
                    c.defaults.revision_cpu_request = Some("100m".into());
                    c.defaults.revision_memory_limit = Some("1Gi".into());
                    c.defaults.revision_ephemeral_storage_request = Some("500Mi".into());
                }),
                json!({"containers": [{"image": "img", "resources": {"requests": {"cpu": "1"}}}]}),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({"resources": {
                        "requests": {"cpu": "1", "ephemeral-storage": "500Mi"},
                        "limits": {"memory": "1Gi"},
                    }}))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "secure-pod-defaults AllowRootBounded: no runAsNonRoot; low port adds NET_BIND_SERVICE",
                cfg_with(|c| c.features.secure_pod_defaults = SecurePodDefaults::AllowRootBounded),
                json!({
                    "containers": [{"image": "img", "ports": [{"containerPort": 80}]}],
                    "initContainers": [{"image": "init"}],
                }),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "containers": [defaulted_container(json!({
                        "ports": [{"containerPort": 80}],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "seccompProfile": {"type": "RuntimeDefault"},
                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                        },
                    }))],
                    "initContainers": [{"name": "init-container", "image": "init", "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "seccompProfile": {"type": "RuntimeDefault"},
                        "capabilities": {"drop": ["ALL"]},
                    }}],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "secure-pod-defaults Enabled: runAsNonRoot; user settings and pod-level seccomp respected",
                cfg_with(|c| c.features.secure_pod_defaults = SecurePodDefaults::Enabled),
                json!({
                    "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
                    "containers": [{"image": "img", "ports": [{"containerPort": 8080}],
                        "securityContext": {"allowPrivilegeEscalation": true, "capabilities": {"drop": ["NET_RAW"]}}}],
                }),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
                    "containers": [defaulted_container(json!({
                        "ports": [{"containerPort": 8080}],
                        "securityContext": {
                            "allowPrivilegeEscalation": true,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["NET_RAW"]},
                        },
                    }))],
                    "enableServiceLinks": false,
                }),
            ),
            (
                "secure-pod-defaults Enabled: pod-level runAsNonRoot is not repeated",
                cfg_with(|c| c.features.secure_pod_defaults = SecurePodDefaults::Enabled),
                json!({
                    "securityContext": {"runAsNonRoot": false},
                    "containers": [{"image": "img", "securityContext": {"seccompProfile": {"localhostProfile": "x"}}}],
                }),
                json!({
                    "containerConcurrency": 0,
                    "timeoutSeconds": 300,
                    "securityContext": {"runAsNonRoot": false},
                    "containers": [defaulted_container(json!({
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "seccompProfile": {"localhostProfile": "x", "type": "RuntimeDefault"},
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }))],
                    "enableServiceLinks": false,
                }),
            ),
        ];
        for (name, cfg, input, mut want) in cases {
            // Go never omits a container's `resources` (a struct): `{}` where a row has none.
            for list in ["containers", "initContainers"] {
                if let Some(cs) = want.get_mut(list).and_then(Value::as_array_mut) {
                    for c in cs {
                        c.as_object_mut()
                            .expect("container")
                            .entry("resources")
                            .or_insert_with(|| json!({}));
                    }
                }
            }
            let got = spec_defaults(&cfg, input);
            assert_eq!(
                got,
                want,
                "{name}\n got: {}\nwant: {}",
                serde_json::to_string_pretty(&got).unwrap(),
                serde_json::to_string_pretty(&want).unwrap()
            );
        }
    }

    #[test]
    fn enable_service_links_only_on_create() {
        let mut s: RevisionSpec = from(json!({"containers": [{"image": "img"}]}));
        default_revision_spec(&mut s, &ObjectMeta::default(), &Config::default(), false);
        assert_eq!(s.pod.enable_service_links, None);
        default_revision_spec(&mut s, &ObjectMeta::default(), &Config::default(), true);
        assert_eq!(s.pod.enable_service_links, Some(false));
        // Tri-state None in config leaves it unset even on create.
        let cfg = cfg_with(|c| c.defaults.enable_service_links = None);
        let mut s: RevisionSpec = from(json!({"containers": [{"image": "img"}]}));
        default_revision_spec(&mut s, &ObjectMeta::default(), &cfg, true);
        assert_eq!(s.pod.enable_service_links, None);
    }

    #[test]
    fn service_defaults() {
        let cfg = cfg_with(|c| c.defaults.container_name_template = "{{.Name}}-ctr".into());
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "empty traffic becomes 100% latest; names render over the Service",
                json!({"metadata": {"name": "hello"}, "spec": {"template": {"spec": {"containers": [{"image": "img"}]}}}}),
                json!([{"latestRevision": true, "percent": 100}]),
            ),
            (
                // route_defaults.go TrafficTarget.SetDefaults: a missing percent becomes 0.
                "latestRevision defaults from revisionName; percent defaults to 0",
                json!({"metadata": {"name": "hello"}, "spec": {
                    "template": {"spec": {"containers": [{"image": "img"}]}},
                    "traffic": [
                        {"revisionName": "hello-00001", "percent": 50},
                        {"percent": 50},
                        {"tag": "t"},
                        {"revisionName": "x", "latestRevision": true},
                    ],
                }}),
                json!([
                    {"revisionName": "hello-00001", "latestRevision": false, "percent": 50},
                    {"latestRevision": true, "percent": 50},
                    {"tag": "t", "latestRevision": true, "percent": 0},
                    {"revisionName": "x", "latestRevision": true, "percent": 0},
                ]),
            ),
        ];
        for (name, input, want_traffic) in cases {
            let mut svc: Service = from(input);
            default_service(&mut svc, &cfg, true);
            let once = svc.clone();
            default_service(&mut svc, &cfg, true);
            assert_eq!(svc, once, "{name}: not idempotent");
            assert_eq!(to_json(&svc.spec.traffic), want_traffic, "{name}");
            let c = &svc.spec.template.spec;
            assert_eq!(c.pod.containers[0].name, "hello-ctr", "{name}");
            assert_eq!(c.timeout_seconds, Some(300), "{name}");
            assert_eq!(c.container_concurrency, Some(0), "{name}");
            // Template metadata, labels and annotations are untouched.
            assert_eq!(svc.spec.template.metadata, ObjectMeta::default(), "{name}");
            assert!(svc.metadata.annotations.is_empty(), "{name}");
        }
    }

    #[test]
    fn configuration_and_revision_use_their_own_metadata() {
        let cfg = cfg_with(|c| c.defaults.container_name_template = "{{.Name}}".into());
        let mut conf: Configuration = from(json!({
            "metadata": {"name": "cfg"},
            "spec": {"template": {"metadata": {"name": "cfg-v1"}, "spec": {"containers": [{"image": "img"}]}}},
        }));
        default_configuration(&mut conf, &cfg, true);
        assert_eq!(conf.spec.template.spec.pod.containers[0].name, "cfg");
        assert_eq!(conf.spec.template.metadata.name, "cfg-v1");

        let mut rev: Revision = from(json!({
            "metadata": {"name": "cfg-00001"},
            "spec": {"containers": [{"image": "img"}]},
        }));
        default_revision(&mut rev, &cfg, true);
        assert_eq!(rev.spec.pod.containers[0].name, "cfg-00001");
        assert_eq!(rev.spec.timeout_seconds, Some(300));
    }

    #[test]
    fn route_defaults() {
        let cases: Vec<(Value, Value)> = vec![
            // A bare Route gets no default traffic: validation rejects it.
            (
                json!({"metadata": {"name": "r"}, "spec": {}}),
                json!({"metadata": {"name": "r", "creationTimestamp": null}, "spec": {}}),
            ),
            (
                json!({"spec": {"traffic": [
                    {"configurationName": "c", "percent": 90},
                    {"revisionName": "c-00001", "percent": 10},
                    {"revisionName": "c-00002", "latestRevision": false},
                ]}}),
                json!({"metadata": {"creationTimestamp": null}, "spec": {"traffic": [
                    {"configurationName": "c", "latestRevision": true, "percent": 90},
                    {"revisionName": "c-00001", "latestRevision": false, "percent": 10},
                    {"revisionName": "c-00002", "latestRevision": false, "percent": 0},
                ]}}),
            ),
        ];
        for (input, want) in cases {
            let mut r: Route = from(input);
            default_route(&mut r, &Config::default());
            let once = r.clone();
            default_route(&mut r, &Config::default());
            assert_eq!(r, once);
            let got = json!({"metadata": to_json(&r.metadata), "spec": to_json(&r.spec)});
            assert_eq!(got, want);
        }
    }

    #[test]
    fn defaulting_is_idempotent_under_every_mode() {
        let svc: Service = from(json!({
            "metadata": {"name": "hello", "namespace": "ns"},
            "spec": {"template": {"spec": {
                "containers": [
                    {"image": "a", "ports": [{"containerPort": 80}], "readinessProbe": {"periodSeconds": 3},
                     "volumeMounts": [{"name": "s", "mountPath": "/s"}]},
                    {"image": "b", "livenessProbe": {"grpc": {"port": 1}}},
                ],
                "initContainers": [{"image": "i"}, {"image": "j"}],
                "volumes": [{"name": "s", "secret": {"secretName": "s"}}],
            }}},
        }));
        for mode in [
            SecurePodDefaults::Disabled,
            SecurePodDefaults::AllowRootBounded,
            SecurePodDefaults::Enabled,
        ] {
            let cfg = cfg_with(|c| {
                c.features = FeaturesConfig {
                    secure_pod_defaults: mode,
                    ..Default::default()
                };
                c.defaults.revision_cpu_request = Some("50m".into());
                c.defaults.revision_idle_timeout_seconds = 10;
            });
            for is_create in [true, false] {
                let mut once = svc.clone();
                default_service(&mut once, &cfg, is_create);
                let mut twice = once.clone();
                default_service(&mut twice, &cfg, is_create);
                assert_eq!(once, twice, "{mode:?} create={is_create}");
                // And the defaulted object survives a JSON round trip unchanged.
                let round: Service = from(to_json(&once));
                assert_eq!(round, once, "{mode:?} create={is_create}");
            }
        }
    }
}
