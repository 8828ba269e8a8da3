//! `Ctx`: everything a request may use, shared by every connection of one event loop —
//! the configuration in force, the document roots, the MIME table, the clock, the logs, the
//! file cache, the counters, the throttles, the buffer pools.
//!
//! What the loop derives from a [`Config`] is built in one place, [`Derived::new`], used at
//! start-up ([`Ctx::new`]) and on every reload ([`Ctx::reconfigure`]); both take it apart
//! field by field without `..`, so a new derived field that one of them forgets does not
//! compile. What outlives a reload (counters, pools, the throttles' counts, the
//! compression thread, the verifier's outcomes until cleared) is carried over explicitly.
//!
//! The protocols (`conn`) and the request semantics (`serve`) take `&mut Ctx`; the loop
//! (`server`) owns it. It has no socket and knows no connection.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::time::Instant;

use crate::access::auth::AuthCache;
use crate::access::referer::RefererPolicy;
use crate::access::throttle::Throttles;
use crate::config::Config;
use crate::fs::cache::{CacheConfig, FileCache};
use crate::fs::resolve::DocRoot;
use crate::http::date::Clock;
use crate::http::encoding::Encoding;
use crate::http::mime::MimeTypes;
use crate::http::request::Limits;
use crate::http::response::{fixed_fields, Rendered};
use crate::log::{AccessLog, ErrorLog};
use crate::route::Routes;
use crate::status::{self, ConnStates, Counters, Format, Snapshot};

/// Pooled buffers kept for reuse.
const POOL_MAX: usize = 256;
/// Body buffers larger than this are freed rather than pooled.
const POOL_BODY_MAX: usize = 256 * 1024;

/// A start-up failure, with the context `main` prints.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// State shared by all connections of the loop.
pub struct Ctx {
    pub cfg: Config,
    pub root: DocRoot,
    pub mime: MimeTypes,
    pub clock: Clock,
    pub access: AccessLog,
    pub errors: ErrorLog,
    pub limits: Limits,
    pub cache: FileCache,
    pub counters: Counters,
    /// Connections by state, refreshed by the once-a-second sweep.
    pub conn_states: ConnStates,
    /// The listeners defer accepts now (`defer_accept`: true, or "auto" switched on).
    pub(crate) deferring: bool,
    pub(crate) started: Instant,
    /// When the configuration in force was loaded (log time format).
    pub(crate) config_loaded: String,
    /// Open connections per client address, kept only when a per-IP limit is set.
    pub(crate) per_ip: HashMap<IpAddr, u32>,
    /// Virtual hosts of the TOML form: lowercase host name and its document root.
    pub vroots: Vec<(String, DocRoot)>,
    pub referer: Option<RefererPolicy>,
    pub auth: AuthCache,
    /// On-demand compression: the variants made and the thread that makes them.
    #[cfg(feature = "compression")]
    pub ondemand: crate::ondemand::OnDemand,
    /// Automatic certificates: the ACME thread's handle (`[acme]`).
    #[cfg(feature = "acme")]
    pub acme: Option<crate::acme::Acme>,
    pub throttles: Throttles,
    /// `Server` and `P3P`, rendered once.
    pub fixed_fields: Rendered,
    /// Scratch for content negotiation and sibling paths.
    pub encodings: Vec<Encoding>,
    pub sibling: String,
    /// Scratch for the normalized request path.
    pub path: String,
    pub(crate) rbufs: Vec<Box<[u8]>>,
    bodies: Vec<Vec<u8>>,
    /// Read and output buffers of HTTP/2 connections (`conn::h2`), given back when they
    /// are idle.
    #[cfg(feature = "http2")]
    h2_rbufs: Vec<Box<[u8]>>,
    #[cfg(feature = "http2")]
    h2_outs: Vec<Vec<u8>>,
    /// Site routing (`crate::route`); `routes.active` is false when none is configured.
    pub routes: Routes,
    /// The port of the first TLS listener as bound (`[tls] redirect_http` sends clients there).
    #[cfg(feature = "tls")]
    pub https_port: u16,
    /// The UDP port HTTP/3 is served on, when `[http3] alt_svc` advertises it, and the fixed
    /// fields of responses over TLS: `fixed_fields` and `Alt-Svc` (empty when not
    /// advertised).
    #[cfg(feature = "http3")]
    pub alt_svc_port: Option<u16>,
    #[cfg(feature = "http3")]
    fixed_fields_tls: Rendered,
}

