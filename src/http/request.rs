//! Request heads: `httparse` does the syntax; [`parse`] adds the HTTP/1.1 semantics a
//! server must check before it trusts a request (RFC 9112): one valid `Host`, unambiguous
//! message framing, the request-target form, size limits and the protocol version.
//!
//! Every rejection is a [`Reject`] carrying its status code; after one, the connection is
//! closed, because the framing of whatever follows can no longer be trusted.

use std::mem::MaybeUninit;

use super::list_items;

/// The most header slots [`parse`] can offer httparse (`http.max_headers` is capped to it).
pub const MAX_HEADERS: usize = 1000;

/// Request methods this server knows; anything else is answered with 501.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    Post,
    Put,
    Delete,
    Patch,
    Trace,
    Connect,
}

impl Method {
    fn from_token(t: &str) -> Option<Method> {
        Some(match t {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            _ => return None,
        })
    }
}

/// How the request's body, if any, is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A validated request head, borrowing from the connection's read buffer.
#[derive(Debug)]
pub struct Request<'b> {
    pub method: Method,
    /// The method token as sent.
    pub method_str: &'b str,
    /// The request-target as sent.
    pub target: &'b str,
    /// The path of the target (origin-form, or the path of an absolute-form target), without
    /// the query; `*` for `OPTIONS *`.
    pub path: &'b str,
    pub query: Option<&'b str>,
    /// HTTP/1.`minor`.
    pub minor: u8,
    /// The authority of an absolute-form target, else the Host header.
    pub host: Option<&'b [u8]>,
    /// The client asked to keep the connection open (1.1 default, 1.0 with keep-alive).
    pub keep_alive: bool,
    pub framing: Framing,
    pub expect_continue: bool,
    pub referer: Option<&'b [u8]>,
    pub user_agent: Option<&'b [u8]>,
    /// Fields used by later stages (conditional requests, ranges, content negotiation,
    /// authentication). When a field is repeated, the last one counts.
    pub if_match: Option<&'b [u8]>,
    pub if_none_match: Option<&'b [u8]>,
    pub if_modified_since: Option<&'b [u8]>,
    pub if_unmodified_since: Option<&'b [u8]>,
    pub if_range: Option<&'b [u8]>,
    pub range: Option<&'b [u8]>,
    pub accept_encoding: Option<&'b [u8]>,
    pub accept: Option<&'b [u8]>,
    pub authorization: Option<&'b [u8]>,
    /// `Forwarded` and `X-Forwarded-For`, read only from trusted proxies
    /// (`http::forwarded`); a header sent more than once is handed over empty.
    pub forwarded: Option<&'b [u8]>,
    pub x_forwarded_for: Option<&'b [u8]>,
    /// Bytes of the head, including the blank line; the body or the next request follows.
    pub head_len: usize,
}

/// A request that must be refused: the status to send, and a short reason for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub why: &'static str,
}

const fn reject(status: u16, why: &'static str) -> Reject {
    Reject { status, why }
}

/// Size limits applied while parsing.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_uri_bytes: usize,
    pub max_headers: usize,
}

/// Parses the head at the start of `buf`. `Ok(None)`: incomplete, read more (unless the
/// buffer already holds `max_header_bytes`, which is an error reported here).
///
/// A request line with version `HTTP/1.2`–`HTTP/1.9` is patched in place to `HTTP/1.1`:
/// a server of a lower minor version treats it as its own (RFC 9110 §2.5).
pub fn parse<'b>(buf: &'b mut [u8], limits: &Limits) -> Result<Option<Request<'b>>, Reject> {
    if let Some(pos) = higher_minor_version(buf) {
        buf[pos] = b'1';
    }
    parse_head(buf, limits)
}

/// Finds the minor-version digit of a complete request line that says HTTP/1.2 to 1.9.
fn higher_minor_version(buf: &[u8]) -> Option<usize> {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let nl = start + buf[start..].iter().position(|&b| b == b'\n')?;
    let end = if nl > start && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
    let line = &buf[start..end];
    let v = line.len().checked_sub(8)?;
    match &line[v..] {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', d] if (b'2'..=b'9').contains(d) && v > 0 && line[v - 1] == b' ' => {
            Some(start + v + 7)
        }
        _ => None,
    }
}

/// Empty-line bytes (CR, LF) tolerated before a request line: RFC 9112 §2.2 asks servers to
/// ignore at least one empty line there; more than two is not a client bug but garbage.
const MAX_LEADING_EMPTY: usize = 4;

