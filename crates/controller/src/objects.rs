//! Typed access to the store for the serving kinds, and owner references.
//!
//! The store holds JSON; reconcilers work on `wisp_api` types. These helpers do the
//! serde round trip and turn failures into [`ReconcileError`], so a reconciler reads like
//! `let cfg: Configuration = objects::get(&ctx.store, ns, name)?`.

use serde::{Serialize, de::DeserializeOwned};
use wisp_api::{
    autoscaling::{PodAutoscaler, PodAutoscalerStatus},
    domainmapping::{ClusterDomainClaim, DomainMapping, DomainMappingStatus},
    kinds::{self, ResourceKind},
    meta::{ObjectMeta, OwnerReference},
    serving::{
        Configuration, ConfigurationStatus, Revision, RevisionStatus, Route, RouteStatus, Service,
        ServiceStatus,
    },
};
use wisp_store::{LabelSelector, Store};

use crate::reconciler::{ReconcileError, resource};

/// A top-level object of a known kind.
pub trait Resource: Serialize + DeserializeOwned + Send + 'static {
    /// What its status subresource holds.
    type Status: PartialEq + Clone + Serialize;
    fn kind() -> &'static ResourceKind;
    fn status(&self) -> Option<&Self::Status>;
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
}

macro_rules! resource_impl {
    ($ty:ty, $status:ty, $kind:expr) => {
        impl Resource for $ty {
            type Status = $status;
            fn kind() -> &'static ResourceKind {
                &$kind
            }
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource_impl!(Service, ServiceStatus, kinds::SERVICE);
resource_impl!(Configuration, ConfigurationStatus, kinds::CONFIGURATION);
resource_impl!(Revision, RevisionStatus, kinds::REVISION);
resource_impl!(Route, RouteStatus, kinds::ROUTE);
resource_impl!(PodAutoscaler, PodAutoscalerStatus, kinds::POD_AUTOSCALER);
resource_impl!(DomainMapping, DomainMappingStatus, kinds::DOMAIN_MAPPING);
resource_impl!(
    ClusterDomainClaim,
    serde_json::Value,
    kinds::CLUSTER_DOMAIN_CLAIM
);

/// Decodes a stored object.
pub fn decode<T: Resource>(value: serde_json::Value) -> Result<T, ReconcileError> {
    serde_json::from_value(value).map_err(|source| ReconcileError::Decode {
        what: T::kind().kind.to_owned(),
        source,
    })
}

/// Decodes a stored object straight from its JSON text (no intermediate `Value` tree: about
/// half the work and allocations of [`decode`]).
pub fn decode_str<T: Resource>(text: &str) -> Result<T, ReconcileError> {
    serde_json::from_str(text).map_err(|source| ReconcileError::Decode {
        what: T::kind().kind.to_owned(),
        source,
    })
}

/// Encodes an object for the store, filling `apiVersion` and `kind` when empty.
pub fn encode<T: Resource>(obj: &T) -> Result<serde_json::Value, ReconcileError> {
    let mut v = serde_json::to_value(obj).map_err(|source| ReconcileError::Decode {
        what: T::kind().kind.to_owned(),
        source,
    })?;
    if let Some(map) = v.as_object_mut() {
        let kind = T::kind();
        for (key, value) in [
            ("apiVersion", kind.api_version()),
            ("kind", kind.kind.to_owned()),
        ] {
            let empty = map
                .get(key)
                .and_then(|v| v.as_str())
                .is_none_or(str::is_empty);
            if empty {
                map.insert(key.to_owned(), value.into());
            }
        }
    }
    Ok(v)
}

pub fn get<T: Resource>(
    store: &Store,
    namespace: &str,
    name: &str,
) -> Result<Option<T>, ReconcileError> {
    store
        .get_raw(&resource(T::kind()), namespace, name)?
        .as_deref()
        .map(decode_str)
        .transpose()
}

/// Objects of a kind in one namespace (or all), optionally filtered by labels. The selector
/// is evaluated by the store (on its label index), so only matching objects are decoded.
pub fn list<T: Resource>(
    store: &Store,
    namespace: Option<&str>,
    selector: Option<&LabelSelector>,
) -> Result<Vec<T>, ReconcileError> {
    let (items, _) = store.list_raw(&resource(T::kind()), namespace, selector)?;
    items.iter().map(|t| decode_str(t)).collect()
}

/// Objects of a kind in a namespace whose label `key` equals `value`.
pub fn list_labelled<T: Resource>(
    store: &Store,
    namespace: &str,
    key: &str,
    value: &str,
) -> Result<Vec<T>, ReconcileError> {
    list(
        store,
        Some(namespace),
        Some(&LabelSelector::equals(key, value)),
    )
}

/// Objects of a kind in a namespace whose comma-separated list annotation `key` names
/// `item` (e.g. the revisions whose `serving.knative.dev/routes` names a route), sorted by
/// name. Found by the store; only the matches are decoded.
pub fn list_by_annotation_item<T: Resource>(
    store: &Store,
    namespace: &str,
    key: &str,
    item: &str,
) -> Result<Vec<T>, ReconcileError> {
    store
        .list_raw_by_annotation_item(&resource(T::kind()), namespace, key, item)?
        .iter()
        .map(|t| decode_str(t))
        .collect()
}

pub fn create<T: Resource>(store: &Store, obj: &T) -> Result<T, ReconcileError> {
    decode(store.create(&resource(T::kind()), encode(obj)?)?)
}

/// Replaces spec and metadata (guarded by the object's resourceVersion).
pub fn update<T: Resource>(store: &Store, obj: &T) -> Result<T, ReconcileError> {
    decode(store.update(&resource(T::kind()), encode(obj)?)?)
}

/// Replaces status only (guarded by the object's resourceVersion and uid). Writing an
/// unchanged status is a no-op in the store: no new resourceVersion, no event. Returns the
/// resourceVersion the object has after it.
///
/// Only what the store reads is encoded (the object's address, its preconditions and the
/// status), and the written object is not decoded back: a reconcile's status write costs
/// a fraction of encoding the whole object and decoding what was stored.
pub fn update_status<T: Resource>(store: &Store, obj: &T) -> Result<String, ReconcileError> {
    let meta = obj.meta();
    let status = serde_json::to_value(obj.status()).map_err(|source| ReconcileError::Decode {
        what: T::kind().kind.to_owned(),
        source,
    })?;
    let mut address = serde_json::Map::new();
    for (key, value) in [
        ("namespace", &meta.namespace),
        ("name", &meta.name),
        ("resourceVersion", &meta.resource_version),
        ("uid", &meta.uid),
    ] {
        if !value.is_empty() {
            address.insert(key.into(), value.as_str().into());
        }
    }
    let body = serde_json::json!({ "metadata": address, "status": status });
    let written = store.update_status(&resource(T::kind()), body)?;
    Ok(written["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Deletes an object (and its dependents), only if its uid is still `uid` when given.
pub fn delete<T: Resource>(
    store: &Store,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<(), ReconcileError> {
    store.delete(&resource(T::kind()), namespace, name, uid)?;
    Ok(())
}

/// The controller owner reference pointing at `owner`.
pub fn owner_reference(kind: &ResourceKind, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: kind.api_version(),
        kind: kind.kind.to_owned(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The owner reference marked `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Is `meta`'s controller the object with uid `owner_uid`?
pub fn is_controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == owner_uid)
}

/// An integer label value, e.g. `serving.knative.dev/configurationGeneration`.
pub fn label_i64(meta: &ObjectMeta, key: &str) -> Option<i64> {
    meta.labels.get(key).and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn round_trip_through_store() {
        let (ctx, _) = testing::test_context();
        let cfg = testing::configuration("default", "hello", "img");
        let created = create(&ctx.store, &cfg).unwrap();
        assert_eq!(created.api_version, "serving.knative.dev/v1");
        assert_eq!(created.kind, "Configuration");
        assert!(!created.metadata.uid.is_empty());
        let got: Configuration = get(&ctx.store, "default", "hello").unwrap().unwrap();
        assert_eq!(got, created);
        let all: Vec<Configuration> = list(&ctx.store, None, None).unwrap();
        assert_eq!(all.len(), 1);
        assert!(
            get::<Revision>(&ctx.store, "default", "hello")
                .unwrap()
                .is_none()
        );
        delete::<Configuration>(&ctx.store, "default", "hello", None).unwrap();
        assert!(
            get::<Configuration>(&ctx.store, "default", "hello")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn store_side_filters() {
        use crate::names::{annotation, label};
        let (ctx, _) = testing::test_context();
        for (ns, name, cfg, routes) in [
            ("default", "a-1", "a", "r1"),
            ("default", "a-2", "a", "r2,r1"),
            ("default", "b-1", "b", ""),
            ("other", "a-1", "a", "r1"),
        ] {
            let mut rev = testing::revision(ns, name, cfg, 1);
            if !routes.is_empty() {
                rev.metadata
                    .annotations
                    .insert(annotation::ROUTES.into(), routes.into());
            }
            create(&ctx.store, &rev).unwrap();
        }
        let names = |revs: Vec<Revision>| -> Vec<String> {
            revs.into_iter().map(|r| r.metadata.name).collect()
        };
        let labelled =
            |ns, cfg| names(list_labelled(&ctx.store, ns, label::CONFIGURATION, cfg).unwrap());
        assert_eq!(labelled("default", "a"), ["a-1", "a-2"]);
        assert_eq!(labelled("default", "b"), ["b-1"]);
        assert!(labelled("default", "c").is_empty());
        assert_eq!(labelled("other", "a"), ["a-1"]);
        let naming = |ns, route| {
            names(list_by_annotation_item(&ctx.store, ns, annotation::ROUTES, route).unwrap())
        };
        assert_eq!(naming("default", "r1"), ["a-1", "a-2"]);
        assert_eq!(naming("default", "r2"), ["a-2"]);
        assert!(naming("default", "r").is_empty());
        assert_eq!(naming("other", "r1"), ["a-1"]);
    }

    #[test]
    fn owner_references() {
        let owner = ObjectMeta {
            name: "hello".into(),
            uid: "u-1".into(),
            ..Default::default()
        };
        let r = owner_reference(&kinds::CONFIGURATION, &owner);
        assert_eq!(r.api_version, "serving.knative.dev/v1");
        assert_eq!(r.kind, "Configuration");
        assert_eq!(
            (r.controller, r.block_owner_deletion),
            (Some(true), Some(true))
        );
        let mut child = ObjectMeta::default();
        assert!(!is_controlled_by(&child, "u-1"));
        child.owner_references.push(OwnerReference {
            controller: None,
            ..r.clone()
        });
        assert!(
            !is_controlled_by(&child, "u-1"),
            "a non-controller reference does not count"
        );
        child.owner_references.push(r);
        assert!(is_controlled_by(&child, "u-1"));
        assert!(!is_controlled_by(&child, "u-2"));
    }
}