impl Ctx {
    /// The fields every response carries (`Server`, `P3P`); over TLS also `Alt-Svc` when
    /// HTTP/3 is advertised.
    pub fn fixed(&self, tls: bool) -> &Rendered {
        #[cfg(feature = "http3")]
        if tls && !self.fixed_fields_tls.is_empty() {
            return &self.fixed_fields_tls;
        }
        let _ = tls;
        &self.fixed_fields
    }

    /// Renders the fixed fields of responses over TLS for `alt_svc_port` (after a change of
    /// it or of the fixed fields).
    #[cfg(feature = "http3")]
    pub fn render_alt_svc(&mut self) {
        self.fixed_fields_tls.clear();
        if let Some(port) = self.alt_svc_port.filter(|_| self.cfg.http3.enabled && self.cfg.http3.alt_svc) {
            self.fixed_fields_tls.extend(&self.fixed_fields);
            let value = format!("h3=\":{port}\"; ma=86400");
            self.fixed_fields_tls.push("Alt-Svc", value.as_bytes());
        }
    }

    /// A read buffer of `max_header_bytes`, from the pool if one is free.
    pub fn take_rbuf(&mut self) -> Box<[u8]> {
        self.rbufs.pop().unwrap_or_else(|| vec![0; self.cfg.max_header_bytes].into_boxed_slice())
    }

    pub fn put_rbuf(&mut self, b: Box<[u8]>) {
        if self.rbufs.len() < POOL_MAX && b.len() == self.cfg.max_header_bytes {
            self.rbufs.push(b);
        }
    }

    /// A read buffer of `len` bytes for an HTTP/2 connection, from its pool if one is free.
    #[cfg(feature = "http2")]
    pub fn take_h2_rbuf(&mut self, len: usize) -> Box<[u8]> {
        match self.h2_rbufs.pop() {
            Some(b) if b.len() == len => b,
            _ => vec![0; len].into_boxed_slice(),
        }
    }

    /// Keeps at most 64 (2 MiB): enough for the connections busy at once in one turn.
    #[cfg(feature = "http2")]
    pub fn put_h2_rbuf(&mut self, b: Box<[u8]>) {
        if self.h2_rbufs.len() < 64 {
            self.h2_rbufs.push(b);
        }
    }

    /// An output buffer for an HTTP/2 connection: empty, with the capacity it grew to.
    #[cfg(feature = "http2")]
    pub fn take_h2_out(&mut self) -> Vec<u8> {
        self.h2_outs.pop().unwrap_or_default()
    }

    /// Keeps at most 64, of at most 256 KiB each.
    #[cfg(feature = "http2")]
    pub fn put_h2_out(&mut self, mut b: Vec<u8>) {
        if self.h2_outs.len() < 64 && b.capacity() <= POOL_BODY_MAX {
            b.clear();
            self.h2_outs.push(b);
        }
    }

    pub fn take_body(&mut self) -> Vec<u8> {
        self.bodies.pop().unwrap_or_default()
    }

    pub fn put_body(&mut self, mut b: Vec<u8>) {
        // An empty `Vec` holds no memory: pooling it would only hand out an allocation later.
        if self.bodies.len() < POOL_MAX && b.capacity() != 0 && b.capacity() <= POOL_BODY_MAX {
            b.clear();
            self.bodies.push(b);
        }
    }

    /// Renders the status page.
    pub fn render_status(&self, format: Format, out: &mut Vec<u8>) {
        let file = self.cfg.source.as_ref().map_or("(built-in defaults)".to_string(), |p| p.display().to_string());
        let snap = Snapshot {
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            uptime_secs: self.clock.now.saturating_duration_since(self.started).as_secs(),
            started_unix: self
                .clock
                .unix_secs()
                .saturating_sub(self.clock.now.saturating_duration_since(self.started).as_secs()),
            conns: self.conn_states,
            counters: &self.counters,
            cache_hits: self.cache.stats.hits,
            cache_misses: self.cache.stats.misses,
            cache_entries: self.cache.len() as u64,
            cache_bytes: self.cache.mapped_bytes(),
            auth_verifications: self.auth.verifications,
            compression: self.compression_stats(),
            config_file: &file,
            config_loaded: &self.config_loaded,
            tls: !self.cfg.tls.listen.is_empty(),
            http3: self.cfg.http3.enabled,
            deferring: self.deferring,
            #[cfg(feature = "acme")]
            certificates: self.acme.as_ref().map(crate::acme::Acme::status).unwrap_or_default(),
            #[cfg(not(feature = "acme"))]
            certificates: Vec::new(),
        };
        status::render(&snap, format, out);
    }

