//! Bursts of load on services at zero, after Knative's
//! `test/performance/benchmarks/load-test`, scaled down to a small machine.
//!
//! Starts a fresh `wisp serve`, then for each of three `autoscale` services — Knative's
//! `load-test-zero` (`target-burst-capacity: "0"`), `load-test-always` (`-1`) and
//! `load-test-200` (`200`) — one after another:
//!
//! 1. creates it (`initial-scale: "0"`, so it starts at zero) and waits until it is Ready
//!    with its revision at 0 replicas and no replica process;
//! 2. sends `GET /?sleep=100` open-loop at stepped rates (default 200 → 400 → 800 req/s,
//!    20 s each) through the ingress ([`wisp_bench::rate`]), while a sampler records the
//!    revision's actual/desired replicas and the PodAutoscaler's desired scale every
//!    500 ms (from watches);
//! 3. deletes it and waits until its replicas are gone.
//!
//! Results: errors, latency overall and once scaled (the last `--settled` seconds of each
//! step), requests sent/answered, CPU used by wisp / the replicas / the generator; a CSV
//! per service (`bench/results/burst-<name>.csv`) and a chart of replicas and latency over
//! time (`bench/results/burst.svg`).

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::{self, Api, Event, SERVING},
    procfs,
    rate::{self, Outcome, Run, Step, Target},
    server::{self, Server},
    setup,
    stats::{Table, ms},
};

const NAMESPACE: &str = "default";
const SERVICE_LABEL: &str = "serving.knative.dev/service";
/// The handler's own latency (`?sleep=100`) plus what we allow on top of it.
const HANDLER: Duration = Duration::from_millis(100);
const ALLOWANCE: Duration = Duration::from_millis(15);
/// Knative's bar: max latency ≤ 10 s.
const KNATIVE_MAX: Duration = Duration::from_secs(10);
/// Sampling period of replicas (and the latency windows of the CSV).
const PERIOD: Duration = Duration::from_millis(500);
/// Linux `USER_HZ`: the unit of utime/stime in /proc/<pid>/stat.
const CLOCK_TICKS: f64 = 100.0;

#[derive(Debug, Parser)]
#[command(about = "Stepped open-loop load on Knative Services starting at zero, on wisp")]
struct Args {
    /// Load steps, RPSxSECONDS, comma-separated.
    #[arg(long, default_value = "200x20s,400x20s,800x20s")]
    steps: String,
    /// The services: NAME=TBC (target-burst-capacity), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "zero=0,always=-1,200=200"
    )]
    services: Vec<String>,
    /// Path and query of every request.
    #[arg(long, default_value = "/?sleep=100")]
    path: String,
    /// "Once scaled": the last SECONDS of each step.
    #[arg(long, default_value_t = 10.0)]
    settled: f64,
    /// config-autoscaler `stable-window` (Knative's default: 60s).
    #[arg(long, default_value = "60s")]
    stable_window: String,
    /// Worker threads of the load generator.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Per-request timeout in seconds (Knative's load test: 30).
    #[arg(long, default_value_t = 30)]
    request_timeout: u64,
    /// Seconds any one wait may take before the benchmark gives up.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Seconds to wait for the ingress/cluster-local ports if another `wisp serve` holds
    /// them (e.g. another benchmark running).
    #[arg(long, default_value_t = 600)]
    start_wait: u64,
    /// Copy wisp's stderr (`RUST_LOG` is passed through) to this file before stopping it.
    #[arg(long)]
    keep_log: Option<PathBuf>,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app every service runs (default: `autoscale` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Directory of the results (`burst.md`, `burst-<name>.csv`, `burst.svg`).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out_dir: PathBuf,
    /// Print the results only; write no file.
    #[arg(long)]
    no_write: bool,
}

