//! The HTTP/3 state of one connection above its QUIC streams, sans-IO.
//!
//! * [`RequestStream`] reads one client-initiated bidirectional stream (RFC 9114 §4.1):
//!   HEADERS, then DATA frames (the body: counted and dropped), then optionally a trailing
//!   HEADERS, then the end of the stream; unknown and reserved frame types are skipped
//!   anywhere. The request's fields are QPACK-decoded into an `http::fields::Fields` and
//!   validated (RFC 9114 §4.2, §4.3: the rules HTTP/2 has) before [`Event::Headers`].
//! * [`Session`] reads the peer's unidirectional streams (§6.2): the control stream (exactly
//!   one; SETTINGS first; then GOAWAY, MAX_PUSH_ID, CANCEL_PUSH, PRIORITY_UPDATE), the QPACK
//!   encoder and decoder streams (one each), a push stream (a client may not open one) and
//!   streams of unknown or reserved types (reported so the caller stops reading them). It
//!   writes ours: the control stream's preamble and GOAWAY; and it encodes response heads
//!   within the peer's SETTINGS_MAX_FIELD_SECTION_SIZE.
//!
//! Which error is the stream's and which the connection's follows §4.1 and §7.2: a frame
//! out of order or on the wrong stream, a truncated frame, a critical stream closed, bad
//! SETTINGS or bad QPACK close the connection; a malformed request (bad fields, a body that
//! does not match `content-length`) or a stream ended before its request resets the stream.

use std::convert::Infallible;

use super::frame::{self, conn, stream, Code, ConnError, Error, Header, HeaderReader, Settings};
use super::qpack::{self, DecodeError, Decoder, DecoderStream, HeadTooLarge};
use super::varint::{self, Varint};
use crate::http::fields::Fields;
use crate::http::priority::Priority;

/// Unidirectional stream types (§6.2, RFC 9204 §4.2).
pub const STREAM_CONTROL: u64 = 0x00;
pub const STREAM_PUSH: u64 = 0x01;
pub const STREAM_QPACK_ENCODER: u64 = 0x02;
pub const STREAM_QPACK_DECODER: u64 = 0x03;

/// The largest control-stream frame payload we hold to parse (SETTINGS, PRIORITY_UPDATE);
/// a larger one is H3_EXCESSIVE_LOAD. Unknown frames are skipped, whatever their length.
pub const MAX_CONTROL_PAYLOAD: u64 = 4096;

/// A section buffer larger than this is given back once its section is decoded.
const SECTION_KEEP: usize = 16 * 1024;

/// Our side's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The SETTINGS_MAX_FIELD_SECTION_SIZE we advertise and hold requests to (RFC 9114
    /// §4.2.2: name + value + 32 per field). A larger request head is
    /// [`Event::HeadersTooLarge`].
    pub max_field_section_size: u64,
    /// When set, our SETTINGS carry a reserved setting and the control stream a reserved
    /// frame, both chosen from this value (§7.2.4.1, §7.2.8: so that peers keep ignoring
    /// what they do not know); pass something that differs per connection.
    pub grease: Option<u64>,
}

impl Default for Config {
    fn default() -> Config {
        Config { max_field_section_size: 16 * 1024, grease: None }
    }
}

/// What a request stream's bytes gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The request's fields, decoded and validated: [`RequestStream::fields`]. Once.
    Headers,
    /// The request head is larger than our SETTINGS_MAX_FIELD_SECTION_SIZE: answer 431
    /// (RFC 9114 §4.2.2). Instead of `Headers`; the stream's body is still read.
    HeadersTooLarge,
    /// This many request body bytes arrived (dropped, counted in [`RequestStream::received`]).
    Data(u64),
    /// The stream ended cleanly after a complete request.
    End,
}

/// Where a request stream is in its frame sequence (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the request's HEADERS.
    Head,
    /// After them: DATA, or trailers.
    Body,
    /// After the trailers: only unknown frames until the end.
    Trailers,
    /// The stream ended.
    Done,
}

/// What the bytes inside the current frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// Between frames.
    None,
    /// DATA: this much left.
    Data(u64),
    /// A HEADERS payload being collected (trailers or not): this much left.
    Section { remaining: u64, trailers: bool },
    /// Skipped (an unknown type, or a section too large to hold): this much left.
    Skip(u64),
}

