//! Every request the server read gets exactly one access-log line and one status count,
//! however it ended (issue 38): completed (`tests/accesslog.rs`), the client gone mid-body
//! (closed, or an HTTP/2 stream reset), cut by `send_timeout` or by the end of
//! `shutdown_timeout`, and 499 for a request whose client left before its response started.
//! HTTP/1.1 and HTTP/2 (h2c), the real binary over real sockets.
//!
//! Byte counts are bounded, not guessed: at least what the client read, at most what the
//! kernel's socket buffers could hold on top (HTTP/1.1: below the file's size, which is far
//! larger than any loopback buffer), or, over HTTP/2, at most the 65,535 bytes of the initial
//! flow-control window the client never opens further.

mod common;

use std::fs;
use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// The large file: sparse, far larger than what loopback sockets buffer.
const BIG: u64 = 256 << 20;
const BIG_REQUEST: &str = "GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n";
const STATUS: &str = "[status]\nenabled = true\npath = \"/.status\"";

fn big_server(extra: &str) -> Server {
    Server::builder()
        .config(extra)
        .setup(|_, root| fs::File::create(root.join("big.bin")).unwrap().set_len(BIG).unwrap())
        .start()
}

/// The lines of the access log once `n` are there (waiting up to `limit`), checked to stay
/// `n`: no second line for the same request turns up after the first was flushed.
fn exactly(srv: &Server, n: usize, limit: Duration) -> Vec<LogLine> {
    let lines = wait_for_lines(&srv.access_log_path(), n, limit);
    assert_eq!(lines.len(), n, "{lines:?}");
    // The log is flushed within a second: a duplicate would show by then.
    thread::sleep(Duration::from_millis(1300));
    parse_log(&srv.access_log_path(), n)
}

fn parse_log(path: &Path, n: usize) -> Vec<LogLine> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), n, "{lines:?}");
    lines.iter().map(|l| parse_combined(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect()
}

fn bytes(l: &LogLine) -> u64 {
    l.bytes.parse().unwrap_or_else(|_| panic!("bytes {:?}", l.bytes))
}

/// One status-page counter, by its line in the text format.
fn counter(srv: &Server, name: &str) -> u64 {
    let page = srv.get("/.status").body_text();
    let line = page.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).unwrap_or_else(|| panic!("{page}"));
    line.parse().unwrap()
}

