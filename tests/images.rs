//! Image format negotiation (issue 19): `photo.jpg.avif` / `photo.jpg.webp` served for
//! `photo.jpg` to clients whose `Accept` names the format, with the `Accept` fields current
//! browsers send for `<img>`; `Vary: Accept` on every response of a negotiable image; the
//! variant's own Content-Type and validators, so 304, HEAD and ranges are the variant's; the
//! policies (symlinks, staleness) apply to the variant actually sent; one switch turns it off.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use common::{raw, try_read_response, unix_now, Response, Server};

/// What current browsers send in `Accept` for an `<img>`: Chrome 131, Firefox 133, Safari 18.
const CHROME: &str = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
const FIREFOX: &str = "image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5";
const SAFARI: &str = "image/webp,image/avif,image/jxl,image/heic,image/heic-sequence,video/*;q=0.8,image/png,\
                      image/svg+xml,image/*;q=0.8,*/*;q=0.5";

const JPG: &[u8] = b"\xff\xd8\xff\xe0 the original JPEG bytes, longer than the variants\xff\xd9";
const AVIF: &[u8] = b"\0\0\0\x1cftypavif the AVIF variant, long enough for two ranges that are not coalesced: \
                        0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789";
const WEBP: &[u8] = b"RIFF\x1a\0\0\0WEBPVP8 the WebP variant";

fn set_mtime(p: &Path, secs: u64) {
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", p.display()));
}

fn put(root: &Path, rel: &str, data: &[u8], mtime: u64) {
    fs::write(root.join(rel), data).unwrap();
    set_mtime(&root.join(rel), mtime);
}

/// photo.jpg with both variants; only-webp.png with a WebP one; plain.gif with none;
/// stale.jpg with an older AVIF and a fresh WebP; link.jpg whose AVIF is a symlink out of
/// the root.
fn server(extra: &str) -> Server {
    Server::builder()
        .config(extra)
        .setup(|dir, root| {
            let t0 = unix_now() - 1000;
            put(root, "photo.jpg", JPG, t0);
            put(root, "photo.jpg.avif", AVIF, t0 + 10);
            put(root, "photo.jpg.webp", WEBP, t0);
            put(root, "only-webp.png", b"\x89PNG the original PNG", t0);
            put(root, "only-webp.png.webp", WEBP, t0 + 5);
            put(root, "plain.gif", b"GIF89a no siblings", t0);
            put(root, "stale.jpg", JPG, t0);
            put(root, "stale.jpg.avif", AVIF, t0 - 10);
            put(root, "stale.jpg.webp", WEBP, t0 + 1);
            put(root, "link.jpg", JPG, t0);
            fs::write(dir.join("outside.avif"), b"outside the root").unwrap();
            symlink(dir.join("outside.avif"), root.join("link.jpg.avif")).unwrap();
        })
        .start()
}

fn request(srv: &Server, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut s = srv.connect();
    raw(&mut s, req.as_bytes());
    let mut r = try_read_response(&mut s, true).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    if method != "HEAD" {
        let mut body = Vec::new();
        s.read_to_end(&mut body).unwrap();
        r.body = body;
    }
    r
}

fn get(srv: &Server, path: &str, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    request(srv, "GET", path, &headers)
}

/// The representation a 200 carries, checked against its Content-Type and Vary.
fn check(r: &Response, body: &[u8], content_type: &str, vary: bool) -> Result<(), String> {
    if r.status != 200 || r.body != body || r.headers_named("Content-Type") != [content_type] {
        return Err(format!("expected 200 {content_type} with {:?}:\n{}", String::from_utf8_lossy(body), r.describe()));
    }
    if r.header_has_token("Vary", "Accept") != vary {
        return Err(format!("Vary: Accept expected {vary}:\n{}", r.describe()));
    }
    if r.header("Content-Encoding").is_some() {
        return Err(format!("an image variant is not a content coding:\n{}", r.describe()));
    }
    r.check_common(false)
}

