//! `wisp-controller`: the reconcile loop and the reconcilers of wisp.
//!
//! Objects live in the store ([`wisp_store::Store`]); each reconciler makes the world match
//! one kind of object, level-based and idempotent: it reads the object named by a
//! key ([`ObjectRef`]), computes the desired children with pure builders, writes what
//! differs, and reports status back. Each kind implements [`TypedReconciler`] ("what this
//! object wants"); its adapter does the plumbing once (fetch and decode, the not-found case,
//! the status write only when it changed). The [`runner`] watches the store
//! ([`wisp_store::Watch`]) and the platform's replica changes, turns every change into keys
//! (the object's own, its owners', and whatever a reconciler declares it
//! [`watches`](reconciler::Reconciler::watches)), feeds in-memory indexes ([`Observer`]s),
//! and drives the keys through a Kubernetes-style [`workqueue`] (dedupe, one worker per key
//! at a time, exponential back-off) to the reconcilers.
//!
//! The chain: Service → Configuration + Route; Configuration → Revision (immutable, one per
//! generation); Revision → `Platform::scale` and status from the replicas; Route → the
//! routing table for the ingress; labeler and GC keep routing state and old revisions tidy;
//! DomainMapping → a domain in the routing table, rewritten to its target's host.
//!
//! Start reading at [`runner`] and [`reconciler`] (the contract and its typed adapter),
//! then a reconciler: [`configuration`] (pure builders in
//! `configuration/resources.rs`) and [`revision`]. Shared helpers: [`conditions`] (Knative's
//! living condition set), [`names`] (child names, label keys), [`objects`] (typed store
//! access, owner references), and `testing` (a fake platform and fixtures; the `testing`
//! feature).

pub mod autoscaling;
pub mod conditions;
pub mod configuration;
pub mod domainmapping;
pub mod executor;
pub mod gc;
pub mod labeler;
pub mod names;
pub mod objects;
pub mod reconciler;
pub mod revision;
pub mod route;
pub mod runner;
pub mod service;
pub mod workqueue;

// A fake platform and fixtures for tests: compiled for this crate's tests and, through the
// `testing` feature, for a dependent's tests; never into `wisp serve`.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// The routing table the route reconciler publishes (defined in `wisp-api`, which the
/// ingress reads it from).
pub use wisp_api::routing;

pub use autoscaling::{PodAutoscalerReconciler, Scaling};
pub use reconciler::{
    Action, Context, Event, ObjectRef, Observer, ReconcileError, Reconciler, TypedReconciler,
};
pub use runner::{Controllers, Reconcilers};

/// The annotations the reconcilers look objects up by
/// ([`objects::list_by_annotation_item`]): the store indexes these and no others
/// (`wisp_store::Options::indexed_annotations`). Indexing every annotation cost about 10
/// index rows more per service, written with each of its objects.
pub const INDEXED_ANNOTATIONS: &[&str] = &[names::annotation::ROUTES];

/// Every reconciler `wisp serve` runs, in the order of the chain above, and what they
/// observe.
pub fn all_reconcilers() -> Reconcilers {
    use std::sync::Arc;
    // Routes by what they reference: one index, an observer of Route events, for both
    // Route reconcilers' `watches`.
    let routes = Arc::new(route::RouteIndex::default());
    // Revisions by the Secrets and ConfigMaps they reference, for the revision reconciler's
    // `watches`.
    let object_refs = Arc::new(revision::refs::ObjectRefIndex::default());
    // DomainMappings by what their ref names, for the DomainMapping reconciler's `watches`.
    let domain_mappings = Arc::new(domainmapping::DomainMappingIndex::default());
    Reconcilers {
        reconcilers: vec![
            Arc::new(service::ServiceReconciler),
            Arc::new(configuration::ConfigurationReconciler),
            Arc::new(revision::RevisionReconciler::new(object_refs.clone())),
            Arc::new(autoscaling::PodAutoscalerReconciler::new()),
            Arc::new(route::RouteReconciler::new(routes.clone())),
            Arc::new(labeler::LabelerReconciler::new(routes.clone())),
            Arc::new(gc::GcReconciler),
            Arc::new(domainmapping::DomainMappingReconciler::new(
                domain_mappings.clone(),
            )),
        ],
        observers: vec![routes, object_refs, domain_mappings],
    }
}
