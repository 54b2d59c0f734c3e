//! The `wisp` binary: `wisp serve` runs Knative Serving in one process; the client commands
//! (`apply`, `get`, `describe`, `delete`) talk to its REST API like kubectl does.

mod cli;
mod serve;

use std::process::ExitCode;

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
    Serve(serve::ServeArgs),
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args).map(|()| true),
        Command::Apply(args) => cli::apply::run(args),
        Command::Get(args) => cli::get::run(args),
        Command::Describe(args) => cli::describe::run(args),
        Command::Delete(args) => cli::delete::run(args),
        Command::Logs(args) => cli::logs::run(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            match e.downcast_ref::<cli::ApiError>() {
                Some(api @ cli::ApiError::Status(_)) => eprintln!("{api}"),
                _ => eprintln!("error: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}
