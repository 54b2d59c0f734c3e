//! Pure functions from a Knative container (and its image's config) to what runc runs: the
//! process (argv, env, cwd, user) per Kubernetes' rules, and the OCI runtime spec
//! (`config.json`) built with `oci-spec`'s types.

use std::{collections::HashSet, path::PathBuf, str::FromStr};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxMemoryBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, LinuxResourcesBuilder, LinuxSeccomp, Mount,
    MountBuilder, ProcessBuilder, RootBuilder, Spec, UserBuilder,
};
use wisp_api::serving::Container;

use super::ImageConfig;
use crate::{Failure, process::expand};

/// `PATH` for an image whose config has none, as containerd sets it
/// (`oci.WithDefaultPathEnv`).
pub(crate) const DEFAULT_PATH: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The process of one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub argv: Vec<String>,
    /// `KEY=VALUE`, in order; later entries win.
    pub env: Vec<String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
}

/// Who the container belongs to, for `K_*` and Kubernetes' error messages.
pub(crate) struct Identity<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: &'a str,
    pub service: &'a str,
    pub configuration: &'a str,
    pub revision: &'a str,
    /// Whether the container gets Knative's `K_*` variables: every app container does
    /// (`makeContainer`); an init container does not (`BuildPodSpec` keeps them as written).
    pub app: bool,
}

/// Kubernetes' `CreateContainerConfigError`: the container cannot be configured.
fn config_error(message: String) -> Failure {
    Failure {
        reason: "CreateContainerConfigError".into(),
        message,
    }
}

