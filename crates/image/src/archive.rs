//! Image archives: `load` of a `docker save` tarball (`manifest.json` + layer tars) or an OCI
//! image-layout archive (`oci-layout`, `index.json`, `blobs/`), recording the names they
//! carry; `save` of stored images as an OCI image-layout archive.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::store::{Document, Store, sha256_digest};

/// Names and digests a load recorded.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// `(name, digest)` for each name the archive carried.
    pub names: Vec<(String, String)>,
    /// Every top-level image digest, named or not.
    pub digests: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// Loads an archive (either format, detected by its files).
pub fn load(store: &Store, path: &Path) -> Result<Loaded> {
    let archive_err = |message: String| Error::Archive {
        path: path.to_path_buf(),
        message,
    };
    let _gc = store.gc_shared()?;
    let file = File::open(path).map_err(Error::io(format!("opening {}", path.display())))?;
    let dir = tempfile::Builder::new()
        .prefix("load-")
        .tempdir_in(store.tmp_dir())
        .map_err(Error::io("creating a temp dir in the image store"))?;
    // tar's `unpack` refuses entries that would leave the directory.
    let mut reader: Box<dyn Read> = Box::new(std::io::BufReader::new(file));
    let mut head = [0u8; 2];
    {
        let mut f = File::open(path).map_err(Error::io(format!("opening {}", path.display())))?;
        let _ = f.read(&mut head);
    }
    if head == [0x1f, 0x8b] {
        reader = Box::new(flate2::read::MultiGzDecoder::new(reader));
    }
    tar::Archive::new(reader)
        .unpack(dir.path())
        .map_err(|e| archive_err(format!("not a readable tar archive: {e}")))?;
    let root = dir.path();
    if root.join("manifest.json").is_file() && !root.join("index.json").is_file() {
        load_docker(store, root).map_err(|e| match e {
            Error::Io { context, source } => archive_err(format!("{context}: {source}")),
            other => other,
        })
    } else if root.join("index.json").is_file() {
        load_oci(store, root)
    } else {
        Err(archive_err(
            "neither a `docker save` archive (manifest.json) nor an OCI image layout (index.json)"
                .into(),
        ))
    }
}

fn inside(root: &Path, rel: &str) -> Result<std::path::PathBuf> {
    match crate::unpack::clean_path(Path::new(rel)) {
        Ok(Some(p)) => Ok(root.join(p)),
        _ => Err(Error::InvalidContent {
            what: "archive".into(),
            message: format!("path {rel:?} is not inside the archive"),
        }),
    }
}

fn load_docker(store: &Store, root: &Path) -> Result<Loaded> {
    let bytes =
        std::fs::read(root.join("manifest.json")).map_err(Error::io("reading manifest.json"))?;
    let entries: Vec<DockerManifest> =
        serde_json::from_slice(&bytes).map_err(|e| Error::InvalidContent {
            what: "manifest.json".into(),
            message: e.to_string(),
        })?;
    let mut loaded = Loaded::default();
    for m in entries {
        let (config_digest, config_size) =
            store.put_blob_file(&inside(root, &m.config)?, "image config")?;
        let mut layers = Vec::new();
        for l in &m.layers {
            let p = inside(root, l)?;
            let mut head = [0u8; 4];
            if let Ok(mut f) = File::open(&p) {
                let _ = f.read(&mut head);
            }
            let media = if head.starts_with(&[0x1f, 0x8b]) {
                "application/vnd.oci.image.layer.v1.tar+gzip"
            } else if head == [0x28, 0xb5, 0x2f, 0xfd] {
                "application/vnd.oci.image.layer.v1.tar+zstd"
            } else {
                "application/vnd.oci.image.layer.v1.tar"
            };
            let (d, size) = store.put_blob_file(&p, "layer")?;
            layers.push(serde_json::json!({"mediaType": media, "digest": d, "size": size}));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
            "layers": layers,
        });
        let mbytes = serde_json::to_vec(&manifest).map_err(|e| Error::InvalidContent {
            what: "manifest".into(),
            message: e.to_string(),
        })?;
        let digest = sha256_digest(&mbytes);
        store.put_blob(&mbytes, &digest, "manifest")?;
        for t in m.repo_tags.unwrap_or_default() {
            store.tag(&t, &digest)?;
            loaded.names.push((
                crate::reference::canonical(&crate::reference::parse(&t)?),
                digest.clone(),
            ));
        }
        loaded.digests.push(digest);
    }
    Ok(loaded)
}

