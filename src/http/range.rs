//! Range requests (RFC 9110 §14): parsing the `Range` field of a request into byte ranges of a
//! representation, and the framing of `multipart/byteranges` bodies (RFC 9110 §14.6).
//!
//! [`parse`] decides among three outcomes:
//!
//! - [`RangeSpec::Ignore`]: serve the whole representation with 200. This is the answer to an
//!   invalid field (bad syntax, `a-b` with `b < a`, no range at all), to a unit other than
//!   `bytes`, to more than `max_ranges` ranges, and to a set of satisfiable ranges whose lengths,
//!   summed *before* merging, exceed the length of the representation. That last rule is the
//!   defence against range amplification (many overlapping ranges, each answered in full, would
//!   turn a small request into a huge response); a 200 is never larger than the file.
//! - [`RangeSpec::Unsatisfiable`]: 416 with `Content-Range: bytes */LEN`. No range is
//!   satisfiable: each starts at or past the end, or is the suffix `-0`. An empty
//!   representation satisfies no range at all.
//! - [`RangeSpec::Ranges`]: 206. Unsatisfiable ranges are dropped; a last position past the end
//!   is clamped to `len - 1`; a suffix longer than the representation selects all of it. The
//!   ranges are sorted by start and coalesced when they overlap or when the gap between them
//!   is smaller than [`MERGE_GAP`] bytes (less than the framing of one more part would cost),
//!   as RFC 9110 §14.2 allows. Sorting departs from the SHOULD of §14.6 (parts in the order
//!   requested); §14.2 lets a server ignore out-of-order ranges altogether, and ascending,
//!   disjoint parts are what every client handles.
//!
//! Invariants: peer input never panics; all arithmetic is checked or saturating in `u64`, so
//! lengths beyond 4 GiB work and absurd numbers (`0-99999999999999999999`) are clamped, not
//! wrapped; every returned range satisfies `start <= end < len`, and the list is non-empty,
//! sorted and pairwise disjoint with gaps of at least `MERGE_GAP` bytes; the work done is
//! bounded by `max_ranges` (parsing stops as soon as it is exceeded) and the field's length.
//!
//! [`Multipart`] renders the framing of a multi-part body so the connection can stream it:
//! part header from memory, then the part's bytes (for instance with `sendfile`), and so on,
//! then the trailer. [`Multipart::content_length`] is exact, so the body needs no chunking.

/// Two ranges closer than this many bytes are coalesced into one part: roughly the size of a
/// part's header (boundary, `Content-Type`, `Content-Range`), so sending the gap costs no more
/// than separating the parts would.
pub const MERGE_GAP: u64 = 80;

/// A range of bytes, both ends inclusive, as in `Content-Range`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    /// The number of bytes in the range (at least 1 for ranges from [`parse`]).
    pub fn len(self) -> u64 {
        self.end.saturating_sub(self.start).saturating_add(1)
    }

    /// Never true for ranges from [`parse`]; present for clippy's `len_without_is_empty`.
    pub fn is_empty(self) -> bool {
        self.end < self.start
    }
}

/// What to do with a `Range` field.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeSpec {
    /// Ignore the field and serve the whole representation (200).
    Ignore,
    /// 416 with `Content-Range: bytes */LEN`.
    Unsatisfiable,
    /// 206 with these ranges: non-empty, sorted, disjoint, within the representation.
    Ranges(Vec<ByteRange>),
}

/// One syntactically valid range-spec, before it is applied to a length.
enum Spec {
    /// `first-[last]`
    Int(u64, Option<u64>),
    /// `-suffix`
    Suffix(u64),
}

