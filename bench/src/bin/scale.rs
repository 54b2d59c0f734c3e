//! Many services on one machine (issue #21): how wisp's cost per service and its
//! latencies hold up at 100, 1,000 and 10,000 Services.
//!
//! For each size N, on a fresh `wisp serve` with services at zero (`initial-scale: "0"`):
//!
//! 1. creates N Services from `--threads` client threads, each as fast as the server
//!    answers, and times each one's create → `Ready=True` (a watch of services), the
//!    store writes per service until it is Ready (changes of its five objects up to the
//!    resourceVersion it turned Ready at, from watches of the five kinds), all store
//!    writes (resourceVersion delta) and wisp's CPU time until all are Ready;
//! 2. idles `--idle` seconds: wisp's CPU and store writes meanwhile, then its RSS;
//! 3. reads: the list of all Services in one request, and paged (`limit`/`continue`);
//! 4. the next services: `--late` more created one at a time, create → Ready each;
//! 5. one Route's traffic changed: a tag removed from a Service's traffic → the time until
//!    the ingress answers 404 for the tag's host;
//! 6. cold start: one request to each of `--cold` of the N services (at zero, spread
//!    over them) → answered, each followed by the same to a service on a second server
//!    holding only `--cold` services (the in-run reference: the two alternate, so a
//!    noisy moment of the machine weighs on both); before those two, the data plane:
//!    `wrk` against one more service (a replica kept up) among the N, against the same
//!    probe with that service alone on a server;
//! 7. restart: SIGTERM, a new `wisp serve` on the same data dir: time until its API
//!    answers, until the first Service created answers through the ingress again, until
//!    every Service is Ready with its route in the ingress (its KIngress Ready), until
//!    the replicas that ran before it run again, and how many replicas run 3 s after
//!    that (those and the one asked for: no revision at zero gets one).
//!
//! Then, for each of `--replica-sizes`, the same creation with one replica per Service
//! (default config), and wisp's CPU while those replicas serve a light load
//! (`--light-rps` requests per second, round-robin over the services): all of wisp, and
//! the autoscaler and its stats path alone (wisp's `wisp_reconcile_cpu_seconds_total` of
//! the podautoscaler reconciler, which is the KPA, and
//! `wisp_autoscaler_stats_cpu_seconds_total`).
//!
//! Writes `bench/results/scale.md` and `bench/results/scale.svg` (create → Ready p95, CPU
//! per service and RSS against the number of services).

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Barrier, Mutex,
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
    load,
    procfs::{self, Memory, Mib},
    server::{self, Server},
    setup,
    stats::{Summary, Table, median, ms},
};

const NAMESPACE: &str = "default";
/// The ingress's default domain (`config-network`'s `domain-template` over `example.com`).
const DOMAIN: &str = "example.com";

#[derive(Debug, Parser)]
#[command(about = "wisp with 100, 1,000 and 10,000 Services: latency, CPU and memory per service")]
struct Args {
    /// Numbers of services at zero, one fresh server each.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sizes: Vec<usize>,
    /// Numbers of services with a running replica each (10,000 replicas do not fit in 2
    /// cores: these stop at 1,000). 0: none.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    replica_sizes: Vec<usize>,
    /// Client threads creating the services.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Seconds the services stay idle before memory and idle cost are read.
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// Services created one at a time after the N (the "10,001st").
    #[arg(long, default_value_t = 20)]
    late: usize,
    /// Cold starts timed at each size, among the N and on the reference server (a p95 of
    /// 20 samples is decided by one slow request).
    #[arg(long, default_value_t = 60)]
    cold: usize,
    /// Seconds one creation round may take.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app every service runs (default: `hello` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Where to write the Markdown results (the SVG goes beside it).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/scale.md"))]
    out: PathBuf,
    /// Print the results only; write nothing.
    #[arg(long)]
    no_write: bool,
    /// Seconds of each of the 3 `wrk` runs of the data-plane probe (one service with a
    /// replica among the N, against the same service alone on its own server); 0: none.
    #[arg(long, default_value_t = 5)]
    dataplane_secs: u64,
    /// Requests per second, round-robin over the services, while the replicas of the
    /// replica rounds are measured (the issue's "light load"); 0: none.
    #[arg(long, default_value_t = 100)]
    light_rps: u64,
}

/// A Service running `app`; `at_zero` adds nothing (the server's config starts it at zero).
fn service(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{
            "command": [app],
            "env": [{"name": "TARGET", "value": "scale"}],
        }]}}},
    })
}

/// Route updates timed at each size (each on another service), for their p95.
const ROUTE_UPDATES: usize = 20;

/// The Service the data-plane probe loads: one replica kept up (`min-scale: 1`).
const DATAPLANE: &str = "dataplane";

/// The [`DATAPLANE`] service on one server, with a replica kept up, ready for `wrk`.
struct Probe {
    wrk: PathBuf,
    ingress: SocketAddr,
    host: String,
}

impl Probe {
    /// Creates the service on `server`, waits until it answers, and warms it up (1 s).
    fn set_up(server: &Server, app: &str) -> anyhow::Result<Probe> {
        let mut svc = service(DATAPLANE, app);
        svc["spec"]["template"]["metadata"] =
            json!({"annotations": {"autoscaling.knative.dev/min-scale": "1"}});
        server.api().create("services", &svc)?;
        let probe = Probe {
            wrk: load::find_wrk()?,
            ingress: server.ingress_addr(Duration::from_secs(10))?,
            host: format!("{DATAPLANE}.{NAMESPACE}.{DOMAIN}"),
        };
        until_status(
            probe.ingress,
            &probe.host,
            |s| s == 200,
            Duration::from_secs(60),
        )?;
        probe.round(Duration::from_secs(1))?;
        Ok(probe)
    }

