//! Durable object store (being written).
