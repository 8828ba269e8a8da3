//! HTTP semantics and HTTP/1.1 syntax, the same for every protocol: request parsing and
//! validation ([`request`]; a field list with pseudo-header fields, HTTP/2's and HTTP/3's,
//! in `fields`), response heads ([`response`]), preconditions ([`conditional`]), ranges
//! ([`range`]), content negotiation ([`encoding`], [`media`], [`weighted`]), `Forwarded`
//! ([`forwarded`]), address ranges ([`net`]), RFC 9218 priorities (`priority`), the Huffman
//! code HPACK and QPACK share (`huffman`), the cached `Date` ([`date`]) and Content-Type
//! lookup ([`mime`]), and the reset and flood budgets HTTP/2 and HTTP/3 keep (`budget`).
//! Pure functions on bytes: no socket, no file, no configuration.

#[cfg(any(feature = "http2", feature = "http3"))]
pub(crate) mod budget;
pub mod conditional;
pub mod date;
pub mod encoding;
#[cfg(any(feature = "http2", feature = "http3"))]
pub mod fields;
pub mod forwarded;
#[cfg(any(feature = "http2", feature = "http3"))]
pub(crate) mod huffman;
pub mod media;
pub mod mime;
pub mod net;
#[cfg(any(feature = "http2", feature = "http3"))]
pub(crate) mod prefixed;
#[cfg(any(feature = "http2", feature = "http3"))]
pub mod priority;
pub mod range;
pub mod request;
pub mod response;
pub mod weighted;

/// A Host value without its port: `example.com:8080` -> `example.com`, `[::1]:80` ->
/// `[::1]`. The one place a port is taken off a Host, for the choice of site, the 421 rule
/// and the redirect to HTTPS.
pub fn strip_port(host: &[u8]) -> &[u8] {
    if host.starts_with(b"[") {
        return host.iter().position(|&b| b == b']').map_or(host, |i| &host[..=i]);
    }
    host.iter().rposition(|&b| b == b':').map_or(host, |i| &host[..i])
}

/// [`strip_port`] of a `str` (the cut is always at an ASCII byte, so a char boundary).
pub fn strip_port_str(host: &str) -> &str {
    host.get(..strip_port(host.as_bytes()).len()).unwrap_or(host)
}

/// The reason phrase for a status code this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// True if `v` may be sent as a field value: visible ASCII, spaces and tabs, no leading or
/// trailing whitespace (RFC 9110 §5.5, without obs-text).
pub fn is_field_value(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        && !v.first().is_some_and(|b| b.is_ascii_whitespace())
        && !v.last().is_some_and(|b| b.is_ascii_whitespace())
}

/// Percent-encodes a decoded URL path for a `Location` header: bytes outside RFC 3986's
/// `pchar` set and `/` become `%XX`, so the result is a plain path-absolute reference.
pub fn encode_path(path: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Splits a comma-separated field value into trimmed, non-empty elements (RFC 9110 §5.6.1).
pub fn list_items(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',').map(|s| s.trim_ascii()).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped() {
        for (s, want) in [
            ("a.example:8080", "a.example"),
            ("a.example", "a.example"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
            ("[::1", "[::1"),
            ("", ""),
            (":80", ""),
        ] {
            assert_eq!(strip_port_str(s), want, "{s:?}");
            assert_eq!(strip_port(s.as_bytes()), want.as_bytes(), "{s:?}");
        }
    }

    #[test]
    fn field_values() {
        assert!(is_field_value(b"ferrohttpd/1.0 (x)"));
        assert!(is_field_value(b""));
        assert!(!is_field_value(b"a\r\nb"));
        assert!(!is_field_value(b" a"));
        assert!(!is_field_value(b"\x7f"));
    }

    #[test]
    fn paths_are_encoded() {
        let mut out = Vec::new();
        encode_path("/a b/caf\u{e9}/%/?#", &mut out);
        assert_eq!(out, b"/a%20b/caf%C3%A9/%25/%3F%23");
    }

    #[test]
    fn lists() {
        let v: Vec<&[u8]> = list_items(b" close ,, keep-alive,").collect();
        assert_eq!(v, vec![&b"close"[..], b"keep-alive"]);
    }
}
