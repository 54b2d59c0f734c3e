use std::collections::BTreeMap;

use serde_json::json;
use wisp_api::core::Bytes;

use super::*;

/// A source holding a few objects in namespace `ns`.
#[derive(Debug, Default)]
struct Objects {
    secrets: BTreeMap<String, Secret>,
    config_maps: BTreeMap<String, ConfigMap>,
}

impl ObjectSource for Objects {
    fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        Ok((ns == "ns")
            .then(|| self.secrets.get(name).cloned())
            .flatten())
    }
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        Ok((ns == "ns")
            .then(|| self.config_maps.get(name).cloned())
            .flatten())
    }
}

fn objects() -> Objects {
    let mut o = Objects::default();
    let mut s = Secret::default();
    s.data
        .insert("password".into(), Bytes(b"hunter$(2)".to_vec()));
    s.data.insert("bad key".into(), Bytes(b"x".to_vec()));
    o.secrets.insert("db".into(), s);
    let mut c = ConfigMap::default();
    c.data.insert("mode".into(), "fast".into());
    c.data.insert("app.conf".into(), "a=1\n".into());
    o.config_maps.insert("cfg".into(), c);
    o
}

fn pod() -> PodInfo {
    PodInfo {
        name: "hello-00001-1".into(),
        namespace: "ns".into(),
        pod_ip: None,
        service_account: String::new(),
    }
}

fn container(env: Value, env_from: Value) -> Container {
    serde_json::from_value(json!({"name": "app", "env": env, "envFrom": env_from})).unwrap()
}

