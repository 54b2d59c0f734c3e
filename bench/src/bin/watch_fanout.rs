//! Watches under a stream of changes (issue #21, "watches of all services by 10 clients
//! keep up with 1,000 changes per second").
//!
//! On a fresh `wisp serve` with `--services` Services at zero, `--watchers` clients each
//! watch all Services (`?watch=true` from the same resourceVersion, as informers do) while
//! `--writers` client threads change those Services as fast as the server takes it for
//! `--secs` seconds: each change a JSON merge patch of one annotation. Every patch's
//! answer carries the resourceVersion it made and is stamped when it arrives; every
//! watcher stamps each event as its line arrives. Reported: the changes per second the
//! server took, whether every watcher got every change, and the delay from a change's
//! answer to its event at each watcher (p50/p95/max over all changes and watchers), with
//! wisp's CPU meanwhile. The clients run on the same machine as wisp.
//!
//! Knative copies a Service's annotations to its Configuration and Route, so each change
//! is three store writes; the watchers see the Service's.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Barrier, Mutex, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use wisp_bench::{
    api::{Event, SERVING},
    load, procfs,
    server::{self, Server},
    setup,
    stats::{Summary, Table, ms},
};

const NAMESPACE: &str = "default";

#[derive(Debug, Parser)]
#[command(about = "Watchers of all Services while the Services change as fast as wisp takes it")]
struct Args {
    /// Services (at zero) the changes go round.
    #[arg(long, default_value_t = 100)]
    services: usize,
    /// Clients watching all Services.
    #[arg(long, default_value_t = 10)]
    watchers: usize,
    /// Client threads sending changes, each as fast as the server answers.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Seconds of changes.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Seconds the watchers may take after the last change to have seen it.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// The `wisp` binary (default: next to this benchmark).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// The app every service runs (default: `hello` next to this benchmark).
    #[arg(long)]
    app: Option<PathBuf>,
    /// Where to write the Markdown results.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/watch-fanout.md"))]
    out: PathBuf,
    /// Print the results only; write nothing.
    #[arg(long)]
    no_write: bool,
}

fn service(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{"command": [app]}]}}},
    })
}

