//! `wisp kubeconfig`: a kubeconfig for this server — cluster `wisp` (the API's URL, the CA
//! as `certificate-authority-data`), user `wisp` (the admin token), context `wisp`
//! (namespace default) — printed, or merged into the user's kubeconfig with `--merge`
//! ([`merge`], pure, with table tests).

use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use serde_json::{Value, json};

/// The name of the cluster, user and context wisp writes.
pub const NAME: &str = "wisp";

#[derive(Debug, Clone, clap::Args)]
pub struct KubeconfigArgs {
    /// Data directory of the server (its CA, token and API address are read there).
    #[arg(long, env = "WISP_DATA_DIR", default_value = ".wisp")]
    pub data_dir: PathBuf,
    /// The API URL to write (default: the address the server last listened on).
    #[arg(long)]
    pub server: Option<String>,
    /// Merge into the first file of $KUBECONFIG, or ~/.kube/config (created 0600 when
    /// missing), replacing the entries named `wisp` and keeping everything else.
    #[arg(long)]
    pub merge: bool,
    /// With --merge: leave current-context as it is.
    #[arg(long, requires = "merge")]
    pub no_switch: bool,
}

pub fn run(args: KubeconfigArgs) -> anyhow::Result<()> {
    let ours = build(&args.data_dir, args.server.as_deref())?;
    if !args.merge {
        let yaml = serde_saphyr::to_string(&ours).context("rendering the kubeconfig")?;
        return Ok(super::out(format_args!("{yaml}"))?);
    }
    let path = target_file()?;
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => Value::Null,
        Ok(text) => serde_saphyr::from_str::<Value>(&text)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let merged = merge(existing, &ours, !args.no_switch)
        .map_err(|e| anyhow::anyhow!("cannot merge into {}: {e}", path.display()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let yaml = serde_saphyr::to_string(&merged).context("rendering the kubeconfig")?;
    crate::tls::write_file(&path, yaml.as_bytes(), 0o600)?;
    let switched = if args.no_switch {
        String::new()
    } else {
        format!("; current context is now \"{NAME}\"")
    };
    eprintln!(
        "merged cluster, user and context \"{NAME}\" into {}{switched}",
        path.display()
    );
    Ok(())
}

/// The kubeconfig of the server whose data dir is `data_dir`.
pub fn build(data_dir: &Path, server: Option<&str>) -> anyhow::Result<Value> {
    let ca_path = crate::tls::ca_path(data_dir);
    let ca = std::fs::read(&ca_path).with_context(|| {
        format!(
            "reading the API's CA {} (has `wisp serve --data-dir {}` run, over HTTPS?)",
            ca_path.display(),
            data_dir.display()
        )
    })?;
    let token_path = data_dir.join("token");
    let token = std::fs::read_to_string(&token_path)
        .with_context(|| format!("reading the API token {}", token_path.display()))?;
    let server = match server {
        Some(s) => s.to_string(),
        None => std::fs::read_to_string(data_dir.join(crate::serve::API_URL_FILE))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "https://127.0.0.1:7070".into()),
    };
    Ok(kubeconfig(&server, &ca, token.trim()))
}

/// A whole kubeconfig holding just wisp's cluster, user and context.
pub fn kubeconfig(server: &str, ca_pem: &[u8], token: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": NAME,
            "cluster": {
                "server": server,
                "certificate-authority-data":
                    base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
        }],
        "users": [{"name": NAME, "user": {"token": token}}],
        "contexts": [{
            "name": NAME,
            "context": {"cluster": NAME, "user": NAME, "namespace": "default"},
        }],
        "current-context": NAME,
        "preferences": {},
    })
}

/// Where `--merge` writes: the first file of `$KUBECONFIG` (kubectl's precedence: the
/// first file is where new entries go), else `~/.kube/config`.
fn target_file() -> anyhow::Result<PathBuf> {
    if let Some(first) = std::env::var_os("KUBECONFIG")
        .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
    {
        return Ok(first);
    }
    let home = std::env::var_os("HOME").context("neither KUBECONFIG nor HOME is set")?;
    Ok(Path::new(&home).join(".kube").join("config"))
}

