//! wisp's image store behind the two seams that need images: the revision reconciler's
//! tag-to-digest resolution ([`DigestResolver`]) and the container platform's image
//! preparation ([`ImageProvider`]: pull if missing, unpack once).
//!
//! Failures are mapped to the reasons Kubernetes shows for a pod's container
//! (`ErrImagePull`, `InvalidImageName`, …; kubelet's `pkg/kubelet/images/types.go`), which the
//! revision then reports.

use std::{collections::HashSet, future::Future, pin::Pin, time::Duration};

use wisp_controller::revision::digest::{BoxFuture, DigestResolver, ResolveOptions};
use wisp_image::{ErrorKind, Limits, RegistryOptions, Store};
use wisp_runtime::{
    Failure,
    container::{ImageConfig, ImageProvider, PreparedImage},
};

/// The image store, shared by resolution and the container platform.
#[derive(Clone, Debug)]
pub struct Images {
    store: Store,
    registry: RegistryOptions,
    limits: Limits,
}

impl Images {
    pub fn new(store: Store, registry: RegistryOptions) -> Self {
        Images {
            store,
            registry,
            limits: Limits::default(),
        }
    }

    /// Pulls `image` unless the store has it, then unpacks it (once) for this machine.
    async fn prepare_image(&self, image: &str) -> Result<PreparedImage, wisp_image::Error> {
        if self.store.lookup(image)?.is_none() {
            let started = std::time::Instant::now();
            wisp_image::registry::pull(&self.store, image, &self.registry, &|_| {}).await?;
            tracing::info!(image, elapsed = ?started.elapsed(), "pulled");
        }
        let (store, limits, image) = (self.store.clone(), self.limits, image.to_owned());
        // Unpacking is blocking file work: off the async workers.
        let prepared = tokio::task::spawn_blocking(move || store.prepare(&image, limits))
            .await
            .map_err(|e| wisp_image::Error::Io {
                context: "unpacking the image".into(),
                source: std::io::Error::other(e.to_string()),
            })??;
        let c = prepared.config;
        Ok(PreparedImage {
            rootfs: prepared.rootfs,
            config: ImageConfig {
                entrypoint: c.entrypoint,
                cmd: c.cmd,
                env: c.env,
                working_dir: c.working_dir,
                user: c.user,
            },
        })
    }
}

/// Kubernetes' waiting reason for a failed image preparation.
fn reason(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidReference => "InvalidImageName",
        // kubelet reports every pull failure as ErrImagePull (then ImagePullBackOff while
        // it waits to retry); the message says which.
        _ => "ErrImagePull",
    }
}

impl ImageProvider for Images {
    fn prepare<'a>(
        &'a self,
        image: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<PreparedImage, Failure>> + Send + 'a>> {
        Box::pin(async move {
            self.prepare_image(image).await.map_err(|e| Failure {
                reason: reason(e.kind()).to_string(),
                message: format!("Failed to pull image {image:?}: {e}"),
            })
        })
    }
}

impl DigestResolver for Images {
    fn resolve<'a>(
        &'a self,
        image: &'a str,
        opts: &'a ResolveOptions,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let skip: HashSet<String> = opts.registries_to_skip.iter().cloned().collect();
            let parsed = wisp_image::reference::parse(image).map_err(|e| e.to_string())?;
            // Knative records no digest for a skipped registry (`resolve.go`).
            if parsed.digest().is_none() && skip.contains(parsed.registry()) {
                return Ok(String::new());
            }
            let timeout = if opts.timeout.is_zero() {
                Duration::from_secs(10)
            } else {
                opts.timeout
            };
            wisp_image::registry::resolve(&self.store, image, &skip, timeout, &self.registry)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