    /// One `wrk -t2 -c50` run of `duration`: requests per second, all answered 2xx.
    fn round(&self, duration: Duration) -> anyhow::Result<f64> {
        let r = load::WrkRun {
            threads: 2,
            connections: 50,
            duration,
            host: Some(self.host.clone()),
            url: format!("http://{}/", self.ingress),
        }
        .run(&self.wrk)?;
        if r.non_2xx > 0 || r.socket_errors > 0 {
            bail!(
                "data-plane probe: {} non-2xx answers, {} socket errors",
                r.non_2xx,
                r.socket_errors
            );
        }
        Ok(r.rps)
    }
}

/// Requests per second through the ingress to the [`DATAPLANE`] service among the N on
/// `among`, and the same service alone on a fresh server started now: 3 rounds of `secs`
/// each, alternating between the two so that both see the machine as it is, medians.
/// A second `wisp serve` with services at zero, as the measured one: the in-run reference.
/// Keep the directory guard while it runs: it holds the config file.
fn reference_server(wisp: &Path) -> anyhow::Result<(tempfile::TempDir, Server)> {
    let (dir, config) = setup::config_file(setup::AT_ZERO)?;
    let mut opts = server::Options::new(wisp.to_path_buf());
    opts.config = Some(config);
    Ok((dir, Server::start(&opts)?))
}

fn dataplane(among: &Server, args: &Args, wisp: &Path, app: &str) -> anyhow::Result<(f64, f64)> {
    let (_config, alone_server) = reference_server(wisp)?;
    let alone = Probe::set_up(&alone_server, app)?;
    let there = Probe::set_up(among, app)?;
    let secs = Duration::from_secs(args.dataplane_secs);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        a.push(alone.round(secs)?);
        b.push(there.round(secs)?);
    }
    alone_server.stop()?;
    Ok((median(&b), median(&a)))
}

/// One request to `--cold` of `names` (at zero), spread over them, each followed by one to
/// a service on a server holding only `--cold` services: the times until each was
/// answered, among the N and on that server. Spares the first (the restart answers it)
/// and those the route updates changed.
fn cold_starts(
    among: &Server,
    names: &[String],
    args: &Args,
    wisp: &Path,
    app: &str,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let spare = 1 + ROUTE_UPDATES;
    let pool = names.get(spare..).unwrap_or_default();
    let count = args.cold.min(pool.len());
    if count == 0 {
        bail!(
            "no service at zero left to cold-start among {}",
            names.len()
        );
    }
    let picked: Vec<&String> = (0..count).map(|i| &pool[i * pool.len() / count]).collect();

    let (_config, alone) = reference_server(wisp)?;
    let mut watch = ReadyWatch::start(alone.api())?;
    let alone_names: Vec<String> = (0..count).map(|i| format!("alone-{i:03}")).collect();
    let timeout = Duration::from_secs(args.timeout);
    create_all(&alone, &mut watch, &alone_names, app, args.threads, timeout)?;
    watch.stop();
    // Settled, as the N are: no reconcile of their creation still running.
    idle(&alone, 2)?;

    let ingress = among.ingress_addr(Duration::from_secs(10))?;
    let alone_ingress = alone.ingress_addr(Duration::from_secs(10))?;
    let once = |ingress: SocketAddr, name: &str| -> anyhow::Result<Duration> {
        let host = format!("{name}.{NAMESPACE}.{DOMAIN}");
        let r = load::get(ingress, Some(&host), Duration::from_secs(30))?;
        if r.status != 200 {
            bail!("cold start of {name}: HTTP {}", r.status);
        }
        Ok(r.took)
    };
    let (mut there, mut here) = (Vec::new(), Vec::new());
    for (name, alone_name) in picked.iter().zip(&alone_names) {
        there.push(once(ingress, name)?);
        here.push(once(alone_ingress, alone_name)?);
    }
    let stop = alone.stop()?;
    if stop.leftovers > 0 {
        bail!("{} replicas outlived the reference server", stop.leftovers);
    }
    Ok((there, here))
}

/// When each Service was first seen Ready, fed by a watch of services.
struct ReadyWatch {
    rx: mpsc::Receiver<Event>,
    ready: HashMap<String, Instant>,
    /// The resourceVersion at which each Service was first seen Ready.
    ready_rv: HashMap<String, u64>,
    watch: api::Watch,
}

impl ReadyWatch {
    fn start(api: &Api) -> anyhow::Result<ReadyWatch> {
        let (tx, rx) = mpsc::channel::<Event>();
        let rv = api.resource_version(SERVING, "services")?;
        // An informer: while 10,000 services are created the watch may fall behind the
        // store's event history (410 Expired) and re-list, as a controller's would.
        let watch = api.informer(SERVING, "services", rv, tx)?;
        Ok(ReadyWatch {
            rx,
            ready: HashMap::new(),
            ready_rv: HashMap::new(),
            watch,
        })
    }

    fn take(&mut self, e: Event) {
        if e.is_ready() {
            self.ready.entry(e.name().to_string()).or_insert(e.at);
            if let Some(rv) = resource_version(&e) {
                self.ready_rv.entry(e.name().to_string()).or_insert(rv);
            }
        }
    }

    /// Waits until every one of `names` is Ready (bounded by `deadline`).
    fn wait(&mut self, names: &[String], deadline: Instant) -> anyhow::Result<()> {
        loop {
            while let Ok(e) = self.rx.try_recv() {
                self.take(e);
            }
            let missing = names
                .iter()
                .filter(|n| !self.ready.contains_key(*n))
                .count();
            if missing == 0 {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("{missing} of {} services not Ready in time", names.len());
            }
            match self.rx.recv_timeout(left.min(Duration::from_secs(1))) {
                Ok(e) => self.take(e),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the watch ended"),
            }
        }
    }

    fn stop(self) {
        self.watch.stop(api::REWATCH * 3);
    }
}

/// wisp's CPU time (user + system) so far.
fn cpu(server: &Server) -> anyhow::Result<Duration> {
    let ticks = load::cpu_ticks(server.pid()).context("wisp's CPU time")?;
    Ok(Duration::from_secs_f64(
        ticks as f64 / load::clk_tck() as f64,
    ))
}

fn store_rv(api: &Api) -> anyhow::Result<u64> {
    api.resource_version(SERVING, "services")
}

