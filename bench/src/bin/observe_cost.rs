//! What seeing wisp costs (issue #18), measured in one run:
//!
//! 1. **data plane**: three `wisp serve`s, each with the `hello` sample as a Service at
//!    `min-scale: "1"` — *off* (`--metrics-addr off --console-addr off`: no request is
//!    recorded), *metrics* (wisp's defaults: `/metrics` and the console on, every request
//!    recorded) and *metrics + request log* (`logging.enable-request-log` with Knative's
//!    default template) — loaded in turn with the same `wrk` throughput run, `--reps`
//!    rounds, the order rotating each round; the medians and their ratios to *off*;
//! 2. **`/metrics` at scale**: a `wisp serve` with `--revisions` Services at
//!    `initial-scale: "0"` (so no replica runs), scraped `--scrapes` times once every
//!    revision's PodAutoscaler reports: time to the whole body, and its size;
//! 3. **console first paint**: the service list of that server loaded in headless
//!    Chromium (playwright-core from `crates/wisp/tests/console`), `--paints` times: the
//!    browser's first-contentful-paint and its DOMContentLoaded (every row parsed).
//!
//! Needs `wrk`; part 3 needs `/usr/bin/chromium` and `npm ci --prefix
//! crates/wisp/tests/console` (skipped with a note otherwise).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::SERVING,
    load::{self, WrkRun},
    procfs,
    server::{self, Server},
    setup,
    stats::{Table, median},
};

const NAMESPACE: &str = "default";
const DOMAIN: &str = "default.example.com";

/// The targets.
const TARGET_METRICS_RATIO: f64 = 0.98;
const TARGET_SCRAPE_MS: f64 = 50.0;
const TARGET_FIRST_PAINT_MS: f64 = 1000.0;

#[derive(Debug, Parser)]
#[command(about = "Cost of wisp's metrics, request log, /metrics at scale and console first paint")]
struct Args {
    /// Seconds of each measured wrk run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Rounds over the three servers.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// wrk connections and threads.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Services (revisions) of the /metrics and console measurements; 0 skips them.
    #[arg(long, default_value_t = 1000)]
    revisions: usize,
    /// Scrapes of /metrics.
    #[arg(long, default_value_t = 20)]
    scrapes: usize,
    /// Page loads of the console's service list.
    #[arg(long, default_value_t = 5)]
    paints: usize,
    /// Skip the data-plane part.
    #[arg(long)]
    no_dataplane: bool,
    /// Seconds any one wait may take.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    #[arg(long)]
    wisp: Option<PathBuf>,
    #[arg(long)]
    app: Option<PathBuf>,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/observe.md"))]
    out: PathBuf,
    #[arg(long)]
    no_write: bool,
}

fn service(name: &str, app: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {
            "metadata": {"annotations": annotations},
            "spec": {"containerConcurrency": 0, "containers": [setup::container(app)]},
        }},
    })
}

fn client() -> anyhow::Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?)
}

