//! Table tests of the core kinds' rules, with kube-apiserver's messages.

use serde_json::json;

use super::*;

fn cm(v: serde_json::Value) -> ConfigMap {
    serde_json::from_value(v).unwrap()
}

fn secret(v: serde_json::Value) -> Secret {
    let mut s: Secret = serde_json::from_value(v).unwrap();
    prepare_secret(&mut s);
    s
}

fn messages(errs: &[FieldErr]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

#[test]
fn config_map_keys() {
    let cases: &[(&str, &[&str])] = &[
        ("a", &[]),
        ("key.name", &[]),
        ("KEY_NAME", &[]),
        ("key-name", &[]),
        (".dotfile", &[]),
        ("a b", &[CONFIG_MAP_KEY_MSG]),
        ("a/b", &[CONFIG_MAP_KEY_MSG]),
        ("", &[CONFIG_MAP_KEY_MSG]),
        (".", &["must not be '.'"]),
        ("..", &["must not be '..'"]),
        ("..a", &["must not start with '..'"]),
    ];
    for (key, want) in cases {
        assert_eq!(config_map_key(key), *want, "{key:?}");
    }
    assert_eq!(
        config_map_key(&"a".repeat(254)),
        ["must be no more than 253 bytes"]
    );
}

#[test]
fn config_map_rules() {
    let cases: Vec<(serde_json::Value, Vec<String>)> = vec![
        (
            json!({"metadata": {"name": "cfg"}, "data": {"a": "b"}}),
            vec![],
        ),
        (
            json!({"metadata": {"name": "Cfg"}}),
            vec![format!(
                "metadata.name: Invalid value: \"Cfg\": {}",
                names::dns1123_subdomain("Cfg")[0]
            )],
        ),
        (
            json!({"metadata": {}}),
            vec!["metadata.name: Required value: name or generateName is required".into()],
        ),
        (json!({"metadata": {"generateName": "cfg-"}}), vec![]),
        (
            json!({"metadata": {"name": "cfg"}, "data": {"a b": "x"}}),
            vec![format!(
                "data[a b]: Invalid value: \"a b\": {CONFIG_MAP_KEY_MSG}"
            )],
        ),
        (
            json!({"metadata": {"name": "cfg"}, "data": {"a": "x"}, "binaryData": {"a": "eA=="}}),
            vec!["data[a]: Invalid value: \"a\": duplicate of key present in binaryData".into()],
        ),
        (
            json!({"metadata": {"name": "cfg"}, "data": {"a": "x".repeat(MAX_SECRET_SIZE + 1)}}),
            vec![": Too long: may not be more than 1048576 bytes".into()],
        ),
    ];
    for (obj, want) in cases {
        assert_eq!(
            messages(&validate_config_map(&cm(obj.clone()), None)),
            want,
            "{obj}"
        );
    }
}

#[test]
fn immutable_config_maps_keep_their_data() {
    let old = cm(json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}}));
    let same = cm(
        json!({"metadata": {"name": "c", "labels": {"x": "y"}}, "immutable": true, "data": {"a": "1"}}),
    );
    assert!(validate_config_map(&same, Some(&old)).is_empty());
    let changed = cm(json!({"metadata": {"name": "c"}, "data": {"a": "2"}}));
    assert_eq!(
        messages(&validate_config_map(&changed, Some(&old))),
        [
            "immutable: Forbidden: field is immutable when `immutable` is set",
            "data: Forbidden: field is immutable when `immutable` is set"
        ]
    );
}

#[test]
fn secret_string_data_merges_over_data() {
    let s = secret(json!({
        "metadata": {"name": "s"},
        "data": {"a": "b2xk", "b": "Yg=="},
        "stringData": {"a": "new"}
    }));
    assert_eq!(s.type_, "Opaque");
    assert_eq!(s.value("a"), Some(&b"new"[..]));
    assert_eq!(s.value("b"), Some(&b"b"[..]));
    let out = serde_json::to_value(&s).unwrap();
    assert_eq!(out["data"], json!({"a": "bmV3", "b": "Yg=="}));
    assert!(out.get("stringData").is_none());
}

#[test]
fn secret_data_must_be_base64() {
    let err = serde_json::from_value::<Secret>(json!({"data": {"a": "not base64!"}})).unwrap_err();
    assert!(
        err.to_string()
            .contains("illegal base64 data at input byte 3"),
        "{err}"
    );
    assert_eq!(
        decode_base64("YQ="),
        Err("illegal base64 data at input byte 3".into())
    );
    assert_eq!(decode_base64("YQ=="), Ok(b"a".to_vec()));
}

