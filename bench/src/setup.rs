//! The start-up every benchmark binary shares: find the binaries, write a config file,
//! start `wisp serve` and say where it runs, watch the serving kinds, write the results.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::mpsc,
    time::Duration,
};

use anyhow::Context;

use crate::{
    api::{AUTOSCALING, Api, Event, SERVING, Watch},
    procfs::Spawned,
    server::Server,
};

/// `wisp` and the app the benchmark deploys: the paths given on the command line, else the
/// binaries built next to the benchmark (`default_app` names the sample). The app path
/// comes back as a string, ready for a manifest's `command`.
pub fn binaries(
    wisp: Option<&Path>,
    app: Option<&Path>,
    default_app: &str,
) -> anyhow::Result<(PathBuf, String)> {
    let wisp = match wisp {
        Some(p) => p.to_path_buf(),
        None => crate::sibling_binary("wisp")?,
    };
    let app = match app {
        Some(p) => std::path::absolute(p)?,
        None => crate::sibling_binary(default_app)?,
    };
    let app = app.to_str().context("app path is not UTF-8")?.to_string();
    Ok((wisp, app))
}

/// A `wisp serve --config` that starts every new revision at zero replicas
/// (`config-autoscaler`: `allow-zero-initial-scale`, `initial-scale: "0"`).
pub const AT_ZERO: &str =
    "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n  initial-scale: \"0\"\n";

/// Writes `yaml` as `config.yaml` in a fresh temporary directory (kept while the returned
/// guard lives).
pub fn config_file(yaml: &str) -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml)?;
    Ok((dir, path))
}

/// Starts `wisp serve` with `config_yaml` (waiting up to `start_wait` for it to answer),
/// finds its ingress and says where it runs. Keep the directory guard while the server
/// runs: it holds the config file.
pub fn start_with_config(
    wisp: PathBuf,
    config_yaml: &str,
    start_wait: Duration,
) -> anyhow::Result<(Server, SocketAddr, tempfile::TempDir)> {
    start_with_config_args(wisp, config_yaml, &[], start_wait)
}

/// [`start_with_config`] with extra `wisp serve` arguments.
pub fn start_with_config_args(
    wisp: PathBuf,
    config_yaml: &str,
    extra_args: &[String],
    start_wait: Duration,
) -> anyhow::Result<(Server, SocketAddr, tempfile::TempDir)> {
    let (dir, config_path) = config_file(config_yaml)?;
    let mut opts = crate::server::Options::new(wisp);
    opts.config = Some(config_path);
    opts.extra_args = extra_args.to_vec();
    let server = Server::start_waiting(&opts, start_wait)?;
    let ingress = server.ingress_addr(Duration::from_secs(5))?;
    announce(&server, Some(ingress));
    Ok((server, ingress, dir))
}

/// Says on stderr where the server runs (and its ingress, when the benchmark uses it).
pub fn announce(server: &Server, ingress: Option<SocketAddr>) {
    let ingress = ingress.map_or(String::new(), |a| format!(", ingress {a}"));
    eprintln!(
        "wisp serve pid {} at {}{ingress} (data dir {})",
        server.pid(),
        server.api().base(),
        server.data_dir().display()
    );
}

/// Watches `plurals` of the serving group from `rv`, and the PodAutoscalers too when
/// `autoscalers` is set (a server without them is only reported, not an error).
pub fn watch<T: From<Event> + Send + 'static>(
    api: &Api,
    rv: u64,
    plurals: &[&'static str],
    autoscalers: bool,
    tx: &mpsc::Sender<T>,
) -> anyhow::Result<Vec<Watch>> {
    let mut watches = Vec::new();
    for plural in plurals {
        watches.push(api.watch(SERVING, plural, rv, tx.clone())?);
    }
    if autoscalers {
        match api.watch(AUTOSCALING, "podautoscalers", rv, tx.clone()) {
            Ok(w) => watches.push(w),
            Err(e) => eprintln!("not watching PodAutoscalers: {e:#}"),
        }
    }
    Ok(watches)
}

/// Everything a benchmark's collector hears about: watch events and spawned replicas.
pub enum Msg {
    Watch(Event),
    Spawn(Spawned),
}

impl From<Event> for Msg {
    fn from(e: Event) -> Msg {
        Msg::Watch(e)
    }
}

impl From<Spawned> for Msg {
    fn from(s: Spawned) -> Msg {
        Msg::Spawn(s)
    }
}

/// The head of a results file of a run under load: title, date, machine, the load average
/// at the start (`load_start`, from [`procfs::loadavg`](crate::procfs::loadavg)) and now,
/// how the binaries were built, and the command line.
pub fn results_header(title: &str, load_start: &str) -> String {
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    format!(
        "# {title}\n\n- Date: {date}\n- Machine: {}\n- Load average (1/5/15 min) at the start: \
         {load_start}, at the end: {}\n- Build: `cargo build --release -p wisp -p wisp-samples \
         -p wisp-bench`\n- Command: `{}`\n",
        crate::machine(),
        crate::procfs::loadavg(),
        crate::command_line()
    )
}

/// Prints the results and, unless `no_write`, writes them to `out` too.
pub fn write_results(out: &str, path: &Path, no_write: bool) -> anyhow::Result<()> {
    print!("{out}");
    if !no_write {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The image `--image` benchmarks pack the app as (a name only the local store knows, so
/// no registry is asked).
pub const IMAGE: &str = "bench.local/hello:1";

/// Packs `app` (its binary and the libraries `ldd` lists) into `server`'s image store as
/// [`IMAGE`], listening on the sandbox's address (the samples listen on loopback unless
/// `HOST` says otherwise), with `wisp image pack`. Returns the image name.
pub fn pack_image(server: &Server, wisp: &Path, app: &str) -> anyhow::Result<String> {
    let out = std::process::Command::new(wisp)
        .args(["image", "pack", "--data-dir"])
        .arg(server.data_dir())
        .args(["--binary", app, "--tag", IMAGE, "--env", "HOST=0.0.0.0"])
        .output()
        .context("running wisp image pack")?;
    if !out.status.success() {
        anyhow::bail!("wisp image pack: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(IMAGE.to_string())
}

/// The container of a benchmark's Service: the [`IMAGE`] when `app` names it, else `app`
/// as a host command.
pub fn container(app: &str) -> serde_json::Value {
    if app == IMAGE {
        serde_json::json!({"image": app})
    } else {
        serde_json::json!({"command": [app]})
    }
}
