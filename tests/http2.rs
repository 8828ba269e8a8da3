//! HTTP/2: the real binary over h2c (prior knowledge) and TLS (ALPN `h2`), against curl and
//! nghttp (Debian `nghttp2-client`), and hand-built frames over a raw socket for protocol
//! errors.
#![cfg(feature = "http2")]

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use common::h2::*;
use common::*;

/// 32 MiB: past the cache's mapping limit, so sent from the file descriptor.
const BIG: usize = 32 * 1024 * 1024;

fn big_file(root: &Path) -> Vec<u8> {
    let data = pseudo_random_bytes(BIG, 7);
    fs::write(root.join("big.bin"), &data).unwrap();
    data
}

fn url(srv: &Server, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", srv.port())
}

/// curl with `--http2-prior-knowledge`, head and body dumped.
fn h2c(srv: &Server, path: &str, args: &[&str]) -> Response {
    let u = url(srv, path);
    let mut all = vec!["--http2-prior-knowledge", "-o", "-", "-D", "-", "--max-time", "20"];
    all.extend_from_slice(args);
    all.push(&u);
    let o = curl(&all);
    assert_eq!(o.code, Some(0), "curl {args:?} {path}: {o:?}");
    split_curl_dump(&o.stdout).unwrap_or_else(|| panic!("cannot parse curl output {:?}", o.stdout_text()))
}

fn have(program: &str) -> bool {
    let ok = Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: {program} is not installed");
    }
    ok
}

#[test]
fn h2c_serves_what_http1_serves() {
    let mut big = Vec::new();
    let srv = Server::builder()
        .config("[listing]\nenabled = true\n[status]\nenabled = true")
        .setup(|_, root| {
            fs::write(root.join("text.txt"), "plain text, plain text, plain text\n".repeat(50)).unwrap();
            fs::write(root.join("text.txt.gz"), b"pretend gzip bytes").unwrap();
        })
        .start();
    big.extend(big_file(srv.root()));

    let r = h2c(&srv, "/file.txt", &[]);
    assert_eq!((r.version.as_str(), r.status), ("HTTP/2", 200), "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    assert_eq!(r.header("content-length"), Some(FILE_TXT.len().to_string().as_str()));
    // Connection-specific fields never appear, names are lowercase.
    assert!(r.headers.iter().all(|(n, _)| *n == n.to_ascii_lowercase() && n != "connection"), "{r:?}");
    let etag = r.header("etag").expect("an etag").to_string();

    // HEAD: curl -I prints the head alone (the stream ends with the HEADERS frame).
    let o = curl(&["--http2-prior-knowledge", "-I", &url(&srv, "/file.txt")]);
    assert_eq!(o.code, Some(0), "{o:?}");
    let head = split_curl_dump(&o.stdout).unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-length"), r.header("content-length"));

    // The fd-backed file, byte for byte.
    let r = h2c(&srv, "/big.bin", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == big, "32 MiB body differs (got {} bytes)", r.body.len());

    let r = h2c(&srv, "/big.bin", &["-r", "1000-1999"]);
    assert_eq!((r.status, &r.body[..]), (206, &big[1000..2000]));
    assert_eq!(r.header("content-range"), Some(format!("bytes 1000-1999/{BIG}").as_str()));

    let r = h2c(&srv, "/file.txt", &["-H", &format!("if-none-match: {etag}")]);
    assert_eq!((r.status, r.body.len()), (304, 0));

    let r = h2c(&srv, "/missing.txt", &[]);
    assert_eq!(r.status, 404);
    assert!(r.body_text().contains("404 Not Found"), "{r:?}");

    let r = h2c(&srv, "/noindex/", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body_text().contains("file.txt"), "{r:?}");

    let r = h2c(&srv, "/text.txt", &["-H", "accept-encoding: gzip"]);
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("gzip")));
    assert_eq!(r.body, b"pretend gzip bytes");

    let r = h2c(&srv, "/big.bin", &["-r", "0-9,1000000-1000009"]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(text.matches(boundary).count(), 3, "{text:?}");
    let at = |needle: &[u8]| r.body.windows(needle.len()).position(|w| w == needle).is_some();
    assert!(at(&big[..10]) && at(&big[1_000_000..1_000_010]), "parts missing");

    // Counted per protocol on the status page.
    let status = srv.get("/.status").body_text();
    assert!(status.contains("requests_http2: 9\n"), "{status}");
    // Each stream is logged with its protocol.
    let lines = srv.wait_access_log(11);
    assert!(lines.iter().filter(|l| l.contains("\"GET /file.txt HTTP/2.0\" 200")).count() >= 1, "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("\"HEAD /file.txt HTTP/2.0\" 200 0")), "{lines:?}");
}

