//! HTTP/2 under attack, the real binary over h2c with hand-built frames: each published
//! attack on HTTP/2 servers (Rapid Reset, CONTINUATION flood, HPACK bomb, SETTINGS, PING and
//! empty-frame floods, zero-window stall, stream-ID exhaustion, too many streams) gets its
//! answer (the right frame and code, or a close), while the server's memory stays bounded and
//! another client, on its own connection, keeps being served. That client's latency is
//! measured during each attack and asserted under a bound that cannot flake on a loaded
//! machine ([`LATENCY_BOUND`]); the measured figures are printed, one `h2-attack` line per
//! test (`cargo test --test h2_attacks -- --nocapture --test-threads 1 | grep h2-attack`,
//! or `benches/h2_attacks.sh`).
//!
//! Also here: the HTTP/2 handshake and idle timeouts, and the drain on SIGTERM and SIGHUP
//! (GOAWAY in two steps).
#![cfg(feature = "http2")]

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::h2::*;
use common::*;

/// The most one request of the other client may take while an attack runs. The target is
/// under 50 ms (printed, not asserted: the machine running the tests may be loaded).
const LATENCY_BOUND: Duration = Duration::from_secs(2);
/// How much the server's peak memory (VmHWM) may grow during one attack.
const MEMORY_BOUND_KB: u64 = 64 * 1024;

/// Another client: sequential HTTP/1.1 keep-alive GETs of a small file on its own connection,
/// each timed, until stopped.
struct Bystander {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<Duration>>,
}

impl Bystander {
    fn start(srv: &Server) -> Bystander {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = srv.addr();
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut times = Vec::new();
            let req = b"GET /file.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
            let mut conn: Option<TcpStream> = None;
            // Bounded: about 100 s at the slowest the assertions allow.
            while !flag.load(Ordering::Relaxed) && times.len() < 50_000 {
                let t = Instant::now();
                // A new connection when the server ended the last one (keepalive_requests);
                // the connect is timed with the request.
                let s = conn.get_or_insert_with(|| connect(addr));
                s.write_all(req).unwrap();
                let (body, close) = read_response(s);
                times.push(t.elapsed());
                assert_eq!(body, FILE_TXT, "the other client got a wrong response");
                if close {
                    conn = None;
                }
                thread::sleep(Duration::from_millis(2));
            }
            times
        });
        Bystander { stop, thread }
    }

    /// Stops it; its latencies, checked and printed with `name` and the memory figures.
    fn finish(self, name: &str, srv: &Server, hwm_before: u64) {
        // At least a few requests during the attack, whatever its length.
        thread::sleep(Duration::from_millis(50));
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.join().expect("the other client failed");
        check_other_client("h2-attack", name, srv, t, hwm_before, LATENCY_BOUND, MEMORY_BOUND_KB);
        // The server is still serving fresh connections.
        assert_eq!(srv.get("/file.txt").body, FILE_TXT);
    }
}