/// Parses a `Range` field value for a representation of `len` bytes (see the module
/// documentation for the rules). `max_ranges` bounds the number of range-specs accepted;
/// more than that (counting unsatisfiable ones) is ignored, and 0 disables ranges.
pub fn parse(header: &[u8], len: u64, max_ranges: usize) -> RangeSpec {
    let Some(eq) = header.iter().position(|&b| b == b'=') else {
        return RangeSpec::Ignore;
    };
    let (unit, set) = (header[..eq].trim_ascii(), &header[eq + 1..]);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return RangeSpec::Ignore;
    }

    let mut ranges: Vec<ByteRange> = Vec::new();
    let mut count = 0usize;
    let mut total: u64 = 0;
    for item in super::list_items(set) {
        count += 1;
        if count > max_ranges {
            return RangeSpec::Ignore;
        }
        let Some(spec) = parse_spec(item) else {
            return RangeSpec::Ignore;
        };
        let range = match spec {
            Spec::Int(first, _) if first >= len => continue,
            Spec::Int(first, last) => ByteRange { start: first, end: last.map_or(len - 1, |last| last.min(len - 1)) },
            Spec::Suffix(0) => continue,
            Spec::Suffix(_) if len == 0 => continue,
            Spec::Suffix(n) => ByteRange { start: len - n.min(len), end: len - 1 },
        };
        total = match total.checked_add(range.len()) {
            Some(t) if t <= len => t,
            _ => return RangeSpec::Ignore,
        };
        ranges.push(range);
    }
    if count == 0 {
        // `bytes=` or `bytes=,,`: the set needs at least one range-spec.
        return RangeSpec::Ignore;
    }
    if ranges.is_empty() {
        return RangeSpec::Unsatisfiable;
    }
    merge(&mut ranges);
    RangeSpec::Ranges(ranges)
}

/// `int-range = first-pos "-" [ last-pos ]`, `suffix-range = "-" suffix-length`. An int-range
/// with `last < first` is invalid. Numbers too large for `u64` saturate: such a first-pos is
/// past any end, such a last-pos is clamped anyway, such a suffix selects the whole file.
fn parse_spec(item: &[u8]) -> Option<Spec> {
    let dash = item.iter().position(|&b| b == b'-')?;
    let (first, last) = (&item[..dash], &item[dash + 1..]);
    if first.is_empty() {
        return Some(Spec::Suffix(number(last)?));
    }
    let first = number(first)?;
    if last.is_empty() {
        return Some(Spec::Int(first, None));
    }
    let last = number(last)?;
    (last >= first).then_some(Spec::Int(first, Some(last)))
}

/// `1*DIGIT`, saturating at `u64::MAX`.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

/// Sorts and coalesces ranges that overlap or lie less than [`MERGE_GAP`] bytes apart.
fn merge(ranges: &mut Vec<ByteRange>) {
    ranges.sort_unstable_by_key(|r| (r.start, r.end));
    let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for &r in ranges.iter() {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(MERGE_GAP) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    *ranges = out;
}

/// Renders a `Content-Range` value: `bytes a-b/len`.
pub fn content_range(r: ByteRange, len: u64, out: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"bytes ");
    out.extend_from_slice(n.format(r.start).as_bytes());
    out.push(b'-');
    out.extend_from_slice(n.format(r.end).as_bytes());
    out.push(b'/');
    out.extend_from_slice(n.format(len).as_bytes());
}

/// Renders the `Content-Range` value of a 416 response: `bytes */len`.
pub fn unsatisfied_range(len: u64, out: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"bytes */");
    out.extend_from_slice(n.format(len).as_bytes());
}

/// The framing of a `multipart/byteranges` body, rendered piece by piece so the body can be
/// streamed: `part_header(0)`, the bytes of range 0, `part_header(1)`, ..., `trailer()`.
pub struct Multipart {
    ranges: Vec<ByteRange>,
    len: u64,
    content_type: String,
    boundary: String,
    content_length: u64,
}

