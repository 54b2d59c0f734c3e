//! Reconciliation delay and memory of `wisp serve`, after Knative's
//! `test/performance/benchmarks/reconciliation-delay`.
//!
//! Starts a fresh `wisp serve`, then
//!
//! 1. creates services one at a time (each waits for the previous one to be Ready) and
//!    measures each one's creation → `Ready=True` latency;
//! 2. creates many services at once from several threads and measures the same for each,
//!    and the time until all are Ready;
//! 3. with those services Ready and idle, reads the memory of the `wisp serve` process
//!    (the replicas are separate processes and are reported apart).
//!
//! Latency runs from just before the POST is sent to the arrival of the watch event that
//! shows the Service `Ready=True`. Watches on configurations, revisions and routes give the
//! same figure for each stage of the chain; `--trace-spawns` adds when each replica process
//! appeared (by polling `/proc`, which costs some CPU, so it is off by default).

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Barrier, Mutex, atomic::AtomicBool, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::{self, Api, Event, SERVING},
    load,
    procfs::{self, Memory, Mib},
    server::{self, Server},
    setup::{self, Msg},
    stats::{Summary, Table, ms},
};

/// The label Knative puts on every child of a Service.
const SERVICE_LABEL: &str = "serving.knative.dev/service";
const NAMESPACE: &str = "default";
/// Knative's bar for the reconciliation-delay benchmark is 25 s on a cluster; ours:
const TARGET_P95: Duration = Duration::from_secs(1);
const TARGET_RSS_KIB: u64 = 30 * 1024;

#[derive(Debug, Parser)]
#[command(about = "Creation → Ready latency of Knative Services on wisp, and wisp's memory")]
struct Args {
    /// Services created one after another in round 1.
    #[arg(long, default_value_t = 10)]
    sequential: usize,
    /// Services created at once in round 2.
    #[arg(long, default_value_t = 100)]
    parallel: usize,
    /// Client threads creating the round-2 services.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Seconds the round-2 services stay idle before memory is read.
    #[arg(long, default_value_t = 5)]
    idle: u64,
    /// Seconds one round may take before the benchmark gives up.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// A `wisp serve --config` file (e.g. `config-autoscaler` keys).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app every service runs (default: `hello` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Also record when each replica process appeared (polls /proc every 2 ms).
    #[arg(long)]
    trace_spawns: bool,
    /// Where to write the Markdown results.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/reconcile-delay.md"))]
    out: PathBuf,
    /// Print the results only; do not write `--out`.
    #[arg(long)]
    no_write: bool,
}

/// The stages of one service's way to Ready, in chain order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Stage {
    CreateAcked,
    ConfigurationCreated,
    RouteCreated,
    RevisionCreated,
    RevisionReconciled,
    ReplicaSpawned,
    RevisionReady,
    ConfigurationReady,
    RouteReady,
    ServiceReady,
}

impl Stage {
    const ALL: [Stage; 10] = [
        Stage::CreateAcked,
        Stage::ConfigurationCreated,
        Stage::RouteCreated,
        Stage::RevisionCreated,
        Stage::RevisionReconciled,
        Stage::ReplicaSpawned,
        Stage::RevisionReady,
        Stage::ConfigurationReady,
        Stage::RouteReady,
        Stage::ServiceReady,
    ];

