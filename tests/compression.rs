//! On-demand compression (`[compression] on_demand`, feature `compression`), against the real
//! binary: the first response is identity or compressed and later ones compressed; the bytes
//! decode to the file for gzip, brotli and zstd; the variant has its own, stable ETag, and
//! preconditions, ranges and HEAD apply to its bytes; a changed file gets a new variant; the
//! variants cache stays within its bounds under many distinct files; a long compression does
//! not hold up other clients; large files, incompressible types and the off switch are never
//! compressed.
#![cfg(feature = "compression")]

mod common;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use common::json::{parse_json, Json};
use common::*;

/// Text that compresses well: `n` bytes of HTML-ish lines.
fn text(n: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = seed;
    while v.len() < n {
        v.extend_from_slice(
            format!("<li class=\"entry\"><a href=\"/item/{}\">item {}</a></li>\n", i % 1009, i).as_bytes(),
        );
        i += 7;
    }
    v.truncate(n);
    v
}

/// Text that compresses only about 2:1 (random lowercase words), so variants are large.
fn wordy(n: usize, seed: u64) -> Vec<u8> {
    pseudo_random_bytes(n, seed).iter().map(|b| if b % 6 == 0 { b' ' } else { b'a' + b % 26 }).collect()
}

fn request(srv: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    srv.exchange(r)
}

fn get_ae(srv: &Server, path: &str, ae: &str) -> Response {
    request(srv, "GET", path, &[("Accept-Encoding", ae)])
}

fn decode(coding: &str, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(b).read_to_end(&mut out).map(drop),
        "br" => brotli::Decompressor::new(b, 4096).read_to_end(&mut out).map(drop),
        "zstd" => zstd::stream::read::Decoder::new(b).and_then(|mut d| d.read_to_end(&mut out)).map(drop),
        other => panic!("unknown coding {other}"),
    }
    .unwrap_or_else(|e| panic!("{coding} does not decode: {e}"));
    out
}

/// Polls (bounded) until a GET with `ae` comes back compressed with `coding`.
fn wait_compressed(srv: &Server, path: &str, ae: &str, coding: &str) -> Response {
    let mut last = None;
    let ok = wait_until(Duration::from_secs(30), || {
        let r = get_ae(srv, path, ae);
        let done = r.header("Content-Encoding") == Some(coding);
        last = Some(r);
        done
    });
    let r = last.unwrap();
    assert!(ok, "{path} never came back in {coding}:\n{}", r.describe());
    r
}

/// The status page's `compression` object.
fn counters(srv: &Server) -> Json {
    let r = srv.get("/status?json");
    assert_eq!(r.status, 200, "{}", r.describe());
    let j = parse_json(&r.body_text()).unwrap_or_else(|e| panic!("status JSON: {e}\n{}", r.body_text()));
    j.get("compression").cloned().unwrap_or_else(|| panic!("no compression counters:\n{}", r.body_text()))
}

fn num(j: &Json, key: &str) -> u64 {
    j.num(&[key]).unwrap_or_else(|e| panic!("{e}: {j:?}")) as u64
}

fn server(extra: &str, setup: impl FnOnce(&Path) + 'static) -> Server {
    Server::builder()
        .config(&format!("[status]\nenabled = true\npath = \"/status\"\n{extra}"))
        .setup(move |_, root| setup(root))
        .start()
}

