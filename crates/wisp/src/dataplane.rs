//! The data plane's threads: single-threaded tokio runtimes that run the ingress
//! connections (and, through them, the activator, the queue and the upstream connections to
//! replicas), apart from the multi-threaded runtime of the API and the controllers.
//!
//! Why single-threaded: a proxied request wakes its upstream connection's task, which wakes
//! the request back when the response comes. On one thread those wake-ups are queue pushes;
//! across a work-stealing pool they are futex calls and context switches, which cost more
//! CPU than the proxying itself (measured with `bench/src/bin/dataplane_probe.rs`). Several
//! threads (on larger machines) each run their own share of the connections.

use tokio::runtime::Handle;
use wisp_net::RuntimeThread;

/// Running data-plane threads; [`stop`](Self::stop) ends them.
pub struct DataPlaneThreads {
    threads: Vec<RuntimeThread>,
}

/// Threads by default: one per CPU. Each thread only uses CPU while it has requests to
/// proxy, and on the 2-CPU benchmark machine two threads (with per-thread upstream pools)
/// beat one both in throughput and in CPU per request.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl DataPlaneThreads {
    /// Starts `n` threads (at least one), each with its own single-threaded runtime.
    pub fn start(n: usize) -> std::io::Result<Self> {
        let threads = (0..n.max(1))
            .map(|i| RuntimeThread::start(&format!("wisp-dataplane-{i}")))
            .collect::<std::io::Result<_>>()?;
        Ok(Self { threads })
    }

    /// The runtimes, for `wisp_net::ServerOptions::runtimes`.
    pub fn handles(&self) -> Vec<Handle> {
        self.threads.iter().map(|t| t.handle().clone()).collect()
    }

    /// Ends every thread (call once the ingress servers have drained) and waits for them;
    /// what is left on them (upgraded tunnels, idle upstream connections) is cancelled.
    pub async fn stop(self) {
        // Dropping a `RuntimeThread` joins it, which blocks.
        let _ = tokio::task::spawn_blocking(move || drop(self.threads)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_the_named_threads_and_stop_ends_them() {
        let dp = DataPlaneThreads::start(2).unwrap();
        let mut names = Vec::new();
        for h in dp.handles() {
            let name = h
                .spawn(async { std::thread::current().name().map(str::to_string) })
                .await
                .unwrap();
            names.push(name.unwrap());
        }
        assert_eq!(names, ["wisp-dataplane-0", "wisp-dataplane-1"]);
        // A task still pending when the data plane stops is cancelled, not leaked.
        let pending = dp.handles()[0].spawn(std::future::pending::<()>());
        tokio::time::timeout(std::time::Duration::from_secs(10), dp.stop())
            .await
            .expect("threads end");
        assert!(pending.await.unwrap_err().is_cancelled());
    }

    #[test]
    fn at_least_one_thread() {
        assert!(default_threads() >= 1);
        assert_eq!(DataPlaneThreads::start(0).unwrap().handles().len(), 1);
    }
}