/// The reader of one request stream. See the module documentation.
#[derive(Debug)]
pub struct RequestStream {
    id: u64,
    max_section: u64,
    phase: Phase,
    header: HeaderReader,
    payload: Payload,
    section: Vec<u8>,
    decoder: Decoder,
    fields: Fields,
    content_length: Option<u64>,
    received: u64,
    /// Frames that did no work since [`RequestStream::take_idle`].
    idle: u32,
}

impl RequestStream {
    /// A reader for request stream `id`, holding request heads to `max_field_section_size`
    /// (the value we advertise).
    pub fn new(id: u64, max_field_section_size: u64) -> RequestStream {
        RequestStream {
            id,
            max_section: max_field_section_size,
            phase: Phase::Head,
            header: HeaderReader::default(),
            payload: Payload::None,
            section: Vec::new(),
            decoder: Decoder::new(),
            fields: Fields::default(),
            content_length: None,
            received: 0,
            idle: 0,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Makes this reader, done with its request's head, a new one for request stream `id`
    /// (as [`Session::request_stream`] makes), keeping the room of its buffers, and of
    /// `fields` (those of an earlier request, cleared here) for the fields.
    pub fn reuse(&mut self, id: u64, mut fields: Fields) {
        fields.clear();
        self.id = id;
        self.phase = Phase::Head;
        self.header = HeaderReader::default();
        self.payload = Payload::None;
        self.section.clear();
        self.fields = fields;
        self.content_length = None;
        self.received = 0;
        self.idle = 0;
    }

    /// How many frames that do no work (unknown and reserved types, empty DATA) were read
    /// since the last call: the caller's flood budget (`[http3] flood_budget`).
    pub fn take_idle(&mut self) -> u32 {
        std::mem::take(&mut self.idle)
    }

    /// The request's fields, after [`Event::Headers`] (empty before, and after
    /// [`RequestStream::take_fields`]).
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Takes the request's fields out (to keep them while the stream reads on).
    pub fn take_fields(&mut self) -> Fields {
        std::mem::take(&mut self.fields)
    }

    /// Request body bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The request's `content-length`, when it had one.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// True once the stream has ended cleanly ([`Event::End`] was given).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Reads bytes of the stream, in order; `fin`: they are its last. Returns at the first
    /// event with the bytes consumed so far: call again with the rest. `(n, None)`: all of
    /// `data` was consumed (and, with `fin`, the end was already reported). After an error
    /// the stream is dead: `Error::Stream`, reset it (RESET_STREAM and STOP_SENDING with
    /// the code); `Error::Conn`, close the connection.
    pub fn recv(&mut self, data: &[u8], fin: bool) -> Result<(usize, Option<Event>), Error> {
        if self.phase == Phase::Done {
            return Ok((data.len(), None));
        }
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            match self.payload {
                Payload::None => {
                    let (n, h) = self.header.push(rest);
                    pos += n;
                    if let Some(h) = h {
                        if let Some(ev) = self.start_frame(h)? {
                            return Ok((pos, Some(ev)));
                        }
                    }
                }
                Payload::Data(left) => {
                    let n = left.min(rest.len() as u64);
                    pos += n as usize;
                    self.received += n;
                    self.payload = if n == left { Payload::None } else { Payload::Data(left - n) };
                    if self.content_length.is_some_and(|c| self.received > c) {
                        return Err(stream(Code::MessageError, "request body longer than its content-length").into());
                    }
                    return Ok((pos, Some(Event::Data(n))));
                }
                Payload::Skip(left) => {
                    let n = left.min(rest.len() as u64);
                    pos += n as usize;
                    self.payload = if n == left { Payload::None } else { Payload::Skip(left - n) };
                }
                Payload::Section { remaining, trailers } => {
                    let n = remaining.min(rest.len() as u64);
                    self.section.extend_from_slice(&rest[..n as usize]);
                    pos += n as usize;
                    if n < remaining {
                        self.payload = Payload::Section { remaining: remaining - n, trailers };
                    } else {
                        self.payload = Payload::None;
                        if let Some(ev) = self.end_section(trailers)? {
                            return Ok((pos, Some(ev)));
                        }
                    }
                }
            }
        }
        if !fin {
            return Ok((pos, None));
        }
        if !self.header.is_empty() || self.payload != Payload::None {
            // §7.1: the last frame was truncated.
            return Err(conn(Code::FrameError, "request stream ended inside a frame").into());
        }
        if self.phase == Phase::Head {
            return Err(stream(Code::RequestIncomplete, "request stream ended before its HEADERS").into());
        }
        if self.content_length.is_some_and(|c| self.received != c) {
            return Err(stream(Code::MessageError, "request body shorter than its content-length").into());
        }
        self.phase = Phase::Done;
        Ok((pos, Some(Event::End)))
    }

    /// A frame header arrived: what may come here (§4.1, §7.2).
    fn start_frame(&mut self, h: Header) -> Result<Option<Event>, Error> {
        let unexpected = |why| Err(conn(Code::FrameUnexpected, why).into());
        match h.ty {
            frame::DATA => match self.phase {
                Phase::Body if h.len == 0 => self.idle = self.idle.saturating_add(1),
                Phase::Body => self.payload = Payload::Data(h.len),
                Phase::Head => return unexpected("DATA before the request's HEADERS"),
                _ => return unexpected("DATA after the trailers"),
            },
            frame::HEADERS => {
                let trailers = match self.phase {
                    Phase::Head => false,
                    Phase::Body => true,
                    _ => return unexpected("HEADERS after the trailers"),
                };
                if h.len > self.max_section {
                    // Too large to hold: its fields would be too (a section's encoding is
                    // never longer than its fields' counted size, unless padded with
                    // Huffman codes a client has no reason to use). Skipped unread.
                    self.payload = Payload::Skip(h.len);
                    self.phase = if trailers { Phase::Trailers } else { Phase::Body };
                    return Ok((!trailers).then_some(Event::HeadersTooLarge));
                }
                self.section.clear();
                if h.len == 0 {
                    return self.end_section(trailers);
                }
                self.payload = Payload::Section { remaining: h.len, trailers };
            }
            frame::CANCEL_PUSH | frame::SETTINGS | frame::GOAWAY | frame::MAX_PUSH_ID => {
                return unexpected("a control frame on a request stream")
            }
            frame::PUSH_PROMISE => return unexpected("PUSH_PROMISE from a client"),
            frame::PRIORITY_UPDATE_REQUEST | frame::PRIORITY_UPDATE_PUSH => {
                return unexpected("PRIORITY_UPDATE on a request stream")
            }
            ty if frame::is_http2_only(ty) => return unexpected("an HTTP/2 frame type"),
            _ => {
                self.idle = self.idle.saturating_add(1);
                self.payload = if h.len == 0 { Payload::None } else { Payload::Skip(h.len) };
            }
        }
        Ok(None)
    }

    /// A whole HEADERS payload is in `section`: the request's fields, or trailers.
    fn end_section(&mut self, trailers: bool) -> Result<Option<Event>, Error> {
        let result = if trailers {
            self.phase = Phase::Trailers;
            // Trailers are checked and dropped: no pseudo-header field (§4.3).
            let r = self.decoder.decode(&self.section, self.max_section, |name, _| match name.first() {
                Some(b':') => Err(()),
                _ => Ok(()),
            });
            match r {
                Ok(()) | Err(DecodeError::TooLarge) => Ok(None),
                Err(DecodeError::Field(())) => {
                    Err(stream(Code::MessageError, "pseudo-header field in trailers").into())
                }
                Err(DecodeError::Decompression(why)) => Err(conn(Code::QpackDecompressionFailed, why).into()),
            }
        } else {
            self.phase = Phase::Body;
            self.fields.clear();
            let fields = &mut self.fields;
            let r = self.decoder.decode(&self.section, self.max_section, |name, value| {
                fields.push(name, value);
                Ok::<(), Infallible>(())
            });
            match r {
                Ok(()) => match self.fields.validate() {
                    Ok(content_length) => {
                        self.content_length = content_length;
                        Ok(Some(Event::Headers))
                    }
                    Err(_) => Err(stream(Code::MessageError, "malformed request head").into()),
                },
                Err(DecodeError::TooLarge) => {
                    self.fields.clear();
                    Ok(Some(Event::HeadersTooLarge))
                }
                Err(DecodeError::Field(never)) => match never {},
                Err(DecodeError::Decompression(why)) => Err(conn(Code::QpackDecompressionFailed, why).into()),
            }
        };
        self.section.clear();
        if self.section.capacity() > SECTION_KEEP {
            self.section = Vec::new();
        }
        result
    }
}

/// What the peer's unidirectional streams gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UniEvent {
    /// The peer's SETTINGS arrived: [`Session::peer_settings`].
    Settings,
    /// A PRIORITY_UPDATE for request stream `stream` (RFC 9218 §7.2): its new priority
    /// (what the update omits is the default). The stream may be open, closed or not yet
    /// opened; the caller applies it or keeps it for the stream.
    Priority { stream: u64, priority: Priority },
    /// The client's GOAWAY (§5.2; a client's carries a push ID, which we never use): it
    /// will open no new request stream; finish the open ones.
    GoAway(u64),
    /// A stream of an unknown or reserved type (§6.2, §6.2.3): not an error. The caller
    /// stops reading it (STOP_SENDING with H3_STREAM_CREATION_ERROR) and passes none of its
    /// data again: the session has forgotten it.
    Ignore,
}

