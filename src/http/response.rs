//! Response heads, rendered into a reused buffer with no allocation once it has grown, and
//! the small HTML bodies of error responses.

use super::reason;

/// The status code of a head the pipeline rendered in HTTP/1.1 form, for the protocols that
/// send it as a field (`:status`); 500 if the status line were unreadable.
#[cfg(any(feature = "http2", feature = "http3"))]
pub fn head_status(head: &[u8]) -> u16 {
    match head.get(9..12) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => 500,
    }
}

/// Where the field lines of a rendered head start: past its status line.
#[cfg(any(feature = "http2", feature = "http3"))]
pub fn head_fields_start(head: &[u8]) -> usize {
    head.iter().position(|&b| b == b'\n').map_or(head.len(), |i| i + 1)
}

/// Where a field's name and value are in a rendered head ([`head_field`]).
#[cfg(any(feature = "http2", feature = "http3"))]
pub type FieldAt = (std::ops::Range<usize>, std::ops::Range<usize>);

/// The line at `at` of a rendered head, as HTTP/2 and HTTP/3 carry it: its length (to the
/// next line), and where its name and its trimmed value are in `head`, unless it is not a
/// field line (the blank line at the end) or a connection-specific field (RFC 9113 §8.2.2,
/// RFC 9114 §4.2), which those protocols drop. Names are as rendered: the caller lowercases.
#[cfg(any(feature = "http2", feature = "http3"))]
pub fn head_field(head: &[u8], at: usize) -> (usize, Option<FieldAt>) {
    let rest = head.get(at..).unwrap_or_default();
    let len = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |i| i + 1);
    let line = &rest[..len];
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(colon) = line.iter().position(|&b| b == b':') else { return (len, None) };
    if super::fields::connection_specific(&line[..colon]) {
        return (len, None);
    }
    let raw = &line[colon + 1..];
    let v = at + colon + 1 + (raw.len() - raw.trim_ascii_start().len());
    (len, Some((at..at + colon, v..v + raw.trim_ascii().len())))
}

/// Appends a response head to a buffer, field by field.
pub struct Head<'a> {
    buf: &'a mut Vec<u8>,
}

/// What a response head usually needs; a buffer grows past it only for long heads.
const HEAD_CAPACITY: usize = 512;

impl<'a> Head<'a> {
    /// Clears `buf` and writes the status line, `Date`, and `fixed`: the fields every
    /// response carries, pre-rendered once ([`fixed_fields`]).
    pub fn new(buf: &'a mut Vec<u8>, status: u16, date: &str, fixed: &[u8]) -> Head<'a> {
        buf.clear();
        // Room for a typical head at once, not five reallocations on a fresh buffer (a no-op
        // for a buffer that has served a response before).
        buf.reserve(HEAD_CAPACITY);
        match status {
            // The statuses of a file sent, rendered as constants.
            200 => buf.extend_from_slice(b"HTTP/1.1 200 OK\r\nDate: "),
            206 => buf.extend_from_slice(b"HTTP/1.1 206 Partial Content\r\nDate: "),
            304 => buf.extend_from_slice(b"HTTP/1.1 304 Not Modified\r\nDate: "),
            _ => {
                buf.extend_from_slice(b"HTTP/1.1 ");
                let mut n = itoa::Buffer::new();
                buf.extend_from_slice(n.format(status).as_bytes());
                buf.push(b' ');
                buf.extend_from_slice(reason(status).as_bytes());
                buf.extend_from_slice(b"\r\nDate: ");
            }
        }
        buf.extend_from_slice(date.as_bytes());
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(fixed);
        Head { buf }
    }

    /// Adds a field. The caller guarantees that `value` holds no CR or LF.
    pub fn field(&mut self, name: &str, value: &[u8]) -> &mut Self {
        debug_assert!(!value.contains(&b'\r') && !value.contains(&b'\n'));
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Adds fields rendered beforehand (each ending in CRLF).
    pub fn rendered(&mut self, fields: &[u8]) -> &mut Self {
        debug_assert!(fields.is_empty() || fields.ends_with(b"\r\n"));
        self.buf.extend_from_slice(fields);
        self
    }

    /// Adds a field with a numeric value.
    pub fn number(&mut self, name: &str, value: u64) -> &mut Self {
        let mut n = itoa::Buffer::new();
        self.field(name, n.format(value).as_bytes())
    }

    /// Writes the `Connection` field that matches the decision to keep the connection open
    /// or not, and the blank line that ends the head. HTTP/1.1 keeps connections open by
    /// default, so `keep-alive` is only spelled out for HTTP/1.0 clients.
    pub fn finish(&mut self, keep_alive: bool, minor: u8) {
        if !keep_alive {
            self.buf.extend_from_slice(b"Connection: close\r\n");
        } else if minor == 0 {
            self.buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
    }
}

/// Renders the fields sent on every response: `Server` (unless empty) and thttpd's `P3P`.
pub fn fixed_fields(server: &str, p3p: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in [("Server", Some(server)), ("P3P", p3p)] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Writes the HTML body of an error (or redirect) response into `body`.
pub fn error_body(body: &mut Vec<u8>, status: u16) {
    body.clear();
    let mut n = itoa::Buffer::new();
    let code = n.format(status).as_bytes();
    let text = reason(status).as_bytes();
    body.extend_from_slice(b"<!DOCTYPE html>\n<html><head><title>");
    body.extend_from_slice(code);
    body.push(b' ');
    body.extend_from_slice(text);
    body.extend_from_slice(b"</title></head>\n<body><h1>");
    body.extend_from_slice(code);
    body.push(b' ');
    body.extend_from_slice(text);
    body.extend_from_slice(b"</h1></body></html>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_head() {
        let mut buf = Vec::new();
        let mut h = Head::new(&mut buf, 404, "Sun, 06 Nov 1994 08:49:37 GMT", &fixed_fields("ferrohttpd", None));
        h.field("Content-Type", b"text/html").number("Content-Length", 12);
        h.finish(false, 1);
        assert_eq!(
            std::str::from_utf8(&buf).unwrap(),
            "HTTP/1.1 404 Not Found\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: ferrohttpd\r\n\
             Content-Type: text/html\r\nContent-Length: 12\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn constant_status_lines_match_the_table() {
        let (mut constant, mut built) = (Vec::new(), Vec::new());
        for status in [200, 206, 304] {
            Head::new(&mut constant, status, "d", b"");
            built.clear();
            built.extend_from_slice(format!("HTTP/1.1 {status} {}\r\nDate: d\r\n", reason(status)).as_bytes());
            assert_eq!(constant, built, "{status}");
        }
    }

    #[test]
    fn keep_alive_spelling() {
        let mut buf = Vec::new();
        Head::new(&mut buf, 200, "d", &fixed_fields("", None)).finish(true, 0);
        assert!(buf.ends_with(b"\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!buf.windows(6).any(|w| w == b"Server"));
        Head::new(&mut buf, 200, "d", &fixed_fields("s", Some("CP=\"x\""))).finish(true, 1);
        assert!(buf.windows(13).any(|w| w == b"P3P: CP=\"x\"\r\n"));
        assert!(!buf.windows(10).any(|w| w == b"Connection"));
    }

    #[test]
    fn error_bodies() {
        let mut b = Vec::new();
        error_body(&mut b, 403);
        let s = String::from_utf8(b).unwrap();
        assert!(s.contains("<title>403 Forbidden</title>") && s.ends_with("</html>\n"));
    }
}