/// The latest scale figures of each service, fed by the watches.
#[derive(Debug, Default)]
struct State {
    /// Service → Ready.
    service_ready: HashMap<String, bool>,
    /// Service → (revision Ready, actualReplicas, desiredReplicas).
    revision: HashMap<String, (bool, i64, i64)>,
    /// Service → (desiredScale, actualScale) of its PA.
    pa: HashMap<String, (i64, i64)>,
    /// (when, service, actualReplicas) of every revision event.
    actual_log: Vec<(Instant, String, i64)>,
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(-1)
}

impl State {
    fn take(&mut self, e: Event) {
        let deleted = e.event_type == "DELETED";
        if e.plural == "services" {
            if deleted {
                self.service_ready.remove(e.name());
            } else {
                self.service_ready
                    .insert(e.name().to_string(), e.is_ready());
            }
            return;
        }
        let Some(svc) = e.label(SERVICE_LABEL).map(str::to_string) else {
            return;
        };
        let st = &e.object["status"];
        match (e.plural, deleted) {
            ("revisions", true) => {
                self.revision.remove(&svc);
            }
            ("revisions", false) => {
                let actual = int(&st["actualReplicas"]);
                self.actual_log.push((e.at, svc.clone(), actual));
                self.revision
                    .insert(svc, (e.is_ready(), actual, int(&st["desiredReplicas"])));
            }
            ("podautoscalers", true) => {
                self.pa.remove(&svc);
            }
            ("podautoscalers", false) => {
                self.pa
                    .insert(svc, (int(&st["desiredScale"]), int(&st["actualScale"])));
            }
            _ => {}
        }
    }
}