/// Reads one HTTP/1.1 response with a Content-Length; its body, and whether the server
/// closes the connection after it.
fn read_response(s: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("a content-length");
            if buf.len() >= end + 4 + len {
                assert_eq!(buf.len(), end + 4 + len, "more than one response");
                return (buf[end + 4..].to_vec(), head.contains("\nconnection: close"));
            }
        }
        let n = s.read(&mut chunk).expect("the other client's read");
        assert!(n > 0, "the other client's connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Runs `attack` while the other client runs, again and again for at least a second (the
/// defences cut most attacks off within milliseconds); checks and prints the figures.
fn under_attack(name: &str, srv: &Server, mut attack: impl FnMut()) {
    let hwm = srv.status_kb("VmHWM");
    let b = Bystander::start(srv);
    // The other client is under way before the attack begins.
    thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    let mut rounds = 0;
    while rounds == 0 || t.elapsed() < Duration::from_secs(1) {
        attack();
        rounds += 1;
    }
    println!("h2-attack {name:<24} {rounds} rounds in {:?}", t.elapsed());
    b.finish(name, srv, hwm);
}

/// The chunks of a flood: `frame` for ids `first, first + step, ...`, `per_chunk` to a write.
fn chunks(n: u32, per_chunk: u32, mut frame: impl FnMut(u32) -> Vec<u8>) -> Vec<Vec<u8>> {
    (0..n.div_ceil(per_chunk))
        .map(|c| (c * per_chunk..((c + 1) * per_chunk).min(n)).flat_map(&mut frame).collect())
        .collect()
}

fn assert_calm(name: &str, frames: &[RawFrame], closed: bool) {
    assert_eq!(
        goaway_code(frames),
        Some(ENHANCE_YOUR_CALM),
        "{name}: {:?}",
        frames.iter().rev().take(3).collect::<Vec<_>>()
    );
    assert!(closed, "{name}: the connection stays open after GOAWAY");
}

#[test]
fn rapid_reset() {
    let srv = Server::start("");
    under_attack("rapid reset", &srv, || {
        let mut s = open(&srv, b"");
        // HEADERS then RST_STREAM CANCEL, 20 000 times.
        let pairs = chunks(20_000, 100, |i| {
            let id = 2 * i + 1;
            let mut b = frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block("/file.txt", &[]));
            b.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
            b
        });
        let (frames, closed) = flood(&mut s, pairs, Duration::from_secs(30));
        assert_calm("rapid reset", &frames, closed);
        // Cut off after about 200 resets (the budget); a stream answered before its reset
        // arrived costs the flood budget instead (1000).
        let answered = frames.iter().filter(|f| f.0 == HEADERS).count();
        let last = frames.iter().find(|f| f.0 == GOAWAY).map_or(0, |g| code(&g.3, 0));
        assert!(last < 2 * 1300, "GOAWAY only after stream {last} ({answered} streams answered)");
    });
}

#[test]
fn continuation_flood() {
    let srv = Server::start("");
    under_attack("continuation flood", &srv, || {
        // Endless CONTINUATION frames with bytes: the header block cap (64 KiB).
        let mut s = open(&srv, b"");
        let mut c = vec![frame(HEADERS, 0, 1, &get_block("/file.txt", &[]))];
        c.extend((0..2000).map(|_| frame(CONTINUATION, 0, 1, &[0x82; 16_384])));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("continuation flood", &frames, closed);
        // Empty CONTINUATION frames never grow the block: the flood budget (1000).
        let mut s = open(&srv, b"");
        let mut c = vec![frame(HEADERS, 0, 1, &get_block("/file.txt", &[]))];
        c.extend(chunks(100_000, 1000, |_| frame(CONTINUATION, 0, 1, b"")));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("empty continuation flood", &frames, closed);
    });
}

#[test]
fn hpack_bomb() {
    let srv = Server::start("");
    under_attack("hpack bomb", &srv, || {
        let mut s = open(&srv, b"");
        let mut c = Vec::new();
        for i in 0..50u32 {
            let id = 2 * i + 1;
            let mut b = get_block("/file.txt", &[]);
            if i == 0 {
                // A 4000-byte field inserted in the dynamic table (RFC 7541 §6.2.1)...
                b.extend([0x40, 6]);
                b.extend(b"x-bomb");
                // The value's length, 4000: 127 and then 3873 as 7-bit groups (RFC 7541 §5.1).
                b.extend([0x7f, 0xa1, 0x1e]);
                b.extend(vec![b'a'; 4000]);
            }
            // ...then indexed (62: the newest dynamic entry) 60 000 times: 64 KiB on the wire
            // (the block cap), 240 MB decoded.
            b.extend(vec![0xbe; 60_000]);
            let mut frames = frame(HEADERS, END_STREAM, id, &b[..16_384]);
            let rest: Vec<&[u8]> = b[16_384..].chunks(16_384).collect();
            for (k, part) in rest.iter().enumerate() {
                let flags = if k + 1 == rest.len() { END_HEADERS } else { 0 };
                frames.extend(frame(CONTINUATION, flags, id, part));
            }
            c.push(frames);
        }
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || c.iter().for_each(|b| w.write_all(b).unwrap()));
        // Each stream is answered 431 (the header list is over max_header_list_size); the
        // connection goes on and HPACK stays in step.
        let mut dec = ferrohttpd::h2::hpack::Decoder::new(4096);
        let got = responses_with(&mut dec, &mut s, 50, Duration::from_secs(60));
        writer.join().unwrap();
        assert_eq!(got.len(), 50);
        assert!(got.values().all(|r| r.0 == 431 && r.2), "{:?}", got.values().map(|r| r.0).collect::<Vec<_>>());
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 101, &get_block("/file.txt", &[]))).unwrap();
        let got = responses_with(&mut dec, &mut s, 1, Duration::from_secs(10));
        assert_eq!(got.get(&101).map(|r| (r.0, &r.1[..])), Some((200, FILE_TXT)));
    });
}

