//! HTTP/3 on a QUIC connection: the glue between its streams (`quinn-proto`), the sans-IO
//! HTTP/3 layer (`crate::h3`: frames, QPACK, the control streams) and the request pipeline
//! (`serve::answer`), the one HTTP/1.1 and HTTP/2 use.
//!
//! * **Streams.** Our control stream opens when the handshake completes (SETTINGS). The
//!   client's unidirectional streams (control, QPACK) go to [`Session`]; a stream of a type
//!   we do not know is stopped (H3_STREAM_CREATION_ERROR), a connection error closes the
//!   connection with its code.
//! * **Requests.** Each request stream's bytes feed its [`RequestStream`]; once its fields
//!   are complete, the request is built (`Fields::request`, the same checks as HTTP/2) and
//!   answered into an [`Exchange`], exactly as `conn::h2` does (the 421 rule with the SNI
//!   name of the handshake, `trusted_proxies`, a pause for a password verification). A body
//!   the client goes on sending is not read: the stream is stopped with H3_NO_ERROR once
//!   the response is complete (RFC 9114 §4.1).
//! * **Responses.** The head the pipeline answered with becomes one HEADERS frame: its
//!   status and the fields whose spans it recorded as it was rendered
//!   (`http::response::FieldSpans`; connection-specific fields are not recorded), names
//!   lowercased, QPACK with the static table. Body bytes are copied, [`CHUNK`] at a time, into
//!   a DATA frame (mapped files with the SIGBUS-safe copy, fd-backed files with `pread`,
//!   multipart framing from the exchange), which is handed to the QUIC stream without a
//!   further copy (`write_chunks`; the HEADERS frame goes in the same buffer as the first
//!   DATA frame); what the stream does not take (flow control, the
//!   connection's send window) waits, one chunk per stream, until it is writable again.
//!   Rate limits (`limit_rate`, throttles) hold a stream back until the time they give.
//!   RFC 9218: the urgency of the `priority` field or of a PRIORITY_UPDATE orders the
//!   streams that write (the most urgent take the connection's room first) and becomes the
//!   QUIC stream's priority; streams of one urgency take turns (incremental or not).
//! * **Defences** (as `conn::h2`'s): a request the client cancels (STOP_SENDING or
//!   RESET_STREAM) stops the rest of its stream, so that QUIC frees it and gives its place
//!   under `max_streams` back; the budgets and deadlines of [`Guard`] (`quic::guard`):
//!   `[http3] reset_budget` cancellations before completion, refilled by completed
//!   responses, then H3_EXCESSIVE_LOAD (Rapid Reset); `[http3] flood_budget` frames and
//!   stream events that do no work (the `h3` readers count them), the same way; responses
//!   that wait with none of their bytes taken for `[http] send_timeout`, or that are taken
//!   slower than `[http] min_send_rate` once they have run that long, close the connection.
//! * **Ends.** A response is logged (`HTTP/3.0`) and counted when its last frame is handed
//!   to QUIC; a stream the client resets or stops before that, or a connection lost, is
//!   accounted as aborted (499 if nothing was sent). GOAWAY (graceful stop, upgrade) lets
//!   the streams in flight finish; the connection closes once it has none and the client
//!   has acknowledged every response (closing sooner would discard what is in flight).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn_proto::{Connection, Dir, StreamEvent, StreamId, VarInt, WriteError};

use super::guard::{Guard, Stall};
use crate::ctx::Ctx;
use crate::h3::{
    data_frame_header, data_frame_header_len, Code, Config, ConnError, Error, Event, RequestStream, Session, UniEvent,
};
use crate::http::fields::Fields;
use crate::http::priority::Priority;
use crate::http::request::{Limits, Reject};
use crate::http::response::{FieldSpans, Span};
use crate::log::{RequestLine, HTTP3};
use crate::serve::{self, Exchange, CLIENT_CLOSED};

/// The most body bytes one DATA frame carries: streams take turns at this granularity, and
/// each stream keeps at most one such frame waiting for the QUIC stream to take it.
const CHUNK: usize = 32 * 1024;
/// Bytes read from a stream at a time.
const READ_MAX: usize = 16 * 1024;
/// Request readers and field lists a connection keeps for reuse (see `H3Conn::spare_readers`).
const SPARE: usize = 2;
/// How long a connection stays without a request in flight before it drops the buffers it
/// keeps for reuse (its spare readers and field lists, its scratch lists), as an HTTP/2
/// connection does (`conn::h2`'s `SHED_AFTER`): not at every gap between two requests, which
/// would allocate them again for each.
const SHED_AFTER: Duration = Duration::from_millis(250);
/// How long responses held back behind a full connection window (see [`H3Conn::send`]) wait
/// at most before they are tried again when no event of the connection comes first.
const HELD_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// One request stream.
enum Req {
    /// Opened, nothing read yet: its reader is made (or reused) when its bytes are read.
    Opened,
    /// Its request is being read.
    Reading(Box<RequestStream>),
    /// Its request waits for a password verification (answered again on resume), and
    /// whether the client's side of the stream is still open.
    Paused(Box<(Fields, bool)>),
    /// Its response is being sent.
    Sending(Box<Sending>),
}

