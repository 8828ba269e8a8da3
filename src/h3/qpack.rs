//! QPACK, the field compression of HTTP/3 (RFC 9204), written for this server: the static
//! table always, no dynamic table in either direction.
//!
//! # API
//!
//! ```text
//! Decoder::new()
//! decoder.decode(section, max_size, |name, value| -> Result<(), E>) -> Result<(), DecodeError<E>>
//! DecodeError::{Decompression(&'static str), TooLarge, Field(E)}
//! encode_status(status, &mut out), encode_field(name, value, &mut out)   // field lines
//! encode_section(status, fields, &mut out)           // prefix + :status + fields
//! encode_response_head(status, fields, max, &mut out) -> Result<(), HeadTooLarge>
//!                                                    // the whole HEADERS frame
//! ValueCache::default(); encode_response_head_cached(&mut cache, status, fields, max, &mut out)
//!                                                    // the same, a connection's recent values
//!                                                    // not Huffman-coded again
//! check_encoder_stream(bytes), DecoderStream::default().read(bytes)   // the peer's QPACK streams
//! ```
//!
//! **Decoding.** We advertise SETTINGS_QPACK_MAX_TABLE_CAPACITY = 0 and
//! SETTINGS_QPACK_BLOCKED_STREAMS = 0 (their defaults; a decoder that allows no dynamic
//! table is legal, §3.2.3), so a field section can only use the static table and literals:
//! its Required Insert Count must be 0 and its Base not negative (§4.5.1), and any
//! reference to the dynamic table (indexed or name reference, relative or post-base) is
//! QPACK_DECOMPRESSION_FAILED (§2.2.3), as are a static index above 98, a string longer
//! than the section, an integer overflow, and a Huffman string with EOS or bad padding. No
//! stream is ever blocked. `decode` takes a whole section (one HEADERS frame's payload) and
//! hands each field to the callback as slices of the section, of the static table or of one
//! reused Huffman scratch buffer: nothing is allocated per field. The field section size of
//! RFC 9114 §4.2.2 (name + value + 32 per field) is counted *before* each field is handed
//! out, so a section that decodes larger than `max_size` is refused as `TooLarge` without
//! being materialised; the rest of the section is still checked (bounded by its length), so
//! whether a section is valid QPACK does not depend on the limit.
//!
//! **Encoding.** A response section is the two-byte prefix `00 00` (no dynamic table),
//! `:status` (an index for the 14 codes in the static table: one byte for 103, 200, 304,
//! 404 and 503, two for 100, 204, 206, 302, 400, 403, 421, 425 and 500, whose indices fill
//! the 6-bit prefix; a name reference and three digits for the others),
//! then each field: one byte when the static table has the exact field (`accept-ranges:
//! bytes`, `content-type: text/css`, `vary: accept-encoding`...), a literal with a static
//! name reference when it has the name (`content-length`, `etag`, `last-modified`, `date`,
//! `server`...), a literal name otherwise. Strings are Huffman-coded unless that is longer.
//! A connection's responses repeat most values (`date` within its second, `server`,
//! `content-type`, a file's `etag` and `last-modified`): a [`ValueCache`] of the last few
//! values and their codings (8 slots of values up to 64 bytes, chosen by a few of their
//! bytes) copies a coding it has instead of computing it again.
//!
//! **The dynamic table.** Not used. Our decoder does not need one: clients compress
//! requests with the static table and literals when we advertise 0, and a connection's
//! requests repeat little that the static table lacks. Our encoder could use one: it would
//! need an encoder stream, the peer's acknowledgements, and blocked-stream accounting, for
//! a saving only on the fields that repeat across responses of a connection but are not in
//! the static table (`server`, `date`, a custom `cache-control`); ARCHITECTURE.md ("QPACK")
//! gives the byte counts.
//!
//! **The QPACK streams.** With capacity 0, the peer's encoder stream may only carry Set
//! Dynamic Table Capacity 0; any other capacity or an insert or duplicate is
//! QPACK_ENCODER_STREAM_ERROR (§4.3.1, §3.2.3). Our encoder never references the table, so
//! on the peer's decoder stream a Section Acknowledgment or an Insert Count Increment is
//! QPACK_DECODER_STREAM_ERROR (§4.4.1, §4.4.3); Stream Cancellation is fine (§4.4.2). We
//! open no encoder or decoder stream of our own (§4.2 allows it with a capacity of 0).

mod table;

use std::fmt;

use super::frame::{self, Code, ConnError};
use crate::http::huffman;
use crate::http::prefixed::{self, write_integer, Rules, Str};
use table::{static_name, STATIC};

