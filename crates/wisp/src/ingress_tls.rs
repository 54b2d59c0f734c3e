//! The ingress's HTTPS listener (`wisp serve --https-addr`): TLS terminated with rustls,
//! ALPN h2 and http/1.1, and the certificate chosen by SNI as Knative's KIngress TLS block
//! for a DomainMapping asks (`spec.tls.secretName`: a `kubernetes.io/tls` Secret in the
//! mapping's namespace, `tls.crt` and `tls.key`). A name with no certificate ends the
//! handshake (the client sees an alert), as a gateway without a matching SNI route does.
//!
//! Certificates are read from the store when a client names the host, and kept until the
//! Secret's resourceVersion changes.

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
use wisp_api::{core::Secret, domainmapping::DomainMapping, kinds, routing::RoutingTable};
use wisp_store::Store;

/// The `kubernetes.io/tls` keys.
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

/// Picks the certificate of the host a client names (see the module docs).
pub struct IngressCerts {
    store: Store,
    routing: Arc<ArcSwap<RoutingTable>>,
    cache: Mutex<Cache>,
}

/// (namespace, Secret) → (its resourceVersion, the key made of it).
type Cache = HashMap<(String, String), (String, Arc<CertifiedKey>)>;

impl std::fmt::Debug for IngressCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngressCerts").finish_non_exhaustive()
    }
}

impl IngressCerts {
    pub fn new(store: Store, routing: Arc<ArcSwap<RoutingTable>>) -> Self {
        IngressCerts {
            store,
            routing,
            cache: Default::default(),
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

    /// The (namespace, Secret name) holding `host`'s certificate: the `spec.tls` of the
    /// DomainMapping that serves the host.
    fn secret_of(&self, host: &str) -> Option<(String, String)> {
        let table = self.routing.load();
        let entry = table.hosts.get(host)?;
        let name = entry.route.strip_prefix("domainmapping:")?;
        let raw = self
            .store
            .get(&kinds::DOMAIN_MAPPING.store_key(), &entry.namespace, name)
            .ok()??;
        let dm: DomainMapping = serde_json::from_value(raw).ok()?;
        Some((entry.namespace.clone(), dm.spec.tls?.secret_name))
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
        let (ns, secret) = self.secret_of(&host)?;
        self.certified_key(&ns, &secret)
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
