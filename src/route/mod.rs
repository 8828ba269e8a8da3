//! Site routing: what a request path maps to, decided once, before the file cache.
//!
//! `serve::routing` asks [`Routes::route`] about every GET/HEAD of a site that has routing
//! configured; a configuration without any (`Routes::active` false) never calls it, so such
//! a site takes exactly the path it took before routing existed: no allocation, no lookup.
//! Routing sits above the protocol: it sees a normalized path, a query, and an `Accept`
//! value, and answers with an [`Action`], so every protocol gets the same rules.
//!
//! The order, first decision wins (`docs/site.md` and `ferrohttpd.toml(5)` show the same list):
//! 1. **hidden paths** (`[routing] hidden` patterns, and the redirects and headers files) are 404,
//!    before and after any rewrite;
//! 2. **redirects and rewrites**: TOML `[[redirect]]` rules, then `[[rewrite]]` rules, then
//!    the site's `_redirects` lines, each in the order written; the first match applies.
//!    TOML rules always apply; a `_redirects` line without `!` applies only when the path
//!    does not name an existing file. A rewrite changes the path served and is done once;
//! 3. **clean URLs and the trailing-slash policy**, on the (possibly rewritten) path;
//! 4. **the fallback** file, for a GET/HEAD that would be a 404, accepts HTML, and has no
//!    asset extension;
//! 5. what is left is served by the ordinary pipeline, with its **error pages**.
//!
//! Rules are compiled at load ([`RuleSet`]): literal `from` paths go in a hash map and only
//! patterns with placeholders or a splat are scanned, so a literal path costs one hash
//! lookup whatever the number of literal rules.

pub mod netlify;
pub mod pattern;

use std::collections::HashMap;
use std::io::Read as _;

use pattern::{Captures, Pattern, Template};

use crate::fs::resolve::{self, DocRoot, DotfilePolicy, ResolveOptions, Resolved, SymlinkPolicy};

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An external redirect with this status (301, 302, 303, 307, 308).
    Redirect(u16),
    /// Serve `to` instead, with this status (200, or 404 for a not-found page).
    Rewrite(u16),
}

/// What a redirect does with the request's query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryMode {
    /// Appended to the target (after `&` when `to` has a query of its own).
    Keep,
    /// Dropped: the target's own query, if any, is all that is sent.
    Replace,
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub from: Pattern,
    pub to: Template,
    pub kind: Kind,
    /// Applies even when the path names an existing file.
    pub force: bool,
    pub query: QueryMode,
    /// Where it was written (`"[[redirect]] line 12"`, `"/srv/site/_redirects: line 3"`), for messages.
    pub origin: String,
}

/// A header rule (`[[headers]]`, or a block of a site's `_headers` file): extra response
/// headers for paths matching a pattern and/or files of a MIME type.
#[derive(Clone, Debug)]
pub struct HeaderRule {
    /// thttpd-style URL pattern (`/assets/**`, `**.css`); None matches every path.
    pub pattern: Option<crate::glob::Pattern>,
    /// Content-Type prefix ("image/", "text/html"); None matches every type.
    pub mime: Option<String>,
    /// Replaces the `max_age`-derived Cache-Control (and drops Expires) when set.
    pub cache_control: Option<String>,
    /// Additional fields, in order.
    pub headers: Vec<(String, String)>,
}

/// A TOML rule and the virtual host it is limited to (None: every site).
#[derive(Clone, Debug)]
pub struct ScopedRule {
    pub host: Option<String>,
    pub rule: Rule,
}

/// The trailing-slash policy for pages (directories with an index, clean-URL files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrailingSlash {
    /// As without routing: a directory without its slash is redirected to it; a clean-URL
    /// page is served with or without one.
    Leave,
    /// Pages have a slash: `/about` redirects to `/about/`, which serves `about.html` or
    /// `about/index.html`.
    Add,
    /// Pages have none: `/about/` redirects to `/about`, which serves `about/index.html`
    /// or `about.html`.
    Remove,
    /// Each page has one URL, decided by what it is (as Cloudflare Pages does): a file
    /// `x.html` is `/x`, a directory's `x/index.html` is `/x/`; the other spelling, and
    /// `/x.html` or `/x/index.html`, get 308 to it. A directory without an index beside
    /// `x.html` redirects to `/x` rather than answering 403. Clean URLs are on with it.
    Canonical,
}

