//! The server side of one HTTP/2 connection as a sans-IO state machine: bytes in
//! ([`Session::recv`]), decoded requests and stream events out, frames appended to a write
//! buffer ([`Session::out`]) that the connection flushes. It knows nothing of sockets,
//! files or the serving pipeline, so it is unit-tested (and fuzzable) on byte strings.
//!
//! What it does (RFC 9113):
//! * **Preface and SETTINGS** (§3.4, §6.5): the client's 24-byte preface, then its SETTINGS
//!   as the first frame; ours go out at once; every SETTINGS is acknowledged; peer values
//!   are checked (§6.5.2) and applied (header table size to the encoder, initial window to
//!   every stream, max frame size to what we send).
//! * **Streams** (§5.1): client-initiated odd identifiers, each above the last; HEADERS (+
//!   CONTINUATION, the whole block capped at `max_header_block`) opens a stream, END_STREAM
//!   half-closes it; past `max_concurrent_streams` a new stream is refused (REFUSED_STREAM,
//!   its block still decoded so that HPACK stays in step); frames on closed or idle streams
//!   get the errors of §5.1; trailers are accepted and dropped.
//! * **Request bodies** (DATA) count against both receive windows and are thrown away, as
//!   HTTP/1.1 throws away bodies; both windows are replenished once half is used; a body
//!   that disagrees with `content-length` makes the request malformed (§8.1.1). A request
//!   is reported when its body has ended (END_STREAM, or trailers without pseudo-header
//!   fields), or once `max_body` bytes of it have come.
//! * **Flow control for what we send** (§6.9): the connection and stream send windows, the
//!   peer's WINDOW_UPDATEs (overflow past 2^31−1 is FLOW_CONTROL_ERROR), SETTINGS changes.
//! * **PING** answered, **PRIORITY** parsed and ignored (RFC 9113 deprecates its scheme),
//!   RFC 9218's `priority` field and **PRIORITY_UPDATE** kept per stream
//!   ([`Session::priority`]), **GOAWAY** from the peer noted,
//!   unknown frame types ignored; **RST_STREAM** ends a stream.
//! * **Errors** (§5.4): a stream error sends RST_STREAM and reports [`Event::Reset`]; a
//!   connection error sends GOAWAY with the last stream identifier seen, after which input is
//!   ignored and [`Session::is_closing`] says to close once the output is flushed.
//! * **Defences**: the header block cap (CONTINUATION flood), the header list cap (HPACK
//!   bomb), the concurrency cap, and two budgets, each refilled by one with every completed
//!   response, an empty one being GOAWAY ENHANCE_YOUR_CALM: client resets (Rapid Reset:
//!   every stream the client resets before its response is complete costs one), and frames
//!   that do no work (PING, SETTINGS, PRIORITY, unknown types, empty DATA and empty header
//!   fragments, resets of closed streams, frames we answer with RST_STREAM: the PING,
//!   SETTINGS, empty-frame and empty-CONTINUATION floods). Besides, floods cost output only
//!   as fast as the client reads it: the connection stops reading while its output buffer is
//!   full.
//! * **Handshake and progress** for the connection's deadlines: [`Session::handshaken`]
//!   (preface, SETTINGS, our SETTINGS acknowledged) and [`Session::progress`], which control
//!   frames never move.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::frame::{self, Code, Error, Frame, Header, Setting, HEADER_LEN, PREFACE};
use super::hpack;
use crate::http::budget::Budget;
use crate::http::fields::Fields;
use crate::http::priority::Priority;

/// Limits a session enforces, from `[http2]`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_concurrent_streams: u32,
    pub max_header_list_size: u32,
    /// Bytes of one header block, HEADERS and CONTINUATION frames together.
    pub max_header_block: usize,
    /// The dynamic table the client's encoder may use (SETTINGS_HEADER_TABLE_SIZE).
    pub header_table_size: u32,
    /// Request body bytes a request waits for before it is answered anyway (HTTP/1.1's
    /// `max_body_discard`); the rest is refused when the response is complete.
    pub max_body: u64,
    /// Our SETTINGS_INITIAL_WINDOW_SIZE, and the connection window we open: what a client
    /// may send of request bodies before we replenish (at half).
    pub initial_window: u32,
    /// Streams the client may reset before their response is complete (Rapid Reset).
    pub reset_budget: u32,
    /// Frames that do no work (PING, SETTINGS, PRIORITY, empty DATA and header fragments,
    /// frames answered with RST_STREAM) the client may send; each completed response earns
    /// one back.
    pub flood_budget: u32,
}

/// What [`Session::recv`] reports to the connection.
#[derive(Debug)]
pub enum Event {
    /// A stream's request is complete and well-formed: serve it.
    Request { stream: u32, fields: Fields },
    /// The stream ended before its response did (the client reset it, or a stream error
    /// was sent): drop what is being sent for it.
    Reset { stream: u32 },
    /// A PRIORITY_UPDATE changed the priority of a stream whose request was reported
    /// ([`Session::priority`]).
    Priority { stream: u32 },
}

struct Stream {
    /// The client has sent END_STREAM.
    remote_closed: bool,
    send_window: i64,
    recv_window: i64,
    /// `content-length`, if the request had one, and the DATA bytes received.
    expect: Option<u64>,
    received: u64,
    /// A request was reported for it (its response is owed).
    requested: bool,
    /// The request, held until its body has ended (or passed `max_body`).
    pending: Option<Fields>,
    /// RFC 9218 parameters, if the request's `priority` field or a PRIORITY_UPDATE gave any.
    priority: Option<Priority>,
}

/// The stream map's hasher. Keys are stream identifiers, at most `max_concurrent_streams`
/// of them live: SipHash's resistance to chosen keys buys nothing there (a client that picked
/// colliding identifiers lengthens one probe sequence of at most that many entries), and it
/// cost about 1,300 instructions a request (four lookups or updates each). One multiply by
/// the 64-bit golden ratio, folded so that the low bits, which pick the bucket, depend on
/// every bit of the identifier (unfolded, identifiers equal modulo 2^k would share a
/// bucket in a table of 2^k).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        let h = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

type StreamMap = HashMap<u32, Stream, BuildHasherDefault<IdHasher>>;

/// Decoded field lists kept for reuse (see [`Session::recycle`]).
const SPARE_FIELDS: usize = 16;

/// The largest header block whose decoded fields are kept in the [`BlockMemo`].
const MEMO_MAX: usize = 1024;

/// The last request header block that decoded without changing the decoder's dynamic table
/// ([`hpack::Decoder::state`]) to a well-formed request, and, once the same block has come
/// twice in a row, what it became. While the state stays the same, the same bytes decode to
/// the same fields, with the same `content-length` and RFC 9218 priority: a client that
/// sends one request again and again (a load generator, a poller; its encoder sends every
/// field indexed but the `:path` literal, which nghttp2 never indexes) has them copied
/// instead of decoded and checked again, about 2,200 instructions per request on h2c. A
/// block unlike the last costs a comparison and a copy of its bytes; its fields are copied
/// only when it comes again.
#[derive(Default)]
struct BlockMemo {
    state: Option<u64>,
    block: Vec<u8>,
    /// `fields`, `content_length` and `priority` are the block's.
    full: bool,
    fields: Fields,
    content_length: Option<u64>,
    priority: Option<Priority>,
}

/// A response field for [`Session::send_headers`].
#[derive(Clone, Copy, Debug)]
pub enum Field<'f> {
    /// A name (lowercase) and value, encoded by the session's encoder.
    Pair(&'f [u8], &'f [u8]),
    /// Fields encoded beforehand by [`hpack::encode_unindexed`], copied as they are.
    Encoded(&'f [u8]),
}

/// The PING sent with the first GOAWAY of a graceful end.
const DRAIN_PING: [u8; 8] = *b"goaway\0\0";

/// A header block buffer larger than this is not kept for the next one.
const BLOCK_KEEP: usize = 16 * 1024;

/// A header block being received across CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
    /// A stream error found in the HEADERS frame, sent once the block is decoded.
    fault: Option<Code>,
}

