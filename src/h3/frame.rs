//! HTTP/3 frames (RFC 9114 §7): a header of two varints (type, length) and a payload.
//! Parsing is incremental, as a QUIC stream's bytes arrive in pieces ([`HeaderReader`]
//! keeps the at most 16 bytes of a split header), and pure; the payloads a server reads
//! (SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH, PRIORITY_UPDATE) are parsed from a whole
//! payload, the writers append to a buffer the caller owns.
//!
//! The error codes of §8.1 and RFC 9204 §6 are [`Code`]; an error names its code, whether it
//! closes the connection ([`ConnError`]) or only a stream ([`StreamError`]), and a reason for
//! the log. Which frame may appear on which stream is the stream layer's (`h3::stream`).

use std::fmt;

use super::varint::{self, Varint};

pub const DATA: u64 = 0x0;
pub const HEADERS: u64 = 0x1;
pub const CANCEL_PUSH: u64 = 0x3;
pub const SETTINGS: u64 = 0x4;
pub const PUSH_PROMISE: u64 = 0x5;
pub const GOAWAY: u64 = 0x7;
pub const MAX_PUSH_ID: u64 = 0xd;
/// RFC 9218 §7.2: PRIORITY_UPDATE for a request stream.
pub const PRIORITY_UPDATE_REQUEST: u64 = 0xf0700;
/// RFC 9218 §7.2: PRIORITY_UPDATE for a push stream.
pub const PRIORITY_UPDATE_PUSH: u64 = 0xf0701;

/// HTTP/2 frame types with no HTTP/3 counterpart (PRIORITY, PING, WINDOW_UPDATE,
/// CONTINUATION): receiving one is H3_FRAME_UNEXPECTED on any stream (§7.2.8).
pub fn is_http2_only(ty: u64) -> bool {
    matches!(ty, 0x2 | 0x6 | 0x8 | 0x9)
}

/// A reserved ("grease") frame type, stream type, setting or error code: 0x1f * N + 0x21
/// (§7.2.8, §6.2.3, §7.2.4.1, §8.1).
pub fn is_reserved(v: u64) -> bool {
    v >= 0x21 && (v - 0x21).is_multiple_of(0x1f)
}

/// Settings identifiers (§7.2.4.1, RFC 9204 §5, RFC 9220 §3, RFC 9297 §2.1.1).
pub const SETTINGS_QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
pub const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x6;
pub const SETTINGS_QPACK_BLOCKED_STREAMS: u64 = 0x7;
pub const SETTINGS_ENABLE_CONNECT_PROTOCOL: u64 = 0x8;
pub const SETTINGS_H3_DATAGRAM: u64 = 0x33;

/// The error codes of RFC 9114 §8.1 and RFC 9204 §6, with their numbers (`code as u64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Code {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    ConnectError = 0x10f,
    VersionFallback = 0x110,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
}

impl Code {
    /// The number sent in CONNECTION_CLOSE, RESET_STREAM or STOP_SENDING.
    pub fn value(self) -> u64 {
        self as u64
    }

    /// The RFC's name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            Code::NoError => "H3_NO_ERROR",
            Code::GeneralProtocolError => "H3_GENERAL_PROTOCOL_ERROR",
            Code::InternalError => "H3_INTERNAL_ERROR",
            Code::StreamCreationError => "H3_STREAM_CREATION_ERROR",
            Code::ClosedCriticalStream => "H3_CLOSED_CRITICAL_STREAM",
            Code::FrameUnexpected => "H3_FRAME_UNEXPECTED",
            Code::FrameError => "H3_FRAME_ERROR",
            Code::ExcessiveLoad => "H3_EXCESSIVE_LOAD",
            Code::IdError => "H3_ID_ERROR",
            Code::SettingsError => "H3_SETTINGS_ERROR",
            Code::MissingSettings => "H3_MISSING_SETTINGS",
            Code::RequestRejected => "H3_REQUEST_REJECTED",
            Code::RequestCancelled => "H3_REQUEST_CANCELLED",
            Code::RequestIncomplete => "H3_REQUEST_INCOMPLETE",
            Code::MessageError => "H3_MESSAGE_ERROR",
            Code::ConnectError => "H3_CONNECT_ERROR",
            Code::VersionFallback => "H3_VERSION_FALLBACK",
            Code::QpackDecompressionFailed => "QPACK_DECOMPRESSION_FAILED",
            Code::QpackEncoderStreamError => "QPACK_ENCODER_STREAM_ERROR",
            Code::QpackDecoderStreamError => "QPACK_DECODER_STREAM_ERROR",
        }
    }
}

