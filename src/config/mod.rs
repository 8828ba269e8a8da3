//! Configuration: the TOML file, the command line, and the typed [`Config`] they produce.
//!
//! Two layers, as in ripgrep: [`raw`] mirrors the file's text (every field optional and
//! carrying its byte span, unknown keys rejected), and [`Config`] holds typed, validated values
//! with every default in one `impl Default`. [`load`] overlays a file on the defaults; a value
//! out of range is an error naming the key and the line, never a silent clamp. The command
//! line ([`cli`]) then overrides individual fields.

pub mod cli;
mod raw;
mod words;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fs::resolve::{DotfilePolicy, SymlinkPolicy};
use crate::log::{LogFormat, LogTarget};

/// A virtual host of the TOML form: requests whose Host is `host` are served from `root`.
#[derive(Clone, Debug)]
pub struct VirtualHost {
    /// Lowercase host name, without port.
    pub host: String,
    pub root: PathBuf,
    /// This host's certificate chain and key for HTTPS (SNI picks it), if it has its own.
    pub tls: Option<CertFiles>,
}

/// A certificate chain (PEM, leaf first) and its private key (PEM: PKCS#8, SEC1 or RSA).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[tls]`: the HTTPS listeners and the default certificate (see `crate::tls`).
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// Addresses that speak TLS; empty: no HTTPS.
    pub listen: Vec<SocketAddr>,
    /// The certificate for clients without SNI, or naming no `[[vhost]]` with its own.
    pub default: Option<CertFiles>,
    /// A TLS handshake must be complete within this time of the connection's first bytes.
    pub handshake_timeout: Duration,
    /// Stateless resumption with session tickets (`tls::tickets`).
    pub session_tickets: bool,
    /// The longest a ticket is accepted; its keys rotate every half of it.
    pub ticket_lifetime: Duration,
    /// The ticket secret shared by several hosts; None: one made at start.
    pub ticket_key_file: Option<PathBuf>,
    /// Sessions kept for stateful resumption (TLS 1.2 session IDs, TLS 1.3 when tickets are
    /// off); 0: none.
    pub session_cache: usize,
    /// Answer every request on the plain listeners with a permanent redirect to HTTPS.
    pub redirect_http: bool,
}

impl Default for TlsSettings {
    fn default() -> TlsSettings {
        TlsSettings {
            listen: Vec::new(),
            default: None,
            handshake_timeout: Duration::from_secs(10),
            session_tickets: true,
            ticket_lifetime: Duration::from_secs(12 * 3600),
            ticket_key_file: None,
            session_cache: 256,
            redirect_http: false,
        }
    }
}

/// `[acme]`: certificates from an ACME CA (RFC 8555; see `crate::acme`). Parsed in every
/// build; `domains` set in a build without the `acme` feature is an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeSettings {
    /// Names to obtain certificates for (lowercase, no trailing dot); empty: ACME is off.
    pub domains: Vec<String>,
    /// The account's contact (`mailto:`); None: no contact, as RFC 8555 §7.3 allows.
    pub email: Option<String>,
    /// The CA's directory URL (https).
    pub directory: String,
    /// Extra PEM roots trusted for the directory's own HTTPS (a private CA).
    pub ca_roots: Option<PathBuf>,
    /// Account key, certificates, keys and challenge answers (0700; files 0600).
    pub state_dir: PathBuf,
    /// The challenge types to offer, in order of preference.
    pub challenges: Vec<AcmeChallenge>,
    /// External Account Binding (RFC 8555 §7.3.4): the key id and the decoded HMAC key.
    pub eab: Option<(String, Vec<u8>)>,
}

/// An ACME challenge type ferrohttpd answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `tls-alpn-01` (RFC 8737): a certificate on the TLS listeners for ALPN `acme-tls/1`.
    TlsAlpn01,
    /// `http-01` (RFC 8555 §8.3): `/.well-known/acme-challenge/TOKEN` on the plain listeners.
    Http01,
}