pub struct Session {
    lim: Limits,
    /// Bytes of the client preface still expected.
    preface_left: usize,
    /// The first frame after the preface (which must be SETTINGS) has been seen.
    got_settings: bool,
    dec: hpack::Decoder,
    enc: hpack::Encoder,
    streams: StreamMap,
    last_stream: u32,
    block: Option<Block>,
    conn_send: i64,
    conn_recv: i64,
    peer_initial_window: u32,
    peer_max_frame: usize,
    /// We sent the first GOAWAY of a graceful end (and the PING whose acknowledgement
    /// completes it).
    announced: bool,
    /// We sent the last GOAWAY of a graceful end: no new streams.
    draining: bool,
    /// A connection error was sent: close once `out` is flushed.
    closing: bool,
    /// What is left of `reset_budget`.
    resets: Budget,
    /// What is left of `flood_budget`.
    flood: Budget,
    /// The client has acknowledged our SETTINGS.
    acked: bool,
    /// Counts request and response progress (see [`Session::progress`]).
    progress: u64,
    /// Frames to send, in order.
    pub out: Vec<u8>,
    /// A reused field block buffer for responses.
    block_buf: Vec<u8>,
    /// A reused buffer for a header block that spans frames.
    block_spare: Vec<u8>,
    /// Field lists given back ([`Session::recycle`]), taken by the next requests: no
    /// allocation per request. Dropped while the connection is idle ([`Session::shed`]).
    spare_fields: Vec<Fields>,
    memo: BlockMemo,
}

impl Session {
    /// A new session; our SETTINGS are queued at once (§3.4: the server's preface).
    pub fn new(lim: Limits) -> Session {
        let mut s = Session {
            lim,
            preface_left: PREFACE.len(),
            got_settings: false,
            dec: hpack::Decoder::new(lim.header_table_size as usize),
            enc: hpack::Encoder::new(),
            streams: StreamMap::default(),
            last_stream: 0,
            block: None,
            conn_send: i64::from(frame::DEFAULT_WINDOW),
            conn_recv: i64::from(lim.initial_window),
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::MIN_MAX_FRAME_SIZE as usize,
            announced: false,
            draining: false,
            closing: false,
            resets: Budget::new(lim.reset_budget),
            flood: Budget::new(lim.flood_budget),
            acked: false,
            progress: 0,
            out: Vec::new(),
            block_buf: Vec::new(),
            block_spare: Vec::new(),
            spare_fields: Vec::new(),
            memo: BlockMemo::default(),
        };
        let mut params = vec![
            Setting { id: frame::SETTINGS_MAX_CONCURRENT_STREAMS, value: lim.max_concurrent_streams },
            Setting { id: frame::SETTINGS_MAX_HEADER_LIST_SIZE, value: lim.max_header_list_size },
        ];
        // No SETTINGS_ENABLE_PUSH: it is the client's setting (a server may only send 0,
        // RFC 9113 §6.5.2), and we never push.
        if lim.header_table_size != 4096 {
            params.push(Setting { id: frame::SETTINGS_HEADER_TABLE_SIZE, value: lim.header_table_size });
        }
        if lim.initial_window != frame::DEFAULT_WINDOW {
            params.push(Setting { id: frame::SETTINGS_INITIAL_WINDOW_SIZE, value: lim.initial_window });
        }
        frame::write_settings(&mut s.out, &params);
        if lim.initial_window > frame::DEFAULT_WINDOW {
            frame::write_window_update(&mut s.out, 0, lim.initial_window - frame::DEFAULT_WINDOW);
        }
        s
    }

    /// True once the client's preface and SETTINGS have come and our SETTINGS were
    /// acknowledged: until then the connection is under the handshake timeout.
    pub fn handshaken(&self) -> bool {
        self.got_settings && self.acked
    }

    /// A count that moves whenever a request is reported, request body bytes arrive or DATA
    /// is queued: what renews a busy connection's deadline. Control frames (PING,
    /// SETTINGS, WINDOW_UPDATE that opens no window for anything) do not move it, so a client
    /// cannot hold a stalled stream, or an idle connection, by pinging.
    pub fn progress(&self) -> u64 {
        self.progress
    }

    /// True once a connection error was sent (or the graceful end is complete): close the
    /// connection when `out` is flushed.
    pub fn is_closing(&self) -> bool {
        self.closing || (self.draining && self.streams.is_empty())
    }

    /// Streams open or half-closed.
    pub fn active_streams(&self) -> usize {
        self.streams.len()
    }

    /// The largest DATA payload the peer accepts in one frame.
    pub fn max_frame(&self) -> usize {
        self.peer_max_frame
    }

    /// The flow-control windows as kept, unclamped (for invariant checks: the `h2_session`
    /// fuzz target): the connection's send and receive windows, then each stream's
    /// identifier with its send and receive windows.
    pub fn windows(&self) -> (i64, i64, impl Iterator<Item = (u32, i64, i64)> + '_) {
        (self.conn_send, self.conn_recv, self.streams.iter().map(|(&id, s)| (id, s.send_window, s.recv_window)))
    }

