//! Credentials from a Docker `config.json` (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`): `auths.<registry>.auth` (base64 `user:pass`) or
//! `username`/`password`. Keys are matched as Docker does: with or without scheme and path,
//! and Docker Hub under any of its names.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::error::{Error, Result};

fn default_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(d).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// `https://index.docker.io/v1/` → `docker.io`; `http://host:5000/x` → `host:5000`.
fn normalise_key(key: &str) -> String {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        h => h.to_string(),
    }
}

/// The user and password for `registry` in the Docker config, if any.
pub fn from_docker_config(registry: &str, path: Option<&Path>) -> Result<Option<(String, String)>> {
    let Some(path) = path.map(Path::to_path_buf).or_else(default_path) else {
        return Ok(None);
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()))(e)),
    };
    lookup(&bytes, registry).map_err(|message| Error::InvalidContent {
        what: path.display().to_string(),
        message,
    })
}

/// The user and password for `registry` in a Docker config's bytes: a `config.json` /
/// `.dockerconfigjson` (`{"auths": {…}}`), or the legacy `.dockercfg` format, which is the
/// `auths` map itself (kubelet reads both from `imagePullSecrets`,
/// `pkg/credentialprovider/config.go`).
pub fn lookup(config: &[u8], registry: &str) -> Result<Option<(String, String)>, String> {
    let v: serde_json::Value = serde_json::from_slice(config).map_err(|e| e.to_string())?;
    let want = normalise_key(registry);
    let Some(auths) = v
        .get("auths")
        .and_then(|a| a.as_object())
        .or_else(|| v.as_object().filter(|o| !o.contains_key("auths")))
    else {
        return Ok(None);
    };
    for (key, entry) in auths {
        if normalise_key(key) != want {
            continue;
        }
        if let Some(a) = entry
            .get("auth")
            .and_then(|a| a.as_str())
            .filter(|a| !a.is_empty())
        {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(a.trim())
                .map_err(|e| format!("auths.{key}.auth: invalid base64: {e}"))?;
            let s =
                String::from_utf8(decoded).map_err(|_| format!("auths.{key}.auth: not UTF-8"))?;
            let (u, p) = s
                .split_once(':')
                .ok_or_else(|| format!("auths.{key}.auth: expected base64 of user:password"))?;
            return Ok(Some((u.to_string(), p.to_string())));
        }
        let user = entry.get("username").and_then(|u| u.as_str());
        let pass = entry.get("password").and_then(|u| u.as_str());
        if let (Some(u), Some(p)) = (user, pass) {
            return Ok(Some((u.to_string(), p.to_string())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lookup() {
        let cfg = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"},
            "127.0.0.1:5000": {"username": "a", "password": "b"},
            "bad.io": {"auth": "!!!"}
        }}"#;
        let cases = [
            ("docker.io", Ok(Some(("user", "pass")))),
            ("127.0.0.1:5000", Ok(Some(("a", "b")))),
            ("ghcr.io", Ok(None)),
            ("bad.io", Err(())),
        ];
        // The legacy `.dockercfg` format: the auths map at the top.
        let legacy = br#"{"127.0.0.1:5000": {"auth": "dXNlcjpwYXNz"}}"#;
        assert_eq!(
            lookup(legacy, "127.0.0.1:5000").unwrap(),
            Some(("user".to_string(), "pass".to_string()))
        );
        for (reg, want) in cases {
            let got = lookup(cfg, reg);
            match want {
                Ok(w) => assert_eq!(
                    got.unwrap(),
                    w.map(|(u, p)| (u.to_string(), p.to_string())),
                    "{reg}"
                ),
                Err(()) => assert!(got.is_err(), "{reg}"),
            }
        }
    }
}