#[test]
fn env_resolution_follows_the_kubelet() {
    let o = objects();
    type Want = Result<Vec<(&'static str, &'static str)>, &'static str>;
    let cases: Vec<(&str, Value, Value, Want)> = vec![
        (
            "secretKeyRef, escaped so $(..) is not expanded",
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]),
            json!([]),
            Ok(vec![("PW", "hunter$$(2)")]),
        ),
        (
            "configMapKeyRef and a literal",
            json!([{"name": "A", "value": "$(MODE)"}, {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}]),
            json!([]),
            Ok(vec![("A", "$(MODE)"), ("MODE", "fast")]),
        ),
        (
            "missing secret",
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]),
            json!([]),
            Err("secret \"nope\" not found"),
        ),
        (
            "missing key",
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}]),
            json!([]),
            Err("couldn't find key k in Secret ns/db"),
        ),
        (
            "missing configmap key",
            json!([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]),
            json!([]),
            Err("couldn't find key k in ConfigMap ns/cfg"),
        ),
        (
            "optional missing object and key: no variable",
            json!([
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": true}}}
            ]),
            json!([]),
            Ok(vec![]),
        ),
        (
            "envFrom with prefix first, invalid keys skipped, env after",
            json!([{"name": "MODE", "value": "slow"}]),
            json!([{"configMapRef": {"name": "cfg"}, "prefix": "C_"}, {"secretRef": {"name": "db"}}]),
            Ok(vec![
                ("C_app.conf", "a=1\n"),
                ("C_mode", "fast"),
                ("password", "hunter$$(2)"),
                ("MODE", "slow"),
            ]),
        ),
        (
            "envFrom missing configmap",
            json!([]),
            json!([{"configMapRef": {"name": "nope"}}]),
            Err("configmap \"nope\" not found"),
        ),
        (
            "envFrom optional missing",
            json!([]),
            json!([{"secretRef": {"name": "nope", "optional": true}}]),
            Ok(vec![]),
        ),
        (
            "fieldRef metadata",
            json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]),
            json!([]),
            Ok(vec![("POD", "hello-00001-1"), ("NS", "ns")]),
        ),
        (
            "fieldRef podIP without an address",
            json!([{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]),
            json!([]),
            Err("env IP: valueFrom.fieldRef: status.podIP: this replica has no address of its own"),
        ),
        (
            "fieldRef labels",
            json!([{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]),
            json!([]),
            Err(
                "env L: valueFrom.fieldRef: fieldPath \"metadata.labels\" is not supported by wisp",
            ),
        ),
    ];
    for (what, env, env_from, want) in cases {
        let c = container(env, env_from);
        let got = resolve_env(&c, &pod(), &o).map(|(c, _)| {
            assert!(c.env_from.is_empty(), "{what}");
            c.env
                .into_iter()
                .map(|e| (e.name, e.value.unwrap_or_default()))
                .collect::<Vec<_>>()
        });
        match want {
            Ok(want) => {
                let want: Vec<(String, String)> = want
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                assert_eq!(got.unwrap(), want, "{what}");
            }
            Err(message) => {
                let f = got.unwrap_err();
                assert_eq!(
                    (f.reason.as_str(), f.message.as_str()),
                    (CREATE_CONTAINER_CONFIG_ERROR, message),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn invalid_env_from_keys_are_warned_about() {
    let c = container(json!([]), json!([{"secretRef": {"name": "db"}}]));
    let (_, warnings) = resolve_env(&c, &pod(), &objects()).unwrap();
    assert_eq!(
        warnings,
        [
            "Keys [bad key] from the EnvFrom secret ns/db were skipped since they are considered \
          invalid environment variable names."
        ]
    );
}

fn volume(v: Value) -> Volume {
    serde_json::from_value(v).unwrap()
}

#[test]
fn volume_payloads_items_and_modes() {
    let o = objects();
    let f = |data: &str, mode| FileProjection {
        data: data.as_bytes().to_vec(),
        mode,
    };
    type Want = Result<Vec<(&'static str, FileProjection)>, (&'static str, &'static str)>;
    let cases: Vec<(&str, Value, Want)> = vec![
        (
            "configMap: every key, default mode",
            json!({"name": "v", "configMap": {"name": "cfg"}}),
            Ok(vec![
                ("app.conf", f("a=1\n", 0o644)),
                ("mode", f("fast", 0o644)),
            ]),
        ),
        (
            "secret items with paths and modes",
            json!({"name": "v", "secret": {"secretName": "db", "defaultMode": 0o400,
                   "items": [{"key": "password", "path": "creds/pw", "mode": 0o440}, {"key": "bad key", "path": "b"}]}}),
            Ok(vec![
                ("b", f("x", 0o400)),
                ("creds/pw", f("hunter$(2)", 0o440)),
            ]),
        ),
        (
            "projected: both kinds",
            json!({"name": "v", "projected": {"defaultMode": 0o600, "sources": [
                {"secret": {"name": "db", "items": [{"key": "password", "path": "pw"}]}},
                {"configMap": {"name": "cfg", "items": [{"key": "mode", "path": "mode"}]}}]}}),
            Ok(vec![
                ("mode", f("fast", 0o600)),
                ("pw", f("hunter$(2)", 0o600)),
            ]),
        ),
        (
            "optional missing secret: empty",
            json!({"name": "v", "secret": {"secretName": "nope", "optional": true}}),
            Ok(vec![]),
        ),
        (
            "missing secret",
            json!({"name": "v", "secret": {"secretName": "nope"}}),
            Err((
                CONTAINER_CREATING,
                "MountVolume.SetUp failed for volume \"v\" : secret \"nope\" not found",
            )),
        ),
        (
            "missing item key",
            json!({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "k"}]}}),
            Err((
                CONTAINER_CREATING,
                "MountVolume.SetUp failed for volume \"v\" : configmap references non-existent config key: k",
            )),
        ),
        (
            "escaping path",
            json!({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "mode", "path": "../x"}]}}),
            Err((
                CONTAINER_CREATING,
                "MountVolume.SetUp failed for volume \"v\" : invalid path \"../x\": must not contain '..'",
            )),
        ),
        (
            "serviceAccountToken",
            json!({"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}),
            Err((
                "VolumeUnsupported",
                "volume \"v\": a projected serviceAccountToken is not supported by wisp",
            )),
        ),
    ];
    for (what, v, want) in cases {
        let got = volume_content(&volume(v), "ns", &o);
        match want {
            Ok(files) => {
                let want: Payload = files.into_iter().map(|(k, f)| (k.to_owned(), f)).collect();
                assert_eq!(got.unwrap(), VolumeContent::Files(want), "{what}");
            }
            Err((reason, message)) => {
                let f = got.unwrap_err();
                assert_eq!(
                    (f.reason.as_str(), f.message.as_str()),
                    (reason, message),
                    "{what}"
                );
            }
        }
    }
    assert_eq!(
        volume_content(
            &volume(json!({"name": "t", "emptyDir": {"medium": "Memory"}})),
            "ns",
            &o
        )
        .unwrap(),
        VolumeContent::EmptyDir { memory: true }
    );
}

#[test]
fn references_name_every_secret_and_config_map() {
    let pod: PodSpec = serde_json::from_value(json!({
        "containers": [{"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
                        "envFrom": [{"configMapRef": {"name": "c1"}}]}],
        "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s2"}}]}},
                    {"name": "w", "configMap": {"name": "c2"}}],
        "imagePullSecrets": [{"name": "pull"}]
    }))
    .unwrap();
    let got: Vec<(&str, String)> = references(&pod).into_iter().collect();
    let want: Vec<(&str, String)> = [
        ("ConfigMap", "c1"),
        ("ConfigMap", "c2"),
        ("Secret", "pull"),
        ("Secret", "s1"),
        ("Secret", "s2"),
    ]
    .into_iter()
    .map(|(k, n)| (k, n.to_owned()))
    .collect();
    assert_eq!(got, want);
}

