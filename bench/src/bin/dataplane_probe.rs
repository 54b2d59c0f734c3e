//! Data-plane overhead of wisp, after Knative's `test/performance/benchmarks/dataplane-probe`
//! (`test/performance/benchmarks/`), run locally with `wrk` as the load generator, side by side:
//!
//! 1. **direct**: the `hello` sample started by this benchmark on a free port;
//! 2. **queue**: the same app as a Service (`min-scale: "1"`, containerConcurrency 0)
//!    through wisp's ingress and replica queue;
//! 3. **activator**: a Service with `min-scale: "1"` and `target-burst-capacity: "-1"`
//!    (Knative's "activator always in the path");
//! 4. **references** ([`wisp_bench::reference`]): the direct app behind nginx (when it is
//!    installed; one worker per CPU) and behind `bare_proxy` (hyper's HTTP/1 server and
//!    client and nothing else), so that wisp's figures can be read against a mature C
//!    proxy's and against the floor of wisp's own stack, on the same machine in the same
//!    run.
//!
//! Each target gets a throughput run (`wrk -t2 -c50`) and a latency run (`wrk -t1 -c1`),
//! the whole matrix `--reps` times. Around each run the CPU time (utime + stime) of
//! `wisp serve` and of the app process is read from `/proc`, giving CPU per request. A
//! cold start (a Service at `initial-scale: "0"`, first request held by the activator)
//! is timed once per repetition. Finally two fresh `wisp serve`s, one with a Service at
//! `min-scale: "1"` and one at `min-scale: "N"`, give the memory of wisp per idle ready
//! replica.
//!
//! `wrk` must be installed (`apt-get update && apt-get install -y wrk`); nginx is optional
//! (`apt-get install -y nginx-light`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::SERVING,
    load::{self, CpuMeter, DirectApp, WrkResult, WrkRun},
    procfs::{self, Memory, Mib},
    reference::ReferenceProxy,
    server::{self, Server, StopReport},
    setup,
    stats::Table,
};

const NAMESPACE: &str = "default";
const DOMAIN: &str = "default.example.com";

/// The targets.
const TARGET_THROUGHPUT_RATIO: f64 = 0.5;
const TARGET_ADDED_P50_MS: f64 = 0.1;
const TARGET_CPU_US: f64 = 30.0;
const TARGET_IDLE_REPLICA_KIB: f64 = 64.0;
/// Issue #22: throughput to a container replica at least this share of a process
/// replica's (same probe, same run).
const TARGET_CONTAINER_RATIO: f64 = 0.95;

