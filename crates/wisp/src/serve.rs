//! `wisp serve`: assembles the store, the API server, the controllers, the process runtime
//! and the data plane (ingress listeners → activator/backends → replica queues) in one
//! process, and owns the one shutdown path.

use std::{
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, bail};
use arc_swap::ArcSwap;
use wisp_activator::Backends;
use wisp_api::config::LiveConfig;
use wisp_apiserver::ApiState;
use wisp_controller::revision::digest::BackgroundResolver;
use wisp_controller::{
    Controllers, Scaling,
    routing::{RoutingTable, Visibility},
};
use wisp_ingress::Ingress;
use wisp_net::ServerOptions;
use wisp_runtime::{
    Platform, SharedPlatform,
    container::{ContainerOptions, Runtime},
    dispatch::ByImage,
    process::{ProcessOptions, ProcessPlatform},
};
use wisp_store::Store;

/// Flags of `wisp serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the REST API, served over HTTPS (port 0 picks a free port; the chosen
    /// address is printed).
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub api_addr: SocketAddr,
    /// Another name (DNS name or IP address) for the API's serving certificate, besides
    /// localhost, 127.0.0.1 and ::1 (repeatable).
    #[arg(long = "tls-san", value_name = "NAME|IP", value_parser = crate::tls::parse_san)]
    pub tls_sans: Vec<String>,
    /// Serve the API over plain HTTP instead of HTTPS; refused unless --api-addr is a
    /// loopback address (bearer tokens would cross the network in clear text).
    #[arg(long)]
    pub api_insecure_http: bool,
    /// More users: a file in kube-apiserver's --token-auth-file format (CSV lines
    /// `token,user,uid,"group1,group2"`); each token authenticates as its user, whose name
    /// is recorded as serving.knative.dev/creator and lastModifier.
    #[arg(long, value_name = "FILE")]
    pub token_auth_file: Option<PathBuf>,
    /// Address of the external HTTP ingress (serves external hosts only).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Address of the external HTTPS ingress (off unless given): TLS with the certificate
    /// of the host the client names (a DomainMapping's `spec.tls.secretName`), ALPN h2 and
    /// http/1.1.
    #[arg(long, value_name = "ADDR")]
    pub https_addr: Option<SocketAddr>,
    /// Address of the cluster-local ingress (serves `*.svc.cluster.local`, `*.svc` and
    /// `name.namespace` hosts only; keep it on loopback).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub local_addr: SocketAddr,
    /// Requests the activator holds per revision while it has no ready replica, or (with
    /// the activator in the path) no replica with a free slot (Knative: 10000); beyond that
    /// they get 503 at once.
    #[arg(long, default_value_t = wisp_activator::DEFAULT_HOLD_BOUND)]
    pub activator_queue_depth: usize,
    /// Threads serving the ingress connections (each a single-threaded runtime); default:
    /// one per CPU.
    #[arg(long, env = "WISP_DATAPLANE_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub dataplane_threads: Option<u16>,
    /// Directory holding the store and the API token.
    #[arg(long, env = "WISP_DATA_DIR", default_value = ".wisp")]
    pub data_dir: PathBuf,
    /// Config file: top-level keys are Knative ConfigMap names (config-autoscaler, …). It
    /// seeds the ConfigMaps of the knative-serving namespace on first start; after that the
    /// ConfigMaps are the configuration (`kubectl edit configmap config-autoscaler -n
    /// knative-serving` applies at once).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Manifests to apply once the server is up, as `wisp apply -f` would (repeatable).
    #[arg(long = "apply", value_name = "FILE")]
    pub apply: Vec<String>,
    /// API requests other than writes (get, list) served at once; past it, 429 with
    /// `Retry-After: 1` (kube-apiserver's flag and default). Watches and logs are not
    /// counted. 0: no bound.
    #[arg(long, default_value_t = wisp_apiserver::inflight::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// API writes (create, update, patch, delete) served at once; past it, 429 (as
    /// kube-apiserver). 0: no bound.
    #[arg(long, default_value_t = wisp_apiserver::inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
    /// The bridge container replicas attach to; also the prefix of every network namespace
    /// and veth wisp creates for them (1 to 8 letters, digits or '-'). Two `wisp serve` on
    /// one machine need different bridges and subnets.
    #[arg(long, env = "WISP_CONTAINER_BRIDGE", default_value = "wisp0")]
    pub container_bridge: String,
    /// Private IPv4 subnet container replicas get their addresses from.
    #[arg(long, env = "WISP_CONTAINER_SUBNET", default_value = "10.88.0.0/16")]
    pub container_subnet: String,
    /// What starts containers: `native`, wisp's own runtime (this binary sets up each
    /// sandbox and execs the app; no runtime process per start), or `runc`, the reference
    /// OCI runtime (`--runc`). Both run the same sandboxes.
    #[arg(long, env = "WISP_CONTAINER_RUNTIME", value_enum, default_value_t = ContainerRuntime::Native)]
    pub container_runtime: ContainerRuntime,
    /// The runc binary, with `--container-runtime runc` (Debian's `runc`).
    #[arg(long, env = "WISP_RUNC", default_value = "runc")]
    pub runc: PathBuf,
    /// A registry (`host[:port]`) that may be reached over plain HTTP (repeatable);
    /// registries on loopback addresses always may, as Docker allows.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
    #[command(flatten)]
    pub observe: crate::observe::ObserveArgs,
}

