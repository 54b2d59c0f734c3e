//! The API's TLS: a CA and a serving certificate kept in the data dir, the rustls server
//! config `wisp serve` listens with, and the client config the `wisp` CLI trusts the CA
//! with. Start at [`load_or_create`].
//!
//! On first start a CA (`ca.crt`, `ca.key`) and a serving certificate signed by it
//! (`apiserver.crt`, `apiserver.key`; names: localhost, 127.0.0.1, ::1 and `--tls-san`)
//! are written; keys are 0600. Later starts reuse them; the serving certificate alone is
//! made again when its names differ from the wanted set or it expires within
//! [`RENEW_BEFORE`] (the CA stays, so kubeconfigs already handed out keep working).
//! Crypto is rustls with ring (no OpenSSL).

use std::{
    collections::BTreeSet,
    io::Write,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use time::{Duration, OffsetDateTime};

pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const SERVING_CERT: &str = "apiserver.crt";
pub const SERVING_KEY: &str = "apiserver.key";

/// The CA lives ten years (as kubeadm's); the serving certificate one.
const CA_VALIDITY: Duration = Duration::days(3650);
const SERVING_VALIDITY: Duration = Duration::days(365);
/// A serving certificate closer than this to its end is made again at start.
const RENEW_BEFORE: Duration = Duration::days(30);

/// The names every serving certificate carries.
pub const DEFAULT_SANS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The crypto provider of every TLS config wisp makes.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default rustls provider. reqwest (built without a provider of
/// its own) needs one for every client, even one that only speaks plain HTTP. Idempotent.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A `--tls-san` value: an IP address or a DNS name (clap's value parser).
pub fn parse_san(s: &str) -> Result<String, String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let lower = s.to_ascii_lowercase();
    rustls_pki_types::DnsName::try_from(lower.as_str())
        .map(|_| lower.clone())
        .map_err(|_| format!("{s:?} is neither an IP address nor a valid DNS name"))
}

/// What a started server serves with.
pub struct ServingTls {
    pub config: Arc<rustls::ServerConfig>,
    /// Whether the serving certificate was (re)made on this start, and why.
    pub made: Option<&'static str>,
}

/// Loads the CA and the serving certificate from `dir`, creating what is missing (see the
/// module docs), and builds the server config (ALPN: h2, http/1.1 — kubectl speaks h2).
pub fn load_or_create(dir: &Path, extra_sans: &[String]) -> anyhow::Result<ServingTls> {
    let mut wanted: BTreeSet<String> = DEFAULT_SANS.iter().map(|s| s.to_string()).collect();
    wanted.extend(extra_sans.iter().cloned());

    let (ca_pem, ca_key, ca_new) = load_or_create_ca(dir)?;
    let now = OffsetDateTime::now_utc();
    let cert_path = dir.join(SERVING_CERT);
    let key_path = dir.join(SERVING_KEY);
    let why = if ca_new {
        Some("new CA")
    } else {
        match (read_opt(&cert_path)?, read_opt(&key_path)?) {
            (Some(pem), Some(_)) => stale_reason(&pem, &wanted, now)
                .with_context(|| format!("reading {}", cert_path.display()))?,
            _ => Some("missing"),
        }
    };
    if why.is_some() {
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
            .with_context(|| format!("loading the CA {}", dir.join(CA_CERT).display()))?;
        let key = KeyPair::generate().context("generating the serving key")?;
        let mut params = CertificateParams::new(wanted.iter().cloned().collect::<Vec<_>>())
            .context("serving certificate names")?;
        params.distinguished_name = dn("wisp-apiserver");
        params.not_before = now - Duration::hours(1);
        params.not_after = now + SERVING_VALIDITY;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &issuer)
            .context("signing the serving certificate")?;
        write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    }

    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading {}", cert_path.display()))?;
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .with_context(|| format!("reading {}", key_path.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| format!("using {} as the serving certificate", cert_path.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServingTls {
        config: Arc::new(config),
        made: why,
    })
}

/// wisp's CA, as the ingress's HTTPS listener signs with it (`external-domain-tls`: a
/// development stand-in for cert-manager, see docs/differences.md).
#[derive(Clone)]
pub struct LocalCa {
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa").finish_non_exhaustive()
    }
}

impl LocalCa {
    /// The CA of the data dir (made if missing, as the API's TLS does).
    pub fn load_or_create(dir: &Path) -> anyhow::Result<LocalCa> {
        let (cert_pem, key, _) = load_or_create_ca(dir)?;
        Ok(LocalCa {
            cert_pem,
            key_pem: key.serialize_pem(),
        })
    }

    /// A serving certificate for `host` signed by the CA, valid as long as the API's.
    pub fn issue(
        &self,
        host: &str,
    ) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, KeyPair::from_pem(&self.key_pem)?)?;
        let key = KeyPair::generate()?;
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::new(vec![host.to_owned()])?;
        params.distinguished_name = dn(host);
        params.not_before = now - Duration::hours(1);
        params.not_after = now + SERVING_VALIDITY;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer)?;
        let key = PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| anyhow::anyhow!("the issued key: {e}"))?;
        Ok((vec![cert.der().clone()], key))
    }
}

