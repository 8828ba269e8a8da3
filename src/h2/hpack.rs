//! HPACK, the header compression of HTTP/2 (RFC 7541), written for this server.
//!
//! # API (what the connection layer codes against)
//!
//! ```text
//! Decoder::new(max_table_size)          // the SETTINGS_HEADER_TABLE_SIZE we advertise
//! decoder.decode(block, max_list_size, |name, value, sensitive| -> Result<(), E>)
//!     -> Result<(), DecodeError<E>>
//! DecodeError::{Compression(&'static str), ListTooLarge, Field(E)}
//! decoder.dynamic_table_size()
//! decoder.state()                       // moves whenever the dynamic table may change
//!
//! Encoder::new()                        // dynamic table 4096 until told otherwise
//! encoder.set_max_table_size(n)         // the peer's SETTINGS_HEADER_TABLE_SIZE
//! encoder.encode_status(status, &mut out)   // first field of every block we send
//! encoder.encode(name, value, &mut out)     // lowercase name
//! encode_unindexed(name, value, &mut out)   // what `encode` writes for a never-indexed
//!                                           // field, once for many blocks
//! encoder.dynamic_table_size()
//! ```
//!
//! **Decoding.** `decode` takes one complete header block (HEADERS and CONTINUATION fragments
//! concatenated) and calls `f(name, value, sensitive)` for each field in order; `sensitive`
//! is true for a "never indexed" literal (§6.2.3), which a proxy must keep unindexed.
//! Names and values are handed out as slices of the block itself, of the static or dynamic
//! table, or, for Huffman-coded strings, of one scratch buffer the decoder reuses: nothing is
//! allocated per field once the buffers have grown to their working size.
//!
//! * `Compression(reason)`: the block is not valid HPACK (bad index, size update above the
//!   limit or after a field, Huffman EOS or bad padding, integer overflow, truncation).
//!   Decoding stops there. RFC 9113 §4.3: a connection error of type COMPRESSION_ERROR; the
//!   decoder's state is no longer usable.
//! * `ListTooLarge`: the fields' RFC 9113 §6.5.2 size (name + value + 32 each) passed
//!   `max_list_size`. Checked *before* each field is handed out, so a small block that
//!   decodes huge (the HPACK bomb: one big dynamic entry referenced thousands of times, each
//!   reference one byte) never reaches `f`, and nothing is copied for it.
//! * `Field(e)`: `f` returned `Err(e)` (say, a malformed request field).
//!
//! After `ListTooLarge` or `Field`, `f` is not called again but **the rest of the block is
//! still decoded**, so the dynamic table stays in step with the peer's encoder: the
//! connection can answer that one stream (431, or RST_STREAM PROTOCOL_ERROR) and go on.
//! The work for the rest is bounded by the block's length (an indexed field costs a lookup;
//! the Huffman output of a string is at most 8/5 of its length). For the same reason, the
//! connection must decode every header block it receives, even for a stream it refuses.
//!
//! Dynamic table size updates (§4.2, §6.3) are accepted only before the block's first field
//! and only up to the limit given to `new`. That limit is also the table's initial size, so
//! advertise the protocol default (4096) or make sure the peer has our SETTINGS before its
//! first block.
//!
//! **Encoding.** `encode_status` starts every block the server sends (a response head always
//! begins with `:status`): it first emits any size update that `set_max_table_size` made
//! pending (the smallest size reached since the last block, then the final one, §4.2). A
//! static `:status` (200, 204, 206, 304, 400, 404, 500) is one byte; others are a literal.
//! `encode` writes one field; names must be lowercase (RFC 9113 §8.2.1), as the static
//! table and the peer expect. String literals are Huffman-coded unless that is longer.
//!
//! Indexing policy (measured in `benches/hot_paths.rs`, `hpack/*`): fields whose values repeat
//! across responses go into the dynamic table with incremental indexing, and a later
//! identical field is sent as one index byte, found by a scan of the 16 newest entries:
//! `server`, `content-type`, `accept-ranges`, `cache-control`, `vary`, `content-encoding`,
//! configured custom headers, and `date`, whose value changes once a second but is shared by
//! every response within that second (the literal is about 24 bytes and its Huffman coding
//! the largest cost of a head). Fields whose values change per file are never indexed, so
//! they do not push the useful entries out: `content-length`, `last-modified`, `etag`,
//! `content-range`, `location`, `content-disposition`, `set-cookie`. Nor is a field larger
//! than a quarter of the table. The encoder's table is capped at 4096 bytes whatever the peer
//! allows (an encoder may use less than the peer's limit; it says so with a size update).
//!
//! **Memory.** Each table keeps its entries' bytes in one buffer of at most twice its size
//! (see `table::DynTable`), plus the Huffman scratch of the decoder, given back after a
//! block that needed more than 16 KiB. An idle connection that never filled its tables holds
//! only what it used.
//!
//! **Why not a crate.** The candidates were `hpack` (unmaintained since 2016), its forks
//! `fluke-hpack`/`loona-hpack` and `httlib-hpack`. They allocate per decoded Huffman string
//! or per dynamic-table entry, none accounts the header list size before materialising a
//! field, and their error behaviour on the §4.2/§5.2/§6.3 cases is not what RFC 9113 needs
//! (or not documented). HPACK is small and fully specified, with test vectors (Appendix C,
//! all of them unit tests here), so it is written here, to this server's needs.