/// Waits until a request to `svc` through the ingress answers 200.
fn wait_serving(ingress: std::net::SocketAddr, svc: &str, timeout: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let host = format!("{svc}.{DOMAIN}");
    loop {
        if let Ok(r) = load::get(ingress, Some(&host), Duration::from_secs(5))
            && r.status == 200
        {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("{svc} does not answer 200 after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One of the three data-plane servers.
struct Variant {
    label: &'static str,
    server: Server,
    ingress: std::net::SocketAddr,
    rps: Vec<f64>,
    /// wisp's CPU microseconds per request, per run.
    cpu: Vec<f64>,
}

fn dataplane(args: &Args, wisp: &Path, app: &str, report: &mut String) -> anyhow::Result<bool> {
    let wrk = load::find_wrk()?;
    let dir = tempfile::tempdir()?;
    let logged_cfg = dir.path().join("logged.yaml");
    std::fs::write(
        &logged_cfg,
        "config-observability:\n  logging.enable-request-log: \"true\"\n",
    )?;
    let mut variants = Vec::new();
    for (label, metrics, cfg) in [
        ("off (no metrics, no console)", false, None),
        ("metrics + console (default)", true, None),
        (
            "metrics + console + request log",
            true,
            Some(logged_cfg.clone()),
        ),
    ] {
        let mut opts = server::Options::new(wisp.to_path_buf());
        if !metrics {
            opts.metrics_addr = "off".into();
            opts.console_addr = "off".into();
        }
        opts.config = cfg;
        let server = Server::start(&opts)?;
        let ingress = server.ingress_addr(Duration::from_secs(10))?;
        setup::announce(&server, Some(ingress));
        server.api().create(
            "services",
            &service(
                "probe",
                app,
                json!({"autoscaling.knative.dev/min-scale": "1"}),
            ),
        )?;
        wait_serving(ingress, "probe", Duration::from_secs(args.timeout))?;
        variants.push(Variant {
            label,
            server,
            ingress,
            rps: Vec::new(),
            cpu: Vec::new(),
        });
    }
    let run = |v: &Variant, secs: u64| {
        WrkRun {
            threads: args.threads,
            connections: args.connections,
            duration: Duration::from_secs(secs),
            host: Some(format!("probe.{DOMAIN}")),
            url: format!("http://{}/", v.ingress),
        }
        .run(&wrk)
    };
    for v in &variants {
        run(v, 2)?; // warm-up
    }
    let load_before = procfs::loadavg();
    let mut runs = Table::new([
        "round",
        "server",
        "requests/s",
        "wisp CPU per request",
        "p50",
        "p99",
        "non-2xx",
    ]);
    for rep in 0..args.reps {
        // Rotate the order so no variant always runs first (or right after another).
        for i in 0..variants.len() {
            let k = (i + rep) % variants.len();
            let pid = variants[k].server.pid();
            let ticks = load::cpu_ticks(pid);
            let r = run(&variants[k], args.duration)?;
            // wisp's own CPU (its threads, not the app's or wrk's) per request: what the
            // layers cost, less sensitive than throughput to what else the machine runs.
            let cpu = load::micros_per_request(ticks, load::cpu_ticks(pid), r.requests);
            runs.row([
                (rep + 1).to_string(),
                variants[k].label.to_string(),
                format!("{:.0}", r.rps),
                cpu.map_or("?".into(), |c| format!("{c:.2} µs")),
                format!("{:.3} ms", r.p50.as_secs_f64() * 1e3),
                format!("{:.3} ms", r.p99.as_secs_f64() * 1e3),
                (r.non_2xx + r.socket_errors).to_string(),
            ]);
            eprintln!(
                "round {} {}: {:.0} req/s",
                rep + 1,
                variants[k].label,
                r.rps
            );
            variants[k].rps.push(r.rps);
            variants[k].cpu.extend(cpu);
        }
    }
    let load_after = procfs::loadavg();
    // The logged server really logged: its request log (the queue-proxy container's log)
    // has lines, so the third figure is not the second one under another name.
    let logged = &variants[2].server;
    let log_url = format!(
        "{}/probe/log?container=queue-proxy&tailLines=1",
        logged.api().collection_url(SERVING, NAMESPACE, "services")
    );
    let last_line = logged.api().get_text(&log_url)?;
    let last_line: Value = serde_json::from_str(last_line.trim())
        .with_context(|| format!("the request log is empty or not JSON: {last_line:?}"))?;
    let last_line = last_line["line"].as_str().unwrap_or_default().to_string();
    if last_line.is_empty() {
        bail!("the request-logging server logged no request");
    }
    let off = median(&variants[0].rps);
    let cpu_off = median(&variants[0].cpu);
    let mut summary = Table::new([
        "server",
        "median requests/s",
        "vs off",
        "median wisp CPU per request",
        "vs off",
    ]);
    for v in &variants {
        let (m, c) = (median(&v.rps), median(&v.cpu));
        summary.row([
            v.label.to_string(),
            format!("{m:.0}"),
            format!("{:+.1} %", (m / off - 1.0) * 100.0),
            format!("{c:.2} µs"),
            format!("{:+.1} %", (c / cpu_off - 1.0) * 100.0),
        ]);
    }
    let metrics_ratio = median(&variants[1].rps) / off;
    let logged_ratio = median(&variants[2].rps) / off;
    let ok = metrics_ratio >= TARGET_METRICS_RATIO;
    use std::fmt::Write as _;
    let _ = write!(
        report,
        "## Data plane: metrics and request log\n\n`wrk -t{} -c{} -d{}s` against the `hello` sample through wisp's ingress and queue, \
         three servers in turn, {} rounds (order rotating). Load average before: {load_before}; after: {load_after}.\n\n{}\n\
         Metrics on: {:.1} % of off (target ≥ {:.0} %: {}); wisp's own CPU per request {:+.1} % against off. Request log on (Knative's default template): {:.1} % of off, \
         i.e. it costs {:.1} % of throughput. Its last line: `{}`.\n\nEvery run:\n\n{}\n",
        args.threads,
        args.connections,
        args.duration,
        args.reps,
        summary.render(),
        metrics_ratio * 100.0,
        TARGET_METRICS_RATIO * 100.0,
        if ok { "✅" } else { "❌ missed" },
        (median(&variants[1].cpu) / cpu_off - 1.0) * 100.0,
        logged_ratio * 100.0,
        (1.0 - logged_ratio) * 100.0,
        last_line.trim_end(),
        runs.render(),
    );
    for v in variants {
        v.server.stop()?;
    }
    Ok(ok)
}

/// The service list's first paint in headless Chromium, `n` loads.
fn first_paint(
    console: &str,
    token: &str,
    rows: usize,
    n: usize,
) -> anyhow::Result<Option<Vec<Value>>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/wisp/tests/console");
    if !Path::new("/usr/bin/chromium").exists()
        || !dir.join("node_modules/playwright-core").exists()
    {
        return Ok(None);
    }
    let out = std::process::Command::new("node")
        .arg(dir.join("firstpaint.mjs"))
        .env("WISP_CONSOLE", console)
        .env("WISP_TOKEN", token)
        .env("WISP_ROWS", rows.to_string())
        .env("WISP_LOADS", n.to_string())
        .output()
        .context("running node")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| {
            format!(
                "no result from firstpaint.mjs: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let v: Value = serde_json::from_str(line)?;
    if let Some(e) = v["error"].as_str() {
        bail!("firstpaint.mjs: {e}");
    }
    Ok(Some(v["loads"].as_array().cloned().unwrap_or_default()))
}

fn at_scale(args: &Args, wisp: &Path, app: &str, report: &mut String) -> anyhow::Result<bool> {
    let dir = tempfile::tempdir()?;
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n",
    )?;
    let mut opts = server::Options::new(wisp.to_path_buf());
    opts.config = Some(cfg);
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    let metrics = server.listening("metrics").context("no metrics line")?;
    let console = server.listening("console").context("no console line")?;
    let n = args.revisions;
    let started = Instant::now();
    for i in 0..n {
        server.api().create(
            "services",
            &service(
                &format!("svc-{i:04}"),
                app,
                json!({"autoscaling.knative.dev/initial-scale": "0"}),
            ),
        )?;
    }
    eprintln!("{n} services created in {:?}", started.elapsed());
    let c = client()?;
    let url = format!("http://{metrics}/metrics");
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let body = c.get(&url).send()?.text()?;
        let have = body
            .lines()
            .filter(|l| l.starts_with("kn_revision_pods_desired{"))
            .count();
        if have >= n {
            eprintln!("{have} revisions report after {:?}", started.elapsed());
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {have} of {n} revisions in /metrics after {:?}",
                args.timeout
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut times = Vec::new();
    let mut size = 0;
    let mut lines = 0;
    for _ in 0..args.scrapes {
        let t = Instant::now();
        let body = c.get(&url).send()?.bytes()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        size = body.len();
        lines = body.iter().filter(|b| **b == b'\n').count();
    }
    let load = procfs::loadavg();
    let scrape_median = median(&times);
    let scrape_max = times.iter().copied().fold(0.0, f64::max);
    let scrape_ok = scrape_median <= TARGET_SCRAPE_MS;
    use std::fmt::Write as _;
    let _ = write!(
        report,
        "## /metrics with {n} revisions\n\n{n} Services at `initial-scale: \"0\"` (every revision has its PodAutoscaler \
         and its data-plane backend, no replica). {} scrapes with a keep-alive client once all report; load average {load}.\n\n\
         | | |\n|---|---|\n| scrape time, median | {scrape_median:.1} ms (target ≤ {TARGET_SCRAPE_MS:.0} ms: {}) |\n\
         | scrape time, min / max | {:.1} / {scrape_max:.1} ms |\n| body | {:.2} MiB, {lines} lines ({:.0} bytes per revision) |\n\n",
        args.scrapes,
        if scrape_ok { "✅" } else { "❌ missed" },
        times.iter().copied().fold(f64::INFINITY, f64::min),
        size as f64 / (1024.0 * 1024.0),
        size as f64 / n as f64,
    );

    let token = std::fs::read_to_string(server.data_dir().join("token"))?;
    let paint_ok = match first_paint(&format!("http://{console}"), token.trim(), n, args.paints)? {
        None => {
            let _ = write!(
                report,
                "## Console first paint\n\nSkipped: needs /usr/bin/chromium and `npm ci --prefix crates/wisp/tests/console`.\n"
            );
            true
        }
        Some(loads) => {
            let fcp: Vec<f64> = loads.iter().filter_map(|l| l["fcp"].as_f64()).collect();
            let rows: Vec<f64> = loads.iter().filter_map(|l| l["dcl"].as_f64()).collect();
            let html: Vec<f64> = loads
                .iter()
                .filter_map(|l| l["htmlBytes"].as_f64())
                .collect();
            let m = median(&fcp);
            let ok = m <= TARGET_FIRST_PAINT_MS && fcp.len() == loads.len();
            let _ = write!(
                report,
                "## Console first paint with {n} services\n\nThe service list (`/`, signed in) loaded {} times in headless Chromium \
                 ({}), navigation start to first-contentful-paint, and to DOMContentLoaded (all {n} server-rendered rows parsed); load average {}.\n\n\
                 | | |\n|---|---|\n| first-contentful-paint, median | {m:.0} ms (target ≤ {TARGET_FIRST_PAINT_MS:.0} ms: {}) |\n\
                 | every load (ms) | {} |\n| DOMContentLoaded, median | {:.0} ms |\n| page size | {:.0} KiB of HTML |\n",
                loads.len(),
                chromium_version(),
                procfs::loadavg(),
                if ok { "✅" } else { "❌ missed" },
                fcp.iter()
                    .map(|v| format!("{v:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                median(&rows),
                median(&html) / 1024.0,
            );
            ok
        }
    };
    server.stop()?;
    Ok(scrape_ok && paint_ok)
}

fn chromium_version() -> String {
    std::process::Command::new("/usr/lib/chromium/chromium")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "Chromium".into())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let mut report = format!(
        "# What seeing wisp costs (issue #18)\n\n`cargo run --release -p wisp-bench --bin observe_cost` on {} CPUs. \
         Figures from one run; the machine is shared, so the load average is given with each part.\n\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let mut ok = true;
    if !args.no_dataplane {
        ok &= dataplane(&args, &wisp, &app, &mut report)?;
    }
    if args.revisions > 0 {
        ok &= at_scale(&args, &wisp, &app, &mut report)?;
    }
    println!("{report}");
    if !args.no_write {
        std::fs::write(&args.out, &report)
            .with_context(|| format!("writing {}", args.out.display()))?;
        eprintln!("wrote {}", args.out.display());
    }
    if !ok {
        eprintln!("some targets were missed (see above)");
    }
    Ok(())
}
