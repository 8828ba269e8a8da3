//! Request streams and the session's unidirectional streams: every frame-order rule of
//! RFC 9114 §4.1, §6.2, §7.2 with the error it gives, in pieces as QUIC delivers them.

use super::*;
use crate::h3::frame::{data_frame_header, write_header, write_headers, StreamError};
use crate::h3::qpack::encode_field;
use proptest::prelude::*;

const GET: [(&str, &str); 4] = [(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/x")];

/// A HEADERS frame with these fields (static-table QPACK, as our encoder writes it).
fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut section = vec![0, 0];
    for (n, v) in fields {
        encode_field(n.as_bytes(), v.as_bytes(), &mut section);
    }
    let mut out = Vec::new();
    write_headers(&section, &mut out);
    out
}

fn data(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    data_frame_header(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_header(ty, payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Feeds `bytes` in pieces of `step` bytes (the last with fin); the events, or the error.
fn feed(r: &mut RequestStream, bytes: &[u8], step: usize, fin: bool) -> Result<Vec<Event>, Error> {
    let mut events = Vec::new();
    let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(step).collect() };
    let last = chunks.len() - 1;
    for (i, mut chunk) in chunks.into_iter().enumerate() {
        let fin = fin && i == last;
        loop {
            let (n, ev) = r.recv(chunk, fin)?;
            chunk = &chunk[n..];
            match ev {
                Some(ev) => events.push(ev),
                None => break,
            }
        }
        assert!(chunk.is_empty(), "None with bytes left");
    }
    Ok(events)
}

/// Feeds a whole stream with fin; Data events merged into one total.
fn run(bytes: &[u8], step: usize) -> Result<Vec<Event>, Error> {
    let mut r = RequestStream::new(0, 16 * 1024);
    let events = feed(&mut r, bytes, step, true)?;
    let mut merged: Vec<Event> = Vec::new();
    for ev in events {
        match (merged.last_mut(), ev) {
            (Some(Event::Data(a)), Event::Data(b)) => *a += b,
            (_, ev) => merged.push(ev),
        }
    }
    Ok(merged)
}

fn conn_code(r: Result<Vec<Event>, Error>) -> Code {
    match r {
        Err(Error::Conn(e)) => e.code,
        other => panic!("expected a connection error, got {other:?}"),
    }
}

fn stream_code(r: Result<Vec<Event>, Error>) -> Code {
    match r {
        Err(Error::Stream(StreamError { code, .. })) => code,
        other => panic!("expected a stream error, got {other:?}"),
    }
}

#[test]
fn a_get_in_any_pieces() {
    let bytes = headers(&GET);
    for step in 1..=bytes.len() {
        let mut r = RequestStream::new(4, 16 * 1024);
        assert_eq!(feed(&mut r, &bytes, step, true), Ok(vec![Event::Headers, Event::End]), "step {step}");
        let f = r.take_fields();
        let got: Vec<(&[u8], &[u8])> = f.iter().collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], (&b":path"[..], &b"/x"[..]));
        assert!(r.is_done());
        assert_eq!(r.recv(b"", true), Ok((0, None)));
    }
    // The fin may come on its own, after the bytes.
    let mut r = RequestStream::new(0, 16 * 1024);
    assert_eq!(feed(&mut r, &bytes, 5, false), Ok(vec![Event::Headers]));
    assert_eq!(feed(&mut r, &[], 1, true), Ok(vec![Event::End]));
}

#[test]
fn bodies_are_counted_and_checked_against_content_length() {
    let mut with_len = GET.to_vec();
    with_len.push(("content-length", "7"));
    let bytes = cat(&[headers(&with_len), data(b"abc"), data(b""), data(b"defg")]);
    for step in [1, 2, 3, 100] {
        assert_eq!(run(&bytes, step), Ok(vec![Event::Headers, Event::Data(7), Event::End]), "step {step}");
    }
    let mut r = RequestStream::new(0, 16 * 1024);
    feed(&mut r, &bytes, 100, true).unwrap();
    assert_eq!((r.received(), r.content_length()), (7, Some(7)));
    let longer = cat(&[headers(&with_len), data(b"abcdefgh")]);
    assert_eq!(stream_code(run(&longer, 100)), Code::MessageError);
    // Refused as soon as the excess arrives, not at the end.
    let mut r = RequestStream::new(0, 16 * 1024);
    assert_eq!(stream_code(feed(&mut r, &longer, 100, false)), Code::MessageError);
    let shorter = cat(&[headers(&with_len), data(b"abc")]);
    assert_eq!(stream_code(run(&shorter, 100)), Code::MessageError);
    // Without content-length, any body.
    assert_eq!(
        run(&cat(&[headers(&GET), data(&[0; 5000])]), 1000),
        Ok(vec![Event::Headers, Event::Data(5000), Event::End])
    );
}

#[test]
fn trailers_after_data_and_nothing_after_them() {
    let trailers = headers(&[("x-checksum", "1")]);
    let ok = cat(&[headers(&GET), data(b"ab"), trailers.clone()]);
    assert_eq!(run(&ok, 1), Ok(vec![Event::Headers, Event::Data(2), Event::End]));
    // Trailers right after the head (no DATA) are trailers too.
    assert_eq!(run(&cat(&[headers(&GET), trailers.clone()]), 3), Ok(vec![Event::Headers, Event::End]));
    assert_eq!(conn_code(run(&cat(&[ok.clone(), data(b"c")]), 4)), Code::FrameUnexpected);
    assert_eq!(conn_code(run(&cat(&[ok.clone(), trailers.clone()]), 4)), Code::FrameUnexpected);
    // Unknown frames are still fine after trailers.
    assert_eq!(run(&cat(&[ok, frame(0x21, b"zz")]), 4), Ok(vec![Event::Headers, Event::Data(2), Event::End]));
    let pseudo = cat(&[headers(&GET), headers(&[(":path", "/y")])]);
    assert_eq!(stream_code(run(&pseudo, 100)), Code::MessageError);
}

#[test]
fn frames_out_of_order_or_out_of_place() {
    assert_eq!(conn_code(run(&data(b"x"), 100)), Code::FrameUnexpected);
    for ty in [0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xd, 0xf0700, 0xf0701] {
        // Before and after the request's HEADERS.
        assert_eq!(conn_code(run(&frame(ty, &[0]), 100)), Code::FrameUnexpected, "{ty:#x}");
        assert_eq!(conn_code(run(&cat(&[headers(&GET), frame(ty, &[0])]), 100)), Code::FrameUnexpected, "{ty:#x}");
    }
    // Unknown and reserved types are skipped anywhere, whatever their length.
    let bytes = cat(&[frame(0x21, &[1; 300]), frame(0x0a, b""), headers(&GET), frame(0xff, b"x"), data(b"y")]);
    assert_eq!(run(&bytes, 7), Ok(vec![Event::Headers, Event::Data(1), Event::End]));
}

#[test]
fn ends_in_the_wrong_place() {
    assert_eq!(stream_code(run(b"", 1)), Code::RequestIncomplete);
    assert_eq!(stream_code(run(&frame(0x21, b"x"), 1)), Code::RequestIncomplete);
    let bytes = cat(&[headers(&GET), data(b"abcd")]);
    for cut in 1..bytes.len() {
        let r = run(&bytes[..cut], 3);
        let at_boundary = cut == headers(&GET).len();
        if at_boundary {
            assert_eq!(r, Ok(vec![Event::Headers, Event::End]));
        } else if cut < headers(&GET).len() {
            assert_eq!(conn_code(r), Code::FrameError, "cut {cut}");
        } else {
            assert!(matches!(r, Err(Error::Conn(e)) if e.code == Code::FrameError), "cut {cut}");
        }
    }
}

#[test]
fn bad_heads() {
    // Malformed (an uppercase name, a missing :path): the stream's error.
    let mut upper = GET.to_vec();
    upper.push(("x-A", "1"));
    let mut section = vec![0, 0];
    for (n, v) in &upper {
        if n.bytes().any(|b| b.is_ascii_uppercase()) {
            section.extend_from_slice(&[0x23, b'x', b'-', b'A', 0x01, b'1']);
        } else {
            encode_field(n.as_bytes(), v.as_bytes(), &mut section);
        }
    }
    assert_eq!(stream_code(run(&frame(0x1, &section), 100)), Code::MessageError);
    assert_eq!(stream_code(run(&headers(&GET[..3]), 100)), Code::MessageError);
    // Bad QPACK: the connection's. An empty HEADERS frame has no section prefix.
    assert_eq!(conn_code(run(&frame(0x1, &[0x01, 0x00]), 100)), Code::QpackDecompressionFailed);
    assert_eq!(conn_code(run(&frame(0x1, &[0, 0, 0x80]), 100)), Code::QpackDecompressionFailed);
    assert_eq!(conn_code(run(&frame(0x1, &[]), 100)), Code::QpackDecompressionFailed);
}

#[test]
fn heads_too_large_get_431_and_the_stream_reads_on() {
    // The frame larger than the limit: skipped unread.
    let mut big = GET.to_vec();
    let long = "v".repeat(300);
    big.push(("x-long", &long));
    let bytes = cat(&[headers(&big), data(b"ab")]);
    let mut r = RequestStream::new(0, 200);
    assert_eq!(feed(&mut r, &bytes, 7, true), Ok(vec![Event::HeadersTooLarge, Event::Data(2), Event::End]));
    assert_eq!(r.fields().iter().count(), 0);
    // A small frame that decodes large (one byte per 42-byte field).
    let mut many = GET.to_vec();
    many.extend([(":method", "GET"); 10]);
    let h = headers(&many);
    assert!(h.len() < 200);
    let mut r = RequestStream::new(0, 200);
    assert_eq!(feed(&mut r, &h, 100, true), Ok(vec![Event::HeadersTooLarge, Event::End]));
    // Just within: fine (the size counts name + value + 32 per field).
    let size: u64 = GET.iter().map(|(n, v)| (n.len() + v.len() + 32) as u64).sum();
    let mut r = RequestStream::new(0, size);
    assert_eq!(feed(&mut r, &headers(&GET), 100, true), Ok(vec![Event::Headers, Event::End]));
    let mut r = RequestStream::new(0, size - 1);
    assert_eq!(feed(&mut r, &headers(&GET), 100, true), Ok(vec![Event::HeadersTooLarge, Event::End]));
}

proptest! {
    /// The events do not depend on how the bytes are cut (Data merged).
    #[test]
    fn split_anywhere(cuts in proptest::collection::vec(0usize..200, 0..8), body in 0usize..100) {
        let mut with_len = GET.to_vec();
        let len = body.to_string();
        with_len.push(("content-length", &len));
        let bytes = cat(&[frame(0x21, b"g"), headers(&with_len), data(&vec![1; body / 2]), frame(0x40, b""),
            data(&vec![2; body - body / 2]), headers(&[("x-t", "1")])]);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        cuts.sort();
        let mut r = RequestStream::new(0, 16 * 1024);
        let mut events = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain([bytes.len()].iter()) {
            events.extend(feed(&mut r, &bytes[last..c], usize::MAX, c == bytes.len()).unwrap());
            last = c;
        }
        let total: u64 = events.iter().map(|e| if let Event::Data(n) = e { *n } else { 0 }).sum();
        events.retain(|e| !matches!(e, Event::Data(_)));
        prop_assert_eq!(events, vec![Event::Headers, Event::End]);
        prop_assert_eq!(total, body as u64);
    }

    /// Arbitrary bytes never panic a request stream, in any pieces.
    #[test]
    fn request_streams_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), step in 1usize..20) {
        let mut r = RequestStream::new(0, 300);
        let _ = feed(&mut r, &bytes, step, true);
    }

    /// Nor the control stream.
    #[test]
    fn control_streams_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), step in 1usize..20) {
        let mut s = Session::new(Config::default());
        let mut all = vec![0x00, 0x04, 0x00];
        all.extend_from_slice(&bytes);
        let _ = uni(&mut s, 2, &all, step, true);
    }
}

