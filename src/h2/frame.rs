//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, every frame type a server receives
//! parsed from a byte slice, and the frames a server sends written into a buffer.
//!
//! Parsing is pure and borrows from the input. Each check of §6 that the frame alone can
//! decide is made here and reported as an [`Error`] that says whether it ends the stream or
//! the whole connection, with the code the RFC names (§5.4, §7). What depends on the state
//! of the connection or of a stream (a frame on an idle stream, a CONTINUATION that does not
//! follow a HEADERS, flow-control arithmetic) is the session's (`h2::session`).

/// Length of the frame header (§4.1).
pub const HEADER_LEN: usize = 9;
/// The client connection preface (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_MAX_FRAME_SIZE's initial value and lower bound (§6.5.2).
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;
/// SETTINGS_MAX_FRAME_SIZE's upper bound (§6.5.2).
pub const MAX_MAX_FRAME_SIZE: u32 = 16_777_215;
/// The largest flow-control window (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The initial flow-control window of a connection and of a stream (§6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// RFC 9218 §7.1.
pub const PRIORITY_UPDATE: u8 = 0x10;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// SETTINGS parameters (§6.5.2).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Error codes (§7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    Connect = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}

/// A protocol violation and what it ends (§5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The whole connection: GOAWAY with this code, then close (§5.4.1).
    Connection(Code),
    /// One stream: RST_STREAM on it with this code; the connection goes on (§5.4.2).
    Stream(u32, Code),
}

/// The frame header (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, its reserved bit cleared.
    pub stream: u32,
}

impl Header {
    /// Reads a header from the first [`HEADER_LEN`] bytes; None when fewer are there.
    pub fn parse(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
        })
    }
}

/// A stream dependency (§5.3.2; parsed so that it can be checked, otherwise ignored, as
/// RFC 9113 deprecates the scheme).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    pub dependency: u32,
    pub exclusive: bool,
    pub weight: u8,
}

/// One SETTINGS parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub id: u16,
    pub value: u32,
}

/// A frame a server can receive, borrowing its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `flow_len` is the whole payload length, padding included: what flow control counts.
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
        flow_len: u32,
    },
    Headers {
        stream: u32,
        block: &'a [u8],
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: u32,
    },
    Settings {
        ack: bool,
        params: SettingsIter<'a>,
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: u32,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        block: &'a [u8],
        end_headers: bool,
    },
    /// RFC 9218 §7.1 (on stream 0): the priority field value for a request stream.
    PriorityUpdate {
        stream: u32,
        value: &'a [u8],
    },
    /// A frame type this implementation does not know: ignored (§4.1, §5.5).
    Unknown {
        kind: u8,
    },
}

/// The parameters of a SETTINGS frame, 6 bytes each (the length was checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsIter<'a>(&'a [u8]);

impl Iterator for SettingsIter<'_> {
    type Item = Setting;

    fn next(&mut self) -> Option<Setting> {
        let (p, rest) = self.0.split_first_chunk::<6>()?;
        self.0 = rest;
        Some(Setting { id: u16::from_be_bytes([p[0], p[1]]), value: u32::from_be_bytes([p[2], p[3], p[4], p[5]]) })
    }
}

impl Setting {
    /// Checks a value against the bounds of §6.5.2 (unknown parameters are ignored).
    pub fn check(&self) -> Result<(), Error> {
        match self.id {
            SETTINGS_ENABLE_PUSH if self.value > 1 => Err(Error::Connection(Code::Protocol)),
            SETTINGS_INITIAL_WINDOW_SIZE if self.value > MAX_WINDOW => Err(Error::Connection(Code::FlowControl)),
            SETTINGS_MAX_FRAME_SIZE if !(MIN_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&self.value) => {
                Err(Error::Connection(Code::Protocol))
            }
            _ => Ok(()),
        }
    }
}

/// Removes the padding of a PADDED frame (§6.1, §6.2): a pad length that is not less than
/// what follows it is a connection error.
fn unpad(flags: u8, p: &[u8]) -> Result<&[u8], Error> {
    if flags & PADDED == 0 {
        return Ok(p);
    }
    let (&pad, rest) = p.split_first().ok_or(Error::Connection(Code::FrameSize))?;
    rest.len().checked_sub(usize::from(pad)).map(|n| &rest[..n]).ok_or(Error::Connection(Code::Protocol))
}