impl AcmeChallenge {
    pub fn name(self) -> &'static str {
        match self {
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
            AcmeChallenge::Http01 => "http-01",
        }
    }
}

/// Let's Encrypt's production directory, the default CA.
pub const ACME_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

impl Default for AcmeSettings {
    fn default() -> AcmeSettings {
        AcmeSettings {
            domains: Vec::new(),
            email: None,
            directory: ACME_DIRECTORY.into(),
            ca_roots: None,
            state_dir: PathBuf::from("/var/lib/ferrohttpd/acme"),
            challenges: vec![AcmeChallenge::TlsAlpn01, AcmeChallenge::Http01],
            eab: None,
        }
    }
}

impl AcmeSettings {
    /// Whether certificates are to be obtained at all.
    pub fn enabled(&self) -> bool {
        !self.domains.is_empty()
    }
}

/// `[http2]`: HTTP/2 (RFC 9113; see `crate::h2` and `conn/h2.rs`). Parsed in every build;
/// a build without the `http2` feature speaks HTTP/1.1 only and ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Http2Settings {
    /// Offer `h2` by ALPN on the TLS listeners, and take h2c with prior knowledge if `h2c`.
    pub enabled: bool,
    /// On the plain listeners, a connection that starts with the HTTP/2 preface speaks HTTP/2.
    pub h2c: bool,
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// The largest decoded header list (SETTINGS_MAX_HEADER_LIST_SIZE; name + value + 32
    /// per field); a request over it is answered 431.
    pub max_header_list_size: u32,
    /// The largest header block, HEADERS and CONTINUATION frames together, in bytes.
    pub max_header_block: u32,
    /// The HPACK dynamic table the client's encoder may use (SETTINGS_HEADER_TABLE_SIZE).
    pub header_table_size: u32,
    /// Our SETTINGS_INITIAL_WINDOW_SIZE and the connection window we open (request bodies).
    pub initial_window_size: u32,
    /// The client's preface and SETTINGS, and its acknowledgement of ours, must arrive
    /// within this time of the connection becoming HTTP/2.
    pub handshake_timeout: Duration,
    /// A connection with no open stream is closed after this long (control frames such as
    /// PING do not renew it).
    pub idle_timeout: Duration,
    /// Streams a client may reset before their response is complete (Rapid Reset); each
    /// completed response earns one back.
    pub reset_budget: u32,
    /// Frames that do no work (PING, SETTINGS, PRIORITY, empty DATA and header fragments,
    /// frames answered with RST_STREAM); each completed response earns one back.
    pub flood_budget: u32,
}

impl Default for Http2Settings {
    fn default() -> Http2Settings {
        Http2Settings {
            enabled: true,
            h2c: true,
            max_concurrent_streams: 100,
            max_header_list_size: 16 * 1024,
            max_header_block: 64 * 1024,
            header_table_size: 4096,
            initial_window_size: 65_535,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            reset_budget: 200,
            flood_budget: 1000,
        }
    }
}

/// `[http3]`: HTTP/3 over QUIC (RFC 9114, RFC 9000; see `crate::quic`), on UDP beside the
/// TLS listeners, with their certificates. Parsed in every build; enabling it in a build
/// without the `http3` feature is an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Http3Settings {
    /// Serve HTTP/3 (needs `[tls] listen`: the certificates are the TLS listeners').
    pub enabled: bool,
    /// The UDP addresses; empty: each `[tls] listen` address, on the port its TCP listener
    /// got.
    pub listen: Vec<SocketAddr>,
    /// Request streams (bidirectional) a client may have open at once.
    pub max_streams: u32,
    /// A connection with nothing received for this long is closed (QUIC's idle timeout,
    /// the lower of ours and the client's).
    pub idle_timeout: Duration,
    /// Responses over TCP with TLS carry `Alt-Svc: h3=":PORT"; ma=86400`.
    pub alt_svc: bool,
    /// Address validation of new connections with a Retry round trip.
    pub retry: Http3Retry,
    /// With `retry = "under_load"`: the handshakes in progress from which new connections
    /// from addresses not yet validated get a Retry.
    pub retry_threshold: u32,
    /// QUIC connections one client address may have open (per worker); 0: no limit.
    pub max_connections_per_ip: u32,
    /// Requests a client may cancel before their response is complete (Rapid Reset), as
    /// `[http2] reset_budget`; each completed response earns one back.
    pub reset_budget: u32,
    /// Frames and stream events that do no work, as `[http2] flood_budget`; each completed
    /// response earns one back.
    pub flood_budget: u32,
}

