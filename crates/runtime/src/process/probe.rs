//! Readiness, liveness and startup probes, run by wisp against each replica.
//!
//! On Kubernetes the kubelet runs liveness and startup probes while Knative's queue-proxy
//! runs the readiness probe (aggressively, so a new replica takes traffic within ~50 ms of
//! being able to). Here one task per replica does all three, with the same semantics:
//!
//! - **Readiness** with `periodSeconds` unset or 0 (the Knative default) is probed every
//!   [`aggressive_probe_interval`](super::ProcessOptions::aggressive_probe_interval) with a
//!   short per-attempt timeout until `successThreshold` consecutive successes. Unlike the
//!   queue-proxy we do not give up after 10 s (there is no kubelet behind us to retry), and
//!   once the replica has been Ready we keep checking it every
//!   [`ready_probe_interval`](super::ProcessOptions::ready_probe_interval), so a replica that
//!   stops answering becomes NotReady after `failureThreshold` failures and Ready again
//!   after `successThreshold` successes. With an explicit period, Kubernetes' timing rules
//!   apply (`initialDelaySeconds`, `periodSeconds`, `timeoutSeconds`, thresholds).
//! - **Liveness** failing `failureThreshold` times in a row restarts the replica.
//! - **Startup**, when present, runs first; readiness and liveness begin only after it
//!   succeeds, and `failureThreshold` failures restart the replica.
//!
//! Every probe targets the replica's own loopback port whatever `port` the probe names: the
//! API defaults and validates probe ports to the container port, and the process runtime
//! gives each replica its own port instead (see the module docs of `process`). `grpc`
//! probes are checked as a TCP connect (no gRPC client in wisp yet), as are `httpGet` probes
//! with `scheme: HTTPS` (no TLS client); `exec` probes run in the replica's working directory
//! with its environment.

use std::{
    convert::Infallible, net::SocketAddr, path::PathBuf, process::Stdio, sync::Arc, time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{Instant, sleep, sleep_until, timeout},
};
use wisp_api::serving::Probe;

use super::ProcessOptions;

/// `User-Agent` of HTTP probes: what the kubelet sends, so that apps (and the queue-proxy
/// logic that recognises probes) treat wisp's probes the same way.
pub const USER_AGENT: &str = "kube-probe/1.33";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Readiness,
    Liveness,
    Startup,
}

/// A probe's timing, with Kubernetes' defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub initial_delay: Duration,
    /// None: Knative's aggressive readiness probing.
    pub period: Option<Duration>,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// Zero or negative means unset, as in the Go API.
fn positive(v: Option<i64>) -> Option<u64> {
    v.filter(|v| *v > 0).map(|v| v as u64)
}

pub(crate) fn timing(p: &Probe, kind: Kind) -> Timing {
    let secs = Duration::from_secs;
    let period = positive(p.period_seconds).map(secs);
    Timing {
        initial_delay: secs(positive(p.initial_delay_seconds).unwrap_or(0)),
        period: match kind {
            Kind::Readiness => period,
            Kind::Liveness | Kind::Startup => Some(period.unwrap_or(secs(10))),
        },
        timeout: secs(positive(p.timeout_seconds).unwrap_or(1)),
        // Kubernetes requires 1 for liveness and startup probes.
        success_threshold: match kind {
            Kind::Readiness => positive(p.success_threshold)
                .unwrap_or(1)
                .min(u32::MAX as u64) as u32,
            Kind::Liveness | Kind::Startup => 1,
        },
        failure_threshold: positive(p.failure_threshold)
            .unwrap_or(3)
            .min(u32::MAX as u64) as u32,
    }
}

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Http {
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp,
    Exec {
        argv: Vec<String>,
    },
}

pub(crate) fn action(p: &Probe) -> Action {
    if let Some(h) = &p.http_get
        && !h.scheme.eq_ignore_ascii_case("https")
    {
        let path = match h.path.as_str() {
            "" => "/".to_string(),
            p if p.starts_with('/') => p.to_string(),
            p => format!("/{p}"),
        };
        let headers = h
            .http_headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        return Action::Http { path, headers };
    }
    if p.http_get.is_none()
        && p.tcp_socket.is_none()
        && let Some(e) = &p.exec
    {
        return Action::Exec {
            argv: e.command.clone(),
        };
    }
    Action::Tcp
}

/// A probe ready to run: what and when.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub action: Action,
    pub timing: Timing,
}

impl Spec {
    pub fn new(p: &Probe, kind: Kind) -> Self {
        Spec {
            action: action(p),
            timing: timing(p, kind),
        }
    }
}

