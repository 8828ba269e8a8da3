//! Precompressed siblings of a compressible file (`x.br`, `x.zst`, `x.gz`): a file found to
//! have none is not looked for again until the cache would notice one, so its requests cost
//! one cache lookup each, as an image without variants does (tests/images.rs); a sibling
//! added later is still served once `[cache] revalidate` and `negative` have passed.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use common::{Response, Server};

fn put(root: &Path, rel: &str, data: &[u8], mtime: u64) {
    fs::write(root.join(rel), data).unwrap();
    fs::File::options()
        .write(true)
        .open(root.join(rel))
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(mtime))
        .unwrap();
}

/// plain.css with no sibling, x.css with a gzip one (the bytes are not checked here, only
/// which file is sent). On-demand compression is off, so `Vary` tells whether a sibling
/// was found.
fn server(cache: &str) -> Server {
    Server::builder()
        .config(&format!(
            "[cache]\n{cache}\n[compression]\non_demand = false\n[status]\nenabled = true\npath = \"/server-status\""
        ))
        .setup(|_, root| {
            let t0 = common::unix_now() - 1000;
            put(root, "plain.css", b"p { color: plain; }\n", t0);
            put(root, "x.css", b"x { color: identity; }\n", t0);
            put(root, "x.css.gz", b"x.css as if gzipped\n", t0);
        })
        .start()
}

fn get(srv: &Server, path: &str) -> Response {
    srv.exchange(format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip, br\r\nConnection: close\r\n\r\n"
    ))
}

/// Hits plus misses of the file cache, from the status page: the lookups made so far.
fn cache_lookups(srv: &Server) -> u64 {
    let text = srv.get("/server-status").body_text();
    let line = text.lines().find(|l| l.starts_with("cache: ")).unwrap_or_else(|| panic!("{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    words[2].parse::<u64>().unwrap() + words[4].parse::<u64>().unwrap()
}

fn check(r: &Response, body: &[u8], gzip: bool) {
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.body, body, "{}", r.describe());
    let encoding = if gzip { vec!["gzip"] } else { vec![] };
    assert_eq!(r.headers_named("Content-Encoding"), encoding, "{}", r.describe());
    assert_eq!(r.header_has_token("Vary", "Accept-Encoding"), gzip, "{}", r.describe());
}

#[test]
fn a_file_without_siblings_costs_no_sibling_lookups() {
    let srv = server("revalidate = \"1h\"\nnegative = \"1h\"");
    for path in ["/plain.css", "/x.css"] {
        get(&srv, path);
    }
    let before = cache_lookups(&srv);
    for _ in 0..5 {
        check(&get(&srv, "/plain.css"), b"p { color: plain; }\n", false);
    }
    assert_eq!(cache_lookups(&srv) - before, 5, "one lookup per request: the file's, no sibling's");
    let before = cache_lookups(&srv);
    check(&get(&srv, "/x.css"), b"x.css as if gzipped\n", true);
    assert_eq!(cache_lookups(&srv) - before, 4, "a file with a sibling: itself and its three siblings");
}

/// With both times short, and with only `negative` (how long the sibling's miss is
/// remembered) short: the shorter bounds the wait, as it did before a file's lack of siblings
/// was remembered.
#[test]
fn a_sibling_added_later_is_served_after_the_shorter_of_revalidate_and_negative() {
    for cache in ["revalidate = \"200ms\"\nnegative = \"200ms\"", "revalidate = \"1h\"\nnegative = \"200ms\""] {
        let srv = server(cache);
        check(&get(&srv, "/plain.css"), b"p { color: plain; }\n", false);
        put(srv.root(), "plain.css.gz", b"plain.css as if gzipped\n", common::unix_now());
        std::thread::sleep(Duration::from_millis(600));
        check(&get(&srv, "/plain.css"), b"plain.css as if gzipped\n", true);
    }
}
