//! What TLS costs on wisp's data plane (issue #19), measured in one run against the same
//! `hello` sample:
//!
//! 1. **wisp, plain HTTP**: the ingress (`--http-addr`) and queue, as in `observe_cost`;
//! 2. **wisp, HTTPS**: the same `wisp serve` (so the same Service and replica) through its
//!    HTTPS ingress (`--https-addr`), with `config-network` `external-domain-tls: Enabled`,
//!    so the host's certificate comes from wisp's own CA;
//! 3. **nginx, TLS**: nginx terminating TLS (TLS 1.2/1.3, an ECDSA P-256 certificate for
//!    the same host, like wisp's) in front of the app started directly
//!    ([`wisp_bench::reference`]); left out with a note when nginx is not installed;
//! 4. **direct**: the app started directly, plain HTTP (the ceiling).
//!
//! Every target gets the same `wrk` run (keep-alive HTTP/1.1, `Host: probe.default.example.com`),
//! `--reps` rounds, the order rotating each round; per run: requests/s, the proxy's CPU per
//! request (wisp's own process, its threads; nginx's master and workers; the app's CPU is
//! not counted), p50/p99.
//!
//! **SNI.** wisp's HTTPS ingress picks the certificate by SNI and refuses a handshake
//! without one it knows, and `wrk` sends the URL's host as SNI, so the URL must name
//! `probe.default.example.com`, which does not resolve. Each `wrk` therefore runs in a
//! private mount namespace of its own (`unshare --mount`, needs root or unprivileged user
//! namespaces) with a `/etc/hosts` bind-mounted over the system's that maps that host to
//! 127.0.0.1; nothing outside that process sees it. Before the measured runs the bench
//! checks that wisp's HTTPS listener serves the host's certificate from wisp's CA
//! (a rustls client trusting only `ca.crt`) and that a handshake with another SNI is
//! refused, so the HTTPS row is TLS end to end.
//!
//! Needs `wrk` and `unshare` (util-linux); nginx is optional (`apt-get install -y nginx-light`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::json;
use wisp_bench::{
    api::SERVING,
    load::{self, DirectApp, WrkRun},
    procfs,
    reference::ReferenceProxy,
    server::{self, Server},
    setup,
    stats::{Table, median},
};

const NAMESPACE: &str = "default";
const HOST: &str = "probe.default.example.com";

#[derive(Debug, Parser)]
#[command(about = "TLS on wisp's data plane: wisp HTTPS vs plain HTTP vs nginx terminating TLS")]
struct Args {
    /// Seconds of each measured wrk run.
    #[arg(long, default_value_t = 8)]
    duration: u64,
    /// Rounds over the targets.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// wrk connections and threads.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// nginx (default: `nginx` on the PATH; its row is left out if there is none).
    #[arg(long)]
    nginx: Option<PathBuf>,
    /// Leave the direct app's row out.
    #[arg(long)]
    no_direct: bool,
    /// Seconds any one wait may take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    #[arg(long)]
    wisp: Option<PathBuf>,
    #[arg(long)]
    app: Option<PathBuf>,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/https.md"))]
    out: PathBuf,
    #[arg(long)]
    no_write: bool,
}

