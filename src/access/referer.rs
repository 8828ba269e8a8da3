//! thttpd's referrer check (`urlpat`, `localpat`, `noemptyreferrers`): keeps other sites from
//! embedding matching files (images, typically).
//!
//! thttpd's `really_check_referer()`, for a URL path matching `urlpat`:
//!
//! - an empty or missing `Referer`, or one without `//`, is allowed unless
//!   `noemptyreferrers`;
//! - otherwise the referrer's host (between `//` and the next `/`, `:`, `?` or `#`,
//!   lowercased) must match `localpat`; without `localpat` it must equal the local host name:
//!   the request's `Host` (lowercased, port removed), or else [`RefererPolicy::server_hostname`];
//!   when there is neither, the request is allowed (thttpd "gives up" there too).
//!
//! URL paths not matching `urlpat` are always allowed. A refusal is a 403.
//!
//! Differences from thttpd: without `localpat` thttpd compares with the server's host name
//! unless in vhost mode; here the request's `Host` is used whenever present (it is what the
//! browser put in the referrer of a local page), the server name only as a fallback. A
//! `user:password@` part of the referrer is skipped (thttpd would take `user` as the host) and
//! a bracketed IPv6 host is kept whole.

use crate::glob::Pattern;

/// The configured referrer check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefererPolicy {
    /// `urlpat`: the URL paths that need a local referrer.
    pub url_pattern: Pattern,
    /// `localpat`: the referrer hosts that count as local.
    pub local_pattern: Option<Pattern>,
    /// `noemptyreferrers`: refuse matching URLs without a referrer too.
    pub no_empty: bool,
    /// The server's own name (thttpd: `-h` or the machine's host name), used as the local
    /// host when there is no `localpat` and the request has no `Host`.
    pub server_hostname: Option<String>,
}

impl RefererPolicy {
    /// A policy from thttpd's settings, with no server host name.
    pub fn new(url_pattern: &str, local_pattern: Option<&str>, no_empty: bool) -> RefererPolicy {
        RefererPolicy {
            url_pattern: Pattern::new(url_pattern),
            local_pattern: local_pattern.map(Pattern::new),
            no_empty,
            server_hostname: None,
        }
    }

    /// thttpd's `really_check_referer()`: may `url_path` (the decoded request path; with
    /// vhosts, as thttpd matches `origfilename`, without the host) be served to a request
    /// with this `Referer` header value and `Host` header value? `false` → 403.
    pub fn allowed(&self, url_path: &str, referer: Option<&[u8]>, host: Option<&str>) -> bool {
        if !self.url_pattern.matches(url_path) {
            return true;
        }
        let Some(ref_host) = referer.and_then(referer_host) else {
            return !self.no_empty;
        };
        if let Some(local) = &self.local_pattern {
            return local.matches(&ref_host);
        }
        let local = host.map(normalize_host).or_else(|| self.server_hostname.as_deref().map(normalize_host));
        match local {
            Some(local) if !local.is_empty() => ref_host == local,
            _ => true,
        }
    }
}

