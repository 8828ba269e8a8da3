//! Fuzzing the two places where untrusted bytes meet the server: the request parser
//! (`http::request::parse`) and the path resolver (`fs::resolve::normalize` / `resolve`).
//!
//! A proptest-driven fuzz test, bounded in time: the inputs come from a mix of strategies
//! (random bytes; mutations of the committed seed corpus `tests/corpus/requests/*.txt`;
//! structured requests with random methods, targets, versions and header fields including CR,
//! LF, NUL, obs-fold and huge numbers). Besides "no panic", the invariants checked are:
//!
//! * parser: a parsed head's `head_len` is at most the input length (and the limits), the head
//!   ends with a newline, an HTTP/1.1 request has a valid Host, every rejection is a 4xx/5xx,
//!   and every strict prefix of an accepted head asks for more bytes (the server parses as
//!   bytes arrive, so a request split across reads must not be rejected);
//! * `normalize`: it agrees with a small reference model of its documented rules, its output
//!   has no dot segment, empty segment, control byte or backslash, and it never climbs above
//!   the root;
//! * `resolve` (over a temp tree with symlinks pointing in, out, to directories, in loops,
//!   a FIFO, dotfiles): under `within-root` and `deny` a returned file or directory is under
//!   the root by its canonical path (read back from `/proc/self/fd`), under `deny` no symlink
//!   was crossed, and the dotfile policy holds for the URL path served.
//!
//! Deterministic by default (fixed seed, 10,000 cases); `PROPTEST_CASES` and
//! `PROPTEST_RNG_SEED` override. Every seed is also run directly through the parser and
//! through a real server.
//!
//! The parser and `normalize` invariants live in `fuzz/checks.rs`, shared with the
//! coverage-guided `cargo fuzz` targets (`fuzz/README.md`), which also check the chunked body
//! decoder, the Range parser, the precondition evaluator and the PROXY protocol parser. The
//! corpus those targets grew is committed (`fuzz/corpus/<target>/`) and replayed here through
//! the same checks, as are the corpora of the HTTP/2 targets (with the `http2` feature): the
//! HPACK decoder's (`fuzz/checks_hpack.rs`), the frame parser's and the connection state
//! machine's (`fuzz/checks_h2.rs`), and of the HTTP/3 targets (with the `http3` feature): the
//! frame readers' and the QPACK decoder's (`fuzz/checks_h3.rs`).

/// The invariants, shared with the `cargo fuzz` targets in `fuzz/`.
#[path = "../fuzz/checks.rs"]
mod checks;
/// The HTTP/2 frame parser's and connection state machine's invariants.
#[cfg(feature = "http2")]
#[path = "../fuzz/checks_h2.rs"]
mod checks_h2;
/// The HTTP/3 frame readers' and QPACK decoder's invariants (feature `http3`).
#[cfg(feature = "http3")]
#[path = "../fuzz/checks_h3.rs"]
mod checks_h3;
/// The HPACK decoder's invariants (the module exists only with the `http2` feature).
#[cfg(feature = "http2")]
#[path = "../fuzz/checks_hpack.rs"]
mod checks_hpack;
mod common;

use std::cell::Cell;
use std::fs;
use std::io::{ErrorKind, Read};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrohttpd::fs::resolve::{self, DocRoot, DotfilePolicy, ResolveError, ResolveOptions, Resolved, SymlinkPolicy};
use ferrohttpd::http::request::Limits;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use tempfile::TempDir;

use checks::{check_parse, check_parse_deep, model_normalize, Parsed, DEFAULT_LIMITS, SMALL_LIMITS};
use common::*;

const DEFAULT_CASES: u32 = 10_000;
/// "ferrohtt": the fixed seed that makes a plain `cargo test` reproducible.
const DEFAULT_SEED: u64 = 0x6665_7272_6f68_7474;

/// 10,000 cases from a fixed seed unless `PROPTEST_CASES` / `PROPTEST_RNG_SEED` say otherwise.
fn runner() -> TestRunner {
    let d = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() { d.cases } else { DEFAULT_CASES };
    let rng_seed =
        if std::env::var_os("PROPTEST_RNG_SEED").is_some() { d.rng_seed } else { RngSeed::Fixed(DEFAULT_SEED) };
    eprintln!("fuzz: {cases} cases, seed {rng_seed}");
    TestRunner::new(Config { cases, rng_seed, failure_persistence: None, max_shrink_iters: 4000, ..d })
}

// ---------------------------------------------------------------------------------------------
// Seed corpus
// ---------------------------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/requests")
}

/// Every `tests/corpus/requests/*.txt`, sorted by name.
fn load_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = fs::read_dir(corpus_dir())
        .expect("tests/corpus/requests")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 20, "expected at least 20 seeds in {}, found {}", corpus_dir().display(), seeds.len());
    seeds
}