/// The overhead RFC 9114 §4.2.2 counts per field (as HTTP/2's header list size).
pub const FIELD_OVERHEAD: u64 = 32;

/// Why a field section was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError<E> {
    /// Not valid QPACK for a decoder without a dynamic table: a connection error of type
    /// QPACK_DECOMPRESSION_FAILED (RFC 9204 §2.2.3).
    Decompression(&'static str),
    /// The fields passed `max_size` (RFC 9114 §4.2.2): answer 431.
    TooLarge,
    /// The field callback refused a field.
    Field(E),
}

impl<E: fmt::Display> fmt::Display for DecodeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Decompression(why) => write!(f, "QPACK: {why}"),
            DecodeError::TooLarge => f.write_str("field section larger than SETTINGS_MAX_FIELD_SECTION_SIZE"),
            DecodeError::Field(e) => e.fmt(f),
        }
    }
}

/// Decodes field sections (stateless but for its Huffman scratch buffer).
#[derive(Debug, Default)]
pub struct Decoder {
    scratch: Vec<u8>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes one whole field section; see the module documentation for the errors.
    pub fn decode<E, F>(&mut self, section: &[u8], max_size: u64, mut f: F) -> Result<(), DecodeError<E>>
    where
        F: FnMut(&[u8], &[u8]) -> Result<(), E>,
    {
        let mut size = 0u64;
        let mut failed = None;
        let result = self.run(section, |name, value| {
            if failed.is_some() {
                return;
            }
            size = size.saturating_add(name.len() as u64 + value.len() as u64 + FIELD_OVERHEAD);
            if size > max_size {
                failed = Some(DecodeError::TooLarge);
            } else if let Err(e) = f(name, value) {
                failed = Some(DecodeError::Field(e));
            }
        });
        prefixed::release_scratch(&mut self.scratch);
        match (result, failed) {
            (Err(why), _) => Err(DecodeError::Decompression(why)),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }

    fn run(&mut self, section: &[u8], mut sink: impl FnMut(&[u8], &[u8])) -> Result<(), &'static str> {
        let scratch = &mut self.scratch;
        // §4.5.1: the Encoded Required Insert Count (8-bit prefix), then the Sign bit and
        // Delta Base (7-bit prefix).
        if section.len() < 2 {
            return Err("field section shorter than its prefix");
        }
        let mut pos = 0;
        if integer(section, &mut pos, 8)? != 0 {
            return Err("Required Insert Count above 0 (no dynamic table)");
        }
        let Some(&b) = section.get(pos) else { return Err("field section prefix truncated") };
        integer(section, &mut pos, 7)?;
        if b & 0x80 != 0 {
            // Base = Required Insert Count - Delta Base - 1 < 0 (§4.5.1.2).
            return Err("negative Base");
        }
        while let Some(&b) = section.get(pos) {
            if b & 0x80 != 0 {
                // §4.5.2 Indexed Field Line: 1 T index(6+).
                if b & 0x40 == 0 {
                    return Err("reference to the dynamic table");
                }
                let (name, value) = lookup(integer(section, &mut pos, 6)?)?;
                sink(name, value);
                continue;
            }
            scratch.clear();
            let name = if b & 0x40 != 0 {
                // §4.5.4 Literal Field Line with Name Reference: 01 N T index(4+).
                if b & 0x10 == 0 {
                    return Err("reference to the dynamic table");
                }
                Str::Static(lookup(integer(section, &mut pos, 4)?)?.0)
            } else if b & 0x20 != 0 {
                // §4.5.6 Literal Field Line with Literal Name: 001 N H length(3+).
                string(section, &mut pos, 3, scratch)?
            } else {
                // §4.5.3 Indexed Field Line with Post-Base Index (0001) and §4.5.5 Literal
                // Field Line with Post-Base Name Reference (0000): the dynamic table.
                return Err("post-base reference to the dynamic table");
            };
            let value = string(section, &mut pos, 7, scratch)?;
            sink(name.get(section, scratch), value.get(section, scratch));
        }
        Ok(())
    }
}

/// The static entry at `i`.
fn lookup(i: u64) -> Result<(&'static [u8], &'static [u8]), &'static str> {
    usize::try_from(i).ok().and_then(|i| STATIC.get(i)).copied().ok_or("static index above 98")
}

