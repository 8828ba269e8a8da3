//! HTTP/2 frames by hand over a raw socket, for the tests that need frame-level control
//! (`tests/http2.rs`, `tests/h2_attacks.rs`): frames and header blocks built, frames read back,
//! response header blocks decoded with the crate's own HPACK decoder.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::Server;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut b = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    b.extend_from_slice(&stream.to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// A request header block: literal fields without indexing, no Huffman (RFC 7541 §6.2.2).
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        assert!(n.len() < 127 && v.len() < 127);
        b.push(0);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

pub fn get_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut f = vec![(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", "localhost")];
    f.extend_from_slice(extra);
    block(&f)
}

/// A connection past the preface and an empty SETTINGS (plus `settings` parameters), and
/// past the acknowledgement of the server's SETTINGS.
pub fn open(srv: &Server, settings: &[u8]) -> TcpStream {
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(4, 0, 0, settings));
    // The server's SETTINGS, sent as soon as the preface is in, acknowledged (the handshake).
    hello.extend(frame(4, 1, 0, b""));
    s.write_all(&hello).unwrap();
    s
}

/// Reads until `n` streams have ended; each stream's status, body and whether it ended. The
/// header blocks are decoded with the crate's HPACK decoder.
pub fn responses(s: &mut TcpStream, n: usize, limit: Duration) -> HashMap<u32, (u16, Vec<u8>, bool)> {
    responses_with(&mut ferrohttpd::h2::hpack::Decoder::new(4096), s, n, limit)
}

/// [`responses`] with the connection's decoder, for a connection read more than once (the
/// server's encoder refers to its dynamic table across responses).
pub fn responses_with(
    dec: &mut ferrohttpd::h2::hpack::Decoder,
    s: &mut TcpStream,
    n: usize,
    limit: Duration,
) -> HashMap<u32, (u16, Vec<u8>, bool)> {
    let mut ends = 0;
    let (frames, closed) = read_frames_for(s, limit, |f| {
        ends += usize::from(f.2 != 0 && f.1 & 1 != 0);
        ends == n
    });
    assert!(!closed, "closed after {ends} streams");
    let mut got: HashMap<u32, (u16, Vec<u8>, bool)> = HashMap::new();
    for (kind, flags, id, payload) in frames {
        if id == 0 {
            assert!(kind == 4 || kind == 8, "unexpected frame {kind} on the connection");
            continue;
        }
        let e = got.entry(id).or_insert((0, Vec::new(), false));
        match kind {
            1 => {
                assert_eq!(flags & 0x4, 0x4, "HEADERS without END_HEADERS");
                dec.decode(&payload, 1 << 20, |n, v, _| {
                    if n == b":status" {
                        e.0 = std::str::from_utf8(v).unwrap().parse().unwrap();
                    }
                    Ok::<(), ()>(())
                })
                .unwrap();
            }
            0 => e.1.extend_from_slice(&payload),
            _ => panic!("unexpected frame {kind} on {id}"),
        }
        e.2 |= flags & 1 != 0;
    }
    got
}

/// A frame as read: type, flags, stream, payload.
pub type RawFrame = (u8, u8, u32, Vec<u8>);

/// Reads frames until `stop` says so, EOF or 5 s; returns them (kind, flags, stream, payload)
/// and whether the server closed.
pub fn read_frames(s: &mut TcpStream, stop: impl FnMut(&RawFrame) -> bool) -> (Vec<RawFrame>, bool) {
    read_frames_for(s, Duration::from_secs(5), stop)
}

/// [`read_frames`] for up to `limit`. Bytes after the frame `stop` accepted are lost: stop
/// only where the server has nothing more to send.
pub fn read_frames_for(
    s: &mut TcpStream,
    limit: Duration,
    mut stop: impl FnMut(&RawFrame) -> bool,
) -> (Vec<RawFrame>, bool) {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let deadline = Instant::now() + limit;
    let mut chunk = [0u8; 65536];
    loop {
        while buf.len() >= 9 {
            let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let f = (buf[3], buf[4], u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]), buf[9..9 + len].to_vec());
            buf.drain(..9 + len);
            let done = stop(&f);
            frames.push(f);
            if done {
                return (frames, false);
            }
        }
        if Instant::now() > deadline {
            return (frames, false);
        }
        match s.read(&mut chunk) {
            Ok(0) => return (frames, true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return (frames, false)
            }
            Err(_) => return (frames, true),
        }
    }
}

pub fn code(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

pub const GOAWAY: u8 = 7;
pub const RST_STREAM: u8 = 3;
pub const PROTOCOL_ERROR: u32 = 1;
pub const FRAME_SIZE_ERROR: u32 = 6;
pub const REFUSED_STREAM: u32 = 7;

/// The GOAWAY the server sends, then its close.
pub fn expect_goaway(s: &mut TcpStream, want: u32) {
    let (frames, _) = read_frames(s, |f| f.0 == GOAWAY);
    let g = frames.iter().find(|f| f.0 == GOAWAY).unwrap_or_else(|| panic!("no GOAWAY in {frames:?}"));
    assert_eq!(code(&g.3, 4), want, "{frames:?}");
    let (_, closed) = read_frames(s, |_| false);
    assert!(closed, "the connection stays open after GOAWAY");
}

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const PRIORITY: u8 = 2;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const SETTINGS_TIMEOUT: u32 = 4;
pub const STREAM_CLOSED: u32 = 5;
pub const ENHANCE_YOUR_CALM: u32 = 11;
/// SETTINGS_INITIAL_WINDOW_SIZE = 0: the server may send no DATA until a WINDOW_UPDATE.
pub const ZERO_WINDOW: &[u8] = b"\x00\x04\x00\x00\x00\x00";

/// Writes `chunks` on a clone of `s` from another thread (stopping at the first error: the
/// server may cut the attacker off), while this thread reads frames until a GOAWAY, EOF or
/// `limit`. Returns the frames read and whether the server closed. (How much was written
/// says little: megabytes fit in the loopback socket buffers.)
pub fn flood(s: &mut TcpStream, chunks: Vec<Vec<u8>>, limit: Duration) -> (Vec<RawFrame>, bool) {
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let writer = std::thread::spawn(move || {
        for c in &chunks {
            if w.write_all(c).is_err() {
                break;
            }
        }
    });
    let (frames, mut closed) = read_frames_for(s, limit, |f| f.0 == GOAWAY);
    if frames.iter().any(|f| f.0 == GOAWAY) {
        // After a GOAWAY for a connection error the server closes.
        closed |= read_frames_for(s, Duration::from_secs(5), |_| false).1;
    }
    // Unblocks a writer stuck on a full socket.
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    (frames, closed)
}

/// The code of the GOAWAY among `frames`, if any.
pub fn goaway_code(frames: &[RawFrame]) -> Option<u32> {
    frames.iter().find(|f| f.0 == GOAWAY).map(|f| code(&f.3, 4))
}
