//! The primitive representations of RFC 7541 §5 that HPACK defines and QPACK reuses (RFC 9204
//! §4.1.1, §4.1.2): prefixed integers (§5.1) and string literals (§5.2), read and written.
//! HTTP/2's `h2::hpack` and HTTP/3's `h3::qpack` share this one copy, as they share
//! `http::huffman`.
//!
//! The two protocols differ only in what a decoder accepts, so that is a parameter
//! ([`Rules`]): the largest integer (HPACK: `u32::MAX`, more than any HPACK quantity needs;
//! QPACK: 2^62 - 1, what §4.1.1 requires a decoder to take), how many continuation bytes an
//! integer may have, and the wording of the errors. A string's length prefix is 7 bits in
//! HPACK and 7 or 3 in QPACK (a literal name), with the Huffman flag in the bit above it.
//!
//! Errors are `&'static str`: the caller wraps them in its protocol's error (HPACK's
//! COMPRESSION_ERROR, QPACK's decompression failure).

use crate::http::huffman;

/// What one protocol's decoder accepts.
pub struct Rules {
    /// Integers above this are refused ("integer overflow").
    pub max: u64,
    /// The shift of the last continuation byte an integer may have (7 × their count - 7).
    pub last_shift: u32,
    /// Whether a continuation bit on that last byte is refused at once (HPACK), or only once
    /// the byte it announces is there (QPACK, which reports a truncation first).
    pub refuse_at_last: bool,
    /// The error when a string literal is expected and the input has ended.
    pub string_expected: &'static str,
    /// The error when a string's length passes the end of the input.
    pub string_beyond: &'static str,
}

/// Where a decoded string is: a constant (a static table's), the input, or the scratch buffer
/// (Huffman-decoded, or copied there by the caller).
pub enum Str {
    Static(&'static [u8]),
    Input(usize, usize),
    Scratch(usize, usize),
}

impl Str {
    pub fn get<'a>(&self, input: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match *self {
            Str::Static(s) => s,
            Str::Input(a, b) => &input[a..b],
            Str::Scratch(a, b) => &scratch[a..b],
        }
    }
}

/// Reads an integer with an `n`-bit prefix at `buf[*pos]` (§5.1), which must exist.
#[inline]
pub fn integer(buf: &[u8], pos: &mut usize, n: u32, rules: &Rules) -> Result<u64, &'static str> {
    let mask = ((1u16 << n) - 1) as u8;
    let mut v = u64::from(buf[*pos] & mask);
    *pos += 1;
    if v < u64::from(mask) {
        return Ok(v);
    }
    let mut shift = 0;
    loop {
        let Some(&b) = buf.get(*pos) else { return Err("truncated integer") };
        *pos += 1;
        if shift > rules.last_shift {
            return Err("integer overflow");
        }
        v = v.checked_add(u64::from(b & 0x7f) << shift).ok_or("integer overflow")?;
        if b & 0x80 == 0 {
            break;
        }
        if rules.refuse_at_last && shift == rules.last_shift {
            return Err("integer overflow");
        }
        shift += 7;
    }
    if v > rules.max {
        return Err("integer overflow");
    }
    Ok(v)
}

/// Reads a string literal whose Huffman flag is the bit above an `n`-bit length prefix
/// (§5.2); a Huffman-coded one is decoded onto `scratch`.
#[inline]
pub fn string(buf: &[u8], pos: &mut usize, n: u32, rules: &Rules, scratch: &mut Vec<u8>) -> Result<Str, &'static str> {
    let Some(&b) = buf.get(*pos) else { return Err(rules.string_expected) };
    let len = integer(buf, pos, n, rules)?;
    let rest = (buf.len() - *pos) as u64;
    if len > rest {
        return Err(rules.string_beyond);
    }
    let (start, end) = (*pos, *pos + len as usize);
    *pos = end;
    if b & (1 << n) == 0 {
        return Ok(Str::Input(start, end));
    }
    let from = scratch.len();
    huffman::decode(&buf[start..end], scratch)?;
    Ok(Str::Scratch(from, scratch.len()))
}

/// A decoder's Huffman scratch buffer is given back after a field section that grew it past
/// this (one large section must not keep its memory for the connection's life).
const SCRATCH_KEEP: usize = 16 * 1024;

/// Gives back `scratch` if the section just decoded grew it past [`SCRATCH_KEEP`].
pub fn release_scratch(scratch: &mut Vec<u8>) {
    if scratch.capacity() > SCRATCH_KEEP {
        *scratch = Vec::new();
    }
}

