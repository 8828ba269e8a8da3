//! HTTP/2 on a connection: the glue between the sans-IO session (`crate::h2::session`), the
//! connection's transport (plain or TLS, as for HTTP/1.1) and the request pipeline, which is
//! the same one HTTP/1.1 uses.
//!
//! * **Detection.** On a plain listener (with `[http2] h2c`), a connection whose first bytes
//!   are the 24-byte preface speaks HTTP/2 (prior knowledge; `Upgrade: h2c` is not offered).
//!   The check costs the HTTP/1.1 path nothing: it runs only when a head failed to parse,
//!   which `PRI * HTTP/2.0` does (its version). Over TLS, ALPN `h2` decides once the
//!   handshake is done.
//! * **Input.** The connection's read buffer (a larger one, for a whole frame; dropped while
//!   the connection is idle, with the output buffer) feeds
//!   [`Session::recv`]; nothing is read while the output buffer holds more than
//!   [`OUT_HIGH`] bytes (backpressure, as HTTP/1.1 reads nothing while a response is
//!   pending: floods of PING or SETTINGS cost output only as fast as the client reads it).
//! * **Requests.** Each complete request (its body ended, see the session) becomes a
//!   [`Request`] borrowed from its decoded fields and goes through `serve::answer`, the
//!   pipeline every protocol shares, into the stream's own exchange: a head and a body
//!   source. The head becomes HEADERS from its status and the spans of its fields, recorded
//!   as it was rendered (`http::response::FieldSpans`; connection-specific fields are not
//!   recorded), names lowercased; its text is not read back. The body stays a source
//!   (memory, a mapped range, an fd range, multipart parts) pulled from as the windows allow.
//! * **Output.** DATA frames are cut round-robin from the streams with something to send,
//!   at most [`CHUNK`], the peer's SETTINGS_MAX_FRAME_SIZE and both flow-control windows
//!   each (so one large download does not hold up small ones), while less than
//!   [`OUT_HIGH`] is buffered and less than [`SPLICED_HIGH`] waits to be sent from where it
//!   lies (on the page-load workload, 256 KiB rather than 64 KiB per `sendmsg` took the
//!   calls from 1.6 to 0.4 per request and the server CPU per request to 0.69–1.03×); once a stream has an RFC 9218 priority, by urgency first
//!   ([`Conn::h2_produce`], [`Stream::rank`]). Frames go into the session's one output buffer, except, on a
//!   plain connection (h2c), the payloads of mapped files and cached listings: those stay
//!   where they are, recorded as [`Splice`]s between the buffer's bytes, and one `sendmsg`
//!   takes the lot (HEADERS, 9-byte DATA headers, slices of the mappings: many responses,
//!   nothing copied in user space, as HTTP/1.1 sends a head and its mapped body). Over TLS,
//!   which must encrypt the bytes itself, mapped bytes are copied into the buffer
//!   (`sys::copy_mapped`: a page a truncation took away gives EFAULT, not SIGBUS), all of them handed to rustls and flushed in one write. Files above `[cache]
//!   max_file`, which HTTP/1.1 sends with `sendfile`, are fd-backed: on a plain connection
//!   they are spliced too, from a mapping the entry makes on first use
//!   ([`FileEntry::spliceable`], up to 16 MiB); otherwise, and over TLS, their ranges are
//!   read with `pread` straight into the buffer. `sendfile` after each 9-byte DATA header
//!   (with `MSG_MORE`, the socket corked) was measured on the page-load workload at 0.61×
//!   the throughput and 1.44× the server CPU per request of `pread` on loopback, for two
//!   system calls per 16 KiB frame against one `pread` and a share of one `sendmsg`
//!   (BENCHMARKS.md, "HTTP/2"); the mapping saves the `pread`'s copy as well. A stream with no window waits
//!   (costing nothing) until a WINDOW_UPDATE.
//! * **Pauses.** A stream whose credentials are being verified keeps its fields and is
//!   answered again when the connection resumes; the others go on meanwhile.
//! * **Ends.** Each stream's response is logged (protocol `HTTP/2.0`) and counted when its
//!   last frame is queued; a stream the client resets is logged with what was sent. Shutdown
//!   and reload send GOAWAY in two steps (RFC 9113 §6.8): first with 2^31−1 and a PING, then,
//!   once the PING is acknowledged (or after [`GOAWAY_ACK_WAIT`]), with the last stream
//!   opened; streams in flight finish, then the connection closes. A connection that becomes
//!   HTTP/2 once a shutdown has begun (its TLS handshake or h2c preface was on its way) sends
//!   the first GOAWAY right after its SETTINGS.
//! * **Deadlines** (`h2_wait`): `[http2] handshake_timeout` until the session is handshaken,
//!   then `idle_timeout` with no stream open, `send_timeout` with streams open, renewed only
//!   when the session reports progress (never by control frames, nor by the write path). An
//!   expired connection gets a last GOAWAY if the socket takes it (`h2_expire`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Instant;

use super::{is_peer_gone, Conn, Drive, Phase, WriteResult, WRITE_BUDGET};
use crate::ctx::Ctx;
use crate::fs::cache::FileEntry;
use crate::h2::frame::{self, Code, PREFACE};
use crate::h2::session::{self, Event, Field, Session};
use crate::http::fields::Fields;
use crate::http::priority::Priority;
use crate::http::request::Limits;
use crate::http::response::{FieldSpans, Tag};
use crate::log::{RequestLine, HTTP2};
use crate::serve::{self, Body, Exchange, CLIENT_CLOSED};
use crate::sys;

