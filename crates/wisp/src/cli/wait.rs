//! `wisp apply --wait`: follows every applied Service until it is Ready, showing how far
//! each got — revision created → replicas starting (image pulled / process started) →
//! replicas ready → route ready — as spinners on a terminal and as plain lines otherwise;
//! a failure ends the wait with the revision's reason and message.
//!
//! [`progress`] reads the stage off the Service and its latest Revision (pure, table
//! tested); [`wait`] polls the API and draws.

use std::time::{Duration, Instant};

use serde_json::Value;
use wisp_api::kinds;

use super::client::Client;
use super::obj::str_at;

/// How often the objects are read again.
const POLL: Duration = Duration::from_millis(250);

/// How far a Service got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// The controller has not seen this generation yet.
    Submitted,
    RevisionCreated,
    /// The KPA asked for replicas: images are pulled and processes started.
    Starting,
    ReplicasReady,
    RouteReady,
    Ready,
}

/// What the Service and its latest Revision say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    /// The line describing the stage.
    pub line: String,
    /// The reason and message of a failure (the wait ends).
    pub failed: Option<(String, String)>,
}

/// A condition's (status, reason, message).
fn condition<'a>(o: &'a Value, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
            )
        })
}

/// The stage of `svc`, whose latest created Revision is `rev` (when read).
pub fn progress(svc: &Value, rev: Option<&Value>) -> Progress {
    let generation = svc.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = svc
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let latest = str_at(svc, "/status/latestCreatedRevisionName");
    let current = generation.is_some() && observed == generation;
    let step = |stage, line: String| Progress {
        stage,
        line,
        failed: None,
    };
    let Some(latest) = latest.filter(|_| current) else {
        return step(Stage::Submitted, "waiting for the controller".into());
    };
    // The revision's failure says why; the Service's only repeats it.
    let failure = rev
        .and_then(|r| condition(r, "Ready"))
        .filter(|(s, _, _)| *s == "False")
        .or_else(|| condition(svc, "Ready").filter(|(s, _, _)| *s == "False"));
    if let Some((_, reason, message)) = failure {
        return Progress {
            stage: Stage::RevisionCreated,
            line: format!("revision {latest} failed"),
            failed: Some((reason.to_string(), message.to_string())),
        };
    }
    if condition(svc, "Ready").is_some_and(|(s, _, _)| s == "True")
        && str_at(svc, "/status/latestReadyRevisionName") == Some(latest)
    {
        let url = str_at(svc, "/status/url").unwrap_or("");
        return step(Stage::Ready, format!("ready at {url}"));
    }
    let rev_ready = rev
        .and_then(|r| condition(r, "Ready"))
        .is_some_and(|(s, _, _)| s == "True");
    if rev_ready && condition(svc, "RoutesReady").is_some_and(|(s, _, _)| s == "True") {
        return step(Stage::RouteReady, "route ready".into());
    }
    let count = |p: &str| rev.and_then(|r| r.pointer(p)).and_then(Value::as_i64);
    let (ready, desired) = (
        count("/status/actualReplicas"),
        count("/status/desiredReplicas"),
    );
    if rev_ready {
        return step(
            Stage::ReplicasReady,
            format!(
                "replicas ready ({}/{}), waiting for the route",
                ready.unwrap_or(1),
                desired.unwrap_or(1)
            ),
        );
    }
    if desired.is_some_and(|d| d >= 1) {
        let digests = rev
            .and_then(|r| r.pointer("/status/containerStatuses"))
            .and_then(Value::as_array)
            .map_or(0, |c| {
                c.iter().filter(|s| s["imageDigest"].is_string()).count()
            });
        let what = if digests > 0 {
            "pulling images and starting replicas"
        } else {
            "starting replicas"
        };
        return step(
            Stage::Starting,
            format!(
                "{what} ({}/{} ready)",
                ready.unwrap_or(0),
                desired.unwrap_or(0)
            ),
        );
    }
    step(Stage::RevisionCreated, format!("revision {latest} created"))
}

