//! RFC 7541 Appendix C, every error class, the HPACK bomb, and round-trip properties.

use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

type Fields = Vec<(String, String, bool)>;
/// A header list, as the RFC prints it.
type List = &'static [(&'static str, &'static str)];

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError<()>> {
    let mut out = Vec::new();
    d.decode(block, usize::MAX, |n, v, s| {
        out.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned(), s));
        Ok(())
    })?;
    Ok(out)
}

fn fields(list: &[(&str, &str)]) -> Fields {
    list.iter().map(|(n, v)| (n.to_string(), v.to_string(), false)).collect()
}

/// The dynamic table, newest first, as the RFC prints it.
fn table(t: &DynTable) -> Vec<(String, String)> {
    (0..t.len())
        .map(|i| {
            let (n, v) = t.get(i).unwrap();
            (String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

// ---------------------------------------------------------------------------------------------
// C.1 integers

#[test]
fn c1_integers() {
    for (value, prefix, enc) in [(10usize, 5, "0a"), (1337, 5, "1f9a0a"), (42, 8, "2a")] {
        let mut out = Vec::new();
        write_integer(&mut out, 0, prefix, value);
        assert_eq!(out, hex(enc), "{value}");
        let mut pos = 0;
        assert_eq!(integer(&out, &mut pos, prefix), Ok(value));
        assert_eq!(pos, out.len());
    }
    // Flags above the prefix are ignored on read and kept on write.
    let mut out = Vec::new();
    write_integer(&mut out, 0xe0, 5, 1337);
    assert_eq!(out, hex("ff9a0a"));
    let mut pos = 0;
    assert_eq!(integer(&out, &mut pos, 5), Ok(1337));
    // Round trip at the prefix boundaries and the largest accepted value.
    for n in 1..=8 {
        for v in [0, (1 << n) - 2, (1 << n) - 1, 1 << n, 127 + (1 << n), 1 << 20, u32::MAX as usize] {
            let mut out = Vec::new();
            write_integer(&mut out, 0, n, v);
            let mut pos = 0;
            assert_eq!(integer(&out, &mut pos, n), Ok(v), "{v} with prefix {n}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// C.2 literals

#[test]
fn c2_literal_representations() {
    let mut d = Decoder::new(4096);
    let got = decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")).unwrap();
    assert_eq!(got, fields(&[("custom-key", "custom-header")]));
    assert_eq!(table(&d.table), pairs(&[("custom-key", "custom-header")]));
    assert_eq!(d.dynamic_table_size(), 55);

    let mut d = Decoder::new(4096);
    let got = decode(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468")).unwrap();
    assert_eq!(got, fields(&[(":path", "/sample/path")]));
    assert_eq!(d.dynamic_table_size(), 0);

    let mut d = Decoder::new(4096);
    let got = decode(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74")).unwrap();
    assert_eq!(got, vec![("password".into(), "secret".into(), true)]);
    assert_eq!(d.dynamic_table_size(), 0);

    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &hex("82")).unwrap(), fields(&[(":method", "GET")]));
    assert_eq!(d.dynamic_table_size(), 0);
}

// ---------------------------------------------------------------------------------------------
// C.3 / C.4 requests: three blocks sharing the dynamic table

const REQ1: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")];
const REQ2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQ3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];

fn request_sequence(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096);
    let expect: [(List, List, usize); 3] = [
        (REQ1, &[(":authority", "www.example.com")], 57),
        (REQ2, &[("cache-control", "no-cache"), (":authority", "www.example.com")], 110),
        (
            REQ3,
            &[("custom-key", "custom-value"), ("cache-control", "no-cache"), (":authority", "www.example.com")],
            164,
        ),
    ];
    for (block, (list, tbl, size)) in blocks.iter().zip(expect) {
        assert_eq!(decode(&mut d, &hex(block)).unwrap(), fields(list));
        assert_eq!(table(&d.table), pairs(tbl));
        assert_eq!(d.dynamic_table_size(), size);
    }
}

#[test]
fn c3_requests_without_huffman() {
    request_sequence([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    request_sequence([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

// ---------------------------------------------------------------------------------------------
// C.5 / C.6 responses: table size 256, evictions; decoded, and encoded by our encoder

const RESP1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ("location", "https://www.example.com"),
    ("content-encoding", "gzip"),
    ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
];

const RESP_TABLES: [(&[(&str, &str)], usize); 3] = [
    (
        &[
            ("location", "https://www.example.com"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("cache-control", "private"),
            (":status", "302"),
        ],
        222,
    ),
    (
        &[
            (":status", "307"),
            ("location", "https://www.example.com"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("cache-control", "private"),
        ],
        222,
    ),
    (
        &[
            ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
            ("content-encoding", "gzip"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ],
        215,
    ),
];

fn response_sequence(blocks: [&str; 3], huffman: bool) {
    let mut d = Decoder::new(256);
    let mut e = Encoder::new();
    e.set_max_table_size(256);
    e.begin(&mut Vec::new()); // The RFC's blocks assume the size is already known.
    for ((block, list), (tbl, size)) in blocks.iter().zip([RESP1, RESP2, RESP3]).zip(RESP_TABLES) {
        assert_eq!(decode(&mut d, &hex(block)).unwrap(), fields(list));
        assert_eq!(table(&d.table), pairs(tbl));
        assert_eq!(d.dynamic_table_size(), size);
        // The same block from our encoder, indexing every field as the RFC's encoder does.
        let mut out = Vec::new();
        for (name, value) in list {
            if *name == ":status" && *value == "200" {
                e.encode_status(200, &mut out);
            } else {
                e.field(name.as_bytes(), value.as_bytes(), true, huffman, &mut out);
            }
        }
        assert_eq!(out, hex(block), "encoding {list:?}");
        assert_eq!(table(&e.table), pairs(tbl));
        assert_eq!(e.dynamic_table_size(), size);
    }
}

#[test]
fn c5_responses_without_huffman() {
    response_sequence(
        [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        ],
        false,
    );
}

#[test]
fn c6_responses_with_huffman() {
    response_sequence(
        [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ],
        true,
    );
}

// ---------------------------------------------------------------------------------------------
// Errors

fn compression_error(limit: usize, block: &[u8]) -> &'static str {
    match decode(&mut Decoder::new(limit), block) {
        Err(DecodeError::Compression(why)) => why,
        other => panic!("{block:02x?}: expected a compression error, got {other:?}"),
    }
}

#[test]
fn bad_indices() {
    assert_eq!(compression_error(4096, &hex("80")), "index 0");
    // 62: the first dynamic index, with an empty table.
    assert_eq!(compression_error(4096, &hex("be")), "index beyond the dynamic table");
    // A literal whose name index is beyond the table.
    assert_eq!(compression_error(4096, &hex("7f00 0161")), "index beyond the dynamic table");
    assert_eq!(compression_error(4096, &hex("0f2f 0161")), "index beyond the dynamic table");
    // One entry: 62 is valid, 63 is not.
    let mut d = Decoder::new(4096);
    assert!(decode(&mut d, &hex("4001 6101 62 be")).is_ok());
    assert_eq!(decode(&mut d, &hex("bf")), Err(DecodeError::Compression("index beyond the dynamic table")));
}

#[test]
fn size_updates() {
    // Up to the limit, at the start, several of them: fine.
    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &hex("3fe11f 20 3fe11f 82")).unwrap(), fields(&[(":method", "GET")]));
    // Above the limit.
    assert_eq!(compression_error(4096, &hex("3fe21f")), "dynamic table size update above SETTINGS_HEADER_TABLE_SIZE");
    assert_eq!(compression_error(0, &hex("21")), "dynamic table size update above SETTINGS_HEADER_TABLE_SIZE");
    // After a field (RFC 7541 §4.2: only at the beginning of a block).
    assert_eq!(compression_error(4096, &hex("82 20")), "dynamic table size update after a field");
    assert_eq!(compression_error(4096, &hex("20 82 3fe11f")), "dynamic table size update after a field");
    // A size update evicts, and a later insertion respects the new size.
    let mut d = Decoder::new(4096);
    decode(&mut d, &hex("4001 6101 62")).unwrap();
    assert_eq!(d.dynamic_table_size(), 34);
    decode(&mut d, &hex("3f02")).unwrap(); // 33
    assert_eq!(d.dynamic_table_size(), 0);
    assert_eq!(compression_error(4096, &hex("3f02 be")), "index beyond the dynamic table");
}

#[test]
fn huffman_errors() {
    // Literal without indexing, new name: Huffman-coded name "a" with bad endings.
    assert_eq!(decode(&mut Decoder::new(4096), &hex("00 81 1f 00")).unwrap(), fields(&[("a", "")]));
    assert_eq!(compression_error(4096, &hex("00 81 18 00")), "Huffman padding is not a prefix of EOS");
    assert_eq!(compression_error(4096, &hex("00 82 1fff 00")), "Huffman padding longer than 7 bits");
    assert_eq!(compression_error(4096, &hex("00 84 ffffffff 00")), "Huffman EOS inside a string");
    // In a value, too.
    assert_eq!(compression_error(4096, &hex("04 81 ff")), "Huffman padding longer than 7 bits");
    assert_eq!(compression_error(4096, &hex("04 84 ffffffff")), "Huffman EOS inside a string");
}

#[test]
fn integer_overflow_and_truncation() {
    // Six continuation bytes.
    assert_eq!(compression_error(4096, &hex("ff ffffffffff 0f")), "integer overflow");
    // Five, but above u32::MAX.
    assert_eq!(compression_error(4096, &hex("ff ffffffff7f")), "integer overflow");
    // Five, within range: a valid integer, an invalid index.
    assert_eq!(compression_error(4096, &hex("ff ffffffff07")), "index beyond the dynamic table");
    assert_eq!(compression_error(4096, &hex("ff ffffffff0f")), "integer overflow");
    // Leading zero continuation bytes are tolerated up to the byte count.
    assert_eq!(
        decode(&mut Decoder::new(4096), &hex("ff 80 80 80 00")),
        Err(DecodeError::Compression("index beyond the dynamic table"))
    );
    assert_eq!(compression_error(4096, &hex("ff 80 80 80 80 80 00")), "integer overflow");
    // A size update with a huge value.
    assert_eq!(compression_error(4096, &hex("3f ffffffff7f")), "integer overflow");
    // Truncated: an integer cut short, a literal without its value, a string cut short.
    assert_eq!(compression_error(4096, &hex("ff")), "truncated integer");
    assert_eq!(compression_error(4096, &hex("ff 80")), "truncated integer");
    assert_eq!(compression_error(4096, &hex("0f")), "truncated integer");
    assert_eq!(compression_error(4096, &hex("04")), "truncated block: string expected");
    assert_eq!(compression_error(4096, &hex("00 01 61")), "truncated block: string expected");
    assert_eq!(compression_error(4096, &hex("40")), "truncated block: string expected");
    assert_eq!(compression_error(4096, &hex("00 05 6162")), "string length beyond the block");
    assert_eq!(compression_error(4096, &hex("04 7f ff ff 0f 61")), "string length beyond the block");
    // The empty block is a valid (empty) list.
    assert_eq!(decode(&mut Decoder::new(4096), &[]).unwrap(), Vec::new());
}

/// A field the callback refuses: the error comes back, later fields are not handed out, but
/// the block is decoded to its end, so the dynamic table stays in step for the next block.
#[test]
fn refused_field_keeps_the_table_in_step() {
    let mut d = Decoder::new(4096);
    // Refused first field, then two insertions.
    let block = hex("82 4001 6101 62 4001 6301 64");
    let mut seen = 0;
    let r = d.decode(&block, usize::MAX, |_, _, _| {
        seen += 1;
        Err("no")
    });
    assert_eq!(r, Err(DecodeError::Field("no")));
    assert_eq!(seen, 1);
    assert_eq!(table(&d.table), pairs(&[("c", "d"), ("a", "b")]));
    assert_eq!(decode(&mut d, &hex("be bf")).unwrap(), fields(&[("c", "d"), ("a", "b")]));
}

// ---------------------------------------------------------------------------------------------
// The HPACK bomb

/// One 4,000-byte entry referenced 16,000 times: 16 KB of block that would decode to 64 MB.
/// Refused as ListTooLarge at the limit, without handing out more than the limit's worth of
/// fields, quickly; and the table is still in step afterwards.
#[test]
fn hpack_bomb_is_refused_quickly() {
    let mut block = vec![0x40, 0x01, b'x', 0x7f];
    let mut len = Vec::new();
    write_integer(&mut len, 0, 7, 4000);
    block.truncate(3);
    block.extend_from_slice(&len);
    block.extend(std::iter::repeat_n(b'v', 4000));
    block.extend(std::iter::repeat_n(0xbe, 16_000));
    let mut d = Decoder::new(4096);
    let mut handed = 0usize;
    let start = std::time::Instant::now();
    let r = d.decode(&block, 65_536, |n, v, _| {
        handed += n.len() + v.len() + 32;
        Ok::<(), ()>(())
    });
    let took = start.elapsed();
    assert_eq!(r, Err(DecodeError::ListTooLarge));
    assert!(handed <= 65_536, "{handed} bytes handed out");
    assert!(handed > 0);
    assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    assert_eq!(d.dynamic_table_size(), 4033);
    // Huffman-coded variant: a small string that decodes larger is still accounted.
    let mut e = Encoder::new();
    let mut block = Vec::new();
    e.field(b"x", &[b'0'; 1000], true, true, &mut block);
    block.extend(std::iter::repeat_n(0xbe, 1000));
    assert!(block.len() < 2000);
    let mut d = Decoder::new(4096);
    assert_eq!(d.decode(&block, 16_384, |_, _, _| Ok::<(), ()>(())), Err(DecodeError::ListTooLarge));
}

#[test]
fn list_size_is_name_plus_value_plus_32() {
    // ":method: GET" = 7 + 3 + 32 = 42.
    let block = hex("82 82");
    assert_eq!(Decoder::new(4096).decode(&block, 84, |_, _, _| Ok::<(), ()>(())), Ok(()));
    assert_eq!(Decoder::new(4096).decode(&block, 83, |_, _, _| Ok::<(), ()>(())), Err(DecodeError::ListTooLarge));
}

// ---------------------------------------------------------------------------------------------
// The encoder

#[test]
fn encoder_statuses_and_size_updates() {
    let mut e = Encoder::new();
    let mut out = Vec::new();
    for (status, byte) in [(200, 0x88), (204, 0x89), (206, 0x8a), (304, 0x8b), (400, 0x8c), (404, 0x8d), (500, 0x8e)] {
        out.clear();
        e.encode_status(status, &mut out);
        assert_eq!(out, [byte]);
    }
    out.clear();
    e.encode_status(301, &mut out);
    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &out).unwrap(), fields(&[(":status", "301")]));
    // The peer shrinks its table to 0 and back: the next block says 0, then 4096.
    e.encode(b"server", b"ferrohttpd", &mut Vec::new());
    assert!(e.dynamic_table_size() > 0);
    e.set_max_table_size(0);
    assert_eq!(e.dynamic_table_size(), 0);
    e.set_max_table_size(65_536);
    out.clear();
    e.encode_status(200, &mut out);
    assert_eq!(out, hex("20 3fe11f 88"));
    out.clear();
    e.encode_status(200, &mut out);
    assert_eq!(out, hex("88"), "the update is sent once");
    // No change, no update.
    e.set_max_table_size(4096);
    out.clear();
    e.encode_status(200, &mut out);
    assert_eq!(out, hex("88"));
    // Down to 100: one update.
    e.set_max_table_size(100);
    out.clear();
    e.encode_status(404, &mut out);
    assert_eq!(out, hex("3f45 8d"));
}

/// A typical response head: the second one, a second later, is mostly index bytes; fields
/// that change per file are never indexed.
#[test]
fn encoder_indexing_policy() {
    let head = |date: &str, len: &str| -> Vec<(&'static str, String)> {
        vec![
            ("date", date.to_string()),
            ("content-type", "image/jpeg".to_string()),
            ("content-length", len.to_string()),
            ("last-modified", "Tue, 01 Dec 2026 10:00:00 GMT".to_string()),
            ("etag", "\"5f3a-1e240\"".to_string()),
            ("accept-ranges", "bytes".to_string()),
            ("cache-control", "max-age=3600".to_string()),
            ("server", "ferrohttpd".to_string()),
        ]
    };
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    let mut sizes = Vec::new();
    for (date, len) in [
        ("Tue, 01 Dec 2026 23:00:00 GMT", "12345"),
        ("Tue, 01 Dec 2026 23:00:00 GMT", "23456"),
        ("Tue, 01 Dec 2026 23:00:01 GMT", "34567"),
    ] {
        let mut out = Vec::new();
        e.encode_status(200, &mut out);
        let list = head(date, len);
        for (n, v) in &list {
            e.encode(n.as_bytes(), v.as_bytes(), &mut out);
        }
        let mut want = fields(&[(":status", "200")]);
        want.extend(list.iter().map(|(n, v)| (n.to_string(), v.clone(), false)));
        assert_eq!(decode(&mut d, &out).unwrap(), want);
        assert_eq!(d.dynamic_table_size(), e.dynamic_table_size());
        sizes.push(out.len());
    }
    // date, content-type, accept-ranges, cache-control, server: indexed.
    assert_eq!(e.table.len(), 6, "{:?}", table(&e.table));
    assert!(table(&e.table).iter().all(|(n, _)| !matches!(n.as_str(), "content-length" | "last-modified" | "etag")));
    // Same second: 1 (status) + 5 index bytes + the three per-file literals.
    assert!(sizes[1] < sizes[0] / 2, "{sizes:?}");
    // New second: the date literal again, the rest indexed.
    assert!(sizes[2] > sizes[1] && sizes[2] < sizes[0], "{sizes:?}");
}

// ---------------------------------------------------------------------------------------------
// Properties

fn field_strategy() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let name = prop_oneof![
        3 => proptest::sample::select(&[
            "date", "server", "content-type", "content-length", "etag", "last-modified", "accept-ranges",
            "cache-control", "vary", "location", "x-custom", "set-cookie", "link", "content-encoding",
        ][..]).prop_map(|s| s.as_bytes().to_vec()),
        1 => "[a-z0-9-]{1,20}".prop_map(String::into_bytes),
    ];
    let value = prop_oneof![
        3 => proptest::sample::select(&["", "bytes", "text/html", "image/png", "ferrohttpd", "Tue, 01 Dec 2026 23:00:00 GMT"][..])
            .prop_map(|s| s.as_bytes().to_vec()),
        2 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => proptest::collection::vec(any::<u8>(), 0..2000),
    ];
    (name, value)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Blocks of arbitrary fields, with the peer's table size changing between blocks:
    /// the decoder gets back exactly the list, both tables stay the same size and within
    /// their limits.
    #[test]
    fn round_trip(blocks in proptest::collection::vec(
        (proptest::option::of(0usize..6000), 100u16..600, proptest::collection::vec(field_strategy(), 0..12)),
        1..8,
    )) {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for (size, status, list) in blocks {
            if let Some(n) = size {
                e.set_max_table_size(n.min(4096));
            }
            let mut out = Vec::new();
            e.encode_status(status, &mut out);
            for (n, v) in &list {
                e.encode(n, v, &mut out);
            }
            let mut got = Vec::new();
            d.decode(&out, usize::MAX, |n, v, s| {
                got.push((n.to_vec(), v.to_vec(), s));
                Ok::<(), ()>(())
            }).unwrap();
            let mut want = vec![(b":status".to_vec(), status.to_string().into_bytes(), false)];
            want.extend(list.iter().map(|(n, v)| (n.clone(), v.clone(), false)));
            prop_assert_eq!(got, want);
            prop_assert_eq!(d.dynamic_table_size(), e.dynamic_table_size());
            prop_assert!(d.table.size() <= d.table.max());
            prop_assert!(e.table.size() <= e.table.max() && e.table.max() <= 4096);
        }
    }

    /// The invariant `conn/h2.rs`'s head memo rests on: a block that leaves
    /// [`Encoder::state`] as it was encodes to the same bytes again while the state stays the
    /// same, and a decoder that took the first copy decodes the second to the same list.
    /// Each step either sends a list or changes the peer's table size.
    #[test]
    fn an_unchanged_state_encodes_the_same_bytes(steps in proptest::collection::vec(
        (proptest::option::of(0usize..6000), proptest::collection::vec(field_strategy(), 0..8)),
        1..10,
    )) {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let encode = |e: &mut Encoder, list: &[(Vec<u8>, Vec<u8>)]| {
            let mut out = Vec::new();
            e.encode_status(200, &mut out);
            for (n, v) in list {
                e.encode(n, v, &mut out);
            }
            out
        };
        let decode = |d: &mut Decoder, block: &[u8]| {
            let mut got = Vec::new();
            d.decode(block, usize::MAX, |n, v, _| {
                got.push((n.to_vec(), v.to_vec()));
                Ok::<(), ()>(())
            }).unwrap();
            got
        };
        for (size, list) in steps {
            if let Some(n) = size {
                let before = e.state();
                let old = e.table.max();
                e.set_max_table_size(n.min(4096));
                prop_assert!(e.state() != before || n.min(4096) == old);
            }
            // The first encoding usually indexes fields (the state changes); the second
            // then refers to them, and changes nothing unless entries were evicted.
            let mut unchanged = 0;
            for _ in 0..3 {
                let before = e.state();
                let first = encode(&mut e, &list);
                let got = decode(&mut d, &first);
                if e.state() == before {
                    unchanged += 1;
                    let again = encode(&mut e, &list);
                    prop_assert_eq!(&again, &first);
                    prop_assert_eq!(e.state(), before);
                    prop_assert_eq!(decode(&mut d, &again), got);
                }
            }
            // Lists that fit the table settle within two encodings.
            let fits = list.iter().map(|(n, v)| n.len() + v.len() + 32).sum::<usize>() <= e.table.max() / 4;
            prop_assert!(unchanged >= 1 || !fits);
        }
    }

    /// Arbitrary bytes: no panic, and the table never exceeds its limit.
    #[test]
    fn arbitrary_blocks(limit in 0usize..5000, blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..4)) {
        let mut d = Decoder::new(limit);
        for b in blocks {
            let _ = d.decode(&b, 4096, |_, _, _| Ok::<(), ()>(()));
            prop_assert!(d.dynamic_table_size() <= limit);
        }
    }
}

/// What a cache entry encodes once for HTTP/2 is byte for byte what the encoder writes for
/// the same fields in any block, whatever its table holds, and decodes back to them.
#[test]
fn encode_unindexed_is_what_encode_writes() {
    let fields: [(&[u8], &[u8]); 4] = [
        (b"content-length", b"4096"),
        (b"etag", b"\"1a2b-1000-17f3c2e9a0b1c2d3\""),
        (b"last-modified", b"Tue, 01 Dec 2026 10:20:30 GMT"),
        (b"x-not-static", b"v"),
    ];
    let mut e = Encoder::new();
    let mut warm = Vec::new();
    e.encode_status(200, &mut warm);
    e.encode(b"server", b"ferrohttpd", &mut warm);
    e.encode(b"content-type", b"text/plain", &mut warm);
    for (n, v) in fields {
        let mut pre = Vec::new();
        encode_unindexed(n, v, &mut pre);
        let mut by_encoder = Vec::new();
        if n == b"x-not-static" {
            // Not a never-indexed name: `encode` would index it; only the literal form is
            // compared (through `field`).
            e.field(n, v, false, true, &mut by_encoder);
        } else {
            e.encode(n, v, &mut by_encoder);
        }
        assert_eq!(pre, by_encoder, "{}", String::from_utf8_lossy(n));
        let mut d = Decoder::new(4096);
        let mut got = Vec::new();
        d.decode(&pre, usize::MAX, |n, v, s| {
            got.push((n.to_vec(), v.to_vec(), s));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(got, vec![(n.to_vec(), v.to_vec(), false)]);
        assert_eq!(d.dynamic_table_size(), 0);
    }
}