/// `--container-runtime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ContainerRuntime {
    Native,
    Runc,
}

/// Where the API's URL is written on start (read by `wisp kubeconfig`).
pub const API_URL_FILE: &str = "api-url";

/// The user recorded as `serving.knative.dev/creator` for writes made with the token.
const ADMIN_USER: &str = "wisp-admin";

/// Threads for blocking work (the API's store reads, watches, logs); see `run`.
const BLOCKING_THREADS: usize = 2;

/// How long in-flight API requests (and open watches) get to finish after a signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs the server until SIGINT/SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Flags, config and token file are checked before anything binds or writes, so a typo
    // costs nothing.
    check_insecure_http(&args)?;
    let config = load_config(args.config.as_deref())?;
    let users = load_token_file(args.token_auth_file.as_deref())?;

    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data dir {}", args.data_dir.display()))?;
    let _lock = lock_data_dir(&args.data_dir)?;
    let token = load_or_create_token(&args.data_dir.join("token"))?;
    let tls = if args.api_insecure_http {
        None
    } else {
        let tls = crate::tls::load_or_create(&args.data_dir, &args.tls_sans)?;
        if let Some(why) = tls.made {
            tracing::info!(why, "made the API's serving certificate");
        }
        Some(tls.config)
    };
    let auth = wisp_apiserver::auth::Authenticator::new(
        &token,
        wisp_apiserver::auth::UserInfo {
            name: ADMIN_USER.into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        },
        users,
    );
    let db = args.data_dir.join("wisp.db");
    let options = wisp_store::Options {
        indexed_annotations: Some(wisp_controller::INDEXED_ANNOTATIONS),
        ..Default::default()
    };
    let store = Store::open_with(&db, options)
        .with_context(|| format!("opening store {}", db.display()))?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking work is the API's short SQLite reads and file I/O (one store connection,
        // so more threads only queue on its lock; reconciles and API writes have their own
        // batching threads, see wisp_store::batcher). Every thread that allocates grows a
        // glibc malloc arena that is never given back: with 100 services, 16 blocking
        // threads left 42 MiB of idle RSS and 4 left 33 MiB at the same reconcile latency
        // (bench/reconcile_delay).
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(serve(args, config, store, token, auth, tls))
}

