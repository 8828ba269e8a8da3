//! The invariants the fuzzers check, shared by the `cargo fuzz` targets (`fuzz/fuzz_targets/`)
//! and by `tests/fuzz.rs`, which replays every committed corpus file (`fuzz/corpus/*/*`)
//! through the same functions, so a regression shows in `cargo test`.
//!
//! Each `check_*` function takes the raw fuzzer input, returns `Err(description)` when an
//! invariant is broken, and never panics on its own (a panic is then a bug in the code under
//! test). Inputs that need more than bytes (a length, limits, flags) take them from the first
//! bytes of the input, so every corpus file is self-contained.

use ferrohttpd::fs::resolve::{self, ResolveError};
use ferrohttpd::http::conditional::{self, Conditions, Outcome, Validators};
use ferrohttpd::http::range::{self, RangeSpec, MERGE_GAP};
use ferrohttpd::http::request::{self, ChunkedSkipper, Framing, Limits, Method, MAX_CHUNK_LINE, MAX_TRAILERS};
use ferrohttpd::proxy;
use std::path::{Component, Path};

/// The limits the request-head checks use: the defaults, and small ones that every input
/// can reach.
pub const DEFAULT_LIMITS: Limits = Limits { max_header_bytes: 16384, max_uri_bytes: 8192, max_headers: 100 };
pub const SMALL_LIMITS: Limits = Limits { max_header_bytes: 256, max_uri_bytes: 64, max_headers: 4 };

/// Bytes shown escaped, cut at 200 characters.
pub fn show(bytes: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(bytes).escape_debug().collect();
    if s.chars().count() > 200 {
        format!("{}... ({} bytes)", s.chars().take(200).collect::<String>(), bytes.len())
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Request heads (`http::request::parse`)
// ---------------------------------------------------------------------------------------------

/// The `head` target: the first byte picks the limits (odd: small), the rest is the request.
pub fn check_head(data: &[u8]) -> Result<(), String> {
    let (limits, input) = match data.split_first() {
        Some((b, rest)) => (if b & 1 == 1 { SMALL_LIMITS } else { DEFAULT_LIMITS }, rest),
        None => (DEFAULT_LIMITS, data),
    };
    check_parse_deep(input, &limits).map(|_| ())
}

pub fn method_token(m: Method) -> &'static str {
    match m {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Options => "OPTIONS",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Patch => "PATCH",
        Method::Trace => "TRACE",
        Method::Connect => "CONNECT",
    }
}

/// What `parse` made of an input.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    Incomplete,
    Rejected(u16),
    /// head_len and the path of the target.
    Request(usize, String),
}

/// Parses `input` and checks the invariants of the result.
pub fn check_parse(input: &[u8], limits: &Limits) -> Result<Parsed, String> {
    let mut buf = input.to_vec();
    let res = request::parse(&mut buf, limits);
    let req = match res {
        Ok(None) => return Ok(Parsed::Incomplete),
        Err(rej) => {
            if !(400..=599).contains(&rej.status) || rej.why.is_empty() {
                return Err(format!("rejection {rej:?} is not a 4xx/5xx with a reason"));
            }
            return Ok(Parsed::Rejected(rej.status));
        }
        Ok(Some(req)) => req,
    };
    let h = req.head_len;
    let fail =
        |what: String| -> Result<Parsed, String> { Err(format!("{what} (head_len {h}, input {} bytes)", input.len())) };
    if h == 0 || h > input.len() {
        return fail("head_len outside the input".into());
    }
    if h > limits.max_header_bytes {
        return fail(format!("a head of {h} bytes accepted with max_header_bytes {}", limits.max_header_bytes));
    }
    if !input[..h].ends_with(b"\n") {
        return fail("the head does not end with a newline".into());
    }
    if req.target.len() > limits.max_uri_bytes {
        return fail(format!(
            "a target of {} bytes accepted with max_uri_bytes {}",
            req.target.len(),
            limits.max_uri_bytes
        ));
    }
    if req.method_str != method_token(req.method) {
        return fail(format!("method token {:?} parsed as {:?}", req.method_str, req.method));
    }
    if req.minor > 1 {
        return fail(format!("HTTP/1.{} accepted", req.minor));
    }
    match req.host {
        None if req.minor >= 1 => return fail("an HTTP/1.1 request accepted without a Host".into()),
        Some(host) if !request::valid_host(host) => return fail(format!("invalid host {} accepted", show(host))),
        _ => {}
    }
    if req.framing == Framing::Chunked && req.minor == 0 {
        return fail("chunked framing accepted on HTTP/1.0".into());
    }
    let path_ok = req.path.starts_with('/')
        || (req.path == "*" && req.method == Method::Options)
        || req.method == Method::Connect;
    if !path_ok {
        return fail(format!("path {:?} is neither origin-form, `OPTIONS *` nor CONNECT", req.path));
    }
    if !req.target.contains(req.path) && req.path != "/" {
        return fail(format!("path {:?} is not part of the target {:?}", req.path, req.target));
    }
    if req.query.is_some() && !req.target.contains('?') {
        return fail(format!("a query without a `?` in the target {:?}", req.target));
    }
    if req.path.contains('?') && req.method != Method::Connect {
        return fail(format!("path {:?} still holds the query", req.path));
    }
    let path = req.path.to_string();
    Ok(Parsed::Request(h, path))
}