fn load_oci(store: &Store, root: &Path) -> Result<Loaded> {
    let blobs = root.join("blobs/sha256");
    if let Ok(entries) = std::fs::read_dir(&blobs) {
        for e in entries.flatten() {
            let want = format!("sha256:{}", e.file_name().to_string_lossy());
            let (got, _) = store.put_blob_file(&e.path(), &want)?;
            if got != want {
                return Err(Error::DigestMismatch {
                    what: format!("blob {want} in the archive"),
                    expected: want,
                    actual: got,
                });
            }
        }
    }
    let bytes = std::fs::read(root.join("index.json")).map_err(Error::io("reading index.json"))?;
    let index = match crate::store::parse_document(&bytes, "index.json")? {
        Document::Index(i) => *i,
        Document::Manifest(_) => {
            return Err(Error::InvalidContent {
                what: "index.json".into(),
                message: "not an image index".into(),
            });
        }
    };
    let mut loaded = Loaded::default();
    for m in index.manifests() {
        let digest = m.digest().to_string();
        if !store.has_blob(&digest) {
            return Err(Error::InvalidContent {
                what: "index.json".into(),
                message: format!("{digest} is not in blobs/"),
            });
        }
        let ann = m.annotations().clone().unwrap_or_default();
        // containerd's full name first; the OCI ref name when it is a full reference.
        let name = ann.get("io.containerd.image.name").or_else(|| {
            ann.get("org.opencontainers.image.ref.name")
                .filter(|n| n.contains('/') || n.contains(':'))
        });
        if let Some(n) = name {
            store.tag(n, &digest)?;
            loaded.names.push((
                crate::reference::canonical(&crate::reference::parse(n)?),
                digest.clone(),
            ));
        }
        loaded.digests.push(digest);
    }
    Ok(loaded)
}

/// Writes the named images (names or digests) as an OCI image-layout tar archive.
pub fn save(store: &Store, names: &[String], out: &Path) -> Result<()> {
    let tmp = tempfile::NamedTempFile::new_in(
        out.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
    .map_err(Error::io(format!(
        "creating a temp file next to {}",
        out.display()
    )))?;
    let mut b = tar::Builder::new(tmp.as_file());
    let io = |c: &str| Error::io(format!("writing {}: {c}", out.display()));
    let add = |b: &mut tar::Builder<&File>, name: &str, data: &[u8]| -> Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).map_err(io(name))
    };
    add(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let mut manifests = Vec::new();
    let mut seen = HashSet::new();
    for n in names {
        let digest = store.lookup(n)?.ok_or_else(|| Error::NotLocal(n.clone()))?;
        let r = crate::reference::parse(n)?;
        let bytes = store.read_blob(&digest)?;
        let media = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.get("mediaType")
                    .and_then(|m| m.as_str())
                    .map(String::from)
            })
            .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".into());
        let mut ann = serde_json::Map::new();
        if r.digest().is_none() {
            ann.insert(
                "io.containerd.image.name".into(),
                crate::reference::canonical(&r).into(),
            );
            ann.insert(
                "org.opencontainers.image.ref.name".into(),
                r.tag().unwrap_or("latest").into(),
            );
        }
        manifests.push(serde_json::json!({"mediaType": media, "digest": digest, "size": bytes.len(), "annotations": ann}));
        let mut blobs = vec![digest.clone()];
        let mut queue = vec![digest];
        while let Some(d) = queue.pop() {
            match store.document(&d) {
                Ok(Document::Index(i)) => {
                    for m in i.manifests() {
                        let md = m.digest().to_string();
                        if store.has_blob(&md) {
                            blobs.push(md.clone());
                            queue.push(md);
                        }
                    }
                }
                Ok(Document::Manifest(m)) => {
                    blobs.push(m.config().digest().to_string());
                    blobs.extend(m.layers().iter().map(|l| l.digest().to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        for d in blobs {
            if seen.insert(d.clone()) {
                let path = store.blob_path(&d)?;
                b.append_path_with_name(
                    &path,
                    format!("blobs/sha256/{}", crate::store::digest_hex(&d)?),
                )
                .map_err(io(&d))?;
            }
        }
    }
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    add(&mut b, "index.json", index.to_string().as_bytes())?;
    b.finish().map_err(io("finishing"))?;
    drop(b);
    tmp.as_file().sync_all().map_err(io("syncing"))?;
    tmp.persist(out).map_err(|e| io("renaming")(e.error))?;
    Ok(())
}
