//! OpenAPI, as kube-apiserver serves it, so `kubectl explain` and clients' validation know
//! the kinds: `/openapi/v3` (the discovery document: one `serverRelativeURL` with a content
//! hash per group-version), `/openapi/v3/{api/v1 | apis/{group}/{version}}` (OpenAPI 3.0
//! documents), and `/openapi/v2` (one Swagger 2.0 document of everything), after
//! k8s.io/kube-openapi `pkg/handler3/handler.go` and `pkg/handler/handler.go`: the ETag is
//! the quoted upper-case hex SHA-512 of the document, `If-None-Match` answers 304, a
//! `?hash=` that matches makes the answer immutable for a year, a stale one redirects (301)
//! to the current URL.
//!
//! The paths and operations follow what kube-apiserver publishes for a CRD
//! (apiextensions-apiserver `pkg/controller/openapi/builder/builder.go`): every operation
//! carries `x-kubernetes-group-version-kind` and `x-kubernetes-action`, and the write
//! operations list the `fieldValidation` parameter — kubectl's
//! `cli-runtime/pkg/resource/query_param_verifier_v3.go` reads it on PATCH to decide that
//! the server validates fields (and then sends `fieldValidation=Strict` instead of
//! validating on the client). The schemas are those of wisp's own types
//! ([`wisp_api::schema`]).
//!
//! The documents depend only on the served kinds, so they are built once per process.

use std::sync::OnceLock;

use axum::{
    extract::{Path, RawQuery},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};
use wisp_api::kinds::{self, ResourceKind};

use crate::{discovery, error::ApiError, negotiate};

/// One served document: its bytes and its hash (the ETag without quotes).
struct Doc {
    body: Vec<u8>,
    hash: String,
}

impl Doc {
    fn new(v: &Value) -> Doc {
        // Serializing a `Value` cannot fail.
        let body = serde_json::to_vec(v).unwrap_or_default();
        let hash = hex::encode_upper(Sha512::digest(&body));
        Doc { body, hash }
    }
}

struct Docs {
    v2: Doc,
    /// `("apis/serving.knative.dev/v1", document)`, in discovery order.
    v3: Vec<(String, Doc)>,
    v3_index: Doc,
}

fn docs() -> &'static Docs {
    static DOCS: OnceLock<Docs> = OnceLock::new();
    DOCS.get_or_init(|| {
        let v3: Vec<(String, Doc)> = group_versions()
            .into_iter()
            .map(|(path, kinds)| {
                let doc = Doc::new(&v3_document(&kinds));
                (path, doc)
            })
            .collect();
        let paths: Map<String, Value> = v3
            .iter()
            .map(|(path, doc)| {
                (
                    path.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
                )
            })
            .collect();
        Docs {
            v2: Doc::new(&v2_document()),
            v3_index: Doc::new(&json!({ "paths": paths })),
            v3,
        }
    })
}

/// Every served group-version (`api/v1`, `apis/{group}/{version}`) with its kinds.
fn group_versions() -> Vec<(String, Vec<&'static ResourceKind>)> {
    let mut out: Vec<(String, Vec<&'static ResourceKind>)> =
        vec![("api/v1".to_string(), discovery::core_kinds().collect())];
    for (group, versions) in discovery::groups() {
        for version in versions {
            let ks = kinds::served()
                .filter(|k| k.group == group && k.version == version)
                .collect();
            out.push((format!("apis/{group}/{version}"), ks));
        }
    }
    out
}

/// `GET /openapi/v3`.
pub async fn v3_index(headers: HeaderMap) -> Response {
    serve(&docs().v3_index, &headers, None)
}

/// `GET /openapi/v3/{*path}`: one group-version's document.
pub async fn v3_group_version(
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let Some((_, doc)) = docs().v3.iter().find(|(p, _)| *p == path) else {
        // kube-openapi answers an unknown group-version with a bare 404.
        return ApiError::path_not_found().into_response();
    };
    if let Err(e) = negotiate::plain_json(negotiate::accept(&headers)) {
        return e.into_response();
    }
    let hash = query.as_deref().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("hash="))
            .map(str::to_string)
    });
    if let Some(h) = &hash
        && *h != doc.hash
    {
        let location = format!("/openapi/v3/{path}?hash={}", doc.hash);
        let mut resp = StatusCode::MOVED_PERMANENTLY.into_response();
        if let Ok(v) = HeaderValue::from_str(&location) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        return resp;
    }
    serve(doc, &headers, hash.as_deref())
}