/// Writes `v` with an `n`-bit prefix; `flags` holds the representation's leading bits.
pub fn write_integer(out: &mut Vec<u8>, flags: u8, n: u32, v: usize) {
    let mask = (1usize << n) - 1;
    if v < mask {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut v = v - mask;
    while v >= 0x80 {
        out.push(0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes a string literal with an `n`-bit length prefix under `flags`: Huffman-coded (the
/// bit above the prefix) when `coded` is its Huffman length, as it is otherwise. Which to
/// choose is the protocol's (HPACK breaks a tie for Huffman, QPACK for the plain bytes).
pub fn write_string(out: &mut Vec<u8>, flags: u8, n: u32, s: &[u8], coded: Option<usize>) {
    match coded {
        Some(coded) => {
            write_integer(out, flags | 1 << n, n, coded);
            huffman::encode(s, out);
        }
        None => {
            write_integer(out, flags, n, s.len());
            out.extend_from_slice(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QPACK's bounds and HPACK's (the protocols' own constants, with neutral wording).
    const WIDE: Rules = rules((1 << 62) - 1, 56, false);
    const NARROW: Rules = rules(u32::MAX as u64, 28, true);

    const fn rules(max: u64, last_shift: u32, refuse_at_last: bool) -> Rules {
        Rules { max, last_shift, refuse_at_last, string_expected: "string expected", string_beyond: "beyond" }
    }

    fn read(buf: &[u8], n: u32, rules: &Rules) -> Result<u64, &'static str> {
        let mut pos = 0;
        let v = integer(buf, &mut pos, n, rules)?;
        assert_eq!(pos, buf.len(), "{buf:02x?}: not all read");
        Ok(v)
    }

    #[test]
    fn integers_round_trip_at_every_prefix_and_bound() {
        for n in 1..=8 {
            for v in [0, 1, 30, 31, 126, 127, 128, 254, 255, 1337, 1 << 20, u32::MAX as usize] {
                let mut out = Vec::new();
                write_integer(&mut out, 0, n, v);
                assert_eq!(read(&out, n, &NARROW), Ok(v as u64), "n {n}, v {v}");
                assert_eq!(read(&out, n, &WIDE), Ok(v as u64), "n {n}, v {v}");
            }
        }
        let mut out = Vec::new();
        write_integer(&mut out, 0, 6, (1 << 62) - 1);
        assert_eq!(read(&out, 6, &WIDE), Ok((1 << 62) - 1));
        assert_eq!(read(&out, 6, &NARROW), Err("integer overflow"));
        out.clear();
        write_integer(&mut out, 0, 6, 1 << 62);
        assert_eq!(read(&out, 6, &WIDE), Err("integer overflow"));
        out.clear();
        write_integer(&mut out, 0, 6, u32::MAX as usize + 1);
        assert_eq!(read(&out, 6, &NARROW), Err("integer overflow"));
    }

    #[test]
    fn the_continuation_limit_and_truncation() {
        // The last continuation byte allowed, with its continuation bit: HPACK refuses it at
        // once; QPACK reports the truncation, and the overflow once the next byte is there.
        let mut five = vec![0xff, 0x80, 0x80, 0x80, 0x80, 0x80];
        assert_eq!(integer(&five, &mut 0, 8, &NARROW), Err("integer overflow"));
        five.push(0x00);
        assert_eq!(integer(&five, &mut 0, 8, &NARROW), Err("integer overflow"));
        let mut nine = vec![0xff];
        nine.extend_from_slice(&[0x80; 9]);
        assert_eq!(integer(&nine, &mut 0, 8, &WIDE), Err("truncated integer"));
        nine.push(0x00);
        assert_eq!(integer(&nine, &mut 0, 8, &WIDE), Err("integer overflow"));
        // Within the limit, leading zeros are fine.
        assert_eq!(read(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x00], 8, &NARROW), Ok(255));
        assert_eq!(integer(&[0xff], &mut 0, 8, &NARROW), Err("truncated integer"));
        assert_eq!(integer(&[0x1f, 0x80], &mut 0, 5, &WIDE), Err("truncated integer"));
    }

    #[test]
    fn strings_plain_huffman_and_their_errors() {
        let mut scratch = Vec::new();
        for n in [3, 7] {
            for s in [&b""[..], b"a", b"www.example.com", b"no-cache, private"] {
                for huff in [false, true] {
                    let mut out = Vec::new();
                    let coded = huff.then(|| huffman::encoded_len(s));
                    write_string(&mut out, 0, n, s, coded);
                    assert_eq!(out[0] & (1 << n) != 0, huff);
                    scratch.clear();
                    let mut pos = 0;
                    let got = string(&out, &mut pos, n, &WIDE, &mut scratch).unwrap();
                    assert_eq!(pos, out.len());
                    assert_eq!(got.get(&out, &scratch), s);
                }
            }
        }
        assert_eq!(string(&[], &mut 0, 7, &WIDE, &mut scratch).err(), Some("string expected"));
        assert_eq!(string(&[0x02, b'a'], &mut 0, 7, &WIDE, &mut scratch).err(), Some("beyond"));
        assert_eq!(string(&[0x7f], &mut 0, 7, &NARROW, &mut scratch).err(), Some("truncated integer"));
        // The Huffman flag is the bit above the prefix: 0x08 for a 3-bit prefix.
        assert_eq!(
            string(&[0x09, 0xff], &mut 0, 3, &WIDE, &mut scratch).err(),
            Some("Huffman padding longer than 7 bits")
        );
    }
}