/// Waits (polling `state` every 50 ms) until `done` holds; fails at the timeout.
fn wait_for(
    state: &Mutex<State>,
    timeout: Duration,
    what: &str,
    done: impl Fn(&State) -> Result<(), String>,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let r = done(&wisp_sync::lock(state));
        match r {
            Ok(()) => return Ok(start.elapsed()),
            Err(missing) if start.elapsed() > timeout => {
                bail!("{what}: still {missing} after {timeout:?}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Replica processes of wisp whose `K_SERVICE` is `svc`.
fn processes_of(server_pid: u32, svc: &str) -> Vec<procfs::Proc> {
    procfs::children(server_pid)
        .into_iter()
        .filter(|p| procfs::env_var(p.pid, "K_SERVICE").as_deref() == Some(svc))
        .collect()
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // f[0] is field 3; utime is field 14, stime field 15.
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / CLOCK_TICKS
}

/// One service of the benchmark.
#[derive(Debug, Clone)]
struct Spec {
    /// Short name (`zero`, `always`, `200`): the CSV is `burst-<name>.csv`.
    name: String,
    /// The Knative Service, `load-test-<name>`.
    service: String,
    tbc: String,
}

fn parse_services(list: &[String]) -> anyhow::Result<Vec<Spec>> {
    list.iter()
        .map(|s| {
            let (name, tbc) = s
                .split_once('=')
                .with_context(|| format!("service {s:?} is not NAME=TBC"))?;
            Ok(Spec {
                name: name.trim().to_string(),
                service: format!("load-test-{}", name.trim()),
                tbc: tbc.trim().to_string(),
            })
        })
        .collect()
}

fn service(spec: &Spec, app: &str) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": spec.service, "namespace": NAMESPACE},
        "spec": {"template": {
            "metadata": {"annotations": {
                "autoscaling.knative.dev/initial-scale": "0",
                "autoscaling.knative.dev/target-burst-capacity": spec.tbc,
            }},
            "spec": {"containers": [{"command": [app]}]},
        }},
    })
}

/// One sample of the replicas (time since the run's start).
#[derive(Debug, Clone, Copy)]
struct Point {
    at: Instant,
    actual: i64,
    desired: i64,
    pa_desired: i64,
    processes: usize,
}

/// What one service's run gave.
struct Outcome1 {
    spec: Spec,
    run: Run,
    points: Vec<Point>,
    /// Run start → first revision event with actualReplicas > 0.
    first_ready: Option<Duration>,
    wisp_cpu: f64,
    gen_cpu: f64,
    app_cpu: f64,
}

impl Outcome1 {
    fn t(&self, at: Instant) -> f64 {
        if at >= self.run.start {
            (at - self.run.start).as_secs_f64()
        } else {
            -(self.run.start - at).as_secs_f64()
        }
    }

    /// p95 (ms) of the successful requests due in (t − PERIOD, t].
    fn window_p95(&self, t: f64) -> Option<f64> {
        let lo = t - PERIOD.as_secs_f64();
        let h = self.run.histogram(|s| {
            let d = s.due.as_secs_f64();
            d > lo && d <= t
        });
        (!h.is_empty()).then(|| h.value_at_quantile(0.95) as f64 / 1000.0)
    }

    /// Whether a sample is in the last `settled` s of its step.
    fn settled(&self, settled: f64) -> impl Fn(&rate::Sample) -> bool + '_ {
        move |s| {
            let (start, end) = self.run.step_span(s.step);
            let from = end
                .as_secs_f64()
                .max(start.as_secs_f64())
                .min(end.as_secs_f64())
                - settled.min((end - start).as_secs_f64() / 2.0);
            s.due.as_secs_f64() >= from
        }
    }

    fn csv(&self) -> String {
        let mut out = String::from(
            "time_s,rps_target,actual_replicas,desired_replicas,p95_window_ms,pa_desired_scale,processes\n",
        );
        for p in &self.points {
            let t = self.t(p.at);
            let rps = if t >= 0.0 {
                self.run.rps_at(Duration::from_secs_f64(t))
            } else {
                0
            };
            let p95 = self
                .window_p95(t)
                .map_or(String::new(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "{t:.2},{rps},{},{},{p95},{},{}",
                p.actual, p.desired, p.pa_desired, p.processes
            );
        }
        out
    }
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    api: &Api,
    server: &Server,
    state: &Arc<Mutex<State>>,
    ingress: std::net::SocketAddr,
    spec: &Spec,
    app: &str,
    args: &Args,
    steps: &[Step],
) -> anyhow::Result<Outcome1> {
    let timeout = Duration::from_secs(args.timeout);
    let svc = spec.service.clone();
    eprintln!("{svc} (target-burst-capacity {}): creating", spec.tbc);
    api.create("services", &service(spec, app))
        .with_context(|| format!("creating {svc}"))?;
    let pid = server.pid();
    let waited = wait_for(state, timeout, "waiting for zero", |st| {
        if st.service_ready.get(&svc) != Some(&true) {
            return Err("service not Ready".into());
        }
        match st.revision.get(&svc) {
            Some((true, 0, 0)) => {}
            r => return Err(format!("revision (Ready, actual, desired) = {r:?}")),
        }
        let n = processes_of(pid, &svc).len();
        if n > 0 {
            return Err(format!("{n} replica processes"));
        }
        Ok(())
    })?;
    eprintln!("  Ready at zero after {}; settling 1 s", ms(waited));
    std::thread::sleep(Duration::from_secs(1));

    // Sampler: every PERIOD, the latest figures from the watches and the processes.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (state, stop, svc) = (state.clone(), stop.clone(), svc.clone());
        std::thread::spawn(move || {
            let mut points = Vec::new();
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let (actual, desired, pa_desired) = {
                    let st = wisp_sync::lock(&state);
                    let (_, a, d) = st.revision.get(&svc).copied().unwrap_or((false, -1, -1));
                    let pa = st.pa.get(&svc).map_or(-1, |p| p.0);
                    (a, d, pa)
                };
                points.push(Point {
                    at: Instant::now(),
                    actual,
                    desired,
                    pa_desired,
                    processes: processes_of(pid, &svc).len(),
                });
                next += PERIOD;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            points
        })
    };

    let wisp_cpu0 = cpu_seconds(pid);
    let gen_cpu0 = cpu_seconds(std::process::id());
    let mut opts = rate::Options::new(
        Target::new(
            ingress,
            format!("{svc}.{NAMESPACE}.example.com"),
            &args.path,
        ),
        steps.to_vec(),
    );
    opts.timeout = Duration::from_secs(args.request_timeout);
    opts.threads = args.threads;
    eprintln!(
        "  load: {} ({} requests)",
        args.steps,
        steps.iter().map(Step::requests).sum::<u64>()
    );
    let run = rate::run(&opts);
    let wisp_cpu = cpu_seconds(pid) - wisp_cpu0;
    let gen_cpu = cpu_seconds(std::process::id()) - gen_cpu0;
    let app_cpu: f64 = processes_of(pid, &svc)
        .iter()
        .map(|p| cpu_seconds(p.pid))
        .sum();
    stop.store(true, Ordering::Relaxed);
    let points = sampler.join().unwrap_or_default();
    let run = run?;
    let first_ready = wisp_sync::lock(state)
        .actual_log
        .iter()
        .filter(|(at, s, a)| *s == svc && *a > 0 && *at >= run.start)
        .map(|(at, _, _)| *at - run.start)
        .min();

    eprintln!("  deleting");
    api.delete(SERVING, NAMESPACE, "services", &svc)?;
    wait_for(
        state,
        timeout,
        "waiting for the replicas to go",
        |_| match processes_of(pid, &svc).len() {
            0 => Ok(()),
            n => Err(format!("{n} replica processes")),
        },
    )?;
    let o = Outcome1 {
        spec: spec.clone(),
        run,
        points,
        first_ready,
        wisp_cpu,
        gen_cpu,
        app_cpu,
    };
    let l = o.run.latency(|_| true);
    eprintln!(
        "  {} sent, {} errors; p50 {} p95 {} max {}",
        o.run.samples.len(),
        o.run.errors(|_| true),
        ms(l.p50),
        ms(l.p95),
        ms(l.max)
    );
    Ok(o)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_start = procfs::loadavg();
    let steps = rate::parse_steps(&args.steps)?;
    let specs = parse_services(&args.services)?;
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "autoscale")?;

    let config = format!(
        "config-autoscaler:\n  allow-zero-initial-scale: \"true\"\n  stable-window: {}\n",
        args.stable_window
    );
    let (server, ingress, _config_dir) =
        setup::start_with_config(wisp, &config, Duration::from_secs(args.start_wait))?;
    let api = server.api().clone();

    // Watches feed the state from a thread of their own for the whole run.
    let (tx, rx) = mpsc::channel::<Event>();
    let rv = api.resource_version(SERVING, "services")?;
    let watches = setup::watch(&api, rv, &["services", "revisions"], true, &tx)?;
    drop(tx);
    let state = Arc::new(Mutex::new(State::default()));
    let pump = {
        let state = state.clone();
        std::thread::spawn(move || {
            for e in rx {
                wisp_sync::lock(&state).take(e);
            }
        })
    };

    let mut outcomes = Vec::new();
    let mut failure = None;
    for spec in &specs {
        match run_one(&api, &server, &state, ingress, spec, &app, &args, &steps) {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }

    for w in watches {
        w.stop(api::REWATCH * 3);
    }
    if let Some(path) = &args.keep_log {
        std::fs::copy(server.log_path(), path)
            .with_context(|| format!("copying wisp's log to {}", path.display()))?;
    }
    eprintln!("stopping wisp (SIGTERM)");
    let log_tail = server.log_tail(30);
    let stop = server.stop()?;
    let _ = pump.join();
    if let Some(e) = failure {
        eprintln!("wisp log (tail):\n{log_tail}");
        return Err(e);
    }

    let md = render(&args, &config, &app, &steps, &outcomes, &stop, &load_start);
    print!("{md}");
    if !args.no_write {
        std::fs::create_dir_all(&args.out_dir)?;
        let write = |name: &str, text: &str| -> anyhow::Result<()> {
            let path = args.out_dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
            Ok(())
        };
        write("burst.md", &md)?;
        for o in &outcomes {
            write(&format!("burst-{}.csv", o.spec.name), &o.csv())?;
        }
        write("burst.svg", &svg(&outcomes, &steps))?;
    }
    if stop.leftovers > 0 || stop.killed {
        bail!("wisp did not shut down cleanly");
    }
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "✅" } else { "❌" }
}