/// QPACK's integers and strings (RFC 7541 §5.1 and §5.2, as RFC 9204 §4.1.1 and §4.1.2 use
/// them): integers are refused above 2^62 - 1 (§4.1.1: what an implementation must decode;
/// no valid field section needs more than a string length), and so is a tenth continuation
/// byte, once it is there.
const RULES: Rules = Rules {
    max: super::varint::MAX,
    last_shift: 56,
    refuse_at_last: false,
    string_expected: "truncated section: string expected",
    string_beyond: "string length beyond the section",
};

/// Reads an integer with an `n`-bit prefix at `buf[*pos]`, which must exist.
fn integer(buf: &[u8], pos: &mut usize, n: u32) -> Result<u64, &'static str> {
    prefixed::integer(buf, pos, n, &RULES)
}

/// Reads a string literal whose Huffman flag is the bit above an `n`-bit length prefix; a
/// Huffman-coded one is decoded onto `scratch`.
fn string(buf: &[u8], pos: &mut usize, n: u32, scratch: &mut Vec<u8>) -> Result<Str, &'static str> {
    prefixed::string(buf, pos, n, &RULES, scratch)
}

/// Writes a string literal with an `n`-bit length prefix under `flags`, Huffman-coded (the
/// bit above the prefix) unless that is longer.
fn write_string(out: &mut Vec<u8>, flags: u8, n: u32, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    prefixed::write_string(out, flags, n, s, (coded < s.len()).then_some(coded));
}

/// The static index of `:status: status`, for the 14 codes the table has.
fn static_status(status: u16) -> Option<u8> {
    Some(match status {
        103 => 24,
        200 => 25,
        304 => 26,
        404 => 27,
        503 => 28,
        100 => 63,
        204 => 64,
        206 => 65,
        302 => 66,
        400 => 67,
        403 => 68,
        421 => 69,
        425 => 70,
        500 => 71,
        _ => return None,
    })
}

/// Appends the `:status` field line.
pub fn encode_status(status: u16, out: &mut Vec<u8>) {
    match static_status(status) {
        // Indexed Field Line, static (T = 1).
        Some(i) => write_integer(out, 0xc0, 6, usize::from(i)),
        None => {
            // Literal with a static name reference to :status (index 24), three digits
            // (Huffman-coded only when all three are 0, 1 or 2: 5-bit codes, 2 bytes).
            write_integer(out, 0x50, 4, 24);
            let mut digits = itoa::Buffer::new();
            write_string(out, 0, 7, digits.format(status).as_bytes());
        }
    }
}

/// Codings of recent field values (see the module documentation).
#[derive(Debug, Default)]
pub struct ValueCache {
    slots: [CachedValue; CACHE_SLOTS],
}

#[derive(Debug, Default)]
struct CachedValue {
    value: Vec<u8>,
    /// Its string literal with a 7-bit length prefix (flags 0): Huffman-coded or not.
    literal: Vec<u8>,
}

const CACHE_SLOTS: usize = 8;
/// Longer values are coded each time (and hold no memory).
const CACHE_MAX_VALUE: usize = 64;

impl ValueCache {
    /// Appends `value` as a string literal with a 7-bit prefix and no flags, as
    /// `write_string(out, 0, 7, value)` does.
    fn write_value(&mut self, value: &[u8], out: &mut Vec<u8>) {
        let n = value.len();
        if n == 0 || n > CACHE_MAX_VALUE {
            return write_string(out, 0, 7, value);
        }
        // A few bytes pick the slot: the length, the ends and the middle (a date's seconds
        // are 5 from its end).
        let h = n
            ^ usize::from(value[0])
            ^ usize::from(value[n / 2]) << 1
            ^ usize::from(value[n - 1]) << 2
            ^ usize::from(value[n.saturating_sub(5)]) << 3;
        let slot = &mut self.slots[(h ^ h >> 3) % CACHE_SLOTS];
        if slot.value != value {
            slot.value.clear();
            slot.value.extend_from_slice(value);
            slot.literal.clear();
            write_string(&mut slot.literal, 0, 7, value);
        }
        out.extend_from_slice(&slot.literal);
    }
}

/// Appends one field line (lowercase `name`, as RFC 9114 §4.2 requires): indexed when the
/// static table has the field, a literal with a static name reference when it has the
/// name, a literal name otherwise.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_field_cached(&mut ValueCache::default(), name, value, out);
}

/// [`encode_field`] with `cache`'s codings of values.
fn encode_field_cached(cache: &mut ValueCache, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    debug_assert!(!name.iter().any(u8::is_ascii_uppercase), "HTTP/3 field names are lowercase");
    match static_name(name) {
        Some(all) => {
            if let Some(&i) = all.iter().find(|&&i| STATIC[usize::from(i)].1 == value) {
                write_integer(out, 0xc0, 6, usize::from(i));
                return;
            }
            write_integer(out, 0x50, 4, usize::from(all[0]));
        }
        None => write_string(out, 0x20, 3, name),
    }
    cache.write_value(value, out);
}

