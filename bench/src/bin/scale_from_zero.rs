//! Scale from zero, after Knative's `test/performance/benchmarks/scale-from-zero`.
//!
//! Starts a fresh `wisp serve` (config-autoscaler: `allow-zero-initial-scale`, short
//! `stable-window` and `scale-to-zero-grace-period`), then for each round size N (1, 5,
//! 25, 100):
//!
//! 1. creates N `hello` services with `autoscaling.knative.dev/initial-scale: "0"` and
//!    waits until every one is Ready with its revision Ready at 0 replicas (and no replica
//!    process of it running);
//! 2. sends ONE request to each through the ingress, all at once, and measures per
//!    service the time to the first byte of the answer (the response head) and to the
//!    full `Hello World!` body;
//! 3. `--again` times (default 3): waits until the autoscaler has scaled every revision
//!    back to zero and does it again — the path a revision takes after idling, not just
//!    after creation;
//! 4. deletes the services and waits until their replicas are gone.
//!
//! Watches on revisions and PodAutoscalers timestamp the way there: the PA's desiredScale
//! turning > 0 (the decision), the revision's desiredReplicas > 0, a replica process
//! appearing (`--trace-spawns`, polls /proc every 2 ms), the revision's actualReplicas > 0
//! (a replica passed its readiness probe), then the first byte at the client.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, atomic::AtomicBool, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::{self, Api, SERVING},
    procfs,
    rate::{self, Target},
    server::{self, Server},
    setup::{self, Msg},
    stats::{Summary, Table, ms},
};

const NAMESPACE: &str = "default";
const SERVICE_LABEL: &str = "serving.knative.dev/service";
const EXPECTED_BODY: &str = "Hello World!\n";

