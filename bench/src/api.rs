//! A blocking client for wisp's REST API, and timestamped watches.

use std::{
    io::{BufRead, BufReader},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use reqwest::{
    StatusCode,
    blocking::Client,
    header::{AUTHORIZATION, HeaderMap, HeaderValue},
};
use serde_json::Value;

/// Timeout of one ordinary request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The API group/version of Knative Serving's resources.
pub const SERVING: &str = "serving.knative.dev/v1";
/// The PodAutoscaler's group/version.
pub const AUTOSCALING: &str = "autoscaling.internal.knative.dev/v1alpha1";

/// A client for one server: base URL and bearer token. Cheap to clone and shareable
/// between threads (connections are pooled).
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    client: Client,
    /// Like `client` but without a total timeout, for watches.
    stream_client: Client,
}

impl Api {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Api> {
        let mut headers = HeaderMap::new();
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        crate::install_crypto_provider();
        let client = Client::builder()
            .default_headers(headers.clone())
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        let stream_client = Client::builder()
            .default_headers(headers)
            .timeout(None)
            .connect_timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            client,
            stream_client,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `…/apis/<group/version>/namespaces/<ns>/<plural>`.
    pub fn collection_url(&self, group_version: &str, namespace: &str, plural: &str) -> String {
        format!(
            "{}/apis/{group_version}/namespaces/{namespace}/{plural}",
            self.base
        )
    }

    /// The store's current resourceVersion, from a list of `plural` (a watch from it sees
    /// every later change of every kind: the counter is global).
    pub fn resource_version(&self, group_version: &str, plural: &str) -> anyhow::Result<u64> {
        // One item is enough for the list's resourceVersion; listing every object would
        // make the benchmark's own reads part of what it measures (time, memory).
        let url = format!("{}/apis/{group_version}/{plural}?limit=1", self.base);
        let list: Value = check(self.client.get(&url).send()?)?.json()?;
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("list of {plural} without metadata.resourceVersion"))?;
        Ok(rv.parse()?)
    }

    /// GETs `url` (under this API) and returns its body as text; a non-2xx is an error.
    pub fn get_text(&self, url: &str) -> anyhow::Result<String> {
        Ok(check(self.client.get(url).send()?)?.text()?)
    }

    /// POSTs `object` to its collection (namespace and kind taken from the object).
    pub fn create(&self, plural: &str, object: &Value) -> anyhow::Result<Value> {
        let gv = object["apiVersion"].as_str().unwrap_or(SERVING);
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let url = self.collection_url(gv, ns, plural);
        Ok(check(self.client.post(&url).json(object).send()?)?.json()?)
    }

    /// Applies a JSON merge patch to one object (RFC 7386).
    pub fn merge_patch(
        &self,
        group_version: &str,
        namespace: &str,
        plural: &str,
        name: &str,
        patch: &Value,
    ) -> anyhow::Result<Value> {
        let url = format!(
            "{}/{name}",
            self.collection_url(group_version, namespace, plural)
        );
        let resp = self
            .client
            .patch(&url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/merge-patch+json",
            )
            .body(serde_json::to_vec(patch)?)
            .send()?;
        Ok(check(resp)?.json()?)
    }

