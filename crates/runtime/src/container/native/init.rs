//! The container side of wisp's runtime: what the helper process does between being
//! spawned (as PID 1 of a new PID namespace) and becoming the app, and the helper that runs
//! exec probes inside a running container. Both run in a fresh, single-threaded process
//! (wisp's own binary, started before anything else in `main`), so changing namespaces,
//! credentials and the seccomp filter of "the process" is exactly that.
//!
//! The steps follow runc's `runc init` for the runtime spec wisp writes (`spec.rs`):
//! cgroups, network namespace, new mount/UTS/IPC/cgroup namespaces, the root and its mounts
//! (paths resolved inside the root, so an image's symlinks cannot lead out of it), device
//! nodes, `pivot_root`, masked and read-only paths, hostname, then the process: working
//! directory, capability bounding set, user and groups, capabilities, `no_new_privs`, the
//! seccomp programs compiled by wisp, and `execve`.

use std::{
    convert::Infallible,
    ffi::{CString, OsString},
    fs::File,
    io::{Read, Write},
    os::{fd::OwnedFd, unix::net::UnixStream},
    path::{Path, PathBuf},
    process::ExitCode,
    str::FromStr,
    sync::{Arc, atomic::AtomicBool},
};

use caps::{CapSet, CapsHashSet};
use nix::{
    mount::{MntFlags, MsFlags, mount, umount2},
    sched::{CloneFlags, setns, unshare},
};
use oci_spec::runtime::{LinuxNamespaceType, Spec};
use rustix::fs::{FileType, Mode, OFlags};

use super::{
    PID_FILE, SECCOMP_FILE,
    cgroups::{self, Hierarchy},
    mounts::{self, Kind, fd_path, open_in_root},
};
use crate::container::{seccomp, spec::DEFAULT_PATH};

/// The exit code of a helper that failed before the app could start (Kubernetes reports a
/// container that could not be started with 128).
const FAILED: u8 = 128;

/// What the init writes to wisp just before `execve`; the socket then closes with the exec
/// (close-on-exec). Anything else it writes is why it failed.
pub(crate) const EXECUTING: &str = "exec\n";

/// What a parked init (`container-init <bundle> park`) writes once everything but the
/// process itself is done; it then waits for a line from wisp: the hostname to take (the
/// replica it now belongs to), after which it goes on as an unparked init does. End of file
/// instead (wisp dropped it, or is gone): it exits.
pub(crate) const PARKED: &str = "parked\n";

/// `container-init <bundle> [park]`: fd 0 is a socket to wisp. Returns only on failure,
/// having told wisp why.
pub(crate) fn init(bundle: &Path, park: bool) -> ExitCode {
    let mut report = match report_socket() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("container init: {e}");
            return ExitCode::from(FAILED);
        }
    };
    let Err(e) = start(bundle, park, &mut report);
    let _ = report.write_all(e.as_bytes());
    ExitCode::from(FAILED)
}

/// The socket wisp left on fd 0, moved to a close-on-exec fd; fd 0 becomes `/dev/null`, the
/// app's stdin.
fn report_socket() -> Result<UnixStream, String> {
    let fd = rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stdin(), 3)
        .map_err(|e| format!("taking the report socket: {e}"))?;
    let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("/dev/null: {e}"))?;
    rustix::stdio::dup2_stdin(&null).map_err(|e| format!("stdin: {e}"))?;
    Ok(UnixStream::from(fd))
}

fn load(bundle: &Path) -> Result<(Spec, Vec<seccompiler::BpfProgram>), String> {
    let spec = Spec::load(bundle.join("config.json"))
        .map_err(|e| format!("{}: {e}", bundle.join("config.json").display()))?;
    let filters = match std::fs::read(bundle.join(SECCOMP_FILE)) {
        Ok(bytes) => seccomp::decode(&bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("{SECCOMP_FILE}: {e}")),
    };
    Ok((spec, filters))
}