fn payload(files: &[(&str, &str)]) -> Payload {
    files
        .iter()
        .map(|(p, d)| {
            (
                p.to_string(),
                FileProjection {
                    data: d.as_bytes().to_vec(),
                    mode: 0o644,
                },
            )
        })
        .collect()
}

#[test]
fn atomic_writer_swaps_data_and_keeps_visible_links() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Step 1: first write: the ts dir, ..data, user-visible links.
    assert!(write_atomic(d, &payload(&[("a", "1"), ("sub/b", "2")])).unwrap());
    let first = std::fs::read_link(d.join(DATA_DIR)).unwrap();
    assert!(first.to_string_lossy().starts_with("..20"), "{first:?}");
    assert_eq!(
        std::fs::read_link(d.join("a")).unwrap(),
        Path::new("..data/a")
    );
    assert_eq!(std::fs::read_to_string(d.join("sub/b")).unwrap(), "2");
    assert_eq!(
        std::fs::metadata(d.join("a")).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // Step 2: the same payload writes nothing.
    assert!(!write_atomic(d, &payload(&[("a", "1"), ("sub/b", "2")])).unwrap());
    assert_eq!(std::fs::read_link(d.join(DATA_DIR)).unwrap(), first);
    // Step 3: a change swaps ..data, removes the old dir and names no longer there.
    assert!(write_atomic(d, &payload(&[("a", "3")])).unwrap());
    let second = std::fs::read_link(d.join(DATA_DIR)).unwrap();
    assert_ne!(second, first);
    assert!(!d.join(&first).exists());
    assert_eq!(std::fs::read_to_string(d.join("a")).unwrap(), "3");
    assert!(std::fs::symlink_metadata(d.join("sub")).is_err());
    assert!(std::fs::symlink_metadata(d.join(DATA_DIR_TMP)).is_err());
    // A mode change alone is a change too.
    let mut p = payload(&[("a", "3")]);
    p.get_mut("a").unwrap().mode = 0o400;
    assert!(write_atomic(d, &p).unwrap());
    assert_eq!(
        std::fs::metadata(d.join("a")).unwrap().permissions().mode() & 0o777,
        0o400
    );
    // Paths that would escape are refused before anything is written.
    assert!(write_atomic(d, &payload(&[("../x", "1")])).is_err());
    assert!(write_atomic(d, &payload(&[("..data", "1")])).is_err());
}

#[test]
fn civil_dates() {
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    assert_eq!(civil_from_days(20_416), (2025, 11, 24));
}

#[test]
fn a_failed_pull_backs_off_as_the_kubelet_shows_it() {
    let f = |reason: &str, message: &str| crate::Failure {
        reason: reason.into(),
        message: message.into(),
    };
    let pull = f(ERR_IMAGE_PULL, "Failed to pull image \"x\": unauthorized");
    let cases = [
        (
            "first failure: as it was",
            pull.clone(),
            false,
            pull.clone(),
        ),
        (
            "again: back-off, with the last error",
            pull.clone(),
            true,
            f(
                IMAGE_PULL_BACK_OFF,
                "Back-off pulling image: Failed to pull image \"x\": unauthorized",
            ),
        ),
        (
            "another reason: unchanged",
            f(CONTAINER_CREATING, "volume"),
            true,
            f(CONTAINER_CREATING, "volume"),
        ),
    ];
    for (what, failure, again, want) in cases {
        assert_eq!(backing_off(failure, again), want, "{what}");
    }
}
