//! The reconcilers of wisp (being written).
pub mod reconciler;
pub mod routing;