/// `[http3] retry`: when a new connection's address is validated with a Retry packet (RFC
/// 9000 §8.1.2) before any handshake work is done for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http3Retry {
    /// Never (nginx's `quic_retry off`, its default): until the handshake validates the
    /// address, the server sends at most 3 times what it received (§8.1).
    Never,
    /// Every new connection: one round trip more, no state kept for unvalidated addresses.
    Always,
    /// Only while `retry_threshold` or more handshakes are in progress (the default; as
    /// quic-go, Caddy's QUIC, does): below it, as `Never`; above it, as `Always`, so that a
    /// flood of Initials from forged addresses costs no state and no handshake work.
    UnderLoad,
}

impl Default for Http3Settings {
    fn default() -> Http3Settings {
        Http3Settings {
            enabled: false,
            listen: Vec::new(),
            max_streams: 100,
            idle_timeout: Duration::from_secs(30),
            alt_svc: true,
            retry: Http3Retry::UnderLoad,
            retry_threshold: 128,
            max_connections_per_ip: 64,
            reset_budget: 200,
            flood_budget: 1000,
        }
    }
}

/// thttpd compatibility settings (see `THTTPD.md`); all off in a plain ferrohttpd setup.
#[derive(Clone, Debug, Default)]
pub struct ThttpdCompat {
    /// Behave as thttpd where it differs: serve only world-readable files, refuse
    /// world-executable ones with 403, list directories without an index only if they are
    /// world-readable, redirect with 302, thttpd's signal meanings.
    pub enabled: bool,
    /// `-v`: the Host header (lowercased, port removed) selects a subdirectory of the root.
    pub vhost_dirs: bool,
    /// Check `.htpasswd` files (Basic authentication).
    pub htpasswd: bool,
    /// `-g`: the root's `.htpasswd` protects everything.
    pub global_passwd: bool,
    /// `urlpat` / `localpat` / `noemptyreferrers`.
    pub url_pattern: Option<String>,
    pub local_pattern: Option<String>,
    pub no_empty_referrers: bool,
    /// `-r`: chroot into the root after binding.
    pub chroot: bool,
    /// `-dd`: the document root inside the chroot.
    pub data_dir: Option<PathBuf>,
    /// `-u`: the user to switch to after binding, when started as root.
    pub user: Option<String>,
    /// Run in the background (thttpd without `-D`).
    pub daemonize: bool,
    /// `-P`: a P3P header value.
    pub p3p: Option<String>,
}

/// On-demand compression: compressible files without a fresh precompressed sibling are
/// compressed once per version on a background thread (`crate::ondemand`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressionSettings {
    /// On by default where the feature is built (off in the thttpd personality without a
    /// TOML file: thttpd never compresses).
    pub on_demand: bool,
    /// The codings made on demand, in the server's order of preference.
    pub encodings: Vec<crate::http::encoding::Encoding>,
    /// flate2 level, 1..=9.
    pub gzip_level: u32,
    /// Brotli quality, 0..=11.
    pub br_level: u32,
    /// zstd level, 1..=19.
    pub zstd_level: i32,
    /// Files smaller than this are sent as they are.
    pub min_size: u64,
    /// Files larger than this are never compressed on demand.
    pub max_size: u64,
    /// The variants cache: bytes of compressed bodies kept at most.
    pub cache_bytes: u64,
    /// The variants cache: files with variants (or a verdict) kept at most.
    pub cache_entries: usize,
}

