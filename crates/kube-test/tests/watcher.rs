//! kube-rs against a real `wisp serve` over TLS: discovery finds the Knative Service kind,
//! and a `watcher` on `Api<DynamicObject>` sees the initial list, then a create, an update
//! and a delete, in order.
//!
//! The `wisp` binary is the one cargo builds for the workspace's tests
//! (`target/<profile>/wisp`, beside this test's `deps/` directory); `WISP_BIN` overrides it.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use futures_util::StreamExt;
use kube::{
    Api, Client, Config,
    api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::watcher,
};

fn wisp_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WISP_BIN") {
        return p.into();
    }
    // target/<profile>/deps/watcher-<hash> → target/<profile>/wisp
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("wisp");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p wisp) or set WISP_BIN",
        bin.display()
    );
    bin
}

/// `wisp serve` on ephemeral ports with a fresh data dir; killed on drop.
struct Server {
    child: Child,
    data_dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Server {
        let data_dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(wisp_bin())
            .arg("serve")
            .args(["--api-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--local-addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data_dir.path())
            .env_remove("WISP_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("wisp: API listening on ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("wisp serve did not report its API address");
        Server { child, data_dir }
    }

    /// A kube client from the kubeconfig `wisp kubeconfig` prints (the server's CA and
    /// admin token).
    async fn client(&self) -> Client {
        let out = Command::new(wisp_bin())
            .arg("kubeconfig")
            .arg("--data-dir")
            .arg(self.data_dir.path())
            .output()
            .unwrap();
        assert!(out.status.success());
        let kubeconfig = Kubeconfig::from_yaml(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }
}

const STEP: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_watcher_on_dynamic_objects() {
    let s = Server::start();
    let client = s.client().await;

    // Discovery (aggregated or not, as kube-rs asks) maps the kind to its resource.
    let gvk = GroupVersionKind::gvk("serving.knative.dev", "v1", "Service");
    let (resource, caps) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(resource.plural, "services");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);

    let svc = |name: &str| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"image": "example.com/hello"}]}}},
        }))
        .unwrap()
    };
    api.create(&PostParams::default(), &svc("before"))
        .await
        .unwrap();

    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut next = async || {
        tokio::time::timeout(STEP, events.next())
            .await
            .expect("no watch event in time")
            .expect("the watch stream ended")
            .expect("a watch error")
    };

    // The initial list: Init, the existing object, InitDone.
    assert!(matches!(next().await, watcher::Event::Init));
    match next().await {
        watcher::Event::InitApply(o) => assert_eq!(o.metadata.name.as_deref(), Some("before")),
        other => panic!("expected InitApply(before), got {other:?}"),
    }
    assert!(matches!(next().await, watcher::Event::InitDone));

    // Then a create, an update with our label, and a delete of another object, in order
    // (the controller writes status in between: those are Apply events too).
    api.create(&PostParams::default(), &svc("from-kube-rs"))
        .await
        .unwrap();
    let patch = serde_json::json!({"metadata": {"labels": {"from": "kube-rs"}}});
    api.patch(
        "from-kube-rs",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();

    let mut created = false;
    let mut labelled = false;
    let mut last_rv = 0u64;
    loop {
        let ev = next().await;
        let (deleted, o) = match ev {
            watcher::Event::Apply(o) => (false, o),
            watcher::Event::Delete(o) => (true, o),
            other => panic!("unexpected {other:?}"),
        };
        let rv: u64 = o
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rv > last_rv,
            "resourceVersions go back: {rv} after {last_rv}"
        );
        last_rv = rv;
        match (o.metadata.name.as_deref(), deleted) {
            (Some("from-kube-rs"), false) => {
                created = true;
                let label = o.metadata.labels.as_ref().and_then(|l| l.get("from"));
                labelled |= label.is_some_and(|v| v == "kube-rs");
            }
            (Some("before"), true) => {
                assert!(
                    created && labelled,
                    "the delete came before the create/update"
                );
                break;
            }
            (Some("before"), false) => {} // the controller's last status write
            other => panic!("unexpected event for {other:?}"),
        }
    }
}
