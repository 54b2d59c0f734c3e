//! Unpacking an image's layers into a root filesystem, safely.
//!
//! Each image is unpacked once into `rootfs/<manifest-hex>/`, built under `tmp/` and renamed
//! into place, then shared read-only by every replica. Layers are tar streams, gzip- or
//! zstd-compressed or plain (by media type, else by magic bytes). Whiteouts (`.wh.<name>`)
//! delete what lower layers put there; `.wh..wh..opq` empties a directory of lower layers'
//! entries (the OCI image spec's `layer.md`).
//!
//! No entry may land outside the root. Paths with `..` are refused. Parent directories are
//! resolved inside the root the way containerd's `continuity/fs.RootPath` does: a symlink
//! met on the way is read and resolved as if the root were `/` (so `a -> /etc` then `a/passwd`
//! writes `<root>/etc/passwd`), and the entry itself is never followed — an existing symlink
//! at its place is replaced. Hard-link targets are resolved in the root too. Only this process
//! writes the temp tree while it is built, so the checks cannot race. Device nodes and FIFOs
//! are skipped with a warning (a container gets its `/dev` from the runtime). A budget on
//! decompressed bytes and on entries stops decompression bombs.

use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use oci_spec::image::ImageManifest;
use tar::EntryType;

use crate::error::{Error, Result};
use crate::store::{Store, digest_hex};

/// Limits against decompression bombs.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Total decompressed bytes over all layers of an image.
    pub max_bytes: u64,
    /// Total tar entries over all layers of an image.
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 8 << 30,
            max_entries: 1_000_000,
        }
    }
}

/// What is left of the [`Limits`] while an image is unpacked.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    bytes: Rc<Cell<u64>>,
    entries: u64,
}

impl Budget {
    pub fn new(limits: Limits) -> Budget {
        Budget {
            limits,
            bytes: Rc::new(Cell::new(0)),
            entries: 0,
        }
    }
    fn bytes_exceeded(&self) -> bool {
        self.bytes.get() > self.limits.max_bytes
    }
}

/// Counts decompressed bytes and fails the read once over the budget, so a bomb stops after
/// at most one buffer past the limit.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
    limit: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        if self.count.get() > self.limit {
            return Err(io::Error::other("unpacked size limit exceeded"));
        }
        Ok(n)
    }
}

