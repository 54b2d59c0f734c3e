//! Namespaces as objects, with kube-apiserver's lifecycle rules: the `NamespaceLifecycle`
//! admission plugin (`plugin/pkg/admission/namespace/lifecycle/admission.go`: no new
//! content in a namespace that does not exist or is terminating; `default` is never
//! deleted) and the namespace controller's deletion (`pkg/controller/namespace/deletion/
//! namespaced_resources_deleter.go`: mark `Terminating`, delete everything inside, then the
//! namespace itself).

use axum::{http::StatusCode, response::Response};
use serde_json::{Value, json};
use wisp_api::{
    core::{self, DEFAULT_NAMESPACE, PHASE_TERMINATING},
    kinds::{self, ResourceKind},
};
use wisp_store::{Store, StoreError};

use crate::{
    ApiState,
    error::ApiError,
    handlers::{ok, write},
};

fn ns_resource() -> String {
    kinds::NAMESPACE.store_key()
}

/// The namespaced kinds, in the order a namespace's deletion removes them: Knative's first
/// (deleting a Service takes its Configurations, Routes and Revisions along through owner
/// references, and the controllers stop their replicas), then Secrets and ConfigMaps, which
/// running revisions may still read while they stop.
fn contents() -> impl Iterator<Item = &'static ResourceKind> {
    kinds::ALL
        .into_iter()
        .chain(kinds::CORE)
        .filter(|k| k.namespaced)
}

/// `NamespaceLifecycle` for a create in `ns`: 404 when the namespace does not exist, 403
/// while it is being deleted. `res`/`obj` name what is being created, for the message.
pub fn admit_create(store: &Store, ns: &str, res: &str, obj: &Value) -> Result<(), ApiError> {
    let Some(namespace) = store.get(&ns_resource(), "", ns)? else {
        let mut err = ApiError::not_found(&ns_resource(), ns);
        err.status.details = Some(json!({"name": ns, "kind": "namespaces"}));
        return Err(err);
    };
    if namespace["status"]["phase"] == PHASE_TERMINATING {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let mut err = ApiError::forbidden(
            res,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        if let Some(details) = err.status.details.as_mut() {
            details["causes"] = json!([{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {ns} is being terminated"),
                "field": "metadata.namespace",
            }]);
        }
        return Err(err);
    }
    Ok(())
}

/// A Namespace object as kube's strategy creates it.
fn new_namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
        "spec": {"finalizers": [core::FINALIZER_KUBERNETES]},
        "status": {"phase": core::PHASE_ACTIVE},
    })
}

/// Namespaces that always exist and cannot be deleted: kube's `default`, Knative's system
/// namespace (it holds the live configuration) and the one the ingress gateway's Services
/// are shown in (`wisp_views::ingress`).
pub const SYSTEM: [&str; 3] = [
    DEFAULT_NAMESPACE,
    wisp_api::config::NAMESPACE,
    wisp_views::ingress::NAMESPACE,
];

