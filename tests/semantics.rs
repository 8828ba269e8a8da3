//! HTTP semantics for real sites (issue 5), over real sockets against the real binary:
//! validators and conditional requests (RFC 9110 §8.8, §13), ranges and
//! `multipart/byteranges` (§14), `If-Range` and a browser-like resume, precompressed
//! siblings and `ferrohttpd compress`, cache headers and `[[headers]]` rules, custom error
//! pages, and directory listings.

mod common;

use common::json::{parse_json, Json};

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
#[cfg(feature = "compression")]
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::*;

// ---------------------------------------------------------------------------------------------
// Local helpers
// ---------------------------------------------------------------------------------------------

/// Expected parts of a multipart response: (first, last, bytes).
type Parts = Vec<(u64, u64, Vec<u8>)>;

/// A request head: `METHOD path HTTP/1.1`, `Host`, the given fields, `Connection: close` if
/// `close`.
fn req(method: &str, path: &str, headers: &[(&str, &str)], close: bool) -> String {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in headers {
        s.push_str(k);
        s.push_str(": ");
        s.push_str(v);
        s.push_str("\r\n");
    }
    if close {
        s.push_str("Connection: close\r\n");
    }
    s.push_str("\r\n");
    s
}

/// GET with extra fields on a fresh connection.
fn get_h(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Response {
    srv.exchange(req("GET", path, headers, true))
}

/// HEAD with extra fields on a fresh connection.
fn head_h(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Response {
    srv.exchange(req("HEAD", path, headers, true))
}

/// GET with `Connection: close`; the body is everything after the head up to EOF, so a
/// `Content-Length` that disagrees with what was sent is caught.
fn get_to_eof(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Result<Response, String> {
    let mut s = srv.connect();
    raw(&mut s, req("GET", path, headers, true));
    let mut r =
        try_read_response(&mut s, true).map_err(|e| format!("GET {path} {headers:?}: no valid response head: {e}"))?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).map_err(|e| format!("GET {path}: reading the body to EOF: {e}"))?;
    r.body = body;
    Ok(r)
}

/// Writes `root/rel`, creating parent directories.
fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, data).unwrap();
}

/// Sets the modification time of a file, in seconds since the epoch.
fn set_mtime(p: &Path, secs: u64) {
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", p.display()));
}

/// The single `ETag` of a response, checked to be a strong, quoted entity-tag.
fn strong_etag(r: &Response) -> Result<String, String> {
    let v = r.headers_named("ETag");
    if v.len() != 1 {
        return Err(format!("expected exactly one ETag:\n{}", r.describe()));
    }
    let e = v[0];
    let ok = e.len() >= 2
        && e.starts_with('"')
        && e.ends_with('"')
        && e[1..e.len() - 1].bytes().all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80);
    if !ok {
        return Err(format!("ETag {e:?} is not a strong quoted entity-tag (RFC 9110 §8.8.3)"));
    }
    Ok(e.to_string())
}

/// `bytes a-b/len` -> (a, b, len).
fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.strip_prefix("bytes ")?;
    let (range, len) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?, len.parse().ok()?))
}

/// A 206 with one part: exactly `Content-Range: bytes start-end/total`, the common headers
/// (Content-Length equal to the body) and the expected bytes.
fn check_206(r: &Response, start: u64, end: u64, total: u64, expected: &[u8]) -> Result<(), String> {
    if r.status != 206 {
        return Err(format!("expected 206 for bytes {start}-{end}/{total}, got:\n{}", r.describe()));
    }
    r.check_common(false)?;
    let want = format!("bytes {start}-{end}/{total}");
    if r.headers_named("Content-Range") != [want.as_str()] {
        return Err(format!("expected `Content-Range: {want}`:\n{}", r.describe()));
    }
    if r.headers_named("Content-Length") != [(end - start + 1).to_string().as_str()] {
        return Err(format!("expected Content-Length {}:\n{}", end - start + 1, r.describe()));
    }
    if r.body != expected {
        return Err(format!("206 body differs from bytes {start}-{end} of the file:\n{}", r.describe()));
    }
    Ok(())
}

/// A full 200: no Content-Range, `Accept-Ranges: bytes`, the whole file.
fn check_full(r: &Response, expected: &[u8]) -> Result<(), String> {
    if r.status != 200 {
        return Err(format!("expected the full 200, got:\n{}", r.describe()));
    }
    r.check_common(false)?;
    if r.header("Content-Range").is_some() {
        return Err(format!("a 200 must not carry Content-Range:\n{}", r.describe()));
    }
    if r.headers_named("Accept-Ranges") != ["bytes"] {
        return Err(format!("expected `Accept-Ranges: bytes`:\n{}", r.describe()));
    }
    if r.body != expected {
        return Err(format!("200 body ({} bytes) differs from the file ({} bytes)", r.body.len(), expected.len()));
    }
    Ok(())
}

/// One part of a `multipart/byteranges` body.
#[derive(Debug)]
struct Part {
    content_type: Option<String>,
    start: u64,
    end: u64,
    total: u64,
    data: Vec<u8>,
}

/// Parses a `multipart/byteranges` body strictly (RFC 9110 §14.6, RFC 2046 §5.1.1), using each
/// part's Content-Range for its length, so the data is never searched for the boundary.
fn parse_multipart(r: &Response) -> Result<Vec<Part>, String> {
    let ct = r.header("Content-Type").ok_or_else(|| format!("no Content-Type:\n{}", r.describe()))?;
    let (media, params) = ct.split_once(';').ok_or_else(|| format!("no boundary in Content-Type {ct:?}"))?;
    if !media.trim().eq_ignore_ascii_case("multipart/byteranges") {
        return Err(format!("expected multipart/byteranges, got {ct:?}"));
    }
    let boundary = params
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
        .ok_or_else(|| format!("no boundary parameter in {ct:?}"))?;
    if boundary.is_empty() || boundary.len() > 70 {
        return Err(format!("boundary {boundary:?} must be 1..=70 characters (RFC 2046)"));
    }
    let delim = format!("--{boundary}");
    let body = &r.body[..];
    let err = |pos: usize, what: &str| format!("multipart body at byte {pos}: {what}; body: {}", show(body));
    let mut pos = 0;
    if body.starts_with(b"\r\n") {
        pos = 2;
    }
    if !body[pos..].starts_with(delim.as_bytes()) {
        return Err(err(pos, "expected the first boundary delimiter"));
    }
    pos += delim.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            pos += 2;
            let rest = &body[pos..];
            if !(rest.is_empty() || rest == b"\r\n") {
                return Err(err(pos, "unexpected bytes after the close delimiter"));
            }
            break;
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(err(pos, "expected CRLF after the boundary"));
        }
        pos += 2;
        let hend =
            body[pos..].windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| err(pos, "part headers do not end"))?;
        let head = std::str::from_utf8(&body[pos..pos + hend]).map_err(|_| err(pos, "part headers not UTF-8"))?;
        pos += hend + 4;
        let mut content_type = None;
        let mut content_range = None;
        for line in head.split("\r\n") {
            let (k, v) = line.split_once(':').ok_or_else(|| err(pos, &format!("bad part header {line:?}")))?;
            if k.eq_ignore_ascii_case("Content-Type") {
                content_type = Some(v.trim().to_string());
            } else if k.eq_ignore_ascii_case("Content-Range") {
                content_range = Some(v.trim().to_string());
            }
        }
        let cr = content_range.ok_or_else(|| err(pos, "part without Content-Range"))?;
        let (start, end, total) =
            parse_content_range(&cr).ok_or_else(|| err(pos, &format!("bad part Content-Range {cr:?}")))?;
        if end < start {
            return Err(err(pos, &format!("part range {cr:?} is backwards")));
        }
        let n = usize::try_from(end - start + 1).unwrap();
        if body.len() < pos + n {
            return Err(err(pos, &format!("part {cr:?} runs past the end of the body")));
        }
        let data = body[pos..pos + n].to_vec();
        pos += n;
        if !body[pos..].starts_with(b"\r\n") || !body[pos + 2..].starts_with(delim.as_bytes()) {
            return Err(err(pos, "expected CRLF and the boundary after a part's data"));
        }
        pos += 2 + delim.len();
        parts.push(Part { content_type, start, end, total, data });
    }
    Ok(parts)
}

/// A 206 multipart response whose parts are exactly `expected` (start, end, bytes), in order,
/// each labelled with `content_type` and the representation length `total`, and whose
/// Content-Length is the length of the body.
fn check_multipart(
    r: &Response,
    total: u64,
    content_type: &str,
    expected: &[(u64, u64, Vec<u8>)],
) -> Result<(), String> {
    if r.status != 206 {
        return Err(format!("expected 206 multipart, got:\n{}", r.describe()));
    }
    r.check_common(false)?;
    if r.header("Content-Range").is_some() {
        return Err(format!("a multipart 206 must not carry a top-level Content-Range:\n{}", r.describe()));
    }
    let parts = parse_multipart(r)?;
    let got: Vec<(u64, u64)> = parts.iter().map(|p| (p.start, p.end)).collect();
    let want: Vec<(u64, u64)> = expected.iter().map(|(a, b, _)| (*a, *b)).collect();
    if got != want {
        return Err(format!("multipart parts {got:?}, expected {want:?}"));
    }
    for (p, (_, _, bytes)) in parts.iter().zip(expected) {
        if p.content_type.as_deref() != Some(content_type) {
            return Err(format!(
                "part {}-{}: Content-Type {:?}, expected {content_type:?}",
                p.start, p.end, p.content_type
            ));
        }
        if p.total != total {
            return Err(format!("part {}-{}: complete length {}, expected {total}", p.start, p.end, p.total));
        }
        if &p.data != bytes {
            return Err(format!("part {}-{}: bytes differ from the file", p.start, p.end));
        }
    }
    Ok(())
}