impl Multipart {
    /// `ranges`: the parts, as returned by [`parse`]; `len`: the representation's length;
    /// `content_type`: its media type (left out of the part headers if empty; it must hold no
    /// CR or LF); `boundary_seed`: any number (a counter, an inode) that is scrambled into a
    /// 37-character alphanumeric boundary (`ferro` and 128 bits in hex), which cannot occur in
    /// a file by accident. It is not secret: a file crafted to contain the boundary of a
    /// future response could only confuse the client that asked for it.
    pub fn new(ranges: &[ByteRange], len: u64, content_type: &str, boundary_seed: u64) -> Multipart {
        debug_assert!(!content_type.contains(['\r', '\n']));
        let mut boundary = String::with_capacity(36);
        boundary.push_str("ferro");
        let mut state = boundary_seed;
        for _ in 0..2 {
            let x = splitmix64(&mut state);
            // 64 bits as 16 lowercase hex digits: alphanumeric, and safe in any header.
            for shift in (0..64).step_by(4).rev() {
                let nibble = ((x >> shift) & 0xf) as u8;
                boundary.push(char::from(if nibble < 10 { b'0' + nibble } else { b'a' + nibble - 10 }));
            }
        }
        let mut m = Multipart {
            ranges: ranges.to_vec(),
            len,
            content_type: content_type.to_owned(),
            boundary,
            content_length: 0,
        };
        let mut buf = Vec::with_capacity(128);
        let mut total: u64 = 0;
        for (i, r) in ranges.iter().enumerate() {
            buf.clear();
            m.part_header(i, &mut buf);
            total = total.saturating_add(buf.len() as u64).saturating_add(r.len());
        }
        buf.clear();
        m.trailer(&mut buf);
        m.content_length = total.saturating_add(buf.len() as u64);
        m
    }

    /// The ranges, one per part.
    pub fn ranges(&self) -> &[ByteRange] {
        &self.ranges
    }

    /// The boundary string (without the leading `--`).
    pub fn boundary(&self) -> &str {
        &self.boundary
    }

    /// The `Content-Type` of the response: `multipart/byteranges; boundary=...`.
    pub fn content_type(&self) -> String {
        format!("multipart/byteranges; boundary={}", self.boundary)
    }

    /// The exact length of the whole body: part headers, part data and trailer.
    pub fn content_length(&self) -> u64 {
        self.content_length
    }

    /// Appends what precedes the data of part `i`: `\r\n--B\r\nContent-Type: T\r\n
    /// Content-Range: bytes a-b/len\r\n\r\n`, without the leading CRLF for the first part.
    /// Appends nothing if there is no part `i`.
    pub fn part_header(&self, i: usize, out: &mut Vec<u8>) {
        let Some(&r) = self.ranges.get(i) else {
            return;
        };
        if i > 0 {
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"--");
        out.extend_from_slice(self.boundary.as_bytes());
        out.extend_from_slice(b"\r\n");
        if !self.content_type.is_empty() {
            out.extend_from_slice(b"Content-Type: ");
            out.extend_from_slice(self.content_type.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Content-Range: ");
        content_range(r, self.len, out);
        out.extend_from_slice(b"\r\n\r\n");
    }

    /// Appends the closing delimiter: `\r\n--B--\r\n`.
    pub fn trailer(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\r\n--");
        out.extend_from_slice(self.boundary.as_bytes());
        out.extend_from_slice(b"--\r\n");
    }
}

/// SplitMix64: a bijective scrambler, so different seeds give different boundaries.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    fn ranges(v: &[(u64, u64)]) -> RangeSpec {
        RangeSpec::Ranges(v.iter().map(|&(a, b)| r(a, b)).collect())
    }

    fn p(h: &str, len: u64) -> RangeSpec {
        parse(h.as_bytes(), len, 32)
    }