fn resource_version(e: &Event) -> Option<u64> {
    e.object["metadata"]["resourceVersion"]
        .as_str()?
        .parse()
        .ok()
}

/// The largest burst whose writes are counted per service.
const REPLAY_UP_TO: usize = 2_000;

/// The kinds a Service makes on its way to Ready, which the per-service write count reads.
const SERVICE_KINDS: [(&str, &str); 5] = [
    (SERVING, "services"),
    (SERVING, "configurations"),
    (SERVING, "routes"),
    (SERVING, "revisions"),
    (
        "autoscaling.internal.knative.dev/v1alpha1",
        "podautoscalers",
    ),
];

/// The changes of the kinds a Service makes, from a resourceVersion on, as they happen
/// (watches started before the POSTs: a replay after the fact would fall off the store's
/// event history at 1,000 services with replicas). A thread keeps only each service's
/// resourceVersions.
struct Replay {
    watches: Vec<api::Watch>,
    seen: Arc<Mutex<Seen>>,
    consumer: std::thread::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    /// Service name → the resourceVersions of changes of its objects.
    by_service: HashMap<String, Vec<u64>>,
    /// Kind → the highest resourceVersion seen.
    latest: HashMap<&'static str, u64>,
    events: usize,
}

impl Replay {
    fn start(api: &Api, rv0: u64) -> anyhow::Result<Replay> {
        let (tx, rx) = mpsc::channel::<Event>();
        let mut watches = Vec::new();
        for (gv, plural) in SERVICE_KINDS {
            watches.push(api.watch(gv, plural, rv0, tx.clone())?);
        }
        let seen = Arc::new(Mutex::new(Seen::default()));
        let consumer = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                while let Ok(e) = rx.recv() {
                    let Some(rv) = resource_version(&e) else {
                        continue;
                    };
                    let service = if e.plural == "services" {
                        Some(e.name())
                    } else {
                        e.label(wisp_api::labels::SERVICE)
                    };
                    let mut seen = wisp_sync::lock(&seen);
                    seen.events += 1;
                    let latest = seen.latest.entry(e.plural).or_default();
                    *latest = (*latest).max(rv);
                    if let Some(svc) = service {
                        seen.by_service.entry(svc.to_owned()).or_default().push(rv);
                    }
                }
            })
        };
        Ok(Replay {
            watches,
            seen,
            consumer,
        })
    }

    /// Store writes per service until *that* service was Ready: every change of its five
    /// objects (the Service, and what carries its `serving.knative.dev/service` label) at
    /// or before the resourceVersion at which it was first seen Ready. (The whole-store
    /// count until all are Ready also holds writes of services already Ready meanwhile:
    /// their autoscalers' ticks.) None if the watches did not see every service's five
    /// creates.
    fn writes_until_each_ready(self, ready_rv: &HashMap<String, u64>) -> Option<f64> {
        let end = ready_rv.values().copied().max().unwrap_or(0);
        // Every change up to `end` was committed before the last Ready was seen, so each
        // is on its watch's stream by now: done once every kind's watch is past `end`, or
        // once the services' watch reached it and nothing more came for 300 ms (a kind
        // with no news past `end` says nothing more); at most 5 s without news.
        let (mut last, mut idle_since) = (usize::MAX, Instant::now());
        loop {
            let (events, all_past, services_there) = {
                let seen = wisp_sync::lock(&self.seen);
                let past = |k: &str| seen.latest.get(k).copied().unwrap_or(0);
                let all_past = SERVICE_KINDS.iter().all(|(_, k)| past(k) > end);
                (seen.events, all_past, past("services") >= end)
            };
            if events != last {
                (last, idle_since) = (events, Instant::now());
            }
            let idle = idle_since.elapsed();
            if all_past
                || (services_there && idle > Duration::from_millis(300))
                || idle > Duration::from_secs(5)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for w in self.watches {
            w.stop(api::REWATCH * 3);
        }
        let _ = self.consumer.join();
        let seen = wisp_sync::lock(&self.seen);
        let writes: usize = ready_rv
            .iter()
            .map(|(svc, ready)| {
                seen.by_service
                    .get(svc)
                    .map_or(0, |rvs| rvs.iter().filter(|rv| *rv <= ready).count())
            })
            .sum();
        let complete = writes >= 5 * ready_rv.len();
        eprintln!(
            "  writes per service: {} events seen, {writes} until each service was Ready{}",
            seen.events,
            if complete { "" } else { " (incomplete)" }
        );
        complete.then(|| writes as f64 / ready_rv.len().max(1) as f64)
    }
}

/// What creating N services at once gave.
struct Creation {
    n: usize,
    ready: Summary,
    all_acked: Duration,
    all_ready: Duration,
    writes_per_service: f64,
    /// Writes of each service's own objects until it was Ready (None: not measured).
    own_writes_per_service: Option<f64>,
    cpu_per_service: Duration,
    /// How often the watch of services fell behind the event history and re-listed.
    relists: usize,
}

