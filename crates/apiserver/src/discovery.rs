//! Discovery, as kube-apiserver serves it, so Kubernetes clients find the Knative kinds:
//! `/version` (`k8s.io/apimachinery/pkg/version/types.go` `Info`), `/api`, `/api/v1`,
//! `/apis`, `/apis/{group}`, `/apis/{group}/{version}` (`metav1` `APIVersions`,
//! `APIResourceList`, `APIGroupList`, `APIGroup`, with the entries apiextensions-apiserver
//! makes for a CRD in `pkg/apiserver/customresource_discovery_controller.go`) and aggregated
//! discovery (`k8s.io/api/apidiscovery/v2/types.go` `APIGroupDiscoveryList`), which kubectl
//! asks for first.

use axum::{
    Json,
    extract::Path,
    http::{HeaderMap, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use wisp_api::kinds::{self, ResourceKind};

use crate::{
    error::ApiError,
    negotiate::{self, DiscoveryForm},
};

/// A kind's verbs ([`ResourceKind::verbs`]).
fn verbs(k: &ResourceKind) -> Vec<&'static str> {
    k.verbs().to_vec()
}

/// The served kinds of the core group (`/api/v1`): the stored ones, then the views.
pub fn core_kinds() -> impl Iterator<Item = &'static ResourceKind> {
    kinds::CORE
        .into_iter()
        .chain(kinds::VIEWS.into_iter().filter(|k| k.is_core()))
}

/// The served kinds of the named groups (`/apis`).
fn group_kinds() -> impl Iterator<Item = &'static ResourceKind> {
    kinds::served().filter(|k| !k.is_core())
}

/// Whether a group is one of kube's own (no dot, or under `k8s.io`): kube-apiserver lists
/// those before the groups of CRDs.
fn builtin_group(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

/// The verbs of the `status` subresource.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// The Kubernetes release whose API wisp follows; `/version` reports it with wisp's own
/// version as a pre-release part (`v1.32.0-wisp.0.1.0`), so clients' version-skew checks
/// see a 1.32 server and a human sees which wisp answers.
const KUBE_MAJOR: &str = "1";
const KUBE_MINOR: &str = "32";

/// `version.Info`.
pub fn version_info() -> Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-wisp.{}", env!("CARGO_PKG_VERSION")),
        // Set by a build that knows them (WISP_GIT_COMMIT=… cargo build); kube's defaults
        // otherwise (k8s.io/component-base/version/base.go).
        "gitCommit": option_env!("WISP_GIT_COMMIT").unwrap_or(""),
        "gitTreeState": option_env!("WISP_GIT_TREE_STATE").unwrap_or(""),
        "buildDate": option_env!("WISP_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        // kube reports the Go toolchain here; wisp has none.
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}

/// The served groups, each with its versions: kube's own groups first, then Knative's, in
/// [`kinds::served`] order.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    let builtin_first = group_kinds()
        .filter(|k| builtin_group(k.group))
        .chain(group_kinds().filter(|k| !builtin_group(k.group)));
    for k in builtin_first {
        match out.iter_mut().find(|(g, _)| *g == k.group) {
            Some((_, versions)) => {
                if !versions.contains(&k.version) {
                    versions.push(k.version);
                }
            }
            None => out.push((k.group, vec![k.version])),
        }
    }
    out
}

fn kinds_of(group: &str, version: &str) -> impl Iterator<Item = &'static ResourceKind> {
    group_kinds().filter(move |k| k.group == group && k.version == version)
}

fn group_version(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// `APIGroup` of a served group; the first version is the preferred one.
pub fn api_group(group: &str, versions: &[&str]) -> Value {
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions.iter().map(|v| group_version(group, v)).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(|v| group_version(group, v)),
    })
}

/// `APIGroupList` (`/apis`): each group without its `kind`/`apiVersion`, as kube nests them.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups()
        .iter()
        .map(|(g, vs)| {
            let mut v = api_group(g, vs);
            if let Some(m) = v.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            v
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `APIResourceList` of a group version: each kind and its `status` subresource.
pub fn api_resource_list(group: &str, version: &str) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": resource_entries(kinds_of(group, version)),
    })
}

