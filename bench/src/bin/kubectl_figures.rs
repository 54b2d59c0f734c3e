//! `kubectl_figures`: kubectl against wisp at scale (issue #16's figures).
//!
//! 1. `kubectl get ksvc` against 1,000 Services (`--services`): wall time (median of
//!    `--runs`) against the same call on an empty namespace, and the transfer: the bytes
//!    and time of the very request kubectl makes (a `meta.k8s.io/v1` Table), fetched
//!    directly. The issue asks for `t(1000) ≤ 1.5 × (t(empty) + t(transfer))`.
//! 2. Watch fan-out: `--watchers` concurrent `kubectl get ksvc -w --output-watch-events`
//!    processes (real kubectl, each printing type, name and resourceVersion of every event)
//!    while every one of the Services is changed once (a label, by merge patch): every
//!    watcher must see every event, in resourceVersion order, the same sequence as the
//!    others. wisp's CPU time (utime+stime from /proc) over the same round of changes with
//!    and without the watchers gives its extra CPU per event per watcher.
//!
//! The Services run the `hello` sample at initial scale 0 (`config-autoscaler`
//! `allow-zero-initial-scale`), so no replica runs: what is measured is the API.
//! The API is served over HTTPS, as kubectl needs.
//!
//! Writes `bench/results/kubectl.md` (`--out`; not with `--no-write`).

use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{load, server::Server, setup};

#[derive(Parser, Debug)]
#[command(about = "kubectl get / kubectl get -w against many Knative Services on wisp")]
struct Args {
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app the Services name (default: the `hello` sample next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    #[arg(long, default_value_t = 1000)]
    services: usize,
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Timed runs of each `kubectl get`.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    #[arg(long, default_value = "bench/results/kubectl.md")]
    out: PathBuf,
    #[arg(long)]
    no_write: bool,
}

const CONFIG: &str = "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n";
/// What kubectl 1.32 sends for `kubectl get` (server-side printing).
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

struct Ctx {
    http: reqwest::blocking::Client,
    base: String,
    token: String,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Ctx {
    fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", &self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache);
        c
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// The store's resourceVersion, from an empty list.
    fn resource_version(&self) -> anyhow::Result<u64> {
        let v: Value = self
            .request(
                reqwest::Method::GET,
                "/apis/serving.knative.dev/v1/namespaces/empty/services",
            )
            .send()?
            .error_for_status()?
            .json()?;
        Ok(v["metadata"]["resourceVersion"]
            .as_str()
            .context("no resourceVersion")?
            .parse()?)
    }

    /// Waits (bounded) until the store's resourceVersion has not moved for `quiet`: the
    /// controller has finished reacting.
    fn settle(&self, quiet: Duration, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let mut last = self.resource_version()?;
        let mut since = Instant::now();
        while since.elapsed() < quiet {
            if Instant::now() > deadline {
                bail!("the store kept changing for {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
            let rv = self.resource_version()?;
            if rv != last {
                last = rv;
                since = Instant::now();
            }
        }
        Ok(())
    }
}

/// Median wall time of `runs` runs of `kubectl args`, and the last run's stdout.
fn time_kubectl(ctx: &Ctx, args: &[&str], runs: usize) -> anyhow::Result<(Duration, String)> {
    let mut times = Vec::new();
    let mut out = String::new();
    for _ in 0..runs {
        let start = Instant::now();
        let o = ctx.kubectl().args(args).output()?;
        times.push(start.elapsed());
        if !o.status.success() {
            bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        }
        out = String::from_utf8(o.stdout)?;
    }
    times.sort();
    Ok((times[times.len() / 2], out))
}

fn service(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/initial-scale": "0"}},
            "spec": {"containers": [{"command": [app]}]},
        }},
    })
}

/// Runs `f(i)` for i in 0..n on 8 threads; the results in order.
fn parallel<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize) -> anyhow::Result<T> + Send + Sync + 'static,
) -> anyhow::Result<Vec<T>> {
    let f = Arc::new(f);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                (t..n)
                    .step_by(8)
                    .map(|i| f(i).map(|v| (i, v)))
                    .collect::<anyhow::Result<Vec<_>>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(
            t.join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??,
        );
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, v)| v).collect())
}