#[test]
fn many_streams_share_one_connection() {
    // curl 7.88 cannot reuse an h2c connection for a second URL (it fails the same way
    // against nghttpd), so the client is hand-built: 100 requests at once on one connection,
    // every response checked byte for byte. The header blocks of the responses are decoded
    // with the crate's HPACK decoder; curl and nghttp check them in the other tests.
    let srv = Server::builder()
        .setup(|_, root| {
            fs::write(root.join("text.txt"), "some text\n".repeat(100)).unwrap();
            fs::write(root.join("text.txt.gz"), b"pretend gzip").unwrap();
        })
        .start();
    let big = big_file(srv.root());
    // The largest windows: the client never has to send WINDOW_UPDATE.
    let mut s = open(&srv, b"\x00\x04\x7f\xff\xff\xff");
    s.write_all(&frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes())).unwrap();
    let mut want: Vec<(u32, u16, Vec<u8>)> = Vec::new();
    let mut requests = Vec::new();
    for i in 0..100u32 {
        let id = 2 * i + 1;
        let (path, extra, status, body): (String, Vec<(&str, &str)>, u16, Vec<u8>) = match i % 10 {
            0 if i < 30 => ("/big.bin".into(), vec![], 200, big.clone()),
            0 => ("/big.bin".into(), vec![("range", "bytes=5000000-5099999")], 206, big[5_000_000..5_100_000].to_vec()),
            1 => ("/text.txt".into(), vec![("accept-encoding", "gzip")], 200, b"pretend gzip".to_vec()),
            2 => ("/file.txt".into(), vec![("range", "bytes=2-5")], 206, FILE_TXT[2..6].to_vec()),
            3 => ("/missing".into(), vec![], 404, Vec::new()),
            k => (format!("/p{k}.txt"), vec![], 200, page(k as usize)),
        };
        requests.extend(frame(1, 5, id, &get_block(&path, &extra)));
        want.push((id, status, body));
    }
    s.write_all(&requests).unwrap();
    let mut got = responses(&mut s, 100, Duration::from_secs(60));
    for (id, status, body) in want {
        let (st, b, ended) = got.remove(&id).unwrap_or_else(|| panic!("no response on {id}"));
        assert!(ended, "stream {id} did not end");
        assert_eq!(st, status, "stream {id}");
        if status != 404 {
            assert!(b == body, "stream {id}: {} bytes, want {}", b.len(), body.len());
        }
    }
}

#[test]
fn nghttp_with_a_tiny_window_is_byte_exact() {
    if !have("nghttp") {
        return;
    }
    let srv = Server::start("");
    let big = big_file(srv.root());
    // A 15-byte stream window (2^4 - 1) and connection window: the server waits for every
    // WINDOW_UPDATE and still sends exact bytes.
    let o = run_program("nghttp", &["-w", "4", "-W", "4", &url(&srv, "/p9.txt")], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(o.stdout, page(9));
    let o = run_program("nghttp", &["-w", "14", &url(&srv, "/big.bin")], None);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout == big, "32 MiB with a 16 KiB window differs ({} bytes)", o.stdout.len());
    // -m: the same request 100 times at once on one connection.
    let o = run_program("nghttp", &["-n", "-s", "-m", "100", &url(&srv, "/file.txt")], None);
    assert_eq!(o.code, Some(0), "{o:?}");
    let n = o.stdout_text().lines().filter(|l| l.contains(" 200 ") && l.contains("/file.txt")).count();
    assert_eq!(n, 100, "{}", o.stdout_text());
}