/// `href="..."` values of the `<a>` elements of an HTML page, in order.
/// The links of a listing's entries: those of its table's rows (the breadcrumbs, the view
/// switch and the sorting headings come before `<tbody>`).
fn hrefs(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = html.find("<tbody>").map_or(html, |i| &html[i..]);
    while let Some(i) = rest.find("<a href=\"") {
        let after = &rest[i + 9..];
        let Some(end) = after.find('"') else { break };
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out).expect("valid gzip");
    out
}

fn brotli_compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 11, 22);
        w.write_all(data).unwrap();
    }
    out
}

fn unbrotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(data, 4096).read_to_end(&mut out).expect("valid brotli");
    out
}

// ---------------------------------------------------------------------------------------------
// One table of cases, run over every protocol and transport the build has (issue 34)
//
// A case is a request and what its response must be; `run_table` runs each case over each row
// of `proto::rows()` (HTTP/1.1, h2c, HTTP/1.1 over TLS, h2 over TLS, HTTP/3, as the cargo
// features allow) against one server per configuration. What the protocols must do differently
// is not here but in `Proto::check_framing` (status line text over HTTP/1.1; no
// connection-specific fields and lowercase names over HTTP/2 and HTTP/3), applied to every
// response. A later protocol is one more row.
// ---------------------------------------------------------------------------------------------

/// What a case expects of the body.
enum Body {
    /// Anything (the status and fields say enough).
    Any,
    /// Exactly these bytes (none for HEAD, whatever is given).
    Is(Vec<u8>),
    /// A full 200 of these bytes: no `Content-Range`, `Accept-Ranges: bytes` ([`check_full`]).
    Full(Vec<u8>),
    /// One range: `Content-Range: bytes first-last/total`, these bytes ([`check_206`]).
    Range(u64, u64, u64, Vec<u8>),
    /// `multipart/byteranges` of a representation of length `total` and type `content_type`,
    /// with these parts ([`check_multipart`]).
    Multipart(u64, &'static str, Parts),
}

type Custom = Box<dyn Fn(&Response) -> Result<(), String>>;

/// A request and what its response must be, on every row.
struct Case {
    name: String,
    method: &'static str,
    path: String,
    fields: Vec<(String, String)>,
    status: u16,
    body: Body,
    /// Fields that must appear exactly once with exactly this value.
    equal: Vec<(&'static str, String)>,
    /// Fields that must be absent.
    absent: Vec<&'static str>,
    /// (field, token): the field's list must hold the token.
    tokens: Vec<(&'static str, &'static str)>,
    /// Anything else, as a check of its own.
    custom: Vec<Custom>,
}

fn case(method: &'static str, path: &str) -> Case {
    Case {
        name: String::new(),
        method,
        path: path.to_string(),
        fields: vec![],
        status: 200,
        body: Body::Any,
        equal: vec![],
        absent: vec![],
        tokens: vec![],
        custom: vec![],
    }
}

fn get(path: &str) -> Case {
    case("GET", path)
}

fn head(path: &str) -> Case {
    case("HEAD", path)
}

impl Case {
    fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
    fn field(mut self, name: &str, value: &str) -> Self {
        self.fields.push((name.to_string(), value.to_string()));
        self
    }
    fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
    fn body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }
    fn eq(mut self, name: &'static str, value: &str) -> Self {
        self.equal.push((name, value.to_string()));
        self
    }
    fn absent(mut self, name: &'static str) -> Self {
        self.absent.push(name);
        self
    }
    fn token(mut self, name: &'static str, token: &'static str) -> Self {
        self.tokens.push((name, token));
        self
    }
    fn check(mut self, f: impl Fn(&Response) -> Result<(), String> + 'static) -> Self {
        self.custom.push(Box::new(f));
        self
    }

    fn describe(&self) -> String {
        let fields: Vec<String> = self.fields.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        let name = if self.name.is_empty() { String::new() } else { format!(" ({})", self.name) };
        format!("{} {} {fields:?}{name}", self.method, self.path)
    }