/// `[routing]` and the rule arrays, as the configuration holds them.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The Netlify-style rules file read at each site's root ("_redirects"), if enabled.
    pub redirects_file: Option<String>,
    /// The Netlify-style header rules file read at each site's root ("_headers").
    pub headers_file: Option<String>,
    pub clean_urls: bool,
    /// Extensions (without the dot) a clean URL may omit, tried in order.
    pub clean_url_extensions: Vec<String>,
    /// Redirect (301) `/about.html` to `/about`, and `/x/index.html` to `/x/`.
    pub clean_url_redirect: bool,
    pub trailing_slash: TrailingSlash,
    /// URL path of the file that answers misses (an SPA's `/index.html`).
    pub fallback: Option<String>,
    pub fallback_status: u16,
    /// Paths never served (404), beyond dotfiles: `crate::glob` patterns.
    pub hidden: Vec<crate::glob::Pattern>,
    /// `[[redirect]]` and `[[rewrite]]` rules, redirects first.
    pub rules: Vec<ScopedRule>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            redirects_file: None,
            headers_file: None,
            clean_urls: false,
            clean_url_extensions: vec!["html".into()],
            clean_url_redirect: false,
            trailing_slash: TrailingSlash::Leave,
            fallback: None,
            fallback_status: 200,
            hidden: Vec::new(),
            rules: Vec::new(),
        }
    }
}

impl Settings {
    /// Whether any routing is configured at all.
    pub fn active(&self) -> bool {
        self.redirects_file.is_some()
            || self.headers_file.is_some()
            || self.clean_urls
            || self.trailing_slash != TrailingSlash::Leave
            || self.fallback.is_some()
            || !self.hidden.is_empty()
            || !self.rules.is_empty()
    }
}

/// Rules in order, with an index: literal paths by hash, the others scanned.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    literal: HashMap<String, Vec<u32>>,
    wild: Vec<u32>,
}

impl RuleSet {
    fn push(&mut self, rule: Rule) {
        let i = self.rules.len() as u32;
        match rule.from.literal() {
            Some(key) => self.literal.entry(key).or_default().push(i),
            None => self.wild.push(i),
        }
        self.rules.push(rule);
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule (in written order) matching `path` whose shadowing allows it;
    /// `exists` is asked (at most once) whether the path names a file.
    pub fn find<'p>(&self, path: &'p str, exists: &mut dyn FnMut() -> bool) -> Option<(&Rule, Captures<'p>)> {
        let key = match path.strip_suffix('/') {
            Some(t) if !t.is_empty() => t,
            _ => path,
        };
        let lits = self.literal.get(key).map_or(&[][..], Vec::as_slice);
        let (mut a, mut b) = (0, 0);
        let mut file: Option<bool> = None;
        loop {
            let i = match (lits.get(a), self.wild.get(b)) {
                (Some(&l), Some(&w)) if l < w => {
                    a += 1;
                    l
                }
                (_, Some(&w)) => {
                    b += 1;
                    w
                }
                (Some(&l), None) => {
                    a += 1;
                    l
                }
                (None, None) => return None,
            };
            let rule = &self.rules[i as usize];
            if let Some(caps) = rule.from.captures(path) {
                if rule.force || !*file.get_or_insert_with(&mut *exists) {
                    return Some((rule, caps));
                }
            }
        }
    }
}

