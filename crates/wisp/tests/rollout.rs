//! Gradual rollout (`serving.knative.dev/rollout-duration`): a real `wisp serve`, a Service
//! on the `hello` sample, a new template under steady load through the ingress. The
//! Route's `status.traffic` must pass through intermediate splits to 100% on the new
//! revision, no request may fail, and the split the requests see must follow the
//! published percents.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Server, sample_bin, wait_for};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The rollout duration: 1% at once, then 20% a second (Knative's step computation with
/// the 1s minimum step).
const DURATION: &str = "6s";
const HOST: &str = "roll.default.example.com";

fn service(target: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: roll\n  annotations:\n    serving.knative.dev/rollout-duration: {DURATION:?}\nspec:\n  template:\n    spec:\n      containers:\n      - command: [{:?}]\n        env:\n        - name: TARGET\n          value: {target}\n",
        sample_bin("hello").display().to_string()
    )
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

/// The Route's `status.traffic` as (revision, percent), and whether it is Ready.
fn route_traffic(s: &Server) -> Option<(Vec<(String, i64)>, bool)> {
    let r = s.get_json("/apis/serving.knative.dev/v1/namespaces/default/routes/roll")?;
    let traffic = r["status"]["traffic"]
        .as_array()?
        .iter()
        .map(|t| {
            (
                t["revisionName"].as_str().unwrap_or("").to_string(),
                t["percent"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let ready = r["status"]["conditions"]
        .as_array()?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    Some((traffic, ready))
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn percent_of(traffic: &[(String, i64)], rev: &str) -> i64 {
    traffic
        .iter()
        .filter(|(r, _)| r == rev)
        .map(|(_, p)| p)
        .sum()
}

#[test]
fn a_new_revision_takes_traffic_in_steps_under_load() {
    let s = Server::start();
    s.apply(&service("v1"));
    let c = client();
    wait_for("roll answering from v1", READY_TIMEOUT, || {
        let r = c
            .get(format!("http://{}/", s.http_addr))
            .header("host", HOST)
            .send()
            .ok()?;
        (r.status() == 200 && r.text().ok()?.contains("Hello v1!")).then_some(())
    });
    wait_for("the route Ready at roll-00001", READY_TIMEOUT, || {
        let (t, ready) = route_traffic(&s)?;
        (ready && t == [("roll-00001".to_string(), 100)]).then_some(())
    });

    let start = Instant::now();
    let stop = AtomicBool::new(false);
    // (ms since start, answered by v2) per request, by its start time.
    let answers: Mutex<Vec<(u128, bool)>> = Mutex::default();
    let failures: Mutex<Vec<String>> = Mutex::default();
    // (ms since start, percent on roll-00002) each time the published split changes.
    let published: Mutex<Vec<(u128, i64)>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (stop, answers, failures, addr) = (&stop, &answers, &failures, &s.http_addr);
            scope.spawn(move || {
                let c = client();
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let at = start.elapsed().as_millis();
                    match c.get(format!("http://{addr}/")).header("host", HOST).send() {
                        Ok(r) if r.status() == 200 => {
                            let body = r.text().unwrap_or_default();
                            match body.trim() {
                                "Hello v1!" => mine.push((at, false)),
                                "Hello v2!" => mine.push((at, true)),
                                other => failures.lock().unwrap().push(format!("body {other:?}")),
                            }
                        }
                        Ok(r) => failures
                            .lock()
                            .unwrap()
                            .push(format!("status {}", r.status())),
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
                answers.lock().unwrap().extend(mine);
            });
        }
        // Stops the load however this closure ends, so a failed assertion cannot leave the
        // scope waiting for the load threads forever.
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(300));
        s.apply(&service("v2"));

        // Watch the published split until the rollout is over.
        let deadline = Duration::from_secs(60);
        loop {
            assert!(
                start.elapsed() < deadline,
                "rollout not over: {published:?}"
            );
            if let Some((traffic, ready)) = route_traffic(&s) {
                let p = percent_of(&traffic, "roll-00002");
                let mut seen = published.lock().unwrap();
                if seen.last().map(|(_, last)| *last) != Some(p) {
                    seen.push((start.elapsed().as_millis(), p));
                }
                if p == 100 && ready && traffic.len() == 1 {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
    });

    let published = published.into_inner().unwrap();
    let mut answers = answers.into_inner().unwrap();
    answers.sort_unstable();
    let failures = failures.into_inner().unwrap();
    eprintln!("published (ms, % on v2): {published:?}");

    // Intermediate splits were published, each with both revisions taking traffic.
    let intermediate: Vec<i64> = published
        .iter()
        .map(|(_, p)| *p)
        .filter(|p| *p > 0 && *p < 100)
        .collect();
    assert!(
        intermediate.len() >= 3,
        "too few intermediate splits: {published:?}"
    );
    assert_eq!(published.last().map(|(_, p)| *p), Some(100));
    let mut sorted = intermediate.clone();
    sorted.sort_unstable();
    assert_eq!(intermediate, sorted, "the new revision's share only grows");

    // No request lost.
    assert!(answers.len() > 200, "{} answers", answers.len());
    assert!(
        failures.is_empty(),
        "{} failed requests during the rollout, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );

    // The requests follow the published split: for each published step lasting long
    // enough, requests started well inside it (200ms margins: the split is swapped just
    // before the status is written, and polled every 50ms) are answered by v2 in
    // proportion. The tolerance is loose (scheduling on a busy machine); the measured
    // deviation is printed.
    let mut worst: f64 = 0.0;
    let mut checked = 0;
    for w in published.windows(2) {
        let ((from, p), (to, _)) = (w[0], w[1]);
        let (lo, hi) = (from + 200, to.saturating_sub(200));
        let in_step: Vec<bool> = answers
            .iter()
            .filter(|(at, _)| *at >= lo && *at < hi)
            .map(|(_, v2)| *v2)
            .collect();
        if in_step.len() < 100 {
            continue;
        }
        let observed =
            100.0 * in_step.iter().filter(|v2| **v2).count() as f64 / in_step.len() as f64;
        eprintln!(
            "step at {p}% on v2: {observed:.1}% of {} requests",
            in_step.len()
        );
        worst = worst.max((observed - p as f64).abs());
        assert!(
            (observed - p as f64).abs() <= 15.0,
            "published {p}%, observed {observed:.1}% of {}",
            in_step.len()
        );
        checked += 1;
    }
    eprintln!(
        "rollout: {} requests, 0 failed; {checked} steps checked, worst deviation {worst:.1} points",
        answers.len()
    );
    assert!(
        checked >= 2,
        "too few steps with enough requests: {published:?}"
    );
}
