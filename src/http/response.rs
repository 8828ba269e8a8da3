//! Response heads, rendered into a reused buffer with no allocation once it has grown, and
//! the small HTML bodies of error responses.
//!
//! A head is the protocol-neutral answer's status and fields: [`Head`] writes them as
//! HTTP/1.1 bytes (what HTTP/1.1 sends as they are) and, for an exchange of HTTP/2 or
//! HTTP/3, records as it writes where each field's name and value are ([`FieldSpans`]),
//! so those protocols encode the fields from the spans and never parse the text. Blocks of
//! fields rendered once ([`Rendered`]: the fields every response carries, a cache entry's
//! validators) keep their own marks: a head shares those of its fixed fields and records a
//! cache entry's validators as one mark, so what it copies costs the recording little.

use super::reason;
#[cfg(any(feature = "http2", feature = "http3"))]
use std::rc::Rc;

/// What HTTP/2 and HTTP/3 send of a head: its status, and where each field's name and
/// value are in the rendered bytes, recorded by [`Head`] as it writes them (the protocols
/// that frame their own heads never parse the HTTP/1.1 text back). Recording is off until
/// [`FieldSpans::record`]: HTTP/1.1 writes the bytes and pays one test per field. What is
/// recorded per field is the least that locates it (where its line ends, how long its
/// name is: lines follow each other), so that a head HTTP/2 need not encode again (its
/// `HeadMemo`) costs little; [`FieldSpans::spans`] makes the spans from it.
/// (One word in every exchange: HTTP/1.1's hold `None`.)
#[cfg(any(feature = "http2", feature = "http3"))]
#[derive(Debug, Default)]
pub struct FieldSpans(Option<Box<Recorded>>);

/// Without HTTP/2 and HTTP/3 there is nothing to record.
#[cfg(not(any(feature = "http2", feature = "http3")))]
#[derive(Debug, Default)]
pub struct FieldSpans(());

/// What a recording [`FieldSpans`] holds: the status, where the `Date` line and the fixed
/// fields that follow it start, the fixed fields' marks (shared with the block they come
/// from, [`Rendered`], not copied for each head), and a mark for each field line written
/// after them.
#[cfg(any(feature = "http2", feature = "http3"))]
#[derive(Debug, Default)]
struct Recorded {
    status: u16,
    /// Whether a head was built since [`FieldSpans::record`].
    built: bool,
    start: u32,
    fixed_at: u32,
    fixed: Rc<[Mark]>,
    marks: Vec<Mark>,
}

/// One field line as it was written: where it ends (after its CRLF; the next line starts
/// there), the length of its name, and what it is.
#[cfg(any(feature = "http2", feature = "http3"))]
#[derive(Clone, Copy, Debug)]
struct Mark {
    end: u32,
    name: u32,
    tag: Tag,
}

/// Where one field is in a rendered head: its name, its value (without the optional
/// whitespace a configured value may carry around it), and what it is.
#[cfg(any(feature = "http2", feature = "http3"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub name: (u32, u32),
    pub value: (u32, u32),
    pub tag: Tag,
}

/// What a recorded field is, for a protocol that keeps encodings of some fields made once
/// (HTTP/2: a cache entry's `content-length`, `etag` and `last-modified`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Plain,
    /// A cache entry's `Content-Length` line ([`Head::entry_length`]).
    EntryLength,
    /// A field of a cache entry's validator block (`ETag`, `Last-Modified`).
    EntryValidators,
}

#[cfg(any(feature = "http2", feature = "http3"))]
impl Span {
    pub fn name<'h>(&self, head: &'h [u8]) -> &'h [u8] {
        &head[self.name.0 as usize..self.name.1 as usize]
    }

    pub fn value<'h>(&self, head: &'h [u8]) -> &'h [u8] {
        &head[self.value.0 as usize..self.value.1 as usize]
    }
}

#[cfg(any(feature = "http2", feature = "http3"))]
impl FieldSpans {
    /// Starts recording: every head built with these spans from now on records its status
    /// and fields. Until one is built, they are a bare 500.
    pub fn record(&mut self) {
        let r = self.0.get_or_insert_with(Box::default);
        r.status = 500;
        r.built = false;
        r.marks.clear();
        r.marks.reserve(16);
    }

    /// The status of the head last built (500 when not recording).
    pub fn status(&self) -> u16 {
        self.0.as_ref().map_or(500, |r| r.status)
    }