/// Feeds a uni stream in pieces of `step`; the events, or the error.
fn uni(s: &mut Session, id: u64, bytes: &[u8], step: usize, fin: bool) -> Result<Vec<UniEvent>, ConnError> {
    let mut events = Vec::new();
    let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(step).collect() };
    let last = chunks.len() - 1;
    for (i, mut chunk) in chunks.into_iter().enumerate() {
        loop {
            let (n, ev) = s.on_uni_stream_data(id, chunk, fin && i == last)?;
            chunk = &chunk[n..];
            match ev {
                Some(UniEvent::Ignore) => {
                    events.push(UniEvent::Ignore);
                    return Ok(events);
                }
                Some(ev) => events.push(ev),
                None => break,
            }
        }
    }
    Ok(events)
}

fn control(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0x00];
    for f in frames {
        out.extend_from_slice(f);
    }
    out
}

fn settings(pairs: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_settings(pairs, &mut out);
    out
}

fn priority_update(ty: u64, id: u64, value: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    varint::encode(id, &mut payload);
    payload.extend_from_slice(value);
    frame(ty, &payload)
}

fn uni_code(r: Result<Vec<UniEvent>, ConnError>) -> Code {
    match r {
        Err(e) => e.code,
        Ok(ev) => panic!("expected an error, got {ev:?}"),
    }
}

