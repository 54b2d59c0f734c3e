//! Reconcilers (being written).
