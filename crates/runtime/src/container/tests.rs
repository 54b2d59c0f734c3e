//! The container platform against real runtimes (wisp's own and runc), real namespaces and
//! a real bridge.
//!
//! These need root and runc (CI has both; `.ci/run` installs runc). Without them each test
//! prints why and returns. Each scenario runs once per runtime (`native` and `runc`
//! submodules of the scenario's name). The image is a directory each test builds: the
//! `hello` sample (built on demand), bash and sleep, with their shared libraries
//! (`hostfs`). Every test has its own bridge, subnet and state directory (so they run in
//! parallel), bounds every wait, and checks that its containers and namespaces are gone at
//! the end.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wisp_api::serving::{
    Capabilities, Container, ContainerPort, EnvVar, PodSpec, ResourceRequirements, SecurityContext,
};

use super::{ContainerOptions, ImageConfig, PreparedImage, Runtime, hostfs::FixedImage};
use crate::{
    Platform, ReplicaSpec, RevisionKey,
    process::{
        ProcessOptions, ProcessPlatform,
        tests::{WAIT, all_ready, exec_probe, wait_for},
    },
};

/// Which runtime a test runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rt {
    Native,
    Runc,
}

/// Runs scenario `$name(rt, n)` once per runtime: `$name::native` with bridge number `$n`,
/// `$name::runc` with `$n + 100`.
macro_rules! both_runtimes {
    ($name:ident, $n:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn native() {
                super::$name(super::Rt::Native, $n).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn runc() {
                super::$name(super::Rt::Runc, $n + 100).await
            }
        }
    };
}

/// Why these tests cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("container tests need root (namespaces, bridges, cgroups)".into());
    }
    if super::find_binary(Path::new("runc")).is_none() {
        return Some("container tests need runc (apt-get install runc)".into());
    }
    None
}

macro_rules! require_containers {
    () => {
        if let Some(why) = cannot_run() {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

/// Where cargo puts this workspace's binaries (the test binary is in `<target>/debug/deps`).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn hello_bin() -> PathBuf {
    let path = bin_dir().join("hello");
    if !path.exists() {
        cargo_build(&["-p", "wisp-samples", "--bin", "hello"]);
    }
    path
}

fn cargo_build(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = std::process::Command::new(cargo)
        .arg("build")
        .args(args)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cargo build {args:?} failed");
}

/// wisp's container helper as this crate builds it, always brought up to date: the init
/// must be the code under test, not an older build.
fn init_bin() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| cargo_build(&["-p", "wisp-runtime", "--bin", "wisp-container-init"]));
    bin_dir().join("wisp-container-init")
}

/// A rootfs with the `hello` sample at `/hello`, bash and sleep, and a `passwd`. No /tmp:
/// the platform provides one.
fn build_rootfs(root: &Path) {
    let binaries = [
        (hello_bin(), "/hello"),
        ("/bin/bash".into(), "/bin/bash"),
        ("/usr/bin/sleep".into(), "/usr/bin/sleep"),
    ];
    super::hostfs::build(root, &binaries).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/tmp:/bin/bash\n",
    )
    .unwrap();
}

/// One test's platform and directory. Dropping it after a failure removes whatever the test
/// left (containers, namespaces, bridge), so a failed test leaves nothing behind.
struct Fixture {
    dir: tempfile::TempDir,
    options: ContainerOptions,
    images: Arc<FixedImage>,
}

