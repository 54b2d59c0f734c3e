//! Nothing here: this crate exists for its tests (`tests/watcher.rs`), which drive kube-rs
//! against a real `wisp serve`, so that kube and k8s-openapi are built only for them.