/// The process a container runs, by Kubernetes' rules:
/// - argv: `command` replaces the image's ENTRYPOINT and `args` its CMD; with `args` only,
///   ENTRYPOINT + `args` (`kubelet/kuberuntime`'s `makeCommandAndArgs`, containerd's
///   `WithProcessArgs`). `$(VAR)` in `command` and `args` expands against the container's
///   env, not the image's (the kubelet never sees the image env).
/// - env: the image's `Env` (with containerd's default `PATH` when it has none), then the
///   container's `env`, then `K_SERVICE`, `K_CONFIGURATION`, `K_REVISION` and, for the
///   serving container only, `PORT`, in the order Knative's `makeContainer` and
///   `makeServingContainer` (`pkg/reconciler/revision/resources/deploy.go`) append them; so
///   `$(PORT)` expands in `command` and `args` but not in `env`, as on a cluster.
/// - cwd: `workingDir`, else the image's `WorkingDir`, else `/`.
/// - user: `securityContext.runAsUser`/`runAsGroup` over the image's `User`; `runAsNonRoot`
///   refuses root as `kubelet/kuberuntime/security_context_others.go` (`verifyRunAsNonRoot`)
///   does. A named image user is looked up in `passwd`/`group` (the image's `/etc/passwd`).
pub(crate) fn plan(
    c: &Container,
    image: &ImageConfig,
    port: Option<u16>,
    id: &Identity<'_>,
    passwd: &str,
    group: &str,
) -> Result<Plan, Failure> {
    // No host variables pass through into a container. (`valueFrom` entries are named in
    // the platform's warning.)
    let mut k8s_env = Vec::new();
    let _skipped = expand::push_container_env(&mut k8s_env, c);
    if id.app {
        k8s_env.push(("K_SERVICE".into(), id.service.into()));
        k8s_env.push(("K_CONFIGURATION".into(), id.configuration.into()));
        k8s_env.push(("K_REVISION".into(), id.revision.into()));
    }
    if let Some(port) = port {
        k8s_env.push(("PORT".into(), port.to_string()));
    }
    let expanded = expand::argv(c, &k8s_env);
    let (command, args) = expanded.split_at(c.command.len());
    let argv: Vec<String> = if !command.is_empty() {
        expanded.clone()
    } else if !args.is_empty() {
        image
            .entrypoint
            .iter()
            .cloned()
            .chain(args.to_vec())
            .collect()
    } else {
        image.entrypoint.iter().chain(&image.cmd).cloned().collect()
    };
    if argv.is_empty() {
        return Err(config_error(format!(
            "container {} has no command: neither the container nor its image {:?} names a \
             program to run",
            c.name, c.image
        )));
    }
    let mut env: Vec<String> = image.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, DEFAULT_PATH.into());
    }
    env.extend(k8s_env.iter().map(|(k, v)| format!("{k}={v}")));
    let cwd = if !c.working_dir.is_empty() {
        c.working_dir.clone()
    } else {
        image
            .working_dir
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".into())
    };
    let sc = c.security_context.as_ref();
    let run_as_user = sc.and_then(|s| s.run_as_user);
    let run_as_group = sc.and_then(|s| s.run_as_group);
    let (image_user, image_group) = match image.user.as_deref().filter(|u| !u.is_empty()) {
        Some(u) => match u.split_once(':') {
            Some((user, group)) => (Some(user), Some(group)),
            None => (Some(u), None),
        },
        None => (None, None),
    };
    let pod = format!("{}_{}({})", id.pod, id.namespace, id.uid);
    if sc.and_then(|s| s.run_as_non_root) == Some(true) {
        match run_as_user {
            Some(0) => {
                return Err(config_error(format!(
                    "container's runAsUser breaks non-root policy (pod: {pod:?}, container: {})",
                    c.name
                )));
            }
            Some(_) => {}
            None => match image_user.map(|u| u.parse::<u32>()) {
                Some(Ok(uid)) if uid != 0 => {}
                Some(Err(_)) => {
                    return Err(config_error(format!(
                        "container has runAsNonRoot and image has non-numeric user ({}), cannot \
                         verify user is non-root (pod: {pod:?}, container: {})",
                        image_user.unwrap_or_default(),
                        c.name
                    )));
                }
                _ => {
                    return Err(config_error(format!(
                        "container has runAsNonRoot and image will run as root (pod: {pod:?}, \
                         container: {})",
                        c.name
                    )));
                }
            },
        }
    }
    let lookup = |table: &str, name: &str, what: &str| -> Result<(u32, Option<u32>), Failure> {
        if let Ok(n) = name.parse::<u32>() {
            return Ok((n, None));
        }
        // name:x:id:gid:...
        table
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.first() == Some(&name))
            .and_then(|f| {
                let id = f.get(2)?.parse().ok()?;
                Some((id, f.get(3).and_then(|g| g.parse().ok())))
            })
            .ok_or_else(|| {
                config_error(format!(
                    "unable to find {what} {name}: no matching entries in {what} file"
                ))
            })
    };
    let (mut uid, mut gid) = (0, 0);
    if let Some(user) = image_user {
        let (u, primary) = lookup(passwd, user, "user")?;
        uid = u;
        gid = primary.unwrap_or(0);
    }
    if let Some(name) = image_group {
        // name:x:gid:members
        gid = lookup(group, name, "group")?.0;
    }
    if let Some(u) = run_as_user {
        uid = u32::try_from(u).map_err(|_| {
            config_error(format!(
                "runAsUser {u} of container {} is out of range",
                c.name
            ))
        })?;
        // The image's group goes with the image's user; Kubernetes' default group is 0.
        if image_group.is_none() {
            gid = 0;
        }
    }
    if let Some(g) = run_as_group {
        gid = u32::try_from(g).map_err(|_| {
            config_error(format!(
                "runAsGroup {g} of container {} is out of range",
                c.name
            ))
        })?;
    }
    Ok(Plan {
        argv,
        env,
        cwd,
        uid,
        gid,
    })
}

/// containerd's default capability set (`oci/spec.go`, `defaultUnixCaps`), which the
/// kubelet's containers get unless `capabilities` says otherwise.
pub(crate) const DEFAULT_CAPS: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// The capability set after `capabilities.drop` then `add` (containerd's
/// `WithCapabilities`/`WithDroppedCapabilities`: `ALL` drops or adds every one).
pub(crate) fn capabilities(c: &Container) -> Result<HashSet<Capability>, Failure> {
    let mut caps: HashSet<Capability> = DEFAULT_CAPS.into_iter().collect();
    let Some(spec) = c
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
    else {
        return Ok(caps);
    };
    let parse = |name: &str| {
        let bare = name.strip_prefix("CAP_").unwrap_or(name);
        Capability::from_str(&bare.to_ascii_uppercase()).map_err(|_| {
            config_error(format!(
                "container {}: unknown capability {name:?} in securityContext.capabilities",
                c.name
            ))
        })
    };
    for name in &spec.drop {
        if name.eq_ignore_ascii_case("ALL") {
            caps.clear();
        } else {
            caps.remove(&parse(name)?);
        }
    }
    for name in &spec.add {
        if name.eq_ignore_ascii_case("ALL") {
            return Err(config_error(format!(
                "container {}: capability ALL cannot be added by wisp (privileged containers are \
                 not supported)",
                c.name
            )));
        }
        caps.insert(parse(name)?);
    }
    Ok(caps)
}