#[test]
#[cfg(feature = "tls")]
fn tls_alpn_h2() {
    let srv = Server::builder()
        .setup(|dir, _| {
            let out = Command::new("openssl")
                .args(["req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-days", "30"])
                .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
                .arg("-keyout")
                .arg(dir.join("localhost.key"))
                .arg("-out")
                .arg(dir.join("localhost.crt"))
                .output()
                .expect("openssl runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        })
        .config("[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"{dir}/localhost.crt\"\nkey = \"{dir}/localhost.key\"")
        .start();
    let big = big_file(srv.root());
    let port = srv.tls_addr().port();
    let cacert = srv.dir().join("localhost.crt");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let get = |path: &str, extra: &[&str]| {
        let u = format!("https://localhost:{port}{path}");
        let mut args = vec!["--cacert", cacert.to_str().unwrap(), "--resolve", &resolve, "-o", "-", "-D", "-"];
        args.extend_from_slice(extra);
        args.push(&u);
        let o = curl(&args);
        assert_eq!(o.code, Some(0), "{o:?}");
        split_curl_dump(&o.stdout).unwrap()
    };
    let r = get("/file.txt", &["--http2"]);
    assert_eq!((r.version.as_str(), r.status, &r.body[..]), ("HTTP/2", 200, FILE_TXT));
    let r = get("/big.bin", &["--http2", "--max-time", "30"]);
    assert!(r.status == 200 && r.body == big, "32 MiB over TLS differs ({} bytes)", r.body.len());
    // A client that offers only http/1.1 still gets it.
    let r = get("/file.txt", &["--http1.1"]);
    assert_eq!((r.version.as_str(), r.status), ("HTTP/1.1", 200));
}

#[test]
fn disabled_http2_is_http1_only() {
    let srv = Server::start("[http2]\nenabled = false");
    let o = curl(&["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", &url(&srv, "/file.txt")]);
    // The preface is not a request: HTTP/1.1 answers it as one it cannot read, and curl
    // finds no HTTP/2 server.
    assert_ne!(o.stdout_text(), "200", "{o:?}");
    assert_eq!(srv.get("/file.txt").status, 200);
}

// ---------------------------------------------------------------------------------------------
// Hand-built frames (helpers in tests/common/h2.rs)
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bad_preface_closes() {
    let srv = Server::start("");
    // The preface, then not a SETTINGS frame.
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = PREFACE.to_vec();
    b.extend(frame(6, 0, 0, b"12345678"));
    s.write_all(&b).unwrap();
    expect_goaway(&mut s, PROTOCOL_ERROR);
    // A preface with its second half wrong is no HTTP/2 and no HTTP/1.1 either.
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    assert!(all.starts_with(b"HTTP/1.1 505") || all.starts_with(b"HTTP/1.1 400"), "{}", show(&all));
}

#[test]
fn data_on_stream_zero_is_a_connection_error() {
    let srv = Server::start("");
    let mut s = open(&srv, b"");
    s.write_all(&frame(0, 0, 0, b"x")).unwrap();
    expect_goaway(&mut s, PROTOCOL_ERROR);
}

#[test]
fn a_frame_too_large_is_a_connection_error() {
    let srv = Server::start("");
    let mut s = open(&srv, b"");
    s.write_all(&frame(0, 0, 1, &vec![0; 16_385])).unwrap();
    expect_goaway(&mut s, FRAME_SIZE_ERROR);
}

#[test]
fn an_uppercase_field_name_is_a_stream_error() {
    let srv = Server::start("");
    let mut s = open(&srv, b"");
    s.write_all(&frame(1, 5, 1, &get_block("/file.txt", &[("X-Upper", "1")]))).unwrap();
    // Then a good request on the same connection: it is answered.
    s.write_all(&frame(1, 5, 3, &get_block("/file.txt", &[]))).unwrap();
    let (frames, closed) = read_frames(&mut s, |f| f.0 == 0 && f.2 == 3 && f.1 & 1 != 0);
    assert!(!closed, "{frames:?}");
    let rst = frames.iter().find(|f| f.0 == RST_STREAM && f.2 == 1).unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(code(&rst.3, 0), PROTOCOL_ERROR);
    let body: Vec<u8> = frames.iter().filter(|f| f.0 == 0 && f.2 == 3).flat_map(|f| f.3.clone()).collect();
    assert_eq!(body, FILE_TXT);
    assert!(!frames.iter().any(|f| f.0 == GOAWAY), "{frames:?}");
}

#[test]
fn streams_past_the_limit_are_refused() {
    let srv = Server::start("[http2]\nmax_concurrent_streams = 1");
    big_file(srv.root());
    // An initial window of 0: the first response cannot send DATA, so its stream stays open.
    let mut s = open(&srv, b"\x00\x04\x00\x00\x00\x00");
    s.write_all(&frame(1, 5, 1, &get_block("/big.bin", &[]))).unwrap();
    s.write_all(&frame(1, 5, 3, &get_block("/file.txt", &[]))).unwrap();
    let mut seen = (false, false);
    let (frames, closed) = read_frames(&mut s, |f| {
        seen.0 |= f.0 == RST_STREAM;
        seen.1 |= f.0 == 1;
        seen == (true, true)
    });
    assert!(!closed, "{frames:?}");
    let rst = frames.iter().find(|f| f.0 == RST_STREAM).unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!((rst.2, code(&rst.3, 0)), (3, REFUSED_STREAM));
    // Stream 1 got its HEADERS and waits for a window.
    assert!(frames.iter().any(|f| f.0 == 1 && f.2 == 1), "{frames:?}");
    assert!(!frames.iter().any(|f| f.0 == 0), "DATA without a window: {frames:?}");
}

#[test]
fn sigterm_sends_goaway_and_finishes_streams() {
    let mut srv = Server::start("");
    // A window of 0 holds the response in flight: HEADERS out, no DATA yet.
    let mut s = open(&srv, b"\x00\x04\x00\x00\x00\x00");
    s.write_all(&frame(1, 5, 1, &get_block("/p9.txt", &[]))).unwrap();
    let (frames, _) = read_frames(&mut s, |f| f.0 == 1 && f.2 == 1);
    assert!(frames.iter().any(|f| f.0 == 1 && f.2 == 1), "{frames:?}");
    signal(srv.pid(), "TERM");
    // In two steps (RFC 9113 §6.8): 2^31-1 and a PING; once the PING is acknowledged, the
    // last stream.
    let (frames, closed) = read_frames(&mut s, |f| f.0 == 6);
    let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("no GOAWAY: {frames:?}"));
    assert_eq!((code(&g.3, 0), code(&g.3, 4), closed), (0x7fff_ffff, 0, false), "2^31-1, NO_ERROR");
    let ping = frames.iter().find(|f| f.0 == 6 && f.1 == 0).unwrap_or_else(|| panic!("no PING: {frames:?}"));
    s.write_all(&frame(6, 1, 0, &ping.3)).unwrap();
    let (frames, closed) = read_frames(&mut s, |f| f.0 == GOAWAY);
    let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("no second GOAWAY: {frames:?}"));
    assert_eq!((code(&g.3, 0), code(&g.3, 4), closed), (1, 0, false), "last stream 1, NO_ERROR");
    // Open the window: the stream finishes, then the connection closes.
    s.write_all(&frame(4, 0, 0, b"\x00\x04\x00\x00\xff\xff")).unwrap();
    let (frames, closed) = read_frames(&mut s, |_| false);
    let body: Vec<u8> = frames.iter().filter(|f| f.0 == 0 && f.2 == 1).flat_map(|f| f.3.clone()).collect();
    assert_eq!(body, page(9), "{frames:?}");
    assert!(closed, "open after the last stream");
    assert!(srv.terminate(Duration::from_secs(10)).is_some());
}

#[test]
fn streams_waiting_for_a_password_check_do_not_hold_the_others() {
    // `-g`: the root's .htpasswd protects everything; a password is verified off the loop
    // while its stream waits, and the other streams are answered meanwhile.
    let srv = Server::builder()
        .args(&["-g"])
        .setup(|_, root| {
            // `openssl passwd -crypt -salt xx password`
            fs::write(root.join(".htpasswd"), "alice:xxj31ZMTZzkVA\n").unwrap();
        })
        .start();
    let mut s = open(&srv, b"");
    // base64 of "alice:password" and "alice:wrong".
    let mut b = frame(1, 5, 1, &get_block("/file.txt", &[("authorization", "Basic YWxpY2U6cGFzc3dvcmQ=")]));
    b.extend(frame(1, 5, 3, &get_block("/p1.txt", &[])));
    b.extend(frame(1, 5, 5, &get_block("/p2.txt", &[("authorization", "Basic YWxpY2U6d3Jvbmc=")])));
    s.write_all(&b).unwrap();
    let got = responses(&mut s, 3, Duration::from_secs(10));
    assert_eq!(got.get(&3).map(|r| r.0), Some(401), "{got:?}");
    assert_eq!(got.get(&5).map(|r| r.0), Some(401), "{got:?}");
    let ok = got.get(&1).unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!((ok.0, &ok.1[..], ok.2), (200, FILE_TXT, true));
    let lines = srv.wait_access_log(3);
    assert!(lines.iter().any(|l| l.contains(" alice ") && l.contains("\"GET /file.txt HTTP/2.0\" 200")), "{lines:?}");
}

#[test]
fn a_large_download_does_not_hold_up_small_ones() {
    // A 32 MiB file (sent from its descriptor) and a 1 MiB one (mapped, its DATA spliced from
    // the mapping on h2c) asked first, with small files, on the same connection: the small
    // ones end long before the large ones, every frame within the 16 KiB DATA turn even though
    // the client accepts frames of 1 MiB, and every body is exact.
    let srv = Server::builder()
        .config("[cache]\nmax_file = 2097152\n")
        .setup(|_, root| fs::write(root.join("mid.bin"), pseudo_random_bytes(1 << 20, 3)).unwrap())
        .start();
    let big = big_file(srv.root());
    let mid = pseudo_random_bytes(1 << 20, 3);
    // SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE at their largest and 1 MiB.
    let mut s = open(&srv, b"\x00\x04\x7f\xff\xff\xff\x00\x05\x00\x10\x00\x00");
    s.write_all(&frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes())).unwrap();
    // All six in one write, so they arrive together (apart, a loaded machine can delay the
    // small ones until mid.bin is sent).
    let mut req = frame(1, 5, 1, &get_block("/big.bin", &[]));
    req.extend(frame(1, 5, 3, &get_block("/mid.bin", &[])));
    for (i, id) in [5u32, 7, 9, 11].into_iter().enumerate() {
        req.extend(frame(1, 5, id, &get_block(&format!("/p{}.txt", i + 4), &[])));
    }
    s.write_all(&req).unwrap();
    let mut order = Vec::new();
    let mut largest = 0;
    let mut bodies: HashMap<u32, Vec<u8>> = HashMap::new();
    let (_, closed) = read_frames_for(&mut s, Duration::from_secs(60), |f| {
        if f.0 == 0 {
            largest = largest.max(f.3.len());
            bodies.entry(f.2).or_default().extend_from_slice(&f.3);
        }
        if f.2 != 0 && f.1 & 1 != 0 {
            order.push(f.2);
        }
        order.len() == 6
    });
    assert!(!closed && order.len() == 6, "ended: {order:?}");
    let last_small = order.iter().rposition(|id| *id >= 5).unwrap();
    let first_large = order.iter().position(|id| *id < 5).unwrap();
    assert!(last_small < first_large, "streams ended in the order {order:?}");
    assert!(largest <= 16_384, "a DATA frame of {largest} bytes");
    assert!(bodies[&1] == big, "big.bin: {} bytes", bodies[&1].len());
    assert!(bodies[&3] == mid, "mid.bin: {} bytes", bodies[&3].len());
    for (i, id) in [5u32, 7, 9, 11].into_iter().enumerate() {
        assert!(bodies[&id] == page(i + 4), "p{}.txt", i + 4);
    }
}