/// A response being sent: its exchange (whose head became HEADERS; `ex.head` then holds
/// the multipart framing), and the frame bytes the QUIC stream has not taken yet.
struct Sending {
    ex: Exchange,
    /// Its HEADERS frame until it is handed on with the first DATA frame behind it, in one
    /// buffer (one allocation and one `write_chunks` where a small response took two).
    first: Vec<u8>,
    pending: Bytes,
    /// It is in [`H3Conn::writable`].
    queued: bool,
    /// Its RFC 9218 urgency (3 without a signal), and whether QUIC has it (as priority
    /// `3 - urgency`).
    urgency: u8,
    urgency_set: bool,
    /// The client's request side is still open (its body, if any, is not read): stopped
    /// once the response is complete.
    reading: bool,
}

impl Sending {
    /// Bytes of the current part left: framing, then body.
    fn left(&self) -> u64 {
        (self.ex.head.len() - self.ex.head_pos) as u64 + self.ex.body.remaining()
    }
}

/// The HTTP/3 state of a QUIC connection.
pub(super) struct H3Conn {
    session: Session,
    /// Our control stream, once open, and its bytes not yet taken.
    control: Option<StreamId>,
    control_out: Vec<u8>,
    /// The client's unidirectional streams still read (control, QPACK).
    uni: Vec<StreamId>,
    reqs: BTreeMap<u64, Req>,
    /// Streams with data to read.
    readable: Vec<StreamId>,
    /// Responses that may be able to send (new, or reported writable again), and those a
    /// rate limit held back (tried again on every turn).
    writable: Vec<u64>,
    throttled: Vec<u64>,
    /// Paused requests to answer again.
    resumed: Vec<u64>,
    /// Scratch of [`H3Conn::send`] (kept: no allocation per turn): the streams to try in
    /// order of urgency, and those done.
    order: Vec<(u8, u64)>,
    done: Vec<u64>,
    /// Readers of requests whose heads were read, and fields of requests answered, kept for
    /// the next requests (at most [`SPARE`] each): their buffers, not new ones each time.
    // Boxed: they move in and out of `Req::Reading` as they are, with no allocation.
    #[allow(clippy::vec_box)]
    spare_readers: Vec<Box<RequestStream>>,
    spare_fields: Vec<Fields>,
    /// Scratch of [`H3Conn::respond`] (kept, shed when idle), as HTTP/2 keeps it: the spans
    /// that record where a head's fields are (lent to each exchange until its HEADERS are
    /// encoded), the fields' names lowercased, and for each field its name's range in them
    /// and its span in the head.
    head_fields: FieldSpans,
    head_names: Vec<u8>,
    head_spans: Vec<(usize, usize, Span)>,
    /// The socket, the address the client's datagrams came to (QUIC's: right where the
    /// socket is bound to a wildcard address; both for `Exchange::local_ip`), the client, and
    /// the SNI name of the handshake.
    fd: RawFd,
    local: Option<IpAddr>,
    peer: IpAddr,
    sni: Option<String>,
    /// GOAWAY is to be sent (or was: `session.goaway_sent`).
    stopping: bool,
    /// The highest request stream ID seen, for GOAWAY.
    last_request: Option<u64>,
    /// A rate limit lets a stream send more at this time.
    pub(super) wake: Option<Instant>,
    /// The connection is closed: nothing more is done.
    closed: bool,
    /// The RFC 9218 urgency of requests not answered yet (their `priority` field, or a
    /// PRIORITY_UPDATE for an open stream): at most one per request in flight.
    urgency: BTreeMap<u64, u8>,
    /// Responses handed to QUIC whole whose streams the client has not acknowledged yet: a
    /// graceful close waits for them (closing discards what is unacknowledged).
    unacked: usize,
    /// Since when no request has been in flight, and whether the buffers kept for reuse are
    /// dropped (see [`SHED_AFTER`]).
    idle_since: Option<Instant>,
    shed: bool,
    guard: Guard,
}

/// A QUIC stream ID as HTTP/3 numbers it.
fn sid(id: StreamId) -> u64 {
    VarInt::from(id).into_inner()
}

