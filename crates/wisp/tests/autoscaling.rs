//! Issue "Request-driven autoscaling": a real `wisp serve` with short KPA windows and the
//! autoscale sample, driven through the ingress: 0 → N replicas under concurrent load, back
//! to 0 when idle, every request answered, and `wisp get kpa` showing the PodAutoscaler.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Server, sample_bin, wait_for};

const CONFIG: &str = "config-autoscaler:\n  stable-window: 6s\n  scale-to-zero-grace-period: 2s\n  allow-zero-initial-scale: \"true\"\n";
const HOST: &str = "auto.default.example.com";
const REV: &str = "auto-00001";

fn service_yaml() -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: auto\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/target: \"5\"\n        autoscaling.knative.dev/initial-scale: \"0\"\n    spec:\n      containers:\n      - command: [{:?}]\n",
        sample_bin("autoscale").display().to_string()
    )
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn get(c: &reqwest::blocking::Client, addr: &str, path: &str) -> u16 {
    match c
        .get(format!("http://{addr}{path}"))
        .header("host", HOST)
        .send()
    {
        Ok(r) => {
            let st = r.status().as_u16();
            let _ = r.bytes();
            st
        }
        Err(_) => 0,
    }
}

fn actual_replicas(s: &Server) -> i64 {
    s.get_json(&format!(
        "/apis/serving.knative.dev/v1/namespaces/default/revisions/{REV}"
    ))
    .and_then(|o| o["status"]["actualReplicas"].as_i64())
    .unwrap_or(-1)
}

fn get_kpa(s: &Server) -> String {
    let out = s.cli().args(["get", "kpa"]).output().expect("wisp get kpa");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn scales_out_under_load_and_back_to_zero_when_idle() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    s.apply(&service_yaml());
    wait_for("service Ready", Duration::from_secs(30), || {
        s.ready("services", "auto")
            .filter(|(st, _, _)| st == "True")
    });
    // The PA exists, owned by the revision, and nothing runs yet.
    wait_for("the PodAutoscaler", Duration::from_secs(10), || {
        s.pa_scale(REV)
    });
    assert_eq!(actual_replicas(&s), 0);

    // 20 clients, 100 ms per request, target 5 × 70 % = 3.5 per replica ⇒ ~6 replicas.
    let stop = AtomicBool::new(false);
    let statuses: Arc<Mutex<Vec<u16>>> = Arc::default();
    let max_actual = AtomicI64::new(0);
    let max_desired = AtomicI64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..20 {
            let (stop, statuses, addr) = (&stop, &statuses, &s.http_addr);
            scope.spawn(move || {
                let c = client();
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    mine.push(get(&c, addr, "/?sleep=100"));
                }
                statuses.lock().unwrap().extend(mine);
            });
        }
        let load_until = Instant::now() + Duration::from_secs(14);
        while Instant::now() < load_until {
            if let Some((d, a)) = s.pa_scale(REV) {
                max_desired.fetch_max(d, Ordering::Relaxed);
                max_actual.fetch_max(a, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let statuses = statuses.lock().unwrap();
    let bad: Vec<&u16> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(
        bad.is_empty(),
        "{} of {} requests failed: {bad:?}",
        bad.len(),
        statuses.len()
    );
    let (max_d, max_a) = (max_desired.into_inner(), max_actual.into_inner());
    eprintln!(
        "{} requests; max desiredScale {max_d}, max actualScale {max_a}",
        statuses.len()
    );
    assert!(
        max_d > 1 && max_a > 1,
        "scaled out: desired {max_d}, actual {max_a}"
    );

    // `wisp get kpa` prints Knative's columns with numbers.
    let out = get_kpa(&s);
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    for col in ["NAME", "DESIREDSCALE", "ACTUALSCALE", "READY", "REASON"] {
        assert!(header.contains(col), "{out}");
    }
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(REV))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    assert!(
        row[1].parse::<i64>().is_ok() && row[2].parse::<i64>().is_ok(),
        "{out}"
    );

    // Idle: down to zero after the stable window and the scale-to-zero sequence.
    wait_for("scale to zero", Duration::from_secs(40), || {
        (s.pa_scale(REV) == Some((0, 0)) && actual_replicas(&s) == 0).then_some(())
    });
    let out = get_kpa(&s);
    let row = out.lines().find(|l| l.starts_with(REV)).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..5], ["0", "0", "False", "NoTraffic"], "{out}");
    let rev = s
        .get_json(&format!(
            "/apis/serving.knative.dev/v1/namespaces/default/revisions/{REV}"
        ))
        .unwrap();
    assert_eq!(rev["status"]["desiredReplicas"], 0, "{rev}");

    // And the next request wakes it again.
    assert_eq!(get(&client(), &s.http_addr, "/"), 200);
    eprintln!("whole test took {:?}", started.elapsed());
}

