//! A request as a list of decoded header fields with pseudo-header fields (`:method`,
//! `:scheme`, `:authority`, `:path`), turned into the same [`Request`] the HTTP/1.1 parser
//! produces, so that one pipeline serves every protocol. HTTP/2 (RFC 9113 §8.2, §8.3) and
//! HTTP/3 (RFC 9114 §4.2, §4.3) state the same rules for such a list; only how the list
//! arrives (HPACK, QPACK) and how a malformed one is refused (a stream error of the
//! protocol's own) differ, and those stay with each protocol.
//!
//! Two steps, because they fail differently:
//! * [`Fields::validate`]: lowercase names without separators or controls, values without
//!   NUL/CR/LF or surrounding whitespace, pseudo-header fields first, each known one at most
//!   once, `:method`, `:scheme` and `:path` present (CONNECT: `:authority` only), no
//!   connection-specific field ([`connection_specific`]), `te` only `trailers`, one valid
//!   `content-length`, `host` agreeing with `:authority`. A request that breaks one is
//!   *malformed*: the protocol resets the stream, no response.
//! * [`Fields::request`] builds the [`Request`], borrowing from the fields, with the same
//!   4xx decisions as HTTP/1.1 where they apply (an unknown method 501, a target too long
//!   414, an invalid authority or target form 400, an unknown expectation 417). Those are
//!   answered on the stream like any other response.
//!
//! Repeated fields combine as in HTTP/1.1 (`http::request`): list fields join with ", ",
//! single-value fields sent twice are ignored or emptied, the last `referer` and
//! `user-agent` count.

use super::request::{
    join_line, parse_decimal, query_or_fragment, valid_host, Framing, Limits, Method, Reject, Request,
};

/// The fields HTTP/2 and HTTP/3 forbid in both directions (RFC 9113 §8.2.2, RFC 9114
/// §4.2), by length first: most names are not one of these lengths. A request holding one
/// is malformed; a response head drops them.
pub fn connection_specific(name: &[u8]) -> bool {
    match name.len() {
        7 => name.eq_ignore_ascii_case(b"upgrade"),
        10 => name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive"),
        16 => name.eq_ignore_ascii_case(b"proxy-connection"),
        17 => name.eq_ignore_ascii_case(b"transfer-encoding"),
        _ => false,
    }
}

/// The decoded header fields of one request: names and values in one buffer, in order.
#[derive(Debug, Default)]
pub struct Fields {
    buf: Vec<u8>,
    /// (start, name length, value length) of each field in `buf`.
    spans: Vec<(u32, u32, u32)>,
    /// The sum of name + value + 32 over the fields (RFC 9113 §6.5.2's header list size).
    list_size: usize,
    /// Where the first `:method`, `:path` and `:authority` are among the pseudo-header fields
    /// that lead the list (their `spans` index + 1; 0: absent), noted as they are pushed so
    /// that no check or lookup searches for them. (`:scheme` is checked, never looked up.)
    pseudo: [u32; 3],
    /// A regular field has been pushed: pseudo-header fields after it are not looked up.
    regular: bool,
}

/// The words of eight bytes that together hold every byte of `v`, some more than once: `v`
/// eight bytes at a time and, for the rest, its last eight bytes again; a `v` shorter than
/// eight bytes in one word (its first and last four bytes, or its bytes and `fill`). For
/// checks that hold for every byte, which so take a word at a time with no byte loop.
#[inline(always)]
fn each_word(v: &[u8], fill: u8, mut f: impl FnMut(u64)) {
    let word = |w: &[u8]| {
        let mut b = [0; 8];
        b.copy_from_slice(w);
        u64::from_le_bytes(b)
    };
    let n = v.len();
    if n >= 8 {
        let mut words = v.chunks_exact(8);
        for w in &mut words {
            f(word(w));
        }
        if !words.remainder().is_empty() {
            f(word(&v[n - 8..]));
        }
    } else if n >= 4 {
        let half = |w: &[u8]| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        f(half(&v[..4]) | half(&v[n - 4..]) << 32);
    } else if n > 0 {
        f(u64::from_le_bytes([v[0], v[n / 2], v[n - 1], fill, fill, fill, fill, fill]));
    }
}

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = ONES * 0x80;