impl Default for CompressionSettings {
    fn default() -> CompressionSettings {
        use crate::http::encoding::Encoding;
        CompressionSettings {
            on_demand: cfg!(feature = "compression"),
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            gzip_level: 6,
            br_level: 5,
            zstd_level: 3,
            min_size: 1024,
            max_size: 16 * 1024 * 1024,
            cache_bytes: 16 * 1024 * 1024,
            cache_entries: 1024,
        }
    }
}

/// The typed, validated configuration the server runs with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it was loaded from, if any (for messages and the status page).
    pub source: Option<PathBuf>,
    pub listen: Vec<SocketAddr>,
    pub root: PathBuf,
    pub workers: u32,
    pub max_connections: usize,
    /// Connections one client address may hold open at once (0: no limit).
    pub max_connections_per_ip: u32,
    /// Proxies whose `Forwarded`/`X-Forwarded-For` give the client address for the access
    /// log and the status page's ACL (`http::forwarded`).
    pub trusted_proxies: Vec<crate::http::net::Net>,
    /// Listen addresses (of `listen` or `[tls] listen`) whose connections start with a PROXY
    /// protocol header (`crate::proxy`), which then gives the client address.
    pub proxy_protocol: Vec<SocketAddr>,
    pub backlog: u32,
    /// When the listening sockets carry TCP_DEFER_ACCEPT: see [`DeferAccept`].
    pub defer_accept: DeferAccept,
    pub pid_file: Option<PathBuf>,
    pub sendfile: bool,
    /// With `sendfile`: bodies of at least `conn::h1::LOOPBACK_COPY_MIN` to a loopback peer are
    /// copied instead (the staged path of `sendfile = false`): on loopback the client's reads
    /// of spliced page-cache pages cost it more than the copy costs the server.
    pub loopback_copy: bool,
    pub shutdown_timeout: Duration,

    pub keepalive_requests: u32,
    pub keepalive_timeout: Duration,
    pub header_timeout: Duration,
    pub send_timeout: Duration,
    /// A response older than `send_timeout` whose average rate is below this (bytes/s) is
    /// abandoned; 0 turns the check off.
    pub min_send_rate: u64,
    pub max_header_bytes: usize,
    pub max_uri_bytes: usize,
    pub max_headers: usize,
    pub max_body_discard: u64,
    pub index: Vec<String>,
    pub dotfiles: DotfilePolicy,
    pub symlinks: SymlinkPolicy,
    pub charset: String,
    pub server_header: String,

    pub access_log: LogTarget,
    pub log_format: LogFormat,
    pub error_log: LogTarget,

    /// Extension (lowercase, no dot) -> Content-Type, overriding the built-in table.
    pub mime: BTreeMap<String, String>,

    pub cache_max_bytes: u64,
    pub cache_max_entries: usize,
    pub cache_max_file: u64,
    pub cache_revalidate: Duration,
    pub cache_negative: Duration,
    /// URL paths of directories whose files are loaded at start ("/", "/assets/").
    pub cache_preload: Vec<String>,

    /// `Cache-Control: max-age=N` and a matching `Expires` on file responses (thttpd's `-M`).
    pub max_age: Option<u32>,
    /// Ranges per request before the Range header is ignored (200).
    pub max_ranges: usize,
    pub header_rules: Vec<crate::route::HeaderRule>,
    /// Precompressed siblings to look for, in the server's order of preference.
    pub precompressed: Vec<crate::http::encoding::Encoding>,
    /// Serve `x.jpg.avif` / `x.jpg.webp` for a JPEG, PNG or GIF `x.jpg` to clients whose
    /// `Accept` names the format (`[images] negotiate`).
    pub image_negotiate: bool,
    /// On-demand compression (`[compression]`, feature `compression`).
    pub compression: CompressionSettings,
    /// Custom error pages: status -> URL path of the page under the root.
    pub error_pages: BTreeMap<u16, String>,
    /// Directory listings for directories without an index file.
    pub listing: bool,
    pub listing_max_entries: usize,
    /// Most bytes of one rendered listing (never more than `cache_max_bytes` is used).
    pub listing_max_bytes: u64,
    pub vhosts: Vec<VirtualHost>,
    /// Throttle rules (thttpd's `-t` file or `[[throttle]]`).
    pub throttles: Vec<crate::access::throttle::ThrottleRule>,
    /// Per-connection rate (bytes/s, 0 = none) after the first `limit_rate_after` bytes.
    pub limit_rate: u64,
    pub limit_rate_after: u64,
    pub thttpd: ThttpdCompat,

    /// The status endpoint's URL path, when enabled.
    pub status_path: Option<String>,
    pub status_allow: Vec<crate::http::net::Net>,

    /// `[routing]`, `[[redirect]]` and `[[rewrite]]`: see `crate::route`.
    pub routing: crate::route::Settings,
    /// The health endpoint's URL path, when enabled: `200 OK` to anyone, no file touched.
    pub health_path: Option<String>,
    /// Whether health checks go to the access log.
    pub health_log: bool,
    /// HTTPS (`[tls]`).
    pub tls: TlsSettings,
    /// HTTP/2 (`[http2]`).
    pub http2: Http2Settings,
    /// HTTP/3 (`[http3]`).
    pub http3: Http3Settings,
    /// Automatic certificates (`[acme]`).
    pub acme: AcmeSettings,
    /// `[[auth]]`: path prefixes protected by Basic authentication (`crate::access::auth`).
    pub auth: Vec<crate::access::auth::AuthRule>,
}

