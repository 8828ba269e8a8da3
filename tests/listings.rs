//! Directory listings as cacheable representations (issue 14): validators derived from the
//! directory's version and the same preconditions as files; error pages, which have no
//! version, ignore preconditions; a flood of listing requests of a 10,000-entry directory
//! neither stalls other clients nor grows the server's memory per connection.
//! Issue 19: every sort, order and view (table, gallery) over raw HTTP, each its own
//! representation with its own validator; unknown query values are the default; names that
//! need escaping stay escaped, and one that is not UTF-8 is not listed.
//!
//! Timing and memory bounds here are generous on purpose (the machine is shared); the real
//! figures come from `benches/listing_flood.py`. Every socket has a timeout and every loop is
//! bounded in time.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{connect, try_read_response, Response, Server};

/// `METHOD path` with extra header lines, on a fresh connection.
fn request(srv: &Server, method: &str, path: &str, headers: &[&str]) -> Response {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    let mut s = srv.connect();
    s.write_all(req.as_bytes()).unwrap();
    try_read_response(&mut s, method == "HEAD").unwrap_or_else(|e| panic!("no response to {method} {path}: {e}"))
}

fn get(srv: &Server, path: &str, headers: &[&str]) -> Response {
    request(srv, "GET", path, headers)
}

fn etag(r: &Response) -> String {
    r.header("ETag").unwrap_or_else(|| panic!("no ETag: {}", r.describe())).to_string()
}

#[test]
fn listings_have_validators_and_honour_preconditions() {
    let srv = Server::start("[listing]\nenabled = true");
    let r = get(&srv, "/noindex/", &[]);
    assert_eq!(r.status, 200, "{}", r.describe());
    let tag = etag(&r);
    assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() > 2, "a strong ETag: {tag}");
    let lm = r.header("Last-Modified").expect("Last-Modified").to_string();
    assert_eq!(r.header("Cache-Control"), Some("no-cache"), "{}", r.describe());
    assert!(r.header_has_token("Vary", "Accept"), "{}", r.describe());
    assert!(r.body_text().contains("file.txt"));

    // RFC 9110 §13.1.2: `*` matches any current representation: 304 for GET and HEAD.
    for method in ["GET", "HEAD"] {
        let r = request(&srv, method, "/noindex/", &["If-None-Match: *"]);
        assert_eq!(r.status, 304, "{method} If-None-Match: *: {}", r.describe());
        assert!(r.body.is_empty());
        assert_eq!(r.header("ETag"), Some(tag.as_str()), "a 304 carries the validator");
        assert!(r.header_has_token("Vary", "Accept"), "and Vary: {}", r.describe());
        assert_eq!(r.header("Cache-Control"), Some("no-cache"));
    }
    let r = get(&srv, "/noindex/", &[&format!("If-None-Match: \"nope\", {tag}")]);
    assert_eq!(r.status, 304, "{}", r.describe());
    let r = get(&srv, "/noindex/", &[&format!("If-Modified-Since: {lm}")]);
    assert_eq!(r.status, 304, "{}", r.describe());
    // RFC 9110 §13.1.1: If-Match with a tag that is not the current one: 412.
    let r = get(&srv, "/noindex/", &["If-Match: \"x\""]);
    assert_eq!(r.status, 412, "{}", r.describe());
    for ok in ["*".to_string(), tag.clone()] {
        let r = get(&srv, "/noindex/", &[&format!("If-Match: {ok}")]);
        assert_eq!(r.status, 200, "If-Match: {ok}: {}", r.describe());
    }
    let r = get(&srv, "/noindex/", &["If-Unmodified-Since: Thu, 01 Jan 1970 00:00:10 GMT"]);
    assert_eq!(r.status, 412, "{}", r.describe());
    // HEAD: the same length as GET, no body.
    let h = request(&srv, "HEAD", "/noindex/", &[]);
    assert!(h.body.is_empty());
    let g = get(&srv, "/noindex/", &[]);
    assert_eq!(h.header("Content-Length").map(str::to_string), Some(g.body.len().to_string()));

    // The JSON form is another representation: another tag.
    let j = get(&srv, "/noindex/?format=json", &[]);
    assert_eq!(j.status, 200);
    assert_eq!(j.header("Content-Type"), Some("application/json"), "{}", j.describe());
    let jtag = etag(&j);
    assert_ne!(jtag, tag);
    let r = get(&srv, "/noindex/", &["Accept: application/json", &format!("If-None-Match: {jtag}")]);
    assert_eq!(r.status, 304, "Accept selects the JSON form, whose tag matches: {}", r.describe());
    let r = get(&srv, "/noindex/?format=json", &[&format!("If-None-Match: {tag}")]);
    assert_eq!(r.status, 200, "the HTML tag does not validate the JSON form");

    // A change in the directory is a new version (within `revalidate`, 1 s): a new entry, and
    // a file that changes size in place (the directory's own mtime does not move).
    let changed = |old: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = get(&srv, "/noindex/", &[&format!("If-None-Match: {old}")]);
            if r.status == 200 {
                return etag(&r);
            }
            assert_eq!(r.status, 304);
            assert!(Instant::now() < deadline, "the listing's ETag did not change within 5 s");
            thread::sleep(Duration::from_millis(100));
        }
    };
    fs::write(srv.root().join("noindex/new.txt"), b"new\n").unwrap();
    let tag2 = changed(&tag);
    assert!(get(&srv, "/noindex/", &[]).body_text().contains("new.txt"));
    fs::write(srv.root().join("noindex/new.txt"), b"new, and longer\n").unwrap();
    let tag3 = changed(&tag2);
    assert_ne!(tag3, tag);
}

