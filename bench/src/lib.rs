//! `wisp-bench`: shared pieces of wisp's benchmarks (binaries in `src/bin/`).
//!
//! - [`server`]: start a fresh `wisp serve` on a temporary data dir and stop it (and make
//!   sure none of its replicas outlives it).
//! - [`api`]: a blocking client for the REST API with the server's token, and watches that
//!   timestamp every event as it arrives.
//! - [`procfs`]: memory figures (`/proc/<pid>/status`, `smaps_rollup`) and child processes.
//! - [`stats`]: percentiles and Markdown output.
//! - [`rate`]: an open-loop fixed-rate HTTP load generator, and timed single requests.
//! - [`load`]: `wrk` runs, CPU time from `/proc`, the app started directly.
//! - [`setup`]: the start-up every binary shares (binaries, config, watches, results).
//! - [`reference`]: other reverse proxies (nginx; hyper with nothing else) in front of
//!   the same app, as yardsticks.
//! - [`runc_ref`]: `runc run` of the `hello` sample until it listens, the yardstick of the
//!   container cold starts.
//!
//! Every wait in here is bounded by a timeout: a benchmark must end by itself.

pub mod api;
pub mod load;
pub mod procfs;
pub mod rate;
pub mod reference;
pub mod runc_ref;
pub mod server;
pub mod setup;
pub mod stats;

use std::path::PathBuf;

/// The directory of the running benchmark binary (`target/release` for a release build),
/// where `wisp` and the sample apps are built too.
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no parent directory", exe.display()))?;
    Ok(dir.to_path_buf())
}

/// A built binary next to the benchmark, as an absolute path; an error says how to build it.
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = target_dir()?.join(name);
    if !path.is_file() {
        anyhow::bail!(
            "{} not found; build it first: cargo build --release -p wisp -p wisp-samples -p wisp-bench",
            path.display()
        );
    }
    Ok(path)
}

/// The command line this process was started with, for the results file.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// One line describing the machine: CPUs, CPU model, memory, kernel.
pub fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".to_string(), |(_, m)| m.trim().to_string());
    let mem_kib = procfs::field_kib(
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        "MemTotal",
    )
    .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "nproc {nproc}, {model}, {:.1} GiB RAM, Linux {}",
        mem_kib as f64 / (1024.0 * 1024.0),
        kernel.trim()
    )
}

/// ring as rustls's process-wide provider: the workspace's reqwest is built without one, and
/// every client needs it, even for plain HTTP. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
