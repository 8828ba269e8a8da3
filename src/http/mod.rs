//! HTTP/1.1 message handling: request parsing and validation ([`request`]), response heads
//! ([`response`]), the cached `Date` ([`date`]) and Content-Type lookup ([`mime`]).

pub mod conditional;
pub mod date;
pub mod encoding;
pub mod forwarded;
pub mod media;
pub mod mime;
pub mod net;
pub mod range;
pub mod request;
pub mod response;
pub mod weighted;

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
