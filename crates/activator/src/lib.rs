//! # wisp-activator — endpoints, load balancing and buffering
//!
//! In Knative the activator sits in the request path while a revision has no ready pod (or
//! too little spare capacity): it buffers requests, pokes the autoscaler, and load-balances
//! over the pods by capacity as they become ready (`pkg/activator/`). wisp runs it in-process:
//! every request passes through [`RevisionBackend::serve`], which follows the KPA's routing
//! mode (read per request through the [`Kpa`] link, an `ActivatorLink` the controller's
//! `Scaling` implements) — in Proxy mode it throttles by
//! capacity (requests wait here for a replica with a free slot), in Serve mode it goes
//! straight to a replica's queue and holds only while no replica is ready:
//!
//! - [`Backends`] ([`backends`]): the endpoints registry — each revision's
//!   [`RevisionBackend`] in a map swapped atomically, read lock-free per request — and the
//!   per-second stats (every replica queue's `Stat`, the activator's held counts) published
//!   on a `watch` channel for the autoscaler.
//! - [`RevisionBackend`] ([`revision_backend`]): a revision's ready replicas (each behind its
//!   `wisp_queue::ReplicaQueue`), the [`lb`] policy chosen by containerConcurrency, and
//!   the [`hold`] queue where requests wait while no replica is ready (or, in Proxy mode,
//!   none has a free slot).
//! - Keeping the registry in line with the store's revisions and the platform's replicas
//!   is the binary's (`wisp/src/endpoint_sync.rs`): this crate does not link the store.
//! - [`config::queue_config`]: a revision's queue settings (CC, timeouts, protocol from the
//!   port name).

pub mod backends;
pub mod config;
pub mod hold;
pub mod lb;
pub mod revision_backend;

pub use backends::{Backends, DEFAULT_HOLD_BOUND, ReplicaStat, RevisionStat, Stats};
pub use hold::{HoldError, Wake};
pub use revision_backend::{Endpoint, Kpa, RevisionBackend};
