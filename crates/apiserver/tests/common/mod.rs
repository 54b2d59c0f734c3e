//! What the router tests share: an [`ApiState`] with no authentication, no platform and
//! default bounds, over the store and views a test gives it.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

use wisp_apiserver::ApiState;
use wisp_store::Store;

pub fn state(
    store: Store,
    stopping: tokio::sync::watch::Receiver<bool>,
    views: wisp_views::Views,
) -> ApiState {
    ApiState {
        writer: wisp_store::Batcher::start(store.clone(), "test-write").unwrap(),
        store,
        config: wisp_api::config::LiveConfig::default(),
        auth: None,
        user: "tester".into(),
        platform: None,
        stopping,
        cpu: wisp_apiserver::cpu::CpuPool::new(1).unwrap(),
        inflight: wisp_apiserver::inflight::InFlight::default(),
        body_budget: wisp_apiserver::inflight::BodyBudget::default(),
        views,
        request_logs: None,
    }
}