    fn label(self) -> &'static str {
        match self {
            Stage::CreateAcked => "POST answered (Service stored)",
            Stage::ConfigurationCreated => "Configuration created",
            Stage::RouteCreated => "Route created",
            Stage::RevisionCreated => "Revision created",
            Stage::RevisionReconciled => "Revision has a status (first reconcile)",
            Stage::ReplicaSpawned => "replica process spawned",
            Stage::RevisionReady => "Revision Ready",
            Stage::ConfigurationReady => "Configuration Ready",
            Stage::RouteReady => "Route Ready",
            Stage::ServiceReady => "Service Ready",
        }
    }

    /// The stage a watch event marks, and the service it belongs to.
    fn of_event(e: &Event) -> Option<(Stage, String)> {
        let added = e.event_type == "ADDED";
        let (stage, svc) = match e.plural {
            "services" if e.is_ready() => (Stage::ServiceReady, e.name()),
            "configurations" if added => (Stage::ConfigurationCreated, e.label(SERVICE_LABEL)?),
            "configurations" if e.is_ready() => {
                (Stage::ConfigurationReady, e.label(SERVICE_LABEL)?)
            }
            "routes" if added => (Stage::RouteCreated, e.label(SERVICE_LABEL)?),
            "routes" if e.is_ready() => (Stage::RouteReady, e.label(SERVICE_LABEL)?),
            "revisions" if added => (Stage::RevisionCreated, e.label(SERVICE_LABEL)?),
            "revisions" if e.is_ready() => (Stage::RevisionReady, e.label(SERVICE_LABEL)?),
            "revisions" if e.condition("Ready").is_some() => {
                (Stage::RevisionReconciled, e.label(SERVICE_LABEL)?)
            }
            _ => return None,
        };
        Some((stage, svc.to_string()))
    }
}

/// First time each stage was seen, per service.
#[derive(Default)]
struct Timelines {
    sent: HashMap<String, Instant>,
    seen: HashMap<String, HashMap<Stage, Instant>>,
}

impl Timelines {
    fn record(&mut self, svc: String, stage: Stage, at: Instant) {
        self.seen
            .entry(svc)
            .or_default()
            .entry(stage)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }

    fn take(&mut self, msg: Msg) {
        match msg {
            Msg::Watch(e) => {
                if let Some((stage, svc)) = Stage::of_event(&e) {
                    if stage == Stage::RevisionReady {
                        // Its first status may already say Ready.
                        self.record(svc.clone(), Stage::RevisionReconciled, e.at);
                    }
                    self.record(svc, stage, e.at);
                }
            }
            Msg::Spawn(s) => self.record(s.env, Stage::ReplicaSpawned, s.at),
        }
    }

    fn at(&self, svc: &str, stage: Stage) -> Option<Instant> {
        self.seen.get(svc)?.get(&stage).copied()
    }

    /// Drains `rx` until every service of `names` is Ready, or fails at `deadline`.
    fn wait_ready(
        &mut self,
        rx: &mpsc::Receiver<Msg>,
        names: &[String],
        deadline: Instant,
    ) -> anyhow::Result<()> {
        loop {
            while let Ok(m) = rx.try_recv() {
                self.take(m);
            }
            let missing = names
                .iter()
                .filter(|n| self.at(n, Stage::ServiceReady).is_none())
                .count();
            if missing == 0 {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("{missing} of {} services not Ready in time", names.len());
            }
            match rx.recv_timeout(left) {
                Ok(m) => self.take(m),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("all watches ended"),
            }
        }
    }

    /// Latency of `stage` since the POST was sent, for each of `names` that reached it.
    fn latencies(&self, names: &[String], stage: Stage) -> Vec<Duration> {
        names
            .iter()
            .filter_map(|n| Some(self.at(n, stage)? - *self.sent.get(n)?))
            .collect()
    }
}

/// A Knative Service running `app`.
fn service(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{
            "command": [app],
            "env": [{"name": "TARGET", "value": "bench"}],
        }]}}},
    })
}

/// POSTs one service; returns (sent, acknowledged).
fn create(api: &Api, name: &str, app: &str) -> anyhow::Result<(Instant, Instant)> {
    let body = service(name, app);
    let sent = Instant::now();
    api.create("services", &body)
        .with_context(|| format!("creating service {name}"))?;
    Ok((sent, Instant::now()))
}