fn start(bundle: &Path, park: bool, report: &mut UnixStream) -> Result<Infallible, String> {
    // Modes as given (the spec's and the kernel's defaults), not reduced by wisp's umask.
    rustix::process::umask(Mode::empty());
    let (spec, filters) = load(bundle)?;
    let linux = spec
        .linux()
        .as_ref()
        .ok_or("config.json has no linux section")?;
    let all = cgroups::hierarchies().map_err(|e| format!("cgroups: {e}"))?;
    // Those wisp made for it: the container sees (and mounts) only these.
    let hierarchies: Vec<Hierarchy> = cgroups::joined(&all, super::resources(&spec))
        .into_iter()
        .cloned()
        .collect();
    if let Some(path) = linux.cgroups_path() {
        let path = path.to_string_lossy();
        let dirs: Vec<PathBuf> = hierarchies.iter().map(|h| cgroups::dir(h, &path)).collect();
        cgroups::join(&dirs, std::process::id()).map_err(|e| e.to_string())?;
    }
    let (join, new) = namespaces(&spec)?;
    if let Some(path) = join {
        let netns = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        setns(netns, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns(net): {e}"))?;
    }
    unshare(new).map_err(|e| format!("unshare({new:?}): {e}"))?;
    if std::process::id() != 1 {
        return Err("the init is not PID 1 of a new PID namespace".into());
    }
    // Nothing mounted from here on reaches the host's mount namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("making / a slave mount: {e}"))?;
    let dev_made = prepare_root(&spec, &hierarchies)?;
    if let Some(h) = spec.hostname().as_deref().filter(|h| !h.is_empty()) {
        nix::unistd::sethostname(h).map_err(|e| format!("sethostname: {e}"))?;
    }
    if dev_made {
        // The devices are made: /dev read-only, and every writable mount `nodev`, leaves a
        // container with CAP_MKNOD no way to a host device (runc keeps that out with the
        // devices cgroup instead).
        remount_read_only(Path::new("/dev"), MsFlags::empty())?;
    }
    if park {
        report
            .write_all(PARKED.as_bytes())
            .map_err(|e| format!("reporting to wisp: {e}"))?;
        let hostname = read_line(report).map_err(|e| format!("waiting parked: {e}"))?;
        let hostname = hostname.ok_or("wisp dropped the parked container")?;
        if !hostname.is_empty() {
            nix::unistd::sethostname(&hostname).map_err(|e| format!("sethostname: {e}"))?;
        }
    }
    become_process(&spec, &filters, report)
}

/// One line from `socket`, without its `\n`; None at end of file before any byte. Read a
/// byte at a time: nothing after the line may be taken from the socket.
pub(crate) fn read_line(socket: &mut UnixStream) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match socket.read(&mut byte)? {
            0 if line.is_empty() => return Ok(None),
            0 => break,
            _ if byte[0] == b'\n' => break,
            _ => line.push(byte[0]),
        }
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The network namespace to join (the replica's) and the flags of those to create. The PID
/// namespace was made by wisp (the init is its PID 1); a path for any other is refused.
fn namespaces(spec: &Spec) -> Result<(Option<PathBuf>, CloneFlags), String> {
    let mut join = None;
    let mut new = CloneFlags::empty();
    let list = spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default();
    for ns in list {
        let flag = match ns.typ() {
            LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
            LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
            LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
            LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
            LinuxNamespaceType::Pid if ns.path().is_none() => continue,
            LinuxNamespaceType::Network => match ns.path() {
                Some(p) => {
                    join = Some(p.clone());
                    continue;
                }
                None => CloneFlags::CLONE_NEWNET,
            },
            other => {
                return Err(format!(
                    "namespace {other:?} is not supported by wisp's runtime"
                ));
            }
        };
        if ns.path().is_some() {
            return Err(format!(
                "joining an existing {:?} namespace is not supported by wisp's runtime",
                ns.typ()
            ));
        }
        new |= flag;
    }
    Ok((join, new))
}

/// The container's root: its mounts, devices, `pivot_root`, masked and read-only paths.
/// Returns whether it made /dev (a tmpfs it filled with devices).
fn prepare_root(spec: &Spec, hierarchies: &[Hierarchy]) -> Result<bool, String> {
    let root_spec = spec.root().as_ref().ok_or("config.json has no root")?;
    let root = root_spec.path();
    // A mount point of its own, as pivot_root needs.
    mount(
        Some(root),
        root,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind-mounting the root {}: {e}", root.display()))?;
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", root.display()))?;
    let mut dev_made = false;
    for m in spec.mounts().iter().flatten() {
        let dest = m.destination();
        let opts = mounts::parse_options(m.options().as_deref().unwrap_or_default());
        let fail = |e: &dyn std::fmt::Display| format!("mounting {}: {e}", dest.display());
        let source = m.source().clone().unwrap_or_default();
        let typ = m.typ().clone().unwrap_or_default();
        if typ == "cgroup" {
            mount_cgroups(&root_fd, dest, &opts, hierarchies)?;
            continue;
        }
        if opts.is_bind() {
            let kind = if source.is_dir() {
                Kind::Dir
            } else {
                Kind::File
            };
            let target = open_in_root(&root_fd, dest, kind).map_err(|e| fail(&e))?;
            mount(
                Some(&source),
                &fd_path(&target),
                None::<&str>,
                opts.flags & (MsFlags::MS_BIND | MsFlags::MS_REC),
                None::<&str>,
            )
            .map_err(|e| fail(&e))?;
            if !opts.remount_flags().is_empty() {
                // The new mount, not what was under it.
                let mounted = open_in_root(&root_fd, dest, kind).map_err(|e| fail(&e))?;
                mount(
                    None::<&str>,
                    &fd_path(&mounted),
                    None::<&str>,
                    opts.remount_flags() | MsFlags::MS_BIND | MsFlags::MS_REMOUNT,
                    None::<&str>,
                )
                .map_err(|e| fail(&e))?;
            }
        } else {
            let target = open_in_root(&root_fd, dest, Kind::Dir).map_err(|e| fail(&e))?;
            let data = (!opts.data.is_empty()).then_some(opts.data.as_str());
            mount(
                Some(&source),
                &fd_path(&target),
                Some(typ.as_str()),
                opts.flags,
                data,
            )
            .map_err(|e| fail(&e))?;
            if dest == Path::new("/dev") && typ == "tmpfs" {
                dev_made = true;
            }
        }
        if !opts.propagation.is_empty() {
            let mounted = open_in_root(&root_fd, dest, Kind::Dir).map_err(|e| fail(&e))?;
            mount(
                None::<&str>,
                &fd_path(&mounted),
                None::<&str>,
                opts.propagation,
                None::<&str>,
            )
            .map_err(|e| fail(&e))?;
        }
    }
    if dev_made {
        let dev = open_in_root(&root_fd, Path::new("/dev"), Kind::Dir)
            .map_err(|e| format!("/dev: {e}"))?;
        make_devices(&dev)?;
    }
    drop(root_fd);
    rustix::process::chdir(root).map_err(|e| format!("chdir {}: {e}", root.display()))?;
    // runc's way: the old root ends up on top of the new one, and is detached from it.
    rustix::process::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("detaching the old root: {e}"))?;
    rustix::process::chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    let linux = spec.linux().as_ref();
    for p in linux
        .and_then(|l| l.masked_paths().as_ref())
        .into_iter()
        .flatten()
    {
        mask(Path::new(p))?;
    }
    for p in linux
        .and_then(|l| l.readonly_paths().as_ref())
        .into_iter()
        .flatten()
    {
        let p = Path::new(p);
        if p.exists() {
            mount(
                Some(p),
                p,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| format!("read-only path {}: {e}", p.display()))?;
            remount_read_only(
                p,
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            )?;
        }
    }
    if root_spec.readonly() == Some(true) {
        remount_read_only(Path::new("/"), MsFlags::empty())?;
    }
    Ok(dev_made)
}

/// A `cgroup` mount, as runc makes it: on a v2-only machine the unified hierarchy; else a
/// tmpfs with each hierarchy mounted in a directory named as on the host (`cpu,cpuacct`,
/// `memory`, `unified`), plus links for co-mounted controllers. The container's cgroup
/// namespace makes each show the container's own cgroup as its root.
fn mount_cgroups(
    root_fd: &OwnedFd,
    dest: &Path,
    opts: &mounts::Options,
    hierarchies: &[Hierarchy],
) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("mounting cgroups at {}: {e}", dest.display());
    let target = open_in_root(root_fd, dest, Kind::Dir).map_err(|e| fail(&e))?;
    if let [only] = hierarchies
        && only.unified
    {
        return mount(
            Some("cgroup2"),
            &fd_path(&target),
            Some("cgroup2"),
            opts.flags,
            None::<&str>,
        )
        .map_err(|e| fail(&e));
    }
    mount(
        Some("tmpfs"),
        &fd_path(&target),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=755"),
    )
    .map_err(|e| fail(&e))?;
    let tmpfs = open_in_root(root_fd, dest, Kind::Dir).map_err(|e| fail(&e))?;
    for h in hierarchies {
        let Some(name) = h.mount_point.file_name() else {
            continue;
        };
        let sub = open_in_root(root_fd, &dest.join(name), Kind::Dir).map_err(|e| fail(&e))?;
        let (fstype, data) = if h.unified {
            ("cgroup2", String::new())
        } else if h.controllers.iter().all(|c| c.starts_with("name=")) {
            ("cgroup", format!("none,{}", h.controllers.join(",")))
        } else {
            ("cgroup", h.controllers.join(","))
        };
        let data = (!data.is_empty()).then_some(data.as_str());
        mount(Some(fstype), &fd_path(&sub), Some(fstype), opts.flags, data)
            .map_err(|e| fail(&format!("{}: {e}", name.to_string_lossy())))?;
        let name = name.to_string_lossy();
        if name.contains(',') {
            for link in name.split(',') {
                match rustix::fs::symlinkat(&*name, &tmpfs, link) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(fail(&e)),
                }
            }
        }
    }
    if opts.flags.contains(MsFlags::MS_RDONLY) {
        remount_read_only(&fd_path(&tmpfs), MsFlags::empty())?;
    }
    Ok(())
}