    /// The fields of `head`, the head last built with these spans, in order, except the
    /// connection-specific ones (RFC 9113 §8.2.2, RFC 9114 §4.2), which HTTP/2 and HTTP/3
    /// do not carry.
    pub fn spans<'s>(&'s self, head: &'s [u8]) -> impl Iterator<Item = Span> + 's {
        let r = self.0.as_deref().filter(|r| r.built);
        let (mut at, fixed_at) = r.map_or((0, 0), |r| (r.start, r.fixed_at));
        // The `Date` line (its name four bytes long) ends where the fixed fields start.
        let date = r.map(|_| Mark { end: fixed_at, name: 4, tag: Tag::Plain });
        let fixed = r.map_or(&[][..], |r| &r.fixed[..]).iter().map(move |m| Mark { end: m.end + fixed_at, ..*m });
        let marks = r.map_or(&[][..], |r| &r.marks[..]).iter().copied();
        // A validators mark holds two lines (`Head::validators`): `ETag`, its line's length
        // in place of a name length, then `Last-Modified` up to the mark's end, if any.
        let mut line = at;
        let lines = date.into_iter().chain(fixed).chain(marks).flat_map(move |m| {
            let start = line;
            line = m.end;
            if m.tag != Tag::EntryValidators {
                return [Some(m), None];
            }
            let split = start + m.name;
            let etag = (m.name > 0).then_some(Mark { end: split, name: ETAG.len() as u32, tag: m.tag });
            let lm = (split < m.end).then_some(Mark { end: m.end, name: LAST_MODIFIED.len() as u32, tag: m.tag });
            [etag, lm]
        });
        lines.flatten().filter_map(move |m| {
            let (start, name_end) = (at, at + m.name);
            at = m.end;
            let name = head.get(start as usize..name_end as usize)?;
            let raw = head.get(name_end as usize + 2..(m.end as usize).checked_sub(2)?)?;
            if super::fields::connection_specific(name) {
                return None;
            }
            let v = name_end + 2 + (raw.len() - raw.trim_ascii_start().len()) as u32;
            Some(Span { name: (start, name_end), value: (v, v + raw.trim_ascii().len() as u32), tag: m.tag })
        })
    }
}

#[cfg(any(feature = "http2", feature = "http3"))]
impl Recorded {
    /// A head with `status` begins, its `Date` field written before `at` and `fixed` about
    /// to be: the marks of the fields that follow. The fixed fields' marks are the block's
    /// own, shared, so a head records nothing for them (`fixed` is the same block from one
    /// head to the next: one comparison).
    #[inline(never)]
    fn start(&mut self, status: u16, at: usize, date: &str, fixed: &Rendered) -> &mut Vec<Mark> {
        self.status = status;
        self.built = true;
        self.start = (at - date.len() - 8) as u32;
        self.fixed_at = at as u32;
        if !Rc::ptr_eq(&self.fixed, &fixed.marks) {
            self.fixed = Rc::clone(&fixed.marks);
        }
        self.marks.clear();
        &mut self.marks
    }
}

/// Field lines rendered once (each `Name: value` and CRLF) for heads to copy, with their
/// marks: the fields every response carries (`Server`...), a cache entry's validators.
#[derive(Debug, Default)]
pub struct Rendered {
    bytes: Vec<u8>,
    /// Shared with the heads that copy the block as their fixed fields ([`Recorded`]).
    #[cfg(any(feature = "http2", feature = "http3"))]
    marks: Rc<[Mark]>,
}

impl Rendered {
    /// A cache entry's validator fields: `ETag`, then `Last-Modified` if there is one (the
    /// layout [`Head::validators`] records in one mark). The caller guarantees that the
    /// values hold no CR or LF.
    pub fn validators(etag: &[u8], last_modified: Option<&[u8]>) -> Rendered {
        let mut fields = Rendered::default();
        fields.push(ETAG, etag);
        if let Some(lm) = last_modified {
            fields.push(LAST_MODIFIED, lm);
        }
        fields
    }

    /// Appends a field. The caller guarantees that `value` holds no CR or LF.
    pub fn push(&mut self, name: &str, value: &[u8]) {
        debug_assert!(!value.contains(&b'\r') && !value.contains(&b'\n'));
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(b": ");
        self.bytes.extend_from_slice(value);
        self.bytes.extend_from_slice(b"\r\n");
        #[cfg(any(feature = "http2", feature = "http3"))]
        {
            let mark = Mark { end: self.bytes.len() as u32, name: name.len() as u32, tag: Tag::Plain };
            self.marks = self.marks.iter().copied().chain([mark]).collect();
        }
    }