/// The `APIResource` entries of `kinds`, each followed by its `status` subresource.
fn resource_entries(kinds: impl Iterator<Item = &'static ResourceKind>) -> Vec<Value> {
    let mut resources = Vec::new();
    for k in kinds {
        resources.push(json!({
            "name": k.plural,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": verbs(k),
            "shortNames": k.short_names,
            "categories": k.categories,
        }));
        if k.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", k.plural),
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": k.kind,
                "verbs": STATUS_VERBS,
            }));
        }
        for sub in k.subresources() {
            let mut entry = json!({
                "name": format!("{}/{}", k.plural, sub.name),
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            // A subresource answering as another group's kind names it (`autoscaling/v1`
            // Scale), as kube lists `deployments/scale`.
            if sub.group != k.group {
                entry["group"] = sub.group.into();
                entry["version"] = sub.version.into();
            }
            resources.push(entry);
        }
    }
    resources
}

/// `APIResourceList` of the core group (`/api/v1`): Namespaces, Secrets, ConfigMaps.
pub fn core_resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": resource_entries(core_kinds()),
    })
}

/// `APIVersions` (`/api`); `server` is the address the client reached.
pub fn api_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

/// One `APIGroupDiscovery`; `name` is "" for the core group.
fn group_discovery(name: &str, versions: Vec<Value>) -> Value {
    let mut metadata = serde_json::Map::new();
    if !name.is_empty() {
        metadata.insert("name".into(), name.into());
    }
    // A zero metav1.Time marshals as null, and kube's documents carry it.
    metadata.insert("creationTimestamp".into(), Value::Null);
    json!({"metadata": metadata, "versions": versions})
}

/// `APIResourceDiscovery` of a kind.
fn resource_discovery(k: &ResourceKind) -> Value {
    json!({
        "resource": k.plural,
        "responseKind": gvk(k.group, k.version, k.kind),
        "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": k.singular,
        "verbs": verbs(k),
        "shortNames": k.short_names,
        "categories": k.categories,
        "subresources": subresource_discovery(k),
    })
}

/// `APIResourceDiscovery.subresources` of a kind.
fn subresource_discovery(k: &ResourceKind) -> Vec<Value> {
    let mut subs = Vec::new();
    if k.status_subresource {
        subs.push(json!({
            "subresource": "status",
            "responseKind": gvk(k.group, k.version, k.kind),
            "verbs": STATUS_VERBS,
        }));
    }
    for sub in k.subresources() {
        subs.push(json!({
            "subresource": sub.name,
            "responseKind": gvk(sub.group, sub.version, sub.kind),
            "verbs": sub.verbs,
        }));
    }
    subs
}

fn discovery_list(api_version: &str, items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{api_version}"),
        "metadata": {},
        "items": items,
    })
}

/// Aggregated discovery of `/apis`: every served group, its versions and resources.
pub fn aggregated_apis(api_version: &str) -> Value {
    let items = groups()
        .into_iter()
        .map(|(g, versions)| {
            let versions = versions
                .into_iter()
                .map(|v| {
                    json!({
                        "version": v,
                        "resources": kinds_of(g, v).map(resource_discovery).collect::<Vec<_>>(),
                        "freshness": "Current",
                    })
                })
                .collect();
            group_discovery(g, versions)
        })
        .collect();
    discovery_list(api_version, items)
}

/// Aggregated discovery of `/api`: the core group, `v1`, and its kinds.
pub fn aggregated_core(api_version: &str) -> Value {
    let resources: Vec<Value> = core_kinds().map(resource_discovery).collect();
    discovery_list(
        api_version,
        vec![group_discovery(
            "",
            vec![json!({"version": "v1", "resources": resources, "freshness": "Current"})],
        )],
    )
}

fn aggregated(api_version: &str, doc: Value) -> Response {
    let content_type =
        format!("application/json;g=apidiscovery.k8s.io;v={api_version};as=APIGroupDiscoveryList");
    ([(header::CONTENT_TYPE, content_type)], Json(doc)).into_response()
}