#[test]
fn a_graceful_end_lets_a_slow_reader_read_all_that_was_sent() {
    // When its last stream is done the connection ends, but much of what was written may
    // still be queued in the kernels while the client reads on and acknowledges each part
    // with WINDOW_UPDATE. Closing under those frames resets the connection, and the reset
    // throws away what is still queued: the server must linger until the client is done.
    let srv = Server::start("");
    let big = big_file(srv.root());
    // 16 MiB windows, as a browser's: the server writes ahead of the reader.
    let window: u32 = 16 << 20;
    let mut s = open(&srv, &[&[0, 4][..], &window.to_be_bytes()].concat());
    let mut first = frame(8, 0, 0, &(window - 65_535).to_be_bytes());
    first.extend(frame(1, 5, 1, &get_block("/big.bin", &[])));
    s.write_all(&first).unwrap();
    signal(srv.pid(), "HUP");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut buf, mut body, mut chunk) = (Vec::new(), Vec::new(), vec![0; 64 * 1024]);
    let mut ended = false;
    // Bounded: the body is 512 reads of 64 KiB.
    for _ in 0..100_000 {
        let n = match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => panic!("after {} of {} bytes: {e}", body.len(), big.len()),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut answer = Vec::new();
        let mut at = 0;
        while buf.len() - at >= 9 {
            let len = usize::from(buf[at]) << 16 | usize::from(buf[at + 1]) << 8 | usize::from(buf[at + 2]);
            if buf.len() - at < 9 + len {
                break;
            }
            let (kind, flags) = (buf[at + 3], buf[at + 4]);
            let payload = &buf[at + 9..at + 9 + len];
            match kind {
                0 => {
                    let pad = if flags & 8 != 0 { usize::from(payload[0]) + 1 } else { 0 };
                    body.extend_from_slice(&payload[usize::from(pad > 0)..len + usize::from(pad > 0) - pad]);
                    ended |= flags & 1 != 0;
                    let got = u32::try_from(len).unwrap();
                    if got > 0 {
                        answer.extend(frame(8, 0, 0, &got.to_be_bytes()));
                        answer.extend(frame(8, 0, 1, &got.to_be_bytes()));
                    }
                }
                // The graceful end's PING, acknowledged so that it goes on at once.
                6 if flags & 1 == 0 => answer.extend(frame(6, 1, 0, payload)),
                _ => {}
            }
            at += 9 + len;
        }
        buf.drain(..at);
        if !answer.is_empty() {
            s.write_all(&answer).unwrap_or_else(|e| panic!("after {} bytes: {e}", body.len()));
        }
        thread::sleep(Duration::from_millis(2));
    }
    assert!(ended && body.len() == big.len(), "{} of {} bytes, END_STREAM {ended}", body.len(), big.len());
    assert!(body == big, "the body differs");
}