// ---------------------------------------------------------------------------------------------
// Parser invariants
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Input strategies
// ---------------------------------------------------------------------------------------------

const METHODS: &[&str] = &[
    "GET", "GET", "GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT", "PRI", "get", "BREW",
    "G\0ET", "GE T", "", "GET\r", "X-METHOD",
];
const TARGET_PIECES: &[&str] = &[
    "/",
    "/",
    "/",
    "//",
    ".",
    "..",
    "%2e",
    "%2E%2e",
    "%2f",
    "%2F",
    "%5c",
    "%00",
    "%",
    "%4",
    "%zz",
    "%c3%a9",
    "%ff",
    "%25",
    "a",
    "file.txt",
    "dir",
    "index.html",
    "?",
    "?x=1&y",
    "#frag",
    "*",
    "http://",
    "https://",
    "HTTP://",
    "localhost",
    ":8080",
    ":99999",
    "[::1]",
    "[::1",
    "@",
    " ",
    "\t",
    "\\",
    "é",
    "\x7f",
    "\r",
    "\n",
    "\0",
    ";",
    "~",
];
const VERSIONS: &[&str] = &[
    "HTTP/1.1",
    "HTTP/1.1",
    "HTTP/1.1",
    "HTTP/1.0",
    "HTTP/1.2",
    "HTTP/1.9",
    "HTTP/2.0",
    "HTTP/0.9",
    "HTTP/3",
    "HTTP/1",
    "HTTP/1.",
    "HTTP/11",
    "http/1.1",
    "HTTP/1.10",
    "HTTP/1.1 ",
    "",
    "HTTP/9.9",
    "HTTP/1.x",
];
const HEADER_NAMES: &[&str] = &[
    "Host",
    "Host",
    "host",
    "HOST",
    "Content-Length",
    "Content-Length",
    "Transfer-Encoding",
    "Transfer-Encoding",
    "Connection",
    "Expect",
    "Range",
    "If-Range",
    "If-None-Match",
    "If-Modified-Since",
    "Accept-Encoding",
    "Accept",
    "User-Agent",
    "Referer",
    "Authorization",
    "X-Custom",
    "",
    "Bad Name",
    "Host ",
    " Host",
    "X\0Y",
    "Ho\rst",
    "Content-Length\t",
    "é",
];
const HEADER_VALUES: &[&str] = &[
    "localhost",
    "x",
    "",
    "localhost:8080",
    "[::1]:80",
    "[::1",
    "a b",
    "a/b",
    "0",
    "5",
    "-1",
    "+5",
    "0x10",
    " 7 ",
    "1,1",
    "1, 2",
    "99999999999999999999999",
    "18446744073709551615",
    "18446744073709551616",
    "chunked",
    "gzip, chunked",
    "chunked, chunked",
    "chunked, gzip",
    "identity",
    "CHUNKED",
    "close",
    "keep-alive",
    "close, keep-alive",
    "Upgrade",
    "100-continue",
    "200-ok",
    "bytes=0-0",
    "bytes=-1",
    "bytes=0-1,2-3",
    "bytes=99999999999999999999-",
    "W/\"x\"",
    "*",
    "\0",
    "a\r\n b",
    "a\r\n\tb",
    "a\n b",
    "\r",
    "\n",
    "\x7f",
    "é",
    "Thu, 02 Jan 2020 03:04:05 GMT",
];
const EOLS: &[&str] = &["\r\n", "\r\n", "\r\n", "\n", "\r", "\r\r\n", ""];