/// Before each measured run, wait (up to `QUIET_WAIT`) until the machine is at most this
/// busy over a second, so that other work on the machine disturbs the runs less.
const QUIET: f64 = 0.15;
const QUIET_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Parser)]
#[command(about = "Throughput, latency, CPU and memory overhead of wisp's data plane (wrk)")]
struct Args {
    /// Seconds of each measured wrk run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Seconds of the warm-up wrk run before each target's runs (0: none).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Repetitions of the whole matrix.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Connections of the throughput run.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    /// wrk threads of the throughput run.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Replicas of the memory measurement (compared with 1); 0 skips it.
    #[arg(long, default_value_t = 50)]
    replicas: u32,
    /// Seconds the memory servers stay idle before RSS is read.
    #[arg(long, default_value_t = 6)]
    idle: u64,
    /// Seconds any one wait (service Ready, replicas up) may take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app (default: `hello` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Print the pid of `wisp serve` and wait this many seconds before the first run
    /// (e.g. to attach `perf record -p`).
    #[arg(long, default_value_t = 0)]
    pause: u64,
    /// Where to write the Markdown results.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/dataplane-probe.md"))]
    out: PathBuf,
    /// Print the results only; do not write `--out`.
    #[arg(long)]
    no_write: bool,
    /// nginx for the reference proxy (default: `nginx` on the PATH; skipped if absent).
    #[arg(long)]
    nginx: Option<PathBuf>,
    /// Leave the nginx reference out.
    #[arg(long, conflicts_with = "nginx")]
    no_nginx: bool,
    /// Leave the bare hyper proxy reference out.
    #[arg(long)]
    no_bare: bool,
    /// Also measure a container replica: the same app as an image (packed into the
    /// server's store) in a Service of its own, beside the process replicas in the same
    /// server, and the app in that container directly; the memory points then use
    /// container replicas. Needs root.
    #[arg(long)]
    image: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Direct,
    /// `--image`: the app in its container, at the replica's own address.
    DirectContainer,
    Queue,
    /// `--image`: ingress + queue to a container replica.
    QueueContainer,
    Activator,
    Nginx,
    Bare,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Direct => "direct (hello)",
            Target::DirectContainer => "direct (hello in its container)",
            Target::Queue => "wisp ingress + queue",
            Target::QueueContainer => "wisp ingress + queue, container replica",
            Target::Activator => "wisp activator (TBC -1)",
            Target::Nginx => "nginx (reference)",
            Target::Bare => "bare hyper proxy (reference)",
        }
    }

    /// The Service's name (none for direct and the references).
    fn service(self) -> Option<&'static str> {
        match self {
            Target::Direct | Target::DirectContainer | Target::Nginx | Target::Bare => None,
            Target::Queue => Some("probe-queue"),
            Target::QueueContainer => Some("probe-queue-ctr"),
            Target::Activator => Some("probe-activator"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Throughput,
    Latency,
}

/// One measured wrk run and the CPU around it.
#[derive(Debug, Clone)]
struct Run {
    rep: usize,
    target: Target,
    load: Load,
    wrk: WrkResult,
    command: String,
    /// CPU seconds of the proxy during the run: `wisp serve`, or the reference's
    /// processes (none for direct).
    proxy_cpu: Option<f64>,
    /// CPU seconds of the app process (the replica, or the direct hello).
    app_cpu: Option<f64>,
    /// CPU seconds of wrk itself.
    wrk_cpu: Option<f64>,
    machine_busy: Option<f64>,
    /// Busy CPU seconds of the whole machine during the run.
    machine_cpu: Option<f64>,
    /// Share of the machine's CPUs used by anything else during the run (interference).
    others_busy: Option<f64>,
    /// Machine busy share over the second before the run.
    busy_before: Option<f64>,
}

impl Run {
    fn us_per_request(&self, cpu: Option<f64>) -> Option<f64> {
        Some(cpu? * 1e6 / self.wrk.requests.max(1) as f64)
    }
}

/// A Knative Service running `app` with the given revision annotations.
fn service(name: &str, app: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "containerConcurrency": 0,
                "containers": [setup::container(app)],
            },
        }},
    })
}

/// GETs one object of the API (with the server's token).
fn get_object(server: &Server, plural: &str, name: &str) -> anyhow::Result<Value> {
    let token = std::fs::read_to_string(server.data_dir().join("token"))?;
    let url = format!(
        "{}/{name}",
        server.api().collection_url(SERVING, NAMESPACE, plural)
    );
    wisp_bench::install_crypto_provider();
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(&url)
        .bearer_auth(token.trim())
        .send()?;
    if !resp.status().is_success() {
        bail!("{} from {url}", resp.status());
    }
    Ok(resp.json()?)
}