/// The probes of a container. Readiness always exists: the API defaults one, and a missing
/// one is a TCP probe here too.
#[derive(Clone, Debug)]
pub(crate) struct Probes {
    pub readiness: Spec,
    pub liveness: Option<Spec>,
    pub startup: Option<Spec>,
}

impl Probes {
    pub fn of(c: &wisp_api::serving::Container) -> Self {
        Probes {
            readiness: c.readiness_probe.as_ref().map_or_else(
                || Spec::new(&Probe::default(), Kind::Readiness),
                |p| Spec::new(p, Kind::Readiness),
            ),
            liveness: c
                .liveness_probe
                .as_ref()
                .map(|p| Spec::new(p, Kind::Liveness)),
            startup: c
                .startup_probe
                .as_ref()
                .map(|p| Spec::new(p, Kind::Startup)),
        }
    }
}

/// What a probe attempt runs against.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// Where HTTP and TCP probes connect: the replica's address (its loopback port, or its
    /// sandbox's IP and container port).
    pub address: SocketAddr,
    pub env: Arc<[(String, String)]>,
    pub working_dir: Option<PathBuf>,
    /// Runs exec probes inside a sandbox: the probe's command is appended to this argv
    /// (`runc exec <id>`), which then runs with wisp's own environment (the container's
    /// comes from its runtime spec). Empty: the probe runs on the host with `env`.
    pub exec_prefix: Arc<[String]>,
}

/// Consecutive successes and failures of a probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Streak {
    pub successes: u32,
    pub failures: u32,
}

impl Streak {
    pub fn record(&mut self, ok: bool) {
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
    }
}

/// Readiness after an observation: it flips only after a full streak in the other direction.
pub(crate) fn readiness(ready: bool, streak: Streak, t: &Timing) -> bool {
    if ready {
        streak.failures < t.failure_threshold
    } else {
        streak.successes >= t.success_threshold
    }
}

/// Runs one attempt; Err carries a reason for the logs.
pub(crate) async fn attempt(
    action: &Action,
    target: &Target,
    limit: Duration,
) -> Result<(), String> {
    let run = async {
        match action {
            Action::Tcp => connect(target.address).await.map(drop),
            Action::Http { path, headers } => http_get(target.address, path, headers).await,
            Action::Exec { argv } => exec(argv, target).await,
        }
    };
    match timeout(limit, run).await {
        Ok(r) => r,
        Err(_) => Err(format!("probe timed out after {limit:?}")),
    }
}

async fn connect(address: SocketAddr) -> Result<TcpStream, String> {
    TcpStream::connect(address)
        .await
        .map_err(|e| format!("dial tcp {address}: {e}"))
}

