//! Mount options of the runtime spec, and paths inside a container's root that cannot lead
//! out of it.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::{Component, Path, PathBuf},
};

use nix::mount::MsFlags;
use rustix::fs::{Mode, OFlags, ResolveFlags, StatVfsMountFlags};

/// A mount's `options`, split as `mount(8)` and runc split them: flags, propagation, and
/// what goes to the filesystem as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub flags: MsFlags,
    /// `private`, `rslave`, …: applied by a second mount call, as the kernel requires.
    pub propagation: MsFlags,
    /// Filesystem options (`mode=755`, `size=65536k`), comma-joined.
    pub data: String,
}

impl Options {
    pub fn is_bind(&self) -> bool {
        self.flags.contains(MsFlags::MS_BIND)
    }

    /// The flags a bind mount takes when remounted (everything but bind and recursion).
    pub fn remount_flags(&self) -> MsFlags {
        self.flags - (MsFlags::MS_BIND | MsFlags::MS_REC)
    }
}

/// Parses `options` by runc's table (`libcontainer/specconv`'s `parseMountOptions`): a flag
/// word sets or clears its flag, later words winning; what is not a flag is data.
pub(crate) fn parse_options(options: &[String]) -> Options {
    let mut o = Options {
        flags: MsFlags::empty(),
        propagation: MsFlags::empty(),
        data: String::new(),
    };
    for word in options {
        let (clear, flag) = match word.as_str() {
            "async" => (true, MsFlags::MS_SYNCHRONOUS),
            "atime" => (true, MsFlags::MS_NOATIME),
            "bind" => (false, MsFlags::MS_BIND),
            "defaults" => continue,
            "dev" => (true, MsFlags::MS_NODEV),
            "diratime" => (true, MsFlags::MS_NODIRATIME),
            "dirsync" => (false, MsFlags::MS_DIRSYNC),
            "exec" => (true, MsFlags::MS_NOEXEC),
            "mand" => (false, MsFlags::MS_MANDLOCK),
            "noatime" => (false, MsFlags::MS_NOATIME),
            "nodev" => (false, MsFlags::MS_NODEV),
            "nodiratime" => (false, MsFlags::MS_NODIRATIME),
            "noexec" => (false, MsFlags::MS_NOEXEC),
            "nomand" => (true, MsFlags::MS_MANDLOCK),
            "norelatime" => (true, MsFlags::MS_RELATIME),
            "nostrictatime" => (true, MsFlags::MS_STRICTATIME),
            "nosuid" => (false, MsFlags::MS_NOSUID),
            "rbind" => (false, MsFlags::MS_BIND | MsFlags::MS_REC),
            "relatime" => (false, MsFlags::MS_RELATIME),
            "remount" => (false, MsFlags::MS_REMOUNT),
            "ro" => (false, MsFlags::MS_RDONLY),
            "rw" => (true, MsFlags::MS_RDONLY),
            "strictatime" => (false, MsFlags::MS_STRICTATIME),
            "suid" => (true, MsFlags::MS_NOSUID),
            "sync" => (false, MsFlags::MS_SYNCHRONOUS),
            other => {
                let propagation = match other {
                    "private" => MsFlags::MS_PRIVATE,
                    "rprivate" => MsFlags::MS_PRIVATE | MsFlags::MS_REC,
                    "shared" => MsFlags::MS_SHARED,
                    "rshared" => MsFlags::MS_SHARED | MsFlags::MS_REC,
                    "slave" => MsFlags::MS_SLAVE,
                    "rslave" => MsFlags::MS_SLAVE | MsFlags::MS_REC,
                    "unbindable" => MsFlags::MS_UNBINDABLE,
                    "runbindable" => MsFlags::MS_UNBINDABLE | MsFlags::MS_REC,
                    _ => {
                        if !o.data.is_empty() {
                            o.data.push(',');
                        }
                        o.data.push_str(other);
                        continue;
                    }
                };
                o.propagation = propagation;
                continue;
            }
        };
        if clear {
            o.flags.remove(flag);
        } else {
            o.flags.insert(flag);
        }
    }
    o
}

/// The per-mount flags a mount has now (from `statvfs`), as `mount(2)` flags: a bind
/// remount replaces them all, so what is not meant to change must be passed again.
pub(crate) fn current_flags(path: &Path) -> io::Result<MsFlags> {
    let f = rustix::fs::statvfs(path)?.f_flag;
    let table = [
        (StatVfsMountFlags::RDONLY, MsFlags::MS_RDONLY),
        (StatVfsMountFlags::NOSUID, MsFlags::MS_NOSUID),
        (StatVfsMountFlags::NODEV, MsFlags::MS_NODEV),
        (StatVfsMountFlags::NOEXEC, MsFlags::MS_NOEXEC),
        (StatVfsMountFlags::NOATIME, MsFlags::MS_NOATIME),
        (StatVfsMountFlags::NODIRATIME, MsFlags::MS_NODIRATIME),
        (StatVfsMountFlags::RELATIME, MsFlags::MS_RELATIME),
    ];
    Ok(table
        .iter()
        .filter(|(s, _)| f.contains(*s))
        .fold(MsFlags::empty(), |acc, (_, m)| acc | *m))
}

