//! Picks the certificate for a handshake from the client's SNI name: the `[[vhost]]` with
//! that host name and a certificate of its own, else the default (`[tls] cert`), which also
//! serves clients that send no SNI at all. Names compare case-insensitively, with a
//! trailing dot ignored (`Example.COM.` is `example.com`).

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A host name as the server compares them: lowercase, no trailing dot.
pub fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[derive(Debug)]
pub struct SniResolver {
    /// Normalized host name -> its certificate.
    by_name: Vec<(String, Arc<CertifiedKey>)>,
    /// None: a client naming no host with a certificate gets an alert (`[acme]` without
    /// `[tls] cert`, before the first certificate).
    default: Option<Arc<CertifiedKey>>,
    /// `[acme] state_dir` when TLS-ALPN-01 is answered (`super::acme::alpn_certificate`).
    #[cfg(feature = "acme")]
    pub acme_dir: Option<std::path::PathBuf>,
}

impl SniResolver {
    pub fn new(default: Option<Arc<CertifiedKey>>, by_name: Vec<(String, Arc<CertifiedKey>)>) -> SniResolver {
        let by_name = by_name.into_iter().map(|(n, k)| (normalize(&n), k)).collect();
        SniResolver {
            by_name,
            default,
            #[cfg(feature = "acme")]
            acme_dir: None,
        }
    }

    /// The certificate for an SNI name (or for none).
    pub fn pick(&self, sni: Option<&str>) -> Option<&Arc<CertifiedKey>> {
        let Some(sni) = sni else { return self.default.as_ref() };
        let sni = sni.strip_suffix('.').unwrap_or(sni);
        self.by_name.iter().find(|(n, _)| n.eq_ignore_ascii_case(sni)).map(|(_, k)| k).or(self.default.as_ref())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // TLS-ALPN-01 (RFC 8737 §3): a ClientHello offering `acme-tls/1` alone is the CA's.
        #[cfg(feature = "acme")]
        if let Some(dir) = &self.acme_dir {
            if hello.alpn().is_some_and(|mut p| p.next() == Some(super::acme::ACME_TLS_ALPN) && p.next().is_none()) {
                return super::acme::alpn_certificate(dir, hello.server_name());
            }
        }
        self.pick(hello.server_name()).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;

    fn key(tag: u8) -> Arc<CertifiedKey> {
        // A signing key is needed to build one; the resolver never signs, so any will do.
        let provider = super::super::provider();
        let der = fixed_key();
        let signer = provider.key_provider.load_private_key(der).unwrap();
        Arc::new(CertifiedKey::new(vec![CertificateDer::from(vec![tag])], signer))
    }

    /// A fixed P-256 PKCS#8 key (generated once with `openssl genpkey`; not used anywhere else).
    fn fixed_key() -> rustls::pki_types::PrivateKeyDer<'static> {
        use rustls::pki_types::pem::PemObject;
        let pem = "-----BEGIN PRIVATE KEY-----\n\
            MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDAJPH9sOB7IcCNfH\n\
            EAlW5RgP0X6NppilXFaTFQxuElehRANCAAT5dvJk+giMskf/QUATvpHsB+rikCBp\n\
            1eJ6Vhi0qL+fNa/yWZSix4oxnirXXWqEJqkdwy1vri0nBdFsdEhx+5+i\n\
            -----END PRIVATE KEY-----\n";
        rustls::pki_types::PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn picks_by_name_case_insensitively_with_a_trailing_dot_and_falls_back_to_the_default() {
        let r = SniResolver::new(Some(key(0)), vec![("A.example".into(), key(1)), ("b.example".into(), key(2))]);
        let tag = |sni: Option<&str>| r.pick(sni).unwrap().cert[0].as_ref()[0];
        assert_eq!(tag(Some("a.example")), 1);
        assert_eq!(tag(Some("A.EXAMPLE")), 1);
        assert_eq!(tag(Some("a.example.")), 1);
        assert_eq!(tag(Some("b.example")), 2);
        assert_eq!(tag(Some("c.example")), 0);
        assert_eq!(tag(Some("example")), 0);
        assert_eq!(tag(None), 0);
        assert_eq!(normalize("WWW.Example.org."), "www.example.org");
        let r = SniResolver::new(None, vec![("a.example".into(), key(1))]);
        assert!(r.pick(Some("c.example")).is_none() && r.pick(None).is_none());
        assert!(r.pick(Some("a.example")).is_some());
    }
}