fn render(
    args: &Args,
    config: &str,
    app: &str,
    steps: &[Step],
    outcomes: &[Outcome1],
    stop: &server::StopReport,
    load_start: &str,
) -> String {
    let bound = HANDLER + ALLOWANCE;
    let mut summary = Table::new([
        "service (TBC)",
        "sent / expected",
        "answered 2xx",
        "errors",
        "p50",
        "p95",
        "max",
        "once scaled p50",
        "p95",
        "max",
        "first replica Ready",
        "max replicas",
        "verdict",
    ]);
    for o in outcomes {
        let all = o.run.latency(|_| true);
        let settled = o.run.latency(o.settled(args.settled));
        let errors = o.run.errors(|_| true);
        let ok = o
            .run
            .outcomes(|_| true)
            .get(&Outcome::Ok)
            .copied()
            .unwrap_or(0);
        let max_replicas = o.points.iter().map(|p| p.actual).max().unwrap_or(0);
        summary.row([
            format!("{} ({})", o.spec.service, o.spec.tbc),
            format!("{} / {}", o.run.samples.len(), o.run.expected()),
            ok.to_string(),
            errors.to_string(),
            ms(all.p50),
            ms(all.p95),
            ms(all.max),
            ms(settled.p50),
            ms(settled.p95),
            ms(settled.max),
            o.first_ready.map_or("-".into(), ms),
            max_replicas.to_string(),
            format!(
                "errors 0 {}, settled p95 ≤ {} {}, max ≤ 10 s {}",
                verdict(errors == 0),
                ms(bound),
                verdict(settled.p95 <= bound),
                verdict(all.max <= KNATIVE_MAX)
            ),
        ]);
    }

    let mut per_step = Table::new([
        "service",
        "step",
        "sent",
        "errors",
        "p50",
        "p95",
        "max",
        "last --settled s: p50",
        "p95",
        "replicas at end (actual/desired)",
    ]);
    for o in outcomes {
        for (i, step) in steps.iter().enumerate() {
            let (start, end) = o.run.step_span(i);
            let in_step = |s: &rate::Sample| s.step == i;
            let all = o.run.latency(in_step);
            let settled = o.run.latency(|s| in_step(s) && o.settled(args.settled)(s));
            let end_point = o.points.iter().rfind(|p| o.t(p.at) <= end.as_secs_f64());
            per_step.row([
                o.spec.service.clone(),
                format!(
                    "{} rps, {:.0}–{:.0} s",
                    step.rps,
                    start.as_secs_f64(),
                    end.as_secs_f64()
                ),
                o.run
                    .samples
                    .iter()
                    .filter(|s| in_step(s))
                    .count()
                    .to_string(),
                o.run.errors(in_step).to_string(),
                ms(all.p50),
                ms(all.p95),
                ms(all.max),
                ms(settled.p50),
                ms(settled.p95),
                end_point.map_or("-".into(), |p| format!("{}/{}", p.actual, p.desired)),
            ]);
        }
    }

    let mut cpu = Table::new([
        "service",
        "run time",
        "wisp serve CPU",
        "replicas CPU",
        "generator CPU",
        "generator max lag",
    ]);
    for o in outcomes {
        let secs = o.run.elapsed.as_secs_f64();
        let pct = |c: f64| format!("{c:.1} s ({:.0}% of a core)", 100.0 * c / secs);
        cpu.row([
            o.spec.service.clone(),
            format!("{secs:.1} s"),
            pct(o.wisp_cpu),
            pct(o.app_cpu),
            pct(o.gen_cpu),
            ms(o.run.max_lag()),
        ]);
    }

    let mut out = setup::results_header("Burst: stepped load on services at zero", load_start);
    out += &format!(
        "- App: `{app}`, requests `GET {}`; every service starts at zero \
         (`initial-scale: \"0\"`), containerConcurrency 0\n",
        args.path
    );
    out += &format!("- Steps: {}\n", args.steps);
    out += &format!("- `wisp serve --config`:\n\n```yaml\n{config}```\n\n");
    out += "## Results\n\n";
    out += &summary.render();
    out += &format!(
        "\nLatency runs from the moment a request was due (open loop: request *i* of a step \
         is due at *i*/rate whatever happened to the others) to the end of its body, for \
         answered (2xx) requests. \"Once scaled\" is the last {} s of each step. Targets: \
         no errors, once-scaled p95 within {} of the handler's {} (Knative's load-test: \
         p95 in [100, 115] ms over 1k → 2k → 3k rps on a cluster, max ≤ 10 s, zero \
         errors).\n\n",
        args.settled,
        ms(ALLOWANCE),
        ms(HANDLER)
    );
    out += "## Per step\n\n";
    out += &per_step.render();
    out += "\n## CPU (2 cores shared by everything)\n\n";
    out += &cpu.render();
    out += "\nThe load generator, `wisp serve` (ingress + activator + queue-proxy layers \
            + controllers) and the replicas all run on this machine. Replica CPU counts \
            the replicas alive at the end of the run. Generator lag is how late the \
            generator sent its worst request (it counts in that request's latency).\n";
    for o in outcomes {
        if !o.run.error_messages.is_empty() || o.run.errors(|_| true) > 0 {
            out += &format!("\n### Errors of {}\n\n", o.spec.service);
            for (outcome, n) in o.run.outcomes(|_| true) {
                if outcome != Outcome::Ok {
                    out += &format!("- {n} × {}\n", outcome.label());
                }
            }
            for (m, n) in &o.run.error_messages {
                out += &format!("- {n} × `{m}`\n");
            }
        }
    }
    out += "\n## Replicas over time\n\n![replicas and latency over time](burst.svg)\n\n";
    out += "Per service, `burst-<name>.csv`: every 500 ms the revision's actual/desired \
            replicas and the PodAutoscaler's desiredScale (latest watch events), the \
            replica processes, and the p95 of the requests due in that 500 ms.\n\n";
    out += &format!(
        "Shutdown: SIGTERM → wisp exited in {} ({}{}); replicas left behind: {}.\n",
        ms(stop.took),
        stop.status,
        if stop.killed { ", needed SIGKILL" } else { "" },
        stop.leftovers,
    );
    out
}

