//! The HTTP decisions a TLS deployment adds, taken before the pipeline from facts the
//! connection gives (plain or TLS, the SNI name): the redirect of plain requests to HTTPS
//! (`[tls] redirect_http`) and the 421 rule. The transport only reports; it answers nothing.

use super::{Early, Exchange};
use crate::ctx::Ctx;
use crate::http::request::Request;
use crate::http::strip_port;

/// What the pipeline is replaced by, if anything: the redirect to HTTPS on a plain
/// connection (the health endpoint is still answered), or 421 for a misdirected request.
/// `sni` is the name the TLS client sent (None: no TLS, or no SNI).
pub(crate) fn early(cx: &Ctx, req: &Request<'_>, plain: bool, sni: Option<&str>) -> Early {
    let is_health = || cx.cfg.health_path.as_deref() == Some(req.path);
    if cx.cfg.tls.redirect_http && plain && req.path.starts_with('/') && !is_health() {
        Early::RedirectHttps
    } else if misdirected(cx, req, sni) {
        Early::Misdirected
    } else {
        Early::Pipeline
    }
}

/// The 421 rule (nginx's): on a TLS connection whose client sent SNI, a request whose Host
/// picks another `[[vhost]]` than the SNI name picked is misdirected: it would be answered
/// under a certificate that was not checked for its host (the client may be reusing a
/// connection for a host it believes the certificate covers). Hosts that pick the same site
/// (both unknown: the default) are fine; without SNI nothing is checked.
fn misdirected(cx: &Ctx, req: &Request<'_>, sni: Option<&str>) -> bool {
    let (Some(sni), false) = (sni, cx.vroots.is_empty()) else { return false };
    // The same comparison as the serving pipeline's choice of site (`Exchange::site`).
    let site = |name: &[u8]| cx.vroots.iter().position(|(h, _)| h.as_bytes().eq_ignore_ascii_case(name));
    let (sni, host) = (sni.as_bytes(), req.host.map_or(&[][..], strip_port));
    site(sni.strip_suffix(b".").unwrap_or(sni)) != site(host.strip_suffix(b".").unwrap_or(host))
}

/// `https://host[:port]path[?query]`, the port left out when it is HTTPS's own.
fn https_location(host: &[u8], port: u16, path: &str, query: Option<&str>) -> Vec<u8> {
    let mut l = Vec::with_capacity(16 + host.len() + path.len() + query.map_or(0, |q| q.len() + 1));
    l.extend_from_slice(b"https://");
    l.extend_from_slice(host);
    if port != 443 {
        l.push(b':');
        l.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
    }
    l.extend_from_slice(path.as_bytes());
    if let Some(q) = query {
        l.push(b'?');
        l.extend_from_slice(q.as_bytes());
    }
    l
}

/// `[tls] redirect_http`: the same URL over HTTPS, permanently (nginx's `return 301
/// https://$host$request_uri`): the request's host without its port, the port of the
/// first TLS listener unless it is 443, the path and query as sent. No host (HTTP/1.0
/// without Host): nothing to redirect to, 400.
pub(super) fn redirect_https(ex: &mut Exchange, cx: &mut Ctx, req: &Request<'_>) -> u16 {
    let Some(host) = req.host.map(strip_port).filter(|h| !h.is_empty()) else {
        return ex.simple_response(cx, 400, req, None);
    };
    let location = https_location(host, cx.https_port, req.path, req.query);
    ex.simple_response(cx, 301, req, Some(("Location", &location)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_locations() {
        let l = |h: &str, port, path, q| {
            String::from_utf8(https_location(strip_port(h.as_bytes()), port, path, q)).unwrap()
        };
        assert_eq!(l("example.org", 443, "/", None), "https://example.org/");
        assert_eq!(l("example.org:80", 443, "/a/b", Some("x=1&y")), "https://example.org/a/b?x=1&y");
        assert_eq!(l("example.org:8080", 8443, "/%20", Some("")), "https://example.org:8443/%20?");
        assert_eq!(l("[::1]:8080", 8443, "/p", None), "https://[::1]:8443/p");
        assert_eq!(l("[::1]", 443, "/p", None), "https://[::1]/p");
    }
}