#[derive(Debug, Parser)]
#[command(about = "Scale-from-zero latency of N Knative Services on wisp, one request each")]
struct Args {
    /// Round sizes: services at zero, one request each, all at once.
    #[arg(long, value_delimiter = ',', default_value = "1,5,25,100")]
    sizes: Vec<usize>,
    /// config-autoscaler `stable-window`.
    #[arg(long, default_value = "6s")]
    stable_window: String,
    /// config-autoscaler `scale-to-zero-grace-period`.
    #[arg(long, default_value = "2s")]
    grace: String,
    /// Passes per round after the first: wait until the autoscaler has scaled every
    /// service back to zero, then one request to each again (0: only the first pass).
    #[arg(long, default_value_t = 3)]
    again: usize,
    /// Client threads creating services.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Seconds any one wait may take before the benchmark gives up.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Seconds to wait for the ingress/cluster-local ports if another `wisp serve` holds
    /// them (e.g. another benchmark running).
    #[arg(long, default_value_t = 600)]
    start_wait: u64,
    /// Also record when each replica process appeared (polls /proc every 2 ms).
    #[arg(long)]
    trace_spawns: bool,
    /// Copy wisp's stderr (`RUST_LOG` is passed through) to this file before stopping it.
    #[arg(long)]
    keep_log: Option<PathBuf>,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app every service runs (default: `hello` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Run the app as a container image (packed into the server's image store with
    /// `wisp image pack`, so no registry is asked) instead of a host command: each replica
    /// a container sandbox (wisp's default runtime unless `--serve-arg` says otherwise).
    /// Also measures the reference, `runc run` of the same app until it listens, in the
    /// same run. Needs root and runc.
    #[arg(long)]
    image: bool,
    /// `runc run` starts measured as the reference with `--image`.
    #[arg(long, default_value_t = 20)]
    runc_runs: usize,
    /// Extra `wisp serve` arguments (repeatable), e.g. `--serve-arg=--container-runtime
    /// --serve-arg=runc`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// Where to write the Markdown results.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/scale-from-zero.md"))]
    out: PathBuf,
    /// Print the results only; do not write `--out`.
    #[arg(long)]
    no_write: bool,
}

/// Knative's SLAs for this benchmark (on a cluster): (p95, max) by round size.
fn knative_bar(n: usize) -> Option<(Duration, Duration)> {
    let s = Duration::from_secs;
    match n {
        1 | 5 => Some((Duration::from_millis(50), Duration::from_millis(50))),
        25 => Some((s(2), s(5))),
        100 => Some((s(25), s(25))),
        _ => None,
    }
}

/// Ours on one host: p95 by round size — for host processes, and for container images
/// (issue #22: 30 ms for one service, 1.5 s for 100 at once, image cached).
fn our_target(n: usize, image: bool) -> Option<Duration> {
    match (n, image) {
        (1, false) => Some(Duration::from_millis(50)),
        (100, false) => Some(Duration::from_secs(1)),
        (1, true) => Some(Duration::from_millis(30)),
        (100, true) => Some(Duration::from_millis(1500)),
        _ => None,
    }
}

/// Scale-relevant figures of one watch event.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    /// `revisions`, `podautoscalers` or `spawn`.
    what: &'static str,
    service: String,
    desired: i64,
    actual: i64,
}

/// The latest state of every service's revision and PA, and a log of their changes.
#[derive(Default)]
struct State {
    /// Service → (revision Ready, actualReplicas, desiredReplicas).
    revision: HashMap<String, (bool, i64, i64)>,
    /// Service → Ready.
    service_ready: HashMap<String, bool>,
    /// Service → (desiredScale, actualScale) of its PA.
    pa: HashMap<String, (i64, i64)>,
    log: Vec<Seen>,
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(-1)
}

impl State {
    fn take(&mut self, msg: Msg) {
        match msg {
            Msg::Watch(e) => {
                let deleted = e.event_type == "DELETED";
                match e.plural {
                    "services" => {
                        let name = e.name().to_string();
                        if deleted {
                            self.service_ready.remove(&name);
                        } else {
                            self.service_ready.insert(name, e.is_ready());
                        }
                    }
                    "revisions" | "podautoscalers" => {
                        let Some(svc) = e.label(SERVICE_LABEL).map(str::to_string) else {
                            return;
                        };
                        let st = &e.object["status"];
                        let (desired, actual) = if e.plural == "revisions" {
                            (int(&st["desiredReplicas"]), int(&st["actualReplicas"]))
                        } else {
                            (int(&st["desiredScale"]), int(&st["actualScale"]))
                        };
                        if deleted {
                            self.revision.remove(&svc);
                            self.pa.remove(&svc);
                            return;
                        }
                        if e.plural == "revisions" {
                            self.revision
                                .insert(svc.clone(), (e.is_ready(), actual, desired));
                        } else {
                            self.pa.insert(svc.clone(), (desired, actual));
                        }
                        self.log.push(Seen {
                            at: e.at,
                            what: e.plural,
                            service: svc,
                            desired,
                            actual,
                        });
                    }
                    _ => {}
                }
            }
            Msg::Spawn(s) => self.log.push(Seen {
                at: s.at,
                what: "spawn",
                service: s.env,
                desired: 1,
                actual: 1,
            }),
        }
    }

    fn drain(&mut self, rx: &mpsc::Receiver<Msg>) {
        while let Ok(m) = rx.try_recv() {
            self.take(m);
        }
    }

    /// Drains `rx` until `done(self)` holds; fails at `deadline` with `what`.
    fn wait(
        &mut self,
        rx: &mpsc::Receiver<Msg>,
        deadline: Instant,
        what: &str,
        done: impl Fn(&State) -> Result<(), String>,
    ) -> anyhow::Result<()> {
        loop {
            self.drain(rx);
            let missing = match done(self) {
                Ok(()) => return Ok(()),
                Err(m) => m,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("{what}: still {missing}");
            }
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(m) => self.take(m),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("all watches ended"),
            }
        }
    }

    /// The first time since `from` that `what` of `svc` showed `pred`.
    fn first(
        &self,
        svc: &str,
        what: &str,
        from: Instant,
        pred: impl Fn(&Seen) -> bool,
    ) -> Option<Instant> {
        self.log
            .iter()
            .filter(|s| s.at >= from && s.what == what && s.service == svc && pred(s))
            .map(|s| s.at)
            .min()
    }
}

/// A `hello` Service that starts at zero replicas.
/// A service at zero running `app` ([`setup::container`]: an image or a host command).
fn service(name: &str, app: &str) -> Value {
    let container = setup::container(app);
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/initial-scale": "0"}},
            "spec": {"containers": [container]},
        }},
    })
}

/// Replica processes of wisp, by service (`K_SERVICE`).
fn replicas_by_service(server: &Server) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for p in server.replicas() {
        if let Some(svc) = procfs::env_var(p.pid, "K_SERVICE") {
            *m.entry(svc).or_insert(0) += 1;
        }
    }
    m
}

