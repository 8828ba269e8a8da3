//! What to answer to a valid GET or HEAD: the request pipeline, in order.
//!
//! 1. **Target**: percent-decode and normalize the path (`fs::resolve::normalize`); pick the
//!    virtual host (TOML `[[vhost]]` roots, or thttpd's `-v` host directories).
//! 2. **Policy**: the referrer check (thttpd `urlpat`), then the file cache lookup, which
//!    applies the dotfile and symlink policies and finds index files.
//! 3. **Security**: `.htpasswd` is never served; thttpd mode serves only world-readable,
//!    non-executable files; `[[auth]]` rules, by the path served and where a symlink leads;
//!    `.htpasswd` Basic authentication where configured; throttles.
//! 4. **Representation**: a precompressed sibling (`x.br`, `x.zst`, `x.gz`) when the client
//!    accepts it and it is at least as new as the file; for a JPEG, PNG or GIF, an image in
//!    another format (`x.jpg.avif`, `x.jpg.webp`) when `Accept` names it (`http::media`).
//! 5. **Preconditions** (RFC 9110 §13.2.2) → 304 or 412; then **Range** → 206 (one part or
//!    `multipart/byteranges`) or 416; else 200.
//! 6. **Headers**: validators, `Cache-Control`/`Expires` (`max_age`, `[[headers]]` rules),
//!    extra headers, `Vary`. Errors use custom pages where configured (`[errors]`, or
//!    thttpd's `errors/errNNN.html`).
//!
//! Everything here only decides and queues; the connection's writer sends.

use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use super::exchange::{Body, Exchange, Part};
use super::routing::Routed;
use super::{ALLOW, PAUSED};
use crate::access::auth::{self, AuthResult};
use crate::access::throttle::RateLimiter;
use crate::ctx::Ctx;
use crate::fs::cache::{self, DirEntry, FileEntry, Lookup};
use crate::fs::listing;
use crate::fs::resolve::{self, DotfilePolicy, RealPath, ResolveError};
use crate::http::conditional::{self, Conditions, Outcome, Validators};
use crate::http::encoding::{self, Encoding};
use crate::http::media::{self, ImageFormat};
use crate::http::mime::Negotiation;
use crate::http::range::{self, ByteRange, Multipart, RangeSpec};
use crate::http::request::{Method, Request};
use crate::http::response::{error_body, Head};
use crate::http::strip_port_str;
use crate::status;

/// Which document root and cache key space a request uses.
struct Site {
    /// Index into `cx.vroots`, or None for the main root.
    root: Option<usize>,
    /// Prefix of the URL path under the root (thttpd `-v`: "/host"), for files and logs.
    prefix: String,
}

/// Why a file may not be sent.
enum Refusal {
    /// 403.
    Forbidden,
    /// 401 with this realm (already escaped).
    Challenge(String),
    /// 403, and this goes to the error log.
    Error(String),
    /// The credentials are being verified (this job): pause the request.
    Pending(u64),
    /// Too many verifications in flight: 503.
    Busy,
}

/// A sibling chosen to be sent instead of the file: a precompressed one (with its encoding),
/// or an image in another format (no encoding: its own Content-Type).
type Variant = (Rc<FileEntry>, Option<Encoding>);

/// What [`Exchange::sibling`] found.
enum Sibling {
    /// No file, or one older than the original.
    Absent,
    /// A fresh file this request may not have.
    Refused,
    Usable(Rc<FileEntry>),
}

/// Which request field the choice of representation depended on (for `Vary`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Vary {
    No,
    AcceptEncoding,
    Accept,
}

impl Exchange {
    /// Serves GET/HEAD; returns the status queued.
    pub(crate) fn serve_file(&mut self, cx: &mut Ctx, req: &Request<'_>) -> u16 {
        if req.path == "*" {
            return self.error_response(cx, 400, req, None);
        }
        let mut path = std::mem::take(&mut cx.path);
        let status = match resolve::normalize_str(req.path, &mut path) {
            Ok(()) => self.serve_path(cx, req, &mut path),
            Err(e) => self.error_response(cx, e.status(), req, None),
        };
        cx.path = path;
        status
    }