/// Creates `names` from `threads` threads and waits until all are Ready.
fn create_all(
    server: &Server,
    watch: &mut ReadyWatch,
    names: &[String],
    app: &str,
    threads: usize,
    timeout: Duration,
) -> anyhow::Result<Creation> {
    let api = server.api();
    let rv0 = store_rv(api)?;
    // Not at 10,000: watching all five kinds through that burst would weigh on the memory
    // and CPU measured there (the issue's write figure is for 1,000).
    let replay = if names.len() <= REPLAY_UP_TO {
        Some(Replay::start(api, rv0)?)
    } else {
        None
    };
    let cpu0 = cpu(server)?;
    let threads = threads.clamp(1, names.len().max(1));
    let barrier = Barrier::new(threads);
    let sent: Mutex<Vec<(String, Instant, Instant)>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, sent, errors) = (&barrier, &sent, &errors);
            let api = api.clone();
            s.spawn(move || {
                barrier.wait();
                for name in names.iter().skip(t).step_by(threads) {
                    let at = Instant::now();
                    match api.create("services", &service(name, app)) {
                        Ok(_) => wisp_sync::lock(sent).push((name.clone(), at, Instant::now())),
                        Err(e) => wisp_sync::lock(errors).push(e),
                    }
                }
            });
        }
    });
    if let Some(e) = wisp_sync::lock(&errors).drain(..).next() {
        return Err(e);
    }
    let sent = sent.into_inner().unwrap_or_else(|e| e.into_inner());
    let first = sent.iter().map(|s| s.1).min().context("nothing created")?;
    let last_ack = sent.iter().map(|s| s.2).max().unwrap_or(first);
    watch.wait(names, Instant::now() + timeout)?;
    let cpu = cpu(server)?.saturating_sub(cpu0);
    let writes = store_rv(api)? - rv0;
    let mine: HashMap<String, u64> = names
        .iter()
        .filter_map(|n| Some((n.clone(), *watch.ready_rv.get(n)?)))
        .collect();
    let own_writes_per_service = match replay {
        Some(replay) if mine.len() == names.len() => replay.writes_until_each_ready(&mine),
        _ => None,
    };
    let latencies: Vec<Duration> = sent
        .iter()
        .map(|(n, at, _)| watch.ready[n].saturating_duration_since(*at))
        .collect();
    let last_ready = names.iter().map(|n| watch.ready[n]).max().unwrap_or(first);
    let n = names.len();
    Ok(Creation {
        n,
        ready: Summary::of(&latencies).context("no latencies")?,
        all_acked: last_ack - first,
        all_ready: last_ready - first,
        writes_per_service: writes as f64 / n as f64,
        own_writes_per_service,
        cpu_per_service: cpu / u32::try_from(n).unwrap_or(u32::MAX),
        relists: watch.watch.relists(),
    })
}

impl Creation {
    /// The per-service write count as a table cell.
    fn own_writes(&self) -> String {
        self.own_writes_per_service
            .map_or("not counted".into(), |w| format!("{w:.1}"))
    }
}

/// wisp's CPU and store writes over `secs` of idling.
struct Idle {
    cpu_share: f64,
    writes: u64,
}

fn idle(server: &Server, secs: u64) -> anyhow::Result<Idle> {
    let rv0 = store_rv(server.api())?;
    let cpu0 = cpu(server)?;
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = cpu(server)?.saturating_sub(cpu0);
    // The list that reads the resourceVersion is itself no write.
    let writes = store_rv(server.api())? - rv0;
    Ok(Idle {
        cpu_share: cpu.as_secs_f64() / start.elapsed().as_secs_f64(),
        writes,
    })
}