#[test]
fn settings_flood() {
    let srv = Server::start("");
    under_attack("settings flood", &srv, || {
        let mut s = open(&srv, b"");
        let c = chunks(100_000, 1000, |_| frame(SETTINGS, 0, 0, b"\x00\x04\x00\x00\xff\xff"));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("settings flood", &frames, closed);
        // Every SETTINGS before the cut was acknowledged.
        assert!(frames.iter().filter(|f| f.0 == SETTINGS && f.1 & 1 != 0).count() > 900);
    });
}

#[test]
fn ping_flood() {
    let srv = Server::start("");
    under_attack("ping flood", &srv, || {
        let mut s = open(&srv, b"");
        let c = chunks(100_000, 1000, |i| frame(PING, 0, 0, &u64::from(i).to_be_bytes()));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("ping flood", &frames, closed);
        let acks: Vec<_> = frames.iter().filter(|f| f.0 == PING).collect();
        assert!(acks.len() > 900 && acks.iter().all(|f| f.1 == 1), "{} acks", acks.len());
    });
    // A client that sends PINGs and never reads (with a budget too large to cut it off):
    // the server stops reading it once its answers back up, holding at most its output
    // buffer (the memory bound), and closes it after send_timeout without progress.
    let quiet = Server::start("[http]\nsend_timeout = \"2s\"\n[http2]\nflood_budget = 1000000");
    under_attack("ping flood, never read", &quiet, || {
        let mut s = open(&quiet, b"");
        s.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
        let t = Instant::now();
        let ping = frame(PING, 0, 0, b"12345678").repeat(500);
        let mut sent = 0;
        // Writes until the buffers are full and a write times out, then keeps trying (never
        // reading) until the server's close makes a write fail for good.
        let gone = loop {
            match s.write_all(&ping) {
                Ok(()) => sent += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => break Some(e),
            }
            if t.elapsed() > Duration::from_secs(30) {
                break None;
            }
        };
        let gone = gone.unwrap_or_else(|| panic!("still open after {:?}, {sent} writes taken", t.elapsed()));
        println!(
            "h2-attack ping flood, never read: {sent} writes of 500 PINGs taken, closed after {:?} ({gone})",
            t.elapsed()
        );
    });
}

#[test]
fn empty_frame_floods() {
    let srv = Server::start("");
    under_attack("empty frames flood", &srv, || {
        // Empty DATA frames on a stream whose body never comes.
        let mut s = open(&srv, b"");
        let mut c = vec![frame(HEADERS, END_HEADERS, 1, &get_block("/file.txt", &[]))];
        c.extend(chunks(100_000, 1000, |_| frame(DATA, 0, 1, b"")));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("empty DATA", &frames, closed);
        // Empty header blocks: each a malformed request (RST_STREAM PROTOCOL_ERROR).
        let mut s = open(&srv, b"");
        let c = chunks(100_000, 1000, |i| frame(HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, b""));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("empty HEADERS", &frames, closed);
        assert!(frames.iter().any(|f| f.0 == RST_STREAM && code(&f.3, 0) == PROTOCOL_ERROR));
        // PRIORITY frames on idle streams, with no request at all.
        let mut s = open(&srv, b"");
        let c = chunks(100_000, 1000, |i| frame(PRIORITY, 0, 2 * i + 1, b"\x00\x00\x00\x00\x10"));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("PRIORITY", &frames, closed);
    });
}

