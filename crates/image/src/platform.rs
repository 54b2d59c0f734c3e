//! Picks this machine's entry from an index / manifest list: `linux` and the architecture
//! of the running binary (Go's `GOARCH` names, as images use them).

use oci_spec::image::{ImageIndex, Os};

use crate::error::{Error, Result};

/// The `GOARCH` name of the running binary's architecture.
pub fn current_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// `linux/<arch>` for messages.
pub fn current() -> String {
    format!("linux/{}", current_arch())
}

/// The digest of `index`'s manifest for linux + this architecture, or a clear error listing
/// what the index has.
pub fn choose(index: &ImageIndex, name: &str) -> Result<String> {
    choose_for(index, name, current_arch())
}

pub(crate) fn choose_for(index: &ImageIndex, name: &str, arch: &str) -> Result<String> {
    let found = index.manifests().iter().find(|m| {
        m.platform()
            .as_ref()
            .is_some_and(|p| *p.os() == Os::Linux && p.architecture().to_string() == arch)
    });
    if let Some(m) = found {
        return Ok(m.digest().to_string());
    }
    let has: Vec<String> = index
        .manifests()
        .iter()
        .map(|m| match m.platform() {
            Some(p) => match p.variant() {
                Some(v) => format!("{}/{}/{v}", p.os(), p.architecture()),
                None => format!("{}/{}", p.os(), p.architecture()),
            },
            None => "unknown".to_string(),
        })
        .collect();
    Err(Error::UnsupportedPlatform {
        reference: name.to_string(),
        wanted: format!("linux/{arch}"),
        has: if has.is_empty() {
            "nothing".into()
        } else {
            has.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(platforms: &[(&str, &str)]) -> ImageIndex {
        let manifests: Vec<serde_json::Value> = platforms
            .iter()
            .enumerate()
            .map(|(i, (os, arch))| {
                serde_json::json!({
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": format!("sha256:{}", format!("{i}").repeat(64)),
                    "size": 10,
                    "platform": {"os": os, "architecture": arch}
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({"schemaVersion": 2, "manifests": manifests}))
            .unwrap()
    }

    #[test]
    fn picks_linux_arch() {
        let idx = index(&[("linux", "arm64"), ("windows", "amd64"), ("linux", "amd64")]);
        assert_eq!(
            choose_for(&idx, "x", "amd64").unwrap(),
            format!("sha256:{}", "2".repeat(64))
        );
        assert_eq!(
            choose_for(&idx, "x", "arm64").unwrap(),
            format!("sha256:{}", "0".repeat(64))
        );
    }

    #[test]
    fn no_match_lists_what_it_has() {
        let idx = index(&[("linux", "arm64"), ("windows", "amd64")]);
        let e = choose_for(&idx, "ghcr.io/x/y:1", "amd64").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no matching platform (linux/amd64) in ghcr.io/x/y:1 (has: linux/arm64, windows/amd64)"
        );
    }
}