/// Waits (bounded) until `server` has no replicas left.
fn wait_no_replicas(server: &Server, timeout: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let n = server.replicas().len();
        if n == 0 {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("{n} replicas still running {timeout:?} after the services were deleted");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct RoundResult {
    names: Vec<String>,
    /// First POST sent → last service Ready.
    all_ready: Duration,
    /// First POST sent → last POST answered.
    all_created: Duration,
}

fn round_sequential(
    api: &Api,
    app: &str,
    rx: &mpsc::Receiver<Msg>,
    tl: &mut Timelines,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<RoundResult> {
    let deadline = Instant::now() + timeout;
    let mut names = Vec::new();
    let start = Instant::now();
    for i in 0..n {
        let name = format!("seq-{i:03}");
        let (sent, acked) = create(api, &name, app)?;
        tl.sent.insert(name.clone(), sent);
        tl.record(name.clone(), Stage::CreateAcked, acked);
        names.push(name);
        tl.wait_ready(rx, &names, deadline)?;
        // Let the tail of the reconciles (labeler, GC) settle before the next one.
        std::thread::sleep(Duration::from_millis(200));
    }
    let last_ready = names
        .iter()
        .filter_map(|n| tl.at(n, Stage::ServiceReady))
        .max()
        .unwrap_or(start);
    Ok(RoundResult {
        all_ready: last_ready - start,
        all_created: Duration::ZERO,
        names,
    })
}

fn round_parallel(
    api: &Api,
    app: &str,
    rx: &mpsc::Receiver<Msg>,
    tl: &mut Timelines,
    n: usize,
    threads: usize,
    timeout: Duration,
) -> anyhow::Result<RoundResult> {
    let deadline = Instant::now() + timeout;
    let names: Vec<String> = (0..n).map(|i| format!("par-{i:03}")).collect();
    let threads = threads.clamp(1, n.max(1));
    let barrier = Barrier::new(threads);
    let results: Mutex<Vec<(String, Instant, Instant)>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (names, barrier, results, errors) = (&names, &barrier, &results, &errors);
            let api = api.clone();
            s.spawn(move || {
                barrier.wait();
                for name in names.iter().skip(t).step_by(threads) {
                    match create(&api, name, app) {
                        Ok((sent, acked)) => {
                            wisp_sync::lock(results).push((name.clone(), sent, acked))
                        }
                        Err(e) => wisp_sync::lock(errors).push(e),
                    }
                }
            });
        }
    });
    if let Some(e) = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .next()
    {
        return Err(e);
    }
    let results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let first_sent = results
        .iter()
        .map(|r| r.1)
        .min()
        .context("no service created")?;
    let last_acked = results.iter().map(|r| r.2).max().unwrap_or(first_sent);
    for (name, sent, acked) in results {
        tl.sent.insert(name.clone(), sent);
        tl.record(name, Stage::CreateAcked, acked);
    }
    tl.wait_ready(rx, &names, deadline)?;
    let last_ready = names
        .iter()
        .filter_map(|n| tl.at(n, Stage::ServiceReady))
        .max()
        .unwrap_or(first_sent);
    Ok(RoundResult {
        all_ready: last_ready - first_sent,
        all_created: last_acked - first_sent,
        names,
    })
}

/// One row per stage: p50, p95 and max of its latency since the POST.
fn stage_table(tl: &Timelines, names: &[String]) -> Table {
    let mut t = Table::new(["stage (time since POST sent)", "n", "p50", "p95", "max"]);
    for stage in Stage::ALL {
        if let Some(s) = Summary::of(&tl.latencies(names, stage)) {
            t.row([
                stage.label().to_string(),
                s.n.to_string(),
                ms(s.p50),
                ms(s.p95),
                ms(s.max),
            ]);
        }
    }
    t
}