fn resource_version(object: &Value) -> Option<u64> {
    object["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// What one watcher saw: the arrival of each Service event, by resourceVersion.
struct Seen {
    at: HashMap<u64, Instant>,
    newest: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.watchers == 0 || args.writers == 0 || args.services == 0 {
        bail!("--watchers, --writers and --services must be at least 1");
    }
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let load_start = procfs::loadavg();
    let (_dir, config) = setup::config_file(setup::AT_ZERO)?;
    let mut opts = server::Options::new(wisp.clone());
    opts.config = Some(config);
    let server = Server::start(&opts)?;
    setup::announce(&server, None);
    let api = server.api().clone();

    eprintln!("creating {} services", args.services);
    let names: Vec<String> = (0..args.services).map(|i| format!("w-{i:04}")).collect();
    for name in &names {
        api.create("services", &service(name, &app))?;
    }
    // Settled: the controllers' writes for the new services are done.
    let mut last = api.resource_version(SERVING, "services")?;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = api.resource_version(SERVING, "services")?;
        if now == last {
            break;
        }
        last = now;
    }

    eprintln!("{} watchers", args.watchers);
    let from = api.resource_version(SERVING, "services")?;
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let (tx, rx) = mpsc::channel::<Event>();
        let watch = api.watch(SERVING, "services", from, tx)?;
        let seen = std::sync::Arc::new(Mutex::new(Seen {
            at: HashMap::new(),
            newest: 0,
        }));
        let collector = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                for e in rx {
                    if let Some(rv) = resource_version(&e.object) {
                        let mut s = wisp_sync::lock(&seen);
                        s.at.insert(rv, e.at);
                        s.newest = s.newest.max(rv);
                    }
                }
            })
        };
        watchers.push((watch, seen, collector));
    }
    std::thread::sleep(Duration::from_millis(500));

    eprintln!("{} writers for {} s", args.writers, args.secs);
    let cpu0 = load::cpu_ticks(server.pid());
    let rv0 = api.resource_version(SERVING, "services")?;
    let start = Instant::now();
    let end = start + Duration::from_secs(args.secs);
    let barrier = Barrier::new(args.writers);
    let acks: Mutex<Vec<(u64, Instant)>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<anyhow::Error>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..args.writers {
            let (barrier, acks, errors, names, api) = (&barrier, &acks, &errors, &names, &api);
            s.spawn(move || {
                barrier.wait();
                let mut n = 0u64;
                while Instant::now() < end {
                    let name = &names[(t + n as usize * args.writers) % names.len()];
                    let patch = json!({"metadata": {"annotations": {
                        "bench.wisp.dev/change": format!("{t}-{n}"),
                    }}});
                    match api.merge_patch(SERVING, NAMESPACE, "services", name, &patch) {
                        Ok(obj) => match resource_version(&obj) {
                            Some(rv) => wisp_sync::lock(acks).push((rv, Instant::now())),
                            None => {
                                wisp_sync::lock(errors).push(anyhow::anyhow!("no resourceVersion"))
                            }
                        },
                        Err(e) => wisp_sync::lock(errors).push(e),
                    }
                    n += 1;
                }
            });
        }
    });
    let took = start.elapsed();
    let writes = api.resource_version(SERVING, "services")? - rv0;
    // wisp's share of a core over the changes.
    let cpu = cpu0
        .zip(load::cpu_ticks(server.pid()))
        .map(|(a, b)| b.saturating_sub(a) as f64 / load::clk_tck() as f64 / took.as_secs_f64());
    if let Some(e) = wisp_sync::lock(&errors).drain(..).next() {
        return Err(e).context("a change failed");
    }
    let acks = acks.into_inner().unwrap_or_else(|e| e.into_inner());
    let newest = acks.iter().map(|a| a.0).max().context("no change made")?;

    eprintln!("waiting for the watchers");
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    while watchers
        .iter()
        .any(|(_, seen, _)| wisp_sync::lock(seen).newest < newest)
    {
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut delays = Vec::new();
    let mut missed = 0usize;
    for (_, seen, _) in &watchers {
        let seen = wisp_sync::lock(seen);
        for (rv, ack) in &acks {
            match seen.at.get(rv) {
                Some(at) => delays.push(at.saturating_duration_since(*ack)),
                None => missed += 1,
            }
        }
    }
    for (watch, _, collector) in watchers {
        watch.stop(Duration::from_secs(5));
        let _ = collector.join();
    }
    server.stop()?;
    let delay = Summary::of(&delays).context("no event seen")?;
    let rate = acks.len() as f64 / took.as_secs_f64();

    let mut out = setup::results_header("Watches under a stream of changes", &load_start);
    out += &format!(
        "- {} Services at zero, {} watchers of all Services, {} writers for {} s\n\n",
        args.services, args.watchers, args.writers, args.secs
    );
    let mut t = Table::new(["measure", "value", "target (issue #21)"]);
    t.row([
        "changes to Services the server took (merge patches answered)".to_string(),
        format!("{} in {:.1} s: {rate:.0}/s", acks.len(), took.as_secs_f64()),
        "1,000/s".into(),
    ]);
    t.row([
        "store writes meanwhile (a change is also copied to its Configuration and Route)"
            .to_string(),
        format!("{writes} ({:.0}/s)", writes as f64 / took.as_secs_f64()),
        String::new(),
    ]);
    t.row([
        format!("changes seen by each of the {} watchers", args.watchers),
        format!(
            "{} of {} (missed in all: {missed})",
            delays.len() / args.watchers.max(1),
            acks.len()
        ),
        "all".into(),
    ]);
    t.row([
        "change answered → event at a watcher, p50 / p95 / max".to_string(),
        format!("{} / {} / {}", ms(delay.p50), ms(delay.p95), ms(delay.max)),
        "keeps up".into(),
    ]);
    t.row([
        "wisp CPU meanwhile".to_string(),
        cpu.map_or("–".into(), |c| format!("{:.0} % of a core", c * 100.0)),
        String::new(),
    ]);
    out += &t.render();
    setup::write_results(&out, &args.out, args.no_write)?;
    if missed > 0 {
        bail!("{missed} change events were not seen by a watcher");
    }
    Ok(())
}
