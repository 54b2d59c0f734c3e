//! `wisp serve`: assembles the store, API server (and, later, controllers and data plane)
//! in one process.

use std::path::PathBuf;

/// Flags of `wisp serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the REST API.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub api_addr: String,
    /// Address of the HTTP ingress.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http_addr: String,
    /// Directory holding the store and the API token.
    #[arg(long, env = "WISP_DATA_DIR", default_value = ".wisp")]
    pub data_dir: PathBuf,
    /// Config file (top-level keys are Knative ConfigMap names).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Runs the server until SIGINT/SIGTERM.
pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("wisp serve is being written")
}
