//! The console's HTML, built from the stored objects and what the KPA and the history
//! say (pure: objects in, markup out). Each page is a set of sections (`id` → HTML); the
//! page's script re-fetches them every 2 s and swaps them in, so everything on the page
//! stays live without a reload.

use std::fmt::Write as _;

use serde_json::Value;
use wisp_controller::autoscaling::KpaReport;

use super::chart::{Chart, Series, esc, spans};
use crate::observe::history::{PERIOD, Point, WINDOW};

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

fn str_at<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// A Ready badge: ✓ ready, ✗ failed (with the reason), … in progress.
fn ready_badge(o: &Value) -> String {
    match condition(o, "Ready") {
        Some(("True", _, _)) => r#"<span class="ok">✓ Ready</span>"#.into(),
        Some(("False", reason, message)) => format!(
            r#"<span class="bad" title="{}">✗ {}</span>"#,
            esc(message),
            esc(if reason.is_empty() { "Failed" } else { reason })
        ),
        Some((_, reason, message)) => format!(
            r#"<span class="wait" title="{}">… {}</span>"#,
            esc(message),
            esc(if reason.is_empty() {
                "Deploying"
            } else {
                reason
            })
        ),
        None => r#"<span class="wait">…</span>"#.into(),
    }
}

/// The service's traffic: `rev 90% · rev 10% (tag)`.
fn traffic(svc: &Value) -> String {
    let Some(targets) = svc.pointer("/status/traffic").and_then(Value::as_array) else {
        return String::new();
    };
    targets
        .iter()
        .map(|t| {
            let mut s = format!(
                "{} {}%",
                esc(t["revisionName"].as_str().unwrap_or("?")),
                t["percent"].as_i64().unwrap_or(0)
            );
            if let Some(tag) = t["tag"].as_str() {
                let _ = write!(s, r#" <span class="tag">{}</span>"#, esc(tag));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

fn service_href(svc: &Value) -> String {
    format!(
        "/services/{}/{}",
        esc(str_at(svc, "/metadata/namespace")),
        esc(str_at(svc, "/metadata/name"))
    )
}

/// The rows of the service list.
pub fn services_rows(services: &[Value]) -> String {
    if services.is_empty() {
        return r#"<tr><td colspan="6" class="empty">No services yet: <code>wisp apply -f service.yaml</code></td></tr>"#.into();
    }
    let mut out = String::with_capacity(services.len() * 400);
    for svc in services {
        let url = str_at(svc, "/status/url");
        let latest = match str_at(svc, "/status/latestReadyRevisionName") {
            "" => str_at(svc, "/status/latestCreatedRevisionName"),
            r => r,
        };
        let _ = write!(
            out,
            r#"<tr><td><a class="svc" href="{href}">{name}</a></td><td>{ns}</td><td class="url">{url}</td><td>{ready}</td><td>{latest}</td><td>{traffic}</td></tr>"#,
            href = service_href(svc),
            name = esc(str_at(svc, "/metadata/name")),
            ns = esc(str_at(svc, "/metadata/namespace")),
            url = esc(url),
            ready = ready_badge(svc),
            latest = esc(latest),
            traffic = traffic(svc),
        );
    }
    out
}

/// The page shell around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{title} · wisp</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/assets/console.css"><script src="/assets/console.js" defer></script></head><body><header><a class="brand" href="/">wisp</a><span class="sub">Knative Serving in one binary</span><span id="live" class="live">live</span></header><main>{body}</main></body></html>"#,
        title = esc(title)
    )
}

/// The service list page.
pub fn services_page(services: &[Value]) -> String {
    page(
        "Services",
        &format!(
            r#"<h1>Services</h1><table class="list"><thead><tr><th>Name</th><th>Namespace</th><th>URL</th><th>Ready</th><th>Latest revision</th><th>Traffic</th></tr></thead><tbody id="services" data-section="services">{}</tbody></table>"#,
            services_rows(services)
        ),
    )
}

/// What the console shows about one revision of a service.
#[derive(Clone, Debug)]
pub struct RevisionView<'a> {
    pub revision: &'a Value,
    pub kpa: Option<KpaReport>,
    /// Its history (oldest first) and whether it scales by rps.
    pub points: &'a [Point],
    pub rps_metric: bool,
}

/// Sections of a service's page (id → HTML).
pub fn service_sections(
    svc: &Value,
    revisions: &[RevisionView<'_>],
    selected: &str,
    logs: &[String],
    now_ms: i64,
) -> Vec<(&'static str, String)> {
    let ns = str_at(svc, "/metadata/namespace");
    let name = str_at(svc, "/metadata/name");
    let mut summary = format!(
        r#"<p class="url"><a href="{u}">{u}</a></p><p>{ready} · generation {g} · latest created <b>{c}</b>, latest ready <b>{r}</b></p>"#,
        u = esc(str_at(svc, "/status/url")),
        ready = ready_badge(svc),
        g = svc
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        c = esc(str_at(svc, "/status/latestCreatedRevisionName")),
        r = esc(str_at(svc, "/status/latestReadyRevisionName")),
    );
    let selected_view = revisions
        .iter()
        .find(|v| str_at(v.revision, "/metadata/name") == selected);
    if let Some(v) = selected_view {
        let _ = write!(summary, r#"<p class="why">{}</p>"#, why(v));
    }

    let conditions = svc
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let status = c["status"].as_str().unwrap_or("");
                    format!(
                        r#"<tr class="{cls}"><td>{t}</td><td>{s}</td><td>{r}</td><td>{m}</td></tr>"#,
                        cls = match status {
                            "True" => "ok",
                            "False" => "bad",
                            _ => "wait",
                        },
                        t = esc(c["type"].as_str().unwrap_or("")),
                        s = esc(status),
                        r = esc(c["reason"].as_str().unwrap_or("")),
                        m = esc(c["message"].as_str().unwrap_or("")),
                    )
                })
                .collect::<String>()
        })
        .unwrap_or_default();

    // Traffic percent and tags per revision.
    let mut percent: std::collections::HashMap<&str, (i64, Vec<&str>)> = Default::default();
    if let Some(ts) = svc.pointer("/status/traffic").and_then(Value::as_array) {
        for t in ts {
            let e = percent
                .entry(t["revisionName"].as_str().unwrap_or(""))
                .or_default();
            e.0 += t["percent"].as_i64().unwrap_or(0);
            if let Some(tag) = t["tag"].as_str() {
                e.1.push(tag);
            }
        }
    }
    let mut revs = String::new();
    for v in revisions {
        let rn = str_at(v.revision, "/metadata/name");
        let (p, tags) = percent.get(rn).cloned().unwrap_or_default();
        let replicas = match v.kpa {
            Some(k) if k.requested >= 0 => format!("{}/{}", k.ready, k.requested),
            Some(k) => format!("{}/-", k.ready),
            None => "-".into(),
        };
        let _ = write!(
            revs,
            r#"<tr class="{sel}"><td><a class="rev" href="/services/{ns}/{name}?revision={rn}">{rn}</a></td><td>{p}%</td><td>{tags}</td><td>{ready}</td><td>{replicas}</td><td>{panic}</td><td>{created}</td></tr>"#,
            sel = if rn == selected { "selected" } else { "" },
            ns = esc(ns),
            name = esc(name),
            rn = esc(rn),
            tags = tags
                .iter()
                .map(|t| format!(r#"<span class="tag">{}</span>"#, esc(t)))
                .collect::<String>(),
            ready = ready_badge(v.revision),
            panic = if v.kpa.is_some_and(|k| k.panic_mode) {
                r#"<span class="panic">panic</span>"#
            } else {
                ""
            },
            created = esc(str_at(v.revision, "/metadata/creationTimestamp")),
        );
    }

    let charts = selected_view.map_or_else(
        || r#"<p class="empty">No revision yet.</p>"#.to_string(),
        |v| charts(v, now_ms),
    );
    let logs = if logs.is_empty() {
        r#"<p class="empty">No output yet.</p>"#.to_string()
    } else {
        format!(
            "<pre>{}</pre>",
            logs.iter().map(|l| esc(l)).collect::<Vec<_>>().join("\n")
        )
    };
    vec![
        ("summary", summary),
        ("conditions", conditions),
        ("revisions", revs),
        ("charts", charts),
        ("logs", logs),
    ]
}

/// One sentence on why the revision runs what it runs (or why it failed).
pub fn why(v: &RevisionView<'_>) -> String {
    let name = esc(str_at(v.revision, "/metadata/name"));
    if let Some(("False", reason, message)) = condition(v.revision, "Ready") {
        return format!(
            r#"<span class="bad">{name} failed: <b>{}</b> {}</span>"#,
            esc(reason),
            esc(message)
        );
    }
    let Some(k) = v.kpa else {
        return format!("{name}: waiting for the autoscaler's first decision.");
    };
    let (metric, unit) = if v.rps_metric {
        ("requests per second", "")
    } else {
        ("concurrent requests", "")
    };
    let mut s = if k.requested <= 0 && k.ready == 0 {
        format!("{name} is scaled to zero: no traffic.")
    } else {
        format!(
            "{name} wants <b>{want}</b> replica{pl} ({ready} ready): {stable:.1}{unit} {metric} over the stable window, {panic:.1} over the panic window, against a target of {target:.1} per replica.",
            want = k.requested.max(0),
            pl = if k.requested == 1 { "" } else { "s" },
            ready = k.ready,
            stable = k.stable,
            panic = k.panic,
            target = k.target,
        )
    };
    if k.panic_mode {
        s.push_str(r#" <span class="panic">Panic mode</span> the demand over the short panic window passed the panic threshold (by default twice what the ready replicas can take): the autoscaler scales up for it, and not down until the panic ends."#);
    }
    if k.pending > 0 {
        let _ = write!(s, " {} replica(s) starting.", k.pending);
    }
    s
}

/// The four charts of a revision over the last 15 minutes.
fn charts(v: &RevisionView<'_>, now_ms: i64) -> String {
    let from = now_ms - i64::try_from(WINDOW.as_millis()).unwrap_or(0);
    let pts = v.points;
    let series = |f: fn(&Point) -> Option<f64>| -> Vec<(i64, Option<f64>)> {
        pts.iter().map(|p| (p.t, f(p))).collect()
    };
    let step = i64::try_from(PERIOD.as_millis()).unwrap_or(2000);
    let panic = spans(
        &pts.iter().map(|p| (p.t, p.panic_mode)).collect::<Vec<_>>(),
        step,
    );
    let metric = if v.rps_metric {
        "Requests per second (KPA)"
    } else {
        "Concurrency (KPA)"
    };
    let charts = [
        Chart {
            id: "chart-replicas",
            title: "Replicas",
            unit: "",
            from,
            to: now_ms,
            series: vec![
                Series {
                    label: "actual",
                    color: "#1a73e8",
                    points: series(|p| Some(f64::from(p.ready))),
                    dashed: false,
                },
                Series {
                    label: "desired",
                    color: "#d93025",
                    points: series(|p| Some(f64::from(p.desired))),
                    dashed: true,
                },
            ],
            shaded: panic.clone(),
            shade_label: "panic mode",
        },
        Chart {
            id: "chart-concurrency",
            title: metric,
            unit: "",
            from,
            to: now_ms,
            series: vec![
                Series {
                    label: "stable",
                    color: "#188038",
                    points: series(|p| Some(f64::from(p.stable))),
                    dashed: false,
                },
                Series {
                    label: "panic",
                    color: "#e37400",
                    points: series(|p| Some(f64::from(p.panic))),
                    dashed: false,
                },
                Series {
                    label: "target × desired",
                    color: "#5f6b7a",
                    points: series(|p| Some(f64::from(p.target) * f64::from(p.desired.max(1)))),
                    dashed: true,
                },
            ],
            shaded: panic,
            shade_label: "panic mode",
        },
        Chart {
            id: "chart-rate",
            title: "Request rate",
            unit: "/s",
            from,
            to: now_ms,
            series: vec![Series {
                label: "requests",
                color: "#1a73e8",
                points: series(|p| Some(f64::from(p.rps))),
                dashed: false,
            }],
            shaded: Vec::new(),
            shade_label: "",
        },
        Chart {
            id: "chart-latency",
            title: "Latency",
            unit: "ms",
            from,
            to: now_ms,
            series: vec![
                Series {
                    label: "p50",
                    color: "#188038",
                    points: series(|p| p.p50.map(f64::from)),
                    dashed: false,
                },
                Series {
                    label: "p95",
                    color: "#e37400",
                    points: series(|p| p.p95.map(f64::from)),
                    dashed: false,
                },
                Series {
                    label: "p99",
                    color: "#d93025",
                    points: series(|p| p.p99.map(f64::from)),
                    dashed: false,
                },
            ],
            shaded: Vec::new(),
            shade_label: "",
        },
    ];
    charts
        .iter()
        .map(|c| {
            format!(
                r#"<figure><figcaption>{}</figcaption>{}</figure>"#,
                esc(c.title),
                c.svg()
            )
        })
        .collect()
}

/// The service page: its sections inside the shell.
pub fn service_page(name: &str, sections: &[(&'static str, String)]) -> String {
    let get = |id: &str| {
        sections
            .iter()
            .find(|(k, _)| *k == id)
            .map_or("", |(_, v)| v.as_str())
    };
    page(
        name,
        &format!(
            r#"<p class="crumbs"><a href="/">Services</a> / {n}</p><h1>{n}</h1><section id="summary" data-section="summary">{summary}</section><h2>Revisions</h2><table class="list"><thead><tr><th>Revision</th><th>Traffic</th><th>Tags</th><th>Ready</th><th>Replicas</th><th></th><th>Created</th></tr></thead><tbody id="revisions" data-section="revisions">{revisions}</tbody></table><h2>Last 15 minutes</h2><div id="charts" class="charts" data-section="charts">{charts}</div><h2>Conditions</h2><table class="list"><thead><tr><th>Type</th><th>Status</th><th>Reason</th><th>Message</th></tr></thead><tbody id="conditions" data-section="conditions">{conditions}</tbody></table><h2>Logs</h2><div id="logs" class="logs" data-section="logs">{logs}</div>"#,
            n = esc(name),
            summary = get("summary"),
            revisions = get("revisions"),
            charts = get("charts"),
            conditions = get("conditions"),
            logs = get("logs"),
        ),
    )
}

/// The login page.
pub fn login_page(error: Option<&str>) -> String {
    page(
        "Sign in",
        &format!(
            r#"<h1>Sign in</h1><form class="login" method="post" action="/login"><p>The API token of this <code>wisp serve</code> (<code>&lt;data-dir&gt;/token</code>); it is kept in a cookie.</p>{err}<input type="password" name="token" autocomplete="current-password" placeholder="token" autofocus><button type="submit">Sign in</button></form>"#,
            err = error.map_or_else(String::new, |e| format!(r#"<p class="bad">{}</p>"#, esc(e)))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc() -> Value {
        json!({
            "metadata": {"name": "hello", "namespace": "default", "generation": 2},
            "status": {
                "url": "http://hello.default.example.com",
                "latestCreatedRevisionName": "hello-00002",
                "latestReadyRevisionName": "hello-00001",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "RevisionFailed", "message": "Revision \"hello-00002\" failed with message: <boom>."},
                    {"type": "RoutesReady", "status": "True"}
                ],
                "traffic": [
                    {"revisionName": "hello-00001", "percent": 90, "latestRevision": false},
                    {"revisionName": "hello-00002", "percent": 10, "tag": "canary"}
                ]
            }
        })
    }

    #[test]
    fn service_rows_show_url_readiness_latest_and_traffic() {
        let rows = services_rows(&[svc()]);
        assert!(rows.contains(r#"<a class="svc" href="/services/default/hello">hello</a>"#));
        assert!(rows.contains("http://hello.default.example.com"));
        assert!(rows.contains(r#"<span class="bad" title="Revision &quot;hello-00002&quot; failed with message: &lt;boom&gt;.">✗ RevisionFailed</span>"#), "{rows}");
        assert!(rows.contains("<td>hello-00001</td>"), "latest ready first");
        assert!(
            rows.contains(r#"hello-00001 90% · hello-00002 10% <span class="tag">canary</span>"#)
        );
        assert!(services_rows(&[]).contains("No services yet"));
    }

    #[test]
    fn why_a_revision_runs_what_it_runs() {
        let rev = json!({"metadata": {"name": "hello-00001"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let view = |kpa: Option<KpaReport>| RevisionView {
            revision: &rev,
            kpa,
            points: &[],
            rps_metric: false,
        };
        let busy = KpaReport {
            requested: 3,
            ready: 2,
            stable: 12.0,
            panic: 30.5,
            target: 7.0,
            panic_mode: true,
            pending: 1,
            ..KpaReport::default()
        };
        let w = why(&view(Some(busy)));
        assert!(w.starts_with("hello-00001 wants <b>3</b> replicas (2 ready): 12.0 concurrent requests over the stable window, 30.5 over the panic window, against a target of 7.0 per replica."), "{w}");
        assert!(w.contains("Panic mode"));
        assert!(w.ends_with("1 replica(s) starting."));
        assert_eq!(
            why(&view(Some(KpaReport::default()))),
            "hello-00001 is scaled to zero: no traffic."
        );
        assert!(why(&view(None)).contains("first decision"));
        let failed = json!({"metadata": {"name": "hello-00002"}, "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ExitCode3", "message": "Container failed with: boom"}]}});
        let w = why(&RevisionView {
            revision: &failed,
            kpa: Some(busy),
            points: &[],
            rps_metric: false,
        });
        assert_eq!(
            w,
            r#"<span class="bad">hello-00002 failed: <b>ExitCode3</b> Container failed with: boom</span>"#
        );
    }

    #[test]
    fn service_sections_mark_the_followed_revision_and_chart_it() {
        let s = svc();
        let r1 = json!({"metadata": {"name": "hello-00001", "creationTimestamp": "2024-01-01T00:00:00Z"}});
        let r2 = json!({"metadata": {"name": "hello-00002"}});
        let points = [Point {
            t: 1_000_000,
            ready: 2,
            desired: 3,
            panic_mode: true,
            ..Point::default()
        }];
        let views = [
            RevisionView {
                revision: &r2,
                kpa: None,
                points: &[],
                rps_metric: false,
            },
            RevisionView {
                revision: &r1,
                kpa: Some(KpaReport {
                    requested: 3,
                    ready: 2,
                    ..KpaReport::default()
                }),
                points: &points,
                rps_metric: false,
            },
        ];
        let sections = service_sections(&s, &views, "hello-00001", &["a <b>".into()], 1_000_000);
        let get = |id: &str| sections.iter().find(|(k, _)| *k == id).unwrap().1.clone();
        let revs = get("revisions");
        assert!(revs.contains(r#"<tr class="selected"><td><a class="rev" href="/services/default/hello?revision=hello-00001">hello-00001</a></td><td>90%</td>"#), "{revs}");
        assert!(revs.contains(r#"<td>10%</td><td><span class="tag">canary</span></td>"#));
        assert!(revs.contains("<td>2/3</td>"));
        let charts = get("charts");
        for id in [
            "chart-replicas",
            "chart-concurrency",
            "chart-rate",
            "chart-latency",
        ] {
            assert!(charts.contains(&format!(r#"<svg id="{id}""#)), "{id}");
        }
        assert!(charts.contains(r#"<g data-series="actual" data-last="2">"#));
        assert!(charts.contains(r#"class="shade""#), "panic mode is shaded");
        assert_eq!(get("logs"), "<pre>a &lt;b&gt;</pre>");
        assert!(
            get("conditions")
                .contains(r#"<tr class="bad"><td>Ready</td><td>False</td><td>RevisionFailed</td>"#)
        );
        let page = service_page("hello", &sections);
        assert!(page.contains(r#"<tbody id="revisions" data-section="revisions">"#));
    }
}