/// The devices every container has (runc's default list), and the usual links.
fn make_devices(dev: &OwnedFd) -> Result<(), String> {
    const DEVICES: [(&str, u32, u32); 6] = [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ];
    for (name, major, minor) in DEVICES {
        rustix::fs::mknodat(
            dev,
            name,
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o666),
            rustix::fs::makedev(major, minor),
        )
        .map_err(|e| format!("mknod /dev/{name}: {e}"))?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        match rustix::fs::symlinkat(target, dev, name) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(format!("/dev/{name}: {e}")),
        }
    }
    Ok(())
}

/// Hides a path: an empty read-only tmpfs over a directory, `/dev/null` over anything else.
fn mask(p: &Path) -> Result<(), String> {
    let fail = |e: nix::Error| format!("masking {}: {e}", p.display());
    match std::fs::metadata(p) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => mount(
            Some("tmpfs"),
            p,
            Some("tmpfs"),
            MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(fail),
        Ok(_) => mount(
            Some("/dev/null"),
            p,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(fail),
    }
}

/// Makes the mount at `p` read-only, keeping its other flags (a bind remount replaces them
/// all) and adding `extra`.
fn remount_read_only(p: &Path, extra: MsFlags) -> Result<(), String> {
    let flags = mounts::current_flags(p).map_err(|e| format!("statvfs {}: {e}", p.display()))?;
    mount(
        None::<&str>,
        p,
        None::<&str>,
        flags | extra | MsFlags::MS_RDONLY | MsFlags::MS_BIND | MsFlags::MS_REMOUNT,
        None::<&str>,
    )
    .map_err(|e| format!("remounting {} read-only: {e}", p.display()))
}

/// The process part of the spec, as the credentials and filters of this process.
struct Process {
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: PathBuf,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    bounding: CapsHashSet,
    effective: CapsHashSet,
    permitted: CapsHashSet,
    inheritable: CapsHashSet,
    no_new_privileges: bool,
}

fn cstring(s: &str, what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} contains a NUL byte"))
}