/// Changes every Service once (a label, merge patch); the resourceVersions written.
fn change_all(ctx: &Arc<Ctx>, n: usize, round: &str) -> anyhow::Result<Vec<u64>> {
    let ctx = ctx.clone();
    let round = round.to_string();
    parallel(n, move |i| {
        let v: Value = ctx
            .request(
                reqwest::Method::PATCH,
                &format!("/apis/serving.knative.dev/v1/namespaces/default/services/s{i}"),
            )
            .header("Content-Type", "application/merge-patch+json")
            .body(json!({"metadata": {"labels": {"round": round}}}).to_string())
            .send()?
            .error_for_status()?
            .json()?;
        Ok(v["metadata"]["resourceVersion"]
            .as_str()
            .context("no resourceVersion")?
            .parse()?)
    })
}

/// One `kubectl get ksvc -w` process writing its events to a file.
struct Watcher {
    child: Child,
    file: PathBuf,
}

/// The (type, name, resourceVersion) lines a watcher printed so far.
fn events_of(file: &Path) -> Vec<(String, String, u64)> {
    let Ok(f) = std::fs::File::open(file) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                w.next()?.to_string(),
                w.next()?.to_string(),
                w.next()?.parse().ok()?,
            ))
        })
        .collect()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !f() {
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let load_start = wisp_bench::procfs::loadavg();
    let (_cfg_dir, config) = setup::config_file(CONFIG)?;
    let mut opts = wisp_bench::server::Options::new(wisp.clone());
    opts.config = Some(config);
    opts.api_tls = true;
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    let pid = server.pid();

    let work = tempfile::tempdir()?;
    let kubeconfig = work.path().join("kubeconfig");
    let kc = Command::new(&wisp)
        .arg("kubeconfig")
        .arg("--data-dir")
        .arg(server.data_dir())
        .output()?;
    if !kc.status.success() {
        bail!("wisp kubeconfig: {}", String::from_utf8_lossy(&kc.stderr));
    }
    std::fs::write(&kubeconfig, &kc.stdout)?;
    let ca = std::fs::read(server.data_dir().join("ca.crt"))?;
    wisp_bench::install_crypto_provider();
    let http = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca)?])
        .timeout(Duration::from_secs(60))
        .build()?;
    let base = std::fs::read_to_string(server.data_dir().join("api-url"))
        .map(|s| s.trim().to_string())
        .or_else(|_| -> anyhow::Result<String> { Ok(server.api().base().to_string()) })?;
    let token = std::fs::read_to_string(server.data_dir().join("token"))?
        .trim()
        .to_string();
    let ctx = Arc::new(Ctx {
        http,
        base,
        token,
        kubeconfig,
        cache: work.path().join("cache"),
    });

    ctx.request(reqwest::Method::POST, "/api/v1/namespaces")
        .json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "empty"}}))
        .send()?
        .error_for_status()?;
    // Warm kubectl's discovery cache, as an interactive user's is.
    time_kubectl(&ctx, &["get", "ksvc", "-n", "empty"], 1)?;
    let (t_empty, _) = time_kubectl(&ctx, &["get", "ksvc", "-n", "empty"], args.runs)?;
    eprintln!("kubectl get ksvc (empty): {t_empty:?}");

    eprintln!("creating {} services", args.services);
    let created = Instant::now();
    {
        let ctx = ctx.clone();
        let app = app.clone();
        parallel(args.services, move |i| {
            ctx.request(
                reqwest::Method::POST,
                "/apis/serving.knative.dev/v1/namespaces/default/services",
            )
            .json(&service(&format!("s{i}"), &app))
            .send()?
            .error_for_status()?;
            Ok(())
        })?;
    }
    ctx.settle(Duration::from_secs(3), Duration::from_secs(900))?;
    eprintln!("created and settled in {:?}", created.elapsed());

    let (t_full, out) = time_kubectl(&ctx, &["get", "ksvc"], args.runs)?;
    let rows = out.lines().count().saturating_sub(1);
    eprintln!("kubectl get ksvc ({rows} rows): {t_full:?}");

    // The transfer: kubectl's own request, straight.
    let mut transfer = Vec::new();
    for _ in 0..args.runs {
        let start = Instant::now();
        ctx.request(
            reqwest::Method::GET,
            "/apis/serving.knative.dev/v1/namespaces/default/services?limit=500",
        )
        .header("Accept", TABLE_ACCEPT)
        .send()?
        .error_for_status()?
        .bytes()?;
        transfer.push(start.elapsed());
    }
    transfer.sort();
    let t_transfer = transfer[transfer.len() / 2];
    // kubectl pages by 500: the full list is this many requests.
    let pages = args.services.div_ceil(500).max(1);
    let t_transfer_all = t_transfer * u32::try_from(pages)?;
    let mut full_bytes = 0usize;
    {
        let mut cont = String::new();
        loop {
            let mut path =
                "/apis/serving.knative.dev/v1/namespaces/default/services?limit=500".to_string();
            if !cont.is_empty() {
                path += &format!("&continue={cont}");
            }
            let body = ctx
                .request(reqwest::Method::GET, &path)
                .header("Accept", TABLE_ACCEPT)
                .send()?
                .error_for_status()?
                .bytes()?;
            full_bytes += body.len();
            let v: Value = serde_json::from_slice(&body)?;
            cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
            if cont.is_empty() {
                break;
            }
        }
    }

    // Watch fan-out. First a round of changes with no watcher, for wisp's baseline CPU.
    let tck = load::clk_tck() as f64;
    let cpu = || load::cpu_ticks(pid).unwrap_or(0) as f64 / tck;
    let rv0 = ctx.resource_version()?;
    let c0 = cpu();
    change_all(&ctx, args.services, "a")?;
    ctx.settle(Duration::from_secs(3), Duration::from_secs(600))?;
    let base_events = ctx.resource_version()? - rv0;
    let base_cpu = cpu() - c0;
    eprintln!("baseline round: {base_events} writes, {base_cpu:.2} s CPU");

    eprintln!("starting {} kubectl watchers", args.watchers);
    let mut watchers = Vec::new();
    for w in 0..args.watchers {
        let file = work.path().join(format!("watch-{w}.txt"));
        let child = ctx
            .kubectl()
            .args([
                "get",
                "ksvc",
                "-w",
                // One page: kubectl's watch path prints each page of a chunked initial
                // list as one object (cli-runtime's Result.Object wraps the pages in a
                // v1.List), which the jsonpath below cannot split into Services.
                "--chunk-size=0",
                "--output-watch-events",
                "-o",
                r#"jsonpath={.type} {.object.metadata.name} {.object.metadata.resourceVersion}{"\n"}"#,
            ])
            .stdout(std::fs::File::create(&file)?)
            // Kept beside its output, so a watcher that fails says why.
            .stderr(std::fs::File::create(file.with_extension("err"))?)
            .spawn()?;
        watchers.push(Watcher { child, file });
    }
    let result = (|| -> anyhow::Result<String> {
        wait_until(
            "every watcher's initial list",
            Duration::from_secs(600),
            || {
                watchers
                    .iter()
                    .all(|w| events_of(&w.file).len() >= args.services)
            },
        )
        .map_err(|e| {
            // Name the watchers that fell short, and what their kubectl said.
            let short: Vec<String> = watchers
                .iter()
                .filter(|w| events_of(&w.file).len() < args.services)
                .take(3)
                .map(|w| {
                    let err =
                        std::fs::read_to_string(w.file.with_extension("err")).unwrap_or_default();
                    format!(
                        "{}: {} events, stderr: {}",
                        w.file.display(),
                        events_of(&w.file).len(),
                        err.trim()
                    )
                })
                .collect();
            e.context(short.join("\n"))
        })?;
        ctx.settle(Duration::from_secs(3), Duration::from_secs(60))?;
        let rv1 = ctx.resource_version()?;
        let c1 = cpu();
        let started = Instant::now();
        let written = change_all(&ctx, args.services, "b")?;
        let answered = started.elapsed();
        // Every watcher must reach the last write to a Service.
        let last_svc = *written.iter().max().context("no writes")?;
        wait_until(
            "every watcher to see the last change",
            Duration::from_secs(600),
            || {
                watchers
                    .iter()
                    .all(|w| events_of(&w.file).iter().any(|e| e.2 >= last_svc))
            },
        )?;
        let delivered = started.elapsed();
        ctx.settle(Duration::from_secs(3), Duration::from_secs(600))?;
        let last = ctx.resource_version()?;
        let fan_cpu = cpu() - c1;
        // The events after the initial list, per watcher: the same sequence everywhere,
        // resourceVersions increasing, every write of ours in it.
        let seqs: Vec<Vec<(String, String, u64)>> = watchers
            .iter()
            .map(|w| {
                events_of(&w.file)
                    .into_iter()
                    .filter(|e| e.2 > rv1)
                    .collect()
            })
            .collect();
        let reference = &seqs[0];
        let same = seqs.iter().all(|s| s == reference);
        let ordered = seqs.iter().all(|s| s.windows(2).all(|p| p[0].2 < p[1].2));
        let complete = written
            .iter()
            .all(|rv| reference.iter().any(|e| e.2 == *rv));
        let events = reference.len();
        let fan_events = last - rv1;
        // The same round of changes without watchers, scaled to this round's store writes.
        let without = base_cpu * fan_events as f64 / base_events.max(1) as f64;
        let extra = (fan_cpu - without) / (events.max(1) * args.watchers) as f64;
        eprintln!(
            "fan-out: {events} events per watcher, same={same} ordered={ordered} complete={complete}, {fan_cpu:.2} s CPU"
        );
        Ok(format!(
            "| watchers | `{}` × `kubectl get ksvc -w --output-watch-events -o jsonpath=…` (real kubectl processes) |\n\
             | changes | {} merge patches (one label on each Service), {} store writes in all (with the controller's) |\n\
             | events per watcher after its initial list | {events} |\n\
             | every watcher saw the same sequence | {same} |\n\
             | in resourceVersion order | {ordered} |\n\
             | every one of the {} patches seen | {complete} |\n\
             | time: first patch → last patch answered | {:.2} s |\n\
             | time: first patch → every watcher has the last patch | {:.2} s |\n\
             | wisp CPU, round without watchers | {base_cpu:.2} s for {base_events} writes ({:.3} ms/write) |\n\
             | wisp CPU, round with {} watchers | {fan_cpu:.2} s for {fan_events} writes ({:.3} ms/write) |\n\
             | **wisp's extra CPU per event per watcher** | **{:.1} µs** |\n",
            args.watchers,
            args.services,
            fan_events,
            args.services,
            answered.as_secs_f64(),
            delivered.as_secs_f64(),
            base_cpu * 1000.0 / base_events.max(1) as f64,
            args.watchers,
            fan_cpu * 1000.0 / fan_events.max(1) as f64,
            extra * 1e6,
        ))
    })();
    for w in &mut watchers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    let fan_out = result?;

    let limit = 1.5 * (t_empty + t_transfer_all).as_secs_f64();
    let mut out =
        setup::results_header("kubectl against wisp: get and watch at scale", &load_start);
    if cfg!(debug_assertions) {
        out += "- **Debug build** of the benchmark (and presumably of wisp): figures are not representative; re-run in release.\n";
    }
    out += &format!(
        "- {} Services (the `hello` sample at initial scale 0: no replica runs), API over HTTPS, kubectl {}\n\n",
        args.services,
        kubectl_version()
    );
    out += "## `kubectl get ksvc`\n\n| what | value |\n|---|---|\n";
    out += &format!(
        "| `kubectl get ksvc -n empty` (0 rows), median of {} | {:.1} ms |\n\
         | `kubectl get ksvc` ({rows} rows), median of {} | {:.1} ms |\n\
         | transfer: kubectl's Table request (`limit=500`), median | {:.1} ms per page, {pages} page(s): {:.1} ms |\n\
         | transfer size, all pages | {:.1} KiB |\n\
         | 1.5 × (empty + transfer) | {:.1} ms |\n\
         | **within 1.5 × (empty + transfer)?** | **{}** ({:.2}×) |\n\n",
        args.runs,
        t_empty.as_secs_f64() * 1e3,
        args.runs,
        t_full.as_secs_f64() * 1e3,
        t_transfer.as_secs_f64() * 1e3,
        t_transfer_all.as_secs_f64() * 1e3,
        full_bytes as f64 / 1024.0,
        limit * 1e3,
        if t_full.as_secs_f64() <= limit {
            "yes"
        } else {
            "no"
        },
        t_full.as_secs_f64() / (t_empty + t_transfer_all).as_secs_f64(),
    );
    out += "## Watch fan-out\n\n| what | value |\n|---|---|\n";
    out += &fan_out;
    out += "\nThe extra CPU per event per watcher is (wisp's CPU over the round with the \
            watchers − its CPU over the same round without, scaled to the same number of store \
            writes) ÷ (events each watcher got × watchers): what wisp spends to encode and send \
            one event to one more watch. kubectl's own CPU is not counted.\n";
    server.stop()?;
    setup::write_results(&out, &args.out, args.no_write)
}

fn kubectl_version() -> String {
    Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| {
            v["clientVersion"]["gitVersion"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}