async fn serve(
    args: ServeArgs,
    config_file: crate::live_config::Maps,
    store: Store,
    token: String,
    auth: wisp_apiserver::auth::Authenticator,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    // Signal handlers go in before anything is announced: a SIGTERM that arrives right
    // after the "listening" line must take the graceful path, not the default (die).
    let shutdown = shutdown_signal()?;
    let observing = crate::observe::Observing::new(&args.observe);
    observing.install();
    // Namespaces are objects: the system ones always exist, older stores get Namespaces for
    // the namespaces they use, and a namespace deletion an earlier run left unfinished
    // finishes.
    wisp_apiserver::namespaces::bootstrap(&store).context("preparing namespaces")?;
    // The configuration is Knative's ConfigMaps in knative-serving, seeded on first start.
    crate::live_config::seed(&store, &config_file).context("seeding the configuration")?;
    let (initial, good_maps) =
        crate::live_config::load(&store).context("reading the configuration")?;
    let config = LiveConfig::new(initial);
    let (config_version, config_changes) = tokio::sync::watch::channel(0u64);

    // Replicas of an earlier run (if wisp was kill -9ed) are stopped by each backend before
    // it starts any; the controllers then bring every revision back from the store.
    // Revisions whose pods name images run in containers, the others as host processes.
    // Replicas read the Secrets and ConfigMaps their pods reference from the store.
    let objects: Arc<dyn wisp_runtime::podconfig::ObjectSource> =
        Arc::new(crate::objects::StoreObjects::new(store.clone()));
    // Images come from the store under the data dir; `imagePullSecrets` from the API's.
    let images = Arc::new(crate::images::Images::new(
        wisp_image::Store::open(args.data_dir.join("images")).context("opening the image store")?,
        wisp_image::RegistryOptions {
            insecure_registries: args.insecure_registries.clone(),
            ..wisp_image::RegistryOptions::default()
        },
        objects.clone(),
    ));
    let processes = ProcessPlatform::new(&args.data_dir.join("run"), ProcessOptions::default())
        .context("starting the process runtime")?;
    let containers = ProcessPlatform::containers(
        ContainerOptions {
            bridge: args.container_bridge.clone(),
            subnet: args.container_subnet.clone(),
            runtime: match args.container_runtime {
                ContainerRuntime::Native => Runtime::native(),
                ContainerRuntime::Runc => Runtime::Runc {
                    binary: args.runc.clone(),
                },
            },
            ..ContainerOptions::new(args.data_dir.join("containers"))
        },
        images.clone(),
    )
    .context("starting the container runtime")?;
    processes.set_objects(objects.clone());
    containers.set_objects(objects);
    let platform = ByImage::new(processes, containers);
    let shared: SharedPlatform = platform.clone();
    // The autoscaling seam: the activator pokes through it and feeds its collector; the
    // PodAutoscaler reconciler decides from it; the Revision reconciler applies its count.
    let scaling = Arc::new(Scaling::new(chrono::Utc::now));
    let routing = Arc::new(ArcSwap::from_pointee(RoutingTable::default()));
    // What runs, as Kubernetes objects (Pods, Deployments, Services, Events, SKS,
    // KIngress): published by the controllers, served by the API, never stored.
    let views = wisp_views::Views::new(chrono::Utc::now);
    let ctx = wisp_controller::Context {
        // Everything the controllers write is derived from users' objects, so their writes
        // need not wait for an fsync (see `wisp_store::Durability`); the API's do.
        store: store.with_durability(wisp_store::Durability::Relaxed),
        config: config.clone(),
        platform: shared.clone(),
        routing: routing.clone(),
        scaling: scaling.clone(),
        clock: chrono::Utc::now,
        digests: Some(Arc::new(BackgroundResolver::new(images.clone(), {
            // A revision whose digests are in is reconciled again at once (Knative's
            // background resolver's enqueue callback).
            let scaling = scaling.clone();
            Arc::new(move |key: &wisp_runtime::RevisionKey| scaling.wake(key))
        }))),
        views: views.clone(),
        own_writes: Default::default(),
    };
    let (ctl_stop_tx, ctl_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controllers = tokio::spawn(
        Controllers::new(ctx, wisp_controller::all_reconcilers())
            .resync_on(config_changes)
            .run(async move {
                let _ = ctl_stop_rx.await;
            }),
    );

    // The data plane: endpoints (kept in line with revisions and replicas), the per-second
    // stats, and the two ingress listeners.
    let (dp_stop_tx, dp_stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = dp_stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let backends = Backends::new(args.activator_queue_depth, scaling.clone());
    // Request logs (config-observability), kept per revision for `wisp logs --requests`.
    // Read once, at start: an edit of config-observability is checked when written and
    // takes effect at the next start (docs/differences.md).
    let observability = config.load().observability.clone();
    let request_log = observability.request_log().map(|t| {
        wisp_queue::request_log::RequestLog::new(t, observability.enable_probe_request_log)
    });
    backends.observe(wisp_activator::backends::Observability {
        metrics: observing.records_requests(),
        request_log: request_log.clone(),
    });
    let endpoint_sync = tokio::spawn(crate::endpoint_sync::sync_endpoints(
        backends.clone(),
        store.clone(),
        shared.clone(),
        config.clone(),
        stopped(),
    ));
    let live_config = tokio::spawn(crate::live_config::run(
        store.clone(),
        config.clone(),
        good_maps,
        config_version,
        stopped(),
    ));
    let stats = tokio::spawn(backends.clone().run_stats(stopped()));
    // Events expire an hour after they were last seen, also while nothing records.
    let event_expiry = tokio::spawn({
        let events = views.events.clone();
        let stop = stopped();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tick.tick() => events.expire(),
                }
            }
        }
    });
    let stats_feed = tokio::spawn(crate::stats_feed::run(
        backends.stats(),
        scaling.clone(),
        stopped(),
    ));
    let ingress_certs = match args.https_addr {
        Some(_) => Some(crate::ingress_tls::IngressCerts::new(
            store.clone(),
            routing.clone(),
            crate::tls::LocalCa::load_or_create(&args.data_dir)?,
        )),
        None => None,
    };
    let ingress = Arc::new(Ingress {
        routing,
        backends: backends.clone(),
        config: config.clone(),
    });
    let (ingress_stop_tx, ingress_stop_rx) = tokio::sync::watch::channel(false);
    let dataplane = crate::dataplane::DataPlaneThreads::start(
        args.dataplane_threads
            .map_or_else(crate::dataplane::default_threads, usize::from),
    )
    .context("starting the data-plane threads")?;
    let runtimes = dataplane.handles();
    let mut ingresses = Vec::new();
    let mut ingress_addrs = Vec::new();
    for (i, (addr, visibility, what)) in [
        (args.http_addr, Visibility::External, "ingress"),
        (
            args.local_addr,
            Visibility::ClusterLocal,
            "cluster-local ingress",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the {what} address {addr}"))?;
        let bound = listener.local_addr()?;
        ingress_addrs.push(bound);
        // The accept loop runs on a data-plane thread, not on the runtime of the API and
        // the controllers: however busy the API gets, new connections are accepted at
        // once. The socket moves there unregistered from this runtime's reactor.
        let listener = listener.into_std()?;
        let runtime = runtimes[i % runtimes.len()].clone();
        tracing::info!(addr = %bound, "{what} listening");
        // Tests and scripts read these lines to find ephemeral ports.
        eprintln!("wisp: {what} listening on http://{bound}");
        let ingress = ingress.clone();
        let handler = move |req, peer| {
            // Boxed once here: the request's future is a few KiB and hyper moves it by
            // value on its way into the connection's state (memcpy per move).
            Box::pin(ingress.handle(req, peer, visibility))
        };
        let mut stop = ingress_stop_rx.clone();
        let opts = ServerOptions {
            runtimes: runtimes.clone(),
            ..ServerOptions::default()
        };
        ingresses.push(runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            wisp_net::serve(listener, opts, handler, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        }));
    }

    let mut https_bound = None;
    if let (Some(addr), Some(certs)) = (args.https_addr, ingress_certs) {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the HTTPS ingress address {addr}"))?;
        let bound = listener.local_addr()?;
        https_bound = Some(bound);
        tracing::info!(addr = %bound, "HTTPS ingress listening");
        eprintln!("wisp: ingress listening on https://{bound}");
        let tls = tokio_rustls::TlsAcceptor::from(certs.server_config()?);
        let ingress = ingress.clone();
        let handler = move |req, peer| {
            Box::pin(ingress.handle_scheme(req, peer, Visibility::External, "https"))
        };
        let stop = ingress_stop_rx.clone();
        ingresses.push(tokio::spawn(async move {
            crate::api_listener::serve_with(listener, Some(tls), handler, stop).await;
            Ok::<(), std::io::Error>(())
        }));
    }

    // The ingress gateway's Services (where to send requests), for the listeners bound.
    views.services.replace_set(
        "gateway",
        wisp_views::ingress::gateway_services(ingress_addrs[0], https_bound, ingress_addrs[1]),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics_server = observing
        .serve_metrics(
            crate::observe::collector::Revisions {
                backends: backends.clone(),
                scaling: scaling.clone(),
            },
            stop_rx.clone(),
        )
        .await?;
    let auth = Arc::new(auth);
    let history = Arc::new(crate::observe::history::History::default());
    let sampler = tokio::spawn(crate::observe::history::run(
        history.clone(),
        backends.clone(),
        scaling.clone(),
        stop_rx.clone(),
    ));
    let console_server = observing
        .serve_console(
            crate::observe::console::Console {
                store: store.clone(),
                auth: auth.clone(),
                scaling: scaling.clone(),
                history: history.clone(),
                platform: shared.clone(),
            },
            stop_rx.clone(),
        )
        .await?;
    let state = ApiState {
        writer: wisp_store::Batcher::start(store.clone(), "wisp-api-write")
            .context("starting the API's store writer")?,
        store: store.clone(),
        config,
        auth: Some(auth.clone()),
        user: ADMIN_USER.into(),
        platform: Some(shared.clone()),
        stopping: stop_rx.clone(),
        cpu: wisp_apiserver::cpu::CpuPool::new(wisp_apiserver::cpu::default_threads())
            .context("starting the API's CPU pool")?,
        inflight: wisp_apiserver::inflight::InFlight::new(
            args.max_requests_inflight,
            args.max_mutating_requests_inflight,
        ),
        body_budget: wisp_apiserver::inflight::BodyBudget::default(),
        views: views.clone(),
        request_logs: request_log.map(|l| {
            Arc::new(crate::observe::request_logs::Api(l))
                as Arc<dyn wisp_apiserver::logs::RequestLogs>
        }),
    };
    let listener = tokio::net::TcpListener::bind(args.api_addr)
        .await
        .with_context(|| format!("binding the API address {}", args.api_addr))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, data_dir = %args.data_dir.display(), "API listening");
    // `wisp kubeconfig` reads the address from this file; written before the line below,
    // which tests and scripts read to find an ephemeral port.
    crate::tls::write_file(
        &args.data_dir.join(API_URL_FILE),
        format!("{scheme}://{addr}\n").as_bytes(),
        0o644,
    )?;
    eprintln!("wisp: API listening on {scheme}://{addr}");

    let server = tokio::spawn(crate::api_listener::serve(
        listener,
        tls.map(tokio_rustls::TlsAcceptor::from),
        wisp_apiserver::router_with(
            state,
            Some(crate::observe::top::router(
                backends.clone(),
                scaling.clone(),
                history.clone(),
            )),
        ),
        stop_rx.clone(),
    ));

    if !args.apply.is_empty() {
        let apply = crate::cli::apply::ApplyArgs {
            global: crate::cli::GlobalArgs {
                server: format!("{scheme}://{addr}"),
                token: Some(token),
                certificate_authority: None,
                data_dir: args.data_dir.clone(),
                namespace: "default".into(),
            },
            files: args.apply.clone(),
            wait: false,
            timeout: std::time::Duration::ZERO,
        };
        // The client is blocking (reqwest::blocking); keep it off the async workers.
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::cli::apply::run(apply) {
                eprintln!("wisp: --apply failed: {e:#}");
            }
        });
    }

    shutdown.await;
    eprintln!("wisp: shutting down");
    // In-flight requests finish while the replicas are still up; nothing reconciles once
    // replicas are being stopped; the store is flushed last.
    let mut stages = Stages::default();
    stages.stage("stop accepting", async move {
        let _ = ingress_stop_tx.send(true);
        let _ = stop_tx.send(true);
    });
    stages.stage("drain", async move {
        for h in ingresses {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "ingress server"),
                Err(e) => tracing::warn!(error = %e, "ingress server task"),
            }
        }
        dataplane.stop().await;
        // Watches and log follows end on the stop signal; anything still open past the
        // grace period is cut.
        match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "API server task"),
            Err(_) => tracing::warn!("open API connections cut after the shutdown grace period"),
        }
        for h in [metrics_server, console_server].into_iter().flatten() {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, h).await;
        }
        let _ = sampler.await;
    });
    stages.stage("stop controllers", async move {
        let _ = ctl_stop_tx.send(());
        let _ = controllers.await;
        let _ = dp_stop_tx.send(true);
        let _ = endpoint_sync.await;
        let _ = live_config.await;
        let _ = stats.await;
        let _ = stats_feed.await;
        let _ = event_expiry.await;
    });
    stages.stage("stop replicas", async move { platform.shutdown().await });
    stages.stage("flush the store", async move {
        if let Err(e) = store.checkpoint() {
            tracing::warn!(error = %e, "store checkpoint on shutdown");
        }
    });
    stages.run().await;
    eprintln!("wisp: stopped");
    Ok(())
}