/// Every service of `names` Ready, with its revision Ready at 0 replicas (desired and
/// actual) and no replica process.
fn all_at_zero(server: &Server, st: &State, names: &[String]) -> Result<(), String> {
    let not_ready = names
        .iter()
        .filter(|n| st.service_ready.get(*n) != Some(&true))
        .count();
    let not_zero = names
        .iter()
        .filter(|n| !matches!(st.revision.get(*n), Some((true, 0, 0))))
        .count();
    if not_ready + not_zero > 0 {
        return Err(format!(
            "{not_ready} services not Ready, {not_zero} revisions not Ready at 0 replicas"
        ));
    }
    let procs = replicas_by_service(server);
    let running: usize = names.iter().filter_map(|n| procs.get(n)).sum();
    if running > 0 {
        return Err(format!("{running} replica processes running"));
    }
    Ok(())
}

/// One request per service, all at once.
#[derive(Debug, Clone)]
struct Shot {
    service: String,
    /// When all requests were started (common to the round).
    fired: Instant,
    /// Fired → request handed to the client.
    sent: Duration,
    ttfb: Option<Duration>,
    total: Option<Duration>,
    error: Option<String>,
}

fn fire(
    rt: &tokio::runtime::Runtime,
    ingress: SocketAddr,
    names: &[String],
    timeout: Duration,
) -> Vec<Shot> {
    rt.block_on(async {
        let client = rate::client();
        let fired = Instant::now();
        eprintln!("  fired at {}", chrono::Utc::now().format("%H:%M:%S%.6f"));
        let mut tasks = tokio::task::JoinSet::new();
        for name in names {
            let client = client.clone();
            let target = Target::new(ingress, format!("{name}.{NAMESPACE}.example.com"), "/");
            let name = name.clone();
            tasks.spawn(async move {
                let r = rate::get(&client, &target, timeout).await;
                let mut shot = Shot {
                    service: name,
                    fired,
                    sent: Duration::ZERO,
                    ttfb: None,
                    total: None,
                    error: None,
                };
                match r {
                    Ok(t) => {
                        shot.sent = t.sent - fired;
                        if t.status == 200 && t.body == EXPECTED_BODY.as_bytes() {
                            shot.ttfb = Some(t.sent + t.ttfb - fired);
                            shot.total = Some(t.sent + t.total - fired);
                        } else {
                            shot.error = Some(format!(
                                "HTTP {}: {:?}",
                                t.status,
                                String::from_utf8_lossy(&t.body)
                            ));
                        }
                    }
                    Err(e) => shot.error = Some(format!("{e:#}")),
                }
                shot
            });
        }
        let mut shots = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Ok(s) = r {
                shots.push(s);
            }
        }
        shots
    })
}

/// One request per service and what it took.
struct Pass {
    label: String,
    n: usize,
    shots: Vec<Shot>,
    /// Per stage: latency since fired, per service that reached it.
    stages: Vec<(&'static str, Vec<Duration>)>,
    /// How long each wait for zero before a pass took (the later passes only).
    zero_waits: Vec<Duration>,
    /// Store writes (resourceVersion delta) from firing to the last answer, per pass.
    writes: Vec<u64>,
}

impl Pass {
    fn ttfb(&self) -> Vec<Duration> {
        self.shots.iter().filter_map(|s| s.ttfb).collect()
    }
    fn total(&self) -> Vec<Duration> {
        self.shots.iter().filter_map(|s| s.total).collect()
    }
    fn errors(&self) -> usize {
        self.shots.iter().filter(|s| s.error.is_some()).count()
    }
}

fn stages(st: &State, shots: &[Shot]) -> Vec<(&'static str, Vec<Duration>)> {
    let mut out: Vec<(&'static str, Vec<Duration>)> = vec![
        ("request handed to the client", vec![]),
        ("PodAutoscaler desiredScale > 0 (watch)", vec![]),
        ("Revision desiredReplicas > 0 (watch)", vec![]),
        ("replica process seen (/proc poll)", vec![]),
        ("Revision actualReplicas > 0 (watch)", vec![]),
        ("first byte (response head)", vec![]),
        ("full body `Hello World!`", vec![]),
    ];
    for s in shots {
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(s.fired));
        let svc = s.service.as_str();
        let f = s.fired;
        let v = [
            Some(s.sent),
            since(st.first(svc, "podautoscalers", f, |x| x.desired > 0)),
            since(st.first(svc, "revisions", f, |x| x.desired > 0)),
            since(st.first(svc, "spawn", f, |_| true)),
            since(st.first(svc, "revisions", f, |x| x.actual > 0)),
            s.ttfb,
            s.total,
        ];
        for (i, d) in v.into_iter().enumerate() {
            if let Some(d) = d {
                out[i].1.push(d);
            }
        }
    }
    out.retain(|(_, v)| !v.is_empty());
    out
}