#[test]
fn zero_window_stall() {
    let srv = Server::builder()
        .config("[http]\nsend_timeout = \"2s\"")
        .setup(|_, root| fs::write(root.join("big.bin"), pseudo_random_bytes(4 << 20, 3)).unwrap())
        .start();
    under_attack("zero-window stall", &srv, || {
        // 20 connections, 100 streams each of a 4 MiB file, an initial window of 0, and a
        // PING every 200 ms to look alive: each is closed after send_timeout without progress.
        let t = Instant::now();
        let mut conns: Vec<TcpStream> = (0..20)
            .map(|_| {
                let mut s = open(&srv, ZERO_WINDOW);
                let b: Vec<u8> =
                    (0..100).flat_map(|i| frame(HEADERS, 5, 2 * i + 1, &get_block("/big.bin", &[]))).collect();
                s.write_all(&b).unwrap();
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let mut open_for = vec![None; conns.len()];
        let mut got = vec![Vec::new(); conns.len()];
        let mut buf = [0u8; 65536];
        while open_for.iter().any(Option::is_none) && t.elapsed() < Duration::from_secs(30) {
            for ((s, done), got) in conns.iter_mut().zip(open_for.iter_mut()).zip(got.iter_mut()) {
                if done.is_some() {
                    continue;
                }
                let _ = s.write_all(&frame(PING, 0, 0, b"stalling"));
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => *done = Some(t.elapsed()),
                        Ok(n) => {
                            got.extend_from_slice(&buf[..n]);
                            continue;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => *done = Some(t.elapsed()),
                    }
                    break;
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
        for bytes in &got {
            assert!(!has_data_frame(bytes), "DATA sent without a window");
        }
        let longest = open_for.iter().map(|d| d.expect("a stalled connection was never closed")).max().unwrap();
        println!("h2-attack zero-window stall: the stalled connections were closed after at most {longest:?} (send_timeout 2 s)");
        assert!(longest >= Duration::from_millis(1500), "closed before send_timeout: {longest:?}");
        assert!(longest < Duration::from_secs(15), "{longest:?}");
    });
    // Nothing is left open.
    let status = srv.fd_count();
    assert!(status < 40, "{status} descriptors open");
}

/// Whether the frames in `bytes` (what a connection received) hold a non-empty DATA frame.
fn has_data_frame(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = (usize::from(bytes[at]) << 16) | (usize::from(bytes[at + 1]) << 8) | usize::from(bytes[at + 2]);
        if bytes[at + 3] == DATA && len > 0 {
            return true;
        }
        at += 9 + len;
    }
    false
}

#[test]
fn stream_id_exhaustion() {
    let srv = Server::start("");
    under_attack("stream-ID exhaustion", &srv, || {
        let last = (1u32 << 31) - 1;
        let mut s = open(&srv, b"");
        // The highest stream identifier is served...
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, last - 2, &get_block("/file.txt", &[]))).unwrap();
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, last, &get_block("/file.txt", &[]))).unwrap();
        let got = responses(&mut s, 2, Duration::from_secs(10));
        assert_eq!(got.get(&last).map(|r| (r.0, &r.1[..])), Some((200, FILE_TXT)), "{got:?}");
        // ...and after it no identifier is left: any new HEADERS is a connection error.
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block("/file.txt", &[]))).unwrap();
        let (frames, closed) = read_frames(&mut s, |f| f.0 == GOAWAY);
        let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("{frames:?}"));
        assert_eq!(code(&g.3, 0), last, "the last stream processed");
        assert!([PROTOCOL_ERROR, STREAM_CLOSED].contains(&code(&g.3, 4)), "{g:?}");
        assert!(closed || read_frames(&mut s, |_| false).1);
        // More connections jumping straight to the top cost nothing more.
        for _ in 0..20 {
            let mut s = open(&srv, b"");
            s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, last, &get_block("/file.txt", &[]))).unwrap();
            s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block("/file.txt", &[]))).unwrap();
            let (frames, _) = read_frames(&mut s, |f| f.0 == GOAWAY);
            assert!(goaway_code(&frames).is_some(), "{frames:?}");
        }
    });
}