fn bytes_of(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// A request assembled from plausible and hostile parts.
fn structured_request() -> BoxedStrategy<Vec<u8>> {
    let method = prop_oneof![
        10 => select(METHODS).prop_map(bytes_of),
        1 => prop::collection::vec(any::<u8>(), 0..12),
        1 => (1usize..400).prop_map(|n| b"M".repeat(n)),
    ];
    let target = prop_oneof![
        10 => prop::collection::vec(select(TARGET_PIECES), 0..14).prop_map(|v| v.concat().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
        1 => (1usize..12000).prop_map(|n| {
            let mut v = b"/".to_vec();
            v.resize(n, b'a');
            v
        }),
    ];
    let value = prop_oneof![
        8 => select(HEADER_VALUES).prop_map(bytes_of),
        2 => prop::collection::vec(any::<u8>(), 0..30),
        1 => (1usize..60).prop_map(|n| "9".repeat(n).into_bytes()),
        1 => (1usize..20000).prop_map(|n| b"v".repeat(n)),
    ];
    let name = prop_oneof![
        8 => select(HEADER_NAMES).prop_map(bytes_of),
        1 => prop::collection::vec(any::<u8>(), 0..10),
    ];
    let header = (name, select(&[": ", ":", " : ", ":\t", "::", ""][..]), value, select(EOLS));
    let body = prop_oneof![
        3 => Just(Vec::new()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
        1 => Just(b"5\r\nhello\r\n0\r\n\r\n".to_vec()),
        1 => Just(b"GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
    ];
    (
        prop::collection::vec(select(&["", "\r\n", "\n"][..]), 0..3),
        method,
        select(&[" ", " ", " ", "  ", "\t", ""][..]),
        target,
        select(&[" ", " ", " ", "  ", ""][..]),
        select(VERSIONS),
        select(EOLS),
        prop::collection::vec(header, 0..12),
        select(&["\r\n", "\r\n", "\r\n", "\n", "", "\r"][..]),
        body,
    )
        .prop_map(|(lead, method, sp1, target, sp2, version, eol, headers, end, body)| {
            let mut v: Vec<u8> = lead.concat().into_bytes();
            v.extend(method);
            v.extend(sp1.as_bytes());
            v.extend(target);
            v.extend(sp2.as_bytes());
            v.extend(version.as_bytes());
            v.extend(eol.as_bytes());
            for (n, colon, val, eol) in headers {
                v.extend(n);
                v.extend(colon.as_bytes());
                v.extend(val);
                v.extend(eol.as_bytes());
            }
            v.extend(end.as_bytes());
            v.extend(body);
            v
        })
        .boxed()
}

/// One edit of a seed: (kind, position, byte, length).
type Edit = (u8, usize, u8, u16);

fn apply_edits(seed: &[u8], other: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for &(kind, pos, byte, len) in edits {
        let at = if v.is_empty() { 0 } else { pos % (v.len() + 1) };
        let len = usize::from(len % 64) + 1;
        match kind % 8 {
            0 => v.insert(at, byte),
            1 if at < v.len() => {
                v.remove(at);
            }
            2 if at < v.len() => v[at] = byte,
            3 if at < v.len() => v[at] ^= 1 << (byte % 8),
            4 => {
                // Duplicate a chunk.
                let end = (at + len).min(v.len());
                let chunk = v[at..end].to_vec();
                v.splice(at..at, chunk);
            }
            5 => v.truncate(at),
            6 => {
                // Splice in part of another seed.
                let from = if other.is_empty() { 0 } else { pos % other.len() };
                let end = (from + len).min(other.len());
                v.splice(at..at, other[from..end].iter().copied());
            }
            7 => {
                // Insert a byte the parser must treat with care.
                let special: &[u8] = match byte % 6 {
                    0 => b"\r\n",
                    1 => b"\n",
                    2 => b"\0",
                    3 => b"\r\n ",
                    4 => b"%",
                    _ => b"\r",
                };
                v.splice(at..at, special.iter().copied());
            }
            _ => {}
        }
    }
    v
}

fn mutated_seed(seeds: Arc<Vec<Vec<u8>>>) -> BoxedStrategy<Vec<u8>> {
    let n = seeds.len();
    (0..n, 0..n, prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>(), any::<u16>()), 0..8))
        .prop_map(move |(i, j, edits)| apply_edits(&seeds[i], &seeds[j], &edits))
        .boxed()
}

/// A well-formed request with varied but sensible parts (so that many inputs get through to
/// the checks on accepted heads), sometimes followed by more bytes.
fn wellformed_request() -> BoxedStrategy<Vec<u8>> {
    const SEGMENTS: &[&str] = &["a", "file.txt", "dir", "%41", "%2e%2e", "..", ".", "é", "x-y_z~", "%20", ""];
    const FIELDS: &[&str] = &[
        "User-Agent: fuzz/1.0",
        "Accept: */*",
        "Accept-Encoding: gzip, br;q=0.5",
        "Connection: close",
        "Connection: keep-alive",
        "Range: bytes=0-9",
        "If-None-Match: \"abc\"",
        "If-Modified-Since: Thu, 02 Jan 2020 03:04:05 GMT",
        "Content-Length: 0",
        "Content-Length: 5",
        "Transfer-Encoding: chunked",
        "Expect: 100-continue",
        "Referer: http://example.com/",
        "Authorization: Basic dXNlcjpwYXNz",
        "X-Empty:",
        "X-Spaces:    padded    ",
    ];
    (
        select(&["GET", "GET", "HEAD", "OPTIONS", "POST", "DELETE"][..]),
        select(&["", "", "http://localhost", "https://example.com:8443"][..]),
        prop::collection::vec(select(SEGMENTS), 0..6),
        select(&["", "", "?", "?q=1", "?a=b&c=%2F"][..]),
        select(&["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/1.9"][..]),
        select(&["localhost", "example.com:8080", "[::1]:8080", "127.0.0.1", ""][..]),
        prop::collection::vec(select(FIELDS), 0..6),
        select(&["\r\n", "\r\n", "\n"][..]),
        select(&["", "", "hello", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"][..]),
    )
        .prop_map(|(method, scheme, segs, query, version, host, fields, eol, after)| {
            let mut s = format!("{method} {scheme}/{}{query} {version}{eol}Host: {host}{eol}", segs.join("/"));
            for f in fields {
                s.push_str(f);
                s.push_str(eol);
            }
            s.push_str(eol);
            s.push_str(after);
            s.into_bytes()
        })
        .boxed()
}

fn request_inputs(seeds: Arc<Vec<Vec<u8>>>) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..300),
        4 => mutated_seed(seeds),
        4 => structured_request(),
        3 => wellformed_request(),
    ]
    .boxed()
}

fn limits_strategy() -> BoxedStrategy<Limits> {
    prop_oneof![
        3 => Just(DEFAULT_LIMITS),
        1 => Just(SMALL_LIMITS),
        1 => (16usize..20000, 1usize..10000, 0usize..120)
            .prop_map(|(h, u, n)| Limits { max_header_bytes: h, max_uri_bytes: u, max_headers: n }),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// Path resolution: reference model and a temp tree
// ---------------------------------------------------------------------------------------------

const OUTSIDE_MARKER: &[u8] = b"OUTSIDE-THE-ROOT";

struct Tree {
    _tmp: TempDir,
    root: DocRoot,
    canon_root: PathBuf,
}

/// ```text
/// <tmp>/secret.txt  <tmp>/outside/{secret.txt,index.html}          (OUTSIDE-THE-ROOT)
/// root/a.txt index.html dir/{index.html,f.txt,.hidden} noindex/x.txt deep/sub/x.txt
/// root/.hidden .well-known/x.txt .git/config é.txt "sp ace.txt" %41.txt fifo
/// root/link-in -> a.txt            root/link-abs-in -> <root>/a.txt   root/link-dir-in -> dir
/// root/link-out -> ../secret.txt   root/link-abs-out -> <tmp>/secret.txt
/// root/link-dir-out -> ../outside  root/link-parent -> ..   root/link-slash -> /
/// root/dir/link-up -> ../a.txt     root/dir/link-up-out -> ../../secret.txt
/// root/idx-out/index.html -> ../../secret.txt   root/idx-in/index.html -> ../a.txt
/// root/loop1 <-> loop2, root/self -> self, root/dangling -> nowhere, root/link-hidden -> .hidden
/// ```
fn make_tree() -> Tree {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let root = t.join("root");
    let w = |rel: &str, data: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    fs::create_dir_all(&root).unwrap();
    fs::write(t.join("secret.txt"), OUTSIDE_MARKER).unwrap();
    fs::create_dir_all(t.join("outside")).unwrap();
    fs::write(t.join("outside/secret.txt"), OUTSIDE_MARKER).unwrap();
    fs::write(t.join("outside/index.html"), OUTSIDE_MARKER).unwrap();
    for (rel, data) in [
        ("a.txt", &b"a"[..]),
        ("index.html", b"index"),
        ("dir/index.html", b"dir index"),
        ("dir/f.txt", b"f"),
        ("dir/.hidden", b"hidden"),
        ("noindex/x.txt", b"x"),
        ("deep/sub/x.txt", b"deep"),
        (".hidden", b"hidden"),
        (".well-known/x.txt", b"wk"),
        (".git/config", b"git"),
        ("é.txt", b"e"),
        ("sp ace.txt", b"space"),
        ("%41.txt", b"percent"),
    ] {
        w(rel, data);
    }
    let links: &[(&str, PathBuf)] = &[
        ("link-in", "a.txt".into()),
        ("link-abs-in", root.join("a.txt")),
        ("link-dir-in", "dir".into()),
        ("link-out", "../secret.txt".into()),
        ("link-abs-out", t.join("secret.txt")),
        ("link-dir-out", "../outside".into()),
        ("link-parent", "..".into()),
        ("link-slash", "/".into()),
        ("dir/link-up", "../a.txt".into()),
        ("dir/link-up-out", "../../secret.txt".into()),
        ("loop1", "loop2".into()),
        ("loop2", "loop1".into()),
        ("self", "self".into()),
        ("dangling", "nowhere".into()),
        ("link-hidden", ".hidden".into()),
    ];
    for (name, target) in links {
        symlink(target, root.join(name)).unwrap();
    }
    fs::create_dir_all(root.join("idx-out")).unwrap();
    symlink("../../secret.txt", root.join("idx-out/index.html")).unwrap();
    fs::create_dir_all(root.join("idx-in")).unwrap();
    symlink("../a.txt", root.join("idx-in/index.html")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "mkfifo");
    let canon_root = fs::canonicalize(&root).unwrap();
    let doc = DocRoot::open(&root).unwrap();
    Tree { _tmp: tmp, root: doc, canon_root }
}

const PATH_PIECES: &[&str] = &[
    "a.txt",
    "dir",
    "dir",
    "f.txt",
    "sub",
    "deep",
    "x.txt",
    "index.html",
    "noindex",
    "link-in",
    "link-abs-in",
    "link-dir-in",
    "link-out",
    "link-abs-out",
    "link-dir-out",
    "link-parent",
    "link-slash",
    "link-up",
    "link-up-out",
    "link-hidden",
    "idx-out",
    "idx-in",
    "loop1",
    "self",
    "dangling",
    "fifo",
    ".hidden",
    ".well-known",
    ".git",
    "config",
    "secret.txt",
    "outside",
    "etc",
    "passwd",
    "é.txt",
    "sp ace.txt",
    "sp%20ace.txt",
    "%41.txt",
    "%2541.txt",
    "..",
    "..",
    ".",
    "",
    "%2e%2e",
    "%2E",
    ".%2e",
    "%2f",
    "%2F..%2F",
    "%5c",
    "%00",
    "%",
    "%zz",
    "%c3%a9.txt",
    "%ff",
    "%c3",
    "\\",
    "\0",
    "~",
];

/// Request paths: mostly `/`-joined pieces that name things in the tree.
fn path_inputs() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        8 => (prop::collection::vec(select(PATH_PIECES), 0..8), any::<bool>()).prop_map(|(v, slash)| {
            let mut s = format!("/{}", v.join("/"));
            if slash {
                s.push('/');
            }
            s.into_bytes()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..40).prop_map(|mut v| {
            v.insert(0, b'/');
            v
        }),
        1 => prop::collection::vec(any::<u8>(), 0..20),
    ]
    .boxed()
}

const INDEX_SETS: &[&[&str]] = &[
    &["index.html", "index.htm"],
    &["index.htm", "index.html"],
    &["../secret.txt", "..", ".", "", ".hidden", "a/b", "index.html"],
    &["link-out", "link-up-out", "secret.txt"],
    &[],
];

fn fd_path(fd: &impl AsRawFd) -> Result<PathBuf, String> {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| format!("readlink /proc/self/fd: {e}"))
}

/// Resolves `path` under one policy and checks what comes back.
fn check_resolve(
    tree: &Tree,
    path: &str,
    symlinks: SymlinkPolicy,
    dotfiles: DotfilePolicy,
    index: &[String],
) -> Result<(), String> {
    let opts = ResolveOptions { symlinks, dotfiles, index, site_depth: 0 };
    let ctx = || format!("resolve({path:?}, {symlinks:?}, {dotfiles:?}, index {index:?})");
    let confined = symlinks != SymlinkPolicy::Follow;
    let check_real = |real: &Path, url_path: Option<&str>| -> Result<(), String> {
        if confined && !real.starts_with(&tree.canon_root) {
            return Err(format!("{}: escaped the root to {}", ctx(), real.display()));
        }
        if let (SymlinkPolicy::Deny, Some(u)) = (symlinks, url_path) {
            let lexical = tree.canon_root.join(u.trim_start_matches('/'));
            if real != lexical.as_path() {
                return Err(format!("{}: `deny` crossed a symlink: {u} is really {}", ctx(), real.display()));
            }
        }
        Ok(())
    };
    match resolve::resolve(&tree.root, path, &opts) {
        Ok(Resolved::File { mut file, meta, url_path }) => {
            FILES_SERVED.fetch_add(1, Ordering::Relaxed);
            if !meta.is_file() {
                return Err(format!("{}: returned a non-file as a file", ctx()));
            }
            let real = fd_path(&file)?;
            check_real(&real, Some(&url_path))?;
            let served_index =
                path.ends_with('/') && url_path.strip_prefix(path).is_some_and(|name| index.iter().any(|i| i == name));
            if url_path != path && !served_index {
                return Err(format!("{}: url_path {url_path:?} is neither the path nor an index under it", ctx()));
            }
            if dotfiles == DotfilePolicy::Deny {
                for (i, seg) in url_path.split('/').skip(1).enumerate() {
                    if seg.starts_with('.') && !(i == 0 && seg == ".well-known") {
                        return Err(format!("{}: served dotfile {url_path:?}", ctx()));
                    }
                }
            }
            let mut head = [0u8; 64];
            let n = file.read(&mut head).unwrap_or(0);
            if confined && head[..n].windows(OUTSIDE_MARKER.len()).any(|w| w == OUTSIDE_MARKER) {
                return Err(format!("{}: served a file from outside the root", ctx()));
            }
        }
        Ok(Resolved::Directory { dir, meta }) => {
            if !meta.is_dir() || !path.ends_with('/') {
                return Err(format!("{}: Directory for a non-directory or a path without a slash", ctx()));
            }
            let real = fd_path(&dir)?;
            check_real(&real, Some(path))?;
        }
        Ok(Resolved::Redirect) => {
            if path.ends_with('/') {
                return Err(format!("{}: redirect for a path that already ends with a slash", ctx()));
            }
        }
        Err(ResolveError::Io(e)) => return Err(format!("{}: unexpected I/O error {e}", ctx())),
        Err(_) => {}
    }
    Ok(())
}

/// Files `check_resolve` has seen returned (so the fuzz test can tell it reached some).
static FILES_SERVED: AtomicUsize = AtomicUsize::new(0);

const POLICIES: [(SymlinkPolicy, DotfilePolicy); 6] = [
    (SymlinkPolicy::WithinRoot, DotfilePolicy::Deny),
    (SymlinkPolicy::WithinRoot, DotfilePolicy::Allow),
    (SymlinkPolicy::Deny, DotfilePolicy::Deny),
    (SymlinkPolicy::Deny, DotfilePolicy::Allow),
    (SymlinkPolicy::Follow, DotfilePolicy::Deny),
    (SymlinkPolicy::Follow, DotfilePolicy::Allow),
];

/// Normalizes `raw`, compares with the model, checks the output, and resolves it (and the raw
/// form, which `resolve` must refuse or handle safely) under every policy.
fn check_path(tree: &Tree, raw: &[u8], index: &[String]) -> Result<(), String> {
    checks::check_normalize(raw)?;
    let mut out = String::new();
    let res = resolve::normalize(raw, &mut out);
    if res.is_ok() {
        for (s, d) in POLICIES {
            check_resolve(tree, &out, s, d, index)?;
        }
    }
    if let Ok(s) = std::str::from_utf8(raw) {
        if res.is_err() || s != out {
            for (sym, dot) in POLICIES {
                check_resolve(tree, s, sym, dot, index)?;
            }
        }
    }
    Ok(())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn fuzz_request_parser() {
    let seeds: Arc<Vec<Vec<u8>>> = Arc::new(load_seeds().into_iter().map(|(_, d)| d).collect());
    let strategy = (request_inputs(seeds), limits_strategy());
    let counts = [Cell::new(0usize), Cell::new(0), Cell::new(0)];
    let result = runner().run(&strategy, |(input, limits)| {
        let bump = |i: usize| counts[i].set(counts[i].get() + 1);
        match check_parse_deep(&input, &limits) {
            Ok(Parsed::Incomplete) => bump(0),
            Ok(Parsed::Rejected(_)) => bump(1),
            Ok(Parsed::Request(..)) => bump(2),
            Err(e) => {
                return Err(TestCaseError::fail(format!("{e}\n  input: \"{}\"\n  limits: {limits:?}", show(&input))))
            }
        }
        Ok(())
    });
    let stats = counts.map(|c| c.get());
    eprintln!("parser fuzz: {} incomplete, {} rejected, {} accepted (incl. shrinking)", stats[0], stats[1], stats[2]);
    if let Err(e) = result {
        panic!("{e}");
    }
    // The mix must reach all three outcomes, or the strategies have rotted.
    assert!(stats.iter().all(|&n| n > 0), "the generated inputs missed an outcome: {stats:?}");
}

#[test]
fn fuzz_path_normalize_and_resolve() {
    let tree = make_tree();
    let strategy = (path_inputs(), select(INDEX_SETS));
    let normalized = Cell::new(0usize);
    let result = runner().run(&strategy, |(raw, index)| {
        let index = strings(index);
        check_path(&tree, &raw, &index).map_err(TestCaseError::fail)?;
        if model_normalize(&raw).is_some() {
            normalized.set(normalized.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let files = FILES_SERVED.load(Ordering::Relaxed);
    eprintln!("path fuzz: {} of the inputs normalized; {files} files resolved (all policies)", normalized.get());
    assert!(normalized.get() > 0 && files > 0, "no generated path was valid or served: the strategy has rotted");
}

/// Paths the resolver must refuse (or keep inside the root) whatever the fuzzer finds.
#[test]
fn known_escapes_stay_inside_the_root() {
    let tree = make_tree();
    let index = strings(&["index.html"]);
    let cases: &[&str] = &[
        "/link-out",
        "/link-abs-out",
        "/link-dir-out/secret.txt",
        "/link-dir-out/",
        "/link-parent/secret.txt",
        "/link-parent/root/a.txt",
        "/link-slash/etc/passwd",
        "/dir/link-up-out",
        "/idx-out/",
        "/link-dir-in/link-up-out",
        "/loop1",
        "/self",
        "/fifo",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/dir/%2e%2e/%2e%2e/secret.txt",
        "/dir%2f..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
    ];
    let mut f = Failures::new();
    for c in cases {
        f.check(c, check_path(&tree, c.as_bytes(), &index));
        let mut out = String::new();
        if resolve::normalize(c.as_bytes(), &mut out).is_ok() {
            for sym in [SymlinkPolicy::WithinRoot, SymlinkPolicy::Deny] {
                let opts =
                    ResolveOptions { symlinks: sym, dotfiles: DotfilePolicy::Allow, index: &index, site_depth: 0 };
                if let Ok(Resolved::File { file, .. }) = resolve::resolve(&tree.root, &out, &opts) {
                    let real = fd_path(&file).unwrap();
                    if !real.starts_with(&tree.canon_root) {
                        f.check(c, Err(format!("{sym:?} served {}", real.display())));
                    }
                }
            }
        }
    }
    // And the ones that must work, so the checks above are not vacuous.
    for (path, sym) in [
        ("/a.txt", SymlinkPolicy::Deny),
        ("/link-in", SymlinkPolicy::WithinRoot),
        ("/link-abs-in", SymlinkPolicy::WithinRoot),
        ("/dir/link-up", SymlinkPolicy::WithinRoot),
        ("/idx-in/", SymlinkPolicy::WithinRoot),
        ("/link-out", SymlinkPolicy::Follow),
    ] {
        let opts = ResolveOptions { symlinks: sym, dotfiles: DotfilePolicy::Deny, index: &index, site_depth: 0 };
        let ok = matches!(resolve::resolve(&tree.root, path, &opts), Ok(Resolved::File { .. }));
        f.check(&format!("{path} under {sym:?}"), if ok { Ok(()) } else { Err("not served".into()) });
    }
    f.finish();
}

/// Every seed through the parser (default and small limits, and every strict prefix of an
/// accepted head), its path through the resolver, and a few expected answers.
#[test]
fn seeds_through_the_parser_and_resolver() {
    let tree = make_tree();
    let index = strings(&["index.html"]);
    let mut f = Failures::new();
    for (name, data) in load_seeds() {
        for limits in [DEFAULT_LIMITS, SMALL_LIMITS] {
            match check_parse_deep(&data, &limits) {
                Ok(Parsed::Request(_, path)) if path.starts_with('/') => {
                    f.check(&format!("{name}: path {path:?}"), check_path(&tree, path.as_bytes(), &index))
                }
                Ok(_) => {}
                Err(e) => f.check(&format!("{name} with {limits:?}"), Err(e)),
            }
        }
    }
    // Clear-cut answers (RFC 9112/9110) for some seeds.
    // usize::MAX: the whole seed is the head.
    let expect: &[(&str, Parsed)] = &[
        ("01-get.txt", Parsed::Request(usize::MAX, "/file.txt".into())),
        ("09-absolute-form.txt", Parsed::Request(usize::MAX, "/file.txt".into())),
        ("24-http12.txt", Parsed::Request(usize::MAX, "/file.txt".into())),
        ("18-overlong-header.txt", Parsed::Rejected(431)),
        ("19-overlong-uri.txt", Parsed::Rejected(414)),
        ("20-many-headers.txt", Parsed::Rejected(431)),
        ("23-http2-version.txt", Parsed::Rejected(505)),
        ("27-duplicate-host.txt", Parsed::Rejected(400)),
        ("28-cl-te-smuggle.txt", Parsed::Rejected(400)),
        ("29-conflicting-cl.txt", Parsed::Rejected(400)),
        ("30-huge-cl.txt", Parsed::Rejected(400)),
        ("37-no-host-11.txt", Parsed::Rejected(400)),
        ("38-unknown-method.txt", Parsed::Rejected(501)),
        ("40-incomplete-head.txt", Parsed::Incomplete),
    ];
    let seeds = load_seeds();
    for (name, want) in expect {
        let data = &seeds.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("seed {name} missing")).1;
        let want = match want {
            Parsed::Request(usize::MAX, p) => Parsed::Request(data.len(), p.clone()),
            Parsed::Request(h, p) => Parsed::Request(*h, p.clone()),
            Parsed::Rejected(s) => Parsed::Rejected(*s),
            Parsed::Incomplete => Parsed::Incomplete,
        };
        let want = &want;
        let got = check_parse(data, &DEFAULT_LIMITS);
        f.check(name, if got.as_ref() == Ok(want) { Ok(()) } else { Err(format!("expected {want:?}, got {got:?}")) });
    }
    f.finish();
}

/// Sends one seed on a fresh connection, half-closes, and reads everything: the answer must
/// be nothing (a close) or start with a valid HTTP/1.1 status line, must never hold the secret
/// from outside the root, and must end (EOF or reset) within 4 s.
fn send_seed(addr: SocketAddr, data: &[u8]) -> Result<String, String> {
    let mut s = connect(addr);
    raw_lenient(&mut s, data);
    let _ = s.shutdown(Shutdown::Write);
    s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => return Err(format!("no close within 4 s of a half-close ({e}); got \"{}\"", show(&out))),
    }
    if out.windows(SECRET_MARKER.len()).any(|w| w == SECRET_MARKER) {
        return Err(format!("served the secret: \"{}\"", show(&out)));
    }
    if out.is_empty() {
        return Ok("closed".into());
    }
    let line_end =
        out.windows(2).position(|w| w == b"\r\n").ok_or_else(|| format!("no status line: \"{}\"", show(&out)))?;
    let line =
        std::str::from_utf8(&out[..line_end]).map_err(|_| format!("status line not UTF-8: \"{}\"", show(&out)))?;
    let valid = line.len() >= 12
        && line.starts_with("HTTP/1.1 ")
        && line[9..12].bytes().all(|b| b.is_ascii_digit())
        && (line.len() == 12 || line.as_bytes()[12] == b' ')
        && (100..=599).contains(&line[9..12].parse::<u16>().unwrap_or(0));
    if !valid {
        return Err(format!("invalid status line {line:?}"));
    }
    Ok(line[9..12].to_string())
}

#[test]
fn every_seed_gets_a_valid_answer_or_a_close_from_a_real_server() {
    // The seeds are HTTP/1.1 heads; with h2c on, the HTTP/2 preface seed would (rightly) be
    // answered with HTTP/2 frames (tests/http2.rs covers that), so it is off here and the
    // preface gets HTTP/1.1's answer to a version it does not speak.
    let srv = Server::start("[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\n[http2]\nh2c = false");
    let mut f = Failures::new();
    let mut summary = Vec::new();
    for (name, data) in load_seeds() {
        let t = std::time::Instant::now();
        match send_seed(srv.addr(), &data) {
            Ok(what) => summary.push(format!("{name}: {what} ({} ms)", t.elapsed().as_millis())),
            Err(e) => f.check(&name, Err(e)),
        }
    }
    eprintln!("seed answers:\n  {}", summary.join("\n  "));
    let r = srv.get("/file.txt");
    f.check("the server still serves afterwards", if r.status == 200 { Ok(()) } else { Err(r.describe()) });
    f.finish();
}

/// The corpus the `cargo fuzz` targets grew (`fuzz/corpus/<target>/`, minimized and committed):
/// every file goes through the same invariants as in the fuzzer, so a regression that one of
/// them once exercised fails here, in `cargo test`, without a nightly toolchain.
#[test]
fn fuzz_corpus_replays_clean() {
    let targets: [(&str, Check); 6] = [
        ("head", checks::check_head),
        ("chunked", checks::check_chunked),
        ("range", checks::check_range),
        ("conditional", checks::check_conditional),
        ("normalize", checks::check_normalize),
        ("proxy", checks::check_proxy),
    ];
    replay_corpora(&targets);
}

/// A fuzz target's invariants, as `fuzz/checks*.rs` give them.
type Check = fn(&[u8]) -> Result<(), String>;

/// Runs every file of each target's committed corpus (`fuzz/corpus/TARGET`, at least 10
/// files) through its check, and fails with all the files that break it.
fn replay_corpora(targets: &[(&str, Check)]) {
    let mut f = Failures::new();
    for &(target, check) in targets {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 10, "{}: {} files; the committed corpus is missing", dir.display(), files.len());
        for file in &files {
            let data = fs::read(file).unwrap();
            let name = format!("{target}/{}", file.file_name().unwrap().to_string_lossy());
            f.check(&name, check(&data));
        }
        eprintln!("fuzz corpus: {target}: {} files", files.len());
    }
    f.finish();
}

/// The HTTP/2 targets' committed corpora (`hpack_decode`, `h2_frame`, `h2_session`),
/// replayed through their invariants.
#[cfg(feature = "http2")]
#[test]
fn http2_fuzz_corpora_replay_clean() {
    let targets: [(&str, Check); 3] = [
        ("hpack_decode", checks_hpack::check_hpack_decode),
        ("h2_frame", checks_h2::check_h2_frame),
        ("h2_session", checks_h2::check_h2_session),
    ];
    replay_corpora(&targets);
}

/// The HTTP/3 targets' committed corpora (`h3_frame`, `qpack_decode`), replayed through
/// their invariants.
#[cfg(feature = "http3")]
#[test]
fn http3_fuzz_corpora_replay_clean() {
    let targets: [(&str, Check); 2] =
        [("h3_frame", checks_h3::check_h3_frame), ("qpack_decode", checks_h3::check_qpack_decode)];
    replay_corpora(&targets);
}
