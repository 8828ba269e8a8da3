//! The invariants of the `hpack_decode` fuzz target (`h2::hpack`), shared with `tests/fuzz.rs`
//! like `checks.rs`; a file of its own because the module exists only with the `http2`
//! feature.

use ferrohttpd::h2::hpack::{DecodeError, Decoder, Encoder};

/// The `hpack_decode` target. Bytes 0-1: the decoder's table limit (little-endian, so
/// 0..=65535); byte 2: the header list limit, in units of 64 bytes (0: 64); byte 3: the
/// length of each header block (0: the rest is one block); the rest: the blocks, decoded in
/// order by one decoder, as on one connection.
///
/// Checks: no panic; the dynamic table never above its limit; the fields handed out never
/// add up (RFC 9113 §6.5.2 sizes) to more than the list limit; and every block that
/// decodes, its fields encoded again by one `Encoder` and decoded by a second `Decoder`,
/// gives back the same list (names that are not lowercase skip this step: the encoder
/// requires lowercase).
pub fn check_hpack_decode(data: &[u8]) -> Result<(), String> {
    if data.len() < 4 {
        return Ok(());
    }
    let limit = u16::from_le_bytes([data[0], data[1]]) as usize;
    let max_list = (data[2] as usize + 1) * 64;
    let step = if data[3] == 0 { usize::MAX } else { data[3] as usize };
    let mut rest = &data[4..];
    let mut d = Decoder::new(limit);
    let mut e = Encoder::new();
    let mut d2 = Decoder::new(4096);
    while !rest.is_empty() {
        let (block, tail) = rest.split_at(step.min(rest.len()));
        rest = tail;
        let mut list: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut handed = 0usize;
        let r = d.decode(block, max_list, |n, v, _| {
            handed += n.len() + v.len() + 32;
            list.push((n.to_vec(), v.to_vec()));
            Ok::<(), ()>(())
        });
        if d.dynamic_table_size() > limit {
            return Err(format!("table size {} above the limit {limit}", d.dynamic_table_size()));
        }
        if handed > max_list {
            return Err(format!("{handed} bytes of fields handed out, limit {max_list}"));
        }
        match r {
            Ok(()) => {}
            Err(DecodeError::ListTooLarge) => continue,
            Err(DecodeError::Compression(_)) => return Ok(()),
            Err(DecodeError::Field(())) => return Err("Field error from a callback that never fails".into()),
        }
        if list.iter().any(|(n, _)| n.iter().any(u8::is_ascii_uppercase)) {
            continue;
        }
        let mut out = Vec::new();
        for (n, v) in &list {
            e.encode(n, v, &mut out);
        }
        let mut again = Vec::new();
        d2.decode(&out, usize::MAX, |n, v, _| {
            again.push((n.to_vec(), v.to_vec()));
            Ok::<(), ()>(())
        })
        .map_err(|err| format!("our own encoding of {} fields does not decode: {err:?}", list.len()))?;
        if again != list {
            return Err(format!("re-encoded list differs: {} fields in, {} out", list.len(), again.len()));
        }
        if d2.dynamic_table_size() != e.dynamic_table_size() {
            return Err("encoder and decoder tables out of step".into());
        }
    }
    Ok(())
}