#[test]
fn too_many_concurrent_streams() {
    let srv = Server::start("");
    big_4mib(&srv);
    under_attack("too many streams", &srv, || {
        // With a window of 0 no response can finish: 100 streams stay open (the default
        // max_concurrent_streams), the next 50 are refused (RFC 9113 §5.1.2).
        let mut s = open(&srv, ZERO_WINDOW);
        let b: Vec<u8> = (0..150).flat_map(|i| frame(HEADERS, 5, 2 * i + 1, &get_block("/big.bin", &[]))).collect();
        s.write_all(&b).unwrap();
        let mut refused = 0;
        let mut heads = 0;
        let (frames, closed) = read_frames(&mut s, |f| {
            refused += usize::from(f.0 == RST_STREAM);
            heads += usize::from(f.0 == HEADERS);
            refused + heads == 150
        });
        assert!(!closed, "{frames:?}");
        let rst: Vec<u32> = frames.iter().filter(|f| f.0 == RST_STREAM).map(|f| f.2).collect();
        assert_eq!(rst, (100..150).map(|i| 2 * i + 1).collect::<Vec<_>>());
        assert!(frames.iter().filter(|f| f.0 == RST_STREAM).all(|f| code(&f.3, 0) == REFUSED_STREAM));
        assert!(frames.iter().filter(|f| f.0 == HEADERS).all(|f| f.2 < 200), "{frames:?}");
        // A client that keeps opening streams past the limit is cut off (the flood budget).
        let c = chunks(100_000, 1000, |i| frame(HEADERS, 5, 301 + 2 * i, &get_block("/big.bin", &[])));
        let (frames, closed) = flood(&mut s, c, Duration::from_secs(30));
        assert_calm("too many streams", &frames, closed);
    });
}

fn big_4mib(srv: &Server) -> Vec<u8> {
    let data = pseudo_random_bytes(4 << 20, 11);
    fs::write(srv.root().join("big.bin"), &data).unwrap();
    data
}

// ---------------------------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------------------------

/// How long until the server closes `s` (None if still open after 10 s), with `tick` run
/// every 100 ms meanwhile, and what it sent.
fn closed_after(s: &mut TcpStream, mut tick: impl FnMut(&mut TcpStream)) -> (Option<Duration>, Vec<u8>) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while t.elapsed() < Duration::from_secs(10) {
        match s.read(&mut buf) {
            Ok(0) => return (Some(t.elapsed()), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => tick(s),
            Err(_) => return (Some(t.elapsed()), got),
        }
    }
    (None, got)
}

/// The last frame in `bytes`, a stream of whole frames.
fn last_frame(bytes: &[u8]) -> Option<RawFrame> {
    let mut at = 0;
    let mut last = None;
    while at + 9 <= bytes.len() {
        let len = (usize::from(bytes[at]) << 16) | (usize::from(bytes[at + 1]) << 8) | usize::from(bytes[at + 2]);
        let end = (at + 9 + len).min(bytes.len());
        last = Some((bytes[at + 3], bytes[at + 4], code(&bytes[at + 5..at + 9], 0), bytes[at + 9..end].to_vec()));
        at += 9 + len;
    }
    last
}

/// The connection ended with GOAWAY and this code.
fn ended_with_goaway(bytes: &[u8], want: u32) {
    let f = last_frame(bytes).unwrap_or_else(|| panic!("nothing sent: {}", show(bytes)));
    assert_eq!((f.0, code(&f.3, 4)), (GOAWAY, want), "{f:?}");
}

