//! wisp-activator (being written).