/// The fields of each HEADERS frame among `frames`, in order, decoded with `dec` (the
/// connection's decoder), with whether the block began with a dynamic table size update.
fn header_lists(dec: &mut ferrohttpd::h2::hpack::Decoder, frames: &[RawFrame]) -> Vec<(Vec<(String, String)>, bool)> {
    let mut lists = Vec::new();
    for f in frames.iter().filter(|f| f.0 == 1) {
        let mut fields = Vec::new();
        dec.decode(&f.3, 1 << 20, |n, v, _| {
            fields.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()));
            Ok::<(), ()>(())
        })
        .unwrap_or_else(|e| panic!("undecodable response block {:?}: {e:?}", f.3));
        lists.push((fields, f.3.first().is_some_and(|b| b & 0xe0 == 0x20)));
    }
    lists
}

/// A head sent again is copied from the connection's last encoding of it (while the encoder's
/// table is as it was): every copy decodes to the same fields, and a change of the table's
/// size by the client (SETTINGS_HEADER_TABLE_SIZE) is not answered with a stale copy, which
/// would refer to entries the client has evicted.
#[test]
fn repeated_heads_decode_the_same_across_a_table_size_change() {
    let srv = Server::start("");
    let mut s = open(&srv, b"");
    let mut dec = ferrohttpd::h2::hpack::Decoder::new(4096);
    let mut fetch = |s: &mut TcpStream, id: u32, path: &str| {
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block(path, &[]))).unwrap();
        let (frames, closed) = read_frames(s, |f| f.0 == DATA && f.2 == id && f.1 & END_STREAM != 0);
        assert!(!closed, "{frames:?}");
        let body: Vec<u8> = frames.iter().filter(|f| f.0 == DATA && f.2 == id).flat_map(|f| f.3.clone()).collect();
        let mut lists = header_lists(&mut dec, &frames);
        assert_eq!(lists.len(), 1, "{frames:?}");
        (lists.remove(0), body)
    };
    let without_date = |l: &[(String, String)]| l.iter().filter(|(n, _)| n != "date").cloned().collect::<Vec<_>>();
    let ((first, _), body) = fetch(&mut s, 1, "/file.txt");
    assert_eq!(body, FILE_TXT);
    assert_eq!(first[0], (":status".to_string(), "200".to_string()));
    let mut id = 3;
    for path in ["/file.txt", "/file.txt", "/file.txt", "/style.css", "/file.txt", "/file.txt"] {
        let ((fields, _), body) = fetch(&mut s, id, path);
        id += 2;
        if path == "/file.txt" {
            assert_eq!(body, FILE_TXT);
            assert_eq!(without_date(&fields), without_date(&first));
        }
    }
    // The client's decoder table goes to 0 bytes: the next block must start by saying so,
    // and refer to no dynamic entry.
    s.write_all(&frame(SETTINGS, 0, 0, &[0, 1, 0, 0, 0, 0])).unwrap();
    let (frames, _) = read_frames(&mut s, |f| f.0 == SETTINGS && f.1 == 1);
    assert!(frames.iter().any(|f| f.0 == SETTINGS && f.1 == 1), "{frames:?}");
    for k in 0..3 {
        let ((fields, update), body) = fetch(&mut s, id, "/file.txt");
        id += 2;
        assert_eq!(body, FILE_TXT);
        assert_eq!(without_date(&fields), without_date(&first));
        assert_eq!(update, k == 0, "a table size update begins the first block after the change only");
    }
}