fn is_ready(obj: &Value) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Waits (bounded) until the Service `name` is Ready.
fn wait_ready(server: &Server, name: &str, timeout: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let last = get_object(server, "services", name);
        if let Ok(obj) = &last
            && is_ready(obj)
        {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!(
                "service {name} not Ready after {timeout:?}: {}\nwisp log:\n{}",
                last.map_or_else(|e| e.to_string(), |o| o["status"].to_string()),
                server.log_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The replica processes of `wisp serve` that run the Service `svc`.
fn replicas_of(server: &Server, svc: &str) -> Vec<procfs::Proc> {
    server
        .replicas()
        .into_iter()
        .filter(|p| procfs::env_var(p.pid, "K_SERVICE").as_deref() == Some(svc))
        .collect()
}

/// Waits (bounded) until `svc` has exactly `n` replica processes and a request through
/// the ingress answers 200.
fn wait_replicas(
    server: &Server,
    ingress: SocketAddr,
    svc: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let have = replicas_of(server, svc).len();
        if have == n {
            let host = format!("{svc}.{DOMAIN}");
            match load::get(ingress, Some(&host), Duration::from_secs(5)) {
                Ok(r) if r.status == 200 => return Ok(()),
                _ => {}
            }
        }
        if start.elapsed() > timeout {
            bail!("service {svc}: {have} replicas (want {n}) after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes a `--config` file allowing `initial-scale: "0"` (for the cold start).
fn write_config(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("dataplane-probe-config.yaml");
    std::fs::write(
        &path,
        "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n",
    )?;
    Ok(path)
}

/// One cold start: a Service at `initial-scale: "0"`, its first request (held by the
/// activator until a replica is Ready), then the second.
#[derive(Debug, Clone)]
struct ColdStart {
    first: Duration,
    second: Duration,
    replicas_before: usize,
}

fn cold_start(
    server: &Server,
    ingress: SocketAddr,
    app: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<ColdStart> {
    let api = server.api();
    api.create(
        "services",
        &service(
            name,
            app,
            json!({"autoscaling.knative.dev/initial-scale": "0"}),
        ),
    )?;
    wait_ready(server, name, timeout)?;
    std::thread::sleep(Duration::from_millis(500));
    let replicas_before = replicas_of(server, name).len();
    let host = format!("{name}.{DOMAIN}");
    let first = load::get(ingress, Some(&host), timeout)?;
    if first.status != 200 {
        bail!("cold start of {name}: {} {}", first.status, first.body);
    }
    let second = load::get(ingress, Some(&host), timeout)?;
    Ok(ColdStart {
        first: first.took,
        second: second.took,
        replicas_before,
    })
}

/// What one memory server observed.
#[derive(Debug, Clone)]
struct MemPoint {
    replicas: usize,
    mem: Memory,
    stop: StopReport,
}

/// A fresh `wisp serve` with one Service at `min-scale: n`, idle, then its memory.
fn memory_point(
    opts: &server::Options,
    app: &str,
    image: bool,
    n: u32,
    idle: Duration,
    timeout: Duration,
) -> anyhow::Result<MemPoint> {
    let server = Server::start(opts)?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    let app = &if image {
        setup::pack_image(&server, &opts.wisp, app)?
    } else {
        app.to_string()
    };
    let name = "probe-memory";
    server.api().create(
        "services",
        &service(
            name,
            app,
            json!({
                "autoscaling.knative.dev/min-scale": n.to_string(),
                "autoscaling.knative.dev/initial-scale": n.to_string(),
            }),
        ),
    )?;
    wait_ready(&server, name, timeout)?;
    wait_replicas(&server, ingress, name, n as usize, timeout)?;
    // The endpoint sync re-reads everything every 5 s; let it and the stats loops settle.
    std::thread::sleep(idle);
    let replicas = replicas_of(&server, name).len();
    let mem = Memory::read(server.pid())?;
    let stop = server.stop()?;
    Ok(MemPoint {
        replicas,
        mem,
        stop,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn opt(v: Option<f64>, digits: usize, unit: &str) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.digits$}{unit}"))
}

fn verdict(ok: bool) -> &'static str {
    if ok { "✅" } else { "❌ missed" }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let wrk = load::find_wrk()?;
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let app_path = std::path::PathBuf::from(&app);
    let timeout = Duration::from_secs(args.timeout);
    let duration = Duration::from_secs(args.duration.max(1));

    // (1) The app, directly.
    let direct = DirectApp::start(&app_path, Duration::from_secs(10))?;
    eprintln!("direct hello pid {} on {}", direct.pid(), direct.addr);

    // (4) The references in front of the same app.
    let mut references: Vec<(Target, ReferenceProxy)> = Vec::new();
    let nginx_path = match (&args.nginx, args.no_nginx) {
        (_, true) => None,
        (Some(p), false) => Some(p.clone()),
        (None, false) => load::find_on_path("nginx"),
    };
    match &nginx_path {
        Some(p) => {
            let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
            let n = ReferenceProxy::nginx(p, direct.addr, workers, Duration::from_secs(10))?;
            eprintln!("nginx pid {} on {} ({workers} workers)", n.pid(), n.addr);
            references.push((Target::Nginx, n));
        }
        None if !args.no_nginx => {
            eprintln!("nginx: not found on the PATH, that reference is left out");
        }
        None => {}
    }
    if !args.no_bare {
        let bare = wisp_bench::sibling_binary("bare_proxy")?;
        let b = ReferenceProxy::bare(&bare, direct.addr, Duration::from_secs(10))?;
        eprintln!("bare_proxy pid {} on {}", b.pid(), b.addr);
        references.push((Target::Bare, b));
    }
    let mut targets = if args.image {
        vec![
            Target::Direct,
            Target::DirectContainer,
            Target::Queue,
            Target::QueueContainer,
            Target::Activator,
        ]
    } else {
        vec![Target::Direct, Target::Queue, Target::Activator]
    };
    targets.extend(references.iter().map(|(t, _)| *t));

    // (2), (3): wisp.
    let cfg_dir = tempfile::tempdir()?;
    let mut opts = server::Options::new(wisp.clone());
    opts.config = Some(write_config(cfg_dir.path())?);
    let server = Server::start(&opts)?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    setup::announce(&server, Some(ingress));
    let api = server.api().clone();
    // The replicas' app: the host binary; with `--image` also the same binary as an image.
    if args.image {
        let image = setup::pack_image(&server, &wisp, &app)?;
        api.create(
            "services",
            &service(
                "probe-queue-ctr",
                &image,
                json!({"autoscaling.knative.dev/min-scale": "1"}),
            ),
        )?;
    }
    api.create(
        "services",
        &service(
            "probe-queue",
            &app,
            json!({"autoscaling.knative.dev/min-scale": "1"}),
        ),
    )?;
    api.create(
        "services",
        &service(
            "probe-activator",
            &app,
            json!({
                "autoscaling.knative.dev/min-scale": "1",
                "autoscaling.knative.dev/target-burst-capacity": "-1",
            }),
        ),
    )?;
    for t in targets.iter().filter(|t| t.service().is_some()) {
        let svc = t.service().expect("a wisp target");
        wait_ready(&server, svc, timeout)?;
        wait_replicas(&server, ingress, svc, 1, timeout)?;
    }
    if args.pause > 0 {
        eprintln!(
            "pausing {} s: wisp serve pid {} (e.g. perf record -g -p {})",
            args.pause,
            server.pid(),
            server.pid()
        );
        std::thread::sleep(Duration::from_secs(args.pause));
    }

    // wisp's own background CPU (controllers, stats, probes) with no requests.
    let idle_for = Duration::from_secs(3);
    let idle_meter = CpuMeter::start(&[server.pid()]);
    std::thread::sleep(idle_for);
    let idle_cpu = idle_meter.stop().seconds[0].map(|s| s / idle_for.as_secs_f64());

    let reference_of = |t: Target| references.iter().find(|(r, _)| *r == t).map(|(_, p)| p);
    // The container replica's own address (its network namespace's), for wrk to reach
    // the app without wisp.
    let container_url = match replicas_of(&server, "probe-queue-ctr").first() {
        Some(p) if args.image => {
            let ip = procfs::local_ipv4(p.pid).context("the container replica's address")?;
            let port = procfs::env_var(p.pid, "PORT").unwrap_or_else(|| "8080".into());
            format!("http://{ip}:{port}/")
        }
        _ => String::new(),
    };
    let url_of = |t: Target| match (t, reference_of(t)) {
        (Target::Direct, _) => format!("http://{}/", direct.addr),
        (Target::DirectContainer, _) => container_url.clone(),
        (_, Some(p)) => format!("http://{}/", p.addr),
        _ => format!("http://{ingress}/"),
    };
    let host_of = |t: Target| t.service().map(|s| format!("{s}.{DOMAIN}"));
    let app_pid_of = |t: Target| match (t, t.service()) {
        (Target::DirectContainer, _) => replicas_of(&server, "probe-queue-ctr")
            .first()
            .map(|p| p.pid),
        (_, None) => Some(direct.pid()),
        (_, Some(svc)) => replicas_of(&server, svc).first().map(|p| p.pid),
    };
    // The references' processes, each with its place in the CPU meter's list (after wisp
    // and the app).
    let mut reference_pids: Vec<u32> = Vec::new();
    let mut reference_slots: Vec<(Target, std::ops::Range<usize>)> = Vec::new();
    for (t, p) in &references {
        let start = 2 + reference_pids.len();
        reference_pids.extend(p.pids());
        reference_slots.push((*t, start..2 + reference_pids.len()));
    }

    let mut runs: Vec<Run> = Vec::new();
    let mut colds: Vec<ColdStart> = Vec::new();
    for rep in 1..=args.reps {
        for &target in &targets {
            if args.warmup > 0 {
                WrkRun {
                    threads: args.threads,
                    connections: args.connections,
                    duration: Duration::from_secs(args.warmup),
                    host: host_of(target),
                    url: url_of(target),
                }
                .run(&wrk)?;
            }
            for load in [Load::Throughput, Load::Latency] {
                let (threads, connections) = match load {
                    Load::Throughput => (args.threads, args.connections),
                    Load::Latency => (1, 1),
                };
                let run = WrkRun {
                    threads,
                    connections,
                    duration,
                    host: host_of(target),
                    url: url_of(target),
                };
                let app_pid = app_pid_of(target).context("no replica to measure")?;
                eprintln!("rep {rep}: {}: {}", target.label(), run.command_line());
                let busy_before = load::wait_quiet(QUIET, QUIET_WAIT);
                // wisp and the app, then the references' processes: every process of
                // the setup is measured in every run, so "others" means the same thing in
                // each.
                let mut pids = vec![server.pid(), app_pid];
                pids.extend(&reference_pids);
                let meter = CpuMeter::start(&pids);
                let started = Instant::now();
                let wrk_result = run.run(&wrk)?;
                let cpu = meter.stop();
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
                let others_busy = cpu
                    .others()
                    .map(|o| o / (started.elapsed().as_secs_f64() * cpus));
                eprintln!(
                    "  {:.0} req/s, p50 {}, p99 {}",
                    wrk_result.rps,
                    ms(wrk_result.p50),
                    ms(wrk_result.p99)
                );
                runs.push(Run {
                    rep,
                    target,
                    load,
                    wrk: wrk_result,
                    command: run.command_line(),
                    proxy_cpu: match target {
                        Target::Direct | Target::DirectContainer => None,
                        Target::Queue | Target::QueueContainer | Target::Activator => {
                            cpu.seconds[0]
                        }
                        Target::Nginx | Target::Bare => reference_slots
                            .iter()
                            .find(|(t, _)| *t == target)
                            .and_then(|(_, r)| cpu.seconds[r.clone()].iter().copied().sum()),
                    },
                    app_cpu: cpu.seconds[1],
                    wrk_cpu: cpu.children,
                    machine_busy: cpu.machine_busy,
                    machine_cpu: cpu.machine_seconds,
                    others_busy,
                    busy_before,
                });
            }
        }
        eprintln!("rep {rep}: cold start");
        colds.push(cold_start(
            &server,
            ingress,
            &app,
            &format!("probe-cold-{rep}"),
            timeout,
        )?);
    }

    let wisp_mem_loaded = Memory::read(server.pid())?;
    eprintln!("stopping wisp (SIGTERM)");
    let stop = server.stop()?;
    for (_, p) in references {
        p.stop(Duration::from_secs(5))?;
    }
    direct.stop(Duration::from_secs(5))?;

    // Memory per idle replica: two fresh servers, no load.
    let mut mem_points = Vec::new();
    if args.replicas > 1 {
        let idle = Duration::from_secs(args.idle);
        for n in [1, args.replicas] {
            eprintln!("memory: a fresh wisp serve with one service at min-scale {n}");
            mem_points.push(memory_point(&opts, &app, args.image, n, idle, timeout)?);
        }
    }

    // Results.
    let find = |rep: usize, t: Target, l: Load| {
        runs.iter()
            .find(|r| r.rep == rep && r.target == t && r.load == l)
    };
    let mut detail = Table::new([
        "rep",
        "target",
        "load",
        "req/s",
        "× direct",
        "p50",
        "added p50",
        "p99",
        "errors",
        "proxy CPU/req",
        "app CPU/req",
        "wrk CPU/req",
        "machine CPU/req",
        "machine busy",
        "others",
    ]);
    for r in &runs {
        let base = find(r.rep, Target::Direct, r.load).expect("direct runs first");
        let added = r.wrk.p50.as_secs_f64() * 1e3 - base.wrk.p50.as_secs_f64() * 1e3;
        detail.row([
            r.rep.to_string(),
            r.target.label().to_string(),
            match r.load {
                Load::Throughput => format!("{} conn", args.connections),
                Load::Latency => "1 conn".to_string(),
            },
            format!("{:.0}", r.wrk.rps),
            format!("{:.2}", r.wrk.rps / base.wrk.rps),
            ms(r.wrk.p50),
            if r.target == Target::Direct {
                "–".into()
            } else {
                format!("{added:+.3} ms")
            },
            ms(r.wrk.p99),
            (r.wrk.non_2xx + r.wrk.socket_errors).to_string(),
            if matches!(r.target, Target::Direct | Target::DirectContainer) {
                "–".into()
            } else {
                opt(r.us_per_request(r.proxy_cpu), 1, " µs")
            },
            opt(r.us_per_request(r.app_cpu), 1, " µs"),
            opt(r.us_per_request(r.wrk_cpu), 1, " µs"),
            opt(r.us_per_request(r.machine_cpu), 1, " µs"),
            opt(r.machine_busy.map(|b| b * 100.0), 0, " %"),
            format!(
                "{} ({} before)",
                opt(r.others_busy.map(|b| b * 100.0), 0, " %"),
                opt(r.busy_before.map(|b| b * 100.0), 0, " %")
            ),
        ]);
    }

    // The figures, one column per repetition.
    let reps: Vec<usize> = (1..=args.reps).collect();
    let mut header = vec!["figure".to_string()];
    header.extend(reps.iter().map(|r| format!("rep {r}")));
    header.extend(["target".to_string(), "Knative queue-proxy".to_string()]);
    let mut summary = Table::new(header);
    let mut missed = Vec::new();
    for &t in targets.iter().filter(|&&t| t != Target::Direct) {
        let name = t.label();
        // The references' rows (and the app in its container) are information: the
        // targets are wisp's.
        let reference = matches!(t, Target::Nginx | Target::Bare | Target::DirectContainer);
        // A row per figure; `check` = (is it met, target text, Knative's figure), or
        // `None` for information only.
        type Check<'a> = Option<(&'a dyn Fn(f64) -> bool, String, &'a str)>;
        let mut row = |label: String,
                       value: &dyn Fn(usize) -> Option<f64>,
                       fmt: &dyn Fn(f64) -> String,
                       check: Check| {
            let vals: Vec<Option<f64>> = reps.iter().map(|&r| value(r)).collect();
            let mut cells = vec![label.clone()];
            cells.extend(vals.iter().map(|v| v.map_or("–".into(), fmt)));
            match check.filter(|_| !reference) {
                Some((ok, target, knative)) => {
                    let all_ok = vals.iter().all(|v| v.is_some_and(ok));
                    if !all_ok {
                        missed.push(label);
                    }
                    cells.push(format!("{target} {}", verdict(all_ok)));
                    cells.push(knative.to_string());
                }
                None => cells.extend(["(info)".to_string(), String::new()]),
            }
            summary.row(cells);
        };
        let ratio = |r: usize| {
            Some(
                find(r, t, Load::Throughput)?.wrk.rps
                    / find(r, Target::Direct, Load::Throughput)?.wrk.rps,
            )
        };
        row(
            format!("{name}: throughput at {} conn, × direct", args.connections),
            &ratio,
            &|v| format!("{v:.2}×"),
            Some((
                &|v| v >= TARGET_THROUGHPUT_RATIO,
                format!("≥ {TARGET_THROUGHPUT_RATIO}×"),
                "~0.16×",
            )),
        );
        let added = |r: usize| {
            Some(
                (find(r, t, Load::Latency)?.wrk.p50.as_secs_f64()
                    - find(r, Target::Direct, Load::Latency)?
                        .wrk
                        .p50
                        .as_secs_f64())
                    * 1e3,
            )
        };
        row(
            format!("{name}: added p50 at 1 conn"),
            &added,
            &|v| format!("{v:+.3} ms"),
            Some((
                &|v| v <= TARGET_ADDED_P50_MS,
                format!("≤ {TARGET_ADDED_P50_MS} ms"),
                "+0.25 ms",
            )),
        );
        for l in [Load::Throughput, Load::Latency] {
            let cpu = |r: usize| {
                let run = find(r, t, l)?;
                run.us_per_request(run.proxy_cpu)
            };
            let (what, check): (String, Check) = match l {
                Load::Throughput => (
                    format!("{} conn", args.connections),
                    Some((
                        &|v| v <= TARGET_CPU_US,
                        format!("≤ {TARGET_CPU_US} µs"),
                        "~120 µs",
                    )),
                ),
                // At one connection wisp idles between requests, so every request pays
                // for waking it up: information, not the target.
                Load::Latency => ("1 conn".to_string(), None),
            };
            row(
                format!(
                    "{name}: {}CPU per request, {what}",
                    if reference { "" } else { "wisp " }
                ),
                &cpu,
                &|v| format!("{v:.1} µs"),
                check,
            );
        }
    }
    // Issue #22: a container replica against a process replica, same probe, same run.
    if args.image {
        for l in [Load::Throughput, Load::Latency] {
            let label = format!(
                "container replica: throughput at {} conn, × process replica",
                match l {
                    Load::Throughput => args.connections,
                    Load::Latency => 1,
                }
            );
            let vals: Vec<Option<f64>> = reps
                .iter()
                .map(|&r| {
                    Some(
                        find(r, Target::QueueContainer, l)?.wrk.rps
                            / find(r, Target::Queue, l)?.wrk.rps,
                    )
                })
                .collect();
            let ok = vals
                .iter()
                .all(|v| v.is_some_and(|v| v >= TARGET_CONTAINER_RATIO));
            if !ok {
                missed.push(label.clone());
            }
            let mut cells = vec![label];
            cells.extend(
                vals.iter()
                    .map(|v| v.map_or("–".into(), |v| format!("{v:.2}×"))),
            );
            cells.push(format!("≥ {TARGET_CONTAINER_RATIO}× {}", verdict(ok)));
            cells.push(String::new());
            summary.row(cells);
        }
    }
    let per_replica = match mem_points.as_slice() {
        [one, many] if many.replicas > one.replicas => {
            let d = |f: fn(&Memory) -> u64| {
                (f(&many.mem) as f64 - f(&one.mem) as f64) / (many.replicas - one.replicas) as f64
            };
            Some((d(|m| m.rss), d(|m| m.rss_anon), d(|m| m.private_dirty)))
        }
        _ => None,
    };
    if let Some((rss, _, _)) = per_replica {
        let ok = rss <= TARGET_IDLE_REPLICA_KIB;
        if !ok {
            missed.push("memory per idle replica".into());
        }
        let mut cells = vec![format!(
            "wisp RSS per idle ready replica ((RSS({}) − RSS(1)) / {})",
            args.replicas,
            args.replicas - 1
        )];
        cells.push(format!("{rss:.1} KiB"));
        cells.extend((1..args.reps).map(|_| "(once)".to_string()));
        cells.push(format!("≤ {TARGET_IDLE_REPLICA_KIB} KiB {}", verdict(ok)));
        cells.push("(a queue-proxy container per pod)".into());
        summary.row(cells);
    }

    let mut out = String::new();
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    out += "# Data-plane probe: wisp's ingress, queue and activator vs. the app directly\n\n";
    out += &format!("- Date: {date}\n");
    out += &format!("- Machine: {}\n", wisp_bench::machine());
    out += "- Command: `cargo build --release -p wisp -p wisp-samples -p wisp-bench && \
            target/release/dataplane_probe`\n";
    out += &format!("- Invoked as: `{}`\n", wisp_bench::command_line());
    out += &format!(
        "- wisp's replicas: {}\n",
        if args.image {
            "the app as host processes, and (`… container replica`) as a container image \
             (wisp's container runtime, own network namespace); the memory points: container \
             replicas"
        } else {
            "the app as host processes"
        }
    );
    out += &format!(
        "- Load: `{}` (throughput) and `{}` (latency), {} s each after a {} s warm-up \
         per target; {} repetitions of the whole matrix; clock ticks {} per s\n",
        runs.iter()
            .find(|r| r.load == Load::Throughput && r.target == Target::Queue)
            .map_or(String::new(), |r| r.command.clone()),
        runs.iter()
            .find(|r| r.load == Load::Latency && r.target == Target::Queue)
            .map_or(String::new(), |r| r.command.clone()),
        args.duration,
        args.warmup,
        args.reps,
        load::clk_tck(),
    );
    out += &format!("- App: `{app}` (`Hello World!`)\n\n");
    out += &format!(
        "**All on one {nproc}-CPU machine**: wrk, `wisp serve` and the app share the same \
         {nproc} CPUs (see \"machine busy\"), so the throughput figures are bounded by CPU \
         contention, not by the network, and every CPU microsecond wisp spends is one the \
         app or wrk cannot. On a real deployment the load generator runs elsewhere.\n\n"
    );
    out += "## The issue's figures\n\n";
    out += &summary.render();
    out += &format!(
        "\nKnative's column: its Go queue-proxy on the same kind of probe (issue figures). \
         The references, in the same run in front of the same direct app: nginx (when \
         installed; one worker per CPU, keep-alive to the app), what a mature C proxy gets \
         on this machine; `bare_proxy`, hyper's HTTP/1 server and pooled client with \
         nothing else (no routing, queue, stats, timeouts or header rewriting), the floor \
         of wisp's own stack. Targets missed: {}.\n\n",
        if missed.is_empty() {
            "none".to_string()
        } else {
            missed.join("; ")
        }
    );
    out += "## Every run\n\n";
    out += &detail.render();
    out += "\n\"proxy CPU/req\": utime + stime of the `wisp serve` process (all threads), or of \
            the reference's processes, over the run ÷ requests wrk completed; \"app CPU/req\" the same for the `hello` process \
            that served them (the replica, or the direct one); \"wrk CPU/req\" the same for \
            wrk (this process's reaped children); \"machine CPU/req\" all busy CPU time of the \
            machine ÷ requests: with the CPUs saturated, req/s ≈ CPUs ÷ this. \"machine busy\": all CPUs, from \
            `/proc/stat`; \"others\": the share of all CPUs used by anything but wisp, the references, the \
            app and wrk during the run (other work on the machine: the runs are only \
            comparable when this is near 0), and in brackets the machine busy share in the \
            second before the run (each run waits up to 30 s for ≤ 15 %). \"errors\": \
            non-2xx responses + socket errors.\n\n";
    out += &format!(
        "`wisp serve` with no requests (3 s, before the runs): {} of a CPU \
         ({} µs of CPU per second; one clock tick is {} ms), included in the figures \
         above.\n\n",
        opt(idle_cpu.map(|c| c * 100.0), 2, " %"),
        opt(idle_cpu.map(|c| c * 1e6), 0, ""),
        1000 / load::clk_tck().max(1),
    );
    out += "## Cold start (activator hold)\n\n";
    let mut cold = Table::new([
        "rep",
        "replicas before",
        "first request (held until a replica is Ready)",
        "second request",
    ]);
    for (i, c) in colds.iter().enumerate() {
        cold.row([
            (i + 1).to_string(),
            c.replicas_before.to_string(),
            ms(c.first),
            ms(c.second),
        ]);
    }
    out += &cold.render();
    out += "\nA Service with `initial-scale: \"0\"` (`allow-zero-initial-scale: \"true\"`), Ready \
            with no replica; one `GET` over a new connection, timed from connect to the last \
            byte.\n\n";
    out += "## Memory per idle replica\n\n";
    if mem_points.is_empty() {
        out += "Skipped (`--replicas` ≤ 1).\n";
    } else {
        let mut t = Table::new([
            "fresh `wisp serve`, one Service",
            "replicas",
            "VmRSS",
            "RssAnon",
            "Private_Dirty",
            "threads",
            "shutdown",
        ]);
        for p in &mem_points {
            t.row([
                format!("min-scale {}", p.replicas),
                p.replicas.to_string(),
                Mib(p.mem.rss).to_string(),
                Mib(p.mem.rss_anon).to_string(),
                Mib(p.mem.private_dirty).to_string(),
                p.mem.threads.to_string(),
                format!("{} ({})", ms(p.stop.took), p.stop.status),
            ]);
        }
        out += &t.render();
        if let Some((rss, anon, dirty)) = per_replica {
            out += &format!(
                "\nPer extra idle ready replica: VmRSS {rss:.1} KiB, RssAnon {anon:.1} KiB, \
                 Private_Dirty {dirty:.1} KiB. This is everything wisp holds for a replica \
                 (its queue and breaker, the supervising task, probe state, log buffers), \
                 not only the queue. Two separate servers idle {} s each, no load.\n",
                args.idle
            );
        }
    }
    out += &format!(
        "\n`wisp serve` after the load runs: VmRSS {}, VmHWM {}. Shutdown: SIGTERM → exit in \
         {} ({}{}); replicas left behind: {}.\n",
        Mib(wisp_mem_loaded.rss),
        Mib(wisp_mem_loaded.hwm),
        ms(stop.took),
        stop.status,
        if stop.killed { ", needed SIGKILL" } else { "" },
        stop.leftovers
    );

    setup::write_results(&out, &args.out, args.no_write)?;
    let unclean = std::iter::once(&stop)
        .chain(mem_points.iter().map(|p| &p.stop))
        .any(|s| s.leftovers > 0 || s.killed);
    if unclean {
        bail!("wisp did not shut down cleanly");
    }
    Ok(())
}
