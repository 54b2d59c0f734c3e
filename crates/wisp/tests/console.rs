//! Issue #18: the web console end to end in a real headless Chromium (Debian's
//! `chromium`, driven by playwright-core from `tests/console/`): sign in with the token,
//! see the service, follow its revision, watch the replica chart change under load
//! without a reload, take a screenshot; no console errors, no request off loopback.
//! Skipped, saying why, where Chromium or playwright-core is not installed
//! (`apt-get install chromium`, `npm ci --prefix crates/wisp/tests/console`).
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use common::{Server, sample_bin, wait_for};

const CONFIG: &str = "config-autoscaler:\n  stable-window: 6s\n";
const HOST: &str = "auto.default.example.com";

fn service_yaml() -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: auto\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/target: \"1\"\n        autoscaling.knative.dev/max-scale: \"4\"\n    spec:\n      containers:\n      - command: [{:?}]\n",
        sample_bin("autoscale").display().to_string()
    )
}

fn driver_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

#[test]
fn the_console_shows_a_service_and_its_replicas_changing_live() {
    let chromium = std::path::Path::new("/usr/bin/chromium");
    let playwright = driver_dir().join("node_modules/playwright-core");
    if !chromium.exists() || !playwright.exists() {
        eprintln!(
            "SKIPPED: the console browser test needs /usr/bin/chromium (apt-get install chromium) and playwright-core (npm ci --prefix crates/wisp/tests/console)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    assert!(!s.console_addr.is_empty(), "the console is on by default");
    s.apply(&service_yaml());
    wait_for("auto ready", Duration::from_secs(60), || {
        // Ready=True, not just a Ready condition: until then the route may not be in
        // the ingress yet, and the first request would not reach the revision.
        s.ready("services", "auto")
            .filter(|(st, _, _)| st == "True")
    });

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    let _ = std::fs::remove_file(&shot);
    let mut node = Command::new("node")
        .arg(driver_dir().join("drive.mjs"))
        .env("WISP_CONSOLE", format!("http://{}", s.console_addr))
        .env("WISP_TOKEN", &s.token)
        .env("WISP_SERVICE", "auto")
        .env("WISP_SCREENSHOT", &shot)
        .env("WISP_REPLICAS", "2")
        .stdout(Stdio::piped())
        .spawn()
        .expect("node (apt-get install nodejs)");
    let (tx, rx) = mpsc::channel();
    let stdout = node.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(90));
    assert_eq!(
        ready.as_deref(),
        Ok("READY"),
        "the driver did not reach the revision page"
    );

    // Load: 4 clients, each request holding its replica 300 ms (target 0.7 per replica).
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, addr) = (stop.clone(), s.http_addr.clone());
            std::thread::spawn(move || {
                let c = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _ = c
                        .get(format!("http://{addr}/?sleep=300"))
                        .header("host", HOST)
                        .send()
                        .and_then(|r| r.bytes());
                }
            })
        })
        .collect();
    let result = rx.recv_timeout(Duration::from_secs(180));
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let _ = node.wait();
    let line = result.expect("the driver's result");
    let json = line
        .strip_prefix("RESULT ")
        .unwrap_or_else(|| panic!("{line}"));
    let r: serde_json::Value = serde_json::from_str(json).unwrap();
    eprintln!("console test: {r}");
    eprintln!("console test: screenshot {}", shot.display());
    assert_eq!(r["errors"], serde_json::json!([]), "console errors: {r}");
    assert_eq!(
        r["outside"],
        serde_json::json!([]),
        "requests off loopback: {r}"
    );
    assert_eq!(
        r["steps"],
        serde_json::json!([
            "login page",
            "service list",
            "service page",
            "revision followed",
            format!("replica chart at {}", r["replicas"]["after"]),
            "screenshot"
        ])
    );
    assert!(r["replicas"]["before"].as_f64().unwrap() < 2.0, "{r}");
    assert!(
        r["replicas"]["after"].as_f64().unwrap() >= 2.0,
        "the replica chart did not show the scale-up: {r}"
    );
    assert_eq!(
        r["reloads"], 0,
        "the chart changed without reloading the page"
    );
    assert!(shot.exists(), "no screenshot at {}", shot.display());
}
