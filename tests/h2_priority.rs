//! RFC 9218 priorities over h2c, the real binary with hand-built frames: the `priority`
//! request field and PRIORITY_UPDATE decide which stream's DATA goes first when several can
//! send (lowest urgency first; of one urgency, non-incremental streams one after the other in
//! stream order, incremental ones in turns), and streams without a signal still share the
//! connection in turns, so a large download does not hold up small ones.
#![cfg(feature = "http2")]

mod common;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::h2::*;
use common::*;

const PRIORITY_UPDATE: u8 = 0x10;
const KB64: usize = 64 * 1024;
/// SETTINGS_INITIAL_WINDOW_SIZE = 8 MiB.
const BIG_WINDOW: &[u8] = b"\x00\x04\x00\x80\x00\x00";

fn server() -> Server {
    Server::builder()
        .setup(|_, root| {
            for (i, name) in ["a.bin", "b.bin", "c.bin", "d.bin"].iter().enumerate() {
                fs::write(root.join(name), pseudo_random_bytes(KB64, i as u64 + 1)).unwrap();
            }
            fs::write(root.join("big.bin"), pseudo_random_bytes(4 << 20, 9)).unwrap();
            for i in 0..10 {
                fs::write(root.join(format!("small{i}.txt")), vec![b'a' + i as u8; 1000]).unwrap();
            }
        })
        .start()
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

fn priority_update(stream: u32, value: &str) -> Vec<u8> {
    let mut p = stream.to_be_bytes().to_vec();
    p.extend_from_slice(value.as_bytes());
    frame(PRIORITY_UPDATE, 0, 0, &p)
}

/// Requests on a connection whose streams start with no window: each `(stream, path,
/// priority field)` gets its HEADERS and nothing else, until `opening` (sent once every
/// HEADERS is in) opens the windows of all at once. Returns the DATA frames that follow, as
/// (stream, length, END_STREAM), in the order sent, checked complete against the files.
fn data_order(srv: &Server, requests: &[(u32, &str, Option<&str>)], opening: &[u8]) -> Vec<(u32, usize, bool)> {
    let mut s = open(srv, ZERO_WINDOW);
    let mut b = Vec::new();
    for &(id, path, prio) in requests {
        let extra: Vec<(&str, &str)> = prio.map(|p| ("priority", p)).into_iter().collect();
        b.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block(path, &extra)));
    }
    s.write_all(&b).unwrap();
    let mut heads = 0;
    let (frames, closed) = read_frames(&mut s, |f| {
        heads += usize::from(f.0 == HEADERS);
        heads == requests.len()
    });
    assert!(!closed && heads == requests.len(), "{frames:?}");
    assert!(!frames.iter().any(|f| f.0 == DATA), "DATA before any window: {frames:?}");
    s.write_all(opening).unwrap();
    let data = read_data(&mut s, requests.len());
    for &(id, path, _) in requests {
        let body: usize = data.iter().filter(|d| d.0 == id).map(|d| d.1).sum();
        let want = fs::metadata(srv.root().join(&path[1..])).unwrap().len() as usize;
        assert_eq!(body, want, "stream {id} ({path}): {data:?}");
    }
    data
}

/// DATA frames until `n` streams have ended.
fn read_data(s: &mut TcpStream, n: usize) -> Vec<(u32, usize, bool)> {
    let mut ends = 0;
    let (frames, closed) = read_frames_for(s, Duration::from_secs(20), |f| {
        ends += usize::from(f.0 == DATA && f.1 & END_STREAM != 0);
        ends == n
    });
    assert!(!closed && ends == n, "{} streams ended of {n}", ends);
    frames.iter().filter(|f| f.0 == DATA).map(|f| (f.2, f.3.len(), f.1 & END_STREAM != 0)).collect()
}

/// Where stream `id`'s first and last DATA frames are in `data`.
fn span(data: &[(u32, usize, bool)], id: u32) -> (usize, usize) {
    let first = data.iter().position(|d| d.0 == id).unwrap();
    let last = data.iter().rposition(|d| d.0 == id).unwrap();
    (first, last)
}