/// `GET /openapi/v2`. Only JSON: client-go's `OpenAPISchema()` asks for kube-openapi's
/// protobuf form, which wisp does not encode (docs/differences.md), and gets a 406.
pub async fn v2(headers: HeaderMap) -> Response {
    if let Err(e) = negotiate::plain_json(negotiate::accept(&headers)) {
        return e.into_response();
    }
    serve(&docs().v2, &headers, None)
}

/// Writes a document with its ETag; `If-None-Match` with that ETag (or `*`) gets a 304.
/// With a matching `?hash=` the answer may be cached forever.
fn serve(doc: &Doc, headers: &HeaderMap, hash: Option<&str>) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag.as_str()));
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "application/json")],
            doc.body.clone(),
        )
            .into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if hash.is_some() {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
        let expires = (chrono::Utc::now() + chrono::TimeDelta::days(365))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        if let Ok(v) = HeaderValue::from_str(&expires) {
            h.insert(header::EXPIRES, v);
        }
    }
    resp
}

// --- The documents --------------------------------------------------------------------

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// `x-kubernetes-group-version-kind` of a kind (or of its list, with `List` appended).
fn gvk(k: &ResourceKind, suffix: &str) -> Value {
    json!({"group": k.group, "version": k.version, "kind": format!("{}{suffix}", k.kind)})
}

/// The kind's schema with its description and GVK, as kube publishes it.
fn kind_schema(k: &ResourceKind) -> Value {
    let mut s = (k.schema)();
    if let Value::Object(m) = &mut s {
        m.insert("description".into(), k.description.into());
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk(k, "")]),
        );
        if let Some(Value::Object(props)) = m.get_mut("properties") {
            if let Some(Value::Object(p)) = props.get_mut("apiVersion") {
                p.insert("description".into(), API_VERSION_DOC.into());
            }
            if let Some(Value::Object(p)) = props.get_mut("kind") {
                p.insert("description".into(), KIND_DOC.into());
            }
        }
    }
    s
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.";

fn list_schema(k: &ResourceKind, reference: &str) -> Value {
    json!({
        "description": format!("{}List is a list of {}", k.kind, k.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
            "items": {
                "description": format!("List of {}.", k.plural),
                "type": "array",
                "items": {"$ref": format!("{reference}{}", k.openapi_name())},
            },
            "kind": {"description": KIND_DOC, "type": "string"},
            "metadata": {"$ref": format!("{reference}{META}.ListMeta")},
        },
        "x-kubernetes-group-version-kind": [gvk(k, "List")],
    })
}

/// The metadata types the documents refer to.
fn meta_schemas() -> Vec<(String, Value)> {
    vec![
        (
            format!("{META}.ListMeta"),
            json!({
                "description": "ListMeta describes metadata that synthetic resources must have, including lists.",
                "type": "object",
                "properties": {
                    "continue": {"description": "continue may be set if the user set a limit on the number of items returned, and indicates that the server has more data available.", "type": "string"},
                    "remainingItemCount": {"description": "The number of subsequent items in the list which are not included in this list response.", "type": "integer", "format": "int64"},
                    "resourceVersion": {"description": "String that identifies the server's internal version of this object that can be used by clients to determine when objects have changed.", "type": "string"},
                },
            }),
        ),
        (
            format!("{META}.Status"),
            json!({
                "description": "Status is a return value for calls that don't return other objects.",
                "type": "object",
                "properties": {
                    "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
                    "code": {"description": "Suggested HTTP return code for this status, 0 if not set.", "type": "integer", "format": "int32"},
                    "details": {"description": "Extended data associated with the reason.", "type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "kind": {"description": KIND_DOC, "type": "string"},
                    "message": {"description": "A human-readable description of the status of this operation.", "type": "string"},
                    "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                    "reason": {"description": "A machine-readable description of why this operation is in the \"Failure\" status.", "type": "string"},
                    "status": {"description": "Status of the operation. One of: \"Success\" or \"Failure\".", "type": "string"},
                },
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Status"}],
            }),
        ),
    ]
}