/// One target of the wrk runs.
struct Target {
    label: &'static str,
    url: String,
    /// The processes whose CPU is the proxy's (none for the direct app).
    pids: Vec<u32>,
    rps: Vec<f64>,
    /// Proxy CPU microseconds per request, per run.
    cpu: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

impl Target {
    fn new(label: &'static str, url: String, pids: Vec<u32>) -> Target {
        Target {
            label,
            url,
            pids,
            rps: Vec::new(),
            cpu: Vec::new(),
            p50: Vec::new(),
            p99: Vec::new(),
        }
    }
}

/// Writes `wrk` as a script that runs the real `wrk` in a mount namespace of its own with
/// `hosts` over `/etc/hosts` (see the module docs: `wrk` sends the URL's host as SNI).
/// `unshare` without `--fork` and both `exec`s keep one process, so killing the script's
/// pid (a `wrk` run that overstays) kills `wrk`.
fn wrk_with_hosts(dir: &Path, wrk: &Path) -> anyhow::Result<PathBuf> {
    let unshare = load::find_on_path("unshare")
        .context("unshare (util-linux) not found on PATH; it gives wrk its own /etc/hosts")?;
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n127.0.0.1 {HOST}\n"))?;
    let script = dir.join("wrk");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {} --mount --propagation private sh -c 'mount --bind \"$0\" /etc/hosts && exec \"$@\"' {} {} \"$@\"\n",
            unshare.display(),
            hosts.display(),
            wrk.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    // It works here (root, or user namespaces allowed), or the bench says why not.
    let out = std::process::Command::new(&script)
        .arg("--version")
        .output()
        .context("running wrk in its own mount namespace")?;
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    if !text.contains("wrk") || text.contains("unshare:") || text.contains("mount:") {
        bail!("wrk cannot run with its own /etc/hosts (unshare --mount needs root): {text}");
    }
    Ok(script)
}

/// A blocking rustls client that trusts only `ca_pem` and sends `host` to `addr`.
fn tls_client(
    ca_pem: &[u8],
    host: &str,
    addr: SocketAddr,
) -> anyhow::Result<reqwest::blocking::Client> {
    wisp_bench::install_crypto_provider();
    Ok(reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem)?)
        .resolve(host, addr)
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// wisp's HTTPS ingress really terminates TLS for `HOST` with a certificate from wisp's CA,
/// and refuses a handshake naming a host it has no certificate for.
fn check_wisp_tls(server: &Server, https: SocketAddr, timeout: Duration) -> anyhow::Result<String> {
    let ca = std::fs::read(server.data_dir().join("ca.crt")).context("reading wisp's ca.crt")?;
    let client = tls_client(&ca, HOST, https)?;
    let url = format!("https://{HOST}:{}/", https.port());
    let start = Instant::now();
    let body = loop {
        match client.get(&url).send() {
            Ok(r) if r.status().as_u16() == 200 => break r.text()?,
            other if start.elapsed() > timeout => {
                bail!("{url} (trusting wisp's CA) does not answer 200 after {timeout:?}: {other:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let other = "nosuch.default.example.com";
    let c = tls_client(&ca, other, https)?;
    if c.get(format!("https://{other}:{}/", https.port()))
        .send()
        .is_ok()
    {
        bail!("wisp's HTTPS ingress completed a handshake for {other}, which has no certificate");
    }
    Ok(body.trim().to_string())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_start = procfs::loadavg();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let timeout = Duration::from_secs(args.timeout);
    let real_wrk = load::find_wrk()?;
    let scratch = tempfile::tempdir()?;
    let wrk = wrk_with_hosts(scratch.path(), &real_wrk)?;

    // 1 + 2: one wisp serve, both ingress listeners, every external host on wisp's CA.
    let cfg = scratch.path().join("config.yaml");
    std::fs::write(&cfg, "config-network:\n  external-domain-tls: Enabled\n")?;
    let mut opts = server::Options::new(wisp.clone());
    opts.config = Some(cfg);
    opts.extra_args = vec!["--https-addr".into(), "127.0.0.1:0".into()];
    let server = Server::start(&opts)?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    let https = server.https_ingress_addr(Duration::from_secs(10))?;
    setup::announce(&server, Some(ingress));
    eprintln!("wisp HTTPS ingress {https}");
    server.api().create(
        "services",
        &json!({
            "apiVersion": SERVING,
            "kind": "Service",
            "metadata": {"name": "probe", "namespace": NAMESPACE},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                "spec": {"containerConcurrency": 0, "containers": [setup::container(&app)]},
            }},
        }),
    )?;
    let start = Instant::now();
    loop {
        if let Ok(r) = load::get(ingress, Some(HOST), Duration::from_secs(5))
            && r.status == 200
        {
            break;
        }
        if start.elapsed() > timeout {
            bail!("probe does not answer 200 on the plain ingress after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = check_wisp_tls(&server, https, timeout)?;
    eprintln!("wisp HTTPS: {body:?} with a certificate from wisp's CA; another SNI refused");

    // 3 + 4: the app directly, nginx terminating TLS in front of it.
    let direct = DirectApp::start(Path::new(&app), Duration::from_secs(10))?;
    let nginx_path = args.nginx.clone().or_else(|| load::find_on_path("nginx"));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nginx = match &nginx_path {
        Some(p) => {
            let ck = rcgen::generate_simple_self_signed(vec![HOST.to_string()])?;
            let n = ReferenceProxy::nginx_tls(
                p,
                direct.addr,
                workers,
                HOST,
                &ck.cert.pem(),
                &ck.signing_key.serialize_pem(),
                Duration::from_secs(10),
            )?;
            // Its certificate is the one served for the host.
            let c = tls_client(ck.cert.pem().as_bytes(), HOST, n.addr)?;
            let r = c.get(format!("https://{HOST}:{}/", n.addr.port())).send()?;
            if r.status().as_u16() != 200 {
                bail!("nginx over TLS answered {}", r.status());
            }
            eprintln!(
                "nginx pid {} on {} ({workers} workers, TLS)",
                n.pid(),
                n.addr
            );
            Some(n)
        }
        None => {
            eprintln!(
                "nginx: not found on the PATH, its row is left out (apt-get install -y nginx-light)"
            );
            None
        }
    };

    let mut targets = vec![
        Target::new(
            "wisp, plain HTTP",
            format!("http://{ingress}/"),
            vec![server.pid()],
        ),
        Target::new(
            "wisp, HTTPS",
            format!("https://{HOST}:{}/", https.port()),
            vec![server.pid()],
        ),
    ];
    if let Some(n) = &nginx {
        targets.push(Target::new(
            "nginx, TLS → app",
            format!("https://{HOST}:{}/", n.addr.port()),
            n.pids(),
        ));
    }
    if !args.no_direct {
        targets.push(Target::new(
            "app directly, plain HTTP",
            format!("http://{}/", direct.addr),
            Vec::new(),
        ));
    }
    let run = |t: &Target, secs: u64| {
        WrkRun {
            threads: args.threads,
            connections: args.connections,
            duration: Duration::from_secs(secs),
            host: Some(HOST.to_string()),
            url: t.url.clone(),
        }
        .run(&wrk)
    };
    for t in &targets {
        let r = run(t, 2)?; // warm-up (and every target answers through wrk)
        if r.requests == 0 || r.non_2xx + r.socket_errors > r.requests / 100 {
            bail!("warm-up of {} ({}): {}", t.label, t.url, r.raw);
        }
    }
    let suite = |addr: Option<SocketAddr>| {
        addr.and_then(negotiated)
            .map_or("not seen (no openssl?)".to_string(), |s| format!("`{s}`"))
    };
    let wisp_suite = suite(Some(https));
    let nginx_suite = suite(nginx.as_ref().map(|n| n.addr));
    let load_before = procfs::loadavg();
    let mut runs = Table::new([
        "round",
        "target",
        "requests/s",
        "proxy CPU per request",
        "p50",
        "p99",
        "errors",
    ]);
    for rep in 0..args.reps {
        for i in 0..targets.len() {
            let k = (i + rep) % targets.len();
            let t = &targets[k];
            let before = load::cpu_ticks_of(&t.pids);
            let r = run(t, args.duration)?;
            let cpu = load::micros_per_request(before, load::cpu_ticks_of(&t.pids), r.requests);
            let (p50, p99) = (r.p50.as_secs_f64() * 1e3, r.p99.as_secs_f64() * 1e3);
            runs.row([
                (rep + 1).to_string(),
                t.label.to_string(),
                format!("{:.0}", r.rps),
                cpu.map_or("—".into(), |c| format!("{c:.1} µs")),
                format!("{p50:.3} ms"),
                format!("{p99:.3} ms"),
                (r.non_2xx + r.socket_errors).to_string(),
            ]);
            eprintln!("round {} {}: {:.0} req/s", rep + 1, t.label, r.rps);
            let t = &mut targets[k];
            t.rps.push(r.rps);
            t.cpu.extend(cpu);
            t.p50.push(p50);
            t.p99.push(p99);
        }
    }
    let load_after = procfs::loadavg();

    let mut summary = Table::new([
        "target",
        "median requests/s",
        "median proxy CPU per request",
        "median p50",
        "median p99",
    ]);
    for t in &targets {
        summary.row([
            t.label.to_string(),
            format!("{:.0}", median(&t.rps)),
            if t.cpu.is_empty() {
                "—".into()
            } else {
                format!("{:.1} µs", median(&t.cpu))
            },
            format!("{:.3} ms", median(&t.p50)),
            format!("{:.3} ms", median(&t.p99)),
        ]);
    }
    let (plain, tls) = (&targets[0], &targets[1]);
    let mut ratios = format!(
        "- wisp HTTPS vs wisp plain HTTP: {:.2}× the throughput, {:.2}× the CPU per request\n",
        median(&tls.rps) / median(&plain.rps),
        median(&tls.cpu) / median(&plain.cpu),
    );
    match targets.iter().find(|t| t.label.starts_with("nginx")) {
        Some(n) => {
            ratios += &format!(
                "- wisp HTTPS vs nginx TLS: {:.2}× the throughput, {:.2}× the CPU per request\n",
                median(&tls.rps) / median(&n.rps),
                median(&tls.cpu) / median(&n.cpu),
            )
        }
        None => {
            ratios += "- nginx TLS: not measured (nginx not found on the PATH; `apt-get install -y nginx-light`)\n"
        }
    }
    let wrk_line = WrkRun {
        threads: args.threads,
        connections: args.connections,
        duration: Duration::from_secs(args.duration),
        host: Some(HOST.to_string()),
        url: "<target>".into(),
    }
    .command_line();
    let report = format!(
        "{}\n## HTTPS data plane (issue #19)\n\n`{wrk_line}` against the `hello` sample, {} rounds, the order rotating each round; \
         each target warmed up with a 2 s run first. Load average before the measured runs: {load_before}; after: {load_after}.\n\n\
         - **wisp, plain HTTP**: wisp's ingress (`--http-addr`) and queue, keep-alive HTTP/1.1.\n\
         - **wisp, HTTPS**: the same `wisp serve` through `--https-addr`, `external-domain-tls: Enabled` (the host's certificate from \
         wisp's CA, ECDSA P-256); checked before the runs: a rustls client trusting only `ca.crt` got {body:?} with SNI `{HOST}`, and a \
         handshake with SNI `nosuch.default.example.com` was refused.\n\
         - **nginx, TLS → app**: {} ({workers} workers, TLS 1.2/1.3, an ECDSA P-256 certificate for `{HOST}`, keep-alive to the app, \
         `Host`/`X-Forwarded-For`/`X-Forwarded-Proto` set, no access log) in front of the app started directly.\n\
         - **app directly**: the same binary on its own port, plain HTTP (the ceiling).\n\n\
         wrk sends the URL's host as SNI, so each wrk runs in a private mount namespace with its own `/etc/hosts` mapping `{HOST}` to \
         127.0.0.1. Negotiated by an OpenSSL client with its default preferences (as wrk's): wisp {wisp_suite}, nginx {nginx_suite}. Proxy CPU per request: \
         utime+stime of wisp's process (its threads, not the replica's) or of nginx's master and workers, over the run, divided by the \
         requests.\n\n### Summary (medians over the rounds)\n\n{}\n{ratios}\n### Every run\n\n{}",
        setup::results_header(
            "What TLS costs on wisp's data plane (issue #19)",
            &load_start
        ),
        args.reps,
        nginx_path
            .as_ref()
            .map_or("(absent)".to_string(), |p| nginx_version(p)),
        summary.render(),
        runs.render(),
    );
    if let Some(n) = nginx {
        n.stop(Duration::from_secs(10))?;
    }
    direct.stop(Duration::from_secs(10))?;
    server.stop()?;
    setup::write_results(&report, &args.out, args.no_write)
}

/// The protocol and cipher suite an OpenSSL client (wrk's library, with its default
/// preferences) negotiates with `addr` for `HOST`, from `openssl s_client`; `None` without
/// `openssl` or a handshake.
fn negotiated(addr: SocketAddr) -> Option<String> {
    let openssl = load::find_on_path("openssl")?;
    let out = std::process::Command::new(openssl)
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            HOST,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    // `New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384`
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("New, "))
        .map(|l| l.replace(", Cipher is ", " "))
}

/// `nginx -v`'s version, e.g. `nginx/1.22.1`.
fn nginx_version(nginx: &Path) -> String {
    std::process::Command::new(nginx)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stderr)
                .split_whitespace()
                .find(|w| w.starts_with("nginx/"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "nginx".into())
}
