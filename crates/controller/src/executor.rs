//! [`Executor`]: the one thread every reconcile runs on, in store batches.
//!
//! Reconciles are short (a few store reads, a write or two, ~0.1 ms of CPU) and all of them
//! go through the store's single connection. Run on a pool, they spent their time handing
//! work between threads and waiting for each other on the store's lock, and each write paid
//! for its own commit: with 100 services starting at once, commits were 14% of wisp's CPU
//! and context switches about as much. Here the workers of every reconciler submit their
//! reconciles to one [`Batcher`] thread, which runs whatever is queued back to back inside
//! one store batch: one lock, one commit, no hand-offs between them.
//!
//! What a reconcile leaves for after its batch (the views and events,
//! [`crate::reconciler::Context::after_batch`]) runs on a second thread, [`Executor::after`],
//! off the store's connection. One thread, not the async workers: the views' objects live
//! as long as their revisions, and made on several threads they sat in several allocator
//! heaps (about 2 MiB more RSS with 10,000 services).

use std::sync::mpsc;

use tokio::sync::oneshot;
use wisp_store::{BatchError, Batcher, Store};

use crate::reconciler::{Action, Deferred, ReconcileError, deferring};

/// How a submitted reconcile ended.
#[derive(Debug)]
pub enum Outcome {
    /// It returned (its writes are committed if it returned `Ok`).
    Returned(Result<Action, ReconcileError>),
    /// It panicked; its own unfinished write was rolled back, the batch went on.
    Panicked,
}

/// Handle to the reconcile thread. Cheap to clone; the thread ends when the last handle
/// is dropped and its queue is empty.
#[derive(Clone, Debug)]
pub struct Executor {
    batcher: Batcher,
    after: mpsc::Sender<AfterJob>,
}

/// Work for the after-batch thread, and who waits for it.
type AfterJob = (Box<dyn FnOnce() + Send>, oneshot::Sender<()>);

impl Executor {
    /// Starts the thread; its batches are transactions on `store` (with that handle's
    /// durability).
    pub fn start(store: Store) -> std::io::Result<Executor> {
        let (after, jobs) = mpsc::channel::<AfterJob>();
        std::thread::Builder::new()
            .name("wisp-after-batch".into())
            .spawn(move || {
                for (work, done) in jobs {
                    // A panic is the work's own to report (the runner catches each); the
                    // thread goes on either way.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                    let _ = done.send(());
                }
            })?;
        Ok(Executor {
            batcher: Batcher::start(store, "wisp-reconcile")?,
            after,
        })
    }

    /// Runs `work` on the after-batch thread and waits for it.
    pub async fn after(&self, work: impl FnOnce() + Send + 'static) {
        let (done, finished) = oneshot::channel();
        if self.after.send((Box::new(work), done)).is_ok() {
            let _ = finished.await;
        }
    }

    /// Runs `reconcile` on the reconcile thread and waits for it (and its batch's commit).
    /// Also answers the work it left for after its batch
    /// ([`crate::reconciler::Context::after_batch`]), for the caller to do: none unless the
    /// batch committed.
    pub async fn run(
        &self,
        reconcile: impl FnOnce() -> Result<Action, ReconcileError> + Send + 'static,
    ) -> (Outcome, Vec<Deferred>) {
        match self.batcher.run(move || deferring(reconcile)).await {
            Ok((result, after)) => (Outcome::Returned(result), after),
            // What the reconcile wrote is gone: it has to run again.
            Err(e @ BatchError::Commit(_)) => (
                Outcome::Returned(Err(ReconcileError::Other(e.to_string()))),
                Vec::new(),
            ),
            Err(BatchError::Panicked) => (Outcome::Panicked, Vec::new()),
        }
    }
}