mod table;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::http::huffman;
use crate::http::prefixed::{self, write_integer, Rules, Str};

use table::{static_name_index, DynTable, ENTRY_OVERHEAD, STATIC};

/// Why a header block was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError<E> {
    /// Not valid HPACK: a connection error of type COMPRESSION_ERROR (RFC 9113 §4.3).
    Compression(&'static str),
    /// The header list passed `max_list_size` (RFC 9113 §6.5.2): answer 431.
    ListTooLarge,
    /// The field callback refused a field.
    Field(E),
}

impl<E: fmt::Display> fmt::Display for DecodeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Compression(why) => write!(f, "HPACK: {why}"),
            DecodeError::ListTooLarge => f.write_str("header list larger than SETTINGS_MAX_HEADER_LIST_SIZE"),
            DecodeError::Field(e) => e.fmt(f),
        }
    }
}

/// Decodes the header blocks of one connection (one direction).
pub struct Decoder {
    table: DynTable,
    /// The SETTINGS_HEADER_TABLE_SIZE we advertise: the largest size update accepted.
    limit: usize,
    /// Huffman-decoded names and values of the current field.
    scratch: Vec<u8>,
    /// Counts the changes to the dynamic table (an entry added, a size update): a block
    /// decoded without changing it decodes to the same fields while it stays the same.
    changes: u64,
}

/// Hands decoded fields to the callback until the first refusal or the list size limit.
struct Sink<'f, F, E> {
    f: &'f mut F,
    list: usize,
    max: usize,
    failed: Option<DecodeError<E>>,
}