/// Issue "The rest of Knative Serving", item 5: a revision the KPA scaled out keeps its
/// replicas across a `kill -9` of wisp (as a Deployment keeps its replicas while Knative's
/// autoscaler restarts) instead of starting over from initial-scale (0 here), and then
/// scales down by the normal rules.
#[test]
fn scale_survives_kill_9() {
    scale_survives_a_restart(Server::kill9_and_restart);
}

/// The same across a clean stop (SIGTERM, every replica stopped gracefully) and start.
#[test]
fn scale_survives_a_clean_restart() {
    scale_survives_a_restart(Server::terminate_and_restart);
}

fn scale_survives_a_restart(restart: fn(&mut Server)) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let mut s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    s.apply(&service_yaml());
    wait_for("service Ready", Duration::from_secs(30), || {
        s.ready("services", "auto")
            .filter(|(st, _, _)| st == "True")
    });

    // Load until the KPA has scaled out and the replicas run.
    let stop = AtomicBool::new(false);
    let desired = std::thread::scope(|scope| {
        for _ in 0..20 {
            let (stop, addr) = (&stop, &s.http_addr);
            scope.spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    get(&c, addr, "/?sleep=100");
                }
            });
        }
        let d = wait_for("scaled out", Duration::from_secs(40), || {
            s.pa_scale(REV)
                .filter(|(d, a)| *d > 1 && a == d)
                .map(|(d, _)| d)
        });
        stop.store(true, Ordering::Relaxed);
        d
    });
    // The decision as stored just before the kill (the KPA may have moved since).
    let (before, _) = s.pa_scale(REV).unwrap();
    assert!(before > 1, "desired {desired}, then {before}");

    restart(&mut s);
    // At once: the revision starts what the PA said, without a request or a new decision.
    // Counted in the Pods view (in memory, so only this run's replicas), not the stored
    // status, which still holds the last run's count. Once the new replicas report no load
    // the KPA may scale down by its normal rules, so the peak is what tells.
    let restarted = Instant::now();
    let mut seen = Vec::new();
    let started = wait_for(
        "the replicas started again after the restart",
        Duration::from_secs(15),
        || {
            seen.extend(s.pa_scale(REV).map(|(d, _)| d));
            let pods = s.running_pods(REV);
            (pods >= before).then_some(pods)
        },
    );
    eprintln!(
        "{started} replicas {:?} after the restart (PA said {before}); desiredScale seen: {seen:?}",
        restarted.elapsed()
    );
    // The PA status is continuous: the stored decision, never the -1 of a new decider.
    assert!(seen.iter().all(|d| *d >= 0), "{seen:?}");
    assert_eq!(seen.first(), Some(&before), "{seen:?}");

    // Idle: down to zero by the normal rules (stable window, grace period).
    wait_for(
        "scale to zero after the restart",
        Duration::from_secs(60),
        || (s.pa_scale(REV) == Some((0, 0)) && actual_replicas(&s) == 0).then_some(()),
    );
}