/// Shutdown as named stages run one after the other: each starts only once the one
/// before it has finished, so (for example) no replica is stopped while a request that
/// needs it is still draining.
#[derive(Default)]
struct Stages {
    stages: Vec<(&'static str, StageFuture)>,
}

type StageFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Stages {
    fn stage(
        &mut self,
        name: &'static str,
        f: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.stages.push((name, Box::pin(f)));
    }

    /// Runs every stage in order; returns their names as they finished.
    async fn run(self) -> Vec<&'static str> {
        let mut done = Vec::with_capacity(self.stages.len());
        for (name, f) in self.stages {
            let start = std::time::Instant::now();
            f.await;
            tracing::info!(stage = name, took = ?start.elapsed(), "shutdown stage done");
            done.push(name);
        }
        done
    }
}

/// Holds an exclusive lock on the data dir for the life of the process, so two servers can
/// never share a store (or stop each other's replicas).
fn lock_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            bail!(
                "another wisp serve is already using data dir {}",
                dir.display()
            )
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// Plain HTTP carries the bearer token in clear text: only ever on loopback.
fn check_insecure_http(args: &ServeArgs) -> anyhow::Result<()> {
    if args.api_insecure_http && !args.api_addr.ip().is_loopback() {
        bail!(
            "refusing to serve the API over plain HTTP on the non-loopback address {}: bearer \
             tokens would cross the network in clear text; drop --api-insecure-http (the API \
             then serves HTTPS) or listen on a loopback address",
            args.api_addr
        );
    }
    Ok(())
}