/// Output buffered beyond which no more input is read and no more DATA is cut.
const OUT_HIGH: usize = 64 * 1024;
/// Payload bytes waiting in place (spliced from mappings, plain connections only) beyond
/// which no more DATA is cut: 16 frames of 16 KiB, 32 of the [`IOVECS`] slices of one
/// `sendmsg`.
const SPLICED_HIGH: usize = 256 * 1024;
/// The read buffer: room for two frames of the largest size we accept.
const RBUF: usize = 2 * (frame::HEADER_LEN + frame::MIN_MAX_FRAME_SIZE as usize);
/// Reads (of up to [`RBUF`] each) one drive makes before the other connections get their
/// turn: a client that keeps its socket full of frames that need no answer (WINDOW_UPDATE)
/// would otherwise hold the event loop, since only output counts against the write budget.
const READ_TURNS: usize = 16;
/// The most DATA bytes one frame carries, whatever the peer allows: streams take turns at
/// this granularity.
const CHUNK: usize = 16 * 1024;
/// How long a graceful end waits for the client to acknowledge the PING sent with its first
/// GOAWAY (one round trip, RFC 9113 §6.8) before it sends the second.
const GOAWAY_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// How long an HTTP/2 connection has been idle (no stream open, nothing to write) before
/// it gives up its small buffers (spare field lists, the event list, the head memo; the read
/// and output buffers go back to their pools at once). A client's next requests follow the
/// last response within microseconds (a load generator) to milliseconds (a browser's next
/// burst): shedding at every such gap made each request allocate its field list and event
/// list anew, about 1,000 instructions per request on h2c.
const SHED_AFTER: std::time::Duration = std::time::Duration::from_millis(250);
/// The most boxes of finished streams a connection keeps (about 530 bytes each), until it
/// has been idle for [`SHED_AFTER`].
const SPARE_STREAMS: usize = 128;
/// The most slices one `sendmsg` is given (far below the kernel's `IOV_MAX` of 1024):
/// [`OUT_HIGH`] of 4 KiB responses is about 40.
const IOVECS: usize = 128;

/// A DATA payload sent from where it lies (a cached mapping or listing, kept alive by its
/// entry), right after `session.out[..at]`: on a plain connection nothing is copied. `start`
/// is the offset in the mapping.
struct Splice {
    at: usize,
    entry: Rc<FileEntry>,
    start: u64,
    len: usize,
}

impl Splice {
    /// The payload (`None` only if the entry's body were not the one it was cut from). The
    /// bytes of a mapping only go to the kernel, as `sendmsg` buffers.
    fn bytes(&self) -> Option<&[u8]> {
        self.entry.spliceable()?.get(usize::try_from(self.start).ok()?..)?.get(..self.len)
    }
}

/// The last response head this connection converted without changing the HPACK encoder's
/// state, and the block it became ([`Session::encoder_state`]): while the state stays the
/// same, the same head becomes the same bytes, which are copied instead of converted and
/// encoded again. A client that fetches one resource again and again (a poller, a load
/// generator; the `Date` field changes once a second) skips about 4,000 instructions per
/// response; any other head costs one comparison.
#[derive(Default)]
struct HeadMemo {
    head: Vec<u8>,
    block: Vec<u8>,
    state: Option<u64>,
}

/// The HTTP/2 state of a connection (boxed in `Conn`).
pub(super) struct H2 {
    session: Session,
    events: Vec<Event>,
    /// Responses with body bytes still to send, in turn order.
    streams: VecDeque<Box<Stream>>,
    /// Boxes of finished streams, for the next requests ([`H2::spare`]): the boxes
    /// themselves are what is kept, so that a stream moves between this and `streams` as a
    /// pointer.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Stream>>,
    /// `session.out[out_pos..]` is not written yet.
    out_pos: usize,
    /// Payloads sent from where they lie, in order (plain connections only), the bytes of
    /// the first already written, and the bytes of all not yet written.
    splices: VecDeque<Splice>,
    splice_pos: usize,
    spliced: usize,
    /// The transport is plain TCP: payloads may be spliced. Otherwise mapped bytes are
    /// copied (`sys::copy_mapped`).
    plain: bool,
    /// Requests waiting for a verification: their stream and fields.
    paused: Vec<(u32, Fields)>,
    /// Verification jobs not yet handed to the server.
    jobs: Vec<u64>,
    /// The connection was resumed: answer the paused requests again.
    resumed: bool,
    /// Lowercased field names of the head being converted, and where each field's name (in
    /// `names`) and value (in the head) are.
    names: Vec<u8>,
    /// The spans of a head's fields, lent to each stream's exchange while the pipeline
    /// renders its head, and taken back once it is converted.
    head_fields: FieldSpans,
    /// [`Session::progress`] when the deadline was last set, and whether it was the idle one.
    progress: u64,
    idle: bool,
    spans: Vec<[usize; 5]>,
    /// When a graceful end sends its second GOAWAY if its PING is not acknowledged first.
    go_away_by: Option<Instant>,
    /// Since when the connection has been idle, whether its buffers are shed, and when a
    /// wake-up set to shed them is due (at most one is pending).
    idle_since: Option<Instant>,
    shed: bool,
    shed_wake: Option<Instant>,
    memo: HeadMemo,
}

