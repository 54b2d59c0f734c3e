//! A container's cgroups, made by wisp itself (cgroupfs, no systemd): one directory per
//! mounted hierarchy at the runtime spec's `cgroupsPath`, as runc makes them, so the
//! container is accounted and limited wherever the machine's controllers are (v1, v2, or
//! both as here: v1 controllers beside an empty v2 tree). The container's init joins them
//! itself before it starts the app.

use std::{
    io,
    path::{Path, PathBuf},
};

use oci_spec::runtime::LinuxResources;

/// One mounted cgroup hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    pub mount_point: PathBuf,
    /// cgroup2 (the unified hierarchy).
    pub unified: bool,
    /// v1: the controllers the hierarchy carries (`cpu`, `memory`, `name=systemd`, …);
    /// v2: those its root makes available (`cgroup.controllers`).
    pub controllers: Vec<String>,
}

/// The (mount point, fstype, super options) of each line of a `/proc/self/mountinfo`:
/// `id parent maj:min root mount-point options [optional…] - fstype source super-options`.
fn mounts(mountinfo: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        let mut right = right.split(' ');
        let (fstype, _, super_options) = (right.next()?, right.next()?, right.next()?);
        Some((mount_point, fstype, super_options))
    })
}

/// The cgroup hierarchies in a `/proc/self/mountinfo` (each once, by mount point).
pub(crate) fn parse_mountinfo(mountinfo: &str) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = Vec::new();
    for (mount_point, fstype, super_options) in mounts(mountinfo) {
        let hierarchy = match fstype {
            "cgroup" => Hierarchy {
                mount_point: PathBuf::from(unescape(mount_point)),
                unified: false,
                controllers: super_options
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent"))
                    .filter(|o| !matches!(*o, "noprefix" | "clone_children" | "xattr"))
                    .map(str::to_owned)
                    .collect(),
            },
            "cgroup2" => Hierarchy {
                mount_point: PathBuf::from(unescape(mount_point)),
                unified: true,
                controllers: Vec::new(),
            },
            _ => continue,
        };
        if !found.iter().any(|h| h.mount_point == hierarchy.mount_point) {
            found.push(hierarchy);
        }
    }
    found
}

/// The cgroup2 mount to remount with `favordynmods`, and the options to remount it with
/// (its own cgroup2 options kept, `favordynmods` added); None when there is no cgroup2
/// mount or it has the option already.
///
/// Moving a task into a cgroup takes the kernel's global `cgroup_threadgroup_rwsem` for
/// writing, and by default that waits for an RCU grace period: 10–30 ms on this VM, paid by
/// every container start (its init joins its cgroups), against 0.5 ms with the option.
/// Linux made it a mount option for machines that create cgroups often (6.0,
/// `Documentation/admin-guide/cgroup-v2.rst`), at the price of slightly dearer forks and
/// exits. The semaphore is global, so the unified mount's option serves v1 hierarchies too.
pub(crate) fn favordynmods_remount(mountinfo: &str) -> Option<(PathBuf, String)> {
    let (mount_point, _, super_options) = mounts(mountinfo).find(|m| m.1 == "cgroup2")?;
    let mut options: Vec<&str> = super_options
        .split(',')
        .filter(|o| !matches!(*o, "rw" | "ro" | "seclabel"))
        .collect();
    if options.contains(&"favordynmods") {
        return None;
    }
    options.push("favordynmods");
    Some((PathBuf::from(unescape(mount_point)), options.join(",")))
}

