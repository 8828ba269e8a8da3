//! HTTPS with rustls: the server's TLS configuration, certificates, SNI, and the per-connection
//! TLS state (the transport of a connection accepted on a `[tls] listen` address).
//!
//! * [`certs`] loads PEM chains and keys (errors name the file; an expired leaf warns).
//! * [`sni`] picks the certificate from the SNI name: the `[[vhost]]`'s own, else the default.
//! * [`server_config`] builds the one `rustls::ServerConfig` every TLS connection shares:
//!   TLS 1.3 and 1.2 only, the provider's default suites (AEAD with forward secrecy only:
//!   AES-GCM and ChaCha20-Poly1305), ALPN `h2` (with `[http2] enabled`) and `http/1.1`, no
//!   client authentication. rustls has no renegotiation and no compression. Built again on
//!   reload: connections in flight keep the configuration (and certificate) they started with.
//! * Resumption: session tickets sealed by [`tickets::Ticketer`] (keys every worker derives
//!   alike, rotated by the clock), and a bounded stateful cache (rustls's
//!   `ServerSessionMemoryCache`, per process) for TLS 1.2 clients without tickets and for
//!   TLS 1.3 when tickets are off. The cache is carried over a reload when its size is
//!   unchanged; tickets survive reloads by construction.
//! * [`TlsState`] is what a TLS connection carries (boxed, so a plain connection stays
//!   small): the rustls connection, whose outgoing buffer is bounded by [`OUT_LIMIT`].
//!
//! The reading and writing through it is in `conn` (`conn/tls_io.rs`), beside the plain
//! transport it mirrors.

#[cfg(feature = "acme")]
pub mod acme;
pub mod certs;
pub mod sni;
pub mod tickets;

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;

use crate::config::Config;

/// Most TLS bytes a connection keeps encrypted and unsent: a slow reader costs its socket
/// buffer plus this, as a plain one costs its socket buffer. Also the batch encrypted
/// before a flush.
pub const OUT_LIMIT: usize = 64 * 1024;

/// The crypto provider (chosen by measurement: see ARCHITECTURE.md, "TLS").
pub fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The configuration TLS connections share, and the warnings to give about it.
pub type Built = (Arc<ServerConfig>, Vec<String>);

/// The shared server configuration, and the warnings to give about it (expired
/// certificates). `Ok(None)` when no TLS listener is configured. `previous` (the running
/// configuration, on reload) lends its session cache when the size did not change.
pub fn server_config(cfg: &Config, previous: Option<(&Config, &ServerConfig)>) -> Result<Option<Built>, String> {
    if cfg.tls.listen.is_empty() {
        return Ok(None);
    }
    let provider = provider();
    let now = SystemTime::now();
    let mut warnings = Vec::new();
    // Errors name the keys the files come from (`tls.cert`/`tls.key`, or the virtual host's).
    let mut load = |files, keys: &str| -> Result<_, String> {
        let l = certs::load(files, &provider, now).map_err(|e| format!("{keys}: {e}"))?;
        warnings.extend(l.warning);
        Ok(l.key)
    };
    let default = match &cfg.tls.default {
        Some(files) => Some(load(files, "tls.cert, tls.key")?),
        None if cfg!(feature = "acme") && cfg.acme.enabled() => None,
        None => return Err("tls.cert and tls.key: a default certificate is needed when tls.listen is set".into()),
    };
    let mut by_name = Vec::new();
    for v in &cfg.vhosts {
        if let Some(files) = &v.tls {
            by_name.push((v.host.clone(), load(files, &format!("vhost {} cert, key", v.host))?));
        }
    }
    // Without `[tls] cert`, the first ACME name's certificate serves clients naming no other.
    #[cfg(feature = "acme")]
    let default = {
        let acme = acme::certificates(&cfg.acme, &provider, now, &mut warnings);
        let first = acme.first().map(|(_, k)| Arc::clone(k));
        by_name.extend(acme);
        default.or(first)
    };
    #[cfg_attr(not(feature = "acme"), allow(unused_mut))]
    let mut resolver = sni::SniResolver::new(default, by_name);
    #[cfg(feature = "acme")]
    if resolver_answers_alpn(cfg) {
        resolver.acme_dir = Some(cfg.acme.state_dir.clone());
    }
    let mut sc = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    // `h2` first: a client that offers both gets HTTP/2 (RFC 7301: the server's order).
    sc.alpn_protocols = vec![b"http/1.1".to_vec()];
    if cfg!(feature = "http2") && cfg.http2.enabled {
        sc.alpn_protocols.insert(0, b"h2".to_vec());
    }
    // Last: chosen only by a client that offers nothing else (the CA's validation).
    #[cfg(feature = "acme")]
    if resolver_answers_alpn(cfg) {
        sc.alpn_protocols.push(acme::ACME_TLS_ALPN.to_vec());
    }
    let t = &cfg.tls;
    sc.session_storage = match previous {
        Some((old, sc)) if old.tls.session_cache == t.session_cache => Arc::clone(&sc.session_storage),
        _ if t.session_cache == 0 => Arc::new(rustls::server::NoServerSessionStorage {}),
        _ => rustls::server::ServerSessionMemoryCache::new(t.session_cache),
    };
    if t.session_tickets {
        sc.ticketer = Arc::new(ticketer(&cfg.tls)?);
    }
    Ok(Some((Arc::new(sc), warnings)))
}