/// `check_parse`, plus: an accepted head parses the same on its own, and every strict prefix of
/// it asks for more bytes.
pub fn check_parse_deep(input: &[u8], limits: &Limits) -> Result<Parsed, String> {
    let parsed = check_parse(input, limits)?;
    if let Parsed::Request(h, _) = &parsed {
        let h = *h;
        match check_parse(&input[..h], limits)? {
            Parsed::Request(h2, _) if h2 == h => {}
            other => return Err(format!("the head alone ({h} bytes) parses as {other:?}")),
        }
        let mut cuts: Vec<usize> = vec![1, h / 4, h / 2, h - 1, h.saturating_sub(2), h.saturating_sub(3)];
        // Every cut around the end of the request line, where the version is.
        if let Some(nl) = input[..h].iter().position(|&b| b == b'\n') {
            cuts.extend(nl.saturating_sub(10)..=nl);
        }
        cuts.retain(|&k| k > 0 && k < h);
        cuts.sort_unstable();
        cuts.dedup();
        for k in cuts {
            match check_parse(&input[..k], limits)? {
                Parsed::Incomplete => {}
                other => {
                    return Err(format!(
                        "the request \"{}\" is accepted whole, but its first {k} bytes \"{}\" give {other:?} \
                         instead of asking for more (a request split across two reads would be refused)",
                        show(&input[..h]),
                        show(&input[..k])
                    ))
                }
            }
        }
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------------
// Paths (`fs::resolve::normalize`)
// ---------------------------------------------------------------------------------------------

/// The documented rules of `normalize`, written out plainly: decode once (a malformed escape,
/// a control byte, DEL, a backslash or invalid UTF-8 is refused), then remove dot segments
/// (empty and `.` segments go, `..` pops and may not climb above the root); a trailing slash
/// stays when the last segment was empty, `.` or `..`.
pub fn model_normalize(raw: &[u8]) -> Option<String> {
    if raw.first() != Some(&b'/') {
        return None;
    }
    let mut dec = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let b = if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            i += 3;
            u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?
        } else {
            i += 1;
            raw[i - 1]
        };
        if b < 0x20 || b == 0x7f || b == b'\\' {
            return None;
        }
        dec.push(b);
    }
    let s = String::from_utf8(dec).ok()?;
    let mut stack: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in s[1..].split('/') {
        match seg {
            "" | "." => trailing = true,
            ".." => {
                stack.pop()?;
                trailing = true;
            }
            _ => {
                stack.push(seg);
                trailing = false;
            }
        }
    }
    let mut out = format!("/{}", stack.join("/"));
    if trailing && !stack.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// The `normalize` target: `fs::resolve::normalize` agrees with [`model_normalize`]; its output
/// has no dot segment, empty segment, control byte or backslash, never climbs above a root, and
/// normalizing it again changes nothing.
pub fn check_normalize(raw: &[u8]) -> Result<(), String> {
    let mut out = String::from("leftover");
    let res = resolve::normalize(raw, &mut out);
    let model = model_normalize(raw);
    match (&res, &model) {
        (Ok(()), Some(m)) if out == *m => {}
        (Err(ResolveError::BadRequest), None) if out.is_empty() => {}
        _ => {
            return Err(format!(
                "normalize(\"{}\") = {res:?} with output {out:?}; the documented rules give {model:?}",
                show(raw)
            ))
        }
    }
    if res.is_err() {
        return Ok(());
    }
    if !out.starts_with('/') || out.contains("//") || out.contains('\\') || out.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(format!("normalize(\"{}\") gave {out:?}", show(raw)));
    }
    if out[1..].split('/').any(|s| s == "." || s == "..") {
        return Err(format!("normalize(\"{}\") left a dot segment: {out:?}", show(raw)));
    }
    let joined = Path::new("/srv/root").join(&out[1..]);
    if !joined.starts_with("/srv/root") || joined.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("normalize(\"{}\") = {out:?} climbs out of a root", show(raw)));
    }
    if !out.contains('%') {
        let mut again = String::new();
        match resolve::normalize(out.as_bytes(), &mut again) {
            Ok(()) if again == out => {}
            other => return Err(format!("normalize is not idempotent on {out:?}: {other:?} {again:?}")),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Chunked bodies (`http::request::ChunkedSkipper`)
// ---------------------------------------------------------------------------------------------

/// What the grammar of RFC 9112 §7.1 (with the skipper's bounds) says of a byte string that
/// starts a chunked body.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkModel {
    /// Valid so far, or not decidable line by line yet.
    Incomplete,
    /// A complete line (or an over-long partial one) breaks the grammar or a bound.
    Invalid,
    /// The body ends after this many bytes.
    Done(usize),
}

/// The next CRLF-terminated line at `pos`: `Ok(Some((content, next)))`, `Ok(None)` when no line
/// end has arrived yet (and the partial line is within bounds), `Err` for a bare CR or LF or
/// a line longer than `max`.
fn crlf_line(d: &[u8], pos: usize, max: usize) -> Result<Option<(&[u8], usize)>, ()> {
    let rest = &d[pos..];
    match rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        None if rest.len() > max => Err(()),
        None => Ok(None),
        Some(i) if i > max || rest[i] == b'\n' => Err(()),
        Some(i) => match rest.get(i + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((&rest[..i], pos + i + 2))),
            Some(_) => Err(()),
        },
    }
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`, the whole of `s`.
pub fn model_chunk_ext(s: &[u8]) -> bool {
    let ws = |s: &[u8], mut i: usize| {
        while i < s.len() && (s[i] == b' ' || s[i] == b'\t') {
            i += 1;
        }
        i
    };
    let token = |s: &[u8], i: usize| {
        let n = s[i..].iter().take_while(|&&b| tchar(b)).count();
        (n > 0).then_some(i + n)
    };
    let quoted = |s: &[u8], mut i: usize| -> Option<usize> {
        if s.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        loop {
            match *s.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => {
                    let c = *s.get(i + 1)?;
                    if !(c == b'\t' || c == b' ' || (0x21..=0x7e).contains(&c) || c >= 0x80) {
                        return None;
                    }
                    i += 2;
                }
                c if c == b'\t'
                    || c == b' '
                    || c == 0x21
                    || (0x23..=0x5b).contains(&c)
                    || (0x5d..=0x7e).contains(&c)
                    || c >= 0x80 =>
                {
                    i += 1
                }
                _ => return None,
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        i = ws(s, i);
        if s.get(i) != Some(&b';') {
            return false;
        }
        let Some(after_name) = token(s, ws(s, i + 1)) else { return false };
        i = after_name;
        let j = ws(s, i);
        if s.get(j) == Some(&b'=') {
            let v = ws(s, j + 1);
            match token(s, v).or_else(|| quoted(s, v)) {
                Some(end) => i = end,
                None => return false,
            }
        }
    }
    true
}

/// `field-name ":" OWS field-value OWS`, without obs-fold.
fn model_field_line(l: &[u8]) -> bool {
    let n = l.iter().take_while(|&&b| tchar(b)).count();
    n > 0
        && l.get(n) == Some(&b':')
        && l[n + 1..].iter().all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
}

/// The chunked-body grammar, applied line by line to the whole input at once.
pub fn model_chunked(d: &[u8]) -> ChunkModel {
    let mut pos = 0;
    loop {
        let (line, next) = match crlf_line(d, pos, MAX_CHUNK_LINE) {
            Err(()) => return ChunkModel::Invalid,
            Ok(None) => return ChunkModel::Incomplete,
            Ok(Some(l)) => l,
        };
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 0 || digits > 16 || !model_chunk_ext(&line[digits..]) {
            return ChunkModel::Invalid;
        }
        let Ok(hex) = std::str::from_utf8(&line[..digits]) else { return ChunkModel::Invalid };
        let Ok(size) = u64::from_str_radix(hex, 16) else { return ChunkModel::Invalid };
        pos = next;
        if size == 0 {
            break;
        }
        let Some(end) = usize::try_from(size).ok().and_then(|s| pos.checked_add(s)) else {
            return ChunkModel::Incomplete;
        };
        if end > d.len() {
            return ChunkModel::Incomplete;
        }
        match &d[end..end.saturating_add(2).min(d.len())] {
            b"\r\n" => pos = end + 2,
            b"\r" | b"" => return ChunkModel::Incomplete,
            _ => return ChunkModel::Invalid,
        }
    }
    let mut trailers = 0;
    loop {
        let (line, next) = match crlf_line(d, pos, MAX_CHUNK_LINE) {
            Err(()) => return ChunkModel::Invalid,
            Ok(None) => return ChunkModel::Incomplete,
            Ok(Some(l)) => l,
        };
        if line.is_empty() {
            return ChunkModel::Done(next);
        }
        trailers += 1;
        if trailers > MAX_TRAILERS || !model_field_line(line) {
            return ChunkModel::Invalid;
        }
        pos = next;
    }
}

/// What feeding a skipper gave: the error status, or the bytes consumed and whether it is done.
fn skip_all(pieces: impl Iterator<Item = usize>, d: &[u8]) -> Result<(usize, bool, u64), u16> {
    let mut s = ChunkedSkipper::default();
    let mut pos = 0;
    for n in pieces {
        if pos >= d.len() || s.done() {
            break;
        }
        let piece = &d[pos..(pos + n.max(1)).min(d.len())];
        let used = s.feed(piece).map_err(|r| r.status)?;
        if used > piece.len() || (used < piece.len() && !s.done()) {
            return Err(0);
        }
        pos += used;
    }
    if s.done() && s.feed(b"more").map_err(|r| r.status)? != 0 {
        return Err(1);
    }
    Ok((pos, s.done(), s.consumed))
}

/// The `chunked` target: the first byte seeds how the rest is split into reads. The skipper
/// gives the same answer whole, byte by byte and split at random; it counts every byte it
/// consumes (framing too); it agrees with [`model_chunked`] wherever the model can decide
/// (never done on a body the grammar refuses, done exactly where a valid body ends, an error
/// for a complete invalid line); and an error is a 4xx.
pub fn check_chunked(data: &[u8]) -> Result<(), String> {
    let (seed, d) = match data.split_first() {
        Some((&s, rest)) => (s, rest),
        None => return Ok(()),
    };
    let whole = skip_all(std::iter::once(d.len()), d);
    let bytewise = skip_all(std::iter::repeat(1), d);
    let mut x = u32::from(seed) | 1;
    let random = skip_all(
        std::iter::from_fn(|| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            Some((x % 40) as usize)
        }),
        d,
    );
    if whole != bytewise || whole != random {
        return Err(format!(
            "the split changes the answer: whole {whole:?}, byte by byte {bytewise:?}, random {random:?} for \"{}\"",
            show(d)
        ));
    }
    if let Err(status) = whole {
        if !(400..=499).contains(&status) {
            return Err(format!("a chunked body refused with {status} (a 4xx was due) for \"{}\"", show(d)));
        }
    }
    if let Ok((used, _, counted)) = whole {
        if counted != used as u64 {
            return Err(format!("consumed {used} bytes but counted {counted} for \"{}\"", show(d)));
        }
    }
    let model = model_chunked(d);
    let agree = match (&model, &whole) {
        (ChunkModel::Done(n), Ok((used, true, _))) => n == used,
        (ChunkModel::Invalid, Err(_)) => true,
        (ChunkModel::Incomplete, Ok((used, false, _))) => *used == d.len(),
        (ChunkModel::Incomplete, Err(_)) => true,
        _ => false,
    };
    if !agree {
        return Err(format!("the grammar says {model:?}, the skipper {whole:?} for \"{}\"", show(d)));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Range (`http::range::parse`)
// ---------------------------------------------------------------------------------------------

/// The `range` target: byte 0 is `max_ranges` (mod 20); bytes 1-8 the representation's length
/// (big-endian, below 2^63; when byte 1 is below 0x80 only bytes 7-8 count, so small files are
/// common);
/// the rest is the field value. The answer is one of the three outcomes, and a 206's ranges are
/// non-empty, within the length, sorted, at least `MERGE_GAP` apart, no more than `max_ranges`,
/// no more bytes than the file; the multipart framing's `content_length` is exact.
pub fn check_range(data: &[u8]) -> Result<(), String> {
    if data.len() < 9 {
        return Ok(());
    }
    let max_ranges = usize::from(data[0] % 20);
    let mut be = [0u8; 8];
    be.copy_from_slice(&data[1..9]);
    // A file is at most i64::MAX bytes (off_t).
    let len = if data[1] < 0x80 {
        u64::from(u16::from_be_bytes([data[7], data[8]]))
    } else {
        u64::from_be_bytes(be) & i64::MAX as u64
    };
    let header = &data[9..];
    let spec = range::parse(header, len, max_ranges);
    if spec != range::parse(header, len, max_ranges) {
        return Err("range::parse is not deterministic".into());
    }
    let RangeSpec::Ranges(rs) = spec else {
        return Ok(());
    };
    let fail = |what: &str| Err(format!("{what}: {rs:?} for \"{}\" (len {len}, max {max_ranges})", show(header)));
    if rs.is_empty() || rs.len() > max_ranges || len == 0 {
        return fail("wrong number of ranges");
    }
    if rs.iter().any(|r| r.start > r.end || r.end >= len) {
        return fail("a range outside the representation");
    }
    if rs.windows(2).any(|w| w[1].start <= w[0].end || w[1].start - w[0].end - 1 < MERGE_GAP) {
        return fail("ranges not sorted, overlapping or closer than MERGE_GAP");
    }
    if rs.iter().try_fold(0u64, |t, r| t.checked_add(r.len())).is_none_or(|t| t > len) {
        return fail("more bytes than the representation");
    }
    if rs.len() > 1 {
        let m = range::Multipart::new(&rs, len, "text/plain", 7);
        let mut framing = Vec::new();
        for i in 0..rs.len() {
            m.part_header(i, &mut framing);
        }
        m.trailer(&mut framing);
        let total = rs.iter().map(|r| u128::from(r.len())).sum::<u128>() + framing.len() as u128;
        if u128::from(m.content_length()) != total {
            return Err(format!("multipart content_length {} but the body is {total} bytes", m.content_length()));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Preconditions (`http::conditional::evaluate`)
// ---------------------------------------------------------------------------------------------

/// 784111777 = Sun, 06 Nov 1994 08:49:37 GMT, the modification time the target uses.
const LAST_MODIFIED: u64 = 784_111_777;

/// The `conditional` target: byte 0 holds flags (bit 0: GET/HEAD; bits 1-5: which of If-Match,
/// If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range are present; bit 6: the
/// modification time is unknown; bit 7: the representation's tag is the first line instead of
/// `"abc"`), the rest is split on LF into the tag and the five values. The order of RFC 9110
/// §13.2.2 holds: no field proceeds; only GET/HEAD get 304; If-Match makes If-Unmodified-Since
/// irrelevant and If-None-Match makes If-Modified-Since irrelevant; If-Range never changes a
/// 304 or 412; a date field that arrived as two values (joined with ", ") is ignored.
pub fn check_conditional(data: &[u8]) -> Result<(), String> {
    let Some((&flags, rest)) = data.split_first() else {
        return Ok(());
    };
    let mut lines = rest.split(|&b| b == b'\n');
    let tag_line = lines.next().unwrap_or(b"");
    let mut vals = [None; 5];
    for (i, v) in vals.iter_mut().enumerate() {
        let line = lines.next().unwrap_or(b"");
        if flags & (2 << i) != 0 {
            *v = Some(line);
        }
    }
    let get = flags & 1 != 0;
    let v = Validators {
        etag: if flags & 0x80 != 0 { tag_line } else { b"\"abc\"" },
        last_modified: if flags & 0x40 != 0 { None } else { Some(LAST_MODIFIED) },
    };
    let c = Conditions {
        if_match: vals[0],
        if_none_match: vals[1],
        if_modified_since: vals[2],
        if_unmodified_since: vals[3],
        if_range: vals[4],
    };
    let out = conditional::evaluate(get, &c, &v);
    let show_c = |c: &Conditions<'_>| {
        let f = |o: Option<&[u8]>| o.map(show);
        format!(
            "get {get}, tag {}, lm {:?}, IM {:?}, INM {:?}, IMS {:?}, IUS {:?}, IR {:?}",
            show(v.etag),
            v.last_modified,
            f(c.if_match),
            f(c.if_none_match),
            f(c.if_modified_since),
            f(c.if_unmodified_since),
            f(c.if_range)
        )
    };
    let eval = |c2: Conditions<'_>| conditional::evaluate(get, &c2, &v);
    let fail = |what: &str, other: Outcome| Err(format!("{what}: {out:?} vs {other:?} for {}", show_c(&c)));
    if vals.iter().all(Option::is_none) && out != (Outcome::Proceed { use_range: true }) {
        return fail("no precondition, yet", Outcome::Proceed { use_range: true });
    }
    if !get && out == Outcome::NotModified {
        return fail("304 for a method other than GET/HEAD", Outcome::NotModified);
    }
    if c.if_match.is_some() {
        let o = eval(Conditions { if_unmodified_since: None, ..c });
        if o != out {
            return fail("If-Unmodified-Since counted beside If-Match", o);
        }
    }
    if c.if_none_match.is_some() {
        let o = eval(Conditions { if_modified_since: None, ..c });
        if o != out {
            return fail("If-Modified-Since counted beside If-None-Match", o);
        }
    }
    let without_range = eval(Conditions { if_range: None, ..c });
    let range_ok = match (&out, &without_range) {
        (Outcome::Proceed { .. }, Outcome::Proceed { use_range: true }) => true,
        (a, b) => a == b,
    };
    if !range_ok {
        return fail("If-Range changed the outcome", without_range);
    }
    for which in [2, 3] {
        let Some(date) = vals[which] else { continue };
        let mut joined = date.to_vec();
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(date);
        let (twice, absent) = if which == 2 {
            (
                eval(Conditions { if_modified_since: Some(&joined), ..c }),
                eval(Conditions { if_modified_since: None, ..c }),
            )
        } else {
            (
                eval(Conditions { if_unmodified_since: Some(&joined), ..c }),
                eval(Conditions { if_unmodified_since: None, ..c }),
            )
        };
        if twice != absent {
            return fail("a date sent twice is not ignored", twice);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PROXY protocol headers (`proxy::parse`)
// ---------------------------------------------------------------------------------------------

/// The `proxy` target: the whole input is what a connection received first. A complete
/// header is no longer than the input and the bound, parses the same without what follows
/// it, its source is of the family its version-1 keyword names, and every strict prefix of it
/// asks for more (the server parses as bytes arrive); an input asking for more is shorter than
/// the bound, and so is every prefix of it; a refusal stays a refusal however the input goes on.
pub fn check_proxy(data: &[u8]) -> Result<(), String> {
    let fail = |what: &str| Err(format!("proxy::parse(\"{}\"): {what}", show(data)));
    let prefixes_wait = |upto: usize| (0..upto).all(|n| proxy::parse(&data[..n]) == Ok(proxy::Parsed::Incomplete));
    match proxy::parse(data) {
        Ok(proxy::Parsed::Done(h)) => {
            if h.len > data.len() || h.len > proxy::V2_MAX || h.len == 0 {
                return fail(&format!("header length {} past the input or the bound", h.len));
            }
            if proxy::parse(&data[..h.len]) != Ok(proxy::Parsed::Done(h)) {
                return fail("the header alone parses differently");
            }
            let family_ok = match (data.get(..10), h.source) {
                (Some(b"PROXY TCP4"), Some(s)) => s.is_ipv4(),
                (Some(b"PROXY TCP6"), Some(s)) => s.is_ipv6(),
                (Some(b"PROXY TCP4" | b"PROXY TCP6"), None) => false,
                _ => true,
            };
            if !family_ok {
                return fail(&format!("source {:?} does not match the keyword", h.source));
            }
            if !prefixes_wait(h.len) {
                return fail("a strict prefix of a complete header is not incomplete");
            }
        }
        Ok(proxy::Parsed::Incomplete) => {
            if data.len() >= proxy::V2_MAX || !prefixes_wait(data.len()) {
                return fail("incomplete at or past the bound, or a prefix of it was refused");
            }
        }
        Err(_) => {
            let mut longer = data.to_vec();
            longer.extend_from_slice(b"\r\n\r\n");
            if proxy::parse(&longer).is_ok() && proxy::parse(data).is_err() {
                return fail("a refused input became acceptable with more bytes");
            }
        }
    }
    Ok(())
}