fn verdict(ok: bool) -> &'static str {
    if ok { "✅" } else { "❌ missed" }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_start = procfs::loadavg();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let timeout = Duration::from_secs(args.timeout);

    let config = format!(
        "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n  stable-window: {}\n  \
         scale-to-zero-grace-period: {}\n",
        args.stable_window, args.grace
    );
    // The reference first, while nothing of wisp runs.
    let runc = if args.image {
        eprintln!(
            "runc run of the same app until it listens, {} times",
            args.runc_runs
        );
        let mut reference = wisp_bench::runc_ref::RuncReference::new(Path::new(&app))?;
        reference.starts(args.runc_runs)?
    } else {
        Vec::new()
    };
    let (server, ingress, _config_dir) = setup::start_with_config_args(
        wisp.clone(),
        &config,
        &args.serve_args,
        Duration::from_secs(args.start_wait),
    )?;
    let api = server.api().clone();
    let app = if args.image {
        setup::pack_image(&server, &wisp, &app)?
    } else {
        app
    };

    let (tx, rx) = mpsc::channel::<Msg>();
    let rv = api.resource_version(SERVING, "services")?;
    let watches = setup::watch(&api, rv, &["services", "revisions"], true, &tx)?;
    let stop_tracing = Arc::new(AtomicBool::new(false));
    if args.trace_spawns {
        procfs::trace_children(
            server.pid(),
            "K_SERVICE",
            Duration::from_millis(2),
            Instant::now() + Duration::from_secs(3600),
            stop_tracing.clone(),
            tx.clone(),
        );
    }
    drop(tx);
    let mut st = State::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let result = (|| -> anyhow::Result<Vec<Pass>> {
        let mut passes = Vec::new();
        for &n in &args.sizes {
            let names: Vec<String> = (0..n).map(|i| format!("sfz{n}-{i:03}")).collect();
            eprintln!("round {n}: creating {n} services at zero");
            let created = Instant::now();
            create_all(&api, &names, &app, args.threads)?;
            st.wait(&rx, Instant::now() + timeout, "waiting for zero", |st| {
                all_at_zero(&server, st, &names)
            })?;
            eprintln!(
                "  all Ready at zero after {}; settling 1 s",
                ms(created.elapsed())
            );
            std::thread::sleep(Duration::from_secs(1));
            st.drain(&rx);
            let rv0 = api.resource_version(SERVING, "services")?;
            let shots = fire(&rt, ingress, &names, timeout);
            let writes = api.resource_version(SERVING, "services")? - rv0;
            // Let the watch events of the scale-up arrive.
            std::thread::sleep(Duration::from_millis(500));
            st.drain(&rx);
            let pass = Pass {
                label: format!("{n} new (initial-scale 0)"),
                n,
                stages: stages(&st, &shots),
                shots,
                zero_waits: Vec::new(),
                writes: vec![writes],
            };
            report_pass(&pass);
            passes.push(pass);

            let mut again = Pass {
                label: format!("{n} scaled to zero by the KPA (×{})", args.again),
                n,
                shots: Vec::new(),
                stages: Vec::new(),
                zero_waits: Vec::new(),
                writes: Vec::new(),
            };
            for k in 0..args.again {
                let idle = Instant::now();
                eprintln!(
                    "  pass {}/{}: waiting for the autoscaler to scale back to zero",
                    k + 1,
                    args.again
                );
                st.wait(
                    &rx,
                    Instant::now() + timeout,
                    "waiting for zero again",
                    |st| all_at_zero(&server, st, &names),
                )?;
                let zero_wait = idle.elapsed();
                eprintln!("  at zero after {}; settling 1 s", ms(zero_wait));
                std::thread::sleep(Duration::from_secs(1));
                st.drain(&rx);
                let rv0 = api.resource_version(SERVING, "services")?;
                let shots = fire(&rt, ingress, &names, timeout);
                again
                    .writes
                    .push(api.resource_version(SERVING, "services")? - rv0);
                std::thread::sleep(Duration::from_millis(500));
                st.drain(&rx);
                let stages = stages(&st, &shots);
                if again.stages.is_empty() {
                    again.stages = stages;
                } else {
                    for (acc, (_, v)) in again.stages.iter_mut().zip(stages) {
                        acc.1.extend(v);
                    }
                }
                again.shots.extend(shots);
                again.zero_waits.push(zero_wait);
            }
            if args.again > 0 {
                report_pass(&again);
                passes.push(again);
            }

            for name in &names {
                api.delete(SERVING, NAMESPACE, "services", name)?;
            }
            let deadline = Instant::now() + timeout;
            loop {
                let procs = replicas_by_service(&server);
                let left: usize = names.iter().filter_map(|n| procs.get(n)).sum();
                if left == 0 {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{left} replicas still running after deleting round {n}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            st.drain(&rx);
        }
        Ok(passes)
    })();

    stop_tracing.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in watches {
        w.stop(api::REWATCH * 3);
    }
    drop(rt);
    if let Some(path) = &args.keep_log {
        std::fs::copy(server.log_path(), path)
            .with_context(|| format!("copying wisp's log to {}", path.display()))?;
    }
    eprintln!("stopping wisp (SIGTERM)");
    let log_tail = server.log_tail(30);
    let stop = server.stop()?;
    let passes = match result {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wisp log (tail):\n{log_tail}");
            return Err(e);
        }
    };

    let out = render(&args, &config, &app, &passes, &stop, &load_start, &runc);
    print!("{out}");
    if !args.no_write {
        if let Some(dir) = args.out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&args.out, &out)
            .with_context(|| format!("writing {}", args.out.display()))?;
        eprintln!("wrote {}", args.out.display());
    }
    if stop.leftovers > 0 || stop.killed {
        bail!("wisp did not shut down cleanly");
    }
    Ok(())
}