/// What a path is, as far as routing needs to know (from the file cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A file (for a path with a trailing slash: the directory's index file).
    File,
    /// A directory, asked for without its slash.
    DirNoSlash,
    /// A directory with its slash and no index file (listed, or 403).
    Listing,
    /// Nothing there (404).
    Missing,
    /// Anything else (403, an I/O error): left to the pipeline.
    Other,
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Serve the (possibly changed) path through the pipeline; a status other than 200
    /// means the file found is sent as the body of that status (the fallback's 404).
    Serve { status: u16 },
    /// Answer with this redirect; `location` is safe to send (see [`pattern::Template`]).
    Redirect { status: u16, location: Vec<u8> },
    /// Answer with this error status (and the error pages).
    Status(u16),
}

/// One site's compiled routing.
#[derive(Debug, Default)]
struct SiteRoutes {
    rules: RuleSet,
    /// From the site's headers file, applied after `[[headers]]`.
    headers: Vec<HeaderRule>,
}

/// The routing of every site: index 0 is the main root, `i + 1` the `[[vhost]]` number `i`.
#[derive(Debug, Default)]
pub struct Routes {
    sites: Vec<SiteRoutes>,
    settings: Settings,
    /// False when nothing is configured: the caller then never asks.
    pub active: bool,
}

/// The largest redirects file read.
const MAX_FILE: u64 = 1 << 20;

impl Routes {
    /// Compiles the rules of every site: the TOML rules of its scope, then its redirects
    /// file. `roots` are the main root then the virtual hosts, as in `Config::vhosts`.
    /// Returns the warnings for skipped lines beside the routes.
    pub fn build(
        settings: &Settings,
        roots: &[(&str, &DocRoot)],
        opts: &ResolveOptions<'_>,
    ) -> Result<(Routes, Vec<String>), String> {
        let mut warnings = Vec::new();
        if !settings.active() {
            return Ok((Routes::default(), warnings));
        }
        let mut sites = Vec::with_capacity(roots.len());
        for (i, (host, root)) in roots.iter().enumerate() {
            let mut rules = RuleSet::default();
            for r in &settings.rules {
                let applies = match &r.host {
                    None => true,
                    Some(h) => i > 0 && h == host,
                };
                if applies {
                    rules.push(r.rule.clone());
                }
            }
            if let Some(name) = &settings.redirects_file {
                if let Some(text) = read_root_file(root, name, opts)? {
                    let label = root.path().join(name).display().to_string();
                    let (parsed, mut w) = netlify::parse(&label, &text)?;
                    warnings.append(&mut w);
                    for r in parsed {
                        rules.push(r);
                    }
                }
            }
            let mut headers = Vec::new();
            if let Some(name) = &settings.headers_file {
                if let Some(text) = read_root_file(root, name, opts)? {
                    let label = root.path().join(name).display().to_string();
                    headers = netlify::parse_headers(&label, &text)?;
                }
            }
            sites.push(SiteRoutes { rules, headers });
        }
        Ok((Routes { sites, settings: settings.clone(), active: true }, warnings))
    }

    /// [`Routes::build`] for the opened roots: the main root, then the virtual hosts' (as
    /// in `Config::vhosts`); `symlinks` and `dotfiles` are the server's policies.
    pub fn for_roots(
        settings: &Settings,
        symlinks: SymlinkPolicy,
        dotfiles: DotfilePolicy,
        root: &DocRoot,
        vroots: &[(String, DocRoot)],
    ) -> Result<(Routes, Vec<String>), String> {
        if !settings.active() {
            return Ok((Routes::default(), Vec::new()));
        }
        let opts = ResolveOptions { symlinks, dotfiles, index: &[], site_depth: 0 };
        let mut roots: Vec<(&str, &DocRoot)> = vec![("", root)];
        roots.extend(vroots.iter().map(|(h, r)| (h.as_str(), r)));
        Routes::build(settings, &roots, &opts)
    }

    /// Number of rules for a site (for tests and messages).
    pub fn rule_count(&self, site: usize) -> usize {
        self.sites.get(site).map_or(0, |s| s.rules.len())
    }

    /// The header rules of a site's headers file (empty without one).
    pub fn header_rules(&self, site: usize) -> &[HeaderRule] {
        self.sites.get(site).map_or(&[], |s| s.headers.as_slice())
    }

