//! One [`Platform`] over two backends, chosen per revision by what its pod names: a pod
//! whose containers give an `image` runs in containers (Knative's meaning of `image`); a
//! pod whose containers give only a host `command` runs as local processes (wisp's own
//! extension, kept for apps without an image). The controllers see one platform.
//!
//! The choice is made once per revision (a revision is immutable) on its first `scale`;
//! what comes back (replicas, logs, changes) is the chosen backend's.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use tokio::sync::broadcast;
use wisp_api::serving::PodSpec;
use wisp_sync::lock;

use crate::{LogLine, Platform, ReplicaSpec, ReplicaStatus, RevisionKey, SharedPlatform};

/// Which backend runs a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Process,
    Container,
}

/// The backend a pod needs: containers as soon as any container names an image.
pub fn backend_for(pod: &PodSpec) -> Backend {
    if pod
        .containers
        .iter()
        .chain(&pod.init_containers)
        .any(|c| !c.image.is_empty())
    {
        Backend::Container
    } else {
        Backend::Process
    }
}

/// The two backends behind one [`Platform`].
pub struct ByImage {
    process: SharedPlatform,
    containers: SharedPlatform,
    chosen: Mutex<HashMap<RevisionKey, Backend>>,
    changes: broadcast::Sender<RevisionKey>,
}

impl std::fmt::Debug for ByImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByImage").finish_non_exhaustive()
    }
}

impl ByImage {
    /// Must be called within a tokio runtime: the two backends' change feeds are merged
    /// by a task each.
    pub fn new(process: SharedPlatform, containers: SharedPlatform) -> Arc<ByImage> {
        let (changes, _) = broadcast::channel(4096);
        for backend in [&process, &containers] {
            let mut rx = backend.changes();
            let tx = changes.clone();
            tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(key) => {
                            let _ = tx.send(key);
                        }
                        // Receivers that lag re-read everything; make ours lag too by
                        // passing nothing on: the runner's resync covers it.
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        Arc::new(ByImage {
            process,
            containers,
            chosen: Mutex::default(),
            changes,
        })
    }

    fn backend(&self, b: Backend) -> &SharedPlatform {
        match b {
            Backend::Process => &self.process,
            Backend::Container => &self.containers,
        }
    }

    /// The backend that runs `key`: the one chosen at its first scale, else whichever
    /// knows it (after a restart nothing is chosen yet), else the process one.
    fn running(&self, key: &RevisionKey) -> &SharedPlatform {
        if let Some(b) = lock(&self.chosen).get(key).copied() {
            return self.backend(b);
        }
        if self.containers.revisions().contains(key) {
            &self.containers
        } else {
            &self.process
        }
    }
}

impl Platform for ByImage {
    fn scale(&self, spec: &ReplicaSpec, replicas: u32) {
        let b = *lock(&self.chosen)
            .entry(spec.key.clone())
            .or_insert_with(|| backend_for(&spec.pod));
        self.backend(b).scale(spec, replicas);
    }

    fn remove(&self, key: &RevisionKey) {
        lock(&self.chosen).remove(key);
        // Either may hold it (a leftover of a run before a restart): both forget it.
        self.process.remove(key);
        self.containers.remove(key);
    }

    fn stop_replica(&self, key: &RevisionKey, name: &str) -> bool {
        self.running(key).stop_replica(key, name)
    }

    fn replicas(&self, key: &RevisionKey) -> Vec<ReplicaStatus> {
        self.running(key).replicas(key)
    }

    fn waiting(&self, key: &RevisionKey) -> Option<String> {
        self.running(key).waiting(key)
    }

    fn usage(&self, key: &RevisionKey) -> Vec<crate::ReplicaUsage> {
        self.running(key).usage(key)
    }

    fn revisions(&self) -> Vec<RevisionKey> {
        let mut all = self.process.revisions();
        all.extend(self.containers.revisions());
        all.sort();
        all.dedup();
        all
    }

    fn changes(&self) -> broadcast::Receiver<RevisionKey> {
        self.changes.subscribe()
    }

    fn logs(&self, key: &RevisionKey, tail: Option<usize>) -> Vec<LogLine> {
        self.running(key).logs(key, tail)
    }

    fn follow_logs(&self, key: &RevisionKey) -> broadcast::Receiver<LogLine> {
        self.running(key).follow_logs(key)
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            // Both stop their replicas gracefully; they do so side by side.
            tokio::join!(self.process.shutdown(), self.containers.shutdown());
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::serving::Container;

    fn pod(containers: &[(&str, &[&str])]) -> PodSpec {
        PodSpec {
            containers: containers
                .iter()
                .map(|(image, command)| Container {
                    image: (*image).into(),
                    command: command.iter().map(|s| (*s).into()).collect(),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        }
    }

    #[test]
    fn a_pod_runs_in_containers_as_soon_as_it_names_an_image() {
        let cases: [(&str, PodSpec, Backend); 5] = [
            ("command only", pod(&[("", &["./hello"])]), Backend::Process),
            ("image only", pod(&[("hello:1", &[])]), Backend::Container),
            (
                "image and command: the command runs inside the image",
                pod(&[("hello:1", &["/hello"])]),
                Backend::Container,
            ),
            (
                "a sidecar with an image takes the whole pod",
                pod(&[("", &["./hello"]), ("side:1", &[])]),
                Backend::Container,
            ),
            ("no containers", PodSpec::default(), Backend::Process),
        ];
        for (name, pod, want) in cases {
            assert_eq!(backend_for(&pod), want, "{name}");
        }
    }
}