#[test]
fn text_is_compressed_on_demand_and_served_like_a_sibling() {
    let page = text(64 * 1024, 1);
    let p = page.clone();
    let srv = server("", move |root| std::fs::write(root.join("page.html"), &p).unwrap());
    let identity = request(&srv, "GET", "/page.html", &[]);
    assert_eq!(identity.status, 200);
    assert_eq!(identity.body, page, "no Accept-Encoding: identity");
    assert!(identity.header("Content-Encoding").is_none());
    assert!(identity.header_has_token("Vary", "Accept-Encoding"), "{}", identity.describe());
    let id_tag = identity.header("ETag").unwrap().to_string();

    for coding in ["gzip", "br", "zstd"] {
        // The first answer is identity or already compressed; either way it says Vary.
        let first = get_ae(&srv, "/page.html", coding);
        assert_eq!(first.status, 200, "{}", first.describe());
        assert!(first.header_has_token("Vary", "Accept-Encoding"), "{}", first.describe());
        match first.header("Content-Encoding") {
            None => assert_eq!(first.body, page),
            Some(c) => assert_eq!(c, coding),
        }
        let r = wait_compressed(&srv, "/page.html", coding, coding);
        assert_eq!(decode(coding, &r.body), page, "{coding}");
        assert!(r.body.len() < page.len() / 4, "{coding}: {} bytes", r.body.len());
        assert_eq!(r.header("Content-Length"), Some(r.body.len().to_string().as_str()));
        assert_eq!(r.header("Content-Type"), identity.header("Content-Type"));
        assert_eq!(r.header("Last-Modified"), identity.header("Last-Modified"));
        assert!(r.header_has_token("Vary", "Accept-Encoding"));
        let tag = r.header("ETag").unwrap().to_string();
        assert!(tag.starts_with('"') && tag.ends_with('"'), "a strong validator: {tag}");
        assert_ne!(tag, id_tag, "{coding}: the variant has its own ETag");
        let again = get_ae(&srv, "/page.html", coding);
        assert_eq!((again.header("ETag"), &again.body), (Some(tag.as_str()), &r.body), "stable");

        // Preconditions on the variant's validator.
        let nm = request(&srv, "GET", "/page.html", &[("Accept-Encoding", coding), ("If-None-Match", &tag)]);
        assert_eq!(nm.status, 304, "{}", nm.describe());
        assert_eq!(nm.header("ETag"), Some(tag.as_str()));
        let nm_id = request(&srv, "GET", "/page.html", &[("Accept-Encoding", coding), ("If-None-Match", &id_tag)]);
        assert_eq!(nm_id.status, 200, "identity's tag does not match the variant");
        let im = request(&srv, "GET", "/page.html", &[("Accept-Encoding", coding), ("If-Match", &id_tag)]);
        assert_eq!(im.status, 412, "{}", im.describe());

        // A range is a range of the compressed bytes.
        let rg = request(&srv, "GET", "/page.html", &[("Accept-Encoding", coding), ("Range", "bytes=10-99")]);
        assert_eq!(rg.status, 206, "{}", rg.describe());
        assert_eq!(rg.body, r.body[10..100]);
        assert_eq!(rg.header("Content-Range"), Some(format!("bytes 10-99/{}", r.body.len()).as_str()));
        assert_eq!(rg.header("Content-Encoding"), Some(coding));
        let ir = request(
            &srv,
            "GET",
            "/page.html",
            &[("Accept-Encoding", coding), ("Range", "bytes=0-9"), ("If-Range", &tag)],
        );
        assert_eq!((ir.status, &ir.body[..]), (206, &r.body[..10]));

        // HEAD: the variant's head, no body.
        let h = request(&srv, "HEAD", "/page.html", &[("Accept-Encoding", coding)]);
        assert_eq!(h.status, 200);
        assert_eq!(h.header("Content-Length"), Some(r.body.len().to_string().as_str()));
        assert_eq!(h.header("ETag"), Some(tag.as_str()));
        assert!(h.body.is_empty());
    }

    // A client accepting several gets the server's preference (br first by default), and
    // one that refuses br gets the best of the others.
    let r = get_ae(&srv, "/page.html", "gzip, deflate, br, zstd");
    assert_eq!(r.header("Content-Encoding"), Some("br"), "{}", r.describe());
    let r = get_ae(&srv, "/page.html", "gzip;q=0.5, zstd, br;q=0");
    assert_eq!(r.header("Content-Encoding"), Some("zstd"), "{}", r.describe());

    let z = counters(&srv);
    assert_eq!(num(&z, "compressed"), 3, "one variant per coding: {z:?}");
    assert!(num(&z, "bytes_saved") > 3 * (page.len() as u64) / 2, "{z:?}");
    assert_eq!(num(&z, "entries"), 1);
}

#[test]
fn a_changed_file_gets_a_new_variant() {
    let srv = server("", |root| std::fs::write(root.join("app.js"), text(20_000, 1)).unwrap());
    let old = wait_compressed(&srv, "/app.js", "zstd", "zstd");
    let old_tag = old.header("ETag").unwrap().to_string();
    let new = text(30_000, 2);
    let tmp = srv.root().join(".app.js.tmp");
    std::fs::write(&tmp, &new).unwrap();
    std::fs::rename(&tmp, srv.root().join("app.js")).unwrap();
    let mut last = None;
    let ok = wait_until(Duration::from_secs(30), || {
        let r = get_ae(&srv, "/app.js", "zstd");
        let done = r.header("Content-Encoding") == Some("zstd") && r.header("ETag") != Some(old_tag.as_str());
        last = Some(r);
        done
    });
    let r = last.unwrap();
    assert!(ok, "no new variant:\n{}", r.describe());
    assert_eq!(decode("zstd", &r.body), new);
    // The identity response changed too, and the old variant's tag no longer matches.
    let nm = request(&srv, "GET", "/app.js", &[("Accept-Encoding", "zstd"), ("If-None-Match", &old_tag)]);
    assert_eq!(nm.status, 200);
    assert_eq!(num(&counters(&srv), "entries"), 1, "the old version's variants were dropped");
}

