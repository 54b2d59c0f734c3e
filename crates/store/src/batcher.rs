//! [`Batcher`]: a thread that runs store work back to back, in [`Store::batch`]es.
//!
//! Work that writes to the store in many small, independent units (one reconcile, one API
//! write) pays a commit per unit, and with `synchronous=FULL` an fsync per unit, while the
//! store is locked. Submitted to a batcher instead, whatever is queued when its thread comes
//! round runs inside one batch: one lock, one commit (one fsync) for all of them, each
//! unit's writes still atomic on their own. Under light load a batch is a single unit, so
//! nothing waits for company.
//!
//! A batch is capped ([`MAX_JOBS`], [`MAX_TIME`]) because the store is locked while it
//! runs: everyone else waits at most about that long for it.
//!
//! What the units queue with [`Store::after_commit`] (work that needs no store, such as
//! the views of what a reconcile wrote) runs on a second thread, `<name>-after`, once the
//! batch has committed: meanwhile the batch thread runs the next batch, and the store is
//! free for others. A durable batch is synced after its commit, with the store unlocked
//! ([`Durability`]), on the thread that finishes it. A unit's answer is sent after its
//! batch is on disk and its after-commit work has run, so whoever waits for a unit sees
//! all of its effects, and keeps them.
//!
//! [`Durability`]: crate::Durability

use std::{
    panic::AssertUnwindSafe,
    sync::mpsc,
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use crate::Store;
use crate::store::{AfterCommit, Unsynced, run_after_commit};

/// Units run in one batch at most.
pub const MAX_JOBS: usize = 64;
/// No unit joins a batch that has been running for this long.
pub const MAX_TIME: Duration = Duration::from_millis(5);

/// Why [`Batcher::run`] has no result.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The unit panicked; its own unfinished write was rolled back, the batch went on.
    #[error("the store work panicked")]
    Panicked,
    /// The unit returned, but its batch did not commit: none of its writes happened.
    #[error("committing the store batch: {0}")]
    Commit(String),
}

/// What a finished unit leaves until its batch commits: the answer to send.
type Finish = Box<dyn FnOnce(Result<(), &str>) + Send>;
type Job = Box<dyn FnOnce() -> Finish + Send>;

/// Handle to a batching thread. Cheap to clone; the thread ends when the last handle is
/// dropped and its queue is empty.
#[derive(Clone)]
pub struct Batcher {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts the thread `name`; its batches are transactions on `store`, with that
    /// handle's durability. Started inside a tokio runtime, the thread runs in its context
    /// (units may spawn tasks or read tokio's clock, as on the blocking pool).
    pub fn start(store: Store, name: &str) -> std::io::Result<Batcher> {
        Self::start_with(store, name, MAX_JOBS, MAX_TIME)
    }

    pub(crate) fn start_with(
        store: Store,
        name: &str,
        max_jobs: usize,
        max_time: Duration,
    ) -> std::io::Result<Batcher> {
        let (jobs, queue) = mpsc::channel();
        let (done, after_queue) = mpsc::channel::<Committed>();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let after_runtime = runtime.clone();
        let after_store = store.clone();
        std::thread::Builder::new()
            .name(format!("{name}-after"))
            .spawn(move || {
                let _context = after_runtime.as_ref().map(|r| r.enter());
                // Ends when the batch thread does (it holds the only sender).
                while let Ok(committed) = after_queue.recv() {
                    committed.finish(&after_store);
                }
            })?;
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _context = runtime.as_ref().map(|r| r.enter());
                run(&store, &queue, &done, max_jobs, max_time)
            })?;
        Ok(Batcher { jobs })
    }

    /// Runs `unit` on the batching thread and waits for it and its batch's commit.
    pub async fn run<T: Send + 'static>(
        &self,
        unit: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, BatchError> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            let out = unit();
            Box::new(move |committed: Result<(), &str>| {
                let _ = reply.send(
                    committed
                        .map(|()| out)
                        .map_err(|e| BatchError::Commit(e.to_owned())),
                );
            })
        });
        if self.jobs.send(job).is_err() {
            return Err(BatchError::Panicked);
        }
        // A reply is dropped unanswered only when the unit panicked (and took it along).
        answer.await.unwrap_or(Err(BatchError::Panicked))
    }
}

/// A batch that ran: its sync, its after-commit work, then its units' answers.
struct Committed {
    after: Vec<AfterCommit>,
    finished: Vec<Finish>,
    committed: Result<Option<Unsynced>, String>,
}

impl Committed {
    fn finish(self, store: &Store) {
        let committed = self
            .committed
            .and_then(|unsynced| store.sync(unsynced).map_err(|e| e.to_string()));
        run_after_commit(self.after);
        for finish in self.finished {
            finish(committed.as_ref().map(|_| ()).map_err(String::as_str));
        }
    }
}

