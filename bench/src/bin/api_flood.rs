//! `api_flood`: does the data plane feel the API's load? (issue #23)
//!
//! Starts `wisp serve` with a `hello` Service kept at one replica, then for each level of
//! abuse (0 = idle, then 8 and 64 concurrent clients by default) runs, for `--duration`
//! seconds and at the same time:
//! - the abusers: each sends, back to back, API writes that are expensive to refuse — a
//!   YAML alias bomb, a 2 MB JSON array of a million values, JSON nested 10 000 deep, a
//!   body past the 3 MiB limit, and a Service whose 2.5 MiB annotation is only refused by
//!   admission;
//! - an open-loop load of `--rps` requests per second through the ingress (keep-alive
//!   connections): its p50/p99 against the idle row's;
//! - every 20 ms a *new* ingress connection (connect, request, answer): its worst wait;
//! - every 50 ms a `GET` of the Service from another API client: its worst time.
//!
//! wisp's peak RSS per level comes from `VmHWM`, reset before each level
//! (`/proc/<pid>/clear_refs`). The abusive clients run at nice 19: on this machine they
//! share the CPUs with wisp, where a real attacker would use its own.
//!
//! Writes `bench/results/api-flood.md` (`--out`; not with `--no-write`).

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::json;
use wisp_bench::{
    api::SERVING,
    procfs, rate,
    server::{self, Server},
    stats::{Summary, Table, ms},
};

#[derive(Debug, Parser)]
struct Args {
    /// Concurrent abusive API clients per level, comma-separated (0 = the idle baseline,
    /// always measured first).
    #[arg(long, default_value = "8,64", value_delimiter = ',')]
    abusers: Vec<usize>,
    /// Seconds per level.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Requests per second through the ingress during each level.
    #[arg(long, default_value_t = 200)]
    rps: u32,
    /// The `wisp` binary (default: beside this one).
    #[arg(long)]
    wisp: Option<PathBuf>,
    /// Where the results go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/api-flood.md"))]
    out: PathBuf,
    /// Print the results only; do not write them to `--out`.
    #[arg(long)]
    no_write: bool,
}

/// The figures issue #23 asks for.
const MAX_NEW_CONN: Duration = Duration::from_millis(50);
const MAX_P99_RATIO: f64 = 2.0;
const MAX_GET: Duration = Duration::from_millis(100);
const MAX_RSS_MIB: f64 = 256.0;

/// The abusive bodies, sent in turn: (what, content type, body).
fn abusive_bodies() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut bomb = String::from("apiVersion: serving.knative.dev/v1\nkind: Service\n");
    bomb.push_str("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{p}"); 10].join(", ")
        ));
    }
    let wide = format!("{{\"items\":[{}0]}}", "0,".repeat(999_999));
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let over = vec![b' '; 3 * 1024 * 1024 + 1];
    let huge_annotation = json!({
        "apiVersion": SERVING, "kind": "Service",
        "metadata": {"name": "huge", "annotations": {"x": "y".repeat(2_500_000)}},
        "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}},
    })
    .to_string();
    vec![
        ("YAML alias bomb", "application/yaml", bomb.into_bytes()),
        ("1M-value JSON", "application/json", wide.into_bytes()),
        (
            "JSON nested 10k deep",
            "application/json",
            deep.into_bytes(),
        ),
        ("3 MiB + 1 body", "application/json", over),
        (
            "2.5 MiB annotation",
            "application/json",
            huge_annotation.into_bytes(),
        ),
    ]
}