    /// Counts a new connection from `ip` against `max_connections_per_ip` (at accept, or
    /// when a PROXY protocol header has named the client).
    pub fn admit_ip(&mut self, ip: IpAddr) -> bool {
        let limit = self.cfg.max_connections_per_ip;
        if limit == 0 {
            return true;
        }
        let n = self.per_ip.entry(ip).or_insert(0);
        if *n >= limit {
            return false;
        }
        *n += 1;
        true
    }

    fn compression_stats(&self) -> status::Compression {
        #[cfg(feature = "compression")]
        {
            let (z, s) = (&self.ondemand, self.ondemand.stats);
            status::Compression {
                compressed: s.compressed,
                bytes_saved: s.bytes_saved,
                queue_drops: s.queue_drops,
                entries: z.entries() as u64,
                bytes: z.bytes(),
            }
        }
        #[cfg(not(feature = "compression"))]
        status::Compression::default()
    }

    /// Writes a line to the error log.
    pub fn error(&mut self, msg: std::fmt::Arguments<'_>) {
        self.errors.log(self.clock.log_date(), msg);
    }
}

/// What the loop derives from a configuration and replaces whole on a reload: built only
/// here, for start-up and reload alike.
pub struct Derived {
    pub root: DocRoot,
    pub vroots: Vec<(String, DocRoot)>,
    pub access: AccessLog,
    pub errors: ErrorLog,
    pub routes: Routes,
    pub referer: Option<RefererPolicy>,
    pub mime: MimeTypes,
    pub limits: Limits,
    pub cache: FileCache,
    pub fixed_fields: Rendered,
    /// Lines for the error log once it is open: skipped redirects-file lines.
    pub warnings: Vec<String>,
}

impl Derived {
    /// Opens what `cfg` names (roots, logs, routing files) and builds the tables from it.
    pub fn new(cfg: &Config) -> Result<Derived, StartError> {
        let Resources { root, vroots, access, errors, routes, route_warnings } = open_resources(cfg)?;
        Ok(Derived {
            root,
            vroots,
            access,
            errors,
            routes,
            referer: referer_policy(cfg),
            mime: MimeTypes::new(&cfg.mime, &cfg.charset),
            limits: Limits {
                max_header_bytes: cfg.max_header_bytes,
                max_uri_bytes: cfg.max_uri_bytes,
                max_headers: cfg.max_headers,
            },
            cache: FileCache::new(cache_config(cfg)),
            fixed_fields: fixed_fields(&cfg.server_header, cfg.thttpd.p3p.as_deref()),
            warnings: route_warnings,
        })
    }
}

impl Ctx {
    /// The context of a loop starting with `cfg` and what was derived from it. `waker`
    /// wakes the loop when a background job (verification, compression) is done.
    pub fn new(cfg: Config, derived: Derived, waker: std::sync::Arc<mio::Waker>) -> Ctx {
        let Derived { root, vroots, access, errors, routes, referer, mime, limits, cache, fixed_fields, warnings } =
            derived;
        let mut cx = Ctx {
            root,
            mime,
            clock: Clock::new(),
            access,
            errors,
            limits,
            cache,
            counters: Counters::default(),
            conn_states: ConnStates::default(),
            deferring: cfg.defer_accept == crate::config::DeferAccept::Always,
            started: Instant::now(),
            config_loaded: String::new(),
            per_ip: HashMap::new(),
            vroots,
            referer,
            #[cfg(feature = "compression")]
            ondemand: crate::ondemand::OnDemand::new(&cfg.compression, waker.clone()),
            #[cfg(feature = "acme")]
            acme: crate::acme::Acme::new(&cfg.acme, waker.clone()),
            auth: AuthCache::new(waker),
            throttles: Throttles::new(cfg.throttles.clone()),
            encodings: Vec::new(),
            sibling: String::new(),
            fixed_fields,
            path: String::new(),
            rbufs: Vec::new(),
            bodies: Vec::new(),
            #[cfg(feature = "http2")]
            h2_rbufs: Vec::new(),
            #[cfg(feature = "http2")]
            h2_outs: Vec::new(),
            routes,
            #[cfg(feature = "tls")]
            https_port: 443,
            #[cfg(feature = "http3")]
            alt_svc_port: None,
            #[cfg(feature = "http3")]
            fixed_fields_tls: Rendered::default(),
            cfg,
        };
        cx.config_loaded = cx.clock.log_date().to_string();
        for w in &warnings {
            cx.error(format_args!("{w}"));
        }
        cx
    }