#[test]
fn secret_types_require_their_keys() {
    let cases: Vec<(serde_json::Value, Vec<&str>)> = vec![
        (
            json!({"type": "kubernetes.io/tls"}),
            vec![
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value",
            ],
        ),
        (
            json!({"type": "kubernetes.io/tls", "stringData": {"tls.crt": "c", "tls.key": "k"}}),
            vec![],
        ),
        (
            json!({"type": "kubernetes.io/dockerconfigjson"}),
            vec!["data[.dockerconfigjson]: Required value"],
        ),
        (
            json!({"type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": "{}"}}),
            vec![],
        ),
        (
            json!({"type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": "nope"}}),
            vec![
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": expected ident at line 1 column 2",
            ],
        ),
        (
            json!({"type": "kubernetes.io/basic-auth"}),
            vec![
                "data[username]: Required value",
                "data[password]: Required value",
            ],
        ),
        (
            json!({"type": "kubernetes.io/basic-auth", "stringData": {"password": ""}}),
            vec![],
        ),
        (
            json!({"type": "kubernetes.io/ssh-auth"}),
            vec!["data[ssh-privatekey]: Required value"],
        ),
        (
            json!({"type": "kubernetes.io/service-account-token"}),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
        ),
        (json!({"type": "example.com/anything"}), vec![]),
        (
            json!({"stringData": {"a b": "x"}}),
            vec![
                "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ],
        ),
        (
            json!({"stringData": {"a": "x".repeat(MAX_SECRET_SIZE + 1)}}),
            vec!["data: Too long: may not be more than 1048576 bytes"],
        ),
    ];
    for (mut obj, want) in cases {
        obj["metadata"] = json!({"name": "s"});
        assert_eq!(
            messages(&validate_secret(&secret(obj.clone()), None)),
            want,
            "{obj}"
        );
    }
}

#[test]
fn secret_updates() {
    let old =
        secret(json!({"metadata": {"name": "s"}, "immutable": true, "stringData": {"a": "1"}}));
    let retyped = secret(
        json!({"metadata": {"name": "s"}, "type": "x/y", "immutable": true, "stringData": {"a": "1"}}),
    );
    assert_eq!(
        messages(&validate_secret(&retyped, Some(&old))),
        ["type: Invalid value: \"x/y\": field is immutable"]
    );
    let changed =
        secret(json!({"metadata": {"name": "s"}, "immutable": true, "stringData": {"a": "2"}}));
    assert_eq!(
        messages(&validate_secret(&changed, Some(&old))),
        ["data: Forbidden: field is immutable when `immutable` is set"]
    );
}

#[test]
fn namespaces() {
    let mut ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "demo"}})).unwrap();
    prepare_namespace(&mut ns, None);
    assert_eq!(ns.spec.finalizers, ["kubernetes"]);
    assert_eq!(ns.status.phase, "Active");
    assert!(validate_namespace(&ns).is_empty());

    let mut update = ns.clone();
    update.spec.finalizers.clear();
    update.status.phase = "Terminating".into();
    prepare_namespace(&mut update, Some(&ns));
    assert_eq!(update, ns);

    let bad: Namespace = serde_json::from_value(json!({"metadata": {"name": "a.b"}})).unwrap();
    assert_eq!(
        messages(&validate_namespace(&bad)),
        ["metadata.name: Invalid value: \"a.b\": must not contain dots"]
    );
}

#[test]
fn aggregates_as_kube_does() {
    let one = FieldErr::new(ErrorType::Required, "data[a]", "");
    let two = FieldErr::invalid("type", "x", "field is immutable");
    assert_eq!(
        aggregate(std::slice::from_ref(&one)),
        "data[a]: Required value"
    );
    assert_eq!(
        aggregate(&[one, two.clone()]),
        "[data[a]: Required value, type: Invalid value: \"x\": field is immutable]"
    );
    assert_eq!(two.body(), "Invalid value: \"x\": field is immutable");
}

#[test]
fn null_maps_are_empty() {
    let s: Secret = serde_json::from_value(json!({"data": null, "stringData": null})).unwrap();
    assert!(s.data.is_empty() && s.string_data.is_empty());
    let c: ConfigMap = serde_json::from_value(json!({"data": null, "binaryData": null})).unwrap();
    assert!(c.data.is_empty() && c.binary_data.is_empty());
    let n: Namespace = serde_json::from_value(json!({"spec": {"finalizers": null}})).unwrap();
    assert!(n.spec.finalizers.is_empty());
}