    fn hidden(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or("");
        let s = &self.settings;
        let rules_file = path.len() == name.len() + 1
            && (s.redirects_file.as_deref() == Some(name) || s.headers_file.as_deref() == Some(name));
        rules_file || s.hidden.iter().any(|p| p.matches(path))
    }

    /// Decides what `path` (normalized, of site `site`) maps to. `path` is changed in place
    /// when another file is to be served. `probe` looks a path up in the file cache.
    pub fn route(
        &self,
        site: usize,
        path: &mut String,
        query: Option<&str>,
        accept: Option<&[u8]>,
        probe: &mut dyn FnMut(&str) -> Probe,
    ) -> Action {
        if self.hidden(path) {
            return Action::Status(404);
        }
        let s = &self.settings;
        let mut status = 200;
        let mut rewritten = false;
        if let Some(site) = self.sites.get(site).filter(|x| !x.rules.is_empty()) {
            let here: &str = path;
            let found = site.rules.find(here, &mut || probe(here) == Probe::File);
            if let Some((rule, caps)) = found {
                let mut target = Vec::with_capacity(64);
                rule.to.expand(&caps, &mut target);
                match rule.kind {
                    Kind::Redirect(code) => {
                        append_query(&mut target, rule, query);
                        return Action::Redirect { status: code, location: target };
                    }
                    Kind::Rewrite(code) => {
                        if resolve::normalize(&target, path).is_err() {
                            return Action::Status(400);
                        }
                        status = code;
                        rewritten = true;
                    }
                }
            }
        }
        match self.pages(path, query, rewritten, probe) {
            Some(Page::Redirect(location)) => {
                let status = if s.trailing_slash == TrailingSlash::Canonical { 308 } else { 301 };
                return Action::Redirect { status, location };
            }
            // The file a rewrite or a clean URL settled on is checked too: `/secret`
            // must not serve a hidden `/secret.html`.
            Some(Page::Serve) if self.hidden(path) => return Action::Status(404),
            Some(Page::Serve) => return Action::Serve { status },
            None if rewritten && self.hidden(path) => return Action::Status(404),
            None => {}
        }
        // A miss.
        if let Some(fb) = &s.fallback {
            if status == 200 && wants_html(accept) && !self.asset(path) {
                path.clear();
                path.push_str(fb);
                return Action::Serve { status: s.fallback_status };
            }
        }
        Action::Serve { status }
    }