/// At startup: the [`SYSTEM`] namespaces exist, every namespace that holds objects (a store from before
/// Namespaces were objects) gets its Namespace, and a deletion a previous run did not finish
/// is finished.
pub fn bootstrap(store: &Store) -> Result<(), StoreError> {
    let res = ns_resource();
    let mut wanted = store.namespaces_in_use()?;
    wanted.extend(SYSTEM.map(String::from));
    for name in wanted {
        if store.get(&res, "", &name)?.is_none() {
            match store.create(&res, new_namespace(&name)) {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let (all, _) = store.list(&res, None, None)?;
    for ns in all {
        if ns["status"]["phase"] == PHASE_TERMINATING
            && let Some(name) = ns["metadata"]["name"].as_str()
        {
            finalize(store, name)?;
        }
    }
    Ok(())
}

/// `DELETE /api/v1/namespaces/{name}`: refuses the [`SYSTEM`] ones; marks the namespace
/// `Terminating` and answers with it (kubectl then waits for it to go away), and deletes
/// its contents and then itself in the background, as kube's namespace controller does.
pub async fn delete(st: ApiState, name: String) -> Result<Response, ApiError> {
    let res = ns_resource();
    if SYSTEM.contains(&name.as_str()) {
        return Err(ApiError::forbidden(
            &res,
            &name,
            "this namespace may not be deleted",
        ));
    }
    let marked = write(st.clone(), {
        let name = name.clone();
        move |st| {
            let ns = st
                .store
                .get(&res, "", &name)?
                .ok_or_else(|| ApiError::not_found(&res, &name))?;
            if ns["status"]["phase"] == PHASE_TERMINATING {
                return Ok(ns);
            }
            let mut terminating = ns.clone();
            terminating["status"] = json!({"phase": PHASE_TERMINATING});
            Ok(st.store.update_status(&res, terminating)?)
        }
    })
    .await?;
    let finisher = st.clone();
    tokio::spawn(async move {
        let result = write(finisher, {
            let name = name.clone();
            move |st| Ok(finalize(&st.store, &name)?)
        })
        .await;
        if let Err(e) = result {
            tracing::warn!(namespace = %name, error = %e.status.message, "deleting a namespace's contents failed; retried at the next start");
        }
    });
    Ok(ok(StatusCode::OK, marked, &[]))
}

/// Deletes everything in namespace `name`, through the store's normal delete (owner
/// cascade, DELETED events the controllers act on), then the namespace.
pub fn finalize(store: &Store, name: &str) -> Result<(), StoreError> {
    for kind in contents() {
        let res = kind.store_key();
        let (items, _) = store.list(&res, Some(name), None)?;
        for item in items {
            let Some(obj_name) = item["metadata"]["name"].as_str() else {
                continue;
            };
            match store.delete(&res, name, obj_name, None) {
                // Already deleted with its owner.
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    match store.delete(&ns_resource(), "", name, None) {
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_admission() {
        let store = Store::open_in_memory().unwrap();
        let cm = json!({"metadata": {"name": "cfg"}});
        let err = admit_create(&store, "demo", "configmaps", &cm).unwrap_err();
        assert_eq!(err.status.code, 404);
        assert_eq!(err.status.message, "namespaces \"demo\" not found");

        store.create(&ns_resource(), new_namespace("demo")).unwrap();
        admit_create(&store, "demo", "configmaps", &cm).unwrap();

        let mut ns = store.get(&ns_resource(), "", "demo").unwrap().unwrap();
        ns["status"]["phase"] = PHASE_TERMINATING.into();
        store.update_status(&ns_resource(), ns).unwrap();
        let err = admit_create(&store, "demo", "configmaps", &cm).unwrap_err();
        assert_eq!(err.status.code, 403);
        assert_eq!(err.status.reason, "Forbidden");
        assert_eq!(
            err.status.message,
            "configmaps \"cfg\" is forbidden: unable to create new content in namespace demo because it is being terminated"
        );
        assert_eq!(
            err.status.details.as_ref().unwrap()["causes"][0]["reason"],
            "NamespaceTerminating"
        );
    }

    #[test]
    fn bootstrap_adopts_and_finishes() {
        let store = Store::open_in_memory().unwrap();
        let svc = kinds::SERVICE.store_key();
        // Objects in a namespace with no Namespace object (an older store).
        store
            .create(
                &svc,
                json!({"metadata": {"namespace": "legacy", "name": "a"}}),
            )
            .unwrap();
        // A deletion an earlier run did not finish.
        let mut gone = new_namespace("gone");
        gone["status"]["phase"] = PHASE_TERMINATING.into();
        store.create(&ns_resource(), gone).unwrap();
        store
            .create(
                &svc,
                json!({"metadata": {"namespace": "gone", "name": "b"}}),
            )
            .unwrap();

        bootstrap(&store).unwrap();
        let (all, _) = store.list(&ns_resource(), None, None).unwrap();
        let names: Vec<&str> = all
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["default", "knative-serving", "kourier-system", "legacy"]
        );
        assert_eq!(all[3]["status"]["phase"], "Active");
        assert_eq!(all[3]["spec"]["finalizers"], json!(["kubernetes"]));
        assert!(store.get(&svc, "gone", "b").unwrap().is_none());
        assert!(store.get(&svc, "legacy", "a").unwrap().is_some());
        // Idempotent.
        bootstrap(&store).unwrap();
    }
}
