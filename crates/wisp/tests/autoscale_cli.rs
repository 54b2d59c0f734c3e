//! `wisp autoscale simulate`: the KPA replayed offline, as a user runs it.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::process::Command;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const SERVICE: &str = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: autoscale\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/target: \"10\"\n    spec:\n      containers:\n      - command: [autoscale]\n";

#[test]
fn fifty_clients_at_target_ten_settle_at_eight_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let svc = write(dir.path(), "svc.yaml", SERVICE);
    let trace = write(
        dir.path(),
        "load.csv",
        "seconds,concurrency\n0,50\n300,50\n",
    );
    let out = Command::new(common::wisp_bin())
        .args([
            "autoscale",
            "simulate",
            "-f",
            &svc,
            "--trace",
            &trace,
            "-o",
            "csv",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
    };
    let (t, desired, ready) = (col("time"), col("desired"), col("ready"));
    let last: Vec<&str> = csv.lines().last().unwrap().split(',').collect();
    // ⌈50 / (10 × 0.7)⌉ = 8 (target = CC × utilization).
    assert_eq!(last[desired], "8", "{csv}");
    assert_eq!(last[ready], "8", "{csv}");
    // Ticks every 2 s.
    let times: Vec<f64> = csv
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.split(',').nth(t).unwrap().parse().unwrap())
        .collect();
    assert_eq!(times, [0.0, 2.0, 4.0]);

    // The table form carries an ASCII chart of replicas over time.
    let out = Command::new(common::wisp_bin())
        .args(["autoscale", "simulate", "-f", &svc, "--trace", &trace])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("DESIRED") && text.contains('#'), "{text}");
}

#[test]
fn bad_inputs_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad_svc = write(
        dir.path(),
        "bad.yaml",
        &SERVICE.replace("target: \"10\"", "window: \"1s\""),
    );
    let trace = write(dir.path(), "load.csv", "seconds,concurrency\n0,5\n");
    let out = Command::new(common::wisp_bin())
        .args(["autoscale", "simulate", "-f", &bad_svc, "--trace", &trace])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected 6s <= 1s <= 1h0m0s: spec.template.metadata.annotations.autoscaling.knative.dev/window"), "{err}");

    let svc = write(dir.path(), "svc.yaml", SERVICE);
    let bad_trace = write(dir.path(), "bad.csv", "seconds,concurrency\n5,1\n3,1\n");
    let out = Command::new(common::wisp_bin())
        .args(["autoscale", "simulate", "-f", &svc, "--trace", &bad_trace])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3"), "{err}");
}
