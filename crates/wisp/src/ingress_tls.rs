//! The ingress's HTTPS listener (`wisp serve --https-addr`): TLS terminated with rustls,
//! ALPN h2 and http/1.1, and the certificate chosen by SNI among the external hosts the
//! routing table marks `tls`: a DomainMapping's `spec.tls.secretName` (a
//! `kubernetes.io/tls` Secret in the mapping's namespace, `tls.crt` and `tls.key`, as
//! Knative's KIngress TLS block asks), else — `external-domain-tls` — a certificate wisp's
//! own CA issues for the host (in place of cert-manager). A name with no certificate ends
//! the handshake (the client sees an alert), as a gateway without a matching SNI route does.
//!
//! Secrets are read from the store when a client names the host, and kept until their
//! resourceVersion changes; issued certificates are kept for the process's life.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use arc_swap::ArcSwap;
use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use wisp_api::{
    core::Secret,
    domainmapping::DomainMapping,
    kinds,
    routing::{RoutingTable, Visibility},
};
use wisp_store::Store;

/// The `kubernetes.io/tls` keys.
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

/// Picks the certificate of the host a client names (see the module docs).
pub struct IngressCerts {
    store: Store,
    routing: Arc<ArcSwap<RoutingTable>>,
    cache: Mutex<Cache>,
    ca: crate::tls::LocalCa,
    /// Host → the certificate the CA issued for it.
    issued: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

/// (namespace, Secret) → (its resourceVersion, the key made of it).
type Cache = HashMap<(String, String), (String, Arc<CertifiedKey>)>;

impl std::fmt::Debug for IngressCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngressCerts").finish_non_exhaustive()
    }
}

impl IngressCerts {
    pub fn new(store: Store, routing: Arc<ArcSwap<RoutingTable>>, ca: crate::tls::LocalCa) -> Self {
        IngressCerts {
            store,
            routing,
            cache: Default::default(),
            ca,
            issued: Default::default(),
        }
    }

    /// The rustls server config of the listener.
    pub fn server_config(self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let mut config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(self));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The Secret named by the `spec.tls` of DomainMapping `ns/name`.
    fn mapping_secret(&self, ns: &str, name: &str) -> Option<String> {
        let raw = self
            .store
            .get(&kinds::DOMAIN_MAPPING.store_key(), ns, name)
            .ok()??;
        let dm: DomainMapping = serde_json::from_value(raw).ok()?;
        Some(dm.spec.tls?.secret_name)
    }

    /// The certificate wisp's CA issued for `host` (issued now if it has none yet).
    fn issued(&self, host: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(ck) = wisp_sync::lock(&self.issued).get(host) {
            return Some(ck.clone());
        }
        let made = self.ca.issue(host).and_then(|(certs, key)| {
            let key = crate::tls::provider()
                .key_provider
                .load_private_key(key)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(Arc::new(CertifiedKey::new(certs, key)))
        });
        match made {
            Ok(ck) => {
                wisp_sync::lock(&self.issued).insert(host.to_owned(), ck.clone());
                Some(ck)
            }
            Err(e) => {
                tracing::warn!(host, "ingress TLS: issuing a certificate: {e:#}");
                None
            }
        }
    }

    fn certified_key(&self, ns: &str, name: &str) -> Option<Arc<CertifiedKey>> {
        let raw = self
            .store
            .get(&kinds::SECRET.store_key(), ns, name)
            .ok()??;
        let secret: Secret = serde_json::from_value(raw).ok()?;
        let rv = secret.metadata.resource_version.clone();
        let key = (ns.to_owned(), name.to_owned());
        if let Some((cached_rv, ck)) = wisp_sync::lock(&self.cache).get(&key)
            && *cached_rv == rv
        {
            return Some(ck.clone());
        }
        let ck = match certified_key(&secret) {
            Ok(ck) => Arc::new(ck),
            Err(why) => {
                tracing::warn!(namespace = ns, secret = name, "ingress TLS: {why}");
                return None;
            }
        };
        wisp_sync::lock(&self.cache).insert(key, (rv, ck.clone()));
        Some(ck)
    }
}

impl ResolvesServerCert for IngressCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let host = hello.server_name()?.to_ascii_lowercase();
        let (ns, mapping) = {
            let table = self.routing.load();
            let entry = table
                .hosts
                .get(&host)
                .filter(|e| e.tls && e.visibility == Visibility::External)?;
            let mapping = entry
                .route
                .strip_prefix("domainmapping:")
                .map(str::to_owned);
            (entry.namespace.clone(), mapping)
        };
        if let Some(name) = mapping
            && let Some(secret) = self.mapping_secret(&ns, &name)
        {
            return self.certified_key(&ns, &secret);
        }
        self.issued(&host)
    }
}

/// The certificate chain and key of a `kubernetes.io/tls` Secret.
fn certified_key(secret: &Secret) -> Result<CertifiedKey, String> {
    let field = |k: &str| {
        secret
            .data
            .get(k)
            .map(|b| b.0.clone())
            .ok_or_else(|| format!("the Secret has no {k:?}"))
    };
    let certs = CertificateDer::pem_slice_iter(&field(TLS_CERT)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{TLS_CERT}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{TLS_CERT} holds no certificate"));
    }
    let key =
        PrivateKeyDer::from_pem_slice(&field(TLS_KEY)?).map_err(|e| format!("{TLS_KEY}: {e}"))?;
    let key = crate::tls::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{TLS_KEY}: {e}"))?;
    Ok(CertifiedKey::new(certs, key))
}