    /// Puts a reloaded configuration in force: what is derived from it is replaced whole;
    /// the throttles keep counting the rules that did not change, the compressor learns its
    /// new limits, remembered password outcomes are dropped. Returns whether the per-IP
    /// limit changed (the loop then recounts its connections).
    pub fn reconfigure(&mut self, new: Config, derived: Derived) -> bool {
        let Derived { root, vroots, access, errors, routes, referer, mime, limits, cache, fixed_fields, warnings } =
            derived;
        self.access.flush();
        self.root = root;
        self.vroots = vroots;
        self.referer = referer;
        self.auth.clear();
        // Unchanged rules carry on counting; changed ones start from the next request, and
        // transfers admitted before finish at their last rate, outside the new counts.
        self.throttles = std::mem::take(&mut self.throttles).reload(&new.throttles);
        self.access = access;
        self.errors = errors;
        self.routes = routes;
        for w in &warnings {
            self.error(format_args!("{w}"));
        }
        self.mime = mime;
        self.limits = limits;
        self.cache = cache;
        #[cfg(feature = "compression")]
        self.ondemand.reconfigure(&self.cfg.compression, &new.compression);
        // Pooled read buffers have the old `max_header_bytes`.
        self.rbufs.clear();
        self.fixed_fields = fixed_fields;
        let recount = new.max_connections_per_ip != self.cfg.max_connections_per_ip;
        self.cfg = new;
        #[cfg(feature = "http3")]
        self.render_alt_svc();
        self.config_loaded = self.clock.log_date().to_string();
        recount
    }
}

/// Opens the document root and the virtual hosts' roots, each error naming its key.
fn open_roots(cfg: &Config) -> Result<(DocRoot, Vec<(String, DocRoot)>), StartError> {
    let root = DocRoot::open(&cfg.root)
        .map_err(|e| StartError(format!("server.root: document root {}: {e}", cfg.root.display())))?;
    let mut vroots = Vec::with_capacity(cfg.vhosts.len());
    for v in &cfg.vhosts {
        let r = DocRoot::open(&v.root).map_err(|e| {
            StartError(format!("vhost.root: document root {} of virtual host {}: {e}", v.root.display(), v.host))
        })?;
        vroots.push((v.host.clone(), r));
    }
    Ok((root, vroots))
}

/// Opens the document root and logs named by the configuration (used by `--check-config`
/// too, so a config that would fail at start fails the check).
pub fn open_resources(cfg: &Config) -> Result<Resources, StartError> {
    let (root, vroots) = open_roots(cfg)?;
    let (routes, route_warnings) =
        Routes::for_roots(&cfg.routing, cfg.symlinks, cfg.dotfiles, &root, &vroots).map_err(StartError)?;
    check_auth_files(cfg)?;
    let access =
        AccessLog::open(&cfg.access_log, cfg.log_format, cfg.thttpd.enabled).map_err(|e| StartError(e.to_string()))?;
    let errors = ErrorLog::open(&cfg.error_log).map_err(|e| StartError(e.to_string()))?;
    Ok(Resources { root, vroots, access, errors, routes, route_warnings })
}