fn caps_of(set: Option<&oci_spec::runtime::Capabilities>) -> Result<CapsHashSet, String> {
    set.into_iter()
        .flatten()
        .map(|c| {
            caps::Capability::from_str(&format!("CAP_{c}"))
                .map_err(|e| format!("capability {c}: {e}"))
        })
        .collect()
}

impl Process {
    fn of(spec: &Spec) -> Result<Process, String> {
        let p = spec
            .process()
            .as_ref()
            .ok_or("config.json has no process")?;
        let argv = p
            .args()
            .iter()
            .flatten()
            .map(|a| cstring(a, "argument"))
            .collect::<Result<Vec<_>, _>>()?;
        if argv.is_empty() {
            return Err("the process has no arguments".into());
        }
        let env = p
            .env()
            .iter()
            .flatten()
            .map(|e| cstring(e, "environment entry"))
            .collect::<Result<Vec<_>, _>>()?;
        let c = p.capabilities().as_ref();
        Ok(Process {
            argv,
            env,
            cwd: p.cwd().clone(),
            uid: p.user().uid(),
            gid: p.user().gid(),
            groups: p.user().additional_gids().clone().unwrap_or_default(),
            bounding: caps_of(c.and_then(|c| c.bounding().as_ref()))?,
            effective: caps_of(c.and_then(|c| c.effective().as_ref()))?,
            permitted: caps_of(c.and_then(|c| c.permitted().as_ref()))?,
            inheritable: caps_of(c.and_then(|c| c.inheritable().as_ref()))?,
            no_new_privileges: p.no_new_privileges() == Some(true),
        })
    }

