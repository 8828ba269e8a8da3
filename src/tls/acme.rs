//! The TLS side of automatic certificates (`[acme]`, feature `acme`): what a handshake needs
//! from `state_dir`, where the ACME thread (`crate::acme`) writes it. Here rather than there
//! so that `tls` stays a leaf: the ACME thread depends on `tls`, never the reverse.
//!
//! - `state_dir/NAME.crt` and `NAME.key`: each name's chain and key ([`cert_files`]), loaded
//!   into the SNI resolver by [`certificates`] whenever the configuration is built.
//! - `state_dir/tls-alpn-01/NAME.pem`: a TLS-ALPN-01 certificate and key while its
//!   challenge is pending ([`alpn_file`]), answered by [`alpn_certificate`] to a ClientHello
//!   offering only `acme-tls/1` (RFC 8737 §3).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;

use crate::config::{AcmeSettings, CertFiles};

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// The subdirectory of `state_dir` holding TLS-ALPN-01 certificates.
pub const ALPN_DIR: &str = "tls-alpn-01";

/// A name's certificate chain and key in `state_dir`.
pub fn cert_files(state_dir: &Path, name: &str) -> CertFiles {
    CertFiles { cert: state_dir.join(format!("{name}.crt")), key: state_dir.join(format!("{name}.key")) }
}

/// A name's TLS-ALPN-01 certificate and key, while its challenge is pending.
pub fn alpn_file(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join(ALPN_DIR).join(format!("{name}.pem"))
}

/// The TLS-ALPN-01 certificate for the SNI `name`, if one is pending. Names other than
/// DNS names (the only ones `[acme] domains` takes) name no file.
pub fn alpn_certificate(state_dir: &Path, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
    let name = super::sni::normalize(name?);
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !valid || name.starts_with('.') {
        return None;
    }
    let pem = std::fs::read(alpn_file(state_dir, &name)).ok()?;
    certified_key(&pem)
}

/// A certificate chain and its key from one PEM text.
pub fn certified_key(pem: &[u8]) -> Option<Arc<CertifiedKey>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().ok()?;
    let key = PrivateKeyDer::from_pem_slice(pem).ok()?;
    let signer = super::provider().key_provider.load_private_key(key).ok()?;
    (!chain.is_empty()).then(|| Arc::new(CertifiedKey::new(chain, signer)))
}

/// The certificates in `state_dir` for the configured names: those that load (expired ones
/// too, with a warning: better than none while the CA is unreachable); a name without one
/// yet is left out (its handshakes get an alert).
pub fn certificates(
    settings: &AcmeSettings,
    provider: &CryptoProvider,
    now: SystemTime,
    warnings: &mut Vec<String>,
) -> Vec<(String, Arc<CertifiedKey>)> {
    let mut out = Vec::new();
    for name in &settings.domains {
        let files = cert_files(&settings.state_dir, name);
        if !files.cert.exists() {
            continue;
        }
        match super::certs::load(&files, provider, now) {
            Ok(l) => {
                warnings.extend(l.warning.map(|w| format!("acme: {w}; serving it until it is renewed")));
                out.push((name.clone(), l.key));
            }
            Err(e) => warnings.push(format!("acme: {name}: {e}; a new certificate will be ordered")),
        }
    }
    out
}