impl<F: FnMut(&[u8], &[u8], bool) -> Result<(), E>, E> Sink<'_, F, E> {
    fn field(&mut self, name: &[u8], value: &[u8], sensitive: bool) {
        if self.failed.is_some() {
            return;
        }
        self.list = self.list.saturating_add(name.len() + value.len() + ENTRY_OVERHEAD);
        if self.list > self.max {
            self.failed = Some(DecodeError::ListTooLarge);
        } else if let Err(e) = (self.f)(name, value, sensitive) {
            self.failed = Some(DecodeError::Field(e));
        }
    }
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `max_table_size` bytes (the
    /// SETTINGS_HEADER_TABLE_SIZE we advertise), starting at that size.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder { table: DynTable::new(max_table_size), limit: max_table_size, scratch: Vec::new(), changes: 0 }
    }

    /// A count that moves whenever the dynamic table may have changed: the same block
    /// decoded in the same state gives the same fields ([`Session`](super::session::Session)
    /// keeps the last such block's fields).
    pub fn state(&self) -> u64 {
        self.changes
    }

    /// The dynamic table's current size in RFC 7541 §4.1 terms (never above the limit).
    pub fn dynamic_table_size(&self) -> usize {
        self.table.size()
    }

    /// Decodes one complete header block; see the module documentation for the errors.
    pub fn decode<E, F>(&mut self, block: &[u8], max_list_size: usize, mut f: F) -> Result<(), DecodeError<E>>
    where
        F: FnMut(&[u8], &[u8], bool) -> Result<(), E>,
    {
        let mut sink = Sink { f: &mut f, list: 0, max: max_list_size, failed: None };
        let result = self.run(block, &mut sink);
        prefixed::release_scratch(&mut self.scratch);
        match (result, sink.failed) {
            (Err(why), _) => Err(DecodeError::Compression(why)),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }

    fn run<F, E>(&mut self, block: &[u8], sink: &mut Sink<'_, F, E>) -> Result<(), &'static str>
    where
        F: FnMut(&[u8], &[u8], bool) -> Result<(), E>,
    {
        let Decoder { table, limit, scratch, changes } = self;
        let mut pos = 0;
        let mut at_start = true;
        while let Some(&b) = block.get(pos) {
            if b & 0x80 != 0 {
                // §6.1 Indexed Header Field.
                let i = integer(block, &mut pos, 7)?;
                let (name, value) = lookup(table, i)?;
                sink.field(name, value, false);
            } else if b & 0xe0 == 0x20 {
                // §6.3 Dynamic Table Size Update.
                if !at_start {
                    return Err("dynamic table size update after a field");
                }
                let n = integer(block, &mut pos, 5)?;
                if n > *limit {
                    return Err("dynamic table size update above SETTINGS_HEADER_TABLE_SIZE");
                }
                table.set_max(n);
                *changes += 1;
                continue;
            } else {
                // §6.2 Literal Header Field: with incremental indexing (01), without indexing
                // (0000) or never indexed (0001).
                let (prefix, index, sensitive) =
                    if b & 0x40 != 0 { (6, true, false) } else { (4, false, b & 0x10 != 0) };
                let i = integer(block, &mut pos, prefix)?;
                scratch.clear();
                let name = match i {
                    0 => string(block, &mut pos, scratch)?,
                    i if i <= STATIC.len() => Str::Static(STATIC[i - 1].0),
                    i => {
                        // Copied out of the table: inserting this field may evict the entry
                        // the name comes from (§4.4).
                        let (name, _) = lookup(table, i)?;
                        scratch.extend_from_slice(name);
                        Str::Scratch(0, name.len())
                    }
                };
                let value = string(block, &mut pos, scratch)?;
                let (name, value) = (name.get(block, scratch), value.get(block, scratch));
                sink.field(name, value, sensitive);
                if index {
                    table.insert(name, value);
                    *changes += 1;
                }
            }
            at_start = false;
        }
        Ok(())
    }
}

/// The field at HPACK index `i` (§2.3.3).
fn lookup(table: &DynTable, i: usize) -> Result<(&[u8], &[u8]), &'static str> {
    match i {
        0 => Err("index 0"),
        i if i <= STATIC.len() => Ok(STATIC[i - 1]),
        i => table.get(i - STATIC.len() - 1).ok_or("index beyond the dynamic table"),
    }
}

/// HPACK's integers and strings: integers above `u32::MAX` are refused (no HPACK quantity
/// here comes near it: lengths are bounded by the block, indices and sizes by the tables),
/// and so is a sixth continuation byte, as soon as the fifth announces it.
const RULES: Rules = Rules {
    max: u32::MAX as u64,
    last_shift: 28,
    refuse_at_last: true,
    string_expected: "truncated block: string expected",
    string_beyond: "string length beyond the block",
};

/// Reads an integer with an `n`-bit prefix at `block[*pos]` (§5.1), which must exist.
fn integer(block: &[u8], pos: &mut usize, n: u32) -> Result<usize, &'static str> {
    // At most u32::MAX: a usize.
    prefixed::integer(block, pos, n, &RULES).map(|v| v as usize)
}

/// Reads a string literal (§5.2) at `*pos`; a Huffman-coded one is decoded onto `scratch`.
fn string(block: &[u8], pos: &mut usize, scratch: &mut Vec<u8>) -> Result<Str, &'static str> {
    prefixed::string(block, pos, 7, &RULES, scratch)
}

/// Writes a string literal, Huffman-coded when `huffman` and that is not longer.
fn write_string(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
    let coded = if huffman { huffman::encoded_len(s) } else { usize::MAX };
    prefixed::write_string(out, 0, 7, s, (coded <= s.len()).then_some(coded));
}

/// The largest dynamic table the encoder uses, whatever the peer allows.
const ENCODER_TABLE_SIZE: usize = 4096;
/// How many of the newest dynamic entries the encoder searches for a match.
const FIND_WINDOW: usize = 16;

