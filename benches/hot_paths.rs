//! Criterion micro-benchmarks for the hot pure functions of `ferrohttpd`.
//!
//! Run with `cargo bench --bench hot_paths`; `cargo bench --bench hot_paths -- --test` runs
//! every benchmark once as a smoke test. Filter with a substring, e.g. `-- normalize/`.
//!
//! Groups:
//! - `parse/*`: request-head parsing and validation (`http::request::parse`), typical and
//!   adversarial heads. Buffers are allocated once; `parse` only writes to the buffer to patch
//!   `HTTP/1.2`+ to `HTTP/1.1`, so the one case that needs it re-dirties a single byte.
//! - `normalize/*`: percent-decoding and dot-segment removal (`fs::resolve::normalize`) into a
//!   reused `String`.
//! - `resolve_syscalls/<case>/<policy>`: `fs::resolve::resolve` against a small temporary
//!   tree. **Not pure**: these make `openat2`/`openat` + `fstat` + `close` syscalls, so they
//!   measure the kernel as much as the code.
//! - `response/*`: response-head rendering (`http::response::Head`) and `error_body`, into
//!   reused buffers.
//! - `mime/*`: `http::mime::MimeTypes::lookup`.
//! - `glob/*`: thttpd-style throttle patterns (`glob::Pattern::matches`).
//! - `range/*`: `Range` field parsing (`http::range::parse`), including amplification and
//!   too-many-ranges inputs.
//! - `conditional/*`: precondition evaluation (`http::conditional::evaluate`).
//! - `request_syscalls/*`: parse → normalize → resolve → MIME → head for one request, the
//!   per-request work of the server without the socket I/O.
//! - `hpack/*` (feature `http2`): HPACK decoding of a browser's request header block (first on
//!   a connection: literals, Huffman; repeat: mostly indexed), and encoding of a typical
//!   response head into a reused buffer (same second: `date` indexed; new second each time).
//!
//! Settings are short (2 shared cores): see `config()`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrohttpd::fs::resolve::{
    normalize, resolve, DocRoot, DotfilePolicy, ResolveError, ResolveOptions, Resolved, SymlinkPolicy,
};
use ferrohttpd::glob::Pattern;
use ferrohttpd::http::conditional::{self, Conditions, Outcome, Validators};
use ferrohttpd::http::mime::MimeTypes;
use ferrohttpd::http::range::{self, RangeSpec};
use ferrohttpd::http::request::{parse, Limits};
use ferrohttpd::http::response::{error_body, fixed_fields, FieldSpans, Head};

/// The server's default limits (`Config::default()`).
const LIMITS: Limits = Limits { max_header_bytes: 16 * 1024, max_uri_bytes: 8 * 1024, max_headers: 100 };

const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

// ---------------------------------------------------------------------------------------------
// parse

const BROWSER: &[u8] = b"GET /static/css/site.min.css?v=3f2a HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/css,*/*;q=0.1\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Referer: https://www.example.com/blog/2024/06/some-article.html\r\n\
Connection: keep-alive\r\n\
Cookie: session=7c1f0e2a9b8d4c3e; theme=dark; _ga=GA1.2.123456789.1700000000\r\n\
Sec-Fetch-Dest: style\r\n\
Sec-Fetch-Mode: no-cors\r\n\
If-Modified-Since: Sat, 01 Jun 2024 10:00:00 GMT\r\n\
\r\n";

const CURL: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n";

const ABSOLUTE_FORM: &[u8] = b"GET http://www.example.com:8080/docs/guide/index.html?lang=en HTTP/1.1\r\n\
Host: www.example.com:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n";

const ENCODED_DOTS: &[u8] = b"GET /static/%2e%2e/%2E%2E/%2e%2e/etc/passwd HTTP/1.1\r\n\
Host: localhost\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n";

const HTTP_1_2: &[u8] = b"GET /index.html HTTP/1.2\r\nHost: localhost\r\nUser-Agent: curl/8.5.0\r\n\r\n";