    /// Appends the fields of `other`.
    #[cfg(feature = "http3")]
    pub fn extend(&mut self, other: &Rendered) {
        let mut marks = self.marks.to_vec();
        extend_shifted(&mut marks, &other.marks, self.bytes.len());
        self.marks = marks.into();
        self.bytes.extend_from_slice(&other.bytes);
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        #[cfg(any(feature = "http2", feature = "http3"))]
        {
            self.marks = Rc::default();
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Appends a response head to a buffer, field by field, recording where each field is
/// when its [`FieldSpans`] record.
pub struct Head<'a> {
    buf: &'a mut Vec<u8>,
    #[cfg(any(feature = "http2", feature = "http3"))]
    marks: Option<&'a mut Vec<Mark>>,
}

/// What a response head usually needs; a buffer grows past it only for long heads.
const HEAD_CAPACITY: usize = 512;

impl<'a> Head<'a> {
    /// Clears `buf` and writes the status line, `Date`, and `fixed`: the fields every
    /// response carries, pre-rendered once ([`fixed_fields`]). Records the fields in `spans`
    /// when they record.
    #[cfg_attr(not(any(feature = "http2", feature = "http3")), allow(unused_variables))]
    pub fn new(buf: &'a mut Vec<u8>, spans: &'a mut FieldSpans, status: u16, date: &str, fixed: &Rendered) -> Head<'a> {
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
        #[cfg(any(feature = "http2", feature = "http3"))]
        let marks = spans.0.as_deref_mut().map(|r| r.start(status, buf.len(), date, fixed));
        buf.extend_from_slice(&fixed.bytes);
        Head {
            buf,
            #[cfg(any(feature = "http2", feature = "http3"))]
            marks,
        }
    }

    /// Records the field line just written, its name the first `name` bytes. (Inline, and
    /// no more than a mark: HTTP/1.1's heads, which record nothing, pay one test.)
    #[inline(always)]
    #[cfg_attr(not(any(feature = "http2", feature = "http3")), allow(unused_variables))]
    fn record(&mut self, name: usize, tag: Tag) {
        #[cfg(any(feature = "http2", feature = "http3"))]
        if let Some(marks) = &mut self.marks {
            marks.push(Mark { end: self.buf.len() as u32, name: name as u32, tag });
        }
    }

    /// Adds a field. The caller guarantees that `value` holds no CR or LF.
    #[inline]
    pub fn field(&mut self, name: &str, value: &[u8]) -> &mut Self {
        debug_assert!(!value.contains(&b'\r') && !value.contains(&b'\n'));
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
        self.record(name.len(), Tag::Plain);
        self
    }

    /// Adds one field line rendered beforehand: `name`, `: `, the value, CRLF.
    #[inline]
    pub fn rendered(&mut self, line: &[u8], name: &str) -> &mut Self {
        self.line(line, name, Tag::Plain)
    }

    /// Adds a cache entry's `Content-Length` line (rendered with the entry).
    #[inline]
    pub fn entry_length(&mut self, line: &[u8]) -> &mut Self {
        self.line(line, "Content-Length", Tag::EntryLength)
    }

    #[inline]
    fn line(&mut self, line: &[u8], name: &str, tag: Tag) -> &mut Self {
        debug_assert!(line.starts_with(name.as_bytes()) && line[name.len()..].starts_with(b": "));
        debug_assert!(line.ends_with(b"\r\n"));
        self.buf.extend_from_slice(line);
        self.record(name.len(), tag);
        self
    }

    /// Adds a cache entry's validator fields ([`Rendered::validators`]), recorded as one
    /// mark: [`Tag::EntryValidators`], the end of the block, and the `ETag` line's length in
    /// place of a name length ([`FieldSpans::spans`] makes the two fields of it).
    #[inline]
    pub fn validators(&mut self, fields: &Rendered) -> &mut Self {
        #[cfg(any(feature = "http2", feature = "http3"))]
        if let Some(marks) = &mut self.marks {
            let etag = fields.marks.first().map_or(0, |m| m.end);
            let end = (self.buf.len() + fields.bytes.len()) as u32;
            marks.push(Mark { end, name: etag, tag: Tag::EntryValidators });
        }
        self.buf.extend_from_slice(&fields.bytes);
        self
    }

    /// Adds a field with a numeric value.
    #[inline]
    pub fn number(&mut self, name: &str, value: u64) -> &mut Self {
        let mut n = itoa::Buffer::new();
        self.field(name, n.format(value).as_bytes())
    }

    /// Writes the `Connection` field that matches the decision to keep the connection open
    /// or not, and the blank line that ends the head. HTTP/1.1 keeps connections open by
    /// default, so `keep-alive` is only spelled out for HTTP/1.0 clients. (A
    /// connection-specific field: not recorded.)
    pub fn finish(&mut self, keep_alive: bool, minor: u8) {
        if !keep_alive {
            self.buf.extend_from_slice(b"Connection: close\r\n");
        } else if minor == 0 {
            self.buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
    }
}

/// Appends `from`, the marks of a block, for that block copied to `at`.
#[cfg(feature = "http3")]
fn extend_shifted(marks: &mut Vec<Mark>, from: &[Mark], at: usize) {
    let at = at as u32;
    for m in from {
        marks.push(Mark { end: m.end + at, ..*m });
    }
}

const ETAG: &str = "ETag";
const LAST_MODIFIED: &str = "Last-Modified";

/// Renders the fields sent on every response: `Server` (unless empty) and thttpd's `P3P`.
pub fn fixed_fields(server: &str, p3p: Option<&str>) -> Rendered {
    let mut out = Rendered::default();
    for (name, value) in [("Server", Some(server)), ("P3P", p3p)] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push(name, v.as_bytes());
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
        let mut spans = FieldSpans::default();
        let fixed = fixed_fields("ferrohttpd", None);
        let mut h = Head::new(&mut buf, &mut spans, 404, "Sun, 06 Nov 1994 08:49:37 GMT", &fixed);
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
            Head::new(&mut constant, &mut FieldSpans::default(), status, "d", &Rendered::default());
            built.clear();
            built.extend_from_slice(format!("HTTP/1.1 {status} {}\r\nDate: d\r\n", reason(status)).as_bytes());
            assert_eq!(constant, built, "{status}");
        }
    }