/// Reads `--token-auth-file`; a bad file fails the start, naming the line.
fn load_token_file(path: Option<&Path>) -> anyhow::Result<Vec<wisp_apiserver::auth::TokenEntry>> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let file = wisp_apiserver::auth::parse_token_file(&path.display().to_string(), &text)?;
    for w in &file.warnings {
        tracing::warn!("{w}");
    }
    Ok(file.entries)
}

/// The `--config` file's ConfigMaps, each checked as Knative checks it (a bad file stops
/// the start, whether or not it still seeds anything).
fn load_config(path: Option<&Path>) -> anyhow::Result<crate::live_config::Maps> {
    let Some(path) = path else {
        return Ok(Default::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    wisp_api::config::maps_from_yaml(&text)
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))
}

/// Reads the API token, creating it (mode 0600) on first start.
fn load_or_create_token(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading token {}", path.display())),
    }
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating token {}", path.display()))?;
    writeln!(f, "{token}")?;
    f.sync_all()?;
    if token.is_empty() {
        bail!("generated an empty token");
    }
    Ok(token)
}

/// Installs the SIGINT/SIGTERM handlers now; the returned future resolves on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stages_run_in_order_each_after_the_last_finished() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut stages = Stages::default();
        for (name, ms) in [("stop accepting", 0), ("drain", 300), ("stop replicas", 10)] {
            let log = log.clone();
            stages.stage(name, async move {
                log.lock().unwrap().push(format!("{name} start"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                log.lock().unwrap().push(format!("{name} end"));
            });
        }
        let done = stages.run().await;
        assert_eq!(done, ["stop accepting", "drain", "stop replicas"]);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "stop accepting start",
                "stop accepting end",
                "drain start",
                "drain end",
                "stop replicas start",
                "stop replicas end"
            ]
        );
    }
}