    /// Clean URLs and the trailing-slash policy. `Some(Serve)` when something is there to
    /// serve (`path` set to it), a redirect, or `None` for a miss.
    fn pages(
        &self,
        path: &mut String,
        query: Option<&str>,
        rewritten: bool,
        probe: &mut dyn FnMut(&str) -> Probe,
    ) -> Option<Page> {
        let s = &self.settings;
        let redirect = |target: &str| {
            let mut loc = Vec::with_capacity(target.len() + 1 + query.map_or(0, str::len));
            crate::http::encode_path(target, &mut loc);
            if let Some(q) = query {
                loc.push(b'?');
                loc.extend_from_slice(q.as_bytes());
            }
            Some(Page::Redirect(loc))
        };
        let slash = path.ends_with('/');
        let stem_len = if slash { path.len() - 1 } else { path.len() };
        if stem_len == 0 {
            return (probe(path) != Probe::Missing).then_some(Page::Serve);
        }
        // Allocated only once a clean-URL candidate is tried.
        let mut candidate = String::new();
        let canonical = s.trailing_slash == TrailingSlash::Canonical && !rewritten;
        let clean_urls = s.clean_urls || s.trailing_slash == TrailingSlash::Canonical;
        let clean = |candidate: &mut String, probe: &mut dyn FnMut(&str) -> Probe| -> bool {
            if !clean_urls {
                return false;
            }
            for ext in &s.clean_url_extensions {
                candidate.clear();
                candidate.push_str(&path[..stem_len]);
                candidate.push('.');
                candidate.push_str(ext);
                if probe(candidate) == Probe::File {
                    return true;
                }
            }
            false
        };
        match (slash, probe(path)) {
            (false, Probe::File) => {
                if clean_urls && (s.clean_url_redirect || canonical) && !rewritten {
                    if let Some(target) = self.clean_form(path) {
                        return redirect(&target);
                    }
                }
                Some(Page::Serve)
            }
            (false, Probe::DirNoSlash) => {
                // A file beats a directory of the same name (Netlify, Cloudflare Pages).
                if clean(&mut candidate, probe) {
                    if s.trailing_slash == TrailingSlash::Add && !rewritten {
                        return redirect(&format!("{path}/"));
                    }
                    *path = candidate;
                } else if canonical {
                    return redirect(&format!("{path}/"));
                } else if s.trailing_slash == TrailingSlash::Remove || rewritten {
                    path.push('/');
                }
                Some(Page::Serve)
            }
            (false, Probe::Missing) => {
                if !clean(&mut candidate, probe) {
                    return None;
                }
                if s.trailing_slash == TrailingSlash::Add && !rewritten {
                    return redirect(&format!("{path}/"));
                }
                *path = candidate;
                Some(Page::Serve)
            }
            (true, Probe::File) => {
                if s.trailing_slash == TrailingSlash::Remove && !rewritten {
                    return redirect(&path[..stem_len]);
                }
                Some(Page::Serve)
            }
            (true, Probe::Missing) => {
                if !clean(&mut candidate, probe) {
                    return None;
                }
                if (s.trailing_slash == TrailingSlash::Remove || canonical) && !rewritten {
                    return redirect(&path[..stem_len]);
                }
                *path = candidate;
                Some(Page::Serve)
            }
            // A directory without an index beside `x.html`: the page is `/x`.
            (true, Probe::Listing) if canonical && clean(&mut candidate, probe) => redirect(&path[..stem_len]),
            _ => Some(Page::Serve),
        }
    }

    /// `/about.html` -> `/about` (`/about/` under "add"); `/x/index.html` -> `/x/` (`/x`
    /// under "remove"; `/` for the root's index). None for any other file.
    fn clean_form(&self, path: &str) -> Option<String> {
        let (dir, name) = path.rsplit_once('/')?;
        let (stem, ext) = name.rsplit_once('.')?;
        if stem.is_empty() || !self.settings.clean_url_extensions.iter().any(|e| e == ext) {
            return None;
        }
        if stem == "index" {
            if dir.is_empty() || self.settings.trailing_slash != TrailingSlash::Remove {
                return Some(format!("{dir}/"));
            }
            return Some(dir.to_string());
        }
        if self.settings.trailing_slash == TrailingSlash::Add {
            return Some(format!("{dir}/{stem}/"));
        }
        Some(format!("{dir}/{stem}"))
    }

    /// A last segment with an extension that is not a clean-URL one (`app.js`, `logo.png`):
    /// such a miss stays a 404, never the fallback page.
    fn asset(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or("");
        match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => !self.settings.clean_url_extensions.iter().any(|e| e == ext),
            _ => false,
        }
    }
}

enum Page {
    Serve,
    Redirect(Vec<u8>),
}

fn append_query(target: &mut Vec<u8>, rule: &Rule, query: Option<&str>) {
    if rule.query == QueryMode::Keep {
        if let Some(q) = query.filter(|q| !q.is_empty()) {
            target.push(if rule.to.has_query { b'&' } else { b'?' });
            target.extend_from_slice(q.as_bytes());
        }
    }
}

/// Whether a client takes an HTML page: no `Accept` at all, or one listing `text/html`,
/// `application/xhtml+xml`, `text/*` or `*/*` with a q-value above 0. `Accept:
/// application/json` or `image/*` alone does not.
pub fn wants_html(accept: Option<&[u8]>) -> bool {
    let Some(v) = accept else { return true };
    crate::http::list_items(v).any(|item| {
        let mut parts = item.split(|&b| b == b';');
        let range = parts.next().unwrap_or_default().trim_ascii();
        let html = [&b"text/html"[..], b"application/xhtml+xml", b"text/*", b"*/*"]
            .iter()
            .any(|m| range.eq_ignore_ascii_case(m));
        let zero = parts.any(|p| {
            let p = p.trim_ascii();
            p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") && p[2..].iter().all(|&c| c == b'0' || c == b'.')
        });
        html && !zero
    })
}

