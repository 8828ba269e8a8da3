//! `from` patterns and `to` templates of redirect and rewrite rules.
//!
//! A pattern is a URL path made of `/`-separated segments: a literal segment matches itself,
//! `:name` (a letter, then letters, digits or `_`) matches one non-empty segment and
//! captures it, and a final `*` (the *splat*) matches the rest of the path, possibly empty
//! (`/news/*` matches `/news`, `/news/` and `/news/2024/05/x`). One trailing slash on the
//! pattern or the path is ignored (`/about` and `/about/` are the same rule), as on Netlify.
//! Matching works on the normalized, percent-decoded path and allocates nothing.
//!
//! A template is the rule's `to`: a path (`/blog/:year/:splat`) or, for redirects only, an
//! absolute `http(s)://` URL whose host part is literal. `:name` and `:splat` are replaced
//! by what the pattern captured, percent-encoded again, so a captured value can never add a
//! `?`, a `#`, a space, CR or LF. The literal text must be printable ASCII without spaces.

use std::fmt;

/// At most this many `:placeholders` per pattern (the captures live in a fixed array).
pub const MAX_PARAMS: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Param(String),
}

/// A compiled `from` pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    segs: Vec<Seg>,
    splat: bool,
}

/// What a match captured: slices of the matched path.
#[derive(Clone, Copy, Debug, Default)]
pub struct Captures<'p> {
    params: [&'p str; MAX_PARAMS],
    splat: &'p str,
}

/// Why a pattern or template was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct PatternError(pub String);

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic()) && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Strips one trailing slash, except from the root.
fn trim_slash(p: &str) -> &str {
    match p.strip_suffix('/') {
        Some(t) if !t.is_empty() => t,
        _ => p,
    }
}

impl Pattern {
    /// Compiles a `from` pattern.
    pub fn new(src: &str) -> Result<Pattern, PatternError> {
        if !src.starts_with('/') {
            return Err(PatternError(format!("\"{src}\" must start with /")));
        }
        if !src.bytes().all(|b| b.is_ascii_graphic()) || src.contains(['?', '#', '\\']) {
            return Err(PatternError(format!(
                "\"{src}\" must be a URL path of printable characters without ?, # or \\"
            )));
        }
        let body = trim_slash(src);
        let mut segs = Vec::new();
        let mut splat = false;
        if body != "/" {
            let parts: Vec<&str> = body[1..].split('/').collect();
            for (i, part) in parts.iter().enumerate() {
                if *part == "*" && i + 1 == parts.len() {
                    splat = true;
                } else if part.contains('*') {
                    return Err(PatternError(format!("\"{src}\": * is allowed only as the whole last segment")));
                } else if let Some(name) = part.strip_prefix(':') {
                    if !is_name(name) || name == "splat" {
                        return Err(PatternError(format!("\"{src}\": \":{name}\" is not a placeholder name")));
                    }
                    if segs.iter().any(|s| *s == Seg::Param(name.to_string())) {
                        return Err(PatternError(format!("\"{src}\": \":{name}\" appears twice")));
                    }
                    segs.push(Seg::Param(name.to_string()));
                } else if part.is_empty() || *part == "." || *part == ".." {
                    return Err(PatternError(format!("\"{src}\" is not a normalized path")));
                } else {
                    segs.push(Seg::Lit((*part).to_string()));
                }
            }
        }
        let pattern = Pattern { segs, splat };
        if pattern.param_names().count() > MAX_PARAMS {
            return Err(PatternError(format!("\"{src}\": at most {MAX_PARAMS} placeholders")));
        }
        Ok(pattern)
    }

    /// The path this pattern matches exactly, without a trailing slash, if it has no
    /// placeholder and no splat (the key of the literal index).
    pub fn literal(&self) -> Option<String> {
        if self.splat || self.segs.iter().any(|s| matches!(s, Seg::Param(_))) {
            return None;
        }
        if self.segs.is_empty() {
            return Some("/".into());
        }
        let mut out = String::new();
        for s in &self.segs {
            if let Seg::Lit(l) = s {
                out.push('/');
                out.push_str(l);
            }
        }
        Some(out)
    }

    fn param_names(&self) -> impl Iterator<Item = &str> {
        self.segs.iter().filter_map(|s| match s {
            Seg::Param(n) => Some(n.as_str()),
            Seg::Lit(_) => None,
        })
    }

