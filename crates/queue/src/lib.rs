//! wisp-queue (being written).