fn parse_head<'b>(buf: &'b [u8], limits: &Limits) -> Result<Option<Request<'b>>, Reject> {
    if buf.iter().take(MAX_LEADING_EMPTY + 1).all(|&b| b == b'\r' || b == b'\n') && buf.len() > MAX_LEADING_EMPTY {
        return Err(reject(400, "empty lines instead of a request line"));
    }
    let n = limits.max_headers.min(MAX_HEADERS);
    let mut storage = [const { MaybeUninit::<httparse::Header<'b>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(buf, &mut storage[..n]);
    let head_len = match status {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return incomplete(buf, limits).map(|()| None),
        Err(httparse::Error::TooManyHeaders) => return Err(reject(431, "too many header fields")),
        Err(httparse::Error::Version) => {
            // httparse judges "HTTP/1." + a digit it does not know before the line ends; a
            // line still arriving (which `parse` will patch to 1.1 once complete) is not an error yet.
            incomplete(buf, limits)?;
            let start = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(buf.len());
            if !buf[start..].contains(&b'\n') {
                return Ok(None);
            }
            return Err(version_error(buf));
        }
        Err(_) => {
            // A syntax error in a head that did not fit would be reported as the wrong thing.
            incomplete(buf, limits)?;
            return Err(reject(400, "malformed request head"));
        }
    };
    if head_len > limits.max_header_bytes {
        return Err(reject(431, "request head too large"));
    }
    let (Some(method_str), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(reject(400, "malformed request line"));
    };
    if target.len() > limits.max_uri_bytes {
        return Err(reject(414, "request-target too long"));
    }
    let method = Method::from_token(method_str).ok_or(reject(501, "unknown method"))?;

    let mut r = Request {
        method,
        method_str,
        target,
        path: target,
        query: None,
        minor,
        host: None,
        keep_alive: minor >= 1,
        framing: Framing::None,
        expect_continue: false,
        referer: None,
        user_agent: None,
        if_match: None,
        if_none_match: None,
        if_modified_since: None,
        if_unmodified_since: None,
        if_range: None,
        range: None,
        accept_encoding: None,
        accept: None,
        authorization: None,
        forwarded: None,
        x_forwarded_for: None,
        head_len,
    };

    let mut hosts = 0;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    for h in req.headers.iter() {
        let name = h.name;
        let value = h.value.trim_ascii();
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            if !valid_host(value) {
                return Err(reject(400, "invalid Host"));
            }
            r.host = Some(value);
        } else if name.eq_ignore_ascii_case("content-length") {
            for item in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                let n = parse_decimal(item).ok_or(reject(400, "invalid Content-Length"))?;
                if content_length.is_some_and(|c| c != n) {
                    return Err(reject(400, "conflicting Content-Length"));
                }
                content_length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            for coding in list_items(value) {
                if chunked || !coding.eq_ignore_ascii_case(b"chunked") {
                    return Err(reject(400, "unsupported Transfer-Encoding"));
                }
                chunked = true;
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for opt in list_items(value) {
                conn_close |= opt.eq_ignore_ascii_case(b"close");
                conn_keep_alive |= opt.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if value.eq_ignore_ascii_case(b"100-continue") {
                r.expect_continue = true;
            } else {
                return Err(reject(417, "unsupported expectation"));
            }
        } else {
            let slot = match name.len() {
                5 if name.eq_ignore_ascii_case("range") => &mut r.range,
                6 if name.eq_ignore_ascii_case("accept") => &mut r.accept,
                7 if name.eq_ignore_ascii_case("referer") => &mut r.referer,
                8 if name.eq_ignore_ascii_case("if-match") => &mut r.if_match,
                8 if name.eq_ignore_ascii_case("if-range") => &mut r.if_range,
                10 if name.eq_ignore_ascii_case("user-agent") => &mut r.user_agent,
                13 if name.eq_ignore_ascii_case("if-none-match") => &mut r.if_none_match,
                13 if name.eq_ignore_ascii_case("authorization") => &mut r.authorization,
                15 if name.eq_ignore_ascii_case("accept-encoding") => &mut r.accept_encoding,
                17 if name.eq_ignore_ascii_case("if-modified-since") => &mut r.if_modified_since,
                19 if name.eq_ignore_ascii_case("if-unmodified-since") => &mut r.if_unmodified_since,
                9 | 15 if name.eq_ignore_ascii_case("forwarded") || name.eq_ignore_ascii_case("x-forwarded-for") => {
                    let slot = if name.len() == 9 { &mut r.forwarded } else { &mut r.x_forwarded_for };
                    // Repeated: ignored as a whole rather than joined by guesswork.
                    *slot = Some(if slot.is_some() { &[][..] } else { value });
                    continue;
                }
                _ => continue,
            };
            *slot = Some(value);
        }
    }

    if minor >= 1 && hosts != 1 {
        return Err(reject(400, if hosts == 0 { "missing Host" } else { "duplicate Host" }));
    }
    if hosts > 1 {
        return Err(reject(400, "duplicate Host"));
    }
    if transfer_encoding {
        if content_length.is_some() {
            return Err(reject(400, "both Content-Length and Transfer-Encoding"));
        }
        if minor == 0 || !chunked {
            // RFC 9112 §6.1: in HTTP/1.0, or without a final chunked, framing is unknowable.
            return Err(reject(400, "unsupported Transfer-Encoding"));
        }
        r.framing = Framing::Chunked;
    } else if let Some(n) = content_length {
        r.framing = if n == 0 { Framing::None } else { Framing::Length(n) };
    }
    r.keep_alive = if minor >= 1 { !conn_close } else { conn_keep_alive && !conn_close };

    split_target(&mut r)?;
    Ok(Some(r))
}

/// Checks the request-target form (RFC 9112 §3.2) and splits path and query.
fn split_target(r: &mut Request<'_>) -> Result<(), Reject> {
    let t = r.target;
    let rest = if t.starts_with('/') {
        t
    } else if t == "*" {
        if r.method != Method::Options {
            return Err(reject(400, "asterisk-form is only for OPTIONS"));
        }
        r.path = "*";
        return Ok(());
    } else if let Some(after) = strip_scheme(t) {
        // absolute-form: the authority replaces Host (RFC 9112 §3.2.2).
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let authority = &after[..end];
        if authority.is_empty() || !valid_host(authority.as_bytes()) {
            return Err(reject(400, "invalid authority in request-target"));
        }
        r.host = Some(authority.as_bytes());
        let rest = &after[end..];
        if rest.is_empty() || rest.starts_with('?') {
            r.path = "/";
            r.query = rest.strip_prefix('?');
            return Ok(());
        }
        rest
    } else if r.method == Method::Connect {
        // authority-form; CONNECT is refused later with 405.
        r.path = t;
        return Ok(());
    } else {
        return Err(reject(400, "invalid request-target"));
    };
    match rest.split_once('?') {
        Some((p, q)) => {
            r.path = p;
            r.query = Some(q);
        }
        None => r.path = rest,
    }
    Ok(())
}

fn strip_scheme(t: &str) -> Option<&str> {
    let b = t.as_bytes();
    if b.len() >= 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        Some(&t[7..])
    } else if b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        Some(&t[8..])
    } else {
        None
    }
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2): a reg-name, IPv4 address or bracketed
/// IP literal, then an optional decimal port. Empty is allowed (RFC 9112 §3.2).
pub fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = v.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let lit = &rest[..close];
        if lit.is_empty() || !lit.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return false;
        }
        match &rest[close + 1..] {
            [] => (&[][..], None),
            [b':', port @ ..] => (&[][..], Some(port)),
            _ => return false,
        }
    } else {
        match v.iter().rposition(|&b| b == b':') {
            Some(i) => (&v[..i], Some(&v[i + 1..])),
            None => (v, None),
        }
    };
    let reg_name_ok = host.iter().all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b));
    reg_name_ok && port.is_none_or(|p| p.len() <= 5 && p.iter().all(u8::is_ascii_digit))
}

