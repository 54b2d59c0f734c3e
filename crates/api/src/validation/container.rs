//! One container of a revision: Knative's `ContainerMask`, ports, probes, env, security
//! context, volume mounts and image (`pkg/apis/serving/k8s_validation.go`). Paths are relative to the container (`containers[i]` is added by the caller).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::{Config, SecurePodDefaults};
use crate::field_error::FieldError;
use crate::serving::{
    Container, ContainerPort, EnvVar, Probe, SecurityContext, Volume, VolumeMount,
};

/// Ports the queue-proxy and profiling server already listen on in the pod.
const RESERVED_PORTS: [i64; 6] = [8012, 8013, 8022, 9090, 9091, 8008];
const RESERVED_PATHS: [&str; 3] = ["/", "/dev", "/dev/log"];
const MAX_ID: i64 = i32::MAX as i64;

/// Which role a container plays; reserved env vars and probe rules differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Serving,
    Sidecar,
    Init,
}

/// The serving port as Knative's `validateContainersPorts` resolves it (name `http` when
/// unset), for checking that probes name it: `validateProbe` compares only a named port.
#[derive(Clone, Debug)]
pub struct ServingPort {
    pub name: String,
}

/// `must not set the field(s)` for every non-null key of a struct's `extra` map.
pub fn disallowed_extra(extra: &BTreeMap<String, Value>, prefix: &str) -> FieldError {
    let paths: Vec<String> = extra
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| {
            if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            }
        })
        .collect();
    if paths.is_empty() {
        return FieldError::none();
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    FieldError::disallowed(&refs)
}

/// Fields of `corev1.PodSpec` and `corev1.Container` that Go holds by value (not behind a
/// pointer): at their zero value (`false`, `""`, `0`, `{}`, `[]`) Go cannot tell them from
/// unset, so Knative's field masks (`apis.CheckDisallowedFields`) do not count them as set.
/// Pointer fields (`shareProcessNamespace`, `terminationGracePeriodSeconds`,
/// `runtimeClassName`, `affinity`, …) are set by any non-null value.
const GO_VALUE_FIELDS: [&str; 25] = [
    // PodSpec
    "restartPolicy",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccount",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostname",
    "subdomain",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "readinessGates",
    "overhead",
    "topologySpreadConstraints",
    "schedulingGates",
    "resourceClaims",
    "ephemeralContainers",
    // Container
    "stdin",
    "stdinOnce",
    "tty",
    "resizePolicy",
    "volumeDevices",
];

