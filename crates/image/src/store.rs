//! The content-addressed store: `blobs/sha256/<hex>` (verified before commit), `index.json`
//! (names → digest), `rootfs/<manifest-hex>/` (unpacked images, shared read-only).
//!
//! Crash safety: every file appears by `rename` of a complete, fsynced temp file from `tmp/`
//! (same filesystem), so a kill at any point leaves the old or the new state plus, at worst,
//! a stray temp file that [`Store::open`] clears. Both the CLI and a running `wisp serve`
//! use one store: index changes take an exclusive `flock` on `index.lock`; a pull holds a
//! shared lock on `gc.lock` while its blobs are not yet named, and `prune` takes it
//! exclusively, so prune never deletes a blob a concurrent pull is about to tag.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use rustix::fs::FlockOperation;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};
use crate::platform;

/// A store rooted at a directory (wisp uses `<data-dir>/images`).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// `index.json`: every name the store knows, with the digest it points to (a manifest, or an
/// index / manifest list whose entry for this machine is stored too).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    images: BTreeMap<String, Named>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Named {
    digest: String,
    /// Recorded by a pull (a cache of what the registry said) rather than by `load`, `tag`
    /// or `pack` (authoritative: resolves without asking any registry).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pulled: bool,
}

/// One row of [`Store::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageEntry {
    /// The canonical name (`docker.io/library/hello:latest`).
    pub name: String,
    /// What the name points to (a manifest or an index).
    pub digest: String,
    /// Bytes of the manifest, config and layers (compressed) for this machine's platform.
    pub size: u64,
}

/// What [`Store::prune`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PruneReport {
    pub blobs_removed: usize,
    pub bytes_removed: u64,
    pub rootfs_removed: usize,
}

/// A parsed manifest document: either a single-platform manifest or an index.
#[derive(Debug, Clone)]
pub enum Document {
    Manifest(Box<ImageManifest>),
    Index(Box<ImageIndex>),
}

/// A held `flock`; released when dropped (the kernel releases it if we are killed).
#[derive(Debug)]
pub(crate) struct Lock(#[allow(dead_code)] File);

/// `sha256:<64 hex>` → the hex; anything else is an error naming the digest.
pub fn digest_hex(digest: &str) -> Result<&str> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::InvalidContent {
            what: "digest".into(),
            message: format!("{digest:?}: only sha256 digests are supported"),
        })?;
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Error::InvalidContent {
            what: "digest".into(),
            message: format!("{digest:?}: not 64 lowercase hex digits"),
        });
    }
    Ok(hex)
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Parses a manifest or index by its shape (Docker v2 schema 2 and OCI share field names).
pub fn parse_document(bytes: &[u8], what: &str) -> Result<Document> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Error::InvalidContent {
            what: what.to_string(),
            message: e.to_string(),
        })?;
    let bad = |e: serde_json::Error| Error::InvalidContent {
        what: what.to_string(),
        message: e.to_string(),
    };
    if value.get("manifests").is_some() {
        Ok(Document::Index(Box::new(
            serde_json::from_value(value).map_err(bad)?,
        )))
    } else if value.get("layers").is_some() {
        Ok(Document::Manifest(
            serde_json::from_value(value).map_err(bad)?,
        ))
    } else {
        let media = value
            .get("mediaType")
            .and_then(|m| m.as_str())
            .unwrap_or("");
        let schema = value
            .get("schemaVersion")
            .and_then(|m| m.as_i64())
            .unwrap_or(0);
        Err(Error::InvalidContent {
            what: what.to_string(),
            message: format!(
                "neither an image manifest nor an index (mediaType {media:?}, schemaVersion {schema}; Docker schema 1 is not supported)"
            ),
        })
    }
}