    /// GETs `path` (below the base URL) as JSON.
    pub fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        Ok(check(self.client.get(format!("{}{path}", self.base)).send()?)?.json()?)
    }

    /// DELETEs one object; a 404 is not an error.
    pub fn delete(
        &self,
        group_version: &str,
        namespace: &str,
        plural: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let url = format!(
            "{}/{name}",
            self.collection_url(group_version, namespace, plural)
        );
        let resp = self.client.delete(&url).send()?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        check(resp)?;
        Ok(())
    }

    /// Starts a watch of `plural` (all namespaces) from `resource_version` (exclusive).
    /// Returns once the server answered (so events are timestamped from then on, as they
    /// arrive); a thread sends each event to `tx` until [`Watch::stop`] or until `tx`'s
    /// receiver is dropped (events are converted with `From`, so one channel can carry
    /// several sources).
    ///
    /// Like an informer, the thread re-watches from the last resourceVersion it saw, with
    /// a short server-side `timeoutSeconds`, so that no watch outlives [`Watch::stop`] by
    /// more than [`REWATCH`] (an open watch would hold up the server's graceful shutdown).
    ///
    /// A watch told its resourceVersion is too old (`ERROR`, 410 Expired: it fell behind
    /// the server's event history) ends; see [`Api::informer`] for one that re-lists.
    pub fn watch<T: From<Event> + Send + 'static>(
        &self,
        group_version: &str,
        plural: &'static str,
        resource_version: u64,
        tx: mpsc::Sender<T>,
    ) -> anyhow::Result<Watch> {
        self.watch_with(group_version, plural, resource_version, tx, false)
    }

    /// [`Api::watch`], but on 410 Expired it re-lists and watches on from the list, as a
    /// client-go informer does: each listed object comes as an `ADDED` event stamped with
    /// the list's arrival (so a change missed meanwhile is seen late, never lost), and
    /// [`Watch::relists`] counts the re-lists.
    pub fn informer<T: From<Event> + Send + 'static>(
        &self,
        group_version: &str,
        plural: &'static str,
        resource_version: u64,
        tx: mpsc::Sender<T>,
    ) -> anyhow::Result<Watch> {
        self.watch_with(group_version, plural, resource_version, tx, true)
    }

    fn watch_with<T: From<Event> + Send + 'static>(
        &self,
        group_version: &str,
        plural: &'static str,
        resource_version: u64,
        tx: mpsc::Sender<T>,
        relist: bool,
    ) -> anyhow::Result<Watch> {
        let url = format!("{}/apis/{group_version}/{plural}", self.base);
        let list = {
            let (client, url) = (self.client.clone(), url.clone());
            move || -> anyhow::Result<(Vec<Value>, u64)> {
                let mut list: Value = check(client.get(&url).send()?)?.json()?;
                let rv = list["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|rv| rv.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("list of {plural} without resourceVersion"))?;
                let items = match list["items"].take() {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                };
                Ok((items, rv))
            }
        };
        let open = {
            let (client, url) = (self.stream_client.clone(), url.clone());
            move |from: u64| {
                let resp = client
                    .get(format!(
                        "{url}?watch=true&resourceVersion={from}&timeoutSeconds={}",
                        REWATCH.as_secs()
                    ))
                    .send()?;
                check(resp).with_context(|| format!("watching {plural}"))
            }
        };
        let first = open(resource_version)?;
        let stop = Arc::new(AtomicBool::new(false));
        let relists = Arc::new(AtomicUsize::new(0));
        let (stopped, relisted) = (stop.clone(), relists.clone());
        let handle = std::thread::spawn(move || {
            let mut last = resource_version;
            let mut resp = Some(first);
            'watch: while !stopped.load(Ordering::Relaxed) {
                let r = match resp.take() {
                    Some(r) => r,
                    None => match open(last) {
                        Ok(r) => r,
                        Err(_) => break,
                    },
                };
                for line in BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    let at = Instant::now();
                    let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    if let Some(rv) = v["object"]["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|rv| rv.parse().ok())
                    {
                        last = rv;
                    }
                    let event = Event {
                        at,
                        plural,
                        event_type: v["type"].as_str().unwrap_or("").to_string(),
                        object: v["object"].take(),
                    };
                    if relist && event.event_type == "ERROR" && event.object["code"] == 410 {
                        let Ok((items, rv)) = list() else { return };
                        let at = Instant::now();
                        relisted.fetch_add(1, Ordering::Relaxed);
                        for object in items {
                            let event = Event {
                                at,
                                plural,
                                event_type: "ADDED".into(),
                                object,
                            };
                            if tx.send(event.into()).is_err() {
                                return;
                            }
                        }
                        last = rv;
                        continue 'watch;
                    }
                    if event.event_type == "ERROR" || tx.send(event.into()).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Watch {
            stop,
            relists,
            handle,
        })
    }
}

/// Server-side timeout of each watch request; a running [`Watch`] re-watches after it.
pub const REWATCH: Duration = Duration::from_secs(1);

/// A running watch (see [`Api::watch`]).
#[derive(Debug)]
pub struct Watch {
    stop: Arc<AtomicBool>,
    relists: Arc<AtomicUsize>,
    handle: std::thread::JoinHandle<()>,
}

impl Watch {
    /// How often an [`Api::informer`] re-listed (0 for a plain watch).
    pub fn relists(&self) -> usize {
        self.relists.load(Ordering::Relaxed)
    }

    /// Stops re-watching and waits (at most `timeout`) for the current request to end.
    pub fn stop(self, timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + timeout;
        while !self.handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// One watch event, stamped with the moment its line arrived.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    /// The watched resource, e.g. `services`.
    pub plural: &'static str,
    /// `ADDED`, `MODIFIED`, `DELETED` or `ERROR`.
    pub event_type: String,
    pub object: Value,
}

impl Event {
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.object["metadata"]["labels"][key].as_str()
    }

    /// The status of the condition `type` ("True", "False", "Unknown"), if present.
    pub fn condition(&self, type_: &str) -> Option<&str> {
        condition(&self.object, type_)
    }

    /// Whether the object reports `Ready` "True".
    pub fn is_ready(&self) -> bool {
        is_ready(&self.object)
    }
}

/// The status of `object`'s condition `type` ("True", "False", "Unknown"), if present.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// Whether `object` reports `Ready` "True".
pub fn is_ready(object: &Value) -> bool {
    condition(object, "Ready") == Some("True")
}

/// Turns a non-2xx answer into an error carrying the body (Kubernetes `Status`).
fn check(resp: reqwest::blocking::Response) -> anyhow::Result<reqwest::blocking::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let url = resp.url().clone();
    let body = resp.text().unwrap_or_default();
    bail!("{status} from {url}: {body}")
}