/// Encodes the header blocks the server sends on one connection.
pub struct Encoder {
    table: DynTable,
    /// A size change not yet signalled: the smallest size reached since the last block.
    pending_min: Option<usize>,
    /// Counts the changes to what the next block's bytes depend on (an entry added, a size
    /// set or signalled): see [`Encoder::state`].
    changes: u64,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder with the protocol's initial table size, 4096.
    pub fn new() -> Encoder {
        Encoder { table: DynTable::new(ENCODER_TABLE_SIZE), pending_min: None, changes: 0 }
    }

    /// The state the encoding of a block depends on, as a token: encoding is a function of the
    /// fields and this state, so when a block leaves the token as it was (every field was
    /// indexed or a literal not indexed), the same fields encode to the same bytes again for as
    /// long as the token stays the same. The peer's decoder then mirrors an unchanged table,
    /// so those bytes also decode to the same fields.
    pub fn state(&self) -> u64 {
        self.changes
    }

    /// The dynamic table's current size in RFC 7541 §4.1 terms.
    pub fn dynamic_table_size(&self) -> usize {
        self.table.size()
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks (evicting) or grows (up to
    /// 4096) now, and the next block starts with the size update that tells the peer.
    pub fn set_max_table_size(&mut self, n: usize) {
        let size = n.min(ENCODER_TABLE_SIZE);
        if size == self.table.max() && self.pending_min.is_none() {
            return;
        }
        self.pending_min = Some(self.pending_min.map_or(size, |m| m.min(size)));
        self.changes += 1;
        self.table.set_max(size);
    }

    /// Starts a block: the pending size updates (§4.2).
    fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(min) = self.pending_min.take() {
            self.changes += 1;
            if min < self.table.max() {
                write_integer(out, 0x20, 5, min);
            }
            write_integer(out, 0x20, 5, self.table.max());
        }
    }

    /// Starts a response head block with `:status`.
    pub fn encode_status(&mut self, status: u16, out: &mut Vec<u8>) {
        self.begin(out);
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            out.push(0x80 | index);
        } else {
            let mut digits = itoa::Buffer::new();
            self.field(b":status", digits.format(status).as_bytes(), false, true, out);
        }
    }

    /// Writes one field (lowercase `name`), indexed as the module documentation says.
    pub fn encode(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        debug_assert!(!name.iter().any(u8::is_ascii_uppercase), "HTTP/2 field names are lowercase");
        let index = !matches!(
            name,
            b"content-length"
                | b"last-modified"
                | b"etag"
                | b"content-range"
                | b"location"
                | b"content-disposition"
                | b"set-cookie"
        ) && name.len() + value.len() + ENTRY_OVERHEAD <= self.table.max() / 4;
        self.field(name, value, index, true, out);
    }

    /// One field: as an index when `index` and it is among the newest entries, else as a
    /// literal (with incremental indexing when `index`), the name from the static table when
    /// it is there.
    fn field(&mut self, name: &[u8], value: &[u8], index: bool, huffman: bool, out: &mut Vec<u8>) {
        let (flags, prefix) = if index { (0x40, 6) } else { (0x00, 4) };
        if index {
            if let Some(i) = self.table.find(name, value, FIND_WINDOW) {
                write_integer(out, 0x80, 7, STATIC.len() + 1 + i);
                return;
            }
        }
        literal(name, value, flags, prefix, huffman, out);
        if index {
            self.table.insert(name, value);
            self.changes += 1;
        }
    }
}

/// A literal field, its name from the static table when it is there.
fn literal(name: &[u8], value: &[u8], flags: u8, prefix: u32, huffman: bool, out: &mut Vec<u8>) {
    match static_name_index(name) {
        Some(i) => write_integer(out, flags, prefix, i),
        None => {
            out.push(flags);
            write_string(out, name, huffman);
        }
    }
    write_string(out, value, huffman);
}

/// Appends the field (lowercase `name`) as a literal without indexing, Huffman-coded, as
/// [`Encoder::encode`] writes the fields it never indexes (`content-length`, `etag`,
/// `last-modified`, ...): the bytes are the same in every block and on every connection, so a
/// cache entry encodes its own once and every response copies them.
pub fn encode_unindexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    literal(name, value, 0x00, 4, true, out);
}
