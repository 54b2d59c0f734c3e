//! wisp-net (being written).