/// The document root without a configuration or a directory on the command line: `www`
/// in the working directory.
pub const DEFAULT_ROOT: &str = "www";

impl Default for Config {
    fn default() -> Config {
        Config {
            source: None,
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 8080))],
            root: PathBuf::from(DEFAULT_ROOT),
            workers: 1,
            max_connections: 10_000,
            max_connections_per_ip: 0,
            trusted_proxies: Vec::new(),
            proxy_protocol: Vec::new(),
            backlog: 1024,
            defer_accept: DeferAccept::Auto,
            pid_file: None,
            sendfile: true,
            loopback_copy: true,
            shutdown_timeout: Duration::from_secs(10),
            keepalive_requests: 1000,
            keepalive_timeout: Duration::from_secs(15),
            header_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(30),
            min_send_rate: 512,
            max_header_bytes: 16 * 1024,
            max_uri_bytes: 8 * 1024,
            max_headers: 100,
            max_body_discard: 1024 * 1024,
            index: vec!["index.html".into(), "index.htm".into()],
            dotfiles: DotfilePolicy::Deny,
            symlinks: SymlinkPolicy::WithinRoot,
            charset: "utf-8".into(),
            server_header: "ferrohttpd".into(),
            access_log: LogTarget::Std,
            log_format: LogFormat::Combined,
            error_log: LogTarget::Std,
            mime: BTreeMap::new(),
            cache_max_bytes: 64 * 1024 * 1024,
            cache_max_entries: 4096,
            cache_max_file: 64 * 1024,
            cache_revalidate: Duration::from_secs(1),
            cache_negative: Duration::from_secs(1),
            cache_preload: Vec::new(),
            max_age: None,
            max_ranges: 32,
            header_rules: Vec::new(),
            precompressed: vec![
                crate::http::encoding::Encoding::Br,
                crate::http::encoding::Encoding::Zstd,
                crate::http::encoding::Encoding::Gzip,
            ],
            image_negotiate: true,
            compression: CompressionSettings::default(),
            error_pages: BTreeMap::new(),
            listing: false,
            listing_max_entries: 10_000,
            listing_max_bytes: 4 * 1024 * 1024,
            vhosts: Vec::new(),
            throttles: Vec::new(),
            limit_rate: 0,
            limit_rate_after: 0,
            thttpd: ThttpdCompat::default(),
            status_path: None,
            status_allow: vec![
                crate::http::net::Net::parse("127.0.0.0/8").unwrap_or_else(|| unreachable!()),
                crate::http::net::Net::parse("::1").unwrap_or_else(|| unreachable!()),
            ],
            routing: crate::route::Settings::default(),
            health_path: None,
            health_log: true,
            tls: TlsSettings::default(),
            http2: Http2Settings::default(),
            http3: Http3Settings::default(),
            acme: AcmeSettings::default(),
            auth: Vec::new(),
        }
    }
}

