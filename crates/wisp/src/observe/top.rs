//! `GET /wisp/v1/top` on the API: what `wisp top` prints, one row per revision — replicas
//! ready and requested, concurrency, request rate and p95 latency, panic mode — from the
//! KPA's reports, the data plane's last per-second stats and the [`History`]'s newest
//! point.

use std::collections::HashMap;
use std::sync::Arc;

use axum::{Json, Router, extract::Query, routing::get};
use serde::{Deserialize, Serialize};
use wisp_activator::Backends;
use wisp_controller::autoscaling::Scaling;
use wisp_runtime::RevisionKey;

use super::history::History;

/// The path `wisp top` reads (under the API's `/wisp` prefix).
pub const PATH: &str = "/wisp/v1/top";

/// One revision's row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopRow {
    pub namespace: String,
    pub revision: String,
    /// The owning Service ("" when unknown).
    pub service: String,
    pub ready: u32,
    /// Replicas the KPA asks for (-1 before its first decision).
    pub desired: i32,
    /// Average in-flight requests over the last second (replicas' queues + held).
    pub concurrency: f64,
    /// Requests per second over the last 10 s (None: requests are not recorded).
    pub rps: Option<f64>,
    /// p95 latency over the last 10 s, milliseconds (None: no request in that time).
    pub p95_ms: Option<f64>,
    pub panic_mode: bool,
}

/// Every revision's row, sorted by namespace and name.
pub fn rows(backends: &Backends, scaling: &Scaling, history: &History) -> Vec<TopRow> {
    let stats = backends.stats().borrow().clone();
    let mut concurrency: HashMap<&RevisionKey, f64> = HashMap::new();
    for r in &stats.replicas {
        *concurrency.entry(&r.revision).or_default() += r.stat.average_concurrency;
    }
    for r in &stats.revisions {
        *concurrency.entry(&r.revision).or_default() += r.waiting as f64;
    }
    let reports: HashMap<RevisionKey, _> = scaling.reports().into_iter().collect();
    let latest = history.latest();
    let mut rows: Vec<TopRow> = backends
        .all()
        .iter()
        .map(|b| {
            let key = b.key();
            let kpa = reports.get(key).copied().unwrap_or_default();
            let recorded = b.observe().metrics.as_ref();
            let point = latest.get(key);
            TopRow {
                namespace: key.namespace.clone(),
                revision: key.name.clone(),
                service: recorded
                    .map(|m| m.labels().service.clone())
                    .unwrap_or_default(),
                ready: kpa.ready,
                desired: if reports.contains_key(key) {
                    kpa.requested
                } else {
                    -1
                },
                concurrency: concurrency.get(key).copied().unwrap_or(0.0),
                rps: recorded.map(|_| point.map_or(0.0, |p| f64::from(p.rps))),
                p95_ms: point.and_then(|p| p.p95).map(f64::from),
                panic_mode: kpa.panic_mode,
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.revision).cmp(&(&b.namespace, &b.revision)));
    rows
}

#[derive(Debug, Deserialize)]
struct Params {
    namespace: Option<String>,
}

/// The route (nested under the API's `/wisp`).
pub fn router(backends: Arc<Backends>, scaling: Arc<Scaling>, history: Arc<History>) -> Router {
    Router::new().route(
        PATH.trim_start_matches("/wisp"),
        get(move |Query(p): Query<Params>| {
            let (backends, scaling, history) = (backends.clone(), scaling.clone(), history.clone());
            async move {
                let mut rows = rows(&backends, &scaling, &history);
                if let Some(ns) = p.namespace.filter(|n| !n.is_empty()) {
                    rows.retain(|r| r.namespace == ns);
                }
                Json(rows)
            }
        }),
    )
}
