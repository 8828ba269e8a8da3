//! The invariants of the HTTP/3 fuzz targets `h3_frame` (`h3::stream`'s frame readers:
//! a request stream, or a peer's unidirectional stream through `h3::Session`) and
//! `qpack_decode` (`h3::qpack`), shared with `tests/fuzz.rs` like `checks.rs`; a file of its
//! own because the modules exist only with the `http3` feature.

use ferrohttpd::h3::qpack::{self, DecodeError, Decoder};
use ferrohttpd::h3::stream::{Config, Event, RequestStream, Session, UniEvent};
use ferrohttpd::h3::Error;

/// What a whole stream gave: the events (request body counts merged) and how it ended.
#[derive(Debug, PartialEq)]
enum Outcome<E> {
    Events(Vec<E>),
    Failed(Vec<E>, String),
}

/// Feeds `bytes` to `recv` in pieces of `step` (0: one piece), the last with fin, checking
/// the calling contract: `n` never beyond the piece, `None` only once the piece is used up.
fn drive<E: PartialEq + std::fmt::Debug, X: std::fmt::Display>(
    bytes: &[u8],
    step: usize,
    mut recv: impl FnMut(&[u8], bool) -> Result<(usize, Option<E>), X>,
    merge: impl Fn(&mut Vec<E>, E),
    stop: impl Fn(&E) -> bool,
) -> Result<Outcome<E>, String> {
    let step = if step == 0 { bytes.len().max(1) } else { step };
    let pieces: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(step).collect() };
    let last = pieces.len() - 1;
    let mut events = Vec::new();
    for (i, mut piece) in pieces.into_iter().enumerate() {
        let fin = i == last;
        // Each call consumes bytes or gives an event; the bound only catches a loop.
        for _ in 0..=2 * piece.len() + 4 {
            let (n, ev) = match recv(piece, fin) {
                Ok(r) => r,
                Err(e) => return Ok(Outcome::Failed(events, e.to_string())),
            };
            if n > piece.len() {
                return Err(format!("consumed {n} of a {}-byte piece", piece.len()));
            }
            piece = &piece[n..];
            match ev {
                None if !piece.is_empty() => return Err("None with bytes left".into()),
                None => break,
                Some(ev) => {
                    let end = stop(&ev);
                    merge(&mut events, ev);
                    if end {
                        return Ok(Outcome::Events(events));
                    }
                }
            }
        }
        if !piece.is_empty() {
            return Err("no progress".into());
        }
    }
    Ok(Outcome::Events(events))
}

fn merge_data(events: &mut Vec<Event>, ev: Event) {
    match (events.last_mut(), ev) {
        (Some(Event::Data(a)), Event::Data(b)) => *a += b,
        (_, ev) => events.push(ev),
    }
}