#[test]
fn our_control_stream_reads_back() {
    for grease in [None, Some(0x1234_5678_9abc_def0)] {
        let s = Session::new(Config { max_field_section_size: 16384, grease });
        let mut out = Vec::new();
        s.control_stream_preamble(&mut out);
        if grease.is_none() {
            assert_eq!(out, [0x00, 0x04, 0x09, 0x01, 0x00, 0x07, 0x00, 0x06, 0x80, 0x00, 0x40, 0x00]);
        }
        // Read by another session, as a peer would (the rules are the same both ways).
        let mut peer = Session::new(Config::default());
        assert_eq!(uni(&mut peer, 3, &out, 1, false), Ok(vec![UniEvent::Settings]));
        let p = peer.peer_settings();
        assert_eq!((p.max_field_section_size, p.qpack_max_table_capacity, p.qpack_blocked_streams), (16384, 0, 0));
    }
}

#[test]
fn control_stream_frames() {
    let mut s = Session::new(Config::default());
    assert!(!s.has_peer_settings());
    assert_eq!(s.peer_settings().max_field_section_size, u64::MAX);
    let bytes = control(&[
        settings(&[(0x6, 1000), (0x21, 7)]),
        frame(0x21, &[9; 10]),
        priority_update(0xf0700, 8, b"u=1, i"),
        frame(0xd, &[0x05]),
        priority_update(0xf0701, 3, b"u=0"),
        frame(0x7, &[0x04]),
        frame(0x7, &[0x04]),
        frame(0x7, &[0x00]),
    ]);
    let events = uni(&mut s, 2, &bytes, 1, false).unwrap();
    assert_eq!(
        events,
        vec![
            UniEvent::Settings,
            UniEvent::Priority { stream: 8, priority: Priority { urgency: 1, incremental: true } },
            UniEvent::GoAway(4),
            UniEvent::GoAway(4),
            UniEvent::GoAway(0),
        ]
    );
    assert_eq!((s.peer_settings().max_field_section_size, s.peer_goaway()), (1000, Some(0)));
    // The peer's limit bounds our heads.
    let mut out = Vec::new();
    let long = [(&b"x-long"[..], &[b'a'; 1000][..])];
    assert!(s.encode_response_head(200, long, &mut out).is_err());
    assert!(s.encode_response_head(200, [], &mut out).is_ok());
    // And closing it is an error.
    assert_eq!(uni_code(uni(&mut s, 2, b"", 1, true)), Code::ClosedCriticalStream);
}

