//! QUIC variable-length integers (RFC 9000 §16): the two high bits of the first byte give
//! the length (1, 2, 4 or 8 bytes), the rest is the value, big-endian, up to 2^62 - 1.
//! Every HTTP/3 frame type, frame length, stream type, setting and identifier is one.

/// The largest value a varint holds.
pub const MAX: u64 = (1 << 62) - 1;

/// What [`decode`] found at the start of a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Varint {
    /// The value and how many bytes it took.
    Value(u64, usize),
    /// The slice ends inside the integer: at least this many bytes are needed in all.
    Incomplete(usize),
}

/// The length of the varint whose first byte is `b`.
pub fn len_of_first(b: u8) -> usize {
    1 << (b >> 6)
}

/// Decodes the varint at the start of `buf`.
pub fn decode(buf: &[u8]) -> Varint {
    let Some(&first) = buf.first() else { return Varint::Incomplete(1) };
    let len = len_of_first(first);
    let Some(bytes) = buf.get(..len) else { return Varint::Incomplete(len) };
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Varint::Value(v, len)
}

/// The length of the shortest encoding of `v` (which must be at most [`MAX`]).
pub fn encoded_len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends the shortest encoding of `v`. Values above [`MAX`] cannot be encoded: every
/// caller passes a length, an identifier or a setting this server chose, all far below it
/// (debug builds assert it).
pub fn encode(v: u64, out: &mut Vec<u8>) {
    debug_assert!(v <= MAX, "varint {v} above 2^62 - 1");
    match encoded_len(v) {
        1 => out.push(v as u8),
        2 => out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&((v & MAX) | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9000_appendix_a1_examples() {
        assert_eq!(
            decode(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Varint::Value(151_288_809_941_952_652, 8)
        );
        assert_eq!(decode(&[0x9d, 0x7f, 0x3e, 0x7d]), Varint::Value(494_878_333, 4));
        assert_eq!(decode(&[0x7b, 0xbd]), Varint::Value(15_293, 2));
        assert_eq!(decode(&[0x25]), Varint::Value(37, 1));
        // Not the shortest encoding, still 37 (§16: a longer encoding is allowed).
        assert_eq!(decode(&[0x40, 0x25]), Varint::Value(37, 2));
        let mut out = Vec::new();
        encode(151_288_809_941_952_652, &mut out);
        encode(494_878_333, &mut out);
        encode(15_293, &mut out);
        encode(37, &mut out);
        assert_eq!(out, [0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c, 0x9d, 0x7f, 0x3e, 0x7d, 0x7b, 0xbd, 0x25]);
    }

    #[test]
    fn incomplete_says_how_much_is_needed() {
        assert_eq!(decode(&[]), Varint::Incomplete(1));
        assert_eq!(decode(&[0x40]), Varint::Incomplete(2));
        assert_eq!(decode(&[0x80, 1, 2]), Varint::Incomplete(4));
        assert_eq!(decode(&[0xc0, 1, 2, 3, 4, 5, 6]), Varint::Incomplete(8));
        assert_eq!(decode(&[0xff; 8]), Varint::Value(MAX, 8));
    }

    #[test]
    fn boundaries() {
        for (v, len) in [(0, 1), (63, 1), (64, 2), (16_383, 2), (16_384, 4), (1_073_741_823, 4), (1 << 30, 8), (MAX, 8)]
        {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!((out.len(), encoded_len(v)), (len, len), "{v}");
            assert_eq!(decode(&out), Varint::Value(v, len), "{v}");
        }
    }

    proptest::proptest! {
        /// Every value round-trips in its shortest encoding, and every strict prefix of an
        /// encoding is incomplete with the right length wanted.
        #[test]
        fn round_trip(v in 0..=MAX, tail in proptest::collection::vec(proptest::num::u8::ANY, 0..4)) {
            let mut out = Vec::new();
            encode(v, &mut out);
            proptest::prop_assert_eq!(out.len(), encoded_len(v));
            for cut in 0..out.len() {
                proptest::prop_assert_eq!(decode(&out[..cut]), Varint::Incomplete(if cut == 0 { 1 } else { out.len() }));
            }
            out.extend_from_slice(&tail);
            proptest::prop_assert_eq!(decode(&out), Varint::Value(v, encoded_len(v)));
        }
    }
}
