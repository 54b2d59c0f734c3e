//! Talking to registries (the OCI distribution API, through `oci-client`): resolving tags to
//! digests as Knative's revision reconciler does (`pkg/reconciler/revision/resolve.go`),
//! pulling images into the [`Store`], and pushing (for tests and `wisp image push`-like use).

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use crate::auth;
use crate::error::{Error, Result};
use crate::reference::{self, Reference};
use crate::store::{Document, Store, parse_document, sha256_digest};

/// Manifest media types we accept (Docker v2 schema 2 and OCI, single and multi-platform).
pub const ACCEPTED_MANIFESTS: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Explicit credentials for a registry (later from `imagePullSecrets`).
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`host[:port]`) that may be plain HTTP besides loopback ones.
    pub insecure_registries: Vec<String>,
    /// Credentials that win over the Docker config file.
    pub credentials: Option<Credentials>,
    /// The Docker config file; default `$DOCKER_CONFIG/config.json`, `~/.docker/config.json`.
    pub docker_config: Option<PathBuf>,
    /// Connect and read timeout of each request (default 30 s).
    pub timeout: Option<Duration>,
}

/// Bytes done of bytes to fetch, for progress bars and the revision's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// What a pull stored.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// What the reference names: a manifest or an index digest.
    pub digest: String,
    /// The single-platform manifest for this machine.
    pub manifest_digest: String,
    /// `<repository>@<digest>`.
    pub pinned: String,
}

fn registry_host(r: &Reference) -> &str {
    r.resolve_registry()
}

fn client_for(r: &Reference, opts: &RegistryOptions) -> Client {
    crate::install_crypto_provider();
    let host = r.registry().to_string();
    let plain = reference::is_loopback_registry(&host) || opts.insecure_registries.contains(&host);
    let timeout = opts.timeout.unwrap_or(Duration::from_secs(30));
    Client::new(ClientConfig {
        protocol: if plain {
            ClientProtocol::HttpsExcept(vec![host, r.resolve_registry().to_string()])
        } else {
            ClientProtocol::Https
        },
        connect_timeout: Some(timeout),
        read_timeout: Some(timeout),
        platform_resolver: None,
        use_monolithic_push: true,
        ..ClientConfig::default()
    })
}

fn auth_for(r: &Reference, opts: &RegistryOptions) -> Result<RegistryAuth> {
    if let Some(c) = &opts.credentials {
        return Ok(RegistryAuth::Basic(c.username.clone(), c.password.clone()));
    }
    Ok(
        auth::from_docker_config(r.registry(), opts.docker_config.as_deref())?
            .map_or(RegistryAuth::Anonymous, |(u, p)| RegistryAuth::Basic(u, p)),
    )
}