impl Store {
    /// Opens (creating if needed) a store at `root` and clears temp files a killed process
    /// may have left.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        for dir in ["blobs/sha256", "rootfs", "tmp"] {
            let d = root.join(dir);
            fs::create_dir_all(&d).map_err(Error::io(format!("creating {}", d.display())))?;
        }
        let store = Store { root };
        store.clear_stale_tmp();
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Removes temp files older than an hour: a live writer in another process may still
    /// own a younger one.
    fn clear_stale_tmp(&self) {
        let Ok(entries) = fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if old {
                let p = e.path();
                let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
            }
        }
    }

    pub(crate) fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    fn lock(&self, name: &str, op: FlockOperation) -> Result<Lock> {
        let path = self.root.join(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io(format!("opening {}", path.display())))?;
        rustix::fs::flock(&file, op)
            .map_err(|e| Error::io(format!("locking {}", path.display()))(e.into()))?;
        Ok(Lock(file))
    }

    /// Held by a pull or load until its names are recorded; prune waits for it.
    pub(crate) fn gc_shared(&self) -> Result<Lock> {
        self.lock("gc.lock", FlockOperation::LockShared)
    }

    // === blobs ===

    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("blobs/sha256").join(digest_hex(digest)?))
    }

    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    pub fn read_blob(&self, digest: &str) -> Result<Vec<u8>> {
        let p = self.blob_path(digest)?;
        fs::read(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotLocal(format!("blob {digest}")),
            _ => Error::io(format!("reading {}", p.display()))(e),
        })
    }

    /// Writes `bytes` as the blob `expected` after checking they hash to it.
    pub fn put_blob(&self, bytes: &[u8], expected: &str, what: &str) -> Result<()> {
        let mut w = self.blob_writer(expected, what)?;
        w.write_all(bytes)
            .map_err(Error::io(format!("writing blob {expected}")))?;
        w.commit()
    }

    /// A writer for the blob `expected`: hashed as written, committed by [`BlobWriter::commit`]
    /// only if the digest matches.
    pub fn blob_writer(&self, expected: &str, what: &str) -> Result<BlobWriter> {
        let dest = self.blob_path(expected)?;
        let tmp = tempfile::NamedTempFile::new_in(self.tmp_dir())
            .map_err(Error::io("creating a temp file in the image store"))?;
        Ok(BlobWriter {
            tmp,
            hasher: Sha256::new(),
            expected: expected.to_string(),
            what: what.to_string(),
            dest,
            written: 0,
        })
    }

    /// Copies a file into the store as a blob, computing its digest.
    pub fn put_blob_file(&self, path: &Path, what: &str) -> Result<(String, u64)> {
        let mut f = File::open(path).map_err(Error::io(format!("opening {}", path.display())))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(Error::io(format!("reading {}", path.display())))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
        if self.has_blob(&digest) {
            let size = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            return Ok((digest, size));
        }
        let mut w = self.blob_writer(&digest, what)?;
        let mut f = File::open(path).map_err(Error::io(format!("opening {}", path.display())))?;
        std::io::copy(&mut f, &mut w).map_err(Error::io(format!("copying {}", path.display())))?;
        let size = w.written;
        w.commit()?;
        Ok((digest, size))
    }

    pub fn document(&self, digest: &str) -> Result<Document> {
        parse_document(&self.read_blob(digest)?, &format!("manifest {digest}"))
    }

    /// The single-platform manifest behind `digest`: itself, or this machine's entry of an
    /// index. Returns the manifest's digest too.
    pub fn platform_manifest(&self, digest: &str, name: &str) -> Result<(String, ImageManifest)> {
        match self.document(digest)? {
            Document::Manifest(m) => Ok((digest.to_string(), *m)),
            Document::Index(idx) => {
                let chosen = platform::choose(&idx, name)?;
                match self.document(&chosen)? {
                    Document::Manifest(m) => Ok((chosen, *m)),
                    Document::Index(_) => Err(Error::InvalidContent {
                        what: format!("index {digest}"),
                        message: "nested index entries are not supported".into(),
                    }),
                }
            }
        }
    }

    pub fn config(&self, manifest: &ImageManifest) -> Result<ImageConfiguration> {
        let digest = manifest.config().digest().to_string();
        let bytes = self.read_blob(&digest)?;
        serde_json::from_slice(&bytes).map_err(|e| Error::InvalidContent {
            what: format!("image config {digest}"),
            message: e.to_string(),
        })
    }

    // === names ===

    fn read_index(&self) -> Result<Index> {
        let p = self.root.join("index.json");
        match fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::InvalidContent {
                what: p.display().to_string(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Index::default()),
            Err(e) => Err(Error::io(format!("reading {}", p.display()))(e)),
        }
    }

    fn write_index(&self, index: &Index) -> Result<()> {
        let p = self.root.join("index.json");
        let bytes = serde_json::to_vec_pretty(index).map_err(|e| Error::InvalidContent {
            what: "index".into(),
            message: e.to_string(),
        })?;
        atomic_write(&self.tmp_dir(), &p, &bytes)
    }

    fn update_index<T>(&self, f: impl FnOnce(&mut Index) -> Result<T>) -> Result<T> {
        let _lock = self.lock("index.lock", FlockOperation::LockExclusive)?;
        let mut index = self.read_index()?;
        let out = f(&mut index)?;
        self.write_index(&index)?;
        Ok(out)
    }

    /// Points `name` (a reference, normalised) at `digest`, which must be stored.
    pub fn tag(&self, name: &str, digest: &str) -> Result<()> {
        let r = crate::reference::parse(name)?;
        if !self.has_blob(digest) {
            return Err(Error::NotLocal(digest.to_string()));
        }
        let name = crate::reference::canonical(&r);
        self.update_index(|idx| {
            idx.images.insert(
                name,
                Named {
                    digest: digest.to_string(),
                    pulled: false,
                },
            );
            Ok(())
        })
    }

    /// Records what a pull of `name` fetched (a cache entry: resolution still asks the
    /// registry).
    pub(crate) fn record_pulled(&self, name: &str, digest: &str) -> Result<()> {
        self.update_index(|idx| {
            let local = idx.images.get(name).is_some_and(|n| !n.pulled);
            if !local {
                idx.images.insert(
                    name.to_string(),
                    Named {
                        digest: digest.to_string(),
                        pulled: true,
                    },
                );
            }
            Ok(())
        })
    }

    /// The digest of a name that was loaded, tagged or packed here (not one merely pulled).
    pub fn local_name(&self, canonical: &str) -> Result<Option<String>> {
        let _lock = self.lock("index.lock", FlockOperation::LockShared)?;
        Ok(self
            .read_index()?
            .images
            .get(canonical)
            .filter(|n| !n.pulled)
            .map(|n| n.digest.clone()))
    }

    /// Removes a name; returns the digest it pointed to.
    pub fn untag(&self, name: &str) -> Result<String> {
        let canonical = crate::reference::canonical(&crate::reference::parse(name)?);
        self.update_index(|idx| {
            idx.images
                .remove(&canonical)
                .map(|n| n.digest)
                .ok_or_else(|| Error::NotLocal(canonical.clone()))
        })
    }

    /// The digest a reference names locally: by digest if it has one and it is stored, else by
    /// its name in the index.
    pub fn lookup(&self, reference: &str) -> Result<Option<String>> {
        let r = crate::reference::parse(reference)?;
        if let Some(d) = r.digest() {
            return Ok(self.has_blob(d).then(|| d.to_string()));
        }
        let _lock = self.lock("index.lock", FlockOperation::LockShared)?;
        Ok(self
            .read_index()?
            .images
            .get(&crate::reference::canonical(&r))
            .map(|n| n.digest.clone()))
    }

    /// Every name with its digest and size, sorted by name.
    pub fn list(&self) -> Result<Vec<ImageEntry>> {
        let index = {
            let _lock = self.lock("index.lock", FlockOperation::LockShared)?;
            self.read_index()?
        };
        Ok(index
            .images
            .into_iter()
            .map(|(name, n)| {
                let size = self.image_size(&n.digest, &name).unwrap_or(0);
                ImageEntry {
                    name,
                    digest: n.digest,
                    size,
                }
            })
            .collect())
    }

    fn image_size(&self, digest: &str, name: &str) -> Result<u64> {
        let (mdigest, m) = self.platform_manifest(digest, name)?;
        let mut size = fs::metadata(self.blob_path(&mdigest)?).map_or(0, |m| m.len());
        size += m.config().size();
        size += m.layers().iter().map(|l| l.size()).sum::<u64>();
        Ok(size)
    }

    /// Blobs reachable from `digest`: itself, an index's entries that are stored, configs and
    /// layers.
    fn reachable(&self, digest: &str, out: &mut HashSet<String>) {
        if !out.insert(digest.to_string()) {
            return;
        }
        match self.document(digest) {
            Ok(Document::Index(idx)) => {
                for m in idx.manifests() {
                    if self.has_blob(m.digest().as_ref()) {
                        self.reachable(m.digest().as_ref(), out);
                    }
                }
            }
            Ok(Document::Manifest(m)) => {
                out.insert(m.config().digest().to_string());
                for l in m.layers() {
                    out.insert(l.digest().to_string());
                }
            }
            Err(_) => {}
        }
    }

    /// Removes blobs and unpacked rootfs dirs no name reaches. `in_use`: manifest digests
    /// whose rootfs a running container uses (kept even if untagged, with their blobs).
    pub fn prune(&self, in_use: &HashSet<String>) -> Result<PruneReport> {
        let _gc = self.lock("gc.lock", FlockOperation::LockExclusive)?;
        let _idx = self.lock("index.lock", FlockOperation::LockExclusive)?;
        let index = self.read_index()?;
        let mut keep = HashSet::new();
        for n in index.images.values() {
            self.reachable(&n.digest, &mut keep);
        }
        for d in in_use {
            self.reachable(d, &mut keep);
        }
        let mut report = PruneReport::default();
        let blobs = self.root.join("blobs/sha256");
        for e in fs::read_dir(&blobs)
            .map_err(Error::io(format!("listing {}", blobs.display())))?
            .flatten()
        {
            let digest = format!("sha256:{}", e.file_name().to_string_lossy());
            if !keep.contains(&digest) {
                let len = e.metadata().map_or(0, |m| m.len());
                fs::remove_file(e.path())
                    .map_err(Error::io(format!("removing {}", e.path().display())))?;
                report.blobs_removed += 1;
                report.bytes_removed += len;
            }
        }
        let rootfs = self.root.join("rootfs");
        for e in fs::read_dir(&rootfs)
            .map_err(Error::io(format!("listing {}", rootfs.display())))?
            .flatten()
        {
            let digest = format!("sha256:{}", e.file_name().to_string_lossy());
            if !keep.contains(&digest) {
                crate::unpack::remove_tree(&e.path())?;
                report.rootfs_removed += 1;
            }
        }
        Ok(report)
    }
}

