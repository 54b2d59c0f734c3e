//! The API's CPU pool: decoding request bodies, admission (defaulting and validation) and
//! list encodes run here, never on the async workers, so a burst of expensive requests
//! (a YAML alias bomb, a huge list) queues for a few bounded threads instead of stalling
//! every other API call, the controllers' wake-ups and the data plane's connections.
//!
//! The threads run at a lower priority (nice [`NICE`]): when the machine is short of CPU,
//! serving traffic wins over answering the API, which a client retries anyway.

use std::{panic::AssertUnwindSafe, sync::Arc};

use crate::error::ApiError;

/// The pool threads' nice value (0 is normal, 19 the lowest priority).
pub const NICE: i32 = 10;

/// A fixed set of threads for CPU-heavy API work. Cheap to clone.
#[derive(Clone)]
pub struct CpuPool {
    pool: Arc<rayon::ThreadPool>,
}

impl std::fmt::Debug for CpuPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPool")
            .field("threads", &self.pool.current_num_threads())
            .finish()
    }
}

/// Lowers the calling thread to nice [`NICE`]: for every thread that serves the API (this
/// pool, and the API's own runtime in `wisp serve`). Per thread: on Linux, PRIO_PROCESS
/// with a thread id sets that thread's nice value only. Failing to lower it costs
/// fairness, not correctness.
pub fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), NICE) {
        tracing::debug!(error = %e, "could not lower an API thread's priority");
    }
}

/// Threads by default: half the CPUs, at least one — the rest are the data plane's.
pub fn default_threads() -> usize {
    (std::thread::available_parallelism().map_or(1, std::num::NonZero::get) / 2).max(1)
}

impl CpuPool {
    /// Starts `threads` threads (at least one), named `wisp-api-cpu-N`.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("wisp-api-cpu-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            pool: Arc::new(pool),
        })
    }

    /// Runs `f` on the pool and waits for it without holding an async worker. A panic in
    /// `f` is a 500 for this request, not a dead thread.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pool.spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
        });
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(ApiError::internal("request processing panicked")),
            Err(_) => Err(ApiError::internal("the API's CPU pool is gone")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_off_the_caller_at_low_priority_and_survives_panics() {
        let pool = CpuPool::new(1).unwrap();
        let (name, nice) = pool
            .run(|| {
                let name = std::thread::current().name().map(str::to_string);
                (name, rustix::process::getpriority_process(None))
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("wisp-api-cpu-0"));
        // getpriority(PRIO_PROCESS, 0) reads the calling thread's nice value on Linux.
        assert!(nice.unwrap() >= NICE, "{nice:?}");
        let err = pool.run(|| panic!("boom")).await.unwrap_err();
        assert_eq!(err.status.code, 500);
        // The thread is still there for the next job.
        assert_eq!(pool.run(|| 2 + 2).await.unwrap(), 4);
    }
}