/// The control stream's reader.
#[derive(Debug)]
struct Control {
    id: u64,
    /// No frame has started yet (the first must be SETTINGS).
    first: bool,
    header: HeaderReader,
    payload: CtlPayload,
    buf: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtlPayload {
    None,
    /// A frame of type `ty` being collected: this much left.
    Buffer {
        ty: u64,
        remaining: u64,
    },
    Skip(u64),
}

/// A unidirectional stream whose type has not all arrived (at most 8 bytes).
#[derive(Debug)]
struct Pending {
    id: u64,
    ty: [u8; 8],
    len: u8,
}

/// The connection's HTTP/3 state. See the module documentation and `h3`'s API summary.
#[derive(Debug)]
pub struct Session {
    config: Config,
    peer: Option<Settings>,
    control: Option<Control>,
    encoder: Option<u64>,
    decoder: Option<(u64, DecoderStream)>,
    pending: Vec<Pending>,
    max_push_id: Option<u64>,
    peer_goaway: Option<u64>,
    goaway_sent: Option<u64>,
    /// Codings of the values of recent responses.
    values: qpack::ValueCache,
    /// Frames, instructions and streams that did no work since [`Session::take_idle`].
    idle: u32,
}

impl Session {
    pub fn new(config: Config) -> Session {
        Session {
            config,
            peer: None,
            control: None,
            encoder: None,
            decoder: None,
            pending: Vec::new(),
            max_push_id: None,
            peer_goaway: None,
            goaway_sent: None,
            values: qpack::ValueCache::default(),
            idle: 0,
        }
    }