impl H3Conn {
    pub(super) fn new(fd: RawFd, peer: IpAddr, cx: &Ctx) -> H3Conn {
        H3Conn {
            session: Session::new(Config::default()),
            control: None,
            control_out: Vec::new(),
            uni: Vec::new(),
            reqs: BTreeMap::new(),
            readable: Vec::new(),
            writable: Vec::new(),
            throttled: Vec::new(),
            resumed: Vec::new(),
            order: Vec::new(),
            done: Vec::new(),
            spare_readers: Vec::new(),
            spare_fields: Vec::new(),
            head_fields: FieldSpans::default(),
            head_names: Vec::new(),
            head_spans: Vec::new(),
            fd,
            local: None,
            peer,
            sni: None,
            stopping: false,
            last_request: None,
            wake: None,
            closed: false,
            unacked: 0,
            urgency: BTreeMap::new(),
            idle_since: None,
            shed: false,
            guard: Guard::new(cx.cfg.http3.reset_budget, cx.cfg.http3.flood_budget),
        }
    }

    /// The handshake completed: the SNI name is known; our control stream opens with
    /// SETTINGS (and GOAWAY, when the server is already stopping).
    pub(super) fn start(&mut self, conn: &mut Connection, stopping: bool) {
        if let Some(hd) = conn.crypto_session().handshake_data() {
            if let Ok(hd) = hd.downcast::<quinn_proto::crypto::rustls::HandshakeData>() {
                self.sni = hd.server_name;
            }
        }
        self.local = conn.local_ip();
        self.control = conn.streams().open(Dir::Uni);
        self.session.control_stream_preamble(&mut self.control_out);
        if stopping {
            self.stopping = true;
        }
    }

    /// A stream event: new streams are taken in; readable ones are read in [`H3Conn::pump`].
    pub(super) fn on_stream(&mut self, conn: &mut Connection, ev: StreamEvent, cx: &mut Ctx) {
        match ev {
            StreamEvent::Opened { dir } => {
                while let Some(id) = conn.streams().accept(dir) {
                    match dir {
                        Dir::Uni => self.uni.push(id),
                        Dir::Bi => {
                            let n = sid(id);
                            self.last_request = Some(self.last_request.map_or(n, |l| l.max(n)));
                            if !self.session.accepts(n) {
                                // After our GOAWAY: refused unprocessed (RFC 9114 §5.2).
                                let code = VarInt::from_u32(Code::RequestRejected as u32);
                                let _ = conn.send_stream(id).reset(code);
                                let _ = conn.recv_stream(id).stop(code);
                                continue;
                            }
                            self.reqs.insert(n, Req::Opened);
                        }
                    }
                    self.readable.push(id);
                }
            }
            StreamEvent::Readable { id } => self.readable.push(id),
            StreamEvent::Stopped { id, error_code } => {
                // The client wants no more of this response.
                self.urgency.remove(&sid(id));
                if let Some(req) = self.reqs.remove(&sid(id)) {
                    abandon(cx, req);
                    self.guard.cancelled();
                }
                let _ = conn.send_stream(id).reset(error_code);
                // Nor is the rest of the request read: without this, a request side still
                // open (or reset by the client, but not read) would keep the stream, and its
                // place under `max_streams`, for the connection's life.
                let _ = conn.recv_stream(id).stop(VarInt::from_u32(Code::RequestCancelled as u32));
            }
            StreamEvent::Finished { id } if id.dir() == Dir::Bi => self.unacked = self.unacked.saturating_sub(1),
            StreamEvent::Writable { id } => {
                let n = sid(id);
                if let Some(Req::Sending(s)) = self.reqs.get_mut(&n) {
                    if !s.queued {
                        s.queued = true;
                        self.writable.push(n);
                    }
                }
            }
            StreamEvent::Finished { .. } | StreamEvent::Available { .. } => {}
        }
    }

    /// The connection is gone (closed, lost, timed out): every request in flight is
    /// accounted as aborted.
    pub(super) fn lost(&mut self, cx: &mut Ctx) {
        self.closed = true;
        // Nothing is sent or shed any more: a wake-up left set would come due, find nothing
        // to do (`pump` returns at once), and be set again for the same past instant, for
        // ever, by the endpoint's timer loop (`Quic::on_timer`).
        self.wake = None;
        self.urgency.clear();
        for (_, req) in std::mem::take(&mut self.reqs) {
            abandon(cx, req);
        }
    }

    /// Request `stream`'s verification is done: it is answered again on the next pump.
    pub(super) fn resume(&mut self, stream: u64) {
        self.resumed.push(stream);
    }

    /// Graceful stop: GOAWAY with the first request stream not processed; the connection
    /// closes once the requests before it are done.
    pub(super) fn go_away(&mut self) {
        self.stopping = true;
    }

    /// Nothing left to do: stopping, no request in flight, every response acknowledged.
    pub(super) fn finished(&self) -> bool {
        self.stopping && self.reqs.is_empty() && self.control_out.is_empty() && self.unacked == 0
    }