#[test]
fn error_pages_ignore_preconditions_and_have_no_validator() {
    // RFC 9110 §13.2.1: preconditions are ignored when the response would otherwise not be
    // 2xx or 412. An error is not a version of the target: no ETag, and no `no-cache` (which
    // without a validator forces a full refetch of something a cache should not keep).
    let srv = Server::builder()
        .config("[errors]\n404 = \"errors/404.html\"")
        .setup(|_, root| {
            fs::create_dir_all(root.join("errors")).unwrap();
            fs::write(root.join("errors/404.html"), b"<p>custom 404</p>\n").unwrap();
        })
        .start();
    let builtin = Server::start("");
    for (srv, what) in [(&srv, "custom"), (&builtin, "built-in")] {
        for cond in ["If-None-Match: *", "If-Match: \"x\"", "If-Modified-Since: Thu, 01 Jan 2099 00:00:00 GMT", ""] {
            let headers: Vec<&str> = if cond.is_empty() { vec![] } else { vec![cond] };
            let r = get(srv, "/missing.txt", &headers);
            assert_eq!(r.status, 404, "{what} page, {cond:?}: {}", r.describe());
            assert!(!r.body.is_empty(), "{what}: the error has a body");
            assert!(r.header("ETag").is_none() && r.header("Last-Modified").is_none(), "{what}: {}", r.describe());
            assert!(
                !r.header("Cache-Control").is_some_and(|c| c.contains("no-cache")),
                "{what}: no-cache without a validator: {}",
                r.describe()
            );
        }
    }
}

/// Creates `n` empty files with long names (200 bytes: a listing of 10,000 of them is about
/// 5 MB of HTML before the byte cap) under `dir`.
fn many_files(dir: &Path, n: usize) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        fs::File::create(dir.join(format!("{i:05}-{}", "n".repeat(194)))).unwrap();
    }
}

/// Keeps the kernel from buffering much of a response for a client that does not read, so
/// what the server holds for it stays in the server.
fn small_receive_buffer(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 4096;
    // SAFETY: a valid socket descriptor, and a pointer to a c_int with its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_RCVBUF)");
}

/// Reads one whole response (head and Content-Length body) from a keep-alive connection.
fn read_whole(s: &mut TcpStream) -> Option<Response> {
    try_read_response(s, false).ok()
}