    fn verify(&self, r: &Response) -> Result<(), String> {
        let head = self.method == "HEAD";
        if r.status != self.status {
            return Err(format!("expected {}, got:\n{}", self.status, r.describe()));
        }
        r.check_common(head)?;
        if head && !r.body.is_empty() {
            return Err(format!("a body on a HEAD response:\n{}", r.describe()));
        }
        match &self.body {
            Body::Any => Ok(()),
            Body::Is(b) if head || self.status == 304 => {
                if r.body.is_empty() {
                    Ok(())
                } else {
                    Err(format!("no body expected ({} would be GET's):\n{}", b.len(), r.describe()))
                }
            }
            Body::Is(b) if r.body == *b => Ok(()),
            Body::Is(b) => Err(format!("expected a body of {} bytes: {}\n{}", b.len(), show(b), r.describe())),
            Body::Full(b) => check_full(r, b),
            Body::Range(a, z, total, b) => check_206(r, *a, *z, *total, b),
            Body::Multipart(total, ct, parts) => check_multipart(r, *total, ct, parts),
        }?;
        for (n, v) in &self.equal {
            if r.headers_named(n) != [v.as_str()] {
                return Err(format!("expected exactly `{n}: {v}`:\n{}", r.describe()));
            }
        }
        for n in &self.absent {
            if r.header(n).is_some() {
                return Err(format!("expected no {n}:\n{}", r.describe()));
            }
        }
        for (n, t) in &self.tokens {
            if !r.header_has_token(n, t) {
                return Err(format!("expected {n} to list {t}:\n{}", r.describe()));
            }
        }
        self.custom.iter().try_for_each(|f| f(r))
    }
}

/// Runs every case over every row, the row's cases on one connection as long as the server
/// keeps it; panics once with every failure. Prints the pass count of
/// each row (`--nocapture` shows it).
fn run_table(table: &str, srv: &Server, cases: &[Case]) {
    let mut f = Failures::new();
    for proto in proto::rows() {
        // One connection for the row's cases while the server keeps it: each response must be
        // framed exactly for the next to parse.
        let mut client = proto::Client::new(srv, proto);
        let mut passed = 0;
        for c in cases {
            let fields: Vec<(&str, &str)> = c.fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let res = client.fetch(c.method, &c.path, &fields).and_then(|r| c.verify(&r));
            passed += usize::from(res.is_ok());
            f.check(&format!("[{}] {}", proto.name(), c.describe()), res);
        }
        f.check(&format!("[{}] the connection after the last case", proto.name()), client.finish());
        eprintln!("table {table}: {}: {passed}/{} cases pass", proto.name(), cases.len());
    }
    f.finish();
}

/// The ETag the server gives `path` (over HTTP/1.1), checked strong.
fn etag_of(srv: &Server, path: &str, fields: &[(&str, &str)]) -> String {
    strong_etag(&proto::fetch(srv, proto::Proto::H1, "GET", path, fields).unwrap()).unwrap()
}

/// `Expires` is `Date` + `secs` (±2 s), both IMF-fixdates.
fn expires_after(secs: i64) -> impl Fn(&Response) -> Result<(), String> {
    move |r| {
        let date = r.header("date").and_then(parse_http_date);
        let exp = match r.headers_named("expires")[..] {
            [one] => parse_http_date(one),
            _ => None,
        };
        match (date, exp) {
            (Some(d), Some(e)) if (secs - 2..=secs + 2).contains(&(e as i64 - d as i64)) => Ok(()),
            _ => Err(format!("expected one Expires = Date + {secs} s:\n{}", r.describe())),
        }
    }
}

/// The standard fixture plus r.txt (ranges), the precompressed x.css and old.css, and list/
/// (listing off): the default configuration.
fn plain_site() -> Server {
    proto::for_every_row(Server::builder().config(proto::tls_section()))
        .setup(|_, root| {
            write(root, "r.txt", &r_data());
            write(root, "epoch1.txt", b"reproducible build output\n");
            set_mtime(&root.join("epoch1.txt"), 1);
            precompressed_files(root);
            list_files(root);
        })
        .start()
}

#[test]
fn table_validators_preconditions_and_if_range() {
    let srv = plain_site();
    let e = etag_of(&srv, "/file.txt", &[]);
    let weak = format!("W/{e}");
    let lm = FILE_TXT_LAST_MODIFIED;
    let older = format_http_date(FILE_TXT_MTIME - 86_400);
    let newer = format_http_date(FILE_TXT_MTIME + 86_400);
    let just_before = format_http_date(FILE_TXT_MTIME - 1);
    let just_after = format_http_date(FILE_TXT_MTIME + 1);
    let list = format!("\"nope\", {e}, \"other\"");
    let weak_list = format!("\"nope\",{weak}");
    let l = FILE_TXT.len() as u64;
    let full = |c: Case| c.status(200).body(Body::Full(FILE_TXT.to_vec())).eq("etag", &e);
    let ok = |c: Case| c.status(200).body(Body::Is(FILE_TXT.to_vec())).eq("etag", &e);
    let not_modified = |c: Case| c.status(304).body(Body::Is(vec![])).eq("etag", &e).eq("last-modified", lm);
    let failed = |c: Case| c.status(412);
    let mut cases = vec![
        // Validators: strong, the same on GET, HEAD and 206; no caching policy without max_age.
        ok(get("/file.txt")).eq("last-modified", lm).absent("cache-control").absent("expires"),
        ok(head("/file.txt")).eq("last-modified", lm).eq("content-length", &l.to_string()),
        get("/file.txt")
            .field("Range", "bytes=0-0")
            .body(Body::Range(0, 0, l, b"h".to_vec()))
            .status(206)
            .eq("etag", &e),
        get("/").status(200).body(Body::Is(INDEX_HTML.to_vec())).eq("etag", &etag_of(&srv, "/index.html", &[])),
        // Preconditions, in RFC 9110 §13.2.2 order.
        failed(get("/file.txt").field("If-Match", "\"nope\"")),
        ok(get("/file.txt").field("If-Match", "*")),
        ok(get("/file.txt").field("If-Match", &e)),
        ok(get("/file.txt").field("If-Match", &list)),
        failed(get("/file.txt").field("If-Match", &weak)).named("strong comparison"),
        failed(get("/file.txt").field("If-Unmodified-Since", &older)),
        failed(get("/file.txt").field("If-Unmodified-Since", &just_before)),
        ok(get("/file.txt").field("If-Unmodified-Since", lm)),
        ok(get("/file.txt").field("If-Unmodified-Since", &newer)),
        ok(get("/file.txt").field("If-Unmodified-Since", "not a date")).named("invalid is ignored"),
        ok(get("/file.txt").field("If-Match", &e).field("If-Unmodified-Since", &older)).named("If-Match wins"),
        failed(get("/file.txt").field("If-Match", "\"nope\"").field("If-None-Match", &e)),
        not_modified(get("/file.txt").field("If-None-Match", &e)),
        not_modified(get("/file.txt").field("If-None-Match", &weak)).named("weak comparison"),
        not_modified(get("/file.txt").field("If-None-Match", &list)),
        not_modified(get("/file.txt").field("If-None-Match", &weak_list)),
        ok(get("/file.txt").field("If-None-Match", "\"a\", \"b\"")),
        not_modified(get("/file.txt").field("If-None-Match", "*")),
        ok(get("/file.txt").field("If-None-Match", "\"nope\"").field("If-Modified-Since", &newer))
            .named("If-None-Match wins"),
        not_modified(get("/file.txt").field("If-None-Match", &e).field("If-Modified-Since", &older))
            .named("If-None-Match wins"),
        not_modified(get("/file.txt").field("If-Modified-Since", lm)),
        not_modified(get("/file.txt").field("If-Modified-Since", &newer)),
        ok(get("/file.txt").field("If-Modified-Since", &older)),
        ok(get("/file.txt").field("If-Modified-Since", &just_before)),
        ok(get("/file.txt").field("If-Modified-Since", "yesterday")).named("invalid is ignored"),
        not_modified(get("/file.txt").field("If-Modified-Since", "Thursday, 02-Jan-20 03:04:05 GMT")),
        not_modified(get("/file.txt").field("If-Modified-Since", "Thu Jan  2 03:04:05 2020")),
        failed(head("/file.txt").field("If-Match", "\"nope\"")),
        ok(head("/file.txt").field("If-Match", "*")),
        failed(head("/file.txt").field("If-Unmodified-Since", &older)),
        not_modified(head("/file.txt").field("If-None-Match", &e)),
        not_modified(head("/file.txt").field("If-None-Match", &weak)),
        not_modified(head("/file.txt").field("If-Modified-Since", lm)),
        ok(head("/file.txt").field("If-Modified-Since", &older)),
    ];
    // Every file: its type, its bytes, one strong ETag the same on GET, HEAD and 206.
    for (path, body, ct) in [
        ("/style.css", STYLE_CSS.to_vec(), "text/css; charset=utf-8"),
        ("/index.html", INDEX_HTML.to_vec(), "text/html; charset=utf-8"),
        ("/p3.txt", page(3), "text/plain; charset=utf-8"),
        ("/image.png", IMAGE_PNG.to_vec(), "image/png"),
        ("/data.xyz", DATA_XYZ.to_vec(), "application/octet-stream"),
        ("/dir/file.txt", DIR_FILE.to_vec(), "text/plain; charset=utf-8"),
    ] {
        let tag = etag_of(&srv, path, &[]);
        let first = body[..1].to_vec();
        let n = body.len() as u64;
        cases.extend([
            get(path).body(Body::Full(body)).eq("content-type", ct).eq("etag", &tag).absent("cache-control"),
            head(path).eq("content-type", ct).eq("etag", &tag).eq("content-length", &n.to_string()),
            get(path).field("Range", "bytes=0-0").status(206).body(Body::Range(0, 0, n, first)).eq("etag", &tag),
        ]);
    }
    // A file with no usable modification time (mtime 1): no Last-Modified, so If-Modified-Since
    // has nothing to compare against; its ETag still validates.
    let e1 = etag_of(&srv, "/epoch1.txt", &[]);
    cases.extend([
        get("/epoch1.txt").absent("last-modified").eq("etag", &e1),
        get("/epoch1.txt").field("If-Modified-Since", "Thu, 01 Jan 2099 00:00:00 GMT").eq("etag", &e1),
        get("/epoch1.txt").field("If-None-Match", &e1).status(304).absent("last-modified"),
    ]);
    // If-Range (RFC 9110 §13.1.5): a strong match or an exact date sends the range.
    for (value, partial) in [
        (e.as_str(), true),
        ("\"0-0-0\"", false),
        (weak.as_str(), false),
        (lm, true),
        ("Thursday, 02-Jan-20 03:04:05 GMT", true),
        (just_after.as_str(), false),
        (just_before.as_str(), false),
        ("garbage", false),
    ] {
        let c = get("/file.txt").field("Range", "bytes=0-4").field("If-Range", value);
        cases.push(if partial { c.status(206).body(Body::Range(0, 4, l, b"hello".to_vec())) } else { full(c) });
    }
    cases.push(full(get("/file.txt").field("If-Range", &e)).named("If-Range without Range"));
    // Repeated fields (RFC 9110 §5.3): a list field on several lines is one list; a field of
    // one value (a date, If-Range, Range) repeated is invalid and ignored.
    let old = "Thu, 01 Jan 2015 00:00:00 GMT";
    let both = format!("{lm}, {lm}");
    cases.extend([
        not_modified(get("/file.txt").field("If-None-Match", &e).field("If-None-Match", "\"other\"")),
        ok(get("/file.txt").field("If-Match", &e).field("If-Match", "\"other\"")),
        failed(get("/file.txt").field("If-Match", "\"a\"").field("If-Match", "\"b\"")),
        ok(get("/file.txt").field("If-Modified-Since", lm).field("If-Modified-Since", lm)),
        ok(get("/file.txt").field("If-Modified-Since", &both)).named("a date list is invalid"),
        ok(get("/file.txt").field("If-Unmodified-Since", old).field("If-Unmodified-Since", old)),
        failed(get("/file.txt").field("If-Unmodified-Since", old)),
        full(get("/file.txt").field("Range", "bytes=0-1").field("If-Range", &e).field("If-Range", &e)),
        get("/file.txt").field("Range", "bytes=0-1").field("If-Range", &e).status(206).body(Body::Range(
            0,
            1,
            l,
            b"he".to_vec(),
        )),
        full(get("/file.txt").field("Range", "bytes=0-1").field("Range", "bytes=2-3")),
    ]);
    run_table("validators", &srv, &cases);
}

#[test]
fn table_ranges() {
    let srv = plain_site();
    let d = r_data();
    let l = R_LEN as u64;
    let e = etag_of(&srv, "/r.txt", &[]);
    let ct = "text/plain; charset=utf-8";
    let part = |a: u64, b: u64| (a, b, d[a as usize..=b as usize].to_vec());
    let mut cases = vec![get("/r.txt").body(Body::Full(d.clone())).eq("etag", &e)];
    for (range, a, b) in [
        ("bytes=0-9", 0, 9),
        ("bytes=10-", 10, l - 1),
        ("bytes=-5", l - 5, l - 1),
        ("bytes=1990-5000", 1990, l - 1),
        ("bytes=1999-1999", 1999, 1999),
        ("bytes=0-0", 0, 0),
        ("bytes=-5000", 0, l - 1),
        ("bytes=0-99999999999999999999999", 0, l - 1),
        ("bytes=0-", 0, l - 1),
        ("bytes=5000-6000, 100-199", 100, 199),
        ("BYTES=0-9", 0, 9),
        // Overlapping and adjacent ranges are merged into one.
        ("bytes=0-99,50-149", 0, 149),
        ("bytes=0-9,10-19", 0, 19),
        ("bytes=10-19,0-9", 0, 19),
        ("bytes=100-199,150-160", 100, 199),
        ("bytes=1900-,-50", 1900, l - 1),
        ("bytes=0-9,12-20", 0, 20),
    ] {
        cases.push(
            get("/r.txt")
                .field("Range", range)
                .status(206)
                .body(Body::Range(a, b, l, d[a as usize..=b as usize].to_vec()))
                .eq("content-type", ct)
                .eq("etag", &e),
        );
    }
    for range in ["bytes=5000-", "bytes=2000-2000", "bytes=-0", "bytes=2000-, 3000-3100"] {
        cases.push(get("/r.txt").field("Range", range).status(416).eq("content-range", &format!("bytes */{l}")));
    }
    // Invalid or foreign ranges are ignored.
    for range in [
        "bytes=abc",
        "bytes=5-1",
        "items=0-9",
        "bytes 0-9",
        "bytes=",
        "bytes=,",
        "bytes=0-9,x",
        "bytes=--5",
        "bytes=1-2-3",
        "bytes=0x10-0x20",
        "bytes=-",
        "bytes=+1-2",
    ] {
        cases.push(get("/r.txt").field("Range", range).body(Body::Full(d.clone())));
    }
    for (range, parts) in [
        ("bytes=0-9,500-509,1990-", vec![part(0, 9), part(500, 509), part(1990, l - 1)]),
        ("bytes=0-0,-1", vec![part(0, 0), part(l - 1, l - 1)]),
        ("bytes=100-199, 1000-1099", vec![part(100, 199), part(1000, 1099)]),
        ("bytes=0-9,400-409,9000-9999", vec![part(0, 9), part(400, 409)]),
        ("bytes=0-9,1000-1009", vec![part(0, 9), part(1000, 1009)]),
    ] {
        cases.push(get("/r.txt").field("Range", range).status(206).body(Body::Multipart(l, ct, parts)));
    }
    run_table("ranges", &srv, &cases);
}

#[test]
fn table_precompressed_siblings_and_vary() {
    let srv = plain_site();
    let css = css_source();
    let gz = fs::read(srv.root().join("x.css.gz")).unwrap();
    let br = fs::read(srv.root().join("x.css.br")).unwrap();
    let (gl, bl, cl) = (gz.len() as u64, br.len() as u64, css.len() as u64);
    let e_id = etag_of(&srv, "/x.css", &[]);
    let e_gz = etag_of(&srv, "/x.css", &[("Accept-Encoding", "gzip")]);
    let e_br = etag_of(&srv, "/x.css", &[("Accept-Encoding", "br")]);
    assert!(e_id != e_gz && e_gz != e_br && e_id != e_br, "{e_id} {e_gz} {e_br}");
    let variant = |ae: &str, coding: Option<&'static str>| {
        let c = get("/x.css").eq("content-type", "text/css; charset=utf-8").token("vary", "Accept-Encoding");
        let c = if ae.is_empty() { c } else { c.field("Accept-Encoding", ae) };
        match coding {
            None => c.body(Body::Is(css.clone())).absent("content-encoding").eq("etag", &e_id),
            Some("gzip") => c.body(Body::Is(gz.clone())).eq("content-encoding", "gzip").eq("etag", &e_gz),
            Some(_) => c.body(Body::Is(br.clone())).eq("content-encoding", "br").eq("etag", &e_br),
        }
    };
    let mut cases = vec![];
    for (ae, coding) in [
        ("", None),
        ("br, gzip", Some("br")),
        ("gzip, br", Some("br")),
        ("gzip;q=1, br;q=0.5", Some("gzip")),
        ("gzip", Some("gzip")),
        ("GZIP", Some("gzip")),
        ("br", Some("br")),
        ("br;q=0, gzip", Some("gzip")),
        ("deflate", None),
        ("identity;q=0, *;q=0", None),
        ("identity", None),
    ] {
        cases.push(variant(ae, coding));
    }
    cases.extend([
        head("/x.css")
            .field("Accept-Encoding", "br, gzip")
            .eq("content-encoding", "br")
            .eq("content-length", &bl.to_string())
            .token("vary", "Accept-Encoding"),
        // The sibling itself is an ordinary file.
        get("/x.css.gz").field("Accept-Encoding", "gzip, br").body(Body::Is(gz.clone())).absent("content-encoding"),
        // A sibling older than its original is ignored.
        get("/old.css")
            .field("Accept-Encoding", "gzip")
            .body(Body::Is(b"body { color: old; }\n".to_vec()))
            .absent("content-encoding"),
        // Ranges, If-None-Match and If-Range apply to the selected representation.
        get("/x.css")
            .field("Accept-Encoding", "gzip")
            .field("Range", "bytes=0-9")
            .status(206)
            .body(Body::Range(0, 9, gl, gz[..10].to_vec()))
            .eq("content-encoding", "gzip")
            .token("vary", "Accept-Encoding"),
        get("/x.css")
            .field("Accept-Encoding", "br")
            .field("Range", "bytes=-4")
            .status(206)
            .body(Body::Range(bl - 4, bl - 1, bl, br[br.len() - 4..].to_vec()))
            .eq("content-encoding", "br"),
        get("/x.css").field("Range", "bytes=0-9").status(206).body(Body::Range(0, 9, cl, css[..10].to_vec())),
        get("/x.css")
            .field("Accept-Encoding", "gzip")
            .field("If-None-Match", &e_gz)
            .status(304)
            .eq("etag", &e_gz)
            .token("vary", "Accept-Encoding"),
        variant("gzip", Some("gzip")).field("If-None-Match", &e_id),
        variant("", None).field("If-None-Match", &e_gz),
        get("/x.css")
            .field("Accept-Encoding", "gzip")
            .field("Range", "bytes=0-9")
            .field("If-Range", &e_gz)
            .status(206)
            .body(Body::Range(0, 9, gl, gz[..10].to_vec())),
        variant("gzip", Some("gzip")).field("Range", "bytes=0-9").field("If-Range", &e_id),
    ]);
    // br refused, nothing else named: gzip or identity, never br.
    let (gz2, css2) = (gz.clone(), css.clone());
    cases.push(get("/x.css").field("Accept-Encoding", "br;q=0").token("vary", "Accept-Encoding").check(
        move |r| match (r.header("content-encoding"), &r.body) {
            (None, b) if *b == css2 => Ok(()),
            (Some("gzip"), b) if *b == gz2 => Ok(()),
            _ => Err(format!("expected identity or the gzip sibling:\n{}", r.describe())),
        },
    ));
    run_table("precompressed", &srv, &cases);
}