    /// Reads what arrived, answers complete requests, writes what the streams take.
    /// Returns the verification jobs requests now wait for, with their streams.
    pub(super) fn pump(&mut self, conn: &mut Connection, cx: &mut Ctx) -> Vec<(u64, u64)> {
        let mut jobs = Vec::new();
        if self.closed {
            return jobs;
        }
        if self.stopping && self.session.goaway_sent().is_none() && self.control.is_some() {
            // The first request stream not processed: after the last one seen.
            let next = self.last_request.map_or(0, |l| l + 4);
            self.session.goaway(next, &mut self.control_out);
        }
        if let Err(e) = self.read(conn, cx, &mut jobs) {
            self.close(conn, cx, e);
            return jobs;
        }
        if self.guard.spent() {
            cx.counters.http3.closed_reset_budget += 1;
            self.close(conn, cx, ConnError { code: Code::ExcessiveLoad, why: "too many requests cancelled" });
            return jobs;
        }
        for n in std::mem::take(&mut self.resumed) {
            if let Some(Req::Paused(p)) = self.reqs.remove(&n) {
                let (fields, reading) = *p;
                self.answer(cx, n, fields, reading, &mut jobs);
            }
        }
        self.write_control(conn);
        let moved = self.send(conn, cx);
        let waiting = self.reqs.values().any(|r| matches!(r, Req::Sending(_)));
        self.deadlines(conn, cx, waiting, moved);
        self.shed_if_idle(cx.clock.now);
        jobs
    }

    /// The sending deadlines at the end of a turn (`quic::guard`): `[http] send_timeout`
    /// with responses waiting and none of their bytes taken, then `[http] min_send_rate`.
    fn deadlines(&mut self, conn: &mut Connection, cx: &mut Ctx, waiting: bool, moved: bool) {
        let now = cx.clock.now;
        let (timeout, min_rate) = (cx.cfg.send_timeout, cx.cfg.min_send_rate);
        let stall = self.guard.sent(waiting, moved, now, timeout);
        let rate = match stall {
            Stall::Expired => Stall::No,
            _ => {
                let reqs = &self.reqs;
                self.guard.rate(waiting, now, timeout, min_rate, |min| paced_floor(reqs, min))
            }
        };
        let why = match (stall, rate) {
            (Stall::Expired, _) => {
                cx.counters.http3.closed_send_timeout += 1;
                "no progress for send_timeout"
            }
            (_, Stall::Expired) => {
                cx.counters.http3.closed_min_send_rate += 1;
                "below min_send_rate"
            }
            (a, b) => {
                for s in [a, b] {
                    if let Stall::Until(t) = s {
                        self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
                    }
                }
                return;
            }
        };
        self.close(conn, cx, ConnError { code: Code::NoError, why });
    }

    /// Drops the buffers kept for reuse once no request has been in flight for
    /// [`SHED_AFTER`] (until then, a wake-up is set for it): an idle connection holds only
    /// its state.
    fn shed_if_idle(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        if !self.reqs.is_empty() {
            self.idle_since = None;
            self.shed = false;
            return;
        }
        if self.shed {
            return;
        }
        let at = *self.idle_since.get_or_insert(now) + SHED_AFTER;
        if now < at {
            self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
            return;
        }
        self.shed = true;
        self.spare_readers = Vec::new();
        self.spare_fields = Vec::new();
        self.head_fields = FieldSpans::default();
        self.head_names = Vec::new();
        self.head_spans = Vec::new();
        // Empty by now but for stale entries, which are kept (an empty one frees its room).
        for list in [&mut self.writable, &mut self.throttled, &mut self.resumed, &mut self.done] {
            list.shrink_to_fit();
        }
        self.readable.shrink_to_fit();
        self.order.shrink_to_fit();
        self.control_out.shrink_to_fit();
        self.session.shed();
    }

    /// The connection fails with `e` (CONNECTION_CLOSE with its code).
    fn close(&mut self, conn: &mut Connection, cx: &mut Ctx, e: ConnError) {
        conn.close(cx.clock.now, VarInt::from_u32(e.code as u32), Bytes::from_static(e.why.as_bytes()));
        self.lost(cx);
    }

    /// Writes what our control stream has pending.
    fn write_control(&mut self, conn: &mut Connection) {
        let Some(id) = self.control else { return };
        if self.control_out.is_empty() {
            return;
        }
        if let Ok(n) = conn.send_stream(id).write(&self.control_out) {
            self.control_out.drain(..n);
        }
    }

    /// Reads the readable streams.
    fn read(&mut self, conn: &mut Connection, cx: &mut Ctx, jobs: &mut Vec<(u64, u64)>) -> Result<(), ConnError> {
        let mut ids = std::mem::take(&mut self.readable);
        ids.sort_unstable();
        ids.dedup();
        for &id in &ids {
            if id.dir() == Dir::Uni {
                if self.uni.contains(&id) {
                    let r = self.read_uni(conn, id);
                    self.guard.idle(self.session.take_idle());
                    r?;
                }
            } else {
                self.read_request(conn, cx, id, jobs)?;
            }
            if self.guard.flooded() {
                cx.counters.http3.closed_flood_budget += 1;
                return Err(ConnError { code: Code::ExcessiveLoad, why: "too many frames that do no work" });
            }
        }
        // The vector back, for its room (nothing is added to `readable` meanwhile).
        ids.clear();
        self.readable = ids;
        Ok(())
    }