/// Sets `favordynmods` on the machine's cgroup2 mount (see [`favordynmods_remount`]) if it
/// is not set. Left set when wisp stops: it changes no behaviour, only the cost of cgroup
/// changes, and another wisp (or container runtime) on the machine may rely on it.
pub(crate) fn favor_dynamic_modifications() {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let Some((mount_point, options)) = favordynmods_remount(&mountinfo) else {
        return;
    };
    match nix::mount::mount(
        None::<&str>,
        &mount_point,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT,
        Some(options.as_str()),
    ) {
        Ok(()) => tracing::info!(
            mount = %mount_point.display(),
            "cgroup2 remounted with favordynmods: a container start no longer waits for an \
             RCU grace period to join its cgroups"
        ),
        Err(e) => tracing::debug!(
            mount = %mount_point.display(),
            "cgroup2 left without favordynmods: {e}"
        ),
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The machine's hierarchies, v2 ones with their available controllers.
pub(crate) fn hierarchies() -> io::Result<Vec<Hierarchy>> {
    let mut all = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo")?);
    for h in all.iter_mut().filter(|h| h.unified) {
        h.controllers = std::fs::read_to_string(h.mount_point.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
    }
    Ok(all)
}

/// Which hierarchy applies a controller's limits: a v1 hierarchy carrying it, else the
/// unified one if it offers it (on a hybrid machine the v2 tree has none).
fn owner<'a>(all: &'a [Hierarchy], controller: &str) -> Option<&'a Hierarchy> {
    all.iter()
        .find(|h| !h.unified && h.controllers.iter().any(|c| c == controller))
        .or_else(|| {
            all.iter()
                .find(|h| h.unified && h.controllers.iter().any(|c| c == controller))
        })
}

/// The files (relative to the container's cgroup directory in `hierarchy`) and values
/// that apply `resources` there, in the order they must be written.
pub(crate) fn limit_files(
    all: &[Hierarchy],
    hierarchy: &Hierarchy,
    resources: Option<&LinuxResources>,
) -> Vec<(&'static str, String)> {
    let mut files = Vec::new();
    let Some(r) = resources else {
        return files;
    };
    let here = |controller| owner(all, controller) == Some(hierarchy);
    if let Some(limit) = r.memory().as_ref().and_then(|m| m.limit())
        && here("memory")
    {
        files.push(if hierarchy.unified {
            ("memory.max", limit.to_string())
        } else {
            ("memory.limit_in_bytes", limit.to_string())
        });
    }
    if let Some(cpu) = r.cpu().as_ref()
        && let Some(quota) = cpu.quota()
        && here("cpu")
    {
        let period = cpu.period().unwrap_or(100_000);
        if hierarchy.unified {
            files.push(("cpu.max", format!("{quota} {period}")));
        } else {
            // The period first: a quota is checked against the period in force.
            files.push(("cpu.cfs_period_us", period.to_string()));
            files.push(("cpu.cfs_quota_us", quota.to_string()));
        }
    }
    files
}

/// The v2 controllers a container's limits need enabled on the way down to it.
fn v2_controllers(resources: Option<&LinuxResources>) -> Vec<&'static str> {
    let mut needed = Vec::new();
    if let Some(r) = resources {
        if r.memory().as_ref().and_then(|m| m.limit()).is_some() {
            needed.push("memory");
        }
        if r.cpu().as_ref().and_then(|c| c.quota()).is_some() {
            needed.push("cpu");
        }
    }
    needed
}

/// The hierarchies a container joins: every one, but the CPU controller's only for a CPU
/// limit. A CPU cgroup without a quota enforces nothing here (wisp sets no shares from
/// requests), yet it makes the app a scheduling group of its own, and each wake-up of a
/// group competes with every runnable task of the machine as one: on this 2-CPU machine
/// under load, a container replica answered a one-connection ping-pong 3–10× slower in
/// its CPU cgroup than in wisp's (`bench/results/dataplane-probe-containers.md`). The
/// kubelet creates one per container; wisp, with no node allocation to divide, does not.
pub(crate) fn joined<'a>(
    all: &'a [Hierarchy],
    resources: Option<&LinuxResources>,
) -> Vec<&'a Hierarchy> {
    let cpu_limit = resources
        .and_then(|r| r.cpu().as_ref())
        .and_then(|c| c.quota())
        .is_some();
    all.iter()
        .filter(|h| cpu_limit || h.unified || !h.controllers.iter().any(|c| c == "cpu"))
        .collect()
}

