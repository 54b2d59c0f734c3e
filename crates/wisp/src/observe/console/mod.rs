//! The web console (`--console-addr`, loopback by default): the services with their URL,
//! readiness, latest revision and traffic; per service its revisions (traffic percent,
//! tags), conditions, a sentence on why the followed revision runs what it runs (or why it
//! failed), charts of its last 15 minutes ([`chart`], drawn here as SVG) and its replicas'
//! output. Every page refreshes its sections every 2 s through `/sections/…` (a small
//! script of wisp's own, `assets/console.js`); every asset is served from here, and the
//! Content-Security-Policy lets the page load nothing from anywhere else.
//!
//! Access takes the API's bearer token, given once (`/login`) and kept in an HttpOnly,
//! SameSite=Strict cookie.

pub mod chart;
pub mod pages;

use std::sync::Arc;

use axum::{
    Form, Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;
use serde_json::Value;
use wisp_api::{kinds, labels};
use wisp_apiserver::auth::Authenticator;
use wisp_controller::autoscaling::Scaling;
use wisp_runtime::{RevisionKey, SharedPlatform};
use wisp_store::{LabelSelector, Store};

use super::history::History;

/// The cookie holding the token.
const COOKIE: &str = "wisp_console";
/// Lines of replica output shown.
const LOG_LINES: usize = 100;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// Only wisp's own assets; SVG charts use presentation attributes, not inline styles.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What the console reads.
#[derive(Clone)]
pub struct Console {
    pub store: Store,
    pub auth: Arc<Authenticator>,
    pub scaling: Arc<Scaling>,
    pub history: Arc<History>,
    pub platform: SharedPlatform,
}

/// The console's routes.
pub fn router(c: Console) -> Router {
    Router::new()
        .route("/", get(services))
        .route("/services/{ns}/{name}", get(service))
        .route("/sections/", get(services_sections))
        .route("/sections/services/{ns}/{name}", get(service_sections))
        .route("/login", get(login_link).post(login_form))
        .route(
            "/assets/console.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .layer(axum::middleware::map_response(secure))
        .with_state(c)
}

/// Every answer: no framing, no sniffing, nothing loaded from elsewhere, not cached.
async fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// The token in the request's cookie, if it is a valid one.
fn signed_in(c: &Console, headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| k == COOKIE && c.auth.authenticate(Some(&format!("Bearer {v}"))).is_some())
}

/// Not signed in: to the login page for a page, 401 for a section.
fn refuse(page: bool) -> Response {
    if page {
        Redirect::to("/login").into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "sign in again: /login").into_response()
    }
}

/// Sets the cookie for a valid token and goes to the service list.
fn sign_in(c: &Console, token: &str) -> Response {
    let token = token.trim();
    if token.is_empty()
        || !token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
        || c.auth
            .authenticate(Some(&format!("Bearer {token}")))
            .is_none()
    {
        return (
            StatusCode::UNAUTHORIZED,
            html(pages::login_page(Some(
                "That token is not valid for this server.",
            ))),
        )
            .into_response();
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
struct TokenParam {
    token: Option<String>,
}

/// `GET /login?token=…` (a link printed for the user), or the form.
async fn login_link(State(c): State<Console>, Query(q): Query<TokenParam>) -> Response {
    match q.token {
        Some(t) => sign_in(&c, &t),
        None => html(pages::login_page(None)),
    }
}

async fn login_form(State(c): State<Console>, Form(f): Form<TokenParam>) -> Response {
    sign_in(&c, f.token.as_deref().unwrap_or(""))
}

/// Runs a store read off the async workers.
async fn read<T: Send + 'static>(
    c: &Console,
    f: impl FnOnce(&Store) -> Result<T, wisp_store::StoreError> + Send + 'static,
) -> Result<T, Response> {
    let store = c.store.clone();
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            Err((StatusCode::INTERNAL_SERVER_ERROR, format!("store: {e}")).into_response())
        }
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()),
    }
}