/// Maps oci-client's errors to our classes, keeping the registry's message.
fn classify(r: &Reference, e: OciDistributionError) -> Error {
    let reference = r.whole();
    match e {
        OciDistributionError::UnauthorizedError { url } => Error::Unauthorized {
            reference,
            message: format!("the registry answered 401 Unauthorized for {url}"),
        },
        OciDistributionError::AuthenticationFailure(message) => {
            Error::Unauthorized { reference, message }
        }
        OciDistributionError::ImageManifestNotFoundError(message) => {
            Error::NotFound { reference, message }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let message = envelope
                .errors
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        serde_json::to_string(&e.code)
                            .unwrap_or_default()
                            .trim_matches('"'),
                        e.message
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                Error::Unauthorized { reference, message }
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                Error::NotFound { reference, message }
            } else {
                Error::Registry { reference, message }
            }
        }
        OciDistributionError::ServerError { code, message, url } => match code {
            401 | 403 => Error::Unauthorized {
                reference,
                message: format!("{code} from {url}: {message}"),
            },
            404 => Error::NotFound {
                reference,
                message: format!("404 from {url}: {message}"),
            },
            _ => Error::Registry {
                reference,
                message: format!("{code} from {url}: {message}"),
            },
        },
        OciDistributionError::RequestError(e) => Error::Network {
            registry: r.registry().to_string(),
            message: error_chain(&e),
        },
        OciDistributionError::DigestError(e) => Error::DigestMismatch {
            what: reference,
            expected: String::new(),
            actual: e.to_string(),
        },
        other => Error::Registry {
            reference,
            message: other.to_string(),
        },
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Resolves `image` to `<repository>@sha256:<hex>` as Knative's `digestResolver.Resolve`
/// does: a reference with a digest is returned unchanged; a registry in `skip`
/// (config-deployment `registries-skipping-tag-resolving`) returns the reference unchanged
/// (Knative records no digest then); a name loaded or tagged locally resolves from the store
/// without asking any registry; otherwise a HEAD of the manifest, within `timeout`
/// (config-deployment `digest-resolution-timeout`).
pub async fn resolve(
    store: &Store,
    image: &str,
    skip: &HashSet<String>,
    timeout: Duration,
    opts: &RegistryOptions,
) -> Result<String> {
    let r = reference::parse(image)?;
    if r.digest().is_some() || skip.contains(r.registry()) {
        return Ok(image.to_string());
    }
    let repo = format!("{}/{}", registry_host(&r), r.repository());
    if let Some(d) = store.local_name(&reference::canonical(&r))? {
        return Ok(format!("{repo}@{d}"));
    }
    let client = client_for(&r, opts);
    let auth = auth_for(&r, opts)?;
    let digest = tokio::time::timeout(timeout, client.fetch_manifest_digest(&r, &auth))
        .await
        .map_err(|_| Error::Network {
            registry: r.registry().to_string(),
            message: format!("digest resolution timed out after {timeout:?}"),
        })?
        .map_err(|e| classify(&r, e))?;
    Ok(format!("{repo}@{digest}"))
}

/// Pulls `image` (tag or digest) into the store: manifest (and this platform's entry of an
/// index), config, layers — each verified against its digest. Records the tag's name.
/// Progress is reported as blobs stream in.
pub async fn pull(
    store: &Store,
    image: &str,
    opts: &RegistryOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Pulled> {
    let r = reference::parse(image)?;
    let repo = format!("{}/{}", registry_host(&r), r.repository());
    if r.digest().is_none()
        && let Some(d) = store.local_name(&reference::canonical(&r))?
    {
        let (manifest_digest, _) = store.platform_manifest(&d, &r.whole())?;
        return Ok(Pulled {
            pinned: format!("{repo}@{d}"),
            digest: d,
            manifest_digest,
        });
    }
    let _gc = store.gc_shared()?;
    let client = client_for(&r, opts);
    let auth = auth_for(&r, opts)?;
    client
        .store_auth_if_needed(r.resolve_registry(), &auth)
        .await;

    let digest = fetch_manifest(store, &client, &r, r.digest()).await?;
    let (manifest_digest, manifest) = match store.document(&digest)? {
        Document::Manifest(m) => (digest.clone(), *m),
        Document::Index(idx) => {
            let chosen = crate::platform::choose(&idx, &r.whole())?;
            let child = r.clone_with_digest(chosen.clone());
            fetch_manifest(store, &client, &child, Some(&chosen)).await?;
            match store.document(&chosen)? {
                Document::Manifest(m) => (chosen, *m),
                Document::Index(_) => {
                    return Err(Error::InvalidContent {
                        what: format!("index {digest}"),
                        message: "nested index entries are not supported".into(),
                    });
                }
            }
        }
    };
    let mut blobs = vec![manifest.config().clone()];
    blobs.extend(manifest.layers().iter().cloned());
    let total: u64 = blobs.iter().map(|b| b.size()).sum();
    let mut done: u64 = 0;
    progress(Progress { done, total });
    for b in &blobs {
        let d = b.digest().to_string();
        if store.has_blob(&d) {
            done += b.size();
            progress(Progress { done, total });
            continue;
        }
        let mut stream = client
            .pull_blob_stream(&r, d.as_str())
            .await
            .map_err(|e| classify(&r, e))?;
        let mut w = store.blob_writer(&d, &format!("blob {d} of {}", r.whole()))?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Error::Network {
                registry: r.registry().to_string(),
                message: format!("downloading {d}: {e}"),
            })?;
            w.write_all(&chunk)
                .map_err(Error::io(format!("writing blob {d}")))?;
            done += chunk.len() as u64;
            progress(Progress {
                done,
                total: total.max(done),
            });
        }
        w.commit()?;
    }
    if r.digest().is_none() {
        store.record_pulled(&reference::canonical(&r), &digest)?;
    }
    Ok(Pulled {
        pinned: format!("{repo}@{digest}"),
        digest,
        manifest_digest,
    })
}