    /// `OPTIONS`: 204 with `Allow`, and the fields of the `[[headers]]` (and `_headers`)
    /// rules that match the target, as for a GET of it, so that a CORS preflight is answered
    /// from the same rules as the resource (a rule's `mime` is the type the path's name gives,
    /// its `cache_control` is for representations and left out). `OPTIONS *` and a target
    /// that does not normalize get `Allow` alone.
    pub(super) fn options(&mut self, cx: &mut Ctx, req: &Request<'_>) -> u16 {
        let mut path = std::mem::take(&mut cx.path);
        let matched = req.path != "*" && resolve::normalize_str(req.path, &mut path).is_ok();
        let site = if matched { self.site(cx, req).ok() } else { None };
        let mut h =
            Head::new(&mut self.head, &mut self.fields, 204, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Allow", super::ALLOW);
        if let Some(site) = site {
            let content_type = cx.mime.lookup(&path);
            for rule in matching_rules(cx, &site, &path, content_type) {
                for (name, value) in &rule.headers {
                    h.field(name, value.as_bytes());
                }
            }
        }
        h.finish(self.keep, req.minor);
        cx.path = path;
        204
    }

    fn serve_path(&mut self, cx: &mut Ctx, req: &Request<'_>, path: &mut String) -> u16 {
        let site = match self.site(cx, req) {
            Ok(s) => s,
            Err(status) => return self.error_response(cx, status, req, None),
        };
        if let Some(policy) = &cx.referer {
            let host = req.host.and_then(|h| std::str::from_utf8(h).ok()).map(strip_port_str);
            if !policy.allowed(path, req.referer, host) {
                return self.error_response(cx, 403, req, Some(&site));
            }
        }
        if !site.prefix.is_empty() {
            path.insert_str(0, &site.prefix);
        }
        // Site routing (redirects, rewrites, clean URLs, fallback); thttpd's `-v` host
        // directories have none.
        let mut routed = 200;
        if cx.routes.active && site.prefix.is_empty() {
            match self.route(cx, req, site.root, path) {
                Routed::Serve(status) => routed = status,
                Routed::Sent(status) => return status,
                Routed::Error(status) => {
                    // As for a miss below: under an `[[auth]]` prefix, the password first.
                    if !cx.cfg.auth.is_empty() {
                        if let Err(r) = self.auth_rules(cx, req, path, &RealPath::Same, &site) {
                            return self.refuse(cx, req, r, &site);
                        }
                    }
                    return self.error_response(cx, status, req, Some(&site));
                }
            }
        }
        let found = self.lookup(cx, &site, path);
        // `[[auth]]` covers everything under its prefix, as nginx's `auth_basic` in a
        // `location` does: a miss, an error or a directory's slash redirect there is
        // challenged before it is answered, so a client without the password cannot tell
        // what exists under the prefix. (Files and listings are checked below, where the
        // real path of a symbolic link is known.)
        if !cx.cfg.auth.is_empty() && !matches!(found, Ok(Lookup::File(_) | Lookup::Directory(_))) {
            if let Err(r) = self.auth_rules(cx, req, path, &RealPath::Same, &site) {
                return self.refuse(cx, req, r, &site);
            }
        }
        match found {
            Ok(Lookup::File(entry)) => {
                if let Err(status) = self.check_access(cx, req, &entry.url_path, &entry.real_path, entry.mode, &site) {
                    return status;
                }
                if routed != 200 {
                    return self.routed_page(cx, req, entry, routed);
                }
                self.file_response(cx, req, entry, &site)
            }
            Ok(Lookup::Directory(dir)) => {
                if let Err(status) = self.check_access(cx, req, path, &RealPath::Same, dir.mode | 0o444, &site) {
                    return status;
                }
                // With `[[auth]]` rules, a listing reached through a symbolic link is also
                // checked where the directory really is, as files are (thttpd's `.htpasswd`
                // keeps its rule for listings: the URL directory).
                if !cx.cfg.auth.is_empty() {
                    let real = match dir.dir.metadata() {
                        Ok(meta) => {
                            resolve::real_path(site.root.map_or(&cx.root, |i| &cx.vroots[i].1), path, &dir.dir, &meta)
                        }
                        Err(_) => RealPath::Unknown,
                    };
                    if real != RealPath::Same {
                        if let Err(r) = self.auth_rules(cx, req, path, &real, &site) {
                            return self.refuse(cx, req, r, &site);
                        }
                    }
                }
                // thttpd lists only world-readable directories; its defaults turn listings on,
                // so the mode check must hold on top of `listing`, not instead of it.
                let listable = cx.cfg.listing && (!cx.cfg.thttpd.enabled || dir.mode & 0o004 != 0);
                if listable {
                    self.listing_response(cx, req, &dir, path, &site)
                } else {
                    self.error_response(cx, 403, req, Some(&site))
                }
            }
            Ok(Lookup::Redirect) => {
                // Built from the normalized path, re-encoded: never the raw target, which
                // could make "//evil.example/.." a protocol-relative Location.
                let url = path.strip_prefix(site.prefix.as_str()).unwrap_or(path);
                let mut loc = Vec::with_capacity(url.len() + 2 + req.query.map_or(0, str::len));
                crate::http::encode_path(url, &mut loc);
                loc.push(b'/');
                if let Some(q) = req.query {
                    loc.push(b'?');
                    loc.extend_from_slice(q.as_bytes());
                }
                let status = if cx.cfg.thttpd.enabled { 302 } else { 301 };
                self.simple_response(cx, status, req, Some(("Location", &loc)))
            }
            Ok(Lookup::Status(status)) => self.error_response(cx, status, req, Some(&site)),
            Err(e) => {
                if let ResolveError::Io(err) = &e {
                    cx.errors.log(
                        cx.clock.log_date(),
                        format_args!("open {path:?} (root {}): {err}", cx.root.path().display()),
                    );
                }
                self.error_response(cx, e.status(), req, Some(&site))
            }
        }
    }

    /// Picks the virtual host. The Host is lowercased, its port and one trailing dot (the
    /// absolute form of a DNS name, `a.example.`) removed. thttpd answers 400 to a Host that
    /// starts with `.` or holds a `/`, with or without `-v`. thttpd's `-v`: the Host (for an
    /// HTTP/1.0 request without one, the local address) names a directory under the root.
    fn site(&mut self, cx: &Ctx, req: &Request<'_>) -> Result<Site, u16> {
        if cx.vroots.is_empty() && !cx.cfg.thttpd.enabled && !cx.cfg.thttpd.vhost_dirs {
            // Nothing here depends on the Host: no need to lowercase a copy of it.
            return Ok(Site { root: None, prefix: String::new() });
        }
        let host = req.host.filter(|h| !h.is_empty()).map(|h| String::from_utf8_lossy(h).to_ascii_lowercase());
        let name = host.as_deref().map(strip_port_str);
        if cx.cfg.thttpd.enabled && name.is_some_and(|n| n.starts_with('.') || n.contains('/')) {
            return Err(400);
        }
        let name = name.map(|n| n.strip_suffix('.').unwrap_or(n));
        if !cx.vroots.is_empty() {
            let name = name.unwrap_or("");
            let root = cx.vroots.iter().position(|(h, _)| h == name);
            return Ok(Site { root, prefix: String::new() });
        }
        if !cx.cfg.thttpd.vhost_dirs {
            return Ok(Site { root: None, prefix: String::new() });
        }
        let name = match name {
            Some(h) => h.to_string(),
            None => match self.local_ip() {
                Some(ip) => ip.to_string(),
                None => return Err(400),
            },
        };
        if name.starts_with('.') || name.contains(['/', '\\']) || name.is_empty() {
            return Err(400);
        }
        self.vhost = Some(name.clone());
        Ok(Site { root: None, prefix: format!("/{name}") })
    }

    fn lookup(&mut self, cx: &mut Ctx, site: &Site, path: &str) -> Result<Lookup, ResolveError> {
        let opts = resolve::ResolveOptions {
            symlinks: cx.cfg.symlinks,
            dotfiles: cx.cfg.dotfiles,
            index: &cx.cfg.index,
            // thttpd's `-v` directory is not part of the URL: `/.well-known/` comes after it.
            site_depth: usize::from(!site.prefix.is_empty()),
        };
        let (root, key) = match site.root {
            Some(i) => (&cx.vroots[i].1, i + 1),
            None => (&cx.root, 0),
        };
        cx.cache.get(root, key, path, &opts, &cx.mime, cx.clock.now, cx.clock.unix_secs())
    }

    /// The checks between finding a file and serving it, answering a refusal. `Err` carries
    /// the status already queued.
    fn check_access(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        url_path: &str,
        real: &RealPath,
        mode: u32,
        site: &Site,
    ) -> Result<(), u16> {
        self.policy(cx, req, url_path, real, mode, site, true).map_err(|r| self.refuse(cx, req, r, site))
    }

    /// Every policy that applies to a file about to be sent (the one asked for, or the
    /// precompressed variant sent instead): `.htpasswd` is never served; thttpd mode serves
    /// only world-readable, non-executable files; `.htpasswd` authentication. The name and
    /// the `.htpasswd` that applies are those of where the file really is (`real`), as in
    /// thttpd: a symlink into a protected directory is protected. `check_auth` false skips
    /// authentication (for a variant in the directory already checked).
    #[allow(clippy::too_many_arguments)]
    fn policy(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        url_path: &str,
        real: &RealPath,
        mode: u32,
        site: &Site,
        check_auth: bool,
    ) -> Result<(), Refusal> {
        // The last segment is `.htpasswd` (a byte test: this runs on every request).
        let named = url_path.strip_suffix(auth::HTPASSWD).is_some_and(|dir| dir.is_empty() || dir.ends_with('/'));
        let real_name = match real {
            RealPath::Other(p) => p.file_name().and_then(|n| n.to_str()),
            _ => None,
        };
        if named || real_name == Some(auth::HTPASSWD) {
            return Err(Refusal::Forbidden);
        }
        if cx.cfg.thttpd.enabled && (mode & 0o004 == 0 || (mode & 0o001 != 0 && mode & 0o040_000 == 0)) {
            // thttpd serves only world-readable files, and refuses world-executable ones
            // (they would be CGI programs there).
            return Err(Refusal::Forbidden);
        }
        if !check_auth {
            return Ok(());
        }
        if !cx.cfg.auth.is_empty() {
            self.auth_rules(cx, req, url_path, real, site)?;
        }
        if !cx.cfg.thttpd.htpasswd {
            return Ok(());
        }
        let url_dir = match url_path.rfind('/') {
            Some(i) => &url_path[..=i],
            None => "/",
        };
        let doc_root = match site.root {
            Some(i) => cx.vroots[i].1.path().to_path_buf(),
            // thttpd mode runs from the served directory (chdir at start, as thttpd): a
            // relative path needs no search permission on the directories above it, which
            // the user the server switched to may not have.
            None if cx.cfg.thttpd.enabled => std::path::PathBuf::from("."),
            None => cx.root.path().to_path_buf(),
        };
        // The top for `-g` is the site's own directory: thttpd's `-v` host directory.
        let top = doc_root.join(site.prefix.trim_start_matches('/'));
        let fs_dir = match real {
            RealPath::Same => doc_root.join(url_dir.trim_start_matches('/')),
            // Relative to the root, or absolute (outside it): `join` handles both.
            RealPath::Other(p) => doc_root.join(p.parent().unwrap_or(std::path::Path::new(""))),
            RealPath::Unknown => {
                return Err(Refusal::Error(format!("{url_path}: cannot tell which .htpasswd applies to it")));
            }
        };
        let result = cx.auth.check(&top, &fs_dir, url_dir, cx.cfg.thttpd.global_passwd, req.authorization, self.peer);
        self.admit(cx, result)
    }

    /// `[[auth]]`: the rule covering the file served decides, by its URL path and, when it
    /// was reached through a symbolic link, by where it really is (both rules, if two
    /// cover them). Routing has already run, so this is the path a rewrite, a clean URL or
    /// the fallback led to, never only the one asked for.
    fn auth_rules(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        url_path: &str,
        real: &RealPath,
        site: &Site,
    ) -> Result<(), Refusal> {
        let host = site.root.map(|i| cx.vroots[i].0.as_str());
        let served = url_path.strip_prefix(site.prefix.as_str()).unwrap_or(url_path);
        let real_url = match real {
            RealPath::Same => None,
            RealPath::Other(p) if p.is_relative() => Some(format!("/{}", p.display())),
            // Outside the root (`symlinks = "follow"`): no URL prefix names it.
            RealPath::Other(_) => None,
            RealPath::Unknown => {
                return Err(Refusal::Error(format!("{url_path}: cannot tell which [[auth]] rule applies to it")));
            }
        };
        let first = auth::rule_for(&cx.cfg.auth, host, served);
        let second = real_url.as_deref().and_then(|p| auth::rule_for(&cx.cfg.auth, host, p));
        for i in [first, second.filter(|&s| Some(s) != first)].into_iter().flatten() {
            let result = cx.auth.check_rule(&cx.cfg.auth[i], req.authorization, self.peer);
            self.admit(cx, result)?;
        }
        Ok(())
    }

    /// Turns an authentication outcome into a refusal or a pass (remembering the user).
    fn admit(&mut self, cx: &mut Ctx, result: AuthResult) -> Result<(), Refusal> {
        for line in cx.auth.take_log() {
            cx.error(format_args!("{line}"));
        }
        match result {
            AuthResult::Allowed => Ok(()),
            AuthResult::Authenticated { user } => {
                self.user = Some(user);
                Ok(())
            }
            AuthResult::Challenge { realm } => Err(Refusal::Challenge(realm)),
            AuthResult::Error { message } => Err(Refusal::Error(message)),
            AuthResult::Pending { job } => Err(Refusal::Pending(job)),
            AuthResult::Busy => Err(Refusal::Busy),
        }
    }

    /// Answers a refusal; returns the status queued.
    fn refuse(&mut self, cx: &mut Ctx, req: &Request<'_>, refusal: Refusal, site: &Site) -> u16 {
        match refusal {
            Refusal::Forbidden => self.error_response(cx, 403, req, Some(site)),
            Refusal::Challenge(realm) => {
                let value = auth::www_authenticate(&realm);
                self.simple_response(cx, 401, req, Some(("WWW-Authenticate", value.as_bytes())))
            }
            Refusal::Error(message) => {
                cx.error(format_args!("{message}"));
                self.error_response(cx, 403, req, Some(site))
            }
            Refusal::Pending(job) => {
                // Nothing is queued: the connection waits, and the request is parsed again
                // once the verification is done (`Conn::respond`).
                self.waiting = Some(job);
                PAUSED
            }
            Refusal::Busy => self.simple_response(cx, 503, req, Some(("Retry-After", b"1"))),
        }
    }

    /// Finds the precompressed sibling to send instead of `entry`, if any: the first of the
    /// client's acceptable encodings (in the server's preference order) whose sibling exists,
    /// is at least as new, and passes every [`Exchange::policy`] the file itself does (a private
    /// `page.html.gz` beside a public `page.html` is not sent). Without one, the on-demand
    /// variant ([`on_demand_variant`]) when the file is compressed on demand. Returns it and
    /// whether any variant exists that some client could get (for `Vary`). A file found to
    /// have no sibling is not looked at again for the shorter of `[cache] revalidate` and
    /// `negative` (`FileEntry::no_variants_until`). JPEG, PNG and GIF files get
    /// [`Exchange::pick_image`] instead. What kind of file it is was decided when its cache
    /// entry was built (`FileEntry::negotiation`).
    fn pick_variant(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        entry: &Rc<FileEntry>,
        site: &Site,
    ) -> Result<(Option<Variant>, Vary), Refusal> {
        match entry.negotiation {
            Negotiation::Image if cx.cfg.image_negotiate => return self.pick_image(cx, req, entry, site),
            Negotiation::Compress => {}
            Negotiation::Image | Negotiation::None => return Ok((None, Vary::No)),
        }
        if cx.cfg.precompressed.is_empty() && !on_demand(cx, entry) {
            return Ok((None, Vary::No));
        }
        let (chosen, any) = if cx.cfg.precompressed.is_empty() || no_siblings_known(cx, entry) {
            (None, false)
        } else {
            let mut accepted = std::mem::take(&mut cx.encodings);
            encoding::acceptable(req.accept_encoding.as_deref(), &cx.cfg.precompressed, &mut accepted);
            let (fresh_for, n) = (cx.cfg.cache_revalidate.min(cx.cfg.cache_negative), cx.cfg.precompressed.len());
            // `accepted` is best first (client q-values, then the server's order).
            let found = self.best_sibling(cx, req, entry, site, fresh_for, n, |cx, i| {
                let enc = cx.cfg.precompressed[i];
                (enc.suffix(), Some(enc), accepted.iter().position(|&a| a == enc))
            });
            cx.encodings = accepted;
            found?
        };
        #[cfg(feature = "compression")]
        if chosen.is_none() && on_demand(cx, entry) {
            return Ok((on_demand_variant(cx, req, entry, site), Vary::AcceptEncoding));
        }
        Ok((chosen, if any { Vary::AcceptEncoding } else { Vary::No }))
    }

    /// The best of `entry`'s `n` siblings: `candidate(cx, i)` gives the `i`th one's suffix,
    /// its encoding (none for an image format) and its rank in what the client accepts (none:
    /// not acceptable). Returns the acceptable usable ([`Exchange::sibling`]) sibling of the
    /// best rank, and whether any sibling is usable at all (for `Vary`). A search that finds no
    /// fresh sibling file remembers it for `fresh_for` (`FileEntry::no_variants_until`, see
    /// [`no_siblings_known`]); a sibling this request may not have still counts as found, since
    /// authentication differs by request.
    #[allow(clippy::too_many_arguments)]
    fn best_sibling(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        entry: &FileEntry,
        site: &Site,
        fresh_for: Duration,
        n: usize,
        candidate: impl Fn(&Ctx, usize) -> (&'static str, Option<Encoding>, Option<usize>),
    ) -> Result<(Option<Variant>, bool), Refusal> {
        let (mut any, mut seen) = (false, false);
        let mut chosen: Option<(Rc<FileEntry>, Option<Encoding>, usize)> = None;
        for i in 0..n {
            let (suffix, enc, rank) = candidate(cx, i);
            let sib = match self.sibling(cx, req, entry, site, suffix)? {
                Sibling::Absent => continue,
                Sibling::Refused => {
                    seen = true;
                    continue;
                }
                Sibling::Usable(sib) => sib,
            };
            (any, seen) = (true, true);
            if let Some(rank) = rank {
                if chosen.as_ref().is_none_or(|(_, _, r)| rank < *r) {
                    chosen = Some((sib, enc, rank));
                }
            }
        }
        if !seen {
            entry.no_variants_until.set(Some(cx.clock.now + fresh_for));
        }
        Ok((chosen.map(|(s, e, _)| (s, e)), any))
    }

    /// Finds the image variant to send instead of `entry` (a JPEG, PNG or GIF), if any:
    /// `photo.jpg.avif` or `photo.jpg.webp`, the first of the formats the client's `Accept`
    /// names ([`media::acceptable_images`]) whose sibling exists, is at least as new, and
    /// passes every [`Exchange::policy`] the file itself does. Returns it and, for `Vary: Accept`
    /// on every response for the file, whether any such sibling exists. The lookups go through
    /// the file cache, whose entries (and cached misses) answer them without a system call;
    /// a file found to have none is not looked at again for `[cache] revalidate`
    /// (`FileEntry::no_variants_until`), the time the cache takes to notice any change.
    fn pick_image(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        entry: &Rc<FileEntry>,
        site: &Site,
    ) -> Result<(Option<Variant>, Vary), Refusal> {
        if no_siblings_known(cx, entry) {
            return Ok((None, Vary::No));
        }
        let wanted = media::acceptable_images(req.accept.as_deref(), &entry.content_type);
        const FORMATS: [ImageFormat; 2] = [ImageFormat::Avif, ImageFormat::Webp];
        let fresh_for = cx.cfg.cache_revalidate;
        let (chosen, any) = self.best_sibling(cx, req, entry, site, fresh_for, FORMATS.len(), |_, i| {
            (FORMATS[i].suffix(), None, wanted.iter().position(|&w| w == Some(FORMATS[i])))
        })?;
        Ok((chosen, if any { Vary::Accept } else { Vary::No }))
    }

    /// The sibling `entry`'s URL path + `suffix` (`x.gz`, `x.jpg.avif`), if it is a file at
    /// least as new as `entry` and passes every [`Exchange::policy`] the file itself does. A
    /// verification in flight or a busy verifier is `Err`: the answer must not depend on how
    /// busy the verifier is, so the request waits or is refused.
    fn sibling(
        &mut self,
        cx: &mut Ctx,
        req: &Request<'_>,
        entry: &FileEntry,
        site: &Site,
        suffix: &str,
    ) -> Result<Sibling, Refusal> {
        let mut path = std::mem::take(&mut cx.sibling);
        path.clear();
        path.push_str(&entry.url_path);
        path.push_str(suffix);
        let found = self.lookup(cx, site, &path);
        cx.sibling = path;
        let Ok(Lookup::File(sib)) = found else { return Ok(Sibling::Absent) };
        if (sib.mtime, sib.mtime_nsec) < (entry.mtime, entry.mtime_nsec) {
            return Ok(Sibling::Absent);
        }
        // `x.gz` beside `x`, neither reached through a symlink: the same directory, whose
        // `.htpasswd` was just checked for `x`; no second look at it.
        let same_dir = sib.real_path == RealPath::Same && entry.real_path == RealPath::Same;
        match self.policy(cx, req, &sib.url_path, &sib.real_path, sib.mode, site, !same_dir) {
            Ok(()) => Ok(Sibling::Usable(sib)),
            Err(r @ (Refusal::Pending(_) | Refusal::Busy)) => Err(r),
            Err(_) => Ok(Sibling::Refused),
        }
    }

    fn file_response(&mut self, cx: &mut Ctx, req: &Request<'_>, entry: Rc<FileEntry>, site: &Site) -> u16 {
        let head_only = req.method == Method::Head;
        let (variant, vary) = match self.pick_variant(cx, req, &entry, site) {
            Ok(v) => v,
            Err(r) => return self.refuse(cx, req, r, site),
        };
        let (rep, encoding) = match variant {
            Some((v, e)) => (v, e),
            None => (entry.clone(), None),
        };
        // A content coding keeps the file's type; an image variant has its own.
        let typed: &FileEntry = if encoding.is_some() { &entry } else { &rep };
        let content_type: &str = &typed.content_type;
        let conds = Conditions {
            if_match: req.if_match.as_deref(),
            if_none_match: req.if_none_match.as_deref(),
            if_modified_since: req.if_modified_since,
            if_unmodified_since: req.if_unmodified_since,
            if_range: req.if_range,
        };
        let validators = Validators { etag: rep.etag.as_bytes(), last_modified: rep.last_modified_secs };
        let use_range = match conditional::evaluate(true, &conds, &validators) {
            Outcome::NotModified => {
                let mut h = Head::new(
                    &mut self.head,
                    &mut self.fields,
                    304,
                    cx.clock.http_date(),
                    cx.fixed(self.tls.is_some()),
                );
                representation_headers(&mut h, cx, &rep, &entry, site, encoding, vary);
                h.finish(self.keep, req.minor);
                return 304;
            }
            Outcome::PreconditionFailed => return self.error_response(cx, 412, req, Some(site)),
            Outcome::Proceed { use_range } => use_range,
        };

        let size = rep.size;
        let ranges = match req.range {
            Some(r) if use_range && req.method == Method::Get => range::parse(r, size, cx.cfg.max_ranges),
            _ => RangeSpec::Ignore,
        };
        let (status, ranges) = match ranges {
            RangeSpec::Ignore => (200, Vec::new()),
            RangeSpec::Unsatisfiable => {
                let mut cr = Vec::new();
                range::unsatisfied_range(size, &mut cr);
                return self.simple_response(cx, 416, req, Some(("Content-Range", &cr)));
            }
            RangeSpec::Ranges(r) => (206, r),
        };

        if !head_only && size > 0 && !cx.throttles.is_empty() {
            let tpath =
                if site.prefix.is_empty() { entry.url_path.to_string() } else { entry.url_path[1..].to_string() };
            match cx.throttles.admit(&tpath) {
                Ok(adm) if !adm.is_empty() => {
                    let rate = cx.throttles.allowance(&adm);
                    self.throttle = Some((adm, RateLimiter::new(rate, 0, cx.clock.now)));
                }
                Ok(_) => {}
                Err(()) => return self.error_response(cx, 503, req, Some(site)),
            }
        }
        if cx.cfg.limit_rate > 0 && !head_only {
            self.limit = Some(RateLimiter::new(cx.cfg.limit_rate, cx.cfg.limit_rate_after, cx.clock.now));
        }

        let mut h =
            Head::new(&mut self.head, &mut self.fields, status, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        let multipart = if ranges.len() > 1 {
            let seed = rep.ino ^ (cx.counters.requests << 20) ^ cx.clock.unix_secs();
            let mp = Multipart::new(&ranges, size, content_type, seed);
            h.field("Content-Type", mp.content_type().as_bytes());
            h.number("Content-Length", mp.content_length());
            Some(mp)
        } else {
            h.rendered(typed.content_type_field(), "Content-Type");
            match ranges.first() {
                Some(&r) => {
                    let mut cr = Vec::with_capacity(48);
                    range::content_range(r, size, &mut cr);
                    h.field("Content-Range", &cr);
                    h.number("Content-Length", r.len());
                }
                None => {
                    h.entry_length(rep.length_field());
                }
            }
            None
        };
        h.rendered(b"Accept-Ranges: bytes\r\n", "Accept-Ranges");
        representation_headers(&mut h, cx, &rep, &entry, site, encoding, vary);
        h.finish(self.keep, req.minor);
        if head_only || size == 0 {
            return status;
        }

        match multipart {
            Some(mp) => {
                // Parts are queued in reverse so the writer pops them in order.
                let mut trailer = cx.take_body();
                mp.trailer(&mut trailer);
                self.parts.push(Part { framing: trailer, range: None });
                for (i, &r) in mp.ranges().iter().enumerate().rev() {
                    let mut framing = cx.take_body();
                    mp.part_header(i, &mut framing);
                    self.parts.push(Part { framing, range: Some(r) });
                }
                // The writer moves to the first part once the head is out.
                self.rep = Some(rep);
            }
            None => {
                let r = ranges.first().copied().unwrap_or(ByteRange { start: 0, end: size - 1 });
                self.body = body_for(rep, r);
            }
        }
        status
    }

    /// Moves the next multipart part (its framing as the "head", its range as the body)
    /// into the output queue. False when none is left. (Inline: a response of one part,
    /// the usual one, pays one test and no call.)
    #[inline]
    pub(crate) fn next_part(&mut self, cx: &mut Ctx) -> bool {
        !self.parts.is_empty() && self.queue_part(cx)
    }

    /// [`Exchange::next_part`] when parts are left.
    #[inline(never)]
    fn queue_part(&mut self, cx: &mut Ctx) -> bool {
        let (Some(part), Some(rep)) = (self.parts.pop(), self.rep.clone()) else { return false };
        let old = std::mem::replace(&mut self.head, part.framing);
        cx.put_body(old);
        self.head_pos = 0;
        self.release_body(cx);
        if let Some(r) = part.range {
            self.body = body_for(rep, r);
        }
        true
    }

    /// A directory listing, from the cache (rendered at most once per version of the
    /// directory and view), with its validators and through the same preconditions as a file.
    fn listing_response(&mut self, cx: &mut Ctx, req: &Request<'_>, dir: &DirEntry, path: &str, site: &Site) -> u16 {
        let opts = listing::ListOptions {
            show_dotfiles: cx.cfg.dotfiles == DotfilePolicy::Allow && !cx.cfg.thttpd.enabled,
            max_entries: cx.cfg.listing_max_entries,
            // A listing always fits in the cache's byte budget, so it is never re-rendered
            // per request for being too large to keep.
            max_bytes: usize::try_from(cx.cfg.listing_max_bytes.min(cx.cfg.cache_max_bytes)).unwrap_or(usize::MAX),
        };
        let shown = path.strip_prefix(site.prefix.as_str()).unwrap_or(path);
        let view = listing::View::from_request(req.query.unwrap_or("").as_bytes(), req.accept.as_deref());
        let space = site.root.map_or(0, |i| i + 1);
        let (now, now_secs) = (cx.clock.now, cx.clock.unix_secs());
        let entry = match cx.cache.listing(dir, space, path, shown, view, &opts, now, now_secs) {
            Ok(e) => e,
            Err(e) => {
                cx.error(format_args!("listing {path:?}: {e}"));
                return self.error_response(cx, 500, req, Some(site));
            }
        };
        // No ranges for listings: If-Range has nothing to decide.
        let conds = Conditions {
            if_match: req.if_match.as_deref(),
            if_none_match: req.if_none_match.as_deref(),
            if_modified_since: req.if_modified_since,
            if_unmodified_since: req.if_unmodified_since,
            if_range: None,
        };
        let validators = Validators { etag: entry.etag.as_bytes(), last_modified: entry.last_modified_secs };
        let status = match conditional::evaluate(true, &conds, &validators) {
            Outcome::PreconditionFailed => return self.error_response(cx, 412, req, Some(site)),
            Outcome::NotModified => 304,
            Outcome::Proceed { .. } => 200,
        };
        let mut h =
            Head::new(&mut self.head, &mut self.fields, status, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        if status == 200 {
            h.field("Content-Type", entry.content_type.as_bytes());
            h.number("Content-Length", entry.size);
        }
        h.validators(&entry.validator_fields);
        // Stored, but checked with the validators before every reuse.
        h.field("Cache-Control", b"no-cache");
        h.field("Vary", b"Accept");
        h.finish(self.keep, req.minor);
        if status == 200 && req.method != Method::Head && entry.size > 0 {
            let end = entry.size - 1;
            self.body = body_for(entry, ByteRange { start: 0, end });
        }
        status
    }

    /// The status endpoint, for allowed client addresses only.
    pub(crate) fn status_page(&mut self, cx: &mut Ctx, req: &Request<'_>) -> u16 {
        if !cx.cfg.status_allow.iter().any(|n| n.contains(self.client)) {
            return self.error_response(cx, 403, req, None);
        }
        let format = status::Format::from_query(req.query);
        let mut buf = cx.take_body();
        cx.render_status(format, &mut buf);
        let mut h =
            Head::new(&mut self.head, &mut self.fields, 200, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Content-Type", format.content_type().as_bytes());
        h.number("Content-Length", buf.len() as u64);
        h.field("Cache-Control", b"no-store");
        h.finish(self.keep, req.minor);
        self.set_mem_body(cx, buf, req.method == Method::Head);
        200
    }

    /// An error response: a custom page when one is configured and found (`[errors]`, or
    /// `errors/errNNN.html` in the site's root, then the main root), else the built-in body.
    fn error_response(&mut self, cx: &mut Ctx, status: u16, req: &Request<'_>, site: Option<&Site>) -> u16 {
        if let Some(page) = self.find_error_page(cx, status, site) {
            let mut h =
                Head::new(&mut self.head, &mut self.fields, status, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
            h.field("Content-Type", page.content_type.as_bytes());
            h.number("Content-Length", page.size);
            if status == 405 {
                h.field("Allow", ALLOW);
            }
            // An error page describes this response, not a version of the target: it gets no
            // validator (the page file's would let a cache revalidate the error against the
            // page rather than the resource), and preconditions do not apply to it (RFC 9110
            // §13.2.1). `no-store` says what `no-cache` without a validator meant.
            h.field("Cache-Control", b"no-store");
            h.finish(self.keep, req.minor);
            if req.method != Method::Head && page.size > 0 {
                let end = page.size - 1;
                self.body = body_for(page, ByteRange { start: 0, end });
            }
            return status;
        }
        self.simple_response(cx, status, req, None)
    }

    fn find_error_page(&mut self, cx: &mut Ctx, status: u16, site: Option<&Site>) -> Option<Rc<FileEntry>> {
        if status < 400 {
            return None;
        }
        let configured = cx.cfg.error_pages.get(&status).cloned();
        let conventional = format!("/errors/err{status}.html");
        let main = Site { root: None, prefix: String::new() };
        let mut candidates: Vec<(&Site, String)> = Vec::with_capacity(3);
        if let Some(site) = site {
            if let Some(c) = &configured {
                candidates.push((site, format!("{}{c}", site.prefix)));
            }
            if site.root.is_some() || !site.prefix.is_empty() {
                candidates.push((site, format!("{}{conventional}", site.prefix)));
            }
        }
        if let Some(c) = &configured {
            candidates.push((&main, c.clone()));
        }
        candidates.push((&main, conventional));
        for (s, p) in candidates {
            if let Ok(Lookup::File(page)) = self.lookup(cx, s, &p) {
                return Some(page);
            }
        }
        None
    }

    /// A response with the small built-in HTML body (errors, redirects).
    pub(crate) fn simple_response(
        &mut self,
        cx: &mut Ctx,
        status: u16,
        req: &Request<'_>,
        extra: Option<(&str, &[u8])>,
    ) -> u16 {
        self.simple_response_raw(cx, status, req.minor, req.method == Method::Head, extra)
    }

    pub(crate) fn simple_response_raw(
        &mut self,
        cx: &mut Ctx,
        status: u16,
        minor: u8,
        head_only: bool,
        extra: Option<(&str, &[u8])>,
    ) -> u16 {
        self.release_body(cx);
        let mut buf = cx.take_body();
        error_body(&mut buf, status);
        let mut h =
            Head::new(&mut self.head, &mut self.fields, status, cx.clock.http_date(), cx.fixed(self.tls.is_some()));
        h.field("Content-Type", b"text/html; charset=utf-8");
        h.number("Content-Length", buf.len() as u64);
        if status == 405 {
            h.field("Allow", ALLOW);
        }
        if let Some((name, value)) = extra {
            h.field(name, value);
        }
        h.finish(self.keep, minor);
        self.set_mem_body(cx, buf, head_only);
        status
    }

    fn set_mem_body(&mut self, cx: &mut Ctx, buf: Vec<u8>, head_only: bool) {
        if head_only {
            cx.put_body(buf);
        } else {
            self.body = Body::Mem { buf, pos: 0 };
        }
    }
}

/// Whether `entry` was found to have no sibling variant recently enough to skip looking
/// again (`FileEntry::no_variants_until`): before the client's field is even parsed.
fn no_siblings_known(cx: &Ctx, entry: &FileEntry) -> bool {
    entry.no_variants_until.get().is_some_and(|until| cx.clock.now < until)
}

/// Whether `entry` is compressed on demand (`[compression] on_demand`, its size).
fn on_demand(cx: &Ctx, entry: &FileEntry) -> bool {
    #[cfg(feature = "compression")]
    return crate::ondemand::OnDemand::eligible(&cx.cfg.compression, entry);
    #[cfg(not(feature = "compression"))]
    {
        let _ = (cx, entry);
        false
    }
}

/// The on-demand variant of `entry` to send: the best one already made for the codings the
/// client accepts, if any (the best one is queued when it is not; `crate::ondemand`).
#[cfg(feature = "compression")]
fn on_demand_variant(cx: &mut Ctx, req: &Request<'_>, entry: &Rc<FileEntry>, site: &Site) -> Option<Variant> {
    // Without the field no coding is acceptable: nothing to choose or to queue.
    req.accept_encoding.as_ref()?;
    let mut accepted = std::mem::take(&mut cx.encodings);
    encoding::acceptable(req.accept_encoding.as_deref(), &cx.cfg.compression.encodings, &mut accepted);
    let space = site.root.map_or(0, |i| i + 1);
    let v = cx.ondemand.choose(&cx.cfg.compression, space, entry, &accepted);
    cx.encodings = accepted;
    v.map(|(s, e)| (s, Some(e)))
}

/// The body source for an inclusive byte range of a cached file.
pub(crate) fn body_for(rep: Rc<FileEntry>, r: ByteRange) -> Body {
    match &rep.body {
        cache::Body::Empty => Body::None,
        cache::Body::Mapped(_) | cache::Body::Memory(_) => {
            Body::Mapped { pos: r.start as usize, end: (r.end + 1) as usize, entry: rep }
        }
        // Whether it is copied rather than sent by `sendfile` is the transport's choice, at
        // its first write (`Conn::write`).
        cache::Body::Fd(_) => Body::File { pos: r.start, end: r.end + 1, entry: rep, stage: None },
    }
}

/// Headers that describe the selected representation: validators, caching, encoding.
fn representation_headers(
    h: &mut Head<'_>,
    cx: &Ctx,
    rep: &FileEntry,
    original: &FileEntry,
    site: &Site,
    encoding: Option<Encoding>,
    vary: Vary,
) {
    // `[[headers]]` patterns are URL paths: without thttpd's `-v` host directory.
    let url = original.url_path.strip_prefix(site.prefix.as_str()).unwrap_or(&original.url_path);
    h.validators(&rep.validator_fields);
    if let Some(e) = encoding {
        h.field("Content-Encoding", e.token().as_bytes());
    }
    match vary {
        Vary::No => {}
        Vary::AcceptEncoding => {
            h.rendered(b"Vary: Accept-Encoding\r\n", "Vary");
        }
        Vary::Accept => {
            h.rendered(b"Vary: Accept\r\n", "Vary");
        }
    }
    let mut cache_control: Option<&str> = None;
    for rule in matching_rules(cx, site, url, &original.content_type) {
        if let Some(cc) = &rule.cache_control {
            cache_control = Some(cc);
        }
        for (name, value) in &rule.headers {
            h.field(name, value.as_bytes());
        }
    }
    match (cache_control, cx.cfg.max_age) {
        (Some(cc), _) => {
            h.field("Cache-Control", cc.as_bytes());
        }
        (None, Some(age)) => {
            let mut v = String::with_capacity(32);
            let _ = write!(v, "max-age={age}");
            h.field("Cache-Control", v.as_bytes());
            let expires = UNIX_EPOCH + Duration::from_secs(cx.clock.unix_secs() + u64::from(age));
            h.field("Expires", httpdate::fmt_http_date(expires).as_bytes());
        }
        (None, None) => {}
    }
}

/// The `[[headers]]` rules, then those of the site's `_headers` file (routing), that match a
/// URL path (without thttpd's `-v` host directory) of this content type, in order: later
/// rules win.
fn matching_rules<'a>(
    cx: &'a Ctx,
    site: &Site,
    url: &'a str,
    content_type: &'a str,
) -> impl Iterator<Item = &'a crate::route::HeaderRule> {
    let site_rules = if cx.routes.active { cx.routes.header_rules(site.root.map_or(0, |i| i + 1)) } else { &[] };
    cx.cfg.header_rules.iter().chain(site_rules).filter(move |rule| {
        rule.pattern.as_ref().is_none_or(|p| p.matches(url))
            && rule.mime.as_ref().is_none_or(|m| content_type.starts_with(m.as_str()))
    })
}