/// The rootfs of `manifest` (digest `manifest_digest`), unpacked if it is not yet.
pub fn unpack_image(
    store: &Store,
    manifest_digest: &str,
    manifest: &ImageManifest,
    limits: Limits,
) -> Result<PathBuf> {
    let dest = store
        .root()
        .join("rootfs")
        .join(digest_hex(manifest_digest)?);
    if dest.is_dir() {
        return Ok(dest);
    }
    let tmp = tempfile::Builder::new()
        .prefix("unpack-")
        .tempdir_in(store.tmp_dir())
        .map_err(Error::io("creating a temp dir in the image store"))?;
    let root = tmp.path().join("rootfs");
    fs::create_dir(&root).map_err(Error::io("creating a temp rootfs"))?;
    let mut budget = Budget::new(limits);
    for layer in manifest.layers() {
        let digest = layer.digest().to_string();
        let path = store.blob_path(&digest)?;
        let file = fs::File::open(&path).map_err(|e| Error::Layer {
            digest: digest.clone(),
            message: format!("opening the blob: {e}"),
        })?;
        apply_layer(
            file,
            &root,
            layer.media_type().as_ref(),
            &digest,
            &mut budget,
        )?;
    }
    set_mode(&root, 0o755).map_err(Error::io("setting the rootfs mode"))?;
    match fs::rename(&root, &dest) {
        Ok(()) => Ok(dest),
        // Another process unpacked the same image meanwhile: use theirs.
        Err(_) if dest.is_dir() => Ok(dest),
        Err(e) => Err(Error::io(format!("renaming into {}", dest.display()))(e)),
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Removes a tree without following symlinks (std's `remove_dir_all` does not follow them).
pub fn remove_tree(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(path).map_err(Error::io(format!("removing {}", path.display())))
        }
        Ok(_) => fs::remove_file(path).map_err(Error::io(format!("removing {}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("inspecting {}", path.display()))(e)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    Gzip,
    Zstd,
    None,
}

/// The compression by media type; unknown media types by magic bytes.
fn compression(media_type: &str, head: &[u8]) -> Compression {
    if media_type.ends_with("gzip") {
        Compression::Gzip
    } else if media_type.ends_with("zstd") {
        Compression::Zstd
    } else if media_type.ends_with(".tar") {
        Compression::None
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Applies one layer (a possibly compressed tar stream) on top of `root`.
pub fn apply_layer(
    reader: impl Read,
    root: &Path,
    media_type: &str,
    digest: &str,
    budget: &mut Budget,
) -> Result<()> {
    let layer_err = |message: String| Error::Layer {
        digest: digest.to_string(),
        message,
    };
    let mut buffered = BufReader::with_capacity(1 << 16, reader);
    let head = buffered
        .fill_buf()
        .map_err(|e| layer_err(format!("reading: {e}")))?
        .to_vec();
    let decoded: Box<dyn Read> = match compression(media_type, &head) {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(buffered)
                .map_err(|e| layer_err(format!("zstd: {e}")))?,
        ),
        Compression::None => Box::new(buffered),
    };
    let counted = Counting {
        inner: decoded,
        count: budget.bytes.clone(),
        limit: budget.limits.max_bytes,
    };
    let mut archive = tar::Archive::new(counted);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);

    let limit_err = |budget: &Budget| {
        layer_err(format!(
            "unpacked size exceeds the limit of {} bytes",
            budget.limits.max_bytes
        ))
    };
    let entries = match archive.entries() {
        Ok(e) => e,
        Err(e) => return Err(layer_err(format!("not a tar stream: {e}"))),
    };
    let mut written: HashSet<PathBuf> = HashSet::new();
    for entry in entries {
        let mut entry = match entry {
            Ok(e) => e,
            Err(_) if budget.bytes_exceeded() => return Err(limit_err(budget)),
            Err(e) => return Err(layer_err(format!("malformed tar: {e}"))),
        };
        budget.entries += 1;
        if budget.entries > budget.limits.max_entries {
            return Err(layer_err(format!(
                "more than {} entries in the image",
                budget.limits.max_entries
            )));
        }
        let raw = entry.path_bytes().into_owned();
        let raw_path = Path::new(std::ffi::OsStr::from_bytes_compat(&raw));
        let Some(rel) = clean_path(raw_path).map_err(&layer_err)? else {
            continue; // the root itself
        };
        let (parent, name) = split(&rel);
        let parent_dir = root.join(resolve_in_root(root, &parent).map_err(&layer_err)?);
        let name_str = name.to_string_lossy();

        // Whiteouts (OCI image spec, layer.md).
        if name_str == ".wh..wh..opq" {
            if let Ok(children) = fs::read_dir(&parent_dir) {
                for c in children.flatten() {
                    if !written.contains(&c.path()) {
                        remove_tree(&c.path())?;
                    }
                }
            }
            continue;
        }
        if let Some(hidden) = name_str.strip_prefix(".wh.") {
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                return Err(layer_err(format!("invalid whiteout {}", rel.display())));
            }
            remove_tree(&parent_dir.join(hidden))?;
            continue;
        }

        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::Char | EntryType::Block | EntryType::Fifo) {
            tracing::warn!(layer = digest, path = %rel.display(), "skipping a device node or FIFO in an image layer");
            continue;
        }
        if matches!(
            kind,
            EntryType::XGlobalHeader
                | EntryType::XHeader
                | EntryType::GNULongName
                | EntryType::GNULongLink
        ) {
            continue;
        }
        fs::create_dir_all(&parent_dir)
            .map_err(|e| layer_err(format!("creating {}: {e}", parent.display())))?;
        let target = parent_dir.join(&name);
        // Never follow or write through what is at the entry's place: replace it (a directory
        // stays when the entry is a directory too).
        match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() && kind == EntryType::Directory => {}
            Ok(_) => remove_tree(&target)?,
            Err(_) => {}
        }
        match kind {
            EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| {
                        layer_err(format!("hard link {} without a target", rel.display()))
                    })?
                    .into_owned();
                let link_rel = clean_path(Path::new(std::ffi::OsStr::from_bytes_compat(&link)))
                    .map_err(&layer_err)?
                    .ok_or_else(|| layer_err(format!("hard link {} to the root", rel.display())))?;
                let (lp, ln) = split(&link_rel);
                let source = root
                    .join(resolve_in_root(root, &lp).map_err(&layer_err)?)
                    .join(ln);
                fs::hard_link(&source, &target).map_err(|e| {
                    layer_err(format!(
                        "hard link {} -> {}: {e}",
                        rel.display(),
                        link_rel.display()
                    ))
                })?;
            }
            EntryType::Regular
            | EntryType::Continuous
            | EntryType::Directory
            | EntryType::Symlink
            | EntryType::GNUSparse => {
                if let Err(e) = entry.unpack(&target) {
                    if budget.bytes_exceeded() {
                        return Err(limit_err(budget));
                    }
                    return Err(layer_err(format!("unpacking {}: {e}", rel.display())));
                }
            }
            other => {
                tracing::warn!(layer = digest, path = %rel.display(), kind = ?other, "skipping an unsupported tar entry type");
                continue;
            }
        }
        written.insert(target);
    }
    if budget.bytes_exceeded() {
        return Err(limit_err(budget));
    }
    Ok(())
}

/// `OsStr` from tar's raw bytes (Unix paths are bytes).
trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr;
}
impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

