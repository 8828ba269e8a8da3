//! The invariants of the HTTP/2 fuzz targets `h2_frame` (`h2::frame`) and `h2_session`
//! (`h2::session`), shared with `tests/fuzz.rs` like `checks.rs`; a file of its own because
//! the modules exist only with the `http2` feature.

use std::collections::{HashMap, HashSet};

use arbitrary::Unstructured;
use ferrohttpd::h2::frame::{self, Code, Error, Frame, Header, Setting, HEADER_LEN, MAX_WINDOW, PREFACE};
use ferrohttpd::h2::hpack::Decoder;
use ferrohttpd::h2::session::{Event, Field, Limits, Session};
use ferrohttpd::http::request::Limits as HeadLimits;

// ---------------------------------------------------------------------------------------------
// Frames (`h2::frame`)
// ---------------------------------------------------------------------------------------------

/// The error codes of RFC 9113 §7, by value, for re-encoding what was parsed.
fn code_of(v: u32) -> Option<Code> {
    use Code::*;
    const ALL: [Code; 14] = [
        NoError,
        Protocol,
        Internal,
        FlowControl,
        SettingsTimeout,
        StreamClosed,
        FrameSize,
        RefusedStream,
        Cancel,
        Compression,
        Connect,
        EnhanceYourCalm,
        InadequateSecurity,
        Http11Required,
    ];
    ALL.iter().copied().find(|&c| c as u32 == v)
}

/// True when `inner` lies within `outer` (same allocation, in bounds).
fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

/// Parses one frame the writers produced: its header and the frame, which must be the
/// whole of `bytes`.
fn reparse(bytes: &[u8]) -> Result<(Header, Frame<'_>), String> {
    let h = Header::parse(bytes).ok_or("written frame shorter than a header")?;
    if HEADER_LEN + h.len as usize != bytes.len() {
        return Err(format!("written frame says {} bytes, has {}", h.len, bytes.len() - HEADER_LEN));
    }
    let f = Frame::parse(h, &bytes[HEADER_LEN..]).map_err(|e| format!("written frame does not parse: {e:?}"))?;
    Ok((h, f))
}

/// The `h2_frame` target. Byte 0: the largest frame `write_headers` may write when a HEADERS
/// frame is re-encoded (0: 16,384; else that many bytes); the rest: frames, one after another,
/// as a connection receives them (a frame larger than SETTINGS_MAX_FRAME_SIZE, 16,384, ends
/// the input, as it ends a connection).
///
/// Checks: no panic; the header's fields are the bytes' (reserved bit cleared) and write back
/// to the same bytes; a parsed frame is the kind its header says, borrows only from its own
/// payload, and has the lengths of §6 (padding, priority, 6-byte settings, 8-byte PING,
/// 4-byte WINDOW_UPDATE and RST_STREAM, increments 1..2^31−1); a stream error names the
/// frame's (non-zero) stream and comes only from PRIORITY or WINDOW_UPDATE (a HEADERS is
/// never one: its block must be decoded first, which is the session's); and every frame a writer exists for, written again, parses back
/// to the same frame (HEADERS as HEADERS and CONTINUATIONs of at most the chosen size, whose
/// blocks add up to the original).
pub fn check_h2_frame(data: &[u8]) -> Result<(), String> {
    let Some((&b0, mut rest)) = data.split_first() else { return Ok(()) };
    let max_frame = if b0 == 0 { frame::MIN_MAX_FRAME_SIZE as usize } else { usize::from(b0) };
    loop {
        let Some(h) = Header::parse(rest) else {
            if rest.len() >= HEADER_LEN {
                return Err(format!("no header from {} bytes", rest.len()));
            }
            return Ok(());
        };
        let raw = &rest[..HEADER_LEN];
        if h.len != u32::from_be_bytes([0, raw[0], raw[1], raw[2]])
            || h.kind != raw[3]
            || h.flags != raw[4]
            || h.stream != u32::from_be_bytes([raw[5] & 0x7f, raw[6], raw[7], raw[8]])
        {
            return Err(format!("header {h:?} is not its bytes {raw:?}"));
        }
        let mut again = Vec::new();
        frame::write_header(&mut again, h.len as usize, h.kind, h.flags, h.stream);
        if again[..5] != raw[..5] || again[5..] != [raw[5] & 0x7f, raw[6], raw[7], raw[8]] {
            return Err(format!("header {h:?} writes as {again:?}, read from {raw:?}"));
        }
        if h.len > frame::MIN_MAX_FRAME_SIZE {
            return Ok(());
        }
        let total = HEADER_LEN + h.len as usize;
        let Some(payload) = rest.get(HEADER_LEN..total) else { return Ok(()) };
        check_frame(h, payload, max_frame)?;
        rest = &rest[total..];
    }
}