    /// Bytes of a header block held until its last CONTINUATION (0 outside one).
    pub fn header_block_len(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.bytes.len())
    }

    /// Consumes input, appending events. Returns the bytes used; the rest (an incomplete
    /// frame) must be offered again with more. After a connection error everything is used
    /// and ignored.
    pub fn recv(&mut self, input: &[u8], events: &mut Vec<Event>) -> usize {
        let mut used = 0;
        while !self.closing {
            let rest = &input[used..];
            if self.preface_left > 0 {
                let at = PREFACE.len() - self.preface_left;
                let n = rest.len().min(self.preface_left);
                if rest[..n] != PREFACE[at..at + n] {
                    // Not HTTP/2: nothing sensible to answer (§3.4 allows a GOAWAY; the
                    // client may not even read frames).
                    self.closing = true;
                    return input.len();
                }
                self.preface_left -= n;
                used += n;
                if self.preface_left > 0 {
                    return used;
                }
                continue;
            }
            let Some(h) = Header::parse(rest) else { return used };
            // We never raise SETTINGS_MAX_FRAME_SIZE: anything larger is an error (§4.2).
            if h.len > frame::MIN_MAX_FRAME_SIZE {
                self.fail(Code::FrameSize);
                return input.len();
            }
            let total = HEADER_LEN + h.len as usize;
            if rest.len() < total {
                return used;
            }
            let payload = &rest[HEADER_LEN..total];
            used += total;
            if let Err(e) = self.frame(h, payload, events) {
                match e {
                    Error::Connection(code) => self.fail(code),
                    Error::Stream(id, code) => {
                        self.reset(id, code, events);
                        if self.flood().is_err() {
                            self.fail(Code::EnhanceYourCalm);
                        }
                    }
                }
            }
        }
        input.len()
    }

    /// Sends GOAWAY with this code; the connection ends.
    fn fail(&mut self, code: Code) {
        if !self.closing {
            frame::write_goaway(&mut self.out, self.last_stream, code);
            self.closing = true;
        }
    }

    /// Begins a graceful end (shutdown, reload) in two steps (RFC 9113 §6.8): GOAWAY NO_ERROR
    /// with the largest stream identifier, 2^31−1, so that the client opens no more streams
    /// but those it is sending meanwhile are still served, and a PING. Its acknowledgement,
    /// one round trip later, completes the end ([`Session::finish_go_away`]).
    pub fn go_away(&mut self) {
        if !self.announced && !self.draining && !self.closing {
            frame::write_goaway(&mut self.out, frame::MAX_WINDOW, Code::NoError);
            frame::write_ping(&mut self.out, &DRAIN_PING);
            self.announced = true;
        }
    }

    /// True between the first GOAWAY of a graceful end and the second: the connection
    /// finishes it itself if the PING is not acknowledged in time.
    pub fn awaiting_go_away(&self) -> bool {
        self.announced && !self.draining && !self.closing
    }

    /// The second GOAWAY of a graceful end begun by [`Session::go_away`]: NO_ERROR with the
    /// last stream seen; streams in flight finish, new ones are ignored, then the session is
    /// closing.
    pub fn finish_go_away(&mut self) {
        if self.awaiting_go_away() {
            frame::write_goaway(&mut self.out, self.last_stream, Code::NoError);
            self.draining = true;
        }
    }

    /// The connection's deadline has passed and it is being closed: GOAWAY, SETTINGS_TIMEOUT
    /// if our SETTINGS were never acknowledged (§6.5.3), NO_ERROR otherwise. Nothing if the
    /// client never completed its preface or a connection error was sent. True if queued.
    pub fn expire(&mut self) -> bool {
        if self.preface_left > 0 || self.closing {
            return false;
        }
        let code = if self.acked { Code::NoError } else { Code::SettingsTimeout };
        frame::write_goaway(&mut self.out, self.last_stream, code);
        self.closing = true;
        true
    }

    /// Sends RST_STREAM and forgets the stream; reports it if a response was owed. A
    /// client stream reset while idle (a PRIORITY that depends on itself) is closed from
    /// then on: the client may not open it later (RFC 9113 §5.1).
    pub fn reset(&mut self, id: u32, code: Code, events: &mut Vec<Event>) {
        frame::write_rst_stream(&mut self.out, id, code);
        if id % 2 == 1 && self.idle(id) {
            self.last_stream = id;
        }
        if let Some(s) = self.streams.remove(&id) {
            if s.requested {
                events.push(Event::Reset { stream: id });
            }
        }
    }

    fn frame(&mut self, h: Header, payload: &[u8], events: &mut Vec<Event>) -> Result<(), Error> {
        let f = Frame::parse(h, payload)?;
        if !self.got_settings {
            if !matches!(f, Frame::Settings { ack: false, .. }) {
                return Err(Error::Connection(Code::Protocol));
            }
            self.got_settings = true;
        }
        // Inside a header block only its CONTINUATION may come (§6.10).
        if let Some(b) = &self.block {
            match f {
                Frame::Continuation { stream, .. } if stream == b.stream => {}
                _ => return Err(Error::Connection(Code::Protocol)),
            }
        }
        if Self::unproductive(&f) {
            self.flood()?;
        }
        match f {
            Frame::Settings { ack: true, .. } => {
                self.acked = true;
                Ok(())
            }
            Frame::Settings { ack: false, params } => {
                for p in params {
                    p.check()?;
                    self.apply(p)?;
                }
                frame::write_settings_ack(&mut self.out);
                Ok(())
            }
            Frame::Ping { ack: false, data } => {
                frame::write_ping_ack(&mut self.out, &data);
                Ok(())
            }
            Frame::Ping { ack: true, data } => {
                if data == DRAIN_PING {
                    // A round trip since the first GOAWAY: what the client opened meanwhile
                    // has arrived.
                    self.finish_go_away();
                }
                Ok(())
            }
            Frame::Unknown { .. } | Frame::GoAway { .. } => Ok(()),
            Frame::PriorityUpdate { stream, value } => {
                // For a stream not open yet (or any more) it is dropped: RFC 9218 §7.1 lets a
                // server keep it for a stream to come, but nothing requires it.
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.priority = Some(Priority::parse(value));
                    if s.requested {
                        events.push(Event::Priority { stream });
                    }
                }
                Ok(())
            }
            Frame::Priority { stream, .. } => {
                // Parsed and ignored, but it may not arrive on an idle stream that a HEADERS
                // then reuses with a lower number; it does not open the stream.
                let _ = stream;
                Ok(())
            }
            Frame::WindowUpdate { stream: 0, increment } => {
                self.conn_send += i64::from(increment);
                if self.conn_send > i64::from(frame::MAX_WINDOW) {
                    return Err(Error::Connection(Code::FlowControl));
                }
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                if self.idle(stream) {
                    return Err(Error::Connection(Code::Protocol));
                }
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.send_window += i64::from(increment);
                    if s.send_window > i64::from(frame::MAX_WINDOW) {
                        return Err(Error::Stream(stream, Code::FlowControl));
                    }
                }
                Ok(())
            }
            Frame::RstStream { stream, .. } => {
                if self.idle(stream) {
                    return Err(Error::Connection(Code::Protocol));
                }
                if let Some(s) = self.streams.remove(&stream) {
                    if s.requested {
                        events.push(Event::Reset { stream });
                    }
                    // Any stream reset before its response was complete costs (Rapid Reset).
                    if self.resets.spend(1) {
                        return Err(Error::Connection(Code::EnhanceYourCalm));
                    }
                } else {
                    // A reset of a stream already closed does nothing: a flood frame.
                    self.flood()?;
                }
                Ok(())
            }
            Frame::Data { stream, data, end_stream, flow_len } => {
                self.data(stream, end_stream, data.len(), flow_len)?;
                self.release(stream, events);
                Ok(())
            }
            Frame::Headers { stream, block, end_stream, end_headers, priority } => {
                if stream % 2 == 0 {
                    return Err(Error::Connection(Code::Protocol));
                }
                // A stream error is sent once the block is decoded: HPACK must stay in step,
                // and the CONTINUATIONs are expected (§4.3). A stream cannot depend on
                // itself (§5.3.1).
                let mut fault = priority.filter(|p| p.dependency == stream).map(|_| Code::Protocol);
                if let Some(s) = self.streams.get(&stream) {
                    // Trailers: only with END_STREAM, only while the client is still sending.
                    if s.remote_closed {
                        fault = Some(Code::StreamClosed);
                    } else if !end_stream {
                        fault = Some(Code::Protocol);
                    }
                } else if stream <= self.last_stream {
                    return Err(Error::Connection(Code::StreamClosed));
                }
                if end_headers {
                    // The whole block in one frame (nearly always): decoded where it lies.
                    return self.end_block(Block { stream, end_stream, bytes: Vec::new(), fault }, block, events);
                }
                let mut bytes = std::mem::take(&mut self.block_spare);
                bytes.clear();
                bytes.extend_from_slice(block);
                self.block = Some(Block { stream, end_stream, bytes, fault });
                self.check_block_size()
            }
            Frame::Continuation { block, end_headers, .. } => {
                let Some(b) = &mut self.block else { return Err(Error::Connection(Code::Protocol)) };
                b.bytes.extend_from_slice(block);
                self.check_block_size()?;
                if end_headers {
                    if let Some(mut b) = self.block.take() {
                        let bytes = std::mem::take(&mut b.bytes);
                        let r = self.end_block(b, &bytes, events);
                        if bytes.capacity() <= BLOCK_KEEP {
                            self.block_spare = bytes;
                        }
                        return r;
                    }
                }
                Ok(())
            }
        }
    }

    /// Frames that cost us work and move nothing forward: PING, SETTINGS, PRIORITY,
    /// unknown types, DATA that is empty and does not end its stream, and HEADERS or
    /// CONTINUATION fragments that are empty and do not end their block (the empty
    /// CONTINUATION flood, which the header block cap alone never meets).
    fn unproductive(f: &Frame<'_>) -> bool {
        match f {
            Frame::Ping { .. }
            | Frame::Settings { .. }
            | Frame::Priority { .. }
            | Frame::PriorityUpdate { .. }
            | Frame::Unknown { .. } => true,
            Frame::Data { data, end_stream, .. } => data.is_empty() && !end_stream,
            Frame::Headers { block, end_headers, .. } | Frame::Continuation { block, end_headers, .. } => {
                block.is_empty() && !end_headers
            }
            _ => false,
        }
    }

    /// Charges one frame to the flood budget (PING, SETTINGS and empty-frame floods, CVE-2019-9512,
    /// -9515, -9518, and frames we must answer with RST_STREAM): every completed response earns
    /// one back, and an empty budget is GOAWAY ENHANCE_YOUR_CALM.
    fn flood(&mut self) -> Result<(), Error> {
        if self.flood.spend(1) {
            return Err(Error::Connection(Code::EnhanceYourCalm));
        }
        Ok(())
    }

    /// A stream identifier never used yet: above the last the client opened, or even (the
    /// server's, and a server that never pushes opens none: RFC 9113 §5.1.1).
    fn idle(&self, id: u32) -> bool {
        id > self.last_stream || id.is_multiple_of(2)
    }

    fn check_block_size(&self) -> Result<(), Error> {
        match &self.block {
            Some(b) if b.bytes.len() > self.lim.max_header_block => Err(Error::Connection(Code::EnhanceYourCalm)),
            _ => Ok(()),
        }
    }

    fn apply(&mut self, p: Setting) -> Result<(), Error> {
        match p.id {
            frame::SETTINGS_HEADER_TABLE_SIZE => self.enc.set_max_table_size(p.value.min(4096) as usize),
            frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                let delta = i64::from(p.value) - i64::from(self.peer_initial_window);
                self.peer_initial_window = p.value;
                for s in self.streams.values_mut() {
                    s.send_window += delta;
                    if s.send_window > i64::from(frame::MAX_WINDOW) {
                        return Err(Error::Connection(Code::FlowControl));
                    }
                }
            }
            frame::SETTINGS_MAX_FRAME_SIZE => self.peer_max_frame = p.value as usize,
            _ => {}
        }
        Ok(())
    }

    /// DATA of `len` bytes, `flow_len` with padding (what flow control counts).
    fn data(&mut self, id: u32, end_stream: bool, len: usize, flow_len: u32) -> Result<(), Error> {
        if self.idle(id) {
            return Err(Error::Connection(Code::Protocol));
        }
        // Counted against the connection window whatever the stream's state (§6.9).
        self.conn_recv -= i64::from(flow_len);
        if self.conn_recv < 0 {
            return Err(Error::Connection(Code::FlowControl));
        }
        let window = i64::from(self.lim.initial_window);
        if self.conn_recv < window / 2 {
            let inc = window - self.conn_recv;
            frame::write_window_update(&mut self.out, 0, inc as u32);
            self.conn_recv += inc;
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Err(Error::Stream(id, Code::StreamClosed));
        };
        if s.remote_closed {
            return Err(Error::Stream(id, Code::StreamClosed));
        }
        s.recv_window -= i64::from(flow_len);
        if s.recv_window < 0 {
            return Err(Error::Stream(id, Code::FlowControl));
        }
        s.received += len as u64;
        self.progress += len as u64;
        if s.expect.is_some_and(|n| s.received > n) || (end_stream && s.expect.is_some_and(|n| s.received != n)) {
            return Err(Error::Stream(id, Code::Protocol));
        }
        if end_stream {
            s.remote_closed = true;
        } else if s.recv_window < window / 2 {
            let inc = window - s.recv_window;
            frame::write_window_update(&mut self.out, id, inc as u32);
            s.recv_window += inc;
        }
        Ok(())
    }

    /// A complete header block: decode it (always, so that HPACK stays in step), then open
    /// the stream, refuse it, or take it as trailers.
    /// `bytes` is the block (`b.bytes` is not used).
    fn end_block(&mut self, b: Block, bytes: &[u8], events: &mut Vec<Event>) -> Result<(), Error> {
        let mut fields = self.spare_fields.pop().unwrap_or_default();
        let mut priority = None;
        let state = self.dec.state();
        // `Some(content-length)`: the block is the memo's, and so are its fields.
        let mut checked = None;
        let seen = self.memo.state == Some(state) && self.memo.block == bytes;
        let too_large = if seen && self.memo.full {
            #[cfg(debug_assertions)]
            self.check_memo(bytes, state);
            fields.copy_from(&self.memo.fields);
            priority = self.memo.priority;
            checked = Some(self.memo.content_length);
            false
        } else {
            match self.decode_request(bytes, &mut fields, &mut priority) {
                Ok(()) => false,
                Err(hpack::DecodeError::ListTooLarge) => true,
                Err(_) => return Err(Error::Connection(Code::Compression)),
            }
        };
        let id = b.stream;
        if let Some(code) = b.fault {
            return Err(Error::Stream(id, code));
        }
        if let Some(s) = self.streams.get_mut(&id) {
            // Trailers (END_STREAM was checked): dropped, but they end the body. They carry no
            // pseudo-header fields (RFC 9113 §8.1).
            let pseudo = fields.iter().any(|(n, _)| n.first() == Some(&b':'));
            if pseudo || s.expect.is_some_and(|n| s.received != n) {
                return Err(Error::Stream(id, Code::Protocol));
            }
            s.remote_closed = true;
            self.release(id, events);
            self.recycle(fields);
            return Ok(());
        }
        self.last_stream = id;
        if self.draining {
            return Ok(());
        }
        if self.streams.len() >= self.lim.max_concurrent_streams as usize {
            return self.refuse(id, Code::RefusedStream);
        }
        let expect = if too_large {
            None
        } else if let Some(n) = checked {
            n
        } else {
            match fields.validate() {
                Ok(n) => {
                    let m = &mut self.memo;
                    if seen {
                        m.full = true;
                        m.fields.copy_from(&fields);
                        m.content_length = n;
                        m.priority = priority;
                    } else if self.dec.state() == state && bytes.len() <= MEMO_MAX {
                        m.state = Some(state);
                        m.full = false;
                        m.block.clear();
                        m.block.extend_from_slice(bytes);
                    }
                    n
                }
                Err(_) => return self.refuse(id, Code::Protocol),
            }
        };
        if b.end_stream && expect.is_some_and(|n| n != 0) {
            return self.refuse(id, Code::Protocol);
        }
        self.streams.insert(
            id,
            Stream {
                remote_closed: b.end_stream,
                send_window: i64::from(self.peer_initial_window),
                recv_window: i64::from(self.lim.initial_window),
                expect,
                received: 0,
                requested: false,
                priority,
                pending: Some(fields),
            },
        );
        if too_large {
            // An over-long list is answered like HTTP/1.1's 431, on the stream: an empty
            // field list tells the connection so.
            if let Some(f) = self.streams.get_mut(&id).and_then(|s| s.pending.as_mut()) {
                f.clear();
            }
        }
        self.release(id, events);
        Ok(())
    }

    /// Decodes a request header block into `fields`, with our SETTINGS_MAX_HEADER_LIST_SIZE;
    /// its `priority` field lines combine in order into `priority` (RFC 9218 §5).
    fn decode_request(
        &mut self,
        bytes: &[u8],
        fields: &mut Fields,
        priority: &mut Option<Priority>,
    ) -> Result<(), hpack::DecodeError<std::convert::Infallible>> {
        self.dec.decode(bytes, self.lim.max_header_list_size as usize, |name, value, _sensitive| {
            if name == b"priority" {
                priority.get_or_insert_with(Priority::default).apply(value);
            }
            fields.push(name, value);
            Ok(())
        })
    }

    /// Debug builds (the tests, the `h2_session` fuzz target): the block the memo answers for
    /// decodes, without changing the table, to the memo's fields and priority.
    #[cfg(debug_assertions)]
    fn check_memo(&mut self, bytes: &[u8], state: u64) {
        let mut fresh = Fields::default();
        let mut priority = None;
        let decoded = self.decode_request(bytes, &mut fresh, &mut priority);
        assert!(decoded.is_ok() && self.dec.state() == state, "a memo block changes the table");
        assert!(fresh.iter().eq(self.memo.fields.iter()), "a memo block decodes to other fields");
        assert_eq!(priority, self.memo.priority, "a memo block has another priority");
    }

    /// A stream that is never opened (past the concurrency limit, or malformed): RST_STREAM,
    /// charged to the flood budget.
    fn refuse(&mut self, id: u32, code: Code) -> Result<(), Error> {
        frame::write_rst_stream(&mut self.out, id, code);
        self.flood()
    }

    /// Reports a stream's request once its body has ended (so that a body which breaks
    /// `content-length` is an error before anything is answered), or once `max_body` of it
    /// has arrived (a longer one is not waited for).
    fn release(&mut self, id: u32, events: &mut Vec<Event>) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.remote_closed || s.received > self.lim.max_body {
            if let Some(fields) = s.pending.take() {
                s.requested = true;
                self.progress += 1;
                events.push(Event::Request { stream: id, fields });
            }
        }
    }

    /// Gives back a request's fields once they are no longer needed: the next request's
    /// are decoded into them.
    pub fn recycle(&mut self, mut fields: Fields) {
        if self.spare_fields.len() < SPARE_FIELDS {
            fields.clear();
            self.spare_fields.push(fields);
        }
    }

    /// Drops the buffers kept for reuse (the connection is idle: it holds only its state).
    pub fn shed(&mut self) {
        self.spare_fields = Vec::new();
        self.memo = BlockMemo::default();
        self.block_spare = Vec::new();
        self.block_buf = Vec::new();
    }

    /// Bytes of DATA the stream may send now (both windows), 0 for a stream gone.
    pub fn send_window(&self, id: u32) -> usize {
        match self.streams.get(&id) {
            Some(s) => usize::try_from(s.send_window.min(self.conn_send)).unwrap_or(0),
            None => 0,
        }
    }

    /// The stream's RFC 9218 priority, if its request or a PRIORITY_UPDATE signalled one.
    pub fn priority(&self, id: u32) -> Option<Priority> {
        self.streams.get(&id).and_then(|s| s.priority)
    }

    /// True while the stream exists (not reset).
    pub fn is_open(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// Queues a response's HEADERS: the status and the fields (lowercase names, none of
    /// them connection-specific; the caller sees to both).
    pub fn send_headers<'f>(
        &mut self,
        id: u32,
        status: u16,
        fields: impl Iterator<Item = Field<'f>>,
        end_stream: bool,
    ) {
        let mut block = std::mem::take(&mut self.block_buf);
        block.clear();
        self.enc.encode_status(status, &mut block);
        for f in fields {
            match f {
                Field::Pair(name, value) => self.enc.encode(name, value, &mut block),
                Field::Encoded(bytes) => block.extend_from_slice(bytes),
            }
        }
        self.send_block(id, &block, end_stream);
        self.block_buf = block;
    }

    /// The header block the last [`Session::send_headers`] encoded.
    pub fn last_block(&self) -> &[u8] {
        &self.block_buf
    }

    /// The encoder's [`hpack::Encoder::state`]: a block encoded without changing it may be
    /// sent again as it is ([`Session::send_block`]) while it stays the same.
    pub fn encoder_state(&self) -> u64 {
        self.enc.state()
    }

    /// Queues a response's HEADERS with a block encoded before, in the encoder's current
    /// [`Session::encoder_state`], without changing it.
    pub fn send_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        frame::write_headers(&mut self.out, id, block, end_stream, self.peer_max_frame);
        self.progress += 1;
        if end_stream {
            self.end_stream(id);
        }
    }

    /// Queues a DATA frame (at most [`Session::send_window`] and [`Session::max_frame`]
    /// bytes), charged to both windows.
    pub fn send_data(&mut self, id: u32, data: &[u8], end_stream: bool) {
        let at = self.begin_data();
        self.out.extend_from_slice(data);
        self.commit_data(at, id, data.len(), end_stream);
    }

    /// Starts a DATA frame: room for its header at the end of `out`, whose offset
    /// [`Session::commit_data`] takes. The caller appends the payload, or part of it and
    /// sends the rest from where it lies right after `out`'s bytes so far (a mapped file on
    /// a plain connection: nothing copied); or drops the frame with `out.truncate(at)`.
    pub fn begin_data(&mut self) -> usize {
        let at = self.out.len();
        self.out.extend_from_slice(&[0; HEADER_LEN]);
        at
    }

    /// Completes the DATA frame begun at `at` with a `len`-byte payload (at most
    /// [`Session::send_window`] and [`Session::max_frame`]; what is not in `out` after the
    /// header goes out from elsewhere, before anything queued from now on), charged to both
    /// windows.
    pub fn commit_data(&mut self, at: usize, id: u32, len: usize, end_stream: bool) {
        debug_assert!(len <= self.send_window(id) && len <= self.peer_max_frame);
        self.out[at..at + HEADER_LEN].copy_from_slice(&frame::data_header(id, len, end_stream));
        self.progress += 1;
        self.conn_send -= len as i64;
        if let Some(s) = self.streams.get_mut(&id) {
            s.send_window -= len as i64;
        }
        // The payload before anything `end_stream` queues (its RST_STREAM).
        if end_stream {
            self.end_stream(id);
        }
    }

    /// Our side of the stream is done. A client still sending a body is told to stop with
    /// RST_STREAM NO_ERROR (§8.1), so the stream is closed either way.
    fn end_stream(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id) {
            if !s.remote_closed {
                frame::write_rst_stream(&mut self.out, id, Code::NoError);
            }
            self.resets.earn();
            self.flood.earn();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_equal_in_their_low_bits_spread_over_the_buckets() {
        let low_byte = |id: u32| {
            let mut h = IdHasher::default();
            h.write_u32(id);
            h.finish() & 0xff
        };
        // 64 odd identifiers 256 apart: the same bucket of a 256-bucket table for a hash
        // whose low bits follow the identifier's.
        let buckets: std::collections::HashSet<u64> = (0..64).map(|j| low_byte(1 + 256 * j)).collect();
        assert!(buckets.len() >= 32, "{} buckets", buckets.len());
    }

    const LIM: Limits = Limits {
        max_concurrent_streams: 2,
        max_header_list_size: 4096,
        max_header_block: 1024,
        header_table_size: 4096,
        max_body: 100,
        initial_window: 65_535,
        reset_budget: 200,
        flood_budget: 50,
    };

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        frame::write_header(&mut b, payload.len(), kind, flags, stream);
        b.extend_from_slice(payload);
        b
    }

    /// A request block: `:method GET`, `:scheme http`, `:path /`, `:authority a`, literal
    /// fields without indexing.
    fn get_block(extra: &[(&str, &str)]) -> Vec<u8> {
        let mut b = vec![0x82, 0x86, 0x84];
        let mut lit = |n: &str, v: &str| {
            b.push(0);
            b.push(n.len() as u8);
            b.extend_from_slice(n.as_bytes());
            b.push(v.len() as u8);
            b.extend_from_slice(v.as_bytes());
        };
        lit(":authority", "a");
        for (n, v) in extra {
            lit(n, v);
        }
        b
    }

    /// A session past the preface and the client's SETTINGS, its output cleared.
    fn started() -> Session {
        let mut s = Session::new(LIM);
        let mut input = PREFACE.to_vec();
        input.extend(frame(frame::SETTINGS, 0, 0, b""));
        let mut ev = Vec::new();
        assert_eq!(s.recv(&input, &mut ev), input.len());
        assert!(ev.is_empty() && !s.is_closing());
        s.out.clear();
        s
    }

    /// The frames in `out`: (kind, flags, stream, payload).
    fn frames(out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut at = 0;
        while let Some(h) = Header::parse(&out[at..]) {
            let end = at + HEADER_LEN + h.len as usize;
            v.push((h.kind, h.flags, h.stream, out[at + HEADER_LEN..end].to_vec()));
            at = end;
        }
        assert_eq!(at, out.len());
        v
    }

    fn goaway_code(s: &Session) -> Option<u32> {
        frames(&s.out).iter().find(|f| f.0 == frame::GOAWAY).map(|f| u32::from_be_bytes(f.3[4..8].try_into().unwrap()))
    }

    fn rst(s: &Session, id: u32) -> Option<u32> {
        frames(&s.out)
            .iter()
            .find(|f| f.0 == frame::RST_STREAM && f.2 == id)
            .map(|f| u32::from_be_bytes(f.3[..4].try_into().unwrap()))
    }

    fn feed(s: &mut Session, bytes: &[u8]) -> Vec<Event> {
        let mut ev = Vec::new();
        assert_eq!(s.recv(bytes, &mut ev), bytes.len());
        ev
    }

    #[test]
    fn preface_settings_and_ack() {
        let mut s = Session::new(LIM);
        let f = frames(&s.out);
        assert_eq!(f[0].0, frame::SETTINGS);
        let mut ev = Vec::new();
        // The preface may arrive in pieces; an incomplete frame is left unused.
        assert_eq!(s.recv(&PREFACE[..10], &mut ev), 10);
        assert_eq!(s.recv(&PREFACE[10..], &mut ev), 14);
        let settings = frame(frame::SETTINGS, 0, 0, b"\0\x04\0\0\x01\0");
        assert_eq!(s.recv(&settings[..5], &mut ev), 0);
        assert_eq!(s.recv(&settings, &mut ev), settings.len());
        assert_eq!(frames(&s.out).last().unwrap().0, frame::SETTINGS);
        assert_eq!(frames(&s.out).last().unwrap().1, frame::ACK);
        assert!(!s.is_closing());
    }

    #[test]
    fn a_bad_preface_closes() {
        let mut s = Session::new(LIM);
        feed(&mut s, b"GET / HTTP/1.1\r\n\r\n");
        assert!(s.is_closing());
    }

    #[test]
    fn the_first_frame_must_be_settings() {
        let mut s = Session::new(LIM);
        let mut input = PREFACE.to_vec();
        input.extend(frame(frame::PING, 0, 0, b"12345678"));
        feed(&mut s, &input);
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
    }

    #[test]
    fn a_request_and_its_response() {
        let mut s = started();
        let ev = feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS | frame::END_STREAM, 1, &get_block(&[])));
        let [Event::Request { stream: 1, fields }] = &ev[..] else { panic!("{ev:?}") };
        let names: Vec<_> = fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(names[2], (b":path".to_vec(), b"/".to_vec()));
        assert_eq!(s.send_window(1), 65_535);
        s.send_headers(1, 200, [Field::Pair(b"content-length", b"2")].into_iter(), false);
        s.send_data(1, b"ok", true);
        assert!(!s.is_open(1));
        let f = frames(&s.out);
        assert_eq!((f[0].0, f[0].1, f[0].2), (frame::HEADERS, frame::END_HEADERS, 1));
        assert_eq!((f[1].0, f[1].1, f[1].3.len()), (frame::DATA, frame::END_STREAM, 2));
        // The connection window was charged.
        let ev = feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS | frame::END_STREAM, 3, &get_block(&[])));
        assert_eq!(ev.len(), 1);
        assert_eq!(s.send_window(3), 65_533);
    }

    /// Issue 37: a block that comes again with the decoder's table unchanged gives the
    /// fields and priority it gave before (copied, not decoded); once the table changes,
    /// the same bytes are decoded afresh.
    #[test]
    fn a_repeated_block_decodes_as_before_until_the_table_changes() {
        let mut s = started();
        // `x-a: v` with incremental indexing (a new name): dynamic index 62 from then on.
        let insert = |v: &str| {
            let mut b = get_block(&[]);
            b.extend([0x40, 3]);
            b.extend(b"x-a");
            b.push(v.len() as u8);
            b.extend(v.as_bytes());
            b
        };
        let mut again = get_block(&[("priority", "u=1")]);
        again.push(0x80 | 62);
        let mut id = 1;
        let mut request = |s: &mut Session, block: &[u8]| {
            let ev = feed(s, &frame(frame::HEADERS, frame::END_HEADERS | frame::END_STREAM, id, block));
            let [Event::Request { stream, fields }] = &ev[..] else { panic!("{ev:?}") };
            assert_eq!(*stream, id);
            let prio = s.priority(id);
            s.send_headers(id, 204, std::iter::empty(), true);
            id += 2;
            let fields: Vec<_> = fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            (fields, prio)
        };
        request(&mut s, &insert("1"));
        let first = request(&mut s, &again);
        assert_eq!(first.0.last(), Some(&(b"x-a".to_vec(), b"1".to_vec())));
        assert_eq!(first.1, Some(Priority { urgency: 1, incremental: false }));
        for _ in 0..3 {
            assert_eq!(request(&mut s, &again), first);
        }
        assert!(s.memo.full);
        request(&mut s, &insert("2"));
        let after = request(&mut s, &again);
        assert_eq!(after.0.last(), Some(&(b"x-a".to_vec(), b"2".to_vec())));
        assert_eq!(request(&mut s, &again), after);
        assert_eq!(rst(&s, 1), None);
        assert_eq!(goaway_code(&s), None);
    }

    #[test]
    fn a_response_before_the_request_body_ends_the_stream() {
        let mut s = started();
        // HEADERS without END_STREAM: the client has a body to send. The request waits for
        // it, up to max_body.
        assert!(feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &get_block(&[]))).is_empty());
        assert!(feed(&mut s, &frame(frame::DATA, 0, 1, &[0; 100])).is_empty());
        assert_eq!(feed(&mut s, &frame(frame::DATA, 0, 1, b"!")).len(), 1);
        s.send_headers(1, 405, std::iter::empty(), false);
        s.send_data(1, b"no", true);
        // DATA whole, then RST_STREAM NO_ERROR (RFC 9113 §8.1), and the stream is closed.
        let f = frames(&s.out);
        assert_eq!((f[1].0, f[1].1, &f[1].3[..]), (frame::DATA, frame::END_STREAM, &b"no"[..]));
        assert_eq!((f[2].0, f[2].2, &f[2].3[..]), (frame::RST_STREAM, 1, &[0, 0, 0, 0][..]));
        assert!(!s.is_open(1));
        // What the client still sends for it is counted against the connection and refused.
        s.out.clear();
        feed(&mut s, &frame(frame::DATA, 0, 1, b"body"));
        assert_eq!(rst(&s, 1), Some(Code::StreamClosed as u32));
        assert!(!s.is_closing());
    }

    #[test]
    fn a_request_is_answered_when_its_body_ends() {
        let mut s = started();
        assert!(feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &get_block(&[]))).is_empty());
        assert!(feed(&mut s, &frame(frame::DATA, 0, 1, b"part")).is_empty());
        let ev = feed(&mut s, &frame(frame::DATA, frame::END_STREAM, 1, b"end"));
        assert!(matches!(ev[..], [Event::Request { stream: 1, .. }]), "{ev:?}");
        // Or by trailers, which hold no pseudo-header field.
        let trailer = [0, 1, b'x', 1, b'y'];
        feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 3, &get_block(&[])));
        let ev = feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS | frame::END_STREAM, 3, &trailer));
        assert!(matches!(ev[..], [Event::Request { stream: 3, .. }]), "{ev:?}");
        s.send_headers(1, 204, std::iter::empty(), true);
        s.send_headers(3, 204, std::iter::empty(), true);
        feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 5, &get_block(&[])));
        let ev = feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS | frame::END_STREAM, 5, &get_block(&[])));
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(rst(&s, 5), Some(Code::Protocol as u32));
    }

    #[test]
    fn ping_is_answered() {
        let mut s = started();
        feed(&mut s, &frame(frame::PING, 0, 0, b"abcdefgh"));
        assert_eq!(frames(&s.out), [(frame::PING, frame::ACK, 0, b"abcdefgh".to_vec())]);
    }

    #[test]
    fn data_on_stream_zero_or_idle_is_a_connection_error() {
        let mut s = started();
        feed(&mut s, &frame(frame::DATA, 0, 0, b"x"));
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
        let mut s = started();
        feed(&mut s, &frame(frame::DATA, 0, 5, b"x"));
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
        // Input after a connection error is ignored.
        feed(&mut s, &frame(frame::PING, 0, 0, b"abcdefgh"));
        assert_eq!(frames(&s.out).len(), 1);
    }

    #[test]
    fn oversized_frames() {
        let mut s = started();
        let big = vec![0; 16_385];
        feed(&mut s, &frame(frame::DATA, 0, 1, &big));
        assert_eq!(goaway_code(&s), Some(Code::FrameSize as u32));
    }

    #[test]
    fn malformed_requests_are_stream_errors() {
        let mut s = started();
        let ev = feed(&mut s, &frame(frame::HEADERS, 5, 1, &get_block(&[("X-Upper", "v")])));
        assert!(ev.is_empty());
        assert_eq!(rst(&s, 1), Some(Code::Protocol as u32));
        assert!(!s.is_closing());
        // HPACK stayed in step: the next request decodes.
        let ev = feed(&mut s, &frame(frame::HEADERS, 5, 3, &get_block(&[("te", "trailers")])));
        assert_eq!(ev.len(), 1);
        // A content-length the body does not match: refused before it is ever answered.
        let ev = feed(&mut s, &frame(frame::HEADERS, 4, 5, &get_block(&[("content-length", "3")])));
        assert!(ev.is_empty(), "held until its body ends: {ev:?}");
        let ev = feed(&mut s, &frame(frame::DATA, 1, 5, b"ab"));
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(rst(&s, 5), Some(Code::Protocol as u32));
        // Padding is not part of the content.
        s.out.clear();
        feed(&mut s, &frame(frame::HEADERS, 4, 7, &get_block(&[("content-length", "2")])));
        let ev = feed(&mut s, &frame(frame::DATA, frame::END_STREAM | frame::PADDED, 7, b"\x03abXXX"));
        assert!(matches!(ev[..], [Event::Request { stream: 7, .. }]), "{ev:?}");
        assert_eq!(rst(&s, 7), None);
    }

    #[test]
    fn too_many_streams_are_refused() {
        let mut s = started();
        for id in [1, 3] {
            assert_eq!(feed(&mut s, &frame(frame::HEADERS, 5, id, &get_block(&[]))).len(), 1);
        }
        let ev = feed(&mut s, &frame(frame::HEADERS, 5, 5, &get_block(&[])));
        assert!(ev.is_empty());
        assert_eq!(rst(&s, 5), Some(Code::RefusedStream as u32));
        assert!(!s.is_closing());
    }

    #[test]
    fn stream_identifiers() {
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 5, 2, &get_block(&[])));
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 5, 5, &get_block(&[])));
        feed(&mut s, &frame(frame::HEADERS, 5, 3, &get_block(&[])));
        assert_eq!(goaway_code(&s), Some(Code::StreamClosed as u32));
    }

    #[test]
    fn continuation_rules_and_cap() {
        let block = get_block(&[]);
        let mut s = started();
        let mut input = frame(frame::HEADERS, frame::END_STREAM, 1, &block[..2]);
        input.extend(frame(frame::CONTINUATION, frame::END_HEADERS, 1, &block[2..]));
        assert_eq!(feed(&mut s, &input).len(), 1);
        // Anything else inside a block is a connection error.
        let mut s = started();
        let mut input = frame(frame::HEADERS, frame::END_STREAM, 1, &block[..2]);
        input.extend(frame(frame::PING, 0, 0, b"12345678"));
        feed(&mut s, &input);
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
        // A CONTINUATION without a HEADERS.
        let mut s = started();
        feed(&mut s, &frame(frame::CONTINUATION, frame::END_HEADERS, 1, &block));
        assert_eq!(goaway_code(&s), Some(Code::Protocol as u32));
        // An endless block is cut off at max_header_block.
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 0, 1, &block[..2]));
        for _ in 0..10 {
            feed(&mut s, &frame(frame::CONTINUATION, 0, 1, &[0x82; 200]));
        }
        assert_eq!(goaway_code(&s), Some(Code::EnhanceYourCalm as u32));
    }

    #[test]
    fn flow_control_of_what_we_send() {
        let mut s = started();
        feed(&mut s, &frame(frame::SETTINGS, 0, 0, b"\0\x04\0\0\0\x10"));
        feed(&mut s, &frame(frame::HEADERS, 5, 1, &get_block(&[])));
        assert_eq!(s.send_window(1), 16);
        feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 1, b"\0\0\0\x10"));
        assert_eq!(s.send_window(1), 32);
        s.send_data(1, &[0; 32], false);
        assert_eq!(s.send_window(1), 0);
        // A SETTINGS change applies to open streams, and may make a window negative.
        feed(&mut s, &frame(frame::SETTINGS, 0, 0, b"\0\x04\0\0\0\0"));
        assert_eq!(s.send_window(1), 0);
        feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 1, b"\0\0\0\x20"));
        assert_eq!(s.send_window(1), 16);
        // Overflow: a stream error, then a connection error for the connection window.
        feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 1, b"\x7f\xff\xff\xff"));
        assert_eq!(rst(&s, 1), Some(Code::FlowControl as u32));
        feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff"));
        assert_eq!(goaway_code(&s), Some(Code::FlowControl as u32));
    }

    #[test]
    fn request_bodies_are_counted_and_windows_replenished() {
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 4, 1, &get_block(&[])));
        s.out.clear();
        for _ in 0..3 {
            feed(&mut s, &frame(frame::DATA, 0, 1, &[0; 16_384]));
        }
        let f = frames(&s.out);
        assert_eq!(f.iter().filter(|f| f.0 == frame::WINDOW_UPDATE).count(), 2, "{f:?}");
        // More than the stream's window without updates is a flow-control error.
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 4, 1, &get_block(&[])));
        let mut ev = Vec::new();
        // Bypass the replenishing by sending one more window's worth than granted.
        s.streams.get_mut(&1).unwrap().recv_window = 10;
        s.recv(&frame(frame::DATA, 0, 1, &[0; 11]), &mut ev);
        assert_eq!(rst(&s, 1), Some(Code::FlowControl as u32));
    }

    #[test]
    fn rapid_reset_is_cut_off() {
        let mut s = started();
        let mut id = 1;
        while !s.is_closing() && id < 2 * LIM.reset_budget + 10 {
            let mut input = frame(frame::HEADERS, 5, id, &get_block(&[]));
            input.extend(frame(frame::RST_STREAM, 0, id, b"\0\0\0\x08"));
            feed(&mut s, &input);
            id += 2;
        }
        assert_eq!(goaway_code(&s), Some(Code::EnhanceYourCalm as u32));
        assert_eq!(id, 2 * LIM.reset_budget + 1);
    }

    #[test]
    fn the_handshake_ends_with_our_settings_acknowledged() {
        let mut s = Session::new(LIM);
        let mut input = PREFACE.to_vec();
        input.extend(frame(frame::SETTINGS, 0, 0, b""));
        feed(&mut s, &input);
        assert!(!s.handshaken());
        feed(&mut s, &frame(frame::SETTINGS, frame::ACK, 0, b""));
        assert!(s.handshaken());
    }

    #[test]
    fn an_expired_connection_says_goodbye() {
        // Our SETTINGS never acknowledged: SETTINGS_TIMEOUT.
        let mut s = Session::new(LIM);
        let mut input = PREFACE.to_vec();
        input.extend(frame(frame::SETTINGS, 0, 0, b""));
        feed(&mut s, &input);
        assert!(s.expire() && s.is_closing());
        assert_eq!(goaway_code(&s), Some(Code::SettingsTimeout as u32));
        // Idle after a request: NO_ERROR, naming it.
        let mut s = started();
        feed(&mut s, &frame(frame::SETTINGS, frame::ACK, 0, b""));
        feed(&mut s, &frame(frame::HEADERS, 5, 1, &get_block(&[])));
        s.send_headers(1, 204, std::iter::empty(), true);
        s.out.clear();
        assert!(s.expire());
        assert_eq!(frames(&s.out), [(frame::GOAWAY, 0, 0, vec![0, 0, 0, 1, 0, 0, 0, 0])]);
        // Not HTTP/2 yet, or already gone: nothing.
        assert!(!Session::new(LIM).expire());
        assert!(!s.expire());
    }

    #[test]
    fn ping_settings_and_empty_frame_floods_are_cut_off() {
        let ping = frame(frame::PING, 0, 0, b"abcdefgh");
        let settings = frame(frame::SETTINGS, 0, 0, b"");
        let empty_data = frame(frame::DATA, 0, 1, b"");
        let priority = frame(frame::PRIORITY, 0, 3, b"\0\0\0\x01\x10");
        let closed_rst = frame(frame::RST_STREAM, 0, 1, b"\0\0\0\x08");
        for (name, flood, open) in [
            ("ping", &ping, false),
            ("settings", &settings, false),
            ("empty data", &empty_data, true),
            ("priority", &priority, false),
            ("reset of a closed stream", &closed_rst, false),
        ] {
            let mut s = started();
            // Stream 1 open, waiting for its body (or, for the resets, closed at once).
            let flags = if open { frame::END_HEADERS } else { frame::END_HEADERS | frame::END_STREAM };
            feed(&mut s, &frame(frame::HEADERS, flags, 1, &get_block(&[])));
            if !open {
                s.send_headers(1, 204, std::iter::empty(), true);
            }
            let mut n = 0;
            while !s.is_closing() && n < 2 * LIM.flood_budget {
                feed(&mut s, flood);
                n += 1;
            }
            assert_eq!(goaway_code(&s), Some(Code::EnhanceYourCalm as u32), "{name}");
            assert!(n <= LIM.flood_budget + 1, "{name}: {n}");
        }
    }

    #[test]
    fn an_endless_block_of_empty_continuations_is_cut_off() {
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 0, 1, &get_block(&[])[..2]));
        let mut n = 0;
        while !s.is_closing() && n < 1000 {
            feed(&mut s, &frame(frame::CONTINUATION, 0, 1, b""));
            n += 1;
        }
        assert_eq!(goaway_code(&s), Some(Code::EnhanceYourCalm as u32));
        assert!(n < LIM.flood_budget, "{n}");
    }

    #[test]
    fn completed_responses_earn_flood_budget_back() {
        let mut s = started();
        let ping = frame(frame::PING, 0, 0, b"abcdefgh");
        // Four times the budget in pings, but a response after each of them.
        for i in 0..(4 * LIM.flood_budget) {
            feed(&mut s, &ping);
            let id = 2 * i + 1;
            feed(&mut s, &frame(frame::HEADERS, 5, id, &get_block(&[])));
            s.send_headers(id, 204, std::iter::empty(), true);
        }
        assert!(!s.is_closing());
    }

    #[test]
    fn a_larger_initial_window_is_advertised_and_opened() {
        let mut s = Session::new(Limits { initial_window: 1 << 20, ..LIM });
        let f = frames(&s.out);
        assert_eq!(f[0].0, frame::SETTINGS);
        assert!(f[0].3.chunks(6).any(|p| p == [0, 4, 0, 0x10, 0, 0]), "{f:?}");
        assert_eq!(
            (f[1].0, f[1].2, &f[1].3[..]),
            (frame::WINDOW_UPDATE, 0, &((1u32 << 20) - 65_535).to_be_bytes()[..])
        );
        let mut input = PREFACE.to_vec();
        input.extend(frame(frame::SETTINGS, 0, 0, b""));
        feed(&mut s, &input);
        s.out.clear();
        feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &get_block(&[])));
        // 400 KiB of body before any update: within the window; none is due before half of it.
        for _ in 0..25 {
            feed(&mut s, &frame(frame::DATA, 0, 1, &[0; 16_384]));
        }
        assert!(!frames(&s.out).iter().any(|f| f.0 == frame::WINDOW_UPDATE), "{:?}", frames(&s.out));
        for _ in 0..10 {
            feed(&mut s, &frame(frame::DATA, 0, 1, &[0; 16_384]));
        }
        assert_eq!(frames(&s.out).iter().filter(|f| f.0 == frame::WINDOW_UPDATE).count(), 2);
        assert!(!s.is_closing());
    }

    #[test]
    fn progress_moves_with_requests_and_data_only() {
        let mut s = started();
        let p = s.progress();
        feed(&mut s, &frame(frame::PING, 0, 0, b"abcdefgh"));
        feed(&mut s, &frame(frame::SETTINGS, 0, 0, b""));
        feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 0, b"\0\0\0\x01"));
        assert_eq!(s.progress(), p);
        feed(&mut s, &frame(frame::HEADERS, 5, 1, &get_block(&[])));
        assert!(s.progress() > p);
    }

    /// The client may use no even stream: every frame on one, but HEADERS and PRIORITY,
    /// is on an idle stream (found by the `h2_session` fuzz target: DATA on an even stream
    /// below the last was answered as if on a closed one).
    #[test]
    fn even_streams_are_idle() {
        for (kind, payload) in
            [(frame::DATA, &b"x"[..]), (frame::WINDOW_UPDATE, b"\0\0\0\x01"), (frame::RST_STREAM, b"\0\0\0\x08")]
        {
            let mut s = started();
            feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 5, &get_block(&[])));
            feed(&mut s, &frame(kind, 0, 2, payload));
            assert_eq!(goaway_code(&s), Some(Code::Protocol as u32), "frame type {kind}");
            assert_eq!(rst(&s, 2), None);
        }
    }

    /// A stream the server reset while it was idle (a PRIORITY that depends on itself) is
    /// closed: the client cannot open it afterwards (found by the `h2_session` fuzz target).
    #[test]
    fn a_stream_reset_while_idle_is_closed() {
        let mut s = started();
        feed(&mut s, &frame(frame::PRIORITY, 0, 3, b"\0\0\0\x03\x10"));
        assert_eq!(rst(&s, 3), Some(Code::Protocol as u32));
        assert!(feed(&mut s, &frame(frame::HEADERS, 5, 3, &get_block(&[]))).is_empty());
        assert_eq!(goaway_code(&s), Some(Code::StreamClosed as u32));
    }

    /// A HEADERS that is a stream error still has its block decoded (RFC 9113 §4.3), so the
    /// dynamic table stays in step and its CONTINUATIONs are taken as such.
    #[test]
    fn a_stream_error_in_headers_still_decodes_the_block() {
        // A literal with incremental indexing: "x-a: b" becomes dynamic entry 62.
        let indexed = [0x40, 3, b'x', b'-', b'a', 1, b'b'];
        let uses_it = |mut b: Vec<u8>| {
            b.push(0x80 | 62);
            b
        };
        let mut blocks: Vec<(&str, Vec<u8>)> = Vec::new();
        // Depending on itself (§5.3.1).
        let mut prio = b"\0\0\0\x01\x10".to_vec();
        prio.extend(get_block(&[]));
        prio.extend(indexed);
        blocks.push(("self-dependency", frame(frame::HEADERS, 5 | frame::PRIORITY_FLAG, 1, &prio)));
        // Trailers without END_STREAM, in HEADERS + CONTINUATION.
        let mut trailers = frame(frame::HEADERS, frame::END_HEADERS, 1, &get_block(&[]));
        trailers.extend(frame(frame::HEADERS, 0, 1, &indexed[..3]));
        trailers.extend(frame(frame::CONTINUATION, frame::END_HEADERS, 1, &indexed[3..]));
        blocks.push(("trailers without END_STREAM", trailers));
        // Trailers on a stream the client has ended.
        let mut closed = frame(frame::HEADERS, frame::END_HEADERS, 1, &get_block(&[("content-length", "1")]));
        closed.extend(frame(frame::DATA, frame::END_STREAM, 1, b"x"));
        closed.extend(frame(frame::HEADERS, 5, 1, &indexed));
        blocks.push(("HEADERS on a half-closed stream", closed));
        for (what, input) in blocks {
            let mut s = Session::new(Limits { max_concurrent_streams: 10, ..LIM });
            let mut start = PREFACE.to_vec();
            start.extend(frame(frame::SETTINGS, 0, 0, b""));
            feed(&mut s, &start);
            feed(&mut s, &input);
            assert!(rst(&s, 1).is_some_and(|c| c != 0), "{what}: no RST_STREAM");
            assert_eq!(goaway_code(&s), None, "{what}");
            let ev = feed(&mut s, &frame(frame::HEADERS, 5, 3, &uses_it(get_block(&[]))));
            let [Event::Request { stream: 3, fields }] = &ev[..] else { panic!("{what}: {ev:?}") };
            assert!(fields.iter().any(|(n, v)| n == b"x-a" && v == b"b"), "{what}: {fields:?}");
        }
    }

    /// The last-stream identifiers of the GOAWAYs in `out`, and the PINGs' payloads.
    fn goaways_and_pings(s: &Session) -> (Vec<u32>, Vec<Vec<u8>>) {
        let f = frames(&s.out);
        let ids = f.iter().filter(|f| f.0 == frame::GOAWAY).map(|f| u32::from_be_bytes(f.3[..4].try_into().unwrap()));
        let pings = f.iter().filter(|f| f.0 == frame::PING && f.1 == 0).map(|f| f.3.clone());
        (ids.collect(), pings.collect())
    }

    #[test]
    fn graceful_goaway_finishes_streams() {
        let mut s = started();
        feed(&mut s, &frame(frame::HEADERS, 5, 1, &get_block(&[])));
        s.go_away();
        // First GOAWAY: 2^31−1 and a PING; a stream the client opened meanwhile is served.
        let (ids, pings) = goaways_and_pings(&s);
        assert_eq!(ids, [frame::MAX_WINDOW]);
        assert_eq!(pings.len(), 1);
        assert!(s.awaiting_go_away() && !s.is_closing());
        let ev = feed(&mut s, &frame(frame::HEADERS, 5, 3, &get_block(&[])));
        assert!(matches!(ev[..], [Event::Request { stream: 3, .. }]), "{ev:?}");
        // A PING ACK of something else changes nothing.
        feed(&mut s, &frame(frame::PING, frame::ACK, 0, b"12345678"));
        assert!(s.awaiting_go_away());
        // Its acknowledgement: the second GOAWAY names the last stream; later ones are ignored.
        feed(&mut s, &frame(frame::PING, frame::ACK, 0, &pings[0]));
        assert!(!s.awaiting_go_away());
        assert_eq!(goaways_and_pings(&s).0, [frame::MAX_WINDOW, 3]);
        assert!(feed(&mut s, &frame(frame::HEADERS, 5, 5, &get_block(&[]))).is_empty());
        s.send_headers(1, 204, std::iter::empty(), true);
        assert!(!s.is_closing());
        s.send_headers(3, 204, std::iter::empty(), true);
        assert!(s.is_closing());
        assert_eq!(goaway_code(&s), Some(0));
    }

    #[test]
    fn graceful_goaway_finished_without_the_ping_ack() {
        let mut s = started();
        s.go_away();
        s.finish_go_away();
        assert_eq!(goaways_and_pings(&s).0, [frame::MAX_WINDOW, 0]);
        // No stream open: closing at once.
        assert!(s.is_closing());
    }
}