/// The directory of `cgroups_path` (absolute, as in the runtime spec) in a hierarchy.
pub(crate) fn dir(h: &Hierarchy, cgroups_path: &str) -> PathBuf {
    h.mount_point.join(cgroups_path.trim_start_matches('/'))
}

/// Makes the container's cgroup in every hierarchy and applies its limits. Returns the
/// directories made (deepest last), for [`remove`].
pub(crate) fn create(
    all: &[Hierarchy],
    cgroups_path: &str,
    resources: Option<&LinuxResources>,
) -> io::Result<Vec<PathBuf>> {
    let mut made = Vec::new();
    for h in joined(all, resources) {
        let target = dir(h, cgroups_path);
        if h.unified {
            let wanted: Vec<&str> = v2_controllers(resources)
                .into_iter()
                .filter(|c| owner(all, c) == Some(h))
                .collect();
            enable_v2(h, &target, &wanted)?;
        }
        make_dirs(h, &target)?;
        for (file, value) in limit_files(all, h, resources) {
            std::fs::write(target.join(file), &value).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: writing {value}: {e}", target.join(file).display()),
                )
            })?;
        }
        made.push(target);
    }
    Ok(made)
}

/// `mkdir -p` in a hierarchy. A new v1 cpuset cgroup has no CPUs and no memory nodes, so
/// that nothing could join it: each new level gets its parent's (what runc does).
fn make_dirs(h: &Hierarchy, target: &Path) -> io::Result<()> {
    let cpuset = !h.unified && h.controllers.iter().any(|c| c == "cpuset");
    let rel = target.strip_prefix(&h.mount_point).unwrap_or(target);
    let mut current = h.mount_point.clone();
    for part in rel.components() {
        let parent = current.clone();
        current.push(part);
        match std::fs::create_dir(&current) {
            Ok(()) => {
                if cpuset {
                    for file in ["cpuset.cpus", "cpuset.mems"] {
                        let value = std::fs::read_to_string(parent.join(file))?;
                        std::fs::write(current.join(file), value.trim())?;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating cgroup {}: {e}", current.display()),
                ));
            }
        }
    }
    Ok(())
}

/// Enables `controllers` in `cgroup.subtree_control` of every level above `target` (v2
/// limits only work where the parent hands the controller down).
fn enable_v2(h: &Hierarchy, target: &Path, controllers: &[&str]) -> io::Result<()> {
    if controllers.is_empty() {
        return Ok(());
    }
    let line = controllers
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let rel = target.strip_prefix(&h.mount_point).unwrap_or(target);
    let mut current = h.mount_point.clone();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        std::fs::write(current.join("cgroup.subtree_control"), &line).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "enabling {line} in {}: {e}",
                    current.join("cgroup.subtree_control").display()
                ),
            )
        })?;
        if i + 1 < parts.len() {
            current.push(part);
            make_dirs(h, &current)?;
        }
    }
    Ok(())
}

/// Moves process `pid` into the cgroup directories `dirs`.
pub(crate) fn join(dirs: &[PathBuf], pid: u32) -> io::Result<()> {
    for d in dirs {
        std::fs::write(d.join("cgroup.procs"), pid.to_string()).map_err(|e| {
            io::Error::new(e.kind(), format!("joining cgroup {}: {e}", d.display()))
        })?;
    }
    Ok(())
}

/// Processes still in the cgroup directory `dir` (none if it is gone).
pub(crate) fn procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Removes the container's (empty) cgroup directories.
pub(crate) fn remove(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxResourcesBuilder};

    use super::*;

    /// This machine's kind: v1 controllers beside an empty unified tree.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /mnt/my\\040dir rw - ext4 /dev/sda1 rw