impl Fixture {
    /// `n` makes the bridge (`wct<n>`) and subnet (`10.213.<n>.0/24`) this test's own.
    fn new(rt: Rt, n: u8) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("image");
        build_rootfs(&rootfs);
        let options = ContainerOptions {
            supervision: ProcessOptions {
                backoff_initial: Duration::from_millis(100),
                backoff_max: Duration::from_millis(400),
                ready_probe_interval: Duration::from_millis(100),
                ..ProcessOptions::default()
            },
            state_dir: dir.path().join("state"),
            bridge: format!("wct{n}"),
            subnet: format!("10.213.{n}.0/24"),
            runtime: match rt {
                Rt::Native => Runtime::Native {
                    program: init_bin(),
                },
                Rt::Runc => Runtime::runc(),
            },
        };
        let images = Arc::new(FixedImage(PreparedImage {
            rootfs,
            config: ImageConfig {
                entrypoint: vec!["/hello".into()],
                env: vec!["HOST=0.0.0.0".into()],
                ..ImageConfig::default()
            },
        }));
        Fixture {
            dir,
            options,
            images,
        }
    }

    fn platform(&self) -> Arc<ProcessPlatform> {
        ProcessPlatform::containers(self.options.clone(), self.images.clone()).unwrap()
    }

    fn runc_root(&self) -> PathBuf {
        self.options.state_dir.join("runc")
    }

    /// This test's containers: those runc knows under its root, and the cgroups of its
    /// containers (wisp's runtime keeps no other state).
    fn containers(&self) -> Vec<String> {
        let cgroups =
            Path::new("/sys/fs/cgroup/memory").join(format!("wisp-{}", self.options.bridge));
        let mut found: Vec<String> = std::fs::read_dir(cgroups)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        found.extend(self.runc_containers());
        found.sort();
        found.dedup();
        found
    }

    fn runc_containers(&self) -> Vec<String> {
        let out = std::process::Command::new("runc")
            .arg("--root")
            .arg(self.runc_root())
            .args(["list", "-q"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// This test's network namespaces.
    fn namespaces(&self) -> Vec<String> {
        let prefix = format!("{}-", self.options.bridge);
        std::fs::read_dir("/var/run/netns")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn assert_nothing_left(&self) {
        assert_eq!(self.containers(), Vec::<String>::new(), "containers left");
        assert_eq!(self.namespaces(), Vec::<String>::new(), "namespaces left");
    }

    /// After a shutdown: nothing of the platform itself either.
    fn assert_torn_down(&self) {
        self.assert_nothing_left();
        let bridge = Path::new("/sys/class/net").join(&self.options.bridge);
        assert!(!bridge.exists(), "bridge {} left", self.options.bridge);
        let cgroup =
            Path::new("/sys/fs/cgroup/memory").join(format!("wisp-{}", self.options.bridge));
        assert!(!cgroup.exists(), "cgroup {} left", cgroup.display());
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for id in self.runc_containers() {
            let _ = std::process::Command::new("runc")
                .arg("--root")
                .arg(self.runc_root())
                .args(["delete", "-f", &id])
                .status();
        }
        for ns in self.namespaces() {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &ns])
                .status();
        }
        super::unmount_under(self.dir.path());
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.options.bridge])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::process::Command::new("iptables")
            .args(["-t", "nat", "-D", "POSTROUTING", "-s", &self.options.subnet])
            .args(["!", "-o", &self.options.bridge, "-j", "MASQUERADE"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn hello(name: &str) -> Container {
    Container {
        name: name.into(),
        image: "example.com/hello".into(),
        ports: vec![ContainerPort {
            container_port: 8080,
            ..ContainerPort::default()
        }],
        ..Container::default()
    }
}

fn bash(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: "example.com/hello".into(),
        command: vec!["/bin/bash".into(), "-c".into(), script.into()],
        ..Container::default()
    }
}

fn spec(name: &str, containers: Vec<Container>, grace: Duration) -> ReplicaSpec {
    ReplicaSpec {
        key: RevisionKey::new("default", name),
        uid: format!("uid-{name}"),
        configuration: "cfg".into(),
        service: "svc".into(),
        pod: PodSpec {
            containers,
            ..PodSpec::default()
        },
        grace_period: grace,
        name_prefix: String::new(),
        routed: true,
    }
}

async fn get(address: SocketAddr) -> String {
    let mut s = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .unwrap()
    .unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

both_runtimes!(
    two_replicas_listen_on_the_same_fixed_port_and_both_answer,
    1
);
async fn two_replicas_listen_on_the_same_fixed_port_and_both_answer(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    let s = spec(
        "fixed",
        vec![hello("user-container")],
        Duration::from_secs(5),
    );
    p.scale(&s, 2);
    let ready = wait_for(&p, &s.key, "two ready replicas", all_ready(2)).await;
    let addrs: Vec<SocketAddr> = ready.iter().map(|r| r.address).collect();
    assert_ne!(addrs[0], addrs[1]);
    for a in &addrs {
        assert_eq!(a.port(), 8080, "{a}");
        assert!(
            a.ip().to_string().starts_with(&format!("10.213.{n}.")),
            "{a}"
        );
        let answer = get(*a).await;
        assert!(answer.contains("Hello World!"), "{a}: {answer}");
    }
    assert_eq!(fx.containers().len(), 2);
    assert_eq!(fx.namespaces().len(), 2);
    // Deleting the revision removes its containers and sandboxes.
    p.remove(&s.key);
    wait_for(&p, &s.key, "removed", |r| r.is_empty().then_some(())).await;
    fx.assert_nothing_left();
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(a_sidecar_reaches_the_app_on_localhost_and_logs_are_kept, 2);
async fn a_sidecar_reaches_the_app_on_localhost_and_logs_are_kept(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
    // The bridge, and so the gateway's address, exists once a first replica runs.
    let warm = spec(
        "warm",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    p.scale(&warm, 1);
    wait_for(&p, &warm.key, "ready", all_ready(1)).await;
    // Outbound: a listener on the host's side of the bridge (the replica's gateway).
    let host = tokio::net::TcpListener::bind(format!("10.213.{n}.1:0"))
        .await
        .unwrap();
    let host_port = host.local_addr().unwrap().port();
    // bash's /dev/tcp: connect to the app over the sandbox's loopback, print the answer
    // (with builtins only: the image has no `cat`); then say hello to the host.
    let sidecar = bash(
        "sidecar",
        &format!(
            "until exec 3<>/dev/tcp/127.0.0.1/8080; do sleep 0.1; done; \
             printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3; \
             while IFS= read -r l <&3; do echo \"${{l%$'\\r'}}\"; done; \
             echo \"host=$(< /etc/hostname)\"; \
             exec 4<>/dev/tcp/10.213.{n}.1/{host_port}; echo \"out from $HOSTNAME\" >&4; exec 4>&-; \
             trap 'exec 5<>/dev/tcp/10.213.{n}.1/{host_port}; echo \"term $HOSTNAME\" >&5; exit 0' TERM; \
             while :; do sleep 0.1; done"
        ),
    );
    let mut app = hello("user-container");
    app.env.push(EnvVar {
        name: "TARGET".into(),
        value: Some("sidecar".into()),
        ..EnvVar::default()
    });
    let s = spec("pod", vec![app, sidecar], Duration::from_secs(5));
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let lines: Vec<String> = p.logs(&s.key, None).into_iter().map(|l| l.line).collect();
        if lines.iter().any(|l| l == "Hello sidecar!") && lines.iter().any(|l| l == "host=pod-1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sidecar never got an answer: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut conn, from) = tokio::time::timeout(WAIT, host.accept())
        .await
        .unwrap()
        .unwrap();
    let mut said = String::new();
    tokio::time::timeout(WAIT, conn.read_to_string(&mut said))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(said, "out from pod-1\n");
    assert_eq!(
        from.ip(),
        p.replicas(&s.key)[0].address.ip(),
        "from the replica's address"
    );
    // Stopping the replica: the sidecar gets SIGTERM and time to act on it, even though
    // the app exits at once.
    p.scale(&s, 0);
    let (mut conn, _) = tokio::time::timeout(WAIT, host.accept())
        .await
        .unwrap()
        .unwrap();
    let mut said = String::new();
    tokio::time::timeout(WAIT, conn.read_to_string(&mut said))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(said, "term pod-1\n");
    wait_for(&p, &s.key, "stopped", |r| r.is_empty().then_some(())).await;
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(an_app_ignoring_sigterm_is_killed_after_its_grace_period, 3);
async fn an_app_ignoring_sigterm_is_killed_after_its_grace_period(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    let mut c = bash(
        "user-container",
        "trap '' TERM; echo up; while :; do sleep 0.2; done",
    );
    // An exec probe runs inside the container (`runc exec`).
    c.readiness_probe = Some(exec_probe(&["/bin/bash", "-c", "test -d /proc/1"]));
    let grace = Duration::from_secs(1);
    let s = spec("stubborn", vec![c], grace);
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let started = Instant::now();
    p.scale(&s, 0);
    wait_for(&p, &s.key, "gone", |r| r.is_empty().then_some(())).await;
    let took = started.elapsed();
    assert!(
        took >= grace,
        "stopped after {took:?}, before the grace period"
    );
    assert!(took < grace + Duration::from_secs(5), "took {took:?}");
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(a_crash_is_recorded_with_its_exit_code_and_restarted, 4);
async fn a_crash_is_recorded_with_its_exit_code_and_restarted(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    // Also what the runtime contract promises inside: a writable /tmp (the image has none),
    // the env, and the cgroup limits visible (v1 files here, v2 files elsewhere).
    let mut c = bash(
        "user-container",
        "echo boom > /tmp/f; echo \"$(< /tmp/f) port=$PORT rev=$K_REVISION\"; \
         g=/sys/fs/cgroup; \
         if [ -f $g/cpu.max ]; then echo \"cpu=$(< $g/cpu.max) mem=$(< $g/memory.max)\"; \
         else echo \"cpu=$(< $g/cpu/cpu.cfs_quota_us) mem=$(< $g/memory/memory.limit_in_bytes)\"; fi; \
         exit 3",
    );
    c.resources = Some(ResourceRequirements {
        limits: [
            ("cpu".to_string(), "500m".parse().unwrap()),
            ("memory".to_string(), "64Mi".parse().unwrap()),
        ]
        .into(),
        ..ResourceRequirements::default()
    });
    let s = spec("crash", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let r = wait_for(&p, &s.key, "a restart after exit 3", |r| {
        r.first()
            .filter(|r| r.restarts >= 1 && r.last_exit.is_some())
            .cloned()
    })
    .await;
    let exit = r.last_exit.unwrap();
    assert_eq!((exit.code, exit.signal, exit.reason), (Some(3), None, None));
    let lines: Vec<&str> = exit.message.lines().collect();
    assert_eq!(lines[0], "boom port=8080 rev=crash", "{}", exit.message);
    assert!(
        ["cpu=50000 mem=67108864", "cpu=50000 100000 mem=67108864"].contains(&lines[1]),
        "{}",
        exit.message
    );
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(usage_is_read_from_the_containers_cgroups, 31);
/// `Platform::usage` of a container replica (the HPA class's input): its CPU time grows
/// while a child of the app spins, capped by its 500m limit (wisp's runtime puts it in a
/// CPU cgroup for that limit, and the time is read there), and its memory is non-zero.
async fn usage_is_read_from_the_containers_cgroups(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    let mut c = hello("user-container");
    c.command = vec![
        "/bin/bash".into(),
        "-c".into(),
        "(while :; do :; done) & exec /hello".into(),
    ];
    c.resources = Some(ResourceRequirements {
        limits: [
            ("cpu".to_string(), "500m".parse().unwrap()),
            ("memory".to_string(), "64Mi".parse().unwrap()),
        ]
        .into(),
        ..ResourceRequirements::default()
    });
    let s = spec("usage", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    let first = p.usage(&s.key);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].memory > 0, "{first:?}");
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = p.usage(&s.key);
    let used = second[0].cpu.saturating_sub(first[0].cpu);
    let limit = t.elapsed() / 2;
    assert!(
        used >= Duration::from_millis(200) && used <= limit + Duration::from_millis(100),
        "{used:?} of CPU in {:?} (limit 500m): {first:?} → {second:?}",
        t.elapsed()
    );
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(a_memory_limit_is_enforced_and_reported_as_oom_killed, 5);
async fn a_memory_limit_is_enforced_and_reported_as_oom_killed(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    // printf builds a 200 MB string in bash's memory: far over the 32Mi limit.
    let mut c = bash(
        "user-container",
        "echo start; x=$(printf '%*s' 200000000 ''); echo survived",
    );
    c.resources = Some(ResourceRequirements {
        limits: [("memory".to_string(), "32Mi".parse().unwrap())].into(),
        ..ResourceRequirements::default()
    });
    let s = spec("oom", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let exit = wait_for(&p, &s.key, "an OOM kill", |r| {
        r.first().and_then(|r| r.last_exit.clone())
    })
    .await;
    assert_eq!(exit.reason.as_deref(), Some("OOMKilled"), "{exit:?}");
    p.shutdown().await;
    fx.assert_torn_down();
}

#[test]
fn what_an_earlier_run_left_is_removed_by_the_next_native() {
    what_an_earlier_run_left_is_removed_by_the_next(Rt::Native, 6);
}

#[test]
fn what_an_earlier_run_left_is_removed_by_the_next_runc() {
    what_an_earlier_run_left_is_removed_by_the_next(Rt::Runc, 106);
}

fn what_an_earlier_run_left_is_removed_by_the_next(rt: Rt, n: u8) {
    if let Some(why) = cannot_run() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let fx = Fixture::new(rt, n);
    let s = spec(
        "orphan",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    // The first wisp: its runtime is dropped without a shutdown, as a `kill -9` would leave
    // things (its tasks die; the containers and namespaces stay).
    let first = tokio::runtime::Runtime::new().unwrap();
    let pid = first.block_on(async {
        let p = fx.platform();
        p.scale(&s, 1);
        wait_for(&p, &s.key, "ready", all_ready(1)).await;
        let state = std::fs::read_to_string(
            fx.options
                .state_dir
                .join(format!("bundles/wct{n}-2-user-container/init.pid")),
        )
        .unwrap();
        state.trim().parse::<i32>().unwrap()
    });
    first.shutdown_background();
    assert_eq!(fx.containers().len(), 1);
    assert_eq!(fx.namespaces().len(), 1);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let p = fx.platform();
        tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
        fx.assert_nothing_left();
        // The old app is dead (at most a zombie until reaped).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z "), "{stat}");
        // And the platform works: the same revision runs again.
        p.scale(&s, 1);
        wait_for(&p, &s.key, "ready again", all_ready(1)).await;
        p.shutdown().await;
        fx.assert_torn_down();
    });
}

#[tokio::test]
async fn without_the_runtime_every_replica_fails_naming_the_fix() {
    for (runtime, fix) in [
        (
            Runtime::Runc {
                binary: "/nonexistent/runc".into(),
            },
            "apt-get install runc",
        ),
        (
            Runtime::Native {
                program: "/nonexistent/wisp".into(),
            },
            "helper binary \"/nonexistent/wisp\"",
        ),
    ] {
        without_the_runtime(runtime, fix).await;
    }
}

async fn without_the_runtime(runtime: Runtime, fix: &str) {
    let fx_dir = tempfile::tempdir().unwrap();
    let mut options = ContainerOptions::new(fx_dir.path().join("state"));
    options.runtime = runtime;
    options.bridge = "wct7".into();
    let images = Arc::new(FixedImage(PreparedImage {
        rootfs: fx_dir.path().into(),
        config: ImageConfig::default(),
    }));
    let p = ProcessPlatform::containers(options, images).unwrap();
    let s = spec(
        "norunc",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    p.scale(&s, 2);
    let r = p.replicas(&s.key);
    assert_eq!(r.len(), 2);
    for r in r {
        let f = r.failure.unwrap();
        assert_eq!(f.reason, "ContainerRuntimeUnavailable");
        assert!(f.message.contains(fix), "{}", f.message);
    }
    p.shutdown().await;
}

#[tokio::test]
async fn bad_options_are_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let images = Arc::new(FixedImage(PreparedImage {
        rootfs: dir.path().into(),
        config: ImageConfig::default(),
    }));
    let mut o = ContainerOptions::new(dir.path());
    o.bridge = "much-too-long".into();
    let e = ProcessPlatform::containers(o, images.clone()).unwrap_err();
    assert!(e.to_string().contains("bridge name"), "{e}");
    let mut o = ContainerOptions::new(dir.path());
    o.subnet = "10.0.0.1/16".into();
    let e = ProcessPlatform::containers(o, images).unwrap_err();
    assert!(e.to_string().contains("subnet"), "{e}");
}

both_runtimes!(
    the_security_context_and_seccomp_are_applied_and_run_as_non_root_is_enforced,
    8
);
async fn the_security_context_and_seccomp_are_applied_and_run_as_non_root_is_enforced(
    rt: Rt,
    n: u8,
) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    // Reports what the kernel says about itself, then exits so the report is in last_exit.
    let mut c = bash(
        "user-container",
        "echo \"uid=$EUID\"; (echo x > /probe) 2>/dev/null || echo rootfs-ro; \
         while read -r k v; do case $k in NoNewPrivs:|CapBnd:|Seccomp:) echo \"$k$v\";; esac; \
         done < /proc/self/status; exit 1",
    );
    c.security_context = Some(SecurityContext {
        run_as_user: Some(1000),
        read_only_root_filesystem: Some(true),
        seccomp_profile: Some(serde_json::json!({"type": "RuntimeDefault"})),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: vec!["ALL".into()],
            add: vec!["NET_BIND_SERVICE".into()],
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    });
    let s = spec("secure", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let exit = wait_for(&p, &s.key, "the report", |r| {
        r.first().and_then(|r| r.last_exit.clone())
    })
    .await;
    let lines: Vec<&str> = exit.message.lines().collect();
    // CAP_NET_BIND_SERVICE is bit 10.
    assert_eq!(
        lines,
        [
            "uid=1000",
            "rootfs-ro",
            "CapBnd:0000000000000400",
            "NoNewPrivs:1",
            // 2: a filter is installed.
            "Seccomp:2"
        ],
        "{exit:?}"
    );
    p.remove(&s.key);

    // runAsNonRoot with an image that runs as root: Kubernetes' error, nothing runs.
    let mut c = hello("user-container");
    c.security_context = Some(SecurityContext {
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    });
    let s = spec("rootless", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let failure = wait_for(&p, &s.key, "a config error", |r| {
        r.first().and_then(|r| r.failure.clone())
    })
    .await;
    assert_eq!(failure.reason, "CreateContainerConfigError");
    assert!(
        failure
            .message
            .starts_with("container has runAsNonRoot and image will run as root"),
        "{}",
        failure.message
    );
    p.remove(&s.key);

    // A multi-threaded app (tokio) runs under containerd's default profile: clone3 is
    // ENOSYS, so glibc falls back to clone.
    let mut c = hello("user-container");
    c.security_context = Some(SecurityContext {
        seccomp_profile: Some(serde_json::json!({"type": "RuntimeDefault"})),
        ..SecurityContext::default()
    });
    let s = spec("filtered", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let ready = wait_for(&p, &s.key, "ready under seccomp", all_ready(1)).await;
    let answer = get(ready[0].address).await;
    assert!(answer.contains("Hello World!"), "{answer}");
    p.shutdown().await;
    fx.assert_torn_down();
}

/// Secrets and ConfigMaps held in memory, changed by the test.
#[derive(Debug, Default)]
struct MemObjects(std::sync::Mutex<(Vec<wisp_api::core::Secret>, Vec<wisp_api::core::ConfigMap>)>);

impl crate::podconfig::ObjectSource for MemObjects {
    fn secret(&self, _: &str, name: &str) -> Result<Option<wisp_api::core::Secret>, String> {
        let g = self.0.lock().unwrap();
        Ok(g.0.iter().find(|s| s.metadata.name == name).cloned())
    }
    fn config_map(&self, _: &str, name: &str) -> Result<Option<wisp_api::core::ConfigMap>, String> {
        let g = self.0.lock().unwrap();
        Ok(g.1.iter().find(|s| s.metadata.name == name).cloned())
    }
}

fn config_map(greeting: &str) -> wisp_api::core::ConfigMap {
    let mut c = wisp_api::core::ConfigMap::default();
    c.metadata.name = "cfg".into();
    c.data.insert("greeting".into(), greeting.into());
    c
}

both_runtimes!(
    secrets_and_config_maps_reach_env_and_mounted_files_which_follow_updates,
    9
);
async fn secrets_and_config_maps_reach_env_and_mounted_files_which_follow_updates(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    let objects = Arc::new(MemObjects::default());
    p.set_objects(objects.clone());
    tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
    let mut app = hello("user-container");
    app.env.push(
        serde_json::from_value(serde_json::json!(
            {"name": "TARGET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "target"}}}
        ))
        .unwrap(),
    );
    // The sidecar prints the mounted file whenever it changes (bash builtins only), and
    // checks the mount is read-only and the Memory emptyDir writable.
    let mut sidecar = bash(
        "sidecar",
        "last=; while :; do v=$(< /etc/config/greeting); \
         if [ \"$v\" != \"$last\" ]; then echo \"greeting=$v\"; last=$v; fi; \
         if [ -z \"$said\" ]; then (echo x > /etc/config/new) 2>/dev/null || echo ro=yes; \
         echo hi > /scratch/f && echo scratch=$(< /scratch/f); said=1; fi; sleep 0.1; done",
    );
    for c in [&mut app, &mut sidecar] {
        c.volume_mounts = serde_json::from_value(serde_json::json!([
            {"name": "cfg", "mountPath": "/etc/config"},
            {"name": "scratch", "mountPath": "/scratch"}
        ]))
        .unwrap();
    }
    let mut s = spec("vols", vec![app, sidecar], Duration::from_secs(5));
    s.pod.volumes = serde_json::from_value(serde_json::json!([
        {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "greeting", "mode": 0o440}]}},
        {"name": "scratch", "emptyDir": {"medium": "Memory"}}
    ]))
    .unwrap();
    p.scale(&s, 1);
    // Nothing exists yet: kubelet's reason and message, retried.
    let failed = wait_for(&p, &s.key, "CreateContainerConfigError", |r| {
        r.iter().find_map(|r| r.failure.clone())
    })
    .await;
    assert_eq!(
        (failed.reason.as_str(), failed.message.as_str()),
        (
            "ContainerCreating",
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"
        )
    );
    objects.0.lock().unwrap().1.push(config_map("one"));
    p.scale(&s, 1);
    let failed = wait_for(&p, &s.key, "the secret missing", |r| {
        r.iter()
            .find_map(|r| r.failure.clone())
            .filter(|f| f.reason == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(failed.message, "secret \"db\" not found");
    let mut secret = wisp_api::core::Secret::default();
    secret.metadata.name = "db".into();
    secret
        .data
        .insert("target".into(), wisp_api::core::Bytes(b"secret".to_vec()));
    objects.0.lock().unwrap().0.push(secret);
    // The nudge (a reconcile) retries at once.
    p.scale(&s, 1);
    let ready = wait_for(&p, &s.key, "ready", all_ready(1)).await;
    assert!(get(ready[0].address).await.contains("Hello secret!"));
    let saw = |want: &'static str| {
        let p = p.clone();
        let key = s.key.clone();
        async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let lines: Vec<String> = p.logs(&key, None).into_iter().map(|l| l.line).collect();
                if lines.iter().any(|l| l == want) {
                    return;
                }
                assert!(Instant::now() < deadline, "never saw {want}: {lines:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    saw("greeting=one").await;
    saw("ro=yes").await;
    saw("scratch=hi").await;
    // An update reaches the mounted file without a restart.
    *objects.0.lock().unwrap().1.last_mut().unwrap() = config_map("two");
    p.scale(&s, 1);
    saw("greeting=two").await;
    assert_eq!(p.replicas(&s.key)[0].restarts, 0);
    p.remove(&s.key);
    wait_for(&p, &s.key, "removed", |r| r.is_empty().then_some(())).await;
    fx.assert_nothing_left();
    p.shutdown().await;
    fx.assert_torn_down();
}

/// An image whose pull reports progress, then waits for the test to let it finish.
struct SlowPull {
    image: PreparedImage,
    release: tokio::sync::Notify,
}

impl super::ImageProvider for SlowPull {
    fn prepare<'a>(
        &'a self,
        _image: &'a str,
        _pull: &'a super::PullSecrets,
        progress: &'a (dyn Fn(super::PullProgress) + Send + Sync),
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<PreparedImage, crate::Failure>> + Send + 'a>,
    > {
        Box::pin(async move {
            progress(super::PullProgress {
                done: 1_500_000,
                total: 4_000_000,
            });
            self.release.notified().await;
            Ok(self.image.clone())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_in_progress_is_what_the_revision_waits_for() {
    require_containers!();
    let fx = Fixture::new(Rt::Native, 10);
    let images = Arc::new(SlowPull {
        image: fx.images.0.clone(),
        release: tokio::sync::Notify::new(),
    });
    let p = ProcessPlatform::containers(fx.options.clone(), images.clone()).unwrap();
    let s = spec(
        "pulling",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    p.scale(&s, 1);
    let mut changes = p.changes();
    let deadline = Instant::now() + WAIT;
    let want = "Pulling image \"example.com/hello\": 1.5 MB of 4.0 MB";
    while p.waiting(&s.key).as_deref() != Some(want) {
        assert!(
            Instant::now() < deadline,
            "never waiting: {:?}",
            p.waiting(&s.key)
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), changes.recv()).await;
    }
    images.release.notify_one();
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    assert_eq!(p.waiting(&s.key), None, "cleared once the sandbox is made");
    p.shutdown().await;
    fx.assert_torn_down();
}

/// An image that cannot be pulled.
struct NoPull;

impl super::ImageProvider for NoPull {
    fn prepare<'a>(
        &'a self,
        image: &'a str,
        _pull: &'a super::PullSecrets,
        _progress: &'a (dyn Fn(super::PullProgress) + Send + Sync),
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<PreparedImage, crate::Failure>> + Send + 'a>,
    > {
        Box::pin(async move {
            Err(crate::Failure {
                reason: crate::podconfig::ERR_IMAGE_PULL.into(),
                message: format!("Failed to pull image {image:?}: manifest unknown"),
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_keeps_failing_backs_off() {
    require_containers!();
    let fx = Fixture::new(Rt::Native, 11);
    let p = ProcessPlatform::containers(fx.options.clone(), Arc::new(NoPull)).unwrap();
    let s = spec(
        "nopull",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    p.scale(&s, 1);
    // Retried with back-off (100 ms, doubling, in this fixture): the kubelet's reason for
    // the wait, with the registry's answer.
    let failure = wait_for(&p, &s.key, "ImagePullBackOff", |r| {
        r.first()
            .and_then(|r| r.failure.clone())
            .filter(|f| f.reason == "ImagePullBackOff")
    })
    .await;
    assert_eq!(
        failure.message,
        "Back-off pulling image: Failed to pull image \"example.com/hello\": manifest unknown"
    );
    p.shutdown().await;
    fx.assert_torn_down();
}

/// An image provider that counts its preparations.
struct Counting {
    image: PreparedImage,
    prepared: std::sync::atomic::AtomicUsize,
}

impl super::ImageProvider for Counting {
    fn prepare<'a>(
        &'a self,
        _image: &'a str,
        _pull: &'a super::PullSecrets,
        _progress: &'a (dyn Fn(super::PullProgress) + Send + Sync),
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<PreparedImage, crate::Failure>> + Send + 'a>,
    > {
        self.prepared
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move { Ok(self.image.clone()) })
    }
}

/// A revision created at zero (or brought back at zero after a restart) has its image and
/// the replicas' network readied before its first request, which then pays neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_at_zero_is_readied_before_its_first_replica() {
    require_containers!();
    let fx = Fixture::new(Rt::Native, 12);
    let images = Arc::new(Counting {
        image: fx.images.0.clone(),
        prepared: Default::default(),
    });
    let p = ProcessPlatform::containers(fx.options.clone(), images.clone()).unwrap();
    let s = spec(
        "atzero",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    p.scale(&s, 0);
    let bridge = Path::new("/sys/class/net").join(&fx.options.bridge);
    let deadline = Instant::now() + WAIT;
    while images.prepared.load(std::sync::atomic::Ordering::SeqCst) == 0 || !bridge.exists() {
        assert!(Instant::now() < deadline, "never readied");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        p.replicas(&s.key).is_empty(),
        "no replica for a revision at zero"
    );
    // Once, not at every scale call.
    p.scale(&s, 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(images.prepared.load(std::sync::atomic::Ordering::SeqCst), 1);
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(
    init_containers_run_in_the_sandbox_before_the_app_and_a_failing_one_holds_it_back,
    41
);
async fn init_containers_run_in_the_sandbox_before_the_app_and_a_failing_one_holds_it_back(
    rt: Rt,
    n: u8,
) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
    let mount = |c: &mut Container| {
        c.volume_mounts = serde_json::from_value(serde_json::json!([
            {"name": "work", "mountPath": "/work"}
        ]))
        .unwrap();
    };
    // Two init containers sharing an emptyDir with the app, in order: the second needs
    // what the first wrote. PORT is the serving container's alone, and no init container
    // gets Knative's K_* variables.
    let mut first = bash(
        "first",
        "echo one > /work/order; echo \"first on $(< /etc/hostname) port=[$PORT] rev=[$K_REVISION]\"",
    );
    let mut second = bash(
        "second",
        "[ \"$(< /work/order)\" = one ] || exit 1; echo two >> /work/order; echo second done >&2",
    );
    let mut app = hello("user-container");
    app.env.push(EnvVar {
        name: "TARGET".into(),
        value: Some("init".into()),
        ..EnvVar::default()
    });
    // Ready only once both init containers wrote their lines.
    app.readiness_probe = Some(exec_probe(&[
        "/bin/bash",
        "-c",
        "[ \"$(< /work/order)\" = $'one\\ntwo' ]",
    ]));
    for c in [&mut first, &mut second, &mut app] {
        mount(c);
    }
    let mut s = spec("init", vec![app], Duration::from_secs(5));
    s.pod.init_containers = vec![first, second];
    s.pod.volumes =
        serde_json::from_value(serde_json::json!([{"name": "work", "emptyDir": {}}])).unwrap();
    p.scale(&s, 1);
    let ready = wait_for(&p, &s.key, "ready", all_ready(1)).await;
    assert_eq!(ready[0].init_done, 2);
    let answer = get(ready[0].address).await;
    assert!(answer.contains("Hello init!"), "{answer}");
    let deadline = Instant::now() + WAIT;
    loop {
        let lines: Vec<String> = p.logs(&s.key, None).into_iter().map(|l| l.line).collect();
        if lines.iter().any(|l| l == "first on init-1 port=[] rev=[]")
            && lines.iter().any(|l| l == "second done")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "init containers' output not in the logs: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A failing init container: the app never starts; the replica backs off and retries.
    let mut failing = spec(
        "failing",
        vec![hello("user-container")],
        Duration::from_secs(5),
    );
    failing.pod.init_containers = vec![bash("migrate", "echo 'no database' >&2; exit 4")];
    let r = wait_for(&p, &failing.key, "a retried init failure", |r| {
        r.first()
            .filter(|r| r.restarts >= 1 && r.phase == crate::ReplicaPhase::BackOff)
            .cloned()
    });
    p.scale(&failing, 1);
    let r = r.await;
    let exit = r.last_exit.expect("the init container's exit");
    assert_eq!(exit.init_container.as_deref(), Some("migrate"));
    assert_eq!((exit.code, exit.message.as_str()), (Some(4), "no database"));
    assert_eq!(r.init_done, 0);
    assert!(r.times.started.is_none(), "the app never started");
    p.shutdown().await;
    fx.assert_torn_down();
}

both_runtimes!(sidecar_probes_reach_the_sidecar_and_gate_the_replica, 42);
/// `multi-container-probing` on the container runtime: a sidecar's TCP probe reaches its
/// own port at the replica's IP, and its exec probe runs in the sidecar's own container (the
/// app does not mount the volume it checks); until both pass, the replica is not Ready.
async fn sidecar_probes_reach_the_sidecar_and_gate_the_replica(rt: Rt, n: u8) {
    require_containers!();
    let fx = Fixture::new(rt, n);
    let p = fx.platform();
    tokio::time::timeout(WAIT, p.cleaned_up()).await.unwrap();
    let mut web = hello("web");
    web.ports.clear();
    web.env.push(EnvVar {
        name: "PORT".into(),
        value: Some("9091".into()),
        ..EnvVar::default()
    });
    web.readiness_probe = Some(wisp_api::serving::Probe {
        tcp_socket: Some(wisp_api::serving::TcpSocketAction {
            port: 9091.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut gate = bash("gate", "while :; do sleep 0.1; done");
    gate.volume_mounts =
        serde_json::from_value(serde_json::json!([{"name": "flags", "mountPath": "/flags"}]))
            .unwrap();
    gate.readiness_probe = Some(exec_probe(&["/bin/bash", "-c", "[ -e /flags/open ]"]));
    let mut s = spec(
        "gated",
        vec![hello("user-container"), web, gate],
        Duration::from_secs(1),
    );
    s.pod.volumes =
        serde_json::from_value(serde_json::json!([{"name": "flags", "emptyDir": {}}])).unwrap();
    p.scale(&s, 1);
    // The app and web are ready; the gate is not, nor is the replica.
    wait_for(&p, &s.key, "only the gate unready", |r| {
        r.first()
            .filter(|r| r.unready == ["gate"] && r.phase == crate::ReplicaPhase::Starting)
            .map(drop)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        p.replicas(&s.key)[0].phase,
        crate::ReplicaPhase::Starting,
        "not Ready while a sidecar is not"
    );
    // The emptyDir, as the host sees it: `<state>/sandboxes/<sandbox>/volumes/flags`.
    let sandboxes = fx.options.state_dir.join("sandboxes");
    let flags = std::fs::read_dir(&sandboxes)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("volumes/flags"))
        .find(|p| p.is_dir())
        .expect("the sandbox's emptyDir");
    std::fs::write(flags.join("open"), "").unwrap();
    let r = wait_for(&p, &s.key, "ready", all_ready(1)).await;
    assert!(r[0].unready.is_empty());
    p.shutdown().await;
    fx.assert_torn_down();
}

/// The lines `host=… file=…` the `standby` test's app printed, newest last.
fn hostnames(p: &ProcessPlatform, key: &RevisionKey) -> Vec<String> {
    p.logs(key, None)
        .into_iter()
        .map(|l| l.line)
        .filter(|l| l.starts_with("host="))
        .collect()
}

/// Waits until the platform holds exactly one sandbox (namespace and container cgroup) and
/// no replica: the revision's standby.
async fn wait_for_standby(fx: &Fixture, p: &ProcessPlatform, key: &RevisionKey) -> String {
    poll("a standby", || {
        let (namespaces, containers) = (fx.namespaces(), fx.containers());
        (p.replicas(key).is_empty() && namespaces.len() == 1 && containers.len() == 1)
            .then(|| namespaces[0].clone())
            .ok_or(format!(
                "namespaces {namespaces:?}, containers {containers:?}"
            ))
    })
    .await
}

/// Polls `check` every 20 ms until it gives a value; panics after [`WAIT`] with `what` and
/// the last thing `check` said.
async fn poll<T>(what: &str, check: impl Fn() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let last = match check() {
            Ok(t) => return t,
            Err(last) => last,
        };
        assert!(Instant::now() < deadline, "no {what}: {last}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_scaled_to_zero_gets_a_standby_sandbox_its_next_replica_takes() {
    require_containers!();
    let fx = Fixture::new(Rt::Native, 13);
    let p = fx.platform();
    let app = Container {
        ports: hello("").ports,
        ..bash(
            "user-container",
            "echo host=$HOSTNAME file=$(</etc/hostname); exec /hello",
        )
    };
    let s = spec("standby", vec![app], Duration::from_secs(1));
    p.scale(&s, 1);
    wait_for(&p, &s.key, "ready", all_ready(1)).await;
    // Scaled to zero: the replica goes, and a sandbox is readied for the next one, its
    // app not started (no replica is listed, the revision is at zero).
    p.scale(&s, 0);
    wait_for(&p, &s.key, "at zero", |r| r.is_empty().then_some(())).await;
    let standby = wait_for_standby(&fx, &p, &s.key).await;
    // The next replica takes it (same namespace) and the app starts in it, named for the
    // replica that took it.
    p.scale(&s, 1);
    let ready = wait_for(&p, &s.key, "ready again", all_ready(1)).await;
    assert_eq!(fx.namespaces(), vec![standby]);
    assert!(get(ready[0].address).await.contains("Hello World!"));
    poll("hostname line", || {
        let lines = hostnames(&p, &s.key);
        (!lines.is_empty())
            .then_some(())
            .ok_or(format!("{lines:?}"))
    })
    .await;
    let name = &ready[0].name;
    assert_eq!(
        hostnames(&p, &s.key).last().unwrap(),
        &format!("host={name} file={name}")
    );
    // At zero again, then removed: its standby goes with it.
    p.scale(&s, 0);
    wait_for_standby(&fx, &p, &s.key).await;
    p.remove(&s.key);
    wait_for_no_sandbox(&fx).await;
    // A revision that no route names (any more) gets none, and loses the one it had.
    let other = spec(
        "other",
        vec![hello("user-container")],
        Duration::from_secs(1),
    );
    let unrouted = ReplicaSpec {
        routed: false,
        ..other.clone()
    };
    p.scale(&other, 1);
    wait_for(&p, &other.key, "ready", all_ready(1)).await;
    p.scale(&unrouted, 0);
    wait_for(&p, &other.key, "at zero", |r| r.is_empty().then_some(())).await;
    wait_for_no_sandbox(&fx).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fx.namespaces(),
        Vec::<String>::new(),
        "a standby for an unrouted revision"
    );
    p.scale(&other, 1);
    wait_for(&p, &other.key, "ready", all_ready(1)).await;
    p.scale(&other, 0);
    wait_for_standby(&fx, &p, &other.key).await;
    p.scale(&unrouted, 0);
    wait_for_no_sandbox(&fx).await;
    // A standby left at shutdown goes too.
    p.scale(&other, 1);
    wait_for(&p, &other.key, "ready", all_ready(1)).await;
    p.scale(&other, 0);
    wait_for_standby(&fx, &p, &other.key).await;
    p.shutdown().await;
    fx.assert_torn_down();
}

async fn wait_for_no_sandbox(fx: &Fixture) {
    poll("removal of every sandbox", || {
        let (namespaces, containers) = (fx.namespaces(), fx.containers());
        (namespaces.is_empty() && containers.is_empty())
            .then_some(())
            .ok_or(format!("left: {namespaces:?}, {containers:?}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_cannot_start_reports_why_with_the_exit_code_128() {
    require_containers!();
    let fx = Fixture::new(Rt::Native, 14);
    let p = fx.platform();
    let c = Container {
        command: vec!["no-such-app".into()],
        ..hello("user-container")
    };
    let s = spec("nostart", vec![c], Duration::from_secs(1));
    p.scale(&s, 1);
    let exit = wait_for(&p, &s.key, "a failed start", |r| {
        r.first().and_then(|r| r.last_exit.clone())
    })
    .await;
    assert_eq!(exit.code, Some(128), "{exit:?}");
    assert_eq!(
        exit.message, "exec: \"no-such-app\": executable file not found in $PATH",
        "{exit:?}"
    );
    p.shutdown().await;
    fx.assert_torn_down();
}