/// An error that closes the whole connection (CONNECTION_CLOSE with `code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnError {
    pub code: Code,
    pub why: &'static str,
}

/// An error that ends one request stream (RESET_STREAM and STOP_SENDING with `code`); the
/// connection goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamError {
    pub code: Code,
    pub why: &'static str,
}

/// What went wrong on a request stream: the stream's or the connection's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    Stream(StreamError),
    Conn(ConnError),
}

impl From<ConnError> for Error {
    fn from(e: ConnError) -> Error {
        Error::Conn(e)
    }
}

impl From<StreamError> for Error {
    fn from(e: StreamError) -> Error {
        Error::Stream(e)
    }
}

pub(crate) const fn conn(code: Code, why: &'static str) -> ConnError {
    ConnError { code, why }
}

pub(crate) const fn stream(code: Code, why: &'static str) -> StreamError {
    StreamError { code, why }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#x}): {}", self.code.name(), self.code.value(), self.why)
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#x}): {}", self.code.name(), self.code.value(), self.why)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Stream(e) => write!(f, "stream error {e}"),
            Error::Conn(e) => write!(f, "connection error {e}"),
        }
    }
}

/// A frame header: its type and its payload's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub ty: u64,
    pub len: u64,
}

/// Parses a frame header at the start of `buf`: `Some((header, bytes taken))`, or `None`
/// when `buf` ends inside it.
pub fn parse_header(buf: &[u8]) -> Option<(Header, usize)> {
    let Varint::Value(ty, a) = varint::decode(buf) else { return None };
    let Varint::Value(len, b) = varint::decode(&buf[a..]) else { return None };
    Some((Header { ty, len }, a + b))
}

/// Collects a frame header that arrives in pieces (at most 16 bytes: two 8-byte varints).
#[derive(Clone, Debug, Default)]
pub struct HeaderReader {
    buf: [u8; 16],
    len: u8,
}

impl HeaderReader {
    /// True when no byte of a header is held (a stream may end cleanly here).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes bytes of `input` until the header is complete: `(bytes consumed, the header
    /// once complete)`. It never consumes a byte past the header.
    pub fn push(&mut self, input: &[u8]) -> (usize, Option<Header>) {
        if self.len == 0 {
            // The common case: the whole header is in the input.
            if let Some((h, n)) = parse_header(input) {
                return (n, Some(h));
            }
        }
        // Byte by byte: a header is complete within 16 bytes, so `buf` never overflows.
        for (i, &b) in input.iter().enumerate() {
            self.buf[usize::from(self.len)] = b;
            self.len += 1;
            if let Some((h, _)) = parse_header(&self.buf[..usize::from(self.len)]) {
                self.len = 0;
                return (i + 1, Some(h));
            }
        }
        (input.len(), None)
    }
}

/// Appends a frame header.
pub fn write_header(ty: u64, len: u64, out: &mut Vec<u8>) {
    varint::encode(ty, out);
    varint::encode(len, out);
}

/// Appends a DATA frame's header for a payload of `len` bytes (the payload follows).
pub fn data_frame_header(len: u64, out: &mut Vec<u8>) {
    write_header(DATA, len, out);
}

/// The length of [`data_frame_header`]`(len)`.
pub fn data_frame_header_len(len: u64) -> usize {
    varint::encoded_len(DATA) + varint::encoded_len(len)
}

/// Appends a HEADERS frame around an encoded field section.
pub fn write_headers(section: &[u8], out: &mut Vec<u8>) {
    write_header(HEADERS, section.len() as u64, out);
    out.extend_from_slice(section);
}

/// Appends a GOAWAY frame (§7.2.6); a server sends the first request stream ID it will not
/// process.
pub fn goaway(id: u64, out: &mut Vec<u8>) {
    write_header(GOAWAY, varint::encoded_len(id) as u64, out);
    varint::encode(id, out);
}

/// Appends a SETTINGS frame with these (identifier, value) pairs.
pub fn write_settings(settings: &[(u64, u64)], out: &mut Vec<u8>) {
    let len: usize = settings.iter().map(|&(id, v)| varint::encoded_len(id) + varint::encoded_len(v)).sum();
    write_header(SETTINGS, len as u64, out);
    for &(id, v) in settings {
        varint::encode(id, out);
        varint::encode(v, out);
    }
}