fn run(
    store: &Store,
    queue: &mpsc::Receiver<Job>,
    done: &mpsc::Sender<Committed>,
    max_jobs: usize,
    max_time: Duration,
) {
    while let Ok(first) = queue.recv() {
        let started = Instant::now();
        let (finished, committed, after) = store.batch_then(|| {
            let mut finished = Vec::new();
            let (mut ran, mut next) = (0, Some(first));
            while let Some(job) = next.take() {
                let queued = Store::after_commit_len();
                // A panic drops the unit's reply: its caller hears `Panicked`. And the
                // after-commit work it queued: the unit did not finish, and what follows
                // from it is its retry's to do.
                match std::panic::catch_unwind(AssertUnwindSafe(job)) {
                    Ok(finish) => finished.push(finish),
                    Err(_) => Store::truncate_after_commit(queued),
                }
                ran += 1;
                if ran < max_jobs && started.elapsed() < max_time {
                    next = queue.try_recv().ok();
                }
            }
            finished
        });
        let committed = Committed {
            after,
            finished,
            committed: committed.map_err(|e| e.to_string()),
        };
        if committed.after.is_empty() {
            // No work to hand off: synced (when durable) and answered from here, with the
            // store unlocked. A hand-off would let the next batch commit during the sync,
            // but its thread's heap held ~2 MiB more at 10,000 services.
            committed.finish(store);
        } else if let Err(mpsc::SendError(committed)) = done.send(committed) {
            committed.finish(store);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use serde_json::json;

    use super::*;

    const SVC: &str = "services.serving.knative.dev";

    fn create(store: &Store, name: &str) -> Result<(), crate::StoreError> {
        let obj = json!({"metadata": {"namespace": "default", "name": name}, "spec": {}});
        store.create(SVC, obj).map(drop)
    }

    #[tokio::test]
    async fn queued_units_share_one_commit_and_a_panic_stays_alone() {
        let store = Store::open_in_memory().unwrap();
        let batcher =
            Batcher::start_with(store.clone(), "test-batcher", 64, Duration::from_secs(60))
                .unwrap();
        // Hold the thread in a first unit until the others are queued behind it.
        let gate = Arc::new(Barrier::new(2));
        let first = {
            let (store, gate) = (store.clone(), gate.clone());
            let batcher = batcher.clone();
            tokio::spawn(async move {
                batcher
                    .run(move || {
                        gate.wait();
                        gate.wait();
                        create(&store, "first")
                    })
                    .await
            })
        };
        let g = gate.clone();
        tokio::task::spawn_blocking(move || g.wait()).await.unwrap();
        // What each unit saw as the published revision when it ran.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rest: Vec<_> = ["a", "b", "boom", "c"]
            .into_iter()
            .map(|name| {
                let (store, seen) = (store.clone(), seen.clone());
                let batcher = batcher.clone();
                tokio::spawn(async move {
                    batcher
                        .run(move || {
                            seen.lock().unwrap().push(store.current_revision());
                            if name == "boom" {
                                panic!("a bug in one unit");
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
        assert!(matches!(first.await.unwrap(), Ok(Ok(()))));
        let mut panicked = 0;
        for r in rest {
            match r.await.unwrap() {
                Ok(created) => assert!(created.is_ok(), "{created:?}"),
                Err(BatchError::Panicked) => panicked += 1,
                Err(e) => panic!("unexpected {e}"),
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

    #[tokio::test]
    async fn a_durable_units_answer_waits_for_the_disk_and_a_relaxed_ones_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("wisp.db")).unwrap();
        let relaxed = store.with_durability(crate::Durability::Relaxed);
        let wal = || store.wal_for_tests().unwrap();
        let durable = Batcher::start(store.clone(), "test-durable").unwrap();
        let derived = Batcher::start(relaxed.clone(), "test-relaxed").unwrap();
        // Many units, so that some share a batch and some share a sync.
        let mut answers = Vec::new();
        for i in 0..32 {
            let store = store.clone();
            let batcher = durable.clone();
            answers.push(tokio::spawn(async move {
                batcher
                    .run(move || create(&store, &format!("s{i}")))
                    .await
                    .unwrap()
                    .unwrap();
            }));
        }
        for answer in answers {
            answer.await.unwrap();
        }
        assert_eq!(wal().1, wal().0, "answered: every durable batch is on disk");
        let r = relaxed.clone();
        derived.run(move || create(&r, "d")).await.unwrap().unwrap();
        let (commits, synced) = wal();
        assert!(
            synced < commits,
            "a relaxed batch is answered before any sync"
        );
        assert!(store.get(SVC, "default", "d").unwrap().is_some());
    }

    #[tokio::test]
    async fn a_units_answer_follows_its_after_commit_work_which_runs_off_the_batch_thread() {
        let store = Store::open_in_memory().unwrap();
        let batcher = Batcher::start(store.clone(), "test-after").unwrap();
        // (unit, thread the work ran on, revision published then)
        let ran = Arc::new(Mutex::new(Vec::new()));
        let unit = |name: &'static str| {
            let (store, ran) = (store.clone(), ran.clone());
            move || {
                create(&store, name).unwrap();
                let reader = store.clone();
                store.after_commit(move || {
                    let thread = std::thread::current().name().map(str::to_owned);
                    let rev = reader.current_revision();
                    ran.lock().unwrap().push((name, thread, rev));
                });
                if name == "boom" {
                    panic!("a bug after queuing work");
                }
            }
        };
        batcher.run(unit("a")).await.unwrap();
        // Answered: its work has run, on the after thread, after the commit.
        let after = Some("test-after-after".to_owned());
        assert_eq!(*ran.lock().unwrap(), [("a", after.clone(), 1)]);
        assert!(matches!(
            batcher.run(unit("boom")).await,
            Err(BatchError::Panicked)
        ));
        batcher.run(unit("b")).await.unwrap();
        // The unit that panicked kept its finished write (revision 2) but not its work.
        assert_eq!(
            *ran.lock().unwrap(),
            [("a", after.clone(), 1), ("b", after, 3)]
        );
    }
}