impl H2 {
    pub(super) fn take_jobs(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.jobs)
    }

    /// Bytes queued and not yet written: buffered frames and spliced payloads.
    fn pending(&self) -> usize {
        self.session.out.len() - self.out_pos + self.spliced
    }

    /// More DATA may be cut: under [`OUT_HIGH`] buffered, and under [`SPLICED_HIGH`] waiting
    /// where it lies (those bytes take no memory of ours; more of them per `sendmsg` is
    /// fewer system calls for large files).
    fn room(&self) -> bool {
        self.session.out.len() - self.out_pos < OUT_HIGH && self.spliced < SPLICED_HIGH
    }

    /// Drops the written front of the output buffer (once it is large), so a connection
    /// that never drains completely still holds only what is pending.
    fn compact(&mut self) {
        if self.out_pos < OUT_HIGH {
            return;
        }
        self.session.out.drain(..self.out_pos);
        for sp in &mut self.splices {
            sp.at -= self.out_pos;
        }
        self.out_pos = 0;
    }

    /// The pending output as slices for one `sendmsg`, in order: buffered bytes and spliced
    /// payloads alternate. `None`: a splice lost its bytes (see [`Splice::bytes`]).
    fn gather<'a>(&'a self, iov: &mut [IoSlice<'a>; IOVECS]) -> Option<usize> {
        let out = &self.session.out;
        let mut pos = self.out_pos;
        let mut k = 0;
        for (i, sp) in self.splices.iter().enumerate() {
            if k + 2 > IOVECS {
                return Some(k);
            }
            if sp.at > pos {
                iov[k] = IoSlice::new(&out[pos..sp.at]);
                k += 1;
                pos = sp.at;
            }
            let skip = if i == 0 { self.splice_pos } else { 0 };
            iov[k] = IoSlice::new(sp.bytes()?.get(skip..)?);
            k += 1;
        }
        if pos < out.len() && k < IOVECS {
            iov[k] = IoSlice::new(&out[pos..]);
            k += 1;
        }
        Some(k)
    }

    /// `n` bytes of what [`H2::gather`] gave were written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            match self.splices.front() {
                Some(sp) if self.out_pos < sp.at => {
                    let t = n.min(sp.at - self.out_pos);
                    self.out_pos += t;
                    n -= t;
                }
                Some(sp) => {
                    let t = n.min(sp.len - self.splice_pos);
                    self.splice_pos += t;
                    self.spliced -= t;
                    n -= t;
                    if self.splice_pos == sp.len {
                        self.splices.pop_front();
                        self.splice_pos = 0;
                    }
                }
                None => {
                    self.out_pos += n;
                    n = 0;
                }
            }
        }
    }

    /// Keeps a finished stream's box for the next request (at most [`SPARE_STREAMS`]; never
    /// more than were in flight at once). With 100 streams in flight the allocator's
    /// per-thread cache (7 blocks per size) runs dry, and a malloc and a free cost an h2c
    /// request 230 instructions.
    fn spare(&mut self, s: Box<Stream>) {
        if self.spare.len() < SPARE_STREAMS {
            self.spare.push(s);
        }
    }

    /// For the status page: writing while streams are open or output is pending.
    pub(super) fn state(&self) -> super::ConnState {
        if self.session.active_streams() > 0 || self.pending() > 0 {
            super::ConnState::Writing
        } else {
            super::ConnState::Idle
        }
    }
}

/// One response being sent: its exchange, whose head block has become HEADERS (what is
/// left of `ex.head` is the framing of the current multipart part, sent as DATA).
struct Stream {
    id: u32,
    ex: Exchange,
    /// RFC 9218 parameters, if the client signalled any (see [`Conn::h2_produce`]).
    prio: Option<Priority>,
}

impl Stream {
    /// Where the stream stands in the sending order, lowest first: its urgency; then, of
    /// one urgency, non-incremental streams by identifier before incremental ones, which
    /// take turns (`turn`, their place in the queue). No signal: urgency 3, incremental.
    fn rank(&self, turn: usize) -> (u8, bool, usize) {
        match self.prio {
            Some(Priority { urgency, incremental: false }) => (urgency, false, self.id as usize),
            Some(Priority { urgency, incremental: true }) => (urgency, true, turn),
            None => (Priority::default().urgency, true, turn),
        }
    }

    /// Sent in turns with the others of its urgency (rather than until it is done).
    fn takes_turns(&self) -> bool {
        self.prio.is_none_or(|p| p.incremental)
    }
}

impl Stream {
    /// Bytes of the current part left: framing, then body.
    fn left(&self) -> u64 {
        (self.ex.head.len() - self.ex.head_pos) as u64 + self.ex.body.remaining()
    }

    /// Nothing left to send, in this part or in another.
    fn done(&self) -> bool {
        self.left() == 0 && self.ex.parts.is_empty()
    }
}

/// The earlier of two wake-up times, if any.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What producing DATA came to.
enum Produced {
    /// Frames were queued.
    Some,
    /// Nothing can be sent now; a rate limit allows more at this time, if any.
    Nothing(Option<Instant>),
}

fn limits(cx: &Ctx) -> session::Limits {
    let h = &cx.cfg.http2;
    session::Limits {
        max_concurrent_streams: h.max_concurrent_streams,
        max_header_list_size: h.max_header_list_size,
        max_header_block: h.max_header_block as usize,
        header_table_size: h.header_table_size,
        max_body: cx.cfg.max_body_discard,
        initial_window: h.initial_window_size,
        reset_budget: h.reset_budget,
        flood_budget: h.flood_budget,
    }
}

/// Whether buffered bytes that failed to parse as an HTTP/1.1 head are the HTTP/2 preface
/// on a listener that takes h2c: `Some(true)` switch, `Some(false)` wait for more of it.
pub(super) fn preface(cx: &Ctx, buf: &[u8]) -> Option<bool> {
    if !cx.cfg.http2.enabled || !cx.cfg.http2.h2c {
        return None;
    }
    if buf.len() >= PREFACE.len() {
        return buf.starts_with(PREFACE).then_some(true);
    }
    PREFACE.starts_with(buf).then_some(false)
}