fn priority(p: &[u8; 5]) -> Priority {
    let word = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    Priority { dependency: word & MAX_WINDOW, exclusive: word >> 31 == 1, weight: p[4] }
}

fn word(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[0], p[1], p[2], p[3]])
}

impl<'a> Frame<'a> {
    /// Parses the frame `h` heads from its payload (`payload.len() == h.len`), which the
    /// caller has checked against its SETTINGS_MAX_FRAME_SIZE (§4.2).
    pub fn parse(h: Header, payload: &'a [u8]) -> Result<Frame<'a>, Error> {
        debug_assert_eq!(payload.len(), h.len as usize);
        let s = h.stream;
        let conn = |c| Err(Error::Connection(c));
        let on_stream = matches!(h.kind, DATA | HEADERS | PRIORITY | RST_STREAM | CONTINUATION | PUSH_PROMISE);
        if on_stream && s == 0 {
            return conn(Code::Protocol);
        }
        if matches!(h.kind, SETTINGS | PING | GOAWAY) && s != 0 {
            return conn(Code::Protocol);
        }
        Ok(match h.kind {
            DATA => Frame::Data {
                stream: s,
                data: unpad(h.flags, payload)?,
                end_stream: h.flags & END_STREAM != 0,
                flow_len: h.len,
            },
            HEADERS => {
                let mut block = unpad(h.flags, payload)?;
                let mut pr = None;
                if h.flags & PRIORITY_FLAG != 0 {
                    let Some((p, rest)) = block.split_first_chunk::<5>() else { return conn(Code::FrameSize) };
                    // One that depends on its own stream is the session's stream error, once
                    // the block is decoded (HPACK must stay in step, §4.3).
                    pr = Some(priority(p));
                    block = rest;
                }
                Frame::Headers {
                    stream: s,
                    block,
                    end_stream: h.flags & END_STREAM != 0,
                    end_headers: h.flags & END_HEADERS != 0,
                    priority: pr,
                }
            }
            PRIORITY => {
                let Ok(p) = <&[u8; 5]>::try_from(payload) else { return Err(Error::Stream(s, Code::FrameSize)) };
                let priority = priority(p);
                // A stream cannot depend on itself (§5.3.1).
                if priority.dependency == s {
                    return Err(Error::Stream(s, Code::Protocol));
                }
                Frame::Priority { stream: s, priority }
            }
            RST_STREAM => {
                if payload.len() != 4 {
                    return conn(Code::FrameSize);
                }
                Frame::RstStream { stream: s, code: word(payload) }
            }
            SETTINGS => {
                let ack = h.flags & ACK != 0;
                if (ack && !payload.is_empty()) || !payload.len().is_multiple_of(6) {
                    return conn(Code::FrameSize);
                }
                Frame::Settings { ack, params: SettingsIter(payload) }
            }
            // A client never sends PUSH_PROMISE (§8.4).
            PUSH_PROMISE => return conn(Code::Protocol),
            PING => {
                let Ok(data) = <[u8; 8]>::try_from(payload) else { return conn(Code::FrameSize) };
                Frame::Ping { ack: h.flags & ACK != 0, data }
            }
            GOAWAY => {
                if payload.len() < 8 {
                    return conn(Code::FrameSize);
                }
                Frame::GoAway { last_stream: word(payload) & MAX_WINDOW, code: word(&payload[4..]) }
            }
            WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return conn(Code::FrameSize);
                }
                let increment = word(payload) & MAX_WINDOW;
                if increment == 0 {
                    return Err(if s == 0 {
                        Error::Connection(Code::Protocol)
                    } else {
                        Error::Stream(s, Code::Protocol)
                    });
                }
                Frame::WindowUpdate { stream: s, increment }
            }
            CONTINUATION => Frame::Continuation { stream: s, block: payload, end_headers: h.flags & END_HEADERS != 0 },
            PRIORITY_UPDATE => {
                // RFC 9218 §7.1: on the control stream only; for a request stream (never 0,
                // nor a push stream, which a server that never pushes has not promised).
                if s != 0 {
                    return conn(Code::Protocol);
                }
                if payload.len() < 4 {
                    return conn(Code::FrameSize);
                }
                let stream = word(payload) & MAX_WINDOW;
                if stream == 0 || stream.is_multiple_of(2) {
                    return conn(Code::Protocol);
                }
                Frame::PriorityUpdate { stream, value: &payload[4..] }
            }
            kind => Frame::Unknown { kind },
        })
    }
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
}