/// Sends the request for the big file, reads its head and `n` body bytes; returns the socket
/// and the body bytes read (the head reader may have taken a few more than `n`: counted).
fn start_download(srv: &Server, n: usize) -> (TcpStream, u64) {
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw(&mut s, BIG_REQUEST);
    let r = try_read_response(&mut s, true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let mut part = vec![0u8; n];
    s.read_exact(&mut part).unwrap();
    (s, n as u64)
}

/// A reset, not a FIN: the client's kernel discards what it still buffers.
fn reset(s: TcpStream) {
    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
    drop(s);
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1
// ---------------------------------------------------------------------------------------------

#[test]
fn h1_client_closing_mid_body_is_logged_with_the_bytes_sent() {
    let srv = big_server(STATUS);
    let (s, read) = start_download(&srv, 1 << 20);
    // Closed with bytes unread: a reset reaches the server, whose next send fails.
    drop(s);
    let lines = exactly(&srv, 1, Duration::from_secs(10));
    let l = &lines[0];
    assert_eq!((l.request.as_str(), l.status), ("GET /big.bin HTTP/1.1", 200), "{l:?}");
    assert!(bytes(l) >= read && bytes(l) < BIG, "logged {} bytes, read {read} of {BIG}", l.bytes);
    // Counted as a 2xx response, and as aborted (the status page's own request is counted
    // after its page is rendered).
    assert_eq!(counter(&srv, "requests_aborted"), 1);
    assert_eq!(counter(&srv, "responses_2xx"), 2);
}

#[test]
fn h1_transfer_cut_by_send_timeout_is_logged() {
    let srv = big_server("[http]\nsend_timeout = \"1s\"");
    // The client reads 64 KiB, then nothing: no progress, closed after send_timeout.
    let (s, read) = start_download(&srv, 64 << 10);
    let lines = exactly(&srv, 1, Duration::from_secs(10));
    let l = &lines[0];
    assert_eq!((l.request.as_str(), l.status), ("GET /big.bin HTTP/1.1", 200), "{l:?}");
    assert!(bytes(l) >= read && bytes(l) < BIG, "logged {} bytes, read {read} of {BIG}", l.bytes);
    drop(s);
}

#[test]
fn h1_transfer_cut_by_shutdown_timeout_is_logged() {
    let mut srv = big_server("shutdown_timeout = \"1s\"\n[http]\nsend_timeout = \"60s\"");
    let (s, read) = start_download(&srv, 64 << 10);
    let status = srv.terminate(Duration::from_secs(8)).expect("no exit within 8 s of SIGTERM");
    assert_eq!(status.code(), Some(0), "{status}");
    // Written before the exit: no waiting.
    let lines = parse_log(&srv.access_log_path(), 1);
    let l = &lines[0];
    assert_eq!((l.request.as_str(), l.status), ("GET /big.bin HTTP/1.1", 200), "{l:?}");
    assert!(bytes(l) >= read && bytes(l) < BIG, "logged {} bytes, read {read} of {BIG}", l.bytes);
    drop(s);
}

/// A SHA-512 crypt hash of 100,000 rounds: each verification takes a while (about 1 s in
/// a debug build, 0.1 s in a release one), whatever the password (here: a wrong one, so the
/// answer would be 401).
const SLOW_HTPASSWD: &str = "joe:$6$rounds=100000$abcdefgh$u4RmsweQ2xX6w8SFOqTdQGmwssYunilOubtduSn3YOox8mis0O18/bZzOQgWRIMFLJsFXX1CXzVUxyxsISW5R.\n";

fn slow_auth_server() -> Server {
    Server::builder()
        .config("[[auth]]\npath = \"/private/\"\nhtpasswd = \"{dir}/htpasswd\"\n[status]\nenabled = true\npath = \"/.status\"")
        .setup(|dir, root| {
            fs::write(dir.join("htpasswd"), SLOW_HTPASSWD).unwrap();
            fs::create_dir_all(root.join("private")).unwrap();
            fs::write(root.join("private/x.txt"), "x\n").unwrap();
        })
        .start()
}

/// Waits until the server has started `n` password verifications (it has read the request).
fn wait_verifications(srv: &Server, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while counter(srv, "auth_verifications") < n {
        assert!(Instant::now() < deadline, "the verification never started");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn h1_client_gone_before_the_response_started_is_logged_499() {
    let srv = slow_auth_server();
    let mut s = srv.connect();
    // joe:wrong
    raw(&mut s, "GET /private/x.txt HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic am9lOndyb25n\r\n\r\n");
    // Paused while the password is verified; the client resets meanwhile.
    wait_verifications(&srv, 1);
    reset(s);
    // The status page's requests are logged too.
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let lines = wait_for_lines(&srv.access_log_path(), 0, Duration::ZERO);
        if let Some(l) = lines.iter().find(|l| l.contains("/private/x.txt")) {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "no line for the request: {lines:?}");
        thread::sleep(Duration::from_millis(50));
    };
    let l = parse_combined(&line).unwrap();
    assert_eq!((l.request.as_str(), l.status, l.bytes.as_str()), ("GET /private/x.txt HTTP/1.1", 499, "0"), "{line}");
    thread::sleep(Duration::from_millis(1300));
    let text = fs::read_to_string(srv.access_log_path()).unwrap();
    assert_eq!(text.matches("/private/x.txt").count(), 1, "{text}");
    assert_eq!(counter(&srv, "requests_aborted"), 1);
    assert_eq!(counter(&srv, "responses_4xx"), 1);
}

// ---------------------------------------------------------------------------------------------
// HTTP/2
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "http2")]
mod h2 {
    use super::common::h2::*;
    use super::*;
    use std::io::Write;

    /// The initial flow-control window the client never opens further.
    const WINDOW: u64 = 65_535;
    const CANCEL: u32 = 8;

    /// Opens an h2c connection, asks for the big file on stream 1 and reads its body until
    /// the window is used up (the server then has nothing more to send: the frames read
    /// next start on a frame boundary); returns the socket and the body bytes read.
    fn start_download(srv: &Server) -> (TcpStream, u64) {
        let n = WINDOW as usize;
        let mut s = open(srv, b"");
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block("/big.bin", &[]))).unwrap();
        let mut got = 0;
        let (frames, closed) = read_frames(&mut s, |f| {
            if f.0 == DATA && f.2 == 1 {
                got += f.3.len();
            }
            got >= n
        });
        assert!(!closed && got >= n, "read {got} body bytes: {frames:?}");
        (s, got as u64)
    }

    fn big_line(srv: &Server, n: usize, limit: Duration) -> LogLine {
        let lines = exactly(srv, n, limit);
        let mut big = lines.into_iter().filter(|l| l.request.contains("/big.bin"));
        let l = big.next().expect("no line for /big.bin");
        assert!(big.next().is_none(), "two lines for /big.bin");
        l
    }

    fn check(l: &LogLine, read: u64) {
        assert_eq!((l.request.as_str(), l.status), ("GET /big.bin HTTP/2.0", 200), "{l:?}");
        assert!(bytes(l) >= read && bytes(l) <= WINDOW, "logged {} bytes, read {read}", l.bytes);
    }

    #[test]
    fn h2_stream_reset_mid_body_is_logged_with_the_bytes_sent() {
        let srv = big_server(STATUS);
        let (mut s, read) = start_download(&srv);
        s.write_all(&frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes())).unwrap();
        // The connection goes on: another stream is answered (in the connection's window,
        // which stream 1 used up, opened again).
        s.write_all(&frame(WINDOW_UPDATE, 0, 0, &(1u32 << 20).to_be_bytes())).unwrap();
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &get_block("/file.txt", &[]))).unwrap();
        let (frames, _) = read_frames(&mut s, |f| f.2 == 3 && f.1 & END_STREAM != 0);
        assert!(frames.iter().any(|f| f.2 == 3 && f.1 & END_STREAM != 0), "{frames:?}");
        let l = big_line(&srv, 2, Duration::from_secs(5));
        check(&l, read);
        assert_eq!(counter(&srv, "requests_aborted"), 1);
        assert_eq!(counter(&srv, "requests_http2"), 2);
        drop(s);
    }

    #[test]
    fn h2_connection_closed_mid_body_is_logged_with_the_bytes_sent() {
        let srv = big_server(STATUS);
        let (s, read) = start_download(&srv);
        drop(s);
        check(&big_line(&srv, 1, Duration::from_secs(5)), read);
        assert_eq!(counter(&srv, "requests_aborted"), 1);
        // And the status page's request before this one.
        assert_eq!(counter(&srv, "responses_2xx"), 2);
    }

    #[test]
    fn h2_stream_cut_by_send_timeout_is_logged() {
        let srv = big_server("[http]\nsend_timeout = \"1s\"");
        // The window is used up and never opened again: no progress.
        let (s, read) = start_download(&srv);
        check(&big_line(&srv, 1, Duration::from_secs(10)), read);
        drop(s);
    }

    #[test]
    fn h2_stream_cut_by_shutdown_timeout_is_logged() {
        let mut srv = big_server("shutdown_timeout = \"1s\"\n[http]\nsend_timeout = \"60s\"");
        let (s, read) = start_download(&srv);
        let status = srv.terminate(Duration::from_secs(8)).expect("no exit within 8 s of SIGTERM");
        assert_eq!(status.code(), Some(0), "{status}");
        let lines = parse_log(&srv.access_log_path(), 1);
        check(&lines[0], read);
        drop(s);
    }

    #[test]
    fn h2_request_reset_before_it_was_answered_is_logged_499() {
        let srv = Server::start(STATUS);
        let mut s = open(&srv, b"");
        // HEADERS and RST_STREAM in one write: read together, the request is not answered.
        let mut both = frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block("/file.txt", &[]));
        both.extend(frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()));
        s.write_all(&both).unwrap();
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &get_block("/index.html", &[]))).unwrap();
        let (frames, _) = read_frames(&mut s, |f| f.2 == 3 && f.1 & END_STREAM != 0);
        assert!(!frames.iter().any(|f| f.2 == 1), "stream 1 was answered: {frames:?}");
        let lines = exactly(&srv, 2, Duration::from_secs(5));
        let l = lines.iter().find(|l| l.request.contains("/file.txt")).expect("no line for stream 1");
        assert_eq!((l.request.as_str(), l.status, l.bytes.as_str()), ("GET /file.txt HTTP/2.0", 499, "0"), "{l:?}");
        assert_eq!(counter(&srv, "requests_aborted"), 1);
        assert_eq!(counter(&srv, "responses_4xx"), 1);
        drop(s);
    }

    #[test]
    fn h2_request_paused_then_reset_is_logged_499() {
        let srv = slow_auth_server();
        let mut s = open(&srv, b"");
        let auth = [("authorization", "Basic am9lOndyb25n")];
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block("/private/x.txt", &auth))).unwrap();
        wait_verifications(&srv, 1);
        s.write_all(&frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes())).unwrap();
        s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &get_block("/.status", &[]))).unwrap();
        let (frames, _) = read_frames(&mut s, |f| f.2 == 3 && f.1 & END_STREAM != 0);
        assert!(!frames.iter().any(|f| f.2 == 1 && f.0 != RST_STREAM), "stream 1 was answered: {frames:?}");
        let text = wait_for_lines(&srv.access_log_path(), 1, Duration::from_secs(5)).join("\n");
        let line = text.lines().find(|l| l.contains("/private/x.txt")).unwrap_or_else(|| panic!("{text}"));
        let l = parse_combined(line).unwrap();
        assert_eq!((l.status, l.bytes.as_str()), (499, "0"), "{line}");
        thread::sleep(Duration::from_millis(1300));
        let text = fs::read_to_string(srv.access_log_path()).unwrap();
        assert_eq!(text.matches("/private/x.txt").count(), 1, "{text}");
        assert_eq!(counter(&srv, "requests_aborted"), 1);
        drop(s);
    }
}