/// Whether a PodSpec or Container field counts as set for Knative's masks (see
/// [`GO_VALUE_FIELDS`]): never when null, and not at its Go zero value for a value field.
pub fn go_field_set(field: &str, v: &Value) -> bool {
    let zero = match v {
        Value::Null => return false,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    !(zero && GO_VALUE_FIELDS.contains(&field))
}

/// Keys of a JSON object, except those listed in `allowed`, as disallowed fields.
fn disallowed_keys(v: &Value, allowed: &[&str], prefix: &str) -> FieldError {
    let Some(obj) = v.as_object() else {
        return FieldError::none();
    };
    let extra: BTreeMap<String, Value> = obj
        .iter()
        .filter(|(k, _)| !allowed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    disallowed_extra(&extra, prefix)
}

/// Everything Knative checks on any container, whatever its role (`validate`).
pub fn validate_container(
    cfg: &Config,
    c: &Container,
    role: Role,
    volumes: &BTreeMap<String, &Volume>,
    port: &ServingPort,
) -> FieldError {
    // `equality.Semantic.DeepEqual(container, corev1.Container{})`: an empty `resources` is
    // Go's zero value too.
    let zero_resources = c.resources.as_ref().is_none_or(|r| r.is_empty());
    let rest = Container {
        resources: None,
        ..c.clone()
    };
    if zero_resources && rest == Container::default() {
        return FieldError::missing(&[""]);
    }
    let mut errs = FieldError::none();
    match role {
        Role::Serving => {
            errs = errs
                .also(
                    validate_probe(c.liveness_probe.as_ref(), Some(port))
                        .via_field("livenessProbe"),
                )
                .also(
                    validate_readiness_probe(c.readiness_probe.as_ref(), Some(port))
                        .via_field("readinessProbe"),
                )
                .also(
                    validate_probe(c.startup_probe.as_ref(), Some(port)).via_field("startupProbe"),
                );
        }
        Role::Sidecar => {
            if cfg.features.multi_container_probing == crate::config::Flag::Enabled {
                errs = errs
                    .also(
                        validate_probe(c.liveness_probe.as_ref(), None).via_field("livenessProbe"),
                    )
                    .also(
                        validate_readiness_probe(c.readiness_probe.as_ref(), None)
                            .via_field("readinessProbe"),
                    )
                    .also(validate_probe(c.startup_probe.as_ref(), None).via_field("startupProbe"));
            } else {
                // Knative only probes the serving container (via the queue-proxy): without
                // multi-container probing every set field of a sidecar's probe, startup
                // probe included, is disallowed (`validateSidecarContainer`).
                for (p, field) in [
                    (&c.liveness_probe, "livenessProbe"),
                    (&c.readiness_probe, "readinessProbe"),
                    (&c.startup_probe, "startupProbe"),
                ] {
                    errs = errs.also(probe_fields_disallowed(p.as_ref(), field));
                }
            }
        }
        Role::Init => {
            // Kubernetes rejects these on init containers; fail early with a clear message.
            for (set, field) in [
                (c.liveness_probe.is_some(), "livenessProbe"),
                (c.readiness_probe.is_some(), "readinessProbe"),
                (c.startup_probe.is_some(), "startupProbe"),
                (
                    c.extra.get("lifecycle").is_some_and(|v| !v.is_null()),
                    "lifecycle",
                ),
            ] {
                if set {
                    errs = errs.also(FieldError::generic(
                        "field not allowed in an init container",
                        &[field],
                    ));
                }
            }
        }
    }

    let set_extra: BTreeMap<String, Value> = c
        .extra
        .iter()
        .filter(|(k, v)| go_field_set(k, v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    errs = errs.also(disallowed_extra(&set_extra, ""));
    if c.name == "queue-proxy" {
        errs = errs.also(FieldError::generic(
            format!("{:?} is a reserved container name", c.name),
            &["name"],
        ));
    }
    // Knative's `validate` checks no name shape (RFC 1123) here: only the reserved name.

    errs = errs.also(validate_env(cfg, &c.env, role).via_field("env"));
    errs = errs.also(validate_env_from(&c.env_from).via_field("envFrom"));
    errs = errs.also(validate_image(c));
    errs = errs.also(
        match role {
            Role::Init => c
                .ports
                .iter()
                .fold(FieldError::none(), |e, p| e.also(validate_port_basic(p))),
            _ => validate_container_ports(&c.ports),
        }
        .via_field("ports"),
    );
    if let Some(r) = &c.resources {
        errs = errs.also(disallowed_extra(&r.extra, "resources"));
    }
    if let Some(sc) = &c.security_context {
        errs = errs.also(validate_security_context(cfg, sc).via_field("securityContext"));
    }
    match c.termination_message_policy.as_str() {
        "" | "ReadFile" | "FallbackToLogsOnError" => {}
        other => errs = errs.also(FieldError::invalid_value(other, "terminationMessagePolicy")),
    }
    errs.also(validate_volume_mounts(cfg, &c.volume_mounts, volumes).via_field("volumeMounts"))
}

/// Image rules. **wisp difference:** wisp can run a plain `command` without a container
/// image, so a container needs `image` *or* `command`; with neither, the error is Knative's
/// `missing field(s): …image`. The reference itself is not parsed here: Knative's webhook
/// does not parse it either (`ko://…`, a scheme or odd slashes are admitted); a reference
/// that does not parse fails tag resolution, a revision condition (`ContainerMissing`).
fn validate_image(c: &Container) -> FieldError {
    if c.image.is_empty() && c.command.is_empty() {
        return FieldError::missing(&["image"]);
    }
    FieldError::none()
}

fn validate_env(cfg: &Config, env: &[EnvVar], role: Role) -> FieldError {
    let mut errs = FieldError::none();
    for (i, e) in env.iter().enumerate() {
        errs = errs.also(validate_env_var(cfg, e, role).via_index(i));
    }
    errs
}

fn validate_env_var(cfg: &Config, e: &EnvVar, role: Role) -> FieldError {
    let mut errs = disallowed_extra(&e.extra, "");
    // The runtime injects these; `PORT` only into the serving container.
    let reserved = match role {
        Role::Serving => &["PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"][..],
        _ => &["K_SERVICE", "K_CONFIGURATION", "K_REVISION"][..],
    };
    if e.name.is_empty() {
        errs = errs.also(FieldError::missing(&["name"]));
    } else if reserved.contains(&e.name.as_str()) {
        errs = errs.also(FieldError::generic(
            format!("{:?} is a reserved environment variable", e.name),
            &["name"],
        ));
    }
    // Knative's `validateEnvVar` checks neither the name's shape (C identifier) nor `value`
    // together with `valueFrom`: only the mask, a missing name and the reserved names.
    if let Some(src) = &e.value_from {
        let mut sub = disallowed_extra(&src.extra, "");
        if !cfg.features.podspec_fieldref.on() {
            let mut paths = Vec::new();
            if src.field_ref.is_some() {
                paths.push("fieldRef");
            }
            if src.resource_field_ref.is_some() {
                paths.push("resourceFieldRef");
            }
            if !paths.is_empty() {
                sub = sub.also(FieldError::disallowed(&paths));
            }
        }
        errs = errs.also(sub.via_field("valueFrom"));
    }
    errs
}

fn validate_env_from(list: &[Value]) -> FieldError {
    let mut errs = FieldError::none();
    for (i, ef) in list.iter().enumerate() {
        errs = errs
            .also(disallowed_keys(ef, &["prefix", "configMapRef", "secretRef"], "").via_index(i));
        let has = |k: &str| ef.get(k).is_some_and(|v| !v.is_null());
        // Knative reports these one-of errors without the index.
        match (has("configMapRef"), has("secretRef")) {
            (true, true) => {
                errs = errs.also(FieldError::multiple_one_of(&["configMapRef", "secretRef"]))
            }
            (false, false) => {
                errs = errs.also(FieldError::missing_one_of(&["configMapRef", "secretRef"]))
            }
            _ => {}
        }
    }
    errs
}

/// Checks for any declared port: mask, reserved ports, range.
fn validate_port_basic(p: &ContainerPort) -> FieldError {
    let mut errs = disallowed_extra(&p.extra, "");
    if RESERVED_PORTS.contains(&p.container_port) {
        errs = errs.also(
            FieldError::invalid_value(
                format!("{} is a reserved port", p.container_port),
                "containerPort",
            )
            .with_details(format!(
                "{} is a reserved port, please use a different value",
                p.container_port
            )),
        );
    }
    if !(0..=65535).contains(&p.container_port) {
        errs = errs.also(FieldError::out_of_bounds(
            p.container_port,
            0,
            65535,
            "containerPort",
        ));
    }
    errs
}

/// The serving port (the first one): also TCP only and a protocol-selecting name.
fn validate_container_ports(ports: &[ContainerPort]) -> FieldError {
    let Some(p) = ports.first() else {
        return FieldError::none();
    };
    let mut errs = validate_port_basic(p);
    if !p.protocol.is_empty() && p.protocol != "TCP" {
        errs = errs.also(FieldError::invalid_value(&p.protocol, "protocol"));
    }
    // The name selects the protocol (h2c = HTTP/2 cleartext); anything else is a mistake.
    if !matches!(p.name.as_str(), "" | "h2c" | "http1") {
        errs = errs.also(
            FieldError::generic(format!("Port name {} is not allowed", p.name), &[""])
                .with_details("Name must be empty, or one of: 'h2c', 'http1'"),
        );
    }
    errs
}

/// A sidecar probe without `multi-container-probing`: every field set is disallowed.
fn probe_fields_disallowed(p: Option<&Probe>, field: &str) -> FieldError {
    let Some(p) = p else {
        return FieldError::none();
    };
    // k8s_validation.go `validateSidecarContainer`: `CheckDisallowedFields(*probe,
    // *ProbeMask(&corev1.Probe{}))` names every field that is not Go's zero value. The
    // handler is the inlined `ProbeHandler`, so a set handler is reported as the probe
    // itself (Knative's `TestSidecarContainerValidation` "probes not allowed":
    // `livenessProbe, readinessProbe, readinessProbe.failureThreshold, …`).
    let mut paths: Vec<&str> = Vec::new();
    if p.http_get.is_some() || p.tcp_socket.is_some() || p.exec.is_some() || p.grpc.is_some() {
        paths.push("");
    }
    for (name, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if v.is_some_and(|v| v != 0) {
            paths.push(name);
        }
    }
    // A pointer: set by any value, zero included.
    if p.termination_grace_period_seconds.is_some() {
        paths.push("terminationGracePeriodSeconds");
    }
    let mut errs = if paths.is_empty() {
        FieldError::none()
    } else {
        FieldError::disallowed(&paths)
    };
    errs = errs.also(disallowed_extra(&p.extra, ""));
    errs.via_field(field)
}

/// Probe port reference: Knative's `validateProbe` only compares a *named* port
/// (`StrVal != ""`) with the serving port's name; an integer port is never checked.
fn check_probe_port(port: &Value, serving: Option<&ServingPort>, path: &str) -> FieldError {
    let Some(sp) = serving else {
        return FieldError::none();
    };
    match port {
        Value::String(s) if !s.is_empty() && *s != sp.name => {
            FieldError::invalid_value(s, path).with_details("Probe port must match container port")
        }
        _ => FieldError::none(),
    }
}

/// `validateProbe`: exactly one handler, fields within the mask, port matching.
fn validate_probe(p: Option<&Probe>, port: Option<&ServingPort>) -> FieldError {
    let Some(p) = p else {
        return FieldError::none();
    };
    let mut errs = disallowed_extra(&p.extra, "");
    let mut handlers = Vec::new();
    if let Some(h) = &p.http_get {
        handlers.push("httpGet");
        errs = errs
            .also(disallowed_extra(&h.extra, "httpGet"))
            .also(check_probe_port(&h.port, port, "httpGet.port"));
    }
    if let Some(t) = &p.tcp_socket {
        handlers.push("tcpSocket");
        errs = errs
            .also(disallowed_extra(&t.extra, "tcpSocket"))
            .also(check_probe_port(&t.port, port, "tcpSocket.port"));
    }
    if let Some(x) = &p.exec {
        handlers.push("exec");
        errs = errs.also(disallowed_extra(&x.extra, "exec"));
    }
    if let Some(g) = &p.grpc {
        // Knative names this handler `gRPC` in the one-of error.
        handlers.push("gRPC");
        errs = errs.also(disallowed_extra(&g.extra, "grpc"));
    }
    match handlers.len() {
        0 => errs.also(FieldError::missing_one_of(&[
            "httpGet",
            "tcpSocket",
            "exec",
            "grpc",
        ])),
        1 => errs,
        _ => errs.also(FieldError::multiple_one_of(&handlers)),
    }
}

/// `validateReadinessProbe`: `periodSeconds: 0` selects Knative's aggressive probing, for
/// which failureThreshold and timeoutSeconds mean nothing.
fn validate_readiness_probe(p: Option<&Probe>, port: Option<&ServingPort>) -> FieldError {
    let Some(p) = p else {
        return FieldError::none();
    };
    let mut errs = validate_probe(Some(p), port);
    let period = p.period_seconds.unwrap_or(0);
    let initial = p.initial_delay_seconds.unwrap_or(0);
    let success = p.success_threshold.unwrap_or(0);
    let timeout = p.timeout_seconds.unwrap_or(0);
    let failure = p.failure_threshold.unwrap_or(0);
    if period < 0 {
        errs = errs.also(FieldError::out_of_bounds(
            period,
            0,
            MAX_ID,
            "periodSeconds",
        ));
    }
    if initial < 0 {
        errs = errs.also(FieldError::out_of_bounds(
            initial,
            0,
            MAX_ID,
            "initialDelaySeconds",
        ));
    }
    if success < 1 {
        errs = errs.also(FieldError::out_of_bounds(
            success,
            1,
            MAX_ID,
            "successThreshold",
        ));
    }
    if period == 0 {
        if failure != 0 {
            errs = errs.also(FieldError::generic(
                "failureThreshold is disallowed when periodSeconds is zero",
                &["failureThreshold"],
            ));
        }
        if timeout != 0 {
            errs = errs.also(FieldError::generic(
                "timeoutSeconds is disallowed when periodSeconds is zero",
                &["timeoutSeconds"],
            ));
        }
    } else {
        if timeout < 1 {
            errs = errs.also(FieldError::out_of_bounds(
                timeout,
                1,
                MAX_ID,
                "timeoutSeconds",
            ));
        }
        if failure < 1 {
            errs = errs.also(FieldError::out_of_bounds(
                failure,
                1,
                MAX_ID,
                "failureThreshold",
            ));
        }
    }
    errs
}

fn validate_security_context(cfg: &Config, sc: &SecurityContext) -> FieldError {
    let mut errs = disallowed_extra(&sc.extra, "");
    // Only an explicit `privileged: false` passes the mask.
    if sc.privileged == Some(true) {
        errs = errs.also(FieldError::disallowed(&["privileged"]));
    }
    if let Some(caps) = &sc.capabilities {
        let mut cerrs = disallowed_extra(&caps.extra, "");
        let bind_only = caps.add.len() == 1 && caps.add[0] == "NET_BIND_SERVICE";
        let add_ok = cfg.features.containerspec_addcapabilities == crate::config::Flag::Enabled
            || (cfg.features.secure_pod_defaults != SecurePodDefaults::Disabled && bind_only);
        if !caps.add.is_empty() && !add_ok {
            cerrs = cerrs.also(FieldError::disallowed(&["add"]));
        }
        errs = errs.also(cerrs.via_field("capabilities"));
    }
    for (v, f) in [
        (sc.run_as_user, "runAsUser"),
        (sc.run_as_group, "runAsGroup"),
    ] {
        if let Some(id) = v
            && !(0..=MAX_ID).contains(&id)
        {
            errs = errs.also(FieldError::out_of_bounds(id, 0, MAX_ID, f));
        }
    }
    errs
}

/// Go's `path.Clean` for the mount-path checks.
pub fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|s| *s != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

fn validate_volume_mounts(
    cfg: &Config,
    mounts: &[VolumeMount],
    volumes: &BTreeMap<String, &Volume>,
) -> FieldError {
    let mut errs = FieldError::none();
    let mut seen_paths = BTreeSet::new();
    for (i, vm) in mounts.iter().enumerate() {
        let mut e = disallowed_extra(&vm.extra, "");
        let volume = volumes.get(&vm.name);
        if volume.is_none() {
            e = e.also(FieldError::generic(
                "volumeMount has no matching volume",
                &["name"],
            ));
        }
        let clean = clean_path(&vm.mount_path);
        if vm.mount_path.is_empty() {
            e = e.also(FieldError::missing(&["mountPath"]));
        } else if RESERVED_PATHS.contains(&clean.as_str()) {
            e = e.also(FieldError::generic(
                format!("mountPath {clean:?} is a reserved path"),
                &["mountPath"],
            ));
        } else if !vm.mount_path.starts_with('/') {
            e = e.also(FieldError::invalid_value(&vm.mount_path, "mountPath"));
        } else if seen_paths.contains(&clean) {
            e = e.also(FieldError::invalid_value(
                format!("{:?} must be unique", vm.mount_path),
                "mountPath",
            ));
        }
        seen_paths.insert(clean);

        // Writable mounts only make sense for scratch or claimed storage; config and secrets
        // are shared and must not be written through.
        let has = |k: &str| volume.is_some_and(|v| v.source.contains_key(k));
        let writable_kind = has("emptyDir") || has("persistentVolumeClaim") || has("ephemeral");
        let read_only = vm.read_only.unwrap_or(false);
        if !writable_kind && !read_only {
            e = e.also(FieldError::generic(
                "volume mount should be readOnly for this type of volume",
                &["readOnly"],
            ));
        }
        let pvc_read_only = volume
            .and_then(|v| v.source.get("persistentVolumeClaim"))
            .and_then(|p| p.get("readOnly"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if pvc_read_only && !read_only {
            e = e.also(FieldError::generic(
                "volume is readOnly but volume mount is not",
                &["readOnly"],
            ));
        }
        if let Some(mp) = &vm.mount_propagation {
            if !cfg.features.podspec_volumes_mount_propagation.on() {
                e = e.also(FieldError::disallowed(&["mountPropagation"]));
            } else if !matches!(mp.as_str(), "None" | "HostToContainer") {
                e = e.also(FieldError::invalid_value(mp, "mountPropagation"));
            }
        }
        errs = errs.also(e.via_index(i));
    }
    errs
}

/// With secure-pod-defaults Disabled, Knative warns about each security setting left at
/// Kubernetes' insecure default. `pod_sc` is the pod-level securityContext, if any.
pub fn warn_insecure_defaults(sc: Option<&SecurityContext>, pod_sc: Option<&Value>) -> FieldError {
    let warn = |path: &str| {
        FieldError::generic(
            "Kubernetes default value is insecure, Knative may default this to secure in a future release",
            &[path],
        )
        .at_level(crate::field_error::Level::Warning)
    };
    let default_sc = SecurityContext::default();
    let sc = sc.unwrap_or(&default_sc);
    let pod = |k: &str| pod_sc.and_then(|p| p.get(k)).filter(|v| !v.is_null());
    let mut errs = FieldError::none();
    if sc.run_as_non_root.is_none() && pod("runAsNonRoot").is_none() {
        errs = errs.also(warn("runAsNonRoot"));
    }
    if sc.allow_privilege_escalation.is_none() {
        errs = errs.also(warn("allowPrivilegeEscalation"));
    }
    let container_seccomp = sc.seccomp_profile.as_ref().filter(|v| !v.is_null());
    let pod_seccomp = pod("seccompProfile");
    if container_seccomp.is_none() && pod_seccomp.is_none() {
        errs = errs.also(warn("seccompProfile"));
    } else {
        let typed = |v: Option<&Value>| {
            v.and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
        };
        if !typed(container_seccomp) && !typed(pod_seccomp) {
            errs = errs.also(warn("seccompProfile.type"));
        }
    }
    match &sc.capabilities {
        None => errs = errs.also(warn("capabilities")),
        Some(c) if c.drop.is_empty() => errs = errs.also(warn("capabilities.drop")),
        // "all" is a common misspelling of "ALL" that drops nothing.
        Some(c) if c.drop[0] == "all" => {
            errs = errs.also(
                FieldError::invalid_value("all", "capabilities.drop")
                    .with_details("Must be spelled as 'ALL'")
                    .at_level(crate::field_error::Level::Warning),
            );
        }
        Some(_) => {}
    }
    errs
}