#[test]
fn large_files_small_files_and_other_types_are_never_compressed() {
    let srv = server("[compression]\nmax_size = 100000\nmin_size = 2000", |root| {
        std::fs::write(root.join("big.txt"), text(100_001, 1)).unwrap();
        std::fs::write(root.join("small.txt"), text(1999, 1)).unwrap();
        std::fs::write(root.join("edge.txt"), text(100_000, 1)).unwrap();
        std::fs::write(root.join("photo.png"), text(50_000, 1)).unwrap();
        std::fs::write(root.join("blob.bin"), text(50_000, 1)).unwrap();
    });
    // The file at exactly max_size is compressed: a witness that the worker ran.
    wait_compressed(&srv, "/edge.txt", "gzip, br, zstd", "br");
    for _ in 0..3 {
        for path in ["/big.txt", "/small.txt", "/photo.png", "/blob.bin"] {
            let r = get_ae(&srv, path, "gzip, br, zstd");
            assert_eq!(r.status, 200);
            assert!(r.header("Content-Encoding").is_none(), "{path}:\n{}", r.describe());
            assert!(!r.header_has_token("Vary", "Accept-Encoding"), "{path} never varies:\n{}", r.describe());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let z = counters(&srv);
    assert_eq!((num(&z, "compressed"), num(&z, "entries")), (1, 1), "{z:?}");
}

#[test]
fn the_off_switch_turns_it_off() {
    let srv = server("[compression]\non_demand = false", |root| {
        std::fs::write(root.join("page.html"), text(50_000, 1)).unwrap();
    });
    for _ in 0..5 {
        let r = get_ae(&srv, "/page.html", "gzip, br, zstd");
        assert!(r.header("Content-Encoding").is_none(), "{}", r.describe());
        assert!(!r.header_has_token("Vary", "Accept-Encoding"), "{}", r.describe());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(num(&counters(&srv), "compressed"), 0);
}

#[test]
fn memory_stays_within_the_bound_under_many_distinct_files() {
    const FILES: usize = 2000;
    const SIZE: usize = 32 * 1024;
    // Bounds far below what 2,000 variants of about 20 KB (40 MB) would need.
    let srv = server("[compression]\nencodings = [\"zstd\"]\ncache_bytes = 1048576\ncache_entries = 200", |root| {
        for i in 0..FILES {
            std::fs::write(root.join(format!("f{i}.txt")), wordy(SIZE, i as u64)).unwrap();
        }
    });
    let before = srv.status_kb("RssAnon");
    let mut conn = srv.connect();
    for i in 0..FILES {
        if i % 500 == 499 {
            // Within `keepalive_requests`.
            conn = srv.connect();
        }
        raw(&mut conn, format!("GET /f{i}.txt HTTP/1.1\r\nHost: t\r\nAccept-Encoding: zstd\r\n\r\n"));
        let r = read_response(&mut conn);
        assert_eq!(r.status, 200);
        if i % 8 == 7 {
            // Let the worker keep up a little, so most files are really compressed.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // The last jobs finish (bounded wait), then the counters and memory are read.
    wait_until(Duration::from_secs(10), || {
        let z = counters(&srv);
        num(&z, "compressed") + num(&z, "queue_drops") >= FILES as u64
    });
    let z = counters(&srv);
    let after = srv.status_kb("RssAnon");
    eprintln!("{FILES} files: {z:?}; RssAnon {before} kB -> {after} kB");
    assert!(num(&z, "compressed") >= 500, "the bound was really exercised: {z:?}");
    assert!(num(&z, "entries") <= 200, "{z:?}");
    assert!(num(&z, "bytes") <= 1_048_576, "{z:?}");
    // The cache's 1 MiB, the file cache's own bookkeeping, buffers: far from the 40 MB that
    // unbounded variants would hold.
    assert!(after.saturating_sub(before) < 16 * 1024, "RssAnon grew from {before} kB to {after} kB");
}

#[test]
fn other_clients_are_answered_while_a_large_file_compresses() {
    let srv = server("[compression]\nbr_level = 9", |root| {
        std::fs::write(root.join("huge.txt"), wordy(10 * 1024 * 1024, 7)).unwrap();
        std::fs::write(root.join("small.txt"), b"small\n").unwrap();
    });
    let r = get_ae(&srv, "/huge.txt", "br");
    assert_eq!(r.status, 200);
    // While the worker compresses 10 MB at brotli 9 (seconds, in a debug build), the loop
    // answers everyone else at once.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let s = srv.get("/small.txt");
        slowest = slowest.max(t.elapsed());
        assert_eq!(s.body, b"small\n");
        let h = request(&srv, "HEAD", "/huge.txt", &[("Accept-Encoding", "br")]);
        assert_eq!(h.status, 200);
    }
    eprintln!("slowest small response while compressing: {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "a response took {slowest:?}");
    // Only meaningful if the job was still running all along (it takes seconds here).
    assert_eq!(num(&counters(&srv), "compressed"), 0, "the compression ended too soon to tell");
}