/// A minimal HTTP/1.1 GET: only the status line matters, so there is no need for a full
/// client. `Connection: close` keeps the server from waiting for a next request.
async fn http_get(
    address: SocketAddr,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut stream = connect(address).await?;
    let clean = |s: &str| !s.contains(['\r', '\n']);
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    if !has("host") {
        req.push_str(&format!("Host: {address}\r\n"));
    }
    if !has("user-agent") {
        req.push_str(&format!("User-Agent: {USER_AGENT}\r\n"));
    }
    if !has("accept") {
        req.push_str("Accept: */*\r\n");
    }
    for (name, value) in headers
        .iter()
        .filter(|(n, v)| !n.is_empty() && clean(n) && clean(v))
    {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| format!("HTTP probe: {e}"))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("HTTP probe: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let code = status_code(&buf).ok_or_else(|| "HTTP probe: malformed response".to_string())?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// The status code of an HTTP/1.x status line.
pub(crate) fn status_code(response: &[u8]) -> Option<u16> {
    let line = response.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_ascii_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

async fn exec(argv: &[String], target: &Target) -> Result<(), String> {
    if argv.is_empty() {
        return Err("exec probe has no command".into());
    }
    let full: Vec<&String> = target.exec_prefix.iter().chain(argv).collect();
    let Some((program, args)) = full.split_first() else {
        return Err("exec probe has no command".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    if target.exec_prefix.is_empty() {
        cmd.env_clear().envs(target.env.iter().map(|(k, v)| (k, v)));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // A probe that outlives its timeout is killed when the attempt is dropped.
        .kill_on_drop(true);
    if let Some(dir) = target
        .working_dir
        .as_ref()
        .filter(|_| target.exec_prefix.is_empty())
    {
        cmd.current_dir(dir);
    }
    let status = cmd
        .status()
        .await
        .map_err(|e| format!("exec probe {program:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("exec probe {program:?} failed: {status}"))
    }
}

/// Runs a replica's probes until one of them says the replica must be restarted (returns
/// the reason). Readiness changes are reported through `report` as they happen.
pub(crate) async fn run(
    probes: &Probes,
    target: &Target,
    opts: &ProcessOptions,
    report: &(dyn Fn(bool) + Send + Sync),
) -> String {
    if let Some(startup) = &probes.startup
        && let Err(reason) = until_started(startup, target).await
    {
        return reason;
    }
    let liveness = async {
        match &probes.liveness {
            Some(spec) => until_dead(spec, target).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        reason = liveness => reason,
        never = readiness_loop(&probes.readiness, target, opts, report) => match never {},
    }
}

async fn until_started(spec: &Spec, target: &Target) -> Result<(), String> {
    let t = &spec.timing;
    let period = t.period.unwrap_or(Duration::from_secs(10));
    sleep(t.initial_delay).await;
    let mut streak = Streak::default();
    loop {
        let next = Instant::now() + period;
        let result = attempt(&spec.action, target, t.timeout).await;
        streak.record(result.is_ok());
        match result {
            Ok(()) if streak.successes >= t.success_threshold => return Ok(()),
            Err(e) if streak.failures >= t.failure_threshold => {
                return Err(format!("Startup probe failed: {e}"));
            }
            _ => {}
        }
        sleep_until(next).await;
    }
}

async fn until_dead(spec: &Spec, target: &Target) -> String {
    let t = &spec.timing;
    let period = t.period.unwrap_or(Duration::from_secs(10));
    sleep(t.initial_delay).await;
    let mut streak = Streak::default();
    loop {
        let next = Instant::now() + period;
        let result = attempt(&spec.action, target, t.timeout).await;
        streak.record(result.is_ok());
        if let Err(e) = result
            && streak.failures >= t.failure_threshold
        {
            return format!("Liveness probe failed: {e}");
        }
        sleep_until(next).await;
    }
}

async fn readiness_loop(
    spec: &Spec,
    target: &Target,
    opts: &ProcessOptions,
    report: &(dyn Fn(bool) + Send + Sync),
) -> Infallible {
    let t = &spec.timing;
    sleep(t.initial_delay).await;
    let (mut ready, mut been_ready, mut streak) = (false, false, Streak::default());
    let mut attempts: u32 = 0;
    loop {
        let (interval, limit) = match t.period {
            // Exec probes start a process: 100 ms is too short for that, so they keep their
            // own timeout even while probing aggressively.
            None if !been_ready => match spec.action {
                Action::Exec { .. } => (opts.aggressive_probe_interval, t.timeout),
                _ => (
                    first_probe_interval(attempts, opts.aggressive_probe_interval),
                    opts.aggressive_probe_timeout,
                ),
            },
            None => (opts.ready_probe_interval, t.timeout),
            Some(period) => (period, t.timeout),
        };
        let next = Instant::now() + interval;
        attempts = attempts.saturating_add(1);
        let result = attempt(&spec.action, target, limit).await;
        streak.record(result.is_ok());
        let now = readiness(ready, streak, t);
        if now != ready {
            if let Err(e) = &result {
                tracing::info!(address = %target.address, "readiness probe failed: {e}");
            }
            ready = now;
            been_ready |= now;
            report(now);
        }
        sleep_until(next).await;
    }
}

/// The wait after the `attempt`-th aggressive probe (0-based): 1 ms, growing by 1 ms per
/// probe up to `interval` (Knative's 50 ms). The first probe fires as the process starts,
/// before it can listen; a fixed 50 ms wait after that refusal would add 50 ms to every cold
/// start, while apps like `hello` listen within a few milliseconds. The waits grow linearly,
/// not by doubling: an app that listens at time t is then seen within about √(2t) ms
/// (8 ms at 30 ms) rather than up to t later (doubling probed at 30 ms and next at 62 ms),
/// for a few more refused connects (ten in the first 55 ms), which cost microseconds each.
fn first_probe_interval(attempt: u32, interval: Duration) -> Duration {
    Duration::from_millis(u64::from(attempt) + 1).min(interval)
}

#[cfg(test)]
mod tests {
    use wisp_api::serving::{ExecAction, GrpcAction, HttpGetAction, HttpHeader, TcpSocketAction};

    use super::*;

    #[test]
    fn aggressive_probing_starts_fast_and_settles_at_the_interval() {
        let fifty = Duration::from_millis(50);
        let waits: Vec<u64> = (0..8)
            .map(|n| first_probe_interval(n, fifty).as_millis() as u64)
            .collect();
        assert_eq!(waits, [1, 2, 3, 4, 5, 6, 7, 8]);
        // The first probe after an app listens at 30 ms comes by 36 ms (probes at 0, 1, 3,
        // 6, 10, 15, 21, 28, 36, …).
        let at: Vec<u64> = (0..9)
            .scan(0, |t, n| {
                let now = *t;
                *t += first_probe_interval(n, fifty).as_millis() as u64;
                Some(now)
            })
            .collect();
        assert_eq!(at, [0, 1, 3, 6, 10, 15, 21, 28, 36]);
        assert_eq!(first_probe_interval(49, fifty), fifty);
        assert_eq!(first_probe_interval(u32::MAX, fifty), fifty);
    }

    #[test]
    fn timing_defaults_follow_kubernetes_and_knative() {
        let s = Duration::from_secs;
        let empty = Probe::default();
        let t = |period, timeout, success, failure, delay| Timing {
            initial_delay: s(delay),
            period,
            timeout: s(timeout),
            success_threshold: success,
            failure_threshold: failure,
        };
        let explicit = Probe {
            initial_delay_seconds: Some(2),
            period_seconds: Some(5),
            timeout_seconds: Some(3),
            success_threshold: Some(2),
            failure_threshold: Some(4),
            ..Default::default()
        };
        let zeros = Probe {
            period_seconds: Some(0),
            timeout_seconds: Some(0),
            success_threshold: Some(0),
            failure_threshold: Some(0),
            ..Default::default()
        };
        let cases = [
            (&empty, Kind::Readiness, t(None, 1, 1, 3, 0)),
            (&zeros, Kind::Readiness, t(None, 1, 1, 3, 0)),
            (&empty, Kind::Liveness, t(Some(s(10)), 1, 1, 3, 0)),
            (&empty, Kind::Startup, t(Some(s(10)), 1, 1, 3, 0)),
            (&explicit, Kind::Readiness, t(Some(s(5)), 3, 2, 4, 2)),
            (&explicit, Kind::Liveness, t(Some(s(5)), 3, 1, 4, 2)),
        ];
        for (i, (probe, kind, want)) in cases.into_iter().enumerate() {
            assert_eq!(timing(probe, kind), want, "case {i}");
        }
    }

    #[test]
    fn action_picks_the_handler() {
        let http = |path: &str, scheme: &str| Probe {
            http_get: Some(HttpGetAction {
                path: path.into(),
                scheme: scheme.into(),
                http_headers: vec![HttpHeader {
                    name: "X-A".into(),
                    value: "1".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let http_action = |path: &str| Action::Http {
            path: path.into(),
            headers: vec![("X-A".into(), "1".into())],
        };
        let exec = Probe {
            exec: Some(ExecAction {
                command: vec!["true".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let tcp = Probe {
            tcp_socket: Some(TcpSocketAction::default()),
            ..Default::default()
        };
        let grpc = Probe {
            grpc: Some(GrpcAction::default()),
            ..Default::default()
        };
        let cases = [
            (http("", ""), http_action("/")),
            (http("/healthz", "HTTP"), http_action("/healthz")),
            (http("ready", ""), http_action("/ready")),
            (http("/", "HTTPS"), Action::Tcp),
            (
                exec,
                Action::Exec {
                    argv: vec!["true".into()],
                },
            ),
            (tcp, Action::Tcp),
            (grpc, Action::Tcp),
            (Probe::default(), Action::Tcp),
        ];
        for (i, (probe, want)) in cases.into_iter().enumerate() {
            assert_eq!(action(&probe), want, "case {i}");
        }
    }

    #[test]
    fn readiness_flips_only_after_a_full_streak() {
        let t = Timing {
            initial_delay: Duration::ZERO,
            period: None,
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        // Observations and the readiness after each.
        let steps = [
            (false, false),
            (true, false),
            (false, false),
            (true, false),
            (true, true),
            (false, true),
            (false, true),
            (true, true),
            (false, true),
            (false, true),
            (false, false),
            (true, false),
            (true, true),
        ];
        let (mut ready, mut streak) = (false, Streak::default());
        for (i, (ok, want)) in steps.into_iter().enumerate() {
            streak.record(ok);
            ready = readiness(ready, streak, &t);
            assert_eq!(ready, want, "step {i}");
        }
    }

    #[test]
    fn status_line_parsing() {
        let cases: [(&[u8], Option<u16>); 7] = [
            (b"HTTP/1.1 200 OK\r\n", Some(200)),
            (b"HTTP/1.0 302 Found\r\nLocation: /\r\n", Some(302)),
            (b"HTTP/1.1 503\r\n", Some(503)),
            (b"HTTP/1.1 20 OK\r\n", None),
            (b"HTTP/2 200\r\n", None),
            (b"SSH-2.0-OpenSSH\r\n", None),
            (b"", None),
        ];
        for (input, want) in cases {
            assert_eq!(
                status_code(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