/// The peer's SETTINGS (§7.2.4.1; what an absent setting means is its default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub qpack_max_table_capacity: u64,
    pub qpack_blocked_streams: u64,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE: unlimited when absent.
    pub max_field_section_size: u64,
    pub enable_connect_protocol: bool,
    pub h3_datagram: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            qpack_max_table_capacity: 0,
            qpack_blocked_streams: 0,
            max_field_section_size: u64::MAX,
            enable_connect_protocol: false,
            h3_datagram: false,
        }
    }
}

/// Reads one varint of a payload that must hold it (else H3_FRAME_ERROR: §7.1, a frame
/// whose payload does not hold its fields).
fn field(payload: &[u8], pos: &mut usize) -> Result<u64, ConnError> {
    match varint::decode(&payload[*pos..]) {
        Varint::Value(v, n) => {
            *pos += n;
            Ok(v)
        }
        Varint::Incomplete(_) => Err(conn(Code::FrameError, "frame payload ends inside a field")),
    }
}

/// A payload that must be exactly one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
pub fn parse_id(payload: &[u8]) -> Result<u64, ConnError> {
    let mut pos = 0;
    let id = field(payload, &mut pos)?;
    if pos != payload.len() {
        return Err(conn(Code::FrameError, "bytes after the identifier"));
    }
    Ok(id)
}

/// Parses a SETTINGS payload (§7.2.4): a sequence of (identifier, value) varint pairs.
/// A repeated identifier, an HTTP/2 setting (0x2 to 0x5) or a value out of its range is
/// H3_SETTINGS_ERROR; unknown and reserved identifiers are ignored.
pub fn parse_settings(payload: &[u8]) -> Result<Settings, ConnError> {
    let mut s = Settings::default();
    let mut pos = 0;
    // The known identifiers seen, one bit each, to refuse repeats; unknown ones are
    // counted in a small list (a repeated unknown identifier is an error too).
    let mut seen = 0u8;
    let mut unknown: [u64; 16] = [0; 16];
    let mut n_unknown = 0;
    while pos < payload.len() {
        let id = field(payload, &mut pos)?;
        let value = field(payload, &mut pos)?;
        let bit = match id {
            0x2..=0x5 => return Err(conn(Code::SettingsError, "an HTTP/2 setting in SETTINGS")),
            SETTINGS_QPACK_MAX_TABLE_CAPACITY => {
                s.qpack_max_table_capacity = value;
                1
            }
            SETTINGS_MAX_FIELD_SECTION_SIZE => {
                s.max_field_section_size = value;
                2
            }
            SETTINGS_QPACK_BLOCKED_STREAMS => {
                s.qpack_blocked_streams = value;
                4
            }
            SETTINGS_ENABLE_CONNECT_PROTOCOL | SETTINGS_H3_DATAGRAM => {
                if value > 1 {
                    return Err(conn(Code::SettingsError, "a boolean setting neither 0 nor 1"));
                }
                if id == SETTINGS_H3_DATAGRAM {
                    s.h3_datagram = value == 1;
                    16
                } else {
                    s.enable_connect_protocol = value == 1;
                    8
                }
            }
            _ => {
                if unknown[..n_unknown].contains(&id) {
                    return Err(conn(Code::SettingsError, "a setting repeated"));
                }
                if n_unknown < unknown.len() {
                    unknown[n_unknown] = id;
                    n_unknown += 1;
                }
                0
            }
        };
        if seen & bit != 0 {
            return Err(conn(Code::SettingsError, "a setting repeated"));
        }
        seen |= bit;
    }
    Ok(s)
}

