//! Tag-to-digest resolution in the background, as Knative's revision reconciler does it
//! (`pkg/reconciler/revision/background.go`, `revision.go`'s `reconcileDigest`).
//!
//! A revision runs the digests its images had when it was created, even if a tag moves
//! later: the reconciler asks [`BackgroundResolver::resolve`] once per revision; the first
//! call starts one resolution per distinct image on the runtime and answers
//! [`Resolution::Pending`]; when the last one finishes, the revision is enqueued again and
//! the next call answers the container statuses (or the first error), which the reconciler
//! stores in `status.containerStatuses`. From then on the stored statuses are the answer and
//! the resolver forgets the revision.
//!
//! The registry protocol itself is behind [`DigestResolver`] (wisp's image store
//! implements it), so the reconciler's decisions stay testable without a registry.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use wisp_api::serving::{Container, ContainerStatus, Revision};
use wisp_runtime::RevisionKey;
use wisp_sync::lock;

/// What a resolution needs besides the image (Knative's `k8schain.Options` and the
/// config-deployment keys).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolveOptions {
    pub namespace: String,
    pub service_account: String,
    /// `spec.imagePullSecrets[].name`.
    pub image_pull_secrets: Vec<String>,
    /// config-deployment `registries-skipping-tag-resolving`.
    pub registries_to_skip: Vec<String>,
    /// config-deployment `digest-resolution-timeout`.
    pub timeout: Duration,
}

/// A boxed future, as object-safe traits return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves one image reference (Knative's `digestResolver.Resolve`, `resolve.go`).
pub trait DigestResolver: Send + Sync + 'static {
    /// `<repository>@sha256:<hex>` for `image`; the image itself when it already names a
    /// digest; an empty string when its registry is in `registries_to_skip`. The error is
    /// the cause, which the caller wraps in Knative's "Unable to fetch image" message.
    fn resolve<'a>(
        &'a self,
        image: &'a str,
        opts: &'a ResolveOptions,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// What [`BackgroundResolver::resolve`] knows about a revision now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Resolving; the revision is enqueued again when done.
    Pending,
    /// Every container's digest: `(init container statuses, container statuses)`.
    Resolved(Vec<ContainerStatus>, Vec<ContainerStatus>),
    /// Knative's `ContainerMissing` message for the first image that failed.
    Failed(String),
}

/// Knative's `RevisionContainerMissingMessage`.
pub fn container_missing_message(image: &str, message: &str) -> String {
    format!("Unable to fetch image {image:?}: {message}")
}

/// Calls back with a revision's key when its resolution is done.
pub type Enqueue = Arc<dyn Fn(&RevisionKey) + Send + Sync>;

/// One revision's resolution in flight or done.
#[derive(Default)]
struct Resolving {
    /// Image → digest, as each finishes.
    resolved: HashMap<String, String>,
    /// The distinct images to resolve.
    wanted: HashSet<String>,
    err: Option<String>,
}

impl Resolving {
    fn ready(&self) -> bool {
        self.err.is_some() || self.resolved.len() == self.wanted.len()
    }
}

/// Knative's `backgroundResolver`: resolutions run on the tokio runtime, at most
/// `max_in_flight` at once; results wait until the reconciler asks for them.
pub struct BackgroundResolver {
    resolver: Arc<dyn DigestResolver>,
    enqueue: Enqueue,
    results: Arc<Mutex<HashMap<RevisionKey, Resolving>>>,
    permits: Arc<tokio::sync::Semaphore>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for BackgroundResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundResolver").finish_non_exhaustive()
    }
}

/// Knative resolves with 100 workers (`controller.go`); one machine needs fewer.
pub const MAX_IN_FLIGHT: usize = 16;

/// Whether a container has an image to resolve. On wisp a container may give only a host
/// `command` (the process runtime): it has no image and no digest.
fn has_image(c: &Container) -> bool {
    !c.image.is_empty()
}