// === handlers ===

pub async fn version() -> Json<Value> {
    Json(version_info())
}

pub async fn api(uri: axum::http::Uri, headers: HeaderMap) -> Result<Response, ApiError> {
    match negotiate::discovery_form(negotiate::accept(&headers))? {
        DiscoveryForm::Aggregated(v) => Ok(aggregated(v, aggregated_core(v))),
        DiscoveryForm::Legacy => {
            // Go's `req.Host`, as kube-apiserver reads it: HTTP/2 (which kubectl speaks
            // over TLS) carries the host as `:authority`, in the URI; HTTP/1.1 as `Host`.
            let host = uri
                .authority()
                .map(|a| a.as_str())
                .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()))
                .unwrap_or("127.0.0.1");
            Ok(Json(api_versions(host)).into_response())
        }
    }
}

pub async fn core_v1(headers: HeaderMap) -> Result<Response, ApiError> {
    plain_only(&headers)?;
    Ok(Json(core_resource_list()).into_response())
}

pub async fn apis(headers: HeaderMap) -> Result<Response, ApiError> {
    match negotiate::discovery_form(negotiate::accept(&headers))? {
        DiscoveryForm::Aggregated(v) => Ok(aggregated(v, aggregated_apis(v))),
        DiscoveryForm::Legacy => Ok(Json(api_group_list()).into_response()),
    }
}

pub async fn group(headers: HeaderMap, Path(group): Path<String>) -> Result<Response, ApiError> {
    plain_only(&headers)?;
    let (g, versions) = groups()
        .into_iter()
        .find(|(g, _)| *g == group)
        .ok_or_else(ApiError::path_not_found)?;
    Ok(Json(api_group(g, &versions)).into_response())
}

