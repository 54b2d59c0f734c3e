//! The process runtime against real processes (`sh`, `sleep`, `python3 -m http.server`).
//!
//! Every test has its own state directory and ephemeral ports, so they run in parallel;
//! every wait is bounded; and every test ends with a shutdown and checks that the processes
//! it started are gone.

use std::{
    collections::BTreeSet,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use nix::{sys::signal::kill, unistd::Pid};
use tokio::sync::broadcast::error::RecvError;
use wisp_api::serving::{Container, ExecAction, HttpGetAction, PodSpec, Probe, TcpSocketAction};

use super::{ProcessOptions, ProcessPlatform, records};
use crate::{Platform, ReplicaPhase, ReplicaSpec, ReplicaStatus, RevisionKey};

pub(crate) const WAIT: Duration = Duration::from_secs(20);

fn fast() -> ProcessOptions {
    ProcessOptions {
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
        ready_probe_interval: Duration::from_millis(100),
        cleanup_grace: Duration::from_secs(3),
        ..ProcessOptions::default()
    }
}

fn platform(options: ProcessOptions) -> (Arc<ProcessPlatform>, Sandbox) {
    let dir = tempfile::tempdir().unwrap();
    let p = ProcessPlatform::new(&dir.path().join("state"), options).unwrap();
    (p.clone(), Sandbox(dir, p))
}

/// A test's temporary directory. Should the test fail before its shutdown, dropping this
/// SIGKILLs every process group still recorded in the state directory, so that a failed
/// test does not leave processes behind.
struct Sandbox(tempfile::TempDir, Arc<ProcessPlatform>);

impl Sandbox {
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        // No more (re)starts; then kill what is recorded, a few times over, to catch a
        // process that was being started just now. Blocking is fine on this failure path:
        // the runtime's workers are other threads.
        self.1.inner.begin_shutdown();
        for _ in 0..10 {
            for pid in recorded_pids(&self.path().join("state")) {
                let _ = nix::sys::signal::killpg(Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub(crate) fn exec_probe(cmd: &[&str]) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A script that sets a signal `trap` and then runs `body`, and a readiness probe that
/// passes only once the trap is in place: on a busy machine a SIGTERM sent as soon as the
/// replica is ready could otherwise beat the shell to its `trap` line.
fn trapping(dir: &Sandbox, trap: &str, body: &str) -> (String, Probe) {
    let mark = dir.path().join("trapped-$PORT").display().to_string();
    let script = format!("{trap}\ntouch \"{mark}\"\n{body}");
    (
        script,
        exec_probe(&["sh", "-c", &format!("test -e \"{mark}\"")]),
    )
}

fn spec(name: &str, script: &str, readiness: Probe) -> ReplicaSpec {
    ReplicaSpec {
        key: RevisionKey::new("default", name),
        uid: format!("uid-{name}"),
        configuration: "cfg".into(),
        service: "svc".into(),
        pod: PodSpec {
            containers: vec![Container {
                image: "ignored".into(),
                command: vec!["sh".into(), "-c".into(), script.into()],
                readiness_probe: Some(readiness),
                ..Default::default()
            }],
            ..Default::default()
        },
        grace_period: Duration::from_secs(5),
        name_prefix: String::new(),
        routed: true,
    }
}

/// Polls `replicas()` on every change (and every 100 ms, in case a receiver lagged) until
/// `pred` accepts them.
pub(crate) async fn wait_for<T>(
    p: &ProcessPlatform,
    key: &RevisionKey,
    what: &str,
    pred: impl Fn(&[ReplicaStatus]) -> Option<T>,
) -> T {
    let mut changes = p.changes();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = p.replicas(key);
        if let Some(t) = pred(&now) {
            return t;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}; replicas: {now:#?}");
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), changes.recv()).await;
    }
}

pub(crate) fn all_ready(n: usize) -> impl Fn(&[ReplicaStatus]) -> Option<Vec<ReplicaStatus>> {
    move |r| (r.len() == n && r.iter().all(|r| r.phase == ReplicaPhase::Ready)).then(|| r.to_vec())
}

/// Pids named by the records in the state directory.
fn recorded_pids(state: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(state) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let bytes = std::fs::read(e.ok()?.path()).ok()?;
            Some(serde_json::from_slice::<records::Record>(&bytes).ok()?.pid)
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

async fn shut_down(p: &ProcessPlatform, state: &Path, pids: &[i32]) {
    tokio::time::timeout(WAIT, p.shutdown())
        .await
        .expect("shutdown finished");
    for pid in pids {
        assert!(!alive(*pid), "process {pid} still alive after shutdown");
    }
    assert!(recorded_pids(state).is_empty(), "pid records left behind");
}

fn log_text(p: &ProcessPlatform, key: &RevisionKey) -> String {
    p.logs(key, None)
        .into_iter()
        .map(|l| l.line)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_get_their_own_port_env_and_become_ready_over_http() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let probe = Probe {
        http_get: Some(HttpGetAction {
            path: "/".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = spec(
        "hello-00001",
        r#"echo "env $PORT $K_REVISION $K_SERVICE $K_CONFIGURATION"
           echo "cwd $(pwd)"
           echo "names" $(env | cut -d= -f1 | sort)
           exec python3 -m http.server --bind 127.0.0.1 "$PORT""#,
        probe,
    );
    let mut s = s;
    s.pod.containers[0].working_dir = dir.path().display().to_string();
    p.scale(&s, 2);
    let ready = wait_for(&p, &s.key, "2 ready replicas", all_ready(2)).await;
    let names: Vec<&str> = ready.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["hello-00001-1", "hello-00001-2"]);
    let ports: BTreeSet<u16> = ready.iter().map(|r| r.address.port()).collect();
    assert_eq!(ports.len(), 2, "distinct ports: {ready:?}");
    let logs = log_text(&p, &s.key);
    // `$(pwd)` names no variable, so Kubernetes' expansion leaves it to the shell.
    assert!(
        logs.contains(&format!("cwd {}", dir.path().display())),
        "{logs}"
    );
    // Nothing of the test's own environment leaks in but the pass-through variables (and
    // what the shell itself exports).
    let names = logs
        .lines()
        .find_map(|l| l.strip_prefix("names "))
        .expect("env names");
    let allowed = [
        "PORT",
        "K_SERVICE",
        "K_CONFIGURATION",
        "K_REVISION",
        "PWD",
        "OLDPWD",
    ];
    for name in names.split(' ') {
        assert!(
            allowed.contains(&name) || super::PASS_THROUGH.contains(&name),
            "{name} leaked into the replica's environment"
        );
    }
    for r in &ready {
        assert!(r.address.ip().is_loopback());
        let want = format!("env {} hello-00001 svc cfg", r.address.port());
        assert!(logs.contains(&want), "{want:?} in {logs}");
        // The replica really answers on its address.
        tokio::net::TcpStream::connect(r.address).await.unwrap();
    }
    assert_eq!(p.revisions(), std::slice::from_ref(&s.key));
    let pids = recorded_pids(&state);
    assert_eq!(pids.len(), 2);
    shut_down(&p, &state, &pids).await;
    assert!(p.replicas(&s.key).is_empty());
    // After shutdown, scale does nothing.
    p.scale(&s, 1);
    assert!(p.replicas(&s.key).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_backs_off_with_growing_delays_and_records_the_exit() {
    let options = ProcessOptions {
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_millis(800),
        ..fast()
    };
    let (p, dir) = platform(options);
    let s = spec(
        "crash-00001",
        "echo starting; sleep 0.05; echo 'oops: bad config' >&2; exit 3",
        exec_probe(&["true"]),
    );
    p.scale(&s, 1);
    let backoff = wait_for(&p, &s.key, "back-off", |r| {
        r.first()
            .filter(|r| r.phase == ReplicaPhase::BackOff)
            .cloned()
    })
    .await;
    let exit = backoff.last_exit.expect("exit recorded");
    assert_eq!((exit.code, exit.signal), (Some(3), None));
    assert_eq!(exit.message, "starting\noops: bad config");

    // Restarts come after 200, 400, then 800 ms of back-off.
    let mut seen = Vec::new();
    for n in 1..=3 {
        wait_for(&p, &s.key, "a restart", |r| {
            r.first().filter(|r| r.restarts >= n).map(drop)
        })
        .await;
        seen.push(Instant::now());
    }
    let (first, second) = (seen[1] - seen[0], seen[2] - seen[1]);
    assert!(
        second >= Duration::from_millis(700),
        "second gap {second:?}"
    );
    assert!(second > first, "back-off grows: {first:?} then {second:?}");
    // Every incarnation's output is kept.
    assert!(log_text(&p, &s.key).matches("starting").count() >= 3);
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_by_signal_and_with_code_zero_are_crashes() {
    let (p, dir) = platform(fast());
    let cases = [
        // `$$` is Kubernetes' escape for `$`, so the shell's `$$` is written `$$$$`.
        ("signal-00001", "kill -9 $$$$", None, Some(9)),
        ("zero-00001", "echo done", Some(0), None),
        // Cannot even start: Kubernetes' StartError code.
        ("missing-00001", "", Some(128), None),
    ];
    for (name, script, code, signal) in cases {
        let mut s = spec(name, script, exec_probe(&["true"]));
        if script.is_empty() {
            s.pod.containers[0].command = vec!["/nonexistent/wisp-test-binary".into()];
        }
        p.scale(&s, 1);
        let exit = wait_for(&p, &s.key, "an exit", |r| r.first()?.last_exit.clone()).await;
        assert_eq!((exit.code, exit.signal), (code, signal), "{name}: {exit:?}");
        if script.is_empty() {
            assert!(
                exit.message.contains("/nonexistent/wisp-test-binary"),
                "{exit:?}"
            );
        }
    }
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_stops_the_highest_index_with_sigterm_first() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let (script, ready) = trapping(
        &dir,
        r#"trap 'echo "got TERM in $K_REVISION"; exit 0' TERM"#,
        "while true; do sleep 0.05; done",
    );
    let s = spec("graceful-00001", &script, ready);
    p.scale(&s, 2);
    wait_for(&p, &s.key, "2 ready replicas", all_ready(2)).await;
    let pids = recorded_pids(&state);
    // A stopped replica's buffered lines go with it; its last words can be followed.
    let mut follow = p.follow_logs(&s.key);
    let started = Instant::now();
    p.scale(&s, 1);
    let now = p.replicas(&s.key);
    let now: Vec<_> = now.iter().map(|r| (r.name.as_str(), r.phase)).collect();
    // The highest index goes; it shows as Terminating until it has exited, which a
    // replica that traps TERM and exits at once may already have done by now.
    assert!(
        now == [
            ("graceful-00001-1", ReplicaPhase::Ready),
            ("graceful-00001-2", ReplicaPhase::Terminating)
        ] || now == [("graceful-00001-1", ReplicaPhase::Ready)],
        "{now:?}"
    );
    let left = wait_for(&p, &s.key, "one replica", |r| {
        (r.len() == 1).then(|| r[0].clone())
    })
    .await;
    assert_eq!(left.name, "graceful-00001-1");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stopped by SIGTERM, not SIGKILL"
    );
    let last_words = tokio::time::timeout(WAIT, async {
        loop {
            let line = follow.recv().await.unwrap();
            if line.line.starts_with("got TERM") {
                return line;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (last_words.replica.as_str(), last_words.line.as_str()),
        ("graceful-00001-2", "got TERM in graceful-00001")
    );
    // Scaling up again reuses the free index.
    p.scale(&s, 2);
    let ready = wait_for(&p, &s.key, "2 ready replicas", all_ready(2)).await;
    assert_eq!(ready[1].name, "graceful-00001-2");
    let pids: Vec<i32> = pids.into_iter().chain(recorded_pids(&state)).collect();
    shut_down(&p, &state, &pids).await;
}

/// Whether the platform holds a spec for `key` (a revision at rest at zero holds none).
fn keeps_spec(p: &ProcessPlatform, key: &RevisionKey) -> bool {
    let state = super::lock(&p.inner.state);
    state.revisions[key].spec.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_at_rest_keeps_no_spec_and_wakes_with_the_one_it_is_given() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let (script, ready) = trapping(
        &dir,
        "trap 'exit 0' TERM",
        "while true; do sleep 0.05; done",
    );
    let s = spec("resting-00001", &script, ready);
    // First seen at zero: nothing of the pod is kept (10,000 such revisions held 26 MB).
    p.scale(&s, 0);
    assert!(p.replicas(&s.key).is_empty());
    assert!(!keeps_spec(&p, &s.key), "at rest from the start");
    // Woken: the spec the scale brings runs.
    p.scale(&s, 1);
    assert!(keeps_spec(&p, &s.key), "kept while it wants replicas");
    let first = wait_for(&p, &s.key, "1 ready replica", all_ready(1)).await;
    assert_eq!(first[0].name, "resting-00001-1");
    let pids = recorded_pids(&state);
    // Back to zero: kept until the last replica is gone, then dropped.
    p.scale(&s, 0);
    wait_for(&p, &s.key, "no replica", |r| r.is_empty().then_some(())).await;
    assert!(
        !keeps_spec(&p, &s.key),
        "at rest again once the replica is gone"
    );
    // And woken again: a replica starts as the first one did.
    p.scale(&s, 1);
    let again = wait_for(&p, &s.key, "1 ready replica", all_ready(1)).await;
    assert_eq!(again[0].name, "resting-00001-1");
    let pids: Vec<i32> = pids.into_iter().chain(recorded_pids(&state)).collect();
    shut_down(&p, &state, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let (script, ready) = trapping(&dir, "trap '' TERM", "while true; do sleep 0.05; done");
    let mut s = spec("stubborn-00001", &script, ready);
    s.grace_period = Duration::from_millis(500);
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let pids = recorded_pids(&state);
    let started = Instant::now();
    p.scale(&s, 0);
    wait_for(&p, &s.key, "no replicas", |r| r.is_empty().then_some(())).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "waited out the grace period: {took:?}"
    );
    assert!(!alive(pids[0]));
    shut_down(&p, &state, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_liveness_and_startup_probes_restart_the_replica() {
    let (p, dir) = platform(fast());
    let nothing_listens = Probe {
        tcp_socket: Some(TcpSocketAction::default()),
        ..Default::default()
    };
    let strict = |probe: Probe| Probe {
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..probe
    };

    let mut live = spec(
        "live-00001",
        "echo up; exec sleep 60",
        exec_probe(&["true"]),
    );
    // Two failures (one period apart) leave the process time to say something first.
    live.pod.containers[0].liveness_probe = Some(Probe {
        failure_threshold: Some(2),
        ..strict(nothing_listens)
    });
    let mut startup = spec("startup-00001", "exec sleep 60", exec_probe(&["true"]));
    startup.pod.containers[0].startup_probe = Some(strict(exec_probe(&["false"])));

    for s in [&live, &startup] {
        p.scale(s, 1);
    }
    let r = wait_for(&p, &live.key, "a liveness restart", |r| {
        r.first().filter(|r| r.restarts >= 1).cloned()
    })
    .await;
    // `sleep` dies of the SIGTERM.
    let exit = r.last_exit.unwrap();
    assert_eq!((exit.code, exit.signal), (None, Some(15)));
    assert_eq!(exit.message, "up");

    let r = wait_for(&p, &startup.key, "a startup restart", |r| {
        r.first().filter(|r| r.restarts >= 1).cloned()
    })
    .await;
    assert_eq!(r.last_exit.unwrap().signal, Some(15));
    // Readiness never ran while the startup probe was failing.
    assert_ne!(r.phase, ReplicaPhase::Ready);
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

/// `Platform::usage` of a process replica covers its whole tree: here all the CPU is a
/// background child's, the main process only sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_the_whole_process_tree() {
    let (p, dir) = platform(fast());
    let s = spec(
        "busy-00001",
        "(while :; do :; done) &\nexec sleep 60",
        exec_probe(&["true"]),
    );
    p.scale(&s, 1);
    let r = wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let first = p.usage(&s.key);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].name, r[0].name);
    assert!(first[0].memory > 0, "{first:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = p.usage(&s.key);
    let used = second[0].cpu.saturating_sub(first[0].cpu);
    // A spinning child gets well over a tenth of a CPU even on a busy machine.
    assert!(used >= Duration::from_millis(100), "{first:?} → {second:?}");
    p.scale(&s, 0);
    wait_for(&p, &s.key, "stopped", |r| r.is_empty().then_some(())).await;
    assert!(p.usage(&s.key).is_empty(), "a stopped replica has no usage");
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_probe_after_ready() {
    let (p, dir) = platform(fast());
    let marker = dir.path().join("healthy");
    std::fs::write(&marker, "").unwrap();
    let check = format!("test -e {}", marker.display());
    let s = spec(
        "flaky-00001",
        "exec sleep 60",
        exec_probe(&["sh", "-c", &check]),
    );
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    std::fs::remove_file(&marker).unwrap();
    wait_for(&p, &s.key, "not ready", |r| {
        r.first()
            .filter(|r| r.phase == ReplicaPhase::NotReady)
            .map(drop)
    })
    .await;
    std::fs::write(&marker, "").unwrap();
    let r = wait_for(&p, &s.key, "ready again", all_ready(1)).await;
    assert_eq!(r[0].restarts, 0);
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_command_is_a_failure_and_nothing_starts() {
    let (p, dir) = platform(fast());
    let mut s = spec("image-00001", "", Probe::default());
    s.pod.containers[0].command.clear();
    s.pod.containers[0].image = "ghcr.io/knative/helloworld-go".into();
    p.scale(&s, 2);
    let r = p.replicas(&s.key);
    assert_eq!(r.len(), 2);
    let failure = r[0].failure.clone().expect("a failure");
    assert_eq!(failure.reason, "ContainerMissing");
    assert!(
        failure
            .message
            .contains("\"ghcr.io/knative/helloworld-go\""),
        "{failure:?}"
    );
    assert_eq!(p.revisions(), std::slice::from_ref(&s.key));
    assert!(recorded_pids(&dir.path().join("state")).is_empty());
    p.scale(&s, 0);
    assert!(p.replicas(&s.key).is_empty());
    assert!(p.revisions().is_empty());
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_tail_and_follow() {
    let (p, dir) = platform(fast());
    let s = spec(
        "logs-00001",
        "for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2; exec sleep 60",
        exec_probe(&["true"]),
    );
    // Following works before the revision has replicas.
    let mut follow = p.follow_logs(&s.key);
    p.scale(&s, 1);
    let mut followed = Vec::new();
    while followed.len() < 6 {
        match tokio::time::timeout(WAIT, follow.recv())
            .await
            .expect("a line")
        {
            Ok(line) => followed.push(line),
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => panic!("follow channel closed"),
        }
    }
    let stdout: Vec<&str> = followed
        .iter()
        .filter(|l| l.stream == "stdout")
        .map(|l| l.line.as_str())
        .collect();
    assert_eq!(stdout, ["line1", "line2", "line3", "line4", "line5"]);
    assert!(
        followed
            .iter()
            .any(|l| l.stream == "stderr" && l.line == "oops")
    );
    assert!(followed.iter().all(|l| l.replica == "logs-00001-1"));

    assert_eq!(p.logs(&s.key, None), followed, "logs keep arrival order");
    assert_eq!(p.logs(&s.key, Some(2)), followed[4..]);
    p.remove(&s.key);
    wait_for(&p, &s.key, "removal", |r| r.is_empty().then_some(())).await;
    assert!(p.logs(&s.key, None).is_empty(), "remove forgets the logs");
    assert!(p.revisions().is_empty());
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_revision_replaces_the_old_replicas() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let s = spec(
        "again-00001",
        "echo uid=$K_REVISION; exec sleep 60",
        exec_probe(&["true"]),
    );
    p.scale(&s, 1);
    let old = wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let old_pids = recorded_pids(&state);
    let recreated = ReplicaSpec {
        uid: "uid-new".into(),
        ..s.clone()
    };
    p.scale(&recreated, 1);
    let phases: Vec<ReplicaPhase> = p.replicas(&s.key).iter().map(|r| r.phase).collect();
    // The old replica shows as Terminating until it has exited, which one that SIGTERM
    // kills at once may already have done by now; and on a loaded machine this thread may
    // be descheduled long enough for the new replica to pass its (`true`) probe as well.
    assert!(
        matches!(
            phases[..],
            [ReplicaPhase::Terminating, ReplicaPhase::Starting]
                | [ReplicaPhase::Starting]
                | [ReplicaPhase::Ready]
        ),
        "{phases:?}"
    );
    let new = wait_for(&p, &s.key, "only the new replica", |r| {
        (r.len() == 1 && r[0].phase == ReplicaPhase::Ready).then(|| r[0].clone())
    })
    .await;
    assert_ne!(new.address, old[0].address);
    assert!(!alive(old_pids[0]));
    let pids = recorded_pids(&state);
    shut_down(&p, &state, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_everything_in_every_state() {
    let mut options = fast();
    options.backoff_initial = Duration::from_secs(30);
    let (p, dir) = platform(options);
    let state = dir.path().join("state");
    let running = spec("run-00001", "exec sleep 60", exec_probe(&["true"]));
    let mut stubborn = spec(
        "stub-00001",
        "trap '' TERM; exec sleep 60",
        exec_probe(&["true"]),
    );
    stubborn.grace_period = Duration::from_millis(300);
    let crashing = spec("crash-00001", "exit 1", exec_probe(&["true"]));
    let starting = spec("start-00001", "exec sleep 60", exec_probe(&["false"]));
    for s in [&running, &stubborn, &crashing, &starting] {
        p.scale(s, 2);
    }
    wait_for(&p, &running.key, "ready", all_ready(2)).await;
    wait_for(&p, &stubborn.key, "ready", all_ready(2)).await;
    wait_for(&p, &crashing.key, "back-off", |r| {
        r.iter()
            .all(|r| r.phase == ReplicaPhase::BackOff)
            .then_some(())
    })
    .await;
    let pids = recorded_pids(&state);
    assert!(pids.len() >= 6, "{pids:?}");
    shut_down(&p, &state, &pids).await;
    for s in [&running, &stubborn, &crashing, &starting] {
        assert!(p.replicas(&s.key).is_empty());
    }
    assert!(p.revisions().is_empty());
}

/// Starts `sleep` in its own process group, as a replica of a crashed wisp would be.
async fn orphan() -> (tokio::process::Child, i32) {
    let child = tokio::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap() as i32;
    (child, pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_an_earlier_run_are_cleaned_up_but_recycled_pids_are_spared() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let (mut left_over, pid) = orphan().await;
    let (mut unrelated, other) = orphan().await;
    let record = |pid: i32, start_time: u64| records::Record {
        pid,
        pgid: pid,
        start_time,
        namespace: "default".into(),
        revision: "old-00001".into(),
        replica: "old-00001-1".into(),
    };
    let start = records::start_time(pid).await.unwrap();
    records::write(&state, &record(pid, start)).await.unwrap();
    // Same pid number, different start time: a process that merely reuses the pid.
    let other_start = records::start_time(other).await.unwrap();
    records::write(&state, &record(other, other_start + 1))
        .await
        .unwrap();
    std::fs::write(state.join("garbage.json"), "{").unwrap();

    let p = ProcessPlatform::new(&state, fast()).unwrap();
    let status = tokio::time::timeout(WAIT, left_over.wait())
        .await
        .unwrap()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "stopped with SIGTERM");
    tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
    assert!(
        unrelated.try_wait().unwrap().is_none(),
        "a recycled pid is never killed"
    );
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "records deleted"
    );
    unrelated.kill().await.unwrap();
    shut_down(&p, &state, &[]).await;
}

#[test]
fn a_new_replica_never_gets_a_port_another_replica_holds() {
    use std::collections::HashSet;

    use super::{PORT_ATTEMPTS, port_not_in};

    let taken: HashSet<u16> = [40_001, 40_002].into();
    // (ports the kernel hands out in turn, the port chosen or None for an error)
    let cases: [(&[u16], Option<u16>); 4] = [
        (&[40_003], Some(40_003)),
        (&[40_001, 40_002, 40_001, 40_004], Some(40_004)),
        (&[], None),
        (&[40_001; PORT_ATTEMPTS], None),
    ];
    for (offered, want) in cases {
        let mut offered_iter = offered.iter().copied();
        let got = port_not_in(
            |p| taken.contains(&p),
            || {
                offered_iter
                    .next()
                    .ok_or_else(|| std::io::Error::other("no more ports"))
            },
        );
        assert_eq!(got.ok(), want, "offered {offered:?}");
    }
}

#[test]
fn what_the_process_platform_leaves_out_is_named() {
    let app = |name: &str, port: bool| Container {
        name: name.into(),
        command: vec!["app".into()],
        ports: if port {
            vec![wisp_api::serving::ContainerPort {
                container_port: 8080,
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let pod = |containers: Vec<Container>| PodSpec {
        containers,
        ..Default::default()
    };
    let mut full = pod(vec![app("proxy", false), app("user-container", true)]);
    full.containers[0].readiness_probe = Some(exec_probe(&["true"]));
    full.init_containers = vec![app("migrate", false)];
    full.volumes =
        serde_json::from_value(serde_json::json!([{"name": "cfg", "emptyDir": {}}])).unwrap();
    full.service_account_name = "robot".into();
    let cases: [(&str, PodSpec, &[&str]); 3] = [
        ("one container: nothing", pod(vec![app("a", true)]), &[]),
        (
            "sidecars run, as processes of the replica",
            pod(vec![app("a", false), app("b", false)]),
            &[],
        ),
        (
            "everything else in a pod (init containers and sidecars run)",
            full,
            &["volume(s) cfg", "service account robot"],
        ),
    ];
    for (what, pod, want) in cases {
        assert_eq!(super::left_out(&pod), want, "{what}");
    }
}

/// A container of a test pod: `sh -c script`, with `DIR` (the test's directory) in its env
/// so that the pod's containers share files there.
fn sh(name: &str, dir: &Sandbox, script: &str) -> Container {
    Container {
        name: name.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![wisp_api::serving::EnvVar {
            name: "DIR".into(),
            value: Some(dir.path().display().to_string()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A pod of `init` containers and an app: `app` is the serving container (it has the
/// port), ready once `$DIR/ready` exists.
fn pod_spec(name: &str, dir: &Sandbox, init: Vec<Container>, app: Container) -> ReplicaSpec {
    let mut s = spec(name, "", exec_probe(&["true"]));
    let mut app = app;
    app.ports = vec![wisp_api::serving::ContainerPort {
        container_port: 8080,
        ..Default::default()
    }];
    app.readiness_probe = Some(exec_probe(&[
        "sh",
        "-c",
        &format!("test -e {}/ready", dir.path().display()),
    ]));
    s.pod.containers = vec![app];
    s.pod.init_containers = init;
    s
}

/// Waits until the revision's logs contain `needle` (output is read asynchronously).
async fn wait_log(p: &ProcessPlatform, key: &RevisionKey, needle: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let logs = log_text(p, key);
        if logs.contains(needle) {
            return;
        }
        assert!(Instant::now() < deadline, "{needle:?} never logged: {logs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_to_completion_before_the_app_once_per_sandbox() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    // `$(DIR)` is Kubernetes' expansion of the container's env, `$DIR`/`$PORT` the shell's.
    let s = pod_spec(
        "init-00001",
        &dir,
        vec![
            sh(
                "first",
                &dir,
                "sleep 0.2; echo first >> $(DIR)/order; echo \"first says port=[$PORT] rev=[$K_REVISION]\"",
            ),
            sh(
                "second",
                &dir,
                "echo second >> $(DIR)/order; echo second done >&2",
            ),
        ],
        sh(
            "app",
            &dir,
            // The app reads what the init containers wrote; its first run crashes, and
            // its restart (same sandbox) must not run the init containers again.
            "echo \"app sees $(cat $DIR/order | tr '\\n' ' ')port=$PORT\"; echo run >> $DIR/runs; \
             if [ $(wc -l < $DIR/runs) -lt 2 ]; then exit 3; fi; touch $DIR/ready; exec sleep 1000",
        ),
    );
    p.scale(&s, 1);
    let ready = wait_for(&p, &s.key, "a ready replica", all_ready(1)).await;
    assert_eq!(ready[0].init_done, 2);
    assert_eq!(ready[0].restarts, 1, "{ready:?}");
    // The crash was the app's: no init container is named.
    let exit = ready[0].last_exit.clone().expect("the app's crash");
    assert_eq!((exit.code, exit.init_container), (Some(3), None));
    assert_eq!(lines(&dir.path().join("order")), ["first", "second"]);
    assert_eq!(lines(&dir.path().join("runs")), ["run", "run"]);
    let port = ready[0].address.port();
    // Init containers' output is in the replica's logs; PORT is the serving container's.
    // Nor K_* (an init container's env is as written).
    wait_log(&p, &s.key, "first says port=[] rev=[]").await;
    wait_log(&p, &s.key, "second done").await;
    wait_log(&p, &s.key, &format!("app sees first second port={port}")).await;
    let pids = recorded_pids(&state);
    assert_eq!(pids.len(), 1, "only the app's group is left: {pids:?}");
    shut_down(&p, &state, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_init_container_keeps_the_app_from_starting_and_is_retried() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let s = pod_spec(
        "broken-00001",
        &dir,
        vec![
            sh("fine", &dir, "echo fine >> $(DIR)/fine"),
            sh(
                "migrate",
                &dir,
                "echo attempt >> $(DIR)/attempts; echo 'migration failed' >&2; exit 7",
            ),
        ],
        sh("app", &dir, "touch $DIR/app-ran; exec sleep 1000"),
    );
    p.scale(&s, 1);
    // Retried with back-off, like a crashing app: two failures seen.
    let failed = wait_for(&p, &s.key, "a retried init failure", |r| {
        r.first()
            .filter(|r| r.phase == ReplicaPhase::BackOff && r.restarts >= 1)
            .cloned()
    })
    .await;
    let exit = failed.last_exit.expect("the init container's exit");
    assert_eq!(exit.init_container.as_deref(), Some("migrate"));
    assert_eq!((exit.code, exit.signal), (Some(7), None));
    assert_eq!(exit.message, "migration failed");
    assert_eq!(failed.init_done, 1, "the first init container completed");
    assert!(failed.times.started.is_none(), "the app never started");
    assert!(!dir.path().join("app-ran").exists());
    // Only the failed init container runs again; the one that completed does not.
    assert!(lines(&dir.path().join("attempts")).len() >= 2);
    assert_eq!(lines(&dir.path().join("fine")), ["fine"]);
    shut_down(&p, &state, &[]).await;
    assert!(!dir.path().join("app-ran").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_run_with_the_replica_in_its_group_and_stop_with_it() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let mut s = pod_spec(
        "sidecar-00001",
        &dir,
        Vec::new(),
        sh(
            "app",
            &dir,
            "touch $DIR/ready; while true; do sleep 0.05; done",
        ),
    );
    let mut sidecar = sh(
        "proxy",
        &dir,
        // `$$$$` is the shell's `$$` (its pid) once Kubernetes' `$$` escape is undone;
        // `exec` keeps that pid for the sleep.
        "echo \"proxy port=[$PORT] greeting=$(GREETING)\"; echo $$$$ > $(DIR)/proxy.pid; \
         trap 'touch $DIR/proxy-term; exit 0' TERM; while true; do sleep 0.05; done",
    );
    sidecar.env.push(wisp_api::serving::EnvVar {
        name: "GREETING".into(),
        value: Some("hi from $(K_REVISION)".into()),
        ..Default::default()
    });
    s.pod.containers.insert(0, sidecar);
    p.scale(&s, 1);
    wait_for(&p, &s.key, "a ready replica", all_ready(1)).await;
    let pid_file = dir.path().join("proxy.pid");
    let deadline = Instant::now() + WAIT;
    let sidecar_pid: i32 = loop {
        if let Some(pid) = lines(&pid_file).first().and_then(|l| l.parse().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the sidecar never wrote its pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(alive(sidecar_pid));
    let pids = recorded_pids(&state);
    assert_eq!(pids.len(), 1);
    // In the serving process's group: the replica's signals reach it.
    assert_eq!(
        nix::unistd::getpgid(Some(Pid::from_raw(sidecar_pid))).unwrap(),
        Pid::from_raw(pids[0])
    );
    let usage = p.usage(&s.key);
    assert_eq!(usage.len(), 1);
    // Its output is the replica's; PORT is the serving container's alone.
    wait_log(&p, &s.key, "proxy port=[] greeting=hi from sidecar-00001").await;
    // Stopped with the replica, gracefully (SIGTERM reached it), and gone.
    p.scale(&s, 0);
    wait_for(&p, &s.key, "no replicas", |r| r.is_empty().then_some(())).await;
    assert!(
        !alive(sidecar_pid),
        "sidecar {sidecar_pid} outlived its replica"
    );
    assert!(
        dir.path().join("proxy-term").exists(),
        "SIGTERM reached the sidecar"
    );
    shut_down(&p, &state, &[sidecar_pid]).await;
}

/// A port nothing listens on now (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `multi-container-probing`: the replica is Ready only once every sidecar's readiness
/// probe passes too; an exec probe runs with the sidecar's env, an HTTP probe reaches the
/// sidecar's own port on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_readiness_probes_gate_the_replica() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let mut s = pod_spec(
        "probed-00001",
        &dir,
        Vec::new(),
        sh("app", &dir, "touch $DIR/ready; exec sleep 1000"),
    );
    let mut proxy = sh("proxy", &dir, "exec sleep 1000");
    proxy.env[0].name = "PROXY_DIR".into();
    proxy.readiness_probe = Some(exec_probe(&["sh", "-c", "test -e $PROXY_DIR/proxy-ready"]));
    let web_port = free_port();
    let mut web = sh(
        "web",
        &dir,
        &format!(
            "while [ ! -e $DIR/web-go ]; do sleep 0.05; done; \
             cd $DIR && exec python3 -m http.server {web_port} --bind 127.0.0.1"
        ),
    );
    web.readiness_probe = Some(Probe {
        http_get: Some(HttpGetAction {
            path: "/".into(),
            port: web_port.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    s.pod.containers.extend([proxy, web]);
    p.scale(&s, 1);
    let unready = |names: &'static [&'static str]| {
        move |r: &[ReplicaStatus]| {
            r.first()
                .filter(|r| r.unready == names && r.phase == ReplicaPhase::Starting)
                .cloned()
        }
    };
    // The serving container is ready; the sidecars are not, nor is the replica.
    wait_for(
        &p,
        &s.key,
        "only the sidecars unready",
        unready(&["proxy", "web"]),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = p.replicas(&s.key);
    assert_eq!(r[0].phase, ReplicaPhase::Starting, "{r:?}");
    std::fs::write(dir.path().join("proxy-ready"), "").unwrap();
    wait_for(&p, &s.key, "only web unready", unready(&["web"])).await;
    std::fs::write(dir.path().join("web-go"), "").unwrap();
    let r = wait_for(&p, &s.key, "a ready replica", all_ready(1)).await;
    assert!(r[0].unready.is_empty(), "{r:?}");
    assert_eq!(r[0].restarts, 0);
    // A sidecar that stops being ready takes the replica out of rotation.
    std::fs::remove_file(dir.path().join("proxy-ready")).unwrap();
    wait_for(&p, &s.key, "not ready again", |r| {
        r.first()
            .filter(|r| r.phase == ReplicaPhase::NotReady && r.unready == ["proxy"])
            .map(drop)
    })
    .await;
    shut_down(&p, &state, &[]).await;
}

/// A sidecar readiness probe naming no port fails the revision as Knative fails its
/// deployment; nothing starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_probe_without_a_port_is_a_failure_and_nothing_starts() {
    let (p, dir) = platform(fast());
    let mut s = pod_spec(
        "portless-00001",
        &dir,
        Vec::new(),
        sh("app", &dir, "exec sleep 1000"),
    );
    let mut proxy = sh("proxy", &dir, "exec sleep 1000");
    proxy.readiness_probe = Some(Probe {
        tcp_socket: Some(TcpSocketAction::default()),
        ..Default::default()
    });
    s.pod.containers.push(proxy);
    p.scale(&s, 1);
    let r = p.replicas(&s.key);
    let failure = r[0].failure.clone().expect("a failure");
    assert_eq!(
        (failure.reason.as_str(), failure.message.as_str()),
        (
            "CreateContainerConfigError",
            "sidecar readiness probe does not define probe port on container: proxy"
        )
    );
    assert!(recorded_pids(&dir.path().join("state")).is_empty());
    shut_down(&p, &dir.path().join("state"), &[]).await;
}

/// A sidecar's failing liveness probe restarts the replica, as the serving container's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sidecar_liveness_probe_restarts_the_replica() {
    let (p, dir) = platform(fast());
    let state = dir.path().join("state");
    let mut s = pod_spec(
        "sidelive-00001",
        &dir,
        Vec::new(),
        sh(
            "app",
            &dir,
            "touch $DIR/ready; echo app up; exec sleep 1000",
        ),
    );
    let mut proxy = sh("proxy", &dir, "exec sleep 1000");
    proxy.liveness_probe = Some(Probe {
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..exec_probe(&["sh", "-c", "test -e $DIR/alive"])
    });
    s.pod.containers.push(proxy);
    std::fs::write(dir.path().join("alive"), "").unwrap();
    p.scale(&s, 1);
    wait_for(&p, &s.key, "a ready replica", all_ready(1)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(p.replicas(&s.key)[0].restarts, 0, "alive: no restart");
    std::fs::remove_file(dir.path().join("alive")).unwrap();
    let r = wait_for(&p, &s.key, "a liveness restart", |r| {
        r.first().filter(|r| r.restarts >= 1).cloned()
    })
    .await;
    // The replica's run was stopped (SIGTERM), not crashed.
    let exit = r.last_exit.unwrap();
    assert_eq!((exit.code, exit.signal), (None, Some(15)));
    shut_down(&p, &state, &[]).await;
}

#[test]
fn every_container_needs_a_command_on_the_process_runtime() {
    let app = |name: &str| Container {
        name: name.into(),
        command: vec!["app".into()],
        ..Default::default()
    };
    let bare = |name: &str| Container {
        name: name.into(),
        ..Default::default()
    };
    let base = |containers: Vec<Container>, init: Vec<Container>| {
        let mut s = spec("x-00001", "", Probe::default());
        s.pod.containers = containers;
        s.pod.init_containers = init;
        s
    };
    let mut mounted = app("seed");
    mounted.volume_mounts = vec![wisp_api::serving::VolumeMount {
        name: "data".into(),
        mount_path: "/data".into(),
        ..Default::default()
    }];
    /// The failure's reason and the start of its message, if any.
    type Want = Option<(&'static str, &'static str)>;
    let cases: [(&str, ReplicaSpec, Want); 5] = [
        (
            "all have commands",
            base(vec![app("a"), app("b")], vec![app("i")]),
            None,
        ),
        (
            "a sidecar without one",
            base(vec![app("a"), bare("proxy")], Vec::new()),
            Some((
                "ContainerMissing",
                "spec.containers[1] (\"proxy\"): the container has no `command` to run",
            )),
        ),
        (
            "an init container without one",
            base(vec![app("a")], vec![app("i"), bare("migrate")]),
            Some((
                "ContainerMissing",
                "spec.initContainers[1] (\"migrate\"): the container has no `command` to run",
            )),
        ),
        (
            "the serving container's failure comes first",
            base(vec![bare("proxy"), bare("a")], Vec::new()),
            Some(("ContainerMissing", "the container has no `command` to run")),
        ),
        (
            "an init container with a volume",
            base(vec![app("a")], vec![mounted]),
            Some((
                super::host::VOLUME_MOUNT_UNSUPPORTED,
                "spec.initContainers[0].volumeMounts[0].mountPath \"/data\": the process runtime",
            )),
        ),
    ];
    for (what, s, want) in cases {
        let got = super::host::failure(&s);
        match (got, want) {
            (None, None) => {}
            (Some(f), Some((reason, message))) => {
                assert_eq!(f.reason, reason, "{what}");
                assert!(f.message.starts_with(message), "{what}: {}", f.message);
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}
