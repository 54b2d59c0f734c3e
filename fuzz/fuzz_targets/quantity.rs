//! Kubernetes quantities (`resource.ParseQuantity`): never a panic; what parses has a
//! canonical form that parses again, with the same sign, and is stable from then on.
//! (Not at once: like apimachinery, `312.5Ki` is written `320000` — a BinarySI amount that
//! is no whole number of KiB — which parses as DecimalSI and is written `320k`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisp_api::quantity::Quantity;

fn reparse(text: &str, q: &Quantity) -> Quantity {
    Quantity::parse(q.as_str())
        .unwrap_or_else(|e| panic!("{text:?} → {:?} does not parse: {e}", q.as_str()))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(text) {
        let second = reparse(text, &q);
        let third = reparse(text, &second);
        assert_eq!(third.as_str(), second.as_str(), "{text:?}");
        assert_eq!(second.sign(), q.sign(), "{text:?}");
    }
});
