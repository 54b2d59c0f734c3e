//! wisp's config file (Knative's ConfigMaps as top-level keys): arbitrary YAML, and any
//! string as a Kubernetes quantity (`revision-cpu-request`) and as a duration
//! (`stable-window`) — a clear error or a config, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisp_api::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Config::from_yaml(text);
    // The same string as a value: a JSON string is a valid YAML scalar.
    let quoted = serde_json::to_string(text).expect("a string encodes");
    let _ = Config::from_yaml(&format!(
        "config-defaults:\n  revision-cpu-request: {quoted}\n"
    ));
    let _ = Config::from_yaml(&format!("config-autoscaler:\n  stable-window: {quoted}\n"));
});
