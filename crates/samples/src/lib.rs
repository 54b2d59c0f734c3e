//! Sample workloads (being written).