impl Conn {
    /// Makes this an HTTP/2 connection; its unread input (the preface, if it came in clear)
    /// is the session's first input.
    pub(super) fn start_h2(&mut self, cx: &mut Ctx) {
        let mut big = cx.take_h2_rbuf(RBUF);
        if let Some(old) = self.rbuf.take() {
            let n = self.rend - self.rstart;
            big[..n].copy_from_slice(&old[self.rstart..self.rend]);
            self.rend = n;
            self.rstart = 0;
            cx.put_rbuf(old);
        }
        self.rbuf = Some(big);
        self.phase = Phase::Head;
        self.deadline = cx.clock.now + cx.cfg.http2.handshake_timeout;
        #[cfg(feature = "tls")]
        let plain = matches!(self.transport, super::Transport::Plain);
        #[cfg(not(feature = "tls"))]
        let plain = true;
        self.h2 = Some(Box::new(H2 {
            session: Session::new(limits(cx)),
            events: Vec::new(),
            streams: VecDeque::new(),
            spare: Vec::new(),
            out_pos: 0,
            splices: VecDeque::new(),
            splice_pos: 0,
            spliced: 0,
            plain,
            paused: Vec::new(),
            jobs: Vec::new(),
            resumed: false,
            names: Vec::new(),
            head_fields: FieldSpans::default(),
            progress: 0,
            idle: false,
            spans: Vec::new(),
            go_away_by: None,
            idle_since: None,
            shed: false,
            shed_wake: None,
            memo: HeadMemo::default(),
        }));
        // The server began to wind down (`stop_keepalive`) while this connection's TLS
        // handshake or h2c preface was still on its way: it drains like the others (GOAWAY
        // after our SETTINGS, its first requests answered), or it would serve every request
        // its client sends until `shutdown_timeout` cut it mid-response.
        if self.close_after {
            self.h2_go_away();
        }
    }

    /// At shutdown: GOAWAY; streams in flight finish. True: drive the connection now.
    pub(super) fn h2_go_away(&mut self) -> bool {
        match &mut self.h2 {
            Some(h) => {
                h.session.go_away();
                true
            }
            None => false,
        }
    }

    /// The deadline passed (handshake, idle, stalled): a last GOAWAY, written if the socket
    /// takes it now; the connection is closed next either way.
    pub(super) fn h2_expire(&mut self, cx: &mut Ctx) {
        if self.h2.as_mut().is_some_and(|h| h.session.expire()) {
            let mut budget = WRITE_BUDGET;
            let _ = self.h2_flush(cx, &mut budget);
        }
    }

    pub(super) fn h2_resume(&mut self) {
        if let Some(h) = &mut self.h2 {
            h.resumed = true;
        }
    }

    /// Releases what the streams hold (at close).
    pub(super) fn h2_release(&mut self, cx: &mut Ctx) {
        if let Some(mut h) = self.h2.take() {
            for s in h.streams.drain(..) {
                finish_stream(cx, s, false);
            }
            for (_, fields) in h.paused.drain(..) {
                self.h2_unanswered(cx, &fields);
            }
        }
    }

    /// [`Conn::drive`] for an HTTP/2 connection.
    pub(super) fn drive_h2(&mut self, cx: &mut Ctx) -> Drive {
        let mut budget = WRITE_BUDGET;
        let mut sleep = None;
        let mut reads = 0;
        loop {
            let mut progress = false;
            // Input, unless the output is backed up.
            if self.h2.as_ref().is_some_and(|h| h.pending() < OUT_HIGH) {
                match self.h2_read(cx) {
                    Ok(p) => {
                        progress |= p;
                        reads += usize::from(p);
                    }
                    Err(()) => return Drive::Close,
                }
            }
            if self.h2.as_ref().is_some_and(|h| h.resumed) {
                self.h2_answer_paused(cx);
            }
            let drain = self.h2_drain_timer(cx);
            match self.h2_produce(cx) {
                Produced::Some => progress = true,
                Produced::Nothing(t) => sleep = t,
            }
            sleep = earliest(sleep, drain);
            let before = budget;
            match self.h2_flush(cx, &mut budget) {
                // Output was written: the buffer has room for more DATA again.
                WriteResult::Done => progress |= budget != before,
                WriteResult::Blocked => return self.h2_wait(cx, drain),
                WriteResult::Budget => return Drive::Yield,
                WriteResult::Closed | WriteResult::Sleep(_) => return Drive::Close,
            }
            let Some(h) = &self.h2 else { return Drive::Close };
            if h.session.is_closing() {
                // Always through `Linger` (unless the client has closed): what was written
                // may still be on its way, and the client acknowledges what it reads with
                // WINDOW_UPDATE; closing with those unread would reset the connection and
                // destroy the rest of the responses before the client reads them.
                return self.end(cx, true);
            }
            if self.peer_eof {
                return Drive::Close;
            }
            if !progress {
                return self.h2_wait(cx, sleep);
            }
            if reads >= READ_TURNS {
                return Drive::Yield;
            }
        }
    }

    /// A graceful end waits [`GOAWAY_ACK_WAIT`] at most for the acknowledgement of the
    /// PING sent with its first GOAWAY, then sends the second anyway. `Some`: when to look
    /// again.
    fn h2_drain_timer(&mut self, cx: &Ctx) -> Option<Instant> {
        let h = self.h2.as_mut()?;
        if !h.session.awaiting_go_away() {
            return None;
        }
        let t = *h.go_away_by.get_or_insert(cx.clock.now + GOAWAY_ACK_WAIT);
        if cx.clock.now < t {
            return Some(t);
        }
        h.session.finish_go_away();
        None
    }