/// A query parameter: name, description, type.
type Param = (&'static str, &'static str, &'static str);

const PRETTY: Param = (
    "pretty",
    "If 'true', then the output is pretty printed.",
    "string",
);
const DRY_RUN: Param = (
    "dryRun",
    "When present, indicates that modifications should not be persisted. Valid values are: All.",
    "string",
);
const FIELD_MANAGER: Param = (
    "fieldManager",
    "fieldManager is a name associated with the actor or entity that is making these changes.",
    "string",
);
const FIELD_VALIDATION: Param = (
    "fieldValidation",
    "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
    "string",
);
const FORCE: Param = (
    "force",
    "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.",
    "boolean",
);
const LIST_PARAMS: &[Param] = &[
    (
        "allowWatchBookmarks",
        "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        "boolean",
    ),
    (
        "continue",
        "The continue option should be set when retrieving more results from the server.",
        "string",
    ),
    (
        "fieldSelector",
        "A selector to restrict the list of returned objects by their fields.",
        "string",
    ),
    (
        "labelSelector",
        "A selector to restrict the list of returned objects by their labels.",
        "string",
    ),
    (
        "limit",
        "limit is a maximum number of responses to return for a list call.",
        "integer",
    ),
    (
        "resourceVersion",
        "resourceVersion sets a constraint on what resource versions a request may be served from.",
        "string",
    ),
    (
        "resourceVersionMatch",
        "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        "string",
    ),
    (
        "timeoutSeconds",
        "Timeout for the list/watch call.",
        "integer",
    ),
    (
        "watch",
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
        "boolean",
    ),
];

/// One operation, in a form both documents are written from.
struct Op {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    params: Vec<Param>,
    /// Request body schema name (create, replace, patch).
    body: Option<String>,
    /// Response schema name.
    response: String,
    patch: bool,
}

/// The paths of one kind, in kube's layout for a CRD.
fn paths_of(k: &ResourceKind) -> Vec<(String, Vec<&'static str>, Vec<Op>)> {
    let name = k.openapi_name();
    let list = format!("{name}List");
    let status = format!("{META}.Status");
    let kind = k.kind;
    // kube's operation ids: verb + group-version in camel case + kind (`listServingKnativeDevV1NamespacedService`).
    let gv = camel_gv(k);
    let scoped = if k.namespaced { "Namespaced" } else { "" };
    let op = |method,
              action,
              verb: &str,
              what: &str,
              params: Vec<Param>,
              body: bool,
              response: &str,
              suffix: &str| Op {
        method,
        action,
        id: format!("{verb}{gv}{scoped}{kind}{suffix}"),
        description: what.to_string(),
        params,
        body: body.then(|| name.clone()),
        response: response.to_string(),
        patch: method == "patch",
    };
    let mut list_params = LIST_PARAMS.to_vec();
    list_params.insert(0, PRETTY);
    let write = vec![PRETTY, DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
    let patch = vec![PRETTY, DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
    let collection_ops = || {
        vec![
            op(
                "get",
                "list",
                "list",
                &format!("list objects of kind {kind}"),
                list_params.clone(),
                false,
                &list,
                "",
            ),
            op(
                "post",
                "post",
                "create",
                &format!("create a {kind}"),
                write.clone(),
                true,
                &name,
                "",
            ),
        ]
    };
    let object_ops = |suffix: &str, what: &str| {
        let mut ops = vec![
            op(
                "get",
                "get",
                "read",
                &format!("read the specified {kind}{what}"),
                vec![PRETTY],
                false,
                &name,
                suffix,
            ),
            op(
                "put",
                "put",
                "replace",
                &format!("replace the specified {kind}{what}"),
                write.clone(),
                true,
                &name,
                suffix,
            ),
            op(
                "patch",
                "patch",
                "patch",
                &format!("partially update the specified {kind}{what}"),
                patch.clone(),
                true,
                &name,
                suffix,
            ),
        ];
        if suffix.is_empty() {
            ops.push(op(
                "delete",
                "delete",
                "delete",
                &format!("delete a {kind}"),
                vec![PRETTY, DRY_RUN],
                false,
                &status,
                "",
            ));
        }
        ops
    };
    let prefix = k.api_prefix();
    let plural = k.plural;
    let mut out: Vec<(String, Vec<&'static str>, Vec<Op>)> = Vec::new();
    if k.namespaced {
        out.push((
            format!("{prefix}/namespaces/{{namespace}}/{plural}"),
            vec!["namespace"],
            collection_ops(),
        ));
        out.push((
            format!("{prefix}/namespaces/{{namespace}}/{plural}/{{name}}"),
            vec!["name", "namespace"],
            object_ops("", ""),
        ));
        if k.status_subresource {
            out.push((
                format!("{prefix}/namespaces/{{namespace}}/{plural}/{{name}}/status"),
                vec!["name", "namespace"],
                object_ops("Status", " status"),
            ));
        }
        let mut all = vec![op(
            "get",
            "list",
            "list",
            &format!("list objects of kind {kind}"),
            list_params.clone(),
            false,
            &list,
            "ForAllNamespaces",
        )];
        // `listServingKnativeDevV1ServiceForAllNamespaces`: no `Namespaced` in the id.
        all[0].id = format!("list{gv}{kind}ForAllNamespaces");
        out.push((format!("{prefix}/{plural}"), vec![], all));
    } else {
        out.push((format!("{prefix}/{plural}"), vec![], collection_ops()));
        out.push((
            format!("{prefix}/{plural}/{{name}}"),
            vec!["name"],
            object_ops("", ""),
        ));
        if k.status_subresource {
            out.push((
                format!("{prefix}/{plural}/{{name}}/status"),
                vec!["name"],
                object_ops("Status", " status"),
            ));
        }
    }
    // Only the verbs the kind serves (a view's reads; a Pod's delete).
    let verbs = k.verbs();
    for (_, _, ops) in &mut out {
        ops.retain(|o| {
            let verb = match o.action {
                "post" => "create",
                "put" => "update",
                other => other,
            };
            verbs.contains(&verb)
        });
    }
    out.retain(|(_, _, ops)| !ops.is_empty());
    out
}

/// `ServingKnativeDevV1`, `CoreV1`.
fn camel_gv(k: &ResourceKind) -> String {
    let group = if k.is_core() { "core" } else { k.group };
    let mut s: String = group
        .split('.')
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    let mut v = k.version.chars();
    if let Some(f) = v.next() {
        s.push(f.to_ascii_uppercase());
        s.push_str(v.as_str());
    }
    s
}

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

fn v3_document(ks: &[&'static ResourceKind]) -> Value {
    let reference = "#/components/schemas/";
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for k in ks {
        schemas.insert(k.openapi_name(), kind_schema(k));
        schemas.insert(
            format!("{}List", k.openapi_name()),
            list_schema(k, reference),
        );
        for (path, path_params, ops) in paths_of(k) {
            let mut item = Map::new();
            for o in ops {
                let params: Vec<Value> = o
                    .params
                    .iter()
                    .map(|(name, description, type_)| {
                        json!({"name": name, "in": "query", "description": description,
                               "schema": {"type": type_, "uniqueItems": true}})
                    })
                    .collect();
                let mut op = json!({
                    "tags": [camel_gv(k)],
                    "description": o.description,
                    "operationId": o.id,
                    "responses": {
                        "200": {"description": "OK", "content": {
                            "application/json": {"schema": {"$ref": format!("{reference}{}", o.response)}},
                            "application/yaml": {"schema": {"$ref": format!("{reference}{}", o.response)}},
                        }},
                        "401": {"description": "Unauthorized"},
                    },
                    "x-kubernetes-action": o.action,
                    "x-kubernetes-group-version-kind": gvk(k, ""),
                });
                if let Some(body) = &o.body {
                    let types: Vec<&str> = if o.patch {
                        PATCH_TYPES.to_vec()
                    } else {
                        vec!["application/json", "application/yaml"]
                    };
                    let content: Map<String, Value> = types
                        .into_iter()
                        .map(|t| {
                            let schema = if o.patch {
                                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
                            } else {
                                json!({"$ref": format!("{reference}{body}")})
                            };
                            (t.to_string(), json!({ "schema": schema }))
                        })
                        .collect();
                    op["requestBody"] = json!({"content": content, "required": true});
                }
                op["parameters"] = Value::Array(params);
                item.insert(o.method.to_string(), op);
            }
            let path_params: Vec<Value> = path_params
                .iter()
                .map(|p| {
                    let what = if *p == "name" {
                        format!("name of the {}", k.kind)
                    } else {
                        "object name and auth scope, such as for teams and projects".to_string()
                    };
                    json!({"name": p, "in": "path", "description": what, "required": true,
                           "schema": {"type": "string", "uniqueItems": true}})
                })
                .collect();
            item.insert("parameters".into(), Value::Array(path_params));
            paths.insert(path, Value::Object(item));
        }
    }
    for (name, s) in meta_schemas() {
        schemas.insert(name, s);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery::version_info()["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// Swagger 2.0 of every kind: the same operations and schemas, in v2's spelling (`$ref`s
/// into `#/definitions/`, parameters with a `type`, response `schema`s; the int-or-string
/// `anyOf` written as kube's v2 does, `type: string, format: int-or-string`).
fn v2_document() -> Value {
    let reference = "#/definitions/";
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for k in kinds::served() {
        definitions.insert(k.openapi_name(), to_v2_schema(kind_schema(k)));
        definitions.insert(
            format!("{}List", k.openapi_name()),
            list_schema(k, reference),
        );
        for (path, path_params, ops) in paths_of(k) {
            let mut item = Map::new();
            for o in ops {
                let mut params: Vec<Value> = o
                    .params
                    .iter()
                    .map(|(name, description, type_)| {
                        json!({"uniqueItems": true, "type": type_, "description": description,
                               "name": name, "in": "query"})
                    })
                    .collect();
                if let Some(body) = &o.body {
                    let schema = if o.patch {
                        json!({"type": "object"})
                    } else {
                        json!({"$ref": format!("{reference}{body}")})
                    };
                    params.insert(
                        0,
                        json!({"name": "body", "in": "body", "required": true, "schema": schema}),
                    );
                }
                let consumes: Vec<&str> = if o.patch {
                    PATCH_TYPES.to_vec()
                } else {
                    vec!["*/*"]
                };
                item.insert(
                    o.method.to_string(),
                    json!({
                        "description": o.description,
                        "consumes": consumes,
                        "produces": ["application/json", "application/yaml"],
                        "schemes": ["https"],
                        "tags": [camel_gv(k)],
                        "operationId": o.id,
                        "parameters": params,
                        "responses": {
                            "200": {"description": "OK", "schema": {"$ref": format!("{reference}{}", o.response)}},
                            "401": {"description": "Unauthorized"},
                        },
                        "x-kubernetes-action": o.action,
                        "x-kubernetes-group-version-kind": gvk(k, ""),
                    }),
                );
            }
            let path_params: Vec<Value> = path_params
                .iter()
                .map(|p| json!({"uniqueItems": true, "type": "string", "name": p, "in": "path", "required": true}))
                .collect();
            item.insert("parameters".into(), Value::Array(path_params));
            paths.insert(path, Value::Object(item));
        }
    }
    for (name, s) in meta_schemas() {
        let text = s.to_string().replace("#/components/schemas/", reference);
        definitions.insert(name, serde_json::from_str(&text).unwrap_or(s));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": discovery::version_info()["gitVersion"]},
        "paths": paths,
        "definitions": definitions,
    })
}

fn to_v2_schema(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                    m.remove("anyOf");
                    m.insert("type".into(), "string".into());
                    m.insert("format".into(), "int-or-string".into());
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_version_has_a_document_with_its_kinds() {
        let d = docs();
        let index: Value = serde_json::from_slice(&d.v3_index.body).unwrap();
        for path in [
            "api/v1",
            "apis/serving.knative.dev/v1",
            "apis/autoscaling.internal.knative.dev/v1alpha1",
        ] {
            let url = index["paths"][path]["serverRelativeURL"].as_str().unwrap();
            assert!(
                url.starts_with(&format!("/openapi/v3/{path}?hash=")),
                "{url}"
            );
        }
        let (_, serving) =
            d.v3.iter()
                .find(|(p, _)| p == "apis/serving.knative.dev/v1")
                .unwrap();
        let serving: Value = serde_json::from_slice(&serving.body).unwrap();
        let svc = &serving["components"]["schemas"]["dev.knative.serving.v1.Service"];
        assert_eq!(svc["x-kubernetes-group-version-kind"][0]["kind"], "Service");
        let patch = &serving["paths"]["/apis/serving.knative.dev/v1/namespaces/{namespace}/services/{name}"]
            ["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Service");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert_eq!(
            patch["operationId"],
            "patchServingKnativeDevV1NamespacedService"
        );
        let core = &d.v3.iter().find(|(p, _)| p == "api/v1").unwrap().1;
        let core: Value = serde_json::from_slice(&core.body).unwrap();
        assert!(core["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(
            core["components"]["schemas"]["io.k8s.api.core.v1.Secret"]["properties"]["stringData"]
                .is_object()
        );
    }

    #[test]
    fn v2_has_no_v3_only_constructs() {
        let v2 = String::from_utf8(docs().v2.body.clone()).unwrap();
        assert!(!v2.contains("#/components/"));
        assert!(!v2.contains("anyOf"));
        assert!(v2.contains("\"dev.knative.serving.v1.Revision\""));
    }

    #[test]
    fn camel_case_group_versions() {
        assert_eq!(camel_gv(&kinds::SERVICE), "ServingKnativeDevV1");
        assert_eq!(
            camel_gv(&kinds::POD_AUTOSCALER),
            "AutoscalingInternalKnativeDevV1alpha1"
        );
        assert_eq!(camel_gv(&kinds::SECRET), "CoreV1");
    }
}
