//! `config-features`: its keys, defaults and checks, after Knative's `pkg/apis/config/features.go`.

use super::*;

pub(super) fn features(d: &Data) -> Result<FeaturesConfig, ConfigError> {
    let mut c = FeaturesConfig::default();
    for (key, target) in flag_fields(&mut c) {
        d.flag(key, target)?;
    }
    if let Some((k, v)) = d.get(&["secure-pod-defaults"]) {
        c.secure_pod_defaults = [
            ("Disabled", SecurePodDefaults::Disabled),
            ("AllowRootBounded", SecurePodDefaults::AllowRootBounded),
            ("Enabled", SecurePodDefaults::Enabled),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(v))
        .map(|(_, s)| s)
        .ok_or_else(|| {
            d.invalid(
                k,
                format!("{v:?} is not one of Disabled, AllowRootBounded, Enabled"),
            )
        })?;
    }
    Ok(c)
}

/// Every boolean-ish key of config-features (Knative's `pkg/apis/config/features.go`), with
/// the field it sets.
pub(super) fn flag_fields(c: &mut FeaturesConfig) -> [(&'static str, &mut Flag); 32] {
    [
        ("multi-container", &mut c.multi_container),
        ("multi-container-probing", &mut c.multi_container_probing),
        ("kubernetes.podspec-affinity", &mut c.podspec_affinity),
        (
            "kubernetes.podspec-topologyspreadconstraints",
            &mut c.podspec_topologyspreadconstraints,
        ),
        ("kubernetes.podspec-hostaliases", &mut c.podspec_hostaliases),
        (
            "kubernetes.podspec-nodeselector",
            &mut c.podspec_nodeselector,
        ),
        ("kubernetes.podspec-tolerations", &mut c.podspec_tolerations),
        ("kubernetes.podspec-fieldref", &mut c.podspec_fieldref),
        (
            "kubernetes.podspec-runtimeclassname",
            &mut c.podspec_runtimeclassname,
        ),
        ("kubernetes.podspec-dnspolicy", &mut c.podspec_dnspolicy),
        ("kubernetes.podspec-dnsconfig", &mut c.podspec_dnsconfig),
        (
            "kubernetes.podspec-securitycontext",
            &mut c.podspec_securitycontext,
        ),
        (
            "kubernetes.podspec-shareprocessnamespace",
            &mut c.podspec_shareprocessnamespace,
        ),
        ("kubernetes.podspec-hostipc", &mut c.podspec_hostipc),
        ("kubernetes.podspec-hostpid", &mut c.podspec_hostpid),
        ("kubernetes.podspec-hostnetwork", &mut c.podspec_hostnetwork),
        (
            "kubernetes.podspec-priorityclassname",
            &mut c.podspec_priorityclassname,
        ),
        (
            "kubernetes.podspec-schedulername",
            &mut c.podspec_schedulername,
        ),
        (
            "kubernetes.containerspec-addcapabilities",
            &mut c.containerspec_addcapabilities,
        ),
        (
            "kubernetes.podspec-init-containers",
            &mut c.podspec_init_containers,
        ),
        (
            "kubernetes.podspec-persistent-volume-claim",
            &mut c.podspec_persistent_volume_claim,
        ),
        (
            "kubernetes.podspec-persistent-volume-write",
            &mut c.podspec_persistent_volume_write,
        ),
        (
            "kubernetes.podspec-volumes-emptydir",
            &mut c.podspec_volumes_emptydir,
        ),
        (
            "kubernetes.podspec-volumes-hostpath",
            &mut c.podspec_volumes_hostpath,
        ),
        ("kubernetes.podspec-volumes-csi", &mut c.podspec_volumes_csi),
        (
            "kubernetes.podspec-volumes-ephemeral",
            &mut c.podspec_volumes_ephemeral,
        ),
        (
            "kubernetes.podspec-volumes-image",
            &mut c.podspec_volumes_image,
        ),
        (
            "kubernetes.podspec-volumes-mount-propagation",
            &mut c.podspec_volumes_mount_propagation,
        ),
        ("tag-header-based-routing", &mut c.tag_header_based_routing),
        ("autodetect-http2", &mut c.autodetect_http2),
        ("queueproxy.mount-podinfo", &mut c.queueproxy_mount_podinfo),
        (
            "queueproxy.resource-defaults",
            &mut c.queueproxy_resource_defaults,
        ),
    ]
}