/// Whether TLS-ALPN-01 is answered on the TLS listeners.
#[cfg(feature = "acme")]
fn resolver_answers_alpn(cfg: &Config) -> bool {
    cfg.acme.enabled() && cfg.acme.challenges.contains(&crate::config::AcmeChallenge::TlsAlpn01)
}

/// The ticketer `[tls]` asks for: from the key file, or the generated secret.
fn ticketer(t: &crate::config::TlsSettings) -> Result<tickets::Ticketer, String> {
    let Some(path) = &t.ticket_key_file else {
        return tickets::Ticketer::generated(t.ticket_lifetime);
    };
    let shown = path.display();
    let secret = crate::thttpd::privs::read_config_file(path).map_err(|e| format!("ticket key file {shown}: {e}"))?;
    if !(tickets::KEY_FILE_MIN..=tickets::KEY_FILE_MAX).contains(&secret.len()) {
        return Err(format!(
            "ticket key file {shown}: {} bytes; it must hold {} to {} bytes of secret (e.g. `openssl rand 48`)",
            secret.len(),
            tickets::KEY_FILE_MIN,
            tickets::KEY_FILE_MAX
        ));
    }
    Ok(tickets::Ticketer::from_secret(&secret, t.ticket_lifetime))
}

/// A TLS connection's state.
pub struct TlsState {
    pub conn: rustls::ServerConnection,
    /// The handshake is done (the header deadline then replaces the handshake deadline).
    pub established: bool,
    /// The handshake failed and was counted as such.
    pub failed: bool,
    /// Bytes came from the client (a ClientHello, or garbage): the connection is not empty,
    /// although no plaintext may have reached the read buffer (`Conn::received_nothing`).
    pub received: bool,
}

/// Counts a failed handshake by what went wrong (the status page's
/// `tls_handshake_failures`).
pub fn count_failure(c: &mut crate::status::TlsCounters, e: &rustls::Error) {
    use rustls::Error as E;
    let slot = match e {
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::DecryptError
        | E::PeerMisbehaved(_) => &mut c.bad_input,
        E::PeerIncompatible(_) | E::NoApplicationProtocol => &mut c.incompatible,
        E::AlertReceived(_) => &mut c.alert,
        _ => &mut c.other,
    };
    *slot += 1;
}

/// The protocol and cipher suite of an established connection, for the access log:
/// `TLSv1.3` / `TLSv1.2` (nginx's `$ssl_protocol`) and the IANA suite name.
pub fn names(conn: &rustls::ServerConnection) -> Option<crate::log::TlsInfo> {
    let version = match conn.protocol_version()? {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => return None,
    };
    Some(crate::log::TlsInfo { version, cipher: conn.negotiated_cipher_suite()?.suite().as_str()? })
}

impl TlsState {
    pub fn new(config: &Arc<ServerConfig>) -> Result<Box<TlsState>, rustls::Error> {
        let mut conn = rustls::ServerConnection::new(Arc::clone(config))?;
        conn.set_buffer_limit(Some(OUT_LIMIT));
        Ok(Box::new(TlsState { conn, established: false, failed: false, received: false }))
    }
}