/// What `--check-config` checks: the roots open, and the log files could be opened for
/// appending — without creating them (a check run as root must not leave root-owned logs
/// that the server's user then cannot open). Returns the canonical root, and the warnings a
/// start would log (redirects-file lines skipped, password-file entries no one can use).
pub fn check_resources(cfg: &Config) -> Result<(std::path::PathBuf, Vec<String>), StartError> {
    let (root, vroots) = open_roots(cfg)?;
    let (_, mut warnings) =
        Routes::for_roots(&cfg.routing, cfg.symlinks, cfg.dotfiles, &root, &vroots).map_err(StartError)?;
    check_error_pages(cfg, &root)?;
    check_auth_files(cfg)?;
    for rule in &cfg.auth {
        let lines =
            crate::access::auth::check_file(&rule.htpasswd).map_err(|e| StartError(format!("auth.htpasswd {e}")))?;
        warnings.extend(lines.into_iter().map(|w| format!("auth.htpasswd {w}")));
    }
    for (what, target) in [("access log", &cfg.access_log), ("error log", &cfg.error_log)] {
        if let crate::log::LogTarget::File(p) = target {
            check_log_file(p).map_err(|e| StartError(format!("{what} {}: {e}", p.display())))?;
        }
    }
    Ok((root.path().to_path_buf(), warnings))
}

/// Every `[errors]` page must be a file under the document root (without it the built-in
/// page would be sent, silently), resolved as a request for it would be. Virtual hosts may
/// lack it (theirs falls back to the built-in page), and with thttpd's `-v` the page is per
/// host directory: neither is checked.
fn check_error_pages(cfg: &Config, root: &DocRoot) -> Result<(), StartError> {
    use crate::fs::resolve::{self, ResolveError, ResolveOptions, Resolved};
    if cfg.thttpd.vhost_dirs {
        return Ok(());
    }
    let opts = ResolveOptions { symlinks: cfg.symlinks, dotfiles: cfg.dotfiles, index: &[], site_depth: 0 };
    for (status, page) in &cfg.error_pages {
        let url = if page.starts_with('/') { page.clone() } else { format!("/{page}") };
        let why = match resolve::resolve(root, &url, &opts) {
            Ok(Resolved::File { .. }) => continue,
            Ok(_) => "a directory, not a file".to_string(),
            Err(ResolveError::NotFound) => "no such file".to_string(),
            Err(e) => format!("cannot be served (a request for it gets {})", e.status()),
        };
        return Err(StartError(format!(
            "errors.{status} = {page:?}: {why} under the document root {}",
            root.path().display()
        )));
    }
    Ok(())
}

/// Every `[[auth]]` password file must be there when the configuration is loaded (it is read
/// again whenever it changes; one that goes missing later denies access, with a log line).
fn check_auth_files(cfg: &Config) -> Result<(), StartError> {
    for rule in &cfg.auth {
        match std::fs::metadata(&rule.htpasswd) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(StartError(format!("auth.htpasswd {}: not a regular file", rule.htpasswd.display()))),
            Err(e) => return Err(StartError(format!("auth.htpasswd {}: {e}", rule.htpasswd.display()))),
        }
    }
    Ok(())
}

fn check_log_file(p: &std::path::Path) -> io::Result<()> {
    if p.symlink_metadata().is_ok() {
        // The same rules as the start: no symbolic link, a regular file with one link.
        return crate::thttpd::privs::open_existing(p, true).map(drop);
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let c = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What a configuration needs opened before it can serve.
pub struct Resources {
    pub root: DocRoot,
    pub vroots: Vec<(String, DocRoot)>,
    pub access: AccessLog,
    pub errors: ErrorLog,
    /// Compiled routing rules, and the redirects-file lines skipped with a warning.
    pub routes: Routes,
    pub route_warnings: Vec<String>,
}

fn referer_policy(cfg: &Config) -> Option<RefererPolicy> {
    cfg.thttpd
        .url_pattern
        .as_deref()
        .map(|p| RefererPolicy::new(p, cfg.thttpd.local_pattern.as_deref(), cfg.thttpd.no_empty_referrers))
}

fn cache_config(cfg: &Config) -> CacheConfig {
    CacheConfig {
        max_bytes: cfg.cache_max_bytes,
        max_entries: cfg.cache_max_entries,
        max_file: cfg.cache_max_file,
        revalidate: cfg.cache_revalidate,
        negative: cfg.cache_negative,
    }
}