    /// Drops the bounding set, then becomes the user (keeping capabilities across the
    /// switch), then sets the capability sets: runc's order.
    fn credentials(&self) -> Result<(), String> {
        limit_bounding(&self.bounding)?;
        rustix::thread::set_keep_capabilities(true).map_err(|e| format!("keepcaps: {e}"))?;
        let gids: Vec<rustix::process::Gid> = self
            .groups
            .iter()
            .map(|g| rustix::process::Gid::from_raw(*g))
            .collect();
        rustix::thread::set_thread_groups(&gids).map_err(|e| format!("setgroups: {e}"))?;
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::from_raw(self.gid),
            rustix::process::Gid::from_raw(self.gid),
            rustix::process::Gid::from_raw(self.gid),
        )
        .map_err(|e| format!("setgid {}: {e}", self.gid))?;
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::from_raw(self.uid),
            rustix::process::Uid::from_raw(self.uid),
            rustix::process::Uid::from_raw(self.uid),
        )
        .map_err(|e| format!("setuid {}: {e}", self.uid))?;
        rustix::thread::set_keep_capabilities(false).map_err(|e| format!("keepcaps: {e}"))?;
        // Effective first: it must stay within the permitted set at every step.
        for (set, value) in [
            (CapSet::Effective, &self.effective),
            (CapSet::Permitted, &self.permitted),
            (CapSet::Inheritable, &self.inheritable),
        ] {
            caps::set(None, set, value).map_err(|e| format!("capabilities ({set:?}): {e}"))?;
        }
        caps::clear(None, CapSet::Ambient).map_err(|e| format!("ambient capabilities: {e}"))?;
        if self.no_new_privileges {
            rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
        }
        Ok(())
    }

    fn path_env(&self) -> String {
        self.env
            .iter()
            .filter_map(|e| e.to_str().ok())
            .find_map(|e| e.strip_prefix("PATH="))
            .unwrap_or(DEFAULT_PATH.trim_start_matches("PATH="))
            .to_string()
    }
}