/// The field section size of a field (RFC 9114 §4.2.2).
pub fn field_size(name: &[u8], value: &[u8]) -> u64 {
    name.len() as u64 + value.len() as u64 + FIELD_OVERHEAD
}

/// Appends a response's field section: the prefix, `:status`, the fields in order.
pub fn encode_section<'a>(status: u16, fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0]);
    encode_status(status, out);
    for (name, value) in fields {
        encode_field(name, value, out);
    }
}

/// A response head larger than the peer's SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114
/// §4.2.2: it would not be accepted; send a smaller one, a bare 500, or reset the stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadTooLarge {
    pub size: u64,
}

/// Appends a complete HEADERS frame with the response head: `:status` and the fields
/// (lowercase names, no connection-specific fields). `max` is the peer's
/// SETTINGS_MAX_FIELD_SECTION_SIZE; a head larger than that leaves `out` as it was.
pub fn encode_response_head<'a>(
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    max: u64,
    out: &mut Vec<u8>,
) -> Result<(), HeadTooLarge> {
    encode_response_head_cached(&mut ValueCache::default(), status, fields, max, out)
}

/// [`encode_response_head`] with `cache`'s codings of values (a connection's cache: the
/// same bytes, fewer computed).
pub fn encode_response_head_cached<'a>(
    cache: &mut ValueCache,
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    max: u64,
    out: &mut Vec<u8>,
) -> Result<(), HeadTooLarge> {
    let start = out.len();
    let mut size = field_size(b":status", b"000");
    out.extend_from_slice(&[0, 0]);
    encode_status(status, out);
    for (name, value) in fields {
        size += field_size(name, value);
        encode_field_cached(cache, name, value, out);
    }
    if size > max {
        out.truncate(start);
        return Err(HeadTooLarge { size });
    }
    // The frame header goes before the section: written after it, then rotated into
    // place (a few bytes moved, no second buffer).
    let len = out.len() - start;
    frame::write_header(frame::HEADERS, len as u64, out);
    let header = out.len() - start - len;
    out[start..].rotate_right(header);
    Ok(())
}

/// Reads the peer's encoder stream (RFC 9204 §4.3) when our maximum capacity is 0: only
/// Set Dynamic Table Capacity with capacity 0 (the single byte 0x20) is valid.
pub fn check_encoder_stream(bytes: &[u8]) -> Result<(), ConnError> {
    match bytes.iter().find(|&&b| b != 0x20) {
        None => Ok(()),
        Some(b) if b & 0xe0 == 0x20 => {
            Err(frame::conn(Code::QpackEncoderStreamError, "dynamic table capacity above our maximum, 0"))
        }
        Some(_) => Err(frame::conn(Code::QpackEncoderStreamError, "insert or duplicate with a table of capacity 0")),
    }
}

/// The state of the peer's decoder stream between pieces: inside the stream ID of a Stream
/// Cancellation (how many continuation bytes read), or between instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStream {
    continuation: Option<u8>,
}

impl DecoderStream {
    /// Reads more of the peer's decoder stream (RFC 9204 §4.4) when our encoder never
    /// references the dynamic table: Stream Cancellations (01 + stream ID, 6-bit prefix)
    /// are read and ignored (how many began here is returned: they do no work); a Section
    /// Acknowledgment or Insert Count Increment is an error.
    pub fn read(&mut self, bytes: &[u8]) -> Result<u32, ConnError> {
        let mut cancellations = 0u32;
        for &b in bytes {
            if let Some(n) = self.continuation {
                // A stream ID is at most 62 bits: 9 continuation bytes after the prefix.
                if n >= 9 {
                    return Err(frame::conn(Code::QpackDecoderStreamError, "integer overflow"));
                }
                self.continuation = if b & 0x80 != 0 { Some(n + 1) } else { None };
            } else if b & 0x80 != 0 {
                return Err(frame::conn(
                    Code::QpackDecoderStreamError,
                    "Section Acknowledgment of a section without dynamic references",
                ));
            } else if b & 0x40 == 0 {
                return Err(frame::conn(Code::QpackDecoderStreamError, "Insert Count Increment with no dynamic table"));
            } else {
                cancellations = cancellations.saturating_add(1);
                if b & 0x3f == 0x3f {
                    self.continuation = Some(0);
                }
            }
        }
        Ok(cancellations)
    }
}

#[cfg(test)]
mod tests;