/// A field name as HTTP/2 and HTTP/3 send it: one or more visible ASCII bytes that are not
/// uppercase (RFC 9113 §8.2.1; the separators are the HTTP/1.1 parser's concern, not a
/// malformation here). A word at a time: each byte's low seven bits plus a constant set
/// its high bit exactly when they reach a bound (no carry leaves a byte: at most
/// 0x7f + 0x5f).
fn clean_name(name: &[u8]) -> bool {
    let mut bad = 0;
    each_word(name, b'a', |x| {
        let y = x & !HIGH;
        let at_least = |b: u64| (y + ONES * (0x80 - b)) & HIGH;
        let upper = at_least(b'A'.into()) & !at_least(u64::from(b'Z') + 1);
        // Every byte below 0x80, at least `!`, below DEL, not uppercase.
        bad |= (!x & at_least(0x21) & !at_least(0x7f) & !upper) ^ HIGH;
    });
    !name.is_empty() && bad == 0
}

/// A value holds none of NUL, CR and LF (RFC 9113 §8.2.1). A word at a time: a value is
/// tens of bytes, and almost always valid.
fn clean_value(v: &[u8]) -> bool {
    // Non-zero iff some byte of `x` is zero (exact for "some byte": a borrow only runs on
    // past a zero byte).
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut bad = 0;
    each_word(v, b'a', |x| {
        bad |= zero_byte(x) | zero_byte(x ^ (ONES * u64::from(b'\r'))) | zero_byte(x ^ (ONES * u64::from(b'\n')));
    });
    bad == 0
}

const METHOD: usize = 0;
const PATH: usize = 1;
const AUTHORITY: usize = 2;

const fn reject(status: u16, why: &'static str) -> Reject {
    Reject { status, why }
}

/// A request that breaks a rule of RFC 9113 §8.2 or §8.3.1: a stream error of type
/// PROTOCOL_ERROR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// A field value as text, when it is visible ASCII only (what a method or target can be).
fn text(v: &[u8]) -> Option<&str> {
    if v.iter().all(u8::is_ascii_graphic) {
        // SAFETY: every byte is ASCII (checked just above), so `v` is valid UTF-8; checking
        // it again with `from_utf8` cost an h2c request 150 instructions (issue 37).
        Some(unsafe { std::str::from_utf8_unchecked(v) })
    } else {
        None
    }
}