    /// Sizes and offsets past 4 GiB (a 32-bit box serving a large file): nothing is truncated
    /// to 32 bits anywhere in parsing, Content-Range or the multipart framing.
    #[test]
    fn ranges_above_4_gib() {
        let size = 6 * (1u64 << 30) + 123; // 6 GiB and a bit
        let start = (1u64 << 32) + 7;
        assert_eq!(p(&format!("bytes={start}-"), size), ranges(&[(start, size - 1)]));
        assert_eq!(p("bytes=-10", size), ranges(&[(size - 10, size - 1)]));
        assert_eq!(
            p(&format!("bytes={}-{}", 1u64 << 32, (1u64 << 32) + 99), size),
            ranges(&[(1 << 32, (1 << 32) + 99)])
        );
        assert_eq!(p(&format!("bytes={size}-"), size), RangeSpec::Unsatisfiable);
        let mut cr = Vec::new();
        content_range(ByteRange { start, end: size - 1 }, size, &mut cr);
        assert_eq!(cr, format!("bytes {start}-{}/{size}", size - 1).into_bytes());
        assert_eq!(ByteRange { start, end: size - 1 }.len(), size - start);
        let two = [ByteRange { start: 0, end: 9 }, ByteRange { start, end: start + 9 }];
        let mp = Multipart::new(&two, size, "application/octet-stream", 1);
        let mut framing = Vec::new();
        mp.part_header(1, &mut framing);
        assert!(String::from_utf8_lossy(&framing).contains(&format!("bytes {start}-{}/{size}", start + 9)));
        let mut total = 0;
        for i in 0..2 {
            let mut f = Vec::new();
            mp.part_header(i, &mut f);
            total += f.len() as u64 + 10;
        }
        let mut t = Vec::new();
        mp.trailer(&mut t);
        assert_eq!(mp.content_length(), total + t.len() as u64);
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-499", 10_000), ranges(&[(0, 499)]));
        assert_eq!(p("bytes=500-999", 10_000), ranges(&[(500, 999)]));
        assert_eq!(p("bytes=9500-", 10_000), ranges(&[(9500, 9999)]));
        assert_eq!(p("bytes=0-0", 10_000), ranges(&[(0, 0)]));
        assert_eq!(p("bytes=9999-9999", 10_000), ranges(&[(9999, 9999)]));
        assert_eq!(p("bytes=0-", 1), ranges(&[(0, 0)]));
    }

