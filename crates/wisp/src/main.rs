//! The `wisp` binary: `wisp serve` runs Knative Serving in one process; the client commands
//! (`apply`, `get`, `describe`, `delete`) talk to its REST API like kubectl does.

mod api_listener;
mod cli;
mod dataplane;
mod endpoint_sync;
mod images;
mod ingress_tls;
mod live_config;
mod objects;
mod observe;
mod serve;
mod stats_feed;
mod tls;

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: while 1,000 services were created at once, glibc's
/// malloc, free and their consolidation were a fifth of wisp's CPU (perf, bench/scale),
/// and its per-thread arenas keep freed memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "wisp", version, about = "Knative Serving in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the API server, controllers and data plane in one process.
    // Boxed: its flags are most of the enum's size, and every other command would carry it.
    Serve(Box<serve::ServeArgs>),
    /// Create or update objects from manifest files (`-f`).
    Apply(cli::apply::ApplyArgs),
    /// List objects, or watch them with `-w`.
    Get(cli::get::GetArgs),
    /// Show details of objects, their conditions and what they own.
    Describe(cli::describe::DescribeArgs),
    /// Delete objects by name or from manifest files.
    Delete(cli::delete::DeleteArgs),
    /// Print the output of a service's or revision's replicas.
    Logs(cli::logs::LogsArgs),
    /// Print a kubeconfig for this server (cluster, user and context `wisp`), or merge it
    /// into $KUBECONFIG / ~/.kube/config with --merge.
    Kubeconfig(cli::kubeconfig::KubeconfigArgs),
    /// Per revision: replicas, concurrency, requests per second, p95 latency, panic mode
    /// (`-w` refreshes).
    Top(cli::top::TopArgs),
    /// Autoscaling tools: `wisp autoscale simulate` replays a load trace through the KPA.
    Autoscale(cli::autoscale::AutoscaleArgs),
    /// The local image store: load, ls, pull, tag, rm, prune, pack, save.
    Image(cli::image::ImageArgs),
}

fn main() -> ExitCode {
    // wisp's own binary is each container's init (and runs exec probes in containers):
    // that must happen in a fresh single-threaded process, before logging, TLS or argument
    // parsing (see wisp_runtime's container/native).
    if let Some(code) = wisp_runtime::container::helper_main() {
        return code;
    }
    init_logging();
    tls::install_default_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args).map(|()| true),
        Command::Apply(args) => cli::apply::run(args),
        Command::Get(args) => cli::get::run(args),
        Command::Describe(args) => cli::describe::run(args),
        Command::Delete(args) => cli::delete::run(args),
        Command::Logs(args) => cli::logs::run(args),
        Command::Kubeconfig(args) => cli::kubeconfig::run(args).map(|()| true),
        Command::Top(args) => cli::top::run(args),
        Command::Autoscale(args) => cli::autoscale::run(args),
        Command::Image(args) => cli::image::run(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) if is_broken_pipe(&e) => ExitCode::from(141), // 128 + SIGPIPE
        Err(e) => {
            match e.downcast_ref::<cli::ApiError>() {
                Some(api @ cli::ApiError::Status(_)) => eprintln!("{api}"),
                _ => eprintln!("error: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// `wisp get … | head` closes stdout early. Rust ignores SIGPIPE, so the write fails with
/// `BrokenPipe` instead of killing the process; like any Unix tool, end quietly, with the
/// status a shell reports for a writer killed by SIGPIPE (restoring the signal would need
/// `unsafe`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings and errors only, so client
/// commands stay quiet; `RUST_LOG=info` or `RUST_LOG=wisp_controller=debug` for more).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
