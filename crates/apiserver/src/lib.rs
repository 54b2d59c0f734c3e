//! REST API (being written).