#[test]
fn control_stream_errors() {
    let run = |frames: &[Vec<u8>]| uni_code(uni(&mut Session::new(Config::default()), 2, &control(frames), 3, false));
    let s0 = settings(&[]);
    assert_eq!(run(&[frame(0x7, &[0])]), Code::MissingSettings);
    assert_eq!(run(&[frame(0x21, b"")]), Code::MissingSettings);
    assert_eq!(run(&[s0.clone(), s0.clone()]), Code::FrameUnexpected);
    for ty in [0x0, 0x1, 0x2, 0x5, 0x6, 0x8, 0x9] {
        assert_eq!(run(&[s0.clone(), frame(ty, b"x")]), Code::FrameUnexpected, "{ty:#x}");
    }
    assert_eq!(run(&[settings(&[(0x4, 1)])]), Code::SettingsError);
    assert_eq!(run(&[settings(&[(0x6, 1), (0x6, 1)])]), Code::SettingsError);
    assert_eq!(run(&[frame(0x4, &[0x06])]), Code::FrameError);
    assert_eq!(run(&[s0.clone(), frame(0x7, &[0x04]), frame(0x7, &[0x08])]), Code::IdError);
    assert_eq!(run(&[s0.clone(), frame(0xd, &[0x04]), frame(0xd, &[0x03])]), Code::IdError);
    assert_eq!(run(&[s0.clone(), frame(0x3, &[0x00])]), Code::IdError);
    assert_eq!(run(&[s0.clone(), priority_update(0xf0700, 2, b"u=1")]), Code::IdError);
    assert_eq!(run(&[s0.clone(), priority_update(0xf0701, 0, b"u=1")]), Code::IdError);
    assert_eq!(run(&[s0.clone(), frame(0xd, &[0x01]), priority_update(0xf0701, 2, b"")]), Code::IdError);
    assert_eq!(run(&[s0.clone(), frame(0x7, &[0; 9])]), Code::FrameError);
    assert_eq!(run(&[s0.clone(), frame(0x7, &[0x04, 0x00])]), Code::FrameError);
    assert_eq!(run(&[s0.clone(), frame(0x7, &[])]), Code::FrameError);
    assert_eq!(run(&[s0.clone(), frame(0xf0700, &[0; 4097])]), Code::ExcessiveLoad);
    assert_eq!(run(&[settings(&(0..2000).map(|i| (0x21 + 0x1f * i, 0)).collect::<Vec<_>>())]), Code::ExcessiveLoad);
    // A reset of the control stream closes the connection too.
    let mut s = Session::new(Config::default());
    uni(&mut s, 2, &control(std::slice::from_ref(&s0)), 100, false).unwrap();
    assert_eq!(s.on_uni_stream_reset(2).map_err(|e| e.code), Err(Code::ClosedCriticalStream));
}