    #[test]
    fn keep_alive_spelling() {
        let mut buf = Vec::new();
        let mut spans = FieldSpans::default();
        Head::new(&mut buf, &mut spans, 200, "d", &fixed_fields("", None)).finish(true, 0);
        assert!(buf.ends_with(b"\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!buf.windows(6).any(|w| w == b"Server"));
        Head::new(&mut buf, &mut spans, 200, "d", &fixed_fields("s", Some("CP=\"x\""))).finish(true, 1);
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

    /// Every field a head is built with, written in every way a head can take it.
    #[cfg(any(feature = "http2", feature = "http3"))]
    fn build(buf: &mut Vec<u8>, spans: &mut FieldSpans, keep: bool) {
        let fixed = fixed_fields("ferrohttpd", Some("CP=\"x\""));
        let validators = Rendered::validators(b"\"1-2-3\"", Some(b"Sun, 06 Nov 1994 08:49:37 GMT"));
        let mut h = Head::new(buf, spans, 206, "Sun, 06 Nov 1994 08:49:37 GMT", &fixed);
        h.rendered(b"Content-Type: text/plain\r\n", "Content-Type");
        h.entry_length(b"Content-Length: 12\r\n");
        h.validators(&validators);
        // Configured fields: connection-specific ones (which a [[headers]] rule may name),
        // and values with whitespace around them.
        h.field("Connection", b"x").field("Keep-Alive", b"timeout=5").field("Transfer-Encoding", b"chunked");
        h.field("Upgrade", b"h2c").field("Proxy-Connection", b"close");
        h.field("X-Padded", b"  a b \t").number("Age", 7).field("X-Empty", b"");
        h.rendered(b"Accept-Ranges: bytes\r\n", "Accept-Ranges");
        h.finish(keep, 1);
    }

    #[test]
    #[cfg(any(feature = "http2", feature = "http3"))]
    fn spans_reproduce_every_field_but_the_connection_specific() {
        for keep in [true, false] {
            let (mut buf, mut spans) = (Vec::new(), FieldSpans::default());
            spans.record();
            build(&mut buf, &mut spans, keep);
            assert_eq!(spans.status(), 206);
            let got: Vec<(&[u8], &[u8], Tag)> =
                spans.spans(&buf).map(|s| (s.name(&buf), s.value(&buf), s.tag)).collect();
            let want: [(&[u8], &[u8], Tag); 11] = [
                (b"Date", b"Sun, 06 Nov 1994 08:49:37 GMT", Tag::Plain),
                (b"Server", b"ferrohttpd", Tag::Plain),
                (b"P3P", b"CP=\"x\"", Tag::Plain),
                (b"Content-Type", b"text/plain", Tag::Plain),
                (b"Content-Length", b"12", Tag::EntryLength),
                (b"ETag", b"\"1-2-3\"", Tag::EntryValidators),
                (b"Last-Modified", b"Sun, 06 Nov 1994 08:49:37 GMT", Tag::EntryValidators),
                (b"X-Padded", b"a b", Tag::Plain),
                (b"Age", b"7", Tag::Plain),
                (b"X-Empty", b"", Tag::Plain),
                (b"Accept-Ranges", b"bytes", Tag::Plain),
            ];
            assert_eq!(got, want);
            // Each span's line is a whole line of the head, as HTTP/1.1 sends it; the lines
            // not recorded are the status line and the connection-specific fields.
            let mut lines = Vec::new();
            for s in spans.spans(&buf) {
                let at = s.name.0 as usize;
                let end = at + buf[at..].windows(2).position(|w| w == b"\r\n").unwrap() + 2;
                let line = &buf[at..end];
                let raw = line[s.name(&buf).len()..].strip_prefix(b": ").unwrap();
                assert_eq!(raw[..raw.len() - 2].trim_ascii(), s.value(&buf));
                assert!(s.value.0 as usize >= at + s.name(&buf).len() + 2 && s.value.1 as usize <= end - 2);
                lines.push(line);
            }
            let text = std::str::from_utf8(&buf).unwrap();
            let mut left: Vec<&str> = text.split_inclusive("\r\n").collect();
            left.retain(|l| !lines.contains(&l.as_bytes()));
            let connection = if keep { vec![] } else { vec!["Connection: close\r\n"] };
            let mut expected = vec![
                "HTTP/1.1 206 Partial Content\r\n",
                "Connection: x\r\n",
                "Keep-Alive: timeout=5\r\n",
                "Transfer-Encoding: chunked\r\n",
                "Upgrade: h2c\r\n",
                "Proxy-Connection: close\r\n",
            ];
            expected.extend(connection);
            expected.push("\r\n");
            assert_eq!(left, expected);
        }
    }

    #[test]
    #[cfg(any(feature = "http2", feature = "http3"))]
    fn recording_changes_no_byte_and_restarts_with_each_head() {
        let (mut plain, mut recorded) = (Vec::new(), Vec::new());
        let mut off = FieldSpans::default();
        build(&mut plain, &mut off, true);
        assert_eq!(off.spans(&plain).count(), 0);
        let mut on = FieldSpans::default();
        on.record();
        build(&mut recorded, &mut on, true);
        assert_eq!(plain, recorded);
        let fixed = Rendered::default();
        Head::new(&mut recorded, &mut on, 404, "d", &fixed).finish(true, 1);
        assert_eq!(on.status(), 404);
        assert_eq!(on.spans(&recorded).count(), 1);
    }

    #[test]
    #[cfg(feature = "http3")]
    fn blocks_extended_keep_their_spans() {
        let mut a = fixed_fields("s", None);
        let mut b = Rendered::default();
        b.push("Alt-Svc", b"h3=\":443\"; ma=86400");
        a.extend(&b);
        assert_eq!(a.bytes(), b"Server: s\r\nAlt-Svc: h3=\":443\"; ma=86400\r\n");
        let (mut buf, mut spans) = (Vec::new(), FieldSpans::default());
        spans.record();
        Head::new(&mut buf, &mut spans, 200, "d", &a).field("X", b"y").finish(true, 1);
        let got: Vec<(&[u8], &[u8])> = spans.spans(&buf).map(|s| (s.name(&buf), s.value(&buf))).collect();
        let alt = &b"h3=\":443\"; ma=86400"[..];
        assert_eq!(got, [(&b"Date"[..], &b"d"[..]), (b"Server", b"s"), (b"Alt-Svc", alt), (b"X", b"y")]);
    }
}
