//! `container_cold_start`: how long a container replica takes from "start" to "can take
//! traffic", against `runc` alone in the same run (issue #22). Needs root and runc.
//!
//! - **runc run**: one bundle (the `hello` sample, its libraries, read-only root) in a
//!   network namespace with a veth, made once; each run is `runc run -d` until a TCP
//!   connect to its port succeeds (polled every 1 ms), then `runc delete -f`.
//! - **replica**: wisp's container platform (`ProcessPlatform::containers`) with the same
//!   rootfs as its image; each run is `scale(1)` until the replica is Ready (its TCP
//!   readiness probe passed), then `scale(0)` until it is gone. This includes what a
//!   replica needs beyond runc: its network namespace and veth, its overlay root, its
//!   `/etc` files, and the first readiness probes (Knative's aggressive probing). Then the
//!   same with containerd's default seccomp profile (`seccompProfile: RuntimeDefault`).
//!   Both with wisp's own runtime (the default; its helper is the `wisp` binary built next
//!   to this benchmark) and with runc as the platform's runtime.
//!
//! Writes `bench/results/container-cold-start.md` (`--out`; not with `--no-write`).

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use wisp_api::serving::{Container, ContainerPort, PodSpec, SecurityContext};
use wisp_bench::{
    runc_ref::RuncReference,
    setup::{results_header, write_results},
    stats::{Summary, Table, ms},
};
use wisp_runtime::{
    Platform, ReplicaPhase, ReplicaSpec, RevisionKey,
    container::{ContainerOptions, ImageConfig, PreparedImage, Runtime, hostfs::FixedImage},
    process::ProcessPlatform,
};

#[derive(Parser, Debug)]
struct Args {
    /// Starts measured per variant.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// The app: the `hello` sample built next to this benchmark by default.
    #[arg(long)]
    app: Option<PathBuf>,
    #[arg(long, default_value = "bench/results/container-cold-start.md")]
    out: PathBuf,
    #[arg(long)]
    no_write: bool,
}

async fn replica_once(p: &ProcessPlatform, spec: &ReplicaSpec) -> anyhow::Result<Duration> {
    let mut changes = p.changes();
    let started = Instant::now();
    p.scale(spec, 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = p.replicas(&spec.key);
        if r.first().is_some_and(|r| r.phase == ReplicaPhase::Ready) {
            break;
        }
        if let Some(f) = r.first().and_then(|r| r.failure.clone()) {
            bail!("{}: {}", f.reason, f.message);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no ready replica: {r:?}");
        }
        let _ = tokio::time::timeout_at(deadline, changes.recv()).await;
    }
    let took = started.elapsed();
    p.scale(spec, 0);
    while !p.replicas(&spec.key).is_empty() {
        if tokio::time::Instant::now() > deadline {
            bail!("the replica did not stop");
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), changes.recv()).await;
    }
    Ok(took)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_start = wisp_bench::procfs::loadavg();
    if !rustix::process::geteuid().is_root() {
        bail!("container_cold_start needs root (namespaces, cgroups) and runc");
    }
    let app = match &args.app {
        Some(p) => std::path::absolute(p)?,
        None => wisp_bench::sibling_binary("hello")?,
    };
    let dir = tempfile::tempdir()?;
    // runc alone (its rootfs is the replicas' image too).
    let mut reference = RuncReference::new(&app)?;
    let runc = reference.starts(args.runs)?;
    let rootfs = reference.rootfs.clone();

    // A replica of the container platform, with each runtime.
    let images = Arc::new(FixedImage(PreparedImage {
        rootfs,
        config: ImageConfig {
            entrypoint: vec!["/hello".into()],
            env: vec!["HOST=0.0.0.0".into()],
            ..ImageConfig::default()
        },
    }));
    let spec = ReplicaSpec {
        key: RevisionKey::new("default", "hello-00001"),
        uid: "bench".into(),
        configuration: "hello".into(),
        service: "hello".into(),
        pod: PodSpec {
            containers: vec![Container {
                name: "user-container".into(),
                image: "example.com/hello".into(),
                ports: vec![ContainerPort {
                    container_port: 8080,
                    ..ContainerPort::default()
                }],
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        grace_period: Duration::from_secs(5),
        name_prefix: String::new(),
        routed: true,
    };
    // The same with containerd's default seccomp profile (`RuntimeDefault`).
    let mut filtered = spec.clone();
    filtered.key.name = "hello-00002".into();
    filtered.pod.containers[0].security_context = Some(SecurityContext {
        seccomp_profile: Some(serde_json::json!({"type": "RuntimeDefault"})),
        ..SecurityContext::default()
    });
    let runtimes = [
        (
            "wisp's runtime",
            Runtime::Native {
                program: wisp_bench::sibling_binary("wisp")?,
            },
        ),
        ("runc", Runtime::runc()),
    ];
    // (runtime, plain, with seccomp)
    let mut measured: Vec<(&str, Vec<Duration>, Vec<Duration>)> = Vec::new();
    for (i, (name, runtime)) in runtimes.into_iter().enumerate() {
        let mut options = ContainerOptions::new(dir.path().join(format!("state{i}")));
        options.bridge = format!("wcb{i}");
        options.subnet = format!("10.215.{i}.0/24");
        options.runtime = runtime;
        let p = ProcessPlatform::containers(options, images.clone())?;
        tokio::time::timeout(Duration::from_secs(20), p.cleaned_up()).await?;
        let (mut plain, mut seccomp) = (Vec::new(), Vec::new());
        let mut failed = None;
        'runs: for (spec, samples) in [(&spec, &mut plain), (&filtered, &mut seccomp)] {
            for _ in 0..args.runs {
                match replica_once(&p, spec).await {
                    Ok(d) => samples.push(d),
                    Err(e) => {
                        failed = Some(e.context(name));
                        break 'runs;
                    }
                }
            }
        }
        p.shutdown().await;
        if let Some(e) = failed {
            return Err(e);
        }
        measured.push((name, plain, seccomp));
    }

    let mut out = results_header(
        "Container cold start: runc alone vs a container replica",
        &load_start,
    );
    out.push_str(
        "\nEach start from nothing running, image cached (the `hello` sample and its \
         libraries as rootfs). The replica's time includes its network namespace and veth, \
         overlay root, `/etc` files and Knative's aggressive readiness probing. Rows run one \
         after the other, each variant's runs back to back; \"× runc run\" is the p50 over \
         the reference's p50, in this run.\n\n",
    );
    let reference = Summary::of(&runc).context("no samples")?;
    let mut table = Table::new([
        "variant",
        "runs",
        "min",
        "p50",
        "p95",
        "max",
        "× runc run (p50)",
    ]);
    let mut rows: Vec<(String, &Vec<Duration>)> =
        vec![("`runc run -d` until the port listens".into(), &runc)];
    for (name, plain, seccomp) in &measured {
        rows.push((format!("replica `scale(1)` until Ready, {name}"), plain));
        rows.push((
            format!("the same, `seccompProfile: RuntimeDefault`, {name}"),
            seccomp,
        ));
    }
    for (name, samples) in rows {
        let s = Summary::of(samples).context("no samples")?;
        table.row([
            name,
            s.n.to_string(),
            ms(s.min),
            ms(s.p50),
            ms(s.p95),
            ms(s.max),
            format!("{:.2}", s.p50.as_secs_f64() / reference.p50.as_secs_f64()),
        ]);
    }
    out.push_str(&table.render());
    write_results(&out, &args.out, args.no_write)?;
    Ok(())
}
