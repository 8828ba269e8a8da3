//! The TOML file as written: every key optional and spanned, unknown keys rejected.
//! [`apply`] validates each present value and stores it into the typed [`Config`].

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Config, ConfigError, DeferAccept};
use crate::fs::resolve::{DotfilePolicy, SymlinkPolicy};
use crate::http::encoding::Encoding;
use crate::http::net::Net;
use crate::log::{LogFormat, LogTarget};

type S<T> = Option<Spanned<T>>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    server: Option<RawServer>,
    http: Option<RawHttp>,
    log: Option<RawLog>,
    cache: Option<RawCache>,
    status: Option<RawStatus>,
    compression: Option<RawCompression>,
    listing: Option<RawListing>,
    images: Option<RawImages>,
    errors: Option<BTreeMap<String, Spanned<String>>>,
    headers: Option<Vec<RawHeaderRule>>,
    vhost: Option<Vec<RawVhost>>,
    throttle: Option<Vec<RawThrottle>>,
    mime: Option<BTreeMap<String, Spanned<String>>>,
    routing: Option<RawRouting>,
    health: Option<RawHealth>,
    redirect: Option<Vec<RawRule>>,
    rewrite: Option<Vec<RawRule>>,
    tls: Option<RawTls>,
    acme: Option<RawAcme>,
    http2: Option<RawHttp2>,
    http3: Option<RawHttp3>,
    auth: Option<Vec<RawAuth>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp3 {
    enabled: S<bool>,
    listen: S<Vec<String>>,
    max_streams: S<i64>,
    idle_timeout: S<RawDuration>,
    alt_svc: S<bool>,
    retry: S<String>,
    retry_threshold: S<i64>,
    max_connections_per_ip: S<i64>,
    reset_budget: S<i64>,
    flood_budget: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp2 {
    enabled: S<bool>,
    h2c: S<bool>,
    max_concurrent_streams: S<i64>,
    max_header_list_size: S<i64>,
    max_header_block: S<i64>,
    header_table_size: S<i64>,
    initial_window_size: S<i64>,
    handshake_timeout: S<RawDuration>,
    idle_timeout: S<RawDuration>,
    reset_budget: S<i64>,
    flood_budget: S<i64>,
}

/// An `[[auth]]` rule.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    path: Spanned<String>,
    htpasswd: Spanned<String>,
    realm: S<String>,
    host: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    path: S<String>,
    log: S<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    redirects_file: S<String>,
    headers_file: S<String>,
    clean_urls: S<bool>,
    clean_url_extensions: S<Vec<String>>,
    clean_url_redirect: S<bool>,
    trailing_slash: S<crate::route::TrailingSlash>,
    fallback: S<String>,
    fallback_status: S<i64>,
    hidden: S<Vec<String>>,
}

