//! QPACK: RFC 9204 Appendix B.1 (the one example that uses only the static table), every
//! field line representation and its errors, the encoder, the QPACK stream checks, and the
//! properties (no panic, the size bound, encoder -> decoder round trip).

use super::*;
use proptest::prelude::*;

type List = Vec<(Vec<u8>, Vec<u8>)>;

fn decode(section: &[u8], max: u64) -> Result<List, DecodeError<()>> {
    let mut list = Vec::new();
    Decoder::new().decode(section, max, |n, v| {
        list.push((n.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok(list)
}

fn list(fields: &[(&str, &str)]) -> List {
    fields.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

fn why(section: &[u8]) -> &'static str {
    match decode(section, u64::MAX) {
        Err(DecodeError::Decompression(why)) => why,
        other => panic!("{section:02x?}: expected a decompression error, got {other:?}"),
    }
}

#[test]
fn b1_literal_field_line_with_name_reference() {
    let section = [0x00, 0x00, 0x51, 0x0b, 0x2f, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x2e, 0x68, 0x74, 0x6d, 0x6c];
    assert_eq!(decode(&section, u64::MAX), Ok(list(&[(":path", "/index.html")])));
}

#[test]
fn every_representation_without_the_dynamic_table() {
    // Indexed static (17: :method GET; 98 with a continuation byte), literal with a static
    // name reference (N set: never indexed), literal names (raw and Huffman).
    let mut s = vec![0x00, 0x00, 0xd1, 0xff, 0x23, 0x71, 0x01, b'x'];
    s.extend_from_slice(&[0x23, b'a', b'b', b'c', 0x03, b'x', b'y', b'z']);
    // Literal name with N set and a Huffman name "ab" (a = 00011, b = 100011).
    s.extend_from_slice(&[0x3a, 0x1c, 0x7f, 0x00]);
    assert_eq!(
        decode(&s, u64::MAX),
        Ok(list(&[(":method", "GET"), ("x-frame-options", "sameorigin"), (":path", "x"), ("abc", "xyz"), ("ab", "")]))
    );
    // A Base of any positive delta is fine with no dynamic reference.
    assert_eq!(decode(&[0x00, 0x05, 0xd1], u64::MAX), Ok(list(&[(":method", "GET")])));
    // An empty section (prefix only).
    assert_eq!(decode(&[0x00, 0x00], u64::MAX), Ok(vec![]));
}

#[test]
fn dynamic_references_and_bad_prefixes_fail() {
    assert_eq!(why(&[0x01, 0x00]), "Required Insert Count above 0 (no dynamic table)");
    assert_eq!(why(&[0x00, 0x80]), "negative Base");
    assert_eq!(why(&[0x00]), "field section shorter than its prefix");
    assert_eq!(why(&[]), "field section shorter than its prefix");
    assert_eq!(why(&[0x00, 0x00, 0x80]), "reference to the dynamic table");
    assert_eq!(why(&[0x00, 0x00, 0x41, 0x01, b'a']), "reference to the dynamic table");
    assert_eq!(why(&[0x00, 0x00, 0x10]), "post-base reference to the dynamic table");
    assert_eq!(why(&[0x00, 0x00, 0x00, 0x01, b'a']), "post-base reference to the dynamic table");
    assert_eq!(why(&[0x00, 0x00, 0xff, 0x24]), "static index above 98");
    assert_eq!(why(&[0x00, 0x00, 0x5f, 0x54, 0x00]), "static index above 98");
    assert_eq!(why(&[0x00, 0x00, 0xff]), "truncated integer");
    assert_eq!(why(&[0x00, 0x00, 0x51, 0x05, b'a']), "string length beyond the section");
    assert_eq!(why(&[0x00, 0x00, 0x51]), "truncated section: string expected");
    let mut overflow = vec![0x00, 0x00, 0xff];
    overflow.extend_from_slice(&[0xff; 10]);
    overflow.push(0x01);
    assert_eq!(why(&overflow), "integer overflow");
    // Huffman: EOS (30 ones) inside, padding of 8 bits, padding not all ones.
    assert_eq!(why(&[0x00, 0x00, 0x51, 0x84, 0xff, 0xff, 0xff, 0xff]), "Huffman EOS inside a string");
    assert_eq!(why(&[0x00, 0x00, 0x51, 0x82, 0x1f, 0xff]), "Huffman padding longer than 7 bits");
    assert_eq!(why(&[0x00, 0x00, 0x51, 0x81, 0x00]), "Huffman padding is not a prefix of EOS");
}

#[test]
fn the_size_bound_is_counted_before_a_field_is_handed_out() {
    // :method GET (7 + 3 + 32 = 42) twice: 84.
    let s = [0x00, 0x00, 0xd1, 0xd1];
    assert_eq!(decode(&s, 84).map(|l| l.len()), Ok(2));
    let mut handed = 0;
    let r = Decoder::new().decode(&s, 83, |_, _| {
        handed += 1;
        Ok::<(), ()>(())
    });
    assert_eq!((r, handed), (Err(DecodeError::TooLarge), 1));
    // Still checked to the end: bad QPACK after the limit is a decompression error.
    assert_eq!(
        decode(&[0x00, 0x00, 0xd1, 0xd1, 0x80], 50),
        Err(DecodeError::Decompression("reference to the dynamic table"))
    );
    // The callback's refusal stops the handing out, not the checking.
    let r = Decoder::new().decode(&s, u64::MAX, |_, _| Err("no"));
    assert_eq!(r, Err(DecodeError::Field("no")));
}

#[test]
fn the_encoder_uses_the_static_table() {
    let mut out = Vec::new();
    encode_section(200, [(&b"content-type"[..], &b"text/css"[..]), (b"accept-ranges", b"bytes")], &mut out);
    assert_eq!(out, [0x00, 0x00, 0xd9, 0xf3, 0xe0]);
    // One byte for indices below 63, two from 63 (the 6-bit prefix is full).
    for (status, bytes) in [
        (100, &[0xff, 0x00][..]),
        (103, &[0xd8]),
        (204, &[0xff, 0x01]),
        (206, &[0xff, 0x02]),
        (302, &[0xff, 0x03]),
        (304, &[0xda]),
        (400, &[0xff, 0x04]),
        (403, &[0xff, 0x05]),
        (404, &[0xdb]),
        (421, &[0xff, 0x06]),
        (425, &[0xff, 0x07]),
        (500, &[0xff, 0x08]),
        (503, &[0xdc]),
    ] {
        out.clear();
        out.extend_from_slice(&[0, 0]);
        encode_status(status, &mut out);
        assert_eq!(&out[2..], bytes, "{status}");
        assert_eq!(decode(&out, u64::MAX), Ok(list(&[(":status", &status.to_string())])));
    }
    // 416: a name reference to :status (24: 0x5f 0x09), the digits raw (17 bits in
    // Huffman); 201 in Huffman (15 bits).
    out.clear();
    out.extend_from_slice(&[0, 0]);
    encode_status(416, &mut out);
    assert_eq!(out[2..], [0x5f, 0x09, 0x03, b'4', b'1', b'6']);
    assert_eq!(decode(&out, u64::MAX), Ok(list(&[(":status", "416")])));
    out.truncate(2);
    encode_status(201, &mut out);
    assert_eq!(out[2..5], [0x5f, 0x09, 0x82]);
    assert_eq!(decode(&out, u64::MAX), Ok(list(&[(":status", "201")])));
    // content-length: a name reference (4), Huffman digits; an unknown name: a literal name.
    out.truncate(2);
    encode_field(b"content-length", b"4096", &mut out);
    encode_field(b"x-custom", b"v", &mut out);
    assert_eq!(out[2], 0x54);
    assert_eq!(decode(&out, u64::MAX), Ok(list(&[("content-length", "4096"), ("x-custom", "v")])));
    // A string Huffman would lengthen is sent raw.
    out.truncate(2);
    encode_field(b"etag", b"\x01\x02", &mut out);
    assert_eq!(out[2..], [0x57, 0x02, 0x01, 0x02]);
}

#[test]
fn response_heads_are_whole_headers_frames_within_the_peer_limit() {
    let fields = [(&b"content-length"[..], &b"12"[..]), (b"server", b"ferrohttpd")];
    let mut out = vec![0xaa];
    encode_response_head(200, fields, u64::MAX, &mut out).unwrap();
    let (h, n) = crate::h3::frame::parse_header(&out[1..]).unwrap();
    assert_eq!((h.ty, h.len as usize, out[0]), (crate::h3::frame::HEADERS, out.len() - 1 - n, 0xaa));
    assert_eq!(
        decode(&out[1 + n..], u64::MAX),
        Ok(list(&[(":status", "200"), ("content-length", "12"), ("server", "ferrohttpd")]))
    );
    // :status 42 + 14 + 2 + 32 + 6 + 10 + 32 = 138.
    let mut small = vec![0xaa];
    assert_eq!(encode_response_head(200, fields, 137, &mut small), Err(HeadTooLarge { size: 138 }));
    assert_eq!(small, [0xaa]);
    assert!(encode_response_head(200, fields, 138, &mut small).is_ok());
}

#[test]
fn encoder_stream_with_capacity_zero() {
    assert_eq!(check_encoder_stream(&[]), Ok(()));
    assert_eq!(check_encoder_stream(&[0x20, 0x20]), Ok(()));
    let code = |b: &[u8]| check_encoder_stream(b).map_err(|e| e.code);
    assert_eq!(code(&[0x21]), Err(Code::QpackEncoderStreamError));
    assert_eq!(code(&[0x3f, 0x01]), Err(Code::QpackEncoderStreamError));
    assert_eq!(code(&[0xc0, 0x01, b'a']), Err(Code::QpackEncoderStreamError)); // insert, static name
    assert_eq!(code(&[0x41, b'a', 0x01, b'b']), Err(Code::QpackEncoderStreamError)); // insert, literal name
    assert_eq!(code(&[0x20, 0x00]), Err(Code::QpackEncoderStreamError)); // duplicate
}

#[test]
fn decoder_stream_without_dynamic_references() {
    let mut d = DecoderStream::default();
    // Stream Cancellation of stream 4, then of stream 400 (6-bit prefix: 0x7f + 337) split.
    // Counted where each begins: they do no work (the caller's flood budget).
    assert_eq!(d.read(&[0x44, 0x7f]), Ok(2));
    assert_eq!(d.read(&[0xd1]), Ok(0));
    assert_eq!(d.read(&[0x02, 0x40]), Ok(1));
    assert_eq!(d, DecoderStream::default());
    let code = |b: &[u8]| DecoderStream::default().read(b).map_err(|e| e.code);
    assert_eq!(code(&[0x84]), Err(Code::QpackDecoderStreamError)); // Section Acknowledgment
    assert_eq!(code(&[0x01]), Err(Code::QpackDecoderStreamError)); // Insert Count Increment
    assert_eq!(code(&[0x00]), Err(Code::QpackDecoderStreamError)); // ... of zero
    let mut long = vec![0x7f];
    long.extend_from_slice(&[0xff; 10]);
    assert_eq!(code(&long), Err(Code::QpackDecoderStreamError));
}

/// A lowercase field name as HTTP/3 sends them, often one the static table has.
fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::sample::select(&[":status", "content-type", "content-length", "etag", "server", "vary", "x-a"][..])
            .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(proptest::sample::select(&b"abcxyz-_0123:"[..]), 1..20),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::sample::select(&["text/css", "bytes", "", "200", "accept-encoding", "gzip"][..])
            .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(proptest::sample::select(&b"abc /=;0123"[..]), 0..300),
    ]
}

proptest! {
    /// Arbitrary bytes: no panic, and never more than the bound handed out.
    #[test]
    fn the_decoder_never_panics_or_passes_its_bound(
        body in proptest::collection::vec(any::<u8>(), 0..300),
        prefix in proptest::sample::select(&[[0u8, 0], [0, 1], [1, 0], [0, 0x80]][..]),
        max in 0u64..2000,
    ) {
        let mut section = prefix.to_vec();
        section.extend_from_slice(&body);
        let mut size = 0;
        let _ = Decoder::new().decode(&section, max, |n, v| {
            size += field_size(n, v);
            Ok::<(), ()>(())
        });
        prop_assert!(size <= max, "{size} > {max}");
    }

    /// What the encoder writes, the decoder reads back, field for field; and the section
    /// is never longer than the fields' counted size.
    #[test]
    fn encoder_to_decoder_round_trip(
        status in 100u16..1000,
        fields in proptest::collection::vec((name(), value()), 0..12),
    ) {
        let mut out = Vec::new();
        encode_section(status, fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut out);
        let got = decode(&out, u64::MAX).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let mut want = vec![(b":status".to_vec(), status.to_string().into_bytes())];
        want.extend(fields.iter().cloned());
        prop_assert_eq!(&got, &want);
        let counted: u64 = want.iter().map(|(n, v)| field_size(n, v)).sum();
        prop_assert!(out.len() as u64 <= counted + 2);
    }
}

proptest! {
    /// A connection's cache of value codings changes nothing in what is sent: heads of
    /// repeated and colliding values, encoded twice over with one cache, are byte for byte
    /// the heads encoded without it.
    #[test]
    fn cached_value_codings_are_the_codings(
        heads in proptest::collection::vec(proptest::collection::vec((name(), value()), 0..10), 1..8),
    ) {
        let mut cache = ValueCache::default();
        for fields in heads.iter().chain(heads.iter().rev()) {
            let pairs = || fields.iter().map(|(n, v)| (&n[..], &v[..]));
            let (mut plain, mut cached) = (Vec::new(), Vec::new());
            encode_response_head(200, pairs(), u64::MAX, &mut plain).unwrap();
            encode_response_head_cached(&mut cache, 200, pairs(), u64::MAX, &mut cached).unwrap();
            prop_assert_eq!(&cached, &plain);
        }
    }
}

/// The figures ARCHITECTURE.md ("QPACK") quotes: a typical 200 head of this server, with
/// and without Huffman coding, and what a dynamic table would save on a connection's later
/// responses (`server` and `date` sent as one index byte each once inserted).
#[test]
fn typical_response_head_sizes() {
    let fields: [(&[u8], &[u8]); 8] = [
        (b"server", b"ferrohttpd"),
        (b"date", b"Sat, 05 Dec 2026 20:15:00 GMT"),
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", b"4096"),
        (b"last-modified", b"Fri, 04 Dec 2026 10:00:00 GMT"),
        (b"etag", b"\"6751a3c0-1000\""),
        (b"accept-ranges", b"bytes"),
        (b"vary", b"accept-encoding"),
    ];
    let mut huffman = Vec::new();
    encode_section(200, fields, &mut huffman);
    // The same with every string raw.
    let mut raw = vec![0, 0];
    encode_status(200, &mut raw);
    for (name, value) in fields {
        let all = static_name(name).unwrap();
        if let Some(&i) = all.iter().find(|&&i| STATIC[usize::from(i)].1 == value) {
            write_integer(&mut raw, 0xc0, 6, usize::from(i));
        } else {
            write_integer(&mut raw, 0x50, 4, usize::from(all[0]));
            write_integer(&mut raw, 0, 7, value.len());
            raw.extend_from_slice(value);
        }
    }
    assert_eq!(decode(&raw, u64::MAX), decode(&huffman, u64::MAX));
    let line = |name: &[u8], value: &[u8]| {
        let mut out = Vec::new();
        encode_field(name, value, &mut out);
        out.len()
    };
    let repeated = line(fields[0].0, fields[0].1) + line(fields[1].0, fields[1].1);
    let counted: u64 = fields.iter().map(|(n, v)| field_size(n, v)).sum::<u64>() + field_size(b":status", b"200");
    eprintln!(
        "typical head: {} bytes of fields counted, {} bytes raw, {} with Huffman; server + date lines {} bytes",
        counted,
        raw.len(),
        huffman.len(),
        repeated
    );
    assert_eq!((raw.len(), huffman.len(), repeated), (104, 83, 34));
}