    /// How many frames, instructions and streams that do no work the peer's unidirectional
    /// streams brought since the last call: control frames after SETTINGS (PRIORITY_UPDATE,
    /// GOAWAY, MAX_PUSH_ID, unknown and reserved types), QPACK instructions with no effect
    /// (Stream Cancellations; Set Dynamic Table Capacity 0), streams of unknown types or
    /// ended before their type. For the caller's flood budget (`[http3] flood_budget`).
    pub fn take_idle(&mut self) -> u32 {
        std::mem::take(&mut self.idle)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The peer's SETTINGS, or the defaults until they arrive (a server need not wait for
    /// them, §7.2.4.2).
    pub fn peer_settings(&self) -> Settings {
        self.peer.unwrap_or_default()
    }

    /// True once the peer's SETTINGS have arrived.
    pub fn has_peer_settings(&self) -> bool {
        self.peer.is_some()
    }

    /// The last GOAWAY ID the client sent.
    pub fn peer_goaway(&self) -> Option<u64> {
        self.peer_goaway
    }

    /// A reader for the request stream `id`, with our limits.
    pub fn request_stream(&self, id: u64) -> RequestStream {
        RequestStream::new(id, self.config.max_field_section_size)
    }

    /// False for a request stream at or after the ID of the GOAWAY we sent: refuse it with
    /// H3_REQUEST_REJECTED (§5.2), unprocessed.
    pub fn accepts(&self, id: u64) -> bool {
        self.goaway_sent.is_none_or(|g| id < g)
    }

    /// Our control stream's first bytes: its type, SETTINGS (QPACK_MAX_TABLE_CAPACITY 0,
    /// QPACK_BLOCKED_STREAMS 0, our MAX_FIELD_SECTION_SIZE, and with `grease` a reserved
    /// setting), and with `grease` an empty frame of a reserved type. Open the stream at
    /// once (§6.2.1) and never close it.
    pub fn control_stream_preamble(&self, out: &mut Vec<u8>) {
        varint::encode(STREAM_CONTROL, out);
        let mut settings = [
            (frame::SETTINGS_QPACK_MAX_TABLE_CAPACITY, 0),
            (frame::SETTINGS_QPACK_BLOCKED_STREAMS, 0),
            (frame::SETTINGS_MAX_FIELD_SECTION_SIZE, self.config.max_field_section_size.min(varint::MAX)),
            (0, 0),
        ];
        let n = match self.config.grease {
            Some(g) => {
                settings[3] = (reserved(g), (g >> 32) & 0xffff);
                4
            }
            None => 3,
        };
        frame::write_settings(&settings[..n], out);
        if let Some(g) = self.config.grease {
            frame::write_header(reserved(g.rotate_left(16)), 0, out);
        }
    }

    /// Appends a GOAWAY with `id`, the first request stream we will not process, to our
    /// control stream's bytes (§5.2). A later GOAWAY may only lower the ID: a higher one is
    /// sent as the previous.
    pub fn goaway(&mut self, id: u64, out: &mut Vec<u8>) {
        let id = self.goaway_sent.map_or(id, |g| g.min(id));
        self.goaway_sent = Some(id);
        frame::goaway(id, out);
    }

    /// Drops what is kept to make the next responses cheaper (the codings of recent values)
    /// and the control stream's spare room: the connection is idle.
    pub fn shed(&mut self) {
        self.values = qpack::ValueCache::default();
        if let Some(c) = &mut self.control {
            c.buf.shrink_to_fit();
        }
    }

    /// The ID of the GOAWAY we sent.
    pub fn goaway_sent(&self) -> Option<u64> {
        self.goaway_sent
    }

    /// [`qpack::encode_response_head`] within the peer's SETTINGS_MAX_FIELD_SECTION_SIZE,
    /// with the connection's cache of value codings.
    pub fn encode_response_head<'a>(
        &mut self,
        status: u16,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) -> Result<(), HeadTooLarge> {
        let max = self.peer_settings().max_field_section_size;
        qpack::encode_response_head_cached(&mut self.values, status, fields, max, out)
    }