#[test]
fn stream_types() {
    let mut s = Session::new(Config::default());
    // Types arrive in pieces; a reserved type (0x21, in two bytes) and an unknown one are
    // ignored, and forgotten.
    assert_eq!(s.on_uni_stream_data(6, &[0x40], false), Ok((1, None)));
    assert_eq!(s.on_uni_stream_data(6, &[0x21, 0xff], false), Ok((1, Some(UniEvent::Ignore))));
    assert_eq!(uni(&mut s, 10, &[0x54, 1, 2, 3], 1, false), Ok(vec![UniEvent::Ignore]));
    assert!(s.pending.is_empty());
    // A stream that ends before its type is tolerated.
    assert_eq!(uni(&mut s, 14, &[0x80, 0x00], 1, true), Ok(vec![]));
    assert!(s.pending.is_empty());
    // Control, encoder and decoder: one each.
    uni(&mut s, 2, &control(&[settings(&[])]), 1, false).unwrap();
    uni(&mut s, 18, &[0x02, 0x20], 1, false).unwrap();
    uni(&mut s, 22, &[0x03, 0x44, 0x7f, 0x80, 0x01], 1, false).unwrap();
    let mut fresh = |id, bytes: &[u8]| uni_code(uni(&mut s, id, bytes, 1, false));
    assert_eq!(fresh(26, &[0x00]), Code::StreamCreationError);
    assert_eq!(fresh(30, &[0x02]), Code::StreamCreationError);
    assert_eq!(fresh(34, &[0x03]), Code::StreamCreationError);
    assert_eq!(fresh(38, &[0x01]), Code::StreamCreationError);
    assert_eq!(uni_code(uni(&mut s, 18, &[0x21], 1, false)), Code::QpackEncoderStreamError);
    assert_eq!(uni_code(uni(&mut s, 22, &[0x81], 1, false)), Code::QpackDecoderStreamError);
    assert_eq!(uni_code(uni(&mut s, 18, &[], 1, true)), Code::ClosedCriticalStream);
    assert_eq!(uni_code(uni(&mut s, 22, &[], 1, true)), Code::ClosedCriticalStream);
    assert_eq!(s.on_uni_stream_reset(18).map_err(|e| e.code), Err(Code::ClosedCriticalStream));
    assert_eq!(s.on_uni_stream_reset(22).map_err(|e| e.code), Err(Code::ClosedCriticalStream));
    assert_eq!(s.on_uni_stream_reset(42), Ok(()));
}

