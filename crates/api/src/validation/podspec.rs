//! The PodSpec part of a RevisionSpec: Knative's `PodSpecMask` with its feature gates,
//! volumes, init containers, the single serving port and multi-container rules
//! (`ValidatePodSpec` in `pkg/apis/serving/k8s_validation.go`). Paths are relative to the RevisionSpec.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::{Config, Flag, SecurePodDefaults};
use crate::field_error::FieldError;
use crate::quantity::Quantity;
use crate::serving::{Container, PodSpec, Volume};

use super::container::{
    Role, ServingPort, disallowed_extra, go_field_set, validate_container, warn_insecure_defaults,
};
use super::names::{dns1123_label, dns1123_subdomain};

const MAX_ID: i64 = i32::MAX as i64;

/// Whether a feature-gated PodSpec field (by JSON name) may be set under `cfg`; `None` for
/// fields Knative never accepts.
fn gate(cfg: &Config, field: &str) -> Option<bool> {
    let f = &cfg.features;
    let flag = match field {
        "affinity" => f.podspec_affinity,
        "topologySpreadConstraints" => f.podspec_topologyspreadconstraints,
        "hostAliases" => f.podspec_hostaliases,
        "nodeSelector" => f.podspec_nodeselector,
        "runtimeClassName" => f.podspec_runtimeclassname,
        "tolerations" => f.podspec_tolerations,
        "shareProcessNamespace" => f.podspec_shareprocessnamespace,
        "priorityClassName" => f.podspec_priorityclassname,
        "schedulerName" => f.podspec_schedulername,
        "dnsPolicy" => f.podspec_dnspolicy,
        "dnsConfig" => f.podspec_dnsconfig,
        "hostIPC" => f.podspec_hostipc,
        "hostPID" => f.podspec_hostpid,
        "hostNetwork" => f.podspec_hostnetwork,
        // `PodSpecMask` always keeps the pod securityContext; `PodSecurityContextMask` then
        // refuses each sub-field the flags do not allow (`validate_pod_security_context`).
        "securityContext" => return Some(true),
        _ => return None,
    };
    Some(flag.on())
}

