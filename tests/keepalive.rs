//! Connection management: keep-alive, pipelining, request limits, slow clients, timeouts.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;

const TIMEOUTS: &str = "[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"";
/// Timeouts of 1 s are checked about once a second: allow 2 s of slack and a little more.
const CLOSE_LIMIT: Duration = Duration::from_millis(3500);

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

#[test]
fn many_requests_on_one_connection() {
    let srv = Server::start("");
    let mut s = srv.connect();
    for i in 0..120 {
        let (path, want) = if i % 11 == 10 {
            ("/file.txt".to_string(), FILE_TXT.to_vec())
        } else {
            (format!("/p{}.txt", i % 11), page(i % 11))
        };
        raw(&mut s, get(&path));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "request {i} ({path}): {r:?}");
        assert_eq!(r.body, want, "request {i} ({path})");
        assert!(!r.closes(), "request {i}: {r:?}");
    }
}

#[test]
fn keepalive_requests_limit_closes_after_the_last() {
    let srv = Server::start("[http]\nkeepalive_requests = 3");
    let mut s = srv.connect();
    for i in 0..3 {
        raw(&mut s, get(&format!("/p{i}.txt")));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, page(i));
        assert_eq!(r.closes(), i == 2, "request {}: {r:?}", i + 1);
    }
    expect_closed(&mut s);
}

#[test]
fn keepalive_requests_limit_with_pipelining() {
    let srv = Server::start("[http]\nkeepalive_requests = 3");
    let mut s = srv.connect();
    let all: String = (0..5).map(|i| get(&format!("/p{i}.txt"))).collect();
    raw(&mut s, all);
    for i in 0..3 {
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, page(i));
        assert_eq!(r.closes(), i == 2, "request {}: {r:?}", i + 1);
    }
    expect_closed(&mut s);
}

#[test]
fn ten_pipelined_requests_in_one_write() {
    let srv = Server::start("");
    let mut s = srv.connect();
    let all: String = (0..PAGES).map(|i| get(&format!("/p{i}.txt"))).collect();
    raw(&mut s, all);
    for i in 0..PAGES {
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "response {i}: {r:?}");
        assert_eq!(r.body, page(i), "response {i} out of order");
    }
    check_still_open(&mut s).unwrap();
}

#[test]
fn pipelined_mix_of_get_head_and_errors() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(
        &mut s,
        "GET /p0.txt HTTP/1.1\r\nHost: x\r\n\r\n\
         HEAD /p1.txt HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /missing HTTP/1.1\r\nHost: x\r\n\r\n\
         OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /p2.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let r = read_response(&mut s);
    assert_eq!((r.status, r.body.as_slice()), (200, page(0).as_slice()), "{r:?}");
    let r = read_head_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Content-Length"), Some(page(1).len().to_string().as_str()));
    let r = read_response(&mut s);
    assert_eq!(r.status, 404, "{r:?}");
    if r.closes() {
        expect_closed(&mut s);
        return;
    }
    let r = read_response(&mut s);
    assert_eq!(r.status, 204, "{r:?}");
    let r = read_response(&mut s);
    assert_eq!((r.status, r.body.as_slice()), (200, page(2).as_slice()), "{r:?}");
}

#[test]
fn request_written_one_byte_at_a_time() {
    let srv = Server::start("");
    let mut s = srv.connect();
    for b in get("/p5.txt").bytes() {
        raw(&mut s, [b]);
        sleep(Duration::from_millis(5));
    }
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(5));
    check_still_open(&mut s).unwrap();
}

#[test]
fn http10_without_keepalive_closes() {
    let srv = Server::start("");
    let mut s = srv.connect();
    raw(&mut s, "GET /file.txt HTTP/1.0\r\n\r\n");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, FILE_TXT);
    assert!(!r.header_has_token("Connection", "keep-alive"), "{r:?}");
    assert!(r.closes(), "the server closes, so it says `Connection: close`: {r:?}");
    expect_closed(&mut s);
}