impl BackgroundResolver {
    /// Must be called within a tokio runtime (resolutions are spawned on it).
    pub fn new(resolver: Arc<dyn DigestResolver>, enqueue: Enqueue) -> Self {
        BackgroundResolver {
            resolver,
            enqueue,
            results: Arc::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// The revision's resolution: starts it on the first call (answering `Pending`), then
    /// answers `Pending` until every image is done.
    pub fn resolve(&self, rev: &Revision, opts: &ResolveOptions) -> Resolution {
        let key = RevisionKey::new(&rev.metadata.namespace, &rev.metadata.name);
        let pod = &rev.spec.pod;
        let mut results = lock(&self.results);
        let Some(result) = results.get(&key) else {
            let wanted: HashSet<String> = pod
                .init_containers
                .iter()
                .chain(&pod.containers)
                .filter(|c| has_image(c))
                .map(|c| c.image.clone())
                .collect();
            let images: Vec<String> = wanted.iter().cloned().collect();
            results.insert(
                key.clone(),
                Resolving {
                    wanted,
                    ..Resolving::default()
                },
            );
            drop(results);
            if images.is_empty() {
                // Nothing to ask a registry: answer at once.
                return self.resolve(rev, opts);
            }
            for image in images {
                self.spawn(key.clone(), image, opts.clone());
            }
            return Resolution::Pending;
        };
        if !result.ready() {
            return Resolution::Pending;
        }
        if let Some(err) = &result.err {
            return Resolution::Failed(err.clone());
        }
        let statuses = |cs: &[Container]| -> Vec<ContainerStatus> {
            cs.iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    image_digest: result.resolved.get(&c.image).cloned().unwrap_or_default(),
                })
                .collect()
        };
        Resolution::Resolved(statuses(&pod.init_containers), statuses(&pod.containers))
    }

    fn spawn(&self, key: RevisionKey, image: String, opts: ResolveOptions) {
        let (resolver, results, enqueue, permits) = (
            self.resolver.clone(),
            self.results.clone(),
            self.enqueue.clone(),
            self.permits.clone(),
        );
        self.runtime.spawn(async move {
            // Closed only if the resolver is gone; then nobody waits for the answer.
            let Ok(_permit) = permits.acquire_owned().await else {
                return;
            };
            let timeout = opts.timeout;
            let outcome = match tokio::time::timeout(timeout, resolver.resolve(&image, &opts)).await
            {
                Ok(r) => r,
                // Go's `context deadline exceeded`, which is what Knative shows.
                Err(_) => Err(format!(
                    "context deadline exceeded (digest-resolution-timeout {timeout:?})"
                )),
            };
            let done = {
                let mut results = lock(&results);
                // Cleared meanwhile (the revision went away): drop the answer.
                let Some(result) = results.get_mut(&key) else {
                    return;
                };
                if result.ready() {
                    // Another image failed first; it already called back.
                    return;
                }
                match outcome {
                    Ok(digest) => {
                        result.resolved.insert(image, digest);
                    }
                    Err(e) => {
                        result.err = Some(format!(
                            "{}: {e}",
                            container_missing_message(&image, "failed to resolve image to digest")
                        ));
                    }
                }
                result.ready()
            };
            if done {
                enqueue(&key);
            }
        });
    }

