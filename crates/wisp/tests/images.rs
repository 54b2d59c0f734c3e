//! Image-only Knative Services through a real `wisp serve`: images built from the sample
//! binaries, pushed to Debian's `docker-registry` on loopback (or loaded from an archive),
//! run in sandboxes of their own by wisp's own container runtime (the default) and, where a
//! test says so, by runc. These tests need root, `runc` and `docker-registry` (CI installs
//! both and runs as root); elsewhere they say why and pass.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../image/tests/common/mod.rs"]
mod registry;

use std::process::Command;
use std::time::Duration;

use common::{Server, sample_bin, wait_for};
use registry::Registry;

const READY: Duration = Duration::from_secs(60);

/// Why container tests cannot run here, if they cannot.
fn unusable() -> Option<&'static str> {
    let which = |b: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !rustix_root() {
        Some("not root")
    } else if !which("runc") {
        Some("no runc (apt-get install runc)")
    } else if !std::path::Path::new("/usr/bin/docker-registry").exists() {
        Some("no docker-registry (apt-get install docker-registry)")
    } else {
        None
    }
}

fn rustix_root() -> bool {
    // `id -u` rather than a libc call: the tests have no unsafe and no extra dependency.
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

macro_rules! require_containers {
    () => {
        if let Some(why) = unusable() {
            eprintln!("SKIPPED: container tests need root, runc and docker-registry: {why}");
            return;
        }
    };
}

/// The `hello` sample as an image named `name` in a scratch store (listening on all the
/// sandbox's addresses, greeting `target`); returns the store.
fn pack_hello(dir: &std::path::Path, name: &str, target: &str) -> wisp_image::Store {
    let store = wisp_image::Store::open(dir.join("images")).unwrap();
    wisp_image::pack::pack_binary(
        &store,
        &sample_bin("hello"),
        name,
        &["HOST=0.0.0.0".to_string(), format!("TARGET={target}")],
    )
    .unwrap();
    store
}

/// Pushes `local` from `store` to `remote`.
fn push(store: &wisp_image::Store, local: &str, remote: &str, creds: Option<(&str, &str)>) {
    let opts = wisp_image::RegistryOptions {
        credentials: creds.map(|(u, p)| wisp_image::Credentials {
            username: u.into(),
            password: p.into(),
        }),
        ..wisp_image::RegistryOptions::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(wisp_image::registry::push(store, local, remote, &opts))
        .unwrap();
}

fn service(name: &str, image: &str, annotations: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  \
         template:\n    metadata:\n      annotations:\n        {annotations}\n    spec:\n      \
         containers:\n      - image: {image}\n"
    )
}

fn get(s: &Server, host: &str) -> Option<String> {
    let r = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{}/", s.http_addr))
        .header("host", host)
        .send()
        .ok()?;
    r.status().is_success().then(|| r.text().unwrap())
}

fn revision(s: &Server, name: &str) -> serde_json::Value {
    s.get_json(&format!(
        "/apis/serving.knative.dev/v1/namespaces/default/revisions/{name}"
    ))
    .unwrap()
}

fn ready(s: &Server, plural: &str, name: &str) {
    let (st, reason, message) = wait_for(&format!("{plural}/{name} to settle"), READY, || {
        s.ready(plural, name).filter(|(st, _, _)| st != "Unknown")
    });
    assert_eq!(st, "True", "{plural}/{name}: {reason}: {message}");
}

/// Network namespaces and containers of this server's container runtime: those runc lists
/// under its root, and (either runtime) the containers' cgroups.
fn sandboxes(s: &Server) -> (usize, usize) {
    let prefix = format!("{}-", s.container_bridge());
    let netns = std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0);
    let out = Command::new("runc")
        .arg("--root")
        .arg(s.data_dir().join("containers/runc"))
        .args(["list", "-q"])
        .output()
        .unwrap();
    let mut containers: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let cgroups = std::path::Path::new("/sys/fs/cgroup/memory")
        .join(format!("wisp-{}", s.container_bridge()));
    if let Ok(dir) = std::fs::read_dir(cgroups) {
        containers.extend(
            dir.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned()),
        );
    }
    containers.sort();
    containers.dedup();
    (netns, containers.len())
}

#[test]
fn an_image_only_service_runs_pinned_to_its_digest_and_survives_kill_9() {
    image_only_service(&[]);
}

#[test]
fn the_same_with_runc() {
    image_only_service(&["--container-runtime", "runc"]);
}