#[test]
fn table_errors_methods_and_listing_off() {
    let srv = plain_site();
    let allow = "GET, HEAD, OPTIONS";
    let error_page = |c: Case| c.check(|r: &Response| r.check_error_body());
    let unlisted = |c: Case| {
        error_page(c.status(403)).check(|r| {
            if r.body_text().contains("zeta.txt") {
                Err(format!("a listing leaks through the 403:\n{}", r.describe()))
            } else {
                Ok(())
            }
        })
    };
    let cases = vec![
        error_page(get("/missing.txt").status(404)).check(|r| {
            if r.body_text().contains("404") {
                Ok(())
            } else {
                Err(format!("the built-in 404 page names its status:\n{}", r.describe()))
            }
        }),
        head("/missing.txt").status(404).eq("content-type", "text/html; charset=utf-8"),
        error_page(get("/.secret").status(403)),
        unlisted(get("/noindex/")).named("listing off by default"),
        unlisted(get("/list/")),
        unlisted(get("/list/?format=json")),
        unlisted(get("/list/").field("Accept", "application/json")),
        // A directory without its slash is redirected to it.
        get("/dir").status(301).eq("location", "/dir/"),
        get("/dir?x=1").status(301).eq("location", "/dir/?x=1"),
        case("OPTIONS", "/file.txt").status(204).eq("allow", allow).body(Body::Is(vec![])),
        case("OPTIONS", "/").status(204).eq("allow", allow).body(Body::Is(vec![])),
        case("OPTIONS", "*").status(204).eq("allow", allow).body(Body::Is(vec![])),
        error_page(case("POST", "/file.txt").status(405)).eq("allow", allow),
        error_page(case("DELETE", "/file.txt").status(405)).eq("allow", allow),
        error_page(case("PUT", "/file.txt").status(405)).eq("allow", allow),
    ];
    run_table("errors", &srv, &cases);
}

/// A site with a caching policy, `[[headers]]` rules, configured error pages, at most 4
/// ranges and listings on.
fn policy_site() -> Server {
    proto::for_every_row(Server::builder())
        .raw_config(&format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nroot = \"{{root}}\"\n\
             [http]\nmax_age = 60\nmax_ranges = 4\n\
             [listing]\nenabled = true\n\
             [errors]\n404 = \"errors/404.html\"\n403 = \"errors/forbidden.txt\"\n\
             [log]\naccess = \"off\"\nerror = \"-\"\n{}\
             [[headers]]\nmatch = \"/assets/**\"\ncache_control = \"public, max-age=31536000, immutable\"\n\
             [[headers]]\nmime = \"text/html\"\nheaders = {{ \"X-Frame-Options\" = \"DENY\" }}\n",
            proto::tls_section()
        ))
        .setup(|_, root| {
            write(root, "assets/app.css", b"a{}\n");
            write(root, "assets/sub/deep.js", b"let x;\n");
            write(root, "assets/page.html", b"<p>asset page</p>\n");
            write(root, "notassets/x.css", b"b{}\n");
            write(root, "errors/404.html", CUSTOM_404);
            write(root, "errors/forbidden.txt", CUSTOM_403);
            write(root, "r.txt", &r_data());
            list_files(root);
        })
        .start()
}