/// Drops every capability but `keep` from the bounding set (it can only shrink).
fn limit_bounding(keep: &CapsHashSet) -> Result<(), String> {
    let fail = |e: caps::errors::CapsError| format!("capability bounding set: {e}");
    for cap in caps::read(None, CapSet::Bounding).map_err(fail)? {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap).map_err(fail)?;
        }
    }
    Ok(())
}

/// Where `name` is run from: itself if it has a `/`, else the first executable regular file
/// of that name along `path` (Go's `exec.LookPath`, which runc uses).
pub(crate) fn find_executable(name: &str, path: &str) -> Result<PathBuf, String> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    path.split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(name))
        .find(|p| executable(p))
        .ok_or_else(|| format!("exec: {name:?}: executable file not found in $PATH"))
}

fn become_process(
    spec: &Spec,
    filters: &[seccompiler::BpfProgram],
    report: &mut UnixStream,
) -> Result<Infallible, String> {
    // Before the seccomp filter. The flag survives `execve`: the app gets transparent huge
    // pages as wisp's other children do (the helper's allocator turned them off for
    // itself, see `launch`).
    nix::sys::prctl::set_thp_disable(false).map_err(|e| format!("PR_SET_THP_DISABLE: {e}"))?;
    let p = Process::of(spec)?;
    let name = p.argv[0].to_string_lossy().into_owned();
    let exe = find_executable(&name, &p.path_env())?;
    let exe = cstring(&exe.to_string_lossy(), "program")?;
    // runc makes a missing working directory (as root, before the user switch).
    if !p.cwd.exists() {
        let _ = std::fs::create_dir_all(&p.cwd);
    }
    rustix::process::chdir(&p.cwd).map_err(|e| {
        format!(
            "chdir to cwd ({:?}) set in config.json failed: {e}",
            p.cwd.display().to_string()
        )
    })?;
    p.credentials()?;
    // Rust's runtime ignores SIGPIPE, and an ignored signal stays ignored across execve,
    // while a handled one goes back to its default: so a handler, for the app to get the
    // default everyone else gets.
    signal_hook::flag::register(
        signal_hook::consts::SIGPIPE,
        Arc::new(AtomicBool::new(false)),
    )
    .map_err(|e| format!("SIGPIPE: {e}"))?;
    rustix::process::umask(Mode::from_raw_mode(0o022));
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    report
        .write_all(EXECUTING.as_bytes())
        .map_err(|e| format!("reporting to wisp: {e}"))?;
    let e = nix::unistd::execve(&exe, &p.argv, &p.env).unwrap_err();
    Err(format!("exec {name:?}: {e}"))
}

/// `container-exec <bundle> <argv…>`: runs a command in the running container of `bundle`
/// (its namespaces, cgroups, user, capabilities and seccomp filter, its environment and
/// working directory) and exits with its status. The command runs as a child of this
/// helper, so that it is in the container's PID namespace; wisp's exec probes use it.
pub(crate) fn exec(bundle: &Path, argv: &[OsString]) -> ExitCode {
    match exec_in(bundle, argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("container exec: {e}");
            ExitCode::from(FAILED)
        }
    }
}