/// The lowercased host of a referrer URL, or `None` for an empty referrer or one without
/// `//` (thttpd treats those alike).
fn referer_host(referer: &[u8]) -> Option<String> {
    if referer.is_empty() {
        return None;
    }
    let start = referer.windows(2).position(|w| w == b"//")? + 2;
    let rest = &referer[start..];
    let authority_end = rest.iter().position(|&b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_port = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = if host_port.first() == Some(&b'[') {
        match host_port.iter().position(|&b| b == b']') {
            Some(close) => &host_port[..=close],
            None => host_port,
        }
    } else {
        let end = host_port.iter().position(|&b| b == b':').unwrap_or(host_port.len());
        &host_port[..end]
    };
    Some(String::from_utf8_lossy(host).to_ascii_lowercase())
}

/// A `Host` value lowercased with its port removed (`Example.COM:8080` → `example.com`,
/// `[::1]:80` → `[::1]`).
fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let host = if host.starts_with('[') {
        match host.find(']') {
            Some(close) => &host[..=close],
            None => host,
        }
    } else {
        host.split(':').next().unwrap_or(host)
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(local: Option<&str>, no_empty: bool) -> RefererPolicy {
        RefererPolicy::new("**.jpg|**.png", local, no_empty)
    }

    #[test]
    fn non_matching_urls_are_always_allowed() {
        let p = policy(Some("*.example.com"), true);
        assert!(p.allowed("/index.html", None, None));
        assert!(p.allowed("/index.html", Some(b"http://evil.org/"), Some("example.com")));
    }

    #[test]
    fn empty_referrers() {
        for r in [None, Some(&b""[..]), Some(b"nonsense"), Some(b"about:blank")] {
            assert!(policy(None, false).allowed("/a.jpg", r, Some("example.com")), "{r:?}");
            assert!(!policy(None, true).allowed("/a.jpg", r, Some("example.com")), "{r:?}");
            assert!(!policy(Some("*"), true).allowed("/a.jpg", r, None), "{r:?}");
        }
    }

    #[test]
    fn local_pattern() {
        let p = policy(Some("*.example.com|example.com"), false);
        assert!(p.allowed("/img/a.jpg", Some(b"http://www.example.com/page.html"), None));
        assert!(p.allowed("/img/a.jpg", Some(b"https://EXAMPLE.com:8443/x"), None));
        assert!(p.allowed("/img/a.jpg", Some(b"http://example.com"), None));
        assert!(p.allowed("/img/a.jpg", Some(b"http://example.com?q=1"), None));
        assert!(!p.allowed("/img/a.jpg", Some(b"http://evil.org/example.com"), Some("example.com")));
        assert!(!p.allowed("/img/a.jpg", Some(b"http://example.com.evil.org/"), None));
        assert!(!p.allowed("/img/a.jpg", Some(b"http://example.com@evil.org/"), None));
        assert!(p.allowed("/img/a.jpg", Some(b"http://user:pw@www.example.com/"), None));
    }

    #[test]
    fn host_header_is_the_local_name() {
        let p = policy(None, false);
        assert!(p.allowed("/a.png", Some(b"http://example.com/"), Some("Example.COM:8080")));
        assert!(!p.allowed("/a.png", Some(b"http://www.example.com/"), Some("example.com")));
        assert!(!p.allowed("/a.png", Some(b"http://evil.org/"), Some("example.com")));
        assert!(p.allowed("/a.png", Some(b"http://[::1]:8080/"), Some("[::1]:8080")));
        // A Host is taken literally, not as a pattern.
        assert!(!p.allowed("/a.png", Some(b"http://evil.org/"), Some("*")));
    }

    #[test]
    fn server_hostname_is_the_fallback() {
        let mut p = policy(None, false);
        // No Host and no server name: thttpd gives up and allows.
        assert!(p.allowed("/a.png", Some(b"http://evil.org/"), None));
        p.server_hostname = Some("Files.Example.com".into());
        assert!(p.allowed("/a.png", Some(b"http://files.example.com/"), None));
        assert!(!p.allowed("/a.png", Some(b"http://evil.org/"), None));
        // The Host header wins over the server name.
        assert!(p.allowed("/a.png", Some(b"http://evil.org/"), Some("evil.org")));
    }

    #[test]
    fn odd_bytes_do_not_panic() {
        let p = policy(Some("example.com"), true);
        assert!(!p.allowed("/a.jpg", Some(b"http://\xff\xfe/"), None));
        assert!(!p.allowed("/a.jpg", Some(b"//"), None));
        assert!(!p.allowed("/a.jpg", Some(b"http://[::1/"), None));
        assert!(p.allowed("/a.jpg", Some(b"//example.com"), None));
        let p = policy(None, false);
        assert!(p.allowed("/a.jpg", Some(b"http://x/"), Some("")));
    }

    #[test]
    fn host_normalisation() {
        assert_eq!(normalize_host("Example.COM:8080"), "example.com");
        assert_eq!(normalize_host("[::1]:80"), "[::1]");
        assert_eq!(normalize_host("[::1"), "[::1");
        assert_eq!(referer_host(b"HTTP://A.B:1/c"), Some("a.b".into()));
        assert_eq!(referer_host(b"x"), None);
    }
}