/// `existing` with the `clusters`, `users` and `contexts` entries of `ours` put in place of
/// any of the same name (everything else kept, in order); `current-context` switched to
/// ours when `switch`.
pub fn merge(existing: Value, ours: &Value, switch: bool) -> Result<Value, String> {
    let mut out = match existing {
        Value::Null => json!({"apiVersion": "v1", "kind": "Config"}),
        Value::Object(m) => Value::Object(m),
        _ => return Err("the file is not a kubeconfig (not a YAML mapping)".into()),
    };
    let map = out.as_object_mut().ok_or("not a mapping")?;
    for key in ["apiVersion", "kind"] {
        if !map.contains_key(key) {
            map.insert(key.into(), ours[key].clone());
        }
    }
    for key in ["clusters", "users", "contexts"] {
        let list = map.entry(key).or_insert_with(|| json!([]));
        if list.is_null() {
            *list = json!([]);
        }
        let Some(items) = list.as_array_mut() else {
            return Err(format!("`{key}` is not a list"));
        };
        let theirs: Vec<&Value> = ours[key].as_array().into_iter().flatten().collect();
        items.retain(|item| {
            !theirs
                .iter()
                .any(|t| t.get("name").is_some() && item.get("name") == t.get("name"))
        });
        items.extend(theirs.into_iter().cloned());
    }
    if switch
        || map
            .get("current-context")
            .is_none_or(|c| c.as_str() == Some(""))
    {
        // A file without a current context gets ours even without switching: there was
        // nothing to keep.
        map.insert("current-context".into(), ours["current-context"].clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Value {
        kubeconfig("https://127.0.0.1:7070", b"CA", "tok")
    }

    fn names(v: &Value, key: &str) -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn merges_like_kubectl_config_set() {
        let other = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "prod", "cluster": {"server": "https://prod"}},
                         {"name": "wisp", "cluster": {"server": "https://old"}}],
            "users": [{"name": "me", "user": {"token": "x"}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}],
            "current-context": "prod",
            "preferences": {"colors": true},
        });
        struct Case {
            name: &'static str,
            existing: Value,
            switch: bool,
            want_clusters: Vec<&'static str>,
            want_users: Vec<&'static str>,
            want_current: &'static str,
        }
        let cases = [
            Case {
                name: "empty file",
                existing: Value::Null,
                switch: true,
                want_clusters: vec!["wisp"],
                want_users: vec!["wisp"],
                want_current: "wisp",
            },
            Case {
                name: "others kept, old wisp replaced, switched",
                existing: other.clone(),
                switch: true,
                want_clusters: vec!["prod", "wisp"],
                want_users: vec!["me", "wisp"],
                want_current: "wisp",
            },
            Case {
                name: "no switch keeps the current context",
                existing: other.clone(),
                switch: false,
                want_clusters: vec!["prod", "wisp"],
                want_users: vec!["me", "wisp"],
                want_current: "prod",
            },
            Case {
                name: "null lists, no current context",
                existing: json!({"apiVersion": "v1", "kind": "Config", "clusters": null}),
                switch: false,
                want_clusters: vec!["wisp"],
                want_users: vec!["wisp"],
                want_current: "wisp",
            },
        ];
        for c in cases {
            let got = merge(c.existing, &ours(), c.switch).unwrap();
            assert_eq!(names(&got, "clusters"), c.want_clusters, "{}", c.name);
            assert_eq!(names(&got, "users"), c.want_users, "{}", c.name);
            assert_eq!(
                names(&got, "contexts").last().unwrap(),
                "wisp",
                "{}",
                c.name
            );
            assert_eq!(got["current-context"], c.want_current, "{}", c.name);
            assert_eq!(got["kind"], "Config", "{}", c.name);
        }
        // The replaced cluster is ours, and unrelated keys survive.
        let got = merge(other, &ours(), true).unwrap();
        assert_eq!(
            got["clusters"][1]["cluster"]["server"],
            "https://127.0.0.1:7070"
        );
        assert_eq!(got["preferences"]["colors"], true);
    }

    #[test]
    fn refuses_what_is_not_a_kubeconfig() {
        for (existing, want) in [
            (json!(["a"]), "not a YAML mapping"),
            (json!({"clusters": {"a": 1}}), "`clusters` is not a list"),
        ] {
            let e = merge(existing, &ours(), true).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn the_kubeconfig_round_trips_through_yaml() {
        let yaml = serde_saphyr::to_string(&ours()).unwrap();
        let back: Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, ours());
        assert_eq!(
            back["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
    }
}