/// GETs a manifest, checks it against `expected` (or the digest the registry reports),
/// stores it; returns its digest.
async fn fetch_manifest(
    store: &Store,
    client: &Client,
    r: &Reference,
    expected: Option<&str>,
) -> Result<String> {
    let (bytes, reported) = client
        .pull_manifest_raw(r, &RegistryAuth::Anonymous, ACCEPTED_MANIFESTS)
        .await
        .map_err(|e| classify(r, e))?;
    let actual = sha256_digest(&bytes);
    let want = expected.unwrap_or(&reported);
    if want.starts_with("sha256:") && actual != want {
        return Err(Error::DigestMismatch {
            what: format!("manifest of {}", r.whole()),
            expected: want.to_string(),
            actual,
        });
    }
    parse_document(&bytes, &format!("manifest of {}", r.whole()))?;
    store.put_blob(&bytes, &actual, &format!("manifest of {}", r.whole()))?;
    Ok(actual)
}

/// Pushes a stored image (`local`: a name or digest in the store) to `remote`.
pub async fn push(
    store: &Store,
    local: &str,
    remote: &str,
    opts: &RegistryOptions,
) -> Result<String> {
    let digest = store
        .lookup(local)?
        .ok_or_else(|| Error::NotLocal(local.to_string()))?;
    let r = reference::parse(remote)?;
    let client = Arc::new(client_for(&r, opts));
    let auth = auth_for(&r, opts)?;
    client
        .store_auth_if_needed(r.resolve_registry(), &auth)
        .await;
    // Authenticate for push (a token with push scope when the registry uses tokens).
    client
        .auth(&r, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| classify(&r, e))?;
    let manifests = match store.document(&digest)? {
        Document::Manifest(_) => vec![digest.clone()],
        Document::Index(idx) => {
            let mut v: Vec<String> = idx
                .manifests()
                .iter()
                .map(|m| m.digest().to_string())
                .filter(|d| store.has_blob(d))
                .collect();
            v.push(digest.clone());
            v
        }
    };
    for md in manifests {
        let bytes = store.read_blob(&md)?;
        let media = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.get("mediaType")
                    .and_then(|m| m.as_str())
                    .map(String::from)
            });
        if let Document::Manifest(m) = parse_document(&bytes, &md)? {
            let mut blobs = vec![m.config().digest().to_string()];
            blobs.extend(m.layers().iter().map(|l| l.digest().to_string()));
            for b in blobs {
                let data = store.read_blob(&b)?;
                client
                    .push_blob(&r, data, &b)
                    .await
                    .map_err(|e| classify(&r, e))?;
            }
        }
        let target = if md == digest {
            r.clone()
        } else {
            r.clone_with_digest(md.clone())
        };
        let media = media.unwrap_or_else(|| {
            if bytes.windows(11).any(|w| w == b"\"manifests\"") {
                "application/vnd.oci.image.index.v1+json".into()
            } else {
                "application/vnd.oci.image.manifest.v1+json".into()
            }
        });
        let ct = http::HeaderValue::from_str(&media).map_err(|e| Error::InvalidContent {
            what: format!("manifest {md}"),
            message: e.to_string(),
        })?;
        client
            .push_manifest_raw(&target, bytes, ct)
            .await
            .map_err(|e| classify(&r, e))?;
    }
    Ok(digest)
}