/// A `[[redirect]]` or `[[rewrite]]` (the latter takes no status and no query).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    from: Spanned<String>,
    to: Spanned<String>,
    status: S<i64>,
    query: S<crate::route::QueryMode>,
    host: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    listen: S<Vec<String>>,
    cert: S<String>,
    key: S<String>,
    handshake_timeout: S<RawDuration>,
    session_tickets: S<bool>,
    ticket_lifetime: S<RawDuration>,
    ticket_key_file: S<String>,
    session_cache: S<i64>,
    redirect_http: S<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAcme {
    domains: S<Vec<String>>,
    email: S<String>,
    directory: S<String>,
    ca_roots: S<String>,
    state_dir: S<String>,
    challenges: S<Vec<String>>,
    eab_kid: S<String>,
    eab_hmac_key: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: S<Vec<String>>,
    root: S<String>,
    workers: S<RawWorkers>,
    max_connections: S<i64>,
    max_connections_per_ip: S<i64>,
    trusted_proxies: S<Vec<String>>,
    proxy_protocol: S<Vec<String>>,
    backlog: S<i64>,
    defer_accept: S<RawDeferAccept>,
    pid_file: S<String>,
    sendfile: S<bool>,
    loopback_copy: S<bool>,
    shutdown_timeout: S<RawDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    keepalive_requests: S<i64>,
    keepalive_timeout: S<RawDuration>,
    header_timeout: S<RawDuration>,
    send_timeout: S<RawDuration>,
    min_send_rate: S<i64>,
    max_header_bytes: S<i64>,
    max_uri_bytes: S<i64>,
    max_headers: S<i64>,
    max_body_discard: S<i64>,
    index: S<Vec<String>>,
    dotfiles: S<DotfilePolicy>,
    symlinks: S<SymlinkPolicy>,
    charset: S<String>,
    server_header: S<String>,
    max_age: S<i64>,
    max_ranges: S<i64>,
    limit_rate: S<RawRate>,
    limit_rate_after: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompression {
    precompressed: S<Vec<String>>,
    on_demand: S<bool>,
    encodings: S<Vec<String>>,
    gzip_level: S<i64>,
    br_level: S<i64>,
    zstd_level: S<i64>,
    min_size: S<i64>,
    max_size: S<i64>,
    cache_bytes: S<i64>,
    cache_entries: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImages {
    negotiate: S<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListing {
    enabled: S<bool>,
    max_entries: S<i64>,
    max_bytes: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderRule {
    #[serde(rename = "match")]
    pattern: S<String>,
    mime: S<String>,
    cache_control: S<String>,
    headers: Option<BTreeMap<String, Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVhost {
    host: Spanned<String>,
    root: Spanned<String>,
    cert: S<String>,
    key: S<String>,
    acme: S<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThrottle {
    pattern: Spanned<String>,
    max: Spanned<RawRate>,
    min: S<RawRate>,
}

/// A byte rate: bytes per second, or a string such as "200KiB/s" or "1MB/s".
#[derive(Deserialize)]
#[serde(untagged)]
enum RawRate {
    Bytes(i64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    max_bytes: S<i64>,
    max_entries: S<i64>,
    max_file: S<i64>,
    revalidate: S<RawDuration>,
    negative: S<RawDuration>,
    preload: S<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStatus {
    enabled: S<bool>,
    path: S<String>,
    allow: S<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    access: S<String>,
    format: S<LogFormat>,
    error: S<String>,
}

/// `workers = N` or `workers = "auto"` (one per online CPU).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawWorkers {
    Count(i64),
    Word(String),
}

/// `defer_accept = true`, `false` or `"auto"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDeferAccept {
    Flag(bool),
    Word(String),
}

/// A duration: whole seconds, or a string with a unit ("500ms", "10s", "2m", "1h").
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Secs(i64),
    Text(String),
}

/// The largest `[cache] max_file`: files up to it are memory-mapped whole, so on a 32-bit
/// target (2–3 GiB of address space, shared with everything else) one mapping must leave
/// room; larger files go by `sendfile` with 64-bit offsets on every target.
const MAX_MAPPED_FILE: i64 = if usize::BITS >= 64 { 1 << 40 } else { 1 << 30 };

/// Turns a byte offset into a 1-based line number.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The dotted name of the key whose line holds `offset` ("http.dotfiles"), for messages
/// about values serde rejected by type.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[start..end];
    let key = line.split_once('=')?.0.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('[') || key.starts_with('#') {
        return None;
    }
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .and_then(|l| l.trim_start_matches('[').split(']').next())
        .map(str::trim);
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

struct Ctx<'a> {
    text: &'a str,
    base: &'a Path,
}

impl Ctx<'_> {
    fn err<T>(&self, key: &str, span: std::ops::Range<usize>, msg: impl std::fmt::Display) -> Result<T, ConfigError> {
        Err(ConfigError(format!("line {}: {key}: {msg}", line_of(self.text, span.start))))
    }

    fn int<T: TryFrom<i64>>(&self, key: &str, v: &Spanned<i64>, min: i64, max: i64) -> Result<T, ConfigError> {
        let n = *v.get_ref();
        if n < min || n > max {
            return self.err(key, v.span(), format_args!("{n} is out of range ({min} to {max})"));
        }
        match T::try_from(n) {
            Ok(t) => Ok(t),
            Err(_) => self.err(key, v.span(), format_args!("{n} is out of range")),
        }
    }

    fn duration(&self, key: &str, v: &Spanned<RawDuration>, max_secs: u64) -> Result<Duration, ConfigError> {
        let d = match v.get_ref() {
            RawDuration::Secs(n) if *n >= 0 => Some(Duration::from_secs(*n as u64)),
            RawDuration::Secs(_) => None,
            RawDuration::Text(s) => parse_duration(s),
        };
        match d {
            None => {
                self.err(key, v.span(), "expected seconds or a duration such as \"500ms\", \"10s\", \"2m\", \"1h\"")
            }
            Some(d) if d.is_zero() || d > Duration::from_secs(max_secs) => {
                self.err(key, v.span(), format_args!("must be more than 0 and at most {max_secs} seconds"))
            }
            Some(d) => Ok(d),
        }
    }

    /// Like [`Ctx::duration`], but 0 is allowed (meaning "every time").
    fn duration_or_zero(&self, key: &str, v: &Spanned<RawDuration>, max_secs: u64) -> Result<Duration, ConfigError> {
        match v.get_ref() {
            RawDuration::Secs(0) => Ok(Duration::ZERO),
            RawDuration::Text(t) if parse_duration(t) == Some(Duration::ZERO) => Ok(Duration::ZERO),
            _ => self.duration(key, v, max_secs),
        }
    }

    fn rate(&self, key: &str, v: &Spanned<RawRate>) -> Result<u64, ConfigError> {
        let r = match v.get_ref() {
            RawRate::Bytes(n) => u64::try_from(*n).ok(),
            RawRate::Text(t) => crate::access::throttle::parse_rate(t),
        };
        match r {
            Some(r) => Ok(r),
            None => self.err(key, v.span(), "expected bytes per second, such as 50000 or \"200KiB/s\""),
        }
    }

    fn header_value(&self, key: &str, v: &Spanned<String>) -> Result<String, ConfigError> {
        if !crate::http::is_field_value(v.get_ref().as_bytes()) || v.get_ref().is_empty() {
            return self.err(key, v.span(), "must be a non-empty header value of printable characters");
        }
        Ok(v.get_ref().clone())
    }

    /// A URL path of a file under the root (`"index.html"` or `"/index.html"`), normalized.
    fn file_path(&self, key: &str, v: &Spanned<String>) -> Result<String, ConfigError> {
        let raw = v.get_ref();
        let url = if raw.starts_with('/') { raw.clone() } else { format!("/{raw}") };
        let mut norm = String::new();
        if crate::fs::resolve::normalize(url.as_bytes(), &mut norm).is_err() || norm.ends_with('/') {
            return self.err(key, v.span(), "must be the path of a file under the document root");
        }
        Ok(norm)
    }

    /// Compiles a `[[redirect]]` or `[[rewrite]]` rule; `vhosts` are the ones already read.
    fn rule(
        &self,
        table: &str,
        r: RawRule,
        vhosts: &[crate::config::VirtualHost],
    ) -> Result<crate::route::ScopedRule, ConfigError> {
        use crate::route::pattern::{Pattern, Template};
        use crate::route::{Kind, QueryMode, Rule};
        let redirect = table == "redirect";
        let from = Pattern::new(r.from.get_ref()).or_else(|e| self.err(&format!("{table}.from"), r.from.span(), e))?;
        let to = Template::new(r.to.get_ref(), &from, redirect)
            .or_else(|e| self.err(&format!("{table}.to"), r.to.span(), e))?;
        let kind = match (&r.status, redirect) {
            (None, true) => Kind::Redirect(301),
            (Some(v), true) => match *v.get_ref() {
                n @ (301 | 302 | 303 | 307 | 308) => Kind::Redirect(n as u16),
                _ => return self.err("redirect.status", v.span(), "must be 301, 302, 303, 307 or 308"),
            },
            (None, false) => Kind::Rewrite(200),
            (Some(v), false) => return self.err("rewrite.status", v.span(), "a rewrite has no status"),
        };
        if !redirect {
            if let Some(v) = &r.query {
                return self.err("rewrite.query", v.span(), "a rewrite keeps the request's query");
            }
            if to.has_query {
                return self.err("rewrite.to", r.to.span(), "a rewrite's target cannot have a query");
            }
        }
        let host = match r.host {
            None => None,
            Some(h) => {
                let name = h.get_ref().to_ascii_lowercase();
                if !vhosts.iter().any(|v| v.host == name) {
                    return self.err(
                        &format!("{table}.host"),
                        h.span(),
                        format_args!("\"{name}\" is not the host of a [[vhost]]"),
                    );
                }
                Some(name)
            }
        };
        let line = line_of(self.text, r.from.span().start);
        let rule = Rule {
            from,
            to,
            kind,
            force: true,
            query: r.query.map_or(QueryMode::Keep, Spanned::into_inner),
            origin: format!("[[{table}]] line {line}"),
        };
        Ok(crate::route::ScopedRule { host, rule })
    }

    /// A `cert`/`key` pair of `table` (`tls` or `vhost`): both or neither, paths relative
    /// to the config file.
    fn cert_files(
        &self,
        table: &str,
        cert: &S<String>,
        key: &S<String>,
        at: std::ops::Range<usize>,
    ) -> Result<Option<crate::config::CertFiles>, ConfigError> {
        let given = |v: &S<String>| v.as_ref().filter(|v| !v.get_ref().is_empty()).map(|v| self.base.join(v.get_ref()));
        match (given(cert), given(key)) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(crate::config::CertFiles { cert, key })),
            (Some(_), None) => self.err(&format!("{table}.key"), at, "is needed with a certificate"),
            (None, Some(_)) => self.err(&format!("{table}.cert"), at, "is needed with a key"),
        }
    }

    fn log_target(&self, key: &str, v: &Spanned<String>, allow_off: bool) -> Result<LogTarget, ConfigError> {
        match v.get_ref().as_str() {
            "" => self.err(key, v.span(), "must not be empty"),
            "-" => Ok(LogTarget::Std),
            "off" if allow_off => Ok(LogTarget::Off),
            "off" => self.err(key, v.span(), "the error log cannot be turned off; use \"-\" or a file"),
            p => Ok(LogTarget::File(self.base.join(p))),
        }
    }

    /// A list of `host:port` addresses (`server.listen`, `tls.listen`), each resolved.
    fn listen(&self, key: &str, v: &Spanned<Vec<String>>) -> Result<Vec<SocketAddr>, ConfigError> {
        let mut all = Vec::new();
        for a in v.get_ref() {
            match parse_listen(a) {
                Ok(mut addrs) => all.append(&mut addrs),
                Err(e) => return self.err(key, v.span(), e),
            }
        }
        Ok(all)
    }

    /// A list of addresses and networks (`server.trusted_proxies`, `status.allow`).
    fn nets(&self, key: &str, v: &Spanned<Vec<String>>) -> Result<Vec<Net>, ConfigError> {
        let mut nets = Vec::new();
        for a in v.get_ref() {
            match Net::parse(a) {
                Some(n) => nets.push(n),
                None => return self.err(key, v.span(), format_args!("\"{a}\" is not an address or network")),
            }
        }
        Ok(nets)
    }

    /// A list of content codings by their config names, duplicates dropped.
    fn encodings(&self, key: &str, v: &Spanned<Vec<String>>) -> Result<Vec<Encoding>, ConfigError> {
        let mut list = Vec::new();
        for name in v.get_ref() {
            match Encoding::from_config(name) {
                Some(e) if !list.contains(&e) => list.push(e),
                Some(_) => {}
                None => {
                    return self.err(key, v.span(), format_args!("\"{name}\" is not one of \"br\", \"zstd\", \"gzip\""))
                }
            }
        }
        Ok(list)
    }

    /// The name of a file read at each site's root (`_redirects`, `_headers`); "" is none.
    fn site_file(&self, key: &str, v: Spanned<String>, example: &str) -> Result<Option<String>, ConfigError> {
        let name = v.get_ref();
        if name.is_empty() {
            Ok(None)
        } else if name.contains('/') || name.starts_with('.') || !name.bytes().all(|b| b.is_ascii_graphic()) {
            self.err(key, v.span(), format_args!("must be a file name such as {example}"))
        } else {
            Ok(Some(v.into_inner()))
        }
    }
}

/// Parses "250ms", "10s", "2m", "1h" (and a bare number of seconds in a string).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// Resolves a `host:port` string (IPv6 in brackets) to its socket addresses.
pub(crate) fn parse_listen(s: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    match s.to_socket_addrs() {
        Ok(addrs) => {
            let v: Vec<SocketAddr> = addrs.collect();
            if v.is_empty() {
                Err(format!("\"{s}\" resolves to no address"))
            } else {
                Ok(v)
            }
        }
        Err(e) => Err(format!("\"{s}\" is not a valid host:port ({e})")),
    }
}

/// Reads `text` (a config file in `base`) into `cfg`: each section present overrides the
/// fields it names, in the order below (later sections check against earlier ones: the
/// health path against the status page's, `[[auth]]` and the rules against `[[vhost]]`).
pub(super) fn apply(text: &str, base: &Path, cfg: &mut Config) -> Result<(), ConfigError> {
    let raw = parse(text)?;
    let cx = Ctx { text, base };
    if let Some(s) = raw.server {
        cx.server(s, cfg)?;
    }
    if let Some(h) = raw.http {
        cx.http(h, cfg)?;
    }
    if let Some(l) = raw.log {
        cx.log(l, cfg)?;
    }
    if let Some(c) = raw.cache {
        cx.cache(c, cfg)?;
    }
    if let Some(st) = raw.status {
        cx.status(st, cfg)?;
    }
    if let Some(h) = raw.health {
        cx.health(h, cfg)?;
    }
    if let Some(c) = raw.compression {
        cx.compression(c, cfg)?;
    }
    if let Some(i) = raw.images {
        if let Some(v) = i.negotiate {
            cfg.image_negotiate = v.into_inner();
        }
    }
    if let Some(l) = raw.listing {
        cx.listing(l, cfg)?;
    }
    if let Some(e) = raw.errors {
        cx.errors(e, cfg)?;
    }
    if let Some(rules) = raw.headers {
        cfg.header_rules = cx.header_rules(rules)?;
    }
    // The `[[vhost]] acme = true` hosts join `[acme] domains` once that section is read.
    let mut acme_hosts = Vec::new();
    if let Some(hosts) = raw.vhost {
        cfg.vhosts = cx.vhosts(hosts, &mut acme_hosts)?;
    }
    if let Some(t) = raw.tls {
        cx.tls(t, cfg)?;
    }
    if let Some(a) = raw.acme {
        cx.acme(a, &mut cfg.acme)?;
    }
    cx.vhost_acme(acme_hosts, &mut cfg.acme)?;
    if let Some(h) = raw.http2 {
        cx.http2(h, cfg)?;
    }
    if let Some(h) = raw.http3 {
        cx.http3(h, cfg)?;
    }
    if let Some(rules) = raw.throttle {
        cfg.throttles = cx.throttles(rules)?;
    }
    if let Some(r) = raw.routing {
        cx.routing(r, cfg)?;
    }
    for a in raw.auth.unwrap_or_default() {
        let rule = cx.auth(a, &cfg.vhosts)?;
        cfg.auth.push(rule);
    }
    let mut rules = Vec::new();
    for (table, list) in [("redirect", raw.redirect), ("rewrite", raw.rewrite)] {
        for r in list.unwrap_or_default() {
            rules.push(cx.rule(table, r, &cfg.vhosts)?);
        }
    }
    if !rules.is_empty() {
        cfg.routing.rules = rules;
    }
    if let Some(m) = raw.mime {
        cx.mime(m, cfg)?;
    }
    Ok(())
}

/// The file's text as [`Raw`]; a syntax or type error names its line (and key, when the
/// line has one).
fn parse(text: &str) -> Result<Raw, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let msg = super::words::plain(e.message().trim_end());
        match e.span() {
            Some(span) => {
                let line = line_of(text, span.start);
                match key_at(text, span.start) {
                    Some(key) => ConfigError(format!("line {line}: {key}: {msg}")),
                    None => ConfigError(format!("line {line}: {msg}")),
                }
            }
            None => ConfigError(msg),
        }
    })
}