/// A file above `[cache] max_file` (which HTTP/1.1 sends with sendfile) goes out over h2c
/// from a mapping made for it, not read with `pread`; and when it is truncated while being
/// sent, the connection closes: the client never gets bytes the file no longer has.
#[test]
fn fd_backed_files_go_out_over_h2c_from_a_mapping_and_a_truncation_closes() {
    let mid = pseudo_random_bytes(1 << 20, 21);
    let long = pseudo_random_bytes(4 << 20, 22);
    let srv = Server::builder()
        .setup(|_, root| {
            fs::write(root.join("mid.bin"), pseudo_random_bytes(1 << 20, 21)).unwrap();
            fs::write(root.join("long.bin"), pseudo_random_bytes(4 << 20, 22)).unwrap();
        })
        .start();
    let mut s = open(&srv, b"\x00\x04\x7f\xff\xff\xff");
    s.write_all(&frame(WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes())).unwrap();
    let before = srv.io("rchar");
    let requests: Vec<u8> =
        [1u32, 3, 5].iter().flat_map(|&id| frame(HEADERS, 5, id, &get_block("/mid.bin", &[]))).collect();
    s.write_all(&requests).unwrap();
    let got = responses(&mut s, 3, Duration::from_secs(30));
    for id in [1, 3, 5] {
        let (status, body, ended) = &got[&id];
        assert!(*status == 200 && *ended && *body == mid, "stream {id}: {status}, {} bytes", body.len());
    }
    let read = srv.io("rchar") - before;
    assert!(read < 256 * 1024, "3 MiB sent, {read} bytes read by the server: not from a mapping");

    // The default window: 65,535 bytes go out, then the stream waits; the file is truncated
    // meanwhile, then the window opens.
    let mut s = open(&srv, b"");
    s.write_all(&frame(HEADERS, 5, 1, &get_block("/long.bin", &[]))).unwrap();
    let (frames, closed) = read_frames(&mut s, |f| f.0 == DATA && f.3.len() < 16_384);
    assert!(!closed, "{} frames", frames.len());
    let mut body: Vec<u8> = frames.iter().filter(|f| f.0 == DATA && f.2 == 1).flat_map(|f| f.3.clone()).collect();
    assert_eq!(body.len(), 65_535);
    fs::OpenOptions::new().write(true).open(srv.root().join("long.bin")).unwrap().set_len(0).unwrap();
    let more = (8u32 << 20).to_be_bytes();
    let mut updates = frame(WINDOW_UPDATE, 0, 0, &more);
    updates.extend(frame(WINDOW_UPDATE, 0, 1, &more));
    s.write_all(&updates).unwrap();
    let (frames, closed) = read_frames_for(&mut s, Duration::from_secs(10), |f| f.0 == DATA && f.1 & END_STREAM != 0);
    body.extend(frames.iter().filter(|f| f.0 == DATA && f.2 == 1).flat_map(|f| f.3.clone()));
    let ended = frames.iter().any(|f| f.0 == DATA && f.1 & END_STREAM != 0);
    assert!(!ended, "the stream ended as if complete, {} bytes", body.len());
    assert!(closed || frames.iter().any(|f| f.0 == RST_STREAM || f.0 == GOAWAY), "neither closed nor reset");
    assert!(
        body.len() < long.len() && body[..] == long[..body.len()],
        "{} bytes, not a prefix of the file",
        body.len()
    );
}

/// An idle HTTP/2 connection holds its session state, not its buffers: 300 connections that
/// each fetched a file and went quiet cost well under the 32 KiB read buffer each (about 7
/// KiB measured; a buffer kept per connection made it 35 KiB).
#[test]
fn idle_connections_give_back_their_buffers() {
    let srv = Server::start("");
    let before = srv.status_kb("VmRSS");
    let mut conns = Vec::new();
    for _ in 0..300 {
        let mut s = open(&srv, b"");
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block("/file.txt", &[]))).unwrap();
        let got = responses(&mut s, 1, Duration::from_secs(10));
        assert_eq!(got.get(&1).map(|r| r.0), Some(200));
        conns.push(s);
    }
    thread::sleep(Duration::from_millis(1000));
    let per = (srv.status_kb("VmRSS").saturating_sub(before)) * 1024 / 300;
    assert!(per < 16 * 1024, "{per} bytes of RSS per idle connection");
}