#[test]
fn handshake_timeout() {
    let srv =
        Server::start("[http]\nheader_timeout = \"1s\"\n[http2]\nhandshake_timeout = \"1s\"\nidle_timeout = \"60s\"");
    let within = |d: Option<Duration>, what: &str| {
        let d = d.unwrap_or_else(|| panic!("{what}: still open after 10 s"));
        assert!(d >= Duration::from_millis(800) && d < Duration::from_secs(5), "{what}: closed after {d:?}");
    };
    // The preface alone, no SETTINGS: GOAWAY SETTINGS_TIMEOUT, then the close.
    let mut s = srv.connect();
    s.write_all(PREFACE).unwrap();
    let (d, got) = closed_after(&mut s, |_| {});
    within(d, "preface only");
    ended_with_goaway(&got, SETTINGS_TIMEOUT);
    // The preface and SETTINGS, but ours never acknowledged, with PINGs meanwhile.
    let mut s = srv.connect();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, b""));
    s.write_all(&hello).unwrap();
    let (d, got) = closed_after(&mut s, |s| drop(s.write_all(&frame(PING, 0, 0, b"12345678"))));
    within(d, "no SETTINGS ACK");
    ended_with_goaway(&got, SETTINGS_TIMEOUT);
    // Part of the preface on a plain listener: an HTTP/1.1 head not yet complete, under
    // [http] header_timeout.
    let mut s = srv.connect();
    s.write_all(&PREFACE[..10]).unwrap();
    within(closed_after(&mut s, |_| {}).0, "part of the preface");
    // A complete handshake is not cut at handshake_timeout.
    let mut s = srv.connect();
    s.write_all(&hello).unwrap();
    s.write_all(&frame(SETTINGS, 1, 0, b"")).unwrap();
    let (d, _) = closed_after(&mut s, |_| {});
    assert!(d.is_none(), "closed after {d:?} with idle_timeout 60 s");
}

#[test]
fn idle_timeout_is_not_renewed_by_pings() {
    let srv = Server::start("[http2]\nidle_timeout = \"1s\"");
    let mut s = open(&srv, b"");
    s.write_all(&frame(HEADERS, 5, 1, &get_block("/file.txt", &[]))).unwrap();
    let got = responses(&mut s, 1, Duration::from_secs(10));
    assert_eq!(got.get(&1).map(|r| r.0), Some(200));
    // A PING every 100 ms does not keep the idle connection open.
    let (d, got) = closed_after(&mut s, |s| drop(s.write_all(&frame(PING, 0, 0, b"12345678"))));
    let d = d.expect("still open after 10 s of PINGs");
    assert!(d >= Duration::from_millis(800) && d < Duration::from_secs(5), "closed after {d:?}");
    // GOAWAY NO_ERROR naming the stream served first (RFC 9113 §9.1).
    ended_with_goaway(&got, 0);
    assert_eq!(last_frame(&got).map(|f| code(&f.3, 0)), Some(1));
    // A request does renew it: one every 300 ms for 3 s keeps the connection.
    let mut s = open(&srv, b"");
    let mut dec = ferrohttpd::h2::hpack::Decoder::new(4096);
    for i in 0..10 {
        s.write_all(&frame(HEADERS, 5, 2 * i + 1, &get_block("/file.txt", &[]))).unwrap();
        let got = responses_with(&mut dec, &mut s, 1, Duration::from_secs(10));
        assert_eq!(got.get(&(2 * i + 1)).map(|r| r.0), Some(200), "request {i}");
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_larger_initial_window_is_advertised() {
    let srv = Server::start("[http2]\ninitial_window_size = 1048576");
    let mut s = open(&srv, b"");
    let (frames, _) = read_frames(&mut s, |f| f.0 == WINDOW_UPDATE);
    let settings = frames.iter().find(|f| f.0 == SETTINGS && f.1 == 0).expect("SETTINGS");
    assert!(settings.3.chunks(6).any(|p| p == [0, 4, 0, 0x10, 0, 0]), "{settings:?}");
    let wu = frames.iter().find(|f| f.0 == WINDOW_UPDATE).expect("WINDOW_UPDATE");
    assert_eq!((wu.2, code(&wu.3, 0)), (0, (1 << 20) - 65_535));
    // A body larger than the default window is taken without waiting for an update.
    s.write_all(&frame(HEADERS, END_HEADERS, 1, &get_block("/file.txt", &[("content-length", "400000")]))).unwrap();
    let body: Vec<u8> = (0..25).flat_map(|k| frame(DATA, u8::from(k == 24), 1, &vec![0; 16_000])).collect();
    s.write_all(&body).unwrap();
    let (frames, closed) = read_frames(&mut s, |f| f.0 == DATA && f.2 == 1 && f.1 & END_STREAM != 0);
    assert!(!closed && frames.iter().any(|f| f.0 == DATA && f.1 & END_STREAM != 0), "{frames:?}");
    // Under the default window the server would have replenished both windows by now.
    let updates: Vec<_> =
        frames.iter().filter(|f| f.0 == WINDOW_UPDATE || f.0 == RST_STREAM || f.0 == GOAWAY).collect();
    assert!(updates.is_empty(), "{updates:?}");
}

// ---------------------------------------------------------------------------------------------
// Drain on SIGTERM and SIGHUP
// ---------------------------------------------------------------------------------------------

/// The GOAWAY and PING that begin a graceful end (RFC 9113 §6.8): GOAWAY NO_ERROR with
/// 2^31−1, and the PING whose ACK completes it. Returns the PING's payload.
fn first_goaway(s: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut goaway = false;
    let (frames, closed) = read_frames(s, |f| {
        goaway |= f.0 == GOAWAY;
        goaway && f.0 == PING
    });
    let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("no GOAWAY on {what}: {frames:?}"));
    assert_eq!((code(&g.3, 0), code(&g.3, 4), closed), (0x7fff_ffff, 0, false), "{what}: 2^31-1, NO_ERROR");
    let p = frames.iter().find(|f| f.0 == PING && f.1 == 0).unwrap_or_else(|| panic!("no PING on {what}: {frames:?}"));
    p.3.clone()
}

/// The second GOAWAY of a graceful end: NO_ERROR naming `last`.
fn second_goaway(s: &mut TcpStream, last: u32, limit: Duration) {
    let (frames, closed) = read_frames_for(s, limit, |f| f.0 == GOAWAY);
    let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("no second GOAWAY: {frames:?}"));
    assert_eq!((code(&g.3, 0), code(&g.3, 4), closed), (last, 0, false), "last stream {last}, NO_ERROR");
}