/// Polls until every Service is Ready and every one has its route back in the ingress:
/// its KIngress (a view the route reconciles rebuild after a restart, one per route, of
/// the same name) Ready. Returns how many services there are.
fn all_routed(api: &Api, timeout: Duration) -> anyhow::Result<usize> {
    let start = Instant::now();
    let ready = |list: &Value| -> (usize, usize) {
        let items = list["items"].as_array().map_or(&[][..], Vec::as_slice);
        (
            items.len(),
            items.iter().filter(|o| api::is_ready(o)).count(),
        )
    };
    loop {
        let services = api.get_json(&format!("/apis/{SERVING}/namespaces/{NAMESPACE}/services"))?;
        let ingresses = api.get_json(&format!(
            "/apis/networking.internal.knative.dev/v1alpha1/namespaces/{NAMESPACE}/ingresses"
        ))?;
        let ((total, services_ready), (_, routed)) = (ready(&services), ready(&ingresses));
        if total > 0 && services_ready == total && routed >= total {
            return Ok(total);
        }
        if start.elapsed() > timeout {
            bail!(
                "{timeout:?} after the restart: {services_ready} of {total} services Ready, \
                 {routed} routes in the ingress"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One list of every Service, and the same in pages of `limit`.
fn lists(api: &Api, limit: usize) -> anyhow::Result<(Duration, usize, Duration, usize)> {
    let path = format!("/apis/{SERVING}/namespaces/{NAMESPACE}/services");
    let start = Instant::now();
    let all = api.get_json(&path)?;
    let one = start.elapsed();
    let items = all["items"].as_array().map_or(0, Vec::len);
    let start = Instant::now();
    let (mut pages, mut seen, mut token) = (0, 0, String::new());
    loop {
        let mut url = format!("{path}?limit={limit}");
        if !token.is_empty() {
            url += &format!("&continue={token}");
        }
        let page = api.get_json(&url)?;
        pages += 1;
        seen += page["items"].as_array().map_or(0, Vec::len);
        token = page["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if token.is_empty() {
            break;
        }
    }
    if seen != items {
        bail!("paged list saw {seen} services, the full list {items}");
    }
    Ok((one, items, start.elapsed(), pages))
}

/// Polls `host` on the ingress (1 ms apart) until `done(status)`; the time it took.
fn until_status(
    ingress: SocketAddr,
    host: &str,
    done: impl Fn(u16) -> bool,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if let Ok(r) = load::get(ingress, Some(host), Duration::from_secs(10))
            && done(r.status)
        {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("{host} did not reach the expected answer within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Adds a tag to `svc`'s traffic (and waits until the ingress routes it), then removes it
/// and returns the time from the PATCH until the ingress answers 404 for the tag's host.
fn route_update(api: &Api, ingress: SocketAddr, svc: &str) -> anyhow::Result<Duration> {
    let tagged = json!({"spec": {"traffic": [
        {"latestRevision": true, "percent": 100},
        {"latestRevision": true, "percent": 0, "tag": "probe"},
    ]}});
    api.merge_patch(SERVING, NAMESPACE, "services", svc, &tagged)?;
    let host = format!("probe-{svc}.{NAMESPACE}.{DOMAIN}");
    // Routed: anything but "no route" (a 404). The revision is at zero, so the first
    // routed answer waits for a cold start; that is not what is timed.
    until_status(ingress, &host, |s| s != 404, Duration::from_secs(30))?;
    let untagged = json!({"spec": {"traffic": [{"latestRevision": true, "percent": 100}]}});
    let start = Instant::now();
    api.merge_patch(SERVING, NAMESPACE, "services", svc, &untagged)?;
    until_status(ingress, &host, |s| s == 404, Duration::from_secs(30))?;
    Ok(start.elapsed())
}

/// Everything measured at one size, services at zero.
struct AtZero {
    creation: Creation,
    rss_empty: u64,
    rss_idle: u64,
    idle: Idle,
    list_one: Duration,
    list_paged: Duration,
    pages: usize,
    late: Summary,
    route_update: Summary,
    restart_api: Duration,
    restart_first_answer: Duration,
    /// From the restart until every Service was Ready with its route in the ingress.
    restart_all_routed: Duration,
    services_after_restart: usize,
    replicas_before_restart: usize,
    replicas_after_restart: usize,
    /// From the restart until as many replicas ran as before it, + 1 (or 30 s more).
    replicas_back: Duration,
    /// The data-plane probe's requests per second to one service among these.
    /// The data-plane probe among the N, and alone on a server (requests per second).
    dataplane_rps: Option<(f64, f64)>,
    cold_start: Summary,
    /// The same on the reference server, alternating with those.
    cold_start_alone: Summary,
    idle_after_restart: Idle,
}

fn at_zero(args: &Args, wisp: &Path, app: &str, n: usize) -> anyhow::Result<AtZero> {
    let timeout = Duration::from_secs(args.timeout);
    let (_dir, config) = setup::config_file(setup::AT_ZERO)?;
    let mut opts = server::Options::new(wisp.to_path_buf());
    opts.config = Some(config);
    opts.start_timeout = Duration::from_secs(60);
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    std::thread::sleep(Duration::from_millis(500));
    let rss_empty = Memory::read(server.pid())?.rss;

    let mut watch = ReadyWatch::start(server.api())?;
    let names: Vec<String> = (0..n).map(|i| format!("s-{i:05}")).collect();
    eprintln!("{n} services at zero: creating");
    let creation = create_all(&server, &mut watch, &names, app, args.threads, timeout)?;
    eprintln!(
        "  all Ready after {}; idling {} s",
        ms(creation.all_ready),
        args.idle
    );
    let idle_cost = idle(&server, args.idle)?;
    let rss_idle = Memory::read(server.pid())?.rss;
    let (list_one, items, list_paged, pages) = lists(server.api(), 500)?;
    if items != n {
        bail!("the list has {items} services, expected {n}");
    }

    eprintln!("  {} more, one at a time", args.late);
    let mut late = Vec::new();
    let late_names: Vec<String> = (0..args.late).map(|i| format!("late-{i:03}")).collect();
    for name in &late_names {
        let c = create_all(
            &server,
            &mut watch,
            std::slice::from_ref(name),
            app,
            1,
            timeout,
        )?;
        late.push(c.ready.max);
    }
    watch.stop();

    // With the N (+ the late ones) in place and settled: the data plane, a route change
    // and cold starts among them, as one service among many sees them.
    let dataplane_rps = if args.dataplane_secs > 0 {
        eprintln!("  data plane, against the service alone on a server");
        Some(dataplane(&server, args, wisp, app)?)
    } else {
        None
    };
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    eprintln!("  route updates");
    let mut updates = Vec::new();
    for name in names.iter().skip(1).take(ROUTE_UPDATES) {
        updates.push(route_update(server.api(), ingress, name)?);
    }
    eprintln!(
        "  cold starts, alternating with a server of {} services",
        args.cold
    );
    let (cold, cold_alone) = cold_starts(&server, &names, args, wisp, app)?;

    // The services just woken run a replica, every other revision is at zero: after the
    // restart those and the one asked for may run replicas, no other.
    let replicas_before_restart = server.replicas().len();
    eprintln!("  restart");
    let (server, _stop, restart_api) = server.restart(&opts)?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    let start = Instant::now();
    let first_host = format!("{}.{NAMESPACE}.{DOMAIN}", names[0]);
    until_status(ingress, &first_host, |s| s == 200, Duration::from_secs(60))?;
    let restart_first_answer = start.elapsed() + restart_api;
    // Polled every 200 ms after that answer, two lists each: up to a poll late.
    let services_after_restart = all_routed(server.api(), Duration::from_secs(60))?;
    let restart_all_routed = start.elapsed() + restart_api;
    // The replicas that ran before come back as their revisions are reconciled (at
    // 10,000 services, with the resync of all of them); then 3 s more show that no other
    // revision gets one.
    let back_by = Instant::now() + Duration::from_secs(30);
    while server.replicas().len() < replicas_before_restart + 1 && Instant::now() < back_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    let replicas_back = start.elapsed() + restart_api;
    let idle_after_restart = idle(&server, 3)?;
    let replicas_after_restart = server.replicas().len();
    let stop = server.stop()?;
    if stop.leftovers > 0 {
        bail!("{} replicas outlived wisp", stop.leftovers);
    }
    Ok(AtZero {
        creation,
        rss_empty,
        rss_idle,
        idle: idle_cost,
        list_one,
        list_paged,
        pages,
        late: Summary::of(&late).context("late")?,
        route_update: Summary::of(&updates).context("route updates")?,
        restart_api,
        restart_first_answer,
        restart_all_routed,
        services_after_restart,
        replicas_before_restart,
        replicas_after_restart,
        replicas_back,
        dataplane_rps,
        cold_start: Summary::of(&cold).context("cold starts")?,
        cold_start_alone: Summary::of(&cold_alone).context("cold starts alone")?,
        idle_after_restart,
    })
}

/// Services with one replica each.
struct WithReplicas {
    creation: Creation,
    /// Under the light load.
    idle: Idle,
    /// The autoscaler's and stats path's CPU meanwhile, as a share of one core.
    autoscaler_share: f64,
    /// Light-load requests sent, and of those answered 200.
    light: (u64, u64),
    rss_idle: u64,
}

/// The CPU wisp counted for the autoscaler so far: its podautoscaler reconciles (the KPA:
/// every decision and scaling) and its stats path.
fn autoscaler_cpu(metrics: &str) -> anyhow::Result<Duration> {
    let body = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?
        .get(format!("http://{metrics}/metrics"))
        .send()?
        .error_for_status()?
        .text()?;
    let mut secs = 0.0;
    let mut found = 0;
    for line in body.lines() {
        if let Some(v) = line
            .strip_prefix("wisp_reconcile_cpu_seconds_total{reconciler=\"podautoscaler\"} ")
            .or_else(|| line.strip_prefix("wisp_autoscaler_stats_cpu_seconds_total "))
        {
            secs += v.trim().parse::<f64>()?;
            found += 1;
        }
    }
    if found != 2 {
        bail!("wisp's /metrics lacks the autoscaler's CPU counters");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Sends `rps` requests a second through the ingress, one service after the other, until
/// `stop`; returns how many it sent and how many were answered 200.
fn light_load(
    ingress: SocketAddr,
    names: Vec<String>,
    rps: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let (mut sent, mut ok) = (0, 0);
        let period = Duration::from_secs(1) / u32::try_from(rps.max(1)).unwrap_or(u32::MAX);
        let start = Instant::now();
        for name in names.iter().cycle() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let host = format!("{name}.{NAMESPACE}.{DOMAIN}");
            sent += 1;
            if load::get(ingress, Some(&host), Duration::from_secs(10))
                .is_ok_and(|r| r.status == 200)
            {
                ok += 1;
            }
            let next = start + period * u32::try_from(sent).unwrap_or(u32::MAX);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        (sent, ok)
    })
}

fn with_replicas(args: &Args, wisp: &Path, app: &str, n: usize) -> anyhow::Result<WithReplicas> {
    let mut opts = server::Options::new(wisp.to_path_buf());
    opts.start_timeout = Duration::from_secs(60);
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    std::thread::sleep(Duration::from_millis(500));
    let mut watch = ReadyWatch::start(server.api())?;
    let names: Vec<String> = (0..n).map(|i| format!("r-{i:05}")).collect();
    eprintln!("{n} services with a replica each: creating");
    let creation = create_all(
        &server,
        &mut watch,
        &names,
        app,
        args.threads,
        Duration::from_secs(args.timeout),
    )?;
    watch.stop();
    eprintln!(
        "  all Ready after {}; {} requests/s for {} s",
        ms(creation.all_ready),
        args.light_rps,
        args.idle
    );
    let metrics = server
        .listening("metrics")
        .context("wisp did not announce its metrics address")?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    let stop = Arc::new(AtomicBool::new(false));
    let load = (args.light_rps > 0)
        .then(|| light_load(ingress, names.clone(), args.light_rps, stop.clone()));
    let (autoscaler0, started) = (autoscaler_cpu(&metrics)?, Instant::now());
    let idle = idle(&server, args.idle)?;
    let autoscaler = autoscaler_cpu(&metrics)?.saturating_sub(autoscaler0);
    let autoscaler_share = autoscaler.as_secs_f64() / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let light = match load {
        Some(h) => h
            .join()
            .map_err(|_| anyhow::anyhow!("the light load panicked"))?,
        None => (0, 0),
    };
    let rss_idle = Memory::read(server.pid())?.rss;
    let stop = server.stop()?;
    if stop.leftovers > 0 {
        bail!("{} replicas outlived wisp", stop.leftovers);
    }
    Ok(WithReplicas {
        creation,
        idle,
        autoscaler_share,
        light,
        rss_idle,
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    // Before anything runs: every round at zero ends with the data-plane probe, and a run
    // without `wrk` spent its ten minutes to report nothing of them.
    if args.dataplane_secs > 0 {
        load::find_wrk()?;
    }
    let load_start = procfs::loadavg();
    // A round that fails is reported as such; the others still are.
    let mut failed = Vec::new();
    let mut zero = Vec::new();
    // A size of 0 skips the round (`--replica-sizes 0`: none with replicas).
    for &n in args.sizes.iter().filter(|n| **n > 0) {
        match at_zero(&args, &wisp, &app, n) {
            Ok(z) => zero.push((n, z)),
            Err(e) => failed.push(format!("{n} services at zero: {e:#}")),
        }
    }
    let mut replicas = Vec::new();
    for &n in args.replica_sizes.iter().filter(|n| **n > 0) {
        match with_replicas(&args, &wisp, &app, n) {
            Ok(r) => replicas.push((n, r)),
            Err(e) => failed.push(format!("{n} services with a replica: {e:#}")),
        }
    }

    let mut out = setup::results_header("Many services on one machine", &load_start);
    out += &format!(
        "- App: `{app}`; services at zero: `config-autoscaler` `initial-scale: \"0\"`; \
         created from {} client threads, each as fast as the server answers\n\n",
        args.threads
    );
    out += "![create → Ready p95, CPU per service and RSS against the number of services](scale.svg)\n\n";
    out += &zero_table(&zero, &args).render();
    out += "\n## With one replica per service\n\n";
    out += &replica_table(&replicas, &args).render();
    out += "\nWith replicas, the autoscaler's CPU is what wisp counts on its own threads for \
            it (`wisp_reconcile_cpu_seconds_total{reconciler=\"podautoscaler\"}`: the KPA's \
            decisions and scaling; `wisp_autoscaler_stats_cpu_seconds_total`: each second's \
            report of every replica queue and its split into the KPA's samples); per revision \
            and tick: that share × 2 s / N. All of wisp's CPU also holds the requests \
            themselves and each replica's readiness probe every second.\n";
    for f in &failed {
        out += &format!("\n**Round failed**: {f}\n");
    }
    if !args.no_write {
        let svg = args.out.with_extension("svg");
        std::fs::write(&svg, plot(&zero, &replicas))
            .with_context(|| format!("writing {}", svg.display()))?;
    }
    setup::write_results(&out, &args.out, args.no_write)?;
    if !failed.is_empty() {
        bail!("{} round(s) failed", failed.len());
    }
    Ok(())
}

fn pct(share: f64) -> String {
    format!("{:.2} %", share * 100.0)
}

/// A table with one column per size: each row a measure, its value at each size, a target.
struct Columns<'a, T> {
    rows: &'a [(usize, T)],
    table: Table,
}

impl<'a, T> Columns<'a, T> {
    fn new(what: &str, rows: &'a [(usize, T)]) -> Self {
        let mut header = vec![what.to_string()];
        header.extend(rows.iter().map(|(n, _)| n.to_string()));
        header.push("target (issue #21)".into());
        Columns {
            rows,
            table: Table::new(header),
        }
    }

    fn row(&mut self, what: &str, f: &dyn Fn(&T) -> String, target: &str) {
        let mut r = vec![what.to_string()];
        r.extend(self.rows.iter().map(|(_, z)| f(z)));
        r.push(target.to_string());
        self.table.row(r);
    }
}

fn zero_table(rows: &[(usize, AtZero)], args: &Args) -> Table {
    let mut cols = Columns::new("services at zero", rows);
    let mut row =
        |what: &str, f: &dyn Fn(&AtZero) -> String, target: &str| cols.row(what, f, target);
    row(
        "all POSTs answered after",
        &|z| ms(z.creation.all_acked),
        "",
    );
    row("create → Ready p50", &|z| ms(z.creation.ready.p50), "");
    row(
        "create → Ready p95",
        &|z| ms(z.creation.ready.p95),
        "≤ 1 s (1,000)",
    );
    row(
        "all Ready after",
        &|z| ms(z.creation.all_ready),
        "≤ 1.5 s (1,000)",
    );
    row(
        "re-lists of the benchmark's watch (410 Expired: it fell behind the event history)",
        &|z| z.creation.relists.to_string(),
        "",
    );
    row(
        "store writes per service until it is Ready (its five objects)",
        &|z| z.creation.own_writes(),
        "≤ 10",
    );
    row(
        "all store writes until all are Ready, per service",
        &|z| format!("{:.1}", z.creation.writes_per_service),
        "",
    );
    row(
        "wisp CPU per service until Ready",
        &|z| ms(z.creation.cpu_per_service),
        "≤ 2 ms",
    );
    row(
        &format!("RSS, idle {} s", args.idle),
        &|z| Mib(z.rss_idle).to_string(),
        "≤ 200 MiB (10,000)",
    );
    row(
        "RSS per service beyond an empty server",
        &|z| {
            let per = z.rss_idle.saturating_sub(z.rss_empty) as f64 / z.creation.n as f64;
            format!("{per:.1} KiB")
        },
        "≤ 20 KiB",
    );
    row(
        "wisp CPU while idle",
        &|z| pct(z.idle.cpu_share),
        "< 1 % of a core",
    );
    row(
        "store writes while idle",
        &|z| z.idle.writes.to_string(),
        "0",
    );
    row(
        "list all services (one request)",
        &|z| ms(z.list_one),
        "≤ 1 s (10,000)",
    );
    row(
        "list all services in pages of 500",
        &|z| format!("{} ({} pages)", ms(z.list_paged), z.pages),
        "",
    );
    row(
        &format!(
            "next {} services, one at a time: create → Ready p95",
            args.late
        ),
        &|z| ms(z.late.p95),
        "≤ 25 ms",
    );
    row(
        &format!("route traffic update → ingress, p95 ({ROUTE_UPDATES})"),
        &|z| ms(z.route_update.p95),
        "≤ 10 ms",
    );
    row(
        "restart: SIGTERM'd, new process → API answers",
        &|z| ms(z.restart_api),
        "≤ 1 s",
    );
    row(
        "restart: new process → first service answers (cold start included)",
        &|z| ms(z.restart_first_answer),
        "",
    );
    row(
        "restart: new process → every Service Ready with its route in the ingress (KIngress \
         Ready)",
        &|z| {
            format!(
                "{} ({})",
                ms(z.restart_all_routed),
                z.services_after_restart
            )
        },
        "≤ 10 s",
    );
    row(
        "restart: new process → as many replicas as ran before it, + 1 asked for",
        &|z| ms(z.replicas_back),
        "",
    );
    row(
        "replicas running 3 s after that (those running before it, + 1)",
        &|z| {
            format!(
                "{} ({} + 1)",
                z.replicas_after_restart, z.replicas_before_restart
            )
        },
        "before + 1",
    );
    row(
        "wisp CPU in those 3 s",
        &|z| pct(z.idle_after_restart.cpu_share),
        "",
    );
    row(
        &format!(
            "cold start, first request → answered, p50 ({}), against a server of only {} \
             services (requests alternating)",
            args.cold, args.cold
        ),
        &|z| format!("{} / {}", ms(z.cold_start.p50), ms(z.cold_start_alone.p50)),
        "",
    );
    row(
        "cold start p95, against that server's",
        &|z| {
            let ratio = z.cold_start.p95.as_secs_f64() / z.cold_start_alone.p95.as_secs_f64();
            format!(
                "{} / {} ({ratio:.2}×)",
                ms(z.cold_start.p95),
                ms(z.cold_start_alone.p95)
            )
        },
        "≤ 1.2×",
    );
    row(
        &format!(
            "data plane: one service among them, `wrk -t2 -c50`, median of 3 × {} s, against \
             the same alone on a server, rounds alternating",
            args.dataplane_secs
        ),
        &|z| match z.dataplane_rps {
            Some((rps, alone)) => format!("{rps:.0} / {alone:.0} req/s ({:.3}×)", rps / alone),
            None => "–".into(),
        },
        "≥ 0.97× alone",
    );
    cols.table
}

fn replica_table(rows: &[(usize, WithReplicas)], args: &Args) -> Table {
    let mut cols = Columns::new("services with a replica", rows);
    let mut row =
        |what: &str, f: &dyn Fn(&WithReplicas) -> String, target: &str| cols.row(what, f, target);
    row(
        "all POSTs answered after",
        &|z| ms(z.creation.all_acked),
        "",
    );
    row("create → Ready p50", &|z| ms(z.creation.ready.p50), "");
    row(
        "create → Ready p95",
        &|z| ms(z.creation.ready.p95),
        "≤ 2 s (1,000)",
    );
    row("all Ready after", &|z| ms(z.creation.all_ready), "");
    row(
        "store writes per service until it is Ready (its five objects)",
        &|z| z.creation.own_writes(),
        "≤ 10",
    );
    row(
        "all store writes until all are Ready, per service",
        &|z| format!("{:.1}", z.creation.writes_per_service),
        "",
    );
    row(
        "wisp CPU per service until Ready",
        &|z| ms(z.creation.cpu_per_service),
        "",
    );
    row(
        &format!(
            "light load ({} requests/s round-robin, {} s): answered 200 / sent",
            args.light_rps, args.idle
        ),
        &|z| format!("{} / {}", z.light.1, z.light.0),
        "",
    );
    row(
        "autoscaler and stats path CPU (KPA reconciles + stats)",
        &|z| pct(z.autoscaler_share),
        "≤ 10 % (1,000, light load)",
    );
    row(
        "the same per revision and 2 s tick",
        &|z| {
            let per = z.autoscaler_share * 2.0 / z.creation.n as f64;
            format!("{:.1} µs", per * 1e6)
        },
        "",
    );
    row(
        "all of wisp's CPU meanwhile",
        &|z| pct(z.idle.cpu_share),
        "",
    );
    row("store writes meanwhile", &|z| z.idle.writes.to_string(), "");
    row("wisp RSS, idle", &|z| Mib(z.rss_idle).to_string(), "");
    cols.table
}

/// Three panels against the number of services (log scale): create → Ready p95, wisp CPU
/// per service until Ready, wisp RSS idle. Services at zero in blue, with a replica in
/// orange.
fn plot(zero: &[(usize, AtZero)], replicas: &[(usize, WithReplicas)]) -> String {
    type Series = Vec<(usize, f64)>;
    let panels: [(&str, Series, Series); 3] = [
        (
            "create → Ready p95 (ms)",
            zero.iter()
                .map(|(n, z)| (*n, z.creation.ready.p95.as_secs_f64() * 1e3))
                .collect(),
            replicas
                .iter()
                .map(|(n, r)| (*n, r.creation.ready.p95.as_secs_f64() * 1e3))
                .collect(),
        ),
        (
            "wisp CPU per service until Ready (ms)",
            zero.iter()
                .map(|(n, z)| (*n, z.creation.cpu_per_service.as_secs_f64() * 1e3))
                .collect(),
            replicas
                .iter()
                .map(|(n, r)| (*n, r.creation.cpu_per_service.as_secs_f64() * 1e3))
                .collect(),
        ),
        (
            "wisp RSS, idle (MiB)",
            zero.iter()
                .map(|(n, z)| (*n, z.rss_idle as f64 / 1024.0))
                .collect(),
            replicas
                .iter()
                .map(|(n, r)| (*n, r.rss_idle as f64 / 1024.0))
                .collect(),
        ),
    ];
    let (pw, ph, left, top, gap) = (300.0, 220.0, 55.0, 40.0, 60.0);
    let w = left + 3.0 * (pw + gap);
    let h = top + ph + 70.0;
    let all_n: Vec<usize> = zero
        .iter()
        .map(|z| z.0)
        .chain(replicas.iter().map(|r| r.0))
        .collect();
    let (nmin, nmax) = (
        all_n.iter().copied().min().unwrap_or(1).max(1) as f64,
        all_n.iter().copied().max().unwrap_or(10).max(2) as f64,
    );
    let (lmin, lmax) = (
        nmin.log10().floor(),
        nmax.log10().ceil().max(nmin.log10().floor() + 1.0),
    );
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
"#
    );
    for (i, (title, z, r)) in panels.iter().enumerate() {
        let x0 = left + i as f64 * (pw + gap);
        let ymax = z
            .iter()
            .chain(r.iter())
            .map(|p| p.1)
            .fold(0.0_f64, f64::max)
            .max(1e-9)
            * 1.15;
        let px = |n: usize| x0 + ((n as f64).log10() - lmin) / (lmax - lmin) * pw;
        let py = |v: f64| top + ph - v / ymax * ph;
        s += &format!(
            r##"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{title}</text>
<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>
"##,
            x0 + pw / 2.0,
            top - 12.0
        );
        for k in 0..=4 {
            let v = ymax / 1.15 * f64::from(k) / 4.0;
            s += &format!(
                r##"<text x="{}" y="{}" text-anchor="end" fill="#555">{}</text><line x1="{x0}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/>
"##,
                x0 - 4.0,
                py(v) + 4.0,
                short(v),
                x0 + pw,
                y = py(v)
            );
        }
        let mut e = lmin;
        while e <= lmax {
            let n = 10f64.powf(e) as usize;
            s += &format!(
                r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">{n}</text>
"##,
                px(n),
                top + ph + 16.0
            );
            e += 1.0;
        }
        s += &format!(
            r##"<text x="{}" y="{}" text-anchor="middle">services</text>
"##,
            x0 + pw / 2.0,
            top + ph + 34.0
        );
        for (series, color) in [(z, "#1f77b4"), (r, "#ff7f0e")] {
            if series.is_empty() {
                continue;
            }
            let pts: Vec<String> = series
                .iter()
                .map(|(n, v)| format!("{:.1},{:.1}", px(*n), py(*v)))
                .collect();
            s += &format!(
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>
"#,
                pts.join(" ")
            );
            for (n, v) in series {
                s += &format!(
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>
"#,
                    px(*n),
                    py(*v)
                );
            }
        }
    }
    s += &format!(
        r##"<text x="{left}" y="{}" fill="#1f77b4">● services at zero</text><text x="{}" y="{}" fill="#ff7f0e">● with one replica each</text>
</svg>
"##,
        h - 10.0,
        left + 160.0,
        h - 10.0
    );
    s
}

/// A tick label: few digits.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