/// A blob being written: hashed as it goes, renamed into place only when the digest matches.
#[derive(Debug)]
pub struct BlobWriter {
    tmp: tempfile::NamedTempFile,
    hasher: Sha256,
    expected: String,
    what: String,
    dest: PathBuf,
    written: u64,
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.tmp.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tmp.flush()
    }
}

impl BlobWriter {
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Verifies the digest, fsyncs and renames into `blobs/`; on mismatch the temp file is
    /// deleted and nothing is stored.
    pub fn commit(self) -> Result<()> {
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != self.expected {
            return Err(Error::DigestMismatch {
                what: self.what,
                expected: self.expected,
                actual,
            });
        }
        self.tmp
            .as_file()
            .sync_all()
            .map_err(Error::io("syncing a blob"))?;
        self.tmp
            .persist(&self.dest)
            .map_err(|e| Error::io(format!("storing {}", self.dest.display()))(e.error))?;
        Ok(())
    }
}

/// Writes `path` by renaming a fsynced temp file from `tmp_dir`: readers see old or new.
pub(crate) fn atomic_write(tmp_dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = tempfile::NamedTempFile::new_in(tmp_dir).map_err(Error::io(format!(
        "creating a temp file for {}",
        path.display()
    )))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(Error::io(format!("writing {}", path.display())))?;
    tmp.persist(path)
        .map_err(|e| Error::io(format!("replacing {}", path.display()))(e.error))?;
    Ok(())
}