    /// Matches a normalized path; the captures borrow from it.
    pub fn captures<'p>(&self, path: &'p str) -> Option<Captures<'p>> {
        let mut caps = Captures::default();
        let body = trim_slash(path);
        let mut rest = if body == "/" { "" } else { body.strip_prefix('/')? };
        let mut n = 0;
        for seg in &self.segs {
            if rest.is_empty() {
                return None;
            }
            let (head, tail) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, ""),
            };
            match seg {
                Seg::Lit(l) if l == head => {}
                Seg::Lit(_) => return None,
                Seg::Param(_) => {
                    caps.params[n] = head;
                    n += 1;
                }
            }
            rest = tail;
        }
        if self.splat {
            // The rest of the request's own path, its trailing slash included.
            let consumed = body.len() - rest.len();
            caps.splat = if rest.is_empty() { "" } else { path.get(consumed..).unwrap_or("") };
            Some(caps)
        } else if rest.is_empty() {
            Some(caps)
        } else {
            None
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Param(usize),
    Splat,
}

/// A compiled `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    /// `to` is an absolute `http://` or `https://` URL.
    pub absolute: bool,
    /// `to` has its own query (`?...`).
    pub has_query: bool,
}

impl Template {
    /// Compiles `to` against the pattern whose captures it uses.
    pub fn new(src: &str, from: &Pattern, allow_absolute: bool) -> Result<Template, PatternError> {
        if src.is_empty() || !src.bytes().all(|b| b.is_ascii_graphic()) || src.contains('#') {
            return Err(PatternError(format!("\"{src}\" must be printable ASCII without spaces or #")));
        }
        let lower = src.to_ascii_lowercase();
        let absolute = lower.starts_with("http://") || lower.starts_with("https://");
        if absolute && !allow_absolute {
            return Err(PatternError(format!("\"{src}\" must be a path under the root, not a URL")));
        }
        if !absolute && (!src.starts_with('/') || src.starts_with("//")) {
            return Err(PatternError(format!("\"{src}\" must be a path starting with a single / or an http(s) URL")));
        }
        // Placeholders are substituted only in the path (and query): never in the host.
        let path_start = if absolute {
            let after = src.find("://").map_or(0, |i| i + 3);
            match src[after..].find('/') {
                Some(i) => after + i,
                None => src.len(),
            }
        } else {
            0
        };
        let names: Vec<&str> = from.param_names().collect();
        let mut parts = vec![Part::Lit(src[..path_start].to_string())];
        let b = src.as_bytes();
        let mut i = path_start;
        let mut lit = String::new();
        while i < b.len() {
            if b[i] == b':' && b.get(i + 1).is_some_and(u8::is_ascii_alphabetic) {
                let end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map_or(b.len(), |p| i + 1 + p);
                let name = &src[i + 1..end];
                let part = if name == "splat" {
                    if !from.splat {
                        return Err(PatternError(format!("\"{src}\" uses :splat but the pattern has no *")));
                    }
                    Part::Splat
                } else {
                    match names.iter().position(|n| *n == name) {
                        Some(k) => Part::Param(k),
                        None => return Err(PatternError(format!("\"{src}\": the pattern has no \":{name}\""))),
                    }
                };
                parts.push(Part::Lit(std::mem::take(&mut lit)));
                parts.push(part);
                i = end;
            } else {
                lit.push(char::from(b[i]));
                i += 1;
            }
        }
        parts.push(Part::Lit(lit));
        parts.retain(|p| !matches!(p, Part::Lit(l) if l.is_empty()));
        Ok(Template { parts, absolute, has_query: src.contains('?') })
    }

