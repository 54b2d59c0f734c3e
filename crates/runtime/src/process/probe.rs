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
//! With `multi-container-probing` (Knative's `pkg/reconciler/revision/resources/queue.go`
//! passes every container's readiness probe to the queue-proxy, which evaluates the list as
//! in `pkg/queue/readiness/probe.go`: ready only when each one is), the sidecars' probes run
//! here too, each container's in the same way and at once: the replica is Ready only while
//! every probed container is, and any container's failing liveness or startup probe
//! restarts the replica. A container without a readiness probe is ready once started.
//!
//! Every probe of the serving container targets the replica's own port whatever `port` the
//! probe names: the API defaults and validates probe ports to the container port, and the
//! process runtime gives each replica its own port instead (see the module docs of
//! `process`). A sidecar's probes go to the port they name, at the replica's IP (its
//! network namespace's on the container runtime, loopback on the process runtime). `grpc`
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
use wisp_api::serving::{Container, PodSpec, Probe};

use super::{ProcessOptions, lock};

/// `User-Agent` of HTTP probes: what the kubelet sends, so that apps (and the queue-proxy
/// logic that recognises probes) treat wisp's probes the same way.
pub const USER_AGENT: &str = "kube-probe/1.33";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Readiness,
    Liveness,
    Startup,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Readiness => "readiness",
            Kind::Liveness => "liveness",
            Kind::Startup => "startup",
        }
    }
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

/// A probe ready to run: what, where and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub action: Action,
    pub timing: Timing,
    /// The port HTTP and TCP probes connect to, at the target's IP. None: the target's own
    /// address (the serving container's probes, which always reach the replica's port).
    pub port: Option<u16>,
}

impl Spec {
    pub fn new(p: &Probe, kind: Kind) -> Self {
        Spec {
            action: action(p),
            timing: timing(p, kind),
            port: None,
        }
    }

    /// Where an HTTP or TCP attempt of this probe connects.
    fn address(&self, target: &Target) -> SocketAddr {
        self.port.map_or(target.address, |port| {
            SocketAddr::new(target.address.ip(), port)
        })
    }
}

/// The probes of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probes {
    /// None: ready once started (a sidecar without one). The serving container always has
    /// one: the API defaults one, and a missing one is a TCP probe here too.
    pub readiness: Option<Spec>,
    pub liveness: Option<Spec>,
    pub startup: Option<Spec>,
}

impl Probes {
    /// The serving container's probes: at the replica's own port.
    pub fn of(c: &Container) -> Self {
        Probes {
            readiness: Some(c.readiness_probe.as_ref().map_or_else(
                || Spec::new(&Probe::default(), Kind::Readiness),
                |p| Spec::new(p, Kind::Readiness),
            )),
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

    /// A sidecar's probes, each at the port it names. Err: a probe that names no port.
    pub fn of_sidecar(c: &Container) -> Result<Self, String> {
        let spec = |p: &Option<Probe>, kind: Kind| -> Result<Option<Spec>, String> {
            p.as_ref()
                .map(|p| {
                    Ok(Spec {
                        port: sidecar_port(p, c, kind)?,
                        ..Spec::new(p, kind)
                    })
                })
                .transpose()
        };
        Ok(Probes {
            readiness: spec(&c.readiness_probe, Kind::Readiness)?,
            liveness: spec(&c.liveness_probe, Kind::Liveness)?,
            startup: spec(&c.startup_probe, Kind::Startup)?,
        })
    }

    fn any(&self) -> bool {
        self.readiness.is_some() || self.liveness.is_some() || self.startup.is_some()
    }
}

/// The port a sidecar's probe connects to. Knative's `makeQueueContainer`
/// (`pkg/reconciler/revision/resources/queue.go`) takes a sidecar readiness probe's
/// `httpGet`/`tcpSocket` port (a number) or its `grpc` port, and fails the revision's
/// deployment when it names none; an `exec` probe has no port. The kubelet, which runs
/// the liveness and startup probes, resolves a named port among the container's ports.
fn sidecar_port(p: &Probe, c: &Container, kind: Kind) -> Result<Option<u16>, String> {
    use serde_json::Value;
    let named = |v: &Value| -> Option<i64> {
        match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok().or_else(|| {
                (kind != Kind::Readiness)
                    .then(|| c.ports.iter().find(|port| port.name == *s))
                    .flatten()
                    .map(|port| port.container_port)
            }),
            _ => None,
        }
    };
    let port = if let Some(h) = &p.http_get {
        named(&h.port)
    } else if let Some(t) = &p.tcp_socket {
        named(&t.port)
    } else if let Some(g) = &p.grpc {
        Some(g.port)
    } else if p.exec.is_some() {
        return Ok(None);
    } else {
        None
    };
    match port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) {
        Some(port) => Ok(Some(port)),
        None => Err(format!(
            "sidecar {} probe does not define probe port on container: {}",
            kind.name(),
            c.name
        )),
    }
}