/// Cgroup limits from `resources.limits`: memory in bytes, cpu as a CFS quota per 100 ms
/// period (the kubelet's `MilliCPUToQuota`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub memory: Option<i64>,
    pub cpu_quota: Option<i64>,
}

/// CFS period the kubelet uses (`QuotaPeriod`, 100 ms).
pub(crate) const CPU_PERIOD: u64 = 100_000;

pub(crate) fn limits(c: &Container) -> Result<Limits, Failure> {
    let Some(res) = &c.resources else {
        return Ok(Limits::default());
    };
    let bad = |what: &str, q: &str| {
        config_error(format!(
            "container {}: resources.limits.{what} {q:?} is not a quantity wisp can apply",
            c.name
        ))
    };
    let memory = match res.limits.get("memory") {
        Some(q) => Some(
            q.scaled_value(0)
                .filter(|b| *b > 0)
                .ok_or_else(|| bad("memory", q.as_str()))?,
        ),
        None => None,
    };
    let cpu_quota = match res.limits.get("cpu") {
        Some(q) => {
            let milli = q.scaled_value(3).ok_or_else(|| bad("cpu", q.as_str()))?;
            // MilliCPUToQuota: at least 1 ms per period.
            Some((milli * CPU_PERIOD as i64 / 1000).max(1000))
        }
        None => None,
    };
    Ok(Limits { memory, cpu_quota })
}

/// Everything that goes into one container's `config.json` besides its process.
#[derive(Clone, Debug)]
pub(crate) struct Bundle {
    pub rootfs: PathBuf,
    pub readonly_rootfs: bool,
    pub hostname: String,
    /// The replica's network namespace (`/var/run/netns/<name>`), shared by its containers.
    pub netns: PathBuf,
    /// Files bind-mounted read-only: (source on the host, destination in the container).
    pub files: Vec<(PathBuf, String)>,
    pub cgroups_path: String,
    pub no_new_privileges: bool,
    pub capabilities: HashSet<Capability>,
    pub limits: Limits,
    /// The seccomp filter (`RuntimeDefault`), or none (`Unconfined`).
    pub seccomp: Option<LinuxSeccomp>,
    /// The container's `volumeMounts`: directories (or, with `subPath`, files) of the
    /// replica's volumes on the host, bind-mounted at their `mountPath`.
    pub volumes: Vec<VolumeBind>,
}

/// One `volumeMount` of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VolumeBind {
    pub source: PathBuf,
    pub destination: String,
    pub read_only: bool,
}