/// What a missing mount target is created as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
}

/// The normal components of `path` (`/`, `.` and `..` dropped: resolution stays in the
/// root anyway, and a destination is always taken from the container's root).
fn components(path: &Path) -> Vec<&std::ffi::OsStr> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

fn open_in(root: &impl AsFd, path: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    // Symlinks in an image resolve as if the container's root were `/`: an image cannot make
    // a mount land on the host (runc's `securejoin`, done by the kernel).
    rustix::fs::openat2(
        root,
        path,
        flags | OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Opens `path` inside `root` (an `O_PATH` fd), creating it and its missing parents as
/// `kind` (parents as directories) when it does not exist.
pub(crate) fn open_in_root(root: &impl AsFd, path: &Path, kind: Kind) -> io::Result<OwnedFd> {
    match open_in(root, path, OFlags::empty()) {
        Ok(fd) => return Ok(fd),
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(in_root(path, e)),
    }
    let parts = components(path);
    let mut prefix = PathBuf::new();
    for (i, part) in parts.iter().enumerate() {
        let parent = open_in(root, &prefix, OFlags::DIRECTORY).map_err(|e| in_root(&prefix, e))?;
        prefix.push(part);
        let made = if i + 1 == parts.len() && kind == Kind::File {
            rustix::fs::openat(
                &parent,
                *part,
                OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
            )
            .map(drop)
        } else {
            rustix::fs::mkdirat(&parent, *part, Mode::from_raw_mode(0o755))
        };
        match made {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(in_root(&prefix, e)),
        }
    }
    open_in(root, path, OFlags::empty()).map_err(|e| in_root(path, e))
}

fn in_root(path: &Path, e: rustix::io::Errno) -> io::Error {
    io::Error::other(format!("/{} in the container: {e}", path.display()))
}

/// A path naming what `fd` refers to, for calls that take paths (`mount`): the kernel
/// follows it to the very inode, whatever happens to the path it was opened by.
pub(crate) fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_split_like_runc() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases: [(&[&str], MsFlags, MsFlags, &str); 7] = [
            (&[], MsFlags::empty(), MsFlags::empty(), ""),
            (
                &["nosuid", "strictatime", "mode=755", "size=65536k"],
                MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME,
                MsFlags::empty(),
                "mode=755,size=65536k",
            ),
            (
                &["rbind", "ro", "nodev"],
                MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_RDONLY | MsFlags::MS_NODEV,
                MsFlags::empty(),
                "",
            ),
            (&["ro", "rw"], MsFlags::empty(), MsFlags::empty(), ""),
            (&["nodev", "dev"], MsFlags::empty(), MsFlags::empty(), ""),
            (
                &["bind", "rslave", "defaults"],
                MsFlags::MS_BIND,
                MsFlags::MS_SLAVE | MsFlags::MS_REC,
                "",
            ),
            (
                &["newinstance", "ptmxmode=0666", "noexec"],
                MsFlags::MS_NOEXEC,
                MsFlags::empty(),
                "newinstance,ptmxmode=0666",
            ),
        ];
        for (i, (words, flags, propagation, data)) in cases.into_iter().enumerate() {
            let o = parse_options(&s(words));
            assert_eq!(
                (o.flags, o.propagation, o.data.as_str()),
                (flags, propagation, data),
                "case {i}: {words:?}"
            );
        }
        let bind = parse_options(&s(&["rbind", "ro", "nosuid"]));
        assert!(bind.is_bind());
        assert_eq!(
            bind.remount_flags(),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID
        );
    }

    #[test]
    fn paths_in_the_root_are_made_and_symlinks_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root_dir = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root_dir.join("etc")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // An image's absolute symlink, which on the host would point out of the root.
        std::os::unix::fs::symlink(&outside, root_dir.join("escape")).unwrap();
        let root = rustix::fs::open(
            &root_dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        open_in_root(&root, Path::new("/proc/sys"), Kind::Dir).unwrap();
        assert!(root_dir.join("proc/sys").is_dir());
        open_in_root(&root, Path::new("etc/hosts"), Kind::File).unwrap();
        assert!(root_dir.join("etc/hosts").is_file());
        // Through the symlink: resolved as if the root were `/`, so a missing target is an
        // error and an existing one is the root's own, never the host's directory it names.
        assert!(open_in_root(&root, Path::new("/escape/x"), Kind::Dir).is_err());
        let mirror = root_dir.join(outside.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&mirror).unwrap();
        open_in_root(&root, Path::new("/escape/x"), Kind::Dir).unwrap();
        assert!(!outside.join("x").exists(), "left the root");
        assert!(mirror.join("x").is_dir(), "{} missing", mirror.display());
        // `..` cannot climb out either.
        open_in_root(&root, Path::new("../../up"), Kind::Dir).unwrap();
        assert!(root_dir.join("up").is_dir());
        assert!(!dir.path().join("up").exists());
    }
}
