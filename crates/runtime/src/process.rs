//! The local process runtime (being written).