/// An entry's path relative to the root: leading `/` and `.` dropped; `..` refused.
/// `None` for the root itself.
pub fn clean_path(raw: &Path) -> Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "entry {:?} has a `..` component (it could escape the root)",
                    raw.display().to_string()
                ));
            }
            Component::Prefix(_) => {
                return Err(format!(
                    "entry {:?} has a path prefix",
                    raw.display().to_string()
                ));
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

fn split(rel: &Path) -> (PathBuf, OsString) {
    let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = rel.file_name().map(OsString::from).unwrap_or_default();
    (parent, name)
}

/// Resolves a directory path (relative to `root`) as if `root` were `/`: symlinks met are
/// read and resolved inside the root, `..` stops at the root; missing components are kept
/// (they will be created as directories). The result is relative to `root` and contains
/// only real directories or missing names, so writing below it never leaves the root.
pub fn resolve_in_root(root: &Path, dir: &Path) -> Result<PathBuf, String> {
    let mut resolved: Vec<OsString> = Vec::new();
    let mut pending: VecDeque<OsString> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            resolved.pop();
            continue;
        }
        let here: PathBuf = root
            .iter()
            .chain(resolved.iter().map(|s| s.as_os_str()))
            .collect();
        let candidate = here.join(&c);
        match fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(format!(
                        "too many levels of symbolic links at {}",
                        dir.display()
                    ));
                }
                let target = fs::read_link(&candidate)
                    .map_err(|e| format!("reading link {}: {e}", candidate.display()))?;
                if target.is_absolute() {
                    resolved.clear();
                }
                let mut parts: Vec<OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_os_string()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                while let Some(p) = parts.pop() {
                    pending.push_front(p);
                }
            }
            Ok(m) if m.is_dir() => resolved.push(c),
            Ok(_) => {
                return Err(format!(
                    "{} is not a directory (needed for {})",
                    candidate.strip_prefix(root).unwrap_or(&candidate).display(),
                    dir.display()
                ));
            }
            Err(_) => resolved.push(c),
        }
    }
    Ok(resolved.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clean_path_rules() {
        let ok = [
            ("a/b", Some("a/b")),
            ("./a/./b/", Some("a/b")),
            ("/etc/passwd", Some("etc/passwd")),
            ("./", None),
            ("/", None),
        ];
        for (raw, want) in ok {
            assert_eq!(
                clean_path(Path::new(raw)).unwrap(),
                want.map(PathBuf::from),
                "{raw}"
            );
        }
        for bad in ["../x", "a/../../x", "a/..", "/.."] {
            assert!(clean_path(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolve_follows_links_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../../..", root.join("up")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        fs::write(root.join("file"), "x").unwrap();
        let cases: [(&str, Result<&str, ()>); 6] = [
            ("lib/x", Ok("usr/lib/x")),
            ("abs", Ok("etc")),
            ("abs/ssl", Ok("etc/ssl")),
            ("up/tmp", Ok("tmp")),
            ("loop/x", Err(())),
            ("file/x", Err(())),
        ];
        for (input, want) in cases {
            let got = resolve_in_root(root, Path::new(input));
            match want {
                Ok(w) => assert_eq!(got.unwrap(), PathBuf::from(w), "{input}"),
                Err(()) => assert!(got.is_err(), "{input}: {got:?}"),
            }
        }
    }

    proptest! {
        /// Whatever the path and whatever links exist, the resolved path has no `..` and
        /// stays under the root.
        #[test]
        fn resolved_paths_stay_inside(parts in proptest::collection::vec(
            prop_oneof![Just("..".to_string()), Just(".".to_string()), Just("l".to_string()),
                        Just("abs".to_string()), "[a-c]{1,2}"], 0..8)) {
            let t = tempfile::tempdir().unwrap();
            let root = t.path();
            std::os::unix::fs::symlink("../..", root.join("l")).unwrap();
            std::os::unix::fs::symlink("/", root.join("abs")).unwrap();
            let p: PathBuf = parts.iter().collect();
            if let Ok(r) = resolve_in_root(root, &p) {
                prop_assert!(r.components().all(|c| matches!(c, Component::Normal(_))));
                let full = root.join(&r);
                prop_assert!(full.starts_with(root));
            }
            if let Ok(Some(c)) = clean_path(&p) {
                prop_assert!(c.components().all(|c| matches!(c, Component::Normal(_))));
            }
        }
    }

    #[test]
    fn compression_by_media_type_then_magic() {
        assert_eq!(
            compression("application/vnd.oci.image.layer.v1.tar+gzip", b""),
            Compression::Gzip
        );
        assert_eq!(
            compression("application/vnd.docker.image.rootfs.diff.tar.gzip", b""),
            Compression::Gzip
        );
        assert_eq!(
            compression("application/vnd.oci.image.layer.v1.tar+zstd", b""),
            Compression::Zstd
        );
        assert_eq!(
            compression("application/vnd.oci.image.layer.v1.tar", b"\x1f\x8b"),
            Compression::None
        );
        assert_eq!(compression("x", b"\x1f\x8b\x08"), Compression::Gzip);
        assert_eq!(compression("x", b"\x28\xb5\x2f\xfd"), Compression::Zstd);
        assert_eq!(compression("x", b"abc"), Compression::None);
    }
}