fn image_only_service(args: &[&str]) {
    require_containers!();
    let reg = Registry::start(None);
    let scratch = tempfile::tempdir().unwrap();
    let remote = format!("{}/samples/hello:latest", reg.addr);
    let store = pack_hello(scratch.path(), "hello:one", "one");
    push(&store, "hello:one", &remote, None);
    let first = store.lookup("hello:one").unwrap().unwrap();

    let mut s = Server::start_with(args);
    // Two replicas of an app that listens on the fixed port 8080: each in its own sandbox.
    s.apply(&service(
        "hello",
        &remote,
        "autoscaling.knative.dev/min-scale: \"2\"",
    ));
    ready(&s, "services", "hello");
    let host = "hello.default.example.com";
    assert_eq!(get(&s, host).unwrap(), "Hello one!\n");
    let rev = revision(&s, "hello-00001");
    assert_eq!(
        rev["status"]["containerStatuses"][0]["imageDigest"],
        format!("{}/samples/hello@{first}", reg.addr),
        "the tag is resolved to its digest as the revision is created"
    );
    // Ready takes one replica; the second (min-scale 2) follows.
    wait_for("both replicas", READY, || {
        (revision(&s, "hello-00001")["status"]["actualReplicas"] == 2).then_some(())
    });
    assert_eq!(sandboxes(&s), (2, 2));

    // The tag moves; the revision keeps its digest, even across a kill -9 of wisp: the
    // next run removes the old sandboxes and starts the revision's replicas from the digest.
    let store2 = pack_hello(scratch.path(), "hello:two", "two");
    push(&store2, "hello:two", &remote, None);
    s.kill9_and_restart();
    wait_for("replicas after the restart", READY, || {
        (revision(&s, "hello-00001")["status"]["actualReplicas"] == 2).then_some(())
    });
    assert_eq!(get(&s, host).unwrap(), "Hello one!\n");
    assert_eq!(sandboxes(&s), (2, 2), "nothing of the killed run is left");

    // A new revision resolves the tag anew.
    s.apply(&service(
        "hello",
        &remote,
        "autoscaling.knative.dev/min-scale: \"1\"",
    ));
    wait_for("the second revision to take the traffic", READY, || {
        get(&s, host).filter(|b| b == "Hello two!\n")
    });

    // A clean stop leaves nothing behind either.
    s.terminate();
    assert_eq!(sandboxes(&s), (0, 0));
}

