//! The Knative Serving resource model, pure: types for Service, Configuration, Revision,
//! Route and PodAutoscaler; Kubernetes metadata and conditions; Knative's webhook defaulting
//! and validation with its exact `FieldError` messages; and the `config-*` keys as typed
//! structs. No I/O and no async: everything here is a function of its inputs and is
//! table-tested beside the code.
//!
//! Start with [`serving`] for the types, [`field_error`] for how errors render, and
//! [`config::Config`] for the configuration every defaulting and validation rule reads.

pub mod age;
pub mod annotations;
pub mod autoscaling;
pub mod config;
pub mod core;
pub mod defaults;
pub mod domainmapping;
pub mod duration;
pub mod field_error;
pub mod kinds;
pub mod labels;
pub mod meta;
pub mod prune;
pub mod quantity;
pub mod routing;
pub mod schema;
pub mod serving;
pub mod validation;

#[cfg(test)]
mod conformance;

pub use field_error::FieldError;