    /// Nothing more to do now: sets the deadline, hands over a verification job, or waits.
    fn h2_wait(&mut self, cx: &mut Ctx, sleep: Option<Instant>) -> Drive {
        let Some(h) = &mut self.h2 else { return Drive::Close };
        let busy = h.session.active_streams() > 0 || h.pending() > 0;
        // Until the handshake is done its deadline stands. Then, busy: the write-stall
        // deadline, renewed only by progress (a request, body bytes, DATA queued), so a
        // client that never opens its window meets it however often it pings. Idle: the
        // idle deadline, set when the last stream ends and not renewed by control frames;
        // the buffers go, so an idle HTTP/2 connection holds only its session state.
        let progress = h.session.progress();
        if h.session.handshaken() && (progress != h.progress || busy == h.idle) {
            let t = if busy { cx.cfg.send_timeout } else { cx.cfg.http2.idle_timeout };
            self.deadline = cx.clock.now + t;
            h.progress = progress;
            h.idle = !busy;
        }
        let now = cx.clock.now;
        if h.shed_wake.is_some_and(|t| now >= t) {
            h.shed_wake = None;
        }
        let mut sleep = sleep;
        if busy {
            h.idle_since = None;
            h.shed = false;
        } else {
            // The large buffers go back to the pools at once (taking them again is a move):
            // a burst of connections that each go idle shares a few of them.
            if h.session.out.capacity() != 0 {
                cx.put_h2_out(std::mem::take(&mut h.session.out));
                h.out_pos = 0;
            }
            if self.rstart == self.rend {
                if let Some(b) = self.rbuf.take() {
                    cx.put_h2_rbuf(b);
                }
                self.rstart = 0;
                self.rend = 0;
            }
            // The small ones, which would be allocated again, once the connection has stayed
            // idle for SHED_AFTER.
            let at = *h.idle_since.get_or_insert(now) + SHED_AFTER;
            if !h.shed && now >= at {
                h.shed = true;
                h.session.shed();
                h.events = Vec::new();
                h.spare = Vec::new();
                h.memo = HeadMemo::default();
                h.head_fields = FieldSpans::default();
            } else if !h.shed && h.shed_wake.is_none() && h.jobs.is_empty() {
                // (With a job to hand over, the connection is woken when it is done.)
                h.shed_wake = Some(at);
                sleep = earliest(sleep, Some(at));
            }
        }
        if let Some(job) = h.jobs.pop() {
            return Drive::Pause(job);
        }
        match sleep {
            Some(t) => Drive::Sleep(t),
            None => Drive::Wait,
        }
    }

    /// Reads what the transport has and hands it to the session; answers the requests
    /// that completed. `Ok(true)`: something was read.
    fn h2_read(&mut self, cx: &mut Ctx) -> Result<bool, ()> {
        if self.rbuf.is_none() {
            // Not the HTTP/1.1 pool's: a whole frame must fit.
            self.rbuf = Some(cx.take_h2_rbuf(RBUF));
        }
        if let Some(h) = &mut self.h2 {
            if h.session.out.capacity() == 0 {
                h.session.out = cx.take_h2_out();
            }
        }
        let before = self.rend;
        #[cfg(feature = "tls")]
        if let super::Transport::Tls(_) = self.transport {
            self.fill_tls(cx)?;
        } else if self.readable && !self.fill(cx) {
            return Err(());
        }
        #[cfg(not(feature = "tls"))]
        if self.readable && !self.fill(cx) {
            return Err(());
        }
        let got = self.rend != before;
        let Some(rbuf) = self.rbuf.as_mut() else { return Err(()) };
        let Some(h) = &mut self.h2 else { return Err(()) };
        let used = h.session.recv(&rbuf[self.rstart..self.rend], &mut h.events);
        self.rstart += used;
        // Keep the incomplete frame at the front: the buffer always has room for a whole one.
        rbuf.copy_within(self.rstart..self.rend, 0);
        self.rend -= self.rstart;
        self.rstart = 0;
        let mut events = std::mem::take(&mut h.events);
        for ev in events.drain(..) {
            match ev {
                // A stream reset later in the same input is not answered.
                Event::Request { stream, fields } if self.h2.as_ref().is_some_and(|h| h.session.is_open(stream)) => {
                    self.h2_request(cx, stream, fields)
                }
                // Read, but reset before it was answered: 499, as nginx logs it.
                Event::Request { fields, .. } => self.h2_unanswered(cx, &fields),
                Event::Priority { stream } => {
                    let Some(h) = &mut self.h2 else { return Err(()) };
                    let prio = h.session.priority(stream);
                    if let Some(s) = h.streams.iter_mut().find(|s| s.id == stream) {
                        s.prio = prio;
                    }
                }
                Event::Reset { stream } => {
                    let Some(h) = &mut self.h2 else { return Err(()) };
                    if let Some(i) = h.paused.iter().position(|(id, _)| *id == stream) {
                        let (_, fields) = h.paused.remove(i);
                        self.h2_unanswered(cx, &fields);
                    } else if let Some(i) = h.streams.iter().position(|s| s.id == stream) {
                        if let Some(s) = h.streams.remove(i) {
                            h.spare(finish_stream(cx, s, false));
                        }
                    }
                }
            }
        }
        if let Some(h) = &mut self.h2 {
            h.events = events;
        }
        Ok(got)
    }

    fn h2_answer_paused(&mut self, cx: &mut Ctx) {
        let Some(h) = &mut self.h2 else { return };
        h.resumed = false;
        let paused = std::mem::take(&mut h.paused);
        for (id, fields) in paused {
            self.h2_request(cx, id, fields);
        }
    }