fn verdict(ok: bool) -> &'static str {
    if ok { "✅" } else { "❌ missed" }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let timeout = Duration::from_secs(args.timeout);

    let mut opts = server::Options::new(wisp);
    opts.config = args.config.clone();
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    let api = server.api().clone();
    std::thread::sleep(Duration::from_millis(500));
    let mem_start = Memory::read(server.pid())?;

    // Watch every kind of the chain from now on (the resourceVersion is global).
    let (tx, rx) = mpsc::channel::<Msg>();
    let rv = api.resource_version(SERVING, "services")?;
    let watch_for = Duration::from_secs(args.timeout * 3 + args.idle + 60);
    let watches = setup::watch(
        &api,
        rv,
        &["services", "configurations", "revisions", "routes"],
        false,
        &tx,
    )?;
    let stop_tracing = Arc::new(AtomicBool::new(false));
    if args.trace_spawns {
        procfs::trace_children(
            server.pid(),
            "K_SERVICE",
            Duration::from_millis(2),
            Instant::now() + watch_for,
            stop_tracing.clone(),
            tx.clone(),
        );
    }
    drop(tx);
    let mut tl = Timelines::default();

    // Round 1: one service at a time.
    eprintln!("round 1: {} services, one at a time", args.sequential);
    let r1 = round_sequential(&api, &app, &rx, &mut tl, args.sequential, timeout)?;
    for name in &r1.names {
        api.delete(SERVING, NAMESPACE, "services", name)?;
    }
    let teardown = wait_no_replicas(&server, Duration::from_secs(30))?;
    let mem_after_r1 = Memory::read(server.pid())?;

    // Round 2: many at once.
    eprintln!(
        "round 2: {} services at once from {} threads",
        args.parallel, args.threads
    );
    let rv_before_r2 = api.resource_version(SERVING, "services")?;
    // wisp's own CPU time for the round: unlike the latencies, it hardly depends on what
    // else the machine is doing, so it is the figure to compare two builds by.
    let cpu_before_r2 = load::cpu_ticks(server.pid()).context("wisp's CPU time")?;
    let r2 = round_parallel(
        &api,
        &app,
        &rx,
        &mut tl,
        args.parallel,
        args.threads,
        timeout,
    )?;
    stop_tracing.store(true, std::sync::atomic::Ordering::Relaxed);
    let rv_r2_ready = api.resource_version(SERVING, "services")?;
    let cpu_r2 = Duration::from_secs_f64(
        load::cpu_ticks(server.pid())
            .context("wisp's CPU time")?
            .saturating_sub(cpu_before_r2) as f64
            / load::clk_tck() as f64,
    );

    // Memory, with the round-2 services Ready and idle.
    eprintln!("idle {} s, then memory", args.idle);
    std::thread::sleep(Duration::from_secs(args.idle));
    let mem = Memory::read(server.pid())?;
    let rv_after_idle = api.resource_version(SERVING, "services")?;
    let replicas = server.replicas();
    let replica_mem: Vec<Memory> = replicas
        .iter()
        .filter_map(|p| Memory::read(p.pid).ok())
        .collect();
    let replicas_rss: u64 = replica_mem.iter().map(|m| m.rss).sum();
    let replicas_pss: u64 = replica_mem.iter().map(|m| m.pss).sum();

    // No watch of ours may hold up wisp's graceful shutdown.
    for w in watches {
        w.stop(api::REWATCH * 3);
    }
    eprintln!("stopping wisp (SIGTERM)");
    let log_path = server.log_path().to_path_buf();
    let log_lines = std::fs::read_to_string(&log_path)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let stop = server.stop()?;

    // Results.
    let s1 = Summary::of(&tl.latencies(&r1.names, Stage::ServiceReady)).context("round 1")?;
    let s2 = Summary::of(&tl.latencies(&r2.names, Stage::ServiceReady)).context("round 2")?;
    let mut summary = Table::new(["measure", "value", "target"]);
    summary
        .row([
            format!("round 1: 1 service, create → Ready p50 (n={})", s1.n),
            ms(s1.p50),
            String::new(),
        ])
        .row(["round 1: p95".into(), ms(s1.p95), String::new()])
        .row(["round 1: max".into(), ms(s1.max), String::new()])
        .row([
            format!("round 2: {} services at once, create → Ready p50", s2.n),
            ms(s2.p50),
            String::new(),
        ])
        .row([
            "round 2: p95".into(),
            ms(s2.p95),
            format!("≤ {} {}", ms(TARGET_P95), verdict(s2.p95 <= TARGET_P95)),
        ])
        .row(["round 2: max".into(), ms(s2.max), String::new()])
        .row([
            format!("round 2: all {} POSTs answered after", s2.n),
            ms(r2.all_created),
            String::new(),
        ])
        .row([
            format!("round 2: all {} Ready after", s2.n),
            ms(r2.all_ready),
            String::new(),
        ])
        .row([
            format!(
                "`wisp serve` VmRSS, {} services Ready, idle {} s",
                s2.n, args.idle
            ),
            Mib(mem.rss).to_string(),
            format!(
                "≤ {} {}",
                Mib(TARGET_RSS_KIB),
                verdict(mem.rss <= TARGET_RSS_KIB)
            ),
        ])
        .row([
            "`wisp serve` VmHWM (peak RSS)".into(),
            Mib(mem.hwm).to_string(),
            String::new(),
        ]);

    let mut memory = Table::new([
        "`wisp serve`",
        "VmRSS",
        "RssAnon",
        "RssFile",
        "Pss",
        "Private_Dirty",
        "VmHWM",
        "threads",
    ]);
    for (when, m) in [
        ("just started, no services".to_string(), mem_start),
        (
            format!("after round 1 ({} deleted)", r1.names.len()),
            mem_after_r1,
        ),
        (
            format!("{} services Ready, idle {} s", s2.n, args.idle),
            mem,
        ),
    ] {
        memory.row([
            when,
            Mib(m.rss).to_string(),
            Mib(m.rss_anon).to_string(),
            Mib(m.rss_file).to_string(),
            Mib(m.pss).to_string(),
            Mib(m.private_dirty).to_string(),
            Mib(m.hwm).to_string(),
            m.threads.to_string(),
        ]);
    }

    let mut out = String::new();
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    out += "# Reconciliation delay and memory of `wisp serve`\n\n";
    out += &format!("- Date: {date}\n");
    out += &format!("- Machine: {}\n", wisp_bench::machine());
    out += &format!("- Command: `{}`\n", wisp_bench::command_line());
    out += &format!(
        "- App: `{app}` (one replica per service); config: {}\n\n",
        args.config
            .as_ref()
            .map_or("defaults".to_string(), |c| format!("`{}`", c.display()))
    );
    out += "## Results\n\n";
    out += &summary.render();
    out += &format!(
        "\nRound 1 ran {} services one after another ({} in all); round 2 created {} \
         from {} threads. Latency: from just before the POST is sent to the arrival of \
         the watch event showing the Service `Ready=True`.\n\n",
        r1.names.len(),
        ms(r1.all_ready),
        r2.names.len(),
        args.threads.clamp(1, args.parallel.max(1)),
    );
    out += "## Stages, round 1 (one service at a time)\n\n";
    out += &stage_table(&tl, &r1.names).render();
    out += &format!("\n## Stages, round 2 ({} services at once)\n\n", s2.n);
    out += &stage_table(&tl, &r2.names).render();
    let writes = rv_r2_ready - rv_before_r2;
    out += &format!(
        "\nStore writes (resourceVersion delta) until all {} were Ready: {writes} \
         ({:.1} per service); during the {} s idle: {}. wisp's CPU time (user + system) \
         until then: {} ({} per service).\n",
        s2.n,
        writes as f64 / s2.n.max(1) as f64,
        args.idle,
        rv_after_idle - rv_r2_ready,
        ms(cpu_r2),
        ms(cpu_r2 / s2.n.max(1) as u32),
    );
    out += "\n## Memory\n\n";
    out += &memory.render();
    out += &format!(
        "\nReplicas (separate processes, not counted above): {} running, VmRSS {} in all \
         ({} each on average), Pss {} in all.\n",
        replicas.len(),
        Mib(replicas_rss),
        Mib(replicas_rss / (replicas.len().max(1) as u64)),
        Mib(replicas_pss),
    );
    out += &format!(
        "\nShutdown: SIGTERM → wisp exited in {} ({}{}); replicas left behind: {}. \
         Teardown of the round-1 services (DELETE → no replica left): {}. \
         wisp wrote {log_lines} lines to stderr.\n",
        ms(stop.took),
        stop.status,
        if stop.killed { ", needed SIGKILL" } else { "" },
        stop.leftovers,
        ms(teardown),
    );

    setup::write_results(&out, &args.out, args.no_write)?;
    if stop.leftovers > 0 || stop.killed {
        bail!("wisp did not shut down cleanly");
    }
    Ok(())
}