#[test]
fn table_cache_headers_rules_error_pages_and_listings() {
    let srv = policy_site();
    let immutable = "public, max-age=31536000, immutable";
    let e_app = etag_of(&srv, "/assets/app.css", &[]);
    let e_file = etag_of(&srv, "/file.txt", &[]);
    let d = r_data();
    let l = R_LEN as u64;
    let part = |a: u64, b: u64| (a, b, d[a as usize..=b as usize].to_vec());
    let list_len = proto::fetch(&srv, proto::Proto::H1, "GET", "/list/", &[]).unwrap().body.len();
    let mut cases = vec![];
    // (path, Cache-Control, X-Frame-Options expected)
    for (path, cc, xfo) in [
        ("/file.txt", "max-age=60", false),
        ("/style.css", "max-age=60", false),
        ("/notassets/x.css", "max-age=60", false),
        ("/index.html", "max-age=60", true),
        ("/", "max-age=60", true),
        ("/assets/app.css", immutable, false),
        ("/assets/sub/deep.js", immutable, false),
        ("/assets/page.html", immutable, true),
    ] {
        let c = get(path).eq("cache-control", cc);
        let c = if cc == "max-age=60" { c.check(expires_after(60)) } else { c };
        cases.push(if xfo { c.eq("x-frame-options", "DENY") } else { c.absent("x-frame-options") });
    }
    cases.extend([
        // A 304 carries the validators and the caching policy, no body.
        get("/file.txt")
            .field("If-None-Match", &e_file)
            .status(304)
            .body(Body::Is(vec![]))
            .eq("etag", &e_file)
            .eq("last-modified", FILE_TXT_LAST_MODIFIED)
            .eq("cache-control", "max-age=60")
            .check(expires_after(60))
            .check(|r| match r.header("content-length") {
                Some(cl) if cl != FILE_TXT.len().to_string() => {
                    Err(format!("a 304 may only announce the 200's length:\n{}", r.describe()))
                }
                _ => Ok(()),
            }),
        head("/file.txt")
            .field("If-Modified-Since", FILE_TXT_LAST_MODIFIED)
            .status(304)
            .eq("etag", &e_file)
            .eq("cache-control", "max-age=60")
            .check(expires_after(60)),
        get("/assets/app.css").field("If-None-Match", &e_app).status(304).eq("cache-control", immutable),
        // Configured error pages keep their status and their own Content-Type.
        get("/missing.txt")
            .status(404)
            .body(Body::Is(CUSTOM_404.to_vec()))
            .eq("content-type", "text/html; charset=utf-8"),
        get("/nodir/missing.html")
            .status(404)
            .body(Body::Is(CUSTOM_404.to_vec()))
            .eq("content-type", "text/html; charset=utf-8"),
        get("/dir/missing")
            .status(404)
            .body(Body::Is(CUSTOM_404.to_vec()))
            .eq("content-type", "text/html; charset=utf-8"),
        head("/missing.txt").status(404).eq("content-length", &CUSTOM_404.len().to_string()),
        get("/.secret").status(403).body(Body::Is(CUSTOM_403.to_vec())).eq("content-type", "text/plain; charset=utf-8"),
        // At most max_ranges = 4 ranges; more, or ranges that amplify, get the whole file.
        get("/r.txt").field("Range", "bytes=0-9,200-209,400-409,600-609").status(206).body(Body::Multipart(
            l,
            "text/plain; charset=utf-8",
            vec![part(0, 9), part(200, 209), part(400, 409), part(600, 609)],
        )),
    ]);
    for range in [
        "bytes=0-9,200-209,400-409,600-609,800-809",
        "bytes=0-,0-,0-",
        "bytes=0-1499,500-1999",
        "bytes=0-999,0-999,0-999",
        "bytes=-2000,-2000",
    ] {
        cases.push(get("/r.txt").field("Range", range).body(Body::Full(d.clone())));
    }
    // Listings: HTML escaped, sorted, no dotfiles; JSON by query or Accept; the index wins.
    let links =
        ["../", "sub1/", "sub2/", "Alpha.txt", "a%3Cb%3E.txt", "quote%22d", "sp%20ace.txt", "x%26y", "zeta.txt"];
    cases.extend([
        get("/list/").eq("content-type", "text/html; charset=utf-8").check(move |r| {
            let html = r.body_text();
            if hrefs(&html) != links {
                return Err(format!("links {:?}, expected {links:?}", hrefs(&html)));
            }
            if ["a&lt;b&gt;.txt", "x&amp;y", "quote&quot;d"].iter().any(|e| !html.contains(e))
                || ["a<b>", "quote\"d", "x&y", ".hidden"].iter().any(|n| html.contains(n))
            {
                return Err(format!("names not escaped, or dotfiles listed:\n{html}"));
            }
            Ok(())
        }),
        get("/list/sub1/").check(|r| {
            if hrefs(&r.body_text()) == ["../", "f"] {
                Ok(())
            } else {
                Err(format!("expected the links ../ and f:\n{}", r.describe()))
            }
        }),
        get("/dir/").body(Body::Is(DIR_INDEX.to_vec())),
        head("/list/").eq("content-type", "text/html; charset=utf-8").eq("content-length", &list_len.to_string()),
        get("/list/?format=json").check(check_list_json),
        get("/list/").field("Accept", "application/json").check(check_list_json),
        get("/list/")
            .field("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
            .eq("content-type", "text/html; charset=utf-8"),
    ]);
    // Every link of the listing leads to the file it names.
    for (href, name) in links[3..].iter().zip(["Alpha.txt", "a<b>.txt", "quote\"d", "sp ace.txt", "x&y", "zeta.txt"]) {
        let data = LIST_FILES.iter().find(|(n, _)| *n == name).unwrap().1;
        cases.push(get(&format!("/list/{href}")).body(Body::Is(data.to_vec())));
    }
    run_table("policy", &srv, &cases);
}

/// A JSON listing of list/: its entries, sorted, directories first, not truncated, no raw `<`.
fn check_list_json(r: &Response) -> Result<(), String> {
    if !r.header("content-type").is_some_and(|t| t.starts_with("application/json")) || r.body_text().contains('<') {
        return Err(format!("expected JSON with no raw '<':\n{}", r.describe()));
    }
    let j = parse_json(&r.body_text()).map_err(|e| format!("invalid JSON ({e}):\n{}", r.describe()))?;
    let want: Vec<(String, String)> = [
        ("sub1", "dir"),
        ("sub2", "dir"),
        ("Alpha.txt", "file"),
        ("a<b>.txt", "file"),
        ("quote\"d", "file"),
        ("sp ace.txt", "file"),
        ("x&y", "file"),
        ("zeta.txt", "file"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    if listing_names(&j)? != want || j.get("truncated") != Some(&Json::Bool(false)) {
        return Err(format!("expected the entries {want:?}, not truncated: {j:?}"));
    }
    if j.get("path").is_some_and(|p| *p != Json::Str("/list/".into())) {
        return Err(format!("expected the path /list/: {j:?}"));
    }
    if let Some(Json::Arr(entries)) = j.get("entries") {
        for e in entries {
            let name = e.get("name").and_then(Json::str).unwrap_or("");
            if let Some((_, data)) = LIST_FILES.iter().find(|(n, _)| *n == name) {
                if e.get("size") != Some(&Json::Num(data.len() as f64)) {
                    return Err(format!("size of {name:?}: {e:?}"));
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Validators: ETag and Last-Modified
// ---------------------------------------------------------------------------------------------

#[test]
fn etag_is_strong_on_every_file_response_and_stable() {
    let srv = Server::start("");
    let mut f = Failures::new();
    let files = ["/file.txt", "/style.css", "/index.html", "/p3.txt", "/image.png", "/data.xyz", "/dir/file.txt"];
    let mut tags = HashSet::new();
    for path in files {
        let r = srv.get(path);
        let res = (|| {
            if r.status != 200 {
                return Err(format!("expected 200:\n{}", r.describe()));
            }
            r.check_common(false)?;
            let e = strong_etag(&r)?;
            if !tags.insert(e.clone()) {
                return Err(format!("ETag {e} is shared with another file"));
            }
            // The same representation keeps its tag, on GET, HEAD and 206 alike.
            let again = strong_etag(&srv.get(path))?;
            let head = strong_etag(&head_h(&srv, path, &[]))?;
            let part = get_h(&srv, path, &[("Range", "bytes=0-0")]);
            if part.status != 206 {
                return Err(format!("expected 206 for bytes=0-0:\n{}", part.describe()));
            }
            let ranged = strong_etag(&part)?;
            if again != e || head != e || ranged != e {
                return Err(format!("ETag not stable: GET {e}, GET again {again}, HEAD {head}, 206 {ranged}"));
            }
            // Without max_age there is no caching policy to announce.
            if r.header("Cache-Control").is_some() || r.header("Expires").is_some() {
                return Err(format!("no Cache-Control/Expires expected without max_age:\n{}", r.describe()));
            }
            Ok(())
        })();
        f.check(&format!("GET {path}"), res);
    }
    // A directory's index file is the same representation as the file itself.
    let via_dir = srv.get("/");
    let direct = srv.get("/index.html");
    f.check(
        "GET / and GET /index.html carry the same ETag",
        match (strong_etag(&via_dir), strong_etag(&direct)) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            (a, b) => Err(format!("{a:?} vs {b:?}")),
        },
    );
    f.finish();
}

#[test]
fn etag_changes_when_content_mtime_or_inode_changes() {
    let srv = Server::start("[cache]\nrevalidate = 0");
    let p = srv.root().join("p3.txt");
    let e1 = strong_etag(&srv.get("/p3.txt")).unwrap();

    // New content of another size.
    fs::write(&p, b"changed content\n").unwrap();
    set_mtime(&p, 1_600_000_000);
    let r = srv.get("/p3.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"changed content\n", "{r:?}");
    let e2 = strong_etag(&r).unwrap();
    assert_ne!(e1, e2, "ETag must change when the content changes");
    assert_eq!(r.header("Last-Modified"), Some(format_http_date(1_600_000_000).as_str()), "{r:?}");

    // Same bytes, another modification time.
    set_mtime(&p, 1_600_000_100);
    let r = srv.get("/p3.txt");
    let e3 = strong_etag(&r).unwrap();
    assert_ne!(e2, e3, "ETag must change when only the mtime changes");
    assert_eq!(r.header("Last-Modified"), Some(format_http_date(1_600_000_100).as_str()), "{r:?}");

    // Same bytes and mtime, but a new file (inode) renamed over it.
    let tmp = srv.root().join("p3.txt.new");
    fs::write(&tmp, b"changed content\n").unwrap();
    set_mtime(&tmp, 1_600_000_100);
    fs::rename(&tmp, &p).unwrap();
    let r = srv.get("/p3.txt");
    assert_eq!(r.body, b"changed content\n", "{r:?}");
    let e4 = strong_etag(&r).unwrap();
    assert_ne!(e3, e4, "ETag must change when the file is replaced by another inode");
}

#[test]
fn etag_changes_after_the_default_revalidation_interval() {
    let srv = Server::start("");
    let e1 = strong_etag(&srv.get("/p5.txt")).unwrap();
    fs::write(srv.root().join("p5.txt"), b"new version of p5, longer than before........\n").unwrap();
    // `[cache] revalidate` is 1 s by default: the change must show within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let r = srv.get("/p5.txt");
        assert_eq!(r.status, 200, "{r:?}");
        let e = strong_etag(&r).unwrap();
        if e != e1 {
            assert_eq!(r.body, b"new version of p5, longer than before........\n", "{r:?}");
            break;
        }
        assert!(Instant::now() < deadline, "ETag still {e1} 4 s after the file changed (revalidate = 1s)");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn in_place_truncation_within_the_revalidation_window_is_survived() {
    // A mapped (small) file truncated in place while its cache entry is still fresh: the
    // server may fail that one response, but it must not die (SIGBUS), and once revalidated
    // it serves the new content.
    let big = pseudo_random_bytes(300_000, 11);
    let d = big.clone();
    let srv = Server::builder().setup(move |_, root| write(root, "shrink.bin", &d)).start();
    let r = srv.get("/shrink.bin");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body == big, "first GET");
    fs::write(srv.root().join("shrink.bin"), b"now short\n").unwrap();
    // Within the revalidation window: whatever happens to this exchange, the process lives.
    let mut s = srv.connect();
    raw(&mut s, req("GET", "/shrink.bin", &[], true));
    let _ = try_read_response(&mut s, false);
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let mut s = srv.connect();
        raw(&mut s, req("GET", "/shrink.bin", &[], true));
        if let Ok(r) = try_read_response(&mut s, false) {
            if r.status == 200 && r.body == b"now short\n" {
                assert_eq!(r.header("Content-Length"), Some("10"), "{r:?}");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the truncated file is still not served correctly after 4 s");
        thread::sleep(Duration::from_millis(100));
    }
    // Drop checks that the server did not exit during the test.
}

#[test]
fn last_modified_never_after_date_and_absent_for_mtime_0_and_1() {
    let future = unix_now() + 86_400;
    let srv = Server::builder()
        .setup(move |_, root| {
            write(root, "epoch1.txt", b"reproducible build output\n");
            set_mtime(&root.join("epoch1.txt"), 1);
            write(root, "epoch0.txt", b"epoch zero\n");
            set_mtime(&root.join("epoch0.txt"), 0);
            write(root, "future.txt", b"from the future\n");
            set_mtime(&root.join("future.txt"), future);
            write(root, "fresh.txt", b"just written\n");
        })
        .start();

    let r = srv.get("/file.txt");
    assert_eq!(r.headers_named("Last-Modified"), [FILE_TXT_LAST_MODIFIED], "{r:?}");

    for path in ["/fresh.txt", "/future.txt", "/file.txt"] {
        let r = srv.get(path);
        assert_eq!(r.status, 200, "{r:?}");
        r.check_common(false).unwrap();
        let lm = r.header("Last-Modified").unwrap_or_else(|| panic!("no Last-Modified on {path}: {r:?}"));
        let lm = parse_http_date(lm).unwrap_or_else(|| panic!("Last-Modified of {path} is not an IMF-fixdate: {r:?}"));
        let date = parse_http_date(r.header("Date").unwrap()).unwrap();
        assert!(lm <= date, "Last-Modified later than Date on {path} (RFC 9110 §8.8.2.1): {r:?}");
    }

    for path in ["/epoch1.txt", "/epoch0.txt"] {
        let r = srv.get(path);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.header("Last-Modified").is_none(), "no Last-Modified for mtime 0/1 on {path}: {r:?}");
        strong_etag(&r).unwrap();
        // With no modification date, If-Modified-Since has nothing to compare against.
        let r = get_h(&srv, path, &[("If-Modified-Since", "Thu, 01 Jan 2099 00:00:00 GMT")]);
        assert_eq!(r.status, 200, "If-Modified-Since on a file without Last-Modified: {r:?}");
        // The ETag still validates.
        let e = strong_etag(&r).unwrap();
        let r = get_h(&srv, path, &[("If-None-Match", &e)]);
        assert_eq!(r.status, 304, "{r:?}");
        assert!(r.header("Last-Modified").is_none(), "{r:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Preconditions (RFC 9110 §13.2.2)
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Ranges (RFC 9110 §14)
// ---------------------------------------------------------------------------------------------

const R_LEN: usize = 2000;

fn r_data() -> Vec<u8> {
    pseudo_random_bytes(R_LEN, 42)
}

fn range_server(extra: &str) -> Server {
    Server::builder().config(extra).setup(|_, root| write(root, "r.txt", &r_data())).start()
}

/// Several ranges on one HTTP/1.1 keep-alive connection: each response framed exactly (the
/// ranges themselves are cases of `table_ranges`).
#[test]
fn several_ranges_on_one_keep_alive_connection() {
    let srv = range_server("");
    let d = r_data();
    let l = R_LEN as u64;
    let mut f = Failures::new();
    let mut s = srv.connect();
    for (range, a, b) in [("bytes=0-9", 0u64, 9u64), ("bytes=-1", l - 1, l - 1), ("bytes=500-1499", 500, 1499)] {
        raw(&mut s, req("GET", "/r.txt", &[("Range", range)], false));
        let r = read_response(&mut s);
        f.check(&format!("keep-alive Range: {range}"), check_206(&r, a, b, l, &d[a as usize..=b as usize]));
    }
    f.check("connection reusable after 206s", check_still_open(&mut s));
    f.finish();
}

/// HEAD with two ranges announces what GET sends (the multipart responses themselves are
/// cases of `table_ranges`).
#[test]
fn head_with_two_ranges_announces_what_get_sends() {
    let srv = range_server("");
    let mut f = Failures::new();

    // HEAD announces what GET sends: either the Range is ignored (200, the file's length) or
    // the same multipart head, whose length does not depend on the random boundary.
    let h = head_h(&srv, "/r.txt", &[("Range", "bytes=0-9,1000-1009")]);
    let res = match h.status {
        200 if h.header("Content-Length") == Some(&*R_LEN.to_string()) => Ok(()),
        206 => get_to_eof(&srv, "/r.txt", &[("Range", "bytes=0-9,1000-1009")]).and_then(|g| {
            let same_type = h.header("Content-Type").is_some_and(|t| t.starts_with("multipart/byteranges; boundary="));
            if same_type && h.header("Content-Length") == Some(&*g.body.len().to_string()) {
                Ok(())
            } else {
                Err(format!("HEAD head does not match the GET ({} body bytes):\n{}", g.body.len(), h.describe()))
            }
        }),
        _ => Err(format!("HEAD with Range: expected 200 (Range ignored) or a multipart 206 head:\n{}", h.describe())),
    };
    f.check("HEAD with two ranges", res);
    f.finish();
}

#[test]
fn ranges_on_a_large_file_with_and_without_sendfile() {
    const BIG: usize = 3 << 20;
    let data = pseudo_random_bytes(BIG, 7);
    let l = BIG as u64;
    let mut f = Failures::new();
    for sendfile in [true, false] {
        let d = data.clone();
        let srv = Server::builder()
            .config(&format!("sendfile = {sendfile}"))
            .setup(move |_, root| write(root, "big.bin", &d))
            .start();
        let mut s = srv.connect();
        for (range, a, b) in [
            ("bytes=0-9", 0u64, 9u64),
            ("bytes=1048570-1048585", 1_048_570, 1_048_585),
            ("bytes=100000-2999999", 100_000, 2_999_999),
            ("bytes=-100", l - 100, l - 1),
            ("bytes=3145000-", 3_145_000, l - 1),
        ] {
            raw(&mut s, req("GET", "/big.bin", &[("Range", range)], false));
            let r = read_response(&mut s);
            f.check(
                &format!("sendfile = {sendfile}, Range: {range}"),
                check_206(&r, a, b, l, &data[a as usize..=b as usize]),
            );
        }
        raw(&mut s, req("GET", "/big.bin", &[], false));
        let r = read_response(&mut s);
        f.check(&format!("sendfile = {sendfile}, full GET"), check_full(&r, &data));
        f.check(&format!("sendfile = {sendfile}, connection reusable"), check_still_open(&mut s));

        let part = |a: u64, b: u64| (a, b, data[a as usize..=b as usize].to_vec());
        for (range, parts) in [
            (
                "bytes=0-99,2000000-2000099,3145700-",
                vec![part(0, 99), part(2_000_000, 2_000_099), part(3_145_700, l - 1)],
            ),
            ("bytes=10-1500000,2000000-2999999", vec![part(10, 1_500_000), part(2_000_000, 2_999_999)]),
        ] {
            let res = get_to_eof(&srv, "/big.bin", &[("Range", range)])
                .and_then(|r| check_multipart(&r, l, "application/octet-stream", &parts));
            f.check(&format!("sendfile = {sendfile}, multipart Range: {range}"), res);
        }
    }
    f.finish();
}

#[test]
fn ranges_beyond_4_gib_on_a_sparse_file() {
    const LEN: u64 = 5 << 30;
    const AT: u64 = (4 << 30) + 10;
    const MARKER: &[u8] = b"MARKER@4G!";
    let mut f = Failures::new();
    for sendfile in [true, false] {
        let srv = Server::builder()
            .config(&format!("sendfile = {sendfile}"))
            .setup(|_, root| {
                let mut file = fs::File::create(root.join("huge.bin")).unwrap();
                file.seek(SeekFrom::Start(AT)).unwrap();
                file.write_all(MARKER).unwrap();
                file.set_len(LEN).unwrap();
            })
            .start();
        let h = head_h(&srv, "/huge.bin", &[]);
        f.check(
            &format!("sendfile = {sendfile}: HEAD"),
            if h.status == 200 && h.header("Content-Length") == Some(&*LEN.to_string()) && strong_etag(&h).is_ok() {
                Ok(())
            } else {
                Err(format!("expected 200 with Content-Length {LEN} and an ETag:\n{}", h.describe()))
            },
        );
        let range = format!("bytes={}-{}", AT, AT + 9);
        let r = get_h(&srv, "/huge.bin", &[("Range", &range)]);
        f.check(&format!("sendfile = {sendfile}: Range: {range}"), check_206(&r, AT, AT + 9, LEN, MARKER));
        let r = get_h(&srv, "/huge.bin", &[("Range", "bytes=-5")]);
        f.check(&format!("sendfile = {sendfile}: Range: bytes=-5"), check_206(&r, LEN - 5, LEN - 1, LEN, &[0; 5]));
        let range = format!("bytes=0-3,{}-{}", AT, AT + 9);
        let res = get_to_eof(&srv, "/huge.bin", &[("Range", &range)]).and_then(|r| {
            check_multipart(&r, LEN, "application/octet-stream", &[(0, 3, vec![0; 4]), (AT, AT + 9, MARKER.to_vec())])
        });
        f.check(&format!("sendfile = {sendfile}: Range: {range}"), res);
        let r = get_h(&srv, "/huge.bin", &[("Range", "bytes=5368709120-")]);
        f.check(
            &format!("sendfile = {sendfile}: Range past the end of a 5 GiB file"),
            if r.status == 416 && r.headers_named("Content-Range") == [format!("bytes */{LEN}").as_str()] {
                Ok(())
            } else {
                Err(format!("expected 416 with `Content-Range: bytes */{LEN}`:\n{}", r.describe()))
            },
        );
    }
    f.finish();
}

// ---------------------------------------------------------------------------------------------
// If-Range and resuming a download
// ---------------------------------------------------------------------------------------------

#[test]
fn browser_like_resume_of_an_interrupted_download() {
    let data = pseudo_random_bytes(2 * 1024 * 1024 + 123, 99);
    let d = data.clone();
    let srv =
        Server::builder().config("[cache]\nrevalidate = 0").setup(move |_, root| write(root, "dl.bin", &d)).start();
    let l = data.len() as u64;

    // Start the download, read half the body, drop the connection.
    let mut s = srv.connect();
    raw(&mut s, req("GET", "/dl.bin", &[], false));
    let h = try_read_response(&mut s, true).expect("response head");
    assert_eq!(h.status, 200, "{h:?}");
    assert_eq!(h.header("Content-Length"), Some(&*l.to_string()), "{h:?}");
    assert_eq!(h.headers_named("Accept-Ranges"), ["bytes"], "{h:?}");
    let etag = strong_etag(&h).unwrap();
    let half = data.len() / 2;
    let mut got = vec![0u8; half];
    s.read_exact(&mut got).expect("first half of the body");
    drop(s);

    // Resume with Range + If-Range, as browsers and download managers do.
    let range = format!("bytes={half}-");
    let r = get_h(&srv, "/dl.bin", &[("Range", &range), ("If-Range", &etag)]);
    check_206(&r, half as u64, l - 1, l, &data[half..]).unwrap();
    assert_eq!(strong_etag(&r).unwrap(), etag, "{r:?}");
    got.extend_from_slice(&r.body);
    assert!(got == data, "resumed download differs from the file");

    // curl's own resume (`-C -`) of a partial file gives the same bytes.
    let out_path = srv.dir().join("curl-partial.bin");
    fs::write(&out_path, &data[..data.len() / 3]).unwrap();
    let url = format!("http://{}/dl.bin", srv.addr());
    let out = curl(&["-C", "-", "-o", out_path.to_str().unwrap(), &url]);
    assert_eq!(out.code, Some(0), "curl -C - failed: {out:?}");
    assert!(fs::read(&out_path).unwrap() == data, "curl's resumed download differs from the file");

    // The file changes: the stale If-Range gets the whole new file, never a mixed one.
    let data2 = pseudo_random_bytes(data.len() + 7, 100);
    fs::write(srv.root().join("dl.bin"), &data2).unwrap();
    let r = get_h(&srv, "/dl.bin", &[("Range", &range), ("If-Range", &etag)]);
    check_full(&r, &data2).unwrap();
    let etag2 = strong_etag(&r).unwrap();
    assert_ne!(etag, etag2, "a changed file must get a new ETag");
    // ... and a resume against the new tag works again.
    let r = get_h(&srv, "/dl.bin", &[("Range", &range), ("If-Range", &etag2)]);
    check_206(&r, half as u64, data2.len() as u64 - 1, data2.len() as u64, &data2[half..]).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Precompressed siblings
// ---------------------------------------------------------------------------------------------

fn css_source() -> Vec<u8> {
    let mut s = String::new();
    for i in 0..300u32 {
        s.push_str(&format!(".c{i} {{ color: #{:06x}; margin: {}px; }}\n", i.wrapping_mul(40_999) & 0xff_ffff, i % 17));
    }
    s.into_bytes()
}

/// Modification time of the originals in the precompressed fixture.
fn pc_t0() -> u64 {
    unix_now() - 1000
}

/// root/x.css with x.css.gz (same mtime) and x.css.br (newer); root/old.css with an older
/// old.css.gz.
fn precompressed_server(extra: &str) -> Server {
    Server::builder().config(extra).setup(|_, root| precompressed_files(root)).start()
}

/// The files of [`precompressed_server`] in `root`.
fn precompressed_files(root: &Path) {
    let t0 = pc_t0();
    let css = css_source();
    write(root, "x.css", &css);
    set_mtime(&root.join("x.css"), t0);
    write(root, "x.css.gz", &gzip(&css));
    set_mtime(&root.join("x.css.gz"), t0);
    write(root, "x.css.br", &brotli_compress(&css));
    set_mtime(&root.join("x.css.br"), t0 + 50);
    write(root, "old.css", b"body { color: old; }\n");
    set_mtime(&root.join("old.css"), t0);
    write(root, "old.css.gz", &gzip(b"stale sibling content\n"));
    set_mtime(&root.join("old.css.gz"), t0 - 50);
}

/// Checks a 200 of /x.css: the expected Content-Encoding (None: identity) and body, the
/// original's Content-Type, `Vary: Accept-Encoding`, a strong ETag (returned).
fn check_variant(r: &Response, encoding: Option<&str>, body: &[u8]) -> Result<String, String> {
    if r.status != 200 {
        return Err(format!("expected 200:\n{}", r.describe()));
    }
    r.check_common(false)?;
    let ce = r.headers_named("Content-Encoding");
    if ce != encoding.into_iter().collect::<Vec<_>>() {
        return Err(format!("expected Content-Encoding {encoding:?}:\n{}", r.describe()));
    }
    if r.headers_named("Content-Type") != ["text/css; charset=utf-8"] {
        return Err(format!("the variant must keep the original's Content-Type:\n{}", r.describe()));
    }
    if !r.header_has_token("Vary", "Accept-Encoding") {
        return Err(format!("expected `Vary: Accept-Encoding`:\n{}", r.describe()));
    }
    if r.body != body {
        return Err(format!(
            "body is not the expected {} representation:\n{}",
            encoding.unwrap_or("identity"),
            r.describe()
        ));
    }
    strong_etag(r)
}

/// A real client decodes the siblings back to the original (the negotiation is the cases of
/// `table_precompressed_siblings_and_vary`).
#[test]
fn curl_decodes_the_precompressed_siblings() {
    let srv = precompressed_server("");
    let css = css_source();
    assert_eq!(gunzip(&fs::read(srv.root().join("x.css.gz")).unwrap()), css);
    assert_eq!(unbrotli(&fs::read(srv.root().join("x.css.br")).unwrap()), css);
    let url = format!("http://{}/x.css", srv.addr());
    let out = curl(&["--compressed", &url]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout == css, "curl --compressed: {} bytes differ from the original", out.stdout.len());
}

/// `[compression] precompressed` chooses the siblings served (the negotiation itself, and the
/// older sibling ignored, are cases of `table_precompressed_siblings_and_vary`).
#[test]
fn precompressed_siblings_can_be_configured() {
    let css = css_source();
    let srv = precompressed_server("[compression]\nprecompressed = []\non_demand = false");
    for ae in ["br, gzip", "gzip", "*"] {
        let r = get_h(&srv, "/x.css", &[("Accept-Encoding", ae)]);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.header("Content-Encoding").is_none(), "precompressed = [] must serve identity: {r:?}");
        assert_eq!(r.body, css, "{r:?}");
    }
    drop(srv);

    let srv = precompressed_server("[compression]\nprecompressed = [\"gzip\"]\non_demand = false");
    let gz = fs::read(srv.root().join("x.css.gz")).unwrap();
    let r = get_h(&srv, "/x.css", &[("Accept-Encoding", "br, gzip")]);
    check_variant(&r, Some("gzip"), &gz).unwrap();
    let r = get_h(&srv, "/x.css", &[("Accept-Encoding", "br")]);
    check_variant(&r, None, &css).unwrap();
}

#[test]
#[cfg(feature = "compression")]
fn compress_subcommand_writes_siblings_that_are_then_served() {
    let srv = Server::start("[cache]\nrevalidate = 0");
    let site = srv.root().join("site");
    let mut html = String::from("<!doctype html>\n<title>big</title>\n");
    for i in 0..800 {
        html.push_str(&format!("<p class=\"row\">Paragraph number {i} of a fairly repetitive page.</p>\n"));
    }
    let html = html.into_bytes();
    write(&site, "big.html", &html);
    write(&site, "sub/app.js", &"console.log('compress me');\n".repeat(200).into_bytes());
    write(&site, "pic.png", &pseudo_random_bytes(40_000, 5));
    write(&site, "tiny.html", b"<p>tiny</p>\n");

    let out = run_cli(&["compress", site.to_str().unwrap()], None);
    assert_eq!(
        out.code,
        Some(0),
        "`ferrohttpd compress DIR` failed (is the subcommand wired into the CLI?)\nstdout: {}\nstderr: {}",
        out.stdout_text(),
        out.stderr
    );

    let orig_mtime = fs::metadata(site.join("big.html")).unwrap().modified().unwrap();
    for (file, content) in
        [("big.html", &html), ("sub/app.js", &"console.log('compress me');\n".repeat(200).into_bytes())]
    {
        let gz = fs::read(site.join(format!("{file}.gz"))).unwrap_or_else(|e| panic!("{file}.gz not written: {e}"));
        let br = fs::read(site.join(format!("{file}.br"))).unwrap_or_else(|e| panic!("{file}.br not written: {e}"));
        assert!(gunzip(&gz) == *content, "{file}.gz does not decompress to {file}");
        assert!(unbrotli(&br) == *content, "{file}.br does not decompress to {file}");
        assert!(gz.len() < content.len() && br.len() < content.len());
        if let Ok(zst) = fs::read(site.join(format!("{file}.zst"))) {
            assert!(zst.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]), "{file}.zst is not a zstd frame");
        }
        for ext in ["gz", "br"] {
            let m = fs::metadata(site.join(format!("{file}.{ext}"))).unwrap().modified().unwrap();
            let o = fs::metadata(site.join(file)).unwrap().modified().unwrap();
            assert!(m >= o, "{file}.{ext} is older than {file}: the server would ignore it");
        }
    }
    for skipped in ["pic.png.gz", "pic.png.br", "pic.png.zst", "tiny.html.gz", "tiny.html.br", "tiny.html.zst"] {
        assert!(!site.join(skipped).exists(), "{skipped} should not have been written");
    }

    // The server sends them.
    let gz = fs::read(site.join("big.html.gz")).unwrap();
    let br = fs::read(site.join("big.html.br")).unwrap();
    let r = get_h(&srv, "/site/big.html", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.headers_named("Content-Encoding"), ["gzip"], "{r:?}");
    assert!(r.body == gz, "body is not big.html.gz");
    let r = get_h(&srv, "/site/big.html", &[("Accept-Encoding", "br")]);
    assert_eq!(r.headers_named("Content-Encoding"), ["br"], "{r:?}");
    assert!(r.body == br, "body is not big.html.br");
    let r = srv.get("/site/big.html");
    assert!(r.header("Content-Encoding").is_none() && r.body == html, "{r:?}");

    // A second run leaves current siblings alone; a changed original gets fresh ones.
    let ino_js = fs::metadata(site.join("sub/app.js.gz")).unwrap().ino();
    let html2 = [&html[..], b"<p>appended</p>\n"].concat();
    fs::write(site.join("big.html"), &html2).unwrap();
    let later = orig_mtime.duration_since(UNIX_EPOCH).unwrap().as_secs() + 10;
    set_mtime(&site.join("big.html"), later);
    let out = run_cli(&["compress", site.to_str().unwrap()], None);
    assert_eq!(out.code, Some(0), "second compress run: {out:?}");
    assert_eq!(fs::metadata(site.join("sub/app.js.gz")).unwrap().ino(), ino_js, "a current sibling was rewritten");
    assert!(gunzip(&fs::read(site.join("big.html.gz")).unwrap()) == html2, "stale big.html.gz not refreshed");
    assert!(unbrotli(&fs::read(site.join("big.html.br")).unwrap()) == html2, "stale big.html.br not refreshed");
    let r = get_h(&srv, "/site/big.html", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.headers_named("Content-Encoding"), ["gzip"], "{r:?}");
    assert!(gunzip(&r.body) == html2, "served gzip is not the refreshed one");
}

#[test]
#[cfg(feature = "compression")]
fn compress_is_in_the_server_binary_itself() {
    // A copy of the server alone, with nothing in PATH: `compress` needs no other executable.
    let dir = tempfile::tempdir().unwrap();
    let lonely = dir.path().join("ferrohttpd");
    fs::copy(BIN, &lonely).unwrap();
    let site = dir.path().join("site");
    write(&site, "a.html", &"<p>x</p>\n".repeat(100).into_bytes());
    // A test thread that forks while the copy is open for writing holds it until its exec:
    // ETXTBSY for a moment, so the exec is retried (bounded).
    let mut tries = 0;
    let out = loop {
        match std::process::Command::new(&lonely)
            .arg("compress")
            .arg(&site)
            .env("PATH", dir.path().join("empty"))
            .output()
        {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(gunzip(&fs::read(site.join("a.html.gz")).unwrap()) == "<p>x</p>\n".repeat(100).into_bytes());
}

// ---------------------------------------------------------------------------------------------
// Cache headers and [[headers]] rules
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Error pages
// ---------------------------------------------------------------------------------------------

const CUSTOM_404: &[u8] = b"<!doctype html>\n<title>Not here</title>\n<h1>custom 404 page</h1>\n";
const CUSTOM_403: &[u8] = b"forbidden, says the custom text page\n";
const THTTPD_404: &[u8] = b"<html><body>thttpd-style err404.html</body></html>\n";

#[test]
fn thttpd_err_nnn_convention_and_builtin_fallback() {
    let srv = Server::builder().setup(|_, root| write(root, "errors/err404.html", THTTPD_404)).start();
    let r = srv.get("/missing.txt");
    assert_eq!(r.status, 404, "{r:?}");
    r.check_common(false).unwrap();
    assert_eq!(r.body, THTTPD_404, "errors/err404.html should be found automatically: {r:?}");
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"), "{r:?}");
    // No err403.html: built-in page for 403.
    let r = srv.get("/.secret");
    assert_eq!(r.status, 403, "{r:?}");
    r.check_error_body().unwrap();
    assert_ne!(r.body, THTTPD_404, "{r:?}");
    drop(srv);

    let srv = Server::start("");
    let r = srv.get("/missing.txt");
    assert_eq!(r.status, 404, "{r:?}");
    r.check_error_body().unwrap();
    assert!(r.body_text().contains("404"), "{r:?}");
    assert_ne!(r.body, CUSTOM_404);
}

// ---------------------------------------------------------------------------------------------
// Directory listing
// ---------------------------------------------------------------------------------------------

/// The files of root/list/ and their contents (dotfiles included; they must not be listed).
const LIST_FILES: &[(&str, &[u8])] = &[
    ("a<b>.txt", b"angle brackets\n"),
    ("x&y", b"ampersand\n"),
    ("quote\"d", b"double quote\n"),
    ("sp ace.txt", b"space\n"),
    ("Alpha.txt", b"capital\n"),
    ("zeta.txt", b"last\n"),
    (".hidden", b"dotfile\n"),
    ("sub2/f", b"in sub2\n"),
    ("sub1/f", b"in sub1\n"),
    (".hiddendir/f", b"in a hidden dir\n"),
];

fn listing_server(extra: &str) -> Server {
    Server::builder().config(extra).setup(|_, root| list_files(root)).start()
}

/// The files of [`listing_server`] in `root`: list/ and many/.
fn list_files(root: &Path) {
    for (name, data) in LIST_FILES {
        write(root, &format!("list/{name}"), data);
    }
    for i in 0..10 {
        write(root, &format!("many/f{i}.txt"), format!("file {i}\n").as_bytes());
    }
}

fn listing_names(j: &Json) -> Result<Vec<(String, String)>, String> {
    let entries = match j.get("entries") {
        Some(Json::Arr(v)) => v,
        _ => return Err(format!("no entries array in {j:?}")),
    };
    entries
        .iter()
        .map(|e| {
            let name = e.get("name").and_then(Json::str).ok_or_else(|| format!("entry without name: {e:?}"))?;
            let ty = e.get("type").and_then(Json::str).ok_or_else(|| format!("entry without type: {e:?}"))?;
            Ok((name.to_string(), ty.to_string()))
        })
        .collect()
}

#[test]
fn listing_is_capped_by_max_entries() {
    let srv = listing_server("[listing]\nenabled = true\nmax_entries = 3");
    let r = srv.get("/many/");
    assert_eq!(r.status, 200, "{r:?}");
    let html = r.body_text();
    let links: Vec<String> = hrefs(&html).into_iter().filter(|h| h != "../").collect();
    assert_eq!(links.len(), 3, "max_entries = 3 must show 3 entries:\n{html}");
    for l in &links {
        assert!(l.starts_with('f') && l.ends_with(".txt"), "{links:?}");
    }
    let lower = html.to_lowercase();
    assert!(
        lower.contains("more entries") || lower.contains("truncated") || lower.contains("only 3"),
        "a truncated listing must say so:\n{html}"
    );

    let r = srv.get("/many/?format=json");
    let j = parse_json(&r.body_text()).unwrap_or_else(|e| panic!("invalid JSON ({e}): {r:?}"));
    assert_eq!(j.get("truncated"), Some(&Json::Bool(true)), "{j:?}");
    let names = listing_names(&j).unwrap();
    assert_eq!(names.len(), 3, "{j:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "truncated listing still sorted: {j:?}");
}

// ---------------------------------------------------------------------------------------------
// Request lines and targets (RFC 9112 §3), repeated precondition fields (RFC 9110 §5.3, §13.1)
// ---------------------------------------------------------------------------------------------

#[test]
fn malformed_request_lines_get_400_and_request_target_forms_are_checked() {
    let srv = Server::start("");
    let mut f = Failures::new();
    for (req, status) in [
        ("X GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /file.txt  HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /file.txt HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ("CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", 400),
        ("CONNECT /file.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET example.com:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /file.txt#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET http://x/file.txt#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ] {
        f.check(&req.escape_debug().to_string(), check_rejected(srv.addr(), req.as_bytes(), status));
    }
    for (req, status) in [
        ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n", 405),
        ("OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 204),
        ("GET http://x/file.txt HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n", 200),
    ] {
        let r = srv.exchange(req);
        f.check(
            &req.escape_debug().to_string(),
            if r.status == status { Ok(()) } else { Err(format!("expected {status}:\n{}", r.describe())) },
        );
    }
    f.finish();
}
