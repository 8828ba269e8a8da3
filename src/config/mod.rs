//! Configuration: the TOML file, the command line, and the typed [`Config`] they produce.
//!
//! Two layers, as in ripgrep: [`raw`] mirrors the file's text (every field optional and
//! carrying its byte span, unknown keys rejected), and [`Config`] holds typed, validated values
//! with every default in one `impl Default`. [`load`] overlays a file on the defaults; a value
//! out of range is an error naming the key and the line, never a silent clamp. The command
//! line ([`cli`]) then overrides individual fields.

pub mod cli;
mod raw;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fs::resolve::{DotfilePolicy, SymlinkPolicy};

/// Where the access or error log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output (access log) or standard error (error log): `"-"`.
    Std,
    /// No log at all: `"off"` (or thttpd's `/dev/null`).
    Off,
    /// Append to this file.
    File(PathBuf),
}

/// The access log's line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Apache/nginx Combined Log Format.
    Combined,
    /// Common Log Format (Combined without referrer and user agent).
    Common,
    /// One JSON object per line.
    Json,
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
    pub backlog: u32,
    pub pid_file: Option<PathBuf>,
    pub sendfile: bool,
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

    /// The status endpoint's URL path, when enabled.
    pub status_path: Option<String>,
    pub status_allow: Vec<crate::status::Net>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            source: None,
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 8080))],
            root: PathBuf::from("www"),
            workers: 1,
            max_connections: 10_000,
            max_connections_per_ip: 0,
            backlog: 1024,
            pid_file: None,
            sendfile: true,
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
            cache_max_file: 1024 * 1024,
            cache_revalidate: Duration::from_secs(1),
            cache_negative: Duration::from_secs(1),
            cache_preload: Vec::new(),
            status_path: None,
            status_allow: vec![
                crate::status::Net::parse("127.0.0.0/8").unwrap_or_else(|| unreachable!()),
                crate::status::Net::parse("::1").unwrap_or_else(|| unreachable!()),
            ],
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

impl Config {
    /// Reads and validates a TOML file, on top of the defaults. Relative paths in it are
    /// taken relative to the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut cfg =
            Config::from_toml(&text, base).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))?;
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
        if self.max_uri_bytes >= self.max_header_bytes {
            return Err(ConfigError(format!(
                "http.max_uri_bytes ({}) must be smaller than http.max_header_bytes ({})",
                self.max_uri_bytes, self.max_header_bytes
            )));
        }
        Ok(())
    }
}
