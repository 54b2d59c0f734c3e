//! PATCH bodies and managed fields as the API applies them (JSON patch, strategic merge
//! patch, server-side apply, duplicate-key detection, `fieldsV1` decoding): never a panic,
//! whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use wisp_apiserver::{body, fields, managed, patch};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let live = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"x": "y"}, "managedFields": [{
            "manager": "m", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]},
        "data": {"k": "v", "l": "w"},
    });
    match pick % 4 {
        0 => {
            let _ = patch::apply_json_patch(&live, rest);
        }
        1 => {
            let _ = fields::duplicate_fields(rest);
        }
        _ => {
            let Ok(value) = body::parse_as("application/json", rest) else {
                return;
            };
            if pick % 4 == 2 {
                let mut target = live.clone();
                let _ = patch::apply_strategic(&mut target, &value);
                let set = managed::decode(&value);
                assert_eq!(managed::decode(&managed::encode(&set)), set);
            } else if let Ok((mut merged, entries)) =
                managed::apply(Some(&live), &value, "f", pick & 0x80 != 0, "v1")
            {
                managed::store(&mut merged, entries);
            }
        }
    }
});