/// The `h3_frame` target. Byte 0: the piece length (0: the whole input at once); byte 1:
/// bit 0 clear, a request stream whose field section limit is (byte 1 >> 1) * 16 + 40;
/// set, a peer's unidirectional stream (its type first) read by a `Session`; the rest: the
/// stream's bytes, ended with fin.
///
/// Checks: no panic, the calling contract (see `drive`), the same events and outcome
/// whatever the pieces (against one whole piece, request body counts merged; when the
/// stream fails, the same error and the same events but for body counts); for a request
/// stream: at most one head event, first; the body counted is at most the input; `End`
/// last, and only once the stream is done; fields handed over validate and stay within the
/// limit; for a unidirectional stream: `Settings` at most once, first, and `Ignore` ends it.
pub fn check_h3_frame(data: &[u8]) -> Result<(), String> {
    if data.len() < 2 {
        return Ok(());
    }
    let step = usize::from(data[0]);
    let bytes = &data[2..];
    if data[1] & 1 == 0 {
        let limit = u64::from(data[1] >> 1) * 16 + 40;
        let run = |step| -> Result<(Outcome<Event>, RequestStream), String> {
            let mut r = RequestStream::new(0, limit);
            let mut fields_ok = Ok(());
            let out = drive(
                bytes,
                step,
                |b, fin| {
                    let res = r.recv(b, fin);
                    if let Ok((_, Some(Event::Headers))) = res {
                        let size: u64 = r.fields().iter().map(|(n, v)| qpack::field_size(n, v)).sum();
                        if size > limit {
                            fields_ok = Err(format!("fields of {size} bytes handed over, limit {limit}"));
                        } else if r.fields().validate().is_err() {
                            fields_ok = Err("fields handed over that do not validate".to_string());
                        }
                    }
                    res.map_err(|e: Error| e)
                },
                merge_data,
                |_| false,
            )?;
            fields_ok?;
            Ok((out, r))
        };
        let (whole, _) = run(0)?;
        let (pieces, r) = run(step)?;
        // A stream that fails may have reported body bytes first when they came in pieces
        // (a body longer than its content-length is only known so once the excess comes):
        // then the error and the other events must agree.
        let same = match (&whole, &pieces) {
            (Outcome::Failed(a, x), Outcome::Failed(b, y)) => {
                let heads =
                    |e: &Vec<Event>| e.iter().filter(|e| !matches!(e, Event::Data(_))).copied().collect::<Vec<_>>();
                x == y && heads(a) == heads(b)
            }
            _ => whole == pieces,
        };
        if !same {
            return Err(format!("whole: {whole:?}; in pieces of {step}: {pieces:?}"));
        }
        let events = match &pieces {
            Outcome::Events(e) | Outcome::Failed(e, _) => e,
        };
        for (i, ev) in events.iter().enumerate() {
            match ev {
                Event::Headers | Event::HeadersTooLarge if i != 0 => return Err(format!("head event at {i}")),
                Event::End if i + 1 != events.len() || !r.is_done() => return Err("End not last".into()),
                Event::Data(n) if *n > bytes.len() as u64 => return Err(format!("{n} body bytes from less")),
                _ => {}
            }
        }
        if matches!(pieces, Outcome::Events(_)) && events.last() != Some(&Event::End) {
            return Err("a request stream ended without End or an error".into());
        }
    } else {
        let run = |step| -> Result<Outcome<UniEvent>, String> {
            let mut s = Session::new(Config::default());
            drive(
                bytes,
                step,
                |b, fin| s.on_uni_stream_data(2, b, fin),
                |e, ev| e.push(ev),
                |ev| *ev == UniEvent::Ignore,
            )
        };
        let whole = run(0)?;
        let pieces = run(step)?;
        if whole != pieces {
            return Err(format!("whole: {whole:?}; in pieces of {step}: {pieces:?}"));
        }
        let events = match &pieces {
            Outcome::Events(e) | Outcome::Failed(e, _) => e,
        };
        if events.iter().skip(1).any(|e| *e == UniEvent::Settings) {
            return Err("Settings twice, or not first".into());
        }
    }
    Ok(())
}

/// The `qpack_decode` target. Bytes 0-1: the field section size limit (little-endian);
/// the rest: one field section.
///
/// Checks: no panic; the fields handed out never add up (RFC 9114 §4.2.2 sizes) to more
/// than the limit; whether the section is valid QPACK does not depend on the limit; and a
/// section that decodes, its fields encoded again by `encode_field` (names that are not
/// lowercase skip this: the encoder requires lowercase), decodes to the same list, in no
/// more bytes than the fields' counted size.
pub fn check_qpack_decode(data: &[u8]) -> Result<(), String> {
    if data.len() < 2 {
        return Ok(());
    }
    let max = u64::from(u16::from_le_bytes([data[0], data[1]]));
    let section = &data[2..];
    let mut d = Decoder::new();
    let mut handed = 0;
    let limited = d.decode(section, max, |n, v| {
        handed += qpack::field_size(n, v);
        Ok::<(), ()>(())
    });
    if handed > max {
        return Err(format!("{handed} bytes of fields handed out, limit {max}"));
    }
    let mut list: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let unlimited = d.decode(section, u64::MAX, |n, v| {
        list.push((n.to_vec(), v.to_vec()));
        Ok::<(), ()>(())
    });
    match (&limited, &unlimited) {
        (Err(DecodeError::Decompression(a)), Err(DecodeError::Decompression(b))) if a == b => return Ok(()),
        (Ok(()) | Err(DecodeError::TooLarge), Ok(())) => {}
        _ => return Err(format!("limit {max}: {limited:?}; no limit: {unlimited:?}")),
    }
    if list.iter().any(|(n, _)| n.iter().any(u8::is_ascii_uppercase)) {
        return Ok(());
    }
    let mut out = vec![0, 0];
    for (n, v) in &list {
        qpack::encode_field(n, v, &mut out);
    }
    let mut again = Vec::new();
    d.decode(&out, u64::MAX, |n, v| {
        again.push((n.to_vec(), v.to_vec()));
        Ok::<(), ()>(())
    })
    .map_err(|e| format!("our own encoding of {} fields does not decode: {e:?}", list.len()))?;
    if again != list {
        return Err(format!("re-encoded list differs: {} fields in, {} out", list.len(), again.len()));
    }
    let counted: u64 = list.iter().map(|(n, v)| qpack::field_size(n, v)).sum();
    if out.len() as u64 > counted + 2 {
        return Err(format!("{} bytes encode {counted} bytes of fields", out.len()));
    }
    Ok(())
}
