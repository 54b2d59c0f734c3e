//! A root filesystem made of host binaries: each binary and the shared libraries `ldd`
//! lists for it, at the same paths, hard-linked (copied across filesystems). Tests and
//! benchmarks run the sample apps in containers with it, without an image store; it is not
//! how images are made for users (that is the image store's job).

use std::{
    future::Future,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    process::Command,
};

use super::{ImageProvider, PreparedImage};
use crate::Failure;

/// An [`ImageProvider`] that answers every reference with one prepared image (a rootfs made
/// with [`build`]), for tests and benchmarks.
#[derive(Clone, Debug)]
pub struct FixedImage(pub PreparedImage);

impl ImageProvider for FixedImage {
    fn prepare<'a>(
        &'a self,
        _image: &'a str,
        _pull: &'a super::PullSecrets,
        _progress: &'a (dyn Fn(super::PullProgress) + Send + Sync),
    ) -> Pin<Box<dyn Future<Output = Result<PreparedImage, Failure>> + Send + 'a>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// Puts each `(host binary, path in the rootfs)` under `root` with its libraries, plus the
/// empty `/proc`, `/sys`, `/dev` and `/etc` a container's mounts need.
pub fn build(root: &Path, binaries: &[(PathBuf, &str)]) -> io::Result<()> {
    for (bin, dest) in binaries {
        let out = Command::new("ldd").arg(bin).output()?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-….so.2 (0x…)`
            let lib = line
                .split("=>")
                .last()
                .and_then(|s| s.split_whitespace().next())
                .filter(|p| p.starts_with('/'));
            if let Some(lib) = lib {
                place(root, Path::new(lib), lib)?;
            }
        }
        place(root, bin, dest)?;
    }
    for d in ["proc", "sys", "dev", "etc"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    Ok(())
}

/// `file` (its target, if a symlink) at `dest` under `root`.
fn place(root: &Path, file: &Path, dest: &str) -> io::Result<()> {
    let dest = root.join(dest.trim_start_matches('/'));
    if dest.exists() {
        return Ok(());
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let real = std::fs::canonicalize(file)?;
    std::fs::hard_link(&real, &dest).or_else(|_| std::fs::copy(&real, &dest).map(drop))
}