    /// A request read but not answered: reset by the client in the same input, or paused for
    /// a password verification when its stream or connection ended. Logged and counted 499,
    /// as nginx does.
    fn h2_unanswered(&self, cx: &mut Ctx, fields: &Fields) {
        let limits = Limits { max_uri_bytes: cx.cfg.max_uri_bytes, ..cx.limits };
        let Ok(req) = fields.request(&limits) else { return };
        let mut ex = Exchange::new(self.sock.as_raw_fd(), self.peer, cx.clock.now);
        if !cx.cfg.trusted_proxies.is_empty() {
            let proxies = &cx.cfg.trusted_proxies;
            ex.client = crate::http::forwarded::client(self.peer, proxies, req.forwarded, req.x_forwarded_for);
        }
        #[cfg(feature = "tls")]
        {
            ex.tls = self.tls_names();
        }
        ex.log_request(cx, &req, CLIENT_CLOSED, HTTP2);
        ex.start(CLIENT_CLOSED, cx.clock.now);
        ex.account_aborted(cx, false);
        cx.counters.http2_requests += 1;
    }

    /// Answers one request through the shared pipeline into its own exchange and queues
    /// its HEADERS; a response with a body joins the streams being sent.
    fn h2_request(&mut self, cx: &mut Ctx, id: u32, fields: Fields) {
        let limits = Limits { max_uri_bytes: cx.cfg.max_uri_bytes, ..cx.limits };
        // An empty list is one the session found over max_header_list_size.
        let built = if fields.list_size() == 0 {
            Err(crate::http::request::Reject { status: 431, why: "header list too large" })
        } else {
            fields.request(&limits)
        };
        // Boxed from the start, so that the stream is never moved (it is about 530 bytes, and
        // was copied five times on its way through the queue: 300 instructions per request
        // on h2c), in the box of a finished stream if there is one (`H2::spare`).
        let fresh = Stream { id, ex: Exchange::new(self.sock.as_raw_fd(), self.peer, cx.clock.now), prio: None };
        let mut s = match self.h2.as_mut().and_then(|h| h.spare.pop()) {
            Some(mut b) => {
                *b = fresh;
                b
            }
            None => Box::new(fresh),
        };
        let ex = &mut s.ex;
        // A head buffer that served a response before (`end_transfer` gives it back), and
        // the connection's spans, to record where the head's fields are.
        ex.take_head(cx);
        if let Some(h) = &mut self.h2 {
            ex.fields = std::mem::take(&mut h.head_fields);
        }
        ex.fields.record();
        #[cfg(feature = "tls")]
        {
            ex.tls = self.tls_names();
        }
        let status = match &built {
            Ok(req) => {
                if !cx.cfg.trusted_proxies.is_empty() {
                    let proxies = &cx.cfg.trusted_proxies;
                    ex.client = crate::http::forwarded::client(self.peer, proxies, req.forwarded, req.x_forwarded_for);
                }
                #[cfg(feature = "tls")]
                let early = serve::early(cx, req, self.is_plain(), self.sni());
                #[cfg(not(feature = "tls"))]
                let early = serve::Early::Pipeline;
                let status = serve::answer(ex, cx, req, early);
                if let Some(job) = ex.waiting.take() {
                    // Answered again when the verification is done (`h2_answer_paused`).
                    ex.end_transfer(cx);
                    if let Some(h) = &mut self.h2 {
                        h.jobs.push(job);
                        h.paused.push((id, fields));
                    }
                    return;
                }
                ex.log_request(cx, req, status, HTTP2);
                status
            }
            Err(rej) => {
                let status = ex.simple_response_raw(cx, rej.status, 1, false, None);
                ex.begin_log(cx, status, RequestLine::Raw(b""), None, None);
                status
            }
        };
        ex.start(status, cx.clock.now);
        // The head block goes out as HEADERS; what `head` holds from now on is multipart
        // framing, sent as DATA.
        ex.head_pos = ex.head.len();
        let Some(h) = &mut self.h2 else { return };
        s.prio = h.session.priority(id);
        h.session.recycle(fields);
        let end = s.done();
        let entry = match &s.ex.body {
            Body::Mapped { entry, .. } | Body::File { entry, .. } => Some(&**entry),
            Body::None | Body::Mem { .. } => None,
        };
        let state = h.session.encoder_state();
        if h.memo.state == Some(state) && h.memo.head == s.ex.head {
            h.session.send_block(id, &h.memo.block, end);
        } else {
            head_to_headers(&s.ex.head, &s.ex.fields, entry, &mut h.names, &mut h.spans, &mut h.session, id, end);
            if h.session.encoder_state() == state {
                h.memo.head.clone_from(&s.ex.head);
                h.memo.block.clear();
                h.memo.block.extend_from_slice(h.session.last_block());
                h.memo.state = Some(state);
            }
        }
        h.head_fields = std::mem::take(&mut s.ex.fields);
        if s.left() == 0 && !end {
            s.ex.next_part(cx);
        }
        if end {
            h.spare(finish_stream(cx, s, true));
        } else {
            h.streams.push_back(s);
        }
    }