/// How one Service's wait ended.
#[derive(Debug)]
enum End {
    Ready,
    Failed(String),
    TimedOut(String),
}

/// Waits for every `(namespace, name)` Service to be Ready, for at most `timeout`.
/// Returns whether all of them are; failures are reported on stderr.
pub fn wait(
    client: &Client,
    services: &[(String, String)],
    timeout: Duration,
) -> anyhow::Result<bool> {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let bars = indicatif::MultiProgress::new();
    if !tty {
        bars.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let style = indicatif::ProgressStyle::with_template("{spinner} {prefix}: {wide_msg} {elapsed}")
        .map_err(|e| anyhow::anyhow!("progress template: {e}"))?;
    struct Follow {
        ns: String,
        name: String,
        bar: indicatif::ProgressBar,
        last: Option<String>,
        end: Option<End>,
    }
    let mut follows: Vec<Follow> = services
        .iter()
        .map(|(ns, name)| {
            let bar = bars.add(indicatif::ProgressBar::new_spinner());
            bar.set_style(style.clone());
            bar.set_prefix(format!("service/{name}"));
            bar.enable_steady_tick(Duration::from_millis(120));
            Follow {
                ns: ns.clone(),
                name: name.clone(),
                bar,
                last: None,
                end: None,
            }
        })
        .collect();
    let started = Instant::now();
    while follows.iter().any(|f| f.end.is_none()) {
        for f in follows.iter_mut().filter(|f| f.end.is_none()) {
            let svc = client.get(&kinds::SERVICE, &f.ns, &f.name)?;
            let rev = match str_at(&svc, "/status/latestCreatedRevisionName") {
                Some(r) => match client.get(&kinds::REVISION, &f.ns, r) {
                    Ok(v) => Some(v),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e.into()),
                },
                None => None,
            };
            let p = progress(&svc, rev.as_ref());
            if f.last.as_deref() != Some(p.line.as_str()) {
                if !tty {
                    super::out(format_args!("service/{}: {}\n", f.name, p.line))?;
                }
                f.bar.set_message(p.line.clone());
                f.last = Some(p.line.clone());
            }
            if let Some((reason, message)) = p.failed {
                f.end = Some(End::Failed(format!("{reason}: {message}")));
            } else if p.stage == Stage::Ready {
                f.end = Some(End::Ready);
            } else if started.elapsed() >= timeout {
                f.end = Some(End::TimedOut(p.line.clone()));
            }
            if let Some(end) = &f.end {
                match end {
                    End::Ready => f.bar.finish_with_message(format!("✓ {}", p.line)),
                    _ => f.bar.abandon(),
                }
            }
        }
        if follows.iter().any(|f| f.end.is_none()) {
            std::thread::sleep(POLL);
        }
    }
    let mut ok = true;
    for f in &follows {
        match &f.end {
            Some(End::Failed(why)) => {
                ok = false;
                eprintln!("error: service/{} failed: {why}", f.name);
            }
            Some(End::TimedOut(at)) => {
                ok = false;
                eprintln!(
                    "error: service/{} not ready after {}: {at}",
                    f.name,
                    humantime(timeout)
                );
            }
            _ => {}
        }
    }
    Ok(ok)
}