/// A non-empty run of ASCII digits as a u64, None on anything else or on overflow.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(
        0u64,
        |n, &b| {
            if b.is_ascii_digit() {
                n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            } else {
                None
            }
        },
    )
}

/// Decides whether an incomplete head is already too large to ever be accepted.
fn incomplete(buf: &[u8], limits: &Limits) -> Result<(), Reject> {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(buf.len());
    let line_done = buf[start..].contains(&b'\n');
    if !line_done {
        // Still in the request line: method, target, version. Past the target limit plus
        // room for the method and version, it can only be a too-long target (or garbage).
        let line = &buf[start..];
        if line.len() > limits.max_uri_bytes + 32 || buf.len() >= limits.max_header_bytes {
            let looks_like_line = line
                .iter()
                .position(|&b| b == b' ')
                .is_some_and(|sp| sp > 0 && line[..sp].iter().all(|b| b.is_ascii_alphabetic() || *b == b'-'));
            return Err(if looks_like_line {
                reject(414, "request-target too long")
            } else {
                reject(400, "malformed request line")
            });
        }
        return Ok(());
    }
    if buf.len() >= limits.max_header_bytes {
        return Err(reject(431, "request head too large"));
    }
    Ok(())
}

/// Tells a version we do not speak (505) from a malformed line (400).
fn version_error(buf: &[u8]) -> Reject {
    let line_end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = buf[..line_end].trim_ascii_end();
    match line.rsplit(|&b| b == b' ').next() {
        Some([b'H', b'T', b'T', b'P', b'/', maj, b'.', min]) if maj.is_ascii_digit() && min.is_ascii_digit() => {
            reject(505, "unsupported HTTP version")
        }
        Some([b'H', b'T', b'T', b'P', b'/', maj]) if maj.is_ascii_digit() => reject(505, "unsupported HTTP version"),
        _ => reject(400, "malformed request line"),
    }
}