/// What wisp probes of a pod: the serving container (always), then every sidecar with a
/// probe, by name. Err: the pod has no serving container, or a sidecar's probe names no
/// port (the message says which).
pub(crate) fn plan(pod: &PodSpec) -> Result<Vec<(String, Probes)>, String> {
    let serving = pod
        .serving_container()
        .ok_or_else(|| "the revision has no container to run".to_string())?;
    let mut out = vec![(serving.name.clone(), Probes::of(serving))];
    for c in pod.containers.iter().filter(|c| c.name != serving.name) {
        let probes = Probes::of_sidecar(c)?;
        if probes.any() {
            out.push((c.name.clone(), probes));
        }
    }
    Ok(out)
}

/// One container's probes with what they run against.
#[derive(Clone, Debug)]
pub(crate) struct ContainerProbes {
    pub name: String,
    /// The serving container's failures are reported as they always were; a sidecar's
    /// name it.
    pub sidecar: bool,
    pub probes: Probes,
    pub target: Target,
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
pub(crate) async fn attempt(spec: &Spec, target: &Target, limit: Duration) -> Result<(), String> {
    let address = spec.address(target);
    let run = async {
        match &spec.action {
            Action::Tcp => connect(address).await.map(drop),
            Action::Http { path, headers } => http_get(address, path, headers).await,
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

/// Runs the probes of a replica's containers until one of them says the replica must be
/// restarted (returns the reason). Changes in readiness are reported through `report`, as
/// the containers whose readiness is not met (none: the replica is Ready).
pub(crate) async fn run(
    containers: &[ContainerProbes],
    opts: &ProcessOptions,
    report: &(dyn Fn(Vec<String>) + Send + Sync),
) -> String {
    let ready = std::sync::Mutex::new(vec![false; containers.len()]);
    let set = |i: usize, now: bool| {
        let unready = {
            let mut ready = lock(&ready);
            if ready[i] == now {
                return;
            }
            ready[i] = now;
            unready(containers, &ready)
        };
        report(unready);
    };
    let set = &set;
    let reports: Vec<_> = (0..containers.len())
        .map(|i| move |now: bool| set(i, now))
        .collect();
    let each = containers
        .iter()
        .zip(&reports)
        .map(|(c, report)| Box::pin(run_container(c, opts, report)));
    if containers.is_empty() {
        return std::future::pending().await;
    }
    futures_util::future::select_all(each).await.0
}

/// The names of the containers not ready, by each one's readiness.
fn unready(containers: &[ContainerProbes], ready: &[bool]) -> Vec<String> {
    containers
        .iter()
        .zip(ready)
        .filter(|(_, ready)| !**ready)
        .map(|(c, _)| c.name.clone())
        .collect()
}

/// One container's probes, as the kubelet runs them: startup first, then liveness and
/// readiness side by side.
async fn run_container(
    c: &ContainerProbes,
    opts: &ProcessOptions,
    report: &(dyn Fn(bool) + Send + Sync),
) -> String {
    let named = |reason: String| {
        if c.sidecar {
            format!("container {}: {reason}", c.name)
        } else {
            reason
        }
    };
    let target = &c.target;
    if let Some(startup) = &c.probes.startup
        && let Err(reason) = until_started(startup, target).await
    {
        return named(reason);
    }
    let liveness = async {
        match &c.probes.liveness {
            Some(spec) => until_dead(spec, target).await,
            None => std::future::pending().await,
        }
    };
    let Some(readiness) = &c.probes.readiness else {
        report(true);
        return named(liveness.await);
    };
    tokio::select! {
        reason = liveness => named(reason),
        never = readiness_loop(readiness, target, opts, report) => match never {},
    }
}

async fn until_started(spec: &Spec, target: &Target) -> Result<(), String> {
    let t = &spec.timing;
    let period = t.period.unwrap_or(Duration::from_secs(10));
    sleep(t.initial_delay).await;
    let mut streak = Streak::default();
    loop {
        let next = Instant::now() + period;
        let result = attempt(spec, target, t.timeout).await;
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
        let result = attempt(spec, target, t.timeout).await;
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
        let result = attempt(spec, target, limit).await;
        streak.record(result.is_ok());
        let now = readiness(ready, streak, t);
        if now != ready {
            if let Err(e) = &result {
                tracing::info!(address = %spec.address(target), "readiness probe failed: {e}");
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
    fn the_plan_probes_the_serving_container_and_each_probed_sidecar_at_its_port() {
        let port = |name: &str, n: i64| wisp_api::serving::ContainerPort {
            name: name.into(),
            container_port: n,
            ..Default::default()
        };
        let c = |name: &str| Container {
            name: name.into(),
            ..Default::default()
        };
        let http = |port: serde_json::Value| Probe {
            http_get: Some(HttpGetAction {
                port,
                ..Default::default()
            }),
            ..Default::default()
        };
        let tcp = |port: serde_json::Value| Probe {
            tcp_socket: Some(TcpSocketAction {
                port,
                ..Default::default()
            }),
            ..Default::default()
        };
        let grpc = |port: i64| Probe {
            grpc: Some(GrpcAction {
                port,
                ..Default::default()
            }),
            ..Default::default()
        };
        let exec = Probe {
            exec: Some(ExecAction {
                command: vec!["true".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let serving = Container {
            ports: vec![port("", 8080)],
            ..c("app")
        };
        let pod = |sidecars: Vec<Container>| PodSpec {
            containers: std::iter::once(serving.clone()).chain(sidecars).collect(),
            ..Default::default()
        };
        // Each case: the sidecars, then per probed container its name and the ports of its
        // (readiness, liveness, startup) probes, or the failure.
        type Ports = (
            Option<Option<u16>>,
            Option<Option<u16>>,
            Option<Option<u16>>,
        );
        type Want = Result<Vec<(&'static str, Ports)>, &'static str>;
        let cases: Vec<(&str, Vec<Container>, Want)> = vec![
            (
                "no probes on the sidecar: only the serving container, at its own port",
                vec![c("proxy")],
                Ok(vec![("app", (Some(None), None, None))]),
            ),
            (
                "every kind, every handler",
                vec![Container {
                    ports: vec![port("admin", 9901)],
                    readiness_probe: Some(http(8090.into())),
                    liveness_probe: Some(tcp("admin".into())),
                    startup_probe: Some(grpc(9000)),
                    ..c("proxy")
                }],
                Ok(vec![
                    ("app", (Some(None), None, None)),
                    (
                        "proxy",
                        (Some(Some(8090)), Some(Some(9901)), Some(Some(9000))),
                    ),
                ]),
            ),
            (
                "a numeric string is a port; exec has none; no readiness probe: none",
                vec![Container {
                    liveness_probe: Some(http("7070".into())),
                    startup_probe: Some(exec.clone()),
                    ..c("proxy")
                }],
                Ok(vec![
                    ("app", (Some(None), None, None)),
                    ("proxy", (None, Some(Some(7070)), Some(None))),
                ]),
            ),
            (
                "a readiness probe without a port fails as Knative's queue.go does",
                vec![Container {
                    readiness_probe: Some(tcp(0.into())),
                    ..c("proxy")
                }],
                Err("sidecar readiness probe does not define probe port on container: proxy"),
            ),
            (
                "the queue-proxy does not resolve a named readiness port",
                vec![Container {
                    ports: vec![port("admin", 9901)],
                    readiness_probe: Some(http("admin".into())),
                    ..c("proxy")
                }],
                Err("sidecar readiness probe does not define probe port on container: proxy"),
            ),
            (
                "an unknown named liveness port",
                vec![Container {
                    liveness_probe: Some(tcp("nope".into())),
                    ..c("proxy")
                }],
                Err("sidecar liveness probe does not define probe port on container: proxy"),
            ),
        ];
        let ports = |p: &Probes| -> Ports {
            (
                p.readiness.as_ref().map(|s| s.port),
                p.liveness.as_ref().map(|s| s.port),
                p.startup.as_ref().map(|s| s.port),
            )
        };
        for (what, sidecars, want) in cases {
            let got = plan(&pod(sidecars)).map(|list| {
                list.iter()
                    .map(|(name, p)| (name.clone(), ports(p)))
                    .collect::<Vec<_>>()
            });
            let want = want
                .map(|l| l.into_iter().map(|(n, p)| (n.to_string(), p)).collect())
                .map_err(str::to_string);
            assert_eq!(got, want, "{what}");
        }
        assert!(plan(&PodSpec::default()).is_err());
    }

    #[test]
    fn a_probe_with_a_port_connects_there_at_the_target_ip() {
        let target = Target {
            address: "10.0.0.5:8080".parse().unwrap(),
            env: Arc::new([]),
            working_dir: None,
            exec_prefix: Arc::new([]),
        };
        let mut spec = Spec::new(&Probe::default(), Kind::Readiness);
        assert_eq!(spec.address(&target), target.address);
        spec.port = Some(9090);
        assert_eq!(spec.address(&target), "10.0.0.5:9090".parse().unwrap());
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