pub async fn group_version_resources(
    headers: HeaderMap,
    Path((group, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    plain_only(&headers)?;
    if kinds_of(&group, &version).next().is_none() {
        return Err(ApiError::path_not_found());
    }
    Ok(Json(api_resource_list(&group, &version)).into_response())
}

/// The per-group documents have one form, plain JSON.
fn plain_only(headers: &HeaderMap) -> Result<(), ApiError> {
    negotiate::plain_json(negotiate::accept(headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_says_kube_and_wisp() {
        let v = version_info();
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "32");
        let git = v["gitVersion"].as_str().unwrap();
        assert!(git.starts_with("v1.32.0-wisp."), "{git}");
        assert!(git.ends_with(env!("CARGO_PKG_VERSION")));
        for field in [
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(v[field].is_string(), "{field}");
        }
    }

    #[test]
    fn groups_and_versions() {
        assert_eq!(
            groups(),
            vec![
                ("apps", vec!["v1"]),
                ("events.k8s.io", vec!["v1"]),
                ("serving.knative.dev", vec!["v1", "v1beta1"]),
                ("autoscaling.internal.knative.dev", vec!["v1alpha1"]),
                ("networking.internal.knative.dev", vec!["v1alpha1"]),
            ]
        );
        let list = api_group_list();
        assert_eq!(list["kind"], "APIGroupList");
        assert_eq!(list["groups"][0]["name"], "apps");
        assert_eq!(list["groups"][2]["name"], "serving.knative.dev");
        assert_eq!(
            list["groups"][2]["preferredVersion"],
            json!({"groupVersion": "serving.knative.dev/v1", "version": "v1"})
        );
        assert!(list["groups"][0].get("kind").is_none());
        let g = api_group("autoscaling.internal.knative.dev", &["v1alpha1"]);
        assert_eq!(g["kind"], "APIGroup");
        assert_eq!(
            g["versions"][0]["groupVersion"],
            "autoscaling.internal.knative.dev/v1alpha1"
        );
    }

    #[test]
    fn resource_lists() {
        let cases = [
            (
                "serving.knative.dev",
                "v1",
                8,
                "services",
                "service",
                json!(["kservice", "ksvc"]),
            ),
            (
                "autoscaling.internal.knative.dev",
                "v1alpha1",
                2,
                "podautoscalers",
                "podautoscaler",
                json!(["kpa", "pa"]),
            ),
        ];
        for (g, v, n, first, singular, short) in cases {
            let list = api_resource_list(g, v);
            let res = list["resources"].as_array().unwrap();
            assert_eq!(res.len(), n, "{g}");
            assert_eq!(res[0]["name"], first);
            assert_eq!(res[0]["singularName"], singular);
            assert_eq!(res[0]["shortNames"], short);
            assert_eq!(res[0]["namespaced"], true);
            assert_eq!(res[1]["name"], format!("{first}/status"));
            assert_eq!(res[1]["verbs"], json!(["get", "patch", "update"]));
        }
        let svc = &api_resource_list("serving.knative.dev", "v1")["resources"][0];
        assert_eq!(svc["categories"], json!(["all", "knative", "serving"]));
        assert_eq!(svc["verbs"], json!(kinds::SERVICE.verbs()));
        assert_eq!(
            api_resource_list("serving.knative.dev", "v2")["resources"],
            json!([])
        );
    }

    #[test]
    fn aggregated_documents() {
        let d = aggregated_apis("v2");
        assert_eq!(d["kind"], "APIGroupDiscoveryList");
        assert_eq!(d["apiVersion"], "apidiscovery.k8s.io/v2");
        let items = d["items"].as_array().unwrap();
        let names: Vec<&str> = items
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        // kube's own groups first, then Knative's.
        assert_eq!(
            names,
            [
                "apps",
                "events.k8s.io",
                "serving.knative.dev",
                "autoscaling.internal.knative.dev",
                "networking.internal.knative.dev"
            ]
        );
        let apps = &items[0]["versions"][0]["resources"][0];
        assert_eq!(apps["resource"], "deployments");
        assert_eq!(apps["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(apps["subresources"][0]["subresource"], "scale");
        assert_eq!(
            apps["subresources"][0]["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        let items = &items[2..];
        let v1 = &items[0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        assert_eq!(v1["freshness"], "Current");
        let ksvc = &v1["resources"][0];
        assert_eq!(ksvc["resource"], "services");
        assert_eq!(ksvc["scope"], "Namespaced");
        assert_eq!(ksvc["singularResource"], "service");
        assert_eq!(
            ksvc["responseKind"],
            json!({"group": "serving.knative.dev", "version": "v1", "kind": "Service"})
        );
        assert_eq!(ksvc["subresources"][0]["subresource"], "status");
        let kpa = &items[1]["versions"][0]["resources"][0];
        assert_eq!(
            kpa["categories"],
            json!(["knative-internal", "autoscaling"])
        );

        let core = aggregated_core("v2beta1");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap()
            .clone();
        assert_eq!(pods["verbs"], json!(["delete", "get", "list", "watch"]));
        assert_eq!(pods["subresources"][0]["subresource"], "log");
        assert!(core["items"][0]["metadata"].get("name").is_none());
        assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    }

    #[test]
    fn core_documents() {
        let a = api_versions("127.0.0.1:6443");
        assert_eq!(a["versions"], json!(["v1"]));
        assert_eq!(
            a["serverAddressByClientCIDRs"][0]["serverAddress"],
            "127.0.0.1:6443"
        );
        let core = core_resource_list();
        assert_eq!(core["groupVersion"], "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "namespaces",
                "namespaces/status",
                "secrets",
                "configmaps",
                "pods",
                "pods/log",
                "services",
                "events"
            ]
        );
        assert_eq!(core["resources"][0]["namespaced"], false);
        assert_eq!(core["resources"][0]["shortNames"], json!(["ns"]));
        assert_eq!(core["resources"][3]["shortNames"], json!(["cm"]));
        let agg = aggregated_core("v2");
        let res = &agg["items"][0]["versions"][0]["resources"];
        assert_eq!(res[0]["scope"], "Cluster");
        assert_eq!(
            res[0]["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Namespace"})
        );
        assert_eq!(res[2]["resource"], "configmaps");
        assert_eq!(res[2]["subresources"], json!([]));
    }
}