    /// Writes the substituted target into `out` (cleared first), captured values
    /// percent-encoded. A relative result always starts with exactly one `/`.
    pub fn expand(&self, caps: &Captures<'_>, out: &mut Vec<u8>) {
        out.clear();
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.extend_from_slice(l.as_bytes()),
                Part::Param(k) => crate::http::encode_path(caps.params[*k], out),
                Part::Splat => crate::http::encode_path(caps.splat, out),
            }
        }
        if !self.absolute {
            // "/:splat" with an empty splat, or a capture starting with '/', must not make a
            // protocol-relative "//host" reference.
            let extra = out.iter().take_while(|&&c| c == b'/').count().saturating_sub(1);
            out.drain(..extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(from: &str, to: &str, path: &str) -> Option<String> {
        let p = Pattern::new(from).unwrap();
        let t = Template::new(to, &p, true).unwrap();
        let caps = p.captures(path)?;
        let mut out = Vec::new();
        t.expand(&caps, &mut out);
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn literals_placeholders_and_splats() {
        assert_eq!(expand("/old", "/new", "/old").as_deref(), Some("/new"));
        assert_eq!(expand("/old/", "/new", "/old").as_deref(), Some("/new"));
        assert_eq!(expand("/old", "/new", "/old/").as_deref(), Some("/new"));
        assert_eq!(expand("/old", "/new", "/older"), None);
        assert_eq!(expand("/blog/:y/:slug", "/posts/:slug-:y", "/blog/2024/hi").as_deref(), Some("/posts/hi-2024"));
        assert_eq!(expand("/blog/:y/:slug", "/x", "/blog/2024"), None);
        assert_eq!(expand("/blog/:y/:slug", "/x", "/blog/2024/a/b"), None);
        assert_eq!(expand("/news/*", "/n/:splat", "/news/2024/05/x").as_deref(), Some("/n/2024/05/x"));
        assert_eq!(expand("/news/*", "/n/:splat", "/news/a/").as_deref(), Some("/n/a/"));
        assert_eq!(expand("/news/*", "/n/:splat", "/news").as_deref(), Some("/n/"));
        assert_eq!(expand("/news/*", "/n/:splat", "/newsy"), None);
        assert_eq!(expand("/*", "/app/:splat", "/").as_deref(), Some("/app/"));
        assert_eq!(expand("/", "/home", "/").as_deref(), Some("/home"));
        assert_eq!(
            expand("/go/*", "https://example.com/:splat?x=1", "/go/a b").as_deref(),
            Some("https://example.com/a%20b?x=1")
        );
        assert_eq!(Pattern::new("/a/b/").unwrap().literal().as_deref(), Some("/a/b"));
        assert_eq!(Pattern::new("/a/:b").unwrap().literal(), None);
    }

    #[test]
    fn captured_values_cannot_break_out() {
        assert_eq!(expand("/*", "/:splat", "/\r\nSet-Cookie:x").as_deref(), Some("/%0D%0ASet-Cookie:x"));
        assert_eq!(expand("/r/:a", "/:a/x", "/r/?#").as_deref(), Some("/%3F%23/x"));
        // An empty splat after "/" never yields "//".
        assert_eq!(expand("/x/*", "/:splat", "/x").as_deref(), Some("/"));
    }

    proptest::proptest! {
        /// Whatever the request path, a relative redirect's Location is one path starting
        /// with a single `/`, with no byte a header or a URL could be split at.
        #[test]
        fn locations_are_always_safe(raw in "(/[a-z%0-9 ?#:@./\\\\\r\n-]{0,12}){1,5}/?") {
            let mut path = String::new();
            if crate::fs::resolve::normalize(raw.as_bytes(), &mut path).is_ok() {
                for (from, to) in [("/*", "/:splat"), ("/*", "/:splat/"), ("/:a/*", "/:a/:splat?x=1"), ("/:a", "/p/:a")] {
                    let p = Pattern::new(from).unwrap();
                    let t = Template::new(to, &p, true).unwrap();
                    if let Some(caps) = p.captures(&path) {
                        let mut out = Vec::new();
                        t.expand(&caps, &mut out);
                        proptest::prop_assert!(out.starts_with(b"/") && !out.starts_with(b"//"), "{:?}", out);
                        proptest::prop_assert!(!out.iter().any(|&b| b <= b' ' || b == b'#' || b == 0x7f || b == b'\\'), "{:?}", out);
                        proptest::prop_assert_eq!(out.iter().filter(|&&b| b == b'?').count(), usize::from(t.has_query));
                    }
                }
            }
        }
    }

    #[test]
    fn bad_patterns_and_templates() {
        assert!(Pattern::new("old").is_err());
        assert!(Pattern::new("/a/*/b").is_err());
        assert!(Pattern::new("/a*").is_err());
        assert!(Pattern::new("/:1x").is_err());
        assert!(Pattern::new("/:a/:a").is_err());
        assert!(Pattern::new("/a b").is_err());
        assert!(Pattern::new("/a?b").is_err());
        assert!(Pattern::new("/a/../b").is_err());
        let p = Pattern::new("/a/:b").unwrap();
        assert!(Template::new("//evil.example/", &p, true).is_err());
        assert!(Template::new("/x/:c", &p, true).is_err());
        assert!(Template::new("/x/:splat", &p, true).is_err());
        assert!(Template::new("https://example.com/", &p, false).is_err());
        assert!(Template::new("x", &p, true).is_err());
        assert!(Template::new("/a\r\n", &p, true).is_err());
        // A placeholder-looking host part stays literal text.
        let t = Template::new("https://:b.example/:b", &p, true).unwrap();
        let mut out = Vec::new();
        t.expand(&p.captures("/a/z").unwrap(), &mut out);
        assert_eq!(out, b"https://:b.example/z");
    }
}