/// Five streams in flight (held by a zero window), then `sig`: the first GOAWAY and its
/// PING, acknowledged; the second GOAWAY names the last stream; a stream opened after it is
/// not served; once the window opens, the five finish byte for byte and the connection
/// closes.
fn drain(sig: &str) -> Server {
    let srv = Server::start("");
    let big = big_4mib(&srv);
    let mut s = open(&srv, ZERO_WINDOW);
    let paths = ["/big.bin", "/p1.txt", "/p2.txt", "/big.bin", "/file.txt"];
    let want: Vec<Vec<u8>> = vec![big.clone(), page(1), page(2), big, FILE_TXT.to_vec()];
    let b: Vec<u8> =
        paths.iter().enumerate().flat_map(|(i, p)| frame(HEADERS, 5, 2 * i as u32 + 1, &get_block(p, &[]))).collect();
    s.write_all(&b).unwrap();
    let mut heads = 0;
    let (frames, _) = read_frames(&mut s, |f| {
        heads += usize::from(f.0 == HEADERS);
        heads == 5
    });
    assert_eq!(heads, 5, "{frames:?}");
    let before = srv.stderr_text().len();
    signal(srv.pid(), sig);
    let ping = first_goaway(&mut s, sig);
    s.write_all(&frame(PING, 1, 0, &ping)).unwrap();
    second_goaway(&mut s, 9, Duration::from_secs(5));
    if sig == "HUP" {
        let t = Instant::now();
        while !srv.stderr_text()[before..].contains("configuration reloaded") {
            assert!(t.elapsed() < Duration::from_secs(3), "{}", srv.stderr_text());
            thread::sleep(Duration::from_millis(20));
        }
    }
    // A stream after the GOAWAY, then the windows open (the largest, at once).
    let mut more = frame(HEADERS, 5, 11, &get_block("/file.txt", &[]));
    more.extend(frame(SETTINGS, 0, 0, b"\x00\x04\x7f\xff\xff\xff"));
    more.extend(frame(WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    s.write_all(&more).unwrap();
    let (frames, closed) = read_frames_for(&mut s, Duration::from_secs(30), |_| false);
    assert!(closed, "still open after its streams finished");
    for (i, body) in want.iter().enumerate() {
        let id = 2 * i as u32 + 1;
        let got: Vec<u8> = frames.iter().filter(|f| f.0 == DATA && f.2 == id).flat_map(|f| f.3.clone()).collect();
        assert!(got == *body, "{sig}: stream {id}: {} bytes, want {}", got.len(), body.len());
        assert!(frames.iter().any(|f| f.0 == DATA && f.2 == id && f.1 & END_STREAM != 0), "stream {id} did not end");
    }
    assert!(!frames.iter().any(|f| f.2 == 11), "the stream after GOAWAY was served: {frames:?}");
    srv
}

#[test]
fn sigterm_drains_streams_byte_for_byte() {
    let mut srv = drain("TERM");
    let status = srv.terminate(Duration::from_secs(10)).expect("the server exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn sighup_drains_http2_connections_and_serves_on() {
    let srv = drain("HUP");
    // New connections, HTTP/2 and HTTP/1.1, are served under the reloaded configuration.
    let mut s = open(&srv, b"");
    s.write_all(&frame(HEADERS, 5, 1, &get_block("/file.txt", &[]))).unwrap();
    let got = responses(&mut s, 1, Duration::from_secs(10));
    assert_eq!(got.get(&1).map(|r| (r.0, &r.1[..])), Some((200, FILE_TXT)));
    assert_eq!(srv.get("/file.txt").body, FILE_TXT);
}

/// A stream the client opens after the first GOAWAY and before it acknowledges the PING
/// (one in flight when the GOAWAY was sent, as far as the server can tell) is served, and
/// named by the second GOAWAY; without the ACK, the second comes anyway after a second.
#[test]
fn graceful_goaway_in_two_steps() {
    let srv = Server::start("");
    for ack in [true, false] {
        let mut s = open(&srv, ZERO_WINDOW);
        s.write_all(&frame(HEADERS, 5, 1, &get_block("/file.txt", &[]))).unwrap();
        let (frames, _) = read_frames(&mut s, |f| f.0 == HEADERS);
        assert!(frames.iter().any(|f| f.0 == HEADERS), "{frames:?}");
        let before = srv.stderr_text().len();
        signal(srv.pid(), "HUP");
        let ping = first_goaway(&mut s, "HUP");
        let mut more = frame(HEADERS, 5, 3, &get_block("/p1.txt", &[]));
        let t = Instant::now();
        if ack {
            more.extend(frame(PING, 1, 0, &ping));
        }
        s.write_all(&more).unwrap();
        second_goaway(&mut s, 3, Duration::from_secs(10));
        if !ack {
            let waited = t.elapsed();
            assert!(waited >= Duration::from_millis(500), "the second GOAWAY came without the ACK after {waited:?}");
        }
        // After the second GOAWAY a new stream is ignored; both streams before it finish.
        let mut open_up = frame(HEADERS, 5, 5, &get_block("/file.txt", &[]));
        open_up.extend(frame(SETTINGS, 0, 0, b"\x00\x04\x00\x10\x00\x00"));
        s.write_all(&open_up).unwrap();
        let (frames, closed) = read_frames_for(&mut s, Duration::from_secs(10), |_| false);
        assert!(closed, "still open after its streams finished");
        let body = |id: u32| -> Vec<u8> {
            frames.iter().filter(|f| f.0 == DATA && f.2 == id).flat_map(|f| f.3.clone()).collect()
        };
        assert_eq!(body(1), FILE_TXT, "ack {ack}");
        assert_eq!(body(3), page(1), "ack {ack}");
        assert!(!frames.iter().any(|f| f.2 == 5), "the stream after the second GOAWAY was served: {frames:?}");
        let t = Instant::now();
        while !srv.stderr_text()[before..].contains("configuration reloaded") {
            assert!(t.elapsed() < Duration::from_secs(3), "{}", srv.stderr_text());
            thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn window_update_flood() {
    // WINDOW_UPDATE frames cost no answer and are what a downloading client sends all along,
    // so they are not in the flood budget: a client sending them as fast as it can gets its
    // share of the event loop and no more.
    let srv = Server::start("");
    under_attack("window update flood", &srv, || {
        let mut s = open(&srv, b"");
        let c = chunks(200_000, 2000, |_| frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()));
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || c.iter().for_each(|b| w.write_all(b).unwrap()));
        writer.join().unwrap();
        // Still served: a request after the flood is answered.
        s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block("/file.txt", &[]))).unwrap();
        let got = responses(&mut s, 1, Duration::from_secs(30));
        assert_eq!(got.get(&1).map(|r| (r.0, &r.1[..])), Some((200, FILE_TXT)));
    });
}