/// `ValidatePodSpec`.
pub fn validate_pod_spec(cfg: &Config, ps: &PodSpec) -> FieldError {
    let mut errs = FieldError::none();

    // The field mask: ungated or disabled extra fields, `automountServiceAccountToken: true`
    // (pods get no API token unless wanted) and init containers when gated off.
    let mut masked: BTreeMap<String, Value> = ps
        .extra
        .iter()
        .filter(|(k, v)| gate(cfg, k) != Some(true) && go_field_set(k, v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if ps.automount_service_account_token == Some(true) {
        masked.insert("automountServiceAccountToken".into(), Value::Bool(true));
    }
    if !ps.init_containers.is_empty() && !cfg.features.podspec_init_containers.on() {
        masked.insert("initContainers".into(), Value::Bool(true));
    }
    errs = errs.also(disallowed_extra(&masked, ""));

    let pod_sc = ps.extra.get("securityContext").filter(|v| !v.is_null());
    if let Some(sc) = pod_sc {
        errs = errs.also(validate_pod_security_context(cfg, sc).via_field("securityContext"));
    }

    if cfg.features.secure_pod_defaults == SecurePodDefaults::Disabled {
        for (field, list) in [
            ("containers", &ps.containers),
            ("initContainers", &ps.init_containers),
        ] {
            for (i, c) in list.iter().enumerate() {
                errs = errs.also(
                    warn_insecure_defaults(c.security_context.as_ref(), pod_sc)
                        .via_field("securityContext")
                        .via_field_index(field, i),
                );
            }
        }
    }

    let mounted: BTreeSet<&str> = ps
        .init_containers
        .iter()
        .chain(&ps.containers)
        .flat_map(|c| c.volume_mounts.iter().map(|m| m.name.as_str()))
        .collect();
    let (volumes, verrs) = validate_volumes(cfg, &ps.volumes, &mounted);
    errs = errs.also(verrs.via_field("volumes"));

    errs = errs.also(validate_init_containers(
        cfg,
        &ps.init_containers,
        &ps.containers,
        &volumes,
    ));

    let (port, perrs) = containers_port(&ps.containers);
    errs = errs.also(perrs.via_field("containers[*]"));

    match ps.containers.len() {
        0 => errs = errs.also(FieldError::missing(&["containers"])),
        1 => {
            errs = errs.also(
                validate_container(cfg, &ps.containers[0], Role::Serving, &volumes, &port)
                    .via_field_index("containers", 0),
            );
        }
        n => {
            if cfg.features.multi_container != Flag::Enabled {
                errs = errs.also(FieldError::generic(
                    format!("multi-container is off, but found {n} containers"),
                    &[],
                ));
            } else {
                errs = errs.also(validate_containers(cfg, &ps.containers, &volumes, &port));
            }
        }
    }

    if !ps.service_account_name.is_empty() {
        for msg in dns1123_subdomain(&ps.service_account_name) {
            errs = errs.also(
                FieldError::invalid_value(&ps.service_account_name, "serviceAccountName")
                    .with_details(msg),
            );
        }
    }
    errs
}

/// The serving port: exactly one port across all containers (none means 8080 for a single
/// container); the container declaring it is the serving container.
fn containers_port(containers: &[Container]) -> (ServingPort, FieldError) {
    let mut count = 0;
    let mut port = None;
    for c in containers {
        if let Some(p) = c.ports.first() {
            count += c.ports.len();
            port = Some(p);
        }
    }
    let serving = ServingPort {
        name: port
            .map(|p| p.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "http".into()),
    };
    let err = if count == 0 && containers.len() > 1 {
        FieldError::missing(&["ports"])
    } else if count > 1 {
        FieldError::generic("more than one container port is set", &["ports"])
            .with_details("Only a single port is allowed across all containers")
    } else {
        FieldError::none()
    };
    (serving, err)
}

fn validate_containers(
    cfg: &Config,
    containers: &[Container],
    volumes: &BTreeMap<String, &Volume>,
    port: &ServingPort,
) -> FieldError {
    let mut errs = FieldError::none();
    let mut names = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        if !names.insert(c.name.as_str()) {
            errs = errs.also(
                FieldError::generic(format!("duplicate container name {:?}", c.name), &["name"])
                    .via_field_index("containers", i),
            );
        }
        let role = if c.ports.is_empty() {
            Role::Sidecar
        } else {
            Role::Serving
        };
        errs = errs
            .also(validate_container(cfg, c, role, volumes, port).via_field_index("containers", i));
    }
    errs
}

fn validate_init_containers(
    cfg: &Config,
    inits: &[Container],
    containers: &[Container],
    volumes: &BTreeMap<String, &Volume>,
) -> FieldError {
    if inits.is_empty() {
        return FieldError::none();
    }
    if cfg.features.podspec_init_containers != Flag::Enabled {
        return FieldError::generic(
            format!(
                "pod spec support for init-containers is off, but found {} init containers",
                inits.len()
            ),
            &[],
        );
    }
    let mut names: BTreeSet<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    // Init containers have no serving port; a placeholder keeps the signature shared.
    let port = ServingPort {
        name: "http".into(),
    };
    let mut errs = FieldError::none();
    for (i, c) in inits.iter().enumerate() {
        if !names.insert(c.name.as_str()) {
            errs = errs.also(
                FieldError::generic(format!("duplicate container name {:?}", c.name), &["name"])
                    .via_field_index("initContainers", i),
            );
        }
        errs = errs.also(
            validate_container(cfg, c, Role::Init, volumes, &port)
                .via_field_index("initContainers", i),
        );
    }
    errs
}

fn validate_pod_security_context(cfg: &Config, sc: &Value) -> FieldError {
    let Some(obj) = sc.as_object() else {
        return FieldError::none();
    };
    // `PodSecurityContextMask` (k8s_validation.go's `ValidatePodSecurityContext`): every
    // sub-field set but not allowed is named. With only secure-pod-defaults on, the pod-level
    // seccompProfile is the one opt-out; with neither flag, nothing is allowed.
    let allowed: &[&str] = if cfg.features.podspec_securitycontext.on() {
        &[
            "runAsUser",
            "runAsGroup",
            "runAsNonRoot",
            "fsGroup",
            "supplementalGroups",
            "seccompProfile",
        ]
    } else if cfg.features.secure_pod_defaults != SecurePodDefaults::Disabled {
        &["seccompProfile"]
    } else {
        &[]
    };
    let extra: BTreeMap<String, Value> = obj
        .iter()
        .filter(|(k, _)| !allowed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut errs = disallowed_extra(&extra, "");
    for f in ["runAsUser", "runAsGroup", "fsGroup"] {
        if let Some(id) = obj.get(f).and_then(Value::as_i64)
            && !(0..=MAX_ID).contains(&id)
        {
            errs = errs.also(FieldError::out_of_bounds(id, 0, MAX_ID, f));
        }
    }
    if let Some(groups) = obj.get("supplementalGroups").and_then(Value::as_array) {
        for (i, g) in groups.iter().enumerate() {
            if let Some(id) = g.as_i64()
                && !(0..=MAX_ID).contains(&id)
            {
                errs = errs.also(
                    FieldError::out_of_bounds(id, 0, MAX_ID, "")
                        .via_field_index("supplementalGroups", i),
                );
            }
        }
    }
    errs
}

/// Volume sources a Knative revision may use, with the flag that gates each (`None` = always).
fn source_gate(cfg: &Config, kind: &str) -> Option<Option<Flag>> {
    let f = &cfg.features;
    Some(match kind {
        "secret" | "configMap" | "projected" => None,
        "emptyDir" => Some(f.podspec_volumes_emptydir),
        "persistentVolumeClaim" => Some(f.podspec_persistent_volume_claim),
        "hostPath" => Some(f.podspec_volumes_hostpath),
        "csi" => Some(f.podspec_volumes_csi),
        "ephemeral" => Some(f.podspec_volumes_ephemeral),
        "image" => Some(f.podspec_volumes_image),
        _ => return None,
    })
}

/// `ValidateVolumes`: returns the volumes by name for the mount checks.
fn validate_volumes<'a>(
    cfg: &Config,
    vs: &'a [Volume],
    mounted: &BTreeSet<&str>,
) -> (BTreeMap<String, &'a Volume>, FieldError) {
    let mut volumes = BTreeMap::new();
    let mut errs = FieldError::none();
    for (i, v) in vs.iter().enumerate() {
        if volumes.contains_key(&v.name) {
            errs = errs.also(
                FieldError::generic(format!("duplicate volume name {:?}", v.name), &["name"])
                    .via_index(i),
            );
        }
        // An unmounted volume is almost always a typo in a mount name.
        if !mounted.contains(v.name.as_str()) {
            errs = errs.also(
                FieldError::generic(
                    format!("volume with name {:?} not mounted", v.name),
                    &["name"],
                )
                .via_index(i),
            );
        }
        errs = errs.also(validate_volume(cfg, v).via_index(i));
        volumes.insert(v.name.clone(), v);
    }
    (volumes, errs)
}

fn validate_volume(cfg: &Config, v: &Volume) -> FieldError {
    let mut errs = FieldError::none();
    let sources: BTreeMap<&str, &Value> = v
        .source
        .iter()
        .filter(|(_, s)| !s.is_null())
        .map(|(k, s)| (k.as_str(), s))
        .collect();

    if let Some(pvc) = sources.get("persistentVolumeClaim") {
        let claim = pvc.get("claimName").and_then(Value::as_str).unwrap_or("");
        if cfg.features.podspec_persistent_volume_claim != Flag::Enabled {
            errs = errs.also(FieldError::generic(
                format!("Persistent volume claim support is disabled, but found persistent volume claim {claim}"),
                &[],
            ));
        }
        let ro = pvc
            .get("readOnly")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if !ro && cfg.features.podspec_persistent_volume_write != Flag::Enabled {
            errs = errs.also(FieldError::generic(
                format!(
                    "Persistent volume write support is disabled, but found persistent volume claim {claim} that is not read-only"
                ),
                &[],
            ));
        }
    }
    if sources.contains_key("emptyDir") && cfg.features.podspec_volumes_emptydir != Flag::Enabled {
        errs = errs.also(FieldError::generic(
            format!(
                "EmptyDir volume support is disabled, but found EmptyDir volume {}",
                v.name
            ),
            &[],
        ));
    }

    if sources.contains_key("hostPath") && cfg.features.podspec_volumes_hostpath != Flag::Enabled {
        errs = errs.also(FieldError::generic(
            format!(
                "HostPath volume support is disabled, but found HostPath volume {}",
                v.name
            ),
            &[],
        ));
    }

    // k8s_validation.go `validateVolume`: the mask refuses kinds Knative does not know and
    // gated kinds whose flag is off; the one-of count takes every kind Knative knows, gated
    // or not, so an unknown kind alone also gets "expected exactly one, got neither".
    let mut disallowed: Vec<&str> = Vec::new();
    let mut specified: Vec<&str> = Vec::new();
    for &kind in sources.keys() {
        match source_gate(cfg, kind) {
            None => disallowed.push(kind),
            Some(Some(flag)) if !flag.on() => {
                disallowed.push(kind);
                specified.push(kind);
            }
            Some(_) => specified.push(kind),
        }
    }
    if !disallowed.is_empty() {
        errs = errs.also(FieldError::disallowed(&disallowed));
    }

    // Knative replaces (not extends) the errors so far when the name is missing.
    if v.name.is_empty() {
        errs = FieldError::missing(&["name"]);
    } else if !dns1123_label(&v.name).is_empty() {
        errs = errs.also(FieldError::invalid_value(&v.name, "name"));
    }

    for kind in ["secret", "configMap"] {
        if let Some(items) = sources
            .get(kind)
            .and_then(|s| s.get("items"))
            .and_then(Value::as_array)
        {
            for (i, item) in items.iter().enumerate() {
                errs = errs.also(validate_key_to_path(item).via_field_index("items", i));
            }
        }
    }
    if let Some(list) = sources
        .get("projected")
        .and_then(|s| s.get("sources"))
        .and_then(Value::as_array)
    {
        for (i, p) in list.iter().enumerate() {
            // Knative's path omits `sources`: `projected[i]`.
            errs = errs.also(validate_projection(p).via_field_index("projected", i));
        }
    }
    if let Some(ed) = sources.get("emptyDir") {
        let medium = ed.get("medium").and_then(Value::as_str).unwrap_or("");
        if !medium.is_empty() && medium != "Memory" {
            errs = errs.also(FieldError::invalid_value(medium, "medium").via_field("emptyDir"));
        }
        // k8s_validation.go `validateEmptyDirFields`: `SizeLimit.Value() < 0` (rounded away
        // from zero, so any negative quantity) is `ErrInvalidValue(dir.SizeLimit, "sizeLimit")`,
        // the value printed as the Quantity's String().
        if let Some(q) = ed
            .get("sizeLimit")
            .and_then(quantity_of)
            .filter(|q| q.sign() < 0)
        {
            errs = errs.also(FieldError::invalid_value(q, "sizeLimit").via_field("emptyDir"));
        }
    }

    if specified.is_empty() {
        let mut paths = vec!["secret", "configMap", "projected"];
        if cfg.features.podspec_volumes_emptydir == Flag::Enabled {
            paths.push("emptyDir");
        }
        if cfg.features.podspec_persistent_volume_claim == Flag::Enabled {
            paths.push("persistentVolumeClaim");
        }
        errs = errs.also(FieldError::missing_one_of(&paths));
    } else if specified.len() > 1 {
        errs = errs.also(FieldError::multiple_one_of(&specified));
    }
    errs
}

fn validate_key_to_path(item: &Value) -> FieldError {
    let mut errs = FieldError::none();
    for f in ["key", "path"] {
        if item.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
            errs = errs.also(FieldError::missing(&[f]));
        }
    }
    errs
}