    /// Cuts DATA frames from the streams while the windows and the output buffer allow: in
    /// turn, [`CHUNK`] at a time, while no stream has an RFC 9218 priority; otherwise each
    /// frame from the stream of the lowest [`Stream::rank`] that can send, a stream that
    /// takes turns going to the back of the queue after its frame.
    fn h2_produce(&mut self, cx: &mut Ctx) -> Produced {
        let Some(h) = &mut self.h2 else { return Produced::Nothing(None) };
        h.compact();
        let ordered = h.streams.iter().any(|s| s.prio.is_some());
        let mut any = false;
        let mut wake: Option<Instant> = None;
        let mut idle_turns = 0;
        while h.room() && idle_turns < h.streams.len() {
            let at = if ordered {
                match next_by_rank(cx, &mut h.streams, &h.session, &mut wake) {
                    Some(i) => i,
                    None => break,
                }
            } else {
                0
            };
            let next = if ordered { h.streams.remove(at) } else { h.streams.pop_front() };
            let Some(mut s) = next else { break };
            if !h.session.is_open(s.id) {
                h.spare(finish_stream(cx, s, false));
                idle_turns = 0;
                continue;
            }
            let (cap, t) = s.ex.rate_cap(cx);
            let room = h.session.send_window(s.id).min(h.session.max_frame()).min(CHUNK).min(cap);
            if room == 0 {
                if let Some(t) = t {
                    wake = Some(wake.map_or(t, |w| w.min(t)));
                }
                h.streams.push_back(s);
                idle_turns += 1;
                continue;
            }
            idle_turns = 0;
            let n = usize::try_from(s.left()).unwrap_or(usize::MAX).min(room);
            let frame_at = h.session.begin_data();
            let splices = if h.plain { Some((&mut h.splices, &mut h.spliced)) } else { None };
            if emit(cx, &mut s, &mut h.session.out, n, splices).is_err() {
                h.session.out.truncate(frame_at);
                let mut ev = Vec::new();
                h.session.reset(s.id, Code::Internal, &mut ev);
                h.spare(finish_stream(cx, s, false));
                continue;
            }
            let end = s.left() == 0 && !s.ex.next_part(cx);
            h.session.commit_data(frame_at, s.id, n, end);
            if end {
                h.spare(finish_stream(cx, s, true));
            } else if ordered && !s.takes_turns() {
                h.streams.insert(at, s);
            } else {
                h.streams.push_back(s);
            }
            any = true;
        }
        if any {
            Produced::Some
        } else {
            Produced::Nothing(wake)
        }
    }

    /// Writes the session's output.
    fn h2_flush(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        #[cfg(feature = "tls")]
        if !self.h2.as_ref().is_some_and(|h| h.plain) {
            return self.h2_flush_tls(cx, budget);
        }
        self.h2_send(cx, budget)
    }

    /// Writes the output of a TLS connection: all of it handed to rustls (at most
    /// `OUT_LIMIT` at a time), whose records leave in one write each time.
    #[cfg(feature = "tls")]
    fn h2_flush_tls(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        use super::tls_io::Flush;
        use std::io::Write;
        loop {
            let Some(h) = &mut self.h2 else { return WriteResult::Closed };
            if h.out_pos == h.session.out.len() {
                h.session.out.clear();
                h.out_pos = 0;
                return match self.flush_tls(cx, budget) {
                    Flush::Done => WriteResult::Done,
                    Flush::Blocked => WriteResult::Blocked,
                    Flush::Budget => WriteResult::Budget,
                    Flush::Closed => WriteResult::Closed,
                };
            }
            if *budget == 0 {
                return WriteResult::Budget;
            }
            let super::Transport::Tls(t) = &mut self.transport else { return WriteResult::Closed };
            // rustls buffers at most OUT_LIMIT: hand it that much, then flush.
            let took = match t.conn.writer().write(&h.session.out[h.out_pos..]) {
                Ok(k) => k,
                Err(e) => {
                    cx.error(format_args!("tls write to {}: {e}", self.peer));
                    return WriteResult::Closed;
                }
            };
            h.out_pos += took;
            match self.flush_tls(cx, budget) {
                Flush::Done => {}
                Flush::Blocked => return WriteResult::Blocked,
                Flush::Budget => return WriteResult::Budget,
                Flush::Closed => return WriteResult::Closed,
            }
        }
    }