    #[test]
    fn suffix() {
        assert_eq!(p("bytes=-500", 10_000), ranges(&[(9500, 9999)]));
        assert_eq!(p("bytes=-1", 10_000), ranges(&[(9999, 9999)]));
        // Longer than the file: all of it.
        assert_eq!(p("bytes=-20000", 10_000), ranges(&[(0, 9999)]));
        assert_eq!(p("bytes=-10000", 10_000), ranges(&[(0, 9999)]));
        assert_eq!(p("bytes=-99999999999999999999999", 10), ranges(&[(0, 9)]));
        // A zero-length suffix is unsatisfiable.
        assert_eq!(p("bytes=-0", 10_000), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=-0,-0", 10_000), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=-0, 0-1", 10_000), ranges(&[(0, 1)]));
    }

    #[test]
    fn clamping_and_overflow() {
        assert_eq!(p("bytes=0-20000", 10_000), ranges(&[(0, 9999)]));
        assert_eq!(p("bytes=0-99999999999999999999999", 10_000), ranges(&[(0, 9999)]));
        assert_eq!(p("bytes=5-18446744073709551615", 10), ranges(&[(5, 9)]));
        assert_eq!(p("bytes=99999999999999999999999-", 10), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=99999999999999999999998-99999999999999999999999", 10), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=0-18446744073709551615", u64::MAX), ranges(&[(0, u64::MAX - 1)]));
        assert_eq!(p("bytes=-18446744073709551615", u64::MAX), ranges(&[(0, u64::MAX - 1)]));
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(p("bytes=10000-", 10_000), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=10000-20000", 10_000), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=20000-, 30000-40000", 10_000), RangeSpec::Unsatisfiable);
        // Unsatisfiable ranges are dropped when others remain.
        assert_eq!(p("bytes=20000-, 0-1", 10_000), ranges(&[(0, 1)]));
        // An empty file satisfies nothing.
        assert_eq!(p("bytes=0-", 0), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=0-0", 0), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=-1", 0), RangeSpec::Unsatisfiable);
        assert_eq!(p("bytes=-0", 0), RangeSpec::Unsatisfiable);
    }

    #[test]
    fn invalid_is_ignored() {
        for h in [
            "bytes=5-4",
            "bytes=0-1,5-4",
            "bytes=",
            "bytes=,",
            "bytes= , ,",
            "bytes=-",
            "bytes=1",
            "bytes=a-b",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=1 - 2",
            "bytes=0x10-",
            "bytes=--1",
            "bytes 0-1",
            "0-1",
            "",
            "=0-1",
            "items=0-1",
            "bytes=0-1;x",
            "bytes=١-٢",
        ] {
            assert_eq!(p(h, 10_000), RangeSpec::Ignore, "{h:?}");
        }
        // Even on an empty file, invalid syntax is ignored rather than unsatisfiable.
        assert_eq!(p("bytes=5-4", 0), RangeSpec::Ignore);
        assert_eq!(parse(b"bytes=\xff-1", 10, 32), RangeSpec::Ignore);
    }

    #[test]
    fn unit_case_and_whitespace() {
        assert_eq!(p("BYTES=0-1", 10), ranges(&[(0, 1)]));
        assert_eq!(p("Bytes=0-1", 10), ranges(&[(0, 1)]));
        assert_eq!(p("bytes=0-1 ,\t 200-300", 1000), ranges(&[(0, 1), (200, 300)]));
        assert_eq!(p("bytes=,0-1,,200-300,", 1000), ranges(&[(0, 1), (200, 300)]));
        assert_eq!(p("bytes= 0-1", 10), ranges(&[(0, 1)]));
    }

    #[test]
    fn merging() {
        // Overlapping.
        assert_eq!(p("bytes=0-100,50-150", 10_000), ranges(&[(0, 150)]));
        // Contained.
        assert_eq!(p("bytes=0-500,100-200", 10_000), ranges(&[(0, 500)]));
        // Adjacent.
        assert_eq!(p("bytes=0-9,10-19", 10_000), ranges(&[(0, 19)]));
        // A gap smaller than 80 bytes is coalesced (10..=88 is 79 bytes); 80 bytes is not.
        assert_eq!(p("bytes=0-9,50-59", 10_000), ranges(&[(0, 59)]));
        assert_eq!(p("bytes=0-9,89-99", 10_000), ranges(&[(0, 99)]));
        assert_eq!(p("bytes=0-9,90-99", 10_000), ranges(&[(0, 9), (90, 99)]));
        // Sorted.
        assert_eq!(p("bytes=5000-5099,0-99", 10_000), ranges(&[(0, 99), (5000, 5099)]));
        assert_eq!(p("bytes=-100,0-99,5000-5099", 10_000), ranges(&[(0, 99), (5000, 5099), (9900, 9999)]));
    }

    #[test]
    fn amplification() {
        // Many overlapping full ranges: more bytes than the file -> 200.
        assert_eq!(p("bytes=0-,0-", 10_000), RangeSpec::Ignore);
        assert_eq!(p("bytes=0-9999,0-0", 10_000), RangeSpec::Ignore);
        assert_eq!(p("bytes=-10000,-1", 10_000), RangeSpec::Ignore);
        // Many small overlapping ranges that stay within the file's size: merged into one.
        let h = format!("bytes={}", (0..32).map(|i| format!("{i}-{}", i + 10)).collect::<Vec<_>>().join(","));
        assert_eq!(p(&h, 10_000), ranges(&[(0, 41)]));
        // The same against a small file: the sum exceeds it -> 200.
        assert_eq!(p(&h, 100), RangeSpec::Ignore);
        // Too many ranges -> 200, even if they are unsatisfiable or tiny.
        let h = format!("bytes={}", (0..33).map(|i| format!("{}-{}", i * 100, i * 100)).collect::<Vec<_>>().join(","));
        assert_eq!(p(&h, 1_000_000), RangeSpec::Ignore);
        assert_eq!(parse(h.as_bytes(), 1_000_000, 33).ranges_len(), Some(33));
        assert_eq!(parse(b"bytes=0-1", 100, 0), RangeSpec::Ignore);
        // Exactly the file's size in several ranges is fine.
        assert_eq!(p("bytes=0-4999,5000-", 10_000), ranges(&[(0, 9999)]));
    }

    #[test]
    fn beyond_4gib() {
        let len = 6 * 1024 * 1024 * 1024u64;
        assert_eq!(p("bytes=4294967296-4294967299", len), ranges(&[(4_294_967_296, 4_294_967_299)]));
        assert_eq!(p("bytes=-1", len), ranges(&[(len - 1, len - 1)]));
        assert_eq!(p("bytes=4294967295-", len), ranges(&[(4_294_967_295, len - 1)]));
        assert_eq!(p("bytes=0-0,5368709120-5368709121", len), ranges(&[(0, 0), (5_368_709_120, 5_368_709_121)]));
        let mut out = Vec::new();
        content_range(r(4_294_967_296, len - 1), len, &mut out);
        assert_eq!(out, b"bytes 4294967296-6442450943/6442450944");
    }

    #[test]
    fn content_range_values() {
        let mut out = Vec::new();
        content_range(r(0, 499), 1234, &mut out);
        assert_eq!(out, b"bytes 0-499/1234");
        out.clear();
        unsatisfied_range(1234, &mut out);
        assert_eq!(out, b"bytes */1234");
    }

    #[test]
    fn boundaries() {
        let a = Multipart::new(&[r(0, 0)], 1, "text/plain", 1);
        let b = Multipart::new(&[r(0, 0)], 1, "text/plain", 2);
        assert_ne!(a.boundary(), b.boundary());
        assert!(a.boundary().len() >= 20 && a.boundary().len() <= 70);
        assert!(a.boundary().bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(a.content_type(), format!("multipart/byteranges; boundary={}", a.boundary()));
    }

    /// A strict parser for the bodies [`Multipart`] frames: returns (content type, content
    /// range, data) per part.
    fn parse_multipart(body: &[u8], boundary: &str) -> Vec<(Option<String>, String, Vec<u8>)> {
        let delim = format!("--{boundary}");
        let mut parts = Vec::new();
        let mut rest = body.strip_prefix(delim.as_bytes()).expect("starts with a delimiter");
        loop {
            if let Some(end) = rest.strip_prefix(b"--") {
                assert_eq!(end, b"\r\n", "nothing after the close delimiter");
                return parts;
            }
            rest = rest.strip_prefix(b"\r\n").expect("CRLF after delimiter");
            let head_end = find(rest, b"\r\n\r\n").expect("end of part head");
            let head = std::str::from_utf8(&rest[..head_end]).expect("ASCII head");
            rest = &rest[head_end + 4..];
            let mut ct = None;
            let mut cr = None;
            for line in head.split("\r\n") {
                let (name, value) = line.split_once(": ").expect("field");
                match name {
                    "Content-Type" => ct = Some(value.to_owned()),
                    "Content-Range" => cr = Some(value.to_owned()),
                    other => panic!("unexpected field {other}"),
                }
            }
            let cr = cr.expect("Content-Range in each part");
            // The data length comes from Content-Range: the delimiter must follow it exactly.
            let spec = cr.strip_prefix("bytes ").expect("bytes unit");
            let (range, _) = spec.split_once('/').expect("length");
            let (a, b) = range.split_once('-').expect("a-b");
            let n = (b.parse::<usize>().expect("b") - a.parse::<usize>().expect("a")) + 1;
            parts.push((ct, cr, rest[..n].to_vec()));
            rest = &rest[n..];
            let sep = format!("\r\n{delim}");
            rest = rest.strip_prefix(sep.as_bytes()).expect("delimiter after the data");
        }
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    fn assemble(m: &Multipart, file: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, r) in m.ranges().iter().enumerate() {
            m.part_header(i, &mut body);
            body.extend_from_slice(&file[r.start as usize..=r.end as usize]);
        }
        m.trailer(&mut body);
        body
    }

    #[test]
    fn multipart_round_trip() {
        let file: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let len = file.len() as u64;
        let RangeSpec::Ranges(rs) = p("bytes=-100,0-99,5000-5099,200-299", len) else {
            panic!("expected ranges");
        };
        assert_eq!(rs.len(), 4);
        let m = Multipart::new(&rs, len, "application/octet-stream", 42);
        let body = assemble(&m, &file);
        assert_eq!(body.len() as u64, m.content_length());
        let parts = parse_multipart(&body, m.boundary());
        assert_eq!(parts.len(), rs.len());
        for (part, r) in parts.iter().zip(&rs) {
            assert_eq!(part.0.as_deref(), Some("application/octet-stream"));
            assert_eq!(part.1, format!("bytes {}-{}/{}", r.start, r.end, len));
            assert_eq!(part.2, &file[r.start as usize..=r.end as usize]);
        }
        // Part data are not needed to compute the length: headers + sizes + trailer.
        let mut framing = Vec::new();
        for i in 0..rs.len() {
            m.part_header(i, &mut framing);
        }
        m.trailer(&mut framing);
        let data: u64 = rs.iter().map(|r| r.len()).sum();
        assert_eq!(framing.len() as u64 + data, m.content_length());
        // Out-of-range index: nothing.
        let mut none = Vec::new();
        m.part_header(99, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn multipart_without_content_type() {
        let file = b"0123456789abcdefghijklmnopqrstuvwxyz".repeat(10);
        let rs = [r(0, 3), r(300, 359)];
        let m = Multipart::new(&rs, file.len() as u64, "", 7);
        let body = assemble(&m, &file);
        assert_eq!(body.len() as u64, m.content_length());
        let parts = parse_multipart(&body, m.boundary());
        assert_eq!(parts[0].0, None);
        assert_eq!(parts[1].2, &file[300..360]);
        assert!(body.starts_with(b"--ferro"));
        assert!(body.ends_with(format!("\r\n--{}--\r\n", m.boundary()).as_bytes()));
    }

    trait RangesLen {
        fn ranges_len(&self) -> Option<usize>;
    }

    impl RangesLen for RangeSpec {
        fn ranges_len(&self) -> Option<usize> {
            match self {
                RangeSpec::Ranges(v) => Some(v.len()),
                _ => None,
            }
        }
    }

    fn header_strategy() -> impl Strategy<Value = String> {
        let num = prop_oneof![
            Just(String::new()),
            (0u64..2000).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just("99999999999999999999999".to_owned()),
        ];
        let spec = prop_oneof![
            (num.clone(), num.clone()).prop_map(|(a, b)| format!("{a}-{b}")),
            Just(String::new()),
            "[ -~]{0,6}",
        ];
        (prop_oneof![Just("bytes="), Just("BYTES="), Just("bytes ="), Just("x=")], prop::collection::vec(spec, 0..40))
            .prop_map(|(unit, specs)| format!("{unit}{}", specs.join(" ,")))
    }

    proptest! {
        #[test]
        fn parse_is_total_and_sound(
            h in header_strategy(),
            len in prop_oneof![0u64..3000, any::<u64>()],
            max in 0usize..40,
        ) {
            match parse(h.as_bytes(), len, max) {
                RangeSpec::Ranges(rs) => {
                    prop_assert!(!rs.is_empty());
                    prop_assert!(rs.len() <= max);
                    let mut total = 0u64;
                    for (i, r) in rs.iter().enumerate() {
                        prop_assert!(r.start <= r.end && r.end < len, "{:?} len {}", r, len);
                        total += r.len();
                        if i > 0 {
                            prop_assert!(rs[i - 1].end.saturating_add(MERGE_GAP) < r.start);
                        }
                    }
                    prop_assert!(total <= len);
                    let m = Multipart::new(&rs, len, "text/plain", len);
                    prop_assert!(m.content_length() > total);
                }
                RangeSpec::Unsatisfiable | RangeSpec::Ignore => {}
            }
        }

        #[test]
        fn parse_never_panics_on_bytes(h in prop::collection::vec(any::<u8>(), 0..64), len in any::<u64>()) {
            let _ = parse(&h, len, 8);
        }
    }
}
