//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B), which QPACK uses unchanged (RFC 9204
//! §4.1.2): HTTP/2's `h2::hpack` and HTTP/3's `h3::qpack` share this one copy.
//!
//! The code is canonical: within one code length, codes are consecutive and ordered by
//! symbol, and the first code of each length follows the last code of the previous length.
//! So the 257 code lengths of Appendix B are the whole table; the codes, the decoding
//! tables and the encoder's table are derived from them at compile time (`const fn`), and a
//! unit test checks the derived codes against Appendix B.
//!
//! Decoding keeps up to 64 bits left-aligned in an accumulator, refilled eight input bytes at
//! a time. The top 12 bits index a 4,096-entry table (16 KiB) that gives the one or two
//! symbols whose codes they start with, when the first code is at most 12 bits long: the
//! letters, digits and punctuation of header values take 5 to 8 bits, so a step usually
//! yields two octets. Longer codes fall back to a canonical search by length from 13 to 30
//! bits. The string's end is checked as §5.2 requires: the bits left over must be fewer than
//! 8 and all ones (a prefix of EOS), and an EOS symbol inside the string is an error.

/// Code length in bits of each symbol 0..=255 and EOS (256), RFC 7541 Appendix B.
const LENS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // ' '..'/'
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // '0'..'?'
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // '@'..'O'
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 'P'..'_'
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // '`'..'o'
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 'p'..0x7f
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

const EOS: u16 = 256;
const MIN_LEN: usize = 5;
const MAX_LEN: usize = 30;

/// The canonical code of each symbol, right-aligned in `LENS[sym]` bits.
const CODES: [u32; 257] = {
    let mut codes = [0u32; 257];
    let mut code = 0u32;
    let mut len = MIN_LEN;
    while len <= MAX_LEN {
        let mut sym = 0;
        while sym < 257 {
            if LENS[sym] as usize == len {
                codes[sym] = code;
                code += 1;
            }
            sym += 1;
        }
        code <<= 1;
        len += 1;
    }
    codes
};

/// The decoding tables of the canonical search: for each length, its first code, how many
/// codes it has, and where its symbols start in `SORTED` (symbols ordered by length, then
/// value).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    sorted: [u16; 257],
}