// ---------------------------------------------------------------------------------------
// The chart: hand-written SVG, two panels sharing the time axis.

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Nice tick step for a range of `span` with about `n` ticks.
fn tick_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn svg(outcomes: &[Outcome1], steps: &[Step]) -> String {
    let (w, h) = (900.0, 670.0);
    let (left, right) = (85.0, 800.0);
    let (top1, bottom1) = (50.0, 300.0);
    let (top2, bottom2) = (360.0, 580.0);
    let total: f64 = steps.iter().map(|s| s.duration.as_secs_f64()).sum();
    let t_max = outcomes
        .iter()
        .flat_map(|o| o.points.iter().map(|p| o.t(p.at)))
        .fold(total, f64::max);
    let x = |t: f64| left + (t.max(0.0) / t_max) * (right - left);
    let max_rep = outcomes
        .iter()
        .flat_map(|o| o.points.iter().map(|p| p.actual.max(p.desired)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let rep_max = (max_rep + 1.0).ceil();
    let y_rep = |r: f64| bottom1 - (r.max(0.0) / rep_max) * (bottom1 - top1);
    let rps_max = f64::from(steps.iter().map(|s| s.rps).max().unwrap_or(1)) * 1.25;
    let y_rps = |r: f64| bottom1 - (r / rps_max) * (bottom1 - top1);

    // Latency panel: log scale between nice decades.
    let lat: Vec<Vec<(f64, f64)>> = outcomes
        .iter()
        .map(|o| {
            o.points
                .iter()
                .filter_map(|p| {
                    let t = o.t(p.at);
                    Some((t, o.window_p95(t)?))
                })
                .collect()
        })
        .collect();
    // From 50 ms (or lower) to the first "nice" value (1, 1.5, 2, 3, 5, 7 × 10^k) above
    // the highest p95, at least 200 ms.
    const NICE: [f64; 6] = [1.0, 1.5, 2.0, 3.0, 5.0, 7.0];
    let nice_values = |lo: f64, hi: f64| -> Vec<f64> {
        let mut v = Vec::new();
        let mut dec = 10f64.powf(lo.log10().floor());
        while dec <= hi * 10.0 {
            for m in NICE {
                if dec * m >= lo - 1e-9 && dec * m <= hi + 1e-9 {
                    v.push(dec * m);
                }
            }
            dec *= 10.0;
        }
        v
    };
    let lat_max = lat.iter().flatten().map(|p| p.1).fold(200.0, f64::max);
    let lat_lo = lat
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(50.0, f64::min)
        .max(1.0);
    let lat_hi = nice_values(lat_max, lat_max * 10.0)
        .first()
        .copied()
        .unwrap_or(lat_max);
    let (d_lo, d_hi) = (lat_lo.log10(), lat_hi.log10());
    let y_lat = |v: f64| bottom2 - ((v.max(1.0).log10() - d_lo) / (d_hi - d_lo)) * (bottom2 - top2);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">Burst from zero: replicas and p95 latency over time</text>"#,
        (left + right) / 2.0
    );

    // Top panel: rps steps (right axis), replicas (left axis).
    let mut rps_path = String::new();
    let mut t = 0.0;
    for (i, st) in steps.iter().enumerate() {
        let r = f64::from(st.rps);
        let _ = write!(
            rps_path,
            "{}{:.1},{:.1} L{:.1},{:.1} ",
            if i == 0 { "M" } else { "L" },
            x(t),
            y_rps(r),
            x(t + st.duration.as_secs_f64()),
            y_rps(r)
        );
        t += st.duration.as_secs_f64();
    }
    let _ = write!(rps_path, "L{:.1},{:.1}", x(t), y_rps(0.0));
    let _ = writeln!(
        s,
        r##"<path d="M{:.1},{:.1} {} Z" fill="#eeeeee" stroke="none"/>"##,
        x(0.0),
        y_rps(0.0),
        rps_path.trim_start_matches('M')
    );
    let _ = writeln!(
        s,
        r##"<path d="{rps_path}" fill="none" stroke="#888888" stroke-width="1.5"/>"##
    );
    // Axes and ticks.
    for (top, bottom) in [(top1, bottom1), (top2, bottom2)] {
        let _ = writeln!(
            s,
            r#"<rect x="{left}" y="{top}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            right - left,
            bottom - top
        );
        let step = tick_step(t_max, 10.0);
        let mut tt = 0.0;
        while tt <= t_max + 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{bottom}" x2="{0:.1}" y2="{1}" stroke="black"/><line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{bottom}" stroke="#dddddd" stroke-dasharray="2,3"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
                x(tt),
                bottom + 5.0,
                bottom + 18.0,
                tt
            );
            tt += step;
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">time since the load started (s)</text>"#,
            (left + right) / 2.0,
            bottom + 34.0
        );
    }
    let rstep = tick_step(rep_max, 6.0).max(1.0);
    let mut r = 0.0;
    while r <= rep_max + 1e-9 {
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{1:.1}" x2="{left}" y2="{1:.1}" stroke="black"/><text x="{2}" y="{3:.1}" text-anchor="end">{r}</text>"#,
            left - 5.0,
            y_rep(r),
            left - 8.0,
            y_rep(r) + 4.0
        );
        r += rstep;
    }
    let qstep = tick_step(rps_max, 5.0);
    let mut q = 0.0;
    while q <= rps_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{right}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#888888"/><text x="{2}" y="{3:.1}" fill="#666666">{q}</text>"##,
            y_rps(q),
            right + 5.0,
            right + 8.0,
            y_rps(q) + 4.0
        );
        q += qstep;
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate(18,{0}) rotate(-90)" text-anchor="middle">replicas (solid: actual, dashed: desired)</text>"#,
        (top1 + bottom1) / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate({0},{1}) rotate(90)" text-anchor="middle" fill="#666666">target rate (req/s, grey)</text>"##,
        right + 48.0,
        (top1 + bottom1) / 2.0
    );

    for (i, o) in outcomes.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for (dash, f) in [
            ("", (|p: &Point| p.actual) as fn(&Point) -> i64),
            (r#" stroke-dasharray="5,4""#, |p: &Point| p.desired),
        ] {
            // A step line: hold each value until the next sample.
            let mut d = String::new();
            let mut last: Option<f64> = None;
            for p in &o.points {
                let t = o.t(p.at);
                if t < 0.0 {
                    continue;
                }
                let v = f(p).max(0) as f64 + 0.04 * i as f64;
                match last {
                    None => {
                        let _ = write!(d, "M{:.1},{:.1} ", x(t), y_rep(v));
                    }
                    Some(prev) => {
                        let _ = write!(
                            d,
                            "L{:.1},{:.1} L{:.1},{:.1} ",
                            x(t),
                            y_rep(prev),
                            x(t),
                            y_rep(v)
                        );
                    }
                }
                last = Some(v);
            }
            let _ = writeln!(
                s,
                r#"<path d="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                d.trim_end()
            );
        }
    }

    // Bottom panel: p95 per 500 ms window, log scale.
    for v in nice_values(lat_lo, lat_hi) {
        let label = if v >= 1000.0 {
            format!("{} s", v / 1000.0)
        } else {
            format!("{v} ms")
        };
        let _ = writeln!(
            s,
            r##"<line x1="{0}" y1="{1:.1}" x2="{left}" y2="{1:.1}" stroke="black"/><line x1="{left}" y1="{1:.1}" x2="{right}" y2="{1:.1}" stroke="#dddddd" stroke-dasharray="2,3"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            left - 5.0,
            y_lat(v),
            left - 8.0,
            y_lat(v) + 4.0,
            label
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="#444444" stroke-dasharray="6,3"/><text x="{1}" y="{2:.1}" fill="#444444">115 ms</text>"##,
        y_lat(115.0),
        right + 5.0,
        y_lat(115.0) + 4.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18,{0}) rotate(-90)" text-anchor="middle">p95 latency per 500 ms (log)</text>"#,
        (top2 + bottom2) / 2.0
    );
    for (i, series) in lat.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = series
            .iter()
            .filter(|(t, _)| *t >= 0.0)
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y_lat(*v)))
            .collect();
        if !pts.is_empty() {
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="1.5"/>"#,
                pts.join(" ")
            );
        }
    }

    // Legend.
    for (i, o) in outcomes.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let lx = left + 10.0 + 230.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{0}" x2="{1}" y2="{0}" stroke="{c}" stroke-width="3"/><text x="{2}" y="{3}">{4}</text>"#,
            h - 22.0,
            lx + 24.0,
            lx + 30.0,
            h - 18.0,
            esc(&format!("{} (TBC {})", o.spec.service, o.spec.tbc))
        );
    }
    s += "</svg>\n";
    s
}