/// Opens the connection window (16 MiB more) and each stream's (1 MiB).
fn open_all(ids: &[u32]) -> Vec<u8> {
    let mut b = window_update(0, 16 << 20);
    for &id in ids {
        b.extend(window_update(id, 1 << 20));
    }
    b
}

#[test]
fn an_urgent_stream_is_sent_before_a_less_urgent_one() {
    let srv = server();
    // Stream 1 (u=7) has the lower identifier and its window opens first in the same write;
    // stream 3 (u=0) still goes first, all of it.
    let data = data_order(&srv, &[(1, "/a.bin", Some("u=7")), (3, "/b.bin", Some("u=0"))], &open_all(&[1, 3]));
    let (_, last3) = span(&data, 3);
    let (first1, _) = span(&data, 1);
    assert!(last3 < first1, "u=0 not before u=7: {data:?}");
}

#[test]
fn priority_update_reorders_a_pending_stream() {
    let srv = server();
    // Both without a signal (urgency 3), then stream 3 raised to u=0 and stream 1 lowered
    // to u=6 before any window opens.
    let mut opening = priority_update(3, "u=0");
    opening.extend(priority_update(1, "u=6"));
    opening.extend(open_all(&[1, 3]));
    let data = data_order(&srv, &[(1, "/a.bin", None), (3, "/b.bin", None)], &opening);
    let (_, last3) = span(&data, 3);
    let (first1, _) = span(&data, 1);
    assert!(last3 < first1, "the PRIORITY_UPDATE was not honoured: {data:?}");
}

#[test]
fn within_an_urgency_non_incremental_in_stream_order_incremental_in_turns() {
    let srv = server();
    let requests = [
        (1, "/a.bin", Some("u=2")),
        (3, "/b.bin", Some("u=2")),
        (5, "/c.bin", Some("u=1, i")),
        (7, "/d.bin", Some("u=1, i")),
    ];
    let data = data_order(&srv, &requests, &open_all(&[1, 3, 5, 7]));
    let (s1, e1) = (span(&data, 1), span(&data, 3));
    let (i5, i7) = (span(&data, 5), span(&data, 7));
    // u=1 before u=2.
    assert!(i5.1 < s1.0 && i7.1 < s1.0, "u=1 not first: {data:?}");
    // The incremental pair interleaves: each has a frame before the other's last.
    assert!(i5.0 < i7.1 && i7.0 < i5.1, "incremental streams did not take turns: {data:?}");
    // The non-incremental pair goes one after the other, the lower identifier first.
    assert!(s1.1 < e1.0, "non-incremental streams interleaved or out of order: {data:?}");
}

#[test]
fn a_large_download_does_not_starve_small_ones() {
    let srv = server();
    // Without signals, and with one stream signalled (the priority-ordered path): the large
    // download is requested first, and every small response still ends long before it does.
    for signal in [None, Some("u=3, i")] {
        // Windows that let the large download go all the way at once: only the scheduling
        // can make room for the small ones.
        let mut s = open(&srv, BIG_WINDOW);
        let mut b = window_update(0, 16 << 20);
        b.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block("/big.bin", &[])));
        for i in 0..10u32 {
            let extra: Vec<(&str, &str)> = signal.filter(|_| i == 0).map(|p| ("priority", p)).into_iter().collect();
            let path = format!("/small{i}.txt");
            b.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3 + 2 * i, &get_block(&path, &extra)));
        }
        s.write_all(&b).unwrap();
        let mut ends = Vec::new();
        let mut big = 0;
        let (frames, closed) = read_frames_for(&mut s, Duration::from_secs(20), |f| {
            if f.0 == DATA && f.2 == 1 {
                big += f.3.len();
            }
            if f.0 == DATA && f.1 & END_STREAM != 0 {
                ends.push(f.2);
            }
            ends.len() == 10
        });
        assert!(!closed && ends.len() == 10, "{signal:?}: {} small streams ended: {frames:?}", ends.len());
        assert!(!ends.contains(&1), "{signal:?}: the large download ended first");
        // In turns of 16 KiB, the small ones all end in the first round.
        assert!(big <= 4 * 16384, "{signal:?}: {big} bytes of the large download before the small ones ended");
    }
}