#[test]
fn browsers_get_the_best_variant_and_wildcards_the_original() {
    let srv = server("");
    let cases: &[(Option<&str>, &[u8], &str)] = &[
        (Some(CHROME), AVIF, "image/avif"),
        (Some(FIREFOX), AVIF, "image/avif"),
        (Some(SAFARI), AVIF, "image/avif"),
        (None, JPG, "image/jpeg"),
        (Some("*/*"), JPG, "image/jpeg"),
        (Some("image/*"), JPG, "image/jpeg"),
        (Some("image/avif;q=0, image/webp, */*;q=0.5"), WEBP, "image/webp"),
        (Some("image/avif;q=0, image/webp;q=0, */*"), JPG, "image/jpeg"),
        (Some("image/webp;q=0.9, image/avif;q=0.5, */*;q=0.8"), WEBP, "image/webp"),
        (Some("image/jpeg, image/avif;q=0.5"), JPG, "image/jpeg"),
    ];
    let mut failures = Vec::new();
    for &(accept, body, ty) in cases {
        if let Err(e) = check(&get(&srv, "/photo.jpg", accept), body, ty, true) {
            failures.push(format!("Accept {accept:?}: {e}"));
        }
    }
    // A PNG with only a WebP sibling: browsers that take AVIF get WebP.
    for accept in [CHROME, FIREFOX, SAFARI] {
        if let Err(e) = check(&get(&srv, "/only-webp.png", Some(accept)), WEBP, "image/webp", true) {
            failures.push(format!("only-webp.png, Accept {accept:?}: {e}"));
        }
    }
    if let Err(e) = check(&get(&srv, "/only-webp.png", Some("*/*")), b"\x89PNG the original PNG", "image/png", true) {
        failures.push(format!("only-webp.png, */*: {e}"));
    }
    // No sibling: the original, and no Vary (nothing varies).
    if let Err(e) = check(&get(&srv, "/plain.gif", Some(CHROME)), b"GIF89a no siblings", "image/gif", false) {
        failures.push(format!("plain.gif: {e}"));
    }
    // A sibling older than its original is not used; the fresh one is.
    if let Err(e) = check(&get(&srv, "/stale.jpg", Some(CHROME)), WEBP, "image/webp", true) {
        failures.push(format!("stale.jpg: {e}"));
    }
    // A variant that is a symlink out of the root is refused like the file would be.
    if let Err(e) = check(&get(&srv, "/link.jpg", Some(CHROME)), JPG, "image/jpeg", false) {
        failures.push(format!("link.jpg: {e}"));
    }
    // The variant is an ordinary file too.
    if let Err(e) = check(&get(&srv, "/photo.jpg.avif", Some(CHROME)), AVIF, "image/avif", false) {
        failures.push(format!("photo.jpg.avif directly: {e}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn validators_head_and_ranges_are_the_variants() {
    let srv = server("");
    let avif = get(&srv, "/photo.jpg", Some(CHROME));
    let jpg = get(&srv, "/photo.jpg", Some("*/*"));
    let webp = get(&srv, "/photo.jpg", Some("image/webp"));
    let tags: Vec<String> = [&avif, &jpg, &webp].iter().map(|r| r.header("ETag").unwrap().to_string()).collect();
    assert!(
        tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2],
        "three representations, three tags: {tags:?}"
    );
    assert_ne!(avif.header("Last-Modified"), jpg.header("Last-Modified"), "the AVIF is newer");
    assert_eq!(avif.header("ETag"), get(&srv, "/photo.jpg.avif", None).header("ETag"), "the variant file's own tag");

    // 304 on the variant's tag, for the client that gets the variant; carrying Vary.
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", CHROME), ("If-None-Match", &tags[0])]);
    assert_eq!(r.status, 304, "{}", r.describe());
    assert!(r.body.is_empty());
    assert_eq!(r.header("ETag"), Some(tags[0].as_str()));
    assert!(r.header_has_token("Vary", "Accept"), "{}", r.describe());
    // The same tag from a client that gets the JPEG is not a match.
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", "*/*"), ("If-None-Match", &tags[0])]);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.body, JPG);
    let lm = avif.header("Last-Modified").unwrap();
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", FIREFOX), ("If-Modified-Since", lm)]);
    assert_eq!(r.status, 304, "{}", r.describe());

    // HEAD announces what GET sends.
    let h = request(&srv, "HEAD", "/photo.jpg", &[("Accept", SAFARI)]);
    assert_eq!(h.status, 200);
    assert_eq!(h.header("Content-Type"), Some("image/avif"));
    assert_eq!(h.header("Content-Length"), Some(AVIF.len().to_string().as_str()));
    assert_eq!(h.header("ETag"), Some(tags[0].as_str()));
    assert!(h.header_has_token("Vary", "Accept"));

    // Ranges are of the variant's bytes, If-Range against its tag.
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", CHROME), ("Range", "bytes=4-11")]);
    assert_eq!(r.status, 206, "{}", r.describe());
    assert_eq!(r.body, &AVIF[4..12]);
    assert_eq!(r.header("Content-Range"), Some(format!("bytes 4-11/{}", AVIF.len()).as_str()));
    assert_eq!(r.header("Content-Type"), Some("image/avif"));
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", CHROME), ("Range", "bytes=0-1,150-151")]);
    assert_eq!(r.status, 206, "{}", r.describe());
    assert!(r.header("Content-Type").unwrap().starts_with("multipart/byteranges"));
    assert!(r.body_text().contains("Content-Type: image/avif"), "{}", r.describe());
    let r = request(&srv, "GET", "/photo.jpg", &[("Accept", CHROME), ("Range", "bytes=0-3"), ("If-Range", &tags[1])]);
    assert_eq!((r.status, r.body.as_slice()), (200, AVIF), "If-Range of another representation: the whole variant");
}

#[test]
fn one_switch_turns_it_off() {
    let srv = server("[images]\nnegotiate = false");
    let r = get(&srv, "/photo.jpg", Some(CHROME));
    check(&r, JPG, "image/jpeg", false).unwrap();
}

/// Hits plus misses of the file cache, from the status page: the lookups made so far.
fn cache_lookups(srv: &Server) -> u64 {
    let text = get(srv, "/server-status", None).body_text();
    let line = text.lines().find(|l| l.starts_with("cache: ")).unwrap_or_else(|| panic!("{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    words[2].parse::<u64>().unwrap() + words[4].parse::<u64>().unwrap()
}

#[test]
fn an_image_without_variants_costs_no_sibling_lookups() {
    let srv = server("[cache]\nrevalidate = \"1h\"\n[status]\nenabled = true\npath = \"/server-status\"");
    for path in ["/plain.gif", "/photo.jpg"] {
        get(&srv, path, Some(CHROME));
    }
    let before = cache_lookups(&srv);
    for _ in 0..5 {
        check(&get(&srv, "/plain.gif", Some(CHROME)), b"GIF89a no siblings", "image/gif", false).unwrap();
    }
    assert_eq!(cache_lookups(&srv) - before, 5, "one lookup per request: the file's, no sibling's");
    let before = cache_lookups(&srv);
    check(&get(&srv, "/photo.jpg", Some(CHROME)), AVIF, "image/avif", true).unwrap();
    assert_eq!(cache_lookups(&srv) - before, 3, "a file with variants: itself and its two siblings");
}

#[test]
fn a_variant_added_later_is_served_after_revalidate() {
    let srv = server("[cache]\nrevalidate = \"200ms\"\nnegative = \"200ms\"");
    check(&get(&srv, "/plain.gif", Some(CHROME)), b"GIF89a no siblings", "image/gif", false).unwrap();
    fs::write(srv.root().join("plain.gif.webp"), WEBP).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    check(&get(&srv, "/plain.gif", Some(CHROME)), WEBP, "image/webp", true).unwrap();
    check(&get(&srv, "/plain.gif", Some("*/*")), b"GIF89a no siblings", "image/gif", true).unwrap();
}