impl Fields {
    pub fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
        self.list_size = 0;
        self.pseudo = [0; 3];
        self.regular = false;
    }

    /// Makes this a copy of `other`, in the buffers this one has.
    pub fn copy_from(&mut self, other: &Fields) {
        self.buf.clone_from(&other.buf);
        self.spans.clone_from(&other.spans);
        self.list_size = other.list_size;
        self.pseudo = other.pseudo;
        self.regular = other.regular;
    }

    /// Adds one decoded field.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        if self.spans.is_empty() {
            // Room for a browser's request at once, not four reallocations per request.
            self.spans.reserve(16);
            self.buf.reserve(512);
        }
        if name.first() == Some(&b':') {
            let slot = match name {
                b":method" => Some(METHOD),
                b":path" => Some(PATH),
                b":authority" => Some(AUTHORITY),
                _ => None,
            };
            if let Some(slot) = slot.filter(|&s| !self.regular && self.pseudo[s] == 0) {
                self.pseudo[slot] = self.spans.len() as u32 + 1;
            }
        } else {
            self.regular = true;
        }
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
        self.spans.push((start, name.len() as u32, value.len() as u32));
        self.list_size += name.len() + value.len() + 32;
    }

    /// The header list size so far (RFC 9113 §6.5.2).
    pub fn list_size(&self) -> usize {
        self.list_size
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|&(s, n, v)| {
            let (s, n, v) = (s as usize, n as usize, v as usize);
            (&self.buf[s..s + n], &self.buf[s + n..s + n + v])
        })
    }

    /// The value of the first of the leading pseudo-header fields named by `slot`.
    fn pseudo(&self, slot: usize) -> Option<&[u8]> {
        let i = self.pseudo[slot].checked_sub(1)? as usize;
        let (s, n, v) = self.spans[i];
        let start = (s + n) as usize;
        Some(&self.buf[start..start + v as usize])
    }

    /// Checks the rules of RFC 9113 §8.2 and §8.3.1 (see the module docs). `Ok`: the
    /// request is well-formed, with its `content-length` if it has one; `Err`: malformed.
    pub fn validate(&self) -> Result<Option<u64>, Malformed> {
        let mut regular = false;
        let mut seen = 0u8;
        let mut content_length = None;
        let mut host = None;
        for (name, value) in self.iter() {
            let (pseudo, bare) = match name.split_first() {
                Some((b':', rest)) => (true, rest),
                _ => (false, name),
            };
            if !clean_name(bare) {
                return Err(Malformed);
            }
            if !clean_value(value)
                || value.first().is_some_and(|b| matches!(b, b' ' | b'\t'))
                || value.last().is_some_and(|b| matches!(b, b' ' | b'\t'))
            {
                return Err(Malformed);
            }
            if pseudo {
                let bit = match bare {
                    b"method" => 1,
                    b"scheme" => 2,
                    b"path" => 4,
                    b"authority" => 8,
                    _ => return Err(Malformed),
                };
                if regular || seen & bit != 0 {
                    return Err(Malformed);
                }
                seen |= bit;
                continue;
            }
            regular = true;
            match name {
                // Connection-specific fields, which HTTP/2 forbids (RFC 9113 §8.2.2).
                b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
                    return Err(Malformed);
                }
                b"te" if !value.eq_ignore_ascii_case(b"trailers") => return Err(Malformed),
                b"content-length" => {
                    let n = parse_decimal(value).ok_or(Malformed)?;
                    if content_length.is_some_and(|c| c != n) {
                        return Err(Malformed);
                    }
                    content_length = Some(n);
                }
                b"host" => {
                    if host.is_some() {
                        return Err(Malformed);
                    }
                    host = Some(value);
                }
                _ => {}
            }
        }
        let connect = self.pseudo(METHOD) == Some(b"CONNECT");
        let complete = if connect { seen == 1 | 8 } else { seen & 7 == 7 };
        if !complete || self.pseudo(PATH) == Some(b"") {
            return Err(Malformed);
        }
        if let (Some(h), Some(a)) = (host, self.pseudo(AUTHORITY)) {
            if !h.eq_ignore_ascii_case(a) {
                return Err(Malformed);
            }
        }
        Ok(content_length)
    }

    /// Builds the request from fields that [`Fields::validate`] accepted. `Err`: the 4xx
    /// (or 501) to answer on the stream.
    pub fn request(&self, limits: &Limits) -> Result<Request<'_>, Reject> {
        let method_str = self.pseudo(METHOD).and_then(text).ok_or(reject(400, "invalid :method"))?;
        let method = Method::from_token(method_str).ok_or(reject(501, "unknown method"))?;
        let authority = self.pseudo(AUTHORITY);
        let target = match method {
            Method::Connect => authority.and_then(text).ok_or(reject(400, "invalid :authority"))?,
            _ => self.pseudo(PATH).and_then(text).ok_or(reject(400, "invalid :path"))?,
        };
        if target.len() > limits.max_uri_bytes {
            return Err(reject(414, "request-target too long"));
        }
        let mut r = Request::new(method, method_str, target, 1, 0);
        if method != Method::Connect {
            // The first '#' or '?', looked for only when a word-at-a-time test finds one: a
            // fragment anywhere is refused; the first '?' starts the query.
            let bytes = target.as_bytes();
            let first =
                if query_or_fragment(bytes) { bytes.iter().position(|&b| b == b'#' || b == b'?') } else { None };
            if first.is_some_and(|i| bytes[i] == b'#' || bytes[i + 1..].contains(&b'#')) {
                return Err(reject(400, "fragment in :path"));
            }
            if target == "*" {
                if method != Method::Options {
                    return Err(reject(400, "asterisk-form is only for OPTIONS"));
                }
                r.path = "*";
            } else if !target.starts_with('/') {
                return Err(reject(400, "invalid :path"));
            } else if let Some(q) = first {
                // ASCII (`text`): any byte is a character boundary.
                r.path = &target[..q];
                r.query = Some(&target[q + 1..]);
            }
        }
        let mut repeated = 0u8;
        for (name, value) in self.iter().skip_while(|(n, _)| n.first() == Some(&b':')) {
            let (slot, bit) = match name {
                b"host" => (&mut r.host, 32),
                b"range" => (&mut r.range, 1),
                b"referer" => (&mut r.referer, 0),
                b"if-range" => (&mut r.if_range, 2),
                b"user-agent" => (&mut r.user_agent, 0),
                b"authorization" => (&mut r.authorization, 4),
                b"if-modified-since" => (&mut r.if_modified_since, 8),
                b"if-unmodified-since" => (&mut r.if_unmodified_since, 16),
                b"accept" => {
                    join_line(&mut r.accept, value);
                    continue;
                }
                b"if-match" => {
                    join_line(&mut r.if_match, value);
                    continue;
                }
                b"if-none-match" => {
                    join_line(&mut r.if_none_match, value);
                    continue;
                }
                b"accept-encoding" => {
                    join_line(&mut r.accept_encoding, value);
                    continue;
                }
                b"forwarded" | b"x-forwarded-for" => {
                    let slot = if name.len() == 9 { &mut r.forwarded } else { &mut r.x_forwarded_for };
                    *slot = Some(if slot.is_some() { &[][..] } else { value });
                    continue;
                }
                b"expect" if value.eq_ignore_ascii_case(b"100-continue") => continue,
                b"expect" => return Err(reject(417, "unsupported expectation")),
                b"content-length" => {
                    let n = parse_decimal(value).unwrap_or(0);
                    r.framing = if n == 0 { Framing::None } else { Framing::Length(n) };
                    continue;
                }
                _ => continue,
            };
            if slot.is_some() {
                repeated |= bit;
            }
            *slot = Some(value);
        }
        r.drop_repeated(repeated);
        // `:authority` is the target's authority; a `host` (validated to agree) stands in
        // for it when a client sends only that.
        if let Some(a) = authority {
            r.host = Some(a);
        }
        if r.host.is_some_and(|h| !valid_host(h)) {
            return Err(reject(400, "invalid :authority"));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&str, &str)]) -> Fields {
        let mut f = Fields::default();
        for (n, v) in list {
            f.push(n.as_bytes(), v.as_bytes());
        }
        f
    }

    const GET: [(&str, &str); 4] =
        [(":method", "GET"), (":scheme", "https"), (":path", "/a/b?x=1"), (":authority", "ex.org")];
    const LIMITS: Limits = Limits { max_header_bytes: 8192, max_uri_bytes: 100, max_headers: 100 };

    fn with(extra: &[(&'static str, &'static str)]) -> Fields {
        let mut all = GET.to_vec();
        all.extend_from_slice(extra);
        fields(&all)
    }

    /// The `:path` split at its first `?`, and a `#` anywhere refused, for every length the
    /// word-at-a-time search reads differently (under 4, 4 to 7, 8 and more bytes).
    #[test]
    fn the_path_splits_at_its_query_and_refuses_a_fragment() {
        let split = |path: &str| {
            let f = fields(&[(":method", "GET"), (":scheme", "https"), (":path", path), (":authority", "ex.org")]);
            f.request(&LIMITS).map(|r| (r.path.to_string(), r.query.map(str::to_string))).map_err(|e| e.status)
        };
        for path in ["/", "/a", "/abc", "/abcdefg", "/abcdefgh", "/abcdefghijklmnopq"] {
            assert_eq!(split(path), Ok((path.to_string(), None)), "{path}");
            let with_query = format!("{path}?x=1?y");
            assert_eq!(split(&with_query), Ok((path.to_string(), Some("x=1?y".to_string()))), "{with_query}");
            for bad in [format!("{path}#"), format!("{path}#f?x"), format!("{path}?x#f"), format!("#{path}")] {
                assert_eq!(split(&bad), Err(400), "{bad}");
            }
        }
        assert_eq!(split("/?"), Ok(("/".to_string(), Some(String::new()))));
    }

    #[test]
    fn a_plain_get() {
        let f =
            with(&[("accept-encoding", "br"), ("accept-encoding", "gzip"), ("user-agent", "t"), ("te", "trailers")]);
        assert_eq!(f.validate(), Ok(None));
        let r = f.request(&LIMITS).unwrap();
        assert_eq!(
            (r.method, r.method_str, r.target, r.path, r.query),
            (Method::Get, "GET", "/a/b?x=1", "/a/b", Some("x=1"))
        );
        assert_eq!(r.host, Some(&b"ex.org"[..]));
        assert_eq!(r.accept_encoding.as_deref(), Some(&b"br, gzip"[..]));
        assert_eq!(r.user_agent, Some(&b"t"[..]));
        let extra = (15 + 2 + 32) + (15 + 4 + 32) + (10 + 1 + 32) + (2 + 8 + 32);
        assert_eq!(f.list_size(), GET.iter().map(|(n, v)| n.len() + v.len() + 32).sum::<usize>() + extra);
    }

    #[test]
    fn malformed_requests() {
        let bad = |f: Fields| assert_eq!(f.validate(), Err(Malformed), "{f:?}");
        bad(with(&[("Accept", "x")]));
        bad(with(&[("acc ept", "x")]));
        bad(with(&[("", "x")]));
        bad(with(&[("x", " lead")]));
        bad(with(&[("x", "trail\t")]));
        bad(with(&[("x", "a\r\nb")]));
        bad(with(&[("x", "nul\0")]));
        bad(with(&[("connection", "keep-alive")]));
        bad(with(&[("transfer-encoding", "chunked")]));
        bad(with(&[("upgrade", "h2c")]));
        bad(with(&[("te", "gzip")]));
        bad(with(&[("content-length", "12x")]));
        bad(with(&[("content-length", "1"), ("content-length", "2")]));
        bad(with(&[("host", "other.org")]));
        bad(with(&[(":status", "200")]));
        bad(with(&[(":method", "GET")]));
        bad(with(&[("x", "y"), (":extra", "z")]));
        bad(fields(&[(":method", "GET"), ("x", "y"), (":scheme", "https"), (":path", "/")]));
        bad(fields(&[(":method", "GET"), (":scheme", "https")]));
        bad(fields(&[(":method", "GET"), (":scheme", "https"), (":path", "")]));
        bad(fields(&[(":method", "CONNECT"), (":authority", "a:443"), (":path", "/")]));
        assert_eq!(with(&[("content-length", "5"), ("host", "EX.org")]).validate(), Ok(Some(5)));
        assert_eq!(fields(&[(":method", "CONNECT"), (":authority", "a:443")]).validate(), Ok(None));
    }

    /// The byte-at-a-time rule for names (RFC 9113 §8.2.1): visible ASCII, not uppercase.
    fn name_byte(b: u8) -> bool {
        (0x21..0x7f).contains(&b) && !b.is_ascii_uppercase()
    }

    /// Every byte at every place of names and values of every length up to 20 (the others
    /// valid): the word-at-a-time checks say what the byte-at-a-time rules say, so no byte
    /// is left out of the words and no bound is off by one.
    #[test]
    fn word_checks_see_every_byte() {
        for len in 1..=20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    v[at] = b;
                    assert_eq!(clean_name(&v), name_byte(b), "name {v:?}");
                    assert_eq!(clean_value(&v), b != 0 && b != b'\r' && b != b'\n', "value {v:?}");
                }
            }
        }
        assert!(!clean_name(b"") && clean_value(b""));
    }

    proptest::proptest! {
        /// The word-at-a-time name check says what the byte-at-a-time rule says.
        #[test]
        fn clean_name_is_visible_ascii_not_uppercase(v in proptest::collection::vec(
            proptest::sample::select(&[0u8, b' ', b'!', b'@', b'A', b'Z', b'[', b'a', b'~', 0x7f, 0x80, 0xc1, 0xff][..]), 0..40)
        ) {
            proptest::prop_assert_eq!(clean_name(&v), !v.is_empty() && v.iter().all(|&b| name_byte(b)));
        }

        /// The word-at-a-time check says what the byte-at-a-time one says.
        #[test]
        fn clean_value_is_no_nul_cr_or_lf(v in proptest::collection::vec(
            proptest::sample::select(&[0u8, b'\r', b'\n', b'a', b' ', 0x0c, 0x8d, 0x8a, 0xff, 0x01][..]), 0..40)
        ) {
            proptest::prop_assert_eq!(clean_value(&v), !v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n'));
        }
    }

    #[test]
    fn the_same_4xx_as_http1() {
        let status = |f: Fields| f.request(&LIMITS).map(|_| 0).unwrap_or_else(|r| r.status);
        assert_eq!(status(fields(&[(":method", "BREW"), (":scheme", "http"), (":path", "/")])), 501);
        let long = format!("/{}", "a".repeat(100));
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "http"), (":path", &long)])), 414);
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "http"), (":path", "a")])), 400);
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "http"), (":path", "*")])), 400);
        assert_eq!(status(fields(&[(":method", "OPTIONS"), (":scheme", "http"), (":path", "*")])), 0);
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "http"), (":path", "/#f")])), 400);
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "http"), (":path", "/é")])), 400);
        assert_eq!(status(with(&[("expect", "magic")])), 417);
        assert_eq!(status(fields(&[(":method", "GET"), (":scheme", "h"), (":path", "/"), (":authority", "a b")])), 400);
        assert_eq!(status(fields(&[(":method", "CONNECT"), (":authority", "a:443")])), 0);
    }

    #[test]
    fn repeated_single_value_fields() {
        let f = with(&[("range", "bytes=0-1"), ("range", "bytes=2-3"), ("authorization", "a"), ("authorization", "b")]);
        let r = f.request(&LIMITS).unwrap();
        assert_eq!((r.range, r.authorization), (None, Some(&b""[..])));
        let f = fields(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("host", "h.example")]);
        assert_eq!(f.request(&LIMITS).unwrap().host, Some(&b"h.example"[..]));
        let f = with(&[("content-length", "7")]);
        assert_eq!(f.request(&LIMITS).unwrap().framing, Framing::Length(7));
    }
}
