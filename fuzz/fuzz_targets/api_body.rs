//! A request body as the API decodes it (JSON or YAML by content type, within the parse
//! budget): never a panic, never a hang, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 4] = [
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let content_type = TYPES[usize::from(pick) % TYPES.len()];
    if let Ok(value) = wisp_apiserver::body::parse_as(content_type, body) {
        // What decodes is an object, and encodes again.
        assert!(value.is_object());
        let _ = serde_json::to_vec(&value).expect("a decoded value encodes");
    }
});