#[test]
fn connection_close_on_http11_closes() {
    let srv = Server::start("");
    let mut f = Failures::new();
    for conn in ["close", "Close", "foo, close", "keep-alive, close"] {
        let mut s = srv.connect();
        raw(&mut s, format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nConnection: {conn}\r\n\r\n"));
        f.check(
            &format!("Connection: {conn}"),
            (|| {
                let r = try_read_response(&mut s, false).map_err(|e| e.to_string())?;
                if r.status != 200 || r.body != FILE_TXT || !r.closes() {
                    return Err(format!("expected 200 with Connection: close:\n{}", r.describe()));
                }
                check_closed(&mut s, IO_TIMEOUT).map(|_| ())
            })(),
        );
    }
    f.finish();
}

/// Reads until EOF or reset within `limit`; anything received must be a 408 response.
fn wait_for_close(s: &mut std::net::TcpStream, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!("still open after {limit:?} (received \"{}\")", show(&got)));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("read error: {e}")),
        }
    }
    if !got.is_empty() && !got.starts_with(b"HTTP/1.1 408") {
        return Err(format!("only a 408 may precede the close, got \"{}\"", show(&got)));
    }
    Ok(start.elapsed())
}

#[test]
fn partial_head_is_closed_by_header_timeout() {
    let srv = Server::start(TIMEOUTS);
    let mut s = srv.connect();
    raw(&mut s, "GET /file.txt HTTP/1.1\r\nHost: x\r\n");
    let t = wait_for_close(&mut s, CLOSE_LIMIT).unwrap();
    assert!(t >= Duration::from_millis(500), "closed too early ({t:?})");
}

#[test]
fn silent_connection_is_closed_by_header_timeout() {
    let srv = Server::start(TIMEOUTS);
    let mut s = srv.connect();
    let t = wait_for_close(&mut s, CLOSE_LIMIT).unwrap();
    assert!(t >= Duration::from_millis(500), "closed too early ({t:?})");
}

#[test]
fn header_timeout_is_not_reset_by_each_byte() {
    let srv = Server::start(TIMEOUTS);
    let mut s = srv.connect();
    let head = format!("GET /file.txt HTTP/1.1\r\nHost: x\r\nX-Slow: {}", "a".repeat(100));
    let start = Instant::now();
    let mut closed_at = None;
    let mut buf = [0u8; 1024];
    'outer: for b in head.bytes() {
        if start.elapsed() > Duration::from_secs(6) {
            break;
        }
        if s.write_all(&[b]).is_err() {
            closed_at = Some(start.elapsed());
            break;
        }
        // Wait ~300 ms, watching for the close.
        let until = Instant::now() + Duration::from_millis(300);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut buf) {
                Ok(0) => {
                    closed_at = Some(start.elapsed());
                    break 'outer;
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    closed_at = Some(start.elapsed());
                    break 'outer;
                }
                Ok(n) => assert!(buf[..n].starts_with(b"HTTP/1.1 408"), "unexpected bytes: \"{}\"", show(&buf[..n])),
                Err(_) => break,
            }
        }
    }
    let t = closed_at.expect("a client sending one byte every 300 ms was never closed");
    assert!(t <= CLOSE_LIMIT, "a dribbling client was closed only after {t:?} (header_timeout = 1s)");
}

#[test]
fn idle_keepalive_connection_is_closed() {
    let srv = Server::start("[http]\nheader_timeout = \"10s\"\nkeepalive_timeout = \"1s\"");
    let mut s = srv.connect();
    raw(&mut s, get("/file.txt"));
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!r.closes(), "{r:?}");
    let t = wait_for_close(&mut s, CLOSE_LIMIT).unwrap();
    assert!(t >= Duration::from_millis(500), "closed too early ({t:?})");
}