/// One level's measurements.
struct Level {
    abusers: usize,
    abusive_answers: usize,
    codes: std::collections::BTreeMap<u16, usize>,
    ingress: rate::Latency,
    ingress_errors: u64,
    new_conn: Summary,
    get: Summary,
    peak_rss_kib: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_start = procfs::loadavg();
    let wisp = match &args.wisp {
        Some(p) => p.clone(),
        None => wisp_bench::sibling_binary("wisp")?,
    };
    let hello = wisp_bench::sibling_binary("hello")?;
    let server = Server::start(&server::Options::new(wisp))?;
    let api = server.api().clone();
    api.create(
        "services",
        &json!({
            "apiVersion": SERVING, "kind": "Service",
            "metadata": {"name": "hello"},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {"containers": [{"command": [hello.display().to_string()]}]}}},
        }),
    )?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    let host = "hello.default.example.com";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(new_connection(ingress, host), Ok((200, _))) {
        if Instant::now() > deadline {
            bail!(
                "hello did not answer within 30 s; log:\n{}",
                server.log_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let get_url = format!(
        "{}/hello",
        api.collection_url(SERVING, "default", "services")
    );
    let token = std::fs::read_to_string(server.data_dir().join("token"))?;
    let token = token.trim().to_string();

    let mut levels = Vec::new();
    for abusers in std::iter::once(0).chain(args.abusers.iter().copied().filter(|&n| n > 0)) {
        eprintln!("level: {abusers} abusive clients for {} s", args.duration);
        std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5")
            .context("resetting wisp's peak RSS")?;
        let level = run_level(&args, abusers, &server, ingress, host, &get_url, &token)?;
        levels.push(level);
    }
    let report = report(&args, &levels, &load_start);
    wisp_bench::setup::write_results(&report, &args.out, args.no_write)?;
    let stop = server.stop()?;
    eprintln!("wisp stopped: {} in {:?}", stop.status, stop.took);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_level(
    args: &Args,
    abusers: usize,
    server: &Server,
    ingress: SocketAddr,
    host: &str,
    get_url: &str,
    token: &str,
) -> anyhow::Result<Level> {
    let duration = Duration::from_secs(args.duration);
    let stop = Arc::new(AtomicBool::new(false));
    let bodies = Arc::new(abusive_bodies());
    let post_url = get_url.trim_end_matches("/hello").to_string();
    let abuse: Vec<_> = (0..abusers)
        .map(|i| {
            let (stop, bodies, url, token) = (
                stop.clone(),
                bodies.clone(),
                post_url.clone(),
                token.to_string(),
            );
            std::thread::spawn(move || {
                // A hostile client runs on its own machine: here it shares two CPUs with
                // wisp and the probes, so it runs at the lowest priority to leave them the
                // CPU it would not take from them elsewhere.
                let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
                let http = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .expect("client");
                let mut codes = Vec::new();
                let mut n = i;
                while !stop.load(Ordering::Relaxed) {
                    let (_, ct, body) = &bodies[n % bodies.len()];
                    n += 1;
                    let code = http
                        .post(&url)
                        .bearer_auth(&token)
                        .header("content-type", *ct)
                        .body(body.clone())
                        .send()
                        .map(|r| r.status().as_u16())
                        .unwrap_or_else(|e| {
                            if std::env::var_os("API_FLOOD_DEBUG").is_some() {
                                eprintln!("abusive request failed: {e:?}");
                            }
                            0
                        });
                    codes.push(code);
                }
                codes
            })
        })
        .collect();
    // Let the abuse reach its steady state before measuring.
    if abusers > 0 {
        std::thread::sleep(Duration::from_millis(500));
    }

    // The probes: new connections and GETs, each on a thread of its own.
    let probe = |every: Duration, f: Box<dyn Fn() -> Option<Duration> + Send>| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut times = Vec::new();
            let mut failures = 0;
            while !stop.load(Ordering::Relaxed) {
                match f() {
                    Some(t) => times.push(t),
                    None => failures += 1,
                }
                std::thread::sleep(every);
            }
            (times, failures)
        })
    };
    let host_owned = host.to_string();
    let conns = probe(
        Duration::from_millis(20),
        Box::new(move || {
            let start = Instant::now();
            matches!(new_connection(ingress, &host_owned), Ok((200, _))).then(|| start.elapsed())
        }),
    );
    let (url, token_owned) = (get_url.to_string(), token.to_string());
    let getter = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let gets = probe(
        Duration::from_millis(50),
        Box::new(move || {
            let start = Instant::now();
            let r = getter.get(&url).bearer_auth(&token_owned).send().ok()?;
            (r.status() == 200).then(|| start.elapsed())
        }),
    );
    let load = rate::run(&rate::Options {
        threads: 1,
        ..rate::Options::new(
            rate::Target::new(ingress, host, "/"),
            vec![rate::Step {
                rps: args.rps,
                duration,
            }],
        )
    })?;
    stop.store(true, Ordering::Relaxed);
    let (conn_times, conn_failures) = conns.join().expect("probe thread");
    let (get_times, get_failures) = gets.join().expect("probe thread");
    let mut codes = std::collections::BTreeMap::new();
    let mut abusive_answers = 0;
    for t in abuse {
        for c in t.join().expect("abuser thread") {
            *codes.entry(c).or_insert(0) += 1;
            abusive_answers += 1;
        }
    }
    if conn_failures + get_failures > 0 {
        eprintln!("  probe failures: {conn_failures} new connections, {get_failures} GETs");
    }
    let memory = procfs::Memory::read(server.pid())?;
    Ok(Level {
        abusers,
        abusive_answers,
        codes,
        ingress: load.latency(|_| true),
        ingress_errors: load.errors(|_| true) + conn_failures as u64 + get_failures as u64,
        new_conn: Summary::of(&conn_times).context("no new-connection samples")?,
        get: Summary::of(&get_times).context("no GET samples")?,
        peak_rss_kib: memory.hwm,
    })
}