const CANON: Canonical = {
    let mut c =
        Canonical { first: [0; MAX_LEN + 1], count: [0; MAX_LEN + 1], offset: [0; MAX_LEN + 1], sorted: [0; 257] };
    let mut n = 0;
    let mut len = MIN_LEN;
    while len <= MAX_LEN {
        c.offset[len] = n as u16;
        let mut sym = 0;
        while sym < 257 {
            if LENS[sym] as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = CODES[sym];
                }
                c.count[len] += 1;
                c.sorted[n] = sym as u16;
                n += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    c
};

/// Bits of input that index `PAIRS`.
const PAIR_BITS: u32 = 12;

/// One entry of `PAIRS`: `count` (1 or 2) symbols, the first `len1` bits long, both together
/// `total` bits long.
const fn pair(count: u32, len1: u32, total: u32, sym1: u32, sym2: u32) -> u32 {
    count << 26 | total << 21 | len1 << 16 | sym2 << 8 | sym1
}

/// For the top 12 bits of the input: the one or two symbols whose codes they start with, as
/// `pair` packs them, when the first code is at most 12 bits long (a second one is included
/// when it ends within the 12 bits); 0 when the first code is longer.
const PAIRS: [u32; 1 << PAIR_BITS] = {
    // The one symbol each 12-bit prefix starts with, `len << 8 | symbol`, or 0.
    let mut one = [0u16; 1 << PAIR_BITS];
    let mut sym = 0;
    while sym < 256 {
        let len = LENS[sym] as u32;
        if len <= PAIR_BITS {
            let base = (CODES[sym] as usize) << (PAIR_BITS - len);
            let mut i = 0;
            while i < 1 << (PAIR_BITS - len) {
                one[base + i] = ((len as u16) << 8) | sym as u16;
                i += 1;
            }
        }
        sym += 1;
    }
    let mut t = [0u32; 1 << PAIR_BITS];
    let mut i = 0;
    while i < 1 << PAIR_BITS {
        let first = one[i];
        if first != 0 {
            let len1 = (first >> 8) as u32;
            let sym1 = (first & 0xff) as u32;
            // The bits after the first code, left-aligned in 12 (zeros shifted in).
            let second = one[(i << len1) & ((1 << PAIR_BITS) - 1)];
            let len2 = (second >> 8) as u32;
            t[i] = if second != 0 && len1 + len2 <= PAIR_BITS {
                pair(2, len1, len1 + len2, sym1, (second & 0xff) as u32)
            } else {
                pair(1, len1, len1, sym1, 0)
            };
        }
        i += 1;
    }
    t
};

/// The Huffman-coded length of `s` in bytes.
pub(crate) fn encoded_len(s: &[u8]) -> usize {
    let bits: usize = s.iter().map(|&b| LENS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `s` to `out`, padded with ones to a byte boundary. (Room
/// for `s.len()` bytes is reserved: callers code a string only when that makes it shorter.)
pub(crate) fn encode(s: &[u8], out: &mut Vec<u8>) {
    out.reserve(s.len());
    // The pending bits are the low `n` bits of `acc` (n < 32 between symbols: with a code of
    // at most 30 bits, n + len < 64), written out four bytes at a time.
    let mut acc: u64 = 0;
    let mut n: u32 = 0;
    for &b in s {
        let len = LENS[b as usize] as u32;
        acc = (acc << len) | CODES[b as usize] as u64;
        n += len;
        if n >= 32 {
            n -= 32;
            out.extend_from_slice(&((acc >> n) as u32).to_be_bytes());
        }
    }
    while n >= 8 {
        n -= 8;
        out.push((acc >> n) as u8);
    }
    if n > 0 {
        out.push(((acc << (8 - n)) as u8) | (0xff >> n));
    }
}

/// Decodes the Huffman-coded string `src`, appending the octets to `out`. (On an error, `out`
/// may have some of them appended.)
pub(crate) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    // Every symbol takes at least 5 bits; one more byte because a step that yields one
    // symbol writes two.
    let room = src.len() * 8 / MIN_LEN + 1;
    out.reserve(room);
    let start = out.len();
    let mut n = 0;
    let r = decode_into(src, &mut out.spare_capacity_mut()[..room], &mut n);
    // SAFETY: `decode_into` initialised the first `n` bytes of the spare capacity (it writes
    // at `n` and `n + 1` and only ever advances `n` over bytes it wrote), and `n <= room`,
    // which `reserve` made available.
    unsafe { out.set_len(start + n) };
    r
}

/// The decoding loop: writes the octets into `spare` from index 0, keeping `*n` at the count
/// written.
fn decode_into(src: &[u8], spare: &mut [std::mem::MaybeUninit<u8>], n: &mut usize) -> Result<(), &'static str> {
    // The unread bits, left-aligned: the next code starts at bit 63. The bits below the
    // `bits` valid ones are either zero or the true bits of the bytes after `i` (an eight-byte
    // refill reads ahead; ORing those bytes in again later changes nothing).
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut i = 0;
    loop {
        if bits <= 56 {
            if let Some(w) = src.get(i..).and_then(|s| s.first_chunk::<8>()) {
                acc |= u64::from_be_bytes(*w) >> bits;
                let take = (64 - bits) / 8;
                i += take as usize;
                bits += take * 8;
            } else {
                while bits <= 56 && i < src.len() {
                    acc |= (src[i] as u64) << (56 - bits);
                    bits += 8;
                    i += 1;
                }
            }
        }
        if bits == 0 {
            return Ok(());
        }
        let e = PAIRS[(acc >> (64 - PAIR_BITS)) as usize];
        let (sym, len) = if e != 0 {
            let total = (e >> 21) & 31;
            if total <= bits {
                spare[*n].write(e as u8);
                spare[*n + 1].write((e >> 8) as u8);
                *n += (e >> 26) as usize;
                acc <<= total;
                bits -= total;
                continue;
            }
            // Only the first of the two codes is in the input, or not even that.
            ((e & 0xff) as u16, (e >> 16) & 31)
        } else {
            slow(acc)
        };
        if len > bits {
            // Input exhausted (refilling stops only then, and no code is longer than 30
            // bits): what is left is the padding.
            if bits > 7 {
                return Err("Huffman padding longer than 7 bits");
            }
            if acc >> (64 - bits) != (1 << bits) - 1 {
                return Err("Huffman padding is not a prefix of EOS");
            }
            return Ok(());
        }
        if sym == EOS {
            return Err("Huffman EOS inside a string");
        }
        spare[*n].write(sym as u8);
        *n += 1;
        acc <<= len;
        bits -= len;
    }
}

/// The symbol and length of the code longer than 12 bits at the top of `acc`. The code is
/// complete (its Kraft sum is exactly 1), so every 30-bit string starts with some code and
/// the search always ends by length 30.
fn slow(acc: u64) -> (u16, u32) {
    let mut len = PAIR_BITS as usize + 1;
    while len <= MAX_LEN {
        let code = (acc >> (64 - len)) as u32;
        let d = code.wrapping_sub(CANON.first[len]);
        if d < CANON.count[len] {
            return (CANON.sorted[CANON.offset[len] as usize + d as usize], len as u32);
        }
        len += 1;
    }
    (EOS, MAX_LEN as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codes from RFC 7541 Appendix B, spread over every length, the first and last symbol
    /// of several lengths, and EOS.
    #[test]
    fn derived_codes_match_appendix_b() {
        let rfc: &[(usize, u32, u8)] = &[
            (0, 0x1ff8, 13),
            (1, 0x7fffd8, 23),
            (2, 0xfffffe2, 28),
            (9, 0xffffea, 24),
            (10, 0x3ffffffc, 30),
            (13, 0x3ffffffd, 30),
            (22, 0x3ffffffe, 30),
            (31, 0xffffffb, 28),
            (b' ' as usize, 0x14, 6),
            (b'!' as usize, 0x3f8, 10),
            (b'#' as usize, 0xffa, 12),
            (b'\'' as usize, 0x7fa, 11),
            (b'0' as usize, 0x0, 5),
            (b':' as usize, 0x5c, 7),
            (b'<' as usize, 0x7ffc, 15),
            (b'X' as usize, 0xfc, 8),
            (b'Y' as usize, 0x73, 7),
            (b'\\' as usize, 0x7fff0, 19),
            (b'^' as usize, 0x3ffc, 14),
            (b'a' as usize, 0x3, 5),
            (b't' as usize, 0x9, 5),
            (b'u' as usize, 0x2d, 6),
            (b'z' as usize, 0x7b, 7),
            (b'{' as usize, 0x7ffe, 15),
            (b'|' as usize, 0x7fc, 11),
            (127, 0xffffffc, 28),
            (128, 0xfffe6, 20),
            (129, 0x3fffd2, 22),
            (142, 0xffffeb, 24),
            (153, 0x1fffdc, 21),
            (192, 0x3ffffe0, 26),
            (195, 0x7fff1, 19),
            (199, 0x1ffffec, 25),
            (203, 0x7ffffde, 27),
            (220, 0xffffffd, 28),
            (254, 0x7fffff0, 27),
            (255, 0x3ffffee, 26),
            (256, 0x3fffffff, 30),
        ];
        for &(sym, code, len) in rfc {
            assert_eq!((CODES[sym], LENS[sym]), (code, len), "symbol {sym}");
        }
        // A complete prefix code: the Kraft sum is exactly 1.
        let kraft: u64 = LENS.iter().map(|&l| 1u64 << (MAX_LEN - l as usize)).sum();
        assert_eq!(kraft, 1 << MAX_LEN);
    }

    #[test]
    fn every_symbol_round_trips_alone_and_in_context() {
        for sym in 0..=255u8 {
            for s in [vec![sym], vec![b'a', sym, b'z'], vec![sym; 9]] {
                let mut enc = Vec::new();
                encode(&s, &mut enc);
                assert_eq!(enc.len(), encoded_len(&s));
                let mut dec = Vec::new();
                decode(&enc, &mut dec).unwrap();
                assert_eq!(dec, s, "symbol {sym}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_string_round_trips(s in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut enc = b"prefix".to_vec();
            encode(&s, &mut enc);
            proptest::prop_assert_eq!(enc.len() - 6, encoded_len(&s));
            let mut dec = Vec::new();
            decode(&enc[6..], &mut dec).unwrap();
            proptest::prop_assert_eq!(dec, s);
        }
    }

    /// The decoder as RFC 7541 §5.2 states it, one bit at a time: the reference that the
    /// table-driven `decode` must agree with.
    fn decode_bitwise(src: &[u8]) -> Result<Vec<u8>, &'static str> {
        let mut out = Vec::new();
        let (mut code, mut len) = (0u32, 0u8);
        for i in 0..src.len() * 8 {
            code = code << 1 | u32::from(src[i / 8] >> (7 - i % 8) & 1);
            len += 1;
            if let Some(sym) = (0..257).find(|&s| LENS[s] == len && CODES[s] == code) {
                if sym == 256 {
                    return Err("Huffman EOS inside a string");
                }
                out.push(sym as u8);
                (code, len) = (0, 0);
            }
        }
        if len > 7 {
            return Err("Huffman padding longer than 7 bits");
        }
        if code != (1 << len) - 1 {
            return Err("Huffman padding is not a prefix of EOS");
        }
        Ok(out)
    }

    /// `decode`'s result, with the octets it appended to a non-empty vector on success.
    fn decode_table(src: &[u8]) -> Result<Vec<u8>, &'static str> {
        let mut out = b"before".to_vec();
        decode(src, &mut out)?;
        assert_eq!(&out[..6], b"before");
        Ok(out.split_off(6))
    }

    proptest::proptest! {
        /// Arbitrary bytes: almost all of them are errors of every kind (EOS, long padding,
        /// padding with zeros), and the table decoder must find the same one.
        #[test]
        fn table_decoder_agrees_with_bitwise_on_any_bytes(src in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(decode_table(&src), decode_bitwise(&src));
        }

        /// Coded strings, then cut short, with a bit flipped or with bytes appended: mostly
        /// valid strings and the errors at their ends.
        #[test]
        fn table_decoder_agrees_with_bitwise_on_damaged_codings(
            s in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            cut in 0usize..8,
            flip in proptest::option::of(0usize..1024),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3),
        ) {
            let mut enc = Vec::new();
            encode(&s, &mut enc);
            proptest::prop_assert_eq!(decode_table(&enc), Ok(s));
            enc.truncate(enc.len().saturating_sub(cut));
            if let Some(bit) = flip.filter(|&b| b < enc.len() * 8) {
                enc[bit / 8] ^= 0x80 >> (bit % 8);
            }
            enc.extend_from_slice(&tail);
            proptest::prop_assert_eq!(decode_table(&enc), decode_bitwise(&enc));
        }

        /// Header-like text (the 5- to 8-bit codes that decode two at a time) round-trips.
        #[test]
        fn header_text_round_trips(s in "[a-z0-9./:-]{0,100}") {
            let mut enc = Vec::new();
            encode(s.as_bytes(), &mut enc);
            proptest::prop_assert_eq!(decode_table(&enc), Ok(s.into_bytes()));
        }
    }

    #[test]
    fn appendix_c_strings() {
        let cases: &[(&str, &str)] = &[
            ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            ("no-cache", "a8eb10649cbf"),
            ("custom-key", "25a849e95ba97d7f"),
            ("custom-value", "25a849e95bb8e8b4bf"),
            ("302", "6402"),
            ("private", "aec3771a4b"),
            ("Mon, 21 Oct 2013 20:13:21 GMT", "d07abe941054d444a8200595040b8166e082a62d1bff"),
            ("https://www.example.com", "9d29ad171863c78f0b97c8e9ae82ae43d3"),
            ("gzip", "9bd9ab"),
        ];
        for (text, hex) in cases {
            let want: Vec<u8> =
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            let mut enc = Vec::new();
            encode(text.as_bytes(), &mut enc);
            assert_eq!(enc, want, "{text}");
            let mut dec = Vec::new();
            decode(&want, &mut dec).unwrap();
            assert_eq!(dec, text.as_bytes());
        }
    }

    #[test]
    fn padding_and_eos_errors() {
        let mut out = Vec::new();
        // 'a' (00011) + 111: valid padding.
        assert_eq!(decode(&[0b0001_1111], &mut out), Ok(()));
        assert_eq!(out, b"a");
        // 'a' + 000: padding not all ones.
        assert!(decode(&[0b0001_1000], &mut out).is_err());
        // 'a' + 11 one bits: padding longer than 7 bits.
        assert_eq!(decode(&[0b0001_1111, 0xff], &mut out), Err("Huffman padding longer than 7 bits"));
        // A whole byte of ones alone: 8 bits of padding.
        assert!(decode(&[0xff], &mut out).is_err());
        // EOS (30 ones) then two ones of padding.
        assert_eq!(decode(&[0xff; 4], &mut out), Err("Huffman EOS inside a string"));
        // EOS after a symbol.
        assert_eq!(decode(&[0b0001_1111, 0xff, 0xff, 0xff, 0xff], &mut out), Err("Huffman EOS inside a string"));
        // The empty string is valid.
        out.clear();
        assert_eq!(decode(&[], &mut out), Ok(()));
        assert!(out.is_empty());
    }
}