    /// Forgets the revision's result (after the statuses are stored, after a failure so that
    /// the next reconcile tries again, or when the revision is deleted).
    pub fn clear(&self, key: &RevisionKey) {
        lock(&self.results).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers from a table; counts calls.
    struct Table {
        answers: HashMap<&'static str, Result<&'static str, &'static str>>,
        calls: AtomicUsize,
        delay: Duration,
    }

    impl DigestResolver for Table {
        fn resolve<'a>(
            &'a self,
            image: &'a str,
            _: &'a ResolveOptions,
        ) -> BoxFuture<'a, Result<String, String>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.delay).await;
                match self.answers.get(image) {
                    Some(Ok(d)) => Ok((*d).to_string()),
                    Some(Err(e)) => Err((*e).to_string()),
                    None => Err(format!("no answer for {image}")),
                }
            })
        }
    }

    fn rev(images: &[(&str, &str)]) -> Revision {
        let mut r = Revision::default();
        r.metadata.namespace = "default".into();
        r.metadata.name = "hello-00001".into();
        r.spec.pod.containers = images
            .iter()
            .map(|(name, image)| Container {
                name: (*name).into(),
                image: (*image).into(),
                ..Container::default()
            })
            .collect();
        r
    }

    fn setup(
        answers: &[(&'static str, Result<&'static str, &'static str>)],
        delay: Duration,
    ) -> (BackgroundResolver, Arc<Table>, Arc<Mutex<Vec<RevisionKey>>>) {
        let table = Arc::new(Table {
            answers: answers.iter().cloned().collect(),
            calls: AtomicUsize::new(0),
            delay,
        });
        let woken = Arc::new(Mutex::new(Vec::new()));
        let w = woken.clone();
        let r = BackgroundResolver::new(
            table.clone(),
            Arc::new(move |k: &RevisionKey| w.lock().unwrap().push(k.clone())),
        );
        (r, table, woken)
    }

    fn opts() -> ResolveOptions {
        ResolveOptions {
            timeout: Duration::from_secs(10),
            ..ResolveOptions::default()
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pending_until_every_image_is_resolved_then_statuses_in_container_order() {
        let (r, table, woken) = setup(
            &[
                ("app:1", Ok("docker.io/library/app@sha256:aa")),
                ("side:2", Ok("docker.io/library/side@sha256:bb")),
            ],
            Duration::from_millis(50),
        );
        // The same image twice is resolved once; a command-only container has no digest.
        let rev = rev(&[
            ("app", "app:1"),
            ("side", "side:2"),
            ("again", "app:1"),
            ("cmd", ""),
        ]);
        assert_eq!(r.resolve(&rev, &opts()), Resolution::Pending);
        assert_eq!(r.resolve(&rev, &opts()), Resolution::Pending);
        tokio::time::sleep(Duration::from_millis(60)).await;
        settle().await;
        assert_eq!(
            woken.lock().unwrap().len(),
            1,
            "enqueued once, when all are done"
        );
        let Resolution::Resolved(init, statuses) = r.resolve(&rev, &opts()) else {
            panic!("not resolved")
        };
        assert!(init.is_empty());
        let digests: Vec<_> = statuses
            .iter()
            .map(|s| (s.name.as_str(), s.image_digest.as_str()))
            .collect();
        assert_eq!(
            digests,
            [
                ("app", "docker.io/library/app@sha256:aa"),
                ("side", "docker.io/library/side@sha256:bb"),
                ("again", "docker.io/library/app@sha256:aa"),
                ("cmd", ""),
            ]
        );
        assert_eq!(table.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_knatives_container_missing_message_and_clear_retries() {
        let (r, table, woken) = setup(
            &[("nope:1", Err("MANIFEST_UNKNOWN: manifest unknown"))],
            Duration::ZERO,
        );
        let rev = rev(&[("user-container", "nope:1")]);
        assert_eq!(r.resolve(&rev, &opts()), Resolution::Pending);
        settle().await;
        assert_eq!(woken.lock().unwrap().len(), 1);
        assert_eq!(
            r.resolve(&rev, &opts()),
            Resolution::Failed(
                "Unable to fetch image \"nope:1\": failed to resolve image to digest: \
                 MANIFEST_UNKNOWN: manifest unknown"
                    .into()
            )
        );
        r.clear(&RevisionKey::new("default", "hello-00001"));
        assert_eq!(r.resolve(&rev, &opts()), Resolution::Pending);
        settle().await;
        assert_eq!(
            table.calls.load(Ordering::SeqCst),
            2,
            "cleared: asked again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_registry_hits_the_digest_resolution_timeout() {
        let (r, _, _) = setup(&[("slow:1", Ok("x@sha256:cc"))], Duration::from_secs(60));
        let rev = rev(&[("user-container", "slow:1")]);
        assert_eq!(r.resolve(&rev, &opts()), Resolution::Pending);
        tokio::time::sleep(Duration::from_secs(11)).await;
        settle().await;
        let Resolution::Failed(msg) = r.resolve(&rev, &opts()) else {
            panic!("not failed")
        };
        assert!(msg.contains("context deadline exceeded"), "{msg}");
    }

    #[tokio::test(start_paused = true)]
    async fn command_only_revisions_resolve_at_once_without_a_registry() {
        let (r, table, _) = setup(&[], Duration::ZERO);
        let rev = rev(&[("user-container", "")]);
        assert_eq!(
            r.resolve(&rev, &opts()),
            Resolution::Resolved(
                vec![],
                vec![ContainerStatus {
                    name: "user-container".into(),
                    image_digest: String::new()
                }]
            )
        );
        assert_eq!(table.calls.load(Ordering::SeqCst), 0);
    }
}
