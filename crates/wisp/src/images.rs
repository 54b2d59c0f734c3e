//! wisp's image store behind the two seams that need images: the revision reconciler's
//! tag-to-digest resolution ([`DigestResolver`]) and the container platform's image
//! preparation ([`ImageProvider`]: pull if missing, unpack once).
//!
//! Failures are mapped to the reasons Kubernetes shows for a pod's container
//! (`ErrImagePull`, `InvalidImageName`, …; kubelet's `pkg/kubelet/images/types.go`), which the
//! revision then reports.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    pin::Pin,
    sync::Arc,
};

use wisp_controller::revision::digest::{BoxFuture, DigestResolver, ResolveOptions};
use wisp_image::{Credentials, ErrorKind, Limits, RegistryOptions, Store};
use wisp_runtime::{
    Failure,
    container::{ImageConfig, ImageProvider, PreparedImage, PullProgress, PullSecrets},
    podconfig::ObjectSource,
};

/// The image store, shared by resolution and the container platform.
pub struct Images {
    store: Store,
    registry: RegistryOptions,
    limits: Limits,
    /// Where `imagePullSecrets` are read.
    objects: Arc<dyn ObjectSource>,
    /// One pull at a time per image: the store counts an image by digest as present once
    /// its manifest is in, before its layers are, so a second replica starting beside the
    /// first must wait for the first's pull rather than unpack half an image.
    pulls: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Images {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Images")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Images {
    pub fn new(store: Store, registry: RegistryOptions, objects: Arc<dyn ObjectSource>) -> Self {
        Images {
            store,
            registry,
            limits: Limits::default(),
            objects,
            pulls: Default::default(),
        }
    }

    /// The registry options for `image`, with the credentials the pod's `imagePullSecrets`
    /// hold for its registry, if any. As the kubelet does, a pull secret that is missing or
    /// holds nothing for the registry is passed over with a warning and the pull goes on
    /// (with Docker's config file, else anonymously).
    fn options_for(&self, image: &str, pull: &PullSecrets) -> RegistryOptions {
        let mut opts = self.registry.clone();
        if pull.names.is_empty() {
            return opts;
        }
        let Ok(r) = wisp_image::reference::parse(image) else {
            return opts;
        };
        for name in &pull.names {
            let secret = match self.objects.secret(&pull.namespace, name) {
                Ok(Some(s)) => s,
                Ok(None) => {
                    tracing::warn!(
                        namespace = %pull.namespace,
                        "Unable to retrieve some image pull secrets ({name}); attempting to pull \
                         the image may not succeed."
                    );
                    continue;
                }
                Err(e) => {
                    tracing::warn!(namespace = %pull.namespace, secret = name, "reading: {e}");
                    continue;
                }
            };
            let Some(config) = secret.docker_config() else {
                continue;
            };
            match wisp_image::auth::lookup(config, r.registry()) {
                Ok(Some((username, password))) => {
                    opts.credentials = Some(Credentials { username, password });
                    return opts;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    namespace = %pull.namespace,
                    secret = name,
                    "not a Docker config: {e}"
                ),
            }
        }
        opts
    }

    /// Pulls `image` unless the store has it, then unpacks it (once) for this machine.
    async fn prepare_image(
        &self,
        image: &str,
        pull: &PullSecrets,
        progress: &(dyn Fn(PullProgress) + Send + Sync),
    ) -> Result<PreparedImage, wisp_image::Error> {
        let pulling = {
            let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
            pulls.entry(image.to_owned()).or_default().clone()
        };
        let pulled = pulling.lock().await;
        if self.store.lookup(image)?.is_none() {
            let started = std::time::Instant::now();
            let opts = self.options_for(image, pull);
            let report = |p: wisp_image::Progress| {
                progress(PullProgress {
                    done: p.done,
                    total: p.total,
                })
            };
            wisp_image::registry::pull(&self.store, image, &opts, &report).await?;
            tracing::info!(image, elapsed = ?started.elapsed(), "pulled");
        }
        drop(pulled);
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
        _ => wisp_runtime::podconfig::ERR_IMAGE_PULL,
    }
}

impl ImageProvider for Images {
    fn prepare<'a>(
        &'a self,
        image: &'a str,
        pull: &'a PullSecrets,
        progress: &'a (dyn Fn(PullProgress) + Send + Sync),
    ) -> Pin<Box<dyn Future<Output = Result<PreparedImage, Failure>> + Send + 'a>> {
        Box::pin(async move {
            self.prepare_image(image, pull, progress)
                .await
                .map_err(|e| Failure {
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
            let pull = PullSecrets {
                namespace: opts.namespace.clone(),
                names: opts.image_pull_secrets.clone(),
            };
            let registry = self.options_for(image, &pull);
            wisp_image::registry::resolve(&self.store, image, &skip, opts.timeout, &registry)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