/// One function per section of the file, in the order [`apply`] calls them.
impl Ctx<'_> {
    fn server(&self, s: RawServer, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = s.listen {
            let all = self.listen("server.listen", &v)?;
            if all.is_empty() {
                return self.err("server.listen", v.span(), "at least one address is needed");
            }
            cfg.listen = all;
        }
        if let Some(v) = s.root {
            if v.get_ref().is_empty() {
                return self.err("server.root", v.span(), "must not be empty");
            }
            cfg.root = self.base.join(v.get_ref());
        }
        if let Some(v) = s.workers {
            cfg.workers = match v.get_ref() {
                RawWorkers::Count(n) if (1..=1024).contains(n) => *n as u32,
                RawWorkers::Word(w) if w == "auto" => {
                    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
                }
                _ => return self.err("server.workers", v.span(), "must be a number from 1 to 1024, or \"auto\""),
            };
        }
        if let Some(v) = s.max_connections {
            cfg.max_connections = self.int("server.max_connections", &v, 1, 10_000_000)?;
        }
        if let Some(v) = s.max_connections_per_ip {
            cfg.max_connections_per_ip = self.int("server.max_connections_per_ip", &v, 0, 10_000_000)?;
        }
        if let Some(v) = s.trusted_proxies {
            cfg.trusted_proxies = self.nets("server.trusted_proxies", &v)?;
        }
        if let Some(v) = s.proxy_protocol {
            cfg.proxy_protocol = self.proxy_protocol(&v)?;
        }
        if let Some(v) = s.pid_file {
            cfg.pid_file = if v.get_ref().is_empty() { None } else { Some(self.base.join(v.get_ref())) };
        }
        if let Some(v) = s.backlog {
            cfg.backlog = self.int("server.backlog", &v, 1, 65_535)?;
        }
        if let Some(v) = s.sendfile {
            cfg.sendfile = *v.get_ref();
        }
        if let Some(v) = s.loopback_copy {
            cfg.loopback_copy = *v.get_ref();
        }
        if let Some(v) = s.defer_accept {
            cfg.defer_accept = match v.get_ref() {
                RawDeferAccept::Flag(true) => DeferAccept::Always,
                RawDeferAccept::Flag(false) => DeferAccept::Never,
                RawDeferAccept::Word(w) if w == "auto" => DeferAccept::Auto,
                RawDeferAccept::Word(_) => {
                    return self.err("server.defer_accept", v.span(), "must be true, false or \"auto\"")
                }
            };
        }
        if let Some(v) = s.shutdown_timeout {
            cfg.shutdown_timeout = self.duration("server.shutdown_timeout", &v, 86_400)?;
        }
        Ok(())
    }

    /// `server.proxy_protocol`: listen addresses, each with the port its listener is bound to.
    fn proxy_protocol(&self, v: &Spanned<Vec<String>>) -> Result<Vec<SocketAddr>, ConfigError> {
        let mut all = Vec::new();
        for a in v.get_ref() {
            match parse_listen(a) {
                Ok(addrs) if addrs.iter().any(|a| a.port() == 0) => {
                    return self.err(
                        "server.proxy_protocol",
                        v.span(),
                        format_args!("\"{a}\" needs the port its listener is bound to, not 0"),
                    )
                }
                Ok(mut addrs) => all.append(&mut addrs),
                Err(e) => return self.err("server.proxy_protocol", v.span(), e),
            }
        }
        Ok(all)
    }

    fn http(&self, h: RawHttp, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = h.keepalive_requests {
            cfg.keepalive_requests = self.int("http.keepalive_requests", &v, 1, u32::MAX as i64)?;
        }
        if let Some(v) = h.keepalive_timeout {
            cfg.keepalive_timeout = self.duration("http.keepalive_timeout", &v, 86_400)?;
        }
        if let Some(v) = h.header_timeout {
            cfg.header_timeout = self.duration("http.header_timeout", &v, 86_400)?;
        }
        if let Some(v) = h.send_timeout {
            cfg.send_timeout = self.duration("http.send_timeout", &v, 86_400)?;
        }
        if let Some(v) = h.min_send_rate {
            cfg.min_send_rate = self.int("http.min_send_rate", &v, 0, i64::MAX)?;
        }
        if let Some(v) = h.max_header_bytes {
            cfg.max_header_bytes = self.int("http.max_header_bytes", &v, 1024, 1024 * 1024)?;
        }
        if let Some(v) = h.max_uri_bytes {
            cfg.max_uri_bytes = self.int("http.max_uri_bytes", &v, 64, 1024 * 1024)?;
        }
        if let Some(v) = h.max_headers {
            cfg.max_headers = self.int("http.max_headers", &v, 8, 1000)?;
        }
        if let Some(v) = h.max_body_discard {
            cfg.max_body_discard = self.int("http.max_body_discard", &v, 0, i64::MAX)?;
        }
        if let Some(v) = h.index {
            for name in v.get_ref() {
                if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                    return self.err("http.index", v.span(), format_args!("\"{name}\" is not a plain file name"));
                }
            }
            cfg.index = v.into_inner();
        }
        if let Some(v) = h.dotfiles {
            cfg.dotfiles = v.into_inner();
        }
        if let Some(v) = h.symlinks {
            cfg.symlinks = v.into_inner();
        }
        if let Some(v) = h.charset {
            if !v.get_ref().bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
                return self.err("http.charset", v.span(), "must be a charset name such as \"utf-8\"");
            }
            cfg.charset = v.into_inner();
        }
        if let Some(v) = h.max_age {
            cfg.max_age = Some(self.int("http.max_age", &v, 0, 10 * 365 * 86_400)?);
        }
        if let Some(v) = h.max_ranges {
            cfg.max_ranges = self.int("http.max_ranges", &v, 0, 1000)?;
        }
        if let Some(v) = h.limit_rate {
            cfg.limit_rate = self.rate("http.limit_rate", &v)?;
        }
        if let Some(v) = h.limit_rate_after {
            cfg.limit_rate_after = self.int("http.limit_rate_after", &v, 0, i64::MAX)?;
        }
        if let Some(v) = h.server_header {
            if !crate::http::is_field_value(v.get_ref().as_bytes()) {
                return self.err("http.server_header", v.span(), "must be printable text");
            }
            cfg.server_header = v.into_inner();
        }
        Ok(())
    }

    fn log(&self, l: RawLog, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = l.access {
            cfg.access_log = self.log_target("log.access", &v, true)?;
        }
        if let Some(v) = l.format {
            cfg.log_format = v.into_inner();
        }
        if let Some(v) = l.error {
            cfg.error_log = self.log_target("log.error", &v, false)?;
        }
        Ok(())
    }

    fn cache(&self, c: RawCache, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = c.max_bytes {
            cfg.cache_max_bytes = self.int("cache.max_bytes", &v, 0, i64::MAX)?;
        }
        if let Some(v) = c.max_entries {
            cfg.cache_max_entries = self.int("cache.max_entries", &v, 0, 10_000_000)?;
        }
        if let Some(v) = c.max_file {
            cfg.cache_max_file = self.int("cache.max_file", &v, 0, MAX_MAPPED_FILE)?;
        }
        if let Some(v) = c.revalidate {
            cfg.cache_revalidate = self.duration_or_zero("cache.revalidate", &v, 86_400)?;
        }
        if let Some(v) = c.negative {
            cfg.cache_negative = self.duration_or_zero("cache.negative", &v, 86_400)?;
        }
        if let Some(v) = c.preload {
            let mut dirs = Vec::new();
            for d in v.get_ref() {
                let mut norm = String::new();
                if crate::fs::resolve::normalize(d.as_bytes(), &mut norm).is_err() {
                    return self.err(
                        "cache.preload",
                        v.span(),
                        format_args!("\"{d}\" is not a URL path such as \"/assets/\""),
                    );
                }
                dirs.push(norm);
            }
            cfg.cache_preload = dirs;
        }
        Ok(())
    }

    fn status(&self, st: RawStatus, cfg: &mut Config) -> Result<(), ConfigError> {
        let mut path = cfg.status_path.clone().unwrap_or_else(|| "/.status".to_string());
        if let Some(v) = st.path {
            if !v.get_ref().starts_with('/') || !v.get_ref().bytes().all(|b| b.is_ascii_graphic() && b != b'?') {
                return self.err("status.path", v.span(), "must be a URL path such as \"/.status\"");
            }
            path = v.into_inner();
        }
        if let Some(v) = st.allow {
            cfg.status_allow = self.nets("status.allow", &v)?;
        }
        let enabled = st.enabled.is_some_and(|v| v.into_inner());
        cfg.status_path = enabled.then_some(path);
        Ok(())
    }

    /// `[health]`, after `[status]`: the two paths must differ.
    fn health(&self, h: RawHealth, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = h.path {
            let p = v.get_ref();
            if p.is_empty() {
                cfg.health_path = None;
            } else if !p.starts_with('/') || !p.bytes().all(|b| b.is_ascii_graphic() && b != b'?') {
                return self.err("health.path", v.span(), "must be a URL path such as \"/healthz\", or \"\"");
            } else if cfg.status_path.as_deref() == Some(p) {
                return self.err("health.path", v.span(), "is the status page's path");
            } else {
                cfg.health_path = Some(v.into_inner());
            }
        }
        if let Some(v) = h.log {
            cfg.health_log = v.into_inner();
        }
        Ok(())
    }

    fn compression(&self, c: RawCompression, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = c.precompressed {
            cfg.precompressed = self.encodings("compression.precompressed", &v)?;
        }
        let z = &mut cfg.compression;
        if let Some(v) = c.encodings {
            z.encodings = self.encodings("compression.encodings", &v)?;
        }
        if let Some(v) = c.gzip_level {
            z.gzip_level = self.int("compression.gzip_level", &v, 1, 9)?;
        }
        if let Some(v) = c.br_level {
            z.br_level = self.int("compression.br_level", &v, 0, 11)?;
        }
        if let Some(v) = c.zstd_level {
            z.zstd_level = self.int("compression.zstd_level", &v, 1, 19)?;
        }
        if let Some(v) = c.min_size {
            z.min_size = self.int("compression.min_size", &v, 0, i64::MAX)?;
        }
        if let Some(v) = c.max_size {
            z.max_size = self.int("compression.max_size", &v, 0, 1 << 30)?;
        }
        if let Some(v) = c.cache_bytes {
            z.cache_bytes = self.int("compression.cache_bytes", &v, 0, i64::MAX)?;
        }
        if let Some(v) = c.cache_entries {
            z.cache_entries = self.int("compression.cache_entries", &v, 0, 1_000_000)?;
        }
        if let Some(v) = c.on_demand {
            // A build without the feature has no encoders: the shipped file (which says
            // `true`) still loads there, and only siblings are served (documented).
            z.on_demand = v.into_inner() && cfg!(feature = "compression");
        }
        Ok(())
    }

    fn listing(&self, l: RawListing, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = l.enabled {
            cfg.listing = v.into_inner();
        }
        if let Some(v) = l.max_entries {
            cfg.listing_max_entries = self.int("listing.max_entries", &v, 1, 1_000_000)?;
        }
        if let Some(v) = l.max_bytes {
            cfg.listing_max_bytes = self.int("listing.max_bytes", &v, 4096, 1 << 30)?;
        }
        Ok(())
    }

    fn errors(&self, e: BTreeMap<String, Spanned<String>>, cfg: &mut Config) -> Result<(), ConfigError> {
        for (code, page) in e {
            let key = format!("errors.{code}");
            let status: u16 = match code.parse() {
                Ok(s) if (400..600).contains(&s) => s,
                _ => return self.err(&key, page.span(), "the key must be an error status from 400 to 599"),
            };
            let mut norm = String::new();
            let url =
                if page.get_ref().starts_with('/') { page.get_ref().clone() } else { format!("/{}", page.get_ref()) };
            if crate::fs::resolve::normalize(url.as_bytes(), &mut norm).is_err() || norm.ends_with('/') {
                return self.err(&key, page.span(), "must be the path of a file under the document root");
            }
            cfg.error_pages.insert(status, norm);
        }
        Ok(())
    }

    fn header_rules(&self, rules: Vec<RawHeaderRule>) -> Result<Vec<crate::route::HeaderRule>, ConfigError> {
        let mut out = Vec::new();
        for r in rules {
            let pattern = r.pattern.map(|p| crate::glob::Pattern::new(p.get_ref()));
            let mime = r.mime.map(Spanned::into_inner);
            let cache_control = match r.cache_control {
                Some(v) => Some(self.header_value("headers.cache_control", &v)?),
                None => None,
            };
            let mut headers = Vec::new();
            for (name, value) in r.headers.unwrap_or_default() {
                let key = format!("headers.headers.{name}");
                let token = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    return self.err(&key, value.span(), "the key must be a header name");
                }
                headers.push((name.clone(), self.header_value(&key, &value)?));
            }
            out.push(crate::route::HeaderRule { pattern, mime, cache_control, headers });
        }
        Ok(out)
    }

    /// `[[vhost]]`; the hosts with `acme = true` (and where it is said) go to `acme_hosts`.
    fn vhosts(
        &self,
        hosts: Vec<RawVhost>,
        acme_hosts: &mut Vec<(String, std::ops::Range<usize>)>,
    ) -> Result<Vec<crate::config::VirtualHost>, ConfigError> {
        let mut out: Vec<crate::config::VirtualHost> = Vec::new();
        for v in hosts {
            let host = v.host.get_ref().to_ascii_lowercase();
            if host.is_empty()
                || host.starts_with('.')
                || !crate::http::request::valid_host(host.as_bytes())
                || host.contains(':') && !host.starts_with('[')
            {
                return self.err("vhost.host", v.host.span(), "must be a host name without a port");
            }
            if out.iter().any(|o| o.host == host) {
                return self.err("vhost.host", v.host.span(), format_args!("\"{host}\" is listed twice"));
            }
            if v.root.get_ref().is_empty() {
                return self.err("vhost.root", v.root.span(), "must not be empty");
            }
            let tls = self.cert_files("vhost", &v.cert, &v.key, v.host.span())?;
            if let Some(a) = v.acme.filter(|a| *a.get_ref()) {
                // Two sources for one name's certificate: say which to drop.
                let own = v.cert.as_ref().filter(|c| !c.get_ref().is_empty()).map(|_| "vhost.cert");
                if let Some(key) = own.or(v.key.as_ref().filter(|k| !k.get_ref().is_empty()).map(|_| "vhost.key")) {
                    return self.err(
                        "vhost.acme",
                        a.span(),
                        format_args!("\"{host}\" has its own certificate ({key}); give either, not both"),
                    );
                }
                acme_hosts.push((host.clone(), a.span()));
            }
            out.push(crate::config::VirtualHost { host, root: self.base.join(v.root.get_ref()), tls });
        }
        Ok(out)
    }

    fn tls(&self, t: RawTls, cfg: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = t.listen {
            cfg.tls.listen = self.listen("tls.listen", &v)?;
        }
        let at = t.cert.as_ref().or(t.key.as_ref()).map_or(0..0, |v| v.span());
        cfg.tls.default = self.cert_files("tls", &t.cert, &t.key, at)?;
        if let Some(v) = t.handshake_timeout {
            cfg.tls.handshake_timeout = self.duration("tls.handshake_timeout", &v, 3600)?;
        }
        if let Some(v) = t.session_tickets {
            cfg.tls.session_tickets = v.into_inner();
        }
        if let Some(v) = t.ticket_lifetime {
            // RFC 8446 §4.6.1: at most 7 days. Keys rotate every half of it: at least 1 s.
            let d = self.duration("tls.ticket_lifetime", &v, 7 * 86_400)?;
            if d < Duration::from_secs(2) {
                return self.err("tls.ticket_lifetime", v.span(), "must be at least 2 seconds");
            }
            cfg.tls.ticket_lifetime = d;
        }
        if let Some(v) = t.ticket_key_file {
            // Empty: none (the shipped file's default), as for `cert`.
            cfg.tls.ticket_key_file = Some(v.get_ref()).filter(|p| !p.is_empty()).map(|p| self.base.join(p));
        }
        if let Some(v) = t.session_cache {
            cfg.tls.session_cache = self.int("tls.session_cache", &v, 0, 1_000_000)?;
        }
        if let Some(v) = t.redirect_http {
            cfg.tls.redirect_http = v.into_inner();
        }
        Ok(())
    }

    fn http2(&self, h: RawHttp2, cfg: &mut Config) -> Result<(), ConfigError> {
        let c = &mut cfg.http2;
        if let Some(v) = h.enabled {
            c.enabled = *v.get_ref();
        }
        if let Some(v) = h.h2c {
            c.h2c = *v.get_ref();
        }
        if let Some(v) = h.max_concurrent_streams {
            c.max_concurrent_streams = self.int("http2.max_concurrent_streams", &v, 1, 1000)?;
        }
        if let Some(v) = h.max_header_list_size {
            c.max_header_list_size = self.int("http2.max_header_list_size", &v, 1024, 1024 * 1024)?;
        }
        if let Some(v) = h.max_header_block {
            c.max_header_block = self.int("http2.max_header_block", &v, 1024, 1024 * 1024)?;
        }
        if let Some(v) = h.header_table_size {
            c.header_table_size = self.int("http2.header_table_size", &v, 4096, 65536)?;
        }
        if let Some(v) = h.initial_window_size {
            c.initial_window_size = self.int("http2.initial_window_size", &v, 65_535, (1 << 31) - 1)?;
        }
        if let Some(v) = h.handshake_timeout {
            c.handshake_timeout = self.duration("http2.handshake_timeout", &v, 3600)?;
        }
        if let Some(v) = h.idle_timeout {
            c.idle_timeout = self.duration("http2.idle_timeout", &v, 86_400)?;
        }
        if let Some(v) = h.reset_budget {
            c.reset_budget = self.int("http2.reset_budget", &v, 10, 1_000_000)?;
        }
        if let Some(v) = h.flood_budget {
            c.flood_budget = self.int("http2.flood_budget", &v, 100, 1_000_000)?;
        }
        Ok(())
    }

    fn http3(&self, h: RawHttp3, cfg: &mut Config) -> Result<(), ConfigError> {
        let c = &mut cfg.http3;
        if let Some(v) = h.listen {
            c.listen = self.listen("http3.listen", &v)?;
        }
        if let Some(v) = h.max_streams {
            c.max_streams = self.int("http3.max_streams", &v, 1, 1000)?;
        }
        if let Some(v) = h.idle_timeout {
            c.idle_timeout = self.duration("http3.idle_timeout", &v, 3600)?;
        }
        if let Some(v) = h.alt_svc {
            c.alt_svc = *v.get_ref();
        }
        if let Some(v) = h.retry {
            c.retry = match v.get_ref().as_str() {
                "never" => crate::config::Http3Retry::Never,
                "always" => crate::config::Http3Retry::Always,
                "under_load" => crate::config::Http3Retry::UnderLoad,
                _ => return self.err("http3.retry", v.span(), "must be \"never\", \"always\" or \"under_load\""),
            };
        }
        if let Some(v) = h.retry_threshold {
            c.retry_threshold = self.int("http3.retry_threshold", &v, 1, 1_000_000)?;
        }
        if let Some(v) = h.max_connections_per_ip {
            c.max_connections_per_ip = self.int("http3.max_connections_per_ip", &v, 0, 10_000_000)?;
        }
        if let Some(v) = h.reset_budget {
            c.reset_budget = self.int("http3.reset_budget", &v, 10, 1_000_000)?;
        }
        if let Some(v) = h.flood_budget {
            c.flood_budget = self.int("http3.flood_budget", &v, 100, 1_000_000)?;
        }
        if let Some(v) = h.enabled {
            c.enabled = *v.get_ref();
            if c.enabled && !cfg!(feature = "http3") {
                return self.err("http3.enabled", v.span(), "this build has no HTTP/3 (cargo feature `http3`)");
            }
            if c.enabled && cfg.tls.listen.is_empty() {
                return self.err("http3.enabled", v.span(), "needs [tls] listen (HTTP/3 uses its certificates)");
            }
        }
        Ok(())
    }

    fn throttles(&self, rules: Vec<RawThrottle>) -> Result<Vec<crate::access::throttle::ThrottleRule>, ConfigError> {
        let mut out = Vec::new();
        for t in rules {
            let max = self.rate("throttle.max", &t.max)?;
            let min = match &t.min {
                Some(m) => self.rate("throttle.min", m)?,
                None => 0,
            };
            if max == 0 || min > max {
                return self.err("throttle.max", t.max.span(), "must be more than 0 and at least min");
            }
            out.push(crate::access::throttle::ThrottleRule {
                pattern: crate::glob::Pattern::new(t.pattern.get_ref()),
                min,
                max,
            });
        }
        Ok(out)
    }

    /// `[routing]` (the `[[redirect]]` and `[[rewrite]]` rules are read after `[[vhost]]`).
    fn routing(&self, r: RawRouting, cfg: &mut Config) -> Result<(), ConfigError> {
        let rt = &mut cfg.routing;
        if let Some(v) = r.redirects_file {
            rt.redirects_file = self.site_file("routing.redirects_file", v, "\"_redirects\"")?;
        }
        if let Some(v) = r.headers_file {
            rt.headers_file = self.site_file("routing.headers_file", v, "\"_headers\"")?;
        }
        if let Some(v) = r.clean_urls {
            rt.clean_urls = v.into_inner();
        }
        if let Some(v) = r.clean_url_extensions {
            for e in v.get_ref() {
                if e.is_empty() || !e.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return self.err(
                        "routing.clean_url_extensions",
                        v.span(),
                        format_args!("\"{e}\" is not an extension without the dot, such as \"html\""),
                    );
                }
            }
            if v.get_ref().is_empty() {
                return self.err("routing.clean_url_extensions", v.span(), "needs at least one extension");
            }
            rt.clean_url_extensions = v.into_inner();
        }
        if let Some(v) = r.clean_url_redirect {
            rt.clean_url_redirect = v.into_inner();
        }
        if let Some(v) = r.trailing_slash {
            rt.trailing_slash = v.into_inner();
        }
        if let Some(v) = r.fallback {
            rt.fallback = if v.get_ref().is_empty() { None } else { Some(self.file_path("routing.fallback", &v)?) };
        }
        if let Some(v) = r.fallback_status {
            let n = *v.get_ref();
            let known = (400..=599).contains(&n) && crate::http::reason(n as u16) != "Unknown";
            if n != 200 && !known {
                return self.err(
                    "routing.fallback_status",
                    v.span(),
                    "must be 200 or an error status the server sends, such as 404 or 410",
                );
            }
            rt.fallback_status = n as u16;
        }
        if let Some(v) = r.hidden {
            rt.hidden = v.get_ref().iter().map(|p| crate::glob::Pattern::new(p)).collect();
        }
        Ok(())
    }

    /// An `[[auth]]` rule; `vhosts` are the ones already read.
    fn auth(
        &self,
        a: RawAuth,
        vhosts: &[crate::config::VirtualHost],
    ) -> Result<crate::access::auth::AuthRule, ConfigError> {
        let path = a.path.get_ref();
        let mut normal = String::new();
        let clean = crate::fs::resolve::normalize(path.as_bytes(), &mut normal).is_ok()
            && (normal == *path || format!("{normal}/") == *path);
        if !path.starts_with('/') || !clean || path.contains('%') {
            return self.err("auth.path", a.path.span(), "must be a URL path prefix such as \"/private/\"");
        }
        if a.htpasswd.get_ref().is_empty() {
            return self.err("auth.htpasswd", a.htpasswd.span(), "must name a password file");
        }
        let realm = match a.realm {
            Some(r) if r.get_ref().is_empty() || r.get_ref().chars().any(char::is_control) => {
                return self.err("auth.realm", r.span(), "must be a non-empty line of text")
            }
            Some(r) => r.into_inner(),
            None => path.clone(),
        };
        let host = match a.host {
            None => None,
            Some(h) => {
                let name = h.get_ref().to_ascii_lowercase();
                if !vhosts.iter().any(|v| v.host == name) {
                    return self.err("auth.host", h.span(), format_args!("\"{name}\" is not the host of a [[vhost]]"));
                }
                Some(name)
            }
        };
        let prefix = if path.len() > 1 { path.trim_end_matches('/').to_string() } else { path.clone() };
        Ok(crate::access::auth::AuthRule { prefix, host, htpasswd: self.base.join(a.htpasswd.get_ref()), realm })
    }

    fn mime(&self, m: BTreeMap<String, Spanned<String>>, cfg: &mut Config) -> Result<(), ConfigError> {
        for (ext, ty) in m {
            let key = format!("mime.{ext}");
            let valid_ext = !ext.is_empty() && !ext.contains(['.', '/']);
            if !valid_ext {
                return self.err(&key, ty.span(), "the key must be a file extension without the dot");
            }
            if !crate::http::mime::is_media_type(ty.get_ref()) {
                return self.err(&key, ty.span(), "must be a media type such as \"text/plain\"");
            }
            cfg.mime.insert(ext.to_ascii_lowercase(), ty.into_inner());
        }
        Ok(())
    }
}