";

    fn h(mount: &str, unified: bool, controllers: &[&str]) -> Hierarchy {
        Hierarchy {
            mount_point: mount.into(),
            unified,
            controllers: controllers.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn hierarchies_come_from_mountinfo() {
        assert_eq!(
            parse_mountinfo(HYBRID),
            vec![
                h("/sys/fs/cgroup/cpu,cpuacct", false, &["cpu", "cpuacct"]),
                h("/sys/fs/cgroup/memory", false, &["memory"]),
                h("/sys/fs/cgroup/systemd", false, &["name=systemd"]),
                h("/sys/fs/cgroup/unified", true, &[]),
            ]
        );
        let v2 = "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(parse_mountinfo(v2), vec![h("/sys/fs/cgroup", true, &[])]);
    }

    #[test]
    fn favordynmods_is_added_to_the_cgroup2_mount_keeping_its_options() {
        let remount =
            |m: &str| favordynmods_remount(m).map(|(p, o)| (p.to_string_lossy().into_owned(), o));
        assert_eq!(
            remount(HYBRID),
            Some(("/sys/fs/cgroup/unified".into(), "favordynmods".into()))
        );
        let systemd = "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 \
                       rw,seclabel,nsdelegate,memory_recursiveprot\n";
        assert_eq!(
            remount(systemd),
            Some((
                "/sys/fs/cgroup".into(),
                "nsdelegate,memory_recursiveprot,favordynmods".into()
            ))
        );
        let set = "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,favordynmods\n";
        assert_eq!(remount(set), None, "already set");
        let v1_only = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(remount(v1_only), None, "no cgroup2 mount");
    }

    #[test]
    fn the_cpu_hierarchy_is_joined_only_for_a_cpu_limit() {
        let all = vec![
            h("/c/cpu,cpuacct", false, &["cpu", "cpuacct"]),
            h("/c/memory", false, &["memory"]),
            h("/c/unified", true, &["cpu", "memory"]),
        ];
        let limited = LinuxResourcesBuilder::default()
            .cpu(LinuxCpuBuilder::default().quota(50_000).build().unwrap())
            .build()
            .unwrap();
        let memory_only = LinuxResourcesBuilder::default()
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(1 << 20)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let points = |r: Option<&LinuxResources>| -> Vec<&str> {
            joined(&all, r)
                .iter()
                .map(|h| h.mount_point.to_str().unwrap())
                .collect()
        };
        assert_eq!(
            points(Some(&limited)),
            ["/c/cpu,cpuacct", "/c/memory", "/c/unified"]
        );
        assert_eq!(points(Some(&memory_only)), ["/c/memory", "/c/unified"]);
        assert_eq!(points(None), ["/c/memory", "/c/unified"]);
    }

    #[test]
    fn limits_go_to_the_hierarchy_that_owns_the_controller() {
        let resources = LinuxResourcesBuilder::default()
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(64 << 20)
                    .build()
                    .unwrap(),
            )
            .cpu(
                LinuxCpuBuilder::default()
                    .quota(50_000)
                    .period(100_000u64)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let hybrid = vec![
            h("/c/cpu", false, &["cpu", "cpuacct"]),
            h("/c/memory", false, &["memory"]),
            h("/c/unified", true, &["memory", "cpu"]),
        ];
        assert_eq!(
            limit_files(&hybrid, &hybrid[0], Some(&resources)),
            vec![
                ("cpu.cfs_period_us", "100000".to_string()),
                ("cpu.cfs_quota_us", "50000".to_string())
            ]
        );
        assert_eq!(
            limit_files(&hybrid, &hybrid[1], Some(&resources)),
            vec![("memory.limit_in_bytes", (64u64 << 20).to_string())]
        );
        assert!(
            limit_files(&hybrid, &hybrid[2], Some(&resources)).is_empty(),
            "v1 owns both"
        );
        let v2 = vec![h("/c", true, &["cpu", "memory", "pids"])];
        assert_eq!(
            limit_files(&v2, &v2[0], Some(&resources)),
            vec![
                ("memory.max", (64u64 << 20).to_string()),
                ("cpu.max", "50000 100000".to_string())
            ]
        );
        assert!(limit_files(&v2, &v2[0], None).is_empty());
        assert_eq!(
            dir(&v2[0], "/wisp-wisp0/wisp0-2-app"),
            PathBuf::from("/c/wisp-wisp0/wisp0-2-app")
        );
    }
}