#[test]
fn a_private_registry_needs_credentials() {
    require_containers!();
    let reg = Registry::start(Some(("alice", "s3cret")));
    let scratch = tempfile::tempdir().unwrap();
    let remote = format!("{}/private/hello:1", reg.addr);
    let store = pack_hello(scratch.path(), "hello:private", "private");
    push(&store, "hello:private", &remote, Some(("alice", "s3cret")));

    // Without credentials: Knative's ContainerMissing with the registry's refusal.
    let s = Server::start();
    s.apply(&service(
        "private",
        &remote,
        "autoscaling.knative.dev/min-scale: \"1\"",
    ));
    let (_, reason, message) = wait_for("the revision to fail", READY, || {
        s.ready("revisions", "private-00001")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!(reason, "ContainerMissing");
    assert!(
        message.starts_with(&format!("Unable to fetch image {remote:?}"))
            && message.contains("unauthorized"),
        "{message}"
    );

    // With the pod's `imagePullSecrets`: a `kubernetes.io/dockerconfigjson` Secret of its
    // namespace (as `kubectl create secret docker-registry` makes it) serves both the
    // digest resolution and the pull.
    let config = std::fs::read_to_string(reg.docker_config("alice", "s3cret")).unwrap();
    s.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: \
         kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    s.apply(&format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: pulled\nspec:\n  \
         template:\n    spec:\n      imagePullSecrets:\n      - name: regcred\n      \
         containers:\n      - image: {remote}\n"
    ));
    ready(&s, "services", "pulled");
    assert_eq!(
        get(&s, "pulled.default.example.com").unwrap(),
        "Hello private!\n"
    );
    drop(s);

    // With a Docker config naming the registry, as `docker login` writes it.
    let docker = tempfile::tempdir().unwrap();
    std::fs::copy(
        reg.docker_config("alice", "s3cret"),
        docker.path().join("config.json"),
    )
    .unwrap();
    let s = Server::start_with_env(&[], &[("DOCKER_CONFIG", docker.path().to_str().unwrap())]);
    s.apply(&service(
        "private",
        &remote,
        "autoscaling.knative.dev/min-scale: \"1\"",
    ));
    ready(&s, "services", "private");
    assert_eq!(
        get(&s, "private.default.example.com").unwrap(),
        "Hello private!\n"
    );
}

#[test]
fn a_loaded_archive_runs_with_no_registry_at_all() {
    require_containers!();
    // `wisp image pack --output` makes the archive (as the README shows for the samples)…
    let scratch = tempfile::tempdir().unwrap();
    let archive = scratch.path().join("autoscale-go.tar");
    let name = "gcr.io/knative-samples/autoscale-go:0.1";
    let out = Command::new(common::wisp_bin())
        .args(["image", "pack", "--data-dir"])
        .arg(scratch.path())
        .arg("--binary")
        .arg(sample_bin("autoscale"))
        .args(["--tag", name, "--env", "HOST=0.0.0.0", "--output"])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // … and `wisp image load` puts it in the server's store: the seed's YAML, unchanged
    // (in its namespace), runs without asking gcr.io.
    let s = Server::start();
    let out = s
        .cli()
        .args(["image", "load", "-i"])
        .arg(&archive)
        .env("WISP_DATA_DIR", s.data_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns =
        s.cli()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(
                    b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: yoosung-jeon\n",
                )?;
                c.wait()
            })
            .unwrap();
    assert!(ns.success());
    s.apply(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: autoscale-go\n  \
         namespace: yoosung-jeon\nspec:\n  template:\n    metadata:\n      annotations:\n        \
         autoscaling.knative.dev/target: \"10\"\n    spec:\n      containers:\n      - image: \
         gcr.io/knative-samples/autoscale-go:0.1\n",
    );
    let ksvc = "/apis/serving.knative.dev/v1/namespaces/yoosung-jeon/services/autoscale-go";
    wait_for("autoscale-go to be Ready", READY, || {
        let o = s.get_json(ksvc)?;
        let ready = o["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        assert_ne!(ready["status"], "False", "{ready}");
        (ready["status"] == "True").then_some(())
    });
    assert!(
        get(&s, "autoscale-go.yoosung-jeon.example.com").is_some(),
        "the loaded image answers"
    );
}

/// Init containers from an image (bash, packed with its libraries): pinned to their digest
/// as the revision is created, run in the replica's sandbox before the app, and, when one
/// fails, shown on the pod and on the revision as Knative shows it.
#[test]
fn init_containers_run_from_their_pinned_images_before_the_app() {
    require_containers!();
    let reg = Registry::start(None);
    let scratch = tempfile::tempdir().unwrap();
    let hello = format!("{}/samples/hello:latest", reg.addr);
    let bash = format!("{}/tools/bash:latest", reg.addr);
    let store = pack_hello(scratch.path(), "hello:one", "one");
    push(&store, "hello:one", &hello, None);
    wisp_image::pack::pack_binary(&store, std::path::Path::new("/bin/bash"), "bash:one", &[])
        .unwrap();
    push(&store, "bash:one", &bash, None);
    let bash_digest = store.lookup("bash:one").unwrap().unwrap();
    let cfg = scratch.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "config-features:\n  kubernetes.podspec-init-containers: enabled\n",
    )
    .unwrap();
    let mut s = Server::start_with(&["--config", &cfg.display().to_string()]);
    let init = |name: &str, script: &str| {
        format!(
            "      - name: {name}\n        image: {bash}\n        command: [/usr/local/bin/bash, -c, {script:?}]\n"
        )
    };
    let svc = |name: &str, inits: &str, annotations: &str| {
        format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  \
             template:\n    metadata:\n      annotations:\n        x: \"z\"\n{annotations}    spec:\n      \
             initContainers:\n{inits}      containers:\n      - image: {hello}\n"
        )
    };
    s.apply(&svc(
        "seeded",
        &format!(
            "{}{}",
            init("first", "echo first init on $(< /etc/hostname)"),
            init("second", "echo second init")
        ),
        "",
    ));
    ready(&s, "services", "seeded");
    assert_eq!(
        get(&s, "seeded.default.example.com").unwrap(),
        "Hello one!\n"
    );
    let rev = revision(&s, "seeded-00001");
    assert_eq!(
        rev["status"]["initContainerStatuses"][0]["imageDigest"],
        format!("{}/tools/bash@{bash_digest}", reg.addr),
        "init containers' images are resolved to digests too"
    );
    let pods = s
        .get_json("/api/v1/namespaces/default/pods?labelSelector=serving.knative.dev%2Frevision%3Dseeded-00001")
        .unwrap();
    let pod = &pods["items"][0];
    let inits = &pod["status"]["initContainerStatuses"];
    assert_eq!(inits[0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(inits[1]["state"]["terminated"]["reason"], "Completed");
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    let logs = wait_for("the init containers' output", READY, || {
        let out = s.cli().args(["logs", "seeded"]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.contains("second init").then_some(text)
    });
    assert!(
        logs.contains(&format!("first init on {pod_name}")),
        "in the replica's sandbox: {logs}"
    );

    s.apply(&svc(
        "unseeded",
        &init("migrate", "echo no database >&2; exit 5"),
        "        serving.knative.dev/progress-deadline: 5s\n",
    ));
    let (_, reason, message) = wait_for("unseeded to fail", READY, || {
        s.ready("revisions", "unseeded-00001")
            .filter(|(st, _, _)| st == "False")
    });
    assert_eq!((reason.as_str(), message.as_str()), ("PodInitializing", ""));
    let init = wait_for("the init container's failure on the pod", READY, || {
        let pods = s.get_json(
            "/api/v1/namespaces/default/pods?labelSelector=serving.knative.dev%2Frevision%3Dunseeded-00001",
        )?;
        let c = pods["items"][0]["status"]["initContainerStatuses"][0].clone();
        (c["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(c)
    });
    let last = &init["lastState"]["terminated"];
    assert_eq!(
        (&last["exitCode"], &last["message"]),
        (&5.into(), &"no database".into())
    );
    s.terminate();
    assert_eq!(sandboxes(&s), (0, 0));
}