/// An `[acme] domains` name (or a `--domain`), lowercased without its trailing dot: a DNS
/// name of letters, digits and hyphens in labels of 1 to 63 (it also names files in
/// `state_dir`), not an IP address (that needs RFC 8738), no wildcard (that needs DNS-01).
pub(crate) fn acme_name(d: &str) -> Result<String, String> {
    let name = d.strip_suffix('.').unwrap_or(d).to_ascii_lowercase();
    if name.contains('*') {
        return Err(format!("\"{d}\": wildcards need DNS-01, not supported"));
    }
    let valid = name.len() <= 253
        && name.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !valid {
        return Err(format!("\"{d}\" is not a host name"));
    }
    Ok(name)
}

/// An `[acme] email` (or `--email`) that can be an account contact: an `@`, no blanks.
pub(crate) fn acme_email_ok(e: &str) -> bool {
    e.contains('@') && !e.contains(|c: char| c.is_whitespace() || c.is_control())
}

impl Ctx<'_> {
    /// `[[vhost]] acme = true`: the host joins `[acme] domains` (once), if it can be one.
    fn vhost_acme(
        &self,
        hosts: Vec<(String, std::ops::Range<usize>)>,
        out: &mut crate::config::AcmeSettings,
    ) -> Result<(), ConfigError> {
        for (host, at) in hosts {
            let name =
                acme_name(&host).or_else(|e| self.err("vhost.acme", at, format_args!("{e}: no ACME certificate")))?;
            if !out.domains.contains(&name) {
                out.domains.push(name);
            }
        }
        Ok(())
    }

    /// `[acme]`: names checked as `[[vhost]]` hosts are (no wildcard: that needs DNS-01),
    /// the directory an https URL, challenges known and listed once, EAB both or neither.
    fn acme(&self, a: RawAcme, out: &mut crate::config::AcmeSettings) -> Result<(), ConfigError> {
        use crate::config::AcmeChallenge;
        if let Some(v) = a.domains {
            let mut names: Vec<String> = Vec::new();
            for d in v.get_ref() {
                let name = acme_name(d).or_else(|e| self.err("acme.domains", v.span(), e))?;
                if names.contains(&name) {
                    return self.err("acme.domains", v.span(), format_args!("\"{d}\" is listed twice"));
                }
                names.push(name);
            }
            out.domains = names;
        }
        if let Some(v) = a.email {
            let e = v.get_ref();
            if !e.is_empty() && !acme_email_ok(e) {
                return self.err("acme.email", v.span(), "must be an e-mail address (or empty: no contact)");
            }
            out.email = Some(e.clone()).filter(|e| !e.is_empty());
        }
        if let Some(v) = a.directory {
            let d = v.get_ref();
            if !d.starts_with("https://") || d.len() <= "https://".len() || d.contains(char::is_whitespace) {
                return self.err("acme.directory", v.span(), "must be an https:// URL (RFC 8555 §6.1)");
            }
            out.directory = d.clone();
        }
        if let Some(v) = a.ca_roots {
            out.ca_roots = Some(v.get_ref()).filter(|p| !p.is_empty()).map(|p| self.base.join(p));
        }
        if let Some(v) = a.state_dir {
            if v.get_ref().is_empty() {
                return self.err("acme.state_dir", v.span(), "must not be empty");
            }
            out.state_dir = self.base.join(v.get_ref());
        }
        if let Some(v) = a.challenges {
            let mut list = Vec::new();
            for c in v.get_ref() {
                let c = match c.as_str() {
                    "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
                    "http-01" => AcmeChallenge::Http01,
                    other => {
                        return self.err(
                            "acme.challenges",
                            v.span(),
                            format_args!("\"{other}\": expected \"tls-alpn-01\" or \"http-01\""),
                        )
                    }
                };
                if list.contains(&c) {
                    return self.err("acme.challenges", v.span(), format_args!("\"{}\" is listed twice", c.name()));
                }
                list.push(c);
            }
            if list.is_empty() {
                return self.err("acme.challenges", v.span(), "must name at least one challenge");
            }
            out.challenges = list;
        }
        fn given(v: &S<String>) -> Option<&Spanned<String>> {
            v.as_ref().filter(|v| !v.get_ref().is_empty())
        }
        match (given(&a.eab_kid), given(&a.eab_hmac_key)) {
            (None, None) => out.eab = None,
            (Some(kid), Some(key)) => match base64url_decode(key.get_ref()) {
                Some(k) if !k.is_empty() => out.eab = Some((kid.get_ref().clone(), k)),
                _ => return self.err("acme.eab_hmac_key", key.span(), "must be the base64url key the CA gave"),
            },
            (Some(kid), None) => return self.err("acme.eab_hmac_key", kid.span(), "is needed with acme.eab_kid"),
            (None, Some(key)) => return self.err("acme.eab_kid", key.span(), "is needed with acme.eab_hmac_key"),
        }
        Ok(())
    }
}