fn exec_in(bundle: &Path, argv: &[OsString]) -> Result<ExitCode, String> {
    let (program, args) = argv.split_first().ok_or("no command to run")?;
    let (spec, filters) = load(bundle)?;
    let pid: i32 = std::fs::read_to_string(bundle.join(PID_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or("the container is not running")?;
    // Opened before entering any: /proc is the host's until the mount namespace changes.
    let order = [
        ("cgroup", CloneFlags::CLONE_NEWCGROUP),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("net", CloneFlags::CLONE_NEWNET),
        ("pid", CloneFlags::CLONE_NEWPID),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ];
    let mut fds = Vec::new();
    for (name, flag) in order {
        let path = format!("/proc/{pid}/ns/{name}");
        fds.push((File::open(&path).map_err(|e| format!("{path}: {e}"))?, flag));
    }
    if let Some(path) = spec.linux().as_ref().and_then(|l| l.cgroups_path().clone()) {
        let all: Vec<Hierarchy> = cgroups::hierarchies().map_err(|e| e.to_string())?;
        let dirs: Vec<PathBuf> = cgroups::joined(&all, super::resources(&spec))
            .iter()
            .map(|h| cgroups::dir(h, &path.to_string_lossy()))
            .collect();
        cgroups::join(&dirs, std::process::id()).map_err(|e| e.to_string())?;
    }
    for (fd, flag) in fds {
        setns(fd, flag).map_err(|e| format!("setns({flag:?}): {e}"))?;
    }
    let p = Process::of(&spec)?;
    limit_bounding(&p.bounding)?;
    if p.no_new_privileges {
        rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
    }
    for f in &filters {
        seccompiler::apply_filter(f).map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let env = p.env.iter().filter_map(|e| {
        let e = e.to_str().ok()?;
        e.split_once('=')
    });
    let status =
        std::process::Command::new(find_executable(&program.to_string_lossy(), &p.path_env())?)
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(&p.cwd)
            .uid(p.uid)
            .gid(p.gid)
            .stdin(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("running {program:?}: {e}"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::from(FAILED),
    })
}

/// Reads what a helper wrote to the report socket until it closed.
pub(crate) fn read_report(socket: &mut UnixStream) -> std::io::Result<String> {
    let mut text = String::new();
    socket.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn executables_are_found_along_path_like_go_does() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("app"), "").unwrap(); // not executable
        std::fs::write(b.join("app"), "").unwrap();
        std::fs::set_permissions(b.join("app"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(a.join("dir")).unwrap();
        let path = format!("{}:{}", a.display(), b.display());
        assert_eq!(find_executable("app", &path).unwrap(), b.join("app"));
        assert_eq!(
            find_executable("/x/y", &path).unwrap(),
            PathBuf::from("/x/y")
        );
        assert_eq!(
            find_executable("dir", &path).unwrap_err(),
            "exec: \"dir\": executable file not found in $PATH"
        );
    }

    #[test]
    fn namespaces_are_joined_or_made_as_the_spec_says() {
        use oci_spec::runtime::{LinuxBuilder, LinuxNamespaceBuilder};
        let ns = |typ, path: Option<&str>| {
            let b = LinuxNamespaceBuilder::default().typ(typ);
            match path {
                Some(p) => b.path(p).build().unwrap(),
                None => b.build().unwrap(),
            }
        };
        let with = |list| {
            let mut spec = Spec::default();
            spec.set_linux(Some(
                LinuxBuilder::default().namespaces(list).build().unwrap(),
            ));
            spec
        };
        let spec = with(vec![
            ns(LinuxNamespaceType::Pid, None),
            ns(LinuxNamespaceType::Network, Some("/var/run/netns/w-2")),
            ns(LinuxNamespaceType::Ipc, None),
            ns(LinuxNamespaceType::Uts, None),
            ns(LinuxNamespaceType::Mount, None),
            ns(LinuxNamespaceType::Cgroup, None),
        ]);
        assert_eq!(
            namespaces(&spec).unwrap(),
            (
                Some(PathBuf::from("/var/run/netns/w-2")),
                CloneFlags::CLONE_NEWIPC
                    | CloneFlags::CLONE_NEWUTS
                    | CloneFlags::CLONE_NEWNS
                    | CloneFlags::CLONE_NEWCGROUP
            )
        );
        let err = namespaces(&with(vec![ns(LinuxNamespaceType::User, None)])).unwrap_err();
        assert!(err.contains("User"), "{err}");
        let err = namespaces(&with(vec![ns(LinuxNamespaceType::Ipc, Some("/x"))])).unwrap_err();
        assert!(err.contains("joining"), "{err}");
    }
}