fn humantime(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{s:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(generation: i64, observed: i64, latest: Option<&str>, conds: Value) -> Value {
        json!({
            "metadata": {"name": "hello", "generation": generation},
            "status": {
                "observedGeneration": observed,
                "latestCreatedRevisionName": latest,
                "latestReadyRevisionName": if conds.to_string().contains("\"Ready\",\"status\":\"True\"") { latest } else { None },
                "url": "http://hello.default.example.com",
                "conditions": conds,
            }
        })
    }

    fn rev(desired: Option<i64>, ready: Option<i64>, conds: Value, digest: bool) -> Value {
        json!({
            "metadata": {"name": "hello-00002"},
            "status": {
                "desiredReplicas": desired,
                "actualReplicas": ready,
                "conditions": conds,
                "containerStatuses": if digest { json!([{"name": "c", "imageDigest": "x@sha256:1"}]) } else { json!([]) },
            }
        })
    }

    fn c(t: &str, s: &str, reason: &str, message: &str) -> Value {
        json!({"type": t, "status": s, "reason": reason, "message": message})
    }

    #[test]
    fn stages_from_the_objects() {
        let unknown = json!([c("Ready", "Unknown", "", "")]);
        let cases: Vec<(Value, Option<Value>, Stage, &str)> = vec![
            (
                svc(2, 1, Some("hello-00001"), unknown.clone()),
                None,
                Stage::Submitted,
                "waiting for the controller",
            ),
            (
                svc(2, 2, Some("hello-00002"), unknown.clone()),
                None,
                Stage::RevisionCreated,
                "revision hello-00002 created",
            ),
            (
                svc(2, 2, Some("hello-00002"), unknown.clone()),
                Some(rev(Some(1), Some(0), unknown.clone(), false)),
                Stage::Starting,
                "starting replicas (0/1 ready)",
            ),
            (
                svc(2, 2, Some("hello-00002"), unknown.clone()),
                Some(rev(Some(2), None, unknown.clone(), true)),
                Stage::Starting,
                "pulling images and starting replicas (0/2 ready)",
            ),
            (
                svc(
                    2,
                    2,
                    Some("hello-00002"),
                    json!([
                        c("Ready", "Unknown", "", ""),
                        c("RoutesReady", "Unknown", "", "")
                    ]),
                ),
                Some(rev(
                    Some(1),
                    Some(1),
                    json!([c("Ready", "True", "", "")]),
                    false,
                )),
                Stage::ReplicasReady,
                "replicas ready (1/1), waiting for the route",
            ),
            (
                svc(
                    2,
                    2,
                    Some("hello-00002"),
                    json!([
                        c("Ready", "Unknown", "", ""),
                        c("RoutesReady", "True", "", "")
                    ]),
                ),
                Some(rev(
                    Some(1),
                    Some(1),
                    json!([c("Ready", "True", "", "")]),
                    false,
                )),
                Stage::RouteReady,
                "route ready",
            ),
            (
                svc(
                    2,
                    2,
                    Some("hello-00002"),
                    json!([c("Ready", "True", "", "")]),
                ),
                Some(rev(
                    Some(1),
                    Some(1),
                    json!([c("Ready", "True", "", "")]),
                    false,
                )),
                Stage::Ready,
                "ready at http://hello.default.example.com",
            ),
        ];
        for (s, r, stage, line) in cases {
            let p = progress(&s, r.as_ref());
            assert_eq!(
                (p.stage, p.line.as_str(), p.failed),
                (stage, line, None),
                "{s}"
            );
        }
    }

    #[test]
    fn a_failed_revision_ends_the_wait_with_its_reason() {
        let p = progress(
            &svc(
                1,
                1,
                Some("hello-00001"),
                json!([c(
                    "Ready",
                    "False",
                    "RevisionFailed",
                    "Revision \"hello-00001\" failed with message: boom."
                )]),
            ),
            Some(&rev(
                Some(1),
                Some(0),
                json!([c(
                    "Ready",
                    "False",
                    "ExitCode1",
                    "Container failed with: boom"
                )]),
                false,
            )),
        );
        assert_eq!(
            p.failed,
            Some(("ExitCode1".into(), "Container failed with: boom".into())),
            "the revision's own reason, not the service's summary"
        );
        // Without the revision, the Service's condition says it.
        let p = progress(
            &svc(
                1,
                1,
                Some("hello-00001"),
                json!([c("Ready", "False", "RevisionMissing", "gone")]),
            ),
            None,
        );
        assert_eq!(p.failed, Some(("RevisionMissing".into(), "gone".into())));
        // A False condition of an older generation is not this apply's failure.
        let p = progress(
            &svc(
                2,
                1,
                Some("hello-00001"),
                json!([c("Ready", "False", "X", "old")]),
            ),
            None,
        );
        assert_eq!((p.stage, p.failed), (Stage::Submitted, None));
    }
}
