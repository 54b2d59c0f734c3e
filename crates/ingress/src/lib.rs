//! wisp-ingress (being written).
