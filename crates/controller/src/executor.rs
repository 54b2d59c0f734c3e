//! [`Executor`]: the one thread every reconcile runs on, in store batches.
//!
//! Reconciles are short (a few store reads, a write or two, ~0.1 ms of CPU) and all of them
//! go through the store's single connection. Run on a pool, they spent their time handing
//! work between threads and waiting for each other on the store's lock, and each write paid
//! for its own commit: with 100 services starting at once, commits were 14% of wisp's CPU
//! and context switches about as much. Here the workers of every reconciler submit their
//! reconciles to one [`Batcher`] thread, which runs whatever is queued back to back inside
//! one store batch: one lock, one commit, no hand-offs between them.

use wisp_store::{BatchError, Batcher, Store};

use crate::reconciler::{Action, ReconcileError};

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
}

impl Executor {
    /// Starts the thread; its batches are transactions on `store` (with that handle's
    /// durability).
    pub fn start(store: Store) -> std::io::Result<Executor> {
        Ok(Executor {
            batcher: Batcher::start(store, "wisp-reconcile")?,
        })
    }

    /// Runs `reconcile` on the reconcile thread and waits for it (and its batch's commit).
    pub async fn run(
        &self,
        reconcile: impl FnOnce() -> Result<Action, ReconcileError> + Send + 'static,
    ) -> Outcome {
        match self.batcher.run(reconcile).await {
            Ok(result) => Outcome::Returned(result),
            // What the reconcile wrote is gone: it has to run again.
            Err(e @ BatchError::Commit(_)) => {
                Outcome::Returned(Err(ReconcileError::Other(e.to_string())))
            }
            Err(BatchError::Panicked) => Outcome::Panicked,
        }
    }
}
