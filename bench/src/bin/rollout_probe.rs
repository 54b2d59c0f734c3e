//! Gradual rollout under steady load (issue #19), after Knative's rollout probe
//! (`test/performance/benchmarks/rollout-probe`), scaled to one machine.
//!
//! 1. starts a fresh `wisp serve` and a Service `roll` on the `hello` sample (`TARGET=v1`,
//!    so every answer names its revision: `Hello v1!`) with `min-scale` replicas and
//!    `serving.knative.dev/rollout-duration: <--duration>s`, and waits until it answers and
//!    its Route is Ready at 100% on `roll-00001`;
//! 2. starts `--clients` closed-loop clients through the ingress (`Host:` header,
//!    keep-alive), each request stamped with its start time and attributed to a revision by
//!    its body; every non-200, connection error, timeout (`--request-timeout`) or unknown
//!    body is a failure;
//! 3. after `--warmup` seconds, patches the template to `TARGET=v2` (revision 2) and
//!    watches the Route (a timestamped watch): every change of `status.traffic` is a
//!    published step;
//! 4. keeps the load until the Route publishes 100% on `roll-00002`, plus `--tail`
//!    seconds.
//!
//! Reported: requests sent and failed (target 0); per published step the share answered by
//! revision 2 among the requests started while that split was in force, less `--skip-ms`
//! at both ends of the step (the data plane swaps the split just before the status is
//! written, and the status reaches the watch a little later) against the published
//! percent (target ±2 points), with the binomial 95% half-width (the ingress picks a
//! revision at random by weight, so a step of n requests at p% is only known to about
//! ±1.96·√(p(1−p)/n)); the time from the first intermediate split to 100% against the
//! duration.

use std::{
    fmt::Write as _,
    net::SocketAddr,
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
    api::{Event, SERVING},
    procfs,
    server::{self, Server},
    setup,
    stats::Table,
};

const NAMESPACE: &str = "default";
const NAME: &str = "roll";
const HOST: &str = "roll.default.example.com";
const OLD: &str = "roll-00001";
const NEW: &str = "roll-00002";
/// The targets: no request lost, the split within this many points of the
/// published percent.
const TARGET_DIFF: f64 = 2.0;

#[derive(Debug, Parser)]
#[command(about = "Requests lost and the traffic split during a gradual rollout under load")]
struct Args {
    /// `serving.knative.dev/rollout-duration`, in seconds.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Closed-loop clients (each sends its next request when the last one ended).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// `autoscaling.knative.dev/min-scale` of the Service (so each revision keeps replicas).
    #[arg(long, default_value_t = 1)]
    min_scale: u32,
    /// Seconds of load on revision 1 before the update.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Seconds of load after the Route published 100% on revision 2.
    #[arg(long, default_value_t = 3)]
    tail: u64,
    /// Milliseconds left out at each end of a step for propagation.
    #[arg(long, default_value_t = 200)]
    skip_ms: u64,
    /// A request taking longer than this many seconds is a failure.
    #[arg(long, default_value_t = 10)]
    request_timeout: u64,
    /// Seconds any wait for readiness may take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    #[arg(long)]
    wisp: Option<PathBuf>,
    #[arg(long)]
    app: Option<PathBuf>,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/rollout.md"))]
    out: PathBuf,
    #[arg(long)]
    no_write: bool,
}

fn service(app: &str, target: &str, args: &Args) -> Value {
    let mut container = setup::container(app);
    container["env"] = json!([{"name": "TARGET", "value": target}]);
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "annotations": {
                "serving.knative.dev/rollout-duration": format!("{}s", args.duration),
            },
        },
        "spec": {"template": {
            "metadata": {"annotations": {
                "autoscaling.knative.dev/min-scale": args.min_scale.to_string(),
            }},
            "spec": {"containers": [container]},
        }},
    })
}

fn client(timeout: Duration) -> anyhow::Result<reqwest::blocking::Client> {
    wisp_bench::install_crypto_provider();
    Ok(reqwest::blocking::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(4)
        .build()?)
}

