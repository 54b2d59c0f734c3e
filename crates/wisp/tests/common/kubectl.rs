//! The real `kubectl` pointed at a test server (`wisp kubeconfig`'s kubeconfig: the
//! server's CA and admin token), for the kubectl tests.

use std::{path::Path, process::Command};

use super::Server;

pub struct Kubectl {
    pub kubeconfig: std::path::PathBuf,
    pub cache: std::path::PathBuf,
}

impl Kubectl {
    /// kubectl with the kubeconfig `wisp kubeconfig` prints for `s`.
    pub fn new(dir: &Path, s: &Server) -> Kubectl {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, wisp_kubeconfig(s)).unwrap();
        Kubectl {
            kubeconfig,
            cache: dir.join("cache"),
        }
    }

    /// Runs kubectl: (success, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("kubectl")
            .args(args)
            .arg("--cache-dir")
            .arg(&self.cache)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.cache.parent().unwrap())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }
}

/// `wisp kubeconfig` for the server's data dir.
pub fn wisp_kubeconfig(s: &Server) -> String {
    let out = Command::new(super::wisp_bin())
        .arg("kubeconfig")
        .arg("--data-dir")
        .arg(s.data_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn kubectl_installed() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Each line's whitespace-separated words (kubectl pads columns with spaces).
pub fn words(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}