fn validate_projection(p: &Value) -> FieldError {
    let mut errs = FieldError::none();
    let kinds = ["secret", "configMap", "serviceAccountToken", "downwardAPI"];
    let specified: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| p.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    for kind in ["secret", "configMap"] {
        if let Some(s) = p.get(kind).filter(|v| !v.is_null()) {
            let mut e = FieldError::none();
            if s.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                e = e.also(FieldError::missing(&["name"]));
            }
            if let Some(items) = s.get("items").and_then(Value::as_array) {
                for (i, item) in items.iter().enumerate() {
                    e = e.also(validate_key_to_path(item).via_field_index("items", i));
                }
            }
            errs = errs.also(e.via_field(kind));
        }
    }
    if let Some(sat) = p.get("serviceAccountToken").filter(|v| !v.is_null())
        && sat
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        errs = errs.also(FieldError::missing(&["path"]).via_field("serviceAccountToken"));
    }
    // k8s_validation.go `validateDownwardAPIProjection` / `validateDownwardAPIVolumeFile`.
    if let Some(items) = p
        .get("downwardAPI")
        .filter(|v| !v.is_null())
        .and_then(|d| d.get("items"))
        .and_then(Value::as_array)
    {
        for (i, item) in items.iter().enumerate() {
            errs = errs.also(
                validate_downward_api_file(item)
                    .via_field_index("items", i)
                    .via_field("downwardAPI"),
            );
        }
    }
    match specified.len() {
        0 => errs.also(FieldError::missing_one_of(&kinds)),
        1 => errs,
        _ => errs.also(FieldError::multiple_one_of(&specified)),
    }
}

/// One `downwardAPI` projection item: exactly one of `fieldRef` / `resourceFieldRef`, and a
/// `path` (Knative's `validateDownwardAPIVolumeFile`).
fn validate_downward_api_file(item: &Value) -> FieldError {
    let mut errs = FieldError::none();
    let set = |k: &str| item.get(k).is_some_and(|v| !v.is_null());
    match (set("fieldRef"), set("resourceFieldRef")) {
        (false, false) => {
            errs = errs.also(FieldError::missing_one_of(&[
                "fieldRef",
                "resourceFieldRef",
            ]));
        }
        (true, true) => {
            errs = errs.also(FieldError::generic(
                "Within a single item, cannot set both",
                &["resourceFieldRef", "fieldRef"],
            ));
        }
        _ => {}
    }
    if item
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        errs = errs.also(FieldError::missing(&["path"]));
    }
    errs
}

/// A quantity given as a JSON string or number; `None` when it does not parse (decoding
/// already refuses a malformed `emptyDir.sizeLimit`, as Go's does).
fn quantity_of(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s.trim()).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}