/// Parses a PRIORITY_UPDATE payload (RFC 9218 §7.2): the prioritized element's ID and the
/// priority field value (ASCII, as the `priority` field).
pub fn parse_priority_update(payload: &[u8]) -> Result<(u64, &[u8]), ConnError> {
    let mut pos = 0;
    let id = field(payload, &mut pos)?;
    Ok((id, &payload[pos..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_their_numbers() {
        assert_eq!(Code::NoError.value(), 0x100);
        assert_eq!(Code::FrameUnexpected.value(), 0x105);
        assert_eq!(Code::MessageError.value(), 0x10e);
        assert_eq!(Code::VersionFallback.value(), 0x110);
        assert_eq!(Code::QpackDecompressionFailed.value(), 0x200);
        assert_eq!(Code::QpackEncoderStreamError.value(), 0x201);
        assert_eq!(Code::QpackDecoderStreamError.value(), 0x202);
        let e = conn(Code::SettingsError, "x");
        assert_eq!(e.to_string(), "H3_SETTINGS_ERROR (0x109): x");
    }

    #[test]
    fn reserved_values() {
        assert!(is_reserved(0x21) && is_reserved(0x40) && is_reserved(0x1f * 1000 + 0x21));
        assert!(!is_reserved(0x20) && !is_reserved(0x22) && !is_reserved(0) && !is_reserved(0xf0700));
        assert!(is_http2_only(0x2) && is_http2_only(0x9) && !is_http2_only(0x7) && !is_http2_only(0xd));
    }

    #[test]
    fn headers_whole_and_in_pieces() {
        let mut bytes = Vec::new();
        write_header(PRIORITY_UPDATE_REQUEST, 70_000, &mut bytes);
        assert_eq!(bytes, [0x80, 0x0f, 0x07, 0x00, 0x80, 0x01, 0x11, 0x70]);
        assert_eq!(parse_header(&bytes), Some((Header { ty: PRIORITY_UPDATE_REQUEST, len: 70_000 }, 8)));
        for cut in 0..bytes.len() {
            assert_eq!(parse_header(&bytes[..cut]), None);
        }
        // Fed one byte at a time, and in every two-piece split, with a trailing byte.
        bytes.push(0xaa);
        for step in 1..=9 {
            let mut r = HeaderReader::default();
            let mut pos = 0;
            let mut got = None;
            while got.is_none() {
                let end = (pos + step).min(bytes.len());
                let (n, h) = r.push(&bytes[pos..end]);
                pos += n;
                got = h;
            }
            assert_eq!((pos, got), (8, Some(Header { ty: PRIORITY_UPDATE_REQUEST, len: 70_000 })), "step {step}");
            assert!(r.is_empty());
        }
        let mut r = HeaderReader::default();
        assert_eq!(r.push(&[0x00]), (1, None));
        assert!(!r.is_empty());
        assert_eq!(r.push(&[0x05, 0x01]), (1, Some(Header { ty: DATA, len: 5 })));
    }

    #[test]
    fn writers() {
        let mut out = Vec::new();
        data_frame_header(4096, &mut out);
        assert_eq!(out, [0x00, 0x50, 0x00]);
        out.clear();
        goaway(4, &mut out);
        assert_eq!(out, [0x07, 0x01, 0x04]);
        out.clear();
        write_headers(&[0, 0, 0xd1], &mut out);
        assert_eq!(out, [0x01, 0x03, 0, 0, 0xd1]);
        out.clear();
        write_settings(&[(SETTINGS_QPACK_MAX_TABLE_CAPACITY, 0), (SETTINGS_MAX_FIELD_SECTION_SIZE, 16384)], &mut out);
        assert_eq!(out, [0x04, 0x07, 0x01, 0x00, 0x06, 0x80, 0x00, 0x40, 0x00]);
        let (h, n) = parse_header(&out).unwrap();
        let s = parse_settings(&out[n..n + h.len as usize]).unwrap();
        assert_eq!((s.qpack_max_table_capacity, s.max_field_section_size), (0, 16384));
    }

    #[test]
    fn settings_rules() {
        assert_eq!(parse_settings(&[]), Ok(Settings::default()));
        let s = parse_settings(&[0x07, 0x10, 0x08, 0x01, 0x33, 0x01, 0x21, 0x05, 0x40, 0x40, 0x00]).unwrap();
        assert_eq!((s.qpack_blocked_streams, s.enable_connect_protocol, s.h3_datagram), (16, true, true));
        for id in 2..=5 {
            assert_eq!(parse_settings(&[id, 0]).map_err(|e| e.code), Err(Code::SettingsError), "{id}");
        }
        let err = |p: &[u8]| parse_settings(p).map_err(|e| e.code);
        assert_eq!(err(&[0x06, 0x01, 0x06, 0x02]), Err(Code::SettingsError));
        assert_eq!(err(&[0x21, 0x01, 0x21, 0x02]), Err(Code::SettingsError));
        assert_eq!(err(&[0x08, 0x02]), Err(Code::SettingsError));
        assert_eq!(err(&[0x06]), Err(Code::FrameError));
        assert_eq!(err(&[0x06, 0x40]), Err(Code::FrameError));
    }

    #[test]
    fn id_payloads() {
        assert_eq!(parse_id(&[0x04]), Ok(4));
        assert_eq!(parse_id(&[0x40, 0x04]), Ok(4));
        assert_eq!(parse_id(&[]).map_err(|e| e.code), Err(Code::FrameError));
        assert_eq!(parse_id(&[0x04, 0x00]).map_err(|e| e.code), Err(Code::FrameError));
        assert_eq!(parse_priority_update(b"\x04u=1, i"), Ok((4, &b"u=1, i"[..])));
        assert_eq!(parse_priority_update(b"").map_err(|e| e.code), Err(Code::FrameError));
    }
}
