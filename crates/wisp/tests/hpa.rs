//! Issue #19 item 4: an `hpa.autoscaling.knative.dev` revision is scaled on its replicas'
//! CPU, as Kubernetes' HPA scales a Knative HPA-class revision: a real `wisp serve` with a
//! short sync period (`wisp-hpa-sync-period`) and Knative's `window` annotation (which
//! `MakeHPA` turns into both stabilization windows), the autoscale sample burning CPU
//! (`?prime=N`) through the ingress: 1 → more replicas under load, back to 1 (never 0)
//! once idle for the window.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    sync::atomic::{AtomicBool, AtomicI64, Ordering},
    time::{Duration, Instant},
};

use common::{Server, sample_bin, wait_for};

const CONFIG: &str = "config-autoscaler:\n  wisp-hpa-sync-period: 1s\n";
const HOST: &str = "cpu.default.example.com";
const REV: &str = "cpu-00001";

fn service_yaml() -> String {
    format!(
        "apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: cpu
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/class: hpa.autoscaling.knative.dev
        autoscaling.knative.dev/metric: cpu
        autoscaling.knative.dev/target: \"10\"
        autoscaling.knative.dev/min-scale: \"1\"
        autoscaling.knative.dev/max-scale: \"3\"
        autoscaling.knative.dev/window: 6s
    spec:
      containers:
      - command: [{:?}]
        resources:
          requests:
            cpu: 100m
",
        sample_bin("autoscale").display().to_string()
    )
}

fn get_kpa_row(s: &Server) -> Vec<String> {
    let out = s.cli().args(["get", "kpa"]).output().expect("wisp get kpa");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    out.lines()
        .find(|l| l.starts_with(REV))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn hpa_class_scales_on_cpu_and_back_to_min_scale() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let s = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    s.apply(&service_yaml());
    wait_for("service Ready", Duration::from_secs(30), || {
        s.ready("services", "cpu").filter(|(st, _, _)| st == "True")
    });
    // One replica (min-scale), the PA Ready with Knative's HPA-class status.
    wait_for("PA at 1", Duration::from_secs(10), || {
        (s.pa_scale(REV) == Some((1, 1))).then_some(())
    });
    assert_eq!(s.running_pods(REV), 1);
    let row = get_kpa_row(&s);
    assert_eq!(&row[1..4], ["1", "1", "True"], "{row:?}");

    // CPU-heavy load: two clients asking for primes. One replica at ≥ 11 m of CPU is past
    // the 10 % of its 100 m request, so the HPA wants more; max-scale caps it at 3.
    let stop = AtomicBool::new(false);
    let ok = AtomicI64::new(0);
    let failed = AtomicI64::new(0);
    let max_pods = std::thread::scope(|scope| {
        for _ in 0..2 {
            let (stop, ok, failed, addr) = (&stop, &ok, &failed, &s.http_addr);
            scope.spawn(move || {
                let c = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let r = c
                        .get(format!("http://{addr}/?prime=3000000"))
                        .header("host", HOST)
                        .send()
                        .and_then(|r| r.error_for_status())
                        .and_then(|r| r.text());
                    match r {
                        Ok(body) if body.contains("largest prime") => {
                            ok.fetch_add(1, Ordering::Relaxed)
                        }
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        let mut max_pods = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let pods = s.running_pods(REV);
            max_pods = max_pods.max(pods);
            let desired = s.pa_scale(REV).map_or(0, |(d, _)| d);
            assert!(desired <= 3, "max-scale 3 holds: desiredScale {desired}");
            if pods > 1 && desired > 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        stop.store(true, Ordering::Relaxed);
        max_pods
    });
    let (ok, failed) = (ok.into_inner(), failed.into_inner());
    eprintln!(
        "{ok} requests answered ({failed} failed); up to {max_pods} pods after {:?}",
        started.elapsed()
    );
    assert!(max_pods > 1, "scaled out on CPU: at most {max_pods} pods");
    assert!(ok > 0 && failed == 0, "{failed} of {} failed", ok + failed);
    let (desired, _) = s.pa_scale(REV).unwrap();
    assert!((2..=3).contains(&desired), "desiredScale {desired}");

    // Idle: back to min-scale once the 6 s window has no higher recommendation, and never
    // to zero (the HPA class has a floor of 1).
    let idle = Instant::now();
    wait_for("back to 1", Duration::from_secs(60), || {
        let pods = s.running_pods(REV);
        let scale = s.pa_scale(REV);
        assert!(pods != 0, "an HPA-class revision never scales to zero");
        assert_ne!(scale.map(|(d, _)| d), Some(0), "desiredScale never 0");
        (scale == Some((1, 1)) && pods == 1).then_some(())
    });
    let down_after = idle.elapsed();
    assert!(
        down_after >= Duration::from_secs(5),
        "held for the 6 s scale-down window, came down after {down_after:?}"
    );
    // And it stays there.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(s.pa_scale(REV), Some((1, 1)));
        assert_eq!(s.running_pods(REV), 1);
        std::thread::sleep(Duration::from_millis(500));
    }
    let row = get_kpa_row(&s);
    assert_eq!(&row[1..4], ["1", "1", "True"], "{row:?}");
    eprintln!(
        "down after {down_after:?}; whole test took {:?}",
        started.elapsed()
    );
}