/// The Route's `status.traffic` as (revision, percent), in order.
fn traffic(route: &Value) -> Vec<(String, i64)> {
    route["status"]["traffic"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    (
                        t["revisionName"].as_str().unwrap_or("").to_string(),
                        t["percent"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn percent_of(traffic: &[(String, i64)], rev: &str) -> i64 {
    traffic
        .iter()
        .filter(|(r, _)| r == rev)
        .map(|(_, p)| p)
        .sum()
}

fn is_ready(route: &Value) -> bool {
    route["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// What one request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Old,
    New,
    Failed,
}

/// Sends `GET /` with `Host: HOST` and classifies the answer; a failure's reason goes to
/// `failures`.
fn request(c: &reqwest::blocking::Client, url: &str, failures: &Mutex<Vec<String>>) -> Answer {
    let fail = |why: String| {
        failures.lock().unwrap_or_else(|e| e.into_inner()).push(why);
        Answer::Failed
    };
    match c.get(url).header("host", HOST).send() {
        Ok(r) if r.status() == 200 => match r.text() {
            Ok(body) => match body.trim() {
                "Hello v1!" => Answer::Old,
                "Hello v2!" => Answer::New,
                other => fail(format!("body {other:?}")),
            },
            Err(e) => fail(format!("reading the body: {e}")),
        },
        Ok(r) => fail(format!("status {}", r.status())),
        Err(e) => fail(if e.is_timeout() {
            format!("timeout: {e}")
        } else {
            format!("{e}")
        }),
    }
}

/// Waits until the Service answers `body` through the ingress and its Route is Ready with
/// all traffic on `rev`.
fn wait_serving(
    server: &Server,
    ingress: SocketAddr,
    body: &str,
    rev: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let c = client(Duration::from_secs(5))?;
    let url = format!("http://{ingress}/");
    let start = Instant::now();
    let path = format!("/apis/{SERVING}/namespaces/{NAMESPACE}/routes/{NAME}");
    loop {
        let answers = c
            .get(&url)
            .header("host", HOST)
            .send()
            .ok()
            .filter(|r| r.status() == 200)
            .and_then(|r| r.text().ok())
            .is_some_and(|t| t.trim() == body);
        let routed = server
            .api()
            .get_json(&path)
            .ok()
            .is_some_and(|r| is_ready(&r) && traffic(&r) == [(rev.to_string(), 100)]);
        if answers && routed {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("{NAME} not answering {body:?} with its Route Ready on {rev} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One published split: when the watch saw it (since the load started) and the percent on
/// revision 2.
#[derive(Debug, Clone)]
struct Published {
    at: Duration,
    new_percent: i64,
    split: String,
}

/// The time from the 1% split to 100% that Knative's `computeProperties`
/// (`pkg/reconciler/route/traffic/rollout.go`) gives a rollout of `duration_secs` whose
/// first 1% moved within a second: the remaining 99% over `duration − 1` s in steps of at
/// least 1 s, the step size rounded to the nearest percent, the step duration not stretched
/// to make up for the rounding.
fn knative_rollout_secs(duration_secs: f64) -> f64 {
    let duration = (duration_secs - 1.0).max(1.0);
    let steps = duration.clamp(1.0, 99.0);
    let size = (99.0 / steps).round().max(1.0);
    (99.0 / size).ceil() * (duration / steps)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (wisp, app) = setup::binaries(args.wisp.as_deref(), args.app.as_deref(), "hello")?;
    let load_start = procfs::loadavg();
    let server = Server::start(&server::Options::new(wisp))?;
    let ingress = server.ingress_addr(Duration::from_secs(10))?;
    setup::announce(&server, Some(ingress));
    let api = server.api().clone();
    api.create("services", &service(&app, "v1", &args))?;
    let timeout = Duration::from_secs(args.timeout);
    wait_serving(&server, ingress, "Hello v1!", OLD, timeout)?;
    eprintln!(
        "{NAME} answers from {OLD}; starting {} clients",
        args.clients
    );

    // Every route event from now on, stamped as it arrives.
    let rv = api.resource_version(SERVING, "routes")?;
    let (tx, rx) = mpsc::channel::<Event>();
    let watch = api.watch(SERVING, "routes", rv, tx)?;

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let url = format!("http://{ingress}/");
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        let (stop, failures, url) = (stop.clone(), failures.clone(), url.clone());
        let c = client(Duration::from_secs(args.request_timeout))?;
        // (start since the load began, answer) per request.
        clients.push(std::thread::spawn(move || {
            let mut mine: Vec<(Duration, Answer)> = Vec::with_capacity(1 << 16);
            while !stop.load(Ordering::Relaxed) {
                let at = start.elapsed();
                mine.push((at, request(&c, &url, &failures)));
            }
            mine
        }));
    }
    // Stops the clients however main ends from here.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let guard = StopOnDrop(stop.clone());

    std::thread::sleep(Duration::from_secs(args.warmup));
    let mut published = vec![Published {
        at: Duration::ZERO,
        new_percent: 0,
        split: format!("{OLD} 100"),
    }];
    let mut v2_container = setup::container(&app);
    v2_container["env"] = json!([{"name": "TARGET", "value": "v2"}]);
    let updated_at = start.elapsed();
    api.merge_patch(
        SERVING,
        NAMESPACE,
        "services",
        NAME,
        // A merge patch replaces the list: the whole container again, with the new env.
        &json!({"spec": {"template": {"spec": {"containers": [v2_container]}}}}),
    )
    .context("updating the template")?;
    eprintln!("template updated at {:.2} s", updated_at.as_secs_f64());

    // The rollout takes the duration, plus readiness of revision 2 and slack.
    let deadline = Instant::now() + Duration::from_secs(args.duration) + timeout;
    let ready_at_end;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!(
                "rollout not over after {:?}: {published:?}",
                deadline - start
            );
        }
        let Ok(ev) = rx.recv_timeout(left) else {
            continue;
        };
        if ev.name() != NAME || ev.event_type == "DELETED" {
            continue;
        }
        let t = traffic(&ev.object);
        if t.is_empty() {
            continue;
        }
        let p = percent_of(&t, NEW);
        let split = t
            .iter()
            .map(|(r, p)| format!("{r} {p}"))
            .collect::<Vec<_>>()
            .join(", ");
        if published.last().is_some_and(|last| last.split != split) {
            let at = ev.at.saturating_duration_since(start);
            eprintln!("{:8.3} s  {split}", at.as_secs_f64());
            published.push(Published {
                at,
                new_percent: p,
                split,
            });
        }
        if t == [(NEW.to_string(), 100)] {
            ready_at_end = is_ready(&ev.object);
            break;
        }
    }
    let rolled_out_at = published.last().map_or(Duration::ZERO, |p| p.at);
    std::thread::sleep(Duration::from_secs(args.tail));
    drop(guard);
    let mut answers: Vec<(Duration, Answer)> = Vec::new();
    for c in clients {
        answers.extend(c.join().map_err(|_| anyhow::anyhow!("a client panicked"))?);
    }
    let load_end = start.elapsed();
    watch.stop(Duration::from_secs(3));
    answers.sort_unstable_by_key(|(at, _)| *at);
    let failures = Arc::try_unwrap(failures)
        .map_err(|_| anyhow::anyhow!("failures still shared"))?
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());

    // Per step: the requests started inside it, less the margins.
    let skip = Duration::from_millis(args.skip_ms);
    let mut steps = Table::new([
        "step",
        "published at",
        "split published",
        "% on rev 2",
        "requests counted",
        "observed % on rev 2",
        "diff (points)",
        "95% half-width",
    ]);
    let (mut worst, mut sum_abs, mut counted_steps, mut over) = (0.0f64, 0.0f64, 0usize, 0usize);
    let mut too_short = 0usize;
    // Pooled over the intermediate steps: requests counted, answered by revision 2,
    // expected on revision 2 (Σ n·p), and steps whose diff exceeds their 95% half-width.
    let (mut pooled_n, mut pooled_new, mut pooled_expected, mut beyond_noise) =
        (0usize, 0usize, 0.0f64, 0usize);
    for (i, p) in published.iter().enumerate() {
        let end = published.get(i + 1).map_or(load_end, |n| n.at);
        let (lo, hi) = (p.at + skip, end.saturating_sub(skip));
        let in_step: Vec<Answer> = answers
            .iter()
            .filter(|(at, a)| *at >= lo && *at < hi && *a != Answer::Failed)
            .map(|(_, a)| *a)
            .collect();
        let n = in_step.len();
        if n == 0 {
            too_short += 1;
            steps.row([
                i.to_string(),
                format!("{:.3} s", p.at.as_secs_f64()),
                p.split.clone(),
                p.new_percent.to_string(),
                "0".into(),
                "–".into(),
                "–".into(),
                "–".into(),
            ]);
            continue;
        }
        let new = in_step.iter().filter(|a| **a == Answer::New).count();
        let observed = 100.0 * new as f64 / n as f64;
        let diff = observed - p.new_percent as f64;
        let q = p.new_percent as f64 / 100.0;
        let half = 196.0 * (q * (1.0 - q) / n as f64).sqrt();
        worst = worst.max(diff.abs());
        sum_abs += diff.abs();
        counted_steps += 1;
        if diff.abs() > TARGET_DIFF {
            over += 1;
        }
        if diff.abs() > half {
            beyond_noise += 1;
        }
        if p.new_percent > 0 && p.new_percent < 100 {
            pooled_n += n;
            pooled_new += new;
            pooled_expected += n as f64 * q;
        }
        steps.row([
            i.to_string(),
            format!("{:.3} s", p.at.as_secs_f64()),
            p.split.clone(),
            p.new_percent.to_string(),
            n.to_string(),
            format!("{observed:.2}"),
            format!("{diff:+.2}"),
            format!("±{half:.2}"),
        ]);
    }

    let sent = answers.len();
    let failed = answers.iter().filter(|(_, a)| *a == Answer::Failed).count();
    let first_intermediate = published
        .iter()
        .find(|p| p.new_percent > 0 && p.new_percent < 100)
        .map(|p| p.at);
    let intermediate = published
        .iter()
        .filter(|p| p.new_percent > 0 && p.new_percent < 100)
        .count();
    let took = first_intermediate.map(|f| rolled_out_at.saturating_sub(f));
    let expected = knative_rollout_secs(args.duration as f64);
    let stop_report = server.stop()?;

    let mut out = setup::results_header(
        &format!(
            "Gradual rollout under steady load (issue #19): {} s rollout-duration",
            args.duration
        ),
        &load_start,
    );
    let mut failure_kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for f in &failures {
        // The reason without its varying details (addresses, counts).
        let kind = f.split(':').next().unwrap_or(f).to_string();
        *failure_kinds.entry(kind).or_default() += 1;
    }
    let _ = write!(
        out,
        "\nAfter Knative's rollout probe (`test/performance/benchmarks/rollout-probe`), scaled to one machine: \
         a fresh `wisp serve`, the Service `{NAME}` on the `hello` sample (`TARGET=v1`: each answer names its revision) \
         with `autoscaling.knative.dev/min-scale: \"{}\"` and `serving.knative.dev/rollout-duration: \"{}s\"`; \
         {} closed-loop keep-alive clients through the ingress (`Host: {HOST}`, {} s timeout); after {} s the template \
         is updated to `TARGET=v2` (revision `{NEW}`); the Route's `status.traffic` is watched (each event stamped on arrival) \
         until it publishes 100% on `{NEW}`; the load goes on {} s more.\n\n\
         ## Summary\n\n\
         | | |\n|---|---|\n\
         | requests sent | {sent} ({:.0} req/s over {:.1} s) |\n\
         | requests failed (non-200, connection error, timeout, unknown body) | {failed} (target 0: {}) |\n\
         | published splits | {} ({intermediate} intermediate) |\n\
         | split vs published, max \\|diff\\| | {worst:.2} points (target ±{TARGET_DIFF:.0}: {}) |\n\
         | split vs published, mean \\|diff\\| | {:.2} points over {counted_steps} steps; {over} step(s) beyond ±{TARGET_DIFF:.0}; {too_short} too short to count |\n\
         | steps whose diff exceeds their binomial 95% half-width | {beyond_noise} of {counted_steps} (≈5% expected from sampling alone) |\n\
         | pooled over the intermediate steps: observed vs published share of revision 2 | {pooled_new} vs {pooled_expected:.0} of {pooled_n} requests: {:+.2} points |\n\
         | template update → revision 2's first split | {} |\n\
         | first intermediate split → 100% on revision 2 | {} (rollout-duration {} s; Knative's step computation gives {expected:.1} s, see below) |\n\
         | Route Ready with the 100% split | {} |\n\
         | wisp stop | {} in {:.2} s, {} leftover replicas |\n\n",
        args.min_scale,
        args.duration,
        args.clients,
        args.request_timeout,
        args.warmup,
        args.tail,
        sent as f64 / load_end.as_secs_f64(),
        load_end.as_secs_f64(),
        if failed == 0 { "✅" } else { "❌ missed" },
        published.len() - 1,
        if worst <= TARGET_DIFF {
            "✅"
        } else {
            "❌ missed"
        },
        if counted_steps > 0 {
            sum_abs / counted_steps as f64
        } else {
            f64::NAN
        },
        if pooled_n > 0 {
            100.0 * (pooled_new as f64 - pooled_expected) / pooled_n as f64
        } else {
            f64::NAN
        },
        first_intermediate.map_or("never".into(), |f| format!(
            "{:.2} s",
            f.saturating_sub(updated_at).as_secs_f64()
        )),
        took.map_or("–".into(), |t| format!("{:.2} s", t.as_secs_f64())),
        args.duration,
        if ready_at_end {
            "in the same event"
        } else {
            "not yet in that event"
        },
        stop_report.status,
        stop_report.took.as_secs_f64(),
        stop_report.leftovers,
    );
    let _ = write!(
        out,
        "Why a {d} s rollout takes about {expected:.0} s: Knative's `computeProperties` \
         (`pkg/reconciler/route/traffic/rollout.go`, ported in `crates/controller/src/route/rollout.rs`), once the \
         first 1% has moved (counted as 1 s when it took less), spreads the remaining 99% over \
         {d}−1 s in steps of at least 1 s, and rounds the step size to the nearest percent \
         without stretching the step duration: with a 1 s first step that is min(99, {d}−1) steps of \
         round(99/that)% each, ceil(99/size) steps in all.\n\n",
        d = args.duration,
    );
    if !failure_kinds.is_empty() {
        let _ = writeln!(out, "Failures by kind:\n");
        for (k, n) in &failure_kinds {
            let _ = writeln!(out, "- {n} × {k}");
        }
        let _ = writeln!(
            out,
            "\nFirst failures: {:?}\n",
            &failures[..failures.len().min(5)]
        );
    }
    let _ = write!(
        out,
        "## Per published step\n\nTimes since the load started (template updated at {:.3} s). A step's requests are those \
         started from {} ms after the split was seen published to {} ms before the next one (the data plane swaps the \
         split just before the status is written, and the watch sees it a little later); failed requests are left out of \
         the share (they are counted above). The ingress picks a revision at random by weight, so the last column is the \
         binomial 95% half-width of a step of that many requests at the published percent: a diff inside it is \
         sampling noise.\n\n{}\n",
        updated_at.as_secs_f64(),
        args.skip_ms,
        args.skip_ms,
        steps.render(),
    );
    setup::write_results(&out, &args.out, args.no_write)?;
    if failed > 0 || worst > TARGET_DIFF {
        eprintln!("some targets were missed (see above)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::knative_rollout_secs;

    #[test]
    fn knative_rollout_times() {
        // 60 s: 59 steps of round(99/59) = 2%, 1 s each; 50 of them reach 100%.
        assert!((knative_rollout_secs(60.0) - 50.0).abs() < 1e-9);
        // 6 s (tests/rollout.rs): 5 steps of 20%, 1 s each.
        assert!((knative_rollout_secs(6.0) - 5.0).abs() < 1e-9);
        // Long rollouts: 1% steps over the whole rest.
        assert!((knative_rollout_secs(200.0) - 199.0).abs() < 1e-9);
    }
}