fn check_frame(h: Header, payload: &[u8], max_frame: usize) -> Result<(), String> {
    let ctx = |what: &str| format!("{what}: {h:?}, payload {}", crate::checks::show(payload));
    let f = match Frame::parse(h, payload) {
        Err(Error::Stream(id, _)) => {
            if id != h.stream || id == 0 {
                return Err(ctx(&format!("stream error on stream {id}")));
            }
            if !matches!(h.kind, frame::PRIORITY | frame::WINDOW_UPDATE) {
                return Err(ctx("a stream error from a frame that can only fail the connection"));
            }
            return Ok(());
        }
        Err(Error::Connection(_)) => return Ok(()),
        Ok(f) => f,
    };
    let padded = h.flags & frame::PADDED != 0;
    let pad = |body_len: usize| -> Result<(), String> {
        // Padded: pad length byte + body + pad bytes is the payload.
        let want = if padded { payload.len() - 1 - usize::from(payload[0]) } else { payload.len() };
        if body_len != want {
            return Err(ctx(&format!("body of {body_len} bytes, padding leaves {want}")));
        }
        Ok(())
    };
    let on_stream = |s: u32| if s != h.stream || s == 0 { Err(ctx("wrong stream")) } else { Ok(()) };
    match f {
        Frame::Data { stream, data, end_stream, flow_len } => {
            on_stream(stream)?;
            if h.kind != frame::DATA || flow_len != h.len || !within(data, payload) {
                return Err(ctx("DATA"));
            }
            pad(data.len())?;
            if end_stream != (h.flags & frame::END_STREAM != 0) {
                return Err(ctx("DATA END_STREAM"));
            }
            let mut out = frame::data_header(stream, data.len(), end_stream).to_vec();
            out.extend_from_slice(data);
            let (_, back) = reparse(&out)?;
            let flow_len = data.len() as u32;
            if back != (Frame::Data { stream, data, end_stream, flow_len }) {
                return Err(ctx(&format!("DATA written back parses as {back:?}")));
            }
        }
        Frame::Headers { stream, block, end_stream, end_headers, priority } => {
            on_stream(stream)?;
            if h.kind != frame::HEADERS || !within(block, payload) {
                return Err(ctx("HEADERS"));
            }
            let prio = h.flags & frame::PRIORITY_FLAG != 0;
            if prio != priority.is_some() || priority.is_some_and(|p| p.dependency > MAX_WINDOW) {
                return Err(ctx("HEADERS priority"));
            }
            pad(block.len() + if prio { 5 } else { 0 })?;
            if end_stream != (h.flags & frame::END_STREAM != 0) || end_headers != (h.flags & frame::END_HEADERS != 0) {
                return Err(ctx("HEADERS flags"));
            }
            let mut out = Vec::new();
            frame::write_headers(&mut out, stream, block, end_stream, max_frame);
            let mut at = 0;
            let mut joined = Vec::new();
            let mut n = 0;
            while at < out.len() {
                let hh = Header::parse(&out[at..]).ok_or("write_headers: a cut header")?;
                let end = at + HEADER_LEN + hh.len as usize;
                let (_, back) = reparse(out.get(at..end).ok_or("write_headers: a cut frame")?)?;
                if hh.len as usize > max_frame.max(1) {
                    return Err(ctx(&format!("write_headers wrote {} bytes, max {max_frame}", hh.len)));
                }
                let last = end == out.len();
                match back {
                    Frame::Headers { stream: s, block: b, end_stream: es, end_headers: eh, priority: None }
                        if n == 0 && s == stream && es == end_stream && eh == last =>
                    {
                        joined.extend_from_slice(b)
                    }
                    Frame::Continuation { stream: s, block: b, end_headers: eh }
                        if n > 0 && s == stream && eh == last =>
                    {
                        joined.extend_from_slice(b)
                    }
                    other => return Err(ctx(&format!("write_headers frame {n} parses as {other:?}"))),
                }
                n += 1;
                at = end;
            }
            if joined != block {
                return Err(ctx("write_headers: the frames' blocks are not the block"));
            }
        }
        Frame::Priority { stream, priority } => {
            on_stream(stream)?;
            if h.kind != frame::PRIORITY || payload.len() != 5 || priority.dependency == stream {
                return Err(ctx("PRIORITY"));
            }
        }
        Frame::RstStream { stream, code } => {
            on_stream(stream)?;
            if h.kind != frame::RST_STREAM || payload.len() != 4 || code.to_be_bytes() != payload {
                return Err(ctx("RST_STREAM"));
            }
            if let Some(c) = code_of(code) {
                let mut out = Vec::new();
                frame::write_rst_stream(&mut out, stream, c);
                let (_, back) = reparse(&out)?;
                if back != f {
                    return Err(ctx(&format!("RST_STREAM written back parses as {back:?}")));
                }
            }
        }
        Frame::Settings { ack, params } => {
            if h.kind != frame::SETTINGS
                || h.stream != 0
                || ack != (h.flags & frame::ACK != 0)
                || !payload.len().is_multiple_of(6)
            {
                return Err(ctx("SETTINGS"));
            }
            let list: Vec<Setting> = params.collect();
            if list.len() != payload.len() / 6 || (ack && !list.is_empty()) {
                return Err(ctx("SETTINGS parameters"));
            }
            for (p, raw) in list.iter().zip(payload.chunks(6)) {
                if p.id.to_be_bytes() != raw[..2] || p.value.to_be_bytes() != raw[2..] {
                    return Err(ctx(&format!("setting {p:?}")));
                }
                let in_bounds = match p.id {
                    frame::SETTINGS_ENABLE_PUSH => p.value <= 1,
                    frame::SETTINGS_INITIAL_WINDOW_SIZE => p.value <= MAX_WINDOW,
                    frame::SETTINGS_MAX_FRAME_SIZE => {
                        (frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&p.value)
                    }
                    _ => true,
                };
                if in_bounds != p.check().is_ok() {
                    return Err(ctx(&format!("setting {p:?} checks as {:?}", p.check())));
                }
            }
            let mut out = Vec::new();
            if ack {
                frame::write_settings_ack(&mut out);
            } else {
                frame::write_settings(&mut out, &list);
            }
            match reparse(&out)?.1 {
                Frame::Settings { ack: a, params: p } if a == ack && p.collect::<Vec<_>>() == list => {}
                back => return Err(ctx(&format!("SETTINGS written back parses as {back:?}"))),
            }
        }
        Frame::Ping { ack, data } => {
            if h.kind != frame::PING || h.stream != 0 || data != payload || ack != (h.flags & frame::ACK != 0) {
                return Err(ctx("PING"));
            }
            let mut out = Vec::new();
            frame::write_ping_ack(&mut out, &data);
            let (_, back) = reparse(&out)?;
            if back != (Frame::Ping { ack: true, data }) {
                return Err(ctx(&format!("PING ACK written back parses as {back:?}")));
            }
        }
        Frame::GoAway { last_stream, code } => {
            if h.kind != frame::GOAWAY || h.stream != 0 || payload.len() < 8 || last_stream > MAX_WINDOW {
                return Err(ctx("GOAWAY"));
            }
            if let Some(c) = code_of(code) {
                let mut out = Vec::new();
                frame::write_goaway(&mut out, last_stream, c);
                let (_, back) = reparse(&out)?;
                if back != f {
                    return Err(ctx(&format!("GOAWAY written back parses as {back:?}")));
                }
            }
        }
        Frame::WindowUpdate { stream, increment } => {
            if h.kind != frame::WINDOW_UPDATE || stream != h.stream || payload.len() != 4 || increment == 0 {
                return Err(ctx("WINDOW_UPDATE"));
            }
            if increment > MAX_WINDOW
                || increment != u32::from_be_bytes([payload[0] & 0x7f, payload[1], payload[2], payload[3]])
            {
                return Err(ctx("WINDOW_UPDATE increment"));
            }
            let mut out = Vec::new();
            frame::write_window_update(&mut out, stream, increment);
            let (_, back) = reparse(&out)?;
            if back != f {
                return Err(ctx(&format!("WINDOW_UPDATE written back parses as {back:?}")));
            }
        }
        Frame::Continuation { stream, block, end_headers } => {
            on_stream(stream)?;
            if h.kind != frame::CONTINUATION || block != payload || end_headers != (h.flags & frame::END_HEADERS != 0) {
                return Err(ctx("CONTINUATION"));
            }
        }
        Frame::PriorityUpdate { stream, value } => {
            if h.kind != frame::PRIORITY_UPDATE
                || h.stream != 0
                || stream == 0
                || stream % 2 == 0
                || u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW != stream
                || value != &payload[4..]
            {
                return Err(ctx("PRIORITY_UPDATE"));
            }
        }
        Frame::Unknown { kind } => {
            if kind != h.kind || kind <= frame::CONTINUATION || kind == frame::PRIORITY_UPDATE {
                return Err(ctx("a known frame type parsed as unknown"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The connection state machine (`h2::session`)
// ---------------------------------------------------------------------------------------------

/// What the connection driver (`conn/h2.rs`) uses, mirrored: output beyond which it reads no
/// input and cuts no DATA, its read buffer, and the most DATA it cuts at once.
const OUT_HIGH: usize = 64 * 1024;
const RBUF: usize = 2 * (HEADER_LEN + frame::MIN_MAX_FRAME_SIZE as usize);
const CHUNK: usize = 16 * 1024;
/// Bytes the session may queue for one byte of input, at most (plus one GOAWAY): control
/// frames answer control frames, and a 9-byte frame can draw two 13-byte ones (a
/// connection WINDOW_UPDATE and a RST_STREAM).
const AMPLIFICATION: usize = 3;
/// Steps of the final drain (each delivers, answers, produces and reads) before a stream
/// still open counts as stuck.
const DRAIN_STEPS: usize = 1000;

fn max_window() -> i64 {
    i64::from(MAX_WINDOW)
}

/// HPACK integer with an `n`-bit prefix (RFC 7541 §5.1) after the bits in `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A literal field (RFC 7541 §6.2): without indexing, or with (`index`), new name.
fn hpack_literal(out: &mut Vec<u8>, index: bool, name: &[u8], value: &[u8]) {
    out.push(if index { 0x40 } else { 0 });
    hpack_int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    hpack_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

const NAMES: &[&[u8]] = &[
    b":method",
    b":path",
    b":scheme",
    b":authority",
    b":status",
    b":protocol",
    b"content-length",
    b"te",
    b"connection",
    b"host",
    b"range",
    b"if-none-match",
    b"accept-encoding",
    b"cookie",
    b"X-Upper",
    b"x-custom",
    b"",
];
const VALUES: &[&[u8]] = &[
    b"GET",
    b"HEAD",
    b"OPTIONS",
    b"POST",
    b"CONNECT",
    b"/",
    b"/file.txt",
    b"*",
    b"http",
    b"https",
    b"localhost",
    b"0",
    b"1",
    b"5",
    b"100",
    b"99999999999999999999",
    b"trailers",
    b"gzip",
    b"bytes=0-10",
    b"a\r\nb",
    b"",
];

/// A header block: mostly a plausible request (indexed pseudo-header fields, literals from
/// the lists above, with or without indexing, references to the dynamic table, a size
/// update), with raw bytes now and then.
fn header_block(u: &mut Unstructured) -> arbitrary::Result<Vec<u8>> {
    let mut b = Vec::new();
    if u.ratio(1, 16)? {
        hpack_int(&mut b, 0x20, 5, *u.choose(&[0usize, 64, 4096, 4097, 1 << 20])?);
    }
    if u.ratio(7, 8)? {
        // :method GET or POST, :scheme http or https, :path /, :authority (literal, name
        // indexed).
        b.push(*u.choose(&[0x82u8, 0x82, 0x83])?);
        b.push(*u.choose(&[0x86u8, 0x87])?);
        b.push(*u.choose(&[0x84u8, 0x84, 0x85])?);
        b.extend_from_slice(b"\x01\x09localhost");
    }
    for _ in 0..u.int_in_range(0..=4)? {
        match u.int_in_range(0..=9)? {
            0..=5 => {
                let (n, v) = (*u.choose(NAMES)?, *u.choose(VALUES)?);
                hpack_literal(&mut b, u.ratio(1, 3)?, n, v);
            }
            6 => {
                // Indexed: static or dynamic (62 onwards), or out of range.
                let i = *u.choose(&[1usize, 2, 31, 61, 62, 63, 64, 70, 1000])?;
                hpack_int(&mut b, 0x80, 7, i);
            }
            7 => {
                let len = u.int_in_range(0..=3000)?;
                hpack_literal(&mut b, u.ratio(1, 2)?, b"x-big", &vec![b'v'; len]);
            }
            _ => {
                let n = u.int_in_range(0..=24)?;
                b.extend_from_slice(u.bytes(n.min(u.len()))?);
            }
        }
    }
    Ok(b)
}

/// The session's client, as the fuzzer plays it: what it sent and what it saw back.
struct Client {
    /// Bytes written to the connection, not yet delivered.
    wire: Vec<u8>,
    /// Every byte delivered to the session, in order (what the flow-control bounds are
    /// computed from).
    sent: Vec<u8>,
    /// Output read from the session, not yet a whole frame.
    inbox: Vec<u8>,
    /// The highest stream identifier the session may have acted on: used in a HEADERS frame,
    /// or reset by the session (a PRIORITY on an idle stream that depends on itself closes
    /// that stream, RFC 9113 §5.1, and a GOAWAY may then name it as its last stream).
    top_stream: u32,
    decoder: Decoder,
    /// DATA bytes received, per stream and on the connection.
    data_in: HashMap<u32, u64>,
    conn_data_in: u64,
    /// Streams the server has ended (END_STREAM or RST_STREAM).
    ended: HashSet<u32>,
    /// The server sent a GOAWAY with an error code: its last stream.
    failed: Option<u32>,
    frames_in: usize,
    /// The session's HPACK table limit (SETTINGS_HEADER_TABLE_SIZE).
    table: usize,
    /// The first GOAWAY of a graceful end came (NO_ERROR, 2^31−1), and the PING sent with it,
    /// which a well-behaved client acknowledges.
    announced: bool,
    drain_ping: Option<[u8; 8]>,
}

/// Upper bounds on what the server may send, from the client's frames (each counted even if
/// the session refused it, so the bounds only loosen).
struct Grants {
    conn: u64,
    stream: HashMap<u32, u64>,
    /// The largest SETTINGS_INITIAL_WINDOW_SIZE ever sent (65,535 to begin with).
    initial: u64,
    /// The largest SETTINGS_MAX_FRAME_SIZE ever sent.
    max_frame: u32,
    /// The highest stream a HEADERS frame named.
    top: u32,
    /// The frame types (bit per type) the client sent on each stream.
    kinds: HashMap<u32, u32>,
}

fn grants(sent: &[u8]) -> Grants {
    let mut g = Grants {
        conn: u64::from(frame::DEFAULT_WINDOW),
        stream: HashMap::new(),
        initial: u64::from(frame::DEFAULT_WINDOW),
        max_frame: frame::MIN_MAX_FRAME_SIZE,
        top: 0,
        kinds: HashMap::new(),
    };
    let mut rest = sent.get(PREFACE.len()..).unwrap_or(&[]);
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let (kind, stream) = (rest[3], u32::from_be_bytes([rest[5] & 0x7f, rest[6], rest[7], rest[8]]));
        let Some(p) = rest.get(HEADER_LEN..HEADER_LEN + len) else { break };
        // A HEADERS opens its stream; a PRIORITY or WINDOW_UPDATE whose own fault is a stream
        // error gets a RST_STREAM, which closes an idle stream (and those below it).
        let faulty = match kind {
            frame::PRIORITY => len != 5 || u32::from_be_bytes([p[0] & 0x7f, p[1], p[2], p[3]]) == stream,
            frame::WINDOW_UPDATE => len == 4 && u32::from_be_bytes([p[0] & 0x7f, p[1], p[2], p[3]]) == 0,
            _ => false,
        };
        if kind == frame::HEADERS || (faulty && stream % 2 == 1) {
            g.top = g.top.max(stream);
        }
        if kind <= frame::CONTINUATION {
            *g.kinds.entry(stream).or_default() |= 1 << kind;
        }
        if kind == frame::WINDOW_UPDATE && len == 4 {
            let inc = u64::from(u32::from_be_bytes([p[0] & 0x7f, p[1], p[2], p[3]]));
            if stream == 0 {
                g.conn += inc;
            } else {
                *g.stream.entry(stream).or_default() += inc;
            }
        }
        if kind == frame::SETTINGS && len.is_multiple_of(6) {
            for s in p.chunks(6) {
                let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                match u16::from_be_bytes([s[0], s[1]]) {
                    frame::SETTINGS_INITIAL_WINDOW_SIZE if v <= MAX_WINDOW => g.initial = g.initial.max(u64::from(v)),
                    frame::SETTINGS_MAX_FRAME_SIZE if v <= frame::MAX_MAX_FRAME_SIZE => {
                        g.max_frame = g.max_frame.max(v)
                    }
                    _ => {}
                }
            }
        }
        rest = &rest[HEADER_LEN + len..];
    }
    g
}

impl Client {
    fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        if kind == frame::HEADERS {
            self.top_stream = self.top_stream.max(stream & MAX_WINDOW);
        }
        let l = (payload.len() as u32).to_be_bytes();
        self.wire.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
        self.wire.extend_from_slice(&stream.to_be_bytes());
        self.wire.extend_from_slice(payload);
    }

    /// Reads `n` bytes of the session's output and checks every whole frame in it.
    fn read(&mut self, s: &mut Session, n: usize) -> Result<(), String> {
        let n = n.min(s.out.len());
        self.inbox.extend(s.out.drain(..n));
        let g = grants(&self.sent);
        let mut at = 0;
        while let Some(h) = Header::parse(&self.inbox[at..]) {
            let end = at + HEADER_LEN + h.len as usize;
            if end > self.inbox.len() {
                break;
            }
            self.server_frame(h, at, end, &g)?;
            at = end;
        }
        self.inbox.drain(..at);
        Ok(())
    }

    fn server_frame(&mut self, h: Header, at: usize, end: usize, g: &Grants) -> Result<(), String> {
        if std::env::var_os("H2TRACE").is_some() {
            eprintln!("server: {h:?} {}", crate::checks::show(&self.inbox[at + HEADER_LEN..end]));
        }
        let n = self.frames_in;
        self.frames_in += 1;
        let ctx = |what: String| format!("server frame {n} {h:?}: {what}");
        // After a connection error, only the requests that came before it in the same read
        // (at most the GOAWAY's last stream) may still be answered before the close.
        if self.failed.is_some_and(|last| h.stream == 0 || h.stream > last) {
            return Err(ctx(format!("a frame after a GOAWAY with an error code (last stream {:?})", self.failed)));
        }
        if n == 0 && h.kind != frame::SETTINGS {
            return Err(ctx("the server's preface is not SETTINGS".into()));
        }
        if h.len > g.max_frame {
            return Err(ctx(format!("larger than the client's SETTINGS_MAX_FRAME_SIZE {}", g.max_frame)));
        }
        // Frames on streams: on odd streams the client opened, but for the RST_STREAM that
        // answers a frame whose own fault is a stream error, wherever it came (PRIORITY,
        // WINDOW_UPDATE, HEADERS with a bad priority).
        let opened = h.stream % 2 == 1 && h.stream <= g.top;
        let kinds = g.kinds.get(&h.stream).copied().unwrap_or(0);
        let faulted = h.kind == frame::RST_STREAM
            && kinds & (1 << frame::PRIORITY | 1 << frame::WINDOW_UPDATE | 1 << frame::HEADERS) != 0;
        if h.stream != 0 && !opened && !faulted {
            return Err(ctx(format!("on a stream the client never opened (top {})", g.top)));
        }
        let payload = &self.inbox[at + HEADER_LEN..end];
        if h.kind == frame::PUSH_PROMISE {
            return Err(ctx("PUSH_PROMISE".into()));
        }
        let f = Frame::parse(h, payload).map_err(|e| ctx(format!("does not parse: {e:?}")))?;
        match f {
            Frame::Data { stream, data, end_stream, .. } => {
                if self.ended.contains(&stream) {
                    return Err(ctx("DATA after the stream ended".into()));
                }
                let got = self.data_in.entry(stream).or_default();
                *got += data.len() as u64;
                self.conn_data_in += data.len() as u64;
                let allowed = g.initial + g.stream.get(&stream).copied().unwrap_or(0);
                if *got > allowed {
                    return Err(ctx(format!("{got} DATA bytes on the stream, its window allowed {allowed}")));
                }
                if self.conn_data_in > g.conn {
                    return Err(ctx(format!(
                        "{} DATA bytes, the connection window allowed {}",
                        self.conn_data_in, g.conn
                    )));
                }
                if end_stream {
                    self.ended.insert(stream);
                }
            }
            Frame::Headers { stream, block, end_stream, end_headers, .. } => {
                if self.ended.contains(&stream) {
                    return Err(ctx("HEADERS after the stream ended".into()));
                }
                // Our responses fit one frame here (small blocks, frames of 16,384 or more).
                if !end_headers {
                    return Err(ctx("a response block cut into CONTINUATIONs".into()));
                }
                let mut first = None;
                self.decoder
                    .decode(block, usize::MAX, |name, value, _| {
                        first.get_or_insert((name.to_vec(), value.to_vec()));
                        Ok::<(), ()>(())
                    })
                    .map_err(|e| ctx(format!("response block does not decode: {e:?}")))?;
                match first {
                    Some((n, v)) if n == b":status" && v.len() == 3 && v.iter().all(u8::is_ascii_digit) => {}
                    other => return Err(ctx(format!("response block starts with {other:?}"))),
                }
                if end_stream {
                    self.ended.insert(stream);
                }
            }
            Frame::RstStream { stream, .. } => {
                self.ended.insert(stream);
                if stream % 2 == 1 {
                    self.top_stream = self.top_stream.max(stream);
                }
            }
            Frame::GoAway { code, last_stream } => {
                if code == Code::Compression as u32 && blocks_decode(&self.sent, self.table) {
                    return Err(ctx("COMPRESSION_ERROR, though every block the client sent decodes in order".into()));
                }
                if code != 0 {
                    self.failed = Some(last_stream);
                } else if last_stream == MAX_WINDOW {
                    // The second GOAWAY names the last stream the session took: 2^31−1 itself
                    // once the client has opened that one (found by this target).
                    if self.announced && self.top_stream != MAX_WINDOW {
                        return Err(ctx("a second GOAWAY announcing a graceful end".into()));
                    }
                    self.announced = true;
                }
            }
            // Only the one that follows the first GOAWAY of a graceful end.
            Frame::Ping { ack: false, data } if self.announced && self.drain_ping.is_none() => {
                self.drain_ping = Some(data);
            }
            Frame::Settings { .. } | Frame::Ping { ack: true, .. } | Frame::WindowUpdate { .. } => {}
            other => return Err(ctx(format!("a server does not send {other:?}"))),
        }
        Ok(())
    }
}

/// The client's header blocks, as sent, decoded in order by a decoder with the session's
/// table limit, the way RFC 9113 §4.3 has every block decoded (whatever becomes of its
/// stream): true when every block decodes, up to the first frame inside a block that is not
/// its CONTINUATION (a connection error, after which nothing is decoded). A session that
/// answers COMPRESSION_ERROR to such blocks has lost step with the client's encoder.
fn blocks_decode(sent: &[u8], table: usize) -> bool {
    let mut dec = Decoder::new(table);
    let mut held: Option<(u32, Vec<u8>)> = None;
    let mut rest = sent.get(PREFACE.len()..).unwrap_or(&[]);
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let (kind, flags) = (rest[3], rest[4]);
        let stream = u32::from_be_bytes([rest[5] & 0x7f, rest[6], rest[7], rest[8]]);
        let Some(mut p) = rest.get(HEADER_LEN..HEADER_LEN + len) else { break };
        rest = &rest[HEADER_LEN + len..];
        let end = flags & frame::END_HEADERS != 0;
        match (&mut held, kind) {
            (Some((s, b)), frame::CONTINUATION) if *s == stream => b.extend_from_slice(p),
            (Some(_), _) => return true,
            (None, frame::HEADERS) => {
                if flags & frame::PADDED != 0 {
                    let Some((&pad, tail)) = p.split_first() else { return true };
                    let Some(n) = tail.len().checked_sub(usize::from(pad)) else { return true };
                    p = &tail[..n];
                }
                if flags & frame::PRIORITY_FLAG != 0 {
                    let Some(tail) = p.get(5..) else { return true };
                    p = tail;
                }
                held = Some((stream, p.to_vec()));
            }
            (None, _) => continue,
        }
        if end {
            if let Some((_, b)) = held.take() {
                if dec.decode(&b, usize::MAX, |_, _, _| Ok::<(), ()>(())).is_err() {
                    return false;
                }
            }
        }
    }
    true
}

/// A response being sent: its stream and the body bytes left.
struct Response {
    stream: u32,
    left: usize,
}

/// The fuzzed connection: the session, its client, the trivial responder's queue, the
/// read buffer, and the limits in force.
struct Conn {
    s: Session,
    c: Client,
    lim: Limits,
    responses: Vec<Response>,
    rbuf: Vec<u8>,
    events: Vec<Event>,
    body_max: usize,
}

impl Conn {
    /// The driver's read: up to `n` bytes of the wire into the read buffer (while the
    /// output is under OUT_HIGH and the buffer has room), then the session.
    fn deliver(&mut self, n: usize) -> Result<bool, String> {
        if self.s.out.len() >= OUT_HIGH {
            return Ok(false);
        }
        let n = n.min(self.c.wire.len()).min(RBUF - self.rbuf.len());
        if std::env::var_os("H2TRACE").is_some() && n > 0 {
            eprintln!("client: {:02x?}", &self.c.wire[..n]);
        }
        self.c.sent.extend_from_slice(&self.c.wire[..n]);
        self.rbuf.extend(self.c.wire.drain(..n));
        let before = self.s.out.len();
        let used = self.s.recv(&self.rbuf, &mut self.events);
        if used > self.rbuf.len() {
            return Err(format!("recv used {used} of {} bytes", self.rbuf.len()));
        }
        let grown = self.s.out.len() - before;
        if grown > AMPLIFICATION * used + 17 {
            return Err(format!("recv of {used} bytes queued {grown} bytes of output"));
        }
        self.rbuf.drain(..used);
        if !self.s.is_closing() {
            // What is left is one incomplete frame, which the buffer has room to complete.
            let incomplete = match Header::parse(&self.rbuf) {
                None => true,
                Some(h) => HEADER_LEN + h.len as usize > self.rbuf.len() && h.len <= frame::MIN_MAX_FRAME_SIZE,
            };
            if !incomplete {
                return Err(format!("recv left {} bytes holding a whole frame", self.rbuf.len()));
            }
        }
        self.answer()?;
        Ok(n > 0 || used > 0)
    }

    /// The trivial responder: each request gets a status (431 for an over-long list, the
    /// pipeline's 4xx for what `Fields::request` refuses, else 200) and a body whose length
    /// comes from the stream identifier, HEADERS now, DATA as the windows allow.
    fn answer(&mut self) -> Result<(), String> {
        let limits = HeadLimits { max_header_bytes: 16384, max_uri_bytes: 8192, max_headers: 100 };
        for ev in std::mem::take(&mut self.events) {
            match ev {
                Event::Request { stream, fields } if self.s.is_open(stream) => {
                    if self.responses.iter().any(|r| r.stream == stream) {
                        return Err(format!("stream {stream}: a second request"));
                    }
                    let status = if fields.list_size() == 0 {
                        431
                    } else {
                        match fields.request(&limits) {
                            Ok(_) => 200,
                            Err(rej) => rej.status,
                        }
                    };
                    let left = if self.body_max == 0 { 0 } else { stream as usize * 7919 % (self.body_max + 1) };
                    let len = left.to_string();
                    // Reused by the next request, as the server reuses them.
                    self.s.recycle(fields);
                    let cl = [Field::Pair(b"content-length", len.as_bytes())];
                    self.s.send_headers(stream, status, cl.into_iter(), left == 0);
                    if left > 0 {
                        self.responses.push(Response { stream, left });
                    }
                }
                Event::Request { .. } => {}
                Event::Reset { stream } => self.responses.retain(|r| r.stream != stream),
                // For a stream whose request was reported; unless it ended later in the same
                // input, it now has a priority.
                Event::Priority { stream } => {
                    if self.s.is_open(stream) && self.s.priority(stream).is_none() {
                        return Err(format!("stream {stream}: a priority event, and no priority"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The driver's production of DATA: streams in turn, each frame at most both windows,
    /// the peer's frame size and CHUNK, while the output is under OUT_HIGH.
    fn produce(&mut self) -> bool {
        let zeros = [0u8; CHUNK];
        let mut any = false;
        let mut idle = 0;
        while self.s.out.len() < OUT_HIGH && idle < self.responses.len() && !self.s.is_closing() {
            let mut r = self.responses.remove(0);
            if !self.s.is_open(r.stream) {
                idle = 0;
                continue;
            }
            let room = self.s.send_window(r.stream).min(self.s.max_frame()).min(CHUNK);
            if room == 0 {
                self.responses.push(r);
                idle += 1;
                continue;
            }
            idle = 0;
            let n = room.min(r.left);
            r.left -= n;
            self.s.send_data(r.stream, &zeros[..n], r.left == 0);
            if r.left > 0 {
                self.responses.push(r);
            }
            any = true;
        }
        any
    }

    /// What must hold between any two steps.
    fn check(&self) -> Result<(), String> {
        let streams = self.s.active_streams();
        if streams > self.lim.max_concurrent_streams as usize {
            return Err(format!("{streams} streams open, limit {}", self.lim.max_concurrent_streams));
        }
        if self.responses.len() > streams {
            return Err(format!("{} responses for {streams} streams", self.responses.len()));
        }
        let block = self.s.header_block_len();
        if block > self.lim.max_header_block + frame::MIN_MAX_FRAME_SIZE as usize {
            return Err(format!("{block} bytes of header block held, limit {}", self.lim.max_header_block));
        }
        // Under OUT_HIGH no more is read or cut; a read can add its amplification, and the
        // HEADERS of the requests it completed.
        let out_limit = OUT_HIGH + CHUNK + HEADER_LEN + (AMPLIFICATION + 4) * RBUF;
        if self.s.out.len() > out_limit {
            return Err(format!("{} bytes of output buffered, bound {out_limit}", self.s.out.len()));
        }
        // A closing session sends nothing more: its windows no longer matter (one that
        // failed on an overflowing SETTINGS keeps the overflowed values).
        if self.s.is_closing() {
            return Ok(());
        }
        let (send, recv, each) = self.s.windows();
        if !(0..=max_window()).contains(&send) || !(0..=max_window()).contains(&recv) {
            return Err(format!("connection windows send {send}, receive {recv}"));
        }
        for (id, send, recv) in each {
            // A send window may be negative after SETTINGS_INITIAL_WINDOW_SIZE shrinks
            // (RFC 9113 §6.9.2), by at most the largest window.
            if !(-max_window()..=max_window()).contains(&send) || !(0..=max_window()).contains(&recv) {
                return Err(format!("stream {id}: windows send {send}, receive {recv}"));
            }
        }
        Ok(())
    }

    /// Reads everything, delivers everything, answers and produces until nothing moves.
    fn drain(&mut self) -> Result<bool, String> {
        let mut moved = false;
        for _ in 0..DRAIN_STEPS {
            let out = self.s.out.len();
            self.c.read(&mut self.s, out)?;
            let mut progress = out > 0;
            progress |= self.deliver(RBUF)?;
            progress |= self.produce();
            self.check()?;
            moved |= progress;
            if !progress {
                return Ok(moved);
            }
        }
        Err(format!("no quiet after {DRAIN_STEPS} steps"))
    }
}

/// A stream identifier: new (the next odd one), a recent one, 0, even, or any.
fn stream_id(u: &mut Unstructured, c: &Client) -> arbitrary::Result<u32> {
    let top = c.top_stream;
    Ok(match u.int_in_range(0..=9)? {
        0..=3 => (top + 1) | 1,
        4 | 5 => top.max(1),
        6 => top.saturating_sub(2 * u.int_in_range(1..=4)?).max(1),
        7 => 0,
        8 => u.int_in_range(1..=32)?,
        _ => u.arbitrary()?,
    })
}

const SETTING_VALUES: &[u32] =
    &[0, 1, 2, 16, 100, 4096, 16_383, 16_384, 16_385, 65_535, 65_536, MAX_WINDOW, MAX_WINDOW + 1, 16_777_215, u32::MAX];

/// One client frame, structured, onto the wire.
fn client_frame(u: &mut Unstructured, c: &mut Client) -> arbitrary::Result<()> {
    let stream = stream_id(u, c)?;
    let extra: u8 = if u.ratio(1, 8)? { u.arbitrary()? } else { 0 };
    match u.int_in_range(0..=15)? {
        0..=4 => {
            let block = header_block(u)?;
            let mut flags = frame::END_HEADERS | extra;
            if u.ratio(2, 3)? {
                flags |= frame::END_STREAM;
            }
            let mut payload = Vec::new();
            let pad = if flags & frame::PADDED != 0 { u.int_in_range(0..=8)? } else { 0 };
            if flags & frame::PADDED != 0 {
                payload.push(pad);
            }
            if flags & frame::PRIORITY_FLAG != 0 {
                let dep: u32 = if u.ratio(1, 4)? { stream } else { u.int_in_range(0..=8)? };
                payload.extend_from_slice(&dep.to_be_bytes());
                payload.push(u.arbitrary()?);
            }
            let cut = if u.ratio(1, 4)? { u.int_in_range(0..=block.len())? } else { block.len() };
            payload.extend_from_slice(&block[..cut]);
            payload.extend(std::iter::repeat_n(0, usize::from(pad)));
            if cut < block.len() {
                flags &= !frame::END_HEADERS;
            }
            c.frame(frame::HEADERS, flags, stream, &payload);
            // The rest of the block in CONTINUATIONs (on the same stream, mostly).
            let mut at = cut;
            while at < block.len() {
                let n = u.int_in_range(1..=block.len() - at)?;
                let last = at + n == block.len();
                let on = if u.ratio(1, 16)? { stream_id(u, c)? } else { stream };
                c.frame(frame::CONTINUATION, if last { frame::END_HEADERS } else { 0 }, on, &block[at..at + n]);
                at += n;
            }
        }
        5..=7 => {
            let len = match u.int_in_range(0..=3)? {
                0 => 0,
                1 => u.int_in_range(1..=64)?,
                2 => u.int_in_range(1000..=16_384)?,
                _ => 16_384,
            };
            let mut payload = Vec::new();
            if extra & frame::PADDED != 0 {
                payload.push(u.int_in_range(0..=255)?);
            }
            payload.resize(payload.len() + len, b'd');
            let flags = extra | if u.ratio(1, 2)? { frame::END_STREAM } else { 0 };
            c.frame(frame::DATA, flags, stream, &payload);
        }
        8 => {
            let mut payload = Vec::new();
            for _ in 0..u.int_in_range(0..=4)? {
                let id: u16 = if u.ratio(1, 8)? { u.arbitrary()? } else { u.int_in_range(1..=6)? };
                let v = if u.ratio(1, 8)? { u.arbitrary()? } else { *u.choose(SETTING_VALUES)? };
                payload.extend_from_slice(&id.to_be_bytes());
                payload.extend_from_slice(&v.to_be_bytes());
            }
            let ack = u.ratio(1, 8)?;
            c.frame(
                frame::SETTINGS,
                extra | if ack { frame::ACK } else { 0 },
                if u.ratio(1, 16)? { stream } else { 0 },
                &payload,
            );
        }
        9 | 10 => {
            let inc: u32 = match u.int_in_range(0..=5)? {
                0 => 0,
                1 => 1,
                2 => 65_535,
                3 => MAX_WINDOW,
                4 => u.int_in_range(1..=100_000)?,
                _ => u.arbitrary()?,
            };
            let on = if u.ratio(1, 3)? { 0 } else { stream };
            c.frame(frame::WINDOW_UPDATE, extra, on, &inc.to_be_bytes());
        }
        11 => {
            let code: u32 = if u.ratio(1, 4)? { u.arbitrary()? } else { u.int_in_range(0..=13)? };
            c.frame(frame::RST_STREAM, extra, stream, &code.to_be_bytes());
        }
        12 => {
            let ping: [u8; 8] = u.arbitrary()?;
            c.frame(frame::PING, extra | if u.ratio(1, 4)? { frame::ACK } else { 0 }, 0, &ping);
        }
        13 => {
            let mut payload = vec![0, 0, 0, 0];
            payload[3] = u.arbitrary()?;
            payload.extend_from_slice(&u.int_in_range(0u32..=13)?.to_be_bytes());
            c.frame(frame::GOAWAY, extra, 0, &payload);
        }
        14 => {
            let dep: u32 = if u.ratio(1, 3)? { stream } else { u.int_in_range(0..=16)? };
            let mut payload = dep.to_be_bytes().to_vec();
            payload.push(u.arbitrary()?);
            c.frame(frame::PRIORITY, extra, stream, &payload);
        }
        _ => {
            // Anything else: a PUSH_PROMISE, a CONTINUATION out of place, an unknown type,
            // or a payload of the wrong length.
            let kind =
                *u.choose(&[frame::PUSH_PROMISE, frame::CONTINUATION, 0x0a, 0xff, frame::PING, frame::RST_STREAM])?;
            let n = u.int_in_range(0..=16)?;
            let payload = u.bytes(n.min(u.len()))?.to_vec();
            c.frame(kind, extra, stream, &payload);
        }
    }
    Ok(())
}

/// The `h2_session` target: one connection, driven as `conn/h2.rs` drives it, without
/// sockets. The input (read with `arbitrary`'s `Unstructured`) picks the limits, the preface
/// (mostly right), then steps: a structured client frame, raw bytes, a delivery of some of
/// what the client wrote (the driver's read: up to its buffer, not while the output is over
/// its high mark), the client reading some output, DATA produced, a graceful GOAWAY, or a
/// stream reset by the server. Requests are answered by a trivial responder (a status and a
/// body of zeros whose length comes from the stream identifier). Then everything left is
/// delivered, and, unless the connection failed, the client ends every open stream
/// (END_STREAM, windows opened to the full), and it all drains.
///
/// Checks: no panic (nor a debug assertion in the session); after every step, the streams
/// open within SETTINGS_MAX_CONCURRENT_STREAMS, a header block held within its cap plus a
/// frame, the output within the driver's high mark plus what one read can add (a read adds at
/// most 3 bytes of output per byte of input, plus a GOAWAY), the input left after a read one
/// incomplete frame that fits the buffer, and (while the connection is not closing) every
/// flow-control window within 0..=2^31−1 (a stream's send window: −(2^31−1)..=2^31−1, as
/// §6.9.2 lets a SETTINGS change make it negative). Every frame the server sent parses; the
/// first is SETTINGS; none follows a GOAWAY with an error code; none is PUSH_PROMISE or
/// larger than the client allowed; frames on streams are on odd streams the client opened;
/// no HEADERS or DATA after the stream ended; response blocks decode and start with
/// `:status`; DATA never exceeds the windows the client granted, per stream and on the
/// connection; COMPRESSION_ERROR only when the client's blocks, decoded in order, do not
/// decode. At the end every stream has ended (or the connection is closing), and after a
/// graceful GOAWAY the connection closes.
pub fn check_h2_session(data: &[u8]) -> Result<(), String> {
    match session(data) {
        Ok(r) => r,
        // The input ran out while a step was being built: the steps so far were run.
        Err(arbitrary::Error::NotEnoughData) => Ok(()),
        Err(e) => Err(format!("arbitrary: {e}")),
    }
}

fn session(data: &[u8]) -> arbitrary::Result<Result<(), String>> {
    let mut u = Unstructured::new(data);
    let lim = Limits {
        max_concurrent_streams: *u.choose(&[1, 2, 3, 8, 100])?,
        max_header_list_size: *u.choose(&[64, 256, 4096, 16_384])?,
        max_header_block: *u.choose(&[64, 1024, 16_384, 65_536])?,
        header_table_size: *u.choose(&[0, 64, 4096])?,
        max_body: *u.choose(&[0, 100, 16_384, 1 << 20])?,
        // `[http2]`'s defaults (taken from no input byte, so that the corpus keeps its
        // meaning).
        initial_window: frame::DEFAULT_WINDOW,
        reset_budget: 200,
        flood_budget: 1000,
    };
    let body_max = *u.choose(&[0, 10, 20_000, 70_000, 300_000])?;
    let mut conn = Conn {
        s: Session::new(lim),
        c: Client {
            wire: Vec::new(),
            sent: Vec::new(),
            inbox: Vec::new(),
            top_stream: 0,
            decoder: Decoder::new(4096),
            data_in: HashMap::new(),
            conn_data_in: 0,
            ended: HashSet::new(),
            failed: None,
            frames_in: 0,
            announced: false,
            drain_ping: None,
            table: lim.header_table_size as usize,
        },
        lim,
        responses: Vec::new(),
        rbuf: Vec::new(),
        events: Vec::new(),
        body_max,
    };
    if u.ratio(1, 32)? {
        let n = u.int_in_range(0..=24)?;
        conn.c.wire.extend_from_slice(u.bytes(n)?);
    } else {
        conn.c.wire.extend_from_slice(PREFACE);
        if u.ratio(15, 16)? {
            conn.c.frame(frame::SETTINGS, 0, 0, b"");
        }
    }
    let mut graceful = false;
    while !u.is_empty() {
        let r = match u.int_in_range(0..=15)? {
            0..=7 => {
                client_frame(&mut u, &mut conn.c)?;
                Ok(())
            }
            8 => {
                let n = u.int_in_range(0..=32)?;
                let raw = u.bytes(n.min(u.len()))?;
                conn.c.wire.extend_from_slice(raw);
                Ok(())
            }
            9..=11 => {
                let n = *u.choose(&[1, 9, 100, 4096, RBUF])?;
                conn.deliver(n).map(|_| ())
            }
            12 => {
                let n = *u.choose(&[1, 100, OUT_HIGH, usize::MAX])?;
                conn.c.read(&mut conn.s, n)
            }
            13 => {
                conn.produce();
                Ok(())
            }
            14 => {
                conn.s.go_away();
                graceful = true;
                Ok(())
            }
            _ => {
                // The driver resets a stream whose body cannot be read (INTERNAL_ERROR).
                if let Some(r) = conn.responses.first() {
                    let id = r.stream;
                    conn.s.reset(id, Code::Internal, &mut conn.events);
                    conn.responses.retain(|r| r.stream != id);
                    conn.events.clear();
                }
                Ok(())
            }
        };
        if let Err(e) = r.and_then(|()| conn.check()) {
            return Ok(Err(e));
        }
    }
    Ok(finish(&mut conn, graceful))
}

/// Everything left goes in; then a well-behaved client ends every stream still open.
fn finish(conn: &mut Conn, graceful: bool) -> Result<(), String> {
    conn.drain()?;
    // What is left unread is one incomplete frame: the session has not seen it, and the
    // well-behaved ending below starts on a frame boundary.
    conn.c.wire.clear();
    let unseen = conn.c.sent.len() - conn.rbuf.len();
    conn.c.sent.truncate(unseen);
    conn.rbuf.clear();
    // A graceful end: its PING acknowledged if the client has read it; otherwise the
    // driver's fallback, the second GOAWAY without the acknowledgement.
    if let Some(p) = conn.c.drain_ping.take() {
        conn.c.frame(frame::PING, frame::ACK, 0, &p);
        conn.drain()?;
    }
    conn.s.finish_go_away();
    if !conn.s.is_closing() {
        let (send, _, each) = conn.s.windows();
        let streams: Vec<(u32, i64)> = each.map(|(id, w, _)| (id, w)).collect();
        let grant = |c: &mut Client, id: u32, mut w: i64| {
            while w < max_window() {
                let inc = (max_window() - w).min(max_window());
                c.frame(frame::WINDOW_UPDATE, 0, id, &(inc as u32).to_be_bytes());
                w += inc;
            }
        };
        grant(&mut conn.c, 0, send);
        for &(id, w) in &streams {
            grant(&mut conn.c, id, w);
            conn.c.frame(frame::DATA, frame::END_STREAM, id, b"");
        }
        conn.drain()?;
    }
    if !conn.s.is_closing() && conn.s.active_streams() > 0 {
        let (_, _, each) = conn.s.windows();
        let ids: Vec<u32> = each.map(|(id, ..)| id).collect();
        return Err(format!("streams {ids:?} never ended ({} responses queued)", conn.responses.len()));
    }
    if graceful && !conn.s.is_closing() {
        return Err("a graceful GOAWAY with no stream left, and the session is not closing".into());
    }
    Ok(())
}
