//! A protobuf request body (kubectl's and client-go's wire form) → what the API makes of it
//! for each built-in kind a path serves, and as `DeleteOptions`; and the same bytes as a
//! watch stream: never a panic; a refusal is a 400; what decodes encodes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisp_apiserver::protobuf::{Expect, decode_body, encode, read_watch_frames};

const KINDS: [(&str, &str); 6] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Namespace"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
];

fuzz_target!(|data: &[u8]| {
    for (api_version, kind) in KINDS {
        match decode_body(data, Expect::Object { api_version, kind }) {
            Ok(v) => {
                assert!(v.is_object());
                encode(v).expect("what decodes encodes again");
            }
            Err(e) => assert_eq!(e.status.code, 400, "{}", e.status.message),
        }
    }
    if let Err(e) = decode_body(data, Expect::DeleteOptions) {
        assert_eq!(e.status.code, 400, "{}", e.status.message);
    }
    let _ = read_watch_frames(data);
});