/// Ten requests back to back, as a pipelining client sends them.
fn pipelined() -> Vec<u8> {
    let paths = [
        "/",
        "/index.html",
        "/css/a.css",
        "/js/app.js",
        "/img/logo.png",
        "/img/hero.jpg",
        "/fonts/x.woff2",
        "/favicon.ico",
        "/robots.txt",
        "/about/",
    ];
    let mut buf = Vec::new();
    for p in paths {
        buf.extend_from_slice(
            format!(
                "GET {p} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: bench/1.0\r\n\
                 Accept: */*\r\nAccept-Encoding: gzip\r\n\r\n"
            )
            .as_bytes(),
        );
    }
    buf
}

fn long_path() -> Vec<u8> {
    let mut path = String::from("/");
    while path.len() < 7 * 1024 {
        path.push_str("abcdefghij/");
    }
    path.push_str("file.html");
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

/// `Host` plus `extra` other fields.
fn many_headers(extra: usize) -> Vec<u8> {
    let mut s = String::from("GET /index.html HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..extra {
        s.push_str(&format!("X-Custom-Header-{i}: value-number-{i}\r\n"));
    }
    s.push_str("\r\n");
    s.into_bytes()
}

fn long_header_value() -> Vec<u8> {
    let cookie: String = (0..12 * 1024).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    format!("GET /index.html HTTP/1.1\r\nHost: localhost\r\nCookie: s={cookie}\r\n\r\n").into_bytes()
}

/// Checks `input` parses to a complete head of its whole length, so no benchmark silently
/// measures an error path by mistake.
fn expect_complete(name: &str, input: &[u8]) {
    let mut buf = input.to_vec();
    match parse(&mut buf, &LIMITS) {
        Ok(Some(r)) => assert_eq!(r.head_len, input.len(), "{name}: head_len"),
        other => panic!("{name}: expected a complete request, got {other:?}"),
    }
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");

    let long_path = long_path();
    let hundred = many_headers(99);
    let too_many = many_headers(100);
    let long_value = long_header_value();
    let complete: [(&str, &[u8]); 7] = [
        ("browser", BROWSER),
        ("curl", CURL),
        ("absolute_form", ABSOLUTE_FORM),
        ("encoded_dots", ENCODED_DOTS),
        ("long_path_7k", &long_path),
        ("100_headers", &hundred),
        ("long_header_value_12k", &long_value),
    ];
    for (name, input) in complete {
        expect_complete(name, input);
        g.throughput(Throughput::Bytes(input.len() as u64));
        let mut buf = input.to_vec();
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = parse(black_box(&mut buf[..]), black_box(&LIMITS));
                black_box(&r);
            })
        });
    }

    // HTTP/1.2 is patched in place to 1.1: re-dirty that one byte every iteration.
    {
        let mut buf = HTTP_1_2.to_vec();
        let pos = HTTP_1_2.windows(8).position(|w| w == b"HTTP/1.2").unwrap() + 7;
        assert_eq!(parse(&mut buf, &LIMITS).unwrap().unwrap().minor, 1);
        g.throughput(Throughput::Bytes(buf.len() as u64));
        g.bench_function("http_1_2_patch", |b| {
            b.iter(|| {
                buf[pos] = b'2';
                let r = parse(black_box(&mut buf[..]), black_box(&LIMITS));
                black_box(&r);
            })
        });
    }

    // Ten requests parsed one after another, advancing by head_len.
    {
        let mut buf = pipelined();
        let total = buf.len();
        g.throughput(Throughput::Bytes(total as u64));
        g.bench_function("pipelined_10", |b| {
            b.iter(|| {
                let mut off = 0;
                let mut n = 0;
                while off < total {
                    match parse(black_box(&mut buf[off..]), &LIMITS) {
                        Ok(Some(r)) => {
                            off += r.head_len;
                            n += 1;
                        }
                        _ => unreachable!("pipelined buffer holds only complete, valid heads"),
                    }
                }
                assert_eq!(n, 10);
                black_box(off)
            })
        });
    }

    // Error paths: 101 fields (431), and an incomplete head (`Ok(None)`, read more).
    {
        let mut buf = too_many.clone();
        assert_eq!(parse(&mut buf, &LIMITS).unwrap_err().status, 431);
        g.throughput(Throughput::Bytes(buf.len() as u64));
        g.bench_function("reject_101_headers", |b| {
            b.iter(|| {
                let r = parse(black_box(&mut buf[..]), &LIMITS);
                black_box(&r);
            })
        });
        let mut partial = BROWSER[..BROWSER.len() - 30].to_vec();
        assert!(parse(&mut partial, &LIMITS).unwrap().is_none());
        g.throughput(Throughput::Bytes(partial.len() as u64));
        g.bench_function("incomplete_browser", |b| {
            b.iter(|| {
                let r = parse(black_box(&mut partial[..]), &LIMITS);
                black_box(&r);
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// normalize

fn bench_normalize(c: &mut Criterion) {
    let mut g = c.benchmark_group("normalize");
    let mut dot_reps = String::from("/");
    while dot_reps.len() < 4096 {
        dot_reps.push_str("a/./b/../");
    }
    // "日本語/été/ファイル名.html", every byte of the non-ASCII text percent-encoded.
    let mut utf8 = String::new();
    for seg in ["日本語", "été", "ファイル名.html"] {
        utf8.push('/');
        for b in seg.bytes() {
            if b.is_ascii_alphanumeric() || b == b'.' {
                utf8.push(b as char);
            } else {
                utf8.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let cases: [(&str, &str, bool); 7] = [
        ("short", "/index.html", true),
        ("deep", "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/file.html", true),
        ("encoded_dots", "/docs/%2e%2e/img/%2E/./icons/%2e%2e/logo%2epng/..//x/%2e%2e/y.png", true),
        ("dot_reps_4k", &dot_reps, true),
        ("percent_utf8", &utf8, true),
        ("reject_climb", "/static/%2e%2e/%2E%2E/etc/passwd", false),
        ("reject_nul", "/index.html%00.jpg", false),
    ];
    let mut out = String::new();
    for (name, raw, ok) in cases {
        assert_eq!(normalize(raw.as_bytes(), &mut out).is_ok(), ok, "normalize/{name}");
        g.throughput(Throughput::Bytes(raw.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = normalize(black_box(raw.as_bytes()), &mut out);
                black_box((&r, &out));
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// resolve (syscalls)

/// A small document root, plus a directory outside it for an escaping symlink.
struct Tree {
    _root: tempfile::TempDir,
    _outside: tempfile::TempDir,
    docroot: DocRoot,
}

fn write(path: &Path, len: usize) {
    std::fs::write(path, vec![b'x'; len]).unwrap();
}

fn tree() -> Tree {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let r = root.path();
    write(&r.join("index.html"), 145);
    write(&r.join("file.html"), 4096);
    std::fs::create_dir_all(r.join("docs/guide/v1")).unwrap();
    write(&r.join("docs/index.html"), 512);
    write(&r.join("docs/guide/v1/page.html"), 2048);
    std::fs::create_dir(r.join("empty")).unwrap();
    write(&r.join(".secret"), 16);
    write(&outside.path().join("escape.html"), 16);
    std::os::unix::fs::symlink("file.html", r.join("link_in.html")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("escape.html"), r.join("link_out.html")).unwrap();
    let docroot = DocRoot::open(r).unwrap();
    Tree { _root: root, _outside: outside, docroot }
}

/// The status the server would answer with; a directory without an index (listed, or 403
/// when listings are off) is reported as `DIR`.
const DIR: u16 = 0;

fn outcome(r: &Result<Resolved, ResolveError>) -> u16 {
    match r {
        Ok(Resolved::File { .. }) => 200,
        Ok(Resolved::Redirect) => 301,
        Ok(Resolved::Directory { .. }) => DIR,
        Err(e) => e.status(),
    }
}

fn bench_resolve(c: &mut Criterion) {
    let tree = tree();
    let index = vec!["index.html".to_string(), "index.htm".to_string()];
    let policies =
        [("within_root", SymlinkPolicy::WithinRoot), ("follow", SymlinkPolicy::Follow), ("deny", SymlinkPolicy::Deny)];
    // (name, normalized path, expected status per policy in the order above)
    let cases: [(&str, &str, [u16; 3]); 10] = [
        ("file_hit", "/file.html", [200; 3]),
        ("deep_file_hit", "/docs/guide/v1/page.html", [200; 3]),
        ("index_root", "/", [200; 3]),
        ("index_subdir", "/docs/", [200; 3]),
        ("dir_redirect", "/docs", [301; 3]),
        ("dir_no_index", "/empty/", [DIR; 3]),
        ("miss_404", "/nope.html", [404; 3]),
        ("dotfile_403", "/.secret", [403; 3]),
        ("symlink_inside", "/link_in.html", [200, 200, 403]),
        ("symlink_outside", "/link_out.html", [403, 200, 403]),
    ];
    let mut g = c.benchmark_group("resolve_syscalls");
    for (case, path, expected) in cases {
        for (i, (pname, policy)) in policies.iter().enumerate() {
            let opts =
                ResolveOptions { symlinks: *policy, dotfiles: DotfilePolicy::Deny, index: &index, site_depth: 0 };
            let got = outcome(&resolve(&tree.docroot, path, &opts));
            assert_eq!(got, expected[i], "resolve {path} under {pname}");
            g.bench_with_input(BenchmarkId::new(case, pname), &path, |b, path| {
                b.iter(|| {
                    let r = resolve(&tree.docroot, black_box(path), &opts);
                    black_box(&r);
                })
            });
        }
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// response heads and error bodies

fn bench_response(c: &mut Criterion) {
    let mut g = c.benchmark_group("response");
    let mut buf = Vec::with_capacity(512);
    // HTTP/1.1's: not recording.
    let mut spans = FieldSpans::default();
    // `Server`, rendered once at start-up as the server does.
    let fixed = fixed_fields("ferrohttpd", None);
    g.bench_function("head_200", |b| {
        b.iter(|| {
            let mut h = Head::new(&mut buf, &mut spans, black_box(200), black_box(DATE), black_box(&fixed));
            h.field("Content-Type", black_box(b"text/html; charset=utf-8"));
            h.number("Content-Length", black_box(4096));
            h.field("Accept-Ranges", b"bytes");
            h.field("Last-Modified", black_box(b"Sat, 01 Jun 2024 10:00:00 GMT"));
            h.field("ETag", black_box(b"\"5f1a2b3c-1000\""));
            h.finish(black_box(true), black_box(1));
            black_box(&buf);
        })
    });
    g.bench_function("head_404_close_http10", |b| {
        b.iter(|| {
            let mut h = Head::new(&mut buf, &mut spans, black_box(404), black_box(DATE), black_box(&fixed));
            h.field("Content-Type", b"text/html; charset=utf-8");
            h.number("Content-Length", black_box(146));
            h.finish(black_box(false), black_box(0));
            black_box(&buf);
        })
    });
    let mut body = Vec::with_capacity(256);
    for status in [404u16, 431] {
        g.bench_with_input(BenchmarkId::new("error_body", status), &status, |b, &status| {
            b.iter(|| {
                error_body(&mut body, black_box(status));
                black_box(&body);
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// MIME lookup

fn bench_mime(c: &mut Criterion) {
    let mime = MimeTypes::new(&BTreeMap::new(), "utf-8");
    let mut g = c.benchmark_group("mime");
    let cases = [
        ("html", "/index.html"),
        ("jpg_upper", "/img/2024/photo.JPG"),
        ("tar_gz", "/dl/release-1.0.tar.gz"),
        ("woff2", "/fonts/inter.woff2"),
        ("no_ext", "/LICENSE"),
        ("unknown_ext", "/data/file.zzz"),
        ("ext_too_long", "/x.averyveryverylongextension"),
    ];
    for (name, path) in cases {
        g.bench_function(name, |b| b.iter(|| black_box(mime.lookup(black_box(path)))));
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// glob patterns

fn bench_glob(c: &mut Criterion) {
    let images = Pattern::new("**.jpg|**.png");
    let videos = Pattern::new("/videos/**");
    let one_level = Pattern::new("*.html");
    // Exponential for a naive backtracker; the memo keeps it at pattern × path states.
    let adversarial = Pattern::new(&"*a".repeat(30));
    let adversarial_path = "a".repeat(1000) + "b";
    let deep_png = "/images/2024/06/holiday/beach/IMG_0001.png";
    let cases: [(&str, &Pattern, &str, bool); 7] = [
        ("images_hit_first_alt", &images, "/img/photo.jpg", true),
        ("images_hit_second_alt_deep", &images, deep_png, true),
        ("images_miss", &images, "/css/site.min.css", false),
        ("videos_hit", &videos, "/videos/2024/trailer.mp4", true),
        ("videos_miss", &videos, "/other/videos/trailer.mp4", false),
        ("star_html_miss_deep", &one_level, "/docs/guide/index.html", false),
        ("adversarial_30_stars_1k_path", &adversarial, &adversarial_path, false),
    ];
    let mut g = c.benchmark_group("glob");
    for (name, pat, path, want) in cases {
        assert_eq!(pat.matches(path), want, "glob/{name}");
        g.bench_function(name, |b| b.iter(|| black_box(pat.matches(black_box(path)))));
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// Range

fn range_kind(r: &RangeSpec) -> &'static str {
    match r {
        RangeSpec::Ignore => "ignore",
        RangeSpec::Unsatisfiable => "416",
        RangeSpec::Ranges(_) => "206",
    }
}

fn bench_range(c: &mut Criterion) {
    const LEN: u64 = 10 * 1024 * 1024;
    const MAX_RANGES: usize = 32; // the server's default `max_ranges`
    let join = |specs: Vec<String>| format!("bytes={}", specs.join(","));
    // 32 disjoint ranges, requested in descending order: the sort-and-merge path at its limit.
    let many_disjoint = join((0..32u64).rev().map(|i| format!("{}-{}", i * 1000, i * 1000 + 99)).collect());
    // One more than max_ranges: ignored.
    let too_many = join((0..33u64).map(|i| format!("{}-{}", i * 1000, i * 1000 + 99)).collect());
    // 32 copies of the whole file: summed lengths exceed the file, so ignored (amplification).
    let amplification = join(vec!["0-".to_string(); 32]);
    let cases: [(&str, &str, &str); 9] = [
        ("resume_open_ended", "bytes=1048576-", "206"),
        ("first_kib", "bytes=0-1023", "206"),
        ("suffix", "bytes=-500", "206"),
        ("three_ranges", "bytes=0-99, 200-299, 1000-1999", "206"),
        ("huge_numbers", "bytes=0-99999999999999999999999999", "206"),
        ("unsatisfiable", "bytes=20000000-", "416"),
        ("invalid", "bytes=abc", "ignore"),
        ("many_disjoint_32", &many_disjoint, "206"),
        ("too_many_33", &too_many, "ignore"),
    ];
    let mut g = c.benchmark_group("range");
    for (name, field, want) in cases.into_iter().chain([("amplification_32_full", amplification.as_str(), "ignore")]) {
        assert_eq!(range_kind(&range::parse(field.as_bytes(), LEN, MAX_RANGES)), want, "range/{name}");
        g.bench_function(name, |b| {
            b.iter(|| black_box(range::parse(black_box(field.as_bytes()), black_box(LEN), MAX_RANGES)))
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// conditional

fn bench_conditional(c: &mut Criterion) {
    // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT
    const T: u64 = 784_111_777;
    let etag: &[u8] = b"\"5f1a2b3c-1000\"";
    let fresh = Validators { etag, last_modified: Some(T) };
    let newer = Validators { etag, last_modified: Some(T + 3600) };
    let other_tags: String = (0..10).map(|i| format!("\"deadbeef-{i}\"")).collect::<Vec<_>>().join(", ");
    let long_weak_list: String = (0..100).map(|i| format!("W/\"v{i:04}-abcdef\"")).collect::<Vec<_>>().join(", ");
    let d = DATE.as_bytes();
    let none = Conditions::default();
    let inm_hit = Conditions { if_none_match: Some(etag), ..Default::default() };
    let inm_list_miss = Conditions { if_none_match: Some(other_tags.as_bytes()), ..Default::default() };
    let inm_long_weak = Conditions { if_none_match: Some(long_weak_list.as_bytes()), ..Default::default() };
    let ims = Conditions { if_modified_since: Some(d), ..Default::default() };
    let if_match_fail = Conditions { if_match: Some(other_tags.as_bytes()), ..Default::default() };
    let if_range_date = Conditions { if_range: Some(d), ..Default::default() };
    let if_range_etag = Conditions { if_range: Some(etag), ..Default::default() };
    let browser_revalidate = Conditions { if_none_match: Some(etag), if_modified_since: Some(d), ..Default::default() };
    let cases: [(&str, &Conditions, &Validators, Outcome); 10] = [
        ("no_conditions", &none, &fresh, Outcome::Proceed { use_range: true }),
        ("inm_hit_304", &inm_hit, &fresh, Outcome::NotModified),
        ("inm_list_10_miss", &inm_list_miss, &fresh, Outcome::Proceed { use_range: true }),
        ("inm_100_weak_miss", &inm_long_weak, &fresh, Outcome::Proceed { use_range: true }),
        ("ims_304", &ims, &fresh, Outcome::NotModified),
        ("ims_modified_200", &ims, &newer, Outcome::Proceed { use_range: true }),
        ("if_match_fail_412", &if_match_fail, &fresh, Outcome::PreconditionFailed),
        ("if_range_date_match", &if_range_date, &fresh, Outcome::Proceed { use_range: true }),
        ("if_range_etag_match", &if_range_etag, &fresh, Outcome::Proceed { use_range: true }),
        ("browser_inm_and_ims_304", &browser_revalidate, &fresh, Outcome::NotModified),
    ];
    let mut g = c.benchmark_group("conditional");
    for (name, cond, val, want) in cases {
        assert_eq!(conditional::evaluate(true, cond, val), want, "conditional/{name}");
        g.bench_function(name, |b| {
            b.iter(|| black_box(conditional::evaluate(black_box(true), black_box(cond), black_box(val))))
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// one whole request, without the socket

fn bench_request(c: &mut Criterion) {
    let tree = tree();
    let index = vec!["index.html".to_string()];
    let opts = ResolveOptions {
        symlinks: SymlinkPolicy::WithinRoot,
        dotfiles: DotfilePolicy::Deny,
        index: &index,
        site_depth: 0,
    };
    let mime = MimeTypes::new(&BTreeMap::new(), "utf-8");
    let mut input = BROWSER.to_vec();
    let mut norm = String::new();
    let mut head = Vec::with_capacity(512);
    let fixed = fixed_fields("ferrohttpd", None);
    let mut spans = FieldSpans::default();
    let mut g = c.benchmark_group("request_syscalls");
    for (name, target) in [("browser_file", "/file.html"), ("browser_index", "/docs/")] {
        // Same browser head, different target.
        let text = std::str::from_utf8(BROWSER).unwrap().replacen("/static/css/site.min.css?v=3f2a", target, 1);
        input.clear();
        input.extend_from_slice(text.as_bytes());
        expect_complete(name, &input);
        g.bench_function(name, |b| {
            b.iter(|| {
                let req = parse(black_box(&mut input[..]), &LIMITS).unwrap().unwrap();
                normalize(req.path.as_bytes(), &mut norm).unwrap();
                let Ok(Resolved::File { meta, url_path, .. }) = resolve(&tree.docroot, &norm, &opts) else {
                    unreachable!("the tree holds the file")
                };
                let mut h = Head::new(&mut head, &mut spans, 200, DATE, &fixed);
                h.field("Content-Type", mime.lookup(&url_path).as_bytes());
                h.number("Content-Length", meta.len());
                h.finish(req.keep_alive, req.minor);
                black_box(&head);
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// HPACK

/// A browser's request fields, as Firefox sends them over HTTP/2.
#[cfg(feature = "http2")]
const H2_REQUEST: &[(&[u8], &[u8])] = &[
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"www.example.com"),
    (b":path", b"/static/css/site.min.css?v=3f2a"),
    (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"),
    (b"accept", b"text/css,*/*;q=0.1"),
    (b"accept-language", b"en-US,en;q=0.5"),
    (b"accept-encoding", b"gzip, deflate, br, zstd"),
    (b"referer", b"https://www.example.com/blog/2024/06/some-article.html"),
    (b"cookie", b"session=7c1f0e2a9b8d4c3e; theme=dark; _ga=GA1.2.123456789.1700000000"),
    (b"sec-fetch-dest", b"style"),
    (b"sec-fetch-mode", b"no-cors"),
    (b"sec-fetch-site", b"same-origin"),
];

#[cfg(feature = "http2")]
fn bench_hpack(c: &mut Criterion) {
    use ferrohttpd::h2::hpack::{Decoder, Encoder};
    let mut g = c.benchmark_group("hpack");
    // The client's blocks, made by our encoder (indexing every request field, as browsers
    // do): the first on a connection, and the next one, mostly index bytes.
    let mut enc = Encoder::new();
    let (mut first, mut repeat) = (Vec::new(), Vec::new());
    for out in [&mut first, &mut repeat] {
        for (n, v) in H2_REQUEST {
            enc.encode(n, v, out);
        }
    }
    let fields = |d: &mut Decoder, block: &[u8]| {
        let mut bytes = 0usize;
        d.decode(block, 64 * 1024, |n, v, _| {
            bytes += n.len() + v.len();
            Ok::<(), ()>(())
        })
        .unwrap();
        bytes
    };
    g.bench_function("decode_browser_first", |b| {
        b.iter(|| {
            let mut d = Decoder::new(4096);
            black_box(fields(&mut d, black_box(&first)))
        })
    });
    let mut d = Decoder::new(4096);
    fields(&mut d, &first);
    g.bench_function("decode_browser_repeat", |b| b.iter(|| black_box(fields(&mut d, black_box(&repeat)))));
    let head = |e: &mut Encoder, out: &mut Vec<u8>, date: &[u8]| {
        out.clear();
        e.encode_status(200, out);
        e.encode(b"date", date, out);
        e.encode(b"content-type", b"text/html; charset=utf-8", out);
        e.encode(b"content-length", b"4096", out);
        e.encode(b"last-modified", b"Sat, 01 Jun 2024 10:00:00 GMT", out);
        e.encode(b"etag", b"\"5f1a2b3c-1000\"", out);
        e.encode(b"accept-ranges", b"bytes", out);
        e.encode(b"cache-control", b"max-age=3600", out);
        e.encode(b"server", b"ferrohttpd", out);
    };
    let mut out = Vec::with_capacity(256);
    let mut e = Encoder::new();
    g.bench_function("encode_response_same_second", |b| {
        b.iter(|| {
            head(&mut e, &mut out, black_box(DATE.as_bytes()));
            black_box(&out);
        })
    });
    let mut e = Encoder::new();
    let mut date = DATE.as_bytes().to_vec();
    let mut tick = 0u32;
    g.bench_function("encode_response_new_second", |b| {
        b.iter(|| {
            // A different date each time: the literal and its Huffman coding every response.
            tick = tick.wrapping_add(1);
            date[24] = b'0' + (tick % 10) as u8;
            date[23] = b'0' + (tick / 10 % 6) as u8;
            head(&mut e, &mut out, black_box(&date));
            black_box(&out);
        })
    });
    g.finish();
}

/// Without the `http2` feature there is no HPACK to measure.
#[cfg(not(feature = "http2"))]
fn bench_hpack(_: &mut Criterion) {}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(250))
        .measurement_time(Duration::from_millis(750))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_parse, bench_normalize, bench_resolve, bench_response, bench_mime, bench_glob, bench_range,
        bench_conditional, bench_request, bench_hpack
}
criterion_main!(benches);