/// The runtime spec of one container: `oci-spec`'s defaults (runc's `runc spec`: the
/// standard /proc, /dev, /sys mounts, masked and read-only paths) with the process, root,
/// namespaces (its own mount, PID, IPC, UTS and cgroup namespaces; the replica's network
/// namespace), the sandbox's files, capabilities and cgroup limits filled in.
pub(crate) fn runtime_spec(plan: &Plan, b: &Bundle) -> Result<Spec, oci_spec::OciSpecError> {
    let caps = b.capabilities.clone();
    // Inheritable and ambient are set empty explicitly: the builder would otherwise fill in
    // runc's defaults, and an ambient capability outside the permitted set makes runc fail
    // ("unable to apply caps"). containerd sets no inheritable capabilities either
    // (CVE-2022-24769), and no ambient ones.
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .inheritable(HashSet::new())
        .ambient(HashSet::new())
        .build()?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .args(plan.argv.clone())
        .env(plan.env.clone())
        .cwd(plan.cwd.clone())
        .user(UserBuilder::default().uid(plan.uid).gid(plan.gid).build()?)
        .no_new_privileges(b.no_new_privileges)
        .capabilities(capabilities)
        .build()?;
    let mut mounts: Vec<Mount> = oci_spec::runtime::get_default_mounts();
    for (source, dest) in &b.files {
        mounts.push(
            MountBuilder::default()
                .destination(dest)
                .typ("bind")
                .source(source)
                .options(vec!["rbind".into(), "ro".into(), "nodev".into()])
                .build()?,
        );
    }
    for v in &b.volumes {
        let mode = if v.read_only { "ro" } else { "rw" };
        mounts.push(
            MountBuilder::default()
                .destination(&v.destination)
                .typ("bind")
                .source(&v.source)
                // `nodev`: see `Ctr::mount_rootfs`.
                .options(vec!["rbind".into(), mode.into(), "nodev".into()])
                .build()?,
        );
    }
    let ns = |typ| LinuxNamespaceBuilder::default().typ(typ).build();
    let namespaces = vec![
        ns(LinuxNamespaceType::Pid)?,
        LinuxNamespaceBuilder::default()
            .typ(LinuxNamespaceType::Network)
            .path(b.netns.clone())
            .build()?,
        ns(LinuxNamespaceType::Ipc)?,
        ns(LinuxNamespaceType::Uts)?,
        ns(LinuxNamespaceType::Mount)?,
        ns(LinuxNamespaceType::Cgroup)?,
    ];
    let mut resources = LinuxResourcesBuilder::default();
    if let Some(limit) = b.limits.memory {
        resources = resources.memory(LinuxMemoryBuilder::default().limit(limit).build()?);
    }
    if let Some(quota) = b.limits.cpu_quota {
        resources = resources.cpu(
            LinuxCpuBuilder::default()
                .quota(quota)
                .period(CPU_PERIOD)
                .build()?,
        );
    }
    let mut linux = LinuxBuilder::default();
    if let Some(seccomp) = &b.seccomp {
        linux = linux.seccomp(seccomp.clone());
    }
    let linux = linux
        .namespaces(namespaces)
        .cgroups_path(PathBuf::from(&b.cgroups_path))
        .resources(resources.build()?)
        .masked_paths(oci_spec::runtime::get_default_maskedpaths())
        .readonly_paths(oci_spec::runtime::get_default_readonly_paths())
        .build()?;
    let mut spec = Spec::default();
    spec.set_process(Some(process))
        .set_root(Some(
            RootBuilder::default()
                .path(b.rootfs.clone())
                .readonly(b.readonly_rootfs)
                .build()?,
        ))
        .set_hostname(Some(b.hostname.clone()))
        .set_mounts(Some(mounts))
        .set_linux(Some(linux));
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use wisp_api::serving::{Capabilities, EnvVar, SecurityContext};

    use super::*;

    fn id() -> Identity<'static> {
        Identity {
            namespace: "default",
            pod: "hello-00001-1",
            uid: "u1",
            service: "hello",
            configuration: "hello",
            revision: "hello-00001",
            app: true,
        }
    }

    fn image(entrypoint: &[&str], cmd: &[&str], user: Option<&str>) -> ImageConfig {
        ImageConfig {
            entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            env: vec!["PATH=/app/bin".into(), "LANG=C.UTF-8".into()],
            working_dir: Some("/app".into()),
            user: user.map(Into::into),
        }
    }

    fn container(command: &[&str], args: &[&str]) -> Container {
        Container {
            name: "user-container".into(),
            image: "example.com/hello".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec![EnvVar {
                name: "GREETING".into(),
                value: Some("hi on $(PORT) $(PATH)".into()),
                ..EnvVar::default()
            }],
            ..Container::default()
        }
    }

    #[test]
    fn command_and_args_override_entrypoint_and_cmd_as_in_kubernetes() {
        /// (what, command, args, argv wanted)
        type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
        let cases: [Case; 4] = [
            (
                "neither: ENTRYPOINT + CMD",
                &[],
                &[],
                &["/ep", "-x", "cmd1"],
            ),
            (
                "command only: CMD dropped",
                &["/bin/app"],
                &[],
                &["/bin/app"],
            ),
            (
                "args only: ENTRYPOINT + args",
                &[],
                &["a1", "$(PORT)"],
                &["/ep", "-x", "a1", "8080"],
            ),
            ("both", &["/bin/app"], &["a1"], &["/bin/app", "a1"]),
        ];
        for (what, command, args, want) in cases {
            let p = plan(
                &container(command, args),
                &image(&["/ep", "-x"], &["cmd1"], None),
                Some(8080),
                &id(),
                "",
                "",
            )
            .unwrap();
            assert_eq!(p.argv, want, "{what}");
        }
    }

    #[test]
    fn env_layers_image_then_runtime_contract_then_container_and_cwd() {
        let p = plan(
            &container(&[], &[]),
            &image(&["/ep"], &[], None),
            Some(8080),
            &id(),
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            p.env,
            [
                "PATH=/app/bin",
                "LANG=C.UTF-8",
                // Neither PORT (appended after it by Knative) nor the image's PATH (the
                // kubelet never sees it) expand in the container's env.
                "GREETING=hi on $(PORT) $(PATH)",
                "K_SERVICE=hello",
                "K_CONFIGURATION=hello",
                "K_REVISION=hello-00001",
                "PORT=8080",
            ]
        );
        // A sidecar gets the K_* variables but no PORT.
        let sidecar = plan(
            &container(&[], &[]),
            &image(&["/ep"], &[], None),
            None,
            &id(),
            "",
            "",
        )
        .unwrap();
        assert!(
            !sidecar.env.iter().any(|e| e.starts_with("PORT=")),
            "{:?}",
            sidecar.env
        );
        assert!(sidecar.env.iter().any(|e| e.starts_with("K_REVISION=")));
        // An init container gets neither (Knative's `BuildPodSpec` keeps it as written).
        let init = plan(
            &container(&[], &[]),
            &image(&["/ep"], &[], None),
            None,
            &Identity { app: false, ..id() },
            "",
            "",
        )
        .unwrap();
        assert!(
            !init
                .env
                .iter()
                .any(|e| e.starts_with("PORT=") || e.starts_with("K_")),
            "{:?}",
            init.env
        );
        assert_eq!(p.cwd, "/app");
        let mut c = container(&[], &[]);
        c.working_dir = "/data".into();
        let mut img = image(&["/ep"], &[], None);
        img.env.clear();
        let p = plan(&c, &img, Some(9000), &id(), "", "").unwrap();
        assert_eq!((p.env[0].as_str(), p.cwd.as_str()), (DEFAULT_PATH, "/data"));
    }

    #[test]
    fn users_and_run_as_non_root() {
        let passwd = "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n";
        let sc = |user: Option<i64>, group: Option<i64>, non_root: Option<bool>| SecurityContext {
            run_as_user: user,
            run_as_group: group,
            run_as_non_root: non_root,
            ..SecurityContext::default()
        };
        type Want = Result<(u32, u32), &'static str>;
        let cases: [(&str, Option<&str>, SecurityContext, Want); 9] = [
            (
                "image default is root",
                None,
                sc(None, None, None),
                Ok((0, 0)),
            ),
            (
                "numeric image user",
                Some("1000:50"),
                sc(None, None, None),
                Ok((1000, 50)),
            ),
            (
                "named image user",
                Some("app"),
                sc(None, None, None),
                Ok((1000, 1001)),
            ),
            (
                "runAsUser wins",
                Some("app"),
                sc(Some(7), None, None),
                Ok((7, 0)),
            ),
            (
                "runAsGroup wins",
                Some("app"),
                sc(Some(7), Some(8), None),
                Ok((7, 8)),
            ),
            (
                "non-root with root image",
                None,
                sc(None, None, Some(true)),
                Err(
                    "container has runAsNonRoot and image will run as root (pod: \"hello-00001-1_default(u1)\", container: user-container)",
                ),
            ),
            (
                "non-root with named user",
                Some("app"),
                sc(None, None, Some(true)),
                Err(
                    "container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: \"hello-00001-1_default(u1)\", container: user-container)",
                ),
            ),
            (
                "non-root satisfied by runAsUser",
                None,
                sc(Some(1), None, Some(true)),
                Ok((1, 0)),
            ),
            (
                "unknown user",
                Some("nobody"),
                sc(None, None, None),
                Err("unable to find user nobody: no matching entries in user file"),
            ),
        ];
        for (what, user, ctx, want) in cases {
            let mut c = container(&["/a"], &[]);
            c.security_context = Some(ctx);
            let got = plan(&c, &image(&[], &[], user), Some(8080), &id(), passwd, "")
                .map(|p| (p.uid, p.gid))
                .map_err(|f| {
                    assert_eq!(f.reason, "CreateContainerConfigError");
                    f.message
                });
            assert_eq!(got, want.map_err(String::from), "{what}");
        }
    }

    #[test]
    fn no_command_anywhere_is_a_config_error() {
        let err = plan(
            &container(&[], &[]),
            &image(&[], &[], None),
            Some(8080),
            &id(),
            "",
            "",
        )
        .unwrap_err();
        assert!(err.message.contains("no command"), "{}", err.message);
    }

    #[test]
    fn capabilities_drop_then_add() {
        let with = |add: &[&str], drop: &[&str]| {
            let mut c = container(&["/a"], &[]);
            c.security_context = Some(SecurityContext {
                capabilities: Some(Capabilities {
                    add: add.iter().map(|s| s.to_string()).collect(),
                    drop: drop.iter().map(|s| s.to_string()).collect(),
                    ..Capabilities::default()
                }),
                ..SecurityContext::default()
            });
            capabilities(&c)
        };
        assert_eq!(capabilities(&container(&["/a"], &[])).unwrap().len(), 14);
        let caps = with(&["NET_ADMIN"], &["ALL"]).unwrap();
        assert_eq!(caps, HashSet::from([Capability::NetAdmin]));
        let caps = with(&["CAP_SYS_TIME"], &["KILL"]).unwrap();
        assert!(caps.contains(&Capability::SysTime) && !caps.contains(&Capability::Kill));
        assert!(
            with(&["NOT_A_CAP"], &[])
                .unwrap_err()
                .message
                .contains("NOT_A_CAP")
        );
    }

    #[test]
    fn quantities_scale_like_apimachinery() {
        let cases: [(&str, u32, Option<i64>); 10] = [
            ("128Mi", 0, Some(128 << 20)),
            ("1G", 0, Some(1_000_000_000)),
            ("1.5Gi", 0, Some(3 << 29)),
            ("500m", 3, Some(500)),
            ("2", 3, Some(2000)),
            ("0.1", 3, Some(100)),
            ("1e3", 0, Some(1000)),
            ("100k", 0, Some(100_000)),
            ("1500m", 0, Some(2)),
            ("12Zi", 0, None),
        ];
        for (q, scale, want) in cases {
            assert_eq!(
                wisp_api::quantity::scaled(q, scale),
                want,
                "{q} scale {scale}"
            );
        }
    }

    #[test]
    fn runtime_spec_carries_the_sandbox() {
        let p = plan(
            &container(&["/a"], &[]),
            &image(&[], &[], None),
            Some(8080),
            &id(),
            "",
            "",
        )
        .unwrap();
        let b = Bundle {
            rootfs: "/b/rootfs".into(),
            readonly_rootfs: true,
            hostname: "hello-00001-1".into(),
            netns: "/var/run/netns/w-2".into(),
            files: vec![("/s/hosts".into(), "/etc/hosts".into())],
            cgroups_path: "/wisp/w/c".into(),
            no_new_privileges: true,
            capabilities: DEFAULT_CAPS.into_iter().collect(),
            limits: Limits {
                memory: Some(64 << 20),
                cpu_quota: Some(50_000),
            },
            seccomp: None,
            volumes: vec![
                VolumeBind {
                    source: "/s/volumes/cfg".into(),
                    destination: "/etc/config".into(),
                    read_only: true,
                },
                VolumeBind {
                    source: "/s/volumes/scratch".into(),
                    destination: "/scratch".into(),
                    read_only: false,
                },
            ],
        };
        let spec = runtime_spec(&p, &b).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["root"]["readonly"], true);
        assert_eq!(json["hostname"], "hello-00001-1");
        assert_eq!(json["process"]["noNewPrivileges"], true);
        assert_eq!(json["process"]["terminal"], false);
        let caps = &json["process"]["capabilities"];
        assert_eq!(caps["bounding"].as_array().unwrap().len(), 14);
        assert_eq!(caps["ambient"], serde_json::json!([]));
        assert_eq!(caps["inheritable"], serde_json::json!([]));
        assert_eq!(json["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(json["linux"]["resources"]["cpu"]["quota"], 50_000);
        let net = json["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["type"] == "network")
            .unwrap();
        assert_eq!(net["path"], "/var/run/netns/w-2");
        assert!(json["linux"].get("seccomp").is_none());
        assert!(
            json["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["destination"] == "/etc/hosts"
                    && m["options"].as_array().unwrap().contains(&"ro".into()))
        );
        let mount = |dest: &str| {
            json["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["destination"] == dest)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            mount("/etc/config"),
            serde_json::json!({"destination": "/etc/config", "type": "bind",
                "source": "/s/volumes/cfg", "options": ["rbind", "ro", "nodev"]})
        );
        assert_eq!(
            mount("/scratch")["options"],
            serde_json::json!(["rbind", "rw", "nodev"])
        );
    }
}
