//! The invariants of DESIGN.md under hostile or unlucky clients: files truncated while being
//! sent, clients that stop reading or vanish, connection and descriptor limits, memory under
//! pipelining, and random input. Every test also fails if the server process dies.

mod common;

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

/// 256 MiB: more than the loopback socket buffers can hold, so the server is still sending
/// when the test acts. Sparse, so it costs no disk.
const HUGE: u64 = 256 << 20;

fn sparse_file(root: &std::path::Path, name: &str, len: u64) {
    let f = fs::File::create(root.join(name)).unwrap();
    f.set_len(len).unwrap();
}

/// Reads until EOF/reset; Ok(total bytes) or Err if still open after `limit`.
fn drain(s: &mut TcpStream, limit: Duration) -> Result<u64, String> {
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!("still open after {limit:?}, {total} bytes read"));
        }
        s.set_read_timeout(Some(left.min(IO_TIMEOUT))).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(total),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("read error {e} after {total} bytes")),
        }
    }
}

/// Reads the head of a response and `n` body bytes.
fn start_big_download(s: &mut TcpStream, path: &str, n: usize) -> Response {
    raw(s, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"));
    let r = try_read_response(s, true).unwrap();
    let mut first = vec![0u8; n];
    s.read_exact(&mut first).unwrap();
    r
}

/// Truncates a file of `HUGE` bytes to 1000 while it is being sent: the connection closes
/// short of it, and the server lives on. `staged`: the bytes are read with `pread` and sent
/// with `sendmsg`, not spliced by `sendfile`.
fn truncated_while_sending(extra: &str, staged: bool) {
    let srv = Server::builder().config(extra).setup(|_, root| sparse_file(root, "huge.bin", HUGE)).start();
    let mut s = srv.connect();
    let before = srv.io_counts();
    let r = start_big_download(&mut s, "/huge.bin", 1 << 20);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Content-Length"), Some(HUGE.to_string().as_str()));
    if staged {
        let seen = srv.body_path_since(before, 1 << 20);
        assert_eq!(
            seen,
            Some(BodyPath::Staged),
            "{extra:?}: {before:?} read and written before, {:?} after the first MiB",
            srv.io_counts()
        );
    }
    fs::File::options().write(true).open(srv.root().join("huge.bin")).unwrap().set_len(1000).unwrap();
    let got = drain(&mut s, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the connection did not close after truncation: {e}"));
    assert!(got + (1 << 20) < HUGE, "the server sent {got} more bytes of a file truncated to 1000 bytes");
    // The server survived (no SIGBUS) and serves the file's new content.
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    let r = srv.get("/huge.bin");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body.len(), 1000, "stale entry after truncation: {r:?}");
}

#[test]
fn file_truncated_while_sent_with_sendfile() {
    truncated_while_sending("sendfile = true\nloopback_copy = false", false);
}

/// The default to 127.0.0.1: a body of 2 MiB or more takes the staged copy (`pread` into a
/// buffer, then `sendmsg`) even with `sendfile` on.
#[test]
fn file_truncated_while_sent_by_the_loopback_copy() {
    truncated_while_sending("", true);
}

/// Through a staging buffer: a short `pread` is sent, the next, empty, one closes the
/// connection.
#[test]
fn file_truncated_while_sent_without_sendfile() {
    truncated_while_sending("sendfile = false", true);
}

#[test]
fn client_that_stops_reading_is_abandoned_after_send_timeout() {
    let srv = Server::builder()
        .config("[http]\nsend_timeout = \"1s\"")
        .setup(|_, root| sparse_file(root, "huge.bin", HUGE))
        .start();
    let mut s = srv.connect();
    let r = start_big_download(&mut s, "/huge.bin", 4096);
    assert_eq!(r.status, 200, "{r:?}");
    sleep(Duration::from_secs(4));
    let got =
        drain(&mut s, Duration::from_secs(10)).unwrap_or_else(|e| panic!("a stalled response was not abandoned: {e}"));
    assert!(got + 4096 < HUGE, "the whole file was sent ({got} bytes)");
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn client_vanishing_mid_response_does_not_hurt_the_server() {
    let srv = Server::builder().setup(|_, root| sparse_file(root, "huge.bin", HUGE)).start();
    for (path, n) in [("/huge.bin", 100), ("/huge.bin", 1 << 20), ("/p9.txt", 10)] {
        let mut s = srv.connect();
        let r = start_big_download(&mut s, path, n);
        assert_eq!(r.status, 200, "{r:?}");
        drop(s); // unread data: the kernel sends RST; the server gets EPIPE/ECONNRESET.
    }
    sleep(Duration::from_millis(300));
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
}

#[test]
fn pipelined_large_responses_keep_memory_bounded() {
    const N: usize = 40;
    let body = pseudo_random_bytes(1 << 20, 3);
    let b = body.clone();
    let srv = Server::builder()
        .config("sendfile = false")
        .setup(move |_, root| fs::write(root.join("mib.bin"), &b).unwrap())
        .start();
    let base = srv.status_kb("RssAnon");
    let mut s = srv.connect();
    let reqs: String = (0..N).map(|_| "GET /mib.bin HTTP/1.1\r\nHost: x\r\n\r\n").collect();
    raw(&mut s, reqs);
    sleep(Duration::from_millis(1000));
    let grown = srv.status_kb("RssAnon").saturating_sub(base);
    assert!(grown < 16 * 1024, "anonymous memory grew by {grown} kB with {N} pipelined 1 MiB responses unread");
    for i in 0..N {
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "response {i}: {r:?}");
        assert!(r.body == body, "response {i}: body differs");
    }
}

#[test]
fn many_concurrent_connections() {
    let srv = Server::start("");
    let mut conns: Vec<TcpStream> = (0..300).map(|_| srv.connect()).collect();
    for (i, s) in conns.iter_mut().enumerate() {
        raw(s, format!("GET /p{}.txt HTTP/1.1\r\nHost: x\r\n\r\n", i % PAGES));
    }
    for (i, s) in conns.iter_mut().enumerate() {
        let r = read_response(s);
        assert_eq!(r.status, 200, "connection {i}: {r:?}");
        assert_eq!(r.body, page(i % PAGES), "connection {i}");
    }
}

#[test]
fn max_connections_closes_the_excess_at_once() {
    let srv = Server::start("max_connections = 4");
    let mut held: Vec<TcpStream> = (0..4).map(|_| srv.connect()).collect();
    for s in held.iter_mut() {
        raw(s, "GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = read_response(s);
        assert_eq!(r.status, 200, "{r:?}");
    }
    let mut extra = srv.connect();
    let _ = extra.write_all(b"GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 4096];
    extra.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    match extra.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 503") => {}
        other => panic!(
            "a 5th connection with max_connections = 4 was not closed at once: {:?}",
            other.map(|n| show(&buf[..n]))
        ),
    }
    // The held connections still work; after one closes, a new one is served.
    check_still_open(&mut held[0]).unwrap();
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut s = srv.connect();
        let _ = s.write_all(b"GET /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        match try_read_response(&mut s, false) {
            Ok(r) => {
                assert_eq!(r.status, 200, "{r:?}");
                assert_eq!(r.body, page(1));
                break;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("no connection slot came free after a client left: {e}"),
        }
    }
}

#[test]
fn out_of_file_descriptors_neither_dies_nor_spins() {
    let srv = Server::builder().wrap(&["prlimit", "--nofile=48:48", "--"]).start();
    // More connections than descriptors.
    let conns: Vec<TcpStream> = (0..80).map(|_| srv.connect()).collect();
    sleep(Duration::from_millis(500));
    let cpu0 = srv.cpu_time();
    sleep(Duration::from_millis(1500));
    let used = srv.cpu_time().saturating_sub(cpu0);
    assert!(used < Duration::from_millis(500), "the server burned {used:?} of CPU in 1.5 s while out of descriptors");
    drop(conns);
    // It recovers: a request is served within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.write_all(b"GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        match try_read_response(&mut s, false) {
            Ok(r) if r.status == 200 && r.body == FILE_TXT => break,
            res if Instant::now() >= deadline => {
                panic!("not serving again after descriptors came free: {res:?}")
            }
            _ => sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn garbage_input_gets_400_or_close_and_the_server_lives() {
    let srv = Server::start("");
    let inputs: Vec<Vec<u8>> = vec![
        vec![0u8; 100],
        (0..=255u8).collect(),
        b"\r\n\r\n\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\x00\r\n\r\n".to_vec(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(), // a TLS ClientHello
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        pseudo_random_bytes(20000, 11),
    ];
    for input in &inputs {
        let mut s = srv.connect();
        raw_lenient(&mut s, input);
        let _ = s.shutdown(Shutdown::Write);
        let mut out = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let res = s.read_to_end(&mut out);
        if let Err(e) = res {
            assert!(
                e.kind() == ErrorKind::ConnectionReset,
                "input \"{}\": no close within 3 s ({e}); got \"{}\"",
                show(input),
                show(&out)
            );
        }
        // The HTTP/2 preface is no garbage to a server that speaks HTTP/2 (h2c): its SETTINGS
        // come back, then the close at the client's end.
        let h2_settings = cfg!(feature = "http2")
            && input.starts_with(b"PRI * HTTP/2.0")
            && out.len() >= 9
            && out[3] == 4
            && out[5..9] == [0; 4];
        assert!(
            out.is_empty() || out.starts_with(b"HTTP/1.1 4") || out.starts_with(b"HTTP/1.1 5") || h2_settings,
            "input \"{}\": got \"{}\"",
            show(input),
            show(&out)
        );
    }
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn random_requests_never_crash_or_leak() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    const VOCAB: &[&str] = &[
        "GET",
        "HEAD",
        "OPTIONS",
        "POST",
        "BREW",
        " ",
        "  ",
        "/",
        "//",
        "..",
        "../",
        "%2e",
        "%2f",
        "%",
        "%00",
        "%ff",
        "%5c",
        "\\",
        "?",
        "#",
        "*",
        "\r\n",
        "\r",
        "\n",
        "\t",
        ":",
        "\"",
        "HTTP/1.1",
        "HTTP/1.0",
        "HTTP/2.0",
        "Host: x",
        "Host:",
        "Content-Length: ",
        "Transfer-Encoding: chunked",
        "Connection: close",
        "Connection: keep-alive",
        "Expect: 100-continue",
        "0",
        "5",
        "-1",
        "ffffffffffffffffffff",
        "a",
        "secret.txt",
        "file.txt",
        "dir",
        "link-out.txt",
        ".git",
        "\r\n\r\n",
        "http://127.0.0.1",
    ];
    let piece = prop_oneof![
        3 => proptest::sample::select(VOCAB).prop_map(|s| s.as_bytes().to_vec()),
        1 => any::<u8>().prop_map(|b| vec![b]),
    ];
    let strategy = (
        proptest::sample::select(&["GET /", "HEAD /", "GET ", "", "OPTIONS "][..]),
        prop::collection::vec(piece, 0..30),
        proptest::sample::select(&["\r\n\r\n", " HTTP/1.1\r\nHost: x\r\n\r\n", ""][..]),
    )
        .prop_map(|(pre, mid, post)| {
            let mut v = pre.as_bytes().to_vec();
            mid.into_iter().for_each(|p| v.extend(p));
            v.extend_from_slice(post.as_bytes());
            v
        });

    let srv = Server::start("[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"");
    let addr = srv.addr();
    let mut runner =
        TestRunner::new(Config { cases: 250, failure_persistence: None, max_shrink_iters: 200, ..Config::default() });
    let result = runner.run(&strategy, |input| {
        let mut s = connect(addr);
        raw_lenient(&mut s, &input);
        let _ = s.shutdown(Shutdown::Write);
        let mut out = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
        match s.read_to_end(&mut out) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => {
                return Err(TestCaseError::fail(format!(
                    "no close within 4 s of a half-close ({e}); got \"{}\"",
                    show(&out)
                )))
            }
        }
        prop_assert!(
            !out.windows(SECRET_MARKER.len()).any(|w| w == SECRET_MARKER),
            "served the secret: \"{}\"",
            show(&out)
        );
        prop_assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 "), "not an HTTP/1.1 response: \"{}\"", show(&out));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let r = srv.get("/file.txt");
    assert_eq!(r.status, 200, "{r:?}");
}