/// Base64url (RFC 4648 §5), padding optional, as CAs hand out EAB keys; the standard
/// alphabet's `+` and `/` are taken too.
fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // A lone trailing character carries fewer than 8 bits: not base64.
    (bits < 6).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(s: &str) -> Result<Config, ConfigError> {
        Config::from_toml(s, Path::new("/etc"))
    }

    /// `max_file` bounds what is mapped: the largest mapping must fit the address space
    /// (1 GiB on a 32-bit target, 1 TiB on a 64-bit one); past it is an error, not a clamp.
    #[test]
    fn max_file_fits_the_address_space() {
        let max = MAX_MAPPED_FILE;
        assert_eq!(max, if usize::BITS >= 64 { 1 << 40 } else { 1 << 30 });
        assert!(usize::try_from(max).is_ok(), "one mapping of max_file bytes is addressable");
        let c = load(&format!("[cache]\nmax_file = {max}\n")).unwrap();
        assert_eq!(c.cache_max_file, max as u64);
        let e = load(&format!("[cache]\n\nmax_file = {}\n", max + 1)).unwrap_err();
        assert_eq!(e.0, format!("line 3: cache.max_file: {} is out of range (0 to {max})", max + 1));
    }

    #[test]
    fn compression_keys() {
        use crate::http::encoding::Encoding;
        let c = load(
            "[compression]\non_demand = false\nencodings = [\"gzip\", \"zstd\", \"gzip\"]\ngzip_level = 9\n\
             br_level = 0\nzstd_level = 19\nmin_size = 0\nmax_size = 1073741824\ncache_bytes = 0\ncache_entries = 7\n",
        )
        .unwrap();
        let z = &c.compression;
        assert!(!z.on_demand);
        assert_eq!(z.encodings, [Encoding::Gzip, Encoding::Zstd]);
        assert_eq!((z.gzip_level, z.br_level, z.zstd_level), (9, 0, 19));
        assert_eq!((z.min_size, z.max_size, z.cache_bytes, z.cache_entries), (0, 1 << 30, 0, 7));
        for (bad, key) in [
            ("gzip_level = 0", "compression.gzip_level"),
            ("br_level = 12", "compression.br_level"),
            ("zstd_level = 20", "compression.zstd_level"),
            ("max_size = 1073741825", "compression.max_size"),
            ("min_size = -1", "compression.min_size"),
            ("cache_entries = 1000001", "compression.cache_entries"),
            ("encodings = [\"lzma\"]", "compression.encodings"),
        ] {
            let e = load(&format!("[compression]\n{bad}\n")).unwrap_err();
            assert!(e.0.contains(key), "{bad}: {}", e.0);
        }
        // A build without the feature loads the shipped file, and compresses nothing.
        assert_eq!(
            load("[compression]\non_demand = true\n").unwrap().compression.on_demand,
            cfg!(feature = "compression")
        );
        assert_eq!(Config::default().compression.on_demand, cfg!(feature = "compression"));
    }

    #[test]
    fn empty_file_is_defaults() {
        let c = load("").unwrap();
        assert_eq!(c.keepalive_requests, Config::default().keepalive_requests);
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = load("[http]\nkeepalive_requests = 5\nbogus_key = 1\n").unwrap_err().0;
        assert!(e.contains("bogus_key") && e.contains("line 3"), "{e}");
        let e = load("[http]\n# c\ndotfiles = \"maybe\"\n").unwrap_err().0;
        assert!(e.contains("http.dotfiles") && e.contains("line 3"), "{e}");
        let e = load("[server]\nbacklog = \"many\"\n").unwrap_err().0;
        assert!(e.contains("server.backlog") && e.contains("line 2"), "{e}");
        let e = load("[nope]\n").unwrap_err().0;
        assert!(e.contains("nope") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn defer_accept_follows_the_header_timeout() {
        assert_eq!(load("").unwrap().defer_accept_secs(), 10);
        assert_eq!(load("[http]\nheader_timeout = \"500ms\"").unwrap().defer_accept_secs(), 1);
        assert_eq!(load("[http]\nheader_timeout = \"2500ms\"").unwrap().defer_accept_secs(), 3);
        assert_eq!(load("").unwrap().defer_accept, DeferAccept::Auto);
        assert_eq!(load("[server]\ndefer_accept = \"auto\"").unwrap().defer_accept, DeferAccept::Auto);
        assert_eq!(load("[server]\ndefer_accept = true").unwrap().defer_accept, DeferAccept::Always);
        assert_eq!(load("[server]\ndefer_accept = false").unwrap().defer_accept, DeferAccept::Never);
        let e = load("[server]\ndefer_accept = 1").unwrap_err().0;
        assert!(e.contains("server.defer_accept"), "{e}");
        let e = load("[server]\ndefer_accept = \"yes\"").unwrap_err().0;
        assert!(e.contains("server.defer_accept") && e.contains("\"auto\"") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn out_of_range_names_key_and_line() {
        let e = load("\n[http]\nkeepalive_requests = 0\n").unwrap_err().0;
        assert!(e.contains("http.keepalive_requests") && e.contains("line 3"), "{e}");
        assert_eq!(load("[server]\nworkers = 4\n").unwrap().workers, 4);
        assert!(load("[server]\nworkers = \"auto\"\n").unwrap().workers >= 1);
        let e = load("[server]\nworkers = 0\n").unwrap_err().0;
        assert!(e.contains("server.workers") && e.contains("line 2"), "{e}");
        let e = load("[http]\nheader_timeout = \"10 parsecs\"\n").unwrap_err().0;
        assert!(e.contains("http.header_timeout"), "{e}");
        let e = load("[http]\nmax_uri_bytes = 20000\n").unwrap_err().0;
        assert!(e.contains("max_uri_bytes"), "{e}");
    }

    /// The messages of the value readers shared by several keys, byte for byte.
    #[test]
    fn shared_value_messages() {
        let err = |s: &str| load(s).unwrap_err().0;
        assert_eq!(
            err("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n"),
            "line 2: server.trusted_proxies: \"10.0.0.0/40\" is not an address or network"
        );
        assert_eq!(
            err("[status]\nallow = [\"nope\"]\n"),
            "line 2: status.allow: \"nope\" is not an address or network"
        );
        assert_eq!(
            err("[routing]\nredirects_file = \".redirects\"\n"),
            "line 2: routing.redirects_file: must be a file name such as \"_redirects\""
        );
        assert_eq!(
            err("[routing]\nheaders_file = \"a/b\"\n"),
            "line 2: routing.headers_file: must be a file name such as \"_headers\""
        );
        assert_eq!(
            err("[compression]\nprecompressed = [\"br\", \"lzma\"]\n"),
            "line 2: compression.precompressed: \"lzma\" is not one of \"br\", \"zstd\", \"gzip\""
        );
        assert_eq!(
            err("[compression]\nencodings = [\"deflate\"]\n"),
            "line 2: compression.encodings: \"deflate\" is not one of \"br\", \"zstd\", \"gzip\""
        );
        assert_eq!(
            err("[server]\nproxy_protocol = [\"127.0.0.1:0\"]\n"),
            "line 2: server.proxy_protocol: \"127.0.0.1:0\" needs the port its listener is bound to, not 0"
        );
        assert_eq!(err("[server]\nlisten = []\n"), "line 2: server.listen: at least one address is needed");
        let e = err("[tls]\nlisten = [\"127.0.0.1:443\", \"no port\"]\n");
        assert!(e.starts_with("line 2: tls.listen: \"no port\" is not a valid host:port ("), "{e}");
        let c = load("[compression]\nencodings = [\"gzip\", \"br\", \"gzip\"]\n").unwrap();
        assert_eq!(c.compression.encodings.len(), 2);
        assert_eq!(load("[routing]\nredirects_file = \"\"\n").unwrap().routing.redirects_file, None);
    }

    #[test]
    fn durations_and_paths() {
        let c = load("[http]\nheader_timeout = \"500ms\"\nkeepalive_timeout = 3\n[server]\nroot = \"site\"\n[log]\naccess = \"a.log\"\n").unwrap();
        assert_eq!(c.header_timeout, Duration::from_millis(500));
        assert_eq!(c.keepalive_timeout, Duration::from_secs(3));
        assert_eq!(c.root, Path::new("/etc/site"));
        assert_eq!(c.access_log, LogTarget::File("/etc/a.log".into()));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_duration("99999999999999999999h"), None);
    }

    #[test]
    fn enums_and_lists() {
        let c = load("[http]\ndotfiles = \"allow\"\nsymlinks = \"deny\"\nindex = [\"home.html\"]\n[server]\nlisten = [\"127.0.0.1:0\", \"[::1]:81\"]\n[mime]\nFOO = \"text/x-foo\"\n").unwrap();
        assert_eq!(c.dotfiles, DotfilePolicy::Allow);
        assert_eq!(c.symlinks, SymlinkPolicy::Deny);
        assert_eq!(c.index, vec!["home.html".to_string()]);
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.mime.get("foo").map(String::as_str), Some("text/x-foo"));
        assert!(load("[http]\nsymlinks = \"sometimes\"\n").unwrap_err().0.contains("line 2"));
        assert!(load("[server]\nlisten = [\"nowhere\"]\n").is_err());
        assert!(load("[mime]\nfoo = \"not a type\"\n").is_err());
    }

    #[test]
    fn sections_of_later_features() {
        let c = load(
            "[http]\nmax_age = 60\nlimit_rate = \"100KiB/s\"\n[compression]\nprecompressed = [\"gzip\"]\n\
             [listing]\nenabled = true\n[errors]\n404 = \"errors/404.html\"\n\
             [[headers]]\nmatch = \"/assets/**\"\ncache_control = \"public, max-age=31536000, immutable\"\n\
             headers = { \"X-Frame-Options\" = \"DENY\" }\n\
             [[vhost]]\nhost = \"A.example\"\nroot = \"a\"\n[[throttle]]\npattern = \"**.mp4\"\nmax = \"200KiB/s\"\n",
        )
        .unwrap();
        assert_eq!(c.max_age, Some(60));
        assert_eq!(c.limit_rate, 100 * 1024);
        assert_eq!(c.precompressed, vec![crate::http::encoding::Encoding::Gzip]);
        assert!(c.listing);
        assert!(load("[images]\nnegotiate = false\n").is_ok_and(|c| !c.image_negotiate));
        assert!(load("[images]\nnegotiate = 1\n").is_err());
        assert!(load("[images]\nformats = []\n").is_err());
        assert_eq!(c.error_pages.get(&404).map(String::as_str), Some("/errors/404.html"));
        assert_eq!(c.header_rules.len(), 1);
        assert_eq!(c.header_rules[0].headers, vec![("X-Frame-Options".to_string(), "DENY".to_string())]);
        assert_eq!(c.vhosts[0].host, "a.example");
        assert_eq!(c.vhosts[0].root, Path::new("/etc/a"));
        assert_eq!(c.throttles[0].max, 200 * 1024);
        assert!(load("[errors]\n200 = \"x.html\"\n").is_err());
        assert!(load("[compression]\nprecompressed = [\"lzma\"]\n").is_err());
        assert!(load("[[headers]]\nheaders = { \"X\" = \"a\\nb\" }\n").is_err());
        assert!(load("[[throttle]]\npattern = \"**\"\nmax = \"fast\"\n").is_err());
        assert!(load("[[vhost]]\nhost = \"a:80\"\nroot = \"a\"\n").is_err());
    }

    #[test]
    fn shipped_config_is_valid_and_matches_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/ferrohttpd.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let c = Config::from_toml(&text, Path::new("/x/config")).unwrap();
        let d = Config::default();
        assert_eq!(c.root, Path::new("/x/config/../www"));
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.keepalive_requests, d.keepalive_requests);
        assert_eq!(c.keepalive_timeout, d.keepalive_timeout);
        assert_eq!(c.header_timeout, d.header_timeout);
        assert_eq!(c.send_timeout, d.send_timeout);
        assert_eq!(c.shutdown_timeout, d.shutdown_timeout);
        assert_eq!(c.max_header_bytes, d.max_header_bytes);
        assert_eq!(c.max_uri_bytes, d.max_uri_bytes);
        assert_eq!(c.max_headers, d.max_headers);
        assert_eq!(c.max_body_discard, d.max_body_discard);
        assert_eq!(c.max_connections, d.max_connections);
        assert_eq!(c.backlog, d.backlog);
        assert_eq!(c.sendfile, d.sendfile);
        assert_eq!(c.loopback_copy, d.loopback_copy);
        assert_eq!(c.defer_accept, d.defer_accept);
        assert_eq!(c.cache_max_bytes, d.cache_max_bytes);
        assert_eq!(c.cache_max_entries, d.cache_max_entries);
        assert_eq!(c.cache_max_file, d.cache_max_file);
        assert_eq!(c.cache_revalidate, d.cache_revalidate);
        assert_eq!(c.cache_negative, d.cache_negative);
        assert_eq!(c.cache_preload, d.cache_preload);
        assert_eq!(c.max_age, d.max_age);
        assert_eq!(c.max_ranges, d.max_ranges);
        assert_eq!(c.precompressed, d.precompressed);
        assert_eq!(c.image_negotiate, d.image_negotiate);
        assert_eq!(c.listing, d.listing);
        assert_eq!(c.listing_max_entries, d.listing_max_entries);
        assert_eq!(c.listing_max_bytes, d.listing_max_bytes);
        assert_eq!(c.limit_rate, d.limit_rate);
        assert_eq!(c.limit_rate_after, d.limit_rate_after);
        assert_eq!(c.min_send_rate, d.min_send_rate);
        assert_eq!(c.max_connections_per_ip, d.max_connections_per_ip);
        assert_eq!(c.pid_file, d.pid_file);
        assert_eq!(c.status_path, d.status_path);
        assert_eq!(c.status_allow, d.status_allow);
        assert_eq!(c.workers, d.workers);
        assert_eq!(c.index, d.index);
        assert_eq!(c.dotfiles, d.dotfiles);
        assert_eq!(c.symlinks, d.symlinks);
        assert_eq!(c.charset, d.charset);
        assert_eq!(c.server_header, d.server_header);
        assert_eq!(c.access_log, d.access_log);
        assert_eq!(c.log_format, d.log_format);
        assert_eq!(c.error_log, d.error_log);
        assert_eq!(c.trusted_proxies, d.trusted_proxies);
        assert_eq!(c.proxy_protocol, d.proxy_protocol);
        assert_eq!(c.health_path, d.health_path);
        assert_eq!(c.health_log, d.health_log);
        assert!(!c.routing.active(), "the shipped file turns routing on");
        assert_eq!(c.routing.clean_url_extensions, d.routing.clean_url_extensions);
        assert_eq!(c.routing.trailing_slash, d.routing.trailing_slash);
        assert_eq!(c.routing.fallback_status, d.routing.fallback_status);
        assert_eq!(c.tls.handshake_timeout, d.tls.handshake_timeout);
        assert_eq!(c.tls.session_tickets, d.tls.session_tickets);
        assert_eq!(c.tls.ticket_lifetime, d.tls.ticket_lifetime);
        assert_eq!(c.tls.ticket_key_file, d.tls.ticket_key_file);
        assert_eq!(c.tls.session_cache, d.tls.session_cache);
        assert_eq!(c.tls.redirect_http, d.tls.redirect_http);
    }

    #[test]
    #[cfg(feature = "tls")]
    fn tls_section_and_vhost_certificates() {
        let c = load(
            "[tls]\nlisten = [\"127.0.0.1:8443\", \"[::1]:8443\"]\ncert = \"tls/a.crt\"\nkey = \"/k/a.key\"\n\
             handshake_timeout = \"3s\"\n[[vhost]]\nhost = \"b.example\"\nroot = \"b\"\ncert = \"b.crt\"\nkey = \"b.key\"\n\
             [[vhost]]\nhost = \"c.example\"\nroot = \"c\"\n",
        )
        .unwrap();
        assert_eq!(c.tls.listen.len(), 2);
        let d = c.tls.default.as_ref().unwrap();
        assert_eq!(d.cert, Path::new("/etc/tls/a.crt"));
        assert_eq!(d.key, Path::new("/k/a.key"));
        assert_eq!(c.tls.handshake_timeout, Duration::from_secs(3));
        let b = c.vhosts[0].tls.as_ref().unwrap();
        assert_eq!((b.cert.as_path(), b.key.as_path()), (Path::new("/etc/b.crt"), Path::new("/etc/b.key")));
        assert!(c.vhosts[1].tls.is_none());

        let d = Config::default();
        assert!(d.tls.listen.is_empty() && d.tls.default.is_none());
        assert_eq!(d.tls.handshake_timeout, Duration::from_secs(10));
        assert!(load("[tls]\n").unwrap().tls.listen.is_empty());
        assert!(d.tls.session_tickets && !d.tls.redirect_http && d.tls.ticket_key_file.is_none());
        assert_eq!((d.tls.ticket_lifetime, d.tls.session_cache), (Duration::from_secs(12 * 3600), 256));
        let r = load(
            "[tls]\nlisten = [\"127.0.0.1:8443\"]\ncert = \"a\"\nkey = \"b\"\nsession_tickets = false\n\
             ticket_lifetime = \"2m\"\nticket_key_file = \"t.key\"\nsession_cache = 0\nredirect_http = true\n",
        )
        .unwrap();
        assert!(!r.tls.session_tickets && r.tls.redirect_http);
        assert_eq!((r.tls.ticket_lifetime, r.tls.session_cache), (Duration::from_secs(120), 0));
        assert_eq!(r.tls.ticket_key_file.as_deref(), Some(Path::new("/etc/t.key")));
    }

    #[test]
    fn http3_keys() {
        let d = load("").unwrap().http3;
        assert_eq!(d, crate::config::Http3Settings::default());
        assert!(!d.enabled && d.alt_svc && d.max_streams == 100);
        assert_eq!(
            (d.retry, d.retry_threshold, d.max_connections_per_ip),
            (crate::config::Http3Retry::UnderLoad, 128, 64)
        );
        let c = load(
            "[http3]\nlisten = [\"127.0.0.1:9443\"]\nmax_streams = 10\nidle_timeout = \"5s\"\nalt_svc = false\nretry = \"always\"\n\
             retry_threshold = 5\nmax_connections_per_ip = 0\nreset_budget = 10\nflood_budget = 100\n",
        )
        .unwrap()
        .http3;
        assert_eq!(c.listen, vec!["127.0.0.1:9443".parse().unwrap()]);
        assert_eq!((c.max_streams, c.idle_timeout, c.alt_svc), (10, Duration::from_secs(5), false));
        assert_eq!((c.retry, c.retry_threshold, c.max_connections_per_ip), (crate::config::Http3Retry::Always, 5, 0));
        assert_eq!((c.reset_budget, c.flood_budget), (10, 100));
        for (v, want) in
            [("never", crate::config::Http3Retry::Never), ("under_load", crate::config::Http3Retry::UnderLoad)]
        {
            assert_eq!(load(&format!("[http3]\nretry = \"{v}\"\n")).unwrap().http3.retry, want);
        }
        for (bad, key) in [
            ("retry_threshold = 0", "http3.retry_threshold"),
            ("max_connections_per_ip = -1", "http3.max_connections_per_ip"),
            ("max_streams = 0", "http3.max_streams"),
            ("max_streams = 1001", "http3.max_streams"),
            ("retry = \"sometimes\"", "http3.retry"),
            ("idle_timeout = 0", "http3.idle_timeout"),
            ("reset_budget = 9", "http3.reset_budget"),
            ("reset_budget = 1000001", "http3.reset_budget"),
            ("flood_budget = 99", "http3.flood_budget"),
            ("flood_budget = 1000001", "http3.flood_budget"),
        ] {
            let e = load(&format!("[http3]\n{bad}\n")).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        // Enabled: it needs the TLS listeners' certificates, and a build with HTTP/3.
        let e = load("[http3]\nenabled = true\n").unwrap_err().to_string();
        assert!(e.contains("http3.enabled"), "{e}");
        if cfg!(feature = "tls") {
            let tls = "[tls]\nlisten = [\"127.0.0.1:8443\"]\ncert = \"a.crt\"\nkey = \"a.key\"\n";
            let on = load(&format!("{tls}[http3]\nenabled = true\n"));
            assert_eq!(on.is_ok(), cfg!(feature = "http3"));
        }
    }

    #[test]
    fn http2_keys() {
        let d = load("").unwrap().http2;
        assert_eq!(d, crate::config::Http2Settings::default());
        let c = load(
            "[http2]\ninitial_window_size = 1048576\nhandshake_timeout = \"2s\"\nidle_timeout = \"5m\"\n\
             reset_budget = 50\nflood_budget = 100\n",
        )
        .unwrap()
        .http2;
        assert_eq!(c.initial_window_size, 1 << 20);
        assert_eq!((c.handshake_timeout, c.idle_timeout), (Duration::from_secs(2), Duration::from_secs(300)));
        assert_eq!((c.reset_budget, c.flood_budget), (50, 100));
        let err = |s: &str| load(s).err().map(|e| e.0).unwrap_or_default();
        for (bad, key) in [
            ("initial_window_size = 65534", "http2.initial_window_size"),
            ("initial_window_size = 2147483648", "http2.initial_window_size"),
            ("handshake_timeout = 0", "http2.handshake_timeout"),
            ("idle_timeout = \"2d\"", "http2.idle_timeout"),
            ("reset_budget = 9", "http2.reset_budget"),
            ("flood_budget = 99", "http2.flood_budget"),
        ] {
            let e = err(&format!("[http2]\n{bad}\n"));
            assert!(e.starts_with(&format!("line 2: {key}:")), "{bad}: {e}");
        }
    }

    #[test]
    fn acme_section() {
        let d = Config::default();
        assert!(!d.acme.enabled() && d.acme.directory.starts_with("https://acme-v02"));
        let c = load(
            "[tls]\nlisten = [\"127.0.0.1:8443\"]\n[acme]\ndomains = [\"Example.org.\", \"www.example.org\"]\n\
             email = \"a@example.org\"\ndirectory = \"https://ca.test/dir\"\nca_roots = \"roots.pem\"\n\
             state_dir = \"acme\"\nchallenges = [\"http-01\"]\neab_kid = \"kid\"\neab_hmac_key = \"aGVsbG8\"\n",
        );
        if !cfg!(feature = "acme") {
            assert!(c.unwrap_err().0.contains("built without"));
            return;
        }
        let a = c.unwrap().acme;
        assert_eq!(a.domains, ["example.org", "www.example.org"]);
        assert_eq!(a.email.as_deref(), Some("a@example.org"));
        assert_eq!(a.ca_roots.as_deref(), Some(Path::new("/etc/roots.pem")));
        assert_eq!(a.state_dir, Path::new("/etc/acme"));
        assert_eq!(a.challenges, [crate::config::AcmeChallenge::Http01]);
        assert_eq!(a.eab, Some(("kid".into(), b"hello".to_vec())));
        let err = |s: &str| load(&format!("[tls]\nlisten = [\"127.0.0.1:8443\"]\n[acme]\n{s}")).unwrap_err().0;
        for (bad, want) in [
            ("domains = [\"*.example.org\"]", "line 4: acme.domains: \"*.example.org\": wildcards"),
            ("domains = [\"a b\"]", "line 4: acme.domains: \"a b\" is not a host name"),
            ("domains = [\"../x\"]", "is not a host name"),
            ("domains = [\"127.0.0.1\"]", "is not a host name"),
            ("domains = [\"a..b\"]", "is not a host name"),
            ("domains = [\"a.org\", \"A.org\"]", "line 4: acme.domains: \"A.org\" is listed twice"),
            ("email = \"nobody\"", "line 4: acme.email:"),
            ("directory = \"http://ca.test/\"", "line 4: acme.directory: must be an https://"),
            ("state_dir = \"\"", "line 4: acme.state_dir:"),
            ("challenges = [\"dns-01\"]", "line 4: acme.challenges: \"dns-01\""),
            ("challenges = [\"http-01\", \"http-01\"]", "listed twice"),
            ("challenges = []", "at least one"),
            ("eab_kid = \"k\"", "line 4: acme.eab_hmac_key: is needed"),
            ("eab_hmac_key = \"aGVsbG8\"", "line 4: acme.eab_kid: is needed"),
            ("eab_kid = \"k\"\neab_hmac_key = \"a!\"", "line 5: acme.eab_hmac_key:"),
            ("staging = true", "unknown field"),
        ] {
            let e = err(bad);
            assert!(e.contains(want), "{bad}: {e}");
        }
        let e = load("[acme]\ndomains = [\"a.org\"]\n").unwrap_err().0;
        assert!(e.contains("acme.domains: needs tls.listen"), "{e}");
        assert_eq!(base64url_decode("AQID_-8"), Some(vec![1, 2, 3, 255, 239]));
        assert_eq!(base64url_decode("AQID/+8="), Some(vec![1, 2, 3, 255, 239]));
        assert_eq!(base64url_decode("A"), None);
    }

    #[test]
    fn vhost_acme_joins_the_acme_names() {
        let tls = "[tls]\nlisten = [\"127.0.0.1:8443\"]\n";
        let c = load(&format!(
            "{tls}[[vhost]]\nhost = \"Blog.Example.org\"\nroot = \"b\"\nacme = true\n\
             [[vhost]]\nhost = \"example.org\"\nroot = \"a\"\nacme = true\n\
             [[vhost]]\nhost = \"other.org\"\nroot = \"o\"\nacme = false\n\
             [acme]\ndomains = [\"example.org\", \"www.example.org\"]\n"
        ));
        if !cfg!(feature = "acme") {
            assert!(c.unwrap_err().0.contains("built without"));
            return;
        }
        let c = c.unwrap();
        // [acme]'s names first, then each vhost's not already there; the vhost has no
        // certificate files of its own (the ACME one is picked by SNI).
        assert_eq!(c.acme.domains, ["example.org", "www.example.org", "blog.example.org"]);
        assert!(c.vhosts.iter().all(|v| v.tls.is_none()));
        // Without [acme]: the vhosts alone turn it on, with its defaults.
        let c = load(&format!("{tls}[[vhost]]\nhost = \"a.org\"\nroot = \"a\"\nacme = true\n")).unwrap();
        assert_eq!((c.acme.domains, c.acme.state_dir), (vec!["a.org".to_string()], Config::default().acme.state_dir));
        let err = |v: &str| load(&format!("{tls}[[vhost]]\nhost = \"a.org\"\nroot = \"a\"\n{v}")).unwrap_err().0;
        for (bad, want) in [
            (
                "acme = true\ncert = \"a.crt\"\nkey = \"a.key\"",
                "line 6: vhost.acme: \"a.org\" has its own certificate (vhost.cert)",
            ),
            (
                "key = \"a.key\"\ncert = \"a.crt\"\nacme = true",
                "line 8: vhost.acme: \"a.org\" has its own certificate (vhost.cert)",
            ),
            ("acme = 1", "line 6: vhost.acme"),
        ] {
            let e = err(bad);
            assert!(e.contains(want), "{bad}: {e}");
        }
        let e = load(&format!("{tls}[[vhost]]\nhost = \"10.0.0.1\"\nroot = \"a\"\nacme = true\n")).unwrap_err().0;
        assert!(e.contains("line 6: vhost.acme: \"10.0.0.1\" is not a host name: no ACME certificate"), "{e}");
        let e = load("[[vhost]]\nhost = \"a.org\"\nroot = \"a\"\nacme = true\n").unwrap_err().0;
        assert!(e.contains("needs tls.listen"), "{e}");
    }

    #[test]
    fn tls_errors_name_the_key() {
        let err = |s: &str| load(s).err().map(|e| e.0).unwrap_or_default();
        // A TLS listener needs a default certificate, and a build with TLS.
        let want = if cfg!(feature = "tls") { "tls.cert and tls.key" } else { "built without TLS" };
        let e = err("[tls]\nlisten = [\"127.0.0.1:8443\"]\n");
        assert!(e.contains(want), "{e}");
        let e = err("[tls]\nlisten = [\"127.0.0.1:8443\"]\ncert = \"a\"\nkey = \"b\"\n");
        assert_eq!(e.is_empty(), cfg!(feature = "tls"), "{e}");
        assert!(err("[tls]\ncert = \"a\"\n").starts_with("line 2: tls.key:"));
        assert!(err("[tls]\nkey = \"a\"\n").starts_with("line 2: tls.cert:"));
        assert!(err("[tls]\nlisten = [\"nowhere\"]\n").starts_with("line 2: tls.listen:"));
        assert!(err("[tls]\nhandshake_timeout = 0\n").starts_with("line 2: tls.handshake_timeout:"));
        assert!(err("[tls]\nhandshake_timeout = \"2h\"\n").contains("tls.handshake_timeout"));
        assert!(err("[tls]\nsession_id = 1\n").contains("unknown field"));
        assert!(err("[tls]\nsession_cache = -1\n").starts_with("line 2: tls.session_cache:"));
        assert!(err("[tls]\nsession_cache = 1000001\n").starts_with("line 2: tls.session_cache:"));
        assert!(err("[tls]\nticket_lifetime = \"1s\"\n").starts_with("line 2: tls.ticket_lifetime: must be at least"));
        assert!(err("[tls]\nticket_lifetime = \"169h\"\n").starts_with("line 2: tls.ticket_lifetime:"));
        assert!(load("[tls]\nticket_key_file = \"\"\n").unwrap().tls.ticket_key_file.is_none());
        assert!(err("[tls]\nsession_tickets = 1\n").contains("tls.session_tickets"));
        assert!(err("[tls]\nredirect_http = true\n").contains("tls.redirect_http: needs tls.listen"));
        assert!(err("[[vhost]]\nhost = \"a\"\nroot = \"a\"\ncert = \"a.crt\"\n").contains("vhost.key"));
    }

    #[test]
    fn proxy_protocol_takes_listen_addresses_with_ports() {
        let c = load("[server]\nproxy_protocol = [\"127.0.0.1:8080\", \"[::1]:8443\"]\n").unwrap();
        assert_eq!(c.proxy_protocol, vec!["127.0.0.1:8080".parse().unwrap(), "[::1]:8443".parse().unwrap()]);
        assert!(load("").unwrap().proxy_protocol.is_empty());
        let err = |s: &str| load(s).err().map(|e| e.0).unwrap_or_default();
        let e = err("[server]\nproxy_protocol = [\"127.0.0.1:0\"]\n");
        assert!(e.starts_with("line 2: server.proxy_protocol:") && e.contains("not 0"), "{e}");
        assert!(err("[server]\nproxy_protocol = [\"nowhere\"]\n").starts_with("line 2: server.proxy_protocol:"));
        assert!(err("[server]\nproxy_protocol = true\n").contains("server.proxy_protocol"));
    }

    #[test]
    fn auth_rules() {
        let c = load(
            "[[vhost]]\nhost = \"A.example\"\nroot = \"a\"\n\
             [[auth]]\npath = \"/private/\"\nhtpasswd = \"pw/private\"\n\
             [[auth]]\npath = \"/\"\nhtpasswd = \"/x/all\"\nrealm = \"Staff\"\nhost = \"a.example\"\n",
        )
        .unwrap();
        assert_eq!(c.auth.len(), 2);
        assert_eq!((c.auth[0].prefix.as_str(), c.auth[0].realm.as_str()), ("/private", "/private/"));
        assert_eq!(c.auth[0].htpasswd, Path::new("/etc/pw/private"));
        assert_eq!((c.auth[1].prefix.as_str(), c.auth[1].host.as_deref()), ("/", Some("a.example")));
        assert!(load("").unwrap().auth.is_empty());
        let err = |s: &str| load(s).err().map(|e| e.0).unwrap_or_default();
        for bad in ["private", "/a/../b", "/a//b", "/a/./b", "/%61", ""] {
            let e = err(&format!("[[auth]]\npath = \"{bad}\"\nhtpasswd = \"p\"\n"));
            assert!(e.starts_with("line 2: auth.path:"), "{bad}: {e}");
        }
        assert!(err("[[auth]]\npath = \"/\"\nhtpasswd = \"\"\n").starts_with("line 3: auth.htpasswd:"));
        assert!(err("[[auth]]\npath = \"/\"\nhtpasswd = \"p\"\nrealm = \"\"\n").starts_with("line 4: auth.realm:"));
        let e = err("[[auth]]\npath = \"/\"\nhtpasswd = \"p\"\nhost = \"b.example\"\n");
        assert!(e.starts_with("line 4: auth.host:") && e.contains("[[vhost]]"), "{e}");
        assert!(err("[[auth]]\npath = \"/\"\n").contains("htpasswd"));
        assert!(err("[[auth]]\npath = \"/\"\nhtpasswd = \"p\"\nusers = 1\n").contains("unknown field"));
    }
}