#[test]
fn a_listing_flood_does_not_stall_other_clients() {
    // Before the fix every request read and rendered the 10,000 entries on the only thread
    // (about a third of a second each in a debug build), so a handful of clients asking for
    // the listing in a loop kept a plain GET waiting for seconds.
    const FLOODERS: usize = 6;
    const RUN: Duration = Duration::from_secs(4);
    let srv = Server::builder()
        .config("[listing]\nenabled = true")
        .setup(|_, root| many_files(&root.join("big"), 10_000))
        .start();
    let addr = srv.addr();
    assert_eq!(get(&srv, "/big/", &[]).status, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|i| {
            let stop = stop.clone();
            thread::spawn(move || {
                let path = if i % 2 == 0 { "/big/" } else { "/big/?format=json" };
                let mut served = 0usize;
                let mut s = connect(addr);
                while !stop.load(Ordering::Relaxed) {
                    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
                    if s.write_all(req.as_bytes()).is_err() || read_whole(&mut s).is_none() {
                        s = connect(addr);
                        continue;
                    }
                    served += 1;
                }
                served
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    let start = Instant::now();
    while start.elapsed() < RUN {
        let t = Instant::now();
        let r = get(&srv, "/file.txt", &[]);
        let took = t.elapsed();
        assert_eq!(r.status, 200);
        worst = worst.max(took);
        probes += 1;
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let served: usize = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    eprintln!("{served} listings served to {FLOODERS} clients; {probes} probes, the slowest {worst:?}");
    assert!(served > FLOODERS, "the flood did not get its listings");
    assert!(worst < Duration::from_secs(1), "a plain GET waited {worst:?} behind the listing flood");
}

#[test]
fn clients_that_do_not_read_a_listing_cost_no_memory_each() {
    // 50 clients ask for a ~4 MB listing and never read it. Before the fix each response was
    // its own rendering held by its connection (hundreds of MB); now they share the cached one.
    const CLIENTS: usize = 50;
    let srv = Server::builder()
        .config("[listing]\nenabled = true")
        .setup(|_, root| many_files(&root.join("big"), 10_000))
        .start();
    let first = get(&srv, "/big/", &[]);
    assert_eq!(first.status, 200);
    let size = first.body.len();
    assert!(size > 3_000_000, "the listing is {size} bytes");
    let before = srv.status_kb("VmRSS");
    let addr: SocketAddr = srv.addr();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut s = connect(addr);
        small_receive_buffer(&s);
        s.write_all(b"GET /big/ HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        clients.push(s);
    }
    // Wait until every response has started (the server has queued all of them), then let
    // the sockets fill.
    let mut one = [0u8; 1];
    for s in &mut clients {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        assert_eq!(s.read(&mut one).unwrap(), 1, "a response is on its way");
    }
    let mut peak = before;
    for _ in 0..10 {
        peak = peak.max(srv.status_kb("VmRSS"));
        thread::sleep(Duration::from_millis(100));
    }
    let grown_mb = peak.saturating_sub(before) / 1024;
    eprintln!("RSS {} kB before, peak {} kB with {CLIENTS} non-reading clients ({grown_mb} MB)", before, peak);
    assert!(grown_mb < 48, "the server's RSS grew by {grown_mb} MB for {CLIENTS} clients of a {size}-byte listing");
    drop(clients);
}

/// root/g/: files of known sizes and times, names that need escaping, one that is not UTF-8,
/// a subdirectory.
fn sorted_server() -> Server {
    Server::builder()
        .config("[listing]\nenabled = true")
        .setup(|_, root| {
            use std::os::unix::ffi::OsStrExt;
            let g = root.join("g");
            fs::create_dir(&g).unwrap();
            let t0 = common::unix_now() - 100_000;
            for (name, size, age) in
                [("b.png", 300, 3), ("a.jpg", 100, 1), ("c.gif", 200, 2), ("<x> & \"y\" 'z' 100%.png", 50, 4)]
            {
                fs::write(g.join(name), vec![b'x'; size]).unwrap();
                let f = fs::File::options().write(true).open(g.join(name)).unwrap();
                f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(t0 + age * 1000)).unwrap();
            }
            fs::write(g.join(std::ffi::OsStr::from_bytes(b"bad-\xff.png")), b"not utf-8").unwrap();
            fs::create_dir(g.join("sub dir")).unwrap();
        })
        .start()
}

/// The entry names of a listing page (table rows or gallery tiles), in page order.
fn listed(page: &str) -> Vec<String> {
    let marker = if page.contains("<ul class=\"g\">") { "<span class=\"n\">" } else { "<tr><td><a href=\"" };
    page.split(marker)
        .skip(1)
        .map(|s| {
            let s = if marker.ends_with('"') { &s[s.find("\">").unwrap() + 2..] } else { s };
            s[..s.find('<').unwrap()].to_string()
        })
        .filter(|n| n != "../")
        .collect()
}

#[test]
fn every_sort_and_view_over_http() {
    let srv = sorted_server();
    let esc = "&lt;x&gt; &amp; &quot;y&quot; &#39;z&#39; 100%.png";
    let cases: &[(&str, [&str; 5])] = &[
        // Byte order: `<` before letters.
        ("", ["sub dir/", esc, "a.jpg", "b.png", "c.gif"]),
        ("?sort=name&order=desc", ["sub dir/", "c.gif", "b.png", "a.jpg", esc]),
        ("?sort=size", ["sub dir/", esc, "a.jpg", "c.gif", "b.png"]),
        ("?sort=size&order=desc", ["sub dir/", "b.png", "c.gif", "a.jpg", esc]),
        ("?sort=date", ["sub dir/", "a.jpg", "c.gif", "b.png", esc]),
        ("?sort=date;order=desc", ["sub dir/", esc, "b.png", "c.gif", "a.jpg"]),
    ];
    let mut tags = std::collections::HashSet::new();
    for (query, want) in cases {
        for gallery in [false, true] {
            let q = match (gallery, query.is_empty()) {
                (false, _) => query.to_string(),
                (true, true) => "?view=gallery".to_string(),
                (true, false) => format!("{query}&view=gallery"),
            };
            let r = get(&srv, &format!("/g/{q}"), &[]);
            assert_eq!(r.status, 200, "{q}: {}", r.describe());
            assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
            let page = r.body_text();
            assert_eq!(listed(&page), want, "{q}");
            assert!(!page.contains("bad-"), "a name that is not UTF-8 is not listed");
            assert_eq!(page.contains("<ul class=\"g\">"), gallery, "{q}");
            if gallery {
                assert_eq!(page.matches("<img loading=\"lazy\"").count(), 4, "{q}: four images");
            }
            // Each view is its own representation, with its own validator and preconditions.
            let tag = etag(&r);
            assert!(tags.insert(tag.clone()), "{q}: a tag of its own: {tag}");
            let r = get(&srv, &format!("/g/{q}"), &[&format!("If-None-Match: {tag}")]);
            assert_eq!(r.status, 304, "{q}: {}", r.describe());
            let r = request(&srv, "HEAD", &format!("/g/{q}"), &[]);
            assert_eq!(r.header("ETag"), Some(tag.as_str()), "{q}: HEAD");
            assert_eq!(r.header("Content-Length"), Some(page.len().to_string().as_str()), "{q}: HEAD");
        }
    }
    // Unknown values and keys are the default view, never an error.
    let default_tag = etag(&get(&srv, "/g/", &[]));
    for q in ["?sort=bogus", "?view=grid&order=sideways", "?C=N;O=D", "?sort", "?%ff=%00", "?view=gallery%20"] {
        let r = get(&srv, &format!("/g/{q}"), &[]);
        assert_eq!(r.status, 200, "{q}: {}", r.describe());
        assert_eq!(etag(&r), default_tag, "{q}");
    }
    // JSON follows the order too, and links and names stay escaped.
    let r = get(&srv, "/g/?format=json&sort=size&order=desc", &[]);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    let text = r.body_text();
    let names: Vec<&str> = text.split("\"name\":\"").skip(1).map(|s| &s[..s.find("\",").unwrap()]).collect();
    assert_eq!(names, ["sub dir", "b.png", "c.gif", "a.jpg", "\\u003cx\\u003e \\u0026 \\\"y\\\" 'z' 100%.png"]);
    let page = get(&srv, "/g/?view=gallery", &[]).body_text();
    assert!(page.contains("src=\"%3Cx%3E%20%26%20%22y%22%20%27z%27%20100%25.png\""), "{page}");
    assert!(page.contains("<a href=\"sub%20dir/\""), "{page}");
    assert!(page.contains("<h1>Index of <a href=\"../\">/</a>g/</h1>"), "breadcrumbs: {page}");
}
