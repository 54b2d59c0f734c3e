//! The data plane's threads: single-threaded tokio runtimes that run the ingress
//! connections (and, through them, the activator, the queue and the upstream connections to
//! replicas), apart from the multi-threaded runtime of the API and the controllers.
//!
//! Why single-threaded: a proxied request wakes its upstream connection's task, which wakes
//! the request back when the response comes. On one thread those wake-ups are queue pushes;
//! across a work-stealing pool they are futex calls and context switches, which cost more
//! CPU than the proxying itself (measured with `bench/src/bin/dataplane_probe.rs`). Several
//! threads (on larger machines) each run their own share of the connections.

use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Running data-plane threads; [`stop`](Self::stop) ends them.
pub struct DataPlaneThreads {
    handles: Vec<Handle>,
    threads: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
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
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("wisp-dataplane-{i}"))
                .spawn(move || {
                    // The runtime runs spawned tasks only while `block_on` runs.
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                    // Dropping `rt` here cancels what is left (upgraded tunnels, idle upstream
                    // connections).
                })?;
            threads.push((stop_tx, thread));
        }
        Ok(Self { handles, threads })
    }

    /// The runtimes, for `wisp_net::ServerOptions::runtimes`.
    pub fn handles(&self) -> Vec<Handle> {
        self.handles.clone()
    }

    /// Ends every thread (call once the ingress servers have drained) and waits for them.
    pub async fn stop(self) {
        let Self { handles, threads } = self;
        drop(handles);
        let joins: Vec<JoinHandle<()>> = threads
            .into_iter()
            .map(|(stop, thread)| {
                let _ = stop.send(());
                thread
            })
            .collect();
        // Joining blocks; the threads end within a moment of the signal.
        let _ = tokio::task::spawn_blocking(move || {
            for thread in joins {
                let _ = thread.join();
            }
        })
        .await;
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