/// Consumes a chunked request body that is to be thrown away (RFC 9112 §7.1), without
/// buffering it: chunk sizes, extensions and trailers are parsed incrementally and bounded.
#[derive(Clone, Debug, Default)]
pub struct ChunkedSkipper {
    state: ChunkState,
    /// Bytes of the current size line, extension or trailer line.
    line: usize,
    /// Body bytes seen so far (data only).
    pub total: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    SizeDigits(u64),
    Ext(u64),
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    Done,
}

/// The longest chunk-size line or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

impl ChunkedSkipper {
    /// Feeds bytes; returns how many were consumed. When [`ChunkedSkipper::done`] is true,
    /// the rest of `data` (beyond the returned count) belongs to the next request.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, Reject> {
        let bad = reject(400, "malformed chunked body");
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                ChunkState::Done => return Ok(i),
                ChunkState::Size => match hex(b) {
                    Some(d) => self.state = ChunkState::SizeDigits(u64::from(d)),
                    None => return Err(bad),
                },
                ChunkState::SizeDigits(n) => {
                    if let Some(d) = hex(b) {
                        let n = n.checked_mul(16).and_then(|n| n.checked_add(u64::from(d))).ok_or(bad)?;
                        self.state = ChunkState::SizeDigits(n);
                    } else if b == b';' || b == b' ' || b == b'\t' || b == b'\r' {
                        self.state = ChunkState::Ext(n);
                    } else if b == b'\n' {
                        self.end_size_line(n);
                    } else {
                        return Err(bad);
                    }
                }
                ChunkState::Ext(n) => {
                    if b == b'\n' {
                        self.end_size_line(n);
                    } else {
                        self.line += 1;
                        if self.line > MAX_CHUNK_LINE || (b < 0x20 && b != b'\t' && b != b'\r') {
                            return Err(bad);
                        }
                    }
                }
                ChunkState::Data(left) => {
                    let take = (data.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                    i += take;
                    self.total = self.total.saturating_add(take as u64);
                    let left = left - take as u64;
                    self.state = if left == 0 { ChunkState::DataCr } else { ChunkState::Data(left) };
                    continue;
                }
                ChunkState::DataCr => match b {
                    b'\r' => self.state = ChunkState::DataLf,
                    b'\n' => self.state = ChunkState::Size,
                    _ => return Err(bad),
                },
                ChunkState::DataLf => match b {
                    b'\n' => self.state = ChunkState::Size,
                    _ => return Err(bad),
                },
                ChunkState::TrailerStart => match b {
                    b'\r' => {}
                    b'\n' => self.state = ChunkState::Done,
                    _ => {
                        self.line = 1;
                        self.state = ChunkState::Trailer;
                    }
                },
                ChunkState::Trailer => {
                    if b == b'\n' {
                        self.state = ChunkState::TrailerStart;
                    } else {
                        self.line += 1;
                        if self.line > MAX_CHUNK_LINE {
                            return Err(bad);
                        }
                    }
                }
            }
            i += 1;
        }
        Ok(i)
    }

    fn end_size_line(&mut self, n: u64) {
        self.line = 0;
        self.state = if n == 0 { ChunkState::TrailerStart } else { ChunkState::Data(n) };
    }

    /// The whole body, including the last chunk and trailers, has been consumed.
    pub fn done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_header_bytes: 4096, max_uri_bytes: 1024, max_headers: 20 };

    fn p(s: &[u8]) -> Result<Option<Request<'static>>, Reject> {
        let buf: &'static mut [u8] = Box::leak(s.to_vec().into_boxed_slice());
        parse(buf, &LIMITS)
    }

    fn status(s: &[u8]) -> u16 {
        match p(s) {
            Ok(Some(_)) => 200,
            Ok(None) => 0,
            Err(r) => r.status,
        }
    }

    #[test]
    fn simple_get() {
        let r = p(b"GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\nrest").unwrap().unwrap();
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, "/a/b");
        assert_eq!(r.query, Some("x=1"));
        assert_eq!(r.host, Some(&b"example.com"[..]));
        assert_eq!(r.user_agent, Some(&b"t"[..]));
        let r2 =
            p(b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nIF-NONE-MATCH: \"a\"\r\nAccept-Encoding: br\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!(r2.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(r2.if_none_match, Some(&b"\"a\""[..]));
        assert_eq!(r2.accept_encoding, Some(&b"br"[..]));
        assert!(r.keep_alive);
        assert_eq!(r.framing, Framing::None);
        assert_eq!(r.head_len, 59);
    }

    #[test]
    fn partial_heads() {
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\n"), 0);
        assert_eq!(status(b"GE"), 0);
        assert_eq!(status(b""), 0);
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!p(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(p(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(!p(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(!p(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n").unwrap().unwrap().keep_alive);
    }

    #[test]
    fn host_rules() {
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"), 200);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: \r\n\r\n"), 200);
        assert_eq!(status(b"GET / HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status(b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    }

    #[test]
    fn syntax_errors() {
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHo(st: x\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1 x\r\nHost: x\r\n\r\n"), 400);
        assert_eq!(status(b"GET\r\n\r\n"), 400);
        assert_eq!(status(b"GET  / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET foo HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
        assert_eq!(status(b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    }

    #[test]
    fn versions() {
        assert_eq!(status(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/0.9\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/3\r\n\r\n"), 505);
        assert_eq!(status(b"GET / FTP/1.0\r\n\r\n"), 400);
        let r = p(b"GET / HTTP/1.2\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.minor, 1);
        // Arriving in pieces, it is incomplete until the line ends.
        assert_eq!(status(b"GET / HTTP/1.2"), 0);
        assert_eq!(status(b"GET / HTTP/1.2\r"), 0);
        assert_eq!(status(b"GET / HTTP/2.0"), 0);
    }

    #[test]
    fn methods() {
        assert_eq!(status(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n"), 501);
        assert_eq!(status(b"get / HTTP/1.1\r\nHost: x\r\n\r\n"), 501);
        let r = p(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!((r.method, r.path), (Method::Options, "*"));
        let r = p(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.method, Method::Connect);
    }

    #[test]
    fn framing() {
        let r = p(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.framing, Framing::Length(5));
        let r = p(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.framing, Framing::Length(5));
        let r = p(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 7, 7\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.framing, Framing::Length(7));
        let r = p(b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(status(bad), 400, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn expectations() {
        let r = p(b"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n\r\n").unwrap().unwrap();
        assert!(r.expect_continue);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n"), 417);
    }

    #[test]
    fn absolute_form() {
        let r = p(b"GET http://Example.com:8080/x/y?q HTTP/1.1\r\nHost: other\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.path, "/x/y");
        assert_eq!(r.query, Some("q"));
        assert_eq!(r.host, Some(&b"Example.com:8080"[..]));
        let r = p(b"GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.path, "/");
        assert_eq!(status(b"GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET http://u@h/x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    }

    #[test]
    fn limits() {
        let mut long = b"GET /".to_vec();
        long.extend(std::iter::repeat_n(b'a', 2000));
        assert_eq!(status(&long), 414, "incomplete long target");
        long.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status(&long), 414, "complete long target");
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 5000));
        assert_eq!(status(&big), 431);
        let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..30 {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(status(&many), 431);
        assert_eq!(status(b"\r\n\r\n\r\n\r\n"), 400);
        assert_eq!(status(b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
        let garbage = vec![b'\x01'; 5000];
        assert_eq!(status(&garbage), 400);
    }

    #[test]
    fn chunked_skipper() {
        let body = b"5;ext=1\r\nhello\r\n0a\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        let mut s = ChunkedSkipper::default();
        let n = s.feed(body).unwrap();
        assert!(s.done());
        assert_eq!(&body[n..], b"NEXT");
        assert_eq!(s.total, 15);
        // Byte by byte gives the same answer.
        let mut s = ChunkedSkipper::default();
        let mut used = 0;
        for i in 0..body.len() {
            used += s.feed(&body[i..=i]).unwrap();
            if s.done() {
                break;
            }
        }
        assert_eq!(used, body.len() - 4);
        assert!(ChunkedSkipper::default().feed(b"zz\r\n").is_err());
        assert!(ChunkedSkipper::default().feed(b"fffffffffffffffffff\r\n").is_err());
        assert!(ChunkedSkipper::default().feed(b"1\r\nab").is_err());
    }
}
