//! Knative's ConfigMaps in `knative-serving` as wisp's live configuration, against a real
//! `wisp serve` and the real kubectl: seeded from `--config` on first start, kept over the
//! file afterwards, `kubectl edit` of config-autoscaler changing what the autoscaler does
//! without a restart, a bad value refused with Knative's config webhook's message, and the
//! namespace kept. The kubectl tests are skipped (with a note) when kubectl is not installed.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::{Server, sample_bin, wait_for};

const MAPS: [&str; 8] = [
    "config-autoscaler",
    "config-defaults",
    "config-deployment",
    "config-domain",
    "config-features",
    "config-gc",
    "config-network",
    "config-observability",
];

fn kubectl_installed() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Kubectl {
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn new(dir: &Path, s: &Server) -> Kubectl {
        let out = Command::new(common::wisp_bin())
            .args(["kubeconfig", "--data-dir"])
            .arg(s.data_dir())
            .output()
            .unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, out.stdout).unwrap();
        Kubectl {
            kubeconfig,
            dir: dir.to_path_buf(),
        }
    }

    /// Runs kubectl, with `KUBE_EDITOR` when given: (success, stdout, stderr).
    fn run_with_editor(&self, args: &[&str], editor: Option<&Path>) -> (bool, String, String) {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.dir)
            .env("TMPDIR", &self.dir);
        if let Some(e) = editor {
            cmd.env("KUBE_EDITOR", e);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run_with_editor(args, None);
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    /// `kubectl edit` with an "editor" that runs `sed` with `script` on the file.
    fn edit(&self, args: &[&str], script: &str) -> (bool, String, String) {
        let editor = self.dir.join(format!("editor-{}.sh", script.len()));
        std::fs::write(&editor, format!("#!/bin/sh\nsed -i '{script}' \"$1\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut all = vec!["edit"];
        all.extend_from_slice(args);
        self.run_with_editor(&all, Some(&editor))
    }
}

fn actual_replicas(s: &Server, rev: &str) -> i64 {
    s.get_json(&format!(
        "/apis/serving.knative.dev/v1/namespaces/default/revisions/{rev}"
    ))
    .and_then(|o| o["status"]["actualReplicas"].as_i64())
    .unwrap_or(-1)
}

#[test]
fn config_maps_are_the_live_configuration() {
    if !kubectl_installed() {
        eprintln!("kubectl not on PATH: skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config.yaml");
    std::fs::write(
        &file,
        "config-autoscaler:\n  stable-window: 6s\nconfig-defaults:\n  revision-timeout-seconds: \"120\"\n",
    )
    .unwrap();
    let mut s = Server::start_with(&["--config", file.to_str().unwrap()]);
    let k = Kubectl::new(tmp.path(), &s);

    // Every map exists, seeded from the file where it names them.
    let names = k.ok(&["get", "configmaps", "-n", "knative-serving", "-o", "name"]);
    let want: Vec<String> = MAPS.iter().map(|m| format!("configmap/{m}")).collect();
    assert_eq!(names.lines().collect::<Vec<_>>(), want);
    let jsonpath = |map: &str, key: &str| {
        k.ok(&[
            "get",
            "configmap",
            map,
            "-n",
            "knative-serving",
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
        ])
    };
    assert_eq!(jsonpath("config-autoscaler", "stable-window"), "6s");
    assert_eq!(jsonpath("config-domain", "example\\.com"), "");

    // The namespace stays, as `default` does.
    let (ok, _, err) = k.run_with_editor(&["delete", "namespace", "knative-serving"], None);
    assert!(!ok);
    assert!(
        err.contains(
            "namespaces \"knative-serving\" is forbidden: this namespace may not be deleted"
        ),
        "{err}"
    );

    // A bad value is refused as Knative's config webhook refuses it; nothing changes.
    let (ok, _, err) = k.edit(
        &["configmap", "config-autoscaler", "-n", "knative-serving"],
        "s/^  stable-window: .*/  stable-window: soon/",
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("admission webhook \"config.webhook.serving.knative.dev\" denied the request: validation failed: failed to parse data: failed to parse \"stable-window\": time: invalid duration \"soon\""),
        "{err}"
    );
    assert_eq!(jsonpath("config-autoscaler", "stable-window"), "6s");
    let (ok, _, err) = k.run_with_editor(
        &[
            "patch",
            "configmap",
            "config-defaults",
            "-n",
            "knative-serving",
            "-p",
            r#"{"data":{"revision-timeout-seconds":"900"}}"#,
        ],
        None,
    );
    assert!(!ok);
    assert!(
        err.contains("validation failed: revision-timeout-seconds (900) cannot be greater than max-revision-timeout-seconds (600)"),
        "{err}"
    );

    // A service with the default bounds runs one replica (nothing asks for more: no load).
    let yaml = format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{:?}]\n",
        sample_bin("hello").display().to_string()
    );
    s.apply(&yaml);
    wait_for("hello Ready", Duration::from_secs(60), || {
        s.ready("services", "hello")
            .filter(|(st, _, _)| st == "True")
    });
    let rev = s
        .get_json("/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00001")
        .unwrap();
    // config-defaults from the file reached the defaulting of the revision.
    assert_eq!(rev["spec"]["timeoutSeconds"], 120);
    wait_for("one replica", Duration::from_secs(30), || {
        (actual_replicas(&s, "hello-00001") == 1).then_some(())
    });

    // `kubectl edit` of config-autoscaler: min-scale 2 applies to the running revision,
    // without a restart.
    let (ok, out, err) = k.edit(
        &["configmap", "config-autoscaler", "-n", "knative-serving"],
        "s/^data:$/data:\\n  min-scale: \"2\"/",
    );
    assert!(ok, "{err}");
    assert!(out.contains("configmap/config-autoscaler edited"), "{out}");
    wait_for(
        "two replicas from the edited min-scale",
        Duration::from_secs(30),
        || (actual_replicas(&s, "hello-00001") == 2).then_some(()),
    );

    // config-defaults: the next revision is defaulted with the edited value.
    k.ok(&[
        "patch",
        "configmap",
        "config-defaults",
        "-n",
        "knative-serving",
        "-p",
        r#"{"data":{"revision-timeout-seconds":"100"}}"#,
    ]);
    let second = tmp.path().join("second.yaml");
    std::fs::write(&second, yaml.replace("name: hello", "name: second")).unwrap();
    wait_for(
        "the edited revision-timeout-seconds",
        Duration::from_secs(10),
        || {
            let out = k.ok(&[
                "create",
                "-f",
                second.to_str().unwrap(),
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.template.spec.timeoutSeconds}",
            ]);
            (out == "100").then_some(())
        },
    );

    // A restart with the same file keeps the edits: the ConfigMaps are the truth now.
    s.kill9_and_restart();
    let k = Kubectl::new(tmp.path(), &s);
    let min_scale = k.ok(&[
        "get",
        "configmap",
        "config-autoscaler",
        "-n",
        "knative-serving",
        "-o",
        "jsonpath={.data.min-scale}",
    ]);
    assert_eq!(min_scale, "2");
}
