//! [`Executor`]: the one thread every reconcile runs on, in store batches.
//!
//! Reconciles are short (a few store reads, a write or two, ~0.1 ms of CPU) and all of them
//! go through the store's single connection. Run on a pool, they spent their time handing
//! work between threads and waiting for each other on the store's lock, and each write paid
//! for its own commit: with 100 services starting at once, commits were 14% of wisp's CPU
//! and context switches about as much. Here the workers of every reconciler submit their
//! reconciles to one thread, which runs whatever is queued back to back inside one
//! [`Store::batch`]: one lock, one commit, no hand-offs between them. Under light load a
//! batch is a single reconcile, exactly as before.
//!
//! A batch is capped ([`MAX_JOBS`], [`MAX_TIME`]) because the store is locked while it runs:
//! the API waits at most about that long for it.

use std::{
    panic::AssertUnwindSafe,
    sync::mpsc,
    time::{Duration, Instant},
};

use tokio::sync::oneshot;
use wisp_store::Store;

use crate::reconciler::{Action, ReconcileError};

/// Reconciles run in one batch at most.
pub const MAX_JOBS: usize = 64;
/// No reconcile joins a batch that has been running for this long.
pub const MAX_TIME: Duration = Duration::from_millis(5);

/// How a submitted reconcile ended.
#[derive(Debug)]
pub enum Outcome {
    /// It returned (its writes are committed if it returned `Ok`).
    Returned(Result<Action, ReconcileError>),
    /// It panicked; its own unfinished write was rolled back, the batch went on.
    Panicked,
}

type Reconcile = Box<dyn FnOnce() -> Result<Action, ReconcileError> + Send>;

struct Job {
    run: Reconcile,
    reply: oneshot::Sender<Outcome>,
}

/// Handle to the reconcile thread. Cheap to clone; the thread ends when the last handle
/// is dropped and its queue is empty.
#[derive(Clone)]
pub struct Executor {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

impl Executor {
    /// Starts the thread; its batches are transactions on `store` (with that handle's
    /// durability).
    pub fn start(store: Store) -> std::io::Result<Executor> {
        Self::start_with(store, MAX_JOBS, MAX_TIME)
    }

    fn start_with(store: Store, max_jobs: usize, max_time: Duration) -> std::io::Result<Executor> {
        let (jobs, queue) = mpsc::channel();
        // Reconciles ran on tokio's blocking pool before, inside the runtime's context (a
        // platform may spawn tasks, read tokio's clock): keep that.
        let runtime = tokio::runtime::Handle::try_current().ok();
        std::thread::Builder::new()
            .name("wisp-reconcile".into())
            .spawn(move || {
                let _context = runtime.as_ref().map(|r| r.enter());
                run(&store, &queue, max_jobs, max_time)
            })?;
        Ok(Executor { jobs })
    }

    /// Runs `reconcile` on the reconcile thread and waits for it (and its batch's commit).
    pub async fn run(
        &self,
        reconcile: impl FnOnce() -> Result<Action, ReconcileError> + Send + 'static,
    ) -> Outcome {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            run: Box::new(reconcile),
            reply,
        };
        if self.jobs.send(job).is_err() {
            return Outcome::Panicked;
        }
        // The thread only drops a reply unanswered if it died, which it does not: each
        // reconcile's panic is caught.
        answer.await.unwrap_or(Outcome::Panicked)
    }
}

fn run(store: &Store, queue: &mpsc::Receiver<Job>, max_jobs: usize, max_time: Duration) {
    while let Ok(first) = queue.recv() {
        let started = Instant::now();
        let (done, committed) = store.batch(|| {
            let mut done = Vec::new();
            let mut next = Some(first);
            while let Some(job) = next.take() {
                let outcome = match std::panic::catch_unwind(AssertUnwindSafe(job.run)) {
                    Ok(result) => Outcome::Returned(result),
                    Err(_) => Outcome::Panicked,
                };
                done.push((job.reply, outcome));
                if done.len() < max_jobs && started.elapsed() < max_time {
                    next = queue.try_recv().ok();
                }
            }
            done
        });
        for (reply, outcome) in done {
            let outcome = match (&committed, outcome) {
                // What the reconcile wrote is gone: it has to run again.
                (Err(e), Outcome::Returned(Ok(_))) => Outcome::Returned(Err(
                    ReconcileError::Other(format!("committing the store batch: {e}")),
                )),
                (_, outcome) => outcome,
            };
            let _ = reply.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use serde_json::json;

    use super::*;

    const SVC: &str = "services.serving.knative.dev";

    fn create(store: &Store, name: &str) -> Result<Action, ReconcileError> {
        let obj = json!({"metadata": {"namespace": "default", "name": name}, "spec": {}});
        store.create(SVC, obj)?;
        Ok(Action::Done)
    }

    #[tokio::test]
    async fn queued_reconciles_share_one_commit_and_a_panic_stays_alone() {
        let store = Store::open_in_memory().unwrap();
        let exec = Executor::start_with(store.clone(), 64, Duration::from_secs(60)).unwrap();
        // Hold the thread in a first reconcile until the others are queued behind it.
        let gate = Arc::new(Barrier::new(2));
        let first = {
            let (store, gate) = (store.clone(), gate.clone());
            let exec = exec.clone();
            tokio::spawn(async move {
                exec.run(move || {
                    gate.wait();
                    gate.wait();
                    create(&store, "first")
                })
                .await
            })
        };
        let g = gate.clone();
        tokio::task::spawn_blocking(move || g.wait()).await.unwrap();
        // What each reconcile saw as the published revision when it ran.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let rest: Vec<_> = ["a", "b", "boom", "c"]
            .into_iter()
            .map(|name| {
                let (store, seen) = (store.clone(), seen.clone());
                let exec = exec.clone();
                tokio::spawn(async move {
                    exec.run(move || {
                        seen.lock().unwrap().push(store.current_revision());
                        if name == "boom" {
                            panic!("reconcile bug");
                        }
                        create(&store, name)
                    })
                    .await
                })
            })
            .collect();
        // Let them all reach the queue, then release the first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokio::task::spawn_blocking(move || gate.wait())
            .await
            .unwrap();
        assert!(matches!(
            first.await.unwrap(),
            Outcome::Returned(Ok(Action::Done))
        ));
        let mut panicked = 0;
        for r in rest {
            match r.await.unwrap() {
                Outcome::Returned(r) => assert!(r.is_ok(), "{r:?}"),
                Outcome::Panicked => panicked += 1,
            }
        }
        assert_eq!(panicked, 1);
        // All ran in the first one's batch: none of the earlier writes was committed (and
        // so published) yet when they ran.
        assert_eq!(*seen.lock().unwrap(), [0, 0, 0, 0]);
        assert_eq!(store.current_revision(), 4);
        let names: Vec<_> = store
            .list(SVC, None, None)
            .unwrap()
            .0
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a", "b", "c", "first"]);
    }
}