/// The header deadline belongs to one request: a connection that served a request quickly
/// and then waited (within the keep-alive timeout) still gets its next request served.
#[test]
fn header_deadline_is_per_request() {
    let srv = Server::start("[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"10s\"");
    let mut s = srv.connect();
    raw(&mut s, get("/p1.txt"));
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    sleep(Duration::from_millis(2500));
    raw(&mut s, get("/p2.txt"));
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(2));
}

/// A connection that keeps making requests is not cut by the keep-alive timeout.
#[test]
fn busy_connection_outlives_keepalive_timeout() {
    let srv = Server::start(TIMEOUTS);
    let mut s = srv.connect();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < Duration::from_millis(3000) {
        raw(&mut s, get(&format!("/p{}.txt", i % PAGES)));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "request {i} at {:?}: {r:?}", start.elapsed());
        assert_eq!(r.body, page(i % PAGES));
        i += 1;
        sleep(Duration::from_millis(400));
    }
}

/// "Every connection has a deadline": a GET that announces a body and never sends it is
/// answered (or not) and then closed, not held forever.
#[test]
fn announced_body_that_never_arrives_is_timed_out() {
    let srv = Server::start(TIMEOUTS);
    for te in ["Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n"] {
        let mut s = srv.connect();
        raw(&mut s, format!("GET /file.txt HTTP/1.1\r\nHost: x\r\n{te}\r\n"));
        let start = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        let closed = loop {
            let left = Duration::from_secs(5).saturating_sub(start.elapsed());
            if left.is_zero() {
                break false;
            }
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut buf) {
                Ok(0) => break true,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        };
        assert!(closed, "{te:?}: still open after 5 s; received \"{}\"", show(&got));
        assert!(start.elapsed() <= CLOSE_LIMIT, "{te:?}: closed only after {:?}", start.elapsed());
    }
}

/// A client that sends its request and then shuts down its sending side (FIN) gets the
/// response, and then the connection closes at once: the EOF is already in the socket, and
/// an edge-triggered loop that stops reading before `WouldBlock` never sees it.
#[test]
fn half_closed_client_is_closed_after_its_response() {
    let srv = Server::start("[http]\nkeepalive_timeout = \"10s\"\nheader_timeout = \"10s\"");
    for req in [
        "GET /file.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /file.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let mut s = srv.connect();
        raw(&mut s, req);
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, FILE_TXT);
        let t = check_closed(&mut s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{req:?}: {e}"));
        assert!(
            t < Duration::from_millis(1000),
            "{req:?}: the server held a half-closed connection for {t:?} after the response"
        );
    }
}

/// A request that arrives while the previous response is still being written (output
/// pending, so the server is not reading) is served once that response is done: its
/// readiness event came and went meanwhile.
fn request_arriving_during_a_pending_response(extra: &str) {
    let big = pseudo_random_bytes(8 << 20, 21);
    let b = big.clone();
    let srv =
        Server::builder().config(extra).setup(move |_, root| std::fs::write(root.join("big.bin"), &b).unwrap()).start();
    let mut s = srv.connect();
    raw(&mut s, get("/big.bin"));
    let h = try_read_response(&mut s, true).unwrap();
    assert_eq!(h.status, 200, "{h:?}");
    let mut body = vec![0u8; big.len()];
    s.read_exact(&mut body[..1 << 20]).unwrap();
    // The server is still writing the rest: send the next request now.
    raw(&mut s, get("/p4.txt"));
    sleep(Duration::from_millis(200));
    s.read_exact(&mut body[1 << 20..]).unwrap();
    assert!(body == big, "the big body differs");
    let r = read_response(&mut s);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, page(4));
}

#[test]
fn request_arriving_during_a_pending_response_with_sendfile() {
    request_arriving_during_a_pending_response("sendfile = true");
}

#[test]
fn request_arriving_during_a_pending_response_without_sendfile() {
    request_arriving_during_a_pending_response("sendfile = false");
}