/// Appends a SETTINGS frame with these parameters.
pub fn write_settings(out: &mut Vec<u8>, params: &[Setting]) {
    write_header(out, params.len() * 6, SETTINGS, 0, 0);
    for p in params {
        out.extend_from_slice(&p.id.to_be_bytes());
        out.extend_from_slice(&p.value.to_be_bytes());
    }
}

pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, SETTINGS, ACK, 0);
}

pub fn write_ping(out: &mut Vec<u8>, data: &[u8; 8]) {
    write_header(out, 8, PING, 0, 0);
    out.extend_from_slice(data);
}

pub fn write_ping_ack(out: &mut Vec<u8>, data: &[u8; 8]) {
    write_header(out, 8, PING, ACK, 0);
    out.extend_from_slice(data);
}

pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: Code) {
    write_header(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: Code) {
    write_header(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(increment > 0 && increment <= MAX_WINDOW);
    write_header(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a field block as HEADERS and as many CONTINUATION frames as `max_frame` needs.
pub fn write_headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last = first.len() == block.len();
    let flags = if end_stream { END_STREAM } else { 0 } | if last { END_HEADERS } else { 0 };
    write_header(out, first.len(), HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut sent = first.len();
    for c in chunks {
        sent += c.len();
        write_header(out, c.len(), CONTINUATION, if sent == block.len() { END_HEADERS } else { 0 }, stream);
        out.extend_from_slice(c);
    }
}

/// The header of a DATA frame of `len` bytes (the payload follows it).
pub fn data_header(stream: u32, len: usize, end_stream: bool) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    let l = (len as u32).to_be_bytes();
    let s = (stream & MAX_WINDOW).to_be_bytes();
    [l[1], l[2], l[3], DATA, if end_stream { END_STREAM } else { 0 }, s[0], s[1], s[2], s[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Frame<'_>, Error> {
        let mut b = Vec::new();
        write_header(&mut b, payload.len(), kind, flags, stream);
        let h = Header::parse(&b).unwrap();
        assert_eq!((h.len as usize, h.kind, h.flags, h.stream), (payload.len(), kind, flags, stream));
        Frame::parse(h, payload)
    }

    const C: fn(Code) -> Result<Frame<'static>, Error> = |c| Err(Error::Connection(c));

    #[test]
    fn header_round_trip_and_reserved_bit() {
        let mut b = Vec::new();
        write_header(&mut b, 0x12_3456, 0xfe, 0xa5, 7);
        assert_eq!(b, [0x12, 0x34, 0x56, 0xfe, 0xa5, 0, 0, 0, 7]);
        b[5] |= 0x80;
        assert_eq!(Header::parse(&b).unwrap().stream, 7);
        assert_eq!(Header::parse(&b[..8]), None);
    }

    #[test]
    fn data_frames() {
        assert_eq!(
            frame(DATA, END_STREAM, 1, b"abc"),
            Ok(Frame::Data { stream: 1, data: b"abc", end_stream: true, flow_len: 3 })
        );
        assert_eq!(
            frame(DATA, PADDED, 3, b"\x02abcXX"),
            Ok(Frame::Data { stream: 3, data: b"abc", end_stream: false, flow_len: 6 })
        );
        assert_eq!(frame(DATA, 0, 0, b"x"), C(Code::Protocol));
        assert_eq!(frame(DATA, PADDED, 1, b"\x03ab"), C(Code::Protocol));
        assert_eq!(frame(DATA, PADDED, 1, b""), C(Code::FrameSize));
        // Padding may take everything after the pad length.
        assert!(matches!(frame(DATA, PADDED, 1, b"\x02ab"), Ok(Frame::Data { data: b"", .. })));
    }

    #[test]
    fn headers_frames() {
        assert_eq!(
            frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x82"),
            Ok(Frame::Headers { stream: 1, block: b"\x82", end_stream: true, end_headers: true, priority: None })
        );
        let with_prio = frame(HEADERS, PRIORITY_FLAG | PADDED, 5, b"\x01\x80\0\0\x03\x10\x82Z");
        assert_eq!(
            with_prio,
            Ok(Frame::Headers {
                stream: 5,
                block: b"\x82",
                end_stream: false,
                end_headers: false,
                priority: Some(Priority { dependency: 3, exclusive: true, weight: 16 }),
            })
        );
        assert_eq!(frame(HEADERS, END_HEADERS, 0, b"\x82"), C(Code::Protocol));
        // A self-dependency is left to the session, which decodes the block first.
        assert!(matches!(
            frame(HEADERS, PRIORITY_FLAG, 5, b"\0\0\0\x05\x10"),
            Ok(Frame::Headers { priority: Some(Priority { dependency: 5, .. }), .. })
        ));
        assert_eq!(frame(HEADERS, PRIORITY_FLAG, 5, b"\0\0\0"), C(Code::FrameSize));
        assert_eq!(frame(HEADERS, PADDED, 5, b"\x05\x82"), C(Code::Protocol));
    }

    #[test]
    fn priority_frames() {
        assert_eq!(
            frame(PRIORITY, 0, 3, b"\0\0\0\x01\xff"),
            Ok(Frame::Priority { stream: 3, priority: Priority { dependency: 1, exclusive: false, weight: 255 } })
        );
        assert_eq!(frame(PRIORITY, 0, 3, b"\0\0\0\x01"), Err(Error::Stream(3, Code::FrameSize)));
        assert_eq!(frame(PRIORITY, 0, 3, b"\0\0\0\x03\x01"), Err(Error::Stream(3, Code::Protocol)));
        assert_eq!(frame(PRIORITY, 0, 0, b"\0\0\0\x01\x01"), C(Code::Protocol));
    }

    #[test]
    fn rst_stream_frames() {
        assert_eq!(frame(RST_STREAM, 0, 1, b"\0\0\0\x08"), Ok(Frame::RstStream { stream: 1, code: 8 }));
        assert_eq!(frame(RST_STREAM, 0, 1, b"\0\0\0"), C(Code::FrameSize));
        assert_eq!(frame(RST_STREAM, 0, 0, b"\0\0\0\x08"), C(Code::Protocol));
    }

    #[test]
    fn settings_frames() {
        let Ok(Frame::Settings { ack: false, params }) = frame(SETTINGS, 0, 0, b"\0\x04\0\0\x01\0\0\x09\0\0\0\0")
        else {
            panic!("not a SETTINGS frame")
        };
        let all: Vec<_> = params.collect();
        assert_eq!(all, [Setting { id: 4, value: 256 }, Setting { id: 9, value: 0 }]);
        assert!(matches!(frame(SETTINGS, ACK, 0, b""), Ok(Frame::Settings { ack: true, .. })));
        assert_eq!(frame(SETTINGS, ACK, 0, b"\0\x04\0\0\x01\0"), C(Code::FrameSize));
        assert_eq!(frame(SETTINGS, 0, 0, b"\0\x04\0\0\x01"), C(Code::FrameSize));
        assert_eq!(frame(SETTINGS, 0, 1, b""), C(Code::Protocol));
        let bad = |id, value| Setting { id, value }.check();
        assert_eq!(bad(SETTINGS_ENABLE_PUSH, 2), Err(Error::Connection(Code::Protocol)));
        assert_eq!(bad(SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW + 1), Err(Error::Connection(Code::FlowControl)));
        assert_eq!(bad(SETTINGS_MAX_FRAME_SIZE, MIN_MAX_FRAME_SIZE - 1), Err(Error::Connection(Code::Protocol)));
        assert_eq!(bad(SETTINGS_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE + 1), Err(Error::Connection(Code::Protocol)));
        assert_eq!(bad(SETTINGS_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE), Ok(()));
        assert_eq!(bad(SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW), Ok(()));
        assert_eq!(bad(0x99, u32::MAX), Ok(()));
        let mut out = Vec::new();
        write_settings(&mut out, &[Setting { id: 3, value: 100 }]);
        assert_eq!(out, b"\0\0\x06\x04\0\0\0\0\0\0\x03\0\0\0\x64");
    }

    #[test]
    fn push_promise_from_a_client() {
        assert_eq!(frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\x02\x82"), C(Code::Protocol));
    }

    #[test]
    fn ping_frames() {
        assert_eq!(frame(PING, 0, 0, b"12345678"), Ok(Frame::Ping { ack: false, data: *b"12345678" }));
        assert_eq!(frame(PING, 0, 0, b"1234567"), C(Code::FrameSize));
        assert_eq!(frame(PING, 0, 1, b"12345678"), C(Code::Protocol));
        let mut out = Vec::new();
        write_ping_ack(&mut out, b"12345678");
        assert_eq!(out, b"\0\0\x08\x06\x01\0\0\0\x0012345678");
    }

    #[test]
    fn goaway_frames() {
        assert_eq!(frame(GOAWAY, 0, 0, b"\x80\0\0\x05\0\0\0\x02debug"), Ok(Frame::GoAway { last_stream: 5, code: 2 }));
        assert_eq!(frame(GOAWAY, 0, 0, b"\0\0\0\x05\0\0\0"), C(Code::FrameSize));
        assert_eq!(frame(GOAWAY, 0, 3, b"\0\0\0\x05\0\0\0\0"), C(Code::Protocol));
        let mut out = Vec::new();
        write_goaway(&mut out, 7, Code::EnhanceYourCalm);
        assert_eq!(out, b"\0\0\x08\x07\0\0\0\0\0\0\0\0\x07\0\0\0\x0b");
    }

    #[test]
    fn window_update_frames() {
        assert_eq!(frame(WINDOW_UPDATE, 0, 0, b"\x80\0\x01\0"), Ok(Frame::WindowUpdate { stream: 0, increment: 256 }));
        assert_eq!(frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"), C(Code::Protocol));
        assert_eq!(frame(WINDOW_UPDATE, 0, 3, b"\0\0\0\0"), Err(Error::Stream(3, Code::Protocol)));
        assert_eq!(frame(WINDOW_UPDATE, 0, 3, b"\0\0\0\x01\0"), C(Code::FrameSize));
    }

    #[test]
    fn continuation_and_unknown_frames() {
        assert_eq!(
            frame(CONTINUATION, END_HEADERS, 1, b"ab"),
            Ok(Frame::Continuation { stream: 1, block: b"ab", end_headers: true })
        );
        assert_eq!(frame(CONTINUATION, 0, 0, b"ab"), C(Code::Protocol));
        assert_eq!(frame(0x42, 0xff, 0, b"whatever"), Ok(Frame::Unknown { kind: 0x42 }));
        assert_eq!(
            frame(PRIORITY_UPDATE, 0, 0, b"\x80\0\0\x05u=1, i"),
            Ok(Frame::PriorityUpdate { stream: 5, value: b"u=1, i" })
        );
        assert_eq!(frame(PRIORITY_UPDATE, 0, 0, b"\0\0\0\x05"), Ok(Frame::PriorityUpdate { stream: 5, value: b"" }));
        assert_eq!(frame(PRIORITY_UPDATE, 0, 1, b"\0\0\0\x01u=1"), C(Code::Protocol));
        assert_eq!(frame(PRIORITY_UPDATE, 0, 0, b"\0\0\0\0u=1"), C(Code::Protocol));
        assert_eq!(frame(PRIORITY_UPDATE, 0, 0, b"\0\0\0\x02u=1"), C(Code::Protocol));
        assert_eq!(frame(PRIORITY_UPDATE, 0, 0, b"\0\0\x01"), C(Code::FrameSize));
    }

    #[test]
    fn headers_are_split_into_continuations() {
        let block: Vec<u8> = (0..=40).collect();
        let mut out = Vec::new();
        write_headers(&mut out, 3, &block, true, 16);
        let mut at = 0;
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        while at < out.len() {
            let h = Header::parse(&out[at..]).unwrap();
            kinds.push((h.kind, h.flags, h.len));
            got.extend_from_slice(&out[at + HEADER_LEN..at + HEADER_LEN + h.len as usize]);
            at += HEADER_LEN + h.len as usize;
        }
        assert_eq!(got, block);
        assert_eq!(kinds, [(HEADERS, END_STREAM, 16), (CONTINUATION, 0, 16), (CONTINUATION, END_HEADERS, 9)]);
        out.clear();
        write_headers(&mut out, 3, b"\x88", false, 16);
        assert_eq!(out, b"\0\0\x01\x01\x04\0\0\0\x03\x88");
    }
}