/// The CA's certificate (PEM) and key, and whether they were made now.
fn load_or_create_ca(dir: &Path) -> anyhow::Result<(String, KeyPair, bool)> {
    let cert_path = dir.join(CA_CERT);
    let key_path = dir.join(CA_KEY);
    match (read_opt(&cert_path)?, read_opt(&key_path)?) {
        (Some(cert), Some(key)) => {
            let key = KeyPair::from_pem(&key)
                .with_context(|| format!("reading the CA key {}", key_path.display()))?;
            Ok((cert, key, false))
        }
        (None, None) => {
            let key = KeyPair::generate().context("generating the CA key")?;
            let now = OffsetDateTime::now_utc();
            let mut params = CertificateParams::default();
            // Named by its creation time (as k3s names its CAs): two wisp CAs never share
            // a name, so a client trusting the wrong one is told "unknown issuer", not
            // "bad signature".
            params.distinguished_name = dn(&format!("wisp-ca@{}", now.unix_timestamp()));
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            params.not_before = now - Duration::hours(1);
            params.not_after = now + CA_VALIDITY;
            let cert = params.self_signed(&key).context("making the CA")?;
            write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
            write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
            Ok((cert.pem(), key, true))
        }
        // Half a CA cannot sign anything the other half vouches for; making a new one would
        // silently invalidate every kubeconfig handed out.
        _ => bail!(
            "the data dir {} holds only one of {CA_CERT} and {CA_KEY}; restore the other, or \
             remove both to make a new CA (kubeconfigs made before must then be made again)",
            dir.display()
        ),
    }
}

/// Why a stored serving certificate must be made again (None: it is fine).
fn stale_reason(
    pem: &str,
    wanted: &BTreeSet<String>,
    now: OffsetDateTime,
) -> anyhow::Result<Option<&'static str>> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("not a PEM certificate: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("not an X.509 certificate: {e}"))?;
    if cert.validity().not_after.to_datetime() < now + RENEW_BEFORE {
        return Ok(Some("expires soon"));
    }
    let mut names = BTreeSet::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => {
                    names.insert(d.to_ascii_lowercase());
                }
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).map(IpAddr::from).ok(),
                        16 => <[u8; 16]>::try_from(*b).map(IpAddr::from).ok(),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        names.insert(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    Ok((&names != wanted).then_some("names changed"))
}

fn dn(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

fn read_opt(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes `path` whole or not at all (a temporary file renamed over it), with `mode`.
pub fn write_file(path: &Path, data: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A client config trusting only the CA certificates in `ca_pem` (read from `source`).
pub fn client_config(ca_pem: &[u8], source: &Path) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.with_context(|| format!("reading the CA {}", source.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("using the CA {}", source.display()))?;
        n += 1;
    }
    if n == 0 {
        bail!("the CA file {} holds no PEM certificate", source.display());
    }
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

/// The CA certificate file of a data dir.
pub fn ca_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CA_CERT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_parse_as_ip_or_dns_name() {
        for (input, want) in [
            ("10.0.0.1", Ok("10.0.0.1")),
            ("::1", Ok("::1")),
            ("0:0:0:0:0:0:0:1", Ok("::1")),
            ("Wisp.Example.COM", Ok("wisp.example.com")),
            ("bad name!", Err(())),
            ("", Err(())),
        ] {
            let got = parse_san(input);
            match want {
                Ok(w) => assert_eq!(got.as_deref(), Ok(w), "{input}"),
                Err(()) => assert!(got.is_err(), "{input}: {got:?}"),
            }
        }
    }

    #[test]
    fn certificates_are_made_once_and_renewed_when_names_change() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), &[]).unwrap();
        assert_eq!(first.made, Some("new CA"));
        let ca = std::fs::read(dir.path().join(CA_CERT)).unwrap();
        let serving = std::fs::read(dir.path().join(SERVING_CERT)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for key in [CA_KEY, SERVING_KEY] {
            let mode = std::fs::metadata(dir.path().join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }

        let again = load_or_create(dir.path(), &[]).unwrap();
        assert_eq!(again.made, None);
        assert_eq!(
            std::fs::read(dir.path().join(SERVING_CERT)).unwrap(),
            serving
        );

        let more = load_or_create(dir.path(), &["wisp.example.com".into()]).unwrap();
        assert_eq!(more.made, Some("names changed"));
        assert_eq!(std::fs::read(dir.path().join(CA_CERT)).unwrap(), ca);
        assert_ne!(
            std::fs::read(dir.path().join(SERVING_CERT)).unwrap(),
            serving
        );

        // Half a CA is refused rather than replaced.
        std::fs::remove_file(dir.path().join(CA_KEY)).unwrap();
        let err = load_or_create(dir.path(), &[]).err().unwrap().to_string();
        assert!(err.contains("only one of ca.crt and ca.key"), "{err}");
    }

    #[test]
    fn client_config_needs_a_certificate() {
        let err = client_config(b"not pem", Path::new("x.crt")).unwrap_err();
        assert!(
            err.to_string().contains("holds no PEM certificate"),
            "{err}"
        );
    }
}