    /// Reads one of the client's unidirectional streams into the session.
    fn read_uni(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), ConnError> {
        let n = sid(id);
        let mut recv = conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else { return Ok(()) };
        let mut ignore = false;
        let mut result = Ok(());
        loop {
            match chunks.next(READ_MAX) {
                Ok(Some(chunk)) => {
                    let mut buf = &chunk.bytes[..];
                    while !buf.is_empty() && !ignore {
                        match self.session.on_uni_stream_data(n, buf, false) {
                            Ok((k, ev)) => {
                                buf = &buf[k.min(buf.len())..];
                                match ev {
                                    Some(UniEvent::Ignore) => ignore = true,
                                    Some(UniEvent::Priority { stream, priority }) => {
                                        // For a request in flight; others are ignored.
                                        match self.reqs.get_mut(&stream) {
                                            Some(Req::Sending(s)) => {
                                                s.urgency = priority.urgency;
                                                s.urgency_set = false;
                                            }
                                            Some(_) => {
                                                self.urgency.insert(stream, priority.urgency);
                                            }
                                            None => {}
                                        }
                                    }
                                    // The client's GOAWAY needs nothing: it opens no more
                                    // streams.
                                    Some(UniEvent::Settings | UniEvent::GoAway(_)) => {}
                                    None => break,
                                }
                            }
                            Err(e) => {
                                result = Err(e);
                                break;
                            }
                        }
                    }
                    if ignore || result.is_err() {
                        break;
                    }
                }
                Ok(None) => {
                    result = self.session.on_uni_stream_data(n, &[], true).map(|_| ());
                    self.uni.retain(|&u| u != id);
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(quinn_proto::ReadError::Reset(_)) => {
                    result = self.session.on_uni_stream_reset(n);
                    self.uni.retain(|&u| u != id);
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        if ignore {
            self.uni.retain(|&u| u != id);
            let _ = conn.recv_stream(id).stop(VarInt::from_u32(Code::StreamCreationError as u32));
        }
        result
    }

    /// Reads a request stream; a complete request is answered.
    fn read_request(
        &mut self,
        conn: &mut Connection,
        cx: &mut Ctx,
        id: StreamId,
        jobs: &mut Vec<(u64, u64)>,
    ) -> Result<(), ConnError> {
        let n = sid(id);
        match self.reqs.get_mut(&n) {
            Some(Req::Reading(_)) => {}
            Some(req @ Req::Opened) => {
                let r = match self.spare_readers.pop() {
                    Some(mut r) => {
                        r.reuse(n, self.spare_fields.pop().unwrap_or_default());
                        r
                    }
                    None => Box::new(self.session.request_stream(n)),
                };
                *req = Req::Reading(r);
            }
            // A response is being sent (the request body is not read) or the stream is
            // gone: a reset is noticed by the send side.
            _ => return Ok(()),
        }
        let mut head: Option<Result<Fields, Reject>> = None;
        let mut stream_error: Option<u32> = None;
        let mut reset = false;
        let mut ended = false;
        let idle;
        {
            let Some(Req::Reading(r)) = self.reqs.get_mut(&n) else { return Ok(()) };
            let mut recv = conn.recv_stream(id);
            let Ok(mut chunks) = recv.read(true) else { return Ok(()) };
            'chunks: loop {
                let (bytes, fin) = match chunks.next(READ_MAX) {
                    Ok(Some(chunk)) => (chunk.bytes, false),
                    Ok(None) => (Bytes::new(), true),
                    Err(quinn_proto::ReadError::Blocked) => break,
                    Err(quinn_proto::ReadError::Reset(_)) => {
                        reset = true;
                        break;
                    }
                };
                let mut buf = &bytes[..];
                loop {
                    match r.recv(buf, fin) {
                        Ok((k, ev)) => {
                            buf = &buf[k.min(buf.len())..];
                            match ev {
                                // The rest of what arrived is read too (a body is
                                // counted and dropped), to see whether the request ended.
                                Some(Event::Headers) => head = Some(Ok(r.take_fields())),
                                Some(Event::HeadersTooLarge) => {
                                    head = Some(Err(Reject { status: 431, why: "header section too large" }))
                                }
                                Some(Event::End) => ended = true,
                                Some(Event::Data(_)) => {}
                                None => break,
                            }
                        }
                        Err(Error::Stream(e)) => {
                            stream_error = Some(e.code as u32);
                            break 'chunks;
                        }
                        Err(Error::Conn(e)) => {
                            let _ = chunks.finalize();
                            return Err(e);
                        }
                    }
                    if buf.is_empty() {
                        break;
                    }
                }
                if fin {
                    break;
                }
            }
            let _ = chunks.finalize();
            idle = r.take_idle();
        }
        // Frames that did no work, and a request answered with a stream reset (as HTTP/2
        // counts a frame answered with RST_STREAM).
        self.guard.idle(idle + u32::from(stream_error.is_some()));
        if reset {
            // The request ended before its head was complete: so does the response
            // (RFC 9114 §4.1.2), which frees the stream.
            self.reqs.remove(&n);
            self.urgency.remove(&n);
            self.guard.cancelled();
            let _ = conn.send_stream(id).reset(VarInt::from_u32(Code::RequestIncomplete as u32));
            return Ok(());
        }
        if let Some(code) = stream_error {
            self.reqs.remove(&n);
            self.urgency.remove(&n);
            let code = VarInt::from_u32(code);
            let _ = conn.send_stream(id).reset(code);
            let _ = conn.recv_stream(id).stop(code);
            return Ok(());
        }
        if head.is_some() {
            if let Some(Req::Reading(r)) = self.reqs.remove(&n) {
                if self.spare_readers.len() < SPARE {
                    self.spare_readers.push(r);
                }
            }
        }
        match head {
            Some(Ok(fields)) => self.answer(cx, n, fields, !ended, jobs),
            Some(Err(rej)) => self.reject(cx, n, rej, !ended),
            None => {}
        }
        Ok(())
    }

    /// A new exchange for a request of this connection.
    fn exchange(&mut self, cx: &mut Ctx) -> Exchange {
        // `ex.tls` stays None: quinn-proto does not tell the suite, and the access log's TLS
        // fields are for TLS over TCP.
        let mut ex = Exchange::new(self.fd, self.peer, cx.clock.now);
        ex.local = self.local;
        ex.take_head(cx);
        ex.fields = std::mem::take(&mut self.head_fields);
        ex.fields.record();
        ex
    }

    /// Answers a request whose head is over our limit with 431.
    fn reject(&mut self, cx: &mut Ctx, n: u64, rej: Reject, reading: bool) {
        let mut ex = self.exchange(cx);
        let status = ex.simple_response_raw(cx, rej.status, 1, false, None);
        ex.begin_log(cx, status, RequestLine::Raw(b""), None, None);
        self.respond(cx, n, ex, status, reading);
    }

    /// Answers one request through the shared pipeline into its own exchange, as HTTP/2
    /// does (`conn::h2`), and queues its HEADERS.
    fn answer(&mut self, cx: &mut Ctx, n: u64, fields: Fields, reading: bool, jobs: &mut Vec<(u64, u64)>) {
        let limits = Limits { max_uri_bytes: cx.cfg.max_uri_bytes, ..cx.limits };
        let mut ex = self.exchange(cx);
        // A PRIORITY_UPDATE that came first wins (RFC 9218 §7.1).
        if let std::collections::btree_map::Entry::Vacant(e) = self.urgency.entry(n) {
            let mut prio: Option<Priority> = None;
            for (_, v) in fields.iter().filter(|(name, _)| *name == b"priority") {
                prio.get_or_insert_with(Priority::default).apply(v);
            }
            if let Some(p) = prio {
                e.insert(p.urgency);
            }
        }
        let status = match fields.request(&limits) {
            Ok(req) => {
                if !cx.cfg.trusted_proxies.is_empty() {
                    let proxies = &cx.cfg.trusted_proxies;
                    ex.client = crate::http::forwarded::client(self.peer, proxies, req.forwarded, req.x_forwarded_for);
                }
                let early = serve::early(cx, &req, false, self.sni.as_deref());
                let status = serve::answer(&mut ex, cx, &req, early);
                if let Some(job) = ex.waiting.take() {
                    // Answered again when the verification is done (`resume`).
                    ex.end_transfer(cx);
                    jobs.push((job, n));
                    self.reqs.insert(n, Req::Paused(Box::new((fields, reading))));
                    return;
                }
                ex.log_request(cx, &req, status, HTTP3);
                status
            }
            Err(rej) => {
                let status = ex.simple_response_raw(cx, rej.status, 1, false, None);
                ex.begin_log(cx, status, RequestLine::Raw(b""), None, None);
                status
            }
        };
        if self.spare_fields.len() < SPARE {
            self.spare_fields.push(fields);
        }
        self.respond(cx, n, ex, status, reading);
    }

    /// Queues the response of stream `n`: its HEADERS frame, then its body.
    fn respond(&mut self, cx: &mut Ctx, n: u64, mut ex: Exchange, status: u16, reading: bool) {
        ex.start(status, cx.clock.now);
        let mut out = Vec::with_capacity(ex.head.len());
        // The status and fields the head recorded as it was rendered (connection-specific
        // fields are not), names lowercased.
        let head = &ex.head;
        let (names, spans) = (&mut self.head_names, &mut self.head_spans);
        names.clear();
        spans.clear();
        for f in ex.fields.spans(head) {
            let k = names.len();
            names.extend(f.name(head).iter().map(u8::to_ascii_lowercase));
            spans.push((k, names.len(), f));
        }
        let fields = spans.iter().map(|&(a, b, f)| (&names[a..b], f.value(head)));
        if self.session.encode_response_head(ex.fields.status(), fields, &mut out).is_err() {
            // Larger than the client accepts (RFC 9114 §4.2.2): a bare 500 instead.
            out.clear();
            let _ = self.session.encode_response_head(500, std::iter::empty(), &mut out);
            ex.status = 500;
            ex.release_body(cx);
            ex.parts.clear();
            ex.head.clear();
            ex.head_pos = 0;
        }
        self.head_fields = std::mem::take(&mut ex.fields);
        // From now on `head` holds multipart framing only, sent as DATA.
        ex.head_pos = ex.head.len();
        if ex.body.remaining() == 0 && !ex.parts.is_empty() {
            ex.next_part(cx);
        }
        let urgency = self.urgency.remove(&n).unwrap_or(Priority::default().urgency);
        // The default urgency is quinn-proto's default priority (0): nothing to set.
        let urgency_set = urgency == Priority::default().urgency;
        let s = Sending { ex, first: out, pending: Bytes::new(), queued: true, urgency, urgency_set, reading };
        self.reqs.insert(n, Req::Sending(Box::new(s)));
        self.writable.push(n);
    }

    /// Writes the responses: each stream's pending frame, then new DATA frames while the
    /// stream takes them; a finished response ends its stream and is accounted. True if QUIC
    /// took bytes of any.
    fn send(&mut self, conn: &mut Connection, cx: &mut Ctx) -> bool {
        let mut moved = false;
        self.wake = None;
        let mut done = std::mem::take(&mut self.done);
        // Only the streams that may make progress (new, writable again, or held by a rate
        // limit), the most urgent first (RFC 9218), so that they take the room the
        // connection has. A stream QUIC refused waits for its Writable event.
        let mut order = std::mem::take(&mut self.order);
        for n in self.writable.drain(..).chain(self.throttled.drain(..)) {
            if let Some(Req::Sending(s)) = self.reqs.get(&n) {
                order.push((s.urgency, n));
            }
        }
        order.sort_unstable();
        order.dedup();
        // Two refusals in a row: the connection's room (the client's MAX_DATA, our send
        // window) is used up. The streams not tried yet stay in our queue rather than being
        // refused too: quinn-proto hands back a Writable event for every stream it refused
        // each time the room grows (each ACK), and with hundreds of responses waiting that
        // made the cost per request grow with the streams in flight (4 KiB with 1,000
        // streams: 22 against 10 us of server CPU per request with 100). One refused stream
        // brings its Writable event, and the queue is tried again on every turn of the
        // connection; since a refusal may also be one stream's own window, the held ones
        // are tried again after `HELD_RETRY` whatever happens.
        let mut refused = 0;
        let mut taken = 0;
        let mut next = order.drain(..);
        while let Some((_, n)) = next.next() {
            if refused == 2 {
                for n in std::iter::once(n).chain(next.by_ref().map(|(_, n)| n)) {
                    if let Some(Req::Sending(s)) = self.reqs.get_mut(&n) {
                        s.queued = true;
                        self.writable.push(n);
                    }
                }
                let t = cx.clock.now + HELD_RETRY;
                self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
                break;
            }
            let Some(Req::Sending(s)) = self.reqs.get_mut(&n) else { continue };
            let Ok(v) = VarInt::from_u64(n) else { continue };
            let id = StreamId::from(v);
            s.queued = false;
            let before = (s.pending.len(), s.left(), s.first.len());
            let progress = send_stream(conn, cx, id, s, &mut self.wake, &mut taken);
            moved |= !matches!(progress, Progress::Blocked) || before != (s.pending.len(), s.left(), s.first.len());
            refused = if matches!(progress, Progress::Blocked) { refused + 1 } else { 0 };
            match progress {
                Progress::Blocked => {}
                Progress::Throttled => self.throttled.push(n),
                Progress::Done => {
                    self.unacked += 1;
                    self.guard.completed();
                    s.ex.account(cx);
                    cx.counters.http3.requests += 1;
                    if s.reading {
                        let _ = conn.recv_stream(id).stop(VarInt::from_u32(Code::NoError as u32));
                    }
                    done.push(n);
                }
                Progress::Failed(code) => {
                    let _ = conn.send_stream(id).reset(VarInt::from_u32(code));
                    done.push(n);
                    s.ex.account_aborted(cx, true);
                    cx.counters.http3.requests += 1;
                }
            }
        }
        drop(next);
        self.guard.took(taken);
        self.order = order;
        for n in done.drain(..) {
            self.urgency.remove(&n);
            if let Some(Req::Sending(mut s)) = self.reqs.remove(&n) {
                s.ex.end_transfer(cx);
            }
        }
        self.done = done;
        moved
    }
}

/// What sending on a stream came to.
enum Progress {
    /// QUIC takes no more now (flow control, the send window): until a Writable event.
    Blocked,
    /// A rate limit allows no more now: until [`H3Conn::wake`].
    Throttled,
    /// The whole response was handed to QUIC, the stream finished.
    Done,
    /// The stream must be reset with this code (the client stopped it, a file changed).
    Failed(u32),
}

/// Hands the stream's pending frame to QUIC, then cuts new DATA frames while it takes them.
fn send_stream(
    conn: &mut Connection,
    cx: &mut Ctx,
    id: StreamId,
    s: &mut Sending,
    wake: &mut Option<Instant>,
    taken: &mut u64,
) -> Progress {
    if !s.urgency_set {
        // quinn-proto sends the higher priority first, and streams of one priority in turn.
        s.urgency_set = true;
        let _ = conn.send_stream(id).set_priority(3 - i32::from(s.urgency.min(7)));
    }
    loop {
        if !s.pending.is_empty() {
            match conn.send_stream(id).write_chunks(std::slice::from_mut(&mut s.pending)) {
                // Part taken: once more, so that QUIC records the stream as blocked (and
                // reports it writable again).
                Ok(w) if !s.pending.is_empty() => {
                    *taken += w.bytes as u64;
                    continue;
                }
                Ok(w) => *taken += w.bytes as u64,
                Err(WriteError::Blocked) => return Progress::Blocked,
                Err(WriteError::Stopped(code)) => return Progress::Failed(code.into_inner() as u32),
                Err(WriteError::ClosedStream) => return Progress::Failed(Code::RequestCancelled as u32),
            }
        }
        if s.left() == 0 && !s.ex.next_part(cx) {
            if !s.first.is_empty() {
                // No body: the HEADERS frame alone.
                s.pending = Bytes::from(std::mem::take(&mut s.first));
                continue;
            }
            return match conn.send_stream(id).finish() {
                Ok(()) => Progress::Done,
                Err(_) => Progress::Failed(Code::RequestCancelled as u32),
            };
        }
        let (cap, t) = s.ex.rate_cap(cx);
        if cap == 0 {
            if !s.first.is_empty() {
                // The HEADERS go now; the body waits for the rate limit.
                s.pending = Bytes::from(std::mem::take(&mut s.first));
                continue;
            }
            if let Some(t) = t {
                *wake = Some(wake.map_or(t, |w| w.min(t)));
            }
            return Progress::Throttled;
        }
        let n = usize::try_from(s.left()).unwrap_or(usize::MAX).min(CHUNK).min(cap);
        // The exact size (the HEADERS first, if not handed on yet): a `Bytes` made of a full
        // vector needs no allocation of its own.
        let mut out = Vec::with_capacity(s.first.len() + data_frame_header_len(n as u64) + n);
        out.extend_from_slice(&s.first);
        s.first = Vec::new();
        data_frame_header(n as u64, &mut out);
        if s.ex.copy_out(cx, &mut out, n).is_err() {
            return Progress::Failed(Code::InternalError as u32);
        }
        s.pending = Bytes::from(out);
    }
}

/// The rate `[http] min_send_rate` holds the responses in flight to: `min`, or half the
/// slowest pace a rate limit allows one of them, if lower (`throttle::floor_rate`, as over
/// TCP: our pacing is not the client's fault).
fn paced_floor(reqs: &BTreeMap<u64, Req>, min: u64) -> u64 {
    let paced = reqs.values().filter_map(|r| match r {
        Req::Sending(s) => s.ex.paced_rate(),
        _ => None,
    });
    crate::access::throttle::floor_rate(min, paced.min().unwrap_or(u64::MAX))
}

/// A request that will not complete: accounted as aborted (its client reset it, or the
/// connection is gone).
fn abandon(cx: &mut Ctx, req: Req) {
    match req {
        Req::Sending(mut s) => {
            // Its HEADERS leave with its first DATA frame (or alone): 499 before that.
            let started = s.first.is_empty();
            s.ex.account_aborted(cx, started);
            cx.counters.http3.requests += 1;
            s.ex.end_transfer(cx);
        }
        Req::Paused(p) => unanswered(cx, &p.0),
        Req::Opened | Req::Reading(_) => {}
    }
}

/// A request read but not answered (paused for a verification when its stream or
/// connection ended): logged and counted 499, as `conn::h2` does.
fn unanswered(cx: &mut Ctx, fields: &Fields) {
    let limits = Limits { max_uri_bytes: cx.cfg.max_uri_bytes, ..cx.limits };
    let Ok(req) = fields.request(&limits) else { return };
    let mut ex = Exchange::new(-1, IpAddr::from([0, 0, 0, 0]), cx.clock.now);
    ex.log_request(cx, &req, CLIENT_CLOSED, HTTP3);
    ex.start(CLIENT_CLOSED, cx.clock.now);
    ex.account_aborted(cx, false);
    cx.counters.http3.requests += 1;
}