/// Reads a small file at a root (the redirects file) through the same safe resolver as
/// requests. None when it does not exist.
fn read_root_file(root: &DocRoot, name: &str, opts: &ResolveOptions<'_>) -> Result<Option<String>, String> {
    let label = root.path().join(name);
    let url = format!("/{name}");
    match resolve::resolve(root, &url, opts) {
        Ok(Resolved::File { file, meta, .. }) => {
            if meta.len() > MAX_FILE {
                return Err(format!("{}: larger than {MAX_FILE} bytes", label.display()));
            }
            let mut text = String::new();
            file.take(MAX_FILE).read_to_string(&mut text).map_err(|e| format!("{}: {e}", label.display()))?;
            Ok(Some(text))
        }
        Ok(_) => Err(format!("{} is not a file", label.display())),
        Err(resolve::ResolveError::NotFound) => Ok(None),
        Err(e) => Err(format!("{}: cannot be read ({} for a request)", label.display(), e.status())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(from: &str, to: &str, kind: Kind, force: bool) -> Rule {
        let p = Pattern::new(from).unwrap();
        let t = Template::new(to, &p, true).unwrap();
        Rule { from: p, to: t, kind, force, query: QueryMode::Keep, origin: String::new() }
    }

    #[test]
    fn first_match_wins_across_literals_and_patterns() {
        let mut set = RuleSet::default();
        set.push(rule("/a/*", "/wild", Kind::Redirect(301), true));
        set.push(rule("/a/b", "/lit", Kind::Redirect(301), true));
        set.push(rule("/c", "/c1", Kind::Redirect(302), true));
        set.push(rule("/:x", "/p/:x", Kind::Redirect(302), true));
        set.push(rule("/c", "/c2", Kind::Redirect(302), true));
        let mut yes = || true;
        let to = |set: &RuleSet, p: &str| {
            let (r, caps) = set.find(p, &mut || false)?;
            let mut out = Vec::new();
            r.to.expand(&caps, &mut out);
            Some(String::from_utf8(out).unwrap())
        };
        assert_eq!(to(&set, "/a/b").as_deref(), Some("/wild"));
        assert_eq!(to(&set, "/c").as_deref(), Some("/c1"));
        assert_eq!(to(&set, "/c/").as_deref(), Some("/c1"));
        assert_eq!(to(&set, "/d").as_deref(), Some("/p/d"));
        assert_eq!(to(&set, "/d/e"), None);
        assert!(set.find("/c", &mut yes).is_some(), "forced rules ignore existing files");
    }

    #[test]
    fn shadowing_asks_once_and_skips_unforced_rules() {
        let mut set = RuleSet::default();
        set.push(rule("/x", "/one", Kind::Rewrite(200), false));
        set.push(rule("/*", "/two", Kind::Rewrite(200), false));
        set.push(rule("/x", "/three", Kind::Rewrite(200), true));
        let mut asked = 0;
        let mut exists = || {
            asked += 1;
            true
        };
        let (r, _) = set.find("/x", &mut exists).unwrap();
        assert_eq!(r.to, Template::new("/three", &Pattern::new("/x").unwrap(), false).unwrap());
        assert_eq!(asked, 1);
    }

    #[test]
    fn html_clients() {
        assert!(wants_html(None));
        assert!(wants_html(Some(b"text/html,application/xhtml+xml,*/*;q=0.8")));
        assert!(wants_html(Some(b"*/*")));
        assert!(wants_html(Some(b"TEXT/HTML; charset=utf-8")));
        assert!(!wants_html(Some(b"application/json")));
        assert!(!wants_html(Some(b"image/avif,image/webp,image/*")));
        assert!(!wants_html(Some(b"text/html;q=0, application/json")));
        assert!(!wants_html(Some(b"")));
    }
}