async fn list_services(c: &Console) -> Result<Vec<Value>, Response> {
    let mut all = read(c, |s| s.list(&kinds::SERVICE.store_key(), None, None))
        .await?
        .0;
    all.sort_by(|a, b| {
        let key = |o: &Value| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    Ok(all)
}

async fn services(State(c): State<Console>, headers: HeaderMap) -> Response {
    if !signed_in(&c, &headers) {
        return refuse(true);
    }
    match list_services(&c).await {
        Ok(all) => html(pages::services_page(&all)),
        Err(r) => r,
    }
}

async fn services_sections(State(c): State<Console>, headers: HeaderMap) -> Response {
    if !signed_in(&c, &headers) {
        return refuse(false);
    }
    match list_services(&c).await {
        Ok(all) => {
            Json(serde_json::json!({ "services": pages::services_rows(&all) })).into_response()
        }
        Err(r) => r,
    }
}

#[derive(Deserialize)]
struct Follow {
    revision: Option<String>,
}

/// A service's sections, following `revision` (by default its latest ready one, else
/// its latest created one).
async fn sections_of(
    c: &Console,
    ns: String,
    name: String,
    follow: Option<String>,
) -> Result<(Value, Vec<(&'static str, String)>), Response> {
    let (n2, s2) = (ns.clone(), name.clone());
    let (svc, mut revisions) = read(c, move |s| {
        let svc = s.get(&kinds::SERVICE.store_key(), &n2, &s2)?;
        let sel = LabelSelector::parse(&format!("{}={s2}", labels::SERVICE))?;
        let revs = s
            .list(&kinds::REVISION.store_key(), Some(&n2), Some(&sel))?
            .0;
        Ok((svc, revs))
    })
    .await?;
    let Some(svc) = svc else {
        return Err((
            StatusCode::NOT_FOUND,
            html(pages::page(
                "Not found",
                &format!(
                    r#"<h1>No service {}/{}</h1><p><a href="/">All services</a></p>"#,
                    chart::esc(&ns),
                    chart::esc(&name)
                ),
            )),
        )
            .into_response());
    };
    // Newest first.
    revisions.sort_by(|a, b| {
        b["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .cmp(a["metadata"]["name"].as_str().unwrap_or(""))
    });
    let status = |p: &str| svc.pointer(p).and_then(Value::as_str).map(str::to_string);
    let selected = follow
        .filter(|f| {
            revisions
                .iter()
                .any(|r| r["metadata"]["name"] == f.as_str())
        })
        .or_else(|| status("/status/latestReadyRevisionName"))
        .or_else(|| status("/status/latestCreatedRevisionName"))
        .unwrap_or_default();
    let keys: Vec<RevisionKey> = revisions
        .iter()
        .map(|r| RevisionKey::new(&ns, r["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    let histories: Vec<_> = keys.iter().map(|k| c.history.series(k)).collect();
    let views: Vec<pages::RevisionView<'_>> = revisions
        .iter()
        .zip(&keys)
        .zip(&histories)
        .map(|((r, k), (points, rps))| pages::RevisionView {
            revision: r,
            kpa: c.scaling.report_of(k),
            points,
            rps_metric: *rps,
        })
        .collect();
    let logs: Vec<String> = {
        let key = RevisionKey::new(&ns, &selected);
        let lines = c.platform.logs(&key, Some(LOG_LINES));
        let several = lines
            .iter()
            .any(|l| lines.first().is_some_and(|f| f.replica != l.replica));
        lines
            .into_iter()
            .map(|l| {
                if several {
                    format!("[{}] {}", l.replica, l.line)
                } else {
                    l.line
                }
            })
            .collect()
    };
    let now = chrono::Utc::now().timestamp_millis();
    let sections = pages::service_sections(&svc, &views, &selected, &logs, now);
    Ok((svc, sections))
}

async fn service(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(f): Query<Follow>,
) -> Response {
    if !signed_in(&c, &headers) {
        return refuse(true);
    }
    match sections_of(&c, ns, name.clone(), f.revision).await {
        Ok((_, sections)) => html(pages::service_page(&name, &sections)),
        Err(r) => r,
    }
}

async fn service_sections(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(f): Query<Follow>,
) -> Response {
    if !signed_in(&c, &headers) {
        return refuse(false);
    }
    match sections_of(&c, ns, name, f.revision).await {
        Ok((_, sections)) => {
            let map: serde_json::Map<String, Value> = sections
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v)))
                .collect();
            Json(Value::Object(map)).into_response()
        }
        Err(r) => r,
    }
}
