//! wisp's image store: pulls images over the OCI distribution API (`oci-client`), verifies
//! every blob against its digest, stores them content-addressed under a directory (wisp uses
//! `<data-dir>/images`) and unpacks each image once into a shared read-only root filesystem.
//!
//! Start at [`Store`] (the directory layout, names, prune), [`registry::resolve`] and
//! [`registry::pull`] (tags → digests as Knative does, pulls with progress),
//! [`unpack::unpack_image`] (safe layer extraction), [`archive`] (`docker save` and OCI
//! layout archives) and [`pack`] (an image from a local binary). Errors carry a class
//! ([`ErrorKind`]) the caller maps to Kubernetes' waiting reasons.

pub mod archive;
pub mod auth;
pub mod error;
pub mod pack;
pub mod platform;
pub mod reference;
pub mod registry;
pub mod store;
pub mod unpack;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use error::{Error, ErrorKind, Result};
pub use registry::{Credentials, Progress, Pulled, RegistryOptions};
pub use store::{ImageEntry, PruneReport, Store};
pub use unpack::Limits;

/// Installs rustls' `ring` provider once (reqwest is built without a default provider: the
/// aws-lc one needs cmake and a long build). A provider already installed is kept.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What a container needs from an image's config (`config` of the OCI image config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    /// `8080/tcp`-style keys.
    pub exposed_ports: Vec<String>,
}

impl ImageConfig {
    pub fn from_oci(c: &oci_spec::image::ImageConfiguration) -> ImageConfig {
        let Some(cfg) = c.config() else {
            return ImageConfig::default();
        };
        ImageConfig {
            entrypoint: cfg.entrypoint().clone().unwrap_or_default(),
            cmd: cfg.cmd().clone().unwrap_or_default(),
            env: cfg.env().clone().unwrap_or_default(),
            working_dir: cfg.working_dir().clone().filter(|w| !w.is_empty()),
            user: cfg.user().clone().filter(|u| !u.is_empty()),
            exposed_ports: cfg.exposed_ports().clone().unwrap_or_default(),
        }
    }
}

/// An image ready to run: its rootfs and config.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub manifest_digest: String,
    pub rootfs: PathBuf,
    pub config: ImageConfig,
    /// Labels of the image config, for `describe`.
    pub labels: BTreeMap<String, String>,
}

impl Store {
    /// Unpacks (once) the image a local name or digest points to, for this platform.
    pub fn prepare(&self, reference: &str, limits: Limits) -> Result<Prepared> {
        let digest = self
            .lookup(reference)?
            .ok_or_else(|| Error::NotLocal(reference.to_string()))?;
        let (manifest_digest, manifest) = self.platform_manifest(&digest, reference)?;
        let config = self.config(&manifest)?;
        let rootfs = unpack::unpack_image(self, &manifest_digest, &manifest, limits)?;
        Ok(Prepared {
            manifest_digest,
            rootfs,
            labels: config
                .config()
                .as_ref()
                .and_then(|c| c.labels().clone())
                .map(|l| l.into_iter().collect())
                .unwrap_or_default(),
            config: ImageConfig::from_oci(&config),
        })
    }
}
