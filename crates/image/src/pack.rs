//! Building images locally: [`build_image`] stores a manifest and config over given layer
//! blobs; [`pack_binary`] makes a single-layer image from a local binary and the shared
//! libraries `ldd` lists (how the sample apps become images offline, and how tests make
//! theirs).

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::error::{Error, Result};
use crate::store::{Store, sha256_digest};

/// `PATH` as Docker's default for images.
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One layer: its blob (as stored) and media type, and the digest of its uncompressed tar
/// (the config's `diff_ids`).
#[derive(Debug, Clone)]
pub struct Layer {
    pub blob: Vec<u8>,
    pub media_type: String,
    pub diff_id: String,
}

impl Layer {
    /// A gzip layer from an uncompressed tar.
    pub fn gzip(tar: &[u8]) -> Result<Layer> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(tar)
            .map_err(Error::io("compressing a layer"))?;
        let blob = enc.finish().map_err(Error::io("compressing a layer"))?;
        Ok(Layer {
            blob,
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            diff_id: sha256_digest(tar),
        })
    }
}

/// Stores `layers` and an OCI manifest + config (`config`: the config's `config` section —
/// Entrypoint, Cmd, Env …) for `arch`; names it `name` if given. Returns the manifest digest.
pub fn build_image(
    store: &Store,
    layers: &[Layer],
    config: serde_json::Value,
    arch: &str,
    name: Option<&str>,
) -> Result<String> {
    let config_doc = serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>()},
    });
    let config_bytes = serde_json::to_vec(&config_doc).map_err(|e| Error::InvalidContent {
        what: "image config".into(),
        message: e.to_string(),
    })?;
    let config_digest = sha256_digest(&config_bytes);
    store.put_blob(&config_bytes, &config_digest, "image config")?;
    let mut descs = Vec::new();
    for l in layers {
        let d = sha256_digest(&l.blob);
        store.put_blob(&l.blob, &d, "layer")?;
        descs.push(
            serde_json::json!({"mediaType": l.media_type, "digest": d, "size": l.blob.len()}),
        );
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_bytes.len()},
        "layers": descs,
    });
    let bytes = serde_json::to_vec(&manifest).map_err(|e| Error::InvalidContent {
        what: "manifest".into(),
        message: e.to_string(),
    })?;
    let digest = sha256_digest(&bytes);
    store.put_blob(&bytes, &digest, "manifest")?;
    if let Some(n) = name {
        store.tag(n, &digest)?;
    }
    Ok(digest)
}

/// The shared libraries `ldd` lists for `binary` (none for a static binary).
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(Error::io("running ldd (from libc-bin)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(parse_ldd(&text))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line,
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    libs
}

/// A tar header owned by root with a fixed mtime, so a pack is reproducible.
pub fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

/// Builds a single-layer image of `binary` (at `/usr/local/bin/<name>`, the Entrypoint) and
/// its shared libraries, with Docker's default `PATH`, then `env` (`KEY=VALUE` each), and a
/// `/tmp`; tags it `name`.
pub fn pack_binary(store: &Store, binary: &Path, name: &str, env: &[String]) -> Result<String> {
    crate::reference::parse(name)?;
    if let Some(bad) = env.iter().find(|e| !e.contains('=') || e.starts_with('=')) {
        return Err(Error::InvalidContent {
            what: "image environment".into(),
            message: format!("{bad:?} is not KEY=VALUE"),
        });
    }
    let file_name = binary
        .file_name()
        .ok_or_else(|| {
            Error::io(format!("{} has no file name", binary.display()))(
                std::io::ErrorKind::InvalidInput.into(),
            )
        })?
        .to_string_lossy()
        .to_string();
    let in_image = format!("usr/local/bin/{file_name}");
    let mut files = vec![(binary.to_path_buf(), in_image.clone())];
    for lib in shared_libraries(binary)? {
        let rel = lib.to_string_lossy().trim_start_matches('/').to_string();
        files.push((lib, rel));
    }
    let mut b = tar::Builder::new(Vec::new());
    let mut seen_dirs = std::collections::BTreeSet::new();
    let mut tmp = header(tar::EntryType::Directory, 0o1777, 0);
    b.append_data(&mut tmp, "tmp/", std::io::empty())
        .map_err(Error::io("building the layer"))?;
    for (src, dst) in &files {
        let data = std::fs::read(src).map_err(Error::io(format!("reading {}", src.display())))?;
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(src).map_or(0o755, |m| m.permissions().mode() & 0o7777)
        };
        // Parent directories first, outermost first, each once.
        let mut parents: Vec<&Path> = Path::new(dst)
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        parents.reverse();
        for p in parents {
            if seen_dirs.insert(p.to_path_buf()) {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                b.append_data(&mut h, format!("{}/", p.display()), std::io::empty())
                    .map_err(Error::io("building the layer"))?;
            }
        }
        let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
        b.append_data(&mut h, dst, data.as_slice())
            .map_err(Error::io("building the layer"))?;
    }
    let tar = b.into_inner().map_err(Error::io("building the layer"))?;
    let layer = Layer::gzip(&tar)?;
    build_image(
        store,
        &[layer],
        serde_json::json!({
            "Entrypoint": [format!("/{in_image}")],
            "Env": std::iter::once(DEFAULT_PATH.to_string())
                .chain(env.iter().cloned())
                .collect::<Vec<_>>(),
            "WorkingDir": "/",
        }),
        crate::platform::current_arch(),
        Some(name),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }
}