/// A configuration error, printed once by `main` before exiting with status 1.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// `[server] defer_accept`: whether the listening sockets carry TCP_DEFER_ACCEPT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferAccept {
    /// Off until silent connections (accepted, then ending or waiting with nothing sent)
    /// show up, on while they do, off again after a quiet period (`server::Server`'s
    /// deferral state). Without it, the server's wake-up for a new connection overlaps the
    /// client's write of its request, which is what one client at a time waits for.
    Auto,
    /// Always on (`true`).
    Always,
    /// Never (`false`).
    Never,
}

impl Config {
    /// The TCP_DEFER_ACCEPT time a listening socket gets while accepts are deferred. The
    /// kernel then hands a connection to `accept` only once its first bytes have arrived, so
    /// the request is read at once, without waking up for the bare handshake; a connection
    /// that sends nothing is held (and the handshake answer retried) for about
    /// `header_timeout`, as nginx's `deferred` does, without costing a descriptor.
    pub fn defer_accept_secs(&self) -> u32 {
        let t = self.header_timeout;
        let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
        u32::try_from(secs.max(1)).unwrap_or(u32::MAX)
    }

    /// Reads and validates a TOML file, on top of the defaults. Relative paths in it are
    /// taken relative to the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::load_base(path)?;
        cfg.check().map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))?;
        Ok(cfg)
    }

    /// [`Config::load`] without the cross-field checks, for a base the command line
    /// completes (`--domain` may supply what `[tls] listen` needs) and then checks.
    pub(crate) fn load_base(path: &Path) -> Result<Config, ConfigError> {
        let bytes = crate::thttpd::privs::read_config_file(path)
            .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ConfigError(format!("cannot read config file {}: not valid UTF-8", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut cfg = Config::default();
        raw::apply(&text, base, &mut cfg).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))?;
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Parses TOML text; `base` is the directory relative paths are resolved against.
    pub fn from_toml(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        raw::apply(text, base, &mut cfg)?;
        cfg.check()?;
        Ok(cfg)
    }

    /// Cross-field checks, run after the file and again after command-line overrides.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Err(ConfigError("server.listen: at least one address is needed".into()));
        }
        if self.tls.redirect_http && self.tls.listen.is_empty() {
            return Err(ConfigError("tls.redirect_http: needs tls.listen (there is no HTTPS to redirect to)".into()));
        }
        if !self.tls.listen.is_empty() {
            if !cfg!(feature = "tls") {
                return Err(ConfigError(
                    "tls.listen: this ferrohttpd was built without TLS (cargo feature `tls`)".into(),
                ));
            }
            if self.tls.default.is_none() && !self.acme.enabled() {
                return Err(ConfigError(
                    "tls.cert and tls.key: a default certificate is needed when tls.listen is set \
                     (or [acme] domains to obtain one)"
                        .into(),
                ));
            }
        }
        if self.acme.enabled() {
            if !cfg!(feature = "acme") {
                return Err(ConfigError(
                    "acme.domains: this ferrohttpd was built without ACME (cargo feature `acme`)".into(),
                ));
            }
            if self.tls.listen.is_empty() {
                return Err(ConfigError("acme.domains: needs tls.listen (the certificates are served there)".into()));
            }
            if self.thttpd.chroot {
                return Err(ConfigError("acme.domains: cannot be combined with chroot (-r)".into()));
            }
        }
        if self.max_uri_bytes >= self.max_header_bytes {
            return Err(ConfigError(format!(
                "http.max_uri_bytes ({}) must be smaller than http.max_header_bytes ({})",
                self.max_uri_bytes, self.max_header_bytes
            )));
        }
        Ok(())
    }
}