#[test]
fn goaway_and_accepts() {
    let mut s = Session::new(Config::default());
    assert!(s.accepts(400));
    let mut out = Vec::new();
    s.goaway(8, &mut out);
    s.goaway(12, &mut out);
    assert_eq!(out, [0x07, 0x01, 0x08, 0x07, 0x01, 0x08]);
    assert_eq!(s.goaway_sent(), Some(8));
    assert!(s.accepts(4) && !s.accepts(8) && !s.accepts(12));
    assert_eq!(s.request_stream(4).id(), 4);
}

/// What does no work is counted for the caller's flood budget: on a request stream unknown
/// frames and empty DATA (not a HEADERS, a DATA with bytes or the end); on the peer's
/// unidirectional streams control frames after SETTINGS, QPACK instructions with no
/// effect, streams of unknown types or ended before their type.
#[test]
fn frames_that_do_no_work_are_counted() {
    let mut r = RequestStream::new(0, 16 * 1024);
    let bytes = cat(&[frame(0x21, b""), frame(0x40, b"ab"), headers(&GET), data(b""), data(b"x"), data(b"")]);
    feed(&mut r, &bytes, 1, false).unwrap();
    assert_eq!((r.take_idle(), r.take_idle()), (4, 0));
    let mut s = Session::new(Config::default());
    let bytes = control(&[
        settings(&[]),
        frame(0x21, b""),
        priority_update(0xf0700, 8, b"u=1"),
        frame(0xd, &[0x05]),
        frame(0x7, &[0x04]),
    ]);
    uni(&mut s, 2, &bytes, 1, false).unwrap();
    assert_eq!(s.take_idle(), 4);
    // Set Dynamic Table Capacity 0 twice; two Stream Cancellations.
    uni(&mut s, 6, &[0x02, 0x20, 0x20], 1, false).unwrap();
    uni(&mut s, 10, &[0x03, 0x44, 0x48], 1, false).unwrap();
    assert_eq!(s.take_idle(), 4);
    assert_eq!(uni(&mut s, 14, &[0x21, 1, 2], 1, false), Ok(vec![UniEvent::Ignore]));
    uni(&mut s, 18, &[0x40], 1, true).unwrap();
    assert_eq!((s.take_idle(), s.take_idle()), (2, 0));
}