    /// Writes the output of a plain connection: buffered frames and spliced payloads, as
    /// many as [`IOVECS`] slices per `sendmsg`.
    fn h2_send(&mut self, cx: &mut Ctx, budget: &mut usize) -> WriteResult {
        loop {
            let Some(h) = &mut self.h2 else { return WriteResult::Closed };
            if h.pending() == 0 {
                h.session.out.clear();
                h.out_pos = 0;
                return WriteResult::Done;
            }
            if *budget == 0 {
                return WriteResult::Budget;
            }
            if !self.writable {
                return WriteResult::Blocked;
            }
            let mut iov = [IoSlice::new(&[]); IOVECS];
            let Some(k) = h.gather(&mut iov) else { return WriteResult::Closed };
            let sent = sys::sendv(self.sock.as_raw_fd(), &iov[..k]);
            match sent {
                Ok(n) => {
                    h.advance(n);
                    *budget = budget.saturating_sub(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return WriteResult::Blocked;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                    // A mapped file shrank under us: the bytes a DATA header promised are
                    // gone. The first splice not written is the one that faulted.
                    if let Some(sp) = h.splices.front() {
                        cx.cache.invalidate(&sp.entry);
                        cx.errors.log(
                            cx.clock.log_date(),
                            format_args!(
                                "file {:?} changed size while being sent to {}; connection closed",
                                sp.entry.url_path, self.peer
                            ),
                        );
                    }
                    return WriteResult::Closed;
                }
                Err(e) => {
                    if !is_peer_gone(&e) {
                        cx.error(format_args!("write to {}: {e}", self.peer));
                    }
                    return WriteResult::Closed;
                }
            }
        }
    }
}

/// A converted field in [`H2::spans`]: `[PAIR, name start, name end (in `names`), value
/// start, value end (in the head)]`, or `[ENCODED, start, end (in the entry's
/// `h2_fields`), 0, 0]`.
const PAIR: usize = 0;
const ENCODED: usize = 1;

/// The queue position of the stream to cut the next frame from, by [`Stream::rank`], of those
/// that can send now (a stream reset meanwhile first, to be dropped); `None` if none can.
/// The earliest time a rate limit allows more goes into `wake`.
fn next_by_rank(
    cx: &mut Ctx,
    streams: &mut VecDeque<Box<Stream>>,
    session: &Session,
    wake: &mut Option<Instant>,
) -> Option<usize> {
    let mut best: Option<(usize, (u8, bool, usize))> = None;
    for (i, s) in streams.iter_mut().enumerate() {
        if !session.is_open(s.id) {
            return Some(i);
        }
        let (cap, t) = s.ex.rate_cap(cx);
        if cap == 0 || session.send_window(s.id) == 0 {
            if let Some(t) = t {
                *wake = Some(wake.map_or(t, |w| w.min(t)));
            }
            continue;
        }
        let rank = s.rank(i);
        if best.is_none_or(|(_, r)| rank < r) {
            best = Some((i, rank));
        }
    }
    best.map(|(i, _)| i)
}

/// Turns the head the pipeline answered with into HEADERS: its status and its fields as
/// their spans give them (recorded as the head was rendered; connection-specific fields,
/// RFC 9113 §8.2.2, never recorded), each name lowercased (§8.2.1). Where the head holds the
/// body's cache entry's `Content-Length` or validator fields byte for byte, the entry's HPACK
/// encoding of them is copied instead ([`FileEntry::h2_fields`]: the same bytes the encoder
/// would write).
#[allow(clippy::too_many_arguments)]
fn head_to_headers(
    head: &[u8],
    fields: &FieldSpans,
    entry: Option<&FileEntry>,
    names: &mut Vec<u8>,
    spans: &mut Vec<[usize; 5]>,
    session: &mut Session,
    id: u32,
    end: bool,
) {
    names.clear();
    spans.clear();
    // The end of the last block copied pre-encoded: the fields before it are in that copy.
    let mut copied_to = 0;
    for f in fields.spans(head) {
        let at = f.name.0 as usize;
        if at < copied_to {
            continue;
        }
        if let Some(e) = entry {
            let (pre, (from, to)) = match f.tag {
                Tag::EntryLength => (e.length_field(), (0, e.h2_validators_at)),
                Tag::EntryValidators => (e.validator_fields.bytes(), (e.h2_validators_at, e.h2_fields.len())),
                Tag::Plain => (&[][..], (0, 0)),
            };
            if !pre.is_empty() && head[at..].starts_with(pre) {
                spans.push([ENCODED, from, to, 0, 0]);
                copied_to = at + pre.len();
                continue;
            }
        }
        let n = names.len();
        names.extend(f.name(head).iter().map(u8::to_ascii_lowercase));
        spans.push([PAIR, n, names.len(), f.value.0 as usize, f.value.1 as usize]);
    }
    let names = &*names;
    let pre = entry.map_or(&[][..], |e| &*e.h2_fields);
    let fields_out = spans.iter().map(|&[kind, a, b, c, d]| match kind {
        ENCODED => Field::Encoded(&pre[a..b]),
        _ => Field::Pair(&names[a..b], &head[c..d]),
    });
    session.send_headers(id, fields.status(), fields_out, end);
}

/// Appends the stream's next `n` bytes (multipart framing, then body; at most
/// [`Stream::left`]) to `out` as a DATA payload, or, given `splices` (a plain connection),
/// records the bytes of a mapped or fd body as a [`Splice`] after what `out` holds. `Err`: the file
/// changed under us (the entry is dropped from the cache) or could not be read; `out` may
/// then hold part of the payload.
fn emit(
    cx: &mut Ctx,
    s: &mut Stream,
    out: &mut Vec<u8>,
    n: usize,
    splices: Option<(&mut VecDeque<Splice>, &mut usize)>,
) -> Result<(), ()> {
    let ex = &mut s.ex;
    let b = ex.take_framing(out, n);
    if b == 0 {
        return Ok(());
    }
    // A plain connection sends a mapping's bytes (a file's own, or one made for an fd-backed
    // file: its size is the entry's, so the range is inside it) as a splice, not a copy.
    let splice = match (&ex.body, splices) {
        // (A range outside the mapping is copied instead, which finds it so: EFAULT.)
        (Body::Mapped { entry, pos, end }, Some(sp))
            if *pos + b <= *end && entry.body.bytes().is_some_and(|bytes| *pos + b <= bytes.len()) =>
        {
            Some((sp, entry, *pos as u64))
        }
        (Body::File { entry, pos, .. }, Some(sp)) if entry.spliceable().is_some() => Some((sp, entry, *pos)),
        _ => None,
    };
    let result = match splice {
        Some(((splices, spliced), entry, start)) => {
            splices.push_back(Splice { at: out.len(), entry: entry.clone(), start, len: b });
            *spliced += b;
            Ok(())
        }
        None => ex.body.append_to(out, b),
    };
    ex.body_handed(cx, result, b)
}

/// A stream's response is done (`complete`) or abandoned: log it, count it, release what
/// it holds. Returns its box, for [`H2::spare`].
fn finish_stream(cx: &mut Ctx, mut s: Box<Stream>, complete: bool) -> Box<Stream> {
    if complete {
        s.ex.account(cx);
    } else {
        // Its HEADERS were queued when the stream was answered.
        s.ex.account_aborted(cx, true);
    }
    cx.counters.http2_requests += 1;
    s.ex.end_transfer(cx);
    s
}
