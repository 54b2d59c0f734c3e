//! Go/Knative duration strings (`time.ParseDuration`): never a panic or an overflow; what
//! parses prints and parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisp_api::duration::GoDuration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = GoDuration::parse(text) {
        let printed = d.to_string();
        assert_eq!(
            GoDuration::parse(&printed).ok(),
            Some(d),
            "{text:?} → {printed:?}"
        );
    }
});