    /// The peer reset one of its unidirectional streams: closing a critical one (control,
    /// QPACK encoder or decoder) is H3_CLOSED_CRITICAL_STREAM (§6.2.1, RFC 9204 §4.2).
    pub fn on_uni_stream_reset(&mut self, id: u64) -> Result<(), ConnError> {
        if self.is_critical(id) {
            return Err(conn(Code::ClosedCriticalStream, "a critical stream was reset"));
        }
        self.pending.retain(|p| p.id != id);
        Ok(())
    }

    fn is_critical(&self, id: u64) -> bool {
        self.control.as_ref().is_some_and(|c| c.id == id)
            || self.encoder == Some(id)
            || self.decoder.as_ref().is_some_and(|d| d.0 == id)
    }

    /// Reads bytes of the peer's unidirectional stream `id`, in order; `fin`: they are its
    /// last. Returns at the first event with the bytes consumed so far: call again with the
    /// rest; `(n, None)`: all of `data` was consumed. An error closes the connection.
    pub fn on_uni_stream_data(
        &mut self,
        id: u64,
        data: &[u8],
        fin: bool,
    ) -> Result<(usize, Option<UniEvent>), ConnError> {
        let critical_end = || conn(Code::ClosedCriticalStream, "a critical stream was closed");
        if self.control.as_ref().is_some_and(|c| c.id == id) {
            return self.control_data(data, fin);
        }
        if self.encoder == Some(id) {
            qpack::check_encoder_stream(data)?;
            // Only Set Dynamic Table Capacity 0 passes, one byte each.
            self.idle = self.idle.saturating_add(u32::try_from(data.len()).unwrap_or(u32::MAX));
            return if fin { Err(critical_end()) } else { Ok((data.len(), None)) };
        }
        if let Some((_, d)) = self.decoder.as_mut().filter(|d| d.0 == id) {
            let n = d.read(data)?;
            self.idle = self.idle.saturating_add(n);
            return if fin { Err(critical_end()) } else { Ok((data.len(), None)) };
        }
        // A new stream, or one whose type has not all arrived.
        let i = match self.pending.iter().position(|p| p.id == id) {
            Some(i) => i,
            None => {
                self.pending.push(Pending { id, ty: [0; 8], len: 0 });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[i];
        let mut pos = 0;
        let ty = loop {
            if let Varint::Value(ty, _) = varint::decode(&p.ty[..usize::from(p.len)]) {
                break Some(ty);
            }
            let Some(&b) = data.get(pos) else { break None };
            p.ty[usize::from(p.len)] = b;
            p.len += 1;
            pos += 1;
        };
        let Some(ty) = ty else {
            if fin {
                // Ended before its type: to be tolerated (§6.2).
                self.pending.swap_remove(i);
                self.idle = self.idle.saturating_add(1);
            }
            return Ok((pos, None));
        };
        self.pending.swap_remove(i);
        let creation = |why| Err(conn(Code::StreamCreationError, why));
        match ty {
            STREAM_CONTROL => {
                if self.control.is_some() {
                    return creation("a second control stream");
                }
                self.control = Some(Control {
                    id,
                    first: true,
                    header: HeaderReader::default(),
                    payload: CtlPayload::None,
                    buf: Vec::new(),
                });
            }
            STREAM_PUSH => return creation("a push stream from a client"),
            STREAM_QPACK_ENCODER => {
                if self.encoder.is_some() {
                    return creation("a second QPACK encoder stream");
                }
                self.encoder = Some(id);
            }
            STREAM_QPACK_DECODER => {
                if self.decoder.is_some() {
                    return creation("a second QPACK decoder stream");
                }
                self.decoder = Some((id, DecoderStream::default()));
            }
            _ => {
                self.idle = self.idle.saturating_add(1);
                return Ok((pos, Some(UniEvent::Ignore)));
            }
        }
        let (n, ev) = self.on_uni_stream_data(id, &data[pos..], fin)?;
        Ok((pos + n, ev))
    }

    /// Reads the control stream (§6.2.1, §7.2).
    fn control_data(&mut self, data: &[u8], fin: bool) -> Result<(usize, Option<UniEvent>), ConnError> {
        let mut pos = 0;
        while pos < data.len() {
            let Some(c) = self.control.as_mut() else { break };
            let rest = &data[pos..];
            match c.payload {
                CtlPayload::None => {
                    let (n, h) = c.header.push(rest);
                    pos += n;
                    if let Some(h) = h {
                        if let Some(ev) = self.control_frame_start(h)? {
                            return Ok((pos, Some(ev)));
                        }
                    }
                }
                CtlPayload::Skip(left) => {
                    let n = left.min(rest.len() as u64);
                    pos += n as usize;
                    c.payload = if n == left { CtlPayload::None } else { CtlPayload::Skip(left - n) };
                }
                CtlPayload::Buffer { ty, remaining } => {
                    let n = remaining.min(rest.len() as u64);
                    c.buf.extend_from_slice(&rest[..n as usize]);
                    pos += n as usize;
                    if n < remaining {
                        c.payload = CtlPayload::Buffer { ty, remaining: remaining - n };
                    } else {
                        c.payload = CtlPayload::None;
                        if let Some(ev) = self.control_frame(ty)? {
                            return Ok((pos, Some(ev)));
                        }
                    }
                }
            }
        }
        if fin {
            return Err(conn(Code::ClosedCriticalStream, "the control stream was closed"));
        }
        Ok((pos, None))
    }

    /// A control-stream frame header arrived.
    fn control_frame_start(&mut self, h: Header) -> Result<Option<UniEvent>, ConnError> {
        let Some(c) = self.control.as_mut() else { return Ok(None) };
        let first = std::mem::replace(&mut c.first, false);
        if first && h.ty != frame::SETTINGS {
            return Err(conn(Code::MissingSettings, "the control stream does not start with SETTINGS"));
        }
        if !first {
            self.idle = self.idle.saturating_add(1);
        }
        let unexpected = |why| Err(conn(Code::FrameUnexpected, why));
        let limit = match h.ty {
            frame::SETTINGS if !first => return unexpected("a second SETTINGS"),
            frame::SETTINGS | frame::PRIORITY_UPDATE_REQUEST | frame::PRIORITY_UPDATE_PUSH => MAX_CONTROL_PAYLOAD,
            frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH => 8,
            frame::DATA | frame::HEADERS => return unexpected("DATA or HEADERS on the control stream"),
            frame::PUSH_PROMISE => return unexpected("PUSH_PROMISE from a client"),
            ty if frame::is_http2_only(ty) => return unexpected("an HTTP/2 frame type"),
            _ => {
                c.payload = if h.len == 0 { CtlPayload::None } else { CtlPayload::Skip(h.len) };
                return Ok(None);
            }
        };
        if h.len > limit {
            return Err(if limit == 8 {
                conn(Code::FrameError, "an identifier frame longer than a varint")
            } else {
                conn(Code::ExcessiveLoad, "a control frame above 4 KiB")
            });
        }
        c.buf.clear();
        if h.len == 0 {
            return self.control_frame(h.ty);
        }
        c.payload = CtlPayload::Buffer { ty: h.ty, remaining: h.len };
        Ok(None)
    }

    /// A whole control-stream frame of type `ty` is in the control's buffer.
    fn control_frame(&mut self, ty: u64) -> Result<Option<UniEvent>, ConnError> {
        let Some(c) = self.control.as_mut() else { return Ok(None) };
        let payload = std::mem::take(&mut c.buf);
        let result = self.control_payload(ty, &payload);
        if let Some(c) = self.control.as_mut() {
            // The buffer goes back for the next frame (at most 4 KiB).
            c.buf = payload;
            c.buf.clear();
        }
        result
    }

    fn control_payload(&mut self, ty: u64, payload: &[u8]) -> Result<Option<UniEvent>, ConnError> {
        let id_error = |why| Err(conn(Code::IdError, why));
        match ty {
            frame::SETTINGS => {
                self.peer = Some(frame::parse_settings(payload)?);
                Ok(Some(UniEvent::Settings))
            }
            frame::GOAWAY => {
                let id = frame::parse_id(payload)?;
                if self.peer_goaway.is_some_and(|g| id > g) {
                    return id_error("GOAWAY with a higher ID than before");
                }
                self.peer_goaway = Some(id);
                Ok(Some(UniEvent::GoAway(id)))
            }
            frame::MAX_PUSH_ID => {
                let id = frame::parse_id(payload)?;
                if self.max_push_id.is_some_and(|m| id < m) {
                    return id_error("MAX_PUSH_ID lowered");
                }
                self.max_push_id = Some(id);
                Ok(None)
            }
            frame::CANCEL_PUSH => {
                frame::parse_id(payload)?;
                id_error("CANCEL_PUSH for a push we never promised")
            }
            frame::PRIORITY_UPDATE_REQUEST => {
                let (id, value) = frame::parse_priority_update(payload)?;
                if id % 4 != 0 {
                    return id_error("PRIORITY_UPDATE for a stream that is not a request stream");
                }
                Ok(Some(UniEvent::Priority { stream: id, priority: Priority::parse(value) }))
            }
            frame::PRIORITY_UPDATE_PUSH => {
                let (id, _) = frame::parse_priority_update(payload)?;
                if self.max_push_id.is_none_or(|m| id > m) {
                    return id_error("PRIORITY_UPDATE for a push ID above MAX_PUSH_ID");
                }
                // We never push: there is no such push stream to reprioritise.
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

/// The reserved value (0x1f * N + 0x21) that `g` picks, N below 2^32.
fn reserved(g: u64) -> u64 {
    0x1f * (g & 0xffff_ffff) + 0x21
}

#[cfg(test)]
mod tests;