fn create_all(api: &Api, names: &[String], app: &str, threads: usize) -> anyhow::Result<()> {
    let threads = threads.clamp(1, names.len().max(1));
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let errors = &errors;
            let api = api.clone();
            s.spawn(move || {
                for name in names.iter().skip(t).step_by(threads) {
                    if let Err(e) = api
                        .create("services", &service(name, app))
                        .with_context(|| format!("creating service {name}"))
                    {
                        wisp_sync::lock(errors).push(e);
                    }
                }
            });
        }
    });
    match errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .next()
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn report_pass(p: &Pass) {
    let t = Summary::of(&p.total());
    eprintln!(
        "  {}: {} answered, {} errors; full body p50 {} p95 {} max {}",
        p.label,
        p.total().len(),
        p.errors(),
        t.map_or("-".into(), |s| ms(s.p50)),
        t.map_or("-".into(), |s| ms(s.p95)),
        t.map_or("-".into(), |s| ms(s.max)),
    );
}

fn render(
    args: &Args,
    config: &str,
    app: &str,
    passes: &[Pass],
    stop: &server::StopReport,
    load_start: &str,
    runc: &[Duration],
) -> String {
    let mut summary = Table::new([
        "round",
        "answered",
        "errors",
        "first byte p50",
        "p95",
        "max",
        "full body p50",
        "p95",
        "max",
        "target (p95, here)",
        "Knative's bar (p95 / max, cluster)",
    ]);
    for p in passes {
        let f = Summary::of(&p.ttfb());
        let t = Summary::of(&p.total());
        let cell =
            |s: Option<Summary>, g: fn(&Summary) -> Duration| s.map_or("-".into(), |s| ms(g(&s)));
        let ours = match (our_target(p.n, args.image), t) {
            (Some(target), Some(t)) => format!(
                "≤ {} {}",
                ms(target),
                verdict(t.p95 <= target && p.errors() == 0)
            ),
            _ => String::new(),
        };
        let bar = match (knative_bar(p.n), t) {
            (Some((bp, bm)), Some(t)) => format!(
                "≤ {} / ≤ {} {}",
                ms(bp),
                ms(bm),
                verdict(t.p95 <= bp && t.max <= bm)
            ),
            _ => String::new(),
        };
        summary.row([
            p.label.clone(),
            format!("{}/{}", p.total().len(), p.shots.len()),
            p.errors().to_string(),
            cell(f, |s| s.p50),
            cell(f, |s| s.p95),
            cell(f, |s| s.max),
            cell(t, |s| s.p50),
            cell(t, |s| s.p95),
            cell(t, |s| s.max),
            ours,
            bar,
        ]);
    }

    let mut out = setup::results_header("Scale from zero", load_start);
    out += &format!(
        "- App: `{app}`; every service has `autoscaling.knative.dev/initial-scale: \"0\"`\n"
    );
    out += &format!("- `wisp serve --config`:\n\n```yaml\n{config}```\n\n");
    out += "## Results\n\n";
    out += &summary.render();
    if let Some(r) = Summary::of(runc) {
        let one = passes
            .iter()
            .filter(|p| p.n == 1)
            .filter_map(|p| Summary::of(&p.total()).map(|s| (p.label.clone(), s)))
            .map(|(label, s)| {
                format!(
                    "{label}: p95 {} = {:.2}× runc's p95",
                    ms(s.p95),
                    s.p95.as_secs_f64() / r.p95.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        out += &format!(
            "\nReference, in the same run before wisp started: `runc run -d` of the same app \
             (its own bundle and network namespace, `bench/src/runc_ref.rs`) until its port \
             listens, {} starts: min {}, p50 {}, p95 {}, max {}. Against it, one service from \
             zero through wisp (request sent → answer received) — {one}.\n",
            r.n,
            ms(r.min),
            ms(r.p50),
            ms(r.p95),
            ms(r.max)
        );
    }
    out += "\nEach round sends one request to each of its services at once, through wisp's \
            ingress (`Host: <svc>.default.example.com`), from one client on the same host. \
            Times run from the moment the round was fired: *first byte* is the response \
            head (status line and headers) arriving, *full body* the whole `Hello World!`. \
            Rows \"new\" measure services that never had a replica (`initial-scale: 0`); \
            rows \"scaled to zero by the KPA\" measure the same services again after the \
            autoscaler took them back to zero (no request for `stable-window` + \
            `scale-to-zero-grace-period`), ×N passes pooled.\n\n";
    for p in passes {
        out += &format!("## Stages: {}\n\n", p.label);
        let mut t = Table::new(["stage (time since fired)", "n", "p50", "p95", "max"]);
        for (label, v) in &p.stages {
            if let Some(s) = Summary::of(v) {
                t.row([
                    label.to_string(),
                    s.n.to_string(),
                    ms(s.p50),
                    ms(s.p95),
                    ms(s.max),
                ]);
            }
        }
        out += &t.render();
        if let Some(w) = Summary::of(&p.zero_waits) {
            out += &format!(
                "\nFrom the end of the previous pass to every revision back at zero \
                 (desired = actual = 0, no process), over {} waits: p50 {}, max {}.\n",
                w.n,
                ms(w.p50),
                ms(w.max)
            );
        }
        if !p.writes.is_empty() {
            let w: Vec<String> = p.writes.iter().map(u64::to_string).collect();
            out += &format!(
                "\nStore writes (resourceVersion delta) from firing to the last answer: {} \
                 ({:.1} per service).\n",
                w.join(", "),
                p.writes.iter().sum::<u64>() as f64 / p.shots.len().max(1) as f64
            );
        }
        let mut errs: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &p.shots {
            if let Some(e) = &s.error {
                *errs.entry(e.as_str()).or_insert(0) += 1;
            }
        }
        if !errs.is_empty() {
            out += "\nErrors:\n\n";
            for (e, n) in errs {
                out += &format!("- {n} × {e}\n");
            }
        }
        out += "\n";
    }
    out += &format!(
        "Watch events are stamped when they reach the benchmark, so their stages include \
         the API's and the watch's delay. `--trace-spawns` {}.\n\n",
        if args.trace_spawns {
            "was on (a /proc scan every 2 ms, which costs CPU on this machine)"
        } else {
            "was off (no \"replica process seen\" row)"
        }
    );
    out += &format!(
        "Shutdown: SIGTERM → wisp exited in {} ({}{}); replicas left behind: {}.\n",
        ms(stop.took),
        stop.status,
        if stop.killed { ", needed SIGKILL" } else { "" },
        stop.leftovers,
    );
    out
}