/// A fresh connection, one `GET /` with `Connection: close`, read to the end.
fn new_connection(addr: SocketAddr, host: &str) -> std::io::Result<(u16, usize)> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut out = Vec::new();
    c.read_to_end(&mut out)?;
    let code = std::str::from_utf8(&out[..out.len().min(12)])
        .ok()
        .and_then(|s| s.get(9..12))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((code, out.len()))
}

fn report(args: &Args, levels: &[Level], load_start: &str) -> String {
    let idle_p99 = levels.first().map_or(Duration::ZERO, |l| l.ingress.p99);
    let mut t = Table::new([
        "abusive clients",
        "abusive answers (codes)",
        "ingress p50 / p99 (× idle p99)",
        "new connection p99 / worst",
        "GET p99 / worst",
        "wisp peak RSS",
        "errors",
    ]);
    let mut verdicts = Vec::new();
    for l in levels {
        let ratio = l.ingress.p99.as_secs_f64() / idle_p99.as_secs_f64().max(1e-9);
        let rss_mib = l.peak_rss_kib as f64 / 1024.0;
        let codes: Vec<String> = l.codes.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        t.row([
            l.abusers.to_string(),
            format!("{} ({})", l.abusive_answers, codes.join(", ")),
            format!(
                "{} / {} ({ratio:.2}×)",
                ms(l.ingress.p50),
                ms(l.ingress.p99)
            ),
            format!("{} / {}", ms(l.new_conn.p99), ms(l.new_conn.max)),
            format!("{} / {}", ms(l.get.p99), ms(l.get.max)),
            format!("{rss_mib:.1} MiB"),
            l.ingress_errors.to_string(),
        ]);
        if l.abusers > 0 {
            let ok = |b: bool| if b { "met" } else { "MISSED" };
            verdicts.push(format!(
                "- {} clients: new connection worst {} ≤ {} {}; ingress p99 {ratio:.2}× idle ≤ {MAX_P99_RATIO}× {}; GET worst {} ≤ {} {}; peak RSS {rss_mib:.1} MiB ≤ {MAX_RSS_MIB} MiB {}; no 5xx or failed abusive request: {}",
                l.abusers,
                ms(l.new_conn.max),
                ms(MAX_NEW_CONN),
                ok(l.new_conn.max <= MAX_NEW_CONN),
                ok(ratio <= MAX_P99_RATIO),
                ms(l.get.max),
                ms(MAX_GET),
                ok(l.get.max <= MAX_GET),
                ok(rss_mib <= MAX_RSS_MIB),
                ok(l.codes.keys().all(|c| (400..500).contains(c))),
            ));
        }
    }
    format!(
        "{}\n{} s per level, {} req/s through the ingress; the abusive clients run at nice 19.\n\n{}\n{}\n",
        wisp_bench::setup::results_header("api_flood: the data plane under API abuse", load_start),
        args.duration,
        args.rps,
        t.render(),
        verdicts.join("\n"),
    )
}
